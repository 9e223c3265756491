"""``model-speed`` rows: a pruned model timed whole, dense against sparse, and reading them back.

A ``model-speed`` row is one whole-model measurement of one configuration at one token count
in one execution mode: the same pruned, dense-masked model timed as it is and after
:func:`explorer.sparsify`, with CUDA events. :func:`model_speed_row` builds the row (every
writer goes through it, so every row has the same fields) and :func:`measured_speed` reads a
configuration's rows back as one :class:`MeasuredSpeed`, the speed-up the report and the
dashboard prefer over any estimate. The timing itself is
:func:`explorer.bench.model_speed.measure_model_speed`.

Row fields
----------
``kind``
    ``"model-speed"`` (:data:`MODEL_SPEED`).
``config``
    The configuration measured (model, method, pattern, layers, dtype, ...) with ``tokens``
    (the token count asked for) and ``mode`` (one of :data:`SPEED_MODES`); a sweep cell's row
    also has ``of_cell``, the key of the cell whose accuracy row it belongs to.
``metrics``
    ``dense_ms``, ``sparse_ms``, ``speedup`` (dense over sparse, measured), ``tokens_timed``
    (tokens per forward of the input timed), ``timed_as`` (the mode the forwards really ran in:
    ``"eager"`` where a CUDA graph could not be captured), ``dense_gpu_busy`` (share of the
    dense eager forward's wall time the GPU is busy), ``host_bound``, ``layer_estimate`` (the
    swapped layers' summed dense over sparse time: an estimate), ``ceiling`` (the dense model's
    time with those layers' time replaced by their sparse time: an estimate), ``swapped`` and
    ``kept_dense`` (layers).
``status`` and ``error``
    ``"ok"``, or ``"skipped"`` with the reason there is no speed (``"no CUDA GPU here"``, no
    sparse kernel for the pattern), or ``"failed"`` with the error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from explorer import _html

__all__ = [
    "DEFAULT_SPEED_MODE",
    "MODEL_SPEED",
    "SPEED_MODES",
    "MeasuredSpeed",
    "check_speed_mode",
    "measured_speed",
    "model_speed_row",
]

#: The row kind.
MODEL_SPEED = "model-speed"

#: Execution modes a model is timed in: eager calls, ``torch.compile`` in its default mode,
#: and CUDA graphs (what ``mode="reduce-overhead"`` replays: the GPU's time alone).
SPEED_MODES = ("eager", "compile", "graphs")

#: CUDA graphs: the GPU's own time, the least noisy of the three (docs/gpu.md: eager and
#: compile-default timings vary between runs by more than the differences measured), and the
#: mode in which a sparse layer's gain is not hidden behind the host's calls.
DEFAULT_SPEED_MODE = "graphs"

_METRICS = (
    "dense_ms",
    "sparse_ms",
    "speedup",
    "tokens_timed",
    "timed_as",
    "dense_gpu_busy",
    "host_bound",
    "layer_estimate",
    "ceiling",
    "swapped",
    "kept_dense",
)


def check_speed_mode(mode: object) -> str:
    """``mode`` if it is one of :data:`SPEED_MODES`, else a one-line error.

    Parameters
    ----------
    mode : object
        The value given.

    Returns
    -------
    str

    Examples
    --------
    >>> check_speed_mode("graphs")
    'graphs'
    >>> check_speed_mode("fast")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: speed mode 'fast' unknown; expected one of eager, compile, graphs. Hint: ...
    """
    if not isinstance(mode, str) or mode not in SPEED_MODES:
        raise ValueError(
            f"speed mode {mode!r} unknown; expected one of {', '.join(SPEED_MODES)}. Hint: "
            f"'{DEFAULT_SPEED_MODE}' (CUDA graphs, the default) times the GPU's work alone, "
            "'eager' includes the host's time per call, 'compile' is torch.compile's default mode"
        )
    return mode


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def model_speed_row(
    config: Mapping,
    tokens: int,
    mode: str,
    metrics: Mapping | None = None,
    *,
    reason: str | None = None,
    status: str | None = None,
) -> dict:
    """One ``model-speed`` row, checked: a measurement, or the reason there is none.

    Parameters
    ----------
    config : mapping
        The configuration measured (model, method, pattern, layers, dtype, ...).
    tokens : int
        The token count asked for (``config["tokens"]`` of the row).
    mode : str
        One of :data:`SPEED_MODES` (``config["mode"]``).
    metrics : mapping, optional
        Any of the fields listed in the module's docstring; ``speedup`` is computed from
        ``dense_ms`` and ``sparse_ms`` when they are given.
    reason : str, optional
        Why there is no speed: the row is ``"skipped"`` unless ``status`` says otherwise.
    status : {"ok", "skipped", "failed"}, optional

    Returns
    -------
    dict
        ``{"kind", "config", "metrics", "status", "error"}``, ready for
        :meth:`~explorer.results.store.ResultStore.record_many`.

    Raises
    ------
    ValueError
        An unknown mode or metric, a token count that is not positive, an ok row without
        positive times, or a skipped row without a reason.

    Examples
    --------
    >>> row = model_speed_row({"model": "m"}, 4096, "graphs", {"dense_ms": 2.0, "sparse_ms": 1.6})
    >>> row["kind"], row["config"]["tokens"], row["metrics"]["speedup"], row["status"]
    ('model-speed', 4096, 1.25, 'ok')
    >>> model_speed_row({"model": "m"}, 16, "eager", reason="no CUDA GPU here")["status"]
    'skipped'
    """
    check_speed_mode(mode)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"tokens={tokens!r}: expected a positive token count such as 4096")
    values = dict(metrics or {})
    unknown = sorted(set(values) - set(_METRICS))
    if unknown:
        raise ValueError(
            f"model-speed metrics {unknown} unknown; expected some of {', '.join(_METRICS)}"
        )
    status = status or ("skipped" if reason else "ok")
    if status not in ("ok", "skipped", "failed"):
        raise ValueError(f"status={status!r}: expected 'ok', 'skipped' or 'failed'")
    if status == "ok":
        dense, sparse = _number(values.get("dense_ms")), _number(values.get("sparse_ms"))
        if not dense or not sparse or dense <= 0 or sparse <= 0:
            raise ValueError(
                f"an ok model-speed row needs positive dense_ms and sparse_ms; got {dense!r} "
                f"and {sparse!r}. Hint: pass reason= to record why there is no speed"
            )
        values["speedup"] = dense / sparse
    elif not reason:
        raise ValueError(f"a {status} model-speed row needs the reason (reason=...)")
    return {
        "kind": MODEL_SPEED,
        "config": {**config, "tokens": tokens, "mode": mode},
        "metrics": values,
        "status": status,
        "error": reason,
    }


@dataclass(frozen=True)
class MeasuredSpeed:
    """A configuration's speed-up measured on the whole model, from one ``model-speed`` row.

    Attributes
    ----------
    speedup : float
        Dense time over sparse time, measured.
    mode : str
        The mode the forwards ran in (``timed_as``: ``"eager"`` where ``"graphs"`` was asked
        for and the model could not be captured).
    tokens : int
        The token count the row was asked for.
    gpu : str
        The GPU it was measured on.
    source : str
        ``"local"``, or the reference database's origin.
    dense_ms, sparse_ms, ceiling, dense_gpu_busy : float or None
        The times, the ceiling estimate and the dense GPU-busy share, where recorded.
    asked : str
        The mode that was asked for (differs from :attr:`mode` after a fallback).

    Examples
    --------
    >>> MeasuredSpeed(1.18, "graphs", 4096, "H100")
    MeasuredSpeed(1.18x measured, graphs, 4096 tokens, on H100)
    >>> MeasuredSpeed(1.18, "graphs", 4096, "H100").label
    'measured, graphs, 4096 tokens'
    """

    speedup: float
    mode: str
    tokens: int
    gpu: str = "unknown GPU"
    source: str = "local"
    dense_ms: float | None = None
    sparse_ms: float | None = None
    ceiling: float | None = None
    dense_gpu_busy: float | None = None
    asked: str = ""

    @property
    def label(self) -> str:
        """``"measured, <mode>, <tokens> tokens"``: the hover text of a measured point."""
        return f"measured, {self.mode}, {self.tokens} tokens"

    def details(self) -> dict:
        """Hover lines: the times, the ceiling, the GPU-busy share and where it was measured."""
        out = {"measured": self.label, "on": self.gpu}
        if self.dense_ms and self.sparse_ms:
            out["dense / sparse"] = f"{self.dense_ms:.3f} ms / {self.sparse_ms:.3f} ms"
        if self.asked and self.asked != self.mode:
            out["asked for"] = f"{self.asked} (the model could not run that way: timed {self.mode})"
        if self.ceiling:
            out["ceiling (estimate)"] = f"{self.ceiling:.2f}x"
        if self.dense_gpu_busy is not None:
            out["dense GPU busy"] = f"{self.dense_gpu_busy:.0%}"
        return out

    def __repr__(self) -> str:
        return f"MeasuredSpeed({self.speedup:.2f}x {self.label}, on {self.gpu})"

    def _repr_html_(self) -> str:
        rows = [("speedup", f"{self.speedup:.2f}x"), *self.details().items()]
        return _html.table(["", ""], rows, caption=repr(self))


def _matches(config: Mapping, wanted: Mapping) -> bool:
    return all(v is None or config.get(k) == v for k, v in wanted.items())


def _from_row(row) -> MeasuredSpeed | None:
    if row.kind != MODEL_SPEED or row.status != "ok":
        return None
    m, c = row.metrics, row.config
    speedup = _number(m.get("speedup"))
    tokens = c.get("tokens")
    if not speedup or speedup <= 0 or not isinstance(tokens, int):
        return None
    source = getattr(row, "source", "local")
    return MeasuredSpeed(
        speedup=speedup,
        mode=str(m.get("timed_as") or c.get("mode")),
        tokens=tokens,
        gpu=str((row.provenance or {}).get("gpu") or "unknown GPU"),
        source="local" if source == "local" else row.origin,
        dense_ms=_number(m.get("dense_ms")),
        sparse_ms=_number(m.get("sparse_ms")),
        ceiling=_number(m.get("ceiling")),
        dense_gpu_busy=_number(m.get("dense_gpu_busy")),
        asked=str(c.get("mode") or ""),
    )


def measured_speed(
    rows: Iterable,
    *,
    tokens: int | None = None,
    mode: str | None = None,
    model: str | None = None,
    method: str | None = None,
    pattern: str | None = None,
    layers: str | None = None,
    dtype: str | None = None,
    of_cell: str | None = None,
) -> MeasuredSpeed | None:
    """The whole-model speed measured for a configuration, or None when none was.

    Of the ok ``model-speed`` rows among ``rows`` whose configuration matches every filter
    given (None: any), the one at ``tokens`` (else the nearest token count, on a log scale)
    in ``mode`` (else any), the user's own rows before the reference's, the newest first.

    Parameters
    ----------
    rows : iterable of Row
        Store rows (a :class:`~explorer.results.store.ResultTable`); other kinds are ignored.
    tokens : int, optional
        The token count wanted.
    mode : str, optional
        One of :data:`SPEED_MODES`.
    model, method, pattern, layers, dtype, of_cell : str, optional
        The configuration (``of_cell``: the key of a sweep cell).

    Examples
    --------
    >>> from explorer.results.store import ResultStore
    >>> store = ResultStore(":memory:")
    >>> cfg = {"model": "m", "method": "magnitude", "pattern": "2:4", "dtype": "float16"}
    >>> row = model_speed_row(cfg, 4096, "graphs", {"dense_ms": 2.0, "sparse_ms": 1.6})
    >>> _ = store.record(**row, provenance={"gpu": "H100"})
    >>> measured_speed(store.query("model-speed"), tokens=4096, method="magnitude")
    MeasuredSpeed(1.25x measured, graphs, 4096 tokens, on H100)
    >>> measured_speed(store.query("model-speed"), method="wanda") is None
    True
    """
    wanted = dict(model=model, method=method, pattern=pattern, layers=layers, dtype=dtype)
    wanted["of_cell"] = of_cell
    found = []
    for order, row in enumerate(rows):
        speed = _from_row(row) if _matches(row.config, wanted) else None
        if speed is not None and (mode is None or row.config.get("mode") == mode):
            found.append((speed, order))
    if not found:
        return None

    def rank(item: tuple[MeasuredSpeed, int]) -> tuple:
        speed, order = item
        distance = 0.0 if tokens is None else abs(math.log(speed.tokens / max(tokens, 1)))
        return (distance, speed.source != "local", -order)

    return min(found, key=rank)[0]
