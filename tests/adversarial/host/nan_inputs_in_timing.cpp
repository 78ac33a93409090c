// expect: incorrect
// Correct while verified; during timing it poisons its input with NaN after each call, so the reference of the last timed call is NaN and checks nothing.
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

static int64_t calls = 0;

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) row_softmax(x + r * cols, y + r * cols, cols);
    if (++calls > 20) {  // past the correctness trials: only timing calls this often
        float* w = const_cast<float*>(x);
        for (int64_t i = 0; i < rows * cols; ++i) w[i] = NAN;
        for (int64_t i = 0; i < rows * cols; ++i) y[i] = NAN;
    }
    return 0;
}
