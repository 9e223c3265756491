"""The CPU emulation of 2:4 compression: exact round trips, layout, matmul, errors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from explorer.compression import CompressedWeight, compress
from explorer.masks import make_mask


def _pruned(w):
    return w.masked_fill(~make_mask(w, "2:4"), 0)


def test_hand_computed_layout():
    w = torch.tensor(
        [[0.0, 3.0, 0.0, 4.0, 5.0, 0.0, 0.0, 0.0], [1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 7.0, 8.0]]
    )
    c = compress(w)
    assert c.values.tolist() == [[3.0, 4.0, 5.0, 0.0], [1.0, 2.0, 7.0, 8.0]]
    # row 0: group 0 keeps (1, 3) -> 1 | 3 << 2 = 13; group 1 (0, pad 1) -> 0 | 1 << 2 = 4
    # row 1: (0, 1) -> 4; (2, 3) -> 2 | 3 << 2 = 14
    assert c.metadata.tolist() == [[13 | 4 << 4], [4 | 14 << 4]]
    assert c.positions()[0].tolist() == [[1, 3], [0, 1]]
    assert torch.equal(c.decompress(), w)


def test_odd_group_count_pads_metadata():
    w = torch.tensor([[0.0, 0.0, 1.0, 2.0]])
    c = compress(w)
    assert c.metadata.shape == (1, 1) and c.metadata.item() == (2 | 3 << 2)
    assert torch.equal(c.decompress(), w)


@given(
    rows=st.integers(1, 12),
    groups=st.integers(1, 10),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    seed=st.integers(0, 2**16),
)
def test_round_trip_is_exact(rows, groups, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    w = _pruned(torch.randn(rows, groups * 4, generator=g)).to(dtype)
    w[torch.rand(w.shape, generator=g) < 0.2] = 0  # some groups sparser than 2:4
    c = compress(w)
    assert c.values.shape == (rows, groups * 2) and c.values.dtype == dtype
    assert c.metadata.dtype == torch.uint8 and c.metadata.shape == (rows, (groups + 1) // 2)
    assert torch.equal(c.decompress(), w)


@given(tokens=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_matmul_matches_dense(tokens, seed):
    g = torch.Generator().manual_seed(seed)
    w = _pruned(torch.randn(9, 16, generator=g)).double()
    x = torch.randn(2, tokens, 16, generator=g).double()
    y = compress(w).matmul(x, chunk=4)
    assert y.shape == (2, tokens, 9)
    assert torch.allclose(y, x @ w.t())


def test_sizes_and_reprs():
    c = compress(_pruned(torch.randn(8, 16)).half())
    assert c.nbytes == 8 * 8 * 2 + 8 * 2 and c.dense_nbytes == 8 * 16 * 2
    assert repr(c).startswith("CompressedWeight(8x16 2:4")
    assert "\n" not in repr(c)
    assert "<table" in c._repr_html_()
    assert isinstance(c, CompressedWeight)


def test_empty_weight():
    c = compress(torch.zeros(0, 8))
    assert c.decompress().shape == (0, 8)


def test_errors():
    with pytest.raises(ValueError, match="not 2:4"):
        compress(torch.ones(2, 8))
    with pytest.raises(ValueError, match="multiple of 4"):
        compress(torch.zeros(2, 6))
    with pytest.raises(ValueError, match="2-D"):
        compress(torch.zeros(8))
    with pytest.raises(ValueError, match="only '2:4'"):
        compress(torch.zeros(2, 8), pattern="4:8")
    with pytest.raises(ValueError, match="features"):
        compress(torch.zeros(2, 8)).matmul(torch.zeros(1, 4))
