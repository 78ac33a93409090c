// A linear layer with its epilogue on the CPU: y = act(x W^T [+ b]) [+ r], x (M, K) and y (M, N)
// row-major, W (N, K) row-major as nn.Linear stores it, b (N), r (M, N); fp32 math, one
// rounding at the store. Each output is a dot product of a row of x with a row of W, so
// both are read along K (no transpose). Blocked: an MB x NB tile of y accumulates over K in
// KB-wide slices of x's and W's rows converted to fp32 once per slice (so a slice is reused
// from cache by every output of the tile); each dot product keeps ACC partial sums, which
// g++ vectorises without reassociating a single sum. The bias, the activation (ACT: 0 none,
// 1 relu, 2 gelu (erf), 3 gelu (tanh), 4 silu) and the residual are applied to the finished
// tile before it is stored.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if FORGE_DTYPE_BF16
typedef uint16_t T;  // bf16 bits
#else
typedef float T;
#endif
#if FORGE_GEMM_BIAS
#define HAS_BIAS 1
#else
#define HAS_BIAS 0
#endif
#if FORGE_GEMM_RESIDUAL
#define HAS_RES 1
#else
#define HAS_RES 0
#endif
// ACT: 0 none, 1 relu, 2 gelu (erf), 3 gelu (tanh), 4 silu. Each form's own activation here;
// a fusion region's seed gets the region's (the PatternSeed constant act_code).
#if FORGE_GEMM_RESIDUAL
#define ACT 0
#elif FORGE_GEMM_SILU
#define ACT 4
#else
#define ACT 2
#endif

// @tune MB: 4, 8, 16, 32
#define MB 8
// @tune NB: 16, 32, 64, 128
#define NB 32
// @tune KB: 64, 128, 256, 512
#define KB 256
// @tune ACC: 1, 4, 8, 16
#define ACC 8

static inline float tof(float a) { return a; }
static inline float tof(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
static inline void put(float& o, float a) { o = a; }
static inline void put(uint16_t& o, float a) {  // round to nearest even; NaN stays NaN
    uint32_t u;
    std::memcpy(&u, &a, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) { o = (uint16_t)((u >> 16) | 0x40u); return; }
    u += 0x7fffu + ((u >> 16) & 1u);
    o = (uint16_t)(u >> 16);
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

static int launch(const T* x, const T* w, const T* b, const T* r, T* y, int64_t m, int64_t n, int64_t k) {
    if (m < 0 || n < 0 || k < 0) return 1;
    std::vector<float> xs((size_t)MB * KB), ws((size_t)NB * KB), acc((size_t)MB * NB);
    for (int64_t i0 = 0; i0 < m; i0 += MB) {
        const int64_t mi = m - i0 < MB ? m - i0 : MB;
        for (int64_t j0 = 0; j0 < n; j0 += NB) {
            const int64_t nj = n - j0 < NB ? n - j0 : NB;
            std::fill(acc.begin(), acc.end(), 0.f);
            for (int64_t k0 = 0; k0 < k; k0 += KB) {
                const int64_t kk = k - k0 < KB ? k - k0 : KB;
                for (int64_t i = 0; i < mi; ++i)
                    for (int64_t q = 0; q < kk; ++q) xs[i * KB + q] = tof(x[(i0 + i) * k + k0 + q]);
                for (int64_t j = 0; j < nj; ++j)
                    for (int64_t q = 0; q < kk; ++q) ws[j * KB + q] = tof(w[(j0 + j) * k + k0 + q]);
                for (int64_t i = 0; i < mi; ++i)
                    for (int64_t j = 0; j < nj; ++j) acc[i * NB + j] += dot(&xs[i * KB], &ws[j * KB], kk);
            }
            for (int64_t i = 0; i < mi; ++i)
                for (int64_t j = 0; j < nj; ++j) {
                    float v = acc[i * NB + j];
#if HAS_BIAS
                    v += tof(b[j0 + j]);
#endif
                    v = act(v);
#if HAS_RES
                    v += tof(r[(i0 + i) * n + j0 + j]);
#endif
                    put(y[(i0 + i) * n + j0 + j], v);
                }
        }
    }
    return 0;
}

#if FORGE_GEMM_BIAS && FORGE_GEMM_RESIDUAL
extern "C" int forge_launch(const T* x, const T* w, const T* b, const T* r, T* y, int64_t m, int64_t n, int64_t k) {
    return launch(x, w, b, r, y, m, n, k);
}
#elif FORGE_GEMM_BIAS
extern "C" int forge_launch(const T* x, const T* w, const T* b, T* y, int64_t m, int64_t n, int64_t k) {
    return launch(x, w, b, nullptr, y, m, n, k);
}
#elif FORGE_GEMM_RESIDUAL
extern "C" int forge_launch(const T* x, const T* w, const T* r, T* y, int64_t m, int64_t n, int64_t k) {
    return launch(x, w, nullptr, r, y, m, n, k);
}
#else
extern "C" int forge_launch(const T* x, const T* w, T* y, int64_t m, int64_t n, int64_t k) {
    return launch(x, w, nullptr, nullptr, y, m, n, k);
}
#endif
