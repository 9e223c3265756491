"""Keep third-party progress displays out of the dashboard page."""

from __future__ import annotations

import contextlib
import sys

__all__ = ["hidden_displays"]


@contextlib.contextmanager
def hidden_displays():
    """Drop IPython display messages (e.g. tqdm's notebook bars) for the duration of the block.

    A loader's ``tqdm(leave=False)`` bar is displayed and then closed; a page rendered after
    the cell finished (Voila) would try to draw the closed widget and report "widget model
    not found". Outside IPython this does nothing.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    pub = getattr(shell, "display_pub", None)
    if pub is None:
        yield
        return
    had_own = "publish" in vars(pub)
    original = pub.publish
    pub.publish = lambda *args, **kwargs: None
    try:
        yield
    finally:
        if had_own:
            pub.publish = original
        else:
            del pub.publish
