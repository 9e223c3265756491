"""``check_file``: what ``sparsity-explorer check`` does, for an ONNX file, a checkpoint or a folder.

Without ``strict`` it verifies the file (every checksum, every 2:4 layer) and returns the report.
With ``strict`` the report must also prove 2:4 everywhere: a checkpoint or folder with a layer
kept dense or no 2:4 layer at all, or an ONNX file with a weight that falls back to dense or no
weight checked at all, is a :class:`CheckpointError` listing why.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from .export import verify_pretrained
from .load import verify_checkpoint
from .manifest import CheckpointError
from .onnx_check import OnnxReport, check_onnx
from .report import CheckpointReport

__all__ = ["check_file"]


def check_file(
    path: str | os.PathLike,
    *,
    strict: bool = False,
    dtype: str | torch.dtype = "float16",
    tokens: int = 1024,
) -> CheckpointReport | OnnxReport:
    """Verify a checkpoint, an exported Hugging Face folder or an ONNX file.

    Parameters
    ----------
    path : str or path-like
        A ``.onnx`` file, a ``.safetensors`` checkpoint from :func:`save_sparse`, or a folder
        from :func:`export_pretrained`.
    strict : bool
        Also require every layer to be 2:4 and at least one layer to be checked
        (``report.strict_problems`` empty).
    dtype, tokens
        For ONNX files, passed to :func:`check_onnx`.

    Returns
    -------
    CheckpointReport or OnnxReport

    Raises
    ------
    CheckpointError
        The file does not verify, or ``strict`` and ``report.strict_problems`` is not empty.

    Examples
    --------
    >>> import os, tempfile
    >>> from torch import nn
    >>> from explorer.checkpoint import save_sparse
    >>> path = os.path.join(tempfile.mkdtemp(), "dense.safetensors")
    >>> _ = save_sparse(nn.Sequential(nn.ReLU()), path, progress=False)
    >>> check_file(path)  # doctest: +ELLIPSIS
    CheckpointReport(dense.safetensors: 0 of 0 layers 2:4, ... dense, checksums ok)
    >>> check_file(path, strict=True)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    explorer.checkpoint.manifest.CheckpointError: ... fails the strict check: dense.safetensors records no 2:4 layer; ...
    """
    path = Path(path)
    if path.is_dir():
        report: CheckpointReport | OnnxReport = verify_pretrained(path)
    elif path.suffix.lower() == ".onnx":
        report = check_onnx(path, dtype=dtype, tokens=tokens)
    else:
        report = verify_checkpoint(path)
    problems = report.strict_problems
    if strict and problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise CheckpointError(
            f"{path} fails the strict check: {'; '.join(problems[:3])}{more}; expected every "
            "layer stored 2:4 and at least one checked. Prune every layer to 2:4, or drop --strict"
        )
    return report
