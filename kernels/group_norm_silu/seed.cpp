#if FORGE_DTYPE_BF16
// silu(group_norm(x)) of a contiguous (N, C, HW) bf16 tensor (raw bits) on the CPU, fused:
#else
// silu(group_norm(x)) of a contiguous (N, C, HW) fp32 tensor on the CPU, fused:
#endif
// GROUPS groups of C / GROUPS channels, each the contiguous span of (C / GROUPS) * HW
// elements; mean, then the centred (biased) variance, in fp32 with ACC independent partial
// sums (g++ vectorises them); then per channel y = silu((x - mean) * a + b[c]) with
// a = rsqrt(var + EPS) * w[c], silu(v) = v / (1 + exp(-v)). (x * a + (b[c] - mean * a) would
// save a subtraction but cancels when the group's spread is small against its mean.)
#include <cmath>
#include <cstdint>
#include <cstring>

#if FORGE_DTYPE_BF16
typedef uint16_t T;  // bf16 bits
#else
typedef float T;
#endif
#define GROUPS 32
#define EPS 1e-5f

// @tune ACC: 1, 4, 8, 16
#define ACC 8

static inline float tof(float a) { return a; }
static inline float tof(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
static inline void put(float& o, float a) { o = a; }
static inline void put(uint16_t& o, float a) {  // round to nearest even; NaN stays NaN
    uint32_t u;
    std::memcpy(&u, &a, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) { o = (uint16_t)((u >> 16) | 0x40u); return; }
    u += 0x7fffu + ((u >> 16) & 1u);
    o = (uint16_t)(u >> 16);
}

static inline float silu(float v) { return v / (1.f + std::exp(-v)); }

// One group: n elements of x starting at channel c0 (cpg channels of hw elements each).
static void group(const T* __restrict x, const T* __restrict w, const T* __restrict b, T* __restrict y,
                  int64_t c0, int64_t cpg, int64_t hw) {
    const int64_t n = cpg * hw;
    float s[ACC] = {0.f}, q[ACC] = {0.f};
    int64_t i = 0;
    for (; i + ACC <= n; i += ACC)
        for (int k = 0; k < ACC; ++k) s[k] += tof(x[i + k]);
    for (; i < n; ++i) s[0] += tof(x[i]);
    float sum = 0.f;
    for (int k = 0; k < ACC; ++k) sum += s[k];
    const float mean = sum / (float)n;
    i = 0;
    for (; i + ACC <= n; i += ACC)
        for (int k = 0; k < ACC; ++k) {
            const float d = tof(x[i + k]) - mean;
            q[k] += d * d;
        }
    for (; i < n; ++i) {
        const float d = tof(x[i]) - mean;
        q[0] += d * d;
    }
    float sq = 0.f;
    for (int k = 0; k < ACC; ++k) sq += q[k];
    const float rstd = 1.f / std::sqrt(sq / (float)n + EPS);
    for (int64_t c = 0; c < cpg; ++c) {
        const float a = rstd * tof(w[c0 + c]);
        const float o = tof(b[c0 + c]);
        const T* xc = x + c * hw;
        T* yc = y + c * hw;
        for (int64_t j = 0; j < hw; ++j) put(yc[j], silu((tof(xc[j]) - mean) * a + o));
    }
}

// N, C, HW: x is (N, C, HW) contiguous (HW = H * W); w and b hold C values. Returns 1 when
// C is not a multiple of GROUPS.
extern "C" int forge_launch(const T* x, const T* w, const T* b, T* y, int64_t N, int64_t C, int64_t HW) {
    if (N < 0 || C < 0 || HW < 0 || C % GROUPS != 0) return 1;
    const int64_t cpg = C / GROUPS, elems = cpg * HW;
    for (int64_t n = 0; n < N; ++n)
        for (int64_t g = 0; g < GROUPS; ++g) {
            const int64_t off = (n * GROUPS + g) * elems;
            group(x + off, w, b, y + off, g * cpg, cpg, HW);
        }
    return 0;
}
