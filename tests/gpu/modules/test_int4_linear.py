"""Int4Linear and sparsify(dtype="int4") on the GPU, against the dequantized product.

Both routes compute ``x @ (q * s)^T`` for the same codes; torch's int4 kernel holds the scales
in bfloat16 and rounds its output to bfloat16, so a route is checked against the float64
product of the dequantized weight within 1e-2 relative (the bf16 scale rounding alone is up to
4e-3 per weight).
"""

from __future__ import annotations

import copy

import pytest
import torch
from gpu_helpers import captured, mask24, relerr
from torch import nn

pytestmark = pytest.mark.gpu
DEV = "cuda"
TOL = 1e-2


def _layer(out=1024, k=1024, bias=True, mode="auto", fmt="int4"):
    from explorer.gpu.modules.int4_linear import Int4Linear

    lin = nn.Linear(k, out, bias=bias).to(DEV, torch.bfloat16)
    with torch.no_grad():
        lin.weight.copy_(mask24(lin.weight))
    return Int4Linear.from_linear(lin, mode=mode, fmt=fmt)


def _jointly_pruned(net):
    """SparseGPT 2:4 with int4 quantization in the loop, group 128 (on the CPU)."""
    from explorer.pruning import prune

    return prune(
        net,
        "sparsegpt",
        "2:4",
        calibration=[torch.randn(512, 256)],
        quantize="int4",
        group_size=128,
        progress=False,
    )


def _reference(layer, x):
    ref = x.double() @ layer.coded_weight().decompress().double().t()
    return ref if layer.bias is None else ref + layer.bias.double()


@pytest.mark.parametrize("tokens", [1, 7, 16, 64, 65, 300])
@pytest.mark.parametrize("bias", [True, False])
def test_each_token_count_matches_the_dequantized_product(tokens, bias):
    layer = _layer(bias=bias)
    x = torch.randn(tokens, 1024, device=DEV, dtype=torch.bfloat16)
    y = layer(x)
    assert y.shape == (tokens, 1024) and y.dtype == torch.bfloat16
    assert relerr(y, _reference(layer, x)) < TOL
    if tokens <= 64:
        assert (tokens, "wall") in layer.decisions()
        times = layer.route_times(tokens, "wall")
        assert set(map(str, times)) == {"Route(dense)", "Route(decode)"}


def test_leading_dims_and_strided_input():
    layer = _layer()
    x = torch.randn(2, 3, 2048, device=DEV, dtype=torch.bfloat16)[..., ::2]
    y = layer(x)
    assert y.shape == (2, 3, 1024)
    assert relerr(y, _reference(layer, x.reshape(-1, 1024)).reshape(2, 3, 1024)) < TOL


@pytest.mark.parametrize("shape", [(1, 1024), (2, 8, 1024), (300, 1024)])
def test_a_repeated_input_takes_the_remembered_call(shape, monkeypatch):
    layer = _layer()
    x = torch.randn(*shape, device=DEV, dtype=torch.bfloat16)
    first = layer(x)

    def no_second_choice(*args):
        raise AssertionError("a repeated input chose its route again")

    monkeypatch.setattr(layer, "route", no_second_choice)
    again = layer(x.clone())
    assert torch.equal(again, first) and again.shape == (*shape[:-1], 1024)
    assert relerr(again.reshape(-1, 1024), _reference(layer, x.reshape(-1, 1024))) < TOL
    layer.set_mode("eager")  # a new mode chooses again
    with pytest.raises(AssertionError, match="chose its route again"):
        layer(x)


@pytest.mark.parametrize("compile_mode", [None, "default"])
def test_above_64_tokens_the_dense_route_is_cublas_on_the_dequantized_weight(
    compile_mode, monkeypatch
):
    from explorer.gpu.cuda.code_tiles import tile_coded_weight
    from explorer.gpu.cuda.int4_dequant import dequantize_int4_reference

    layer = _layer()
    x = torch.randn(3, 100, 1024, device=DEV, dtype=torch.bfloat16)

    def refused(*args):
        raise AssertionError("torch's int4 kernel ran above 64 tokens")

    monkeypatch.setattr(layer, "_torch_int4", refused)
    w = dequantize_int4_reference(tile_coded_weight(layer.coded_weight()), torch.bfloat16)
    expected = nn.functional.linear(x.reshape(300, 1024), w, layer.bias).reshape(3, 100, 1024)
    torch._dynamo.reset()
    run = layer if compile_mode is None else torch.compile(layer, mode=compile_mode)
    assert torch.equal(run(x), expected)
    assert relerr(layer(x), _reference(layer, x)) < TOL
    torch._dynamo.reset()


def test_float16_activations_run_the_dequantized_dense_route():
    from explorer.gpu.modules.int4_linear import Int4Linear

    lin = nn.Linear(512, 256).to(DEV, torch.float16)
    with torch.no_grad():
        lin.weight.copy_(mask24(lin.weight))
    layer = Int4Linear.from_linear(lin)
    assert "bfloat16" in layer.torch_kernel_refusal
    x = torch.randn(16, 512, device=DEV, dtype=torch.float16)
    assert relerr(layer(x), _reference(layer, x)) < TOL


def test_cuda_graph_replays_the_chosen_route():
    layer = _layer()
    x = torch.randn(16, 1024, device=DEV, dtype=torch.bfloat16)
    layer(x)  # choose outside the capture
    g, y = captured(lambda: layer(x))
    x.copy_(torch.randn_like(x))
    g.replay()
    assert relerr(y, _reference(layer, x)) < TOL


@pytest.mark.parametrize(
    ("compile_mode", "layer_mode"), [(None, "auto"), ("reduce-overhead", "graphs")]
)
def test_compiled_layer_matches_eager(compile_mode, layer_mode):
    layer = _layer(mode=layer_mode)
    x = torch.randn(16, 1024, device=DEV, dtype=torch.bfloat16)
    torch._dynamo.reset()
    compiled = torch.compile(layer, mode=compile_mode)
    for _ in range(3):
        got = compiled(x)
    got = compiled(x).clone()
    assert relerr(got, _reference(layer, x)) < TOL
    torch._dynamo.reset()


def test_default_compile_traces_torchs_int4_kernel_at_decode_sizes(monkeypatch):
    """Even where the 2:4 kernel measured faster (the decision is given, in a book of its own)."""
    from explorer.gpu.modules import int4_forward
    from explorer.gpu.routes.dispatch import DECODE, DENSE, Decision
    from explorer.gpu.routes.route_timing import RouteBook

    layer = _layer()
    book = RouteBook()
    monkeypatch.setattr(int4_forward, "BOOK", book)
    times = {DENSE: 0.070, DECODE: 0.025}
    book.record(layer._problem(), 16, Decision(times, dict(times)))
    assert layer.route(16, "wall") == DECODE  # eagerly, the 2:4 kernel

    def refused(*args):
        raise AssertionError("the 2:4 kernel ran in a default-mode compiled decode step")

    monkeypatch.setattr(layer, "_decode", refused)
    x = torch.randn(2, 8, 1024, device=DEV, dtype=torch.bfloat16)
    torch._dynamo.reset()
    compiled = torch.compile(layer)
    for _ in range(2):
        compiled(x)
    x.copy_(torch.randn_like(x))
    got = compiled(x).clone()
    assert got.shape == (2, 8, 1024)
    assert relerr(got.reshape(16, 1024), _reference(layer, x.reshape(16, 1024))) < TOL
    torch._dynamo.reset()


def test_copies_are_independent_and_dtype_changes_are_refused():
    layer = _layer()
    x = torch.randn(4, 1024, device=DEV, dtype=torch.bfloat16)
    twin = copy.deepcopy(layer)
    assert twin.codes.data_ptr() != layer.codes.data_ptr()
    assert torch.equal(twin(x), layer(x))  # same codes, same route choice: the same kernel
    with pytest.raises(TypeError, match="cannot become"):
        layer.half()


def test_sparsify_int4_swaps_and_matches_the_dequantized_model():
    from explorer.gpu import sparsify
    from explorer.gpu.modules.int4_linear import Int4Linear

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 1024), nn.Linear(1024, 10)
    )
    model = model.to(DEV, torch.bfloat16)
    with torch.no_grad():
        for layer in model:
            if isinstance(layer, nn.Linear):
                layer.weight.copy_(mask24(layer.weight))
    x = torch.randn(16, 1024, device=DEV, dtype=torch.bfloat16)
    report = sparsify(model, dtype="int4", tokens=(16, 1))
    assert [fqn for fqn, _ in report.swapped] == ["0", "2", "3"]
    assert all(isinstance(model[i], Int4Linear) for i in (0, 2, 3))
    assert "multiple of 8, got 10" in model[3].torch_kernel_refusal  # dense route: 16-bit
    assert {t.tokens for t in report.timings} == {16, 1}
    ref = x.double()
    for layer in model:
        if isinstance(layer, Int4Linear):
            ref = _reference(layer, ref)
        else:
            ref = layer(ref)
    assert relerr(model(x), ref) < 2 * TOL


def test_an_int4_checkpoint_loads_onto_int4_layers_with_its_scales(tmp_path):
    from explorer.checkpoint import load_sparse, read_int4_weights, save_sparse
    from explorer.gpu.modules.int4_linear import Int4Linear

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 128))
    result = _jointly_pruned(net)
    path = tmp_path / "q.safetensors"
    save_sparse(net, path, result, progress=False)
    fresh = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 128))
    loaded = load_sparse(path, fresh, device=DEV, sparse_linear=True, progress=False)
    stored = read_int4_weights(path)
    for i in (0, 2):
        layer = loaded[i]
        assert isinstance(layer, Int4Linear)
        assert torch.equal(layer.scales.cpu(), stored[str(i)].scales)  # kept, not re-rounded
        assert torch.equal(layer.codes.cpu(), stored[str(i)].codes)
    x = torch.randn(4, 256, device=DEV, dtype=torch.bfloat16)
    assert relerr(loaded[0](x), _reference(loaded[0], x)) < TOL


def test_sparsify_int4_keeps_joint_pruning_codes_with_their_scales():
    from explorer.gpu import sparsify

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 256))
    result = _jointly_pruned(net)
    before = net[0].weight.detach().clone()
    net = net.to(DEV)
    sparsify(net, dtype="int4", tokens=(1,), int4_scales=result.scales)
    layer = net[0]
    assert torch.equal(layer.scales.cpu(), result.scales["0"].float())
    assert torch.equal(layer.coded_weight().decompress().cpu(), before)  # the grid kept exactly


# -- int8 codes (sparsify(dtype="int8-weights")) ---------------------------------------------------
@pytest.mark.parametrize("tokens", [1, 16, 64, 65])
def test_int8_layer_matches_the_dequantized_product_on_both_routes(tokens):
    from explorer.gpu.modules.int4_linear import INT8_DENSE
    from explorer.gpu.routes.dispatch import DECODE, DENSE

    layer = _layer(fmt="int8")
    assert layer.format == "int8" and layer.torch_kernel_refusal == INT8_DENSE
    assert layer.coded_weight().codes.dtype == torch.int8
    assert layer.bits_per_weight == pytest.approx(5.25)
    assert "int8" in repr(layer) and "2:4 + int8 kernel" in layer._repr_html_()
    x = torch.randn(tokens, 1024, device=DEV, dtype=torch.bfloat16)
    assert relerr(layer(x), _reference(layer, x)) < TOL
    if tokens <= 64:  # both routes, whichever was chosen
        assert relerr(layer._decode(x), _reference(layer, x)) < TOL
        assert relerr(layer._dense(x), _reference(layer, x)) < TOL
        assert layer.route(tokens, "gpu") in (DECODE, DENSE)


def test_int8_layer_in_a_cuda_graph_compiled_and_copied():
    layer = _layer(fmt="int8", mode="graphs")
    x = torch.randn(4, 1024, device=DEV, dtype=torch.bfloat16)
    layer(x)
    g, y = captured(lambda: layer(x))
    x.copy_(torch.randn_like(x))
    g.replay()
    assert relerr(y, _reference(layer, x)) < TOL
    torch._dynamo.reset()
    compiled = torch.compile(layer, mode="reduce-overhead")
    for _ in range(3):
        got = compiled(x)
    assert relerr(got.clone(), _reference(layer, x)) < TOL
    torch._dynamo.reset()
    twin = copy.deepcopy(layer)
    assert twin.format == "int8" and torch.equal(twin(x), layer(x))
    with pytest.raises(TypeError, match="dtype='int8-weights'"):
        layer.half()


def test_sparsify_int8_weights_swaps_and_matches_the_dequantized_model():
    from explorer.gpu import sparsify
    from explorer.gpu.modules.int4_linear import Int4Linear

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 1024))
    model = model.to(DEV, torch.bfloat16)
    with torch.no_grad():
        for layer in model:
            if isinstance(layer, nn.Linear):
                layer.weight.copy_(mask24(layer.weight))
    x = torch.randn(16, 1024, device=DEV, dtype=torch.bfloat16)
    report = sparsify(model, dtype="int8-weights", tokens=(16, 1))
    assert report.dtype == "int8-weights" and [f for f, _ in report.swapped] == ["0", "2"]
    assert all(isinstance(model[i], Int4Linear) and model[i].format == "int8" for i in (0, 2))
    assert {t.route for t in report.timings} <= {
        "2:4 int8 decode",
        "16-bit dense (int8 dequantized)",
    }
    assert any("int8 weights" in n for n in report.notes)
    ref = _reference(model[2], torch.relu(_reference(model[0], x.double())))
    assert relerr(model(x), ref) < 2 * TOL


def test_an_int8_checkpoint_loads_onto_int8_layers_with_its_scales(tmp_path):
    from explorer.checkpoint import load_sparse, save_sparse
    from explorer.gpu.modules.int4_linear import Int4Linear
    from explorer.pruning import prune

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 128))
    calibration = [torch.randn(512, 256)]
    result = prune(
        net, "sparsegpt", "2:4", calibration, quantize="int8", group_size=128, progress=False
    )
    path = tmp_path / "q8.safetensors"
    save_sparse(net, path, result, progress=False)
    fresh = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 128))
    loaded = load_sparse(path, fresh, device=DEV, sparse_linear=True, progress=False)
    for i in (0, 2):
        layer = loaded[i]
        assert isinstance(layer, Int4Linear) and layer.format == "int8"
        assert torch.equal(layer.scales.cpu(), result.scales[str(i)].float())  # not re-rounded
        assert torch.equal(layer.coded_weight().decompress().cpu(), net[i].weight.detach())
    x = torch.randn(4, 256, device=DEV, dtype=torch.float32)
    assert relerr(loaded[0](x.to(loaded[0].dtype)), _reference(loaded[0], x)) < TOL
