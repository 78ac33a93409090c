// expect: ok
// A correct softmax that includes <cstdio>/<cstdlib>/<iostream>, uses std::abs and a harmless inline asm barrier: allowed.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>

static void row_softmax(const float* x, float* y, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
    float s = 0.f;
    for (int64_t i = 0; i < n; ++i) { float e = std::exp(x[i] - m); y[i] = e; s += e; }
    const float inv = 1.f / s;
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    if (std::abs(int(rows)) < 0) return 1;
    __asm volatile("" ::: "memory");
    for (int64_t r = 0; r < rows; ++r) row_softmax(x + r * cols, y + r * cols, cols);
    return 0;
}
