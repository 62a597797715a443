/* test_model.c: the whole model on the CPU backend, for the Llama block and the Qwen3 (QK-norm)
 * and Qwen2 (q/k/v biases) parts: gradients against central finite differences of the loss,
 * recompute policies give bit-identical gradients, fused and unfused twins agree, a few AdamW
 * steps on one batch lower the loss, and the one-call training step (lj_dp_train_step) equals
 * the step taken op by op. */
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

/* The same shape as a Qwen3 (QK-norm; head_dim 16, so q/o are [64, 32]: not square) or a Qwen2
 * (q/k/v biases); family LJ_FAMILY_LLAMA gives small_config itself. */
static lj_model_config family_config(lj_model_family family, int tie) {
    lj_model_config c = small_config(tie);
    c.family = family;
    if (family == LJ_FAMILY_QWEN3) {
        c.qk_norm = 1;
        c.head_dim = 16;
        c.rms_norm_eps = 1e-6;
    }
    if (family == LJ_FAMILY_QWEN2) c.qkv_bias = 1;
    return c;
}

static const lj_model_family k_families[] = {LJ_FAMILY_LLAMA, LJ_FAMILY_QWEN3, LJ_FAMILY_QWEN2};

typedef lj_test_model fixture;

static void setup_model(fixture *f, const lj_model_config *c, int fused, int policy) {
    assert_int_equal(lj_test_model_create(f, c, B, T, fused, policy), LJ_OK);
    lj_model_init_weights(&f->m, 42);
    /* norms away from 1 and biases away from 0 so that their gradients matter */
    for (int l = 0; l < f->m.layout.count; l++) {
        const lj_param_info *pi = &f->m.layout.params[l];
        if (pi->kind != LJ_PARAM_NORM && pi->kind != LJ_PARAM_BIAS) continue;
        const float base = pi->kind == LJ_PARAM_NORM ? 1.0f : 0.0f;
        for (int64_t i = 0; i < pi->numel; i++) f->m.master[pi->offset + i] = base + 0.1f * (float)((i * 7 + l) % 5 - 2);
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
    for (int k = 0; k < 6; k++) {
        const int tie = k % 2;
        const lj_model_family family = k_families[k / 2];
        lj_model_config c = family_config(family, tie);
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
                fail_msg("%s tie=%d %s[%lld]: analytic %.6e, finite difference %.6e", lj_model_family_type(family), tie, pi->name,
                         (long long)(best - pi->offset), (double)g[best], fd);
            checked++;
        }
        assert_int_equal(checked, f.m.layout.count);
        teardown_model(&f);
    }
}

static void test_recompute_is_bit_exact(void **state) {
    (void)state;
    for (int k = 0; k < 3; k++) {
        lj_model_config c = family_config(k_families[k], 0);
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
}

static void test_fused_matches_unfused(void **state) {
    (void)state;
    for (int k = 0; k < 3; k++) {
        lj_model_config c = family_config(k_families[k], 1);
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
}

static void test_adamw_lowers_loss(void **state) {
    (void)state;
    for (int k = 0; k < 3; k++) {
        lj_model_config c = family_config(k_families[k], 1);
        fixture f;
        setup_model(&f, &c, 1, LJ_RECOMPUTE_NONE);
        lj_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, LJ_WD_MEGATRON, 0};
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
        print_message("%s: loss %.4f -> %.4f after 10 AdamW steps\n", lj_model_family_type(k_families[k]), first, last);
        assert_true(last < first - 0.5);
        free(seg);
        teardown_model(&f);
    }
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
    lj_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, LJ_WD_MEGATRON, 0};
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

/* Generation through the KV cache (a prefill of 5 tokens, then one token at a time) gives the
 * logits of the full forward at the same positions, for each family (the bias and QK-norm run
 * in the decode path too). */
static void test_decode_matches_forward(void **state) {
    (void)state;
    for (int k = 0; k < 3; k++) {
        lj_model_config c = family_config(k_families[k], 0);
        fixture f;
        assert_int_equal(lj_test_model_create(&f, &c, 1, T, 0, LJ_RECOMPUTE_NONE), LJ_OK);
        lj_model_init_weights(&f.m, 7);
        int32_t tokens[T + 1];
        for (int i = 0; i <= T; i++) tokens[i] = (i * 29 + 5) % V;
        lj_model_set_batch(&f.m, tokens);
        float *full = lj_malloc((size_t)T * V * sizeof(float)), *got = lj_malloc((size_t)V * sizeof(float));
        lj_model_logits(&f.m, full);
        float *weights = lj_malloc((size_t)f.m.layout.total * sizeof(float));
        lj_model_get_weights(&f.m, weights);
        lj_model_options o;
        memset(&o, 0, sizeof o);
        o.micro_batch_size = 1;
        o.seq_length = T;
        o.kv_cache_tokens = T;
        o.fused = 1;
        lj_test_model g;
        lj_model_init(&g.m, lj_ops_cpu(), &c, &o);
        lj_parallelize(&g.m, NULL, NULL);
        lj_plan_build(&g.p, &g.m);
        assert_int_equal(lj_plan_allocate(&g.p, &g.m), LJ_OK);
        lj_model_upload_rope(&g.m);
        lj_model_set_weights(&g.m, weights);
        for (int p = 4; p < 8; p++) {
            if (p == 4) lj_model_decode(&g.m, tokens, 5, 0, got);
            else lj_model_decode(&g.m, tokens + p, 1, p, got);
            double num = 0, den = 0;
            for (int v = 0; v < V; v++) {
                const double d = (double)got[v] - full[(size_t)p * V + v];
                num += d * d;
                den += (double)full[(size_t)p * V + v] * full[(size_t)p * V + v];
            }
            if (sqrt(num / den) > 1e-5)
                fail_msg("%s: decode logits at position %d differ from the forward's: %.3e", lj_model_family_type(c.family), p,
                         sqrt(num / den));
        }
        lj_test_model_destroy(&g);
        free(weights), free(full), free(got);
        teardown_model(&f);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients_finite_differences),
        cmocka_unit_test(test_recompute_is_bit_exact),
        cmocka_unit_test(test_fused_matches_unfused),
        cmocka_unit_test(test_adamw_lowers_loss),
        cmocka_unit_test(test_train_step_matches_eager),
        cmocka_unit_test(test_decode_matches_forward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
