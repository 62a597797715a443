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

#include "plan/build.h"
#include "plan/plan.h"
#include "tests/test_util.h"
#include "parallel/dp.h"
#include "optim/offload.h"
#include "parallel/parallel.h"
#include "train/train.h"

typedef struct {
    lj_model m;
    lj_plan p;
} model_run;

static void create(model_run *r, const lj_model_config *c, int offload) {
    lj_model_setup s = {.ops = lj_ops_cpu(), .cfg = c, .model = lj_test_train_options(2, 16, 1)};
    s.zero = (lj_zero_options){.zero_stage = 1, .dp_world_size = 1};
    s.offload.enabled = offload;
    lj_model_build(&r->m, &r->p, &s, NULL);
    const size_t before = lj_ops_allocated_bytes();
    assert_int_equal(lj_plan_allocate(&r->p, &r->m), LJ_OK);
    assert_true(lj_ops_allocated_bytes() - before == r->p.total_bytes); /* the device bytes are the plan */
    assert_int_equal(lj_offload_of(&r->m) != NULL && lj_offload_of(&r->m)->host != NULL, offload);
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
    lj_adamw_config cfg = {0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, LJ_WD_MEGATRON, 0, 0}; /* clipping on: the norm matters */
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
                norms[k] = lj_dp_optimizer_step(&dp, m, seg, nseg, &cfg, lj_adamw_lr_of(1e-2f), step);
            } else { /* the whole step */
                norms[k] = lj_dp_train_step(&dp, m, seg, nseg, &cfg, lj_adamw_lr_of(1e-2f), step, 1.0f / 32);
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

/* bf16 gradients (a GPU's) on the host path: the norm computed from the 2-byte staging and the
 * one-pass AdamW over it give bit for bit what the CPU backend's norm and AdamW give on the whole
 * f32 shard, with f32 params (the master uploaded) and with bf16 params (the rounded master
 * written into the staging and uploaded, also for the elements outside every segment); the host
 * staging is 2 B per element, not 6. A copy of the CPU table with grad_dtype bf16 stands in for
 * the GPU (its download and upload are copies). */
static void bf16_gradients_case(lj_dtype param_dtype) {
    lj_ops gpu = *lj_ops_cpu();
    gpu.grad_dtype = LJ_DTYPE_BF16;
    gpu.param_dtype = param_dtype;
    const lj_ops *cpu = lj_ops_cpu();
    const int64_t S = ((int64_t)1 << 23) + 12345, n_grad = S - 1000, gap = 7;
    lj_model m;
    memset(&m, 0, sizeof m);
    m.ops = &gpu;
    m.opt.training = 1;
    lj_offload_attach(&m, &(lj_offload_options){.enabled = 1});
    m.shard_numel = m.padded_numel = m.grad_numel = S;
    m.params = lj_malloc((size_t)S * sizeof(float));
    size_t host_state, staging;
    lj_offload_bytes(&m, &host_state, &staging);
    assert_true(staging < (size_t)S * 2 + ((size_t)1 << 20));
    assert_int_equal(lj_offload_alloc(&m), LJ_OK);
    lj_buffer_walker bind = {.bind = 1};
    lj_offload_plan(&m, &bind); /* points master, adam_m, adam_v at the host buffers */
    lj_rng rng;
    lj_rng_seed(&rng, 5);
    uint16_t *gb = lj_malloc((size_t)n_grad * sizeof(uint16_t));
    float *g = lj_calloc((size_t)S, sizeof(float)), *ref_p = lj_malloc((size_t)S * 4), *ref_m = lj_malloc((size_t)S * 4),
          *ref_v = lj_malloc((size_t)S * 4);
    for (int64_t i = 0; i < S; i++) {
        m.master[i] = ref_p[i] = (float)lj_rng_normal(&rng);
        ((float *)m.adam_m)[i] = ref_m[i] = 0.01f * (float)lj_rng_normal(&rng);
        ((float *)m.adam_v)[i] = ref_v[i] = 1e-4f * fabsf((float)lj_rng_normal(&rng));
        if (i < n_grad) {
            gb[i] = lj_f32_to_bf16(0.1f * (float)lj_rng_normal(&rng));
            g[i] = lj_bf16_to_f32(gb[i]);
        }
    }
    /* the reference: the CPU backend on the whole f32 shard; `gap` elements in no segment */
    void *ws = lj_malloc(cpu->global_norm_workspace_bytes(n_grad));
    float ref_norm = 0.0f;
    cpu->global_norm_sq(&ref_norm, g, n_grad, ws);
    const lj_adamw_segment seg[2] = {{0, S / 3, 0.1f, 0, 0}, {S / 3 + gap, S - S / 3 - gap, 0.0f, 0, 0}};
    const lj_adamw_hparams hp = {0.9f, 0.95f, 1e-8f, 0.5f, LJ_DTYPE_F32, LJ_DTYPE_F32};
    float scalars[LJ_ADAMW_NUM_SCALARS];
    lj_adamw_step_scalars(scalars, &hp, 3e-4f, 3);
    cpu->adamw_update(ref_p, ref_p, g, ref_m, ref_v, seg, 2, &hp, scalars, &ref_norm);
    /* the host path */
    const float norm = lj_offload_grad_norm_sq(&m, gb, n_grad);
    assert_memory_equal(&norm, &ref_norm, sizeof norm);
    lj_offload_update(&m, seg, 2, &hp, lj_adamw_lr_of(3e-4f), 3, norm);
    assert_memory_equal(m.master, ref_p, (size_t)S * 4);
    assert_memory_equal(m.adam_m, ref_m, (size_t)S * 4);
    assert_memory_equal(m.adam_v, ref_v, (size_t)S * 4);
    if (param_dtype == LJ_DTYPE_F32) {
        assert_memory_equal(m.params, ref_p, (size_t)S * 4); /* the f32 params follow the master */
    } else {
        const uint16_t *pb = m.params;
        int64_t wrong = 0;
        for (int64_t i = 0; i < S; i++) wrong += pb[i] != lj_f32_to_bf16(ref_p[i]);
        assert_int_equal(wrong, 0); /* every element, the gap's included */
    }
    free(gb), free(g), free(ref_p), free(ref_m), free(ref_v), free(ws), free(m.params);
    m.offload->destroy(&m);
}

static void test_bf16_gradients_from_staging(void **state) {
    (void)state;
    bf16_gradients_case(LJ_DTYPE_F32);
    bf16_gradients_case(LJ_DTYPE_BF16);
}

/* The train command's choice, resolved once before the run (and before the recompute planner,
 * which was once handed "not given" as "on"): off by default, a DeepSpeed config's device "cpu"
 * turns it on (naming the key), --offload-optimizer cpu agrees with it. */
static void test_offload_choice(void **state) {
    (void)state;
    lj_train_config c;
    lj_train_config_defaults(&c);
    assert_int_equal(c.offload_optimizer, 0);
    lj_train_given g = {.lr_warmup_iters = -1};
    lj_deepspeed_config ds;
    assert_int_equal(lj_deepspeed_parse(&ds,
                                        "{\"train_batch_size\": 2, \"zero_optimization\": {\"stage\": 1, "
                                        "\"offload_optimizer\": {\"device\": \"cpu\"}}}",
                                        "o.json"),
                     LJ_OK);
    int gbs = 0, mb = 0;
    assert_int_equal(lj_train_apply_deepspeed(&c, &g, &ds, 1, &gbs, &mb), LJ_OK);
    assert_int_equal(c.offload_optimizer, 1);
    assert_non_null(strstr(c.offload_source, "zero_optimization.offload_optimizer.device"));
    lj_train_config_defaults(&c);
    c.offload_optimizer = 1; /* --offload-optimizer cpu */
    g.offload_optimizer = 1;
    c.offload_source = "--offload-optimizer cpu";
    assert_int_equal(lj_train_apply_deepspeed(&c, &g, &ds, 1, &gbs, &mb), LJ_OK);
    assert_true(c.offload_optimizer == 1 && strcmp(c.offload_source, "--offload-optimizer cpu") == 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_gradients_from_staging),
        cmocka_unit_test(test_offload_plan),
        cmocka_unit_test(test_offload_steps_equal),
        cmocka_unit_test(test_offload_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
