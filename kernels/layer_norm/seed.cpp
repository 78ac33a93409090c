#if FORGE_DTYPE_BF16
// layer_norm over the last dim of a row-major (rows, cols) bf16 tensor with weight and bias, on
#else
// layer_norm over the last dim of a row-major (rows, cols) tensor with weight and bias, on
#endif
// the CPU: y = (x - mean) * rsqrt(var + eps) * w + b, statistics in fp32.
#if FORGE_LN_GELU
#if FORGE_GELU_TANH
// Then GELU (tanh approximation) of y, in the same pass.
#else
// Then GELU (exact, erf) of y, in the same pass.
#endif
#endif
// ACC independent partial sums let g++ vectorise the reductions; ONE_PASS takes the sum and
// the sum of squares in one sweep, else the mean first and then the centred variance.
#include <cmath>
#include <cstdint>
#include <cstring>

#if FORGE_DTYPE_BF16
typedef uint16_t T;  // bf16 bits
#else
typedef float T;
#endif
#define EPS 1e-5f

// @tune ACC: 1, 4, 8, 16
#define ACC 8
// @tune ONE_PASS: 0, 1
#define ONE_PASS 0

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

#if FORGE_LN_GELU
#if FORGE_GELU_TANH
// 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))), torch.nn.functional.gelu(approximate="tanh").
static inline float act(float v) { return 0.5f * v * (1.f + std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v))); }
#else
// 0.5 v (1 + erf(v / sqrt 2)), torch.nn.functional.gelu (exact).
static inline float act(float v) { return 0.5f * v * (1.f + std::erf(v * 0.7071067811865476f)); }
#endif
#endif

static void row_norm(const T* __restrict x, const T* __restrict w, const T* __restrict b, T* __restrict y,
                     int64_t n) {
    float s[ACC] = {0.f}, q[ACC] = {0.f};
    int64_t i = 0;
    for (; i + ACC <= n; i += ACC)
        for (int k = 0; k < ACC; ++k) {
            const float v = tof(x[i + k]);
            s[k] += v;
#if ONE_PASS
            q[k] += v * v;
#endif
        }
    for (; i < n; ++i) {
        const float v = tof(x[i]);
        s[0] += v;
#if ONE_PASS
        q[0] += v * v;
#endif
    }
    float sum = 0.f, sq = 0.f;
    for (int k = 0; k < ACC; ++k) sum += s[k];
    const float mean = sum / (float)n;
#if ONE_PASS
    for (int k = 0; k < ACC; ++k) sq += q[k];
    float var = sq / (float)n - mean * mean;
    var = var > 0.f ? var : 0.f;
#else
    i = 0;
    for (; i + ACC <= n; i += ACC)
        for (int k = 0; k < ACC; ++k) {
            const float d = tof(x[i + k]) - mean;
            q[k] += d * d;
        }
    for (; i < n; ++i) {
        const float d = tof(x[i]) - mean;
        q[0] += d * d;
    }
    for (int k = 0; k < ACC; ++k) sq += q[k];
    const float var = sq / (float)n;
#endif
    const float rstd = 1.f / std::sqrt(var + EPS);
#if FORGE_LN_GELU
    for (int64_t j = 0; j < n; ++j) put(y[j], act((tof(x[j]) - mean) * rstd * tof(w[j]) + tof(b[j])));
#else
    for (int64_t j = 0; j < n; ++j) put(y[j], (tof(x[j]) - mean) * rstd * tof(w[j]) + tof(b[j]));
#endif
}

extern "C" int forge_launch(const T* x, const T* w, const T* b, T* y, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0) return 1;
    for (int64_t r = 0; r < rows; ++r) row_norm(x + r * cols, w, b, y + r * cols, cols);
    return 0;
}
