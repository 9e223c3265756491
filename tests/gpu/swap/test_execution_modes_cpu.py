"""The execution-mode logic that needs no GPU: clocks, decisions, the report's whole-model
figures, the launcher's argument slots."""

from __future__ import annotations

import ctypes

import pytest
import torch

from explorer.gpu.routes.dispatch import (
    DECODE,
    DENSE,
    Decision,
    Route,
    check_mode,
    clock_for,
    dense_needed,
)
from explorer.gpu.swap.model_timing import ModelSpeed, input_tokens
from explorer.gpu.swap.sparsify_report import LayerTiming, SparsifyReport

SPARSE = Route("sparse", "cc", 17)


def test_every_mode_has_a_clock_and_unknown_modes_name_the_choices():
    assert {m: clock_for(m) for m in ("eager", "compile", "graphs", "auto")} == {
        "eager": "wall",
        "compile": "wall",
        "graphs": "gpu",
        "auto": "wall",
    }
    with pytest.raises(ValueError, match=r"'reduce-overhead' unknown.*graphs"):
        check_mode("reduce-overhead")


@pytest.mark.parametrize(
    ("verdicts", "needed"),
    [
        # every clock chose sparse, but a default-mode compile runs decode sizes dense
        ({"gpu": False, "wall": False, "compile": True}, {"auto", "compile"}),
        ({"gpu": True, "wall": False, "compile": False}, {"auto", "graphs"}),
        ({"gpu": False, "wall": True, "compile": False}, {"auto", "eager", "compile"}),
        ({"gpu": False, "wall": False, "compile": False}, set()),
    ],
)
def test_the_dense_weight_stays_where_a_verdict_of_the_mode_runs_it(verdicts, needed):
    sparse_elsewhere = {"gpu": False, "wall": False, "compile": False}
    for mode in ("auto", "eager", "compile", "graphs"):
        assert dense_needed(mode, [sparse_elsewhere, verdicts]) == (mode in needed), mode
    assert not dense_needed("auto", [])
    with pytest.raises(ValueError, match="unknown"):
        dense_needed("notebook", [verdicts])


def test_a_route_faster_on_the_gpu_but_slower_on_the_host_is_not_taken_by_wall_time():
    found = Decision(gpu={DENSE: 0.010, SPARSE: 0.006}, wall={DENSE: 0.025, SPARSE: 0.031})
    assert found.route("gpu") == SPARSE
    assert found.route("wall") == DENSE
    assert "gpu: sparse cc alg 17" in repr(found) and "wall: dense" in repr(found)


def test_a_decision_without_graph_times_falls_back_to_wall_times():
    found = Decision(gpu={}, wall={DENSE: 0.02, DECODE: 0.01})
    assert found.route("gpu") == DECODE and found.times("gpu") == found.wall


def test_the_report_puts_the_measurement_where_an_estimate_would_mislead():
    rep = SparsifyReport(mode="eager")
    rep.timings = [
        LayerTiming("l", (64, 64), 16, 1.36, 1.0, "sparse cc default", "wall"),
        LayerTiming("l", (64, 64), 4096, 2.0, 1.0, "sparse cc default", "wall"),
    ]
    rep.model_speeds = [ModelSpeed(16, "eager", 10.0, 24.4, 0.35, 1.36)]
    text = repr(rep)
    assert "model at 16 tokens 0.41x measured (eager)" in text
    assert "dense host-bound at 16 tokens" in text
    assert "layers at 16 tokens" not in text  # no 1.36x estimate beside a 0.41x measurement
    assert "layers at 4096 tokens 2.00x (estimate)" in text
    assert "mode=eager" in text
    html = rep._repr_html_()
    assert "whole model" in html and "reduce-overhead" in html  # the host-bound advice


def test_layer_estimates_keep_their_clocks_apart():
    rep = SparsifyReport()
    rep.timings = [
        LayerTiming("l", (64, 64), 16, 2.0, 1.0, "sparse", "wall"),
        LayerTiming("l", (64, 64), 16, 1.0, 2.0, "dense", "gpu"),
    ]
    assert rep.layer_estimate(16, clock="wall") == (2.0, 1.0)
    assert rep.layer_estimate(16, clock="gpu") == (1.0, 1.0)
    assert "| wall |" in rep.timing_table() and "| gpu |" in rep.timing_table()


def test_model_speed_says_when_the_gpu_is_not_the_bottleneck():
    bound = ModelSpeed(16, "eager", 9.0, 9.2, 0.11)
    assert bound.host_bound and "CUDA graphs" in bound.advice()
    busy = ModelSpeed(4096, "graphs", 9.0, 7.5, 0.97)
    assert not busy.host_bound and busy.advice() == ""
    assert f"{busy.speedup:.2f}" == "1.20"


def test_tokens_of_example_inputs():
    assert input_tokens({"input_ids": torch.zeros(4, 1024, dtype=torch.long)}) == 4096
    assert input_tokens((torch.zeros(16, 1, 64),)) == 16
    with pytest.raises(ValueError, match="example_inputs"):
        input_tokens({"attention_mask": None})


def test_launcher_argument_kinds():
    from explorer.gpu.cuda.launch import Launcher, argument_slots

    assert [ctypes.sizeof(s) for s in argument_slots(("u64", "u32", "i32", "i64", "f32"))] == [
        8,
        4,
        4,
        8,
        4,
    ]
    with pytest.raises(ValueError, match=r"u16.*unknown"):
        Launcher(object(), ("u16",))


class _Kernel:
    """Stands in for a compiled kernel: only its driver handle is read."""

    ptr = 1234


def _recording_driver(seen: list):
    def launch(handle, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p * 3)).contents
        values = (
            ctypes.c_uint64.from_address(slots[0]).value,
            ctypes.c_int32.from_address(slots[1]).value,
            ctypes.c_int64.from_address(slots[2]).value,
        )
        seen.append((handle.value, (gx, gy, gz), (bx, by, bz), shared, stream, values))
        return 0

    return launch


def test_a_launch_writes_every_argument_or_only_the_changing_ones():
    from explorer.gpu.cuda.launch import Launcher

    seen: list = []
    launcher = Launcher(_Kernel(), ("u64", "i32", "i64"), driver=_recording_driver(seen))
    launcher.launch((2, 1, 1), (64, 1, 1), 0, 99, (2**40, -3, 2**35))
    assert seen[-1] == (1234, (2, 1, 1), (64, 1, 1), 0, 99, (2**40, -3, 2**35))
    fixed = Launcher(_Kernel(), ("u64", "i32", "i64"), fixed={1: 7}, driver=_recording_driver(seen))
    fixed.launch_changed((1, 1, 1), (32, 1, 1), 512, 5, (11, 13))
    assert seen[-1][-1] == (11, 7, 13)
    with pytest.raises(ValueError):
        fixed.launch_changed((1, 1, 1), (32, 1, 1), 0, 5, (11,))  # one value short


def test_a_refused_launch_names_the_cuda_error():
    from explorer.gpu.cuda.launch import Launcher, LaunchRefused

    launcher = Launcher(_Kernel(), ("u64",), driver=lambda *args: 201)
    with pytest.raises(LaunchRefused, match="CUDA error 201"):
        launcher.launch((1, 1, 1), (1, 1, 1), 0, 0, (0,))


def test_the_layer_estimate_counts_the_route_each_layer_runs():
    """A sparse route faster by the wall clock that the rules did not take (slower than dense on
    the GPU) adds nothing to the estimate: a report of layers all kept dense reads 1.00x."""
    report = SparsifyReport()
    report.timings = [
        LayerTiming("a", (64, 64), 16, 1.42, 1.0, "dense", "wall", 1.42),
        LayerTiming("b", (64, 64), 16, 1.0, 0.7, "dense", "wall"),
        LayerTiming("a", (64, 64), 4096, 2.0, 1.0, "sparse cr default", "wall", 1.6),
    ]
    assert report.layer_estimate(16) == (2.42, 2.42)
    assert report.layer_estimate(4096) == (2.0, 1.6)  # the route taken, not the fastest timed
    assert "layers at 16 tokens 1.00x (estimate)" in repr(report)
