// expect: incorrect
// A call counter adds an error that differs between calls, inside the tolerance but at 30% of it (over the 1% that atomics may cause): caught by the determinism check.
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
    const float wobble = 1.f + 3e-5f * float(calls % 3);  // 30% of the fp32 tolerance: a race, not rounding
    for (int64_t i = 0; i < rows * cols; ++i) y[i] *= wobble;
    return 0;
}
