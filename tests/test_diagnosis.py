import sys

import pytest
import torch
from torch import nn

from explorer import DeviceTarget, doctor, make_mask
from explorer.dtypes import parse_dtype


def pruned_linear(out_features, in_features, dtype=torch.float32):
    layer = nn.Linear(in_features, out_features, bias=False)
    with torch.no_grad():
        layer.weight.mul_(make_mask(layer.weight))
    return layer.to(dtype)


def codes(report, layer):
    return {f.code for f in report.reasons(layer)}


def test_a_big_pruned_layer_is_fast_on_h100():
    model = nn.Sequential(pruned_linear(4096, 4096))
    report = doctor(model, dtype=torch.float16, tokens=1024, device="H100")
    assert report.verdict("0") == "fast"
    assert report.counts() == {"fast": 1, "slow": 0, "unsupported": 0}
    assert report.fast_layers() == ["0"]
    assert "1 fast" in repr(report) and "H100" in repr(report)


def test_small_layers_are_slow():
    report = doctor(nn.Sequential(pruned_linear(384, 1536)), tokens=128, device="H100")
    assert report.verdict("0") == "slow"
    assert "small" in codes(report, "0")


def test_unpruned_weights_are_not_24():
    report = doctor(nn.Sequential(nn.Linear(4096, 4096)), tokens=4096, device="A100")
    assert report.verdict("0") == "unsupported"
    (finding,) = [f for f in report.reasons("0") if f.code == "not-24"]
    assert "explorer.prune" in finding.fix


def test_compute_capability():
    model = nn.Sequential(pruned_linear(4096, 4096))
    assert doctor(model, device="T4").verdict("0") == "unsupported"
    assert doctor(model, device="V100").notes[0].code == "capability"
    assert doctor(model, device=(8, 0), tokens=4096).verdict("0") == "fast"
    fp8 = doctor(model, dtype="fp8", device="A100")
    assert "fp8-capability" in {n.code for n in fp8.notes}
    assert doctor(model, dtype="fp8", device="H100", tokens=4096).verdict("0") == "fast"


def test_alignment_rules_depend_on_the_dtype():
    model = nn.Sequential(pruned_linear(4096 + 16, 4096))  # 4112 rows: 16-aligned, not 32
    assert doctor(model, dtype=torch.float16, tokens=4096, device="H100").verdict("0") == "fast"
    int8 = doctor(model, dtype=torch.int8, tokens=4096, device="H100")
    assert int8.verdict("0") == "unsupported"
    (finding,) = [f for f in int8.reasons("0") if f.code == "align"]
    assert "multiples of 32" in finding.message and "out_features=4112" in finding.message


def test_int8_layout_explains_the_descriptor_init_error():
    model = nn.Sequential(pruned_linear(4096, 4096))
    report = doctor(model, dtype="int8", tokens=4096, device="A100")
    text = " ".join(str(n) for n in report.notes)
    assert "operation not supported when calling cusparseLtMatmulDescriptorInit" in text
    assert "transposed" in text and "contiguous" in text


def test_token_rules():
    model = nn.Sequential(pruned_linear(4096, 4096))
    one = doctor(model, tokens=1, device="H100")
    assert "tokens-one" in codes(one, "0") and one.verdict("0") != "fast"
    torch_one = doctor(model, tokens=1, device="H100", backend="torch")
    assert torch_one.verdict("0") == "unsupported"
    odd = doctor(model, tokens=1001, device="H100")
    assert "tokens-align" in codes(odd, "0")
    assert odd.verdict("0") == "fast"  # padded internally, still large


def test_torch_eager_host_overhead_and_cutlass_on_hopper():
    model = nn.Sequential(pruned_linear(4096, 4096))
    eager = doctor(model, tokens=1024, device="H100", backend="torch")
    assert "host-overhead" in codes(eager, "0")
    cutlass = doctor(model, tokens=4096, device="H100", backend="cutlass")
    assert cutlass.verdict("0") == "unsupported"
    assert any(n.code == "cutlass-hopper" for n in cutlass.notes)
    assert doctor(model, tokens=4096, device="A100", backend="cutlass").verdict("0") == "fast"


def test_convolutions_and_cpu_targets():
    model = nn.Sequential(nn.Conv2d(16, 16, 3), nn.Flatten(), pruned_linear(4096, 4096))
    report = doctor(model, tokens=4096, device="H100")
    assert report.verdict("0") == "unsupported" and "not-linear" in codes(report, "0")
    cpu = doctor(model, device="cpu")
    assert cpu.notes[0].code == "cpu" and cpu.counts()["unsupported"] == 2


def test_filter_and_report_views():
    model = nn.Sequential(pruned_linear(4096, 4096), pruned_linear(64, 4096))
    report = doctor(model, device="H100", tokens=2048, filter_fn=lambda m, n: n == "0")
    assert [d.name for d in report.layers] == ["0"]
    assert "0 (Linear 4096x4096): fast" in str(report)
    assert "<table" in report._repr_html_()
    with pytest.raises(KeyError):
        report.verdict("1")
    with pytest.raises(ValueError, match="selected no layers"):
        doctor(model, filter_fn=lambda m, n: False)


@pytest.mark.parametrize("tokens", [0, -3, 2.5, True, "8"])
def test_bad_tokens(tokens):
    with pytest.raises(ValueError, match="tokens"):
        doctor(nn.Sequential(nn.Linear(8, 8)), tokens=tokens)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown dtype"):
        doctor(nn.Sequential(nn.Linear(8, 8)), dtype="float12")
    with pytest.raises(ValueError, match="backend"):
        doctor(nn.Sequential(nn.Linear(8, 8)), backend="tensorrt")
    with pytest.raises(ValueError, match="cannot tell which GPU"):
        doctor(nn.Sequential(nn.Linear(8, 8)), device="Voodoo2")
    with pytest.raises(ValueError, match="no prunable layers"):
        doctor(nn.Sequential(nn.ReLU()))


def test_device_targets():
    assert DeviceTarget.resolve("NVIDIA H100 80GB HBM3").capability == (9, 0)
    assert DeviceTarget.resolve("sm_86").capability == (8, 6)
    assert DeviceTarget.resolve("90").capability == (9, 0)
    assert DeviceTarget.resolve("8.9").supports_24
    assert DeviceTarget.resolve((7, 5)).supports_24 is False
    assert DeviceTarget.resolve("cpu").is_gpu is False
    assert DeviceTarget.resolve("H200").supports_fp8 and DeviceTarget.resolve("H200").is_hopper
    if not torch.cuda.is_available():
        assert "assumed" in DeviceTarget.resolve(None).name
        with pytest.raises(ValueError, match="CUDA is not available"):
            DeviceTarget.resolve("cuda:0")
    assert parse_dtype("bf16") is torch.bfloat16 and parse_dtype(torch.int8) is torch.int8


@pytest.mark.parametrize(
    "device", [(99, 0), "sm_990", (8, 99), (-1, 0), (12, 5), (4, 0), "8.8", "sm_130"]
)
def test_capabilities_no_gpu_has_are_refused_with_the_known_list(device):
    with pytest.raises(ValueError, match=r"which no NVIDIA GPU has; expected one of 3\.0, .*12\.1"):
        DeviceTarget.resolve(device)
    with pytest.raises(ValueError, match="no NVIDIA GPU has"):
        doctor(nn.Sequential(nn.Linear(64, 64).half()), device=device)


@pytest.mark.parametrize(
    ("device", "capability"),
    [
        ("sm_90a", (9, 0)),
        ("sm_100f", (10, 0)),
        ("121", (12, 1)),
        ((11, 0), (11, 0)),
        ("7.5", (7, 5)),
    ],
)
def test_every_shipped_capability_and_arch_suffix_is_read(device, capability):
    assert DeviceTarget.resolve(device).capability == capability


@pytest.mark.parametrize("device", ["sm_９０", "９.０", (True, False)])
def test_capabilities_are_ascii_integers(device):
    with pytest.raises(ValueError, match="cannot tell which GPU"):
        DeviceTarget.resolve(device)


def test_each_layers_pattern_is_checked_once(monkeypatch):
    import explorer.checks

    calls = []
    real = explorer.checks.check_pattern

    def counted(tensor, pattern="2:4"):
        calls.append(tuple(tensor.shape))
        return real(tensor, pattern)

    for module in list(sys.modules.values()):  # every module that imported it counts too
        if module.__name__.startswith("explorer") and getattr(module, "check_pattern", 0) is real:
            monkeypatch.setattr(module, "check_pattern", counted)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 64))  # neither is 2:4
    report = doctor(model, device="H100")
    assert report.reasons("0")[0].code == "not-24"
    assert "512 of 512 groups of 4" in report.diagnosis("2").findings[0].message
    assert calls == [(32, 64), (64, 32)]  # one check a layer, carried from explorer.layers
