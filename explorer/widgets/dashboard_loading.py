"""Loading the dashboard's model: drawn from the first-page cache, loaded in a background thread.

:class:`_Loading` is the part of :class:`explorer.widgets.Dashboard` that switches models,
draws a model's first page (from :mod:`explorer.widgets.dashboard_cache` when it is cached)
and runs the load and the dense evaluation in a thread held until the page is built.
:func:`prebuild_first_page` fills that cache before the dashboard is served.

Examples
--------
>>> import torch
>>> from explorer.widgets import Dashboard
>>> dash = Dashboard(torch.nn.Sequential(torch.nn.Linear(16, 16)))
>>> dash.selected, dash.status.level
('0', 'ok')
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from torch import nn

from explorer.widgets.dashboard_models import (
    DEFAULT_MODEL,
    MODEL_SETTINGS,
    MODELS,
    _load_bundle,
    _torch_dtype,
    settings_for,
)
from explorer.widgets.layer_picker import LayerPicker

__all__ = ["prebuild_first_page"]


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


class _Loading:
    """Switching models, drawing their first page, and the background load job."""

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
            bundle = _load_bundle(model, self.load_options)
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
        """Copy every parameter and buffer of the dense model, for runs to start from."""
        from explorer.pruning.snapshot import Snapshot

        self._dense = Snapshot(self.bundle.model)

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
            bundle = _load_bundle(model, self.load_options)
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

    def _first_prunable(self) -> str:
        """The first layer the model's filter prunes that the doctor expects to be fast at 2:4."""
        rows = self.layer_picker.rows
        filter_fn = getattr(self.bundle, "filter_fn", None)
        prunable = [r for r in rows if filter_fn is None or _selected(filter_fn, self.bundle, r)]
        fast = [r for r in prunable if r.verdict_24 == "fast"]
        return (fast or prunable or rows)[0].name

    def wait(self) -> None:
        """Block until the model has loaded behind its page and the dense model is evaluated.

        Only needed with ``background=True``; a pruning run waits by itself.
        """
        self._wait_for_dense()

    def _wait_for_dense(self) -> None:
        job = self._dense_job
        if job is None:
            return  # nothing to wait for: a hold set for the first page stays until it is built
        self._release()
        if job is not None and job is not threading.current_thread():
            job.join()


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
    settings = settings_for(model)
    path = cache_path(model, settings["cast"], settings["dtype"], settings["tokens"])
    if PageCache.load(path) is not None:
        return path
    from explorer.widgets.dashboard import Dashboard

    dash = Dashboard(model, background=True)
    dash.wait()  # loads, evaluates the dense model and writes the page
    if PageCache.load(path) is None:
        raise RuntimeError(
            f"could not cache the first page of {model!r} at {path}: {dash.status.text}"
        )
    return path


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


def _selected(filter_fn, bundle, row) -> bool:
    try:
        return bool(filter_fn(bundle.model.get_submodule(row.name), row.name))
    except (AttributeError, TypeError, ValueError):
        return True
