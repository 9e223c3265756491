// N:M mask selection from scores: in each group of M consecutive scores keep the N largest.
// Ties keep the lower index; NaN scores rank lowest. One thread per group; M <= 64.
// scores: float32, contiguous; mask: uint8 (0/1), same layout.

__device__ __forceinline__ float nm_key(float s) { return isnan(s) ? __int_as_float(0xff800000) : s; }

extern "C" __global__ void __launch_bounds__(256)
nm_select_f32(const float* __restrict__ scores, unsigned char* __restrict__ mask,
              long long n_groups, int n_keep, int m) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < n_groups;
         g += stride) {
        const float* s = scores + g * m;
        unsigned char* o = mask + g * m;
        for (int i = 0; i < m; ++i) {
            float si = nm_key(s[i]);
            int rank = 0;
            for (int j = 0; j < m; ++j) {
                float sj = nm_key(s[j]);
                rank += (sj > si) || (sj == si && j < i);
            }
            o[i] = rank < n_keep;
        }
    }
}
