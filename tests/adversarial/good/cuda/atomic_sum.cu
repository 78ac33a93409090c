// expect: ok
// Softmax whose row sums are split over 4 blocks and combined with atomicAdd (order-dependent rounding far inside the tolerance): ok, flagged nondeterministic when the bits differ.
#include <cuda_runtime.h>
#include <cstdint>
#include <cmath>

#define BLOCK 256
#define SPLIT 4

__device__ float block_reduce(float v, bool is_max) {
    __shared__ float sh[BLOCK / 32];
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    v = sh[0];
    for (int i = 1; i < BLOCK / 32; ++i) v = is_max ? fmaxf(v, sh[i]) : v + sh[i];
    __syncthreads();
    return v;
}

__global__ void row_max(const float* x, float* mx, int64_t cols) {
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) m = fmaxf(m, x[blockIdx.x * cols + i]);
    m = block_reduce(m, true);
    if (threadIdx.x == 0) { mx[blockIdx.x] = m; mx[gridDim.x + blockIdx.x] = 0.f; }
}

__global__ void partial_sum(const float* x, float* mx, int64_t rows, int64_t cols) {
    const int64_t r = blockIdx.x, part = blockIdx.y;
    const int64_t chunk = (cols + SPLIT - 1) / SPLIT, lo = part * chunk, hi = min(cols, lo + chunk);
    float s = 0.f;
    for (int64_t i = lo + threadIdx.x; i < hi; i += BLOCK) s += __expf(x[r * cols + i] - mx[r]);
    s = block_reduce(s, false);
    if (threadIdx.x == 0) atomicAdd(&mx[rows + r], s);
}

__global__ void normalise(const float* x, float* y, const float* mx, int64_t rows, int64_t cols) {
    const int64_t r = blockIdx.x;
    const float inv = 1.f / mx[rows + r];
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) y[r * cols + i] = __expf(x[r * cols + i] - mx[r]) * inv;
}

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows == 0) return 0;
    static float* mx = nullptr;
    static int64_t cap = 0;
    if (cap < rows) {
        if (mx) cudaFree(mx);
        if (cudaMalloc(&mx, 2 * rows * sizeof(float)) != cudaSuccess) return 2;
        cap = rows;
    }
    row_max<<<(unsigned)rows, BLOCK, 0, stream>>>(x, mx, cols);
    partial_sum<<<dim3((unsigned)rows, SPLIT), BLOCK, 0, stream>>>(x, mx, rows, cols);
    normalise<<<(unsigned)rows, BLOCK, 0, stream>>>(x, y, mx, rows, cols);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
