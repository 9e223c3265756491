"""digits-mlp and fashion-mlp: trained once, cached, accurate, offline."""

from __future__ import annotations

import pytest
import torch

from explorer.models import fashion, load
from explorer.pruning import prune


def test_digits_trains_caches_and_reloads(model_cache, no_network):
    bundle = load("digits-mlp")
    assert bundle.metric == "accuracy" and bundle.higher_is_better
    assert bundle.evaluate()["accuracy"] > 0.9
    cached = list(model_cache.glob("digits-mlp-*.pt"))
    assert len(cached) == 1
    again = load("digits-mlp")
    for a, b in zip(
        bundle.model.state_dict().values(), again.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b)
    assert bundle.prunable == ["0", "2"]  # the classifier "4" stays dense


def test_digits_calibration_is_seeded_and_from_the_training_split():
    bundle = load("digits-mlp", batch_size=100)
    batches = bundle.calibration(250, seed=3)
    assert [tuple(b.shape) for b in batches] == [(100, 64), (100, 64), (50, 64)]
    assert all(
        torch.equal(a, b) for a, b in zip(batches, bundle.calibration(250, seed=3), strict=True)
    )
    assert not torch.equal(batches[0], bundle.calibration(250, seed=4)[0])
    from explorer.models.digits import split

    x_train, _, x_test, _ = split()
    train_rows = {tuple(r.tolist()) for r in x_train}
    assert all(tuple(r.tolist()) in train_rows for r in batches[0])
    assert len(x_train) + len(x_test) == 1797


def test_digits_prunes_with_its_filter():
    bundle = load("digits-mlp")
    result = prune(bundle.model, "magnitude", "2:4", filter_fn=bundle.filter_fn, progress=False)
    assert result.layers == ("0", "2")
    assert bundle.evaluate()["accuracy"] > 0.5
    xb, yb = bundle.train_data[0]
    assert xb.shape[1] == 64 and yb.dtype == torch.long


def test_corrupt_cache_is_retrained(model_cache):
    load("digits-mlp")
    path = next(model_cache.glob("digits-mlp-*.pt"))
    path.write_bytes(b"not a checkpoint")
    assert load("digits-mlp").evaluate()["accuracy"] > 0.9


def test_fashion_missing_files_names_the_package(tmp_path):
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist"):
        fashion.read_split("train", data_dir=tmp_path)
    with pytest.raises(ValueError, match="'train' or 'test'"):
        fashion.read_split("valid")


@pytest.mark.skipif(
    not fashion.DATA_DIR.exists(), reason="apt package dataset-fashion-mnist missing"
)
def test_fashion_trains_and_is_accurate(model_cache, no_network):
    x, y = fashion.read_split("test")
    assert tuple(x.shape) == (10000, 784) and x.dtype == torch.float32 and int(y.max()) == 9
    bundle = load("fashion-mlp", epochs=1)
    assert bundle.evaluate()["accuracy"] > 0.8
    assert bundle.prunable == ["0", "2"]
    assert [tuple(b.shape) for b in bundle.calibration(300)] == [(256, 784), (44, 784)]
    xb, _yb = next(iter(bundle.train_data))
    assert xb.shape == (256, 784) and len(bundle.train_data) == 235
