"""The sparse + FP8 accuracy experiment: what FP8 e4m3 adds to 2:4 pruning on the shipped models.

Run it with ``python -m explorer.experiments.fp8``. Each model is a named grid of sweep cells
(:func:`explorer.sweeps.named.model_grid` with ``fp8=True`` and bfloat16 weights): for each
method it evaluates the dense model, the dense model in FP8, the 2:4-pruned model, and the
2:4-pruned model in FP8: weights quantized per output channel to e4m3 (``max|row| / 448``,
zeros stay zeros), activations dynamically per token, products summed in float32, as
``sparsify(model, dtype="float8_e4m3fn")`` runs them. The FP8 numbers come from
:class:`explorer.gpu.modules.fp8.Fp8ReferenceLinear`, which emulates that on any device. Results go
to a Markdown table and a JSON file.

Examples
--------
>>> rows = run(["digits-mlp"], methods=["magnitude"], progress=False)
>>> sorted({r["config"] for r in rows})
['2:4', '2:4 + FP8', 'dense', 'dense + FP8']
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from explorer.experiments.quant_grid import grid_table, markdown_tables, run_cli, run_grid
from explorer.experiments.settings import model_settings
from explorer.models import MODELS
from explorer.results.store import ResultStore

__all__ = ["main", "run", "to_markdown"]

DEFAULT_MODELS = tuple(MODELS)  # every bundled model

_CONFIGS = {None: "", "fp8": " + FP8"}


def run(
    models: Sequence[str] = DEFAULT_MODELS,
    methods: Sequence[str] = ("magnitude", "wanda"),
    dtype: str = "bfloat16",
    progress: bool = True,
    db: str | Path | ResultStore = ":memory:",
    load: dict[str, dict] | None = None,
) -> list[dict]:
    """Measure dense, dense + FP8, 2:4 and 2:4 + FP8 for each model and method.

    Parameters
    ----------
    models : sequence of str
        Shipped model names (see :mod:`explorer.models`).
    methods : sequence of str
        Pruning methods (calibrated ones get the model's calibration batches).
    dtype : str
        The weights of the rows without FP8 are rounded to this dtype (bfloat16: the dense
        baseline FP8 is compared with on a GPU).
    progress : bool
        Show a progress bar per model.
    db : path or ResultStore
        Where the store rows go; a file keeps them, so the same run resumes there.
    load : dict, optional
        Loader options per model name, over :func:`explorer.experiments.settings.model_settings`
        (e.g. ``{"smollm2": {"n_eval": 4}}``).

    Returns
    -------
    list of dict
        One row per (model, method, config) with the headline metric's ``value``.
    """
    return run_grid("fp8", models, methods, _table, progress, db, load, fp8=True, dtype=dtype)


def _table(rows: list[Any]) -> list[dict]:
    return grid_table(rows, _CONFIGS, _columns)


def _columns(r: Any, quant: str | None, metric: str) -> dict:
    # The weights' dtype, then the value; a quantized row counts its layers.
    row = {"weights": "float8_e4m3fn" if quant else r.config.get("dtype", "float32")}
    row["value"] = float(r.metrics.get(metric, float("nan")))
    row.update((k, r.metrics[k]) for k in ("layers",) if quant and k in r.metrics)
    return row


def to_markdown(rows: list[dict]) -> str:
    """One table per model: configurations as rows, the headline metric as the value.

    Parameters
    ----------
    rows : list of dict
        The experiment's rows (``model``, ``metric``, ``method``, ``config``, ``weights``,
        ``value``, optionally ``layers``).

    Returns
    -------
    str
        The markdown tables.

    Examples
    --------
    >>> print(to_markdown([dict(model="m", metric="accuracy", method="-", config="dense",
    ...                         weights="bfloat16", value=0.9)]).splitlines()[4])
    | - | dense | bfloat16 | - | 0.900 |
    """
    return markdown_tables(
        rows,
        ["method", "configuration", "weights", "FP8 layers"],
        lambda r: [r["method"], r["config"], r["weights"], str(r.get("layers", "-"))],
        right=["FP8 layers"],
    )


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", default="bfloat16", help="weights of the rows without FP8")
    p.add_argument("--n-eval", type=int, default=None, help="held-out items of MiniLM and SmolLM2")


def _run(a: argparse.Namespace, models: list[str], methods: list[str]) -> list[dict]:
    # --n-eval reaches the models whose loader takes it (MiniLM, SmolLM2)
    load = {m: {"n_eval": a.n_eval} for m in models if "n_eval" in model_settings(m)["load"]}
    return run(
        models,
        methods,
        dtype=a.dtype,
        progress=not a.no_progress,
        db=a.db,
        load=load if a.n_eval else None,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m explorer.experiments.fp8 [--models ...] [--methods ...]``.

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
        argv, description, DEFAULT_MODELS, "magnitude,wanda", _add_arguments, _run, to_markdown
    )


if __name__ == "__main__":
    raise SystemExit(main())
