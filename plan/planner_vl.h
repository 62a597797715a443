/* planner_vl.h: the recompute planner (plan/planner.h) for a Qwen3-VL run: the decoder's
 * per-layer recompute chosen so that the joint plan of the decoder and the vision tower
 * (plan/build.h lj_vl_build) fits the target. The tower's buffers and the joint's ("vision.*",
 * "vl.*") are a fixed part of the plan for a given tower recompute (model/vision.h: none keeps
 * every block's activations, full one shared set), so the decoder is planned by
 * lj_planner_search for what they leave, and the result is checked against the joint plan
 * itself. The tower's recompute is turned on only where nothing fits without it. */
#ifndef LJ_PLANNER_VL_H
#define LJ_PLANNER_VL_H

#include "plan/planner.h"

/* The tower's recompute as asked (--recompute-vision): not given, so that the planner may turn it
 * on (-1), or lj_model_options.vision_recompute's 0 (none) and 1 (full). */
#define LJ_VL_VISION_RECOMPUTE_AUTO (-1)

/* Fills recompute[LJ_MAX_LAYERS] (lj_recompute per decoder layer, the rest zero) for the run of
 * `s` (its micro-batch and sequence length; its recompute and vision_recompute are ignored) with
 * the tower planned for max_patches patches and max_images images and recomputing as
 * *vision_recompute says: none when the joint plan fits t's usable memory, else
 * lj_planner_search's choice for the decoder alone within the usable memory less the tower's and
 * the joint's buffers, made smaller by the joint plan's overshoot until the joint plan fits (at
 * most four rounds), else full recompute of every decoder layer. *vision_recompute: in, 0 or 1
 * (the tower's recompute, fixed) or LJ_VL_VISION_RECOMPUTE_AUTO: none, unless even full recompute
 * of every decoder layer does not fit beside it; then full, and the decoder is planned again
 * beside that; out, the tower's recompute of the choice (0 or 1). *peak_bytes: the joint plan's
 * total + lj_planner_fixed_bytes. explanation (may be NULL): one paragraph, the choice and the
 * decoder planner's reasons (and why the tower recomputes, when the planner turned it on).
 * Errors: LJ_ERR_OOM when even full recompute of every decoder layer (and of the tower's blocks,
 * where the planner may turn it on) does not fit, naming the smallest peak; those of
 * lj_vl_build. */
lj_status lj_vl_planner_choose(const lj_vl_config *cfg, const lj_model_setup *s, int max_patches, int max_images,
                               const lj_planner_target *t, uint8_t recompute[LJ_MAX_LAYERS], int *vision_recompute,
                               size_t *peak_bytes, char *explanation, size_t explanation_len);

/* A run's --recompute and --recompute-vision: `policy` "none" (or NULL), "selective" or "full" on
 * every decoder layer, or "auto" (lj_vl_planner_choose for t), into s->model.recompute; the tower's
 * s->model.vision_recompute, in: 0 or 1 as asked, or LJ_VL_VISION_RECOMPUTE_AUTO (not asked: none,
 * unless "auto" needs it); out: the tower's recompute of the run, 0 or 1. desc[desc_len] names the
 * decoder's policy ("none (28 layers)", "8 full + 4 selective + 16 none"); why (may be NULL) the
 * planner's paragraph under auto, else "". Errors: LJ_ERR_ARG naming --recompute for another
 * policy; lj_vl_planner_choose's. */
lj_status lj_vl_recompute_of(const char *policy, const lj_vl_config *cfg, lj_model_setup *s, int max_patches,
                             int max_images, const lj_planner_target *t, char *desc, size_t desc_len, char *why,
                             size_t why_len);

/* "none" or "full": the name of a tower recompute (lj_model_options.vision_recompute). */
const char *lj_vl_vision_recompute_name(int vision_recompute);

#endif
