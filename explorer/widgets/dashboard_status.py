"""The dashboard's status line and its events: messages, progress and change listeners.

:class:`Status` is one message for the page. :class:`Events` is the part of
:class:`explorer.widgets.Dashboard` that holds the status line and the progress bar and tells
listeners what changed; :func:`summary` is the one-line account of a loaded model.

Examples
--------
>>> from explorer.widgets.dashboard_status import Status
>>> Status("ok", "done").level
'ok'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from explorer import _html

__all__ = ["Events", "Status", "summary"]

#: The status line's levels.
_LEVELS = ("ok", "info", "warn", "error")


@dataclass(frozen=True)
class Status:
    """A message for the page.

    Attributes
    ----------
    level : str
        One of ok, info, warn, error.
    text : str
        The message.
    """

    level: str
    text: str

    def html(self) -> str:
        """The message as a coloured badge plus text."""
        return f"<div class='status'>{_html.badge(self.level, self.level)} {_html.escape(self.text)}</div>"


class Events:
    """The status line, the progress bar and the change listeners of a dashboard.

    Examples
    --------
    >>> events = Events()
    >>> events.on_change(print)
    >>> events.say("ok", "done")
    status
    >>> events.status, events.progress
    (Status(level='ok', text='done'), (0.0, ''))
    """

    def __init__(self) -> None:
        self.status = Status("info", "starting")
        self.progress = (0.0, "")
        self._listeners: list[Callable[[str], None]] = []

    def on_change(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(event)`` after each change.

        Parameters
        ----------
        callback : callable
            Called with the event's name.
        """
        self._listeners.append(callback)

    def emit(self, event: str) -> None:
        """Tell every listener that ``event`` happened.

        Parameters
        ----------
        event : str
            The event's name (``"model"``, ``"status"``, ``"progress"``, ...).
        """
        for callback in list(self._listeners):
            callback(event)

    def say(self, level: str, text: str) -> None:
        """Show a message in the status line (``level``: ok, info, warn or error).

        Parameters
        ----------
        level : str
            ``"ok"``, ``"info"``, ``"warn"`` or ``"error"``.
        text : str
            The message.

        Examples
        --------
        >>> import torch
        >>> from explorer.widgets import Dashboard
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
        self.emit("status")

    def report(self, fraction: float, text: str) -> None:
        """Move the progress bar to ``fraction`` (0 to 1) with ``text`` beside it.

        Parameters
        ----------
        fraction : float
            How far the job is, 0 to 1.
        text : str
            What it is doing.
        """
        self.progress = (fraction, text)
        self.emit("progress")

    def __repr__(self) -> str:
        return (
            f"Events({self.status.level}: {self.status.text!r}, {len(self._listeners)} listeners)"
        )


def summary(state) -> str:
    """One line on the model of ``state``: its layers and the doctor's verdicts once 2:4.

    Parameters
    ----------
    state : DashboardState
        The dashboard's state, with a model loaded.

    Returns
    -------
    str
    """
    picker = state.layer_picker
    verdicts = ", ".join(f"{n} {v}" for v, n in picker.counts().items() if n)
    return (
        f"{state.bundle.name}: {len(picker.rows)} layers "
        f"({verdicts} once 2:4 at {state.tokens} tokens, {state.dtype})"
    )
