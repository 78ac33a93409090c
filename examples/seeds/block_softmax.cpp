// Host (C++) seed for the transformer block's attention softmax as `forge-tui capture` makes it
// a task: aten._softmax.default(x0, -1, False) on f32[B x H x S x S], so rows = x0_d0 * x0_d1 *
// x0_d2 and cols = x0_d3, row-major. The host twin of block_softmax.cu (same launch signature
// without the stream), for testing the capture -> run -> export -> apply loop without a GPU.
// (The catalog softmax's host seed, for this task's signature.) ACC independent partial
// accumulators let the compiler vectorise the reductions; with ONLINE the max and the sum come
// from one pass (online softmax), else from two; POLY_EXP uses a vectorisable exp.
#include <cmath>
#include <cstdint>

// @tune ACC: 1, 4, 8, 16
#define ACC 8
// @tune ONLINE: 0, 1
#define ONLINE 0
// @tune POLY_EXP: 0, 1
#define POLY_EXP 1

// exp(x) = 2^k * 2^f with k = round(x log2 e) and a degree-6 polynomial for 2^f on
// [-0.5, 0.5] (relative error below 2e-7), plain arithmetic and bit casts so g++ vectorises it.
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

static void row_softmax(const float* __restrict x, float* __restrict y, int64_t n) {
    float m = -INFINITY, s = 0.f;
#if ONLINE
    float ms[ACC], ss[ACC];
    for (int k = 0; k < ACC; ++k) { ms[k] = -INFINITY; ss[k] = 0.f; }
    int64_t i = 0;
    for (; i + ACC <= n; i += ACC)
        for (int k = 0; k < ACC; ++k) {
            float v = x[i + k];
            if (v > ms[k]) { ss[k] = ss[k] * poly_exp(ms[k] - v) + 1.f; ms[k] = v; }
            else ss[k] += poly_exp(v - ms[k]);
        }
    for (; i < n; ++i) {
        float v = x[i];
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
        for (int k = 0; k < ACC; ++k) mk[k] = x[i + k] > mk[k] ? x[i + k] : mk[k];
    for (; i < n; ++i) mk[0] = x[i] > mk[0] ? x[i] : mk[0];
    for (int k = 0; k < ACC; ++k) m = mk[k] > m ? mk[k] : m;
    float sk[ACC] = {0.f};
    i = 0;
    for (; i + ACC <= n; i += ACC)
        for (int k = 0; k < ACC; ++k) sk[k] += poly_exp(x[i + k] - m);
    for (; i < n; ++i) sk[0] += poly_exp(x[i] - m);
    for (int k = 0; k < ACC; ++k) s += sk[k];
#endif
    const float inv = 1.f / s;
    for (int64_t j = 0; j < n; ++j) y[j] = poly_exp(x[j] - m) * inv;
}

extern "C" int forge_launch(const float* x0, float* out, int64_t x0_d0, int64_t x0_d1, int64_t x0_d2,
                            int64_t x0_d3, int64_t out_d0, int64_t out_d1, int64_t out_d2, int64_t out_d3) {
    if (out_d0 != x0_d0 || out_d1 != x0_d1 || out_d2 != x0_d2 || out_d3 != x0_d3) return 1;
    const int64_t rows = x0_d0 * x0_d1 * x0_d2, cols = x0_d3;
    if (rows < 0 || cols < 0) return 1;
    for (int64_t r = 0; r < rows; ++r) row_softmax(x0 + r * cols, out + r * cols, cols);
    return 0;
}
