"""Kernel times of real calls on a GPU: a matmul is counted as one, per call."""

from __future__ import annotations

import pytest
import torch

from explorer.bench.kernel_profile import kernel_times

pytestmark = pytest.mark.gpu


def test_a_matmul_and_an_add_are_counted_per_call():
    a = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
    k = kernel_times(lambda: (a @ a) + 1, calls=4)
    assert k.launches >= 2  # the product (cuBLAS may add a second kernel) and the add
    assert 0 < k.matmul_ms < k.total_ms
