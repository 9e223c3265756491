"""Metrics the bundled models report: accuracy, perplexity and embedding fidelity."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["accuracy", "cosine_to_reference", "perplexity", "topk_agreement"]


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 4096) -> float:
    """Fraction of rows of ``x`` whose arg-max logit equals the label in ``y``.

    Parameters
    ----------
    model : nn.Module
        A classifier returning logits ``[rows, classes]``; run in inference mode.
    x : torch.Tensor
        Inputs, one row per sample.
    y : torch.Tensor
        The labels, one per row of ``x``.
    batch_size : int
        Rows per forward.

    Returns
    -------
    float
        NaN when ``x`` is empty.

    Examples
    --------
    >>> model = nn.Linear(2, 2, bias=False)
    >>> _ = model.weight.data.copy_(torch.eye(2))
    >>> accuracy(model, torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]), torch.tensor([0, 1, 1]))
    0.6666666666666666
    """
    if len(x) == 0:
        return math.nan
    correct = 0
    with torch.inference_mode():
        for start in range(0, len(x), batch_size):
            logits = model(x[start : start + batch_size])
            correct += int((logits.argmax(-1) == y[start : start + batch_size]).sum())
    return correct / len(x)


def cosine_to_reference(embeddings: torch.Tensor, reference: torch.Tensor) -> float:
    """Mean cosine similarity between matching rows of ``embeddings`` and ``reference``.

    Parameters
    ----------
    embeddings, reference : torch.Tensor
        ``[rows, dim]`` each, compared in float32.

    Returns
    -------
    float

    Examples
    --------
    >>> e = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    >>> cosine_to_reference(e, torch.tensor([[1.0, 0.0], [1.0, 0.0]]))
    0.5
    """
    cos = torch.nn.functional.cosine_similarity(embeddings.float(), reference.float(), dim=-1)
    return float(cos.mean())


def _neighbours(embeddings: torch.Tensor, k: int) -> torch.Tensor:
    e = torch.nn.functional.normalize(embeddings.float(), dim=-1)
    sim = e @ e.T
    sim.fill_diagonal_(-math.inf)
    return sim.topk(k, dim=-1).indices


def topk_agreement(embeddings: torch.Tensor, reference: torch.Tensor, k: int = 10) -> float:
    """Mean overlap of each row's ``k`` nearest neighbours (cosine, itself excluded) in both sets.

    1.0 means every sentence keeps exactly the same ``k`` neighbours as with the reference
    embeddings; a random embedding scores about ``k / (rows - 1)``.

    Parameters
    ----------
    embeddings, reference : torch.Tensor
        ``[rows, dim]`` each, one row per sentence in the same order.
    k : int
        Neighbours compared per row (at most ``rows - 1``).

    Returns
    -------
    float
        NaN for fewer than two rows.

    Examples
    --------
    >>> ref = torch.eye(4)[:, :3] + 0.1
    >>> topk_agreement(ref, ref, k=2)
    1.0
    """
    rows = embeddings.shape[0]
    if rows < 2:
        return math.nan
    k = min(k, rows - 1)
    a, b = _neighbours(embeddings, k), _neighbours(reference, k)
    hits = (a.unsqueeze(-1) == b.unsqueeze(-2)).any(-1).sum(-1)
    return float(hits.float().mean() / k)


def perplexity(
    model: nn.Module, windows: Sequence[torch.Tensor] | torch.Tensor, batch_size: int = 4
) -> float:
    """Token-level perplexity of a causal LM over windows of token ids.

    Every window is scored on its own (no context carried over): the model predicts tokens 2..L of
    each window from the ones before; the result is ``exp(total NLL / predicted tokens)``.

    Parameters
    ----------
    model : torch.nn.Module
        A Hugging Face causal LM (``model(input_ids=...)`` returns ``.logits``) or any module
        returning logits of shape ``(batch, length, vocab)``.
    windows : tensor of shape (n, length) or sequence of 1-D tensors
        Token ids.
    batch_size : int
        Windows per forward pass.

    Examples
    --------
    >>> class Uniform(nn.Module):
    ...     def forward(self, input_ids):
    ...         return torch.zeros(*input_ids.shape, 10)
    >>> round(perplexity(Uniform(), torch.zeros(2, 5, dtype=torch.long)), 4)  # float32 rounding
    10.0
    """
    if isinstance(windows, torch.Tensor):
        windows = list(windows)
    nll, count = 0.0, 0
    with torch.inference_mode():
        for start in range(0, len(windows), batch_size):
            ids = torch.stack(list(windows[start : start + batch_size]))
            out = model(input_ids=ids)
            logits = out.logits if hasattr(out, "logits") else out
            logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            target = ids[:, 1:]
            nll -= float(logp.gather(-1, target.unsqueeze(-1)).sum())
            count += target.numel()
    if count == 0:
        return math.nan
    return math.exp(nll / count)
