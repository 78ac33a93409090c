// BatchNorm in eval mode then ReLU over a contiguous NCHW fp32 tensor on the CPU, fused
// (ResNet's conv -> bn -> relu); the residual variant adds the block's shortcut before the
// ReLU. Per (n, c) plane of HW elements: scale = w[c] * rsqrt(running_var[c] + eps), shift =
// b[c] - running_mean[c] * scale, then y = relu(x * scale + shift [+ residual]) over the
// plane, a loop g++ vectorises and unrolls UNROLL times. ReLU keeps a NaN.
#include <cmath>
#include <cstdint>

typedef float T;  // torchvision's ResNet-50 runs fp32
#define EPS 1e-5f

// @tune UNROLL: 1, 2, 4, 8
#define UNROLL 4
#define PRAGMA_STR(x) _Pragma(#x)
#define UNROLL_LOOP(n) PRAGMA_STR(GCC unroll n)

static inline float relu(float a) { return a < 0.f ? 0.f : a; }

#if FORGE_BN_ADD
extern "C" int forge_launch(const T* x, const T* weight, const T* bias, const T* running_mean,
                            const T* running_var, const T* residual, T* y, int64_t N, int64_t C,
                            int64_t HW) {
#else
extern "C" int forge_launch(const T* x, const T* weight, const T* bias, const T* running_mean,
                            const T* running_var, T* y, int64_t N, int64_t C, int64_t HW) {
#endif
    if (N < 0 || C < 0 || HW < 0) return 1;
    for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c) {
            const float sc = weight[c] / std::sqrt(running_var[c] + EPS);
            const float sh = bias[c] - running_mean[c] * sc;
            const int64_t p = (n * C + c) * HW;
            const T* __restrict xp = x + p;
            T* __restrict yp = y + p;
#if FORGE_BN_ADD
            const T* __restrict rp = residual + p;
#endif
            UNROLL_LOOP(UNROLL)
            for (int64_t i = 0; i < HW; ++i)
#if FORGE_BN_ADD
                yp[i] = relu(xp[i] * sc + sh + rp[i]);
#else
                yp[i] = relu(xp[i] * sc + sh);
#endif
        }
    return 0;
}
