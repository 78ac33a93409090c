// expect: suspect|incorrect
// Launches nothing once the same (x, y) came five times: faster than memory allows, or a stale output.
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>

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

static const float* seen_x[8];
static float* seen_y[8];
static int seen_n[8];
extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows == 0) return 0;
    for (int k = 0; k < 8; ++k)
        if (seen_x[k] == x && seen_y[k] == y) {
            if (++seen_n[k] > 4) return 0;
            goto compute;
        }
    for (int k = 7; k > 0; --k) { seen_x[k] = seen_x[k - 1]; seen_y[k] = seen_y[k - 1]; seen_n[k] = seen_n[k - 1]; }
    seen_x[0] = x; seen_y[0] = y; seen_n[0] = 1;
compute:
    softmax_rows<<<(unsigned)rows, BLOCK, 0, stream>>>(x, y, rows, cols, rows);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
