"""``check_onnx``: before building a TensorRT engine, say which weights can take sparse tactics.

TensorRT uses sparse tensor cores (``--sparsity=enable`` / ``BuilderFlag.SPARSE_WEIGHTS``) only
for layers whose constant weights already hold 2:4 along the reduction dimension:

* ``MatMul(X, B)`` with a constant ``B[K, N]``: every group of 4 consecutive ``K`` entries of
  each column (exported ``nn.Linear`` layers store ``W^T`` here);
* ``Gemm(A, B)``: the same along ``K``, i.e. along the rows of ``B[N, K]`` when ``transB=1``;
* ``Conv`` with weights ``[C_out, C_in/groups, kH, kW]``: for each output channel and each
  kernel position, every group of 4 consecutive input channels.

The weights are read from the file's initializers (and ``Constant`` nodes) with the ``onnx``
package, followed back through ``Identity``, ``Cast``, ``Transpose``, ``DequantizeLinear``,
``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze`` and constant ``Mul``/``Div`` nodes, and
counted with :func:`explorer.check_pattern`. The shape rules are the doctor's
(:mod:`explorer.sparse_rules`): the reduction width must be a multiple of 4 to hold 2:4 at all; the
sparse operand's rows and columns should be multiples of 16 (16-bit) or 32 (8-bit), or the
sparse kernels cannot take it; small products are rarely faster sparse. TensorRT times sparse
against dense tactics at build time and keeps the faster, so "eligible" means it *can* run
sparse, not that it will.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from explorer import _html
from explorer.checks import check_pattern
from explorer.diagnosis import FAST_MACS
from explorer.dtypes import dtype_name, parse_dtype
from explorer.errors import require
from explorer.sparse_rules import GROUP, sparse_multiple

from .manifest import CheckpointError

__all__ = ["OnnxReport", "OnnxWeight", "check_onnx"]

_WEIGHT_OPS = ("MatMul", "Gemm", "Conv")
_PASS_THROUGH = (
    *("Identity", "Cast", "Transpose", "DequantizeLinear"),
    *("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Mul", "Div"),
)
_MAX_TRACE = 16
_MAX_HTML_ROWS = 80


@dataclass(frozen=True)
class OnnxWeight:
    """One MatMul/Gemm/Conv weight of an ONNX model, as TensorRT's sparse path sees it.

    Attributes
    ----------
    node : str
        The node's name.
    layer : str
        The PyTorch module it came from when the exporter recorded it, else the node's name.
    op : str
        ``"MatMul"``, ``"Gemm"`` or ``"Conv"``.
    initializer : str
        The weight's initializer name.
    shape : tuple of int
        The weight as a sparse operand: ``(rows, K)`` with 2:4 groups along ``K`` (for a
        convolution ``rows = C_out * kH * kW``, ``K = C_in / groups``).
    valid_24 : bool
        Whether every group of 4 along ``K`` holds at most 2 nonzeros.
    violations : int
        Groups of 4 with more than 2 nonzeros.
    groups : int
        Groups checked.
    verdict : str
        ``"sparse"`` (can take sparse tactics), ``"slow"`` (can, but likely no faster) or
        ``"dense"`` (falls back to dense).
    reasons : tuple of str
        Why it falls back or may be slow.
    """

    node: str
    layer: str
    op: str
    initializer: str
    shape: tuple[int, int]
    valid_24: bool
    violations: int
    groups: int
    verdict: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class OnnxReport:
    """What :func:`check_onnx` found for every weight of an ONNX model.

    Attributes
    ----------
    path : Path
    dtype : torch.dtype
        The precision the engine will be built in.
    tokens : int
        Rows of the activations per call assumed for the size rule.
    weights : tuple of OnnxWeight
        In graph order.
    """

    path: Path
    dtype: torch.dtype
    tokens: int
    weights: tuple[OnnxWeight, ...]

    @property
    def eligible(self) -> tuple[OnnxWeight, ...]:
        """Weights that can take TensorRT's sparse tactics (verdict sparse or slow)."""
        return tuple(w for w in self.weights if w.verdict != "dense")

    @property
    def fallbacks(self) -> dict[str, str]:
        """Weights that fall back to dense, with the reasons."""
        return {w.layer: "; ".join(w.reasons) for w in self.weights if w.verdict == "dense"}

    @property
    def strict_problems(self) -> tuple[str, ...]:
        """Why ``check --strict`` fails: weights that fall back to dense, or none checked.

        Examples
        --------
        >>> OnnxReport(Path("m.onnx"), torch.float16, 1024, ()).strict_problems
        ('no MatMul/Gemm/Conv weight was found and checked in m.onnx',)
        """
        if not self.weights:
            return (f"no MatMul/Gemm/Conv weight was found and checked in {self.path.name}",)
        return tuple(f"{layer} falls back to dense: {why}" for layer, why in self.fallbacks.items())

    def weight(self, layer: str) -> OnnxWeight:
        """The check of one layer, by PyTorch module name or node name.

        Parameters
        ----------
        layer : str
            A PyTorch module name or an ONNX node name.

        Returns
        -------
        OnnxWeight
        """
        for w in self.weights:
            if layer in (w.layer, w.node):
                return w
        raise KeyError(f"no weight of layer or node {layer!r} in {self.path.name}")

    def __repr__(self) -> str:
        slow = sum(w.verdict == "slow" for w in self.weights)
        return (
            f"OnnxReport({self.path.name}: {len(self.weights)} weights, "
            f"{len(self.eligible)} can run 2:4 sparse in TensorRT"
            f"{f' ({slow} likely no faster)' if slow else ''}, "
            f"{len(self.weights) - len(self.eligible)} fall back to dense)"
        )

    def __str__(self) -> str:
        lines = [repr(self)]
        width = max((len(w.layer) for w in self.weights), default=5)
        for w in self.weights:
            shape = f"{w.shape[0]}x{w.shape[1]}"
            why = f": {'; '.join(w.reasons)}" if w.reasons else ""
            lines.append(f"  {w.layer:<{width}}  {w.op:<6} {shape:>11}  {w.verdict}{why}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        level = {"sparse": "ok", "slow": "warn", "dense": "error"}
        rows = [
            (
                w.layer,
                w.op,
                f"{w.shape[0]} x {w.shape[1]}",
                "yes" if w.valid_24 else f"no ({w.violations:,} of {w.groups:,} groups)",
                _html.badge(w.verdict, level[w.verdict]),
                _html.escape("; ".join(w.reasons)),
            )
            for w in self.weights[:_MAX_HTML_ROWS]
        ]
        if len(self.weights) > _MAX_HTML_ROWS:
            rows.append((f"... {len(self.weights) - _MAX_HTML_ROWS} more", "", "", "", "", ""))
        caption = (
            f"{self.path.name}: {len(self.eligible)} of {len(self.weights)} weights can take "
            f"TensorRT's sparse tactics ({dtype_name(self.dtype)}, "
            f"{self.tokens} tokens)"
        )
        return _html.table(
            ("layer", "op", "rows x K", "2:4 along K", "TensorRT", "why"),
            rows,
            caption,
            raw_columns=(4,),
        )


def check_onnx(
    path: str | os.PathLike, dtype: str | torch.dtype = "float16", tokens: int = 1024
) -> OnnxReport:
    """Check every MatMul/Gemm/Conv weight of an ONNX file for TensorRT's 2:4 sparse tactics.

    Parameters
    ----------
    path : str or path-like
        An ``.onnx`` file (external data files beside it are read too).
    dtype : str or torch.dtype
        The precision the engine will be built in: ``"float16"`` (``--fp16``, default),
        ``"bfloat16"``, ``"int8"``, ``"fp8"`` or ``"float32"``.
    tokens : int
        Rows of activations per call (batch x sequence, or batch x output pixels for a
        convolution), for the size rule.

    Returns
    -------
    OnnxReport

    Raises
    ------
    CheckpointError
        Not an ONNX model, or one whose weights are not in the file (exported without
        parameters, or external data missing).
    MissingExtraError
        ``onnx`` is not installed (``pip install "sparsity-explorer[deploy]"``).

    Examples
    --------
    >>> import os, tempfile, torch, explorer
    >>> from torch import nn
    >>> from explorer.checkpoint import export_onnx
    >>> net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    >>> _ = explorer.prune(net, "magnitude", "2:4", progress=False)
    >>> path = os.path.join(tempfile.mkdtemp(), "net.onnx")
    >>> _ = export_onnx(net, path, torch.randn(8, 64))
    >>> check_onnx(path).fallbacks
    {'2': 'outputs=10 not a multiple of 16, which sparse kernels need for float16'}
    """
    onnx = require("onnx", "deploy")
    numpy_helper = require("onnx.numpy_helper", "deploy")
    dtype = parse_dtype(dtype)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"tokens must be a positive int, got {tokens!r}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"ONNX file {path} does not exist (or is not a file)")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise CheckpointError(
            f"{path} cannot be read as an ONNX model ({type(exc).__name__}: {exc}); the file is "
            "truncated, damaged or not ONNX"
        ) from None
    _load_external_data(onnx, model, path)
    graph = model.graph
    if not graph.node:
        raise CheckpointError(f"{path} has an empty graph (no nodes); it is not a usable model")
    constants: dict[str, Any] = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if (
            node.op_type == "Constant"
            and node.output
            and node.attribute
            and node.attribute[0].name == "value"
        ):
            constants[node.output[0]] = node.attribute[0].t
    producers = {out: node for node in graph.node for out in node.output}
    weight_nodes = [n for n in graph.node if n.op_type in _WEIGHT_OPS]
    for node in weight_nodes:
        if len(node.input) < 2 or not node.output:
            raise CheckpointError(
                f"{path}: node {_label(node)!r} ({node.op_type}) has {len(node.input)} inputs and "
                f"{len(node.output)} outputs, expected at least 2 inputs and 1 output; the file "
                "is damaged or was not written by an ONNX exporter"
            )
    graph_inputs = {i.name for i in graph.input}
    # 1. a model whose weight ops read their weights from graph inputs was exported without them
    if (
        weight_nodes
        and not graph.initializer
        and any(n.input[1] in graph_inputs for n in weight_nodes)
    ):
        raise CheckpointError(
            f"{path} holds no weights: its {len(weight_nodes)} MatMul/Gemm/Conv nodes read them "
            "from graph inputs. Export with the weights (torch.onnx.export(..., "
            "export_params=True), or explorer.checkpoint.export_onnx)"
        )
    tracer = _ConstantTracer(constants, producers, numpy_helper, onnx)
    checks = []
    for node in weight_nodes:
        # 2. follow each weight back to its constant through layout-only and scaling nodes
        try:
            found = _sparse_operand(node, tracer.resolve)
            if found is not None:
                checks.append(_check_weight(node, *found, dtype, tokens))
        except (ValueError, IndexError, TypeError, KeyError, RecursionError) as exc:
            if isinstance(exc, CheckpointError):
                raise
            raise CheckpointError(
                f"{path}: the weight of node {_label(node)!r} ({node.op_type}) cannot be read "
                f"({type(exc).__name__}: {str(exc)[:120]}); the file is damaged or uses an "
                "unusual graph. Re-export it with explorer.checkpoint.export_onnx"
            ) from None
    return OnnxReport(path, dtype, tokens, tuple(checks))


class _ConstantTracer:
    """Follows a node input back to the constant it is computed from, if any.

    Layout and scaling nodes are followed (``Identity``, ``Cast``, ``Transpose``,
    ``DequantizeLinear``, ``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze``, and ``Mul`` or
    ``Div`` of two constants), up to :data:`_MAX_TRACE` nodes deep; their values are computed
    with numpy so the zero pattern is the one the engine sees.
    """

    def __init__(self, constants, producers, numpy_helper, onnx) -> None:
        self.constants, self.producers = constants, producers
        self.numpy_helper, self.onnx = numpy_helper, onnx
        self.arrays: dict[str, tuple[np.ndarray, str] | None] = {}

    def resolve(self, name: str, depth: int = 0) -> tuple[np.ndarray, str] | None:
        """``(value, initializer name)`` of the constant behind ``name``, or None."""
        if name not in self.arrays:
            self.arrays[name] = self._resolve(name, depth)
        return self.arrays[name]

    def _resolve(self, name: str, depth: int) -> tuple[np.ndarray, str] | None:
        if name in self.constants:
            return np.asarray(self.numpy_helper.to_array(self.constants[name])), name
        node = self.producers.get(name)
        if node is None or node.op_type not in _PASS_THROUGH or depth > _MAX_TRACE:
            return None
        if not node.input:
            raise ValueError(f"{node.op_type} node {_label(node)!r} has no inputs")
        found = self.resolve(node.input[0], depth + 1)
        if found is None:
            return None
        value, source = found
        op = node.op_type
        if op == "Transpose":
            perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
            value = np.transpose(value, perm) if perm else value.T
        elif op == "Cast":
            to = _attr(node, "to", 0)
            try:
                target = self.onnx.helper.tensor_dtype_to_np_dtype(to)
            except (KeyError, ValueError, TypeError):
                target = None
            if target is not None and target.kind in "biuf":
                with np.errstate(all="ignore"):
                    value = value.astype(target)
        elif op == "DequantizeLinear" and len(node.input) > 2:
            zero = self.resolve(node.input[2], depth + 1)
            if zero is not None and np.any(zero[0] != 0):
                value = value.astype(np.int32) - np.asarray(zero[0], dtype=np.int32)
        elif op in ("Reshape", "Squeeze", "Unsqueeze"):
            value = self._reshape(node, value, depth)
        elif op == "Flatten":
            axis = _attr(node, "axis", 1) % max(value.ndim, 1)
            value = value.reshape(int(np.prod(value.shape[:axis], dtype=np.int64)), -1)
        elif op in ("Mul", "Div"):
            other = self.resolve(node.input[1], depth + 1) if len(node.input) > 1 else None
            if other is None:
                return None  # a weight times activations is not a constant weight
            with np.errstate(all="ignore"):
                product = value * other[0] if op == "Mul" else value / other[0]
            if other[0].size > value.size:
                source = other[1]
            value = product
        return value, source

    def _reshape(self, node, value: np.ndarray, depth: int) -> np.ndarray | None:
        second = self.resolve(node.input[1], depth + 1) if len(node.input) > 1 else None
        if node.op_type == "Reshape":
            if second is None:
                raise ValueError(f"Reshape node {_label(node)!r} has no constant shape")
            shape = [int(d) for d in np.asarray(second[0]).reshape(-1)]
            if not _attr(node, "allowzero", 0):
                shape = [value.shape[i] if d == 0 else d for i, d in enumerate(shape)]
            return value.reshape(shape)
        axes = (
            [int(a) for a in np.asarray(second[0]).reshape(-1)]
            if second is not None
            else next((list(a.ints) for a in node.attribute if a.name == "axes"), [])
        )
        if node.op_type == "Squeeze":
            return np.squeeze(value, axis=tuple(axes)) if axes else np.squeeze(value)
        for axis in sorted(a % (value.ndim + len(axes)) for a in axes):
            value = np.expand_dims(value, axis)
        return value


def _label(node) -> str:
    return node.name or (node.output[0] if node.output else f"<unnamed {node.op_type}>")


def _load_external_data(onnx, model, path: Path) -> None:
    """Read the weights kept in data files beside the model, or say which file is missing."""
    external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return
    locations = {
        entry.value for t in external for entry in t.external_data if entry.key == "location"
    }
    missing = sorted(loc for loc in locations if not (path.parent / loc).is_file())
    if missing:
        raise CheckpointError(
            f"{path} keeps its weights in an external data file that is missing: "
            f"{', '.join(missing)}; copy it next to {path.name}"
        )
    try:
        onnx.load_external_data_for_model(model, str(path.parent))
    except Exception as exc:
        raise CheckpointError(
            f"the external weights of {path} cannot be read ({type(exc).__name__}: {exc})"
        ) from None


def _attr(node, name: str, default: int = 0) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def _sparse_operand(node, resolve):
    """``(nonzero [rows, K] as bool, initializer, kind)`` for the node's weight, or None."""
    if node.op_type == "Conv":
        found = resolve(node.input[1]) if len(node.input) > 1 else None
        if found is None:
            return None
        w, source = found
        if w.ndim < 3:
            return None
        nz = np.moveaxis(np.asarray(w) != 0, 1, -1)  # [C_out, k..., C_in/g]
        return nz.reshape(-1, nz.shape[-1]), source, ("conv", w.shape[0], w.shape[1])
    trans_b = node.op_type == "Gemm" and _attr(node, "transB")
    trans_a = node.op_type == "Gemm" and _attr(node, "transA")
    b = resolve(node.input[1]) if len(node.input) > 1 else None
    if b is not None:
        w, source = b
        nz = np.asarray(w) != 0
        if nz.ndim < 2:
            return None
        # B is [.., K, N] (or [N, K] with transB): rows are the N output features
        nz = nz if trans_b else np.swapaxes(nz, -1, -2)
        return nz.reshape(-1, nz.shape[-1]), source, ("matmul", nz.shape[-2], nz.shape[-1])
    a = resolve(node.input[0])
    if a is None:
        return None  # activations times activations (attention): no weight
    w, source = a
    nz = np.asarray(w) != 0
    if nz.ndim < 2:
        return None
    nz = np.swapaxes(nz, -1, -2) if trans_a else nz  # A is [M, K]: K along rows already
    return nz.reshape(-1, nz.shape[-1]), source, ("matmul", nz.shape[-2], nz.shape[-1])


def _check_weight(node, nonzero, source, kind, dtype, tokens) -> OnnxWeight:
    rows, k = nonzero.shape
    _, out_dim, in_dim = kind
    reasons: list[str] = []
    valid = False
    violations = groups = 0
    if k % GROUP:
        reasons.append(f"K={k} is not a multiple of {GROUP}, so it cannot hold 2:4 groups")
    elif rows and k:
        report = check_pattern(torch.from_numpy(np.ascontiguousarray(nonzero)), "2:4")
        valid, violations, groups = report.valid, report.violations, report.groups
        if not valid:
            reasons.append(
                f"not 2:4 along K: {violations:,} of {groups:,} groups of 4 have more than 2 "
                "nonzeros"
            )
    align = sparse_multiple(dtype)
    bad = [
        f"{label}={size}" for label, size in (("outputs", out_dim), ("K", in_dim)) if size % align
    ]
    if bad:
        reasons.append(
            f"{', '.join(bad)} not a multiple of {align}, which sparse kernels need for "
            f"{dtype_name(dtype)}"
        )
    dense = bool(reasons)
    if dtype in (torch.float32, torch.float64):
        reasons.append(
            "a float32 engine runs sparse only as TF32 and gains little; build in --fp16"
        )
    macs = rows * k * tokens
    if not dense and macs < FAST_MACS:
        reasons.append(
            f"small product ({macs / 1e9:.2g} GMAC at {tokens} tokens): sparse kernels are "
            f"rarely faster below about {FAST_MACS / 1e9:.0f} GMAC, so TensorRT may keep dense"
        )
    verdict = "dense" if dense else ("slow" if reasons else "sparse")
    return OnnxWeight(
        node=_label(node),
        layer=_layer_name(node),
        op=node.op_type,
        initializer=source,
        shape=(int(rows), int(k)),
        valid_24=valid,
        violations=violations,
        groups=groups,
        verdict=verdict,
        reasons=tuple(reasons),
    )


def _layer_name(node) -> str:
    """The PyTorch module recorded by torch.onnx's exporter, else the node's name."""
    for prop in getattr(node, "metadata_props", ()):
        if prop.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                break
            if isinstance(scopes, list) and len(scopes) >= 2 and scopes[-2]:
                return str(scopes[-2])
    return _label(node)
