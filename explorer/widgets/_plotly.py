"""A plotly ``FigureWidget`` that sends 2-D numeric arrays as binary row buffers.

plotly serializes only 1-D numpy arrays as binary buffers and turns 2-D ones into JSON lists
(several characters per cell). A heatmap's ``z`` sent as a list of 1-D row arrays arrives in
the browser as an array of typed arrays, which plotly.js draws as it is, so a 512 x 512
``uint8`` overview costs 256 KiB instead of about a megabyte of JSON.
"""

from __future__ import annotations

import numpy as np

from explorer.errors import require

__all__ = ["binary_rows", "figure_widget"]

_CLASS = None


def binary_rows(value):
    """Replace 2-D numeric arrays (not 64-bit) in ``value`` by lists of contiguous 1-D rows.

    Parameters
    ----------
    value : Any
        A figure's data: dicts, lists, tuples and arrays, nested.

    Returns
    -------
    Any
        ``value`` with those arrays replaced.
    """
    if isinstance(value, dict):
        return {k: binary_rows(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [binary_rows(v) for v in value]
    if (
        isinstance(value, np.ndarray)
        and value.ndim == 2
        and value.dtype.kind in "uif"
        and value.dtype.itemsize < 8
    ):
        return list(np.ascontiguousarray(value))
    return value


def _figure_widget_class():
    global _CLASS
    if _CLASS is None:
        go = require("plotly.graph_objects", "widgets")
        traitlets = require("traitlets", "widgets")
        serializers = require("plotly.serializers", "widgets")

        def to_json(value, manager):
            return serializers._py_to_js(binary_rows(value), manager)

        tags = {"sync": True, "to_json": to_json, "from_json": serializers._js_to_py}
        names = (
            "_py2js_addTraces",
            "_py2js_restyle",
            "_py2js_update",
            "_py2js_animate",
        )
        namespace = {name: traitlets.Dict(allow_none=True).tag(**tags) for name in names}
        namespace["_widget_data"] = traitlets.List().tag(**tags)
        _CLASS = type("BinaryFigureWidget", (go.FigureWidget,), namespace)
    return _CLASS


def figure_widget(*args, **kwargs):
    """A ``plotly.graph_objects.FigureWidget`` whose 2-D arrays travel as binary buffers."""
    return _figure_widget_class()(*args, **kwargs)


def record_messages(fig) -> list[int]:
    """Record the size in bytes (JSON text plus binary buffers) of every update ``fig`` sends.

    Returns a list that grows as the figure changes; used by the benchmark and the tests.

    Parameters
    ----------
    fig : plotly.graph_objects.FigureWidget
        The figure to watch.

    Returns
    -------
    list[int]
        The sizes, one per message, appended as they are sent.
    """
    import json

    from ipywidgets.widgets.widget import _remove_buffers

    sizes: list[int] = []
    names = ["_py2js_restyle", "_py2js_update", "_py2js_relayout", "_py2js_addTraces"]

    def measure(change):
        if change["new"] is None:
            return
        to_json = fig.trait_metadata(change["name"], "to_json")
        state, _, buffers = _remove_buffers({change["name"]: to_json(change["new"], fig)})
        sizes.append(len(json.dumps(state)) + sum(memoryview(b).nbytes for b in buffers))

    fig.observe(measure, names=names)
    return sizes
