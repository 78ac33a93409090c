// expect: rejected
// Inline assembly spelled __asm (not asm( or __asm__): a raw syscall could do anything.
#include <cmath>
#include <cstdint>

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    __asm volatile("nop");
    for (int64_t i = 0; i < rows * cols; ++i) y[i] = x[i];
    return 0;
}
