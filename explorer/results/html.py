"""A self-contained HTML report of a results database: trade-off plot, tables and provenance.

The plot puts each pruned configuration at its model speedup against its headline metric, and
marks the Pareto frontier. A configuration whose own pruned model was timed whole (its
``model-speed`` rows) is drawn at that measurement, as a diamond whose hover names the mode and
token count ("measured, graphs, 4096 tokens"); others at the estimate from the layer speed rows
of the same model, pattern, layers, dtype and token count, as a circle. Speedups measured on this machine are used first; where there are none, the
shipped reference database's are used and the point says so. Quantized configurations (int8,
int4, FP8; :mod:`explorer.results.quantized_report`) are drawn in a colour per precision at
their speed-up over bf16 dense measured on the same model, or in a no-data strip, and listed
with both speed-ups, beside every quantized whole-model measurement. With plotly installed the
plot is interactive (plotly.js embedded inline); without it the report is the tables alone.
"""

from __future__ import annotations

import shlex
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from explorer import _html
from explorer.results.markdown import fmt
from explorer.results.quantized_points import QuantizedPoint
from explorer.results.quantized_report import NO_DATA, quantized_tables, quantized_traces
from explorer.results.speedup import row_speedup
from explorer.results.store import (
    ResultStore,
    ResultTable,
    Row,
    StoreError,
    default_path,
    reference_path,
)
from explorer.results.store.files import atomic_output, check_output
from explorer.results.tradeoff import TradeoffPoint, pareto_points, tradeoff_points

__all__ = ["write_report"]

_PROVENANCE = ("gpu", "gpu_capability", "driver", "cuda", "torch", "cusparselt", "explorer")


def _figure_html(points: list[TradeoffPoint]) -> str:
    # 1. plotly when installed: one trace per method, a line through the Pareto frontier.
    try:
        import plotly.graph_objects as go
        import plotly.io as pio
    except ImportError:
        return "<p><i>Install plotly for the interactive trade-off plot: pip install plotly</i></p>"
    # drawn: points with a speed-up, and quantized ones without (in the no-data strip)
    drawn = [p for p in points if p.speedup is not None or isinstance(p, QuantizedPoint)]
    if not drawn:
        return (
            "<p><i>No speed rows: the trade-off plot needs layer speed measurements (run the sweep "
            "on a CUDA GPU, or keep the shipped reference database attached).</i></p>"
        )
    return "\n".join(
        _model_figure(go, pio, model, [p for p in drawn if p.model == model], i == 0)
        for i, model in enumerate(dict.fromkeys(p.model for p in drawn))
    )


def _model_figure(go, pio, model: str, drawn: list[TradeoffPoint], first: bool) -> str:
    fig = go.Figure()
    measured = [p for p in drawn if p.speedup is not None]
    by_method: dict[str, list[TradeoffPoint]] = defaultdict(list)
    for p in measured:
        if not isinstance(p, QuantizedPoint):  # drawn by precision, below
            by_method[p.method].append(p)
    for method, group in sorted(by_method.items()):
        fig.add_trace(
            go.Scatter(
                x=[p.speedup for p in group],
                y=[p.score for p in group],
                mode="markers",
                name=method,
                text=[f"{p.label}<br>tokens {p.tokens}<br>speed: {_speed_from(p)}" for p in group],
                hovertemplate="%{text}<br>speedup %{x:.2f}x<br>%{y:.4g}<extra></extra>",
                marker={"symbol": [_symbol(p) for p in group], "size": 10},
            )
        )
    for trace in quantized_traces(drawn):
        fig.add_trace(go.Scatter(**trace))
    front = pareto_points(measured)
    fig.add_trace(
        go.Scatter(
            x=[p.speedup for p in front],
            y=[p.score for p in front],
            mode="lines+markers",
            name="Pareto frontier",
            line={"dash": "dash", "color": "black"},
            marker={"symbol": "circle-open", "size": 14, "color": "black"},
            hoverinfo="skip",
        )
    )
    better = "higher" if drawn[0].higher_is_better else "lower"
    strip = any(p.speedup is None for p in drawn)
    xaxis = "model speedup over dense (x): measured or estimated, see each point"
    if any(isinstance(p, QuantizedPoint) for p in drawn):
        xaxis += "; int8, int4 and FP8: over bf16 dense"
    fig.update_layout(
        title=f"{model}: {drawn[0].metric} ({better} is better) against speedup",
        xaxis_title=xaxis,
        yaxis_title=drawn[0].metric,
        template="plotly_white",
        height=480,
    )
    if strip:  # the quantized points without a speed-up: apart, never at 1.0x
        fig.update_layout(
            xaxis={"domain": [0, 0.85]},
            xaxis2={"domain": [0.88, 1], "type": "category", "anchor": "y", "title": NO_DATA},
        )
    return pio.to_html(fig, include_plotlyjs=first, full_html=False)


def _symbol(point: TradeoffPoint) -> str:
    # Measured points are diamonds, estimates circles.
    return "diamond" if point.speed_source == "measured-model" else "circle"


def _speed_from(point: TradeoffPoint) -> str:
    if point.speed_source == "none":
        return ""
    if point.speed_note:
        return f"{point.speed_note}: {point.speed_from}" if point.speed_from else point.speed_note
    if point.speed_source == "baseline":
        return point.speed_from
    return f"{point.speed_label}: {point.speed_from}" if point.speed_from else point.speed_label


def _fmt(value: object) -> str:
    return fmt(value, ".4g", missing="")


def _tables(rows: ResultTable, points: list[TradeoffPoint]) -> str:
    parts = []
    front = set()
    for model in {p.model for p in points}:
        front |= {id(p) for p in pareto_points([p for p in points if p.model == model])}
    quantized = quantized_tables(rows, points, front)
    points = [p for p in points if not isinstance(p, QuantizedPoint)]  # listed in their own
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
                    _fmt(p.score),
                    _fmt(p.dense),
                    _fmt(None if p.dense is None else p.score - p.dense),
                    "" if p.speedup is None else f"{p.speedup:.2f}x",
                    _fmt(p.tokens),
                    _speed_from(p),
                    "yes" if id(p) in front else "",
                ]
                for p in points
            ],
            caption="Pruned models",
        )
    )
    parts.append(_model_speed_table(rows))
    parts += [quantized] if quantized else []
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
                    _fmt(row_speedup(r)),
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


def _model_speed_table(rows: ResultTable) -> str:
    timed = [r for r in rows.where(kind="model-speed") if r.status == "ok"]
    body = [
        [
            r.source,
            r.model,
            " ".join(str(r.config.get(k)) for k in ("method", "pattern", "layers", "dtype")),
            r.config.get("tokens"),
            r.metrics.get("timed_as") or r.config.get("mode"),
            _fmt(r.metrics.get("dense_ms")),
            _fmt(r.metrics.get("sparse_ms")),
            _fmt(row_speedup(r)),
            _fmt(r.metrics.get("ceiling")),
            _fmt(r.metrics.get("dense_gpu_busy")),
            r.gpu,
        ]
        for r in timed
    ]
    header = ["source", "model", "configuration", "tokens", "mode", "dense ms", "sparse ms"]
    header += ["speedup (measured)", "ceiling (estimate)", "dense GPU busy", "gpu"]
    return _html.table(header, body, caption=f"Whole-model speed, measured ({len(body)} rows)")


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
