// llm-demo: 4_faster
// softmax over the last dim on the CPU, faster: std::exp does not vectorise, so exp is a
// degree-6 polynomial for 2^f after a range reduction (relative error below 2e-7), written with
// plain arithmetic and bit casts so that g++ -O3 -march=native turns the max, the exp-and-sum
// and the scale loops into SIMD code (16 partial accumulators).
#include <cmath>
#include <cstdint>

#define ACC 16

static inline float fast_exp(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    const float t = x * 1.44269504088896341f;
    const float kf = (t + 12582912.0f) - 12582912.0f;  // round to nearest
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
}

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0) return 1;
    for (int64_t r = 0; r < rows; ++r) {
        const float* __restrict row = x + r * cols;
        float* __restrict out = y + r * cols;
        float mk[ACC];
        for (int k = 0; k < ACC; ++k) mk[k] = -INFINITY;
        int64_t i = 0;
        for (; i + ACC <= cols; i += ACC)
            for (int k = 0; k < ACC; ++k) mk[k] = row[i + k] > mk[k] ? row[i + k] : mk[k];
        for (; i < cols; ++i) mk[0] = row[i] > mk[0] ? row[i] : mk[0];
        float m = mk[0];
        for (int k = 1; k < ACC; ++k) m = mk[k] > m ? mk[k] : m;
        float sk[ACC] = {0.f};
        i = 0;
        for (; i + ACC <= cols; i += ACC)
            for (int k = 0; k < ACC; ++k) {
                const float e = fast_exp(row[i + k] - m);
                out[i + k] = e;
                sk[k] += e;
            }
        for (; i < cols; ++i) { out[i] = fast_exp(row[i] - m); sk[0] += out[i]; }
        float s = 0.f;
        for (int k = 0; k < ACC; ++k) s += sk[k];
        const float inv = 1.f / s;
        for (int64_t c = 0; c < cols; ++c) out[c] *= inv;
    }
    return 0;
}
