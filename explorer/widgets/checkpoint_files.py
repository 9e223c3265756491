"""The dashboard's Save and Export buttons: write the current model and compare its size to dense.

*Save* writes a compressed 2:4 checkpoint (:func:`explorer.save_sparse`); *Export* writes the
dense masked model as ONNX (:func:`explorer.export_onnx`) and checks it for TensorRT. Files go
to ``<cache>/exports`` (see :func:`explorer.results.store.cache_dir`) unless a path is given.
The dashboard replaces its own files there (``overwrite=True``, so it can save again under the
same name); a path given by the user follows :mod:`explorer.output_paths` and an existing file
there is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer import _html

__all__ = ["WrittenFile", "default_path", "write_file"]

KINDS = {"save": ".safetensors", "export": ".onnx"}


@dataclass(frozen=True)
class WrittenFile:
    """A file the dashboard wrote, its size against the dense model's, and its report.

    Attributes
    ----------
    kind : {"save", "export"}
    path : Path
    file_bytes : int
    dense_bytes : int
        Bytes of the model's tensors stored dense (each shared tensor once).
    report : CheckpointReport or OnnxReport
    """

    kind: str
    path: Path
    file_bytes: int
    dense_bytes: int
    report: Any

    @property
    def message(self) -> str:
        """One sentence for the status line."""
        size = f"{_kib(self.file_bytes)}, {self.file_bytes / max(self.dense_bytes, 1):.1%} of "
        size += f"{_kib(self.dense_bytes)} dense"
        if self.kind == "save":
            layers = self.report.sparse_layers
            return f"saved {self.path} ({size}; {len(layers)} layers stored 2:4)"
        eligible = len(self.report.eligible)
        return (
            f"exported {self.path} ({size}; ONNX keeps the zeros dense; {eligible} of "
            f"{len(self.report.weights)} weights can take TensorRT's sparse tactics)"
        )

    def __repr__(self) -> str:
        return f"WrittenFile({self.kind}, {self.path.name}, {self.file_bytes:,} of {self.dense_bytes:,} dense bytes)"

    def _repr_html_(self) -> str:
        return f"<p>{_html.escape(self.message)}</p>" + self.report._repr_html_()


def default_path(model_name: str, label: str, kind: str) -> Path:
    """``<cache>/exports/<model>-<label>.<ext>`` with unsafe characters replaced.

    Parameters
    ----------
    model_name : str
        The model's name.
    label : str
        The run's label.
    kind : str
        ``"save"`` (a ``.safetensors`` file) or ``"export"`` (ONNX).

    Returns
    -------
    pathlib.Path

    Examples
    --------
    >>> default_path("digits-mlp", "magnitude 2:4 all float16", "save").name
    'digits-mlp-magnitude-2-4-all-float16.safetensors'
    """
    from explorer.results.store.location import cache_dir

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{model_name}-{label}").strip("-")
    return cache_dir() / "exports" / f"{stem}{KINDS[kind]}"


def write_file(
    bundle, kind: str, path=None, result=None, label: str = "dense", cancel=None, **check
) -> WrittenFile:
    """Save or export ``bundle.model``; ``check`` (dtype, tokens) goes to the ONNX check.

    Without ``path`` the file goes to :func:`default_path` and replaces an earlier one of the
    same name (the dashboard's own cache); a given ``path`` must not exist yet. A database,
    device or folder is refused either way.

    Parameters
    ----------
    bundle : ModelBundle
        The model bundle; its model is written.
    kind : str
        ``"save"`` or ``"export"``.
    path : str or pathlib.Path, optional
        The file; None for :func:`default_path`.
    result : PruneResult, optional
        The pruning result, for the saved checkpoint's masks.
    label : str, optional
        The run's label, in the default file name and the provenance.
    cancel : threading.Event, optional
        Passed to :func:`explorer.checkpoint.save_sparse`.
    **check
        Passed to :func:`explorer.checkpoint.export_onnx` (``dtype``, ``tokens``).

    Returns
    -------
    WrittenFile
        The file, its size against the dense size, and the save or export report.

    Examples
    --------
    >>> import os, tempfile, explorer
    >>> from explorer.models import load
    >>> bundle = load("digits-mlp")
    >>> result = explorer.prune(bundle.model, filter_fn=bundle.filter_fn, progress=False)
    >>> written = write_file(bundle, "save", os.path.join(tempfile.mkdtemp(), "d.safetensors"), result)
    >>> written  # doctest: +ELLIPSIS
    WrittenFile(save, d.safetensors, ... of 340,008 dense bytes)
    """
    from explorer.checkpoint import export_onnx, save_sparse

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    # the dashboard's own default files are replaced; a path the user chose is not
    overwrite = path is None
    path = Path(path) if path is not None else default_path(bundle.name, label, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "save":
        provenance = {"written by": "dashboard", "run": label}
        report = save_sparse(
            bundle,
            path,
            result,
            provenance=provenance,
            progress=False,
            cancel=cancel,
            overwrite=overwrite,
        )
    else:
        example = bundle.calibration(8)[0]
        report = export_onnx(bundle.model, path, example, overwrite=overwrite, **check)
    seen, dense = set(), 0
    for tensor in bundle.model.state_dict().values():
        key = (tensor.data_ptr(), tuple(tensor.shape), tensor.dtype)
        if key not in seen:
            seen.add(key)
            dense += tensor.numel() * tensor.element_size()
    return WrittenFile(kind, path, path.stat().st_size, dense, report)


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"
