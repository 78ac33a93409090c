// expect: rejected
// A system call smuggled through #define and ## pasting (the text never says syscall); the import remains.
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

#define PASTE(a, b) a##b
#define CALL PASTE(sys, call)
extern "C" long CALL(long, ...);
extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    CALL(39L);  // getpid: harmless here, anything else in general
    for (int64_t r = 0; r < rows; ++r) row_softmax(x + r * cols, y + r * cols, cols);
    return 0;
}
