"""What the dashboard's parts share: the model, its layer table, the runs and the running job.

:class:`DashboardState` is plain data: every part of :class:`explorer.widgets.Dashboard`
(loading, layer view, points, pruning, files) gets the same instance and reads or sets its
fields; none of them holds the model or the runs itself.

Examples
--------
>>> from explorer.widgets.dashboard_state import DashboardState
>>> state = DashboardState(tokens=1024, dtype="float16")
>>> state
DashboardState(model=None, 0 runs, busy=False)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from explorer.widgets.method_picker import MethodConfig

__all__ = ["DashboardState", "Run"]


@dataclass
class Run:
    """One finished pruning run: its configuration, masks, score and pruning result."""

    config: MethodConfig
    masks: dict
    score: float
    result: object = None

    def __repr__(self) -> str:
        return f"Run({self.config.label}, {len(self.masks)} masks, score={self.score:.4g})"


@dataclass(repr=False)
class DashboardState:
    """The state the dashboard's parts share.

    Attributes
    ----------
    tokens, dtype : int, str
        Token count and dtype the doctor, the kernel runner and the speed-up assume.
    store : explorer.results.store.ResultStore or None
        Where recorded measurements come from (None: the shipped reference database).
    background : bool
        Whether the model loads (and is evaluated) in a thread behind its first page.
    load_options : dict
        More loader options (the text of a checkpoint folder).
    bundle : ModelBundle or None
        The current model's bundle (a stand-in while it loads behind a cached page).
    layer_picker : LayerPicker or None
        The current model's layer table.
    dense : Snapshot or None
        Every parameter and buffer of the dense model, taken when it loads.
    runs, current : dict of str to Run, Run or None
        Finished runs by label, and the one the model now holds (None: dense).
    busy : bool
        Whether a run, a save or an export is under way.
    job : threading.Thread or None
        The latest run, save or export thread.
    cancel : threading.Event
        Set to ask the running job to stop.
    last_file : WrittenFile or None
        What Save or Export wrote last.
    """

    tokens: int
    dtype: str
    store: object = None
    background: bool = False
    load_options: dict = field(default_factory=dict)
    bundle: object = None
    layer_picker: object = None
    dense: object = None
    runs: dict = field(default_factory=dict)
    current: Run | None = None
    busy: bool = False
    job: threading.Thread | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    last_file: object = None

    @property
    def selected(self) -> str | None:
        """Name of the selected layer."""
        return None if self.layer_picker is None else self.layer_picker.selected

    def start_job(
        self, target, args: tuple, name: str, wait: bool = False, announce=None
    ) -> threading.Thread:
        """Run ``target(*args)`` in a daemon thread named ``name``, with the dashboard marked busy.

        First mark the dashboard busy, clear Cancel and call ``announce()`` (the parts redraw for a
        busy page); the thread is joined before returning with ``wait``.

        Parameters
        ----------
        target : callable
            The job.
        args : tuple
            Its arguments.
        name : str
            The thread's name.
        wait : bool, optional
            Join the thread before returning.
        announce : callable, optional
            Called with no arguments once the dashboard is marked busy.

        Returns
        -------
        threading.Thread

        Examples
        --------
        >>> state = DashboardState(16, "float16")
        >>> out = []
        >>> state.start_job(out.append, (1,), "explorer-example", wait=True).name, out, state.busy
        ('explorer-example', [1], True)
        """
        self.busy = True
        self.cancel.clear()
        if announce is not None:
            announce()
        self.job = threading.Thread(target=target, args=args, daemon=True, name=name)
        self.job.start()
        if wait:
            self.job.join()
        return self.job

    def restore_dense(self) -> None:
        """Put every parameter and buffer back as it was when the model loaded, bit for bit."""
        if self.dense is not None:
            self.dense.restore()

    def __repr__(self) -> str:
        name = getattr(self.bundle, "name", None)
        return f"DashboardState(model={name!r}, {len(self.runs)} runs, busy={self.busy})"
