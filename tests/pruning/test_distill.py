"""Masked distillation: finetune(teacher=...) on a language model and on an encoder."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from explorer.checks import check_pattern
from explorer.pruning import PruningCancelled, finetune, prune
from explorer.pruning.distill import distillation_loss


def _llama():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def _ids(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [{"input_ids": torch.randint(0, 64, (4, 16), generator=g)} for _ in range(n)]


def _kl(student: nn.Module, teacher: nn.Module, batches) -> float:
    with torch.no_grad():
        return sum(float(distillation_loss(student(**b), teacher(**b))) for b in batches) / len(
            batches
        )


def test_distillation_recovers_a_language_model_and_keeps_masks():
    teacher = _llama()
    student = copy.deepcopy(teacher)
    train, held_out = _ids(4, seed=1), _ids(2, seed=2)
    result = prune(
        student,
        "magnitude",
        "2:4",
        filter_fn=lambda m, n: n.startswith("model.layers."),
        progress=False,
    )
    before = _kl(student, teacher, held_out)
    curve = finetune(
        student, result, train, steps=40, lr=3e-3, teacher=teacher, train="masked", progress=False
    )
    after = _kl(student, teacher, held_out)
    assert curve.distilled and curve.stopped_by == "steps" and curve.steps == 40
    assert after < before * 0.8
    for name, mask in result.masks.items():
        weight = student.get_submodule(name).weight.detach()
        assert bool((weight[~mask] == 0).all()) and check_pattern(weight, "2:4").valid
    # train="masked" leaves the (tied) embedding alone; the teacher is untouched
    torch.testing.assert_close(student.model.embed_tokens.weight, teacher.model.embed_tokens.weight)
    assert not teacher.training
    assert "distilled" in repr(curve) and "masked distillation" in curve._repr_html_()


def test_distillation_on_embeddings_uses_mse():
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 8))
    student = copy.deepcopy(teacher)
    masks = prune(student, "magnitude", "2:4", progress=False).masks
    data = [torch.randn(32, 16) for _ in range(4)]
    curve = finetune(student, masks, data, steps=30, lr=3e-3, teacher=teacher, progress=False)
    assert curve.final_loss < curve.first_loss


def test_max_minutes_stops_the_run():
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    student = copy.deepcopy(teacher)
    masks = prune(student, "magnitude", "2:4", progress=False).masks
    curve = finetune(
        student,
        masks,
        [torch.randn(8, 8)],
        steps=10**9,
        teacher=teacher,
        max_minutes=1e-4,
        progress=False,
    )
    assert curve.stopped_by == "time" and 1 <= curve.steps < 10**9
    assert "stopped by time" in repr(curve)


def test_distillation_bad_input():
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    student = copy.deepcopy(teacher)
    masks = prune(student, "magnitude", "2:4", progress=False).masks
    data = [torch.randn(8, 8)]
    with pytest.raises(ValueError, match="shares parameters"):
        finetune(student, masks, data, teacher=student, progress=False)
    with pytest.raises(TypeError, match="teacher must be"):
        finetune(student, masks, data, teacher="dense", progress=False)
    with pytest.raises(ValueError, match="needs training text"):
        finetune(student, masks, None, teacher=teacher, progress=False)
    with pytest.raises(ValueError, match="empty"):
        finetune(student, masks, [], steps=1, teacher=teacher, progress=False)
    with pytest.raises(ValueError, match="max_minutes must be a positive"):
        finetune(student, masks, data, teacher=teacher, max_minutes=0, progress=False)
    with pytest.raises(ValueError, match='train must be "all" or "masked"'):
        finetune(student, masks, data, teacher=teacher, train="some", progress=False)
    wrong = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 5))
    saved = {k: v.clone() for k, v in student.state_dict().items()}
    with pytest.raises(ValueError, match="differs from the teacher"):
        finetune(student, masks, data, teacher=wrong, steps=2, progress=False)
    assert all(torch.equal(v, saved[k]) for k, v in student.state_dict().items())


def test_distillation_cancel_restores():
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    student = copy.deepcopy(teacher)
    masks = prune(student, "magnitude", "2:4", progress=False).masks
    saved = {k: v.clone() for k, v in student.state_dict().items()}

    class StopAfterTwo:
        calls = 0

        def is_set(self):
            self.calls += 1
            return self.calls > 2

    with pytest.raises(PruningCancelled, match="restored"):
        finetune(
            student,
            masks,
            [torch.randn(8, 8)],
            steps=10,
            teacher=teacher,
            cancel=StopAfterTwo(),
            progress=False,
        )
    assert all(torch.equal(v, saved[k]) for k, v in student.state_dict().items())
