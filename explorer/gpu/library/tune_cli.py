"""``sparsity-explorer tune``: tune cuSPARSELt's algorithm for common model shapes on this GPU.

The shapes are those :func:`explorer.sparsify` runs for each family: the stacked q/k/v
projection, the attention output, the stacked gate/up projection and the down projection
(BERT: q/k/v, output, intermediate and output of the MLP). The results go to the user's table
(or ``--out``), which :class:`~explorer.gpu.SparseLinear` reads; the tables that ship in the
package were written this way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["FAMILIES", "family_shapes", "main"]

#: family: (hidden, intermediate, query heads, key/value heads, head size, gated MLP)
FAMILIES = {
    "llama-3.2-1b": (2048, 8192, 32, 8, 64, True),
    "llama-3.2-3b": (3072, 8192, 24, 8, 128, True),
    "llama-3-8b": (4096, 14336, 32, 8, 128, True),  # Mistral-7B has the same layers
    "llama-2-7b": (4096, 11008, 32, 32, 128, True),
    "qwen2-1.5b": (1536, 8960, 12, 2, 128, True),
    "qwen2-7b": (3584, 18944, 28, 4, 128, True),
    "smollm2-135m": (576, 1536, 9, 3, 64, True),
    "bert-base": (768, 3072, 12, 12, 64, False),
    "bert-large": (1024, 4096, 16, 16, 64, False),
    "minilm-l6": (384, 1536, 12, 12, 32, False),
}
DEFAULT_TOKENS = (4096, 1024, 16)


def family_shapes(name: str) -> list[tuple[int, int, str]]:
    """``(out, in, role)`` of the sparse products ``sparsify`` runs for a model family.

    Parameters
    ----------
    name : str
        One of :data:`FAMILIES`.

    Returns
    -------
    list of (int, int, str)
        One entry per product.

    Examples
    --------
    >>> family_shapes("llama-3.2-1b")
    [(3072, 2048, 'qkv'), (2048, 2048, 'o'), (16384, 2048, 'gate_up'), (2048, 8192, 'down')]
    """
    if name not in FAMILIES:
        raise ValueError(f"model family {name!r} unknown; expected one of {sorted(FAMILIES)}")
    d, inter, heads, kv, head, gated = FAMILIES[name]
    qkv = (heads + 2 * kv) * head
    mlp_in = (2 * inter, d, "gate_up") if gated else (inter, d, "up")
    return [(qkv, d, "qkv"), (heads * head, heads * head, "o"), mlp_in, (d, inter, "down")]


def _problems(families, tokens, dtypes):
    from explorer.gpu.library import cusparselt as C
    from explorer.gpu.library.tuning import Problem, tunable_dtype

    out = []  # most useful first: the first dtype, the largest token count
    for dt in dtypes:
        for t in sorted(tokens, reverse=True):
            n = C.padded_tokens(t, tunable_dtype(dt))
            for fam in families:
                for m, k, role in family_shapes(fam):
                    # the down projection may read the SwiGLU output as a transposed view
                    layouts = ("cc", "cr", "rc", "rr") if role == "down" else ("cc", "cr")
                    out += [Problem(m, n, k, dt, lay) for lay in layouts]
    return list(dict.fromkeys(out))


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``sparsity-explorer tune --help``).

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0, or 2 without a CUDA GPU.
    """
    p = argparse.ArgumentParser(
        prog="sparsity-explorer tune",
        description="Find the fastest correct cuSPARSELt algorithm for the layers of common "
        "model families on this GPU (every config is tried in a child process) and remember "
        "it for SparseLinear.",
    )
    p.add_argument(
        "--families",
        default=",".join(FAMILIES),
        help=f"comma-separated, any of {','.join(FAMILIES)} (default: all)",
    )
    p.add_argument(
        "--tokens",
        default=",".join(map(str, DEFAULT_TOKENS)),
        help="token counts (default 4096,1024,16: prefill and decode)",
    )
    p.add_argument("--dtypes", default="bfloat16,float16", help="bfloat16 and/or float16")
    p.add_argument("--out", type=Path, help="write the table here instead of the user's cache")
    p.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help="stop the whole search after this many seconds; each problem still gets at most "
        "15 s, and those not reached keep the library's default (default: no overall bound)",
    )
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if args.budget is not None and not args.budget > 0:
        p.error(f"--budget {args.budget}: expected a positive number of seconds")
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    bad = [f for f in families if f not in FAMILIES]
    if bad:
        p.error(f"unknown family {bad}; expected any of {sorted(FAMILIES)}")
    try:
        tokens = [int(t) for t in args.tokens.split(",")]
    except ValueError:
        p.error(f"--tokens {args.tokens!r}: expected comma-separated positive integers")
    if any(t < 1 for t in tokens):
        p.error(f"--tokens {args.tokens!r}: token counts must be positive")
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if any(d not in ("bfloat16", "float16") for d in dtypes):
        p.error(f"--dtypes {args.dtypes!r}: expected bfloat16 and/or float16")
    import torch

    if not torch.cuda.is_available():
        print("sparsity-explorer tune: no CUDA GPU visible; nothing to tune.", file=sys.stderr)
        return 2
    from explorer.gpu.library.batch_search import tune_problems
    from explorer.gpu.library.tuning import table_path

    problems = _problems(families, tokens, dtypes)
    found = tune_problems(
        problems, table=args.out, progress=not args.no_progress, budget_s=args.budget
    )
    missed = [p for p, a in found.items() if a is None and p not in found.not_started]
    print(
        f"tuned {len(found) - len(missed) - len(found.not_started)} problems "
        f"({len(problems) - len(found)} already known), {len(missed)} without a correct config, "
        f"{len(found.cut_short)} stopped at their time bound (each keeps the best config it "
        "tried, written where it had a problem's whole search budget; one cut shorter by "
        f"--budget is not written: run tune again to finish it), {len(found.not_started)} not "
        f"reached, {len(found.crashes)} crashed configs skipped, in {found.seconds:.0f} s; "
        f"table: {args.out or table_path()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
