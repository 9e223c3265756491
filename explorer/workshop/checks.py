"""Check cells for the workshop notebooks: each says right or not yet, with a hint.

Every check takes the learner's answer (a value or a function) plus whatever it needs to
recompute the expected answer, and returns a :class:`~explorer.workshop.verdict.Verdict` that
displays itself. A check never raises on a wrong, missing (``...``) or crashing answer: it says
what is wrong instead. This module holds the checks of notebooks 1 to 3; notebook 4's are in
:mod:`explorer.workshop.choosing`, and the notebooks reach every check as ``checks.<name>``.

Examples
--------
>>> keep_pattern_count(...)
Exercise 1.2: not yet. Replace the ... with your answer. Hint: choose which 4 of the 8 ...
>>> keep_pattern_count(70)
Exercise 1.2: right. C(8, 4) = 70 ways to keep 4 of 8; 2:4 has only C(4, 2) = 6.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from explorer.workshop.choosing import (  # noqa: F401 (notebook 4 calls them as checks.<name>)
    bits_per_weight,
    choice,
    doctor_fix,
    end_to_end,
    finding_code,
)
from explorer.workshop.verdict import Wrong, as_number, as_tensor, call_answer, exercise

__all__ = [
    "best_method",
    "compressed_fraction",
    "decompress",
    "finetuned",
    "keep_pattern_count",
    "mask_24",
    "metadata_positions",
    "padded_tokens",
    "wanda_scores",
]


def _distinct_weights(rows: int, cols: int, seed: int) -> torch.Tensor:
    """Random weights whose magnitudes are all different, so masks have no ties."""
    g = torch.Generator().manual_seed(seed)
    mags = torch.randperm(rows * cols, generator=g).float().add(1).reshape(rows, cols)
    signs = torch.randint(0, 2, (rows, cols), generator=g).mul(2).sub(1)
    return mags * signs / (rows * cols)


# -- notebook 1: what 2:4 is ---------------------------------------------------------------------
@exercise("1.1", "reshape to (rows, cols // 4, 4), take .abs().topk(2, dim=-1).indices, "
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
        mask = as_tensor(call_answer(fn, w.clone()), (rows, cols), "the mask")
        if mask.dtype != torch.bool:
            raise Wrong(f"the mask has dtype {mask.dtype}; return a bool tensor (True = keep)")
        if not check_pattern(mask, "2:4").valid:
            raise Wrong(f"on a {rows}x{cols} weight your mask keeps more than 2 of some group of 4")
        if not torch.equal(mask, make_mask(w, "2:4")):
            wrong = int((mask != make_mask(w, "2:4")).sum())
            raise Wrong(
                f"on a {rows}x{cols} weight your mask is valid 2:4 but differs in {wrong} "
                "places from keeping the 2 largest magnitudes"
            )
    return True, "your mask matches explorer.make_mask(w, '2:4') on three weights."


@exercise("1.2", "choose which 4 of the 8 positions to keep: math.comb(8, 4)")
def keep_pattern_count(answer: int) -> tuple[bool, str]:
    """Exercise 1.2: how many keep-patterns a 4:8 group has.

    Parameters
    ----------
    answer : int

    Returns
    -------
    Verdict
    """
    value = as_number(answer)
    if value == math.comb(8, 4):
        return True, "C(8, 4) = 70 ways to keep 4 of 8; 2:4 has only C(4, 2) = 6."
    if value == 6:
        raise Wrong("6 is the count for 2:4; a 4:8 group keeps 4 of 8")
    return False, f"{answer} is not the number of ways to keep 4 of 8 positions."


@exercise("1.3", "values: half the entries at 2 bytes each; metadata: a 2-bit position per "
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
    value = as_number(answer)
    expected = (0.5 * 2 + 0.5 * 2 / 8) / 2  # values + 2-bit indices of the kept half
    if abs(value - expected) < 1e-3:
        return True, f"{expected:.4f}: 50% for the values plus 6.25% for the 2-bit indices."
    if abs(value - 0.5) < 1e-3:
        raise Wrong("0.5 counts the values only; the positions (metadata) take space too")
    if value > 1.5:
        raise Wrong(f"{answer} looks like bytes or bits, not a fraction of the dense size")
    return False, f"{answer} is not the fraction (values plus metadata) of the dense bytes."


# -- notebook 2: pruning methods -----------------------------------------------------------------
@exercise("2.1", "the norm of each input feature over the tokens is x.norm(dim=0) (shape [in]); "
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
    scores = as_tensor(call_answer(fn, w.clone(), x.clone()), tuple(w.shape), "the scores")
    expected = w.abs() * x.norm(dim=0)
    if not torch.is_floating_point(scores) or not torch.isfinite(scores).all():
        raise Wrong("the scores must be finite floating-point numbers")
    if torch.equal(make_mask(w, "2:4", scores=scores.float()), make_mask(w, "2:4", expected)):
        return True, "your scores pick the same 2:4 mask as Wanda's |W| * ||x||."
    if torch.equal(make_mask(w, "2:4", scores=scores.float()), make_mask(w, "2:4")):
        raise Wrong("your scores pick the magnitude mask: the activations are not used yet")
    return False, "your scores pick a different 2:4 mask than |W_ij| * ||x_j||_2."


@exercise("2.2", "look at the table above: the best score is the highest for accuracy and "
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
        raise Wrong(f"expected a method name such as 'magnitude', got {answer!r:.60}")
    if answer not in scores:
        raise Wrong(f"{answer!r} was not run here; the methods were {', '.join(scores)}")
    pick = max if higher_is_better else min
    best = pick(scores.values())
    if scores[answer] == best:
        return True, f"{answer} kept the most: {best:.4g}."
    return False, f"{answer} scored {scores[answer]:.4g}, another method did better."


@exercise("2.3", "explorer.finetune(bundle.model, result, bundle.train_data, steps=200, "
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
    value = as_number(answer)
    model = dict(bundle.model.named_modules())
    for name, mask in result.masks.items():
        kept_zero = model[name].weight.detach()[~mask.to(model[name].weight.device)]
        if kept_zero.numel() and kept_zero.abs().max().item() > 0:
            raise Wrong(f"layer {name} has nonzeros where its mask is False: the mask was lost")
    now = bundle.evaluate()[bundle.metric]
    if abs(now - value) > 1e-6:
        raise Wrong(f"the model scores {now:.4g} now, but your answer is {value:.4g}")
    better = now > before if bundle.higher_is_better else now < before
    if better:
        return True, f"{before:.4g} -> {now:.4g} with every pruned weight still zero."
    return False, f"the metric did not improve ({before:.4g} -> {now:.4g}); did fine-tuning run?"


# -- notebook 3: cuSPARSELt step by step ---------------------------------------------------------
@exercise("3.1", "16-bit activations need rows in multiples of 8, 8-bit in multiples of 16: "
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
        raise Wrong(f"expected a pair (16-bit, 8-bit), got {answer!r:.60}")
    got = tuple(as_number(a) for a in answer)
    if got == (104, 112):
        return True, "104 (multiple of 8) for 16-bit and 112 (multiple of 16) for 8-bit."
    if got == (112, 104):
        raise Wrong("the two are swapped: 8-bit needs the larger multiple")
    return False, f"{answer} are not the next multiples of 8 and of 16 above 100."


@exercise("3.2", "the low nibble (byte & 0xF) is the first group; in a nibble, bits 0-1 are "
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
        raise Wrong(f"expected two pairs like ((0, 1), (2, 3)), got {answer!r:.60}") from None
    if got == expected:
        byte = int(cw.metadata[0, 0])
        return True, f"byte {byte} = 0b{byte:08b} holds {expected[0]} and {expected[1]}."
    if got == expected[::-1]:
        raise Wrong("the groups are swapped: the first group is in the low 4 bits")
    return False, f"{got} is not what the first metadata byte encodes."


@exercise("3.3", "out = torch.zeros(cw.shape, dtype=cw.values.dtype); "
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
        dense = as_tensor(call_answer(fn, compress(w)), (rows, cols), "the rebuilt weight")
        if not torch.equal(dense.to(w.dtype), w):
            wrong = int((dense.to(w.dtype) != w).sum())
            raise Wrong(f"on a {rows}x{cols} weight {wrong} entries differ from the original")
    return True, "your decompression rebuilds the pruned weight exactly."
