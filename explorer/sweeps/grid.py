"""A sweep's grid: its frozen configuration and the independent cells it expands into.

Every cell is a plain JSON-able dict (``{"cell": "prune", "model": ..., ...}``) whose key is the
hash of its canonical JSON, so the same cell gets the same key in every run and on every
machine: that key is what makes an interrupted sweep resumable.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass

from explorer.dtypes import dtype_name
from explorer.results.model_speed import DEFAULT_SPEED_MODE, check_speed_mode
from explorer.results.store.canonical import config_key
from explorer.sweeps.joint_quant import QUANT_OF, gptq_cells, joint_formats

__all__ = [
    "CELL_VERSION",
    "SPEED_PATTERNS",
    "Cell",
    "SweepConfig",
    "check_known",
    "model_speed_cell",
    "prune_cell",
]

#: Bumped when a cell's measurement changes meaning, so old results are not reused.
CELL_VERSION = 1

#: Patterns with a sparse kernel to time (cuSPARSELt's 2:4); others get accuracy cells only.
SPEED_PATTERNS = ("2:4",)

_DTYPES = ("float32", "float16", "bfloat16", "int8", "float8_e4m3fn")


def _names(value: object, what: str, example: str) -> tuple[str, ...]:
    parts = value.split(",") if isinstance(value, str) else value
    try:
        items = tuple(str(v).strip() for v in parts)  # type: ignore[union-attr]
    except TypeError:
        raise TypeError(f"{what}={value!r}: expected a list of strings such as {example}") from None
    if not items or any(not v for v in items):
        raise ValueError(f"{what}={value!r}: expected a non-empty list such as {example}")
    return tuple(dict.fromkeys(items))


def check_known(model: str, methods: tuple[str, ...]) -> None:
    """Refuse a model that is neither bundled nor a checkpoint folder, or an unknown method.

    A path (see :func:`explorer.models.folder.is_checkpoint_path`) must be a
    ``save_pretrained`` folder that :func:`explorer.models.folder.inspect_folder` accepts.

    Parameters
    ----------
    model : str
        A bundled model's name or a checkpoint folder's path.
    methods : tuple of str
        Pruning method names.

    Raises
    ------
    ValueError
        An unknown model or method (a folder the loader refuses raises its own error).

    Examples
    --------
    >>> check_known("digits-mlp", ("magnitude", "prune-it"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: method 'prune-it' is not a pruning method; expected one of ...
    """
    from explorer.models import MODELS
    from explorer.models.folder import inspect_folder, is_checkpoint_path
    from explorer.pruning import METHODS

    if model not in MODELS and is_checkpoint_path(model):
        inspect_folder(model)
    elif model not in MODELS:
        raise ValueError(
            f"model={model!r}: expected one of {', '.join(MODELS)}, or the path of a folder "
            "written by save_pretrained (e.g. ./my-model)"
        )
    for method in methods:
        if method not in METHODS:
            raise ValueError(
                f"method {method!r} is not a pruning method; expected one of {', '.join(METHODS)}"
            )


def _checkpoint(model: str, text: object) -> tuple[str, str | None]:
    """The model as the cells record it (a folder's absolute path) and the text file's path."""
    from pathlib import Path

    from explorer.models import MODELS
    from explorer.models.folder import inspect_folder, is_checkpoint_path

    if model in MODELS or not is_checkpoint_path(model):
        if text is not None:
            raise ValueError(
                f"text={str(text)!r} applies to a checkpoint folder only; the bundled model "
                f"{model!r} brings its own text: leave text (--text) out"
            )
        return model, None
    info = inspect_folder(model)
    if text is None:
        raise ValueError(
            f"model {model!r} is a checkpoint folder ({info.architecture}, {info.task}): pass a "
            "text file to evaluate and calibrate on, text='corpus.txt' (--text corpus.txt)"
        )
    path = Path(str(text)).expanduser()
    if not path.is_file():
        raise ValueError(f"text {str(text)!r} is not a file: expected a UTF-8 text file")
    return info.path, str(path.resolve())


def _token_counts(tokens: object) -> tuple[int, ...]:
    """Positive token counts from a comma-separated string or a list, in order, once each."""
    items = _names(tokens, "tokens", "[128, 1024]") if tokens is not None else ()
    for item in items:
        if not item.isascii() or not item.isdigit() or int(item) < 1:
            raise ValueError(
                f"tokens={tokens!r}: {item!r} is not a token count; expected positive whole "
                "numbers such as 1024 (comma-separated on the command line: --tokens 1024,4096). "
                "Hint: a token count is batch x sequence per forward (4 x 1024 = 4096)"
            )
    return tuple(dict.fromkeys(int(t) for t in items))


def _dtype_name(value: object) -> str:
    name = dtype_name(value)
    if name not in _DTYPES:
        raise ValueError(
            f"dtype {value!r} is not one a sweep measures; expected one of {', '.join(_DTYPES)}"
        )
    return name


@dataclass(frozen=True)
class SweepConfig:
    """What a sweep covers: one model and a grid of methods, patterns, layers, dtypes and tokens.

    Parameters
    ----------
    model : str
        A bundled model name (see :data:`explorer.models.MODELS`).
    methods, patterns, layer_sets, dtypes : tuple of str
        The grid's axes. A layer set is a name of :data:`explorer.layer_sets.LAYER_SETS`:
        ``"all"`` (the model's own ``filter_fn``), ``"every"`` (every ``nn.Linear``),
        ``"fast"`` (the layers the doctor calls fast once 2:4, at each token count of the grid)
        or ``"mlp"`` (by name); or glob patterns on layer names joined by ``|``
        (``"encoder.*.intermediate*|encoder.*.output.dense"``). A set that holds no layer of
        the model is a failed cell that says so.
    tokens : tuple of int
        Token counts (tokens per forward, batch x sequence) for the speed measurements: the
        layer speed cells and the whole-model timing of each pruned model.
    speed_mode : str
        The execution mode each pruned 2:4 model is timed in on a GPU: ``"eager"``,
        ``"compile"`` or ``"graphs"`` (the default; see
        :data:`explorer.results.model_speed.DEFAULT_SPEED_MODE`).
    calibration_samples : int
        Calibration samples given to methods that need them (Wanda, SparseGPT).
    seed : int
        Seed of the calibration draw and of the random method.
    text : str or None
        For a checkpoint folder (``model`` is its absolute path): the text file it is
        evaluated and calibrated on (see :func:`explorer.models.from_pretrained`).
    quantize : tuple of str
        Weight formats (``"int4"``, ``"int8"``) each SparseGPT cell is also pruned and quantized
        jointly in (``prune(quantize=...)``), and the dense model quantized in by GPTQ: one more
        prune and dense cell per format, rows with ``quant`` (``"int4"``, or ``"int8-weights"``
        for int8 weight-only), which the trade-off plot draws as quantized points.
    group_size : int
        Input columns per quantization scale of those cells (a multiple of 4 dividing the
        pruned layers' widths).
    update : str or None
        A weight update every prune cell runs after its mask (``"admm"``), on the grid where
        quantized.

    Examples
    --------
    >>> cfg = SweepConfig.make("digits-mlp", methods="magnitude,random", patterns=["2:4"])
    >>> [c.kind for c in cfg.cells()]  # doctest: +NORMALIZE_WHITESPACE
    ['dense', 'prune', 'prune', 'speed', 'model-speed', 'model-speed', 'model-speed']
    >>> cfg.sweep_id == SweepConfig.from_json(cfg.to_json()).sweep_id
    True
    """

    model: str
    methods: tuple[str, ...] = ("magnitude",)
    patterns: tuple[str, ...] = ("2:4",)
    layer_sets: tuple[str, ...] = ("all",)
    dtypes: tuple[str, ...] = ("float16",)
    tokens: tuple[int, ...] = (1024,)
    calibration_samples: int = 128
    seed: int = 0
    text: str | None = None
    speed_mode: str = DEFAULT_SPEED_MODE
    quantize: tuple[str, ...] = ()
    group_size: int = 128
    update: str | None = None

    @classmethod
    def make(
        cls,
        model: str,
        methods: object = ("magnitude",),
        patterns: object = ("2:4",),
        layer_sets: object = ("all",),
        dtypes: object = ("float16",),
        tokens: object = (1024,),
        calibration_samples: int = 128,
        seed: int = 0,
        text: object = None,
        speed_mode: str = DEFAULT_SPEED_MODE,
        quantize: object = (),
        group_size: int = 128,
        update: str | None = None,
    ) -> SweepConfig:
        """Validate and normalise the axes (comma-separated strings or lists) into a config.

        A ``model`` that is a path is checked as a checkpoint folder and recorded as its
        absolute path, and ``text`` (required for it) as the text file's absolute path.

        Parameters
        ----------
        model : str
            A bundled model name or a checkpoint folder.
        methods, patterns, layer_sets, dtypes, tokens : str or sequence
            The grid's axes, comma-separated or as lists (see the class's parameters).
        calibration_samples : int, optional
            Calibration samples given to methods that need them.
        seed : int, optional
            Seed of the calibration draw and of the random method.
        text : str or pathlib.Path or None, optional
            The text file of a checkpoint folder; refused for a bundled model.
        speed_mode : str, optional
            The execution mode pruned 2:4 models are timed in.
        quantize : str or sequence, optional
            Formats SparseGPT and dense cells are also quantized in (``"int4"``, ``"int8"``).
        group_size : int, optional
            Input columns per scale of the quantized cells.
        update : str, optional
            The weight update after every mask (``"admm"``).

        Returns
        -------
        SweepConfig
        """
        from explorer.patterns import Pattern

        if not isinstance(model, str) or not model:
            raise ValueError(f"model={model!r}: expected a bundled model name such as 'digits-mlp'")
        check_speed_mode(speed_mode)
        token_counts = _token_counts(tokens)
        patterns = tuple(Pattern.parse(p).name for p in _names(patterns, "patterns", '["2:4"]'))
        for name, value in (("calibration_samples", calibration_samples), ("seed", seed)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name}={value!r}: expected a non-negative int")
        method_names = _names(methods, "methods", '["magnitude", "wanda"]')
        check_known(model, method_names)
        model, text = _checkpoint(model, text)
        from explorer.pruning.methods import UPDATES

        formats = joint_formats(
            _names(quantize, "quantize", '["int4"]') if quantize else (), method_names, group_size
        )
        if update is not None and update not in UPDATES:
            raise ValueError(
                f"update={update!r} unknown; choose one of {', '.join(map(repr, UPDATES))} or None"
            )
        return cls(
            model=model,
            methods=method_names,
            patterns=patterns,
            layer_sets=_names(layer_sets, "layer_sets", '["all"]'),
            dtypes=tuple(
                dict.fromkeys(_dtype_name(d) for d in _names(dtypes, "dtypes", "float16"))
            ),
            tokens=token_counts,
            calibration_samples=calibration_samples,
            seed=seed,
            text=text,
            speed_mode=speed_mode,
            quantize=formats,
            group_size=group_size,
            update=update,
        )

    @property
    def sweep_id(self) -> str:
        """``"<model>-<hash of the config>"``: the same grid resumes the same sweep.

        A checkpoint folder is named by its last part; a config without ``text``, and one with
        the default ``speed_mode``, hashes as it did before that field existed, so existing
        sweeps keep their ids (and gain their model-speed cells when run again).
        """
        spec = asdict(self)
        if spec["text"] is None:
            del spec["text"]
        if spec["speed_mode"] == DEFAULT_SPEED_MODE:
            del spec["speed_mode"]
        for field, default in (("quantize", ()), ("group_size", 128), ("update", None)):
            if spec[field] == default:  # (fields added later hash as before when unused)
                del spec[field]
        label = self.model.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
        return f"{label}-{config_key(spec, 10)}"

    def to_json(self) -> str:
        """The configuration as JSON text."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SweepConfig:
        """Rebuild a configuration from :meth:`to_json`'s text.

        Parameters
        ----------
        text : str
            JSON written by :meth:`to_json`.

        Returns
        -------
        SweepConfig
        """
        data = json.loads(text)
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})

    def cells(self) -> list[Cell]:
        """The grid's cells: dense baselines, pruned models, then speed measurements.

        One dense cell per dtype (and per dtype x quantization format, by GPTQ); one prune cell
        per method x pattern x layer set x dtype (for layer set ``"fast"``, x token count too); one
        speed cell per pattern of :data:`SPEED_PATTERNS` x layer set x dtype x token count (speed
        does not depend on the method; only 2:4 has a sparse kernel). Then a model-speed cell per
        dense and prune cell (:func:`model_speed_cell`): it times a 2:4 model whole at each token
        count in :attr:`speed_mode` on a GPU, or says why not (:mod:`explorer.sweeps.model_speed`).
        """
        base: dict = {"model": self.model, "version": CELL_VERSION}
        if self.text is not None:
            base["load"] = {"text": self.text}
        out = [Cell({"cell": "dense", **base, "dtype": d}) for d in self.dtypes]
        out += [Cell(c) for c in gptq_cells(base, self)]  # int4 (int8) dense: nothing pruned
        update = {} if self.update is None else {"update": self.update}
        for method, pattern, layers, dtype in itertools.product(
            self.methods, self.patterns, self.layer_sets, self.dtypes
        ):
            quantized = [
                {"quant": QUANT_OF[f], "group_size": self.group_size} for f in self.quantize
            ]
            for tokens in (self.tokens or (1024,)) if layers == "fast" else (None,):
                for steps in [{}, *(quantized if method == "sparsegpt" else [])]:
                    out.append(
                        prune_cell(
                            {**base, "dtype": dtype},
                            method,
                            pattern,
                            layers,
                            self.calibration_samples,
                            self.seed,
                            **({} if tokens is None else {"tokens": tokens}),
                            **update,
                            **steps,
                        )
                    )
        measured = [model_speed_cell(c, self.speed_mode, self.tokens) for c in out]
        timed = [p for p in self.patterns if p in SPEED_PATTERNS]
        for pattern, layers, dtype, tokens in itertools.product(
            timed, self.layer_sets, self.dtypes, self.tokens
        ):
            config = {"pattern": pattern, "layers": layers, "dtype": dtype, "tokens": tokens}
            out.append(Cell({"cell": "speed", **base, **config}))
        return out + measured


def model_speed_cell(cell: Cell, mode: str, tokens: tuple[int, ...]) -> Cell:
    """The cell that times ``cell``'s model whole.

    Its configuration is ``cell``'s with the kind ``"model-speed"``, the mode and token counts, and
    ``of_cell``, the key of the cell whose accuracy row it belongs to.

    Parameters
    ----------
    cell : Cell
        The dense or prune cell whose model is timed.
    mode : str
        The execution mode (see :data:`explorer.results.model_speed.SPEED_MODES`).
    tokens : tuple of int
        The token counts timed.

    Returns
    -------
    Cell

    Examples
    --------
    >>> dense = Cell({"cell": "dense", "model": "m", "dtype": "float16"})
    >>> timed = model_speed_cell(dense, "graphs", (1024,))
    >>> timed.kind, timed.config["of"], timed.config["of_cell"] == dense.key
    ('model-speed', 'dense', True)
    >>> timed.config["speed"]
    {'mode': 'graphs', 'tokens': [1024]}
    """
    return Cell(
        {
            **cell.config,
            "cell": "model-speed",
            "of": cell.kind,
            "of_cell": cell.key,
            "speed": {"mode": mode, "tokens": list(tokens)},
        }
    )


def prune_cell(
    base: dict,
    method: str,
    pattern: str,
    layers: str = "all",
    calibration_samples: int = 128,
    seed: int = 0,
    **steps: object,
) -> Cell:
    """A prune cell: ``base`` (model, version, dtype, ...), what it prunes, and its extra steps.

    Parameters
    ----------
    base : dict
        The shared part of the configuration (model, version, dtype, ...).
    method : str
        The pruning method.
    pattern : str
        The sparsity pattern's name.
    layers : str, optional
        The layer set pruned.
    calibration_samples : int, optional
        Calibration samples for the methods that need them.
    seed : int, optional
        Seed of the calibration draw and of the random method.
    **steps : object
        Extra steps, added to the configuration as they are (``update="admm"``).

    Returns
    -------
    Cell

    Examples
    --------
    >>> prune_cell({"model": "m", "dtype": "float32"}, "wanda", "2:4", update="admm").config
    {'cell': 'prune', 'model': 'm', 'dtype': 'float32', 'method': 'wanda', 'pattern': '2:4', \
'layers': 'all', 'calibration_samples': 128, 'seed': 0, 'update': 'admm'}
    """
    return Cell(
        {
            "cell": "prune",
            **base,
            "method": method,
            "pattern": pattern,
            "layers": layers,
            "calibration_samples": calibration_samples,
            "seed": seed,
            **steps,
        }
    )


@dataclass(frozen=True)
class Cell:
    """One independent unit of a sweep: a JSON-able configuration and its deterministic key.

    Parameters
    ----------
    config : dict
        The configuration; its ``"cell"`` entry names the kind (:attr:`kind`).

    Examples
    --------
    >>> Cell({"cell": "dense", "model": "m"}).key == Cell({"model": "m", "cell": "dense"}).key
    True
    """

    config: dict

    @property
    def kind(self) -> str:
        """The cell's kind, its ``"cell"`` entry (``"dense"``, ``"prune"``, ...)."""
        return self.config["cell"]

    @property
    def key(self) -> str:
        """The configuration's key (:func:`~explorer.results.store.canonical.config_key`)."""
        return config_key(self.config)

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        shown = " ".join(str(v) for k, v in self.config.items() if k not in ("cell", "version"))
        return f"Cell({self.kind} {shown} key={self.key})"
