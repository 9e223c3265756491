"""``sparsify``: swap a model's eligible ``nn.Linear`` layers for :class:`SparseLinear`.

Layers that cannot run 2:4 sparse (not 2:4, off the alignment rules, CPU, unsupported dtype)
stay dense, and the returned :class:`SparsifyReport` says why, with the doctor's findings.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from explorer import _html
from explorer.gpu import cusparselt as C

__all__ = ["SparsifyReport", "eligibility", "sparsify"]

_DTYPE_NAMES = {
    "fp16": torch.float16,
    "float16": torch.float16,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "int8": torch.int8,
}


@dataclass
class SparsifyReport:
    """What :func:`sparsify` did: swapped layers and skipped ones with reasons.

    Attributes
    ----------
    swapped : list of (str, tuple)
        ``(fqn, (out, in))`` of the layers now running 2:4 sparse.
    skipped : list of (str, str)
        ``(fqn, reason)`` of the ``nn.Linear`` layers kept dense.
    fused : list of str
        SwiGLU blocks swapped whole for a :class:`~explorer.gpu.gated_mlp.SparseGatedMLP`
        (their three layers are also in ``swapped``).
    model : nn.Module
        The sparsified model.
    """

    swapped: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    fused: list = field(default_factory=list)
    backend: str = "cusparselt"
    dtype: str = "float16"
    model: nn.Module | None = field(default=None, repr=False)

    def reason(self, fqn: str) -> str | None:
        """Why ``fqn`` was kept dense (None if it was swapped)."""
        return dict(self.skipped).get(fqn)

    def __repr__(self) -> str:
        return (
            f"SparsifyReport({len(self.swapped)} swapped, {len(self.skipped)} kept dense, "
            f"{len(self.fused)} gated MLPs fused, backend={self.backend}, dtype={self.dtype})"
        )

    def _repr_html_(self) -> str:
        rows = [(n, f"{s[0]} x {s[1]}", _html.badge("sparse", "ok"), "") for n, s in self.swapped]
        rows += [(n, "", _html.badge("dense", "warn"), r) for n, r in self.skipped]
        return _html.table(
            ["layer", "shape", "now", "why dense"], rows, caption=repr(self), raw_columns=(2,)
        )


def eligibility(linear: nn.Linear, dtype: torch.dtype) -> str | None:
    """Why ``linear`` cannot run 2:4 sparse in ``dtype`` (None when it can).

    Examples
    --------
    >>> eligibility(nn.Linear(64, 10), torch.float16)
    'on cpu: cuSPARSELt needs the model on a CUDA GPU (model.cuda())'
    """
    w = linear.weight
    if w.device.type != "cuda":
        return f"on {w.device}: cuSPARSELt needs the model on a CUDA GPU (model.cuda())"
    if dtype not in C.CUSPARSELT_DTYPES:
        return f"dtype {dtype} has no sparse kernel (use float16, bfloat16 or int8)"
    cap = torch.cuda.get_device_capability(w.device)
    if cap < (8, 0):
        return f"GPU capability {cap[0]}.{cap[1]} has no sparse tensor cores (needs 8.0+)"
    if dtype.itemsize == 1 and dtype != torch.int8 and cap < (8, 9):
        return f"float8 needs capability 8.9+, this GPU is {cap[0]}.{cap[1]}"
    mult = C.feature_multiple(dtype)
    if linear.in_features % mult or linear.out_features % mult:
        return (
            f"shape {linear.out_features}x{linear.in_features} is off the alignment rule "
            f"(both multiples of {mult} for {str(dtype).removeprefix('torch.')})"
        )
    if not C.is_24(w.detach()):
        return "weight is not 2:4 along in_features (prune it first, or pass prune=True)"
    return None


def _doctor_reasons(model, dtype, tokens) -> Callable[[str], str]:
    try:
        from explorer.doctor import doctor

        rep = doctor(model, dtype=dtype, tokens=tokens)
    except Exception:
        return lambda fqn: ""

    def reasons(fqn: str) -> str:
        try:
            found = [f for f in rep.reasons(fqn) if f.severity in ("warn", "error")]
        except KeyError:
            return ""
        return "; ".join(f.message for f in found)

    return reasons


def sparsify(
    model: nn.Module,
    filter_fn: Callable[[nn.Module, str], bool] | None = None,
    backend: str = "cusparselt",
    dtype: torch.dtype | str | None = None,
    inplace: bool = True,
    prune: bool = False,
    activation_fusion: bool = True,
    tokens: int = 1024,
    fuse_mlp: bool = True,
    tune_tokens: tuple[int, ...] = (),
) -> SparsifyReport:
    """Replace eligible ``nn.Linear`` layers by :class:`SparseLinear` (2:4 on cuSPARSELt).

    Parameters
    ----------
    model : nn.Module
        On a CUDA GPU, with 2:4-pruned Linear weights (or ``prune=True``).
    filter_fn : callable, optional
        ``filter_fn(module, fqn) -> bool``; only layers it accepts are considered.
    backend : {"cusparselt", "torch"}
        The explorer's cached-plan path, or torch's own ``_cslt`` ops for comparison.
    dtype : torch.dtype or str, optional
        float16, bfloat16, int8 (per-channel weight and per-token activation quantization) or
        None to keep each layer's 16-bit dtype (float32 layers run in float16).
    inplace : bool
        Change ``model`` itself (default) or a deep copy (then see ``report.model``).
    prune : bool
        Magnitude-prune each considered weight to 2:4 first.
    activation_fusion : bool
        Fuse a following ``nn.ReLU``/``nn.GELU`` in an ``nn.Sequential`` into the kernel.
    tokens : int
        Tokens per call the doctor assumes when it explains why a layer stays dense.
    fuse_mlp : bool
        Swap known SwiGLU blocks (LLaMA, Mistral, Qwen: ``gate_proj``, ``up_proj``,
        ``down_proj``, SiLU) whose three layers are all eligible for one
        :class:`~explorer.gpu.gated_mlp.SparseGatedMLP` (gate and up in one matmul, the
        elementwise step in one kernel). Their layers are listed in ``report.fused``. A model
        that is itself such a block (the root module) goes layer by layer: it cannot be
        swapped in place.
    tune_tokens : tuple of int
        Token counts to tune each layer's cuSPARSELt algorithm for (in a child process, a few
        seconds per distinct shape, remembered for this GPU; see :mod:`explorer.gpu.tuning`).

    Returns
    -------
    SparsifyReport
        ``swapped``/``skipped`` layers with reasons; ``report.model`` is the sparsified model.

    Examples
    --------
    >>> report = sparsify(model.half().cuda())  # doctest: +SKIP
    >>> report.skipped  # doctest: +SKIP
    [('head', 'shape 10x64 is off the alignment rule (both multiples of 16 for float16)')]
    """
    from explorer.gpu.sparse_linear import SparseLinear

    if backend not in ("cusparselt", "torch"):
        raise ValueError(f"backend {backend!r} unknown; expected 'cusparselt' or 'torch'")
    if isinstance(dtype, str):
        if dtype.lower() not in _DTYPE_NAMES:
            raise ValueError(f"dtype {dtype!r} unknown; expected one of {sorted(_DTYPE_NAMES)}")
        dtype = _DTYPE_NAMES[dtype.lower()]
    if not inplace:
        model = copy.deepcopy(model)
    report = SparsifyReport(backend=backend, dtype=str(dtype or "auto").removeprefix("torch."))
    report.model = model
    explain = None
    targets = []
    for fqn, mod in model.named_modules():
        if not isinstance(mod, nn.Linear):
            continue
        if filter_fn is not None and not filter_fn(mod, fqn):
            report.skipped.append((fqn, "excluded by filter_fn"))
            continue
        targets.append((fqn, mod))
    if prune:
        from explorer.masks import make_mask

        with torch.no_grad():
            for _, mod in targets:
                if mod.weight.shape[1] % 4 == 0:
                    mod.weight.mul_(make_mask(mod.weight.detach(), "2:4").to(mod.weight.device))
    if fuse_mlp:
        done = _fuse_gated_mlps(model, targets, dtype, backend, report, tune_tokens)
        targets = [(fqn, mod) for fqn, mod in targets if fqn not in done]
    for fqn, mod in targets:
        dt = _layer_dtype(mod, dtype)
        why = eligibility(mod, dt)
        if why is None:
            try:
                act = "none"
                new = SparseLinear.from_linear(
                    mod, dtype=dt, activation=act, backend=backend, tune_tokens=tune_tokens
                )
            except (ValueError, TypeError, RuntimeError) as exc:
                why = f"compression failed: {exc}"
        if why is not None:
            if explain is None:
                explain = _doctor_reasons(model, dt, tokens)
            extra = explain(fqn)
            report.skipped.append((fqn, f"{why}{' | doctor: ' + extra if extra else ''}"))
            continue
        _set_module(model, fqn, new)
        report.swapped.append((fqn, (mod.out_features, mod.in_features)))
    if activation_fusion:
        _fuse_activations(model)
    return report


def _layer_dtype(mod: nn.Linear, dtype: torch.dtype | None) -> torch.dtype:
    w = mod.weight
    return dtype or (w.dtype if w.dtype in (torch.float16, torch.bfloat16) else torch.float16)


def _fuse_gated_mlps(model, targets, dtype, backend, report, tune_tokens=()) -> set[str]:
    """Swap eligible SwiGLU blocks for ``SparseGatedMLP``; return the fqns of their layers."""
    from explorer.gpu.gated_mlp import SparseGatedMLP, is_gated_mlp

    wanted = dict(targets)
    done: set[str] = set()
    for fqn, mod in list(model.named_modules()):
        if not fqn or not is_gated_mlp(mod):
            continue  # the root module cannot be swapped in place: its layers go one by one
        names = [f"{fqn}.{n}" if fqn else n for n in ("gate_proj", "up_proj", "down_proj")]
        if not all(n in wanted for n in names):
            continue
        parts = [wanted[n] for n in names]
        dts = {_layer_dtype(p, dtype) for p in parts}
        if len(dts) != 1 or any(eligibility(p, next(iter(dts))) for p in parts):
            continue  # the layers go through the per-layer path, which says why
        try:
            new = SparseGatedMLP.from_modules(
                *parts, dtype=dts.pop(), backend=backend, tune_tokens=tune_tokens
            )
        except (ValueError, TypeError, RuntimeError):
            continue
        _set_module(model, fqn, new)
        for n, p in zip(names, parts, strict=True):
            report.swapped.append((n, (p.out_features, p.in_features)))
        report.fused.append(fqn)
        done.update(names)
    return done


def _set_module(model: nn.Module, fqn: str, new: nn.Module) -> None:
    parent_name, _, child = fqn.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)


def _fuse_activations(model: nn.Module) -> None:
    """In every nn.Sequential, fold ReLU/GELU(tanh) that follow a SparseLinear into it."""
    from explorer.gpu.sparse_linear import SparseLinear

    for mod in model.modules():
        if not isinstance(mod, nn.Sequential):
            continue
        names = list(mod._modules)
        for a, b in itertools.pairwise(names):
            lin, act = mod._modules[a], mod._modules[b]
            if not isinstance(lin, SparseLinear) or lin.activation != "none":
                continue
            if lin.backend != "cusparselt" or lin.dtype.itemsize != 2:
                continue
            if isinstance(act, nn.ReLU):
                kind = "relu"
            elif isinstance(act, nn.GELU) and act.approximate == "tanh":
                kind = "gelu"
            else:
                continue
            lin.activation = kind
            lin._plans.clear()
            lin._fast.clear()
            mod._modules[b] = nn.Identity()
