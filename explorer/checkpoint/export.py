"""Export the dense masked model for other runtimes: a Hugging Face folder, or ONNX.

Both keep the 2:4 weights dense with their zeros in place (what Transformers, ONNX Runtime and
TensorRT read). The Hugging Face folder gets ``sparsity_manifest.json`` beside the weights; the
ONNX export is checked with :func:`check_onnx` so a layer that lost its 2:4 pattern on the way
is an error, not a surprise at engine-build time.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from explorer.checks import check_pattern
from explorer.dtypes import dtype_name
from explorer.errors import OutputPathError, require
from explorer.output_paths import FORCE_HINT, check_output_path, replacing_folder
from explorer.results.store import explorer_version

from .bounded_json import MAX_TEXT_CHARS
from .manifest import (
    FORMAT,
    VERSION,
    CheckpointError,
    dumps,
    now,
    parse_json_manifest,
    tensor_sha256,
)
from .onnx_check import OnnxReport, check_onnx
from .report import CheckpointReport, LayerRecord
from .save import dedupe_tensors, model_description

__all__ = [
    "MANIFEST_NAME",
    "export_onnx",
    "export_pretrained",
    "sparse_layers",
    "verify_pretrained",
]

#: The manifest written beside a Hugging Face export.
MANIFEST_NAME = "sparsity_manifest.json"
#: Weights up to this many bytes are kept inside the .onnx file (ONNX's limit is 2 GiB).
_EMBED_LIMIT = 1 << 30
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def sparse_layers(model: nn.Module) -> dict[str, nn.Linear]:
    """The model's ``nn.Linear`` layers whose weights are 2:4 along ``in_features``.

    Parameters
    ----------
    model : nn.Module
        The model to look through (not changed).

    Returns
    -------
    dict of str to nn.Linear
        ``{fqn: layer}`` in module order; layers whose ``in_features`` is not a multiple of 4,
        and empty or meta-device weights, are left out.

    Examples
    --------
    >>> net = nn.Sequential(nn.Linear(8, 4))
    >>> with torch.no_grad():
    ...     net[0].weight[:, ::2] = 0
    >>> list(sparse_layers(net))
    ['0']
    """
    found = {}
    for fqn, module in model.named_modules():
        if isinstance(module, nn.Linear) and module.in_features % 4 == 0:
            w = module.weight.detach()
            if w.numel() and not w.is_meta and check_pattern(w, "2:4").valid:
                found[fqn] = module
    return found


def export_pretrained(
    model: nn.Module,
    directory: str | os.PathLike,
    result: Any = None,
    provenance: dict[str, Any] | None = None,
    *,
    overwrite: bool = False,
) -> Path:
    """Write a Hugging Face ``save_pretrained`` folder plus ``sparsity_manifest.json``.

    The weights are the dense masked ones (safetensors, as Transformers writes them), so any
    runtime that reads Hugging Face folders loads them; the manifest lists each 2:4 layer with
    its checksum and how it was pruned, so ``sparsity-explorer check DIR`` can prove them.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        Anything with ``save_pretrained``.
    directory : str or path-like
        Created if needed (written in a temporary folder beside it, then renamed). An
        existing folder that is not empty is refused unless ``overwrite=True``; then its files
        of the same names are replaced by the rule of :mod:`explorer.output_paths` (never a
        database, device or symbolic link's target without it) and other files are kept.
    result : PruneResult, optional
        Its method, pattern and calibration go into the manifest.
    provenance : dict, optional
        JSON-serialisable notes.
    overwrite : bool, optional
        Write into an existing, non-empty folder, replacing its files of the same names.

    Returns
    -------
    Path
        The folder.

    Examples
    --------
    >>> import os, tempfile, explorer
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> llama = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
    ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
    >>> _ = explorer.prune(llama, "magnitude", filter_fn=lambda m, n: n != "lm_head", progress=False)
    >>> folder = export_pretrained(llama, os.path.join(tempfile.mkdtemp(), "llama-24"))
    >>> folder.name, verify_pretrained(folder)
    ('llama-24', CheckpointReport(llama-24: 7 of 7 layers 2:4, 57.5 KiB = 100.0% of 57.5 KiB dense, checksums ok))
    """
    if not hasattr(model, "save_pretrained"):
        inner = [n for n, m in model.named_children() if hasattr(m, "save_pretrained")]
        hint = f"; pass the inner model, e.g. model.{inner[0]}" if inner else ""
        raise TypeError(
            f"{type(model).__name__} has no save_pretrained: only Hugging Face models export "
            f"to a Transformers folder{hint}. Use explorer.save_sparse for any model"
        )
    directory = Path(directory).expanduser()
    if directory.is_dir() and any(directory.iterdir()) and not overwrite:
        raise OutputPathError(
            f"refusing to write the Hugging Face export into {directory}: the folder exists and "
            f"is not empty; pass {FORCE_HINT} to replace its files, or a new folder"
        )
    directory.parent.mkdir(parents=True, exist_ok=True)
    with replacing_folder(directory, overwrite=overwrite, what="Hugging Face export") as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        (tmp / MANIFEST_NAME).write_text(dumps(_pretrained_manifest(model, result, provenance)))
    return directory


def _pretrained_manifest(model: nn.Module, result: Any, provenance: dict | None) -> dict:
    aliases, _ = dedupe_tensors(model.state_dict())
    layers = {}
    for fqn, module in sparse_layers(model).items():
        w = module.weight.detach()
        layers[fqn] = {
            "param": f"{fqn}.weight",
            "tied_to": aliases.get(f"{fqn}.weight"),
            "shape": list(w.shape),
            "dtype": dtype_name(w.dtype),
            "pattern": "2:4",
            "valid_24": True,
            "sha256": tensor_sha256(w),
        }
    return {
        "format": FORMAT + ".pretrained",
        "version": VERSION,
        "explorer_version": explorer_version(),
        "torch_version": torch.__version__,
        "created": now(),
        "model": model_description(model),
        "pruning": None if result is None else json.loads(result.to_json()),
        "provenance": provenance or {},
        "layers": layers,
    }


def export_onnx(
    model: nn.Module,
    path: str | os.PathLike,
    example_inputs: Any,
    *,
    dtype: str | torch.dtype = "float16",
    tokens: int = 1024,
    opset_version: int | None = None,
    overwrite: bool = False,
) -> OnnxReport:
    """Export the dense masked model to ONNX with ``torch.onnx.export`` and check its weights.

    The model is exported with its weights (the ``torch.export``-based exporter of
    ``torch.onnx``, which needs ``onnxscript``), then every 2:4 ``nn.Linear`` of the model must
    come out 2:4 in the file, or :class:`CheckpointError` is raised.

    Parameters
    ----------
    model : nn.Module
    path : str or path-like
        The ``.onnx`` file to write, by the rule of :mod:`explorer.output_paths` (an existing
        file only with ``overwrite=True``). The weights are kept inside the file when they fit
        ONNX's 2 GiB limit; larger models also write ``<path>.data`` beside it, by the same
        rule.
    example_inputs : torch.Tensor, tuple or dict
        One input batch: a tensor, a tuple of positional arguments, or a dict of keyword
        arguments (tokenized Hugging Face input as it is).
    dtype, tokens
        Passed to :func:`check_onnx` (the engine's precision and the token count).
    opset_version : int, optional
        The ONNX opset (the exporter's default otherwise).
    overwrite : bool, optional
        Replace an existing regular file at ``path`` (and ``<path>.data``).

    Returns
    -------
    OnnxReport
        :func:`check_onnx` of the written file.

    Examples
    --------
    >>> import os, tempfile, explorer
    >>> net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    >>> _ = explorer.prune(net, "magnitude", "2:4", progress=False)
    >>> path = os.path.join(tempfile.mkdtemp(), "net.onnx")
    >>> export_onnx(net, path, torch.randn(8, 64)).fallbacks
    {'2': 'outputs=10 not a multiple of 16, which sparse kernels need for float16'}
    """
    require("onnx", "deploy")
    require("onnxscript", "deploy")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(example_inputs, Mapping):
        args, kwargs = (), dict(example_inputs)
    elif isinstance(example_inputs, tuple):
        args, kwargs = example_inputs, None
    elif isinstance(example_inputs, torch.Tensor):
        args, kwargs = (example_inputs,), None
    else:
        raise TypeError(
            "example_inputs must be a tensor, a tuple of positional inputs or a dict of keyword "
            f"inputs, got {type(example_inputs).__name__}"
        )
    path = Path(path).expanduser()
    if not path.parent.is_dir():
        raise FileNotFoundError(f"the folder {path.parent} does not exist; create it first")
    target = check_output_path(path, overwrite=overwrite, what="ONNX export")
    expected = sparse_layers(model)
    weight_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    config = getattr(model, "config", None)
    cached = getattr(config, "use_cache", None)
    if isinstance(kwargs, dict) and cached is not None:
        kwargs.setdefault("use_cache", False)  # a KV-cache object is no graph output
    training = model.training
    model.eval()
    folder = Path(os.path.realpath(target.parent))
    try:
        if cached is not None:
            config.use_cache = False
        with replacing_folder(folder, overwrite=overwrite, what="ONNX export") as tmp:
            try:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", category=DeprecationWarning)
                    warnings.filterwarnings("ignore", category=FutureWarning)
                    torch.onnx.export(
                        model,
                        args,
                        str(tmp / target.name),
                        kwargs=kwargs,
                        export_params=True,
                        opset_version=opset_version,
                        dynamo=True,
                        external_data=weight_bytes > _EMBED_LIMIT,
                        verbose=False,
                    )
            except Exception as exc:
                first = _ANSI.sub("", str(exc)).strip().splitlines()
                raise CheckpointError(
                    f"torch.onnx.export could not export {type(model).__name__}: "
                    f"{type(exc).__name__}: {first[0] if first else ''}"
                ) from exc
    finally:
        model.train(training)
        if cached is not None:
            config.use_cache = cached
    report = check_onnx(target, dtype=dtype, tokens=tokens)
    found = {w.layer: w for w in report.weights}
    lost = [name for name in expected if name in found and not found[name].valid_24]
    if lost:
        raise CheckpointError(
            f"the ONNX export of {type(model).__name__} lost 2:4 on {lost[:5]}: the weights "
            "changed on the way (an exporter optimisation?); the file is at " + str(path)
        )
    return report


def verify_pretrained(directory: str | os.PathLike) -> CheckpointReport:
    """Check a folder written by :func:`export_pretrained`: every 2:4 layer and its checksum.

    Parameters
    ----------
    directory : str or path-like

    Returns
    -------
    CheckpointReport
        Every listed layer was found in the folder's safetensors files, is still 2:4 and
        matches its checksum.

    Raises
    ------
    CheckpointError
        No manifest, a manifest larger than
        :data:`~explorer.checkpoint.bounded_json.MAX_TEXT_CHARS` bytes (refused before it is
        read), a layer missing from the weights, no longer 2:4, or changed.

    Examples
    --------
    A folder :func:`export_pretrained` did not write (its example verifies one it did):

    >>> import tempfile
    >>> verify_pretrained(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    explorer.checkpoint.manifest.CheckpointError: ... has no sparsity_manifest.json; it was not written by export_pretrained
    """
    safetensors = require("safetensors", "deploy")
    directory = Path(directory)
    manifest_path = directory / MANIFEST_NAME
    if not manifest_path.is_file():
        raise CheckpointError(
            f"{directory} has no {MANIFEST_NAME}; it was not written by export_pretrained"
        )
    size = manifest_path.stat().st_size
    if size > MAX_TEXT_CHARS:  # a UTF-8 file holds at least one byte per character
        raise CheckpointError(
            f"{manifest_path} is {size:,} bytes, expected at most {MAX_TEXT_CHARS:,}; the file "
            "was altered or the folder was not written by export_pretrained"
        )
    manifest = parse_json_manifest(manifest_path.read_text(), str(manifest_path))
    files = sorted(directory.glob("*.safetensors"))
    where: dict[str, Path] = {}
    for file in files:
        try:
            with safetensors.safe_open(str(file), framework="pt") as f:
                where.update(dict.fromkeys(f.keys(), file))
        except Exception as exc:
            raise CheckpointError(f"{file} cannot be read as safetensors ({exc})") from None
    records = []
    for fqn, layer in manifest["layers"].items():
        param = layer["param"]
        if param not in where and layer.get("tied_to") in where:
            param = layer["tied_to"]
        if param not in where:
            raise CheckpointError(
                f"layer {fqn!r} is listed in {MANIFEST_NAME} but {param!r} is in none of "
                f"{[f.name for f in files]}; the folder is incomplete"
            )
        with safetensors.safe_open(str(where[param]), framework="pt") as f:
            weight = f.get_tensor(param)
        if list(weight.shape) != layer["shape"] or tensor_sha256(weight) != layer["sha256"]:
            report = check_pattern(weight, "2:4") if weight.dim() == 2 else None
            state = "" if report is None or report.valid else " and is no longer 2:4"
            raise CheckpointError(
                f"layer {fqn!r} in {where[param].name} does not match its checksum{state}; the "
                "weights changed after export"
            )
        size = weight.numel() * weight.element_size()
        shape = (layer["shape"][0], layer["shape"][1])
        records.append(LayerRecord(fqn, shape, layer["dtype"], "2:4", size, size))
    total = sum(f.stat().st_size for f in files)
    return CheckpointReport(directory, total, total, tuple(records), manifest)
