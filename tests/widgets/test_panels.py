"""Pattern panel, layer picker, method picker, kernel runner and speed estimate."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from explorer.masks import make_mask
from explorer.results.speedup import estimate_speedup, recorded_speed
from explorer.widgets import (
    KernelRunner,
    LayerPicker,
    MethodConfig,
    MethodPicker,
    PatternPanel,
    row_validity,
)


def test_row_validity_hand_computed():
    mask = torch.tensor(
        [[1, 1, 0, 0, 1, 1, 1, 0], [1, 0, 0, 0, 0, 0, 0, 1], [1, 1, 1, 1, 1, 1, 1, 1]],
        dtype=torch.bool,
    )
    assert row_validity(mask).tolist() == [0.5, 1.0, 0.0]
    assert row_validity(mask, max_rows=1).tolist() == pytest.approx([0.5])


def test_pattern_panel_on_a_pruned_weight():
    w = torch.randn(16, 32)
    panel = PatternPanel()
    panel.update(w * make_mask(w, "2:4"), "2:4", "fc")
    s = panel.summary()
    assert s["valid"] is True and s["valid_fraction"] == 1.0 and s["density"] == 0.5
    assert sum(v for k, v in s["histogram"].items() if len(k) == 4) == 16 * 8
    html = panel.html()
    assert "valid" in html and "<svg" in html
    assert "valid=True" in repr(panel)


def test_pattern_panel_explains_a_bad_pattern():
    panel = PatternPanel()
    panel.update(torch.randn(4, 8), "5:4", "fc")
    assert panel.report is None and "5:4" in panel.message
    assert "fc" in panel.html()


def test_layer_picker_table_and_selection():
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8))
    picker = LayerPicker(model)
    seen = []
    picker.on_select(seen.append)
    picker.select("2")
    assert seen == ["2"] and picker.selected == "2"
    row = picker.row("0")
    assert row.shape == (32, 64) and row.verdict in ("fast", "slow", "unsupported")
    assert "<b>2</b>" in picker.html()
    with torch.no_grad():
        model[0].weight.mul_(make_mask(model[0].weight, "2:4"))
    picker.refresh()
    assert picker.row("0").valid_24 and picker.selected == "2"


def test_method_config_round_trip_and_validation():
    cfg = MethodConfig("wanda", "4:8", calibration=8, layers=["a", "b"])
    assert cfg.layers == ("a", "b") and cfg.layer_set == "2 layers"
    assert MethodConfig.from_json(cfg.to_json()) == cfg
    with pytest.raises(ValueError, match="calibration"):
        MethodConfig(calibration=-1)
    with pytest.raises(ValueError):
        MethodConfig(pattern="banana")
    picker = MethodPicker(layer_names=["a"])
    assert "magnitude" in picker.methods and "wanda" in picker.methods
    with pytest.raises(ValueError, match="unknown method"):
        picker.set(method="psychic")
    with pytest.raises(ValueError, match="unknown layers"):
        picker.set(layers=("z",))
    assert picker.config.method == "magnitude"


def test_kernel_runner_cpu_emulation_matches_dense():
    w = torch.randn(32, 64)
    w = w * make_mask(w, "2:4")
    result = KernelRunner().run(w, "fc", tokens=8, dtype="float16")
    assert result.mode == "cpu-emulation"
    assert result.max_abs_error < 1e-4
    assert result.compressed_bytes < result.dense_bytes
    assert "no recorded measurement" in result._repr_html_() or result.recorded


def test_kernel_runner_explains_a_dense_weight_and_bad_arguments():
    result = KernelRunner().run(torch.randn(8, 16), "fc", tokens=8)
    assert result.mode == "unavailable" and "2:4" in result.message
    with pytest.raises(ValueError, match="dtype"):
        KernelRunner().run(torch.randn(8, 16), dtype="float64")
    with pytest.raises(ValueError, match="2-D"):
        KernelRunner().run(torch.randn(8), tokens=8)


def test_recorded_speed_reads_a_store():
    store_mod = pytest.importorskip("explorer.results.store")
    store = store_mod.ResultStore(":memory:")
    store.record(
        "layer-speed",
        {"out_features": 4096, "in_features": 4096, "tokens": 1024, "dtype": "float16"},
        {"speedup": 1.37},
    )
    store.record(
        "layer-speed",
        {"shape": [4096, 4096], "tokens": 128, "dtype": "float16"},
        {"dense_ms": 1.0, "sparse_ms": 2.0},
    )
    rows = recorded_speed((4096, 4096), 1024, "float16", store)
    assert [r["speedup"] for r in rows] == [1.37, 0.5]
    assert recorded_speed((8, 8), 1024, "float16", store) == []
    est = estimate_speedup(
        {"a": (4096, 4096), "b": (4096, 4096)}, ["a"], "2:4", 1024, "float16", {"a": "fast"}, store
    )
    assert est.measured == 1 and est.speedup == pytest.approx(2 / (1 + 1 / 1.37))


def test_speed_estimate_is_honest_about_slow_layers():
    est = estimate_speedup({"a": (64, 64)}, ["a"], verdicts={"a": "slow"}, recorded=False)
    assert est.speedup == 1.0 and est.bound == 2.0 and "1x" in est.source
    est = estimate_speedup({"a": (64, 64)}, ["a"], verdicts={"a": "fast"}, recorded=False)
    assert est.speedup == 2.0 and est.bounded == 1
