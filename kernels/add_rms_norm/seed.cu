// Residual add + RMS norm over the last dim of row-major (rows, cols) tensors, fused, in the
// form transformers' decoders write it (Llama/Qwen): s = x + residual (rounded to T, as eager
// stores it), h = s in fp32, y = w * (h * rsqrt(mean(h^2) + eps)) rounded to T, then the
// weight multiply rounded again. Eager runs add, casts, pow, mean, add, rsqrt, mul and mul as
// separate kernels; this reads x and residual once and writes y once.
// TPR threads share a row and RPB rows share a block (TPR = 32: a warp per row). A thread
// keeps up to CACHE elements of its row's sum in registers, so the inputs are read once; a
// row too long for the cache is streamed twice (the second read mostly hits L1/L2).
// Loads are VEC elements wide when cols and every pointer allow it, scalar otherwise.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

#if FORGE_DTYPE_BF16
typedef __nv_bfloat16 T;
#else
typedef float T;
#endif
#define EPS 1e-6f

// @tune TPR: 32, 64, 128, 256, 512, 1024
#define TPR 256
// @tune RPB: 1, 2, 4, 8
#define RPB 1
#if FORGE_DTYPE_BF16
// @tune VEC: 2, 4, 8
#define VEC 8
#else
// @tune VEC: 1, 2, 4
#define VEC 4
#endif
// @tune CACHE: 0, 8, 16, 32, 64
#define CACHE 16

#define ROWS ((RPB) * (TPR) > 1024 ? 1024 / (TPR) : (RPB))
#define THREADS ((TPR) * ROWS)
#define NWARPS (THREADS / 32)

template <int V> struct alignas(sizeof(T) * V) TV { T v[V]; };

__device__ __forceinline__ float tof(float a) { return a; }
__device__ __forceinline__ float tof(__nv_bfloat16 a) { return __bfloat162float(a); }
__device__ __forceinline__ void put(float& o, float a) { o = a; }
__device__ __forceinline__ void put(__nv_bfloat16& o, float a) { o = __float2bfloat16_rn(a); }
// a value rounded to T and read back as fp32 (what eager stores between its kernels)
__device__ __forceinline__ float rnd(float a) {
    T t;
    put(t, a);
    return tof(t);
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the TPR threads of this thread's row; every thread of the block must call it.
__device__ __forceinline__ float row_sum(float v, float* sh) {
    v = warp_sum(v);
    if (TPR > 32) {
        if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
        __syncthreads();
        const int first = (threadIdx.x / TPR) * (TPR / 32);
        v = 0.f;
#pragma unroll
        for (int k = 0; k < TPR / 32; ++k) v += sh[first + k];
        __syncthreads();
    }
    return v;
}

template <int V>
__global__ void __launch_bounds__(THREADS)
    add_rms_norm_kernel(const T* __restrict__ x, const T* __restrict__ res, const T* __restrict__ w,
                        T* __restrict__ y, int64_t rows, int64_t cols) {
    __shared__ float sh[NWARPS];
    const int tid = threadIdx.x % TPR;
    const int64_t row = (int64_t)blockIdx.x * ROWS + threadIdx.x / TPR;
    const bool valid = row < rows;
    const int64_t off = (valid ? row : 0) * cols;
    const TV<V>* xr = reinterpret_cast<const TV<V>*>(x + off);
    const TV<V>* rr = reinterpret_cast<const TV<V>*>(res + off);
    const TV<V>* wv = reinterpret_cast<const TV<V>*>(w);
    TV<V>* yr = reinterpret_cast<TV<V>*>(y + off);
    const int64_t nv = cols / V;  // cols % V == 0 whenever V > 1
    const float inv_n = 1.f / (float)cols;
    constexpr int NC = CACHE / V > 0 ? CACHE / V : 1;
    const bool fits = CACHE > 0 && nv <= (int64_t)(CACHE / V) * TPR;  // uniform over the block
    if (fits) {
        float c[NC][V];
        float ss = 0.f;
#pragma unroll
        for (int k = 0; k < NC; ++k) {
            const int64_t i = tid + (int64_t)k * TPR;
            if (valid && i < nv) {
                const TV<V> a = xr[i];
                const TV<V> b = rr[i];
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    c[k][j] = rnd(tof(a.v[j]) + tof(b.v[j]));
                    ss += c[k][j] * c[k][j];
                }
            } else {
#pragma unroll
                for (int j = 0; j < V; ++j) c[k][j] = 0.f;
            }
        }
        const float r = rsqrtf(row_sum(ss, sh) * inv_n + EPS);
#pragma unroll
        for (int k = 0; k < NC; ++k) {
            const int64_t i = tid + (int64_t)k * TPR;
            if (valid && i < nv) {
                const TV<V> g = wv[i];
                TV<V> o;
#pragma unroll
                for (int j = 0; j < V; ++j) put(o.v[j], tof(g.v[j]) * rnd(c[k][j] * r));
                yr[i] = o;
            }
        }
    } else {
        float ss = 0.f;
        if (valid) {
            for (int64_t i = tid; i < nv; i += TPR) {
                const TV<V> a = xr[i];
                const TV<V> b = rr[i];
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    const float s = rnd(tof(a.v[j]) + tof(b.v[j]));
                    ss += s * s;
                }
            }
        }
        const float r = rsqrtf(row_sum(ss, sh) * inv_n + EPS);
        if (valid) {
            for (int64_t i = tid; i < nv; i += TPR) {
                const TV<V> a = xr[i];
                const TV<V> b = rr[i];
                const TV<V> g = wv[i];
                TV<V> o;
#pragma unroll
                for (int j = 0; j < V; ++j) put(o.v[j], tof(g.v[j]) * rnd(rnd(tof(a.v[j]) + tof(b.v[j])) * r));
                yr[i] = o;
            }
        }
    }
}

extern "C" int forge_launch(const T* x, const T* residual, const T* w, T* y, int64_t rows, int64_t cols,
                            cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const uintptr_t a = (uintptr_t)x | (uintptr_t)residual | (uintptr_t)w | (uintptr_t)y;
    const bool vec_ok = VEC > 1 && cols % VEC == 0 && a % (VEC * sizeof(T)) == 0;
    const unsigned grid = (unsigned)((rows + ROWS - 1) / ROWS);
    if (vec_ok)
        add_rms_norm_kernel<VEC><<<grid, THREADS, 0, stream>>>(x, residual, w, y, rows, cols);
    else
        add_rms_norm_kernel<1><<<grid, THREADS, 0, stream>>>(x, residual, w, y, rows, cols);
    return (int)cudaGetLastError();
}
