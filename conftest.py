"""GPU skips for the tests, and the package's docstring examples run with them.

Tests marked ``gpu`` and examples flagged ``+GPU`` are skipped with the reason unless a CUDA
GPU with sparse tensor cores, CuPy and nvmath-python are all present (CI has none of them;
they run on the GPU machine). The docstring examples run through ``--doctest-modules``
(pyproject.toml).

Two option flags say what an example needs, and each gets a skip with its reason where that is
missing, instead of an example that never runs:

- ``# doctest: +GPU``: a CUDA GPU with sparse tensor cores, CuPy and nvmath-python.
- ``# doctest: +SLOW``: more than ten seconds on a 2-core CPU (loading a language model); run
  them with ``pytest --slow-examples``.

An example that needs an optional extra or a bundled data set that is not installed here
(``ImportError``, ``FileNotFoundError``) is skipped with the error as the reason.
"""

from __future__ import annotations

import doctest
import importlib
from functools import lru_cache

import pytest

GPU = doctest.register_optionflag("GPU")
SLOW = doctest.register_optionflag("SLOW")


def pytest_addoption(parser):
    parser.addoption(
        "--slow-examples",
        action="store_true",
        help="also run the docstring examples marked +SLOW",
    )


@lru_cache(maxsize=1)
def _gpu_missing() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU"
    cap = torch.cuda.get_device_capability()
    if cap < (8, 0):
        return f"GPU capability {cap[0]}.{cap[1]} has no sparse tensor cores (needs 8.0+)"
    for mod, pkg in (("cupy", "cupy-cuda12x/13x"), ("nvmath.bindings.cusparseLt", "nvmath-python")):
        try:
            importlib.import_module(mod)
        except Exception as exc:
            return f"{pkg} not importable ({type(exc).__name__}: {exc})"
    return None


def _skip_when_missing(item) -> None:
    # An example whose extra or data set is not installed here is skipped, with the error.
    run = item.runtest

    def runtest():
        try:
            run()
        except doctest.UnexpectedException as failure:
            exc = failure.exc_info[1]
            if isinstance(exc, (ImportError, FileNotFoundError)):
                pytest.skip(f"example needs what is not installed here: {exc}")
            raise

    item.runtest = runtest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("gpu") is not None and _gpu_missing():
            item.add_marker(pytest.mark.skip(reason=f"GPU test: {_gpu_missing()}"))
        test = getattr(item, "dtest", None)
        if test is None:
            continue
        flags = {flag for ex in test.examples for flag, on in ex.options.items() if on}
        if GPU in flags and _gpu_missing():
            item.add_marker(pytest.mark.skip(reason=f"GPU example: {_gpu_missing()}"))
        elif SLOW in flags and not config.getoption("--slow-examples"):
            item.add_marker(pytest.mark.skip(reason="slow example: run with --slow-examples"))
        _skip_when_missing(item)


# The conftest files are plugins, not modules of examples (several share the name conftest).
collect_ignore_glob = ["conftest.py", "tests/conftest.py", "tests/**/conftest.py"]
