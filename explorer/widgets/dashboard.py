"""The dashboard's logic: one model, its layers, pruning runs in the background, the trade-off.

Plain Python: the state lives here and :class:`explorer.widgets.views.DashboardView` only
mirrors it. Listeners registered with :meth:`Dashboard.on_change` get an event name
(``"status"``, ``"progress"``, ``"busy"``, ``"model"``, ``"layer"``, ``"kernel"``); the
mask viewer, pattern panel and trade-off plot have listeners of their own.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn

from explorer import _html
from explorer.dtypes import dtype_name, parse_dtype
from explorer.models import MODELS as _BUNDLED
from explorer.results.speedup import estimate_speedup, recorded_model_speed
from explorer.results.tradeoff import choose_speed
from explorer.widgets._quiet import hidden_displays
from explorer.widgets.kernel_runner import KernelRunner
from explorer.widgets.layer_picker import LayerPicker
from explorer.widgets.mask_view import MaskViewer
from explorer.widgets.method_picker import MethodConfig, MethodPicker
from explorer.widgets.pattern_panel import PatternPanel
from explorer.widgets.tradeoff import TradeoffPlot, TradeoffPoint

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "MODEL_SETTINGS",
    "Dashboard",
    "Status",
    "prebuild_first_page",
]

#: Models offered in the dashboard's dropdown: the bundled ones, the default first.
MODELS = ("minilm", *(name for name in _BUNDLED if name != "minilm"))
#: The model the served dashboard opens with: MiniLM's 36 encoder Linears in bfloat16. Every
#: width is a multiple of 16, so the doctor accepts each layer for 2:4 once pruned, and at
#: 16384 tokens per call (128 sentences of 128 tokens) its 12 MLP layers are large enough to
#: be fast while its 24 attention projections are not: the trade-off 2:4 is about, at a glance.
DEFAULT_MODEL = "minilm"
#: Loader options that keep each evaluation to seconds on a CPU (smaller evaluation sets).
MODEL_OPTIONS = {"minilm": {"n_eval": 64}, "smollm2": {"n_eval": 4}}
#: Per model: the dtype its weights are cast to after loading (None: as loaded) and the
#: dtype and tokens per call that the doctor and the speedup estimate assume.
MODEL_SETTINGS = {
    "minilm": {"cast": "bfloat16", "dtype": "bfloat16", "tokens": 16384},
}
_DEFAULT_SETTINGS = {"cast": None, "dtype": "float16", "tokens": 1024}


#: The status line's levels.
_LEVELS = ("ok", "info", "warn", "error")


@dataclass(frozen=True)
class Status:
    """A message for the page: ``level`` is one of ok, info, warn, error."""

    level: str
    text: str

    def html(self) -> str:
        """The message as a coloured badge plus text."""
        return f"<div class='status'>{_html.badge(self.level, self.level)} {_html.escape(self.text)}</div>"


@dataclass
class _Run:
    config: MethodConfig
    masks: dict
    score: float
    result: object = None


@dataclass(frozen=True)
class _PageBundle:
    """Stands in for a model's bundle while the model loads: weights, names and metric."""

    name: str
    model: nn.Module
    metric: str
    higher_is_better: bool
    prunable: tuple[str, ...]

    @classmethod
    def of(cls, page) -> _PageBundle:
        return cls(page.name, page.model(), page.metric, page.higher_is_better, page.prunable)

    def filter_fn(self, module: nn.Module, fqn: str) -> bool:
        return fqn in self.prunable


def _load_bundle(model):
    """The bundle of ``model``, cast to its 16-bit dtype where :data:`MODEL_SETTINGS` says so."""
    with hidden_displays():
        bundle = _bundle(model)
    cast = MODEL_SETTINGS.get(model, {}).get("cast") if isinstance(model, str) else None
    if cast is not None:
        bundle.model.to(_torch_dtype(cast))
    return bundle


def _bundle(model):
    if isinstance(model, str):
        from explorer.models import load

        return load(model, **MODEL_OPTIONS.get(model, {}))
    if hasattr(model, "evaluate") and hasattr(model, "model"):
        return model
    if isinstance(model, nn.Module):
        from explorer.models.bundle import ModelBundle

        return ModelBundle.from_module(
            model,
            evaluate=lambda m: {"score": float("nan")},
            name=type(model).__name__,
            metric="score",
        )
    raise TypeError(
        f"model must be a model name ({', '.join(MODELS)}), a ModelBundle or a torch.nn.Module, "
        f"got {type(model).__name__}"
    )


class Dashboard:
    """Everything the dashboard page shows, as plain Python state.

    Parameters
    ----------
    model : str, ModelBundle or torch.nn.Module
        A bundled model's name (see :data:`MODELS`), a bundle, or a plain module (then the
        trade-off plot has no metric to show).
    tokens : int, optional
        Token count the doctor, the kernel runner and the speedup estimate assume (default:
        the model's entry in :data:`MODEL_SETTINGS`, else 1024).
    dtype : str, optional
        Dtype they assume (default: the model's entry in :data:`MODEL_SETTINGS`, else float16).
    store : explorer.store.ResultStore, optional
        Where recorded measurements come from (default: the shipped reference database).
    background : bool
        Draw first, load later: a named model whose first page is cached (see
        :mod:`explorer.widgets.dashboard_cache`) is shown from the cache and loads in a thread,
        and the dense model is evaluated in that thread too. The thread starts once the page is
        built (:meth:`view`) or on :meth:`wait`; a pruning run waits for it. False loads and
        evaluates before the constructor returns.

    Examples
    --------
    >>> dash = Dashboard("digits-mlp")  # doctest: +SKIP
    >>> dash.run(MethodConfig("magnitude", "2:4"), wait=True)  # doctest: +SKIP
    >>> [p.label for p in dash.tradeoff.points]  # doctest: +SKIP
    ['dense', 'magnitude 2:4 all float16']
    """

    def __init__(
        self,
        model=DEFAULT_MODEL,
        tokens: int | None = None,
        dtype: str | None = None,
        store=None,
        background: bool = False,
    ) -> None:
        settings = (
            {**_DEFAULT_SETTINGS, **MODEL_SETTINGS.get(model, {})}
            if isinstance(model, str)
            else dict(_DEFAULT_SETTINGS)
        )
        tokens = settings["tokens"] if tokens is None else tokens
        # an unknown name is an error naming it, never a silent float32
        dtype = dtype_name(parse_dtype(settings["dtype"] if dtype is None else dtype))
        self.tokens, self.dtype, self.store = tokens, dtype, store
        self.background = background
        self.models = MODELS
        # Single weights at a readable zoom first: 32 rows x 64 columns, groups of 4 striped.
        self.mask_viewer = MaskViewer(window_shape=(32, 64), start="zoom")
        self.pattern_panel = PatternPanel()
        self.kernel_runner = KernelRunner(store)
        self.method_picker = MethodPicker(MethodConfig(dtype=dtype, tokens=tokens))
        self.tradeoff = TradeoffPlot(
            speedup_label=f"speedup over dense on a GPU ({tokens} tokens, {dtype})"
        )
        self._previews: dict[tuple[str, str], torch.Tensor] = {}
        self._dense_job: threading.Thread | None = None
        # With background, the load job waits for the page to be built (view() or wait()).
        self._hold = background
        self.tradeoff.on_click(self.load_point)
        self.layer_picker: LayerPicker | None = None
        self.bundle = None
        self.status = Status("info", "starting")
        self.progress = (0.0, "")
        self.busy = False
        self.runs: dict[str, _Run] = {}
        self.current: _Run | None = None
        self._dense: dict[str, torch.Tensor] = {}
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self._listeners: list[Callable[[str], None]] = []
        self.last_file = None  # what Save or Export wrote last (a WrittenFile)
        self.load(model)

    # -- events ---------------------------------------------------------------------------
    def on_change(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(event)`` after each change."""
        self._listeners.append(callback)

    def _emit(self, event: str) -> None:
        for callback in list(self._listeners):
            callback(event)

    def say(self, level: str, text: str) -> None:
        """Show a message in the status line (``level``: ok, info, warn or error).

        Examples
        --------
        >>> dash = Dashboard(torch.nn.Linear(16, 16))
        >>> dash.say("info", "loading ...")
        >>> dash.status
        Status(level='info', text='loading ...')
        """
        if level not in _LEVELS:
            raise ValueError(
                f"status level {level!r} unknown; expected one of {', '.join(_LEVELS)}"
            )
        self.status = Status(level, text)
        self._emit("status")

    def _progress(self, fraction: float, text: str) -> None:
        self.progress = (fraction, text)
        self._emit("progress")

    # -- model ----------------------------------------------------------------------------
    @property
    def model(self) -> nn.Module | None:
        """The current model (pruned by the latest run, or dense)."""
        return None if self.bundle is None else self.bundle.model

    def load(self, model) -> None:
        """Switch to another model (a name, a bundle or a module); errors go to the status.

        With ``background`` and a named model whose first page is cached (see
        :mod:`explorer.widgets.dashboard_cache`), the page is drawn from the cache at once and
        the model loads in a thread; a pruning run waits for it.
        """
        if self.busy:
            self.say("warn", "a run is in progress; cancel it before switching models")
            return
        self._wait_for_dense()
        page = self._cached_page(model) if self.background else None
        if page is not None:
            self._show(_PageBundle.of(page), rows=page.rows)
            self.say("info", f"{self._summary()}; loading the model for pruning ...")
            self._start_job(self._load_behind, model)
            return
        try:
            bundle = _load_bundle(model)
        except (ImportError, ValueError, TypeError, RuntimeError, OSError) as exc:
            self.say("error", f"could not load {model!r}: {exc}")
            return
        if not self._show(bundle):
            return
        if self.background:
            self.say("info", f"{self._summary()}; evaluating the dense model ...")
            self._start_job(self._finish_load, model)
        else:
            self._add_dense_point()

    def _show(self, bundle, rows=None) -> bool:
        """Make ``bundle`` current and draw its first page; False when it has nothing to prune."""
        self.bundle, self.runs, self.current = bundle, {}, None
        self._previews = {}
        self._keep_dense()
        self.layer_picker = LayerPicker(
            bundle.model, _torch_dtype(self.dtype), self.tokens, rows=rows
        )
        self.layer_picker.on_select(self.select_layer)
        self.method_picker.layer_names = self.layer_picker.names
        self.method_picker.set(layers=None)
        self.tradeoff.clear(bundle.metric, bundle.higher_is_better)
        self._emit("model")
        if not self.layer_picker.rows:
            self.mask_viewer.clear("this model has no layers to prune")
            self.say(
                "warn",
                f"{bundle.name}: nothing to prune or draw "
                f"({self.layer_picker.reason}); pick another model",
            )
            return False
        self.layer_picker.select(self._first_prunable())
        return True

    def _keep_dense(self) -> None:
        self._dense = {
            name: module.weight.detach().clone()
            for name, module in self.bundle.model.named_modules()
            if isinstance(module, nn.Linear)
        }

    def _start_job(self, target, *args) -> None:
        self._dense_job = threading.Thread(
            target=_niced, args=(target, *args), daemon=True, name="explorer-load"
        )
        if not self._hold:
            self._dense_job.start()

    def _release(self) -> None:
        """Start the held load job: after the page is built, so the two do not contend.

        (Importing the model's libraries in a thread while the page's plotting library is being
        imported made both wait on each other's import locks: 17 s instead of 3 s on two cores.)
        """
        self._hold = False
        job = self._dense_job
        if job is not None and job.ident is None:
            job.start()

    def _job_pending(self) -> bool:
        job = self._dense_job
        return job is not None and (job.ident is None or job.is_alive())

    def _cached_page(self, model):
        if not isinstance(model, str) or model not in MODELS:
            return None
        from explorer.widgets.dashboard_cache import PageCache

        return PageCache.load(self._page_path(model))

    def _page_path(self, model: str):
        from explorer.widgets.dashboard_cache import cache_path

        cast = MODEL_SETTINGS.get(model, {}).get("cast")
        return cache_path(model, cast, self.dtype, self.tokens)

    def _load_behind(self, model: str) -> None:
        """Load the real model behind a page drawn from the cache, then evaluate it."""
        try:
            bundle = _load_bundle(model)
        except (ImportError, ValueError, TypeError, RuntimeError, OSError) as exc:
            self.say("error", f"could not load {model!r}: {exc}")
            return
        # The cached weights and these are the same: swap the model under the page.
        self.bundle = bundle
        self._keep_dense()
        self.layer_picker.model = bundle.model
        self._add_dense_point()

    def _finish_load(self, model) -> None:
        """Evaluate the dense model, then cache the first page for the next start."""
        self._add_dense_point()
        if not isinstance(model, str) or model not in MODELS:
            return
        from explorer.widgets.dashboard_cache import PageCache

        bundle = self.bundle
        prunable = [
            r.name for r in self.layer_picker.rows if _selected(bundle.filter_fn, bundle, r)
        ]
        try:
            PageCache.of(
                model,
                bundle.model,  # still dense: a pruning run waits for this job
                self.layer_picker.rows,
                prunable,
                bundle.metric,
                bundle.higher_is_better,
            ).save(self._page_path(model))
        except OSError:
            pass  # a cache that cannot be written is only a slower next start

    def _summary(self) -> str:
        counts = self.layer_picker.counts()
        verdicts = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
        return (
            f"{self.bundle.name}: {len(self.layer_picker.rows)} layers "
            f"({verdicts} once 2:4 at {self.tokens} tokens, {self.dtype})"
        )

    def _first_prunable(self) -> str:
        """The first layer the model's filter prunes that the doctor expects to be fast at 2:4."""
        rows = self.layer_picker.rows
        filter_fn = getattr(self.bundle, "filter_fn", None)
        prunable = [r for r in rows if filter_fn is None or _selected(filter_fn, self.bundle, r)]
        fast = [r for r in prunable if r.verdict_24 == "fast"]
        return (fast or prunable or rows)[0].name

    def _add_dense_point(self) -> None:
        try:
            score = float(self.bundle.evaluate(self.bundle.model)[self.bundle.metric])
        except (ValueError, RuntimeError, TypeError) as exc:
            self.say("warn", f"could not evaluate the dense model: {exc}")
            return
        dense = MethodConfig("dense", "2:4", 0, None, self.dtype, self.tokens)
        self.tradeoff.add(
            TradeoffPoint(
                "dense",
                1.0,
                score,
                dense.to_json(),
                {"model": self.bundle.name},
                speed_source="baseline",
                speed_from="by definition",
            )
        )
        self.say("ok", f"{self._summary()}; dense {self.bundle.metric} {score:.4g}")

    def wait(self) -> None:
        """Block until the model has loaded behind its page and the dense model is evaluated.

        Only needed with ``background=True``; a pruning run waits by itself.
        """
        self._wait_for_dense()

    def _wait_for_dense(self) -> None:
        self._release()
        job = self._dense_job
        if job is not None and job is not threading.current_thread():
            job.join()

    # -- layer ----------------------------------------------------------------------------
    def select_layer(self, name: str | None) -> None:
        """Show layer ``name`` in the mask viewer and the pattern panel.

        After a run the viewer shows the run's mask. Before one it shows what magnitude
        pruning to the picked N:M pattern would keep (computed once per layer and cached),
        since the dense weight keeps everything and every group breaks the pattern.
        """
        if name is None:
            self.mask_viewer.clear()
            return
        module = self.bundle.model.get_submodule(name)
        weight = module.weight.detach()
        mask = self.current.masks.get(name) if self.current else None
        pattern = self.current.config.pattern if self.current else self.method_picker.config.pattern
        # Groups are marked against the run's N:M pattern, or against 2:4 for other patterns.
        marked = pattern if _is_nm(pattern) else "2:4"
        if mask is not None:
            label = f"{name} ({self.current.config.method} {pattern})"
        elif self.current is None and (preview := self._preview(name, weight, marked)) is not None:
            mask, label = preview, f"{name}: magnitude {marked} preview"
        else:
            mask, label = weight != 0, f"{name} (dense)"
        try:
            self.mask_viewer.set_mask(mask, label, marked)
        except ValueError as exc:
            self.mask_viewer.clear(str(exc))
        self.pattern_panel.update(weight, pattern, f"{name} now")
        self._emit("layer")

    def _preview(self, name: str, weight: torch.Tensor, pattern: str) -> torch.Tensor | None:
        key = (name, pattern)
        if key not in self._previews:
            from explorer.masks import make_mask

            try:
                self._previews[key] = make_mask(weight.float(), pattern)
            except (ValueError, TypeError):  # a layer the pattern cannot divide: show it dense
                return None
        return self._previews[key]

    @property
    def selected(self) -> str | None:
        """Name of the selected layer."""
        return None if self.layer_picker is None else self.layer_picker.selected

    def run_kernel(self, tokens: int | None = None, dtype: str | None = None):
        """Run the kernel runner on the selected layer; the result goes to ``kernel_runner.result``."""
        if self.selected is None:
            self.say("warn", "select a layer first")
            return None
        weight = self.bundle.model.get_submodule(self.selected).weight
        try:
            result = self.kernel_runner.run(
                weight, self.selected, tokens or self.tokens, dtype or self.dtype
            )
        except ValueError as exc:
            self.say("error", str(exc))
            return None
        self._emit("kernel")
        self.say("ok" if result.mode != "unavailable" else "warn", result.message)
        return result

    # -- pruning --------------------------------------------------------------------------
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
        with torch.no_grad():
            for name, weight in self._dense.items():
                self.bundle.model.get_submodule(name).weight.copy_(weight)

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
            if config.calibration and config.method not in ("random", "magnitude", "weightnorm"):
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
            estimate = estimate_speedup(
                {r.name: r.shape for r in self.layer_picker.rows},
                masks,
                config.pattern,
                config.tokens,
                config.dtype,
                {r.name: r.verdict for r in self.layer_picker.rows},
                self.store,
            )
            speed = self.speed_of(config, estimate)
            run = _Run(config, masks, score, result)
            self.runs[config.label] = run
            self.current = run
            details = {
                **speed.details,
                "pruned layers": len(masks),
                "pruning took": f"{time.perf_counter() - start:.1f} s",
            }
            self.tradeoff.add(
                TradeoffPoint(
                    config.label,
                    speed.speedup,
                    score,
                    config.to_json(),
                    details,
                    speed_source=speed.source,
                    speed_from=speed.speed_from,
                    model=str(self.bundle.name),
                    method=config.method,
                    pattern=config.pattern,
                    metric=self.bundle.metric,
                    tokens=config.tokens,
                    higher_is_better=self.bundle.higher_is_better,
                    dtype=config.dtype,
                )
            )
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
            self._restore_dense()
            self._progress(0.0, "cancelled")
            self.say("warn", "the run was cancelled; the model is dense again")
            self.select_layer(self.selected)
        except Exception as exc:  # the page shows every failure as a message, never a traceback
            self._restore_dense()
            self._progress(0.0, "failed")
            self.say("error", f"{config.label} failed: {type(exc).__name__}: {exc}")
            self.select_layer(self.selected)
        finally:
            self.busy = False
            self._emit("busy")

    def speed_of(self, config: MethodConfig, estimate=None):
        """Where a run's speed-up comes from (:func:`explorer.results.tradeoff.choose_speed`).

        A whole-model measurement of this model at the run's dtype and token count (the store's
        own rows first, then the reference database's) when every prunable layer was pruned
        2:4; else ``estimate`` when it rests on measured layers; else no data.
        """
        name = getattr(self.bundle, "name", None)
        measured = (
            recorded_model_speed(str(name), config.dtype, config.tokens, self.store)
            if name is not None
            else []
        )
        return choose_speed(measured, estimate, config.pattern, whole_model=config.layers is None)

    def _check_cancel(self) -> None:
        if self._cancel.is_set():
            from explorer.pruning import PruningCancelled

            raise PruningCancelled("cancelled")

    def load_point(self, point: TradeoffPoint) -> None:
        """Load the configuration of a trade-off point: its settings and its masks."""
        try:
            config = MethodConfig.from_json(point.config)
        except (ValueError, TypeError) as exc:
            self.say("error", f"cannot load {point.label}: {exc}")
            return
        if self.busy:
            self.say("warn", "a run is in progress; wait for it before loading another")
            return
        self._restore_dense()
        run = self.runs.get(point.label)
        if config.method != "dense":
            self.method_picker.config = replace(config)
        if run is not None:
            with torch.no_grad():
                for name, mask in run.masks.items():
                    self.bundle.model.get_submodule(name).weight.mul_(
                        mask.to(torch.float32).to(
                            self.bundle.model.get_submodule(name).weight.dtype
                        )
                    )
        self.current = run
        self.layer_picker.refresh()
        self._emit("model")
        self.select_layer(self.selected)
        note = (
            ""
            if config.method in ("magnitude", "random", "dense")
            else (
                " (masks applied to the dense weights; run it again for the method's weight updates)"
            )
        )
        self.say("ok", f"loaded {point.label}{note}")

    # -- files ----------------------------------------------------------------------------
    def save(self, path=None, wait: bool = False) -> threading.Thread | None:
        """Save the current model as a compressed 2:4 checkpoint (in a thread).

        The status line then says where, and the file's size against the dense size;
        :attr:`last_file` holds the :class:`~explorer.widgets.checkpoint_files.WrittenFile`.
        """
        return self._file_job("save", path, wait)

    def export(self, path=None, wait: bool = False) -> threading.Thread | None:
        """Export the current model to ONNX and check it for TensorRT (in a thread)."""
        return self._file_job("export", path, wait)

    def _file_job(self, kind: str, path, wait: bool) -> threading.Thread | None:
        if self.busy:
            self.say("warn", "a run is in progress; wait for it before writing files")
            return None
        if self.bundle is None:
            self.say("warn", "there is no model loaded")
            return None
        self.busy = True
        self._cancel.clear()
        self._emit("busy")
        self._thread = threading.Thread(
            target=self._write_file, args=(kind, path), daemon=True, name=f"explorer-{kind}"
        )
        self._thread.start()
        if wait:
            self._thread.join()
        return self._thread

    def _write_file(self, kind: str, path) -> None:
        from explorer.widgets.checkpoint_files import write_file

        self._wait_for_dense()  # the model may still be loading behind a cached page
        run = self.current
        label = run.config.label if run else "dense"
        try:
            self._progress(0.3, "saving" if kind == "save" else "exporting to ONNX")
            with hidden_displays():
                written = write_file(
                    self.bundle,
                    kind,
                    path,
                    result=run.result if run else None,
                    label=label,
                    cancel=self._cancel,
                    dtype=self.dtype,
                    tokens=self.tokens,
                )
            self.last_file = written
            self._progress(1.0, "done")
            self.say("ok", written.message)
        except Exception as exc:  # the page shows every failure as a message, never a traceback
            self._progress(0.0, "failed")
            self.say("error", f"{kind} failed: {type(exc).__name__}: {exc}")
        finally:
            self.busy = False
            self._emit("busy")

    # -- display --------------------------------------------------------------------------
    def view(self):
        """The dashboard as ipywidgets (built lazily), laid out for a 1400 x 900 window."""
        from explorer.widgets.dashboard_page import DashboardPage

        widget = DashboardPage(self).widget
        self._release()
        return widget

    def _repr_mimebundle_(self, **kwargs):
        return self.view()._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        name = getattr(self.bundle, "name", None)
        return (
            f"Dashboard({name!r}, layer={self.selected!r}, {len(self.tradeoff.points)} points, "
            f"status={self.status.text!r})"
        )


def prebuild_first_page(model: str = DEFAULT_MODEL):
    """Build the cached first page of ``model`` now, unless it is cached already.

    The served dashboard (``Dashboard(model, background=True)``) draws from this cache; without
    it the first start loads and evaluates the model before drawing (25-42 s on a busy 2-core
    CPU instead of about 13-20 s). ``./dev dashboard`` and Binder's ``postBuild`` call this
    before serving. Returns the cache file's path.

    Raises
    ------
    ValueError
        For a model name the dashboard does not offer.
    RuntimeError
        When the model cannot be loaded or the file cannot be written (the message says why).

    Examples
    --------
    >>> prebuild_first_page("digits-mlp").name.startswith("page-digits-mlp-")  # doctest: +SKIP
    True
    """
    from explorer.widgets.dashboard_cache import PageCache, cache_path

    if model not in MODELS:
        raise ValueError(
            f"model {model!r} is not one the dashboard offers; expected one of {', '.join(MODELS)}"
        )
    settings = {**_DEFAULT_SETTINGS, **MODEL_SETTINGS.get(model, {})}
    path = cache_path(model, settings["cast"], settings["dtype"], settings["tokens"])
    if PageCache.load(path) is not None:
        return path
    dash = Dashboard(model, background=True)
    dash.wait()  # loads, evaluates the dense model and writes the page
    if PageCache.load(path) is None:
        raise RuntimeError(
            f"could not cache the first page of {model!r} at {path}: {dash.status.text}"
        )
    return path


def _torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of ``name``; an unknown name raises a ValueError that names it."""
    return parse_dtype(name)


def _niced(target, *args) -> None:
    """Run ``target`` in this thread at the lowest CPU priority (where the OS allows it).

    The page is being drawn meanwhile: the browser and the kernel's main thread, which answers
    it, get the cores first.
    """
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):  # not Linux, or not allowed: run at the usual priority
        pass
    target(*args)


def _is_nm(pattern: str) -> bool:
    n, _, m = str(pattern).partition(":")
    return n.isdigit() and m.isdigit()


def _selected(filter_fn, bundle, row) -> bool:
    try:
        return bool(filter_fn(bundle.model.get_submodule(row.name), row.name))
    except (AttributeError, TypeError, ValueError):
        return True
