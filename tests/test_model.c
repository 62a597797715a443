/* test_model.c: the whole model on the CPU backend: gradients against central finite
 * differences of the loss, recompute policies give bit-identical gradients, fused and unfused
 * twins agree, a few AdamW steps on one batch lower the loss, and the one-call training step
 * (lj_dp_train_step) equals the step taken op by op. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "parallel/dp.h"
#include "plan/plan.h"
#include "tests/test_util.h"

enum { B = 2, T = 13, V = 97 };

/* The shared small configuration with larger weights (gradients well above rounding noise) and
 * a llama3 RoPE scaling that changes some frequencies. */
static lj_model_config small_config(int tie) {
    lj_model_config c = lj_test_small_config(2, tie);
    c.initializer_range = 0.2;
    c.rope_original_max_position_embeddings = 8;
    return c;
}

typedef lj_test_model fixture;

static void setup_model(fixture *f, const lj_model_config *c, int fused, int policy) {
    assert_int_equal(lj_test_model_create(f, c, B, T, fused, policy), LJ_OK);
    lj_model_init_weights(&f->m, 42);
    /* norms away from 1 so that their gradients matter */
    for (int l = 0; l < f->m.layout.count; l++) {
        const lj_param_info *pi = &f->m.layout.params[l];
        if (pi->kind != LJ_PARAM_NORM) continue;
        for (int64_t i = 0; i < pi->numel; i++) f->m.master[pi->offset + i] = 1.0f + 0.1f * (float)((i * 7 + l) % 5 - 2);
    }
    int32_t tokens[B * (T + 1)];
    for (int i = 0; i < B * (T + 1); i++) tokens[i] = (i * 37 + 11) % V;
    tokens[5] = 3;
    lj_model_set_batch(&f->m, tokens);
}

static void teardown_model(fixture *f) { lj_test_model_destroy(f); }

static double loss_and_grads(fixture *f) {
    const float dloss = 1.0f / (B * T);
    f->m.ops->memset_zero(f->m.grads, (size_t)f->m.layout.total * sizeof(float));
    lj_model_forward(&f->m, 1, dloss);
    lj_model_backward(&f->m);
    return lj_model_mean_loss(&f->m);
}

static double loss_only(fixture *f) {
    lj_model_forward(&f->m, 0, 0.0f);
    return lj_model_mean_loss(&f->m);
}

static void test_gradients_finite_differences(void **state) {
    (void)state;
    for (int tie = 0; tie <= 1; tie++) {
        lj_model_config c = small_config(tie);
        fixture f;
        setup_model(&f, &c, 1, LJ_RECOMPUTE_NONE);
        loss_and_grads(&f);
        const float *g = (const float *)f.m.grads;
        /* the largest gradient entry of every tensor */
        int checked = 0;
        for (int t = 0; t < f.m.layout.count; t++) {
            const lj_param_info *pi = &f.m.layout.params[t];
            int64_t best = pi->offset;
            for (int64_t i = pi->offset; i < pi->offset + pi->numel; i++)
                if (fabsf(g[i]) > fabsf(g[best])) best = i;
            const float saved = f.m.master[best];
            const float eps = 1e-2f;
            f.m.master[best] = saved + eps;
            const double lp = loss_only(&f);
            f.m.master[best] = saved - eps;
            const double lm = loss_only(&f);
            f.m.master[best] = saved;
            const double fd = (lp - lm) / (2.0 * eps);
            const double err = fabs(fd - g[best]);
            if (err > 2e-4 + 3e-2 * fabs(fd))
                fail_msg("tie=%d %s[%lld]: analytic %.6e, finite difference %.6e", tie, pi->name,
                         (long long)(best - pi->offset), (double)g[best], fd);
            checked++;
        }
        assert_int_equal(checked, f.m.layout.count);
        teardown_model(&f);
    }
}

static void test_recompute_is_bit_exact(void **state) {
    (void)state;
    lj_model_config c = small_config(0);
    fixture ref;
    setup_model(&ref, &c, 1, LJ_RECOMPUTE_NONE);
    const double ref_loss = loss_and_grads(&ref);
    for (int policy = LJ_RECOMPUTE_SELECTIVE; policy <= LJ_RECOMPUTE_FULL; policy++) {
        fixture f;
        setup_model(&f, &c, 1, policy);
        const double loss = loss_and_grads(&f);
        assert_true(loss == ref_loss);
        assert_memory_equal(f.m.grads, ref.m.grads, (size_t)ref.m.layout.total * sizeof(float));
        teardown_model(&f);
    }
    teardown_model(&ref);
}

static void test_fused_matches_unfused(void **state) {
    (void)state;
    lj_model_config c = small_config(1);
    fixture a, b;
    setup_model(&a, &c, 1, LJ_RECOMPUTE_NONE);
    setup_model(&b, &c, 0, LJ_RECOMPUTE_NONE);
    const double la = loss_and_grads(&a), lb = loss_and_grads(&b);
    assert_true(fabs(la - lb) <= 1e-6 * fabs(la));
    const float *ga = (const float *)a.m.grads, *gb = (const float *)b.m.grads;
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < a.m.layout.total; i++) {
        const double d = (double)ga[i] - (double)gb[i];
        num += d * d;
        den += (double)ga[i] * ga[i];
    }
    assert_true(sqrt(num / den) < 1e-5);
    teardown_model(&a);
    teardown_model(&b);
}

static void test_adamw_lowers_loss(void **state) {
    (void)state;
    lj_model_config c = small_config(1);
    fixture f;
    setup_model(&f, &c, 1, LJ_RECOMPUTE_NONE);
    lj_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0};
    lj_adamw_segment *seg;
    const int nseg = lj_adamw_segments(&f.m.layout, &ac, &seg);
    double first = 0.0, last = 0.0;
    for (int step = 1; step <= 10; step++) {
        const double loss = loss_and_grads(&f);
        if (step == 1) first = loss;
        last = loss;
        lj_dp single = LJ_DP_SINGLE;
        const double norm = lj_dp_optimizer_step(&single, &f.m, seg, nseg, &ac, 1e-2f, step);
        assert_true(norm > 0.0 && isfinite(norm));
    }
    assert_true(last < first - 0.5);
    free(seg);
    teardown_model(&f);
}

/* lj_dp_train_step (the whole step in one call: on a GPU with graphs, one CUDA graph) runs the
 * same ops as zero-grad + forward + backward + lj_dp_optimizer_step: bit-identical on the CPU,
 * with the lr and step changing every step (read from the AdamW step scalars in memory). */
static void test_train_step_matches_eager(void **state) {
    (void)state;
    lj_model_config c = small_config(0);
    fixture a, b;
    setup_model(&a, &c, 1, LJ_RECOMPUTE_NONE);
    setup_model(&b, &c, 1, LJ_RECOMPUTE_NONE);
    a.m.opt.graphs = 1; /* no graph entries on the CPU: the step runs eagerly */
    lj_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 0};
    lj_adamw_segment *seg;
    const int nseg = lj_adamw_segments(&a.m.layout, &ac, &seg);
    lj_dp single = LJ_DP_SINGLE;
    const float dloss = 1.0f / (B * T);
    for (int step = 1; step <= 4; step++) {
        const float lr = 1e-2f / (float)step;
        if (step == 3) ac.max_grad_norm = 0.0f; /* clipping off from step 3 */
        const double na = lj_dp_train_step(&single, &a.m, seg, nseg, &ac, lr, step, dloss);
        const double la = lj_model_mean_loss(&a.m);
        const double lb = loss_and_grads(&b);
        const double nb = lj_dp_optimizer_step(&single, &b.m, seg, nseg, &ac, lr, step);
        assert_true(la == lb);
        assert_true(na == nb);
        assert_memory_equal(a.m.master, b.m.master, (size_t)a.m.layout.total * sizeof(float));
        assert_memory_equal(a.m.adam_m, b.m.adam_m, (size_t)a.m.layout.total * sizeof(float));
        assert_memory_equal(a.m.adam_v, b.m.adam_v, (size_t)a.m.layout.total * sizeof(float));
    }
    free(seg);
    teardown_model(&a);
    teardown_model(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients_finite_differences),
        cmocka_unit_test(test_recompute_is_bit_exact),
        cmocka_unit_test(test_fused_matches_unfused),
        cmocka_unit_test(test_adamw_lowers_loss),
        cmocka_unit_test(test_train_step_matches_eager),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
