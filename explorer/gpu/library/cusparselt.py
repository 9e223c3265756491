"""cuSPARSELt through ``nvmath.bindings.cusparseLt``: cached plans, compression, GPU checks.

``D = A @ B`` with

* A, the 2:4 sparse weight ``W[out, in]``, row-major (groups of 4 run along ``in``);
* B, the activations: layout ``c`` is ``X[tokens, in]`` row-major, which cuSPARSELt reads as a
  column-major ``in x tokens`` matrix (the "dense operand transposed" layout 8-bit types
  require), layout ``r`` is ``X^T`` row-major;
* D, the output: ``c`` is ``Y[tokens, out]`` row-major (column-major ``out x tokens``), ``r`` is
  ``Y^T`` row-major.

``cc`` needs no copy at all; on Hopper with cuSPARSELt 0.8 the fast fp16 kernels want ``rr``, so
:class:`~explorer.gpu.SparseLinear` times the layouts once per shape and keeps the fastest.
Every epilogue vector (bias, per-channel alpha) runs over ``out``. One :class:`Plan` exists per
:class:`PlanKey`; plans live in an LRU :class:`PlanCache` and free their descriptors, plan and
workspace when evicted or collected.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from explorer import sparse_rules
from explorer.errors import require
from explorer.gpu.library.workspace import plan_workspace

__all__ = [
    "CUSPARSELT_DTYPES",
    "LAYOUTS",
    "CompressedTensor",
    "CusparseltRefused",
    "Plan",
    "PlanCache",
    "PlanKey",
    "check_24",
    "check_weight",
    "compress",
    "default_cache",
    "handle",
    "is_24",
    "library_version",
    "matmul",
    "padded_tokens",
]

# cudaDataType codes (library_types.h) and cuSPARSE enums.
_CUDA_CODE = {
    torch.float16: 2,
    torch.bfloat16: 14,
    torch.int8: 3,
    torch.int32: 10,
    torch.float32: 0,
}
if hasattr(torch, "float8_e4m3fn"):
    _CUDA_CODE[torch.float8_e4m3fn] = 28
_ORDER_COL, _ORDER_ROW = 1, 2
_OP_N = 0

#: Input dtype -> output dtypes cuSPARSELt accepts with it (first one is the default).
CUSPARSELT_DTYPES: dict[torch.dtype, tuple[torch.dtype, ...]] = {
    torch.float16: (torch.float16,),
    torch.bfloat16: (torch.bfloat16,),
    torch.int8: (torch.int32, torch.float16, torch.bfloat16, torch.int8),
}
if hasattr(torch, "float8_e4m3fn"):
    CUSPARSELT_DTYPES[torch.float8_e4m3fn] = (torch.float16, torch.bfloat16, torch.float32)

_EPILOGUES = ("none", "relu", "gelu")

#: Operand layouts: first letter B (activations), second D (output); ``c`` means the natural
#: ``nn.Linear`` layout (``X[tokens, in]``, ``Y[tokens, out]`` row-major), ``r`` the transposed
#: one (``X^T[in, tokens]``, ``Y^T[out, tokens]`` row-major). 8-bit types need ``cc``.
LAYOUTS = ("cc", "rr", "rc", "cr")


class CusparseltRefused(RuntimeError):
    """cuSPARSELt refused a plan or a call (no kernel for this configuration, or a bad one)."""


def _refused(exc: Exception) -> bool:
    return type(exc).__name__ == "cuSPARSELtError"


def _bindings():
    return require("nvmath.bindings.cusparseLt", "gpu")


def padded_tokens(tokens: int, dtype: torch.dtype) -> int:
    """The token count a plan is built for: aligned, and bucketed so few plans cover all sizes.

    Up to 256 tokens: the next multiple of :func:`explorer.sparse_rules.token_multiple`; above,
    the next multiple of 1/16 of the enclosing power of two (at most 6.25% padding, 16 plans per
    octave).

    Parameters
    ----------
    tokens : int
        The input's token count.
    dtype : torch.dtype
        The weight's dtype.

    Returns
    -------
    int
        The padded count.

    Examples
    --------
    >>> padded_tokens(5, torch.float16), padded_tokens(1000, torch.float16)
    (16, 1024)
    >>> padded_tokens(6304, torch.float16)
    6656
    """
    mult = sparse_rules.token_multiple(dtype)
    if tokens <= 256:
        return max(mult, -(-tokens // mult) * mult)
    gran = max(mult, (1 << (tokens - 1).bit_length()) // 16)
    return -(-tokens // gran) * gran


#: Token counts up to this are decided each on their own: the padding to the plan's count
#: costs host calls that are a large part of such a small product.
EXACT_TOKENS_UP_TO = 64


def decision_tokens(tokens: int, dtype: torch.dtype) -> int:
    """The token count a route decision is measured and kept for.

    ``tokens`` itself up to :data:`EXACT_TOKENS_UP_TO`, else :func:`padded_tokens` (one decision per
    plan).

    Parameters
    ----------
    tokens : int
        The input's token count.
    dtype : torch.dtype
        The weight's dtype.

    Returns
    -------
    int
        The count the decision is kept for.

    Examples
    --------
    >>> decision_tokens(1, torch.float16), decision_tokens(16, torch.float16)
    (1, 16)
    >>> decision_tokens(1000, torch.float16)
    1024
    """
    return tokens if tokens <= EXACT_TOKENS_UP_TO else padded_tokens(tokens, dtype)


# ---------------------------------------------------------------------------------------------
# handle
# ---------------------------------------------------------------------------------------------
_HANDLES: dict[int, int] = {}
_LOCK = threading.Lock()


def handle(device: int | None = None) -> int:
    """The cuSPARSELt handle of ``device`` (created once per device, lives for the process).

    Parameters
    ----------
    device : int, optional
        The CUDA device index (default: the current device).

    Returns
    -------
    int
        The handle.

    Examples
    --------
    >>> handle() == handle(torch.cuda.current_device()) != 0  # doctest: +GPU
    True
    """
    dev = torch.cuda.current_device() if device is None else int(device)
    h = _HANDLES.get(dev)
    if h is None:
        with _LOCK:
            h = _HANDLES.get(dev)
            if h is None:
                L = _bindings()
                with torch.cuda.device(dev):
                    h = L.init()
                _HANDLES[dev] = h
    return h


def library_version() -> int:
    """The version number of cuSPARSELt (e.g. 800 for 0.8.0)."""
    return int(_bindings().get_version(handle()))


def _stream_ptr(device: int) -> int:
    return torch._C._cuda_getCurrentRawStream(device)


# ---------------------------------------------------------------------------------------------
# plans
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanKey:
    """Everything a cuSPARSELt plan depends on (JSON-serialisable via :meth:`to_json`).

    ``m`` = out features, ``n`` = (padded) tokens, ``k`` = in features. ``alg`` is a config id
    or -1 for the library default; ``split_k`` is 0 for the library's heuristic.
    """

    m: int
    n: int
    k: int
    dtype: str = "float16"
    out_dtype: str = "float16"
    layout: str = "cc"
    alg: int = -1
    split_k: int = 0
    epilogue: str = "none"
    bias: bool = False
    alpha_vector: bool = False
    device: int = 0

    def to_json(self) -> dict:
        """A plain dict of the fields."""
        return asdict(self)


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


class _PlanResources:
    """The raw pointers of one plan; freed exactly once (explicitly or by the finalizer)."""

    __slots__ = ("alg_sel", "descs", "freed", "mm", "on_free", "plan")

    def __init__(self) -> None:
        self.descs: list[int] = []
        self.mm = 0
        self.alg_sel = 0
        self.plan = 0
        self.freed = False
        self.on_free: list[Callable[[], None]] = []  # told before anything is destroyed

    def free(self) -> None:
        if self.freed:
            return
        self.freed = True
        for told in self.on_free:
            told()
        L = _bindings()
        if self.plan:
            L.matmul_plan_destroy(self.plan)
        if self.alg_sel:
            L.matmul_alg_selection_destroy(self.alg_sel)
        if self.mm:
            L.matmul_descriptor_destroy(self.mm)
        for d in self.descs:
            L.mat_descriptor_destroy(d)
        self.descs = []


def _set_int(L, h, desc, attr, value: int) -> None:
    v = ctypes.c_int32(value)
    L.matmul_desc_set_attribute(h, desc, attr, ctypes.addressof(v), 4)


class Plan:
    """One cuSPARSELt matmul plan ``D[m, n] = epilogue(alpha * A[m, k] @ B[k, n] + bias)``.

    Build plans through :class:`PlanCache` (``default_cache().get(key)``) so each is built once.

    Parameters
    ----------
    key : PlanKey
        Shapes, dtypes, layout, algorithm, split-k and epilogue.
    bias_ptr : int
        Device pointer of the bias vector bound into the plan (0 without bias).

    Examples
    --------
    >>> plan = default_cache().get(PlanKey(m=256, n=64, k=512))  # doctest: +GPU
    >>> plan.key.m, default_cache().get(PlanKey(m=256, n=64, k=512)) is plan
    (256, True)
    """

    def __init__(self, key: PlanKey, bias_ptr: int = 0) -> None:
        try:
            self._build(key, bias_ptr)
        except Exception as exc:
            if not _refused(exc):
                raise
            raise CusparseltRefused(f"cuSPARSELt refused the plan {key}: {exc}") from exc

    def _build(self, key: PlanKey, bias_ptr: int) -> None:
        L = _bindings()
        self.key = key
        self.device = key.device
        self.dtype = _dtype(key.dtype)
        self.out_dtype = _dtype(key.out_dtype)
        if self.dtype not in CUSPARSELT_DTYPES:
            raise TypeError(
                f"dtype {self.dtype} is not supported by cuSPARSELt here; expected one of "
                f"{sorted(str(d) for d in CUSPARSELT_DTYPES)}. Hint: cast the weight first."
            )
        if self.out_dtype not in CUSPARSELT_DTYPES[self.dtype]:
            raise TypeError(
                f"out_dtype {self.out_dtype} cannot follow {self.dtype}; expected one of "
                f"{[str(d) for d in CUSPARSELT_DTYPES[self.dtype]]}."
            )
        if key.epilogue not in _EPILOGUES:
            raise ValueError(f"epilogue {key.epilogue!r} unknown; expected one of {_EPILOGUES}")
        self.h = h = handle(key.device)
        res = self._res = _PlanResources()
        self._finalizer = weakref.finalize(self, res.free)
        m, n, k = key.m, key.n, key.k
        a_code, d_code = _CUDA_CODE[self.dtype], _CUDA_CODE[self.out_dtype]
        compute = (
            L.ComputeType.COMPUTE_32I if self.dtype == torch.int8 else L.ComputeType.COMPUTE_32F
        )
        # 1. descriptors: A row-major m x k (sparse), B column-major k x n, C = D column-major.
        lay = key.layout
        if lay not in LAYOUTS:
            raise ValueError(f"layout {key.layout!r} unknown; expected one of {LAYOUTS}")
        if lay[0] == "c":  # B = X[n, k] row-major, read as column-major k x n
            b = L.dense_descriptor_init(h, k, n, k, 16, a_code, _ORDER_COL)
        else:  # B = X^T[k, n] row-major
            b = L.dense_descriptor_init(h, k, n, n, 16, a_code, _ORDER_ROW)
        res.descs.append(b)
        if lay[1] == "c":  # D = Y[n, m] row-major, read as column-major m x n
            c = L.dense_descriptor_init(h, m, n, m, 16, d_code, _ORDER_COL)
        else:  # D = Y^T[m, n] row-major
            c = L.dense_descriptor_init(h, m, n, n, 16, d_code, _ORDER_ROW)
        res.descs.append(c)
        a = L.structured_descriptor_init(
            h, m, k, k, 16, a_code, _ORDER_ROW, L.Sparsity.SPARSITY_50_PERCENT
        )
        res.descs.append(a)
        self.a_desc = a
        # 2. matmul descriptor and epilogue attributes.
        res.mm = mm = L.matmul_descriptor_init(h, _OP_N, _OP_N, a, b, c, c, compute)
        A = L.MatmulDescAttribute
        if key.epilogue == "relu":
            _set_int(L, h, mm, A.ACTIVATION_RELU, 1)
        elif key.epilogue == "gelu":
            _set_int(L, h, mm, A.ACTIVATION_GELU, 1)
        if key.bias:
            self.set_bias(bias_ptr, _mm=mm)
        if key.alpha_vector:
            _set_int(L, h, mm, A.ALPHA_VECTOR_SCALING, 1)
        # 3. algorithm selection and plan.
        res.alg_sel = sel = L.matmul_alg_selection_init(h, mm, L.MatmulAlg.DEFAULT)
        if key.alg >= 0:
            v = ctypes.c_int32(key.alg)
            L.matmul_alg_set_attribute(
                h, sel, L.MatmulAlgAttribute.CONFIG_ID, ctypes.addressof(v), 4
            )
        if key.split_k > 0:
            v = ctypes.c_int32(key.split_k)
            L.matmul_alg_set_attribute(h, sel, L.MatmulAlgAttribute.SPLIT_K, ctypes.addressof(v), 4)
        res.plan = L.matmul_plan_init(h, mm, sel)
        self.workspace = plan_workspace(int(L.matmul_get_workspace(h, res.plan)), key.device)
        self._ws_ptr = 0 if self.workspace is None else self.workspace.data_ptr()
        self._plan_ptr = res.plan
        self._matmul = L.matmul
        # alpha/beta: host scalars (float for every compute type used here).
        self._alpha = ctypes.c_float(1.0)
        self._beta = ctypes.c_float(0.0)
        self._alpha_ptr = ctypes.addressof(self._alpha)
        self._beta_ptr = ctypes.addressof(self._beta)
        self._streams = (ctypes.c_void_p * 1)()
        self._streams_ptr = ctypes.addressof(self._streams)

    # -- epilogue pointers ---------------------------------------------------------------------
    def set_bias(self, bias_ptr: int, _mm: int | None = None) -> None:
        """Point the fused bias at ``bias_ptr`` (a device vector of ``m`` entries).

        Parameters
        ----------
        bias_ptr : int
            The bias's device pointer.
        _mm : int, optional
            The matmul descriptor to set it on (default: the plan's own).
        """
        L = _bindings()
        v = ctypes.c_void_p(int(bias_ptr))
        mm = self._res.mm if _mm is None else _mm
        L.matmul_desc_set_attribute(
            self.h, mm, L.MatmulDescAttribute.BIAS_POINTER, ctypes.addressof(v), 8
        )

    def raw_arguments(self, a_ptr: int) -> tuple[int, int, int, int, int, int]:
        """The fixed arguments of :meth:`bind`'s call, for a caller that makes it from C++.

        Parameters
        ----------
        a_ptr : int
            The compressed weight ``A``.

        Returns
        -------
        tuple of int
            The handle, plan, ``alpha``, ``A``, ``beta`` and workspace pointers of
            ``cusparseLtMatmul`` (``B``, ``C`` = ``D`` and the stream are the call's own). They
            are valid until the plan closes: see :meth:`when_closed`.
        """
        if self._res.freed:
            raise RuntimeError(f"{self} was closed; build the plan again")
        return (self.h, self._plan_ptr, self._alpha_ptr, a_ptr, self._beta_ptr, self._ws_ptr)

    def when_closed(self, told: Callable[[], None]) -> None:
        """Call ``told()`` when the plan closes, before its pointers are freed.

        Parameters
        ----------
        told : callable
            Called once, with no arguments.
        """
        self._res.on_free.append(told)

    @property
    def alive(self) -> bool:
        """False once :meth:`close` ran."""
        return not self._res.freed

    def close(self) -> None:
        """Destroy the plan, its descriptors and its workspace now (idempotent)."""
        self._finalizer()
        self.workspace = None
        self._ws_ptr = 0

    # -- call -------------------------------------------------------------------------------------
    def run(self, a_ptr: int, b_ptr: int, d_ptr: int, alpha_ptr: int = 0, c_ptr: int = 0) -> None:
        """Launch ``D = A @ B`` on the current stream (raw device pointers; no checks).

        ``alpha_ptr`` is a device vector of ``m`` floats when the plan has ``alpha_vector``.

        Parameters
        ----------
        a_ptr : int
            The compressed weight ``A``.
        b_ptr : int
            The activations ``B``.
        d_ptr : int
            The output ``D``.
        alpha_ptr : int, default 0
            The ``alpha`` vector, or 0 for a scalar alpha of 1.
        c_ptr : int, default 0
            The ``C`` operand, or 0 for ``d_ptr``.
        """
        self._streams[0] = _stream_ptr(self.device)
        try:
            self._matmul(
                self.h,
                self._plan_ptr,
                alpha_ptr or self._alpha_ptr,
                a_ptr,
                b_ptr,
                self._beta_ptr,
                c_ptr or d_ptr,
                d_ptr,
                self._ws_ptr,
                self._streams_ptr,
                1,
            )
        except Exception as exc:
            if not _refused(exc):
                raise
            raise CusparseltRefused(f"cuSPARSELt refused to run {self}: {exc}") from exc

    def bind(self, a_ptr: int, alpha_ptr: int = 0):
        """``run`` with ``A`` (and ``alpha``) fixed: a function of the ``B`` and ``D`` pointers.

        It launches on the current stream, for a caller that runs the same weight many times (a
        layer's fast path). It raises :class:`CusparseltRefused` where ``run`` would, and
        ``RuntimeError`` once the plan is closed.

        Parameters
        ----------
        a_ptr : int
            The compressed weight ``A``.
        alpha_ptr : int, default 0
            The ``alpha`` vector, or 0 for a scalar alpha of 1.

        Returns
        -------
        callable
            ``launch(b_ptr, d_ptr)``.
        """
        mm, h, plan, ws = self._matmul, self.h, self._plan_ptr, self._ws_ptr
        alpha, beta = alpha_ptr or self._alpha_ptr, self._beta_ptr
        streams, streams_ptr, dev, res = self._streams, self._streams_ptr, self.device, self._res

        def launch(b_ptr: int, d_ptr: int) -> None:
            if res.freed:
                raise RuntimeError(f"{self} was closed; build the plan again")
            streams[0] = _stream_ptr(dev)
            try:
                mm(h, plan, alpha, a_ptr, b_ptr, beta, d_ptr, d_ptr, ws, streams_ptr, 1)
            except Exception as exc:
                if not _refused(exc):
                    raise
                raise CusparseltRefused(f"cuSPARSELt refused to run {self}: {exc}") from exc

        return launch

    def search(self, a_ptr: int, b_ptr: int, d_ptr: int, alpha_ptr: int = 0) -> int:
        """Run ``matmul_search`` (the library times its configs) and return the chosen id.

        Parameters
        ----------
        a_ptr : int
            The compressed weight ``A``.
        b_ptr : int
            The activations ``B``.
        d_ptr : int
            The output ``D``.
        alpha_ptr : int, default 0
            The ``alpha`` vector, or 0 for a scalar alpha of 1.

        Returns
        -------
        int
            The config id chosen.
        """
        L = _bindings()
        self._streams[0] = _stream_ptr(self.device)
        L.matmul_search(
            self.h,
            self._plan_ptr,
            alpha_ptr or self._alpha_ptr,
            a_ptr,
            b_ptr,
            self._beta_ptr,
            d_ptr,
            d_ptr,
            self._ws_ptr,
            self._streams_ptr,
            1,
        )
        v = ctypes.c_int32(-1)
        L.matmul_alg_get_attribute(
            self.h, self._res.alg_sel, L.MatmulAlgAttribute.CONFIG_ID, ctypes.addressof(v), 4
        )
        return int(v.value)

    def max_config_id(self) -> int:
        """Number of algorithm configs cuSPARSELt offers for this problem."""
        L = _bindings()
        v = ctypes.c_int32(0)
        L.matmul_alg_get_attribute(
            self.h, self._res.alg_sel, L.MatmulAlgAttribute.CONFIG_MAX_ID, ctypes.addressof(v), 4
        )
        return int(v.value)

    def __repr__(self) -> str:
        k = self.key
        state = "alive" if self.alive else "freed"
        return (
            f"Plan(m={k.m}, n={k.n}, k={k.k}, {k.dtype}->{k.out_dtype}, alg={k.alg}, "
            f"epilogue={k.epilogue}, bias={k.bias}, {state})"
        )


class PlanCache:
    """An LRU cache of :class:`Plan` objects; evicted plans are destroyed at once.

    Parameters
    ----------
    maxsize : int
        Plans kept; the least recently used one is destroyed beyond that.

    Examples
    --------
    >>> cache = PlanCache(maxsize=64)
    >>> cache.stats()
    {'size': 0, 'hits': 0, 'misses': 0, 'evictions': 0}
    """

    def __init__(self, maxsize: int = 512) -> None:
        self.maxsize = int(maxsize)
        self._plans: OrderedDict = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def get(self, key: PlanKey, bias_ptr: int = 0) -> Plan:
        """The plan for ``key`` (and bias pointer), built on first use.

        Parameters
        ----------
        key : PlanKey
            The plan's problem and settings.
        bias_ptr : int, default 0
            The fused bias's device pointer, or 0 for none.

        Returns
        -------
        Plan
            The plan.
        """
        k = (key, bias_ptr)
        plan = self._plans.get(k)
        if plan is not None:
            self.hits += 1
            self._plans.move_to_end(k)
            return plan
        self.misses += 1
        plan = Plan(key, bias_ptr)
        self._plans[k] = plan
        while len(self._plans) > self.maxsize:
            _, old = self._plans.popitem(last=False)
            old.close()
            self.evictions += 1
        return plan

    def clear(self) -> None:
        """Destroy every cached plan."""
        while self._plans:
            _, p = self._plans.popitem()
            p.close()

    def __len__(self) -> int:
        return len(self._plans)

    def stats(self) -> dict:
        """Size, hits, misses and evictions."""
        return {
            "size": len(self._plans),
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
        }

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"PlanCache(size={s['size']}/{self.maxsize}, hits={s['hits']}, "
            f"misses={s['misses']}, evictions={s['evictions']})"
        )


_DEFAULT_CACHE: PlanCache | None = None


def default_cache() -> PlanCache:
    """The process-wide plan cache used by :class:`~explorer.gpu.SparseLinear`."""
    global _DEFAULT_CACHE
    if _DEFAULT_CACHE is None:
        _DEFAULT_CACHE = PlanCache()
    return _DEFAULT_CACHE


# ---------------------------------------------------------------------------------------------
# checks and compression
# ---------------------------------------------------------------------------------------------
def check_weight(weight: torch.Tensor) -> None:
    """Raise unless ``weight`` is a 2-D CUDA tensor of a cuSPARSELt dtype and shape.

    The message names what is off (type, device, rank, dtype or alignment) and the fix.

    Parameters
    ----------
    weight : torch.Tensor
        The weight to check.
    """
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    if weight.device.type != "cuda":
        raise ValueError(
            f"weight is on {weight.device}; cuSPARSELt needs a CUDA tensor. Hint: weight.cuda()."
        )
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D (out, in), got shape {tuple(weight.shape)}")
    if weight.dtype not in CUSPARSELT_DTYPES:
        raise TypeError(
            f"weight dtype {weight.dtype} is not supported; expected one of "
            f"{sorted(str(d) for d in CUSPARSELT_DTYPES)}"
        )
    mult = sparse_rules.sparse_multiple(weight.dtype)
    out_f, in_f = weight.shape
    if out_f % mult or in_f % mult:
        raise ValueError(
            f"weight shape {tuple(weight.shape)} is off cuSPARSELt's alignment: both dimensions "
            f"must be multiples of {mult} for {weight.dtype}. Hint: keep this layer dense."
        )


class _SparseDesc:
    """A structured descriptor used only for prune-check and compression."""

    def __init__(self, m: int, k: int, dtype: torch.dtype, device: int) -> None:
        L = _bindings()
        self.h = handle(device)
        self.ptr = L.structured_descriptor_init(
            self.h, m, k, k, 16, _CUDA_CODE[dtype], _ORDER_ROW, L.Sparsity.SPARSITY_50_PERCENT
        )
        self._fin = weakref.finalize(self, L.mat_descriptor_destroy, self.ptr)

    def close(self) -> None:
        self._fin()


def check_24(weight: torch.Tensor, _op: int = _OP_N, _raw: bool = False) -> bool:
    """True if the CUDA ``weight[out, in]`` is 2:4 along ``in`` (``sp_mma_prune_check2``).

    Parameters
    ----------
    weight : torch.Tensor
        The CUDA weight, of a cuSPARSELt dtype and shape.
    _op : int
        cuSPARSELt's operation on the weight (default: not transposed).
    _raw : bool, default False
        Return the check's raw int result (0: valid) instead of a bool.

    Examples
    --------
    >>> check_24(torch.zeros(64, 64, dtype=torch.float16, device="cuda"))  # doctest: +GPU
    True
    >>> check_24(torch.ones(64, 64, dtype=torch.float16, device="cuda"))
    False
    """
    check_weight(weight)
    L = _bindings()
    w = weight.contiguous()
    dev = w.device.index or 0
    with torch.cuda.device(dev):
        desc = _SparseDesc(w.shape[0], w.shape[1], w.dtype, dev)
        try:
            # the check writes only when it finds a violation, so start from 0 (= valid)
            valid = torch.zeros(1, dtype=torch.int32, device=w.device)
            L.sp_mma_prune_check2(
                desc.h, desc.ptr, 1, _op, w.data_ptr(), valid.data_ptr(), _stream_ptr(dev)
            )
            if _raw:
                return int(valid.item())
            return int(valid.item()) == 0
        finally:
            desc.close()


def is_24(weight: torch.Tensor) -> bool:
    """True if every group of 4 along the last dimension has at most 2 nonzeros (torch ops).

    Parameters
    ----------
    weight : torch.Tensor
        The tensor to check.

    Returns
    -------
    bool
        False also where the last dimension is not a multiple of 4.

    Examples
    --------
    >>> is_24(torch.tensor([[1.0, 0.0, 2.0, 0.0]]))
    True
    """
    if weight.shape[-1] % 4:
        return False
    return bool(((weight.reshape(-1, 4) != 0).sum(1) <= 2).all())


@dataclass(frozen=True, eq=False)
class CompressedTensor:
    """A weight compressed by cuSPARSELt (opaque buffer) plus its logical shape."""

    data: torch.Tensor
    shape: tuple[int, int]
    dtype: torch.dtype

    def __repr__(self) -> str:
        return (
            f"CompressedTensor(shape={self.shape}, dtype={self.dtype}, "
            f"bytes={self.data.numel()}, device={self.data.device})"
        )


def compress(weight: torch.Tensor, check: bool = True) -> CompressedTensor:
    """Compress a 2:4 CUDA ``weight[out, in]`` with ``sp_mma_compress2``.

    Parameters
    ----------
    weight : torch.Tensor
        CUDA tensor, fp16/bf16/int8/fp8, 2:4 along ``in``.
    check : bool
        Verify the pattern on the GPU first and raise ``ValueError`` if it is not 2:4.

    Examples
    --------
    >>> from explorer import make_mask
    >>> w = torch.randn(256, 512, dtype=torch.half, device="cuda")  # doctest: +GPU
    >>> w = w.masked_fill(~make_mask(w, "2:4"), 0)
    >>> compress(w).shape
    (256, 512)
    """
    check_weight(weight)
    if check and not is_24(weight):
        raise ValueError(
            f"weight of shape {tuple(weight.shape)} is not 2:4 along its input dimension "
            "(cuSPARSELt prune check failed). Hint: prune it first, e.g. with "
            "explorer.masks.make_mask(weight, '2:4')."
        )
    L = _bindings()
    w = weight.contiguous()
    dev = w.device.index or 0
    with torch.cuda.device(dev):
        desc = _SparseDesc(w.shape[0], w.shape[1], w.dtype, dev)
        try:
            size, buf = L.sp_mma_compressed_size2(desc.h, desc.ptr)
            out = torch.empty(int(size), dtype=torch.uint8, device=w.device)
            tmp = torch.empty(max(int(buf), 1), dtype=torch.uint8, device=w.device)
            L.sp_mma_compress2(
                desc.h,
                desc.ptr,
                1,
                _OP_N,
                w.data_ptr(),
                out.data_ptr(),
                tmp.data_ptr(),
                _stream_ptr(dev),
            )
            torch.cuda.current_stream(dev).synchronize()
        finally:
            desc.close()
    return CompressedTensor(out, (int(w.shape[0]), int(w.shape[1])), w.dtype)


# ---------------------------------------------------------------------------------------------
# the one-call matmul
# ---------------------------------------------------------------------------------------------
def _pad_tokens(x: torch.Tensor) -> torch.Tensor:
    t = x.shape[0]
    pad = padded_tokens(t, x.dtype) - t
    if pad == 0:
        return x
    return torch.nn.functional.pad(x, (0, 0, 0, pad))


def matmul(
    cw: CompressedTensor,
    x: torch.Tensor,
    bias: torch.Tensor | None = None,
    epilogue: str = "none",
    alpha: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    alg: int = -1,
    split_k: int = 0,
    cache: PlanCache | None = None,
) -> torch.Tensor:
    """``y = epilogue(alpha * (x @ W^T) + bias)`` for a compressed weight ``W[out, in]``.

    Parameters
    ----------
    cw : CompressedTensor
        From :func:`compress`.
    x : torch.Tensor
        ``[tokens, in]`` CUDA tensor of the weight's dtype (copied if not contiguous; token
        counts off the alignment are zero-padded inside).
    bias : torch.Tensor, optional
        ``[out]`` vector, fused into the kernel.
    epilogue : {"none", "relu", "gelu"}
    alpha : torch.Tensor, optional
        ``[out]`` float32 per-output-channel scale, fused into the kernel.
    out_dtype : torch.dtype, optional
        Defaults to the first entry of ``CUSPARSELT_DTYPES[dtype]``.
    alg : int
        Algorithm config id, or -1 for the library default.
    split_k : int
        Split-K factor, or 0 for the library's heuristic.
    cache : PlanCache, optional
        Where the plan is kept (default: :func:`default_cache`).

    Returns
    -------
    torch.Tensor
        ``[tokens, out]`` in ``out_dtype``.

    Examples
    --------
    >>> from explorer import make_mask
    >>> w = torch.randn(256, 512, dtype=torch.half, device="cuda")  # doctest: +GPU
    >>> w = w.masked_fill(~make_mask(w, "2:4"), 0)
    >>> x = torch.randn(64, 512, dtype=torch.half, device="cuda")
    >>> torch.allclose(matmul(compress(w), x), x @ w.T, rtol=1e-2, atol=1e-1)
    True
    """
    if x.device.type != "cuda":
        raise ValueError(f"x is on {x.device}; expected a CUDA tensor. Hint: x.cuda().")
    if x.dtype != cw.dtype:
        raise TypeError(f"x has dtype {x.dtype} but the weight is {cw.dtype}; cast x first.")
    if x.dim() != 2 or x.shape[1] != cw.shape[1]:
        raise ValueError(f"x must be [tokens, {cw.shape[1]}], got {tuple(x.shape)}")
    out_dtype = out_dtype or CUSPARSELT_DTYPES[cw.dtype][0]
    t = x.shape[0]
    xp = _pad_tokens(x.contiguous())
    n = xp.shape[0]
    dev = x.device.index or 0
    key = PlanKey(
        m=cw.shape[0],
        n=n,
        k=cw.shape[1],
        dtype=str(cw.dtype).split(".")[-1],
        out_dtype=str(out_dtype).split(".")[-1],
        alg=alg,
        split_k=split_k,
        epilogue=epilogue,
        bias=bias is not None,
        alpha_vector=alpha is not None,
        device=dev,
    )
    cache = default_cache() if cache is None else cache
    bias_c = None
    if bias is not None:
        bdt = torch.float32 if out_dtype == torch.int32 else out_dtype
        bias_c = bias.to(device=x.device, dtype=bdt).contiguous()
    plan = cache.get(key, bias_c.data_ptr() if bias_c is not None else 0)
    y = torch.empty(n, cw.shape[0], dtype=out_dtype, device=x.device)
    a_ptr = alpha.data_ptr() if alpha is not None else 0
    plan.run(cw.data.data_ptr(), xp.data_ptr(), y.data_ptr(), a_ptr)
    return y[:t] if n != t else y
