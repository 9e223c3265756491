"""Canonical JSON for configurations, and the deterministic keys built from it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import PurePath

__all__ = ["canonical_json", "config_key", "to_jsonable"]


def to_jsonable(value: object) -> object:
    """``value`` as plain JSON data: dicts, lists, str, int, float, bool and None.

    torch dtypes become their short names (``"float16"``), dataclasses their fields, objects with
    ``to_json()`` what it returns, paths strings, sets sorted lists, numpy scalars Python numbers;
    non-finite floats become ``None`` so every export is strict JSON.

    Parameters
    ----------
    value : object
        The value to convert (not changed); dict keys become strings.

    Returns
    -------
    object

    Raises
    ------
    TypeError
        For a value with no JSON form (a module, a tensor, ...), naming its type.

    Examples
    --------
    >>> to_jsonable({"b": (1, 2.5), "a": {3}})
    {'b': [1, 2.5], 'a': [3]}
    """
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((to_jsonable(v) for v in value), key=lambda v: json.dumps(v))
    if isinstance(value, PurePath):
        return str(value)
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        return str(value).removeprefix("torch.")
    if hasattr(value, "to_json") and callable(value.to_json):
        out = value.to_json()
        return to_jsonable(json.loads(out) if isinstance(out, str) and out[:1] in "{[" else out)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return to_jsonable(value.item())
    raise TypeError(
        f"cannot store a {type(value).__name__} ({value!r:.60}) in the results store: expected "
        "JSON data (dict, list, str, number, bool, None, a torch dtype or a dataclass); "
        "convert it to one of those first"
    )


def canonical_json(value: object) -> str:
    """Compact JSON with sorted keys: equal configurations give equal text.

    Parameters
    ----------
    value : object
        Anything :func:`to_jsonable` converts.

    Returns
    -------
    str

    Examples
    --------
    >>> canonical_json({"b": 1, "a": [1, 2]})
    '{"a":[1,2],"b":1}'
    """
    return json.dumps(to_jsonable(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def config_key(value: object, length: int = 16) -> str:
    """A deterministic key for a configuration: the SHA-256 of its canonical JSON, shortened.

    Parameters
    ----------
    value : object
        The configuration (anything :func:`to_jsonable` converts).
    length : int
        Hex digits kept.

    Returns
    -------
    str

    Examples
    --------
    >>> config_key({"a": 1, "b": 2}) == config_key({"b": 2, "a": 1})
    True
    >>> len(config_key({"a": 1}))
    16
    """
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()[:length]
