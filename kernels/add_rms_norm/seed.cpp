// Residual add + RMS norm over the last dim of row-major (rows, cols) tensors on the CPU,
// fused, in the form transformers' decoders write it (Llama/Qwen): s = x + residual rounded
// to T, h = s in fp32, y = w * (h * rsqrt(mean(h^2) + eps)) rounded to T, then rounded again.
// The row's sum goes to y first (y holds s between the passes: T keeps s exactly, as eager
// stores it), so the second pass reads one array, not two.
// ACC independent partial sums let g++ vectorise the sum of squares.
#include <cmath>
#include <cstdint>
#include <cstring>

#if FORGE_DTYPE_BF16
typedef uint16_t T;  // bf16 bits
#else
typedef float T;
#endif
#define EPS 1e-6f

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
// a value rounded to T and read back as fp32 (what eager stores between its kernels)
static inline float rnd(float a) {
    T t;
    put(t, a);
    return tof(t);
}

static void row_norm(const T* __restrict x, const T* __restrict res, const T* __restrict w, T* __restrict y,
                     int64_t n) {
    float q[ACC] = {0.f};
    int64_t i = 0;
    for (; i + ACC <= n; i += ACC)
        for (int k = 0; k < ACC; ++k) {
            T s;
            put(s, tof(x[i + k]) + tof(res[i + k]));
            y[i + k] = s;
            const float v = tof(s);
            q[k] += v * v;
        }
    for (; i < n; ++i) {
        put(y[i], tof(x[i]) + tof(res[i]));
        const float v = tof(y[i]);
        q[0] += v * v;
    }
    float sq = 0.f;
    for (int k = 0; k < ACC; ++k) sq += q[k];
    const float r = 1.f / std::sqrt(sq / (float)n + EPS);
    for (int64_t j = 0; j < n; ++j) put(y[j], tof(w[j]) * rnd(tof(y[j]) * r));
}

extern "C" int forge_launch(const T* x, const T* residual, const T* w, T* y, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0) return 1;
    for (int64_t r = 0; r < rows; ++r) row_norm(x + r * cols, residual + r * cols, w, y + r * cols, cols);
    return 0;
}
