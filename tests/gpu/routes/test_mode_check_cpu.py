"""When a layer warns that it runs in a mode it was not sparsified for: a pure rule, no GPU."""

from __future__ import annotations

import pytest

from explorer.gpu.routes.dispatch import COMPILED_HOST_BOUND_UP_TO, MODES
from explorer.gpu.routes.mode_check import mode_mismatch

LAST_HOST_BOUND = COMPILED_HOST_BOUND_UP_TO


@pytest.mark.parametrize("running", ["eager", "compile", "graphs"])
def test_the_mode_sparsified_for_and_auto_never_warn(running):
    for tokens in (1, LAST_HOST_BOUND, LAST_HOST_BOUND + 1, 4096):
        assert mode_mismatch(running, running, tokens) is None
        assert mode_mismatch("auto", running, tokens) is None


def test_eager_and_compile_share_the_wall_clock():
    assert mode_mismatch("eager", "compile", 8) is None
    assert mode_mismatch("compile", "eager", 8) is None


@pytest.mark.parametrize(
    ("sparsified_for", "running"),
    [("graphs", "eager"), ("graphs", "compile"), ("eager", "graphs"), ("compile", "graphs")],
)
def test_another_clock_warns_up_to_the_host_bound_sizes_only(sparsified_for, running):
    for tokens in (1, 16, LAST_HOST_BOUND):
        text = mode_mismatch(sparsified_for, running, tokens)
        assert f"sparsified for mode={sparsified_for!r} but runs as {running!r}" in text
        assert f"sparsify(model, mode={running!r})" in text and "set_mode" in text
    # above them the GPU sets the pace in every mode: the GPU clock's routes serve the call
    for tokens in (LAST_HOST_BOUND + 1, 1024):
        assert mode_mismatch(sparsified_for, running, tokens) is None


def test_a_short_call_outside_graphs_says_a_prompt_or_warm_up_is_expected():
    for running in ("eager", "compile"):
        text = mode_mismatch("graphs", running, 16)
        assert "warm-up" in text and "decode steps" in text
    assert "warm-up" not in mode_mismatch("eager", "graphs", 16)


def test_an_unknown_mode_is_refused_with_the_modes():
    with pytest.raises(ValueError, match="turbo"):
        mode_mismatch("turbo", "eager", 8)
    with pytest.raises(ValueError, match="turbo"):
        mode_mismatch("graphs", "turbo", 8)
    assert set(MODES) >= {"auto", "eager", "compile", "graphs"}
