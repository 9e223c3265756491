"""Mask heatmaps as small arrays: a block-density overview and full-resolution zoom windows.

Pure logic on torch and numpy. A 4096 x 11008 mask becomes an overview of at most
512 x 512 cells holding the number of kept weights per block (``uint8`` or ``uint16``, so no
precision is lost), and a click turns into a window of single weights where groups that break
the N:M pattern are marked. Nothing here imports plotly or ipywidgets; see
:mod:`explorer.widgets.views` for the thin views.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from explorer._threads import fair_cpu_threads

__all__ = [
    "MaskComparison",
    "MaskViewer",
    "Overview",
    "PermutationView",
    "Window",
    "block_density",
    "window",
]

#: Zoom-window codes: kept (1) + 2 * group breaks the pattern + 4 * odd group (stripes).
WINDOW_COLOURS = (
    "#f6f8fa",  # 0 pruned, even group
    "#0969da",  # 1 kept, even group
    "#ffd8d3",  # 2 pruned, group breaks the pattern
    "#cf222e",  # 3 kept, group breaks the pattern
    "#dde3ea",  # 4 pruned, odd group
    "#0550ae",  # 5 kept, odd group
    "#ffc0b8",  # 6 pruned, odd group breaking the pattern
    "#a40e26",  # 7 kept, odd group breaking the pattern
)


def _as_bool_mask(mask: torch.Tensor | np.ndarray) -> torch.Tensor:
    if isinstance(mask, np.ndarray):
        mask = torch.from_numpy(mask)
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"mask must be a torch.Tensor or numpy array, got {type(mask).__name__}; "
            "pass a layer's bool mask (or its weight, where zeros count as pruned)"
        )
    if mask.dim() != 2:
        raise ValueError(
            f"mask must be 2-D (out_features x in_features), got shape {tuple(mask.shape)}; "
            "reshape convolution weights to (out, -1) first"
        )
    if mask.device.type == "meta":
        raise ValueError("mask is on the meta device and has no values; load the weights first")
    return mask if mask.dtype == torch.bool else mask != 0


def _resolve_device(device: str | torch.device | None, mask: torch.Tensor) -> torch.device:
    if device is None:
        return mask.device
    if str(device) == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else mask.device
    return torch.device(device)


def _sum_blocks(u: torch.Tensor, block: int, dim: int, dtype: torch.dtype) -> torch.Tensor:
    """Sum consecutive runs of ``block`` entries along ``dim``; a short last run is kept."""
    size = u.shape[dim]
    full = size // block
    parts = []
    if full:
        head = u.narrow(dim, 0, full * block)
        shape = (*u.shape[:dim], full, block, *u.shape[dim + 1 :])
        parts.append(head.reshape(shape).sum(dim=dim + 1, dtype=dtype))
    if size % block:
        tail = u.narrow(dim, full * block, size - full * block)
        parts.append(tail.sum(dim=dim, keepdim=True, dtype=dtype))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=dim)


@dataclass(frozen=True)
class Overview:
    """Kept weights per block of a mask.

    Attributes
    ----------
    counts : numpy.ndarray
        ``(rows, cols)`` kept weights per block, ``uint8`` when a block holds at most 255
        weights, else ``uint16``/``uint32``.
    block_rows, block_cols : int
        Block size; the last row or column of blocks may be smaller.
    shape : tuple of int
        Shape of the full mask.
    """

    counts: np.ndarray
    block_rows: int
    block_cols: int
    shape: tuple[int, int]

    @property
    def density(self) -> np.ndarray:
        """Fraction of kept weights per block as float32 (edge blocks use their true size)."""
        h, w = self.shape
        rows = np.minimum(self.block_rows, h - np.arange(self.counts.shape[0]) * self.block_rows)
        cols = np.minimum(self.block_cols, w - np.arange(self.counts.shape[1]) * self.block_cols)
        sizes = np.outer(rows, cols).astype(np.float32)
        return self.counts.astype(np.float32) / sizes

    @property
    def nbytes(self) -> int:
        """Bytes the overview sends to the browser."""
        return int(self.counts.nbytes)

    def __repr__(self) -> str:
        return (
            f"Overview({self.shape[0]}x{self.shape[1]} -> {self.counts.shape[0]}x"
            f"{self.counts.shape[1]} cells of {self.block_rows}x{self.block_cols}, "
            f"{self.counts.dtype}, {self.nbytes} bytes)"
        )


def block_density(
    mask: torch.Tensor | np.ndarray, max_cells: int = 512, device: str | None = "auto"
) -> Overview:
    """Reduce a mask to at most ``max_cells x max_cells`` blocks of kept-weight counts.

    The reduction runs with torch on ``device`` ("auto": the GPU when torch sees one, else
    where the mask lives); a CuPy kernel from :mod:`explorer.gpu` is used for CUDA masks when
    that module offers ``block_density``.

    Parameters
    ----------
    mask : torch.Tensor or numpy.ndarray
        2-D bool mask, or a weight whose zeros count as pruned.
    max_cells : int
        Upper bound on the overview's rows and columns.
    device : str, optional
        ``"auto"``, ``"cpu"``, ``"cuda"`` or None (stay where the mask is).

    Returns
    -------
    Overview

    Examples
    --------
    >>> import torch
    >>> ov = block_density(torch.ones(8, 8, dtype=torch.bool), max_cells=2, device="cpu")
    >>> ov.counts.tolist(), ov.block_rows, ov.block_cols
    ([[16, 16], [16, 16]], 4, 4)
    """
    if not isinstance(max_cells, int) or max_cells < 1:
        raise ValueError(f"max_cells must be a positive int, got {max_cells!r}; 512 is typical")
    mask = _as_bool_mask(mask)
    h, w = mask.shape
    if h == 0 or w == 0:
        raise ValueError(f"mask has shape {(h, w)}; an empty layer has nothing to draw")
    br, bc = math.ceil(h / max_cells), math.ceil(w / max_cells)
    target = _resolve_device(device, mask)
    counts = None
    if target.type == "cuda":
        counts = _gpu_block_density(mask.to(target), br, bc)
    if counts is None:
        # 1. view the bool mask as bytes (no copy); 2. sum runs of rows first (adds of
        # contiguous rows, which vectorise), in the narrowest exact integer type; 3. then
        # sum runs of columns of that much smaller array.
        u = mask.to(target).contiguous().view(torch.uint8)
        row_type = torch.uint8 if br <= 255 else torch.int32
        col_type = torch.int16 if br * bc <= 32767 else torch.int32
        with fair_cpu_threads(target, u.numel()):  # no waiting on cores others are using
            counts = _sum_blocks(_sum_blocks(u, br, 0, row_type), bc, 1, col_type)
    counts = counts.cpu().numpy()
    block = br * bc
    dtype = np.uint8 if block <= 255 else np.uint16 if block <= 65535 else np.uint32
    return Overview(counts.astype(dtype), br, bc, (h, w))


def _gpu_block_density(mask: torch.Tensor, br: int, bc: int) -> torch.Tensor | None:
    """Counts from the CuPy kernel of :mod:`explorer.gpu.cuda.kernels`; None where it cannot run."""
    try:
        from explorer.gpu.cuda import kernels

        density = kernels.block_density(mask, tile=(br, bc))
    except (ImportError, RuntimeError, ValueError):  # no CuPy here: torch on the GPU instead
        return None
    h, w = mask.shape
    rows = (h - torch.arange(density.shape[0], device=density.device) * br).clamp(max=br)
    cols = (w - torch.arange(density.shape[1], device=density.device) * bc).clamp(max=bc)
    return torch.round(density * rows[:, None] * cols[None, :]).to(torch.int32)


@dataclass(frozen=True)
class Window:
    """A full-resolution crop of a mask with groups that break the pattern marked.

    Attributes
    ----------
    codes : numpy.ndarray
        ``kept + 2 * breaks + 4 * (group index is odd)`` per weight, values 0..7, uint8 (see
        ``WINDOW_COLOURS``).
    row0, col0 : int
        The crop's top-left corner in the mask.
    bad_groups : int
        Groups in the crop that keep more than N of M.
    groups : int
        Whole groups in the crop (0 for an unstructured pattern).
    """

    codes: np.ndarray
    row0: int
    col0: int
    bad_groups: int
    groups: int

    @property
    def nbytes(self) -> int:
        """Bytes the window sends to the browser."""
        return int(self.codes.nbytes)

    def __repr__(self) -> str:
        h, w = self.codes.shape
        return (
            f"Window(rows {self.row0}:{self.row0 + h}, cols {self.col0}:{self.col0 + w}, "
            f"{self.bad_groups}/{self.groups} groups break the pattern)"
        )


def window(
    mask: torch.Tensor | np.ndarray,
    row: int,
    col: int,
    height: int = 64,
    width: int = 128,
    n: int | None = 2,
    m: int | None = 4,
) -> Window:
    """Crop ``height x width`` weights around ``(row, col)``, marking groups with more than n of m kept.

    The crop's first column is a multiple of ``m`` so whole groups are shown. With ``n`` or
    ``m`` None (an unstructured pattern) no group is marked.

    Parameters
    ----------
    mask : torch.Tensor or numpy.ndarray
        2-D bool mask, or a weight whose zeros count as pruned.
    row, col : int
        The position to crop around (inside the mask).
    height, width : int
        The crop's size, at most; the width is rounded down to a multiple of ``m`` (at least
        ``m``), and the crop is moved inside the mask near its edges.
    n, m : int or None
        A group of ``m`` is marked when it keeps more than ``n``.

    Returns
    -------
    Window

    Raises
    ------
    ValueError
        ``(row, col)`` outside the mask.

    Examples
    --------
    >>> import torch
    >>> mask = torch.tensor([[1, 1, 1, 0, 1, 1, 0, 0]], dtype=torch.bool)
    >>> w = window(mask, 0, 0)
    >>> w.codes.tolist(), w.bad_groups
    ([[3, 3, 3, 2, 5, 5, 4, 4]], 1)
    """
    mask = _as_bool_mask(mask)
    h, w = mask.shape
    if not (0 <= row < h and 0 <= col < w):
        raise ValueError(f"({row}, {col}) lies outside the mask of shape {(h, w)}")
    group = m or 1
    width = max(group, width - width % group)
    r0 = min(max(0, row - height // 2), max(0, h - height))
    c0 = min(max(0, col - width // 2), max(0, w - width))
    c0 -= c0 % group
    crop = mask[r0 : r0 + height, c0 : c0 + width].cpu()
    rh, rw = crop.shape
    kept = crop.to(torch.uint8)
    bad = torch.zeros_like(kept)
    parity = (torch.arange(rw) // group % 2).to(torch.uint8).expand(rh, rw)
    groups = bad_groups = 0
    if n is not None and m is not None:
        full = rw // m
        if full:
            g = kept[:, : full * m].reshape(rh, full, m).sum(-1) > n
            bad[:, : full * m] = g.repeat_interleave(m, dim=1).to(torch.uint8)
            groups, bad_groups = rh * full, int(g.sum())
    codes = (kept + 2 * bad + 4 * parity).numpy().astype(np.uint8)
    return Window(codes, r0, c0, bad_groups, groups)


class MaskViewer:
    """A layer's mask as a heatmap: an overview, and a zoom window on click.

    Plain logic: :meth:`heatmap` returns the arrays and axes to draw; views call it after every
    change (listeners registered with :meth:`on_change`). The overview is computed once per
    mask and cached.

    Parameters
    ----------
    mask : torch.Tensor, optional
        2-D bool mask (or weight; zeros count as pruned).
    name : str
        Shown in the title.
    pattern : str
        ``"N:M"`` marks groups with more than N of M kept in zoom windows; others mark none.
    max_cells : int
        Overview resolution bound.
    window_shape : tuple of int
        Zoom window (rows, columns).
    device : str, torch.device or None
        Where the overview is reduced: ``"auto"`` the GPU when torch sees one, else where the
        mask lives; None where the mask lives.
    start : {"overview", "zoom"}
        What a new mask opens on: the whole layer, or the zoom window at its top-left corner
        (single weights, groups of ``M`` striped, groups that break the pattern in red).

    Examples
    --------
    >>> import torch
    >>> viewer = MaskViewer(torch.ones(1024, 2048, dtype=torch.bool), name="fc")
    >>> viewer.mode, viewer.heatmap()["z"].shape
    ('overview', (512, 512))
    >>> viewer.click(10, 100)
    >>> viewer.mode, viewer.heatmap()["z"].shape
    ('zoom', (64, 128))
    >>> MaskViewer(torch.ones(1024, 2048, dtype=torch.bool), start="zoom").zoomed
    Window(rows 0:64, cols 0:128, 2048/2048 groups break the pattern)
    """

    def __init__(
        self,
        mask: torch.Tensor | None = None,
        name: str = "",
        pattern: str = "2:4",
        max_cells: int = 512,
        window_shape: tuple[int, int] = (64, 128),
        device: str | None = "auto",
        start: str = "overview",
    ) -> None:
        if start not in ("overview", "zoom"):
            raise ValueError(f"start must be 'overview' or 'zoom', got {start!r}")
        self.max_cells = max_cells
        self.window_shape = window_shape
        self.device = device
        self.start = start
        self.mask: torch.Tensor | None = None
        self.name = name
        self.pattern = pattern
        #: What the mask is, said before its count of broken groups (e.g. "after pruning").
        self.shows = ""
        self.mode = "empty"
        self.overview: Overview | None = None
        self.zoomed: Window | None = None
        self._listeners: list[Callable[[MaskViewer], None]] = []
        if mask is not None:
            self.set_mask(mask, name, pattern)

    # -- state --------------------------------------------------------------------------
    def on_change(self, callback: Callable[[MaskViewer], None]) -> None:
        """Call ``callback(viewer)`` after every change.

        Parameters
        ----------
        callback : callable
            Called with the viewer.
        """
        self._listeners.append(callback)

    def _changed(self) -> None:
        for callback in list(self._listeners):
            callback(self)

    def _nm(self) -> tuple[int | None, int | None]:
        text = str(self.pattern)
        if ":" in text and not text.startswith(("unstructured", "block", "rows")):
            n, m = text.split(":", 1)
            if n.isdigit() and m.isdigit():
                return int(n), int(m)
        return None, None

    def set_mask(
        self,
        mask: torch.Tensor,
        name: str | None = None,
        pattern: str | None = None,
        shows: str = "",
    ):
        """Show a new mask (the overview is recomputed once, here).

        ``shows`` says what the mask is ("preview after pruning", "the weight as loaded"); the
        zoomed title puts it before its count of groups that break the pattern.

        Parameters
        ----------
        mask : torch.Tensor
            The 2-D keep-mask.
        name : str or None, optional
            The layer's name; None keeps the current one.
        pattern : str or None, optional
            The N:M pattern groups are marked against; None keeps the current one.
        shows : str, optional
            What the mask is, for the title.
        """
        mask = _as_bool_mask(mask)
        self.shows = shows
        self.overview = block_density(mask, self.max_cells, self.device)
        self.mask = mask
        self.name = self.name if name is None else name
        self.pattern = self.pattern if pattern is None else pattern
        self.mode, self.zoomed = "overview", None
        if self.start == "zoom":
            self._zoom(0, 0)
        self._changed()

    def _zoom(self, row: float, col: float) -> None:
        n, m = self._nm()
        height, width = self.window_shape
        self.zoomed = window(self.mask, int(row), int(col), height, width, n, m)
        self.mode = "zoom"

    def clear(self, message: str = "") -> None:
        """Show nothing (with ``message`` as the title).

        Parameters
        ----------
        message : str, optional
            The title.
        """
        self.mask = self.overview = self.zoomed = None
        self.name, self.mode = message, "empty"
        self._changed()

    def click(self, row: float, col: float) -> None:
        """Zoom to a full-resolution window around weight ``(row, col)``; in a window, go back.

        Parameters
        ----------
        row, col : float
            The weight's position.
        """
        if self.mask is None:
            return
        if self.mode == "zoom":
            self.show_overview()
            return
        self._zoom(row, col)
        self._changed()

    def show_overview(self) -> None:
        """Leave the zoom window."""
        if self.mask is not None:
            self.mode, self.zoomed = "overview", None
            self._changed()

    # -- what to draw -------------------------------------------------------------------
    @property
    def title(self) -> str:
        """Title for the heatmap."""
        if self.mode == "empty" or self.mask is None:
            return self.name or "no layer selected"
        h, w = self.mask.shape
        if self.mode == "overview":
            ov = self.overview
            gap = "<br>" if self.start == "zoom" else " "
            return (
                f"{self.name}{gap}{h}x{w}: kept weights per {ov.block_rows}x{ov.block_cols} block "
                f"(click to zoom)"
            )
        z = self.zoomed
        zh, zw = z.codes.shape
        back = "click for the whole layer" if self.start == "zoom" else "click to go back"
        # Zoom-first viewers sit in narrow panels: the name gets a line of its own.
        gap = "<br>" if self.start == "zoom" else " "
        return (
            f"{self.name}{gap}rows {z.row0}-{z.row0 + zh - 1}, cols {z.col0}-{z.col0 + zw - 1}: "
            f"{self.shows + ': ' if self.shows else ''}"
            f"{z.bad_groups} of {z.groups} groups break {self.pattern} ({back})"
        )

    def heatmap(self) -> dict:
        """Arguments for a plotly ``Heatmap`` trace (axes in weight coordinates)."""
        if self.mode == "overview":
            ov = self.overview
            return {
                "z": ov.counts,
                "x0": (ov.block_cols - 1) / 2,
                "dx": ov.block_cols,
                "y0": (ov.block_rows - 1) / 2,
                "dy": ov.block_rows,
                "zmin": 0,
                "zmax": ov.block_rows * ov.block_cols,
                "colorscale": "Blues",
                "showscale": True,
                "xgap": 0,
                "ygap": 0,
                "hovertemplate": "row %{y}, col %{x}<br>%{z} kept<extra></extra>",
            }
        if self.mode == "zoom":
            z = self.zoomed
            k = len(WINDOW_COLOURS)
            scale = []
            for i, colour in enumerate(WINDOW_COLOURS):
                scale += [[i / k, colour], [(i + 1) / k, colour]]
            return {
                "z": z.codes,
                "x0": z.col0,
                "dx": 1,
                "y0": z.row0,
                "dy": 1,
                "zmin": -0.5,
                "zmax": k - 0.5,
                "colorscale": scale,
                "showscale": False,
                "xgap": 1,
                "ygap": 1,
                "hovertemplate": "row %{y}, col %{x}<br>code %{z}<extra></extra>",
            }
        return {"z": np.zeros((1, 1), np.uint8), "x0": 0, "dx": 1, "y0": 0, "dy": 1}

    @property
    def payload_bytes(self) -> int:
        """Bytes of array data one update sends to the browser."""
        if self.mode == "overview":
            return self.overview.nbytes
        if self.mode == "zoom":
            return self.zoomed.nbytes
        return 0

    def view(self):
        """The ipywidgets view (a plotly ``FigureWidget``), built lazily."""
        from explorer.widgets.views import mask_figure

        return mask_figure(self)

    def _repr_mimebundle_(self, **kwargs):
        return self.view()._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.mask.shape)) if self.mask is not None else "-"
        return f"MaskViewer({self.name!r}, {shape}, {self.mode}, {self.payload_bytes} bytes)"


class _PanelRow:
    """Heatmap panels side by side (``self.panels``), zoomed together by a click."""

    panels: tuple

    def click(self, row: float, col: float) -> None:
        """Zoom every panel to ``(row, col)``, or back to the overview."""
        for panel in self.panels:
            panel.click(row, col)

    def view(self):
        """The heatmaps in a row (ipywidgets ``HBox``)."""
        from explorer.widgets.comparison_view import comparison_box

        return comparison_box(self)

    def _repr_mimebundle_(self, **kwargs):
        return self.view()._repr_mimebundle_(**kwargs)


class MaskComparison(_PanelRow):
    """Two masks of one layer side by side, with their overlap (kept by both).

    Zooming one panel zooms all three to the same window.

    Parameters
    ----------
    mask_a, mask_b : torch.Tensor or numpy.ndarray
        The two 2-D masks (or weights, zeros pruned), of the same shape.
    name_a, name_b : str
        Their panels' titles.
    pattern : str
        ``"N:M"`` marks groups with more than N of M kept in zoom windows.

    Examples
    --------
    >>> import torch
    >>> a = torch.tensor([[1, 1, 0, 0]], dtype=torch.bool)
    >>> b = torch.tensor([[1, 0, 1, 0]], dtype=torch.bool)
    >>> cmp = MaskComparison(a, b, "magnitude", "wanda")
    >>> cmp.agreement, cmp.iou
    (0.5, 0.3333333333333333)
    """

    def __init__(self, mask_a, mask_b, name_a: str = "A", name_b: str = "B", pattern="2:4"):
        a, b = _as_bool_mask(mask_a), _as_bool_mask(mask_b)
        if a.shape != b.shape:
            raise ValueError(
                f"masks differ in shape: {tuple(a.shape)} vs {tuple(b.shape)}; "
                "compare two masks of the same layer"
            )
        both = a & b
        union = int((a | b).sum())
        self.agreement = float((a == b).float().mean())
        self.iou = float(both.sum()) / union if union else 1.0
        self.panels = (
            MaskViewer(a, name_a, pattern),
            MaskViewer(b, name_b, pattern),
            MaskViewer(both, f"kept by both ({self.iou:.0%} IoU)", pattern),
        )

    def __repr__(self) -> str:
        a, b, _ = self.panels
        return f"MaskComparison({a.name!r} vs {b.name!r}, agreement {self.agreement:.1%}, IoU {self.iou:.1%})"


class PermutationView(_PanelRow):
    """A layer's N:M mask before and after its input channels were reordered.

    Both panels show the same weights: the left in the original column order, the right in the
    searched order, each with the N:M mask of its scores and the total score that mask keeps.

    Parameters
    ----------
    weight : torch.Tensor
        The layer's weight in the original column order, ``(out, in)``.
    order : torch.Tensor
        The column order: new position ``i`` holds original column ``order[i]``.
    pattern : str
        An N:M pattern.
    scores : torch.Tensor, optional
        Importance per weight (default ``|weight|``), in the original order.
    name : str
        The layer's name, for titles.

    Examples
    --------
    >>> import torch
    >>> w = torch.tensor([[5.0, 5.0, 5.0, 5.0, 1.0, 1.0, 1.0, 1.0]])
    >>> view = PermutationView(w, torch.tensor([0, 1, 4, 5, 2, 3, 6, 7]), "2:4")
    >>> view.kept_before, view.kept_after, round(view.gain, 3)
    (12.0, 20.0, 0.667)
    """

    def __init__(self, weight, order, pattern: str = "2:4", scores=None, name: str = "layer"):
        from explorer.masks import make_mask
        from explorer.patterns import Pattern

        parsed = Pattern.parse(pattern)
        if parsed.kind != "nm":
            raise ValueError(f"a permutation view needs an N:M pattern, got {parsed.name!r}")
        w = torch.as_tensor(weight).detach().float().cpu()
        order = torch.as_tensor(order).long().cpu()
        if w.dim() != 2 or sorted(order.tolist()) != list(range(w.shape[1])):
            raise ValueError(
                f"order must be a permutation of the {w.shape[-1]} input columns of a 2-D weight; "
                "pass the column order a PermutationResult reports"
            )
        s = w.abs() if scores is None else torch.as_tensor(scores).detach().float().cpu()
        before = make_mask(w, parsed, scores=s)
        after = make_mask(w[:, order], parsed, scores=s[:, order])
        self.kept_before = float(s[before].sum())
        self.kept_after = float(s[:, order][after].sum())
        self.gain = self.kept_after / self.kept_before - 1 if self.kept_before else math.nan
        self.panels = (
            MaskViewer(before, f"{name}: original order, kept {self.kept_before:.4g}", parsed.name),
            MaskViewer(
                after,
                f"{name}: reordered, kept {self.kept_after:.4g} ({self.gain:+.2%})",
                parsed.name,
            ),
        )

    @classmethod
    def from_result(cls, model, result, layer: str, pattern: str | None = None, scores=None):
        """The view of ``layer`` from a model already reordered by ``permute_channels``.

        Parameters
        ----------
        model : torch.nn.Module
            The model, reordered.
        result : PermutationResult
            What ``permute_channels`` returned.
        layer : str
            A reordered layer's name.
        pattern : str or None, optional
            An N:M pattern; None for the one the result was searched for.
        scores : torch.Tensor, optional
            As for the class.

        Returns
        -------
        PermutationView
        """
        from explorer.pruning.permute import full_column_order

        if layer not in result.orders:
            raise ValueError(
                f"{layer!r} was not reordered; reordered layers: {sorted(result.orders)[:6]}"
            )
        group, orders = result.orders[layer]
        weight = model.get_submodule(layer).weight.detach()
        cols = full_column_order(group, orders, weight.shape[1])
        original = torch.empty_like(weight)
        original[:, cols] = weight
        return cls(original, cols, pattern or result.pattern.name, scores, layer)

    def __repr__(self) -> str:
        return (
            f"PermutationView(kept {self.kept_before:.4g} -> {self.kept_after:.4g}, "
            f"gain {self.gain:+.2%})"
        )
