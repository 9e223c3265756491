"""The GPU side of a whole-model timing: placing a model, sparsifying it, timing its forwards.

:class:`CudaModelTimer` is the collaborator :func:`explorer.bench.model_speed.measure_model_speed`
hands the GPU work to, through the public helpers of :mod:`explorer.gpu.swap.model_timing`
(``time_forward``, ``gpu_busy``) and :func:`explorer.sparsify`; a test hands it a fake with the
same methods instead, so the measurement's logic runs on a CPU. :func:`inputs_at` resizes one
example input to a token count. CUDA is touched only when a method is called.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
from torch import nn

from explorer.gpu.swap.model_timing import input_tokens

__all__ = ["CudaModelTimer", "inputs_at", "token_counts"]


def _resize(t: torch.Tensor, batch: int, seq: int | None) -> torch.Tensor:
    # Tile ``t`` along its first (and, for a sequence, second) dimension, then crop.
    reps = [math.ceil(batch / t.shape[0])] + [1] * (t.dim() - 1)
    if seq is not None:
        reps[1] = math.ceil(seq / t.shape[1])
    out = t.repeat(*reps)[:batch]
    return out[:, :seq] if seq is not None else out


def inputs_at(example, tokens: int):
    """``example`` (a tensor, a tuple of arguments or a dict) resized to about ``tokens`` tokens.

    Token ids ``[batch, seq]`` (and the masks beside them) keep their sequence length, cut to
    ``tokens`` when longer, and repeat along the batch: ``ceil(tokens / seq)`` rows, so the
    count can round up (:func:`explorer.gpu.swap.model_timing.input_tokens` says the count timed).
    Feature rows ``[rows, features]`` repeat to ``tokens`` rows. Values are the example's own,
    so ids stay in the vocabulary.

    Parameters
    ----------
    example : torch.Tensor or tuple or dict
        One example input of the model.
    tokens : int
        The token count wanted.

    Returns
    -------
    torch.Tensor or tuple or dict
        Of the same structure as ``example``.

    Raises
    ------
    ValueError
        ``tokens`` is not a positive int, or ``example`` holds no tensor.

    Examples
    --------
    >>> inputs_at(torch.ones(3, 8), 10).shape
    torch.Size([10, 8])
    >>> ids = {"input_ids": torch.arange(12).reshape(2, 6), "attention_mask": torch.ones(2, 6)}
    >>> {k: tuple(v.shape) for k, v in inputs_at(ids, 16).items()}
    {'input_ids': (3, 6), 'attention_mask': (3, 6)}
    >>> tuple(inputs_at(ids, 4)["input_ids"].shape)
    (1, 4)
    """
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"tokens={tokens!r}: expected a positive token count such as 4096")
    tensors = (
        list(example.values())
        if isinstance(example, Mapping)
        else list(example)
        if isinstance(example, tuple)
        else [example]
    )
    first = next((t for t in tensors if isinstance(t, torch.Tensor) and t.dim() >= 1), None)
    if first is None:
        raise ValueError(
            f"cannot resize example input {type(example).__name__}: expected a tensor, a tuple "
            "of arguments or a dict of tensors. Hint: one batch of the model's calibration data"
        )
    ids = isinstance(example, Mapping) and isinstance(example.get("input_ids"), torch.Tensor)
    ids = ids or (not first.is_floating_point() and first.dim() == 2)
    lead = (
        example["input_ids"] if isinstance(example, Mapping) and "input_ids" in example else first
    )
    if ids:
        seq = min(tokens, lead.shape[1])
        batch, shape = math.ceil(tokens / seq), (lead.shape[0], lead.shape[1])
    else:
        seq, batch, shape = None, tokens, (lead.shape[0],)

    def resize(value):
        if not isinstance(value, torch.Tensor) or tuple(value.shape[: len(shape)]) != shape:
            return value  # not batched like the lead tensor: kept as it is
        return _resize(value, batch, seq)

    if isinstance(example, Mapping):
        return {k: resize(v) for k, v in example.items()}
    if isinstance(example, tuple):
        return tuple(resize(v) for v in example)
    return resize(example)


def token_counts(tokens, sparsify_for, example) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A whole-model timing's token counts, checked: ``(timed, sparsified for)``.

    Parameters
    ----------
    tokens : int or sequence of int or None
        The counts timed; None or empty for the example's own count.
    sparsify_for : sequence of int or None
        The counts the sparse copy is sparsified for; None for those timed.
    example
        The example input (its count is the default).

    Returns
    -------
    tuple of (tuple of int, tuple of int)

    Raises
    ------
    ValueError
        A count that is not a positive int, or an empty ``sparsify_for``.

    Examples
    --------
    >>> token_counts(16, None, torch.ones(4, 8))
    ((16,), (16,))
    >>> token_counts(None, (4096, 16), torch.ones(4, 8))
    ((4,), (4096, 16))
    >>> token_counts((0,), None, torch.ones(4, 8))
    Traceback (most recent call last):
    ...
    ValueError: tokens=(0,): expected positive token counts such as (4096, 16)
    """

    def bad(counts) -> bool:
        return any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in counts)

    counts = (tokens,) if isinstance(tokens, int) else tuple(tokens or ())
    counts = counts or (input_tokens(example),)
    if bad(counts):
        raise ValueError(f"tokens={tokens!r}: expected positive token counts such as (4096, 16)")
    served = tuple(sparsify_for) if sparsify_for is not None else counts
    if not served or bad(served):
        raise ValueError(
            f"sparsify_for={sparsify_for!r}: expected positive token counts such as (4096, 16)"
        )
    return counts, served


class CudaModelTimer:
    """Times whole-model forwards on the current CUDA GPU (the default collaborator).

    Every method but :meth:`unavailable` needs a CUDA GPU; none touches CUDA before it is
    called.

    Examples
    --------
    >>> timer = CudaModelTimer()
    >>> timer.unavailable() is None or "GPU" in timer.unavailable()
    True
    """

    def unavailable(self) -> str | None:
        """Why nothing can be timed here (None when a CUDA GPU is present)."""
        if not torch.cuda.is_available():
            return "no CUDA GPU here: a model's speed needs one (accuracy rows are kept)"
        return None

    def device_name(self) -> str:
        """The GPU's name."""
        return torch.cuda.get_device_name()

    def place(self, model: nn.Module, dtype: torch.dtype) -> nn.Module:
        """``model`` on the GPU in ``dtype``, in eval mode (in place).

        Parameters
        ----------
        model : torch.nn.Module
            The model.
        dtype : torch.dtype
            The dtype.

        Returns
        -------
        torch.nn.Module
        """
        return model.to("cuda", dtype).eval()

    def place_inputs(self, inputs, dtype: torch.dtype):
        """Tensors of ``inputs`` on the GPU, floating ones in ``dtype``.

        Parameters
        ----------
        inputs : torch.Tensor or tuple or Mapping
            The inputs.
        dtype : torch.dtype
            The dtype of floating-point tensors.

        Returns
        -------
        torch.Tensor or tuple or dict
        """

        def to(v):
            if isinstance(v, torch.Tensor):
                return v.to("cuda", dtype if v.is_floating_point() else v.dtype)
            return v

        if isinstance(inputs, Mapping):
            return {k: to(v) for k, v in inputs.items()}
        if isinstance(inputs, tuple):
            return tuple(to(v) for v in inputs)
        return to(inputs)

    def sparsify(
        self,
        model: nn.Module,
        mode: str,
        tokens: tuple[int, ...],
        filter_fn: Callable[[nn.Module, str], bool] | None,
        dtype: str | None = None,
        scales: Mapping[str, torch.Tensor] | None = None,
    ):
        """:func:`explorer.sparsify` of ``model`` in place, its routes chosen for ``mode``.

        Parameters
        ----------
        model : torch.nn.Module
            The model, on the GPU.
        mode : str
            The execution mode the routes are chosen for.
        tokens : tuple of int
            The token counts the routes are chosen at.
        filter_fn : callable or None
            Which layers to swap; None for every eligible one.
        dtype : str, optional
            A lower precision for the sparse layers (``"int4"``, ``"int8-weights"``,
            ``"float8_e4m3fn"``); None keeps the model's 16-bit dtype.
        scales : mapping of str to torch.Tensor, optional
            With ``dtype`` ``"int4"`` or ``"int8-weights"``: the scales a joint
            prune-and-quantize recorded.

        Returns
        -------
        SparsifyReport
        """
        from explorer.gpu import sparsify

        low = {} if dtype is None else {"dtype": dtype}
        if scales:
            low["int4_scales"] = scales
        with torch.no_grad():
            return sparsify(model, filter_fn=filter_fn, tokens=tokens, mode=mode, **low)

    def dense_at(
        self,
        model: nn.Module,
        precision: str,
        filter_fn: Callable[[nn.Module, str], bool] | None,
        scales: Mapping[str, torch.Tensor] | None = None,
    ):
        """A copy of ``model`` run dense at ``precision``, and what was converted.

        :func:`explorer.gpu.swap.precision_dense.dense_at` does the work.

        Parameters
        ----------
        model : torch.nn.Module
            The model, on the GPU.
        precision : str
            ``"int4"``, ``"int8-weights"`` or ``"float8_e4m3fn"``.
        filter_fn : callable or None
            Which layers to convert; None for every ``nn.Linear``.
        scales : mapping of str to torch.Tensor, optional
            Scales a joint prune-and-quantize recorded (int4 and int8 codes).

        Returns
        -------
        tuple of (torch.nn.Module, PrecisionDense)
        """
        from explorer.gpu.swap.precision_dense import dense_at

        with torch.no_grad():
            return dense_at(model, precision, filter_fn, scales)

    def forward_ms(self, model: nn.Module, inputs, mode: str) -> tuple[str, float]:
        """``(mode timed, median ms)`` of one forward.

        ``"graphs"`` falls back to eager where the forward cannot be captured; ``"compile"``
        compiles first (default mode).

        Parameters
        ----------
        model : torch.nn.Module
            The model, on the GPU.
        inputs : Any
            Its inputs, on the GPU.
        mode : str
            ``"eager"``, ``"compile"`` or ``"graphs"``.

        Returns
        -------
        tuple of (str, float)
        """
        from explorer.gpu.swap.model_timing import call_model, time_forward

        if mode == "compile":
            torch._dynamo.reset()
            compiled = torch.compile(model, dynamic=False)
            for _ in range(3):  # compilation, then warm-up
                call_model(compiled, inputs)
            torch.cuda.synchronize()
            try:
                return "compile", time_forward(compiled, inputs, "eager")
            finally:
                torch._dynamo.reset()
        if mode == "graphs":
            try:
                return "graphs", time_forward(model, inputs, "graphs")
            except RuntimeError:
                torch.cuda.synchronize()
        return "eager", time_forward(model, inputs, "eager")

    def gpu_busy(self, model: nn.Module, inputs) -> float | None:
        """Share of an eager forward's wall time the GPU is busy.

        Parameters
        ----------
        model : torch.nn.Module
            The model, on the GPU.
        inputs : Any
            Its inputs, on the GPU.

        Returns
        -------
        float or None
        """
        from explorer.gpu.swap.model_timing import gpu_busy

        return gpu_busy(model, inputs)

    def layer_estimate(self, report, tokens: int, mode: str, dtype: torch.dtype):
        """The swapped layers' summed ``(dense ms, sparse ms)`` at ``tokens`` by ``mode``'s clock.

        Parameters
        ----------
        report : SparsifyReport
            What :meth:`sparsify` returned.
        tokens : int
            The token count.
        mode : str
            The execution mode, which picks the clock.
        dtype : torch.dtype
            The model's dtype.

        Returns
        -------
        tuple of (float, float) or None
        """
        from explorer.gpu.library.cusparselt import decision_tokens
        from explorer.gpu.routes.dispatch import clock_for

        return report.layer_estimate(decision_tokens(tokens, dtype), clock=clock_for(mode))

    def __repr__(self) -> str:
        return "CudaModelTimer()"
