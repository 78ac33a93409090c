// softmax over the last dim of a row-major (rows, cols) bf16 tensor, math in fp32.
// Loads and stores move VEC bf16 values at once (VEC 4: 8 bytes, VEC 8: 16 bytes) where
// cols and the pointers are aligned; outputs are rounded to nearest even.
//
// Rows that fit in a tile of BLOCK * VEC * UNROLL elements are read once into registers
// (all loads issued before any use, for memory-level parallelism), reduced, and written
// from registers: the row crosses DRAM once each way. Longer rows stream tile by tile
// with an online (max, sum), then are read again for the write (mostly from L2).
// When there are fewer rows than BLOCKS_PER_SM * SMs, several blocks share each row:
// a first launch writes each chunk's (max, sum), a second combines them and writes the
// output; with REVERSE the second launch walks the chunks in the opposite order, so it
// starts on what the first launch read last and is still in L2.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>

// @tune BLOCK: 128, 256, 512, 1024
#define BLOCK 256
// @tune VEC: 1, 2, 4, 8
#define VEC 8
// @tune UNROLL: 1, 2, 4, 8
#define UNROLL 2
// @tune BLOCKS_PER_SM: 1, 2, 4, 8
#define BLOCKS_PER_SM 2
// @tune REVERSE: 0, 1
#define REVERSE 1

#define TILE (BLOCK * VEC * UNROLL)

typedef __nv_bfloat16 T;

struct MS { float m; float s; };

template <int V> struct alignas(sizeof(T) * V) TV { T v[V]; };

__device__ __forceinline__ MS ms_combine(MS a, MS b) {
    float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return MS{m, 0.f};
    return MS{m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ MS warp_reduce(MS v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        MS w{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
        v = ms_combine(v, w);
    }
    return v;
}

// Block-wide (max, sum) combine; every thread gets the result. Call from uniform control flow.
__device__ MS block_reduce(MS v) {
    __shared__ MS sh[32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    v = warp_reduce(v);
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    if (wid == 0) {
        v = lane < BLOCK / 32 ? sh[lane] : MS{-INFINITY, 0.f};
        v = warp_reduce(v);
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    MS r = sh[0];
    __syncthreads();
    return r;
}

// Load the tile starting at `base` (elements [base, end) of `row`) into registers; out of
// range elements become -inf. Vector loads where aligned and in range.
__device__ __forceinline__ void tile_load(const T* __restrict__ row, int64_t base, int64_t end, bool vec_ok,
                                          float (&r)[UNROLL][VEC]) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const int64_t i = base + ((int64_t)u * BLOCK + threadIdx.x) * VEC;
        if (VEC > 1 && vec_ok && i + VEC <= end) {
            const TV<VEC> t = *reinterpret_cast<const TV<VEC>*>(row + i);
#pragma unroll
            for (int j = 0; j < VEC; ++j) r[u][j] = __bfloat162float(t.v[j]);
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j) r[u][j] = (i + j < end) ? __bfloat162float(row[i + j]) : -INFINITY;
        }
    }
}

__device__ __forceinline__ void tile_store(T* __restrict__ out, int64_t base, int64_t end, bool vec_ok,
                                           const float (&r)[UNROLL][VEC], float m, float inv) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const int64_t i = base + ((int64_t)u * BLOCK + threadIdx.x) * VEC;
        TV<VEC> e;
#pragma unroll
        for (int j = 0; j < VEC; ++j) e.v[j] = __float2bfloat16_rn(expf(r[u][j] - m) * inv);
        if (VEC > 1 && vec_ok && i + VEC <= end) {
            *reinterpret_cast<TV<VEC>*>(out + i) = e;
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j)
                if (i + j < end) out[i + j] = e.v[j];
        }
    }
}

// Thread-local (max, sum) of a register tile.
__device__ __forceinline__ MS tile_stats(const float (&r)[UNROLL][VEC]) {
    float m = -INFINITY;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
        for (int j = 0; j < VEC; ++j) m = fmaxf(m, r[u][j]);
    float s = 0.f;
    if (m != -INFINITY) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
#pragma unroll
            for (int j = 0; j < VEC; ++j) s += expf(r[u][j] - m);
    }
    return MS{m, s};
}

// Block-wide (max, sum) of row[begin, end), streaming tile by tile.
__device__ MS range_stats(const T* __restrict__ row, int64_t begin, int64_t end, bool vec_ok) {
    MS acc{-INFINITY, 0.f};
    float r[UNROLL][VEC];
    for (int64_t base = begin; base < end; base += TILE) {
        tile_load(row, base, end, vec_ok, r);
        acc = ms_combine(acc, tile_stats(r));
    }
    return block_reduce(acc);
}

__device__ void range_write(const T* __restrict__ row, T* __restrict__ out, int64_t begin, int64_t end,
                            bool vec_ok, float m, float inv) {
    float r[UNROLL][VEC];
    for (int64_t base = begin; base < end; base += TILE) {
        tile_load(row, base, end, vec_ok, r);
        tile_store(out, base, end, vec_ok, r, m, inv);
    }
}

__global__ void __launch_bounds__(BLOCK) softmax_rows(const T* __restrict__ x, T* __restrict__ y,
                                                      int64_t cols, bool vec_ok) {
    const T* row = x + (int64_t)blockIdx.x * cols;
    T* out = y + (int64_t)blockIdx.x * cols;
    if (cols <= TILE) {  // the whole row stays in registers
        float r[UNROLL][VEC];
        tile_load(row, 0, cols, vec_ok, r);
        MS st = block_reduce(tile_stats(r));
        tile_store(out, 0, cols, vec_ok, r, st.m, 1.f / st.s);
    } else {
        MS st = range_stats(row, 0, cols, vec_ok);
        range_write(row, out, 0, cols, vec_ok, st.m, 1.f / st.s);
    }
}

__device__ __forceinline__ void chunk_of(int64_t cols, int64_t split, int64_t b, int64_t* begin, int64_t* end) {
    int64_t chunk = (cols + split - 1) / split;
    chunk = (chunk + VEC - 1) / VEC * VEC;
    *begin = min(b * chunk, cols);
    *end = min(*begin + chunk, cols);
}

__global__ void __launch_bounds__(BLOCK) softmax_partial(const T* __restrict__ x, MS* __restrict__ part,
                                                         int64_t cols, int64_t split, bool vec_ok) {
    const int64_t r = blockIdx.x / split, b = blockIdx.x % split;
    int64_t begin, end;
    chunk_of(cols, split, b, &begin, &end);
    MS st = range_stats(x + r * cols, begin, end, vec_ok);
    if (threadIdx.x == 0) part[blockIdx.x] = st;
}

__global__ void __launch_bounds__(BLOCK) softmax_finish(const T* __restrict__ x, const MS* __restrict__ part,
                                                        T* __restrict__ y, int64_t cols, int64_t split,
                                                        bool vec_ok) {
    const int64_t lin = REVERSE ? (int64_t)gridDim.x - 1 - blockIdx.x : (int64_t)blockIdx.x;
    const int64_t r = lin / split, b = lin % split;
    MS st{-INFINITY, 0.f};
    for (int64_t i = threadIdx.x; i < split; i += BLOCK) st = ms_combine(st, part[r * split + i]);
    st = block_reduce(st);
    int64_t begin, end;
    chunk_of(cols, split, b, &begin, &end);
    range_write(x + r * cols, y + r * cols, begin, end, vec_ok, st.m, 1.f / st.s);
}

extern "C" int forge_launch(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const bool vec_ok = (cols % VEC == 0) && ((uintptr_t)x % (VEC * sizeof(T)) == 0) && ((uintptr_t)y % (VEC * sizeof(T)) == 0);
    static int sms = 0;
    if (sms == 0) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess) return 3;
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 3;
    }
    const int64_t target = (int64_t)BLOCKS_PER_SM * sms;
    int64_t split = rows >= target ? 1 : (target + rows - 1) / rows;
    const int64_t max_split = (cols + BLOCK * VEC - 1) / (BLOCK * VEC);
    split = split > max_split ? max_split : split;
    if (split <= 1 || cols <= TILE) {
        softmax_rows<<<(unsigned)rows, BLOCK, 0, stream>>>(x, y, cols, vec_ok);
        return (int)cudaGetLastError();
    }
    static MS* part = nullptr;
    static size_t cap = 0;
    const size_t need = (size_t)(rows * split);
    if (need > cap) {
        if (part) cudaFree(part);
        if (cudaMalloc(&part, need * sizeof(MS)) != cudaSuccess) { part = nullptr; cap = 0; return 2; }
        cap = need;
    }
    const unsigned grid = (unsigned)(rows * split);
    softmax_partial<<<grid, BLOCK, 0, stream>>>(x, part, cols, split, vec_ok);
    softmax_finish<<<grid, BLOCK, 0, stream>>>(x, part, y, cols, split, vec_ok);
    return (int)cudaGetLastError();
}
