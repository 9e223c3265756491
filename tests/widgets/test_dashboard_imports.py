"""The dashboard's modules import one way: no module of explorer.widgets imports one that imports it back."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import explorer.widgets

WIDGETS = Path(explorer.widgets.__file__).parent
DASHBOARD_MODULES = sorted(p.stem for p in WIDGETS.glob("dashboard*.py"))


def _imports(path: Path) -> set[str]:
    """The explorer.widgets modules that ``path`` imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {
        name.removeprefix("explorer.widgets.")
        for name in found
        if name.startswith("explorer.widgets.") and (WIDGETS / f"{name.split('.')[2]}.py").exists()
    }


def _graph() -> dict[str, set[str]]:
    return {p.stem: _imports(p) - {p.stem} for p in WIDGETS.glob("*.py") if p.stem != "__init__"}


def _cycle_through(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    """A chain of imports from ``start`` back to itself, or None."""
    paths = [[start]]
    seen = set()
    while paths:
        path = paths.pop()
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                paths.append([*path, nxt])
    return None


def test_the_dashboard_has_its_parts():
    assert {"dashboard", "dashboard_state", "dashboard_layer", "dashboard_loading"} <= set(
        DASHBOARD_MODULES
    )


@pytest.mark.parametrize("module", DASHBOARD_MODULES)
def test_each_dashboard_module_imports_and_is_in_no_import_circle(module):
    importlib.import_module(f"explorer.widgets.{module}")
    assert _cycle_through(module, _graph()) is None, " -> ".join(_cycle_through(module, _graph()))


def test_no_widgets_module_is_in_an_import_circle():
    graph = _graph()
    circles = [c for c in (_cycle_through(m, graph) for m in graph) if c]
    assert circles == []


def test_the_check_finds_a_circle():
    assert _cycle_through("a", {"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle_through("a", {"a": {"b"}, "b": set()}) is None
