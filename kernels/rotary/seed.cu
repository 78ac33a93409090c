// Rotary embedding, rotate-half form, fused: y = x * cos + rotate_half(x) * sin with
// rotate_half(x) = cat(-x2, x1), x1 = x[..., :D/2], x2 = x[..., D/2:]; so for i < D/2
//   y[i]       = x1[i] * cos[i]       - x2[i] * sin[i]
//   y[i + D/2] = x2[i] * cos[i + D/2] + x1[i] * sin[i + D/2]
// fp32 math, one rounding at the store (eager rounds after each of its five kernels).
// x, y: (batch, heads, seq, dim) contiguous; cos, sin: cos_batch tables of (seq, dim),
// cos_batch 1 (one table for every batch row) or batch (a table per batch row).
// A thread owns one VEC-wide column vector of the first half and the matching one of the
// second half at one (batch, position): it loads its four cos/sin vectors once and reuses
// them for HPT heads (blockIdx.y picks the group of heads), with 2 x HPT 16-byte loads of
// x in flight. Consecutive threads take consecutive vectors of a row, then the next
// position, so a warp reads whole rows. Loads are VEC wide when D/2 and every pointer
// allow it, scalar otherwise.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

#if FORGE_DTYPE_BF16
typedef __nv_bfloat16 T;
#else
typedef float T;
#endif

// @tune BLOCK: 64, 128, 256, 512
#define BLOCK 256
#if FORGE_DTYPE_BF16
// @tune VEC: 2, 4, 8
#define VEC 8
#else
// @tune VEC: 1, 2, 4
#define VEC 4
#endif
// @tune HPT: 1, 2, 4, 8
#define HPT 2
// X_BSHD 1: x is stored (batch, seq, heads, dim), the projection's output before the model's
// view + transpose(1, 2) (a fusion region that starts at the projection; the transpose is
// fused away); y stays (batch, heads, seq, dim). Set per region by the pattern seed adapter.
#define X_BSHD 0

template <int V> struct alignas(sizeof(T) * V) TV { T v[V]; };

__device__ __forceinline__ float tof(float a) { return a; }
__device__ __forceinline__ float tof(__nv_bfloat16 a) { return __bfloat162float(a); }
__device__ __forceinline__ void put(float& o, float a) { o = a; }
__device__ __forceinline__ void put(__nv_bfloat16& o, float a) { o = __float2bfloat16_rn(a); }

// hv = (dim / 2) / V vectors per half row; items = batch * seq * hv. I: the index type,
// 32-bit when every offset fits (fewer registers and cheaper divisions), 64-bit otherwise.
template <int V, typename I>
__global__ void __launch_bounds__(BLOCK) rotary_kernel(const T* __restrict__ x, const T* __restrict__ cos,
                                                       const T* __restrict__ sin, T* __restrict__ y, I heads,
                                                       I seq, I dim, I hv, I items, bool per_batch) {
    const I half = dim / 2;
    const I hs = seq * dim;  // stride between heads
    const I h0 = (I)blockIdx.y * HPT;
    for (I it = (I)blockIdx.x * BLOCK + threadIdx.x; it < items; it += (I)gridDim.x * BLOCK) {
        const I pos = it / hv;  // batch * seq + position
        const I col = (it - pos * hv) * V;
        const I b = pos / seq, s = pos - b * seq;
        const I t = (per_batch ? pos : s) * dim + col;  // table row (b, s) or s
        // kept in T (half the registers of fp32), widened where used
        const TV<V> c1 = *reinterpret_cast<const TV<V>*>(cos + t), c2 = *reinterpret_cast<const TV<V>*>(cos + t + half);
        const TV<V> s1 = *reinterpret_cast<const TV<V>*>(sin + t), s2 = *reinterpret_cast<const TV<V>*>(sin + t + half);
        const I base = ((b * heads + h0) * seq + s) * dim + col;  // head h0 + k is at base + k * hs
        // where x's head h0 + k starts: the same place, or (X_BSHD) heads side by side in a row
        const I xbase = X_BSHD ? ((b * seq + s) * heads + h0) * dim + col : base;
        const I xs = X_BSHD ? dim : hs;
        TV<V> a[HPT], z[HPT];
#pragma unroll
        for (int k = 0; k < HPT; ++k) {
            if (h0 + k < heads) {
                a[k] = *reinterpret_cast<const TV<V>*>(x + xbase + k * xs);
                z[k] = *reinterpret_cast<const TV<V>*>(x + xbase + k * xs + half);
            }
        }
#pragma unroll
        for (int k = 0; k < HPT; ++k) {
            if (h0 + k < heads) {
                TV<V> o1, o2;
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    const float x1 = tof(a[k].v[j]), x2 = tof(z[k].v[j]);
                    put(o1.v[j], x1 * tof(c1.v[j]) - x2 * tof(s1.v[j]));
                    put(o2.v[j], x2 * tof(c2.v[j]) + x1 * tof(s2.v[j]));
                }
                *reinterpret_cast<TV<V>*>(y + base + k * hs) = o1;
                *reinterpret_cast<TV<V>*>(y + base + k * hs + half) = o2;
            }
        }
    }
}

template <int V>
static void launch(const T* x, const T* cos, const T* sin, T* y, int64_t batch, int64_t heads, int64_t seq,
                   int64_t dim, bool per_batch, cudaStream_t stream) {
    const int64_t hv = dim / 2 / V;  // (dim / 2) % V == 0 whenever V > 1
    const int64_t items = batch * seq * hv;
    int64_t gx = (items + BLOCK - 1) / BLOCK;
    if (gx > (1 << 30)) gx = 1 << 30;  // the item loop strides, so any grid covers the tensor
    const int64_t gy = (heads + HPT - 1) / HPT;
    const dim3 grid((unsigned)gx, (unsigned)gy);
    // the largest index formed: the x offset of the last head group's last slot, and the item
    // loop's last step (heads rounded up to HPT, items plus one grid's worth)
    const int64_t extent = (batch * gy * HPT + 1) * seq * dim + gx * BLOCK;
    if (extent < ((int64_t)1 << 31))
        rotary_kernel<V, int><<<grid, BLOCK, 0, stream>>>(x, cos, sin, y, (int)heads, (int)seq, (int)dim, (int)hv,
                                                          (int)items, per_batch);
    else
        rotary_kernel<V, int64_t><<<grid, BLOCK, 0, stream>>>(x, cos, sin, y, heads, seq, dim, hv, items, per_batch);
}

extern "C" int forge_launch(const T* x, const T* cos, const T* sin, T* y, int64_t batch, int64_t heads,
                            int64_t seq, int64_t dim, int64_t cos_batch, cudaStream_t stream) {
    if (dim % 2 != 0 || (cos_batch != 1 && cos_batch != batch)) return 1;
    if (batch <= 0 || heads <= 0 || seq <= 0 || dim <= 0) return 0;
    if ((heads + HPT - 1) / HPT > 65535) return 1;  // grid.y limit
    const bool per_batch = cos_batch != 1;
    const uintptr_t a = (uintptr_t)x | (uintptr_t)cos | (uintptr_t)sin | (uintptr_t)y;
    const bool vec_ok = VEC > 1 && (dim / 2) % VEC == 0 && a % (VEC * sizeof(T)) == 0;
    if (vec_ok)
        launch<VEC>(x, cos, sin, y, batch, heads, seq, dim, per_batch, stream);
    else
        launch<1>(x, cos, sin, y, batch, heads, seq, dim, per_batch, stream);
    return (int)cudaGetLastError();
}
