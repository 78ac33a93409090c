// Scaled dot-product attention, fp32, no mask: out = softmax(Q K^T / sqrt(D)) V for (B, H, L, D)
// tensors with L a multiple of 32 and D = 1024. A block of 256 threads takes BQ = 16 query rows
// of one (b, h): scores for all L keys in shared memory (tiles of 32 keys x 64 dims), a row
// softmax by warps, then each thread accumulates 16 rows x 4 output dims over the L keys.
// The scores and the softmax are in double: with `large` inputs (N(0,1) x 50) a score is ~2500
// and fp32 dot products over D = 1024 err by ~1e-3 in it, which moves a near-tie's weights by
// as much (the fp32 version failed those rows); the products of fp32 values are exact in double.
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>
#define BQ 16
#define BK 32
#define DC 64
#define THREADS 256
__global__ void __launch_bounds__(THREADS) sdpa(const float* __restrict__ Q, const float* __restrict__ K,
                                               const float* __restrict__ V, float* __restrict__ O, int L, int D, float scale) {
    extern __shared__ double sm[];
    double* S = sm;                                 // BQ x L
    float* Qs = reinterpret_cast<float*>(S + BQ * L);  // BQ x DC
    float* Ks = Qs + BQ * DC;         // BK x (DC + 1)
    const int64_t head = blockIdx.y;
    const int q0 = blockIdx.x * BQ, t = threadIdx.x;
    const float* q = Q + (head * L + q0) * (int64_t)D;
    const float* k = K + head * L * (int64_t)D;
    const float* v = V + head * L * (int64_t)D;
    const int r = t / 16, kk = (t % 16) * 2;
    for (int kt = 0; kt < L; kt += BK) {
        double a0 = 0.0, a1 = 0.0;
        for (int dc = 0; dc < D; dc += DC) {
            for (int i = t; i < BQ * DC; i += THREADS) Qs[i] = q[(i / DC) * (int64_t)D + dc + i % DC];
            for (int i = t; i < BK * DC; i += THREADS) Ks[(i / DC) * (DC + 1) + i % DC] = k[(kt + i / DC) * (int64_t)D + dc + i % DC];
            __syncthreads();
#pragma unroll 8
            for (int d = 0; d < DC; ++d) {
                double qv = Qs[r * DC + d];
                a0 = fma(qv, (double)Ks[kk * (DC + 1) + d], a0);
                a1 = fma(qv, (double)Ks[(kk + 1) * (DC + 1) + d], a1);
            }
            __syncthreads();
        }
        S[r * L + kt + kk] = a0 * (double)scale;
        S[r * L + kt + kk + 1] = a1 * (double)scale;
    }
    __syncthreads();
    const int w = t >> 5, lane = t & 31;
    for (int row = w; row < BQ; row += THREADS / 32) {
        double* s = S + row * L;
        double m = -INFINITY;
        for (int j = lane; j < L; j += 32) m = fmax(m, s[j]);
        for (int o = 16; o > 0; o >>= 1) m = fmax(m, __shfl_xor_sync(0xffffffffu, m, o));
        double sum = 0.0;
        for (int j = lane; j < L; j += 32) { double e = exp(s[j] - m); s[j] = e; sum += e; }
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        double inv = 1.0 / sum;
        for (int j = lane; j < L; j += 32) s[j] *= inv;
    }
    __syncthreads();
    for (int d0 = t * 4; d0 < D; d0 += THREADS * 4) {
        float acc[BQ][4];
#pragma unroll
        for (int i = 0; i < BQ; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
        for (int j = 0; j < L; ++j) {
            float4 vv = *reinterpret_cast<const float4*>(v + j * (int64_t)D + d0);
#pragma unroll
            for (int i = 0; i < BQ; ++i) {
                float p = (float)S[i * L + j];
                acc[i][0] += p * vv.x; acc[i][1] += p * vv.y; acc[i][2] += p * vv.z; acc[i][3] += p * vv.w;
            }
        }
        float* o = O + (head * L + q0) * (int64_t)D + d0;
#pragma unroll
        for (int i = 0; i < BQ; ++i)
            *reinterpret_cast<float4*>(o + i * (int64_t)D) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    }
}
extern "C" int forge_launch(const float* Q, const float* K, const float* V, float* out, int64_t Q_d0, int64_t Q_d1,
                            int64_t Q_d2, int64_t Q_d3, int64_t K_d0, int64_t K_d1, int64_t K_d2, int64_t K_d3,
                            int64_t V_d0, int64_t V_d1, int64_t V_d2, int64_t V_d3, int64_t out_d0, int64_t out_d1,
                            int64_t out_d2, int64_t out_d3, cudaStream_t stream) {
    const int L = (int)Q_d2, D = (int)Q_d3;
    if (L % BQ || L % BK || D % 1024 || K_d2 != L || V_d3 != D) return 2;
    size_t smem = (size_t)BQ * L * sizeof(double) + (size_t)(BQ * DC + BK * (DC + 1)) * sizeof(float);
    if (smem > 48 * 1024 && cudaFuncSetAttribute(sdpa, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) return 3;
    dim3 grid(L / BQ, (unsigned)(Q_d0 * Q_d1));
    sdpa<<<grid, THREADS, smem, stream>>>(Q, K, V, out, L, D, 1.0f / sqrtf((float)D));
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
