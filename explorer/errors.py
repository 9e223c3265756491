"""Errors the explorer raises, the cancellation contract, and the lazy import of extras.

Long operations (pruning, fine-tuning, sweeps) take ``cancel=``, any object with
``is_set()`` such as a ``threading.Event``: :func:`validate_cancel` checks it up front and
:func:`check_cancel` raises :class:`PruningCancelled` where the work can stop cleanly. Callers
catch :class:`PruningCancelled` by type.

Every error names the bad value, what was expected and a hint, so a user can fix the
call without reading the explorer's source.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = [
    "MissingExtraError",
    "PruningCancelled",
    "check_cancel",
    "require",
    "validate_cancel",
]


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the ``pip install`` to run."""


class PruningCancelled(Exception):
    """Pruning (or fine-tuning, or a sensitivity scan) was cancelled; the model was restored."""


def check_cancel(cancel: Any, where: str = "") -> None:
    """Raise :class:`PruningCancelled` when ``cancel.is_set()`` is true.

    Parameters
    ----------
    cancel : threading.Event or object with ``is_set()``, optional
        The cancellation flag; ``None`` never cancels.
    where : str
        Where the check happened, for the message.
    """
    if cancel is not None and cancel.is_set():
        raise PruningCancelled(f"cancelled{' ' + where if where else ''}")


def validate_cancel(cancel: Any) -> None:
    """TypeError unless ``cancel`` is ``None`` or has an ``is_set()`` method.

    Parameters
    ----------
    cancel : Any
        The value given as ``cancel``.
    """
    if cancel is not None and not callable(getattr(cancel, "is_set", None)):
        raise TypeError(
            f"cancel must be a threading.Event (or any object with is_set()), "
            f"got {type(cancel).__name__}; e.g. cancel=threading.Event()"
        )


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming the extra that provides it.

    Parameters
    ----------
    module : str
        Dotted module name, e.g. ``"plotly.graph_objects"``.
    extra : str
        The ``sparsity-explorer`` extra that installs it, e.g. ``"widgets"``.

    Returns
    -------
    types.ModuleType
        The imported module.

    Examples
    --------
    >>> require("json", "none").__name__
    'json'
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{module!r} is needed here but is not installed ({exc}). "
            f'Install it with: pip install "sparsity-explorer[{extra}]"'
        ) from exc


class OutputPathError(ValueError):
    """A file would be written where it must not be (a device, a database, a user's file).

    The message names the path, why it was refused and the flag or path that fixes it; see
    :mod:`explorer.output_paths` for the rule every writer follows.
    """
