"""The models benchmark's ``torch.compile`` columns: each variant compiled beside dense alone.

A user compiles the model they run, and perhaps its dense original to compare: two compiled
models in one process, not four. Timed with three more compiled variants of the same model
class in the process (the ``decode=True`` model and the dense copy), the sparsified Qwen2-like
model's CUDA-graph decode step read 0.88x on an H100 while the same model compiled beside dense
alone read 1.14x (both measured at commit 3df5924, every layer on its dense route there, the
stacked q/k/v and gate/up products making the difference). So each variant is compiled and
timed in its own pair with dense, after ``torch._dynamo.reset()``: the pair a notebook that
compares the two holds. The dense copy (the A/A) is timed the same way, so its ratio is the
noise of such a pair.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable

import torch

from explorer.gpu.routes.timing import call_s, interleaved_runs, paired_ratio, rounds_within

__all__ = [
    "COMPILE_MODES",
    "ROUNDS",
    "SLOWEST_TIMED",
    "SPEEDUP_KEYS",
    "TIME_KEYS",
    "TIMING_BUDGET_S",
    "bench_rounds",
    "compiled_columns",
    "too_slow_to_time",
]

#: Compile modes timed: ``torch.compile``'s default, and CUDA graphs (``"reduce-overhead"``).
COMPILE_MODES = ("default", "reduce-overhead")

#: Seconds one side-by-side timing of a run may take, and the bounds on its rounds. A decode
#: step is host-bound, and its time scatters by a few percent from round to round (an H200, eager
#: decode steps of the Phi-3-like model: an unchanged dense copy read 0.98x to 1.00x of dense
#: over 21 rounds, in four timings), so short forwards get more rounds than the least.
TIMING_BUDGET_S = 2.0
ROUNDS = (11, 61)

#: A variant whose one call takes more than this many times dense's is left out of a timing: even
#: the fewest rounds of it would take minutes per run (torch's own 2:4 path in fp16 on a BERT-like
#: model held one run for over seven minutes on an H200; in bf16 it reads about 0.1x of dense).
SLOWEST_TIMED = 50.0

#: ``{compile mode: {variant: time key of the row}}``; dense's time key first.
TIME_KEYS = {
    "default": {
        "dense": "dense_default_ms",
        "sparse": "explorer_default_ms",
        "control": "control_default_ms",
        "decode": "decode_default_ms",
    },
    "reduce-overhead": {
        "dense": "dense_compiled_ms",
        "sparse": "explorer_compiled_ms",
        "control": "control_compiled_ms",
        "decode": "decode_compiled_ms",
    },
}

#: A variant's time key -> the row's key for its speed-up over dense in the same pair.
SPEEDUP_KEYS = {
    "explorer_default_ms": "speedup_default",
    "decode_default_ms": "decode_speedup_default",
    "control_default_ms": "control_speedup_default",
    "explorer_compiled_ms": "speedup_compiled",
    "decode_compiled_ms": "decode_speedup_compiled",
    "control_compiled_ms": "control_speedup_compiled",
}


def bench_rounds(calls: Iterable[Callable[[], object]], calls_each: int) -> int:
    """Rounds of a side-by-side timing whose rounds call each of ``calls`` ``calls_each`` times.

    As many as :data:`TIMING_BUDGET_S` holds, given one synchronized call of each (already
    warm), within :data:`ROUNDS`. Every callable counts: a variant many times slower than dense
    (torch's own 2:4 path, about 0.1x of dense on a BERT-like model in bf16, slower still in
    fp16) takes that many times the budget if the rounds are sized by dense alone.

    Parameters
    ----------
    calls : iterable of callable
        The calls a round makes, without arguments.
    calls_each : int
        Calls one round makes of each (timed, warm-up and lead-in).

    Returns
    -------
    int
        The number of rounds.
    """
    round_ms = sum(call_s(fn) for fn in calls) * 1e3
    return rounds_within(TIMING_BUDGET_S, round_ms, calls_each, *ROUNDS)


def too_slow_to_time(
    variant: Callable[[], object], dense: Callable[[], object], slowest: float = SLOWEST_TIMED
) -> str | None:
    """Why ``variant`` is left out of a side-by-side timing with ``dense``, or None to time it.

    One synchronized call of each (after a warm-up call) decides: a variant more than ``slowest``
    times slower than dense is left out, with its measured time in the reason.

    Parameters
    ----------
    variant, dense : callable
        The calls, without arguments.
    slowest : float, default :data:`SLOWEST_TIMED`
        The largest ratio of the variant's time to dense's that is still timed.

    Returns
    -------
    str or None
        The reason, for the row's ``*_error`` key; None where the variant is timed.
    """
    variant_s, dense_s = call_s(variant), call_s(dense)
    if variant_s <= slowest * dense_s:
        return None
    return (
        f"one forward took {variant_s * 1e3:.0f} ms, {variant_s / dense_s:.0f} times dense's "
        f"{dense_s * 1e3:.2f} ms: too slow to time beside it (left out above {slowest:.0f} times)"
    )


def compiled_columns(
    row: dict,
    call: Callable[[torch.nn.Module], Callable[[], object]],
    models: dict[str, torch.nn.Module | None],
    rounds: int | None = None,
) -> None:
    """Add the ``torch.compile`` times and speed-ups of ``models`` to ``row``, pair by pair.

    For each compile mode of :data:`COMPILE_MODES` and each variant but dense, Dynamo's caches
    are reset, dense and the variant are compiled, warmed (compile, CUDA-graph warm-up and
    recording) and timed side by side (:func:`~explorer.gpu.routes.timing.interleaved_runs`, each
    turn after one untimed call). The speed-up is the median of the rounds' paired ratios to
    dense in that pair; dense's time in the row is its time in the first pair. Under CUDA graphs
    the variants but dense are set to ``mode="graphs"``, as the docs ask of a model run that way,
    and set back to ``"auto"`` after. A variant that fails to compile or run gets an ``*_error``
    key instead, and the others still run.

    Parameters
    ----------
    row : dict
        The benchmark row; gains ``*_default_ms``, ``*_compiled_ms``, the speed-up keys of
        :data:`SPEEDUP_KEYS`, ``*_error`` for a failure, and ``compile_mode``.
    call : callable
        ``call(model)`` returns the no-argument forward to time.
    models : dict
        ``{"dense": ..., "sparse": ..., "control": ..., "decode": ...}``; a None entry is
        skipped.
    rounds : int, optional
        Rounds of each pair's interleaved timing; by default as many as :func:`bench_rounds`
        gives for the pair's two forwards.
    """
    from explorer.gpu import set_mode

    dense = models["dense"]
    for how in COMPILE_MODES:
        keys = TIME_KEYS[how]
        graphs = how != "default"
        for variant, model in models.items():
            if variant == "dense" or model is None:
                continue
            torch._dynamo.reset()
            fns: dict[str, Callable[[], object]] = {}
            try:
                for key, timed in ((keys["dense"], dense), (keys[variant], model)):
                    if graphs and timed is not dense:
                        set_mode(timed, "graphs")
                    try:
                        fn = call(torch.compile(timed, mode=None if how == "default" else how))
                        for _ in range(3):  # compile, then CUDA-graph warm-up and recording
                            fn()
                        torch.cuda.synchronize()
                        fns[key] = fn
                    except Exception as exc:  # a compile failure is a result to report
                        row[key.replace("_ms", "_error")] = f"{type(exc).__name__}: {exc}"[:240]
                if len(fns) == 2:
                    n = rounds or bench_rounds(fns.values(), 4)  # 3 timed, 1 lead-in each
                    runs = interleaved_runs(fns, rounds=n, iters=3, lead_in=1)
                    row.setdefault(keys["dense"], statistics.median(runs[keys["dense"]]))
                    row[keys[variant]] = statistics.median(runs[keys[variant]])
                    speedup = SPEEDUP_KEYS[keys[variant]]
                    row[speedup] = paired_ratio(runs[keys["dense"]], runs[keys[variant]])
            finally:
                if graphs and model is not dense:
                    set_mode(model, "auto")
    row["compile_mode"] = "reduce-overhead"
    torch._dynamo.reset()
