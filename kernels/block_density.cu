// Block density of a bool mask for the heatmap: the mean of mask[r0:r0+th, c0:c0+tw] for every
// tile, edge tiles averaging only the elements they hold. One warp per output cell.
// mask: uint8 (0/1) [rows, cols] row-major; out: float32 [ceil(rows/th), ceil(cols/tw)].

extern "C" __global__ void __launch_bounds__(256)
block_density_u8(const unsigned char* __restrict__ mask, float* __restrict__ out, int rows,
                 int cols, int th, int tw, int grid_rows, int grid_cols) {
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    const long long n_cells = (long long)grid_rows * grid_cols;
    if (warp >= n_cells) return;
    const int gr = (int)(warp / grid_cols), gc = (int)(warp % grid_cols);
    const int r0 = gr * th, c0 = gc * tw;
    const int h = min(th, rows - r0), w = min(tw, cols - c0);
    const long long count = (long long)h * w;
    unsigned long long sum = 0;
    for (long long idx = lane; idx < count; idx += 32) {
        const int r = (int)(idx / w), c = (int)(idx % w);
        sum += mask[(long long)(r0 + r) * cols + c0 + c] != 0;
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xFFFFFFFFu, sum, o);
    if (lane == 0) out[warp] = (float)((double)sum / (double)count);
}
