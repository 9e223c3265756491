"""What a sweep cell works on: the bundled model (loaded once per process) and its layers."""

from __future__ import annotations

import contextlib
import functools
import json
import threading
from collections.abc import Callable

import torch
from torch import nn

__all__ = ["bundle_for", "hide_training_bars", "layer_filter", "quiet_progress", "round_weights"]

_QUIET_LOCK = threading.Lock()
_QUIET_DEPTH: list = [0, {}]  # nesting depth, the original tqdm of each module with bars

#: Modules whose ``tqdm`` shows a bar while a bundle loads, trains or evaluates.
_BAR_MODULES = ("explorer.models._mlp", "explorer.models.pretrained")


def _bar_modules() -> list:
    import importlib

    return [importlib.import_module(name) for name in _BAR_MODULES]


@contextlib.contextmanager
def quiet_progress(quiet: bool = True):
    """Hide the bars of training a bundled model on its first load while this runs.

    The bars of loading and evaluating a checkpoint folder are hidden too.

    A sweep run with ``progress=False`` (``--no-progress``) shows no bar at all, the model's
    one-off training included.

    Parameters
    ----------
    quiet : bool
        False leaves every bar as it is.

    Examples
    --------
    >>> with quiet_progress():
    ...     pass
    """
    if not quiet:
        yield
        return
    modules = _bar_modules()
    with _QUIET_LOCK:
        if _QUIET_DEPTH[0] == 0:
            _QUIET_DEPTH[1] = {m.__name__: m.tqdm for m in modules}
            for m in modules:
                m.tqdm = functools.partial(m.tqdm, disable=True)
        _QUIET_DEPTH[0] += 1
    try:
        yield
    finally:
        with _QUIET_LOCK:
            _QUIET_DEPTH[0] -= 1
            if _QUIET_DEPTH[0] == 0:
                for m in modules:
                    m.tqdm = _QUIET_DEPTH[1][m.__name__]


def hide_training_bars() -> None:
    """Hide model-training progress bars in this process for good (a sweep worker's initializer).

    Examples
    --------
    >>> import concurrent.futures
    >>> pool = concurrent.futures.ThreadPoolExecutor(1, initializer=hide_training_bars)
    """
    for m in _bar_modules():
        if not isinstance(m.tqdm, functools.partial):
            m.tqdm = functools.partial(m.tqdm, disable=True)


@functools.lru_cache(maxsize=2)
def _bundle(name: str, options: str = "{}"):
    # Loaded once per process (per loader options); every cell works on a deep copy of the model.
    from explorer.models import load

    return load(name, **json.loads(options))


def bundle_for(config: dict):
    """The bundled model a cell measures: ``config["model"]`` loaded with ``config["load"]``.

    Parameters
    ----------
    config : dict
        The cell's configuration.

    Returns
    -------
    ModelBundle

    Examples
    --------
    >>> bundle_for({"model": "digits-mlp"}).name
    'digits-mlp'
    """
    return _bundle(config["model"], json.dumps(config.get("load") or {}, sort_keys=True))


def layer_filter(
    layer_set: str,
    default: Callable | None = None,
    model: nn.Module | None = None,
    dtype: str = "float16",
    tokens: int = 1024,
) -> Callable[[nn.Module, str], bool]:
    """The ``filter_fn`` of a layer set (see :func:`explorer.layer_sets.resolve_layer_set`).

    ``"all"`` is the model's own filter (``default``) and ``"every"`` every ``nn.Linear``; any
    other set (``"fast"``, ``"mlp"`` or globs on layer names joined by ``|``) is resolved on
    ``model``'s ``nn.Linear`` layers, ``"fast"`` by the doctor at ``dtype`` and ``tokens``.

    Parameters
    ----------
    layer_set : str
        ``"all"``, ``"every"``, ``"fast"``, ``"mlp"`` or globs on layer names joined by ``|``.
    default : callable, optional
        The model's own filter, used for ``"all"`` (default: every ``nn.Linear``).
    model : nn.Module, optional
        The model whose layers a set other than ``"all"`` and ``"every"`` is resolved on.
    dtype : str
        The dtype the doctor judges ``"fast"`` at.
    tokens : int
        Tokens per matmul call the doctor judges ``"fast"`` at.

    Returns
    -------
    callable
        ``filter_fn(module, fqn) -> bool``.

    Raises
    ------
    ValueError
        A set that needs a model, without ``model``.

    Examples
    --------
    >>> model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Linear(4, 4))
    >>> f = layer_filter("0|2", model=model)
    >>> f(nn.Linear(4, 4), "0"), f(nn.Linear(4, 4), "3"), f(nn.ReLU(), "2")
    (True, False, False)
    """
    from explorer.layer_sets import resolve_layer_set

    if layer_set == "all":
        return default or (lambda module, fqn: isinstance(module, nn.Linear))
    if layer_set == "every":
        return lambda module, fqn: isinstance(module, nn.Linear)
    if model is None:
        raise ValueError(f"layer set {layer_set!r} is resolved on a model's layers; pass model=...")
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    fast = None
    if layer_set == "fast":
        from explorer.diagnosis import doctor

        fast = doctor(model, dtype=dtype, tokens=tokens).fast_once_24()
    chosen = set(resolve_layer_set(layer_set, names, fast=fast))
    return lambda module, fqn: isinstance(module, nn.Linear) and fqn in chosen


def round_weights(model: nn.Module, dtype: str) -> None:
    """Round a model's weights to ``dtype`` and back: its accuracy "at" that dtype.

    The model keeps its own dtype and device, so every bundled evaluation runs unchanged on a
    CPU.

    Parameters
    ----------
    model : nn.Module
        Changed in place: every floating parameter.
    dtype : str
        A torch dtype name of at least 16 bits: ``"float32"``, ``"float16"`` or ``"bfloat16"``.

    Raises
    ------
    ValueError
        A dtype that is not floating or narrower than 16 bits.

    Examples
    --------
    >>> layer = nn.Linear(1, 1, bias=False)
    >>> _ = layer.weight.data.fill_(1 + 2**-12)
    >>> round_weights(layer, "bfloat16"); layer.weight.item()
    1.0
    """
    target = getattr(torch, dtype)
    if not target.is_floating_point or target.itemsize < 2:
        raise ValueError(
            f"dtype {dtype!r}: accuracy cells emulate float32, float16 and bfloat16 weights only; "
            "quantised weights need a quantisation step a sweep does not perform"
        )
    with torch.no_grad():
        for param in model.parameters():
            if param.is_floating_point():
                param.copy_(param.to(target).to(param.dtype))
