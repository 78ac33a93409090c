// A correct MSE loss (KernelBench level 1 94_MSELoss): mean((p - t)^2) over every element,
// each block's sum in double, one float atomicAdd per block into the zeroed output (runs
// differ by far less than the tolerance: flagged nondeterministic).
#include <cuda_runtime.h>
#include <cstdint>
__global__ void zero(float* out) { out[0] = 0.f; }
__global__ void __launch_bounds__(512) mse(const float* __restrict__ p, const float* __restrict__ t, float* out,
                                           int64_t n) {
  double s = 0.0;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t n4 = n / 4;
  for (int64_t j = i; j < n4; j += stride) {
    float4 a = reinterpret_cast<const float4*>(p)[j], b = reinterpret_cast<const float4*>(t)[j];
    float d0 = a.x - b.x, d1 = a.y - b.y, d2 = a.z - b.z, d3 = a.w - b.w;
    s += (double)(d0 * d0 + d1 * d1) + (double)(d2 * d2 + d3 * d3);
  }
  for (int64_t j = 4 * n4 + i; j < n; j += stride) {
    float d = p[j] - t[j];
    s += (double)d * d;
  }
  for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);
  __shared__ double warp_sum[16];
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    s = threadIdx.x < blockDim.x / 32 ? warp_sum[threadIdx.x] : 0.0;
    for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) atomicAdd(out, (float)(s / (double)n));
  }
}
extern "C" int forge_launch(const float* predictions, const float* targets, float* out, int64_t predictions_d0,
                            int64_t predictions_d1, int64_t targets_d0, int64_t targets_d1, cudaStream_t stream) {
  const int64_t n = predictions_d0 * predictions_d1;
  if (targets_d0 * targets_d1 != n) return 1;
  zero<<<1, 1, 0, stream>>>(out);
  if (n > 0) mse<<<132 * 8, 512, 0, stream>>>(predictions, targets, out, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
