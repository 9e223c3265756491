"""A sweep on a GPU times the model it pruned: a tiny LLaMA-like model, magnitude 2:4."""

from __future__ import annotations

import pytest
import torch

from explorer.bench.model_speed import measure_model_speed
from explorer.results.model_speed import measured_speed
from explorer.results.store import ResultStore
from explorer.sweeps import sweep

pytestmark = pytest.mark.gpu
pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.mark.parametrize("mode", ["graphs", "eager"])
def test_sweep_of_a_tiny_llama_records_a_positive_model_speed(tmp_path, mode):
    from explorer.models.tiny import sample_text, save_tiny_llama

    folder = save_tiny_llama(tmp_path / "llama")
    (tmp_path / "corpus.txt").write_text(sample_text(400), encoding="utf-8")
    db = tmp_path / "r.db"
    result = sweep(
        str(folder),
        methods="magnitude",
        patterns="2:4",
        tokens="256,16",
        text=tmp_path / "corpus.txt",
        db=db,
        progress=False,
        calibration_samples=4,
        speed_mode=mode,
    )
    assert result.failed == 0, result
    with ResultStore(db) as store:
        rows = store.query(sweep_id=result.sweep_id)
    (prune,) = rows.where(kind="prune", status="ok")
    timed = [r for r in rows.where(kind="model-speed") if r.config["of"] == "prune"]
    assert sorted(r.config["tokens"] for r in timed) == [16, 256]
    for row in timed:
        assert row.status == "ok", row.error
        assert row.config["of_cell"] == prune.cell_key and row.config["mode"] == mode
        assert row.metrics["speedup"] > 0 and row.metrics["dense_ms"] > 0
        assert row.provenance["gpu"] == torch.cuda.get_device_name()
    speed = measured_speed(rows, of_cell=prune.cell_key, tokens=256)
    assert speed is not None and speed.speedup > 0 and f"{speed.tokens} tokens" in speed.label


def test_measure_model_speed_on_a_pruned_mlp_in_every_mode():
    from gpu_helpers import mask24

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
    )
    with torch.no_grad():
        for layer in (model[0], model[2]):
            layer.weight.copy_(mask24(layer.weight))
    for mode in ("eager", "compile", "graphs"):
        result = measure_model_speed(model, torch.randn(8, 1024), tokens=(2048,), mode=mode)
        assert result.measured and result.speeds[0].speedup > 0, result
        assert result.speeds[0].tokens == 2048 and result.gpu
        (row,) = result.rows({"model": "mlp"})
        assert row["status"] == "ok" and row["config"]["mode"] == mode
