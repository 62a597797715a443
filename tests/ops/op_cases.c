/* op_cases.c: the op harness's one table of cases, shared by the CPU test (test_ops, run by
 * CTest) and the GPU program (test_ops_cuda). A row names the op, the backend, the modes it runs
 * in, the dtype, the shape d[] (its meaning is said beside the case function), one scalar, the
 * tolerances of the outputs and of the gradients, whether it is part of --quick, and the case
 * function. tests/ops/README.md says how to add a row. */
#include "tests/ops/op_cases.h"

#define CHECK LJ_HARNESS_CHECK
#define GRAD LJ_HARNESS_GRAD
#define PERF LJ_HARNESS_PERF
#define F32 LJ_DTYPE_F32
#define BF16 LJ_DTYPE_BF16

/* CPU: fp32 forward values against the double reference; analytic gradients against finite
 * differences of the double reference. */
#define CPU_FWD {1e-5, -1, 0}
#define CPU_GRAD {1e-4, -1, 0}
#define L2(x) {x, -1, 0}
/* CUDA against the CPU backend: bf16 outputs (2^-9 relative rounding per element) */
#define GPU_BF16 {1e-2, 2e-2, 1e-5}
#define NONE {0, -1, 0}

#ifdef LJ_HAVE_CUDA
#define CUDA(fn) fn
#else
#define CUDA(fn) NULL /* rows of the CUDA backend are skipped in a build without it */
#endif

/* One row per grad dtype for the CUDA ops that read or write weight gradients: `wgrad_f32` is
 * the weight-gradient tolerance with fp32 gradients (with bf16 ones it is bf16 rounding). */
#define CUDA_BOTH(op, d, param, wgrad_f32, quick, fn)                                 \
    {op, "cuda", CHECK, F32, d, param, GPU_BF16, wgrad_f32, quick, CUDA(fn)},      \
    {op, "cuda", CHECK, BF16, d, param, GPU_BF16, GPU_BF16, quick, CUDA(fn)}
#define CUDA_ONE(op, d, param, quick, fn) {op, "cuda", CHECK, BF16, d, param, GPU_BF16, GPU_BF16, quick, CUDA(fn)}
#define CUDA_PERF(op, d, fn) {op, "cuda", PERF, BF16, d, 0, NONE, NONE, 0, CUDA(fn)}
#define D(...) {__VA_ARGS__}

const lj_op_case lj_op_cases[] = {
    /* ---- CPU backend against double references and finite differences ---- */
    {"memory", "cpu", CHECK, F32, D(0), 0, NONE, NONE, 1, lj_case_memory},
    /* the casts: d = {n} */
    {"cast", "cpu", CHECK, F32, D(1), 0, NONE, NONE, 1, lj_case_cast},
    {"cast", "cpu", CHECK, F32, D(1000), 0, NONE, NONE, 1, lj_case_cast},
    /* C spans two column blocks; ids repeat (below V) */
    {"embedding", "cpu", CHECK, F32, D(9, 70, 6), 0, NONE, L2(1e-6), 1, lj_case_embedding},
    /* RMSNorm, its backward, the fused residual form and add (d = {N, C}, param eps) */
    {"rmsnorm", "cpu", CHECK | GRAD, F32, D(5, 16), 1e-5, CPU_FWD, CPU_GRAD, 1, lj_case_rmsnorm},
    /* two column blocks, an odd tail */
    {"rmsnorm", "cpu", CHECK | GRAD, F32, D(3, 77), 1e-5, CPU_FWD, CPU_GRAD, 1, lj_case_rmsnorm},
    {"residual_rmsnorm", "cpu", CHECK, F32, D(13, 96), 0, CPU_FWD, CPU_GRAD, 1, lj_case_rmsnorm},
    {"matmul", "cpu", CHECK | GRAD, F32, D(7, 12, 9), 0, CPU_FWD, CPU_GRAD, 1, lj_case_matmul},
    /* starts at position 3, as generation does */
    {"rope", "cpu", CHECK, F32, D(2, 11, 4, 2, 16, 3), 10000.0, L2(1e-6), NONE, 1, lj_case_rope},
    /* QK-norm (Qwen3), plain and fused with RoPE: d = {B, T, nh, nkv, hd}, param eps; GQA, and
     * Qwen3's head_dim 128; the projection bias (Qwen2): d = {N, C} */
    {"qk_norm", "cpu", CHECK | GRAD, F32, D(2, 5, 4, 2, 16), 1e-6, CPU_FWD, CPU_GRAD, 1, lj_case_qk_norm},
    {"qk_norm", "cpu", CHECK | GRAD, F32, D(1, 3, 2, 1, 128), 1e-6, CPU_FWD, CPU_GRAD, 1, lj_case_qk_norm},
    {"bias", "cpu", CHECK, F32, D(13, 150), 0, NONE, L2(1e-6), 1, lj_case_bias},
    {"swiglu", "cpu", CHECK | GRAD, F32, D(6, 19), 0, CPU_FWD, CPU_GRAD, 1, lj_case_swiglu},
    /* the cross-entropy over full logits: d = {N, V} */
    {"cross_entropy", "cpu", CHECK | GRAD, F32, D(6, 23), 0, CPU_FWD, CPU_GRAD, 1, lj_case_cross_entropy},
    {"cross_entropy", "cpu", CHECK, F32, D(37, 301), 0, CPU_FWD, CPU_GRAD, 1, lj_case_cross_entropy},
    /* fused with the lm_head: d = {N, C, V, targets}; fixed targets, one ignored */
    {"cross_entropy_fused", "cpu", CHECK | GRAD, F32, D(6, 8, 23, 0), 0, CPU_FWD, CPU_GRAD, 1,
     lj_case_cross_entropy_fused},
    /* more rows than one chunk of the fused op (LJ_CPU_CE_CHUNK_ROWS + 45) */
    {"cross_entropy_fused", "cpu", CHECK, F32, D(256 + 45, 16, 300, 1), 0, CPU_FWD, NONE, 1,
     lj_case_cross_entropy_fused},
    /* 3 * LJ_CPU_NORM_CHUNK + 17 */
    {"global_norm", "cpu", CHECK, F32, D(3 * 65536 + 17), 0, NONE, NONE, 1, lj_case_global_norm},
    /* greedy decoding: d = {M rows, V} */
    {"argmax_rows", "cpu", CHECK, F32, D(6, 37), 0, NONE, NONE, 1, lj_case_argmax_rows},
    {"argmax_rows", "cpu", CHECK, F32, D(5, 4099), 0, NONE, NONE, 1, lj_case_argmax_rows},
    /* d = {params != master, clipping expected, lr groups}, param = max_grad_norm; tol: master
     * and m, tol_grad: v */
    /* AdamW: d = {n, lr groups, clipping expected, variant (0: three steps against the reference;
     * 1: an inactive clip; 2: the lr groups), params aliased to master}, param = max_grad_norm */
    {"adamw", "cpu", CHECK, F32, D(1000, 1, 0, 0, 1), 0.0, L2(1e-6), L2(1e-5), 1, lj_case_adamw},   /* no clipping */
    {"adamw", "cpu", CHECK, F32, D(1000, 1, 0, 0, 1), 100.0, L2(1e-6), L2(1e-5), 1, lj_case_adamw}, /* inactive */
    {"adamw", "cpu", CHECK, F32, D(1000, 1, 1, 0, 0), 0.5, L2(1e-6), L2(1e-5), 1, lj_case_adamw},   /* active; a copy */
    {"adamw", "cpu", CHECK, F32, D(1000, 2, 1, 0, 0), 0.5, L2(1e-6), L2(1e-5), 1, lj_case_adamw},   /* two lr groups */
    {"adamw", "cpu", CHECK, F32, D(257, 1, 0, 1), 0, NONE, NONE, 1, lj_case_adamw},
    {"adamw", "cpu", CHECK, F32, D(301, 2, 0, 2), 0, NONE, NONE, 1, lj_case_adamw},
    {"adamw", "cpu", CHECK, F32, D(1001, 1, 0, 3), 0, NONE, NONE, 1, lj_case_adamw},
    {"adamw", "cpu", CHECK, F32, D(1003, 1, 0, 4), 0, NONE, NONE, 1, lj_case_adamw},
    {"attention", "cpu", CHECK | GRAD, F32, D(2, 7, 4, 2, 8), 0, CPU_FWD, CPU_GRAD, 1, lj_case_attention},  /* GQA 2:1, odd T */
    {"attention", "cpu", CHECK | GRAD, F32, D(2, 5, 4, 1, 8), 0, CPU_FWD, CPU_GRAD, 1, lj_case_attention},  /* 4 q heads per kv */
    {"attention", "cpu", CHECK | GRAD, F32, D(1, 13, 2, 2, 16), 0, CPU_FWD, CPU_GRAD, 1, lj_case_attention}, /* nh == nkv */
    {"attention", "cpu", CHECK | GRAD, F32, D(3, 1, 2, 1, 8), 0, CPU_FWD, CPU_GRAD, 1, lj_case_attention},  /* T = 1 */
    /* the first run of a shape captured (the CPU has no graphs: eager) */
    {"attention", "cpu", CHECK | GRAD, F32, D(1, 6, 2, 1, 8), 0, CPU_FWD, CPU_GRAD, 1, lj_case_attention_captured},
    /* KV-cache decoding: d = {p0, Tq, Tmax, nh, nkv, hd}; 4 rows at position 5 (and a prefill of 5
     * tokens, then 4 single-token steps) */
    {"attention_decode", "cpu", CHECK, F32, D(5, 4, 12, 4, 2, 16), 0, CPU_FWD, NONE, 1, lj_case_attention_decode},
    /* serving's paged KV cache: {S sequences, T, nh, nkv, hd, decode} (lengths T, 2T+1, ...), param
     * the block size */
    {"paged_attention", "cpu", CHECK, F32, D(3, 7, 4, 2, 8, 0), 4, CPU_FWD, NONE, 1, lj_case_paged_attention},
    {"paged_attention", "cpu", CHECK, F32, D(2, 20, 4, 1, 16, 0), 16, CPU_FWD, NONE, 1, lj_case_paged_attention},
    {"paged_attention", "cpu", CHECK, F32, D(3, 7, 4, 2, 8, 1), 4, CPU_FWD, NONE, 1, lj_case_paged_attention},
    /* the FP8 cache: {S, T, nh, nkv, hd, decode}, param k_scale (v_scale half of it): vLLM's default 1.0,
     * and a smaller scale that moves the values up the E4M3 range */
    {"paged_attention_fp8", "cpu", CHECK, F32, D(3, 7, 4, 2, 8, 0), 1.0, CPU_FWD, NONE, 1, lj_case_paged_attention_fp8},
    {"paged_attention_fp8", "cpu", CHECK, F32, D(2, 20, 4, 1, 16, 1), 0.0625, CPU_FWD, NONE, 1,
     lj_case_paged_attention_fp8},
    /* within documents (--reset-attention-mask): EODs about every d[5] tokens; GQA, one-token documents */
    {"attention_docs", "cpu", CHECK | GRAD, F32, D(2, 11, 4, 2, 8, 4), 0, CPU_FWD, CPU_GRAD, 1, lj_case_attention_docs},
    {"attention_docs", "cpu", CHECK | GRAD, F32, D(1, 17, 4, 1, 8, 2), 0, CPU_FWD, CPU_GRAD, 1, lj_case_attention_docs},
    {"attention_docs", "cpu", CHECK, F32, D(3, 64, 2, 2, 16, 9), 0, CPU_FWD, CPU_GRAD, 1, lj_case_attention_docs},
    /* bidirectional attention over packed segments (the vision tower): d = {segments (cases_attention.c
     * varlen_patterns), nh, nkv, hd, kind}; GQA 2:1 and 4:1, one-row and empty segments, one past a tile */
    {"attention_varlen", "cpu", CHECK | GRAD, F32, D(0, 4, 2, 8, 0), 0, CPU_FWD, CPU_GRAD, 1, lj_case_attention_varlen},
    {"attention_varlen", "cpu", CHECK | GRAD, F32, D(1, 4, 1, 8, 0), 0, CPU_FWD, CPU_GRAD, 1, lj_case_attention_varlen},
    {"attention_varlen", "cpu", CHECK, F32, D(2, 2, 2, 16, 0), 0, CPU_FWD, CPU_GRAD, 1, lj_case_attention_varlen},
    {"attention_varlen", "cpu", CHECK, F32, D(8, 2, 1, 8, 0), 0, CPU_FWD, CPU_GRAD, 1, lj_case_attention_varlen},
    /* RoPE by per-token positions (--reset-position-ids) */
    {"rope_pos", "cpu", CHECK, F32, D(2, 23, 4, 2, 16, 5), 10000.0, L2(1e-6), NONE, 1, lj_case_rope_pos},
    /* the CPU building blocks; sgemm tol is per sqrt(K) */
    {"sgemm", "cpu", CHECK, F32, D(203, 37, 61), 0.0, L2(2e-7), NONE, 1, lj_case_cpu_sgemm},  /* split by rows */
    {"sgemm", "cpu", CHECK, F32, D(19, 333, 50), 1.0, L2(2e-7), NONE, 1, lj_case_cpu_sgemm},  /* 16-column blocks, odd tail */
    {"sgemm", "cpu", CHECK, F32, D(5, 7, 3), 1.0, L2(2e-7), NONE, 1, lj_case_cpu_sgemm},      /* below the split threshold */
    {"sgemm", "cpu", CHECK, F32, D(2, 40, 4000), 0.0, L2(2e-7), NONE, 1, lj_case_cpu_sgemm},  /* long K, 3 column blocks */
    {"expf", "cpu", CHECK, F32, D(0), 0, NONE, NONE, 1, lj_case_cpu_expf},
    {"lane_reductions", "cpu", CHECK, F32, D(1000 + 7), 0, NONE, NONE, 1, lj_case_cpu_lane_reductions},
    {"sgemm_probe", "cpu", CHECK, F32, D(128), 0, NONE, NONE, 1, lj_case_cpu_sgemm_probe},
    /* a captured chain shaped like one layer's step (the CPU has no graphs: the chain run again) */
    {"cuda_graph", "cpu", CHECK, F32, D(0), 0, NONE, NONE, 1, lj_case_graph},
    {"thread_count", "cpu", CHECK, F32, D(2, 19, 4, 2, 16), 0, NONE, NONE, 1, lj_case_cpu_thread_count},
    /* FP8: the codec of base/fp8.h (d = {random values}); the ops: fp8_quantize d = {rows, cols, all
     * bf16 patterns}, fp8_scale_update {tensors, history, margin}, fp8_swiglu {N, I}, fp8_rmsnorm
     * {N, C}, fp8_matmul {M, N, K, a in e5m2}: tol against the decoded product, tol_grad against the unquantized one:
     * E4M3 codes are within 2^-4 relative, E5M2 within 2^-3, so a product of random values is
     * within about 0.05 (e4m3 x e4m3) and 0.08 (e5m2 x e4m3) relative L2 */
    {"fp8_format", "cpu", CHECK, F32, D(20000), 0, NONE, NONE, 1, lj_case_cpu_fp8_format},
    {"fp8_quantize", "cpu", CHECK, F32, D(37, 53), 0, NONE, NONE, 1, lj_case_fp8_quantize},
    {"fp8_quantize", "cpu", CHECK, F32, D(1, 16), 0, NONE, NONE, 1, lj_case_fp8_quantize},
    {"fp8_quantize", "cpu", CHECK, F32, D(256, 256, 1), 0, NONE, NONE, 1, lj_case_fp8_quantize},
    {"fp8_quantize_f32", "cpu", CHECK, F32, D(37, 53), 0, NONE, NONE, 1, lj_case_fp8_quantize_f32},
    {"fp8_quantize_f32", "cpu", CHECK, F32, D(64, 136), 0, NONE, NONE, 1, lj_case_fp8_quantize_f32},
    {"fp8_transpose", "cpu", CHECK, F32, D(37, 53), 0, NONE, NONE, 1, lj_case_fp8_transpose},
    {"fp8_transpose", "cpu", CHECK, F32, D(128, 64), 0, NONE, NONE, 1, lj_case_fp8_transpose},
    {"fp8_scale_update", "cpu", CHECK, F32, D(9, 5, 0), 0, NONE, NONE, 1, lj_case_fp8_scale_update},
    {"fp8_scale_update", "cpu", CHECK, F32, D(7, 1, 2), 0, NONE, NONE, 1, lj_case_fp8_scale_update},
    {"fp8_swiglu", "cpu", CHECK, F32, D(37, 56), 0, NONE, NONE, 1, lj_case_fp8_swiglu},
    {"fp8_swiglu", "cpu", CHECK, F32, D(37, 53), 0, NONE, NONE, 1, lj_case_fp8_swiglu},
    {"fp8_rmsnorm", "cpu", CHECK, F32, D(37, 56), 0, NONE, NONE, 1, lj_case_fp8_rmsnorm},
    {"fp8_rmsnorm", "cpu", CHECK, F32, D(3, 77), 0, NONE, NONE, 1, lj_case_fp8_rmsnorm},
    {"fp8_matmul", "cpu", CHECK, F32, D(37, 24, 53, 0), 0, L2(1e-6), L2(0.05), 1, lj_case_fp8_matmul},
    {"fp8_matmul", "cpu", CHECK, F32, D(17, 40, 200, 1), 0, L2(1e-6), L2(0.08), 1, lj_case_fp8_matmul},
    /* the blockwise recipe: the casts d = {rows, cols}, partial 1x128 tiles and 128x128 blocks; the
     * GEMM {M, N, K, a in e5m2, b in 128x128 blocks} */
    {"fp8_blockwise_cast", "cpu", CHECK, F32, D(200, 300), 0, NONE, NONE, 1, lj_case_fp8_blockwise_cast},
    {"fp8_blockwise_cast", "cpu", CHECK, F32, D(5, 16), 0, NONE, NONE, 1, lj_case_fp8_blockwise_cast},
    {"fp8_blockwise_matmul", "cpu", CHECK, F32, D(36, 24, 53, 0, 1), 0, L2(1e-6), L2(0.06), 1,
     lj_case_fp8_blockwise_matmul},
    {"fp8_blockwise_matmul", "cpu", CHECK, F32, D(48, 64, 200, 1, 0), 0, L2(1e-6), L2(0.09), 1,
     lj_case_fp8_blockwise_matmul},

    /* ---- CUDA backend against the CPU backend ---- */
    /* FP8: the casts and the history update bit for bit against the CPU emulation; the GEMM
     * against the emulation (bf16 output rounding) and the bf16 GEMM (the formats' rounding, as
     * the CPU rows state); N a multiple of 8 (16-byte output rows), K and M not of 16 */
    /* every bf16 bit pattern at four scales; random tensors of odd shapes (the second takes the
     * vector kernels: cols a multiple of 8, rows not of the tile) */
    CUDA_ONE("fp8_quantize", D(256, 256, 1), 0, 1, lj_case_fp8_quantize),
    CUDA_ONE("fp8_quantize", D(37, 53), 0, 1, lj_case_fp8_quantize),
    CUDA_ONE("fp8_quantize", D(100, 136), 0, 1, lj_case_fp8_quantize),
    /* the cast fused into the SwiGLU against the SwiGLU and the cast (partial tiles; I = 53: the
     * unfused fallback) */
    CUDA_ONE("fp8_swiglu", D(300, 200), 0, 1, lj_case_fp8_swiglu),
    CUDA_ONE("fp8_swiglu", D(37, 56), 0, 1, lj_case_fp8_swiglu),
    CUDA_ONE("fp8_swiglu", D(37, 53), 0, 1, lj_case_fp8_swiglu),
    CUDA_ONE("fp8_swiglu", D(1, 8), 0, 1, lj_case_fp8_swiglu),
    CUDA_ONE("fp8_swiglu", D(4096, 1792), 0, 0, lj_case_fp8_swiglu),
    /* the cast fused into the RMSNorm against the norm and the cast: a few rows (current scaling in
     * one block: a decode batch, 8B's hidden size up to its limit of 65,536 elements), partial row
     * blocks and 16-byte q_t runs (N = 300, 40, 100), a full last block (64), the fallbacks (C = 53
     * not a multiple of 8, 8192 wider than the codes tile), the 1b's shape */
    CUDA_ONE("fp8_rmsnorm", D(37, 200), 0, 1, lj_case_fp8_rmsnorm),
    CUDA_ONE("fp8_rmsnorm", D(1, 4096), 0, 1, lj_case_fp8_rmsnorm),
    CUDA_ONE("fp8_rmsnorm", D(16, 4096), 0, 1, lj_case_fp8_rmsnorm),
    CUDA_ONE("fp8_rmsnorm", D(300, 136), 0, 1, lj_case_fp8_rmsnorm),
    CUDA_ONE("fp8_rmsnorm", D(40, 1024), 0, 1, lj_case_fp8_rmsnorm),
    CUDA_ONE("fp8_rmsnorm", D(64, 1024), 0, 1, lj_case_fp8_rmsnorm),
    CUDA_ONE("fp8_rmsnorm", D(100, 2048), 0, 1, lj_case_fp8_rmsnorm),
    CUDA_ONE("fp8_rmsnorm", D(37, 53), 0, 1, lj_case_fp8_rmsnorm),
    CUDA_ONE("fp8_rmsnorm", D(70, 8192), 0, 0, lj_case_fp8_rmsnorm),
    CUDA_ONE("fp8_rmsnorm", D(4096, 2048), 0, 0, lj_case_fp8_rmsnorm),
    /* the transpose of kept codes: partial tiles, and full 64 x 64 ones */
    CUDA_ONE("fp8_quantize_f32", D(37, 53), 0, 1, lj_case_fp8_quantize_f32),
    CUDA_ONE("fp8_quantize_f32", D(100, 136), 0, 1, lj_case_fp8_quantize_f32),
    CUDA_ONE("fp8_quantize_f32", D(2048, 3072), 0, 0, lj_case_fp8_quantize_f32),
    CUDA_ONE("fp8_transpose", D(37, 53), 0, 1, lj_case_fp8_transpose),
    CUDA_ONE("fp8_transpose", D(200, 336), 0, 1, lj_case_fp8_transpose),
    CUDA_ONE("fp8_transpose", D(1024, 2048), 0, 0, lj_case_fp8_transpose),
    CUDA_ONE("fp8_scale_update", D(301, 16, 1), 0, 1, lj_case_fp8_scale_update),
    CUDA_ONE("fp8_scale_update", D(97, 1, 1), 0, 1, lj_case_fp8_scale_update),
#define CUDA_FP8_MM(d, vs_bf16, quick)                                                                            \
    {"fp8_matmul", "cuda", CHECK, F32, d, 0, GPU_BF16, vs_bf16, quick, CUDA(lj_case_fp8_matmul)},                 \
    {"fp8_matmul", "cuda", CHECK, BF16, d, 0, GPU_BF16, vs_bf16, quick, CUDA(lj_case_fp8_matmul)}
    CUDA_FP8_MM(D(37, 24, 53, 0), L2(0.06), 1),
    CUDA_FP8_MM(D(64, 48, 200, 1), L2(0.09), 1),
    CUDA_FP8_MM(D(1000, 256, 1024, 0), L2(0.06), 0),
    CUDA_FP8_MM(D(333, 512, 2000, 1), L2(0.09), 0),
    /* serving's decode batches (--quantization fp8): a few rows, Llama 3.1 8B's QKV */
    CUDA_FP8_MM(D(3, 256, 1024, 0), L2(0.06), 1),
    CUDA_FP8_MM(D(1, 6144, 4096, 0), L2(0.06), 0),
    /* the blockwise recipe: the casts bit for bit (rows, cols not multiples of 128); the GEMM
     * {M, N, K, a e5m2, b in 128x128 blocks}: 1x128 x 128x128 (forward, dgrad) and 1x128 x 1x128
     * (wgrad), K not a multiple of 128 (nor of 16); M and N multiples of 4, as cuBLASLt's block
     * scales need (lj_cli_fp8_check_tokens) */
    CUDA_ONE("fp8_blockwise_cast", D(200, 300), 0, 1, lj_case_fp8_blockwise_cast),
    CUDA_ONE("fp8_blockwise_cast", D(37, 53), 0, 1, lj_case_fp8_blockwise_cast),
    CUDA_ONE("fp8_blockwise_cast", D(1000, 2048), 0, 0, lj_case_fp8_blockwise_cast),
#define CUDA_FP8_BW(d, vs_bf16, quick)                                                                            \
    {"fp8_blockwise_matmul", "cuda", CHECK, F32, d, 0, GPU_BF16, vs_bf16, quick,                                  \
     CUDA(lj_case_fp8_blockwise_matmul)},                                                                         \
    {"fp8_blockwise_matmul", "cuda", CHECK, BF16, d, 0, GPU_BF16, vs_bf16, quick,                                 \
     CUDA(lj_case_fp8_blockwise_matmul)}
    CUDA_FP8_BW(D(64, 48, 200, 0, 1), L2(0.06), 1),
    CUDA_FP8_BW(D(64, 48, 200, 1, 1), L2(0.09), 1),
    CUDA_FP8_BW(D(48, 64, 200, 1, 0), L2(0.09), 1),
    CUDA_FP8_BW(D(36, 24, 53, 0, 1), L2(0.06), 1),
    CUDA_FP8_BW(D(1000, 256, 1000, 1, 1), L2(0.09), 0),
    CUDA_FP8_BW(D(512, 384, 2000, 1, 0), L2(0.09), 0),
    CUDA_ONE("memory", D(0), 0, 1, lj_case_memory),
    CUDA_ONE("cast", D(1), 0, 1, lj_case_cast),
    CUDA_ONE("cast", D(1000), 0, 1, lj_case_cast),
    CUDA_ONE("cast", D(1 << 20), 0, 0, lj_case_cast),
    CUDA_BOTH("embedding", D(1, 64, 10), 0, D(1e-6, 1e-5, 1e-5), 1, lj_case_embedding),
    CUDA_BOTH("embedding", D(37, 200, 300), 0, D(1e-6, 1e-5, 1e-5), 1, lj_case_embedding),
    CUDA_BOTH("embedding", D(64, 13, 50), 0, D(1e-6, 1e-5, 1e-5), 1, lj_case_embedding),
    CUDA_BOTH("embedding", D(512, 2048, 4096), 0, D(1e-6, 1e-5, 1e-5), 0, lj_case_embedding),
    CUDA_BOTH("embedding", D(4096, 2048, 128256), 0, D(1e-6, 1e-5, 1e-5), 0, lj_case_embedding),
    CUDA_BOTH("rmsnorm", D(1, 64), 1e-5, GPU_BF16, 1, lj_case_rmsnorm),
    CUDA_BOTH("rmsnorm", D(37, 200), 1e-5, GPU_BF16, 1, lj_case_rmsnorm),
    CUDA_BOTH("rmsnorm", D(5, 13), 1e-5, GPU_BF16, 1, lj_case_rmsnorm),
    CUDA_BOTH("rmsnorm", D(300, 100), 1e-5, GPU_BF16, 1, lj_case_rmsnorm),
    CUDA_BOTH("rmsnorm", D(256, 2048), 1e-5, GPU_BF16, 0, lj_case_rmsnorm),
    CUDA_BOTH("rmsnorm", D(64, 8192), 1e-5, GPU_BF16, 0, lj_case_rmsnorm),
    CUDA_BOTH("rmsnorm", D(1000, 3000), 1e-5, GPU_BF16, 0, lj_case_rmsnorm),
    CUDA_BOTH("matmul", D(1, 64, 32), 0, D(1e-3, 1e-3, 1e-5), 1, lj_case_matmul),
    CUDA_BOTH("matmul", D(37, 200, 72), 0, D(1e-3, 1e-3, 1e-5), 1, lj_case_matmul),
    CUDA_BOTH("matmul", D(100, 37, 53), 0, D(1e-3, 1e-3, 1e-5), 1, lj_case_matmul),
    CUDA_BOTH("matmul", D(7, 1, 9), 0, D(1e-3, 1e-3, 1e-5), 1, lj_case_matmul),
    CUDA_BOTH("matmul", D(128, 256, 512), 0, D(1e-3, 1e-3, 1e-5), 0, lj_case_matmul),
    CUDA_BOTH("matmul", D(512, 2048, 1536), 0, D(1e-3, 1e-3, 1e-5), 0, lj_case_matmul),
    /* random targets (d[3] = 1) */
    CUDA_BOTH("cross_entropy_fused", D(37, 64, 1000, 1), 0, GPU_BF16, 1, lj_case_cross_entropy_fused),
    CUDA_BOTH("cross_entropy_fused", D(300, 128, 5003, 1), 0, GPU_BF16, 0, lj_case_cross_entropy_fused),
    /* two chunks of rows */
    CUDA_BOTH("cross_entropy_fused", D(4500, 32, 128256, 1), 0, GPU_BF16, 0, lj_case_cross_entropy_fused),
    CUDA_BOTH("global_norm", D(1), 0, GPU_BF16, 1, lj_case_global_norm),
    CUDA_BOTH("global_norm", D(1000), 0, GPU_BF16, 1, lj_case_global_norm),
    CUDA_BOTH("global_norm", D(12345677), 0, GPU_BF16, 0, lj_case_global_norm),
    /* d = {n, lr groups (2: alternating segments in group 1 at their own lr, and the update
     * captured in a graph and replayed)} */
    CUDA_BOTH("adamw", D(10000, 1, 1), 1.0, GPU_BF16, 1, lj_case_adamw),
    CUDA_BOTH("adamw", D(100000, 1, 0), 1e6, GPU_BF16, 1, lj_case_adamw),
    CUDA_BOTH("adamw", D(100000, 2, 1), 1.0, GPU_BF16, 1, lj_case_adamw),
    CUDA_BOTH("adamw", D(3000000, 1, 0), 0.0, GPU_BF16, 0, lj_case_adamw),
    CUDA_ONE("adamw", D(257, 1, 0, 1), 0, 1, lj_case_adamw),
    CUDA_ONE("adamw", D(301, 2, 0, 2), 0, 1, lj_case_adamw),
    CUDA_ONE("adamw", D(1001, 1, 0, 3), 0, 1, lj_case_adamw),
    CUDA_ONE("adamw", D(100003, 1, 0, 3), 0, 1, lj_case_adamw),
    CUDA_ONE("adamw", D(100003, 1, 0, 4), 0, 1, lj_case_adamw),
    CUDA_BOTH("cuda_graph", D(0), 0, GPU_BF16, 1, lj_case_graph),
    /* QK-norm plain and fused with RoPE (Qwen3: head_dim 128, 16/8 heads as qwen3-0.6b/1.7b), and
     * the q/k/v bias (qwen2.5-0.5b's QKV width 1152) */
    CUDA_BOTH("qk_norm", D(1, 1, 2, 1, 16), 0, GPU_BF16, 1, lj_case_qk_norm),
    CUDA_BOTH("qk_norm", D(2, 37, 4, 2, 64), 0, GPU_BF16, 1, lj_case_qk_norm),
    CUDA_BOTH("qk_norm", D(2, 5, 6, 3, 10), 0, GPU_BF16, 1, lj_case_qk_norm),
    CUDA_BOTH("qk_norm", D(1, 300, 16, 8, 128), 0, GPU_BF16, 0, lj_case_qk_norm),
    CUDA_BOTH("qk_norm", D(1, 1100, 32, 8, 128), 0, GPU_BF16, 0, lj_case_qk_norm), /* 64 row parts of 18 */
    CUDA_BOTH("bias", D(1, 8), 0, GPU_BF16, 1, lj_case_bias),
    CUDA_BOTH("bias", D(37, 200), 0, GPU_BF16, 1, lj_case_bias),
    CUDA_BOTH("bias", D(4096, 1152), 0, GPU_BF16, 0, lj_case_bias),
    CUDA_ONE("rope", D(1, 1, 4, 2, 16), 500000.0, 1, lj_case_rope),
    CUDA_ONE("rope", D(2, 37, 4, 2, 64), 500000.0, 1, lj_case_rope),
    CUDA_ONE("rope", D(2, 5, 6, 3, 10), 500000.0, 1, lj_case_rope),
    CUDA_ONE("rope", D(1, 200, 8, 8, 128), 500000.0, 0, lj_case_rope),
    /* every kernel family the shape has (kind -1) */
    CUDA_ONE("attention", D(1, 1, 4, 2, 64, -1), 0, 1, lj_case_attention),
    CUDA_ONE("attention", D(2, 37, 4, 2, 64, -1), 0, 1, lj_case_attention),
    CUDA_ONE("attention", D(1, 77, 4, 1, 32, -1), 0, 1, lj_case_attention),
    CUDA_ONE("attention", D(2, 129, 4, 4, 128, -1), 0, 1, lj_case_attention),
    CUDA_ONE("attention", D(1, 200, 4, 2, 16, -1), 0, 0, lj_case_attention),
    CUDA_ONE("attention", D(1, 128, 8, 8, 128, -1), 0, 0, lj_case_attention),
    CUDA_ONE("attention", D(2, 200, 32, 8, 64, -1), 0, 0, lj_case_attention),
    CUDA_ONE("attention", D(1, 300, 8, 2, 128, -1), 0, 0, lj_case_attention),
    CUDA_ONE("attention", D(1, 64, 2, 2, 64, -1), 0, 0, lj_case_attention),
    CUDA_ONE("attention", D(1, 1, 4, 4, 128, -1), 0, 0, lj_case_attention),
    CUDA_ONE("attention", D(1, 512, 8, 2, 64, -1), 0, 0, lj_case_attention),
    /* cuDNN's SDPA at T = 37, 128, 200 (not multiples of its tiles but 128), head_dim 64/128,
     * GQA 32/8 and 4/2 */
    CUDA_ONE("attention", D(2, 37, 4, 2, 64, 3), 0, 1, lj_case_attention),
    CUDA_ONE("attention", D(1, 37, 32, 8, 128, 3), 0, 1, lj_case_attention),
    CUDA_ONE("attention", D(1, 128, 32, 8, 64, 3), 0, 0, lj_case_attention),
    CUDA_ONE("attention", D(2, 128, 4, 2, 128, 3), 0, 0, lj_case_attention),
    CUDA_ONE("attention", D(1, 200, 4, 2, 128, 3), 0, 0, lj_case_attention),
    CUDA_ONE("attention", D(1, 37, 32, 8, 64, 3), 0, 0, lj_case_attention),
    CUDA_ONE("attention", D(1, 128, 32, 8, 128, 3), 0, 0, lj_case_attention),
    CUDA_ONE("attention", D(1, 200, 32, 8, 128, 3), 0, 0, lj_case_attention),
    CUDA_ONE("attention", D(1, 256, 4, 2, 128), 0, 0, lj_case_attention_captured),
    /* within documents: d = {B, T, nh, nkv, hd, mean document length}, param the kernels (0 flash,
     * 1 simple, 2 flash-mt1); documents shorter and longer than a 64-key tile, head dims 64/128 and one the
     * flash kernels do not cover */
    /* serving's paged ops: {S sequences, T, nh, nkv, hd, decode} (lengths T, 2T+1, ...), blocks of 16 */
    CUDA_ONE("paged_attention", D(3, 7, 4, 2, 8, 0), 0, 1, lj_case_paged_attention),
    CUDA_ONE("paged_attention", D(3, 7, 4, 2, 8, 1), 0, 1, lj_case_paged_attention),
    CUDA_ONE("paged_attention", D(2, 40, 32, 8, 128, 0), 0, 1, lj_case_paged_attention),
    CUDA_ONE("paged_attention", D(5, 300, 32, 8, 128, 1), 0, 0, lj_case_paged_attention),
    CUDA_ONE("paged_attention", D(2, 90, 28, 4, 128, 0), 0, 0, lj_case_paged_attention),
    CUDA_ONE("paged_attention", D(4, 33, 16, 2, 64, 1), 0, 1, lj_case_paged_attention),
    CUDA_ONE("paged_attention", D(2, 20, 8, 8, 256, 0), 0, 1, lj_case_paged_attention),
    /* the tensor-core kernel (head dims 64 and 128): GQA 1 and 2, blocks of 8 (a tile over two blocks)
     * and 32, a decode batch without split-K (66 x 8 thread blocks: over half a wave of an H200) */
    CUDA_ONE("paged_attention", D(3, 21, 8, 8, 128, 1), 0, 1, lj_case_paged_attention),
    CUDA_ONE("paged_attention", D(2, 45, 16, 8, 64, 0), 0, 1, lj_case_paged_attention),
    CUDA_ONE("paged_attention", D(3, 37, 32, 8, 128, 0), 8, 1, lj_case_paged_attention),
    CUDA_ONE("paged_attention", D(3, 50, 32, 8, 128, 1), 32, 1, lj_case_paged_attention),
    CUDA_ONE("paged_attention", D(66, 1, 32, 8, 64, 1), 0, 0, lj_case_paged_attention),
    /* the FP8 cache: the codes bit for bit, the attention against the CPU's (param k_scale) */
    CUDA_ONE("paged_attention_fp8", D(3, 7, 4, 2, 8, 0), 1.0, 1, lj_case_paged_attention_fp8),
    CUDA_ONE("paged_attention_fp8", D(3, 7, 4, 2, 8, 1), 0.0625, 1, lj_case_paged_attention_fp8),
    CUDA_ONE("paged_attention_fp8", D(2, 40, 32, 8, 128, 0), 1.0, 1, lj_case_paged_attention_fp8),
    CUDA_ONE("paged_attention_fp8", D(5, 300, 32, 8, 128, 1), 0.5, 0, lj_case_paged_attention_fp8),
    CUDA_ONE("paged_attention_fp8", D(4, 33, 16, 2, 64, 1), 1.0, 1, lj_case_paged_attention_fp8),
    CUDA_ONE("paged_attention_fp8", D(2, 20, 8, 8, 256, 0), 0.0625, 1, lj_case_paged_attention_fp8),
    CUDA_ONE("paged_attention_fp8", D(3, 21, 8, 8, 128, 1), 1.0, 1, lj_case_paged_attention_fp8),
    CUDA_ONE("paged_attention_fp8", D(2, 45, 16, 8, 64, 0), 0.5, 1, lj_case_paged_attention_fp8),
    CUDA_ONE("paged_attention_fp8", D(2, 90, 28, 4, 128, 0), 1.0, 0, lj_case_paged_attention_fp8),
    CUDA_ONE("paged_attention_fp8", D(66, 1, 32, 8, 64, 1), 1.0, 0, lj_case_paged_attention_fp8),
    CUDA_ONE("attention_docs", D(2, 37, 4, 2, 64, 5), 0, 1, lj_case_attention_docs),
    CUDA_ONE("attention_docs", D(2, 37, 4, 2, 64, 5), 1, 1, lj_case_attention_docs),
    CUDA_ONE("attention_docs", D(1, 77, 4, 1, 32, 9), 0, 1, lj_case_attention_docs),
    CUDA_ONE("attention_docs", D(2, 300, 8, 2, 64, 40), 0, 0, lj_case_attention_docs),
    CUDA_ONE("attention_docs", D(2, 300, 8, 2, 64, 40), 2, 0, lj_case_attention_docs),
    CUDA_ONE("attention_docs", D(2, 300, 8, 2, 64, 3), 0, 0, lj_case_attention_docs),
    CUDA_ONE("attention_docs", D(1, 513, 8, 2, 128, 150), 0, 0, lj_case_attention_docs),
    CUDA_ONE("attention_docs", D(2, 200, 4, 2, 128, 70), 1, 0, lj_case_attention_docs),
    CUDA_ONE("attention_docs", D(1, 1024, 32, 8, 128, 400), 0, 0, lj_case_attention_docs),
    /* over packed segments: d = {segments (varlen_patterns), nh, nkv, hd, kind}, kind -1 every family
     * (flash, simple, flash-mt1 at head_dim 64, auto, auto deterministic), else one: the flash kernels
     * at head_dim 64, 72 (padded to 80) and 128, segments not multiples of a tile (784, 200, 1, 1023),
     * one row, an empty segment, tile-aligned ones, a 3000-row one; uniform ones (cuDNN's dense path
     * on AUTO at 256, not at 784 before cuDNN 9.16); head_dim 32 (flash falls to the CUDA-core kernels) */
    CUDA_ONE("attention_varlen", D(2, 4, 2, 64, -1), 0, 1, lj_case_attention_varlen),
    CUDA_ONE("attention_varlen", D(8, 4, 2, 72, -1), 0, 1, lj_case_attention_varlen),
    CUDA_ONE("attention_varlen", D(8, 8, 2, 128, -1), 0, 1, lj_case_attention_varlen),
    CUDA_ONE("attention_varlen", D(5, 4, 4, 64, -1), 0, 1, lj_case_attention_varlen),
    CUDA_ONE("attention_varlen", D(6, 2, 1, 72, -1), 0, 1, lj_case_attention_varlen),
    CUDA_ONE("attention_varlen", D(2, 4, 2, 32, 0), 0, 1, lj_case_attention_varlen),
    CUDA_ONE("attention_varlen", D(3, 4, 2, 64, -1), 0, 0, lj_case_attention_varlen),
    CUDA_ONE("attention_varlen", D(3, 4, 2, 128, -1), 0, 0, lj_case_attention_varlen),
    CUDA_ONE("attention_varlen", D(3, 4, 4, 72, -1), 0, 0, lj_case_attention_varlen),
    CUDA_ONE("attention_varlen", D(4, 16, 16, 64, 0), 0, 0, lj_case_attention_varlen),
    CUDA_ONE("attention_varlen", D(4, 16, 16, 64, 3), 0, 0, lj_case_attention_varlen),
    CUDA_ONE("attention_varlen", D(4, 16, 16, 72, 0), 0, 0, lj_case_attention_varlen),
    CUDA_ONE("attention_varlen", D(9, 4, 2, 64, 0), 0, 0, lj_case_attention_varlen),
    CUDA_ONE("attention_varlen", D(7, 4, 2, 64, -1), 0, 0, lj_case_attention_varlen),
    CUDA_ONE("attention_varlen", D(7, 8, 8, 128, 3), 0, 0, lj_case_attention_varlen),
    CUDA_ONE("rope_pos", D(2, 37, 4, 2, 64, 5), 500000.0, 1, lj_case_rope_pos),
    CUDA_ONE("rope_pos", D(2, 5, 6, 3, 10, 2), 500000.0, 1, lj_case_rope_pos),
    CUDA_ONE("rope_pos", D(1, 300, 8, 8, 128, 40), 500000.0, 0, lj_case_rope_pos),
    CUDA_ONE("attention_decode", D(0, 1, 8, 4, 2, 64), 0, 1, lj_case_attention_decode),
    CUDA_ONE("attention_decode", D(5, 3, 16, 4, 2, 64), 0, 1, lj_case_attention_decode),
    CUDA_ONE("attention_decode", D(7, 4, 12, 4, 4, 16), 0, 1, lj_case_attention_decode),
    CUDA_ONE("attention_decode", D(30, 1, 40, 8, 2, 128), 0, 0, lj_case_attention_decode),
    CUDA_ONE("argmax_rows", D(6, 37), 0, 1, lj_case_argmax_rows),
    CUDA_ONE("argmax_rows", D(5, 4099), 0, 1, lj_case_argmax_rows),
    CUDA_ONE("argmax_rows", D(300, 128256), 0, 0, lj_case_argmax_rows),
    CUDA_ONE("swiglu", D(1, 8), 0, 1, lj_case_swiglu),
    CUDA_ONE("swiglu", D(37, 200), 0, 1, lj_case_swiglu),
    CUDA_ONE("swiglu", D(5, 13), 0, 1, lj_case_swiglu),
    CUDA_ONE("swiglu", D(512, 2048), 0, 0, lj_case_swiglu),
    CUDA_ONE("cross_entropy", D(1, 10), 0, 1, lj_case_cross_entropy),
    CUDA_ONE("cross_entropy", D(37, 1000), 0, 1, lj_case_cross_entropy),
    CUDA_ONE("cross_entropy", D(20, 1001), 0, 1, lj_case_cross_entropy),
    CUDA_ONE("cross_entropy", D(8, 128256), 0, 0, lj_case_cross_entropy),

    /* ---- CUDA perf at the benchmark shapes: llama3.2-1b (micro-batch 4) and llama3.2-3b
     * (micro-batch 2), sequence 4096 ---- */
    CUDA_PERF("fp8_matmul", D(16384, 2048, 3072), lj_case_cuda_perf_fp8_matmul),   /* 1b qkv */
    CUDA_PERF("fp8_matmul", D(16384, 2048, 16384), lj_case_cuda_perf_fp8_matmul),  /* 1b gate_up */
    CUDA_PERF("fp8_matmul", D(16384, 8192, 2048), lj_case_cuda_perf_fp8_matmul),   /* 1b down */
    CUDA_PERF("fp8_matmul", D(8192, 4096, 6144), lj_case_cuda_perf_fp8_matmul),    /* 8b qkv */
    CUDA_PERF("fp8_matmul", D(8192, 4096, 28672), lj_case_cuda_perf_fp8_matmul),   /* 8b gate_up */
    CUDA_PERF("fp8_matmul", D(8192, 14336, 4096), lj_case_cuda_perf_fp8_matmul),   /* 8b down */
    CUDA_PERF("fp8_blockwise_matmul", D(16384, 2048, 3072), lj_case_cuda_perf_fp8_blockwise),   /* 1b qkv */
    CUDA_PERF("fp8_blockwise_matmul", D(8192, 4096, 28672), lj_case_cuda_perf_fp8_blockwise),   /* 8b gate_up */
    CUDA_PERF("fp8_blockwise_matmul", D(8192, 14336, 4096), lj_case_cuda_perf_fp8_blockwise),   /* 8b down */
    CUDA_PERF("matmul", D(16384, 2048, 3072), lj_case_cuda_perf_matmul),    /* 1b qkv */
    CUDA_PERF("matmul", D(16384, 2048, 2048), lj_case_cuda_perf_matmul),    /* 1b o_proj */
    CUDA_PERF("matmul", D(16384, 2048, 16384), lj_case_cuda_perf_matmul),   /* 1b gate_up */
    CUDA_PERF("matmul", D(16384, 8192, 2048), lj_case_cuda_perf_matmul),    /* 1b down */
    CUDA_PERF("matmul", D(16384, 2048, 128256), lj_case_cuda_perf_matmul),  /* 1b lm_head */
    CUDA_PERF("matmul", D(8192, 3072, 5120), lj_case_cuda_perf_matmul),     /* 3b qkv */
    CUDA_PERF("matmul", D(8192, 3072, 3072), lj_case_cuda_perf_matmul),     /* 3b o_proj */
    CUDA_PERF("matmul", D(8192, 3072, 16384), lj_case_cuda_perf_matmul),    /* 3b gate_up */
    CUDA_PERF("matmul", D(8192, 8192, 3072), lj_case_cuda_perf_matmul),     /* 3b down */
    CUDA_PERF("matmul", D(8192, 8192, 8192), lj_case_cuda_perf_matmul),     /* 8k square */
    CUDA_PERF("attention", D(4, 4096, 32, 8, 64, 1), lj_case_cuda_perf_attention),  /* 1b, flash 1 m-tile */
    CUDA_PERF("attention", D(4, 4096, 32, 8, 64, 2), lj_case_cuda_perf_attention),  /* 1b, flash */
    CUDA_PERF("attention", D(2, 4096, 24, 8, 128, 2), lj_case_cuda_perf_attention), /* 3b, flash */
    CUDA_PERF("attention", D(4, 4096, 32, 8, 64, 3), lj_case_cuda_perf_attention),  /* 1b, cuDNN */
    CUDA_PERF("attention", D(2, 4096, 24, 8, 128, 3), lj_case_cuda_perf_attention), /* 3b, cuDNN */
    CUDA_PERF("attention", D(4, 4096, 32, 8, 64, 4), lj_case_cuda_perf_attention),  /* 1b, cuDNN accumulating dQ */
    CUDA_PERF("attention", D(1, 4096, 32, 8, 128, 3), lj_case_cuda_perf_attention), /* 8b, cuDNN */
    CUDA_PERF("attention", D(1, 4096, 32, 8, 128, 4), lj_case_cuda_perf_attention), /* 8b, cuDNN accumulating dQ */
    CUDA_PERF("attention", D(1, 32768, 32, 8, 128, 3), lj_case_cuda_perf_attention), /* 8b seq 32k, cuDNN */
    CUDA_PERF("attention", D(1, 32768, 32, 8, 128, 4), lj_case_cuda_perf_attention), /* the same, accumulating dQ */
    /* attention within documents at seq 8192 (the 1b's and the 8b's heads): EODs about every 512, 2048 tokens */
    CUDA_PERF("attention_docs", D(1, 8192, 32, 8, 64, 512), lj_case_cuda_perf_attention_docs),
    CUDA_PERF("attention_docs", D(1, 8192, 32, 8, 64, 2048), lj_case_cuda_perf_attention_docs),
    CUDA_PERF("attention_docs", D(1, 8192, 32, 8, 128, 512), lj_case_cuda_perf_attention_docs),
    CUDA_PERF("attention_docs", D(1, 8192, 32, 8, 128, 2048), lj_case_cuda_perf_attention_docs),
    /* the vision tower's attention over packed images: d = {images, patches each, nh, nkv, hd}: four
     * 448x448 images (784 patches) at the 2b/4b towers' heads and the 8b's head_dim 72, four 512x512
     * (1024: cuDNN's dense path on AUTO), one 1024x1024 (4096) */
    CUDA_PERF("attention_varlen", D(4, 784, 16, 16, 64), lj_case_cuda_perf_attention_varlen),
    CUDA_PERF("attention_varlen", D(4, 784, 16, 16, 72), lj_case_cuda_perf_attention_varlen),
    CUDA_PERF("attention_varlen", D(4, 1024, 16, 16, 64), lj_case_cuda_perf_attention_varlen),
    CUDA_PERF("attention_varlen", D(1, 4096, 16, 16, 64), lj_case_cuda_perf_attention_varlen),
    /* serving's paged attention, a decode batch: {S sequences, about L positions, nh, nkv, hd, fp8}: 8B at
     * the offline benchmark's batch (bf16 and FP8 cache), one and 16 sequences (split-K), qwen2.5-0.5b's GQA 7 */
    CUDA_PERF("paged_attention", D(200, 1500, 32, 8, 128, 0), lj_case_cuda_perf_paged_attention),
    CUDA_PERF("paged_attention", D(200, 1500, 32, 8, 128, 1), lj_case_cuda_perf_paged_attention),
    CUDA_PERF("paged_attention", D(64, 256, 32, 8, 128, 0), lj_case_cuda_perf_paged_attention),
    CUDA_PERF("paged_attention", D(1, 1000, 32, 8, 128, 0), lj_case_cuda_perf_paged_attention),
    CUDA_PERF("paged_attention", D(16, 1000, 32, 8, 128, 0), lj_case_cuda_perf_paged_attention),
    CUDA_PERF("paged_attention", D(200, 1500, 14, 2, 64, 0), lj_case_cuda_perf_paged_attention),
    CUDA_PERF("rmsnorm", D(16384, 2048), lj_case_cuda_perf_rmsnorm),
    CUDA_PERF("rmsnorm", D(8192, 3072), lj_case_cuda_perf_rmsnorm),
    CUDA_PERF("rmsnorm", D(8192, 4096), lj_case_cuda_perf_rmsnorm), /* 8b */
    CUDA_PERF("rmsnorm", D(16, 4096), lj_case_cuda_perf_rmsnorm),   /* 8b, a decode batch of 16 */
    CUDA_PERF("cross_entropy_fused", D(16384, 2048, 128256), lj_case_cuda_perf_cross_entropy),
    CUDA_PERF("swiglu", D(16384, 8192), lj_case_cuda_perf_swiglu),
    CUDA_PERF("rope", D(4, 4096, 32, 8, 64), lj_case_cuda_perf_rope),
    CUDA_PERF("embedding", D(16384, 2048, 128256), lj_case_cuda_perf_embedding),
    CUDA_PERF("optimizer", D(12358144), lj_case_cuda_perf_optimizer), /* llama3.2-1b: 1,235,814,400 parameters */
};

const int lj_op_num_cases = (int)(sizeof lj_op_cases / sizeof lj_op_cases[0]);
