/* planner_vl.c: the recompute planner for Qwen3-VL runs (planner_vl.h). */
#include "plan/planner_vl.h"

#include <string.h>

/* The joint plan of `s` with the decoder's policy `recompute`: its total and the part that is
 * the tower's and the joint's (with the arenas' alignment, as the breakdown counts them). */
static lj_status joint_plan(const lj_vl_config *cfg, const lj_model_setup *s, int max_patches, int max_images,
                            const uint8_t *recompute, size_t *total, size_t *vision) {
    lj_model_setup u = *s;
    memcpy(u.model.recompute, recompute, sizeof u.model.recompute);
    lj_model m;
    lj_plan plan;
    lj_vl vl;
    LJ_TRY(lj_vl_build(&vl, &m, &plan, &u, cfg, max_patches, max_images, NULL));
    *total = plan.total_bytes;
    *vision = 0;
    for (int i = 0; i < plan.count; i++)
        if (lj_vl_buffer_is_vision(plan.buffers[i].name))
            *vision += (plan.buffers[i].bytes + LJ_PLAN_ALIGN - 1) / LJ_PLAN_ALIGN * LJ_PLAN_ALIGN;
    lj_vl_free(&vl);
    lj_plan_free(&plan);
    lj_model_free(&m);
    return LJ_OK;
}

/* The decoder's policy beside the tower as s->model.vision_recompute has it (lj_vl_planner_choose
 * for a fixed tower recompute). */
static lj_status choose_beside(const lj_vl_config *cfg, const lj_model_setup *s, int max_patches, int max_images,
                               const lj_planner_target *t, uint8_t recompute[LJ_MAX_LAYERS], size_t *peak_bytes,
                               char *explanation, size_t explanation_len) {
    memset(recompute, 0, LJ_MAX_LAYERS);
    const size_t usable = lj_planner_usable_bytes(t), fixed = lj_planner_fixed_bytes(t);
    size_t total = 0, vision = 0;
    LJ_TRY(joint_plan(cfg, s, max_patches, max_images, recompute, &total, &vision));
    *peak_bytes = total + fixed;
    char b1[32], b2[32], b3[32], b4[32];
    if (total + fixed <= usable) {
        if (explanation && explanation_len)
            snprintf(explanation, explanation_len, "no recompute: the joint plan's peak %s fits %s usable",
                     lj_format_bytes(total + fixed, b1, sizeof b1), lj_format_bytes(usable, b2, sizeof b2));
        return LJ_OK;
    }
    /* the decoder alone, in what the tower's buffers leave; where the joint plan shares arenas
     * (scratch) the sum over-counts, and where it does not fit by some bytes, ask for them */
    lj_planner_target d = *t;
    d.linear_recipe = s->model.linear_recipe; /* the decoder's precision, as the run's */
    d.fp8 = s->model.fp8;
    size_t take = vision;
    char why[1536] = "";
    for (int round = 0; round < 4; round++) {
        if (take + d.margin_bytes >= t->device_memory_bytes) break;
        d.device_memory_bytes = t->device_memory_bytes - take;
        int mb = s->model.micro_batch_size;
        uint8_t r[LJ_MAX_LAYERS];
        const lj_status st = lj_planner_choose(&cfg->text, s->model.seq_length, &mb, &d, r, why, sizeof why);
        if (st != LJ_OK) break;
        LJ_TRY(joint_plan(cfg, s, max_patches, max_images, r, &total, &vision));
        *peak_bytes = total + fixed;
        if (total + fixed <= usable) {
            memcpy(recompute, r, LJ_MAX_LAYERS);
            if (explanation && explanation_len)
                snprintf(explanation, explanation_len,
                         "the decoder planned for %s (%s usable less the tower's and the joint's %s): %s The joint "
                         "plan's peak: %s.",
                         lj_format_bytes(lj_planner_usable_bytes(&d), b1, sizeof b1),
                         lj_format_bytes(usable, b2, sizeof b2), lj_format_bytes(take, b3, sizeof b3), why,
                         lj_format_bytes(total + fixed, b4, sizeof b4));
            return LJ_OK;
        }
        take += total + fixed - usable;
    }
    /* the decoder's search found nothing (or nothing that fits jointly): full recompute of every
     * layer, the smallest policy, when it fits; else say how much it needs */
    uint8_t full[LJ_MAX_LAYERS];
    memset(full, 0, sizeof full);
    memset(full, LJ_RECOMPUTE_FULL, (size_t)cfg->text.num_hidden_layers);
    LJ_TRY(joint_plan(cfg, s, max_patches, max_images, full, &total, &vision));
    *peak_bytes = total + fixed;
    if (total + fixed <= usable) {
        memcpy(recompute, full, LJ_MAX_LAYERS);
        if (explanation && explanation_len)
            snprintf(explanation, explanation_len, "full recompute of every decoder layer: the joint plan's peak %s "
                     "fits %s usable", lj_format_bytes(total + fixed, b1, sizeof b1),
                     lj_format_bytes(usable, b2, sizeof b2));
        return LJ_OK;
    }
    return lj_fail(LJ_ERR_OOM,
                   "the run does not fit: with full recompute of every decoder layer its peak is %s against %s usable "
                   "(%s)",
                   lj_format_bytes(total + fixed, b1, sizeof b1), lj_format_bytes(usable, b2, sizeof b2),
                   s->model.vision_recompute ? "the tower recomputes its blocks too: a smaller image size or "
                                               "micro-batch needs less"
                                             : "the tower keeps every block's activations: its recompute "
                                               "(--recompute-vision full), a smaller image size or micro-batch "
                                               "needs less");
}

lj_status lj_vl_planner_choose(const lj_vl_config *cfg, const lj_model_setup *s, int max_patches, int max_images,
                               const lj_planner_target *t, uint8_t recompute[LJ_MAX_LAYERS], int *vision_recompute,
                               size_t *peak_bytes, char *explanation, size_t explanation_len) {
    const int may = *vision_recompute == LJ_VL_VISION_RECOMPUTE_AUTO;
    lj_model_setup u = *s;
    u.model.vision_recompute = may ? 0 : *vision_recompute;
    *vision_recompute = u.model.vision_recompute;
    lj_status st = choose_beside(cfg, &u, max_patches, max_images, t, recompute, peak_bytes, explanation,
                                 explanation_len);
    if (st != LJ_ERR_OOM || !may) return st;
    /* nothing fits with the tower's blocks kept: recompute them, and plan the decoder beside that */
    const size_t without = *peak_bytes;
    u.model.vision_recompute = 1;
    char why[1800] = "";
    LJ_TRY(choose_beside(cfg, &u, max_patches, max_images, t, recompute, peak_bytes, why, sizeof why));
    *vision_recompute = 1;
    char b1[32], b2[32];
    if (explanation && explanation_len)
        snprintf(explanation, explanation_len,
                 "the vision tower recomputes its blocks (full): with every decoder layer fully recomputed and the "
                 "tower's activations kept the joint plan's peak is %s, above %s usable; beside the tower's "
                 "recompute: %s",
                 lj_format_bytes(without, b1, sizeof b1), lj_format_bytes(lj_planner_usable_bytes(t), b2, sizeof b2),
                 why);
    return LJ_OK;
}

const char *lj_vl_vision_recompute_name(int vision_recompute) { return vision_recompute ? "full" : "none"; }

lj_status lj_vl_recompute_of(const char *policy, const lj_vl_config *cfg, lj_model_setup *s, int max_patches,
                             int max_images, const lj_planner_target *t, char *desc, size_t desc_len, char *why,
                             size_t why_len) {
    const char *r = policy ? policy : "none";
    const int L = cfg->text.num_hidden_layers, vision = s->model.vision_recompute;
    if (why && why_len) why[0] = '\0';
    memset(s->model.recompute, 0, sizeof s->model.recompute);
    s->model.vision_recompute = vision == 1;
    if (!strcmp(r, "selective") || !strcmp(r, "full")) {
        memset(s->model.recompute, !strcmp(r, "full") ? LJ_RECOMPUTE_FULL : LJ_RECOMPUTE_SELECTIVE, (size_t)L);
    } else if (!strcmp(r, "auto")) {
        size_t peak = 0;
        int v = vision;
        LJ_TRY(lj_vl_planner_choose(cfg, s, max_patches, max_images, t, s->model.recompute, &v, &peak, why, why_len));
        s->model.vision_recompute = v;
    } else if (strcmp(r, "none")) {
        return lj_fail(LJ_ERR_ARG, "--recompute: '%s' is not one of auto, none, selective, full", r);
    }
    int n[3] = {0, 0, 0};
    for (int l = 0; l < L; l++) n[s->model.recompute[l]]++;
    if (n[LJ_RECOMPUTE_NONE] == L) snprintf(desc, desc_len, "none (%d layers)", L);
    else
        snprintf(desc, desc_len, "%d full + %d selective + %d none", n[LJ_RECOMPUTE_FULL], n[LJ_RECOMPUTE_SELECTIVE],
                 n[LJ_RECOMPUTE_NONE]);
    return LJ_OK;
}
