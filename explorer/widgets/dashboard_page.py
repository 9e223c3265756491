"""The dashboard's page: three columns that fit a 1400 x 900 window, and one sentence to start.

:class:`DashboardPage` keeps every control of :class:`explorer.widgets.views.DashboardView` and
only arranges them: the layer picker and the pruning controls on the left, the selected layer's
mask in the middle, the accuracy-versus-speedup plot on the right, all above the fold.
"""

from __future__ import annotations

import threading

from explorer.widgets.mask_view import WINDOW_COLOURS
from explorer.widgets.views import DashboardView, load_ipywidgets, on_main_thread

__all__ = ["INTRO", "DashboardPage"]

#: The sentence that tells a first-time visitor what to do.
INTRO = (
    "<b>Start here:</b> pick a layer on the left and the middle shows which of its weights "
    "2:4 sparsity keeps (two in every group of four, in blue); press <b>Prune</b> and the "
    "plot on the right gains a point: what that pruning costs in accuracy against the speed "
    "it could gain on a GPU."
)

_CSS = """
<style>
.explorer-dashboard { font-size: 13px; }
.explorer-dashboard .widget-label, .explorer-dashboard .widget-dropdown > select { font-size: 13px; }
.explorer-intro { background: #f6f8fa; border-left: 4px solid #0969da; padding: 4px 10px;
  margin: 2px 0 6px 0; line-height: 1.35; }
.explorer-step { font-weight: 600; margin: 2px 0 0 0; color: #24292f; }
.explorer-column { padding: 0 8px; border-right: 1px solid #eaeef2; }
.explorer-column:last-child { border-right: none; }
.explorer-layer-table table, .explorer-pattern table { width: 100%; }
.explorer-layer-table td, .explorer-layer-table th, .explorer-pattern td, .explorer-pattern th {
  padding: 1px 6px !important; line-height: 1.25; }
.explorer-layer-table td:last-child, .explorer-layer-table th:last-child { white-space: nowrap; }
.explorer-layer-table caption, .explorer-pattern caption { font-family: sans-serif; }
.explorer-status .status { font-size: 12px; line-height: 1.3; display: -webkit-box;
  -webkit-line-clamp: 2; -webkit-box-orient: vertical; overflow: hidden; }
.explorer-title { flex: 0 0 auto; white-space: nowrap; }
.explorer-pattern td { white-space: normal; overflow-wrap: anywhere; }
.explorer-pattern td:first-child { white-space: nowrap; overflow-wrap: normal; }
</style>
"""


def _legend() -> str:
    """The zoom window's colours, in words."""

    def swatch(index: int, text: str) -> str:
        return (
            f"<span style='display:inline-block;width:10px;height:10px;"
            f"background:{WINDOW_COLOURS[index]};border:1px solid #999;vertical-align:middle'>"
            f"</span> {text}"
        )

    return (
        f"<div style='font-size:12px;line-height:1.5'>{swatch(1, 'kept')} &nbsp; "
        f"{swatch(0, 'pruned')} &nbsp; in a group that breaks the pattern: "
        f"{swatch(3, 'kept')} &nbsp; {swatch(2, 'pruned')}<br>groups of 4 alternate in shade; "
        "click the map for the whole layer, click again to zoom back in</div>"
    )


class DashboardPage(DashboardView):
    """:class:`DashboardView`'s controls in three columns sized for a 1400 x 900 window.

    ``DashboardPage(dash).widget`` is the root box; :meth:`explorer.widgets.Dashboard.view`
    builds it.
    """

    mask_height, tradeoff_height = 420, 460
    #: Column widths in pixels (left, middle, right) and the figures' widths inside them
    #: (plotly's default, 700 px, would overflow the columns).
    #: The left column is the widest it can be: layer names and the "at 2:4" column need room.
    columns = (450, 460, 450)
    mask_width, tradeoff_width = 450, 440
    #: Seconds a replaced trade-off figure stays open before it is closed: a page that is
    #: connecting meanwhile may still ask the kernel for it (a model whose dense point comes
    #: a second after the page is drawn, a small checkpoint, otherwise logs "widget model not
    #: found" or "[anywidget] Failed to initialize model" in the browser). Longer than a page
    #: takes to connect on a busy two-core machine (up to about 42 s measured, docs/dashboard.md).
    retire_after_s = 60.0

    def __init__(self, dash) -> None:
        super().__init__(dash)
        w = load_ipywidgets()
        full = {"width": "98%"}
        narrow = {"description_width": "80px"}
        for control in (
            self.layer,
            self.method,
            self.pattern_choice,
            self.calibration,
            self.layers,
            self.layer_glob,
            self.dtype,
            self.tokens,
        ):
            control.layout = dict(full)
            control.style = narrow
        # The step above says "pick a layer": the whole width goes to the names and verdicts.
        self.layer.description = ""
        self.layer.style = {"description_width": "0px"}
        self.title.value = "<h3 style='margin:0 12px 0 0'>sparsity-explorer</h3>"
        self.title.add_class("explorer-title")
        self.model.layout = {"width": "230px"}
        self.model.style = {"description_width": "45px"}
        self.status.layout = {"flex": "1 1 auto", "overflow": "hidden"}
        self.bar.layout = {"width": "45%"}
        self.kernel_out.layout = {"max_height": "150px", "overflow": "auto"}
        self.table.layout = {"max_height": "310px", "overflow": "auto", "width": "98%"}
        self.pattern.layout = {"max_height": "200px", "overflow": "auto"}
        self.intro = w.HTML(INTRO).add_class("explorer-intro")

        def step(text: str):
            return w.HTML(text).add_class("explorer-step")

        left = w.VBox(
            [
                step("1 · pick a layer"),
                self.layer,
                self.table,
                step("2 · prune"),
                self.method,
                self.pattern_choice,
                self.calibration,
                self.layers,
                self.layer_glob,
                self.dtype,
                self.tokens,
                w.HBox([self.run, self.cancel, self.save, self.export]),
                w.HBox([self.bar, self.bar_text]),
            ],
            layout={"width": f"{self.columns[0]}px"},
        ).add_class("explorer-column")
        middle = w.VBox(
            [step("the selected layer's weights"), self.mask_box, w.HTML(_legend()), self.pattern],
            layout={"width": f"{self.columns[1]}px"},
        ).add_class("explorer-column")
        right = w.VBox(
            [
                step("3 · accuracy versus speedup, one point per run"),
                self.tradeoff_box,
                self.measure,
                self.measured,
                self.tradeoff_note,
                step("kernel: the selected layer's sparse matmul"),
                self.kernel,
                self.kernel_out,
            ],
            layout={"width": f"{self.columns[2]}px"},
        ).add_class("explorer-column")
        for box in (self.mask_box, self.tradeoff_box):
            box.layout = {"width": "100%"}
        self.widget = w.VBox(
            [
                w.HTML(_CSS),
                # a fixed height: a two-line status does not push the page down
                w.HBox(
                    [self.title, self.model, self.status],
                    layout={"align_items": "center", "height": "42px", "overflow": "hidden"},
                ),
                self.intro,
                w.HBox([left, middle, right], layout={"width": "100%"}),
            ],
            layout={"width": "100%"},
        ).add_class("explorer-dashboard")

    def _on_tradeoff(self, plot) -> None:
        # The replaced figure is closed, after a grace period: every open plotly widget
        # carries plotly.js (about 5 MB) in the state a newly connected page downloads.
        old = self.tradeoff
        super()._on_tradeoff(plot)
        if old is not self.tradeoff:
            timer = threading.Timer(self.retire_after_s, on_main_thread(old.close))
            timer.daemon = True
            timer.start()
