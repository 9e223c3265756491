"""Finding q/k/v projections and sharing one product between them (CPU, with a stand-in)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from explorer.gpu.modules.fused_qkv import QKVPart, SparseQKV, find_qkv


class _Proj(nn.Module):
    """Stands in for a row-major SparseLinear: the stacked product, counting its calls."""

    def __init__(self, weight):
        super().__init__()
        self.weight = weight
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.output = "rows"
        self.calls = 0

    def forward(self, x):
        return self.run(x)

    def run(self, x):
        self.calls += 1
        return x @ self.weight.t()


def _attn(names=("q_proj", "k_proj", "v_proj"), bias=True):
    m = nn.Module()
    for name, out in zip(names, (8, 4, 4), strict=True):
        setattr(m, name, nn.Linear(8, out, bias=bias))
    return m


def test_find_qkv():
    assert find_qkv(_attn()) == ("q_proj", "k_proj", "v_proj")
    assert find_qkv(_attn(("query", "key", "value"))) == ("query", "key", "value")
    cross = _attn()
    cross.is_cross_attention = True
    assert find_qkv(cross) is None
    odd = _attn()
    odd.k_proj = nn.Linear(6, 4)  # another input size
    assert find_qkv(odd) is None
    mixed = _attn()
    mixed.v_proj = nn.Linear(8, 4, bias=False)
    assert find_qkv(mixed) is None

    class Sub(nn.Linear):
        pass

    sub = _attn()
    sub.q_proj = Sub(8, 8)
    assert find_qkv(sub) is None


def test_parts_share_one_product_per_input():
    torch.manual_seed(0)
    attn = _attn(bias=False)
    w = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]).detach()
    proj = _Proj(w)
    qkv = SparseQKV(proj, (8, 4, 4))
    q, k, v = qkv.parts()
    assert isinstance(q, QKVPart) and (k.start, k.stop) == (8, 12)
    assert "sparse" not in dict(q.named_children())  # the owner is not a child of each part
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        outs = q(x), k(x), v(x)
    assert proj.calls == 1
    for out, lin in zip(outs, (attn.q_proj, attn.k_proj, attn.v_proj), strict=True):
        torch.testing.assert_close(out, lin(x).detach())
        assert out.stride(-1) == 1
    with torch.no_grad():
        q(x), k(x), v(x)
        assert proj.calls == 2  # a new round recomputes
        x2 = torch.randn(2, 5, 8)
        q(x), k(x2)  # another input for k: its own product
        assert proj.calls == 4
        x.add_(1.0)  # changed in place: not served from memory
        q(x)
        assert proj.calls == 5


def test_sizes_must_add_up():
    with pytest.raises(ValueError, match="add up"):
        SparseQKV(_Proj(torch.zeros(16, 8)), (8, 4, 2))
