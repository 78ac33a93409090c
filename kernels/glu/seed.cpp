// Gated activation act(gate) * up, elementwise over two same-shape tensors of n elements on
// the CPU, fp32 math, one rounding at the store. ACT 0: SwiGLU, silu(g) = g / (1 + exp(-g));
// ACT 1: GeGLU with exact GELU, 0.5 g (1 + erf(g / sqrt 2)); ACT 2: GeGLU with the tanh
// approximation 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
// POLY 1 replaces the libm call (exp, erf or tanh) with branch-free arithmetic that g++
// vectorises: a polynomial exp, tanh(u) = 1 - 2 / (exp(2u) + 1), and erf from
// Abramowitz-Stegun 7.1.26 (absolute error below 1.5e-7), as kernels/gelu/seed.cpp does.
#include <cmath>
#include <cstdint>
#include <cstring>

#if FORGE_DTYPE_BF16
typedef uint16_t T;  // bf16 bits
#else
typedef float T;
#endif
#if FORGE_GLU_GELU && FORGE_GELU_TANH
#define ACT 2
#elif FORGE_GLU_GELU
#define ACT 1
#else
#define ACT 0
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

static inline float act(float g) {
#if ACT == 0
#if POLY
    return g / (1.f + poly_exp(-g));
#else
    return g / (1.f + std::exp(-g));
#endif
#elif ACT == 2
    const float u = 0.7978845608028654f * (g + 0.044715f * g * g * g);
#if POLY
    const float t = 1.f - 2.f / (poly_exp(2.f * u) + 1.f);
#else
    const float t = std::tanh(u);
#endif
    return 0.5f * g * (1.f + t);
#else
    const float z = g * 0.7071067811865476f;
#if POLY
    const float a = std::fabs(z);
    const float k = 1.f / (1.f + 0.3275911f * a);
    const float p = ((((1.061405429f * k - 1.453152027f) * k + 1.421413741f) * k - 0.284496736f) * k + 0.254829592f) * k;
    const float e = 1.f - p * poly_exp(-a * a);
    const float erf_z = std::copysign(e, z);
#else
    const float erf_z = std::erf(z);
#endif
    return 0.5f * g * (1.f + erf_z);
#endif
}

extern "C" int forge_launch(const T* gate, const T* up, T* y, int64_t n) {
    if (n < 0) return 1;
    float buf[CHUNK];
    for (int64_t b = 0; b < n; b += CHUNK) {
        const int64_t m = n - b < CHUNK ? n - b : CHUNK;
        for (int64_t i = 0; i < m; ++i) buf[i] = tof(gate[b + i]);
        for (int64_t i = 0; i < m; ++i) buf[i] = act(buf[i]);
        for (int64_t i = 0; i < m; ++i) put(y[b + i], buf[i] * tof(up[b + i]));
    }
    return 0;
}
