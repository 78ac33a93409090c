// expect: rejected
// Lifts the worker's address-space cap with setrlimit, then could allocate without bound.
#include <cmath>
#include <cstdint>

struct rlimit_t { unsigned long cur, max; };
extern "C" int setrlimit(int resource, const rlimit_t* rlim);

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    rlimit_t unlimited{~0ul, ~0ul};
    setrlimit(9 /* RLIMIT_AS */, &unlimited);
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = -INFINITY, s = 0.f;
        for (int64_t i = 0; i < cols; ++i) m = xr[i] > m ? xr[i] : m;
        for (int64_t i = 0; i < cols; ++i) { yr[i] = std::exp(xr[i] - m); s += yr[i]; }
        for (int64_t i = 0; i < cols; ++i) yr[i] /= s;
    }
    return 0;
}
