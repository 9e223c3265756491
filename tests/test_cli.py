"""The sparsity-explorer command line: --help for every verb, one-line errors, real runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from explorer import cli
from explorer.results.store import ResultStore

ROOT = Path(__file__).resolve().parents[1]


def run(argv, capsys):
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's --help and usage errors
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("verb", ["dashboard", "doctor", "bench", "sweep", "report", "store"])
def test_every_verb_has_help(verb, capsys):
    code, out, _ = run([verb, "--help"], capsys)
    assert code == 0 and "usage:" in out and verb in out


def test_top_level_help_lists_the_verbs(capsys):
    code, out, _ = run(["--help"], capsys)
    assert code == 0
    for verb in ("dashboard", "doctor", "bench", "sweep", "report"):
        assert verb in out


def test_errors_are_one_line_with_status_2(capsys, tmp_path):
    code, _, err = run(["sweep", "--patterns", "3:x", "--db", str(tmp_path / "r.db")], capsys)
    assert code == 2 and err.count("\n") == 1 and "'3:x'" in err and "Traceback" not in err
    code, _, err = run(["sweep", "--nope"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--nope" in err
    bad = tmp_path / "notes.db"
    bad.write_text("not a database")
    code, _, err = run(["report", "--db", str(bad), "--out", str(tmp_path / "r.html")], capsys)
    assert code == 2 and err.count("\n") == 1 and str(bad) in err and "new path" in err
    code, _, err = run(["doctor", "resnet"], capsys)
    assert code == 2 and "resnet" in err


def test_dashboard_without_voila_names_the_install(capsys, monkeypatch, tmp_path):
    notebook = tmp_path / "dash.ipynb"
    notebook.write_text("{}")
    real = cli.importlib.util.find_spec
    monkeypatch.setattr(
        cli.importlib.util, "find_spec", lambda n: None if n == "voila" else real(n)
    )
    code, _, err = run(["dashboard", "--notebook", str(notebook)], capsys)
    assert code == 2 and 'pip install "sparsity-explorer[widgets]"' in err
    code, _, err = run(["dashboard", "--notebook", str(tmp_path / "missing.ipynb")], capsys)
    assert code == 2 and "missing.ipynb" in err


def test_doctor_prints_the_report(capsys):
    code, out, _ = run(["doctor", "digits-mlp", "--capability", "9.0", "--tokens", "64"], capsys)
    assert code == 0 and "DoctorReport" in out and "sm_90" in out


def test_report_verb_writes_html_and_exports(capsys, tmp_path):
    db = tmp_path / "r.db"
    with ResultStore(db) as store:
        store.record(
            "prune",
            {"model": "m", "method": "magnitude", "pattern": "2:4"},
            {"metric": "accuracy", "accuracy": 0.9},
        )
    out = tmp_path / "r.html"
    code, text, _ = run(
        [
            "report",
            "--db",
            str(db),
            "--out",
            str(out),
            "--csv",
            str(tmp_path / "r.csv"),
            "--json",
            str(tmp_path / "r.json"),
        ],
        capsys,
    )
    assert code == 0 and "wrote" in text
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert (tmp_path / "r.csv").exists() and (tmp_path / "r.json").exists()


def test_tiny_real_sweep_via_python_dash_m(tmp_path):
    db = tmp_path / "results.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    command = [
        sys.executable,
        "-m",
        "explorer",
        "sweep",
        "--model",
        "digits-mlp",
        "--methods",
        "magnitude,random",
        "--patterns",
        "2:4,4:8",
        "--db",
        str(db),
        "--no-progress",
    ]
    first = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "11 cells" in first.stdout and "0 failed" in first.stdout
    again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    # the speed and model-speed cells were skipped (no GPU here, or nothing to time) and are
    # tried again; the rest is not rerun
    assert "5 already done, 6 ran" in again.stdout and "6 skipped" in again.stdout
    with ResultStore(db) as store:
        assert len(store.query("prune", status="ok")) == 4
        assert len(store.query("dense")) == 1


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["sweep", "--workers", "0"], "'0' is not a valid worker count"),
        (["sweep", "--workers", "-1"], "'-1' is not a valid worker count"),
        (["sweep", "--workers", "2", "--scheduler", "tcp://x:1"], "not allowed with"),
        (["sweep", "--calibration-samples", "0"], "calibration sample count"),
        (["sweep", "--seed", "-3"], "'-3' is not a valid seed"),
        (["sweep", "--quantize", "int4"], "hold no sparsegpt; add it to the methods"),
        (
            ["sweep", "--methods", "sparsegpt", "--quantize", "int4", "--group-size", "2"],
            "group size",
        ),
        (["sweep", "--update", "lbfgs"], "invalid choice: 'lbfgs'"),
        (["doctor", "digits-mlp", "--capability", "99.9"], "99.9"),
        (["doctor", "digits-mlp", "--capability", "9.0", "--device", "A100"], "not allowed with"),
        (["doctor", "digits-mlp", "--tokens", "0"], "token count"),
        (["dashboard", "--port", "70000"], "'70000' is not a valid port"),
        (["sweep", "--db", ":memory:"], "would vanish"),
        (["store", "recover", "a.db"], "NEW.db"),
    ],
)
def test_numeric_and_exclusive_options_are_validated(argv, words, capsys, tmp_path, monkeypatch):
    # Should a check go missing, nothing runs against the user's own store or serves a page.
    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path))
    if argv[0] == "dashboard":
        argv = [*argv, "--notebook", str(tmp_path / "missing.ipynb")]
    code, _, err = run(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "results.db").exists()  # refused before the store was created


def test_doctor_refuses_an_impossible_capability_from_python():
    from torch import nn

    from explorer.diagnosis import doctor

    with pytest.raises(ValueError, match=r"\(99, 0\).*no NVIDIA GPU"):
        doctor(nn.Sequential(nn.Linear(8, 8)), device=(99, 0))


def test_suggested_report_command_is_shell_quoted(tmp_path, capsys, monkeypatch):
    import shlex

    from explorer.sweeps import cells

    monkeypatch.setattr(
        cells,
        "run_cell",
        lambda config, cancel=None: [
            {
                "kind": {"speed": "layer-speed"}.get(config["cell"], config["cell"]),
                "config": config,
                "metrics": {"accuracy": 0.5},
            }
        ],
    )
    db = tmp_path / "my results" / "it's.db"
    db.parent.mkdir()
    code, out, err = run(["sweep", "--db", str(db), "--no-progress"], capsys)
    assert code == 0, err
    line = next(t for t in out.splitlines() if t.startswith("report: "))
    words = shlex.split(line.removeprefix("report: "))
    assert words[:4] == ["sparsity-explorer", "report", "--db", str(db)]


def test_no_progress_hides_the_training_bar_too(tmp_path, capsys, monkeypatch):
    from torch import nn

    from explorer.models import _mlp
    from explorer.sweeps import cells

    def training_cell(config, cancel=None):
        import torch

        x, y = torch.randn(64, 4), torch.randint(0, 2, (64,))
        _mlp.train(
            nn.Linear(4, 2),
            x,
            y,
            epochs=1,
            batch_size=8,
            lr=0.01,
            seed=0,
            desc="training the bundled model",
        )
        kind = {"speed": "layer-speed"}.get(config["cell"], config["cell"])
        return [{"kind": kind, "config": config, "metrics": {"accuracy": 0.5}}]

    monkeypatch.setattr(cells, "run_cell", training_cell)
    code, _, err = run(["sweep", "--db", str(tmp_path / "r.db"), "--no-progress"], capsys)
    assert code == 0 and "training the bundled model" not in err and "sweep" not in err
    code, _, err = run(["sweep", "--db", str(tmp_path / "s.db")], capsys)
    assert code == 0 and "training the bundled model" in err  # shown without the flag


def test_numbers_on_the_command_line_are_ascii(capsys):
    code, _, err = run(["dashboard", "--port", "８８６６"], capsys)
    assert code == 2 and "'８８６６' is not a valid port" in err
