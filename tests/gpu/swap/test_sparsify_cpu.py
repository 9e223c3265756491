"""sparsify's checks and its report, where no GPU is needed (CPU)."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from explorer.gpu import sparsify
from explorer.gpu.swap.sparsify_report import LayerTiming, SparsifyReport


def test_bad_arguments_are_refused_before_anything_changes():
    model = nn.Sequential(nn.Linear(64, 64))
    before = model[0].weight.detach().clone()
    with pytest.raises(ValueError, match="positive integers"):
        sparsify(model, tokens=(4096, 0), prune=True)
    with pytest.raises(ValueError, match="positive integers"):
        sparsify(model, tokens=(True,))
    with pytest.raises(ValueError, match="backend"):
        sparsify(model, backend="cutlass")
    with pytest.raises(TypeError, match="already compiled"):
        sparsify(torch.compile(model))
    assert torch.equal(model[0].weight, before)


def test_a_cpu_model_stays_dense_with_reasons():
    class Adapter(nn.Linear):
        pass

    model = nn.Sequential(nn.Linear(64, 64), Adapter(64, 64))
    rep = sparsify(model, filter_fn=None)
    assert rep.swapped == [] and rep.timings == []
    assert "CUDA" in rep.reason("0")
    assert "subclass of nn.Linear" in rep.reason("1")
    assert type(model[0]) is nn.Linear


def test_report_estimate_repr_and_tables():
    rep = SparsifyReport(
        swapped=[("a", (64, 64))],
        timings=[
            LayerTiming("a", (64, 64), 4096, 2.0, 1.0, "sparse cc alg 17"),
            LayerTiming("b", (64, 64), 4096, 2.0, 1.0, "sparse cc alg 17"),
            LayerTiming("a", (64, 64), 16, 1.0, 1.5, "dense"),
        ],
    )
    assert rep.layer_estimate(4096) == (4.0, 2.0)
    assert rep.layer_estimate(16) == (1.0, 1.0)  # a dense route costs the dense time
    assert rep.layer_estimate(8) is None
    assert "layers at 4096 tokens 2.00x (estimate)" in repr(rep)
    table = rep.timing_table()
    assert "a (+1 alike)" in table and table.count("\n") == 3
    html = rep._repr_html_()
    assert html.count("<table") == 2 and "(estimate)" in html and "rest of it is unchanged" in html
    assert LayerTiming("x", (1, 1), 16, None, 1.0, "sparse cc default").speedup is None


def test_a_copied_sparse_layer_is_its_own_op():
    import copy

    from explorer.gpu.cuda import ops
    from explorer.gpu.modules.sparse_linear import SparseLinear

    layer = SparseLinear(64, 32, torch.zeros(16, dtype=torch.uint8), None, torch.float16)
    layer._fast[("some", "input")] = lambda x: x  # a fast path bound to this layer
    twin = copy.deepcopy(layer)
    assert twin._op_id != layer._op_id
    assert ops._module(twin._op_id) is twin and ops._module(layer._op_id) is layer
    assert twin._fast == {} and layer._fast


def test_the_package_names_stay_functions_whatever_was_imported_first():
    """No submodule shares a name with a public function: importing every submodule first
    (as a benchmark or a notebook may) leaves ``explorer.gpu.sparsify`` the function."""
    import importlib
    import pkgutil

    import explorer.gpu

    for info in pkgutil.iter_modules(explorer.gpu.__path__):
        importlib.import_module(f"explorer.gpu.{info.name}")
    from explorer.gpu import set_mode
    from explorer.gpu import sparsify as sparsify_now

    assert callable(sparsify_now) and sparsify_now.__name__ == "sparsify"
    assert callable(set_mode)
    clashes = [n for n in explorer.gpu.__all__ if importlib.util.find_spec(f"explorer.gpu.{n}")]
    assert clashes == []


def test_explaining_the_skips_checks_each_pattern_once(monkeypatch):
    import explorer.checks

    calls = []
    real = explorer.checks.check_pattern

    def counted(tensor, pattern="2:4"):
        calls.append(tuple(tensor.shape))
        return real(tensor, pattern)

    for module in list(sys.modules.values()):  # every module that imported it counts too
        name = getattr(module, "__name__", "")  # sys.modules may hold objects that are no module
        if name.startswith("explorer") and getattr(module, "check_pattern", 0) is real:
            monkeypatch.setattr(module, "check_pattern", counted)
    # the path of a machine without a GPU, also where one is present (this file is its test)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    model = nn.Sequential(nn.Linear(64, 32), nn.Linear(32, 64))  # not 2:4, on the CPU
    rep = sparsify(model)
    assert all("doctor: " in why and "not 2:4" in why for _, why in rep.skipped), rep.skipped
    assert calls == [(32, 64), (64, 32)], calls  # the doctor reads the listing's checks


def test_the_search_note_says_what_the_bounded_search_did():
    from explorer.gpu.library.tuning import SearchStats
    from explorer.gpu.swap import model_swap

    report = SparsifyReport(backend="cusparselt", dtype="float16", mode="auto")
    before = SearchStats(3, 10.0, 1, 0)
    seconds = model_swap._search_note(SearchStats(19, 58.5, 6, 2), before, report)
    assert seconds == pytest.approx(48.5)
    (note,) = report.notes
    assert "16 shape and token-count problems" in note and "in 48.5 s" in note
    assert "5 ran out of their share of the 50 s bound" in note and "2 configs crashed" in note
    report.notes.clear()
    model_swap._search_note(before, before, report)  # nothing searched: nothing said
    assert report.notes == []
