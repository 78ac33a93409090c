// Gated activation act(gate) * up, elementwise over two same-shape tensors of n elements,
// fp32 math, one rounding at the store (eager runs the activation and the multiply as two
// kernels, rounding in between). ACT 0: SwiGLU, silu(g) = g / (1 + exp(-g)); ACT 1: GeGLU
// with exact GELU, 0.5 g (1 + erf(g / sqrt 2)); ACT 2: GeGLU with the tanh approximation
// 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). FAST takes the hardware exp and a fast
// divide (silu, tanh as 1 - 2 / (exp(2u) + 1)), and for exact GELU 1 + erf(z) from
// Abramowitz & Stegun 7.1.26 (|error of erf| <= 1.5e-7), as kernels/gelu does.
// Each thread handles UNROLL vectors of VEC elements of both inputs per step (2 x UNROLL
// 16-byte loads in flight at VEC 8 bf16); GRID_STRIDE 1 launches one resident wave of
// blocks that stride over the tensors instead of one block per tile. The n % VEC tail and
// unaligned pointers take a scalar loop.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

#if FORGE_DTYPE_BF16
typedef __nv_bfloat16 T;
#else
typedef float T;
#endif
#if FORGE_GLU_GELU && FORGE_GELU_TANH
#define ACT 2
#elif FORGE_GLU_GELU
#define ACT 1
#else
#define ACT 0
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
// @tune FAST: 0, 1
#define FAST 0

template <int V> struct alignas(sizeof(T) * V) TV { T v[V]; };

__device__ __forceinline__ float tof(float a) { return a; }
__device__ __forceinline__ float tof(__nv_bfloat16 a) { return __bfloat162float(a); }
__device__ __forceinline__ void put(float& o, float a) { o = a; }
__device__ __forceinline__ void put(__nv_bfloat16& o, float a) { o = __float2bfloat16_rn(a); }

__device__ __forceinline__ float act(float g) {
#if ACT == 0
#if FAST
    return __fdividef(g, 1.f + __expf(-g));  // exp overflow: a huge divisor gives 0 (silu -> -0)
#else
    return g / (1.f + expf(-g));
#endif
#elif ACT == 2
    const float u = 0.7978845608028654f * (g + 0.044715f * g * g * g);
#if FAST
    const float t = 1.f - 2.f / (__expf(2.f * u) + 1.f);  // exp overflow to inf gives t = 1
#else
    const float t = tanhf(u);
#endif
    return 0.5f * g * (1.f + t);
#else
#if FAST
    const float z = fabsf(g) * 0.7071067811865476f;
    const float t = __fdividef(1.f, 1.f + 0.3275911f * z);
    const float p = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    const float q = p * __expf(-z * z);  // erfc(|z|)
    return 0.5f * g * (g >= 0.f ? 2.f - q : q);
#else
    return 0.5f * g * (1.f + erff(g * 0.7071067811865476f));
#endif
#endif
}

__global__ void __launch_bounds__(BLOCK) glu_vec(const T* __restrict__ gate, const T* __restrict__ up,
                                                 T* __restrict__ y, int64_t nvec) {
    const int64_t step = (int64_t)gridDim.x * BLOCK * UNROLL;
    for (int64_t base = (int64_t)blockIdx.x * BLOCK * UNROLL + threadIdx.x; base < nvec; base += step) {
        TV<VEC> g[UNROLL], u[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            const int64_t i = base + (int64_t)k * BLOCK;
            if (i < nvec) {
                g[k] = reinterpret_cast<const TV<VEC>*>(gate)[i];
                u[k] = reinterpret_cast<const TV<VEC>*>(up)[i];
            }
        }
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            const int64_t i = base + (int64_t)k * BLOCK;
            if (i < nvec) {
                TV<VEC> o;
#pragma unroll
                for (int j = 0; j < VEC; ++j) put(o.v[j], act(tof(g[k].v[j])) * tof(u[k].v[j]));
                reinterpret_cast<TV<VEC>*>(y)[i] = o;
            }
        }
    }
}

__global__ void __launch_bounds__(BLOCK) glu_scalar(const T* __restrict__ gate, const T* __restrict__ up,
                                                    T* __restrict__ y, int64_t begin, int64_t n) {
    for (int64_t i = begin + (int64_t)blockIdx.x * BLOCK + threadIdx.x; i < n; i += (int64_t)gridDim.x * BLOCK) {
        T o;
        put(o, act(tof(gate[i])) * tof(up[i]));
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
    if (g > (1 << 30)) g = 1 << 30;  // the loops stride, so any grid covers the tensors
    return (unsigned)g;
}

extern "C" int forge_launch(const T* gate, const T* up, T* y, int64_t n, cudaStream_t stream) {
    if (n <= 0) return 0;
    const bool vec_ok = VEC > 1 && ((uintptr_t)gate | (uintptr_t)up | (uintptr_t)y) % (VEC * sizeof(T)) == 0;
    const int64_t nvec = vec_ok ? n / VEC : 0;
    if (nvec > 0)
        glu_vec<<<grid_for((nvec + UNROLL - 1) / UNROLL), BLOCK, 0, stream>>>(gate, up, y, nvec);
    const int64_t begin = nvec * VEC;
    if (begin < n)
        glu_scalar<<<grid_for(n - begin), BLOCK, 0, stream>>>(gate, up, y, begin, n);
    return (int)cudaGetLastError();
}
