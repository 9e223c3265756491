"""Algorithm tuning for cuSPARSELt plans, done safely and remembered.

cuSPARSELt's default algorithm is often far from its best one (on an H100 with cuSPARSELt 0.8,
bf16 at 4096 x 4096 with 1024 tokens: 0.82x dense with the default, 1.39x with the best), but
trying configs can kill the CUDA context (``matmul_search`` hit an illegal instruction on small
bf16 problems). So configs are only ever tried in a child process
(:func:`explorer.gpu.library.search.search_algorithm`), and what wins is kept here: in memory, and
in a JSON file under the explorer's cache folder keyed by GPU and library version, so later
processes reuse it. :class:`~explorer.gpu.SparseLinear` then times the remembered config
against the default in-process (both known to be safe) and keeps the faster correct one.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch

from explorer.dtypes import dtype_name, parse_dtype
from explorer.gpu.library import cusparselt as C

__all__ = [
    "TUNED_LAYOUTS",
    "Problem",
    "SearchStats",
    "clear",
    "deferred_search",
    "known_config",
    "likely_configs",
    "lookup",
    "problem_key",
    "remember",
    "search_counts",
    "search_stats",
    "shipped_tables",
    "table_path",
    "tunable_dtype",
    "tune_weight",
]

#: Layouts tuned by default: ``Y`` row-major and ``Y^T`` from an input in the natural layout
#: (``rc``/``rr``, an input that is a transposed view, are tuned for the fused MLP's down
#: projection)
TUNED_LAYOUTS = ("cc", "cr")

#: At most this many token counts of one shape are searched by :func:`search_counts`; the
#: others take the config found at the nearest searched count (:func:`lookup`), which each
#: layer still times against the default before using it.
MAX_SEARCHED_COUNTS = 3

_LOCK = threading.Lock()
_TABLE: dict[str, int] | None = None
_PENDING: list[list] = []  # the problems of the open deferred_search() blocks, innermost last


def table_path() -> Path:
    """The JSON file of tuned algorithms (under ``$SPARSITY_EXPLORER_CACHE``).

    Examples
    --------
    >>> table_path().name
    'cusparselt-algorithms.json'
    """
    from explorer.results.store.location import cache_dir

    return cache_dir() / "cusparselt-algorithms.json"


def _device_id(device: int) -> str:
    try:
        version = C.library_version()
    except Exception:  # no library to ask: the table key says so instead of failing a lookup
        version = "unknown"
    return f"{torch.cuda.get_device_name(device)}|cusparselt {version}"


def _key(device: int, m, n, k, dtype, out_dtype, layout, epilogue) -> str:
    return "|".join(
        [_device_id(device), str(m), str(n), str(k), str(dtype), str(out_dtype), layout, epilogue]
    )


def problem_key(problem: Problem, device: int = 0) -> str:
    """The table's key of ``problem`` on ``device`` (its output in the weight's dtype).

    Parameters
    ----------
    problem : Problem
        The problem.
    device : int, default 0
        The CUDA device index (its name and the library's version are part of the key).

    Returns
    -------
    str
        The key :func:`known_config` and :func:`remember` take.
    """
    dtype = tunable_dtype(problem.dtype)
    return _key(
        device, problem.m, problem.n, problem.k, dtype, dtype, problem.layout, problem.epilogue
    )


def known_config(key: str) -> int | None:
    """The config id the tables hold for ``key`` (:func:`problem_key`), or None.

    Parameters
    ----------
    key : str
        A table key.

    Returns
    -------
    int or None
        The remembered config id.
    """
    with _LOCK:
        return _table().get(key)


#: At most this many config ids are put first by :func:`likely_configs`.
LIKELY_CONFIGS = 6


def likely_configs(device: int, dtype, layout: str, tokens: int) -> tuple[int, ...]:
    """The config ids most often fastest in the tables for problems like this one.

    Like means the same layout and token regime (fewer than 256 tokens, or more) on this GPU
    and library version; ids that won for the same dtype rank before those that won for
    another, then by how often they won. Where this GPU has no entries, every GPU's count.
    A search tries these first (:func:`explorer.gpu.library.search.config_order`), so a short
    time budget still tries the configs likeliest to win.

    Parameters
    ----------
    device : int
        The CUDA device index.
    dtype : torch.dtype or str
        The problem's dtype.
    layout : str
        The operand layouts, e.g. ``"cc"``.
    tokens : int
        The problem's (padded) token count.

    Returns
    -------
    tuple of int
        At most :data:`LIKELY_CONFIGS` ids, likeliest first.
    """
    dtype = str(tunable_dtype(dtype) if isinstance(dtype, str) else dtype)
    here = _device_id(device) + "|"
    large = tokens >= 256
    with _LOCK:
        entries = list(_table().items())
    counts: dict[bool, dict] = {True: {}, False: {}}
    for local in (True, False):
        for key, alg in entries:
            parts = key.split("|")
            if len(parts) != 9 or key.startswith(here) != local or parts[7] != layout:
                continue
            if not parts[3].isdigit() or (int(parts[3]) >= 256) != large:
                continue
            same, total = counts[local].get(alg, (0, 0))
            counts[local][alg] = (same + (parts[5] == dtype), total + 1)
    found = counts[True] or counts[False]
    ranked = sorted(found, key=lambda a: (-found[a][0], -found[a][1], a))
    return tuple(ranked[:LIKELY_CONFIGS])


def shipped_tables() -> list[Path]:
    """The tables that ship inside the package (``explorer/data/cusparselt-*.json``).

    Generated by ``sparsity-explorer tune`` on the GPUs they name; the user's own table wins over
    them.

    Examples
    --------
    >>> "cusparselt-h100.json" in [p.name for p in shipped_tables()]
    True
    """
    data = Path(__file__).resolve().parents[2] / "data"  # the explorer package
    return sorted(data.glob("cusparselt-*.json"))


def _read(path: Path) -> dict[str, int]:
    try:
        return {str(k): int(v) for k, v in json.loads(path.read_text()).items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        warnings.warn(f"ignoring the unreadable tuning table {path}: {exc}", stacklevel=3)
        return {}


def _table() -> dict[str, int]:
    global _TABLE
    if _TABLE is None:
        table: dict[str, int] = {}
        for path in shipped_tables():
            table.update(_read(path))
        table.update(_read(table_path()))
        _TABLE = table
    return _TABLE


def lookup(
    device: int, m, n, k, dtype, out_dtype, layout, epilogue="none", nearest: bool = False
) -> int | None:
    """The tuned config id for this problem, or None if it was never tuned here.

    With ``nearest=True`` a problem never tuned at ``n`` tokens takes the config tuned for the
    same shape, dtypes and layout at the nearest token count (by ratio, within a factor of 8):
    a candidate the caller must still time against the default, never a verdict.

    Parameters
    ----------
    device : int
        The CUDA device index.
    m, n, k : int
        Output features, (padded) tokens and input features.
    dtype, out_dtype : torch.dtype or str
        The weight's and the output's dtype.
    layout : str
        The operand layouts, e.g. ``"cc"``.
    epilogue : str, default "none"
        The fused epilogue.
    nearest : bool, default False
        Fall back to the nearest token count tuned.

    Returns
    -------
    int or None
        The config id, or None.
    """
    key = _key(device, m, n, k, dtype, out_dtype, layout, epilogue)
    with _LOCK:
        table = _table()
        found = table.get(key)
        if found is not None or not nearest:
            return found
        head = "|".join([_device_id(device), str(m)]) + "|"
        tail = "|" + "|".join([str(k), str(dtype), str(out_dtype), layout, epilogue])
        best, best_gap = None, math.log(8.0)
        for other, alg in table.items():
            if not (other.startswith(head) and other.endswith(tail)):
                continue
            tokens = other[len(head) : len(other) - len(tail)]
            if not tokens.isdigit() or int(tokens) < 1:
                continue
            gap = abs(math.log(int(tokens) / n))
            if gap < best_gap:
                best, best_gap = alg, gap
        return best


def search_counts(counts: Iterable[int], limit: int = MAX_SEARCHED_COUNTS) -> tuple[int, ...]:
    """The token counts worth an algorithm search, out of the counts a model runs at.

    Every count is kept when there are at most ``limit``; otherwise the largest, the smallest
    and the counts nearest to evenly spaced points between them (by ratio), so a search stays
    bounded per shape however many counts are asked for; the others reuse the nearest
    searched count's config (:func:`lookup` with ``nearest=True``).

    Parameters
    ----------
    counts : iterable of int
        The token counts; those below 1 are dropped.
    limit : int, default MAX_SEARCHED_COUNTS
        The most counts kept.

    Returns
    -------
    tuple of int
        The counts kept, ascending.

    Examples
    --------
    >>> search_counts([4096, 16])
    (16, 4096)
    >>> search_counts([1, 8, 32, 256, 1024])
    (1, 32, 1024)
    """
    found = sorted({int(c) for c in counts if int(c) > 0})
    if len(found) <= limit or limit < 2:
        return tuple(found[-limit:]) if limit >= 1 else ()
    lo, hi = math.log(found[0]), math.log(found[-1])
    keep = {found[0], found[-1]}
    for i in range(1, limit - 1):
        target = lo + (hi - lo) * i / (limit - 1)
        keep.add(min(found, key=lambda c: abs(math.log(c) - target)))
    return tuple(sorted(keep))


@contextlib.contextmanager
def deferred_search(progress: bool = False, budget_s: float | None = None) -> Iterator[list]:
    """Batch the searches :func:`tune_weight` asks for inside the block into one child process.

    They run at the block's end
    (:func:`explorer.gpu.library.batch_search.tune_problems`), instead of one child per problem.

    A model's layers are built inside the block and measured after it: a layer looks its
    tuned configs up when it first times its routes, so the batch lands in time. The searches
    count in :func:`search_stats` like any other. Blocks nest; the outermost one searches.

    Parameters
    ----------
    progress : bool, default False
        Show a progress bar while the batch is searched.
    budget_s : float, optional
        Seconds the whole batch may take (the outermost block's; default: each problem's own
        bound only).

    Yields
    ------
    list of Problem
        The problems collected so far.

    Examples
    --------
    >>> with deferred_search() as pending:
    ...     pass
    >>> pending
    []
    """
    pending: list = []
    with _LOCK:
        _PENDING.append(pending)
    try:
        yield pending
    finally:
        with _LOCK:
            _PENDING.remove(pending)
            outer = _PENDING[-1] if _PENDING else None
        if outer is not None:
            outer.extend(pending)
        elif pending and torch.cuda.is_available():
            from explorer.gpu.library.batch_search import tune_problems

            began = time.perf_counter()
            found = None
            try:
                found = tune_problems(pending, progress=progress, budget_s=budget_s)
            finally:
                with _LOCK:
                    _SEARCHES[0] += len(pending)
                    _SEARCHES[1] += time.perf_counter() - began
                    _SEARCHES[2] += len(getattr(found, "cut_short", ()))
                    _SEARCHES[2] += len(getattr(found, "not_started", ()))
                    _SEARCHES[3] += len(getattr(found, "crashes", ()))


def clear(disk: bool = False) -> None:
    """Forget the tuned algorithms (in memory; also the file with ``disk=True``).

    Parameters
    ----------
    disk : bool, default False
        Also delete the table's file.
    """
    global _TABLE
    with _LOCK:
        _TABLE = {}
        if disk:
            table_path().unlink(missing_ok=True)


def remember(found: dict[str, int], path: Path | None = None, persist: bool = True) -> None:
    """Add ``found`` to the table in memory and to the user's file (or ``path``).

    The file is replaced whole through a temporary file, so a reader never sees half of it; a
    cache folder that cannot be written keeps the entries for this process, with a warning.

    Parameters
    ----------
    found : dict
        ``{key: config id}``, keys from :func:`problem_key`.
    path : Path, optional
        The table file (default: :func:`table_path`).
    persist : bool, default True
        False: for this process only (a search cut short, which a later process searches again).
    """
    with _LOCK:
        _table().update(found)
        if not persist:
            return
        path = path or table_path()
        own = _read(path)
        own.update(found)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(own, indent=0, sort_keys=True))
            tmp.replace(path)
        except OSError as exc:  # a read-only cache: the table still lives for this process
            warnings.warn(f"tuned algorithms not saved to {path}: {exc}", stacklevel=3)


_SEARCHES = [0, 0.0, 0, 0]  # searches run in this process, seconds, cut short, crashes


class SearchStats(NamedTuple):
    """What the algorithm searches of this process have done so far (:func:`search_stats`).

    ``searches`` counts problems (shape, tokens and layout) no table knew, ``seconds`` their
    time, ``cut_short`` those a time bound stopped early, ``crashes`` configs that killed a child.
    """

    searches: int
    seconds: float
    cut_short: int
    crashes: int


def search_stats() -> SearchStats:
    """The algorithm searches this process has run so far.

    Returns
    -------
    SearchStats
        Counts and seconds since the process started; subtract two to see one call's.

    Examples
    --------
    >>> stats = search_stats()
    >>> stats.searches >= 0 and stats.seconds >= 0
    True
    """
    with _LOCK:
        return SearchStats(
            int(_SEARCHES[0]), float(_SEARCHES[1]), int(_SEARCHES[2]), int(_SEARCHES[3])
        )


#: Weights with fewer entries than this are never searched: their product takes a few
#: microseconds, which launch costs dominate whatever the algorithm, and cuSPARSELt's configs
#: crash most often on such small shapes (each crash costs the search a child restart).
SEARCH_MIN_WEIGHTS = 1 << 18


def worth_searching(m: int, k: int) -> bool:
    """Whether an ``m x k`` weight is large enough to search its algorithm for.

    Parameters
    ----------
    m, k : int
        The weight's rows and columns.

    Returns
    -------
    bool
        True where ``m * k`` is at least :data:`SEARCH_MIN_WEIGHTS`.

    Examples
    --------
    >>> worth_searching(4096, 4096), worth_searching(1024, 512), worth_searching(512, 256)
    (True, True, False)
    """
    return m * k >= SEARCH_MIN_WEIGHTS


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
    out_dtype : torch.dtype, optional
        The output's dtype (default: the first cuSPARSELt allows for ``weight``'s dtype).
    epilogue : {"none", "relu", "gelu"}
        The epilogue fused into the plans.
    layouts : iterable of str
        Operand layouts to tune.

    Returns
    -------
    dict
        ``{(padded tokens, layout): config id}`` of what was found (and remembered).

    Examples
    --------
    >>> from explorer import make_mask
    >>> w = torch.randn(1024, 512, dtype=torch.half, device="cuda")  # doctest: +GPU
    >>> w = w.masked_fill(~make_mask(w, "2:4"), 0)
    >>> sorted(tune_weight(w, tokens=[1024], layouts=["cc"]))
    [(1024, 'cc')]
    """
    from explorer.gpu.library.search import search_algorithm

    dtype = weight.dtype
    out_dtype = out_dtype or C.CUSPARSELT_DTYPES[dtype][0]
    dev = weight.device.index or 0
    m, k = weight.shape
    found: dict[tuple[int, str], int] = {}
    searching = worth_searching(m, k)  # else: the tables or the library's default algorithm
    for t in tokens:
        n = C.padded_tokens(int(t), dtype)
        for lay in layouts:
            key = _key(dev, m, n, k, dtype, out_dtype, lay, epilogue)
            with _LOCK:
                known = _table().get(key)
                pending = _PENDING[-1] if _PENDING else None
            if known is not None:
                found[(n, lay)] = known
                continue
            if not searching:
                continue
            if pending is not None and out_dtype == dtype and dev == 0:
                # searched with the rest of the model when the deferred_search block ends
                pending.append(Problem(m, n, k, dtype_name(dtype), lay, epilogue))
                continue
            began = time.perf_counter()
            try:
                res = search_algorithm(
                    None, weight, n, epilogue=epilogue, out_dtype=out_dtype, layout=lay
                )
            except RuntimeError:  # no config reproduced dense: keep the default
                continue
            finally:
                with _LOCK:
                    _SEARCHES[0] += 1
                    _SEARCHES[1] += time.perf_counter() - began
            remember({key: int(res["alg"])})
            found[(n, lay)] = int(res["alg"])
    return found


@dataclass(frozen=True)
class Problem:
    """One matmul to tune: ``m`` outputs, ``n`` (padded) tokens, ``k`` inputs.

    Examples
    --------
    >>> Problem(4096, 4096, 4096, "bfloat16")
    Problem(4096x4096 @ 4096 tokens, bfloat16, cc)
    """

    m: int
    n: int
    k: int
    dtype: str = "float16"
    layout: str = "cc"
    epilogue: str = "none"

    def __repr__(self) -> str:
        return f"Problem({self.m}x{self.k} @ {self.n} tokens, {self.dtype}, {self.layout})"


def tunable_dtype(name: str) -> torch.dtype:
    """The torch dtype of ``name``, one cuSPARSELt can tune.

    Parameters
    ----------
    name : str
        A dtype name such as ``"bfloat16"`` or ``"int8"`` (see :func:`explorer.dtypes.parse_dtype`).

    Returns
    -------
    torch.dtype
        A key of :data:`explorer.gpu.library.cusparselt.CUSPARSELT_DTYPES`.

    Raises
    ------
    ValueError
        For a name that is not a dtype cuSPARSELt runs, naming the ones it does.
    """
    try:
        return parse_dtype(name, allowed=C.CUSPARSELT_DTYPES)
    except ValueError:
        names = ", ".join(dtype_name(d) for d in C.CUSPARSELT_DTYPES)
        raise ValueError(f"dtype {name!r} cannot be tuned; expected one of {names}") from None
