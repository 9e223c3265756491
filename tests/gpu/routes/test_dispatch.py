"""Route decisions (CPU: pure logic)."""

from __future__ import annotations

import math

import pytest

from explorer.gpu.routes.dispatch import (
    DECODE,
    DENSE,
    SPARSE_MARGIN,
    Decision,
    Route,
    nearest_route,
    pick_route,
)

CC = Route("sparse", "cc", 17)
CRT = Route("sparse", "cr", -1, transpose=True)
CRV = Route("sparse", "cr", -1)


def test_route_validation_and_row_major():
    assert DENSE.row_major and CC.row_major and CRT.row_major and not CRV.row_major
    with pytest.raises(ValueError, match="kind"):
        Route("fast")
    with pytest.raises(ValueError, match="layout"):
        Route("sparse", "xx")
    with pytest.raises(ValueError, match="transposed"):
        Route("sparse", "cc", transpose=True)
    assert repr(CRT) == "Route(sparse cr default + transpose)"


def test_dense_stays_unless_sparse_clearly_wins():
    assert pick_route({DENSE: 1.0, CC: SPARSE_MARGIN * 1.0 + 1e-6}) == DENSE
    assert pick_route({DENSE: 1.0, CC: 0.9, CRT: 0.8}) == CRT
    assert pick_route({CC: 2.0, CRT: 3.0}) == CC  # no dense time: the fastest
    assert pick_route({DENSE: 1.0}) == DENSE
    assert pick_route({DENSE: 1.0, CC: math.nan, CRT: None}) == DENSE  # failed timings ignored


def test_no_usable_time_is_an_error():
    with pytest.raises(ValueError, match="no route"):
        pick_route({CC: math.nan})


def test_nearest_route_on_a_log_scale():
    decided = {16: DENSE, 1024: CC, 4096: CRT}
    assert nearest_route(1, decided) == DENSE
    assert nearest_route(100, decided) == DENSE  # log2: 100 is nearer 16 than 1024
    assert nearest_route(300, decided) == CC
    assert nearest_route(2048, decided) == CRT  # a tie goes to the larger count
    assert nearest_route(10**6, decided) == CRT
    assert nearest_route(5, {}) is None


def test_decode_route_reads_the_sparse_weight_and_competes():
    from explorer.gpu.routes.dispatch import DECODE, DENSE, Route, nearest_route, pick_route

    assert repr(DECODE) == "Route(decode)" and DECODE.row_major and DECODE.sparse_weight
    assert not DENSE.sparse_weight
    cc = Route("sparse", "cc")
    assert pick_route({DENSE: 1.0, cc: 2.0, DECODE: 0.99}) == DENSE  # within the margin
    assert pick_route({DENSE: 1.0, cc: 2.0, DECODE: 0.6}) == DECODE
    assert pick_route({DENSE: 1.0, cc: 0.5, DECODE: 0.6}) == cc
    assert nearest_route(4, {16: DECODE, 4096: cc}) == DECODE
    with pytest.raises(ValueError, match="expected dense, sparse or decode"):
        Route("gemv")


def test_by_the_wall_clock_a_gpu_slower_route_is_never_taken():
    sparse = Route("sparse", "cc")
    gpu = {DENSE: 0.010, sparse: 0.025, DECODE: 0.007}
    # the cuSPARSELt route wins the wall clock by 5%, the decode kernel by 3%: decode is also
    # faster on the GPU, so it is the one kept
    wall = {DENSE: 0.100, sparse: 0.095, DECODE: 0.097}
    assert Decision(gpu, wall).route("wall") == DECODE
    assert Decision(gpu, wall).route("gpu") == DECODE
    # without the decode route: dense, as a 5% wall win of a GPU-slower route is host noise
    two = {DENSE: 0.100, sparse: 0.095}
    assert Decision({DENSE: 0.010, sparse: 0.025}, two).route("wall") == DENSE
    # nor a large one: 11% faster by the wall clock at 2.1x dense's GPU time (the fused
    # q/k/v product of the 1B-like model at 16 tokens) stays dense
    large = {DENSE: 0.100, sparse: 0.089}
    assert Decision({DENSE: 0.010, sparse: 0.021}, large).route("wall") == DENSE
    # a route that is faster on the GPU too keeps its wall-clock win
    assert Decision({DENSE: 0.010, sparse: 0.009}, large).route("wall") == sparse
    # a route with no GPU time (it could not be captured) is judged by the wall clock alone
    assert Decision({DENSE: 0.010}, two).route("wall") == sparse


def test_a_decision_without_the_decode_routes_keeps_the_others_and_stays_unchanged():
    gpu = {DENSE: 0.010, CC: 0.009, DECODE: 0.006}
    wall = {DENSE: 0.030, DECODE: 0.020}
    found = Decision(gpu, wall)
    kept = found.without("decode")
    assert kept == Decision({DENSE: 0.010, CC: 0.009}, {DENSE: 0.030})
    assert kept.route("gpu") == CC and kept.route("wall") == DENSE
    assert found.gpu == {DENSE: 0.010, CC: 0.009, DECODE: 0.006}  # the source is untouched
    assert found.without("sparse") == Decision({DENSE: 0.010, DECODE: 0.006}, wall)
    assert Decision({DECODE: 0.006}, {}).without("decode") == Decision({}, {})
