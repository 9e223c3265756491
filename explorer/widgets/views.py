"""Thin ipywidgets views over the logic classes; everything here only mirrors their state.

ipywidgets and plotly are imported through :func:`explorer.errors.require`, so a missing
extra names the ``pip install`` to run.
"""

from __future__ import annotations

import sys
import threading

from explorer._html import escape
from explorer.errors import require
from explorer.widgets._plotly import figure_widget
from explorer.widgets.control_sync import show_config
from explorer.widgets.method_picker import min_calibration
from explorer.widgets.step_controls import StepControls

__all__ = [
    "DashboardView",
    "load_ipywidgets",
    "mask_figure",
    "on_main_thread",
    "tradeoff_figure",
]


def on_main_thread(fn):
    """Wrap ``fn`` so that calls from worker threads run on the kernel's main thread.

    Widget messages sent from a worker thread can race the kernel's handling of messages from
    the browser (traitlets then coalesce plotly's value-then-None updates and the browser
    never sees them); the kernel's IO loop serialises them. Outside a kernel ``fn`` runs as is.

    Parameters
    ----------
    fn : callable
        The function to wrap.

    Returns
    -------
    callable
    """

    def call(*args, **kwargs):
        if threading.current_thread() is threading.main_thread():
            return fn(*args, **kwargs)
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
        loop = getattr(getattr(shell, "kernel", None), "io_loop", None)
        if loop is None:
            return fn(*args, **kwargs)
        loop.add_callback(fn, *args, **kwargs)
        return None

    return call


def load_ipywidgets():
    """The ``ipywidgets`` module, imported on first use.

    Raises
    ------
    MissingExtraError
        Where ipywidgets is not installed, naming ``pip install sparsity-explorer[widgets]``.
    """
    return require("ipywidgets", "widgets")


def _go():
    return require("plotly.graph_objects", "widgets")


def mask_figure(viewer, height: int = 420, on_click=None, width: int | None = None):
    """A heatmap ``FigureWidget`` that redraws when ``viewer`` changes; a click zooms.

    Parameters
    ----------
    viewer : MaskViewer
        The viewer drawn.
    height, width : int, optional
        The figure's size in pixels (no width: plotly's).
    on_click : callable, optional
        ``on_click(row, col)``; None for ``viewer.click``.

    Returns
    -------
    plotly.graph_objects.FigureWidget
    """
    go = _go()
    # The layout goes into the constructor: updates sent before the figure is displayed
    # are not applied by the front end.
    layout = {
        "title": {"text": viewer.title, "font": {"size": 12}},
        "height": height,
        **({"width": width} if width else {}),
        "margin": {"l": 60, "r": 10, "t": 40, "b": 40},
        "xaxis": {"title": {"text": "input feature"}},
        "yaxis": {"title": {"text": "output feature"}, "autorange": "reversed"},
    }
    fig = figure_widget(data=[go.Heatmap(**viewer.heatmap())], layout=layout)

    def redraw(v) -> None:
        with fig.batch_update():
            fig.data[0].update(**v.heatmap())
            fig.layout.title.text = v.title

    def clicked(trace, points, state) -> None:
        if points.xs and points.ys:
            (on_click or viewer.click)(points.ys[0], points.xs[0])

    viewer.on_change(on_main_thread(redraw))
    fig.data[0].on_click(clicked)
    return fig


def _tradeoff_data(go, plot) -> list:
    """The trade-off plot's traces: one per speed source (its own marker), then the frontier."""
    _points, front = plot.traces()
    traces = [
        go.Scatter(
            mode="markers+text",
            hoverinfo="text",
            cliponaxis=False,
            textfont={"size": 10},
            **kind,
        )
        for kind in plot.kind_traces()
    ]
    traces.append(
        go.Scatter(
            mode="lines",
            line={"dash": "dot", "color": "#57606a"},
            hoverinfo="skip",
            **front,
        )
    )
    return traces


def _tradeoff_layout(plot) -> dict:
    """Axes of the trade-off plot: the speed-up axis and, with points lacking one, a strip."""
    xrange, yrange = plot.ranges()
    strip = any(p.speedup is None for p in plot.points)
    return {
        "xaxis": {
            "title": {"text": plot.speedup_label, "font": {"size": 11}},
            "range": xrange,
            "domain": [0, 0.82] if strip else [0, 1],
        },
        "xaxis2": {
            "domain": [0.88, 1],
            "type": "category",
            "visible": strip,
            "anchor": "y",
            "fixedrange": True,
        },
        "yaxis": {"title": {"text": plot.metric}, "range": yrange},
    }


def tradeoff_figure(plot, height: int = 380, follow: bool = True, width: int | None = None):
    """Scatter of the configurations plus the Pareto frontier; a click loads a configuration.

    Each speed source has its own marker and legend entry (measured, estimated, no data);
    points without a speed-up sit in a strip of their own on the right. With ``follow`` the
    figure redraws itself when points are added; without, it is a snapshot (the dashboard
    replaces the snapshot instead, see :class:`DashboardView`).

    Parameters
    ----------
    plot : TradeoffPlot
        The trade-off plot.
    height, width : int, optional
        The figure's size in pixels (no width: plotly's).
    follow : bool, optional
        Redraw when points are added.

    Returns
    -------
    plotly.graph_objects.FigureWidget
    """
    go = _go()
    layout = {
        "height": height,
        **({"width": width} if width else {}),
        "margin": {"l": 60, "r": 10, "t": 40, "b": 40},
        "title": {
            "text": "trade-off: click a point to load its configuration",
            "font": {"size": 12},
        },
        "legend": {"orientation": "h", "y": -0.22, "font": {"size": 11}},
        **_tradeoff_layout(plot),
    }
    fig = figure_widget(data=_tradeoff_data(go, plot), layout=layout)

    def clicked(trace, pts, state) -> None:
        if pts.point_inds and trace.customdata is not None:
            plot.click(int(trace.customdata[pts.point_inds[0]]))

    def bind() -> None:
        for trace in fig.data[:-1]:
            trace.on_click(clicked)

    def redraw(p) -> None:
        fig.data = []
        fig.add_traces(_tradeoff_data(go, p))
        with fig.batch_update():
            fig.layout.update(_tradeoff_layout(p))
        bind()

    if follow:
        plot.on_change(on_main_thread(redraw))
    bind()
    return fig


def _measured(dash) -> str:
    """The line that says what the accuracy is measured on."""
    text = dash.measured_on
    return f"<div style='font-size:11px;line-height:1.3'>{escape(text)}</div>" if text else ""


class DashboardView:
    """The dashboard page: controls bound to a :class:`explorer.widgets.Dashboard`.

    ``DashboardView(dash).widget`` is the root ``VBox``; ``Dashboard.view()`` builds it.
    """

    #: Sizes of the mask heatmap and the trade-off plot, in pixels (subclasses resize them;
    #: a width of None lets plotly choose).
    mask_height, tradeoff_height = 420, 380
    mask_width = tradeoff_width = None

    def __init__(self, dash) -> None:
        w = load_ipywidgets()
        self.dash = dash
        self._lock = threading.Lock()
        self.syncing = False  # True while the controls are set from the picker (control_sync)
        self.title = w.HTML("<h2 style='margin:4px 0'>sparsity-explorer</h2>")
        self.model = w.Dropdown(options=list(dash.models), description="model")
        self.status = w.HTML(dash.status.html()).add_class("explorer-status")
        self.layer = w.Dropdown(description="layer", layout={"width": "420px"}).add_class(
            "explorer-layer"
        )
        self.table = w.HTML().add_class("explorer-layer-table")
        self.mask = mask_figure(dash.mask_viewer, self.mask_height, width=self.mask_width)
        self.mask_box = w.Box([self.mask]).add_class("explorer-mask")
        self.pattern = w.HTML(dash.pattern_panel.html()).add_class("explorer-pattern")
        cfg = dash.method_picker.config
        self.method = w.Dropdown(
            options=list(dash.method_picker.methods), value=cfg.method, description="method"
        )
        # Read on Enter or when the box loses focus, not at every keystroke ("2" of "2:4").
        self.pattern_choice = w.Combobox(
            options=list(dash.method_picker.patterns),
            value=cfg.pattern,
            description="pattern",
            ensure_option=False,
            continuous_update=False,
        ).add_class("explorer-pattern-choice")
        # Methods that need data start at 1 sample (see _sync_calibration).
        self.calibration = w.IntSlider(
            value=cfg.calibration,
            min=min_calibration(cfg.method),
            max=256,
            step=1,
            description="calibration",
        ).add_class("explorer-calibration")
        self.steps = StepControls(w, cfg)
        self.layers = w.Dropdown(
            options=[
                ("all prunable", "all"),
                ("selected layer", "one"),
                ("fast at 2:4", "fast"),
                ("MLP", "mlp"),
                ("by name pattern", "pattern"),
            ],
            value="all",
            description="layers",
        )
        # Globs on fully qualified names, joined by "|"; used with "by name pattern".
        self.layer_glob = w.Text(
            value="", placeholder="e.g. *.intermediate.*|*.output.dense", description="names"
        ).add_class("explorer-layer-glob")
        self.measured = w.HTML(_measured(dash)).add_class("explorer-measured-on")
        self.dtype = w.Dropdown(
            options=["float16", "bfloat16"], value=cfg.dtype, description="dtype"
        )
        self.tokens = w.Dropdown(
            options=[128, 512, 1024, 4096, 16384], value=cfg.tokens, description="tokens"
        )
        self.run = w.Button(description="Prune", button_style="primary", icon="play").add_class(
            "explorer-run"
        )
        self.cancel = w.Button(description="Cancel", icon="stop", disabled=True).add_class(
            "explorer-cancel"
        )
        self.save = w.Button(description="Save", icon="save").add_class("explorer-save")
        self.export = w.Button(description="Export", icon="download").add_class("explorer-export")
        # Times the loaded run on this machine's GPU; disabled, saying why, without one.
        self.measure = w.Button(description="Measure", icon="tachometer").add_class(
            "explorer-measure"
        )
        self.bar = w.FloatProgress(
            value=0.0, min=0.0, max=1.0, description="", layout={"width": "200px"}
        )
        self.bar_text = w.Label("")
        self.kernel = w.Button(description="Run kernel", icon="bolt").add_class("explorer-kernel")
        self.kernel_out = w.HTML("<i>compress the selected layer and run its sparse matmul</i>")
        self.tradeoff = tradeoff_figure(
            dash.tradeoff, self.tradeoff_height, follow=False, width=self.tradeoff_width
        )
        self.tradeoff_box = w.Box([self.tradeoff]).add_class("explorer-tradeoff")
        self.tradeoff_note = w.HTML(
            f"<div style='font-size:11px;line-height:1.3'>{dash.tradeoff.note()}</div>"
        ).add_class("explorer-tradeoff-note")

        controls = w.VBox(
            [
                w.HTML("<b>pruning</b>"),
                self.method,
                self.pattern_choice,
                self.calibration,
                self.steps.box,
                self.layers,
                self.layer_glob,
                self.dtype,
                self.tokens,
                w.HBox([self.run, self.cancel]),
                w.HBox([self.save, self.export, self.measure]),
                w.HBox([self.bar, self.bar_text]),
                w.HTML("<b>kernel</b>"),
                self.kernel,
                self.kernel_out,
            ],
            layout={"width": "38%"},
        )
        left = w.VBox(
            [self.layer, self.table, self.mask_box, self.pattern], layout={"width": "62%"}
        )
        self.widget = w.VBox(
            [
                w.HBox([self.title, self.model]),
                self.status,
                w.HBox([left, controls]),
                self.tradeoff_box,
                self.measured,
                self.tradeoff_note,
            ]
        ).add_class("explorer-dashboard")

        self._sync_model()
        self._sync_measure()
        self.model.observe(self._on_model, names="value")
        self.layer.observe(self._on_layer, names="value")
        for control in (
            self.method,
            self.pattern_choice,
            self.calibration,
            self.dtype,
            self.tokens,
            *self.steps.controls,
        ):
            control.observe(self._on_config, names="value")
        self.run.on_click(self._on_run)
        self.cancel.on_click(lambda _: dash.cancel())
        self.save.on_click(lambda _: dash.save())
        self.export.on_click(lambda _: dash.export())
        self.kernel.on_click(self._on_kernel)
        self.measure.on_click(lambda _: dash.measure.start())
        dash.on_change(on_main_thread(self._on_event))
        dash.tradeoff.on_change(on_main_thread(self._on_tradeoff))

    # -- state -> widgets -----------------------------------------------------------------
    def _sync_model(self) -> None:
        dash = self.dash
        picker = dash.layer_picker
        with self._lock:
            name = getattr(dash.bundle, "name", None)
            if name is not None and name not in self.model.options:
                self.model.options = [*self.model.options, name]
            if name is not None:
                self.model.value = name
            rows = picker.rows if picker is not None else []
            self.layer.options = [(r.label, r.name) for r in rows]
            self.layer.value = dash.selected if dash.selected in picker.names else None
        self.table.value = picker.html() if picker is not None else ""
        self.measured.value = _measured(dash)

    def _sync_measure(self) -> None:
        """The Measure button: enabled with a GPU and no job running; its tooltip says why not."""
        reason = self.dash.measure.unavailable()
        self.measure.disabled = reason is not None or self.dash.busy
        self.measure.tooltip = reason or (
            "time the loaded run's pruned model on this GPU, dense against sparse"
        )

    def _on_event(self, event: str) -> None:
        dash = self.dash
        if event == "status":
            self.status.value = dash.status.html()
        elif event == "progress":
            fraction, text = dash.progress
            self.bar.value, self.bar_text.value = fraction, text
        elif event == "busy":
            self.run.disabled = dash.busy
            self.save.disabled = self.export.disabled = dash.busy
            self.cancel.disabled = not dash.busy
            self.model.disabled = dash.busy
            self._sync_measure()
        elif event == "model":
            self._sync_model()
            show_config(self, dash.method_picker.config)
            self._sync_calibration()
        elif event == "layer":
            self.pattern.value = dash.pattern_panel.html()
            self.table.value = dash.layer_picker.html()
            with self._lock:
                if self.layer.value != dash.selected:
                    self.layer.value = dash.selected
        elif event == "kernel" and dash.kernel_runner.result is not None:
            self.kernel_out.value = dash.kernel_runner.result._repr_html_()

    def _on_tradeoff(self, plot) -> None:
        # A new figure per change: it arrives with its whole state, where an incremental
        # update sent right after a run's burst of messages was sometimes not applied.
        self.tradeoff = tradeoff_figure(
            plot, self.tradeoff_height, follow=False, width=self.tradeoff_width
        )
        self.tradeoff_box.children = [self.tradeoff]
        self.tradeoff_note.value = (
            f"<div style='font-size:11px;line-height:1.3'>{plot.note()}</div>"
        )
        self.measured.value = _measured(self.dash)  # the real bundle may have loaded since

    # -- widgets -> state -----------------------------------------------------------------
    def _on_model(self, change) -> None:
        if self._lock.locked() or change["new"] == getattr(self.dash.bundle, "name", None):
            return
        self.dash.say("info", f"loading {change['new']} ...")
        threading.Thread(target=self.dash.load, args=(change["new"],), daemon=True).start()

    def _on_layer(self, change) -> None:
        if self._lock.locked() or change["new"] is None:
            return
        if change["new"] != self.dash.selected:
            self.dash.layer_picker.select(change["new"])

    def _sync_calibration(self) -> None:
        """The slider's lower end: 1 sample for a method that needs data, else 0."""
        low = min_calibration(self.method.value)
        if self.calibration.min != low:
            self.calibration.min = low  # raises the value to ``low`` when it was below

    def _on_config(self, change) -> bool:
        """Hand the controls' values to the method picker; False (and an error shown) if refused."""
        if self.syncing:
            return True
        self._sync_calibration()
        try:
            self.dash.method_picker.set(
                method=self.method.value,
                pattern=self.pattern_choice.value,
                calibration=int(self.calibration.value),
                dtype=self.dtype.value,
                tokens=int(self.tokens.value),
                **self.steps.values(),
            )
        except (ValueError, TypeError) as exc:
            self.dash.say("error", f"invalid setting: {exc}")
            return False
        canonical = self.dash.method_picker.config.pattern  # " 2:4 " is shown as "2:4"
        if self.pattern_choice.value != canonical:
            self.pattern_choice.value = canonical
        return True

    def _on_run(self, _button) -> None:
        # A setting the picker refuses is never replaced by the previous one: nothing runs.
        if not self._on_config(None):
            return
        picker = self.dash.method_picker
        try:
            picker.set(layers=self.dash.layer_set(self.layers.value, self.layer_glob.value))
        except ValueError as exc:
            self.dash.say("error", str(exc))
            return
        self.dash.run(picker.config)

    def _on_kernel(self, _button) -> None:
        self.dash.say("info", "running the kernel ...")
        self.dash.run_kernel(int(self.tokens.value), self.dtype.value)
