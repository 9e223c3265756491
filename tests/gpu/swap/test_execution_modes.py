"""Sparse layers in every way a model is run: eager fast paths, the compiled op, CUDA graphs,
copies and moves (run on the GPU machine). Timings are never asserted; results are compared
with the dense masked reference on fresh random inputs."""

from __future__ import annotations

import copy
import io
import pickle
import warnings

import pytest
import torch
from gpu_helpers import captured, mask24, relerr
from torch import nn

pytestmark = pytest.mark.gpu
DEV = "cuda"


def _linear(i, o, dtype=torch.bfloat16, bias=False):
    lin = nn.Linear(i, o, bias=bias).to(DEV, dtype)
    with torch.no_grad():
        lin.weight.copy_(mask24(lin.weight))
    return lin


def _ref(x, lin):
    b = None if lin.bias is None else lin.bias.double()
    return nn.functional.linear(x.double(), lin.weight.double(), b)


class LlamaMLP(nn.Module):
    """A SwiGLU block under a class name ``sparsify`` fuses."""

    def __init__(self, d, h, dtype):
        super().__init__()
        self.gate_proj = _linear(d, h, dtype)
        self.up_proj = _linear(d, h, dtype)
        self.down_proj = _linear(h, d, dtype)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class _Attention(nn.Module):
    def __init__(self, d, dtype):
        super().__init__()
        self.q_proj = _linear(d, d, dtype)
        self.k_proj = _linear(d, d // 2, dtype)
        self.v_proj = _linear(d, d // 2, dtype)
        self.o_proj = _linear(d, d, dtype)

    def forward(self, x):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return self.o_proj(q + torch.cat([k, v], dim=-1))


class _Block(nn.Module):
    """A LLaMA-like layer: q/k/v, an output projection and a SwiGLU MLP."""

    def __init__(self, d=256, h=512, dtype=torch.bfloat16):
        super().__init__()
        self.attn = _Attention(d, dtype)
        self.mlp = LlamaMLP(d, h, dtype)

    def forward(self, x):
        return self.mlp(self.attn(x))


@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("tokens", [1, 3, 16, 64])
def test_decode_call_matches_reference(tokens, int8):
    from explorer.gpu.cuda.decode import DecodeCall, decode_matmul_reference, pack

    torch.manual_seed(tokens)
    w = mask24(torch.randn(384, 256, device=DEV, dtype=torch.bfloat16))
    bias = torch.randn(384, device=DEV, dtype=torch.bfloat16)
    packed = pack(w, int8=int8)
    call = DecodeCall(packed, bias, tokens, torch.bfloat16)
    for _ in range(2):  # fresh inputs through the same call
        x = torch.randn(tokens, 256, device=DEV, dtype=torch.bfloat16)
        y = call(x)
        ref = decode_matmul_reference(x, packed, bias)
        assert y.shape == (tokens, 384)
        assert relerr(y, ref) < 1e-2


def test_decode_call_refuses_bad_sizes():
    from explorer.gpu.cuda.decode import DecodeCall, pack

    packed = pack(mask24(torch.randn(64, 64, device=DEV, dtype=torch.half)))
    with pytest.raises(ValueError, match="1 to 64"):
        DecodeCall(packed, None, 65, torch.half)
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        DecodeCall(packed, None, 8, torch.float32)


@pytest.mark.parametrize("mode", ["eager", "graphs", "auto"])
def test_layer_measures_both_clocks_and_stays_correct(mode):
    from explorer.gpu import SparseLinear

    lin = _linear(512, 1024, bias=True)
    sl = SparseLinear.from_linear(lin, keep_dense=True, decode=True, mode=mode)
    for tokens in (16, 1, 16, 256):  # the second 16 takes the fast path
        x = torch.randn(tokens, 512, device=DEV, dtype=torch.bfloat16)
        assert relerr(sl(x), _ref(x, lin)) < 1e-2
    for n, found in sl.measured().items():
        assert found.wall and found.gpu, n  # both clocks timed
        assert set(found.wall) == set(found.gpu)


def test_capture_takes_the_gpu_clock_decision_and_matches():
    from explorer.gpu import SparseLinear

    lin = _linear(512, 1024)
    sl = SparseLinear.from_linear(lin, keep_dense=True, decode=True)
    x = torch.randn(16, 512, device=DEV, dtype=torch.bfloat16)
    sl(x)  # measured outside the capture
    graph, y = captured(lambda: sl(x))
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert relerr(y, _ref(x, lin)) < 1e-2
    # remembered under the GPU clock, or, where every clock measured dense, by shape alone
    dense_by_every_clock = (x.shape, x.get_device(), x.dtype) in sl._dense_any
    assert sl._fast_graph or dense_by_every_clock, "the capture's call is remembered"


def test_a_layer_dense_by_the_wall_clock_is_one_call_eagerly_and_captures_the_gpu_route():
    from explorer.gpu import SparseLinear

    lin = _linear(2048, 4096)
    sl = SparseLinear.from_linear(lin, keep_dense=True)  # mode "auto": both clocks
    x = torch.randn(4096, 2048, device=DEV, dtype=torch.bfloat16)
    sl(x)  # measured by both clocks
    sl.keep_dense_at(4096)  # as a failed whole-model eager check does: the wall clock runs dense
    sl(x)
    key = (x.shape, x.get_device(), x.dtype)
    (gpu_route, _), *_ = sl.decisions("gpu").values()
    if gpu_route.kind == "dense":
        assert key in sl._dense_any  # dense by every clock: no capture check
    else:
        assert key in sl._wall_dense and key not in sl._dense_any
    assert relerr(sl(x), _ref(x, lin)) < 1e-2  # the remembered eager call
    graph, y = captured(lambda: sl(x))
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert relerr(y, _ref(x, lin)) < 1e-2
    if gpu_route.kind != "dense":  # the capture took the GPU clock's route, not the eager call
        assert sl._fast_graph


def test_compiled_default_mode_matches_eager():
    from explorer.gpu import sparsify

    torch.manual_seed(0)
    dense = _Block()
    model = copy.deepcopy(dense)
    # measure=False: every block swapped whatever its speed (256-wide layers are slower sparse on
    # the GPU, and timed routes would keep them all dense)
    rep = sparsify(model, tokens=(64, 16), tune=False, measure=False)
    assert rep.fused, rep
    x = torch.randn(4, 16, 256, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        eager = model(x)
        torch._dynamo.reset()
        compiled = torch.compile(model)
        for _ in range(2):
            out = compiled(x)
        ref = dense(x)
    torch._dynamo.reset()
    # at 64 tokens a default-mode compile traces dense matmuls (a host-bound size), while the
    # eager model may take a sparse route its clock chose: the two differ by the rounding of two
    # bf16 products (about 3e-3), never by more
    assert relerr(out, eager) < 1e-2, (relerr(out, eager), relerr(eager, ref))
    assert relerr(out, ref) < 3e-2


@pytest.mark.parametrize("dtype", [None, "int4"])
def test_a_model_compiled_before_sparsify_recompiles_with_its_new_layers(dtype):
    """``torch.compile`` first, ``sparsify`` after: the compiled wrapper runs the swapped layers."""
    from explorer.gpu import sparsify

    torch.manual_seed(0)
    dense = _Block()
    model = copy.deepcopy(dense)
    x = torch.randn(4, 16, 256, device=DEV, dtype=torch.bfloat16)
    options = {"dtype": dtype} if dtype else {"tune": False, "measure": False}
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            compiled = torch.compile(model)
            before = compiled(x).clone()
            rep = sparsify(model, tokens=(64, 16), **options)
            assert rep.swapped, rep
            eager = model(x)
            for _ in range(2):
                after = compiled(x)
            ref = dense(x)
    finally:
        torch._dynamo.reset()
    assert relerr(before, ref) < 1e-2  # the dense model, compiled
    assert relerr(after, eager) < 5e-2, (relerr(after, eager), relerr(eager, ref))
    if dtype is None:
        assert relerr(after, ref) < 3e-2  # int4's rounding keeps it further from the bf16 model
    kinds = {type(m).__name__ for m in model.modules()}
    assert kinds & {"SparseLinear", "Int4Linear"}, kinds


def test_reduce_overhead_after_every_plan_was_evicted_runs_and_matches():
    """A capture never builds a cuSPARSELt plan (its workspace would be left in the graph's
    private pool, which torch's CUDA-graph trees refuse): it runs dense instead."""
    from explorer.gpu import set_mode, sparsify
    from explorer.gpu.library.cusparselt import default_cache

    torch.manual_seed(2)
    dense = _Block()
    model = copy.deepcopy(dense)
    sparsify(model, tokens=(64,), tune=False)
    set_mode(model, "graphs")
    default_cache().clear()  # as if other models had pushed every plan out of the LRU cache
    x = torch.randn(4, 16, 256, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        torch._dynamo.reset()
        compiled = torch.compile(model, mode="reduce-overhead")
        for _ in range(3):
            out = compiled(x).clone()
        ref = dense(x)
    torch._dynamo.reset()
    assert relerr(out, ref) < 3e-2


def test_reduce_overhead_that_decides_routes_in_its_warm_up_runs_and_matches():
    """Set to ``"graphs"`` after eager calls, a model meets inputs it never decided during the
    CUDA-graph trees' warm-up, where every allocation of the thread goes to the graph's pool:
    the plans built then must keep their workspaces out of it (it failed at 2048 x 8192 with
    "Detected 4 tensor(s) in the cudagraph pool not tracked as outputs")."""
    from explorer.gpu import set_mode, sparsify

    torch.manual_seed(3)
    dense = _Block(d=2048, h=8192)
    model = copy.deepcopy(dense)
    x = torch.randn(16, 256, 2048, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        sparsify(model, tokens=(4096, 16))
        for shape in ((16, 256, 2048), (1, 16, 2048)):
            model(torch.randn(shape, device=DEV, dtype=torch.bfloat16))  # eager decisions
        set_mode(model, "graphs")
        torch._dynamo.reset()
        compiled = torch.compile(model, mode="reduce-overhead")
        for _ in range(3):
            out = compiled(x).clone()
        ref = dense(x)
    torch._dynamo.reset()
    assert relerr(out, ref) < 3e-2


def test_auto_mode_traces_small_layers_dense_for_the_default_compile():
    from explorer.gpu import SparseLinear
    from explorer.gpu.cuda import ops

    lin = _linear(512, 1024)
    sl = SparseLinear.from_linear(lin, keep_dense=True, decode=True)
    x = torch.randn(16, 512, device=DEV, dtype=torch.bfloat16)
    sl(x)
    found = sl.measured()[16]
    op_ms = ops.call_overhead_us(measure=True) / 1e3
    assert op_ms > 0 and found.gpu
    # at decode sizes a default-mode compiled model is host-bound: the layer runs as the
    # compiler's own dense matmul, whatever the GPU clock says, unless the wall clock's route
    # (timed through it) is one the compiled operator makes from C++
    called = sl.operator_makes(found.route("wall"), 16)
    assert sl.traces_dense(16) is not called
    sl(torch.randn(4096, 512, device=DEV, dtype=torch.bfloat16))
    assert sl.traces_dense(4096) == sl.measured()[4096].compiled_dense(op_ms)


@pytest.mark.parametrize("mode", ["auto", "graphs"])
def test_decode_blocks_keep_the_dense_weight_a_default_compile_runs(mode):
    from explorer.gpu import SparseGatedMLP, sparsify

    torch.manual_seed(2)
    model = nn.Sequential(LlamaMLP(256, 1024, torch.bfloat16))
    sparsify(model, tokens=(16,), tune=False, decode=True, mode=mode)
    mlp = model[0]
    if not isinstance(mlp, SparseGatedMLP):
        pytest.skip("the block stayed dense on this GPU: nothing to compile")
    parts = (mlp.gate_up, mlp.down)
    # "auto" may be compiled in the default mode, which runs decode sizes as the compiler's own
    # dense matmuls (the dense weights stay for it), except where the wall clock chose a route
    # the compiled operator makes; "graphs" never traces dense at 16 tokens where the GPU clock
    # chose a sparse route
    assert all(p.dense_kept == p.decisions_made.needs_dense() for p in parts)
    if mode == "auto":
        for p in parts:
            if 16 not in p.decisions("wall"):
                # the decode kernel lost at 16 tokens by both clocks: sparsify freed its weight
                # and forgot the decisions that timed it (the next call decides again)
                assert not p.decode_kept
                continue
            wall = p.decisions("wall")[16][0]
            called = p.operator_makes(wall, 16) and not p.decisions_made.eager_dense(16)
            assert p.traces_dense(16) is not called
            assert p.dense_kept or called
    x = torch.randn(16, 256, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        ref = mlp(x)
        torch._dynamo.reset()
        out = torch.compile(model)(x)
    torch._dynamo.reset()
    assert relerr(out, ref) < 2e-2


def test_copies_pickles_and_moves():
    from explorer.gpu import sparsify

    torch.manual_seed(1)
    model = _Block()
    sparsify(model, tokens=(16,), tune=False, decode=True)
    x = torch.randn(16, 256, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        y = model(x)
        twin = copy.deepcopy(model)
        assert torch.equal(twin(x), y)
        buf = io.BytesIO()
        torch.save(model, buf)
        buf.seek(0)
        loaded = torch.load(buf, weights_only=False)
        assert torch.equal(loaded(x), y)
        again = pickle.loads(pickle.dumps(model))
        assert torch.equal(again(x), y)
        moved = model.to(DEV)  # the same device: plans rebuilt, results unchanged
        assert torch.equal(moved(x), y)


def test_a_dtype_change_after_sparsify_is_refused_with_the_fix():
    from explorer.gpu import SparseLinear

    sl = SparseLinear.from_linear(_linear(256, 256))
    x = torch.randn(8, 256, device=DEV, dtype=torch.bfloat16)
    y = sl(x)
    with pytest.raises(TypeError, match="convert the dense model first"):
        sl.half()
    assert torch.equal(sl(x), y)  # nothing changed


def test_running_in_another_mode_warns_once():
    from explorer.gpu import SparseLinear

    sl = SparseLinear.from_linear(_linear(256, 512), keep_dense=True, mode="graphs")
    x = torch.randn(16, 256, device=DEV, dtype=torch.bfloat16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sl(x)
    assert any("sparsified for mode='graphs'" in str(w.message) for w in caught)


def test_a_graphs_layer_runs_a_long_eager_prompt_quietly_and_explains_a_short_one():
    """A static-cache generate() runs its prompt eagerly before it replays the decode steps."""
    from explorer.gpu import SparseLinear

    sl = SparseLinear.from_linear(_linear(256, 512), keep_dense=True, mode="graphs")
    prompt = torch.randn(128, 256, device=DEV, dtype=torch.bfloat16)
    assert _mode_warnings(lambda: sl(prompt)) == []
    step = torch.randn(8, 256, device=DEV, dtype=torch.bfloat16)
    found = _mode_warnings(lambda: sl(step))
    assert len(found) == 1 and "runs as 'eager'" in found[0] and "warm-up" in found[0]
    assert _mode_warnings(lambda: sl(step)) == []  # once per mode


def test_a_quiet_compiled_call_is_not_checked_again(monkeypatch):
    """A graphs-mode layer compiled by default, called with more than 64 tokens: the rule is
    asked once per token count, not on every call of the fast path."""
    from explorer.gpu import SparseLinear
    from explorer.gpu.modules import sparse_forward

    sl = SparseLinear.from_linear(_linear(256, 512), keep_dense=True, mode="graphs")
    asked = []
    rule = sparse_forward.mode_mismatch
    monkeypatch.setattr(sparse_forward, "mode_mismatch", lambda *a: asked.append(a) or rule(*a))
    prompt = torch.randn(128, 256, device=DEV, dtype=torch.bfloat16)
    assert _mode_warnings(lambda: [sl.run_compiled(prompt) for _ in range(4)]) == []
    assert asked == [("graphs", "compile", 128)]
    step = torch.randn(8, 256, device=DEV, dtype=torch.bfloat16)
    found = _mode_warnings(lambda: [sl.run_compiled(step) for _ in range(3)])
    assert len(found) == 1 and "runs as 'compile'" in found[0]


def _mode_warnings(run) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [str(w.message) for w in caught if "was sparsified for mode" in str(w.message)]


def test_graphs_mode_is_quiet_under_cuda_graphs_and_warns_under_the_default_compile():
    from explorer.gpu import SparseLinear, set_mode

    torch.manual_seed(3)
    lin = _linear(256, 512)
    # no dense weight: a compiled model calls the sparse op, with CUDA graphs or without
    model = nn.Sequential(SparseLinear.from_linear(lin, mode="graphs"))
    x = torch.randn(16, 256, device=DEV, dtype=torch.bfloat16)
    ref = _ref(x, lin)
    with torch.no_grad():
        torch._dynamo.reset()
        graphs = torch.compile(model, mode="reduce-overhead")

        def replays():
            for _ in range(4):  # warm-up, capture, replays: the warm-up is no other mode
                out = graphs(x).clone()
            assert relerr(out.double(), ref) < 3e-2

        assert _mode_warnings(replays) == []
        torch._dynamo.reset()
        set_mode(model, "graphs")  # a fresh start: no call remembered
        default = torch.compile(model)
        found = _mode_warnings(lambda: [default(x) for _ in range(3)])
    torch._dynamo.reset()
    assert len(found) == 1 and "runs as 'compile'" in found[0]


def test_sparsify_measures_the_whole_model_on_example_inputs():
    from explorer.gpu import sparsify
    from explorer.gpu.swap.model_timing import ModelSpeed

    torch.manual_seed(2)
    model = _Block()
    x = torch.randn(16, 256, device=DEV, dtype=torch.bfloat16)
    rep = sparsify(model, tokens=(16,), tune=False, mode="eager", example_inputs=x)
    assert len(rep.model_speeds) == 1
    speed = rep.model_speeds[0]
    assert isinstance(speed, ModelSpeed) and speed.tokens == 16 and speed.mode == "eager"
    assert speed.dense_ms > 0 and speed.sparse_ms > 0
    assert "measured (eager)" in repr(rep)
    assert "whole model" in rep._repr_html_()
