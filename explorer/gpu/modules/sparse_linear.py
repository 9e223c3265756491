"""``SparseLinear``: a drop-in for ``nn.Linear`` that holds a 2:4 weight compressed by cuSPARSELt.

Each module keeps a small dict from padded token count to its
:class:`~explorer.gpu.library.cusparselt.Plan` (all plans also live in the shared LRU
:class:`~explorer.gpu.library.cusparselt.PlanCache`), so after the first call at a token count a
forward pass is: reshape, pad if needed, one ``cusparseLtMatmul``. Which route a problem takes
(dense, cuSPARSELt in which layout and algorithm, the decode kernel) is chosen by its base class
:class:`~explorer.gpu.modules.route_choice.RouteChoice`; how a call finds and runs its route
(the eager fast paths, the compiled op's call, the full path that decides and remembers) is
its base class :class:`~explorer.gpu.modules.sparse_forward.SparseForward`. This module holds
the weights, their construction, the plans and the settings.
"""

from __future__ import annotations

import torch
from torch import nn

from explorer import _html
from explorer.dtypes import dtype_name
from explorer.gpu.cuda import decode as D
from explorer.gpu.cuda import ops
from explorer.gpu.cuda.native_table import NativeTable
from explorer.gpu.library import cusparselt as C
from explorer.gpu.library import tuning
from explorer.gpu.modules.route_choice import RouteChoice
from explorer.gpu.modules.sparse_calls import ACTIVATIONS
from explorer.gpu.modules.sparse_forward import SparseForward
from explorer.gpu.modules.sparse_options import OUTPUT_CHOICES, SparseOptions
from explorer.gpu.modules.sparse_weight import prepare_weight
from explorer.gpu.routes.dispatch import Route, check_mode
from explorer.gpu.routes.layer_decisions import LayerDecisions
from explorer.gpu.routes.route_timing import BOOK
from explorer.sparse_rules import token_multiple

__all__ = ["SparseLinear"]

_PROBE_ROWS = 16  # rows of x @ W^T kept to check searched algorithms against


#: What a layer holds for this process only (plans, routes, remembered calls): not copied.
_PROCESS_STATE = (
    "_plans _routes _fast _fast_graph _dense_any _wall_dense _decode_calls _cache _quiet "
    "native_table"
).split()


class SparseLinear(SparseForward, RouteChoice, nn.Module):
    """``y = activation(x @ W^T + b)`` with a 2:4 ``W`` run by cuSPARSELt.

    Build it with :meth:`from_linear`. Once per problem (shape, dtype, padded token count and
    input layout) the layer times the routes it may take (:mod:`explorer.gpu.routes.dispatch`):
    the sparse product writing ``Y`` row-major or ``Y^T`` (then copied to row-major, or handed
    on as a transposed view when ``output="any"``), each with the library's default and the
    tuned algorithm; cuBLAS on the dense weight, when kept; at 1 to 64 tokens the explorer's
    decode kernel (:mod:`explorer.gpu.cuda.decode`). The fastest wins, and dense is kept unless
    sparse is measurably faster: never slower than the ``nn.Linear`` it replaced at the token
    counts it has seen. Its measured decisions are :attr:`decisions_made`
    (:class:`~explorer.gpu.routes.layer_decisions.LayerDecisions`), their compiled verdict at
    1 to 64 rows the int :attr:`small_row_routes`.

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
        self._follow_decisions()
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
        self._quiet: set = set()  # (mode, running, tokens) found to need no mode warning
        self._cache = C.default_cache()
        if "native_table" in self.__dict__:
            self.native_table.forget()
        self._op_id = ops.register(self)
        self.native_table = NativeTable(self._op_id)  # its calls' programs for C++

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
        self._follow_decisions()

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
        self.native_table.forget()

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
        self._follow_decisions()  # (a traced count with an activation is not the bare product)

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
        elif (
            layer.dense_kept
            and layer.dense_weight().dtype.itemsize == 1
            and tune_tokens
            and alg < 0
        ):
            # FP8 dense as the dense route: its one layout, searched so FP8 2:4 is timed at its
            # best against FP8 dense
            tuning.tune_weight(w, tune_tokens, out_dtype=out_dtype, layouts=("cc",))
        return layer

    # -- routes ----------------------------------------------------------------------------------
    @property
    def dense_kept(self) -> bool:
        """True if the dense weight is kept (the dense route is open)."""
        return self._dense is not None

    def drop_dense(self) -> None:
        """Free the dense weight (every count runs sparse now); sparse decisions carry over."""
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
        """Free the decode kernel's weight; decisions carry over without its times."""
        if self._dec_values is None:
            return
        mnk = self._mnk_key()
        self._dec_values = self._dec_meta = self._dec_scale = None
        BOOK.carry_without_decode(lambda problem: problem[:3] == mnk)
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
