"""The quantized whole-model timing on a CPU: a fake timer stands in for the GPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from explorer.bench.quantized_model_speed import (
    QuantizedModelSpeed,
    QuantizedRun,
    measure_quantized_speed,
)
from explorer.gpu.swap.precision_dense import PrecisionDense
from explorer.gpu.swap.sparsify_report import SparsifyReport
from explorer.results.quantized_points import quantized_points
from explorer.results.quantized_speed import quantized_speeds
from explorer.results.store import ResultStore

#: bf16 dense, dense at the precision, and 2:4 at it: median ms of one forward.
TIMES = {"bf16": 10.0, "dense": 5.0, "sparse": 4.0}


class FakeTimer:
    """bf16 dense 10 ms, the precision dense 5 ms, 2:4 at it 4 ms; records every call."""

    def __init__(self, graphs_fail: bool = False):
        self.graphs_fail = graphs_fail
        self.calls: list[tuple] = []

    def unavailable(self):
        return None

    def device_name(self):
        return "Fake GPU"

    def place(self, model, dtype):
        self.calls.append(("place", dtype))
        return model.eval()

    def place_inputs(self, inputs, dtype):
        return inputs

    def dense_at(self, model, precision, filter_fn, scales=None):
        self.calls.append(("dense_at", precision, scales))
        import copy

        out = copy.deepcopy(model)
        out.variant = "dense"
        return out, PrecisionDense(precision, ["0"], [("2", "shape 10x64 is off the tiles")])

    def sparsify(self, model, mode, tokens, filter_fn, dtype=None, scales=None):
        self.calls.append(("sparsify", mode, tokens, dtype, scales))
        model.variant = "sparse"
        report = SparsifyReport(mode=mode)
        report.swapped.append(("0", (64, 64)))
        report.notes.append("0: one note")
        return report

    def forward_ms(self, model, inputs, mode):
        variant = getattr(model, "variant", "bf16")
        self.calls.append(("forward", variant, mode))
        if mode == "graphs" and self.graphs_fail:
            mode = "eager"
        return mode, TIMES[variant]


def _model():
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def test_three_copies_are_timed_and_give_both_speedups():
    model = _model()
    before = [p.clone() for p in model.parameters()]
    timer = FakeTimer()
    result = measure_quantized_speed(model, torch.randn(4, 64), "int4", (16, 1), timer=timer)
    assert result.measured and result.gpu == "Fake GPU"
    assert [r.tokens for r in result.runs] == [16, 1]
    run = result.runs[0]
    assert (run.batch, run.seq) == (16, 1)
    assert run.over_same == pytest.approx(1.25) and run.over_bf16 == pytest.approx(2.5)
    assert run.dense_over_bf16 == pytest.approx(2.0)
    assert (result.swapped, result.converted) == (1, 1)
    assert result.notes == (
        "2: kept bf16 in the int4 dense copy (shape 10x64 is off the tiles)",
        "0: one note",
    )
    # everything in bfloat16, the 2:4 copy sparsified at the precision for every count at once
    assert ("place", torch.bfloat16) in timer.calls
    assert ("sparsify", "graphs", (16, 1), "int4", None) in timer.calls
    # per count: bf16 dense first, then the precision dense and 2:4 in the mode bf16 ran in
    forwards = [c[1] for c in timer.calls if c[0] == "forward"]
    assert forwards == ["bf16", "dense", "sparse"] * 2
    # the model itself was not changed
    assert not hasattr(model, "variant")
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert repr(result) == (
        "QuantizedModelSpeed(int4, graphs: 16 tokens 2:4 1.25x over int4 dense, 2.50x over bf16 "
        "(int4 dense 2.00x), 1 tokens 2:4 1.25x over int4 dense, 2.50x over bf16 (int4 dense "
        "2.00x); 1 layers 2:4, 1 dense at int4)"
    )
    html = result._repr_html_()
    assert "over int4 dense" in html and "Fake GPU" in html and "1.25x" in html


def test_token_ids_give_the_run_shape_and_a_graphs_fallback_is_recorded():
    ids = {"input_ids": torch.arange(16).reshape(2, 8), "attention_mask": torch.ones(2, 8)}

    class IdsModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, input_ids, attention_mask):
            return self.lin(attention_mask)

    result = measure_quantized_speed(IdsModel(), ids, "int8-weights", (32,), timer=FakeTimer(True))
    (run,) = result.runs
    assert (run.batch, run.seq, run.tokens) == (4, 8, 32) and run.mode == "eager"
    assert "(timed eager)" in repr(result)
    rows = result.rows({"model": "tiny", "of_cell": "abc", "group_size": 64, "dtype": "float32"})
    assert [r["config"]["pattern"] for r in rows] == ["dense", "2:4"]
    for row in rows:
        c = row["config"]
        assert (c["model"], c["precision"], c["mode"], c["batch"], c["seq"]) == (
            "tiny",
            "int8-weights",
            "eager",
            4,
            8,
        )
        assert c["of_cell"] == "abc" and c["group_size"] == 64 and c["dtype"] == "bfloat16"
    assert rows[1]["metrics"]["same_dense_ms"] == 5.0
    assert rows[1]["metrics"]["speedup_over_same"] == pytest.approx(1.25)


def test_scales_go_to_both_copies_and_fp8_refuses_them():
    scales = {"0": torch.ones(64, 1)}
    timer = FakeTimer()
    measure_quantized_speed(_model(), torch.randn(4, 64), "int4", 16, scales=scales, timer=timer)
    assert ("dense_at", "int4", scales) in timer.calls
    assert ("sparsify", "graphs", (16,), "int4", scales) in timer.calls
    with pytest.raises(ValueError, match="FP8 takes none"):
        measure_quantized_speed(
            _model(), torch.randn(4, 64), "float8_e4m3fn", 16, scales=scales, timer=FakeTimer()
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"precision": "int2"}, "precision 'int2' is not one a quantized model is timed in"),
        ({"precision": "bfloat16"}, "measure_model_speed"),
        ({"tokens": (0,)}, r"tokens=\(0,\): expected positive token counts"),
        ({"tokens": 16, "sparsify_for": (True,)}, "sparsify_for=.True,.: expected positive"),
        ({"tokens": 16, "sparsify_for": ()}, r"sparsify_for=\(\): expected positive"),
        ({"mode": "fast"}, "fast"),
    ],
)
def test_bad_arguments_name_the_value_before_anything_is_timed(kwargs, match):
    timer = FakeTimer()
    args = {"precision": "int4", **kwargs}
    with pytest.raises(ValueError, match=match):
        measure_quantized_speed(_model(), torch.randn(4, 64), timer=timer, **args)
    assert timer.calls == []


def test_without_a_gpu_the_rows_say_why_for_each_count():
    class NoGpu(FakeTimer):
        def unavailable(self):
            return "no CUDA GPU here"

    result = measure_quantized_speed(_model(), torch.randn(4, 64), "int4", (16, 1), timer=NoGpu())
    assert not result.measured
    assert repr(result) == "QuantizedModelSpeed(int4, no speed, graphs: no CUDA GPU here)"
    rows = result.rows({"model": "m"})
    assert [(r["kind"], r["status"], r["config"]["tokens"]) for r in rows] == [
        ("model-speed", "skipped", 16),
        ("model-speed", "skipped", 1),
    ]
    assert "no CUDA GPU here" in result._repr_html_()


def test_recorded_rows_put_the_models_quantized_points_at_their_measured_speed(tmp_path):
    store = ResultStore(tmp_path / "r.db")
    acc = {"metric": "perplexity", "perplexity": 48.5, "higher_is_better": False}
    config = {"model": "tiny", "method": "sparsegpt", "pattern": "2:4", "dtype": "float32"}
    store.record("prune", {**config, "quant": "int4", "group_size": 64}, acc)
    measure_quantized_speed(
        _model(),
        torch.randn(4, 64),
        "int4",
        16,
        timer=FakeTimer(),
        store=store,
        config={**config, "quant": "int4"},
    )
    rows = store.query()
    speeds = quantized_speeds(rows, model="tiny", precision="int4")
    assert [s.pattern for s in speeds[(16, "graphs")]] == ["dense", "2:4"]
    (point,) = quantized_points(rows)
    assert point.speedup == pytest.approx(2.5) and point.speedup_same == pytest.approx(1.25)
    assert point.tokens == 16 and point.mode == "graphs" and point.score == 48.5
    assert point.details["measured"] == "tiny 16x1: 2.50x / 1.25x"


def test_a_run_reads_well():
    run = QuantizedRun(16, 1, 16, "graphs", 2.0, 1.0, 0.8)
    res = QuantizedModelSpeed("float8_e4m3fn", "graphs", (16,), (run,), swapped=2, converted=2)
    assert "over FP8 dense" in repr(res) and "2 dense at FP8" in repr(res)
