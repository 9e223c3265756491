"""Small models and calibration data shared by the pruning tests."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn


class Block(nn.Module):
    """A transformer-like block: norm, MLP, residual; takes a mask keyword, returns a tuple."""

    def __init__(self, d: int):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x, attention_mask=None, scale=1.0):
        h = self.fc2(torch.relu(self.fc1(self.norm(x))))
        if attention_mask is not None:
            h = h * attention_mask[..., None].to(h.dtype)
        return (x + scale * h,)


class TinyTransformer(nn.Module):
    """Embedding, two blocks in a ModuleList, a head outside the blocks."""

    def __init__(self, vocab: int = 32, d: int = 16, n_blocks: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(n_blocks))
        self.head = nn.Linear(d, vocab)

    def forward(self, input_ids, attention_mask=None):
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x, attention_mask=attention_mask, scale=0.5)[0]
        return self.head(x)


class ResidualOutside(nn.Module):
    """A ModuleList of blocks whose outputs are added outside: blocks do not feed each other."""

    def __init__(self, d: int = 16):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.ReLU()) for _ in range(2))

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return x


def mlp(sizes=(32, 64, 16), seed: int = 0) -> nn.Sequential:
    """A ReLU MLP with the given widths."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for a, b in itertools.pairwise(sizes):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def correlated_inputs(n: int, d: int, seed: int = 0) -> torch.Tensor:
    """Rows with strongly correlated columns and column scales spread over two decades."""
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(d, d, generator=g) / d**0.5 + torch.eye(d)
    scales = torch.logspace(-1, 1, d)[torch.randperm(d, generator=g)]
    return (torch.randn(n, d, generator=g) @ mix) * scales


@pytest.fixture
def tiny_transformer() -> TinyTransformer:
    torch.manual_seed(0)
    return TinyTransformer()


@pytest.fixture
def token_batches() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        {
            "input_ids": torch.randint(0, 32, (4, 12), generator=g),
            "attention_mask": torch.ones(4, 12, dtype=torch.long),
        }
        for _ in range(3)
    ]


@pytest.fixture
def make_mlp():
    return mlp


@pytest.fixture
def make_inputs():
    return correlated_inputs


@pytest.fixture
def residual_outside() -> ResidualOutside:
    torch.manual_seed(0)
    return ResidualOutside()
