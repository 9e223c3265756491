"""Keep third-party progress displays out of the dashboard page."""

from __future__ import annotations

import contextlib
import sys
import threading

__all__ = ["hidden_displays"]

_LOCK = threading.Lock()
#: Blocks inside :func:`hidden_displays` now, and the display publisher's own ``publish``
#: attribute before the first of them (``None`` where it had none: the class's method).
_DEPTH = [0]
_SAVED: list = [None]


def _drop(*args, **kwargs) -> None:
    return None


@contextlib.contextmanager
def hidden_displays():
    """Drop IPython display messages (e.g. tqdm's notebook bars) for the duration of the block.

    A loader's or an evaluation's ``tqdm(leave=False)`` bar is displayed and then closed; a
    page rendered after the cell finished (Voila) would try to draw the closed widget and
    report "widget model not found" in the browser. The dashboard's own bar shows progress.

    Blocks may overlap, in one thread or several (the dashboard evaluates a model in one
    thread while it loads another in a second): displays come back when the last one ends.
    Outside IPython this does nothing.

    Examples
    --------
    >>> with hidden_displays():  # outside IPython: nothing to hide
    ...     print("shown")
    shown
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    pub = getattr(shell, "display_pub", None)
    if pub is None:
        yield
        return
    with _LOCK:
        if _DEPTH[0] == 0:
            _SAVED[0] = vars(pub).get("publish")
            pub.publish = _drop
        _DEPTH[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH[0] -= 1
            if _DEPTH[0] == 0:
                if _SAVED[0] is not None:
                    pub.publish = _SAVED[0]
                else:
                    del pub.publish
                _SAVED[0] = None
