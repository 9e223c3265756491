"""The dashboard's logic: one model, its layers, pruning runs in the background, the trade-off.

Plain Python: the state lives here and :class:`explorer.widgets.views.DashboardView` only
mirrors it. Listeners registered with :meth:`Dashboard.on_change` get an event name
(``"status"``, ``"progress"``, ``"busy"``, ``"model"``, ``"layer"``, ``"kernel"``); the
mask viewer, pattern panel and trade-off plot have listeners of their own.

:class:`Dashboard` is put together from one part per concern, each in its own module:
:mod:`~explorer.widgets.dashboard_status` (status line, events),
:mod:`~explorer.widgets.dashboard_models` (the models offered and their settings),
:mod:`~explorer.widgets.dashboard_loading` (switching models, the background load,
:func:`prebuild_first_page`), :mod:`~explorer.widgets.dashboard_points` (trade-off points and
their speed), :mod:`~explorer.widgets.dashboard_pruning` (pruning runs) and
:mod:`~explorer.widgets.dashboard_files` (Save and Export). This module keeps the layer view,
the kernel runner and the display.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from explorer.dtypes import dtype_name, parse_dtype
from explorer.widgets.dashboard_files import _Files
from explorer.widgets.dashboard_loading import _Loading, prebuild_first_page
from explorer.widgets.dashboard_models import (
    DEFAULT_MODEL,
    MODEL_SETTINGS,
    MODELS,
    settings_for,
)
from explorer.widgets.dashboard_points import _Points
from explorer.widgets.dashboard_pruning import _Pruning, _Run
from explorer.widgets.dashboard_status import Status, _Events
from explorer.widgets.kernel_runner import KernelRunner
from explorer.widgets.layer_picker import LayerPicker
from explorer.widgets.mask_view import MaskViewer
from explorer.widgets.method_picker import MethodConfig, MethodPicker
from explorer.widgets.pattern_panel import PatternPanel
from explorer.widgets.tradeoff import TradeoffPlot

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "MODEL_SETTINGS",
    "Dashboard",
    "Status",
    "prebuild_first_page",
]


class Dashboard(_Events, _Loading, _Points, _Pruning, _Files):
    """Everything the dashboard page shows, as plain Python state.

    Parameters
    ----------
    model : str, ModelBundle or torch.nn.Module
        A bundled model's name (see :data:`MODELS`), the path of a Hugging Face
        ``save_pretrained`` folder (see :func:`explorer.models.from_pretrained`; give ``text``
        for a causal LM), a bundle, or a plain module (then the trade-off plot has no metric
        to show).
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
    text : str or Path, optional
        For a checkpoint folder: the text file its perplexity and calibration windows come
        from.

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
        text=None,
    ) -> None:
        settings = settings_for(model)
        self.load_options = {} if text is None else {"text": str(text)}
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
        self._dense = None  # a Snapshot of the dense model, taken when it loads
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self._listeners: list[Callable[[str], None]] = []
        self.last_file = None  # what Save or Export wrote last (a WrittenFile)
        self.load(model)

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
        marked = str(pattern) if _is_nm(pattern) else "2:4"
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


def _is_nm(pattern: str) -> bool:
    """Whether ``pattern`` parses as an N:M pattern (anything unparsable is not one)."""
    from explorer.patterns import Pattern

    try:
        return Pattern.parse(pattern).is_nm
    except (ValueError, TypeError):
        return False
