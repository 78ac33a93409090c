// A gated MLP's two projections and their product in one kernel: y = act(x Wg^T) * (x Wu^T),
// x (M, K) and y (M, N) row-major, Wg and Wu (N, K) row-major as nn.Linear stores them (N is the
// MLP's intermediate size). Neither projection is written: each CTA computes the same (BM, BN)
// tile of both products from one A tile and the matching tiles of Wg and Wu stacked as one
// (2 BN)-row B tile, into fp32 accumulators (STACKED: one whose columns below BN are the gate's
// and the rest the up product's; else two of one layout), and its epilogue writes act(g) * u,
// rounded once to bf16.
//
// sm_90a (Hopper, built with -arch=sm_90a): a persistent warp-specialized TMA + WGMMA kernel.
// The grid is as many CLUSTER_M-CTA clusters as the device holds at once; each cluster walks the
// tiles (a unit: CLUSTER_M row blocks of BM, one per CTA, of one BN column block; GROUP_M row
// blocks share a column block before the walk moves on). Warp group 0 is the producer (one
// thread issues TMA loads of the x, Wg and Wu tiles into a STAGES-deep ring of 128-byte swizzled
// shared-memory buffers (a stage: x's BM x 64 tile, then BN rows of Wg above BN rows of Wu),
// each stage's full/empty mbarrier pair from cutlass::PipelineTmaAsync;
// with CLUSTER_M 2 each CTA loads half of the Wg and Wu tiles and multicasts it to both, halving
// the weights' L2 reads). It runs ahead across tiles, so the next tile's stages fill while the
// consumers run the last one's epilogue. Warp groups 1 and 2 are consumers, 64 rows of the tile
// each, issuing per 16-wide k-step (STACKED) ONE
// bf16 WGMMA over both products (CuTe's SM90 64 x 2BN x 16
// F32 atom, both operands from shared memory: x's tile is read once for the two products, which
// two 64 x BN WGMMAs read twice), one k-tile's batch kept in flight (wgmma.wait_group 1) before
// a stage is released. A thread's accumulator holds column c of the gate and column c + BN of
// the up product for the same rows (glu::gate_up_in_one_thread checks CuTe's partition), so
// the epilogue forms act(g) * u in the thread's own registers, writes it in bf16 to a padded
// shared-memory tile and stores it in coalesced 16-byte row segments. TMA zero-fills the box outside (M, K) and (N, K), so
// tails in any of M, N, K need no extra code in the main loop; the epilogue stores only rows < M
// and columns < N. Registers: ptxas holds the whole kernel to 168 (384 threads, 1 block per
// SM), so the accumulator (BN fp32 values a thread) fits up to BN 128 (WGMMA's N 256).
// The TMA descriptors are encoded on the host with the driver's cuTensorMapEncodeTiled, reached
// through the runtime's entry-point query (no libcuda link), and cached per (pointers, sizes).
// Preconditions of this path: the device is cc 9.0 and this file's sm_90a code is in the binary
// (a __device__ flag set only in the sm_90a compile), x, Wg and Wu 16-byte aligned, K a multiple
// of 8 (TMA's 16-byte row stride), M, N, K below 2^31.
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

// output columns per tile (each of the two products is BM x BN, one WGMMA N = 2 BN; a multiple
// of 16 up to 128). 64 won on the H200 at both Llama shapes
// (docs/benchmarks.md): twice the tiles, so the last round of the persistent walk is fuller
// @tune BN: 64, 128, 96
#define BN 64
// shared-memory ring depth (a stage: BM x 64 of x, BN x 64 of Wg and of Wu), capped at what
// fits in 227 KB beside the epilogue tile: 6 with BN 64, 5 with BN 96, 4 with BN 128
// @tune STAGES: 6, 4, 5, 3
#define STAGES 6
// a cluster's row blocks (1 or 2): its CTAs share one column block, each loading 1/CLUSTER_M
// of the Wg and Wu tiles and multicasting it to all, which divides the weights' L2 reads
// @tune CLUSTER_M: 2, 1
#define CLUSTER_M 2
// tiles of GROUP_M consecutive row blocks walk the column blocks together (L2 reuse of W tiles)
// @tune GROUP_M: 8, 4, 16
#define GROUP_M 8
// 1: one 64 x 2BN x 16 WGMMA per k-step over Wg's and Wu's tiles stacked in the stage's B tile
// (x's tile read from shared memory once for both products); 0: two 64 x BN x 16 WGMMAs, one per
// weight, into two accumulators (the same shared-memory layout)
// @tune STACKED: 0, 1
#define STACKED 0
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
constexpr int kCluster = CLUSTER_M;
constexpr int kABytes = BM * BK * 2, kBBytes = BN * BK * 2;
constexpr int kStageBytes = kABytes + 2 * kBBytes;  // x's tile, then Wg's and Wu's stacked  // what each CTA's full barrier receives per stage
// the epilogue's bf16 tile: rows padded by 16 bytes, so the 8 rows of a warp's 4-byte writes
// start 4 banks apart (BN / 2 + 4 words a row, an odd multiple of 4) and never collide
constexpr int kEpiPitch = BN * 2 + 16;
constexpr bool kStacked = STACKED != 0;
constexpr int kMmaN = kStacked ? 2 * BN : BN;        // one WGMMA's N
constexpr int kEpiTiles = 1;                         // one staging tile: the tile's epilogue
constexpr int kWgRows = BM / 2;                      // a consumer warp group's rows of a tile
constexpr int kConsumerThreads = 256;                // the threads that consume one stage
constexpr int kSmemMax = 232448;  // Hopper's 227 KB of shared memory per block
// STAGES capped at the deepest ring that fits beside the epilogue tile (a stage's two
// mbarriers: 16 bytes), so every BN compiles with any STAGES value
constexpr int kStagesFit = (kSmemMax - kEpiTiles * BM * kEpiPitch) / (kStageBytes + 16);
constexpr int kStages = STAGES < kStagesFit ? STAGES : kStagesFit;
using Pipeline = cutlass::PipelineTmaAsync<kStages>;
using PipeState = cutlass::PipelineState<kStages>;
using ClusterShape = Shape<Int<kCluster>, _1, _1>;
using LayoutA = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf>{}, Shape<Int<BM>, Int<BK>, Int<kStages>>{}));
// a stage's B tile: BN rows of Wg, then BN rows of Wu: one (2 BN)-row operand (STACKED), or
// the same bytes as a ring of 2 x STAGES BN-row tiles, Wg's of stage s at 2 s, Wu's at 2 s + 1
using LayoutB = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf>{},
                                       Shape<Int<kMmaN>, Int<BK>, Int<kStages * 2 * BN / kMmaN>>{}));
using Mma = decltype(make_tiled_mma(
    GMMA::ss_op_selector<Bf, Bf, float, Shape<_64, Int<kMmaN>, Int<BK>>, GMMA::Major::K, GMMA::Major::K>(),
    Layout<Shape<Int<BM / kWgRows>, _1, _1>>{}));
constexpr int kBPart = BN / kCluster;               // W rows one CTA loads and multicasts
// byte offsets in dynamic shared memory (its base is 1024-aligned, as CUTLASS's kernels assume;
// the kernel checks): each stage buffer is a whole number of 1024-byte swizzle atoms
constexpr int kOffA = 0, kOffB = kOffA + kStages * kABytes;
constexpr int kOffE = kOffB + kStages * 2 * kBBytes, kOffP = kOffE + kEpiTiles * BM * kEpiPitch;
constexpr int kSmemBytes = kOffP + (int)sizeof(typename Pipeline::SharedStorage);
static_assert(BN % 16 == 0 && 2 * BN <= 256, "WGMMA N (2 BN) is a multiple of 8 up to 256; BN / 2 rows a swizzle atom");
static_assert(kCluster == 1 || kCluster == 2, "CLUSTER_M is 1 or 2");
static_assert(kBPart % 8 == 0, "a CTA's share of a W tile is whole 8-row swizzle atoms");
static_assert(kStages >= 2 && kSmemBytes <= kSmemMax, "the tile, ring and epilogue buffer exceed Hopper's 227 KB per block");
static_assert(kOffP % 8 == 0, "mbarrier alignment");

// tile -> (row block pair, column block): GROUP_M row blocks share each column block before the
// walk moves on, so the CTAs resident at one time read a few W column blocks from L2
__device__ __forceinline__ void unit_coords(int u, int units_m, int tiles_n, int& um, int& un) {
    constexpr int group = GROUP_M / kCluster > 0 ? GROUP_M / kCluster : 1;
    const int per_group = group * tiles_n;
    const int first = (u / per_group) * group;
    const int gsize = min(units_m - first, group);
    um = first + (u % per_group) % gsize;
    un = (u % per_group) / gsize;
}

// What the epilogue relies on, checked on CuTe's own partition of the (BM, 2 BN) tile's
// coordinates: of each BN accumulator values of a thread's 64-row slab, value i < BN / 2 is (row r, gate column c < BN) and value i + BN / 2 is (r, c + BN), the same column of the up product, so act(g) * u
// needs no data from another thread; values 2j and 2j + 1 are adjacent columns of one row (one
// 4-byte bf16x2 store). (The WGMMA C layout: a thread holds columns 8 q + 2 (lane % 4) + {0, 1}
// of each 8-column group q, and group q + BN / 8 is q's up twin.) A thread's partition is one
// static layout (checked on thread 0) shifted by the thread's first coordinate (checked for every
// consumer thread: an even column up to 6, so the shifted gate columns stay below BN).
constexpr bool gate_up_in_one_thread() {
    const auto coords = make_identity_tensor(Shape<Int<BM>, Int<2 * BN>>{});
    const auto c = Mma{}.get_slice(0).partition_C(coords);
    if (size(c) != BN * kWgRows / 64 || get<0>(c(0)) != 0 || get<1>(c(0)) != 0) return false;
    for (int s = 0; s < kWgRows / 64; ++s)
        for (int i = s * BN; i < s * BN + BN / 2; ++i) {
            const auto g = c(i), u = c(i + BN / 2), g1 = c(i ^ 1);
            if (get<0>(u) != get<0>(g) || get<1>(u) != get<1>(g) + BN || get<1>(g) + 6 >= BN) return false;
            if (get<0>(g1) != get<0>(g) || get<1>(g1) != (get<1>(g) ^ 1) || get<1>(g) % 2 != i % 2) return false;
        }
    for (int t = 1; t < kConsumerThreads; ++t) {
        const auto first = Mma{}.get_slice(t).partition_C(coords)(0);
        if (get<1>(first) % 2 != 0 || get<1>(first) > 6) return false;
    }
    return true;
}
static_assert(!kStacked || gate_up_in_one_thread(), "the accumulator layout the epilogue assumes");
}  // namespace glu

// Persistent: gridDim.x / CLUSTER_M clusters walk the tiles (a unit: CLUSTER_M row blocks of one
// column block, one per CTA of the cluster), so the producer loads the next tile's stages while
// the consumers run the last one's epilogue, and no tile pays a launch or a cold pipeline.
__global__ void __launch_bounds__(384, 1)
    glu_wgmma(const __grid_constant__ CUtensorMap tm_x, const __grid_constant__ CUtensorMap tm_g,
              const __grid_constant__ CUtensorMap tm_u, T* __restrict__ y, int m, int n, int k) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace cute;
    using namespace glu;
    extern __shared__ __align__(1024) char smem_raw[];
    if (reinterpret_cast<uintptr_t>(smem_raw) % 1024) __trap();  // swizzled TMA boxes need it
    Bf* sa = reinterpret_cast<Bf*>(smem_raw + kOffA);
    Bf* sb = reinterpret_cast<Bf*>(smem_raw + kOffB);
    char* se = smem_raw + kOffE;
    auto& pipe_storage = *reinterpret_cast<typename Pipeline::SharedStorage*>(smem_raw + kOffP);

    const int tiles_m = (m + BM - 1) / BM, tiles_n = (n + BN - 1) / BN;
    const int units_m = (tiles_m + kCluster - 1) / kCluster, units = units_m * tiles_n;
    const int rank = kCluster > 1 ? (int)cute::block_rank_in_cluster() : 0;
    const int first_unit = blockIdx.x / kCluster, unit_step = gridDim.x / kCluster;
    const int k_tiles = (k + BK - 1) / BK;

    const int wg = threadIdx.x / 128;
    typename Pipeline::Params pp;
    pp.role = wg == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
    pp.is_leader = threadIdx.x == 0;
    pp.num_consumers = kConsumerThreads;
    pp.transaction_bytes = kStageBytes;
    Pipeline pipeline(pipe_storage, pp, ClusterShape{});
    // the barriers' init is visible to every warp, and to the peer CTA before it multicasts
    // into this one's ring or arrives on its empty barriers
    if constexpr (kCluster > 1) {
        cute::cluster_arrive_relaxed();
        cute::cluster_wait();
    } else {
        __syncthreads();
    }

    if (wg == 0) {
        cutlass::arch::warpgroup_reg_dealloc<40>();
        if (threadIdx.x == 0) {
            cute::prefetch_tma_descriptor(&tm_x);
            cute::prefetch_tma_descriptor(&tm_g);
            cute::prefetch_tma_descriptor(&tm_u);
            const uint64_t hint = static_cast<uint64_t>(TMA::CacheHintSm90::EVICT_NORMAL);
            PipeState w = cutlass::make_producer_start_state<Pipeline>();
            for (int u = first_unit; u < units; u += unit_step) {
                int um, un;
                unit_coords(u, units_m, tiles_n, um, un);
                const int row0 = (um * kCluster + rank) * BM, wrow0 = un * BN + rank * kBPart;
                for (int kt = 0; kt < k_tiles; ++kt) {
                    pipeline.producer_acquire(w);
                    uint64_t* bar = pipeline.producer_get_barrier(w);
                    const int st = w.index();
                    SM90_TMA_LOAD_2D::copy(&tm_x, bar, hint, sa + st * BM * BK, kt * BK, row0);
                    Bf* dg = sb + st * 2 * BN * BK + rank * kBPart * BK;
                    Bf* du = dg + BN * BK;  // Wu's rows follow Wg's in the stage's B tile
                    if constexpr (kCluster > 1) {
                        const uint16_t mask = (1u << kCluster) - 1;
                        SM90_TMA_LOAD_MULTICAST_2D::copy(&tm_g, bar, mask, hint, dg, kt * BK, wrow0);
                        SM90_TMA_LOAD_MULTICAST_2D::copy(&tm_u, bar, mask, hint, du, kt * BK, wrow0);
                    } else {
                        SM90_TMA_LOAD_2D::copy(&tm_g, bar, hint, dg, kt * BK, wrow0);
                        SM90_TMA_LOAD_2D::copy(&tm_u, bar, hint, du, kt * BK, wrow0);
                    }
                    ++w;
                }
            }
            // every stage's last release has arrived (the peer's too) before this CTA exits
            pipeline.producer_tail(w);
        }
        return;
    }
    cutlass::arch::warpgroup_reg_alloc<232>();
    Tensor sA = make_tensor(make_smem_ptr(sa), LayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(sb), LayoutB{});
    Mma mma;
    const int ct = threadIdx.x - 128;  // 0..255 over the two consumer warp groups
    const int cw = ct / 128;           // this consumer warp group: 0 or 1
    auto thr = mma.get_slice(ct % kConsumerThreads);
    Tensor tA = thr.make_fragment_A(thr.partition_A(sA));  // WGMMA descriptors (MMA, MMA_M, MMA_K, PIPE)
    Tensor tB = thr.make_fragment_B(thr.partition_B(sB));
    // (row, column) inside the BM x 2 BN tile of each accumulator value: columns below BN are
    // the gate product's, the rest the up product's (gate_up_in_one_thread)
    // (not STACKED: a BM x BN tile, the gate's in acc and the up product's in accU)
    Tensor cL = make_identity_tensor(Shape<Int<BM>, Int<kMmaN>>{});
    Tensor tL = thr.partition_C(cL);
    Tensor acc = thr.partition_fragment_C(cL);
    Tensor accU = thr.partition_fragment_C(cL);  // not STACKED only (unused registers otherwise)
    auto fence = [&] {
        warpgroup_fence_operand(acc);
        if constexpr (!kStacked) warpgroup_fence_operand(accU);
    };
    mma.accumulate_ = GMMA::ScaleOut::One;
    const int bar_id = wg;  // named barrier 1 or 2: this warp group's 128 threads
    const bool vec = (n % 8 == 0) && (reinterpret_cast<uintptr_t>(y) % 16 == 0);
    const int wrow = cw * kWgRows;  // this warp group's first row of the tile

    PipeState rd, rel;
    for (int u = first_unit; u < units; u += unit_step) {
        int um, un;
        unit_coords(u, units_m, tiles_n, um, un);
        const int row0 = (um * kCluster + rank) * BM, col0 = un * BN;
        clear(acc);
        if constexpr (!kStacked) clear(accU);
        for (int kt = 0; kt < k_tiles; ++kt) {
            pipeline.consumer_wait(rd);
            const int st = rd.index();
            fence();
            warpgroup_arrive();
            if constexpr (kStacked) {
                gemm(mma, tA(_, _, _, st), tB(_, _, _, st), acc);
            } else {
                gemm(mma, tA(_, _, _, st), tB(_, _, _, 2 * st), acc);
                gemm(mma, tA(_, _, _, st), tB(_, _, _, 2 * st + 1), accU);
            }
            warpgroup_commit_batch();
            warpgroup_wait<1>();  // the previous k-tile's WGMMAs are done: its stage can be refilled
            fence();
            if (kt > 0) {
                pipeline.consumer_release(rel);
                ++rel;
            }
            ++rd;
        }
        warpgroup_wait<0>();
        fence();
        pipeline.consumer_release(rel);
        ++rel;

        // act(g) * u in bf16 into this warp group's rows of the staging tile (values 2i and
        // 2i+1 are adjacent columns of one row in the WGMMA C layout), then out in coalesced
        // 16-byte row segments; the first barrier keeps the last tile's reads before these writes
        asm volatile("bar.sync %0, 128;" ::"r"(bar_id) : "memory");
        CUTE_UNROLL
        for (int s = 0; s < kWgRows / 64; ++s) {  // a 64-row slab's values: BN (STACKED) or BN / 2 each
            CUTE_UNROLL
            for (int i = s * kMmaN / 2; i < s * kMmaN / 2 + BN / 2; i += 2) {
                const int r = get<0>(tL(i)), c = get<1>(tL(i));
                constexpr int h = BN / 2;  // STACKED: value i's up twin
                const float u0 = kStacked ? acc(i + h) : accU(i), u1 = kStacked ? acc(i + 1 + h) : accU(i + 1);
                *reinterpret_cast<__nv_bfloat162*>(se + r * kEpiPitch + c * 2) =
                    __floats2bfloat162_rn(act(acc(i)) * u0, act(acc(i + 1)) * u1);
            }
        }
        asm volatile("bar.sync %0, 128;" ::"r"(bar_id) : "memory");
        constexpr int kChunks = BN / 8;  // 16-byte segments of a row
        const int t = ct % 128;
        CUTE_UNROLL
        for (int q = t; q < kWgRows * kChunks; q += 128) {
            const int r = wrow + q / kChunks, c = (q % kChunks) * 8;
            const int gr = row0 + r, gc = col0 + c;
            if (gr >= m) continue;
            const char* src = se + r * kEpiPitch + c * 2;
            T* dst = y + (int64_t)gr * n + gc;
            if (vec && gc + 8 <= n) {
                *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
            } else {
                for (int e = 0; e < 8 && gc + e < n; ++e) dst[e] = reinterpret_cast<const T*>(src)[e];
            }
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
    if (!encode(&c.tx, x, m, k, BM) || !encode(&c.tg, wg, n, k, glu::kBPart) || !encode(&c.tu, wu, n, k, glu::kBPart)) {
        c.x = nullptr;  // never matches again
        return nullptr;
    }
    return &c;
}

// the persistent grid: as many CLUSTER_M-CTA clusters as the device holds at once (from the
// occupancy query, which knows the GPCs a cluster must fit in), never more than the units
static int grid_clusters(cudaStream_t stream) {
    static int clusters = 0;
    if (clusters > 0) return clusters;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CLUSTER_M;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) return 0;
    cfg.gridDim = dim3((unsigned)(sms / CLUSTER_M * CLUSTER_M));
    cfg.blockDim = dim3(384);
    cfg.dynamicSmemBytes = glu::kSmemBytes;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, glu_wgmma, &cfg) || n <= 0) return 0;
    clusters = n;
    return clusters;
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
        const int64_t units = ((m + BM * CLUSTER_M - 1) / (BM * CLUSTER_M)) * ((n + BN - 1) / BN);
        if (units >= (1LL << 31) / CLUSTER_M) return 2;
        const int clusters = grid_clusters(stream);
        if (clusters <= 0) return 2;
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = CLUSTER_M;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.gridDim = dim3((unsigned)((units < clusters ? units : clusters) * CLUSTER_M));
        cfg.blockDim = dim3(384);
        cfg.dynamicSmemBytes = glu::kSmemBytes;
        cfg.stream = stream;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        if (cudaLaunchKernelEx(&cfg, glu_wgmma, mp->tx, mp->tg, mp->tu, y, (int)m, (int)n, (int)k)) return 2;
        return (int)cudaGetLastError();
    }
    const int64_t by = (m + FB_TILE - 1) / FB_TILE, bx = (n + FB_TILE - 1) / FB_TILE;
    if (by > 65535 || bx >= (1LL << 31)) return 2;
    glu_simt<<<dim3((unsigned)bx, (unsigned)by), 256, 0, stream>>>(x, wg, wu, y, m, n, k);
    return (int)cudaGetLastError();
}
