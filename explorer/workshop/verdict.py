"""What every workshop check is built from: the verdict it shows and how it registers.

A check takes the learner's answer (a value or a function) plus whatever it needs to recompute
the expected answer, and returns a :class:`Verdict` that displays itself as *right* or *not yet*
with a hint. :func:`exercise` registers a check under its number in :data:`EXERCISES`; inside a
check, :class:`Wrong` says what is wrong, and :func:`call_answer`, :func:`as_number` and
:func:`as_tensor` turn a learner's crash or wrong type into that message instead of a traceback.
The checks themselves are in :mod:`explorer.workshop.checks` (notebooks 1 to 3) and
:mod:`explorer.workshop.choosing` (notebook 4).

Examples
--------
>>> Verdict("9.9", False, "it does not.", "look here")
Exercise 9.9: not yet. It does not. Hint: look here.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["EXERCISES", "Verdict", "Wrong", "as_number", "as_tensor", "call_answer", "exercise"]


#: Exercise number -> the check function for it, in workshop order.
EXERCISES: dict[str, Callable[..., Verdict]] = {}


@dataclass(frozen=True)
class Verdict:
    """The outcome of one check.

    Attributes
    ----------
    exercise : str
        The exercise number, e.g. ``"1.1"``.
    ok : bool
        True when the answer is right.
    message : str
        What was found.
    hint : str
        A nudge towards the answer (shown only when not right).
    """

    exercise: str
    ok: bool
    message: str
    hint: str = ""

    def __bool__(self) -> bool:
        return self.ok

    @property
    def sentence(self) -> str:
        """The message as a sentence: capital first letter."""
        return self.message[:1].upper() + self.message[1:]

    def __repr__(self) -> str:
        if self.ok:
            return f"Exercise {self.exercise}: right. {self.sentence}"
        hint = f" Hint: {self.hint}." if self.hint else ""
        return f"Exercise {self.exercise}: not yet. {self.sentence}{hint}"

    def _repr_html_(self) -> str:
        colour, word = ("#1a7f37", "right") if self.ok else ("#9a6700", "not yet")
        hint = "" if self.ok or not self.hint else f"<br><i>Hint: {html.escape(self.hint)}.</i>"
        return (
            f'<div style="border-left:4px solid {colour};padding:4px 8px">'
            f"<b>Exercise {html.escape(self.exercise)}: "
            f'<span style="color:{colour}">{word}</span></b>. '
            f"{html.escape(self.sentence)}{hint}</div>"
        )


def exercise(number: str, hint: str):
    """Register a check for exercise ``number``; its ``hint`` is used when not right.

    The decorated check takes the learner's answer first and returns ``(ok, message)``, or
    raises :class:`Wrong`; the registered function returns a :class:`Verdict` and never raises
    on a missing (``...``), wrong or crashing answer.

    Parameters
    ----------
    number : str
        The exercise number, e.g. ``"4.5"``, a key of :data:`EXERCISES` from then on.
    hint : str
        A nudge towards the answer, shown when it is not right.

    Returns
    -------
    callable
        The decorator.
    """

    def wrap(check):
        def run(*args, **kwargs) -> Verdict:
            answer = args[0] if args else kwargs.get("answer")
            if answer is ... or answer is None:
                return Verdict(number, False, "Replace the ... with your answer.", hint)
            try:
                ok, message = check(*args, **kwargs)
            except Wrong as exc:
                return Verdict(number, False, str(exc), hint)
            return Verdict(number, bool(ok), message, "" if ok else hint)

        run.__name__ = check.__name__
        run.__qualname__ = check.__qualname__
        run.__doc__ = check.__doc__
        run.exercise = number
        EXERCISES[number] = run
        # workshop order, whichever module registered first
        ordered = sorted(EXERCISES.items(), key=lambda item: _order(item[0]))
        EXERCISES.clear()
        EXERCISES.update(ordered)
        return run

    return wrap


def _order(number: str) -> tuple[int, ...]:
    """``"4.10"`` -> ``(4, 10)``: exercise numbers sort as numbers."""
    return tuple(int(part) for part in number.split("."))


class Wrong(Exception):
    """Raised inside a check to say what is wrong with the answer (its message is shown)."""


def call_answer(fn: Any, *args: Any) -> Any:
    """Call the learner's function ``fn(*args)``, turning its failures into a :class:`Wrong`.

    Parameters
    ----------
    fn : object
        The learner's answer, which should be callable.
    *args
        What to call it with.

    Returns
    -------
    object
        What it returned (never None or ``...``: those say the body is not finished).
    """
    if not callable(fn):
        raise Wrong(f"expected a function, got {type(fn).__name__} {fn!r:.60}")
    try:
        out = fn(*args)
    except Exception as exc:  # the learner's code may raise anything; say what
        raise Wrong(f"your function raised {type(exc).__name__}: {exc}") from None
    if out is None or out is ...:
        raise Wrong("your function returned nothing yet (None or ...): finish its body.")
    return out


def as_number(answer: Any) -> float:
    """``answer`` as a float, or a :class:`Wrong` naming what it is instead.

    Parameters
    ----------
    answer : object

    Returns
    -------
    float
    """
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise Wrong(f"expected a number, got {type(answer).__name__} {answer!r:.60}")
    return float(answer)


def as_tensor(value: Any, shape: tuple[int, ...], what: str) -> torch.Tensor:
    """``value`` if it is a tensor of ``shape``, else a :class:`Wrong` naming ``what`` is off.

    Parameters
    ----------
    value : object
    shape : tuple of int
    what : str
        What the value is, for the message (e.g. ``"the mask"``).

    Returns
    -------
    torch.Tensor
    """
    if not isinstance(value, torch.Tensor):
        raise Wrong(f"{what} should be a torch.Tensor, got {type(value).__name__}")
    if tuple(value.shape) != tuple(shape):
        raise Wrong(f"{what} has shape {tuple(value.shape)}, expected {tuple(shape)}")
    return value
