"""``digits-mlp``: a 64-256-256-10 MLP on scikit-learn's bundled 8x8 digits, trained in seconds."""

from __future__ import annotations

import functools

import torch

from explorer.errors import require
from explorer.models import _mlp
from explorer.models.bundle import ModelBundle, classifier_filter
from explorer.models.metrics import accuracy

__all__ = ["WIDTHS", "load", "split"]

#: Layer widths; every width is a multiple of 16, so 2:4 and 4:8 patterns fit every layer.
WIDTHS = (64, 256, 256, 10)
TEST_SIZE = 450
_VERSION = 2


@functools.lru_cache(maxsize=1)
def split(
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The digits data (pixels scaled to [0, 1]) as ``x_train, y_train, x_test, y_test``.

    A seeded permutation holds out :data:`TEST_SIZE` of the 1,797 images for testing.

    Parameters
    ----------
    seed : int, optional
        Seed of the permutation that picks the test images.

    Returns
    -------
    tuple of torch.Tensor

    Examples
    --------
    >>> x_train, y_train, x_test, y_test = split()
    >>> tuple(x_train.shape), tuple(x_test.shape)
    ((1347, 64), (450, 64))
    """
    datasets = require("sklearn.datasets", "models")
    data = datasets.load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    test, train = order[:TEST_SIZE], order[TEST_SIZE:]
    return x[train], y[train], x[test], y[test]


def load(seed: int = 0, retrain: bool = False, batch_size: int = 128) -> ModelBundle:
    """Load the digits MLP, training it (about two seconds) if it is not cached yet.

    Parameters
    ----------
    seed : int
        Seed of the split, the initial weights and the batch order.
    retrain : bool
        Retrain even if cached weights exist.
    batch_size : int
        Samples per calibration and fine-tuning batch.

    Returns
    -------
    ModelBundle
        Metric ``accuracy`` on the 450 held-out images; calibration and ``train_data`` come from
        the 1,347 training images; ``filter_fn`` leaves the classifier ``"4"`` dense.

    Examples
    --------
    >>> bundle = load()
    >>> bundle.evaluate()["accuracy"] > 0.9
    True
    """
    x_train, y_train, x_test, y_test = split(seed)
    torch.manual_seed(seed)
    model = _mlp.make_mlp(WIDTHS)

    def trainer(m: torch.nn.Module) -> None:
        torch.manual_seed(seed)
        _mlp.train(
            m,
            x_train,
            y_train,
            epochs=30,
            batch_size=64,
            lr=1e-3,
            seed=seed,
            desc="train digits-mlp",
        )

    model, _ = _mlp.cached_state(f"digits-mlp-v{_VERSION}-seed{seed}.pt", model, trainer, retrain)

    def calibration(n: int, cal_seed: int) -> list[torch.Tensor]:
        pick = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(cal_seed))[:n]
        xs = x_train[pick]
        return [xs[i : i + batch_size] for i in range(0, len(xs), batch_size)]

    return ModelBundle(
        name="digits-mlp",
        model=model,
        metric="accuracy",
        higher_is_better=True,
        evaluate_fn=lambda m: {"accuracy": accuracy(m, x_test, y_test)},
        calibration_fn=calibration,
        filter_fn=classifier_filter("4"),
        train_data=_mlp.batches(x_train, y_train, batch_size, seed),
        description="scikit-learn digits, 1,347 train / 450 test images of 8x8 pixels",
        options={"seed": seed, "batch_size": batch_size},
    )
