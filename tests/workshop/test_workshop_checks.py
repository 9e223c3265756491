"""The workshop's check cells: right answers pass, missing, wrong and crashing ones say not yet."""

from __future__ import annotations

import doctest

import pytest
import torch
from torch import nn

import explorer
from explorer.workshop import checks
from explorer.workshop.verdict import EXERCISES, Verdict


def right_mask(w):
    rows, cols = w.shape
    groups = w.abs().reshape(rows, cols // 4, 4)
    keep = torch.zeros(groups.shape, dtype=torch.bool)
    keep.scatter_(-1, groups.topk(2, dim=-1).indices, True)
    return keep.reshape(rows, cols)


def test_verdict_reads_as_a_sentence_with_a_hint_only_when_wrong():
    right = Verdict("9.9", True, "it works.", "never shown")
    wrong = Verdict("9.9", False, "it does not.", "look here")
    assert repr(right) == "Exercise 9.9: right. It works."
    assert repr(wrong) == "Exercise 9.9: not yet. It does not. Hint: look here."
    assert bool(right) and not bool(wrong)
    assert "never shown" not in right._repr_html_()
    assert "look here" in wrong._repr_html_() and "not yet" in wrong._repr_html_()


def test_every_exercise_has_one_registered_check_in_order():
    numbers = ["1.1", "1.2", "1.3", "2.1", "2.2", "2.3", "3.1", "3.2", "3.3"]
    assert list(EXERCISES) == [*numbers, "4.1", "4.2", "4.3", "4.4", "4.5"]
    assert all(EXERCISES[n].exercise == n for n in EXERCISES)


@pytest.mark.parametrize("number", ["1.1", "1.2", "1.3", "2.1", "3.1", "3.3", "4.3", "4.5"])
def test_an_unanswered_exercise_says_not_yet(number):
    verdict = EXERCISES[number](...)
    assert not verdict.ok
    assert "Replace the ..." in repr(verdict) and "Hint:" in repr(verdict)


def test_mask_24_accepts_a_right_mask_and_explains_wrong_ones():
    assert checks.mask_24(right_mask).ok
    assert checks.mask_24(lambda w: right_mask(w).int()).message.startswith("the mask has dtype")
    assert "more than 2" in checks.mask_24(lambda w: torch.ones_like(w, dtype=torch.bool)).message
    smallest = checks.mask_24(lambda w: right_mask(-w.abs().reciprocal()))
    assert not smallest.ok and "differs in" in smallest.message
    assert "returned nothing" in checks.mask_24(lambda w: None).message


def test_a_function_that_raises_is_reported_not_raised():
    verdict = checks.mask_24(lambda w: w.reshape(3, -1, 7))
    assert not verdict.ok
    assert verdict.message.startswith("your function raised RuntimeError")
    assert "expected a function" in checks.decompress(42).message


def test_number_answers():
    assert checks.keep_pattern_count(70).ok
    assert "2:4" in checks.keep_pattern_count(6).message
    assert not checks.keep_pattern_count(True).ok
    assert not checks.keep_pattern_count("70").ok
    assert checks.compressed_fraction(9 / 16).ok
    assert "metadata" in checks.compressed_fraction(0.5).message
    assert "bytes or bits" in checks.compressed_fraction(18874368).message


def test_wanda_scores():
    assert checks.wanda_scores(lambda w, x: w.abs() * x.norm(dim=0)).ok
    assert checks.wanda_scores(lambda w, x: 3 * w.abs() * x.norm(dim=0)).ok  # same mask
    assert "activations are not used" in checks.wanda_scores(lambda w, x: w.abs()).message
    assert "shape" in checks.wanda_scores(lambda w, x: w.abs().T).message
    assert not checks.wanda_scores(lambda w, x: w.abs() * x.norm(dim=1).mean()).ok


def test_best_method_follows_the_metric_direction():
    scores = {"random": 0.5, "magnitude": 0.9, "wanda": 0.9}
    assert checks.best_method("wanda", scores).ok and checks.best_method("magnitude", scores).ok
    assert not checks.best_method("random", scores).ok
    assert checks.best_method("random", scores, higher_is_better=False).ok
    assert "was not run here" in checks.best_method("sparsegpt", scores).message


class _Bundle:
    """Just what the fine-tuning check reads from a ModelBundle."""

    def __init__(self, model, score):
        self.model, self.score = model, score
        self.metric, self.higher_is_better = "accuracy", True

    def evaluate(self):
        return {"accuracy": self.score}


def test_finetuned_needs_a_better_metric_and_the_zeros_kept():
    model = nn.Sequential(nn.Linear(8, 8))
    result = explorer.prune(model, "magnitude", "2:4", progress=False)
    assert checks.finetuned(0.9, _Bundle(model, 0.9), result, before=0.8).ok
    assert "did not improve" in checks.finetuned(0.8, _Bundle(model, 0.8), result, 0.8).message
    assert "your answer is" in checks.finetuned(0.7, _Bundle(model, 0.9), result, 0.8).message
    with torch.no_grad():
        model[0].weight.fill_(1.0)
    assert "mask was lost" in checks.finetuned(0.9, _Bundle(model, 0.9), result, 0.8).message


def test_cusparselt_exercises():
    assert checks.padded_tokens((104, 112)).ok
    assert "swapped" in checks.padded_tokens([112, 104]).message
    assert not checks.padded_tokens((100, 100)).ok
    assert "pair" in checks.padded_tokens(104).message
    cw = explorer.compress(torch.tensor([[0.0, 3.0, 0.0, 4.0, 5.0, 0.0, 0.0, 6.0]]))
    assert checks.metadata_positions(((1, 3), (0, 3)), cw).ok
    assert "swapped" in checks.metadata_positions(((0, 3), (1, 3)), cw).message
    assert "two pairs" in checks.metadata_positions("13 03", cw).message

    def rebuild(c):
        out = torch.zeros(c.shape, dtype=c.values.dtype)
        return out.scatter_(1, c.columns(), c.values)

    assert checks.decompress(rebuild).ok
    assert "differ" in checks.decompress(lambda c: torch.zeros(c.shape)).message


def test_doctor_exercises():
    block = nn.Sequential(nn.Linear(2048, 4096, bias=False))
    explorer.prune(block, "magnitude", "2:4", progress=False)
    report = explorer.doctor(block, dtype="float16", tokens=16, device="H100")
    assert checks.finding_code("small", report, "0").ok
    assert not checks.finding_code("align", report, "0").ok
    assert checks.doctor_fix({"dtype": "float16", "tokens": 4096}, block).ok
    slow = checks.doctor_fix({"dtype": "float32", "tokens": 4096}, block)
    assert not slow.ok and "TF32" in slow.message
    one = checks.doctor_fix({"dtype": "float16", "tokens": 16}, block)
    assert not one.ok and "slow" in one.message
    assert "refused" in checks.doctor_fix({"dtype": "float99", "tokens": 8}, block).message
    assert "keys" in checks.doctor_fix({"dtype": "float16"}, block).message


def test_amdahl_and_the_choice():
    assert checks.end_to_end(lambda f, s: 1 / ((1 - f) + f / s)).ok
    assert "expected" in checks.end_to_end(lambda f, s: f * s).message
    from explorer.results.tradeoff import TradeoffPoint
    from explorer.widgets import TradeoffPlot

    plot = TradeoffPlot(metric="accuracy")
    for label, speedup, score in [("dense", 1.0, 0.98), ("a", 1.5, 0.975), ("b", 1.9, 0.95)]:
        plot.add(TradeoffPoint(label=label, speedup=speedup, score=score))
    assert checks.choice("a", plot, 0.98, 0.01).ok
    assert "loses more" in checks.choice("b", plot, 0.98, 0.01).message
    assert "another allowed point is faster" in checks.choice("dense", plot, 0.98, 0.01).message
    assert checks.choice("b", plot, 0.98, 0.05).ok
    assert "labels" in checks.choice("c", plot, 0.98, 0.01).message


def test_module_examples_run():
    failures, tried = doctest.testmod(checks, optionflags=doctest.ELLIPSIS)
    assert tried and not failures


def test_bits_per_weight_takes_the_formula_and_names_the_first_wrong_format():
    def right(value_bits, sparse, scale_bits, group_size):
        return ((value_bits + 2) / 2 if sparse else value_bits) + scale_bits / group_size

    verdict = checks.bits_per_weight(right)
    assert verdict.ok and "3.25 bits" in verdict.message and "1.31x" in verdict.message
    no_positions = checks.bits_per_weight(lambda v, s, b, g: (v / 2 if s else v) + b / g)
    assert not no_positions.ok
    assert no_positions.message == "a 2:4 16-bit weight: expected 9 bits a weight, got 8."
    no_scales = checks.bits_per_weight(lambda v, s, b, g: (v + 2) / 2 if s else v)
    assert "torch's int4 dense" in no_scales.message and "got 4." in no_scales.message
    assert "expected a number" in checks.bits_per_weight(lambda v, s, b, g: "9").message
    assert "raised TypeError" in checks.bits_per_weight(lambda v, s: v).message
