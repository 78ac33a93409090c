// Seed for the transformer block's attention softmax as `forge-tui capture` makes it a task:
// aten._softmax.default(x0, -1, False) on f32[B x H x S x S] (FORGE_BLOCK_SIZE=large:
// 8 x 16 x 1024 x 1024), so rows = x0_d0 * x0_d1 * x0_d2 and cols = x0_d3, row-major.
//
// A team of TPR threads owns a row. Each thread loads its share of the row into registers
// (VEC-wide loads, CHUNKS of them, all issued before any use), the team reduces the max with
// warp shuffles (plus shared memory across warps when TPR > 32), the registers become
// exp(x - max) in place, the team reduces their sum, and the row is written from registers:
// one exp per element, the row crosses DRAM once each way. BLOCK / TPR rows share a block.
// Rows too long for 32 chunks per thread stream through global memory twice instead.
// STREAMING marks loads and stores evict-first (the row is touched once; keep L2 for others).
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>

// @tune TPR: 32, 64, 128, 256
#define TPR 128
// @tune BLOCK: 128, 256, 512
#define BLOCK 256
// @tune VEC: 1, 2, 4
#define VEC 4
// @tune FAST_EXP: 0, 1
#define FAST_EXP 0
// @tune STREAMING: 0, 1
#define STREAMING 0

#define RPB ((BLOCK / TPR) > 0 ? (BLOCK / TPR) : 1)   // rows per block
#define NTHREADS (RPB * TPR)                           // threads per block
#define WPR ((TPR + 31) / 32)                          // warps per row
#define MAX_CHUNKS 32

__device__ __forceinline__ float ex(float v) {
#if FAST_EXP
    return __expf(v);
#else
    return expf(v);
#endif
}

__device__ __forceinline__ float ld1(const float* p) {
#if STREAMING
    return __ldcs(p);
#else
    return __ldg(p);
#endif
}

__device__ __forceinline__ void st1(float* p, float v) {
#if STREAMING
    __stcs(p, v);
#else
    *p = v;
#endif
}

struct MaxOp { __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct SumOp { __device__ __forceinline__ float operator()(float a, float b) const { return a + b; } };

// Reduce v over the TPR threads of this thread's team; every thread of the team gets the result.
// Called from block-uniform control flow. `sh` holds RPB * WPR floats; the caller alternates two
// buffers between consecutive reductions, so no trailing barrier is needed.
template <typename Op>
__device__ __forceinline__ float team_reduce(float v, float* sh, Op op) {
    constexpr int width = TPR < 32 ? TPR : 32;
#pragma unroll
    for (int o = width / 2; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (TPR > 32) {
        const int team = threadIdx.x / TPR, w = (threadIdx.x % TPR) >> 5;
        if ((threadIdx.x & 31) == 0) sh[team * WPR + w] = v;
        __syncthreads();
        v = sh[team * WPR];
#pragma unroll
        for (int k = 1; k < WPR; ++k) v = op(v, sh[team * WPR + k]);
    }
    return v;
}

// The row in registers: chunk u of thread t covers elements [(u * TPR + t) * VEC, + VEC).
template <int CHUNKS>
__global__ void __launch_bounds__(NTHREADS) softmax_regs(const float* __restrict__ x, float* __restrict__ y,
                                                         int64_t rows, int64_t cols, bool vec_ok) {
    __shared__ float sh_max[RPB * WPR], sh_sum[RPB * WPR];
    const int team = threadIdx.x / TPR, t = threadIdx.x % TPR;
    for (int64_t row0 = (int64_t)blockIdx.x * RPB; row0 < rows; row0 += (int64_t)gridDim.x * RPB) {
        const int64_t row = row0 + team;
        const bool live = row < rows;
        const float* src = x + (live ? row : 0) * cols;
        float r[CHUNKS][VEC];
#pragma unroll
        for (int u = 0; u < CHUNKS; ++u) {
            const int64_t i = ((int64_t)u * TPR + t) * VEC;
            if (VEC == 4 && vec_ok && live && i + 4 <= cols) {
#if STREAMING
                const float4 q = __ldcs(reinterpret_cast<const float4*>(src + i));
#else
                const float4 q = __ldg(reinterpret_cast<const float4*>(src + i));
#endif
                r[u][0] = q.x; r[u][1 % VEC] = q.y; r[u][2 % VEC] = q.z; r[u][3 % VEC] = q.w;
            } else if (VEC == 2 && vec_ok && live && i + 2 <= cols) {
#if STREAMING
                const float2 q = __ldcs(reinterpret_cast<const float2*>(src + i));
#else
                const float2 q = __ldg(reinterpret_cast<const float2*>(src + i));
#endif
                r[u][0] = q.x; r[u][1 % VEC] = q.y;
            } else {
#pragma unroll
                for (int j = 0; j < VEC; ++j) r[u][j] = (live && i + j < cols) ? ld1(src + i + j) : -INFINITY;
            }
        }
        float m = -INFINITY;
#pragma unroll
        for (int u = 0; u < CHUNKS; ++u)
#pragma unroll
            for (int j = 0; j < VEC; ++j) m = fmaxf(m, r[u][j]);
        m = team_reduce(m, sh_max, MaxOp());
        float s = 0.f;
#pragma unroll
        for (int u = 0; u < CHUNKS; ++u)
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                r[u][j] = ex(r[u][j] - m);  // -inf padding becomes 0
                s += r[u][j];
            }
        s = team_reduce(s, sh_sum, SumOp());
        if (!live) continue;  // after both reductions: the barriers stay block-uniform
        const float inv = 1.f / s;
        float* dst = y + row * cols;
#pragma unroll
        for (int u = 0; u < CHUNKS; ++u) {
            const int64_t i = ((int64_t)u * TPR + t) * VEC;
            if (VEC == 4 && vec_ok && i + 4 <= cols) {
                const float4 q = make_float4(r[u][0] * inv, r[u][1 % VEC] * inv, r[u][2 % VEC] * inv,
                                             r[u][3 % VEC] * inv);
#if STREAMING
                __stcs(reinterpret_cast<float4*>(dst + i), q);
#else
                *reinterpret_cast<float4*>(dst + i) = q;
#endif
            } else if (VEC == 2 && vec_ok && i + 2 <= cols) {
                const float2 q = make_float2(r[u][0] * inv, r[u][1 % VEC] * inv);
#if STREAMING
                __stcs(reinterpret_cast<float2*>(dst + i), q);
#else
                *reinterpret_cast<float2*>(dst + i) = q;
#endif
            } else {
#pragma unroll
                for (int j = 0; j < VEC; ++j)
                    if (i + j < cols) st1(dst + i + j, r[u][j] * inv);
            }
        }
    }
}

// Rows longer than MAX_CHUNKS * TPR * VEC: an online (max, sum) pass, then a pass that writes.
__global__ void __launch_bounds__(NTHREADS) softmax_stream(const float* __restrict__ x, float* __restrict__ y,
                                                           int64_t rows, int64_t cols) {
    __shared__ float sh_max[RPB * WPR], sh_sum[RPB * WPR];
    const int team = threadIdx.x / TPR, t = threadIdx.x % TPR;
    for (int64_t row0 = (int64_t)blockIdx.x * RPB; row0 < rows; row0 += (int64_t)gridDim.x * RPB) {
        const int64_t row = row0 + team;
        const bool live = row < rows;
        const float* src = x + (live ? row : 0) * cols;
        float m = -INFINITY, s = 0.f;
        if (live) {
            for (int64_t i = t; i < cols; i += TPR) {
                const float v = ld1(src + i);
                if (v > m) { s = s * ex(m - v) + 1.f; m = v; }
                else s += ex(v - m);
            }
        }
        const float gm = team_reduce(m, sh_max, MaxOp());
        s = team_reduce(m == -INFINITY ? 0.f : s * ex(m - gm), sh_sum, SumOp());
        if (!live) continue;
        const float inv = 1.f / s;
        float* dst = y + row * cols;
        for (int64_t i = t; i < cols; i += TPR) st1(dst + i, ex(ld1(src + i) - gm) * inv);
    }
}

template <int CHUNKS>
static void launch_regs(const float* x, float* y, int64_t rows, int64_t cols, bool vec_ok, cudaStream_t stream) {
    int64_t grid = (rows + RPB - 1) / RPB;
    if (grid > (1 << 30)) grid = 1 << 30;  // the kernel strides over the rest
    softmax_regs<CHUNKS><<<(unsigned)grid, NTHREADS, 0, stream>>>(x, y, rows, cols, vec_ok);
}

extern "C" int forge_launch(const float* x0, float* out, int64_t x0_d0, int64_t x0_d1, int64_t x0_d2,
                            int64_t x0_d3, int64_t out_d0, int64_t out_d1, int64_t out_d2, int64_t out_d3,
                            cudaStream_t stream) {
    if (out_d0 != x0_d0 || out_d1 != x0_d1 || out_d2 != x0_d2 || out_d3 != x0_d3) return 1;
    const int64_t rows = x0_d0 * x0_d1 * x0_d2, cols = x0_d3;
    if (rows <= 0 || cols <= 0) return 0;
    const bool vec_ok = (cols % VEC == 0) && ((uintptr_t)x0 % (VEC * 4) == 0) && ((uintptr_t)out % (VEC * 4) == 0);
    const int64_t per_chunk = (int64_t)TPR * VEC;
    const int64_t chunks = (cols + per_chunk - 1) / per_chunk;
    if (chunks <= 1) launch_regs<1>(x0, out, rows, cols, vec_ok, stream);
    else if (chunks <= 2) launch_regs<2>(x0, out, rows, cols, vec_ok, stream);
    else if (chunks <= 4) launch_regs<4>(x0, out, rows, cols, vec_ok, stream);
    else if (chunks <= 8) launch_regs<8>(x0, out, rows, cols, vec_ok, stream);
    else if (chunks <= 16) launch_regs<16>(x0, out, rows, cols, vec_ok, stream);
    else if (chunks <= MAX_CHUNKS) launch_regs<MAX_CHUNKS>(x0, out, rows, cols, vec_ok, stream);
    else {
        int64_t grid = (rows + RPB - 1) / RPB;
        if (grid > (1 << 30)) grid = 1 << 30;
        softmax_stream<<<(unsigned)grid, NTHREADS, 0, stream>>>(x0, out, rows, cols);
    }
    return (int)cudaGetLastError();
}
