/* test_offload.c: optimizer offload (DeepSpeed offload_optimizer.device "cpu") on the CPU
 * backend, where the option forces the host path: the offloaded master weights and moments leave
 * the plan (the allocation equals the smaller plan; the host bytes are 12 B per shard element),
 * and steps through the host path (lj_dp_offload_step: download, host norm, host AdamW, upload)
 * give bit-identical parameters, master weights, moments and norms to lj_dp_optimizer_step and
 * lj_dp_train_step without offload. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "plan/plan.h"
#include "tests/test_util.h"
#include "parallel/dp.h"
#include "optim/offload.h"
#include "parallel/parallel.h"

typedef struct {
    lj_model m;
    lj_plan p;
} model_run;

static void create(model_run *r, const lj_model_config *c, int offload) {
    lj_model_options o = lj_test_train_options(2, 16, 1);
    o.zero_stage = 1;
    o.dp_world_size = 1;
    o.offload_optimizer = offload;
    lj_model_init(&r->m, lj_ops_cpu(), c, &o);
    lj_parallelize(&r->m, NULL);
    lj_plan_build(&r->p, &r->m);
    const size_t before = lj_ops_allocated_bytes();
    assert_int_equal(lj_plan_allocate(&r->p, &r->m), LJ_OK);
    assert_true(lj_ops_allocated_bytes() - before == r->p.total_bytes); /* the device bytes are the plan */
    assert_int_equal(r->m.offload_host != NULL, offload);
    lj_model_upload_rope(&r->m);
    lj_model_init_weights(&r->m, 7);
}

static void destroy(model_run *r) {
    lj_plan_release(&r->p, r->m.ops);
    lj_plan_free(&r->p);
    lj_model_free(&r->m);
}

static void test_offload_plan(void **state) {
    (void)state;
    const lj_model_config c = lj_test_small_config(2, 1);
    model_run a, b;
    create(&a, &c, 0);
    create(&b, &c, 1);
    const size_t S = (size_t)a.m.shard_numel;
    /* the cpu backend's master is the f32 params: only the moments leave the plan */
    assert_true(a.p.arena_bytes[LJ_ARENA_OPTIMIZER] - b.p.arena_bytes[LJ_ARENA_OPTIMIZER] ==
                2 * ((S * 4 + LJ_PLAN_ALIGN - 1) / LJ_PLAN_ALIGN * LJ_PLAN_ALIGN));
    size_t host_state, staging;
    lj_offload_bytes(&b.m, &host_state, &staging);
    assert_true(host_state == 3 * ((S * 4 + 63) / 64 * 64));
    assert_true(staging > 0);
    lj_offload_bytes(&a.m, &host_state, &staging);
    assert_true(host_state == 0 && staging == 0);
    destroy(&a);
    destroy(&b);
}

static void expect_same(const lj_model *a, const lj_model *b) {
    const size_t P = (size_t)a->layout.total;
    assert_memory_equal(a->params, b->params, P * sizeof(float));
    assert_memory_equal(a->master, b->master, P * sizeof(float));
    assert_memory_equal(a->adam_m, b->adam_m, P * sizeof(float));
    assert_memory_equal(a->adam_v, b->adam_v, P * sizeof(float));
    assert_true(a->master != b->master); /* the offloaded master is its own host buffer */
}

static void test_offload_steps_equal(void **state) {
    (void)state;
    const lj_model_config c = lj_test_small_config(2, 0);
    model_run a, b;
    create(&a, &c, 0);
    create(&b, &c, 1);
    expect_same(&a.m, &b.m);
    lj_adamw_config cfg = {0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 0}; /* clipping on: the norm matters */
    lj_adamw_segment *seg;
    const int nseg = lj_adamw_segments(&a.m.layout, &cfg, &seg);
    int32_t tokens[2 * 17];
    lj_dp dp = LJ_DP_SINGLE;
    for (int step = 1; step <= 4; step++) {
        for (int i = 0; i < 2 * 17; i++) tokens[i] = (i * 31 + step * 7) % c.vocab_size;
        model_run *rs[2] = {&a, &b};
        double norms[2];
        for (int k = 0; k < 2; k++) {
            lj_model *m = &rs[k]->m;
            lj_model_set_batch(m, tokens);
            if (step % 2) { /* lj_dp_optimizer_step after an explicit forward + backward */
                lj_model_zero_grads(m);
                lj_model_forward_backward(m, 1.0f / 32);
                norms[k] = lj_dp_optimizer_step(&dp, m, seg, nseg, &cfg, 1e-2f, step);
            } else { /* the whole step */
                norms[k] = lj_dp_train_step(&dp, m, seg, nseg, &cfg, 1e-2f, step, 1.0f / 32);
            }
        }
        assert_true(norms[0] == norms[1]);
        assert_true(lj_model_mean_loss(&a.m) == lj_model_mean_loss(&b.m));
        expect_same(&a.m, &b.m);
    }
    /* the state round trip of checkpoints: gather from the host state, scatter into a fresh model */
    const size_t P = (size_t)a.m.layout.total;
    float *w = lj_malloc(P * 4), *mm = lj_malloc(P * 4), *vv = lj_malloc(P * 4);
    lj_dp_gather_state(&dp, &b.m, w, mm, vv);
    assert_memory_equal(w, a.m.params, P * 4);
    assert_memory_equal(mm, a.m.adam_m, P * 4);
    model_run d;
    create(&d, &c, 1);
    lj_dp_scatter_state(&dp, &d.m, w, mm, vv);
    expect_same(&a.m, &d.m);
    free(w);
    free(mm);
    free(vv);
    free(seg);
    destroy(&d);
    destroy(&a);
    destroy(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_offload_plan),
        cmocka_unit_test(test_offload_steps_equal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
