// Overlapped launches (programmatic dependent launch, sm_90 and newer), shared by the kernels
// that take part in them. A kernel launched with the driver's programmatic stream
// serialization attribute may start while the kernel before it in the stream finishes:
// wait_for_inputs() returns once that kernel has finished and its writes are visible, so a
// kernel reads what the one before it writes, and writes anything, only after it.
// allow_next_launch() lets a kernel launched the same way after this one start once every
// block of this one has begun. Both are no-ops for an ordinary launch and before sm_90.
// Included by the explorer's loader (explorer.gpu.cuda.sources.kernel_source), which pastes
// the text in place of the #include line.
#ifndef EXPLORER_OVERLAP_CUH
#define EXPLORER_OVERLAP_CUH
__device__ __forceinline__ void wait_for_inputs() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_next_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#endif
