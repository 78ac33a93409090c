// llm-demo: 1_simple
// softmax over the last dim of a row-major (rows, cols) fp32 tensor on the CPU: per row a max
// pass, a pass that writes exp(x - max) and sums it (in double), and a pass that scales.
#include <cmath>
#include <cstdint>

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0) return 1;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        float* out = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = row[c] > m ? row[c] : m;
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) { out[c] = std::exp(row[c] - m); s += out[c]; }
        const float inv = (float)(1.0 / s);
        for (int64_t c = 0; c < cols; ++c) out[c] *= inv;
    }
    return 0;
}
