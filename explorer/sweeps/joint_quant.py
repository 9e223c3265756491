"""A sweep's jointly quantized prune cells: the formats asked for, checked, and their ``quant``.

``sweep(quantize="int4")`` adds, beside each SparseGPT prune cell, one pruned with its kept
weights quantized inside SparseGPT's loop (``prune(quantize=...)``), and beside the dense
baseline one quantized by the same loop with nothing pruned (GPTQ: :func:`quantized_dense_config`). Its rows carry ``quant``
(``"int4"``, or ``"int8-weights"`` for int8 weight-only, the names of
:data:`explorer.results.quantized_points.QUANT_PRECISION`) and ``group_size``, so the
trade-off plot draws them as quantized points.
"""

from __future__ import annotations

__all__ = [
    "DENSE_PATTERN",
    "QUANTIZE_FORMAT",
    "QUANT_OF",
    "gptq_cells",
    "joint_formats",
    "quantized_dense_config",
]

#: The ``quant`` of a jointly quantized prune cell's rows, by ``prune(quantize=...)`` format.
QUANT_OF = {"int4": "int4", "int8": "int8-weights"}
#: The ``prune(quantize=...)`` format of each such ``quant``.
QUANTIZE_FORMAT = {quant: fmt for fmt, quant in QUANT_OF.items()}
#: The pattern a quantized dense cell "prunes" with: nothing, so SparseGPT's loop is GPTQ's.
DENSE_PATTERN = "unstructured:0"


def gptq_cells(base: dict, grid) -> list[dict]:
    """The configurations of a sweep's quantized dense cells: one per dtype and format.

    Parameters
    ----------
    base : dict
        The configuration every cell shares (model, version, ...).
    grid : SweepConfig
        The sweep's grid: its ``dtypes``, ``quantize`` formats, ``group_size``,
        ``calibration_samples`` and ``seed``.

    Returns
    -------
    list of dict
        Dense cell configurations with ``quant`` (none without ``quantize``).

    Examples
    --------
    >>> from types import SimpleNamespace as G
    >>> grid = G(dtypes=("float16",), quantize=("int4",), group_size=64,
    ...          calibration_samples=8, seed=0)
    >>> [(c["cell"], c["quant"], c["group_size"]) for c in gptq_cells({"model": "m"}, grid)]
    [('dense', 'int4', 64)]
    """
    return [
        {
            "cell": "dense",
            **base,
            "dtype": dtype,
            "quant": QUANT_OF[fmt],
            "group_size": grid.group_size,
            "calibration_samples": grid.calibration_samples,
            "seed": grid.seed,
        }
        for dtype in grid.dtypes
        for fmt in grid.quantize
    ]


def quantized_dense_config(config: dict) -> dict:
    """The pruning configuration of a quantized dense cell: GPTQ, as SparseGPT with nothing pruned.

    A sweep with ``quantize`` has, beside its dense baseline, one dense cell per format whose
    weights are quantized with the joint loop's error feedback and nothing pruned (every
    prunable layer, the joint cells' group size, calibration samples and seed), so the plot's
    "int4 dense" point is the same method as its "int4 2:4" points, without the mask.

    Parameters
    ----------
    config : dict
        The quantized dense cell's configuration (``quant``, ``group_size``, ``seed``,
        ``calibration_samples``).

    Returns
    -------
    dict
        What :func:`explorer.sweeps.steps.pruned_copy` takes.

    Examples
    --------
    >>> cfg = quantized_dense_config({"cell": "dense", "model": "m", "quant": "int4"})
    >>> cfg["method"], cfg["pattern"], cfg["layers"]
    ('sparsegpt', 'unstructured:0', 'all')
    """
    return {**config, "method": "sparsegpt", "pattern": DENSE_PATTERN, "layers": "all"}


def joint_formats(formats: tuple[str, ...], methods: tuple[str, ...], group_size: object) -> tuple:
    """Check a sweep's joint quantization formats against its methods and group size.

    Parameters
    ----------
    formats : tuple of str
        The formats asked for (``"int4"``, ``"int8"``); empty for none.
    methods : tuple of str
        The sweep's pruning methods: one must be ``"sparsegpt"``.
    group_size : object
        Input columns per scale: a multiple of 4.

    Returns
    -------
    tuple of str
        The formats, each once.

    Raises
    ------
    ValueError
        Naming the value: an unknown format, no SparseGPT among the methods, a bad group size.

    Examples
    --------
    >>> joint_formats(("int4", "int4"), ("sparsegpt",), 64)
    ('int4',)
    >>> joint_formats(("int4",), ("wanda",), 64)
    Traceback (most recent call last):
    ...
    ValueError: quantize='int4' quantizes inside SparseGPT's column loop, and the sweep's methods wanda hold no sparsegpt; add it to the methods
    """
    if not formats:
        return ()
    unknown = [f for f in formats if f not in QUANT_OF]
    if unknown:
        raise ValueError(
            f"quantize={unknown[0]!r} unknown; expected any of {', '.join(QUANT_OF)} "
            "(int8 is weight-only here)"
        )
    if "sparsegpt" not in methods:
        raise ValueError(
            f"quantize={','.join(formats)!r} quantizes inside SparseGPT's column loop, and "
            f"the sweep's methods {', '.join(methods)} hold no sparsegpt; add it to the methods"
        )
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 4:
        raise ValueError(f"group_size={group_size!r}: expected a multiple of 4, e.g. 64 or 128")
    if group_size % 4:
        raise ValueError(f"group_size={group_size}: expected a multiple of 4, e.g. 64 or 128")
    return tuple(dict.fromkeys(formats))
