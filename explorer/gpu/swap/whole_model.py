"""The whole-model measurements ``sparsify`` takes beside its per-layer ones.

* :func:`check_whole_model`: after the layers have chosen their routes, the whole model timed
  eagerly against its dense self at each token count (:mod:`explorer.gpu.swap.eager_check`),
  and the report's notes on what that changed;
* :func:`time_examples` and :func:`compare_examples`: the user's ``example_inputs`` timed
  through the model before the swap and after it, in the mode it was sparsified for, as
  ``report.model_speeds``.
"""

from __future__ import annotations

import torch

from explorer.gpu.library import cusparselt as C
from explorer.gpu.routes.dispatch import clock_for

__all__ = [
    "check_whole_model",
    "compare_examples",
    "example_list",
    "time_examples",
    "timed_or_eager",
    "unit_device",
]


def check_whole_model(model, units, counts, examples, report, mode: str = "auto") -> list:
    """Time the whole model eagerly against its dense self at each token count it has inputs for.

    Where the sparse routes do not pay, the model runs dense in eager mode (see
    :mod:`explorer.gpu.swap.eager_check`); where that is every count, the swapped modules may go
    back to the original ones (:mod:`explorer.gpu.swap.eager_put_back`).

    Parameters
    ----------
    model : torch.nn.Module
        The model after the swap.
    units : list of SwapUnit
        The swapped units kept sparse; their original modules are the dense side of the check.
    counts : tuple of int
        The token counts the model was sparsified for.
    examples : list
        The user's example inputs; a token count without one gets synthetic inputs where the
        model's kind allows.
    report : SparsifyReport
        Gains the eager checks and a note for each count that could not be checked.
    mode : str, default "auto"
        The mode the routes were chosen for (``"auto"`` or ``"eager"``).

    Returns
    -------
    list of SwapUnit
        The units still swapped.
    """
    from explorer.gpu.modules.sparse_linear import SparseLinear
    from explorer.gpu.swap.eager_check import check_eager, synthetic_inputs
    from explorer.gpu.swap.eager_put_back import put_back_unpaid
    from explorer.gpu.swap.model_timing import input_tokens

    given = {input_tokens(inputs): inputs for inputs in examples}
    device = unit_device(units)
    inputs = {}
    for t in counts:
        found = given.get(t, synthetic_inputs(model, t, device))
        if found is not None:
            inputs[t] = found
    if not inputs:
        report.notes.append(
            "no whole-model eager check: pass example_inputs (one per token count) to check "
            "that the model as a whole is not slower in eager mode"
        )
        return units
    originals = {place: mod for unit in units for place, mod in unit.restore.items()}
    layers = [m for unit in units for m in unit.new.modules() if isinstance(m, SparseLinear)]
    gains = {t: est[0] / est[1] for t in inputs if (est := report.layer_estimate(t, "wall"))}
    report.eager_checks = check_eager(model, originals, inputs, layers, layer_gains=gains)
    for check in report.eager_checks:
        if check.error is not None:
            report.notes.append(
                f"no whole-model eager check at {check.tokens} tokens ({check.error}): the "
                "layers keep their own routes there; pass example_inputs for that count"
            )
        elif not check.kept:
            report.notes.append(
                f"eager at {check.tokens} tokens: the layers' sparse routes made the whole model "
                f"{check.routes_speedup:.2f}x of dense, so every layer runs dense "
                f"there in eager mode ({check.speedup:.2f}x), and a model compiled in "
                "torch.compile's default mode traces them dense there; CUDA graphs keep their "
                "own routes"
            )
    return put_back_unpaid(model, units, inputs, report.eager_checks, mode, report)


def unit_device(units) -> torch.device:
    """The device of the first sparse layer among ``units`` (``cuda`` when there is none).

    Parameters
    ----------
    units : iterable of SwapUnit
        The swapped modules (:class:`~explorer.gpu.swap.block_fusion.SwapUnit`).

    Returns
    -------
    torch.device
    """
    from explorer.gpu.modules.sparse_linear import SparseLinear

    for unit in units:
        for mod in unit.new.modules():
            if isinstance(mod, SparseLinear):
                return mod.compressed.device
    return torch.device("cuda")


def example_list(example_inputs) -> list:
    """``sparsify``'s ``example_inputs`` as a list: one input, a list of them, or none.

    Parameters
    ----------
    example_inputs : object or list or None
        One input the model takes (a tensor, a tuple of arguments, a dict of keyword
        arguments), a list of them, or None.

    Returns
    -------
    list

    Examples
    --------
    >>> example_list(None), example_list({"input_ids": 1}), len(example_list([1, 2]))
    ([], [{'input_ids': 1}], 2)
    """
    if example_inputs is None:
        return []
    if isinstance(example_inputs, list):
        return list(example_inputs)
    return [example_inputs]


def time_examples(model, examples, mode) -> list[tuple[int, tuple[str, float], float | None]]:
    """``(tokens, (how timed, ms), GPU-busy share)`` of each example through the model.

    The model is timed as it is now.

    Parameters
    ----------
    model : torch.nn.Module
        The model, dense (before the swap) or sparsified.
    examples : list
        Its inputs, one per token count.
    mode : str
        The mode the model is timed in (:func:`timed_or_eager`).

    Returns
    -------
    list of tuple
        For each example: its token count, ``(how it was timed, ms)`` and the share of the
        wall time the GPU was busy (None where that could not be measured).
    """
    from explorer.gpu.swap.model_timing import gpu_busy, input_tokens

    runs = []
    for inputs in examples:
        tokens = input_tokens(inputs)
        ms = timed_or_eager(model, inputs, mode)
        busy = gpu_busy(model, inputs)
        runs.append((tokens, ms, busy))
    return runs


def timed_or_eager(model, inputs, mode: str) -> tuple[str, float]:
    """One forward of ``model`` on ``inputs`` timed as ``mode`` runs it: ``(how, ms)``.

    A mode timed by the GPU clock is timed in a CUDA graph, or eagerly where the model cannot
    be captured; ``how`` says which (``"graphs"`` or ``"eager"``).

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    inputs : object
        One input the model takes.
    mode : str
        ``sparsify``'s mode (or ``"graphs"``/``"eager"``).

    Returns
    -------
    tuple of (str, float)
    """
    from explorer.gpu.swap.model_timing import time_forward

    if clock_for(mode) == "gpu":
        try:
            return "graphs", time_forward(model, inputs, "graphs")
        except RuntimeError:
            torch.cuda.synchronize()
    return "eager", time_forward(model, inputs, "eager")


def compare_examples(model, examples, dense_runs, mode: str, report) -> None:
    """Time each example through the sparsified model; the report gains a ``ModelSpeed`` each.

    Parameters
    ----------
    model : torch.nn.Module
        The model after the swap.
    examples : list
        The inputs :func:`time_examples` timed before the swap.
    dense_runs : list
        What :func:`time_examples` returned for them.
    mode : str
        The mode the model was sparsified for.
    report : SparsifyReport
        Gains ``model_speeds`` and, where a capture failed, a note.
    """
    from explorer.gpu.swap.model_timing import ModelSpeed

    for inputs, (tokens, (how, dense_ms), busy) in zip(examples, dense_runs, strict=True):
        how_now, sparse_ms = timed_or_eager(model, inputs, how)
        est = report.layer_estimate(C.decision_tokens(tokens, torch.float16))
        speed = ModelSpeed(
            tokens,
            how_now,
            dense_ms,
            sparse_ms,
            busy,
            est[0] / est[1] if est else None,
        )
        report.model_speeds.append(speed)
        if how_now != ("graphs" if clock_for(mode) == "gpu" else "eager"):
            report.notes.append(
                f"the model could not be captured in a CUDA graph at {tokens} tokens: timed eager"
            )
