"""``Int4Linear``: a 2:4 layer with group-wise int4 (or int8) kept weights, on the faster of two kernels.

What a user deploying int4 compares with is int4 dense, not bf16. So the layer holds its weight
in two forms: the kept codes with their 2-bit positions and scales, tiled for the explorer's
2:4 + int4 decode kernel (:mod:`explorer.gpu.cuda.decode_int4`), and the dense route's form,
torch's packed int4 weight for its int4 weight-only matmul (``aten._weight_int4pack_mm``; the
2:4 zeros stored as codes) or, where that kernel does not take the layer, the dequantized weight
in 16 bits. Both compute ``x @ (q * s)^T`` for the same codes ``q`` and scales ``s``; torch's
kernel holds the scales in bfloat16, so they agree to about 1e-2 relative, not bit for bit.
Which runs at each token count, eagerly, compiled and in CUDA graphs, is
:class:`~explorer.gpu.modules.int4_forward.Int4Forward`'s choice
(:mod:`explorer.gpu.modules.int4_forward`).

With an :class:`~explorer.lowbit.Int8Weight` (``sparsify(dtype="int8-weights")``) the decode
route is the 2:4 + int8 kernel and the dense route the weight dequantized to 16 bits once, on
cuBLAS (torch has no CUDA int8 weight-only kernel with group-wise scales).
"""

from __future__ import annotations

import torch
from torch import nn

from explorer import _html
from explorer.dtypes import dtype_name
from explorer.gpu.cuda import ops
from explorer.gpu.cuda.code_tiles import tile_coded_weight
from explorer.gpu.modules.int4_forward import Int4Forward
from explorer.gpu.modules.torch_int4 import INNER_K_TILES, torch_int4_parts, torch_int4_takes
from explorer.gpu.routes.dispatch import check_mode
from explorer.lowbit import CODED_WEIGHTS, GroupCodedWeight

__all__ = ["INT8_DENSE", "Int4Linear"]

INT8_DENSE = "torch has no CUDA int8 weight-only kernel with group scales; dense runs in 16 bits"
_SPARSIFY_DTYPE = {"int4": "int4", "int8": "int8-weights"}


class Int4Linear(Int4Forward, nn.Module):
    """``y = x @ W^T + b`` for a 2:4 ``W`` with group-wise int4 kept values (see the module).

    Build it with :meth:`from_linear`; it holds the compressed weight (about 3.25 bits a
    weight for ``G = 128``) and, for the dense route, torch's packed int4 form of the same
    weight (4 bits a weight and bf16 scales), or a 16-bit copy where torch's kernel does not
    take the layer.

    Parameters
    ----------
    weight : Int4Weight or Int8Weight
        On a CUDA device.
    bias : torch.Tensor, optional
    dtype : torch.dtype
        The activations' dtype (bfloat16 or float16); outputs come back in it.
    mode : {"auto", "eager", "compile", "graphs"}
        The clock routes are chosen by, as for :class:`~explorer.gpu.SparseLinear`.
    decode : bool
        Offer the 2:4 + int4 decode route (default); ``False`` keeps the layer on the dense
        route at every token count: int4 dense, the baseline 2:4 is measured against.
    """

    #: Outputs are row-major (what the fused blocks read), on the explorer's own kernels.
    output, backend = "rows", "explorer"

    def __init__(
        self,
        weight: GroupCodedWeight,
        bias: torch.Tensor | None,
        dtype: torch.dtype = torch.bfloat16,
        mode: str = "auto",
        decode: bool = True,
    ) -> None:
        super().__init__()
        if dtype not in (torch.bfloat16, torch.float16):
            raise TypeError(f"Int4Linear takes bfloat16 or float16 activations, got {dtype}")
        self.out_features, self.in_features = weight.shape
        self.group_size, self.format = weight.group_size, weight.FORMAT
        self.dtype = dtype
        self.mode = check_mode(mode)
        self.register_buffer("codes", weight.codes)
        self.register_buffer("metadata", weight.metadata)
        self.register_buffer("scales", weight.scales)
        self.register_buffer("bias", None if bias is None else bias.detach().to(dtype).contiguous())
        self.torch_kernel_refusal = (
            torch_int4_takes(self.out_features, self.in_features, self.group_size, dtype)
            if self.format == "int4"
            else INT8_DENSE
        )
        if self.torch_kernel_refusal is None:
            packed, scales_and_zeros = torch_int4_parts(weight)
            packed = torch.ops.aten._convert_weight_to_int4pack(packed, INNER_K_TILES)
            self.register_buffer("_int4pack", packed, persistent=False)
            self.register_buffer("_int4scales", scales_and_zeros, persistent=False)
            self.register_buffer("_dense16", None, persistent=False)
        else:
            self.register_buffer("_int4pack", None, persistent=False)
            self.register_buffer("_int4scales", None, persistent=False)
            self.register_buffer("_dense16", weight.decompress().to(dtype), persistent=False)
        layout_refusal = _decode_refusal(weight)
        self._tiled = layout_refusal is None  # the explorer's int4 kernels can read it
        self.decode_refusal = layout_refusal or (None if decode else "the decode route is off")
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._routes: dict = {}  # (tokens, clock) -> Route
        self._calls: dict = {}  # tokens -> Int4DecodeCall
        # the kernel's layout of the weight, shared by every row count; made here, never inside
        # a call (a compiled model's CUDA-graph pool must not own it)
        self._tiles = tile_coded_weight(self.coded_weight()) if self._tiled else None
        self._dequantizer = None  # the dense 16-bit weight above 64 tokens, made per call
        self._fast: dict = {}  # (shape, device, dtype, clock) -> the call its route makes
        self._op_id = ops.register(self)

    def __getstate__(self) -> dict:
        """A copy keeps the weights, not this process's launches or op id."""
        state = self.__dict__.copy()
        for name in ("_routes", "_calls", "_tiles", "_dequantizer", "_fast"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self._reset_runtime()

    def _apply(self, fn, recurse: bool = True):
        """``.to(device)``: the buffers move; launches are set up again.

        A dtype change is refused (the codes are int4 whatever the model's dtype).
        """
        probe = torch.empty(0, dtype=self.dtype, device=self.codes.device)
        new = fn(probe)
        if isinstance(new, torch.Tensor) and new.dtype != probe.dtype:
            raise TypeError(
                f"{self.out_features}x{self.in_features} Int4Linear runs {self.dtype} "
                f"activations and cannot become {new.dtype}. Hint: convert the dense model "
                f"first, then sparsify it with dtype={_SPARSIFY_DTYPE[self.format]!r}."
            )
        out = super()._apply(fn, recurse)
        self._reset_runtime()
        return out

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        group_size: int = 128,
        scales: torch.Tensor | None = None,
        mode: str = "auto",
        decode: bool = True,
        fmt: str = "int4",
    ) -> Int4Linear:
        """Quantize a CUDA ``nn.Linear`` whose weight is 2:4 to group-wise int4 (or int8).

        Parameters
        ----------
        linear : nn.Linear
            On a CUDA device, weight pruned 2:4 along ``in_features``.
        group_size : int
            Input columns per scale.
        scales : torch.Tensor, optional
            ``[out, in / group_size]`` scales the pruning recorded (``prune(...,
            quantize=fmt).scales``), so that weights already on their grid are kept
            exactly; round to nearest with ``max|kept| / 7`` (int8: 127) otherwise.
        mode : {"auto", "eager", "compile", "graphs"}
        decode : bool
            Offer the 2:4 decode route (see the class).
        fmt : {"int4", "int8"}

        Raises
        ------
        ValueError
            CPU weight, weight not 2:4, group size not dividing ``in_features``.
        """
        if fmt not in CODED_WEIGHTS:
            raise ValueError(f"fmt = {fmt!r}; expected 'int4' or 'int8'")
        w = linear.weight.detach()
        if w.device.type != "cuda":
            raise ValueError(
                f"{linear} is on {w.device}; Int4Linear needs a CUDA module. Hint: model.cuda()."
            )
        weight = CODED_WEIGHTS[fmt].compress(w.float(), group_size, scales=scales)
        return cls(weight, linear.bias, _activation_dtype(w), mode, decode)

    @classmethod
    def from_parts(
        cls, weight: GroupCodedWeight, linear: nn.Linear, mode: str = "auto"
    ) -> Int4Linear:
        """The layer for ``weight`` as stored, with ``linear``'s bias, device and activation dtype.

        Codes and scales are kept exactly (e.g. from a checkpoint:
        :func:`explorer.checkpoint.read_int4_weights`).

        Parameters
        ----------
        weight, linear : Int4Weight or Int8Weight, torch.nn.Linear
            The stored weight (moved to ``linear``'s device) and the CUDA layer it replaces.
        mode : {"auto", "eager", "compile", "graphs"}

        Raises
        ------
        ValueError
            ``weight``'s shape is not ``linear``'s, or ``linear`` is not on a CUDA device.
        """
        w = linear.weight
        if tuple(weight.shape) != tuple(w.shape):
            raise ValueError(
                f"the {weight.FORMAT} weight is {weight.shape[0]}x{weight.shape[1]} but {linear} "
                f"holds {w.shape[0]}x{w.shape[1]}; load it into the architecture it was saved from"
            )
        if w.device.type != "cuda":
            raise ValueError(
                f"{linear} is on {w.device}; Int4Linear needs a CUDA module. Hint: model.cuda()."
            )
        parts = (
            t.to(w.device).contiguous() for t in (weight.codes, weight.metadata, weight.scales)
        )
        on_device = type(weight)(*parts, tuple(weight.shape), weight.group_size)
        return cls(on_device, linear.bias, _activation_dtype(w), mode)

    def coded_weight(self) -> GroupCodedWeight:
        """The compressed weight (codes, positions, scales): an ``Int4Weight`` or ``Int8Weight``."""
        return CODED_WEIGHTS[self.format](
            self.codes,
            self.metadata,
            self.scales,
            (self.out_features, self.in_features),
            self.group_size,
        )

    # -- introspection -----------------------------------------------------------------------
    @property
    def bits_per_weight(self) -> float:
        """Bits a weight of the compressed form takes (codes, positions and scales)."""
        return self.coded_weight().bits_per_weight

    def extra_repr(self) -> str:
        """The text shown inside the module's repr."""
        dense = "torch int4" if self.torch_kernel_refusal is None else "16-bit dequantized"
        decode = f"2:4 {self.format} kernel" if self.decode_refusal is None else "none"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"{self.format}, group_size={self.group_size}, dtype={dtype_name(self.dtype)}, "
            f"dense={dense}, "
            f"decode={decode}"
        )

    def _repr_html_(self) -> str:
        rows = [
            ("shape", f"{self.out_features} x {self.in_features}, {self.format}"),
            ("group size", self.group_size),
            ("bits per weight", f"{self.bits_per_weight:.2f}"),
            ("dense route", self.torch_kernel_refusal or "torch's int4 kernel"),
            ("decode route", self.decode_refusal or f"2:4 + {self.format} kernel, 1-64 tokens"),
        ]
        return _html.table(["Int4Linear", ""], rows)


def _activation_dtype(weight: torch.Tensor) -> torch.dtype:
    """The layer's 16-bit activation dtype: the weight's own, bfloat16 for a float32 weight."""
    return weight.dtype if weight.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16


def _decode_refusal(weight: GroupCodedWeight) -> str | None:
    """Why the 2:4 decode kernel cannot take ``weight`` (None: it can)."""
    from explorer.gpu.cuda.decode_int4 import check_int4_layout

    try:
        check_int4_layout(weight)
    except ValueError as exc:
        return str(exc)
    return None
