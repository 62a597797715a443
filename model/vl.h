/* vl.h: Qwen3-VL (HF Qwen3VLForConditionalGeneration, dense) as the vision tower (model/vision.h)
 * joined to a Qwen3 decoder (model/model.h) through the decoder's hooks: the merger rows are
 * spliced into the image-pad embeddings (the pad embedding itself gets no gradient), DeepStack
 * feature j is added to the output of decoder layer j at the image positions, and RoPE is the
 * interleaved MRoPE of get_rope_index's 3-D positions. Architecture: docs/qwen3-vl-model.md.
 *
 * The decoder is the caller's: a model of vl->cfg.text planned and allocated as usual (B, T; the
 * CPU backend; no CUDA graphs). lj_vl_init rebinds its RoPE to per-token rows (position_ids =
 * 0..N-1 into rope_cos/rope_sin tables of N rows that lj_vl_set_batch fills) and installs the
 * hooks; the tower and these tables are plain allocations outside the plan.
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
    void *arena;                 /* the allocation of the buffers below */
    int32_t *img_pos;            /* [Nt_max] i32: flat positions b*T + t of the image pads, in order */
    int32_t *row_ids;            /* [N] i32 = 0..N-1 */
    float *rope_cos, *rope_sin;  /* [N, hd/2] f32: the MRoPE rows of the batch */
    void *d_embed;               /* [Nt_max, D] act: gradient of the spliced rows (training) */
    void *d_deepstack[LJ_VISION_MAX_DEEPSTACK]; /* [Nt_max, D] act each (training) */
    int num_tokens;              /* image pads of the current batch (= the tower's Nt) */
    int32_t *host_pos3;          /* [3, N] i32: the position ids of the current batch (T, H, W) */
} lj_vl;

/* Builds the tower (max_patches, max_images) beside the decoder `m` (a model of cfg->text) and
 * hooks them together. Errors: those of lj_vision_init; LJ_ERR_ARG when m's config is not
 * cfg->text's shape. */
lj_status lj_vl_init(lj_vl *vl, lj_model *m, const lj_vl_config *cfg, int max_patches, int max_images);
void lj_vl_free(lj_vl *vl);

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

/* Forward (the tower, then the decoder with the hooks) and, with `backward`, the backward of
 * both (the decoder's, then the tower's from the gradients the hooks collected); dloss as
 * lj_model_forward. Gradients accumulate (zero them with lj_vl_zero_grads). */
void lj_vl_forward_backward(lj_vl *vl, int backward, float dloss);
void lj_vl_zero_grads(lj_vl *vl);

#endif
