"""``sparsify``: swap a model's eligible ``nn.Linear`` layers for 2:4 sparse ones, where it pays.

Self-attention projections become one :class:`~explorer.gpu.modules.fused_qkv.SparseQKV` product and
SwiGLU blocks one :class:`~explorer.gpu.modules.gated_mlp.SparseGatedMLP`; other layers become
:class:`~explorer.gpu.modules.sparse_linear.SparseLinear`. Every swapped module hands on a row-major
output, so attention, norms and residual adds get the tensors they expect. Then each distinct
layer is timed at the token counts the user runs (``tokens=``): a layer that is not faster
sparse at any of them goes back to its original ``nn.Linear``, and one that is faster at some
keeps its dense weight for the others. Layers that cannot run 2:4 sparse (not 2:4, off the
alignment rules, CPU, unsupported dtype) stay dense, and the returned
:class:`~explorer.gpu.swap.sparsify_report.SparsifyReport` says why, with the doctor's findings and
the measured times.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping

import torch
from torch import nn

from explorer.dtypes import SPARSE_DTYPES, dtype_name, parse_dtype
from explorer.gpu.library import cusparselt as C
from explorer.gpu.library.batch_search import MODEL_SEARCH_BUDGET_S
from explorer.gpu.library.tuning import deferred_search, search_counts, search_stats
from explorer.gpu.modules.sparse_options import SparseOptions
from explorer.gpu.routes.dispatch import DENSE, check_mode, clocks_for, shown_clock
from explorer.gpu.swap.block_fusion import (
    SwapUnit,
    fuse_activations,
    fuse_gated_mlps,
    fuse_qkv_triples,
    part_name,
    set_module,
)
from explorer.gpu.swap.eligibility import eligibility, layer_dtype
from explorer.gpu.swap.sparsify_report import LayerTiming, SparsifyReport
from explorer.gpu.swap.unused_weights import free_unused_weights
from explorer.gpu.swap.whole_model import (
    check_whole_model,
    compare_examples,
    example_list,
    time_examples,
)

__all__ = ["set_mode", "sparsify"]

#: ``sparsify``'s low-bit weight-only dtypes and the codes of each (:mod:`explorer.gpu.swap.int4_swap`).
_LOW_BIT = {"int4": "int4", "int8-weights": "int8"}

#: Token counts ``sparsify`` measures by default: a prefill (4 x 1024) and a decode step.
DEFAULT_TOKENS = (4096, 16)


def _doctor_reasons(model, dtype, tokens) -> Callable[[str], str]:
    from explorer.diagnosis import doctor

    try:
        rep = doctor(model, dtype=dtype, tokens=tokens)
    except (ValueError, TypeError) as exc:  # the doctor cannot read this model: say so once
        return lambda fqn, why=f"doctor unavailable: {exc}": why

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
    tokens: int | Iterable[int] = DEFAULT_TOKENS,
    fuse_mlp: bool = True,
    fuse_qkv: bool = True,
    tune_tokens: tuple[int, ...] = (),
    measure: bool = True,
    decode: bool = False,
    mode: str = "auto",
    tune: bool = True,
    example_inputs=None,
    int4_scales: Mapping[str, torch.Tensor] | None = None,
) -> SparsifyReport:
    """Run a model's 2:4 ``nn.Linear`` layers sparse, wherever that is faster.

    Parameters
    ----------
    model : nn.Module
        On a CUDA GPU, with 2:4-pruned Linear weights (or ``prune=True``). Sparsify before
        ``torch.compile``: the sparse modules then compile as one custom op each.
    filter_fn : callable, optional
        ``filter_fn(module, fqn) -> bool``; only layers it accepts are considered.
    backend : {"cusparselt", "torch"}
        The explorer's cached-plan path, or torch's own ``_cslt`` ops for comparison (no
        fusion, no measurement; in float16 a forward took 0.19-0.26 s a layer on an H200 with
        cuSPARSELt 0.8, about what making a plan costs there, see docs/gpu.md).
    dtype : torch.dtype or str, optional
        float16, bfloat16, int8 (per-channel weight and per-token activation quantization),
        ``"float8_e4m3fn"`` (the same scheme in fp8 e4m3, compute capability 8.9+; see
        :mod:`explorer.gpu.modules.fp8`), ``"int4"`` (kept weights group-wise int4, 128 columns a
        scale; each layer an :class:`~explorer.gpu.modules.int4_linear.Int4Linear` that runs torch's
        int4 weight-only kernel or, at 1 to 64 tokens where it measures faster, the explorer's
        2:4 + int4 decode kernel; q/k/v and gate/up stacked as in 16 bits, see
        :mod:`explorer.gpu.swap.int4_swap`), ``"int8-weights"`` (the same with kept weights
        group-wise int8 and 16-bit activations: the 2:4 + int8 decode kernel against the 16-bit
        dense weight) or None to keep each layer's 16-bit dtype (float32 layers run in float16).
    inplace : bool
        Change ``model`` itself (default) or a deep copy (then see ``report.model``).
    prune : bool
        Magnitude-prune each considered weight to 2:4 first.
    activation_fusion : bool
        Fuse a following ``nn.ReLU``/``nn.GELU`` in an ``nn.Sequential`` into the kernel.
    tokens : int or iterable of int
        Tokens per call (batch x sequence) the model runs at; by default a prefill of 4096 and
        a decode step of 16. Each distinct layer is timed dense and sparse at each count: a
        layer faster sparse at none of them stays an ``nn.Linear``, one faster at some keeps
        its dense weight too and runs dense at the others (the report shows the memory).
        Token counts never measured take the route of the nearest measured count. ``()``
        measures nothing and swaps every eligible layer.
    fuse_mlp : bool
        Swap known SwiGLU blocks (LLaMA, Mistral, Qwen: ``gate_proj``, ``up_proj``,
        ``down_proj``, SiLU; Phi-3, GLM: ``gate_up_proj``, ``down_proj``) for one
        :class:`~explorer.gpu.modules.gated_mlp.SparseGatedMLP`. A model that is itself such
        a block (the root module) goes layer by layer.
    fuse_qkv : bool
        Run the query, key and value projections of each self-attention module (``q_proj``,
        ``k_proj``, ``v_proj`` or BERT's ``query``, ``key``, ``value``) as one sparse product
        (:class:`~explorer.gpu.modules.fused_qkv.SparseQKV`), biases included.
    tune_tokens : tuple of int
        Token counts to tune each layer's cuSPARSELt algorithm for (in a child process, a few
        seconds per distinct shape, remembered for this GPU; see
        :mod:`explorer.gpu.library.tuning`). Shapes in the shipped tables need none.
    measure : bool
        Time the layers at ``tokens`` (default). ``False`` swaps every eligible layer and lets
        each choose its route at its first call.
    decode : bool
        Also offer each layer the explorer's own decode kernel at 1 to 64 tokens
        (:mod:`explorer.gpu.cuda.decode`; it reads 9/16 of the dense bytes where cuSPARSELt has no
        matrix-vector path), kept only by layers where it measures fastest. Off by default
        until whole-model decode runs with it have been measured (see docs/gpu.md).
    mode : {"auto", "eager", "compile", "graphs"}
        How the model will run, which decides the time each layer's route is chosen by:
        ``"eager"`` (notebooks, scripts, ``generate()``) and ``"compile"``
        (``torch.compile``'s default mode) take wall time, the host's time to issue each call
        included, so a route that is faster on the GPU but costs more host time is not taken
        where the host sets the pace; ``"graphs"`` (``mode="reduce-overhead"``, your own CUDA
        graphs, ``generate(cache_implementation="static")``) takes GPU time. ``"auto"``
        (default) measures both and decides at each call: GPU time inside a CUDA-graph
        capture, wall time otherwise. Under ``torch.compile``, ``"auto"`` and ``"compile"``
        trace every decode size (64 tokens or fewer) and every layer whose sparse route does
        not pay for the op's host time as a dense matmul, so the default compile mode is never
        handed a slower op; where the compiled operator is built
        (:mod:`explorer.gpu.cuda.native`), a decode size whose wall-clock route is one it runs
        from C++ (the decode kernel, an unpadded row-major cuSPARSELt product) calls it
        instead, as eager calls of that size do (unless the whole-model eager check kept that
        size dense). A model run with CUDA graphs gains most with ``"graphs"``. In
        ``"auto"`` and ``"eager"`` the whole model is then timed eagerly against its dense
        self at each token count (inputs from ``example_inputs``, or random ``input_ids`` for
        a Hugging Face model), and layers run dense in eager mode where the sparse routes did
        not pay (``report.eager_checks``). Each layer warns once if run in a mode it was not
        sparsified for; :func:`set_mode` changes it later.
    tune : bool
        Search the cuSPARSELt algorithm for layer shapes and token counts that neither the
        shipped tables nor this GPU's cache know (in the tuner's child process, bounded per
        shape, remembered per GPU; the report says how long it took). ``False`` uses the
        library's default algorithm there, which is often slower than dense.
    example_inputs : optional
        An input the model takes (a tensor, a tuple of arguments or a dict of keyword
        arguments such as ``{"input_ids": ids}``), or a list of them, one per token count.
        Each is timed through the whole model before the swap and after it, in the chosen
        mode, and the report gives the measured whole-model speedup beside the per-layer
        estimate, with the share of time the dense GPU is busy (``report.model_speeds``).

    int4_scales : mapping of str to torch.Tensor, optional
        ``dtype="int4"`` (or ``"int8-weights"``) only: the scales a joint prune-and-quantize
        recorded (``prune(..., quantize="int4").scales``, or ``quantize="int8"``'s for
        ``"int8-weights"``; ``{layer: [out, in / G]}``), so that weights
        already on their grid keep their codes exactly (the group size is read from each
        tensor's shape); layers without one are rounded to nearest with ``max|kept| / 7``.

    Returns
    -------
    SparsifyReport
        Swapped and skipped layers with reasons, per-layer dense and sparse times, and
        ``report.model``, the sparsified model.

    Raises
    ------
    TypeError
        ``model`` is already compiled (sparsify the module first, then compile it).
    ValueError
        Unknown backend, dtype or mode, or token counts that are not positive integers.

    Examples
    --------
    >>> from torch import nn
    >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    >>> report = sparsify(model.half().cuda(), prune=True, measure=False)  # doctest: +GPU
    >>> [(fqn, why.split(" (")[0]) for fqn, why in report.skipped]
    [('2', 'float16 sparse weights need rows and columns in multiples of 16')]
    >>> type(model[0]).__name__
    'SparseLinear'
    """
    from explorer.gpu.modules.sparse_linear import SparseLinear

    if backend not in ("cusparselt", "torch"):
        raise ValueError(f"backend {backend!r} unknown; expected 'cusparselt' or 'torch'")
    check_mode(mode)
    fmt = _LOW_BIT.get(dtype.strip().lower()) if isinstance(dtype, str) else None
    if fmt is not None:
        if backend != "cusparselt":
            raise ValueError(f"dtype={dtype!r} runs the explorer's own kernels: leave backend out")
        counts = _token_counts(tokens)
        fuse = (fuse_qkv, fuse_mlp)
        return _sparsify_int4(
            model, filter_fn, inplace, prune, counts, mode, int4_scales, fuse, fmt
        )
    if int4_scales:
        raise ValueError(
            f"int4_scales are for dtype='int4' or 'int8-weights', but dtype is {dtype!r}. Hint: "
            "sparsify(model, dtype='int4', int4_scales=result.scales)"
        )
    if isinstance(dtype, str):
        dtype = parse_dtype(dtype, allowed=SPARSE_DTYPES)
    _refuse_compiled(model)
    counts = _token_counts(tokens)
    measure = measure and bool(counts) and backend == "cusparselt"
    examples = example_list(example_inputs)
    if not inplace:
        model = copy.deepcopy(model)
    report = SparsifyReport(backend=backend, dtype=dtype_name(dtype or "auto"), mode=mode)
    report.model = model
    explain = None
    targets, places = _targets(model, filter_fn, report)
    if prune:
        _prune_24(targets)
    if tune and measure and not tune_tokens:
        # shapes the tables know are not searched again; at most a few counts per shape
        tune_tokens = search_counts(counts)
    dense_runs = time_examples(model, examples, mode) if examples else []
    options = SparseOptions(
        tune_tokens=tune_tokens, keep_dense=measure, decode=decode and backend == "cusparselt"
    )
    searched_before = search_stats()
    units: list[SwapUnit] = []
    # one child process searches every layer's unknown shapes, within one time budget
    with deferred_search(budget_s=MODEL_SEARCH_BUDGET_S):
        if fuse_qkv and backend == "cusparselt":
            units += fuse_qkv_triples(model, targets, dtype, report, options)
        if fuse_mlp:
            units += fuse_gated_mlps(model, targets, dtype, report, options, backend)
        done = {f for u in units for f in u.layers}
        for fqn, mod in targets:
            if fqn in done:
                continue
            dt = layer_dtype(mod, dtype)
            why = eligibility(mod, dt)
            if why is None:
                try:
                    new = SparseLinear.from_linear(mod, options, dtype=dt, backend=backend)
                except (ValueError, TypeError, RuntimeError) as exc:
                    why = f"compression failed: {exc}"
            if why is not None:
                if explain is None:
                    explain = _doctor_reasons(model, dt, max(counts or (1024,)))
                extra = explain(fqn)
                report.skipped.append((fqn, f"{why}{' | doctor: ' + extra if extra else ''}"))
                continue
            for place in places[id(mod)]:
                set_module(model, place, new)
            units.append(SwapUnit(fqn, new, dict.fromkeys(places[id(mod)], mod), {fqn: mod}))
    report.search_s = _search_note(search_stats(), searched_before, report)
    if activation_fusion:
        fuse_activations(model, units)
    set_mode(model, mode)
    if measure:
        units = _measure(model, units, counts, report, mode)
        if mode in ("auto", "eager") and units:
            units = check_whole_model(model, units, counts, examples, report, mode)
        free_unused_weights(model, units, mode, report)
    for unit in units:
        for fqn, mod in unit.layers.items():
            report.swapped.append((fqn, (mod.out_features, mod.in_features)))
    if dense_runs:
        compare_examples(model, examples, dense_runs, mode, report)
    shared = [fqn for fqn, mod in targets if len(places[id(mod)]) > 1]
    for fqn in shared:
        report.notes.append(
            f"{fqn} is one module used at {', '.join(places[id(dict(targets)[fqn])])}: "
            "every place runs the same new module"
        )
    return report


def _refuse_compiled(model: nn.Module) -> None:
    """Raise ``TypeError`` for a ``torch.compile`` wrapper, naming the fix."""
    if hasattr(model, "_orig_mod") and type(model).__name__ == "OptimizedModule":
        raise TypeError(
            "this model is already compiled (torch.compile); sparsify the module it wraps, then "
            "compile that. Hint: sparsify(model._orig_mod); model = torch.compile(model._orig_mod)."
        )


def _search_note(now, before, report: SparsifyReport) -> float:
    """Note in ``report`` what this call's algorithm search did; its seconds."""
    searches, seconds, cut, crashes = (a - b for a, b in zip(now, before, strict=True))
    if searches:
        bounded = (
            f"; {cut} ran out of their share of the {MODEL_SEARCH_BUDGET_S:.0f} s bound and keep "
            "the best config tried, or the default (a short share: until a later search)"
            if cut
            else ""
        )
        crashed = (
            f"; {crashes} config{'s' if crashes > 1 else ''} crashed the search's child "
            f"process and {'were' if crashes > 1 else 'was'} skipped"
            if crashes
            else ""
        )
        report.notes.append(
            f"searched the cuSPARSELt algorithm of {searches} shape and token-count "
            f"problem{'s' if searches > 1 else ''} no table knew, in {seconds:.1f} s"
            f"{bounded}{crashed} (remembered for this GPU; tune=False skips the search)"
        )
    return seconds


def _prune_24(targets) -> None:
    """Magnitude-prune each target's weight to 2:4 in place (where its width allows)."""
    from explorer.masks import make_mask

    with torch.no_grad():
        for _, mod in targets:
            if mod.weight.shape[1] % 4 == 0:
                mod.weight.mul_(make_mask(mod.weight.detach(), "2:4").to(mod.weight.device))


def _sparsify_int4(
    model, filter_fn, inplace, prune, counts, mode, scales, fuse, fmt="int4"
) -> SparsifyReport:
    """``sparsify(dtype="int4" | "int8-weights")``: :mod:`explorer.gpu.swap.int4_swap`."""
    from explorer.gpu.swap.int4_swap import swap_int4_layers

    _refuse_compiled(model)
    if not inplace:
        model = copy.deepcopy(model)
    label = "int4" if fmt == "int4" else "int8-weights"
    report = SparsifyReport(backend="explorer", dtype=label, mode=mode)
    report.model = model
    targets, places = _targets(model, filter_fn, report)
    if prune:
        _prune_24(targets)
    swap_int4_layers(model, targets, places, report, counts, mode, scales, *fuse, fmt=fmt)
    return report


def set_mode(model: nn.Module, mode: str) -> None:
    """Choose every sparse layer's routes for execution mode ``mode`` from now on.

    Parameters
    ----------
    model : nn.Module
        A model :func:`sparsify` changed (other modules are left alone).
    mode : {"auto", "eager", "compile", "graphs"}
        See :func:`sparsify`.

    Examples
    --------
    >>> set_mode(nn.Linear(4, 4), "eager")  # nothing sparse in it: nothing to do
    >>> set_mode(nn.Linear(4, 4), "fast")
    Traceback (most recent call last):
    ...
    ValueError: mode 'fast' unknown; expected one of ('auto', 'eager', 'compile', 'graphs'). ...
    """
    from explorer.gpu.modules.int4_linear import Int4Linear
    from explorer.gpu.modules.sparse_linear import SparseLinear

    check_mode(mode)
    for mod in model.modules():
        if isinstance(mod, SparseLinear | Int4Linear):
            mod.set_mode(mode)


def _token_counts(tokens) -> tuple[int, ...]:
    items = (tokens,) if isinstance(tokens, int) else tuple(tokens or ())
    bad = [t for t in items if isinstance(t, bool) or not isinstance(t, int) or t < 1]
    if bad:
        raise ValueError(
            f"tokens must be positive integers (tokens per call, batch x sequence); got {bad!r}. "
            "Hint: tokens=(4096, 16) for a prefill and a decode step."
        )
    return tuple(sorted(set(items), reverse=True))


def _targets(model, filter_fn, report) -> tuple[list, dict[int, list[str]]]:
    """The Linear layers to consider, and every place (fqn) each module object sits at."""
    places: dict[int, list[str]] = {}
    for fqn, mod in model.named_modules(remove_duplicate=False):
        if isinstance(mod, nn.Linear):
            places.setdefault(id(mod), []).append(fqn)
    targets = []
    for fqn, mod in model.named_modules():
        if not isinstance(mod, nn.Linear):
            continue
        if filter_fn is not None and not filter_fn(mod, fqn):
            report.skipped.append((fqn, "excluded by filter_fn"))
            continue
        if type(mod) is not nn.Linear:
            report.skipped.append(
                (
                    fqn,
                    f"{type(mod).__name__} is a subclass of nn.Linear whose forward may compute "
                    "something else (an adapter, a quantized layer); kept as it is",
                )
            )
            continue
        targets.append((fqn, mod))
    return targets, places


def _measure(model, units, counts, report, mode) -> list:
    """Time every swapped unit at each token count; undo units that never win.

    Returns the units kept sparse (their weights are freed later, see
    :func:`~explorer.gpu.swap.unused_weights.free_unused_weights`).

    A unit wins if a sparse route is chosen at some token count by the clock of ``mode``
    (both clocks for ``"auto"``, which decides per call).
    """
    clocks = clocks_for(mode)
    shown = shown_clock(mode)
    from explorer.gpu.cuda.ops import call_overhead_us
    from explorer.gpu.modules.sparse_linear import SparseLinear

    call_overhead_us(measure=True)  # once: what the compiled op adds, for compile-mode routes
    kept = []
    with torch.no_grad():
        for unit in units:
            fqn, new = unit.fqn, unit.new
            layers = [m for m in new.modules() if isinstance(m, SparseLinear)]
            first = layers[0]
            dev = first.compressed.device
            act = first.dtype if first.dtype.itemsize == 2 else first.out_dtype
            for t in counts:
                new(torch.randn(t, first.in_features, device=dev, dtype=act))
            wins, start = False, len(report.timings)
            for i, layer in enumerate(layers):
                name = fqn if len(layers) == 1 else f"{fqn}.{part_name(new, layer, i)}"
                measured = layer.measured()
                for n in sorted({C.decision_tokens(t, layer.dtype) for t in counts}, reverse=True):
                    found = measured.get(n)
                    for clock in (shown, *(c for c in clocks if c != shown)):
                        times = found.times(clock) if found is not None else {}
                        route = found.route(clock) if times else None
                        sparse = [v for r, v in times.items() if r.sparse_weight]
                        report.timings.append(
                            LayerTiming(
                                name,
                                (layer.out_features, layer.in_features),
                                n,
                                times.get(DENSE),
                                min(sparse) if sparse else None,
                                route.label if route is not None else "None",
                                clock,
                                times.get(route) if route is not None else None,
                            )
                        )
                        if clock in clocks:
                            wins = wins or (route is not None and route.sparse_weight)
                # a fixed route (int8, a fixed layout) is not measured against dense: it stays;
                # an fp8 layer's dense route is FP8 dense, so it stays too, on either route
                wins = wins or not measured or first.dtype == torch.float8_e4m3fn
            if not wins:
                unit.put_back(model)
                times = "; ".join(
                    f"{t.fqn} at {t.tokens} tokens: dense {t.dense_ms:.4f} ms, sparse "
                    + (f"{t.sparse_ms:.4f} ms" if t.sparse_ms else "no correct route")
                    + f" ({t.clock} time)"
                    for t in report.timings[start:]
                    if t.dense_ms and t.clock == shown
                )
                report.dense_again(unit, f"not faster sparse ({times})")
                continue
            kept.append(unit)
    return kept
