#if FORGE_MASK
// softmax(x * SCALE + mask) over the last dim of attention scores x on the CPU, x seen as a
// row-major (rows, cols) matrix (rows = B*H*Sq, cols = Sk). The additive mask holds the
// (Sq, Sk) block once per mrep consecutive blocks of x: row r reads mask row
// ((r / q) / mrep) * q + r % q, q = Sq.
#else
// softmax(x * SCALE) over the last dim of attention scores x on the CPU, x seen as a
// row-major (rows, cols) matrix (rows = B*H*Sq, cols = Sk).
#endif
// Math in fp32 (bf16 as raw bits, rounded to nearest even on the store). Each row's scaled
// scores go to a buffer once; max, then exp(v - max) in place and its sum (ACC partial
// sums, so g++ vectorises), then the scaled store. A row of only -inf gives NaN, as
// torch.softmax does. exp is a polynomial (POLY_EXP 1) that g++ vectorises, or std::exp.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if FORGE_DTYPE_BF16
typedef uint16_t T;  // bf16 bits
#else
typedef float T;
#endif
#if FORGE_MASK
#define MASK 1
#else
#define MASK 0
#endif
#define SCALE 0.125f

// @tune ACC: 1, 4, 8, 16
#define ACC 8
// @tune POLY_EXP: 0, 1
#define POLY_EXP 1

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

// exp(x) = 2^k * 2^f with k = round(x log2 e) and a degree-6 polynomial for 2^f on
// [-0.5, 0.5] (Taylor coefficients of e^(f ln 2); relative error below 2e-7); 0 below -87
// (exp(-87) is 1.6e-38, under FLT_MIN), so a masked -inf gives 0. Plain arithmetic and bit
// casts, so that g++ -O3 vectorises the loops that call it.
static inline float poly_exp(float x) {
#if POLY_EXP
    const bool under = x < -87.0f;
    x = under ? -87.0f : (x > 88.0f ? 88.0f : x);
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
    std::memcpy(&bits, &p, 4);
    bits += static_cast<int>(kf) << 23;
    float r;
    std::memcpy(&r, &bits, 4);
    return under ? 0.f : r;
#else
    return std::exp(x);
#endif
}

static void row_softmax(const T* __restrict x, const T* __restrict mr, T* __restrict y, float* __restrict v,
                        int64_t n) {
    for (int64_t j = 0; j < n; ++j) v[j] = MASK ? tof(x[j]) * SCALE + tof(mr[j]) : tof(x[j]) * SCALE;
    float mk[ACC];
    for (int k = 0; k < ACC; ++k) mk[k] = -INFINITY;
    int64_t i = 0;
    for (; i + ACC <= n; i += ACC)
        for (int k = 0; k < ACC; ++k) mk[k] = v[i + k] > mk[k] ? v[i + k] : mk[k];
    for (; i < n; ++i) mk[0] = v[i] > mk[0] ? v[i] : mk[0];
    float m = -INFINITY;
    for (int k = 0; k < ACC; ++k) m = mk[k] > m ? mk[k] : m;
    float sk[ACC] = {0.f};
    i = 0;
    for (; i + ACC <= n; i += ACC)
        for (int k = 0; k < ACC; ++k) {
            v[i + k] = poly_exp(v[i + k] - m);  // -inf -> 0; NaN when the whole row is -inf
            sk[k] += v[i + k];
        }
    for (; i < n; ++i) {
        v[i] = poly_exp(v[i] - m);
        sk[0] += v[i];
    }
    float s = 0.f;
    for (int k = 0; k < ACC; ++k) s += sk[k];
    const float inv = 1.f / s;
    for (int64_t j = 0; j < n; ++j) put(y[j], v[j] * inv);
}

static int run(const T* x, const T* mask, T* y, int64_t rows, int64_t cols, int64_t q, int64_t mrep) {
    if (rows < 0 || cols < 0) return 1;
    if (rows == 0 || cols == 0) return 0;
    std::vector<float> buf((size_t)cols);
    for (int64_t r = 0; r < rows; ++r) {
        const T* mr = MASK ? mask + ((r / q) / mrep * q + r % q) * cols : nullptr;
        row_softmax(x + r * cols, mr, y + r * cols, buf.data(), cols);
    }
    return 0;
}

#if FORGE_MASK
// q: Sq (x's second-to-last dim); mrep: numel(x) / numel(mask). Returns 1 when they do not
// describe a mask of whole (q, cols) blocks.
extern "C" int forge_launch(const T* x, const T* mask, T* y, int64_t rows, int64_t cols, int64_t q, int64_t mrep) {
    if (rows > 0 && (q <= 0 || mrep <= 0 || rows % q != 0 || (rows / q) % mrep != 0)) return 1;
    return run(x, mask, y, rows, cols, q, mrep);
}
#else
extern "C" int forge_launch(const T* x, T* y, int64_t rows, int64_t cols) {
    return run(x, nullptr, y, rows, cols, 1, 1);
}
#endif
