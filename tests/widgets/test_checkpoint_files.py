"""The dashboard's Save and Export buttons, driven without a browser."""

from __future__ import annotations

import pytest

from explorer.widgets import Dashboard, MethodConfig

pytest.importorskip("sklearn", reason="digits-mlp needs scikit-learn (the models extra)")
pytest.importorskip("safetensors", reason="Save needs safetensors (the deploy extra)")


@pytest.fixture(scope="module")
def dash(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield Dashboard("digits-mlp")


def test_save_writes_a_verified_checkpoint_and_reports_its_size(dash, tmp_path):
    from explorer.checkpoint import verify_checkpoint

    dash.run(MethodConfig("magnitude", "2:4"), wait=True)
    assert dash.status.level == "ok", dash.status.text
    path = tmp_path / "digits.safetensors"
    dash.save(path, wait=True)
    assert dash.status.level == "ok", dash.status.text
    written = dash.last_file
    assert written.path == path and written.file_bytes == path.stat().st_size
    assert f"of {written.dense_bytes / 1024:.1f} KiB dense" in dash.status.text
    assert "2 layers stored 2:4" in dash.status.text
    assert written.file_bytes < written.dense_bytes
    report = verify_checkpoint(path)
    assert report.manifest["pruning"]["method"] == "magnitude"
    assert report.manifest["provenance"]["run"] == "magnitude 2:4 all float16"
    assert "<table" in written._repr_html_()


def test_save_without_a_path_goes_to_the_cache(dash):
    dash.save(wait=True)
    assert dash.status.level == "ok", dash.status.text
    assert dash.last_file.path.parent.name == "exports"
    assert dash.last_file.path.name.startswith("digits-mlp-")
    first = dash.last_file.path
    dash.save(wait=True)  # the dashboard replaces its own file under the same name
    assert dash.status.level == "ok", dash.status.text
    assert dash.last_file.path == first


def test_save_never_replaces_a_file_the_user_named(dash, tmp_path):
    path = tmp_path / "mine.safetensors"
    path.write_bytes(b"my file")
    dash.save(path, wait=True)
    assert dash.status.level == "error" and "save failed" in dash.status.text
    assert path.read_bytes() == b"my file"


def test_export_writes_onnx_and_checks_it(dash, tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    path = tmp_path / "digits.onnx"
    dash.export(path, wait=True)
    assert dash.status.level == "ok", dash.status.text
    assert path.exists() and "weights can take TensorRT's sparse tactics" in dash.status.text
    assert [w.valid_24 for w in dash.last_file.report.weights] == [True, True, False]


def test_failures_become_messages(dash, tmp_path):
    (tmp_path / "taken").mkdir()
    dash.save(tmp_path / "taken", wait=True)  # a folder where the file should go
    assert dash.status.level == "error" and "save failed" in dash.status.text
    assert not dash.busy


def test_buttons_call_the_logic(dash, tmp_path):
    pytest.importorskip("ipywidgets")
    pytest.importorskip("plotly")
    from explorer.widgets.views import DashboardView

    view = DashboardView(dash)
    assert view.save.description == "Save" and view.export.description == "Export"
    view.save.click()
    dash.job.join()
    assert "saved" in view.status.value
