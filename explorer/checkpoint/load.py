"""``load_sparse`` and ``verify_checkpoint``: read a sparse checkpoint back, checking everything.

Reading goes through safetensors only (never pickle). Before a single weight of the model is
touched: the manifest must fit its schema (:mod:`~explorer.checkpoint.manifest_schema`) and
describe exactly the tensors in the file, shapes and dtypes first (from the header), then every
tensor's checksum; every 2:4 layer's positions must be a valid 2:4 encoding and its rebuilt
dense weight must match the checksum taken when it was saved; every tensor must fit the model,
and every alias must be a tensor the model itself ties. A model the manifest describes is first
built on the meta device and compared with the header (:mod:`~explorer.checkpoint.rebuild`), so
a small file cannot make the loader allocate what its config claims.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from explorer.compression import CompressedWeight
from explorer.dtypes import dtype_name
from explorer.errors import require
from explorer.lowbit import GroupCodedWeight, Int4Weight

from . import compressed_layers
from .compressed_layers import FP8, check_positions, dense_codes, read_compressed, read_int8
from .manifest import (
    CODES,
    METADATA_KEY,
    PACKED,
    POSITIONS,
    SCALES,
    CheckpointCancelled,
    CheckpointError,
    dtype_from_name,
    parse_manifest,
    tensor_sha256,
)
from .rebuild import build_model, build_on_meta, check_model_fits, check_ties, expected_state
from .report import CheckpointReport
from .save import build_report

__all__ = ["load_sparse", "read_checkpoint", "read_manifest", "verify_checkpoint"]


def read_checkpoint(
    path: str | os.PathLike, progress: bool = False, cancel: Any = None
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Read and verify a sparse checkpoint: its manifest and the dense masked ``state_dict``.

    Parameters
    ----------
    path : str or path-like
    progress : bool
        Show a tqdm progress bar over the tensors.
    cancel : threading.Event, optional
        Checked between tensors.

    Returns
    -------
    manifest : dict
    state_dict : dict of str to torch.Tensor
        On the CPU, 2:4 weights rebuilt dense with zeros in place, tied weights restored.

    Raises
    ------
    CheckpointError
        Unreadable, truncated or altered file, a manifest that does not match the tensors,
        a checksum that does not match, or a layer that is no longer 2:4.

    Examples
    --------
    >>> import os, tempfile, explorer
    >>> from torch import nn
    >>> net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)).half()
    >>> _ = explorer.prune(net, "magnitude", "2:4", progress=False)
    >>> path = os.path.join(tempfile.mkdtemp(), "net.safetensors")
    >>> _ = explorer.save_sparse(net, path, progress=False)
    >>> manifest, state = read_checkpoint(path)
    >>> manifest["format"], torch.equal(state["0.weight"], net[0].weight)
    ('sparsity-explorer.sparse-checkpoint', True)
    """
    manifest, raw = _read_verified(Path(path), progress, cancel)
    return manifest, _rebuild(manifest, raw, str(path))


def _read_verified(
    path: Path, progress: bool, cancel: Any
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The manifest and every stored tensor as stored, each checked against the manifest."""
    from tqdm.auto import tqdm

    where = str(path)
    with _open(path) as f:
        manifest, described = _described(f, where)
        _check_header(f, described, where)
        raw: dict[str, torch.Tensor] = {}
        for name in tqdm(sorted(described), desc="verifying", disable=not progress, leave=False):
            if cancel is not None and cancel.is_set():
                raise CheckpointCancelled(f"loading {path.name} was cancelled")
            tensor = _get(f, name, where)
            entry = described[name]
            if list(tensor.shape) != entry["shape"] or dtype_name(tensor.dtype) != entry["dtype"]:
                raise CheckpointError(
                    f"tensor {name!r} in {where} is {dtype_name(tensor.dtype)} "
                    f"{list(tensor.shape)} but the manifest says {entry['dtype']} "
                    f"{entry['shape']}; the file was altered"
                )
            if tensor_sha256(tensor) != entry["sha256"]:
                raise CheckpointError(
                    f"tensor {name!r} in {where} does not match its checksum: its bytes changed "
                    "after saving (corruption or an edit). Use a good copy of the file"
                )
            raw[name] = tensor
    return manifest, raw


def read_int4_weights(path: str | os.PathLike) -> dict[str, Int4Weight]:
    """The 2:4 + int4 layers of a checkpoint as stored: ``{layer: Int4Weight}`` on the CPU.

    What :func:`load_sparse` hands the GPU's int4 layers (``sparse_linear=True``): codes, positions
    and scales exactly as saved (scales chosen while pruning are kept). The whole file is read and
    verified, as by :func:`read_checkpoint`.

    Parameters
    ----------
    path : str or path-like
        The checkpoint file written by :func:`explorer.save_sparse`.

    Returns
    -------
    dict of str to Int4Weight
        One entry per layer stored as 2:4 + int4 (empty when there is none).

    Raises
    ------
    CheckpointError
        A part missing, altered or inconsistent.

    Examples
    --------
    >>> import os, tempfile, explorer
    >>> from torch import nn
    >>> path = os.path.join(tempfile.mkdtemp(), "dense.safetensors")
    >>> _ = explorer.save_sparse(nn.Linear(8, 4), path, progress=False)
    >>> read_int4_weights(path)
    {}
    """
    manifest, raw = _read_verified(Path(path), False, None)
    _rebuild(manifest, raw, str(path))  # every check of a full read
    return _int4_weights(manifest, raw, str(path))


def _int4_weights(
    manifest: dict[str, Any], raw: dict[str, torch.Tensor], where: str
) -> dict[str, Int4Weight]:
    """``{layer: Int4Weight}`` of the stored 2:4 + int4 layers (``raw`` already checked)."""
    return {
        fqn: _int4_weight(fqn, layer, raw, where)
        for fqn, layer in manifest["layers"].items()
        if layer.get("stored") == "2:4" and layer.get("quantize") == "int4"
    }


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """Read and check a checkpoint's manifest against its header, without reading any tensor.

    The manifest must fit the schema and describe exactly the file's tensors with their shapes
    and dtypes (from the safetensors header; checksums need the data, see
    :func:`read_checkpoint`).

    Parameters
    ----------
    path : str or path-like
        The checkpoint file.

    Returns
    -------
    dict
        The parsed manifest.

    Raises
    ------
    FileNotFoundError
        ``path`` is not a file.
    CheckpointError
        The file is not readable as safetensors, or its manifest does not fit the schema or
        the file's tensors.

    Examples
    --------
    >>> import os, tempfile, explorer
    >>> from torch import nn
    >>> path = os.path.join(tempfile.mkdtemp(), "net.safetensors")
    >>> _ = explorer.save_sparse(nn.Linear(8, 4), path, progress=False)
    >>> sorted(read_manifest(path)["tensors"])
    ['bias', 'weight']
    """
    with _open(Path(path)) as f:
        manifest, described = _described(f, str(path))
        _check_header(f, described, str(path))
    return manifest


def _open(path: Path):
    safetensors = require("safetensors", "deploy")
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist (or is not a file)")
    try:
        return safetensors.safe_open(str(path), framework="pt", device="cpu")
    except Exception as exc:  # SafetensorError has no stable import path across versions
        raise CheckpointError(
            f"{path} cannot be read as safetensors ({exc}); the file is truncated, damaged or "
            "not a checkpoint. Save it again with explorer.save_sparse"
        ) from None


def _described(f, where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    manifest = parse_manifest((f.metadata() or {}).get(METADATA_KEY), where)
    described = manifest["tensors"]
    present = set(f.keys())
    missing = sorted(set(described) - present)
    extra = sorted(present - set(described))
    if missing or extra:
        raise CheckpointError(
            f"the manifest of {where} does not match its tensors: described but absent "
            f"{missing[:5]}, present but not described {extra[:5]}; the file was altered"
        )
    return manifest, described


#: safetensors' dtype codes by the names a manifest uses.
_HEADER_DTYPES = {
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "I8": "int8",
    "U8": "uint8",
    "I16": "int16",
    "I32": "int32",
    "I64": "int64",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
}


def _check_header(f, described: dict[str, Any], where: str) -> None:
    """Every tensor's shape and dtype in the header is the manifest's (no data is read)."""
    for name, entry in described.items():
        try:
            piece = f.get_slice(name)
            shape, code = list(piece.get_shape()), str(piece.get_dtype())
        except Exception as exc:
            raise CheckpointError(f"tensor {name!r} in {where} cannot be read ({exc})") from None
        dtype = _HEADER_DTYPES.get(code, code)
        if shape != entry["shape"] or dtype != entry["dtype"]:
            raise CheckpointError(
                f"tensor {name!r} in {where} is {dtype} {shape} but the manifest says "
                f"{entry['dtype']} {entry['shape']}; the file was altered"
            )


def _get(handle, name: str, where: str) -> torch.Tensor:
    try:
        return handle.get_tensor(name)
    except Exception as exc:
        raise CheckpointError(f"tensor {name!r} in {where} cannot be read ({exc})") from None


def _rebuild(manifest: dict, raw: dict[str, torch.Tensor], where: str) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {k: v for k, v in raw.items() if not k.endswith(PACKED)}
    for fqn, layer in manifest["layers"].items():
        param = layer["param"]
        if layer.get("stored") != "2:4":
            if param not in state and param not in manifest["aliases"]:
                raise CheckpointError(
                    f"layer {fqn!r} is listed as dense in {where} but {param!r} is not in the file"
                )
            continue
        if layer.get("quantize") in ("int4", "int8"):
            state[param] = _rebuild_joint(fqn, layer, raw, where)
            continue
        packed = read_compressed(fqn, layer, raw, where)
        dense = packed.decompress()
        if packed.scale is not None:  # FP8: codes * scale in float32, then the layer's dtype
            dense = dense.to(dtype_from_name(layer["dtype"]))
        _check_rebuilt(fqn, layer, dense, where)
        state[param] = dense
    for alias, original in manifest["aliases"].items():
        if original not in state:
            raise CheckpointError(
                f"{alias!r} is stored as a copy of {original!r}, which is not in {where}"
            )
        state[alias] = state[original]
    return state


def _check_rebuilt(fqn: str, layer: dict, dense: torch.Tensor, where: str) -> None:
    if dtype_name(dense.dtype) != layer["dtype"] or tensor_sha256(dense) != layer["sha256"]:
        raise CheckpointError(
            f"layer {fqn!r} in {where} rebuilds to a weight that does not match the "
            "checksum taken when it was saved; the file was altered"
        )


def _rebuild_joint(fqn: str, layer: dict, raw: dict[str, torch.Tensor], where: str) -> torch.Tensor:
    """A 2:4 int4 or int8 layer's dense weight from its codes, positions and scales, checked."""
    if layer["quantize"] == "int8":
        dense = read_int8(fqn, layer, raw, where)
    else:
        dense = _int4_weight(fqn, layer, raw, where).decompress()
    dense = dense.to(dtype_from_name(layer["dtype"]))
    _check_rebuilt(fqn, layer, dense, where)
    return dense


def _int4_weight(fqn: str, layer: dict, raw: dict[str, torch.Tensor], where: str) -> Int4Weight:
    """A 2:4 int4 layer's stored parts as an ``Int4Weight``, its parts and positions checked."""
    param = layer["param"]
    parts = [raw.get(param + s) for s in (CODES, POSITIONS, SCALES)]
    if any(p is None for p in parts):
        raise CheckpointError(
            f"layer {fqn!r} is listed as 2:4 int4 in {where} but its codes, positions or scales "
            "are missing; the file was altered"
        )
    try:
        packed = Int4Weight.from_parts(*parts, tuple(layer["shape"]), layer["group_size"])
    except ValueError as exc:
        raise CheckpointError(
            f"layer {fqn!r} in {where} does not hold a valid 2:4 int4 weight ({exc}); the file "
            "was altered"
        ) from None
    check_positions(fqn, CompressedWeight(packed.int_codes(), packed.metadata, packed.shape), where)
    return packed


def verify_checkpoint(path: str | os.PathLike, progress: bool = False) -> CheckpointReport:
    """Check a sparse checkpoint completely without allocating a model.

    Everything :func:`read_checkpoint` checks; and for a Hugging Face model (when transformers
    is installed) the model its manifest describes is built on the meta device, where it must
    fit the file and tie every tensor the manifest records as an alias.

    Parameters
    ----------
    path : str or path-like
        The checkpoint file.
    progress : bool
        Show a tqdm progress bar over the tensors while reading.

    Returns
    -------
    CheckpointReport
        The checkpoint's sizes and per-layer storage.

    Raises
    ------
    CheckpointError
        The first problem found, in one line.

    Examples
    --------
    >>> import pathlib, tempfile, explorer
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "fc.safetensors"
    >>> result = explorer.prune(torch.nn.Sequential(torch.nn.Linear(64, 32)).half(), progress=False)
    >>> verify_checkpoint(explorer.save_sparse(result.model, path, progress=False).path)
    CheckpointReport(fc.safetensors: 1 of 1 layers 2:4, 3.6 KiB = 88.7% of 4.1 KiB dense, checksums ok)
    """
    manifest, _ = read_checkpoint(path, progress=progress)
    if (manifest.get("model") or {}).get("hf_class") and importlib.util.find_spec("transformers"):
        _check_on_meta(manifest, Path(path))
    return build_report(Path(path), manifest)


def load_sparse(
    path: str | os.PathLike,
    model: nn.Module | None = None,
    device: str | torch.device | None = None,
    *,
    sparse_linear: bool = False,
    dtype: torch.dtype | None = None,
    progress: bool = True,
    cancel: Any = None,
) -> nn.Module:
    """Load a checkpoint written by :func:`save_sparse` into a model, verifying it first.

    Parameters
    ----------
    path : str or path-like
    model : nn.Module, optional
        A model of the same architecture to load into (e.g.
        ``AutoModel.from_config(config)``), changed in place. Without it the model is rebuilt
        from the manifest: a Hugging Face model from its recorded class and config, a bundled
        model by its name.
    device : str or torch.device, optional
        Where to put the model afterwards (default: where it is; the CPU for a rebuilt one).
    sparse_linear : bool
        Replace every 2:4 layer by :class:`explorer.SparseLinear` (compressed by cuSPARSELt), or
        a 2:4 + int4 or int8 layer by :class:`~explorer.gpu.modules.int4_linear.Int4Linear` on
        its stored codes and scales; an FP8 layer becomes a float8_e4m3fn ``SparseLinear`` on its
        stored codes and scales (never quantized again). Needs a CUDA ``device``.
    dtype : torch.dtype, optional
        ``SparseLinear``'s dtype for the 2:4 layers stored with their values (default: the
        weight's if 16-bit, else float16); int4, int8 and FP8 layers keep theirs.
    progress : bool
    cancel : threading.Event, optional

    Returns
    -------
    nn.Module
        The model with the checkpoint's weights, bit for bit.

    Raises
    ------
    CheckpointError
        Any problem :func:`read_checkpoint` finds; tensors that do not fit ``model`` (names,
        shapes, or a dtype that would lose precision); an alias between tensors the model does
        not tie, or tied tensors stored with different values; or, without ``model``, a
        recorded config whose model (built on the meta device first) does not fit the file.
        The model is left untouched and nothing is allocated for a model that does not fit.

    Examples
    --------
    >>> import torch, tempfile, os, explorer
    >>> from torch import nn
    >>> net = nn.Sequential(nn.Linear(64, 32)).half()
    >>> _ = explorer.prune(net, "magnitude", "2:4", progress=False)
    >>> path = os.path.join(tempfile.mkdtemp(), "net.safetensors")
    >>> _ = explorer.save_sparse(net, path, progress=False)
    >>> fresh = explorer.load_sparse(path, nn.Sequential(nn.Linear(64, 32)).half(), progress=False)
    >>> torch.equal(fresh[0].weight, net[0].weight)
    True
    """
    if model is not None and not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module or None, got {type(model).__name__}")
    if sparse_linear and (device is None or torch.device(device).type != "cuda"):
        raise ValueError(
            f"sparse_linear=True builds cuSPARSELt layers and needs device='cuda', got "
            f"device={device!r}; pass device='cuda' or load the dense masked model"
        )
    where = str(path)
    if model is None:
        # 1. the model the manifest describes, on the meta device: it must fit the file's header
        #    before anything is allocated or read
        _check_on_meta(read_manifest(path), Path(path))
    manifest, raw = _read_verified(Path(path), progress, cancel)
    state = _rebuild(manifest, raw, where)
    # int4 and FP8 layers go to the GPU on their stored parts: kept, the rest of the file let go
    parts = _quantized_parts(manifest, raw, where) if sparse_linear else {}
    del raw
    if model is None:
        model = build_model(manifest, where)
        # a rebuilt model takes the checkpoint's dtypes (non-persistent buffers stay as built)
        for name, target in model.state_dict(keep_vars=True).items():
            source = state.get(name)
            if source is not None and target.is_floating_point() and source.is_floating_point():
                target.data = target.data.to(source.dtype)
    _check_fits(model, state, where)
    check_ties(model, manifest["aliases"], expected_state(manifest), where)
    if cancel is not None and cancel.is_set():
        raise CheckpointCancelled(
            f"loading {Path(path).name} was cancelled; the model is unchanged"
        )
    # every check passed: now copy
    targets = model.state_dict(keep_vars=True)
    with torch.no_grad():
        for name, tensor in state.items():
            targets[name].copy_(tensor)
    if device is not None:
        model.to(device)
    if sparse_linear:
        _to_sparse_linear(model, manifest, dtype, parts)
    return model


def _check_fits(model: nn.Module, state: dict[str, torch.Tensor], where: str) -> None:
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{where} does not fit {type(model).__name__}: the model has tensors the file lacks "
            f"{missing[:5]}{' ...' if len(missing) > 5 else ''} and the file has tensors the model "
            f"lacks {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}. Load it into the "
            "architecture it was saved from"
        )
    for name, tensor in state.items():
        target = expected[name]
        if target.shape != tensor.shape:
            raise CheckpointError(
                f"{name!r} is {list(tensor.shape)} in {where} but {list(target.shape)} in the "
                "model; load it into the configuration it was saved from"
            )
        if target.dtype != tensor.dtype and not _widens(tensor.dtype, target.dtype):
            raise CheckpointError(
                f"{name!r} is {dtype_name(tensor.dtype)} in {where} but the model holds "
                f"{dtype_name(target.dtype)}, which would change its values. Convert the model "
                f"first, e.g. model.to({tensor.dtype})"
            )


def _widens(source: torch.dtype, target: torch.dtype) -> bool:
    if source.is_floating_point and target.is_floating_point:
        return target == torch.float64 or (target == torch.float32 and source.itemsize <= 2)
    return False


def _check_on_meta(manifest: dict[str, Any], path: Path) -> None:
    """The described Hugging Face model, built on meta, fits the file and ties what it aliases."""
    meta = build_on_meta(manifest, str(path))
    if meta is None:  # a bundled model: this package's own code, checked once built
        return
    expected = expected_state(manifest)
    check_model_fits(meta, expected, str(path), path.stat().st_size)
    check_ties(meta, manifest["aliases"], expected, str(path))


def _quantized_parts(
    manifest: dict[str, Any], raw: dict[str, torch.Tensor], where: str
) -> dict[str, Int4Weight | CompressedWeight]:
    """The stored parts of the int4, int8 and FP8 layers (``raw`` already checked)."""
    parts: dict[str, Int4Weight | CompressedWeight] = dict(_int4_weights(manifest, raw, where))
    read = {FP8: read_compressed, compressed_layers.INT8: compressed_layers.read_int8_weight}
    for fqn, layer in manifest["layers"].items():
        if layer.get("stored") == "2:4" and layer.get("quantize") in read:
            parts[fqn] = read[layer["quantize"]](fqn, layer, raw, where)
    return parts


def _to_sparse_linear(
    model: nn.Module, manifest: dict[str, Any], dtype, parts: dict[str, Any]
) -> None:
    """Swap the 2:4 layers for ``SparseLinear``, the int4 and int8 ones for ``Int4Linear``.

    int4, int8 and FP8 layers are built on their stored parts (``parts``). Every layer is built
    first, and swapped in only once all are built.
    """
    from explorer.gpu.modules.int4_linear import Int4Linear
    from explorer.gpu.modules.sparse_linear import SparseLinear

    built: dict[str, nn.Module] = {}
    kept: dict[str, str] = {}
    for fqn, layer in manifest["layers"].items():
        if layer.get("stored") == "2:4" and fqn:
            linear = model.get_submodule(fqn)
            try:
                part = parts.get(fqn)
                if isinstance(part, GroupCodedWeight):
                    built[fqn] = Int4Linear.from_parts(part, linear)
                elif part is not None:  # FP8: the stored codes and scales, as they are
                    stored = (dense_codes(part), part.scale)
                    built[fqn] = SparseLinear.from_linear(
                        linear, dtype=part.values.dtype, fp8_weight=stored
                    )
                else:
                    built[fqn] = SparseLinear.from_linear(linear, dtype=dtype)
            except (ValueError, TypeError) as exc:  # shapes the kernels cannot take stay dense
                kept[fqn] = str(exc)
    if kept:
        first = next(iter(kept.items()))
        warnings.warn(
            f"{len(kept)} 2:4 layer(s) stay dense nn.Linear because SparseLinear cannot take "
            f"them, e.g. {first[0]!r}: {first[1]}",
            stacklevel=3,
        )
    for fqn, new in built.items():
        parent, _, child = fqn.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, new)
