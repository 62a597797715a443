/* op_cases.h: the op harness's case table (op_cases.c) and the case functions it points to
 * (the cases written once for every backend, case.h; of one backend: cases_cpu.c, the CPU's
 * building blocks and the FP8 codec; perf_cuda.cu,
 * CUDA timings at the benchmark shapes). tests/ops/README.md says how to add one. */
#ifndef LJ_TESTS_OPS_OP_CASES_H
#define LJ_TESTS_OPS_OP_CASES_H

#include "tests/ops/harness.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lj_op_case lj_op_case;

/* Runs case c in `mode` (one of the bits of c->modes) on the backend the case names. */
typedef void (*lj_op_case_fn)(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);

struct lj_op_case {
    const char *op;          /* the op (or op family) exercised; --op NAME selects cases by it */
    const char *backend;     /* "cpu" or "cuda" */
    int modes;               /* lj_harness_mode bits the case runs in */
    lj_dtype dtype;          /* cpu: F32 (every tensor); cuda: the gradient dtype of the CUDA table
                              * the case runs on (act and params are bf16) */
    int d[6];                /* the shape; what each entry means is said beside the case function */
    double param;            /* one scalar of the case (a clip norm, a beta), else 0 */
    lj_harness_tol tol;      /* the op's outputs */
    lj_harness_tol tol_grad; /* gradients: against finite differences (cpu), weight gradients (cuda) */
    int quick;               /* part of --quick (small shapes, for compute-sanitizer) */
    lj_op_case_fn fn;
};

extern const lj_op_case lj_op_cases[];
extern const int lj_op_num_cases;

/* Runs the cases of `backend` ("cpu" or "cuda") in the mode named by argv (check, grad, perf;
 * default check); options --quick, --op NAME, --verbose. Returns the exit status (0: every
 * check passed; 1: a check failed; 2: bad arguments or no such backend). */
int lj_op_cases_main(int argc, char **argv, const char *program, const char *backend);

/* ---- case functions ---- */

/* Written once for every backend (case.h: the rows of backend "cpu" and "cuda" point to the same
 * function), one file per op family: cases_embedding.c, cases_rmsnorm.c (RMSNorm, the fused
 * residual form, add), cases_matmul.c, cases_rope.c (by sequence and by per-token positions),
 * cases_qknorm.c (Qwen3's QK-norm, plain and fused with RoPE), cases_bias.c (the projection
 * bias), cases_swiglu.c (fused and unfused), cases_global_norm.c, cases_argmax.c (the greedy
 * token of each row), cases_cross_entropy.c (over full logits and fused with the lm_head),
 * cases_attention.c (plain per kernel family, its first run captured, within documents, KV-cache
 * decoding, over packed segments), cases_paged.c (serving's paged ops; over an FP8 cache: cases_paged_fp8.c, below),
 * cases_fp8.c (the casts, the history update, the casts fused into the SwiGLU and the RMSNorm, the
 * per-tensor and blockwise GEMMs), cases_memory.c (the memory entries, the casts), cases_graph.c (a captured
 * step). */
void lj_case_embedding(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_rmsnorm(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_matmul(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_rope(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_rope_pos(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_qk_norm(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_bias(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_swiglu(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_global_norm(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_adamw(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_argmax_rows(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cross_entropy(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cross_entropy_fused(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_attention(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_attention_captured(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_attention_docs(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_attention_decode(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_attention_varlen(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_paged_attention(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_fp8_quantize(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_fp8_quantize_f32(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_fp8_transpose(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_fp8_scale_update(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_fp8_swiglu(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_fp8_rmsnorm(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_fp8_matmul(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_fp8_blockwise_cast(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_fp8_blockwise_matmul(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_memory(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cast(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_graph(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);

/* Of one backend: the CPU's building blocks and the FP8 codec (cases_cpu.c). */

void lj_case_cpu_sgemm(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cpu_expf(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cpu_lane_reductions(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cpu_sgemm_probe(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cpu_thread_count(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cpu_fp8_format(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);

#ifdef LJ_HAVE_CUDA
/* perf_cuda.cu */
void lj_case_cuda_perf_matmul(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cuda_perf_attention(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cuda_perf_attention_docs(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cuda_perf_attention_varlen(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cuda_perf_fp8_matmul(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cuda_perf_fp8_blockwise(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cuda_perf_rmsnorm(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cuda_perf_cross_entropy(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cuda_perf_swiglu(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cuda_perf_rope(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cuda_perf_embedding(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cuda_perf_optimizer(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
void lj_case_cuda_perf_paged_attention(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);
#endif

/* cases_paged_fp8.c (written once for every backend): serving's FP8 KV cache. */
void lj_case_paged_attention_fp8(lj_harness *h, const lj_op_case *c, lj_harness_mode mode);

#ifdef __cplusplus
}
#endif

#endif
