"""finetune on hostile input: it refuses or stops, names why, and leaves the model bit for bit."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import explorer
from explorer.checks import check_pattern
from explorer.pruning import FinetuneDiverged, PruningCancelled, finetune, prune
from explorer.pruning.distill import distillation_loss


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))


class _LogitsModel(nn.Module):
    """A small classifier whose output carries ``.logits``, like a language model's."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _net()

    def forward(self, x):
        return SimpleNamespace(logits=self.net(x))


def _batches(n: int = 3, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(32, 8, generator=g), torch.randint(0, 4, (32,), generator=g)) for _ in range(n)
    ]


def _pruned(model: nn.Module | None = None):
    model = _net() if model is None else model
    result = prune(model, "magnitude", "2:4", progress=False)
    return model, result.masks


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    tensors = {f"param {n}": p for n, p in model.named_parameters()}
    tensors.update({f"buffer {n}": b for n, b in model.named_buffers()})
    return {k: v.detach().clone() for k, v in tensors.items()}


def _assert_untouched(model: nn.Module, before: dict[str, torch.Tensor]) -> None:
    after = _state(model)
    assert after.keys() == before.keys()
    changed = [k for k, v in before.items() if not torch.equal(after[k], v)]
    assert changed == [], f"changed: {changed}"


# ----------------------------------------------------------------- refused before the first step
@pytest.mark.parametrize("lr", [math.inf, -math.inf, math.nan, 0.0, -1e-3, True, "1e-3"])
def test_a_learning_rate_that_is_not_finite_and_positive_is_refused(lr):
    net, masks = _pruned()
    before = _state(net)
    with pytest.raises(ValueError, match=r"lr must be a finite number above 0, got .*e\.g\. lr="):
        finetune(net, masks, _batches(), steps=3, lr=lr, progress=False)
    _assert_untouched(net, before)


@pytest.mark.parametrize("temperature", [0.0, math.nan, math.inf, -1.0, -2])
def test_a_temperature_that_is_not_finite_and_positive_is_refused(temperature):
    teacher = _LogitsModel()
    student, masks = _pruned(copy.deepcopy(teacher))
    before = _state(student)
    inputs = [x for x, _ in _batches()]
    with pytest.raises(ValueError, match=r"temperature must be a finite number above 0, got"):
        finetune(
            student,
            masks,
            inputs,
            steps=3,
            teacher=teacher,
            temperature=temperature,
            progress=False,
        )
    _assert_untouched(student, before)


@pytest.mark.parametrize("temperature", [0.0, math.nan, math.inf, -1.0])
def test_distillation_loss_refuses_a_bad_temperature(temperature):
    logits = torch.tensor([[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match="temperature must be a finite number above 0"):
        distillation_loss(
            SimpleNamespace(logits=logits), SimpleNamespace(logits=logits), temperature
        )


def test_a_float_mask_is_refused_and_the_layer_stays_24():
    net, masks = _pruned()
    before = _state(net)
    floats = {k: v.float() for k, v in masks.items()}
    with pytest.raises(TypeError, match=r"mask '0' has dtype torch.float32.*mask\.bool\(\)"):
        finetune(net, floats, _batches(), steps=5, progress=False)
    _assert_untouched(net, before)
    assert check_pattern(net[0].weight.detach(), "2:4").valid


def test_a_dense_mask_on_a_24_layer_is_refused():
    net, masks = _pruned()
    before = _state(net)
    dense = {**masks, "3": torch.ones_like(masks["3"])}
    with pytest.raises(ValueError, match=r"layer '3' follows 2:4 but its mask breaks it"):
        finetune(net, dense, _batches(), steps=5, progress=False)
    _assert_untouched(net, before)


def test_a_mask_of_another_kind_is_refused():
    net, masks = _pruned()
    with pytest.raises(TypeError, match=r"not a torch\.Tensor"):
        finetune(net, {"0": masks["0"].tolist()}, _batches(), steps=1, progress=False)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_inputs_are_refused(bad):
    net, masks = _pruned()
    before = _state(net)
    batches = _batches()
    batches[1][0][3, 5] = bad
    with pytest.raises(ValueError, match=r"batch 1: the input holds 1 NaN or infinite .* \(3, 5\)"):
        finetune(net, masks, batches, steps=5, progress=False)
    _assert_untouched(net, before)


def test_non_finite_targets_are_refused():
    net, masks = _pruned()
    before = _state(net)
    x = torch.randn(32, 8)
    y = torch.randn(32, 4)
    y[0, 0] = math.nan
    with pytest.raises(ValueError, match=r"the batch: the target holds 1 NaN"):
        finetune(net, masks, (x, y), steps=5, loss_fn=nn.functional.mse_loss, progress=False)
    _assert_untouched(net, before)


def test_an_empty_batch_is_refused():
    net, masks = _pruned()
    before = _state(net)
    x, y = _batches(1)[0]
    with pytest.raises(ValueError, match=r"batch 0: the input is empty"):
        finetune(net, masks, [(x[:0], y[:0])], steps=2, progress=False)
    _assert_untouched(net, before)


def test_a_model_already_holding_nan_is_refused():
    net, masks = _pruned()
    with torch.no_grad():
        net[3].bias[1] = math.nan
    with pytest.raises(FinetuneDiverged, match=r"'3.bias' .* before the first step"):
        finetune(net, masks, _batches(), steps=2, progress=False)


# ------------------------------------------------------------------- stopped during training
def test_a_nan_batch_from_an_iterator_stops_the_run_and_restores():
    net, masks = _pruned()
    before = _state(net)
    batches = _batches(4)
    batches[2][0][0, 0] = math.nan
    with pytest.raises(ValueError, match=r"the batch of step 2: the input holds 1 NaN"):
        finetune(net, masks, iter(batches), steps=6, progress=False)
    _assert_untouched(net, before)


def test_a_nan_loss_stops_the_run_naming_the_step_and_restores():
    net, masks = _pruned()
    before = _state(net)
    calls = []

    def loss_fn(logits, target):
        calls.append(1)
        loss = nn.functional.cross_entropy(logits, target)
        return loss * math.nan if len(calls) == 4 else loss

    with pytest.raises(
        FinetuneDiverged, match=r"the loss is nan at step 3 \(.*loss function"
    ) as info:
        finetune(net, masks, _batches(), steps=10, loss_fn=loss_fn, progress=False)
    assert "restored" in str(info.value) and "lr" in str(info.value)
    # three real steps changed the weights and the batch-norm statistics; all are back
    _assert_untouched(net, before)
    assert not net.training or all(m.training for m in net.modules())


def test_a_nan_output_is_named_as_the_cause():
    net, masks = _pruned()
    before = _state(net)
    net[1].register_forward_hook(lambda mod, args, out: out * math.nan)
    with pytest.raises(FinetuneDiverged, match=r"step 0 \(the model's output holds NaN"):
        finetune(net, masks, _batches(), steps=3, progress=False)
    _assert_untouched(net, before)


def test_a_non_finite_gradient_stops_the_run_at_the_parameter_and_restores():
    net, masks = _pruned()
    before = _state(net)

    def loss_fn(logits, target):  # finite loss (0), NaN gradient: d sqrt(u)/du at u = 0
        return torch.sqrt((logits - logits.detach()).abs().sum())

    with pytest.raises(FinetuneDiverged, match=r"parameter '\w+\.\w+' holds .* after step 0"):
        finetune(net, masks, _batches(), steps=3, loss_fn=loss_fn, progress=False)
    _assert_untouched(net, before)


def test_a_huge_learning_rate_diverges_and_is_undone():
    net, masks = _pruned()
    before = _state(net)
    with pytest.raises(FinetuneDiverged, match="restored"):
        finetune(net, masks, _batches(), steps=20, lr=1e37, progress=False)
    _assert_untouched(net, before)


def test_gradients_and_replaced_buffers_are_restored_too():
    net, masks = _pruned()
    net[0].weight.grad = torch.full_like(net[0].weight, 0.25)
    grad = net[0].weight.grad.clone()
    running = net[1].running_mean
    before = _state(net)

    def loss_fn(logits, target):
        net[1].running_mean = torch.zeros(16)  # a forward that replaces a buffer
        return logits.sum() * math.nan

    with pytest.raises(FinetuneDiverged):
        finetune(net, masks, _batches(), steps=3, loss_fn=loss_fn, progress=False)
    _assert_untouched(net, before)
    assert net[1].running_mean is running
    assert torch.equal(net[0].weight.grad, grad)


def test_cancel_restores_buffers_too():
    net, masks = _pruned()
    before = _state(net)

    class After:
        checks = 3

        def is_set(self):
            self.checks -= 1
            return self.checks < 0

    with pytest.raises(PruningCancelled, match="restored"):
        finetune(net, masks, _batches(), steps=10, progress=False, cancel=After())
    _assert_untouched(net, before)


# ------------------------------------------------------------------------------ the result
def test_the_result_says_the_masks_hold():
    net, masks = _pruned()
    curve = finetune(net, masks, _batches(), steps=5, progress=False)
    assert curve.masks_hold is True
    assert "masks hold" in repr(curve) and curve.to_dict()["masks_hold"] is True
    assert "masks hold" in curve._repr_html_()
    for name, mask in masks.items():
        weight = net.get_submodule(name).weight.detach()
        assert check_pattern(weight, "2:4").valid and bool((weight[~mask] == 0).all())


def test_the_result_says_when_masks_do_not_hold():
    net = _net()  # dense, never pruned: zero steps never apply the masks
    masks = prune(copy.deepcopy(net), "magnitude", "2:4", progress=False).masks
    curve = finetune(net, masks, _batches(), steps=0, progress=False)
    assert curve.masks_hold is False
    assert "MASKS BROKEN" in repr(curve) and "NO" in curve._repr_html_()


def test_finetune_diverged_is_public_beside_the_other_pruning_errors():
    from explorer.pruning import finetune_checks

    assert explorer.FinetuneDiverged is FinetuneDiverged is finetune_checks.FinetuneDiverged
    assert "FinetuneDiverged" in explorer.__all__ and issubclass(FinetuneDiverged, RuntimeError)
