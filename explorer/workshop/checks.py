"""Check cells for the workshop notebooks: each says right or not yet, with a hint.

Every check takes the learner's answer (a value or a function) plus whatever it needs to
recompute the expected answer, and returns a :class:`Verdict` that displays itself. A check
never raises on a wrong, missing (``...``) or crashing answer: it says what is wrong instead.

Examples
--------
>>> keep_pattern_count(...)
Exercise 1.2: not yet. Replace the ... with your answer. Hint: choose which 4 of the 8 ...
>>> keep_pattern_count(70)
Exercise 1.2: right. C(8, 4) = 70 ways to keep 4 of 8; 2:4 has only C(4, 2) = 6.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "EXERCISES",
    "Verdict",
    "best_method",
    "choice",
    "compressed_fraction",
    "decompress",
    "doctor_fix",
    "end_to_end",
    "finding_code",
    "finetuned",
    "keep_pattern_count",
    "mask_24",
    "metadata_positions",
    "padded_tokens",
    "wanda_scores",
]

#: Exercise number -> the check function for it, in workshop order.
EXERCISES: dict[str, Callable[..., Verdict]] = {}


@dataclass(frozen=True)
class Verdict:
    """The outcome of one check.

    Attributes
    ----------
    exercise : str
        The exercise number, e.g. ``"1.1"``.
    ok : bool
        True when the answer is right.
    message : str
        What was found.
    hint : str
        A nudge towards the answer (shown only when not right).
    """

    exercise: str
    ok: bool
    message: str
    hint: str = ""

    def __bool__(self) -> bool:
        return self.ok

    @property
    def sentence(self) -> str:
        """The message as a sentence: capital first letter."""
        return self.message[:1].upper() + self.message[1:]

    def __repr__(self) -> str:
        if self.ok:
            return f"Exercise {self.exercise}: right. {self.sentence}"
        hint = f" Hint: {self.hint}." if self.hint else ""
        return f"Exercise {self.exercise}: not yet. {self.sentence}{hint}"

    def _repr_html_(self) -> str:
        colour, word = ("#1a7f37", "right") if self.ok else ("#9a6700", "not yet")
        hint = "" if self.ok or not self.hint else f"<br><i>Hint: {html.escape(self.hint)}.</i>"
        return (
            f'<div style="border-left:4px solid {colour};padding:4px 8px">'
            f"<b>Exercise {html.escape(self.exercise)}: "
            f'<span style="color:{colour}">{word}</span></b>. '
            f"{html.escape(self.sentence)}{hint}</div>"
        )


def _exercise(number: str, hint: str):
    """Register a check for exercise ``number``; its ``hint`` is used when not right."""

    def wrap(check):
        def run(*args, **kwargs) -> Verdict:
            answer = args[0] if args else kwargs.get("answer")
            if answer is ... or answer is None:
                return Verdict(number, False, "Replace the ... with your answer.", hint)
            try:
                ok, message = check(*args, **kwargs)
            except _Wrong as exc:
                return Verdict(number, False, str(exc), hint)
            return Verdict(number, bool(ok), message, "" if ok else hint)

        run.__name__ = check.__name__
        run.__qualname__ = check.__qualname__
        run.__doc__ = check.__doc__
        run.exercise = number
        EXERCISES[number] = run
        return run

    return wrap


class _Wrong(Exception):
    """Raised inside a check to say what is wrong with the answer."""


def _call(fn: Any, *args: Any) -> Any:
    """Call the learner's function, turning its failures into a :class:`_Wrong`."""
    if not callable(fn):
        raise _Wrong(f"expected a function, got {type(fn).__name__} {fn!r:.60}")
    try:
        out = fn(*args)
    except Exception as exc:  # the learner's code may raise anything; say what
        raise _Wrong(f"your function raised {type(exc).__name__}: {exc}") from None
    if out is None or out is ...:
        raise _Wrong("your function returned nothing yet (None or ...): finish its body.")
    return out


def _number(answer: Any) -> float:
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise _Wrong(f"expected a number, got {type(answer).__name__} {answer!r:.60}")
    return float(answer)


def _tensor(value: Any, shape: tuple[int, ...], what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise _Wrong(f"{what} should be a torch.Tensor, got {type(value).__name__}")
    if tuple(value.shape) != tuple(shape):
        raise _Wrong(f"{what} has shape {tuple(value.shape)}, expected {tuple(shape)}")
    return value


def _distinct_weights(rows: int, cols: int, seed: int) -> torch.Tensor:
    """Random weights whose magnitudes are all different, so masks have no ties."""
    g = torch.Generator().manual_seed(seed)
    mags = torch.randperm(rows * cols, generator=g).float().add(1).reshape(rows, cols)
    signs = torch.randint(0, 2, (rows, cols), generator=g).mul(2).sub(1)
    return mags * signs / (rows * cols)


# -- notebook 1: what 2:4 is ---------------------------------------------------------------------
@_exercise("1.1", "reshape to (rows, cols // 4, 4), take .abs().topk(2, dim=-1).indices, "
           "scatter True into a zero bool tensor of that shape, reshape back")  # fmt: skip
def mask_24(fn: Callable[[torch.Tensor], torch.Tensor]) -> tuple[bool, str]:
    """Exercise 1.1: ``fn(weight)`` returns the 2:4 keep-mask (2 largest ``|w|`` of every 4).

    Parameters
    ----------
    fn : callable

    Returns
    -------
    Verdict
    """
    from explorer import check_pattern, make_mask

    for rows, cols, seed in ((1, 8, 0), (4, 16, 1), (32, 64, 2)):
        w = _distinct_weights(rows, cols, seed)
        mask = _tensor(_call(fn, w.clone()), (rows, cols), "the mask")
        if mask.dtype != torch.bool:
            raise _Wrong(f"the mask has dtype {mask.dtype}; return a bool tensor (True = keep)")
        if not check_pattern(mask, "2:4").valid:
            raise _Wrong(
                f"on a {rows}x{cols} weight your mask keeps more than 2 of some group of 4"
            )
        if not torch.equal(mask, make_mask(w, "2:4")):
            wrong = int((mask != make_mask(w, "2:4")).sum())
            raise _Wrong(
                f"on a {rows}x{cols} weight your mask is valid 2:4 but differs in {wrong} "
                "places from keeping the 2 largest magnitudes"
            )
    return True, "your mask matches explorer.make_mask(w, '2:4') on three weights."


@_exercise("1.2", "choose which 4 of the 8 positions to keep: math.comb(8, 4)")
def keep_pattern_count(answer: int) -> tuple[bool, str]:
    """Exercise 1.2: how many keep-patterns a 4:8 group has.

    Parameters
    ----------
    answer : int

    Returns
    -------
    Verdict
    """
    value = _number(answer)
    if value == math.comb(8, 4):
        return True, "C(8, 4) = 70 ways to keep 4 of 8; 2:4 has only C(4, 2) = 6."
    if value == 6:
        raise _Wrong("6 is the count for 2:4; a 4:8 group keeps 4 of 8")
    return False, f"{answer} is not the number of ways to keep 4 of 8 positions."


@_exercise("1.3", "values: half the entries at 2 bytes each; metadata: a 2-bit position per "
           "kept value. Divide by the dense bytes (2 per entry)")  # fmt: skip
def compressed_fraction(answer: float) -> tuple[bool, str]:
    """Exercise 1.3: a compressed 16-bit 2:4 weight's size as a fraction of the dense one.

    Parameters
    ----------
    answer : float

    Returns
    -------
    Verdict
    """
    value = _number(answer)
    expected = (0.5 * 2 + 0.5 * 2 / 8) / 2  # values + 2-bit indices of the kept half
    if abs(value - expected) < 1e-3:
        return True, f"{expected:.4f}: 50% for the values plus 6.25% for the 2-bit indices."
    if abs(value - 0.5) < 1e-3:
        raise _Wrong("0.5 counts the values only; the positions (metadata) take space too")
    if value > 1.5:
        raise _Wrong(f"{answer} looks like bytes or bits, not a fraction of the dense size")
    return False, f"{answer} is not the fraction (values plus metadata) of the dense bytes."


# -- notebook 2: pruning methods -----------------------------------------------------------------
@_exercise("2.1", "the norm of each input feature over the tokens is x.norm(dim=0) (shape [in]); "
           "multiply weight.abs() by it, broadcast along the rows")  # fmt: skip
def wanda_scores(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> tuple[bool, str]:
    """Exercise 2.1: ``fn(weight, x)`` returns Wanda's scores ``|W_ij| * ||x_j||_2``.

    Parameters
    ----------
    fn : callable

    Returns
    -------
    Verdict
    """
    from explorer import make_mask

    g = torch.Generator().manual_seed(3)
    w = torch.randn(16, 32, generator=g)
    x = torch.randn(64, 32, generator=g) * torch.linspace(0.1, 10.0, 32)  # outlier features
    scores = _tensor(_call(fn, w.clone(), x.clone()), tuple(w.shape), "the scores")
    expected = w.abs() * x.norm(dim=0)
    if not torch.is_floating_point(scores) or not torch.isfinite(scores).all():
        raise _Wrong("the scores must be finite floating-point numbers")
    if torch.equal(make_mask(w, "2:4", scores=scores.float()), make_mask(w, "2:4", expected)):
        return True, "your scores pick the same 2:4 mask as Wanda's |W| * ||x||."
    if torch.equal(make_mask(w, "2:4", scores=scores.float()), make_mask(w, "2:4")):
        raise _Wrong("your scores pick the magnitude mask: the activations are not used yet")
    return False, "your scores pick a different 2:4 mask than |W_ij| * ||x_j||_2."


@_exercise("2.2", "look at the table above: the best score is the highest for accuracy and "
           "cosine, the lowest for perplexity")  # fmt: skip
def best_method(
    answer: str, scores: Mapping[str, float], higher_is_better: bool = True
) -> tuple[bool, str]:
    """Exercise 2.2: the method whose pruned model scored best (``scores``: method -> metric).

    Parameters
    ----------
    answer : str
    scores : mapping of str to float
        Method -> the metric its pruned model scored.
    higher_is_better : bool, default True

    Returns
    -------
    Verdict
    """
    if not isinstance(answer, str):
        raise _Wrong(f"expected a method name such as 'magnitude', got {answer!r:.60}")
    if answer not in scores:
        raise _Wrong(f"{answer!r} was not run here; the methods were {', '.join(scores)}")
    pick = max if higher_is_better else min
    best = pick(scores.values())
    if scores[answer] == best:
        return True, f"{answer} kept the most: {best:.4g}."
    return False, f"{answer} scored {scores[answer]:.4g}, another method did better."


@_exercise("2.3", "explorer.finetune(bundle.model, result, bundle.train_data, steps=200, "
           "progress=False), then bundle.evaluate()[bundle.metric]")  # fmt: skip
def finetuned(answer: float, bundle: Any, result: Any, before: float) -> tuple[bool, str]:
    """Exercise 2.3: fine-tuning with the masks held raised the metric and kept the zeros.

    Parameters
    ----------
    answer : float
        The learner's metric after fine-tuning.
    bundle : ModelBundle
        The fine-tuned model's bundle.
    result : PruneResult
        The pruning result whose ``masks`` must still hold.
    before : float
        The metric before fine-tuning.

    Returns
    -------
    Verdict
    """
    value = _number(answer)
    model = dict(bundle.model.named_modules())
    for name, mask in result.masks.items():
        kept_zero = model[name].weight.detach()[~mask.to(model[name].weight.device)]
        if kept_zero.numel() and kept_zero.abs().max().item() > 0:
            raise _Wrong(f"layer {name} has nonzeros where its mask is False: the mask was lost")
    now = bundle.evaluate()[bundle.metric]
    if abs(now - value) > 1e-6:
        raise _Wrong(f"the model scores {now:.4g} now, but your answer is {value:.4g}")
    better = now > before if bundle.higher_is_better else now < before
    if better:
        return True, f"{before:.4g} -> {now:.4g} with every pruned weight still zero."
    return False, f"the metric did not improve ({before:.4g} -> {now:.4g}); did fine-tuning run?"


# -- notebook 3: cuSPARSELt step by step ---------------------------------------------------------
@_exercise("3.1", "16-bit activations need rows in multiples of 8, 8-bit in multiples of 16: "
           "round 100 up to each")  # fmt: skip
def padded_tokens(answer: Sequence[int]) -> tuple[bool, str]:
    """Exercise 3.1: 100 tokens padded for a 16-bit and for an 8-bit sparse matmul.

    Parameters
    ----------
    answer : sequence of int
        The learner's pair: padded tokens for 16-bit, then for 8-bit.

    Returns
    -------
    Verdict
    """
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise _Wrong(f"expected a pair (16-bit, 8-bit), got {answer!r:.60}")
    got = tuple(_number(a) for a in answer)
    if got == (104, 112):
        return True, "104 (multiple of 8) for 16-bit and 112 (multiple of 16) for 8-bit."
    if got == (112, 104):
        raise _Wrong("the two are swapped: 8-bit needs the larger multiple")
    return False, f"{answer} are not the next multiples of 8 and of 16 above 100."


@_exercise("3.2", "the low nibble (byte & 0xF) is the first group; in a nibble, bits 0-1 are "
           "the first position and bits 2-3 the second")  # fmt: skip
def metadata_positions(answer: Sequence[Sequence[int]], cw: Any) -> tuple[bool, str]:
    """Exercise 3.2: the positions of row 0's first two groups, decoded from its first byte.

    Parameters
    ----------
    answer : sequence of sequence of int
    cw : CompressedWeight
        The compressed weight whose first metadata byte is decoded.

    Returns
    -------
    Verdict
    """
    expected = [tuple(p) for p in cw.positions()[0, :2].tolist()]
    try:
        got = [tuple(int(i) for i in pair) for pair in answer]
    except (TypeError, ValueError):
        raise _Wrong(f"expected two pairs like ((0, 1), (2, 3)), got {answer!r:.60}") from None
    if got == expected:
        byte = int(cw.metadata[0, 0])
        return True, f"byte {byte} = 0b{byte:08b} holds {expected[0]} and {expected[1]}."
    if got == expected[::-1]:
        raise _Wrong("the groups are swapped: the first group is in the low 4 bits")
    return False, f"{got} is not what the first metadata byte encodes."


@_exercise("3.3", "out = torch.zeros(cw.shape, dtype=cw.values.dtype); "
           "out.scatter_(1, cw.columns(), cw.values)")  # fmt: skip
def decompress(fn: Callable[[Any], torch.Tensor]) -> tuple[bool, str]:
    """Exercise 3.3: ``fn(cw)`` rebuilds the dense weight from values and positions.

    Parameters
    ----------
    fn : callable

    Returns
    -------
    Verdict
    """
    from explorer import compress, make_mask

    for rows, cols, seed in ((2, 8, 4), (16, 64, 5)):
        w = _distinct_weights(rows, cols, seed)
        w = w * make_mask(w, "2:4")
        dense = _tensor(_call(fn, compress(w)), (rows, cols), "the rebuilt weight")
        if not torch.equal(dense.to(w.dtype), w):
            wrong = int((dense.to(w.dtype) != w).sum())
            raise _Wrong(f"on a {rows}x{cols} weight {wrong} entries differ from the original")
    return True, "your decompression rebuilds the pruned weight exactly."


# -- notebook 4: the doctor and the trade-off ----------------------------------------------------
@_exercise("4.1", "print(report) lists each layer's findings; the code is the stable name in "
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
        raise _Wrong(f"expected a finding code such as 'align', got {answer!r:.60}")
    if answer in codes:
        found = next(f for f in reasons if f.code == answer)
        return True, f"{answer}: {found.message}."
    known = sorted({f.code for d in report.layers for f in d.findings})
    return (
        False,
        f"{answer!r} is not among layer {layer}'s warnings or errors (codes seen: {known}).",
    )


@_exercise("4.2", "the doctor wants 16-bit (not float32) and enough tokens per call that the "
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
        raise _Wrong(f"expected a dict with keys 'dtype' and 'tokens', got {answer!r:.80}")
    try:
        report = doctor(model, dtype=answer["dtype"], tokens=answer["tokens"], device="H100")
    except (ValueError, TypeError) as exc:
        raise _Wrong(f"the doctor refused the settings: {exc}") from None
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


@_exercise("4.3", "Amdahl's law: the time left is (1 - fraction) + fraction / layer_speedup; "
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
        got = _number(_call(fn, fraction, speedup))
        want = 1.0 / ((1.0 - fraction) + fraction / speedup)
        if abs(got - want) > 1e-6 * want:
            raise _Wrong(f"fn({fraction}, {speedup}) = {got:.4g}, expected {want:.4g}")
    return True, "a 1.46x layer speedup on 70% of the time is a 1.28x model speedup."


@_exercise("4.4", "keep the frontier points whose metric is within the tolerance of dense, "
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
        raise _Wrong(f"expected one of the plot's labels, e.g. {labels[0]!r}; got {answer!r:.60}")
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
