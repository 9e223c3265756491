"""``SparsifyReport``: what :func:`explorer.sparsify` did, layer by layer, with measured times."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from explorer import _html

__all__ = ["LayerTiming", "SparsifyReport"]


@dataclass(frozen=True)
class LayerTiming:
    """One layer's measured times at one token count (milliseconds, CUDA events).

    Attributes
    ----------
    fqn : str
        The layer (a fused block's stacked layers are named ``block.qkv`` / ``block.gate_up``).
    shape : tuple of int
        ``(out, in)`` of the product timed.
    tokens : int
        Token count as decided: small counts as they are, larger ones padded to their
        plan's count (:func:`~explorer.gpu.library.cusparselt.decision_tokens`).
    dense_ms, sparse_ms : float or None
        cuBLAS on the dense weight, and the fastest correct sparse route.
    route : str
        What the layer runs at this token count.
    clock : {"wall", "gpu"}
        Which time: back-to-back eager calls (host time included where it is longer) or
        CUDA-graph replay (GPU time alone).
    chosen_ms : float, optional
        The time of the route the layer runs (``route``); where not given, dense's time for a
        dense route and the fastest sparse route's otherwise.

    Examples
    --------
    >>> LayerTiming("l", (64, 64), 16, 1.4, 1.0, "dense", "wall").speedup  # kept dense
    1.0
    >>> LayerTiming("l", (64, 64), 16, 1.5, 1.0, "sparse cc default", "wall", 1.25).speedup
    1.2
    """

    fqn: str
    shape: tuple[int, int]
    tokens: int
    dense_ms: float | None
    sparse_ms: float | None
    route: str
    clock: str = "gpu"
    chosen_ms: float | None = None

    @property
    def chosen_time(self) -> float | None:
        """The chosen route's time in ms (dense's where the layer stays dense at this count)."""
        if self.dense_ms is None:
            return None
        if self.route in ("dense", "None") or self.sparse_ms is None:
            return self.dense_ms
        return self.chosen_ms if self.chosen_ms is not None else min(self.sparse_ms, self.dense_ms)

    @property
    def speedup(self) -> float | None:
        """Dense time over the chosen route's time (1.0 when it stays dense)."""
        if self.dense_ms is None or self.sparse_ms is None:
            return None
        return self.dense_ms / self.chosen_time


@dataclass
class SparsifyReport:
    """What :func:`sparsify` did: swapped layers, layers kept dense with reasons, and times.

    Attributes
    ----------
    swapped : list of (str, tuple)
        ``(fqn, (out, in))`` of the layers now running 2:4 sparse (at least at one token count).
    skipped : list of (str, str)
        ``(fqn, reason)`` of the ``nn.Linear`` layers kept dense.
    fused : list of str
        Blocks swapped whole: SwiGLU MLPs (:class:`~explorer.gpu.modules.gated_mlp.SparseGatedMLP`)
        and attention projections (:class:`~explorer.gpu.modules.fused_qkv.SparseQKV`, ``fqn.qkv``).
    backend : str
        The sparse matmul backend the swapped layers use (``"explorer"`` for int4).
    dtype : str
        The dtype the swapped layers run in, by name (``"int4"`` for int4 weights).
    timings : list of LayerTiming
        Per layer and token count, dense and sparse times as measured by ``sparsify``.
    notes : list of str
        Anything else worth knowing (shared modules, untuned shapes, memory kept for dense).
    mode : str
        The execution mode routes were chosen for (see
        :func:`~explorer.gpu.swap.model_swap.sparsify`).
    model_speeds : list of ModelSpeed
        Whole-model forwards timed dense then sparse on the example inputs, per token count.
    search_s : float
        Seconds spent searching algorithms for shapes no table knew.
    eager_checks : list of EagerCheck
        The whole model timed eagerly against its dense self per token count, and where its
        layers were told to run dense in eager mode (:mod:`explorer.gpu.swap.eager_check`).
    put_back_check : PutBack or None
        Where that check kept every count dense: whether the original modules went back
        (:mod:`explorer.gpu.swap.eager_put_back`); None where it did not.
    model : nn.Module
        The sparsified model.
    """

    swapped: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    fused: list = field(default_factory=list)
    backend: str = "cusparselt"
    dtype: str = "float16"
    timings: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    mode: str = "auto"
    model_speeds: list = field(default_factory=list)
    search_s: float = 0.0
    eager_checks: list = field(default_factory=list)
    put_back_check: object = None
    model: nn.Module | None = field(default=None, repr=False)

    def reason(self, fqn: str) -> str | None:
        """Why ``fqn`` was kept dense (None if it was swapped).

        Parameters
        ----------
        fqn : str
            The layer's name.

        Returns
        -------
        str or None
            The reason, or None.
        """
        return dict(self.skipped).get(fqn)

    def dense_again(self, unit, why: str) -> None:
        """Record that ``unit``'s original modules are back in the model, and why.

        Parameters
        ----------
        unit : SwapUnit
            The swap undone (:class:`~explorer.gpu.swap.block_fusion.SwapUnit`).
        why : str
            The reason each of its layers is dense again.

        Examples
        --------
        >>> from types import SimpleNamespace
        >>> report = SparsifyReport(fused=["attn.qkv"])
        >>> report.dense_again(SimpleNamespace(fqn="attn.qkv", layers={"attn.q": 0}), "slower")
        >>> report.skipped, report.fused
        ([('attn.q', 'slower')], [])
        """
        for place in unit.layers:
            self.skipped.append((place, why))
        gone = (unit.fqn, unit.fqn.removesuffix(".qkv") + ".sparse_qkv")
        self.fused = [f for f in self.fused if f not in gone]

    def layer_estimate(self, tokens: int, clock: str | None = None) -> tuple[float, float] | None:
        """Summed dense and chosen times of the swapped layers at ``tokens`` (an estimate).

        Each layer counts the route it runs (:attr:`LayerTiming.chosen_time`), not the fastest
        it timed: a sparse route the rules did not take (slower than dense on the GPU) adds
        nothing.

        The rest of the model (attention, norms, embeddings) is not in this sum, so the whole
        model gains less than ``dense / sparse`` here; pass ``example_inputs`` to ``sparsify``
        (``model_speeds``) or run ``sparsity-explorer bench --suites models`` for whole
        models. ``clock`` picks the times (``"wall"`` or ``"gpu"``); by default the first
        recorded.

        Parameters
        ----------
        tokens : int
            The token count.
        clock : {"wall", "gpu"}, optional
            The clock whose times are summed (default: the first recorded).

        Returns
        -------
        (float, float) or None
            Dense and chosen milliseconds, or None where no times were recorded at ``tokens``.
        """
        clock = clock or next((t.clock for t in self.timings), None)
        rows = [
            t
            for t in self.timings
            if t.tokens == tokens and t.dense_ms is not None and t.clock == clock
        ]
        if not rows:
            return None
        return sum(t.dense_ms for t in rows), sum(t.chosen_time for t in rows)

    def route_tally(self) -> dict[tuple[int, str], tuple[int, int]]:
        """How many timed layers chose a sparse route, per token count and clock.

        Layers put back dense afterwards count as timed, with the routes they had chosen.

        Returns
        -------
        dict
            ``{(tokens, clock): (on a sparse route, timed)}``, largest counts first.

        Examples
        --------
        >>> report = SparsifyReport()
        >>> report.timings = [
        ...     LayerTiming("a", (64, 64), 16, 1.0, 0.8, "sparse cc default", "gpu"),
        ...     LayerTiming("b", (64, 64), 16, 1.0, 1.2, "dense", "gpu"),
        ... ]
        >>> report.route_tally()
        {(16, 'gpu'): (1, 2)}
        """
        tally: dict[tuple[int, str], tuple[int, int]] = {}
        for t in sorted(self.timings, key=lambda t: -t.tokens):
            sparse, timed = tally.get((t.tokens, t.clock), (0, 0))
            on_sparse = t.route not in ("dense", "None")
            tally[(t.tokens, t.clock)] = (sparse + on_sparse, timed + 1)
        return tally

    def __repr__(self) -> str:
        parts = [
            f"{len(self.swapped)} swapped",
            f"{len(self.skipped)} kept dense",
            f"{len(self.fused)} blocks fused",
        ]
        measured = {s.tokens: s for s in self.model_speeds}
        checked = {c.tokens: c for c in self.eager_checks}
        for n in sorted({t.tokens for t in self.timings} | set(measured) | set(checked)):
            speed = measured.get(n)
            if speed is not None:
                parts.append(f"model at {_tokens(n)} {speed.speedup:.2f}x measured ({speed.mode})")
                if speed.host_bound:
                    parts.append(f"dense host-bound at {_tokens(n)}")
                continue  # no estimate beside a measurement of the same count
            if n in checked and checked[n].error is None:
                check = checked[n]
                if self._originals_back:
                    parts.append(
                        f"model at {_tokens(n)} dense: original modules back (eager "
                        f"{check.speedup:.2f}x with the swapped ones)"
                    )
                    continue
                kept = "" if check.kept else ", layers dense there"
                parts.append(f"model at {_tokens(n)} {check.speedup:.2f}x measured (eager{kept})")
                continue
            est = self.layer_estimate(n)
            if est:
                parts.append(f"layers at {_tokens(n)} {est[0] / est[1]:.2f}x (estimate)")
        return (
            f"SparsifyReport({', '.join(parts)}, mode={self.mode}, backend={self.backend}, "
            f"dtype={self.dtype})"
        )

    @property
    def _originals_back(self) -> bool:
        return self.put_back_check is not None and self.put_back_check.done

    def _repr_html_(self) -> str:
        rows = [(n, f"{s[0]} x {s[1]}", _html.badge("sparse", "ok"), "") for n, s in self.swapped]
        rows += [(n, "", _html.badge("dense", "warn"), r) for n, r in self.skipped]
        html = _html.table(
            ["layer", "shape", "now", "why dense"], rows, caption=repr(self), raw_columns=(2,)
        )
        for speed in self.model_speeds:
            html += speed._repr_html_()
        if self.eager_checks:
            crows = [
                (
                    c.tokens,
                    f"{c.routes_speedup:.2f}x",
                    "kept" if c.kept else "dense in eager",
                    "original modules back" if self._originals_back else f"{c.speedup:.2f}x",
                )
                if c.error is None
                else (c.tokens, "", f"not timed: {c.error}", "")
                for c in self.eager_checks
            ]
            html += _html.table(
                ["tokens", "sparse routes", "verdict", "whole model now"],
                crows,
                caption="whole model, eager, against its dense self (medians of CUDA events)",
            )
        if self.timings:
            trows = [
                (
                    t.fqn,
                    f"{t.shape[0]} x {t.shape[1]}",
                    t.tokens,
                    _ms(t.dense_ms),
                    _ms(t.sparse_ms),
                    f"{t.speedup:.2f}x" if t.speedup else "",
                    t.route,
                    t.clock,
                )
                for t in self.timings
            ]
            html += _html.table(
                ["layer", "shape", "tokens", "dense ms", "sparse ms", "speedup", "runs", "time"],
                trows,
                caption="measured per layer (CUDA events); the whole model gains less: "
                "the rest of it is unchanged",
            )
        return html

    def timing_table(self) -> str:
        """The per-layer times as a Markdown table, one row per distinct measurement.

        Layers of the same problem share one; the first is named with how many there are.
        """
        lines = [
            "| layer | shape | tokens | time | dense ms | sparse ms | speedup | runs |",
            "|---|---|---|---|---|---|---|---|",
        ]
        groups: dict[tuple, list[LayerTiming]] = {}
        for t in self.timings:
            key = (t.shape, t.tokens, t.clock, t.dense_ms, t.sparse_ms, t.route)
            groups.setdefault(key, []).append(t)
        for members in groups.values():
            t, more = members[0], len({m.fqn for m in members}) - 1
            name = f"{t.fqn} (+{more} alike)" if more else t.fqn
            sp = f"{t.speedup:.2f}x" if t.speedup else ""
            lines.append(
                f"| {name} | {t.shape[0]}x{t.shape[1]} | {t.tokens} | {t.clock} | "
                f"{_ms(t.dense_ms)} | {_ms(t.sparse_ms)} | {sp} | {t.route} |"
            )
        return "\n".join(lines)


def _ms(v: float | None) -> str:
    return "" if v is None else f"{v:.4f}"


def _tokens(n: int) -> str:
    """``"1 token"``, ``"16 tokens"``: a token count as the report's text reads it."""
    return f"{n} token" if n == 1 else f"{n} tokens"
