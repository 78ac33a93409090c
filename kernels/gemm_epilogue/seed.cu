// A linear layer with its epilogue in one cuBLASLt matmul: y = act(x W^T [+ b]) [+ r], x (M, K)
// and y (M, N) row-major, W (N, K) row-major as nn.Linear stores it, b (N), r (M, N).
// Row-major y = x W^T, read column-major, is y^T = W x^T (N x M): cuBLAS's "TN" form, with
// A = W seen column-major (K x N, ld K) transposed, B = x seen column-major (K x M, ld K),
// C = r and D = y column-major (N x M, ld N); cuBLASLt's bias vector runs along D's
// rows, which are y's columns (N values). cuBLASLt computes D = act(alpha A B + beta C + bias)
// (cublasLt.h, CUBLASLT_EPILOGUE_*): the residual rides in C with beta = 1 when no
// activation precedes it; the activation rides in the epilogue for ReLU and for the tanh
// form of GELU (cuBLASLt's GELU epilogue is the tanh approximation, as PyTorch's
// _addmm_activation uses it) when FUSE_ACT is set. Exact GELU and SiLU, and an activation
// followed by a residual, get one pointwise pass after the matmul (fp32 math, one rounding).
// fp32 runs CUBLAS_COMPUTE_32F (no TF32: fp32's tolerance), bf16 accumulates in fp32.
// The handle, the descriptors and the chosen algorithm are cached per (M, N, K, alignment);
// the workspace is a static device buffer; every call runs on the given stream.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

#if FORGE_DTYPE_BF16
typedef __nv_bfloat16 T;
#define DT CUDA_R_16BF
#else
typedef float T;
#define DT CUDA_R_32F
#endif
#if FORGE_GEMM_BIAS
#define HAS_BIAS 1
#else
#define HAS_BIAS 0
#endif
#if FORGE_GEMM_RESIDUAL
#define HAS_RES 1
#else
#define HAS_RES 0
#endif
// ACT: 0 none, 1 relu, 2 gelu (erf), 3 gelu (tanh), 4 silu. Each form's own activation here;
// a fusion region's seed gets the region's (the PatternSeed constant act_code).
#if FORGE_GEMM_RESIDUAL
#define ACT 0
#elif FORGE_GEMM_SILU
#define ACT 4
#else
#define ACT 2
#endif

// @tune ALGO: 0, 1, 2, 3, 4, 5, 6, 7
#define ALGO 0
// @tune WS_MB: 0, 4, 32
#define WS_MB 32
// @tune SPLITK: 1, 2, 4
#define SPLITK 1
// @tune SWIZZLE: 0, 1
#define SWIZZLE 0
// @tune FUSE_ACT: 0, 1
#define FUSE_ACT 1
// @tune EPI_BLOCK: 128, 256, 512
#define EPI_BLOCK 256
#if FORGE_DTYPE_BF16
// @tune EPI_VEC: 1, 2, 4, 8
#define EPI_VEC 8
#else
// @tune EPI_VEC: 1, 2, 4
#define EPI_VEC 4
#endif

// the activation in cuBLASLt's epilogue: ReLU, or tanh-GELU, and only when nothing is added after it
#define LT_ACT (FUSE_ACT && !HAS_RES && (ACT == 1 || ACT == 3))
// the residual in C (beta = 1): only when no activation comes before it
#define LT_RES (HAS_RES && ACT == 0)
#define POST_PASS ((ACT != 0 && !LT_ACT) || (HAS_RES && !LT_RES))

#if WS_MB > 0
__device__ __align__(256) unsigned char forge_workspace[(size_t)WS_MB << 20];
#endif

__device__ __forceinline__ float tof(float a) { return a; }
__device__ __forceinline__ float tof(__nv_bfloat16 a) { return __bfloat162float(a); }
__device__ __forceinline__ T fromf(float a) {
#if FORGE_DTYPE_BF16
    return __float2bfloat16_rn(a);
#else
    return a;
#endif
}

__device__ __forceinline__ float act(float v) {
#if ACT == 1
    return v > 0.f ? v : 0.f;
#elif ACT == 2
    return 0.5f * v * (1.f + erff(v * 0.7071067811865476f));
#elif ACT == 3
    return 0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
#elif ACT == 4
    return v / (1.f + expf(-v));
#else
    return v;
#endif
}

template <int V> struct alignas(sizeof(T) * V) TV { T v[V]; };

// y = act(y) [+ r] in place over nv vectors of V elements (y already holds x W^T + b, rounded
// once to T); 16-byte accesses when V * sizeof(T) == 16, blocks striding over the vectors
template <int V>
__global__ void __launch_bounds__(EPI_BLOCK) post_pass(T* __restrict__ y, const T* __restrict__ r, int64_t nv) {
    TV<V>* yv = reinterpret_cast<TV<V>*>(y);
    for (int64_t i = (int64_t)blockIdx.x * EPI_BLOCK + threadIdx.x; i < nv; i += (int64_t)gridDim.x * EPI_BLOCK) {
        TV<V> a = yv[i];
#if HAS_RES && !LT_RES
        const TV<V> b = reinterpret_cast<const TV<V>*>(r)[i];
#endif
#pragma unroll
        for (int j = 0; j < V; ++j) {
            float v = LT_ACT ? tof(a.v[j]) : act(tof(a.v[j]));
#if HAS_RES && !LT_RES
            v += tof(b.v[j]);
#endif
            a.v[j] = fromf(v);
        }
        yv[i] = a;
    }
}

template <int V>
static void launch_post(T* y, const T* r, int64_t total, cudaStream_t stream) {
    const int64_t nv = total / V;
    int64_t blocks = (nv + EPI_BLOCK - 1) / EPI_BLOCK;
    if (blocks > (1 << 20)) blocks = 1 << 20;  // the loop strides: any grid covers the vectors
    post_pass<V><<<(unsigned)blocks, EPI_BLOCK, 0, stream>>>(y, r, nv);
}

struct Plan {
    int64_t m, n, k;
    int align;
    bool ok;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
};

static cublasLtHandle_t g_handle = nullptr;
static Plan g_plans[8];
static int g_nplans = 0;

static int alignment_of(const void* p, int64_t ld_elems) {
    int a = 256;
    while (a > (int)sizeof(T) && (((uintptr_t)p % a) != 0 || (ld_elems * (int64_t)sizeof(T)) % a != 0)) a /= 2;
    return a;
}

static void free_plan(Plan& p) {
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
}

// Build the descriptors and pick the ALGO-th heuristic result (the last one when fewer come back),
// with SPLITK / SWIZZLE written into its config and checked by cublasLtMatmulAlgoCheck.
static int make_plan(Plan& p, int64_t m, int64_t n, int64_t k, int align, const T* bias, size_t ws_bytes) {
    p = Plan{m, n, k, align, false, nullptr, nullptr, nullptr, nullptr, {}};
    const cublasComputeType_t ct = CUBLAS_COMPUTE_32F;  // bf16: fp32 accumulate; fp32: no TF32
    if (cublasLtMatmulDescCreate(&p.desc, ct, CUDA_R_32F)) return 1;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
#if LT_ACT && ACT == 1
    epi = HAS_BIAS ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
#elif LT_ACT && ACT == 3
    epi = HAS_BIAS ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
#else
    epi = HAS_BIAS ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
#endif
    cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
    if (HAS_BIAS) {
        const cudaDataType_t bt = DT;
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt));
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    }
    if (cublasLtMatrixLayoutCreate(&p.a, DT, k, n, k) || cublasLtMatrixLayoutCreate(&p.b, DT, k, m, k) ||
        cublasLtMatrixLayoutCreate(&p.c, DT, n, m, n))
        return 1;
    cublasLtMatmulPreference_t pref;
    if (cublasLtMatmulPreferenceCreate(&pref)) return 1;
    const uint64_t ws = ws_bytes;
    const uint32_t al = (uint32_t)align;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof(al));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof(al));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof(al));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof(al));
    cublasLtMatmulHeuristicResult_t res[8];
    int got = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(g_handle, p.desc, p.a, p.b, p.c, p.c, pref, 8, res, &got);
    cublasLtMatmulPreferenceDestroy(pref);
    if (hs || got <= 0) return 1;
    p.algo = res[ALGO < got ? ALGO : got - 1].algo;
#if SPLITK > 1 || SWIZZLE
    {
        const int32_t splits = SPLITK;
        const uint32_t swz = SWIZZLE;
        if (SPLITK > 1) {
            const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
            cublasLtMatmulAlgoConfigSetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits));
            cublasLtMatmulAlgoConfigSetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme));
        }
        if (SWIZZLE)
            cublasLtMatmulAlgoConfigSetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof(swz));
        cublasLtMatmulHeuristicResult_t chk;
        if (cublasLtMatmulAlgoCheck(g_handle, p.desc, p.a, p.b, p.c, p.c, &p.algo, &chk)) return 2;
        if (chk.workspaceSize > ws_bytes) return 2;
    }
#endif
    p.ok = true;
    return 0;
}

static int launch(const T* x, const T* w, const T* b, const T* r, T* y, int64_t m, int64_t n, int64_t k,
                  cudaStream_t stream) {
    if (m <= 0 || n <= 0) return 0;
    if (k <= 0) return 1;  // an empty reduction: not this kernel's case
    if (!g_handle && cublasLtCreate(&g_handle)) return 1;
    void* ws = nullptr;
    size_t ws_bytes = 0;
#if WS_MB > 0
    if (cudaGetSymbolAddress(&ws, forge_workspace)) return 1;
    ws_bytes = (size_t)WS_MB << 20;
#endif
    int align = alignment_of(x, k);
    const int aw = alignment_of(w, k), ay = alignment_of(y, n);
    align = aw < align ? aw : align;
    align = ay < align ? ay : align;
    if (HAS_RES) {
        const int ar = alignment_of(r, n);
        align = ar < align ? ar : align;
    }
    Plan* p = nullptr;
    for (int i = 0; i < g_nplans; ++i)
        if (g_plans[i].m == m && g_plans[i].n == n && g_plans[i].k == k && g_plans[i].align == align) p = &g_plans[i];
    if (!p) {
        const int slot = g_nplans < 8 ? g_nplans++ : 7;  // the 8th slot is rebuilt when all are taken
        if (slot == 7 && g_plans[7].ok) free_plan(g_plans[7]);
        p = &g_plans[slot];
        const int rc = make_plan(*p, m, n, k, align, b, ws_bytes);
        if (rc) {
            free_plan(*p);
            p->ok = false;
            p->m = -1;
            return rc;
        }
    }
    if (HAS_BIAS)  // the bias pointer is part of the descriptor: set it for this call
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof(b));
    const float alpha = 1.f, beta = LT_RES ? 1.f : 0.f;
    const void* cptr = LT_RES ? (const void*)r : (const void*)y;
    if (cublasLtMatmul(g_handle, p->desc, &alpha, w, p->a, x, p->b, &beta, cptr, p->c, y, p->c, &p->algo, ws, ws_bytes,
                       stream))
        return 3;
#if POST_PASS
    const int64_t total = m * n;
    const uintptr_t a = (uintptr_t)y | (HAS_RES ? (uintptr_t)r : 0);
    if (EPI_VEC > 1 && total % EPI_VEC == 0 && a % (EPI_VEC * sizeof(T)) == 0)
        launch_post<EPI_VEC>(y, r, total, stream);
    else
        launch_post<1>(y, r, total, stream);
#endif
    return (int)cudaGetLastError();
}

#if FORGE_GEMM_BIAS && FORGE_GEMM_RESIDUAL
extern "C" int forge_launch(const T* x, const T* w, const T* b, const T* r, T* y, int64_t m, int64_t n, int64_t k,
                            cudaStream_t stream) {
    return launch(x, w, b, r, y, m, n, k, stream);
}
#elif FORGE_GEMM_BIAS
extern "C" int forge_launch(const T* x, const T* w, const T* b, T* y, int64_t m, int64_t n, int64_t k,
                            cudaStream_t stream) {
    return launch(x, w, b, nullptr, y, m, n, k, stream);
}
#elif FORGE_GEMM_RESIDUAL
extern "C" int forge_launch(const T* x, const T* w, const T* r, T* y, int64_t m, int64_t n, int64_t k,
                            cudaStream_t stream) {
    return launch(x, w, nullptr, r, y, m, n, k, stream);
}
#else
extern "C" int forge_launch(const T* x, const T* w, T* y, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
    return launch(x, w, nullptr, nullptr, y, m, n, k, stream);
}
#endif
