"""The CPU references of the CUDA kernels on hand-computed cases (no GPU needed)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from explorer.gpu.cuda.kernels import (
    NMHistogram,
    block_density_reference,
    nm_histogram_reference,
    nm_mask_reference,
    silu_mul_reference,
)


def test_nm_mask_hand_cases():
    s = torch.tensor([[1.0, 4.0, 3.0, 2.0, 5.0, 5.0, 5.0, 0.0]])
    assert nm_mask_reference(s).int().tolist() == [[0, 1, 1, 0, 1, 1, 0, 0]]  # ties: lower index
    assert nm_mask_reference(s, 1, 4).int().tolist() == [[0, 1, 0, 0, 1, 0, 0, 0]]
    nan = torch.tensor([[float("nan"), 1.0, 2.0, 3.0]])
    assert nm_mask_reference(nan).int().tolist() == [[0, 0, 1, 1]]
    with pytest.raises(ValueError, match="multiple of M"):
        nm_mask_reference(torch.zeros(2, 6))


@given(st.integers(0, 2**16), st.sampled_from([(2, 4), (1, 4), (4, 8), (3, 8)]))
def test_nm_mask_keeps_exactly_n(seed, nm):
    n, m = nm
    s = torch.randn(5, 2 * m, generator=torch.Generator().manual_seed(seed))
    assert nm_mask_reference(s, n, m).reshape(-1, m).sum(1).eq(n).all()


def test_histogram_hand_case():
    w = torch.tensor(
        [
            [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0],  # 1100, 1010
            [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0],  # 1001, 0110
            [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0],  # 0101, 0011
            [0.0, 0.0, 0.0, -0.0, 1.0, 1.0, 1.0, 0.0],  # sparser, too dense
        ]
    )
    h = nm_histogram_reference(w)
    assert h.counts == (1, 1, 1, 1, 1, 1, 1, 1)
    assert h.first_violation == 7 and h.violations == 1 and not h.valid
    assert h.as_dict()["too dense"] == 1 and h.as_dict()["1100"] == 1
    assert nm_histogram_reference(w, 3, 4).counts == (0, 0, 0, 0, 0, 0, 8, 0)
    assert nm_histogram_reference(w, 4, 8).as_dict() == {"valid": 4, "too dense": 0}


def test_histogram_repr():
    h = NMHistogram(2, 4, (1, 0, 0, 0, 0, 0, 0, 1), 1)
    assert "violations=1" in repr(h) and "<table" in h._repr_html_()
    assert h.valid_fraction == 0.5


def test_block_density_hand_case():
    m = torch.tensor([[1, 0, 1], [1, 1, 0]]).bool()
    assert block_density_reference(m, tile=(2, 2)).tolist() == [[0.75, 0.5]]
    assert block_density_reference(m, tile=(1, 3)).flatten().tolist() == pytest.approx([2 / 3] * 2)
    big = torch.ones(1030, 2000).bool()
    out = block_density_reference(big)
    assert max(out.shape) <= 512 and torch.all(out == 1)


def test_silu_mul_hand_case():
    gu = torch.tensor([[0.0, 2.0, -1.0, 5.0, 3.0, 4.0]])  # gate [0, 2, -1], up [5, 3, 4]
    sig = [0.5, 1 / (1 + math.exp(-2.0)), 1 / (1 + math.exp(1.0))]
    want = [0.0, 2.0 * sig[1] * 3.0, -1.0 * sig[2] * 4.0]
    assert silu_mul_reference(gu)[0].tolist() == pytest.approx(want, rel=1e-6)
    assert silu_mul_reference(gu.half()).dtype == torch.float16
    with pytest.raises(ValueError, match="2 \\* hidden"):
        silu_mul_reference(torch.zeros(2, 3))
