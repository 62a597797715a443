/* linear.h: the linear layers of the transformer, y = x W^T with W [out, in] (HF layout): which
 * weight each one uses, and how it is computed and kept. The model says which linear it runs;
 * this module decides how, by the model's precision recipe:
 *
 *   LJ_LINEAR_RECIPE_DEFAULT  the backend's activation dtype (bf16 on CUDA, fp32 on the CPU) in
 *                             and out, fp32 accumulation, through the op table's matmuls; the
 *                             saved input for the backward is the caller's activation itself.
 *   LJ_LINEAR_RECIPE_FP8      the four block linears (QKV, O, gate/up, down) of every layer not
 *                             kept in bf16 by lj_linear_fp8_options in FP8 with per-tensor scales
 *                             (TransformerEngine's DelayedScaling or Float8CurrentScaling, Megatron-
 *                             LM's --fp8-recipe delayed|tensorwise) or per-tile scales (its
 *                             Float8BlockScaling, --fp8-recipe blockwise); lm_head, the embedding, norms
 *                             and attention stay in the act dtype. Training plans only (generation
 *                             and forward-only plans use the default recipe). The CPU backend
 *                             emulates it exactly (ops/cpu/fp8.c).
 *
 * The FP8 recipe, per linear y[N, out] = x[N, in] W[out, in]^T (docs/reference.md, "FP8 recipes"):
 *   forward  Wq = fp8_fwd(W * s_w), xq = fp8_fwd(x * s_x), y = (1/s_x)(1/s_w) xq Wq^T in fp32,
 *            written in the act dtype;
 *   backward dyq, dyq_t = fp8_bwd(dy * s_dy) (E5M2 under hybrid, else E4M3),
 *            Wq_t = fp8_fwd(W * s_w)^T with the forward's scale, dx = (1/s_dy)(1/s_w) dyq Wq_t^T,
 *            xq_t = fp8_fwd(x * s_x)^T, dW (grad dtype, dw_mode) = (1/s_dy)(1/s_x) dyq_t xq_t^T;
 *            xq_t is kept from the forward's cast where the plan binds saved_t (the inputs of
 *            QKV, gate/up and down in layers without recompute, which then keep no act-dtype
 *            copy), else the saved act-dtype x is cast again with the forward's scale (the
 *            same codes).
 * The FP8 weights are cast where they are used, into one scratch pair shared by every linear
 * (TransformerEngine's way without FP8 parameters): a kept copy of every weight and of its
 * transpose would cost 2 bytes per parameter, as much as the bf16 weights (15 GiB for an 8B
 * model, which the recompute planner then pays for in recomputation), where casting them twice
 * per micro-batch moves about 6 bytes per parameter.
 * The blockwise recipe (docs/reference.md, "FP8 recipes"; DeepSeek-V3 section 3.3.1) has the same
 * three GEMMs and buffers, each operand scaled along that GEMM's K: x and dy by 1x128 tiles, W by
 * 128x128 blocks, every scale from its own tile's amax (no history, nothing carried between
 * passes). xq (tiles along in) for the forward, xq_t (x^T, its own tiles along N, the "columnwise"
 * cast) for the weight gradient; dyq (tiles along out) for dx, dyq_t (tiles along N) for dW; Wq
 * and Wq_t hold the same codes, with the block grid and its transpose. Each code buffer has its
 * scale tensor beside it (the *_sinv fields), planned with it.
 * Hopper's FP8 GEMM takes both operands K-contiguous ("TN"), hence the transposed copies. Scale
 * state per FP8 linear f of F and tensor, in backend memory: tensors 2f (x), 2f+1 (W), 2F+f (dy);
 * amax_history [H, 3F] f32 (H = --fp8-amax-history-len under delayed scaling, 1 under current
 * scaling, where row 0 holds this pass's amaxes), scale [3F], and scale_inv = 1/scale kept one per
 * 16 bytes (scale_inv[LJ_FP8_SCALE_INV_STRIDE * t], what cuBLASLt's scale pointers need). Delayed scaling
 * updates them on the device at the start of every training forward pass (lj_linear_pass_begin: no host
 * synchronisation, so a captured step graph replays it); current scaling computes each amax just
 * before its cast.
 *
 * Shapes (N rows = micro-batch x sequence, C hidden, Q = nh*hd, QKV = Q + 2*nkv*hd, I
 * intermediate, V vocabulary), act dtype, row-major:
 *   LJ_LINEAR_QKV      x [N, C] -> [N, QKV]  q_proj | k_proj | v_proj (one contiguous weight)
 *   LJ_LINEAR_O        x [N, Q] -> [N, C]    o_proj
 *   LJ_LINEAR_GATE_UP  x [N, C] -> [N, 2I]   gate_proj | up_proj (one contiguous weight)
 *   LJ_LINEAR_DOWN     x [N, I] -> [N, C]    down_proj
 *   LJ_LINEAR_LM_HEAD  x [N, C] -> [N, V]    lm_head (the unfused loss and generation; the fused
 *                                            loss computes it inside cross_entropy_fused)
 */
#ifndef LJ_LINEAR_H
#define LJ_LINEAR_H

#include "config/config.h"
#include "ops/ops.h"

typedef struct lj_model lj_model;

typedef enum {
    LJ_LINEAR_QKV = 0,
    LJ_LINEAR_O,
    LJ_LINEAR_GATE_UP,
    LJ_LINEAR_DOWN,
    LJ_LINEAR_LM_HEAD,
} lj_linear_kind;

typedef enum {
    LJ_LINEAR_RECIPE_DEFAULT = 0,
    LJ_LINEAR_RECIPE_FP8,
} lj_linear_recipe;

/* Name of a recipe ("default", "fp8"). */
const char *lj_linear_recipe_name(lj_linear_recipe r);

/* How FP8 scales are chosen (Megatron-LM's --fp8-recipe). */
typedef enum {
    LJ_FP8_RECIPE_DELAYED = 0, /* per tensor, from the amax history of the previous passes */
    LJ_FP8_RECIPE_TENSORWISE,  /* per tensor, from this tensor's own amax (current scaling) */
    LJ_FP8_RECIPE_BLOCKWISE,   /* per 1x128 tile of x and dy, per 128x128 block of W, each from its
                                  own amax (DeepSeek-V3; TransformerEngine's Float8BlockScaling) */
} lj_fp8_recipe;

/* "delayed", "tensorwise", "blockwise". */
const char *lj_fp8_recipe_name(lj_fp8_recipe r);

/* The FP8 recipe's settings (Megatron-LM's flags in parentheses; its defaults). */
typedef struct {
    int hybrid;              /* --fp8-format hybrid (1: E4M3 forward, E5M2 gradients) or e4m3 (0) */
    lj_fp8_recipe recipe;    /* --fp8-recipe (delayed) */
    int amax_history_len;    /* --fp8-amax-history-len (1), delayed only */
    int amax_compute_max;    /* --fp8-amax-compute-algo max (1) or most_recent (0, the default) */
    int margin;              /* --fp8-margin (0): delayed scales are divided by 2^margin */
    int bf16_layers_start;   /* --first-last-layers-bf16 with --num-layers-at-start-in-bf16 (1): */
    int bf16_layers_end;     /* ... and --num-layers-at-end-in-bf16 (1): layers kept in bf16 */
} lj_linear_fp8_options;

/* Megatron-LM's defaults above (format hybrid, delayed, history 1, most_recent, margin 0, no
 * bf16 layers). */
lj_linear_fp8_options lj_linear_fp8_defaults(void);

/* "fp8 hybrid delayed (amax history 1, most_recent, margin 0)" and the like, for start-up lines. */
void lj_linear_fp8_describe(const lj_linear_fp8_options *o, char *buf, size_t len);

/* The formats of the forward tensors (x, W) and of the gradients (dy). */
lj_fp8_format lj_linear_fp8_fwd_format(const lj_linear_fp8_options *o);
lj_fp8_format lj_linear_fp8_bwd_format(const lj_linear_fp8_options *o);

/* The FP8 recipe's state of a model (bound by the memory plan; host bookkeeping besides). */
#define LJ_LINEAR_FP8_MAX (LJ_MAX_LAYERS * 4)
typedef struct {
    int active;                 /* the recipe runs (FP8 options, a training plan, backend with FP8 ops) */
    int recording;              /* this pass records amaxes (a training pass; a forward-only pass such
                                   as validation casts with the scales as they are and changes nothing) */
    int num_linears;            /* F: the FP8 linears */
    int16_t slot[LJ_MAX_LAYERS][4]; /* the FP8 index of (layer, kind) for the four block kinds, -1: bf16 */
    int max_in, max_out;        /* the widest input and output of the FP8 linears (scratch sizes) */
    int history_len;            /* H rows of amax_history */
    int64_t max_w;              /* the most bytes of an FP8 weight or its transpose, padded */
    void *wq, *wq_t;            /* scratch: the weight in use, [out, ld(in)] (forward) or its
                                   transpose [in, ld(out)] (data gradient), max_w bytes each */
    void *xq, *xq_t;            /* scratch: [N, ld(max_in)], [max_in, ld(N)] fp8 */
    void *saved_t[LJ_LINEAR_FP8_MAX]; /* [in, ld(N)]: the input's transpose, written by the forward's
                                   cast and read by the weight gradient; NULL: cast again from the
                                   saved act-dtype input (the plan keeps these for the layers
                                   without recompute, as their saved inputs) */
    void *dyq, *dyq_t;          /* scratch: [N, ld(max_out)], [max_out, ld(N)] fp8 */
    /* the blockwise recipe's scale tensors (base/fp8.h layouts), beside the codes above: */
    int64_t max_wscale;         /* the most f32 of a weight's block grid or its transpose's */
    float *wq_sinv, *wq_t_sinv; /* blocks of wq [out, in] and of wq_t [in, out], max_wscale each */
    float *xq_sinv, *xq_t_sinv; /* tiles of xq [N, max_in] and of xq_t [max_in, N] */
    float *dyq_sinv, *dyq_t_sinv; /* tiles of dyq [N, max_out] and of dyq_t [max_out, N] */
    float *saved_t_sinv[LJ_LINEAR_FP8_MAX]; /* tiles of saved_t [in, N], where saved_t is kept */
    float *amax_history;        /* [H, 3F] f32 (blockwise: H = 1, row 0 this pass's amaxes, only
                                   for the overflow report; its scales stay 1, unused) */
    float *scale;               /* [3F] f32 */
    float *scale_inv;           /* [3F * LJ_FP8_SCALE_INV_STRIDE] f32: 1/scale of tensor t at STRIDE * t */
    void *workspace;            /* fp8_matmul's */
} lj_linear_fp8_state;

/* Number of f32 values of the recipe state a checkpoint keeps: the amax history and the scales
 * (`scales` = 3F; scale_inv follows from the scales). */
static inline int64_t lj_linear_fp8_state_numel(const lj_linear_fp8_state *s, int64_t *history, int64_t *scales) {
    *history = (int64_t)s->history_len * 3 * s->num_linears;
    *scales = 3 * (int64_t)s->num_linears;
    return *history + *scales;
}

/* Called by lj_model_init: decides which linears are FP8 (m->linear) from m->opt. */
void lj_linear_init(lj_model *m);

/* Called once the plan has bound the buffers: scales to 1, histories to 0 (a fresh run). */
void lj_linear_reset(lj_model *m);

/* Called at the start of each forward pass: for a training pass (`training`, a backward follows)
 * the delayed-scaling update on the device; a forward-only pass leaves the recipe state alone.
 * No-op for the default recipe. */
void lj_linear_pass_begin(lj_model *m, int training);

/* Called at the end of each backward pass: over several data-parallel ranks (m->fp8_amax_reduce),
 * the amaxes this pass recorded become their maximum over the ranks (TransformerEngine's amax
 * reduction), so that every rank derives the same scales and a checkpoint's recipe state is
 * every rank's. */
void lj_linear_pass_end(lj_model *m);

/* The recipe state as host f32 [history | scale] (lj_linear_fp8_state_numel values), for
 * checkpoints; and back (scale_inv is set to 1/scale, as the casts and the update compute it). */
void lj_linear_fp8_state_get(lj_model *m, float *dst);
void lj_linear_fp8_state_set(lj_model *m, const float *src);

/* Reads this pass's amaxes (host sync) and names the first tensor whose amax is inf or NaN
 * ("layers.3.down dy"): returns 1 then, 0 when all are finite. */
int lj_linear_fp8_overflow(lj_model *m, char *what, size_t len);

/* The parameter index (config/config.h layout order) of linear `k` of layer `layer` (ignored for
 * LJ_LINEAR_LM_HEAD), and its input and output features. */
int lj_linear_param(const lj_model *m, lj_linear_kind k, int layer, int *in_features, int *out_features);

/* out[N, out] = x[N, in] W^T for linear `k` of layer `layer`; W read through the residency
 * (its unit must be fetched). */
void lj_linear_forward(lj_model *m, lj_linear_kind k, int layer, void *out, const void *x, int N);

/* out[N, C] = down_proj(h) with h = swiglu(gate_up) [N, I], the SwiGLU producing the down
 * projection's FP8 input directly, where the down projection of `layer` runs the FP8 recipe and
 * the fused kernels are on: under delayed scaling the SwiGLU writes the codes (ops
 * fp8_swiglu_quantize; h only where the backward reads it: the input is not kept as its FP8
 * transpose), under current scaling h with its amax (fp8_swiglu_amax) before the cast. The same
 * bits as the SwiGLU followed by lj_linear_forward. Returns 0, having done nothing, elsewhere
 * (no FP8 on this linear, the blockwise recipe, --no-fusion): the caller runs those two. */
int lj_linear_forward_swiglu(lj_model *m, int layer, void *out, void *h, const void *gate_up, int N);

/* The backward of lj_linear_forward: dx[N, in] = dout W (overwritten; skipped when dx is NULL)
 * and the weight gradient dW[out, in] = dout^T x, written as dw_mode says (the residency's
 * grad_begin tells). x is the input the forward saw (the caller's saved activation). */
void lj_linear_backward(lj_model *m, lj_linear_kind k, int layer, void *dx, const void *dout, const void *x, int N,
                        lj_grad_mode dw_mode);

#endif
