"""The 2:4 + int4 (or int8) accuracy experiment: joint SparseGPT quantization against prune-then-round.

Run it with ``python -m explorer.experiments.int4`` (``--precision int8`` for int8). For each
shipped model it evaluates four configurations of the bundle's ``filter_fn`` layers, each from
the dense weights:

* ``dense``;
* ``2:4``: SparseGPT at 2:4, kept weights left in the model's float dtype;
* ``2:4 + int4 joint``: SparseGPT at 2:4 with the kept weights quantized inside its column loop
  (``prune(quantize="int4")``, group-wise symmetric int4, error feedback);
* ``2:4 then int4 RTN``: the ``2:4`` model with every kept weight rounded to nearest on its
  group's grid (:func:`explorer.groupquant.quantize_rtn`).

With ``precision="int8"`` the same two with group-wise symmetric int8 weights (codes in
[-127, 127]): weight-only, the activations stay in the model's float dtype, which is what the
explorer's int8 decode kernel computes, not the int8 x int8 product of ``sparsify(dtype=int8)``.

With ``dense_quant=True`` (``--dense``) two dense ones too, nothing pruned: ``int4 dense GPTQ``
(SparseGPT's loop quantizing with error feedback and pruning nothing, pattern
``unstructured:0``: GPTQ with its act-order in whole groups) and ``int4 dense RTN`` (every
weight rounded to nearest on its group's grid), the baselines the int4 2:4 rows are weighed
against on the trade-off plot.

With ``admm=True`` (``--admm``) two more, each SparseGPT followed by the ADMM weight update
(``prune(update="admm")``): ``2:4 + ADMM`` in float, and ``2:4 + int4 joint + ADMM``, whose
update keeps the joint step's mask, scales and grid
(:func:`~explorer.pruning.admm.admm_update_on_grid`). With ``permute=True`` (``--permute``)
every pruned configuration first reorders the input channels (``prune(permute=True)``, its
default time budget): the RTN rows round the permuted float model.

Calibrated runs get the model's calibration batches (:data:`~explorer.experiments.settings.DEFAULTS`,
seed 0). The group size is the largest multiple of 4 up to ``--group-size`` that divides every
pruned layer's ``in_features`` (recorded in each row). With ``db=`` (``--db``) the rows also
go to a results store (:func:`store_rows`: ``dense`` and ``prune`` rows, the quantized ones
with ``quant``), where the report and the dashboard place them as int4 points
(:mod:`explorer.results.quantized_points`); each run appends its rows.

Examples
--------
>>> rows = run(["digits-mlp"], progress=False)
>>> [r["config"] for r in rows]
['dense', '2:4', '2:4 + int4 joint', '2:4 then int4 RTN']
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from explorer.dtypes import dtype_name
from explorer.experiments.settings import model_settings
from explorer.groupquant import quantize_rtn
from explorer.models import load
from explorer.pruning import prune
from explorer.results.store import ResultStore

__all__ = ["PRECISIONS", "common_group_size", "main", "run", "store_rows", "to_markdown"]

#: The weight precisions the experiment quantizes to.
PRECISIONS = ("int4", "int8")

#: Each quantized configuration's ``quant`` in the results store: int4 as before; int8 is
#: weight-only here, told apart from the int8 weights-and-activations rows of other experiments.
_QUANT = {
    "2:4 + int4 joint": "int4",
    "2:4 + int4 joint + ADMM": "int4",
    "2:4 then int4 RTN": "int4-rtn",
    "2:4 + int8 joint": "int8-weights",
    "2:4 + int8 joint + ADMM": "int8-weights",
    "2:4 then int8 RTN": "int8-weights-rtn",
    "int4 dense GPTQ": "int4",
    "int4 dense RTN": "int4-rtn",
    "int8 dense GPTQ": "int8-weights",
    "int8 dense RTN": "int8-weights-rtn",
}
#: The configurations that prune nothing (``dense`` rows in the results store).
_DENSE = ("dense", "int4 dense GPTQ", "int4 dense RTN", "int8 dense GPTQ", "int8 dense RTN")
#: The configurations whose pruning ended with the ADMM weight update (``--admm``).
_ADMM = ("2:4 + ADMM", "2:4 + int4 joint + ADMM", "2:4 + int8 joint + ADMM")


def common_group_size(widths: Sequence[int], largest: int = 128) -> int:
    """The largest multiple of 4 up to ``largest`` dividing every width.

    Parameters
    ----------
    widths : sequence of int
        The layers' widths (``in_features``).
    largest : int, default 128
        The largest group size allowed.

    Returns
    -------
    int
        The group size.

    Raises
    ------
    ValueError
        When no multiple of 4 divides them all.

    Examples
    --------
    >>> common_group_size([576, 1536]), common_group_size([784, 200])
    (96, 8)
    """
    g = 0
    for w in widths:
        g = math.gcd(g, int(w))
    for size in range(min(largest, g) - min(largest, g) % 4, 0, -4):
        if g % size == 0:
            return size
    raise ValueError(f"no multiple of 4 divides every pruned layer's in_features {sorted(widths)}")


def store_rows(
    rows: Sequence[dict],
    dtype: str = "float32",
    higher_is_better: bool = True,
    calibration_samples: int | None = None,
    permute: bool = False,
) -> list[dict]:
    """The experiment's rows as results-store rows (``kind``, ``config``, ``metrics``).

    ``dense`` is a ``dense`` row, and so are the quantized dense ones (with ``quant``: ``"int4"``
    by GPTQ, ``"int4-rtn"`` rounded); the 2:4 configurations are ``prune`` rows of SparseGPT
    on the bundle's layers (``layers="all"``), the quantized ones with ``quant`` (``"int4"``:
    joint, ``"int4-rtn"``: rounded after pruning; ``"int8-weights"`` and
    ``"int8-weights-rtn"`` likewise for int8) and their ``group_size``, those with the ADMM
    update with ``update="admm"``.

    Parameters
    ----------
    rows : sequence of dict
        Rows of :func:`run` (one model or several).
    dtype : str, default "float32"
        The dtype the model was evaluated in.
    higher_is_better : bool, default True
        The direction of the models' metric.
    calibration_samples : int, optional
        The calibration samples SparseGPT was given.
    permute : bool, default False
        Whether the channels were permuted before pruning (``permute=True`` on the rows).

    Returns
    -------
    list of dict
        Ready for :meth:`~explorer.results.store.ResultStore.record_many`.

    Examples
    --------
    >>> row = dict(model="m", metric="accuracy", config="2:4 + int4 joint", value=0.9,
    ...            group_size=64, prune_seconds=1.5)
    >>> entry = store_rows([row])[0]
    >>> entry["kind"], entry["config"]["quant"], entry["metrics"]["accuracy"]
    ('prune', 'int4', 0.9)
    """
    out = []
    for r in rows:
        kind = "dense" if r["config"] in _DENSE else "prune"
        extra = {"quant": _QUANT[r["config"]]} if r["config"] in _QUANT else {}
        config = {"model": r["model"], "dtype": dtype, "experiment": "int4", **extra}
        if kind == "prune":
            config.update(method="sparsegpt", pattern="2:4", layers="all", seed=0)
            if r["config"] in _ADMM:
                config["update"] = "admm"
            if permute:
                config["permute"] = True
            if calibration_samples is not None:
                config["calibration_samples"] = calibration_samples
        if extra:
            config["group_size"] = r["group_size"]
        metrics = {"metric": r["metric"], r["metric"]: r["value"]}
        metrics["higher_is_better"] = higher_is_better
        if r.get("prune_seconds") is not None:
            metrics["prune_seconds"] = r["prune_seconds"]
        out.append({"kind": kind, "config": config, "metrics": metrics})
    return out


def run(
    models: Sequence[str] = ("fashion-mlp",),
    group_size: int = 128,
    progress: bool = True,
    db: str | Path | ResultStore | None = None,
    precision: str = "int4",
    admm: bool = False,
    permute: bool = False,
    dense_quant: bool = False,
) -> list[dict]:
    """Measure dense, 2:4, 2:4 + int4 joint and 2:4 then int4 RTN for each model (or int8).

    Parameters
    ----------
    models : sequence of str, default ("fashion-mlp",)
        Names of the models to load.
    group_size : int, default 128
        The largest int4 group size; each model uses :func:`common_group_size` of its pruned
        layers' widths up to it.
    progress : bool, default True
        Show pruning progress bars.
    db : path or ResultStore, optional
        Also record each model's rows there (:func:`store_rows`), appended once the model is
        done; a store passed in is left open. None records nothing.
    precision : {"int4", "int8"}, default "int4"
        The weights' precision (see the module's docstring).
    admm : bool, default False
        Also measure SparseGPT followed by the ADMM update, in float and jointly quantized.
    permute : bool, default False
        Permute the input channels before every pruning (see the module's docstring).
    dense_quant : bool, default False
        Also the dense model quantized with nothing pruned, by GPTQ and rounded to nearest.

    Returns
    -------
    list of dict
        One row per (model, config): the headline metric's ``value``, the precision, the
        group size and the pruning seconds.

    Raises
    ------
    ValueError
        An unknown ``precision``, before anything is loaded.
    """
    if precision not in PRECISIONS:
        raise ValueError(
            f"precision {precision!r} unknown; expected one of {PRECISIONS}. "
            "Hint: --precision int4 or --precision int8."
        )
    store = db if isinstance(db, ResultStore) or db is None else ResultStore(db)
    try:
        return _run(models, group_size, progress, store, precision, admm, permute, dense_quant)
    finally:
        if store is not None and store is not db:
            store.close()


def _run(
    models,
    group_size: int,
    progress: bool,
    store: ResultStore | None,
    precision: str,
    admm: bool,
    permute: bool,
    dense_quant: bool = False,
) -> list[dict]:
    rows: list[dict] = []
    for name in models:
        settings = model_settings(name)
        bundle = load(name, **settings["load"])
        calib = bundle.calibration(settings["calibration"], seed=0)
        layers = [
            m
            for f, m in bundle.model.named_modules()
            if isinstance(m, torch.nn.Linear)
            and (bundle.filter_fn is None or bundle.filter_fn(m, f))
        ]
        g = common_group_size([m.in_features for m in layers], group_size)

        def row(config: str, model: torch.nn.Module, seconds: float | None) -> dict:
            return _row(bundle, name, g, config, model, seconds, precision, permute)  # noqa: B023

        rows.append(row("dense", bundle.model, None))
        if dense_quant:
            rows += _dense_quantized(bundle, calib, g, precision, progress, row)
        # 1. SparseGPT 2:4, then the same model rounded to nearest on the int4 (int8) grid
        plain = copy.deepcopy(bundle.model)
        started = time.perf_counter()
        result = prune(plain, "sparsegpt", "2:4", calib, bundle.filter_fn, progress=progress,
                       permute=permute)  # fmt: skip
        plain_seconds = time.perf_counter() - started
        rows.append(row("2:4", plain, plain_seconds))
        with torch.no_grad():
            for fqn in result.layers:
                mod = plain.get_submodule(fqn)
                deq, _ = quantize_rtn(mod.weight, result.masks[fqn], precision, g)
                mod.weight.copy_(deq)
        rows.append(row(f"2:4 then {precision} RTN", plain, plain_seconds))
        del plain
        # 2. SparseGPT 2:4 with the quantization inside the column loop
        joint = copy.deepcopy(bundle.model)
        started = time.perf_counter()
        prune(joint, "sparsegpt", "2:4", calib, bundle.filter_fn, progress=progress,
              quantize=precision, group_size=g, permute=permute)  # fmt: skip
        rows.insert(-1, row(f"2:4 + {precision} joint", joint, time.perf_counter() - started))
        del joint
        if admm:
            # 3. the same two, each followed by the ADMM update (on the grid when quantized)
            for config, quantized in (("2:4 + ADMM", {}),
                                      (f"2:4 + {precision} joint + ADMM",
                                       {"quantize": precision, "group_size": g})):  # fmt: skip
                updated = copy.deepcopy(bundle.model)
                started = time.perf_counter()
                prune(updated, "sparsegpt", "2:4", calib, bundle.filter_fn, progress=progress,
                      update="admm", permute=permute, **quantized)  # fmt: skip
                rows.insert(-1, row(config, updated, time.perf_counter() - started))
                del updated
        if store is not None:
            dtype = dtype_name(next(bundle.model.parameters()).dtype)
            mine = [r for r in rows if r["model"] == name]
            entries = store_rows(
                mine, dtype, bundle.higher_is_better, settings["calibration"], permute
            )
            store.record_many(entries)
    return rows


def _dense_quantized(bundle, calib, g: int, precision: str, progress: bool, row) -> list[dict]:
    """The dense model quantized, nothing pruned: GPTQ (SparseGPT's loop), then rounded."""
    gptq = copy.deepcopy(bundle.model)
    started = time.perf_counter()
    prune(gptq, "sparsegpt", "unstructured:0", calib, bundle.filter_fn, progress=progress,
          quantize=precision, group_size=g)  # fmt: skip
    out = [row(f"{precision} dense GPTQ", gptq, time.perf_counter() - started)]
    del gptq
    rounded = copy.deepcopy(bundle.model)
    with torch.no_grad():
        for fqn, mod in rounded.named_modules():
            if isinstance(mod, torch.nn.Linear) and (
                bundle.filter_fn is None or bundle.filter_fn(mod, fqn)
            ):
                keep = torch.ones_like(mod.weight, dtype=torch.bool)
                mod.weight.copy_(quantize_rtn(mod.weight, keep, precision, g)[0])
    out.append(row(f"{precision} dense RTN", rounded, None))
    return out


def _row(
    bundle,
    name: str,
    g: int,
    config: str,
    model,
    seconds: float | None,
    precision: str,
    permute: bool,
) -> dict:
    value = float(bundle.evaluate(model)[bundle.metric])
    return {"model": name, "metric": bundle.metric, "config": config, "value": value,
            "precision": precision, "group_size": g, "prune_seconds": seconds,
            "permute": permute}  # fmt: skip


def to_markdown(rows: list[dict]) -> str:
    """One table per model.

    Parameters
    ----------
    rows : list of dict
        The rows of :func:`run`.

    Returns
    -------
    str
        The markdown tables.

    Examples
    --------
    >>> print(to_markdown([dict(model="m", metric="accuracy", config="dense", value=0.9,
    ...                         group_size=64, prune_seconds=None)]).splitlines()[4])
    | dense | 0.900 | - |
    """
    out: list[str] = []
    for name in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == name]
        metric = mine[0]["metric"]
        permuted = ", channels permuted" if mine[0].get("permute") else ""
        out += [
            f"**{name}** ({metric}, {mine[0].get('precision', 'int4')} group size "
            f"{mine[0]['group_size']}{permuted})",
            "",
            "| configuration | value | seconds to prune |",
            "|---|---:|---:|",
        ]
        for r in mine:
            v = r["value"]
            text = f"{v:,.2f}" if metric == "perplexity" else f"{v:.3f}"
            secs = "-" if r["prune_seconds"] is None else f"{r['prune_seconds']:.1f}"
            out.append(f"| {r['config']} | {text} | {secs} |")
        out.append("")
    return "\n".join(out[:-1]) if out else ""


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m explorer.experiments.int4 [--models ...] [--admm] [--dense]``.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments (default: ``sys.argv``).

    Returns
    -------
    int
        The exit status, 0.
    """
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="fashion-mlp")
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--precision", default="int4", choices=PRECISIONS, help="the weights'")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--db", default=None, help="also record the rows in this results store")
    p.add_argument("--admm", action="store_true", help="also SparseGPT + the ADMM update")
    p.add_argument("--permute", action="store_true", help="permute channels before pruning")
    p.add_argument("--dense", action="store_true", help="also int4 dense: GPTQ and rounded")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    rows = run(
        models, a.group_size, not a.no_progress, a.db, a.precision, a.admm, a.permute, a.dense
    )
    if a.json is not None:
        a.json.write_text(json.dumps(rows, indent=1))
    print(to_markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
