"""Kernel times by name: matrix products told from the rest, per-call sums, bad call counts."""

from __future__ import annotations

import pytest

from explorer.bench.kernel_profile import KernelTimes, is_matmul, kernel_times


@pytest.mark.parametrize(
    "name",
    [
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1",
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn>",
        "sm90_xmma_sparse_gemm_bf16bf16_bf16f32_f32_tn_n",
        "decode24_bf16",
        "void gemv2T_kernel_val<int, int, __nv_bfloat16, float, float, float, 128, 16, 4>",
        "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT",
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>",
        "decode24_bf16_t8",
    ],
)
def test_products_are_matrix_products(name):
    assert is_matmul(name)


@pytest.mark.parametrize(
    "name",
    [
        "void at::native::elementwise_kernel<128, 2, ...>",
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80",
        "void at::native::reduce_kernel<512, 1, ...>",
        "silu_mul_bf16",
        "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_sparse_forward_14",
        "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128x128",
        "Memcpy HtoD (Pageable -> Device)",
    ],
)
def test_other_kernels_are_not(name):
    assert not is_matmul(name)


def test_sums_split_products_from_the_rest():
    k = KernelTimes({"sm90_xmma_gemm_x": (300.0, 2.0), "elementwise_kernel": (100.0, 5.0)})
    assert k.total_ms == pytest.approx(0.4)
    assert k.matmul_ms == pytest.approx(0.3)
    assert k.launches == 7
    assert k.top(1) == [("sm90_xmma_gemm_x", 300.0, 2.0)]
    assert "0.400 ms in 7 kernels" in repr(k)


def test_no_calls_is_refused_with_the_value():
    with pytest.raises(ValueError, match="calls=0"):
        kernel_times(lambda: None, calls=0)
