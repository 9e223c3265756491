"""Named grids: the accuracy and int8 experiments as grids of sweep cells.

:func:`model_grid` lists one model's cells: its dense baseline, then every pattern x method x
variant pruned (and fine-tuned, distilled or quantized where asked). The cells run through
:func:`explorer.sweeps.runner.run_grid` like any sweep's, so their rows land in the store with
their provenance, and a stopped run resumes where it stopped.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from explorer.results.store import ResultStore, Row
from explorer.results.store.canonical import config_key
from explorer.sweeps.grid import CELL_VERSION, Cell, check_known, prune_cell

__all__ = ["VARIANTS", "model_grid", "run_named"]

#: Steps that can follow a pruning method: "" (the method alone), channel permutation before
#: the mask is chosen (N:M patterns only), an ADMM update of the kept weights after it, or both.
VARIANTS = ("", "permute", "admm", "permute+admm")


def model_grid(
    model: str,
    methods: Sequence[str],
    patterns: Sequence[str],
    variants: Sequence[str] = ("",),
    *,
    calibration_samples: int = 128,
    seed: int = 0,
    load: dict | None = None,
    finetune: dict | None = None,
    recovery: dict | None = None,
    int8: bool = False,
    gpu: bool = False,
    fp8: bool = False,
    dtype: str = "float32",
) -> list[Cell]:
    """One model's experiment cells: dense first, then pattern x method x variant.

    Parameters
    ----------
    model : str
        A bundled model name, or the path of a ``save_pretrained`` folder (then give its text
        file as ``load={"text": "corpus.txt"}``).
    methods, patterns : sequence of str
        Names from :data:`explorer.pruning.METHODS` and :meth:`explorer.patterns.Pattern.parse`.
    variants : sequence of str
        Any of :data:`VARIANTS`; those with ``permute`` are left out for patterns that do not
        depend on channel order.
    calibration_samples, seed : int
        Calibration batches (drawn with ``seed``) for calibrated methods and weight updates.
    load : dict, optional
        Options for :func:`explorer.models.load` (for a folder, those of
        :func:`explorer.models.from_pretrained`).
    finetune : dict, optional
        ``steps`` and ``lr`` of masked fine-tuning after pruning.
    recovery : dict, optional
        Masked distillation from the dense model after pruning (``samples``, ``seed``, ``lr``,
        ``train``, ``minutes``).
    int8, gpu : bool
        Also evaluate every model in int8 (the exact reference), and through the GPU kernel.
    fp8 : bool
        Also evaluate every model in FP8 e4m3 (:mod:`explorer.gpu.modules.fp8`'s reference).
    dtype : str
        The weights' dtype of the dense and pruned rows (``"bfloat16"``: rounded to it).

    Returns
    -------
    list of Cell

    Examples
    --------
    >>> cells = model_grid("digits-mlp", ["magnitude"], ["2:4", "unstructured:0.5"],
    ...                    ["", "permute"])
    >>> [(c.kind, c.config.get("pattern"), c.config.get("permute")) for c in cells]
    [('dense', None, None), ('prune', '2:4', None), ('prune', '2:4', True), ('prune', 'unstructured:0.5', None)]
    """
    from explorer.patterns import Pattern

    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        raise ValueError(f"unknown variants {bad}; expected some of {VARIANTS} (e.g. ['', 'admm'])")
    check_known(model, tuple(methods))
    parsed = [Pattern.parse(p) for p in patterns]
    steps = {"finetune": finetune, "recovery": recovery, "int8": int8, "gpu": gpu and int8}
    steps["fp8"] = fp8
    base = {"model": model, "version": CELL_VERSION, "dtype": dtype}
    base.update((k, v) for k, v in {"load": load, **steps}.items() if v)
    out = [Cell({"cell": "dense", **base})]
    for pattern, method, variant in itertools.product(parsed, methods, variants):
        if "permute" in variant and pattern.kind != "nm":
            continue
        chosen: dict = {"permute": True} if "permute" in variant else {}
        if "admm" in variant:
            chosen["update"] = "admm"
        out.append(
            prune_cell(base, method, pattern.name, "all", calibration_samples, seed, **chosen)
        )
    return out


def run_named(
    label: str,
    cells: list[Cell],
    store: ResultStore,
    progress: bool = True,
    on_rows: Callable[[list[dict]], None] | None = None,
) -> list[Row]:
    """Run a named grid into ``store`` and return its rows in the grid's order.

    The sweep's id is ``label`` and a hash of the cells, so the same grid on the same store
    resumes: finished cells are read back, not run again.

    Parameters
    ----------
    label : str
        The grid's name, the start of the sweep's id.
    cells : list of Cell
        The cells, in order.
    store : ResultStore
        The store the rows go into.
    progress : bool, optional
        Whether to show a progress bar.
    on_rows : callable, optional
        Called with each cell's rows once they are committed.

    Returns
    -------
    list of Row
        The grid's rows, in the order of ``cells``.

    Examples
    --------
    >>> with ResultStore(":memory:") as store:
    ...     rows = run_named("demo", model_grid("digits-mlp", ["magnitude"], ["2:4"]), store,
    ...                      progress=False)
    >>> [(r.kind, r.method, r.status) for r in rows]
    [('dense', None, 'ok'), ('prune', 'magnitude', 'ok')]
    """
    from explorer.sweeps.runner import run_grid

    spec = {"grid": label, "cells": [c.config for c in cells]}
    sweep_id = f"{label}-{config_key(spec, 10)}"
    result = run_grid(sweep_id, cells, spec, store, progress, desc=label, on_rows=on_rows)
    order = {c.key: i for i, c in enumerate(cells)}

    def place(row: Row) -> tuple[int, int]:
        key, _, extra = str(row.cell_key).partition("#")
        return order.get(key, len(order)), int(extra or 0)

    return sorted(result.rows(store), key=place)
