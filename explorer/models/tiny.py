"""Tiny random checkpoints and text, built offline: to try :func:`explorer.models.from_pretrained`.

:func:`save_tiny_llama` and :func:`save_tiny_bert` write a ``save_pretrained`` folder (config,
safetensors weights and a word-level tokenizer trained on :func:`sample_text`) into a folder of
your choice, in about a second on a CPU. The weights are random, so the numbers mean nothing;
the folders exercise the same path as a real checkpoint.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import torch

from explorer.errors import require

__all__ = ["sample_text", "save_tiny_bert", "save_tiny_llama"]

_WORDS = {
    "adj": "small quiet sparse dense bright heavy narrow quick slow green red calm".split(),
    "noun": "model layer weight matrix kernel token river mountain garden engine".split(),
    "verb": "prunes keeps moves reads writes finds measures carries follows".split(),
    "adv": "slowly quickly often rarely carefully simply".split(),
}


def sample_text(sentences: int = 600, seed: int = 0) -> str:
    """Deterministic English-like text: ``sentences`` short sentences, five to a paragraph.

    Parameters
    ----------
    sentences : int, optional
        Number of sentences.
    seed : int, optional
        Seed of the word choices.

    Returns
    -------
    str

    Examples
    --------
    >>> sample_text(2)
    'A narrow river often prunes a quick river. A bright mountain carefully finds a dense garden.'
    """
    rng = random.Random(seed)
    out = []
    for i in range(sentences):
        w = {k: rng.choice(v) for k, v in _WORDS.items()}
        if rng.random() < 0.5:
            s = f"The {w['adj']} {w['noun']} {w['verb']} the {rng.choice(_WORDS['noun'])}."
        else:
            s = f"A {w['adj']} {w['noun']} {w['adv']} {w['verb']} a {rng.choice(_WORDS['adj'])} "
            s += f"{rng.choice(_WORDS['noun'])}."
        out.append(s + ("\n\n" if i % 5 == 4 else " "))
    return "".join(out).strip()


def _tokenizer(text: str, bert: bool):
    tokenizers = require("tokenizers", "models")
    transformers = require("transformers", "models")
    special = ["[UNK]", "[PAD]", "[CLS]", "[SEP]", "[MASK]"] if bert else ["<unk>", "<s>", "</s>"]
    model = tokenizers.models.WordLevel(unk_token=special[0])
    tok = tokenizers.Tokenizer(model)
    tok.normalizer = tokenizers.normalizers.Lowercase()
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.WordLevelTrainer(special_tokens=special)
    tok.train_from_iterator(text.split("\n"), trainer=trainer)
    if bert:
        names = dict(unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]")
        names["mask_token"] = "[MASK]"
    else:
        names = dict(unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="</s>")
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, **names)


def _save(model: torch.nn.Module, tokenizer, folder: str | os.PathLike) -> Path:
    logging = require("transformers", "models").utils.logging
    path = Path(os.fspath(folder))
    path.mkdir(parents=True, exist_ok=True)
    bars = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()  # a second's work: no "Writing model shards" bar
    try:
        model.save_pretrained(str(path))
        tokenizer.save_pretrained(str(path))
    finally:
        if bars:
            logging.enable_progress_bar()
    return path


def save_tiny_llama(folder: str | os.PathLike, seed: int = 0, **sizes: int) -> Path:
    """Write a random 2-layer LLaMA (hidden 256) and its tokenizer into ``folder``.

    Parameters
    ----------
    folder : str or path-like
        Where the ``save_pretrained`` files go (created if missing).
    seed : int
        Seed of the random weights.
    **sizes : int
        ``LlamaConfig`` sizes to use instead of the tiny ones: ``hidden_size``,
        ``intermediate_size``, ``num_hidden_layers``, ``num_attention_heads``,
        ``num_key_value_heads`` or ``max_position_embeddings`` (a benchmark writes an 8-layer,
        hidden-2048 checkpoint this way).

    Returns
    -------
    pathlib.Path
        The folder, ready for :func:`explorer.models.from_pretrained`.

    Raises
    ------
    ValueError
        A size that is not one of those above, or not a positive int.

    Examples
    --------
    >>> import tempfile
    >>> folder = save_tiny_llama(tempfile.mkdtemp())
    >>> sorted(p.name for p in folder.glob("*.json"))[:2]
    ['config.json', 'generation_config.json']
    """
    shape = dict(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
    )
    for key, value in sizes.items():
        if key not in shape:
            raise ValueError(
                f"size {key}={value!r} is not one save_tiny_llama sets; expected one of "
                f"{', '.join(shape)}"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"size {key}={value!r}: expected a positive int")
    shape.update(sizes)
    transformers = require("transformers", "models")
    tokenizer = _tokenizer(sample_text(), bert=False)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        **shape,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    return _save(model, tokenizer, folder)


def save_tiny_bert(folder: str | os.PathLike, seed: int = 0) -> Path:
    """Write a random 2-layer BERT encoder (hidden 128) and its tokenizer into ``folder``.

    Parameters
    ----------
    folder : str or path-like
        Where the ``save_pretrained`` files go.
    seed : int, optional
        Seed of the random weights.

    Returns
    -------
    pathlib.Path
        The folder.

    Examples
    --------
    >>> import tempfile
    >>> (save_tiny_bert(tempfile.mkdtemp()) / "model.safetensors").exists()
    True
    """
    transformers = require("transformers", "models")
    tokenizer = _tokenizer(sample_text(), bert=True)
    config = transformers.BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = transformers.BertModel(config).eval()
    return _save(model, tokenizer, folder)
