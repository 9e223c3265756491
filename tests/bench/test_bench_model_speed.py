"""The whole-model timing on a CPU: a fake timer stands in for the GPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from explorer.bench.model_speed import ModelSpeedResult, measure_model_speed
from explorer.bench.model_timer import CudaModelTimer, inputs_at
from explorer.gpu.swap.sparsify_report import LayerTiming, SparsifyReport
from explorer.results.model_speed import measured_speed
from explorer.results.store import ResultStore


class FakeTimer:
    """Dense forwards take 10 ms, sparse ones 8 ms; the dense GPU is busy 42% of the time."""

    def __init__(self, graphs_fail: bool = False):
        self.graphs_fail = graphs_fail
        self.calls: list[tuple] = []

    def unavailable(self):
        return None

    def device_name(self):
        return "Fake GPU"

    def place(self, model, dtype):
        return model.eval()

    def place_inputs(self, inputs, dtype):
        return inputs

    def sparsify(self, model, mode, tokens, filter_fn):
        self.calls.append(("sparsify", mode, tokens))
        model.sparse = True
        report = SparsifyReport(mode=mode)
        report.swapped.append(("0", (64, 64)))
        report.skipped.append(("2", "shape 10x64 is off the alignment rule"))
        for n in tokens:
            report.timings.append(LayerTiming("0", (64, 64), n, 4.0, 2.0, "sparse", "gpu"))
            report.timings.append(LayerTiming("0", (64, 64), n, 5.0, 3.0, "sparse", "wall"))
        return report

    def forward_ms(self, model, inputs, mode):
        self.calls.append(("forward", getattr(model, "sparse", False), mode))
        if mode == "graphs" and self.graphs_fail:
            mode = "eager"
        return mode, 8.0 if getattr(model, "sparse", False) else 10.0

    def gpu_busy(self, model, inputs):
        return 0.42

    def layer_estimate(self, report, tokens, mode, dtype):
        return report.layer_estimate(tokens, clock="gpu" if mode == "graphs" else "wall")


def _model():
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def test_dense_and_sparse_times_give_the_ratio_busy_share_and_ceiling():
    model = _model()
    before = [p.clone() for p in model.parameters()]
    timer = FakeTimer()
    result = measure_model_speed(model, torch.randn(4, 64), tokens=(128, 16), timer=timer)
    assert result.measured and result.gpu == "Fake GPU"
    assert [s.tokens for s in result.speeds] == [128, 16]
    assert [s.speedup for s in result.speeds] == [1.25, 1.25]
    assert result.speeds[0].dense_gpu_busy == 0.42 and result.speeds[0].host_bound
    # ceiling: dense 10 ms with the layers' 4 ms (GPU clock, graphs) replaced by 2 ms
    assert result.ceilings[0] == pytest.approx(10.0 / 8.0)
    assert result.speeds[0].layer_estimate == pytest.approx(2.0)
    assert ("sparsify", "graphs", (128, 16)) in timer.calls
    assert not hasattr(model, "sparse")  # the model itself was not changed
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert repr(result) == (
        "ModelSpeedResult(graphs, float16: 128 tokens 1.25x (ceiling 1.25x), 16 tokens 1.25x "
        "(ceiling 1.25x), dense GPU busy 42%; 1 layers sparse, 1 dense)"
    )
    html = result._repr_html_()
    assert "speedup (measured)" in html and "1.25x" in html and "Fake GPU" in html


def test_the_copy_is_sparsified_for_the_counts_it_serves_and_timed_at_those_asked():
    timer = FakeTimer()
    result = measure_model_speed(
        _model(), torch.randn(4, 64), tokens=16, timer=timer, sparsify_for=(16, 4096)
    )
    assert ("sparsify", "graphs", (4096, 16)) in timer.calls
    assert [s.tokens for s in result.speeds] == [16]


def test_a_graph_that_cannot_be_captured_is_timed_eager_and_says_so():
    result = measure_model_speed(
        _model(), torch.randn(4, 64), tokens=32, timer=FakeTimer(graphs_fail=True)
    )
    assert result.speeds[0].mode == "eager" and "(timed eager)" in repr(result)
    (row,) = result.rows({"model": "m"})
    assert row["config"]["mode"] == "graphs" and row["metrics"]["timed_as"] == "eager"
    assert measured_speed([_as_row(row)]).label == "measured, eager, 32 tokens"


def _as_row(entry, source="local"):
    from explorer.results.store.table import Row

    return Row(
        1,
        entry["kind"],
        entry["status"],
        entry["error"],
        None,
        None,
        "2026-01-01",
        entry["config"],
        entry["metrics"],
        {"gpu": "Fake GPU"},
        source,
    )


def test_the_stored_row_has_the_fields_and_provenance():
    store = ResultStore(":memory:")
    config = {"model": "m", "method": "magnitude", "pattern": "2:4", "layers": "all"}
    measure_model_speed(
        _model(),
        torch.randn(4, 64),
        tokens=4096,
        mode="compile",
        timer=FakeTimer(),
        store=store,
        config=config,
    )
    (row,) = store.query("model-speed")
    assert row.status == "ok" and row.error is None
    assert row.config["tokens"] == 4096 and row.config["mode"] == "compile"
    assert row.config["dtype"] == "float16" and row.config["method"] == "magnitude"
    assert row.metrics["speedup"] == pytest.approx(1.25)
    assert row.metrics["dense_ms"] == 10.0 and row.metrics["sparse_ms"] == 8.0
    assert row.metrics["tokens_timed"] == 4096 and row.metrics["timed_as"] == "compile"
    assert row.metrics["dense_gpu_busy"] == 0.42 and row.metrics["host_bound"] is True
    assert row.metrics["ceiling"] == pytest.approx(10.0 / 8.0)  # wall clock: 5 -> 3 ms
    assert "torch" in row.provenance and "gpu" in row.provenance and "time" in row.provenance
    speed = measured_speed(store.query(), tokens=4096, model="m")
    assert speed.label == "measured, compile, 4096 tokens" and speed.speedup == 1.25


class NoGpu(FakeTimer):
    def unavailable(self):
        return "no CUDA GPU here: a model's speed needs one"


def test_without_a_gpu_the_result_and_the_rows_say_why():
    store = ResultStore(":memory:")
    result = measure_model_speed(
        _model(),
        torch.randn(4, 64),
        tokens=(16, 64),
        timer=NoGpu(),
        store=store,
        config={"model": "m"},
    )
    assert not result.measured
    assert repr(result) == (
        "ModelSpeedResult(no speed, graphs: no CUDA GPU here: a model's speed needs one)"
    )
    assert "no CUDA GPU" in result._repr_html_()
    rows = store.query("model-speed")
    assert [(r.status, r.config["tokens"]) for r in rows] == [("skipped", 16), ("skipped", 64)]
    assert all("no CUDA GPU" in r.error for r in rows)
    assert measured_speed(rows) is None


def test_the_default_timer_says_no_cuda_gpu_on_a_cpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    result = measure_model_speed(_model(), torch.randn(4, 64), tokens=16)
    assert "no CUDA GPU" in result.reason


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"mode": "fast"},
            r"speed mode 'fast' unknown; expected one of eager, compile, graphs\. Hint",
        ),
        ({"dtype": "float32"}, r"dtype 'float32' .* expected one of float16, bfloat16\. Hint"),
        ({"tokens": (0,)}, r"tokens=\(0,\): expected positive"),
        ({"sparsify_for": ()}, r"sparsify_for=\(\): expected positive token counts"),
        ({"sparsify_for": (16, -1)}, r"sparsify_for=\(16, -1\): expected positive"),
    ],
)
def test_bad_arguments_name_the_value_the_choices_and_a_hint(kwargs, match):
    with pytest.raises(ValueError, match=match):
        measure_model_speed(_model(), torch.randn(4, 64), timer=FakeTimer(), **kwargs)


def test_inputs_at_resizes_ids_and_features():
    ids = {"input_ids": torch.arange(20).reshape(2, 10), "attention_mask": torch.ones(2, 10)}
    out = inputs_at(ids, 35)
    assert out["input_ids"].shape == (4, 10) and torch.equal(
        out["input_ids"][2], ids["input_ids"][0]
    )
    assert inputs_at(torch.randn(3, 5), 7).shape == (7, 5)
    assert inputs_at((torch.randn(2, 5),), 4)[0].shape == (4, 5)
    with pytest.raises(ValueError, match="cannot resize"):
        inputs_at({"x": 1}, 4)


def test_result_and_timer_reprs_are_one_line():
    assert "\n" not in repr(ModelSpeedResult("eager", "float16", (1,), reason="x"))
    assert repr(CudaModelTimer()) == "CudaModelTimer()"
