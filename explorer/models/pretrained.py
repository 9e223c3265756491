"""Bring your own checkpoint: a local ``save_pretrained`` folder and a text file as a bundle.

:func:`from_pretrained` loads the folder with ``transformers``, offline (``local_files_only``,
``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE`` set while it loads, no remote code), and builds
the same kind of bundle as the shipped models:

* a **causal LM** (``...ForCausalLM``) is scored like ``smollm2``: the text is tokenized once,
  its last ``n_eval`` non-overlapping windows of ``seq_len`` tokens are the held-out evaluation
  text (perplexity, each window on its own), and calibration windows are drawn from the
  non-overlapping windows before them;
* an **encoder** (``BertModel``, ``...ForMaskedLM``, ...) is scored like ``minilm``: mean-pooled
  embeddings of the text's last ``n_eval`` sentences against the dense model's
  (``cosine_to_dense``, ``top10_agreement``); calibration sentences come from the ones before.

The folder is only read, never written.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from explorer.errors import require
from explorer.models import text as corpus
from explorer.models.bundle import ModelBundle
from explorer.models.folder import CheckpointFolder, inspect_folder
from explorer.models.metrics import cosine_to_reference, perplexity, topk_agreement
from explorer.models.minilm import SentenceEncoder, tokenized_batches

__all__ = ["from_pretrained", "load_model", "output_layers"]


@contextlib.contextmanager
def _offline():
    """Set the Hugging Face offline switches while loading; restore them afterwards."""
    names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    saved = {n: os.environ.get(n) for n in names}
    os.environ.update(dict.fromkeys(names, "1"))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _bar(progress: bool, iterable: Any = None, **kwargs: Any) -> Any:
    """A ``tqdm`` bar, hidden unless ``progress``.

    A sweep's ``--no-progress`` hides it too (it swaps this module's ``tqdm`` for a disabled one, so
    ``disable`` is only ever passed here).
    """
    return tqdm(iterable, **kwargs) if progress else tqdm(iterable, disable=True, **kwargs)


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def _load(info: CheckpointFolder, what: str, loader: Any, **kwargs: Any) -> Any:
    transformers = require("transformers", "models")
    verbosity = transformers.logging.get_verbosity()
    bars = transformers.utils.logging.is_progress_bar_enabled()
    # 1. The explorer's own loading bar stands for transformers' per-file ones.
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        with _offline():
            return loader.from_pretrained(
                info.path, local_files_only=True, trust_remote_code=False, **kwargs
            )
    except (OSError, ValueError, ImportError, KeyError, RuntimeError) as exc:
        raise ValueError(
            f"{info.path}: the {what} cannot be loaded offline ({_first_line(exc)}); save it "
            "again with save_pretrained, with every file it needs, into this folder"
        ) from None
    finally:
        transformers.logging.set_verbosity(verbosity)
        if bars:
            transformers.utils.logging.enable_progress_bar()


def _module(info: CheckpointFolder) -> nn.Module:
    transformers = require("transformers", "models")
    if info.task == "causal-lm":
        return _load(info, "model", transformers.AutoModelForCausalLM, dtype=torch.float32).eval()
    return SentenceEncoder(_load(info, "model", transformers.AutoModel, dtype=torch.float32)).eval()


def load_model(path: str | os.PathLike, task: str = "auto") -> nn.Module:
    """Only the model of a ``save_pretrained`` folder, offline, in float32 and eval mode.

    A causal LM as ``AutoModelForCausalLM`` loads it; an encoder wrapped in
    :class:`~explorer.models.minilm.SentenceEncoder`. For the layer doctor, which needs no text.

    Parameters
    ----------
    path : str or path-like
        The folder.
    task : str, optional
        ``"auto"`` (from the architecture's name), ``"causal-lm"`` or ``"encoder"``.

    Returns
    -------
    torch.nn.Module

    Examples
    --------
    >>> import tempfile
    >>> from explorer.models.tiny import save_tiny_llama
    >>> type(load_model(save_tiny_llama(tempfile.mkdtemp()))).__name__
    'LlamaForCausalLM'
    """
    return _module(inspect_folder(path, task))


def output_layers(model: nn.Module) -> set[str]:
    """Names of the Linears that produce the output vocabulary or share the token embedding.

    These are never pruned: the LM head (tied to the embedding or not) and any Linear whose
    weight is the input embedding's.

    Parameters
    ----------
    model : torch.nn.Module
        The model.

    Returns
    -------
    set of str

    Examples
    --------
    >>> class LM(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.embed, self.body, self.head = nn.Embedding(10, 4), nn.Linear(4, 4), nn.Linear(4, 10)
    ...     def get_output_embeddings(self):
    ...         return self.head
    >>> sorted(output_layers(LM()))
    ['head']
    """
    heads: set[int] = set()
    out = getattr(model, "get_output_embeddings", None)
    head = out() if callable(out) else None
    if isinstance(head, nn.Module):
        heads.add(id(head))
    inp = getattr(model, "get_input_embeddings", None)
    embedding = inp() if callable(inp) else None
    tied = getattr(embedding, "weight", None)
    return {
        fqn
        for fqn, module in model.named_modules()
        if isinstance(module, nn.Linear) and (id(module) in heads or module.weight is tied)
    }


def _linear_filter(model: nn.Module, skip: str | None = None, prefix: str = ""):
    excluded = frozenset(prefix + fqn for fqn in output_layers(model))

    def filter_fn(module: nn.Module, fqn: str) -> bool:
        return (
            isinstance(module, nn.Linear)
            and fqn not in excluded
            and (skip is None or skip not in fqn.split("."))
        )

    filter_fn.__qualname__ = "every Linear but the output layer" + (f" and {skip}" if skip else "")
    return filter_fn


def _read_text(text: Any, info: CheckpointFolder) -> tuple[Path, str]:
    if text is None:
        raise ValueError(
            f"{info.label} is a {info.task} and needs a text to evaluate and calibrate on: pass "
            "text='corpus.txt' (on the command line: --text corpus.txt)"
        )
    path = Path(os.fspath(text)).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"text {os.fspath(text)!r} is not a file: expected a UTF-8 text file such as corpus.txt"
        )
    try:
        return path.resolve(), path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"text {str(path)!r} is not UTF-8 ({exc}); convert it first") from None


def _positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={value!r}: expected a positive int")


def from_pretrained(
    path: str | os.PathLike,
    text: str | os.PathLike | None = None,
    task: str = "auto",
    *,
    n_eval: int | None = None,
    seq_len: int = 256,
    batch_size: int | None = None,
    max_length: int = 128,
    k: int = 10,
    progress: bool = True,
) -> ModelBundle:
    """Load a local Hugging Face ``save_pretrained`` folder, offline, as a :class:`ModelBundle`.

    Parameters
    ----------
    path : str or path-like
        A folder with ``config.json``, ``*.safetensors`` weights and tokenizer files.
    text : str or path-like
        A UTF-8 text file: its end is the evaluation text, the part before it the calibration
        text. Required.
    task : str
        ``"auto"`` (from the architecture's name), ``"causal-lm"`` or ``"encoder"``.
    n_eval : int, optional
        Evaluation windows (causal LM, default 8) or sentences (encoder, default 200).
    seq_len : int
        Tokens per window (causal LM).
    batch_size : int, optional
        Windows (causal LM, default 4) or sentences (encoder, default 32) per forward pass.
    max_length : int
        Tokens per sentence at most (encoder).
    k : int
        Neighbours compared by ``top10_agreement`` (encoder).
    progress : bool
        ``tqdm.auto`` bars while loading, evaluating and drawing calibration batches.

    Returns
    -------
    ModelBundle
        Named ``"<folder> (<architecture>)"``. ``options`` records the folder's absolute path
        (``"path"``: what a sweep records as the model), the text file and the token ranges
        (causal LM) or sentence ranges (encoder) that calibration and evaluation use;
        ``filter_fn`` selects every Linear except the LM head (tied to the embedding or not).

    Raises
    ------
    FileNotFoundError
        Not a folder; no ``config.json``, safetensors weights or tokenizer; no text file.
    ValueError
        An unknown architecture, one that needs remote code, or a text too short (the message
        says how many tokens are needed).

    Examples
    --------
    >>> import tempfile
    >>> from explorer.models.tiny import sample_text, save_tiny_llama
    >>> work = Path(tempfile.mkdtemp())
    >>> folder = save_tiny_llama(work / "tiny")
    >>> _ = (work / "corpus.txt").write_text(sample_text())
    >>> bundle = from_pretrained(folder, work / "corpus.txt", seq_len=64, progress=False)
    >>> bundle.name, bundle.metric, bundle.prunable[:2]
    ('tiny (LlamaForCausalLM)', 'perplexity', ['model.layers.0.self_attn.q_proj', 'model.layers.0.self_attn.k_proj'])
    >>> bundle.options["calibration_tokens"], bundle.options["eval_tokens"]
    ([0, 4288], [4330, 4842])
    """
    info = inspect_folder(path, task)
    _positive(seq_len=seq_len, max_length=max_length, k=k)
    for name, value in (("n_eval", n_eval), ("batch_size", batch_size)):
        if value is not None:
            _positive(**{name: value})
    text_path, raw = _read_text(text, info)
    build = _causal_lm if info.task == "causal-lm" else _encoder
    return build(
        info,
        text_path,
        raw,
        n_eval=n_eval,
        seq_len=seq_len,
        batch_size=batch_size,
        max_length=max_length,
        k=k,
        progress=progress,
    )


def _causal_lm(info: CheckpointFolder, text_path: Path, raw: str, **o: Any) -> ModelBundle:
    transformers = require("transformers", "models")
    n_eval, seq_len, batch_size = o["n_eval"] or 8, o["seq_len"], o["batch_size"] or 4
    # 1. Tokenizer, weights, then the text tokenized once.
    with _bar(o["progress"], total=3, desc=f"loading {Path(info.path).name}") as bar:
        tokenizer = _load(info, "tokenizer", transformers.AutoTokenizer)
        bar.update()
        model = _module(info)
        bar.update()
        ids = torch.tensor(tokenizer(raw, add_special_tokens=False)["input_ids"], dtype=torch.long)
        bar.update()
    # 2. The last n_eval windows are held out; calibration windows tile the text before them.
    needed = (n_eval + 1) * seq_len
    if len(ids) < needed:
        raise ValueError(
            f"text {str(text_path)!r} has {len(ids)} tokens with this tokenizer; at least "
            f"{needed} are needed ({n_eval} evaluation windows and 1 calibration window of "
            f"seq_len={seq_len}): use a longer text, or a smaller seq_len or n_eval"
        )
    eval_start = len(ids) - n_eval * seq_len
    cal_end = (eval_start // seq_len) * seq_len
    eval_windows = ids[eval_start:].view(n_eval, seq_len)
    pool = ids[:cal_end].view(-1, seq_len)

    def evaluate(m: nn.Module) -> dict[str, float]:
        # Batch by batch through metrics.perplexity, recombined: exp(total NLL / tokens).
        nll, count = 0.0, 0
        starts = range(0, n_eval, batch_size)
        for start in _bar(o["progress"], starts, desc="perplexity", leave=False):
            batch = eval_windows[start : start + batch_size]
            tokens = batch.shape[0] * (seq_len - 1)
            nll += math.log(perplexity(m, batch, batch_size=batch_size)) * tokens
            count += tokens
        return {"perplexity": math.exp(nll / count), "eval_tokens": float(eval_windows.numel())}

    def calibration(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
        pick = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))[:n]
        windows = pool[pick]
        starts = range(0, len(windows), batch_size)
        return [
            {"input_ids": windows[i : i + batch_size]}
            for i in _bar(o["progress"], starts, desc="calibration", leave=False)
        ]

    return ModelBundle(
        name=info.label,
        model=model,
        metric="perplexity",
        higher_is_better=False,
        evaluate_fn=evaluate,
        calibration_fn=calibration,
        filter_fn=_linear_filter(model),
        description=(
            f"{info.architecture} from {info.path}; {text_path.name}: calibration tokens "
            f"[0, {cal_end}) in {len(pool)} windows, evaluation tokens [{eval_start}, {len(ids)}) "
            f"in {n_eval} windows of {seq_len}"
        ),
        options={
            "path": info.path,
            "text": str(text_path),
            "task": info.task,
            "n_eval": n_eval,
            "seq_len": seq_len,
            "batch_size": batch_size,
            "calibration_tokens": [0, cal_end],
            "eval_tokens": [eval_start, len(ids)],
        },
    )


def _embed(model: nn.Module, batches: list[dict[str, torch.Tensor]], bar: bool) -> torch.Tensor:
    with torch.inference_mode():
        return torch.cat([model(**b) for b in _bar(bar, batches, desc="embed", leave=False)])


def _encoder(info: CheckpointFolder, text_path: Path, raw: str, **o: Any) -> ModelBundle:
    transformers = require("transformers", "models")
    n_eval, batch_size, max_length = o["n_eval"] or 200, o["batch_size"] or 32, o["max_length"]
    with _bar(o["progress"], total=2, desc=f"loading {Path(info.path).name}") as bar:
        tokenizer = _load(info, "tokenizer", transformers.AutoTokenizer)
        bar.update()
        model = _module(info)
        bar.update()
    # 1. The text's sentences: the last n_eval are held out, calibration draws from the rest.
    paragraphs = [" ".join(block.split()) for block in raw.split("\n\n")]
    pool = corpus.sentences([p for p in paragraphs if p])
    if len(pool) < n_eval + 1:
        raise ValueError(
            f"text {str(text_path)!r} has {len(pool)} distinct sentences of 6 to 60 words; at "
            f"least {n_eval + 1} are needed ({n_eval} to evaluate, 1 to calibrate): use a longer "
            "text or a smaller n_eval"
        )
    cal_sentences, eval_sentences = pool[:-n_eval], pool[-n_eval:]

    def tokenize(sentences: list[str], desc: str) -> list[dict[str, torch.Tensor]]:
        def starts(batch_starts):
            return _bar(o["progress"], batch_starts, desc=desc, leave=False)

        return tokenized_batches(tokenizer, sentences, batch_size, max_length, starts)

    eval_batches = tokenize(eval_sentences, "tokenize")
    reference: dict[str, torch.Tensor] = {}

    def evaluate(m: nn.Module) -> dict[str, float]:
        if "dense" not in reference:
            dense = _module(info)
            reference["dense"] = _embed(dense, eval_batches, o["progress"])
        emb = _embed(m, eval_batches, o["progress"])
        return {
            "cosine_to_dense": cosine_to_reference(emb, reference["dense"]),
            "top10_agreement": topk_agreement(emb, reference["dense"], k=o["k"]),
        }

    def calibration(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
        picked = random.Random(seed).sample(cal_sentences, min(n, len(cal_sentences)))
        return tokenize(picked, "calibration")

    return ModelBundle(
        name=info.label,
        model=model,
        metric="cosine_to_dense",
        higher_is_better=True,
        evaluate_fn=evaluate,
        calibration_fn=calibration,
        filter_fn=_linear_filter(model.bert, skip="pooler", prefix="bert."),
        description=(
            f"{info.architecture} from {info.path}; {text_path.name}: calibration sentences "
            f"[0, {len(cal_sentences)}), evaluation sentences [{len(cal_sentences)}, {len(pool)})"
        ),
        options={
            "path": info.path,
            "text": str(text_path),
            "task": info.task,
            "n_eval": n_eval,
            "batch_size": batch_size,
            "max_length": max_length,
            "k": o["k"],
            "calibration_sentences": [0, len(cal_sentences)],
            "eval_sentences": [len(cal_sentences), len(pool)],
        },
    )
