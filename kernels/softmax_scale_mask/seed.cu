#if FORGE_MASK
// softmax(x * SCALE + mask) over the last dim of attention scores x, seen as a row-major
// (rows, cols) matrix: rows = B*H*Sq, cols = Sk. The mask is additive (-inf hides a key) and
// holds the (Sq, Sk) block once per mrep consecutive (Sq, Sk) blocks of x: a (B, 1, Sq, Sk)
// mask under (B, H, Sq, Sk) scores has mrep = H, a (Sq, Sk) one mrep = B*H, a full one 1.
// Row r reads mask row ((r / q) / mrep) * q + r % q, with q = Sq. With SKIP_MASKED a vector
// whose mask entries are all -inf does not read x (its probabilities are 0 whatever x holds,
// NaN and inf scores aside): a causal mask hides about half of x.
#else
// softmax(x * SCALE) over the last dim of attention scores x, seen as a row-major (rows, cols)
// matrix: rows = B*H*Sq, cols = Sk.
#endif
#if FORGE_DTYPE_BF16
// bf16 in and out, math in fp32, outputs rounded to nearest even.
#endif
// One fused pass: eager runs the scale, the mask add and the softmax as separate kernels.
// TPR threads share a row and RPB rows share a block (TPR = 32: a warp per row, no shared
// memory). A thread keeps up to CACHE elements of its row in registers, so the row is read
// once: max, then exp(v - max) kept in place and summed, then the scaled store. A row too
// long for the cache is streamed twice: an online (max, sum) pass, then the store pass.
// The max is subtracted before exp (large scores stay finite). exp is exp2f((v - m) *
// log2 e) (exp2f: 2 ulp, CUDA C Programming Guide, "Mathematical Functions"); v - m is
// formed first. A row whose entries are all -inf gives NaN, as torch.softmax does.
// Loads are VEC elements wide when cols and every pointer allow it, scalar otherwise.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>

#if FORGE_DTYPE_BF16
typedef __nv_bfloat16 T;
#else
typedef float T;
#endif
#if FORGE_MASK
#define MASK 1
#else
#define MASK 0
#endif
#define SCALE 0.125f

// @tune TPR: 32, 64, 128, 256, 512, 1024
#define TPR 32
// @tune RPB: 1, 2, 4, 8
#define RPB 4
#if FORGE_DTYPE_BF16
// @tune VEC: 2, 4, 8
#define VEC 8
#else
// @tune VEC: 1, 2, 4
#define VEC 4
#endif
// @tune CACHE: 0, 8, 16, 32, 64
#define CACHE 32
#if FORGE_MASK
// @tune SKIP_MASKED: 0, 1
#define SKIP_MASKED 1
#else
#define SKIP_MASKED 0
#endif

#define ROWS ((RPB) * (TPR) > 1024 ? 1024 / (TPR) : (RPB))
#define THREADS ((TPR) * ROWS)
#define NWARPS (THREADS / 32)
#define LOG2E 1.4426950408889634f

template <int V> struct alignas(sizeof(T) * V) TV { T v[V]; };

__device__ __forceinline__ float tof(float a) { return a; }
__device__ __forceinline__ float tof(__nv_bfloat16 a) { return __bfloat162float(a); }
__device__ __forceinline__ void put(float& o, float a) { o = a; }
__device__ __forceinline__ void put(__nv_bfloat16& o, float a) { o = __float2bfloat16_rn(a); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum (MAX: max) over the TPR threads of this thread's row; every thread of the block must call it.
template <bool MAX>
__device__ __forceinline__ float row_reduce(float v, float* sh) {
    v = MAX ? warp_max(v) : warp_sum(v);
    if (TPR > 32) {
        if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
        __syncthreads();
        const int first = (threadIdx.x / TPR) * (TPR / 32);
        v = sh[first];
#pragma unroll
        for (int k = 1; k < TPR / 32; ++k) v = MAX ? fmaxf(v, sh[first + k]) : v + sh[first + k];
        __syncthreads();
    }
    return v;
}

// The scaled (and masked) scores of vector i of the row: x * SCALE (+ mask).
template <int V>
__device__ __forceinline__ void load(const T* __restrict__ xr, const T* __restrict__ mr, int64_t i, float (&v)[V]) {
    if (MASK) {
        const TV<V> m = reinterpret_cast<const TV<V>*>(mr)[i];
        if (SKIP_MASKED) {
            bool hidden = true;
#pragma unroll
            for (int j = 0; j < V; ++j) hidden = hidden && tof(m.v[j]) == -INFINITY;
            if (hidden) {
#pragma unroll
                for (int j = 0; j < V; ++j) v[j] = -INFINITY;
                return;
            }
        }
        const TV<V> t = reinterpret_cast<const TV<V>*>(xr)[i];
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = fmaf(tof(t.v[j]), SCALE, tof(m.v[j]));
    } else {
        const TV<V> t = reinterpret_cast<const TV<V>*>(xr)[i];
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = tof(t.v[j]) * SCALE;
    }
}

// mask: the (q, cols) blocks (unused without MASK); q, mrep: see the header.
template <int V>
__global__ void __launch_bounds__(THREADS) softmax_kernel(const T* __restrict__ x, const T* __restrict__ mask,
                                                          T* __restrict__ y, int64_t rows, int64_t cols, int64_t q,
                                                          int64_t mrep) {
    __shared__ float sh[NWARPS];
    const int tid = threadIdx.x % TPR;
    const int64_t row = (int64_t)blockIdx.x * ROWS + threadIdx.x / TPR;
    const bool valid = row < rows;
    const int64_t r = valid ? row : 0;
    const T* xr = x + r * cols;
    const T* mr = MASK ? mask + ((r / q) / mrep * q + r % q) * cols : nullptr;
    T* yr = y + r * cols;
    const int64_t nv = cols / V;  // cols % V == 0 whenever V > 1
    constexpr int NC = CACHE / V > 0 ? CACHE / V : 1;
    const bool fits = CACHE > 0 && nv <= (int64_t)(CACHE / V) * TPR;  // uniform over the block
    if (fits) {
        float c[NC][V];
        float m = -INFINITY;
#pragma unroll
        for (int k = 0; k < NC; ++k) {
            const int64_t i = tid + (int64_t)k * TPR;
            if (valid && i < nv) {
                load<V>(xr, mr, i, c[k]);
#pragma unroll
                for (int j = 0; j < V; ++j) m = fmaxf(m, c[k][j]);
            } else {
#pragma unroll
                for (int j = 0; j < V; ++j) c[k][j] = -INFINITY;
            }
        }
        m = row_reduce<true>(m, sh);
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < NC; ++k)
#pragma unroll
            for (int j = 0; j < V; ++j) {
                c[k][j] = exp2f((c[k][j] - m) * LOG2E);  // -inf -> 0; NaN when the whole row is -inf
                s += c[k][j];
            }
        const float inv = 1.f / row_reduce<false>(s, sh);
#pragma unroll
        for (int k = 0; k < NC; ++k) {
            const int64_t i = tid + (int64_t)k * TPR;
            if (valid && i < nv) {
                TV<V> o;
#pragma unroll
                for (int j = 0; j < V; ++j) put(o.v[j], c[k][j] * inv);
                reinterpret_cast<TV<V>*>(yr)[i] = o;
            }
        }
    } else {
        // online (max, sum) of this thread's elements: s is the sum of exp(v - m)
        float m = -INFINITY, s = 0.f;
        if (valid) {
            for (int64_t i = tid; i < nv; i += TPR) {
                float v[V];
                load<V>(xr, mr, i, v);
                float vm = v[0];
#pragma unroll
                for (int j = 1; j < V; ++j) vm = fmaxf(vm, v[j]);
                if (vm > m) {
                    s *= exp2f((m - vm) * LOG2E);  // m = -inf: s is 0 and stays 0
                    m = vm;
                }
                if (m != -INFINITY) {
#pragma unroll
                    for (int j = 0; j < V; ++j) s += exp2f((v[j] - m) * LOG2E);
                }
            }
        }
        const float mall = row_reduce<true>(m, sh);
        s = m == -INFINITY ? 0.f : s * exp2f((m - mall) * LOG2E);
        const float inv = 1.f / row_reduce<false>(s, sh);
        if (valid) {
            for (int64_t i = tid; i < nv; i += TPR) {
                float v[V];
                load<V>(xr, mr, i, v);
                TV<V> o;
#pragma unroll
                for (int j = 0; j < V; ++j) put(o.v[j], exp2f((v[j] - mall) * LOG2E) * inv);
                reinterpret_cast<TV<V>*>(yr)[i] = o;
            }
        }
    }
}

static int launch(const T* x, const T* mask, T* y, int64_t rows, int64_t cols, int64_t q, int64_t mrep,
                  cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    uintptr_t a = (uintptr_t)x | (uintptr_t)y;
    if (MASK) a |= (uintptr_t)mask;
    const bool vec_ok = VEC > 1 && cols % VEC == 0 && a % (VEC * sizeof(T)) == 0;
    const unsigned grid = (unsigned)((rows + ROWS - 1) / ROWS);
    if (vec_ok)
        softmax_kernel<VEC><<<grid, THREADS, 0, stream>>>(x, mask, y, rows, cols, q, mrep);
    else
        softmax_kernel<1><<<grid, THREADS, 0, stream>>>(x, mask, y, rows, cols, q, mrep);
    return (int)cudaGetLastError();
}

#if FORGE_MASK
// q: Sq (x's second-to-last dim); mrep: numel(x) / numel(mask). Returns 1 when they do not
// describe a mask of whole (q, cols) blocks.
extern "C" int forge_launch(const T* x, const T* mask, T* y, int64_t rows, int64_t cols, int64_t q, int64_t mrep,
                            cudaStream_t stream) {
    if (rows > 0 && (q <= 0 || mrep <= 0 || rows % q != 0 || (rows / q) % mrep != 0)) return 1;
    return launch(x, mask, y, rows, cols, q, mrep, stream);
}
#else
extern "C" int forge_launch(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    return launch(x, nullptr, y, rows, cols, 1, 1, stream);
}
#endif
