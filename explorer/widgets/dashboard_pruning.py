"""Pruning runs of the dashboard: in a thread, cancellable, the dense weights restored after.

:class:`Pruning` is the part of :class:`explorer.widgets.Dashboard` that prunes its model
with a :class:`~explorer.widgets.method_picker.MethodConfig` in a background thread, reports
progress, adds the run's trade-off point (:mod:`explorer.widgets.dashboard_points`), hands the
finished run to its ``after_run`` hook (the dashboard's GPU measurement,
:mod:`explorer.widgets.dashboard_measure`, in the same job) and, when
cancelled or failing, restores the dense model (every parameter and buffer, bit for bit), shows
it as it now is in the layer table and the mask view, and says so.

Examples
--------
>>> import torch
>>> from explorer.widgets import Dashboard, MethodConfig
>>> dash = Dashboard(torch.nn.Sequential(torch.nn.Linear(16, 16)))
>>> _ = dash.run(MethodConfig("magnitude", "2:4"), wait=True)
>>> dash.status.level, float(dash.model[0].weight.eq(0).float().mean())
('ok', 0.5)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from torch import nn

from explorer.widgets._quiet import hidden_displays
from explorer.widgets.dashboard_state import Run
from explorer.widgets.method_picker import MethodConfig, min_calibration

__all__ = ["Pruning"]


class Pruning:
    """Starting, running and cancelling a dashboard's pruning runs.

    Parameters
    ----------
    state : DashboardState
    events : Events
    loader : Loader
        A run waits for its load job.
    points : Points
        Gets each run's point and speed.
    layer_view : LayerView
        Shows the selected layer after a run.
    method_picker : MethodPicker
        Whose configuration a run uses by default.
    after_run : callable, optional
        ``after_run(run)``, called in the run's job once its point is drawn, while the job is
        still busy and cancellable (the dashboard's :meth:`Measure.after_run`); it must not
        raise.
    """

    def __init__(
        self,
        state,
        events,
        loader,
        points,
        layer_view,
        method_picker,
        after_run: Callable[[Run], None] | None = None,
    ) -> None:
        self.state, self.events, self.loader = state, events, loader
        self.points, self.layer_view, self.method_picker = points, layer_view, method_picker
        self.after_run = after_run

    def run(
        self, config: MethodConfig | None = None, wait: bool = False
    ) -> threading.Thread | None:
        """Prune the dense model with ``config`` (default: the method picker's) in a thread.

        Progress goes to :attr:`progress`, the outcome to :attr:`status` and the trade-off
        plot; :meth:`cancel` stops it and restores the dense weights. ``wait=True`` blocks.

        Parameters
        ----------
        config : MethodConfig or None, optional
            The method, pattern and settings.
        wait : bool, optional
            Block until the run ends.

        Returns
        -------
        threading.Thread or None
            The run's thread; None when another job is running or no model is loaded.
        """
        state = self.state
        if state.busy:
            self.events.say("warn", "a run is already in progress; wait for it or cancel it")
            return None
        if state.bundle is None or not state.layer_picker.rows:
            self.events.say("warn", "there is no model with prunable layers loaded")
            return None
        config = config or self.method_picker.config
        return state.start_job(
            self._run, (config,), "explorer-prune", wait, lambda: self.events.emit("busy")
        )

    def cancel(self) -> None:
        """Ask the running job to stop (it restores the dense model and says so)."""
        if self.state.busy:
            self.state.cancel.set()
            self.events.say("info", "cancelling ...")

    def _after_failure(self, progress: str, level: str, text: str) -> None:
        """Restore the dense model and show it as it now is: layer table, mask, status."""
        state = self.state
        state.restore_dense()
        state.current = None
        state.layer_picker.refresh()
        self.events.report(0.0, progress)
        self.events.emit("model")
        self.events.say(level, text)
        self.layer_view.select(state.selected)

    def _filter(self, config: MethodConfig):
        if config.layers is None:
            return self.state.bundle.filter_fn
        chosen = set(config.layers)
        return lambda module, fqn: isinstance(module, nn.Linear) and fqn in chosen

    def _run(self, config: MethodConfig) -> None:
        from explorer.pruning import PruningCancelled, prune

        state, events = self.state, self.events
        start = time.perf_counter()
        try:
            # 0. let the dense evaluation finish (it reads the same weights), 1. start from the
            # dense weights, 2. calibrate, 3. prune, 4. evaluate, 5. estimate.
            if self.loader.pending():
                events.report(0.02, "waiting for the model to load and its dense evaluation")
            self.loader.wait()
            events.report(0.05, "restoring the dense weights")
            state.restore_dense()
            state.current = None
            bundle = state.bundle
            calibration = None
            if config.calibration and (min_calibration(config.method) or config.update):
                events.report(0.15, f"calibration: {config.calibration} samples")
                with hidden_displays():  # the loader's own bars: the page has its bar
                    calibration = bundle.calibration(config.calibration)
            self._check_cancel()
            events.report(0.25, f"pruning: {config.label}")
            result = prune(
                bundle.model,
                config.method,
                config.pattern,
                calibration=calibration,
                filter_fn=self._filter(config),
                inplace=True,
                progress=False,
                cancel=state.cancel,
                **config.prune_options(),
            )
            self._check_cancel()
            events.report(0.8, "evaluating the pruned model")
            with hidden_displays():
                score = float(bundle.evaluate(bundle.model)[bundle.metric])
            masks = {k: v.detach().cpu() for k, v in result.masks.items()}
            events.report(0.9, "checking the pruned layers")
            state.layer_picker.refresh()
            speed = self.points.run_speed(config, masks)
            run = Run(config, masks, score, result)
            state.runs[config.label] = run
            state.current = run
            self.points.add_run(config, score, masks, speed, start)
            events.report(1.0, "done")
            events.emit("model")
            self.layer_view.select(state.selected or self.layer_view.first_prunable())
            said = (
                f"no speed data ({speed.details.get('why', speed.label)})"
                if speed.speedup is None
                else f"speedup {speed.speedup:.2f}x ({speed.note or speed.label})"
            )
            events.say("ok", f"{config.label}: {bundle.metric} {score:.4g}, {said}")
            if self.after_run is not None:
                self.after_run(run)
        except PruningCancelled:
            self._after_failure(
                "cancelled", "warn", "the run was cancelled; the model is dense again"
            )
        except Exception as exc:  # the page shows every failure as a message, never a traceback
            self._after_failure(
                "failed",
                "error",
                f"{config.label} failed: {type(exc).__name__}: {exc}; the model is dense again",
            )
        finally:
            state.busy = False
            events.emit("busy")

    def _check_cancel(self) -> None:
        if self.state.cancel.is_set():
            from explorer.pruning import PruningCancelled

            raise PruningCancelled("cancelled")

    def __repr__(self) -> str:
        return f"Pruning({len(self.state.runs)} runs, busy={self.state.busy})"
