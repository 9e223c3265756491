"""Errors the explorer raises, and the helper that imports optional extras lazily.

Every error names the bad value, what was expected and a hint, so a user can fix the
call without reading the explorer's source.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtraError", "require"]


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the ``pip install`` to run."""


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
