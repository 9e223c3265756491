"""The GPU kernels a call launches, from ``torch.profiler``: names, summed time and counts.

A step that is slower than its GPU work is paced by the host (or by gaps between launches);
a step whose kernels are equal is equal on the GPU. These helpers give the kernel side of that
comparison. Kernels replayed from a CUDA graph are counted too.

A profiler session can leave the process's later kernel launches slower: time first, profile
last.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["MATMUL_KERNEL", "KernelTimes", "is_matmul", "kernel_times"]

#: Names of matrix-product kernels: cuBLAS (nvJet, CUTLASS-based and its split-K reduction),
#: cuSPARSELt and the explorer's decode kernel.
MATMUL_KERNEL = re.compile(r"gemm|gemv|xmma|nvjet|cutlass|cublas|cusparselt|decode24", re.I)
#: Names that match the above but are not matrix products: attention kernels, and the compiler's
#: fused kernels (named after the ops they fuse, which may include ``sparse_forward``).
_NOT_MATMUL = re.compile(r"^triton_|flash|fmha|attention|sdpa|softmax", re.I)


@dataclass(frozen=True)
class KernelTimes:
    """Kernel time per call, by kernel name.

    Attributes
    ----------
    by_name : dict
        ``{kernel name: (microseconds per call, launches per call)}``.
    """

    by_name: dict

    @property
    def total_ms(self) -> float:
        """Milliseconds of kernel time per call, all kernels."""
        return sum(us for us, _ in self.by_name.values()) / 1000

    @property
    def matmul_ms(self) -> float:
        """Milliseconds per call in matrix-product kernels (:data:`MATMUL_KERNEL`)."""
        return sum(us for name, (us, _) in self.by_name.items() if is_matmul(name)) / 1000

    @property
    def launches(self) -> float:
        """Kernels per call."""
        return sum(n for _, n in self.by_name.values())

    def top(self, k: int = 10) -> list[tuple[str, float, float]]:
        """The kernels with the most time, most first.

        Parameters
        ----------
        k : int, default 10
            How many.

        Returns
        -------
        list of tuple
            ``(name, microseconds per call, launches per call)``.
        """
        rows = sorted(self.by_name.items(), key=lambda kv: -kv[1][0])[:k]
        return [(name, us, n) for name, (us, n) in rows]

    def __repr__(self) -> str:
        return (
            f"KernelTimes({self.total_ms:.3f} ms in {self.launches:.0f} kernels a call, "
            f"{self.matmul_ms:.3f} ms in matrix products)"
        )


def is_matmul(name: str) -> bool:
    """Whether kernel ``name`` is a matrix product (see :data:`MATMUL_KERNEL`).

    Parameters
    ----------
    name : str
        A kernel's name as the profiler reports it.

    Returns
    -------
    bool
        True for cuBLAS, cuSPARSELt and the explorer's decode kernels.

    Examples
    --------
    >>> is_matmul("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64"), is_matmul("fmha_fwd")
    (True, False)
    """
    return bool(MATMUL_KERNEL.search(name)) and not _NOT_MATMUL.search(name)


def kernel_times(fn: Callable[[], object], calls: int = 1) -> KernelTimes:
    """Profile ``calls`` calls of ``fn`` and sum its GPU kernels' time by name, per call.

    Parameters
    ----------
    fn : callable
        The call, without arguments; it runs on the current CUDA device.
    calls : int, default 1
        Calls profiled.

    Returns
    -------
    KernelTimes
        Per-call kernel time and launches, by kernel name.
    """
    from torch.profiler import ProfilerActivity, profile

    if calls < 1:
        raise ValueError(f"calls={calls}: expected at least one call to profile")
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    sums: dict = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us, n = sums.get(e.name, (0.0, 0))
        sums[e.name] = (us + e.time_range.elapsed_us(), n + 1)
    return KernelTimes({name: (us / calls, n / calls) for name, (us, n) in sums.items()})
