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
