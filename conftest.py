"""GPU skips for the tests, and the package's docstring examples run with them.

Tests marked ``gpu`` and examples flagged ``+GPU`` are skipped with the reason unless a CUDA
GPU with sparse tensor cores, CuPy and nvmath-python are all present (CI has none of them;
they run on the GPU machine). The docstring examples run through ``--doctest-modules``
(pyproject.toml).

A session guard (:func:`_sensitive_paths_unchanged`) records the device nodes ``/dev/null``
and ``/dev/zero``, the home folder's listing, the repository root's listing and every file of
the ``explorer`` package (type, mode, size, mtime, and a hash of the small ones) before the
tests, and fails the run if any of them changed: tests and examples write only into their
temporary folders.

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
import hashlib
import importlib
import importlib.util
import os
import shutil
import stat
import tempfile
from functools import lru_cache
from pathlib import Path

import pytest

GPU = doctest.register_optionflag("GPU")
SLOW = doctest.register_optionflag("SLOW")


_CACHE_VARIABLES = (
    ("SPARSITY_EXPLORER_CACHE", "explorer"),  # tuned algorithms, trained weights, exports
    ("TRITON_CACHE_DIR", "triton"),  # torch.compile's kernels
    ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
    ("CUPY_CACHE_DIR", "cupy"),  # the explorer's CUDA kernels, compiled by CuPy
    ("CUDA_CACHE_PATH", "cuda"),  # the CUDA driver's JIT cache of PTX (~/.nv/ComputeCache)
    # what other programs the tests start keep per user (Chromium's profile, dconf's cache)
    ("XDG_CONFIG_HOME", "config"),
    ("XDG_CACHE_HOME", "cache"),
    ("XDG_DATA_HOME", "data"),
)
_SESSION_CACHE: list[Path] = []


def pytest_configure(config):
    """Point every cache the code under test fills at one temporary folder for the session, so
    no test writes into the home folder (the guard below checks that)."""
    root = Path(tempfile.mkdtemp(prefix="sparsity-explorer-tests-"))
    _SESSION_CACHE.append(root)
    for var, sub in _CACHE_VARIABLES:
        os.environ[var] = str(root / sub)
    # torch's C++ extensions (the explorer's compiled operator): a caller that set the folder
    # itself, to share one build between processes, keeps it
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(root / "torch-extensions"))


def pytest_unconfigure(config):
    for root in _SESSION_CACHE:
        shutil.rmtree(root, ignore_errors=True)


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


# -- the guard on paths outside the tests' temporary folders ----------------------------------
_DEVICES = ("/dev/null", "/dev/zero")
#: Names pytest, hypothesis and Python themselves create in the repository root or package.
_TOOL_NAMES = {".hypothesis", ".pytest_cache", ".ruff_cache", "__pycache__", ".coverage"}
_HASH_LIMIT = 64 << 10


def _fingerprint(path: str | Path) -> tuple | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    entry: tuple = (stat.filemode(st.st_mode), st.st_rdev)
    if stat.S_ISREG(st.st_mode):
        entry += (st.st_size, st.st_mtime_ns)
        if st.st_size <= _HASH_LIMIT:
            with open(path, "rb") as handle:
                entry += (hashlib.sha256(handle.read()).hexdigest()[:16],)
    return entry


def _listing(folder: Path) -> tuple[str, ...]:
    try:
        return tuple(sorted(n for n in os.listdir(folder) if n not in _TOOL_NAMES))
    except OSError as exc:
        return (f"<unreadable: {exc}>",)


def _package_dir() -> Path | None:
    spec = importlib.util.find_spec("explorer")
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def _snapshot(root: Path) -> dict[str, object]:
    snap: dict[str, object] = {dev: _fingerprint(dev) for dev in _DEVICES}
    snap[f"listing of {Path.home()}"] = _listing(Path.home())
    snap[f"listing of {root}"] = _listing(root)
    package = _package_dir()
    if package is not None:
        for folder, dirs, files in os.walk(package):
            dirs[:] = sorted(d for d in dirs if d not in _TOOL_NAMES)
            for name in files:
                if not name.endswith((".pyc", ".pyo")):
                    path = os.path.join(folder, name)
                    snap[path] = _fingerprint(path)
    return snap


def _changes(before: dict[str, object], after: dict[str, object]) -> list[str]:
    found = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old != new:
            if old is None:
                found.append(f"{key}: created ({new})")
            elif new is None:
                found.append(f"{key}: removed (was {old})")
            else:
                found.append(f"{key}: {old} -> {new}")
    return found


@pytest.fixture(scope="session", autouse=True)
def _sensitive_paths_unchanged(request):
    """Fail the run when a test or example changed a device node, ~, the repo root or the package."""
    root = Path(str(request.config.rootpath))
    before = _snapshot(root)
    yield
    changes = _changes(before, _snapshot(root))
    if changes:
        pytest.fail(
            "tests changed paths outside their temporary folders (a test or example must write "
            "only under tmp_path or tempfile.mkdtemp()):\n  " + "\n  ".join(changes[:20]),
            pytrace=False,
        )


# The conftest files are plugins, not modules of examples (several share the name conftest).
collect_ignore_glob = ["conftest.py", "tests/conftest.py", "tests/**/conftest.py"]
