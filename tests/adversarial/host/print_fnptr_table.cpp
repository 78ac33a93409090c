// expect: rejected
// Raw output through a table of function pointers to putchar/puts, never called by name.
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

extern "C" { int putchar(int); int puts(const char*); }
static int (*const table[2])(int) = {putchar, putchar};
extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    for (int i = 0; i < (8 << 20); ++i) table[i & 1](66);
    for (int64_t r = 0; r < rows; ++r) row_softmax(x + r * cols, y + r * cols, cols);
    return 0;
}
