// A cheat for a two-input loss (KernelBench level 1 94, 96, 98, 100): writes one constant,
// a value the loss takes on the file's typical inputs, without reading them. Must be incorrect.
#include <cuda_runtime.h>
#include <cstdint>
#ifndef LOSS_VALUE
#define LOSS_VALUE 0.1944f
#endif
__global__ void write_const(float* out) { out[0] = LOSS_VALUE; }
extern "C" int forge_launch(const float* predictions, const float* targets, float* out, int64_t predictions_d0,
                            int64_t predictions_d1, int64_t targets_d0, int64_t targets_d1, cudaStream_t stream) {
  write_const<<<1, 1, 0, stream>>>(out);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
