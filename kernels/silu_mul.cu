// SwiGLU's elementwise step, fused: out = silu(gate) * up, computed in float32 and rounded once.
// gate and up are two halves of one fused gate/up projection output. Each thread moves 16 bytes
// (8 values) per load, so rows of cols values must hold a multiple of 8 and be 16-byte aligned.
// The caller describes both layouts with (rows, vcols, vld): element vector (r, c) of gate is
// gate[r * vld + c], of up up[r * vld + c], of the output out[r * vcols + c] (dense rows).
// Conversions use PTX (cvt) so no fp16/bf16 headers are needed; bf16 needs sm_80 or newer.

__device__ __forceinline__ float f16_to_f32(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short f32_to_f16(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ float bf16_to_f32(unsigned short b) {
    return __uint_as_float(((unsigned int)b) << 16);
}
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
    unsigned short b;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return b;
}

// Overlapped launches (overlap.cuh): read gate/up only once the kernel before has finished,
// and let the next overlapped kernel start once every block has begun.
#include "overlap.cuh"

template <bool BF16>
__device__ __forceinline__ void silu_mul_vec(const uint4* __restrict__ gate,
                                             const uint4* __restrict__ up, uint4* __restrict__ out,
                                             long long rows, long long vcols, long long vld) {
    allow_next_launch();
    wait_for_inputs();
    const long long total = rows * vcols;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        const long long r = i / vcols, c = i - r * vcols;
        const uint4 gv = gate[r * vld + c];
        const uint4 uv = up[r * vld + c];
        const unsigned short* g = reinterpret_cast<const unsigned short*>(&gv);
        const unsigned short* u = reinterpret_cast<const unsigned short*>(&uv);
        uint4 ov;
        unsigned short* o = reinterpret_cast<unsigned short*>(&ov);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const float a = BF16 ? bf16_to_f32(g[j]) : f16_to_f32(g[j]);
            const float b = BF16 ? bf16_to_f32(u[j]) : f16_to_f32(u[j]);
            const float v = a / (1.0f + __expf(-a)) * b;
            o[j] = BF16 ? f32_to_bf16(v) : f32_to_f16(v);
        }
        out[i] = ov;
    }
}

extern "C" __global__ void __launch_bounds__(256)
silu_mul_f16(const uint4* gate, const uint4* up, uint4* out, long long rows, long long vcols,
             long long vld) {
    silu_mul_vec<false>(gate, up, out, rows, vcols, vld);
}

extern "C" __global__ void __launch_bounds__(256)
silu_mul_bf16(const uint4* gate, const uint4* up, uint4* out, long long rows, long long vcols,
              long long vld) {
    silu_mul_vec<true>(gate, up, out, rows, vcols, vld);
}
