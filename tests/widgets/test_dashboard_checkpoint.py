"""The dashboard on a user's own checkpoint folder, loaded by path with its text."""

from __future__ import annotations

import pytest

from explorer.widgets import Dashboard, MethodConfig

pytest.importorskip("transformers", reason="checkpoint folders need transformers (models extra)")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from explorer.models.tiny import sample_text, save_tiny_llama

    root = tmp_path_factory.mktemp("byo")
    text = root / "corpus.txt"
    text.write_text(sample_text())
    return save_tiny_llama(root / "my-model"), text


def test_a_checkpoint_folder_loads_by_path_and_prunes(folder):
    path, text = folder
    dash = Dashboard(str(path), text=text)
    assert dash.status.level == "ok", dash.status
    assert dash.tradeoff.metric == "perplexity"
    assert [p.label for p in dash.tradeoff.points] == ["dense"]
    assert "embed_tokens" not in " ".join(dash.layer_picker.names)
    head = dash.model.lm_head.weight.detach().clone()
    dash.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert dash.status.level == "ok", dash.status
    assert len(dash.tradeoff.points) == 2
    assert dash.model.lm_head.weight.equal(head)  # the output head is never pruned


def test_a_checkpoint_folder_without_its_text_is_a_status_error(folder):
    path, _ = folder
    dash = Dashboard(str(path))
    assert dash.status.level == "error"
    assert "text" in dash.status.text and str(path.name) in dash.status.text


def _measured_store(path, text, db):
    """A results file holding what a GPU sweep of the folder records for magnitude 2:4."""
    from explorer.results.model_speed import model_speed_row
    from explorer.results.store import ResultStore
    from explorer.sweeps import SweepConfig

    grid = SweepConfig.make(
        str(path), text=text, methods="magnitude", patterns="2:4", tokens="4096"
    )
    (cell,) = [c for c in grid.cells() if c.kind == "model-speed" and c.config["of"] == "prune"]
    assert cell.config["model"] == str(path.resolve())  # a sweep names the folder by its path
    row = model_speed_row(cell.config, 4096, "eager", {"dense_ms": 3.0, "sparse_ms": 2.0})
    with ResultStore(db) as store:
        store.record(**row, provenance={"gpu": "NVIDIA H100"})
    return db


def test_a_sweeps_measurement_of_the_folder_draws_its_run_as_measured(
    folder, tmp_path, monkeypatch
):
    from explorer.results.store import ResultStore

    path, text = folder
    db = _measured_store(path, text, tmp_path / "results.db")
    monkeypatch.chdir(
        path.parent
    )  # a relative path finds the same rows as the sweep's absolute one
    dash = Dashboard(f"./{path.name}", text=text, store=ResultStore(db))
    dash.run(MethodConfig("magnitude", "2:4"), wait=True)
    point = dash.tradeoff.points[-1]
    assert (point.speed_source, point.speed_note) == (
        "measured-model",
        "measured, eager, 4096 tokens",
    )
    assert "1.50x (measured, eager, 4096 tokens)" in dash.status.text, dash.status
    # another method was not measured: an estimate, never this row
    dash.run(MethodConfig("random", "2:4"), wait=True)
    assert dash.tradeoff.points[-1].speed_source != "measured-model"


def test_the_served_page_takes_its_checkpoint_text_and_results_from_the_environment(
    folder, tmp_path
):
    from explorer.widgets.dashboard import PAGE_ENV, page_options

    path, text = folder
    db = _measured_store(path, text, tmp_path / "results.db")
    assert page_options(environ={}) == {"model": "minilm"}
    assert page_options("digits-mlp", environ={PAGE_ENV["model"]: ""}) == {"model": "digits-mlp"}
    env = {PAGE_ENV["model"]: str(path), PAGE_ENV["text"]: str(text), PAGE_ENV["db"]: str(db)}
    options = page_options("minilm", environ=env)
    store = options.pop("store")
    assert options == {"model": str(path), "text": str(text)}
    assert store.readonly and store.source == "local"  # the page reads it, never writes it
    dash = Dashboard(**options, store=store)
    assert dash.bundle.name == f"{path.name} (LlamaForCausalLM)"
    assert "model.layers.1.mlp.down_proj" in dash.layer_picker.names
    dash.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert dash.tradeoff.points[-1].speed_note == "measured, eager, 4096 tokens"
    with pytest.raises(FileNotFoundError, match="SPARSITY_EXPLORER_DB"):
        page_options(environ={PAGE_ENV["db"]: str(tmp_path / "missing.db")})
