import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given

from explorer import check_pattern, keep_patterns, make_mask
from explorer.checks import SPARSER, TOO_DENSE


def slow_reference(tensor, n, m):
    """The per-group loop TensorRT users write, plus positions and the transpose."""
    rows, cols = tensor.shape
    nz = (tensor != 0).tolist() if tensor.dtype != torch.bool else tensor.tolist()
    violations, first, histogram = 0, [], {}
    for r in range(rows):
        for c in range(0, cols, m):
            group = nz[r][c : c + m]
            kept = sum(group)
            if kept > n:
                violations += 1
                first.append((r, c))
                key = TOO_DENSE
            elif kept < n:
                key = SPARSER
            else:
                key = "".join("1" if v else "0" for v in group)
            histogram[key] = histogram.get(key, 0) + 1
    transpose = None
    if rows % m == 0:
        transpose = all(
            sum(nz[r + i][c] for i in range(m)) <= n for r in range(0, rows, m) for c in range(cols)
        )
    return violations, first[:10], histogram, transpose


@given(
    rows=st.integers(1, 16),
    groups=st.integers(1, 5),
    nm=st.sampled_from([(2, 4), (1, 4), (3, 4), (4, 8), (2, 8), (1, 2)]),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.bool]),
    zeros=st.floats(0.0, 0.9),
    seed=st.integers(0, 2**16),
)
def test_agrees_with_the_slow_reference(rows, groups, nm, dtype, zeros, seed):
    n, m = nm
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, groups * m, generator=g)
    w[torch.rand(w.shape, generator=g) < zeros] = 0
    w = (w != 0) if dtype == torch.bool else w.to(dtype)
    report = check_pattern(w, f"{n}:{m}")
    violations, first, histogram, transpose = slow_reference(w, n, m)
    assert report.violations == violations
    assert report.valid == (violations == 0)
    assert list(report.first_violations) == first
    assert report.transpose_valid == transpose
    assert sum(report.histogram.values()) == report.groups == rows * groups
    assert {k: v for k, v in report.histogram.items() if v} == histogram
    assert report.density == pytest.approx(float((w != 0).float().mean()))
    assert int(report.row_violations.sum()) == violations
    assert report.valid_fraction == pytest.approx(1 - violations / (rows * groups))


def test_histogram_of_the_six_legal_patterns():
    rows = [[1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 0, 1], [0, 1, 1, 0], [0, 1, 0, 1], [0, 0, 1, 1]]
    w = torch.tensor([*rows, [1, 1, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]], dtype=torch.float16)
    report = check_pattern(w)
    assert list(report.histogram) == [*keep_patterns(2, 4), SPARSER, TOO_DENSE]
    assert all(report.histogram[p] == 1 for p in keep_patterns(2, 4))
    assert report.histogram[SPARSER] == 2 and report.histogram[TOO_DENSE] == 1
    assert report.first_violations == ((6, 0),)
    assert report.row_violations.tolist() == [0] * 6 + [1, 0, 0]


def test_negative_zero_counts_as_zero_and_nan_as_kept():
    w = torch.tensor([[-0.0, -0.0, 1.0, 1.0], [float("nan"), 1.0, 1.0, 0.0]], dtype=torch.float16)
    report = check_pattern(w)
    assert report.violations == 1 and report.first_violations == ((1, 0),)


def test_a_magnitude_pruned_llama_sized_weight_is_valid():
    w = torch.randn(256, 1024, dtype=torch.float16)
    pruned = w * make_mask(w)
    report = check_pattern(pruned)
    assert report.valid and report.density == 0.5
    assert report.transpose_valid is False  # row-wise 2:4 is almost never 2:4 down the columns
    assert "valid" in repr(report) and "2:4 on 256x1024" in repr(report)
    html = report._repr_html_()
    assert "<table" in html and "1100" in html


def test_transpose_valid_for_a_doubly_structured_mask():
    block = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]], dtype=torch.bool)
    report = check_pattern(block.repeat(2, 3))
    assert report.valid and report.transpose_valid is True
    assert check_pattern(torch.ones(6, 4)).transpose_valid is None  # 6 rows: no groups of 4


def test_other_pattern_kinds():
    mask = torch.zeros(8, 8, dtype=torch.bool)
    mask[:4, :4] = True
    assert check_pattern(mask, "block4:0.75").valid
    assert not check_pattern(mask, "block4:0.9").valid
    assert check_pattern(mask, "unstructured:0.75").valid
    assert check_pattern(mask, "rows:0.5").valid
    report = check_pattern(mask, "unstructured-row:0.5")
    assert report.valid and report.groups == 8
    report = check_pattern(torch.ones(4, 4), "unstructured-row:0.5")
    assert report.violations == 4 and report.first_violations[0] == (0, 0)
    with pytest.raises(ValueError, match="block size"):
        check_pattern(torch.ones(6, 8), "block4:0.5")


@pytest.mark.parametrize(
    ("tensor", "error", "words"),
    [
        (torch.ones(8), ValueError, "2-D"),
        (torch.ones(2, 2, 8), ValueError, "3-D"),
        (torch.ones(3, 6), ValueError, "6 columns"),
        (torch.empty(0, 4), ValueError, "empty"),
        (torch.empty(4, 4, device="meta"), ValueError, "meta"),
        ("weights", TypeError, "torch.Tensor"),
    ],
)
def test_bad_input(tensor, error, words):
    with pytest.raises(error, match=words):
        check_pattern(tensor)
