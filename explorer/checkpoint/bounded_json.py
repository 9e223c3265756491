"""JSON from a file that nobody vouches for: bounded nesting, number sizes and text size.

:func:`json.loads` recurses once per nesting level (a few thousand ``[`` raise
:class:`RecursionError`), turns a 5,000-digit number into a :class:`ValueError` from Python's
int-parsing limit, accepts ``NaN`` and ``Infinity``, and lets a repeated key silently win.
:func:`loads_bounded` refuses all of these with one :class:`CheckpointError` line that names
the file, what was found and what was expected, before the parser could fail in any other way.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from .manifest import CheckpointError

__all__ = ["MAX_DEPTH", "MAX_NUMBER_CHARS", "MAX_TEXT_CHARS", "loads_bounded", "short_repr"]

#: Deepest nesting of objects and arrays a manifest may have (the writer uses five or six).
MAX_DEPTH = 32
#: Longest literal of one number (64-bit integers have 20 digits; floats need 25 characters).
MAX_NUMBER_CHARS = 40
#: Longest manifest text (the safetensors header itself is capped at 100 MB).
MAX_TEXT_CHARS = 64 * 1024 * 1024

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def loads_bounded(text: str, where: str) -> Any:
    """Parse JSON text with limits on size, nesting depth and number length.

    Parameters
    ----------
    text : str
        The JSON text.
    where : str
        What the text is (``"the manifest of m.safetensors"``), for messages.

    Returns
    -------
    Any
        The parsed value: dicts, lists, str, int, finite float, bool and None only.

    Raises
    ------
    CheckpointError
        Text longer than :data:`MAX_TEXT_CHARS`, nesting deeper than :data:`MAX_DEPTH`, a number
        literal longer than :data:`MAX_NUMBER_CHARS` or not finite, ``NaN``/``Infinity``, a
        key repeated in one object, or text that is not JSON.

    Examples
    --------
    >>> loads_bounded('{"shape": [16, 32]}', "m.json")
    {'shape': [16, 32]}
    >>> loads_bounded("[" * 100 + "]" * 100, "m.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    explorer.checkpoint.manifest.CheckpointError: m.json nests arrays and objects 100 deep, ...
    """
    if not isinstance(text, str):
        raise CheckpointError(
            f"{where} is a {type(text).__name__}, expected JSON text; the file was altered"
        )
    if len(text) > MAX_TEXT_CHARS:
        raise CheckpointError(
            f"{where} is {len(text):,} characters long, expected at most {MAX_TEXT_CHARS:,}; "
            "the file was altered or is not a sparsity-explorer file"
        )
    # 1. nesting depth, counted without recursion: strings removed, then brackets scanned
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub('""', text)):
        depth += 1 if match.group() in "[{" else -1
        deepest = max(deepest, depth)
    if deepest > MAX_DEPTH:
        raise CheckpointError(
            f"{where} nests arrays and objects {deepest} deep, expected at most {MAX_DEPTH}; the "
            "file was altered or is not a sparsity-explorer file"
        )

    # 2. numbers and constants are checked as the parser meets them
    def number(literal: str, kind: type) -> int | float:
        if len(literal) > MAX_NUMBER_CHARS:
            raise CheckpointError(
                f"{where} holds a number of {len(literal):,} characters ({literal[:20]}...), "
                f"expected at most {MAX_NUMBER_CHARS}; the file was altered"
            )
        value = kind(literal)
        if isinstance(value, float) and not math.isfinite(value):
            raise CheckpointError(
                f"{where} holds the number {literal}, which is not finite; expected a finite "
                "number. The file was altered"
            )
        return value

    def constant(name: str) -> None:
        raise CheckpointError(
            f"{where} holds {name}, expected a finite number or null (writers store NaN as "
            "null); the file was altered"
        )

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise CheckpointError(
                    f"{where} repeats the key {short_repr(key)} in one object, expected each key "
                    "once; the file was altered"
                )
            out[key] = value
        return out

    # 3. parse; the checks above leave only malformed text to fail here
    try:
        return json.loads(
            text,
            parse_int=lambda s: number(s, int),
            parse_float=lambda s: number(s, float),
            parse_constant=constant,
            object_pairs_hook=unique,
        )
    except json.JSONDecodeError as exc:
        raise CheckpointError(
            f"{where} is not valid JSON ({exc}); the file was altered or damaged"
        ) from None
    except (RecursionError, ValueError) as exc:  # defence in depth: the checks above come first
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(
            f"{where} cannot be parsed ({type(exc).__name__}: {str(exc)[:80]}); the file was "
            "altered or damaged"
        ) from None


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages.

    Parameters
    ----------
    value : Any
        The value.
    limit : int, optional
        The most characters returned.

    Returns
    -------
    str

    Examples
    --------
    >>> short_repr("x" * 100, limit=10)
    "'xxxxxx..."
    """
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
