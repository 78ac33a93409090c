// Seed for ResNet-50's global average pool as `forge-tui capture` makes it a task:
// torchvision's adaptive_avg_pool2d to 1x1 dispatches to aten.mean.dim(x0, [-1, -2], True) on
// f32[N x 2048 x 7 x 7] -> f32[N x 2048 x 1 x 1]. The mean of each (x0_d2, x0_d3) plane of a
// contiguous tensor: planes = x0_d0 * x0_d1, hw = x0_d2 * x0_d3, one output per plane.
// (The catalog's adaptive_avg_pool2d seed, for this task's launch signature.)
//
// MODE 0: GROUP threads per plane, each summing a strided part straight from global memory,
//         then a shuffle reduction (GROUP 1: a thread per plane).
// MODE 1: a block copies PPB consecutive planes (one contiguous span) into shared memory with
//         coalesced float4 loads (planes of 49 floats are not 16-byte aligned one by one, a
//         span of PPB planes is when PPB % 4 == 0), then GROUP threads per plane sum them
//         from shared memory. Falls back to MODE 0 when PPB planes do not fit in 48 KB.
// Every plane is summed in the same order on every call (no atomics): the bits repeat.
#include <cuda_runtime.h>
#include <stdint.h>

// @tune MODE: 0, 1
#define MODE 1
// @tune BLOCK: 64, 128, 256, 512
#define BLOCK 256
// @tune GROUP: 1, 2, 4, 8, 16, 32
#define GROUP 4
// @tune PPB: 16, 32, 64, 128
#define PPB 64

__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
    for (int o = GROUP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// GROUP threads per plane straight from global memory.
__global__ void __launch_bounds__(BLOCK) mean_direct(const float* __restrict__ x, float* __restrict__ y,
                                                     int64_t planes, int64_t hw, float inv) {
    const int64_t groups = (int64_t)gridDim.x * (BLOCK / GROUP);
    const int j = threadIdx.x % GROUP;
    // every lane of a warp runs the same trip count, so the shuffles see full warps
    const int64_t first = (int64_t)blockIdx.x * (BLOCK / GROUP) + threadIdx.x / GROUP;
    const int64_t warp_first = (int64_t)blockIdx.x * (BLOCK / GROUP) + (threadIdx.x & ~31) / GROUP;
    for (int64_t p = first, pw = warp_first; pw < planes; p += groups, pw += groups) {
        float s = 0.f;
        if (p < planes) {
            const float* src = x + p * hw;
            for (int64_t i = j; i < hw; i += GROUP) s += __ldg(src + i);
        }
        s = group_sum(s);
        if (j == 0 && p < planes) y[p] = s * inv;
    }
}

// PPB planes per block through shared memory.
__global__ void __launch_bounds__(BLOCK) mean_staged(const float* __restrict__ x, float* __restrict__ y,
                                                     int64_t planes, int64_t hw, float inv, bool vec_ok) {
    extern __shared__ float4 smem4[];
    float* sm = reinterpret_cast<float*>(smem4);
    const int64_t p0 = (int64_t)blockIdx.x * PPB;
    const int64_t np = planes - p0 < PPB ? planes - p0 : PPB;
    const int64_t count = np * hw;              // floats in this block's span
    const float* src = x + p0 * hw;             // 16-byte aligned when vec_ok
    if (vec_ok) {
        const int64_t n4 = count / 4;
        const float4* s4 = reinterpret_cast<const float4*>(src);
        for (int64_t i = threadIdx.x; i < n4; i += BLOCK) smem4[i] = __ldg(s4 + i);
        for (int64_t i = n4 * 4 + threadIdx.x; i < count; i += BLOCK) sm[i] = __ldg(src + i);
    } else {
        for (int64_t i = threadIdx.x; i < count; i += BLOCK) sm[i] = __ldg(src + i);
    }
    __syncthreads();
    const int j = threadIdx.x % GROUP;
    // the trip count below is the same for every lane of a warp (PPB * GROUP is a multiple of
    // 32 or GROUP is 1, which needs no shuffle), so the shuffles see full warps
    for (int q = threadIdx.x / GROUP; q < PPB; q += BLOCK / GROUP) {
        float s = 0.f;
        if (q < np) {
            const float* pl = sm + (int64_t)q * hw;
            for (int64_t i = j; i < hw; i += GROUP) s += pl[i];
        }
        s = group_sum(s);
        if (j == 0 && q < np) y[p0 + q] = s * inv;
    }
}

extern "C" int forge_launch(const float* x0, float* out, int64_t x0_d0, int64_t x0_d1, int64_t x0_d2,
                            int64_t x0_d3, int64_t out_d0, int64_t out_d1, int64_t out_d2, int64_t out_d3,
                            cudaStream_t stream) {
    if (out_d0 != x0_d0 || out_d1 != x0_d1 || out_d2 != 1 || out_d3 != 1) return 1;
    const int64_t planes = x0_d0 * x0_d1, hw = x0_d2 * x0_d3;
    if (planes <= 0) return 0;
    if (hw <= 0) return 1;  // the mean of an empty plane is undefined
    const float inv = (float)(1.0 / (double)hw);
    const size_t smem = (size_t)PPB * (size_t)hw * sizeof(float);
    if (MODE == 1 && smem <= 48 * 1024) {
        // each block's span starts at p0 * hw floats: 16-byte aligned when the base is and
        // PPB * hw is a multiple of 4
        const bool vec_ok = ((uintptr_t)x0 % 16) == 0 && ((int64_t)PPB * hw) % 4 == 0;
        const unsigned grid = (unsigned)((planes + PPB - 1) / PPB);
        mean_staged<<<grid, BLOCK, smem, stream>>>(x0, out, planes, hw, inv, vec_ok);
    } else {
        int64_t g = (planes + (BLOCK / GROUP) - 1) / (BLOCK / GROUP);
        if (g > (1 << 30)) g = 1 << 30;  // the kernel strides
        mean_direct<<<(unsigned)g, BLOCK, 0, stream>>>(x0, out, planes, hw, inv);
    }
    return (int)cudaGetLastError();
}
