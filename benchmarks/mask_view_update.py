"""Time one MaskViewer update for a 4096 x 11008 layer and count the bytes it sends.

An update is what happens when a layer is selected: the block-density overview is computed
(torch on the CPU, or the GPU kernel where there is one), the heatmap trace of the plotly
``FigureWidget`` is replaced, and the message to the browser is serialised. Run it with

    python benchmarks/mask_view_update.py [--rows 4096 --cols 11008 --repeats 7 --device cpu]

It prints the median time of each part and the size of the message (JSON plus binary buffers).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from explorer.widgets import MaskViewer
from explorer.widgets._plotly import record_messages
from explorer.widgets.views import mask_figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=11008)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    args = parser.parse_args()

    gen = torch.Generator().manual_seed(0)
    masks = [torch.rand(args.rows, args.cols, generator=gen) > 0.5 for _ in range(2)]
    viewer = MaskViewer(masks[1], "warm-up", device=args.device)
    fig = mask_figure(viewer)
    sizes = record_messages(fig)

    overview, update, zoom = [], [], []
    for i in range(args.repeats):
        # 1. a new layer: overview computed and the heatmap replaced
        start = time.perf_counter()
        viewer.set_mask(masks[i % 2], f"layer {i}", "2:4")
        update.append(time.perf_counter() - start)
        start = time.perf_counter()
        viewer.overview = None  # measure the reduction alone
        from explorer.widgets.mask_view import block_density

        viewer.overview = block_density(masks[i % 2], viewer.max_cells, args.device)
        overview.append(time.perf_counter() - start)
        # 2. a click: a full-resolution window
        start = time.perf_counter()
        viewer.click(args.rows // 2, args.cols // 2)
        zoom.append(time.perf_counter() - start)
        viewer.show_overview()

    ms = lambda xs: f"{statistics.median(xs) * 1000:.1f} ms"  # noqa: E731
    print(
        f"machine: {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}"
    )
    print(f"mask {args.rows} x {args.cols} bool, overview {viewer.overview!r}")
    print(f"block density alone:           {ms(overview)}")
    print(f"layer update (density + redraw): {ms(update)}")
    print(f"zoom window (click):             {ms(zoom)}")
    print(
        f"largest message sent: {max(sizes) / 1e6:.3f} MB (overview update), "
        f"smallest: {min(sizes) / 1e3:.1f} kB"
    )


if __name__ == "__main__":
    main()
