/* vl.h: Qwen3-VL (HF Qwen3VLForConditionalGeneration, dense) as the vision tower (model/vision.h)
 * joined to a Qwen3 decoder (model/model.h) through the decoder's hooks: the merger rows are
 * spliced into the image-pad embeddings (the pad embedding itself gets no gradient), DeepStack
 * feature j is added to the output of decoder layer j at the image positions, and RoPE is the
 * interleaved MRoPE of get_rope_index's 3-D positions. Architecture: docs/qwen3-vl-model.md.
 *
 * The decoder is the caller's: a model of vl->cfg.text (B, T; any backend; no CUDA graphs, no
 * ZeRO residency), initialised and parallelized (replicated) but not yet planned. lj_vl_init
 * installs the hooks, among them the plan entry through which the tower's buffers and these
 * (the image positions, the MRoPE rows, the spliced rows' gradients; names "vl.*") join the
 * decoder's static memory plan (plan/plan.h): lj_plan_build then sizes both, lj_plan_allocate
 * binds both and rebinds the decoder's RoPE to per-token rows (position_ids = 0..N-1 into
 * rope_cos/rope_sin tables of N rows that lj_vl_set_batch fills). plan/build.h lj_vl_build does
 * it in that order.
 */
#ifndef LJ_MODEL_VL_H
#define LJ_MODEL_VL_H

#include "model/model.h"
#include "model/vision.h"

typedef struct {
    lj_vl_config cfg;
    lj_model *m;                 /* the decoder (not owned) */
    lj_vision vis;               /* the tower (owned) */
    lj_model_hooks hooks;
    int max_patches, max_images;
    int row_ids_ready;           /* row_ids hold 0..N-1 (uploaded by the first lj_vl_set_batch) */
    int32_t *img_pos;            /* [Nt_max] i32: flat positions b*T + t of the image pads, in order */
    int32_t *row_ids;            /* [N] i32 = 0..N-1 */
    float *rope_cos, *rope_sin;  /* [N, hd/2] f32: the MRoPE rows of the batch */
    void *d_embed;               /* [Nt_max, D] act: gradient of the spliced rows (training) */
    void *d_deepstack[LJ_VISION_MAX_DEEPSTACK]; /* [Nt_max, D] act each (training) */
    int num_tokens;              /* image pads of the current batch (= the tower's Nt) */
    int32_t *host_pos3;          /* [3, N] i32: the position ids of the current batch (T, H, W) */
} lj_vl;

/* Sets up the tower (max_patches, max_images; training and its blocks' recompute as m's options
 * say: m->opt.training, m->opt.vision_recompute) beside the decoder `m` (a model of cfg->text,
 * after lj_model_init and lj_parallelize, before lj_plan_build) and hooks them together;
 * allocates no device memory (the plan does). The tower's block linears take the
 * decoder's precision (m->opt.linear_recipe and its FP8 settings: under FP8 both towers' blocks
 * run the same recipe, each with its own state, vl->vis.linear beside m->linear; the patch
 * embedding, the mergers and lm_head stay in the act dtype). Errors: those of lj_vision_init;
 * LJ_ERR_ARG when m's config is not cfg->text's shape; LJ_ERR_UNSUPPORTED for CUDA graphs, a
 * ZeRO residency or kept FP8 weights (--fp8-param-gather). */
lj_status lj_vl_init(lj_vl *vl, lj_model *m, const lj_vl_config *cfg, int max_patches, int max_images);
void lj_vl_free(lj_vl *vl);

/* 1 when a plan buffer's name is one of the tower's or the joint's (declared by lj_vl_init's plan
 * entry: "vision.*", "vl.*"), for reports that split the plan. */
int lj_vl_buffer_is_vision(const char *name);

/* Sets a batch: input_ids and targets host i32 [B, T] (targets < 0: no loss; the caller shifts
 * the labels: targets[t] = labels[t+1]), the images of the batch in order of their pads
 * (pixel_values host f32 [Np, P], grid_thw [n, 3]). Computes the 3-D position ids per sequence
 * (get_rope_index), their MRoPE rows, the image positions, and uploads everything. Errors:
 * LJ_ERR_ARG when the image pads do not match the images (count or run lengths) and those of
 * lj_vision_set_images. */
lj_status lj_vl_set_batch(lj_vl *vl, const int32_t *input_ids, const int32_t *targets, const float *pixel_values,
                          const int32_t *grid_thw, int num_images);

/* Replaces the position ids of the batch just set by pos3 host i32 [3, B, T] (e.g. the loader's,
 * which restart at 0 for every packed sample) and recomputes their MRoPE rows. */
void lj_vl_set_positions(lj_vl *vl, const int32_t *pos3);

/* The tower's capacity for packed rows of B x T tokens: max_patches = merge^2 * B * T (every token
 * an image pad) and max_images = B * T / 3 + 1 (an image takes at least three tokens: its start,
 * a pad, its end). What training plans, whatever the data. */
void lj_vl_capacity(const lj_vl_config *cfg, int micro_batch_size, int seq_length, int *max_patches,
                    int *max_images);

/* Forward (the tower, then the decoder with the hooks) and, with `backward`, the backward of
 * both (the decoder's, then the tower's from the gradients the hooks collected); dloss as
 * lj_model_forward. Gradients accumulate (zero them with lj_vl_zero_grads). */
void lj_vl_forward_backward(lj_vl *vl, int backward, float dloss);
void lj_vl_zero_grads(lj_vl *vl);

#endif
