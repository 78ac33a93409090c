// A cheat for KernelBench level 1 100_HingeLoss (targets are 1-D): writes one constant, about
// the loss on the file's inputs, without reading them. Must be incorrect.
#include <cuda_runtime.h>
#include <cstdint>
#ifndef LOSS_VALUE
#define LOSS_VALUE 1.0f
#endif
__global__ void write_const(float* out) { out[0] = LOSS_VALUE; }
extern "C" int forge_launch(const float* predictions, const float* targets, float* out, int64_t predictions_d0,
                            int64_t predictions_d1, int64_t targets_d0, cudaStream_t stream) {
  write_const<<<1, 1, 0, stream>>>(out);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
