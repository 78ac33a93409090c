// softmax over the last dim of a row-major (rows, cols) fp32 tensor.
// One or more blocks per row. With SPLIT == 1 a block owns a row: one pass computes the
// row's max and sum (online, or two passes when ONLINE == 0), a last pass writes
// exp(x - max) / sum; the re-reads of a row hit L1/L2. With SPLIT > 1, SPLIT blocks share
// a row (for few, long rows that would leave SMs idle): a first launch writes each chunk's
// (max, sum), a second combines them and writes the output.
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>

// @tune BLOCK: 128, 256, 512, 1024
#define BLOCK 256
// @tune VEC: 1, 2, 4
#define VEC 4
// @tune SPLIT: 1, 2, 4, 8, 16, 32
#define SPLIT 1
// @tune ONLINE: 0, 1
#define ONLINE 1

struct MS { float m; float s; };

__device__ __forceinline__ MS ms_combine(MS a, MS b) {
    float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return MS{m, 0.f};
    return MS{m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ MS ms_add(MS a, float x) {
    if (x > a.m) return MS{x, a.s * expf(a.m - x) + 1.f};
    return MS{a.m, a.s + expf(x - a.m)};
}

__device__ __forceinline__ MS warp_reduce(MS v) {
    for (int o = 16; o > 0; o >>= 1) {
        MS w{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
        v = ms_combine(v, w);
    }
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ MS block_reduce(MS v) {
    __shared__ MS sh[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    v = warp_reduce(v);
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    if (wid == 0) {
        v = lane < BLOCK / 32 ? sh[lane] : MS{-INFINITY, 0.f};
        v = warp_reduce(v);
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    MS r = sh[0];
    __syncthreads();
    return r;
}

__device__ float block_max(float v) {
    __shared__ float sh[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    v = warp_max(v);
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    if (wid == 0) {
        v = lane < BLOCK / 32 ? sh[lane] : -INFINITY;
        v = warp_max(v);
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    float r = sh[0];
    __syncthreads();
    return r;
}

__device__ float block_sum(float v) {
    __shared__ float sh[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    if (wid == 0) {
        v = lane < BLOCK / 32 ? sh[lane] : 0.f;
        v = warp_sum(v);
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    float r = sh[0];
    __syncthreads();
    return r;
}

// Visit x[begin, end) of one row: f(value) for each element, VEC-wide loads when aligned.
template <typename F>
__device__ __forceinline__ void visit(const float* __restrict__ row, int64_t begin, int64_t end, bool vec_ok, F f) {
    if (VEC > 1 && vec_ok) {
        for (int64_t i = begin + (int64_t)threadIdx.x * VEC; i < end; i += (int64_t)BLOCK * VEC) {
            if (VEC == 4) {
                float4 v = *reinterpret_cast<const float4*>(row + i);
                f(v.x); f(v.y); f(v.z); f(v.w);
            } else {
                float2 v = *reinterpret_cast<const float2*>(row + i);
                f(v.x); f(v.y);
            }
        }
    } else {
        for (int64_t i = begin + threadIdx.x; i < end; i += BLOCK) f(row[i]);
    }
}

__device__ MS chunk_stats(const float* __restrict__ row, int64_t begin, int64_t end, bool vec_ok) {
#if ONLINE
    MS acc{-INFINITY, 0.f};
    visit(row, begin, end, vec_ok, [&](float x) { acc = ms_add(acc, x); });
    return block_reduce(acc);
#else
    float m = -INFINITY;
    visit(row, begin, end, vec_ok, [&](float x) { m = fmaxf(m, x); });
    m = block_max(m);
    float s = 0.f;
    visit(row, begin, end, vec_ok, [&](float x) { s += expf(x - m); });
    s = block_sum(s);
    return MS{m, s};
#endif
}

__device__ void chunk_write(const float* __restrict__ row, float* __restrict__ out, int64_t begin, int64_t end,
                            bool vec_ok, float m, float inv) {
    if (VEC > 1 && vec_ok) {
        for (int64_t i = begin + (int64_t)threadIdx.x * VEC; i < end; i += (int64_t)BLOCK * VEC) {
            if (VEC == 4) {
                float4 v = *reinterpret_cast<const float4*>(row + i);
                v.x = expf(v.x - m) * inv; v.y = expf(v.y - m) * inv;
                v.z = expf(v.z - m) * inv; v.w = expf(v.w - m) * inv;
                *reinterpret_cast<float4*>(out + i) = v;
            } else {
                float2 v = *reinterpret_cast<const float2*>(row + i);
                v.x = expf(v.x - m) * inv; v.y = expf(v.y - m) * inv;
                *reinterpret_cast<float2*>(out + i) = v;
            }
        }
    } else {
        for (int64_t i = begin + threadIdx.x; i < end; i += BLOCK) out[i] = expf(row[i] - m) * inv;
    }
}

__device__ __forceinline__ void chunk_bounds(int64_t cols, int b, int64_t* begin, int64_t* end) {
    int64_t chunk = (cols + SPLIT - 1) / SPLIT;
    chunk = (chunk + VEC - 1) / VEC * VEC;
    *begin = min((int64_t)b * chunk, cols);
    *end = min(*begin + chunk, cols);
}

__global__ void __launch_bounds__(BLOCK) softmax_row(const float* __restrict__ x, float* __restrict__ y,
                                                     int64_t cols, bool vec_ok) {
    const int64_t r = blockIdx.x;
    const float* row = x + r * cols;
    MS st = chunk_stats(row, 0, cols, vec_ok);
    chunk_write(row, y + r * cols, 0, cols, vec_ok, st.m, 1.f / st.s);
}

__global__ void __launch_bounds__(BLOCK) softmax_partial(const float* __restrict__ x, MS* __restrict__ part,
                                                         int64_t cols, bool vec_ok) {
    const int64_t r = blockIdx.y;
    int64_t begin, end;
    chunk_bounds(cols, blockIdx.x, &begin, &end);
    MS st = chunk_stats(x + r * cols, begin, end, vec_ok);
    if (threadIdx.x == 0) part[r * SPLIT + blockIdx.x] = st;
}

__global__ void __launch_bounds__(BLOCK) softmax_finish(const float* __restrict__ x, const MS* __restrict__ part,
                                                        float* __restrict__ y, int64_t cols, bool vec_ok) {
    const int64_t r = blockIdx.y;
    MS st{-INFINITY, 0.f};
    for (int i = 0; i < SPLIT; ++i) st = ms_combine(st, part[r * SPLIT + i]);
    int64_t begin, end;
    chunk_bounds(cols, blockIdx.x, &begin, &end);
    chunk_write(x + r * cols, y + r * cols, begin, end, vec_ok, st.m, 1.f / st.s);
}

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const bool vec_ok = (cols % VEC == 0) && ((uintptr_t)x % (VEC * 4) == 0) && ((uintptr_t)y % (VEC * 4) == 0);
    if (SPLIT == 1) {
        softmax_row<<<(unsigned)rows, BLOCK, 0, stream>>>(x, y, cols, vec_ok);
        return (int)cudaGetLastError();
    }
    static MS* part = nullptr;
    static size_t cap = 0;
    const size_t need = (size_t)rows * SPLIT;
    if (need > cap) {
        if (part) cudaFree(part);
        if (cudaMalloc(&part, need * sizeof(MS)) != cudaSuccess) { part = nullptr; cap = 0; return 2; }
        cap = need;
    }
    dim3 grid(SPLIT, (unsigned)rows);
    softmax_partial<<<grid, BLOCK, 0, stream>>>(x, part, cols, vec_ok);
    softmax_finish<<<grid, BLOCK, 0, stream>>>(x, part, y, cols, vec_ok);
    return (int)cudaGetLastError();
}
