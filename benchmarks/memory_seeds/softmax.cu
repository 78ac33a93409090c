// Row softmax of a (rows, cols) fp32 tensor: one block per row, three passes (max, sum, write).
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>
// @tune BLOCK: 256, 512, 1024
#define BLOCK 1024
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ float block_reduce(float v, float* tmp, bool is_max) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();
    if (lane == 0) tmp[w] = v;
    __syncthreads();
    v = lane < nw ? tmp[lane] : (is_max ? -INFINITY : 0.f);
    return is_max ? warp_max(v) : warp_sum(v);
}
__global__ void __launch_bounds__(BLOCK) softmax_rows(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    __shared__ float tmp[32];
    const float* xr = x + blockIdx.x * cols;
    float* yr = y + blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) m = fmaxf(m, xr[i]);
    m = block_reduce(m, tmp, true);
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) s += __expf(xr[i] - m);
    s = block_reduce(s, tmp, false);
    float inv = 1.f / s;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) yr[i] = __expf(xr[i] - m) * inv;
}
extern "C" int forge_launch(const float* x, float* out, int64_t x_d0, int64_t x_d1, int64_t out_d0, int64_t out_d1,
                            cudaStream_t stream) {
    if (x_d0 <= 0 || x_d1 <= 0) return 0;
    softmax_rows<<<(unsigned)x_d0, BLOCK, 0, stream>>>(x, out, x_d1);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
