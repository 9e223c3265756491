// Y = X W^T (+ bias) for a 2:4 weight W[N, K] whose kept values are group-wise int4 codes, and a
// few activation rows X[T, K] (T <= 64, bfloat16 or float16): the decode step of generation,
// where the time is the time to read the weight.
//
// Storage. The kernel reads an explorer.lowbit.Int4Weight (G = the group size: a multiple of
// 128, or 64 or 32)
//   codes    [N, K/4]  uint8: byte j of a row holds the two kept values of 2:4 group j (columns
//                      4j..4j+3), the first in the low nibble; a nibble is a code in [-7, 7] in
//                      two's complement
//   metadata [N, K/8]  uint8: one nibble per 2:4 group, i0 | i1 << 2 (i0 < i1), even group low
//   scales   [N, K/G]  float32: weight = code * scales[row, column / G]
// rearranged once into tiles (explorer.gpu.cuda.decode_int4.tile_coded_weight): tile (b, i) holds
// what rows 16b..16b+15 need for columns 128i..128i+127, 832 contiguous bytes,
//   bytes   0..511  codes     [16 rows][32 B]: bytes 32i..32i+31 of each row's codes
//   bytes 512..767  metadata  [16 rows][16 B]: bytes 16i..16i+15 of each row's metadata
//   bytes 768..831  scales    [16 rows] float32: each row's scale of the group holding column 128i
// with the tiles of a block of rows in column order: tiles[(b * (K / 128) + i) * 832]. Rows past N
// (to a multiple of 16) are zero codes with scale 0 and ordered metadata. So a warp's chunk is one
// contiguous run of 832 bytes and a block reads its rows' weight front to back, where the lowbit
// layout puts the pieces of a chunk in 48 places 64 to 1024 bytes apart; the scales take
// 32 / 128 bits a weight whatever G is (G a multiple of 128), 3.25 bits a weight in all, about a
// fifth of a 16-bit dense one.
//
// Groups of 64 or 32 columns (a joint prune-and-quantize's usual sizes) hold S = 128 / G scales
// per row and chunk: the scales part of a tile is [16 rows][S] float32 (row r's scales of columns
// 128i + G q, q < S, at byte 768 + 4 (S r + q)), so a tile is 768 + 64 S bytes (896 or 1024 for
// int4) and the weight 3.5 or 4 bits a weight. Those tiles are read by a build of this file with
// -DCHUNK_SCALES=S (explorer.gpu.cuda.coded_launch), whose kernels carry the same names.

// Codes to 16-bit floats, exactly. A nibble n placed in the mantissa of a "magic" float gives
// an exact integer: bf16 0x4300 | (n ^ 8) = 136 + code, f16 0x6400 | (n ^ 8) = 1032 + code, so
// one AND/XOR (lop3) and one packed FMA (x * 1 - 136, or - 1032) turn two nibbles into a pair
// of 16-bit values that equal the codes. Products of codes and activations are then exact in
// the tensor cores' fp32 accumulation; the group scale is applied in fp32 (below).
//
// Method. A block covers 16 rows of W; its warps split K into 128-column chunks (chunk i to
// warp i % warps, D chunks in flight per warp). Each warp multiplies its chunk's 16 x 128
// piece of W with all T tokens on the tensor cores into a per-chunk fp32 accumulator, then adds
// that into the running one times the row's scale of that chunk (one scale per row and chunk;
// with S scales a chunk, the same per G columns: the sparse feeds' mma m covers columns
// 32m..32m+31, so a group of G columns is G / 32 whole mmas), so scales are applied in fp32,
// once per group. The warps add their partial
// tiles through shared memory and one pass writes Y (bias added in fp32, rounded once).
//
// Three ways to feed the tensor cores with a chunk, chosen by the kernel's name:
//
// * "sp" (the default up to 8 tokens on grids of fewer than 4 blocks per SM, and at 1 token on
//   larger ones): the sparse tensor-core instruction mma.sp (m16n8k32, ordered metadata),
//   which takes the kept pairs and the 2-bit positions as they are stored: no expansion to
//   four slots, and half the instructions of a dense product. Mma m of a chunk covers its
//   columns 32m..32m+31 (groups 8m..8m+7) in natural order, so the metadata operand of lane
//   (g, c) is one 16-bit half of a metadata word of rows g and g + 8 (lane c = 0 for groups
//   8m..8m+3, c = 1 for 8m+4..8m+7), and lane c's kept pairs are byte c of each code word
//   (groups 8m + c and 8m + c + 4). Each lane loads the 32 code bytes and 16 metadata bytes
//   of its two rows per chunk (16-byte loads; the four lanes of a row read the same bytes, so
//   memory moves them once) and 4 bytes of X per mma, token and k-step.
//   A chunk in flight holds 26 registers a lane, which caps the bytes in flight per SM.
// * "spa" (the default from 2 to 8 tokens on larger grids): "sp" with the weight staged
//   through shared memory.
//   Each warp keeps D chunks in flight in its own stages (832 bytes: one tile), filled by
//   cp.async (16-byte copies of the tile's contiguous bytes that skip L1 and hold no registers) and
//   refilled as soon as the warp has read a stage, so D * warps chunks a block are in flight
//   while the warp converts and multiplies the current one.
// * "ex" (the expansion of decode24.cu; the default above 8 tokens): dense mma.m16n8k16 after
//   placing each kept pair into its group's four slots with a byte permutation (prmt); lane c
//   owns groups 8c..8c+7 of a chunk, so per row and chunk it loads 8 code bytes, 4 metadata
//   bytes and 32 contiguous X values per token (16-byte loads, where "sp" needs 4-byte ones:
//   above 8 tokens the X loads, not the conversion, bound the sparse kernels). One mma of
//   "ex" sums columns of all four quarters of a chunk, so with groups of 64 or 32 a lane
//   multiplies its kept values by the scale of its own 32 columns first (in fp32, rounded once
//   to 16 bits, as the dequantizing dense route does: the one feed whose products are not exact).
//
// int8 codes (explorer.lowbit.Int8Weight: codes [N, K/2] int8, one kept value a byte, in
// [-127, 127]) run the same three feeds from tiles of 1344 bytes: codes [16 rows][64 B], each
// row's even 4-byte words (groups 0-1, 4-5, ...) first and its odd ones after, so the two lanes
// of a row that need groups 8m + c with c = 0, 1 read bytes 0..31 and the other two bytes
// 32..63 (the same 32 bytes a lane as int4), then metadata at 1024 and scales at 1280. A code
// byte becomes a 16-bit integer exactly: f16 by the magic 0x6400 | (b ^ 0x80) = 1152 + code;
// bf16 (8 significant bits, too few for 1024 + a byte) from its two nibbles, each by a magic,
// recombined by two FMAs (16 * high - 128 + low), all exact. So int8 moves 5.25 bits a weight,
// a third of a 16-bit dense one.
//
// Requirements (checked by the caller, explorer.gpu.decode_int4): K % 128 == 0; G % 128 == 0
// and K % G == 0 (the default build), or G = 128 / CHUNK_SCALES; tiles 16-byte aligned; X rows
// 16-byte aligned with a row stride that is a multiple of 8 elements; every metadata nibble one
// of the six ordered pairs (0x4, 0x8, 0x9, 0xC, 0xD, 0xE); sm_80 or newer.

typedef unsigned short u16;
typedef unsigned int u32;

// Scales per row and chunk of 128 columns: 1 (G a multiple of 128, the default build), 2 (G = 64)
// or 4 (G = 32).
#ifndef CHUNK_SCALES
#define CHUNK_SCALES 1
#endif
constexpr int SCALES = CHUNK_SCALES;
static_assert(SCALES == 1 || SCALES == 2 || SCALES == 4, "CHUNK_SCALES must be 1, 2 or 4");
// mmas of 32 columns per scale (the sparse feeds fold their partial sums after each group)
constexpr int MMAS_PER_SCALE = 4 / SCALES;

// PTX qualifiers of the weight loads: the weight is read once, so it skips L1 (the benchmark
// builds variants of this line).
#define INT4_WEIGHT_LOAD "ld.global.nc.L1::no_allocate.v4.u32"

__device__ __forceinline__ uint4 load_weight(const void* p) {
    uint4 v;
    asm volatile(INT4_WEIGHT_LOAD " {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// Overlapped launches (overlap.cuh): this kernel reads only its own constant weight before
// wait_for_inputs(); X is read and Y written after it.
#include "overlap.cuh"

__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// (a & b) ^ c in one instruction (the compiler otherwise splits it into two with immediates).
__device__ __forceinline__ u32 and_xor(u32 a, u32 b, u32 c) {
    u32 d;
    asm("lop3.b32 %0, %1, %2, %3, 0x6a;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// d = a * b + c on packed pairs of 16-bit floats (exact for the small integers used here).
template <bool BF16>
__device__ __forceinline__ u32 fma2(u32 a, u32 b, u32 c) {
    u32 d;
    if (BF16) {
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    } else {
        asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    }
    return d;
}

// Magic constants: half = MAGIC | (n ^ 8) equals OFFSET + code; ONE is 1.0 in both halves.
template <bool BF16> struct Magic;
template <> struct Magic<true> {
    static constexpr u32 XOR = 0x43084308u, ONE = 0x3F803F80u, NEG_OFFSET = 0xC308C308u;  // 136
};
template <> struct Magic<false> {
    static constexpr u32 XOR = 0x64086408u, ONE = 0x3C003C00u, NEG_OFFSET = 0xE408E408u;  // 1032
};

// The kept pair of one group as two 16-bit floats, from byte `c` of a code word. `sel` is
// c | c << 4 | (c + 4) << 8 | (c + 4) << 12 (bf16) or c * 0x1111 (f16), made once per lane.
template <bool BF16>
__device__ __forceinline__ u32 pair_of_byte(u32 word, u32 sel) {
    if (BF16) {
        // bytes: [b, b, (w >> 4).b, ...]: low nibbles of halves 0 and 1 are b's two nibbles
        const u32 p = prmt(word, word >> 4, sel);
        return fma2<true>(and_xor(p, 0x000F000Fu, Magic<true>::XOR), Magic<true>::ONE,
                          Magic<true>::NEG_OFFSET);
    } else {
        // f16 has room for the high nibble in place (bits 4-7 of half 1): 1024 + 16 (n ^ 8),
        // scaled by 1/16 in the same FMA: half 0 is x * 1 - 1032, half 1 is x / 16 - 72.
        const u32 p = prmt(word, 0u, sel);
        return fma2<false>(and_xor(p, 0x00F0000Fu, 0x64806408u), 0x2C003C00u, 0xD480E408u);
    }
}

// The kept pair of one group from int8 codes: the two bytes of half `sel` picks (sel is
// 0x4140 for bytes 0-1 and 0x4342 for bytes 2-3: each byte into the low byte of a 16-bit half,
// zeros above).
template <bool BF16>
__device__ __forceinline__ u32 pair_of_half(u32 word, u32 sel) {
    const u32 p = prmt(word, 0u, sel);
    if (BF16) {
        // low nibble: 128 + lo; high nibble (signed): 136 + hi; 16 * (136 + hi) - 2304 =
        // 16 hi - 128, then + 128 + lo = the code, each step exact
        const u32 lo = and_xor(p, 0x000F000Fu, 0x43004300u);
        const u32 hi = and_xor(p >> 4, 0x000F000Fu, 0x43084308u);
        return fma2<true>(lo, 0x3F803F80u, fma2<true>(hi, 0x41804180u, 0xC510C510u));
    } else {
        return fma2<false>(p ^ 0x64806480u, 0x3C003C00u, 0xE480E480u);  // 1152 + code - 1152
    }
}

// The kept pair of one group from a lane's code word, int4 (byte sel) or int8 (half sel).
template <bool BF16, bool INT8>
__device__ __forceinline__ u32 pair_of(u32 word, u32 sel) {
    return INT8 ? pair_of_half<BF16>(word, sel) : pair_of_byte<BF16>(word, sel);
}

// The four kept pairs of a code word (bytes 0..3 = groups 0..3), for the expansion kernel.
template <bool BF16>
__device__ __forceinline__ void pairs_of_word(u32 w, u32* out) {
    const u32 m = 0x000F000Fu, x = Magic<BF16>::XOR, one = Magic<BF16>::ONE,
              off = Magic<BF16>::NEG_OFFSET;
    const u32 e0 = fma2<BF16>(and_xor(w, m, x), one, off);        // low nibbles of bytes 0, 2
    const u32 e1 = fma2<BF16>(and_xor(w >> 4, m, x), one, off);   // high nibbles of bytes 0, 2
    const u32 e2 = fma2<BF16>(and_xor(w >> 8, m, x), one, off);   // low nibbles of bytes 1, 3
    const u32 e3 = fma2<BF16>(and_xor(w >> 12, m, x), one, off);  // high nibbles of bytes 1, 3
    out[0] = prmt(e0, e1, 0x5410u);
    out[1] = prmt(e2, e3, 0x5410u);
    out[2] = prmt(e0, e1, 0x7632u);
    out[3] = prmt(e2, e3, 0x7632u);
}

// The eight kept pairs of groups 8c..8c+7 from their int4 code bytes (w.x, w.y) or int8 code
// words (w.x..w.w, groups 2i and 2i + 1 in word i), for the expansion kernel.
template <bool BF16, bool INT8>
__device__ __forceinline__ void pairs_of_lane(const uint4& w, u32* out) {
    if (INT8) {
        const u32 words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            out[2 * i] = pair_of_half<BF16>(words[i], 0x4140u);
            out[2 * i + 1] = pair_of_half<BF16>(words[i], 0x4342u);
        }
    } else {
        pairs_of_word<BF16>(w.x, out);
        pairs_of_word<BF16>(w.y, out + 4);
    }
}

template <bool BF16>
__device__ __forceinline__ void mma_sp(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1,
                                       u32 b2, u32 b3, u32 e) {
    if (BF16) {
        asm volatile(
            "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(b2), "r"(b3), "r"(e));
    } else {
        asm volatile(
            "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 "
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(b2), "r"(b3), "r"(e));
    }
}

template <bool BF16>
__device__ __forceinline__ void mma_dense(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
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

// Byte selectors placing a kept pair (v0 in bytes 0-1, v1 in bytes 2-3) into the four slots of
// its group (low word = slots 0, 1; high word = slots 2, 3; byte 4 of prmt's pair is zero), as
// in decode24.cu.
__device__ __forceinline__ u32 slot_selector(u32 nib) {
    const u32 i0 = nib & 3u, i1 = nib >> 2;
    return 0x44444444u ^ (0x54u << (8 * i0)) ^ (0x76u << (8 * i1));
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

// What a lane reads of one chunk of its two rows: 32 code bytes (sp) or 8 (ex) and 16 or 4
// metadata bytes per row, and the rows' scales of that chunk (SCALES each).
struct Chunk {
    uint4 code[4];  // sp: row g words 0-3, 4-7, row g + 8 words 0-3, 4-7; ex: .x .y of [0], [2]
    uint4 meta[2];  // sp: rows g, g + 8; ex: .x of each
    float scale[2][SCALES];
};

struct Args {
    const unsigned char* tiles;
    const u16* x;
    const u16* bias;
    u16* y;
    int n_rows, k, tokens;
    long long ldx, ldy;
};

// One tile of the weight, and one staged chunk: codes [16 rows][CODE B], metadata [16][16 B],
// scales [16][SCALES] (the layout above).
template <bool INT8> struct Tile {
    static constexpr int CODE = INT8 ? 64 : 32;  // code bytes a row
    static constexpr int META = 16 * CODE;       // where the metadata starts
    static constexpr int SCALE = META + 256;     // where the scales start
    static constexpr int BYTES = SCALE + 64 * SCALES;  // 832 (int4) or 1344 (int8) at 1 scale
    static constexpr int PIECES = BYTES / 16;          // 16-byte copies a tile takes
};

// The tile of this block's rows for chunk ch.
template <bool INT8>
__device__ __forceinline__ const unsigned char* tile_of(const Args& a, int ch) {
    return a.tiles + ((long long)blockIdx.x * (a.k >> 7) + ch) * Tile<INT8>::BYTES;
}

// The code bytes of groups 8c..8c+7 of row r of a tile: int4 bytes in .x .y, int8 words in
// .x .. .w (the row's even words hold groups 8c, 8c + 1, 8c + 4, 8c + 5 at bytes 8c..8c+7, its
// odd words the rest 32 bytes later).
template <bool INT8>
__device__ __forceinline__ uint4 lane_codes(const unsigned char* t, int r, int c) {
    if (INT8) {
        const uint2 e = __ldg(reinterpret_cast<const uint2*>(t + r * 64 + c * 8));
        const uint2 o = __ldg(reinterpret_cast<const uint2*>(t + r * 64 + 32 + c * 8));
        return make_uint4(e.x, o.x, e.y, o.y);
    }
    const uint2 q = __ldg(reinterpret_cast<const uint2*>(t + r * 32 + c * 8));
    return make_uint4(q.x, q.y, 0, 0);
}

// Chunk ch of the lane's rows g and g + 8 (lane c of the row: its bytes for ex); `live` false
// (a chunk past K) gives scale 0. For sp an int8 lane reads the half of its rows' code bytes
// that holds its groups (c / 2 picks it).
template <bool SP, bool INT8>
__device__ __forceinline__ void load_chunk(Chunk& f, const Args& a, int g, int c, int ch,
                                           bool live) {
    typedef Tile<INT8> L;
    const unsigned char* t = tile_of<INT8>(a, ch);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int r = g + 8 * i;
        if (SP) {
            if (INT8) {
                const unsigned char* codes = t + r * L::CODE + (c >> 1) * 32;
                f.code[2 * i] = load_weight(codes);
                f.code[2 * i + 1] = load_weight(codes + 16);
            } else {
                f.code[2 * i] = load_weight(t + r * 32);
                f.code[2 * i + 1] = load_weight(t + r * 32 + 16);
            }
            f.meta[i] = load_weight(t + L::META + r * 16);
        } else {
            f.code[2 * i] = lane_codes<INT8>(t, r, c);
            f.meta[i].x = __ldg(reinterpret_cast<const u32*>(t + L::META + r * 16 + c * 4));
        }
        const float* s = reinterpret_cast<const float*>(t + L::SCALE) + r * SCALES;
        if constexpr (!SP && SCALES > 1) {  // ex: the scale of the lane's 32 columns only
            const float v = __ldg(s + ((c * SCALES) >> 2));
            f.scale[i][0] = live ? v : 0.0f;
        } else {
#pragma unroll
            for (int q = 0; q < SCALES; ++q) {
                const float v = __ldg(s + q);
                f.scale[i][q] = live ? v : 0.0f;
            }
        }
    }
}

__device__ __forceinline__ u32 word_of(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;  // i is a compile-time constant
}

// The chunk's contribution, times its scales, into acc (sp: mma.sp on the stored pairs).
template <bool BF16, bool INT8, int NT>
__device__ __forceinline__ void chunk_sp(float (*acc)[4], const Chunk& f, const u32* const* xr,
                                         int ch, u32 pair_sel, u32 meta_sel) {
    float part[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) part[j][0] = part[j][1] = part[j][2] = part[j][3] = 0.0f;
    const u32* xc[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) xc[j] = xr[j] + ch * 64;
#pragma unroll
    for (int m = 0; m < 4; ++m) {  // mma m: columns 32m..32m+31 of the chunk
        // the lane's code words 2m, 2m + 1 of each row hold groups 8m + c and 8m + c + 4: byte c
        // of int4 words 2m, 2m + 1; half c & 1 of int8 words 4m + c / 2, 4m + 2 + c / 2 (the
        // lane loaded the words of parity c / 2 only)
        const u32 w00 = word_of(f.code[(2 * m) / 4], (2 * m) % 4);
        const u32 w01 = word_of(f.code[(2 * m + 1) / 4], (2 * m + 1) % 4);
        const u32 w10 = word_of(f.code[2 + (2 * m) / 4], (2 * m) % 4);
        const u32 w11 = word_of(f.code[2 + (2 * m + 1) / 4], (2 * m + 1) % 4);
        const u32 a0 = pair_of<BF16, INT8>(w00, pair_sel);
        const u32 a1 = pair_of<BF16, INT8>(w10, pair_sel);
        const u32 a2 = pair_of<BF16, INT8>(w01, pair_sel);
        const u32 a3 = pair_of<BF16, INT8>(w11, pair_sel);
        // metadata: row g in bits 0-15, row g + 8 in bits 16-31 (half c & 1 of word m)
        const u32 e = prmt(word_of(f.meta[0], m), word_of(f.meta[1], m), meta_sel);
#pragma unroll
        for (int j = 0; j < NT; ++j) {  // X[token, chunk + 32m + 8r + 2c .. + 1] for r = 0..3
            const u32* xp = xc[j] + m * 16;
            mma_sp<BF16>(part[j], a0, a1, a2, a3, __ldg(xp), __ldg(xp + 4), __ldg(xp + 8),
                         __ldg(xp + 12), e);
        }
        if ((m + 1) % MMAS_PER_SCALE == 0) {  // the group's last mma: fold it in with its scale
            const int q = m / MMAS_PER_SCALE;
#pragma unroll
            for (int j = 0; j < NT; ++j) {  // rows g (d0, d1) and g + 8 (d2, d3)
                acc[j][0] = fmaf(f.scale[0][q], part[j][0], acc[j][0]);
                acc[j][1] = fmaf(f.scale[0][q], part[j][1], acc[j][1]);
                acc[j][2] = fmaf(f.scale[1][q], part[j][2], acc[j][2]);
                acc[j][3] = fmaf(f.scale[1][q], part[j][3], acc[j][3]);
                part[j][0] = part[j][1] = part[j][2] = part[j][3] = 0.0f;
            }
        }
    }
}

// A pair of 16-bit floats (exact integers) times an fp32 scale, each rounded once to 16 bits.
template <bool BF16>
__device__ __forceinline__ u32 scaled_pair(u32 p, float scale) {
    float lo, hi;
    u32 d;
    if (BF16) {
        lo = __uint_as_float(p << 16);
        hi = __uint_as_float(p & 0xFFFF0000u);
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi * scale), "f"(lo * scale));
    } else {
        lo = to_f32((u16)(p & 0xFFFFu), false);
        hi = to_f32((u16)(p >> 16), false);
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi * scale), "f"(lo * scale));
    }
    return d;
}

// The same with dense mma after expanding each pair to four slots (ex). One mma sums columns
// of all four quarters of the chunk, so with several scales a chunk (groups of 64 or 32) each
// lane first multiplies its kept values by the scale of its 32 columns in fp32, rounded once to
// 16 bits (as the dequantizing dense route does), and the chunk is added in unscaled.
template <bool BF16, bool INT8, int NT>
__device__ __forceinline__ void chunk_ex(float (*acc)[4], const Chunk& f, const u32* const* xr,
                                         int ch) {
    float part[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) part[j][0] = part[j][1] = part[j][2] = part[j][3] = 0.0f;
    u32 p0[8], p1[8];  // kept pairs of groups 8c..8c+7 of rows g, g + 8
    pairs_of_lane<BF16, INT8>(f.code[0], p0);
    pairs_of_lane<BF16, INT8>(f.code[2], p1);
    if constexpr (SCALES > 1) {
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            p0[s] = scaled_pair<BF16>(p0[s], f.scale[0][0]);
            p1[s] = scaled_pair<BF16>(p1[s], f.scale[1][0]);
        }
    }
    uint4 xb[NT][4];  // token g + 8j, columns 32c..32c+31 of the chunk
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        const uint4* xp = reinterpret_cast<const uint4*>(xr[j] + ch * 64);
        xb[j][0] = __ldg(xp);
        xb[j][1] = __ldg(xp + 1);
        xb[j][2] = __ldg(xp + 2);
        xb[j][3] = __ldg(xp + 3);
    }
#pragma unroll
    for (int s = 0; s < 8; ++s) {  // one mma per group slot s: group 8c + s of each lane
        const u32 sel0 = slot_selector((f.meta[0].x >> (4 * s)) & 15u);
        const u32 sel1 = slot_selector((f.meta[1].x >> (4 * s)) & 15u);
        const u32 a0 = prmt(p0[s], 0u, sel0 & 0xFFFFu), a2 = prmt(p0[s], 0u, sel0 >> 16);
        const u32 a1 = prmt(p1[s], 0u, sel1 & 0xFFFFu), a3 = prmt(p1[s], 0u, sel1 >> 16);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const u32 b0 = word_of(xb[j][s / 2], 2 * (s % 2));
            const u32 b1 = word_of(xb[j][s / 2], 2 * (s % 2) + 1);
            mma_dense<BF16>(part[j], a0, a1, a2, a3, b0, b1);
        }
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        const float s0 = SCALES > 1 ? 1.0f : f.scale[0][0], s1 = SCALES > 1 ? 1.0f : f.scale[1][0];
        acc[j][0] = fmaf(s0, part[j][0], acc[j][0]);
        acc[j][1] = fmaf(s0, part[j][1], acc[j][1]);
        acc[j][2] = fmaf(s1, part[j][2], acc[j][2]);
        acc[j][3] = fmaf(s1, part[j][3], acc[j][3]);
    }
}

// cp.async: global -> shared without passing through registers (16 bytes, L2 only).
__device__ __forceinline__ unsigned shared_address(const void* p) {
    unsigned s;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(s) : "l"(p));
    return s;
}
__device__ __forceinline__ void copy16(void* smem, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared_address(smem)),
                 "l"(gmem));
}
__device__ __forceinline__ void copy_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void copy_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

enum Feed { EX = 0, SP = 1, SPA = 2 };

template <bool BF16, bool INT8, int FEED, int NT, int D>
__device__ __forceinline__ void decode24_int4(const Args& a) {
    typedef Tile<INT8> L;
    extern __shared__ float partial[];  // [warps][16][8] per token tile, then SPA's stages
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int g = lane >> 2, c = lane & 3;
    const int row0 = blockIdx.x * 16;
    const bool sp = FEED != EX;
    const u32 pair_sel = INT8   ? ((c & 1) ? 0x4342u : 0x4140u)
                         : BF16 ? (u32)(c | c << 4 | (c + 4) << 8 | (c + 4) << 12)
                                : (u32)(c * 0x1111);
    const u32 meta_sel = (c & 1) ? 0x7632u : 0x5410u;

    // the lane's X row of each token tile (token g + 8j; past T the last row is read again: its
    // products land in output columns that are never written), at the lane's first word
    const u32* xr[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        const int t = min(g + 8 * j, a.tokens - 1);
        xr[j] = reinterpret_cast<const u32*>(a.x + t * a.ldx) + (sp ? c : c * 16);
    }
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

    allow_next_launch();
    const int chunks = a.k >> 7;
    if constexpr (FEED == SPA) {
        // 1. main loop, staged: each warp keeps D chunks in flight in its own shared-memory
        // stages (cp.async, no registers held), chunk i to warp i % warps
        unsigned char* stages =
            reinterpret_cast<unsigned char*>(partial) + warps * 512 + warp * D * L::BYTES;
        // a tile is L::PIECES pieces of 16 bytes (52 int4, 84 int8 at one scale a chunk):
        // lane copies pieces lane, lane + 32, ..., so a warp moves the tile's contiguous bytes;
        // chunks are issued in order j = 0, 1, ...: the source advances by `warps` tiles
        const int mine = chunks > warp ? (chunks - warp + warps - 1) / warps : 0;
        const unsigned char* next = tile_of<INT8>(a, warp) + lane * 16;
        auto issue = [&](int j) {
            unsigned char* st = stages + (j % D) * L::BYTES + lane * 16;
            copy16(st, next);
            if (L::PIECES > 32 && (L::PIECES >= 64 || lane < L::PIECES - 32)) {
                copy16(st + 512, next + 512);
            }
            if (L::PIECES > 64 && (L::PIECES >= 96 || lane < L::PIECES - 64)) {
                copy16(st + 1024, next + 1024);
            }
            next += (long long)warps * L::BYTES;
        };
#pragma unroll
        for (int j = 0; j < D; ++j) {
            if (j < mine) issue(j);
            copy_commit();
        }
        wait_for_inputs();  // the first stages of weight are on their way; X comes next
        for (int j = 0; j < mine; ++j) {
            copy_wait<D - 1>();
            __syncwarp();
            const unsigned char* st = stages + (j % D) * L::BYTES;
            const unsigned char* codes = INT8 ? st + (c >> 1) * 32 : st;
            Chunk f;
            f.code[0] = *reinterpret_cast<const uint4*>(codes + g * L::CODE);
            f.code[1] = *reinterpret_cast<const uint4*>(codes + g * L::CODE + 16);
            f.code[2] = *reinterpret_cast<const uint4*>(codes + (g + 8) * L::CODE);
            f.code[3] = *reinterpret_cast<const uint4*>(codes + (g + 8) * L::CODE + 16);
            f.meta[0] = *reinterpret_cast<const uint4*>(st + L::META + g * 16);
            f.meta[1] = *reinterpret_cast<const uint4*>(st + L::META + (g + 8) * 16);
#pragma unroll
            for (int q = 0; q < SCALES; ++q) {
                f.scale[0][q] =
                    *reinterpret_cast<const float*>(st + L::SCALE + (g * SCALES + q) * 4);
                f.scale[1][q] =
                    *reinterpret_cast<const float*>(st + L::SCALE + ((g + 8) * SCALES + q) * 4);
            }
            __syncwarp();  // every lane has its copy of the stage: it may be refilled
            if (j + D < mine) issue(j + D);
            copy_commit();
            chunk_sp<BF16, INT8, NT>(acc, f, xr, warp + j * warps, pair_sel, meta_sel);
        }
        copy_wait<0>();
    } else {
        // 1. main loop: D chunks of 128 columns loaded ahead per step, chunk i to warp i % warps
        for (int base = warp; base < chunks; base += warps * D) {
            Chunk f[D];
#pragma unroll
            for (int d = 0; d < D; ++d) {  // a chunk past K reads chunk `base` again, scaled by 0
                const int ch = base + d * warps;
                load_chunk<FEED == SP, INT8>(f[d], a, g, c, ch < chunks ? ch : base,
                                             ch < chunks);
            }
            wait_for_inputs();  // returns at once after the first step
#pragma unroll
            for (int d = 0; d < D; ++d) {  // 2. products
                const int ch = base + d * warps < chunks ? base + d * warps : base;
                if constexpr (FEED == SP) {
                    chunk_sp<BF16, INT8, NT>(acc, f[d], xr, ch, pair_sel, meta_sel);
                } else {
                    chunk_ex<BF16, INT8, NT>(acc, f[d], xr, ch);
                }
            }
        }
    }
    // 3. add the warps' partial tiles, one token tile at a time, and write Y[token, row]
    wait_for_inputs();  // a warp with no chunk has not waited yet: Y may still be read before
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
            if (row < a.n_rows && token < a.tokens) {
                float sum = 0.0f;
                for (int w = 0; w < warps; ++w) sum += partial[w * 128 + r * 8 + tk];
                if (a.bias) sum += to_f32(a.bias[row], BF16);
                a.y[token * a.ldy + row] = from_f32(sum, BF16);
            }
        }
        __syncthreads();
    }
}

// One kernel per activation dtype, feeding (ex / sp / spa), token tiles of 8 (NT) and chunks
// loaded ahead (D: in registers for ex and sp, in shared-memory stages for spa); THREADS bounds
// the block so that the registers fit.
#define CODED_KERNEL(NAME, BF16, INT8, FEED, NT, D, THREADS)                                   \
    extern "C" __global__ void __launch_bounds__(THREADS)                                      \
        NAME(const unsigned char* tiles, const u16* x, const u16* bias, u16* y, int n_rows,    \
             int k, int tokens, long long ldx, long long ldy) {                                \
        const Args a{tiles, x, bias, y, n_rows, k, tokens, ldx, ldy};                          \
        decode24_int4<BF16, INT8, FEED, NT, D>(a);                                              \
    }

#define CODED_FAMILY(PREFIX, BF16, INT8, FEED)                   \
    CODED_KERNEL(PREFIX##_t8_d1, BF16, INT8, FEED, 1, 1, 1024)   \
    CODED_KERNEL(PREFIX##_t8_d2, BF16, INT8, FEED, 1, 2, 512)    \
    CODED_KERNEL(PREFIX##_t16_d1, BF16, INT8, FEED, 2, 1, 1024)  \
    CODED_KERNEL(PREFIX##_t16_d2, BF16, INT8, FEED, 2, 2, 512)   \
    CODED_KERNEL(PREFIX##_t32_d1, BF16, INT8, FEED, 4, 1, 512)   \
    CODED_KERNEL(PREFIX##_t32_d2, BF16, INT8, FEED, 4, 2, 256)   \
    CODED_KERNEL(PREFIX##_t64_d1, BF16, INT8, FEED, 8, 1, 256)   \
    CODED_KERNEL(PREFIX##_t64_d2, BF16, INT8, FEED, 8, 2, 256)

#define CODED_STAGED_FAMILY(PREFIX, BF16, INT8)                 \
    CODED_KERNEL(PREFIX##_t8_s2, BF16, INT8, SPA, 1, 2, 1024)   \
    CODED_KERNEL(PREFIX##_t8_s4, BF16, INT8, SPA, 1, 4, 1024)   \
    CODED_KERNEL(PREFIX##_t16_s2, BF16, INT8, SPA, 2, 2, 512)   \
    CODED_KERNEL(PREFIX##_t16_s4, BF16, INT8, SPA, 2, 4, 512)   \
    CODED_KERNEL(PREFIX##_t32_s2, BF16, INT8, SPA, 4, 2, 512)   \
    CODED_KERNEL(PREFIX##_t32_s4, BF16, INT8, SPA, 4, 4, 512)   \
    CODED_KERNEL(PREFIX##_t64_s2, BF16, INT8, SPA, 8, 2, 256)   \
    CODED_KERNEL(PREFIX##_t64_s4, BF16, INT8, SPA, 8, 4, 256)

CODED_FAMILY(int4_sp_bf16, true, false, SP)
CODED_FAMILY(int4_sp_f16, false, false, SP)
CODED_STAGED_FAMILY(int4_spa_bf16, true, false)
CODED_STAGED_FAMILY(int4_spa_f16, false, false)
CODED_FAMILY(int8_sp_bf16, true, true, SP)
CODED_FAMILY(int8_sp_f16, false, true, SP)
CODED_STAGED_FAMILY(int8_spa_bf16, true, true)
CODED_STAGED_FAMILY(int8_spa_f16, false, true)
CODED_FAMILY(int4_ex_bf16, true, false, EX)
CODED_FAMILY(int4_ex_f16, false, false, EX)
CODED_FAMILY(int8_ex_bf16, true, true, EX)
CODED_FAMILY(int8_ex_f16, false, true, EX)

// W itself in 16 bits, W[N, K] = code * scale in place (zeros elsewhere), from the tiles: the
// dense route above 64 tokens dequantizes once per call and hands the product to cuBLAS, where
// torch's int4 kernel's time grows with the tokens. A thread writes 32 columns of one row (8
// groups: 8 code bytes, 4 metadata bytes and the row's scale of those columns), each value
// code * scale rounded once from fp32; consecutive threads write consecutive columns.
template <bool BF16, bool INT8>
__device__ __forceinline__ void dequantize_int4(const unsigned char* tiles, u16* w, int n_rows,
                                                int k) {
    typedef Tile<INT8> L;
    const long long item = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int per_row = k >> 5;
    if (item >= (long long)n_rows * per_row) return;
    const int row = (int)(item / per_row), part = (int)(item % per_row);
    const int ch = part >> 2, j = part & 3;
    const unsigned char* t = tiles + ((long long)(row >> 4) * (k >> 7) + ch) * L::BYTES;
    const int r = row & 15;
    const uint4 codes = lane_codes<INT8>(t, r, j);
    const u32 meta = *reinterpret_cast<const u32*>(t + L::META + r * 16 + j * 4);
    // columns 32j..32j+31 of the chunk lie in its scale group j / MMAS_PER_SCALE
    const float scale =
        *reinterpret_cast<const float*>(t + L::SCALE + (r * SCALES + j / MMAS_PER_SCALE) * 4);
    u32 out[16];
#pragma unroll
    for (int q = 0; q < 8; ++q) {  // group 8j + q of the chunk: columns 4q..4q+3 of this part
        int v0, v1;
        if (INT8) {  // group q: half q & 1 of word q / 2
            const u32 half = word_of(codes, q >> 1) >> (16 * (q & 1));
            v0 = ((int)(half << 24)) >> 24;
            v1 = ((int)(half << 16)) >> 24;
        } else {
            const u32 byte = ((q < 4 ? codes.x : codes.y) >> (8 * (q & 3))) & 0xFFu;
            v0 = ((int)(byte << 28)) >> 28;
            v1 = ((int)(byte << 24)) >> 28;
        }
        const u32 nib = (meta >> (4 * q)) & 15u;
        const u32 i0 = nib & 3u, i1 = nib >> 2;
        const u16 h0 = from_f32((float)v0 * scale, BF16), h1 = from_f32((float)v1 * scale, BF16);
        u32 slot[4];
#pragma unroll
        for (u32 sl = 0; sl < 4; ++sl) slot[sl] = sl == i0 ? h0 : sl == i1 ? h1 : 0u;
        out[2 * q] = slot[0] | (slot[1] << 16);
        out[2 * q + 1] = slot[2] | (slot[3] << 16);
    }
    uint4* dst = reinterpret_cast<uint4*>(w + (long long)row * k + ch * 128 + j * 32);
#pragma unroll
    for (int v = 0; v < 4; ++v) {
        dst[v] = make_uint4(out[4 * v], out[4 * v + 1], out[4 * v + 2], out[4 * v + 3]);
    }
}

#define DEQUANT_KERNEL(NAME, BF16, INT8)                                                      \
    extern "C" __global__ void __launch_bounds__(256)                                          \
        NAME(const unsigned char* tiles, u16* w, int n_rows, int k) {                          \
        dequantize_int4<BF16, INT8>(tiles, w, n_rows, k);                                       \
    }

DEQUANT_KERNEL(int4_dequant_bf16, true, false)
DEQUANT_KERNEL(int4_dequant_f16, false, false)
DEQUANT_KERNEL(int8_dequant_bf16, true, true)
DEQUANT_KERNEL(int8_dequant_f16, false, true)
