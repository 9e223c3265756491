"""Quantized whole-model speed rows: bf16 dense, the same precision dense, and 2:4 at it.

``benchmarks/quantized_models.py`` times one model three ways in one process: bf16 dense, every
pruned Linear run dense at a lower precision (int4 weight-only, FP8), and
``sparsify(model, dtype=...)`` at that precision. With ``--dtype bfloat16`` the "precision run
dense" is an unchanged copy of the bf16 model (an A/A control: its ``speedup_over_bf16`` is the
noise of equal work) and the 2:4 variant is ``sparsify(model, decode=True)``. Its rows go to the results store as
``bench-models`` rows, the kind the whole-model benchmark (``sparsity-explorer bench --suites
models``) records, told apart by a ``precision`` in their configuration: one row per model,
run (batch x sequence), execution mode, precision and pattern. :func:`quantized_speed_row`
builds a row (every writer goes through it), :func:`rows_from_benchmark` turns the script's
JSON into rows, so a run measured elsewhere can be imported, and :func:`quantized_speeds`
reads them back.

Row fields
----------
``kind``
    ``"bench-models"`` (:data:`KIND`).
``config``
    ``suite`` (``"models"``), ``model``, ``label`` (``"llama-8b 4x1024"``), ``batch``,
    ``seq``, ``tokens`` (batch x seq), ``dtype`` (the model's, ``"bfloat16"``), ``precision``
    (a key of :data:`PRECISIONS`), ``pattern`` (``"dense"`` or ``"2:4"``) and ``mode``
    (``"eager"`` or ``"graphs"``, as in :data:`~explorer.results.model_speed.SPEED_MODES`).
``metrics``
    ``ms`` (this variant), ``bf16_dense_ms``, ``same_dense_ms`` (the precision run dense; 2:4
    rows), ``speedup_over_bf16`` (bf16 dense over this variant), ``speedup_over_same`` (the
    precision dense over this variant; 2:4 rows: a dense row is that baseline) and ``relerr``
    (of the logits against bf16 dense). Speed-ups are medians of paired ratios, so one is not
    the ratio of the two median times. No metric is called ``speedup``: readers of the
    unquantized rows (:func:`explorer.results.speedup.model_speed_entry`) leave these alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from explorer import _html
from explorer.results.model_speed import SPEED_MODES
from explorer.results.store.provenance import cusparselt_text

__all__ = [
    "KIND",
    "PRECISIONS",
    "QuantizedSpeed",
    "benchmark_keys",
    "benchmark_provenance",
    "quantized_speed_row",
    "quantized_speeds",
    "rows_from_benchmark",
]

#: The row kind: whole-model benchmark rows (a quantized one names its ``precision``).
KIND = "bench-models"

#: Precisions a model is timed in, each with its short name in labels.
PRECISIONS = {
    "bfloat16": "bf16",
    "int8": "int8",
    "int8-weights": "int8 weight-only",
    "int4": "int4",
    "float8_e4m3fn": "FP8",
}

#: The benchmark's name for each precision in its JSON keys (``"fp8 dense"``, ``"2:4 int4"``).
_SCRIPT_NAMES = {
    "int4": "int4",
    "float8_e4m3fn": "fp8",
    "int8": "int8",
    "int8-weights": "int8w",
    "bfloat16": "bf16",
}


def benchmark_keys(precision: str) -> tuple[str, str]:
    """The names of the precision's dense variant and of its 2:4 variant in the benchmark's JSON.

    bf16 dense is every run's baseline (``"bf16 dense"``), so at ``"bfloat16"`` the dense
    variant is its unchanged copy, ``"bf16 dense copy"``.

    Parameters
    ----------
    precision : str
        ``"int4"``, ``"int8"``, ``"float8_e4m3fn"`` or ``"bfloat16"``.

    Returns
    -------
    tuple of str
        ``(dense, sparse)``.

    Raises
    ------
    ValueError
        Another precision.

    Examples
    --------
    >>> benchmark_keys("float8_e4m3fn"), benchmark_keys("bfloat16")
    (('fp8 dense', '2:4 fp8'), ('bf16 dense copy', '2:4 bf16'))
    """
    if precision not in _SCRIPT_NAMES:
        raise ValueError(f"precision {precision!r}; expected one of {', '.join(_SCRIPT_NAMES)}")
    short = _SCRIPT_NAMES[precision]
    dense = f"{short} dense copy" if precision == "bfloat16" else f"{short} dense"
    return dense, f"2:4 {short}"


_METRICS = (
    "ms",
    "bf16_dense_ms",
    "same_dense_ms",
    "speedup_over_bf16",
    "speedup_over_same",
    "relerr",
)


def _positive(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def quantized_speed_row(
    model: str,
    precision: str,
    pattern: str,
    batch: int,
    seq: int,
    mode: str,
    metrics: Mapping,
) -> dict:
    """One quantized ``bench-models`` row, checked.

    Parameters
    ----------
    model : str
        The model timed (a benchmark model's name, e.g. ``"llama-8b"``).
    precision : str
        A key of :data:`PRECISIONS`.
    pattern : {"dense", "2:4"}
        The precision run dense, or ``sparsify`` at it.
    batch, seq : int
        The run: sequences and tokens per sequence.
    mode : {"eager", "graphs"}
        How the forwards ran (:data:`~explorer.results.model_speed.SPEED_MODES`).
    metrics : mapping
        Some of the metrics the module's docstring lists; ``ms`` and ``speedup_over_bf16``
        are needed, and ``speedup_over_same`` on a 2:4 row.

    Returns
    -------
    dict
        ``{"kind", "config", "metrics", "status"}``, ready for
        :meth:`~explorer.results.store.ResultStore.record_many`.

    Raises
    ------
    ValueError
        An unknown precision, pattern, mode or metric, a run that is not positive, or a
        needed time or speed-up missing or not positive.

    Examples
    --------
    >>> row = quantized_speed_row("llama-8b", "float8_e4m3fn", "2:4", 4, 1024, "graphs",
    ...                           {"ms": 8.0, "speedup_over_bf16": 1.25, "speedup_over_same": 1.0})
    >>> row["kind"], row["config"]["tokens"], row["config"]["label"]
    ('bench-models', 4096, 'llama-8b 4x1024')
    >>> quantized_speed_row("m", "fp4", "2:4", 1, 1, "eager", {})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: precision 'fp4' unknown; expected one of bfloat16, int8, int8-weights, int4, float8_e4m3fn...
    """
    if precision not in PRECISIONS:
        raise ValueError(
            f"precision {precision!r} unknown; expected one of {', '.join(PRECISIONS)}. Hint: "
            "pass the dtype name sparsify takes, e.g. 'float8_e4m3fn' for FP8"
        )
    if pattern not in ("dense", "2:4"):
        raise ValueError(f"pattern {pattern!r}: expected 'dense' or '2:4'")
    if mode not in SPEED_MODES:
        raise ValueError(f"mode {mode!r} unknown; expected one of {', '.join(SPEED_MODES)}")
    for name, value in (("batch", batch), ("seq", seq)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r}: expected a positive integer such as 4")
    values = dict(metrics)
    unknown = sorted(set(values) - set(_METRICS))
    if unknown:
        raise ValueError(f"metrics {unknown} unknown; expected some of {', '.join(_METRICS)}")
    needed = ["ms", "speedup_over_bf16"] + (["speedup_over_same"] if pattern == "2:4" else [])
    bad = [k for k in needed if _positive(values.get(k)) is None]
    if bad:
        raise ValueError(
            f"{model} {precision} {pattern} {batch}x{seq} {mode}: {', '.join(bad)} "
            f"{[values.get(k) for k in bad]}; expected positive numbers. Hint: a run that "
            "failed has no row"
        )
    config = {
        "suite": "models",
        "model": model,
        "label": f"{model} {batch}x{seq}",
        "batch": batch,
        "seq": seq,
        "tokens": batch * seq,
        "dtype": "bfloat16",
        "precision": precision,
        "pattern": pattern,
        "mode": mode,
    }
    return {"kind": KIND, "config": config, "metrics": values, "status": "ok"}


def rows_from_benchmark(data: Mapping | Iterable[Mapping]) -> list[dict]:
    """Store rows from ``benchmarks/quantized_models.py``'s JSON (its ``rows``, or the file's dict).

    Each JSON row (one model, precision and run) gives, for each mode it was timed in, one
    row for the precision run dense and one for 2:4 at it (:func:`quantized_speed_row`).
    Pure: nothing is read or written; record the rows with
    :meth:`~explorer.results.store.ResultStore.record_many`, with
    :func:`benchmark_provenance` of the file's ``env`` when it was measured elsewhere.

    Parameters
    ----------
    data : mapping or iterable of mapping
        ``{"env": ..., "rows": [...]}`` as the script writes it, or the list of rows.

    Returns
    -------
    list of dict
        The store rows.

    Raises
    ------
    ValueError
        A row without the keys the script writes (the message names the row and the key).

    Examples
    --------
    >>> row = {"model": "llama-8b", "dtype": "float8_e4m3fn", "batch": 4, "seq": 1024,
    ...        "fp8 dense relerr": 0.02, "2:4 fp8 relerr": 0.02,
    ...        "eager bf16 dense ms": 10.0, "eager fp8 dense ms": 8.1, "eager 2:4 fp8 ms": 7.7,
    ...        "eager fp8 dense over bf16": 1.18, "eager 2:4 fp8 over bf16": 1.24,
    ...        "eager 2:4 fp8 over fp8 dense": 1.05}
    >>> [(r["config"]["pattern"], r["config"]["mode"], r["metrics"]["speedup_over_bf16"])
    ...  for r in rows_from_benchmark([row])]
    [('dense', 'eager', 1.18), ('2:4', 'eager', 1.24)]
    """
    rows = data.get("rows", []) if isinstance(data, Mapping) else data
    out: list[dict] = []
    for number, row in enumerate(rows):
        where = f"row {number} ({row.get('model')} {row.get('batch')}x{row.get('seq')})"

        def need(key: str, row=row, where=where) -> object:
            if key not in row:
                raise ValueError(
                    f"{where}: no {key!r}; expected the keys benchmarks/quantized_models.py "
                    "writes (its --json file)"
                )
            return row[key]

        precision = str(need("dtype"))
        try:
            dense, sparse = benchmark_keys(precision)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        model, batch, seq = str(need("model")), need("batch"), need("seq")
        modes = [m for m in SPEED_MODES if f"{m} bf16 dense ms" in row]
        if not modes:
            need("eager bf16 dense ms")
        for mode in modes:
            base = {"bf16_dense_ms": need(f"{mode} bf16 dense ms")}
            metrics = {
                **base,
                "ms": need(f"{mode} {dense} ms"),
                "speedup_over_bf16": need(f"{mode} {dense} over bf16"),
            }
            if f"{dense} relerr" in row:
                metrics["relerr"] = row[f"{dense} relerr"]
            out.append(quantized_speed_row(model, precision, "dense", batch, seq, mode, metrics))
            metrics = {
                **base,
                "ms": need(f"{mode} {sparse} ms"),
                "same_dense_ms": need(f"{mode} {dense} ms"),
                "speedup_over_bf16": need(f"{mode} {sparse} over bf16"),
                "speedup_over_same": need(f"{mode} {sparse} over {dense}"),
            }
            if f"{sparse} relerr" in row:
                metrics["relerr"] = row[f"{sparse} relerr"]
            out.append(quantized_speed_row(model, precision, "2:4", batch, seq, mode, metrics))
    return out


def benchmark_provenance(env: Mapping) -> dict:
    """A row's provenance from the ``env`` a benchmark's JSON file carries.

    :func:`explorer.bench.environment` names the device, its compute capability and the
    versions; the script adds when it ran (``time``), its command line (``command``) and the
    commit (``commit``, where given). Keys the file lacks are left out.

    Parameters
    ----------
    env : mapping
        The file's ``env``.

    Returns
    -------
    dict
        Provenance in the store's names (``gpu``, ``gpu_capability``, ``cuda``, ``torch``,
        ``cusparselt``, ``time``, ``commit``, ``measured_by``).

    Examples
    --------
    >>> benchmark_provenance({"device": "NVIDIA H100 80GB HBM3", "capability": "9.0",
    ...                       "cusparselt": 800, "commit": "dced48c"})
    {'gpu': 'NVIDIA H100 80GB HBM3', 'gpu_capability': '9.0', 'cusparselt': '0.8.0', 'commit': 'dced48c'}
    """
    names = {
        "device": "gpu",
        "capability": "gpu_capability",
        "cuda": "cuda",
        "torch": "torch",
        "cusparselt": "cusparselt",
        "nvmath-python": "nvmath-python",
        "time": "time",
        "commit": "commit",
        "command": "measured_by",
    }
    found = {ours: env[theirs] for theirs, ours in names.items() if env.get(theirs) is not None}
    if "cusparselt" in found:  # environment() gives torch's integer (800), rows say "0.8.0"
        found["cusparselt"] = cusparselt_text(found["cusparselt"])
    return found


@dataclass(frozen=True)
class QuantizedSpeed:
    """One quantized whole-model measurement read back from a row.

    Attributes
    ----------
    speedup : float
        Over bf16 dense (``speedup_over_bf16``).
    over_same : float or None
        Over the same precision run dense; None for a dense row (it is that baseline).
    precision, pattern, mode : str
        As in the row's configuration.
    tokens : int
        Tokens per forward.
    label : str
        The run, e.g. ``"llama-8b 4x1024"``.
    model : str
        The model timed.
    gpu : str
        The GPU it was measured on.
    source : str
        ``"local"``, or the reference database's origin.
    commit : str
        The commit it was measured on (``""`` when not recorded).
    ms, bf16_ms, same_ms : float or None
        This variant's, bf16 dense's and the same precision dense's times.

    Examples
    --------
    >>> QuantizedSpeed(1.24, 1.05, "float8_e4m3fn", "2:4", "eager", 4096, "llama-8b 4x1024")
    QuantizedSpeed(FP8 2:4 llama-8b 4x1024 eager: 1.24x over bf16 dense, 1.05x over FP8 dense)
    """

    speedup: float
    over_same: float | None
    precision: str
    pattern: str
    mode: str
    tokens: int
    label: str
    model: str = ""
    gpu: str = "unknown GPU"
    source: str = "local"
    commit: str = ""
    ms: float | None = None
    bf16_ms: float | None = None
    same_ms: float | None = None

    @property
    def name(self) -> str:
        """``"FP8 2:4"``: the precision's short name and the pattern."""
        return f"{PRECISIONS[self.precision]} {self.pattern}"

    def over_same_text(self) -> str:
        """The speed-up over the same precision dense, in words (``"1.05x over FP8 dense"``)."""
        short = PRECISIONS[self.precision]
        if self.over_same is None:
            return f"1.0x over {short} dense (by definition: it is {short} dense)"
        return f"{self.over_same:.2f}x over {short} dense"

    def __repr__(self) -> str:
        return (
            f"QuantizedSpeed({self.name} {self.label} {self.mode}: {self.speedup:.2f}x over "
            f"bf16 dense, {self.over_same_text()})"
        )

    def _repr_html_(self) -> str:
        rows = [
            ("over bf16 dense", f"{self.speedup:.2f}x"),
            ("over same precision dense", self.over_same_text()),
            ("mode, tokens", f"{self.mode}, {self.tokens}"),
            ("gpu", self.gpu + (f", commit {self.commit}" if self.commit else "")),
        ]
        return _html.table(["", ""], rows, caption=f"{self.name} {self.label}")


def _speed(row) -> QuantizedSpeed | None:
    c, m = row.config, row.metrics
    speedup, tokens = _positive(m.get("speedup_over_bf16")), c.get("tokens")
    if row.status != "ok" or speedup is None or not isinstance(tokens, int):
        return None
    source = getattr(row, "source", "local")
    return QuantizedSpeed(
        speedup=speedup,
        over_same=_positive(m.get("speedup_over_same")),
        precision=str(c.get("precision")),
        pattern=str(c.get("pattern")),
        mode=str(c.get("mode")),
        tokens=tokens,
        label=str(c.get("label") or c.get("model")),
        model=str(c.get("model")),
        gpu=str((row.provenance or {}).get("gpu") or "unknown GPU"),
        source="local" if source == "local" else row.origin,
        commit=str((row.provenance or {}).get("commit") or ""),
        ms=_positive(m.get("ms")),
        bf16_ms=_positive(m.get("bf16_dense_ms")),
        same_ms=_positive(m.get("same_dense_ms")),
    )


def quantized_speeds(
    rows: Iterable,
    model: str | Iterable[str] | None = None,
    precision: str | None = None,
    pattern: str | None = None,
) -> dict[tuple[int, str], list[QuantizedSpeed]]:
    """The quantized whole-model measurements among ``rows``, by ``(tokens, mode)``.

    Only ok ``bench-models`` rows with a ``precision`` count; within a token count and mode,
    the user's own rows come first, then the reference's.

    Parameters
    ----------
    rows : iterable of Row
        Store rows (other kinds are skipped).
    model : str or iterable of str, optional
        Keep rows of this model (or of any of these names).
    precision, pattern : str, optional
        Keep rows of this precision and pattern (``"dense"`` or ``"2:4"``).

    Returns
    -------
    dict
        ``{(tokens, mode): [QuantizedSpeed, ...]}``, sorted by token count then mode.

    Examples
    --------
    >>> from explorer.results.store import ResultStore
    >>> store = ResultStore(":memory:")
    >>> _ = store.record(**quantized_speed_row("m", "int4", "dense", 16, 1, "graphs",
    ...                  {"ms": 1.0, "speedup_over_bf16": 1.24}), provenance={"gpu": "H100"})
    >>> quantized_speeds(store.query(), model="m", precision="int4")
    {(16, 'graphs'): [QuantizedSpeed(int4 dense m 16x1 graphs: 1.24x over bf16 dense, \
1.0x over int4 dense (by definition: it is int4 dense))]}
    """
    names = {model} if isinstance(model, str) else None if model is None else set(model)
    found: dict[tuple[int, str], list[QuantizedSpeed]] = {}
    for row in rows:
        c = row.config
        if row.kind != KIND or not c.get("precision"):
            continue
        if names is not None and c.get("model") not in names:
            continue
        if precision is not None and c.get("precision") != precision:
            continue
        if pattern is not None and c.get("pattern") != pattern:
            continue
        speed = _speed(row)
        if speed is not None:
            found.setdefault((speed.tokens, speed.mode), []).append(speed)
    for speeds in found.values():
        speeds.sort(key=lambda s: s.source != "local")
    return dict(sorted(found.items()))
