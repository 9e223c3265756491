"""Swapped modules that only cost in eager mode go back to the modules they replaced.

The whole-model eager check (:mod:`explorer.gpu.swap.eager_check`) keeps a token count dense
in eager mode where the sparse routes do not pay. Where it did so at every count the model was
sparsified for, no eager call runs a sparse route, yet each swapped module still costs there:
its call finds the dense route through the layer's own tables, a few microseconds of host time
more than ``nn.Linear`` (a host-bound forward pays them: the BERT-like model at 4096 tokens ran
0.96x of dense so on an H200, every swapped layer on its dense weight), and it holds a
compressed weight beside the dense one. So, after that check:

* ``mode="eager"``: every swapped module goes back. Nothing runs sparse in that mode.
* ``mode="auto"``: CUDA graphs still run the layers' own routes (chosen by GPU time), so the
  trade is weighed. Where the check, with every count kept dense, still read the model below
  :data:`LOSS_BELOW` of dense at some count, the whole model is timed in CUDA graphs against
  its dense self at each count (:func:`graph_ratio`); the swapped modules go back when the
  largest gain there is smaller than the largest loss in eager mode.
* ``"compile"`` and ``"graphs"``: no eager check ran, nothing is weighed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping

from torch import nn

from explorer.gpu.swap.block_fusion import swapping

__all__ = ["GRAPH_ROUNDS", "LOSS_BELOW", "PutBack", "graph_ratio", "put_back_unpaid"]

#: With every count kept dense, an eager model at or above this share of dense's speed is
#: within the spread of two equal models' times (the benchmark's dense copies read 0.98-1.03x),
#: and nothing is weighed.
LOSS_BELOW = 0.99

#: Rounds of the CUDA-graph pair, each capturing and replaying both models.
GRAPH_ROUNDS = 3


class PutBack:
    """The weighing after the eager check: each mode's whole-model speedup and the verdict.

    Attributes
    ----------
    mode : str
        The mode ``sparsify`` chose routes for (``"auto"`` or ``"eager"``).
    eager : dict
        ``{tokens: speedup}`` of the eager model with every count kept dense.
    graphs : dict
        ``{tokens: speedup}`` in CUDA graphs, ``None`` where the model could not be captured;
        empty where not timed.
    layers : int
        Swapped layers weighed.

    Examples
    --------
    >>> PutBack("auto", {4096: 0.96}, {4096: 1.01}, 24)
    PutBack(24 layers put back: eager 0.96x with every count dense, CUDA graphs 1.01x)
    >>> PutBack("auto", {16: 0.97}, {16: 1.10}, 4)
    PutBack(4 layers kept: eager 0.97x with every count dense, CUDA graphs 1.10x)
    >>> PutBack("eager", {16: 1.00}, {}, 4).done
    True
    """

    def __init__(
        self, mode: str, eager: Mapping[int, float], graphs: Mapping[int, float | None], layers: int
    ):
        self.mode = mode
        self.eager = dict(eager)
        self.graphs = dict(graphs)
        self.layers = layers

    @property
    def loss(self) -> float:
        """The largest eager loss: one minus the lowest eager speedup (0 where none is below 1)."""
        return max(0.0, 1.0 - min(self.eager.values()))

    @property
    def gain(self) -> float | None:
        """The largest gain in CUDA graphs (may be negative); None where not all were timed."""
        if not self.graphs or None in self.graphs.values():
            return None
        return max(self.graphs.values()) - 1.0

    @property
    def done(self) -> bool:
        """Whether the original modules go back."""
        if self.mode == "eager":
            return True
        if self.mode != "auto" or min(self.eager.values()) >= LOSS_BELOW:
            return False
        gain = self.gain
        return gain is not None and gain < self.loss

    def why(self) -> str:
        """The verdict in words, with the figures it rests on."""
        eager = ", ".join(f"{r:.2f}x at {t}" for t, r in sorted(self.eager.items()))
        head = f"the whole model eagerly with every token count kept dense: {eager}"
        if self.mode == "eager":
            return f"{head}; no eager call runs a sparse route, so the original modules are back"
        if not self.graphs:
            return f"{head}: within the spread of equal models, swapped modules kept"
        if self.gain is None:
            return (
                f"{head}; the model could not be captured in a CUDA graph to weigh its gain "
                "there, swapped modules kept"
            )
        graphs = ", ".join(f"{r:.2f}x at {t}" for t, r in sorted(self.graphs.items()))
        if self.done:
            return (
                f"{head}; in CUDA graphs {graphs}: the largest gain there is smaller than the "
                "loss in eager mode, so the original modules are back (mode='graphs' keeps them)"
            )
        return f"{head}; kept for CUDA graphs, where the model runs {graphs}"

    def __repr__(self) -> str:
        verdict = "put back" if self.done else "kept"
        eager = min(self.eager.values())
        text = f"{self.layers} layers {verdict}: eager {eager:.2f}x with every count dense"
        if self.graphs:
            gain = self.gain
            text += ", CUDA graphs " + ("not captured" if gain is None else f"{1 + gain:.2f}x")
        return f"PutBack({text})"


def graph_ratio(
    model: nn.Module, inputs, swap_dense: Callable[[], None], swap_sparse: Callable[[], None]
) -> float:
    """The whole model's speedup over its dense self in CUDA graphs (GPU time), on ``inputs``.

    :data:`GRAPH_ROUNDS` rounds, each capturing and replaying the dense model and then the
    sparse one (:func:`~explorer.gpu.swap.model_timing.time_forward`); the median of the
    rounds' ratios. The sparse modules are left in place.

    Parameters
    ----------
    model : torch.nn.Module
        The sparsified model.
    inputs : object
        One input, as :func:`~explorer.gpu.swap.model_timing.call_model` takes it.
    swap_dense, swap_sparse : callable
        Put the original modules in place, and the sparse ones back.

    Returns
    -------
    float
        Dense time over sparse time.

    Raises
    ------
    RuntimeError
        The model cannot be captured in a CUDA graph (the sparse modules are back in place).
    """
    from explorer.gpu.swap.model_timing import time_forward

    ratios = []
    try:
        for _ in range(GRAPH_ROUNDS):
            swap_dense()
            dense = time_forward(model, inputs, "graphs")
            swap_sparse()
            ratios.append(dense / time_forward(model, inputs, "graphs"))
    finally:
        swap_sparse()
    return statistics.median(ratios)


def put_back_unpaid(
    model: nn.Module,
    units: list,
    inputs_by_tokens: Mapping[int, object],
    checks: list,
    mode: str,
    report,
    time_graphs: Callable = graph_ratio,
) -> list:
    """Put back every swapped module where no mode the model was sparsified for gains by it.

    Only where the eager check kept every token count of ``inputs_by_tokens`` dense (see the
    module's docstring). Each unit put back is recorded in ``report`` (a note, and each
    layer's reason in ``skipped``); the weighing is ``report.put_back_check``.

    Parameters
    ----------
    model : torch.nn.Module
        The sparsified model.
    units : list of SwapUnit
        The swaps kept after the per-layer measurements.
    inputs_by_tokens : mapping
        ``{tokens: inputs}`` the eager check timed.
    checks : list of EagerCheck
        Its verdicts.
    mode : str
        The mode ``sparsify`` chose routes for.
    report : SparsifyReport
        Gains the records above.
    time_graphs : callable
        ``time_graphs(model, inputs, swap_dense, swap_sparse) -> speedup``; :func:`graph_ratio`
        by default (it times on the GPU).

    Returns
    -------
    list of SwapUnit
        The units still swapped.
    """
    by_tokens = {c.tokens: c for c in checks}
    found = [by_tokens.get(t) for t in inputs_by_tokens]
    if mode not in ("auto", "eager") or not units or not found:
        return units
    if any(c is None or c.error is not None or c.kept for c in found):
        return units  # some count runs sparse routes eagerly, or was not checked
    eager = {c.tokens: c.speedup for c in found}
    layers = sum(len(unit.layers) for unit in units)
    graphs = {}
    if mode == "auto" and min(eager.values()) < LOSS_BELOW:
        originals = {place: mod for unit in units for place, mod in unit.restore.items()}
        to_dense, to_sparse = swapping(model, originals)
        for tokens, inputs in sorted(inputs_by_tokens.items()):
            try:
                graphs[tokens] = time_graphs(model, inputs, to_dense, to_sparse)
            except RuntimeError:
                graphs[tokens] = None
    verdict = PutBack(mode, eager, graphs, layers)
    report.put_back_check = verdict
    if verdict.graphs or verdict.done:
        report.notes.append(verdict.why())
    if not verdict.done:
        return units
    why = f"put back: {verdict.why()}"
    for unit in units:
        unit.put_back(model)
        report.dense_again(unit, why)
    return []
