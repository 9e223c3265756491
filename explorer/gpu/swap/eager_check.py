"""The whole-model check behind "never slower in eager": dense against sparse, per token count.

Each sparse layer picks its eager route from its own back-to-back wall time. At decode sizes a
model run eagerly is host-bound, and there the sum of the layers is not the model: a route that
wins alone by a microsecond can lose it inside the model, where the host's caches are cold
between calls. So after the layers have chosen, :func:`check_eager` times the whole model
eagerly at each token count, side by side with the dense model it was made from (the original
modules swapped back in for the dense runs), and where the sparse model is not at least
:data:`KEEP_SPARSE_AT` as fast, every sparse layer runs dense at that token count in eager mode
(and at the untested small counts of the same regime, see ``SparseLinear.keep_dense_at``).
A model compiled in ``torch.compile``'s default mode then traces those counts dense as well: its
sparse calls cost at least the host time of the eager ones (both run the compiled operator's
programs where it is loaded, :mod:`explorer.gpu.cuda.native`). CUDA graphs keep their own decisions: their
clock sees no host time. ``sparsify`` frees unused dense weights only after this check, so
that the layers it keeps dense have their dense weight to run on.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping

import torch
from torch import nn

from explorer.gpu.routes.timing import interleaved_runs, paired_ratio, rounds_within
from explorer.gpu.swap.block_fusion import swapping
from explorer.gpu.swap.model_timing import call_model

__all__ = [
    "CONFIRM_FROM",
    "KEEP_SPARSE_AT",
    "EagerCheck",
    "check_eager",
    "rounds_for",
    "synthetic_inputs",
]

#: The sparse model keeps its eager routes at a token count if the dense model's time over its
#: own is at least this. Above 1 so that a near tie goes dense, which costs nothing: the check
#: reads one process's rounds, and a Qwen2-1.5B-like prefill it measured at 0.99x (1f34028,
#: H100) then ran at 0.91-0.96x in the benchmark's own rounds, where its dense copy read 1.00x.
KEEP_SPARSE_AT = 1.02

#: A pair that fails is timed once more where the layers' own summed wall times say the sparse
#: routes gain at least this much at that count, and the verdict is then taken on both pairs
#: (their ratios' geometric mean): one pair's rounds can read low on a busy host, and a second
#: costs at most :data:`PAIR_BUDGET_S` more, only where the layers promise a clear gain. The
#: Qwen2-1.5B-like prefill behind it read under 1.02x once on aec6b08 (H200), where the run
#: before had kept its sparse routes; on cd68800 both pairs read 0.94 of dense, a dense model
#: host-bound eagerly on that host, and the count ran dense.
CONFIRM_FROM = 1.05

#: Seconds of timed rounds one dense-against-sparse pair may take, and the bounds on its rounds.
#: A host-bound forward at a decode size takes a few milliseconds and its time scatters by several
#: percent from round to round (an H100 host: an equal-work A/A pair of a Qwen2-like model at one
#: token read 0.98x to 1.11x over 9 rounds), so short forwards get more rounds.
PAIR_BUDGET_S = 1.5
MIN_ROUNDS, MAX_ROUNDS = 9, 45


class EagerCheck:
    """One token count's whole-model eager times, dense against sparse, and the verdict.

    Attributes
    ----------
    tokens : int
    dense_ms, sparse_ms : float
        The dense model and the sparse one with its layers' own routes (one interleaved pair).
    after : tuple of float, optional
        ``(dense ms, sparse ms)`` of a pair taken once every layer runs dense at this count;
        None where the sparse routes were kept.
    error : str, optional
        Why the model could not be timed at this count (its routes are then kept).
    second : tuple of float, optional
        ``(dense ms, sparse ms)`` of the confirming pair, where the first one failed although
        the layers said a clear gain (:data:`CONFIRM_FROM`); None where none was taken.

    Examples
    --------
    >>> EagerCheck(16, 6.1, 6.6, (6.2, 6.1))
    EagerCheck(16 tokens: sparse routes 0.92x, kept dense: 1.02x)
    >>> EagerCheck(4096, 12.0, 10.9)
    EagerCheck(4096 tokens: sparse routes 1.10x, kept)
    >>> EagerCheck(4096, 12.0, 12.1, second=(12.0, 10.8))
    EagerCheck(4096 tokens: sparse routes 0.99x, then 1.11x on a second pair (1.05x), kept)
    >>> EagerCheck(8192, math.nan, math.nan, error="ValueError: too long")
    EagerCheck(8192 tokens: not timed, ValueError: too long)
    """

    def __init__(
        self,
        tokens: int,
        dense_ms: float,
        sparse_ms: float,
        after: tuple[float, float] | None = None,
        error: str | None = None,
        second: tuple[float, float] | None = None,
    ):
        self.tokens = tokens
        self.dense_ms = dense_ms
        self.sparse_ms = sparse_ms
        self.after = after
        self.error = error
        self.second = second

    @property
    def kept(self) -> bool:
        """Whether the layers' sparse routes stay at this token count."""
        return self.after is None

    @property
    def routes_speedup(self) -> float:
        """The sparse routes' whole-model speedup: one pair's, or two pairs' geometric mean."""
        first = self.dense_ms / self.sparse_ms
        if self.second is None:
            return first
        return math.sqrt(first * self.second[0] / self.second[1])

    @property
    def speedup(self) -> float:
        """The whole model's eager speedup over dense at this count, as it now runs."""
        if self.after is None:
            return self.routes_speedup
        return self.after[0] / self.after[1]

    def __repr__(self) -> str:
        if self.error is not None:
            return f"EagerCheck({self.tokens} tokens: not timed, {self.error})"
        head = f"{self.tokens} tokens: sparse routes {self.dense_ms / self.sparse_ms:.2f}x"
        if self.second is not None:
            head += (
                f", then {self.second[0] / self.second[1]:.2f}x on a second pair "
                f"({self.routes_speedup:.2f}x)"
            )
        if self.kept:
            return f"EagerCheck({head}, kept)"
        return f"EagerCheck({head}, kept dense: {self.speedup:.2f}x)"


def synthetic_inputs(model: nn.Module, tokens: int, device) -> dict | None:
    """Random ``input_ids`` for ``tokens`` tokens, for a Hugging Face model with a vocabulary.

    ``tokens`` sequences of one token at decode sizes (up to 64), else the fewest sequences whose
    length divides ``tokens`` and fits the model's positions (``max_position_embeddings``: BERT's
    512 gives 8 x 512 for 4096 tokens). None for any other model, and where no such length exists.

    Parameters
    ----------
    model : torch.nn.Module
        The model (a Hugging Face model has ``config.vocab_size``).
    tokens : int
        Total tokens of the inputs.
    device : torch.device or str
        Where the inputs are made.

    Returns
    -------
    dict or None
        ``{"input_ids": ids}``, or None.

    Examples
    --------
    >>> synthetic_inputs(nn.Linear(4, 4), 16, "cpu") is None
    True
    """
    config = getattr(model, "config", None)
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 1:
        return None
    if tokens <= 64:
        shape = (tokens, 1)
    else:
        limit = getattr(config, "max_position_embeddings", None)
        limit = limit if isinstance(limit, int) and limit > 0 else tokens
        seq = next((s for s in range(min(tokens, limit), 0, -1) if tokens % s == 0), 1)
        if seq < min(64, tokens):
            return None  # only very short sequences fit: not what the count stands for
        shape = (tokens // seq, seq)
    gen = torch.Generator(device=device).manual_seed(tokens)
    ids = torch.randint(0, vocab, shape, device=device, generator=gen)
    return {"input_ids": ids}


def rounds_for(forward_ms: float) -> int:
    """Rounds of a dense-against-sparse pair whose forward takes ``forward_ms``.

    Each round runs both models' warm-up and timed forwards (8 forwards), within
    :data:`PAIR_BUDGET_S` seconds, between :data:`MIN_ROUNDS` and :data:`MAX_ROUNDS`.

    Parameters
    ----------
    forward_ms : float
        One forward's time in milliseconds.

    Returns
    -------
    int
        The number of rounds.

    Examples
    --------
    >>> rounds_for(5.0), rounds_for(100.0), rounds_for(0.1), rounds_for(math.nan)
    (37, 9, 45, 9)
    """
    return rounds_within(PAIR_BUDGET_S, forward_ms, 8, MIN_ROUNDS, MAX_ROUNDS)


def _paired_ms(
    model: nn.Module,
    inputs,
    swap_dense: Callable,
    swap_sparse: Callable,
    rounds: int | None = None,
) -> tuple[float, float]:
    """The dense and the sparse model's eager forward time (ms), interleaved round by round.

    Each round swaps its modules in and warms once, untimed; by default as many rounds as
    :func:`rounds_for` gives for the dense forward's time. Returns the dense median, and the
    sparse time that the rounds' median paired ratio gives.
    """

    def forward() -> None:
        call_model(model, inputs)

    if rounds is None:
        swap_dense()
        forward()  # warm
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        forward()
        end.record()
        end.synchronize()
        rounds = rounds_for(start.elapsed_time(end))

    def warmed(swap: Callable) -> Callable[[], None]:
        return lambda: (swap(), forward())

    runs = interleaved_runs(
        {"dense": forward, "sparse": forward},
        rounds=rounds,
        iters=3,
        warmup=0,
        setup={"dense": warmed(swap_dense), "sparse": warmed(swap_sparse)},
    )
    swap_sparse()
    dense = statistics.median(runs["dense"])
    return dense, dense / paired_ratio(runs["dense"], runs["sparse"])


def check_eager(
    model: nn.Module,
    originals: Mapping[str, nn.Module],
    inputs_by_tokens: Mapping[int, object],
    layers: list,
    time_pair: Callable = _paired_ms,
    layer_gains: Mapping[int, float] | None = None,
) -> list[EagerCheck]:
    """Time ``model`` eagerly against its dense self at each token count.

    Dense is kept where the sparse routes do not pay. A failing pair is confirmed by a second
    one where ``layer_gains`` says the layers gain at least :data:`CONFIRM_FROM` at that count.

    Parameters
    ----------
    model : nn.Module
        The sparsified model (left sparsified).
    originals : mapping
        ``{module path: original module}`` of every swapped place: swapped in for the dense
        runs and out again.
    inputs_by_tokens : mapping
        ``{tokens: inputs}`` for :func:`~explorer.gpu.swap.model_timing.call_model`.
    layers : list of SparseLinear
        The layers told to run dense where the check fails.
    time_pair : callable
        ``time_pair(model, inputs, swap_dense, swap_sparse) -> (dense ms, sparse ms)``; it
        must leave the sparse modules in place (the default times on the GPU).
    layer_gains : mapping, optional
        ``{tokens: dense / sparse}`` of the swapped layers' own summed wall times (the
        report's estimate); a count it lacks gets no second pair.

    Returns
    -------
    list of EagerCheck
        One per token count.
    """
    to_dense, to_sparse = swapping(model, originals)
    checks = []
    with torch.no_grad():
        for tokens, inputs in sorted(inputs_by_tokens.items()):
            try:
                dense_ms, sparse_ms = time_pair(model, inputs, to_dense, to_sparse)
            except (RuntimeError, ValueError, TypeError, IndexError) as exc:
                to_sparse()  # the model is left sparsified, its routes as they were
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
                checks.append(EagerCheck(tokens, math.nan, math.nan, error=error))
                continue
            check = EagerCheck(tokens, dense_ms, sparse_ms)
            gain = (layer_gains or {}).get(tokens, 1.0)
            if check.routes_speedup < KEEP_SPARSE_AT and gain >= CONFIRM_FROM:
                check.second = time_pair(model, inputs, to_dense, to_sparse)
            if check.routes_speedup < KEEP_SPARSE_AT:
                for layer in layers:
                    layer.keep_dense_at(tokens)
                check.after = time_pair(model, inputs, to_dense, to_sparse)
            else:
                for layer in layers:
                    layer.keep_dense_at(tokens, keep=False)
            checks.append(check)
    return checks
