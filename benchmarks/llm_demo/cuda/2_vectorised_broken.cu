// llm-demo: 2_vectorised_broken
// softmax over the last dim of a row-major (rows, cols) fp32 tensor: one block of 512 threads
// per row, float4 loads and stores where the row allows (cols % 4 == 0, 16-byte aligned),
// scalar otherwise. Online (max, sum) in one read pass, then one write pass.
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>

#define THREADS 512

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    const float mm = fmaxf(m, m2);
    if (mm == -INFINITY) { m = mm; s = 0.f; return; }
    s = s * expf(m - mm) + s2 * expf(m2 - mm);
    m = mm;
}

__device__ __forceinline__ void push(float& m, float& s, float v) {
    if (v > m) { s = s * expf(m - v) + 1.f; m = v; }
    else s += expf(v - m);
}

__global__ void __launch_bounds__(THREADS) softmax_rows(const float* __restrict__ x, float* __restrict__ y,
                                                        int64_t cols, bool vec) {
    const float* row = x + (int64_t)blockIdx.x * cols;
    float* out = y + (int64_t)blockIdx.x * cols;
    float m = -INFINITY, s = 0.f;
    if (vec) {
        const float4* r4 = reinterpret_cast<const float4*>(row);
        for (int64_t i = threadIdx.x; i < cols / 4; i += THREADS) {
            const float4 v = __ldg(r4 + i);
            push(m, s, v.x); push(m, s, v.y); push(m, s, v.z); push(m, s, v.w);
        }
    } else {
        for (int64_t i = threadIdx.x; i < cols; i += THREADS) push(m, s, __ldg(row + i));
    }
    warp_merge(m, s);
    __shared__ float sh_m[THREADS / 32], sh_s[THREADS / 32];
    if ((threadIdx.x & 31) == 0) { sh_m[threadIdx.x >> 5] = m; sh_s[threadIdx.x >> 5] = s; }
    __syncthreads();
    m = sh_m[0]; s = sh_s[0];
    for (int w = 1; w < THREADS / 32; ++w) merge(m, s, sh_m[w], sh_s[w]);
    const float inv = 1.f / s;
    if (vec) {
        const float4* r4 = reinterpret_cast<const float4*>(row);
        float4* o4 = reinterpret_cast<float4*>(out);
        for (int64_t i = threadIdx.x; i < cols / 4; i += THREADS) {
            const float4 v = __ldg(r4 + i);
            o4[i] = make_float4(expf(v.x - m) * inv, expf(v.y - m) * inv, expf(v.z - m) * inv, expf(v.w - m) * inv);
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
