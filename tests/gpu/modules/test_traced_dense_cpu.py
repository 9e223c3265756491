"""A ``SparseLinear`` told to trace dense runs the dense product, on a CPU (no compile, no GPU).

``benchmarks/compiled_guards_cpu.py`` compares compiled stacks of such layers with
``nn.Linear``; its comparison holds only if the layers' compiled route is the plain dense matmul.
"""

from __future__ import annotations

import copy
import re
import runpy
from pathlib import Path

import torch
from torch import nn

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "compiled_guards_cpu.py"


def test_layers_trace_dense_at_the_timed_count_only_and_match_nn_linear():
    stack = _stack_script()["traced_dense_stack"]
    torch.manual_seed(0)
    dense = nn.Sequential(*[nn.Linear(32, 48), nn.Linear(48, 32)])
    sparse = stack(dense, tokens=4)
    assert all(layer.traces_dense(4) for layer in sparse)
    assert not any(layer.traces_dense(8) for layer in sparse)  # a count never decided: the op
    x = torch.randn(4, 32)
    y = x
    for layer in sparse:
        y = layer.traced_dense(y)
    torch.testing.assert_close(y, dense(x), rtol=0, atol=0)


def _stack_script() -> dict:
    return runpy.run_path(str(SCRIPT), run_name="compiled_guards_cpu")


def _guard_checks(model: nn.Module, x: torch.Tensor) -> int:
    """Guard checks Dynamo installs compiling ``model`` for ``x`` (the eager backend: no codegen)."""
    try:
        return _stack_script()["compiled_with_guards"](model, x, backend="eager")[1]
    finally:
        torch._dynamo.reset()


def test_a_compiled_decode_step_guards_little_more_than_nn_linear():
    """Each guard is checked on every compiled call: a host-bound decode step pays for each."""
    torch.manual_seed(0)
    dense = nn.Sequential(*[nn.Linear(32, 32) for _ in range(4)])
    sparse = _stack_script()["traced_dense_stack"](dense, tokens=1)
    x = torch.randn(1, 32)
    extra = (_guard_checks(sparse, x) - _guard_checks(dense, x)) / len(dense)
    # the general path read 18 more a layer (its decisions, mode state, properties), the
    # decisions' own bit 4.75; the layer's one int (small_row_routes) 2.25
    assert extra <= 3, f"{extra:.1f} more guard checks a layer than nn.Linear"


def test_a_compiled_prefill_guards_little_more_than_nn_linear():
    """Above 64 rows a settled verdict is read as a decode step's is (``traced_large``): each
    layer adds 7 guard checks beyond an ``nn.Linear``, against 16 through the general path (a
    BERT-like model compiled in the default mode at 4096 tokens has 24 such layers, checked on
    every call of a step its host sets the pace of)."""
    torch.manual_seed(0)
    x = torch.randn(256, 32)

    def checks(layers: int) -> tuple[int, int]:
        dense = nn.Sequential(*[nn.Linear(32, 32) for _ in range(layers)])
        sparse = _stack_script()["traced_dense_stack"](dense, tokens=256)
        return _guard_checks(dense, x), _guard_checks(sparse, x)

    (dense4, sparse4), (dense8, sparse8) = checks(4), checks(8)
    per_layer = ((sparse8 - sparse4) - (dense8 - dense4)) / 4  # what four more layers add
    assert 0 < per_layer <= 8, f"{per_layer:.1f} more guard checks a layer than nn.Linear"


def _program(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
    """``model(x)`` compiled by Inductor, and the lines of the ``call`` function it wrote, with
    its inputs' names and its comments and input checks left out (inputs are numbered in the
    order Dynamo lifts them: parameters first, buffers after the input)."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            out, codes = run_and_get_code(torch.compile(model), x)
    finally:
        torch._dynamo.reset()
    lines = []
    for code in codes:
        body = code[code.index("def call(") :]
        end = body.find("\ndef ", 1)  # the next function: the benchmark harness Inductor adds
        body = body if end < 0 else body[:end]
        for line in body.splitlines():
            line = re.sub(r"arg\d+_1", "arg", line).strip()
            if line and not line.startswith(("#", "assert_size_stride")):
                lines.append(line)
    return out, lines


def test_a_compiled_prefill_of_layers_traced_dense_is_the_dense_models_code():
    """The same kernels, in the same order, on the same shapes as the ``nn.Linear`` layers, a
    GELU between them as in a BERT MLP: what a compiled model kept dense loses is host time."""
    torch.manual_seed(0)
    dense = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))
    layers = _stack_script()["traced_dense_stack"](nn.Sequential(dense[0], dense[2]), tokens=256)
    sparse = nn.Sequential(layers[0], nn.GELU(), layers[1])
    x = torch.randn(8, 32, 32)  # 256 rows, as batch x sequence
    got, sparse_code = _program(sparse, x)
    want, dense_code = _program(dense, x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert any("addmm" in line for line in dense_code)
    assert sparse_code == dense_code


def test_a_compiled_stack_traced_linear_matches_nn_linear_and_declines_the_rest():
    torch.manual_seed(0)
    dense = nn.Sequential(nn.Linear(32, 48), nn.Linear(48, 32))
    sparse = _stack_script()["traced_dense_stack"](dense, tokens=3)
    x = torch.randn(3, 32)
    with torch.no_grad():
        got = torch.compile(sparse, backend="eager")(x)
        torch._dynamo.reset()
        torch.testing.assert_close(got, dense(x), rtol=0, atol=0)
        layer = sparse[0]
        assert layer.traced_linear(torch.randn(1, 3, 32)) is not None  # any leading dims
        assert layer.traced_linear(torch.randn(4, 32)) is None  # a count never decided dense
        assert layer.traced_linear(torch.randn(3, 32, dtype=torch.float64)) is None
        layer.set_activation("relu")
        assert layer.traced_linear(x) is None  # the general path applies the activation


def test_a_settled_prefill_count_is_traced_directly_and_its_neighbours_are_not():
    torch.manual_seed(0)
    dense = nn.Sequential(nn.Linear(32, 48), nn.Linear(48, 32))
    sparse = _stack_script()["traced_dense_stack"](dense, tokens=256)
    layer = sparse[0]
    x = torch.randn(8, 32, 32)  # 256 rows, as batch x sequence
    with torch.no_grad():
        torch.testing.assert_close(layer.traced_linear(x), dense[0](x), rtol=0, atol=0)
        assert layer.traced_linear(torch.randn(250, 32)) is not None  # decided as 256 rows
        assert layer.traced_linear(torch.randn(512, 32)) is None  # never decided: the op
        assert layer.traced_linear(torch.randn(16, 32)) is None  # a decode size not traced
        got = torch.compile(sparse, backend="eager")(x)
    torch._dynamo.reset()
    torch.testing.assert_close(got, dense(x), rtol=0, atol=0)


def test_a_compiled_gated_mlp_at_a_decode_size_is_the_dense_swiglu():
    from explorer.gpu.modules.gated_mlp import SparseGatedMLP

    torch.manual_seed(0)
    gate_up, down = nn.Linear(16, 64, bias=False), nn.Linear(32, 16, bias=False)
    stack = _stack_script()["traced_dense_stack"](nn.Sequential(gate_up, down), tokens=2)
    block = SparseGatedMLP(stack[0], stack[1])
    x = torch.randn(1, 2, 16)
    with torch.no_grad():
        g, u = gate_up(x).chunk(2, dim=-1)
        want = down(nn.functional.silu(g) * u)
        got = torch.compile(block, backend="eager")(x)
    torch._dynamo.reset()
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_every_small_row_count_is_its_own_decision_count():
    """The one-int verdict names row counts, the decisions decision counts: equal up to 64."""
    from explorer.gpu.library import cusparselt
    from explorer.gpu.routes.layer_decisions import SMALL_ROWS_UP_TO

    assert cusparselt.EXACT_TOKENS_UP_TO >= SMALL_ROWS_UP_TO
    for dtype in (torch.float16, torch.bfloat16, torch.int8):
        assert all(
            cusparselt.decision_tokens(t, dtype) == t for t in range(1, SMALL_ROWS_UP_TO + 1)
        )


def test_the_step_guards_script_twins_the_layers_on_their_own_tensors_and_reads_one_graph():
    step = runpy.run_path(str(SCRIPT.with_name("compiled_step_guards.py")), run_name="steps")
    torch.manual_seed(0)
    dense = nn.Sequential(nn.Linear(32, 48), nn.Linear(48, 32))
    sparse = _stack_script()["traced_dense_stack"](dense, tokens=2)
    twin = step["twin"](dense, sparse)
    assert all(
        t.weight.data_ptr() == s.dense_weight().data_ptr()
        for t, s in zip(twin, sparse, strict=True)
    )
    assert all(type(t) is nn.Linear for t in twin)
    x = torch.randn(2, 32)
    graphs, breaks, ops, calls = step["graph_summary"](sparse, x)
    assert (graphs, breaks, ops) == (1, 0, 0) and calls == step["graph_summary"](twin, x)[3]


def _op_stack(dense: nn.Sequential, tokens: int) -> nn.Sequential:
    """``dense``'s layers as ``SparseLinear`` layers whose compiled verdict at ``tokens`` is the op."""
    from explorer.gpu.routes.dispatch import DENSE, Decision, Route

    layers = _stack_script()["traced_dense_stack"](dense, tokens)
    sparse_wins = Decision({DENSE: 0.020, Route("sparse", "cc"): 0.010}, {})
    sparse_wins.wall.update(sparse_wins.gpu)
    for layer in layers:
        layer.decisions_made.remember(tokens, sparse_wins, op_ms=0.03, dense=True, program=True)
    return layers


#: The compiled op's names in a graph: Python's, or the C++ one once the extension is loaded.
OPS = ("explorer.sparse_forward", "explorer.sparse_call")


def _graph_of(model: nn.Module, x: torch.Tensor) -> tuple[int, list]:
    """Guard checks of ``model`` compiled for ``x``, and the ops its graph calls (not run: on a
    CPU the compressed weight is a placeholder)."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        (out,) = [n.args[0] for n in gm.graph.nodes if n.op == "output"]
        empty = [torch.empty_like(v.meta["example_value"], device="cpu") for v in out]
        return lambda *args: empty

    checks = _stack_script()["compiled_with_guards"](model, x, backend=keep)[1]
    torch._dynamo.reset()
    return checks, [n for g in graphs for n in g.graph.nodes if n.op == "call_function"]


def test_a_compiled_decode_step_on_the_op_guards_no_more_than_nn_linear():
    """The op's verdict is read from the same int: the op, with its id, is all a layer adds."""
    torch.manual_seed(0)
    dense = nn.Sequential(*[nn.Linear(32, 32, bias=False) for _ in range(8)])
    sparse = _op_stack(dense, tokens=1)
    x = torch.randn(1, 32)
    checks, calls = _graph_of(sparse, x)
    assert [(str(n.target) in OPS, n.args[1]) for n in calls] == [(1, m.op_id) for m in sparse]
    extra = (checks - _guard_checks(dense, x)) / len(dense)
    assert extra <= 0.5, f"{extra:.1f} more guard checks a layer than nn.Linear"  # (-4.4 here)


def test_a_compiled_gated_mlp_whose_gate_up_runs_sparse_is_the_blocks_one_op():
    from explorer.gpu.modules.gated_mlp import SparseGatedMLP

    torch.manual_seed(0)
    parts = _op_stack(nn.Sequential(nn.Linear(16, 64, bias=False), nn.Linear(32, 16)), tokens=2)
    block = SparseGatedMLP(parts[0], parts[1])
    _, calls = _graph_of(block, torch.randn(1, 2, 16))
    assert [(str(n.target) in OPS, n.args[1]) for n in calls] == [(1, block._op_id)]


def test_the_compiled_verdict_int_follows_the_decisions_activation_and_copies():
    from explorer.gpu.routes.layer_decisions import OP_BITS_AT

    layer = _stack_script()["traced_dense_stack"](nn.Sequential(nn.Linear(32, 32)), 4)[0]
    assert (layer.small_row_routes >> 4 & 1, layer.small_row_routes >> OP_BITS_AT + 4 & 1) == (1, 0)
    assert layer.small_row_routes >> OP_BITS_AT + 3 & 1  # never decided: the op decides
    layer.set_activation("relu")
    assert layer.small_row_routes >> 4 & 1 == 0  # traced, but not the bare product
    assert layer.small_row_routes >> OP_BITS_AT + 4 & 1 == 0
    layer.set_activation("none")
    twin = copy.deepcopy(layer)
    assert twin.small_row_routes == layer.small_row_routes
    twin.decisions_made.forget()  # the copy's decisions recount the copy's int alone
    assert twin.small_row_routes >> OP_BITS_AT + 4 & 1 and layer.small_row_routes >> 4 & 1
    layer.drop_dense()
    assert layer.small_row_routes >> 4 & 1 == 0 and layer.small_row_routes >> OP_BITS_AT + 4 & 1
