"""The sparse + FP8 accuracy experiment on the small shipped model."""

from __future__ import annotations

from explorer.experiments.fp8 import main, run, to_markdown


def test_run_reports_every_configuration():
    rows = run(["digits-mlp"], methods=["magnitude"], progress=False)
    configs = {r["config"]: r for r in rows}
    assert set(configs) == {"dense", "dense + FP8", "2:4", "2:4 + FP8"}
    assert configs["2:4 + FP8"]["layers"] == 2  # the classifier stays as it is (filter_fn)
    assert configs["dense + FP8"]["layers"] == 2
    assert configs["dense"]["weights"] == "bfloat16"
    assert configs["2:4 + FP8"]["weights"] == "float8_e4m3fn"
    for r in rows:
        assert 0.5 < r["value"] <= 1.0
    # FP8 on top of 2:4 costs little on this model; a collapse would mean a broken path
    assert abs(configs["2:4 + FP8"]["value"] - configs["2:4"]["value"]) < 0.03
    assert abs(configs["dense + FP8"]["value"] - configs["dense"]["value"]) < 0.03
    assert "| magnitude | 2:4 + FP8 | float8_e4m3fn | 2 |" in to_markdown(rows)


def test_command_line_writes_its_table(tmp_path, capsys):
    md = tmp_path / "fp8.md"
    assert (
        main(
            [
                "--models",
                "digits-mlp",
                "--methods",
                "magnitude",
                "--no-progress",
                "--markdown",
                str(md),
            ]
        )
        == 0
    )
    assert "**digits-mlp** (accuracy)" in capsys.readouterr().out
    assert "| - | dense + FP8 |" in md.read_text()
