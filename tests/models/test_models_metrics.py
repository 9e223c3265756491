"""Metrics: hand-computed tiny cases and properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from explorer.models.metrics import accuracy, cosine_to_reference, perplexity, topk_agreement


def test_accuracy_hand_case():
    model = nn.Identity()
    x = torch.tensor([[2.0, 1.0], [0.0, 3.0], [5.0, 4.0], [1.0, 2.0]])
    assert accuracy(model, x, torch.tensor([0, 1, 1, 0])) == 0.5
    assert accuracy(model, x, torch.tensor([0, 1, 0, 1]), batch_size=3) == 1.0
    assert math.isnan(accuracy(model, x[:0], torch.tensor([], dtype=torch.long)))


def test_cosine_hand_case():
    e = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    ref = torch.tensor([[1.0, 1.0], [0.0, -3.0]])
    assert cosine_to_reference(e, ref) == pytest.approx((2**-0.5 - 1) / 2)


def test_topk_agreement_hand_case():
    # Points on a line: neighbours of 0 are 1 (and 2), of 3 are 2 (and 1).
    ref = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.1, 0.9], [0.0, 1.0]])
    assert topk_agreement(ref, ref, k=1) == 1.0
    swapped = ref[[0, 2, 1, 3]]  # rows 1 and 2 trade embeddings
    # k=1: 0 -> 2 (ref 1) miss, 1 -> 3 (ref 0) miss, 2 -> 0 (ref 3) miss, 3 -> 1 (ref 2) miss.
    assert topk_agreement(swapped, ref, k=1) == 0.0
    assert math.isnan(topk_agreement(ref[:1], ref[:1]))


def test_perplexity_of_uniform_model_is_vocab_size():
    class Uniform(nn.Module):
        def forward(self, input_ids):
            return torch.zeros(*input_ids.shape, 7)

    ids = torch.randint(0, 7, (3, 9))
    assert perplexity(Uniform(), ids, batch_size=2) == pytest.approx(7.0)


def test_perplexity_of_certain_model_is_one():
    class Copy(nn.Module):
        def forward(self, input_ids):
            nxt = torch.roll(input_ids, -1, dims=1)
            return torch.nn.functional.one_hot(nxt, 5).float() * 100

    ids = torch.tensor([[0, 1, 2, 3, 4]])
    assert perplexity(Copy(), ids) == pytest.approx(1.0)


@settings(max_examples=30)
@given(st.integers(3, 20), st.integers(2, 8), st.integers(1, 5), st.integers(0, 1000))
def test_topk_agreement_bounds_and_self(rows, dim, k, seed):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(rows, dim, generator=g), torch.randn(rows, dim, generator=g)
    assert 0.0 <= topk_agreement(a, b, k) <= 1.0
    assert cosine_to_reference(a, a) == pytest.approx(1.0, abs=1e-5)
