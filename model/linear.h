/* linear.h: the linear layers of the transformer, y = x W^T with W [out, in] (HF layout): which
 * weight each one uses, and how it is computed and kept. The model says which linear it runs and
 * gives it its weight and gradient (lj_linear); this module decides how, by the run's precision
 * recipe: an lj_linear_recipe, a static const table of functions chosen once (lj_linear_init, by
 * lj_linear_recipe_of or by name with lj_linear_recipe_find), with its settings and state in an
 * lj_linear_recipe_ctx. The recipes:
 *
 *   "bf16"        the backend's activation dtype (bf16 on CUDA, fp32 on the CPU) in and out, fp32
 *                 accumulation, through the op table's matmuls; the saved input for the backward is
 *                 the caller's activation itself (LJ_LINEAR_RECIPE_DEFAULT).
 *   "delayed", "tensorwise", "blockwise"
 *                 LJ_LINEAR_RECIPE_FP8: the four block linears (QKV, O, gate/up, down) of every
 *                 layer not kept in bf16 by lj_linear_fp8_options in FP8 with per-tensor scales
 *                 (TransformerEngine's DelayedScaling or Float8CurrentScaling, Megatron-LM's
 *                 --fp8-recipe delayed|tensorwise) or per-tile scales (its Float8BlockScaling,
 *                 --fp8-recipe blockwise); lm_head, the embedding, norms and attention stay in the
 *                 act dtype (the recipe runs them as "bf16" does). Training plans only (generation
 *                 and forward-only plans use "bf16"). The CPU backend emulates them exactly
 *                 (ops/cpu/fp8.c).
 *   "fp8-w8a8"    LJ_LINEAR_RECIPE_FP8_W8A8, forward only (serving's --quantization fp8: vLLM's
 *                 online dynamic quantization): the four block linears of every layer keep their
 *                 weight as E4M3 codes with one per-tensor scale, cast once when the weight is
 *                 given (lj_linear_keep_weight: s_w = 448 / amax(W), dequantization factor amax /
 *                 448); each forward casts its input with current scaling (its own amax) and runs
 *                 the FP8 GEMM, y = (1/s_x)(1/s_w) xq Wq^T; lm_head stays in the act dtype. The
 *                 casts and the GEMM are the tensorwise recipe's; only the weight is not cast
 *                 again. Its scratch (the input's codes, the GEMM's workspace) is sized by the
 *                 forward's caller, which has its own rows (lj_linear_scratch_bytes,
 *                 lj_linear_bind_scratch).
 *
 * The FP8 recipe, per linear y[N, out] = x[N, in] W[out, in]^T (docs/reference.md, "FP8 recipes"):
 *   forward  Wq = fp8_fwd(W * s_w), xq = fp8_fwd(x * s_x), y = (1/s_x)(1/s_w) xq Wq^T in fp32,
 *            written in the act dtype;
 *   backward dyq, dyq_t = fp8_bwd(dy * s_dy) (E5M2 under hybrid, else E4M3),
 *            Wq_t = fp8_fwd(W * s_w)^T with the forward's scale, dx = (1/s_dy)(1/s_w) dyq Wq_t^T,
 *            xq_t = fp8_fwd(x * s_x)^T, dW (grad dtype, dw_mode) = (1/s_dy)(1/s_x) dyq_t xq_t^T;
 *            xq_t is kept from the forward's cast where the recipe's plan_layer declared saved_t
 *            (the inputs of QKV, gate/up and down in layers without recompute, which then keep
 *            no act-dtype copy), else the saved act-dtype x is cast again with the forward's scale (the
 *            same codes).
 * The inputs' casts sit in their producers where the fused kernels are on: the RMSNorms before QKV
 * and gate/up (norm_forward: ops fp8_rmsnorm_quantize) and the SwiGLU before down (forward_swiglu),
 * which write xq and xq_t, and their act-dtype output only where a backward casts it again; under
 * current scaling they compute the amax in the same pass (or, for the norm, a first pass) before
 * the cast. The same codes as the producer followed by the linear's own cast.
 * The FP8 weights are cast where they are used, into one scratch pair shared by every linear
 * (TransformerEngine's way without FP8 parameters): a kept copy of every weight and of its
 * transpose would cost 2 bytes per parameter, as much as the bf16 weights (15 GiB for an 8B
 * model, which the recompute planner then pays for in recomputation), where casting them twice
 * per micro-batch moves about 6 bytes per parameter.
 * With --fp8-param-gather (lj_linear_fp8_options.param_gather; delayed and tensorwise; Megatron-LM's
 * FP8 parameters, TransformerEngine's fp8_model_init) the weights are kept as FP8 instead: every
 * FP8 linear's codes are written once per optimizer step, right after AdamW (and after weights or
 * recipe state were loaded: lj_linear_sync_weights), by lj_linear_cast_weights, and every
 * micro-batch's forward and backward reads them; the master weights stay f32 in the optimizer.
 * The scale of W is the one in the recipe state at the cast (delayed: the history's, updated at
 * each pass_begin; tensorwise: from W's amax then), its dequantization factor is kept beside the
 * codes (wkept_sinv), W's amax is recorded at the cast (delayed: into the history's newest row).
 *   in place (one rank whose param dtype is not f32, optimizer not offloaded: CUDA's bf16; the
 *            plan decides, lj_linear_place_weight): as in Megatron the FP8 copy is the parameter:
 *            the codes [out, ld(in)] and their transpose [in, ld(out)] of every FP8 linear lie in
 *            that weight's own place of the flat parameter buffer (out x in x 2 bytes: they fit
 *            when out and in are multiples of 16; a linear whose shape does not is kept as below),
 *            which holds no param-dtype copy of it; AdamW updates its f32 master only
 *            (lj_adamw_segment.master_only, lj_dp_segments), the cast reads the master rounded to
 *            the param dtype on the fly (fp8_amax_f32, fp8_quantize_f32: the codes of the copy the
 *            run without the flag reads), the weights' upload skips those places and the readers
 *            of the weights (checkpoints, the HF export) read the master; no weight scratch;
 *   replicated (ZeRO-1/2 over several ranks, which all-gather the param-dtype weights; optimizer
 *            offload, which pushes them from the host master; the CPU, whose params are the f32
 *            master): the codes and their transpose of every FP8 linear in buffers of their own, 2
 *            bytes per parameter of the FP8 linears beside the param-dtype weights the cast reads,
 *            and no weight scratch;
 *   sharded (ZeRO-3, lj_linear_shard_weights): each rank casts only its slice of each weight (the
 *            residency's unit, lj_linear_bind_weight) into the residency's FP8 shard, with the scale
 *            every rank holds (delayed: the reduced history; tensorwise: the amax all-reduced, max,
 *            over the ranks through amax_reduce), the residency all-gathers the codes (1 byte per
 *            element instead of the param dtype's) and gives them as the linear's weight (l->w:
 *            codes [out, in], in a multiple of 16); the backward transposes them into the scratch
 *            wq_t (fp8_transpose).
 * Under delayed scaling with gradient accumulation the micro-batches after the first read the
 * codes cast at the step's start, where casting at each use would take the scale the first
 * micro-batch's amax gave; with one micro-batch per step and an amax history of 1 both take the
 * previous step's amax, the same codes (docs/megatron.md, "FP8 parameters"). Tensorwise scaling
 * gives the same codes either way.
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
 * updates them on the device at the start of every training forward pass (pass_begin: no host
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
#include "model/buffers.h"
#include "ops/ops.h"

typedef enum {
    LJ_LINEAR_QKV = 0,
    LJ_LINEAR_O,
    LJ_LINEAR_GATE_UP,
    LJ_LINEAR_DOWN,
    LJ_LINEAR_LM_HEAD,
    LJ_LINEAR_KINDS
} lj_linear_kind;

/* The precision a run asks for (the options; --fp8-format): the act dtype, or FP8 with the
 * lj_fp8_recipe of its options. lj_linear_recipe_of turns it into the recipe that runs. */
typedef enum {
    LJ_LINEAR_RECIPE_DEFAULT = 0,
    LJ_LINEAR_RECIPE_FP8,
    LJ_LINEAR_RECIPE_FP8_W8A8, /* "fp8-w8a8": FP8 weights kept, forward only (serving) */
} lj_linear_recipe_kind;

/* How FP8 scales are chosen (Megatron-LM's --fp8-recipe). */
typedef enum {
    LJ_FP8_RECIPE_DELAYED = 0, /* per tensor, from the amax history of the previous passes */
    LJ_FP8_RECIPE_TENSORWISE,  /* per tensor, from this tensor's own amax (current scaling) */
    LJ_FP8_RECIPE_BLOCKWISE,   /* per 1x128 tile of x and dy, per 128x128 block of W, each from its
                                  own amax (DeepSeek-V3; TransformerEngine's Float8BlockScaling) */
} lj_fp8_recipe;

/* "delayed", "tensorwise", "blockwise": the name of its recipe table. */
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
    int param_gather;        /* --fp8-param-gather (0): the FP8 weights kept as FP8, cast once per
                                optimizer step (above); delayed and tensorwise */
} lj_linear_fp8_options;

/* Megatron-LM's defaults above (format hybrid, delayed, history 1, most_recent, margin 0, no
 * bf16 layers). */
lj_linear_fp8_options lj_linear_fp8_defaults(void);

/* "fp8 hybrid delayed (amax history 1, most_recent, margin 0)" and the like, for start-up lines. */
void lj_linear_fp8_describe(const lj_linear_fp8_options *o, char *buf, size_t len);

/* The formats of the forward tensors (x, W) and of the gradients (dy). */
lj_fp8_format lj_linear_fp8_fwd_format(const lj_linear_fp8_options *o);
lj_fp8_format lj_linear_fp8_bwd_format(const lj_linear_fp8_options *o);

/* The FP8 recipes' state (bound by the memory plan through the recipe's plan entries; host
 * bookkeeping besides). All zero, inactive, under "bf16". */
#define LJ_LINEAR_FP8_MAX (LJ_MAX_LAYERS * 4)
typedef struct {
    int active;                 /* an FP8 recipe runs (FP8 options, a training plan, some FP8 linear) */
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
    /* "fp8-w8a8": */
    void *wkept[LJ_LINEAR_FP8_MAX]; /* [out, ld(in)] E4M3: FP8 linear s's weight, cast once
                                   (lj_linear_keep_weight); its scale_inv is tensor 2s+1's */
    int scratch_rows;           /* rows the bound scratch (xq, workspace) holds (lj_linear_bind_scratch) */
    /* --fp8-param-gather (delayed, tensorwise; above): wkept[s] is then FP8 linear s's codes too */
    int kept;                   /* the FP8 linears' weights are kept as FP8, cast by lj_linear_cast_weights */
    int sharded;                /* each rank casts its slice into the residency's FP8 shard, which gathers
                                   the codes as the linears' weights (ZeRO-3; lj_linear_shard_weights) */
    int stale;                  /* host: the kept codes are not those of the weights and recipe state now */
    void *wkept_t[LJ_LINEAR_FP8_MAX]; /* replicated: [in, ld(out)] the transpose of wkept[s] */
    int in_params[LJ_LINEAR_FP8_MAX]; /* replicated: 1 where wkept[s] and wkept_t[s] lie in W's own place
                                   of the flat parameter buffer, which then holds no param-dtype copy
                                   of W, and wsrc[s] is W's f32 master (lj_linear_place_weight) */
    const void *wsrc[LJ_LINEAR_FP8_MAX]; /* what the cast of s reads: W [out, in] whole (param dtype, or
                                   its f32 master where in_params[s]), or sharded this rank's slice of
                                   it (param dtype; lj_linear_bind_weight) */
    int64_t wsrc_numel[LJ_LINEAR_FP8_MAX]; /* its elements (sharded: a multiple of 64, padding zero) */
    void *wdst[LJ_LINEAR_FP8_MAX]; /* sharded: where the slice's codes go, wsrc_numel[s] bytes */
    float *wkept_sinv;          /* [3F * LJ_FP8_SCALE_INV_STRIDE]: scale_inv as at the cast (W: 2s+1) */
    float *wamax;               /* [F]: each W's amax at the cast (over every rank's slice) */
} lj_linear_fp8_state;

/* Number of f32 values of the recipe state a checkpoint keeps: the amax history and the scales
 * (`scales` = 3F; scale_inv follows from the scales). */
static inline int64_t lj_linear_fp8_state_numel(const lj_linear_fp8_state *s, int64_t *history, int64_t *scales) {
    *history = (int64_t)s->history_len * 3 * s->num_linears;
    *scales = 3 * (int64_t)s->num_linears;
    return *history + *scales;
}

typedef struct lj_linear_recipe lj_linear_recipe;
typedef struct lj_linear_recipe_ctx lj_linear_recipe_ctx;

/* What the linears of a model share: the recipe, the run it plans for, its settings and state.
 * Set by lj_linear_init (lj_model_init does), bound by the memory plan. */
struct lj_linear_recipe_ctx {
    const lj_linear_recipe *recipe; /* chosen once (lj_linear_recipe_of) */
    const lj_ops *ops;
    int fused;                      /* the fused kernels are on (the SwiGLU-fused cast; --no-fusion) */
    /* The RMSNorm writes the next linear's FP8 input itself (norm_forward with
     * ops fp8_rmsnorm_quantize); 0 after lj_linear_init: on an H200 the fused kernel ran at 1.6-2.0
     * TB/s against 2.9-3.2 for the norm and the cast apart (0.167 against 0.137 ms at 8192 x 4096,
     * delayed), so it stays off until it is faster; the tests turn it on. */
    int fuse_norm_cast;
    int num_layers;                 /* L */
    int in_features[LJ_LINEAR_KINDS], out_features[LJ_LINEAR_KINDS]; /* per kind (the same in every layer) */
    lj_linear_fp8_options fp8_opt;  /* the FP8 settings (FP8 recipes) */
    lj_linear_fp8_state fp8;        /* the FP8 recipes' state */
    /* Over several data-parallel ranks with FP8 linears (set by lj_parallelize; NULL otherwise):
     * amax[0..count) (f32 in backend memory) becomes its element-wise maximum over the ranks, in
     * place, in stream order (pass_end); amax_reduce_arg is its own (the lj_dist). */
    void (*amax_reduce)(const lj_linear_recipe_ctx *c, float *amax, int count);
    void *amax_reduce_arg;
    /* How lj_linear_fp8_overflow names a linear: "<unit>.<layer>.<kind_names[k]>"; NULL (what
     * lj_linear_init leaves): "layers" and qkv, o, gate_up, down, the decoder's. */
    const char *unit_name;
    const char *const *kind_names;
};

/* One linear as the model runs it: its kind and layer, its weight W [out, in] (param dtype, where
 * the residency has it now) and gradient dW [out, in] (grad dtype; NULL in a forward), its
 * features, its index among the recipe's FP8 linears (-1: it runs in the act dtype), and for a
 * forward whether its input is cast already (1: the norm that produced it cast it into the
 * recipe's FP8 input, lj_linear_norm_forward returned 1; lj_linear_of sets 0). */
typedef struct {
    lj_linear_kind kind;
    int layer;
    int in_features, out_features;
    const void *w;
    void *dw;
    int slot;
    int input_cast;
} lj_linear;

/* A precision recipe: every entry is required (the "bf16" table's are no-ops where it has nothing
 * to do). c is the model's lj_linear_recipe_ctx; N the rows of x (<= c->tokens); x, out, dout and
 * dx are row-major in the act dtype; the plan entries are given the N of the run planned. */
struct lj_linear_recipe {
    const char *name;           /* "bf16", "delayed", "tensorwise", "blockwise", "fp8-w8a8" */
    /* The layers whose block linears the recipe runs in FP8: [*first, *end) of L (none for "bf16"). */
    void (*fp8_layers)(const lj_linear_fp8_options *o, int L, int *first, int *end);
    /* For the cost model (plan/cost.c): 1 when each FP8 cast reads its input once more (tensorwise:
     * its amax first; blockwise: the rowwise and columnwise tile casts are two passes). */
    int extra_cast_pass;
    /* The recipe's own buffers (state, the casts' scratch, the GEMM's workspace), declared to the
     * plan through w->take in a fixed order; the pointers are kept where the plan binds them. */
    void (*plan)(lj_linear_recipe_ctx *c, int N, lj_buffer_walker *w);
    /* 1 when layer `layer`, if it recomputes nothing, keeps the inputs of its QKV, gate/up and down
     * linears in the recipe's own form (the FP8 transposes the weight gradients read), so that the
     * plan keeps no act-dtype copy of them. */
    int (*keeps_inputs)(const lj_linear_recipe_ctx *c, int layer);
    /* Called for every layer where the plan lays out its saved activations; `keep`: the layer
     * recomputes nothing. Declares the inputs it keeps (keeps_inputs) and returns 1 then, else 0. */
    int (*plan_layer)(lj_linear_recipe_ctx *c, int layer, int keep, int N, lj_buffer_walker *w);
    /* Once the plan has bound the buffers: a fresh run's state (scales 1, histories 0). */
    void (*reset)(const lj_linear_recipe_ctx *c);
    /* At the start of each forward pass (`training`: a backward follows; delayed scaling updates
     * its scales on the device, no host synchronisation) and the end of each backward pass. */
    void (*pass_begin)(lj_linear_recipe_ctx *c, int training);
    void (*pass_end)(const lj_linear_recipe_ctx *c);
    /* out[N, out] = x[N, in] W^T. */
    void (*forward)(const lj_linear_recipe_ctx *c, const lj_linear *l, void *out, const void *x, int N);
    /* The SwiGLU and the down projection `down` after it: h[N, I] = swiglu(gate_up [N, 2I]) (fused
     * or through tmp [N, I], the unfused twin's scratch), out[N, C] = h W^T. An FP8 recipe may
     * produce down's FP8 input in the SwiGLU itself (h then written only where the backward
     * reads it); the same bits as the SwiGLU followed by forward. */
    void (*forward_swiglu)(const lj_linear_recipe_ctx *c, const lj_linear *down, void *out, void *h,
                           const void *gate_up, void *tmp, int N);
    /* The RMSNorm whose output is the input of `next` (QKV after a layer's first norm, gate/up
     * after its second; NULL: no block linear reads it, e.g. the final norm): out[N, C] and
     * rstd[N] = rmsnorm(x) with the weight w [C] and eps, x = res_in, or with y the residual form
     * res_out = res_in + y, x = res_out (fused, or add then the norm when the fused kernels are
     * off), C = the hidden size. An FP8 recipe may cast out into next's FP8 input in the same pass
     * (ops fp8_rmsnorm_quantize, out then written only where the backward reads it) and returns 1:
     * next's forward, given input_cast = 1, then skips its cast (the same bits as the norm followed
     * by the forward). No other FP8 forward may run in between (they share the casts' scratch). */
    int (*norm_forward)(const lj_linear_recipe_ctx *c, const lj_linear *next, void *res_out, void *out, float *rstd,
                        const void *res_in, const void *y, const void *w, int N, float eps);
    /* dx[N, in] = dout W (overwritten; skipped when dx is NULL) and dW = dout^T x, written as
     * dw_mode says. x is the input the forward saw (the caller's saved activation). */
    void (*backward)(const lj_linear_recipe_ctx *c, const lj_linear *l, void *dx, const void *dout, const void *x,
                     int N, lj_grad_mode dw_mode);
    /* The state a checkpoint keeps, as host f32 (lj_linear_fp8_state_numel values; none for
     * "bf16"), and back. */
    void (*state_get)(const lj_linear_recipe_ctx *c, float *dst);
    void (*state_set)(const lj_linear_recipe_ctx *c, const float *src);
};

/* The recipe that runs for `kind` and the FP8 options' `fp8` recipe in a plan (`training`: a
 * training plan without a KV cache; else "bf16"); LJ_LINEAR_RECIPE_FP8_W8A8 gives "fp8-w8a8" in
 * a plan without training (asserted). */
const lj_linear_recipe *lj_linear_recipe_of(lj_linear_recipe_kind kind, lj_fp8_recipe fp8, int training);

/* The recipe named `name` ("bf16", "delayed", "tensorwise", "blockwise", "fp8-w8a8"), or NULL. */
const lj_linear_recipe *lj_linear_recipe_find(const char *name);

/* Sets up c for a model of `cfg` on `ops`: the recipe (lj_linear_recipe_of;
 * "bf16" when it leaves no linear in FP8), which linears are FP8 and the sizes of its buffers.
 * `training`: a training plan without a KV cache; `fused`: the fused kernels are on. The features
 * per kind are the decoder's (the shapes above); lj_linear_init_features with them. */
void lj_linear_init(lj_linear_recipe_ctx *c, const lj_ops *ops, const lj_model_config *cfg, lj_linear_recipe_kind kind,
                    const lj_linear_fp8_options *fp8, int training, int fused);
/* The same for `num_layers` (<= LJ_MAX_LAYERS) layers of four block linears whose features are
 * given per kind, in[k] -> out[k] for k < LJ_LINEAR_KINDS (the same in every layer; LM_HEAD's may
 * be 0 when nothing runs it): another tower than the decoder, e.g. Qwen3-VL's vision blocks
 * (model/vision.h: qkv, proj, fc1, fc2 as QKV, O, GATE_UP, DOWN), with its own context, state and
 * buffers. Only the kinds' features and the layer count differ from lj_linear_init. */
void lj_linear_init_features(lj_linear_recipe_ctx *c, const lj_ops *ops, int num_layers, const int *in_features,
                             const int *out_features, lj_linear_recipe_kind kind, const lj_linear_fp8_options *fp8,
                             int training, int fused);

/* The parameter index (config/config.h layout order) of linear `k` of layer `layer` (ignored for
 * LJ_LINEAR_LM_HEAD). */
int lj_linear_param(const lj_param_layout *layout, lj_linear_kind k, int layer);

/* Linear `k` of layer `layer` with weight w and gradient dw (NULL in a forward): its features and
 * FP8 slot from c. */
lj_linear lj_linear_of(const lj_linear_recipe_ctx *c, lj_linear_kind k, int layer, const void *w, void *dw);

/* The recipe's entries, called through c->recipe. */
static inline void lj_linear_plan(lj_linear_recipe_ctx *c, int N, lj_buffer_walker *w) { c->recipe->plan(c, N, w); }
static inline int lj_linear_keeps_inputs(const lj_linear_recipe_ctx *c, int layer) {
    return c->recipe->keeps_inputs(c, layer);
}
static inline int lj_linear_plan_layer(lj_linear_recipe_ctx *c, int layer, int keep, int N, lj_buffer_walker *w) {
    return c->recipe->plan_layer(c, layer, keep, N, w);
}
/* A fresh state, or a checkpoint's (state_set): the kept FP8 weights follow at the next sync. */
static inline void lj_linear_reset(lj_linear_recipe_ctx *c) {
    c->recipe->reset(c);
    c->fp8.stale = c->fp8.kept;
}
static inline void lj_linear_pass_begin(lj_linear_recipe_ctx *c, int training) { c->recipe->pass_begin(c, training); }
static inline void lj_linear_pass_end(const lj_linear_recipe_ctx *c) { c->recipe->pass_end(c); }
static inline void lj_linear_forward(const lj_linear_recipe_ctx *c, const lj_linear *l, void *out, const void *x,
                                     int N) {
    c->recipe->forward(c, l, out, x, N);
}
static inline void lj_linear_forward_swiglu(const lj_linear_recipe_ctx *c, const lj_linear *down, void *out, void *h,
                                            const void *gate_up, void *tmp, int N) {
    c->recipe->forward_swiglu(c, down, out, h, gate_up, tmp, N);
}
static inline int lj_linear_norm_forward(const lj_linear_recipe_ctx *c, const lj_linear *next, void *res_out,
                                         void *out, float *rstd, const void *res_in, const void *y, const void *w,
                                         int N, float eps) {
    return c->recipe->norm_forward(c, next, res_out, out, rstd, res_in, y, w, N, eps);
}
static inline void lj_linear_backward(const lj_linear_recipe_ctx *c, const lj_linear *l, void *dx, const void *dout,
                                      const void *x, int N, lj_grad_mode dw_mode) {
    c->recipe->backward(c, l, dx, dout, x, N, dw_mode);
}
static inline void lj_linear_state_get(const lj_linear_recipe_ctx *c, float *dst) { c->recipe->state_get(c, dst); }
static inline void lj_linear_state_set(lj_linear_recipe_ctx *c, const float *src) {
    c->recipe->state_set(c, src);
    c->fp8.stale = c->fp8.kept;
}

/* "fp8-w8a8" (0 and no-ops under the other recipes): the bytes of forward scratch for up to N
 * rows (the input's codes [N, ld(max_in)] and fp8_matmul's workspace), and the binding of a
 * buffer of that size, 256-byte aligned, in backend memory, owned by the caller. */
size_t lj_linear_scratch_bytes(const lj_linear_recipe_ctx *c, int N);
void lj_linear_bind_scratch(lj_linear_recipe_ctx *c, int N, void *buf);

/* "fp8-w8a8": casts W [out, in] (param dtype, backend memory) of block linear k of layer `layer`
 * into its kept E4M3 codes with its per-tensor scale (current scaling of W: fp8_amax, then
 * fp8_quantize; in stream order, no host synchronisation). W may be freed afterwards. */
void lj_linear_keep_weight(const lj_linear_recipe_ctx *c, lj_linear_kind k, int layer, const void *w);
/* "fp8-w8a8": where linear k of layer `layer` keeps its codes (NULL: it keeps none, e.g. lm_head);
 * the bytes of all kept codes. */
void *lj_linear_kept_weight(const lj_linear_recipe_ctx *c, lj_linear_kind k, int layer);
int64_t lj_linear_kept_bytes(const lj_linear_recipe_ctx *c);

/* ---- --fp8-param-gather: the kept FP8 weights (above; no-ops when c->fp8.kept is 0) ---- */

/* ZeRO-3's residency, before the plan: each rank casts only its slices of the weights, which the
 * residency gathers as codes (c->fp8.sharded); the plan then keeps no replicated copy. */
void lj_linear_shard_weights(lj_linear_recipe_ctx *c);
/* Replicated, before the recipe's plan (the plan's walk calls it for every FP8 linear, with the
 * model's answer in `in_params`: one rank whose f32 master weights are all in backend memory and
 * whose param dtype is not f32, plan/plan.c): 1 asks that block linear k of layer `layer` keep its
 * codes [out, ld(in)] and their transpose [in, ld(out)] in its weight's own place in the flat
 * parameter buffer (out x in param-dtype elements, 16-byte aligned), which then holds no
 * param-dtype copy of W: AdamW updates its master only (lj_adamw_segment.master_only) and the cast
 * reads the master (fp8_quantize_f32, rounded to the param dtype first: the same codes). Granted
 * where they fit, out * ld(in) + in * ld(out) <= out * in * the param dtype's size (bf16: out and
 * in multiples of 16, every real model's); elsewhere, or with 0, the plan gives them buffers of
 * their own (fp8.layers.L.K.w, .w_t) beside the param-dtype W the cast reads. Returns whether
 * the codes are in W's place. */
int lj_linear_place_weight(lj_linear_recipe_ctx *c, lj_linear_kind k, int layer, int in_params);
/* Once the plan is bound: what the cast of block linear k of layer `layer` (an FP8 one) reads, src
 * [n] in backend memory (replicated: W [out, in] whole, n = out * in; in the param dtype with dst
 * NULL, or where lj_linear_place_weight granted it W's f32 master with dst W's place in the
 * parameter buffer, 16-byte aligned, where the codes and their transpose go; sharded: this rank's
 * slice in the param dtype, n a multiple of 64 whose elements past W are zero, and dst[n] the bytes
 * its codes go to, both 16-byte aligned). */
void lj_linear_bind_weight(lj_linear_recipe_ctx *c, lj_linear_kind k, int layer, const void *src, int64_t n, void *dst);
/* The ranges of the flat parameter layout (elements) that hold FP8 codes instead of the param copy
 * (lj_linear_place_weight), in increasing order: [offset[i], offset[i] + count[i]) for i below the
 * returned number (at most LJ_LINEAR_FP8_MAX entries each; 0 when there are none). Whatever writes
 * the param copy skips them (AdamW's segments, the weights' upload). */
int lj_linear_codes_in_params(const lj_linear_recipe_ctx *c, const lj_param_layout *layout, int64_t *offset,
                              int64_t *count);
/* Casts every FP8 linear's weight into its kept codes (replicated: and their transpose) with its
 * scale (delayed: as it is; tensorwise: from W's amax, reduced over the ranks when sharded),
 * records W's amax (wamax; delayed: raised into the history's newest row, reduced over the ranks
 * when sharded) and keeps the dequantization factors; in stream order, capturable on one rank
 * (the reductions are collectives, queued from the host: call it on every rank). The optimizer
 * step calls it after AdamW (and the parameter all-gather of ZeRO-1/2). */
void lj_linear_cast_weights(lj_linear_recipe_ctx *c);
/* The weights changed outside the optimizer step (initialised, loaded): the next sync casts. */
static inline void lj_linear_weights_changed(lj_linear_recipe_ctx *c) { c->fp8.stale = c->fp8.kept; }
/* lj_linear_cast_weights if the kept codes are stale (the model calls it before each forward,
 * outside any graph capture). */
static inline void lj_linear_sync_weights(lj_linear_recipe_ctx *c) {
    if (c->fp8.stale) lj_linear_cast_weights(c);
}
/* Reads this pass's amaxes (host sync) and names the first tensor whose amax is inf or NaN
 * ("layers.3.down dy"): returns 1 then, 0 when all are finite or no FP8 recipe runs. */
int lj_linear_fp8_overflow(const lj_linear_recipe_ctx *c, char *what, size_t len);

#endif
