// BatchNorm in eval mode then ReLU over a contiguous NCHW fp32 tensor, fused (ResNet's
// conv -> bn -> relu); the residual variant adds the block's shortcut before the ReLU
// (bn3 -> += identity -> relu). Per channel c: scale = w[c] * rsqrt(running_var[c] + eps),
// shift = b[c] - running_mean[c] * scale, computed in the kernel (nothing is precomputed
// outside the launch); y = relu(x * scale + shift [+ residual]), one read of each input and
// one write of y.
// The tensor is walked flat, VEC elements per load, UNROLL loads in flight per thread. A
// vector may straddle two (n, c) planes of HW elements (HW = 49 is not a multiple of 4), so
// each element takes the channel of its own plane; the vector path needs HW >= VEC, numel a
// multiple of VEC and 16-byte-aligned pointers, else the scalar path runs. The plane and the
// channel of an element come from a multiply-high division by HW and C (PyTorch's IntDivider,
// Granlund-Montgomery) while numel < 2^31, 64-bit division otherwise. ReLU keeps a NaN.
#include <cuda_runtime.h>
#include <stdint.h>

typedef float T;  // torchvision's ResNet-50 runs fp32
#define EPS 1e-5f

// @tune THREADS: 128, 256, 512, 1024
#define THREADS 256
// @tune VEC: 1, 2, 4
#define VEC 4
// @tune UNROLL: 1, 2, 4, 8
#define UNROLL 4

// n / d for n < 2^31 and 1 <= d < 2^31: q = (umulhi(n, m) + n) >> s with s = ceil(log2 d),
// m = floor(2^32 (2^s - d) / d) + 1.
struct FastDiv {
    uint32_t m, s;
};

static FastDiv make_div(uint32_t d) {
    uint32_t s = 0;
    while (s < 32 && (1ull << s) < d) ++s;
    const uint64_t m = ((1ull << 32) * ((1ull << s) - d)) / d + 1;
    return FastDiv{(uint32_t)m, s};
}

template <bool SMALL>
__device__ __forceinline__ int64_t divide(int64_t n, int64_t d, FastDiv f) {
    if (SMALL) return (int64_t)((__umulhi((uint32_t)n, f.m) + (uint32_t)n) >> f.s);
    return n / d;
}

template <int V> struct alignas(sizeof(T) * V) FV { T v[V]; };

__device__ __forceinline__ void coef(int64_t c, const T* __restrict__ w, const T* __restrict__ b,
                                     const T* __restrict__ mean, const T* __restrict__ var, float& sc,
                                     float& sh) {
    sc = __ldg(w + c) * rsqrtf(__ldg(var + c) + EPS);
    sh = __ldg(b + c) - __ldg(mean + c) * sc;
}

__device__ __forceinline__ float relu(float a) { return a < 0.f ? 0.f : a; }

template <int V, bool SMALL>
__global__ void __launch_bounds__(THREADS)
    bn_relu_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                   const T* __restrict__ mean, const T* __restrict__ var, const T* __restrict__ res,
                   T* __restrict__ y, int64_t nvec, int64_t C, int64_t HW, FastDiv dhw, FastDiv dc) {
    const int64_t first = (int64_t)blockIdx.x * (THREADS * UNROLL) + threadIdx.x;
    FV<V> a[UNROLL];
#if FORGE_BN_ADD
    FV<V> r[UNROLL];
#endif
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {  // every load first: UNROLL of them in flight
        const int64_t i = first + (int64_t)u * THREADS;
        if (i < nvec) {
            a[u] = reinterpret_cast<const FV<V>*>(x)[i];
#if FORGE_BN_ADD
            r[u] = reinterpret_cast<const FV<V>*>(res)[i];
#endif
        }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const int64_t i = first + (int64_t)u * THREADS;
        if (i >= nvec) break;
        const int64_t e = i * V;  // flat index of the vector's first element
        const int64_t plane = divide<SMALL>(e, HW, dhw);
        const int64_t off = e - plane * HW;  // its position in the plane
        const int64_t c0 = plane - divide<SMALL>(plane, C, dc) * C;
        float s0, t0, s1, t1;
        coef(c0, w, b, mean, var, s0, t0);
        s1 = s0;
        t1 = t0;
        if (V > 1 && off + V > HW) coef(c0 + 1 == C ? 0 : c0 + 1, w, b, mean, var, s1, t1);  // next plane
        FV<V> o;
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const bool same = off + j < HW;
            float v = fmaf(a[u].v[j], same ? s0 : s1, same ? t0 : t1);
#if FORGE_BN_ADD
            v += r[u].v[j];
#endif
            o.v[j] = relu(v);
        }
        reinterpret_cast<FV<V>*>(y)[i] = o;
    }
}

template <int V>
static void launch(const T* x, const T* w, const T* b, const T* mean, const T* var,
                   const T* res, T* y, int64_t numel, int64_t C, int64_t HW, cudaStream_t stream) {
    const int64_t nvec = numel / V;
    const unsigned grid = (unsigned)((nvec + THREADS * UNROLL - 1) / (THREADS * UNROLL));
    if (numel < (1ll << 31)) {
        bn_relu_kernel<V, true><<<grid, THREADS, 0, stream>>>(x, w, b, mean, var, res, y, nvec, C, HW,
                                                              make_div((uint32_t)HW), make_div((uint32_t)C));
    } else {
        const FastDiv none{0, 0};
        bn_relu_kernel<V, false><<<grid, THREADS, 0, stream>>>(x, w, b, mean, var, res, y, nvec, C, HW, none, none);
    }
}

#if FORGE_BN_ADD
extern "C" int forge_launch(const T* x, const T* weight, const T* bias, const T* running_mean,
                            const T* running_var, const T* residual, T* y, int64_t N, int64_t C,
                            int64_t HW, cudaStream_t stream) {
    const T* res = residual;
    const uintptr_t a = (uintptr_t)x | (uintptr_t)residual | (uintptr_t)y;
#else
extern "C" int forge_launch(const T* x, const T* weight, const T* bias, const T* running_mean,
                            const T* running_var, T* y, int64_t N, int64_t C, int64_t HW,
                            cudaStream_t stream) {
    const T* res = nullptr;
    const uintptr_t a = (uintptr_t)x | (uintptr_t)y;
#endif
    if (N < 0 || C < 0 || HW < 0) return 1;
    const int64_t numel = N * C * HW;
    if (numel == 0) return 0;
    if (VEC > 1 && numel % VEC == 0 && HW >= VEC && a % (VEC * sizeof(T)) == 0)
        launch<VEC>(x, weight, bias, running_mean, running_var, res, y, numel, C, HW, stream);
    else
        launch<1>(x, weight, bias, running_mean, running_var, res, y, numel, C, HW, stream);
    return (int)cudaGetLastError();
}
