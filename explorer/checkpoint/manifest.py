"""The checkpoint's manifest: what each layer is, how it was pruned, and checksums of everything.

A sparse checkpoint is one safetensors file. Its header metadata holds the manifest as JSON under
the key :data:`METADATA_KEY`; its tensors are the model's ``state_dict`` with every 2:4 weight
``W`` replaced by two tensors in the layout of :mod:`explorer.compression`:

* ``"<param>::values"``: ``[rows, K/2]``, the kept values, the weight's dtype;
* ``"<param>::positions"``: ``[rows, ceil(K/8)]`` uint8, the 2-bit positions, two groups a byte.

A layer pruned and quantized jointly to int4 (``prune(quantize="int4")``, layout of
:mod:`explorer.lowbit`) stores ``"<param>::codes"`` (``[rows, K/4]`` uint8, two int4 codes a byte)
and ``"<param>::scales"`` (``[rows, K/G]`` float32) instead of ``::values``, and its manifest entry
records ``"quantize": "int4"`` and ``"group_size": G``. One pruned and quantized jointly to int8
(``prune(quantize="int8")``, layout of :mod:`explorer.checkpoint.compressed_layers`) stores
``"<param>::codes"`` as ``[rows, K/2]`` int8, one code a kept value, with the same scales, and
records ``"quantize": "int8"`` and ``"group_size": G``.

A layer stored in FP8 (``save_sparse(..., quantize="float8_e4m3fn")``, layout of
:mod:`explorer.checkpoint.compressed_layers`) stores ``"<param>::codes"`` (``[rows, K/2]``
float8_e4m3fn, the kept values' codes) and ``"<param>::scales"`` (``[rows, 1]`` float32, one per
output channel: ``max|row| / 448``, 1 for a row of zeros) instead of ``::values``, and its
manifest entry records ``"quantize": "float8_e4m3fn"``. Its ``sha256`` is the checksum of the
weight loading rebuilds, ``codes * scale`` in the layer's dtype, not of the weight before
quantization.

The manifest records, per layer, the pattern, whether it was valid, the pruning method,
calibration and error, and the SHA-256 of the dense masked weight; which layers were kept dense
and why; and the SHA-256, shape and dtype of every stored tensor. Checksums catch corruption
and accidental edits; they are not a signature (anyone who rewrites a file can rewrite them).
"""

from __future__ import annotations

import datetime
import hashlib
import json
from typing import Any

import torch

from explorer.dtypes import dtype_name
from explorer.pruning import PruningCancelled

__all__ = [
    "FORMAT",
    "METADATA_KEY",
    "VERSION",
    "CheckpointCancelled",
    "CheckpointError",
    "dtype_from_name",
    "dtype_names",
    "parse_manifest",
    "tensor_sha256",
]

FORMAT = "sparsity-explorer.sparse-checkpoint"
VERSION = 1
METADATA_KEY = "sparsity_explorer.manifest"
VALUES, POSITIONS = "::values", "::positions"
CODES, SCALES = "::codes", "::scales"
#: Suffixes of the tensors that hold a compressed weight's parts.
PACKED = (VALUES, POSITIONS, CODES, SCALES)

#: The dtypes a checkpoint may store, by their exact names (no aliases: a manifest is exact).
_DTYPES = {
    dtype_name(d): d
    for d in (
        *(torch.float16, torch.bfloat16, torch.float32, torch.float64),
        *(torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool),
        torch.float8_e4m3fn,  # an FP8 layer's codes (safetensors' F8_E4M3)
    )
}


class CheckpointError(ValueError):
    """A checkpoint (or an ONNX file) is unreadable, altered, or does not fit the model."""


class CheckpointCancelled(PruningCancelled):
    """Saving or loading was cancelled; no file was written and the model was not changed."""


def dtype_from_name(name: str) -> torch.dtype:
    """The dtype a manifest names, or :class:`CheckpointError`.

    Parameters
    ----------
    name : str
        The dtype's name in the manifest (``"float16"``).

    Returns
    -------
    torch.dtype

    Examples
    --------
    >>> dtype_from_name("float16")
    torch.float16
    """
    if name not in _DTYPES:
        raise CheckpointError(
            f"the manifest names dtype {name!r}, which is not one of {sorted(_DTYPES)}; "
            "the file was written by another tool or altered"
        )
    return _DTYPES[name]


def dtype_names() -> frozenset[str]:
    """The dtype names a manifest may use.

    Examples
    --------
    >>> "bfloat16" in dtype_names()
    True
    """
    return frozenset(_DTYPES)


def tensor_sha256(tensor: torch.Tensor) -> str:
    """SHA-256 of a tensor's raw bytes (row-major, as stored).

    Parameters
    ----------
    tensor : torch.Tensor
        The tensor, on any device.

    Returns
    -------
    str
        The hex digest.

    Examples
    --------
    >>> tensor_sha256(torch.zeros(2, dtype=torch.float16))[:12]
    'df3f619804a9'
    """
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return hashlib.sha256(b"").hexdigest()
    return hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest()


def now() -> str:
    """The current UTC time, ISO 8601, to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def parse_manifest(text: str | None, where: str) -> dict[str, Any]:
    """Parse and check a checkpoint's manifest; every problem is a :class:`CheckpointError`.

    The JSON is parsed with bounded nesting and number sizes
    (:func:`~explorer.checkpoint.bounded_json.loads_bounded`) and every field is checked
    against the schema (:func:`~explorer.checkpoint.manifest_schema.validate_checkpoint_manifest`).

    Parameters
    ----------
    text : str or None
        The metadata value (None when the file has none).
    where : str
        The file, for messages.

    Examples
    --------
    >>> parse_manifest('{"format": "x"}', "m.safetensors")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    explorer.checkpoint.manifest.CheckpointError: m.safetensors is not a sparsity-explorer checkpoint ...
    """
    from .bounded_json import loads_bounded
    from .manifest_schema import validate_checkpoint_manifest

    if text is None:
        raise CheckpointError(
            f"{where} has no sparsity-explorer manifest in its metadata (key {METADATA_KEY!r}); "
            "it is a plain safetensors file. Save with explorer.save_sparse(model, path)"
        )
    manifest = loads_bounded(text, f"the manifest in {where}")
    return validate_checkpoint_manifest(manifest, where)


def parse_json_manifest(text: str, where: str) -> dict[str, Any]:
    """Parse and check the ``sparsity_manifest.json`` of a Hugging Face export.

    Parameters
    ----------
    text : str
        The file's text.
    where : str
        The file, for messages.

    Returns
    -------
    dict[str, Any]
        The checked manifest.

    Examples
    --------
    >>> parse_json_manifest('{"format": "%s.pretrained", "version": 1, "layers": {}}' % FORMAT, "m")
    {'format': 'sparsity-explorer.sparse-checkpoint.pretrained', 'version': 1, 'layers': {}}
    """
    from .bounded_json import loads_bounded
    from .manifest_schema import validate_pretrained_manifest

    return validate_pretrained_manifest(loads_bounded(text, where), where)


def dumps(manifest: dict[str, Any]) -> str:
    """The manifest as compact, sorted JSON (NaN becomes null).

    Parameters
    ----------
    manifest : dict[str, Any]
        The manifest.

    Returns
    -------
    str
    """
    return json.dumps(_finite(manifest), sort_keys=True, separators=(",", ":"), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
