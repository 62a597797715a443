/* model.h: the dense decoder (Llama 3; Qwen3's QK-norm and Qwen2's q/k/v biases as parts of the
 * layer spec) as a set of device buffers plus forward, backward and
 * generation written once over the op table (ops/ops.h). No allocation happens here: every
 * pointer in lj_model is bound by the static memory plan (plan/plan.h). The loop reads its
 * parameters through the residency interface (model/residency.h) and runs its matmuls through
 * the linear-layer module (model/linear.h); how the model is sharded over data-parallel ranks is
 * applied from outside, by lj_parallelize (parallel/parallel.h), before the plan is built.
 *
 * Shapes: B micro-batch size, T sequence length, N = B*T, C = hidden size, Q = nh*hd,
 * KV = nkv*hd, QKV = Q + 2*KV, I = intermediate size, V = vocabulary, L layers.
 */
#ifndef LJ_MODEL_H
#define LJ_MODEL_H

#include "config/config.h"
#include "data/docmask.h"
#include "model/buffers.h"
#include "model/linear.h"
#include "model/residency.h"
#include "ops/ops.h"

/* What a layer keeps for the backward pass (Megatron-LM's --recompute-granularity). */
typedef enum {
    LJ_RECOMPUTE_NONE = 0,  /* keep every activation the backward needs */
    LJ_RECOMPUTE_SELECTIVE, /* keep matmul outputs; recompute norms (QK-norm and its RoPE too) and
                               the SwiGLU product */
    LJ_RECOMPUTE_FULL,      /* keep only the layer input; recompute the whole layer */
} lj_recompute;

const char *lj_recompute_name(lj_recompute r);

/* The layer definition, derived from the config once (lj_layer_spec_of): the shapes the forward
 * and backward use, and the parts a model family adds to the Llama block. A new dense family is
 * a new field here (and maybe an op), read where its part sits in the block. */
typedef struct {
    int C, I, V;        /* hidden size, intermediate size, vocabulary */
    int nh, nkv, hd;    /* query heads, key/value heads, head dim (nh*hd need not equal C) */
    int Q, KV, QKV;     /* nh*hd, nkv*hd, Q + 2*KV: the widths of q, of k (= v), of the qkv row */
    int L;              /* layers */
    float eps;          /* RMSNorm epsilon */
    int tied;           /* lm_head is the embedding (tie_word_embeddings) */
    int qk_norm;        /* Qwen3: RMSNorm over head_dim on q and k between the QKV linear and RoPE */
    int qkv_bias;       /* Qwen2: the [QKV] bias added to the QKV linear's output */
} lj_layer_spec;

lj_layer_spec lj_layer_spec_of(const lj_model_config *cfg);

/* Everything besides the model shape that decides the model's own buffers. How it is sharded
 * over data-parallel ranks (parallel/parallel.h lj_zero_options) and whether the optimizer state
 * is offloaded (optim/offload.h lj_offload_options) are applied from outside, by their modules. */
typedef struct {
    int micro_batch_size;   /* B */
    int seq_length;         /* T */
    int training;           /* 1: gradients, AdamW state and backward buffers */
    int fused;              /* 1: fused kernels (residual+RMSNorm, SwiGLU, lm_head+CE); 0: unfused twins */
    int kv_cache_tokens;    /* > 0: generation mode, B = 1, KV cache of this many positions */
    int graphs;             /* 1: on a backend with graphs, replay forward + backward from a captured graph
                               (lj_model_forward_backward), or the whole step (lj_model_train_step) */
    lj_linear_recipe_kind linear_recipe; /* how the transformer blocks' linears compute (model/linear.h) */
    lj_linear_fp8_options fp8;      /* LJ_LINEAR_RECIPE_FP8's settings */
    uint8_t recompute[LJ_MAX_LAYERS]; /* lj_recompute per layer */
    int vision_recompute;   /* Qwen3-VL (model/vl.h passes it to the vision tower, model/vision.h): its
                               blocks' recompute, 0 none (every activation kept) or 1 full (each block
                               keeps only its input and replays its forward before its backward); the
                               decoder itself does not read it */
    lj_doc_mask doc_mask;   /* document masking in packed sequences (data/docmask.h; training and
                               evaluation, not generation): all off by default, and then the model runs
                               exactly the plain causal path */
    int lr_groups;          /* training: AdamW's learning-rate groups, each with its set of step scalars
                               in adamw_scalars (ops.h LJ_ADAMW_LR_GROUPS; 0 is taken as 1) */
    lj_dtype exp_avg_dtype;    /* training: the stored dtype of AdamW's m and v, LJ_DTYPE_F32 (0, the */
    lj_dtype exp_avg_sq_dtype; /* default) or LJ_DTYPE_BF16 (Megatron-LM's --exp-avg-dtype and
                                  --exp-avg-sq-dtype; ops.h lj_adamw_hparams). BF16 halves their
                                  8 bytes per parameter; not with optimizer offload or ZeRO-3
                                  over several ranks */
} lj_model_options;

/* Per-layer activations. Under recompute, pointers that are not kept alias shared
 * recompute buffers (the plan decides which). */
typedef struct {
    void *ln1;        /* [N, C] act: input_layernorm output */
    float *ln1_rstd;  /* [N] */
    void *qkv;        /* [N, QKV] act, after the bias, QK-norm and RoPE (attention's input) */
    void *qkv_pre;    /* qk_norm: [N, QKV] act, the QKV linear's output (+ bias): QK-norm's input */
    float *qk_rstd;   /* qk_norm: [N, nh + nkv] f32, QK-norm's rstd per row and head */
    void *attn;       /* [N, Q] act: attention output (o_proj input) */
    float *lse;       /* [B, nh, T] */
    void *res_mid;    /* [N, C] act: residual after attention */
    void *ln2;        /* [N, C] act: post_attention_layernorm output */
    float *ln2_rstd;  /* [N] */
    void *gate_up;    /* [N, 2I] act: [gate | up] */
    void *mlp_act;    /* [N, I] act: silu(gate) * up */
    void *kv_cache;   /* generation: [kv_cache_tokens, 2*KV] act */
} lj_layer_acts;

/* Optimizer offload's hooks on the model (optim/offload.h attaches them before the plan; a model
 * without them keeps its optimizer state in the plan's device memory): with them, m->master,
 * adam_m and adam_v are host memory. */
typedef struct {
    /* Rounds this rank's host master shard to the param dtype and uploads it into the params at
     * the shard (params + shard_begin); returns once the copy has landed. */
    void (*push_params)(lj_model *m);
    void (*destroy)(lj_model *m); /* frees the host buffers (lj_model_free calls it) */
} lj_model_offload;

/* A captured CUDA graph and what is baked into it besides pointers: replayed while dloss and
 * key stay the same, recaptured otherwise. */
typedef struct {
    void *exec;     /* NULL: not captured */
    float dloss;
    uint64_t key;   /* the caller's hash of the rest (0 for forward + backward) */
} lj_model_graph;

/* Hooks of a second tower into the decoder (model/vl.h: the vision tower's rows and DeepStack);
 * NULL in lj_model for a text model. Called in stream order at fixed points:
 *   embed_forward   after the embedding lookup, x = residual[0] [N, C]
 *   layer_forward   after layer l, x = residual[l+1]; returns 1 when it changed x (the next norm
 *                   is then computed again from it)
 *   layer_backward  before layer l's backward, dx = the gradient of residual[l+1]
 *   embed_backward  before the embedding's backward, dx = the gradient of residual[0] (the hook
 *                   may change it, e.g. zero rows that get no embedding gradient)
 * and once per walk of the static memory plan (plan/plan.c), after the decoder's own buffers:
 *   plan            the second tower's plan entry (model/buffers.h): it declares its buffers
 *                   and, while binding, may rebind the decoder's inputs it replaces (per-token
 *                   RoPE rows); m is the plan's copy of the model while sizing. NULL: none. */
typedef struct {
    void (*embed_forward)(lj_model *m, void *ctx, void *x);
    int (*layer_forward)(lj_model *m, void *ctx, int l, void *x);
    void (*layer_backward)(lj_model *m, void *ctx, int l, const void *dx);
    void (*embed_backward)(lj_model *m, void *ctx, void *dx);
    void (*plan)(lj_model *m, void *ctx, lj_buffer_walker *w);
    void *ctx;
} lj_model_hooks;

struct lj_model {
    const lj_ops *ops;
    lj_model_config cfg;
    lj_layer_spec spec;
    lj_model_options opt;
    lj_param_layout layout;

    /* parameters and optimizer state, flat in the layout of config/config.h. Replicated (the
     * default of lj_model_init), the shard is the whole [0, P). lj_parallelize may change that:
     * under ZeRO stage 1 or 2 the flat buffers are padded to padded_numel = W * shard_numel and
     * this rank owns [shard_begin, shard_begin + shard_numel). Under ZeRO stage 3 over W > 1
     * ranks every buffer below is this rank's shard in the order of parallel/zero.h's layer
     * partition: padded_numel = shard_numel (the length of params and grads on this rank) and
     * shard_begin = 0; the full parameters of a layer exist only while it is gathered. Under ZeRO
     * stage 2 over W > 1 ranks the params stay replicated and flat as under stage 1, but grads
     * holds only this rank's shard of the gradients (grad_numel = shard_numel elements, flat
     * positions [shard_begin, shard_begin + shard_numel)). */
    int64_t shard_begin, shard_numel, padded_numel;
    int64_t grad_numel;  /* elements of grads: padded_numel, or shard_numel when the gradients are
                            partitioned (ZeRO-2/3 over W > 1 ranks) */
    const lj_residency *residency; /* NULL: replicated (flat buffers); else set by lj_parallelize */
    void *residency_state;         /* the residency's own state (e.g. parallel/zero3.h's lj_zero3) */
    int parallelized;              /* lj_parallelize has run (it runs once) */
    void *params;        /* [padded_numel] param dtype (on one rank under --fp8-param-gather, the FP8
                            linears' places hold their codes instead: lj_linear_codes_in_params) */
    float *master;       /* [shard_numel] f32 master weights of this rank's shard (training; on an f32
                            backend: params + shard_begin; under optimizer offload: host memory) */
    void *grads;         /* [grad_numel] grad dtype (training) */
    void *adam_m;        /* [shard_numel] opt.exp_avg_dtype (training) */
    void *adam_v;        /* [shard_numel] opt.exp_avg_sq_dtype (training); adam_m and adam_v are host
                            memory (f32) under optimizer offload. Read and written through
                            lj_model_state_download / _upload, which convert */
    float *grad_norm_sq; /* [1] f32 */
    float *adamw_scalars; /* [lr groups][LJ_ADAMW_NUM_SCALARS] f32 (training): this step's lr and bias
                             corrections per lr group (ops.h), uploaded before the optimizer step
                             runs or its graph is launched */
    float *dist_scalars; /* [3] f32 (training): values summed across data-parallel ranks (loss, stop, out of time) */

    /* inputs and activations */
    int32_t *inputs;     /* [N] token ids */
    int32_t *targets;    /* [N] next-token ids (< 0: ignored) */
    int32_t *position_ids; /* [N] i32 RoPE positions (opt.doc_mask.reset_position_ids), else NULL */
    int32_t *doc_start;  /* [N] i32 first key of each query's document (opt.doc_mask.reset_attention_mask), else NULL */
    float *rope_cos;     /* [Tmax, hd/2] */
    float *rope_sin;     /* [Tmax, hd/2] */
    void **residual;     /* host array of L+1 pointers to [N, C] act: embedding output, layer outputs */
    lj_layer_acts *layers; /* host array of L */
    void *final_ln;      /* [N, C] act */
    float *final_rstd;   /* [N] */
    float *losses;       /* [N] f32 per-token loss */

    /* scratch */
    void *proj;          /* [N, C] act: o_proj / down_proj output before the residual add */
    void *logits;        /* unfused: [N, V] act; generation: [1, V] */
    void *swiglu_tmp;    /* unfused: [N, I] act */
    void *d_res;         /* [N, C] act: gradient of the residual stream */
    void *d_ln;          /* [N, C] act */
    void *d_qkv;         /* [N, QKV] act */
    void *d_attn;        /* [N, Q] act */
    void *d_gate_up;     /* [N, 2I] act */
    void *d_mlp;         /* [N, I] act */
    void *ws_attention, *ws_rmsnorm, *ws_cross_entropy, *ws_embedding, *ws_norm; /* op workspaces */
    void *ws_qk_norm, *ws_bias; /* qk_norm_backward's and bias_backward's (when the spec has them) */

    /* host staging for the batch and the per-token losses (host bookkeeping, not planned) */
    int32_t *host_ids;   /* [2N], or [4N] with document masking: inputs, targets, position_ids, doc_start */
    float *host_losses;  /* [N] */
    int num_targets;     /* targets >= 0 in the current batch */

    /* optimizer offload (optim/offload.h lj_offload_attach; NULL: off): its hooks and its state
     * (host buffers, staging, timings) */
    const lj_model_offload *offload;
    void *offload_state;

    lj_linear_recipe_ctx linear;  /* the linears' precision recipe, its settings and state (model/linear.h;
                                     over several ranks lj_parallelize hooks its amax reduction) */

    const lj_model_hooks *hooks;  /* NULL, or a second tower's (model/vl.h); not with graphs */

    lj_model_graph fwd_bwd_graph; /* forward + backward (lj_model_forward_backward, opt.graphs) */
    lj_model_graph step_graph;    /* the whole training step as one graph (lj_model_train_step) */

    int ranges;  /* 1: NVTX ranges around the passes, the layers and the optimizer step (ops->range_push,
                    lj_model_range_push), and the steps run without CUDA graphs so that the ranges are
                    on the timeline (a graph replays no host event); set while a run profiles
                    (--profile's window). 0: none, not a call. */
};

/* An NVTX range named by the printf format `fmt` (ops.h range_push), or nothing when m->ranges is
 * off or the backend has no ranges (the CPU). Names longer than 95 bytes are cut. Each push is
 * closed by lj_model_range_pop, innermost first. The names a training step uses are listed in
 * docs/megatron.md ("Profiling"). */
void lj_model_range_push(const lj_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lj_model_range_pop(const lj_model *m);

/* Host-side tables derived from the config (the layout and the per-layer pointer arrays), for a
 * replicated model: the shard is everything. lj_parallelize (parallel/parallel.h) then applies
 * the options' ZeRO sharding, if any. The device pointers are bound later by lj_plan_bind.
 * Asserts num_hidden_layers <= LJ_MAX_LAYERS (lj_config_validate refuses more). */
void lj_model_init(lj_model *m, const lj_ops *ops, const lj_model_config *cfg, const lj_model_options *opt);
void lj_model_free(lj_model *m);

/* RoPE tables: cos/sin[t, i] = cos/sin(t * inv_freq[i]) for t < rows, i < hd/2, with the
 * "llama3" frequency scaling when configured. Source: transformers
 * modeling_rope_utils._compute_llama3_parameters and LlamaRotaryEmbedding (fp32 inv_freq). */
void lj_rope_tables(const lj_model_config *cfg, int rows, float *cos_out, float *sin_out);

/* Uploads the RoPE tables (call once after binding). */
void lj_model_upload_rope(lj_model *m);

/* Random init, Megatron-LM's (megatron/core/transformer/transformer_config.py: init_method and
 * output_layer_init_method): matrices and embeddings ~ N(0, initializer_range), the layers'
 * output projections (o_proj, down_proj) ~ N(0, initializer_range / sqrt(2 L)), norms (QK-norm's
 * too) = 1, biases = 0. Deterministic from `seed`, independent of thread count.
 * Writes master and params; zeroes AdamW state. */
void lj_model_init_weights(lj_model *m, uint64_t seed);

/* As lj_model_init_weights with uniform values of the same variance (U(-a, a), a = std sqrt(3))
 * instead of normal ones, 6x faster on a 2-core machine (qwen3-0.6b: 4.0 s against 24.1 s): for
 * serving's --load-format dummy (vLLM's dummy weights are uniform too), where only the shapes and
 * the scale of the activations matter. */
void lj_model_init_weights_dummy(lj_model *m, uint64_t seed);

/* Sets the weights from host f32 `params` [P]: the param copy and this rank's master shard (not
 * the param copy of weights whose place holds --fp8-param-gather's codes, lj_linear_codes_in_params:
 * those codes are cast from the master before the next forward). */
void lj_model_set_weights(lj_model *m, const float *params);
/* lj_model_set_weights for the flat range [offset, offset + n) only, from host f32 src[n], so that
 * a resume streams the weights through a bounded buffer (under ZeRO-3 only the ranges inside
 * this rank's shard change anything). Call lj_model_set_weights_done after the last range. */
void lj_model_set_weights_range(lj_model *m, const float *src, int64_t offset, int64_t n);
void lj_model_set_weights_done(lj_model *m);
/* Host f32 src[n] into the param-dtype buffer dst (backend memory), rounded to nearest even on
 * the host (the device cast's rule); a plain upload on an f32 backend. */
void lj_model_upload_as_param(const lj_model *m, void *dst, const float *src, int64_t n);
/* Copies the weights to host f32 `params` [P] (unsharded master, or f32 params; not under
 * ZeRO-3 over several ranks: lj_dp_gather_state). */
void lj_model_get_weights(lj_model *m, float *params);

/* Host f32 `full` [P] (flat layout) -> this rank's part of it in the f32 shard `dst`
 * ([shard_numel]: master weights, AdamW moments; device memory, or host memory under
 * optimizer offload), under any ZeRO stage. */
void lj_model_upload_shard(lj_model *m, float *dst, const float *full);

/* The optimizer state tensors of this rank's shard, t: the f32 master weights and AdamW's two
 * moments, as host f32 whatever their stored dtype (opt.exp_avg_dtype, opt.exp_avg_sq_dtype;
 * bf16 widens exactly): download dst[n] from shard positions [at, at + n); upload src[n] there
 * (bf16 rounds to nearest even, so a tensor downloaded and uploaded again is unchanged). Device
 * memory, or host memory under optimizer offload. lj_model_upload_state_shard is
 * lj_model_upload_shard for tensor t (host f32 `full` [P] -> this rank's part); moments_zero
 * zeroes both moments over the whole shard. */
enum { LJ_STATE_MASTER = 0, LJ_STATE_EXP_AVG = 1, LJ_STATE_EXP_AVG_SQ = 2 };
lj_dtype lj_model_state_dtype(const lj_model *m, int t);
void lj_model_state_download(const lj_model *m, int t, float *dst, int64_t at, int64_t n);
void lj_model_state_upload(const lj_model *m, int t, const float *src, int64_t at, int64_t n);
void lj_model_upload_state_shard(lj_model *m, int t, const float *full);
void lj_model_moments_zero(const lj_model *m);

/* State tensor t's shard elements [at, at + n) as stored (lj_model_state_dtype: n f32 or bf16)
 * into host memory dst, for a checkpoint that writes them as they are. async 1 (the backend
 * permitting, device memory): queued beside the stream (ops download_async; dst pinned to
 * overlap), to be waited for with lj_model_state_copy_wait (any thread) before dst is read;
 * every writer of the state (the optimizer step, the uploads above) first calls
 * lj_model_state_fence, which orders it after such copies on the stream. Otherwise a plain copy. */
void lj_model_state_copy_out(const lj_model *m, int t, void *dst, int64_t at, int64_t n, int async);
void lj_model_state_copy_wait(const lj_model *m);
void lj_model_state_fence(const lj_model *m);

/* Uploads a micro-batch: tokens [B, T+1] host i32 -> inputs = tokens[:, :T], targets = tokens[:, 1:].
 * With opt.doc_mask on, each sequence's position ids, document starts and loss mask are derived
 * from its inputs (lj_doc_mask_sequence, Megatron's rule) and uploaded too; masked targets become
 * -1 (no loss, no gradient, not counted in num_targets). */
void lj_model_set_batch(lj_model *m, const int32_t *tokens);

/* Forward over the current batch: writes losses[N] (and, with `logits_out` not NULL and the
 * unfused path, keeps full logits). `dloss` is d(total loss)/d(per-token loss), e.g.
 * 1/(B*T*accumulation steps); with `backward` = 1 the lm_head gradient pass runs fused with
 * the loss (fused path), and lj_model_backward must follow. */
void lj_model_forward(lj_model *m, int backward, float dloss);

/* Backward over the current batch (after lj_model_forward with backward = 1, which applied
 * dloss); weight gradients accumulate into m->grads (or the residency's gradient buffers). */
void lj_model_backward(lj_model *m);

/* Where parameter `index` (layout order) and its gradient are now: in the flat buffers, or where
 * the residency keeps them while the parameter's unit is fetched / collecting gradients. A weight
 * whose place holds --fp8-param-gather's codes (lj_linear_codes_in_params) has no param-dtype
 * values there: the linear module reads its codes, anything else its master. */
void *lj_model_param(const lj_model *m, int index);
void *lj_model_grad(const lj_model *m, int index);

/* 1 when this rank holds only a shard of the parameters themselves (ZeRO-3 over several ranks):
 * m->params is that shard, in the residency's order. */
static inline int lj_model_shards_params(const lj_model *m) { return m->residency && m->residency->shards_params; }

/* AdamW's learning-rate groups of a training model (opt.lr_groups, at least 1): the sets of step
 * scalars m->adamw_scalars holds. */
static inline int lj_model_lr_groups(const lj_model *m) { return m->opt.lr_groups > 1 ? m->opt.lr_groups : 1; }

/* Zeroes the gradient buffer (m->grad_numel elements of the grad dtype), in stream order:
 * once per optimizer step, before the first micro-batch's backward. Under ZeRO-2/3 over several
 * ranks the shard is only marked as zero: each group's first reduction overwrites it
 * (lj_zero3_grads_zeroed). */
void lj_model_zero_grads(lj_model *m);

/* Forward and backward of the current batch (lj_model_forward(m, 1, dloss) then
 * lj_model_backward): with opt.graphs on a backend with graphs, captured once and replayed
 * (recaptured if dloss changes). Gradients accumulate into m->grads. */
void lj_model_forward_backward(lj_model *m, float dloss);

/* The optimizer part of a training step (lj_model_train_step): ops of m->ops only, capturable
 * (no host synchronisation, no allocation, no upload or download); per-step values are read
 * from device memory (m->adamw_scalars). */
typedef void (*lj_model_step_tail)(lj_model *m, void *ctx);

/* One whole training step over the current batch (uploaded by lj_model_set_batch): zero the
 * gradients, forward + backward with `dloss` (as lj_model_forward_backward), then
 * `tail(m, ctx)` (the optimizer: global norm, AdamW and its parameter copy). With opt.graphs on
 * a backend with graphs, all of it is captured once as ONE graph and replayed at every call; it
 * is recaptured when dloss or `key` changes (key: a hash of everything else the tail bakes into
 * its launches, e.g. AdamW's fixed hyper-parameters and segments; clipping on or off). The
 * caller uploads the batch and the step's AdamW scalars before the call: they are read in
 * stream order by the replay. Without graphs the same ops run eagerly in the same order. Not
 * for ZeRO-3 over several ranks (its collectives are queued from the host). If the capture
 * fails, a warning is logged, graphs are turned off for this model and the step runs eagerly. */
void lj_model_train_step(lj_model *m, float dloss, uint64_t key, lj_model_step_tail tail, void *ctx);

/* Full logits of the current batch into host f32 out[N, V] (forward only; for tests). */
void lj_model_logits(lj_model *m, float *out);

/* Mean of the per-token losses of the last forward (host sync). */
double lj_model_mean_loss(lj_model *m);

/* Generation: feeds `n` tokens at positions p0..p0+n-1 through the KV cache (B = 1) and
 * writes the next-token logits of the last position into host f32 logits[V]. */
void lj_model_decode(lj_model *m, const int32_t *ids, int n, int p0, float *logits);

#endif
