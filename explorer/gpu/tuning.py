"""Algorithm tuning for cuSPARSELt plans, done safely and remembered.

cuSPARSELt's default algorithm is often far from its best one (on an H100 with cuSPARSELt 0.8,
bf16 at 4096 x 4096 with 1024 tokens: 0.82x dense with the default, 1.39x with the best), but
trying configs can kill the CUDA context (``matmul_search`` hit an illegal instruction on small
bf16 problems). So configs are only ever tried in a child process
(:func:`explorer.gpu.search.search_algorithm`), and what wins is kept here: in memory, and in a
JSON file under the explorer's cache folder keyed by GPU and library version, so later
processes reuse it. :class:`~explorer.gpu.SparseLinear` then times the remembered config
against the default in-process (both known to be safe) and keeps the faster correct one.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from pathlib import Path

import torch

from explorer.gpu import cusparselt as C

__all__ = ["TUNED_LAYOUTS", "clear", "lookup", "table_path", "tune_weight"]

#: Layouts tuned: both write ``Y^T``, where Hopper's fast 16-bit kernels are (``cr`` for an
#: input in the natural layout, ``rr`` for a transposed one as a previous sparse layer returns)
TUNED_LAYOUTS = ("cr", "rr")

_LOCK = threading.Lock()
_TABLE: dict[str, int] | None = None


def table_path() -> Path:
    """The JSON file of tuned algorithms (under ``$SPARSITY_EXPLORER_CACHE``).

    Examples
    --------
    >>> table_path().name
    'cusparselt-algorithms.json'
    """
    from explorer.models.bundle import cache_dir

    return cache_dir() / "cusparselt-algorithms.json"


def _device_id(device: int) -> str:
    try:
        version = C.library_version()
    except Exception:
        version = "unknown"
    return f"{torch.cuda.get_device_name(device)}|cusparselt {version}"


def _key(device: int, m, n, k, dtype, out_dtype, layout, epilogue) -> str:
    return "|".join(
        [_device_id(device), str(m), str(n), str(k), str(dtype), str(out_dtype), layout, epilogue]
    )


def _table() -> dict[str, int]:
    global _TABLE
    if _TABLE is None:
        try:
            _TABLE = {str(k): int(v) for k, v in json.loads(table_path().read_text()).items()}
        except (OSError, ValueError, AttributeError):
            _TABLE = {}
    return _TABLE


def lookup(device: int, m, n, k, dtype, out_dtype, layout, epilogue="none") -> int | None:
    """The tuned config id for this problem, or None if it was never tuned here."""
    with _LOCK:
        return _table().get(_key(device, m, n, k, dtype, out_dtype, layout, epilogue))


def clear(disk: bool = False) -> None:
    """Forget the tuned algorithms (in memory; also the file with ``disk=True``)."""
    global _TABLE
    with _LOCK:
        _TABLE = {}
        if disk:
            table_path().unlink(missing_ok=True)


def _remember(key: str, alg: int) -> None:
    with _LOCK:
        table = _table()
        table[key] = alg
        try:
            path = table_path()
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(table, indent=0, sort_keys=True))
            tmp.replace(path)
        except OSError:
            pass  # a read-only cache: the table still lives for this process


def tune_weight(
    weight: torch.Tensor,
    tokens: Iterable[int],
    out_dtype: torch.dtype | None = None,
    epilogue: str = "none",
    layouts: Iterable[str] = TUNED_LAYOUTS,
) -> dict[tuple[int, str], int]:
    """Find the fastest correct config for ``weight`` at each token count, in a child process.

    Parameters
    ----------
    weight : torch.Tensor
        The CUDA 2:4 weight ``[out, in]`` in the matmul's dtype (float16 or bfloat16).
    tokens : iterable of int
        Token counts to tune for (each is padded as the layer pads it).
    layouts : iterable of str
        Operand layouts to tune.

    Returns
    -------
    dict
        ``{(padded tokens, layout): config id}`` of what was found (and remembered).

    Examples
    --------
    >>> tune_weight(w, tokens=[4096])  # doctest: +SKIP
    {(4096, 'cr'): 37, (4096, 'rr'): 37}
    """
    from explorer.gpu.search import search_algorithm

    dtype = weight.dtype
    out_dtype = out_dtype or C.CUSPARSELT_DTYPES[dtype][0]
    dev = weight.device.index or 0
    m, k = weight.shape
    found: dict[tuple[int, str], int] = {}
    for t in tokens:
        n = C.padded_tokens(int(t), dtype)
        for lay in layouts:
            key = _key(dev, m, n, k, dtype, out_dtype, lay, epilogue)
            with _LOCK:
                known = _table().get(key)
            if known is not None:
                found[(n, lay)] = known
                continue
            try:
                res = search_algorithm(
                    None, weight, n, epilogue=epilogue, out_dtype=out_dtype, layout=lay
                )
            except RuntimeError:  # no config reproduced dense: keep the default
                continue
            _remember(key, int(res["alg"]))
            found[(n, lay)] = int(res["alg"])
    return found
