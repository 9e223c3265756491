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


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_an_fp8_checkpoint_loads_onto_fp8_layers_on_its_stored_codes(tmp_path, dtype):
    from safetensors.torch import load_file

    import explorer
    from explorer.checkpoint import load_sparse, read_manifest, save_sparse
    from explorer.checkpoint.compressed_layers import dense_codes, read_compressed
    from explorer.gpu import SparseLinear
    from explorer.gpu.modules.fp8 import FP8, fp8_reference

    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 e4m3 needs compute capability 8.9+")
    net = _net(dtype)
    explorer.prune(net, "magnitude", "2:4", filter_fn=lambda m, fqn: fqn != "4", progress=False)
    path = tmp_path / "fp8.safetensors"
    save_sparse(net, path, quantize="float8_e4m3fn", progress=False)
    model = load_sparse(path, _net(dtype), device="cuda", sparse_linear=True, progress=False)
    assert isinstance(model[4], nn.Linear)  # kept dense: not 2:4
    manifest, raw = read_manifest(path), load_file(str(path))
    x = torch.randn(64, 256, dtype=dtype)
    h, chain = x.cuda(), x.float()
    for i in (0, 2):
        layer = model[i]
        stored = read_compressed(str(i), manifest["layers"][str(i)], raw, str(path))
        assert isinstance(layer, SparseLinear) and layer.dtype == FP8
        assert torch.equal(layer.weight_scale.cpu(), stored.scale)  # as stored, not found again
        assert torch.equal(layer.bias.cpu(), net[i].bias.detach().to(layer.bias.dtype))
        # each layer against the FP8 reference on the stored codes, on the same input
        bias = net[i].bias.detach().to(layer.bias.dtype).float()
        ref = fp8_reference(h.float().cpu(), dense_codes(stored), stored.scale, bias, torch.float32)
        y = layer(h)
        assert y.dtype == dtype
        assert relerr(y.float().cpu(), ref) < 1e-2
        h = torch.relu(y)
        chain = torch.relu(fp8_reference(chain, dense_codes(stored), stored.scale, bias))
    # the whole model against the FP8 reference layers on the stored parts, then the dense one
    with torch.no_grad():
        reference = nn.functional.linear(chain, model[4].weight.float().cpu(), net[4].bias.float())
        got = model(x.cuda()).float().cpu()
    assert relerr(got, reference) < 2e-2  # two FP8 layers: the tolerance of sparsify's FP8 test
