"""The layer doctor: whether a 2:4 cuSPARSELt matmul can run for each layer, and be faster.

Every finding is a plain sentence plus a fix. The doctor needs no GPU: it reasons from the target
GPU's compute capability, the dtype, the layer shapes, the token count and the weights.

The rules it knows (capability, dtype, alignment and pattern from :mod:`explorer.sparse_rules`):

* sparse tensor cores need compute capability 8.0 or newer; fp8 needs 8.9;
* 16-bit inputs: the sparse operand (the weight) needs rows and columns in multiples of 16 and the
  dense operand (the activations) multiples of 8; 8-bit inputs: 32 and 16;
* 8-bit inputs need the dense operand transposed (column-major); a row-major or non-contiguous
  activation is what makes ``cusparseLtMatmulDescriptorInit`` fail with "operation not supported";
* one token (decoding) is rejected: pad to 8 or 16;
* the weight must really be 2:4;
* torch's CUTLASS 2:4 backend refuses Hopper (sm_90);
* small matrix products are slower sparse than dense, and torch's eager path adds about half a
  millisecond of host time per call.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from . import _html, sparse_rules
from .devices import DeviceTarget
from .dtypes import dtype_name, parse_dtype
from .prunable_layers import layers

__all__ = [
    "DoctorReport",
    "Finding",
    "LayerDiagnosis",
    "doctor",
    "resolve_target",
    "verdict_once_24",
]

#: The finding that only says "the weight is not 2:4 yet".
_NOT_24 = "not-24"

# Matrix products smaller than this (multiply-adds) ran no faster sparse than dense on an H100
# with cached plans (4096 x 4096 weights: 0.6x at 128 tokens, 1.4x at 1024 tokens).
FAST_MACS = 8e9
# torch's eager cuSPARSELt call rebuilds descriptors and the plan each time: host cost per call.
TORCH_EAGER_HOST_SECONDS = 450e-6
DENSE_FLOPS = {8: 300e12, 9: 700e12, 10: 1500e12}  # rough dense 16-bit rates, for the estimate

SEVERITIES = ("ok", "info", "warn", "error")


@dataclass(frozen=True)
class Finding:
    """One thing the doctor found: a sentence and a fix.

    Attributes
    ----------
    layer : str
        The layer's name, or ``""`` for findings about the whole model or target.
    severity : {"ok", "info", "warn", "error"}
        ``error``: cannot run; ``warn``: runs but will not be faster; ``info``: worth knowing.
    code : str
        A stable identifier, e.g. ``"align"``, ``"tokens-one"``, ``"int8-layout"``.
    message : str
    fix : str
    """

    layer: str
    severity: str
    code: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        where = f"{self.layer}: " if self.layer else ""
        fix = f" Fix: {self.fix}" if self.fix else ""
        return f"[{self.severity}] {where}{self.message}{fix}"


@dataclass(frozen=True)
class LayerDiagnosis:
    """The doctor's verdict for one layer: ``fast``, ``slow`` or ``unsupported``.

    Attributes
    ----------
    name : str
        The layer's fully qualified name.
    kind : str
        ``"Linear"``, ``"Conv1d"`` or ``"Conv2d"``.
    shape : tuple of int
        ``(out, in)`` of the weight as a matrix.
    verdict : str
        ``"fast"``, ``"slow"`` or ``"unsupported"``.
    findings : tuple of Finding
        What the doctor found for this layer.
    """

    name: str
    kind: str
    shape: tuple[int, int]
    verdict: str
    findings: tuple[Finding, ...]

    def __repr__(self) -> str:
        return f"LayerDiagnosis({self.name!r}, {self.shape[0]}x{self.shape[1]}, {self.verdict})"


class DoctorReport:
    """Per-layer verdicts and findings; see :func:`doctor`, which builds it.

    Parameters
    ----------
    target : DeviceTarget
        The GPU the doctor reasoned about (kept as :attr:`target`).
    dtype : torch.dtype
        The dtype the model will run in.
    tokens : int
        Tokens (rows of activations) per matmul call.
    backend : str
        The sparse matmul backend looked at: ``"cusparselt"``, ``"torch"`` or ``"cutlass"``.
    diagnoses : list of LayerDiagnosis
        One verdict per layer, in module order (kept as :attr:`layers`).
    notes : list of Finding
        Model-level findings, about the target and dtype rather than one layer.
    """

    def __init__(self, target, dtype, tokens, backend, diagnoses, notes):
        self.target: DeviceTarget = target
        self.dtype: torch.dtype = dtype
        self.tokens: int = tokens
        self.backend: str = backend
        self.layers: list[LayerDiagnosis] = diagnoses
        self.notes: list[Finding] = notes
        self._by_name = {d.name: d for d in diagnoses}

    @property
    def findings(self) -> list[Finding]:
        """Every finding: model-level notes first, then each layer's."""
        return [*self.notes, *(f for d in self.layers for f in d.findings)]

    def diagnosis(self, layer: str) -> LayerDiagnosis:
        """The doctor's verdict and findings for one layer.

        Parameters
        ----------
        layer : str
            The layer's name, as in ``model.get_submodule(layer)``.

        Returns
        -------
        LayerDiagnosis

        Raises
        ------
        KeyError
            If the doctor did not look at a layer of that name.
        """
        if layer not in self._by_name:
            raise KeyError(f"the doctor did not look at a layer named {layer!r}")
        return self._by_name[layer]

    def verdict(self, layer: str) -> str:
        """``"fast"``, ``"slow"`` or ``"unsupported"`` for one layer.

        Parameters
        ----------
        layer : str
            The layer's name.

        Returns
        -------
        str
        """
        return self.diagnosis(layer).verdict

    def reasons(self, layer: str) -> list[Finding]:
        """The findings behind a layer's verdict (warnings and errors first).

        Parameters
        ----------
        layer : str
            The layer's name.

        Returns
        -------
        list of Finding
        """
        order = {s: i for i, s in enumerate(reversed(SEVERITIES))}
        return sorted(self.diagnosis(layer).findings, key=lambda f: order[f.severity])

    def counts(self) -> dict[str, int]:
        """How many layers got each verdict."""
        counts = Counter(d.verdict for d in self.layers)
        return {v: counts.get(v, 0) for v in ("fast", "slow", "unsupported")}

    def fast_layers(self) -> list[str]:
        """The names of the layers whose verdict is ``"fast"``, in model order."""
        return [d.name for d in self.layers if d.verdict == "fast"]

    def fast_once_24(self) -> list[str]:
        """The layers that would be fast once pruned to 2:4 (see :func:`verdict_once_24`)."""
        return [
            d.name
            for d in self.layers
            if verdict_once_24(self.reasons(d.name), self.notes)[0] == "fast"
        ]

    def __repr__(self) -> str:
        c = self.counts()
        return (
            f"DoctorReport({self.target.name} {self.target.sm}, {dtype_name(self.dtype)}, "
            f"{self.tokens} tokens: {c['fast']} fast, {c['slow']} slow, {c['unsupported']} unsupported)"
        )

    def __str__(self) -> str:
        lines = [repr(self)]
        lines += [f"  {n}" for n in self.notes]
        for d in self.layers:
            lines.append(f"- {d.name} ({d.kind} {d.shape[0]}x{d.shape[1]}): {d.verdict}")
            lines += [f"    {f}" for f in self.reasons(d.name) if f.severity != "ok"]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        badge = {"fast": "ok", "slow": "warn", "unsupported": "error"}
        rows = []
        for d in self.layers:
            reasons = [f for f in self.reasons(d.name) if f.severity in ("warn", "error")]
            text = "<br>".join(
                f"{_html.escape(f.message)} <i>{_html.escape(f.fix)}</i>" for f in reasons
            )
            rows.append(
                (
                    d.name,
                    f"{d.shape[0]} x {d.shape[1]}",
                    _html.badge(d.verdict, badge[d.verdict]),
                    text,
                )
            )
        notes = "".join(f"<li>{_html.escape(str(n))}</li>" for n in self.notes)
        table = _html.table(
            ("layer", "shape", "verdict", "why / fix"), rows, caption=repr(self), raw_columns=(2, 3)
        )
        return (f"<ul>{notes}</ul>" if notes else "") + table


def verdict_once_24(findings, notes) -> tuple[str, str]:
    """A layer's verdict once pruned to 2:4: without its "not 2:4 yet" finding, and the reasons.

    The dashboard's "at 2:4" column and a sweep's ``"fast"`` layer set both use it.

    Parameters
    ----------
    findings : iterable of Finding
        The layer's findings (:meth:`DoctorReport.reasons`).
    notes : iterable of Finding
        The report's model-level notes (:attr:`DoctorReport.notes`).

    Returns
    -------
    (str, str)
        ``"fast"``, ``"slow"`` or ``"unsupported"``, and the findings behind it joined by ``"; "``.

    Examples
    --------
    >>> from torch import nn
    >>> report = doctor(nn.Sequential(nn.Linear(4096, 4096)), tokens=4096)
    >>> report.verdict("0"), verdict_once_24(report.reasons("0"), report.notes)[0]
    ('unsupported', 'fast')
    """
    kept = [f for f in findings if getattr(f, "code", "") != _NOT_24]
    severities = {f.severity for f in (*kept, *notes)}
    verdict = "unsupported" if "error" in severities else "slow" if "warn" in severities else "fast"
    reasons = [f for f in kept if f.severity in ("error", "warn")] or kept
    reasons += [n for n in notes if n.severity == "error"]
    return verdict, "; ".join(map(str, reasons))


def resolve_target(device: object = None) -> DeviceTarget:
    """The doctor's target GPU, from :meth:`DeviceTarget.resolve`.

    :meth:`DeviceTarget.resolve` refuses capabilities no NVIDIA GPU has.

    Parameters
    ----------
    device : optional
        None for the current GPU (an H100 is assumed without a GPU), a name (``"A100"``), a
        capability (``"8.6"``, ``(9, 0)``) or a ``torch.device``.

    Returns
    -------
    DeviceTarget

    Raises
    ------
    ValueError
        A device that cannot be understood, or a capability not in
        :data:`explorer.devices.KNOWN_CAPABILITIES` (the message lists them).

    Examples
    --------
    >>> resolve_target("9.0").capability
    (9, 0)
    >>> resolve_target((99, 0))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: device=(99, 0) means compute capability 99.0, which no NVIDIA GPU has; ...
    """
    return DeviceTarget.resolve(device)


def doctor(
    model: nn.Module,
    dtype: torch.dtype | str = torch.float16,
    tokens: int = 1024,
    device: object = None,
    backend: str = "cusparselt",
    filter_fn: Callable[[nn.Module, str], bool] | None = None,
) -> DoctorReport:
    """Say, layer by layer, whether a 2:4 sparse matmul can run and be fast, and if not why.

    Parameters
    ----------
    model : torch.nn.Module
        The model (not changed).
    dtype : torch.dtype or str
        The dtype the model will run in: float16, bfloat16, int8, float8_e4m3fn or float32.
    tokens : int
        Tokens (rows of activations) per matmul call: batch x sequence length.
    device : optional
        The target GPU: None for the current one (an H100 is assumed without a GPU), a name
        (``"A100"``), a capability (``"8.6"``, ``(9, 0)``) or a ``torch.device``.
    backend : {"cusparselt", "torch", "cutlass"}
        ``cusparselt``: the explorer's cached-plan path; ``torch``: torch's eager
        ``_cslt_sparse_mm`` / ``to_sparse_semi_structured``; ``cutlass``: torch's CUTLASS kernels.
    filter_fn : callable, optional
        ``filter_fn(module, fqn) -> bool`` to look at some layers only; default all listed by
        :func:`explorer.layers`.

    Returns
    -------
    DoctorReport

    Examples
    --------
    >>> from torch import nn
    >>> report = doctor(nn.Sequential(nn.Linear(4096, 4096)), tokens=1, device="H100")
    >>> report.verdict("0")
    'unsupported'
    >>> [f.code for f in report.reasons("0")][:2]
    ['not-24', 'tokens-one']
    """
    dtype = parse_dtype(dtype)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError(
            f"tokens must be a positive int (batch x sequence length per call), got {tokens!r}"
        )
    if backend not in ("cusparselt", "torch", "cutlass"):
        raise ValueError(f"backend must be 'cusparselt', 'torch' or 'cutlass', got {backend!r}")
    target = resolve_target(device)
    table = layers(model)
    if filter_fn is not None:
        table = table.filter(filter_fn)
        if not len(table):
            raise ValueError(
                "filter_fn selected no layers; check it against explorer.layers(model).names"
            )
    notes = _target_notes(target, dtype, backend)
    diagnoses = []
    for info in table:
        findings = [*_layer_findings(info, target, dtype, tokens, backend)]
        errors = any(f.severity == "error" for f in findings)
        warns = any(f.severity == "warn" for f in findings)
        if errors or any(n.severity == "error" for n in notes):
            verdict = "unsupported"
        elif warns:
            verdict = "slow"
        else:
            verdict = "fast"
            findings.append(
                Finding(
                    info.name,
                    "ok",
                    "ok",
                    f"a 2:4 {dtype_name(dtype)} sparse matmul can run here and should beat dense "
                    f"({_gmac(info, tokens)} per call)",
                )
            )
        diagnoses.append(
            LayerDiagnosis(info.name, info.kind, info.matrix_shape, verdict, tuple(findings))
        )
    return DoctorReport(target, dtype, tokens, backend, diagnoses, notes)


def _gmac(info, tokens: int) -> str:
    return f"{info.out_features * info.in_features * tokens / 1e9:.2g} GMAC"


def _target_notes(target: DeviceTarget, dtype: torch.dtype, backend: str) -> list[Finding]:
    notes = []
    if not target.is_gpu:
        notes.append(
            Finding(
                "",
                "error",
                "cpu",
                "2:4 sparse matmuls need an NVIDIA GPU; on the CPU a pruned model runs dense "
                "(pruning still shows its accuracy)",
                'name the GPU you will deploy on, e.g. doctor(model, device="H100")',
            )
        )
        return notes
    if "assumed" in target.name:
        notes.append(
            Finding(
                "",
                "info",
                "assumed-target",
                "no GPU is visible here, so the advice is for an H100 (sm_90)",
                'pass device="A100", device="8.9" or similar for another GPU',
            )
        )
    for obstacle in sparse_rules.capability_obstacles(target.capability, dtype, target.name):
        notes.append(_finding("", "error", obstacle))
    if dtype != torch.float32 and (obstacle := sparse_rules.dtype_obstacle(dtype)) is not None:
        notes.append(_finding("", "error", obstacle))
    if dtype == torch.float32:
        notes.append(
            Finding(
                "",
                "warn",
                "fp32",
                "float32 runs as TF32 on sparse tensor cores and gains little over dense TF32",
                "run the model in float16 or bfloat16 (model.half() / model.bfloat16())",
            )
        )
    if backend == "cutlass" and target.is_hopper:
        notes.append(
            Finding(
                "",
                "error",
                "cutlass-hopper",
                f"torch's CUTLASS 2:4 backend has no kernels for Hopper ({target.sm}) and refuses to run",
                "use cuSPARSELt: explorer.sparsify(model), or set "
                "SparseSemiStructuredTensor._FORCE_CUTLASS = False with torch's API",
            )
        )
    if sparse_rules.is_eight_bit(dtype):
        notes.append(
            Finding(
                "",
                "info",
                "int8-layout",
                "8-bit sparse matmuls need the dense operand (the activations) transposed, i.e. "
                "column-major; row-major or non-contiguous activations make cuSPARSELt fail with "
                "'operation not supported when calling cusparseLtMatmulDescriptorInit'",
                "explorer.sparsify(model, dtype=torch.int8) lays the activations out for you; with "
                "torch's ops pass a contiguous activation and its transpose as torch expects",
            )
        )
    notes.append(
        Finding(
            "",
            "info",
            "contiguous",
            "activations that are non-contiguous (a slice, a transpose, a permuted view) are "
            "rejected or copied by cuSPARSELt",
            "call .contiguous() on them first; explorer.SparseLinear does this for you",
        )
    )
    return notes


def _finding(layer: str, severity: str, obstacle: sparse_rules.Obstacle) -> Finding:
    return Finding(layer, severity, obstacle.code, obstacle.message, obstacle.fix)


def _layer_findings(info, target, dtype, tokens, backend):
    name, (out_f, in_f) = info.name, info.matrix_shape
    if not info.accelerated:
        yield Finding(
            name,
            "error",
            "not-linear",
            f"{info.kind} is a convolution: the 2:4 sparse matmul path runs Linear layers only",
            "keep it dense (prune it only to study accuracy), or rewrite it as a Linear",
        )
        return
    # 1. the weight must really be 2:4 (its check made once, by explorer.layers)
    # 2. alignment of the sparse operand (the weight)
    for obstacle in (
        sparse_rules.pattern_obstacle(in_f, info.pattern),
        sparse_rules.alignment_obstacle(out_f, in_f, dtype),
    ):
        if obstacle is not None:
            yield _finding(name, "error", obstacle)
    # ... and of the dense one (the activations)
    dense_align = sparse_rules.dense_multiple(dtype)
    # 3. the token count
    if tokens == 1:
        yield Finding(
            name,
            "error" if backend != "cusparselt" else "warn",
            "tokens-one",
            "a single token (one-row activations, as in decoding) is rejected by cuSPARSELt",
            "pad the activations to 8 or 16 rows (explorer.SparseLinear pads for you); for "
            "decoding, expect little gain: the product is bound by reading the weight",
        )
    elif tokens % dense_align:
        padded = -(-tokens // dense_align) * dense_align
        yield Finding(
            name,
            "info",
            "tokens-align",
            f"tokens={tokens} is not a multiple of {dense_align}, which raw cuSPARSELt calls reject",
            f"pad to {padded} tokens (explorer.SparseLinear pads internally)",
        )
    # 4. will it be faster?
    macs = out_f * in_f * tokens
    if macs < FAST_MACS:
        yield Finding(
            name,
            "warn",
            "small",
            f"the product is small ({_gmac(info, tokens)} per call): sparse kernels are not "
            f"faster than dense below about {FAST_MACS / 1e9:.0f} GMAC",
            "sparsify the large layers only, or run with more tokens per call (bigger batches)",
        )
    if backend == "torch":
        dense_seconds = 2 * macs / DENSE_FLOPS.get(target.capability[0], 300e12)
        if dense_seconds < 4 * TORCH_EAGER_HOST_SECONDS:
            yield Finding(
                name,
                "warn",
                "host-overhead",
                f"torch's eager path spends about {TORCH_EAGER_HOST_SECONDS * 1e6:.0f} us of host "
                f"time per call rebuilding cuSPARSELt descriptors, against about "
                f"{dense_seconds * 1e6:.0f} us for the whole dense matmul",
                "use explorer.sparsify(model) (plans built once), or capture the model in a CUDA graph",
            )
