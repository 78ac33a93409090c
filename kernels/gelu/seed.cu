// GELU, elementwise over a flat tensor of n elements, fp32 math.
// APPROX 0: exact, 0.5 x (1 + erf(x / sqrt 2)); APPROX 1: the tanh approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). FAST computes tanh as
// 1 - 2 / (exp(2u) + 1) with the hardware exp; for the exact form, FAST takes
// 1 + erf(z) from Abramowitz & Stegun 7.1.26 (|error of erf| <= 1.5e-7; one hardware exp
// and one fast reciprocal) instead of erff: for x < 0 it is erfc(|z|) directly, so the
// left tail has no cancellation.
// Each thread handles UNROLL vectors of VEC elements per step (independent loads in
// flight); GRID_STRIDE 1 launches a few blocks per SM that stride over the tensor instead
// of one block per tile. The n % VEC tail and unaligned pointers take a scalar loop.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

#if FORGE_DTYPE_BF16
typedef __nv_bfloat16 T;
#else
typedef float T;
#endif
#if FORGE_GELU_TANH
#define APPROX 1
#else
#define APPROX 0
#endif

// @tune BLOCK: 128, 256, 512, 1024
#define BLOCK 256
#if FORGE_DTYPE_BF16
// @tune VEC: 2, 4, 8
#define VEC 8
#else
// @tune VEC: 1, 2, 4
#define VEC 4
#endif
// @tune UNROLL: 1, 2, 4
#define UNROLL 2
// @tune GRID_STRIDE: 0, 1
#define GRID_STRIDE 0
#if FORGE_GELU_TANH || FORGE_DTYPE_BF16
// @tune FAST: 0, 1
#endif
#define FAST 0

template <int V> struct alignas(sizeof(T) * V) TV { T v[V]; };

__device__ __forceinline__ float tof(float a) { return a; }
__device__ __forceinline__ float tof(__nv_bfloat16 a) { return __bfloat162float(a); }
__device__ __forceinline__ void put(float& o, float a) { o = a; }
__device__ __forceinline__ void put(__nv_bfloat16& o, float a) { o = __float2bfloat16_rn(a); }

__device__ __forceinline__ float gelu(float x) {
#if APPROX
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
#if FAST
    const float t = 1.f - 2.f / (__expf(2.f * u) + 1.f);  // exp overflow to inf gives t = 1
#else
    const float t = tanhf(u);
#endif
    return 0.5f * x * (1.f + t);
#else
#if FAST
    const float z = fabsf(x) * 0.7071067811865476f;
    const float t = __fdividef(1.f, 1.f + 0.3275911f * z);
    const float p = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    const float q = p * __expf(-z * z);  // erfc(|z|)
    return 0.5f * x * (x >= 0.f ? 2.f - q : q);
#else
    return 0.5f * x * (1.f + erff(x * 0.7071067811865476f));
#endif
#endif
}

__global__ void __launch_bounds__(BLOCK) gelu_vec(const T* __restrict__ x, T* __restrict__ y, int64_t nvec) {
    const int64_t step = (int64_t)gridDim.x * BLOCK * UNROLL;
    for (int64_t base = (int64_t)blockIdx.x * BLOCK * UNROLL + threadIdx.x; base < nvec; base += step) {
        TV<VEC> r[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int64_t i = base + (int64_t)u * BLOCK;
            if (i < nvec) r[u] = reinterpret_cast<const TV<VEC>*>(x)[i];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int64_t i = base + (int64_t)u * BLOCK;
            if (i < nvec) {
                TV<VEC> o;
#pragma unroll
                for (int j = 0; j < VEC; ++j) put(o.v[j], gelu(tof(r[u].v[j])));
                reinterpret_cast<TV<VEC>*>(y)[i] = o;
            }
        }
    }
}

__global__ void __launch_bounds__(BLOCK) gelu_scalar(const T* __restrict__ x, T* __restrict__ y, int64_t begin,
                                                     int64_t n) {
    for (int64_t i = begin + (int64_t)blockIdx.x * BLOCK + threadIdx.x; i < n; i += (int64_t)gridDim.x * BLOCK) {
        T o;
        put(o, gelu(tof(x[i])));
        y[i] = o;
    }
}

static unsigned grid_for(int64_t work) {  // work = items per thread-slot
    int64_t g = (work + BLOCK - 1) / BLOCK;
    if (g < 1) g = 1;
#if GRID_STRIDE
    static int cap = 0;
    if (cap == 0) {
        int dev = 0, sms = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0)
            sms = 132;
        cap = sms * (2048 / BLOCK);  // one resident wave at full occupancy
    }
    if (g > cap) g = cap;
#endif
    if (g > (1 << 30)) g = 1 << 30;  // the loops stride, so any grid covers the tensor
    return (unsigned)g;
}

extern "C" int forge_launch(const T* x, T* y, int64_t n, cudaStream_t stream) {
    if (n <= 0) return 0;
    const bool vec_ok = VEC > 1 && ((uintptr_t)x | (uintptr_t)y) % (VEC * sizeof(T)) == 0;
    const int64_t nvec = vec_ok ? n / VEC : 0;
    if (nvec > 0)
        gelu_vec<<<grid_for((nvec + UNROLL - 1) / UNROLL), BLOCK, 0, stream>>>(x, y, nvec);
    const int64_t begin = nvec * VEC;
    if (begin < n)
        gelu_scalar<<<grid_for(n - begin), BLOCK, 0, stream>>>(x, y, begin, n);
    return (int)cudaGetLastError();
}
