"""The checkpoint's manifest: what each layer is, how it was pruned, and checksums of everything.

A sparse checkpoint is one safetensors file. Its header metadata holds the manifest as JSON under
the key :data:`METADATA_KEY`; its tensors are the model's ``state_dict`` with every 2:4 weight
``W`` replaced by two tensors in the layout of :mod:`explorer.compression`:

* ``"<param>::values"``: ``[rows, K/2]``, the kept values, the weight's dtype;
* ``"<param>::positions"``: ``[rows, ceil(K/8)]`` uint8, the 2-bit positions, two groups a byte.

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
    "parse_manifest",
    "tensor_sha256",
]

FORMAT = "sparsity-explorer.sparse-checkpoint"
VERSION = 1
METADATA_KEY = "sparsity_explorer.manifest"
VALUES, POSITIONS = "::values", "::positions"

#: The dtypes a checkpoint may store, by their exact names (no aliases: a manifest is exact).
_DTYPES = {
    dtype_name(d): d
    for d in (
        *(torch.float16, torch.bfloat16, torch.float32, torch.float64),
        *(torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool),
    )
}


class CheckpointError(ValueError):
    """A checkpoint (or an ONNX file) is unreadable, altered, or does not fit the model."""


class CheckpointCancelled(PruningCancelled):
    """Saving or loading was cancelled; no file was written and the model was not changed."""


def dtype_from_name(name: str) -> torch.dtype:
    """The dtype a manifest names, or :class:`CheckpointError`.

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


def tensor_sha256(tensor: torch.Tensor) -> str:
    """SHA-256 of a tensor's raw bytes (row-major, as stored).

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
    """Parse and shape-check a manifest's JSON text; every problem is a :class:`CheckpointError`.

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
    if text is None:
        raise CheckpointError(
            f"{where} has no sparsity-explorer manifest in its metadata (key {METADATA_KEY!r}); "
            "it is a plain safetensors file. Save with explorer.save_sparse(model, path)"
        )
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckpointError(
            f"the manifest in {where} is not valid JSON ({exc}); the file was altered or damaged"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise CheckpointError(
            f"{where} is not a sparsity-explorer checkpoint (manifest format {found!r}, "
            f"expected {FORMAT!r})"
        )
    if manifest.get("version") != VERSION:
        raise CheckpointError(
            f"{where} has checkpoint version {manifest.get('version')!r}; this explorer reads "
            f"version {VERSION}. Upgrade sparsity-explorer to read it"
        )
    for key, kind in (("layers", dict), ("skipped", dict), ("tensors", dict), ("aliases", dict)):
        if not isinstance(manifest.get(key), kind):
            raise CheckpointError(
                f"the manifest in {where} has no valid {key!r} section "
                f"(got {type(manifest.get(key)).__name__}); the file was altered"
            )
    for name, entry in manifest["tensors"].items():
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("sha256"), str)
            and isinstance(entry.get("shape"), list)
            and isinstance(entry.get("dtype"), str)
        ):
            raise CheckpointError(
                f"the manifest in {where} describes tensor {name!r} without sha256, shape and "
                "dtype; the file was altered"
            )
    for name, entry in manifest["layers"].items():
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("param"), str)
            and isinstance(shape, list)
            and len(shape) == 2
            and all(isinstance(s, int) and s >= 0 for s in shape)
            and isinstance(entry.get("sha256"), str)
        ):
            raise CheckpointError(
                f"the manifest in {where} describes layer {name!r} without param, a 2-D shape "
                "and sha256; the file was altered"
            )
    return manifest


def parse_json_manifest(text: str, where: str) -> dict[str, Any]:
    """Parse the ``sparsity_manifest.json`` of a Hugging Face export.

    Examples
    --------
    >>> parse_json_manifest('{"format": "%s.pretrained", "version": 1, "layers": {}}' % FORMAT, "m")
    {'format': 'sparsity-explorer.sparse-checkpoint.pretrained', 'version': 1, 'layers': {}}
    """
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{where} is not valid JSON ({exc}); it was altered") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT + ".pretrained":
        raise CheckpointError(f"{where} is not a sparsity-explorer export manifest")
    if manifest.get("version") != VERSION or not isinstance(manifest.get("layers"), dict):
        raise CheckpointError(
            f"{where} has version {manifest.get('version')!r} or no layers; this explorer reads "
            f"version {VERSION}"
        )
    return manifest


def dumps(manifest: dict[str, Any]) -> str:
    """The manifest as compact, sorted JSON (NaN becomes null)."""
    return json.dumps(_finite(manifest), sort_keys=True, separators=(",", ":"), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
