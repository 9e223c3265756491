"""The manifest's schema: every field a checkpoint (or an export) may hold, checked before use.

A manifest is data to verify, not to obey. :func:`validate_checkpoint_manifest` and
:func:`validate_pretrained_manifest` check every field's type and bounds, refuse fields this
version does not know, and check the sections against each other: each compressed tensor
belongs to a 2:4 layer, each skipped layer is a dense one, and an alias only stands for a tensor
with the same checksum, shape and dtype that the file really stores. Each problem is one
:class:`CheckpointError` line naming the field, its value (cut short), what was expected and
what to do.
"""

from __future__ import annotations

import re
from typing import Any

from .bounded_json import short_repr
from .manifest import (
    FORMAT,
    PACKED,
    VERSION,
    CheckpointError,
    dtype_names,
)

__all__ = ["MAX_DIM", "MAX_NDIM", "validate_checkpoint_manifest", "validate_pretrained_manifest"]

#: Largest size of one dimension a manifest may state.
MAX_DIM = 2**40
#: Most dimensions a stored tensor may have.
MAX_NDIM = 16
_MAX_NAME = 1000
_SHA256 = re.compile(r"[0-9a-f]{64}")
_FIX = "the file was altered or damaged; use a good copy, or save the model again"

_TOP = {
    "format": True,
    "version": True,
    "layers": True,
    "skipped": True,
    "aliases": True,
    "tensors": True,
    "model": False,
    "explorer_version": False,
    "torch_version": False,
    "created": False,
    "pruning": False,
    "provenance": False,
}
_PRETRAINED_TOP = {
    "format": True,
    "version": True,
    "layers": True,
    "model": False,
    "explorer_version": False,
    "torch_version": False,
    "created": False,
    "pruning": False,
    "provenance": False,
}
_MODEL = {"class": False, "bundle": False, "hf_class": False, "hf_config": False}
_LAYER = {
    "param": True,
    "shape": True,
    "dtype": True,
    "sha256": True,
    "stored": True,
    "reason": False,
    "index": False,
    "valid_24": False,
    "density": False,
    "pruning": False,
    "quantize": False,
    "group_size": False,
}
_PRETRAINED_LAYER = {
    "param": True,
    "shape": True,
    "dtype": True,
    "sha256": True,
    "tied_to": False,
    "pattern": False,
    "valid_24": False,
}
_TENSOR = {"sha256": True, "shape": True, "dtype": True}


def validate_checkpoint_manifest(manifest: Any, where: str) -> dict[str, Any]:
    """Check every field of a :func:`~explorer.checkpoint.save_sparse` manifest.

    Parameters
    ----------
    manifest : Any
        The parsed JSON.
    where : str
        The file, for messages.

    Returns
    -------
    dict
        ``manifest`` itself, now known to fit the schema.

    Raises
    ------
    CheckpointError
        The first field that is missing, unknown, of the wrong type or out of bounds, or
        sections that contradict each other (an alias for a stored tensor, a compressed tensor
        without its 2:4 layer ...).

    Examples
    --------
    >>> sections = dict.fromkeys(("layers", "skipped", "aliases", "tensors"), {})
    >>> validate_checkpoint_manifest({"format": FORMAT, "version": 1, "model": "x", **sections}, "m")
    Traceback (most recent call last):
    ...
    explorer.checkpoint.manifest.CheckpointError: the manifest of m: field model is 'x', expected an object; the file was altered or damaged; use a good copy, or save the model again
    """
    _check_format(manifest, FORMAT, where)
    _fields(manifest, _TOP, "(top level)", where)
    if manifest.get("model") is not None:
        _check_model(manifest["model"], where)
    for key in ("pruning", "provenance"):
        if key in manifest and not (manifest[key] is None or isinstance(manifest[key], dict)):
            _fail(where, key, manifest[key], "an object or null")
    for key in ("explorer_version", "torch_version", "created"):
        if key in manifest and not (manifest[key] is None or isinstance(manifest[key], str)):
            _fail(where, key, manifest[key], "a string")
    tensors = _section(manifest, "tensors", where)
    for name, entry in tensors.items():
        field = f"tensors[{short_repr(name)}]"
        _fields(entry, _TENSOR, field, where)
        _check_sha(entry["sha256"], f"{field}.sha256", where)
        _check_dtype(entry["dtype"], f"{field}.dtype", where)
        _check_shape(entry["shape"], f"{field}.shape", where, ndim=None)
    layers = _section(manifest, "layers", where)
    for fqn, layer in layers.items():
        _check_layer(fqn, layer, _LAYER, where)
        if layer["stored"] not in ("2:4", "dense"):
            _fail(where, f"layers[{short_repr(fqn)}].stored", layer["stored"], "'2:4' or 'dense'")
        for key, kinds, expected in (
            ("reason", (str,), "a string"),
            ("index", (int,), "a non-negative integer"),
            ("valid_24", (bool,), "true or false"),
            ("density", (int, float, type(None)), "a number or null"),
            ("pruning", (dict, type(None)), "an object or null"),
        ):
            value = layer.get(key)
            if key in layer and (
                not isinstance(value, kinds)
                or (key != "valid_24" and isinstance(value, bool))
                or (key == "index" and not 0 <= value <= MAX_DIM)
            ):
                _fail(where, f"layers[{short_repr(fqn)}].{key}", value, expected)
        _check_quantized(fqn, layer, where)
    skipped = _section(manifest, "skipped", where)
    for fqn, reason in skipped.items():
        if not isinstance(reason, str):
            _fail(where, f"skipped[{short_repr(fqn)}]", reason, "a string (why it stayed dense)")
        if layers.get(fqn, {}).get("stored") != "dense":
            _fail(
                where,
                f"skipped[{short_repr(fqn)}]",
                reason,
                "a layer that 'layers' lists as stored dense",
            )
    aliases = _section(manifest, "aliases", where)
    _check_compressed_tensors(tensors, layers, where)
    _check_aliases(aliases, tensors, layers, where)
    return manifest


def validate_pretrained_manifest(manifest: Any, where: str) -> dict[str, Any]:
    """Check every field of the ``sparsity_manifest.json`` of a Hugging Face export.

    Parameters
    ----------
    manifest : Any
        The parsed JSON.
    where : str
        The file, for messages.

    Returns
    -------
    dict
        ``manifest`` itself.

    Raises
    ------
    CheckpointError
        A missing, unknown, mistyped or out-of-bounds field.

    Examples
    --------
    >>> m = {"format": FORMAT + ".pretrained", "version": 1, "layers": {"x": {}}}
    >>> validate_pretrained_manifest(m, "sparsity_manifest.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    explorer.checkpoint.manifest.CheckpointError: ... field layers['x'] lacks 'param', ...
    """
    _check_format(manifest, FORMAT + ".pretrained", where)
    _fields(manifest, _PRETRAINED_TOP, "(top level)", where)
    if manifest.get("model") is not None:
        _check_model(manifest["model"], where)
    for key in ("pruning", "provenance"):
        if key in manifest and not (manifest[key] is None or isinstance(manifest[key], dict)):
            _fail(where, key, manifest[key], "an object or null")
    layers = _section(manifest, "layers", where)
    for fqn, layer in layers.items():
        _check_layer(fqn, layer, _PRETRAINED_LAYER, where)
        tied = layer.get("tied_to")
        if tied is not None and (not _is_name(tied) or tied == layer["param"]):
            _fail(
                where,
                f"layers[{short_repr(fqn)}].tied_to",
                tied,
                "null or the name of another tensor of the folder",
            )
        if layer.get("pattern", "2:4") != "2:4":
            _fail(where, f"layers[{short_repr(fqn)}].pattern", layer["pattern"], "'2:4'")
        if "valid_24" in layer and layer["valid_24"] is not True:
            _fail(where, f"layers[{short_repr(fqn)}].valid_24", layer["valid_24"], "true")
    return manifest


def _check_format(manifest: Any, fmt: str, where: str) -> None:
    if not isinstance(manifest, dict) or manifest.get("format") != fmt:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise CheckpointError(
            f"{where} is not a sparsity-explorer checkpoint (manifest format {short_repr(found)}, "
            f"expected {fmt!r})"
        )
    version = manifest.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version != VERSION:
        raise CheckpointError(
            f"{where} has checkpoint version {short_repr(version)}; this explorer reads "
            f"version {VERSION}. Upgrade sparsity-explorer to read it"
        )


def _check_model(model: Any, where: str) -> None:
    if not isinstance(model, dict):
        _fail(where, "model", model, "an object")
    _fields(model, _MODEL, "model", where)
    for key in ("class", "bundle", "hf_class"):
        value = model.get(key)
        if value is not None and not _is_name(value):
            _fail(where, f"model.{key}", value, f"null or a name of at most {_MAX_NAME} characters")
    hf_class = model.get("hf_class")
    if hf_class is not None and not hf_class.isidentifier():
        _fail(where, "model.hf_class", hf_class, "a Python class name such as 'LlamaForCausalLM'")
    if model.get("hf_config") is not None and not isinstance(model["hf_config"], dict):
        _fail(where, "model.hf_config", model["hf_config"], "an object or null")


def _check_layer(fqn: str, layer: Any, schema: dict[str, bool], where: str) -> None:
    field = f"layers[{short_repr(fqn)}]"
    _fields(layer, schema, field, where)
    expected = f"{fqn}.weight" if fqn else "weight"
    if layer["param"] != expected:
        _fail(where, f"{field}.param", layer["param"], f"{expected!r} (the layer's weight)")
    _check_shape(layer["shape"], f"{field}.shape", where, ndim=2)
    _check_dtype(layer["dtype"], f"{field}.dtype", where)
    _check_sha(layer["sha256"], f"{field}.sha256", where)


def _check_compressed_tensors(tensors: dict, layers: dict, where: str) -> None:
    """Each ``::values``/``::positions`` tensor belongs to a 2:4 layer stored only that way."""
    packed = {layer["param"] for layer in layers.values() if layer["stored"] == "2:4"}
    for name in tensors:
        suffix = next((s for s in PACKED if name.endswith(s)), "")
        base = name.removesuffix(suffix)
        if suffix and base not in packed:
            _fail(
                where,
                f"tensors[{short_repr(name)}]",
                name,
                "the values, codes, scales or positions of a 2:4 layer",
            )
    for param in packed:
        if param in tensors:
            _fail(
                where,
                f"tensors[{short_repr(param)}]",
                param,
                "no plain tensor for a weight the manifest stores as 2:4",
            )


def _check_aliases(aliases: dict, tensors: dict, layers: dict, where: str) -> None:
    """An alias stands for a stored tensor with the same checksum, shape and dtype."""
    by_param = {layer["param"]: layer for layer in layers.values()}
    stored = {n: e for n, e in tensors.items() if not n.endswith(PACKED)}
    for param, layer in by_param.items():
        if layer["stored"] == "2:4":
            stored[param] = layer
    for alias, original in aliases.items():
        field = f"aliases[{short_repr(alias)}]"
        if not _is_name(original):
            _fail(where, field, original, "the name of a tensor stored in the file")
        if alias in stored:
            raise CheckpointError(
                f"the manifest of {where} makes {short_repr(alias)} an alias of {short_repr(original)}, "
                f"but the file stores {short_repr(alias)} itself; expected aliases only for tensors "
                f"the file does not store; {_FIX}"
            )
        if original not in stored:
            raise CheckpointError(
                f"the manifest of {where} makes {short_repr(alias)} an alias of {short_repr(original)}, "
                f"which the file does not store; expected an alias of a stored tensor; {_FIX}"
            )
        layer = by_param.get(alias)
        if layer is None:
            continue
        target = stored[original]
        if layer["stored"] != "dense" or any(
            layer[key] != target[key] for key in ("sha256", "shape", "dtype")
        ):
            raise CheckpointError(
                f"the manifest of {where} makes {short_repr(alias)} an alias of {short_repr(original)}, "
                f"but {short_repr(alias)} was saved as {layer['dtype']} {layer['shape']} with "
                f"checksum {layer['sha256'][:12]}... and {short_repr(original)} is "
                f"{target['dtype']} {target['shape']} with checksum {target['sha256'][:12]}...; "
                f"expected tied tensors to be identical; {_FIX}"
            )


def _check_quantized(fqn: str, layer: dict, where: str) -> None:
    """``quantize`` on a 2:4 layer: int4 or int8 with a sane ``group_size``, or FP8 without one."""
    field = f"layers[{short_repr(fqn)}]"
    if "quantize" not in layer and "group_size" not in layer:
        return
    if layer.get("quantize") not in ("int4", "int8", "float8_e4m3fn"):
        _fail(
            where, f"{field}.quantize", layer.get("quantize"), "'int4', 'int8' or 'float8_e4m3fn'"
        )
    if layer["stored"] != "2:4":
        _fail(where, f"{field}.stored", layer["stored"], "'2:4' for a quantized layer")
    g = layer.get("group_size")
    if layer["quantize"] == "float8_e4m3fn":
        if "group_size" in layer:
            _fail(where, f"{field}.group_size", g, "no group_size (FP8 has one scale a row)")
        return
    k = layer["shape"][1]
    if not (isinstance(g, int) and not isinstance(g, bool) and 0 < g <= MAX_DIM and g % 4 == 0):
        _fail(where, f"{field}.group_size", g, "a positive multiple of 4")
    if k % g:
        _fail(where, f"{field}.group_size", g, f"a group size dividing in_features={k}")


def _section(manifest: dict, key: str, where: str) -> dict:
    section = manifest[key]
    if not isinstance(section, dict):
        _fail(where, key, section, "an object")
    for name in section:
        if not _is_name(name) and not (key in ("layers", "skipped") and name == ""):
            _fail(where, f"{key} key", name, f"a name of 1 to {_MAX_NAME} characters")
    return section


def _fields(entry: Any, schema: dict[str, bool], field: str, where: str) -> None:
    if not isinstance(entry, dict):
        _fail(where, field, entry, "an object")
    missing = [k for k, required in schema.items() if required and k not in entry]
    if missing:
        raise CheckpointError(
            f"the manifest of {where}: field {field} lacks {missing[0]!r}, expected the fields "
            f"{sorted(k for k, required in schema.items() if required)}; {_FIX}"
        )
    unknown = sorted(set(entry) - set(schema))
    if unknown:
        raise CheckpointError(
            f"the manifest of {where}: field {field} has the unknown field "
            f"{short_repr(unknown[0])}, expected only {sorted(schema)}; {_FIX} (or read it with the "
            "sparsity-explorer version that wrote it)"
        )


def _check_shape(shape: Any, field: str, where: str, ndim: int | None) -> None:
    ok = (
        isinstance(shape, list)
        and (len(shape) == ndim if ndim is not None else len(shape) <= MAX_NDIM)
        and all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_DIM for s in shape)
    )
    if not ok:
        dims = f"{ndim}" if ndim is not None else f"at most {MAX_NDIM}"
        _fail(where, field, shape, f"a list of {dims} integers from 0 to 2**40")


def _check_dtype(name: Any, field: str, where: str) -> None:
    if name not in dtype_names():
        _fail(where, field, name, f"one of {sorted(dtype_names())}")


def _check_sha(value: Any, field: str, where: str) -> None:
    if not (isinstance(value, str) and _SHA256.fullmatch(value)):
        _fail(where, field, value, "64 lowercase hex digits (a SHA-256)")


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_NAME


def _fail(where: str, field: str, value: Any, expected: str) -> None:
    raise CheckpointError(
        f"the manifest of {where}: field {field} is {short_repr(value)}, expected {expected}; {_FIX}"
    )
