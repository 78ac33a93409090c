// llm-demo: 3_no_max_fixed
// softmax over the last dim of a row-major (rows, cols) fp32 tensor. Fix: subtract the row max
// before exp (exp(x) overflows to inf for x > 88, and inf / inf is NaN): a max pass first
// (block max with warp shuffles), then the sum of exp(x - max), then y = exp(x - max) / sum.
// One block of 512 threads per row, float4 loads and stores where the row allows.
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>

#define THREADS 512

__device__ __forceinline__ float block_max(float v, float* sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    v = sh[0];
    for (int w = 1; w < THREADS / 32; ++w) v = fmaxf(v, sh[w]);
    return v;
}

__device__ __forceinline__ float block_sum(float v, float* sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    v = 0.f;
    for (int w = 0; w < THREADS / 32; ++w) v += sh[w];
    return v;
}

__global__ void __launch_bounds__(THREADS) softmax_rows(const float* __restrict__ x, float* __restrict__ y,
                                                        int64_t cols, bool vec) {
    __shared__ float sh_m[THREADS / 32], sh_s[THREADS / 32];
    const float* row = x + (int64_t)blockIdx.x * cols;
    float* out = y + (int64_t)blockIdx.x * cols;
    const float4* r4 = reinterpret_cast<const float4*>(row);
    float m = -INFINITY;
    if (vec) {
        for (int64_t i = threadIdx.x; i < cols / 4; i += THREADS) {
            const float4 v = __ldg(r4 + i);
            m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
        }
    } else {
        for (int64_t i = threadIdx.x; i < cols; i += THREADS) m = fmaxf(m, __ldg(row + i));
    }
    m = block_max(m, sh_m);
    float s = 0.f;
    if (vec) {
        for (int64_t i = threadIdx.x; i < cols / 4; i += THREADS) {
            const float4 v = __ldg(r4 + i);
            s += expf(v.x - m) + expf(v.y - m) + expf(v.z - m) + expf(v.w - m);
        }
    } else {
        for (int64_t i = threadIdx.x; i < cols; i += THREADS) s += expf(__ldg(row + i) - m);
    }
    s = block_sum(s, sh_s);
    const float inv = 1.f / s;
    if (vec) {
        float4* o4 = reinterpret_cast<float4*>(out);
        for (int64_t i = threadIdx.x; i < cols / 4; i += THREADS) {
            const float4 v = __ldg(r4 + i);
            o4[i] = make_float4(expf(v.x - m) * inv, expf(v.y - m) * inv, expf(v.z - m) * inv,
                                expf(v.w - m) * inv);
        }
    } else {
        for (int64_t i = threadIdx.x; i < cols; i += THREADS) out[i] = expf(row[i] - m) * inv;
    }
}

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    if (rows > 0x7fffffffLL) return 1;
    const bool vec = cols % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0;
    softmax_rows<<<(unsigned)rows, THREADS, 0, stream>>>(x, y, cols, vec);
    return (int)cudaGetLastError();
}
