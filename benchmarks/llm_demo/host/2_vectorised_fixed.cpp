// llm-demo: 2_vectorised_fixed
// softmax over the last dim on the CPU with 8 independent accumulators per reduction, so g++
// vectorises the max and the sum (one dependency chain per lane instead of one for the row).
#include <cmath>
#include <cstdint>

#define ACC 8

static float row_max(const float* __restrict x, int64_t n) {
    float mk[ACC];
    for (int k = 0; k < ACC; ++k) mk[k] = -INFINITY;
    int64_t i = 0;
    for (; i + ACC <= n; i += ACC)
        for (int k = 0; k < ACC; ++k) mk[k] = x[i + k] > mk[k] ? x[i + k] : mk[k];
    for (; i < n; ++i) mk[0] = x[i] > mk[0] ? x[i] : mk[0];
    float m = mk[0];
    for (int k = 1; k < ACC; ++k) m = mk[k] > m ? mk[k] : m;
    return m;
}

// writes exp(x - m) into y and returns its sum, ACC partial sums
static float exp_sum(const float* __restrict x, float* __restrict y, int64_t n, float m) {
    float sk[ACC] = {0.f};
    int64_t i = 0;
    for (; i + ACC <= n; i += ACC)
        for (int k = 0; k < ACC; ++k) {
            y[i + k] = std::exp(x[i + k] - m);
            sk[k] += y[i + k];
        }
    for (; i < n; ++i) { y[i] = std::exp(x[i] - m); sk[0] += y[i]; }
    float s = 0.f;
    for (int k = 0; k < ACC; ++k) s += sk[k];
    return s;
}

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0) return 1;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        float* out = y + r * cols;
        const float m = row_max(row, cols);
        const float s = exp_sum(row, out, cols, m);
        const float inv = 1.f / s;
        for (int64_t c = 0; c < cols; ++c) out[c] *= inv;
    }
    return 0;
}
