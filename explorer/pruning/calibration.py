"""Calibration plumbing: feeding batches, recording layer inputs, progress and cancellation.

A calibration set is an iterable of batches. Each batch is passed to the model as
``model(batch)`` for a tensor, ``model(**batch)`` for a mapping (tokenized Hugging Face
input works as it is) and ``model(*batch)`` for a tuple or list. The statistics a pruning
method needs are gathered by forward hooks on the selected ``nn.Linear`` layers:
``H = sum_t x_t x_t^T`` over every input row ``x_t`` the layer sees, in float32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ..errors import PruningCancelled

__all__ = [
    "InputStats",
    "StopForward",
    "as_batches",
    "call_model",
    "check_finite_inputs",
    "progress_bar",
    "reconstruction_error",
    "record_inputs",
    "selected_linears",
]

#: Above this input width only the diagonal of ``X^T X`` is kept (a full one would be large).
FULL_STATS_MAX_WIDTH = 4096


def progress_bar(total: int | None, desc: str, enabled: bool):
    """A ``tqdm.auto`` bar (a widget in notebooks, text in scripts), or a silent one.

    Parameters
    ----------
    total : int or None
        Number of steps, or None when unknown.
    desc : str
        The bar's label.
    enabled : bool
        False gives a disabled (silent) bar.

    Returns
    -------
    tqdm.auto.tqdm
        The bar; it is not left on screen when closed.
    """
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, leave=False)


def as_batches(calibration: Any) -> list | None:
    """Materialise a calibration set into a list so it can be replayed.

    A single tensor or mapping is taken as one batch (iterating a tensor would split it
    into rows). Returns ``None`` for ``None``.

    Parameters
    ----------
    calibration : Any
        None, one batch (a tensor or a mapping), or an iterable of batches.

    Returns
    -------
    list or None
        The batches, or None for None.
    """
    if calibration is None:
        return None
    if isinstance(calibration, torch.Tensor | Mapping):
        return [calibration]
    if not isinstance(calibration, Iterable):
        raise TypeError(
            f"calibration must be an iterable of batches (tensors or dicts of tensors), "
            f"got {type(calibration).__name__}; e.g. calibration=[x[:64], x[64:128]]"
        )
    batches = list(calibration)
    if not batches:
        raise ValueError("calibration is empty; pass at least one batch, e.g. calibration=[x[:64]]")
    return batches


def _to_device(batch: Any, device: torch.device | None) -> Any:
    if device is None:
        return batch
    if isinstance(batch, torch.Tensor):
        return batch.to(device) if batch.device != device else batch
    if isinstance(batch, Mapping):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, tuple | list):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch


def describe_batch(batch: Any) -> str:
    """A short description of a batch: its shape, or the shapes of its fields.

    Parameters
    ----------
    batch : Any
        A tensor, a mapping, a tuple or list, or any other object.

    Returns
    -------
    str
        The shape and dtype of a tensor, the shapes of a mapping's fields, the first four items
        of a tuple or list, or else the type's name.
    """
    if isinstance(batch, torch.Tensor):
        return f"tensor of shape {tuple(batch.shape)} and dtype {batch.dtype}"
    if isinstance(batch, Mapping):
        parts = [
            f"{k}: {tuple(v.shape)}" if isinstance(v, torch.Tensor) else f"{k}: {type(v).__name__}"
            for k, v in batch.items()
        ]
        return "dict {" + ", ".join(parts) + "}"
    if isinstance(batch, tuple | list):
        inner = ", ".join(describe_batch(v) for v in batch[:4])
        return f"{type(batch).__name__} of {len(batch)} ({inner})"
    return type(batch).__name__


def _expectation(model: nn.Module) -> str:
    first = next((m for m in model.modules() if isinstance(m, nn.Linear)), None)
    embed = next((m for m in model.modules() if isinstance(m, nn.Embedding)), None)
    if embed is not None:
        return f"token ids below {embed.num_embeddings} (the model starts with an embedding)"
    if first is not None:
        return (
            f"inputs whose last dimension is {first.in_features} (the first Linear's in_features)"
        )
    return "inputs the model's forward accepts"


class StopForward(Exception):
    """Raised by a pre-hook to stop a forward pass once the wanted inputs are captured."""


def model_device(model: nn.Module) -> torch.device | None:
    """The device of the model's first parameter (``None`` for a model without any).

    Parameters
    ----------
    model : torch.nn.Module
        The model.

    Returns
    -------
    torch.device or None
    """
    param = next(model.parameters(), None)
    return None if param is None else param.device


def call_model(model: nn.Module, batch: Any, index: int, device: torch.device | None = None):
    """Run ``model`` on one calibration batch, turning the model's errors into a ValueError.

    Parameters
    ----------
    model : nn.Module
        The model.
    batch : tensor, mapping or tuple
        Passed as ``model(batch)``, ``model(**batch)`` or ``model(*batch)``.
    index : int
        The batch's position in the calibration set, for the message.
    device : torch.device, optional
        Tensors in the batch are moved there first.

    Returns
    -------
    Any
        The model's output.
    """
    batch = _to_device(batch, device)
    try:
        if isinstance(batch, Mapping):
            return model(**batch)
        if isinstance(batch, tuple | list):
            return model(*batch)
        return model(batch)
    except (StopForward, PruningCancelled):
        raise
    except Exception as exc:
        raise ValueError(
            f"calibration batch {index} ({describe_batch(batch)}) failed in the model: "
            f"{type(exc).__name__}: {exc}. The model expects {_expectation(model)}. "
            f"Each batch is passed as model(batch), model(**batch) for a dict or model(*batch) "
            f"for a tuple; pass inputs only (e.g. [x for x, _ in loader]), not (input, target)."
        ) from exc


class InputStats:
    """Running ``X^T X`` (float32) of the inputs one ``nn.Linear`` sees.

    Parameters
    ----------
    in_features : int
        The layer's input width.
    device : torch.device
        Where to accumulate.
    full : bool, optional
        Keep the full ``in x in`` matrix (default: when ``in_features`` is at most 4096);
        otherwise only its diagonal, the squared input-column norms.
    layer : str, optional
        The layer's name, for messages.

    Examples
    --------
    >>> s = InputStats(3, torch.device("cpu"))
    >>> s.add(torch.tensor([[1.0, 2.0, 0.0]]))
    >>> s.col_norms_sq.tolist(), s.rows
    ([1.0, 4.0, 0.0], 1)
    """

    def __init__(
        self, in_features: int, device: torch.device, full: bool | None = None, layer: str = ""
    ):
        self.in_features = in_features
        self.layer = layer
        self.full = in_features <= FULL_STATS_MAX_WIDTH if full is None else full
        shape = (in_features, in_features) if self.full else (in_features,)
        self.xtx = torch.zeros(shape, dtype=torch.float32, device=device)
        self.rows = 0

    def add(self, x: torch.Tensor) -> None:
        """Accumulate a batch of inputs (any leading shape, last dimension ``in_features``).

        Parameters
        ----------
        x : torch.Tensor
            Inputs of shape ``(..., in_features)``.
        """
        x = x.detach().reshape(-1, self.in_features).to(self.xtx.device, torch.float32)
        if self.full:
            self.xtx.addmm_(x.T, x)
        else:
            self.xtx.add_((x * x).sum(0))
        self.rows += x.shape[0]

    def increment(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        """What :meth:`add` would add for ``x``, to share among layers fed the same tensor.

        Parameters
        ----------
        x : torch.Tensor
            Inputs of shape ``(..., in_features)``.

        Returns
        -------
        increment : torch.Tensor
            ``X^T X`` of ``x`` (its diagonal when only the diagonal is kept), in float32.
        rows : int
            The number of input rows in ``x``.
        """
        x = x.detach().reshape(-1, self.in_features).to(self.xtx.device, torch.float32)
        return (x.T @ x if self.full else (x * x).sum(0)), x.shape[0]

    def add_increment(self, inc: torch.Tensor, rows: int) -> None:
        """Add an :meth:`increment` computed for another layer that saw the same input.

        Parameters
        ----------
        inc : torch.Tensor
            The increment :meth:`increment` returned.
        rows : int
            The number of input rows it was computed from.
        """
        self.xtx.add_(inc)
        self.rows += rows

    @property
    def col_norms_sq(self) -> torch.Tensor:
        """``||X_j||_2^2`` for every input column ``j``; ValueError if the inputs held NaN/Inf."""
        norms = self.xtx.diagonal() if self.full else self.xtx
        check_finite_inputs(norms, self.layer)
        return norms

    @property
    def hessian(self) -> torch.Tensor:
        """The full ``X^T X`` (proportional to SparseGPT's ``H = 2 X X^T``).

        Raises
        ------
        ValueError
            Only the diagonal was kept, or the inputs held NaN or Inf.
        """
        if not self.full:
            raise ValueError(
                f"only the diagonal of X^T X was kept for this {self.in_features}-wide layer; "
                f"the full matrix is kept up to {FULL_STATS_MAX_WIDTH} inputs"
            )
        check_finite_inputs(self.xtx, self.layer)
        return self.xtx


def check_finite_inputs(xtx: torch.Tensor, layer: str = "") -> None:
    """Raise a ValueError saying the calibration inputs held NaN or Inf, if ``xtx`` is not finite.

    Any NaN or Inf in a layer's inputs spreads through ``X^T X``; pruning from it would fail
    (SparseGPT's factorisation) or rank by garbage (Wanda's scores), so the data is blamed
    before either happens.

    Parameters
    ----------
    xtx : torch.Tensor
        A layer's accumulated ``X^T X`` (or its diagonal).
    layer : str, optional
        The layer's name, for the message.

    Examples
    --------
    >>> check_finite_inputs(torch.tensor([1.0, float("nan")]), "fc1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: the inputs of layer 'fc1' held NaN or Inf during calibration ...
    """
    bad = ~torch.isfinite(xtx)
    if bool(bad.any()):
        where = f"of layer {layer!r}" if layer else "of this layer"
        raise ValueError(
            f"the inputs {where} held NaN or Inf during calibration ({int(bad.sum())} of the "
            f"{bad.numel()} entries of X^T X are not finite), so it cannot be pruned from them; "
            "check the batches (all(torch.isfinite(x).all() for x in calibration)) and, if they "
            "are finite, look for activations that overflow before this layer (e.g. calibrate a "
            "float16 model in float32)"
        )


@contextlib.contextmanager
def record_inputs(
    modules: Mapping[str, nn.Linear], full: bool | None = None
) -> Iterator[dict[str, InputStats]]:
    """Forward hooks that accumulate :class:`InputStats` for each module while active.

    Parameters
    ----------
    modules : Mapping[str, torch.nn.Linear]
        The layers to record, by name.
    full : bool or None, optional
        Passed to :class:`InputStats`: keep the full ``X^T X`` (True) or only its diagonal;
        None decides by input width.

    Yields
    ------
    dict[str, InputStats]
        The statistics of each layer, by name, filled as batches run; the hooks are removed on
        exit.

    Examples
    --------
    >>> lin = nn.Linear(3, 2)
    >>> with record_inputs({"lin": lin}) as stats:
    ...     _ = lin(torch.ones(4, 3))
    >>> stats["lin"].rows
    4
    """
    stats = {
        name: InputStats(mod.in_features, mod.weight.device, full, layer=name)
        for name, mod in modules.items()
    }
    # Layers fed the very same tensor (q/k/v projections, gate/up) share one X^T X product.
    last: dict[str, Any] = {"input": None, "key": None, "inc": None, "rows": 0}
    handles = []
    for name, mod in modules.items():

        def hook(_mod, args, _out, _stats=stats[name]):
            if not args or not isinstance(args[0], torch.Tensor):
                return
            x = args[0]
            key = (_stats.full, _stats.in_features, _stats.xtx.device)
            if x is last["input"] and key == last["key"]:
                _stats.add_increment(last["inc"], last["rows"])
                return
            inc, rows = _stats.increment(x)
            _stats.add_increment(inc, rows)
            last.update(input=x, key=key, inc=inc, rows=rows)

        handles.append(mod.register_forward_hook(hook))
    try:
        yield stats
    finally:
        last.clear()
        for handle in handles:
            handle.remove()


def reconstruction_error(dense: torch.Tensor, pruned: torch.Tensor, stats: InputStats) -> float:
    """Relative output error ``||W X - W' X|| / ||W X||`` on the recorded inputs.

    Computed from ``H = X^T X`` as ``sqrt(tr(D H D^T) / tr(W H W^T))`` with ``D = W - W'``;
    NaN when only the diagonal was kept or the dense output is zero.

    Parameters
    ----------
    dense : torch.Tensor
        The dense weight ``W``.
    pruned : torch.Tensor
        The pruned weight ``W'``, same shape.
    stats : InputStats
        The layer's recorded inputs.

    Returns
    -------
    float

    Examples
    --------
    >>> s = InputStats(2, torch.device("cpu"))
    >>> s.add(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    >>> reconstruction_error(torch.tensor([[3.0, 4.0]]), torch.tensor([[3.0, 0.0]]), s)
    0.8
    """
    if not stats.full or stats.rows == 0:
        return float("nan")
    h = stats.xtx  # not stats.hessian: non-finite inputs give NaN here rather than an error
    w = dense.detach().to(h.device, torch.float32)
    d = w - pruned.detach().to(h.device, torch.float32)
    both = torch.cat([w, d]) @ h
    base = float((both[: len(w)] * w).sum().clamp_min(0))
    diff = float((both[len(w) :] * d).sum().clamp_min(0))
    if base == 0.0:
        return float("nan")
    return (diff / base) ** 0.5


def selected_linears(
    model: nn.Module, filter_fn: Any = None
) -> tuple[dict[str, nn.Linear], Sequence[str]]:
    """The ``nn.Linear`` modules ``filter_fn(module, fqn)`` selects, and all Linear names.

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    filter_fn : callable or None, optional
        ``filter_fn(module, fqn) -> bool``; None selects every ``nn.Linear``.

    Returns
    -------
    chosen : dict[str, torch.nn.Linear]
        The selected layers, by fully qualified name.
    names : Sequence[str]
        The names of all ``nn.Linear`` modules of the model.
    """
    if filter_fn is not None and not callable(filter_fn):
        raise TypeError(
            f"filter_fn must be a callable (module, fqn) -> bool, got {type(filter_fn).__name__}; "
            f'e.g. filter_fn=lambda mod, fqn: "mlp" in fqn'
        )
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    chosen = {n: m for n, m in linears if filter_fn is None or filter_fn(m, n)}
    return chosen, [n for n, _ in linears]
