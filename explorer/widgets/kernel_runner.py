"""The kernel runner: compress a layer and run its sparse matmul, or show what was measured.

On a GPU with sparse tensor cores (compute capability 8.0 or newer) the layer is compressed
with cuSPARSELt (:mod:`explorer.gpu.library.cusparselt`) and timed against the dense matmul.
Anywhere else the compression is emulated on the CPU (:mod:`explorer.compression`) and checked
against the dense masked reference, and the speed column comes from the recorded
measurements for that shape (:mod:`explorer.results.store`'s reference database), labelled with the
GPU they were measured on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from explorer import _html
from explorer.dtypes import dtype_name, parse_dtype
from explorer.results.speedup import recorded_speed

__all__ = ["KernelResult", "KernelRunner"]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Token counts above this are run with this many tokens in the CPU emulation (stated in the result).
CPU_TOKENS = 64


@dataclass(frozen=True)
class KernelResult:
    """What one run of the kernel runner found.

    Attributes
    ----------
    layer, shape, tokens, dtype
        What was run.
    mode : str
        ``"gpu"`` (cuSPARSELt, timed), ``"cpu-emulation"`` or ``"unavailable"``.
    max_abs_error : float or None
        Largest difference between the sparse result and the dense masked reference.
    dense_ms, sparse_ms : float or None
        Measured medians (GPU only).
    compressed_bytes, dense_bytes : int or None
        Storage of the compressed weight (values plus metadata) and of the dense one.
    recorded : list of dict
        Recorded measurements for this shape: ``gpu``, ``tokens``, ``dtype``, ``speedup``.
    message : str
        Plain-language summary (what ran, what is missing).
    """

    layer: str
    shape: tuple[int, int]
    tokens: int
    dtype: str
    mode: str
    max_abs_error: float | None = None
    dense_ms: float | None = None
    sparse_ms: float | None = None
    compressed_bytes: int | None = None
    dense_bytes: int | None = None
    recorded: list = field(default_factory=list, compare=False)
    message: str = ""

    @property
    def speedup(self) -> float | None:
        """Measured dense / sparse time, when measured here."""
        if self.dense_ms and self.sparse_ms:
            return self.dense_ms / self.sparse_ms
        return None

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.shape))
        err = "-" if self.max_abs_error is None else f"{self.max_abs_error:.2e}"
        speed = f", {self.speedup:.2f}x" if self.speedup else ""
        return f"KernelResult({self.layer} {shape} {self.tokens} tokens {self.dtype}: {self.mode}, max error {err}{speed})"

    def _repr_html_(self) -> str:
        rows = [["mode", _html.escape(self.mode)], ["message", _html.escape(self.message)]]
        if self.max_abs_error is not None:
            rows.append(["max |sparse - dense|", f"{self.max_abs_error:.3e}"])
        if self.compressed_bytes and self.dense_bytes:
            rows.append(
                [
                    "storage",
                    f"{self.compressed_bytes:,} B compressed vs {self.dense_bytes:,} B dense "
                    f"({self.compressed_bytes / self.dense_bytes:.0%})",
                ]
            )
        if self.speedup:
            rows.append(
                [
                    "measured here",
                    f"dense {self.dense_ms:.3f} ms, sparse {self.sparse_ms:.3f} ms, "
                    f"<b>{self.speedup:.2f}x</b>",
                ]
            )
        if self.recorded:
            for r in self.recorded:
                rows.append(
                    [
                        "recorded",
                        f"{r['speedup']:.2f}x on {_html.escape(r['gpu'])} "
                        f"({r['tokens']} tokens, {_html.escape(r['dtype'])}, {_html.escape(r['source'])})",
                    ]
                )
        elif self.mode != "gpu":
            rows.append(["recorded", "no recorded measurement for this shape"])
        shape = "x".join(map(str, self.shape))
        return _html.table(
            ["", ""],
            rows,
            caption=f"{self.layer} {shape}, {self.tokens} tokens, {self.dtype}",
            raw_columns=(1,),
        )


def _sparse_gpu() -> tuple[bool, str]:
    if not torch.cuda.is_available():
        return False, "no CUDA GPU"
    major, minor = torch.cuda.get_device_capability()
    name = torch.cuda.get_device_name()
    if major < 8:
        return False, (
            f"{name} (compute capability {major}.{minor}) has no sparse tensor cores; "
            "2:4 kernels need 8.0 (Ampere) or newer"
        )
    return True, name


class KernelRunner:
    """Runs one layer's sparse matmul (GPU) or its CPU emulation plus recorded numbers.

    Parameters
    ----------
    store : ResultStore, optional
        Where recorded speed-ups are read (see :func:`explorer.results.speedup.recorded_speed`);
        default the shipped reference database.
    repeats : int
        Timed runs per matmul on the GPU (the median is kept).

    Examples
    --------
    >>> import torch
    >>> w = torch.tensor([[1.0, 0.0, 2.0, 0.0] * 4] * 8)
    >>> result = KernelRunner().run(w, "fc", tokens=16, dtype="float32")
    >>> result.mode, result.max_abs_error < 1e-5  # float32 runs emulated, even on a GPU
    ('cpu-emulation', True)
    """

    def __init__(self, store=None, repeats: int = 20) -> None:
        self.store = store
        self.repeats = repeats
        self.result: KernelResult | None = None

    def run(
        self, weight: torch.Tensor, name: str = "", tokens: int = 1024, dtype: str = "float16"
    ) -> KernelResult:
        """Compress ``weight`` and run ``x @ W^T`` with ``tokens`` rows of input in ``dtype``.

        Parameters
        ----------
        weight : torch.Tensor
            The 2-D weight.
        name : str, optional
            The layer's name, for messages.
        tokens : int, optional
            Rows of input.
        dtype : str, optional
            The dtype of the run.

        Returns
        -------
        KernelResult
            Also kept as :attr:`result`.
        """
        dtype = dtype_name(parse_dtype(dtype, allowed=_DTYPES))
        if not isinstance(tokens, int) or tokens < 1:
            raise ValueError(f"tokens must be a positive int, got {tokens!r}")
        w = weight.detach()
        if w.dim() != 2:
            raise ValueError(
                f"{name or 'weight'} has shape {tuple(w.shape)}; expected a 2-D weight"
            )
        shape = (int(w.shape[0]), int(w.shape[1]))
        recorded = recorded_speed(shape, tokens, dtype, self.store)
        ok, gpu = _sparse_gpu()
        if ok and dtype != "float32":
            try:
                self.result = self._run_gpu(w, name, shape, tokens, dtype, recorded, gpu)
                return self.result
            except (ImportError, RuntimeError, ValueError, TypeError) as exc:
                gpu = f"the GPU run failed ({exc})"
        self.result = self._run_cpu(w, name, shape, tokens, dtype, recorded, gpu)
        return self.result

    def _run_cpu(self, w, name, shape, tokens, dtype, recorded, why) -> KernelResult:
        base = {
            "layer": name,
            "shape": shape,
            "tokens": tokens,
            "dtype": dtype,
            "recorded": recorded,
        }
        try:
            from explorer.compression import compress
        except ImportError:
            return KernelResult(
                mode="unavailable",
                message=(
                    f"No sparse GPU here ({why}) and the CPU emulation of compression is not "
                    "available in this installation yet."
                ),
                **base,
            )
        try:
            cw = compress(w)
        except ValueError as exc:
            return KernelResult(
                mode="unavailable", message=f"Cannot compress {name}: {exc}", **base
            )
        # 1. the emulated sparse matmul against 2. the dense masked reference, in float32
        #    (the CPU has no fast half matmul; the dtype above is the one the GPU would use).
        t = min(tokens, CPU_TOKENS)
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(t, shape[1], generator=gen)
        dense = x @ w.float().T
        sparse = cw.matmul(x)
        err = float((sparse.float() - dense).abs().max()) if dense.numel() else 0.0
        nbytes = sum(
            int(p.numel() * p.element_size())
            for p in (getattr(cw, "values", None), getattr(cw, "metadata", None))
            if isinstance(p, torch.Tensor)
        )
        note = f" ({t} of {tokens} tokens emulated)" if t != tokens else ""
        return KernelResult(
            mode="cpu-emulation",
            max_abs_error=err,
            compressed_bytes=nbytes or None,
            dense_bytes=int(w.numel() * w.element_size()),
            message=f"CPU emulation of 2:4 compression{note}; no sparse GPU here ({why}).",
            **base,
        )

    def _run_gpu(self, w, name, shape, tokens, dtype, recorded, gpu) -> KernelResult:
        from explorer.gpu.library import cusparselt

        torch_dtype = parse_dtype(dtype)
        wd = w.to("cuda", torch_dtype).contiguous()
        cw = cusparselt.compress(wd)
        x = torch.randn(tokens, shape[1], device="cuda", dtype=torch_dtype)
        ref = x @ wd.T
        out = cusparselt.matmul(cw, x)
        err = float((out.float() - ref.float()).abs().max())
        dense_ms = _time_cuda(lambda: x @ wd.T, self.repeats)
        sparse_ms = _time_cuda(lambda: cusparselt.matmul(cw, x), self.repeats)
        return KernelResult(
            layer=name,
            shape=shape,
            tokens=tokens,
            dtype=dtype,
            mode="gpu",
            max_abs_error=err,
            dense_ms=dense_ms,
            sparse_ms=sparse_ms,
            compressed_bytes=int(cw.data.numel()),
            dense_bytes=int(wd.numel() * wd.element_size()),
            recorded=recorded,
            message=f"cuSPARSELt on {gpu}, medians of {self.repeats} runs.",
        )

    def __repr__(self) -> str:
        return f"KernelRunner(last={self.result!r})"


def _time_cuda(fn, repeats: int) -> float:
    from explorer.gpu.routes.timing import eager_ms

    return eager_ms(fn, iters=1, reps=repeats, warmup=3)
