/* vision.h: the Qwen3-VL vision tower (HF Qwen3VLVisionModel) written over the op table:
 * forward and backward from pixel_values [Np, P] and image_grid_thw to the merger output (one row
 * per LLM image token) and the DeepStack features; and the host-side tables the tower and the
 * text model's interleaved MRoPE need (position-grid interpolation, 2-D RoPE rows, MRoPE rows,
 * get_rope_index). Architecture: docs/qwen3-vl-model.md.
 *
 * Shapes: Np patches (sum of t*h*w over the images, in HF's patch order (t, bh, bw, mh, mw)),
 * P = lj_vision_patch_dim, V hidden, I intermediate, heads x hd = V, m = spatial_merge_size,
 * M = m*m*V, Nt = Np / (m*m) tokens, O = out_hidden_size. All activations in the backend's act
 * dtype: fp32 on the CPU, bf16 on CUDA (parameters in the param dtype with f32 master weights,
 * gradients in the grad dtype, as the decoder's).
 *
 * Buffers: declared to the static memory plan (plan/plan.h) by the tower's plan entry,
 * lj_vision_plan, through the plan's buffer walker (model/buffers.h), sized for max_patches
 * patches: parameters, and when training the f32 master weights (the parameters themselves on
 * an f32 backend), gradients and AdamW moments; the inputs and tables of a batch, the
 * activations and the backward's scratch and workspaces. Every name starts with "vision.".
 *
 * Recompute (lj_vision.recompute; Megatron-LM's recompute_granularity full, method uniform, over
 * every block): 0 keeps every activation the backward needs, each block its own
 * ("vision.blocks.N.*"); 1 keeps only the residual stream (the blocks' inputs, the DeepStack taps
 * and the merger input are in it) and the mergers' tensors, and all blocks share one set of block
 * tensors in the scratch arena ("vision.recompute.*"): each block's forward writes it, and the
 * backward replays block i's forward from residual[i] into it right before block i's backward (the
 * same ops on the same values: the same bits). The replay's FP8 casts take the pass's scales and
 * record no amax (the forward's amaxes stand; lj_linear_fp8_state.recording is off meanwhile).
 *
 * Precision: the four linears of every block (attn.qkv [V -> 3V], attn.proj [V -> V],
 * mlp.linear_fc1 [V -> I], mlp.linear_fc2 [I -> V]) run through the tower's own linear recipe
 * (model/linear.h; lj_vision.linear, its kinds QKV, O, GATE_UP, DOWN being qkv, proj, fc1, fc2,
 * its layers the blocks): bf16 (the act dtype), or in a training tower the decoder's FP8 recipe
 * (delayed, tensorwise, blockwise), each GEMM followed by its bias in the act dtype. The patch
 * embedding, the mergers (final and DeepStack), norms, attention and GELU stay in the act dtype.
 * The FP8 recipe's state and scratch are the tower's own ("vision.fp8.*" in the plan): its amax
 * histories and scales are a second recipe state beside the decoder's (a checkpoint keeps both),
 * and its casts never share the decoder's scratch, since the tower's forward and backward run
 * outside the decoder's passes. The FP8 transposes of the inputs are not kept as activations (the
 * act-dtype inputs are, as in bf16): the weight gradient casts its input again with the forward's
 * scale, the same codes.
 */
#ifndef LJ_MODEL_VISION_H
#define LJ_MODEL_VISION_H

#include "config/vl.h"
#include "model/buffers.h"
#include "model/linear.h"
#include "ops/ops.h"

/* The tower's layer definition, derived from the config once. */
typedef struct {
    int V, I, heads, hd, P, m, m2, M, O, depth, num_deepstack, gelu_tanh, grid;
    float eps; /* LayerNorm epsilon: 1e-6 (fixed in HF's modules) */
} lj_vision_spec;

lj_vision_spec lj_vision_spec_of(const lj_vision_config *v);

typedef struct {
    void *ln1, *qkv, *attn, *res_mid, *ln2, *h1, *act; /* [Np,V], [Np,3V], [Np,V] x3, [Np,I] x2 */
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;   /* [Np] */
    float *lse;                                          /* [heads, Np] */
} lj_vision_block_acts;

typedef struct {
    void *ln, *h, *act, *out;   /* [Nt, M] (the final merger's norm: [Np, V], the same bytes), [Nt, M] x2, [Nt, O] */
    float *mean, *rstd;         /* [Np] (final merger) or [Nt] (DeepStack) */
} lj_vision_merger_acts;

typedef struct {
    const lj_ops *ops;
    lj_vision_config cfg;
    lj_vision_spec spec;
    lj_vision_layout layout;
    int max_patches, max_images, training;
    int recompute;               /* 0 none, 1 full (above) */

    void *params;                /* [layout.total] param dtype */
    float *master;               /* [layout.total] f32 master weights (training; = params on an f32 backend) */
    void *grads;                 /* [layout.total] grad dtype (training) */
    float *adam_m, *adam_v;      /* [layout.total] f32 AdamW moments (training) */

    /* the current images (lj_vision_set_images) */
    int num_patches, num_tokens, num_segments, max_seqlen;
    void *pixels;                /* [Np, P] act */
    int32_t *cu_seqlens;         /* [max_patches + 1] i32: one segment per frame of each image */
    int32_t *row_ids;            /* [max_patches] i32 = 0..Np-1 (rope_forward_pos reads table row n) */
    float *rope_cos, *rope_sin;  /* [Np, hd/2] f32 (lj_vision_rope_rows) */
    int32_t *pos_idx;            /* [Np, 4] i32 (lj_vision_pos_interp) */
    float *pos_w;                /* [Np, 4] f32 */

    void **residual;             /* host array of depth + 1 pointers to [Np, V]: block inputs and the last output */
    void *pos_embeds;            /* [Np, V]: the interpolated position grid */
    lj_vision_block_acts *blocks;   /* host array of depth (recompute: every entry the same shared set) */
    lj_vision_merger_acts *mergers; /* host array of 1 + num_deepstack: final, then DeepStack j */

    /* backward scratch */
    void *d_res, *d_ln, *d_qkv, *d_attn, *d_h, *d_m1, *d_m2;
    void *ws_attention, *ws_bias, *ws_norm;
    void *ws_grad_norm;          /* global_norm_sq's workspace over the tower's gradients (training) */

    lj_linear_recipe_ctx linear; /* the blocks' linears: recipe, settings and FP8 state (above) */
} lj_vision;

/* Sets up the tower's host side for at most max_patches patches and max_images images (frames),
 * with gradients and optimizer state when `training`, with the blocks' `recompute` (0 none, 1
 * full; above): the spec, the layout, the host arrays of pointers and the blocks' linear recipe:
 * `recipe` with the FP8 settings `fp8` (NULL: the defaults) in a training tower, else "bf16"
 * (lj_linear_init_features; the settings' bf16 layers and --fp8-param-gather are the decoder's
 * and are not applied to the tower: every block is FP8).
 * Allocates no device memory: the buffers are declared by lj_vision_plan and bound when the plan
 * is allocated (every buffer starts at zero; the FP8 scales at 1). `ops` may be a table without a
 * device (lj_ops_cuda_describe) for planning only. Errors: LJ_ERR_ARG for non-positive sizes or a
 * recompute other than 0 and 1, LJ_ERR_UNSUPPORTED for a backend without the vision ops. */
lj_status lj_vision_init(lj_vision *vm, const lj_ops *ops, const lj_vision_config *cfg, int max_patches,
                         int max_images, int training, int recompute, lj_linear_recipe_kind recipe,
                         const lj_linear_fp8_options *fp8);
void lj_vision_free(lj_vision *vm);

/* The tower's plan entry (model/buffers.h): declares every buffer above (names "vision.*"; the
 * parameters in LJ_ARENA_PARAMS, master weights, gradients and moments in their arenas, the
 * batch's inputs and the activations in LJ_ARENA_ACTIVATIONS, the backward's gradients and, under
 * recompute, the blocks' one shared set in LJ_ARENA_SCRATCH, op workspaces in LJ_ARENA_WORKSPACE)
 * and, while binding, points vm's pointers at them. Sizes: model/vision.c; docs/qwen3-vl-model.md. */
void lj_vision_plan(lj_vision *vm, lj_buffer_walker *w);

/* Sets the weights from host f32 params[layout.total] (layout order, config/vl.h): the master
 * weights as given and the parameters rounded to the param dtype on the host (round to nearest
 * even, the device cast's rule). */
void lj_vision_set_weights(lj_vision *vm, const float *params);

/* Copies the weights to host f32 out[layout.total]: the master weights (training) or the f32
 * parameters. Not for a bf16 tower without master weights (asserts). */
void lj_vision_get_weights(const lj_vision *vm, float *out);

/* Random init (HF Qwen3VLPreTrainedModel._init_weights for Linear, Embedding and LayerNorm):
 * matrices and embeddings N(0, initializer_range), norms 1, biases 0, from `seed` (its own
 * stream: seed ^ "VISON"). Writes the parameters (and master weights). */
void lj_vision_init_weights(lj_vision *vm, uint64_t seed);

/* Sets the current images: pixel_values host f32 [Np, P] (HF's layout, rows in (t, bh, bw, mh, mw)
 * order per image, images concatenated), grid_thw host i32 [n, 3] in patches. Builds and uploads
 * the segments, the 2-D RoPE rows and the position-grid interpolation. Errors: LJ_ERR_ARG naming
 * the image when h or w is not a multiple of spatial_merge_size, or when the patches exceed
 * max_patches / the frames max_images. */
lj_status lj_vision_set_images(lj_vision *vm, const float *pixel_values, const int32_t *grid_thw, int num_images);

/* Forward over the current images: mergers[0].out [Nt, O] is the ViT output (the rows spliced
 * into the image-pad embeddings), mergers[1 + j].out [Nt, O] DeepStack feature j. `backward`: the
 * tower's backward follows (a training pass: the FP8 recipe updates its scales first and records
 * this pass's amaxes; lj_vision_backward ends the pass); 0: a forward-only pass, which casts with
 * the scales as they are and changes no recipe state. Nothing runs without images. */
void lj_vision_forward(lj_vision *vm, int backward);

/* Backward from the gradients of those outputs: d_out [Nt, O] and d_deepstack[j] [Nt, O] (act
 * dtype, backend memory; an entry may be NULL: no gradient), after lj_vision_forward(vm, 1).
 * Under recompute each block's forward is replayed right before its backward. Weight gradients
 * accumulate into vm->grads (zero them with lj_vision_zero_grads once per optimizer step). Ends
 * the recipe's pass (lj_linear_pass_end). */
void lj_vision_backward(lj_vision *vm, const void *d_out, const void *const *d_deepstack);
void lj_vision_zero_grads(lj_vision *vm);

/* ---- host-side tables (exact rules: docs/qwen3-vl-model.md) ------------------------ */

/* The position grid's bilinear interpolation (HF fast_pos_embed_interpolate) for the images:
 * idx[n*4 + k], w[n*4 + k] (k: (h0,w0), (h0,w1), (h1,w0), (h1,w1)) for each patch n in patch order;
 * the sample points are torch.linspace(0, G-1, h) in fp32 (both halves as torch computes them),
 * the weights fp32 products of (1 - d) and d. */
void lj_vision_pos_interp(const lj_vision_spec *s, const int32_t *grid_thw, int num_images, int32_t *idx, float *w);

/* The 2-D RoPE rows of the patches: cos/sin[n, i] for i < hd/2, angle row(n) * f[i] for i < hd/4
 * and col(n) * f[i - hd/4] above, f[j] = 1 / 10000^(2j / (hd/2)) in fp32 as torch computes it;
 * cos and sin in double of the fp32 inputs, rounded to fp32. */
void lj_vision_rope_rows(const lj_vision_spec *s, const int32_t *grid_thw, int num_images, float *cos_out,
                         float *sin_out);

/* get_rope_index for one sequence (every token attended): pos3[a*T + t] for the axes a = T, H, W.
 * Text runs count on from (the largest id so far) + 1 on all three axes; an image of llm grid
 * (gh, gw) = (h/m, w/m) whose first pad is at position ed and whose text run began at st gets
 * base = next + (ed - st) on the T axis and base + r, base + c on H and W for its tokens in
 * row-major (r, c) order. images: the grid_thw rows of this sequence's images, in order.
 * Returns the number of images consumed; -1 when a run of image pads is shorter than its image
 * (the pad count must equal t*h*w / m^2). */
int lj_vl_rope_index(const lj_vl_config *c, const int32_t *ids, int T, const int32_t *grid_thw, int num_images,
                     int32_t *pos3);

/* Interleaved MRoPE rows of the text model (HF Qwen3VLTextRotaryEmbedding with
 * apply_interleaved_mrope): for frequency j < hd/2, the axis is H when j % 3 == 1 and j <
 * 3*section[1], W when j % 3 == 2 and j < 3*section[2], else T; angle = fp32(pos_axis * f[j]),
 * f[j] = 1 / theta^(2j/hd) in fp32 as torch computes it; cos, sin of the fp32 angle rounded to
 * fp32 (the CUDA recipe then rounds them to bf16, as transformers does). pos3 [3, n]; out [n, hd/2]. */
void lj_vl_mrope_rows(const lj_vl_config *c, const int32_t *pos3, int n, float *cos_out, float *sin_out);

#endif
