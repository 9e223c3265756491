"""``SparseLinear``: a drop-in for ``nn.Linear`` that holds a 2:4 weight compressed by cuSPARSELt.

Each module keeps a small dict from padded token count to its :class:`~explorer.gpu.cusparselt.Plan`
(all plans also live in the shared LRU :class:`~explorer.gpu.cusparselt.PlanCache`), so after the
first call at a token count a forward pass is: reshape, pad if needed, one ``cusparseLtMatmul``.
"""

from __future__ import annotations

import torch
from torch import nn

from explorer import _html
from explorer.gpu import cusparselt as C
from explorer.gpu import quant, tuning
from explorer.gpu import torch_backend as TB
from explorer.gpu.timing import eager_ms

__all__ = ["SparseLinear"]

_ACTIVATIONS = ("none", "relu", "gelu")
_NAMES = {
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int8: "int8",
    torch.int32: "int32",
    torch.float32: "float32",
}
if hasattr(torch, "float8_e4m3fn"):
    _NAMES[torch.float8_e4m3fn] = "float8_e4m3fn"

# epilogues cuSPARSELt refused at least once: (dtype, activation)
_UNFUSED: set[tuple] = set()
# (layout, algorithm) chosen per problem: (out, padded tokens, in, dtype, fused activation,
# alpha, bias, device, input layout, requested algorithm)
_TUNED: dict[tuple, tuple[str, int]] = {}
_PROBE_ROWS = 16  # rows of x @ W^T kept to check searched algorithms against


def _event_ms(fn) -> float:
    """A quick CUDA-event time of ``fn`` (5 calls after one warm-up) for choosing a layout."""
    return eager_ms(fn, iters=5, reps=1, warmup=1)


def _apply_act(y: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "relu":
        return torch.relu_(y)
    if activation == "gelu":
        return nn.functional.gelu(y, approximate="tanh")
    return y


class SparseLinear(nn.Module):
    """``y = activation(x @ W^T + b)`` with a 2:4 ``W`` run by cuSPARSELt.

    Build it with :meth:`from_linear`. The dense weight is not kept; :meth:`dense_weight`
    rebuilds it only when ``keep_dense=True`` was given.

    Parameters
    ----------
    in_features, out_features : int
    compressed : CompressedTensor or torch.Tensor
        The cuSPARSELt-compressed weight (``backend="cusparselt"``) or torch's compressed
        tensor (``backend="torch"``).
    bias : torch.Tensor, optional
    dtype : torch.dtype
        The matmul's input dtype (float16, bfloat16, int8 or float8_e4m3fn).
    activation : {"none", "relu", "gelu"}
        Fused into the kernel where cuSPARSELt allows, applied after otherwise.
    weight_scale : torch.Tensor, optional
        Per-output-channel float32 scales of an int8 weight (folded into the alpha vector).
    out_dtype : torch.dtype, optional
        Output dtype of the int8/fp8 paths (float16 or bfloat16); the input's for fp16/bf16.
    backend : {"cusparselt", "torch"}

    Examples
    --------
    >>> sl = SparseLinear.from_linear(nn.Linear(256, 256).half().cuda())  # doctest: +SKIP
    >>> sl(torch.randn(8, 256, dtype=torch.half, device="cuda")).shape  # doctest: +SKIP
    torch.Size([8, 256])
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        compressed,
        bias: torch.Tensor | None,
        dtype: torch.dtype,
        activation: str = "none",
        weight_scale: torch.Tensor | None = None,
        out_dtype: torch.dtype | None = None,
        backend: str = "cusparselt",
        alg: int = -1,
        dense_weight: torch.Tensor | None = None,
        layout: str = "auto",
    ) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation {activation!r} unknown; expected one of {_ACTIVATIONS}")
        if backend not in ("cusparselt", "torch"):
            raise ValueError(f"backend {backend!r} unknown; expected 'cusparselt' or 'torch'")
        self.in_features = in_features
        self.out_features = out_features
        self.dtype = dtype
        self.activation = activation
        self.backend = backend
        self.alg = alg
        if layout != "auto" and layout not in C.LAYOUTS:
            raise ValueError(f"layout {layout!r} unknown; expected 'auto' or one of {C.LAYOUTS}")
        self.layout = layout
        self.out_dtype = out_dtype
        self._cw_meta = None
        data = compressed.data if isinstance(compressed, C.CompressedTensor) else compressed
        self.register_buffer("compressed", data)
        self.register_buffer("bias", bias)
        self.register_buffer("weight_scale", weight_scale)
        self.register_buffer("_dense", dense_weight, persistent=False)
        # a few input rows and their dense product, to check searched algorithms against
        self.register_buffer("_probe_x", None, persistent=False)
        self.register_buffer("_probe_y", None, persistent=False)
        self._plans: dict = {}
        self._fast: dict = {}  # (shape, strides, device, dtype) -> plan, for plain 2-D calls
        self._npad: dict[int, int] = {}
        self._cache = C.default_cache()
        self._mult = C.token_multiple(dtype)
        # 16-bit: bias fused in the kernel; 8-bit: added after, together with the token scale
        self._bias_in_kernel = bias is not None and dtype.itemsize == 2

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        dtype: torch.dtype | None = None,
        activation: str = "none",
        backend: str = "cusparselt",
        out_dtype: torch.dtype | None = None,
        alg: int = -1,
        keep_dense: bool = False,
        layout: str = "auto",
        tune_tokens: tuple[int, ...] = (),
    ) -> SparseLinear:
        """Compress a CUDA ``nn.Linear`` whose weight is already 2:4 along ``in_features``.

        Parameters
        ----------
        linear : nn.Linear
            On a CUDA device, weight pruned 2:4 (zeros in place).
        dtype : torch.dtype, optional
            float16, bfloat16 (default: the weight's if 16-bit, else float16), int8 (per-channel
            symmetric quantization, dynamic per-token activations) or float8_e4m3fn.
        activation : {"none", "relu", "gelu"}
        backend : {"cusparselt", "torch"}
        keep_dense : bool
            Also keep the dense masked weight (for checks; doubles the memory).
        layout : {"auto", "cc", "rr", "rc", "cr"}
            Operand layouts (see :mod:`explorer.gpu.cusparselt`). ``"auto"`` takes the input as
            it comes and, once per shape, times both output layouts with the default and the
            searched algorithm, keeping the fastest correct one (an ``r`` output comes back as
            a transposed view, which a following sparse layer reads without a copy).
        tune_tokens : tuple of int
            Token counts to tune the algorithm for now, while the dense weight is at hand:
            every config is tried in a child process (seconds per shape; see
            :mod:`explorer.gpu.tuning`) and the winner is remembered for this GPU. Without it
            the library's default algorithm is used unless this shape was tuned before.

        Raises
        ------
        ValueError
            CPU weight, weight not 2:4, shape off the alignment rules.
        TypeError
            Unsupported dtype.

        Examples
        --------
        >>> sl = SparseLinear.from_linear(lin, dtype=torch.int8)  # doctest: +SKIP
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"expected an nn.Linear, got {type(linear).__name__}")
        w = linear.weight.detach()
        if w.device.type != "cuda":
            raise ValueError(
                f"{linear} is on {w.device}; SparseLinear needs a CUDA module. Hint: model.cuda()."
            )
        if dtype is None:
            dtype = w.dtype if w.dtype in (torch.float16, torch.bfloat16) else torch.float16
        if dtype not in C.CUSPARSELT_DTYPES:
            raise TypeError(
                f"dtype {dtype} is not supported; expected float16, bfloat16, int8 or "
                "float8_e4m3fn. Hint: keep this layer dense."
            )
        if not C.is_24(w):
            raise ValueError(
                f"the weight of {linear} is not 2:4 along in_features. Hint: prune it first "
                "(explorer.prune or explorer.make_mask(weight, '2:4'))."
            )
        scale = None
        act_dtype = w.dtype if w.dtype in (torch.float16, torch.bfloat16) else torch.float16
        if dtype == torch.int8:
            wq, scale = quant.quantize_per_channel(w)
            out_dtype = out_dtype or act_dtype
        elif dtype.itemsize == 1:  # fp8: per-tensor scale folded like int8's, per channel
            amax = w.float().abs().amax(dim=1).clamp_min(1e-12)
            scale = (amax / 448.0).float()
            wq = (w.float() / scale[:, None]).to(dtype)
            out_dtype = out_dtype or act_dtype
        else:
            wq = w.to(dtype)
            out_dtype = dtype
        bias = None
        if linear.bias is not None:
            bias = linear.bias.detach().to(out_dtype).contiguous()
        if backend == "torch":
            if dtype.itemsize == 1:
                raise TypeError("backend='torch' here supports float16 and bfloat16 only")
            comp = TB.compress(wq)
        else:
            C._check_weight(wq)
            comp = C.compress(wq, check=False)
        layer = cls(
            linear.in_features,
            linear.out_features,
            comp,
            bias,
            dtype,
            activation,
            scale,
            out_dtype,
            backend,
            alg,
            w.to(out_dtype).clone() if keep_dense else None,
            layout,
        )
        if dtype.itemsize == 2 and backend == "cusparselt":
            if tune_tokens and alg < 0:
                tuning.tune_weight(wq, tune_tokens, out_dtype=out_dtype)
            gen = torch.Generator(device=w.device).manual_seed(1234)
            px = torch.randn(_PROBE_ROWS, w.shape[1], device=w.device, generator=gen).to(dtype)
            layer._probe_x = px
            layer._probe_y = px.float() @ wq.float().t()
        return layer

    # -- forward ---------------------------------------------------------------------------------
    def _key(
        self, n: int, dev: int, fused_act: bool, alpha: bool, layout: str, alg: int
    ) -> C.PlanKey:
        return C.PlanKey(
            m=self.out_features,
            n=n,
            k=self.in_features,
            dtype=_NAMES[self.dtype],
            out_dtype=_NAMES[self.out_dtype],
            layout=layout,
            alg=alg,
            epilogue=self.activation if fused_act else "none",
            bias=self._bias_in_kernel,
            alpha_vector=alpha,
            device=dev,
        )

    def _plan(self, n: int, dev: int, fused_act: bool, alpha: bool, first: str) -> C.Plan:
        plan = self._plans.get((n, first))
        if plan is not None and plan.alive:
            self._cache.hits += 1
            return plan
        layout, alg = self._choose(n, dev, fused_act, alpha, first)
        bias_ptr = self.bias.data_ptr() if self._bias_in_kernel else 0
        plan = self._cache.get(self._key(n, dev, fused_act, alpha, layout, alg), bias_ptr)
        self._plans[(n, first)] = plan
        return plan

    def _choose(
        self, n: int, dev: int, fused_act: bool, alpha: bool, first: str
    ) -> tuple[str, int]:
        """Layout and algorithm for ``n`` tokens whose input arrives in layout ``first``.

        Fixed ones are used as given. ``layout="auto"`` keeps the input as it comes (``c``:
        ``X`` row-major, ``r``: a transposed view of a row-major ``X^T``, so neither costs a
        copy) and times both output layouts, each with the library's default algorithm and
        with the tuned one if :mod:`explorer.gpu.tuning` has one for this problem (a tuned
        config is kept only if it reproduces the dense product of the probe rows), once per
        shape. The fastest wins, for every layer of that shape in this process.
        """
        if self.layout != "auto":
            return self.layout, self.alg
        if self.dtype.itemsize == 1:
            return "cc", self.alg  # 8-bit types need cc
        ck = (
            self.out_features,
            n,
            self.in_features,
            self.dtype,
            fused_act,
            alpha,
            self._bias_in_kernel,
            dev,
            first,
            self.alg,
        )
        best = _TUNED.get(ck)
        if best is not None:
            return best
        if torch.cuda.is_current_stream_capturing():
            # no timing inside a graph capture; Hopper's fast 16-bit kernels write Y^T
            return first + "r", self.alg
        best = _TUNED[ck] = self._tune(n, dev, fused_act, alpha, first)
        return best

    def _tune(self, n: int, dev: int, fused_act: bool, alpha: bool, first: str) -> tuple[str, int]:
        gen = torch.Generator(device=f"cuda:{dev}").manual_seed(0)
        x = torch.randn(n, self.in_features, device=f"cuda:{dev}", generator=gen)
        x = x.to(self.dtype)
        probe = min(n, self._probe_x.shape[0]) if self._probe_x is not None else 0
        if probe:
            x[:probe] = self._probe_x[:probe]
        if first == "r":
            x = x.t().contiguous().t()
        bias_ptr = self.bias.data_ptr() if self._bias_in_kernel else 0
        alpha_ptr = self.weight_scale.data_ptr() if alpha else 0
        times: dict[tuple[str, int], float] = {}
        for lay in (first + "c", first + "r"):
            algs = [self.alg]
            if self.alg < 0:
                epi = self.activation if fused_act else "none"
                found = tuning.lookup(dev, *self._mnk(n), self.dtype, self.out_dtype, lay, epi)
                if found is not None and found >= 0:
                    algs.append(found)
            for alg in algs:
                try:
                    plan = self._cache.get(self._key(n, dev, fused_act, alpha, lay, alg), bias_ptr)
                    y = self._run(plan, x, n, alpha_ptr)
                    if alg >= 0 and probe and not self._probe_ok(y[:probe], fused_act):
                        continue  # a config that computes something else: never use it
                    times[(lay, alg)] = _event_ms(lambda p=plan: self._run(p, x, n, alpha_ptr))
                except Exception:
                    continue
        return min(times, key=times.get) if times else (first + "c", self.alg)

    def _mnk(self, n: int) -> tuple[int, int, int]:
        return self.out_features, n, self.in_features

    def _probe_ok(self, y: torch.Tensor, fused_act: bool) -> bool:
        ref = self._probe_y[: y.shape[0]].float()
        if self._bias_in_kernel:
            ref = ref + self.bias.float()
        if fused_act:
            ref = _apply_act(ref, self.activation)
        err = (y.float() - ref).norm() / ref.norm().clamp_min(1e-30)
        return bool(torch.isfinite(err)) and float(err) < 2e-2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer to ``x[..., in_features]`` (any leading dims, any strides)."""
        # fast path: a 2-D input seen before (same shape, strides, device and dtype) that
        # needs nothing but the matmul; the host cost of one call is what eager mode pays
        fast = self._fast.get((x.shape, x.stride(), x.get_device(), x.dtype))
        if fast is not None and fast.alive:
            return self._run(fast, x, x.shape[0], 0)
        if x.shape[-1] != self.in_features:
            raise ValueError(
                f"input has {x.shape[-1]} features in its last dimension, expected "
                f"{self.in_features}"
            )
        if x.device.type != "cuda":
            raise ValueError(f"input is on {x.device}; SparseLinear runs on CUDA tensors")
        lead = x.shape[:-1]
        x2 = x if x.dim() == 2 else x.reshape(-1, self.in_features)
        if self.backend == "torch":
            return self._forward_torch(x2).reshape(*lead, self.out_features)
        scale_t = None
        if self.dtype == torch.int8:
            x2, scale_t = quant.quantize_per_token(x2)
        elif self.dtype.itemsize == 1:
            x2 = x2.to(self.dtype)
        elif x2.dtype != self.dtype:
            if not x2.is_floating_point():
                raise TypeError(f"input dtype {x2.dtype} is not a floating type")
            x2 = x2.to(self.dtype)  # e.g. a float32 model run with 16-bit sparse layers
        if not x2.is_contiguous() and not x2.t().is_contiguous():
            x2 = x2.contiguous()
        t = x2.shape[0]
        if t == 0:
            return x.new_empty(*lead, self.out_features, dtype=self.out_dtype)
        n = self._npad.get(t)
        if n is None:
            n = self._npad[t] = C.padded_tokens(t, self.dtype)
        pad = n - t
        if pad:
            x2 = nn.functional.pad(x2, (0, 0, 0, pad))
        # "r": a transposed view of a row-major X^T (what an "r"-output layer returns)
        first = "c" if x2.is_contiguous() else "r"
        dev = x2.device.index or 0
        alpha = self.weight_scale is not None and self.dtype == torch.int8
        fuse = (
            self.activation != "none"
            and self.weight_scale is None
            and (self.dtype, self.activation) not in _UNFUSED
        )
        alpha_ptr = self.weight_scale.data_ptr() if alpha else 0
        try:
            plan = self._plan(n, dev, fuse, alpha, first)
            y = self._run(plan, x2, n, alpha_ptr)
        except Exception as exc:
            if not fuse or "cuSPARSELtError" not in type(exc).__name__:
                raise
            # cuSPARSELt has no kernel with this fused activation: apply it after, from now on
            _UNFUSED.add((self.dtype, self.activation))
            self._plans.clear()
            self._fast.clear()
            fuse = False
            plan = self._plan(n, dev, fuse, alpha, first)
            y = self._run(plan, x2, n, alpha_ptr)
        if pad:
            y = y[:t]
        if scale_t is not None:
            # one fused step: per-token scale plus the bias (which must come after the scale)
            s = scale_t[:t, None].to(y.dtype)
            y = torch.addcmul(self.bias, y, s) if self.bias is not None else y * s
        elif self.weight_scale is not None:  # fp8: no alpha vector in cuSPARSELt, scale after
            s = self.weight_scale.to(y.dtype)
            y = torch.addcmul(self.bias, y, s) if self.bias is not None else y * s
        if self.activation != "none" and not fuse:
            y = _apply_act(y, self.activation)
        if x.is_floating_point() and y.dtype != x.dtype and x.dtype.itemsize > 1:
            y = y.to(x.dtype)
        direct = (
            x2 is x
            and not pad
            and self.weight_scale is None
            and (fuse or self.activation == "none")
            and y.dtype == x.dtype
        )
        if direct and len(self._fast) < 64:
            self._fast[(x.shape, x.stride(), x.get_device(), x.dtype)] = plan
        return y if len(lead) == 1 else y.reshape(*lead, self.out_features)

    def _run(self, plan: C.Plan, x2: torch.Tensor, n: int, alpha_ptr: int) -> torch.Tensor:
        lay = plan.key.layout
        if lay[0] == "r":
            x2 = x2.t().contiguous()  # free when x2 is itself a transposed view (chained layers)
        elif not x2.is_contiguous():
            x2 = x2.contiguous()
        if lay[1] == "c":
            y = torch.empty(n, self.out_features, dtype=self.out_dtype, device=x2.device)
            plan.run(self.compressed.data_ptr(), x2.data_ptr(), y.data_ptr(), alpha_ptr)
            return y
        d = torch.empty(self.out_features, n, dtype=self.out_dtype, device=x2.device)
        plan.run(self.compressed.data_ptr(), x2.data_ptr(), d.data_ptr(), alpha_ptr)
        return d.t()  # a transposed view of Y^T: no copy

    def _forward_torch(self, x2: torch.Tensor) -> torch.Tensor:
        if x2.dtype != self.dtype:
            return self._forward_torch(x2.to(self.dtype)).to(x2.dtype)
        t = x2.shape[0]
        pad = -t % self._mult
        if pad:
            x2 = nn.functional.pad(x2, (0, 0, 0, pad))
        y = TB.sparse_mm(self.compressed, x2.contiguous(), bias=self.bias)
        y = _apply_act(y[:t] if pad else y, self.activation)
        return y

    # -- introspection ---------------------------------------------------------------------------
    def dense_weight(self) -> torch.Tensor:
        """The dense masked weight, if ``keep_dense=True`` was given."""
        if self._dense is None:
            raise ValueError("this SparseLinear kept no dense copy; build it with keep_dense=True")
        return self._dense

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, dtype={_NAMES[self.dtype]}, "
            f"activation={self.activation}, backend={self.backend}"
        )

    def _repr_html_(self) -> str:
        dense_bytes = self.in_features * self.out_features * self.dtype.itemsize
        rows = [
            ("shape", f"{self.out_features} x {self.in_features}"),
            ("dtype", _NAMES[self.dtype]),
            ("backend", self.backend),
            ("activation", self.activation),
            ("compressed bytes", f"{self.compressed.numel():,} (dense {dense_bytes:,})"),
            ("plans", len(self._plans)),
        ]
        return _html.table(["SparseLinear", ""], rows)

    @property
    def compression_ratio(self) -> float:
        """Dense bytes over compressed bytes."""
        dense = self.in_features * self.out_features * self.dtype.itemsize
        return dense / max(1, self.compressed.numel() * self.compressed.element_size())
