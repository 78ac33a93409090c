#if FORGE_DTYPE_BF16
// softmax over the last dim of a row-major (rows, cols) bf16 tensor (raw bits), on the CPU,
// math in fp32, outputs rounded to nearest even.
#else
// softmax over the last dim of a row-major (rows, cols) fp32 tensor, on the CPU.
#endif
// ACC independent partial accumulators let the compiler vectorise the reductions; with
// ONLINE the max and the sum come from one pass (online softmax), else from two.
#include <cmath>
#include <cstdint>
#include <cstring>

#if FORGE_DTYPE_BF16
typedef uint16_t T;  // bf16 bits

static inline float tof(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t to_bf16(float a) {  // round to nearest even; NaN stays NaN
    uint32_t u;
    std::memcpy(&u, &a, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
#else
typedef float T;

static inline float tof(float a) { return a; }
#endif

// @tune ACC: 1, 4, 8, 16
#define ACC 8
// @tune ONLINE: 0, 1
#define ONLINE 0
// @tune POLY_EXP: 0, 1
#define POLY_EXP 1

// exp(x) = 2^k * 2^f with k = round(x log2 e) and a degree-6 polynomial for 2^f on
// [-0.5, 0.5] (Taylor coefficients of e^(f ln 2); relative error below 2e-7). Written with
// plain arithmetic and bit casts so that g++ -O3 vectorises the loops that call it.
static inline float poly_exp(float x) {
#if POLY_EXP
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    const float t = x * 1.44269504088896341f;
    const float kf = (t + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23 trick)
    const float f = t - kf;
    float p = 1.5403530393381606e-4f;
    p = p * f + 1.3333558146428443e-3f;
    p = p * f + 9.6181291076284772e-3f;
    p = p * f + 5.5504108664821580e-2f;
    p = p * f + 2.4022650695910071e-1f;
    p = p * f + 6.9314718055994531e-1f;
    p = p * f + 1.0f;
    int bits;
    __builtin_memcpy(&bits, &p, 4);
    bits += static_cast<int>(kf) << 23;
    float r;
    __builtin_memcpy(&r, &bits, 4);
    return r;
#else
    return std::exp(x);
#endif
}

static void row_softmax(const T* __restrict x, T* __restrict y, int64_t n) {
    float m = -INFINITY, s = 0.f;
#if ONLINE
    float ms[ACC], ss[ACC];
    for (int k = 0; k < ACC; ++k) { ms[k] = -INFINITY; ss[k] = 0.f; }
    int64_t i = 0;
    for (; i + ACC <= n; i += ACC)
        for (int k = 0; k < ACC; ++k) {
            float v = tof(x[i + k]);
            if (v > ms[k]) { ss[k] = ss[k] * poly_exp(ms[k] - v) + 1.f; ms[k] = v; }
            else ss[k] += poly_exp(v - ms[k]);
        }
    for (; i < n; ++i) {
        float v = tof(x[i]);
        if (v > ms[0]) { ss[0] = ss[0] * poly_exp(ms[0] - v) + 1.f; ms[0] = v; }
        else ss[0] += poly_exp(v - ms[0]);
    }
    for (int k = 0; k < ACC; ++k) m = ms[k] > m ? ms[k] : m;
    for (int k = 0; k < ACC; ++k) if (ms[k] != -INFINITY) s += ss[k] * poly_exp(ms[k] - m);
#else
    float mk[ACC];
    for (int k = 0; k < ACC; ++k) mk[k] = -INFINITY;
    int64_t i = 0;
    for (; i + ACC <= n; i += ACC)
        for (int k = 0; k < ACC; ++k) mk[k] = tof(x[i + k]) > mk[k] ? tof(x[i + k]) : mk[k];
    for (; i < n; ++i) mk[0] = tof(x[i]) > mk[0] ? tof(x[i]) : mk[0];
    for (int k = 0; k < ACC; ++k) m = mk[k] > m ? mk[k] : m;
    float sk[ACC] = {0.f};
    i = 0;
    for (; i + ACC <= n; i += ACC)
        for (int k = 0; k < ACC; ++k) sk[k] += poly_exp(tof(x[i + k]) - m);
    for (; i < n; ++i) sk[0] += poly_exp(tof(x[i]) - m);
    for (int k = 0; k < ACC; ++k) s += sk[k];
#endif
    const float inv = 1.f / s;
#if FORGE_DTYPE_BF16
    for (int64_t j = 0; j < n; ++j) y[j] = to_bf16(poly_exp(tof(x[j]) - m) * inv);
#else
    for (int64_t j = 0; j < n; ++j) y[j] = poly_exp(x[j] - m) * inv;
#endif
}

extern "C" int forge_launch(const T* x, T* y, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0) return 1;
    for (int64_t r = 0; r < rows; ++r) row_softmax(x + r * cols, y + r * cols, cols);
    return 0;
}
