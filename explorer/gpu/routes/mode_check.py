"""Whether a layer should warn that it runs in a mode it was not sparsified for, and what it says.

A sparse layer takes the routes measured for the execution mode it was sparsified for
(``sparsify(model, mode=...)``): by the GPU clock for ``"graphs"``, by the wall clock for
``"eager"`` and ``"compile"``. Run another way, those routes may be slower, and the layer says so
once per mode. Two cases are no mistake and stay quiet:

- a call of more than :data:`~explorer.gpu.routes.dispatch.COMPILED_HOST_BOUND_UP_TO` tokens: the
  GPU's time sets the pace there in every mode, so the GPU clock's routes serve an eager or
  compiled call as well as a CUDA-graph replay (the prompt of a static-cache ``generate()``,
  which transformers runs eagerly before it replays the decode steps);
- a model sparsified for ``"auto"``, which keeps routes for both clocks.

A shorter eager or compiled call of a model sparsified for ``"graphs"`` still warns, and the
message says that a prompt or a CUDA-graph warm-up run that way is expected: only decode steps
that themselves run outside CUDA graphs pay for it.

Examples
--------
>>> mode_mismatch("graphs", "eager", tokens=1024) is None
True
>>> "warm-up" in mode_mismatch("graphs", "eager", tokens=8)
True
>>> mode_mismatch("eager", "compile", tokens=8) is None  # both by the wall clock
True
"""

from __future__ import annotations

from explorer.gpu.routes.dispatch import COMPILED_HOST_BOUND_UP_TO, check_mode, clock_for

__all__ = ["mode_mismatch"]

#: What a short call outside CUDA graphs adds to the warning for a model sparsified for them.
_EXPECTED_OUTSIDE_GRAPHS = (
    " A prompt or a CUDA-graph warm-up run this way is expected (transformers runs both eagerly "
    "before it replays the decode steps); only decode steps that run outside CUDA graphs pay."
)


def mode_mismatch(sparsified_for: str, running: str, tokens: int) -> str | None:
    """The warning for a call of ``tokens`` tokens run as ``running``, or None for no warning.

    Parameters
    ----------
    sparsified_for : str
        The mode the layer's routes were measured for (one of
        :data:`~explorer.gpu.routes.dispatch.MODES`).
    running : str
        How this call runs: ``"eager"``, ``"compile"`` or ``"graphs"`` (inside a capture).
    tokens : int
        The call's token count (rows of its 2-D input).

    Returns
    -------
    str or None
        The warning's text, naming both modes and the fix; None where the routes suit the call.

    Raises
    ------
    ValueError
        For a mode that is not one of :data:`~explorer.gpu.routes.dispatch.MODES`.

    Examples
    --------
    >>> print(mode_mismatch("eager", "graphs", tokens=16))  # doctest: +ELLIPSIS
    this model was sparsified for mode='eager' but runs as 'graphs': ...set_mode(model, 'graphs').
    """
    sparsified_for, running = check_mode(sparsified_for), check_mode(running)
    if sparsified_for in ("auto", running) or clock_for(sparsified_for) == clock_for(running):
        return None
    if tokens > COMPILED_HOST_BOUND_UP_TO:
        return None
    text = (
        f"this model was sparsified for mode={sparsified_for!r} but runs as {running!r}: its "
        f"layers take the routes measured for {sparsified_for!r}, which may be slower here. "
        f"Hint: sparsify(model, mode={running!r}) (or mode='auto'), or call "
        f"explorer.gpu.set_mode(model, {running!r})."
    )
    if sparsified_for == "graphs":
        text += _EXPECTED_OUTSIDE_GRAPHS
    return text
