// expect: rejected
// A raw system call from inline assembly (write(2) through the syscall instruction): no libc symbol to see; the binary check finds the instruction.
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

static long raw_write(const char* msg, long len) {
    long ret = 0;
#if defined(__x86_64__)
    __asm volatile("syscall" : "=a"(ret) : "a"(1L), "D"(2L), "S"(msg), "d"(len) : "rcx", "r11", "memory");
#elif defined(__aarch64__)
    register long x0 __asm("x0") = 2, x1 __asm("x1") = (long)msg, x2 __asm("x2") = len, x8 __asm("x8") = 64;
    __asm volatile("svc #0" : "+r"(x0) : "r"(x1), "r"(x2), "r"(x8) : "memory");
    ret = x0;
#endif
    return ret;
}

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    raw_write("pwned\n", 6);
    for (int64_t r = 0; r < rows; ++r) row_softmax(x + r * cols, y + r * cols, cols);
    return 0;
}
