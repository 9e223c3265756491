"""The models the dashboard offers, the settings each is loaded with, and loading one.

Examples
--------
>>> from explorer.widgets.dashboard_models import MODELS, settings_for
>>> MODELS[0]
'minilm'
>>> settings_for("minilm")["tokens"], settings_for("digits-mlp")["dtype"]
(16384, 'float16')
"""

from __future__ import annotations

from torch import nn

from explorer.dtypes import parse_dtype
from explorer.models import MODELS as _BUNDLED
from explorer.widgets._quiet import hidden_displays

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "MODEL_OPTIONS",
    "MODEL_SETTINGS",
    "load_bundle",
    "settings_for",
]

#: Models offered in the dashboard's dropdown: the bundled ones, the default first.
MODELS = ("minilm", *(name for name in _BUNDLED if name != "minilm"))
#: The model the served dashboard opens with: MiniLM's 36 encoder Linears in bfloat16. Every
#: width is a multiple of 16, so the doctor accepts each layer for 2:4 once pruned, and at
#: 16384 tokens per call (128 sentences of 128 tokens) its 12 MLP layers are large enough to
#: be fast while its 24 attention projections are not: the trade-off 2:4 is about, at a glance.
DEFAULT_MODEL = "minilm"
#: Loader options that keep each evaluation to seconds on a CPU (smaller evaluation sets).
MODEL_OPTIONS = {"minilm": {"n_eval": 64}, "smollm2": {"n_eval": 4}}
#: Per model: the dtype its weights are cast to after loading (None: as loaded) and the
#: dtype and tokens per call that the doctor and the speedup estimate assume.
MODEL_SETTINGS = {
    "minilm": {"cast": "bfloat16", "dtype": "bfloat16", "tokens": 16384},
}
_DEFAULT_SETTINGS = {"cast": None, "dtype": "float16", "tokens": 1024}


def settings_for(model) -> dict:
    """The cast, dtype and tokens of ``model`` (a name; anything else gets the defaults).

    Parameters
    ----------
    model : str or Any
        A model name, or anything else.

    Returns
    -------
    dict
        ``cast``, ``dtype`` and ``tokens``.

    Examples
    --------
    >>> settings_for(nn.Linear(4, 4))
    {'cast': None, 'dtype': 'float16', 'tokens': 1024}
    """
    if isinstance(model, str):
        return {**_DEFAULT_SETTINGS, **MODEL_SETTINGS.get(model, {})}
    return dict(_DEFAULT_SETTINGS)


def load_bundle(model, options: dict | None = None):
    """The bundle of ``model``, cast to its 16-bit dtype where :data:`MODEL_SETTINGS` says so.

    Parameters
    ----------
    model : str, ModelBundle or torch.nn.Module
        A model name of :data:`MODELS`, a checkpoint folder's path, a bundle or a module.
    options : dict, optional
        More loader options, e.g. the text of a checkpoint folder.

    Returns
    -------
    ModelBundle
        The loaded bundle (a module gets a bundle without a metric).
    """
    with hidden_displays():
        bundle = _bundle(model, options or {})
    cast = MODEL_SETTINGS.get(model, {}).get("cast") if isinstance(model, str) else None
    if cast is not None:
        bundle.model.to(parse_dtype(cast))
    return bundle


def _bundle(model, options: dict):
    if isinstance(model, str):
        from explorer.models import load

        return load(model, **{**MODEL_OPTIONS.get(model, {}), **options})
    if hasattr(model, "evaluate") and hasattr(model, "model"):
        return model
    if isinstance(model, nn.Module):
        from explorer.models.bundle import ModelBundle

        return ModelBundle.from_module(
            model,
            evaluate=lambda m: {"score": float("nan")},
            name=type(model).__name__,
            metric="score",
        )
    raise TypeError(
        f"model must be a model name ({', '.join(MODELS)}), a checkpoint folder's path, a "
        "ModelBundle or a torch.nn.Module, "
        f"got {type(model).__name__}"
    )
