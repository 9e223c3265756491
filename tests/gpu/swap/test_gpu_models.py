"""Whole transformer models after sparsify(): same outputs as the dense masked model, only
row-major tensors reaching non-sparse modules, torch.compile and CUDA graphs (GPU machine)."""

from __future__ import annotations

import copy

import pytest
import torch
from gpu_helpers import mask24, relerr
from torch import nn

pytestmark = pytest.mark.gpu
DEV = "cuda"
transformers = pytest.importorskip("transformers")


def _prune(model):
    with torch.no_grad():
        for fqn, mod in model.named_modules():
            if isinstance(mod, nn.Linear) and not fqn.endswith("lm_head"):
                mod.weight.copy_(mask24(mod.weight))
    return model


def _model(kind, dtype):
    torch.manual_seed(0)
    small = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2)
    with torch.device(DEV):
        if kind == "llama":
            cfg = transformers.LlamaConfig(
                **small, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000
            )
            model = transformers.LlamaForCausalLM(cfg)
        elif kind == "qwen2":
            cfg = transformers.Qwen2Config(
                **small, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000
            )
            model = transformers.Qwen2ForCausalLM(cfg)
        else:
            cfg = transformers.BertConfig(**small, num_attention_heads=4, vocab_size=1000)
            model = transformers.BertModel(cfg, add_pooling_layer=False)
    return _prune(model.to(dtype).eval())


def _out(o):
    return o.logits if hasattr(o, "logits") else o.last_hidden_state


def _not_head(mod, fqn):
    return not fqn.endswith("lm_head")


@pytest.mark.parametrize("kind", ["llama", "qwen2", "bert"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_whole_model_matches_dense_and_hands_on_row_major(kind, dtype):
    from explorer.gpu import SparseGatedMLP, SparseLinear, SparseQKV, sparsify
    from explorer.gpu.modules.fused_qkv import QKVPart

    dense = _model(kind, dtype)
    model = copy.deepcopy(dense)
    rep = sparsify(model, filter_fn=_not_head, tokens=())
    fused_qkv = [f for f in rep.fused if f.endswith("sparse_qkv")]
    assert len(fused_qkv) == 2, rep.fused
    if kind != "bert":
        assert sum(isinstance(m, SparseGatedMLP) for m in model.modules()) == 2
    assert sum(isinstance(m, SparseQKV) for m in model.modules()) == 2
    seen = []

    def check(mod, args, out):
        if isinstance(out, torch.Tensor):
            seen.append(type(mod).__name__)
            assert out.stride(-1) == 1, f"{type(mod).__name__} handed on strides {out.stride()}"
            if not isinstance(mod, QKVPart):
                assert out.is_contiguous(), f"{type(mod).__name__} output is a strided view"

    hooks = [
        m.register_forward_hook(check)
        for m in model.modules()
        if isinstance(m, (SparseLinear, SparseGatedMLP, QKVPart))
    ]
    ids = torch.randint(0, 1000, (3, 37), device=DEV)
    with torch.no_grad():
        ref, got = _out(dense(input_ids=ids)), _out(model(input_ids=ids))
    for h in hooks:
        h.remove()
    assert "QKVPart" in seen
    assert relerr(got, ref) < (2e-2 if dtype == torch.bfloat16 else 5e-3)


@pytest.mark.parametrize("act", [nn.GELU, nn.ReLU])
def test_measured_sparsify_is_consistent_with_its_decisions(act):
    # a ReLU is folded into the layer before it: a layer put back must bring it back too
    from explorer.gpu import SparseLinear, sparsify

    model = nn.Sequential(nn.Linear(1024, 4096), act(), nn.Linear(4096, 1024)).to(
        DEV, torch.bfloat16
    )
    _prune(model)
    x = torch.randn(100, 1024, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        ref = model(x)
        rep = sparsify(model, tokens=(2048, 16), inplace=False)
        got = rep.model(x)
    assert relerr(got, ref) < 2e-2
    assert {t.tokens for t in rep.timings} == {2048, 16}
    for t in rep.timings:
        assert t.dense_ms and t.dense_ms > 0 and t.sparse_ms and t.sparse_ms > 0
    for fqn in ("0", "2"):
        mod = rep.model.get_submodule(fqn)
        routes = [t.route for t in rep.timings if t.fqn == fqn]
        if all(r == "dense" for r in routes):
            assert type(mod) is nn.Linear and "not faster sparse" in rep.reason(fqn)
            assert fqn == "2" or type(rep.model[int(fqn) + 1]) is act
        else:
            assert isinstance(mod, SparseLinear)
            assert mod.dense_kept == any(r == "dense" for r in routes)


def test_a_failed_eager_check_runs_every_layer_on_its_dense_weight(monkeypatch):
    # a prefill count where every clock may choose sparse: before the check ran with the dense
    # weights still there, such layers had already lost them and the "kept dense" verdict was
    # a no-op that the report still announced
    from explorer.gpu import SparseLinear, sparsify
    from explorer.gpu.swap import eager_check, eager_put_back

    monkeypatch.setattr(eager_check, "KEEP_SPARSE_AT", 1e9)  # no model passes: every check fails
    monkeypatch.setattr(eager_put_back, "LOSS_BELOW", 0.0)  # and none is weighed for putting back
    dense, ids = _wide_bert()
    with torch.no_grad():
        ref = _out(dense(input_ids=ids))
        rep = sparsify(dense, filter_fn=_not_head, tokens=(4096,), inplace=False)
        got = _out(rep.model(input_ids=ids))
    assert [c.kept for c in rep.eager_checks] == [False], rep.notes
    layers = [m for m in rep.model.modules() if isinstance(m, SparseLinear)]
    assert layers, rep
    for layer in layers:
        assert layer.dense_kept, "the check keeps the layer dense: its dense weight must stay"
        assert layer.decisions_made.eager_dense(4096)
        assert layer.traces_dense(4096)  # a default-mode compiled model traces it dense too
    assert any("runs dense there in eager mode" in n for n in rep.notes)
    assert relerr(got, ref) < 1e-3  # the dense route: the dense model's own product


def _wide_bert():
    """A one-layer BERT wide enough that its MLP wins sparse by the GPU clock at 4096 tokens."""
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=1,
        num_attention_heads=16,
        vocab_size=1000,
        max_position_embeddings=4096,
    )
    with torch.device(DEV):
        dense = _prune(transformers.BertModel(cfg, add_pooling_layer=False).to(torch.bfloat16))
    dense.eval()
    return dense, torch.randint(0, 1000, (2, 2048), device=DEV)


@pytest.mark.parametrize("mode", ["eager", "auto"])
def test_a_model_dense_eagerly_at_every_count_is_weighed_for_its_original_modules(
    monkeypatch, mode
):
    from explorer.gpu import SparseLinear, sparsify
    from explorer.gpu.swap import eager_check, eager_put_back

    monkeypatch.setattr(eager_check, "KEEP_SPARSE_AT", 1e9)  # no model passes: every check fails
    monkeypatch.setattr(eager_put_back, "LOSS_BELOW", 1e9)  # every eager reading counts as a loss
    dense, ids = _wide_bert()
    with torch.no_grad():
        ref = _out(dense(input_ids=ids))
        rep = sparsify(dense, filter_fn=_not_head, tokens=(4096,), inplace=False, mode=mode)
        got = _out(rep.model(input_ids=ids))
    verdict = rep.put_back_check
    if verdict is None and not rep.swapped:
        assert all("not faster sparse" in why for _, why in rep.skipped), rep.skipped
        pytest.skip(f"no layer won sparse by the clocks of mode={mode!r}: nothing to weigh")
    assert verdict is not None and list(verdict.eager) == [4096], rep.notes
    layers = [m for m in rep.model.modules() if isinstance(m, SparseLinear)]
    if mode == "eager":
        assert verdict.done and verdict.graphs == {}  # nothing runs sparse: no graphs timed
    else:
        (ratio,) = verdict.graphs.values()  # the whole model in CUDA graphs against dense
        assert ratio is not None and 0.3 < ratio < 3.0
        assert verdict.done == (ratio - 1 < verdict.loss)
    if verdict.done:
        assert not layers and not rep.swapped and rep.fused == []
        assert all(why.startswith("put back: ") for _, why in rep.skipped)
        assert torch.equal(got, ref)  # the dense model's own modules
    else:
        assert layers and all(layer.dense_kept for layer in layers)
        assert any("kept for CUDA graphs" in n for n in rep.notes)
        assert relerr(got, ref) < 1e-3


def test_shared_module_and_subclass_and_compiled_model():
    from explorer.gpu import SparseLinear, sparsify

    class LoRALinear(nn.Linear):
        pass

    shared = nn.Linear(256, 256)
    model = nn.Sequential(shared, nn.ReLU(), shared, LoRALinear(256, 256)).to(DEV, torch.half)
    _prune(model)
    rep = sparsify(model, tokens=())
    assert model[0] is model[2] and isinstance(model[0], SparseLinear)
    assert any("one module used at" in n for n in rep.notes)
    assert "subclass of nn.Linear" in rep.reason("3")
    with pytest.raises(TypeError, match="already compiled"):
        sparsify(torch.compile(nn.Sequential(nn.Linear(64, 64))))
    with pytest.raises(ValueError, match="positive integers"):
        sparsify(model, tokens=(0,))


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_compiled_sparsified_model_matches_eager(mode):
    from explorer.gpu import sparsify

    model = _model("llama", torch.bfloat16)
    sparsify(model, filter_fn=_not_head, tokens=())
    ids = torch.randint(0, 1000, (2, 16), device=DEV)
    with torch.no_grad():
        ref = _out(model(input_ids=ids))
        torch._dynamo.reset()
        compiled = torch.compile(model, mode=mode)
        for _ in range(3):  # compile, warm up, record the graph
            got = _out(compiled(input_ids=ids))
        got = _out(compiled(input_ids=ids)).clone()
    assert relerr(got, ref) < 1e-2
    explained = torch._dynamo.explain(model)(input_ids=ids)
    reasons = " ".join(str(r) for r in explained.break_reasons)
    assert "explorer" not in reasons and "sparse" not in reasons.lower(), reasons
    torch._dynamo.reset()


def test_sparse_linear_in_a_cuda_graph():
    from explorer.gpu import SparseLinear

    lin = _prune(nn.Linear(512, 1024)).to(DEV, torch.half)
    sl = SparseLinear.from_linear(lin)
    x = torch.randn(64, 512, device=DEV, dtype=torch.half)
    sl(x)  # choose the route outside the capture
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        sl(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = sl(x)
    x.copy_(torch.randn_like(x))  # fresh input, same buffer
    g.replay()
    ref = nn.functional.linear(x.double(), lin.weight.double(), lin.bias.double())
    assert relerr(y, ref) < 2e-3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize(
    ("rows", "cols", "tokens"), [(64, 32, 32), (96, 48, 40), (128, 80, 77), (33, 17, 5)]
)
def test_transpose_rows_matches_reference(dtype, rows, cols, tokens):
    from explorer.gpu.cuda.kernels import transpose_rows, transpose_rows_reference

    d = torch.randn(rows, cols, device=DEV).to(dtype)
    got = transpose_rows(d, tokens)
    assert got.is_contiguous() and got.shape == (tokens, rows)
    assert torch.equal(got.cpu(), transpose_rows_reference(d, tokens))
    with pytest.raises(ValueError, match="row-major"):
        transpose_rows(d.t())
    with pytest.raises(ValueError, match="outside"):
        transpose_rows(d, cols + 1)
