"""Imports run one way through the package's rooms (docs/architecture.md)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from test_module_boundaries import import_graph

import explorer

PACKAGE = Path(explorer.__file__).parent
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
#: The rooms in import order: each may import those before it, never one after it.
ROOMS = (
    "core",
    "results",
    "pruning",
    "models",
    "gpu",
    "checkpoint",
    "bench",
    "sweeps",
    "experiments",
    "workshop",
    "widgets",
    "cli",
)
_OUTSIDE_CORE = {"cli": "cli", "__main__": "cli"}


def _room(module: str) -> str:
    parts = module.split(".")
    if len(parts) < 2:
        return "core"
    if (PACKAGE / parts[1]).is_dir():
        return parts[1]
    return _OUTSIDE_CORE.get(parts[1], "core")


def _imports(path: Path) -> list[str]:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    module = ".".join(rel.parts)
    package = (
        module.rsplit(".", 1)[0] if path.name != "__init__.py" else module[: -len(".__init__")]
    )
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.append(".".join(base + ([node.module] if node.module else [])))
            else:
                found.append(node.module or "")
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return [name for name in found if name.split(".")[0] == "explorer"]


def _edges() -> set[tuple[str, str, str]]:
    edges = set()
    for path in PACKAGE.rglob("*.py"):
        rel = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for target in _imports(path):
            a, b = _room(rel), _room(target)
            if a != b:
                edges.add((a, b, f"{path.relative_to(PACKAGE.parent)} imports {target}"))
    return edges


def test_every_room_is_known():
    rooms = {_room(f"explorer.{p.name}") for p in PACKAGE.iterdir() if p.is_dir()}
    assert rooms - {"_kernels", "data", "__pycache__"} <= set(ROOMS)


def test_no_room_imports_one_after_it():
    late = [why for a, b, why in _edges() if ROOMS.index(b) > ROOMS.index(a)]
    assert late == [], "\n".join(sorted(late))


def test_nothing_in_gpu_imports_bench_and_only_widgets_import_widgets():
    edges = _edges()
    assert not [why for a, b, why in edges if a == "gpu" and b == "bench"]
    assert not [why for a, b, why in edges if b == "widgets"]


def room_table() -> str:
    """The table of docs/architecture.md: the rooms each room imports, when imported and lazily."""
    graph = import_graph()
    eager: dict[str, set[str]] = defaultdict(set)
    lazy: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        room = _room(module)
        eager[room].update(_room(t) for t in graph[module])
        lazy[room].update(_room(t) for t in _imports(path))

    def names(rooms: set[str]) -> str:
        shown = {"core": "core", "cli": "`cli.py`"}
        ordered = sorted(rooms, key=ROOMS.index)
        return ", ".join(shown.get(r, f"`{r}/`") for r in ordered) or "-"

    lines = [
        "| room | imports when imported | imports lazily (inside functions) |",
        "|---|---|---|",
    ]
    for room in ROOMS:
        when_imported = eager[room] - {room}
        lines.append(
            f"| {names({room})} | {names(when_imported)} "
            f"| {names(lazy[room] - when_imported - {room})} |"
        )
    return "\n".join(lines)


def test_the_architecture_page_shows_the_imports_as_they_are():
    assert room_table() in ARCHITECTURE.read_text(), (
        "docs/architecture.md's import table is out of date; it is now:\n" + room_table()
    )


if __name__ == "__main__":
    print(room_table())
