"""Input checks shared by the core: each failure names the value, what was expected and a fix."""

from __future__ import annotations

import torch

__all__ = ["check_matrix", "check_scores", "chunk_rows", "rankable"]

# Work on about this many elements at a time so intermediate arrays stay in the CPU cache.
CHUNK_ELEMENTS = 1 << 20


# Types torch only stores: sub-byte integers, raw bits and packed fp4 have no arithmetic on the CPU.
_STORAGE_ONLY = frozenset(
    getattr(torch, name)
    for name in (
        *(f"int{b}" for b in range(1, 8)),
        *(f"uint{b}" for b in range(1, 8)),
        "bits1x8",
        "bits2x4",
        "bits4x2",
        "bits8",
        "bits16",
        "float4_e2m1fn_x2",
    )
    if isinstance(getattr(torch, name, None), torch.dtype)
)


def _describe(t: torch.Tensor) -> str:
    return f"tensor of shape {tuple(t.shape)}, dtype {t.dtype}, device {t.device.type}"


def check_matrix(tensor: object, what: str = "weight") -> torch.Tensor:
    """Return ``tensor`` if it is a usable 2-D tensor, else raise a readable error.

    Parameters
    ----------
    tensor : object
        What the user passed.
    what : str
        How to call it in the message ("weight", "mask", "scores").

    Raises
    ------
    TypeError
        Not a tensor (a hint says how to get one from a module).
    ValueError
        Not 2-D, empty or on the meta device.
    """
    if isinstance(tensor, torch.nn.Module):
        raise TypeError(
            f"{what} must be a tensor, got the module {type(tensor).__name__}; "
            f"pass its weight, e.g. layer.weight.detach()"
        )
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"{what} must be a torch.Tensor, got {type(tensor).__name__}; "
            f"convert with torch.as_tensor(...)"
        )
    if tensor.is_meta:
        raise ValueError(
            f"{what} is a meta {_describe(tensor)} with no values; "
            f"load or materialise the model first (e.g. model.to_empty(device='cpu') and load weights)"
        )
    if tensor.is_sparse or tensor.layout != torch.strided:
        raise TypeError(f"{what} must be a dense (strided) tensor, got layout {tensor.layout}")
    if tensor.dim() != 2:
        hint = (
            "for a Conv weight use weight.flatten(1); for a batch of matrices, check them one by one"
            if tensor.dim() > 2
            else "reshape it to (out_features, in_features)"
        )
        raise ValueError(
            f"{what} must be 2-D (out_features, in_features), got a {tensor.dim()}-D "
            f"{_describe(tensor)}; {hint}"
        )
    if tensor.dtype in _STORAGE_ONLY:
        raise TypeError(
            f"{what} has dtype {tensor.dtype}, a storage-only type torch cannot compute with; "
            f"unpack or dequantize it to float16, bfloat16 or float32 first"
        )
    if tensor.numel() == 0:
        raise ValueError(
            f"{what} is empty ({_describe(tensor)}); there is nothing to prune or check"
        )
    return tensor


def rankable(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in a dtype torch can compare and sort: 8-bit floats become float32 (exactly).

    torch has no comparisons, sorting or ``isfinite`` for the fp8 types on the CPU; every fp8
    value is a float32 value, so ranking the float32 copy gives the same order and ties.

    Parameters
    ----------
    tensor : torch.Tensor
        The tensor.

    Returns
    -------
    torch.Tensor

    Examples
    --------
    >>> rankable(torch.ones(2, dtype=torch.float8_e4m3fn)).dtype
    torch.float32
    >>> rankable(torch.ones(2, dtype=torch.float16)).dtype
    torch.float16
    """
    if tensor.is_floating_point() and tensor.element_size() == 1:
        return tensor.float()
    return tensor


def check_scores(scores: torch.Tensor, what: str = "scores") -> None:
    """Scores must be real floating point and finite.

    Parameters
    ----------
    scores : torch.Tensor
        The scores.
    what : str, optional
        Their name, for the message.
    """
    scores = rankable(scores)
    if scores.dtype == torch.bool or not (
        scores.is_floating_point()
        or scores.dtype in (torch.int8, torch.int16, torch.int32, torch.int64)
    ):
        raise TypeError(
            f"{what} must be numbers to rank, got dtype {scores.dtype}; "
            f"pass floating-point importance scores (a bool mask is a result, not a score)"
        )
    if scores.is_floating_point():
        bad = ~torch.isfinite(scores)
        if bool(bad.any()):
            first = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"{what} holds {int(bad.sum())} NaN or infinite value(s), the first at {first}; "
                f"clean the tensor (e.g. torch.nan_to_num) or find where it diverged"
            )


def chunk_rows(rows: int, cols: int) -> int:
    """How many rows to process at once so a chunk holds about :data:`CHUNK_ELEMENTS` elements.

    Parameters
    ----------
    rows, cols : int
        The matrix's shape.

    Returns
    -------
    int
    """
    return max(1, min(rows, CHUNK_ELEMENTS // max(cols, 1)))
