"""A ``SparseLinear`` told to trace dense runs the dense product, on a CPU (no compile, no GPU).

``benchmarks/compiled_guards_cpu.py`` compares compiled stacks of such layers with
``nn.Linear``; its comparison holds only if the layers' compiled route is the plain dense matmul.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import torch
from torch import nn

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "compiled_guards_cpu.py"


def test_layers_trace_dense_at_the_timed_count_only_and_match_nn_linear():
    stack = runpy.run_path(str(SCRIPT), run_name="compiled_guards_cpu")["traced_dense_stack"]
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
    import io
    import logging

    kinds = _stack_script()["GUARD_KINDS"]
    torch._dynamo.reset()
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    logging.getLogger("torch._dynamo").addHandler(handler)
    torch._logging.set_logs(guards=True)
    try:
        with torch.no_grad():
            torch.compile(model, backend="eager")(x)
    finally:
        torch._logging.set_logs()
        logging.getLogger("torch._dynamo").removeHandler(handler)
        torch._dynamo.reset()
    lines = log.getvalue().splitlines()
    return sum(1 for line in lines if "+- " in line and any(k in line for k in kinds))


def test_a_compiled_decode_step_guards_little_more_than_nn_linear():
    """Each guard is checked on every compiled call: a host-bound decode step pays for each."""
    torch.manual_seed(0)
    dense = nn.Sequential(*[nn.Linear(32, 32) for _ in range(4)])
    sparse = _stack_script()["traced_dense_stack"](dense, tokens=1)
    x = torch.randn(1, 32)
    extra = (_guard_checks(sparse, x) - _guard_checks(dense, x)) / len(dense)
    # the general path read 18 more a layer (its decisions, mode state, properties): 4.75 now
    assert extra <= 6, f"{extra:.1f} more guard checks a layer than nn.Linear"


def test_a_compiled_stack_traced_small_matches_nn_linear_and_declines_the_rest():
    torch.manual_seed(0)
    dense = nn.Sequential(nn.Linear(32, 48), nn.Linear(48, 32))
    sparse = _stack_script()["traced_dense_stack"](dense, tokens=3)
    x = torch.randn(3, 32)
    with torch.no_grad():
        got = torch.compile(sparse, backend="eager")(x)
        torch._dynamo.reset()
        torch.testing.assert_close(got, dense(x), rtol=0, atol=0)
        layer = sparse[0]
        assert layer.traced_small(torch.randn(1, 3, 32)) is not None  # any leading dims
        assert layer.traced_small(torch.randn(4, 32)) is None  # a count never decided dense
        assert layer.traced_small(torch.randn(3, 32, dtype=torch.float64)) is None
        layer.set_activation("relu")
        assert layer.traced_small(x) is None  # the general path applies the activation


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
