"""``SparseLinear``: a drop-in for ``nn.Linear`` that holds a 2:4 weight compressed by cuSPARSELt.

Each module keeps a small dict from padded token count to its
:class:`~explorer.gpu.library.cusparselt.Plan` (all plans also live in the shared LRU
:class:`~explorer.gpu.library.cusparselt.PlanCache`), so after the first call at a token count a
forward pass is: reshape, pad if needed, one ``cusparseLtMatmul``. Which route a problem takes
(dense, cuSPARSELt in which layout and algorithm, the decode kernel) is chosen by its base class
:class:`~explorer.gpu.modules.route_choice.RouteChoice`.
"""

from __future__ import annotations

import warnings
from functools import partial

import torch
from torch import nn

from explorer import _html
from explorer.dtypes import dtype_name
from explorer.gpu.cuda import decode as D
from explorer.gpu.cuda import ops
from explorer.gpu.library import cusparselt as C
from explorer.gpu.library import torch_backend as TB
from explorer.gpu.library import tuning
from explorer.gpu.modules import fp8, quant
from explorer.gpu.modules.fp8_dense import scaled_linear, scaled_matmul
from explorer.gpu.modules.route_choice import RouteChoice
from explorer.gpu.modules.sparse_calls import (
    ACTIVATIONS,
    apply_activation,
    rows_from_transposed,
    run_plan,
    sparse_call,
)
from explorer.gpu.modules.sparse_options import OUTPUT_CHOICES, SparseOptions
from explorer.gpu.modules.sparse_weight import prepare_weight
from explorer.gpu.routes.dispatch import (
    DENSE,
    Route,
    check_mode,
    clock_for,
)
from explorer.gpu.routes.layer_decisions import LayerDecisions
from explorer.gpu.routes.route_timing import BOOK
from explorer.sparse_rules import token_multiple

__all__ = ["SparseLinear"]

# epilogues cuSPARSELt refused at least once: (dtype, activation)
_UNFUSED: set[tuple] = set()
_PROBE_ROWS = 16  # rows of x @ W^T kept to check searched algorithms against


#: What a layer holds for this process only (plans, routes, remembered calls): not copied.
_PROCESS_STATE = (
    "_plans _routes _fast _fast_graph _dense_any _wall_dense _decode_calls _cache".split()
)


class SparseLinear(RouteChoice, nn.Module):
    """``y = activation(x @ W^T + b)`` with a 2:4 ``W`` run by cuSPARSELt.

    Build it with :meth:`from_linear`. Once per problem (shape, dtype, padded token count and
    input layout) the layer times the routes it may take (:mod:`explorer.gpu.routes.dispatch`):
    the sparse product writing ``Y`` row-major or ``Y^T`` (then copied to row-major, or handed
    on as a transposed view when ``output="any"``), each with the library's default and the
    tuned algorithm; cuBLAS on the dense weight, when kept; at 1 to 64 tokens the explorer's
    decode kernel (:mod:`explorer.gpu.cuda.decode`). The fastest wins, and dense is kept unless
    sparse is measurably faster: never slower than the ``nn.Linear`` it replaced at the token
    counts it has seen. Its measured decisions are :attr:`decisions_made`
    (:class:`~explorer.gpu.routes.layer_decisions.LayerDecisions`).

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
        Output dtype of the int8 path (float16 or bfloat16) and of the fp8 kernel's raw sums
        (bfloat16 or float32: float16 cannot hold them); the input's for fp16/bf16.
    backend : {"cusparselt", "torch"}
    alg : int
        A fixed cuSPARSELt config id, or -1 to choose (default and tuned algorithms).
    dense_weight : torch.Tensor, optional
        The dense masked weight, for the dense route (16-bit layers) and for checks.
    layout : {"auto", "cc", "rr", "rc", "cr"}
        ``"auto"`` chooses by measurement; a fixed layout skips the choice.
    output : {"rows", "any"}
        ``"rows"`` (default) always returns a row-major ``Y``, what attention, norms and
        residual adds need; ``"any"`` may return a transposed view of ``Y^T``, for a consumer
        that reads it for free (another sparse layer, the SwiGLU kernel).
    decode_weight : CompressedWeight, optional
        The weight in the explorer's compressed layout (:func:`explorer.gpu.cuda.decode.pack`),
        16-bit or int8 with per-row scales: opens the decode route at 1 to 64 tokens.
    mode : {"auto", "eager", "compile", "graphs"}
        How the model runs, which decides the clock routes are chosen by: wall time, host
        cost included, for ``"eager"`` and ``"compile"`` (``torch.compile``'s default mode);
        GPU time for ``"graphs"`` (``mode="reduce-overhead"``, your own CUDA graphs);
        ``"auto"`` takes GPU time inside a CUDA-graph capture and wall time otherwise.
        Change it with :meth:`set_mode`.

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
        output: str = "rows",
        decode_weight=None,
        mode: str = "auto",
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r} unknown; expected one of {ACTIVATIONS}")
        if backend not in ("cusparselt", "torch"):
            raise ValueError(f"backend {backend!r} unknown; expected 'cusparselt' or 'torch'")
        if layout != "auto" and layout not in C.LAYOUTS:
            raise ValueError(f"layout {layout!r} unknown; expected 'auto' or one of {C.LAYOUTS}")
        if output not in OUTPUT_CHOICES:
            raise ValueError(f"output {output!r} unknown; expected one of {OUTPUT_CHOICES}")
        self.in_features = in_features
        self.out_features = out_features
        self.dtype = dtype
        self.activation = activation
        self.backend = backend
        self.alg = alg
        self.layout = layout
        self.output = output
        self.out_dtype = out_dtype
        self.mode = check_mode(mode)
        data = compressed.data if isinstance(compressed, C.CompressedTensor) else compressed
        self.register_buffer("compressed", data)
        self.register_buffer("bias", bias)
        self.register_buffer("weight_scale", weight_scale)
        self.register_buffer("_dense", dense_weight, persistent=False)
        # the decode kernel's weight (values, metadata, int8 scales), not in the state dict:
        # it is rebuilt from the dense weight, and a checkpoint holds the cuSPARSELt form
        dw = decode_weight
        self.register_buffer("_dec_values", None if dw is None else dw.values, persistent=False)
        self.register_buffer("_dec_meta", None if dw is None else dw.metadata, persistent=False)
        self.register_buffer("_dec_scale", None if dw is None else dw.scale, persistent=False)
        self._dec_shape = None if dw is None else dw.shape
        self._force: Route | None = None  # a route imposed while timing whole forwards
        # a few input rows and their dense product, to check searched algorithms against
        self.register_buffer("_probe_x", None, persistent=False)
        self.register_buffer("_probe_y", None, persistent=False)
        # the decisions this layer was given, by token count, read for its mode
        self.decisions_made = LayerDecisions(self.mode, D.MAX_TOKENS)
        self._warned: set[str] = set()  # modes this layer warned it was not sparsified for
        self._npad: dict[int, int] = {}
        self._mult = token_multiple(dtype)
        # 16-bit: bias fused in the kernel; 8-bit: added after, together with the token scale
        self._bias_in_kernel = bias is not None and dtype.itemsize == 2
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        """Forget everything bound to this process, device and memory.

        Plans (ctypes handles), chosen routes, fast paths (closures over pointers) and the op id.
        """
        self._plans: dict = {}
        self._routes: dict = {}  # (padded tokens, input layout, fused act, clock) -> Route
        # (shape, strides, device, dtype) -> callable: the whole forward for such inputs, one
        # table per clock (wall: eager and default compile; gpu: inside a CUDA-graph capture)
        self._fast: dict = {}
        self._fast_graph: dict = {}
        # (shape, device, dtype) -> the dense route as one F.linear call, for any strides, where
        # every clock this layer may run by chose dense: looked up before anything else
        self._dense_any: dict = {}
        # the same where the wall clock chose dense but the GPU clock may not (mode "auto"):
        # taken outside a CUDA-graph capture only (BERT-like layers, eager and host-bound)
        self._wall_dense: dict = {}
        self._decode_calls: dict = {}  # (rows, activation dtype) -> decode.DecodeCall
        self._cache = C.default_cache()
        self._op_id = ops.register(self)

    def __getstate__(self) -> dict:
        """What a copy or a pickle keeps: the weights and settings.

        Not the plans, fast paths or op id, which belong to this process (a copy builds its own at
        its first call).
        """
        state = self.__dict__.copy()
        for name in _PROCESS_STATE:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        """A copy (``copy.deepcopy``, unpickling) gets its own op id, plans and fast paths."""
        super().__setstate__(state)
        self._reset_runtime()

    def _apply(self, fn, recurse: bool = True):
        """``module.to(device)``, ``.cuda()``: move the buffers, then rebuild plans and fast paths.

        A dtype change is refused before anything moves: the compressed weight holds values of one
        dtype (convert the dense model, then sparsify).
        """
        probe = torch.empty(0, dtype=self.out_dtype, device=self.compressed.device)
        new = fn(probe)
        if isinstance(new, torch.Tensor) and new.dtype != probe.dtype:
            raise TypeError(
                f"{self.out_features}x{self.in_features} SparseLinear holds a compressed "
                f"{dtype_name(self.dtype)} weight and cannot become {dtype_name(new.dtype)}"
                " after sparsify (modules before it may already be converted: convert them "
                "back). Hint: convert the dense model first (model.to(dtype)), then sparsify it."
            )
        out = super()._apply(fn, recurse)
        self._reset_runtime()
        self.decisions_made.forget()
        return out

    def _forget_fast_paths(self) -> None:
        """Drop every remembered call (routes or plans changed: the next call decides again)."""
        self._fast.clear()
        self._fast_graph.clear()
        self._dense_any.clear()
        self._wall_dense.clear()

    @property
    def op_id(self) -> int:
        """The module's id for the compiled op ``torch.ops.explorer.sparse_forward``."""
        return self._op_id

    def set_mode(self, mode: str) -> None:
        """Choose routes for another execution mode from now on (see the class's ``mode``).

        Measured decisions are kept per clock, so switching back and forth measures nothing
        twice.

        Parameters
        ----------
        mode : {"auto", "eager", "compile", "graphs"}
            The execution mode.
        """
        self.mode = check_mode(mode)
        self._routes.clear()
        self._forget_fast_paths()
        self.decisions_made.set_mode(mode)

    def set_activation(self, activation: str) -> None:
        """Apply ``activation`` (``"none"``, ``"relu"`` or ``"gelu"``) after the product.

        It is fused into the kernel where cuSPARSELt allows (for folding a following ``nn.ReLU``).

        Parameters
        ----------
        activation : {"none", "relu", "gelu"}
            The activation.
        """
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r} unknown; expected one of {ACTIVATIONS}")
        self.activation = activation
        self._plans.clear()
        self._routes.clear()
        self._forget_fast_paths()

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        options: SparseOptions | None = None,
        *,
        activation: str = "none",
        backend: str = "cusparselt",
        out_dtype: torch.dtype | None = None,
        alg: int = -1,
        mode: str = "auto",
        fp8_weight: tuple[torch.Tensor, torch.Tensor] | None = None,
        **option_fields,
    ) -> SparseLinear:
        """Compress a CUDA ``nn.Linear`` whose weight is already 2:4 along ``in_features``.

        Parameters
        ----------
        linear : nn.Linear
            On a CUDA device, weight pruned 2:4 (zeros in place).
        options : SparseOptions, optional
            The build options (:class:`~explorer.gpu.modules.sparse_options.SparseOptions`): the
            matmul's ``dtype`` (default: the weight's if 16-bit, else float16; int8 and
            float8_e4m3fn quantize the weight per channel and the activations per token, see
            :mod:`explorer.gpu.modules.quant` and :mod:`explorer.gpu.modules.fp8`), the operand
            ``layout``, the ``output`` contract, ``decode`` (also keep the weight in the explorer's
            compressed layout, 9/16 of the dense bytes in 16-bit and 5/16 for int8, so that 1
            to 64 tokens may run the decode kernel; needs ``in_features`` a multiple of 16 and
            the cuSPARSELt backend), ``keep_dense`` (also keep the dense masked weight for
            cuBLAS where it is faster) and ``tune_tokens`` (token counts to search the
            algorithm for now, in a child process; see :mod:`explorer.gpu.library.tuning`).
        activation : {"none", "relu", "gelu"}
        backend : {"cusparselt", "torch"}
        out_dtype : torch.dtype, optional
            See the class.
        alg : int
            A fixed cuSPARSELt config id, or -1 to choose.
        mode : {"auto", "eager", "compile", "graphs"}
            The execution mode routes are chosen for (see the class).
        fp8_weight : (torch.Tensor, torch.Tensor), optional
            With ``dtype=float8_e4m3fn``: fp8 codes ``[out, in]`` and float32 scales ``[out]``
            quantized elsewhere (a checkpoint's), used as they are (:func:`prepare_weight`).
        **option_fields
            Fields of :class:`SparseOptions` given one by one (``dtype=torch.int8``); with
            ``options`` they replace its fields.

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
        options = (options or SparseOptions()).replace(**option_fields)
        layout, output, tune_tokens = options.layout, options.output, options.tune_tokens
        prepared = prepare_weight(linear, options, backend, out_dtype, fp8_weight)
        dtype, out_dtype, w = prepared.dtype, prepared.out_dtype, prepared.weight
        layer = cls(
            linear.in_features,
            linear.out_features,
            prepared.compressed,
            prepared.bias,
            dtype,
            activation,
            prepared.scale,
            out_dtype,
            backend,
            alg,
            prepared.dense,
            layout,
            output,
            prepared.decode,
            mode,
        )
        if dtype.itemsize == 2 and backend == "cusparselt":
            if tune_tokens and alg < 0:
                for lays in (("cc", "cr"), ("rc", "rr")) if output == "any" else (("cc", "cr"),):
                    tuning.tune_weight(w, tune_tokens, out_dtype=out_dtype, layouts=lays)
            gen = torch.Generator(device=w.device).manual_seed(1234)
            px = torch.randn(_PROBE_ROWS, w.shape[1], device=w.device, generator=gen).to(dtype)
            layer._probe_x = px
            layer._probe_y = px.float() @ w.float().t()
        elif layer._fp8_dense and tune_tokens and alg < 0:
            # its one layout, searched so FP8 2:4 is timed at its best against FP8 dense
            tuning.tune_weight(w, tune_tokens, out_dtype=out_dtype, layouts=("cc",))
        return layer

    # -- routes ----------------------------------------------------------------------------------
    @property
    def dense_kept(self) -> bool:
        """True if the dense weight is kept (the dense route is open)."""
        return self._dense is not None

    def drop_dense(self) -> None:
        """Free the dense weight; from now on every token count runs sparse.

        Decisions already measured that chose sparse carry over (without the dense time).
        """
        if self._dense is None:
            return
        mnk = self._mnk_key()
        self._dense = None
        BOOK.carry_without_dense(lambda problem: problem[:3] == mnk)
        self._routes.clear()
        self._forget_fast_paths()
        self.decisions_made.close_dense()

    @property
    def decode_kept(self) -> bool:
        """True if the weight is also kept in the decode kernel's layout (the decode route)."""
        return self._dec_values is not None

    def decode_weight(self):
        """The weight the decode kernel reads, as a :class:`~explorer.CompressedWeight`."""
        from explorer.compression import CompressedWeight

        if self._dec_values is None:
            raise ValueError("this SparseLinear keeps no decode weight; build it with decode=True")
        return CompressedWeight(self._dec_values, self._dec_meta, self._dec_shape, self._dec_scale)

    def drop_decode(self) -> None:
        """Free the decode kernel's weight; decisions that chose it are measured again."""
        if self._dec_values is None:
            return
        self._dec_values = self._dec_meta = self._dec_scale = None
        self._routes.clear()
        self._forget_fast_paths()
        self._decode_calls.clear()
        self.decisions_made.forget_decode()

    @property
    def dense_bytes(self) -> int:
        """Bytes of the dense weight kept for the dense route (0 when none is kept)."""
        return 0 if self._dense is None else self._dense.numel() * self._dense.element_size()

    def _mnk_key(self) -> tuple:
        return (self.out_features, self.in_features, self.dtype)

    def _key(
        self, n: int, dev: int, fused_act: bool, alpha: bool, layout: str, alg: int
    ) -> C.PlanKey:
        return C.PlanKey(
            m=self.out_features,
            n=n,
            k=self.in_features,
            dtype=dtype_name(self.dtype),
            out_dtype=dtype_name(self.out_dtype),
            layout=layout,
            alg=alg,
            epilogue=self.activation if fused_act else "none",
            bias=self._bias_in_kernel,
            alpha_vector=alpha,
            device=dev,
        )

    def _plan_for(self, n: int, dev: int, fused_act: bool, alpha: bool, route: Route) -> C.Plan:
        pkey = (n, route.layout, route.alg, fused_act, alpha)
        plan = self._plans.get(pkey)
        if plan is not None and plan.alive:
            self._cache.hits += 1
            return plan
        bias_ptr = self.bias.data_ptr() if self._bias_in_kernel else 0
        plan = self._cache.get(
            self._key(n, dev, fused_act, alpha, route.layout, route.alg), bias_ptr
        )
        self._plans[pkey] = plan
        return plan

    def _plan_ready(self, n: int, fused_act: bool, alpha: bool, route: Route) -> bool:
        """Whether the plan of ``route`` at ``n`` rows is built and alive (nothing to allocate)."""
        plan = self._plans.get((n, route.layout, route.alg, fused_act, alpha))
        return plan is not None and plan.alive

    def _mnk(self, n: int) -> tuple[int, int, int]:
        return self.out_features, n, self.in_features

    # -- forward ---------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer to ``x[..., in_features]`` (any leading dims, any strides)."""
        if torch.compiler.is_compiling():
            if self.traces_dense(x.numel() // self.in_features):
                return self.traced_dense(x)  # the compiler's own matmul: no op to call
            # one opaque op for torch.compile and CUDA graphs (explorer.gpu.cuda.ops)
            return ops.forward(x, self._op_id)
        return self.run(x)

    def traces_dense(self, tokens) -> bool:
        """Whether a compiled model should run this layer as a traced matmul at ``tokens`` rows.

        A plain matmul on the dense weight, where the layer's decisions say so for its mode
        (:meth:`LayerDecisions.traces_dense`). Token counts never measured, or not known while
        tracing (symbolic sizes), go to the op. An fp8 layer with its fp8 codes traces FP8 dense:
        the compiler fuses its quantization with the step before, which the op cannot (docs/gpu.md).

        Parameters
        ----------
        tokens : int or symbolic size
            Rows of the input.

        Returns
        -------
        bool
            True for a traced matmul, False for the op.
        """
        if self._force is None and self._fp8_dense:
            return True  # compiled fp8: FP8 dense, quantized in the step before
        if self._force is not None or not isinstance(tokens, int) or tokens < 1:
            return False  # a symbolic (dynamic) size: the op decides at each call
        return self.decisions_made.traces_dense(C.decision_tokens(tokens, self.dtype))

    def traced_dense(self, x: torch.Tensor) -> torch.Tensor:
        """The dense route written as torch calls a compiler can trace and fuse.

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., in_features)``.
        """
        return self._dense_forward(x, self.activation != "none")

    def run(self, x: torch.Tensor) -> torch.Tensor:
        """The eager forward: an input seen before goes straight to the call its route makes.

        Seen before means the same shape, strides, device and dtype; one call then costs about the
        host time of ``F.linear``. Any other input takes the full path, which chooses and remembers.

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., in_features)``.

        Returns
        -------
        torch.Tensor
            The layer's output, ``(..., out_features)``.
        """
        # a shape dense by every clock this layer may run by: one F.linear, found by shape, device
        # and dtype alone (no capture check, no strides; decode sizes, eager is host-bound there)
        key = (x.shape, x.get_device(), x.dtype)
        dense = self._dense_any.get(key)
        if dense is not None:
            return dense(x)
        dense = self._wall_dense.get(key)  # (a capture takes the GPU clock's route instead)
        if dense is not None and not torch.cuda.is_current_stream_capturing():
            return dense(x)
        fast = self._fast_table(self._clock_now()).get(
            (x.shape, x.stride(), x.get_device(), x.dtype)
        )
        if fast is not None:
            return fast(x)
        self._warn_if_mode_differs("eager")
        return self._forward(x)

    def run_compiled(self, x: torch.Tensor) -> torch.Tensor:
        """The forward the compiled op runs (``torch.compile``): :meth:`run`'s fast path.

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., in_features)``.
        """
        clock = self._clock_now()
        fast = self._fast_table(clock).get((x.shape, x.stride(), x.get_device(), x.dtype))
        if fast is not None:
            if self.mode == "graphs" and not self._warned:
                # a second call of this input outside a capture: no CUDA graph replays it
                self._warn_if_mode_differs("compile")  # (inside a capture it says nothing)
            return fast(x)
        if self.mode != "graphs":
            # in "graphs" the first call of an input may be the CUDA-graph warm-up
            self._warn_if_mode_differs("compile")
        return self._forward(x)

    def _clock_now(self) -> str:
        """The clock this call's route is chosen by (``"gpu"`` or ``"wall"``)."""
        mode = self.mode
        if mode == "auto":
            return "gpu" if torch.cuda.is_current_stream_capturing() else "wall"
        return "gpu" if mode == "graphs" else "wall"

    def _fast_table(self, clock: str) -> dict:
        return self._fast_graph if clock == "gpu" else self._fast

    def _warn_if_mode_differs(self, running: str) -> None:
        """Warn once per process when the model runs in a mode its routes were not chosen for.

        ``running`` is ``"eager"`` or ``"compile"``, or ``"graphs"`` inside a capture.
        """
        if torch.cuda.is_current_stream_capturing():
            running = "graphs"
        if self.mode in ("auto", running) or clock_for(self.mode) == clock_for(running):
            return
        if running in self._warned:
            return
        self._warned.add(running)
        warnings.warn(
            f"this model was sparsified for mode={self.mode!r} but runs as {running!r}: its "
            f"layers take the routes measured for {self.mode!r}, which may be slower here. "
            f"Hint: sparsify(model, mode={running!r}) (or mode='auto'), or call "
            f"explorer.gpu.set_mode(model, {running!r}).",
            RuntimeWarning,
            stacklevel=4,
        )

    def fake_output(self, x: torch.Tensor) -> torch.Tensor:
        """An empty tensor shaped like the output for ``x`` (what the compiled op returns).

        Parameters
        ----------
        x : torch.Tensor
            The input, ``(..., in_features)``.

        Returns
        -------
        torch.Tensor
            An empty tensor of the output's shape and dtype.
        """
        return x.new_empty((*x.shape[:-1], self.out_features), dtype=self._result_dtype(x))

    def _result_dtype(self, x: torch.Tensor) -> torch.dtype:
        if x.is_floating_point() and x.dtype.itemsize > 1:
            return x.dtype
        return self.out_dtype

    def _decode_call(self, tokens: int, act: torch.dtype):
        """The decode kernel for ``tokens`` rows of ``act`` activations, set up once."""
        key = (tokens, act)
        call = self._decode_calls.get(key)
        if call is None:
            call = self._decode_calls[key] = D.DecodeCall(
                self.decode_weight(), self.bias, tokens, act
            )
        return call

    def _decode_forward(self, x: torch.Tensor, fused_act: bool) -> torch.Tensor:
        """The decode kernel on ``x`` (2-D, at most 64 rows), bias and activation included."""
        act = self._dec_values.dtype if self._dec_scale is None else self.out_dtype
        y = self._decode_call(x.shape[0], act)(x if x.dtype == act else x.to(act))
        return apply_activation(y, self.activation) if self.activation != "none" else y

    def _dense_call(self, fused_act: bool):
        """The dense route as one call of a 2-D (or any-leading-dims) input."""
        if fused_act or self._fp8_dense:
            return partial(self._dense_forward, fused_act=fused_act)
        # a partial is called from C: one Python frame less per eager call than a closure
        return partial(nn.functional.linear, weight=self._dense, bias=self.bias)

    def _dense_forward(self, x: torch.Tensor, fused_act: bool) -> torch.Tensor:
        """The product on the dense weight (FP8 dense for fp8), in the input's dtype."""
        w = self._dense
        if self._fp8_dense:
            y = scaled_linear(x, w, self.weight_scale, self.bias, self.out_dtype)
        else:
            y = nn.functional.linear(x if x.dtype == w.dtype else x.to(w.dtype), w, self.bias)
        y = apply_activation(y, self.activation) if fused_act else y
        return y if y.dtype == self._result_dtype(x) else y.to(self._result_dtype(x))

    @property
    def _fp8_dense(self) -> bool:
        """Whether the dense route is FP8 dense (``torch._scaled_mm`` on the fp8 codes)."""
        return self._dense is not None and self._dense.dtype.itemsize == 1

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(
                f"input has {x.shape[-1]} features in its last dimension, expected "
                f"{self.in_features}"
            )
        if x.device.type != "cuda":
            raise ValueError(f"input is on {x.device}; SparseLinear runs on CUDA tensors")
        clock = self._clock_now()
        lead = x.shape[:-1]
        x2 = x if x.dim() == 2 else x.reshape(-1, self.in_features)
        if self.backend == "torch":
            return self._forward_torch(x2).reshape(*lead, self.out_features)
        if self.decode_kept and 0 < x2.shape[0] <= D.MAX_TOKENS and x2.is_floating_point():
            y = self._maybe_decode(x, x2, clock)
            if y is not None:
                return y if len(lead) == 1 else y.reshape(*lead, self.out_features)
        scale_t, x_in = None, x2  # x_in: the input before any quantization (the dense route's)
        if self.dtype == torch.int8:
            x2, scale_t = quant.quantize_per_token(x2)
        elif self.dtype.itemsize == 1:  # fp8: dynamic per-token scales, like int8's
            x2, scale_t = fp8.quantize_activations(x2)
        elif x2.dtype != self.dtype:
            if not x2.is_floating_point():
                raise TypeError(f"input dtype {x2.dtype} is not a floating type")
            x2 = x2.to(self.dtype)  # e.g. a float32 model run with 16-bit sparse layers
        if not x2.is_contiguous() and not x2.t().is_contiguous():
            x2 = x2.contiguous()
        t = x2.shape[0]
        if t == 0:
            return x.new_empty(*lead, self.out_features, dtype=self._result_dtype(x))
        n = self._padded(t)
        # "r": a transposed view of a row-major X^T (what an "r"-output layer returns)
        first = "c" if x2.is_contiguous() else "r"
        dev = x2.device.index or 0
        alpha, fuse = self._alpha_vector, self._fuses
        route = self._route(n, t, dev, fuse, alpha, first, clock)
        capturing = torch.cuda.is_current_stream_capturing()
        # dense by every clock this layer may run by: its mode's one, or both for "auto"
        dense_always = route == DENSE and (self.mode != "auto" or not capturing)
        if clock == "wall" and self.mode == "auto" and not capturing:
            # a CUDA-graph capture of this input takes the GPU clock's route: build its plan now
            ahead = self._route(n, t, dev, fuse, alpha, first, "gpu")
            dense_always = dense_always and ahead == DENSE
            if ahead.kind == "sparse":
                try:
                    self._plan_for(n, dev, fuse, alpha, ahead)
                except C.CusparseltRefused:
                    pass  # the capture finds no plan and runs dense; nothing to build ahead
        if route.kind == "sparse" and not self._plan_ready(n, fuse, alpha, route):
            if self._dense is not None and capturing:
                # a plan built now would put its workspace in the graph's private memory pool,
                # alive after the capture but no output of it (torch's CUDA-graph trees refuse
                # that): this capture runs dense; an eager call builds the plan
                route = DENSE
        if route.kind == "dense":
            # the activation belongs to the dense route whether or not a sparse kernel fuses it
            act = self.activation != "none"
            if self._fp8_dense and scale_t is not None:  # FP8 dense on the quantized input
                w, out = self._dense, self.out_dtype
                y = scaled_matmul(x2, scale_t, w, self.weight_scale, self.bias, out)
                y = (apply_activation(y, self.activation) if act else y).to(self._result_dtype(x))
            else:
                y = self._dense_forward(x_in if scale_t is not None else x2, act)
            if (x2.dtype == x.dtype or scale_t is not None) and self._force is None:
                # F.linear takes any leading dims: one call, no reshapes (host time in decode)
                call = self._dense_call(act)
                self._remember(x, call, clock, any_dims=True)
                key = (x.shape, x.get_device(), x.dtype)
                if dense_always and len(self._dense_any) < 64:
                    self._dense_any[key] = call
                elif clock == "wall" and not capturing and len(self._wall_dense) < 64:
                    self._wall_dense[key] = call
            return y if len(lead) == 1 else y.reshape(*lead, self.out_features)
        pad = n - t
        xp = nn.functional.pad(x2, (0, 0, 0, pad)) if pad else x2
        alpha_ptr = self.weight_scale.data_ptr() if alpha else 0
        try:
            plan = self._plan_for(n, dev, fuse, alpha, route)
            y = self._run(plan, xp, n, alpha_ptr)
        except C.CusparseltRefused:
            if not fuse:
                raise
            # cuSPARSELt has no kernel with this fused activation: apply it after, from now on
            _UNFUSED.add((self.dtype, self.activation))
            self._plans.clear()
            self._routes.clear()
            self._forget_fast_paths()
            fuse = False
            route = self._route(n, t, dev, fuse, alpha, first, clock)
            plan = self._plan_for(n, dev, fuse, alpha, route)
            y = self._run(plan, xp, n, alpha_ptr)
        if route.transpose:
            y = rows_from_transposed(y, t)  # row-major, padded tokens dropped in the same pass
        elif pad:
            y = y[:t]
        if self.weight_scale is not None and not alpha:
            y = y * self.weight_scale.to(y.dtype)  # fp8: no alpha vector in cuSPARSELt
        if scale_t is not None:
            # one fused step: per-token scale plus the bias (which must come after the scale)
            s = scale_t[:t, None].to(y.dtype)
            y = torch.addcmul(self.bias, y, s) if self.bias is not None else y * s
        if self.activation != "none" and not fuse:
            y = apply_activation(y, self.activation)
        if x.is_floating_point() and y.dtype != x.dtype and x.dtype.itemsize > 1:
            y = y.to(x.dtype)
        direct = (
            x2.dtype == x.dtype  # a dtype cast is not in the fast path; a copy to rows is
            and self.weight_scale is None
            and (fuse or self.activation == "none")
            and y.dtype == x.dtype
            and self._force is None
        )
        if direct:
            self._remember(x, self._fast_sparse(plan, n, t, route.transpose), clock)
        return y if len(lead) == 1 else y.reshape(*lead, self.out_features)

    def _padded(self, t: int) -> int:
        """The token count ``t`` rows run at (cuSPARSELt's multiple), remembered per ``t``."""
        n = self._npad.get(t)
        if n is None:
            n = self._npad[t] = C.padded_tokens(t, self.dtype)
        return n

    @property
    def _alpha_vector(self) -> bool:
        """int8 weights pass their per-channel scales to cuSPARSELt as an alpha vector."""
        return self.weight_scale is not None and self.dtype == torch.int8

    @property
    def _fuses(self) -> bool:
        """Whether the activation is fused into the kernel (cuSPARSELt has not refused it)."""
        return (
            self.activation != "none"
            and self.weight_scale is None
            and (self.dtype, self.activation) not in _UNFUSED
        )

    def _maybe_decode(self, x: torch.Tensor, x2: torch.Tensor, clock: str) -> torch.Tensor | None:
        """Run ``x2`` (at most 64 rows) on the decode kernel if that is its route, else None."""
        t = x2.shape[0]
        n = self._padded(t)
        first = "c" if x2.is_contiguous() or not x2.t().is_contiguous() else "r"
        fuse = self._fuses
        route = self._route(n, t, x2.device.index or 0, fuse, self._alpha_vector, first, clock)
        if route.kind != "decode":
            return None
        y = self._decode_forward(x2, fuse)
        if x.is_floating_point() and y.dtype != x.dtype and x.dtype.itemsize > 1:
            y = y.to(x.dtype)
        if y.dtype == x.dtype and self._force is None:
            act = self._dec_values.dtype if self._dec_scale is None else self.out_dtype
            if x2.dtype == act and self.activation == "none":
                fn2d = self._decode_call(x2.shape[0], act)  # one launch, nothing around it
            else:
                fn2d = partial(self._decode_forward, fused_act=fuse)
            self._remember(x, fn2d, clock)
        return y

    def _fast_sparse(self, plan: C.Plan, n: int, t: int, transpose: bool):
        """The sparse route for ``t`` rows (padded to ``n``) as one call (:func:`sparse_call`)."""
        ptr = self.compressed.data_ptr()
        return sparse_call(plan, ptr, self.out_features, self.out_dtype, n, t, transpose)

    def _remember(self, x: torch.Tensor, fn2d, clock: str, any_dims: bool = False) -> None:
        """Keep ``fn2d`` as the whole forward for inputs like ``x`` under ``clock``.

        ``fn2d`` maps a 2-D input to a 2-D output, or takes any leading dims with ``any_dims``.
        """
        table = self._fast_table(clock)
        if len(table) >= 64:
            return
        if x.dim() == 2 or any_dims:
            fn = fn2d
        else:
            lead, k, out = x.shape[:-1], self.in_features, self.out_features

            def fn(x_, fn2d=fn2d):
                return fn2d(x_.reshape(-1, k)).reshape(*lead, out)

        table[(x.shape, x.stride(), x.get_device(), x.dtype)] = fn

    def _run(
        self, plan: C.Plan, x2: torch.Tensor, n: int | None = None, alpha_ptr: int = 0
    ) -> torch.Tensor:
        ptr = self.compressed.data_ptr()
        return run_plan(plan, ptr, x2, self.out_features, self.out_dtype, n, alpha_ptr)

    def _forward_torch(self, x2: torch.Tensor) -> torch.Tensor:
        if x2.dtype != self.dtype:
            return self._forward_torch(x2.to(self.dtype)).to(x2.dtype)
        t = x2.shape[0]
        pad = -t % self._mult
        if pad:
            x2 = nn.functional.pad(x2, (0, 0, 0, pad))
        y = TB.sparse_mm(self.compressed, x2.contiguous(), bias=self.bias)
        y = apply_activation(y[:t] if pad else y, self.activation)
        return y

    # -- introspection ---------------------------------------------------------------------------
    def dense_weight(self) -> torch.Tensor:
        """The dense masked weight (an fp8 layer's: its fp8 codes), if ``keep_dense=True`` was given."""
        if self._dense is None:
            raise ValueError("this SparseLinear kept no dense copy; build it with keep_dense=True")
        return self._dense

    def extra_repr(self) -> str:
        """The text shown inside the module's repr."""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, dtype={dtype_name(self.dtype)}, "
            f"activation={self.activation}, backend={self.backend}, "
            f"decode={self.decode_kept}"
        )

    def _repr_html_(self) -> str:
        dense_bytes = self.in_features * self.out_features * self.dtype.itemsize
        rows = [
            ("shape", f"{self.out_features} x {self.in_features}"),
            ("dtype", dtype_name(self.dtype)),
            ("backend", self.backend),
            ("activation", self.activation),
            ("compressed bytes", f"{self.compressed.numel():,} (dense {dense_bytes:,})"),
            ("plans", len(self._plans)),
            ("decode kernel", "kept (1-64 tokens)" if self.decode_kept else "no"),
        ]
        return _html.table(["SparseLinear", ""], rows)

    @property
    def compression_ratio(self) -> float:
        """Dense bytes over compressed bytes."""
        dense = self.in_features * self.out_features * self.dtype.itemsize
        return dense / max(1, self.compressed.numel() * self.compressed.element_size())
