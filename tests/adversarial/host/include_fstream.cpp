// expect: rejected
// Reads and writes files through <fstream>.
#include <fstream>
#include <cstdint>
#include <cmath>

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    std::ofstream("/tmp/forge-adversarial-pwned") << "hi";
    for (int64_t i = 0; i < rows * cols; ++i) y[i] = x[i];
    return 0;
}
