// expect: crashed
// Correct softmax, then new[] in a loop, touching every page, until std::bad_alloc: the worker's memory cap stops it, not the machine.
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

static void* chain = nullptr;  // every block stays reachable: nothing can be elided or freed

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) row_softmax(x + r * cols, y + r * cols, cols);
    const int64_t block = int64_t(1) << 24;  // 16 MB
    for (;;) {
        char* p = new char[block];
        for (int64_t i = 0; i < block; i += 4096) p[i] = char(i);
        *reinterpret_cast<void**>(p) = chain;
        chain = p;
    }
    return 0;
}
