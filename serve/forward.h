/* forward.h: the serving forward: one step of a batch of sequences of different lengths (new
 * prompt chunks and single decode tokens mixed) through the decoder over the paged KV cache.
 * It reads the weights of an lj_model (model/model.h) through the same op table and linear
 * module as training, and owns what serving adds: the KV cache of every layer
 * ([num_blocks * LJ_KV_BLOCK_SIZE, 2*KV] act or E4M3 codes each, serve/kv_cache.h's blocks),
 * RoPE tables of max_model_len positions, activations for max_num_batched_tokens rows, and the
 * step's index arrays. Equations: model/model.c's decode path (lj_model_decode), row by row. */
#ifndef LJ_SERVE_FORWARD_H
#define LJ_SERVE_FORWARD_H

#include "model/model.h"
#include "plan/plan.h"
#include "serve/kv_cache.h"
#include "serve/weights.h"

/* The KV cache's dtype (--kv-cache-dtype): the backend's act dtype, or E4M3 codes with a per-tensor
 * scale per layer for the keys and one for the values (ops.h paged_kv_write_fp8). */
typedef enum {
    LJ_SERVE_KV_AUTO = 0,
    LJ_SERVE_KV_FP8_E4M3, /* fp8, fp8_e4m3 */
} lj_serve_kv_dtype;

#define LJ_SERVE_MAX_GRAPHS 72 /* decode batch sizes 1, 2, 4, 8, 16, 24, ... up to 552 */

typedef struct {
    lj_model *m;              /* the weights, op table and shapes (not owned) */
    int max_tokens;           /* rows per step (max_num_batched_tokens) */
    int max_seqs;             /* sequences per step (max_num_seqs) */
    int max_model_len;        /* positions per sequence */
    int max_blocks;           /* block-table entries per sequence: ceil(max_model_len / block size) */
    int num_blocks;           /* blocks of the cache */
    lj_serve_kv_dtype kv_dtype;
    void **kv;                /* [L] per layer: [num_blocks * LJ_KV_BLOCK_SIZE, 2*KV] act, or E4M3 codes */
    float *kv_scale;          /* FP8 cache: [L * 2 * LJ_FP8_SCALE_INV_STRIDE] f32, layer l's k_scale at
                                 2 * STRIDE * l and v_scale at (2l + 1) * STRIDE (vLLM's default 1.0) */
    void *linear_scratch;     /* the linears' forward scratch for max_tokens rows (lj_linear_bind_scratch) */
    float *rope_cos, *rope_sin; /* [max_model_len, hd/2] f32 */
    void *x, *ln, *qkv, *qkv_pre, *attn, *res_mid, *proj, *gate_up, *mlp; /* activations, act */
    float *rstd, *qk_rstd;
    void *rows_x, *rows_ln, *logits; /* [max_seqs, C], [max_seqs, C], [max_seqs, V] act */
    float *rows_rstd;
    int32_t *d_index;         /* ids, pos, slots, seq, doc_start, attn_seq [max_tokens] each, rows [max_seqs],
                                 tables [max_seqs, max_blocks] */
    float *lse;               /* [nh, max_tokens] f32: attention_forward_docs's log-sum-exp (unused after) */
    void *ws_attention;       /* its workspace (attention_forward_docs_workspace_bytes of 1 x max_tokens) */
    int32_t *d_argmax, *h_argmax; /* [max_seqs] i32: the greedy token of each wanted row, device and host */
    int32_t *h_index;         /* its host staging */
    float *h_logits;          /* [max_seqs, V] f32 host */
    uint16_t *h_logits_bf16;  /* [max_seqs, V] bf16 host staging of a bf16 backend (pinned when it can) */
    int h_logits_pinned;
    size_t kv_bytes;          /* bytes of the caches, all layers */
    int num_graphs;           /* decode graphs captured (lj_serve_capture_graphs), by increasing size */
    int graph_sizes[LJ_SERVE_MAX_GRAPHS];
    void *graphs[LJ_SERVE_MAX_GRAPHS];
    int64_t graph_steps;      /* steps run by a graph */
} lj_serve_model;

/* One step's batch, host arrays: N token rows (ids, positions, cache slots, the sequence each
 * belongs to: an index < S), the S block tables ([S, max_blocks]) and the M rows whose logits
 * are wanted. start (NULL: all -1): for a row of a chunk that begins at position 0 (a prompt's
 * first chunk, nothing cached), the batch row where that chunk begins; -1 for a row whose earlier
 * positions are in the cache. Rows with a start attend within their chunk on the contiguous
 * rows (attention_forward_docs, the training kernel: each key read once per query tile instead
 * of once per row), the others over the pages. */
typedef struct {
    int N, S, M;
    const int32_t *ids, *pos, *slots, *seq;
    const int32_t *tables;
    const int32_t *rows;
    const int32_t *start;
} lj_serve_batch;

/* Bytes of KV cache per token position, all layers: 2 * KV * L * the element size (the act dtype's,
 * or 1 for an FP8 cache). */
size_t lj_serve_kv_bytes_per_token(const lj_model *m, lj_serve_kv_dtype kv_dtype);

/* Bytes of device memory lj_serve_model_init allocates besides the KV cache (activations for
 * max_tokens rows, logits for max_seqs, RoPE tables, index arrays, the FP8 linears' scratch and
 * the cache's scales): the step's activations that --gpu-memory-utilization leaves out of the
 * cache. */
size_t lj_serve_model_buffer_bytes(const lj_model *m, int max_tokens, int max_seqs, int max_model_len);

/* Allocates the caches (num_blocks blocks of kv_dtype), tables and buffers on m's backend and
 * uploads the RoPE tables (and an FP8 cache's scales, 1.0). Errors: LJ_ERR_OOM naming the
 * buffer; LJ_ERR_UNSUPPORTED when the backend lacks the paged ops (or their FP8 forms). */
lj_status lj_serve_model_init(lj_serve_model *sm, lj_model *m, int num_blocks, int max_tokens, int max_seqs,
                              int max_model_len, lj_serve_kv_dtype kv_dtype);
void lj_serve_model_free(lj_serve_model *sm);

/* Runs the step: writes this step's keys and values into their slots and returns the greedy token
 * of each of the M wanted rows (host i32 [M]: argmax_rows of their logits, the first of equal
 * maxima; NULL when M = 0, which skips the final norm and lm_head). When logits is not NULL,
 * *logits receives the rows' logits in host f32 [M, V] (NULL when M = 0): the sampler's input for
 * what greedy alone cannot decide. Both valid until the next call. 1 <= N <= max_tokens,
 * 1 <= S <= max_seqs, 0 <= M <= max_seqs, every pos < max_model_len. A decode batch (one row per
 * sequence, each sampled: seq[n] = rows[n] = n) runs as the captured graph of the smallest size
 * >= N when there is one, with pad rows that write nothing; its results equal the ops run one by
 * one (the same kernels on the same rows). */
const int32_t *lj_serve_forward(lj_serve_model *sm, const lj_serve_batch *b, const float **logits);

/* The decode batch sizes to capture: 1, 2, 4, 8, then every multiple of 8, up to
 * min(max_seqs, max_tokens), which is always one (vLLM's default capture sizes). Writes at most
 * LJ_SERVE_MAX_GRAPHS sizes, returns their count. */
int lj_serve_graph_sizes(int max_seqs, int max_tokens, int *sizes);

/* Captures one CUDA graph of lj_serve_forward's ops per decode batch size (each run once eagerly
 * first, on pad rows that write no cache slot). Errors: LJ_ERR_UNSUPPORTED when the backend has no
 * graphs (the CPU); the backend's capture errors (the graphs captured before stay usable). */
lj_status lj_serve_capture_graphs(lj_serve_model *sm);

/* The model that serving reads its weights from: m initialised for cfg on `ops` in generation
 * mode with the smallest activations (serving has its own), planned into `plan` and allocated,
 * weights uninitialised (lj_model_set_weights next, which under LJ_SERVE_QUANT_FP8 casts the block
 * linears to FP8 as they arrive: serve/weights.h). Errors: lj_plan_allocate's. Free with
 * lj_serve_weights_free. */
lj_status lj_serve_weights_init(lj_model *m, lj_plan *plan, const lj_ops *ops, const lj_model_config *cfg,
                                lj_serve_quantization quant);
void lj_serve_weights_free(lj_model *m, lj_plan *plan);

#endif
