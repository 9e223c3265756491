"""A self-contained HTML report of a results database: trade-off plot, tables and provenance.

The plot puts each pruned configuration at its model speedup (from the layer speed rows of the
same model, pattern, layers, dtype and token count) against its headline metric, and marks the
Pareto frontier. Speedups measured on this machine are used first; where there are none, the
shipped reference database's are used and the point says so. With plotly installed the plot is
interactive (plotly.js embedded inline); without it the report is the tables alone.
"""

from __future__ import annotations

import math
import shlex
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from explorer import _html
from explorer.pareto import pareto_front as frontier
from explorer.results.store import (
    ResultStore,
    ResultTable,
    Row,
    StoreError,
    default_path,
    reference_path,
)
from explorer.results.store.files import atomic_output, check_output

__all__ = ["TradeoffPoint", "pareto_front", "tradeoff_points", "write_report"]

_PROVENANCE = ("gpu", "gpu_capability", "driver", "cuda", "torch", "cusparselt", "explorer")


@dataclass(frozen=True)
class TradeoffPoint:
    """One pruned configuration on the trade-off plot.

    Attributes
    ----------
    label : str
        ``"method pattern layers dtype"``.
    metric, value : str, float
        The headline metric's name and value.
    dense : float or None
        The dense baseline's value at the same dtype.
    speedup : float or None
        Estimated model speedup over dense at ``tokens``, or None when not measured.
    tokens : int or None
        Token count of the speed measurement.
    speed_source : str
        ``"local"``, ``"reference (GPU, date)"`` or ``""`` when there is no speedup.
    higher_is_better : bool
        Direction of the metric.
    dtype : str
        The dtype the weights were rounded to.
    """

    label: str
    model: str
    method: str
    pattern: str
    metric: str
    value: float
    dense: float | None
    speedup: float | None
    tokens: int | None
    speed_source: str
    higher_is_better: bool = True
    dtype: str = ""


def _layer_speedup(row: Row) -> float | None:
    # A layer row gives a speedup directly, or dense and sparse times to divide.
    m = row.metrics
    if isinstance(m.get("speedup"), (int, float)) and m["speedup"] > 0:
        return float(m["speedup"])
    for unit in ("ms", "us", "s"):
        dense, sparse = m.get(f"dense_{unit}"), m.get(f"sparse_{unit}")
        if isinstance(dense, (int, float)) and isinstance(sparse, (int, float)) and sparse > 0:
            return float(dense) / float(sparse)
    return None


def _model_speedups(rows: ResultTable) -> dict[tuple, tuple[float, str]]:
    """``{(model, pattern, layers, dtype, tokens): (speedup, source)}`` from layer speed rows.

    The model speedup weights each layer by its dense work (out x in x count): dense time is
    taken proportional to it, so the sparse time of a layer is its work divided by its speedup.
    """
    work: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0])
    sources: dict[tuple, str] = {}
    for row in rows:
        speedup = _layer_speedup(row) if row.status == "ok" else None
        shape = row.config.get("shape")
        if speedup is None or not isinstance(shape, list) or len(shape) != 2:
            continue
        c = row.config
        key = (c.get("model"), c.get("pattern"), c.get("layers"), c.get("dtype"), c.get("tokens"))
        flops = float(shape[0]) * float(shape[1]) * float(c.get("count") or 1)
        work[key][0] += flops
        work[key][1] += flops / speedup
        if row.source == "local":
            sources[key] = "local"
        else:
            sources.setdefault(key, row.origin)
    return {k: (d / s, sources[k]) for k, (d, s) in work.items() if s > 0}


def tradeoff_points(rows: ResultTable) -> list[TradeoffPoint]:
    """The trade-off plot's points: every ok prune row, at each token count with a speedup.

    Local speed rows win over reference ones for the same key; a configuration without any
    speed row gets one point with ``speedup=None``. Each model with a measured point also gets
    its dense baseline at 1.0x (method ``"dense"``), the frontier's slow end.
    """
    speed_rows = rows.where(kind="layer-speed")
    local = _model_speedups(ResultTable(r for r in speed_rows if r.source == "local"))
    reference = _model_speedups(ResultTable(r for r in speed_rows if r.source != "local"))
    dense: dict[tuple, float] = {}
    for row in rows.where(kind="dense", status="ok", source="local"):
        name = row.metrics.get("metric")
        if isinstance(row.metrics.get(name), (int, float)):
            dense[(row.model, row.config.get("dtype"))] = float(row.metrics[name])
    points = []
    for row in rows.where(kind="prune", status="ok", source="local"):
        name = row.metrics.get("metric")
        value = row.metrics.get(name)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        c = row.config
        base = (c.get("model"), c.get("pattern"), c.get("layers"), c.get("dtype"))
        speeds = {k[4]: v for k, v in local.items() if k[:4] == base}
        for k, v in reference.items():
            if k[:4] == base:
                speeds.setdefault(k[4], v)
        label = " ".join(str(c.get(k)) for k in ("method", "pattern", "layers", "dtype"))
        common = {
            "label": label,
            "model": str(c.get("model")),
            "method": str(c.get("method")),
            "pattern": str(c.get("pattern")),
            "metric": str(name),
            "value": float(value),
            "dense": dense.get((c.get("model"), c.get("dtype"))),
            "higher_is_better": bool(row.metrics.get("higher_is_better", True)),
            "dtype": str(c.get("dtype")),
        }
        if not speeds:
            points.append(TradeoffPoint(**common, speedup=None, tokens=None, speed_source=""))
        for tokens, (speedup, source) in sorted(speeds.items(), key=lambda kv: kv[0] or 0):
            points.append(
                TradeoffPoint(**common, speedup=speedup, tokens=tokens, speed_source=source)
            )
    baselines = []
    for model, dtype in sorted({(p.model, p.dtype) for p in points if p.speedup}):
        value = dense.get((model, dtype))
        same = next(p for p in points if p.model == model and p.speedup)
        if value is not None:
            baselines.append(
                TradeoffPoint(
                    f"dense {dtype}",
                    model,
                    "dense",
                    "dense",
                    same.metric,
                    value,
                    value,
                    1.0,
                    None,
                    "by definition",
                    same.higher_is_better,
                    dtype,
                )
            )
    return baselines + points


def pareto_front(points: list[TradeoffPoint]) -> list[TradeoffPoint]:
    """The points no other point beats on both speedup and metric, fastest first.

    Points without a measured speedup are left out; see :func:`explorer.pareto.pareto_front`.

    Examples
    --------
    >>> p = lambda s, v: TradeoffPoint("", "m", "x", "2:4", "acc", v, None, s, 1, "local")
    >>> [(q.speedup, q.value) for q in pareto_front([p(1.2, 0.9), p(1.1, 0.8), p(1.0, 0.95)])]
    [(1.2, 0.9), (1.0, 0.95)]
    """
    measured = [p for p in points if p.speedup is not None]
    if not measured:
        return []
    indices = frontier([(p.speedup, p.value) for p in measured], measured[0].higher_is_better)
    return [measured[i] for i in reversed(indices)]


def _figure_html(points: list[TradeoffPoint]) -> str:
    # 1. plotly when installed: one trace per method, a line through the Pareto frontier.
    try:
        import plotly.graph_objects as go
        import plotly.io as pio
    except ImportError:
        return "<p><i>Install plotly for the interactive trade-off plot: pip install plotly</i></p>"
    measured = [p for p in points if p.speedup is not None]
    if not measured:
        return (
            "<p><i>No speed rows: the trade-off plot needs layer speed measurements (run the sweep "
            "on a CUDA GPU, or keep the shipped reference database attached).</i></p>"
        )
    return "\n".join(
        _model_figure(go, pio, model, [p for p in measured if p.model == model], i == 0)
        for i, model in enumerate(dict.fromkeys(p.model for p in measured))
    )


def _model_figure(go, pio, model: str, measured: list[TradeoffPoint], first: bool) -> str:
    fig = go.Figure()
    by_method: dict[str, list[TradeoffPoint]] = defaultdict(list)
    for p in measured:
        by_method[p.method].append(p)
    for method, group in sorted(by_method.items()):
        fig.add_trace(
            go.Scatter(
                x=[p.speedup for p in group],
                y=[p.value for p in group],
                mode="markers",
                name=method,
                text=[f"{p.label}<br>tokens {p.tokens}<br>speed: {p.speed_source}" for p in group],
                hovertemplate="%{text}<br>speedup %{x:.2f}x<br>%{y:.4g}<extra></extra>",
            )
        )
    front = pareto_front(measured)
    fig.add_trace(
        go.Scatter(
            x=[p.speedup for p in front],
            y=[p.value for p in front],
            mode="lines+markers",
            name="Pareto frontier",
            line={"dash": "dash", "color": "black"},
            marker={"symbol": "circle-open", "size": 14, "color": "black"},
            hoverinfo="skip",
        )
    )
    better = "higher" if measured[0].higher_is_better else "lower"
    fig.update_layout(
        title=f"{model}: {measured[0].metric} ({better} is better) against speedup",
        xaxis_title="estimated model speedup over dense (x)",
        yaxis_title=measured[0].metric,
        template="plotly_white",
        height=480,
    )
    return pio.to_html(fig, include_plotlyjs=first, full_html=False)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def _tables(rows: ResultTable, points: list[TradeoffPoint]) -> str:
    parts = []
    front = set()
    for model in {p.model for p in points}:
        front |= {id(p) for p in pareto_front([p for p in points if p.model == model])}
    parts.append(
        _html.table(
            [
                "model",
                "configuration",
                "metric",
                "value",
                "dense",
                "change",
                "speedup",
                "tokens",
                "speed from",
                "Pareto",
            ],
            [
                [
                    p.model,
                    p.label,
                    p.metric,
                    _fmt(p.value),
                    _fmt(p.dense),
                    _fmt(None if p.dense is None else p.value - p.dense),
                    "" if p.speedup is None else f"{p.speedup:.2f}x",
                    _fmt(p.tokens),
                    p.speed_source,
                    "yes" if id(p) in front else "",
                ]
                for p in points
            ],
            caption="Pruned models",
        )
    )
    speed = [r for r in rows.where(kind="layer-speed") if r.status == "ok"]
    parts.append(
        _html.table(
            ["source", "model", "pattern", "dtype", "tokens", "shape", "layers", "speedup", "gpu"],
            [
                [
                    r.source,
                    r.model,
                    r.pattern,
                    r.config.get("dtype"),
                    r.config.get("tokens"),
                    "x".join(map(str, r.config.get("shape") or [])),
                    r.config.get("count"),
                    _fmt(_layer_speedup(r)),
                    r.gpu,
                ]
                for r in speed
            ],
            caption=f"Layer speed ({len(speed)} rows)",
        )
    )
    bench = _bench_rows(rows)
    if bench:
        parts.append(
            _html.table(
                [
                    "source",
                    "gpu",
                    "suite",
                    "shape (out x in @ tokens)",
                    "dtype",
                    "dense ms",
                    "explorer ms",
                    "speedup",
                    "torch eager ms",
                    "speedup",
                    "graph speedup",
                ],
                bench,
                caption=f"Benchmark: dense against 2:4 ({len(bench)} problems)",
            )
        )
    bad = [r for r in rows if r.status != "ok"]
    parts.append(
        _html.table(
            ["source", "id", "kind", "status", "configuration", "reason"],
            [
                [
                    r.source,
                    r.id,
                    r.kind,
                    r.status,
                    " ".join(str(v) for k, v in r.config.items() if k not in ("cell", "version")),
                    r.error,
                ]
                for r in bad
            ],
            caption=f"Failed and skipped ({len(bad)} rows)",
        )
    )
    return "\n".join(parts)


def _bench_rows(rows: ResultTable) -> list[list]:
    # Rows of `sparsity-explorer bench --db` (one per implementation and mode), pivoted.
    groups: dict[tuple, dict] = defaultdict(dict)
    for r in rows:
        c = r.config
        if not r.kind.startswith("bench-") or c.get("suite") not in ("matmul", "mlp"):
            continue
        if r.status != "ok" or not isinstance(r.metrics.get("ms"), (int, float)):
            continue
        key = (r.source, r.gpu, c.get("suite"), c.get("m"), c.get("k"), c.get("n"), c.get("dtype"))
        groups[key][(c.get("impl"), c.get("mode"))] = float(r.metrics["ms"])
    out = []
    for (source, gpu, suite, m, k, n, dtype), t in groups.items():

        def ratio(a, b, t=t):
            return f"{t[a] / t[b]:.2f}x" if t.get(a) and t.get(b) else ""

        out.append(
            [
                source,
                gpu,
                suite,
                f"{m}x{k} @ {n}",
                dtype,
                _fmt(t.get(("dense", "eager"))),
                _fmt(t.get(("explorer", "eager"))),
                ratio(("dense", "eager"), ("explorer", "eager")),
                _fmt(t.get(("torch", "eager"))),
                ratio(("dense", "eager"), ("torch", "eager")),
                ratio(("dense", "graph"), ("explorer", "graph")),
            ]
        )
    return out


def _provenance(rows: ResultTable) -> str:
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        groups[(r.source, *(str(r.provenance.get(k)) for k in _PROVENANCE))].append(r)
    body = []
    for key, members in sorted(groups.items()):
        times = sorted(str(m.created) for m in members)
        body.append([*key, len(members), f"{times[0][:19]} .. {times[-1][:19]}"])
    return _html.table(
        ["source", *_PROVENANCE, "rows", "measured"], body, caption="Provenance (versions)"
    )


def write_report(
    db: str | Path | ResultStore | None = None,
    out: str | Path = "report.html",
    csv: str | Path | None = None,
    json: str | Path | None = None,
    include_reference: bool = True,
    title: str = "sparsity-explorer report",
    *,
    force: bool = False,
) -> Path:
    """Write a self-contained HTML report of a results database (and optional exports).

    Parameters
    ----------
    db : path or ResultStore, optional
        The results database, opened read-only; defaults to the per-user one
        (:func:`explorer.results.store.default_path`).
    out : path
        The HTML file to write (default ``report.html``).
    csv, json : path, optional
        Also export every row there (reference rows too, labeled by their ``source``).
    force : bool, optional
        Write over an SQLite file (or the database being read). Without it such an output
        path is refused before anything is written. Every file is written beside its target
        and renamed over it, so a crash never leaves half a file.
    include_reference : bool
        Use the shipped reference database's speed rows where this one has none.
    title : str
        The page's title.

    Returns
    -------
    Path
        ``out``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "r.html"
    >>> write_report(ResultStore(":memory:"), out).read_text().startswith("<!DOCTYPE html>")
    True
    """
    if db is None:
        db = default_path()
    if not isinstance(db, ResultStore) and str(db) != ":memory:" and not Path(db).is_file():
        quoted = shlex.quote(str(db))
        raise StoreError(
            f"no results database at {db}; run a sweep first (sparsity-explorer sweep --db "
            f"{quoted}) or pass the path of an existing one"
        )
    outputs = [
        (p, what)
        for p, what in ((out, "report"), (csv, "CSV export"), (json, "JSON export"))
        if p is not None
    ]
    seen: dict[Path, str] = {}
    for path, what in outputs:
        key = Path(path).expanduser().resolve()
        if key in seen:
            raise ValueError(
                f"the {seen[key]} and the {what} would both be written to {path}; pass "
                "different paths"
            )
        seen[key] = what
    if isinstance(db, ResultStore):
        store = db
    elif str(db) == ":memory:":
        store = ResultStore(db)
    else:
        store = ResultStore(db, readonly=True, source="local")
    try:
        protect = [store.path, *(r.path for r in store.references)]
        protect += [p for p in (reference_path(),) if p is not None]
        for path, what in outputs:
            check_output(path, protect=protect, force=force, what=what)
        rows = store.query(include_reference=include_reference)
        reference = ResultStore.reference() if include_reference else None
        if reference is not None and reference.path not in {r.path for r in store.references}:
            with reference:
                rows = rows + reference.query()
        local = ResultTable(r for r in rows if r.source == "local")
        points = tradeoff_points(rows)
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        summary = (
            f"<p>Database <code>{_html.escape(store.path)}</code>: {len(local)} rows "
            f"({sum(r.status == 'failed' for r in local)} failed), "
            f"{len(rows) - len(local)} reference rows; written {now}.</p>"
        )
        page = (
            "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
            f"<title>{_html.escape(title)}</title>"
            "<style>body{font-family:system-ui,sans-serif;margin:24px;max-width:1200px}"
            "table{margin-bottom:18px}</style></head><body>"
            f"<h1>{_html.escape(title)}</h1>{summary}"
            "<h2>Accuracy versus speedup</h2>"
            f"{_figure_html(points)}<h2>Tables</h2>{_tables(rows, points)}"
            f"<h2>Versions</h2>{_provenance(rows)}</body></html>\n"
        )
        out = Path(out).expanduser()
        with atomic_output(out) as handle:
            handle.write(page)
        if csv is not None:
            rows.to_csv(csv, force=force, protect=protect)
        if json is not None:
            rows.to_json(json, force=force, protect=protect)
        return out
    finally:
        if not isinstance(db, ResultStore):
            store.close()
