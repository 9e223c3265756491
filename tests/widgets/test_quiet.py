"""Hiding IPython displays while the dashboard loads and evaluates: nested and overlapping blocks."""

from __future__ import annotations

import threading

import pytest

IPython = pytest.importorskip("IPython")

from explorer.widgets._quiet import hidden_displays  # noqa: E402


class _Publisher:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def publish(self, data, **kwargs) -> None:
        self.sent.append(data)


class _Shell:
    def __init__(self) -> None:
        self.display_pub = _Publisher()


@pytest.fixture
def pub(monkeypatch):
    shell = _Shell()
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    return shell.display_pub


def _show(pub, text: str) -> None:
    pub.publish(text)


def test_displays_are_dropped_inside_and_come_back_after(pub):
    _show(pub, "before")
    with hidden_displays():
        _show(pub, "bar")
        with hidden_displays():  # nested: the inner end does not bring them back
            _show(pub, "inner bar")
        _show(pub, "after inner")
    _show(pub, "after")
    assert pub.sent == ["before", "after"]
    assert "publish" not in vars(pub)  # the class's method again, nothing left behind


def test_overlapping_blocks_in_two_threads_restore_at_the_last_end(pub):
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def loader():  # enters first, leaves while the evaluation still runs
        with hidden_displays():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    thread = threading.Thread(target=loader)
    thread.start()
    a_in.wait(5)
    with hidden_displays():
        b_in.set()
        a_out.wait(5)
        _show(pub, "evaluation bar after the loader ended")
    thread.join(5)
    _show(pub, "page output")
    assert pub.sent == ["page output"]
    assert "publish" not in vars(pub)


def test_a_publisher_with_its_own_publish_gets_it_back(pub):
    own = []
    pub.publish = lambda data, **kwargs: own.append(data)
    mine = pub.publish
    with hidden_displays():
        pub.publish("hidden")
    assert pub.publish is mine
    pub.publish("shown")
    assert own == ["shown"]


def test_an_error_inside_still_restores(pub):
    with pytest.raises(RuntimeError, match="boom"):
        with hidden_displays():
            raise RuntimeError("boom")
    _show(pub, "after")
    assert pub.sent == ["after"]


def test_the_dashboards_evaluation_and_calibration_publish_no_display(pub, tmp_path, monkeypatch):
    """A bundle whose evaluation and calibration show a bar (as tqdm's notebook bar does): the
    dashboard's dense point and a calibrated run leave nothing for the page to draw."""
    import torch
    from torch import nn

    from explorer.models.bundle import ModelBundle
    from explorer.widgets import Dashboard, MethodConfig

    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    x = torch.randn(16, 32)
    reference = model(x).detach()

    def evaluate(m):
        _show(pub, "evaluation bar")
        return float(torch.nn.functional.cosine_similarity(m(x), reference).mean())

    def calibration(n, seed=0):
        _show(pub, "calibration bar")
        return [torch.randn(4, 32) for _ in range(n)]

    bundle = ModelBundle.from_module(model, evaluate, calibration, name="toy", metric="cosine")
    dash = Dashboard(bundle)
    dash.run(MethodConfig("wanda", "2:4", calibration=2), wait=True)
    assert "speedup" in dash.status.text or "wanda" in dash.status.text, dash.status.text
    assert pub.sent == []
    _show(pub, "the page's own output")
    assert pub.sent == ["the page's own output"]
