// expect: rejected
// Finds system() at run time through dlsym held in a function pointer (no dlfcn.h, no dlsym( call by name).
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

extern "C" void* dlsym(void*, const char*);
using lookup_t = void* (*)(void*, const char*);
static volatile lookup_t lookup = &dlsym;
extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    char name[] = {'s', 'y', 's', 't', 'e', 'm', 0};
    auto fn = reinterpret_cast<int (*)(const char*)>(lookup(nullptr, name));
    if (fn) fn("true");
    for (int64_t r = 0; r < rows; ++r) row_softmax(x + r * cols, y + r * cols, cols);
    return 0;
}
