"""The tuned-algorithm table (CPU: no GPU needed to remember and forget)."""

from __future__ import annotations

import json

import pytest

from explorer.gpu.library import batch_search, tuning


@pytest.fixture
def table(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path))
    monkeypatch.setattr(tuning, "_device_id", lambda device: "GPU X|cusparselt 800")
    tuning.clear()
    tuning._TABLE = None
    yield tmp_path / "cusparselt-algorithms.json"
    tuning._TABLE = None


def test_remember_lookup_and_persist(table):
    args = (0, 4096, 1024, 4096, "torch.float16", "torch.float16", "cr")
    assert tuning.lookup(*args) is None
    tuning.remember({tuning._key(*args, "none"): 37})
    assert tuning.lookup(*args) == 37
    assert tuning.lookup(*args[:-1], "rr") is None  # another layout is another problem
    saved = json.loads(table.read_text())
    assert list(saved.values()) == [37]
    tuning._TABLE = None  # a new process reads the file
    assert tuning.lookup(*args) == 37
    tuning.clear(disk=True)
    assert tuning.lookup(*args) is None and not table.exists()


def test_a_corrupt_table_is_ignored_with_a_warning(table):
    table.write_text("{not json")
    with pytest.warns(UserWarning, match="unreadable tuning table"):
        assert tuning.lookup(0, 1, 1, 1, "a", "b", "cr") is None


def test_shipped_tables_are_read_and_the_users_wins(table, tmp_path, monkeypatch):
    shipped = tmp_path / "shipped" / "cusparselt-test.json"
    shipped.parent.mkdir()
    args = (0, 2048, 4096, 2048, "torch.bfloat16", "torch.bfloat16", "cc")
    key = tuning._key(*args, "none")
    other = tuning._key(*args[:-1], "cr", "none")
    shipped.write_text(json.dumps({key: 17, other: 20}))
    monkeypatch.setattr(tuning, "shipped_tables", lambda: [shipped])
    tuning._TABLE = None
    assert tuning.lookup(*args) == 17
    tuning.remember({key: 3})  # the user's own run
    tuning._TABLE = None
    assert tuning.lookup(*args) == 3 and tuning.lookup(*args[:-1], "cr") == 20
    assert json.loads(shipped.read_text())[key] == 17  # the shipped file is never written


def test_problems_and_family_shapes():
    from explorer.gpu.library.tune_cli import FAMILIES, family_shapes, main

    assert tuning.Problem(64, 16, 32, "bfloat16") == tuning.Problem(64, 16, 32, "bfloat16")
    for fam in FAMILIES:
        for m, k, _role in family_shapes(fam):
            assert m % 16 == 0 and k % 16 == 0, (fam, m, k)
    with pytest.raises(ValueError, match="unknown"):
        family_shapes("gpt-5")
    with pytest.raises(SystemExit):
        main(["--families", "nope"])
    with pytest.raises(SystemExit):
        main(["--tokens", "0"])
    with pytest.raises(ValueError, match="cannot be tuned"):
        tuning.tunable_dtype("float32")


def test_nearest_lookup_takes_the_closest_tuned_count_of_the_same_problem(table):
    m, k, dt, out, lay = 4096, 4096, "torch.bfloat16", "torch.bfloat16", "cc"
    tuning.remember(
        {
            tuning._key(0, m, 1024, k, dt, out, lay, "none"): 5,
            tuning._key(0, m, 64, k, dt, out, lay, "none"): 9,
            tuning._key(0, m, 2048, k, dt, out, "cr", "none"): 11,  # another layout
            tuning._key(0, 1024, 2048, k, dt, out, lay, "none"): 12,  # another shape
        }
    )
    assert tuning.lookup(0, m, 2048, k, dt, out, lay) is None  # exact only by default
    assert tuning.lookup(0, m, 2048, k, dt, out, lay, nearest=True) == 5
    assert tuning.lookup(0, m, 128, k, dt, out, lay, nearest=True) == 9
    assert tuning.lookup(0, m, 16384, k, dt, out, lay, nearest=True) is None  # beyond 8x
    assert tuning.lookup(0, m, 1024, k, dt, out, "rr", nearest=True) is None


@pytest.mark.parametrize(
    ("counts", "limit", "expected"),
    [
        ([4096, 16], 3, (16, 4096)),
        ([1, 8, 32, 256, 1024], 3, (1, 32, 1024)),
        ([1, 8, 32, 256, 1024], 2, (1, 1024)),
        ([7, 7, 7], 3, (7,)),
        ([5, 0, -3], 3, (5,)),
        ([], 3, ()),
        ([16, 4096], 1, (4096,)),
    ],
)
def test_search_counts_keep_the_ends_and_a_bounded_middle(counts, limit, expected):
    assert tuning.search_counts(counts, limit) == expected


def test_deferred_search_collects_unknown_problems_once(table, monkeypatch):
    import torch

    ran = []
    monkeypatch.setattr(batch_search, "tune_problems", lambda problems, **kw: ran.append(problems))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tuning, "SEARCH_MIN_WEIGHTS", 0)  # a small weight stands for any
    w = torch.zeros(64, 32, dtype=torch.bfloat16)
    known = tuning._key(0, 64, 1024, 32, torch.bfloat16, torch.bfloat16, "cc", "none")
    tuning.remember({known: 4})
    before = tuning.search_stats()
    with tuning.deferred_search() as outer:
        found = tuning.tune_weight(w, [1024, 4096], layouts=["cc"])
        with tuning.deferred_search() as inner:  # a nested block hands its problems outward
            tuning.tune_weight(w, [256], layouts=["cr"])
        assert [p.n for p in inner] == [256] and not ran
    assert found == {(1024, "cc"): 4}  # the known one is answered at once
    assert [[(p.m, p.n, p.k, p.dtype, p.layout) for p in batch] for batch in ran] == [
        [(64, 4096, 32, "bfloat16", "cc"), (64, 256, 32, "bfloat16", "cr")]
    ]
    assert [p.n for p in outer] == [4096, 256]
    assert tuning.search_stats()[0] == before[0] + 2


def test_small_weights_are_answered_from_the_table_but_never_searched(table, monkeypatch):
    import torch

    ran = []
    monkeypatch.setattr(batch_search, "tune_problems", lambda problems, **kw: ran.append(problems))
    monkeypatch.setattr(tuning, "search_algorithm", lambda *a, **kw: ran.append(a), raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    w = torch.zeros(64, 32, dtype=torch.bfloat16)
    known = tuning._key(0, 64, 1024, 32, torch.bfloat16, torch.bfloat16, "cc", "none")
    tuning.remember({known: 4})
    with tuning.deferred_search() as pending:
        found = tuning.tune_weight(w, [1024, 4096], layouts=["cc"])
    assert found == {(1024, "cc"): 4} and not pending and not ran
    assert not tuning.worth_searching(64, 32) and tuning.worth_searching(4096, 4096)


@pytest.mark.gpu
def test_tuned_layer_matches_dense(table):
    import torch
    from gpu_helpers import mask24, relerr
    from torch import nn

    from explorer.gpu import SparseLinear

    lin = nn.Linear(512, 1024, bias=False).to("cuda", torch.bfloat16)
    with torch.no_grad():
        lin.weight.copy_(mask24(lin.weight))
    sl = SparseLinear.from_linear(lin, tune_tokens=(256,))
    found = {
        k: v for k, v in tuning._table().items() if k.split("|")[2:5] == ["1024", "256", "512"]
    }
    assert {k.split("|")[7] for k in found} == set(tuning.TUNED_LAYOUTS)
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    assert relerr(sl(x), nn.functional.linear(x.double(), lin.weight.double())) < 2e-3


def test_tune_refuses_a_budget_that_is_not_positive(capsys):
    from explorer.gpu.library.tune_cli import main

    with pytest.raises(SystemExit):
        main(["--budget", "0"])
    assert "--budget 0.0: expected a positive number of seconds" in capsys.readouterr().err
