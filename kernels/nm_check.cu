// One-pass N:M validity check with the 2:4 pattern histogram.
//
// Groups are M consecutive elements of the flattened (row-major) tensor, i.e. groups run along
// the last dimension. An element is "nonzero" when (bits & zmask) != 0, so -0.0 counts as zero
// for floating types (zmask clears the sign bit) and every nonzero integer counts.
//
// hist[8] (unsigned long long), accumulated with atomics:
//   0..5  groups with exactly 2 nonzeros (only when N == 2 and M == 4), by position pattern
//         (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
//   6     other valid groups (at most N nonzeros, not counted in 0..5)
//   7     too dense (more than N nonzeros): the violations
// first_bad[0] receives the smallest index of a violating group (atomicMin; init LLONG_MAX).

#define BIN_OTHER 6
#define BIN_DENSE 7

// histogram bin of one group: its 4-bit nonzero mask `bits` and nonzero count `c`
__device__ __forceinline__ unsigned pattern_bin(unsigned bits, int c, int n_keep, int pat_ok) {
    if (c > n_keep) return BIN_DENSE;
    if (pat_ok && c == 2) {
        // 3->0, 5->1, 9->2, 6->3, 10->4, 12->5
        unsigned r;
        switch (bits) {
            case 3: r = 0; break;
            case 5: r = 1; break;
            case 9: r = 2; break;
            case 6: r = 3; break;
            case 10: r = 4; break;
            default: r = 5; break;  // 12
        }
        return r;
    }
    return BIN_OTHER;
}

// Counters as 16-bit fields of two 64-bit registers: lo holds bins 0-3, hi bins 4-7.
__device__ __forceinline__ void bump(unsigned long long& lo, unsigned long long& hi, unsigned b) {
    unsigned long long one = 1ULL << (16 * (b & 3));
    if (b < 4) lo += one; else hi += one;
}

__device__ __forceinline__ void flush(unsigned long long& lo, unsigned long long& hi,
                                      unsigned (&cnt)[8]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        cnt[i] += (unsigned)((lo >> (16 * i)) & 0xFFFF);
        cnt[4 + i] += (unsigned)((hi >> (16 * i)) & 0xFFFF);
    }
    lo = 0; hi = 0;
}

__device__ __forceinline__ void block_commit(unsigned (&cnt)[8], long long bad,
                                             unsigned long long* hist, long long* first_bad) {
    __shared__ unsigned long long sh[8];
    __shared__ long long shbad;
    if (threadIdx.x < 8) sh[threadIdx.x] = 0;
    if (threadIdx.x == 0) shbad = 0x7FFFFFFFFFFFFFFFLL;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        unsigned v = cnt[i];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, o);
        if ((threadIdx.x & 31) == 0 && v) atomicAdd(&sh[i], (unsigned long long)v);
    }
    for (int o = 16; o > 0; o >>= 1) {
        long long other = __shfl_down_sync(0xFFFFFFFFu, bad, o);
        bad = other < bad ? other : bad;
    }
    if ((threadIdx.x & 31) == 0) atomicMin(&shbad, bad);
    __syncthreads();
    if (threadIdx.x < 8 && sh[threadIdx.x]) atomicAdd(&hist[threadIdx.x], sh[threadIdx.x]);
    if (threadIdx.x == 0 && shbad != 0x7FFFFFFFFFFFFFFFLL) atomicMin(first_bad, shbad);
}

__device__ __forceinline__ unsigned nz4(unsigned w0, unsigned w1, unsigned zm) {
    return ((w0 & zm) != 0) | (((w0 >> 16) & zm) != 0) << 1 | ((w1 & zm) != 0) << 2 |
           (((w1 >> 16) & zm) != 0) << 3;
}

// Fast path: 16-bit elements, M == 4, numel a multiple of 8 (one uint4 = two groups).
extern "C" __global__ void __launch_bounds__(256)
nm_hist_m4_u16(const uint4* __restrict__ data, long long n_vec, int n_keep, unsigned zmask,
               unsigned long long* __restrict__ hist, long long* __restrict__ first_bad) {
    const unsigned zm = zmask & 0xFFFFu;
    const int pat_ok = (n_keep == 2);
    unsigned cnt[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    unsigned long long lo = 0, hi = 0;
    long long bad = 0x7FFFFFFFFFFFFFFFLL;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int since = 0;
    // 4 independent 16-byte loads in flight per thread
    for (; i + 3 * stride < n_vec; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = __ldcs(&data[i + u * stride]);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            unsigned b0 = nz4(v[u].x, v[u].y, zm), b1 = nz4(v[u].z, v[u].w, zm);
            int c0 = __popc(b0), c1 = __popc(b1);
            unsigned p0 = pattern_bin(b0, c0, n_keep, pat_ok);
            unsigned p1 = pattern_bin(b1, c1, n_keep, pat_ok);
            bump(lo, hi, p0);
            bump(lo, hi, p1);
            long long g = 2 * (i + u * stride);
            if (p0 == BIN_DENSE && g < bad) bad = g;
            if (p1 == BIN_DENSE && g + 1 < bad) bad = g + 1;
        }
        if (++since == 4096) { flush(lo, hi, cnt); since = 0; }
    }
    for (; i < n_vec; i += stride) {
        uint4 v = __ldcs(&data[i]);
        unsigned b0 = nz4(v.x, v.y, zm), b1 = nz4(v.z, v.w, zm);
        unsigned p0 = pattern_bin(b0, __popc(b0), n_keep, pat_ok);
        unsigned p1 = pattern_bin(b1, __popc(b1), n_keep, pat_ok);
        bump(lo, hi, p0);
        bump(lo, hi, p1);
        if (p0 == BIN_DENSE && 2 * i < bad) bad = 2 * i;
        if (p1 == BIN_DENSE && 2 * i + 1 < bad) bad = 2 * i + 1;
    }
    flush(lo, hi, cnt);
    block_commit(cnt, bad, hist, first_bad);
}

// Generic path: any N <= M <= 32, elements of 1, 2 or 4 bytes; one thread per group.
#define NM_GENERIC(NAME, T)                                                                    \
extern "C" __global__ void __launch_bounds__(256)                                              \
NAME(const T* __restrict__ data, long long n_groups, int n_keep, int m, unsigned zmask,        \
     unsigned long long* __restrict__ hist, long long* __restrict__ first_bad) {               \
    unsigned cnt[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                \
    long long bad = 0x7FFFFFFFFFFFFFFFLL;                                                      \
    const int pat_ok = (n_keep == 2 && m == 4);                                                \
    const long long stride = (long long)gridDim.x * blockDim.x;                                \
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < n_groups;         \
         g += stride) {                                                                        \
        const T* p = data + g * m;                                                             \
        unsigned bits = 0; int c = 0;                                                          \
        for (int j = 0; j < m; ++j) {                                                          \
            int nz = ((unsigned)p[j] & zmask) != 0;                                            \
            c += nz;                                                                           \
            if (j < 4) bits |= (unsigned)nz << j;                                              \
        }                                                                                      \
        unsigned b = pattern_bin(bits, c, n_keep, pat_ok);                                     \
        _Pragma("unroll") for (int k = 0; k < 8; ++k) cnt[k] += (b == (unsigned)k);            \
        if (b == BIN_DENSE && g < bad) bad = g;                                                \
    }                                                                                          \
    block_commit(cnt, bad, hist, first_bad);                                                   \
}
NM_GENERIC(nm_hist_u8, unsigned char)
NM_GENERIC(nm_hist_u16, unsigned short)
NM_GENERIC(nm_hist_u32, unsigned int)
