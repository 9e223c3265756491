"""Named sets of layers to prune: the model's own choice, the fast ones, the MLP ones, or globs.

One resolver, :func:`resolve_layer_set`, serves the dashboard's layer-set choice and a sweep
grid's ``layer_sets`` alike: a set is a name from :data:`LAYER_SETS` or glob patterns on fully
qualified layer names joined by ``|``.

Examples
--------
>>> from explorer.layer_sets import resolve_layer_set
>>> resolve_layer_set("mlp", ["attn.q", "mlp.up", "mlp.down"])
('mlp.up', 'mlp.down')
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence

__all__ = ["LAYER_SETS", "MLP_GLOBS", "resolve_layer_set"]

#: Globs that pick a transformer's or a plain MLP's feed-forward layers (matched in lower case).
MLP_GLOBS = ("*mlp*", "*ffn*", "*intermediate*", "*fc*")
#: The named layer sets and what each holds; anything else is read as globs joined by "|".
LAYER_SETS = {
    "all": "the layers the model's own filter prunes",
    "every": "every candidate layer (each nn.Linear)",
    "fast": "the layers the doctor calls fast once pruned to 2:4",
    "mlp": f"MLP layers by name ({', '.join(g.strip('*') for g in MLP_GLOBS)})",
}


def resolve_layer_set(
    layer_set: str,
    names: Sequence[str],
    *,
    prunable: Iterable[str] | None = None,
    fast: Iterable[str] | None = None,
) -> tuple[str, ...]:
    """The layers of ``names`` that ``layer_set`` holds, in the order of ``names``.

    Parameters
    ----------
    layer_set : str
        A name from :data:`LAYER_SETS`, or glob patterns on fully qualified layer names joined
        by ``|`` (``"encoder.*.intermediate*|encoder.*.output.dense"``).
    names : sequence of str
        Every candidate layer, in model order.
    prunable : iterable of str, optional
        The layers the model's own filter prunes (set ``"all"``; default: every name).
    fast : iterable of str, optional
        The layers the doctor calls fast once pruned to 2:4 (needed for set ``"fast"``).

    Raises
    ------
    ValueError
        For an empty set name, ``"fast"`` without verdicts, or a set that holds no layer (the
        message names the value, the named sets and an example of globs).

    Examples
    --------
    >>> names = ["0", "2", "4"]
    >>> resolve_layer_set("all", names, prunable=["0", "2"]), resolve_layer_set("0|4", names)
    (('0', '2'), ('0', '4'))
    >>> resolve_layer_set("fast", names, fast=["2"])
    ('2',)
    >>> resolve_layer_set("fats", names)
    Traceback (most recent call last):
    ...
    ValueError: layer set 'fats' holds no layer; expected one of all, every, fast, mlp, or glob \
patterns on layer names joined by '|' such as 'encoder.*.intermediate*' (layers here: 0, 2, 4)
    """
    # 1. Named sets pick from their own list; 2. anything else is globs on the names.
    layer_set = layer_set.strip() if isinstance(layer_set, str) else layer_set
    if not isinstance(layer_set, str) or not layer_set:
        raise ValueError(
            f"layer set {layer_set!r} is empty; expected one of {', '.join(LAYER_SETS)} or glob "
            "patterns on layer names such as 'encoder.*.intermediate*'"
        )
    if layer_set == "fast" and fast is None:
        raise ValueError(
            "layer set 'fast' needs the doctor's verdicts once 2:4 (pass fast=...); "
            "the dashboard's layer table and a sweep cell's tokens and dtype provide them"
        )
    chosen = {
        "all": None if prunable is None else set(prunable),
        "every": None,
        "fast": None if fast is None else set(fast),
    }
    if layer_set in chosen:
        picked = chosen[layer_set]
        found = tuple(n for n in names if picked is None or n in picked)
    else:
        globs = MLP_GLOBS if layer_set == "mlp" else layer_set.split("|")
        globs = [g.strip() for g in globs if g.strip()]
        match = str.lower if layer_set == "mlp" else str
        found = tuple(n for n in names if any(fnmatch.fnmatchcase(match(n), g) for g in globs))
    # 3. A set that holds nothing is a mistake worth naming (a typo reads as a glob).
    if not found:
        shown = ", ".join(names[:6]) + (" ..." if len(names) > 6 else "")
        raise ValueError(
            f"layer set {layer_set!r} holds no layer; expected one of {', '.join(LAYER_SETS)}, "
            "or glob patterns on layer names joined by '|' such as 'encoder.*.intermediate*' "
            f"(layers here: {shown or 'none'})"
        )
    return found
