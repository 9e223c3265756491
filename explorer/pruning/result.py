"""What :func:`explorer.pruning.prune` returns."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .. import _html
from ..patterns import Pattern

__all__ = ["PruneResult"]

_MAX_HTML_ROWS = 60


@dataclass(frozen=True, eq=False)
class PruneResult:
    """The outcome of a pruning run.

    Attributes
    ----------
    masks : dict of str to torch.Tensor
        Bool keep-masks by layer name (fully qualified), same shapes as the weights, which hold
        zeros wherever the mask is False.
    method : str
        The pruning method.
    pattern : Pattern
        The sparsity pattern.
    seconds : float
        Wall-clock time of the run.
    errors : dict of str to float
        Relative reconstruction error ``||W X - W' X|| / ||W X||`` of each layer on the
        calibration inputs it saw (empty without calibration; NaN where not measurable).
    layers : tuple of str
        The pruned layers, in model order.
    model : nn.Module or None
        The pruned model (the input model itself when ``inplace=True``, else the copy).
    blocks : str or None
        The block list pruned block by block (e.g. ``"model.layers"``), or None.
    calibration_batches : int
        How many calibration batches were used.
    seed : int
        The seed (used by ``random``).
    update : str or None
        The weight update run after the mask was chosen (``"admm"``), or None.
    update_seconds : float
        Time spent in the weight update (part of ``seconds``).
    permutation : PermutationResult or None
        The channel reordering done before pruning (``permute=True``), or None.
    quantize : str or None
        The integer format the kept weights were jointly quantized to (``"int4"``,
        ``"int8"``), or None.
    group_size : int or None
        Input columns per quantization scale (with ``quantize``), or None.
    scales : dict of str to torch.Tensor
        Float32 ``[out, in / group_size]`` scales by layer (with ``quantize``): each weight is
        ``q * scale`` with integer ``q`` on the format's grid.

    Examples
    --------
    >>> from explorer.pruning import prune
    >>> net = nn.Sequential(nn.Linear(8, 4))
    >>> result = prune(net, "magnitude", "2:4", progress=False)
    >>> result.density, result.layers
    (0.5, ('0',))
    """

    masks: dict[str, torch.Tensor]
    method: str
    pattern: Pattern
    seconds: float
    errors: dict[str, float] = field(default_factory=dict)
    layers: tuple[str, ...] = ()
    model: nn.Module | None = field(default=None, repr=False)
    blocks: str | None = None
    calibration_batches: int = 0
    seed: int = 0
    update: str | None = None
    update_seconds: float = 0.0
    permutation: Any = field(default=None, repr=False)
    quantize: str | None = None
    group_size: int | None = None
    scales: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)

    @property
    def permute_seconds(self) -> float:
        """Time spent reordering channels (part of ``seconds``; 0 without ``permute``)."""
        return 0.0 if self.permutation is None else self.permutation.seconds

    @property
    def density(self) -> float:
        """Fraction of weights kept over all pruned layers (NaN when there are none)."""
        total = sum(m.numel() for m in self.masks.values())
        if total == 0:
            return math.nan
        return sum(int(m.sum()) for m in self.masks.values()) / total

    @property
    def mean_error(self) -> float:
        """Mean of the finite per-layer reconstruction errors (NaN when there are none)."""
        values = [e for e in self.errors.values() if math.isfinite(e)]
        return sum(values) / len(values) if values else math.nan

    def layer_density(self, name: str) -> float:
        """Fraction kept in one layer.

        Parameters
        ----------
        name : str
            The layer's name, a key of ``masks``.

        Returns
        -------
        float
        """
        mask = self.masks[name]
        return int(mask.sum()) / mask.numel()

    def to_dict(self) -> dict:
        """A JSON-serialisable summary (no tensors, no model)."""
        return {
            "method": self.method,
            "pattern": self.pattern.name,
            "seconds": round(self.seconds, 4),
            "density": _finite(self.density),
            "mean_error": _finite(self.mean_error),
            "blocks": self.blocks,
            "calibration_batches": self.calibration_batches,
            "seed": self.seed,
            "update": self.update,
            "update_seconds": round(self.update_seconds, 4),
            "permutation": None if self.permutation is None else self.permutation.to_dict(),
            "quantize": self.quantize,
            "group_size": self.group_size,
            "layers": [
                {
                    "name": name,
                    "shape": list(self.masks[name].shape),
                    "density": self.layer_density(name),
                    "error": _finite(self.errors.get(name, math.nan)),
                }
                for name in self.layers
            ],
        }

    def to_json(self) -> str:
        """The summary of :meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def __repr__(self) -> str:
        error = "" if math.isnan(self.mean_error) else f", mean_error={self.mean_error:.4f}"
        blocks = f", blocks={self.blocks!r}" if self.blocks else ""
        extra = f", update={self.update!r}" if self.update else ""
        if self.permutation is not None:
            extra += f", permuted={len(self.permutation.permuted)}"
        if self.quantize:
            extra += f", quantize={self.quantize!r}, group_size={self.group_size}"
        return (
            f"PruneResult(method={self.method!r}, pattern={self.pattern.name!r}, "
            f"layers={len(self.layers)}, density={self.density:.3f}{error}{blocks}{extra}, "
            f"seconds={self.seconds:.2f})"
        )

    def _repr_html_(self) -> str:
        rows = []
        for name in self.layers[:_MAX_HTML_ROWS]:
            error = self.errors.get(name, math.nan)
            rows.append(
                (
                    name,
                    "x".join(str(s) for s in self.masks[name].shape),
                    f"{self.layer_density(name):.3f}",
                    "-" if math.isnan(error) else f"{error:.4f}",
                )
            )
        if len(self.layers) > _MAX_HTML_ROWS:
            rows.append((f"... {len(self.layers) - _MAX_HTML_ROWS} more", "", "", ""))
        caption = (
            f"{self.method} at {self.pattern.name}: {len(self.layers)} layers, "
            f"density {self.density:.3f}, {self.seconds:.2f} s"
            + (f", block by block over {self.blocks}" if self.blocks else "")
            + (f", {self.update} update {self.update_seconds:.2f} s" if self.update else "")
            + (f", {self.quantize} (group {self.group_size})" if self.quantize else "")
            + (
                f", {len(self.permutation.permuted)} layers reordered first "
                f"(mean gain in kept score {self.permutation.mean_gain:+.2%})"
                if self.permutation is not None
                else ""
            )
        )
        return _html.table(("layer", "shape", "density", "reconstruction error"), rows, caption)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
