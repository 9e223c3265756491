"""What a 2:4 sparse tensor-core matmul needs: the one home of the capability and shape rules.

The doctor (:mod:`explorer.diagnosis`), ``sparsify``
(:func:`explorer.gpu.swap.eligibility.eligibility`), the cuSPARSELt binding
(:mod:`explorer.gpu.library.cusparselt`) and the ONNX check (:mod:`explorer.checkpoint.onnx_check`)
all ask this module; none writes a multiple or a capability of its own. The rules:

* sparse tensor cores need compute capability :data:`MIN_CAPABILITY` (8.0, Ampere) or newer;
  fp8 e4m3 needs :data:`FP8_MIN_CAPABILITY` (8.9: Ada from cuSPARSELt 0.8, and Hopper);
* the sparse operand (the weight) needs rows and columns in multiples of
  :data:`SPARSE_MULTIPLE_16BIT` (16) for 16-bit inputs and :data:`SPARSE_MULTIPLE_8BIT` (32) for
  8-bit ones; the dense operand (the activations, one row a token) multiples of
  :data:`DENSE_MULTIPLE_16BIT` (8) and :data:`DENSE_MULTIPLE_8BIT` (16);
* only the dtypes of :data:`explorer.dtypes.SPARSE_DTYPES` have a 2:4 kernel;
* the weight must hold 2:4 along its inputs, so their count must be a multiple of
  :data:`GROUP` (4).

Each obstacle is an :class:`Obstacle`: a stable code, a sentence naming the value and what was
expected, and a fix. Pure: torch only, no GPU needed.

Examples
--------
>>> print(why_not_24(4112, 4096, torch.int8))
int8 sparse weights need rows and columns in multiples of 32 (cuSPARSELt's alignment rule); this layer has out_features=4112 (pad the layer to a multiple of 32, or keep it dense: explorer.sparsify skips it)
>>> why_not_24(4096, 4096, torch.float16, capability=(9, 0)) is None
True
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .checks import PatternReport
from .dtypes import SPARSE_DTYPES, dtype_name

__all__ = [
    "DENSE_MULTIPLE_8BIT",
    "DENSE_MULTIPLE_16BIT",
    "FP8_MIN_CAPABILITY",
    "GROUP",
    "MIN_CAPABILITY",
    "SPARSE_MULTIPLE_8BIT",
    "SPARSE_MULTIPLE_16BIT",
    "Obstacle",
    "alignment_obstacle",
    "capability_obstacles",
    "dense_multiple",
    "dtype_obstacle",
    "is_eight_bit",
    "layer_obstacles",
    "min_capability",
    "pattern_obstacle",
    "sparse_multiple",
    "token_multiple",
    "why_not_24",
]

#: Sparse tensor cores: compute capability 8.0 (Ampere) or newer.
MIN_CAPABILITY: tuple[int, int] = (8, 0)
#: fp8 (e4m3) 2:4 kernels: compute capability 8.9 (Ada, from cuSPARSELt 0.8) or newer (Hopper).
FP8_MIN_CAPABILITY: tuple[int, int] = (8, 9)
#: Rows and columns of a 16-bit (or wider) sparse operand are multiples of this.
SPARSE_MULTIPLE_16BIT = 16
#: Rows and columns of an 8-bit (int8, fp8) sparse operand are multiples of this.
SPARSE_MULTIPLE_8BIT = 32
#: A raw cuSPARSELt call takes a 16-bit dense operand (tokens) in multiples of this.
DENSE_MULTIPLE_16BIT = 8
#: A raw cuSPARSELt call takes an 8-bit dense operand (tokens) in multiples of this.
DENSE_MULTIPLE_8BIT = 16
#: 2:4 keeps 2 of every 4 consecutive inputs: the input count must be a multiple of this.
GROUP = 4


@dataclass(frozen=True)
class Obstacle:
    """Why a 2:4 sparse matmul cannot run: a stable code, a sentence and a fix.

    Attributes
    ----------
    code : str
        ``"capability"``, ``"fp8-capability"``, ``"dtype"``, ``"align"``, ``"width"`` or
        ``"not-24"`` (the doctor's finding codes).
    message : str
        What is wrong, naming the value and what was expected.
    fix : str
        What to do about it.
    """

    code: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.message} ({self.fix})"


def is_eight_bit(dtype: torch.dtype) -> bool:
    """Whether ``dtype`` takes the 8-bit rules (int8, fp8): one byte an element.

    Parameters
    ----------
    dtype : torch.dtype
        The dtype.

    Returns
    -------
    bool

    Examples
    --------
    >>> is_eight_bit(torch.int8), is_eight_bit(torch.float8_e4m3fn), is_eight_bit(torch.bfloat16)
    (True, True, False)
    """
    return dtype.itemsize == 1


def sparse_multiple(dtype: torch.dtype) -> int:
    """The multiple the sparse operand's (the weight's) rows and columns must be of.

    Parameters
    ----------
    dtype : torch.dtype
        The weight's dtype.

    Returns
    -------
    int

    Examples
    --------
    >>> sparse_multiple(torch.float16), sparse_multiple(torch.int8)
    (16, 32)
    >>> sparse_multiple(torch.float8_e4m3fn)
    32
    """
    return SPARSE_MULTIPLE_8BIT if is_eight_bit(dtype) else SPARSE_MULTIPLE_16BIT


def dense_multiple(dtype: torch.dtype) -> int:
    """The multiple a raw cuSPARSELt call takes the dense operand's token count in.

    Parameters
    ----------
    dtype : torch.dtype
        The operands' dtype.

    Returns
    -------
    int

    Examples
    --------
    >>> dense_multiple(torch.bfloat16), dense_multiple(torch.float8_e4m3fn)
    (8, 16)
    """
    return DENSE_MULTIPLE_8BIT if is_eight_bit(dtype) else DENSE_MULTIPLE_16BIT


def token_multiple(dtype: torch.dtype) -> int:
    """The multiple the explorer pads token counts to: the sparse operand's.

    It is a multiple of :func:`dense_multiple` too, so a padded count always meets the dense
    operand's rule.

    Parameters
    ----------
    dtype : torch.dtype
        The operands' dtype.

    Returns
    -------
    int

    Examples
    --------
    >>> token_multiple(torch.float16), token_multiple(torch.int8)
    (16, 32)
    """
    return sparse_multiple(dtype)


def min_capability(dtype: torch.dtype) -> tuple[int, int]:
    """The compute capability a 2:4 matmul in ``dtype`` needs, as ``(major, minor)``.

    Parameters
    ----------
    dtype : torch.dtype
        The matmul's dtype.

    Returns
    -------
    tuple of (int, int)

    Examples
    --------
    >>> min_capability(torch.float16), min_capability(torch.int8)
    ((8, 0), (8, 0))
    >>> min_capability(torch.float8_e4m3fn)
    (8, 9)
    """
    return FP8_MIN_CAPABILITY if is_eight_bit(dtype) and dtype.is_floating_point else MIN_CAPABILITY


def _dotted(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


def capability_obstacles(
    capability: tuple[int, int], dtype: torch.dtype, device_name: str = "this GPU"
) -> list[Obstacle]:
    """What a GPU of ``capability`` lacks for 2:4 matmuls in ``dtype`` (empty when nothing).

    Parameters
    ----------
    capability : (int, int)
        The GPU's compute capability.
    dtype : torch.dtype
        The dtype the matmul runs in.
    device_name : str
        The GPU's name, for the messages.

    Returns
    -------
    list of Obstacle
        ``"capability"`` below :data:`MIN_CAPABILITY`, ``"fp8-capability"`` for fp8 below
        :data:`FP8_MIN_CAPABILITY`.

    Examples
    --------
    >>> [o.code for o in capability_obstacles((7, 5), torch.float8_e4m3fn, "T4")]
    ['capability', 'fp8-capability']
    >>> print(capability_obstacles((8, 0), torch.float8_e4m3fn, "NVIDIA A100")[0])
    float8_e4m3fn needs compute capability 8.9+ (Ada from cuSPARSELt 0.8, Hopper); NVIDIA A100 is 8.0 (use dtype='int8' or 'bfloat16' here, or an 8.9+ GPU)
    >>> capability_obstacles((9, 0), torch.float8_e4m3fn)
    []
    """
    capability = tuple(capability)
    found = []
    if capability < MIN_CAPABILITY:
        found.append(
            Obstacle(
                "capability",
                f"{device_name} has compute capability {_dotted(capability)}; 2:4 sparse "
                f"tensor cores need {_dotted(MIN_CAPABILITY)} (Ampere) or newer",
                "run on an A100, L4, H100 or newer GPU, or keep the model dense on this one",
            )
        )
    needed = min_capability(dtype)
    if needed > MIN_CAPABILITY and capability < needed:
        found.append(
            Obstacle(
                "fp8-capability",
                f"{dtype_name(dtype)} needs compute capability {_dotted(needed)}+ (Ada from "
                f"cuSPARSELt 0.8, Hopper); {device_name} is {_dotted(capability)}",
                f"use dtype='int8' or 'bfloat16' here, or an {_dotted(needed)}+ GPU",
            )
        )
    return found


def dtype_obstacle(dtype: torch.dtype) -> Obstacle | None:
    """Why ``dtype`` has no 2:4 kernel, or None for the :data:`~explorer.dtypes.SPARSE_DTYPES`.

    Parameters
    ----------
    dtype : torch.dtype
        The weight's dtype.

    Returns
    -------
    Obstacle or None

    Examples
    --------
    >>> dtype_obstacle(torch.bfloat16) is None
    True
    >>> print(dtype_obstacle(torch.float64))
    float64 has no sparse tensor core path (cast to float16 or bfloat16)
    """
    if dtype in SPARSE_DTYPES:
        return None
    return Obstacle(
        "dtype",
        f"{dtype_name(dtype)} has no sparse tensor core path",
        "cast to float16 or bfloat16",
    )


def alignment_obstacle(out_features: int, in_features: int, dtype: torch.dtype) -> Obstacle | None:
    """Why a weight of ``out_features x in_features`` is off the alignment rule, or None.

    Parameters
    ----------
    out_features, in_features : int
        The weight's shape.
    dtype : torch.dtype
        The weight's dtype.

    Returns
    -------
    Obstacle or None

    Examples
    --------
    >>> alignment_obstacle(4112, 4096, torch.float16) is None
    True
    >>> alignment_obstacle(4112, 4096, torch.float8_e4m3fn).message
    "float8_e4m3fn sparse weights need rows and columns in multiples of 32 (cuSPARSELt's alignment rule); this layer has out_features=4112"
    """
    mult = sparse_multiple(dtype)
    sizes = (("out_features", out_features), ("in_features", in_features))
    bad = [f"{label}={size}" for label, size in sizes if size % mult]
    if not bad:
        return None
    return Obstacle(
        "align",
        f"{dtype_name(dtype)} sparse weights need rows and columns in multiples of {mult} "
        f"(cuSPARSELt's alignment rule); this layer has {', '.join(bad)}",
        f"pad the layer to a multiple of {mult}, or keep it dense: explorer.sparsify skips it",
    )


def pattern_obstacle(in_features: int, pattern: PatternReport | None) -> Obstacle | None:
    """Why the weight cannot run as 2:4: too narrow for groups of 4, or not 2:4 yet; or None.

    Parameters
    ----------
    in_features : int
        The weight's inputs (columns).
    pattern : PatternReport or None
        :func:`explorer.check_pattern` of the weight against ``"2:4"`` (as
        :attr:`explorer.prunable_layers.LayerInfo.pattern` carries it), or None when not checked.

    Examples
    --------
    >>> from explorer.checks import check_pattern
    >>> pattern_obstacle(30, None).code
    'width'
    >>> pattern_obstacle(8, check_pattern(torch.ones(2, 8))).message
    'the weight is not 2:4: 4 of 4 groups of 4 have more than 2 nonzeros'
    """
    if in_features % GROUP:
        return Obstacle(
            "width",
            f"in_features={in_features} is not a multiple of {GROUP}, so the layer cannot hold "
            "2:4 groups",
            "skip this layer with filter_fn",
        )
    if pattern is not None and not pattern.valid:
        return Obstacle(
            "not-24",
            f"the weight is not 2:4: {pattern.violations:,} of {pattern.groups:,} groups of 4 "
            "have more than 2 nonzeros",
            'prune it first: explorer.prune(model, method="wanda", pattern="2:4", calibration=...)',
        )
    return None


def layer_obstacles(
    out_features: int,
    in_features: int,
    dtype: torch.dtype,
    capability: tuple[int, int] | None = None,
    device_name: str = "this GPU",
    pattern: PatternReport | None = None,
) -> list[Obstacle]:
    """Everything that keeps a layer from running 2:4 on cuSPARSELt, in the order checked.

    Parameters
    ----------
    out_features, in_features : int
        The weight's shape as a matrix.
    dtype : torch.dtype
        The dtype the matmul runs in.
    capability : (int, int), optional
        The GPU's compute capability; None leaves the capability rules out.
    device_name : str
        The GPU's name, for the messages.
    pattern : PatternReport, optional
        The weight's 2:4 check, when known.

    Returns
    -------
    list of Obstacle
        Dtype, capability, alignment, then pattern; empty when the layer can run 2:4.

    Examples
    --------
    >>> [o.code for o in layer_obstacles(10, 30, torch.float16, capability=(7, 5))]
    ['capability', 'align', 'width']
    """
    found = [dtype_obstacle(dtype)]
    if capability is not None:
        found += capability_obstacles(capability, dtype, device_name)
    found += [
        alignment_obstacle(out_features, in_features, dtype),
        pattern_obstacle(in_features, pattern),
    ]
    return [o for o in found if o is not None]


def why_not_24(
    out_features: int,
    in_features: int,
    dtype: torch.dtype,
    capability: tuple[int, int] | None = None,
    device_name: str = "this GPU",
    pattern: PatternReport | None = None,
) -> str | None:
    """Why a layer cannot run 2:4 on cuSPARSELt (the first :func:`layer_obstacles`), or None.

    Parameters
    ----------
    out_features, in_features : int
        The weight's shape as a matrix.
    dtype : torch.dtype
        The dtype the matmul runs in.
    capability : (int, int), optional
        The GPU's compute capability; None leaves the capability rules out.
    device_name : str
        The GPU's name, for the messages.
    pattern : PatternReport, optional
        The weight's 2:4 check, when known.

    Returns
    -------
    str or None
        The sentence and its fix in parentheses.

    Examples
    --------
    >>> why_not_24(64, 64, torch.float16, capability=(7, 5), device_name="T4")
    'T4 has compute capability 7.5; 2:4 sparse tensor cores need 8.0 (Ampere) or newer (run on an A100, L4, H100 or newer GPU, or keep the model dense on this one)'
    """
    found = layer_obstacles(out_features, in_features, dtype, capability, device_name, pattern)
    return str(found[0]) if found else None
