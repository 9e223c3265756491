"""``fashion-mlp``: a 784-512-512-10 MLP on Fashion-MNIST from Debian's dataset-fashion-mnist."""

from __future__ import annotations

import functools
import gzip
from pathlib import Path

import numpy as np
import torch

from explorer.models import _mlp
from explorer.models.bundle import ModelBundle, classifier_filter
from explorer.models.metrics import accuracy

__all__ = ["DATA_DIR", "WIDTHS", "load", "read_split"]

#: Where the Debian package ``dataset-fashion-mnist`` installs the IDX files.
DATA_DIR = Path("/usr/share/datasets/fashion-mnist")
#: Layer widths; 784 = 49 * 16, so 2:4 and 4:8 patterns fit every layer.
WIDTHS = (784, 512, 512, 10)
_VERSION = 1
_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


def _read_idx(path: Path, offset: int) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


@functools.lru_cache(maxsize=2)
def read_split(
    part: str = "train", data_dir: Path | str = DATA_DIR
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (flattened, scaled to [0, 1]) and labels of the ``"train"`` or ``"test"`` split.

    Parameters
    ----------
    part : str, optional
        ``"train"`` or ``"test"``.
    data_dir : pathlib.Path or str, optional
        The folder of the four ``*-ubyte.gz`` files.

    Returns
    -------
    tuple of torch.Tensor
        Images ``(n, 784)`` in float32 and labels ``(n,)`` in int64.

    Raises
    ------
    FileNotFoundError
        When the files are missing, naming the Debian package that provides them.

    Examples
    --------
    >>> x, y = read_split("test")
    >>> tuple(x.shape), int(y.max())
    ((10000, 784), 9)
    """
    if part not in _FILES:
        raise ValueError(f"part must be 'train' or 'test', got {part!r}")
    data_dir = Path(data_dir)
    images_file, labels_file = (data_dir / name for name in _FILES[part])
    missing = [str(p) for p in (images_file, labels_file) if not p.exists()]
    if missing:
        raise FileNotFoundError(
            f"Fashion-MNIST files not found: {', '.join(missing)}. They come from the Debian "
            "package dataset-fashion-mnist: sudo apt-get install dataset-fashion-mnist "
            "(or pass data_dir= pointing at the four *-ubyte.gz files)"
        )
    images = _read_idx(images_file, 16).reshape(-1, 784)
    labels = _read_idx(labels_file, 8)
    x = torch.from_numpy(images.astype(np.float32) / 255.0)
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def load(
    seed: int = 0,
    retrain: bool = False,
    batch_size: int = 256,
    epochs: int = 3,
    data_dir: Path | str = DATA_DIR,
) -> ModelBundle:
    """Load the Fashion-MNIST MLP, training it once (a few epochs on CPU) if it is not cached.

    Parameters
    ----------
    seed : int
        Seed of the initial weights and the batch order.
    retrain : bool
        Retrain even if cached weights exist.
    batch_size : int
        Samples per calibration and fine-tuning batch.
    epochs : int
        Training epochs when (re)training; part of the cache key.
    data_dir : path
        Directory holding the four IDX files.

    Returns
    -------
    ModelBundle
        Metric ``accuracy`` on the 10,000 test images; calibration and ``train_data`` come from
        the 60,000 training images; ``filter_fn`` leaves the classifier ``"4"`` dense.

    Examples
    --------
    >>> bundle = load()
    >>> bundle.evaluate()["accuracy"] > 0.8
    True
    """
    x_train, y_train = read_split("train", data_dir)
    x_test, y_test = read_split("test", data_dir)
    torch.manual_seed(seed)
    model = _mlp.make_mlp(WIDTHS)

    def trainer(m: torch.nn.Module) -> None:
        torch.manual_seed(seed)
        _mlp.train(
            m,
            x_train,
            y_train,
            epochs=epochs,
            batch_size=128,
            lr=1e-3,
            seed=seed,
            desc="train fashion-mlp",
        )

    filename = f"fashion-mlp-v{_VERSION}-seed{seed}-e{epochs}.pt"
    model, _ = _mlp.cached_state(filename, model, trainer, retrain)

    def calibration(n: int, cal_seed: int) -> list[torch.Tensor]:
        pick = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(cal_seed))[:n]
        xs = x_train[pick]
        return [xs[i : i + batch_size] for i in range(0, len(xs), batch_size)]

    class _Epochs:
        """Fresh shuffled ``(x, y)`` batches each time it is iterated (one epoch per pass)."""

        def __init__(self) -> None:
            self.passes = 0

        def __iter__(self):
            self.passes += 1
            return iter(_mlp.batches(x_train, y_train, batch_size, seed + self.passes))

        def __len__(self) -> int:
            return (len(x_train) + batch_size - 1) // batch_size

    return ModelBundle(
        name="fashion-mlp",
        model=model,
        metric="accuracy",
        higher_is_better=True,
        evaluate_fn=lambda m: {"accuracy": accuracy(m, x_test, y_test)},
        calibration_fn=calibration,
        filter_fn=classifier_filter("4"),
        train_data=_Epochs(),
        description="Fashion-MNIST (Debian dataset-fashion-mnist), 60,000 train / 10,000 test",
        options={"seed": seed, "batch_size": batch_size, "epochs": epochs},
    )
