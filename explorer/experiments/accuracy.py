"""The accuracy experiment: every pruning method at 2:4, 4:8 and 50% unstructured on real models.

Run it with ``python -m explorer.experiments.accuracy``. Each model is a named grid of sweep
cells (:func:`explorer.sweeps.named.model_grid`): the dense model, then every pattern and method
pruning a copy of the bundle's ``filter_fn`` layers (calibrated methods get the same seeded
calibration batches), evaluated, with its pruning time. The MLPs are also evaluated after
masked fine-tuning. The rows go to a results store (``--db``; in memory by default), so a
stopped run given a store file resumes where it stopped.

Variants add the newer steps to any method: ``permute`` reorders input channels before the mask
is chosen (N:M patterns only), ``admm`` re-optimises the kept weights after it, and
``permute+admm`` does both (``--variants``). ``--recovery-minutes`` follows each pruned run of a
transformer with masked distillation from the dense model for at most that many minutes, on
training text (stdlib docstrings, seed 1) kept apart from the evaluation text. The results go to
a markdown table (between markers, so the prose around it survives a rerun) and a JSON file next
to it.

Examples
--------
>>> from explorer.experiments.accuracy import run
>>> results = run(["digits-mlp"], methods=["magnitude"], patterns=["2:4"], progress=False)
>>> [row.method for row in results.rows]
['dense', 'magnitude']
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from explorer.experiments.settings import DEFAULTS, model_settings, run_facts
from explorer.experiments.table import Results, Row, table_rows
from explorer.results.markdown.accuracy import write_json, write_markdown
from explorer.results.store import ResultStore
from explorer.sweeps import named
from explorer.sweeps.named import model_grid, run_named

__all__ = ["main", "run"]

METHODS = ("random", "magnitude", "weightnorm", "wanda", "sparsegpt")
PATTERNS = ("2:4", "4:8", "unstructured:0.5")
DEFAULT_MODELS = ("minilm", "smollm2", "fashion-mlp")
#: Variants run by default: the method alone (see :data:`ALL_VARIANTS` for the others).
VARIANTS = ("",)
ALL_VARIANTS = named.VARIANTS


def run(
    models: Sequence[str] = DEFAULT_MODELS,
    methods: Sequence[str] = METHODS,
    patterns: Sequence[str] = PATTERNS,
    settings: dict[str, dict[str, Any]] | None = None,
    progress: bool = True,
    on_row: Callable[[Row], None] | None = None,
    results: Results | None = None,
    variants: Sequence[str] = VARIANTS,
    recovery_minutes: float | None = None,
    db: str | Path | ResultStore = ":memory:",
) -> Results:
    """Run the experiment and return its rows.

    Parameters
    ----------
    models : sequence of str
        Names for :func:`explorer.models.load`.
    methods : sequence of str
        Pruning methods (``dense`` is always measured first).
    patterns : sequence of str
        Sparsity patterns.
    settings : dict, optional
        Per-model overrides of :data:`DEFAULTS` (keys ``load``, ``calibration``, ``finetune``,
        ``recovery``).
    progress : bool
        Show progress bars.
    on_row : callable, optional
        Called with each :class:`Row` as it is measured (e.g. to save partial results).
    results : Results, optional
        Filled in place as the run goes (rows and settings), e.g. for ``on_row`` to save.
    variants : sequence of str
        Any of ``""`` (the method alone), ``"permute"``, ``"admm"``, ``"permute+admm"``;
        permutation variants run only for N:M patterns.
    recovery_minutes : float, optional
        Follow every pruned run of a model listed in :data:`RECOVERY` with masked distillation
        from the dense model for at most this many minutes.
    db : path or ResultStore
        Where the rows go; a file keeps them, so the same run resumes there.

    Returns
    -------
    Results
    """
    from explorer.models import MODELS

    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise ValueError(f"unknown models {unknown}; expected names from {', '.join(MODELS)}")
    chosen = {
        name: model_settings(name, (settings or {}).get(name), recovery_minutes) for name in models
    }
    grids = {
        name: model_grid(
            name,
            methods,
            patterns,
            variants,
            calibration_samples=s["calibration"],
            load=s["load"],
            finetune=s.get("finetune"),
            recovery=s.get("recovery"),
        )
        for name, s in chosen.items()
    }
    results = Results() if results is None else results
    results.meta.update(run_facts())
    results.meta.update(
        methods=list(methods), patterns=list(patterns), variants=list(variants), seed=0
    )

    headline: dict[str, tuple[str, bool]] = {}

    def measured(entries: list[dict]) -> None:
        for row in table_rows(entries, headline):
            results.rows.append(row)
            if on_row is not None:
                on_row(row)

    start = time.perf_counter()
    store = db if isinstance(db, ResultStore) else ResultStore(db)
    try:
        for name, cells in grids.items():
            results.meta.setdefault("models", {})[name] = _model_meta(cells[0].config, chosen[name])
            rows = run_named(f"accuracy-{name}", cells, store, progress, measured)
            results.rows[:] = [r for r in results.rows if r.model != name] + table_rows(rows)
    finally:
        if store is not db:
            store.close()
    results.meta["total_seconds"] = round(time.perf_counter() - start, 1)
    return results


def _model_meta(dense: dict, settings: dict[str, Any]) -> dict[str, Any]:
    from explorer.sweeps.loading import bundle_for

    bundle = bundle_for(dense)
    return {
        "description": bundle.description,
        "options": bundle.options,
        "calibration_samples": settings["calibration"],
        "finetune": settings.get("finetune"),
        "recovery": settings.get("recovery"),
        "prunable_layers": len(bundle.prunable),
    }


def split(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``.

    Parameters
    ----------
    text : str
        Comma-separated items.

    Returns
    -------
    list of str
        The items, stripped, empty ones dropped.
    """
    return [x.strip() for x in text.split(",") if x.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m explorer.experiments.accuracy [--models ...] [--out ...]``.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments (default: ``sys.argv``).

    Returns
    -------
    int
        The exit status, 0.
    """
    parser = argparse.ArgumentParser(
        prog="python -m explorer.experiments.accuracy", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated")
    parser.add_argument("--patterns", default=",".join(PATTERNS), help="comma-separated")
    parser.add_argument("--out", default="docs/accuracy.md", help="markdown file to write")
    parser.add_argument(
        "--variants",
        default="",
        help='comma-separated: "", permute, admm, permute+admm (e.g. ",admm,permute+admm")',
    )
    parser.add_argument(
        "--recovery-minutes",
        type=float,
        default=None,
        help="masked distillation after pruning (transformers), at most this many minutes",
    )
    parser.add_argument("--smollm2-eval", type=int, default=None, help="evaluation windows")
    parser.add_argument(
        "--db", default=":memory:", help="results store to write (a file resumes a stopped run)"
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument(
        "--merge",
        default=None,
        help="comma-separated JSON files of earlier runs: write --out from them, run nothing",
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.merge:
        import json

        parts = [Results.from_dict(json.loads(Path(p).read_text())) for p in split(args.merge)]
        merged = Results.merge(parts)
        write_markdown(merged, out)
        write_json(merged, out.with_suffix(".json"))
        print(f"wrote {out} and {out.with_suffix('.json')}", file=sys.stderr)
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    settings = {}
    if args.smollm2_eval:
        settings["smollm2"] = {"load": {**DEFAULTS["smollm2"]["load"], "n_eval": args.smollm2_eval}}
    partial = Results()
    partial.meta["command"] = "python -m explorer.experiments.accuracy " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )

    def save(row: Row) -> None:
        write_json(partial, out.with_suffix(".partial.json"))
        tuned = "" if row.finetuned is None else f" -> {row.finetuned:.4g}"
        print(
            f"{row.model:12s} {row.pattern:17s} {row.label:28s} {row.metric}={row.value:.4g}"
            f"{tuned} prune {row.prune_seconds:.1f}s",
            file=sys.stderr,
            flush=True,
        )

    results = run(
        split(args.models),
        split(args.methods),
        split(args.patterns),
        settings,
        progress=not args.no_progress,
        on_row=save,
        results=partial,
        variants=[v.strip() for v in args.variants.split(",")],
        recovery_minutes=args.recovery_minutes,
        db=args.db,
    )
    write_markdown(results, out)
    write_json(results, out.with_suffix(".json"))
    out.with_suffix(".partial.json").unlink(missing_ok=True)
    print(f"wrote {out} and {out.with_suffix('.json')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
