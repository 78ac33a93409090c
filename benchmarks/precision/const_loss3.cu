// A cheat for KernelBench level 1 99_TripletMarginLoss: writes one constant (about the loss on
// the file's typical inputs) without reading them. Must be incorrect.
#include <cuda_runtime.h>
#include <cstdint>
#ifndef LOSS_VALUE
#define LOSS_VALUE 1.0f
#endif
__global__ void write_const(float* out) { out[0] = LOSS_VALUE; }
extern "C" int forge_launch(const float* anchor, const float* positive, const float* negative, float* out,
                            int64_t anchor_d0, int64_t anchor_d1, int64_t positive_d0, int64_t positive_d1,
                            int64_t negative_d0, int64_t negative_d1, cudaStream_t stream) {
  write_const<<<1, 1, 0, stream>>>(out);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
