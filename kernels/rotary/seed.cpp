// Rotary embedding, rotate-half form, on the CPU, fused: y = x * cos + rotate_half(x) * sin
// with rotate_half(x) = cat(-x2, x1), x1 = x[..., :D/2], x2 = x[..., D/2:]; for i < D/2
//   y[i] = x1[i] cos[i] - x2[i] sin[i],  y[i + D/2] = x2[i] cos[i + D/2] + x1[i] sin[i + D/2]
// in fp32. x, y: (batch, heads, seq, dim) contiguous; cos, sin: cos_batch tables of
// (seq, dim), cos_batch 1 (shared) or batch (one per batch row). HEADS_INNER 1: the table
// row of a position is converted to fp32 once and reused for every head (x visited with a
// stride of seq * dim between heads); 0: x in memory order, the table row converted again
// for every head. The inner loop is plain fp32 arithmetic over contiguous halves that g++
// vectorises.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if FORGE_DTYPE_BF16
typedef uint16_t T;  // bf16 bits
#else
typedef float T;
#endif

// @tune HEADS_INNER: 0, 1
#define HEADS_INNER 1
// X_BSHD 1: x is stored (batch, seq, heads, dim), the projection's output before the model's
// view + transpose(1, 2) (a fusion region that starts at the projection); y stays
// (batch, heads, seq, dim). Set per region by forge-tui's pattern seed adapter.
#define X_BSHD 0

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

extern "C" int forge_launch(const T* x, const T* cos, const T* sin, T* y, int64_t batch, int64_t heads,
                            int64_t seq, int64_t dim, int64_t cos_batch) {
    if (batch < 0 || heads < 0 || seq < 0 || dim < 0 || dim % 2 != 0) return 1;
    if (cos_batch != 1 && cos_batch != batch) return 1;
    const int64_t half = dim / 2;
    std::vector<float> c((size_t)dim), s((size_t)dim), a((size_t)half), z((size_t)half);
    auto table = [&](int64_t b, int64_t p) {
        const int64_t t = ((cos_batch == 1 ? 0 : b) * seq + p) * dim;
        for (int64_t i = 0; i < dim; ++i) {
            c[i] = tof(cos[t + i]);
            s[i] = tof(sin[t + i]);
        }
    };
    auto row = [&](int64_t b, int64_t h, int64_t p) {
        const int64_t off = ((b * heads + h) * seq + p) * dim;
        const T* xr = x + (X_BSHD ? ((b * seq + p) * heads + h) * dim : off);
        T* yr = y + off;
        for (int64_t i = 0; i < half; ++i) {
            a[i] = tof(xr[i]);
            z[i] = tof(xr[half + i]);
        }
        for (int64_t i = 0; i < half; ++i) {
            put(yr[i], a[i] * c[i] - z[i] * s[i]);
            put(yr[half + i], z[i] * c[half + i] + a[i] * s[half + i]);
        }
    };
    for (int64_t b = 0; b < batch; ++b) {
#if HEADS_INNER
        for (int64_t p = 0; p < seq; ++p) {
            table(b, p);
            for (int64_t h = 0; h < heads; ++h) row(b, h, p);
        }
#else
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t p = 0; p < seq; ++p) {
                table(b, p);
                row(b, h, p);
            }
#endif
    }
    return 0;
}
