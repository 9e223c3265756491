"""Rebuild the model a checkpoint describes, proving on the meta device that it fits first.

A manifest names a Hugging Face class and config; building that for real allocates whatever the
config says (a 5 KB file claiming a default LLaMA config asks for 27 GB). So the model is first
built on the meta device, where parameters have shapes but no memory, under a budget of torch
calls that grows with the number of tensors in the file. Its tensors' names and shapes must be
the ones the file will produce, and every alias the manifest records must be a tensor the
model itself shares (one Parameter object); only then is the model built for real.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from explorer.errors import require

from .bounded_json import short_repr
from .manifest import PACKED, CheckpointError

__all__ = [
    "TensorSpec",
    "build_model",
    "build_on_meta",
    "check_model_fits",
    "check_ties",
    "expected_state",
    "nbytes",
]


class TensorSpec(NamedTuple):
    """What the checkpoint says one tensor of the rebuilt ``state_dict`` is."""

    shape: tuple[int, ...]
    dtype: str
    sha256: str


def expected_state(manifest: dict[str, Any]) -> dict[str, TensorSpec]:
    """The dense ``state_dict`` a (schema-checked) manifest promises: name to shape, dtype, sha.

    Parameters
    ----------
    manifest : dict[str, Any]
        The checked manifest.

    Returns
    -------
    dict[str, TensorSpec]
        Aliases included.

    Examples
    --------
    >>> sha = "0" * 64
    >>> manifest = {"tensors": {"b": {"shape": [4], "dtype": "float16", "sha256": sha}},
    ...             "layers": {}, "aliases": {"c": "b"}}
    >>> expected_state(manifest)["c"]
    TensorSpec(shape=(4,), dtype='float16', sha256='0000000000000000000000000000000000000000000000000000000000000000')
    """
    state = {
        name: TensorSpec(tuple(e["shape"]), e["dtype"], e["sha256"])
        for name, e in manifest["tensors"].items()
        if not name.endswith(PACKED)
    }
    for layer in manifest["layers"].values():
        if layer["stored"] == "2:4":
            state[layer["param"]] = TensorSpec(
                tuple(layer["shape"]), layer["dtype"], layer["sha256"]
            )
    for alias, original in manifest["aliases"].items():
        state[alias] = state[original]
    return state


def nbytes(model: nn.Module) -> int:
    """Bytes of a model's parameters and buffers, each shared tensor counted once.

    Parameters
    ----------
    model : torch.nn.Module
        The model (on any device, meta included).

    Returns
    -------
    int

    Examples
    --------
    >>> nbytes(nn.Linear(4, 2))
    40
    """
    seen: set[int] = set()
    total = 0
    for tensor in (*model.parameters(), *model.buffers()):
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor.numel() * tensor.element_size()
    return total


class _Budget(TorchFunctionMode):
    """Stops a model's construction after ``limit`` torch calls."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit, self.calls = limit, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        if self.calls > self.limit:
            raise _OverBudget(self.limit)
        return func(*args, **(kwargs or {}))


class _OverBudget(RuntimeError):
    pass


def build_on_meta(manifest: dict[str, Any], where: str) -> nn.Module | None:
    """The manifest's Hugging Face model built on the meta device (no memory), or None.

    None for a bundled model (it is built from this package's own code, not from the file).

    Parameters
    ----------
    manifest : dict[str, Any]
        The checked manifest.
    where : str
        The file, for messages.

    Returns
    -------
    torch.nn.Module or None

    Raises
    ------
    CheckpointError
        A plain torch model (the file holds no code to build it), a class transformers does
        not have, a config that cannot be built, or one whose construction takes more than
        ``50 * tensors + 1000`` torch calls (far more layers than the file holds).

    Examples
    --------
    >>> from transformers import LlamaConfig
    >>> config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
    ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2).to_dict()
    >>> manifest = {"model": {"hf_class": "LlamaForCausalLM", "hf_config": config}, "tensors": {}}
    >>> build_on_meta(manifest, "m").lm_head.weight.device
    device(type='meta')
    """
    cls, config = _hf_class_and_config(manifest, where)
    if cls is None:
        return None
    limit = 1000 + 50 * len(manifest["tensors"])
    try:
        with torch.device("meta"), _Budget(limit):
            return cls(config).eval()
    except _OverBudget:
        raise CheckpointError(
            f"the config in {where} builds a {cls.__name__} that takes more than {limit:,} torch "
            f"calls to construct, expected a model of about {len(manifest['tensors'])} tensors "
            "like the file holds; the manifest's hf_config was altered. Build the model yourself "
            "and pass model="
        ) from None
    except Exception as exc:  # any error of a third-party constructor on altered input
        raise CheckpointError(
            f"the config in {where} cannot build {cls.__name__} ({type(exc).__name__}: "
            f"{short_repr(str(exc), 120)}); expected a config transformers can build. Build the "
            "model yourself and pass model="
        ) from None


def build_model(manifest: dict[str, Any], where: str) -> nn.Module:
    """The model the manifest describes, built for real (after :func:`build_on_meta` passed).

    Parameters
    ----------
    manifest : dict[str, Any]
        The checked manifest.
    where : str
        The file, for messages.

    Returns
    -------
    torch.nn.Module
        The Hugging Face model in eval mode, or the bundled model.

    Examples
    --------
    >>> build_model({"model": {"class": "torch.nn.Linear"}}, "m.safetensors")
    Traceback (most recent call last):
    ...
    explorer.checkpoint.manifest.CheckpointError: m.safetensors holds a plain torch model (torch.nn.Linear); the file stores weights, not code. Build the same architecture and pass it as model=
    """
    cls, config = _hf_class_and_config(manifest, where)
    if cls is not None:
        return cls(config).eval()
    from explorer.models import MODELS, load

    bundle = (manifest.get("model") or {}).get("bundle")
    if bundle not in MODELS:
        raise CheckpointError(
            f"{where} was saved from bundle {short_repr(bundle)}, which is not bundled; expected "
            f"one of {sorted(MODELS)}. Build the model yourself and pass model="
        )
    return load(bundle).model


def _hf_class_and_config(manifest: dict[str, Any], where: str) -> tuple[Any, Any]:
    described = manifest.get("model") or {}
    if not described.get("hf_class"):
        if described.get("bundle"):
            return None, None
        raise CheckpointError(
            f"{where} holds a plain torch model ({described.get('class') or 'unknown class'}); "
            "the file stores weights, not code. Build the same architecture and pass it as model="
        )
    transformers = require("transformers", "models")
    name = described["hf_class"]
    cls = getattr(transformers, name, None)
    if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):
        raise CheckpointError(
            f"{where} names the Hugging Face class {short_repr(name)}, which this transformers "
            "does not have; build the model yourself and pass model="
        )
    try:
        config = cls.config_class.from_dict(dict(described.get("hf_config") or {}))
    except Exception as exc:  # any error of a third-party parser on altered input
        raise CheckpointError(
            f"the hf_config in {where} is not a valid {cls.config_class.__name__} "
            f"({type(exc).__name__}: {short_repr(str(exc), 120)}); the manifest was altered"
        ) from None
    return cls, config


def check_model_fits(
    model: nn.Module, expected: dict[str, TensorSpec], where: str, file_bytes: int
) -> None:
    """The model's ``state_dict`` has exactly the file's names and shapes.

    ``model`` may be on the meta device; the error states the memory it would need.

    Parameters
    ----------
    model : torch.nn.Module
        The model the file is loaded into.
    expected : dict[str, TensorSpec]
        What the file holds (:func:`expected_state`).
    where : str
        The file, for messages.
    file_bytes : int
        The file's size, for the message.

    Examples
    --------
    >>> spec = {"weight": TensorSpec((2, 4), "float32", "0" * 64)}
    >>> check_model_fits(nn.Linear(4, 2, bias=False), spec, "m", 32)
    >>> check_model_fits(nn.Linear(4, 3, bias=False), spec, "m", 32)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    explorer.checkpoint.manifest.CheckpointError: m does not fit the Linear its manifest describes: ...
    """
    state = model.state_dict(keep_vars=True)
    missing = sorted(set(state) - set(expected))
    unexpected = sorted(set(expected) - set(state))
    wrong = [
        f"{name} {list(state[name].shape)} in the model, {list(spec.shape)} in the file"
        for name, spec in expected.items()
        if name in state and tuple(state[name].shape) != spec.shape
    ]
    if not (missing or unexpected or wrong):
        return
    count = sum(p.numel() for p in model.parameters())
    problems = []
    if missing:
        problems.append(f"the model has {len(missing)} tensors the file lacks, e.g. {missing[:3]}")
    if unexpected:
        problems.append(
            f"the file has {len(unexpected)} tensors the model lacks, e.g. {unexpected[:3]}"
        )
    if wrong:
        problems.append(f"{len(wrong)} shapes differ, e.g. {wrong[0]}")
    raise CheckpointError(
        f"{where} does not fit the {type(model).__name__} its manifest describes: built from the "
        f"recorded config it has {count:,} parameters and would need {_size(nbytes(model))} of "
        f"memory, but the file holds {len(expected)} tensors in {_size(file_bytes)}; "
        f"{'; '.join(problems)}. The manifest's config was altered; nothing was allocated. "
        "Build the model yourself and pass model="
    )


def check_ties(
    model: nn.Module, aliases: dict[str, str], expected: dict[str, TensorSpec], where: str
) -> None:
    """Aliases only where the model shares one tensor, and shared tensors stored identical.

    Parameters
    ----------
    model : torch.nn.Module
        The model the file is loaded into.
    aliases : dict[str, str]
        The manifest's aliases: tensor name to the name it is stored under.
    expected : dict[str, TensorSpec]
        What the file holds (:func:`expected_state`).
    where : str
        The file, for messages.

    Examples
    --------
    >>> net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    >>> check_ties(net, {"1.weight": "0.weight"}, {}, "m")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    explorer.checkpoint.manifest.CheckpointError: the manifest of m makes '1.weight' the same tensor as '0.weight', but Sequential does not tie them ...
    """
    state = model.state_dict(keep_vars=True)
    owner = _shared(state)
    for alias, original in aliases.items():
        if alias in state and original in state and owner[alias] != owner[original]:
            raise CheckpointError(
                f"the manifest of {where} makes {short_repr(alias)} the same tensor as "
                f"{short_repr(original)}, but {type(model).__name__} does not tie them (two "
                "separate parameters); expected aliases only where the model shares one "
                "Parameter. The file was altered; use a good copy"
            )
    groups: dict[str, list[str]] = {}
    for name, first in owner.items():
        if name in expected:
            groups.setdefault(first, []).append(name)
    for names in groups.values():
        specs = {expected[n] for n in names}
        if len(specs) > 1:
            raise CheckpointError(
                f"{type(model).__name__} ties {short_repr(names[0])} and {short_repr(names[1])} "
                f"(one Parameter), but {where} stores them with different values (checksums "
                f"{expected[names[0]].sha256[:12]}... and {expected[names[1]].sha256[:12]}...); "
                "expected tied tensors to be identical. The file was altered, or load it into "
                "a model that does not tie them"
            )


def _shared(state: dict[str, torch.Tensor]) -> dict[str, str]:
    """Each name to the first name of the same tensor (one object, or one memory)."""
    owner: dict[str, str] = {}
    seen: dict[Any, str] = {}
    for name, tensor in state.items():
        keys = [("id", id(tensor))]
        if not tensor.is_meta and tensor.numel():
            keys.append(
                ("mem", tensor.device, tensor.data_ptr(), tuple(tensor.shape), tensor.stride())
            )
        first = next((seen[k] for k in keys if k in seen), name)
        for k in keys:
            seen.setdefault(k, first)
        owner[name] = first
    return owner


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
