"""The dashboard's status line and its events: messages, progress and change listeners.

:class:`Status` is one message for the page. :class:`_Events` is the part of
:class:`explorer.widgets.Dashboard` that tells listeners what changed; it expects the host to
set ``status``, ``progress`` and ``_listeners`` (and ``bundle``, ``layer_picker``, ``tokens``
and ``dtype`` for :meth:`_Events._summary`).

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

__all__ = ["Status"]

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


class _Events:
    """Listeners, the status line and the progress bar of a dashboard."""

    _listeners: list[Callable[[str], None]]

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
        self._emit("status")

    def _progress(self, fraction: float, text: str) -> None:
        self.progress = (fraction, text)
        self._emit("progress")

    def _summary(self) -> str:
        counts = self.layer_picker.counts()
        verdicts = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
        return (
            f"{self.bundle.name}: {len(self.layer_picker.rows)} layers "
            f"({verdicts} once 2:4 at {self.tokens} tokens, {self.dtype})"
        )
