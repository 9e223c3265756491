"""Speed-ups: what was recorded for a weight shape, and the one model speed-up estimate.

:func:`recorded_speed` reads the sparse-versus-dense speed-ups recorded for one weight shape
(layer speed rows and matmul benchmark rows of a store, or of the shipped reference
database). :func:`combine_speedups` is the one estimator of a model's speed-up from per-layer
ones: Amdahl's law over the layers' dense work. Both :func:`estimate_speedup` (the dashboard's
per-configuration estimate) and :func:`model_speedups` (the HTML report's, from layer speed
rows) go through it, and both results are estimates, labelled so wherever they are shown.

Only the ``nn.Linear`` matmuls are counted (time proportional to ``out x in`` per token);
attention, norms and embeddings are left out, so the estimate is an upper bound for the
whole model. A 2:4-pruned layer uses the speedup recorded for its shape, token count and
dtype when there is one, else the hardware bound of 2x; a layer the doctor marks
"unsupported" (no sparse kernel runs it) or "slow" (too small for a sparse kernel to pay off)
counts as 1x unless a measurement says otherwise, and so does every pattern other than 2:4.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from explorer.dtypes import dtype_name

__all__ = [
    "ESTIMATE_FORMULA",
    "HARDWARE_BOUND",
    "SpeedEstimate",
    "combine_speedups",
    "estimate_speedup",
    "model_speed_entry",
    "model_speedups",
    "recorded_model_speed",
    "recorded_speed",
    "row_speedup",
]

#: The speedup bound of sparse tensor cores (they double the math rate).
HARDWARE_BOUND = 2.0
#: How :func:`combine_speedups` turns per-layer speed-ups into a model's, in one line.
ESTIMATE_FORMULA = "speedup = Σ w / Σ (w / s), w = out × in of each Linear layer, s its speed-up"


@dataclass(frozen=True)
class SpeedEstimate:
    """An end-to-end speedup estimate and where its per-layer numbers came from.

    Attributes
    ----------
    speedup : float
        The estimated whole-model speed-up over the Linear layers (Amdahl's law).
    measured : int
        Pruned layers counted at a recorded speed-up.
    bounded : int
        Pruned layers counted at the 2x hardware bound (nothing recorded for them).
    unaccelerated : int
        Pruned layers counted at 1x (a pattern other than 2:4, or the doctor's verdict).
    gpus : tuple of str
        The GPU kind the recorded speed-ups come from (one at most).
    bound : float
        The speed-up with every pruned 2:4 layer at the 2x bound.
    tokens : tuple of int
        The token counts the recorded layers were measured at (the closest to the one asked).
    """

    speedup: float
    measured: int
    bounded: int
    unaccelerated: int
    gpus: tuple[str, ...] = ()
    bound: float = 1.0
    tokens: tuple[int, ...] = ()

    @property
    def source(self) -> str:
        """How the estimate was obtained, in words."""
        parts = []
        if self.measured:
            at = f" at {', '.join(map(str, self.tokens))} tokens" if self.tokens else ""
            parts.append(f"{self.measured} layers recorded on {', '.join(self.gpus)}{at}")
        if self.bounded:
            parts.append(f"{self.bounded} layers at the 2x bound (nothing recorded)")
        if self.unaccelerated:
            parts.append(f"{self.unaccelerated} layers at 1x (no speedup expected)")
        return "; ".join(parts) or "nothing pruned"

    def __repr__(self) -> str:
        return f"SpeedEstimate({self.speedup:.3f}x: {self.source})"


def estimate_speedup(
    shapes: Mapping[str, tuple[int, int]],
    pruned: Iterable[str],
    pattern: str = "2:4",
    tokens: int = 1024,
    dtype: str = "float16",
    verdicts: Mapping[str, str] | None = None,
    store=None,
    recorded: bool = True,
    gpu: str | None = None,
) -> SpeedEstimate:
    """Amdahl's law over the model's Linear layers.

    Recorded layer speeds come from one GPU kind for the whole model, never a mix: ``gpu``
    where given, else the kind with recorded rows for the most pruned layers (ties: the first
    name in sorted order). A layer with no row of that kind counts as if nothing were recorded.

    Parameters
    ----------
    shapes : mapping of str to (int, int)
        Every Linear layer's ``(out, in)``.
    pruned : iterable of str
        The layers that were pruned.
    pattern : str
        The pattern they were pruned to; only ``"2:4"`` is accelerated.
    tokens : int
        The token count to read recorded speed-ups at (the closest recorded count per layer).
    dtype : str
        The dtype of the recorded rows to read.
    verdicts : mapping of str to str, optional
        The doctor's verdicts for the pruned model; ``"unsupported"`` layers, and ``"slow"``
        ones without a recorded measurement, count as 1x.
    store : ResultStore, optional
        Where to read recorded speed-ups (see :func:`recorded_speed`); default the shipped
        reference database.
    recorded : bool
        Look up recorded measurements (False: use the 2x bound for every accelerated layer).
    gpu : str, optional
        The GPU kind (provenance ``gpu``, e.g. ``"NVIDIA H100 80GB HBM3"``) whose rows to use.

    Returns
    -------
    SpeedEstimate

    Examples
    --------
    >>> estimate_speedup({"a": (4, 4), "b": (4, 4)}, ["a"], recorded=False).speedup
    1.3333333333333333
    >>> estimate_speedup({"a": (4, 4)}, ["a"], pattern="4:8").speedup
    1.0
    >>> estimate_speedup({"a": (4, 4)}, ["a"], verdicts={"a": "slow"}, recorded=False).bound
    2.0
    """
    pruned = set(pruned)
    verdicts = verdicts or {}
    actual: list[tuple[float, float]] = []  # (dense work, speedup) per layer
    ideal: list[tuple[float, float]] = []
    measured = bounded = unaccelerated = 0
    gpus: list[str] = []
    counts: list[int] = []
    # 1. the recorded rows of every accelerated layer, then the one GPU kind to read them from
    found: dict[str, list[dict]] = {}
    if pattern == "2:4" and recorded:
        for name, (out, inp) in shapes.items():
            if name in pruned and verdicts.get(name) != "unsupported":
                found[name] = recorded_speed((out, inp), tokens, dtype, store)
    kind = gpu if gpu is not None else _most_covered_gpu(found.values())
    # 2. Amdahl's law, each layer at its recorded speed-up on that kind (or its bound)
    for name, (out, inp) in shapes.items():
        cost = float(out) * float(inp)
        if name not in pruned or pattern != "2:4":
            unaccelerated += name in pruned
            actual.append((cost, 1.0))
            ideal.append((cost, 1.0))
            continue
        ideal.append((cost, HARDWARE_BOUND))
        verdict = verdicts.get(name)
        rows = [r for r in found.get(name, []) if r["gpu"] == kind]
        if verdict in ("unsupported", "slow") and not rows:
            unaccelerated += 1
            actual.append((cost, 1.0))
        elif rows:
            measured += 1
            gpus += [rows[0]["gpu"]] if rows[0]["gpu"] not in gpus else []
            counts += [rows[0]["tokens"]] if rows[0]["tokens"] not in counts else []
            actual.append((cost, rows[0]["speedup"]))
        else:
            bounded += 1
            actual.append((cost, HARDWARE_BOUND))
    speedup, bound = combine_speedups(actual), combine_speedups(ideal)
    return SpeedEstimate(
        speedup, measured, bounded, unaccelerated, tuple(gpus), bound, tuple(sorted(counts))
    )


def _most_covered_gpu(rows_per_layer: Iterable[list[dict]]) -> str | None:
    """The GPU kind with rows for the most layers (ties: the first in sorted order)."""
    layers_per_kind: dict[str, int] = {}
    for rows in rows_per_layer:
        for kind in {r["gpu"] for r in rows}:
            layers_per_kind[kind] = layers_per_kind.get(kind, 0) + 1
    if not layers_per_kind:
        return None
    return min(layers_per_kind, key=lambda k: (-layers_per_kind[k], k))


def combine_speedups(layers: Iterable[tuple[float, float]]) -> float:
    """A model's speed-up from its layers' ``(dense work, speed-up)``: Amdahl's law.

    Dense time is taken proportional to a layer's work, so its sparse time is its work
    divided by its speed-up. Layers with no work, or no positive speed-up, are left out;
    with none left the answer is 1.0. The result is an estimate: the layers' times are
    added as if nothing else ran.

    Parameters
    ----------
    layers : iterable of (float, float)
        ``(dense work, speed-up)`` per layer, work in any unit (e.g. ``out x in``).

    Returns
    -------
    float

    Examples
    --------
    >>> combine_speedups([(1.0, 2.0), (1.0, 1.0)])  # half the work twice as fast
    1.3333333333333333
    >>> combine_speedups([])
    1.0
    """
    dense = sparse = 0.0
    for work, speedup in layers:
        if work > 0 and speedup and speedup > 0:
            dense += work
            sparse += work / speedup
    return dense / sparse if sparse else 1.0


def row_speedup(row) -> float | None:
    """The sparse-over-dense speed-up a stored row records, or None.

    A ``speedup`` metric, else the ratio of ``dense_*`` to ``sparse_*`` times (in ``ms``,
    ``us`` or ``s``). A layer row that also has ``speedup_graph`` (the GPU's time alone, in a
    CUDA graph) counts with the lower of the two: a layer too small to gain can look faster
    eagerly only because the two paths' host overheads differ, and the GPU time says so.

    Parameters
    ----------
    row : Row
        Anything with a ``metrics`` dict, e.g. a :class:`~explorer.results.store.table.Row`.

    Returns
    -------
    float or None

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> row_speedup(SimpleNamespace(metrics={"dense_ms": 3.0, "sparse_ms": 2.0}))
    1.5
    >>> row_speedup(SimpleNamespace(metrics={"speedup": 1.42, "speedup_graph": 0.51}))
    0.51
    >>> row_speedup(SimpleNamespace(metrics={"accuracy": 0.9})) is None
    True
    """
    m = row.metrics
    if isinstance(m.get("speedup"), (int, float)) and m["speedup"] > 0:
        graph = m.get("speedup_graph")
        if isinstance(graph, (int, float)) and 0 < graph < m["speedup"]:
            return float(graph)
        return float(m["speedup"])
    for unit in ("ms", "us", "s"):
        dense, sparse = m.get(f"dense_{unit}"), m.get(f"sparse_{unit}")
        if isinstance(dense, (int, float)) and isinstance(sparse, (int, float)) and sparse > 0:
            return float(dense) / float(sparse)
    return None


def model_speedups(rows: Iterable) -> dict[tuple, tuple[float, str]]:
    """``{(model, pattern, layers, dtype, tokens, gpu): (speedup, source)}`` from layer speed rows.

    Each key's layers are combined by :func:`combine_speedups`, weighting each layer by its
    dense work (``out x in x count``); the result is an estimate of the model's speed-up.
    ``gpu`` is the GPU kind the rows were measured on (provenance ``gpu``), so a speed-up never
    mixes layers timed on different kinds of GPU. ``source`` is ``"local"`` when any of the
    key's rows were measured here, else the reference rows' origin.

    Parameters
    ----------
    rows : iterable of Row
        Stored rows; those not ``"ok"``, without a speed-up (:func:`row_speedup`) or without a
        ``[out, in]`` ``shape`` in their config are skipped. A config's ``count`` (layers of
        that shape, default 1) weighs the layer.

    Returns
    -------
    dict

    Examples
    --------
    >>> from types import SimpleNamespace as Row
    >>> cfg = {"model": "m", "pattern": "2:4", "layers": "all", "dtype": "float16",
    ...        "tokens": 1024, "shape": [64, 64]}
    >>> rows = [Row(config=cfg, metrics={"speedup": s}, status="ok", source="local",
    ...             provenance={"gpu": g}) for s, g in ((1.2, "H100"), (1.5, "H200"))]
    >>> sorted((k[5], v[0]) for k, v in model_speedups(rows).items())
    [('H100', 1.2), ('H200', 1.5)]
    """
    layers: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    sources: dict[tuple, str] = {}
    for row in rows:
        speedup = row_speedup(row) if row.status == "ok" else None
        shape = row.config.get("shape")
        if speedup is None or not isinstance(shape, list) or len(shape) != 2:
            continue
        c = row.config
        gpu = str((getattr(row, "provenance", None) or {}).get("gpu") or "unknown GPU")
        key = (c.get("model"), c.get("pattern"), c.get("layers"), c.get("dtype"), c.get("tokens"))
        key = (*key, gpu)
        layers[key].append(
            (float(shape[0]) * float(shape[1]) * float(c.get("count") or 1), speedup)
        )
        if row.source == "local":
            sources[key] = "local"
        else:
            sources.setdefault(key, row.origin)
    return {k: (combine_speedups(v), sources[k]) for k, v in layers.items()}


def _shape_of(row) -> tuple[int, int] | None:
    cfg = row.config
    for a, b in (("out_features", "in_features"), ("m", "k"), ("rows", "cols")):
        if a in cfg and b in cfg:
            return int(cfg[a]), int(cfg[b])
    shape = cfg.get("shape") or cfg.get("weight_shape")
    if isinstance(shape, (list, tuple)) and len(shape) == 2:
        return int(shape[0]), int(shape[1])
    return None


def _entry(row, speedup: float, what: str) -> dict:
    return {
        "gpu": str(row.provenance.get("gpu") or row.config.get("gpu") or "unknown GPU"),
        "tokens": int(row.config.get("tokens", row.config.get("n", 0)) or 0),
        "dtype": dtype_name(row.config.get("dtype", "?")),
        "speedup": float(speedup),
        "source": f"{getattr(row, 'source', 'local')} {what}".strip(),
    }


def _rows_for(store, shape: tuple[int, int]) -> list[dict]:
    """Speedups for ``shape`` from a store's layer and matmul benchmark rows."""
    found, dense, sparse = [], {}, {}
    for row in store.query():
        if row.status != "ok" or _shape_of(row) != tuple(shape):
            continue
        if row.kind == "bench-matmul":
            # 1. pair the dense and the explorer (cached cuSPARSELt plan) rows of one cell,
            # 2. eager mode only: what a model calling the layer sees, host overhead included.
            cfg = row.config
            if cfg.get("mode", "eager") != "eager" or not row.metrics.get("ms"):
                continue
            key = (cfg.get("tokens", cfg.get("n")), cfg.get("dtype"), row.provenance.get("gpu"))
            if cfg.get("impl") == "dense":
                dense[key] = row
            elif cfg.get("impl") == "explorer":
                sparse[key] = row
            continue
        pattern = row.config.get("pattern", "2:4")
        if row.kind == "bench-unstructured" or str(pattern) != "2:4":
            continue  # CSR, BSR and other patterns do not run on sparse tensor cores
        speedup = row_speedup(row)
        if speedup is not None:
            found.append(_entry(row, speedup, row.kind))
    for key, row in sparse.items():
        if key in dense:
            speedup = dense[key].metrics["ms"] / row.metrics["ms"]
            found.append(_entry(row, speedup, "matmul benchmark"))
    return found


def _store_or_reference(store):
    """``store``, else the shipped reference database; None when neither can be read."""
    if store is not None:
        return store
    try:
        from explorer.results.store import ResultStore

        return ResultStore.reference()
    except (ImportError, ValueError):
        return None


def recorded_speed(
    shape: tuple[int, int], tokens: int | None = None, dtype: str | None = None, store=None
) -> list[dict]:
    """Recorded sparse-versus-dense speedups for a weight shape, closest token count first.

    Reads ``store`` (an :class:`explorer.results.store.ResultStore`, whose attached reference rows
    count too) or, when None, the shipped reference database: ``layer-speed`` rows and other
    rows with a ``speedup`` metric, and ``bench-matmul`` rows (dense against the explorer's
    cached cuSPARSELt plan, eager mode). Returns ``[]`` when nothing is recorded.

    Parameters
    ----------
    shape : (int, int)
        The weight's ``(out, in)``.
    tokens : int, optional
        Sort the rows by how far their token count is from this one, closest first.
    dtype : str, optional
        Keep rows of this dtype (and rows with no dtype recorded) only.
    store : ResultStore, optional
        The store to read; default the shipped reference database.

    Returns
    -------
    list of dict
        ``{"gpu", "tokens", "dtype", "speedup", "source"}`` per recorded speed-up.

    Examples
    --------
    >>> from explorer.results.store import ResultStore
    >>> store = ResultStore(":memory:")
    >>> config = {"shape": [48, 64], "tokens": 1024, "dtype": "float16", "pattern": "2:4"}
    >>> _ = store.record("layer-speed", config, {"speedup": 1.4}, provenance={"gpu": "H100"})
    >>> [(r["gpu"], r["speedup"]) for r in recorded_speed((48, 64), 1024, "float16", store)]
    [('H100', 1.4)]
    """
    store = _store_or_reference(store)
    if store is None:
        return []
    found = [r for r in _rows_for(store, shape) if not dtype or r["dtype"] in (dtype, "?")]
    if tokens is not None:
        found.sort(key=lambda r: abs(r["tokens"] - tokens))
    return found


def recorded_model_speed(
    model: str, dtype: str | None = None, tokens: int | None = None, store=None
) -> list[dict]:
    """Whole-model 2:4 speed-ups measured for ``model``: local rows first, then reference ones.

    Reads ``bench-models`` rows (``sparsity-explorer bench --suites models``: every Linear layer
    but the output head pruned 2:4, the model timed end to end against its dense self) of
    ``store`` (an :class:`explorer.results.store.ResultStore`, its attached reference rows
    included) or, when None, of the shipped reference database. Only rows of exactly this model,
    dtype and token count are returned (a different count is a different measurement).

    Parameters
    ----------
    model : str
        The benchmark's model name, e.g. ``"llama-1b"``.
    dtype : str, optional
        Keep rows of this dtype only.
    tokens : int, optional
        Keep rows of this token count only.
    store : ResultStore, optional
        The store to read; default the shipped reference database.

    Returns
    -------
    list of dict
        ``{"model", "label", "gpu", "tokens", "dtype", "speedup", "source", "commit"}`` per row,
        ``source`` being ``"local"`` or the reference's origin; ``[]`` when nothing matches.

    Examples
    --------
    >>> from explorer.results.store import ResultStore
    >>> store = ResultStore(":memory:")
    >>> config = {"model": "m", "dtype": "bfloat16", "tokens": 4096, "label": "m 4x1024"}
    >>> _ = store.record("bench-models", config, {"speedup": 1.1}, provenance={"gpu": "H100"})
    >>> [(r["label"], r["speedup"], r["source"]) for r in recorded_model_speed("m", "bf16", 4096, store)]
    [('m 4x1024', 1.1, 'local')]
    >>> recorded_model_speed("m", "bfloat16", 1024, store)
    []
    """
    store = _store_or_reference(store)
    if store is None:
        return []
    want = dtype_name(dtype) if dtype else None
    found = []
    for row in store.query("bench-models", status="ok", model=model):
        entry = model_speed_entry(row)
        if entry is None or (want and entry["dtype"] != want):
            continue
        if tokens is not None and entry["tokens"] != tokens:
            continue
        found.append(entry)
    found.sort(key=lambda r: r["source"] != "local")
    return found


def model_speed_entry(row) -> dict | None:
    """One ``bench-models`` row as :func:`recorded_model_speed` returns it.

    Parameters
    ----------
    row : Row
        A ``bench-models`` row of the store.

    Returns
    -------
    dict or None
        ``model``, ``label``, ``gpu``, ``tokens``, ``dtype``, ``speedup``, ``source`` and
        ``commit``; None for a row without a speed-up (failed, no timings) or a quantized one.
    """
    c = row.config
    speedup = row_speedup(row) if row.status == "ok" and not c.get("precision") else None
    if speedup is None:
        return None
    return {
        "model": str(c.get("model")),
        "label": str(c.get("label") or c.get("model")),
        "gpu": str(row.provenance.get("gpu") or "unknown GPU"),
        "tokens": c.get("tokens", c.get("n")),
        "dtype": dtype_name(c.get("dtype", "?")),
        "speedup": speedup,
        "source": "local" if row.source == "local" else row.origin,
        "commit": str(row.provenance.get("commit") or ""),
    }
