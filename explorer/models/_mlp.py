"""Shared parts of the MLP bundles: the network, seeded training and the weight cache."""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm

from explorer._threads import one_cpu_thread
from explorer.output_paths import replacing
from explorer.results.store.location import cache_dir

__all__ = ["batches", "cached_state", "make_mlp", "train"]


def make_mlp(widths: Sequence[int]) -> nn.Sequential:
    """``Linear -> ReLU -> ... -> Linear`` with the given widths, e.g. ``(64, 256, 256, 10)``.

    Parameters
    ----------
    widths : Sequence[int]
        Input width, hidden widths and output width.

    Returns
    -------
    torch.nn.Sequential

    Examples
    --------
    >>> make_mlp((4, 8, 2))
    Sequential(
      (0): Linear(in_features=4, out_features=8, bias=True)
      (1): ReLU()
      (2): Linear(in_features=8, out_features=2, bias=True)
    )
    """
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def batches(
    x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One shuffled epoch of ``(x, y)`` mini-batches, shuffled by ``seed``.

    Parameters
    ----------
    x : torch.Tensor
        Inputs, one row per sample.
    y : torch.Tensor
        Labels, one per sample.
    batch_size : int
        Samples per batch (the last batch may be smaller).
    seed : int
        Seed of the shuffle.

    Returns
    -------
    list of tuple of torch.Tensor
    """
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    return [
        (x[order[i : i + batch_size]], y[order[i : i + batch_size]])
        for i in range(0, len(x), batch_size)
    ]


def train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
    desc: str,
) -> nn.Module:
    """Train ``model`` with Adam and cross-entropy, deterministically for a given ``seed``.

    Runs on one thread: these small steps are faster without thread hand-offs, most of all on
    a busy machine, and the result does not depend on the thread count.

    Parameters
    ----------
    model : torch.nn.Module
        The classifier, trained in place.
    x : torch.Tensor
        Training inputs.
    y : torch.Tensor
        Training labels.
    epochs : int
        Passes over the data.
    batch_size : int
        Samples per step.
    lr : float
        Adam's learning rate.
    seed : int
        Seed of each epoch's shuffle.
    desc : str
        The progress bar's label.

    Returns
    -------
    torch.nn.Module
        ``model``, in eval mode.
    """
    with one_cpu_thread():
        optimiser = torch.optim.Adam(model.parameters(), lr=lr)
        loss_fn = nn.CrossEntropyLoss()
        model.train()
        steps = epochs * ((len(x) + batch_size - 1) // batch_size)
        with tqdm(total=steps, desc=desc, leave=False) as bar:
            for epoch in range(epochs):
                for xb, yb in batches(x, y, batch_size, seed * 1000 + epoch):
                    optimiser.zero_grad()
                    loss = loss_fn(model(xb), yb)
                    loss.backward()
                    optimiser.step()
                    bar.update(1)
    return model.eval()


def cached_state(
    filename: str, build: nn.Module, trainer, retrain: bool = False
) -> tuple[nn.Module, Path]:
    """Load ``build``'s weights from the cache, or train with ``trainer(build)`` and cache them.

    The file is written atomically, so concurrent loaders never read half a file.

    Parameters
    ----------
    filename : str
        The cache file's name inside the cache folder.
    build : torch.nn.Module
        The freshly built model whose weights are loaded or trained.
    trainer : callable
        ``trainer(build)`` trains the model in place.
    retrain : bool, optional
        Train even when the cache file exists.

    Returns
    -------
    tuple of (torch.nn.Module, pathlib.Path)
        The model in eval mode and the cache file.
    """
    path = cache_dir() / filename
    if path.exists() and not retrain:
        try:
            build.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
            return build.eval(), path
        except (RuntimeError, OSError, EOFError, KeyError, pickle.UnpicklingError) as exc:
            # 1. A stale or damaged cache file is retrained, never trusted.
            print(f"retraining: cached weights {path} unreadable ({exc})")
    trainer(build)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The cache file is the explorer's own: replaced, but never a device, folder or database.
    with replacing(path, overwrite=True, what="cached weights") as tmp:
        torch.save(build.state_dict(), tmp)
    return build.eval(), path
