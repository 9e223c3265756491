"""Route choice's pure parts (CPU): the wall-clock routes open to a fused block's part."""

from __future__ import annotations

from explorer.gpu.modules.route_choice import RouteChoice, wall_among
from explorer.gpu.routes.dispatch import DECODE, DENSE, Decision, Route

CC, CR = Route("sparse", "cc"), Route("sparse", "cr")
CR_ROWS = Route("sparse", "cr", transpose=True)


def _decision():
    gpu = {DENSE: 0.040, CC: 0.031, CR: 0.029, CR_ROWS: 0.033, DECODE: 0.035}
    wall = {DENSE: 0.050, CC: 0.036, CR: 0.034, CR_ROWS: 0.040, DECODE: 0.045}
    return Decision(gpu, wall)


def test_a_block_part_chooses_among_the_routes_its_program_makes_by_the_wall_clock():
    found = _decision()
    assert found.route("wall") == CR  # alone, the transposed output is the fastest
    cut = wall_among(found, lambda r: r in (CC, DECODE))
    assert set(cut.wall) == {DENSE, CC, DECODE}  # dense always stays a candidate
    assert cut.route("wall") == CC
    assert cut.gpu == found.gpu and cut.route("gpu") == CR  # CUDA graphs: any route


def test_a_cut_never_leaves_dense_alone():
    found = _decision()
    assert wall_among(found, lambda r: False) is found  # no 2:4 route made: nothing cut
    assert wall_among(found, lambda r: True) is found  # every route made: nothing to cut
    assert wall_among(Decision({DENSE: 1.0}, {DENSE: 1.0}), lambda r: True).route("wall") == DENSE


def test_a_cut_that_would_leave_only_dense_is_not_made():
    gpu = {DENSE: 0.030, CC: 0.032, CR: 0.020}
    wall = {DENSE: 0.050, CC: 0.040, CR: 0.045}
    found = Decision(gpu, wall)
    # CC is faster by the wall clock but slower on the GPU, so never taken: cutting CR would
    # leave dense, and the layer keeps its sparse verdict instead
    assert Decision(gpu, {DENSE: 0.050, CC: 0.040}).route("wall") == DENSE
    assert wall_among(found, lambda r: r == CC) is found
    assert found.route("wall") == CR
    # with dense the verdict before the cut, a cut that keeps it dense is made
    slow = Decision({DENSE: 0.030, CC: 0.032, CR: 0.031}, wall)
    assert wall_among(slow, lambda r: r == CC).route("wall") == DENSE


def test_only_a_block_marks_its_parts():
    assert RouteChoice.block_part is False
