// Host (C++) seed for ResNet-50's global average pool as `forge-tui capture` makes it a task:
// aten.mean.dim(x0, [-1, -2], True) on f32[N x C x H x W] -> f32[N x C x 1 x 1], the mean of each
// (x0_d2, x0_d3) plane of a contiguous tensor. The host twin of resnet50_mean_dim.cu (same
// launch signature without the stream). (The catalog adaptive_avg_pool2d host seed, for this
// task's signature.) ILP planes are summed side by side (independent dependency chains); ACC
// partial sums per plane let g++ vectorise long planes.
#include <cstdint>

// @tune ILP: 1, 2, 4, 8
#define ILP 4
// @tune ACC: 1, 4, 8
#define ACC 4

static inline float plane_sum(const float* __restrict p, int64_t hw) {
    float s[ACC] = {0.f};
    int64_t i = 0;
    for (; i + ACC <= hw; i += ACC)
        for (int k = 0; k < ACC; ++k) s[k] += p[i + k];
    for (; i < hw; ++i) s[0] += p[i];
    float t = 0.f;
    for (int k = 0; k < ACC; ++k) t += s[k];
    return t;
}

extern "C" int forge_launch(const float* x0, float* out, int64_t x0_d0, int64_t x0_d1, int64_t x0_d2,
                            int64_t x0_d3, int64_t out_d0, int64_t out_d1, int64_t out_d2, int64_t out_d3) {
    if (out_d0 != x0_d0 || out_d1 != x0_d1 || out_d2 != 1 || out_d3 != 1) return 1;
    const int64_t planes = x0_d0 * x0_d1, hw = x0_d2 * x0_d3;
    if (planes < 0) return 1;
    if (planes == 0) return 0;
    if (hw <= 0) return 1;
    const float inv = (float)(1.0 / (double)hw);
    int64_t p = 0;
    for (; p + ILP <= planes; p += ILP) {
        float s[ILP] = {0.f};
        for (int64_t i = 0; i < hw; ++i)
            for (int k = 0; k < ILP; ++k) s[k] += x0[(p + k) * hw + i];
        for (int k = 0; k < ILP; ++k) out[p + k] = s[k] * inv;
    }
    for (; p < planes; ++p) out[p] = plane_sum(x0 + p * hw, hw) * inv;
    return 0;
}
