"""The compiled operator ``explorer::sparse_call`` with the real driver and cuSPARSELt (GPU).

Each layer is checked against a float64 product of its dense masked weight on fresh random
inputs, through ``torch.compile`` (default mode) and a CUDA-graph capture, and the operator's
counters show which calls C++ served.
"""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import captured, mask24, relerr
from torch import nn

pytestmark = pytest.mark.gpu
DEV = "cuda"
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.5e-2}


def _linear(i, o, dtype, bias=False):
    lin = nn.Linear(i, o, bias=bias).to(DEV, dtype)
    with torch.no_grad():
        lin.weight.copy_(mask24(lin.weight))
    return lin


def _native():
    from explorer.gpu.cuda import native

    if not native.load():
        pytest.fail(native.status())
    return native


def _ref(lin, x):
    b = None if lin.bias is None else lin.bias.double()
    return nn.functional.linear(x.double(), lin.weight.double(), b)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(32, 512), (2, 16, 512)])
def test_a_compiled_cusparselt_call_runs_in_cpp(dtype, shape):
    from explorer.gpu import SparseLinear

    native = _native()
    lin = _linear(512, 768, dtype, bias=True)
    sl = SparseLinear.from_linear(lin, keep_dense=False, layout="cc", mode="compile")
    fn = torch.compile(lambda x: sl(x), dynamic=False)
    x = torch.randn(shape, device=DEV, dtype=dtype)
    assert relerr(fn(x), _ref(lin, x)) < TOL[dtype]  # Python decides and hands over the program
    assert native.counts(sl.op_id)["programs"] == 1
    before = native.counts()
    for _ in range(3):
        x = torch.randn(shape, device=DEV, dtype=dtype)
        assert relerr(fn(x), _ref(lin, x)) < TOL[dtype]
    after = native.counts()
    assert after["native_calls"] - before["native_calls"] == 3
    assert after["python_calls"] == before["python_calls"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 5, 8])
def test_a_compiled_decode_kernel_call_runs_in_cpp(dtype, rows):
    from explorer.gpu import SparseLinear

    native = _native()
    lin = _linear(2048, 4096, dtype, bias=True)
    sl = SparseLinear.from_linear(lin, keep_dense=False, decode=True, mode="compile")
    fn = torch.compile(lambda x: sl(x), dynamic=False)
    x = torch.randn(rows, 2048, device=DEV, dtype=dtype)
    assert relerr(fn(x), _ref(lin, x)) < TOL[dtype]
    decode = any(r.kind == "decode" for r, _ in sl.decisions().values())
    before = native.counts()
    for _ in range(3):
        x = torch.randn(rows, 2048, device=DEV, dtype=dtype)
        y = fn(x)
        torch.testing.assert_close(y, sl(x), rtol=0, atol=0)  # the same kernel eagerly
        assert relerr(y, _ref(lin, x)) < TOL[dtype]
    if decode:  # (cuSPARSELt pads small counts: no program for it there)
        # three compiled calls and three eager ones: the eager call runs the same program
        assert native.counts()["native_calls"] - before["native_calls"] == 6


def test_a_gated_mlp_block_is_one_program_of_three_steps():
    from explorer.gpu import SparseGatedMLP

    native = _native()
    d, h, dtype = 1024, 2816, torch.bfloat16
    gate, up, down = (_linear(*io, dtype) for io in ((d, h), (d, h), (h, d)))
    block = SparseGatedMLP.from_modules(gate, up, down, keep_dense=False, decode=True)
    block.set_mode("compile")
    fn = torch.compile(lambda x: block(x), dynamic=False)

    def ref(x):
        x = x.double()
        g, u = _ref(gate, x), _ref(up, x)
        return _ref(down, (nn.functional.silu(g) * u).to(dtype))

    x = torch.randn(1, 1, d, device=DEV, dtype=dtype)
    assert relerr(fn(x), ref(x)) < 2e-2
    kinds = {r.kind for part in (block.gate_up, block.down) for r, _ in part.decisions().values()}
    before = native.counts()
    for _ in range(3):
        x = torch.randn(1, 1, d, device=DEV, dtype=dtype)
        assert relerr(fn(x), ref(x)) < 2e-2
    if kinds == {"decode"}:
        assert native.counts(block.native_table.module_id)["programs"] == 1
        assert native.counts()["native_calls"] - before["native_calls"] == 3


@pytest.mark.parametrize("mode", ["graphs", "auto"])
def test_a_captured_call_replays_the_program_on_new_inputs(mode):
    from explorer.gpu import SparseLinear

    native = _native()
    dtype = torch.float16
    lin = _linear(1024, 1024, dtype)
    sl = SparseLinear.from_linear(lin, keep_dense=False, decode=True, mode=mode)
    static = torch.randn(4, 1024, device=DEV, dtype=dtype)

    def call():
        return torch.ops.explorer.sparse_call(static, sl.op_id)

    call()  # eager: decides the wall clock's route ("auto")
    before = native.counts()
    graph, out = captured(call)
    inside = native.counts()["native_calls"] - before["native_calls"]
    for _ in range(3):
        fresh = torch.randn(4, 1024, device=DEV, dtype=dtype)
        static.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        assert relerr(out, _ref(lin, fresh)) < TOL[dtype]
    if mode == "graphs" and any(r.kind == "decode" for r, _ in sl.decisions().values()):
        assert inside >= 1  # the capture ran the program its warm-up set up (by the GPU clock)


def test_a_closed_plan_is_never_run_from_cpp():
    from explorer.gpu import SparseLinear
    from explorer.gpu.library import cusparselt as C

    native = _native()
    dtype = torch.float16
    lin = _linear(512, 512, dtype)
    sl = SparseLinear.from_linear(lin, keep_dense=False, layout="cc", mode="compile")
    x = torch.randn(16, 512, device=DEV, dtype=dtype)
    op = torch.ops.explorer.sparse_call
    op(x, sl.op_id)
    assert native.counts(sl.op_id)["programs"] == 1
    C.default_cache().clear()  # closes every plan, this layer's too
    before = native.counts()
    try:
        y = op(x, sl.op_id)
    except RuntimeError as exc:  # the Python call names the closed plan
        assert "closed" in str(exc)
    else:
        assert relerr(y, _ref(lin, x)) < TOL[dtype]
    assert native.counts()["native_calls"] == before["native_calls"]


def test_a_moved_or_copied_layer_gets_new_programs():
    import copy

    from explorer.gpu import SparseLinear

    native = _native()
    dtype = torch.bfloat16
    lin = _linear(512, 512, dtype)
    sl = SparseLinear.from_linear(lin, keep_dense=False, layout="cc", mode="compile")
    op = torch.ops.explorer.sparse_call
    x = torch.randn(16, 512, device=DEV, dtype=dtype)
    op(x, sl.op_id)
    twin = copy.deepcopy(sl)
    assert native.counts(twin.op_id)["programs"] == 0
    for layer in (sl, twin):
        for _ in range(2):
            x = torch.randn(16, 512, device=DEV, dtype=dtype)
            assert relerr(op(x, layer.op_id), _ref(lin, x)) < TOL[dtype]
    old = sl.op_id
    sl.to(DEV)  # a move sets up everything again, under a new id
    assert native.counts(old)["programs"] == 0
    x = torch.randn(16, 512, device=DEV, dtype=dtype)
    assert relerr(op(x, old), _ref(lin, x)) < TOL[dtype]  # a graph that baked the old id


@pytest.mark.parametrize("rows", [1, 16])
def test_a_compiled_decode_size_calls_the_operator_where_the_kernel_won(rows):
    """With the dense weight kept, a default-mode compiled layer traces the dense matmul at a
    decode size unless the wall clock chose a route the operator makes; then C++ makes it."""
    from explorer.gpu import SparseLinear

    native = _native()
    dtype = torch.bfloat16
    lin = _linear(4096, 4096, dtype)
    sl = SparseLinear.from_linear(lin, keep_dense=True, decode=True, mode="compile")
    x = torch.randn(rows, 4096, device=DEV, dtype=dtype)
    sl(x)  # eager: the layer times its routes
    route, _ = sl.decisions("wall")[rows]
    fn = torch.compile(lambda x: sl(x), dynamic=False)
    fn(x)
    before = native.counts()
    for _ in range(3):
        x = torch.randn(rows, 4096, device=DEV, dtype=dtype)
        assert relerr(fn(x), _ref(lin, x)) < TOL[dtype]
    served = native.counts()["native_calls"] - before["native_calls"]
    made = sl.operator_makes(route, rows)
    unpadded_cc = route.kind == "sparse" and route.layout == "cc" and rows == 16
    assert made is (route.kind == "decode" or unpadded_cc)
    assert served == (3 if made else 0)
    assert sl.decisions_made.traces_dense(rows) is not made


@pytest.mark.parametrize(
    ("shape", "out"), [((1, 2048), 3072), ((1, 1, 2048), 2560), ((16, 2048), 3072)]
)
def test_an_eager_call_of_a_remembered_input_is_made_in_cpp(shape, out, monkeypatch):
    """Eager calls run the wall clock's programs too; routes are timed through the operator."""
    from explorer.gpu import SparseLinear
    from explorer.gpu.cuda import native_table

    monkeypatch.setattr(native_table, "_GRAD_HINT_DUE", [True])

    native = _native()
    dtype = torch.bfloat16
    lin = _linear(2048, out, dtype, bias=True)  # a problem of its own: timed in this test
    sl = SparseLinear.from_linear(lin, keep_dense=True, decode=True, mode="eager")
    x = torch.randn(shape, device=DEV, dtype=dtype)
    before = native.counts()
    assert relerr(sl(x), _ref(lin, x)) < TOL[dtype]  # times the routes, some through C++
    assert native.counts()["native_calls"] > before["native_calls"]
    rows = x.numel() // 2048
    route, _ = sl.decisions("wall")[rows]
    made = sl.operator_makes(route, rows)
    # a dense route has a program too (a block's step), but eager calls keep F.linear itself
    has_program = made or (route.kind == "dense" and sl.activation == "none")
    assert bool(sl.native_table.eager.get((x.shape, x.stride(), 0, dtype))) is has_program
    before = native.counts()
    for _ in range(3):
        x = torch.randn(shape, device=DEV, dtype=dtype)
        assert relerr(sl(x), _ref(lin, x)) < TOL[dtype]
    after = native.counts()
    assert after["native_calls"] - before["native_calls"] == (3 if made else 0)
    assert after["python_calls"] == before["python_calls"]
    if made:
        before = native.counts()
        grad = torch.randn(shape, device=DEV, dtype=dtype, requires_grad=True)
        with pytest.warns(RuntimeWarning, match=r"requires gradients.*inference_mode"):
            assert not sl(grad).requires_grad  # an input that needs gradients: Python's call
        assert native.counts()["native_calls"] == before["native_calls"]
        sl.keep_dense_at(rows)  # the whole-model check kept it dense: C++ makes it no more
        assert not sl.native_table.eager and native.counts(sl.op_id)["programs"] == 0
        x = torch.randn(shape, device=DEV, dtype=dtype)
        torch.testing.assert_close(sl(x), lin(x), rtol=0, atol=0)  # the same cuBLAS call


def test_an_eager_gated_mlp_call_is_one_program_until_a_part_changes():
    from explorer.gpu import SparseGatedMLP

    native = _native()
    d, h, dtype = 1024, 2816, torch.bfloat16
    gate, up, down = (_linear(*io, dtype) for io in ((d, h), (d, h), (h, d)))
    block = SparseGatedMLP.from_modules(gate, up, down, keep_dense=True, decode=True)

    def ref(x):
        x = x.double()
        g, u = _ref(gate, x), _ref(up, x)
        return _ref(down, (nn.functional.silu(g) * u).to(dtype))

    x = torch.randn(1, 1, d, device=DEV, dtype=dtype)
    assert relerr(block(x), ref(x)) < 2e-2
    # a part's route is a step if the operator makes it, or if it is dense (torch's own product)
    made = all(
        p.operator_makes(route, 1) or route.kind == "dense"
        for p in (block.gate_up, block.down)
        for route in [p.decisions("wall")[1][0]]
    )
    assert bool(block.native_table.eager.get((x.shape, x.stride(), 0, dtype))) is made
    before = native.counts()
    for _ in range(3):
        x = torch.randn(1, 1, d, device=DEV, dtype=dtype)
        assert relerr(block(x), ref(x)) < 2e-2
    if not made:
        pytest.skip("a part took a route the operator does not make on this GPU")
    assert native.counts()["native_calls"] - before["native_calls"] == 3
    block.down.keep_dense_at(1)  # a part's routes change: the block's program goes with them
    assert not block.native_table.eager
    assert native.counts(block.native_table.module_id)["programs"] == 0
    first = native.counts()
    x = torch.randn(1, 1, d, device=DEV, dtype=dtype)
    assert relerr(block(x), ref(x)) < 2e-2  # the parts' calls, which make a new program
    # the down projection now runs dense: a step of torch's own product, still one program
    assert native.counts(block.native_table.module_id)["programs"] == 1
    before = native.counts()
    for _ in range(2):
        x = torch.randn(1, 1, d, device=DEV, dtype=dtype)
        assert relerr(block(x), ref(x)) < 2e-2
    assert native.counts()["native_calls"] - before["native_calls"] == 2
    assert native.counts()["python_calls"] == first["python_calls"]  # no stale eager call


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_an_eager_gated_mlp_at_sixteen_rows_is_one_program_whatever_its_parts_time(dtype):
    """Alone, a part's transposed output can be the fastest by a few microseconds; in the block
    it leaves every eager call in Python (twice the host time). By the wall clock a block's parts
    take routes the operator makes, so the block is one program; CUDA graphs take any route."""
    from explorer.gpu import SparseGatedMLP

    native = _native()
    d, h = 1024, 3584
    gate, up, down = (_linear(*io, dtype) for io in ((d, h), (d, h), (h, d)))
    block = SparseGatedMLP.from_modules(gate, up, down)
    tol = 2e-2 if dtype == torch.bfloat16 else 5e-3

    def ref(x):
        x = x.double()
        g, u = _ref(gate, x), _ref(up, x)
        return _ref(down, (nn.functional.silu(g) * u).to(dtype))

    x = torch.randn(16, 1, d, device=DEV, dtype=dtype)
    assert relerr(block(x), ref(x)) < tol
    for part in (block.gate_up, block.down):
        assert part.block_part
        route = part.decisions("wall")[16][0]
        assert route.kind == "dense" or part.operator_makes(route, 16), route
    assert block.native_table.eager.get((x.shape, x.stride(), 0, dtype))
    before = native.counts()
    for _ in range(3):
        x = torch.randn(16, 1, d, device=DEV, dtype=dtype)
        assert relerr(block(x), ref(x)) < tol
    assert native.counts()["native_calls"] - before["native_calls"] == 3
