"""The dashboard's first page: the cached page, the verdicts once 2:4, the layout, the default model."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from explorer.widgets import Dashboard, MaskViewer, MethodConfig
from explorer.widgets.dashboard_cache import PageCache, cache_path, skeleton
from explorer.widgets.layer_picker import LayerPicker


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path))
    return tmp_path


def test_verdict_once_24_leaves_out_only_the_not_yet_24_finding():
    model = nn.Sequential(nn.Linear(4096, 4096), nn.Linear(4096, 30), nn.Linear(64, 64))
    rows = {r.name: r for r in LayerPicker(model, torch.float16, tokens=4096).rows}
    assert rows["0"].verdict == "unsupported" and rows["0"].verdict_24 == "fast"
    assert "not 2:4" in rows["0"].reason and "not 2:4" not in rows["0"].reason_24
    # 30 output features are not a multiple of 16: unsupported with or without pruning
    assert rows["1"].verdict_24 == "unsupported"
    assert rows["2"].verdict_24 == "slow" and "small" in rows["2"].reason_24
    assert rows["0"].label.endswith("[fast at 2:4]")


def test_picker_table_drops_the_shared_prefix_and_dtype():
    model = nn.Module()
    model.enc = nn.Sequential(nn.Linear(64, 32), nn.Linear(32, 64))
    picker = LayerPicker(model)
    picker.select("enc.1")
    html = picker.html()
    assert "2 layers under enc., float32, verdict once 2:4 at 1024 tokens" in html
    assert "<b>1</b>" in html and ">0</td>" in html and ">enc.0<" not in html
    assert picker.counts() == {"fast": 0, "slow": 2, "unsupported": 0}


def test_mask_viewer_rejects_an_unknown_start():
    with pytest.raises(ValueError, match="start must be 'overview' or 'zoom'"):
        MaskViewer(torch.ones(4, 4, dtype=torch.bool), start="sideways")


def test_page_cache_round_trip_and_bad_files(tmp_path):
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8))
    page = PageCache.of("tiny", model, LayerPicker(model).rows, ["0"], "score", False)
    path = page.save(tmp_path / "page.pt")
    back = PageCache.load(path)
    assert back.rows == page.rows and back.prunable == ("0",) and back.higher_is_better is False
    assert torch.equal(back.model().get_submodule("2").weight, model[2].weight)
    assert PageCache.load(tmp_path / "missing.pt") is None
    (tmp_path / "bad.pt").write_bytes(b"not a torch file")
    assert PageCache.load(tmp_path / "bad.pt") is None
    assert list(tmp_path.glob(".page-*")) == []  # no temporary file left behind


def test_skeleton_refuses_nothing_it_can_hold():
    net = skeleton({"a.b": torch.zeros(4, 8), "a.c": torch.ones(2, 4)})
    assert [n for n, _ in net.named_modules()] == ["", "a", "a.b", "a.c"]
    assert net.get_submodule("a.c").weight.requires_grad is False


def test_cache_path_depends_on_every_setting(cache):
    paths = {
        cache_path("minilm", "bfloat16", "bfloat16", 16384),
        cache_path("minilm", None, "bfloat16", 16384),
        cache_path("minilm", "bfloat16", "float16", 16384),
        cache_path("minilm", "bfloat16", "bfloat16", 1024),
        cache_path("digits-mlp", "bfloat16", "bfloat16", 16384),
    }
    assert len(paths) == 5 and all(p.parent == cache for p in paths)


def test_background_start_draws_from_the_cache_then_loads(cache):
    pytest.importorskip("sklearn", reason="digits-mlp needs scikit-learn (the models extra)")
    first = Dashboard("digits-mlp", background=True)
    assert first.tradeoff.points == []  # the dense evaluation waits for the page (view/wait)
    first.wait()
    assert [p.label for p in first.tradeoff.points] == ["dense"]
    written = list(cache.glob("page-digits-mlp-*.pt"))
    assert len(written) == 1

    second = Dashboard("digits-mlp", background=True)
    assert type(second.bundle).__name__ == "_PageBundle"  # drawn from the cache
    assert "loading the model for pruning" in second.status.text
    assert [r.name for r in second.layer_picker.rows] == ["0", "2", "4"]
    assert second.selected == first.selected
    assert torch.equal(second.mask_viewer.mask, first.mask_viewer.mask)
    # a run waits for the model behind the page, then prunes the real one
    second.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert type(second.bundle).__name__ == "ModelBundle"
    assert [p.label for p in second.tradeoff.points] == ["dense", "magnitude 2:4 all float16"]
    assert second.status.level == "ok", second.status.text


def test_page_layout_fits_three_columns(cache):
    pytest.importorskip("ipywidgets")
    pytest.importorskip("plotly")
    from explorer.widgets.dashboard_page import INTRO, DashboardPage

    dash = Dashboard(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16)))
    page = DashboardPage(dash)
    header, intro, columns = page.widget.children[1:]
    assert page.status in header.children
    assert intro.value == INTRO and "Prune" in INTRO
    widths = [int(c.layout.width.removesuffix("px")) for c in columns.children]
    assert sum(widths) <= 1400 - 40  # the page's own margins and the column borders
    assert page.mask.layout.width == page.mask_width <= widths[1]
    assert page.tradeoff.layout.width == page.tradeoff_width <= widths[2]
    assert page.mask_box in columns.children[1].children
    assert page.tradeoff_box in columns.children[2].children
    old = page.tradeoff
    page.retire_after_s = 0.2
    dash.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert page.tradeoff is not old and page.tradeoff.layout.width == page.tradeoff_width
    # the replaced figure is closed, not left in the page's state, after a grace period in
    # which a page still connecting can fetch it
    assert old.comm is not None
    deadline = time.monotonic() + 10
    while old.comm is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert old.comm is None


@pytest.mark.slow
def test_the_default_model_is_16_bit_and_2to4_pays_off_on_its_large_layers(cache):
    pytest.importorskip("transformers", reason="MiniLM needs the models extra")
    dash = Dashboard()
    assert dash.bundle.name == "minilm" and (dash.dtype, dash.tokens) == ("bfloat16", 16384)
    assert {p.dtype for p in dash.model.parameters()} == {torch.bfloat16}
    assert dash.layer_picker.counts() == {"fast": 12, "slow": 24, "unsupported": 0}
    assert dash.selected == "bert.encoder.layer.0.intermediate.dense"
    assert dash.tradeoff.points[0].label == "dense"
    assert dash.tradeoff.points[0].score > 0.999  # bfloat16 against the float32 reference
