// Per-token fp8 e4m3 quantization of activations, one pass per row: scale = max|row| / 448
// (1 where that is not positive: an all-zero row, an amax that underflows, a NaN), and
// q = fp8(x / scale), saturated to +-448. The scale is amax times the float32 reciprocal of 448
// (what torch computes for a CUDA tensor divided by a number), the division by it is IEEE
// (correctly rounded) and the conversion rounds to nearest even, so q and scale are bit for bit
// those of the plain torch steps on the GPU (explorer.gpu.modules.fp8): NaN stays NaN, an
// infinity saturates.
//
// One block per row (grid-stride over rows). Each thread moves 8 values per load (16 bytes of a
// 16-bit row, 32 of a float32 one), so a row holds a multiple of 8 values and starts 16-byte
// aligned; ld_bytes is the distance between rows. The row is read twice (amax, then the values);
// the second read comes from L2. The fp8 conversion (cvt ... e4m3x2) needs sm_89 or newer.

__device__ __forceinline__ float f16_to_f32(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ float bf16_to_f32(unsigned short b) {
    return __uint_as_float(((unsigned int)b) << 16);
}

// max that keeps a NaN (torch's amax propagates it)
__device__ __forceinline__ float nan_max(float a, float b) {
    return (a != a || b != b) ? __int_as_float(0x7fc00000) : fmaxf(a, b);
}

// KIND: 0 float16, 1 bfloat16, 2 float32
template <int KIND>
__device__ __forceinline__ void load8(const char* row, long long c, float* f) {
    if (KIND == 2) {
        const float4* p = reinterpret_cast<const float4*>(row) + 2 * c;
        const float4 a = p[0], b = p[1];
        f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
        f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
    } else {
        const uint4 v = reinterpret_cast<const uint4*>(row)[c];
        const unsigned short* h = reinterpret_cast<const unsigned short*>(&v);
#pragma unroll
        for (int j = 0; j < 8; ++j) f[j] = KIND == 1 ? bf16_to_f32(h[j]) : f16_to_f32(h[j]);
    }
}

// two floats to two e4m3 bytes, lo in the low byte (memory order)
__device__ __forceinline__ unsigned int e4m3x2(float lo, float hi) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

template <int KIND>
__device__ __forceinline__ void quant_rows(const char* __restrict__ x, uint2* __restrict__ q,
                                           float* __restrict__ scale, long long rows,
                                           long long c8, long long ld_bytes) {
    __shared__ float part[33];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const char* row = x + r * ld_bytes;
        // 1. max |x| over the row: per thread, per warp, per block
        float m = 0.0f;
        for (long long c = threadIdx.x; c < c8; c += blockDim.x) {
            float f[8];
            load8<KIND>(row, c, f);
#pragma unroll
            for (int j = 0; j < 8; ++j) m = nan_max(m, fabsf(f[j]));
        }
#pragma unroll
        for (int o = 16; o; o >>= 1) m = nan_max(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0) part[warp] = m;
        __syncthreads();
        if (warp == 0) {
            float v = lane < warps ? part[lane] : 0.0f;
#pragma unroll
            for (int o = 16; o; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
            if (lane == 0) part[32] = v;
        }
        __syncthreads();
        // 2. the scale, as torch computes amax / 448 on a GPU (a tensor divided by a number is a
        //    product with its float32 reciprocal there), 1 where not positive
        float s = part[32] * (1.0f / 448.0f);
        if (!(s > 0.0f)) s = 1.0f;
        if (threadIdx.x == 0) scale[r] = s;
        // 3. the values: a correctly rounded division, then round to nearest even, saturated
        for (long long c = threadIdx.x; c < c8; c += blockDim.x) {
            float f[8];
            load8<KIND>(row, c, f);
            uint2 out;
            out.x = e4m3x2(__fdiv_rn(f[0], s), __fdiv_rn(f[1], s)) |
                    (e4m3x2(__fdiv_rn(f[2], s), __fdiv_rn(f[3], s)) << 16);
            out.y = e4m3x2(__fdiv_rn(f[4], s), __fdiv_rn(f[5], s)) |
                    (e4m3x2(__fdiv_rn(f[6], s), __fdiv_rn(f[7], s)) << 16);
            q[r * c8 + c] = out;
        }
        __syncthreads();  // part[] is reused by the next row
    }
}

extern "C" __global__ void __launch_bounds__(256)
quant_fp8_f16(const char* x, uint2* q, float* scale, long long rows, long long c8,
              long long ld_bytes) {
    quant_rows<0>(x, q, scale, rows, c8, ld_bytes);
}

extern "C" __global__ void __launch_bounds__(256)
quant_fp8_bf16(const char* x, uint2* q, float* scale, long long rows, long long c8,
               long long ld_bytes) {
    quant_rows<1>(x, q, scale, rows, c8, ld_bytes);
}

extern "C" __global__ void __launch_bounds__(256)
quant_fp8_f32(const char* x, uint2* q, float* scale, long long rows, long long c8,
              long long ld_bytes) {
    quant_rows<2>(x, q, scale, rows, c8, ld_bytes);
}
