"""The one table of dtype names: parse a name (``"bf16"``) and name a dtype (``"bfloat16"``).

Every module that reads a dtype from a user, a CLI flag or a stored row goes through
:func:`parse_dtype`; every module that writes one goes through :func:`dtype_name`, so the
names in the store, the reports and the error messages are the same everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["DTYPES", "SPARSE_DTYPES", "dtype_name", "parse_dtype"]

#: Names (and common aliases) a user may write, each to its ``torch.dtype``.
DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "int8": torch.int8,
    "fp8": torch.float8_e4m3fn,
    "e4m3": torch.float8_e4m3fn,
    "float8_e4m3fn": torch.float8_e4m3fn,
}
#: The dtypes with a 2:4 sparse tensor-core kernel (16-bit floats, int8 and fp8 e4m3).
SPARSE_DTYPES: tuple[torch.dtype, ...] = (
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.float8_e4m3fn,
)


def dtype_name(dtype: object) -> str:
    """The short name of ``dtype``: ``torch.bfloat16`` and ``"bf16"`` both give ``"bfloat16"``.

    A name that is not in :data:`DTYPES` is returned without its ``torch.`` prefix.

    Parameters
    ----------
    dtype : object
        A ``torch.dtype`` or a name.

    Returns
    -------
    str

    Examples
    --------
    >>> dtype_name(torch.float16), dtype_name("bf16"), dtype_name("torch.int8")
    ('float16', 'bfloat16', 'int8')
    """
    key = str(dtype).removeprefix("torch.")
    found = DTYPES.get(key.lower()) if isinstance(dtype, str) else None
    return str(found).removeprefix("torch.") if found is not None else key


def parse_dtype(
    dtype: object, allowed: Iterable[torch.dtype] | None = None, what: str = "dtype"
) -> torch.dtype:
    """A ``torch.dtype`` from a dtype or a name such as ``"bf16"``, ``"torch.int8"`` or ``"fp8"``.

    Parameters
    ----------
    dtype : torch.dtype or str
        The dtype, or its name (any case, with or without ``torch.``).
    allowed : iterable of torch.dtype, optional
        The dtypes the caller can use; any other raises.
    what : str
        What the value is, for the error message (``"--dtype"``, ``"dtype"``).

    Raises
    ------
    ValueError
        For a name that is not a dtype, or a dtype outside ``allowed``.

    Examples
    --------
    >>> parse_dtype("bf16")
    torch.bfloat16
    >>> parse_dtype("float32", allowed=SPARSE_DTYPES)
    Traceback (most recent call last):
    ...
    ValueError: dtype 'float32' is not one this can use; expected one of float16, bfloat16, int8, float8_e4m3fn
    """
    if isinstance(dtype, torch.dtype):
        found = dtype
    elif isinstance(dtype, str) and dtype.lower().removeprefix("torch.") in DTYPES:
        found = DTYPES[dtype.lower().removeprefix("torch.")]
    else:
        names = sorted(set(DTYPES)) if allowed is None else _names(allowed)
        raise ValueError(
            f"unknown {what} {dtype!r}; expected one of {names}. "
            "Hint: a name such as 'float16', 'bf16' or 'int8', or a torch.dtype."
        )
    if allowed is not None and found not in tuple(allowed):
        raise ValueError(
            f"{what} {dtype!r} is not one this can use; expected one of "
            f"{', '.join(_names(allowed))}"
        )
    return found


def _names(dtypes: Iterable[torch.dtype]) -> list[str]:
    return [dtype_name(d) for d in dtypes]
