#if FORGE_DTYPE_BF16
// layer_norm over the last dim of a row-major (rows, cols) bf16 tensor with weight and bias:
#else
// layer_norm over the last dim of a row-major (rows, cols) tensor with weight and bias:
#endif
// y = (x - mean) * rsqrt(var + eps) * w + b, statistics in fp32.
#if FORGE_LN_GELU
#if FORGE_GELU_TANH
// Then GELU (tanh approximation) of y in the same pass: LayerNorm + GELU read x once and
// write once, where eager runs two kernels and a round trip of y through memory.
#else
// Then GELU (exact, erf) of y in the same pass: LayerNorm + GELU read x once and write
// once, where eager runs two kernels and a round trip of y through memory.
#endif
#endif
// TPR threads share a row and RPB rows share a block (TPR = 32: a warp per row). A thread
// keeps up to CACHE elements of its row in registers, so the row is read from memory once;
// a row too long for the cache is streamed (re-reads hit L1/L2). ONE_PASS reduces sum and
// sum of squares together (one block reduction); else mean first, then the centred variance.
// Loads are VEC elements wide when cols and every pointer allow it, scalar otherwise.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

#if FORGE_DTYPE_BF16
typedef __nv_bfloat16 T;
#else
typedef float T;
#endif
#define EPS 1e-5f

// @tune TPR: 32, 64, 128, 256, 512, 1024
#if FORGE_LN_GELU
#define TPR 128
#else
#define TPR 256
#endif
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
#if FORGE_LN_GELU
#define CACHE 32
#else
#define CACHE 16
#endif
// @tune ONE_PASS: 0, 1
#define ONE_PASS 0

#define ROWS ((RPB) * (TPR) > 1024 ? 1024 / (TPR) : (RPB))
#define THREADS ((TPR) * ROWS)
#define NWARPS (THREADS / 32)

template <int V> struct alignas(sizeof(T) * V) TV { T v[V]; };

__device__ __forceinline__ float tof(float a) { return a; }
__device__ __forceinline__ float tof(__nv_bfloat16 a) { return __bfloat162float(a); }
__device__ __forceinline__ void put(float& o, float a) { o = a; }
__device__ __forceinline__ void put(__nv_bfloat16& o, float a) { o = __float2bfloat16_rn(a); }

#if FORGE_LN_GELU
#if FORGE_GELU_TANH
// 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))), torch.nn.functional.gelu(approximate="tanh").
__device__ __forceinline__ float act(float v) {
    return 0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}
#else
// 0.5 v (1 + erf(v / sqrt 2)), torch.nn.functional.gelu (exact).
__device__ __forceinline__ float act(float v) { return 0.5f * v * (1.f + erff(v * 0.7071067811865476f)); }
#endif
#endif

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

__device__ __forceinline__ float2 row_sum2(float a, float b, float* sh) {
    a = warp_sum(a);
    b = warp_sum(b);
    if (TPR > 32) {
        if ((threadIdx.x & 31) == 0) { sh[threadIdx.x >> 5] = a; sh[NWARPS + (threadIdx.x >> 5)] = b; }
        __syncthreads();
        const int first = (threadIdx.x / TPR) * (TPR / 32);
        a = 0.f; b = 0.f;
#pragma unroll
        for (int k = 0; k < TPR / 32; ++k) { a += sh[first + k]; b += sh[NWARPS + first + k]; }
        __syncthreads();
    }
    return make_float2(a, b);
}

template <int V>
__global__ void __launch_bounds__(THREADS) layer_norm_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                                             const T* __restrict__ b, T* __restrict__ y,
                                                             int64_t rows, int64_t cols) {
    __shared__ float sh[2 * NWARPS];
    const int tid = threadIdx.x % TPR;
    const int64_t row = (int64_t)blockIdx.x * ROWS + threadIdx.x / TPR;
    const bool valid = row < rows;
    const T* xr = x + (valid ? row : 0) * cols;
    T* yr = y + (valid ? row : 0) * cols;
    const int64_t nv = cols / V;  // cols % V == 0 whenever V > 1
    const float inv_n = 1.f / (float)cols;
    constexpr int NC = CACHE / V > 0 ? CACHE / V : 1;
    const bool fits = CACHE > 0 && nv <= (int64_t)(CACHE / V) * TPR;  // uniform over the block
    float mean, rstd;
    if (fits) {
        float c[NC][V];
        float s = 0.f, ss = 0.f;
#pragma unroll
        for (int k = 0; k < NC; ++k) {
            const int64_t i = tid + (int64_t)k * TPR;
            if (valid && i < nv) {
                TV<V> t = reinterpret_cast<const TV<V>*>(xr)[i];
#pragma unroll
                for (int j = 0; j < V; ++j) { c[k][j] = tof(t.v[j]); s += c[k][j]; ss += c[k][j] * c[k][j]; }
            } else {
#pragma unroll
                for (int j = 0; j < V; ++j) c[k][j] = 0.f;
            }
        }
#if ONE_PASS
        float2 r = row_sum2(s, ss, sh);
        mean = r.x * inv_n;
        rstd = rsqrtf(fmaxf(r.y * inv_n - mean * mean, 0.f) + EPS);
#else
        mean = row_sum(s, sh) * inv_n;
        float d = 0.f;
#pragma unroll
        for (int k = 0; k < NC; ++k) {
            const int64_t i = tid + (int64_t)k * TPR;
            if (valid && i < nv) {
#pragma unroll
                for (int j = 0; j < V; ++j) { const float t = c[k][j] - mean; d += t * t; }
            }
        }
        rstd = rsqrtf(row_sum(d, sh) * inv_n + EPS);
#endif
#pragma unroll
        for (int k = 0; k < NC; ++k) {
            const int64_t i = tid + (int64_t)k * TPR;
            if (valid && i < nv) {
                const TV<V> wv = reinterpret_cast<const TV<V>*>(w)[i];
                const TV<V> bv = reinterpret_cast<const TV<V>*>(b)[i];
                TV<V> o;
#pragma unroll
#if FORGE_LN_GELU
                for (int j = 0; j < V; ++j) put(o.v[j], act((c[k][j] - mean) * rstd * tof(wv.v[j]) + tof(bv.v[j])));
#else
                for (int j = 0; j < V; ++j) put(o.v[j], (c[k][j] - mean) * rstd * tof(wv.v[j]) + tof(bv.v[j]));
#endif
                reinterpret_cast<TV<V>*>(yr)[i] = o;
            }
        }
    } else {
        float s = 0.f, ss = 0.f;
        if (valid) {
            for (int64_t i = tid; i < nv; i += TPR) {
                TV<V> t = reinterpret_cast<const TV<V>*>(xr)[i];
#pragma unroll
                for (int j = 0; j < V; ++j) { const float f = tof(t.v[j]); s += f; ss += f * f; }
            }
        }
#if ONE_PASS
        float2 r = row_sum2(s, ss, sh);
        mean = r.x * inv_n;
        rstd = rsqrtf(fmaxf(r.y * inv_n - mean * mean, 0.f) + EPS);
#else
        mean = row_sum(s, sh) * inv_n;
        float d = 0.f;
        if (valid) {
            for (int64_t i = tid; i < nv; i += TPR) {
                TV<V> t = reinterpret_cast<const TV<V>*>(xr)[i];
#pragma unroll
                for (int j = 0; j < V; ++j) { const float f = tof(t.v[j]) - mean; d += f * f; }
            }
        }
        rstd = rsqrtf(row_sum(d, sh) * inv_n + EPS);
#endif
        if (valid) {
            for (int64_t i = tid; i < nv; i += TPR) {
                const TV<V> t = reinterpret_cast<const TV<V>*>(xr)[i];
                const TV<V> wv = reinterpret_cast<const TV<V>*>(w)[i];
                const TV<V> bv = reinterpret_cast<const TV<V>*>(b)[i];
                TV<V> o;
#pragma unroll
#if FORGE_LN_GELU
                for (int j = 0; j < V; ++j) put(o.v[j], act((tof(t.v[j]) - mean) * rstd * tof(wv.v[j]) + tof(bv.v[j])));
#else
                for (int j = 0; j < V; ++j) put(o.v[j], (tof(t.v[j]) - mean) * rstd * tof(wv.v[j]) + tof(bv.v[j]));
#endif
                reinterpret_cast<TV<V>*>(yr)[i] = o;
            }
        }
    }
}

extern "C" int forge_launch(const T* x, const T* w, const T* b, T* y, int64_t rows, int64_t cols,
                            cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const uintptr_t a = (uintptr_t)x | (uintptr_t)w | (uintptr_t)b | (uintptr_t)y;
    const bool vec_ok = VEC > 1 && cols % VEC == 0 && a % (VEC * sizeof(T)) == 0;
    const unsigned grid = (unsigned)((rows + ROWS - 1) / ROWS);
    if (vec_ok)
        layer_norm_kernel<VEC><<<grid, THREADS, 0, stream>>>(x, w, b, y, rows, cols);
    else
        layer_norm_kernel<1><<<grid, THREADS, 0, stream>>>(x, w, b, y, rows, cols);
    return (int)cudaGetLastError();
}
