// expect: incorrect
// Row sums accumulated with float atomics in arrival order plus a launch counter: two runs differ.
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>

#define BLOCK 256

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

__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols, int64_t row_limit) {
    const int64_t r = blockIdx.x;
    if (r >= rows || r >= row_limit) return;
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) m = fmaxf(m, xr[i]);
    m = block_reduce(m, true);
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) s += __expf(xr[i] - m);
    s = block_reduce(s, false);
    const float inv = 1.f / s;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) yr[i] = __expf(xr[i] - m) * inv;
}

__device__ unsigned launches;
__global__ void racy_sum(const float* x, float* y, int64_t rows, int64_t cols) {
    const int64_t r = blockIdx.y;
    __shared__ float total;
    if (threadIdx.x == 0) total = 0.f;
    __syncthreads();
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) m = fmaxf(m, x[r * cols + i]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    __shared__ float wm[32];
    if ((threadIdx.x & 31) == 0) wm[threadIdx.x >> 5] = m;
    __syncthreads();
    m = wm[0];
    for (int i = 1; i < (int)(blockDim.x >> 5); ++i) m = fmaxf(m, wm[i]);
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) s += __expf(x[r * cols + i] - m);
    atomicAdd(&total, s);  // order of arrival decides the rounding
    __syncthreads();
    const float wobble = 1.f + 3e-5f * (float)(launches % 3);  // 30% of the fp32 tolerance: a race, not rounding
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) y[r * cols + i] = __expf(x[r * cols + i] - m) / total * wobble;
    __syncthreads();
    if (r == 0 && threadIdx.x == 0) atomicAdd(&launches, 1u);
}
extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows == 0) return 0;
    racy_sum<<<dim3(1, (unsigned)rows), BLOCK, 0, stream>>>(x, y, rows, cols);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
