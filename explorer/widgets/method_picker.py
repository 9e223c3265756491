"""The method picker: which pruning method, pattern, calibration size and layers to use."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

from explorer.patterns import Pattern

__all__ = ["PATTERNS", "MethodConfig", "MethodPicker", "available_methods", "min_calibration"]

#: Patterns offered in the dropdown (any pattern :class:`explorer.patterns.Pattern` parses works).
PATTERNS = ("2:4", "4:8", "1:4", "unstructured:0.5", "block16:0.5", "rows:0.25")


def available_methods() -> tuple[str, ...]:
    """The methods the pruning method registry (:data:`explorer.pruning.METHODS`) holds.

    Read at each call (the widgets import :mod:`explorer.pruning` lazily), so a method
    registered later is offered too.

    Examples
    --------
    >>> "magnitude" in available_methods() and "wanda" in available_methods()
    True
    """
    from explorer.pruning import METHODS as REGISTRY

    return tuple(REGISTRY)


def min_calibration(method: str) -> int:
    """The fewest calibration samples ``method`` runs with: 1 if it needs data, else 0.

    The pruning method registry (:data:`explorer.pruning.METHODS`) says which methods need
    calibration data; a name it does not know (such as ``"dense"``) needs none.

    Parameters
    ----------
    method : str
        The method's name.

    Returns
    -------
    int

    Examples
    --------
    >>> min_calibration("wanda"), min_calibration("magnitude"), min_calibration("dense")
    (1, 0, 0)
    """
    from explorer.pruning import METHODS as REGISTRY

    info = REGISTRY.get(method)
    return 1 if info is not None and info.needs_calibration else 0


@dataclass(frozen=True)
class MethodConfig:
    """One pruning configuration (frozen, JSON-serialisable).

    Attributes
    ----------
    method : str
        Pruning method, e.g. ``"magnitude"`` or ``"wanda"``.
    pattern : str
        Sparsity pattern, e.g. ``"2:4"``; stored in the canonical form
        :meth:`explorer.Pattern.parse` gives (``" 2:4 "`` becomes ``"2:4"``).
    calibration : int
        Number of calibration samples: at least 1 for methods that need data (see
        :func:`min_calibration`), 0 allowed for data-free ones.
    layers : tuple of str, optional
        Layer names to prune; None prunes every layer the model's filter selects.
    dtype : str
        Dtype the speedup is estimated for.
    tokens : int
        Token count the speedup is estimated for.
    permute : bool
        Reorder input channels first so the N:M mask keeps more (``prune(permute=True)``).
    update : {None, "admm"}
        Re-optimise the kept weights on the calibration data after the mask is chosen
        (``prune(update="admm")``); needs calibration samples.
    quantize : {None, "int4", "int8"}
        SparseGPT only: quantize the kept weights group-wise inside its column loop
        (``prune(quantize=...)``). Such a run's speed is not estimated from layer shapes: 2:4 on
        quantized weights is timed by the GPU benchmark, whose rows the plot draws apart.
    group_size : int
        Input columns per quantization scale (with ``quantize``).

    Examples
    --------
    >>> cfg = MethodConfig("wanda", "2:4", calibration=32)
    >>> MethodConfig.from_json(cfg.to_json()) == cfg
    True
    >>> cfg.label
    'wanda 2:4 all float16'
    >>> MethodConfig("magnitude", " 2:4 ").pattern
    '2:4'
    >>> MethodConfig("magnitude", "4:2")
    Traceback (most recent call last):
    ...
    ValueError: pattern '4:2': N:M needs 1 <= N < M (keep N of every M weights), got N=4, M=2; e.g. "2:4" or "4:8"
    >>> MethodConfig("sparsegpt", permute=True, update="admm", quantize="int4", group_size=64).label
    'sparsegpt 2:4 all float16 permuted +ADMM int4 G64'
    >>> MethodConfig("magnitude", calibration=0, update="admm")
    Traceback (most recent call last):
    ...
    ValueError: update='admm' re-optimises the kept weights on calibration data, but calibration is 0 samples; use at least 1, e.g. calibration=32, or update=None
    """

    method: str = "magnitude"
    pattern: str = "2:4"
    calibration: int = 32
    layers: tuple[str, ...] | None = None
    dtype: str = "float16"
    tokens: int = 1024
    permute: bool = False
    update: str | None = None
    quantize: str | None = None
    group_size: int = 128

    def __post_init__(self) -> None:
        if not isinstance(self.method, str) or not self.method:
            raise ValueError(
                f"method must be a non-empty str, got {self.method!r}; e.g. 'magnitude'"
            )
        if (
            not isinstance(self.calibration, int)
            or isinstance(self.calibration, bool)
            or self.calibration < 0
        ):
            raise ValueError(
                f"calibration must be a non-negative int (samples), got {self.calibration!r}; "
                "e.g. calibration=32"
            )
        if self.calibration < min_calibration(self.method):
            raise ValueError(
                f"method {self.method!r} needs calibration data, but calibration is "
                f"{self.calibration} samples; use at least 1, e.g. calibration=32, or a "
                "data-free method such as 'magnitude'"
            )
        if not isinstance(self.tokens, int) or self.tokens < 1:
            raise ValueError(f"tokens must be a positive int, got {self.tokens!r}; e.g. 1024")
        if self.layers is not None:
            object.__setattr__(self, "layers", tuple(str(n) for n in self.layers))
        if not isinstance(self.pattern, str | Pattern):
            raise TypeError(
                f"pattern must be a string, got {type(self.pattern).__name__} {self.pattern!r}; "
                'e.g. "2:4"'
            )
        object.__setattr__(self, "pattern", Pattern.parse(self.pattern).name)
        self._check_steps()

    def _check_steps(self) -> None:
        """Check ``permute``, ``update``, ``quantize`` and ``group_size`` as ``prune`` will."""
        from explorer.pruning.methods import check_quantize, check_steps

        if not isinstance(self.permute, bool):
            raise TypeError(f"permute must be True or False, got {self.permute!r}")
        pattern = Pattern.parse(self.pattern)
        check_steps(self.permute, self.update, pattern)
        if self.update is not None and self.calibration < 1:
            raise ValueError(
                f"update={self.update!r} re-optimises the kept weights on calibration data, but "
                f"calibration is {self.calibration} samples; use at least 1, e.g. "
                "calibration=32, or update=None"
            )
        check_quantize(self.quantize, self.group_size, self.method, pattern, {})

    @property
    def layer_set(self) -> str:
        """``"all"`` or a short description of the chosen layers."""
        if self.layers is None:
            return "all"
        if len(self.layers) == 1:
            return self.layers[0]
        return f"{len(self.layers)} layers"

    @property
    def label(self) -> str:
        """One-line label: method, pattern, layer set, dtype, then the steps added to them."""
        steps = [
            *(["permuted"] if self.permute else []),
            *([f"+{self.update.upper()}"] if self.update else []),
            *([f"{self.quantize} G{self.group_size}"] if self.quantize else []),
        ]
        return " ".join([self.method, self.pattern, self.layer_set, self.dtype, *steps])

    def prune_options(self) -> dict:
        """The keyword arguments of :func:`explorer.pruning.prune` this configuration adds.

        Examples
        --------
        >>> MethodConfig("sparsegpt", update="admm").prune_options()
        {'permute': False, 'update': 'admm', 'quantize': None, 'group_size': 128}
        """
        return {
            "permute": self.permute,
            "update": self.update,
            "quantize": self.quantize,
            "group_size": self.group_size,
        }

    def to_json(self) -> str:
        """JSON text that :meth:`from_json` reads back."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> MethodConfig:
        """Read a configuration written by :meth:`to_json`.

        Parameters
        ----------
        text : str
            JSON written by :meth:`to_json`.

        Returns
        -------
        MethodConfig
        """
        data = json.loads(text)
        if data.get("layers") is not None:
            data["layers"] = tuple(data["layers"])
        return cls(**data)

    def __repr__(self) -> str:
        return f"MethodConfig({self.label}, calibration={self.calibration}, tokens={self.tokens})"


class MethodPicker:
    """Holds the configuration the next run uses; views bind their controls to :meth:`set`.

    Parameters
    ----------
    config : MethodConfig, optional
        The configuration to start from (default ``MethodConfig()``).
    layer_names : sequence of str
        The layers :meth:`set` accepts in ``layers``.

    Examples
    --------
    >>> picker = MethodPicker(layer_names=["fc1", "fc2"])
    >>> picker.set(method="wanda", layers=("fc1",))
    >>> picker.config.label
    'wanda 2:4 fc1 float16'
    """

    def __init__(self, config: MethodConfig | None = None, layer_names: Sequence[str] = ()) -> None:
        self.config = config or MethodConfig()
        self.methods = available_methods()
        self.patterns = PATTERNS
        self.layer_names = list(layer_names)

    def set(self, **changes) -> None:
        """Change fields of the configuration (validated; a bad value leaves it unchanged)."""
        if "method" in changes and changes["method"] not in self.methods:
            raise ValueError(
                f"unknown method {changes['method']!r}; expected one of {', '.join(self.methods)}"
            )
        layers = changes.get("layers")
        if layers is not None:
            unknown = [n for n in layers if n not in self.layer_names]
            if unknown:
                raise ValueError(
                    f"unknown layers {unknown}; expected names from the layer table, "
                    f"e.g. {self.layer_names[:3]}"
                )
        self.config = replace(self.config, **changes)

    def __repr__(self) -> str:
        return f"MethodPicker({self.config!r})"
