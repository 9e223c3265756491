"""The sparse + int8 accuracy experiment: what int8 adds to 2:4 pruning on the shipped models.

Run it with ``python -m explorer.experiments.int8``. Each model is a named grid of sweep cells
(:func:`explorer.sweeps.named.model_grid` with ``int8=True``): for each method it evaluates the
dense model, the dense model in int8, the 2:4-pruned model, and the 2:4-pruned model in int8:
weights quantized symmetrically per output channel (zeros stay zeros), activations dynamically
per token, exactly as ``sparsify(model, dtype=torch.int8)`` runs them. The int8 numbers come from
:class:`explorer.gpu.modules.quant.Int8ReferenceLinear`, which sums the integer products exactly on
any device; with ``--gpu`` the pruned model is also run through the real cuSPARSELt int8 kernel and
both are reported side by side. Results go to a Markdown table and a JSON file.

Examples
--------
>>> rows = run(["digits-mlp"], methods=["magnitude"], progress=False)
>>> sorted({r["config"] for r in rows})
['2:4', '2:4 + int8', 'dense', 'dense + int8']
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from explorer.experiments.quant_grid import grid_table, markdown_tables, run_cli, run_grid
from explorer.models import MODELS
from explorer.results.store import ResultStore

__all__ = ["main", "run", "to_markdown"]

DEFAULT_MODELS = tuple(MODELS)  # every bundled model

_CONFIGS = {None: "", "int8": " + int8", "int8-gpu": " + int8 (GPU kernel)"}


def run(
    models: Sequence[str] = DEFAULT_MODELS,
    methods: Sequence[str] = ("magnitude", "sparsegpt"),
    gpu: bool = False,
    progress: bool = True,
    db: str | Path | ResultStore = ":memory:",
) -> list[dict]:
    """Measure dense, dense + int8, 2:4 and 2:4 + int8 for each model and method.

    Parameters
    ----------
    models : sequence of str
        Shipped model names (see :mod:`explorer.models`).
    methods : sequence of str
        Pruning methods (calibrated ones get the model's calibration batches).
    gpu : bool
        Also run the 2:4 + int8 model through the cuSPARSELt int8 kernel (needs a GPU).
    progress : bool
        Show a progress bar per model.
    db : path or ResultStore
        Where the store rows go; a file keeps them, so the same run resumes there.

    Returns
    -------
    list of dict
        One row per (model, method, config) with the headline metric's ``value``.
    """
    return run_grid("int8", models, methods, _table, progress, db, int8=True, gpu=gpu)


def _table(rows: list[Any]) -> list[dict]:
    return grid_table(rows, _CONFIGS, _columns)


def _columns(r: Any, quant: str | None, metric: str) -> dict:
    # A quantized row counts its layers; a GPU row names its device.
    row = {"value": float(r.metrics.get(metric, float("nan")))}
    row.update((k, r.metrics[k]) for k in ("layers", "prune_seconds") if quant and k in r.metrics)
    if quant == "int8-gpu":
        row["device"] = r.provenance.get("gpu")
    return row


def to_markdown(rows: list[dict]) -> str:
    """One table per model: configurations as rows, the headline metric as the value.

    Parameters
    ----------
    rows : list of dict
        The experiment's rows (``model``, ``metric``, ``method``, ``config``, ``value``).

    Returns
    -------
    str
        The markdown tables.

    Examples
    --------
    >>> print(to_markdown([dict(model="m", metric="accuracy", method="-", config="dense",
    ...                         value=0.9)]).splitlines()[4])
    | - | dense | 0.900 |
    """
    return markdown_tables(rows, ["method", "configuration"], lambda r: [r["method"], r["config"]])


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", action="store_true", help="also run the cuSPARSELt int8 kernel")


def _run(a: argparse.Namespace, models: list[str], methods: list[str]) -> list[dict]:
    return run(models, methods, gpu=a.gpu, progress=not a.no_progress, db=a.db)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m explorer.experiments.int8 [--models ...] [--gpu]``.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments (default: ``sys.argv``).

    Returns
    -------
    int
        The exit status.
    """
    description = __doc__.splitlines()[0]
    return run_cli(
        argv, description, DEFAULT_MODELS, "magnitude,sparsegpt", _add_arguments, _run, to_markdown
    )


if __name__ == "__main__":
    raise SystemExit(main())
