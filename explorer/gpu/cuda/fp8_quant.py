"""Per-token fp8 e4m3 quantization of activations as one CUDA kernel (``kernels/quant_fp8.cu``).

:func:`quantize_rows_fp8` computes exactly what the plain torch steps of
:func:`explorer.gpu.modules.fp8.quantize_activations` compute on a GPU (the same scales and the
same fp8 bits: the amax times torch's float32 reciprocal of 448, a correctly rounded division,
round to nearest even), in one launch that reads each row
twice (the second time from L2) and writes the fp8 values and one float32 scale per row. It needs
no compiler at run time, so it runs the same eagerly, inside a CUDA-graph capture and inside an op
a compiled model calls, and its launch costs a few microseconds of host time
(:func:`explorer.gpu.cuda.kernels.launch`).

It takes float16, bfloat16 and float32 rows of a multiple of 8 values, each row 16-byte aligned,
on GPUs of compute capability 8.9 or newer; :func:`kernel_takes` says whether an input qualifies,
and the caller takes the plain steps for anything else.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import torch

from explorer.gpu.cuda.kernels import launch

__all__ = ["KERNELS", "kernel_takes", "quantize_rows_fp8"]

#: The kernel of each activation dtype.
KERNELS = {
    torch.float16: "quant_fp8_f16",
    torch.bfloat16: "quant_fp8_bf16",
    torch.float32: "quant_fp8_f32",
}
_THREADS = 256
_ALIGN = 16  # bytes: each thread loads 8 values at once


def kernel_takes(
    dtype: torch.dtype, shape: tuple, strides: tuple, data_ptr: int, capability: tuple
) -> bool:
    """Whether the kernel takes a 2-D input described by these facts (pure: no GPU needed).

    Parameters
    ----------
    dtype : torch.dtype
        The input's dtype.
    shape, strides : tuple of int
        Its 2-D shape and strides (in elements).
    data_ptr : int
        Its address.
    capability : tuple of int
        The GPU's compute capability.

    Returns
    -------
    bool
        True where the kernel computes the quantization; False sends the caller to the plain
        torch steps.

    Examples
    --------
    >>> kernel_takes(torch.bfloat16, (4096, 4096), (4096, 1), 0, (9, 0))
    True
    >>> kernel_takes(torch.bfloat16, (7, 1000), (1000, 1), 0, (9, 0))  # 1000 = 8 * 125
    True
    >>> kernel_takes(torch.bfloat16, (7, 1004), (1004, 1), 0, (9, 0))  # not a multiple of 8
    False
    >>> kernel_takes(torch.bfloat16, (64, 512), (1, 64), 0, (9, 0))  # a transposed view
    False
    >>> kernel_takes(torch.bfloat16, (4, 512), (512, 1), 0, (8, 0))  # no fp8 conversion
    False
    """
    if dtype not in KERNELS or len(shape) != 2 or tuple(capability) < (8, 9):
        return False
    rows, cols = shape
    itemsize = dtype.itemsize
    row_bytes = strides[0] * itemsize if rows > 1 else cols * itemsize
    return (
        rows > 0
        and cols > 0
        and cols % 8 == 0
        and strides[1] == 1
        and data_ptr % _ALIGN == 0
        and row_bytes % _ALIGN == 0
    )


@cache
def _capability(device: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)


def quantize_rows_fp8(x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(q, scale)`` of the 2-D CUDA input ``x2`` from the kernel, or None where it does not apply.

    Parameters
    ----------
    x2 : torch.Tensor
        ``[rows, cols]`` activations on a CUDA device.

    Returns
    -------
    (torch.Tensor, torch.Tensor) or None
        ``q`` (float8_e4m3fn, ``[rows, cols]``, row-major) and ``scale`` (float32, ``[rows]``);
        None where :func:`kernel_takes` says no (the caller then takes the plain steps).

    Examples
    --------
    >>> x = torch.tensor([[1.0, -0.5] * 4, [0.0] * 8], device="cuda")  # doctest: +GPU
    >>> q, s = quantize_rows_fp8(x)  # doctest: +GPU
    >>> q.float()[:, :2].tolist(), (s * 448).tolist()  # doctest: +GPU
    ([[448.0, -224.0], [0.0, 0.0]], [1.0, 448.0])
    """
    if not x2.is_cuda:
        return None
    dev = x2.device.index if x2.device.index is not None else torch.cuda.current_device()
    if not kernel_takes(x2.dtype, tuple(x2.shape), x2.stride(), x2.data_ptr(), _capability(dev)):
        return None
    rows, cols = x2.shape
    q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn, device=x2.device)
    scale = torch.empty(rows, dtype=torch.float32, device=x2.device)
    ld_bytes = (x2.stride(0) if rows > 1 else cols) * x2.element_size()
    args = (
        np.uint64(x2.data_ptr()),
        np.uint64(q.data_ptr()),
        np.uint64(scale.data_ptr()),
        np.int64(rows),
        np.int64(cols // 8),
        np.int64(ld_bytes),
    )
    launch("quant_fp8", KERNELS[x2.dtype], x2, min(rows, 2**31 - 1), args, block=(_THREADS,))
    return q, scale
