"""Timing the dashboard's pruned model on its GPU: the measurement replaces the run's estimate.

:class:`Measure` is the part of :class:`explorer.widgets.Dashboard` that times a run's pruned
model whole, dense against a sparsified copy
(:func:`explorer.bench.model_speed.measure_model_speed`), at the run's token count and dtype
in the default speed mode. On a machine with a CUDA GPU it does so after each pruning run, in
the run's background job (the progress bar and Cancel stay live, the page usable), and its
Measure button times the loaded run again in a job of its own. The measurement goes to the
dashboard's results store as a ``model-speed`` row when it has one, and to
:meth:`~explorer.widgets.dashboard_points.Points.remember` always, and the run's point is
redrawn at it (``"measured, <mode>, <tokens> tokens"``). A cancelled or failed measurement
leaves the point's estimate and says so in one line. Without a GPU nothing is timed: the
button is disabled and :meth:`Measure.unavailable` says why.

Examples
--------
>>> import torch
>>> from explorer.widgets import Dashboard
>>> dash = Dashboard(torch.nn.Sequential(torch.nn.Linear(16, 16)))
>>> dash.measure.unavailable() if not torch.cuda.is_available() else None
'no CUDA GPU here'
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch
from torch import nn

from explorer.bench.model_speed import TIMED_DTYPES, measure_model_speed
from explorer.bench.model_timer import CudaModelTimer
from explorer.results.model_speed import DEFAULT_SPEED_MODE, MeasuredSpeed
from explorer.widgets._quiet import hidden_displays

__all__ = ["NO_GPU", "Measure", "MeasureCancelled", "example_input"]

#: Why nothing is timed on a machine without a CUDA GPU (the Measure button's tooltip).
NO_GPU = "no CUDA GPU here"


class MeasureCancelled(Exception):
    """The measurement was cancelled (the dashboard's Cancel)."""


def example_input(bundle):
    """One input for ``bundle.model``: a calibration batch, else one row of zeros.

    The row of zeros is sized for its first ``nn.Linear`` (a plain module has no data).

    Parameters
    ----------
    bundle : ModelBundle
        The model bundle.

    Returns
    -------
    torch.Tensor or Any
        The first calibration batch, or ``torch.zeros(1, in_features)``.

    Raises
    ------
    ValueError
        Without calibration data or an ``nn.Linear`` to size an input for.

    Examples
    --------
    >>> from explorer.models.bundle import ModelBundle
    >>> bundle = ModelBundle.from_module(nn.Linear(16, 4), evaluate=lambda m: {"score": 0.0})
    >>> example_input(bundle).shape
    torch.Size([1, 16])
    """
    if getattr(bundle, "calibration_fn", None) is not None:
        return bundle.calibration(1)[0]
    first = next((m for m in bundle.model.modules() if isinstance(m, nn.Linear)), None)
    if first is None:
        raise ValueError(
            f"no input to time {bundle.name!r} with: it has no calibration data and no "
            "nn.Linear. Hint: load it as a ModelBundle with calibration="
        )
    return torch.zeros(1, first.in_features)


#: Each step of a measurement: where the progress bar goes and what it says, in turn for a
#: step taken more than once (dense, then sparse forwards).
_STEPS = {
    "place": ((0.1, "placing a copy on the GPU"),),
    "sparsify": ((0.2, "sparsifying the copy"),),
    "place_inputs": ((0.3, "placing the input"),),
    "forward_ms": ((0.4, "timing the dense model"), (0.7, "timing the sparse model")),
    "gpu_busy": ((0.55, "the dense model's GPU-busy share"),),
    "layer_estimate": ((0.9, "the ceiling estimate"),),
}


class _Watched:
    """A model timer that reports each step as progress and stops there when cancelled."""

    def __init__(self, timer, cancel: threading.Event, report: Callable[[float, str], None]):
        self.timer, self.cancel, self.report = timer, cancel, report
        self.taken = dict.fromkeys(_STEPS, 0)

    def _step(self, name: str):
        if self.cancel.is_set():
            raise MeasureCancelled("cancelled")
        turns = _STEPS[name]
        fraction, text = turns[self.taken[name] % len(turns)]
        self.taken[name] += 1
        self.report(fraction, f"measuring: {text}")
        return getattr(self.timer, name)

    def unavailable(self):
        return self.timer.unavailable()

    def device_name(self) -> str:
        return self.timer.device_name()

    def place(self, model, dtype):
        return self._step("place")(model, dtype)

    def place_inputs(self, inputs, dtype):
        return self._step("place_inputs")(inputs, dtype)

    def sparsify(self, model, mode, tokens, filter_fn):
        return self._step("sparsify")(model, mode, tokens, filter_fn)

    def forward_ms(self, model, inputs, mode):
        return self._step("forward_ms")(model, inputs, mode)

    def gpu_busy(self, model, inputs):
        return self._step("gpu_busy")(model, inputs)

    def layer_estimate(self, report, tokens, mode, dtype):
        return self._step("layer_estimate")(report, tokens, mode, dtype)

    def __repr__(self) -> str:
        return f"_Watched({self.timer!r})"


class Measure:
    """A run's pruned model timed whole on the GPU, its point redrawn at the measurement.

    Parameters
    ----------
    state : DashboardState
        Its model, current run, store, busy flag, job and cancel event.
    events : Events
        Status line and progress bar.
    points : Points
        Keeps the measurement and redraws the run's point.
    timer : optional
        The model timer :func:`~explorer.bench.model_speed.measure_model_speed` hands the GPU
        work to (default :class:`~explorer.bench.model_timer.CudaModelTimer`; tests pass a fake).
    gpu : callable, optional
        ``gpu() -> bool``: whether a CUDA GPU is here (default ``torch.cuda.is_available``).

    Examples
    --------
    >>> from explorer.widgets.dashboard_state import DashboardState
    >>> from explorer.widgets.dashboard_status import Events
    >>> Measure(DashboardState(1024, "float16"), Events(), None, gpu=lambda: False)
    Measure(unavailable: no CUDA GPU here)
    """

    def __init__(self, state, events, points, timer=None, gpu: Callable[[], bool] | None = None):
        self.state, self.events, self.points = state, events, points
        self.timer = timer if timer is not None else CudaModelTimer()
        self.gpu = gpu if gpu is not None else torch.cuda.is_available
        #: The latest :class:`~explorer.bench.model_speed.ModelSpeedResult` (None before one).
        self.last = None

    def unavailable(self) -> str | None:
        """Why nothing can be timed here (None with a CUDA GPU)."""
        return None if self.gpu() else NO_GPU

    def after_run(self, run) -> None:
        """Time ``run`` now, in the pruning job that just finished it; nothing without a GPU.

        Parameters
        ----------
        run : Run
            The finished run.
        """
        if self.unavailable() is None:
            self.measure(run)

    def start(self, wait: bool = False) -> threading.Thread | None:
        """Time the run the model holds now (the latest or the loaded one) in a thread.

        Progress goes to the progress bar, the outcome to the status line; the dashboard's
        Cancel stops it. ``wait=True`` blocks. Returns the thread, or None (and a warning)
        without a GPU, while another job runs, or when the model is dense.

        Parameters
        ----------
        wait : bool, optional
            Block until the timing ends.

        Returns
        -------
        threading.Thread or None
        """
        state, say = self.state, self.events.say
        reason = self.unavailable()
        if reason is not None:
            say("warn", f"cannot measure: {reason}")
            return None
        if state.busy:
            say("warn", "a job is in progress; wait for it or cancel it before measuring")
            return None
        run = state.current
        if run is None:
            say("warn", "the model is dense: run a pruning or load a run's point to measure it")
            return None
        return state.start_job(
            self._job, (run,), "explorer-measure", wait, lambda: self.events.emit("busy")
        )

    def _job(self, run) -> None:
        try:
            with hidden_displays():  # a search's own bars: the page has its bar
                self.measure(run)
        finally:
            self.state.busy = False
            self.events.emit("busy")

    def measure(self, run) -> MeasuredSpeed | None:
        """Time ``run``'s pruned model (the model now holds its masks) in this thread.

        Returns the measurement, or None when there is none: the point keeps its estimate and
        the status line says why (cancelled, failed, nothing to time), in one line.

        Parameters
        ----------
        run : Run
            The run whose masks the model holds.

        Returns
        -------
        MeasuredSpeed or None
        """
        config, events = run.config, self.events
        label = config.label
        keeps = "its point keeps the estimate"
        why = _no_speed(config)
        if why is not None:
            events.say("info", f"{label} not measured: {why}; {keeps}")
            return None
        events.report(0.02, f"measuring {label} on the GPU")
        events.say("info", f"measuring {label} on the GPU ({config.tokens} tokens) ...")
        try:
            result = measure_model_speed(
                self.state.bundle.model,
                example_input(self.state.bundle),
                config.tokens,
                DEFAULT_SPEED_MODE,
                dtype=config.dtype,
                filter_fn=lambda module, fqn: isinstance(module, nn.Linear) and fqn in run.masks,
                timer=_Watched(self.timer, self.state.cancel, events.report),
                store=self.state.store,
                config=self._row_config(config),
            )
        except MeasureCancelled:
            events.report(0.0, "measuring cancelled")
            events.say("warn", f"measuring {label} was cancelled; {keeps}")
            return None
        except Exception as exc:  # the page shows every failure as a message, never a traceback
            events.report(0.0, "measuring failed")
            events.say("error", f"measuring {label} failed: {_one_line(exc)}; {keeps}")
            return None
        self.last = result
        if not result.measured:
            events.report(0.0, "not measured")
            events.say("warn", f"{label} not measured: {result.reason}; {keeps}")
            return None
        speed = _measured(result, config.tokens)
        self.points.remember(config, speed)
        self.points.update_run(run)
        events.report(1.0, "measured")
        events.say("ok", f"{label}: speedup {speed.speedup:.2f}x ({speed.label}) on {speed.gpu}")
        return speed

    def _row_config(self, config) -> dict:
        """The configuration a ``model-speed`` row records (what :meth:`Points.own_speed` reads)."""
        layers = "all" if config.layers is None else ",".join(config.layers)
        return {
            "model": str(getattr(self.state.bundle, "name", "")),
            "method": config.method,
            "pattern": config.pattern,
            "layers": layers,
            "dtype": config.dtype,
            "calibration": config.calibration,
        }

    def __repr__(self) -> str:
        reason = self.unavailable()
        if reason is not None:
            return f"Measure(unavailable: {reason})"
        return f"Measure(last={self.last!r})"


def _no_speed(config) -> str | None:
    """Why a run has no sparse speed to time on any GPU (None: it has one)."""
    if config.pattern != "2:4":
        return f"no sparse kernel runs {config.pattern}: only 2:4 runs on sparse tensor cores"
    if config.dtype not in TIMED_DTYPES:
        return f"a model is timed in {' or '.join(TIMED_DTYPES)}, not {config.dtype}"
    if config.quantize:
        return (
            f"the page times 16-bit 2:4 models; 2:4 on {config.quantize} weights is timed by "
            "benchmarks/quantized_models.py on a GPU"
        )
    return None


def _measured(result, tokens: int) -> MeasuredSpeed:
    """The first token count's speed of ``result`` as a :class:`MeasuredSpeed`."""
    speed = result.speeds[0]
    return MeasuredSpeed(
        speedup=speed.speedup,
        mode=speed.mode,
        tokens=tokens,
        gpu=result.gpu or "unknown GPU",
        dense_ms=speed.dense_ms,
        sparse_ms=speed.sparse_ms,
        ceiling=result.ceilings[0],
        dense_gpu_busy=speed.dense_gpu_busy,
        asked=result.mode,
    )


def _one_line(exc: BaseException) -> str:
    """``Type: message``, its first line only, at most 200 characters."""
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    return text if len(text) <= 200 else text[:199] + "…"
