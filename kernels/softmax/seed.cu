#if FORGE_DTYPE_BF16
// softmax over the last dim of a row-major (rows, cols) bf16 tensor, math in fp32; outputs
// are rounded to nearest even. VEC 8 moves 16 bytes per load and store.
#else
// softmax over the last dim of a row-major (rows, cols) fp32 tensor, math in fp32.
#endif
//
// A row that fits in a register tile of BLOCK * VEC * U elements is read once, reduced and
// written from registers: it crosses DRAM once each way. U is the smallest of 1, 2, 4, 8
// (up to UNROLL) whose tile holds the row, picked per launch, so short and long rows both
// keep every thread busy. Each element's exp is taken once: a thread keeps exp(x - m_t)
// for its own max m_t and rescales by exp(m_t - m) / sum at the store. Exponentials are
// exp2f((x - m) * log2(e)) (exp2f: 2 ulp, CUDA C Programming Guide, "Mathematical
// Functions"; x - m is formed first, so large inputs lose no accuracy), not expf.
// Rows longer than the largest tile (BLOCK * VEC * UNROLL):
//  ONEPASS 1: split into tiles held in registers by cooperating blocks. Each block
//    publishes its tile's (max, sum), waits until every tile of its row has, combines them
//    and writes its tile, so x crosses DRAM once. The grid is sized from the occupancy so
//    that all its blocks are resident together (no block waits on one that is not running)
//    and loops over the (row, tile) work items; per-row arrival and departure counters
//    return to zero at the end of every launch, so the kernel replays in a CUDA graph.
//    With STAGE, each thread copies its part of the block's next tile into shared memory
//    asynchronously (cp.async through __pipeline_memcpy_async, sm_80 and later) while it
//    reduces, waits and stores the current one, so one round's loads overlap the last
//    round's wait and stores without the registers of a second tile. A thread reads back
//    only what it copied itself, so the staging needs no block barrier.
//  ONEPASS 0: when there are fewer rows than BLOCKS_PER_SM * SMs, several blocks share a
//    row: a first launch writes each chunk's (max, sum), a second combines them and writes
//    the output (reading x again); with REVERSE the second launch walks the chunks in the
//    opposite order, so it starts on what the first read last and is still in L2. With
//    enough rows, a block streams its row twice (online (max, sum), then the write).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_pipeline_primitives.h>
#include <stdint.h>
#include <math.h>

#if FORGE_DTYPE_BF16
typedef __nv_bfloat16 T;
#else
typedef float T;
#endif

// @tune BLOCK: 128, 256, 512, 1024
#define BLOCK 256
#if FORGE_DTYPE_BF16
// @tune VEC: 1, 2, 4, 8
#define VEC 8
#else
// @tune VEC: 1, 2, 4
#define VEC 4
#endif
// @tune UNROLL: 1, 2, 4, 8
#define UNROLL 8
// @tune BLOCKS_PER_SM: 1, 2, 4, 8
#define BLOCKS_PER_SM 2
// @tune REVERSE: 0, 1
#define REVERSE 1
// @tune ONEPASS: 0, 1
#define ONEPASS 1
// @tune COOP_OCC: 1, 2, 4
#define COOP_OCC 4
// @tune STAGE: 0, 1
#define STAGE 0

#define TILE_U(U) (BLOCK * VEC * (U))
#define LOG2E 1.4426950408889634f

template <int V> struct alignas(sizeof(T) * V) TV { T v[V]; };

__device__ __forceinline__ float tof(float a) { return a; }
__device__ __forceinline__ float tof(__nv_bfloat16 a) { return __bfloat162float(a); }
__device__ __forceinline__ void put(float& o, float a) { o = a; }
__device__ __forceinline__ void put(__nv_bfloat16& o, float a) { o = __float2bfloat16_rn(a); }

struct MS { float m; float s; };

__device__ __forceinline__ MS ms_combine(MS a, MS b) {
    float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return MS{m, 0.f};
    return MS{m, a.s * exp2f((a.m - m) * LOG2E) + b.s * exp2f((b.m - m) * LOG2E)};
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
    if (BLOCK == 32) return v;
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
template <int U>
__device__ __forceinline__ void tile_load(const T* __restrict__ row, int64_t base, int64_t end, bool vec_ok,
                                          float (&r)[U][VEC]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int64_t i = base + ((int64_t)u * BLOCK + threadIdx.x) * VEC;
        if (VEC > 1 && vec_ok && i + VEC <= end) {
            const TV<VEC> t = *reinterpret_cast<const TV<VEC>*>(row + i);
#pragma unroll
            for (int j = 0; j < VEC; ++j) r[u][j] = tof(t.v[j]);
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j) r[u][j] = (i + j < end) ? tof(row[i + j]) : -INFINITY;
        }
    }
}

// Store the tile: out = EXP ? exp(r - m) * scale : r * scale.
template <int U, bool EXP>
__device__ __forceinline__ void tile_store(T* __restrict__ out, int64_t base, int64_t end, bool vec_ok,
                                           const float (&r)[U][VEC], float m, float scale) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int64_t i = base + ((int64_t)u * BLOCK + threadIdx.x) * VEC;
        TV<VEC> e;
#pragma unroll
        for (int j = 0; j < VEC; ++j) put(e.v[j], (EXP ? exp2f((r[u][j] - m) * LOG2E) : r[u][j]) * scale);
        if (VEC > 1 && vec_ok && i + VEC <= end) {
            *reinterpret_cast<TV<VEC>*>(out + i) = e;
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j)
                if (i + j < end) out[i + j] = e.v[j];
        }
    }
}

// Thread-local (max, sum) of a register tile. With KEEP the tile is replaced by
// exp(r - max) (0 where r is -inf), so the store only rescales it.
template <int U, bool KEEP>
__device__ __forceinline__ MS tile_stats(float (&r)[U][VEC]) {
    float m = -INFINITY;
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
        for (int j = 0; j < VEC; ++j) m = fmaxf(m, r[u][j]);
    float s = 0.f;
    const float mm = m == -INFINITY ? 0.f : m;
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float e = exp2f((r[u][j] - mm) * LOG2E);  // exp2(-inf) = 0
            s += e;
            if (KEEP) r[u][j] = e;
        }
    return MS{m, s};
}

// The scale that turns a thread's kept exp(r - m_t) into the softmax: exp(m_t - m) / sum.
// A row of only -inf gives NaN, as torch.softmax does.
__device__ __forceinline__ float rescale(float m_thread, MS all) {
    if (all.m == -INFINITY) return NAN;
    return m_thread == -INFINITY ? 0.f : exp2f((m_thread - all.m) * LOG2E) / all.s;
}

// Block-wide (max, sum) of row[begin, end), streaming tile by tile.
__device__ MS range_stats(const T* __restrict__ row, int64_t begin, int64_t end, bool vec_ok) {
    MS acc{-INFINITY, 0.f};
    float r[UNROLL][VEC];
    for (int64_t base = begin; base < end; base += TILE_U(UNROLL)) {
        tile_load<UNROLL>(row, base, end, vec_ok, r);
        acc = ms_combine(acc, tile_stats<UNROLL, false>(r));
    }
    return block_reduce(acc);
}

__device__ void range_write(const T* __restrict__ row, T* __restrict__ out, int64_t begin, int64_t end,
                            bool vec_ok, MS st) {
    float r[UNROLL][VEC];
    for (int64_t base = begin; base < end; base += TILE_U(UNROLL)) {
        tile_load<UNROLL>(row, base, end, vec_ok, r);
        tile_store<UNROLL, true>(out, base, end, vec_ok, r, st.m, 1.f / st.s);
    }
}

// One row per block, the row in a register tile of U (cols <= TILE_U(U)).
template <int U>
__global__ void __launch_bounds__(BLOCK) softmax_rows(const T* __restrict__ x, T* __restrict__ y, int64_t cols,
                                                      bool vec_ok) {
    const int64_t row = blockIdx.x;
    float r[U][VEC];
    tile_load<U>(x + row * cols, 0, cols, vec_ok, r);
    const MS mine = tile_stats<U, true>(r);
    const MS all = block_reduce(mine);
    tile_store<U, false>(y + row * cols, 0, cols, vec_ok, r, 0.f, rescale(mine.m, all));
}

// One row per block, streamed twice (rows longer than the largest tile).
__global__ void __launch_bounds__(BLOCK) softmax_rows_stream(const T* __restrict__ x, T* __restrict__ y,
                                                             int64_t cols, bool vec_ok) {
    const int64_t row = blockIdx.x;
    range_write(x + row * cols, y + row * cols, 0, cols, vec_ok, range_stats(x + row * cols, 0, cols, vec_ok));
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
    range_write(x + r * cols, y + r * cols, begin, end, vec_ok, st);
}

// ONEPASS: the blocks of one launch are all resident (the host sizes the grid from the
// occupancy) and the grid is a multiple of `split`, so the `split` tiles of a row are
// always handled in the same round by running blocks. COOP_OCC asks the compiler for
// registers that let that many blocks share an SM (more rows per round, fewer rounds).
__global__ void __launch_bounds__(BLOCK, COOP_OCC) softmax_coop(const T* __restrict__ x, T* __restrict__ y, MS* __restrict__ part,
                                                      unsigned* __restrict__ arrive, unsigned* __restrict__ depart,
                                                      int64_t rows, int64_t cols, int64_t split, bool vec_ok) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    T* stage = reinterpret_cast<T*>(stage_bytes);  // STAGE: the next tile, TILE_U(UNROLL) elements
    // a tile can be staged when it is whole and 16-byte aligned (vectors of 16 bytes)
    const bool can_stage = STAGE && vec_ok && VEC * sizeof(T) == 16;
    float r[UNROLL][VEC];
    const int64_t items = rows * split;
    bool have = false;  // r already holds this item's tile (it came through `stage`)
    for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
        const int64_t row = w / split, b = w % split;
        const int64_t begin = b * TILE_U(UNROLL), end = min(begin + (int64_t)TILE_U(UNROLL), cols);
        if (!have) tile_load<UNROLL>(x + row * cols, begin, end, vec_ok, r);
        const int64_t wn = w + gridDim.x, nrow = wn / split, nbegin = (wn % split) * TILE_U(UNROLL);
        const bool next_whole = wn < items && nbegin + TILE_U(UNROLL) <= cols;
        const bool staged = can_stage && next_whole;
        if (staged) {  // this thread's vectors of the next tile, in tile_load's layout
            const T* src = x + nrow * cols + nbegin;
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int64_t i = ((int64_t)u * BLOCK + threadIdx.x) * VEC;
                __pipeline_memcpy_async(stage + i, src + i, 16);
            }
            __pipeline_commit();
        }
        const MS mine = tile_stats<UNROLL, true>(r);
        const MS st = block_reduce(mine);
        if (threadIdx.x == 0) {
            part[w] = st;
            __threadfence();
            atomicAdd(&arrive[row], 1u);
            volatile unsigned* a = &arrive[row];
            unsigned spins = 0;
            while (*a < (unsigned)split) {
                __nanosleep(64);
                if (++spins > (1u << 26)) __trap();  // a tile of this row never arrived
            }
            __threadfence();
        }
        __syncthreads();
        // every tile's (max, sum) is published: combine them in a fixed order (the same in
        // every block of the row); __ldcg reads L2, not this SM's possibly stale L1
        MS p{-INFINITY, 0.f};
        for (int64_t i = threadIdx.x; i < split; i += BLOCK)
            p = ms_combine(p, MS{__ldcg(&part[row * split + i].m), __ldcg(&part[row * split + i].s)});
        const MS all = block_reduce(p);
        // the last block of the row to leave resets its counters for the next launch
        if (threadIdx.x == 0 && atomicAdd(&depart[row], 1u) == (unsigned)split - 1) {
            arrive[row] = 0;
            depart[row] = 0;
        }
        tile_store<UNROLL, false>(y + row * cols, begin, end, vec_ok, r, 0.f, rescale(mine.m, all));
        have = staged;
        if (staged) {  // read back what this thread copied
            __pipeline_wait_prior(0);
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const TV<VEC> t = *reinterpret_cast<const TV<VEC>*>(stage + ((int64_t)u * BLOCK + threadIdx.x) * VEC);
#pragma unroll
                for (int j = 0; j < VEC; ++j) r[u][j] = tof(t.v[j]);
            }
        }
    }
}

// Launch softmax_rows with the smallest U (1, 2, 4, 8; at most UNROLL) whose tile holds a row.
static void launch_rows(const T* x, T* y, int64_t rows, int64_t cols, bool vec_ok, cudaStream_t stream) {
    if (UNROLL >= 1 && cols <= TILE_U(1)) softmax_rows<1><<<(unsigned)rows, BLOCK, 0, stream>>>(x, y, cols, vec_ok);
    else if (UNROLL >= 2 && cols <= TILE_U(2)) softmax_rows<(UNROLL >= 2 ? 2 : 1)><<<(unsigned)rows, BLOCK, 0, stream>>>(x, y, cols, vec_ok);
    else if (UNROLL >= 4 && cols <= TILE_U(4)) softmax_rows<(UNROLL >= 4 ? 4 : 1)><<<(unsigned)rows, BLOCK, 0, stream>>>(x, y, cols, vec_ok);
    else softmax_rows<UNROLL><<<(unsigned)rows, BLOCK, 0, stream>>>(x, y, cols, vec_ok);
}

extern "C" int forge_launch(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const bool vec_ok = (cols % VEC == 0) && ((uintptr_t)x % (VEC * sizeof(T)) == 0) && ((uintptr_t)y % (VEC * sizeof(T)) == 0);
    if (cols <= TILE_U(UNROLL)) {  // the whole row in one block's registers
        launch_rows(x, y, rows, cols, vec_ok, stream);
        return (int)cudaGetLastError();
    }
    static int sms = 0;
    if (sms == 0) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess) return 3;
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 3;
    }
    if (ONEPASS) {
        const int64_t split = (cols + TILE_U(UNROLL) - 1) / TILE_U(UNROLL);
        const size_t smem = STAGE ? sizeof(T) * TILE_U(UNROLL) : 0;
        static int occ = -1;
        if (occ < 0) {
            if (smem > 48 * 1024 &&
                cudaFuncSetAttribute(softmax_coop, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
                return 3;
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, softmax_coop, BLOCK, smem) != cudaSuccess) return 3;
        }
        const int64_t resident = (int64_t)occ * sms / split * split;
        if (resident > 0) {
            static MS* part = nullptr;
            static unsigned* counters = nullptr;
            static size_t part_cap = 0, row_cap = 0;
            const size_t need = (size_t)(rows * split);
            if (need > part_cap) {
                if (part) cudaFree(part);
                if (cudaMalloc(&part, need * sizeof(MS)) != cudaSuccess) { part = nullptr; part_cap = 0; return 2; }
                part_cap = need;
            }
            if ((size_t)rows > row_cap) {
                if (counters) cudaFree(counters);
                if (cudaMalloc(&counters, 2 * (size_t)rows * sizeof(unsigned)) != cudaSuccess) { counters = nullptr; row_cap = 0; return 2; }
                if (cudaMemsetAsync(counters, 0, 2 * (size_t)rows * sizeof(unsigned), stream) != cudaSuccess) return 3;
                row_cap = (size_t)rows;
            }
            const int64_t grid = resident < (int64_t)need ? resident : (int64_t)need;
            softmax_coop<<<(unsigned)grid, BLOCK, smem, stream>>>(x, y, part, counters, counters + row_cap, rows, cols, split, vec_ok);
            return (int)cudaGetLastError();
        }
    }
    const int64_t target = (int64_t)BLOCKS_PER_SM * sms;
    int64_t split = rows >= target ? 1 : (target + rows - 1) / rows;
    const int64_t max_split = (cols + BLOCK * VEC - 1) / (BLOCK * VEC);
    split = split > max_split ? max_split : split;
    if (split <= 1) {
        softmax_rows_stream<<<(unsigned)rows, BLOCK, 0, stream>>>(x, y, cols, vec_ok);
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
