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
