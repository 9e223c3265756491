"""Every public function and class of ``explorer`` documents its parameters (numpydoc).

Public means named in the ``__all__`` of ``explorer`` or of one of its packages
(``explorer.pruning``, ``explorer.results.store``, ...).

A function's parameters are named in its ``Parameters`` section; a class's constructor
arguments are named under ``Parameters`` (in the class or ``__init__`` docstring) or, for a
record the library builds and returns (a dataclass such as ``PruneResult``), under
``Attributes``. ``*args`` and ``**kwargs`` count as documented when named with or without
their stars.

Beyond ``__all__``: in the packages and modules of :data:`COMPLETE_PARAMETERS` every public
function, and every public method of a public class, that takes arguments names each of them
under ``Parameters`` (read from the source, so modules that need a GPU are checked too).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

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


#: Packages and modules (paths under ``explorer/``) whose every public function and public
#: method of a public class that takes arguments names each of them under ``Parameters``,
#: whether or not the name is in an ``__all__``. A package path covers every module in it.
#: The list only grows.
COMPLETE_PARAMETERS = (
    "bench",
    "checkpoint",
    "experiments",
    "gpu",
    "models",
    "pruning",
    "results",
    "sweeps",
    "widgets",
    "workshop",
    "__init__.py",
    "__main__.py",
    "_html.py",
    "_threads.py",
    "_validate.py",
    "checks.py",
    "cli.py",
    "compression.py",
    "devices.py",
    "diagnosis.py",
    "dtypes.py",
    "errors.py",
    "groupquant.py",
    "layer_sets.py",
    "lowbit.py",
    "masks.py",
    "output_paths.py",
    "patterns.py",
    "prunable_layers.py",
    "sparse_rules.py",
)

#: Methods whose parameters mean what Python or torch defines them to mean.
_PROTOCOL_METHODS = frozenset({"forward", "extra_repr"})


def _undocumented(source: str) -> list[str]:
    """``"name: [parameters]"`` for each public function or method lacking some of them.

    Public means no leading underscore, for the function and for a method's class. ``self``
    and ``cls`` need no description; a function whose only parameters are ``*args`` and
    ``**kwargs`` (a wrapper) is not checked, nor an ``@overload`` stub.
    """
    tree = ast.parse(source)
    found = []

    def check(fn: ast.FunctionDef | ast.AsyncFunctionDef, qual: str) -> None:
        if any(isinstance(d, ast.Name) and d.id == "overload" for d in fn.decorator_list):
            return
        a = fn.args
        named = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        named = [n for n in named if n not in ("self", "cls")]
        if not named:
            return
        stars = [x.arg for x in (a.vararg, a.kwarg) if x is not None]
        sections = _sections(ast.get_docstring(fn) or "")
        listed = _named(sections.get("Parameters", "")) | _named(
            sections.get("Other Parameters", "")
        )
        missing = [n for n in named + stars if n not in listed]
        if missing:
            found.append(f"{qual}: {missing}")

    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for node in tree.body:
        if isinstance(node, functions) and not node.name.startswith("_"):
            check(node, node.name)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for sub in node.body:
                if (
                    isinstance(sub, functions)
                    and not sub.name.startswith("_")
                    and sub.name not in _PROTOCOL_METHODS
                ):
                    check(sub, f"{node.name}.{sub.name}")
    return found


def _complete_modules() -> list[str]:
    """The files :data:`COMPLETE_PARAMETERS` covers, relative to ``explorer/``."""
    root = Path(explorer.__file__).parent
    files = []
    for entry in COMPLETE_PARAMETERS:
        path = root / entry
        found = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        files += [f.relative_to(root).as_posix() for f in found]
    return files


@pytest.mark.parametrize("module", _complete_modules())
def test_complete_module_documents_every_parameter(module):
    source = (Path(explorer.__file__).parent / module).read_text()
    missing = _undocumented(source)
    assert not missing, f"explorer/{module}: parameters without a description: {missing}"


def test_complete_modules_exist():
    root = Path(explorer.__file__).parent
    assert [e for e in COMPLETE_PARAMETERS if not (root / e).exists()] == []
    assert "pruning/methods.py" in _complete_modules()


def test_undocumented_parameters_are_found():
    source = '''
def f(a, b=1, *args, **kwargs):
    """F.

    Parameters
    ----------
    a : int
        A.
    *args
        More.
    """


def wrapper(*args, **kwargs):
    """Passes everything on."""


def _private(a):
    """No check."""


class Public:
    def method(self, x, *, y):
        """M.

        Parameters
        ----------
        x, y : int
            Two.
        """

    def forward(self, x):
        """Torch's."""

    def other(self, z):
        """No section."""


class _Hidden:
    def method(self, q):
        """No check."""
'''
    assert _undocumented(source) == ["f: ['b', 'kwargs']", "Public.other: ['z']"]
