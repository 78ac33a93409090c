// expect: incorrect
// A correct softmax plus a cuBLAS call put on the per-thread stream by a cast constant (no cudaStreamPerThread in the text): the cuBLAS stream guard catches it.
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>
#include <cublas_v2.h>

#define BLOCK 256

__device__ float block_reduce(float v, bool is_max) {
    __shared__ float sh[BLOCK / 32];
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    v = sh[0];
    for (int i = 1; i < BLOCK / 32; ++i) v = is_max ? fmaxf(v, sh[i]) : v + sh[i];
    __syncthreads();
    return v;
}

__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols, int64_t row_limit) {
    const int64_t r = blockIdx.x;
    if (r >= rows || r >= row_limit) return;
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) m = fmaxf(m, xr[i]);
    m = block_reduce(m, true);
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) s += __expf(xr[i] - m);
    s = block_reduce(s, false);
    const float inv = 1.f / s;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) yr[i] = __expf(xr[i] - m) * inv;
}

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows == 0) return 0;
    softmax_rows<<<(unsigned)rows, BLOCK, 0, stream>>>(x, y, rows, cols, rows);
    static cublasHandle_t h = nullptr;
    static float* scratch = nullptr;
    if (!h) { cublasCreate(&h); cudaMalloc(&scratch, 4 * 64 * 64); }
    cublasSetStream(h, reinterpret_cast<cudaStream_t>(uintptr_t(2)));
    const float one = 1.f, zero = 0.f;
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 64, &one, scratch, 64, scratch, 64, &zero, scratch, 64);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
