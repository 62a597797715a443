/* matmul.cu: the linear layers on cuBLASLt (bf16 operands, fp32 compute; bf16 outputs,
 * weight gradients in the table's grad dtype accumulated in place), with a
 * per-shape cache of descriptors and the heuristic's algorithm.
 *
 * Row-major to column-major: a row-major [R, K] matrix is a column-major [K, R] one with
 * leading dimension K. So out[N,OC] = x[N,IC] w[OC,IC]^T is, column-major,
 * out^T[OC,N] = (w^T)^T[OC,IC] x^T[IC,N]: A = w (IC x OC, ld IC, transposed), B = x
 * (IC x N, ld IC), m = OC, n = N, k = IC. Source: cuBLASLt API reference, cublasLtMatmul. */
#include "ops/cuda/cuda_common.h"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#define LJ_GEMM_CACHE_SIZE 256

typedef struct {
    int transa, transb, m, n, k, lda, ldb, ldc;
    cudaDataType_t ctype;
    int align_a, align_b, align_c;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} lj_gemm_plan;

static struct {
    cublasLtHandle_t handle;
    void *workspace;
    lj_gemm_plan cache[LJ_GEMM_CACHE_SIZE];
    int cached;
} g_mm;

static void lt_check(cublasStatus_t s, const char *call, const char *what, const char *file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return;
    char buf[200];
    snprintf(buf, sizeof buf, "%s (%s)", call, what);
    lj_cuda_die(buf, cublasLtGetStatusString(s), file, line);
}
#define LT_CHECK(call, what) lt_check((call), #call, (what), __FILE__, __LINE__)

lj_status lj_cuda_matmul_init(void) {
    cublasStatus_t s = cublasLtCreate(&g_mm.handle);
    if (s != CUBLAS_STATUS_SUCCESS) return lj_fail(LJ_ERR_DEVICE, "cublasLtCreate failed: %s", cublasLtGetStatusString(s));
    return lj_cuda_alloc(&g_mm.workspace, lj_cuda_fixed_workspace_bytes());
}

/* The largest power of two (up to 256) that divides the address: what the heuristic may
 * assume about the pointer's alignment. */
static int ptr_alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && (a % (uintptr_t)al) != 0) al >>= 1;
    return al;
}

static lj_gemm_plan *gemm_plan(const char *what, lj_gemm_plan *key) {
    for (int i = 0; i < g_mm.cached; i++) {
        lj_gemm_plan *p = &g_mm.cache[i];
        if (p->transa == key->transa && p->transb == key->transb && p->m == key->m && p->n == key->n &&
            p->k == key->k && p->lda == key->lda && p->ldb == key->ldb && p->ldc == key->ldc &&
            p->ctype == key->ctype && p->align_a == key->align_a && p->align_b == key->align_b &&
            p->align_c == key->align_c)
            return p;
    }
    lj_gemm_plan *p = g_mm.cached < LJ_GEMM_CACHE_SIZE ? &g_mm.cache[g_mm.cached] : &g_mm.cache[0];
    if (g_mm.cached == LJ_GEMM_CACHE_SIZE) { /* full: recycle slot 0 (shapes are few in practice) */
        cublasLtMatmulDescDestroy(p->desc);
        cublasLtMatrixLayoutDestroy(p->la);
        cublasLtMatrixLayoutDestroy(p->lb);
        cublasLtMatrixLayoutDestroy(p->lc);
    }
    *p = *key;
    cublasOperation_t ta = key->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = key->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), what);
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), what);
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, key->transa ? key->k : key->m,
                                        key->transa ? key->m : key->k, key->lda), what);
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, key->transb ? key->n : key->k,
                                        key->transb ? key->k : key->n, key->ldb), what);
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->lc, key->ctype, key->m, key->n, key->ldc), what);

    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref), what);
    size_t ws = lj_cuda_fixed_workspace_bytes();
    uint32_t aa = (uint32_t)key->align_a, ab = (uint32_t)key->align_b, ac = (uint32_t)key->align_c;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), what);
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa), what);
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab), what);
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof ac), what);
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof ac), what);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    memset(&res, 0, sizeof res);
    LT_CHECK(cublasLtMatmulAlgoGetHeuristic(g_mm.handle, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &found),
             what);
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) {
        char msg[200];
        snprintf(msg, sizeof msg, "m=%d n=%d k=%d transa=%d transb=%d: cuBLASLt found no algorithm", key->m, key->n,
                 key->k, key->transa, key->transb);
        lj_cuda_die(what, msg, __FILE__, __LINE__);
    }
    p->algo = res.algo;
    if (g_mm.cached < LJ_GEMM_CACHE_SIZE) g_mm.cached++;
    return p;
}

void lj_cuda_gemm(const char *what, int transa, int transb, int m, int n, int k, const void *A, int lda,
                  const void *B, int ldb, void *C, cudaDataType_t ctype, int ldc, float alpha, float beta) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) { /* empty sum: C = beta*C */
        if (beta == 0.0f) {
            size_t es = ctype == CUDA_R_32F ? 4 : 2;
            if (ldc == m)
                LJ_CUDA_CHECK(cudaMemsetAsync(C, 0, (size_t)m * n * es, lj_cuda_stream()), what);
            else
                LJ_CUDA_CHECK(cudaMemset2DAsync(C, (size_t)ldc * es, 0, (size_t)m * es, (size_t)n, lj_cuda_stream()), what);
        }
        return;
    }
    lj_gemm_plan key;
    memset(&key, 0, sizeof key);
    key.transa = transa;
    key.transb = transb;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    key.ctype = ctype;
    key.align_a = ptr_alignment(A);
    key.align_b = ptr_alignment(B);
    key.align_c = ptr_alignment(C);
    lj_gemm_plan *p = gemm_plan(what, &key);
    LT_CHECK(cublasLtMatmul(g_mm.handle, p->desc, &alpha, A, p->la, B, p->lb, &beta, C, p->lc, C, p->lc, &p->algo,
                            g_mm.workspace, lj_cuda_fixed_workspace_bytes(), lj_cuda_stream()),
             what);
}

/* out[N,OC] bf16 = x[N,IC] w[OC,IC]^T. */
void lj_cuda_matmul_forward(void *out, const void *x, const void *w, int N, int IC, int OC) {
    lj_cuda_gemm("matmul_forward", 1, 0, OC, N, IC, w, IC, x, IC, out, CUDA_R_16BF, OC, 1.0f, 0.0f);
}

/* dx[N,IC] bf16 (= or +=, dx_mode) dout[N,OC] w[OC,IC]: column-major
 * dx^T[IC,N] = w^T[IC,OC] dout^T[OC,N]. dw[OC,IC] (grad dtype, += or =) dout^T x: column-major
 * dw^T[IC,OC] = x^T[IC,N] (dout^T)^T[N,OC]. */
void lj_cuda_matmul_backward(void *dx, void *dw, const void *dout, const void *x, const void *w, int N, int IC,
                             int OC, lj_grad_mode dx_mode, lj_grad_mode dw_mode, lj_dtype grad_dtype) {
    if (dx) lj_cuda_gemm("matmul_backward dx", 0, 0, IC, N, OC, w, IC, dout, OC, dx, CUDA_R_16BF, IC, 1.0f,
                         dx_mode == LJ_GRAD_ACCUMULATE ? 1.0f : 0.0f);
    if (dw)
        lj_cuda_gemm("matmul_backward dw", 0, 1, IC, OC, N, x, IC, dout, OC, dw, lj_cuda_ctype(grad_dtype), IC, 1.0f,
                     dw_mode == LJ_GRAD_ACCUMULATE ? 1.0f : 0.0f);
}

/* ---- FP8 GEMM ------------------------------------------------------------------------ */

/* A cached FP8 GEMM: descriptor, layouts and the heuristic's algorithm per shape and types. */
typedef struct {
    int m, n, k, ld;
    cudaDataType_t ta, tb, ctype;
    int align_c;
    int scaled; /* the heuristic saw A and B scale pointers (every real GEMM; not the start-up probe) */
    int mode_a, mode_b; /* blockwise: cuBLASLt's A/B scale modes (cublasLtMatmulMatrixScale_t); -1: per tensor */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    int found;
} lj_fp8_plan;

/* Serving's FP8 GEMMs come in as many shapes as its steps have row counts (four linears each):
 * room for a few hundred, replaced round-robin when full. */
#define LJ_FP8_CACHE_SIZE 512
static struct {
    lj_fp8_plan cache[LJ_FP8_CACHE_SIZE];
    int cached;
    int next; /* the slot a full cache replaces next */
} g_fp8;

static cudaDataType_t fp8_type(lj_fp8_format f) { return f == LJ_FP8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

/* The plan of C[m, n] (column-major, ld m, type ctype) = A^T B with A [k, m] and B [k, n]
 * column-major FP8, ld `ld` (k padded to 16): cuBLASLt's "TN" FP8 form. `found` = 0 when
 * cuBLASLt has no algorithm for it (the caller decides whether that is fatal). The A and B scale
 * pointers (device f32, or NULL for a probe) are set before the heuristic is asked: the
 * algorithm it returns for a descriptor without them is refused at run time with them
 * (CUBLAS_STATUS_NOT_SUPPORTED). */
static lj_fp8_plan *fp8_plan_modes(const char *what, int m, int n, int k, int ld, cudaDataType_t ta,
                                   cudaDataType_t tb, cudaDataType_t ctype, int align_c, const float *a_scale,
                                   const float *b_scale, int mode_a, int mode_b) {
    const int scaled = a_scale && b_scale;
    for (int i = 0; i < g_fp8.cached; i++) {
        lj_fp8_plan *p = &g_fp8.cache[i];
        if (p->m == m && p->n == n && p->k == k && p->ld == ld && p->ta == ta && p->tb == tb && p->ctype == ctype &&
            p->align_c == align_c && p->scaled == scaled && p->mode_a == mode_a && p->mode_b == mode_b)
            return p;
    }
    lj_fp8_plan *p = g_fp8.cached < LJ_FP8_CACHE_SIZE ? &g_fp8.cache[g_fp8.cached] : &g_fp8.cache[g_fp8.next];
    if (g_fp8.cached == LJ_FP8_CACHE_SIZE) {
        g_fp8.next = (g_fp8.next + 1) % LJ_FP8_CACHE_SIZE;
        cublasLtMatmulDescDestroy(p->desc);
        cublasLtMatrixLayoutDestroy(p->la);
        cublasLtMatrixLayoutDestroy(p->lb);
        cublasLtMatrixLayoutDestroy(p->lc);
    }
    memset(p, 0, sizeof *p);
    p->m = m, p->n = n, p->k = k, p->ld = ld, p->ta = ta, p->tb = tb, p->ctype = ctype, p->align_c = align_c;
    p->scaled = scaled;
    p->mode_a = mode_a, p->mode_b = mode_b;
    const cublasOperation_t opt = CUBLAS_OP_T, opn = CUBLAS_OP_N;
    const int8_t fast_accum = 0; /* fp32 accumulation throughout (no periodic-promotion shortcut) */
    LT_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opt, sizeof opt), what);
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opn, sizeof opn), what);
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum, sizeof fast_accum),
             what);
    if (scaled) {
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale),
                 what);
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale),
                 what);
    }
    if (mode_a >= 0 || mode_b >= 0) {
#if LJ_CUDA_HAVE_FP8_BLOCK_SCALING
        const int32_t ma = mode_a, mb = mode_b;
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma), what);
        LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb), what);
#else
        lj_cuda_die(what, "cuBLASLt's block scale modes need cuBLAS 12.9 headers", __FILE__, __LINE__);
#endif
    }
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->la, ta, k, m, ld), what);
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->lb, tb, k, n, ld), what);
    LT_CHECK(cublasLtMatrixLayoutCreate(&p->lc, ctype, m, n, m), what);
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref), what);
    size_t ws = lj_cuda_fixed_workspace_bytes();
    const uint32_t a16 = 16, ac = (uint32_t)align_c;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), what);
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a16, sizeof a16),
             what);
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &a16, sizeof a16),
             what);
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof ac), what);
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof ac), what);
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof res);
    int found = 0;
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(g_mm.handle, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    p->found = st == CUBLAS_STATUS_SUCCESS && found > 0;
    if (p->found) p->algo = res.algo;
    if (g_fp8.cached < LJ_FP8_CACHE_SIZE) g_fp8.cached++;
    return p;
}

static lj_fp8_plan *fp8_plan(const char *what, int m, int n, int k, int ld, cudaDataType_t ta, cudaDataType_t tb,
                             cudaDataType_t ctype, int align_c, const float *a_scale, const float *b_scale) {
    return fp8_plan_modes(what, m, n, k, ld, ta, tb, ctype, align_c, a_scale, b_scale, -1, -1);
}

/* out[M, N] row-major = column-major out^T [N, M] = b[N, K] a[M, K]^T: cuBLASLt's A is b
 * (transposed, [K, N] column-major), its B is a ([K, M] column-major), m = N, n = M. */
extern "C" void lj_cuda_fp8_matmul(void *out, lj_dtype out_dtype, const void *a, lj_fp8_format fa,
                                   const float *a_scale_inv, const void *b, lj_fp8_format fb, const float *b_scale_inv,
                                   int M, int N, int K, lj_grad_mode mode, void *workspace) {
    (void)workspace;
    const char *what = "fp8_matmul";
    if (M <= 0 || N <= 0) return;
    LJ_ASSERT(((uintptr_t)a_scale_inv | (uintptr_t)b_scale_inv) % 16 == 0,
              "fp8_matmul: scale pointers must be 16-byte aligned (LJ_FP8_SCALE_INV_STRIDE)");
    LJ_ASSERT(fa == LJ_FP8_E4M3 || fb == LJ_FP8_E4M3, "fp8_matmul: E5M2 x E5M2 has no cuBLASLt kernel");
    LJ_ASSERT(out_dtype == LJ_DTYPE_BF16 || out_dtype == LJ_DTYPE_F32, "fp8_matmul: output %s",
              lj_dtype_name(out_dtype));
    const cudaDataType_t ctype = lj_cuda_ctype(out_dtype);
    const int ld = lj_fp8_ld(K);
    lj_fp8_plan *p =
        fp8_plan(what, N, M, ld, ld, fp8_type(fb), fp8_type(fa), ctype, ptr_alignment(out), b_scale_inv, a_scale_inv);
    if (!p->found) {
        char msg[200];
        snprintf(msg, sizeof msg, "M=%d N=%d K=%d (%s x %s -> %s): cuBLASLt found no FP8 algorithm", M, N, K,
                 lj_fp8_format_name(fa), lj_fp8_format_name(fb), lj_dtype_name(out_dtype));
        lj_cuda_die(what, msg, __FILE__, __LINE__);
    }
    /* cuBLASLt's A scale is b's, its B scale a's: D = scale_A scale_B (A^T B) */
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale_inv,
                                            sizeof b_scale_inv), what);
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale_inv,
                                            sizeof a_scale_inv), what);
    const float alpha = 1.0f, beta = mode == LJ_GRAD_ACCUMULATE ? 1.0f : 0.0f;
    LT_CHECK(cublasLtMatmul(g_mm.handle, p->desc, &alpha, b, p->la, a, p->lb, &beta, out, p->lc, out, p->lc, &p->algo,
                            g_mm.workspace, lj_cuda_fixed_workspace_bytes(), lj_cuda_stream()),
             what);
}

/* The blockwise form (ops.h fp8_matmul_blockwise): the same "TN" GEMM with cuBLASLt's scale modes
 * (cuBLAS 12.9, sm_90): a 1x128-tile operand's factors are VEC128_32F, a block operand's
 * BLK128x128_32F; the layouts of base/fp8.h are the ones cuBLASLt reads (cuBLASLt API reference,
 * "128-element 1D and 128x128 2D block scaling": VEC128 factors M-major [L, M], BLK128x128
 * K-major [ceil(M/128), L rounded up to 4], with M and N multiples of 4, so round4(M) = M;
 * TransformerEngine's Float8BlockQuantizer lays them out so too). cuBLASLt's A is b, so its A
 * scale is b's. */
extern "C" void lj_cuda_fp8_matmul_blockwise(void *out, lj_dtype out_dtype, const void *a, lj_fp8_format fa,
                                             const float *a_sinv, int a_blocks, const void *b, lj_fp8_format fb,
                                             const float *b_sinv, int b_blocks, int M, int N, int K, lj_grad_mode mode,
                                             void *workspace) {
    (void)workspace;
    const char *what = "fp8_matmul_blockwise";
    if (M <= 0 || N <= 0) return;
#if LJ_CUDA_HAVE_FP8_BLOCK_SCALING
    LJ_ASSERT(((uintptr_t)a_sinv | (uintptr_t)b_sinv) % 16 == 0,
              "fp8_matmul_blockwise: scales must be 16-byte aligned");
    LJ_ASSERT(fa == LJ_FP8_E4M3 || fb == LJ_FP8_E4M3, "fp8_matmul_blockwise: E5M2 x E5M2 has no cuBLASLt kernel");
    LJ_ASSERT(!(a_blocks && b_blocks), "fp8_matmul_blockwise: 128x128 x 128x128 has no cuBLASLt kernel");
    LJ_ASSERT(M % 4 == 0 && N % 4 == 0, "fp8_matmul_blockwise: M=%d and N=%d must be multiples of 4 (cuBLASLt's "
              "block scales; lj_cli_fp8_check_tokens)", M, N);
    LJ_ASSERT(out_dtype == LJ_DTYPE_BF16 || out_dtype == LJ_DTYPE_F32, "fp8_matmul_blockwise: output %s",
              lj_dtype_name(out_dtype));
    const cudaDataType_t ctype = lj_cuda_ctype(out_dtype);
    const int ld = lj_fp8_ld(K);
    const int vec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, blk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    lj_fp8_plan *p = fp8_plan_modes(what, N, M, ld, ld, fp8_type(fb), fp8_type(fa), ctype, ptr_alignment(out), b_sinv,
                                    a_sinv, b_blocks ? blk : vec, a_blocks ? blk : vec);
    if (!p->found) {
        char msg[200];
        snprintf(msg, sizeof msg, "M=%d N=%d K=%d (%s x %s -> %s, %s x %s scales): cuBLASLt found no algorithm", M, N,
                 K, lj_fp8_format_name(fa), lj_fp8_format_name(fb), lj_dtype_name(out_dtype),
                 a_blocks ? "128x128" : "1x128", b_blocks ? "128x128" : "1x128");
        lj_cuda_die(what, msg, __FILE__, __LINE__);
    }
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_sinv, sizeof b_sinv),
             what);
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_sinv, sizeof a_sinv),
             what);
    const float alpha = 1.0f, beta = mode == LJ_GRAD_ACCUMULATE ? 1.0f : 0.0f;
    LT_CHECK(cublasLtMatmul(g_mm.handle, p->desc, &alpha, b, p->la, a, p->lb, &beta, out, p->lc, out, p->lc, &p->algo,
                            g_mm.workspace, lj_cuda_fixed_workspace_bytes(), lj_cuda_stream()),
             what);
#else
    (void)out, (void)out_dtype, (void)a, (void)fa, (void)a_sinv, (void)a_blocks, (void)b, (void)fb, (void)b_sinv;
    (void)b_blocks, (void)K, (void)mode;
    lj_cuda_die(what, "this build's cuBLAS headers are older than 12.9 (no block scale modes)", __FILE__, __LINE__);
#endif
}

extern "C" size_t lj_cuda_fp8_matmul_workspace_bytes(int M, int N, int K) {
    (void)M, (void)N, (void)K;
    return 0; /* the backend's cuBLASLt workspace */
}

extern "C" lj_status lj_ops_cuda_fp8_check(void) {
    int dev = 0;
    struct cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
        return lj_fail(LJ_ERR_UNSUPPORTED, "--fp8-format: no CUDA device to run FP8 on");
    if (prop.major * 10 + prop.minor < 89)
        return lj_fail(LJ_ERR_UNSUPPORTED, "--fp8-format: %s (compute capability %d.%d) has no FP8 tensor cores "
                                           "(they need 8.9 or 9.0: Ada, Hopper)", prop.name, prop.major, prop.minor);
    if (!g_mm.handle) return lj_fail(LJ_ERR_UNSUPPORTED, "--fp8-format: the CUDA backend is not started");
    /* the GEMMs the recipe runs, at a small shape: forward E4M3 x E4M3 -> bf16, and the backward's
     * E5M2 x E4M3 -> bf16 and -> fp32 */
    const cudaDataType_t outs[2] = {CUDA_R_16BF, CUDA_R_32F};
    const cudaDataType_t ins[2] = {CUDA_R_8F_E4M3, CUDA_R_8F_E5M2};
    for (int i = 0; i < 2; i++) {
        for (int o = 0; o < 2; o++) {
            lj_fp8_plan *p = fp8_plan("fp8 check", 64, 64, 64, 64, CUDA_R_8F_E4M3, ins[i], outs[o], 256, NULL, NULL);
            if (!p->found)
                return lj_fail(LJ_ERR_UNSUPPORTED,
                               "--fp8-format: this cuBLASLt (version %zu) has no FP8 GEMM for e4m3 x %s -> %s on %s",
                               cublasLtGetVersion(), i ? "e5m2" : "e4m3", o ? "fp32" : "bf16", prop.name);
        }
    }
    return LJ_OK;
}

extern "C" lj_status lj_ops_cuda_fp8_blockwise_check(void) {
    int dev = 0;
    struct cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
        return lj_fail(LJ_ERR_UNSUPPORTED, "--fp8-recipe blockwise: no CUDA device");
    const size_t v = cublasLtGetVersion();
#if !LJ_CUDA_HAVE_FP8_BLOCK_SCALING
    (void)v, (void)prop;
    return lj_fail(LJ_ERR_UNSUPPORTED, "--fp8-recipe blockwise needs cuBLASLt 12.9 or later (its 1x128 and 128x128 "
                                       "scale modes); this ljperf was built with cuBLAS %d headers: use delayed or "
                                       "tensorwise", (int)CUBLAS_VERSION);
#else
    if (v < 120900)
        return lj_fail(LJ_ERR_UNSUPPORTED, "--fp8-recipe blockwise needs cuBLASLt 12.9 or later (its 1x128 and 128x128 "
                                           "scale modes); this one is version %zu: use delayed or tensorwise", v);
    if (prop.major < 9)
        return lj_fail(LJ_ERR_UNSUPPORTED, "--fp8-recipe blockwise needs a Hopper GPU (compute capability 9.0, "
                                           "sm_90): %s is %d.%d; use delayed or tensorwise", prop.name, prop.major,
                       prop.minor);
    if (!g_mm.handle) return lj_fail(LJ_ERR_UNSUPPORTED, "--fp8-recipe blockwise: the CUDA backend is not started");
    /* the three GEMMs of the recipe at a small shape: 1x128 x 128x128 (forward, data gradient) and
     * 1x128 x 1x128 (weight gradient), e4m3 and e5m2 x e4m3, to bf16 and fp32 */
    const int vec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, blk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const float *dummy = (const float *)g_mm.workspace; /* the heuristic reads no scale */
    const cudaDataType_t ins[2] = {CUDA_R_8F_E4M3, CUDA_R_8F_E5M2};
    const cudaDataType_t outs[2] = {CUDA_R_16BF, CUDA_R_32F};
    for (int i = 0; i < 2; i++) {
        for (int g = 0; g < 2; g++) {
            for (int o = 0; o < 2; o++) {
                lj_fp8_plan *p = fp8_plan_modes("fp8 blockwise check", 128, 128, 128, 128, CUDA_R_8F_E4M3, ins[i],
                                                outs[o], 256, dummy, dummy, g ? vec : blk, vec);
                if (!p->found)
                    return lj_fail(LJ_ERR_UNSUPPORTED,
                                   "--fp8-recipe blockwise: this cuBLASLt (version %zu) has no %s block-scaled FP8 "
                                   "GEMM for e4m3 x %s -> %s on %s (compute capability %d.%d; cuBLASLt has them on "
                                   "sm_90); use delayed or tensorwise", v, g ? "1x128 x 1x128" : "128x128 x 1x128",
                                   i ? "e5m2" : "e4m3", o ? "fp32" : "bf16", prop.name, prop.major, prop.minor);
            }
        }
    }
    return LJ_OK;
#endif
}
