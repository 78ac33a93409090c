// expect: incorrect
// A call counter adds a tiny, in-tolerance error that differs between calls: caught by the determinism check.
#include <cmath>
#include <cstdint>

static void row_softmax(const float* x, float* y, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
    float s = 0.f;
    for (int64_t i = 0; i < n; ++i) { float e = std::exp(x[i] - m); y[i] = e; s += e; }
    const float inv = 1.f / s;
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

static unsigned calls = 0;
extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    ++calls;
    for (int64_t r = 0; r < rows; ++r) row_softmax(x + r * cols, y + r * cols, cols);
    const float wobble = 1.f + 1e-6f * float(calls % 3);
    for (int64_t i = 0; i < rows * cols; ++i) y[i] *= wobble;
    return 0;
}
