"""The explorer's CUDA sources (``kernels/*.cu``) found and compiled with CuPy, once per build.

The sources ship inside the wheel as ``explorer/_kernels`` and sit in ``kernels/`` of a source
checkout; :func:`kernel_dir` finds either. :func:`compiled_function` compiles a file once per
device and build (a set of ``-D`` values: ``decode24_int4.cu`` is built one way per number of
scales a tile holds, :func:`explorer.gpu.cuda.coded_launch.kernel_build`) and hands out its
kernels.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from explorer.errors import require

__all__ = ["compiled_function", "kernel_dir", "kernel_source"]

#: A line that pastes one of the folder's headers: ``#include "name.cuh"``.
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([A-Za-z0-9_]+\.cuh)"[ \t]*$', re.MULTILINE)


def kernel_dir() -> Path:
    """Folder holding the ``.cu`` sources: ``explorer/_kernels`` (wheel) or ``kernels/`` (checkout).

    Examples
    --------
    >>> kernel_dir().joinpath("nm_check.cu").exists()
    True
    """
    here = Path(__file__).resolve().parents[2]  # the explorer package
    for cand in (here / "_kernels", here.parent / "kernels"):
        if (cand / "nm_check.cu").exists():
            return cand
    raise FileNotFoundError(
        f"CUDA kernel sources not found in {here / '_kernels'} or {here.parent / 'kernels'}; "
        "reinstall sparsity-explorer."
    )


def kernel_source(name: str) -> str:
    """The text of ``kernels/<name>.cu`` with each ``#include "x.cuh"`` replaced by that header.

    The headers are pasted in rather than found by the compiler, so the source CuPy compiles
    (and keys its cache of compiled code on) is the whole program: an edited header is a new
    source, never a stale cached build.

    Parameters
    ----------
    name : str
        The kernel file's name, without ``.cu``.

    Returns
    -------
    str
        The source to compile.

    Raises
    ------
    FileNotFoundError
        Where the file or one of its headers is not in :func:`kernel_dir`.

    Examples
    --------
    >>> src = kernel_source("silu_mul")
    >>> '#include "' in src, "griddepcontrol.wait" in src
    (False, True)
    """
    folder = kernel_dir()
    src = (folder / f"{name}.cu").read_text()

    def paste(match: re.Match) -> str:
        header = folder / match.group(1)
        if not header.is_file():
            raise FileNotFoundError(
                f"{name}.cu includes {match.group(1)!r}, which is not in {folder}; "
                "reinstall sparsity-explorer."
            )
        return header.read_text().rstrip("\n")

    return _INCLUDE.sub(paste, src)


@cache
def _module(name: str, device: int, defines: tuple = ()):
    cp = require("cupy", "gpu")
    src = kernel_source(name)
    options = ("-std=c++17", *(f"-D{key}={value}" for key, value in defines))
    with cp.cuda.Device(device):
        mod = cp.RawModule(code=src, options=options)
        mod.compile()
    return mod


@cache
def _function(name: str, fn: str, device: int, defines: tuple = ()):
    return _module(name, device, defines).get_function(fn)


def compiled_function(name: str, fn: str, device: int, defines: tuple = ()):
    """Kernel ``fn`` of ``kernels/<name>.cu``, compiled once per device and build (a CuPy ``Function``).

    Parameters
    ----------
    name : str
        The kernel file's name, without ``.cu``.
    fn : str
        The kernel's name in it.
    device : int
        The CUDA device index.
    defines : tuple of (str, int) pairs, optional
        Preprocessor values of the build (``-DNAME=VALUE``): a file can be built several ways,
        each compiled once (``decode24_int4.cu`` for groups of 64 or 32 columns,
        :mod:`explorer.gpu.cuda.coded_launch`).

    Returns
    -------
    cupy.cuda.Function
        The compiled kernel.

    Examples
    --------
    >>> compiled_function("silu_mul", "silu_mul_f16", 0).name  # doctest: +GPU
    'silu_mul_f16'
    """
    return _function(name, fn, device, tuple(defines))
