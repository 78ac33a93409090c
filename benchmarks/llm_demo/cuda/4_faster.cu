// llm-demo: 4_faster
// softmax over the last dim of a row-major (rows, cols) fp32 tensor, faster than one strided
// block per row:
// - rows of up to 8192 floats (cols % 4 == 0, 16-byte aligned) stay in registers: each of
//   512 threads loads up to 4 float4 (all loads issued before any use), the block reduces the
//   max and then the sum of exp(x - max) with warp shuffles plus one shared-memory step, and
//   the row is written from registers. It crosses DRAM once each way, one exp per element.
// - longer rows (and rows that cannot be read as float4): 1024 threads, an online (max, sum)
//   pass with 4 float4 loads in flight per thread, then a write pass that walks the row
//   backwards, so it starts on what the first pass read last (still in L2).
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>

#define REG_THREADS 512
#define STREAM_THREADS 1024

template <int THREADS>
__device__ __forceinline__ float block_max(float v, float* sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    v = sh[0];
#pragma unroll
    for (int w = 1; w < THREADS / 32; ++w) v = fmaxf(v, sh[w]);
    return v;
}

template <int THREADS>
__device__ __forceinline__ float block_sum(float v, float* sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    v = 0.f;
#pragma unroll
    for (int w = 0; w < THREADS / 32; ++w) v += sh[w];
    return v;
}

// ITEMS float4 per thread; n4 = cols / 4 <= ITEMS * REG_THREADS.
template <int ITEMS>
__global__ void __launch_bounds__(REG_THREADS) softmax_regs(const float* __restrict__ x, float* __restrict__ y,
                                                            int64_t cols) {
    __shared__ float sh_m[REG_THREADS / 32], sh_s[REG_THREADS / 32];
    const float4* r4 = reinterpret_cast<const float4*>(x + (int64_t)blockIdx.x * cols);
    float4* o4 = reinterpret_cast<float4*>(y + (int64_t)blockIdx.x * cols);
    const int n4 = (int)(cols / 4);
    float4 v[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int i = k * REG_THREADS + threadIdx.x;
        v[k] = i < n4 ? __ldg(r4 + i) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) m = fmaxf(m, fmaxf(fmaxf(v[k].x, v[k].y), fmaxf(v[k].z, v[k].w)));
    m = block_max<REG_THREADS>(m, sh_m);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {  // padding: exp(-inf - m) = 0
        v[k].x = expf(v[k].x - m); v[k].y = expf(v[k].y - m); v[k].z = expf(v[k].z - m); v[k].w = expf(v[k].w - m);
        s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    }
    s = block_sum<REG_THREADS>(s, sh_s);
    const float inv = 1.f / s;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int i = k * REG_THREADS + threadIdx.x;
        if (i < n4) o4[i] = make_float4(v[k].x * inv, v[k].y * inv, v[k].z * inv, v[k].w * inv);
    }
}

__device__ __forceinline__ void push(float& m, float& s, float v) {
    if (v > m) { s = s * expf(m - v) + 1.f; m = v; }
    else s += expf(v - m);
}

__device__ __forceinline__ void push4(float& m, float& s, float4 v) {
    const float mm = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    if (mm == -INFINITY) return;  // all -inf so far: nothing to add
    s = s * expf(m - mm) + ((expf(v.x - mm) + expf(v.y - mm)) + (expf(v.z - mm) + expf(v.w - mm)));
    m = mm;
}

__global__ void __launch_bounds__(STREAM_THREADS) softmax_stream(const float* __restrict__ x, float* __restrict__ y,
                                                                 int64_t cols, bool vec) {
    __shared__ float sh_m[STREAM_THREADS / 32], sh_s[STREAM_THREADS / 32];
    const float* row = x + (int64_t)blockIdx.x * cols;
    float* out = y + (int64_t)blockIdx.x * cols;
    const int64_t T = STREAM_THREADS;
    float m = -INFINITY, s = 0.f;
    if (vec) {
        const float4* r4 = reinterpret_cast<const float4*>(row);
        const int64_t n4 = cols / 4;
        int64_t i = threadIdx.x;
        for (; i + 3 * T < n4; i += 4 * T) {
            const float4 a = __ldg(r4 + i), b = __ldg(r4 + i + T), c = __ldg(r4 + i + 2 * T), d = __ldg(r4 + i + 3 * T);
            push4(m, s, a); push4(m, s, b); push4(m, s, c); push4(m, s, d);
        }
        for (; i < n4; i += T) push4(m, s, __ldg(r4 + i));
    } else {
        for (int64_t i = threadIdx.x; i < cols; i += T) push(m, s, __ldg(row + i));
    }
    // block (max, sum): the max first, then every thread rescales its sum to it
    const float gm = block_max<STREAM_THREADS>(m, sh_m);
    s = block_sum<STREAM_THREADS>(m == -INFINITY ? 0.f : s * expf(m - gm), sh_s);
    const float inv = 1.f / s;
    if (vec) {
        const float4* r4 = reinterpret_cast<const float4*>(row);
        float4* o4 = reinterpret_cast<float4*>(out);
        const int64_t n4 = cols / 4;
        for (int64_t base = ((n4 - 1) / T) * T; base >= 0; base -= T) {
            const int64_t i = base + threadIdx.x;
            if (i < n4) {
                const float4 v = __ldg(r4 + i);
                o4[i] = make_float4(expf(v.x - gm) * inv, expf(v.y - gm) * inv, expf(v.z - gm) * inv,
                                    expf(v.w - gm) * inv);
            }
        }
    } else {
        for (int64_t base = ((cols - 1) / T) * T; base >= 0; base -= T) {
            const int64_t i = base + threadIdx.x;
            if (i < cols) out[i] = expf(row[i] - gm) * inv;
        }
    }
}

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    if (rows > 0x7fffffffLL) return 1;
    const bool vec = cols % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0;
    const int64_t n4 = cols / 4;
    const unsigned grid = (unsigned)rows;
    if (vec && n4 <= REG_THREADS) softmax_regs<1><<<grid, REG_THREADS, 0, stream>>>(x, y, cols);
    else if (vec && n4 <= 2 * REG_THREADS) softmax_regs<2><<<grid, REG_THREADS, 0, stream>>>(x, y, cols);
    else if (vec && n4 <= 4 * REG_THREADS) softmax_regs<4><<<grid, REG_THREADS, 0, stream>>>(x, y, cols);
    else softmax_stream<<<grid, STREAM_THREADS, 0, stream>>>(x, y, cols, vec);
    return (int)cudaGetLastError();
}
