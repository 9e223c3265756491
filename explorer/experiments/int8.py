"""The sparse + int8 accuracy experiment: what int8 adds to 2:4 pruning on the shipped models.

Run it with ``python -m explorer.experiments.int8``. Each model is a named grid of sweep cells
(:func:`explorer.sweeps.named.model_grid` with ``int8=True``): for each method it evaluates the
dense model, the dense model in int8, the 2:4-pruned model, and the 2:4-pruned model in int8:
weights quantized symmetrically per output channel (zeros stay zeros), activations dynamically
per token, exactly as ``sparsify(model, dtype=torch.int8)`` runs them. The int8 numbers come from
:class:`explorer.gpu.quant.Int8ReferenceLinear`, which sums the integer products exactly on any
device; with ``--gpu`` the pruned model is also run through the real cuSPARSELt int8 kernel and
both are reported side by side. Results go to a Markdown table and a JSON file.

Examples
--------
>>> rows = run(["digits-mlp"], methods=["magnitude"], progress=False)
>>> sorted({r["config"] for r in rows})
['2:4', '2:4 + int8', 'dense', 'dense + int8']
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from explorer.experiments.settings import model_settings
from explorer.models import MODELS
from explorer.results.store import ResultStore
from explorer.sweeps.named import model_grid, run_named
from explorer.sweeps.steps import OnDevice

__all__ = ["OnDevice", "main", "run", "to_markdown"]

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
                load=settings["load"],
                int8=True,
                gpu=gpu,
            )
            out += _table(run_named(f"int8-{name}", cells, store, progress))
    finally:
        if store is not db:
            store.close()
    return out


def _table(rows: list[Any]) -> list[dict]:
    # The dense row names the headline metric; a GPU row names its device.
    metric = next(r.metrics["metric"] for r in rows if r.kind == "dense" and r.status == "ok")
    table = []
    for r in rows:
        quant = r.config.get("quant")
        config = ("dense" if r.kind == "dense" else r.pattern) + _CONFIGS[quant]
        row = {"model": r.model, "metric": metric, "method": r.method or "-", "config": config}
        row["value"] = float(r.metrics.get(metric, float("nan")))
        row.update(
            (k, r.metrics[k]) for k in ("layers", "prune_seconds") if quant and k in r.metrics
        )
        if quant == "int8-gpu":
            row["device"] = r.provenance.get("gpu")
        if r.status != "ok":
            row["error"] = r.error
        table.append(row)
    return table


def to_markdown(rows: list[dict]) -> str:
    """One table per model: configurations as rows, the headline metric as the value.

    Examples
    --------
    >>> print(to_markdown([dict(model="m", metric="accuracy", method="-", config="dense",
    ...                         value=0.9)]).splitlines()[4])
    | - | dense | 0.900 |
    """
    out: list[str] = []
    for name in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == name]
        metric = mine[0]["metric"]
        out += [
            f"**{name}** ({metric})",
            "",
            "| method | configuration | value |",
            "|---|---|---:|",
        ]
        for r in mine:
            v = r["value"]
            text = f"{v:,.1f}" if metric == "perplexity" else f"{v:.3f}"
            text = "error" if r.get("error") else text
            out.append(f"| {r['method']} | {r['config']} | {text} |")
        out.append("")
    return "\n".join(out[:-1]) if out else ""


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m explorer.experiments.int8 [--models ...] [--gpu]``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(DEFAULT_MODELS))
    p.add_argument("--methods", default="magnitude,sparsegpt")
    p.add_argument("--gpu", action="store_true", help="also run the cuSPARSELt int8 kernel")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--markdown", type=Path, default=None)
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    rows = run(
        [m for m in a.models.split(",") if m],
        [m for m in a.methods.split(",") if m],
        gpu=a.gpu,
        progress=not a.no_progress,
    )
    table = to_markdown(rows)
    print(table)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    if a.markdown:
        a.markdown.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
