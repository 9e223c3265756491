"""Quantized configurations on the trade-off plot: int8, int4 and FP8, each dense and 2:4.

An accuracy row of a quantized model (a ``dense`` or ``prune`` row whose configuration has
``quant``: the int8 and FP8 steps of a sweep cell, :mod:`explorer.experiments.int8`,
:mod:`explorer.experiments.fp8`, or :mod:`explorer.experiments.int4` with ``db=``) becomes a
:class:`QuantizedPoint`. Its speed comes from quantized whole-model rows
(:mod:`explorer.results.quantized_speed`) of the same model, precision and pattern: the
speed-up over bf16 dense on the x axis, the one over the same precision run dense in the
hover and the tables. A point is drawn at a speed only where the same model was both
evaluated and timed: the benchmark's models (random weights) have no accuracy, the bundled
models' speed is not measured by it, so their quantized points go to the no-data strip, with
the models whose speed was measured named in the hover. Nothing is drawn at 1.0x for want
of a measurement.

:func:`precision_groups` is how both views (the report and the dashboard) draw these points:
one colour per precision, a square for the precision run dense, a circle for 2:4 at it, an x
in the no-data strip.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from explorer import _html
from explorer.results.quantized_speed import PRECISIONS, QuantizedSpeed, quantized_speeds
from explorer.results.tradeoff import TradeoffPoint

__all__ = [
    "PRECISION_COLOURS",
    "QUANT_PRECISION",
    "QuantizedPoint",
    "precision_groups",
    "quantized_points",
]

#: The precision of each ``quant`` value an accuracy row can carry.
QUANT_PRECISION = {
    "int8": "int8",
    "int8-gpu": "int8",
    "fp8": "float8_e4m3fn",
    "int4": "int4",
    "int4-rtn": "int4",
    "int8-weights": "int8-weights",
    "int8-weights-rtn": "int8-weights",
}

#: How each ``quant`` value was evaluated (the hover's "accuracy" line).
_EVALUATED = {
    "int8": "int8 weights and activations, exact integer sums (reference)",
    "int8-gpu": "int8 weights and activations through the cuSPARSELt kernel",
    "fp8": "FP8 e4m3 weights and activations, emulated",
    "int4": "int4 weights quantized inside SparseGPT's column loop (joint)",
    "int4-rtn": "int4 weights rounded to nearest",
    "int8-weights": "int8 weights (weight-only) quantized inside SparseGPT's column loop (joint)",
    "int8-weights-rtn": "int8 weights (weight-only) rounded to nearest",
}
#: How a dense row of a jointly quantized ``quant`` was evaluated: the loop with nothing pruned.
_EVALUATED_DENSE = {
    "int4": "int4 weights quantized by SparseGPT's loop with nothing pruned (GPTQ)",
    "int8-weights": (
        "int8 weights (weight-only) quantized by SparseGPT's loop with nothing pruned (GPTQ)"
    ),
}
#: What a ``quant`` value adds to a point's label.
_LABEL_SUFFIX = {
    "int8-gpu": " (GPU kernel)",
    "int4": " joint",
    "int4-rtn": " RTN",
    "int8-weights": " joint",
    "int8-weights-rtn": " RTN",
}

#: What a ``quant`` value adds to a dense point's label (int4 dense by GPTQ or rounded).
_DENSE_SUFFIX = {
    "int8-gpu": " (GPU kernel)",
    "int4": " GPTQ",
    "int4-rtn": " RTN",
    "int8-weights": " GPTQ",
    "int8-weights-rtn": " RTN",
}

#: The colour of each quantized precision's markers, in both views.
PRECISION_COLOURS = {
    "int8": "#1a7f37",
    "int8-weights": "#9a6700",
    "int4": "#bf3989",
    "float8_e4m3fn": "#1b7c83",
}


@dataclass(frozen=True, repr=False)
class QuantizedPoint(TradeoffPoint):
    """A quantized configuration's point: a :class:`TradeoffPoint` with its precision.

    ``speedup`` is over bf16 dense (the x axis); :attr:`speedup_same` is over the same
    precision run dense. See :class:`~explorer.results.tradeoff.TradeoffPoint` for the other
    attributes.

    Attributes
    ----------
    precision : str
        A key of :data:`~explorer.results.quantized_speed.PRECISIONS` (``"int4"``,
        ``"float8_e4m3fn"`` ...).
    speedup_same : float or None
        Over the same precision run dense (1.0 for that dense point itself); None without a
        measurement.
    mode : str
        How the forwards ran (``"eager"`` or ``"graphs"``); empty without a measurement.

    Examples
    --------
    >>> QuantizedPoint("FP8 2:4 magnitude", 1.24, 0.95, precision="float8_e4m3fn",
    ...                speedup_same=1.05, speed_source="measured-model")
    QuantizedPoint('FP8 2:4 magnitude', 1.24x over bf16 dense, 1.05x over FP8 dense, score 0.95)
    >>> QuantizedPoint("int4 2:4 sparsegpt joint", None, 64.4, precision="int4")
    QuantizedPoint('int4 2:4 sparsegpt joint', no speed measured, score 64.4)
    """

    precision: str = ""
    speedup_same: float | None = None
    mode: str = ""

    @property
    def short(self) -> str:
        """The precision's short name (``"FP8"``)."""
        return PRECISIONS.get(self.precision, self.precision)

    def __repr__(self) -> str:
        if self.speedup is None:
            speed = "no speed measured"
        else:
            same = "" if self.speedup_same is None else f", {self.speedup_same:.2f}x"
            speed = f"{self.speedup:.2f}x over bf16 dense{same}"
            speed += f" over {self.short} dense" if same else ""
        return f"QuantizedPoint({self.label!r}, {speed}, score {self.score:.4g})"

    def _repr_html_(self) -> str:
        def x(value: float | None) -> str:
            return "" if value is None else f"{value:.2f}x"

        rows = [
            ("precision", self.short),
            ("over bf16 dense", x(self.speedup)),
            (f"over {self.short} dense", x(self.speedup_same)),
            ("speed from", self.speed_note or self.speed_label),
            ("score", f"{self.score:.4g}"),
        ]
        return _html.table(["", ""], rows, caption=self.label)


def _label(kind: str, config: dict, quant: str) -> str:
    short = PRECISIONS[QUANT_PRECISION[quant]]
    if kind == "dense":
        return f"{short} dense" + _DENSE_SUFFIX.get(quant, "")
    words = [short, str(config.get("pattern")), str(config.get("method"))]
    words += ["permute"] * bool(config.get("permute")) + [str(config.get("update") or "")]
    return " ".join(w for w in words if w) + _LABEL_SUFFIX.get(quant, "")


def _times(speed: QuantizedSpeed) -> str:
    parts = [f"{speed.name} {speed.ms:.3f} ms"] if speed.ms else []
    if speed.same_ms:
        parts.append(f"{PRECISIONS[speed.precision]} dense {speed.same_ms:.3f} ms")
    if speed.bf16_ms:
        parts.append(f"bf16 dense {speed.bf16_ms:.3f} ms")
    return ", ".join(parts)


def _measured(found: list[QuantizedSpeed]) -> tuple[QuantizedSpeed, dict]:
    # The user's own rows win over the reference's; of several runs (batch shapes of one
    # token count) the lowest is shown and each is listed.
    found = [s for s in found if s.source == "local"] or found
    low = min(found, key=lambda s: s.speedup)
    short = PRECISIONS[low.precision]
    same = "1.0x (it is that baseline)" if low.over_same is None else f"{low.over_same:.2f}x"
    details = {
        "over bf16 dense": f"{low.speedup:.2f}x",
        f"over {short} dense": same,
        "measured": "; ".join(
            f"{s.label}: {s.speedup:.2f}x" + (f" / {s.over_same:.2f}x" if s.over_same else "")
            for s in found
        ),
        "times": _times(low),
        "on": low.gpu + (f", commit {low.commit}" if low.commit else ""),
    }
    if len(found) > 1:
        details["shown"] = "the lowest of these"
    return low, details


def _why(model: str, quant: str, pattern: str, timed: list[QuantizedSpeed], measured: dict) -> dict:
    # Why a point has no speed, and where speed of this precision was measured instead.
    precision, short = QUANT_PRECISION[quant], PRECISIONS[QUANT_PRECISION[quant]]
    if pattern not in ("dense", "2:4"):
        return {"why": f"no sparse kernel runs {pattern}: only 2:4 runs on sparse tensor cores"}
    why = {"why": f"no whole-model {short} {pattern} speed of {model} recorded"}
    if measured:
        at = ", ".join(f"{mode} {tokens} tokens" for tokens, mode in measured)
        why["measured at"] = f"{at} (not the token count or mode shown)"
    others = {
        s.model
        for s in timed
        if (s.precision, s.pattern) == (precision, pattern) and s.model != model
    }
    if others:
        why["measured for"] = (
            f"{', '.join(sorted(others))} (another model: its speed is not this model's; see "
            "the report's quantized speed table)"
        )
    return why


def quantized_points(
    rows,
    tokens: int | None = None,
    mode: str | None = None,
    models: Iterable[str] | None = None,
) -> list[QuantizedPoint]:
    """One point per quantized accuracy row, at each token count and mode its model was timed.

    Of the user's own ``dense`` and ``prune`` rows (``row.source == "local"``) those with a
    ``quant`` in :data:`QUANT_PRECISION` become points, labelled ``"FP8 dense"`` or
    ``"int4 2:4 sparsegpt joint"``. Quantized whole-model rows
    (:func:`~explorer.results.quantized_speed.quantized_speeds`) of the same model, precision
    and pattern (``"dense"`` for a dense row, ``"2:4"`` for a 2:4 one; the pruning method does
    not change a 2:4 kernel's speed) give a point per token count and mode, measured on the
    whole model: the speed-up over bf16 dense, and over the same precision dense. Several runs
    at one token count (batch shapes): the lowest, each listed. A row without such a
    measurement is one point without a speed-up (the no-data strip), whose hover says why.

    Parameters
    ----------
    rows : explorer.results.store.ResultTable
        Accuracy and speed rows (local and reference).
    tokens : int, optional
        Only measurements at this token count (the dashboard's).
    mode : str, optional
        Only measurements in this mode (``"eager"`` or ``"graphs"``).
    models : iterable of str, optional
        Only accuracy rows of these models.

    Returns
    -------
    list of QuantizedPoint

    Examples
    --------
    >>> from explorer.results.store import ResultStore
    >>> store = ResultStore(":memory:")
    >>> acc = {"metric": "accuracy", "accuracy": 0.95}
    >>> _ = store.record("prune", {"model": "m", "method": "magnitude", "pattern": "2:4",
    ...                            "dtype": "bfloat16", "quant": "fp8"}, acc)
    >>> quantized_points(store.query())
    [QuantizedPoint('FP8 2:4 magnitude', no speed measured, score 0.95)]
    """
    wanted = None if models is None else set(models)
    dense: dict[tuple, float] = {}
    for row in rows.where(kind="dense", status="ok", source="local", quant=None):
        name = row.metrics.get("metric")
        if isinstance(row.metrics.get(name), (int, float)):
            dense[(row.model, row.config.get("dtype"))] = float(row.metrics[name])
    # every quantized measurement, read once: {(model, precision, pattern): {(tokens, mode): [...]}}
    timed = [s for found in quantized_speeds(rows).values() for s in found]
    by_config: dict[tuple, dict[tuple[int, str], list[QuantizedSpeed]]] = {}
    for s in timed:
        key = (s.model, s.precision, s.pattern)
        by_config.setdefault(key, {}).setdefault((s.tokens, s.mode), []).append(s)
    points: list[QuantizedPoint] = []
    for row in rows:
        c, quant = row.config, row.config.get("quant")
        if row.kind not in ("dense", "prune") or row.status != "ok" or row.source != "local":
            continue
        if quant not in QUANT_PRECISION or (wanted is not None and row.model not in wanted):
            continue
        name = row.metrics.get("metric")
        value = row.metrics.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not math.isfinite(value):
            continue
        precision = QUANT_PRECISION[quant]
        pattern = "dense" if row.kind == "dense" else str(c.get("pattern"))
        how = _EVALUATED_DENSE.get(quant) if row.kind == "dense" else None
        evaluated = (how or _EVALUATED[quant]) + (
            f", group size {c['group_size']}" if c.get("group_size") else ""
        )
        common = {
            "label": _label(row.kind, c, quant),
            "score": float(value),
            "model": str(c.get("model")),
            "method": "dense" if row.kind == "dense" else str(c.get("method")),
            "pattern": pattern,
            "metric": str(name),
            "dense": dense.get((c.get("model"), c.get("dtype"))),
            "higher_is_better": bool(row.metrics.get("higher_is_better", True)),
            "dtype": str(c.get("dtype")),
            "precision": precision,
        }
        speeds = by_config.get((str(c.get("model")), precision, pattern), {})
        shown = {
            key: found
            for key, found in speeds.items()
            if (tokens is None or key[0] == tokens) and (mode is None or key[1] == mode)
        }
        if not shown:
            why = _why(str(c.get("model")), quant, pattern, timed, speeds)
            details = {**why, "accuracy": evaluated}
            points.append(QuantizedPoint(**common, speedup=None, details=details))
            continue
        for (count, how), found in shown.items():
            low, details = _measured(found)
            same = 1.0 if pattern == "dense" else low.over_same
            points.append(
                QuantizedPoint(
                    **common,
                    speedup=low.speedup,
                    speedup_same=same,
                    mode=how,
                    tokens=count,
                    details={**details, "accuracy": evaluated},
                    speed_source="measured-model",
                    speed_from=low.source,
                    speed_note=f"measured on the whole model, {how}, {count} tokens",
                )
            )
    return points


def precision_groups(
    points: Sequence[TradeoffPoint],
) -> list[tuple[str, dict, list[int], bool]]:
    """How the views draw quantized points: ``(legend name, marker, indices, in the strip)``.

    One group per precision and pattern with a speed-up (a square for the precision run
    dense, a circle for 2:4 at it, in the precision's colour, :data:`PRECISION_COLOURS`), and
    one per precision for the points without one (an x in its colour, drawn in the no-data
    strip, never at 1.0x). Points that are not :class:`QuantizedPoint` are left to the views'
    own groups.

    Parameters
    ----------
    points : sequence of TradeoffPoint
        Every point of a plot.

    Returns
    -------
    list of (str, dict, list of int, bool)
        Legend name, plotly marker, the points' indices in ``points``, and whether they go to
        the no-data strip; int8, int8 weight-only, int4 then FP8, dense before 2:4 before no
        data.

    Examples
    --------
    >>> pts = [TradeoffPoint("dense", 1.0, 0.9),
    ...        QuantizedPoint("FP8 dense", 1.2, 0.9, pattern="dense", precision="float8_e4m3fn"),
    ...        QuantizedPoint("FP8 2:4 wanda", None, 0.88, precision="float8_e4m3fn",
    ...                       pattern="2:4")]
    >>> [(name, marker["symbol"], idx, strip) for name, marker, idx, strip in precision_groups(pts)]
    [('FP8 dense, measured on the whole model', 'square', [1], False), \
('FP8: no speed data (drawn apart)', 'x', [2], True)]
    """
    groups = []
    for precision, colour in PRECISION_COLOURS.items():
        mine = [
            i
            for i, p in enumerate(points)
            if isinstance(p, QuantizedPoint) and p.precision == precision
        ]
        short = PRECISIONS[precision]
        for pattern, symbol in (("dense", "square"), ("2:4", "circle")):
            idx = [i for i in mine if points[i].speedup is not None]
            idx = [i for i in idx if (points[i].pattern == "dense") == (pattern == "dense")]
            if idx:
                name = f"{short} {pattern}, measured on the whole model"
                groups.append((name, {"symbol": symbol, "color": colour}, idx, False))
        idx = [i for i in mine if points[i].speedup is None]
        if idx:
            name = f"{short}: no speed data (drawn apart)"
            groups.append((name, {"symbol": "x", "color": colour}, idx, True))
    return groups
