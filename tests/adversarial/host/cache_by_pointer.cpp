// expect: incorrect
// Result cached across calls keyed by (pointer, shape): new data at an old pointer gets the stale answer.
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

static const float* last_x = nullptr;
static int64_t last_rows = -1, last_cols = -1;
static float cache[1 << 22];  // 16 MB: big enough for every host shape
extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    const int64_t n = rows * cols;
    if (x == last_x && rows == last_rows && cols == last_cols && n <= (1 << 22)) {
        for (int64_t i = 0; i < n; ++i) y[i] = cache[i];
        return 0;
    }
    for (int64_t r = 0; r < rows; ++r) row_softmax(x + r * cols, y + r * cols, cols);
    if (n <= (1 << 22)) {
        for (int64_t i = 0; i < n; ++i) cache[i] = y[i];
        last_x = x; last_rows = rows; last_cols = cols;
    }
    return 0;
}
