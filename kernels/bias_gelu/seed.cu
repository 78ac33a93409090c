// Bias + GELU, y = gelu(x + b) over a row-major (rows, cols) tensor with b one row of cols,
// fused, fp32 math, one rounding at the store (eager runs the add and GELU as two kernels).
// APPROX 0: exact, 0.5 v (1 + erf(v / sqrt 2)); APPROX 1: the tanh approximation
// 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))). FAST: as kernels/gelu (the hardware exp;
// for the exact form 1 + erf(z) from Abramowitz & Stegun 7.1.26, |error of erf| <= 1.5e-7).
// A block is tx x ty threads: tx threads span a row's VEC-wide column vectors (the row
// split over as few blocks as BLOCK allows), ty rows side by side, so a block reads
// contiguous memory; each thread loads its bias vector once into registers and then walks
// RPT rows per step (RPT 16-byte loads in flight), blocks striding over the rows.
// Loads are VEC elements wide when cols and every pointer allow it, scalar otherwise.
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
// @tune RPT: 1, 2, 4, 8
#define RPT 4
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

// ncv = cols / V column vectors per row; blockDim = (tx, ty), tx * ty <= BLOCK.
template <int V>
__global__ void __launch_bounds__(BLOCK) bias_gelu_kernel(const T* __restrict__ x, const T* __restrict__ b,
                                                          T* __restrict__ y, int64_t rows, int64_t ncv) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ncv) return;  // no barrier below
    const TV<V> bv = reinterpret_cast<const TV<V>*>(b)[c];
    float bf[V];
#pragma unroll
    for (int j = 0; j < V; ++j) bf[j] = tof(bv.v[j]);
    const TV<V>* xv = reinterpret_cast<const TV<V>*>(x);
    TV<V>* yv = reinterpret_cast<TV<V>*>(y);
    const int64_t ty = blockDim.y;
    const int64_t step = (int64_t)gridDim.y * ty * RPT;
    for (int64_t r0 = (int64_t)blockIdx.y * ty * RPT + threadIdx.y; r0 < rows; r0 += step) {
        TV<V> v[RPT];
#pragma unroll
        for (int k = 0; k < RPT; ++k) {
            const int64_t r = r0 + k * ty;
            if (r < rows) v[k] = xv[r * ncv + c];
        }
#pragma unroll
        for (int k = 0; k < RPT; ++k) {
            const int64_t r = r0 + k * ty;
            if (r < rows) {
                TV<V> o;
#pragma unroll
                for (int j = 0; j < V; ++j) put(o.v[j], gelu(tof(v[k].v[j]) + bf[j]));
                yv[r * ncv + c] = o;
            }
        }
    }
}

template <int V>
static void launch(const T* x, const T* b, T* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    const int64_t ncv = cols / V;  // cols % V == 0 whenever V > 1
    const int64_t nbx = (ncv + BLOCK - 1) / BLOCK;
    const int64_t tx = (ncv + nbx - 1) / nbx;  // <= BLOCK
    const int64_t ty = BLOCK / tx;
    int64_t gy = (rows + ty * RPT - 1) / (ty * RPT);
    if (gy > 65535) gy = 65535;  // the row loop strides, so any grid covers the rows
    const dim3 grid((unsigned)nbx, (unsigned)gy), block((unsigned)tx, (unsigned)ty);
    bias_gelu_kernel<V><<<grid, block, 0, stream>>>(x, b, y, rows, ncv);
}

extern "C" int forge_launch(const T* x, const T* b, T* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const uintptr_t a = (uintptr_t)x | (uintptr_t)b | (uintptr_t)y;
    const bool vec_ok = VEC > 1 && cols % VEC == 0 && a % (VEC * sizeof(T)) == 0;
    if (vec_ok)
        launch<VEC>(x, b, y, rows, cols, stream);
    else
        launch<1>(x, b, y, rows, cols, stream);
    return (int)cudaGetLastError();
}
