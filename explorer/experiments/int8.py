"""The sparse + int8 accuracy experiment: what int8 adds to 2:4 pruning on the shipped models.

Run it with ``python -m explorer.experiments.int8``. For each model and method it evaluates the
dense model, the dense model in int8, the 2:4-pruned model, and the 2:4-pruned model in int8:
weights quantized symmetrically per output channel (zeros stay zeros), activations dynamically
per token, exactly as ``sparsify(model, dtype=torch.int8)`` runs them. The int8 numbers come from
:class:`explorer.gpu.quant.Int8ReferenceLinear`, which sums the integer products exactly on any
device; with ``--gpu`` the pruned model is also run through the real cuSPARSELt int8 kernel and
both are reported side by side. Results go to a Markdown table and a JSON file.

Examples
--------
>>> rows = run(["digits-mlp"], methods=["magnitude"], progress=False)
>>> sorted({r["config"] for r in rows})
['2:4', '2:4 + int8', 'dense', 'dense + int8']
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from explorer.models import MODELS

__all__ = ["OnDevice", "main", "run", "to_markdown"]

DEFAULT_MODELS = tuple(MODELS)  # every bundled model
CALIBRATION = {"digits-mlp": 512, "fashion-mlp": 1024, "minilm": 256, "smollm2": 16}
LOAD = {"minilm": {"n_eval": 300}, "smollm2": {"n_eval": 16, "seq_len": 256}}


class OnDevice(nn.Module):
    """Run ``model`` on a GPU for a CPU caller: tensor arguments go to ``device`` (floating
    ones in ``dtype``), outputs come back to the CPU in float32.

    Examples
    --------
    >>> OnDevice(nn.Identity(), "cpu", torch.float16)(torch.ones(1)).dtype
    torch.float32
    """

    def __init__(self, model: nn.Module, device: str, dtype: torch.dtype) -> None:
        super().__init__()
        self.model, self.device, self.dtype = model, torch.device(device), dtype

    def _to(self, v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return v.to(self.device, self.dtype if v.is_floating_point() else v.dtype)
        return v

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = self.model(
            *(self._to(a) for a in args), **{k: self._to(v) for k, v in kwargs.items()}
        )
        return _back(out)


def _back(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.float().cpu() if out.is_floating_point() else out.cpu()
    if isinstance(out, dict):  # transformers' ModelOutput is a dict
        for k in list(out.keys()):
            out[k] = _back(out[k])
        return out
    if isinstance(out, tuple):
        return type(out)(_back(v) for v in out)
    return out


def _metric(bundle: Any, model: nn.Module) -> float:
    return float(bundle.evaluate(model)[bundle.metric])


def _model_rows(name: str, methods: Sequence[str], gpu: bool, progress: bool) -> list[dict]:
    from explorer.gpu.quant import int8_reference
    from explorer.models import load
    from explorer.pruning import prune

    bundle = load(name, **LOAD.get(name, {}))
    base = {"model": name, "metric": bundle.metric}
    rows = [dict(base, method="-", config="dense", value=_metric(bundle, bundle.model))]
    q_dense, names = int8_reference(bundle.model, bundle.filter_fn, require_24=False)
    rows.append(
        dict(
            base,
            method="-",
            config="dense + int8",
            value=_metric(bundle, q_dense),
            layers=len(names),
        )
    )
    for method in methods:
        cal = (
            bundle.calibration(CALIBRATION.get(name, 128))
            if method in ("wanda", "sparsegpt")
            else None
        )
        t0 = time.perf_counter()
        res = prune(
            bundle.model,
            method,
            "2:4",
            calibration=cal,
            filter_fn=bundle.filter_fn,
            inplace=False,
            progress=progress,
        )
        secs = time.perf_counter() - t0
        pruned = res.model
        rows.append(dict(base, method=method, config="2:4", value=_metric(bundle, pruned)))
        q_model, names = int8_reference(pruned, bundle.filter_fn)
        rows.append(
            dict(
                base,
                method=method,
                config="2:4 + int8",
                value=_metric(bundle, q_model),
                layers=len(names),
                prune_seconds=secs,
            )
        )
        if gpu:
            rows.append(dict(base, method=method, **_gpu_row(bundle, pruned)))
    return rows


def _gpu_row(bundle: Any, pruned: nn.Module) -> dict:
    import copy

    from explorer.gpu import sparsify

    model = copy.deepcopy(pruned).to("cuda", torch.float16)
    rep = sparsify(model, filter_fn=bundle.filter_fn, dtype=torch.int8)
    value = _metric(bundle, OnDevice(rep.model, "cuda", torch.float16))
    return {
        "config": "2:4 + int8 (GPU kernel)",
        "value": value,
        "layers": len(rep.swapped),
        "device": torch.cuda.get_device_name(),
    }


def run(
    models: Sequence[str] = DEFAULT_MODELS,
    methods: Sequence[str] = ("magnitude", "sparsegpt"),
    gpu: bool = False,
    progress: bool = True,
) -> list[dict]:
    """Measure dense, dense + int8, 2:4 and 2:4 + int8 for each model and method.

    Parameters
    ----------
    models : sequence of str
        Shipped model names (see :mod:`explorer.models`).
    methods : sequence of str
        Pruning methods (calibrated ones get the model's calibration batches).
    gpu : bool
        Also run the 2:4 + int8 model through the cuSPARSELt int8 kernel (needs a GPU).
    progress : bool
        Show tqdm bars while pruning.

    Returns
    -------
    list of dict
        One row per (model, method, config) with the headline metric's ``value``.
    """
    rows: list[dict] = []
    for name in models:
        rows += _model_rows(name, methods, gpu, progress)
    return rows


def to_markdown(rows: list[dict]) -> str:
    """One table per model: configurations as rows, the headline metric as the value.

    Examples
    --------
    >>> print(to_markdown([dict(model="m", metric="accuracy", method="-", config="dense",
    ...                         value=0.9)]).splitlines()[4])
    | - | dense | 0.900 |
    """
    out: list[str] = []
    for name in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == name]
        metric = mine[0]["metric"]
        out += [
            f"**{name}** ({metric})",
            "",
            "| method | configuration | value |",
            "|---|---|---:|",
        ]
        for r in mine:
            v = r["value"]
            text = f"{v:,.1f}" if metric == "perplexity" else f"{v:.3f}"
            out.append(f"| {r['method']} | {r['config']} | {text} |")
        out.append("")
    return "\n".join(out[:-1]) if out else ""


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m explorer.experiments.int8 [--models ...] [--gpu]``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(DEFAULT_MODELS))
    p.add_argument("--methods", default="magnitude,sparsegpt")
    p.add_argument("--gpu", action="store_true", help="also run the cuSPARSELt int8 kernel")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--markdown", type=Path, default=None)
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    rows = run(
        [m for m in a.models.split(",") if m],
        [m for m in a.methods.split(",") if m],
        gpu=a.gpu,
        progress=not a.no_progress,
    )
    table = to_markdown(rows)
    print(table)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    if a.markdown:
        a.markdown.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
