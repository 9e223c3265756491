"""How a sparse layer is built: the six build options, carried as one object.

``sparsify`` decides them once for a model and hands the same :class:`SparseOptions` to every
layer it builds (:meth:`~explorer.gpu.SparseLinear.from_linear`) and to the fused blocks
(:class:`~explorer.gpu.SparseQKV`, :class:`~explorer.gpu.SparseGatedMLP`), which pass it on to
their parts. Pure Python and torch dtypes: nothing here needs a GPU.

Examples
--------
>>> options = SparseOptions(decode=True, tune_tokens=[16, 4096])
>>> options
SparseOptions(dtype=auto, layout=auto, output=rows, decode, tune_tokens=(16, 4096))
>>> options.replace(dtype=torch.int8).dtype
torch.int8
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from explorer.dtypes import SPARSE_DTYPES, dtype_name

__all__ = ["LAYOUT_CHOICES", "OUTPUT_CHOICES", "SparseOptions"]

#: ``"auto"`` (chosen by measurement) or a fixed pair of operand layouts.
LAYOUT_CHOICES = ("auto", "cc", "cr", "rc", "rr")
#: ``"rows"``: a row-major output always; ``"any"``: a transposed view may be handed on.
OUTPUT_CHOICES = ("rows", "any")


def _name(dtype: torch.dtype | None) -> str:
    return "auto" if dtype is None else dtype_name(dtype)


@dataclass(frozen=True)
class SparseOptions:
    """The build options of a sparse layer (frozen: change one with :meth:`replace`).

    Attributes
    ----------
    dtype : torch.dtype, optional
        The matmul's input dtype: float16, bfloat16, int8 (per-channel weight and per-token
        activation scales) or float8_e4m3fn; None takes the weight's own 16-bit dtype
        (float16 for a float32 weight).
    layout : {"auto", "cc", "cr", "rc", "rr"}
        cuSPARSELt operand layouts (see :mod:`explorer.gpu.library.cusparselt`); ``"auto"`` chooses
        by measurement once per shape and token count.
    output : {"rows", "any"}
        ``"rows"`` always returns a row-major ``Y``; ``"any"`` may return a transposed view of
        ``Y^T``, for a consumer that reads it for free (another sparse layer, the SwiGLU kernel).
    decode : bool
        Also keep the weight in the explorer's compressed layout so that 1 to 64 tokens may run
        the decode kernel (:mod:`explorer.gpu.cuda.decode`).
    keep_dense : bool
        Also keep the dense masked weight, so that cuBLAS runs the token counts where it is
        faster (1.5x the memory of the dense layer in all).
    tune_tokens : tuple of int
        Token counts to search the cuSPARSELt algorithm for while the dense weight is at hand
        (see :mod:`explorer.gpu.library.tuning`); empty: the shipped tables or the default
        algorithm.

    Raises
    ------
    ValueError
        A layout, output or token count off its choices (the message names the choices).
    TypeError
        A dtype the sparse product does not take.

    Examples
    --------
    >>> SparseOptions(layout="diagonal")
    Traceback (most recent call last):
    ...
    ValueError: layout 'diagonal' unknown; expected one of ('auto', 'cc', 'cr', 'rc', 'rr')
    """

    dtype: torch.dtype | None = None
    layout: str = "auto"
    output: str = "rows"
    decode: bool = False
    keep_dense: bool = False
    tune_tokens: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype not in SPARSE_DTYPES:
            raise TypeError(
                f"dtype {self.dtype} is not supported; expected one of "
                f"{', '.join(_name(d) for d in SPARSE_DTYPES)}. Hint: keep this layer dense."
            )
        if self.layout not in LAYOUT_CHOICES:
            raise ValueError(f"layout {self.layout!r} unknown; expected one of {LAYOUT_CHOICES}")
        if self.output not in OUTPUT_CHOICES:
            raise ValueError(f"output {self.output!r} unknown; expected one of {OUTPUT_CHOICES}")
        tokens = tuple(self.tune_tokens)
        bad = [t for t in tokens if isinstance(t, bool) or not isinstance(t, int) or t < 1]
        if bad:
            raise ValueError(
                f"tune_tokens must be positive integers, got {bad[0]!r} in {tokens!r}. "
                "Hint: tune_tokens=(16, 4096)."
            )
        object.__setattr__(self, "tune_tokens", tokens)
        object.__setattr__(self, "decode", bool(self.decode))
        object.__setattr__(self, "keep_dense", bool(self.keep_dense))

    def replace(self, **changes) -> SparseOptions:
        """A copy with ``changes`` applied (checked like a new one).

        Examples
        --------
        >>> SparseOptions().replace(keep_dense=True).keep_dense
        True
        """
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise TypeError(
                f"unknown sparse layer option {unknown[0]!r}; expected one of "
                f"{', '.join(f.name for f in dataclasses.fields(self))}"
            )
        return dataclasses.replace(self, **changes)

    def __repr__(self) -> str:
        parts = [f"dtype={_name(self.dtype)}", f"layout={self.layout}", f"output={self.output}"]
        parts += [name for name in ("decode", "keep_dense") if getattr(self, name)]
        if self.tune_tokens:
            parts.append(f"tune_tokens={self.tune_tokens}")
        return f"SparseOptions({', '.join(parts)})"
