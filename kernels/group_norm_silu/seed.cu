#if FORGE_DTYPE_BF16
// silu(group_norm(x)) of a contiguous (N, C, HW) bf16 tensor (NCHW with HW = H*W), fused:
#else
// silu(group_norm(x)) of a contiguous (N, C, HW) fp32 tensor (NCHW with HW = H*W), fused:
#endif
// GROUPS groups of C / GROUPS channels; group (n, g) is the contiguous span of
// (C / GROUPS) * HW elements at (n * GROUPS + g) * (C / GROUPS) * HW. Its mean and variance
// (biased, as torch.nn.functional.group_norm) are taken in fp32, then
// y = silu((x - mean) * rsqrt(var + EPS) * w[c] + b[c]), silu(v) = v / (1 + exp(-v)).
// Eager runs group_norm and silu as two kernels with a round trip of the normalised tensor.
// A group is served by a cluster of CLUSTER blocks (sm_90 thread block clusters): each block
// takes 1/CLUSTER of the group, the blocks' partial sums meet through distributed shared
// memory, and a block keeps up to CACHE elements per thread in registers, so x is read from
// memory once. A chunk too large for the cache is streamed twice (the second read mostly
// hits L2). Statistics: with the chunk cached and ONE_PASS 0, the mean first and then the
// centred sum of squares (two cluster reductions); otherwise one reduction of sums shifted
// by the group's first element, var = E[(x - K)^2] - E[x - K]^2 (shifted data: the
// cancellation of the plain sum of squares goes away when K is near the mean).
// Loads are VEC elements wide when HW and every pointer allow it (a vector then stays in one
// channel), scalar otherwise. FAST uses the hardware exp and divide in silu.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <stdint.h>

namespace cg = cooperative_groups;

#if FORGE_DTYPE_BF16
typedef __nv_bfloat16 T;
#else
typedef float T;
#endif
#define GROUPS 32
#define EPS 1e-5f

// @tune BLOCK: 128, 256, 512, 1024
#define BLOCK 256
// @tune CLUSTER: 1, 2, 4, 8
#define CLUSTER 8
#if FORGE_DTYPE_BF16
// @tune VEC: 2, 4, 8
#define VEC 8
#else
// @tune VEC: 1, 2, 4
#define VEC 4
#endif
// @tune CACHE: 0, 8, 16, 32, 64
#define CACHE 32
// @tune ONE_PASS: 0, 1
#define ONE_PASS 0
// @tune FAST: 0, 1
#if FORGE_DTYPE_BF16
#define FAST 1
#else
#define FAST 0
#endif

#define NWARPS (BLOCK / 32)
#if CLUSTER > 1
#define CLUSTER_DIMS __cluster_dims__(CLUSTER, 1, 1)
#else
#define CLUSTER_DIMS
#endif

template <int V> struct alignas(sizeof(T) * V) TV { T v[V]; };

__device__ __forceinline__ float tof(float a) { return a; }
__device__ __forceinline__ float tof(__nv_bfloat16 a) { return __bfloat162float(a); }
__device__ __forceinline__ void put(float& o, float a) { o = a; }
__device__ __forceinline__ void put(__nv_bfloat16& o, float a) { o = __float2bfloat16_rn(a); }

__device__ __forceinline__ float silu(float v) {
#if FAST
    return __fdividef(v, 1.f + __expf(-v));  // exp(-v) = inf gives 0 (the limit)
#else
    return v / (1.f + expf(-v));
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// (a, b) summed over the whole group: the block, then the cluster's blocks through DSMEM
// (every block adds the CLUSTER partials in rank order, so all get the same value). `slot`
// is this block's shared cell for this reduction; each reduction of a launch uses its own.
// Every thread of every block of the cluster must call it.
__device__ __forceinline__ float2 group_sum2(float a, float b, float* sh, float2* slot) {
    a = warp_sum(a);
    b = warp_sum(b);
    if (NWARPS > 1) {
        if ((threadIdx.x & 31) == 0) { sh[threadIdx.x >> 5] = a; sh[NWARPS + (threadIdx.x >> 5)] = b; }
        __syncthreads();
        a = 0.f; b = 0.f;
#pragma unroll
        for (int k = 0; k < NWARPS; ++k) { a += sh[k]; b += sh[NWARPS + k]; }
        __syncthreads();
    }
#if CLUSTER > 1
    if (threadIdx.x == 0) *slot = make_float2(a, b);
    cg::cluster_group::sync();  // the partials are written and visible cluster-wide
    a = 0.f; b = 0.f;
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) {
        const float2 p = *cg::cluster_group::map_shared_rank(slot, r);
        a += p.x; b += p.y;
    }
#endif
    return make_float2(a, b);
}

// One block per (group, cluster rank). elems = (C / GROUPS) * HW < 2^31; the block's vectors
// are [rank * chunk_v, min((rank + 1) * chunk_v, elems / V)) of its group.
template <int V>
__global__ void __launch_bounds__(BLOCK) CLUSTER_DIMS
gn_silu_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
               uint32_t cpg, uint32_t hw, uint32_t elems, uint32_t chunk_v) {
    __shared__ float sh[2 * NWARPS];
    __shared__ float2 slots[2];
    const int64_t grp = blockIdx.x / CLUSTER;  // n * GROUPS + g
    const uint32_t rank = blockIdx.x % CLUSTER;  // == the cluster rank (1-D clusters)
    const uint32_t c0 = (uint32_t)(grp % GROUPS) * cpg;
    const T* xg = x + grp * (int64_t)elems;
    T* yg = y + grp * (int64_t)elems;
    const uint32_t nv = elems / V;  // elems % V == 0 whenever V > 1
    const uint32_t v0 = min(rank * chunk_v, nv), v1 = min(v0 + chunk_v, nv);
    const uint32_t cnt = v1 - v0;
    const float inv_n = 1.f / (float)elems;
    constexpr int NC = CACHE / V > 0 ? CACHE / V : 1;
    const bool fits = CACHE > 0 && chunk_v <= (uint32_t)(CACHE / V) * BLOCK;  // uniform over the cluster
    const TV<V>* xv = reinterpret_cast<const TV<V>*>(xg) + v0;
    TV<V>* yv = reinterpret_cast<TV<V>*>(yg) + v0;
    float mean, rstd;
    if (fits) {
        float c[NC][V];
#if ONE_PASS
        const float k0 = tof(xg[0]);
#else
        const float k0 = 0.f;
#endif
        float s = 0.f, ss = 0.f;
#pragma unroll
        for (int k = 0; k < NC; ++k) {
            const uint32_t i = threadIdx.x + (uint32_t)k * BLOCK;
            if (i < cnt) {
                const TV<V> t = xv[i];
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    c[k][j] = tof(t.v[j]);
                    const float d = c[k][j] - k0;
                    s += d;
                    ss += d * d;
                }
            } else {
#pragma unroll
                for (int j = 0; j < V; ++j) c[k][j] = 0.f;
            }
        }
#if ONE_PASS
        const float2 r = group_sum2(s, ss, sh, &slots[0]);
        const float m1 = r.x * inv_n;
        mean = k0 + m1;
        rstd = rsqrtf(fmaxf(r.y * inv_n - m1 * m1, 0.f) + EPS);
#else
        mean = group_sum2(s, 0.f, sh, &slots[0]).x * inv_n;
        float d2 = 0.f;
#pragma unroll
        for (int k = 0; k < NC; ++k) {
            const uint32_t i = threadIdx.x + (uint32_t)k * BLOCK;
            if (i < cnt) {
#pragma unroll
                for (int j = 0; j < V; ++j) { const float d = c[k][j] - mean; d2 += d * d; }
            }
        }
        rstd = rsqrtf(group_sum2(d2, 0.f, sh, &slots[1]).x * inv_n + EPS);
#endif
#if CLUSTER > 1
        cg::cluster_group::barrier_arrive();  // done reading the peers' slots
#endif
#pragma unroll
        for (int k = 0; k < NC; ++k) {
            const uint32_t i = threadIdx.x + (uint32_t)k * BLOCK;
            if (i < cnt) {
                const uint32_t ch = c0 + (v0 + i) * V / hw;
                const float a = rstd * tof(w[ch]);
                const float o = tof(b[ch]);
                TV<V> t;
#pragma unroll
                for (int j = 0; j < V; ++j) put(t.v[j], silu(fmaf(c[k][j] - mean, a, o)));
                yv[i] = t;
            }
        }
    } else {
        const float k0 = tof(xg[0]);
        float s = 0.f, ss = 0.f;
        for (uint32_t i = threadIdx.x; i < cnt; i += BLOCK) {
            const TV<V> t = xv[i];
#pragma unroll
            for (int j = 0; j < V; ++j) { const float d = tof(t.v[j]) - k0; s += d; ss += d * d; }
        }
        const float2 r = group_sum2(s, ss, sh, &slots[0]);
        const float m1 = r.x * inv_n;
        mean = k0 + m1;
        rstd = rsqrtf(fmaxf(r.y * inv_n - m1 * m1, 0.f) + EPS);
#if CLUSTER > 1
        cg::cluster_group::barrier_arrive();
#endif
        for (uint32_t i = threadIdx.x; i < cnt; i += BLOCK) {
            const uint32_t ch = c0 + (v0 + i) * V / hw;
            const float a = rstd * tof(w[ch]);
            const float o = tof(b[ch]);
            const TV<V> t = xv[i];
            TV<V> u;
#pragma unroll
            for (int j = 0; j < V; ++j) put(u.v[j], silu(fmaf(tof(t.v[j]) - mean, a, o)));
            yv[i] = u;
        }
    }
#if CLUSTER > 1
    cg::cluster_group::barrier_wait();  // no block leaves while a peer may still read its slots
#endif
}

// N, C, HW: x is (N, C, HW) contiguous (HW = H * W, or the product of every dim after C);
// w and b hold C values. Returns 1 when C is not a multiple of GROUPS or a group holds
// 2^31 elements or more.
extern "C" int forge_launch(const T* x, const T* w, const T* b, T* y, int64_t N, int64_t C, int64_t HW,
                            cudaStream_t stream) {
    if (N < 0 || C < 0 || HW < 0 || C % GROUPS != 0) return 1;
    if (N == 0 || C == 0 || HW == 0) return 0;
    const int64_t cpg = C / GROUPS, elems = cpg * HW;
    if (elems >= ((int64_t)1 << 31) || N * GROUPS * CLUSTER >= ((int64_t)1 << 31)) return 1;
    const uintptr_t a = (uintptr_t)x | (uintptr_t)y;
    const bool vec_ok = VEC > 1 && HW % VEC == 0 && a % (VEC * sizeof(T)) == 0;
    const int64_t nv = vec_ok ? elems / VEC : elems;
    const uint32_t chunk_v = (uint32_t)((nv + CLUSTER - 1) / CLUSTER);
    const unsigned grid = (unsigned)(N * GROUPS * CLUSTER);
    if (vec_ok)
        gn_silu_kernel<VEC><<<grid, BLOCK, 0, stream>>>(x, w, b, y, (uint32_t)cpg, (uint32_t)HW, (uint32_t)elems, chunk_v);
    else
        gn_silu_kernel<1><<<grid, BLOCK, 0, stream>>>(x, w, b, y, (uint32_t)cpg, (uint32_t)HW, (uint32_t)elems, chunk_v);
    return (int)cudaGetLastError();
}
