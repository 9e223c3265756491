"""Loading the dashboard's model: drawn from the first-page cache, loaded in a background thread.

:class:`Loader` is the part of :class:`explorer.widgets.Dashboard` that switches models,
draws a model's first page (from :mod:`explorer.widgets.dashboard_cache` when it is cached)
and runs the load and the dense evaluation in a thread held until the page is built.

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

from explorer.dtypes import parse_dtype
from explorer.widgets.dashboard_models import MODEL_SETTINGS, MODELS, load_bundle
from explorer.widgets.dashboard_status import summary
from explorer.widgets.layer_picker import LayerPicker

__all__ = ["Loader"]


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


class Loader:
    """Switching models, drawing their first page, and the background load job.

    Parameters
    ----------
    state : DashboardState
    events : Events
    layer_view : LayerView
        Shows the first layer of a model once it is drawn.
    points : Points
        Gets the dense model's point once it is evaluated.
    method_picker, tradeoff, mask_viewer
        Reset for each new model.
    """

    def __init__(
        self, state, events, layer_view, points, method_picker, tradeoff, mask_viewer
    ) -> None:
        self.state, self.events = state, events
        self.layer_view, self.points = layer_view, points
        self.method_picker, self.tradeoff, self.mask_viewer = method_picker, tradeoff, mask_viewer
        self._job: threading.Thread | None = None
        # With background, the load job waits for the page to be built (release() or wait()).
        self._hold = state.background

    def load(self, model) -> None:
        """Switch to another model (a name, a bundle or a module); errors go to the status.

        With ``background`` and a named model whose first page is cached (see
        :mod:`explorer.widgets.dashboard_cache`), the page is drawn from the cache at once and
        the model loads in a thread; a pruning run waits for it.

        Parameters
        ----------
        model : str or ModelBundle or torch.nn.Module
            A model name, a bundle or a module.
        """
        state, say = self.state, self.events.say
        if state.busy:
            say("warn", "a run is in progress; cancel it before switching models")
            return
        self.wait()
        page = self._cached_page(model) if state.background else None
        if page is not None:
            self._show(_PageBundle.of(page), rows=page.rows)
            say("info", f"{summary(state)}; loading the model for pruning ...")
            self._start_job(self._load_behind, model)
            return
        try:
            bundle = load_bundle(model, state.load_options)
        except (ImportError, ValueError, TypeError, RuntimeError, OSError) as exc:
            say("error", f"could not load {model!r}: {exc}")
            return
        if not self._show(bundle):
            return
        if state.background:
            say("info", f"{summary(state)}; evaluating the dense model ...")
            self._start_job(self._finish_load, model)
        else:
            self.points.add_dense()

    def _show(self, bundle, rows=None) -> bool:
        """Make ``bundle`` current and draw its first page; False when it has nothing to prune."""
        state = self.state
        state.bundle, state.runs, state.current = bundle, {}, None
        self.layer_view.previews.clear()
        self._keep_dense()
        state.layer_picker = LayerPicker(
            bundle.model, parse_dtype(state.dtype), state.tokens, rows=rows
        )
        state.layer_picker.on_select(self.layer_view.select)
        self.method_picker.layer_names = state.layer_picker.names
        self.method_picker.set(layers=None)
        self.tradeoff.clear(bundle.metric, bundle.higher_is_better)
        self.events.emit("model")
        if not state.layer_picker.rows:
            self.mask_viewer.clear("this model has no layers to prune")
            self.events.say(
                "warn",
                f"{bundle.name}: nothing to prune or draw "
                f"({state.layer_picker.reason}); pick another model",
            )
            return False
        state.layer_picker.select(self.layer_view.first_prunable())
        return True

    def _keep_dense(self) -> None:
        """Copy every parameter and buffer of the dense model, for runs to start from."""
        from explorer.pruning.snapshot import Snapshot

        self.state.dense = Snapshot(self.state.bundle.model)

    def _start_job(self, target, *args) -> None:
        self._job = threading.Thread(
            target=_niced, args=(target, *args), daemon=True, name="explorer-load"
        )
        if not self._hold:
            self._job.start()

    def release(self) -> None:
        """Start the held load job: after the page is built, so the two do not contend.

        (Importing the model's libraries in a thread while the page's plotting library is being
        imported made both wait on each other's import locks: 17 s instead of 3 s on two cores.)
        """
        self._hold = False
        job = self._job
        if job is not None and job.ident is None:
            job.start()

    def pending(self) -> bool:
        """Whether the load job has yet to start or finish."""
        job = self._job
        return job is not None and (job.ident is None or job.is_alive())

    def _cached_page(self, model):
        if not isinstance(model, str) or model not in MODELS:
            return None
        from explorer.widgets.dashboard_cache import PageCache

        return PageCache.load(self._page_path(model))

    def _page_path(self, model: str):
        from explorer.widgets.dashboard_cache import cache_path

        cast = MODEL_SETTINGS.get(model, {}).get("cast")
        return cache_path(model, cast, self.state.dtype, self.state.tokens)

    def _load_behind(self, model: str) -> None:
        """Load the real model behind a page drawn from the cache, then evaluate it."""
        state = self.state
        try:
            bundle = load_bundle(model, state.load_options)
        except (ImportError, ValueError, TypeError, RuntimeError, OSError) as exc:
            self.events.say("error", f"could not load {model!r}: {exc}")
            return
        # The cached weights and these are the same: swap the model under the page.
        state.bundle = bundle
        self._keep_dense()
        state.layer_picker.model = bundle.model
        self.points.add_dense()

    def _finish_load(self, model) -> None:
        """Evaluate the dense model, then cache the first page for the next start."""
        self.points.add_dense()
        if not isinstance(model, str) or model not in MODELS:
            return
        from explorer.widgets.dashboard_cache import PageCache

        bundle, rows = self.state.bundle, self.state.layer_picker.rows
        try:
            PageCache.of(
                model,
                bundle.model,  # still dense: a pruning run waits for this job
                rows,
                self.layer_view.prunable(),
                bundle.metric,
                bundle.higher_is_better,
            ).save(self._page_path(model))
        except OSError:
            pass  # a cache that cannot be written is only a slower next start

    def wait(self) -> None:
        """Block until the model has loaded behind its page and the dense model is evaluated.

        Only needed with ``background=True``; a pruning run waits by itself.
        """
        job = self._job
        if job is None:
            return  # nothing to wait for: a hold set for the first page stays until it is built
        self.release()
        if job is not threading.current_thread():
            job.join()

    def __repr__(self) -> str:
        return (
            f"Loader(model={getattr(self.state.bundle, 'name', None)!r}, pending={self.pending()})"
        )


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
