// expect: rejected
// No __global__ kernel: the work is done on the host (the pointers are device memory, too).
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    return cudaMemcpyAsync(y, x, rows * cols * sizeof(float), cudaMemcpyDeviceToDevice, stream) == cudaSuccess ? 0 : 1;
}
