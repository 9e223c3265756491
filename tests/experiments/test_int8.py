"""The sparse + int8 accuracy experiment on the small shipped model."""

from __future__ import annotations

import torch
from torch import nn

from explorer.experiments.int8 import run, to_markdown
from explorer.sweeps.steps import OnDevice


def test_run_reports_every_configuration():
    rows = run(["digits-mlp"], methods=["magnitude"], progress=False)
    configs = {r["config"]: r for r in rows}
    assert set(configs) == {"dense", "dense + int8", "2:4", "2:4 + int8"}
    assert configs["2:4 + int8"]["layers"] == 2  # the classifier stays float (filter_fn)
    assert configs["dense + int8"]["layers"] == 2
    for r in rows:
        assert 0.5 < r["value"] <= 1.0
    # int8 on top of 2:4 costs little on this model; a collapse would mean a broken path
    assert abs(configs["2:4 + int8"]["value"] - configs["2:4"]["value"]) < 0.03
    assert "| magnitude | 2:4 + int8 |" in to_markdown(rows)


def test_on_device_moves_inputs_and_outputs():
    seen = {}

    class Probe(nn.Module):
        def forward(self, x, ids=None):
            seen["x"], seen["ids"] = x.dtype, ids.dtype
            return {"out": x * 2}

    out = OnDevice(Probe(), "cpu", torch.float16)(
        torch.ones(2), ids=torch.ones(2, dtype=torch.long)
    )
    assert seen == {"x": torch.float16, "ids": torch.long}
    assert out["out"].dtype == torch.float32
