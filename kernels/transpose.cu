// Out-of-place transpose of a row-major matrix of 16-bit values (fp16 or bf16: bits are moved,
// never converted). src is rows x cols with leading dimension src_ld; dst receives
// dst[c * dst_ld + r] = src[r * src_ld + c] for r < rows and c < out_cols (out_cols <= cols lets
// the caller drop padded tokens in the same pass). Tiles of 32 x 32 go through shared memory so
// that both the reads and the writes of a warp touch consecutive addresses.

#define TILE 32
#define ROWS_PER_PASS 8

extern "C" __global__ void __launch_bounds__(TILE * ROWS_PER_PASS)
transpose16(const unsigned short* __restrict__ src, unsigned short* __restrict__ dst,
            long long rows, long long out_cols, long long src_ld, long long dst_ld) {
    __shared__ unsigned short tile[TILE][TILE + 1];
    const long long c0 = (long long)blockIdx.x * TILE;  // source column (token) block
    const long long r0 = (long long)blockIdx.y * TILE;  // source row (feature) block
    // 1. coalesced read of a TILE x TILE block of src (threadIdx.x runs along a source row)
    const long long c = c0 + threadIdx.x;
#pragma unroll
    for (int j = threadIdx.y; j < TILE; j += ROWS_PER_PASS) {
        const long long r = r0 + j;
        if (r < rows && c < out_cols) tile[j][threadIdx.x] = src[r * src_ld + c];
    }
    __syncthreads();
    // 2. coalesced write of the transposed block (threadIdx.x now runs along a destination row)
    const long long r = r0 + threadIdx.x;
#pragma unroll
    for (int j = threadIdx.y; j < TILE; j += ROWS_PER_PASS) {
        const long long cc = c0 + j;
        if (r < rows && cc < out_cols) dst[cc * dst_ld + r] = tile[threadIdx.x][j];
    }
}

// The same transpose moving two 16-bit values per thread and access (4 bytes): a 64 x 64 tile
// per block, so each warp reads and writes 128 contiguous bytes. Needs rows even, src_ld even
// and both pointers 4-byte aligned; out_cols may be odd (the last value goes alone).
#define VT 64

extern "C" __global__ void __launch_bounds__(32 * ROWS_PER_PASS)
transpose16x2(const unsigned short* __restrict__ src, unsigned short* __restrict__ dst,
              long long rows, long long out_cols, long long src_ld, long long dst_ld) {
    __shared__ unsigned short tile[VT][VT + 2];
    const long long c0 = (long long)blockIdx.x * VT;  // source columns (tokens)
    const long long r0 = (long long)blockIdx.y * VT;  // source rows (features)
    const int tx = threadIdx.x;                        // 0..31: a pair of columns / rows
    // 1. read 64 rows of 64 values: thread tx reads columns 2tx and 2tx+1 of each row
    const long long c = c0 + 2 * tx;
    for (int j = threadIdx.y; j < VT; j += ROWS_PER_PASS) {
        const long long r = r0 + j;
        if (r >= rows) break;
        const unsigned short* row = src + r * src_ld;
        if (c + 1 < out_cols) {
            const unsigned int v = *reinterpret_cast<const unsigned int*>(row + c);
            tile[j][2 * tx] = (unsigned short)(v & 0xffffu);
            tile[j][2 * tx + 1] = (unsigned short)(v >> 16);
        } else if (c < out_cols) {
            tile[j][2 * tx] = row[c];
        }
    }
    __syncthreads();
    // 2. write 64 destination rows (tokens): thread tx writes features 2tx and 2tx+1
    const long long r = r0 + 2 * tx;
    if (r >= rows) return;  // rows is even, so r + 1 < rows too
    for (int j = threadIdx.y; j < VT; j += ROWS_PER_PASS) {
        const long long cc = c0 + j;
        if (cc >= out_cols) break;
        const unsigned int v = (unsigned int)tile[2 * tx][j] | ((unsigned int)tile[2 * tx + 1][j] << 16);
        *reinterpret_cast<unsigned int*>(dst + cc * dst_ld + r) = v;
    }
}
