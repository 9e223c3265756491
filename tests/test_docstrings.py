"""Every public function and class of ``explorer`` documents its parameters (numpydoc).

Public means named in the ``__all__`` of ``explorer`` or of one of its packages
(``explorer.pruning``, ``explorer.results.store``, ...).

A function's parameters are named in its ``Parameters`` section; a class's constructor
arguments are named under ``Parameters`` (in the class or ``__init__`` docstring) or, for a
record the library builds and returns (a dataclass such as ``PruneResult``), under
``Attributes``. ``*args`` and ``**kwargs`` count as documented when named with or without
their stars.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re

import pytest

import explorer

_SECTION = re.compile(r"^(\w[\w ]*)\n-{3,}\n", re.M)


def _sections(doc: str) -> dict[str, str]:
    """The docstring's numpydoc sections: ``{title: text}``."""
    heads = list(_SECTION.finditer(doc))
    return {
        h.group(1): doc[h.end() : heads[i + 1].start() if i + 1 < len(heads) else len(doc)]
        for i, h in enumerate(heads)
    }


def _named(section: str) -> set[str]:
    """The names a Parameters or Attributes section lists (``a, b : type`` names two)."""
    names: set[str] = set()
    for line in section.splitlines():
        if not line or line[0].isspace():
            continue
        head = line.split(" : ")[0]
        names.update(n.strip().lstrip("*") for n in head.split(","))
    return names


def _parameters(obj: object) -> list[str]:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    return [name for name in sig.parameters if name not in ("self", "cls")]


def _documented(obj: object) -> set[str]:
    doc = inspect.getdoc(obj) or ""
    init = obj.__dict__.get("__init__") if inspect.isclass(obj) else None
    if init is not None and init.__doc__:
        doc += "\n\n" + inspect.getdoc(init)
    sections = _sections(doc)
    names = _named(sections.get("Parameters", "")) | _named(sections.get("Other Parameters", ""))
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
        names |= _named(sections.get("Attributes", ""))
    return names


def _packages() -> list[str]:
    """``explorer`` and every package inside it (the modules whose ``__all__`` users import)."""
    found = ["explorer"]
    for info in pkgutil.walk_packages(explorer.__path__, "explorer.", onerror=lambda name: None):
        if info.ispkg:
            found.append(info.name)
    return found


def _public_api() -> list[tuple[str, str]]:
    """``(package, name)`` of every function and class in a package's ``__all__``."""
    api = []
    for package in _packages():
        try:
            module = importlib.import_module(package)
        except ImportError:  # an optional extra that is not installed
            continue
        for name in sorted(set(getattr(module, "__all__", ()))):
            obj = getattr(module, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                api.append((package, name))
    return api


@pytest.mark.parametrize(("package", "name"), _public_api())
def test_public_api_documents_its_parameters(package, name):
    obj = getattr(importlib.import_module(package), name)
    missing = [p for p in _parameters(obj) if p not in _documented(obj)]
    assert not missing, f"{package}.{name}: parameters without a description: {missing}"


def test_the_package_api_is_checked():
    checked = {(package, name) for package, name in _public_api()}
    assert ("explorer", "prune") in checked
    assert ("explorer.results.store", "ResultStore") in checked


def test_sections_are_read():
    def f(a, b, *args, c=1, **kwargs):
        """Add.

        Parameters
        ----------
        a, b : int
            Two numbers.
        *args : int
            More.
        c : int, optional
            A third.
        **kwargs
            Ignored.

        Returns
        -------
        int
        """

    assert _parameters(f) == ["a", "b", "args", "c", "kwargs"]
    assert _documented(f) == {"a", "b", "args", "c", "kwargs"}
