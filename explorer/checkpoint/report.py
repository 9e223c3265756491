"""What saving or verifying a sparse checkpoint found: per layer, how it is stored and checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from explorer import _html

__all__ = ["CheckpointReport", "LayerRecord"]

_MAX_HTML_ROWS = 80


@dataclass(frozen=True)
class LayerRecord:
    """One Linear layer of a checkpoint.

    Attributes
    ----------
    name : str
        The module's name (``"model.layers.0.mlp.up_proj"``).
    shape : tuple of int
        ``(out_features, in_features)``.
    dtype : str
    stored : str
        ``"2:4"`` (compressed: kept values plus 2-bit positions) or ``"dense"``.
    stored_bytes : int
        Bytes the weight takes in the file.
    dense_bytes : int
        Bytes of the dense weight.
    reason : str
        Why a dense layer was not stored as 2:4 (empty for 2:4 layers).
    quantize : str
        ``"int4"`` or ``"int8"`` for a 2:4 layer stored as group-wise int4 or int8 codes,
        ``"float8_e4m3fn"`` for one stored as FP8 codes with a scale per row, else empty.
    """

    name: str
    shape: tuple[int, int]
    dtype: str
    stored: str
    stored_bytes: int
    dense_bytes: int
    reason: str = ""
    quantize: str = ""

    @property
    def ratio(self) -> float:
        """Stored bytes over dense bytes."""
        return self.stored_bytes / self.dense_bytes if self.dense_bytes else 1.0

    @property
    def bits_per_weight(self) -> float:
        """Stored bits per dense weight (3.25 for 2:4 int4 with group size 128).

        A 2:4 FP8 layer takes 4 bits of codes, 1 of positions and ``32 / K`` of its row's scale.

        Examples
        --------
        >>> LayerRecord("fc", (8, 256), "float32", "2:4", 8 * 104, 8 * 256 * 4, "", "int4").bits_per_weight
        3.25
        >>> LayerRecord("fc", (8, 256), "bfloat16", "2:4", 8 * 164, 8 * 256 * 2, "", "float8_e4m3fn").bits_per_weight
        5.125
        """
        n = self.shape[0] * self.shape[1]
        return 8 * self.stored_bytes / n if n else float("nan")


@dataclass(frozen=True)
class CheckpointReport:
    """A verified sparse checkpoint: sizes, per-layer storage and what was kept dense and why.

    Returned by :func:`explorer.save_sparse` and :func:`explorer.checkpoint.verify_checkpoint`.
    Every checksum and every 2:4 layer's pattern was checked when it was made.

    Attributes
    ----------
    path : Path
    file_bytes : int
        Size of the file.
    dense_bytes : int
        Bytes of every stored tensor with the 2:4 weights dense (what a plain dense
        ``state_dict`` file holds, headers aside).
    layers : tuple of LayerRecord
        Every Linear layer, in model order.
    manifest : dict
        The manifest as stored.

    Examples
    --------
    >>> from torch import nn
    >>> import explorer, tempfile, os
    >>> net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)).half()
    >>> _ = explorer.prune(net, "magnitude", "2:4", progress=False)
    >>> path = os.path.join(tempfile.mkdtemp(), "net.safetensors")
    >>> report = explorer.save_sparse(net, path, progress=False)
    >>> [layer.stored for layer in report.layers]
    ['2:4', '2:4']
    """

    path: Path
    file_bytes: int
    dense_bytes: int
    layers: tuple[LayerRecord, ...]
    manifest: dict[str, Any] = field(repr=False, compare=False)

    @property
    def sparse_layers(self) -> tuple[LayerRecord, ...]:
        """Layers stored compressed as 2:4."""
        return tuple(r for r in self.layers if r.stored == "2:4")

    @property
    def skipped(self) -> dict[str, str]:
        """Layers kept dense, with the reason."""
        return dict(self.manifest.get("skipped", {}))

    @property
    def strict_problems(self) -> tuple[str, ...]:
        """Why ``check --strict`` fails: layers kept dense, or no 2:4 layer recorded at all.

        Examples
        --------
        >>> CheckpointReport(Path("m.safetensors"), 10, 10, (), {}).strict_problems
        ('m.safetensors records no 2:4 layer',)
        """
        problems = tuple(f"{fqn} is stored dense: {why}" for fqn, why in self.skipped.items())
        if not self.sparse_layers:
            problems += (f"{self.path.name} records no 2:4 layer",)
        return problems

    @property
    def ratio(self) -> float:
        """File bytes over dense bytes."""
        return self.file_bytes / self.dense_bytes if self.dense_bytes else 1.0

    @property
    def sparse_ratio(self) -> float:
        """Stored bytes of the 2:4 layers over their dense bytes (9/16 for 16-bit weights)."""
        stored = sum(r.stored_bytes for r in self.sparse_layers)
        dense = sum(r.dense_bytes for r in self.sparse_layers)
        return stored / dense if dense else 1.0

    def __str__(self) -> str:
        lines = [repr(self)]
        width = max((len(r.name) for r in self.layers), default=5)
        for r in self.layers:
            shape = f"{r.shape[0]}x{r.shape[1]}"
            what = (
                f"2:4{' ' + r.quantize if r.quantize else ''}, {r.ratio:.1%} of dense, "
                f"{r.bits_per_weight:.2f} bits/weight"
                if r.stored == "2:4"
                else f"dense: {r.reason}"
            )
            lines.append(f"  {r.name:<{width}}  {shape:>11}  {r.dtype:<8}  {what}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"CheckpointReport({self.path.name}: {len(self.sparse_layers)} of {len(self.layers)} "
            f"layers 2:4, {_size(self.file_bytes)} = {self.ratio:.1%} of {_size(self.dense_bytes)} "
            f"dense, checksums ok)"
        )

    def _repr_html_(self) -> str:
        rows = []
        for r in self.layers[:_MAX_HTML_ROWS]:
            level = "ok" if r.stored == "2:4" else "info"
            rows.append(
                (
                    r.name,
                    f"{r.shape[0]} x {r.shape[1]}",
                    r.dtype,
                    _html.badge(r.stored, level),
                    f"{r.stored_bytes:,} ({r.ratio:.1%})",
                    _html.escape(r.reason),
                )
            )
        if len(self.layers) > _MAX_HTML_ROWS:
            rows.append((f"... {len(self.layers) - _MAX_HTML_ROWS} more", "", "", "", "", ""))
        caption = (
            f"{self.path.name}: {_size(self.file_bytes)}, {self.ratio:.1%} of "
            f"{_size(self.dense_bytes)} dense; {len(self.sparse_layers)} of {len(self.layers)} "
            "layers stored 2:4; every checksum verified"
        )
        return _html.table(
            ("layer", "shape", "dtype", "stored", "bytes", "why dense"),
            rows,
            caption,
            raw_columns=(3,),
        )


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
