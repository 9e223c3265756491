"""SparseLinear and sparsify against the dense masked model (run on the GPU machine)."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import mask24, relerr
from torch import nn

pytestmark = pytest.mark.gpu
DEV = "cuda"


def _linear(i, o, dtype=torch.float16, bias=True):
    lin = nn.Linear(i, o, bias=bias).to(DEV, dtype)
    with torch.no_grad():
        lin.weight.copy_(mask24(lin.weight))
    return lin


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(5,), (3, 7), (2, 3, 11)])
def test_matches_dense_masked(dtype, shape):
    from explorer.gpu import SparseLinear

    lin = _linear(256, 384, dtype)
    sl = SparseLinear.from_linear(lin)
    x = torch.randn(*shape, 256, device=DEV, dtype=dtype)
    y = sl(x)
    ref = nn.functional.linear(x.double(), lin.weight.double(), lin.bias.double())
    assert y.shape == (*shape, 384) and y.dtype == dtype
    assert relerr(y, ref) < 2e-3


def test_non_contiguous_input():
    from explorer.gpu import SparseLinear

    lin = _linear(256, 128)
    sl = SparseLinear.from_linear(lin)
    x = torch.randn(256, 40, device=DEV, dtype=torch.half).t()  # [40, 256], strided
    assert not x.is_contiguous()
    ref = nn.functional.linear(x.double(), lin.weight.double(), lin.bias.double())
    assert relerr(sl(x), ref) < 2e-3
    x3 = torch.randn(4, 10, 512, device=DEV, dtype=torch.half)[..., ::2]
    ref3 = nn.functional.linear(x3.double(), lin.weight.double(), lin.bias.double())
    assert relerr(sl(x3), ref3) < 2e-3


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_activation_epilogue(activation):
    from explorer.gpu import SparseLinear

    lin = _linear(256, 256)
    sl = SparseLinear.from_linear(lin, activation=activation)
    x = torch.randn(33, 256, device=DEV, dtype=torch.half)
    ref = nn.functional.linear(x.double(), lin.weight.double(), lin.bias.double())
    ref = torch.relu(ref) if activation == "relu" else nn.functional.gelu(ref, approximate="tanh")
    assert relerr(sl(x), ref) < 2e-3


def test_int8_flow_matches_quantized_reference():
    from explorer.gpu import SparseLinear
    from explorer.gpu.modules import quant

    lin = _linear(512, 256)
    sl = SparseLinear.from_linear(lin, dtype=torch.int8)
    x = torch.randn(21, 512, device=DEV, dtype=torch.half)
    y = sl(x)
    wq, ws = quant.quantize_per_channel(lin.weight)
    xq, xs = quant.quantize_per_token(x)
    assert int(((wq != 0) & (lin.weight == 0)).sum()) == 0  # zeros stay zeros
    ref = (xq.double() @ wq.double().t()) * xs.double()[:, None] * ws.double() + lin.bias.double()
    assert y.dtype == torch.half
    assert relerr(y, ref) < 2e-3
    dense = nn.functional.linear(x.double(), lin.weight.double(), lin.bias.double())
    assert relerr(y, dense) < 3e-2  # quantization error only


def test_torch_backend_matches():
    from explorer.gpu import SparseLinear

    lin = _linear(256, 256)
    sl = SparseLinear.from_linear(lin, backend="torch")
    x = torch.randn(17, 256, device=DEV, dtype=torch.half)
    ref = nn.functional.linear(x.double(), lin.weight.double(), lin.bias.double())
    assert relerr(sl(x), ref) < 2e-3


def test_plan_reused_across_calls():
    from explorer.gpu import SparseLinear
    from explorer.gpu.library.cusparselt import default_cache

    sl = SparseLinear.from_linear(_linear(128, 128))
    x = torch.randn(30, 128, device=DEV, dtype=torch.half)
    sl(x)
    before = default_cache().stats()
    plans = dict(sl._plans)
    for _ in range(10):
        sl(x)
    after = default_cache().stats()
    assert after["misses"] == before["misses"] and after["size"] == before["size"]
    assert sl._plans == plans  # no plan built or replaced: repeated calls reuse the route's plan
    assert len(sl._fast) == 1  # and go straight to it


def test_bad_inputs_are_clear():
    from explorer.gpu import SparseLinear

    with pytest.raises(ValueError, match="not 2:4"):
        SparseLinear.from_linear(nn.Linear(64, 64).to(DEV, torch.half))
    with pytest.raises(ValueError, match="CUDA"):
        SparseLinear.from_linear(nn.Linear(64, 64).half())
    with pytest.raises(ValueError, match="alignment"):
        SparseLinear.from_linear(_linear(64, 10))
    sl = SparseLinear.from_linear(_linear(64, 64))
    with pytest.raises(ValueError, match="CUDA"):
        sl(torch.randn(3, 64).half())


def test_sparsify_model():
    from explorer.gpu import sparsify

    model = nn.Sequential(
        nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 128), nn.GELU(), nn.Linear(128, 10)
    ).to(DEV, torch.half)
    with torch.no_grad():
        for m in model:
            if isinstance(m, nn.Linear):
                m.weight.copy_(mask24(m.weight))
    x = torch.randn(4, 9, 128, device=DEV, dtype=torch.half)
    with torch.no_grad():
        ref = model.double()(x.double())
        model.half()
    report = sparsify(model, tokens=())  # no measuring: every eligible layer swapped
    assert [n for n, _ in report.swapped] == ["0", "2"]
    assert report.skipped[0][0] == "4" and "alignment" in report.skipped[0][1]
    with torch.no_grad():
        y = model(x)
    assert relerr(y, ref) < 2e-3
    assert "swapped" in repr(report) and "<table" in report._repr_html_()


def test_sparsify_int8_and_filter():
    from explorer.gpu import SparseLinear, sparsify

    model = nn.Sequential(nn.Linear(128, 128), nn.Linear(128, 128)).to(DEV, torch.half)
    report = sparsify(
        model, filter_fn=lambda m, n: n == "1", dtype=torch.int8, prune=True, inplace=False
    )
    assert report.skipped == [("0", "excluded by filter_fn")]
    assert isinstance(report.model[1], SparseLinear) and isinstance(model[1], nn.Linear)
    y = report.model(torch.randn(5, 128, device=DEV, dtype=torch.half))
    assert y.dtype == torch.half and torch.isfinite(y).all()


@pytest.mark.parametrize("layout", ["auto", "cc", "rr", "rc", "cr"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_layout_matches(layout, dtype):
    from explorer.gpu import SparseLinear

    l1, l2 = _linear(256, 512, dtype), _linear(512, 256, dtype)
    s1 = SparseLinear.from_linear(l1, layout=layout)
    s2 = SparseLinear.from_linear(l2, layout=layout, activation="relu")
    x = torch.randn(2, 45, 256, device=DEV, dtype=dtype)
    y = s2(s1(x))  # chained: an "r" output feeds the next layer without a copy
    h = nn.functional.linear(x.double(), l1.weight.double(), l1.bias.double())
    ref = torch.relu(nn.functional.linear(h, l2.weight.double(), l2.bias.double()))
    assert y.shape == (2, 45, 256)
    assert relerr(y, ref) < 3e-3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("output", ["rows", "any"])
def test_auto_route_keeps_the_input_layout(dtype, transposed, output):
    from explorer.gpu import SparseLinear

    lin = _linear(512, 1024, dtype, bias=False)
    sl = SparseLinear.from_linear(lin, output=output)
    x = torch.randn(512, 256, device=DEV, dtype=dtype).t() if transposed else None
    if x is None:
        x = torch.randn(256, 512, device=DEV, dtype=dtype)
    y = sl(x)
    ref = nn.functional.linear(x.double(), lin.weight.double())
    assert relerr(y, ref) < 2e-3
    ((n, first, _, clock), route) = next(iter(sl._routes.items()))
    assert clock == "wall"  # an eager call outside a CUDA-graph capture
    assert first == ("r" if transposed else "c")
    assert route.kind == "sparse" and route.layout[0] == first  # read as it comes: no copy
    if output == "rows":
        assert y.is_contiguous() and route.row_major
    assert sl.decisions()[n][0] == route
    assert all(t > 0 for t in sl.decisions()[n][1].values())


def test_dense_route_when_kept_and_faster_or_not():
    from explorer.gpu import SparseLinear
    from explorer.gpu.routes.dispatch import DENSE

    lin = _linear(256, 256)
    sl = SparseLinear.from_linear(lin, keep_dense=True)
    x = torch.randn(3, 256, device=DEV, dtype=torch.half)
    ref = nn.functional.linear(x.double(), lin.weight.double(), lin.bias.double())
    assert relerr(sl(x), ref) < 2e-3
    assert relerr(sl(x), ref) < 2e-3  # the remembered fast path gives the same
    (_route, times) = sl.decisions()[3]  # small token counts are decided as they are
    assert DENSE in times and any(r.kind == "sparse" for r in times)
    sl.drop_dense()
    assert not sl.dense_kept
    assert relerr(sl(x), ref) < 2e-3
    assert sl._routes[(3, "c", False, "wall")].kind == "sparse"


@pytest.mark.parametrize("mode", ["auto", "eager", "graphs"])
def test_remembered_calls_serve_any_strides_and_a_later_capture(mode):
    """A shape seen before is served from the layer's remembered calls whatever its strides,
    and a CUDA graph captured afterwards replays the product of its own input."""
    from explorer.gpu import SparseLinear

    lin = _linear(256, 256)
    sl = SparseLinear.from_linear(lin, keep_dense=True, mode=mode)

    def ref(x):
        return nn.functional.linear(x.double(), lin.weight.double(), lin.bias.double())

    for rows in (1, 3, 16):
        x = torch.randn(rows, 256, device=DEV, dtype=torch.half)
        for _ in range(3):  # decide, then the remembered call
            assert relerr(sl(x), ref(x)) < 2e-3
        strided = torch.randn(256, rows, device=DEV, dtype=torch.half).t()
        assert relerr(sl(strided), ref(strided)) < 2e-3
        wide = torch.randn(rows, 512, device=DEV, dtype=torch.half)[:, ::2]
        assert relerr(sl(wide), ref(wide)) < 2e-3
        static = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            sl(static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = sl(static)
        fresh = torch.randn(rows, 256, device=DEV, dtype=torch.half)
        static.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        assert relerr(out, ref(fresh)) < 2e-3
        assert relerr(sl(fresh), ref(fresh)) < 2e-3  # eager again after the capture


def test_an_activation_the_kernel_does_not_fuse_stays_in_every_later_call(monkeypatch):
    """Where cuSPARSELt refused to fuse the activation, each route applies it after the product,
    also in the calls a layer remembers for inputs it has seen (the dense route's included)."""
    import explorer.gpu.modules.sparse_forward as sparse_forward_module
    from explorer.gpu import SparseLinear

    monkeypatch.setattr(sparse_forward_module, "_UNFUSED", {(torch.half, "relu")})
    lin = _linear(256, 256)
    sl = SparseLinear.from_linear(lin, activation="relu", keep_dense=True)
    for rows in (1, 3, 16, 64):
        x = torch.randn(rows, 256, device=DEV, dtype=torch.half)
        ref = torch.relu(nn.functional.linear(x.double(), lin.weight.double(), lin.bias.double()))
        for _ in range(3):  # decide, then the remembered calls
            assert relerr(sl(x), ref) < 2e-3


def test_probe_rejects_a_wrong_result():
    from explorer.gpu import SparseLinear

    lin = _linear(256, 128, bias=True)
    sl = SparseLinear.from_linear(lin)
    x = sl._probe_x
    good = nn.functional.linear(x.float(), lin.weight.float(), lin.bias.float())
    assert sl._probe_ok(good.half(), fused_act=False)
    assert not sl._probe_ok((good * 1.1).half(), fused_act=False)
    assert not sl._probe_ok(torch.full_like(good, float("nan")), fused_act=False)


def _llama_mlp(d, h, dtype):
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaMLP

    cfg = transformers.LlamaConfig(hidden_size=d, intermediate_size=h, hidden_act="silu")
    mlp = LlamaMLP(cfg).to(DEV, dtype)
    with torch.no_grad():
        for lin in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
            lin.weight.copy_(mask24(lin.weight) * 20)
    return mlp


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8])
@pytest.mark.parametrize("shape", [(64,), (3, 37)])
def test_sparsify_fuses_gated_mlp(dtype, shape):
    from explorer.gpu import SparseGatedMLP, sparsify

    act = torch.float16 if dtype == torch.int8 else dtype
    block = nn.Sequential(_llama_mlp(256, 768, act))
    x = torch.randn(*shape, 256, device=DEV, dtype=act)
    with torch.no_grad():
        ref = block(x).double()
        rep = sparsify(block, dtype=dtype, inplace=False, fuse_mlp=True, tokens=())
        y = rep.model(x)
    assert isinstance(rep.model[0], SparseGatedMLP)
    assert rep.fused == ["0"]
    assert {n for n, _ in rep.swapped} == {"0.gate_proj", "0.up_proj", "0.down_proj"}
    assert y.shape == (*shape, 256) and y.dtype == act
    tol = 3e-2 if dtype == torch.int8 else 5e-3  # int8: the quantization error itself
    assert relerr(y, ref) < tol


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sparsify_fuses_a_phi3_block_whose_gate_and_up_are_one_linear(dtype):
    transformers = pytest.importorskip("transformers")
    from transformers.models.phi3.modeling_phi3 import Phi3MLP

    from explorer.gpu import SparseGatedMLP, sparsify

    cfg = transformers.Phi3Config(hidden_size=256, intermediate_size=768, hidden_act="silu")
    mlp = Phi3MLP(cfg).to(DEV, dtype)
    with torch.no_grad():
        for lin in (mlp.gate_up_proj, mlp.down_proj):
            lin.weight.copy_(mask24(lin.weight) * 20)
    block = nn.Sequential(mlp)
    x = torch.randn(3, 37, 256, device=DEV, dtype=dtype)
    with torch.no_grad():
        ref = block(x).double()
        rep = sparsify(block, inplace=False, tokens=())
        y, again = rep.model(x), rep.model(x)  # the first call chooses, the second remembers
    assert isinstance(rep.model[0], SparseGatedMLP) and rep.fused == ["0"]
    assert {n for n, _ in rep.swapped} == {"0.gate_up_proj", "0.down_proj"}
    assert y.shape == (3, 37, 256) and y.dtype == dtype
    assert relerr(y, ref) < 5e-3 and relerr(again, ref) < 5e-3


def test_gated_mlp_not_fused_when_a_layer_is_not_24():
    from explorer.gpu import sparsify

    mlp = _llama_mlp(256, 688, torch.float16)
    with torch.no_grad():
        mlp.down_proj.weight.add_(0.01)  # dense again
    rep = sparsify(mlp, inplace=False, fuse_mlp=True, tokens=())
    assert rep.fused == []
    assert "not 2:4" in rep.reason("down_proj")
    assert {n for n, _ in rep.swapped} == {"gate_proj", "up_proj"}


def test_a_root_gated_mlp_goes_layer_by_layer():
    from explorer.gpu import SparseLinear, sparsify

    mlp = _llama_mlp(256, 768, torch.float16)
    rep = sparsify(
        mlp, inplace=False, fuse_mlp=True, tokens=()
    )  # the root cannot be swapped in place
    assert rep.fused == []
    assert isinstance(rep.model.gate_proj, SparseLinear)
