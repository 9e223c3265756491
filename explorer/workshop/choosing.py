"""Check cells of workshop notebook 4: the doctor, Amdahl's law, choosing, and bytes per weight.

Each check says right or not yet with a hint (:mod:`explorer.workshop.verdict`); the notebook
calls them as ``checks.<name>`` (:mod:`explorer.workshop.checks` imports them).

Examples
--------
>>> end_to_end(lambda fraction, speedup: 1 / ((1 - fraction) + fraction / speedup)).ok
True
>>> bits_per_weight(lambda value_bits, sparse, scale_bits, group_size: value_bits)
... # doctest: +ELLIPSIS
Exercise 4.5: not yet. A 2:4 16-bit weight: expected 9 bits a weight, got 16. Hint: 2:4 stores...
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from explorer.workshop.verdict import Wrong, as_number, call_answer, exercise

__all__ = ["bits_per_weight", "choice", "doctor_fix", "end_to_end", "finding_code"]


@exercise("4.1", "print(report) lists each layer's findings; the code is the stable name in "
           "report.reasons(layer)[i].code")  # fmt: skip
def finding_code(answer: str, report: Any, layer: str) -> tuple[bool, str]:
    """Exercise 4.1: the code of the finding that stops ``layer`` from being fast.

    Parameters
    ----------
    answer : str
    report : DoctorReport
    layer : str

    Returns
    -------
    Verdict
    """
    reasons = [f for f in report.reasons(layer) if f.severity in ("warn", "error")]
    codes = [f.code for f in reasons]
    if not isinstance(answer, str):
        raise Wrong(f"expected a finding code such as 'align', got {answer!r:.60}")
    if answer in codes:
        found = next(f for f in reasons if f.code == answer)
        return True, f"{answer}: {found.message}."
    known = sorted({f.code for d in report.layers for f in d.findings})
    return (
        False,
        f"{answer!r} is not among layer {layer}'s warnings or errors (codes seen: {known}).",
    )


@exercise("4.2", "the doctor wants 16-bit (not float32) and enough tokens per call that the "
           "product passes the size it names; keep the tokens a multiple of 8")  # fmt: skip
def doctor_fix(answer: Mapping[str, Any], model: torch.nn.Module) -> tuple[bool, str]:
    """Exercise 4.2: ``{"dtype": ..., "tokens": ...}`` for which every layer is fast on an H100.

    Parameters
    ----------
    answer : mapping
    model : torch.nn.Module
        The model the doctor examines (for an H100).

    Returns
    -------
    Verdict
    """
    from explorer import doctor

    if not isinstance(answer, Mapping) or set(answer) != {"dtype", "tokens"}:
        raise Wrong(f"expected a dict with keys 'dtype' and 'tokens', got {answer!r:.80}")
    try:
        report = doctor(model, dtype=answer["dtype"], tokens=answer["tokens"], device="H100")
    except (ValueError, TypeError) as exc:
        raise Wrong(f"the doctor refused the settings: {exc}") from None
    warned = [n for n in report.notes if n.severity in ("warn", "error")]
    if report.counts()["fast"] == len(report.layers) and not warned:
        return True, f"{report!r}"
    if warned:  # model-level warnings, e.g. float32 runs as TF32 and gains little
        return (
            False,
            f"the doctor warns about the whole model: [{warned[0].code}] {warned[0].message}.",
        )
    worst = next(d for d in report.layers if d.verdict != "fast")
    first = report.reasons(worst.name)[0]
    return False, f"layer {worst.name} is {worst.verdict}: [{first.code}] {first.message}."


@exercise("4.3", "Amdahl's law: the time left is (1 - fraction) + fraction / layer_speedup; "
           "the speedup is 1 over that")  # fmt: skip
def end_to_end(fn: Callable[[float, float], float]) -> tuple[bool, str]:
    """Exercise 4.3: ``fn(fraction, layer_speedup)``, the whole model's speedup (Amdahl).

    Parameters
    ----------
    fn : callable

    Returns
    -------
    Verdict
    """
    cases = ((0.7, 1.46), (1.0, 2.0), (0.0, 2.0), (0.5, 1.0), (0.9, 0.8))
    for fraction, speedup in cases:
        got = as_number(call_answer(fn, fraction, speedup))
        want = 1.0 / ((1.0 - fraction) + fraction / speedup)
        if abs(got - want) > 1e-6 * want:
            raise Wrong(f"fn({fraction}, {speedup}) = {got:.4g}, expected {want:.4g}")
    return True, "a 1.46x layer speedup on 70% of the time is a 1.28x model speedup."


@exercise("4.4", "keep the frontier points whose metric is within the tolerance of dense, "
           "then take the one with the largest speedup")  # fmt: skip
def choice(answer: str, plot: Any, dense: float, tolerance: float) -> tuple[bool, str]:
    """Exercise 4.4: the label of the fastest frontier point within ``tolerance`` of dense.

    Parameters
    ----------
    answer : str
        The learner's label of a point of ``plot``.
    plot : TradeoffPlot
        The trade-off plot (``points``, ``frontier()``, ``higher_is_better``).
    dense : float
        The dense model's metric.
    tolerance : float

    Returns
    -------
    Verdict
    """
    labels = [p.label for p in plot.points]
    if not isinstance(answer, str) or answer not in labels:
        raise Wrong(f"expected one of the plot's labels, e.g. {labels[0]!r}; got {answer!r:.60}")
    better = plot.higher_is_better
    ok = [
        p for p in plot.frontier() if (dense - p.score if better else p.score - dense) <= tolerance
    ]
    best = max(ok, key=lambda p: p.speedup)
    chosen = next(p for p in plot.points if p.label == answer)
    if chosen.speedup == best.speedup and chosen in ok:
        return True, f"{answer}: {chosen.speedup:.2f}x within {tolerance:.3g} of dense."
    if chosen not in ok:
        return (
            False,
            f"{answer} loses more than {tolerance:.3g} of the metric, or is off the frontier.",
        )
    return False, f"{answer} is allowed, but another allowed point is faster."


#: Exercise 4.5's formats: (what, value bits, 2:4, scale bits, group size), bits per weight.
FORMATS = (
    ("a dense bf16 weight", 16, False, 0, 1, 16.0),
    ("a 2:4 16-bit weight", 16, True, 0, 1, 9.0),
    (
        "torch's int4 dense (a bf16 scale and zero, 32 bits, per 128 weights)",
        4,
        False,
        32,
        128,
        4.25,
    ),
    ("2:4 + int4 (a float32 scale per 128 weights of a row)", 4, True, 32, 128, 3.25),
    ("2:4 int8 (one float32 scale per row of 4096)", 8, True, 32, 4096, 5.0078125),
    ("2:4 + int8 weights (a float32 scale per 128 weights of a row)", 8, True, 32, 128, 5.25),
)


@exercise("4.5", "2:4 stores half the values, and each kept value carries a 2-bit position; "
          "the scales add scale_bits for every group_size weights")  # fmt: skip
def bits_per_weight(fn: Callable[..., float]) -> tuple[bool, str]:
    """Exercise 4.5: ``fn(value_bits, sparse, scale_bits, group_size)``, bits per dense weight.

    Parameters
    ----------
    fn : callable

    Returns
    -------
    Verdict
    """
    for what, value_bits, sparse, scale_bits, group_size, want in FORMATS:
        got = as_number(call_answer(fn, value_bits, sparse, scale_bits, group_size))
        if abs(got - want) > 1e-9 * want:
            raise Wrong(f"{what}: expected {want:g} bits a weight, got {got:g}.")
    dense, sparse, int8 = FORMATS[2][-1], FORMATS[3][-1], FORMATS[5][-1]
    return True, (
        f"2:4 + int4 stores {sparse:g} bits a weight against {dense:g} for int4 dense: at one "
        f"token, where a step's time is its bytes, 2:4 can be at most {dense / sparse:.2f}x "
        f"faster than int4 dense, against {16 / 9:.2f}x (16/9) over bf16 in 16 bits and "
        f"{16 / int8:.2f}x over bf16 with int8 weights ({int8:g} bits)."
    )
