"""The dashboard's logic: one model, its layers, pruning runs in the background, the trade-off.

Plain Python: the state lives here and :class:`explorer.widgets.views.DashboardView` only
mirrors it. Listeners registered with :meth:`Dashboard.on_change` get an event name
(``"status"``, ``"progress"``, ``"busy"``, ``"model"``, ``"layer"``, ``"kernel"``); the
mask viewer, pattern panel and trade-off plot have listeners of their own.

:class:`Dashboard` wires together one part per concern, each in its own module, all sharing
one :class:`~explorer.widgets.dashboard_state.DashboardState` and taking the parts they use as
constructor arguments: :mod:`~explorer.widgets.dashboard_status` (status line, events),
:mod:`~explorer.widgets.dashboard_layer` (the selected layer's mask and pattern panel),
:mod:`~explorer.widgets.dashboard_points` (trade-off points and their speed),
:mod:`~explorer.widgets.dashboard_loading` (switching models, the background load),
:mod:`~explorer.widgets.dashboard_pruning` (pruning runs),
:mod:`~explorer.widgets.dashboard_measure` (a run timed whole on a GPU) and
:mod:`~explorer.widgets.dashboard_files` (Save and Export);
:mod:`~explorer.widgets.dashboard_models` lists the models offered. This module keeps the
kernel runner, the display and :func:`prebuild_first_page`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from torch import nn

from explorer.dtypes import dtype_name, parse_dtype
from explorer.widgets.dashboard_files import Files
from explorer.widgets.dashboard_layer import LayerView
from explorer.widgets.dashboard_loading import Loader
from explorer.widgets.dashboard_measure import Measure
from explorer.widgets.dashboard_models import (
    DEFAULT_MODEL,
    MODELS,
    settings_for,
)
from explorer.widgets.dashboard_points import Points
from explorer.widgets.dashboard_pruning import Pruning
from explorer.widgets.dashboard_state import DashboardState
from explorer.widgets.dashboard_status import Events
from explorer.widgets.kernel_runner import KernelRunner
from explorer.widgets.mask_view import MaskViewer
from explorer.widgets.method_picker import MethodConfig, MethodPicker
from explorer.widgets.pattern_panel import PatternPanel
from explorer.widgets.tradeoff import TradeoffPlot

__all__ = ["PAGE_ENV", "Dashboard", "page_options", "prebuild_first_page"]

#: What the served page (``notebooks/dashboard.ipynb``) reads from the environment Voila
#: starts in: the model (a bundled name or a ``save_pretrained`` folder), the text file of a
#: checkpoint folder, and a results file whose measurements (a sweep's ``--db``) the page shows.
PAGE_ENV = {
    "model": "SPARSITY_EXPLORER_MODEL",
    "text": "SPARSITY_EXPLORER_TEXT",
    "db": "SPARSITY_EXPLORER_DB",
}


class Dashboard:
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
    store : explorer.results.store.ResultStore, optional
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

    Attributes
    ----------
    measure : Measure
        Times a run's pruned model on the GPU (after each run there, and on its button);
        its ``timer`` and ``gpu`` check are the CUDA ones unless replaced.

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
        tokens = settings["tokens"] if tokens is None else tokens
        # an unknown name is an error naming it, never a silent float32
        dtype = dtype_name(parse_dtype(settings["dtype"] if dtype is None else dtype))
        self.state = DashboardState(
            tokens, dtype, store, background, {} if text is None else {"text": str(text)}
        )
        self.models = MODELS
        # Single weights at a readable zoom first: 32 rows x 64 columns, groups of 4 striped.
        self.mask_viewer = MaskViewer(window_shape=(32, 64), start="zoom")
        self.pattern_panel = PatternPanel()
        self.kernel_runner = KernelRunner(store)
        self.method_picker = MethodPicker(MethodConfig(dtype=dtype, tokens=tokens))
        self.tradeoff = TradeoffPlot(
            speedup_label=f"speedup over dense on a GPU ({tokens} tokens, {dtype})"
        )
        # The parts, each given the parts it uses.
        state, self.events = self.state, Events()
        self.layer_view = LayerView(
            state, self.events, self.mask_viewer, self.pattern_panel, self.method_picker
        )
        self.points = Points(state, self.events, self.tradeoff, self.layer_view, self.method_picker)
        self.loader = Loader(
            state,
            self.events,
            self.layer_view,
            self.points,
            self.method_picker,
            self.tradeoff,
            self.mask_viewer,
        )
        # On a GPU each run is timed whole in its job, and Measure times a loaded run again.
        self.measure = Measure(state, self.events, self.points)
        self.pruning = Pruning(
            state,
            self.events,
            self.loader,
            self.points,
            self.layer_view,
            self.method_picker,
            after_run=self.measure.after_run,
        )
        self.files = Files(state, self.events, self.loader)
        self.tradeoff.on_click(self.load_point)
        self.load(model)

    # -- the shared state, read-only ------------------------------------------------------
    tokens = property(lambda self: self.state.tokens, doc="Token count the estimates assume.")
    dtype = property(lambda self: self.state.dtype, doc="Dtype the estimates assume.")
    store = property(lambda self: self.state.store, doc="Where measurements come from.")
    background = property(lambda self: self.state.background, doc="Whether loads run behind.")
    load_options = property(lambda self: self.state.load_options, doc="More loader options.")
    bundle = property(lambda self: self.state.bundle, doc="The current model's bundle.")
    layer_picker = property(lambda self: self.state.layer_picker, doc="The layer table.")
    runs = property(lambda self: self.state.runs, doc="Finished runs by label.")
    current = property(lambda self: self.state.current, doc="The run the model holds now.")
    busy = property(lambda self: self.state.busy, doc="Whether a job is under way.")
    job = property(lambda self: self.state.job, doc="The latest run, save or export thread.")
    last_file = property(lambda self: self.state.last_file, doc="What Save or Export wrote.")
    status = property(lambda self: self.events.status, doc="The status line's message.")
    progress = property(lambda self: self.events.progress, doc="(fraction, text) of the bar.")

    @property
    def model(self) -> nn.Module | None:
        """The current model (pruned by the latest run, or dense)."""
        return None if self.state.bundle is None else self.state.bundle.model

    @property
    def selected(self) -> str | None:
        """Name of the selected layer."""
        return self.state.selected

    @property
    def measured_on(self) -> str:
        """What the metric is measured on, as the model's bundle says ("" when it does not).

        Examples
        --------
        >>> Dashboard(nn.Linear(16, 16)).measured_on
        'score measured on user model'
        """
        bundle = self.state.bundle
        text = getattr(bundle, "description", "")
        return f"{bundle.metric} measured on {text}" if text else ""

    # -- what the parts do ----------------------------------------------------------------
    def on_change(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(event)`` after each change.

        Parameters
        ----------
        callback : callable
            Called with the event's name (``"model"``, ``"status"``, ...).
        """
        self.events.on_change(callback)

    def say(self, level: str, text: str) -> None:
        """Show a message in the status line (see :meth:`Events.say`).

        Parameters
        ----------
        level : str
            ``"ok"``, ``"info"``, ``"warn"`` or ``"error"``.
        text : str
            The message.
        """
        self.events.say(level, text)

    def load(self, model) -> None:
        """Switch to another model (see :meth:`Loader.load`); errors go to the status.

        Parameters
        ----------
        model : str or ModelBundle or torch.nn.Module
            A model name, a bundle or a module.
        """
        self.loader.load(model)

    def wait(self) -> None:
        """Block until a model loading behind its page has loaded and been evaluated."""
        self.loader.wait()

    def select_layer(self, name: str | None) -> None:
        """Show layer ``name`` in the mask viewer and the pattern panel.

        Parameters
        ----------
        name : str or None
            The layer's name; None clears the selection.
        """
        self.layer_view.select(name)

    def layer_set(self, choice: str, pattern: str = "") -> tuple[str, ...] | None:
        """The layers the layer-set ``choice`` prunes (see :meth:`LayerView.layer_set`).

        Parameters
        ----------
        choice : str
            ``"all"``, ``"one"``, ``"fast"``, ``"mlp"`` or ``"pattern"``.
        pattern : str, optional
            The globs on layer names, for ``"pattern"``.

        Returns
        -------
        tuple of str or None
            The layer names; None for the model's own filter.
        """
        return self.layer_view.layer_set(choice, pattern)

    def run(
        self, config: MethodConfig | None = None, wait: bool = False
    ) -> threading.Thread | None:
        """Prune with ``config`` (default: the method picker's) in a thread; see :class:`Pruning`.

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
        return self.pruning.run(config, wait)

    def cancel(self) -> None:
        """Ask the running job to stop (it restores the dense model and says so)."""
        self.pruning.cancel()

    def speed_of(self, config: MethodConfig, estimate=None):
        """Where a run's speed-up comes from (see :meth:`Points.speed_of`).

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
        return self.points.speed_of(config, estimate)

    def load_point(self, point) -> None:
        """Load the configuration of a trade-off point: its settings and its masks.

        Parameters
        ----------
        point : TradeoffPoint
            A point of the trade-off plot.
        """
        self.points.load_point(point)

    def save(self, path=None, wait: bool = False) -> threading.Thread | None:
        """Save the current model as a compressed 2:4 checkpoint (in a thread); see :class:`Files`.

        Parameters
        ----------
        path : str or pathlib.Path, optional
            The file; None for a default file in the cache folder.
        wait : bool, optional
            Block until the file is written.

        Returns
        -------
        threading.Thread or None
            The writing thread; None when a job is running or no model is loaded.
        """
        return self.files.save(path, wait)

    def export(self, path=None, wait: bool = False) -> threading.Thread | None:
        """Export the current model to ONNX and check it for TensorRT (in a thread).

        Parameters
        ----------
        path : str or pathlib.Path, optional
            The file; None for a default file in the cache folder.
        wait : bool, optional
            Block until the file is written.

        Returns
        -------
        threading.Thread or None
            The writing thread; None when a job is running or no model is loaded.
        """
        return self.files.export(path, wait)

    def run_kernel(self, tokens: int | None = None, dtype: str | None = None):
        """Run the kernel runner on the selected layer; the result goes to ``kernel_runner.result``.

        Parameters
        ----------
        tokens : int or None, optional
            Rows of input; None for the page's token count.
        dtype : str or None, optional
            The dtype; None for the page's.

        Returns
        -------
        KernelResult or None
            None when no layer is selected or the run was refused (the status says why).
        """
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
        self.events.emit("kernel")
        self.say("ok" if result.mode != "unavailable" else "warn", result.message)
        return result

    # -- display --------------------------------------------------------------------------
    def view(self):
        """The dashboard as ipywidgets (built lazily), laid out for a 1400 x 900 window."""
        from explorer.widgets.dashboard_page import DashboardPage

        widget = DashboardPage(self).widget
        self.loader.release()
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

    Parameters
    ----------
    model : str, optional
        A model name the dashboard offers.

    Returns
    -------
    pathlib.Path

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
    dash = Dashboard(model, background=True)
    dash.wait()  # loads, evaluates the dense model and writes the page
    if PageCache.load(path) is None:
        raise RuntimeError(
            f"could not cache the first page of {model!r} at {path}: {dash.status.text}"
        )
    return path


def page_options(
    model=DEFAULT_MODEL, text=None, db=None, environ: Mapping[str, str] | None = None
) -> dict:
    """The served page's :class:`Dashboard` arguments: the notebook's, or the environment's.

    Each variable of :data:`PAGE_ENV` that is set (and not empty) replaces the notebook's
    value: ``SPARSITY_EXPLORER_MODEL`` the model (a bundled name or a checkpoint folder's
    path), ``SPARSITY_EXPLORER_TEXT`` its text file, ``SPARSITY_EXPLORER_DB`` the results file
    the page reads measurements from (opened read-only; without one, the shipped reference
    database). So ``SPARSITY_EXPLORER_MODEL=./my-model SPARSITY_EXPLORER_TEXT=corpus.txt
    voila notebooks/dashboard.ipynb`` serves your own checkpoint.

    Parameters
    ----------
    model : str or path-like, optional
        The notebook's model.
    text : str or path-like, optional
        The notebook's text file, for a checkpoint folder.
    db : str or path-like, optional
        The notebook's results file.
    environ : Mapping[str, str] or None, optional
        The environment to read; None for ``os.environ``.

    Returns
    -------
    dict
        ``model``, and ``text`` and ``store`` (a read-only :class:`ResultStore`) where given.

    Raises
    ------
    FileNotFoundError
        A results file that does not exist (the message names the variable).

    Examples
    --------
    >>> page_options(environ={})
    {'model': 'minilm'}
    >>> page_options(environ={"SPARSITY_EXPLORER_MODEL": "./my-model",
    ...                       "SPARSITY_EXPLORER_TEXT": "corpus.txt"})
    {'model': './my-model', 'text': 'corpus.txt'}
    """
    env = os.environ if environ is None else environ
    found = {"model": model, "text": text, "db": db}
    found.update({key: env[var] for key, var in PAGE_ENV.items() if env.get(var)})
    options = {k: v for k, v in found.items() if k != "db" and v is not None}
    if found["db"] is not None:
        from explorer.results.store import ResultStore

        path = Path(os.fspath(found["db"])).expanduser()
        if not path.is_file():
            raise FileNotFoundError(
                f"results file {str(path)!r} ({PAGE_ENV['db']} or db=) does not exist: name the "
                "file a sweep wrote (sparsity-explorer sweep ... --db results.db)"
            )
        options["store"] = ResultStore(str(path), readonly=True, source="local")
    return options
