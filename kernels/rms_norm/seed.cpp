// RMS norm over the last dim of a row-major (rows, cols) tensor on the CPU, fused:
// y = x * rsqrt(mean(x^2) + eps) * w with the statistic in fp32.
// Variants: the upcast one is Llama/Qwen's `w * (h * rsqrt(...)).to(bf16)` with h = x.float()
// (the normalised row rounded to bf16 before the weight multiplies it, as eager does);
// the Gemma one is Gemma's `(h * rsqrt(...) * (1 + w.float())).type_as(x)` (one rounding).
// ACC independent partial sums let g++ vectorise the sum of squares; the output pass
// re-reads x, which for rows of a few thousand elements is still in L1/L2.
#include <cmath>
#include <cstdint>
#include <cstring>

#if FORGE_DTYPE_BF16
typedef uint16_t T;  // bf16 bits
#else
typedef float T;
#endif
#if FORGE_RMS_UPCAST || FORGE_RMS_GEMMA
#define EPS 1e-6f
#else
#define EPS 1e-5f
#endif

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
#if FORGE_RMS_UPCAST
// h.to(x.dtype): the value rounded to T and read back as fp32
static inline float rnd(float a) {
    T t;
    put(t, a);
    return tof(t);
}
#endif

static void row_norm(const T* __restrict x, const T* __restrict w, T* __restrict y, int64_t n) {
    float q[ACC] = {0.f};
    int64_t i = 0;
    for (; i + ACC <= n; i += ACC)
        for (int k = 0; k < ACC; ++k) {
            const float v = tof(x[i + k]);
            q[k] += v * v;
        }
    for (; i < n; ++i) {
        const float v = tof(x[i]);
        q[0] += v * v;
    }
    float sq = 0.f;
    for (int k = 0; k < ACC; ++k) sq += q[k];
    const float r = 1.f / std::sqrt(sq / (float)n + EPS);
#if FORGE_RMS_GEMMA
    for (int64_t j = 0; j < n; ++j) put(y[j], tof(x[j]) * r * (1.f + tof(w[j])));
#elif FORGE_RMS_UPCAST
    for (int64_t j = 0; j < n; ++j) put(y[j], tof(w[j]) * rnd(tof(x[j]) * r));
#else
    for (int64_t j = 0; j < n; ++j) put(y[j], tof(x[j]) * r * tof(w[j]));
#endif
}

extern "C" int forge_launch(const T* x, const T* w, T* y, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0) return 1;
    for (int64_t r = 0; r < rows; ++r) row_norm(x + r * cols, w, y + r * cols, cols);
    return 0;
}
