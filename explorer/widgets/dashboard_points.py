"""The dashboard's trade-off points: the dense one, one per run with its speed, loading one back.

:class:`Points` is the part of :class:`explorer.widgets.Dashboard` that adds points to its
:class:`~explorer.widgets.tradeoff.TradeoffPlot`, chooses where each run's speed-up comes
from (a recorded whole-model measurement, else the per-layer estimate, else none) and loads a
clicked point's configuration and masks back into the model. A run whose configuration the
dashboard's results store has timed whole (a ``model-speed`` row, written by a sweep) is drawn
at that measured speed-up, its hover saying ``"measured, <mode>, <tokens> tokens"``; so is a
run the dashboard timed itself (:mod:`explorer.widgets.dashboard_measure`), whose measurement
:meth:`Points.remember` keeps and :meth:`Points.update_run` draws. The store's quantized
configurations of the model (int8, int4 and FP8 accuracy rows, dense and 2:4) are drawn beside
the dense point (:meth:`Points.add_quantized`), each in its precision's colour: at its speed-up
over bf16 dense where the same model was timed whole at the page's token count in CUDA graphs,
else in the no-data strip.

Examples
--------
>>> import torch
>>> from explorer.widgets import Dashboard
>>> dash = Dashboard(torch.nn.Linear(16, 16))
>>> [(p.label, p.speedup, p.speed_source) for p in dash.tradeoff.points]
[('dense', 1.0, 'baseline')]
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from explorer.results.model_speed import (
    DEFAULT_SPEED_MODE,
    MODEL_SPEED,
    MeasuredSpeed,
    measured_speed,
)
from explorer.results.quantized_points import QuantizedPoint, quantized_points
from explorer.results.speedup import estimate_speedup, recorded_model_speed
from explorer.results.store import StoreError
from explorer.results.tradeoff import SpeedChoice, TradeoffPoint, choose_speed
from explorer.widgets._quiet import hidden_displays
from explorer.widgets.dashboard_status import summary
from explorer.widgets.method_picker import MethodConfig

__all__ = ["Points"]

#: Hover lines of a run's point that say how the run went, kept when its speed is replaced.
_RUN_DETAILS = ("pruned layers", "pruning took")


class Points:
    """Trade-off points of a dashboard and the speed each run is given.

    Parameters
    ----------
    state : DashboardState
    events : Events
    tradeoff : TradeoffPlot
        Where the points go.
    layer_view : LayerView
        Redrawn when a point is loaded.
    method_picker : MethodPicker
        Set to a loaded point's configuration.
    """

    def __init__(self, state, events, tradeoff, layer_view, method_picker) -> None:
        self.state, self.events, self.tradeoff = state, events, tradeoff
        self.layer_view, self.method_picker = layer_view, method_picker
        #: Whole-model measurements taken here, by (model, run label, tokens): see :meth:`remember`.
        self.timed: dict[tuple[str, str, int], MeasuredSpeed] = {}

    def add_dense(self) -> None:
        """Evaluate the dense model and add its point (a failure is a warning in the status)."""
        bundle, state = self.state.bundle, self.state
        try:
            with hidden_displays():  # the evaluation's own bars: the page has its bar
                score = float(bundle.evaluate(bundle.model)[bundle.metric])
        except (ValueError, RuntimeError, TypeError) as exc:
            self.events.say("warn", f"could not evaluate the dense model: {exc}")
            return
        dense = MethodConfig("dense", "2:4", 0, None, state.dtype, state.tokens)
        self.tradeoff.add(
            TradeoffPoint(
                "dense",
                1.0,
                score,
                dense.to_json(),
                {"model": bundle.name},
                speed_source="baseline",
                speed_from="by definition",
            )
        )
        self.events.say("ok", f"{summary(state)}; dense {bundle.metric} {score:.4g}")
        self.add_quantized()

    def add_quantized(self) -> int:
        """Add the store's quantized configurations of this model; return how many.

        :func:`explorer.results.quantized_points.quantized_points` of the store's own accuracy
        rows for the current model (its name, or a checkpoint folder's path), each placed at a
        whole-model measurement of the same model at the page's token count in CUDA graphs
        where there is one, else in the no-data strip. Without a store nothing is added: the
        shipped reference database holds no quantized accuracy rows.

        Returns
        -------
        int
            The points added.

        Examples
        --------
        >>> import torch
        >>> from explorer.widgets import Dashboard
        >>> Dashboard(torch.nn.Linear(16, 16)).points.add_quantized()
        0
        """
        bundle, store = self.state.bundle, self.state.store
        name = getattr(bundle, "name", None)
        if store is None or name is None:
            return 0
        path = (getattr(bundle, "options", None) or {}).get("path")
        try:
            rows = store.query(["dense", "prune", "bench-models"])
        except StoreError as exc:
            self.events.say("warn", f"could not read quantized results: {exc}")
            return 0
        found = quantized_points(
            rows,
            tokens=self.state.tokens,
            mode=DEFAULT_SPEED_MODE,
            models=[str(name), *([str(path)] if path else [])],
        )
        for point in found:
            self.tradeoff.add(point)
        return len(found)

    def run_speed(self, config: MethodConfig, masks: dict):
        """The speed of a run that pruned ``masks``: the layers' estimate, then :meth:`speed_of`.

        Parameters
        ----------
        config : MethodConfig
            The run's configuration.
        masks : dict
            The run's keep-masks, by layer name.

        Returns
        -------
        SpeedChoice
        """
        if config.quantize:
            return SpeedChoice(
                None,
                "none",
                details={
                    "why": f"2:4 on {config.quantize} weights is timed by the GPU benchmark "
                    "(benchmarks/quantized_models.py), not estimated from 16-bit layer speeds"
                },
            )
        rows = self.state.layer_picker.rows
        estimate = estimate_speedup(
            {r.name: r.shape for r in rows},
            masks,
            config.pattern,
            config.tokens,
            config.dtype,
            {r.name: r.verdict for r in rows},
            self.state.store,
        )
        return self.speed_of(config, estimate)

    def add_run(self, config: MethodConfig, score: float, masks: dict, speed, start: float) -> None:
        """Add a run's point; ``start`` is when the run began (``time.perf_counter()``).

        Parameters
        ----------
        config : MethodConfig
            The run's configuration.
        score : float
            The pruned model's metric.
        masks : dict
            The run's keep-masks, by layer name.
        speed : SpeedChoice
            The run's speed-up and where it comes from.
        start : float
            When the run began.
        """
        bundle = self.state.bundle
        run_details = (len(masks), f"{time.perf_counter() - start:.1f} s")
        details = {**speed.details, **dict(zip(_RUN_DETAILS, run_details, strict=True))}
        self.tradeoff.add(
            TradeoffPoint(
                config.label,
                speed.speedup,
                score,
                config.to_json(),
                details,
                speed_source=speed.source,
                speed_from=speed.speed_from,
                model=str(bundle.name),
                method=config.method,
                pattern=config.pattern,
                metric=bundle.metric,
                tokens=config.tokens,
                higher_is_better=bundle.higher_is_better,
                dtype=config.dtype,
                speed_note=speed.note,
            )
        )

    def remember(self, config: MethodConfig, speed: MeasuredSpeed) -> None:
        """Keep ``speed``, the run of ``config`` timed whole here, for :meth:`own_speed`.

        Parameters
        ----------
        config : MethodConfig
            The run's configuration.
        speed : MeasuredSpeed
            Its model, timed whole.

        Examples
        --------
        >>> import torch
        >>> from explorer.widgets import Dashboard, MethodConfig
        >>> dash = Dashboard(torch.nn.Linear(16, 16))
        >>> config = MethodConfig("magnitude", "2:4", tokens=512)
        >>> dash.points.remember(config, MeasuredSpeed(1.2, "graphs", 512, "H100"))
        >>> dash.points.own_speed(config)
        MeasuredSpeed(1.20x measured, graphs, 512 tokens, on H100)
        """
        self.timed[self._key(config)] = speed

    def update_run(self, run):
        """Give the point of ``run`` its speed again (:meth:`run_speed`); return the speed.

        ``run`` is a :class:`~explorer.widgets.dashboard_state.Run`; its score and how it went are
        kept. A run without a point only gets the speed back.

        Parameters
        ----------
        run : Run
            The finished run.

        Returns
        -------
        SpeedChoice
        """
        speed = self.run_speed(run.config, run.masks)
        old = next((p for p in self.tradeoff.points if p.label == run.config.label), None)
        if old is not None:
            kept = {k: old.details[k] for k in _RUN_DETAILS if k in old.details}
            self.tradeoff.add(
                replace(
                    old,
                    speedup=speed.speedup,
                    details={**speed.details, **kept},
                    speed_source=speed.source,
                    speed_from=speed.speed_from,
                    speed_note=speed.note,
                )
            )
        return speed

    def _key(self, config: MethodConfig) -> tuple[str, str, int]:
        return (str(getattr(self.state.bundle, "name", None)), config.label, config.tokens)

    def speed_of(self, config: MethodConfig, estimate=None):
        """Where a run's speed-up comes from (:func:`explorer.results.tradeoff.choose_speed`).

        This very configuration timed whole (a ``model-speed`` row of the dashboard's store,
        :meth:`own_speed`); else a whole-model measurement of this model at the run's dtype and
        token count (the store's own rows first, then the reference database's) when every
        prunable layer was pruned 2:4; else ``estimate`` when it rests on measured layers; else
        no data.

        Parameters
        ----------
        config : MethodConfig
            The run's configuration.
        estimate : SpeedEstimate, optional
            The per-layer estimate, used when nothing measured applies.

        Returns
        -------
        SpeedChoice
        """
        name = getattr(self.state.bundle, "name", None)
        measured = (
            recorded_model_speed(str(name), config.dtype, config.tokens, self.state.store)
            if name is not None
            else []
        )
        return choose_speed(
            measured,
            estimate,
            config.pattern,
            whole_model=config.layers is None,
            model_speed=self.own_speed(config),
        )

    def own_speed(self, config: MethodConfig) -> MeasuredSpeed | None:
        """The configuration's own model timed whole.

        Measured here (:meth:`remember`), else read from the store's ``model-speed`` rows.

        A measurement this dashboard took at the run's token count comes first. Else rows of
        the current model (its name, or for a checkpoint folder also the folder's path, as a
        sweep of it records it), method, pattern and dtype with every prunable layer pruned
        (``layers="all"``), at the run's token count or else the nearest one
        (:func:`explorer.results.model_speed.measured_speed`). None without either: no store,
        no model, no such row, or only some layers pruned (a sweep names no such subset).

        Parameters
        ----------
        config : MethodConfig
            The run's configuration.

        Returns
        -------
        MeasuredSpeed or None
        """
        here = self.timed.get(self._key(config))
        if here is not None:
            return here
        bundle = self.state.bundle
        name = getattr(bundle, "name", None)
        if self.state.store is None or name is None or config.layers is not None:
            return None
        # A sweep records a checkpoint folder by its absolute path, the bundle by its label.
        path = (getattr(bundle, "options", None) or {}).get("path")
        return measured_speed(
            self.state.store.query(MODEL_SPEED, model=[str(name), *([str(path)] if path else [])]),
            tokens=config.tokens,
            method=config.method,
            pattern=config.pattern,
            layers="all",
            dtype=config.dtype,
        )

    def load_point(self, point: TradeoffPoint) -> None:
        """Load the configuration of a trade-off point: its settings and its masks.

        Parameters
        ----------
        point : TradeoffPoint
            A point of the trade-off plot.
        """
        state, say = self.state, self.events.say
        if isinstance(point, QuantizedPoint):
            say(
                "info",
                f"{point.label}: a recorded {point.short} result from the results store, "
                "not a run of this page; nothing to load",
            )
            return
        try:
            config = MethodConfig.from_json(point.config)
        except (ValueError, TypeError) as exc:
            say("error", f"cannot load {point.label}: {exc}")
            return
        if state.busy:
            say("warn", "a run is in progress; wait for it before loading another")
            return
        state.restore_dense()
        run = state.runs.get(point.label)
        if config.method != "dense":
            self.method_picker.config = replace(config)
        if config.permute:  # its masks are of the reordered weights, not of the dense ones
            run = None
        if run is not None:
            with torch.no_grad():
                for name, mask in run.masks.items():
                    weight = state.bundle.model.get_submodule(name).weight
                    weight.mul_(mask.to(torch.float32).to(weight.dtype))
        state.current = run
        state.layer_picker.refresh()
        self.events.emit("model")
        self.layer_view.select(state.selected)
        if config.permute:
            say(
                "ok",
                f"loaded the settings of {point.label}; the model stays dense: that run reordered "
                "input channels, so its masks do not fit the dense weights. Press Run to prune "
                "it again",
            )
            return
        note = (
            " (masks applied to the dense weights; run it again for the method's weight updates)"
            if _updates_weights(config.method) or config.update or config.quantize
            else ""
        )
        say("ok", f"loaded {point.label}{note}")

    def __repr__(self) -> str:
        return f"Points({len(self.tradeoff.points)} points)"


def _updates_weights(method: str) -> bool:
    """Whether ``method`` changes kept weights too, as the pruning method registry says."""
    from explorer.pruning import METHODS as REGISTRY

    info = REGISTRY.get(method)
    return info is not None and info.updates_weights
