"""A 2:4 layer's kept values in a checkpoint: FP8 codes written, and either form read back checked.

A 2:4 layer stores its kept values ``[rows, K/2]`` in position order beside their 2-bit
positions ``"<param>::positions"`` (``[rows, ceil(K/8)]`` uint8, the layout of
:mod:`explorer.compression`), in one of two forms:

* ``"<param>::values"``: the kept values in the weight's dtype;
* ``"<param>::codes"``, float8_e4m3fn, with ``"<param>::scales"``, ``[rows, 1]`` float32
  (``save_sparse(..., quantize="float8_e4m3fn")``; the manifest's layer entry says
  ``"quantize": "float8_e4m3fn"``). The codes are the kept values quantized per output channel
  exactly as the GPU's fp8 layers quantize a weight
  (:func:`explorer.gpu.modules.fp8.quantize_weight`): ``scale = max|row| / 448`` in float32 (1
  for a row of zeros), each code ``w / scale`` rounded to nearest even and saturated at +-448.
  The scales are computed on the CPU whatever device the model is on, so a file does not depend
  on it. The weight loading rebuilds is ``codes * scale`` in float32, cast to the layer's
  dtype, and the layer's ``sha256`` in the manifest is the checksum of that weight.

A layer pruned and quantized jointly to int8 (``prune(quantize="int8")``) stores its kept
values as ``"<param>::codes"``, int8 ``[rows, K/2]`` in position order (codes in [-127, 127]),
with ``"<param>::scales"``, float32 ``[rows, K/G]``, one per row and group of ``G`` input
columns (the manifest's entry says ``"quantize": "int8"`` and ``"group_size": G``): 5 + 32/G
bits a weight. Each group of ``G`` columns holds ``G/2`` kept values, so the scale of the
``j``-th stored value of a row is that row's scale ``j // (G/2)``. The weight loading rebuilds
is ``code * scale`` in float32, cast to the layer's dtype, bit for bit the weight saved
(:func:`pack_int8`, :func:`read_int8`).

(The 2:4 + int4 form is :mod:`explorer.lowbit`'s, read by :mod:`~explorer.checkpoint.load`.)
"""

from __future__ import annotations

from typing import Any

import torch

from explorer.compression import CompressedWeight, compress
from explorer.dtypes import dtype_name
from explorer.groupquant import FORMATS, Quantization, round_to_grid
from explorer.lowbit import Int8Weight

from .manifest import CODES, POSITIONS, SCALES, VALUES, CheckpointError

__all__ = [
    "FP8",
    "INT8",
    "QUANTIZE_CHOICES",
    "check_positions",
    "check_quantize",
    "dense_codes",
    "pack_fp8",
    "pack_int8",
    "read_compressed",
    "read_int8",
    "read_int8_weight",
]

#: The name of the FP8 form, in ``save_sparse(quantize=...)`` and in the manifest.
FP8 = "float8_e4m3fn"
#: The name of the jointly quantized int8 form in the manifest (from ``prune(quantize="int8")``).
INT8 = "int8"
#: The dtype of each coded form's stored codes.
_CODE_DTYPES = {FP8: torch.float8_e4m3fn, INT8: torch.int8}
#: What ``save_sparse(quantize=...)`` accepts besides None.
QUANTIZE_CHOICES = (FP8,)
_FIX = "the file was altered; use a good copy of the file, or save the model again"


def check_quantize(quantize: Any) -> str | None:
    """``save_sparse``'s ``quantize`` argument, checked: None or a name of :data:`QUANTIZE_CHOICES`.

    Parameters
    ----------
    quantize : Any
        The argument as given.

    Returns
    -------
    str or None
        ``quantize`` itself.

    Raises
    ------
    ValueError
        Anything else, a dtype object or another spelling included.

    Examples
    --------
    >>> check_quantize("float8_e4m3fn")
    'float8_e4m3fn'
    >>> check_quantize("fp8")
    Traceback (most recent call last):
    ...
    ValueError: quantize='fp8' is not a form save_sparse stores; expected None or 'float8_e4m3fn' (that exact name). Hint: quantize="float8_e4m3fn" stores the 2:4 layers' kept values as FP8 codes with one float32 scale per output channel
    """
    if quantize is None or (isinstance(quantize, str) and quantize in QUANTIZE_CHOICES):
        return quantize
    names = " or ".join(repr(name) for name in QUANTIZE_CHOICES)
    raise ValueError(
        f"quantize={quantize!r} is not a form save_sparse stores; expected None or {names} (that "
        f'exact name). Hint: quantize="{FP8}" stores the 2:4 layers\' kept values as FP8 codes '
        "with one float32 scale per output channel"
    )


def pack_fp8(fqn: str, weight: torch.Tensor) -> CompressedWeight:
    """A 2:4 weight's kept values as float8_e4m3fn codes with one float32 scale per row.

    Parameters
    ----------
    fqn : str
        The layer's name, for messages.
    weight : torch.Tensor
        ``[rows, K]``, 2:4 along rows (zeros in place), finite; on any device.

    Returns
    -------
    CompressedWeight
        On the CPU: ``values`` the codes ``[rows, K/2]``, ``metadata`` the positions, ``scale``
        ``[rows]`` float32; its :meth:`~explorer.compression.CompressedWeight.decompress` is the
        dequantized weight ``codes * scale`` (float32).

    Raises
    ------
    CheckpointError
        A weight holding Inf or NaN (the message names the layer and the first one).

    Examples
    --------
    >>> packed = pack_fp8("fc", torch.tensor([[0.0, 1.0, 0.0, -2.0], [0.0, 0.0, 0.0, 0.0]]))
    >>> packed.values.float().tolist(), (packed.scale * 448).tolist()
    ([[224.0, -448.0], [0.0, 0.0]], [2.0, 448.0])
    >>> packed.decompress().tolist()
    [[0.0, 1.0, 0.0, -2.0], [0.0, 0.0, 0.0, 0.0]]
    """
    from explorer.gpu.modules.fp8 import quantize_weight

    w = weight.detach().cpu()
    # 1. every value quantized per output channel, as the GPU's fp8 layers do
    try:
        codes, scale = quantize_weight(w, name=f"layer {fqn!r}")
    except ValueError as exc:
        raise CheckpointError(f"cannot store it as {FP8}: {exc}") from None
    # 2. the kept ones, in the positions of the 2:4 layout (gathered as bytes: torch has no
    #    gather of float8 on the CPU)
    layout = compress(w)
    kept = torch.gather(codes.view(torch.uint8), 1, layout.columns())
    return CompressedWeight(kept.view(torch.float8_e4m3fn), layout.metadata, layout.shape, scale)


def dense_codes(packed: CompressedWeight) -> torch.Tensor:
    """The dense ``[rows, K]`` float8_e4m3fn codes of an FP8 2:4 weight, zeros in place.

    What a GPU fp8 layer compresses (:meth:`explorer.gpu.SparseLinear.from_linear`'s
    ``fp8_weight``).

    Parameters
    ----------
    packed : CompressedWeight
        From :func:`pack_fp8` or :func:`read_compressed`.

    Returns
    -------
    torch.Tensor

    Examples
    --------
    >>> packed = pack_fp8("fc", torch.tensor([[0.0, 1.0, 0.0, -2.0]]))
    >>> dense_codes(packed).float().tolist()
    [[0.0, 224.0, 0.0, -448.0]]
    """
    bits = CompressedWeight(packed.values.view(torch.uint8), packed.metadata, packed.shape)
    return bits.decompress().view(torch.float8_e4m3fn)


def read_compressed(
    fqn: str, layer: dict[str, Any], raw: dict[str, torch.Tensor], where: str
) -> CompressedWeight:
    """A 2:4 layer's stored kept values and positions (FP8: codes and scales), all checked.

    Parameters
    ----------
    fqn : str
        The layer's name.
    layer : dict[str, Any]
        Its (schema-checked) manifest entry, stored as ``"2:4"`` without int4 (int8: the codes
        and positions only; :func:`read_int8` checks the group scales and rebuilds the weight).
    raw : dict[str, torch.Tensor]
        The file's tensors, each already checked against its checksum.
    where : str
        The file, for messages.

    Returns
    -------
    CompressedWeight
        ``values`` in the weight's dtype, FP8 codes with their ``scale`` (``[rows]``), or int8
        codes.

    Raises
    ------
    CheckpointError
        A part missing or of the wrong shape or dtype, FP8 scales that are not finite and
        positive, or positions that are not a valid 2:4 encoding.

    Examples
    --------
    >>> layer = {"param": "w", "shape": [1, 4], "quantize": "float8_e4m3fn"}
    >>> packed = pack_fp8("fc", torch.tensor([[0.0, 1.0, 0.0, -2.0]]))
    >>> raw = {"w::codes": packed.values, "w::positions": packed.metadata,
    ...        "w::scales": packed.scale[:, None] * 0}
    >>> read_compressed("fc", layer, raw, "m.safetensors")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    explorer.checkpoint.manifest.CheckpointError: layer 'fc' in m.safetensors holds 1 FP8 scale(s) that are not finite and positive (row 0: 0.0)...
    """
    param, form = layer["param"], layer.get("quantize")
    code_dtype = _CODE_DTYPES.get(form)  # None: the kept values in the weight's dtype
    values = raw.get(param + (VALUES if code_dtype is None else CODES))
    positions = raw.get(param + POSITIONS)
    scales = None if code_dtype is None else raw.get(param + SCALES)
    if values is None or positions is None or (code_dtype is not None and scales is None):
        parts = "values" if code_dtype is None else "codes, scales"
        raise CheckpointError(
            f"layer {fqn!r} is listed as 2:4{'' if code_dtype is None else ' ' + form} in "
            f"{where} but its {parts} or positions are missing; the file was altered"
        )
    rows, k = layer["shape"]
    if (
        k % 4
        or tuple(values.shape) != (rows, k // 2)
        or tuple(positions.shape) != (rows, (k + 7) // 8)
        or positions.dtype != torch.uint8
        or (code_dtype is not None and values.dtype != code_dtype)
    ):
        name, kind = ("values", "") if code_dtype is None else ("codes", f" {form}")
        raise CheckpointError(
            f"layer {fqn!r} in {where}: {name} {dtype_name(values.dtype)} {list(values.shape)} "
            f"and positions {list(positions.shape)} do not fit a {rows}x{k} 2:4 weight "
            f"(expected [{rows}, {k // 2}]{kind} and [{rows}, {(k + 7) // 8}] uint8); the "
            "manifest does not match the tensors"
        )
    scale = _scales(fqn, scales, rows, where) if form == FP8 else None  # int8: see read_int8
    packed = CompressedWeight(values, positions, (rows, k), scale)
    check_positions(fqn, packed, where)
    return packed


def _scales(fqn: str, scales: torch.Tensor | None, rows: int, where: str) -> torch.Tensor | None:
    """An FP8 layer's scales as ``[rows]``, each finite and positive (None for 16-bit values)."""
    if scales is None:
        return None
    if scales.dtype != torch.float32 or tuple(scales.shape) != (rows, 1):
        raise CheckpointError(
            f"layer {fqn!r} in {where}: its FP8 scales are {dtype_name(scales.dtype)} "
            f"{list(scales.shape)}, expected float32 [{rows}, 1] (one per output channel); {_FIX}"
        )
    bad = ~(torch.isfinite(scales) & (scales > 0))
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise CheckpointError(
            f"layer {fqn!r} in {where} holds {int(bad.sum())} FP8 scale(s) that are not finite "
            f"and positive (row {row}: {float(scales[row, 0])}); expected float32 scales > 0 (1 "
            f"for a row of zeros); {_FIX}"
        )
    return scales.reshape(rows)


def check_positions(fqn: str, packed: CompressedWeight, where: str) -> None:
    """Every group of a stored 2:4 weight names a valid position pair ``i0 < i1``.

    Parameters
    ----------
    fqn : str
        The layer's name.
    packed : CompressedWeight
        Its stored parts.
    where : str
        The file, for messages.

    Raises
    ------
    CheckpointError
        The first group whose pair is not ``i0 < i1``, and how many there are.

    Examples
    --------
    >>> bad = CompressedWeight(torch.zeros(1, 2), torch.tensor([[0]], dtype=torch.uint8), (1, 4))
    >>> check_positions("fc", bad, "m")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    explorer.checkpoint.manifest.CheckpointError: layer 'fc' in m is no longer 2:4: 1 groups hold an invalid position pair (row 0, group 0: [0, 0]); ...
    """
    rows, k = packed.shape
    if rows and k:
        pos = packed.positions()
        bad = pos[..., 0] >= pos[..., 1]
        if bool(bad.any()):
            r, g = (int(i) for i in bad.nonzero()[0])
            raise CheckpointError(
                f"layer {fqn!r} in {where} is no longer 2:4: {int(bad.sum()):,} groups hold "
                f"an invalid position pair (row {r}, group {g}: {pos[r, g].tolist()}); "
                "the positions were altered. Use a good copy of the file"
            )


def pack_int8(
    fqn: str, weight: torch.Tensor, scales: torch.Tensor, group_size: int
) -> tuple[CompressedWeight, torch.Tensor]:
    """A jointly quantized 2:4 int8 weight as int8 codes of its kept values, checked on its grid.

    Parameters
    ----------
    fqn : str
        The layer's name, for messages.
    weight : torch.Tensor
        ``[rows, K]``, 2:4 along rows, every kept value ``code * scale`` of its group (in the
        weight's dtype: a bfloat16 model keeps ``bfloat16(code * scale)``).
    scales : torch.Tensor
        The float32 scales ``prune(quantize="int8")`` recorded, ``[rows, K / group_size]``.
    group_size : int
        Input columns per scale.

    Returns
    -------
    (CompressedWeight, torch.Tensor)
        On the CPU: the int8 codes ``[rows, K/2]`` with the positions, and the scales.

    Raises
    ------
    CheckpointError
        Scales of the wrong shape or not finite and positive, a weight that is not 2:4, or one
        that is off the grid of its scales (changed after pruning).

    Examples
    --------
    >>> w = torch.tensor([[0.0, 0.5, 0.0, -1.0, 2.0, 0.0, 0.0, 4.0]])
    >>> codes, scales = pack_int8("fc", w, torch.tensor([[0.5, 1.0 / 16]]), 4)
    >>> codes.values.tolist()
    [[1, -2, 32, 64]]
    >>> pack_int8("fc", w + 0.01 * (w != 0), torch.tensor([[0.5, 1.0 / 16]]), 4)
    Traceback (most recent call last):
    ...
    explorer.checkpoint.manifest.CheckpointError: layer 'fc' was quantized to int8 but its weights are no longer on the grid of the recorded scales (changed after pruning?); prune it again, or save without result= to store it as plain 2:4
    """
    original = weight.detach().cpu()
    w = original.float()
    rows, k = w.shape
    scales = _checked_int8_scales(fqn, scales.detach().cpu(), rows, k, group_size, "",
                                  "prune the model again (its PruneResult's scales)")  # fmt: skip
    try:
        layout = compress(w)
    except ValueError as exc:
        raise CheckpointError(f"layer {fqn!r} cannot be stored as 2:4 int8: {exc}") from None
    per_value = scales.repeat_interleave(group_size // 2, dim=1)
    codes = round_to_grid(layout.values, per_value, FORMATS[INT8]).to(torch.int8)
    packed = CompressedWeight(codes, layout.metadata, (rows, k))
    # what loading rebuilds (code * scale in float32, in the weight's dtype) must be the weight
    stored = Int8Weight(codes, layout.metadata, scales, (rows, k), group_size)
    rebuilt = stored.decompress().to(original.dtype)
    if not (torch.equal(rebuilt, original) and torch.equal(rebuilt.signbit(), original.signbit())):
        raise CheckpointError(
            f"layer {fqn!r} was quantized to int8 but its weights are no longer on the grid of "
            "the recorded scales (changed after pruning?); prune it again, or save without "
            "result= to store it as plain 2:4"
        )
    return packed, scales


def read_int8(
    fqn: str, layer: dict[str, Any], raw: dict[str, torch.Tensor], where: str
) -> torch.Tensor:
    """A stored 2:4 int8 layer's dense weight (float32), every part checked.

    Parameters
    ----------
    fqn : str
        The layer's name.
    layer : dict[str, Any]
        Its (schema-checked) manifest entry, ``"quantize": "int8"`` with a ``group_size``.
    raw : dict[str, torch.Tensor]
        The file's tensors, each already checked against its checksum.
    where : str
        The file, for messages.

    Returns
    -------
    torch.Tensor
        ``code * scale`` in place of each kept value, zeros elsewhere, float32 ``[rows, K]``.

    Raises
    ------
    CheckpointError
        A part missing or of the wrong shape or dtype, positions that are not a valid 2:4
        encoding, a code of -128, or scales that are not finite and positive.

    Examples
    --------
    >>> w = torch.tensor([[0.0, 0.5, 0.0, -1.0]])
    >>> codes, scales = pack_int8("fc", w, torch.tensor([[0.5]]), 4)
    >>> layer = {"param": "w", "shape": [1, 4], "quantize": "int8", "group_size": 4}
    >>> raw = {"w::codes": codes.values, "w::positions": codes.metadata, "w::scales": scales}
    >>> read_int8("fc", layer, raw, "m.safetensors").tolist()
    [[0.0, 0.5, 0.0, -1.0]]
    >>> read_int8("fc", layer, {**raw, "w::scales": scales * float("nan")}, "m.safetensors")
    Traceback (most recent call last):
    ...
    explorer.checkpoint.manifest.CheckpointError: layer 'fc' in m.safetensors: its int8 scales must be finite and positive; 1 of 1 are not (first at (0, 0), value nan); the file was altered; use a good copy of the file, or save the model again
    """
    return read_int8_weight(fqn, layer, raw, where).decompress()


def read_int8_weight(
    fqn: str, layer: dict[str, Any], raw: dict[str, torch.Tensor], where: str
) -> Int8Weight:
    """A stored 2:4 int8 layer's codes, positions and scales exactly, every part checked.

    What the GPU's int8 layers take; :func:`read_int8` is its dense weight.

    Parameters
    ----------
    fqn, layer, raw, where
        As :func:`read_int8`.

    Returns
    -------
    Int8Weight
        On the CPU.

    Raises
    ------
    CheckpointError
        As :func:`read_int8`.
    """
    packed = read_compressed(fqn, layer, raw, where)  # codes, positions, scales present
    if bool((packed.values == -128).any()):
        raise CheckpointError(
            f"layer {fqn!r} in {where} holds the int8 code -128; this form uses [-127, 127] "
            f"only; {_FIX}"
        )
    rows, k = layer["shape"]
    scales = raw[layer["param"] + SCALES]
    scales = _checked_int8_scales(fqn, scales, rows, k, layer["group_size"], f" in {where}", _FIX)
    return Int8Weight(packed.values, packed.metadata, scales, (rows, k), layer["group_size"])


def _checked_int8_scales(
    fqn: str, scales: torch.Tensor, rows: int, k: int, group_size: int, where: str, fix: str
) -> torch.Tensor:
    """int8 group scales checked (:meth:`~explorer.groupquant.Quantization.check_scales`)."""
    try:
        Quantization(INT8, group_size).check_scales(scales, rows, k)
    except ValueError as exc:
        raise CheckpointError(f"layer {fqn!r}{where}: its int8 {exc}; {fix}") from None
    return scales.contiguous()
