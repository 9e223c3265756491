"""``sparsify(dtype="int4")``'s swap: every layer an ``Int4Linear``, shared inputs stacked.

``sparsify(dtype="int8-weights")`` runs the same swap with int8 codes (``fmt="int8"``): the 2:4 +
int8 decode kernel against the 16-bit dense weight.

Each pruned ``nn.Linear`` becomes an :class:`~explorer.gpu.modules.int4_linear.Int4Linear`,
which runs torch's int4 weight-only kernel or the explorer's 2:4 + int4 decode kernel, whichever
measures faster. As in 16 bits, layers that read the same input run as one product first:

* the query, key and value projections of a self-attention module become one
  :class:`~explorer.gpu.modules.fused_qkv.SparseQKV` over one ``Int4Linear`` of their stacked rows;
* a SwiGLU block becomes a :class:`~explorer.gpu.modules.gated_mlp.SparseGatedMLP` whose stacked
  gate/up product and down projection are ``Int4Linear`` layers (a Phi-3 or GLM block's
  ``gate_up_proj`` is stacked already: it is quantized as it is).

Why: at a few tokens an int4 layer's time is its bytes plus a fixed cost per call, and a small
layer leaves most of the GPU idle. On an H100 (commit 6e6a962) the decode kernel cannot go below
about 2.2 us a call, and a 1024 x 4096 key or value projection alone moved its bytes at 19% of
the copy bandwidth, against 75% for the 14336 x 4096 gate projection. One product of the stacked
rows pays one fixed cost instead of three and fills the GPU better. Both routes of a stacked layer
compute the same numbers as its parts would: int4 groups run along a row, so stacking rows
changes no code or scale.

The stacked weight is quantized with the scales the pruning recorded for its parts, where every
part has them (``prune(..., quantize="int4").scales``), else round to nearest as for one layer.
A block that cannot be stacked (a part shared with another place, scales for only some parts, a
layout the kernel refuses) runs layer by layer, and the report's notes say why. The 2:4 kernel
reads groups of 32, 64 or a multiple of 128 columns (a joint prune-and-quantize's 32 and 64
included). An int4 layer it cannot read still runs int4, on torch's kernel, rather than its
16-bit weight: the user asked for int4, and at decode sizes the 16-bit layer is slower than int4
dense (on an H200, a 2-layer hidden-2048 model ran 0.86x of int4 dense at one token when such
layers stayed 16-bit). The notes name each such layer; int8 codes without the kernel stay 16-bit
(their dense route is the 16-bit weight anyway).

A GPU older than Ampere (compute capability below 8.0: a T4, a V100) runs neither the 2:4 kernels
(their sparse tensor-core instruction) nor torch's int4 kernel, so there every layer is kept as
it is, each with the reason (:func:`capability_refusal`), before anything is built.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from explorer.gpu.modules.fused_qkv import SparseQKV, find_qkv
from explorer.gpu.modules.gated_mlp import SparseGatedMLP, gated_mlp_parts
from explorer.gpu.modules.int4_forward import DECODE_MAX_TOKENS
from explorer.gpu.modules.int4_linear import Int4Linear
from explorer.gpu.modules.sparse_weight import stack_linears
from explorer.gpu.routes.dispatch import DECODE, DENSE
from explorer.gpu.swap.sparsify_report import LayerTiming, SparsifyReport
from explorer.sparse_rules import capability_obstacles

__all__ = ["capability_refusal", "compiled_note", "swap_int4_layers"]

#: How the report names a layer kept on the dense route.
_DENSE_LABEL = {"int4": "int4 dense (torch)", "int8": "16-bit dense (int8 dequantized)"}


def swap_int4_layers(
    model: nn.Module,
    targets: list[tuple[str, nn.Linear]],
    places: Mapping[int, list[str]],
    report: SparsifyReport,
    counts: tuple[int, ...],
    mode: str = "auto",
    scales: Mapping[str, torch.Tensor] | None = None,
    fuse_qkv: bool = True,
    fuse_mlp: bool = True,
    fmt: str = "int4",
) -> None:
    """Swap ``targets`` for int4 layers in ``model`` and record what was done in ``report``.

    Parameters
    ----------
    model : torch.nn.Module
        The model, changed in place.
    targets : list of (str, torch.nn.Linear)
        The CUDA layers to swap, by name, with 2:4 weights.
    places : mapping of int to list of str
        Every name each module object sits at (``id(module)``): a layer shared between places is
        swapped at all of them and never stacked with others.
    report : SparsifyReport
        Gains the swapped, skipped and fused layers and the routes' times.
    counts : tuple of int
        Token counts to choose routes at (those up to ``DECODE_MAX_TOKENS`` of ``int4_forward`` are timed).
    mode : {"auto", "eager", "compile", "graphs"}
        The clock routes are chosen by.
    scales : mapping of str to torch.Tensor, optional
        ``{layer: [out, in / G]}`` scales a joint prune-and-quantize recorded.
    fuse_qkv, fuse_mlp : bool
        Stack self-attention q/k/v projections, and SwiGLU gate/up projections.
    fmt : {"int4", "int8"}
        The codes of the kept weights.

    Examples
    --------
    >>> report = SparsifyReport(backend="explorer", dtype="int4")
    >>> swap_int4_layers(nn.Linear(8, 8), [], {}, report, counts=())
    >>> report.swapped
    []
    """
    refused = _refused_devices(targets, fmt)
    if refused:
        report.skipped.extend(
            (fqn, refused[mod.weight.device])
            for fqn, mod in targets
            if mod.weight.device in refused
        )
        targets = [(fqn, mod) for fqn, mod in targets if mod.weight.device not in refused]
    scales = scales or {}
    build = _Builder(mode, fmt, scales, report)
    wanted = {place: mod for _, mod in targets for place in places[id(mod)]}  # every place
    built: list[tuple[str, Int4Linear]] = []
    done: set[str] = set()
    for fqn, mod in list(model.named_modules()):
        block, names = None, find_qkv(mod) if fuse_qkv else None
        # (the root cannot be swapped in place)
        mlp_parts = gated_mlp_parts(mod) if fuse_mlp and fqn and names is None else None
        if names is not None:
            block = _stacked_qkv(mod, fqn, names, wanted, places, build)
        elif mlp_parts is not None:
            block = _stacked_mlp(model, fqn, mlp_parts, wanted, places, build)
        if block is not None:
            parts, layers = block
            done.update(parts)
            report.swapped.extend((f, tuple(wanted[f].weight.shape)) for f in parts)
            built.extend(layers)
    for fqn, mod in targets:
        if fqn in done:
            continue
        if "" in places[id(mod)]:
            why = "the model is this Linear itself. Hint: sparsify(nn.Sequential(layer), ...)"
            report.skipped.append((fqn or "(the model)", why))
            continue
        try:
            new = build.layer(mod, [scales.get(fqn)])
        except (ValueError, TypeError, RuntimeError) as exc:
            report.skipped.append((fqn, f"{fmt} compression failed: {exc}"))
            continue
        if new.decode_refusal is not None:
            if fmt == "int4" and new.torch_kernel_refusal is None:
                # no 2:4 kernel, but int4 was asked for: torch's int4 kernel, never the 16-bit
                # layer (at decode sizes it is slower than int4 dense, and 4x the memory)
                for place in places[id(mod)]:
                    model.set_submodule(place, new)
                report.notes.append(
                    f"{fqn}: int4 dense (torch's kernel), no 2:4 + int4 kernel for it: "
                    f"{new.decode_refusal.split('. Hint')[0]}"
                )
                continue
            report.skipped.append((fqn, f"no 2:4 + {fmt} kernel: {new.decode_refusal}"))
            continue
        for place in places[id(mod)]:
            model.set_submodule(place, new)
        report.swapped.append((fqn, tuple(mod.weight.shape)))
        built.append((fqn, new))
    _record_routes(built, counts, report, fmt)
    if mode != "graphs" and any(DECODE in layer.decisions().values() for _, layer in built):
        report.notes.append(compiled_note(fmt))
    if fmt == "int4":
        report.notes.append(
            "int4: layers above 64 tokens run cuBLAS on the weight dequantized for the call; "
            "speed-ups are over int4 dense, not over the 16-bit model"
        )
    else:
        report.notes.append(
            "int8 weights: the dense route is the 16-bit dequantized weight on cuBLAS (torch has "
            "no CUDA int8 weight-only kernel with group scales): speed-ups are over 16-bit dense"
        )


def capability_refusal(capability: tuple[int, int], name: str, fmt: str = "int4") -> str | None:
    """Why a GPU of ``capability`` cannot run ``fmt`` 2:4 layers (None when it can).

    The rule is :func:`explorer.sparse_rules.capability_obstacles`' (sparse tensor cores need
    8.0); torch's int4 kernel, the dense route, needs the same.

    Parameters
    ----------
    capability : tuple of int
        The GPU's compute capability, ``(major, minor)``.
    name : str
        The GPU's name, for the message.
    fmt : {"int4", "int8"}
        The codes' format.

    Returns
    -------
    str or None
        The reason, naming the GPU, what is needed and what to do, or None.

    Examples
    --------
    >>> capability_refusal((9, 0), "NVIDIA H100 80GB HBM3") is None
    True
    >>> print(capability_refusal((7, 5), "Tesla T4"))  # doctest: +NORMALIZE_WHITESPACE
    Tesla T4 has compute capability 7.5; 2:4 sparse tensor cores need 8.0 (Ampere) or newer, as
    do the 2:4 + int4 kernels and torch's int4 kernel: this layer is kept as it is. Hint: run on
    an A100, L4, H100 or newer GPU, or keep the model dense on this one
    """
    found = capability_obstacles(tuple(int(v) for v in capability), torch.bfloat16, name)
    if not found:
        return None
    return (
        f"{found[0].message}, as do the 2:4 + {fmt} kernels and torch's int4 kernel: this layer "
        f"is kept as it is. Hint: {found[0].fix}"
    )


def _refused_devices(targets, fmt: str) -> dict:
    """``{device: reason}`` for the CUDA devices of ``targets`` too old for the kernels."""
    refused = {}
    for device in {mod.weight.device for _, mod in targets if mod.weight.is_cuda}:
        why = capability_refusal(
            torch.cuda.get_device_capability(device), torch.cuda.get_device_name(device), fmt
        )
        if why is not None:
            refused[device] = why
    return refused


def compiled_note(fmt: str) -> str:
    """What a model compiled in ``torch.compile``'s default mode runs, and how to get the 2:4 gain.

    Parameters
    ----------
    fmt : {"int4", "int8"}
        The codes' format.

    Returns
    -------
    str
        The report's note.

    Examples
    --------
    >>> print(compiled_note("int4"))  # doctest: +NORMALIZE_WHITESPACE
    compiled with torch.compile's default mode, int4 layers at 1-64 tokens run int4 dense (torch's
    kernel, traced): such a decode step is bound by the host, and the 2:4 kernel's op would cost
    more host time than it saves. Hint: for the 2:4 kernel's gain, call
    explorer.gpu.set_mode(model, 'graphs') and compile with mode='reduce-overhead'
    """
    dense = (
        "int4 dense (torch's kernel, traced)" if fmt == "int4" else "the 16-bit dequantized weight"
    )
    return (
        f"compiled with torch.compile's default mode, {fmt} layers at 1-{DECODE_MAX_TOKENS} tokens "
        f"run {dense}: such a decode step is bound by the host, and the 2:4 kernel's op would "
        "cost more host time than it saves. Hint: for the 2:4 kernel's gain, "
        "call explorer.gpu.set_mode(model, 'graphs') and compile with mode='reduce-overhead'"
    )


class _Builder:
    """What every swapped layer is built with: the clock, the codes, recorded scales, the report."""

    def __init__(self, mode: str, fmt: str, scales, report: SparsifyReport) -> None:
        self.mode, self.fmt, self.scales, self.report = mode, fmt, scales, report

    def layer(self, linear: nn.Linear, given: list) -> Int4Linear:
        """``linear`` quantized, with the scales ``given`` for its parts (all None: RTN)."""
        if all(g is None for g in given):
            return Int4Linear.from_linear(linear, mode=self.mode, fmt=self.fmt)
        if any(g is None for g in given):
            raise ValueError(
                f"the pruning recorded {self.fmt} scales for some of the stacked layers only"
            )
        stacked = torch.cat([g.to(linear.weight.device, torch.float32) for g in given])
        group = linear.in_features // max(1, stacked.shape[-1])
        return Int4Linear.from_linear(linear, group, stacked, self.mode, fmt=self.fmt)


def _stackable(fqns, wanted, places, report, where: str) -> list[nn.Linear] | None:
    """The layers named ``fqns`` if all are targets, each at one place; else None."""
    if not all(f in wanted for f in fqns):
        return None
    parts = [wanted[f] for f in fqns]
    if any(len(places[id(p)]) != 1 for p in parts):
        report.notes.append(f"{where}: a layer is shared with another place; not stacked")
        return None
    return parts


def _stacked(linears, fqns, build: _Builder, where: str) -> Int4Linear | None:
    """``linears`` as one ``Int4Linear`` (their rows stacked), or None (the reason in the notes)."""
    linear = linears[0] if len(linears) == 1 else stack_linears(*linears)
    try:
        layer = build.layer(linear, [build.scales.get(f) for f in fqns])
    except (ValueError, TypeError, RuntimeError) as exc:
        why = str(exc)
    else:
        why = layer.decode_refusal
    if why is None:
        return layer
    build.report.notes.append(f"{where}: not stacked ({why}); layer by layer instead")
    return None


def _stacked_qkv(attn, fqn, names, wanted, places, build: _Builder):
    """``attn``'s q/k/v as one ``SparseQKV`` on low-bit codes: (part names, layers), or None."""
    report = build.report
    fqns = [f"{fqn}.{n}" if fqn else n for n in names]
    parts = _stackable(fqns, wanted, places, report, f"{fqn} q/k/v")
    proj = None if parts is None else _stacked(parts, fqns, build, f"{fqn} q/k/v")
    if proj is None:
        return None
    block = SparseQKV(proj, tuple(p.out_features for p in parts))
    attn.add_module("sparse_qkv", block)
    for name, part in zip(names, block.parts(), strict=True):
        setattr(attn, name, part)
    report.fused.append(f"{fqn}.sparse_qkv" if fqn else "sparse_qkv")
    return fqns, [(f"{fqn}.sparse_qkv" if fqn else "sparse_qkv", proj)]


def _stacked_mlp(model, fqn, part_names, wanted, places, build: _Builder):
    """The SwiGLU block at ``fqn`` as a ``SparseGatedMLP`` on low-bit codes, or None.

    ``part_names``: :func:`gated_mlp_parts`'s, gate and up (or the one stacked gate/up
    projection) first, down last.
    """
    report = build.report
    fqns = [f"{fqn}.{n}" for n in part_names]
    parts = _stackable(fqns, wanted, places, report, f"{fqn} gate/up")
    gate_up = down = None
    if parts is not None:
        gate_up = _stacked(parts[:-1], fqns[:-1], build, f"{fqn} gate/up")
    if gate_up is not None:
        down = _stacked(parts[-1:], fqns[-1:], build, f"{fqn} MLP")
    if down is None:
        return None
    model.set_submodule(fqn, SparseGatedMLP(gate_up, down))
    report.fused.append(fqn)
    return fqns, [(f"{fqn}.gate_up", gate_up), (f"{fqn}.down", down)]


def _record_routes(built, counts, report: SparsifyReport, fmt: str = "int4") -> None:
    """Choose (measure) each layer's route at the decode sizes, by both clocks, and report it."""
    for fqn, layer in built:
        for n in (c for c in counts if c <= DECODE_MAX_TOKENS):
            for clock in ("wall", "gpu"):
                chosen = layer.route(n, clock)
                times = layer.route_times(n, clock)
                report.timings.append(
                    LayerTiming(
                        fqn,
                        (layer.out_features, layer.in_features),
                        n,
                        times.get(DENSE),
                        times.get(DECODE),
                        f"2:4 {fmt} decode" if chosen == DECODE else _DENSE_LABEL[fmt],
                        clock,
                        times.get(chosen),
                    )
                )
