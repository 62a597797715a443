/* build.c: the one set-up of a model and its state (build.h). */
#include "plan/build.h"

lj_model_setup lj_model_setup_of(const lj_dp *dp, const lj_ops *ops, const lj_model_config *cfg, int B, int T, int fused,
                                 const uint8_t *recompute) {
    lj_model_setup s = {.ops = ops, .cfg = cfg};
    lj_dp_model_options(dp, B, T, fused, recompute, &s.model);
    s.zero = lj_dp_zero_options(dp);
    s.offload = lj_dp_offload_options(dp);
    return s;
}

void lj_model_build(lj_model *m, lj_plan *plan, const lj_model_setup *s, lj_dist *dist) {
    lj_model_init(m, s->ops, s->cfg, &s->model);
    lj_parallelize(m, dist, &s->zero);
    lj_offload_attach(m, &s->offload);
    if (plan) lj_plan_build(plan, m);
}

lj_status lj_model_build_state(lj_model *m, lj_plan *plan, uint64_t seed) {
    LJ_TRY(lj_plan_allocate(plan, m));
    lj_model_upload_rope(m);
    lj_model_init_weights(m, seed);
    return LJ_OK;
}

lj_status lj_vl_build(lj_vl *vl, lj_model *m, lj_plan *plan, const lj_model_setup *s, const lj_vl_config *cfg,
                      int max_patches, int max_images, lj_dist *dist) {
    lj_model_setup t = *s;
    t.cfg = &cfg->text;
    lj_model_build(m, NULL, &t, dist);
    const lj_status st = lj_vl_init(vl, m, cfg, max_patches, max_images);
    if (st != LJ_OK) {
        lj_model_free(m);
        return st;
    }
    if (plan) lj_plan_build(plan, m);
    return LJ_OK;
}

lj_status lj_vl_build_state(lj_vl *vl, lj_model *m, lj_plan *plan, uint64_t seed) {
    LJ_TRY(lj_plan_allocate(plan, m));
    lj_model_init_weights(m, seed);
    lj_vision_init_weights(&vl->vis, seed);
    return LJ_OK;
}
