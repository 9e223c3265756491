"""The headline benchmark: whole models, dense against 2:4 sparse, side by side in one run.

Each model is a transformers architecture with random weights (the shapes are what matter for
speed), every ``nn.Linear`` but ``lm_head`` magnitude-pruned to 2:4. The same dense masked
model is timed as it is, after torch's own ``to_sparse_semi_structured`` path
(``sparsify(backend="torch")``), and after :func:`explorer.sparsify`, eager and under
``torch.compile`` in its default mode and with CUDA graphs (``mode="reduce-overhead"``), all
with CUDA events in one process: every eager time first, before anything is compiled there,
then each compiled variant beside dense alone (:mod:`explorer.bench.compiled_pairs`). Beside
the achieved speedup each row gives the ceiling: the dense
model's time with its sparse layers' dense time replaced by their measured sparse time, i.e.
what the model could gain if nothing but those layers changed (an estimate from measured
parts). Decode steps are single forward passes of 1 token per sequence without a KV cache.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from explorer.bench.compiled_pairs import bench_rounds, compiled_columns, too_slow_to_time
from explorer.dtypes import dtype_name
from explorer.gpu.library.cusparselt import decision_tokens
from explorer.gpu.routes.timing import interleaved_runs, paired_ratio

__all__ = [
    "MODEL_SPECS",
    "ModelSpec",
    "bench_whole_model",
    "build_model",
    "ceiling",
    "say_checks",
    "sparse_candidate",
]


@dataclass(frozen=True)
class ModelSpec:
    """A benchmark model: a transformers config and the (batch, sequence) runs timed on it."""

    kind: str  # "llama", "qwen2" or "bert"
    config: dict
    runs: tuple[tuple[int, int], ...]
    description: str


_LLAMA_RUNS = ((4, 1024), (1, 4096), (16, 1), (1, 1))
MODEL_SPECS = {
    "llama-1b": ModelSpec(
        "llama",
        dict(
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=128256,
            max_position_embeddings=8192,
            tie_word_embeddings=True,
        ),
        _LLAMA_RUNS,
        "LLaMA-3.2-1B-like: 16 layers, hidden 2048, MLP 8192, 32 heads, 8 KV heads",
    ),
    "llama-8b": ModelSpec(
        "llama",
        dict(
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=4,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=128256,
            max_position_embeddings=8192,
        ),
        _LLAMA_RUNS,
        "LLaMA-3-8B-like layers: 4 layers, hidden 4096, MLP 14336, 32 heads, 8 KV heads",
    ),
    "qwen2-1.5b": ModelSpec(
        "qwen2",
        dict(
            hidden_size=1536,
            intermediate_size=8960,
            num_hidden_layers=8,
            num_attention_heads=12,
            num_key_value_heads=2,
            vocab_size=151936,
            max_position_embeddings=8192,
            tie_word_embeddings=True,
        ),
        _LLAMA_RUNS,
        "Qwen2-1.5B-like: 8 layers, hidden 1536, MLP 8960, 12 heads, 2 KV heads, q/k/v biases",
    ),
    "phi3-mini": ModelSpec(
        "phi3",
        dict(
            hidden_size=3072,
            intermediate_size=8192,
            num_hidden_layers=4,
            num_attention_heads=32,
            num_key_value_heads=32,
            vocab_size=32064,
            max_position_embeddings=8192,
            pad_token_id=0,
        ),
        _LLAMA_RUNS,
        "Phi-3-mini-like layers: 4 layers, hidden 3072, MLP 8192, q/k/v and gate/up already "
        "fused in one Linear each (shapes outside the shipped tuning tables)",
    ),
    "bert-base": ModelSpec(
        "bert",
        dict(
            hidden_size=768,
            intermediate_size=3072,
            num_hidden_layers=12,
            num_attention_heads=12,
            hidden_act="gelu",
        ),
        ((8, 512), (32, 128)),
        "BERT-base-like encoder: 12 layers, hidden 768, MLP 3072 (no decode: an encoder)",
    ),
}


def build_model(name: str, dtype: torch.dtype, layers: int | None = None) -> nn.Module:
    """Model ``name`` of :data:`MODEL_SPECS` on the GPU, random weights, Linears 2:4 but the head.

    Parameters
    ----------
    name : str
        A key of :data:`MODEL_SPECS`.
    dtype : torch.dtype
        The model's dtype.
    layers : int, optional
        Number of transformer layers, instead of the spec's (32 gives a whole LLaMA-3-8B-like
        model: the spec's few layers keep benchmarks short, but over-weight the dense head).

    Returns
    -------
    torch.nn.Module
        The model in eval mode.
    """
    import transformers

    from explorer.bench.runner import mask24

    spec = MODEL_SPECS[name]
    config = {**spec.config, **({"num_hidden_layers": layers} if layers else {})}
    family = {"llama": "Llama", "qwen2": "Qwen2", "phi3": "Phi3", "bert": "Bert"}[spec.kind]
    config = getattr(transformers, f"{family}Config")(**config)
    torch.manual_seed(0)
    with torch.device("cuda"):
        if spec.kind == "bert":
            model = transformers.BertModel(config, add_pooling_layer=False)
        else:
            model = getattr(transformers, f"{family}ForCausalLM")(config)
    model = model.to(dtype).eval()
    with torch.no_grad():
        for fqn, mod in model.named_modules():
            if isinstance(mod, nn.Linear) and sparse_candidate(mod, fqn):
                mod.weight.copy_(mask24(mod.weight))
    return model


def sparse_candidate(mod: nn.Module, fqn: str) -> bool:
    """The ``filter_fn`` of the benchmark's models: every layer but the language-model head.

    The head is tied to the embedding, and not pruned.

    Parameters
    ----------
    mod : torch.nn.Module
        The module.
    fqn : str
        Its fully qualified name.

    Returns
    -------
    bool

    Examples
    --------
    >>> layer = nn.Linear(4, 4)
    >>> sparse_candidate(layer, "layers.0.mlp.up"), sparse_candidate(layer, "lm_head")
    (True, False)
    """
    return not fqn.endswith("lm_head")


def ceiling(dense_ms: float, layer_dense_ms: float, layer_sparse_ms: float) -> float | None:
    """Whole-model speedup if only the sparse layers changed (an estimate from measured parts).

    Parameters
    ----------
    dense_ms : float
        The dense model's time.
    layer_dense_ms : float
        The sparse layers' time, dense.
    layer_sparse_ms : float
        Their time, sparse.

    Returns
    -------
    float or None
        None when the times are inconsistent (rest below zero) or not positive.

    Examples
    --------
    >>> round(ceiling(10.0, 5.0, 5.0 / 1.4), 3)
    1.167
    """
    rest = dense_ms - layer_dense_ms
    if dense_ms <= 0 or rest < 0 or layer_sparse_ms <= 0:
        return None
    return dense_ms / (rest + layer_sparse_ms)


def say_checks(say, label: str, report) -> None:
    """Log the whole-model checks behind a ``SparsifyReport``: each eager pair, and the weighing.

    The report's repr gives one figure per token count; the log keeps what it rests on (how
    many layers chose a sparse route at each count by each clock, each count's eager pairs,
    and the CUDA-graph ratio weighed before original modules go back).

    Parameters
    ----------
    say : callable
        Takes one line of text.
    label : str
        What the line is about (model and dtype).
    report : SparsifyReport
        The report of one ``sparsify`` call.

    Examples
    --------
    >>> from explorer.gpu.swap.eager_check import EagerCheck
    >>> from explorer.gpu.swap.sparsify_report import SparsifyReport
    >>> report = SparsifyReport()
    >>> report.eager_checks = [EagerCheck(16, 6.1, 6.6, (6.2, 6.1))]
    >>> say_checks(print, "m", report)
    m: eager checks [EagerCheck(16 tokens: sparse routes 0.92x, kept dense: 1.02x)]
    """
    tally = report.route_tally()
    if tally:
        said = (f"{n} tokens {c} {k}/{m}" for (n, c), (k, m) in tally.items())
        say(f"{label}: layers on a sparse route, of those timed: {', '.join(said)}")
    if report.eager_checks:
        say(f"{label}: eager checks {report.eager_checks!r}")
    if report.put_back_check is not None:
        say(f"{label}: {report.put_back_check!r}: {report.put_back_check.why()}")


def _relerr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _logits(out) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def bench_whole_model(
    name: str,
    dtype: torch.dtype = torch.bfloat16,
    compiled: bool = True,
    torch_path: bool = True,
    runs: tuple[tuple[int, int], ...] | None = None,
    log=None,
    decode_kernel: bool = True,
    model_speed_modes: tuple[str, ...] = (),
    control_copy: bool = True,
    on_row: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Time one model of :data:`MODEL_SPECS` every way, at each of its runs.

    Parameters
    ----------
    name : str
    dtype : torch.dtype
        bfloat16 or float16.
    compiled : bool
        Also time ``torch.compile`` of the dense and the sparsified model (both compile modes).
    torch_path : bool
        Also time torch's semi-structured path (eager, prefill runs: it fails on decode); where
        one forward of it takes more than :data:`~explorer.bench.compiled_pairs.SLOWEST_TIMED`
        times dense's, the row's ``torch_error`` says so instead.
    runs : tuple of (batch, sequence), optional
        Defaults to the spec's.
    decode_kernel : bool
        For decode runs, also time the model after ``sparsify(..., decode=True)``, which offers
        every layer the explorer's decode kernel (``decode_*`` keys of the row).
    model_speed_modes : tuple of str
        Also time each run with :func:`explorer.bench.model_speed.measure_model_speed` (the
        function sweeps and the dashboard call on a user's model) in these modes of
        :data:`~explorer.results.model_speed.SPEED_MODES`: ``model_speed_<mode>`` keys of the
        row (a failure: ``model_speed_<mode>_error``).
    control_copy : bool, default True
        Also time an unchanged dense copy in every mode (``control_speedup*``: 1.0 but for noise).
    log : file-like, optional
        Where progress lines are printed; None prints nothing.
    on_row : callable, optional
        Called with each row once its eager and compiled times are in (before the
        ``model_speed_*`` columns and the first row's timing tables, which come last), so a
        caller can keep what a run reached if the process is stopped later.

    Returns
    -------
    list of dict
        One row per run.
    """
    from explorer.gpu import sparsify

    spec = MODEL_SPECS[name]
    runs = tuple(runs or spec.runs)
    counts = tuple(sorted({b * s for b, s in runs}, reverse=True))
    dense = build_model(name, dtype)
    sparse = copy.deepcopy(dense)
    began = time.perf_counter()
    with torch.no_grad():
        rep = sparsify(sparse, filter_fn=sparse_candidate, tokens=counts)
    sparsify_s = time.perf_counter() - began
    say = (lambda msg: print(f"[models] {msg}", file=log, flush=True)) if log else (lambda m: 0)
    say(f"{name} {dtype}: {rep!r}")
    say_checks(say, f"{name} {dtype}", rep)
    say(
        f"{name} {dtype}: sparsify took {sparsify_s:.1f} s, of which {rep.search_s:.1f} s "
        "searched algorithms for shapes no table knew"
    )
    with_decode = None
    if decode_kernel and spec.kind != "bert" and any(s == 1 for _, s in runs):
        with_decode = copy.deepcopy(dense)
        with torch.no_grad():
            rep_decode = sparsify(
                with_decode, filter_fn=sparse_candidate, tokens=counts, decode=True
            )
        say(f"{name} {dtype} with the decode kernel: {rep_decode!r}")
        say_checks(say, f"{name} {dtype} with the decode kernel", rep_decode)
    torch_model = None
    if torch_path:
        torch_model = copy.deepcopy(dense)
        sparsify(
            torch_model,
            filter_fn=sparse_candidate,
            backend="torch",
            fuse_mlp=False,
            fuse_qkv=False,
            measure=False,
        )
    control = copy.deepcopy(dense) if control_copy else None  # the A/A control: equal work
    rows = []
    calls = []
    inputs = []
    # 1. Every eager time first, in a process that has compiled nothing yet: what a notebook
    #    user runs, without the compiler's leftovers (caches, hooks, objects for the garbage
    #    collector to walk) weighing on the host side of each call.
    for batch, seq in runs:
        gen = torch.Generator(device="cuda").manual_seed(batch * 100003 + seq)
        vocab = spec.config.get("vocab_size", 30522)
        ids = torch.randint(0, vocab, (batch, seq), device="cuda", generator=gen)

        def call(model, ids=ids):
            def f():
                with torch.no_grad():
                    return model(input_ids=ids)

            return f

        calls.append(call)
        inputs.append(ids)
        n_tokens = batch * seq
        decode = seq == 1 and spec.kind != "bert"
        row = dict(
            suite="models",
            model=name,
            label=f"{name} {batch}x{seq}",
            description=spec.description,
            dtype=dtype_name(dtype),
            batch=batch,
            seq=seq,
            n=n_tokens,
            m=0,
            k=0,
            layers_sparse=len(rep.swapped),
            layers_dense=len(rep.skipped),
            status="ok",
        )
        with torch.no_grad():
            ref = _logits(call(dense)())
            row["relerr"] = _relerr(_logits(call(sparse)()), ref)
            if with_decode is not None and decode:
                row["decode_relerr"] = _relerr(_logits(call(with_decode)()), ref)
        eager = {"dense": call(dense), "explorer": call(sparse)}
        if control is not None:
            eager["control"] = call(control)
        if with_decode is not None and decode:
            eager["decode"] = call(with_decode)
        if torch_model is not None and not decode:
            try:  # its first call (call_s warms up) also shows whether torch's path runs here
                slow = too_slow_to_time(call(torch_model), call(dense))
            except (RuntimeError, NotImplementedError) as exc:
                row["torch_error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
            else:
                if slow is None:
                    eager["torch"] = call(torch_model)
                else:
                    row["torch_error"] = slow
        # side by side: each variant in turn, round after round (the host's speed drifts); a
        # speedup is the median of the rounds' paired ratios; each turn after one untimed call;
        # short (host-bound) forwards get more rounds
        rounds = bench_rounds(eager.values(), 4)  # 3 timed and 1 lead-in of each
        runs = interleaved_runs(eager, rounds=rounds, iters=3, lead_in=1)
        row["rounds"] = rounds
        for key, times in runs.items():
            row[f"{key}_ms"] = statistics.median(times)
            if key != "dense":
                ratio = paired_ratio(runs["dense"], times)
                row["speedup" if key == "explorer" else f"{key}_speedup"] = ratio
        est = rep.layer_estimate(decision_tokens(n_tokens, dtype), clock="wall")
        if est:
            row["layer_dense_ms"], row["layer_sparse_ms"] = est
            row["ceiling"] = ceiling(row["dense_ms"], *est)
        rows.append(row)
    # 2. Then each compiled variant, recompiled from scratch per run.
    for row, call in zip(rows, calls, strict=True):
        decode = row["seq"] == 1 and spec.kind != "bert"
        if compiled:
            variants = {"dense": dense, "sparse": sparse, "control": control}
            variants["decode"] = with_decode if decode else None
            compiled_columns(row, call, variants)
            est_gpu = rep.layer_estimate(decision_tokens(row["n"], dtype), clock="gpu")
            if row.get("speedup_compiled") and est_gpu:  # graph replays: the GPU's time
                row["ceiling_compiled"] = ceiling(row["dense_compiled_ms"], *est_gpu)
        speeds = {k: v for k, v in row.items() if "speedup" in k or "ceiling" in k}
        shown = ", ".join(f"{k} {v:.2f}x" for k, v in speeds.items() if isinstance(v, float))
        say(
            f"{name} {row['dtype']} {row['batch']}x{row['seq']}: dense {row['dense_ms']:.3f} ms, "
            f"{shown}, err {row['relerr']:.1e}"
        )
        if on_row is not None:
            on_row(row)
    # 3. The shared whole-model timing, in the modes asked for.
    for row, ids in zip(rows, inputs, strict=True):
        _model_speed_columns(row, dense, ids, model_speed_modes, dtype, counts)
    rows[0]["timings"] = rep.timing_table()
    rows[0]["sparsify_s"], rows[0]["search_s"] = sparsify_s, rep.search_s
    if with_decode is not None:
        rows[0]["timings_decode"] = rep_decode.timing_table()
    del dense, sparse, torch_model, with_decode, control
    torch.cuda.empty_cache()
    return rows


def _model_speed_columns(
    row: dict,
    dense: nn.Module,
    ids: torch.Tensor,
    modes: tuple[str, ...],
    dtype: torch.dtype,
    served: tuple[int, ...],
) -> None:
    """Add ``model_speed_<mode>`` to ``row`` for each of ``modes``.

    The column is dense over sparse, from :func:`measure_model_speed` on a copy of ``dense``
    sparsified for every count in ``served`` (as the benchmark's own sparse model is), timed at
    ``ids``.
    """
    from explorer.bench.model_speed import measure_model_speed

    for mode in modes:
        try:
            result = measure_model_speed(
                dense,
                {"input_ids": ids},
                tokens=(row["n"],),
                mode=mode,
                dtype=dtype,
                filter_fn=sparse_candidate,
                sparsify_for=served,
            )
        except (RuntimeError, ValueError) as exc:  # a failure is a result to report
            row[f"model_speed_{mode}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            continue
        if result.measured:
            row[f"model_speed_{mode}"] = result.speeds[0].speedup
        else:
            row[f"model_speed_{mode}_error"] = str(result.reason)
