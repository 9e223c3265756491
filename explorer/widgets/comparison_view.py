"""Three mask heatmaps side by side, linked: a click in any zooms all three."""

from __future__ import annotations

from explorer.widgets.views import load_ipywidgets, mask_figure

__all__ = ["comparison_box"]


def comparison_box(comparison, height: int = 360):
    """Three heatmaps in a row; a click in any zooms all three.

    Parameters
    ----------
    comparison : MaskComparison
        The comparison.
    height : int, optional
        The figures' height in pixels.
    """
    w = load_ipywidgets()
    figs = [mask_figure(p, height, on_click=comparison.click) for p in comparison.panels]
    for fig in figs:
        fig.layout.width = 380
    return w.HBox(figs)
