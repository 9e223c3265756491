"""Bring your own checkpoint: tiny random LLaMA and BERT folders built offline in tmp folders."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from explorer.models import from_pretrained, load
from explorer.models.folder import inspect_folder, is_checkpoint_path
from explorer.models.tiny import sample_text, save_tiny_bert, save_tiny_llama
from explorer.pruning import prune


def _snapshot(folder):
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("byo")
    save_tiny_llama(root / "llama")
    save_tiny_bert(root / "bert")
    (root / "corpus.txt").write_text(sample_text(), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def llama(work):
    return from_pretrained(work / "llama", work / "corpus.txt", seq_len=64, progress=False)


def test_perplexity_is_finite_and_deterministic(work, llama, no_network):
    first = llama.evaluate()["perplexity"]
    assert math.isfinite(first) and first > 1
    assert llama.evaluate()["perplexity"] == first
    again = from_pretrained(work / "llama", work / "corpus.txt", seq_len=64, progress=False)
    assert again.evaluate()["perplexity"] == pytest.approx(first, rel=1e-6)
    assert llama.name == "llama (LlamaForCausalLM)" and llama.higher_is_better is False


def test_calibration_and_evaluation_windows_are_disjoint(llama):
    (cal_start, cal_end), (eval_start, eval_end) = (
        llama.options["calibration_tokens"],
        llama.options["eval_tokens"],
    )
    assert cal_start == 0 < cal_end <= eval_start < eval_end
    assert eval_end - eval_start == llama.options["n_eval"] * 64
    batches = llama.calibration(200, seed=1)
    windows = torch.cat([b["input_ids"] for b in batches])
    assert windows.shape[1] == 64 and len(windows) == cal_end // 64  # capped at the pool
    assert torch.equal(windows, torch.cat([b["input_ids"] for b in llama.calibration(200, 1)]))
    assert not torch.equal(windows, torch.cat([b["input_ids"] for b in llama.calibration(200, 2)]))
    assert "calibration tokens [0, " in llama.description


def test_filter_fn_skips_embeddings_and_lm_head(llama):
    names = llama.prunable
    assert len(names) == 14  # 7 Linears in each of 2 decoder layers
    assert all(n.startswith("model.layers.") for n in names)
    assert "lm_head" not in names
    modules = dict(llama.model.named_modules())
    assert not llama.filter_fn(modules["lm_head"], "lm_head")
    assert not llama.filter_fn(modules["model.embed_tokens"], "model.embed_tokens")


def test_tied_lm_head_is_never_selected(work, tmp_path):
    folder = shutil.copytree(work / "llama", tmp_path / "tied")
    config = json.loads((folder / "config.json").read_text())
    config["tie_word_embeddings"] = True
    (folder / "config.json").write_text(json.dumps(config))
    bundle = from_pretrained(folder, work / "corpus.txt", seq_len=64, progress=False)
    assert "lm_head" not in bundle.prunable and len(bundle.prunable) == 14


def test_pruning_and_calibrated_methods_run(work):
    bundle = from_pretrained(work / "llama", work / "corpus.txt", seq_len=64, progress=False)
    dense = bundle.evaluate()["perplexity"]
    result = prune(
        bundle.model,
        "wanda",
        "2:4",
        calibration=bundle.calibration(8),
        filter_fn=bundle.filter_fn,
        inplace=True,
        progress=False,
    )
    assert len(result.masks) == 14
    pruned = bundle.evaluate()["perplexity"]
    assert math.isfinite(pruned) and pruned != dense


def test_load_takes_a_path_and_the_folder_is_never_written(work, no_network):
    before = _snapshot(work / "llama")
    bundle = load(str(work / "llama"), text=str(work / "corpus.txt"), seq_len=64, progress=False)
    prune(bundle.model, "magnitude", "2:4", filter_fn=bundle.filter_fn, inplace=True)
    bundle.evaluate()
    assert _snapshot(work / "llama") == before
    assert is_checkpoint_path("./x") and not is_checkpoint_path("smollm2")


def test_encoder_cosine_to_dense(work):
    bundle = from_pretrained(work / "bert", work / "corpus.txt", n_eval=40, progress=False)
    assert bundle.name == "bert (BertModel)" and bundle.metric == "cosine_to_dense"
    assert bundle.evaluate()["cosine_to_dense"] == pytest.approx(1.0, abs=1e-5)
    assert len(bundle.prunable) == 12 and not any("pooler" in n for n in bundle.prunable)
    (_, cal_end), (eval_start, eval_end) = (
        bundle.options["calibration_sentences"],
        bundle.options["eval_sentences"],
    )
    assert cal_end == eval_start and eval_end - eval_start == 40
    prune(bundle.model, "magnitude", "2:4", filter_fn=bundle.filter_fn, inplace=True)
    assert bundle.evaluate()["cosine_to_dense"] < 0.9999
    assert "input_ids" in bundle.calibration(5)[0]


# ----------------------------------------------------------------------------- bad input
def _copy_without(work, tmp_path, *names):
    folder = shutil.copytree(work / "llama", tmp_path / "copy")
    for name in names:
        (folder / name).unlink()
    return folder


def _one_line(exc_info) -> str:
    message = str(exc_info.value)
    assert "\n" not in message
    return message


def test_not_a_folder(work):
    with pytest.raises(FileNotFoundError) as exc:
        from_pretrained(work / "corpus.txt", work / "corpus.txt")
    assert "is not a folder" in _one_line(exc) and "save_pretrained" in str(exc.value)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        from_pretrained(work / "nowhere", work / "corpus.txt")


def test_no_config(work, tmp_path):
    folder = _copy_without(work, tmp_path, "config.json")
    with pytest.raises(FileNotFoundError) as exc:
        from_pretrained(folder, work / "corpus.txt")
    assert "has no config.json" in _one_line(exc)


def test_no_weights(work, tmp_path):
    folder = _copy_without(work, tmp_path, "model.safetensors")
    with pytest.raises(FileNotFoundError) as exc:
        from_pretrained(folder, work / "corpus.txt")
    assert "no *.safetensors weights" in _one_line(exc) and "save_pretrained" in str(exc.value)


def test_no_tokenizer(work, tmp_path):
    folder = _copy_without(work, tmp_path, "tokenizer.json", "tokenizer_config.json")
    with pytest.raises(FileNotFoundError) as exc:
        from_pretrained(folder, work / "corpus.txt")
    assert "has no tokenizer" in _one_line(exc) and "tokenizer.save_pretrained" in str(exc.value)


def test_text_too_short_names_the_tokens_needed(work, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text(sample_text(20))
    with pytest.raises(ValueError) as exc:
        from_pretrained(work / "llama", short, seq_len=64, progress=False)
    assert "at least 576 are needed" in _one_line(exc)  # (8 + 1) windows x 64 tokens


def test_missing_text(work):
    with pytest.raises(ValueError, match="needs a text"):
        from_pretrained(work / "llama")
    with pytest.raises(FileNotFoundError, match="is not a file"):
        from_pretrained(work / "llama", work / "missing.txt")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"model_type": "no-such-arch", "architectures": ["NoSuchForCausalLM"]},
            "unknown architecture",
        ),
        ({"auto_map": {"AutoModelForCausalLM": "modeling.Mine"}}, "needs remote code"),
        ({"architectures": ["LlamaForSomethingElse"]}, "task='causal-lm'"),
    ],
)
def test_bad_config(work, tmp_path, change, expected):
    folder = shutil.copytree(work / "llama", tmp_path / "odd")
    config = json.loads((folder / "config.json").read_text())
    config.update(change)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError) as exc:
        inspect_folder(folder)
    assert expected in _one_line(exc)


def test_bad_options(work):
    with pytest.raises(ValueError, match="seq_len=0"):
        from_pretrained(work / "llama", work / "corpus.txt", seq_len=0)
    with pytest.raises(ValueError, match="task='decoder'"):
        from_pretrained(work / "llama", work / "corpus.txt", task="decoder")


def test_progress_bars_show_and_a_quiet_sweep_hides_them(work, capsys):
    from explorer.sweeps.loading import quiet_progress

    bundle = from_pretrained(work / "llama", work / "corpus.txt", seq_len=64)
    bundle.evaluate()
    bundle.calibration(8)
    err = capsys.readouterr().err
    assert "loading llama" in err and "perplexity" in err and "calibration" in err
    with quiet_progress():
        bundle = from_pretrained(work / "llama", work / "corpus.txt", seq_len=64)
        bundle.evaluate()
    assert capsys.readouterr().err == ""
