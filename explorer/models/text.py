"""Real English text that ships with Python, split into a calibration and an evaluation corpus.

Two sources, never mixed:

* **evaluation** text is the Python language reference help that ships as
  ``pydoc_data.topics`` (the pages ``help("for")`` shows), taken topic by topic in sorted order;
* **calibration** text is the docstrings of a fixed, sorted list of standard-library modules
  (:data:`CALIBRATION_MODULES`): the module docstring, then its public classes and functions in
  sorted order.

Both are split into paragraphs at blank lines with whitespace collapsed; paragraphs that also
occur in the evaluation text are removed from the calibration text, so the two are disjoint. The
result depends only on the Python version (its docs and docstrings), never on the machine or on
what else is imported.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import warnings

__all__ = [
    "CALIBRATION_MODULES",
    "calibration_paragraphs",
    "evaluation_paragraphs",
    "sentences",
]

#: Standard-library modules whose docstrings make the calibration text (sorted, fixed).
CALIBRATION_MODULES: tuple[str, ...] = (
    "argparse",
    "ast",
    "asyncio",
    "base64",
    "bisect",
    "calendar",
    "collections",
    "concurrent.futures",
    "configparser",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email",
    "enum",
    "fractions",
    "functools",
    "gettext",
    "glob",
    "gzip",
    "heapq",
    "hmac",
    "html",
    "http.client",
    "inspect",
    "ipaddress",
    "itertools",
    "json",
    "logging",
    "mailbox",
    "pathlib",
    "pickle",
    "pprint",
    "queue",
    "random",
    "re",
    "sched",
    "secrets",
    "shlex",
    "shutil",
    "statistics",
    "string",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "typing",
    "unittest",
    "urllib.parse",
    "uuid",
    "warnings",
    "weakref",
    "zipfile",
)

_BLANK = re.compile(r"\n\s*\n")
_SPACE = re.compile(r"\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def _paragraphs(text: str, min_words: int) -> list[str]:
    """Split ``text`` at blank lines, collapse whitespace, keep prose-like paragraphs."""
    out = []
    for block in _BLANK.split(text):
        para = _SPACE.sub(" ", block).strip()
        words = para.split(" ")
        if len(words) < min_words:
            continue
        letters = sum(ch.isalpha() for ch in para)
        # 1. Skip code listings and tables: prose is mostly letters and spaces.
        if letters < 0.7 * len(para.replace(" ", "")) or set(para) <= set("=*-+| "):
            continue
        out.append(para)
    return out


@functools.cache
def _evaluation(min_words: int) -> tuple[str, ...]:
    from pydoc_data.topics import topics

    paras: list[str] = []
    for key in sorted(topics):
        paras.extend(_paragraphs(topics[key], min_words))
    return tuple(dict.fromkeys(paras))


def _docstrings(module_name: str) -> list[str]:
    with warnings.catch_warnings():
        # 1. Some modules expose deprecated aliases (typing.re); reading them only warns.
        warnings.simplefilter("ignore", DeprecationWarning)
        return _read_docstrings(module_name)


def _read_docstrings(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    docs = [inspect.getdoc(module) or ""]
    for name in sorted(vars(module)):
        if name.startswith("_"):
            continue
        obj = vars(module)[name]
        if not (inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj)):
            continue
        if getattr(obj, "__module__", None) != module_name:
            continue
        docs.append(inspect.getdoc(obj) or "")
    return docs


@functools.cache
def _calibration(min_words: int) -> tuple[str, ...]:
    held_out = set(_evaluation(min_words))
    paras: list[str] = []
    for module_name in CALIBRATION_MODULES:
        for doc in _docstrings(module_name):
            paras.extend(p for p in _paragraphs(doc, min_words) if p not in held_out)
    return tuple(dict.fromkeys(paras))


def evaluation_paragraphs(min_words: int = 8) -> list[str]:
    """Paragraphs of Python's reference help (``pydoc_data.topics``), in sorted topic order.

    Parameters
    ----------
    min_words : int
        Shorter paragraphs (headings, one-liners) are dropped.

    Returns
    -------
    list of str
        Deterministic for a given Python version.

    Examples
    --------
    >>> paras = evaluation_paragraphs()
    >>> len(paras) > 1000 and all(len(p.split()) >= 8 for p in paras)
    True
    """
    return list(_evaluation(min_words))


def calibration_paragraphs(min_words: int = 8) -> list[str]:
    """Paragraphs of the docstrings of :data:`CALIBRATION_MODULES`, disjoint from evaluation text.

    Parameters
    ----------
    min_words : int
        Shorter paragraphs are dropped.

    Returns
    -------
    list of str
        Deterministic for a given Python version.

    Examples
    --------
    >>> cal = calibration_paragraphs()
    >>> len(cal) > 500 and not set(cal) & set(evaluation_paragraphs())
    True
    """
    return list(_calibration(min_words))


def sentences(paragraphs: list[str], min_words: int = 6, max_words: int = 60) -> list[str]:
    """Split paragraphs into sentences and keep those of ``min_words`` to ``max_words`` words.

    Duplicates are dropped, first occurrence kept, so the order is deterministic.

    Parameters
    ----------
    paragraphs : list of str
        The paragraphs.
    min_words, max_words : int, optional
        The shortest and longest sentence kept, in words.

    Returns
    -------
    list of str

    Examples
    --------
    >>> sentences(["One two three four five six. Short one. Seven eight nine ten eleven twelve!"])
    ['One two three four five six.', 'Seven eight nine ten eleven twelve!']
    """
    out: list[str] = []
    for para in paragraphs:
        for sent in _SENTENCE_END.split(para):
            n = len(sent.split())
            if min_words <= n <= max_words:
                out.append(sent.strip())
    return list(dict.fromkeys(out))
