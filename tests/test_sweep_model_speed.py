"""Sweeps measure what they prune: model-speed cells, their rows, resume and the CLI checks."""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

import pytest
import torch

from explorer.bench import model_speed as bench_model_speed
from explorer.bench import model_timer
from explorer.bench import quantized_model_speed as bench_quantized_speed
from explorer.cli import main
from explorer.results.model_speed import measured_speed
from explorer.results.quantized_points import quantized_points
from explorer.results.store import ResultStore
from explorer.sweeps import SweepConfig, cells, sweep

GRID = {"methods": "magnitude", "patterns": "2:4,4:8", "tokens": "16,64"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from explorer.models.tiny import sample_text, save_tiny_llama

    pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("tiny-speed")
    save_tiny_llama(root / "llama")
    (root / "corpus.txt").write_text(sample_text(400), encoding="utf-8")
    return root


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def _sweep(tiny, db, **kwargs):
    return sweep(
        str(tiny / "llama"),
        text=tiny / "corpus.txt",
        db=db,
        progress=False,
        calibration_samples=4,
        **{**GRID, **kwargs},
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU rows; tests/gpu times")
def test_cpu_sweep_of_a_tiny_llama_records_accuracy_and_why_there_is_no_speed(tiny, tmp_path):
    result = _sweep(tiny, tmp_path / "r.db", speed_mode="eager")
    assert result.failed == 0 and result.total == 1 + 2 + 2 + 3  # dense, 2 prune, 2 speed, 3 timed
    rows = result.rows()
    assert len(rows.where(kind="prune", status="ok")) == 2 and len(rows.where(kind="dense")) == 1
    timed = rows.where(kind="model-speed")
    assert len(timed) == 3 * 2 and all(r.status == "skipped" for r in timed)
    by = {(r.config["of"], r.pattern, r.config["tokens"]): r for r in timed}
    for tokens in (16, 64):
        row = by[("prune", "2:4", tokens)]
        assert "no CUDA GPU" in row.error and row.config["mode"] == "eager"
        assert "no sparse kernel for pattern '4:8'" in by[("prune", "4:8", tokens)].error
        assert "dense baseline" in by[("dense", None, tokens)].error
    # each model-speed row names the cell whose accuracy row it belongs to
    prune_keys = {r.cell_key for r in rows.where(kind="prune")}
    assert {r.config["of_cell"] for r in timed if r.config["of"] == "prune"} == prune_keys


class FakeTimer:
    """Stands in for the GPU: dense 3 ms, sparse 2 ms a forward."""

    def unavailable(self):
        return None

    def device_name(self):
        return "Fake GPU"

    def place(self, model, dtype):
        return model

    def place_inputs(self, inputs, dtype):
        return inputs

    #: the precision and scales each ``sparsify`` was given (quantized cells)
    quantized: ClassVar[list] = []

    def sparsify(self, model, mode, tokens, filter_fn, dtype=None, scales=None):
        from explorer.gpu.swap.sparsify_report import SparsifyReport

        if dtype is not None:
            FakeTimer.quantized.append((dtype, sorted(scales or {})))
        model.sparse = True
        return SparsifyReport(mode=mode)

    def dense_at(self, model, precision, filter_fn, scales=None):
        """The precision dense copy runs 2.5 ms a forward."""
        import copy

        from explorer.gpu.swap.precision_dense import PrecisionDense

        out = copy.deepcopy(model)
        out.low_dense = True
        return out, PrecisionDense(precision)

    def forward_ms(self, model, inputs, mode):
        if getattr(model, "low_dense", False):
            return mode, 2.5
        return mode, 2.0 if getattr(model, "sparse", False) else 3.0

    def gpu_busy(self, model, inputs):
        return 0.9

    def layer_estimate(self, report, tokens, mode, dtype):
        return None


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(model_timer, "CudaModelTimer", FakeTimer)
    monkeypatch.setattr(bench_model_speed, "CudaModelTimer", FakeTimer)
    monkeypatch.setattr(bench_quantized_speed, "CudaModelTimer", FakeTimer)
    FakeTimer.quantized = []


def test_a_sweep_on_a_gpu_links_each_timing_to_its_prune_row(tiny, tmp_path, fake_gpu):
    result = _sweep(tiny, tmp_path / "r.db")
    rows = result.rows()
    timed = rows.where(kind="model-speed", status="ok")
    assert sorted((r.method, r.config["tokens"]) for r in timed) == [
        ("magnitude", 16),
        ("magnitude", 64),
    ]
    (prune,) = rows.where(kind="prune", pattern="2:4")
    for row in timed:
        assert row.config["of_cell"] == prune.cell_key and row.config["mode"] == "graphs"
        assert row.metrics["speedup"] == pytest.approx(1.5) and "torch" in row.provenance
    speed = measured_speed(rows, of_cell=prune.cell_key, tokens=64)
    assert speed.label == "measured, graphs, 64 tokens" and speed.speedup == pytest.approx(1.5)


def test_a_jointly_quantized_cell_is_timed_at_its_precision_and_drawn_there(
    tiny, tmp_path, fake_gpu
):
    result = _sweep(
        tiny, tmp_path / "r.db", methods="sparsegpt", patterns="2:4", quantize="int4", group_size=64
    )
    assert result.failed == 0, result
    rows = result.rows()
    (joint,) = rows.where(kind="prune", quant="int4")
    quantized = rows.where(kind="bench-models")
    assert sorted((r.config["pattern"], r.config["tokens"]) for r in quantized) == [
        ("2:4", 16),
        ("2:4", 64),
        ("dense", 16),
        ("dense", 64),
    ]
    for row in quantized:
        c = row.config
        assert c["of_cell"] == joint.cell_key and c["precision"] == "int4"
        assert c["model"] == joint.config["model"] and c["group_size"] == 64
    # the scales the joint pruning recorded reach sparsify, one set per layer pruned
    ((dtype, layers),) = set((d, tuple(n)) for d, n in FakeTimer.quantized)
    assert dtype == "int4" and len(layers) == 14  # 2 blocks x (q, k, v, o, gate, up, down)
    # the unquantized prune cell is timed as before: dense 3 ms against sparse 2 ms
    plain = [r for r in rows.where(kind="model-speed", status="ok") if r.config["of"] == "prune"]
    assert {r.config["of_cell"] for r in plain} == {
        r.cell_key for r in rows.where(kind="prune", quant=None)
    }
    # the joint cell's point on the trade-off plot: over bf16 3/2, over int4 dense 2.5/2
    points = {p.pattern: p for p in quantized_points(rows, tokens=64)}
    point = points["2:4"]
    assert point.speedup == pytest.approx(1.5) and point.speedup_same == pytest.approx(1.25)
    assert point.score == joint.metrics[joint.metrics["metric"]]
    # int4 dense (GPTQ, nothing pruned) at the dense rows' speed: bf16 3 ms over int4 2.5 ms
    (gptq,) = rows.where(kind="dense", quant="int4")
    assert points["dense"].speedup == pytest.approx(1.2) and points["dense"].speedup_same == 1.0
    assert points["dense"].score == gptq.metrics[gptq.metrics["metric"]]


def test_resume_after_an_interrupted_model_speed_cell_records_each_row_once(
    tiny, tmp_path, fake_gpu, monkeypatch
):
    db = tmp_path / "r.db"
    real = cells.run_cell

    def interrupted(config, cancel=None):
        if config["cell"] == "model-speed" and config.get("pattern") == "2:4":
            raise KeyboardInterrupt  # Ctrl-C in the middle of the timing
        return real(config, cancel)

    monkeypatch.setattr(cells, "run_cell", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _sweep(tiny, db)
    monkeypatch.setattr(cells, "run_cell", real)
    again = _sweep(tiny, db)
    assert again.failed == 0 and again.already_done >= 3
    with ResultStore(db) as store:
        rows = store.query(sweep_id=again.sweep_id)
    per_cell = Counter(r.cell_key.split("#")[0] for r in rows)
    config = SweepConfig.make(
        str(tiny / "llama"), text=tiny / "corpus.txt", calibration_samples=4, **GRID
    )
    expected = {c.key: 1 for c in config.cells() if c.kind in ("dense", "prune")}
    expected |= {c.key: 2 for c in config.cells() if c.kind == "model-speed"}  # 2 token counts
    assert {k: v for k, v in per_cell.items() if k in expected} == expected
    assert len([r for r in rows if r.kind == "model-speed" and r.status == "ok"]) == 2


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--speed-mode", "fast"], ["speed mode 'fast' unknown", "eager, compile, graphs", "Hint"]),
        (["--tokens", "1024,12x"], ["'12x' is not a token count", "positive whole", "Hint"]),
        (["--tokens", "0"], ["'0' is not a token count", "--tokens 1024,4096", "Hint"]),
    ],
)
def test_bad_speed_mode_or_tokens_are_one_line_before_any_database(
    args, expected, tmp_path, capsys
):
    db = tmp_path / "r.db"
    assert main(["sweep", *args, "--db", str(db), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(e in err for e in expected), err
    assert not db.exists()


def test_speed_mode_is_part_of_the_grid_and_a_default_sweep_keeps_its_id():
    default = SweepConfig.make("digits-mlp")
    eager = SweepConfig.make("digits-mlp", speed_mode="eager")
    assert default.speed_mode == "graphs" and eager.sweep_id != default.sweep_id
    timed = [c for c in eager.cells() if c.kind == "model-speed"]
    assert {c.config["speed"]["mode"] for c in timed} == {"eager"}
    assert SweepConfig.from_json(eager.to_json()) == eager
