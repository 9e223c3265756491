"""The dashboard's selected layer: its mask (or a preview of one) and its pattern panel.

:class:`LayerView` is the part of :class:`explorer.widgets.Dashboard` that shows the selected
layer in the :class:`~explorer.widgets.mask_view.MaskViewer` and the
:class:`~explorer.widgets.pattern_panel.PatternPanel`, and knows which layers the model's own
filter prunes.

Examples
--------
>>> import torch
>>> from explorer.widgets import Dashboard
>>> dash = Dashboard(torch.nn.Sequential(torch.nn.Linear(16, 16)))
>>> dash.mask_viewer.title.split("<br>")[0]
'0: magnitude 2:4 preview'
"""

from __future__ import annotations

import torch

__all__ = ["LayerView"]


class LayerView:
    """Shows the selected layer of ``state``'s model; see the module docstring.

    Parameters
    ----------
    state : DashboardState
    events : Events
        Told ``"layer"`` after each change.
    mask_viewer, pattern_panel, method_picker
        Where the layer is drawn, and the picker whose pattern a preview uses.
    """

    def __init__(self, state, events, mask_viewer, pattern_panel, method_picker) -> None:
        self.state, self.events = state, events
        self.mask_viewer, self.pattern_panel = mask_viewer, pattern_panel
        self.method_picker = method_picker
        #: Magnitude masks previewed before any run, by (layer, pattern).
        self.previews: dict[tuple[str, str], torch.Tensor] = {}

    def select(self, name: str | None) -> None:
        """Show layer ``name`` in the mask viewer and the pattern panel.

        After a run the viewer shows the run's mask. Before one it shows what magnitude
        pruning to the picked N:M pattern would keep (computed once per layer and cached),
        since the dense weight keeps everything and every group breaks the pattern.

        Parameters
        ----------
        name : str or None
            The layer's name; None clears the mask viewer.
        """
        if name is None:
            self.mask_viewer.clear()
            return
        current = self.state.current
        weight = self.state.bundle.model.get_submodule(name).weight.detach()
        mask = current.masks.get(name) if current else None
        pattern = current.config.pattern if current else self.method_picker.config.pattern
        # Groups are marked against the run's N:M pattern, or against 2:4 for other patterns.
        marked = str(pattern) if _is_nm(pattern) else "2:4"
        # The mask's title and the panel's caption each say which weight they show.
        if mask is not None:
            label, shows = f"{name} ({current.config.method} {pattern})", "after pruning"
        elif current is None and (preview := self.preview(name, weight, marked)) is not None:
            mask, label = preview, f"{name}: magnitude {marked} preview"
            shows = "preview after pruning"
        else:
            mask, label, shows = weight != 0, f"{name} (dense)", "the weight as loaded"
        try:
            self.mask_viewer.set_mask(mask, label, marked, shows)
        except ValueError as exc:
            self.mask_viewer.clear(str(exc))
        now = "after pruning" if current else "as loaded"
        self.pattern_panel.update(weight, pattern, f"{name}: the weight {now}")
        self.events.emit("layer")

    def preview(self, name: str, weight: torch.Tensor, pattern: str) -> torch.Tensor | None:
        """What magnitude pruning of ``weight`` to ``pattern`` keeps (None if it cannot).

        Parameters
        ----------
        name : str
            The layer's name, the cache key with ``pattern``.
        weight : torch.Tensor
            The layer's weight.
        pattern : str
            The pattern's name.

        Returns
        -------
        torch.Tensor or None
            The keep-mask.
        """
        key = (name, pattern)
        if key not in self.previews:
            from explorer.masks import make_mask

            try:
                self.previews[key] = make_mask(weight.float(), pattern)
            except (ValueError, TypeError):  # a layer the pattern cannot divide: show it dense
                return None
        return self.previews[key]

    def prunable(self) -> list[str]:
        """The layers of the table that the model's own filter prunes (all, without one)."""
        bundle, rows = self.state.bundle, self.state.layer_picker.rows
        filter_fn = getattr(bundle, "filter_fn", None)
        return [r.name for r in rows if filter_fn is None or _selected(filter_fn, bundle, r.name)]

    def layer_set(self, choice: str, pattern: str = "") -> tuple[str, ...] | None:
        """The layers a run prunes for the page's layer-set ``choice`` (None: the model's own).

        ``choice`` is ``"all"`` (the model's filter), ``"one"`` (the selected layer),
        ``"fast"`` (the layers the table calls fast at 2:4), ``"mlp"`` or ``"pattern"`` (the
        globs in ``pattern``); see :func:`explorer.layer_sets.resolve_layer_set`.

        Parameters
        ----------
        choice : str
            ``"all"``, ``"one"``, ``"fast"``, ``"mlp"`` or ``"pattern"``.
        pattern : str, optional
            The globs on layer names, for ``"pattern"``.

        Returns
        -------
        tuple of str or None

        Raises
        ------
        ValueError
            When the set holds no layer (the message names it and the accepted sets).
        """
        from explorer.layer_sets import resolve_layer_set

        rows, selected = self.state.layer_picker.rows, self.state.selected
        if choice == "all" or (choice == "one" and selected is None):
            return None
        if choice == "one":
            return (selected,)
        fast = [r.name for r in rows if r.verdict_24 == "fast"]
        layer_set = pattern if choice == "pattern" else choice
        return resolve_layer_set(layer_set, [r.name for r in rows], fast=fast)

    def first_prunable(self) -> str:
        """The first layer the model's filter prunes that the doctor expects to be fast at 2:4."""
        rows = self.state.layer_picker.rows
        prunable = set(self.prunable())
        fast = [r for r in rows if r.name in prunable and r.verdict_24 == "fast"]
        return (fast or [r for r in rows if r.name in prunable] or rows)[0].name

    def __repr__(self) -> str:
        return f"LayerView(selected={self.state.selected!r}, {len(self.previews)} previews)"


def _selected(filter_fn, bundle, name: str) -> bool:
    try:
        return bool(filter_fn(bundle.model.get_submodule(name), name))
    except (AttributeError, TypeError, ValueError):
        return True


def _is_nm(pattern: str) -> bool:
    """Whether ``pattern`` parses as an N:M pattern (anything unparsable is not one)."""
    from explorer.patterns import Pattern

    try:
        return Pattern.parse(pattern).is_nm
    except (ValueError, TypeError):
        return False
