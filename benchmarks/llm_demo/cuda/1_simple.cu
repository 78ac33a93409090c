// llm-demo: 1_simple
// softmax over the last dim of a row-major (rows, cols) fp32 tensor: one block of 256 threads
// per row. Pass 1: each thread keeps an online (max, sum of exp) over its strided elements;
// the block merges them with warp shuffles, then across warps in shared memory. Pass 2:
// y = exp(x - max) / sum.
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>

#define THREADS 256

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    const float mm = fmaxf(m, m2);
    if (mm == -INFINITY) { m = mm; s = 0.f; return; }
    s = s * expf(m - mm) + s2 * expf(m2 - mm);
    m = mm;
}

__global__ void __launch_bounds__(THREADS) softmax_rows(const float* __restrict__ x, float* __restrict__ y,
                                                        int64_t cols) {
    const float* row = x + (int64_t)blockIdx.x * cols;
    float* out = y + (int64_t)blockIdx.x * cols;
    float m = -INFINITY, s = 0.f;
    for (int64_t i = threadIdx.x; i < cols; i += THREADS) {
        const float v = row[i];
        if (v > m) { s = s * expf(m - v) + 1.f; m = v; }
        else s += expf(v - m);
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, m2, s2);
    }
    __shared__ float sh_m[THREADS / 32], sh_s[THREADS / 32];
    if ((threadIdx.x & 31) == 0) { sh_m[threadIdx.x >> 5] = m; sh_s[threadIdx.x >> 5] = s; }
    __syncthreads();
    m = sh_m[0]; s = sh_s[0];
    for (int w = 1; w < THREADS / 32; ++w) merge(m, s, sh_m[w], sh_s[w]);
    const float inv = 1.f / s;
    for (int64_t i = threadIdx.x; i < cols; i += THREADS) out[i] = expf(row[i] - m) * inv;
}

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    if (rows > 0x7fffffffLL) return 1;
    softmax_rows<<<(unsigned)rows, THREADS, 0, stream>>>(x, y, cols);
    return (int)cudaGetLastError();
}
