"""sparsify(dtype="int4")'s stacking decisions where no GPU is needed (CPU).

On the CPU no layer can become int4 (the kernels need CUDA), so these tests check the reasons
given and that nothing in the model changed.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from explorer.gpu import sparsify
from explorer.gpu.swap.int4_swap import swap_int4_layers
from explorer.gpu.swap.sparsify_report import SparsifyReport


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(256, 256, bias=False) for _ in "qkv")


def _snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}, [type(m) for m in model.modules()]


def test_a_cpu_model_keeps_every_layer_with_the_reason():
    model = nn.Sequential(Attention())
    weights, types = _snapshot(model)
    report = sparsify(model, dtype="int4", tokens=(1,))
    assert report.swapped == [] and report.fused == []
    assert any("q/k/v: not stacked" in n and "CUDA" in n for n in report.notes)
    assert "needs a CUDA module" in report.reason("0.q_proj")
    after, after_types = _snapshot(model)
    assert types == after_types and all(torch.equal(weights[k], after[k]) for k in weights)


def test_scales_for_some_stacked_layers_only_are_named():
    model = nn.Sequential(Attention())
    scales = {"0.q_proj": torch.ones(256, 2)}
    report = SparsifyReport(backend="explorer", dtype="int4")
    targets = [(f, m) for f, m in model.named_modules() if isinstance(m, nn.Linear)]
    places = {id(m): [f] for f, m in targets}
    swap_int4_layers(model, targets, places, report, counts=(1,), scales=scales)
    assert any("some of the stacked layers only" in n for n in report.notes)


def test_a_layer_shared_between_places_is_not_stacked():
    model = nn.Sequential(Attention())
    model[0].v_proj = model[0].k_proj  # one module, two places
    report = sparsify(model, dtype="int4", tokens=(1,))
    assert any("shared with another place" in n for n in report.notes)
    assert model[0].v_proj is model[0].k_proj


def test_a_model_that_is_one_linear_is_skipped_with_a_hint():
    report = sparsify(nn.Linear(256, 256), dtype="int4", tokens=(1,))
    assert report.swapped == []
    assert "nn.Sequential(layer)" in report.reason("(the model)")


@pytest.mark.parametrize("fuse", [(False, False), (True, False), (False, True)])
def test_stacking_can_be_turned_off(fuse):
    model = nn.Sequential(Attention())
    report = sparsify(model, dtype="int4", tokens=(1,), fuse_qkv=fuse[0], fuse_mlp=fuse[1])
    stacked_notes = [n for n in report.notes if "q/k/v" in n]
    assert bool(stacked_notes) == fuse[0]


@pytest.mark.parametrize(("capability", "fmt"), [((7, 5), "int4"), ((7, 0), "int8")])
def test_a_gpu_before_ampere_is_refused_naming_it_and_the_fix(capability, fmt):
    from explorer.gpu.swap.int4_swap import capability_refusal

    why = capability_refusal(capability, "Tesla T4", fmt)
    major, minor = capability
    assert f"Tesla T4 has compute capability {major}.{minor}" in why
    assert f"2:4 + {fmt} kernels" in why and "need 8.0 (Ampere) or newer" in why
    assert "kept as it is" in why and "Hint:" in why


@pytest.mark.parametrize("capability", [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0)])
def test_ampere_and_newer_gpus_are_taken(capability):
    from explorer.gpu.swap.int4_swap import capability_refusal

    assert capability_refusal(capability, "a GPU") is None
