// Y = X W^T (+ bias) for a 2:4 weight W[N, K] stored in the explorer's compressed layout and a
// few activation rows X[T, K] (T <= 64): the decode step of generation, where every weight is
// read once per step and the time is the time to read it.
//
// Storage (the layout explorer.compression.compress documents and emulates on the CPU):
//   values   [N, K/2]  the two kept entries of every group of 4, in position order
//                      (bfloat16 / float16, or int8 with a float32 scale per output row)
//   metadata [N, K/8]  one nibble per group, i0 | i1 << 2 (i0 < i1), even group in the low nibble
// so a 16-bit weight moves 9/16 of its dense bytes and an int8 one 5/16.
//
// Method. Each warp computes a 16-row tile of W against all T tokens with the tensor cores'
// dense mma.m16n8k16 (fp32 accumulation), after expanding each kept pair back to its group of
// four in registers. The order of K inside one mma is free as long as A and B agree, so lane
// (g, c) (g = lane / 4, c = lane % 4) feeds the four K slots it owns in the A and B fragments
// with the four columns of one whole group: its A registers are built from one group's two
// values and nibble, its B registers from four contiguous X values, and within a 64-column
// chunk lane c owns groups 4c..4c+3, which are 16 contiguous bytes of values and 2 bytes of
// metadata in a row. Every byte of W is loaded once, in 16-byte (int8: 8-byte) pieces. The
// wide int8 kernels (K % 32 == 0, up to 16 tokens) take 128-column chunks instead, lane c
// owning groups 8c..8c+7: 16 bytes of int8 values and 4 of metadata a row per load.
// The warps of a block split K and add their partial tiles through shared memory; a block
// covers 16 rows, so the grid is ceil(N / 16) blocks of WARPS warps.
//
// Build options (benchmarks/decode_kernel.py --builds times other settings side by side):
//   DECODE24_UNROLL      main-loop unroll (default 2)
//   DECODE24_CONTIGUOUS  1: warp w takes chunks w*P .. w*P+P-1 (P = ceil(chunks / warps)), so
//                        the positions' 32-byte sectors are read by one warp; 0 (default):
//                        chunks w, w + warps, ...
//   DECODE24_LOAD        how weight bytes are loaded: 0 __ldg; 1 (default) non-coherent with no
//                        L1 allocation and a 256-byte L2 prefetch (2-5% faster than __ldg on an
//                        H200 at 1-16 tokens); 2 with the L2 prefetch only
//
// Requirements (checked by the caller): K % 16 == 0, X rows 16-byte aligned with a row stride
// that is a multiple of 8 elements, bf16/f16 tensor cores (sm_80 or newer).

typedef unsigned short u16;
typedef unsigned int u32;

#ifndef DECODE24_UNROLL
#define DECODE24_UNROLL 2
#endif
#ifndef DECODE24_CONTIGUOUS
#define DECODE24_CONTIGUOUS 0
#endif
#ifndef DECODE24_LOAD
#define DECODE24_LOAD 1
#endif
#define DECODE24_PRAGMA(x) _Pragma(#x)
#define DECODE24_UNROLL_BY(n) DECODE24_PRAGMA(unroll n)

#if DECODE24_LOAD == 1
#define DECODE24_HINT ".L1::no_allocate.L2::256B"
#elif DECODE24_LOAD == 2
#define DECODE24_HINT ".L2::256B"
#endif

// Weight loads (values and positions): read once per call, so they may skip L1. Not volatile:
// the compiler may move them ahead of the previous chunk's mma, as it does __ldg.
__device__ __forceinline__ uint4 load_w(const uint4* p) {
#if DECODE24_LOAD == 0
    return __ldg(p);
#else
    uint4 v;
    asm("ld.global.nc" DECODE24_HINT ".v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
#endif
}

__device__ __forceinline__ uint2 load_w(const uint2* p) {
#if DECODE24_LOAD == 0
    return __ldg(p);
#else
    uint2 v;
    asm("ld.global.nc" DECODE24_HINT ".v2.u32 {%0,%1}, [%2];"
        : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
#endif
}

__device__ __forceinline__ u32 load_w(const u32* p) {
#if DECODE24_LOAD == 0
    return __ldg(p);
#else
    u32 v;
    asm("ld.global.nc" DECODE24_HINT ".u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
#endif
}

__device__ __forceinline__ u32 load_w(const u16* p) {
#if DECODE24_LOAD == 0
    return __ldg(p);
#else
    u16 v;
    asm("ld.global.nc" DECODE24_HINT ".u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
#endif
}


__device__ __forceinline__ u32 prmt(u32 a, u32 sel) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(0u), "r"(sel));
    return d;
}

template <bool BF16>
__device__ __forceinline__ void mma16816(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                         u32 b1) {
    if (BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
}

// Byte selectors that place a kept pair (v0 in bytes 0-1, v1 in bytes 2-3 of a word) into the
// four slots of its group: low word = slots 0,1, high word = slots 2,3; byte 4 (0x44) is zero.
// The nibble is i0 | i1 << 2 with i0 < i1, as compress writes it.
__device__ __forceinline__ u32 selector(u32 nib) {
    // slot s of the group is byte field s (8 bits: two prmt nibbles) of the selector pair:
    // 0x10 takes v0, 0x32 takes v1, 0x44 gives zero. Start from all zeros, then put v0 at
    // slot i0 and v1 at slot i1 (0x44 ^ 0x54 = 0x10, 0x44 ^ 0x76 = 0x32).
    const u32 i0 = nib & 3u, i1 = nib >> 2;
    return 0x44444444u ^ (0x54u << (8 * i0)) ^ (0x76u << (8 * i1));
}

// Two int8 values (bytes 0 and 1 of q) as a pair of 16-bit floats, exactly.
template <bool BF16>
__device__ __forceinline__ u32 int8_pair(u32 q) {
    const float f0 = __int_as_float(0x4B000000 | ((q ^ 0x80u) & 0xFFu)) - 8388736.0f;
    const float f1 = __int_as_float(0x4B000000 | (((q >> 8) ^ 0x80u) & 0xFFu)) - 8388736.0f;
    u32 d;
    if (BF16) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(f1), "f"(f0));
    } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(f1), "f"(f0));
    }
    return d;
}

__device__ __forceinline__ float to_f32(u16 h, bool bf16) {
    if (bf16) return __uint_as_float(((u32)h) << 16);
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 from_f32(float f, bool bf16) {
    u16 h;
    if (bf16) {
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    } else {
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    }
    return h;
}

// One group's A registers: lo = slots 0,1 and hi = slots 2,3 of a row, from its kept pair.
__device__ __forceinline__ void expand(u32 pair, u32 nib, u32& lo, u32& hi) {
    const u32 sel = selector(nib);
    lo = prmt(pair, sel & 0xFFFFu);
    hi = prmt(pair, sel >> 16);
}

template <bool BF16, bool INT8, bool WIDE, int NT>
__device__ __forceinline__ void decode24(const void* __restrict__ values_,
                                         const unsigned char* __restrict__ meta,
                                         const float* __restrict__ scale,
                                         const u16* __restrict__ x, const u16* __restrict__ bias,
                                         u16* __restrict__ y, int n_rows, int k, int tokens,
                                         long long ldx, long long ldy) {
    extern __shared__ float partial[];  // [warps][16][8] per token tile
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int g = lane >> 2, c = lane & 3;
    const int row0 = blockIdx.x * 16;
    const int r0 = row0 + g, r1 = r0 + 8;
    const bool ok0 = r0 < n_rows, ok1 = r1 < n_rows;
    const long long half_k = k >> 1, meta_k = k >> 3;

    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

    // 1. main loop: chunks of CW columns (64; 128 for WIDE int8), split over the block's warps;
    // lane c owns GL = CW / 16 consecutive groups of a chunk, one per mma
    constexpr int CW = WIDE ? 128 : 64, GL = CW / 16;
    const int chunks = k / CW;
#if DECODE24_CONTIGUOUS
    const int per = (chunks + warps - 1) / warps, first = warp * per;
    const int last = min(chunks, first + per);
    DECODE24_UNROLL_BY(DECODE24_UNROLL)
    for (int ch = first; ch < last; ++ch) {
#else
    DECODE24_UNROLL_BY(DECODE24_UNROLL)
    for (int ch = warp; ch < chunks; ch += warps) {
#endif
        u32 w0[GL], w1[GL];  // kept pairs of groups GL*c .. GL*c + GL-1 of rows r0, r1
        if (INT8 && WIDE) {  // 16 int8 values (8 groups) a row: one 16-byte load
            const unsigned char* v = reinterpret_cast<const unsigned char*>(values_);
            uint4 q0 = make_uint4(0, 0, 0, 0), q1 = make_uint4(0, 0, 0, 0);
            if (ok0) q0 = load_w(reinterpret_cast<const uint4*>(v + r0 * half_k + ch * 64 + c * 16));
            if (ok1) q1 = load_w(reinterpret_cast<const uint4*>(v + r1 * half_k + ch * 64 + c * 16));
            const u32 a[4] = {q0.x, q0.y, q0.z, q0.w}, b[4] = {q1.x, q1.y, q1.z, q1.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                w0[2 * i] = int8_pair<BF16>(a[i]);
                w0[2 * i + 1] = int8_pair<BF16>(a[i] >> 16);
                w1[2 * i] = int8_pair<BF16>(b[i]);
                w1[2 * i + 1] = int8_pair<BF16>(b[i] >> 16);
            }
        } else if (INT8) {
            const unsigned char* v = reinterpret_cast<const unsigned char*>(values_);
            uint2 q0 = make_uint2(0, 0), q1 = make_uint2(0, 0);
            if (ok0) q0 = load_w(reinterpret_cast<const uint2*>(v + r0 * half_k + ch * 32 + c * 8));
            if (ok1) q1 = load_w(reinterpret_cast<const uint2*>(v + r1 * half_k + ch * 32 + c * 8));
            w0[0] = int8_pair<BF16>(q0.x);
            w0[1] = int8_pair<BF16>(q0.x >> 16);
            w0[2] = int8_pair<BF16>(q0.y);
            w0[3] = int8_pair<BF16>(q0.y >> 16);
            w1[0] = int8_pair<BF16>(q1.x);
            w1[1] = int8_pair<BF16>(q1.x >> 16);
            w1[2] = int8_pair<BF16>(q1.y);
            w1[3] = int8_pair<BF16>(q1.y >> 16);
        } else {
            const u16* v = reinterpret_cast<const u16*>(values_);
            uint4 p0 = make_uint4(0, 0, 0, 0), p1 = make_uint4(0, 0, 0, 0);
            if (ok0) p0 = load_w(reinterpret_cast<const uint4*>(v + r0 * half_k + ch * 32 + c * 8));
            if (ok1) p1 = load_w(reinterpret_cast<const uint4*>(v + r1 * half_k + ch * 32 + c * 8));
            w0[0] = p0.x; w0[1] = p0.y; w0[2] = p0.z; w0[3] = p0.w;
            w1[0] = p1.x; w1[1] = p1.y; w1[2] = p1.z; w1[3] = p1.w;
        }
        u32 m0 = 0, m1 = 0;  // the lane's GL nibbles of each row
        if (WIDE) {
            if (ok0) m0 = load_w(reinterpret_cast<const u32*>(meta + r0 * meta_k + ch * 16 + c * 4));
            if (ok1) m1 = load_w(reinterpret_cast<const u32*>(meta + r1 * meta_k + ch * 16 + c * 4));
        } else {
            if (ok0) m0 = load_w(reinterpret_cast<const u16*>(meta + r0 * meta_k + ch * 8 + c * 2));
            if (ok1) m1 = load_w(reinterpret_cast<const u16*>(meta + r1 * meta_k + ch * 8 + c * 2));
        }
        // B: token g + 8j, columns of the lane's groups (4 * GL contiguous values, 16-byte loads)
        uint4 xb[NT][GL / 2];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int t = g + 8 * j;
#pragma unroll
            for (int h = 0; h < GL / 2; ++h) {
                if (t < tokens) {
                    xb[j][h] = __ldg(
                        reinterpret_cast<const uint4*>(x + t * ldx + ch * CW + c * 4 * GL) + h);
                } else {
                    xb[j][h] = make_uint4(0, 0, 0, 0);
                }
            }
        }
#pragma unroll
        for (int s = 0; s < GL; ++s) {  // 2. one mma per group slot s (16 K columns)
            u32 a0, a1, a2, a3;
            expand(w0[s], (m0 >> (4 * s)) & 15u, a0, a2);
            expand(w1[s], (m1 >> (4 * s)) & 15u, a1, a3);
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const u32* xw = reinterpret_cast<const u32*>(&xb[j][0]);
                mma16816<BF16>(acc[j], a0, a1, a2, a3, xw[2 * s], xw[2 * s + 1]);
            }
        }
    }
    // 3. tail: the last (k % CW) / 16 tiles of 16 columns, lane c owning group c of the tile
    const int tail0 = chunks * CW, tiles = (k - tail0) >> 4;
    for (int tt = warp; tt < tiles; tt += warps) {
        const int col = tail0 + tt * 16, grp = (col >> 2) + c;
        u32 p0 = 0, p1 = 0, n0 = 0, n1 = 0;
        if (INT8) {
            const unsigned char* v = reinterpret_cast<const unsigned char*>(values_);
            if (ok0) p0 = int8_pair<BF16>(*reinterpret_cast<const u16*>(v + r0 * half_k + grp * 2));
            else p0 = 0;
            if (ok1) p1 = int8_pair<BF16>(*reinterpret_cast<const u16*>(v + r1 * half_k + grp * 2));
            else p1 = 0;
        } else {
            const u16* v = reinterpret_cast<const u16*>(values_);
            if (ok0) p0 = *reinterpret_cast<const u32*>(v + r0 * half_k + grp * 2);
            if (ok1) p1 = *reinterpret_cast<const u32*>(v + r1 * half_k + grp * 2);
        }
        if (ok0) n0 = (meta[r0 * meta_k + (grp >> 1)] >> (4 * (grp & 1))) & 15u;
        if (ok1) n1 = (meta[r1 * meta_k + (grp >> 1)] >> (4 * (grp & 1))) & 15u;
        u32 a0, a1, a2, a3;
        expand(p0, n0, a0, a2);
        expand(p1, n1, a1, a3);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int t = g + 8 * j;
            uint2 xv = make_uint2(0, 0);
            if (t < tokens) xv = *reinterpret_cast<const uint2*>(x + t * ldx + col + c * 4);
            mma16816<BF16>(acc[j], a0, a1, a2, a3, xv.x, xv.y);
        }
    }
    // 4. add the warps' partial tiles, one token tile at a time, and write Y[token, row]
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        float* mine = partial + warp * 128;  // [16 rows][8 tokens]
        mine[g * 8 + 2 * c] = acc[j][0];
        mine[g * 8 + 2 * c + 1] = acc[j][1];
        mine[(g + 8) * 8 + 2 * c] = acc[j][2];
        mine[(g + 8) * 8 + 2 * c + 1] = acc[j][3];
        __syncthreads();
        for (int o = threadIdx.x; o < 128; o += blockDim.x) {
            const int r = o & 15, tk = o >> 4;  // consecutive threads: consecutive rows
            const int row = row0 + r, token = 8 * j + tk;
            if (row < n_rows && token < tokens) {
                float sum = 0.0f;
                for (int w = 0; w < warps; ++w) sum += partial[w * 128 + r * 8 + tk];
                if (INT8) sum *= scale[row];
                if (bias) sum += to_f32(bias[row], BF16);
                y[token * ldy + row] = from_f32(sum, BF16);
            }
        }
        __syncthreads();
    }
}

// Fewer token tiles leave registers for more warps per block (small N needs them to fill the
// GPU); 32 and 64 tokens hold 16 and 32 accumulators and 32 and 64 registers of X per lane.
#define DECODE_KERNEL(NAME, BF16, INT8, WIDE, NT, THREADS)                                     \
    extern "C" __global__ void __launch_bounds__(THREADS)                                      \
        NAME(const void* values, const unsigned char* meta, const float* scale, const u16* x,  \
             const u16* bias, u16* y, int n_rows, int k, int tokens, long long ldx,            \
             long long ldy) {                                                                   \
        decode24<BF16, INT8, WIDE, NT>(values, meta, scale, x, bias, y, n_rows, k, tokens,     \
                                       ldx, ldy);                                               \
    }

#define DECODE_FAMILY(PREFIX, BF16, INT8)                  \
    DECODE_KERNEL(PREFIX##_t8, BF16, INT8, false, 1, 1024)  \
    DECODE_KERNEL(PREFIX##_t16, BF16, INT8, false, 2, 1024) \
    DECODE_KERNEL(PREFIX##_t32, BF16, INT8, false, 4, 512)  \
    DECODE_KERNEL(PREFIX##_t64, BF16, INT8, false, 8, 256)

// int8 values with 128-column chunks (a lane loads 16 bytes of values and 4 of metadata a row
// per chunk, twice the 64-column chunk's 8 and 2): K % 32 == 0, up to 16 tokens
#define DECODE_WIDE_FAMILY(PREFIX, BF16)                  \
    DECODE_KERNEL(PREFIX##_t8, BF16, true, true, 1, 1024) \
    DECODE_KERNEL(PREFIX##_t16, BF16, true, true, 2, 1024)

DECODE_FAMILY(decode24_bf16, true, false)
DECODE_FAMILY(decode24_f16, false, false)
DECODE_FAMILY(decode24_bf16_int8, true, true)
DECODE_FAMILY(decode24_f16_int8, false, true)
DECODE_WIDE_FAMILY(decode24_bf16_int8w, true)
DECODE_WIDE_FAMILY(decode24_f16_int8w, false)
