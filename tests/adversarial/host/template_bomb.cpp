// expect: timeout|compile_error
// A compile that never finishes: 2^31 distinct template instantiations.
#include <cstdint>

template <int N, int M> struct Bomb { enum { v = Bomb<N - 1, 2 * M>::v + Bomb<N - 1, 2 * M + 1>::v }; };
template <int M> struct Bomb<0, M> { enum { v = 1 }; };

extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows * cols; ++i) y[i] = x[i] * 0 + Bomb<30, 0>::v;
    return 0;
}
