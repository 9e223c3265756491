"""Overlapped launches (programmatic dependent launch) give the results of ordinary ones (GPU).

An overlapped kernel may start while the kernel before it in the stream still writes its input.
These tests make that kernel a long one (a reduction over a large tensor) writing the very
activations the decode kernel reads, so a kernel that read them before waiting would see the
memory's previous contents, and compare with the same call launched in order and with a float64
reference, eagerly and in a CUDA graph. On a GPU older than Hopper the launches are ordinary and
the tests still hold.
"""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import captured, coded_exact, coded_weight, relerr

pytestmark = pytest.mark.gpu
DEV = "cuda"
TOL = 4e-3  # bfloat16, as in test_decode_int4.py


def _slow_input(source: torch.Tensor, tokens: int) -> torch.Tensor:
    """``[tokens, K]`` activations written by a long reduction kernel just before the call."""
    return source.sum(dim=0)[: tokens * source.shape[-1]].view(tokens, -1).to(torch.bfloat16)


def _calls(weight, tokens):
    from explorer.gpu.cuda.decode_int4 import Int4DecodeCall

    over = Int4DecodeCall(weight, None, tokens, torch.bfloat16, overlap=True)
    plain = Int4DecodeCall(weight, None, tokens, torch.bfloat16)
    return over, plain


@pytest.fixture
def overlapped_launches(monkeypatch):
    """A list that grows by one for each overlapped launch made while the test runs."""
    from explorer.gpu.cuda import launch

    made: list = []
    fire = launch._OverlappedDriver.__call__

    def counted(self, *args):
        made.append(args[0])
        return fire(self, *args)

    monkeypatch.setattr(launch._OverlappedDriver, "__call__", counted)
    return made


def test_overlap_is_supported_on_hopper_only():
    from explorer.gpu.cuda.launch import overlap_supported

    if torch.cuda.get_device_capability() < (9, 0):
        assert not overlap_supported(0)


@pytest.mark.parametrize("tokens", [1, 16, 64])
def test_an_overlapped_call_reads_the_input_its_kernel_before_wrote(tokens, overlapped_launches):
    from explorer.gpu.cuda.launch import overlap_supported

    k = 4096
    weight = coded_weight(4096, k)
    over, plain = _calls(weight, tokens)
    for _ in range(6):  # fresh inputs; the memory under x held other values before
        source = torch.randn(64, tokens * k, device=DEV)
        got = over(_slow_input(source, tokens))
        x = _slow_input(source, tokens)
        assert torch.equal(got, plain(x))
        assert relerr(got, coded_exact(x, weight)) < TOL
    # every launch but the first went overlapped where the GPU and driver allow it
    assert len(overlapped_launches) == (5 if overlap_supported(0) else 0)


def test_an_overlapped_call_in_a_cuda_graph():
    k, tokens = 4096, 1
    weight = coded_weight(14336, k)
    over, _ = _calls(weight, tokens)
    source = torch.randn(64, tokens * k, device=DEV)
    over(_slow_input(source, tokens))  # the first launch is ordinary; capture overlapped ones
    graph, out = captured(lambda: over(_slow_input(source, tokens)))
    for _ in range(4):
        source.copy_(torch.randn_like(source))
        graph.replay()
        x = _slow_input(source, tokens)
        assert relerr(out, coded_exact(x, weight)) < TOL


def test_a_gated_mlp_overlaps_its_int4_down_projection_and_keeps_its_output():
    from gpu_helpers import mask24

    from explorer.gpu.modules.gated_mlp import SparseGatedMLP
    from explorer.gpu.modules.int4_linear import Int4Linear

    h, m = 512, 1024
    gate_up = torch.nn.Linear(h, 2 * m, bias=False, device=DEV, dtype=torch.bfloat16)
    down = torch.nn.Linear(m, h, bias=False, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        gate_up.weight.copy_(mask24(gate_up.weight))
        down.weight.copy_(mask24(down.weight))
    block = SparseGatedMLP(Int4Linear.from_linear(gate_up), Int4Linear.from_linear(down))
    assert block.down.overlapped_launch and not block.gate_up.overlapped_launch
    w_gu = block.gate_up.coded_weight().decompress().double()
    w_down = block.down.coded_weight().decompress().double()
    for mode in ("graphs", "eager"):
        block.set_mode(mode)
        for tokens in (1, 16):
            for _ in range(3):
                x = torch.randn(tokens, h, device=DEV, dtype=torch.bfloat16)
                with torch.no_grad():
                    got = block(x)
                g, u = (x.double() @ w_gu.t()).chunk(2, dim=-1)
                ref = (torch.nn.functional.silu(g) * u) @ w_down.t()
                # two products and the SwiGLU, each rounded to bfloat16 once
                assert relerr(got, ref) < 2e-2, (mode, tokens)
