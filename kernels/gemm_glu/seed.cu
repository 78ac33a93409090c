// A gated MLP's two projections and their product in one kernel: y = act(x Wg^T) * (x Wu^T),
// x (M, K) and y (M, N) row-major, Wg and Wu (N, K) row-major as nn.Linear stores them (N is the
// MLP's intermediate size). Neither projection is written: each CTA computes the same (BM, BN)
// tile of both products from one A tile and the matching tiles of Wg and Wu, into two fp32
// accumulators of one layout, and its epilogue writes act(g) * u, rounded once to bf16.
//
// sm_90a (Hopper, built with -arch=sm_90a): a warp-specialized TMA + WGMMA kernel. Warp group 0
// is the producer (one thread issues TMA loads of the x, Wg and Wu tiles into a STAGES-deep ring
// of shared-memory buffers, 128-byte swizzled, each stage's full/empty mbarrier pair from
// cutlass::PipelineTmaAsync); warp groups 1 and 2 are consumers, 64 rows of the tile each, issuing
// bf16 WGMMAs (CuTe's SM90 64xBNx16 F32 atom, both operands from shared memory) for both
// products, one k-tile's batch kept in flight (wgmma.wait_group 1) before a stage is released.
// TMA zero-fills the box outside (M, K) and (N, K), so tails in any of M, N, K need no extra
// code in the main loop; the epilogue stores only rows < M and columns < N. The TMA descriptors
// are encoded on the host with the driver's cuTensorMapEncodeTiled, reached through the runtime's
// entry-point query (no libcuda link), and cached per (pointers, sizes). Preconditions of this
// path: the device is cc 9.0 and this file's sm_90a code is in the binary (a __device__ flag set
// only in the sm_90a compile), x, Wg and Wu 16-byte aligned, K a multiple of 8 (TMA's 16-byte
// row stride), M, N, K below 2^31.
//
// Everywhere else (other archs, odd K, unaligned views): a plain tiled fp32 SIMT kernel, slow
// but exact to fp32 accumulation, so every shape and arch computes the right answer.
// ACT: 0 none, 1 relu, 2 gelu (erf), 3 gelu (tanh), 4 silu; a fusion region's seed gets the
// region's (the PatternSeed constant act_code).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cute/tensor.hpp>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

typedef __nv_bfloat16 T;

#if FORGE_GLU_GELU
#define ACT 2
#else
#define ACT 4
#endif

// output columns per CTA tile (each of the two products is BM x BN)
// @tune BN: 128, 64, 96, 160
#define BN 128
// shared-memory ring depth (a stage: BM x 64 of x, BN x 64 of Wg and of Wu)
// @tune STAGES: 4, 3, 5, 6
#define STAGES 4
// CTAs of GROUP_M consecutive row blocks walk the column blocks together (L2 reuse of W tiles)
// @tune GROUP_M: 8, 1, 4, 16
#define GROUP_M 8
// threads of the fallback kernel's 64 x 64 tile
#define FB_TILE 64
#define FB_K 16

#define BM 128  // two consumer warp groups of 64 rows
#define BK 64   // 64 bf16 = 128 bytes: one 128-byte swizzle row

__device__ __forceinline__ float act(float v) {
#if ACT == 1
    return v > 0.f ? v : 0.f;
#elif ACT == 2
    return 0.5f * v * (1.f + erff(v * 0.7071067811865476f));
#elif ACT == 3
    return 0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
#elif ACT == 4
    return v / (1.f + __expf(-v));
#else
    return v;
#endif
}

// ------------------------------------------------------------------------------------ sm_90a
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GLU_WGMMA_BUILT 1
#else
#define GLU_WGMMA_BUILT 0
#endif
// 1 in the device image only when this file was compiled for sm_90a; read by the host once
__device__ int glu_wgmma_built = GLU_WGMMA_BUILT;

namespace glu {
using namespace cute;
using Bf = cute::bfloat16_t;
constexpr int kStages = STAGES;
using Pipeline = cutlass::PipelineTmaAsync<kStages>;
using PipeState = cutlass::PipelineState<kStages>;
using LayoutA = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf>{}, Shape<Int<BM>, Int<BK>, Int<kStages>>{}));
using LayoutB = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf>{}, Shape<Int<BN>, Int<BK>, Int<kStages>>{}));
using Mma = decltype(make_tiled_mma(
    GMMA::ss_op_selector<Bf, Bf, float, Shape<_64, Int<BN>, Int<BK>>, GMMA::Major::K, GMMA::Major::K>(),
    Layout<Shape<_2, _1, _1>>{}));
constexpr int kABytes = BM * BK * 2, kBBytes = BN * BK * 2;
constexpr int kStageBytes = kABytes + 2 * kBBytes;
static_assert(kStageBytes % 16 == 0, "TMA transaction bytes");
struct Smem {
    alignas(1024) Bf a[kStages * BM * BK];
    alignas(1024) Bf g[kStages * BN * BK];
    alignas(1024) Bf u[kStages * BN * BK];
    typename Pipeline::SharedStorage pipe;
};
constexpr int kSmemBytes = (int)sizeof(Smem) + 1024;  // + room to align the base to 1024 bytes
static_assert(BN % 8 == 0 && BN <= 256, "WGMMA N is a multiple of 8 up to 256");
}  // namespace glu

__global__ void __launch_bounds__(384, 1)
    glu_wgmma(const __grid_constant__ CUtensorMap tm_x, const __grid_constant__ CUtensorMap tm_g,
              const __grid_constant__ CUtensorMap tm_u, T* __restrict__ y, int m, int n, int k) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace cute;
    using namespace glu;
    extern __shared__ char smem_raw[];
    Smem& s = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));

    // tile order: GROUP_M row blocks share each column block before moving on
    const int tiles_m = (m + BM - 1) / BM, tiles_n = (n + BN - 1) / BN;
    const int per_group = GROUP_M * tiles_n;
    const int group = blockIdx.x / per_group, first_m = group * GROUP_M;
    const int gsize = min(tiles_m - first_m, GROUP_M);
    const int pid_m = first_m + (blockIdx.x % per_group) % gsize;
    const int pid_n = (blockIdx.x % per_group) / gsize;
    const int k_tiles = (k + BK - 1) / BK;

    const int wg = threadIdx.x / 128;
    typename Pipeline::Params pp;
    pp.role = wg == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
    pp.is_leader = threadIdx.x == 0;
    pp.num_consumers = 256;
    pp.transaction_bytes = kStageBytes;
    Pipeline pipeline(s.pipe, pp, Shape<_1, _1, _1>{});
    __syncthreads();  // the barriers' init is visible to every warp

    if (wg == 0) {
        cutlass::arch::warpgroup_reg_dealloc<40>();
        if (threadIdx.x == 0) {
            cute::prefetch_tma_descriptor(&tm_x);
            cute::prefetch_tma_descriptor(&tm_g);
            cute::prefetch_tma_descriptor(&tm_u);
            const uint64_t hint = static_cast<uint64_t>(TMA::CacheHintSm90::EVICT_NORMAL);
            PipeState w = cutlass::make_producer_start_state<Pipeline>();
            for (int kt = 0; kt < k_tiles; ++kt) {
                pipeline.producer_acquire(w);
                uint64_t* bar = pipeline.producer_get_barrier(w);
                const int st = w.index();
                SM90_TMA_LOAD_2D::copy(&tm_x, bar, hint, s.a + st * BM * BK, kt * BK, pid_m * BM);
                SM90_TMA_LOAD_2D::copy(&tm_g, bar, hint, s.g + st * BN * BK, kt * BK, pid_n * BN);
                SM90_TMA_LOAD_2D::copy(&tm_u, bar, hint, s.u + st * BN * BK, kt * BK, pid_n * BN);
                ++w;
            }
        }
        return;
    }
    cutlass::arch::warpgroup_reg_alloc<232>();
    Tensor sA = make_tensor(make_smem_ptr(s.a), LayoutA{});
    Tensor sG = make_tensor(make_smem_ptr(s.g), LayoutB{});
    Tensor sU = make_tensor(make_smem_ptr(s.u), LayoutB{});
    Mma mma;
    auto thr = mma.get_slice(threadIdx.x - 128);
    Tensor tA = thr.make_fragment_A(thr.partition_A(sA));  // WGMMA descriptors (MMA, MMA_M, MMA_K, PIPE)
    Tensor tG = thr.make_fragment_B(thr.partition_B(sG));
    Tensor tU = thr.make_fragment_B(thr.partition_B(sU));

    Tensor mY = make_tensor(make_gmem_ptr(reinterpret_cast<Bf*>(y)), make_shape(m, n), make_stride(n, _1{}));
    Tensor gY = local_tile(mY, Shape<Int<BM>, Int<BN>>{}, make_coord(pid_m, pid_n));
    Tensor cY = local_tile(make_identity_tensor(make_shape(m, n)), Shape<Int<BM>, Int<BN>>{}, make_coord(pid_m, pid_n));
    Tensor tY = thr.partition_C(gY);
    Tensor tC = thr.partition_C(cY);
    Tensor accG = thr.partition_fragment_C(gY);
    Tensor accU = thr.partition_fragment_C(gY);
    clear(accG);
    clear(accU);
    mma.accumulate_ = GMMA::ScaleOut::One;

    PipeState rd, rel;
    for (int kt = 0; kt < k_tiles; ++kt) {
        pipeline.consumer_wait(rd);
        const int st = rd.index();
        warpgroup_fence_operand(accG);
        warpgroup_fence_operand(accU);
        warpgroup_arrive();
        gemm(mma, tA(_, _, _, st), tG(_, _, _, st), accG);
        gemm(mma, tA(_, _, _, st), tU(_, _, _, st), accU);
        warpgroup_commit_batch();
        warpgroup_wait<1>();  // the previous k-tile's WGMMAs are done: its stage can be refilled
        warpgroup_fence_operand(accG);
        warpgroup_fence_operand(accU);
        if (kt > 0) {
            pipeline.consumer_release(rel);
            ++rel;
        }
        ++rd;
    }
    warpgroup_wait<0>();
    warpgroup_fence_operand(accG);
    warpgroup_fence_operand(accU);

    // accumulator values 2i and 2i+1 are adjacent columns of one row (the WGMMA C layout): one
    // 4-byte store per pair where the row stride and y allow it
    const bool pairs = (n % 2 == 0) && (reinterpret_cast<uintptr_t>(y) % 4 == 0);
    CUTE_UNROLL
    for (int i = 0; i < size(accG); i += 2) {
        const int r = get<0>(tC(i)), c = get<1>(tC(i));
        if (r >= m) continue;
        const float v0 = act(accG(i)) * accU(i), v1 = act(accG(i + 1)) * accU(i + 1);
        const bool next = get<0>(tC(i + 1)) == r && get<1>(tC(i + 1)) == c + 1;
        if (pairs && next && c + 1 < n) {
            *reinterpret_cast<__nv_bfloat162*>(&tY(i)) = __floats2bfloat162_rn(v0, v1);
        } else {
            if (c < n) tY(i) = Bf(v0);
            const int c1 = get<1>(tC(i + 1));
            if (get<0>(tC(i + 1)) < m && c1 < n) tY(i + 1) = Bf(v1);
        }
    }
#endif
}

// ------------------------------------------------------------------------------- any arch
// y tile (FB_TILE x FB_TILE) of 256 threads, each 4 x 4 outputs of both products, strided 16
// apart so a warp reads distinct shared-memory banks; fp32 accumulation, zero-padded tails
__global__ void __launch_bounds__(256)
    glu_simt(const T* __restrict__ x, const T* __restrict__ wg, const T* __restrict__ wu, T* __restrict__ y,
             int64_t m, int64_t n, int64_t k) {
    __shared__ float xs[FB_K][FB_TILE + 1], gs[FB_K][FB_TILE + 1], us[FB_K][FB_TILE + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int64_t m0 = (int64_t)blockIdx.y * FB_TILE, n0 = (int64_t)blockIdx.x * FB_TILE;
    float ag[4][4] = {}, au[4][4] = {};
    for (int64_t k0 = 0; k0 < k; k0 += FB_K) {
        for (int i = threadIdx.x; i < FB_TILE * FB_K; i += 256) {
            const int r = i / FB_K, c = i % FB_K;
            const bool kin = k0 + c < k;
            xs[c][r] = (kin && m0 + r < m) ? __bfloat162float(x[(m0 + r) * k + k0 + c]) : 0.f;
            gs[c][r] = (kin && n0 + r < n) ? __bfloat162float(wg[(n0 + r) * k + k0 + c]) : 0.f;
            us[c][r] = (kin && n0 + r < n) ? __bfloat162float(wu[(n0 + r) * k + k0 + c]) : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int q = 0; q < FB_K; ++q) {
            float a[4], bg[4], bu[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                a[i] = xs[q][ty + 16 * i];
                bg[i] = gs[q][tx + 16 * i];
                bu[i] = us[q][tx + 16 * i];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    ag[i][j] += a[i] * bg[j];
                    au[i][j] += a[i] * bu[j];
                }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t r = m0 + ty + 16 * i, c = n0 + tx + 16 * j;
            if (r < m && c < n) y[r * n + c] = __float2bfloat16_rn(act(ag[i][j]) * au[i][j]);
        }
}

// ------------------------------------------------------------------------------------- host
static PFN_cuTensorMapEncodeTiled_v12000 g_encode = nullptr;
static int g_path = -1;  // 1: this process runs the sm_90a kernel, 0: the fallback

struct Maps {
    const void *x, *g, *u;
    int64_t m, n, k;
    CUtensorMap tx, tg, tu;
};
static Maps g_maps[4];
static int g_nmaps = 0, g_next = 0;

static int wgmma_usable() {
    if (g_path >= 0) return g_path;
    g_path = 0;
    int dev = 0, major = 0, minor = 0, built = 0;
    if (cudaGetDevice(&dev) || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev))
        return 0;
    if (major != 9 || minor != 0) return 0;
    if (cudaMemcpyFromSymbol(&built, glu_wgmma_built, sizeof(int))) return 0;
    if (!built) return 0;
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
#if CUDART_VERSION >= 12050
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) ||
        q != cudaDriverEntryPointSuccess)
        return 0;
#else
    if (cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &q) || q != cudaDriverEntryPointSuccess)
        return 0;
#endif
    g_encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    g_path = 1;
    return 1;
}

// a (rows, cols) row-major bf16 matrix, read in boxes of box_rows x BK, 128-byte swizzled
static bool encode(CUtensorMap* map, const void* p, int64_t rows, int64_t cols, int box_rows) {
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)cols * sizeof(T)};
    cuuint32_t box[2] = {BK, (cuuint32_t)box_rows};
    cuuint32_t step[2] = {1, 1};
    return g_encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(p), dims, strides, box, step,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

static const Maps* maps_for(const T* x, const T* wg, const T* wu, int64_t m, int64_t n, int64_t k) {
    for (int i = 0; i < g_nmaps; ++i) {
        const Maps& c = g_maps[i];
        if (c.x == x && c.g == wg && c.u == wu && c.m == m && c.n == n && c.k == k) return &c;
    }
    Maps& c = g_maps[g_next];
    g_next = (g_next + 1) % 4;
    if (g_nmaps < 4) ++g_nmaps;
    c = Maps{x, wg, wu, m, n, k, {}, {}, {}};
    if (!encode(&c.tx, x, m, k, BM) || !encode(&c.tg, wg, n, k, BN) || !encode(&c.tu, wu, n, k, BN)) {
        c.x = nullptr;  // never matches again
        return nullptr;
    }
    return &c;
}

extern "C" int forge_launch(const T* x, const T* wg, const T* wu, T* y, int64_t m, int64_t n, int64_t k,
                            cudaStream_t stream) {
    if (m < 0 || n < 0 || k < 0) return 1;
    if (m == 0 || n == 0) return 0;
    const uintptr_t align = (uintptr_t)x | (uintptr_t)wg | (uintptr_t)wu;
    const bool fits = k > 0 && k % 8 == 0 && align % 16 == 0 && m < (1LL << 31) && n < (1LL << 31) && k < (1LL << 31);
    if (fits && wgmma_usable()) {
        static bool smem_set = false;  // a tile and ring deeper than the device's shared memory: an error, not the fallback
        if (!smem_set && cudaFuncSetAttribute(glu_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize, glu::kSmemBytes))
            return 2;
        smem_set = true;
        const Maps* mp = maps_for(x, wg, wu, m, n, k);
        if (!mp) return 2;
        const int64_t tiles = ((m + BM - 1) / BM) * ((n + BN - 1) / BN);
        if (tiles >= (1LL << 31)) return 2;
        glu_wgmma<<<(unsigned)tiles, 384, glu::kSmemBytes, stream>>>(mp->tx, mp->tg, mp->tu, y, (int)m, (int)n, (int)k);
        return (int)cudaGetLastError();
    }
    const int64_t by = (m + FB_TILE - 1) / FB_TILE, bx = (n + FB_TILE - 1) / FB_TILE;
    if (by > 65535 || bx >= (1LL << 31)) return 2;
    glu_simt<<<dim3((unsigned)bx, (unsigned)by), 256, 0, stream>>>(x, wg, wu, y, m, n, k);
    return (int)cudaGetLastError();
}
