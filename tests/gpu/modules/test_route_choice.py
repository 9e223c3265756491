"""``RouteChoice``: the routes a ``SparseLinear`` offers, and the verdicts that override its timing.

The first tests need no GPU: a layer told to keep a token count dense returns the dense route by
the wall clock without timing anything. The others check on the GPU that every route a layer
offers for timing computes the dense masked product.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from explorer.gpu.modules.sparse_linear import SparseLinear
from explorer.gpu.routes.dispatch import DECODE, DENSE, Decision, Route

DEV = "cuda"


def _placeholder_layer(tokens: int = 4) -> SparseLinear:
    """A CPU layer whose decision at ``tokens`` is already made (sparse by both clocks)."""
    linear = nn.Linear(32, 48)
    layer = SparseLinear(
        32,
        48,
        torch.zeros(8, dtype=torch.uint8),  # never read: no sparse call runs here
        linear.bias.detach().clone(),
        linear.weight.dtype,
        dense_weight=linear.weight.detach().clone(),
    )
    sparse_wins = Decision({DENSE: 0.020, Route("sparse", "cc"): 0.010}, {})
    layer.decisions_made.remember(tokens, sparse_wins, op_ms=0.03, dense=True)
    return layer


def test_a_count_kept_dense_takes_the_dense_route_by_the_wall_clock_only():
    layer = _placeholder_layer()
    forced = Route("sparse", "rr")
    layer._force = forced  # what whole-forward timing imposes: returned as it is
    assert layer._route(8, 4, 0, False, False, "c", "wall") == forced
    layer._force = None
    layer.keep_dense_at(4)
    assert layer._route(8, 4, 0, False, False, "c", "wall") == DENSE
    assert layer.decisions_made.eager_dense(4)
    layer.keep_dense_at(4, keep=False)
    assert not layer.decisions_made.eager_dense(4)


def test_a_layer_without_its_dense_weight_ignores_a_keep_dense_verdict():
    layer = _placeholder_layer()
    layer._dense = None  # nothing to fall back to
    layer.keep_dense_at(4)
    assert not layer.decisions_made.eager_dense(4)


def _masked_linear(i: int, o: int, dtype: torch.dtype) -> nn.Linear:
    from gpu_helpers import mask24

    lin = nn.Linear(i, o).to(DEV, dtype)
    with torch.no_grad():
        lin.weight.copy_(mask24(lin.weight))
    return lin


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("tokens", [1, 16, 300])
@pytest.mark.parametrize("first", ["c", "r"])
def test_every_route_offered_computes_the_dense_product(dtype, tokens, first):
    from gpu_helpers import relerr

    from explorer.gpu.library import cusparselt as C

    lin = _masked_linear(256, 384, dtype)
    layer = SparseLinear.from_linear(lin, keep_dense=True, decode=True)
    n = C.padded_tokens(tokens, dtype)
    calls = layer._route_calls(n, tokens, 0, False, first)
    assert DENSE in calls
    assert (DECODE in calls) == (tokens <= 64)
    assert any(route.kind == "sparse" for route in calls)
    for route, call in calls.items():
        y = call()
        assert y.shape == (tokens, 384), route
        # the calls run on a fixed random input, the one the layer builds for timing
        gen = torch.Generator(device=DEV).manual_seed(0)
        x = torch.randn(n, 256, device=DEV, generator=gen).to(dtype)
        probe = min(n, layer._probe_x.shape[0])
        x[:probe] = layer._probe_x[:probe]
        ref = nn.functional.linear(x[:tokens].double(), lin.weight.double(), lin.bias.double())
        assert relerr(y, ref) < 2e-3, route


@pytest.mark.gpu
def test_a_layer_chooses_once_per_problem_and_keeps_the_verdict():
    lin = _masked_linear(256, 256, torch.float16)
    layer = SparseLinear.from_linear(lin, keep_dense=True)
    x = torch.randn(16, 256, device=DEV, dtype=torch.half)
    layer(x)
    first = layer.decisions("wall")
    assert 16 in first
    layer(x)
    assert layer.decisions("wall") == first
    assert set(layer.measured()) == set(first)
