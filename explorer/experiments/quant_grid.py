"""What the int8 and FP8 accuracy experiments share: the grid run, the tables and the command line.

Both experiments evaluate, for each shipped model and pruning method, the dense and 2:4 models
with and without a quantized path (:func:`explorer.sweeps.named.model_grid`). This module runs
those grids into a result store (:func:`run_grid`), turns the store rows into one table row per
configuration (:func:`grid_table`), prints them as Markdown (:func:`markdown_tables`) and holds
the command line both share (:func:`run_cli`); :mod:`explorer.experiments.int8` and
:mod:`explorer.experiments.fp8` add only what differs.

Examples
--------
>>> print(markdown_tables([dict(model="m", metric="accuracy", method="-", config="dense",
...                             value=0.9)], ["method", "configuration"],
...                       lambda r: [r["method"], r["config"]]).splitlines()[2])
| method | configuration | value |
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from explorer.experiments.settings import model_settings
from explorer.results.store import ResultStore
from explorer.sweeps.named import model_grid, run_named

__all__ = ["grid_table", "markdown_tables", "run_cli", "run_grid"]


def run_grid(
    prefix: str,
    models: Sequence[str],
    methods: Sequence[str],
    table: Callable[[list[Any]], list[dict]],
    progress: bool = True,
    db: str | Path | ResultStore = ":memory:",
    load: Mapping[str, dict] | None = None,
    **grid: Any,
) -> list[dict]:
    """Run each model's 2:4 grid as the named sweep ``f"{prefix}-{model}"`` and tabulate it.

    Parameters
    ----------
    prefix : str
        The experiment's name, the first part of each sweep's name.
    models, methods : sequence of str
        Shipped model names and pruning methods.
    table : callable
        Turns one model's store rows into table rows (e.g. with :func:`grid_table`).
    progress : bool
        Show a progress bar per model.
    db : path or ResultStore
        Where the store rows go; a store passed in is left open.
    load : mapping, optional
        Loader options per model name, over :func:`explorer.experiments.settings.model_settings`.
    **grid
        More options of :func:`explorer.sweeps.named.model_grid` (``int8=True``, ``fp8=True``...).

    Returns
    -------
    list of dict
        The table rows of every model, in order.
    """
    store = db if isinstance(db, ResultStore) else ResultStore(db)
    out: list[dict] = []
    try:
        for name in models:
            settings = model_settings(name)
            cells = model_grid(
                name,
                methods,
                ["2:4"],
                calibration_samples=settings["calibration"],
                load={**settings["load"], **(load or {}).get(name, {})},
                **grid,
            )
            out += table(run_named(f"{prefix}-{name}", cells, store, progress))
    finally:
        if store is not db:
            store.close()
    return out


def grid_table(
    rows: list[Any],
    configs: Mapping[str | None, str],
    columns: Callable[[Any, str | None, str], dict],
) -> list[dict]:
    """One table row per store row: model, metric, method, configuration, then ``columns``.

    Parameters
    ----------
    rows : list
        One model's store rows; the first dense row that ran names the headline metric.
    configs : mapping
        The suffix of each ``quant`` value's configuration name (``None``: no quantization).
    columns : callable
        ``columns(row, quant, metric)``: the experiment's further columns, ``value`` among them.

    Returns
    -------
    list of dict
        The table rows, with ``error`` on those that failed.
    """
    metric = next(r.metrics["metric"] for r in rows if r.kind == "dense" and r.status == "ok")
    table = []
    for r in rows:
        quant = r.config.get("quant")
        config = ("dense" if r.kind == "dense" else r.pattern) + configs[quant]
        row = {"model": r.model, "metric": metric, "method": r.method or "-", "config": config}
        row.update(columns(r, quant, metric))
        if r.status != "ok":
            row["error"] = r.error
        table.append(row)
    return table


def markdown_tables(
    rows: list[dict],
    headers: Sequence[str],
    cells: Callable[[dict], list[str]],
    right: Sequence[str] = (),
) -> str:
    """One Markdown table per model: ``headers`` then the value, one line per row.

    Parameters
    ----------
    rows : list of dict
        Table rows with ``model``, ``metric`` and ``value`` (and ``error`` where one failed).
    headers : sequence of str
        The columns before the value.
    cells : callable
        The text of those columns for one row.
    right : sequence of str
        Headers of columns aligned right (the value always is).

    Returns
    -------
    str
        The tables, separated by a blank line.
    """
    out: list[str] = []
    rule = "|".join("---:" if h in right else "---" for h in headers)
    for name in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == name]
        metric = mine[0]["metric"]
        out += [
            f"**{name}** ({metric})",
            "",
            f"| {' | '.join(headers)} | value |",
            f"|{rule}|---:|",
        ]
        for r in mine:
            v = r["value"]
            text = f"{v:,.1f}" if metric == "perplexity" else f"{v:.3f}"
            text = "error" if r.get("error") else text
            out.append(f"| {' | '.join(cells(r))} | {text} |")
        out.append("")
    return "\n".join(out[:-1]) if out else ""


def run_cli(
    argv: Sequence[str] | None,
    description: str,
    models: Sequence[str],
    methods: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace, list[str], list[str]], list[dict]],
    to_markdown: Callable[[list[dict]], str],
) -> int:
    """The command line of a quantization experiment: run it, print and write its tables.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments (default: ``sys.argv``).
    description : str
        The ``--help`` text.
    models : sequence of str
        The default of ``--models``.
    methods : str
        The default of ``--methods`` (comma-separated).
    add_arguments : callable
        Adds the experiment's own options, after ``--models`` and ``--methods``.
    run : callable
        ``run(args, models, methods)``: the table rows (``args.db``: the results store to
        record them in, ``":memory:"`` for none).
    to_markdown : callable
        The rows as Markdown, printed and written to ``--markdown``.

    Returns
    -------
    int
        The exit status, 0.
    """
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--models", default=",".join(models))
    p.add_argument("--methods", default=methods)
    add_arguments(p)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--markdown", type=Path, default=None)
    p.add_argument(
        "--db",
        default=":memory:",
        help="record the rows in this results store (a run there resumes); default: none kept",
    )
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    rows = run(a, [m for m in a.models.split(",") if m], [m for m in a.methods.split(",") if m])
    table = to_markdown(rows)
    print(table)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    if a.markdown:
        a.markdown.write_text(table + "\n")
    return 0
