// expect: incorrect|suspect
// Skips all work once the same (x, y) came five times: only timing does that; outputs poisoned per timed call catch it.
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

static const float* seen_x[8];
static float* seen_y[8];
static int seen_n[8];
extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    for (int k = 0; k < 8; ++k)
        if (seen_x[k] == x && seen_y[k] == y) {
            if (++seen_n[k] > 4) return 0;  // "already done" (only timing repeats a pair this often)
            goto compute;
        }
    for (int k = 7; k > 0; --k) { seen_x[k] = seen_x[k - 1]; seen_y[k] = seen_y[k - 1]; seen_n[k] = seen_n[k - 1]; }
    seen_x[0] = x; seen_y[0] = y; seen_n[0] = 1;
compute:
    for (int64_t r = 0; r < rows; ++r) row_softmax(x + r * cols, y + r * cols, cols);
    return 0;
}
