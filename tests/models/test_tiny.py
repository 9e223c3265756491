"""Tiny random checkpoints: the sizes a benchmark may ask for, and the ones refused."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from explorer.models.tiny import save_tiny_llama


def test_sizes_reach_the_written_config(tmp_path):
    folder = save_tiny_llama(tmp_path / "m", hidden_size=128, num_hidden_layers=3)
    config = json.loads((folder / "config.json").read_text())
    assert config["hidden_size"] == 128 and config["num_hidden_layers"] == 3
    assert config["intermediate_size"] == 512  # the tiny default where none was given


@pytest.mark.parametrize(
    "sizes, message",
    [
        ({"vocab_size": 10}, "vocab_size=10 is not one save_tiny_llama sets"),
        ({"hidden_size": 0}, "hidden_size=0: expected a positive int"),
        ({"num_hidden_layers": 2.5}, "num_hidden_layers=2.5: expected a positive int"),
    ],
)
def test_bad_sizes_are_refused_before_anything_is_written(tmp_path, sizes, message):
    with pytest.raises(ValueError, match=message):
        save_tiny_llama(tmp_path / "m", **sizes)
    assert not (tmp_path / "m").exists()
