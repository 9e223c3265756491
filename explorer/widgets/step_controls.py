"""The dashboard's controls for the steps added to a pruning method: permute, update, quantize.

Each maps to a :class:`~explorer.widgets.method_picker.MethodConfig` field and so to an
argument of :func:`explorer.pruning.prune`: ``permute`` reorders input channels first (N:M
patterns), ``update="admm"`` re-optimises the kept weights on the calibration data, and
``quantize`` (SparseGPT only) quantizes the kept weights group-wise inside its column loop. The
method picker checks the combination (:meth:`MethodConfig._check_steps`), so a refused one is
shown as an error and nothing runs.
"""

from __future__ import annotations

__all__ = ["GROUP_SIZES", "StepControls"]

#: Group sizes offered for quantization (input columns per scale).
GROUP_SIZES = (32, 64, 128)


class StepControls:
    """A checkbox and three dropdowns, read together as ``MethodConfig`` fields.

    Parameters
    ----------
    w : module
        ``ipywidgets``.
    config : MethodConfig
        The configuration whose steps the controls start from.

    Examples
    --------
    >>> import ipywidgets
    >>> from explorer.widgets.method_picker import MethodConfig
    >>> steps = StepControls(ipywidgets, MethodConfig("sparsegpt", quantize="int4"))
    >>> steps.values()
    {'permute': False, 'update': None, 'quantize': 'int4', 'group_size': 128}
    """

    def __init__(self, w, config) -> None:
        self.permute = w.Checkbox(
            value=config.permute, description="permute channels", indent=False
        ).add_class("explorer-permute")
        self.update = w.Dropdown(
            options=[("none", None), ("ADMM", "admm")], value=config.update, description="update"
        ).add_class("explorer-update")
        self.quantize = w.Dropdown(
            options=[("none (16-bit)", None), ("int4", "int4"), ("int8", "int8")],
            value=config.quantize,
            description="quantize",
        ).add_class("explorer-quantize")
        sizes = sorted({*GROUP_SIZES, config.group_size})
        self.group_size = w.Dropdown(
            options=sizes, value=config.group_size, description="group"
        ).add_class("explorer-group-size")
        self.controls = (self.permute, self.update, self.quantize, self.group_size)
        self.box = w.VBox(list(self.controls))

    def values(self) -> dict:
        """The steps as ``MethodConfig`` fields."""
        return {
            "permute": bool(self.permute.value),
            "update": self.update.value,
            "quantize": self.quantize.value,
            "group_size": int(self.group_size.value),
        }

    def __repr__(self) -> str:
        return f"StepControls({self.values()})"
