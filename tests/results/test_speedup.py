"""The one speed-up estimator: per-layer speed-ups weighted by dense work."""

from types import SimpleNamespace

import pytest

from explorer.results.speedup import combine_speedups, estimate_speedup, model_speedups


def _row(shape, speedup, source="local", count=1, tokens=1024, status="ok"):
    config = {"model": "m", "pattern": "2:4", "layers": "all", "dtype": "float16"}
    config.update(shape=shape, count=count, tokens=tokens)
    return SimpleNamespace(
        config=config, metrics={"speedup": speedup}, status=status, source=source, origin="ref"
    )


def test_combine_is_amdahl_over_dense_work():
    # 3 units of work at 1.5x and 1 unit at 1x: 4 / (2 + 1)
    assert combine_speedups([(3.0, 1.5), (1.0, 1.0)]) == pytest.approx(4 / 3)
    assert combine_speedups([(0.0, 2.0), (1.0, 0.0)]) == 1.0


def test_the_report_and_the_dashboard_estimate_agree():
    rows = [_row([64, 64], 2.0), _row([64, 32], 1.0, count=2)]
    (key, (speedup, source)), *_ = model_speedups(rows).items()
    assert key == ("m", "2:4", "all", "float16", 1024, "unknown GPU") and source == "local"
    shapes = {"a": (64, 64), "b1": (64, 32), "b2": (64, 32)}
    est = estimate_speedup(shapes, ["a"], recorded=False)  # "a" at the 2x bound, the rest 1x
    assert speedup == pytest.approx(est.speedup) == pytest.approx(8192 / (2048 + 4096))


def test_failed_rows_and_rows_without_a_shape_are_left_out():
    rows = [_row([64, 64], 2.0, status="failed"), _row(None, 2.0), _row([8, 8], 1.5, "reference")]
    key = ("m", "2:4", "all", "float16", 1024, "unknown GPU")
    assert model_speedups(rows) == {key: (1.5, "ref")}


def test_layers_timed_on_different_gpu_kinds_never_share_a_speedup():
    rows = [_row([64, 64], 2.0), _row([64, 32], 1.0, count=2)]
    rows[0].provenance, rows[1].provenance = {"gpu": "NVIDIA H100"}, {"gpu": "NVIDIA H200"}
    found = model_speedups(rows)
    assert {k[5]: v[0] for k, v in found.items()} == {"NVIDIA H100": 2.0, "NVIDIA H200": 1.0}


def test_the_dashboard_estimate_reads_one_gpu_kind_for_every_layer():
    from explorer.results.store import ResultStore

    store = ResultStore(":memory:")
    config = {"tokens": 1024, "dtype": "float16", "pattern": "2:4"}
    for shape, speedup, gpu in (
        ([64, 64], 1.4, "H100"),
        ([64, 64], 1.6, "H200"),
        ([64, 32], 1.5, "H200"),
    ):
        store.record("layer-speed", {**config, "shape": shape}, {"speedup": speedup},
                     provenance={"gpu": gpu})  # fmt: skip
    shapes = {"a": (64, 64), "b": (64, 32)}
    # H200 has rows for both layers: both are read from it, none from the H100
    est = estimate_speedup(shapes, ["a", "b"], store=store)
    assert est.gpus == ("H200",) and est.measured == 2
    assert est.speedup == pytest.approx((4096 + 2048) / (4096 / 1.6 + 2048 / 1.5))
    # asked for the H100: "b" has nothing recorded there and takes the 2x bound
    est = estimate_speedup(shapes, ["a", "b"], store=store, gpu="H100")
    assert est.gpus == ("H100",) and (est.measured, est.bounded) == (1, 1)
    assert est.speedup == pytest.approx((4096 + 2048) / (4096 / 1.4 + 2048 / 2.0))
