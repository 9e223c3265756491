"""What a local Hugging Face checkpoint folder holds, read from its files without loading weights.

:func:`inspect_folder` checks that a folder is one ``save_pretrained`` wrote (``config.json``,
safetensors weights, tokenizer files) and says which architecture and task it is, so a bad path
is refused in a line before anything heavy happens. Nothing here writes to the folder or touches
the network.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TASKS", "CheckpointFolder", "inspect_folder", "is_checkpoint_path"]

#: What :func:`explorer.models.from_pretrained` can measure: perplexity or embedding fidelity.
TASKS = ("causal-lm", "encoder")

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.txt", "vocab.json", "spiece.model")
_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
_ENCODER_SUFFIXES = (
    "Model",
    "ForMaskedLM",
    "ForSequenceClassification",
    "ForTokenClassification",
    "ForPreTraining",
)


@dataclass(frozen=True)
class CheckpointFolder:
    """A checked checkpoint folder: where it is, its architecture and what it is measured on.

    Attributes
    ----------
    path : str
        The folder, absolute.
    architecture : str
        ``config.json``'s first ``architectures`` entry (``"LlamaForCausalLM"``), or its
        ``model_type`` where it lists none.
    model_type : str
        ``config.json``'s ``model_type`` (``"llama"``).
    task : str
        ``"causal-lm"`` or ``"encoder"``.
    weights : tuple of str
        The safetensors file names.
    """

    path: str
    architecture: str
    model_type: str
    task: str
    weights: tuple[str, ...]

    @property
    def label(self) -> str:
        """``"<folder name> (<architecture>)"``, the bundle's name."""
        return f"{Path(self.path).name} ({self.architecture})"

    def __repr__(self) -> str:
        return (
            f"CheckpointFolder({self.label}, task={self.task!r}, {len(self.weights)} weight files)"
        )

    def _repr_html_(self) -> str:
        from explorer import _html

        rows = [
            ("folder", self.path),
            ("architecture", self.architecture),
            ("model_type", self.model_type),
            ("task", self.task),
            ("weights", ", ".join(self.weights)),
        ]
        return _html.table(["", ""], rows, caption=f"CheckpointFolder {self.label}")


def is_checkpoint_path(name: object) -> bool:
    """Whether a ``--model`` value means a folder rather than a bundled name.

    A value that exists on disk, or that is written like a path (``./m``, ``~/m``, ``a/b``), is a
    folder; bare names such as ``"digits-mlp"`` are bundled names.

    Parameters
    ----------
    name : object
        The ``--model`` value.

    Returns
    -------
    bool

    Examples
    --------
    >>> is_checkpoint_path("digits-mlp"), is_checkpoint_path("./my-model")
    (False, True)
    """
    if not isinstance(name, (str, os.PathLike)):
        return False
    text = os.fspath(name)
    return bool(text) and (
        os.sep in text or "/" in text or text.startswith(("~", ".")) or Path(text).exists()
    )


def _task(architecture: str, model_type: str, task: str, path: Path) -> str:
    if task in TASKS:
        return task
    if task != "auto":
        raise ValueError(f"task={task!r}: expected 'auto' or one of {', '.join(TASKS)}")
    if architecture.endswith(_CAUSAL_SUFFIXES):
        return "causal-lm"
    if architecture.endswith(_ENCODER_SUFFIXES):
        return "encoder"
    raise ValueError(
        f"{path}: cannot tell whether architecture {architecture!r} is a causal LM or an encoder; "
        "pass task='causal-lm' or task='encoder'"
    )


def _config(path: Path) -> dict:
    file = path / "config.json"
    if not file.is_file():
        raise FileNotFoundError(
            f"{path} has no config.json: expected a folder written by save_pretrained "
            "(config.json, *.safetensors and tokenizer files), or a bundled model name"
        )
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(
            f"{file} is not valid JSON ({exc}); write it again with save_pretrained"
        ) from None
    if not isinstance(config, dict):
        raise ValueError(f"{file} holds {type(config).__name__}, expected a JSON object")
    return config


def inspect_folder(path: str | os.PathLike, task: str = "auto") -> CheckpointFolder:
    """Check a ``save_pretrained`` folder and say what it holds, without loading any weight.

    Parameters
    ----------
    path : str or path-like
        The folder.
    task : str
        ``"auto"`` (from the architecture's name), ``"causal-lm"`` or ``"encoder"``.

    Returns
    -------
    CheckpointFolder

    Raises
    ------
    FileNotFoundError
        The path is not a folder, or lacks ``config.json``, safetensors weights or a tokenizer.
    ValueError
        The architecture is unknown to ``transformers``, needs remote code, or its task is
        unclear.

    Examples
    --------
    >>> import tempfile
    >>> from explorer.models.tiny import save_tiny_llama
    >>> folder = save_tiny_llama(tempfile.mkdtemp())
    >>> info = inspect_folder(folder)
    >>> info.architecture, info.task
    ('LlamaForCausalLM', 'causal-lm')
    >>> "LlamaForCausalLM" in info._repr_html_()
    True
    """
    # 1. A folder with a config.json that names an architecture transformers knows.
    where = Path(os.fspath(path)).expanduser()
    if not where.is_dir():
        what = "is not a folder" if where.exists() else "does not exist"
        raise FileNotFoundError(
            f"model {os.fspath(path)!r} {what}: expected a bundled name (digits-mlp, fashion-mlp, "
            "minilm, smollm2) or a folder written by save_pretrained"
        )
    where = where.resolve()
    config = _config(where)
    model_type = str(config.get("model_type") or "")
    architectures = config.get("architectures") or []
    architecture = str(architectures[0]) if architectures else model_type
    if "auto_map" in config:
        raise ValueError(
            f"{where} needs remote code (config.json has auto_map for {architecture!r}); the "
            "explorer never runs code from a checkpoint: use an architecture built into transformers"
        )
    from explorer.errors import require

    require("transformers", "models")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if model_type not in CONFIG_MAPPING_NAMES:
        raise ValueError(
            f"{where}: unknown architecture {architecture or '(none)'!r} (model_type "
            f"{model_type!r}) in config.json; expected one that this transformers knows, such as "
            "'llama', 'qwen2', 'gpt2' or 'bert' (or upgrade transformers)"
        )
    # 2. Safetensors weights (pickled .bin files are refused: loading them runs pickle).
    weights = tuple(sorted(p.name for p in where.glob("*.safetensors")))
    if not weights:
        pickled = sorted(p.name for p in where.glob("*.bin"))
        hint = (
            f"; it has {', '.join(pickled)} (pickle): save it again with "
            "save_pretrained(folder, safe_serialization=True)"
            if pickled
            else ": save the model with model.save_pretrained(folder)"
        )
        raise FileNotFoundError(f"{where} has no *.safetensors weights{hint}")
    # 3. A tokenizer saved beside the weights.
    if not any((where / name).is_file() for name in _TOKENIZER_FILES):
        raise FileNotFoundError(
            f"{where} has no tokenizer (none of {', '.join(_TOKENIZER_FILES)}): save it into the "
            "same folder with tokenizer.save_pretrained(folder)"
        )
    return CheckpointFolder(
        path=str(where),
        architecture=architecture,
        model_type=model_type,
        task=_task(architecture, model_type, task, where),
        weights=weights,
    )
