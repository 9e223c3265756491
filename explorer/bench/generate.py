"""``generate()`` as the user runs it: tokens per second, dense against sparse, in one process.

For a model of :data:`explorer.bench.models.MODEL_SPECS` (random weights, every ``nn.Linear``
but ``lm_head`` pruned 2:4) this times Hugging Face ``model.generate`` (greedy, a fixed prompt
and a fixed number of new tokens) at batch 1 and 8, with the dynamic cache in eager mode and with
``cache_implementation="static"`` (transformers compiles the decoding step with CUDA graphs; the
sparse models are then set to ``mode="graphs"``, as the docs ask), for the dense model,
``sparsify()`` defaults and ``sparsify(decode=True)``, beside an unchanged copy of the dense
model (the A/A control: its ratio to dense is the noise of equal work); and the time to first
token of a 1024-token prompt, measured first (after the static-cache runs, which compile the
step and keep CUDA-graph memory pools, every model's eager prefill ran slower). With the dynamic
cache the four models are timed in turn, nine rounds after a warm-up call each, each round
starting one model further on; with the static cache each model's step is compiled beside dense
alone, after a Dynamo reset (:func:`static_in_pairs`: compiled variants of one model class in
one process slow each other's steps, see :mod:`explorer.bench.compiled_pairs`). Each speedup is
the median of the rounds' paired ratios to dense timed in the same rounds (the host's speed
drifts).
All are timed with CUDA events. The generated tokens of each sparse model are compared
with the dense model's: random weights give nearly flat logits, so greedy choices may part
where two logits are closer than the 16-bit rounding; the row reports the share of equal tokens.
"""

from __future__ import annotations

import copy
import statistics

import torch

from explorer.dtypes import dtype_name
from explorer.gpu.routes.timing import paired_ratio, round_order

__all__ = [
    "ROUNDS",
    "bench_generate",
    "generate_kwargs",
    "interleaved_generate",
    "model_name",
    "static_in_pairs",
    "timed_generate",
]

#: Timed ``generate`` calls of each model (rounds).
ROUNDS = 9


def generate_kwargs(ids, new_tokens: int, static: bool) -> dict:
    """The keyword arguments of a timed ``generate``: greedy, exactly ``new_tokens`` new tokens.

    Parameters
    ----------
    ids : torch.Tensor
        The prompt, ``[batch, length]``.
    new_tokens : int
        Tokens generated per sequence.
    static : bool
        ``cache_implementation="static"`` (transformers compiles the step).

    Returns
    -------
    dict
        For ``model.generate(ids, **kwargs)``.

    Examples
    --------
    >>> kw = generate_kwargs(torch.ones(1, 4, dtype=torch.long), 8, static=True)
    >>> kw["max_new_tokens"], kw["min_new_tokens"], kw["do_sample"], kw["cache_implementation"]
    (8, 8, False, 'static')
    """
    kw = dict(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=0,
        attention_mask=torch.ones_like(ids),
    )
    if static:
        kw["cache_implementation"] = "static"
    return kw


def timed_generate(model, ids, kw) -> tuple[float, torch.Tensor]:
    """One ``model.generate(ids, **kw)`` timed with CUDA events.

    Parameters
    ----------
    model : transformers model
        A model with ``generate``, on a CUDA device.
    ids : torch.Tensor
        The prompt.
    kw : dict
        From :func:`generate_kwargs`.

    Returns
    -------
    (float, torch.Tensor)
        Milliseconds, and the generated ids (prompt included).
    """
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    out = model.generate(ids, **kw)
    end.record()
    end.synchronize()
    return start.elapsed_time(end), out


def interleaved_generate(
    variants: dict, ids, new_tokens: int, static: bool = False, rounds: int = ROUNDS
) -> dict:
    """``{name: (median ms, per-round ms, new tokens)}`` of greedy ``generate`` calls.

    Every variant runs once per round in turn (the host's speed drifts between rounds), each round
    starting one variant further on (:func:`~explorer.gpu.routes.timing.round_order`), after one
    warm-up call each (which compiles the step for a static cache). Timed with CUDA events.

    Parameters
    ----------
    variants : dict
        ``{name: model}``, Hugging Face models with ``generate``.
    ids : torch.Tensor
        The prompt, ``[batch, length]`` token ids on the models' device.
    new_tokens : int
        Tokens generated per sequence (exactly: ``min_new_tokens`` too).
    static : bool, optional
        ``cache_implementation="static"`` (transformers compiles the step).
    rounds : int, optional
        Timed calls per variant.

    Returns
    -------
    dict
        ``{name: (median ms, [ms per round], generated ids of the last round)}``.
    """
    kw = generate_kwargs(ids, new_tokens, static)
    runs: dict = {name: [] for name in variants}
    outs: dict = {}
    with torch.no_grad():
        for model in variants.values():
            model.generate(ids, **kw)  # warm-up (and, static, compiling and graph capture)
        for r in range(rounds):
            for name in round_order(list(variants), r):
                ms, out = timed_generate(variants[name], ids, kw)
                runs[name].append(ms)
                outs[name] = out[:, ids.shape[1] :]
    return {name: (statistics.median(ts), ts, outs[name]) for name, ts in runs.items()}


def static_in_pairs(
    variants: dict, ids, new_tokens: int, graphs: tuple[str, ...] = (), rounds: int = ROUNDS
) -> tuple[dict, dict]:
    """Static-cache ``generate`` of each variant beside dense alone, one pair at a time.

    For each variant but ``"dense"``: Dynamo's caches are reset, the variants named in ``graphs``
    are set to ``mode="graphs"`` (their step runs in CUDA graphs) and back to ``"auto"`` after,
    and the pair is timed by :func:`interleaved_generate`. A pair that fails is left out and its
    error kept; the others still run.

    Parameters
    ----------
    variants : dict
        ``{name: model}`` with a ``"dense"`` entry.
    ids : torch.Tensor
        The prompt, ``[batch, length]``.
    new_tokens : int
        Tokens generated per sequence.
    graphs : tuple of str, optional
        Variants set to ``mode="graphs"`` while timed (the sparsified ones).
    rounds : int, optional
        Timed calls per variant and pair.

    Returns
    -------
    (dict, dict)
        ``{name: (median ms, per-round ms, generated ids)}`` as :func:`interleaved_generate`
        gives, dense's from its first pair; and ``{name: dense's per-round ms in that name's
        pair, or the error message}``.
    """
    from explorer.gpu import set_mode

    timed: dict = {}
    dense_rounds: dict = {}
    for key, model in variants.items():
        if key == "dense":
            continue
        torch._dynamo.reset()
        if key in graphs:
            set_mode(model, "graphs")
        try:
            pair = interleaved_generate(
                {"dense": variants["dense"], key: model}, ids, new_tokens, True, rounds
            )
        except Exception as exc:  # a failure is a result to report, not a crash
            dense_rounds[key] = f"{type(exc).__name__}: {str(exc)[:200]}"
            continue
        finally:
            if key in graphs:
                set_mode(model, "auto")
        timed.setdefault("dense", pair["dense"])
        timed[key] = pair[key]
        dense_rounds[key] = pair["dense"][1]
    torch._dynamo.reset()
    return timed, dense_rounds


def model_name(name: str, layers: int | None = None) -> str:
    """The model's name in a row: the spec's, with its layers where they are not the spec's.

    Parameters
    ----------
    name : str
        A model of :data:`explorer.bench.models.MODEL_SPECS`.
    layers : int, optional
        Transformer layers built instead of the spec's.

    Returns
    -------
    str

    Examples
    --------
    >>> model_name("llama-8b"), model_name("llama-8b", 32)
    ('llama-8b', 'llama-8b, 32 layers')
    """
    return name if layers is None else f"{name}, {layers} layers"


def bench_generate(
    name: str = "llama-8b",
    dtype: torch.dtype = torch.bfloat16,
    batches: tuple[int, ...] = (1, 8),
    prompt: int = 32,
    new_tokens: int = 128,
    static: bool = True,
    ttft_prompt: int = 1024,
    log=None,
    layers: int | None = None,
    dynamic: bool = True,
) -> list[dict]:
    """Tokens per second of ``generate`` for dense, ``sparsify()`` and ``decode=True``.

    Parameters
    ----------
    name : str, optional
        A model of :data:`explorer.bench.models.MODEL_SPECS`.
    dtype : torch.dtype, optional
        The model's dtype.
    batches : tuple of int, optional
        Batch sizes.
    prompt : int, optional
        Prompt length in tokens.
    new_tokens : int, optional
        Tokens generated per sequence.
    static : bool, optional
        Time with a static cache.
    ttft_prompt : int, optional
        Prompt length of the time-to-first-token row.
    log : file-like, optional
        Where progress lines are printed; None prints nothing.
    layers : int, optional
        Transformer layers instead of the spec's few (32 gives a whole LLaMA-3-8B-like model,
        whose dense head weighs what it does in the real one); the rows' model is then named
        with its layers (``"llama-8b, 32 layers"``).
    dynamic : bool, optional
        Time with the dynamic cache (eager steps).

    Returns
    -------
    list of dict
        One row per (batch, cache): ``dense_tok_s``, ``explorer_tok_s``, ``decode_tok_s``, their
        speedups and token agreement; plus one time-to-first-token row.
    """
    from explorer.bench.models import MODEL_SPECS, build_model, sparse_candidate
    from explorer.gpu import sparsify

    caches = tuple(c for c, wanted in (("dynamic", dynamic), ("static", static)) if wanted)
    if not caches:
        raise ValueError(
            "dynamic=False and static=False leave no cache to time. Hint: keep one of them True."
        )
    say = (lambda msg: print(f"[generate] {msg}", file=log, flush=True)) if log else (lambda m: 0)
    spec = MODEL_SPECS[name]
    counts = tuple(sorted({b * prompt for b in batches} | set(batches) | {ttft_prompt}))
    dense = build_model(name, dtype, layers)
    name = model_name(name, layers)  # the rows' model: the spec's, or with its own layers
    # an unchanged copy of the dense model, timed like the others: the A/A control whose ratio
    # to dense is the noise of equal work in this process (host-bound generate steps scatter)
    variants = {"dense": dense, "control": copy.deepcopy(dense)}
    for key, decode in (("explorer", False), ("decode", True)):
        model = copy.deepcopy(dense)
        with torch.no_grad():
            rep = sparsify(model, filter_fn=sparse_candidate, tokens=counts, decode=decode)
        say(f"{name} {dtype_name(dtype)} {key}: {rep!r}")
        variants[key] = model
    gen = torch.Generator(device="cuda").manual_seed(7)
    # first, in the state a process starts in: after the static-cache runs (compiled steps,
    # CUDA-graph pools) every model's eager prefill measured slower (docs/gpu.md)
    ids = torch.randint(
        1, spec.config["vocab_size"], (1, ttft_prompt), device="cuda", generator=gen
    )
    first_token = dict(
        suite="generate",
        model=name,
        label=f"{name} time to first token, prompt {ttft_prompt}",
        dtype=dtype_name(dtype),
        batch=1,
        seq=ttft_prompt,
        new_tokens=1,
        cache="dynamic",
        n=ttft_prompt,
        m=0,
        k=0,
        status="ok",
    )
    ttft = interleaved_generate(variants, ids, 1)
    for key, (ms, _, _) in ttft.items():
        first_token[f"{key}_ttft_ms"] = ms
    for key in ("control", "explorer", "decode"):
        first_token[f"{key}_ttft_speedup"] = paired_ratio(ttft["dense"][1], ttft[key][1])
    say(
        f"{name} time to first token ({ttft_prompt} tokens): dense {first_token['dense_ttft_ms']:.2f} ms, "
        f"sparsify {first_token['explorer_ttft_speedup']:.2f}x"
    )
    rows = []
    for batch in batches:
        ids = torch.randint(
            1, spec.config["vocab_size"], (batch, prompt), device="cuda", generator=gen
        )
        for cache in caches:
            row = dict(
                suite="generate",
                model=name,
                label=f"{name} generate batch {batch} {cache}",
                dtype=dtype_name(dtype),
                batch=batch,
                seq=prompt,
                new_tokens=new_tokens,
                cache=cache,
                n=batch,
                m=0,
                k=0,
                status="ok",
            )
            outs = {}
            rounds = {}
            if cache == "static":  # each compiled step beside dense's alone
                timed, dense_rounds = static_in_pairs(
                    variants, ids, new_tokens, graphs=("explorer", "decode")
                )
            else:  # every variant in turn, round after round
                try:
                    timed = interleaved_generate(variants, ids, new_tokens)
                except Exception as exc:  # a failure is a result to report, not a crash
                    row["dense_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                    timed = {}
                dense_rounds = dict.fromkeys(timed, timed["dense"][1]) if timed else {}
            for key, (ms, per_round, out) in timed.items():
                outs[key], rounds[key] = out, per_round
                row[f"{key}_ms"] = ms
                row[f"{key}_tok_s"] = batch * new_tokens / (ms / 1e3)
            for key in ("control", "explorer", "decode"):
                if isinstance(dense_rounds.get(key), str):
                    row[f"{key}_error"] = dense_rounds[key]
                elif key in rounds and key in dense_rounds:
                    row[f"{key}_speedup"] = paired_ratio(dense_rounds[key], rounds[key])
                if key in outs and "dense" in outs:
                    same = (outs[key] == outs["dense"]).float().mean().item()
                    row[f"{key}_agreement"] = same
            say(
                f"{name} batch {batch} {cache}: dense {row.get('dense_tok_s', float('nan')):.0f} "
                f"tok/s, dense copy (A/A) {row.get('control_speedup', float('nan')):.2f}x, "
                f"sparsify {row.get('explorer_speedup', float('nan')):.2f}x, decode=True "
                f"{row.get('decode_speedup', float('nan')):.2f}x, agreement "
                f"{row.get('explorer_agreement', float('nan')):.2f} / "
                f"{row.get('decode_agreement', float('nan')):.2f}"
            )
            rows.append(row)
    rows.append(first_token)
    del variants, dense
    torch.cuda.empty_cache()
    return rows
