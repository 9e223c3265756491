"""Mask overview and zoom windows: hand-computed cases and a slow reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from explorer.widgets import MaskComparison, MaskViewer, block_density, window


def slow_counts(mask: torch.Tensor, max_cells: int) -> np.ndarray:
    """Kept weights per block with plain Python loops."""
    h, w = mask.shape
    br, bc = math.ceil(h / max_cells), math.ceil(w / max_cells)
    rows, cols = math.ceil(h / br), math.ceil(w / bc)
    out = np.zeros((rows, cols), np.int64)
    m = mask.tolist()
    for i in range(h):
        for j in range(w):
            out[i // br, j // bc] += int(m[i][j])
    return out


def test_block_density_hand_computed():
    mask = torch.tensor([[1, 0, 1], [1, 1, 0]], dtype=torch.bool)
    ov = block_density(mask, max_cells=2, device="cpu")
    assert (ov.block_rows, ov.block_cols) == (1, 2)
    assert ov.counts.tolist() == [[1, 1], [2, 0]]
    np.testing.assert_allclose(ov.density, [[0.5, 1.0], [1.0, 0.0]])


@given(
    h=st.integers(1, 40),
    w=st.integers(1, 40),
    cells=st.integers(1, 12),
    seed=st.integers(0, 2**16),
)
def test_block_density_matches_slow_reference(h, w, cells, seed):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(h, w, generator=gen) > 0.5
    ov = block_density(mask, max_cells=cells, device="cpu")
    assert ov.counts.shape[0] <= cells and ov.counts.shape[1] <= cells
    np.testing.assert_array_equal(ov.counts, slow_counts(mask, cells))
    assert ov.density.min() >= 0 and ov.density.max() <= 1


def test_large_layer_overview_is_small_and_lossless():
    mask = torch.rand(4096, 11008) > 0.5
    ov = block_density(mask, device="cpu")
    assert ov.counts.shape == (512, 501)
    assert ov.counts.dtype == np.uint8  # 8 x 22 = 176 weights per block fit in a byte
    assert ov.nbytes < 1_000_000
    assert int(ov.counts.sum(dtype=np.int64)) == int(mask.sum())


def test_weights_count_zeros_as_pruned():
    ov = block_density(torch.tensor([[0.0, 2.0], [-1.0, 0.0]]), max_cells=1, device="cpu")
    assert ov.counts.tolist() == [[2]]


def test_window_marks_groups_that_break_2_4():
    mask = torch.tensor([[1, 1, 1, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 0, 0, 1]], dtype=torch.bool)
    w = window(mask, 0, 0, height=2, width=8)
    assert w.codes.tolist() == [[3, 3, 3, 2, 5, 5, 4, 4], [0, 0, 0, 0, 5, 4, 4, 5]]
    assert (w.bad_groups, w.groups) == (1, 4)


def test_window_unstructured_marks_nothing():
    mask = torch.ones(4, 8, dtype=torch.bool)
    assert window(mask, 1, 1, n=None, m=None).bad_groups == 0


def test_window_starts_on_a_group_boundary():
    mask = torch.zeros(100, 1000, dtype=torch.bool)
    w = window(mask, 50, 503, height=10, width=30)
    assert w.col0 % 4 == 0 and w.codes.shape == (10, 28)
    assert w.col0 <= 503 < w.col0 + 28


@pytest.mark.parametrize(
    "bad, match",
    [(torch.ones(3), "2-D"), ("mask", "torch.Tensor"), (torch.ones(0, 4), "empty")],
)
def test_bad_masks_are_explained(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        block_density(bad)


def test_window_outside_the_mask():
    with pytest.raises(ValueError, match="outside"):
        window(torch.ones(4, 4, dtype=torch.bool), 9, 0)


def test_viewer_overview_zoom_and_back():
    events = []
    viewer = MaskViewer(name="fc")
    viewer.on_change(lambda v: events.append(v.mode))
    mask = torch.zeros(1024, 4096, dtype=torch.bool)
    mask[:, ::2] = True
    viewer.set_mask(mask, "fc", "2:4")
    hm = viewer.heatmap()
    assert hm["z"].shape == (512, 512) and hm["dx"] == 8 and hm["zmax"] == 16
    assert "2x8 block" in viewer.title
    viewer.click(500.0, 2000.0)
    assert viewer.mode == "zoom"
    assert viewer.heatmap()["z"].shape == (64, 128)
    assert "0 of 2048 groups break 2:4" in viewer.title
    viewer.click(0, 0)
    assert events == ["overview", "zoom", "overview"]


def test_viewer_payload_for_the_largest_layer_is_under_a_megabyte():
    viewer = MaskViewer(torch.rand(4096, 11008) > 0.5, "mlp.up", device="cpu")
    assert viewer.payload_bytes < 1_000_000
    viewer.click(2000, 5000)
    assert viewer.payload_bytes == 64 * 128


def test_comparison_overlap():
    a = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0]], dtype=torch.bool)
    b = torch.tensor([[1, 0, 1, 0], [1, 0, 1, 0]], dtype=torch.bool)
    cmp = MaskComparison(a, b, "magnitude", "wanda")
    assert cmp.agreement == pytest.approx(6 / 8)
    assert cmp.iou == pytest.approx(3 / 5)
    both = cmp.panels[2]
    assert int(both.overview.counts.sum()) == 3
    cmp.click(0, 0)
    assert all(p.mode == "zoom" for p in cmp.panels)
    with pytest.raises(ValueError, match="differ in shape"):
        MaskComparison(a, b[:, :2])
