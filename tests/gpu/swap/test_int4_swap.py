"""sparsify(dtype="int4") stacks q/k/v and gate/up into one int4 product each (on the GPU).

Stacking rows changes no int4 code or scale (groups run along a row), so the stacked layers are
checked bit for bit against the layers quantized one by one, and the stacked model's output
against the layer-by-layer model's within the int4 tolerance of ``test_int4_linear`` (both
routes hold 1e-2 of the float64 dequantized product, compounded through the blocks), eagerly, in
a CUDA graph and compiled.
"""

from __future__ import annotations

import copy

import pytest
import torch
from gpu_helpers import captured, mask24, relerr
from torch import nn

pytestmark = pytest.mark.gpu
DEV = "cuda"
#: One stacked product against its parts on the same input: each route within 1e-2 of float64.
LAYER_TOL = 2e-2
#: The int8 weight-only models (see that test): the bfloat16 rounding of the activations alone
#: moves this model 0.5-4.7% from its float64 product, so two models on different routes can be
#: up to about 9.4% apart (one H200 run measured 9.2% at one token, over the former 8e-2).
INT8_MODEL_TOL = 1.2e-1
#: Two int4 models whose layers may take different routes: torch's kernel holds the scales in
#: bfloat16 and the 2:4 kernel in float32, and this model amplifies every rounding between
#: products. A CPU emulation of each of the 256 route choices of its 8 stacked layers (exact
#: products, bfloat16 scales for torch's kernel, each output rounded to bfloat16) put the
#: choices up to 13.95% from int4 dense everywhere in groups of 64 (20 inputs of 3 tokens; the
#: 2:4 kernel everywhere up to 8.9%, median 4.2%; one H200 run measured 9.3%), and up to 10.2%
#: from either extreme in groups of 128 (10 inputs of 1 and of 16 tokens). A kernel reading a
#: wrong input moves the output by the order of 100%; a wrong stacking shows in the stacked
#: codes, metadata and scales, compared exactly with the parts' (the first test below).
INT4_ROUTES_MODEL_TOL = 2e-1


class Attention(nn.Module):
    def __init__(self, d: int, kv: int) -> None:
        super().__init__()
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, kv, bias=False)
        self.v_proj = nn.Linear(d, kv, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return self.o_proj(q) + (k * v).sum(-1, keepdim=True)


class LlamaMLP(nn.Module):  # the class name is how sparsify knows a SwiGLU block
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Phi3MLP(nn.Module):  # gate and up already stacked in one Linear, as Phi-3 and GLM hold them
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(d, 2 * hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)
        self.activation_fn = nn.SiLU()

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(up * self.activation_fn(gate))


class Block(nn.Module):
    def __init__(self, d: int = 256, kv: int = 128, hidden: int = 512) -> None:
        super().__init__()
        self.self_attn = Attention(d, kv)
        self.mlp = LlamaMLP(d, hidden)

    def forward(self, x):
        x = x + self.self_attn(x)
        return x + self.mlp(x)


def _model():
    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block()).to(DEV, torch.bfloat16).eval()
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.Linear):
                mod.weight.copy_(mask24(mod.weight))
    return model


def _both(dtype="int4", **kwargs):
    """The model stacked by ``sparsify(dtype=dtype)``, and quantized layer by layer."""
    from explorer.gpu import sparsify

    model = _model()
    single = copy.deepcopy(model)
    report = sparsify(model, dtype=dtype, tokens=(16, 1), **kwargs)
    sparsify(single, dtype=dtype, tokens=(16, 1), fuse_qkv=False, fuse_mlp=False)
    return model, single, report


def test_q_k_v_and_gate_up_become_one_int4_product_with_the_same_codes():
    from explorer.gpu.modules.fused_qkv import QKVPart, SparseQKV
    from explorer.gpu.modules.gated_mlp import SparseGatedMLP
    from explorer.gpu.modules.int4_linear import Int4Linear

    model, single, report = _both()
    assert report.fused == ["0.self_attn.sparse_qkv", "0.mlp", "1.self_attn.sparse_qkv", "1.mlp"]
    assert len(report.swapped) == 14 and not report.skipped  # every Linear, named as before
    attn, mlp = model[0].self_attn, model[0].mlp
    assert isinstance(attn.sparse_qkv, SparseQKV) and isinstance(attn.q_proj, QKVPart)
    assert isinstance(attn.sparse_qkv.proj, Int4Linear) and attn.sparse_qkv.proj.out_features == 512
    assert isinstance(mlp, SparseGatedMLP) and isinstance(mlp.gate_up, Int4Linear)
    assert isinstance(model[0].self_attn.o_proj, Int4Linear)
    alone = single[0].self_attn
    stacked = attn.sparse_qkv.proj
    for name in ("codes", "metadata", "scales"):
        parts = [getattr(getattr(alone, p), name) for p in ("q_proj", "k_proj", "v_proj")]
        assert torch.equal(getattr(stacked, name), torch.cat(parts)), name
        parts = [getattr(getattr(single[0].mlp, p), name) for p in ("gate_proj", "up_proj")]
        assert torch.equal(getattr(mlp.gate_up, name), torch.cat(parts)), name
    tokens = {t.tokens for t in report.timings if t.fqn == "0.self_attn.sparse_qkv"}
    assert tokens == {16, 1}
    # the default compile mode's note comes exactly where some layer runs the 2:4 kernel eagerly
    on_2_4 = any(t.route.startswith("2:4") for t in report.timings)
    assert any("torch.compile's default mode" in n for n in report.notes) == on_2_4


def test_a_stacked_gate_up_projection_becomes_one_int4_block_with_its_own_codes():
    from explorer.gpu import sparsify
    from explorer.gpu.modules.gated_mlp import SparseGatedMLP

    torch.manual_seed(1)
    model = nn.Sequential(Phi3MLP(256, 512), Phi3MLP(256, 512)).to(DEV, torch.bfloat16).eval()
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.Linear):
                mod.weight.copy_(mask24(mod.weight))
    single = copy.deepcopy(model)
    report = sparsify(model, dtype="int4", tokens=(16, 1))
    sparsify(single, dtype="int4", tokens=(16, 1), fuse_mlp=False)
    assert report.fused == ["0", "1"] and not report.skipped
    assert [f for f, _ in report.swapped] == [
        "0.gate_up_proj", "0.down_proj", "1.gate_up_proj", "1.down_proj"
    ]  # fmt: skip
    for block, alone in zip(model, single, strict=True):
        assert isinstance(block, SparseGatedMLP)
        for name in ("codes", "metadata", "scales"):
            assert torch.equal(getattr(block.gate_up, name), getattr(alone.gate_up_proj, name))
            assert torch.equal(getattr(block.down, name), getattr(alone.down_proj, name))
    for tokens in (1, 16, 300):
        x = torch.randn(1, tokens, 256, device=DEV, dtype=torch.bfloat16)
        with torch.no_grad():
            assert relerr(model(x), single(x)) < INT4_ROUTES_MODEL_TOL


@pytest.mark.parametrize("tokens", [1, 16, 300])
def test_the_stacked_model_matches_the_layer_by_layer_one(tokens):
    model, single, _ = _both()
    x = torch.randn(1, tokens, 256, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        assert relerr(model(x), single(x)) < INT4_ROUTES_MODEL_TOL


def test_a_cuda_graph_replays_the_stacked_model():
    from explorer.gpu import set_mode

    model, single, _ = _both()
    set_mode(model, "graphs")
    x = torch.randn(1, 1, 256, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        eager = model(x)
        graph, out = captured(lambda: model(x))
        x.copy_(torch.randn_like(x))
        graph.replay()
        assert relerr(out, model(x)) < 1e-6  # the same routes, replayed on the new input
        assert relerr(out, single(x)) < INT4_ROUTES_MODEL_TOL
        assert relerr(out, eager) > 1e-3  # (the replay did read the new input)


@pytest.mark.parametrize("tokens", [16, 300])
def test_torch_compile_runs_the_stacked_model(tokens):
    model, single, _ = _both()
    x = torch.randn(1, tokens, 256, device=DEV, dtype=torch.bfloat16)
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            compiled = torch.compile(model)
            assert relerr(compiled(x), single(x)) < INT4_ROUTES_MODEL_TOL
    finally:
        torch._dynamo.reset()


def test_joint_pruning_scales_are_stacked_with_their_layers():
    from explorer.gpu import sparsify

    model = _model()
    scales = {}
    for fqn, mod in model.named_modules():
        if isinstance(mod, nn.Linear):
            groups = mod.weight.float().view(mod.out_features, -1, 128)
            scales[fqn] = (groups.abs().amax(-1) / 7).clamp_min(1e-8) * 1.25  # not the RTN scale
    sparsify(model, dtype="int4", tokens=(1,), int4_scales=scales)
    stacked = model[0].self_attn.sparse_qkv.proj
    want = torch.cat([scales[f"0.self_attn.{p}_proj"] for p in "qkv"]).to(stacked.scales)
    assert torch.equal(stacked.scales, want)


def test_scales_for_some_parts_only_keep_the_block_layer_by_layer():
    from explorer.gpu import sparsify
    from explorer.gpu.modules.int4_linear import Int4Linear

    model = _model()
    q = model[0].self_attn.q_proj
    only_q = {"0.self_attn.q_proj": q.weight.float().view(256, -1, 128).abs().amax(-1) / 7}
    report = sparsify(model, dtype="int4", tokens=(1,), int4_scales=only_q)
    assert "0.self_attn.sparse_qkv" not in report.fused
    assert any("some of the stacked layers only" in n for n in report.notes)
    assert isinstance(model[0].self_attn.q_proj, Int4Linear)
    assert "1.self_attn.sparse_qkv" in report.fused


@pytest.mark.parametrize("tokens", [1, 16, 300])
def test_int8_weights_stack_the_same_codes_and_match_layer_by_layer(tokens):
    """``dtype="int8-weights"``: the same stacking, one int8 code a kept weight.

    The stacked q/k/v product is checked against its three parts on the same input (each route
    within 1e-2 of the float64 product: ``LAYER_TOL``), and the whole model against the
    layer-by-layer one within ``INT8_MODEL_TOL``: the two take different routes (the int8
    kernel accumulates in float32, the dense route multiplies the dequantized 16-bit weight),
    and this small model amplifies the bfloat16 rounding of its activations between products.
    The dequantized model alone, no kernel involved, is 0.5-4.7% from its float64 product on
    random inputs (CPU, five inputs each at 1, 16 and 300 tokens), so a bound of 4e-2 failed
    on one input, and two models on different routes can be twice that apart. A wrong stacking
    (a part's rows in the wrong place, a scale on the wrong rows) is off by far more than
    either bound, and the codes are compared exactly.
    """
    from explorer.gpu import set_mode

    model, single, report = _both("int8-weights")
    assert report.fused == ["0.self_attn.sparse_qkv", "0.mlp", "1.self_attn.sparse_qkv", "1.mlp"]
    stacked = model[0].self_attn.sparse_qkv.proj
    assert stacked.format == "int8" and stacked.codes.dtype == torch.int8
    parts = [getattr(single[0].self_attn, p).codes for p in ("q_proj", "k_proj", "v_proj")]
    assert torch.equal(stacked.codes, torch.cat(parts))
    x = torch.randn(1, tokens, 256, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        attn = single[0].self_attn
        by_part = torch.cat([attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)], dim=-1)
        assert relerr(stacked(x), by_part) < LAYER_TOL
        assert relerr(model(x), single(x)) < INT8_MODEL_TOL
        set_mode(model, "graphs")
        graph, out = captured(lambda: model(x))
        x.copy_(torch.randn_like(x))
        graph.replay()
        assert relerr(out, single(x)) < INT8_MODEL_TOL


def _scales_of(model, group: int) -> dict:
    """Round-to-nearest int4 scales of every Linear in groups of ``group`` columns."""
    scales = {}
    for fqn, mod in model.named_modules():
        if isinstance(mod, nn.Linear):
            o, i = mod.weight.shape
            w = mod.weight.float().abs().reshape(o, i // group, group)
            scales[fqn] = w.amax(-1).clamp_min(1e-8) / 7
    return scales


@pytest.mark.parametrize("group", [64, 32])
def test_groups_of_64_and_32_run_on_the_2_4_kernel_stacked(group):
    """A joint prune's usual group sizes get the 2:4 + int4 kernel, q/k/v and gate/up stacked."""
    from explorer.gpu import sparsify
    from explorer.gpu.cuda.decode_int4 import decode_int4_matmul
    from explorer.gpu.modules.int4_linear import Int4Linear
    from explorer.gpu.routes.dispatch import DECODE
    from explorer.gpu.swap.precision_dense import dense_at

    model = _model()
    scales = _scales_of(model, group)
    dense, summary = dense_at(model, "int4", scales=scales)
    assert len(summary.converted) == 14
    report = sparsify(model, dtype="int4", tokens=(16, 1), int4_scales=scales)
    assert not report.skipped and len(report.swapped) == 14 and len(report.fused) == 4
    layers = [m for m in model.modules() if isinstance(m, Int4Linear)]
    assert len(layers) == 8 and all(m.group_size == group for m in layers)
    assert all(m.decode_refusal is None for m in layers)
    assert not any("int4 dense (torch's kernel)" in n for n in report.notes)
    x = torch.randn(3, 256, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        for layer in layers:  # the 2:4 kernel on its codes, whatever route was measured faster
            assert DECODE in layer.route_times(16, "gpu")  # timed, so it ran
            xin = torch.randn(16, layer.in_features, device=DEV, dtype=torch.bfloat16)
            ref = xin.double() @ layer.coded_weight().decompress().double().t()
            assert relerr(decode_int4_matmul(xin, layer.coded_weight()), ref) < 1e-2
        assert relerr(model(x), dense(x)) < INT4_ROUTES_MODEL_TOL  # same codes, other routes


def test_a_layer_no_2_4_kernel_reads_runs_int4_dense_not_16_bit(monkeypatch):
    """Where the 2:4 kernel refuses a layer that torch's int4 kernel takes, it runs int4 dense."""
    from explorer.gpu import sparsify
    from explorer.gpu.cuda import decode_int4
    from explorer.gpu.modules.int4_linear import Int4Linear
    from explorer.gpu.swap.precision_dense import dense_at

    def refuse(weight):
        raise ValueError("a refusal for this test. Hint: none")

    model = _model()
    scales = _scales_of(model, 64)
    dense, _ = dense_at(model, "int4", scales=scales)
    monkeypatch.setattr(decode_int4, "check_int4_layout", refuse)
    report = sparsify(model, dtype="int4", tokens=(16, 1), int4_scales=scales)
    assert not report.skipped and not report.swapped  # no layer runs 2:4, none stays 16-bit
    layers = [m for m in model.modules() if isinstance(m, Int4Linear)]
    assert len(layers) == 14 and all(m.decode_refusal is not None for m in layers)
    assert sum("int4 dense (torch's kernel)" in n for n in report.notes) == 14
    x = torch.randn(3, 256, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(model(x), dense(x))  # the same codes on the same kernel


@pytest.mark.parametrize("dtype", ["int4", "int8-weights"])
def test_a_gpu_before_ampere_keeps_the_model_as_it_is_with_the_reason(dtype, monkeypatch):
    """Told it runs on a T4 (7.5), sparsify builds nothing and names the GPU in every reason."""
    from explorer.gpu import sparsify

    model = _model()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    types = [type(m) for m in model.modules()]
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    report = sparsify(model, dtype=dtype, tokens=(16, 1))
    assert report.swapped == [] and report.fused == []
    assert len(report.skipped) == 14  # every Linear of the two blocks
    assert all("Tesla T4 has compute capability 7.5" in why for _, why in report.skipped)
    assert [type(m) for m in model.modules()] == types
    after = model.state_dict()
    assert all(torch.equal(weights[k], after[k]) for k in weights)
