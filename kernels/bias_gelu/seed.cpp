// Bias + GELU, y = gelu(x + b) over a row-major (rows, cols) tensor with b one row of cols,
// on the CPU, fused, fp32 math. APPROX 0: exact, 0.5 v (1 + erf(v / sqrt 2)); APPROX 1: the
// tanh approximation 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))).
// POLY 1 replaces the libm call (erf or tanh) with branch-free arithmetic that g++
// vectorises: tanh(u) = 1 - 2 / (exp(2u) + 1) with a polynomial exp, and erf from
// Abramowitz-Stegun 7.1.26 (absolute error below 1.5e-7), as kernels/gelu/seed.cpp does.
// The bias row is converted to fp32 once; each row is processed in CHUNK-wide pieces.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if FORGE_DTYPE_BF16
typedef uint16_t T;  // bf16 bits
#else
typedef float T;
#endif
#if FORGE_GELU_TANH
#define APPROX 1
#else
#define APPROX 0
#endif

// @tune POLY: 0, 1
#define POLY 1
// @tune CHUNK: 256, 1024, 4096
#define CHUNK 1024

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

// exp(x) = 2^k * p(f), k = round(x log2 e), degree-6 polynomial for 2^f on [-0.5, 0.5].
static inline float poly_exp(float x) {
    x = std::fmin(std::fmax(x, -87.0f), 88.0f);
    const float t = x * 1.44269504088896341f;
    const float kf = (t + 12582912.0f) - 12582912.0f;
    const float f = t - kf;
    float p = 1.5403530393381606e-4f;
    p = p * f + 1.3333558146428443e-3f;
    p = p * f + 9.6181291076284772e-3f;
    p = p * f + 5.5504108664821580e-2f;
    p = p * f + 2.4022650695910071e-1f;
    p = p * f + 6.9314718055994531e-1f;
    p = p * f + 1.0f;
    int bits;
    std::memcpy(&bits, &p, 4);
    bits += static_cast<int>(kf) << 23;
    float r;
    std::memcpy(&r, &bits, 4);
    return r;
}

static inline float gelu(float x) {
#if APPROX
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
#if POLY
    const float t = 1.f - 2.f / (poly_exp(2.f * u) + 1.f);
#else
    const float t = std::tanh(u);
#endif
    return 0.5f * x * (1.f + t);
#else
    const float z = x * 0.7071067811865476f;
#if POLY
    const float a = std::fabs(z);
    const float k = 1.f / (1.f + 0.3275911f * a);
    const float p = ((((1.061405429f * k - 1.453152027f) * k + 1.421413741f) * k - 0.284496736f) * k + 0.254829592f) * k;
    const float e = 1.f - p * poly_exp(-a * a);
    const float erf_z = std::copysign(e, z);
#else
    const float erf_z = std::erf(z);
#endif
    return 0.5f * x * (1.f + erf_z);
#endif
}

extern "C" int forge_launch(const T* x, const T* b, T* y, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0) return 1;
    std::vector<float> bias((size_t)cols);
    for (int64_t j = 0; j < cols; ++j) bias[j] = tof(b[j]);
    float buf[CHUNK];
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * cols;
        T* yr = y + r * cols;
        for (int64_t c0 = 0; c0 < cols; c0 += CHUNK) {
            const int64_t m = cols - c0 < CHUNK ? cols - c0 : CHUNK;
            for (int64_t i = 0; i < m; ++i) buf[i] = tof(xr[c0 + i]) + bias[c0 + i];
            for (int64_t i = 0; i < m; ++i) buf[i] = gelu(buf[i]);
            for (int64_t i = 0; i < m; ++i) put(yr[c0 + i], buf[i]);
        }
    }
    return 0;
}
