"""Pruning runs of the dashboard: in a thread, cancellable, the dense weights restored after.

:class:`_Pruning` is the part of :class:`explorer.widgets.Dashboard` that prunes its model
with a :class:`~explorer.widgets.method_picker.MethodConfig` in a background thread, reports
progress, adds the run's trade-off point (:mod:`explorer.widgets.dashboard_points`) and, when
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
from dataclasses import dataclass

from torch import nn

from explorer.widgets.method_picker import MethodConfig, min_calibration

__all__: list[str] = []


@dataclass
class _Run:
    config: MethodConfig
    masks: dict
    score: float
    result: object = None


class _Pruning:
    """Starting, running and cancelling a dashboard's pruning runs."""

    def run(
        self, config: MethodConfig | None = None, wait: bool = False
    ) -> threading.Thread | None:
        """Prune the dense model with ``config`` (default: the method picker's) in a thread.

        Progress goes to :attr:`progress`, the outcome to :attr:`status` and the trade-off
        plot; :meth:`cancel` stops it and restores the dense weights. ``wait=True`` blocks.
        """
        if self.busy:
            self.say("warn", "a run is already in progress; wait for it or cancel it")
            return None
        if self.bundle is None or not self.layer_picker.rows:
            self.say("warn", "there is no model with prunable layers loaded")
            return None
        config = config or self.method_picker.config
        self.busy = True
        self._cancel.clear()
        self._emit("busy")
        self._thread = threading.Thread(
            target=self._run, args=(config,), daemon=True, name="explorer-prune"
        )
        self._thread.start()
        if wait:
            self._thread.join()
        return self._thread

    def cancel(self) -> None:
        """Ask the running job to stop (it restores the dense model and says so)."""
        if self.busy:
            self._cancel.set()
            self.say("info", "cancelling ...")

    def _restore_dense(self) -> None:
        """Put every parameter and buffer back as it was when the model loaded, bit for bit."""
        if self._dense is not None:
            self._dense.restore()

    def _after_failure(self, progress: str, level: str, text: str) -> None:
        """Restore the dense model and show it as it now is: layer table, mask, status."""
        self._restore_dense()
        self.current = None
        self.layer_picker.refresh()
        self._progress(0.0, progress)
        self._emit("model")
        self.say(level, text)
        self.select_layer(self.selected)

    def _filter(self, config: MethodConfig):
        if config.layers is None:
            return self.bundle.filter_fn
        chosen = set(config.layers)
        return lambda module, fqn: isinstance(module, nn.Linear) and fqn in chosen

    def _run(self, config: MethodConfig) -> None:
        from explorer.pruning import PruningCancelled, prune

        start = time.perf_counter()
        try:
            # 0. let the dense evaluation finish (it reads the same weights), 1. start from the
            # dense weights, 2. calibrate, 3. prune, 4. evaluate, 5. estimate.
            if self._job_pending():
                self._progress(0.02, "waiting for the model to load and its dense evaluation")
            self._wait_for_dense()
            self._progress(0.05, "restoring the dense weights")
            self._restore_dense()
            self.current = None
            calibration = None
            if config.calibration and min_calibration(config.method):
                self._progress(0.15, f"calibration: {config.calibration} samples")
                calibration = self.bundle.calibration(config.calibration)
            self._check_cancel()
            self._progress(0.25, f"pruning with {config.method} {config.pattern}")
            result = prune(
                self.bundle.model,
                config.method,
                config.pattern,
                calibration=calibration,
                filter_fn=self._filter(config),
                inplace=True,
                progress=False,
                cancel=self._cancel,
            )
            self._check_cancel()
            self._progress(0.8, "evaluating the pruned model")
            score = float(self.bundle.evaluate(self.bundle.model)[self.bundle.metric])
            masks = {k: v.detach().cpu() for k, v in result.masks.items()}
            self._progress(0.9, "checking the pruned layers")
            self.layer_picker.refresh()
            speed = self._run_speed(config, masks)
            run = _Run(config, masks, score, result)
            self.runs[config.label] = run
            self.current = run
            self._add_run_point(config, score, masks, speed, start)
            self._progress(1.0, "done")
            self._emit("model")
            self.select_layer(self.selected or self._first_prunable())
            said = (
                f"no speed data ({speed.details.get('why', speed.label)})"
                if speed.speedup is None
                else f"speedup {speed.speedup:.2f}x ({speed.label})"
            )
            self.say("ok", f"{config.label}: {self.bundle.metric} {score:.4g}, {said}")
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
            self.busy = False
            self._emit("busy")

    def _check_cancel(self) -> None:
        if self._cancel.is_set():
            from explorer.pruning import PruningCancelled

            raise PruningCancelled("cancelled")
