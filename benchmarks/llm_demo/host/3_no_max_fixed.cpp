// llm-demo: 3_no_max_fixed
// softmax over the last dim on the CPU. Fix: subtract the row max before exp (exp(x) is inf for
// x > 88 and inf / inf is NaN): a vectorised max pass (8 partial maxima), then the sum of
// exp(x - max) written into y (8 partial sums), then scale.
#include <cmath>
#include <cstdint>

#define ACC 8

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0) return 1;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        float* out = y + r * cols;
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
                out[i + k] = std::exp(row[i + k] - m);
                sk[k] += out[i + k];
            }
        for (; i < cols; ++i) { out[i] = std::exp(row[i] - m); sk[0] += out[i]; }
        float s = 0.f;
        for (int k = 0; k < ACC; ++k) s += sk[k];
        const float inv = 1.f / s;
        for (int64_t c = 0; c < cols; ++c) out[c] *= inv;
    }
    return 0;
}
