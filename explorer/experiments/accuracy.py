"""The accuracy experiment: every pruning method at 2:4, 4:8 and 50% unstructured on real models.

Run it with ``python -m explorer.experiments.accuracy``. For each model it evaluates the dense
model, then for every pattern and method prunes the bundle's ``filter_fn`` layers (calibrated
methods get the same seeded calibration batches), evaluates, records the pruning time, and
restores the dense weights. ``fashion-mlp`` is also evaluated after masked fine-tuning.

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
import datetime
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from explorer.results.markdown.accuracy import write_json, write_markdown
from explorer.results.store.provenance import machine as store_machine

__all__ = ["DEFAULTS", "Results", "Row", "main", "run"]

METHODS = ("random", "magnitude", "weightnorm", "wanda", "sparsegpt")
PATTERNS = ("2:4", "4:8", "unstructured:0.5")
DEFAULT_MODELS = ("minilm", "smollm2", "fashion-mlp")
#: Variants: "" (the method alone), "permute", "admm", "permute+admm".
VARIANTS = ("",)
ALL_VARIANTS = ("", "permute", "admm", "permute+admm")

#: Masked distillation after pruning (``--recovery-minutes``): training inputs and optimiser.
RECOVERY: dict[str, dict[str, Any]] = {
    "minilm": {"samples": 1024, "seed": 1, "lr": 1e-4, "train": "masked"},
    "smollm2": {"samples": 512, "seed": 1, "lr": 1e-4, "train": "masked"},
}

#: Per-model settings of the full run: loader options, calibration samples, fine-tuning.
DEFAULTS: dict[str, dict[str, Any]] = {
    "digits-mlp": {"load": {}, "calibration": 512, "finetune": {"steps": 100, "lr": 1e-3}},
    "fashion-mlp": {"load": {}, "calibration": 1024, "finetune": {"steps": 100, "lr": 1e-3}},
    "minilm": {"load": {"n_eval": 300}, "calibration": 256, "finetune": None},
    "smollm2": {"load": {"n_eval": 16, "seq_len": 256}, "calibration": 16, "finetune": None},
}


@dataclass(frozen=True)
class Row:
    """One measurement: a model pruned by one method to one pattern (``dense``: not pruned)."""

    model: str
    method: str
    pattern: str
    metric: str
    value: float
    metrics: dict[str, float]
    prune_seconds: float
    eval_seconds: float
    density: float
    finetuned: float | None = None
    finetune_seconds: float | None = None
    error: str | None = None
    higher_is_better: bool = True
    variant: str = ""
    permute_seconds: float | None = None
    update_seconds: float | None = None
    permute_gain: float | None = None
    finetune_steps: int | None = None
    recovered: bool = False

    @property
    def label(self) -> str:
        """The method with its variant, e.g. ``"sparsegpt + permute + admm"``."""
        parts = [self.method, *filter(None, self.variant.split("+"))]
        return " + ".join(parts + (["recovery"] if self.recovered else []))


_FLOATS = {"value", "prune_seconds", "eval_seconds", "density"}


@dataclass
class Results:
    """All rows of a run plus where and how it ran."""

    rows: list[Row] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {"meta": self.meta, "rows": [asdict(r) for r in self.rows]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Results:
        """Inverse of :meth:`to_dict` (``null`` numbers come back as NaN)."""
        rows = []
        for row in data["rows"]:
            fixed = {k: (math.nan if v is None and k in _FLOATS else v) for k, v in row.items()}
            rows.append(Row(**fixed))
        return cls(rows=rows, meta=dict(data.get("meta", {})))

    @classmethod
    def merge(cls, parts: Sequence[Results]) -> Results:
        """One result set from runs of different models (their rows and model settings)."""
        if not parts:
            raise ValueError("merge needs at least one Results")
        meta = dict(parts[0].meta)
        meta["models"] = {}
        meta["total_seconds"] = 0.0
        for part in parts:
            for model, info in part.meta.get("models", {}).items():
                # a later run's settings add to an earlier one's (e.g. its recovery settings)
                known = meta["models"].setdefault(model, {})
                known.update({k: v for k, v in info.items() if v is not None or k not in known})
            meta["total_seconds"] += float(part.meta.get("total_seconds", 0.0))
        meta["total_seconds"] = round(meta["total_seconds"], 1)
        meta["runs"] = [
            run
            for part in parts
            for run in part.meta.get("runs")
            or [{k: part.meta.get(k) for k in ("date", "command", "total_seconds")}]
        ]
        meta["variants"] = list(
            dict.fromkeys(v for part in parts for v in part.meta.get("variants", [""]))
        )
        meta["methods"] = list(
            dict.fromkeys(m for part in parts for m in part.meta.get("methods", []))
        )
        meta["patterns"] = list(
            dict.fromkeys(p for part in parts for p in part.meta.get("patterns", []))
        )
        rows: dict[tuple[str, str, str, str, bool], Row] = {}
        for part in parts:
            for r in part.rows:
                # 1. A row measured twice (e.g. dense in two partial runs) keeps its first value.
                key = (r.model, r.method, r.pattern, r.variant, r.recovered)
                rows.setdefault(key, r)
        return cls(rows=list(rows.values()), meta=meta)

    def __repr__(self) -> str:
        models = sorted({r.model for r in self.rows})
        return f"Results({len(self.rows)} rows, models={models})"


def machine() -> dict[str, Any]:
    """Where the run happens: CPU, cores, threads and library versions.

    The versions and platform come from the store's provenance
    (:func:`explorer.results.store.provenance.machine`); the CPU's model name, the cores and
    the torch threads say how fast a CPU run could be.
    """
    import importlib.metadata as md

    base = store_machine()
    cpu = base["cpu"]
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    try:
        transformers = md.version("transformers")
    except md.PackageNotFoundError:
        transformers = "not installed"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": base["platform"],
        "python": base["python"],
        "torch": base["torch"],
        "transformers": transformers,
        "device": "cpu",
    }


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _evaluate(bundle: Any) -> tuple[dict[str, float], float]:
    start = time.perf_counter()
    values = bundle.evaluate()
    numbers = {k: float(v) for k, v in values.items() if isinstance(v, int | float)}
    numbers.pop("higher_is_better", None)
    return numbers, time.perf_counter() - start


def _recover(
    bundle: Any, teacher: Any, masks: Any, settings: dict[str, Any], progress: bool
) -> tuple[float, float, int]:
    """Masked distillation from the dense teacher; the metric after it, seconds and steps."""
    from explorer.pruning import finetune

    rec = settings["recovery"]
    data = bundle.calibration(rec["samples"], seed=rec["seed"])
    torch.manual_seed(0)
    curve = finetune(
        bundle.model,
        masks,
        data,
        steps=10**9,
        lr=rec["lr"],
        teacher=teacher,
        max_minutes=rec["minutes"],
        train=rec["train"],
        progress=progress,
    )
    return float(bundle.evaluate()[bundle.metric]), curve.seconds, curve.steps


def _run_model(
    name: str,
    methods: Sequence[str],
    patterns: Sequence[str],
    settings: dict[str, Any],
    results: Results,
    progress: bool,
    on_row: Any,
    variants: Sequence[str] = VARIANTS,
) -> None:
    import copy

    from explorer.models import load
    from explorer.patterns import Pattern
    from explorer.pruning import METHODS as INFO
    from explorer.pruning import finetune, prune

    bundle = load(name, **settings["load"])
    model = bundle.model
    dense_state = _snapshot(model)
    ft = settings.get("finetune")
    teacher = copy.deepcopy(model).eval() if settings.get("recovery") else None
    metrics, secs = _evaluate(bundle)
    results.meta.setdefault("models", {})[name] = {
        "description": bundle.description,
        "options": bundle.options,
        "calibration_samples": settings["calibration"],
        "finetune": ft,
        "recovery": settings.get("recovery"),
        "prunable_layers": len(bundle.prunable),
    }
    hib = bundle.higher_is_better
    dense = Row(
        name,
        "dense",
        "-",
        bundle.metric,
        metrics[bundle.metric],
        metrics,
        0.0,
        secs,
        1.0,
        higher_is_better=hib,
    )
    results.rows.append(dense)
    on_row(dense)
    calibration = bundle.calibration(settings["calibration"], seed=0)
    # 1. One fixed list of fine-tuning batches, so every method is fine-tuned on the same data
    #    in the same order (an epoch object would reshuffle on every pass).
    ft_data = list(bundle.train_data) if ft and bundle.train_data is not None else None
    runs = [
        (p, m, v)
        for p in patterns
        for m in methods
        for v in variants
        if "permute" not in v or Pattern.parse(p).kind == "nm"
    ]
    for pattern, method, variant in tqdm(runs, desc=name, disable=not progress):
        steps = set(variant.split("+")) - {""}
        update = "admm" if "admm" in steps else None
        needs = INFO[method].needs_calibration or update is not None
        cal = calibration if needs else None
        try:
            result = prune(
                model,
                method,
                pattern,
                calibration=cal,
                filter_fn=bundle.filter_fn,
                progress=progress,
                seed=0,
                permute="permute" in steps,
                update=update,
            )
        except (ValueError, RuntimeError) as exc:
            row = Row(
                name,
                method,
                pattern,
                bundle.metric,
                math.nan,
                {},
                math.nan,
                0.0,
                math.nan,
                error=f"{type(exc).__name__}: {exc}",
                higher_is_better=hib,
                variant=variant,
            )
            results.rows.append(row)
            on_row(row)
            model.load_state_dict(dense_state)
            continue
        metrics, secs = _evaluate(bundle)
        tuned = tuned_secs = tuned_steps = None
        if ft_data is not None:
            torch.manual_seed(0)
            curve = finetune(model, result.masks, ft_data, progress=progress, **ft)
            tuned = float(bundle.evaluate()[bundle.metric])
            tuned_secs, tuned_steps = curve.seconds, curve.steps
        elif teacher is not None:
            tuned, tuned_secs, tuned_steps = _recover(
                bundle, teacher, result.masks, settings, progress
            )
        perm = result.permutation
        row = Row(
            name,
            method,
            pattern,
            bundle.metric,
            metrics[bundle.metric],
            metrics,
            result.seconds,
            secs,
            result.density,
            tuned,
            tuned_secs,
            higher_is_better=hib,
            variant=variant,
            permute_seconds=None if perm is None else perm.seconds,
            update_seconds=result.update_seconds if update else None,
            permute_gain=None if perm is None else _finite(perm.mean_gain),
            finetune_steps=tuned_steps,
            recovered=teacher is not None and ft_data is None,
        )
        results.rows.append(row)
        on_row(row)
        model.load_state_dict(dense_state)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def run(
    models: Sequence[str] = DEFAULT_MODELS,
    methods: Sequence[str] = METHODS,
    patterns: Sequence[str] = PATTERNS,
    settings: dict[str, dict[str, Any]] | None = None,
    progress: bool = True,
    on_row: Any = None,
    results: Results | None = None,
    variants: Sequence[str] = VARIANTS,
    recovery_minutes: float | None = None,
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

    Returns
    -------
    Results
    """
    from explorer.models import MODELS

    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise ValueError(f"unknown models {unknown}; expected names from {', '.join(MODELS)}")
    bad = [v for v in variants if v not in ALL_VARIANTS]
    if bad:
        raise ValueError(f"unknown variants {bad}; expected some of {ALL_VARIANTS}")
    results = Results() if results is None else results
    results.meta.update(machine())
    results.meta.update(
        methods=list(methods), patterns=list(patterns), variants=list(variants), seed=0
    )
    start = time.perf_counter()
    for name in models:
        merged = {**DEFAULTS.get(name, {"load": {}, "calibration": 128, "finetune": None})}
        if recovery_minutes and name in RECOVERY:
            merged["recovery"] = {**RECOVERY[name], "minutes": recovery_minutes}
        merged.update((settings or {}).get(name, {}))
        _run_model(
            name,
            methods,
            patterns,
            merged,
            results,
            progress,
            on_row or (lambda row: None),
            variants,
        )
    results.meta["total_seconds"] = round(time.perf_counter() - start, 1)
    return results


def split(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``."""
    return [x.strip() for x in text.split(",") if x.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m explorer.experiments.accuracy [--models ...] [--out ...]``."""
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
    )
    write_markdown(results, out)
    write_json(results, out.with_suffix(".json"))
    out.with_suffix(".partial.json").unlink(missing_ok=True)
    print(f"wrote {out} and {out.with_suffix('.json')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
