"""torch's own cuSPARSELt ops (``torch._cslt_compress`` / ``torch._cslt_sparse_mm``).

Every call rebuilds cuSPARSELt's descriptors and plan inside torch, which is why the eager path
costs hundreds of microseconds of host time; the explorer uses it for side-by-side comparison.
The op's trailing arguments changed between torch 2.7 (``split_k_one_kernel: bool``) and 2.8
(``split_k_mode: int``); :func:`sparse_mm` passes only what the installed schema has.
"""

from __future__ import annotations

from functools import lru_cache

import torch

__all__ = ["available", "compress", "schema_version", "sparse_mm"]


def available() -> bool:
    """True if this torch build has the ``_cslt`` ops and cuSPARSELt."""
    return hasattr(torch, "_cslt_sparse_mm") and bool(
        getattr(getattr(torch.backends, "cusparselt", None), "is_available", lambda: False)()
    )


@lru_cache(maxsize=1)
def schema_version() -> str:
    """``"2.8"`` if the op takes ``split_k_mode``, ``"2.7"`` if ``split_k_one_kernel``."""
    try:
        schema = str(torch.ops.aten._cslt_sparse_mm.default._schema)
    except (AttributeError, RuntimeError):
        return "unknown"
    if "split_k_mode" in schema:
        return "2.8"
    if "split_k_one_kernel" in schema:
        return "2.7"
    return "older"


def compress(weight: torch.Tensor) -> torch.Tensor:
    """``torch._cslt_compress`` with a clear error for CPU tensors.

    Parameters
    ----------
    weight : torch.Tensor
        The 2:4 CUDA weight, ``[out, in]``.

    Returns
    -------
    torch.Tensor
        The compressed weight.

    Examples
    --------
    >>> w = torch.tensor([[1.0, 0.0, -2.0, 0.0] * 64] * 64, device="cuda")  # doctest: +GPU
    >>> compress(w.half()).dtype
    torch.float16
    """
    if weight.device.type != "cuda":
        raise ValueError(f"weight is on {weight.device}; torch's cuSPARSELt needs CUDA tensors")
    return torch._cslt_compress(weight.contiguous())


def sparse_mm(
    compressed: torch.Tensor,
    x: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    alg_id: int = 0,
    split_k: int = 1,
) -> torch.Tensor:
    """``x @ W^T`` (+ bias) through ``torch._cslt_sparse_mm``, output ``[tokens, out]``.

    Parameters
    ----------
    compressed : torch.Tensor
        From :func:`compress`.
    x : torch.Tensor
        ``[tokens, in]`` CUDA input.
    bias : torch.Tensor, optional
        ``[out]`` vector added.
    out_dtype : torch.dtype, optional
        The output's dtype (default: the op's).
    alg_id : int, default 0
        Algorithm config id (0: the op's default).
    split_k : int, default 1
        Split-K factor (1: none).

    Returns
    -------
    torch.Tensor
        ``[tokens, out]``.

    Examples
    --------
    >>> w = torch.tensor([[1.0, 0.0, -2.0, 0.0] * 64] * 64, device="cuda").half()  # doctest: +GPU
    >>> x = torch.randn(32, 256, dtype=torch.half, device="cuda")
    >>> torch.allclose(sparse_mm(compress(w), x), x @ w.T, rtol=1e-2, atol=1e-1)
    True
    """
    kwargs = {"bias": bias, "out_dtype": out_dtype, "transpose_result": True}
    if alg_id:
        kwargs["alg_id"] = alg_id
    if split_k != 1:
        kwargs["split_k"] = split_k
        if schema_version() == "2.7":
            kwargs["split_k_one_kernel"] = True
    return torch._cslt_sparse_mm(compressed, x.t(), **kwargs)
