"""load_sparse straight into SparseLinear layers on the GPU (run on the GPU machine)."""

from __future__ import annotations

import pytest
import torch
from gpu_helpers import relerr
from torch import nn

pytestmark = pytest.mark.gpu


def _net(dtype=torch.float16) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10)
    ).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_load_into_sparse_linear_matches_dense_masked(tmp_path, dtype):
    import explorer
    from explorer.checkpoint import load_sparse, save_sparse
    from explorer.gpu import SparseLinear

    net = _net(dtype)
    explorer.prune(net, "magnitude", "2:4", filter_fn=lambda m, fqn: fqn != "4", progress=False)
    path = tmp_path / "net.safetensors"
    save_sparse(net, path, progress=False)
    model = load_sparse(path, _net(dtype), device="cuda", sparse_linear=True, progress=False)
    assert isinstance(model[0], SparseLinear) and isinstance(model[2], SparseLinear)
    assert isinstance(model[4], nn.Linear)  # kept dense: not 2:4
    x = torch.randn(64, 256, device="cuda", dtype=dtype)
    reference = net.to("cuda").double()(x.double())
    assert relerr(model(x), reference) < 5e-3


def test_rebuilt_llama_runs_sparse_on_the_gpu(tmp_path):
    transformers = pytest.importorskip("transformers")
    import explorer
    from explorer.checkpoint import load_sparse, save_sparse
    from explorer.gpu import SparseLinear

    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float16).eval()
    explorer.prune(model, "magnitude", "2:4", progress=False)
    path = tmp_path / "llama.safetensors"
    save_sparse(model, path, progress=False)
    sparse = load_sparse(path, device="cuda", sparse_linear=True, progress=False)
    assert isinstance(sparse.model.layers[0].mlp.up_proj, SparseLinear)
    ids = torch.randint(0, 256, (2, 16), device="cuda")
    with torch.no_grad():
        got = sparse(ids).logits
        ref = model.to("cuda")(ids).logits
    assert relerr(got, ref) < 2e-2
