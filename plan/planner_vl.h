/* planner_vl.h: the recompute planner (plan/planner.h) for a Qwen3-VL run: the decoder's
 * per-layer recompute chosen so that the joint plan of the decoder and the vision tower
 * (plan/build.h lj_vl_build) fits the target. The tower keeps every activation (model/vision.h);
 * its buffers and the joint's ("vision.*", "vl.*") are a fixed part of the plan, so the decoder
 * is planned by lj_planner_search for what they leave, and the result is checked against the
 * joint plan itself. */
#ifndef LJ_PLANNER_VL_H
#define LJ_PLANNER_VL_H

#include "plan/planner.h"

/* Fills recompute[LJ_MAX_LAYERS] (lj_recompute per decoder layer, the rest zero) for the run of
 * `s` (its micro-batch and sequence length; its recompute is ignored) with the tower planned for
 * max_patches patches and max_images images: none when the joint plan fits t's usable memory,
 * else lj_planner_search's choice for the decoder alone within the usable memory less the
 * tower's and the joint's buffers, made smaller by the joint plan's overshoot until the joint
 * plan fits (at most four rounds). *peak_bytes: the joint plan's total + lj_planner_fixed_bytes.
 * explanation (may be NULL): one paragraph, the choice and the decoder planner's reasons.
 * Errors: LJ_ERR_OOM when even full recompute of every decoder layer does not fit, naming the
 * smallest peak; those of lj_vl_build. */
lj_status lj_vl_planner_choose(const lj_vl_config *cfg, const lj_model_setup *s, int max_patches, int max_images,
                               const lj_planner_target *t, uint8_t recompute[LJ_MAX_LAYERS], size_t *peak_bytes,
                               char *explanation, size_t explanation_len);

/* A run's --recompute: "none" (or NULL), "selective" or "full" on every decoder layer, or "auto"
 * (lj_vl_planner_choose for t), into s->model.recompute; desc[desc_len] names the policy ("none (28
 * layers)", "8 full + 4 selective + 16 none"); why (may be NULL) the planner's paragraph under auto,
 * else "". Errors: LJ_ERR_ARG naming --recompute for another policy; lj_vl_planner_choose's. */
lj_status lj_vl_recompute_of(const char *policy, const lj_vl_config *cfg, lj_model_setup *s, int max_patches,
                             int max_images, const lj_planner_target *t, char *desc, size_t desc_len, char *why,
                             size_t why_len);

#endif
