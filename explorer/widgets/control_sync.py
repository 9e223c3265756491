"""The dashboard's pruning controls set from a configuration, as when a point is loaded.

Clicking a trade-off point loads its :class:`~explorer.widgets.method_picker.MethodConfig`
into the method picker; :func:`show_config` then sets the page's controls to it, so the next
**Prune** runs what the page shows. While it sets them the view ignores their change events
(``view.syncing``): one control changed at a time would pass through combinations the picker
refuses (SparseGPT's quantization with the previous method, say).
"""

from __future__ import annotations

__all__ = ["show_config", "show_value"]


def show_value(control, value) -> None:
    """Set a dropdown-like ``control`` to ``value``, adding it to its options if missing.

    Parameters
    ----------
    control : ipywidgets.Widget
        A widget with ``value`` and, for a choice, ``options``.
    value : Any
        The value to show.

    Examples
    --------
    >>> import ipywidgets
    >>> tokens = ipywidgets.Dropdown(options=[128, 1024], value=1024)
    >>> show_value(tokens, 256)
    >>> tokens.value, list(tokens.options)
    (256, [128, 256, 1024])
    """
    options = getattr(control, "options", None)
    if options is not None and not isinstance(control.options, dict):
        plain = [o[1] if isinstance(o, tuple) else o for o in options]
        if value not in plain:
            if all(isinstance(o, int) for o in plain) and isinstance(value, int):
                control.options = sorted([*plain, value])
            else:
                control.options = [*options, value]
    control.value = value


def show_config(view, config) -> None:
    """Set ``view``'s pruning controls to ``config``, ignoring their change events meanwhile.

    Parameters
    ----------
    view : DashboardView
        The page (:class:`~explorer.widgets.views.DashboardView`).
    config : MethodConfig
        The configuration to show.
    """
    view.syncing = True
    try:
        show_value(view.method, config.method)
        view.calibration.min = 0  # the method's lower end is set again below
        view.calibration.max = max(view.calibration.max, config.calibration)  # never clamped
        view.calibration.value = config.calibration
        show_value(view.pattern_choice, config.pattern)
        show_value(view.dtype, config.dtype)
        show_value(view.tokens, config.tokens)
        view.steps.permute.value = config.permute
        show_value(view.steps.update, config.update)
        show_value(view.steps.quantize, config.quantize)
        show_value(view.steps.group_size, config.group_size)
    finally:
        view.syncing = False
