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
