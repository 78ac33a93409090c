// expect: ok
// Softmax with exp through inline PTX ex2.approx, cub::BlockReduce, and <cstdio>/<cstdlib>/<cooperative_groups.h> included: allowed.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cmath>
#include <cooperative_groups.h>
#include <cub/block/block_reduce.cuh>

#define BLOCK 256

struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

__device__ __forceinline__ float fast_exp(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
    return y;
}

__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    typedef cub::BlockReduce<float, BLOCK> Reduce;
    __shared__ typename Reduce::TempStorage tmp;
    __shared__ float bcast;
    const float* xr = x + blockIdx.x * cols;
    float* yr = y + blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) m = fmaxf(m, xr[i]);
    m = Reduce(tmp).Reduce(m, MaxOp());
    if (threadIdx.x == 0) bcast = m;
    __syncthreads();
    m = bcast;
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) s += fast_exp(xr[i] - m);
    __syncthreads();
    s = Reduce(tmp).Sum(s);
    if (threadIdx.x == 0) bcast = s;
    __syncthreads();
    const float inv = 1.f / bcast;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) yr[i] = fast_exp(xr[i] - m) * inv;
}

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows == 0) return 0;
    softmax_rows<<<(unsigned)rows, BLOCK, 0, stream>>>(x, y, cols);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
