/* cpu.h: the CPU backend's internal interface (the functions each ops/cpu/ source file puts into
 * the op table) and its public extras: the OpenBLAS sgemm rate probe.
 *
 * Every tensor is fp32, row-major, host memory. Shapes and semantics are those of the op
 * table entries in ops/ops.h (N rows, C hidden size, Q = nh*hd, KV = nkv*hd, QKV = Q + 2*KV).
 *
 * Determinism: every op gives bit-identical results run to run for the same inputs and the
 * same thread count (no float atomics; reductions use a fixed partition and a fixed order).
 * Workspace sizes that depend on the thread count use lj_cpu_num_threads(), and the ops run
 * their parallel regions with exactly that many threads.
 */
#ifndef LJ_OPS_CPU_H
#define LJ_OPS_CPU_H

#include <math.h>

#include "ops/ops.h"

/* Largest head dimension the CPU attention supports (decode keeps one [hd] accumulator on
 * the stack). */
#define LJ_CPU_MAX_HEAD_DIM 1024

/* Rows of logits per chunk in cross_entropy_fused: the workspace is [chunk, V] fp32. */
#define LJ_CPU_CE_CHUNK_ROWS 256

/* Elements per partial sum in global_norm_sq (fixed, so the result does not depend on the
 * thread count). */
#define LJ_CPU_NORM_CHUNK 65536

/* Columns per task in the column-parallel reductions (embedding and RMSNorm weight
 * gradients): each task owns a column range and sums the rows in order, so the result is the
 * same for any thread count and needs no atomics. */
#define LJ_CPU_COL_BLOCK 64

/* Threads the CPU ops use for their parallel regions and per-thread workspaces:
 * lj_num_threads() (OMP_NUM_THREADS, else the online cores). */
int lj_cpu_num_threads(void);

/* Measures the OpenBLAS sgemm rate on square n x n fp32 matrices through lj_cpu_sgemm (the
 * same call and thread split as matmul_forward: C = A B^T on lj_cpu_num_threads() threads),
 * timing repeated calls for about 0.3 s after one warm-up call and keeping the fastest.
 * Returns GFLOP/s counted as 2*n^3 per call, or 0 when n <= 0 or memory is short. Uses host
 * memory outside the plan (a benchmark probe, not part of a run). */
double lj_cpu_sgemm_gflops(int n);

/* exp(x) for the softmax loops, written so that GCC vectorizes a loop of calls (libm's expf
 * is a scalar call). Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then the degree-7
 * Taylor polynomial of e^r (truncation error < 2.2e-8 relative) and a scale by 2^n built in
 * the exponent bits. Accurate to about 1 ulp for -87 <= x <= 88; returns 0 below -87 (the
 * softmax callers pass x <= ~0). */
static inline float lj_cpu_expf(float x) {
    const float log2e = 1.44269504088896341f, ln2_hi = 0.693145751953125f, ln2_lo = 1.42860682030941723e-6f;
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    float t = xc * log2e + shifter;
    float n = t - shifter;
    float r = (xc - n * ln2_hi) - n * ln2_lo;
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union { int32_t i; float f; } scale = {.i = ((int32_t)n + 127) << 23};
    float y = p * scale.f;
    return x < -87.0f ? 0.0f : y;
}

/* Max and double-precision sum of x[n] (n >= 1) over 16 fixed lanes (element j goes to lane
 * j % 16, lanes combined in order): vectorizable, and the same bits for the same input. */
#define LJ_CPU_LANES 16
static inline float lj_cpu_max(const float *x, int n) {
    float lane[LJ_CPU_LANES];
    for (int k = 0; k < LJ_CPU_LANES; k++) lane[k] = x[0];
    int j = 0;
    for (; j + LJ_CPU_LANES <= n; j += LJ_CPU_LANES)
        for (int k = 0; k < LJ_CPU_LANES; k++) lane[k] = x[j + k] > lane[k] ? x[j + k] : lane[k];
    float m = lane[0];
    for (int k = 1; k < LJ_CPU_LANES; k++) m = lane[k] > m ? lane[k] : m;
    for (; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}
static inline double lj_cpu_sum_f64(const float *x, int n) {
    double lane[LJ_CPU_LANES] = {0};
    int j = 0;
    for (; j + LJ_CPU_LANES <= n; j += LJ_CPU_LANES)
        for (int k = 0; k < LJ_CPU_LANES; k++) lane[k] += (double)x[j + k];
    double s = 0.0;
    for (int k = 0; k < LJ_CPU_LANES; k++) s += lane[k];
    for (; j < n; j++) s += (double)x[j];
    return s;
}

/* sum_j a[j] * b[j] in double over the same fixed lanes. */
static inline double lj_cpu_dot_f64(const float *a, const float *b, int n) {
    double lane[LJ_CPU_LANES] = {0};
    int j = 0;
    for (; j + LJ_CPU_LANES <= n; j += LJ_CPU_LANES)
        for (int k = 0; k < LJ_CPU_LANES; k++) lane[k] += (double)a[j + k] * (double)b[j + k];
    double s = 0.0;
    for (int k = 0; k < LJ_CPU_LANES; k++) s += lane[k];
    for (; j < n; j++) s += (double)a[j] * (double)b[j];
    return s;
}

/* ---- op implementations, grouped by file (see ops/ops.h for each contract) ---- */

/* embedding.c */
void lj_cpu_embedding_forward(void *out, const int32_t *ids, const void *wte, int N, int C);
void lj_cpu_embedding_backward(void *dwte, const void *dout, const int32_t *ids, int N, int C, void *workspace);
size_t lj_cpu_embedding_backward_workspace_bytes(int N);
/* rmsnorm.c: plain and fused with the residual add */
void lj_cpu_rmsnorm_forward(void *out, float *rstd, const void *x, const void *w, int N, int C, float eps);
void lj_cpu_rmsnorm_backward(void *dx, void *dw, const void *dout, const void *x, const void *w, const float *rstd,
                             int N, int C, lj_grad_mode dw_mode, void *workspace);
size_t lj_cpu_rmsnorm_backward_workspace_bytes(int N, int C);
void lj_cpu_residual_rmsnorm_forward(void *res_out, void *out, float *rstd, const void *res_in, const void *y,
                                     const void *w, int N, int C, float eps);
/* add.c */
void lj_cpu_add(void *out, const void *a, const void *b, int64_t n);
/* rope.c */
void lj_cpu_rope_forward(void *qkv, const float *cos, const float *sin, int B, int T, int nh, int nkv, int hd);
void lj_cpu_rope_backward(void *dqkv, const float *cos, const float *sin, int B, int T, int nh, int nkv, int hd);
void lj_cpu_rope_forward_pos(void *qkv, const float *cos, const float *sin, const int32_t *pos, int B, int T, int nh,
                             int nkv, int hd);
void lj_cpu_rope_backward_pos(void *dqkv, const float *cos, const float *sin, const int32_t *pos, int B, int T,
                              int nh, int nkv, int hd);
/* swiglu.c */
void lj_cpu_swiglu_forward(void *out, const void *gate_up, int N, int I);
void lj_cpu_swiglu_backward(void *dgate_up, const void *dout, const void *gate_up, int N, int I);
void lj_cpu_swiglu_forward_unfused(void *out, void *tmp, const void *gate_up, int N, int I);
void lj_cpu_swiglu_backward_unfused(void *dgate_up, void *tmp, const void *dout, const void *gate_up, int N, int I);

/* qknorm.c: QK-norm (plain and fused with RoPE) and the projection bias */
void lj_cpu_qk_norm_forward(void *out, float *rstd, const void *x, const void *w, int N, int nh, int nkv, int hd,
                            float eps);
void lj_cpu_qk_norm_backward(void *dx, void *dw, const void *dout, const void *x, const void *w, const float *rstd,
                             int N, int nh, int nkv, int hd, lj_grad_mode dw_mode, void *workspace);
size_t lj_cpu_qk_norm_backward_workspace_bytes(int N, int nh, int nkv, int hd);
void lj_cpu_qk_norm_rope_forward(void *out, float *rstd, const void *x, const void *w, const float *cos,
                                 const float *sin, int B, int T, int nh, int nkv, int hd, float eps);
void lj_cpu_qk_norm_rope_backward(void *dx, void *dw, const void *dout, const void *x, const void *w,
                                  const float *rstd, const float *cos, const float *sin, int B, int T, int nh, int nkv,
                                  int hd, lj_grad_mode dw_mode, void *workspace);
void lj_cpu_bias_add(void *x, const void *b, int N, int C);
void lj_cpu_bias_backward(void *db, const void *dout, int N, int C, lj_grad_mode dw_mode, void *workspace);
size_t lj_cpu_bias_backward_workspace_bytes(int N, int C);

/* matmul.c */
/* Row-major C[M,N] = alpha op(A) op(B) + beta C (op = transpose when trans_* is 1), OpenBLAS
 * sgemm split over lj_cpu_num_threads() OpenMP threads by rows or by 16-column blocks of C.
 * Must not be called from inside an OpenMP parallel region. */
void lj_cpu_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc);
/* Makes OpenBLAS single-threaded (lj_cpu_sgemm brings the threads); lj_ops_cpu() calls it. */
void lj_cpu_blas_init(void);
void lj_cpu_matmul_forward(void *out, const void *x, const void *w, int N, int IC, int OC);
void lj_cpu_matmul_backward(void *dx, void *dw, const void *dout, const void *x, const void *w, int N, int IC, int OC,
                            lj_grad_mode dx_mode, lj_grad_mode dw_mode);

/* fp8.c: the FP8 emulation (ops.h "FP8"), bit-exact in its codes, amaxes and scales. */
void lj_cpu_fp8_amax(float *amax, const void *x, int64_t n);
void lj_cpu_fp8_swiglu_quantize(void *h, int write_h, void *q, void *q_t, const void *gate_up, int N, int I,
                                lj_fp8_format fmt, const lj_fp8_scaling *sc);
void lj_cpu_fp8_swiglu_amax(float *amax, void *h, const void *gate_up, int N, int I);
void lj_cpu_fp8_rmsnorm_quantize(void *res_out, void *out, int write_out, float *rstd, void *q, void *q_t,
                                 const void *res_in, const void *y, const void *w, int N, int C, float eps,
                                 lj_fp8_format fmt, const lj_fp8_scaling *sc);
void lj_cpu_fp8_quantize(void *q, void *q_t, const void *x, int rows, int cols, lj_fp8_format fmt,
                         const lj_fp8_scaling *sc);
void lj_cpu_fp8_amax_f32(float *amax, const float *x, int64_t n, lj_dtype via);
void lj_cpu_fp8_quantize_f32(void *q, void *q_t, const float *x, int rows, int cols, lj_dtype via, lj_fp8_format fmt,
                             const lj_fp8_scaling *sc);
void lj_cpu_fp8_transpose(void *q_t, const void *q, int rows, int cols);
void lj_cpu_fp8_scale_update(float *amax_history, float *scale, float *scale_inv, int num, int history_len,
                             int num_first, float scaled_max_first, float scaled_max_rest, int algo_max);
void lj_cpu_fp8_matmul(void *out, lj_dtype out_dtype, const void *a, lj_fp8_format fa, const float *a_scale_inv,
                       const void *b, lj_fp8_format fb, const float *b_scale_inv, int M, int N, int K,
                       lj_grad_mode mode, void *workspace);
size_t lj_cpu_fp8_matmul_workspace_bytes(int M, int N, int K);
void lj_cpu_fp8_quantize_tiles(void *q, float *q_sinv, void *q_t, float *q_t_sinv, const void *x, int rows, int cols,
                               lj_fp8_format fmt, float *amax);
void lj_cpu_fp8_quantize_blocks(void *q, float *sinv, void *q_t, float *sinv_t, const void *x, int rows, int cols,
                                lj_fp8_format fmt, float *amax);
void lj_cpu_fp8_matmul_blockwise(void *out, lj_dtype out_dtype, const void *a, lj_fp8_format fa, const float *a_sinv,
                                 int a_blocks, const void *b, lj_fp8_format fb, const float *b_sinv, int b_blocks,
                                 int M, int N, int K, lj_grad_mode mode, void *workspace);

/* attention.c */
void lj_cpu_attention_forward(void *out, float *lse, const void *qkv, int B, int T, int nh, int nkv, int hd,
                              void *workspace);
void lj_cpu_attention_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse, int B,
                               int T, int nh, int nkv, int hd, void *workspace);
void lj_cpu_attention_forward_docs(void *out, float *lse, const void *qkv, const int32_t *doc_start, int B, int T,
                                   int nh, int nkv, int hd, void *workspace);
void lj_cpu_attention_backward_docs(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                                    const int32_t *doc_start, int B, int T, int nh, int nkv, int hd, void *workspace);
size_t lj_cpu_attention_workspace_bytes(int B, int T, int nh, int nkv, int hd);
void lj_cpu_attention_decode(void *out, void *kv_cache, const void *qkv, int p0, int Tq, int nh, int nkv, int hd);
/* paged.c */
/* One query row of one head against keys 0..n-1 of a KV cache (rows [k heads | v heads] of 2*KV
 * floats; kv head g): the online softmax (Milakov & Gimelshein 2018) in key order, shared by
 * attention_decode (table NULL: key j in row j) and paged_attention (key j in row
 * table[j / block_size] * block_size + j % block_size), so that both give the same bits.
 * od[hd] = softmax(q k^T * scale) v. */
void lj_cpu_attend_row(float *od, const float *q, const float *cache, const int32_t *table, int block_size, int n,
                       int KV, int g, int hd, float scale);
void lj_cpu_paged_kv_write(void *kv_cache, const void *qkv, const int32_t *slots, int N, int nh, int nkv, int hd);
void lj_cpu_paged_attention(void *out, const void *qkv, const void *kv_cache, const int32_t *block_tables,
                            const int32_t *seq, const int32_t *pos, int N, int max_blocks, int block_size, int nh,
                            int nkv, int hd);
void lj_cpu_argmax_rows(int32_t *out, const void *x, int M, int V);
void lj_cpu_paged_kv_write_fp8(void *kv_cache, const void *qkv, const int32_t *slots, int N, int nh, int nkv, int hd,
                               const float *k_scale, const float *v_scale);
void lj_cpu_paged_kv_round_fp8(void *qkv, int N, int nh, int nkv, int hd, const float *k_scale, const float *v_scale);
void lj_cpu_paged_attention_fp8(void *out, const void *qkv, const void *kv_cache, const int32_t *block_tables,
                                const int32_t *seq, const int32_t *pos, int N, int max_blocks, int block_size,
                                int nh, int nkv, int hd, const float *k_scale, const float *v_scale);
void lj_cpu_gather_rows(void *out, const void *x, const int32_t *rows, int M, int C);

/* cross_entropy.c */
void lj_cpu_cross_entropy_fused(float *losses, void *dx, void *dw, const void *x, const void *w,
                                const int32_t *targets, int N, int C, int V, float dloss, void *workspace);
size_t lj_cpu_cross_entropy_fused_workspace_bytes(int N, int C, int V);
void lj_cpu_cross_entropy_forward_backward(float *losses, void *dlogits, const void *logits, const int32_t *targets,
                                           int N, int V, float dloss);

/* adamw.c */

/* AdamW's clipping factor min(1, max_grad_norm / (||g|| + 1e-6)) from the squared global norm
 * (1 without clipping), and one element's step in PyTorch's order (lj_cpu_adamw_update's
 * comment): the moments m, v and the master p updated in place from the clipped gradient g. The
 * CPU backend and the host half of optimizer offload share them, so both give the same floats. */
static inline float lj_cpu_adamw_clip(const lj_adamw_hparams *hp, const float *grad_norm_sq) {
    if (hp->max_grad_norm <= 0.0f) return 1.0f;
    const float c = hp->max_grad_norm / (sqrtf(grad_norm_sq[0]) + 1e-6f);
    return c < 1.0f ? c : 1.0f;
}
static inline float lj_cpu_adamw_element(float *p, float *m, float *v, float g, float b1, float b2, float eps,
                                         float decay, float step_size, float bc2_sqrt) {
    const float mi = b1 * *m + (1.0f - b1) * g;
    const float vi = b2 * *v + (1.0f - b2) * g * g;
    *m = mi;
    *v = vi;
    *p = *p * decay - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
    return *p;
}

void lj_cpu_global_norm_sq(float *out, const void *grad, int64_t n, void *workspace);
size_t lj_cpu_global_norm_workspace_bytes(int64_t n);
void lj_cpu_adamw_update(void *params, float *master, const void *grad, void *m, void *v,
                         const lj_adamw_segment *segments, int num_segments, const lj_adamw_hparams *hp,
                         const float *step_scalars, const float *grad_norm_sq);

#endif
