// A gated MLP's two projections and their product on the CPU: y = act(x Wg^T) * (x Wu^T), x (M, K)
// and y (M, N) row-major, Wg and Wu (N, K) row-major as nn.Linear stores them; bf16 in and out,
// fp32 math, one rounding at the store. Each output is two dot products of a row of x with a
// row of Wg and of Wu, so all three are read along K. Blocked: an MB x NB tile of both products
// accumulates over K in KB-wide slices of the rows converted to fp32 once per slice (reused from
// cache by every output of the tile); each dot product keeps ACC partial sums, which g++
// vectorises without reassociating a single sum. ACT: 0 none, 1 relu, 2 gelu (erf), 3 gelu
// (tanh), 4 silu; a fusion region's seed gets the region's (the PatternSeed constant act_code).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

typedef uint16_t T;  // bf16 bits

#if FORGE_GLU_GELU
#define ACT 2
#else
#define ACT 4
#endif

// @tune MB: 8, 4, 16, 32
#define MB 8
// @tune NB: 32, 16, 64, 128
#define NB 32
// @tune KB: 256, 64, 128, 512
#define KB 256
// @tune ACC: 8, 1, 4, 16
#define ACC 8

static inline float tof(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t tobf(float a) {  // round to nearest even; NaN stays NaN
    uint32_t u;
    std::memcpy(&u, &a, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float act(float v) {
#if ACT == 1
    return v > 0.f ? v : 0.f;
#elif ACT == 2
    return 0.5f * v * (1.f + std::erf(v * 0.7071067811865476f));
#elif ACT == 3
    return 0.5f * v * (1.f + std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
#elif ACT == 4
    return v / (1.f + std::exp(-v));
#else
    return v;
#endif
}

// sum of a[i] * b[i] over n, in ACC interleaved partial sums
static inline float dot(const float* a, const float* b, int64_t n) {
    float part[ACC] = {0.f};
    int64_t i = 0;
    for (; i + ACC <= n; i += ACC)
        for (int j = 0; j < ACC; ++j) part[j] += a[i + j] * b[i + j];
    float s = 0.f;
    for (; i < n; ++i) s += a[i] * b[i];
    for (int j = 0; j < ACC; ++j) s += part[j];
    return s;
}

extern "C" int forge_launch(const T* x, const T* wg, const T* wu, T* y, int64_t m, int64_t n, int64_t k) {
    if (m < 0 || n < 0 || k < 0) return 1;
    std::vector<float> xs((size_t)MB * KB), gs((size_t)NB * KB), us((size_t)NB * KB);
    std::vector<float> ag((size_t)MB * NB), au((size_t)MB * NB);
    for (int64_t i0 = 0; i0 < m; i0 += MB) {
        const int64_t mi = m - i0 < MB ? m - i0 : MB;
        for (int64_t j0 = 0; j0 < n; j0 += NB) {
            const int64_t nj = n - j0 < NB ? n - j0 : NB;
            std::fill(ag.begin(), ag.end(), 0.f);
            std::fill(au.begin(), au.end(), 0.f);
            for (int64_t k0 = 0; k0 < k; k0 += KB) {
                const int64_t kk = k - k0 < KB ? k - k0 : KB;
                for (int64_t i = 0; i < mi; ++i)
                    for (int64_t q = 0; q < kk; ++q) xs[i * KB + q] = tof(x[(i0 + i) * k + k0 + q]);
                for (int64_t j = 0; j < nj; ++j)
                    for (int64_t q = 0; q < kk; ++q) {
                        gs[j * KB + q] = tof(wg[(j0 + j) * k + k0 + q]);
                        us[j * KB + q] = tof(wu[(j0 + j) * k + k0 + q]);
                    }
                for (int64_t i = 0; i < mi; ++i)
                    for (int64_t j = 0; j < nj; ++j) {
                        ag[i * NB + j] += dot(&xs[i * KB], &gs[j * KB], kk);
                        au[i * NB + j] += dot(&xs[i * KB], &us[j * KB], kk);
                    }
            }
            for (int64_t i = 0; i < mi; ++i)
                for (int64_t j = 0; j < nj; ++j)
                    y[(i0 + i) * n + j0 + j] = tobf(act(ag[i * NB + j]) * au[i * NB + j]);
        }
    }
    return 0;
}
