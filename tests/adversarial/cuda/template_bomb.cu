// expect: timeout|compile_error
// A compile that never finishes: 2^31 distinct template instantiations (killed at its time limit, or at the compiler's memory cap).
#include <cuda_runtime.h>
#include <stdint.h>

template <int N, int M> struct Bomb { enum { v = Bomb<N - 1, 2 * M>::v + Bomb<N - 1, 2 * M + 1>::v }; };
template <int M> struct Bomb<0, M> { enum { v = 1 }; };

__global__ void fill(float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = Bomb<30, 0>::v;
}

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    (void)x;
    fill<<<(unsigned)((rows * cols + 255) / 256), 256, 0, stream>>>(y, rows * cols);
    return 0;
}
