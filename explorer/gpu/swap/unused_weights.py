"""After ``sparsify`` has measured and checked: free the weights no decision runs.

A sparse layer holds, beside its compressed weight, its dense weight (the dense route) and, for
``decode=True``, the decode kernel's copy. Each is freed where no decision of the layer's mode
runs it (:meth:`LayerDecisions.needs_dense`, which counts the whole-model eager check's
verdicts), and the report notes the memory of those kept.
"""

from __future__ import annotations

import torch
from torch import nn

from explorer.gpu.routes.dispatch import clocks_for

__all__ = ["free_unused_weights"]


def free_unused_weights(model: nn.Module, units: list, mode: str, report) -> None:
    """Free the dense and decode weights no decision runs, and note the memory still kept.

    Called by ``sparsify`` after the whole-model eager check, whose verdicts may need the dense
    weight (a layer it keeps dense in eager mode runs on it).

    Parameters
    ----------
    model : nn.Module
        The sparsified model.
    units : list
        ``sparsify``'s swapped units kept sparse (each with its new module as ``.new``).
    mode : str
        The execution mode the routes were chosen for.
    report : SparsifyReport
        Gains a note per kind of weight kept beside the compressed one.
    """
    from explorer.gpu.modules.sparse_linear import SparseLinear

    clocks = clocks_for(mode)
    for unit in units:
        for layer in (m for m in unit.new.modules() if isinstance(m, SparseLinear)):
            chosen = [d.route(c) for d in layer.measured().values() for c in clocks]
            # an fp8 layer keeps its fp8 codes: a compiled model traces FP8 dense
            if not layer.decisions_made.needs_dense() and layer.dtype != torch.float8_e4m3fn:
                layer.drop_dense()
            if chosen and not any(r.kind == "decode" for r in chosen):
                layer.drop_decode()  # no measured count runs the decode kernel
    sparse_layers = [m for m in model.modules() if isinstance(m, SparseLinear)]
    extra = (
        (
            sum(m.dense_bytes for m in sparse_layers),
            "dense weights kept where dense runs (faster there, a token count the whole-model "
            "eager check keeps dense, or a decode size a default torch.compile traces dense; "
            "mode='graphs' keeps less)",
        ),
        (
            sum(m.decode_weight().nbytes for m in sparse_layers if m.decode_kept),
            "weights kept in the decode kernel's layout for 1 to 64 tokens, where it is fastest",
        ),
    )
    for nbytes, what in extra:
        if nbytes:
            report.notes.append(f"{nbytes / 2**20:.0f} MiB of {what}")
    if any(m.dtype == torch.float8_e4m3fn for m in sparse_layers):
        report.notes.append(
            "float8_e4m3fn layers: their dense route and dense times are FP8 dense "
            "(torch._scaled_mm on the same fp8 weight: the baseline an FP8 deployment has, with "
            "the same results), never bf16; a layer where FP8 2:4 is slower runs FP8 dense, "
            "and a compiled model runs every fp8 layer FP8 dense (the compiler fuses its "
            "activation quantization with the step before, which the 2:4 op cannot)"
        )
