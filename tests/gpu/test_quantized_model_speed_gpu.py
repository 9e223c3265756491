"""A quantized model timed whole on a GPU: a pruned MLP in every mode, and a sweep's joint cell."""

from __future__ import annotations

import pytest
import torch

from explorer.bench.quantized_model_speed import measure_quantized_speed
from explorer.results.quantized_points import quantized_points
from explorer.results.store import ResultStore
from explorer.sweeps import sweep

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.mark.parametrize("precision", ["int4", "int8-weights", "float8_e4m3fn"])
def test_a_pruned_mlp_is_timed_three_ways_in_every_mode(precision):
    from gpu_helpers import mask24

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
    )
    with torch.no_grad():
        for layer in (model[0], model[2]):
            layer.weight.copy_(mask24(layer.weight))
    for mode in ("eager", "compile", "graphs"):
        result = measure_quantized_speed(model, torch.randn(8, 1024), precision, (16,), mode)
        assert result.measured and result.converted == 2 and result.gpu, result
        (run,) = result.runs
        assert min(run.bf16_ms, run.dense_ms, run.sparse_ms) > 0 and run.tokens == 16
        dense, sparse = result.rows({"model": "mlp"})
        assert dense["config"]["mode"] == sparse["config"]["mode"] == run.mode
        assert sparse["metrics"]["speedup_over_same"] == pytest.approx(run.over_same)
    assert next(model.parameters()).device.type == "cpu"  # the model itself stays where it was


def test_a_sweeps_joint_int4_cell_is_timed_and_drawn_at_its_speed(tmp_path):
    pytest.importorskip("transformers")
    from explorer.models.tiny import sample_text, save_tiny_llama

    folder = save_tiny_llama(tmp_path / "llama")
    (tmp_path / "corpus.txt").write_text(sample_text(400), encoding="utf-8")
    db = tmp_path / "r.db"
    result = sweep(
        str(folder),
        methods="sparsegpt",
        patterns="2:4",
        tokens="64,16",
        text=tmp_path / "corpus.txt",
        db=db,
        progress=False,
        calibration_samples=4,
        quantize="int4",
        group_size=64,
    )
    assert result.failed == 0, result
    with ResultStore(db) as store:
        rows = store.query(sweep_id=result.sweep_id)
    (joint,) = rows.where(kind="prune", quant="int4")
    timed = rows.where(kind="bench-models", status="ok")
    assert sorted((r.config["pattern"], r.config["tokens"]) for r in timed) == [
        ("2:4", 16),
        ("2:4", 64),
        ("dense", 16),
        ("dense", 64),
    ]
    for row in timed:
        assert row.config["of_cell"] == joint.cell_key and row.metrics["speedup_over_bf16"] > 0
        assert row.provenance["gpu"] == torch.cuda.get_device_name()
    (point,) = [p for p in quantized_points(rows, tokens=16) if p.pattern == "2:4"]
    assert point.speedup > 0 and point.speedup_same > 0 and point.mode == "graphs"
