"""``save_sparse``: write a model to one safetensors file with its 2:4 layers compressed."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from explorer.checks import check_pattern
from explorer.compression import compress
from explorer.dtypes import dtype_name
from explorer.errors import require
from explorer.lowbit import compress_int4
from explorer.output_paths import check_output_path, replacing
from explorer.results.store import explorer_version
from explorer.sparse_rules import GROUP

from .compressed_layers import check_quantize, pack_fp8, pack_int8
from .manifest import (
    CODES,
    FORMAT,
    METADATA_KEY,
    PACKED,
    POSITIONS,
    SCALES,
    VALUES,
    VERSION,
    CheckpointCancelled,
    CheckpointError,
    dtype_from_name,
    dumps,
    now,
    tensor_sha256,
)
from .report import CheckpointReport, LayerRecord

__all__ = ["dedupe_tensors", "model_description", "save_sparse"]


def save_sparse(
    model: Any,
    path: str | os.PathLike,
    result: Any = None,
    *,
    filter_fn: Callable[[nn.Module, str], bool] | None = None,
    quantize: str | None = None,
    provenance: dict[str, Any] | None = None,
    progress: bool = True,
    cancel: Any = None,
    overwrite: bool = False,
) -> CheckpointReport:
    """Save a model with its 2:4 Linear weights compressed, plus a manifest, to one file.

    Every ``nn.Linear`` whose weight is 2:4 along ``in_features`` is stored as kept values
    plus 2-bit positions (the layout of :mod:`explorer.compression`: 9/16 of the dense bytes
    for 16-bit weights), or with ``quantize="float8_e4m3fn"`` as FP8 codes with one scale per
    output channel; everything else is stored as it is. The manifest records each
    layer's pattern, validity, method, calibration, error and checksum, which layers were kept
    dense and why, and a checksum of every tensor. The file is written to a temporary name
    and renamed, so a failure or cancellation leaves no partial file. No pickle is involved.

    Parameters
    ----------
    model : nn.Module or ModelBundle
        The model (weights with zeros in place, as :func:`explorer.prune` leaves them). A
        bundle from :func:`explorer.load_model` also records its name, so
        :func:`load_sparse` can rebuild it without ``model=``.
    path : str or path-like
        The file to write (``.safetensors`` by convention). It follows the output-path rule of
        :mod:`explorer.output_paths`: an existing file is replaced only with ``overwrite=True``,
        and never a database, its side files, a device, FIFO or folder.
    result : PruneResult, optional
        The pruning run: its method, pattern, calibration and per-layer errors go into the
        manifest, and a layer it pruned to 2:4 that is no longer 2:4 is an error.
    filter_fn : callable, optional
        ``filter_fn(module, fqn) -> bool``: only these Linears may be compressed; the others
        are stored dense and listed as skipped.
    quantize : {None, "float8_e4m3fn"}, optional
        ``"float8_e4m3fn"``: store every 2:4 layer's kept values as FP8 codes ``[rows, K/2]``
        with one float32 scale per output channel (``max|row| / 448``, as the GPU's fp8 layers
        quantize; see :mod:`explorer.checkpoint.compressed_layers`), 1 byte a kept value. Loading
        rebuilds ``codes * scale`` in the layer's dtype. A layer ``result`` quantized to int4
        or int8 (stored as its codes and group scales) cannot also be stored in FP8 (an error).
    provenance : dict, optional
        JSON-serialisable notes kept in the manifest (data set, commit, who ran it ...).
    progress : bool
        Show a tqdm progress bar.
    cancel : threading.Event, optional
        Checked between layers; when set, nothing is written and
        :class:`~explorer.checkpoint.CheckpointCancelled` is raised.
    overwrite : bool, optional
        Replace an existing regular file at ``path`` (refused otherwise).

    Returns
    -------
    CheckpointReport
        Sizes and per-layer storage of the written file.

    Raises
    ------
    ValueError
        ``quantize`` is not None or ``"float8_e4m3fn"``, or it would apply to a layer that
        ``result`` quantized to int4 or int8.
    CheckpointError
        A layer ``result`` pruned to 2:4 is no longer 2:4, a weight on the meta device, a
        weight holding Inf or NaN with ``quantize``, or provenance that is not JSON.
    MissingExtraError
        ``safetensors`` is not installed (``pip install "sparsity-explorer[deploy]"``).
    OutputPathError
        ``path`` is refused by the output-path rule (checked before any work).
    OSError
        The file could not be written (a full or read-only disk); nothing is left behind.

    Examples
    --------
    >>> import torch, tempfile, os, explorer
    >>> from torch import nn
    >>> net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)).half()
    >>> result = explorer.prune(net, "magnitude", "2:4", progress=False)
    >>> path = os.path.join(tempfile.mkdtemp(), "net.safetensors")
    >>> report = explorer.save_sparse(net, path, result, progress=False)
    >>> report.sparse_ratio
    0.5625

    In FP8, a kept value takes one byte (plus its positions and a scale a row):

    >>> path8 = os.path.join(os.path.dirname(path), "net-fp8.safetensors")
    >>> fp8 = explorer.save_sparse(net, path8, quantize="float8_e4m3fn", progress=False)
    >>> fp8.manifest["layers"]["0"]["quantize"], fp8.sparse_ratio
    ('float8_e4m3fn', 0.34375)
    """
    st = require("safetensors.torch", "deploy")
    from tqdm.auto import tqdm

    bundle_name = None
    if not isinstance(model, nn.Module) and isinstance(getattr(model, "model", None), nn.Module):
        bundle_name, model = getattr(model, "name", None), model.model
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model must be a torch.nn.Module or a ModelBundle, got {type(model).__name__}"
        )
    if result is not None and not hasattr(result, "masks"):
        raise TypeError(
            f"result must be the PruneResult that explorer.prune returned, got {type(result).__name__}"
        )
    quantize = check_quantize(quantize)
    if cancel is not None and not callable(getattr(cancel, "is_set", None)):
        raise TypeError(f"cancel must be a threading.Event, got {type(cancel).__name__}")
    try:
        json.dumps(provenance or {})
    except (TypeError, ValueError) as exc:
        raise CheckpointError(
            f"provenance must be JSON-serialisable (str, numbers, lists, dicts): {exc}"
        ) from None
    path = Path(path).expanduser()
    if not path.parent.is_dir():
        raise FileNotFoundError(f"the folder {path.parent} does not exist; create it first")
    check_output_path(path, overwrite=overwrite, what="checkpoint")

    # 1. the state dict, each shared tensor stored once (aliases rebuild the others)
    state = model.state_dict()
    aliases, unique = dedupe_tensors(state)
    pruned = set(getattr(result, "layers", ()) or ())
    pattern_24 = result is not None and getattr(result.pattern, "name", "") == "2:4"
    layers: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    tensors: dict[str, torch.Tensor] = {}
    compressed: set[str] = set()
    linears = [(f, m) for f, m in model.named_modules() if isinstance(m, nn.Linear)]
    # 2. decide layer by layer, compressing the 2:4 ones
    for fqn, module in tqdm(linears, desc="saving 2:4 layers", disable=not progress, leave=False):
        if cancel is not None and cancel.is_set():
            raise CheckpointCancelled(f"saving {path.name} was cancelled; nothing was written")
        param = f"{fqn}.weight" if fqn else "weight"
        weight = state.get(param)
        if weight is None:
            continue
        if weight.is_meta:
            raise CheckpointError(f"{param} is on the meta device; load the model's weights first")
        entry = _layer_entry(param, weight, fqn, result)
        entry["index"] = len(layers)
        reason = _why_dense(param, weight, module, fqn, aliases, filter_fn)
        if not reason:
            report = check_pattern(weight.detach(), "2:4")
            entry["valid_24"] = report.valid
            entry["density"] = report.density
            if not report.valid:
                if fqn in pruned and pattern_24:
                    raise CheckpointError(
                        f"layer {fqn!r} was pruned to 2:4 but is no longer 2:4: "
                        f"{report.violations:,} of {report.groups:,} groups of 4 have more than 2 "
                        f"nonzeros (first at {list(report.first_violations[:3])}). Its weights "
                        "changed after pruning (fine-tuning without masks?); prune it again, or "
                        "save without result= to store it dense"
                    )
                reason = (
                    f"not 2:4 ({report.violations:,} of {report.groups:,} groups of 4 have more "
                    "than 2 nonzeros)"
                )
        if reason:
            entry["stored"], entry["reason"] = "dense", reason
            skipped[fqn] = reason
        elif (joint_scales := _joint_scales(result, fqn)) is not None:
            # 2b. a layer pruned and quantized jointly: int4 or int8 codes, positions, scales
            joint = result.quantize
            if quantize:
                raise ValueError(
                    f"layer {fqn!r} was quantized to {joint} while pruning (result.quantize="
                    f"{joint!r}), so it cannot also be stored as quantize={quantize!r}; expected "
                    f"one quantization a layer. Save without quantize= to keep it {joint}, or "
                    "without result= to store its weights in FP8 (nothing was written)"
                )
            if joint == "int4":
                packed4 = _pack_int4(fqn, weight.detach(), joint_scales, result.group_size)
                codes, positions, scales = packed4.codes, packed4.metadata, packed4.scales
            else:  # int8: one code a kept value
                packed8, scales = pack_int8(fqn, weight.detach(), joint_scales, result.group_size)
                codes, positions = packed8.values, packed8.metadata
            tensors[param + CODES], tensors[param + POSITIONS] = codes, positions
            tensors[param + SCALES] = scales
            entry["quantize"], entry["group_size"] = joint, result.group_size
            compressed.add(param)
        elif quantize:
            # 2c. FP8: the kept values' codes, positions, one scale a row; the checksum is the
            #     weight's as loading rebuilds it (codes * scale in its dtype)
            packed8 = pack_fp8(fqn, weight)
            tensors[param + CODES] = packed8.values
            tensors[param + POSITIONS] = packed8.metadata
            tensors[param + SCALES] = packed8.scale.reshape(-1, 1).contiguous()
            entry["quantize"] = quantize
            entry["sha256"] = tensor_sha256(packed8.decompress().to(weight.dtype))
            compressed.add(param)
        else:
            packed = compress(weight.detach(), "2:4")
            tensors[param + VALUES] = packed.values
            tensors[param + POSITIONS] = packed.metadata
            compressed.add(param)
        layers[fqn] = entry
    # 3. everything else as it is
    for name, tensor in unique.items():
        if name not in compressed:
            tensors[name] = tensor.detach().to("cpu").contiguous()
    tensors = _unshare(tensors)
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "explorer_version": explorer_version(),
        "torch_version": torch.__version__,
        "created": now(),
        "model": model_description(model, bundle_name),
        "pruning": _pruning(result),
        "provenance": provenance or {},
        "layers": layers,
        "skipped": skipped,
        "aliases": aliases,
        "tensors": {
            k: {"sha256": tensor_sha256(t), "shape": list(t.shape), "dtype": dtype_name(t.dtype)}
            for k, t in tensors.items()
        },
    }
    # 4. write to a temporary file beside the target, then rename it by the output-path rule
    with replacing(path, overwrite=overwrite, what="checkpoint") as tmp:
        try:
            st.save_file(
                tensors, str(tmp), metadata={METADATA_KEY: dumps(manifest), "format": "pt"}
            )
        except Exception as exc:
            if isinstance(exc, OSError):
                raise
            raise OSError(
                f"cannot write the checkpoint {path}: {' '.join(str(exc).split())}; free some "
                "space or pass a path on a writable disk (nothing was written)"
            ) from exc
    return build_report(path, json.loads(dumps(manifest)))


def _layer_entry(param: str, weight: torch.Tensor, fqn: str, result: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "param": param,
        "shape": [int(s) for s in weight.shape],
        "dtype": dtype_name(weight.dtype),
        "sha256": tensor_sha256(weight),
        "stored": "2:4",
        "reason": "",
    }
    if result is not None and fqn in getattr(result, "layers", ()):
        error = result.errors.get(fqn, math.nan)
        entry["pruning"] = {
            "method": result.method,
            "pattern": result.pattern.name,
            "calibration_batches": result.calibration_batches,
            "error": error if math.isfinite(error) else None,
        }
    return entry


def _joint_scales(result: Any, fqn: str) -> torch.Tensor | None:
    """The scales ``result`` quantized layer ``fqn`` to while pruning (int4 or int8), or None."""
    if result is None or getattr(result, "quantize", None) not in ("int4", "int8"):
        return None
    return (getattr(result, "scales", None) or {}).get(fqn)


def _pack_int4(fqn: str, weight: torch.Tensor, scales: torch.Tensor, group_size: int):
    """Pack a jointly quantized weight with its recorded scales; it must still be on its grid."""
    try:
        packed = compress_int4(weight, group_size, scales=scales)
    except ValueError as exc:
        raise CheckpointError(f"layer {fqn!r} cannot be stored as 2:4 int4: {exc}") from None
    rebuilt, weight = packed.decompress().to(weight.dtype), weight.cpu()
    if not (torch.equal(rebuilt, weight) and torch.equal(rebuilt.signbit(), weight.signbit())):
        raise CheckpointError(
            f"layer {fqn!r} was quantized to int4 but its weights are no longer on the grid of "
            "the recorded scales (changed after pruning?); prune it again, or save without "
            "result= to store it as plain 2:4"
        )
    return packed


def _why_dense(param, weight, module, fqn, aliases, filter_fn) -> str:
    if param in aliases:
        return f"weight shared with {aliases[param]} (stored once, dense)"
    if filter_fn is not None and not filter_fn(module, fqn):
        return "left out by filter_fn"
    if weight.dim() != 2 or weight.numel() == 0:
        return f"weight of shape {tuple(weight.shape)} is not a non-empty matrix"
    if weight.shape[1] % GROUP:
        return f"in_features={weight.shape[1]} is not a multiple of {GROUP}"
    return ""


def dedupe_tensors(
    state: dict[str, torch.Tensor],
) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """Tensors that are the same memory (tied weights) are kept once; the rest become aliases.

    Parameters
    ----------
    state : dict of str to Tensor
        A state dict.

    Returns
    -------
    aliases : dict of str to str
        Each repeated name and the name it repeats.
    unique : dict of str to Tensor
        The tensors kept, one per piece of memory.

    Examples
    --------
    >>> w = torch.zeros(2, 2)
    >>> dedupe_tensors({"a": w, "b": w})[0]
    {'b': 'a'}
    """
    seen: dict[tuple, str] = {}
    aliases: dict[str, str] = {}
    unique: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        key = (
            tensor.device,
            tensor.data_ptr() if tensor.numel() else id(tensor),
            tuple(tensor.shape),
            tensor.stride(),
            tensor.dtype,
        )
        if key in seen and tensor.numel():
            aliases[name] = seen[key]
        else:
            seen[key] = name
            unique[name] = tensor
    return aliases, unique


def _unshare(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Copy tensors that overlap another one's memory (safetensors refuses shared memory)."""
    storages: set[tuple] = set()
    out = {}
    for name, t in tensors.items():
        key = (t.untyped_storage().data_ptr(), t.device)
        if t.numel() and key in storages:
            t = t.clone()
        elif t.numel():
            storages.add(key)
        out[name] = t
    return out


def _pruning(result: Any) -> dict[str, Any] | None:
    if result is None:
        return None
    summary = dict(result.to_dict())
    summary.pop("layers", None)
    summary["layers"] = list(result.layers)
    return summary


def model_description(model: nn.Module, bundle: str | None = None) -> dict[str, Any]:
    """How to rebuild the model: its class, a Hugging Face config if it has one, a bundle name.

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    bundle : str or None, optional
        The bundled model's name, if it is one.

    Returns
    -------
    dict[str, Any]
        ``class``, ``bundle``, ``hf_class`` and ``hf_config``.

    Examples
    --------
    >>> model_description(nn.Linear(4, 4))["class"]
    'torch.nn.modules.linear.Linear'
    """
    cls = type(model)
    description: dict[str, Any] = {
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "bundle": bundle,
        "hf_class": None,
        "hf_config": None,
    }
    config = getattr(model, "config", None)
    if cls.__module__.startswith("transformers.") and hasattr(config, "to_json_string"):
        description["hf_class"] = cls.__name__
        description["hf_config"] = json.loads(config.to_json_string(use_diff=False))
    return description


def build_report(path: Path, manifest: dict[str, Any]) -> CheckpointReport:
    """A :class:`CheckpointReport` from a (checked) manifest and the file's size.

    Parameters
    ----------
    path : pathlib.Path
        The checkpoint file.
    manifest : dict[str, Any]
        Its checked manifest.

    Returns
    -------
    CheckpointReport
    """
    tensors = manifest["tensors"]

    def nbytes(entry: dict[str, Any]) -> int:
        return math.prod(entry["shape"]) * dtype_from_name(entry["dtype"]).itemsize

    records, dense_total = [], 0
    for name, entry in tensors.items():
        if not name.endswith(PACKED):
            dense_total += nbytes(entry)
    ordered = sorted(manifest["layers"].items(), key=lambda kv: kv[1].get("index", 0))
    for fqn, layer in ordered:
        itemsize = dtype_from_name(layer["dtype"]).itemsize
        dense = math.prod(layer["shape"]) * itemsize
        if layer.get("stored") == "2:4":
            stored = sum(
                nbytes(tensors[layer["param"] + suffix])
                for suffix in PACKED
                if layer["param"] + suffix in tensors
            )
            dense_total += dense
        else:
            stored = dense
        records.append(
            LayerRecord(
                fqn,
                (layer["shape"][0], layer["shape"][1]),
                layer["dtype"],
                "2:4" if layer.get("stored") == "2:4" else "dense",
                stored,
                dense,
                str(layer.get("reason") or ""),
                str(layer.get("quantize") or ""),
            )
        )
    return CheckpointReport(Path(path), path.stat().st_size, dense_total, tuple(records), manifest)
