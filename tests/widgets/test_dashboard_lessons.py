"""The page's own lessons, actionable: layer sets by verdict, room for names, labels that say which weight."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from explorer.models.bundle import ModelBundle
from explorer.widgets import Dashboard, MethodConfig


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("attn", nn.Linear(64, 64))
    model.add_module("mlp", nn.Sequential(nn.Linear(64, 4096), nn.Linear(4096, 4096)))
    return model


@pytest.fixture(scope="module")
def dash():
    bundle = ModelBundle(
        "toy",
        _model(),
        "score",
        True,
        evaluate_fn=lambda m: {"score": 1.0},
        description="12 toy sentences, 96 tokens",
    )
    return Dashboard(bundle, tokens=4096)


def test_layer_sets_by_verdict_by_name_and_by_pattern(dash):
    fast = [r.name for r in dash.layer_picker.rows if r.verdict_24 == "fast"]
    assert fast == ["mlp.1"]  # the table's own "at 2:4" column decides
    assert dash.layer_set("fast") == ("mlp.1",)
    assert dash.layer_set("mlp") == ("mlp.0", "mlp.1")
    assert dash.layer_set("pattern", "at*") == ("attn",)
    assert dash.layer_set("all") is None
    assert dash.layer_set("one") == (dash.selected,)
    with pytest.raises(ValueError, match="layer set 'nope' holds no layer"):
        dash.layer_set("pattern", "nope")


def test_the_page_offers_the_sets_and_refuses_a_pattern_that_matches_nothing(dash):
    pytest.importorskip("ipywidgets")
    pytest.importorskip("plotly")
    from explorer.widgets.dashboard_page import DashboardPage

    page = DashboardPage(dash)
    assert [v for _, v in page.layers.options] == ["all", "one", "fast", "mlp", "pattern"]
    points = len(dash.tradeoff.points)
    page.layers.value, page.layer_glob.value = "pattern", "nothing*"
    page.run.click()
    assert dash.status.level == "error" and "'nothing*' holds no layer" in dash.status.text
    assert len(dash.tradeoff.points) == points and not dash.busy
    page.layers.value = "mlp"
    page.method.value = "random"
    page.run.click()
    dash.job.join()
    assert dash.method_picker.config.layers == ("mlp.0", "mlp.1")
    assert dash.status.level == "ok", dash.status.text
    dash.tradeoff.click(0)  # back to dense for the other tests


def test_the_layer_names_and_verdicts_get_room(dash):
    pytest.importorskip("ipywidgets")
    pytest.importorskip("plotly")
    from explorer.widgets.dashboard_page import DashboardPage

    page = DashboardPage(dash)
    left = page.widget.children[-1].children[0]
    assert int(left.layout.width.removesuffix("px")) >= 450
    # the dropdown gives its whole width to the names: no description beside them
    assert page.layer.description == "" and page.layer.style.description_width == "0px"
    assert page.layer.layout.width == "98%" and page.layer_glob in left.children
    assert "explorer-layer-table td:last-child" in page.widget.children[0].value  # nowrap


def test_the_mask_and_the_panel_say_which_weight_they_show(dash):
    dash.layer_picker.select("mlp.0")
    assert dash.current is None
    assert "preview after pruning: 0 of" in dash.mask_viewer.title
    assert dash.pattern_panel.name == "mlp.0: the weight as loaded"
    dash.run(MethodConfig("magnitude", "2:4", layers=("attn",)), wait=True)
    dash.layer_picker.select("attn")
    assert ": after pruning: 0 of" in dash.mask_viewer.title
    assert dash.pattern_panel.name == "attn: the weight after pruning"
    dash.layer_picker.select("mlp.0")  # not pruned by this run: shown as it is
    assert "the weight as loaded: " in dash.mask_viewer.title
    dash.tradeoff.click(0)


def test_the_page_says_what_the_accuracy_is_measured_on(dash):
    assert dash.measured_on == "score measured on 12 toy sentences, 96 tokens"
    pytest.importorskip("ipywidgets")
    pytest.importorskip("plotly")
    from explorer.widgets.dashboard_page import DashboardPage

    page = DashboardPage(dash)
    assert "measured on 12 toy sentences, 96 tokens" in page.measured.value
    right = page.widget.children[-1].children[2]
    assert page.measured in right.children
