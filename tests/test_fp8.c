/* test_fp8.c: the FP8 linear recipe (model/linear.h) in the whole model on the CPU backend's
 * exact emulation, at shapes that are not multiples of 16 (hidden 40, intermediate 56, head dim
 * 10, N = 26 tokens):
 *   - the recipe tables: found by name and from the options, and which linears are FP8
 *     (--first-last-layers-bf16);
 *   - the loss and every gradient against the fp32 model, within the formats' rounding (bounds
 *     below);
 *   - delayed scaling's state: the amax recorded for a tensor is its max |x|, and the next pass's
 *     scale is fp8_max / amax;
 *   - the recipe state (amax histories, scales) is what a resume needs: restored with the
 *     weights and moments, three more steps give the same losses bit for bit; without it they
 *     differ;
 *   - the blockwise recipe's ops (fp8_quantize_tiles, fp8_quantize_blocks, fp8_matmul_blockwise)
 *     at shapes that are not multiples of 128 (partial tiles): every tile's factor is 1/(448 /
 *     its own amax), 1 for an all-zero tile and in the layouts' padding, the codes are
 *     lj_fp8_from_f32 of x times the tile's scale, the columnwise cast is the rowwise cast of the
 *     transpose, a block-scaled transpose has the transposed codes and grid, an outlier costs
 *     only its own tile precision, and the GEMM is the product of the dequantized operands; and
 *     the recipe through the model, against fp32, and with kept FP8 inputs equal to recast ones;
 *   - --fp8-param-gather's codes in the weights' places of bf16 params (one rank): the plan, the
 *     upload, the cast and AdamW's segments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "parallel/dp.h"
#include "plan/plan.h"
#include "tests/test_util.h"

enum { B = 2, T = 13 };

static lj_model_config odd_config(int layers) {
    lj_model_config c = lj_test_small_config(layers, 0);
    c.hidden_size = 40;
    c.intermediate_size = 56;
    c.head_dim = 10;
    c.initializer_range = 0.05;
    return c;
}

static lj_linear_fp8_options fp8_options(int hybrid, lj_fp8_recipe recipe, int history, int algo_max) {
    lj_linear_fp8_options o = lj_linear_fp8_defaults();
    o.hybrid = hybrid;
    o.recipe = recipe;
    o.amax_history_len = history;
    o.amax_compute_max = algo_max;
    return o;
}

/* A training model with every layer's recompute policy `policy`; fp8 NULL: the default (fp32)
 * recipe. */
static void create_policy(lj_test_model *t, const lj_model_config *c, const lj_linear_fp8_options *fp8, int policy) {
    lj_model_options o = lj_test_train_options(B, T, 1);
    memset(o.recompute, policy, sizeof o.recompute);
    if (fp8) {
        o.linear_recipe = LJ_LINEAR_RECIPE_FP8;
        o.fp8 = *fp8;
    }
    lj_model_init(&t->m, lj_ops_cpu(), c, &o);
    lj_parallelize(&t->m, NULL, NULL);
    lj_plan_build(&t->p, &t->m);
    assert_int_equal(lj_plan_allocate(&t->p, &t->m), LJ_OK);
    lj_model_upload_rope(&t->m);
    lj_model_init_weights(&t->m, 42);
    int32_t tokens[B * (T + 1)];
    for (int i = 0; i < B * (T + 1); i++) tokens[i] = (i * 37 + 11) % c->vocab_size;
    lj_model_set_batch(&t->m, tokens);
}

/* The same without recompute (the FP8 linears keep their inputs in FP8). */
static void create(lj_test_model *t, const lj_model_config *c, const lj_linear_fp8_options *fp8) {
    create_policy(t, c, fp8, LJ_RECOMPUTE_NONE);
}

static double loss_and_grads(lj_test_model *t) {
    t->m.ops->memset_zero(t->m.grads, (size_t)t->m.layout.total * sizeof(float));
    lj_model_forward(&t->m, 1, 1.0f / (B * T));
    lj_model_backward(&t->m);
    return lj_model_mean_loss(&t->m);
}

static double rel_l2(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
    return sqrt(num / (den > 0 ? den : 1));
}

static void test_bf16_layers(void **state) {
    (void)state;
    lj_model_config c = odd_config(3);
    lj_linear_fp8_options o = fp8_options(1, LJ_FP8_RECIPE_TENSORWISE, 1, 0);
    o.bf16_layers_start = o.bf16_layers_end = 1;
    lj_test_model t;
    create(&t, &c, &o);
    assert_true(t.m.linear.fp8.active);
    assert_int_equal(t.m.linear.fp8.num_linears, 4);
    for (int k = 0; k < 4; k++) {
        assert_int_equal(t.m.linear.fp8.slot[0][k], -1);
        assert_int_equal(t.m.linear.fp8.slot[1][k], k);
        assert_int_equal(t.m.linear.fp8.slot[2][k], -1);
    }
    assert_true(isfinite(loss_and_grads(&t)));
    lj_test_model_destroy(&t);
}

/* Bounds: E4M3 rounds to 2^-4 relative, E5M2 to 2^-3, so one GEMM of rounded operands is within
 * about 5% (relative L2) of the exact one (the op harness's fp8_matmul rows). Through the model
 * (initializer_range 0.05): the loss within 0.5% (measured 0.1-0.2%), every gradient within
 * 0.15 relative L2 with E4M3 gradients and 0.20 with E5M2 ones (hybrid; measured up to 0.12 and
 * 0.14: a weight gradient passes through the dgrad GEMMs of the layers above it and its own
 * wgrad GEMM). */
static void check_against_fp32(int hybrid, lj_fp8_recipe recipe, double grad_tol) {
    lj_model_config c = odd_config(2);
    lj_linear_fp8_options o = fp8_options(hybrid, recipe, 1, 0);
    lj_test_model ref, f8;
    create(&ref, &c, NULL);
    create(&f8, &c, &o);
    const double l_ref = loss_and_grads(&ref);
    double l_f8 = loss_and_grads(&f8);
    if (recipe == LJ_FP8_RECIPE_DELAYED) l_f8 = loss_and_grads(&f8); /* the first pass has scales 1 */
    print_message("fp8 %s %s: loss %.6f vs fp32 %.6f\n", hybrid ? "hybrid" : "e4m3", lj_fp8_recipe_name(recipe), l_f8,
                  l_ref);
    assert_true(fabs(l_f8 - l_ref) / l_ref < 0.005);
    for (int i = 0; i < ref.m.layout.count; i++) {
        const lj_param_info *pi = &ref.m.layout.params[i];
        const double e = rel_l2((float *)f8.m.grads + pi->offset, (float *)ref.m.grads + pi->offset, pi->numel);
        if (e > grad_tol) print_message("gradient %s: rel_l2 %.4f > %.2f\n", pi->name, e, grad_tol);
        assert_true(e <= grad_tol);
    }
    lj_test_model_destroy(&ref);
    lj_test_model_destroy(&f8);
}

static void test_against_fp32_tensorwise_e4m3(void **state) {
    (void)state;
    check_against_fp32(0, LJ_FP8_RECIPE_TENSORWISE, 0.15);
}
static void test_against_fp32_tensorwise_hybrid(void **state) {
    (void)state;
    check_against_fp32(1, LJ_FP8_RECIPE_TENSORWISE, 0.20);
}
static void test_against_fp32_delayed_hybrid(void **state) {
    (void)state;
    check_against_fp32(1, LJ_FP8_RECIPE_DELAYED, 0.20);
}
static void test_against_fp32_blockwise_hybrid(void **state) {
    (void)state;
    check_against_fp32(1, LJ_FP8_RECIPE_BLOCKWISE, 0.20);
}
static void test_against_fp32_blockwise_e4m3(void **state) {
    (void)state;
    check_against_fp32(0, LJ_FP8_RECIPE_BLOCKWISE, 0.15);
}

static float max_abs(const float *x, int64_t n) {
    float m = 0;
    for (int64_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

static void test_delayed_state(void **state) {
    (void)state;
    lj_model_config c = odd_config(2);
    lj_linear_fp8_options o = fp8_options(1, LJ_FP8_RECIPE_DELAYED, 1, 0);
    lj_test_model t;
    create(&t, &c, &o);
    const lj_linear_fp8_state *f = &t.m.linear.fp8;
    const int F = f->num_linears;
    assert_int_equal(F, 8);
    (void)loss_and_grads(&t);
    /* linear 0 is layer 0's QKV: x = ln1 of layer 0 (computed again here: without recompute the
     * layers share the act-dtype buffer), W = q|k|v */
    const int N = B * T, C = c.hidden_size;
    float *ln1 = lj_malloc((size_t)N * C * sizeof(float)), *rstd = lj_malloc((size_t)N * sizeof(float));
    t.m.ops->rmsnorm_forward(ln1, rstd, t.m.residual[0], lj_model_param(&t.m, lj_param_index(&t.m.layout, 0, LJ_P_LN1)), N, C,
                             t.m.spec.eps);
    const float ax = max_abs(ln1, (int64_t)N * C);
    free(ln1), free(rstd);
    const int p = lj_linear_param(&t.m.layout, LJ_LINEAR_QKV, 0);
    const lj_linear qkv = lj_linear_of(&t.m.linear, LJ_LINEAR_QKV, 0, lj_model_param(&t.m, p), NULL);
    assert_int_equal(qkv.slot, 0);
    const float aw = max_abs(qkv.w, (int64_t)qkv.in_features * qkv.out_features);
    assert_true(f->amax_history[0] == ax);
    assert_true(f->amax_history[1] == aw);
    assert_true(f->amax_history[2 * F] > 0.0f); /* its dy */
    assert_true(f->scale[0] == 1.0f);          /* the first pass ran at scale 1 */
    const float ady = f->amax_history[2 * F];
    lj_linear_pass_begin(&t.m.linear, 1);
    assert_true(f->scale[0] == 448.0f / ax && f->scale[1] == 448.0f / aw && f->scale[2 * F] == 57344.0f / ady);
    assert_true(f->scale_inv[0] == 1.0f / f->scale[0]);
    assert_true(f->amax_history[0] == 0.0f); /* ready to record */
    lj_test_model_destroy(&t);
}

/* Keeping the FP8 inputs (no recompute) gives the loss and every gradient bit for bit of casting
 * them again from recomputed act-dtype inputs (selective recompute): the same codes, the same
 * scales. Every recipe (blockwise: the columnwise tiles and their factors kept). */
static void test_saved_inputs_equal_recast(void **state) {
    (void)state;
    lj_model_config c = odd_config(3);
    const lj_fp8_recipe recipes[3] = {LJ_FP8_RECIPE_TENSORWISE, LJ_FP8_RECIPE_DELAYED, LJ_FP8_RECIPE_BLOCKWISE};
    for (int r = 0; r < 3; r++) {
        lj_linear_fp8_options o = fp8_options(1, recipes[r], 1, 0);
        lj_test_model kept, recast;
        create_policy(&kept, &c, &o, LJ_RECOMPUTE_NONE);
        create_policy(&recast, &c, &o, LJ_RECOMPUTE_SELECTIVE);
        assert_non_null(kept.m.linear.fp8.saved_t[0]);
        assert_null(recast.m.linear.fp8.saved_t[0]);
        if (recipes[r] == LJ_FP8_RECIPE_BLOCKWISE) assert_non_null(kept.m.linear.fp8.saved_t_sinv[0]);
        else assert_null(kept.m.linear.fp8.saved_t_sinv[0]);
        for (int pass = 0; pass < 2; pass++) { /* the second pass runs on delayed scales */
            const double a = loss_and_grads(&kept), b = loss_and_grads(&recast);
            assert_true(a == b);
            assert_memory_equal(kept.m.grads, recast.m.grads, (size_t)kept.m.layout.total * sizeof(float));
        }
        lj_test_model_destroy(&kept);
        lj_test_model_destroy(&recast);
    }
}

/* The norm with the input cast of the linear after it fused (lj_linear_norm_forward returns 1, the
 * forward is told input_cast) gives the bits of the norm followed by the forward's own cast: the
 * linear's output, the norm's output, rstd and residual, the kept FP8 transpose and the recipe
 * state, in the plain and the residual form, under delayed and tensorwise scaling. Nothing is cast
 * with the fused kernels off or without a linear after the norm (the final norm), nor by "bf16". */
static void test_norm_cast(void **state) {
    (void)state;
    lj_model_config c = odd_config(2);
    const int N = B * T, C = c.hidden_size;
    const float eps = (float)c.rms_norm_eps;
    const lj_fp8_recipe recipes[2] = {LJ_FP8_RECIPE_DELAYED, LJ_FP8_RECIPE_TENSORWISE};
    for (int r = 0; r < 2; r++) {
        lj_linear_fp8_options o = fp8_options(1, recipes[r], 1, 0);
        lj_test_model t;
        create(&t, &c, &o);
        lj_linear_recipe_ctx *lc = &t.m.linear;
        lc->fuse_norm_cast = 1; /* off by default (linear.h) */
        const lj_ops *ops = t.m.ops;
        const int F = lc->fp8.num_linears, out = lc->out_features[LJ_LINEAR_QKV];
        const lj_linear qkv = lj_linear_of(lc, LJ_LINEAR_QKV, 1,
                                           lj_model_param(&t.m, lj_linear_param(&t.m.layout, LJ_LINEAR_QKV, 1)), NULL);
        const void *w = lj_model_param(&t.m, lj_param_index(&t.m.layout, 1, LJ_P_LN1));
        const size_t nt = (size_t)C * lj_fp8_ld(N);
        assert_non_null(lc->fp8.saved_t[qkv.slot]);
        float *x = lj_malloc((size_t)N * C * sizeof(float)), *y = lj_malloc((size_t)N * C * sizeof(float));
        for (int i = 0; i < N * C; i++) x[i] = sinf(0.37f * i) * 2.0f, y[i] = cosf(0.11f * i);
        for (int residual = 0; residual < 2; residual++) {
            float *res[2], *ln[2], *rstd[2], *yq[2], *st[2];
            uint8_t *kept[2];
            for (int pass = 0; pass < 2; pass++) { /* 0: fused, 1: the norm, then the forward's cast */
                res[pass] = lj_calloc((size_t)N * C, sizeof(float)), ln[pass] = lj_calloc((size_t)N * C, sizeof(float));
                rstd[pass] = lj_calloc((size_t)N, sizeof(float)), yq[pass] = lj_calloc((size_t)N * out, sizeof(float));
                st[pass] = lj_calloc((size_t)6 * F, sizeof(float)), kept[pass] = lj_calloc(nt, 1);
                lj_linear_reset(lc);
                lj_linear_pass_begin(lc, 1);
                lj_linear l = qkv;
                if (pass == 0) {
                    l.input_cast = lj_linear_norm_forward(lc, &qkv, res[0], ln[0], rstd[0], x, residual ? y : NULL, w,
                                                          N, eps);
                    assert_int_equal(l.input_cast, 1);
                } else if (residual) {
                    ops->residual_rmsnorm_forward(res[1], ln[1], rstd[1], x, y, w, N, C, eps);
                } else {
                    ops->rmsnorm_forward(ln[1], rstd[1], x, w, N, C, eps);
                }
                lj_linear_forward(lc, &l, yq[pass], ln[pass], N);
                lj_linear_state_get(lc, st[pass]); /* history (H = 1) and scales */
                memcpy(kept[pass], lc->fp8.saved_t[qkv.slot], nt);
            }
            assert_memory_equal(yq[0], yq[1], (size_t)N * out * sizeof(float));
            assert_memory_equal(ln[0], ln[1], (size_t)N * C * sizeof(float));
            assert_memory_equal(rstd[0], rstd[1], (size_t)N * sizeof(float));
            if (residual) assert_memory_equal(res[0], res[1], (size_t)N * C * sizeof(float));
            assert_memory_equal(kept[0], kept[1], nt);
            assert_memory_equal(st[0], st[1], (size_t)6 * F * sizeof(float));
            assert_true(st[0][2 * qkv.slot] > 0.0f); /* the input's amax was recorded */
            for (int pass = 0; pass < 2; pass++)
                free(res[pass]), free(ln[pass]), free(rstd[pass]), free(yq[pass]), free(st[pass]), free(kept[pass]);
        }
        float *ln = lj_calloc((size_t)N * C, sizeof(float)), *rs = lj_calloc((size_t)N, sizeof(float));
        assert_int_equal(lj_linear_norm_forward(lc, NULL, NULL, ln, rs, x, NULL, w, N, eps), 0);
        lc->fused = 0;
        assert_int_equal(lj_linear_norm_forward(lc, &qkv, NULL, ln, rs, x, NULL, w, N, eps), 0);
        lc->fused = 1;
        free(ln), free(rs), free(x), free(y);
        lj_test_model_destroy(&t);
    }
    assert_int_equal(lj_linear_recipe_find("bf16")->norm_forward == NULL, 0);
}

/* A generation model of `c` with serving's FP8 weights ("fp8-w8a8"), fused kernels or not: the
 * weights `params`, each block linear's codes cast once, the scratch bound for T rows. */
static void create_w8a8(lj_test_model *t, const lj_model_config *c, int fused, const float *params, void **scratch) {
    lj_model_options o;
    memset(&o, 0, sizeof o);
    o.micro_batch_size = 1;
    o.seq_length = T;
    o.kv_cache_tokens = T;
    o.fused = fused;
    o.linear_recipe = LJ_LINEAR_RECIPE_FP8_W8A8;
    o.fp8 = lj_linear_fp8_defaults();
    lj_model_init(&t->m, lj_ops_cpu(), c, &o);
    lj_parallelize(&t->m, NULL, NULL);
    lj_plan_build(&t->p, &t->m);
    assert_int_equal(lj_plan_allocate(&t->p, &t->m), LJ_OK);
    lj_model_upload_rope(&t->m);
    lj_model_set_weights(&t->m, params);
    t->m.linear.fuse_norm_cast = fused; /* off by default (linear.h): the fused run takes the fused norm */
    assert_string_equal(t->m.linear.recipe->name, "fp8-w8a8");
    for (int l = 0; l < c->num_hidden_layers; l++)
        for (int k = 0; k < 4; k++)
            lj_linear_keep_weight(&t->m.linear, (lj_linear_kind)k, l,
                                  lj_model_param(&t->m, lj_linear_param(&t->m.layout, (lj_linear_kind)k, l)));
    *scratch = lj_malloc(lj_linear_scratch_bytes(&t->m.linear, T));
    lj_linear_bind_scratch(&t->m.linear, T, *scratch);
}

/* Serving's recipe casts the QKV and gate/up inputs in their norms (current scaling, the amax first):
 * KV-cache decoding (a prompt of 5 tokens, then one at a time) gives the logits of the unfused
 * kernels, where each linear casts its own input, bit for bit. */
static void test_norm_cast_w8a8(void **state) {
    (void)state;
    lj_model_config c = odd_config(2);
    lj_test_model src;
    create(&src, &c, NULL);
    float *params = lj_malloc((size_t)src.m.layout.total * sizeof(float));
    lj_model_get_weights(&src.m, params);
    lj_test_model_destroy(&src);
    lj_test_model f, u;
    void *fs, *us;
    create_w8a8(&f, &c, 1, params, &fs);
    create_w8a8(&u, &c, 0, params, &us);
    const int V = c.vocab_size;
    float *lf = lj_malloc((size_t)V * sizeof(float)), *lu = lj_malloc((size_t)V * sizeof(float));
    int32_t tokens[8];
    for (int i = 0; i < 8; i++) tokens[i] = (i * 37 + 11) % V;
    for (int p = 4; p < 8; p++) {
        const int n = p == 4 ? 5 : 1, p0 = p == 4 ? 0 : p;
        lj_model_decode(&f.m, tokens + p0, n, p0, lf);
        lj_model_decode(&u.m, tokens + p0, n, p0, lu);
        assert_memory_equal(lf, lu, (size_t)V * sizeof(float));
    }
    free(lf), free(lu), free(params), free(fs), free(us);
    lj_test_model_destroy(&f);
    lj_test_model_destroy(&u);
}

/* n AdamW steps on the fixed batch; losses into out[n]. */
static void steps(lj_test_model *t, int first_step, int n, double *out) {
    lj_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, LJ_WD_MEGATRON, 0, 0};
    lj_adamw_segment *seg;
    const int nseg = lj_adamw_segments(&t->m.layout, &ac, &seg);
    lj_dp single = LJ_DP_SINGLE;
    for (int i = 0; i < n; i++) {
        out[i] = loss_and_grads(t);
        (void)lj_dp_optimizer_step(&single, &t->m, seg, nseg, &ac, lj_adamw_lr_of(1e-2f), first_step + i);
    }
    free(seg);
}

static void test_resume_needs_recipe_state(void **state) {
    (void)state;
    lj_model_config c = odd_config(2);
    lj_linear_fp8_options o = fp8_options(1, LJ_FP8_RECIPE_DELAYED, 3, 1);
    lj_test_model a, b, d;
    create(&a, &c, &o);
    double l[6];
    steps(&a, 1, 3, l);
    const int64_t P = a.m.layout.total;
    int64_t nh, ns;
    const int64_t n8 = lj_linear_fp8_state_numel(&a.m.linear.fp8, &nh, &ns);
    assert_int_equal(n8, 3 * 3 * 8 + 3 * 8); /* history [3, 3F] and the 3F scales (their inverses follow) */
    float *w = lj_malloc((size_t)P * 4), *mm = lj_malloc((size_t)P * 4), *vv = lj_malloc((size_t)P * 4);
    float *f8 = lj_malloc((size_t)n8 * 4);
    memcpy(w, a.m.master, (size_t)P * 4), memcpy(mm, a.m.adam_m, (size_t)P * 4), memcpy(vv, a.m.adam_v, (size_t)P * 4);
    lj_linear_state_get(&a.m.linear, f8);
    steps(&a, 4, 3, l + 3);
    /* restored with the recipe state: the same losses */
    create(&b, &c, &o);
    lj_model_set_weights(&b.m, w);
    memcpy(b.m.adam_m, mm, (size_t)P * 4), memcpy(b.m.adam_v, vv, (size_t)P * 4);
    lj_linear_state_set(&b.m.linear, f8);
    double lb[3];
    steps(&b, 4, 3, lb);
    for (int i = 0; i < 3; i++) assert_true(lb[i] == l[3 + i]);
    /* without it (scales back at 1, empty histories): not the same run */
    create(&d, &c, &o);
    lj_model_set_weights(&d.m, w);
    memcpy(d.m.adam_m, mm, (size_t)P * 4), memcpy(d.m.adam_v, vv, (size_t)P * 4);
    double ld[3];
    steps(&d, 4, 3, ld);
    assert_true(ld[0] != l[3] || ld[1] != l[4] || ld[2] != l[5]);
    free(w), free(mm), free(vv), free(f8);
    lj_test_model_destroy(&a);
    lj_test_model_destroy(&b);
    lj_test_model_destroy(&d);
}

/* ---- the blockwise recipe's ops ------------------------------------------------------ */

enum { BR = 200, BC = 300 }; /* 128 + 72 rows, 2 x 128 + 44 columns: partial tiles both ways */

/* x[BR, BC]: values of about 0.01, an outlier 300 at (5, 7) (row 5's first tile), row 9's second
 * tile all zero, NaN-free. */
static float *tile_input(void) {
    float *x = lj_malloc((size_t)BR * BC * sizeof(float));
    uint32_t st = 12345;
    for (int i = 0; i < BR * BC; i++) {
        st = st * 1664525u + 1013904223u;
        x[i] = 0.01f * ((float)(st >> 8) / 16777216.0f - 0.5f);
    }
    x[5 * BC + 7] = 300.0f;
    for (int c = 128; c < 256; c++) x[9 * BC + c] = 0.0f;
    return x;
}

/* The rowwise tiles of x[rows, cols] checked element by element against the formulas. */
static void check_tiles(const float *x, const uint8_t *q, const float *sinv, int rows, int cols, lj_fp8_format fmt) {
    const int ld = lj_fp8_ld(cols), nb = lj_fp8_nblocks(cols);
    for (int r = 0; r < rows; r++) {
        for (int b = 0; b < nb; b++) {
            float amax = 0;
            const int c0 = b * LJ_FP8_BLOCK, c1 = c0 + LJ_FP8_BLOCK < cols ? c0 + LJ_FP8_BLOCK : cols;
            for (int c = c0; c < c1; c++) amax = fmaxf(amax, fabsf(x[(size_t)r * cols + c]));
            const float s = amax > 0 ? lj_fp8_max(fmt) / amax : 1.0f;
            assert_true(sinv[(size_t)b * lj_fp8_round4(rows) + r] == 1.0f / s);
            for (int c = c0; c < c1; c++) {
                const float v = x[(size_t)r * cols + c];
                assert_int_equal(q[(size_t)r * ld + c], lj_fp8_from_f32(v * s, fmt));
                /* within half an FP8 step at the tile's scale: 2^-4 relative (E4M3 normals; E5M2
                 * 2^-3), or half the smallest subnormal (2^-10; E5M2 2^-17) in the scaled units */
                const float d = lj_fp8_to_f32(q[(size_t)r * ld + c], fmt) / s;
                const float rel = fmt == LJ_FP8_E4M3 ? 0.0625f : 0.125f;
                const float sub = ldexpf(1.0f, fmt == LJ_FP8_E4M3 ? -10 : -17);
                assert_true(fabsf(d - v) <= fmaxf(fabsf(v) * rel, sub / s));
            }
        }
        for (int c = cols; c < ld; c++) assert_int_equal(q[(size_t)r * ld + c], 0);
    }
    for (int b = 0; b < nb; b++)
        for (int r = rows; r < lj_fp8_round4(rows); r++) assert_true(sinv[(size_t)b * lj_fp8_round4(rows) + r] == 1.0f);
}

static void test_blockwise_tiles(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    float *x = tile_input();
    uint8_t *q = lj_malloc((size_t)BR * lj_fp8_ld(BC)), *qt = lj_malloc((size_t)BC * lj_fp8_ld(BR));
    uint8_t *qt_ref = lj_malloc((size_t)BC * lj_fp8_ld(BR));
    float *s = lj_malloc((size_t)lj_fp8_tile_scales_numel(BR, BC) * 4);
    float *st = lj_malloc((size_t)lj_fp8_tile_scales_numel(BC, BR) * 4);
    float *st_ref = lj_malloc((size_t)lj_fp8_tile_scales_numel(BC, BR) * 4);
    float *xt = lj_malloc((size_t)BR * BC * sizeof(float));
    for (int r = 0; r < BR; r++)
        for (int c = 0; c < BC; c++) xt[(size_t)c * BR + r] = x[(size_t)r * BC + c];
    float amax = -1;
    ops->fp8_quantize_tiles(q, s, qt, st, x, BR, BC, LJ_FP8_E4M3, &amax);
    assert_true(amax == 300.0f);
    check_tiles(x, q, s, BR, BC, LJ_FP8_E4M3);
    assert_true(s[1 * lj_fp8_round4(BR) + 9] == 1.0f);              /* the zero tile */
    assert_true(s[0 * lj_fp8_round4(BR) + 5] == 1.0f / (448.0f / 300.0f)); /* the outlier's */
    /* the columnwise cast is the rowwise cast of the transpose, bit for bit */
    ops->fp8_quantize_tiles(qt_ref, st_ref, NULL, NULL, xt, BC, BR, LJ_FP8_E4M3, NULL);
    assert_memory_equal(qt, qt_ref, (size_t)BC * lj_fp8_ld(BR));
    assert_memory_equal(st, st_ref, (size_t)lj_fp8_tile_scales_numel(BC, BR) * 4);
    check_tiles(xt, qt, st, BC, BR, LJ_FP8_E4M3);
    /* E5M2 (hybrid's gradients), one pair only */
    ops->fp8_quantize_tiles(NULL, NULL, qt, st, x, BR, BC, LJ_FP8_E5M2, NULL);
    ops->fp8_quantize_tiles(qt_ref, st_ref, NULL, NULL, xt, BC, BR, LJ_FP8_E5M2, NULL);
    assert_memory_equal(qt, qt_ref, (size_t)BC * lj_fp8_ld(BR));
    assert_memory_equal(st, st_ref, (size_t)lj_fp8_tile_scales_numel(BC, BR) * 4);
    check_tiles(xt, qt, st, BC, BR, LJ_FP8_E5M2);
    /* the outlier costs its own tile only: the other tiles of row 5 keep 2^-4 relative precision,
     * where one per-tensor scale (448 / 300) puts values of 0.005 among E4M3's subnormal steps (measured
     * 0.023 against 0.121) */
    double e_tile = 0, e_tensor = 0, den = 0;
    const float st_tensor = 448.0f / 300.0f;
    for (int c = 128; c < BC; c++) {
        const float v = x[5 * BC + c];
        const float d = lj_fp8_to_f32(q[(size_t)5 * lj_fp8_ld(BC) + c], LJ_FP8_E4M3) *
                        s[(size_t)(c / 128) * lj_fp8_round4(BR) + 5];
        const float dt = lj_fp8_to_f32(lj_fp8_from_f32(v * st_tensor, LJ_FP8_E4M3), LJ_FP8_E4M3) / st_tensor;
        e_tile += (double)(d - v) * (d - v), e_tensor += (double)(dt - v) * (dt - v), den += (double)v * v;
    }
    print_message("row 5 beyond the outlier's tile: rel L2 %.4f blockwise, %.4f per tensor\n", sqrt(e_tile / den),
                  sqrt(e_tensor / den));
    assert_true(sqrt(e_tile / den) < 0.04);
    assert_true(sqrt(e_tensor / den) > 0.08 && sqrt(e_tile / den) < sqrt(e_tensor / den) / 3);
    free(x), free(q), free(qt), free(qt_ref), free(s), free(st), free(st_ref), free(xt);
}

static void test_blockwise_blocks(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    float *x = tile_input();
    const int nbr = lj_fp8_nblocks(BR), nbc = lj_fp8_nblocks(BC);
    assert_int_equal(lj_fp8_block_scales_numel(BR, BC), 2 * 4);
    assert_int_equal(lj_fp8_block_scales_numel(BC, BR), 3 * 4);
    uint8_t *q = lj_malloc((size_t)BR * lj_fp8_ld(BC)), *qt = lj_malloc((size_t)BC * lj_fp8_ld(BR));
    float g[8], gt[12], amax = -1;
    ops->fp8_quantize_blocks(q, g, qt, gt, x, BR, BC, LJ_FP8_E4M3, &amax);
    assert_true(amax == 300.0f);
    for (int br = 0; br < nbr; br++) {
        for (int bc = 0; bc < nbc; bc++) {
            float a = 0;
            for (int r = br * 128; r < BR && r < br * 128 + 128; r++)
                for (int c = bc * 128; c < BC && c < bc * 128 + 128; c++) a = fmaxf(a, fabsf(x[(size_t)r * BC + c]));
            const float sc = 448.0f / a;
            assert_true(g[br * 4 + bc] == 1.0f / sc);
            assert_true(gt[bc * 4 + br] == g[br * 4 + bc]); /* the transposed grid */
            for (int r = br * 128; r < BR && r < br * 128 + 128; r++)
                for (int c = bc * 128; c < BC && c < bc * 128 + 128; c++) {
                    const uint8_t code = lj_fp8_from_f32(x[(size_t)r * BC + c] * sc, LJ_FP8_E4M3);
                    assert_int_equal(q[(size_t)r * lj_fp8_ld(BC) + c], code);
                    assert_int_equal(qt[(size_t)c * lj_fp8_ld(BR) + r], code);
                }
        }
        assert_true(g[br * 4 + 3] == 1.0f); /* padding */
    }
    for (int bc = 0; bc < nbc; bc++) assert_true(gt[bc * 4 + 2] == 1.0f && gt[bc * 4 + 3] == 1.0f);
    for (int r = 0; r < BR; r++)
        for (int c = BC; c < lj_fp8_ld(BC); c++) assert_int_equal(q[(size_t)r * lj_fp8_ld(BC) + c], 0);
    for (int c = 0; c < BC; c++)
        for (int r = BR; r < lj_fp8_ld(BR); r++) assert_int_equal(qt[(size_t)c * lj_fp8_ld(BR) + r], 0);
    free(x), free(q), free(qt);
}

/* out = the product of the dequantized operands (double reference, the factors from the scale
 * tensors), for 1x128 x 128x128 (forward, data gradient) and 1x128 x 1x128 (weight gradient),
 * K = 300 (a partial last tile), overwrite and accumulate; and near the exact fp32 product. */
static void test_blockwise_matmul(void **state) {
    (void)state;
    const lj_ops *ops = lj_ops_cpu();
    enum { M = 37, N = 24, K = BC };
    float *a = lj_malloc((size_t)M * K * 4), *b = lj_malloc((size_t)N * K * 4);
    uint32_t st = 777;
    for (int i = 0; i < M * K; i++) st = st * 1664525u + 1013904223u, a[i] = (float)(st >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < N * K; i++) st = st * 1664525u + 1013904223u, b[i] = 0.1f * ((float)(st >> 8) / 16777216.0f - 0.5f);
    a[3 * K + 200] = 40.0f;
    const int ld = lj_fp8_ld(K);
    uint8_t *qa = lj_malloc((size_t)M * ld), *qb = lj_malloc((size_t)N * ld);
    float *sa = lj_malloc((size_t)lj_fp8_tile_scales_numel(M, K) * 4);
    float *sb = lj_malloc((size_t)lj_fp8_tile_scales_numel(N, K) * 4), gb[4];
    float *out = lj_malloc((size_t)M * N * 4);
    void *ws = lj_malloc(ops->fp8_matmul_workspace_bytes(M, N, K));
    ops->fp8_quantize_tiles(qa, sa, NULL, NULL, a, M, K, LJ_FP8_E5M2, NULL);
    for (int blocks = 0; blocks < 2; blocks++) {
        if (blocks) ops->fp8_quantize_blocks(qb, gb, NULL, NULL, b, N, K, LJ_FP8_E4M3, NULL);
        else ops->fp8_quantize_tiles(qb, sb, NULL, NULL, b, N, K, LJ_FP8_E4M3, NULL);
        for (int acc = 0; acc < 2; acc++) {
            for (int i = 0; i < M * N; i++) out[i] = acc ? 1.0f : -7.0f;
            ops->fp8_matmul_blockwise(out, LJ_DTYPE_F32, qa, LJ_FP8_E5M2, sa, 0, qb, LJ_FP8_E4M3, blocks ? gb : sb,
                                      blocks, M, N, K, acc ? LJ_GRAD_ACCUMULATE : LJ_GRAD_OVERWRITE, ws);
            double num = 0, den = 0, num_x = 0;
            for (int m = 0; m < M; m++) {
                for (int n = 0; n < N; n++) {
                    double ref = 0, exact = 0;
                    for (int k = 0; k < K; k++) {
                        const double fa = lj_fp8_to_f32(qa[(size_t)m * ld + k], LJ_FP8_E5M2) *
                                          (double)sa[lj_fp8_tile_scale_index(M, m, k)];
                        const double fb = lj_fp8_to_f32(qb[(size_t)n * ld + k], LJ_FP8_E4M3) *
                                          (double)(blocks ? gb[lj_fp8_block_scale_index(K, n, k)]
                                                          : sb[lj_fp8_tile_scale_index(N, n, k)]);
                        ref += fa * fb;
                        exact += (double)a[(size_t)m * K + k] * b[(size_t)n * K + k];
                    }
                    const double got = out[(size_t)m * N + n] - (acc ? 1.0 : 0.0);
                    num += (got - ref) * (got - ref), den += ref * ref, num_x += (got - exact) * (got - exact);
                }
            }
            print_message("blockwise matmul (%s, %s): rel L2 %.2e vs dequantized, %.4f vs exact\n",
                          blocks ? "1x128 x 128x128" : "1x128 x 1x128", acc ? "+=" : "=", sqrt(num / den),
                          sqrt(num_x / den));
            assert_true(sqrt(num / den) < 1e-6);
            assert_true(sqrt(num_x / den) < 0.08); /* E5M2 x E4M3 rounding */
        }
    }
    free(a), free(b), free(qa), free(qb), free(sa), free(sb), free(out), free(ws);
}

/* The default recipe with FP8 options set is not FP8: nothing planned, nothing changes. */
static void test_default_recipe_untouched(void **state) {
    (void)state;
    lj_model_config c = odd_config(2);
    lj_test_model a, b;
    create(&a, &c, NULL);
    lj_model_options o = lj_test_train_options(B, T, 1);
    o.fp8 = fp8_options(1, LJ_FP8_RECIPE_TENSORWISE, 1, 0); /* the recipe stays DEFAULT */
    lj_model_init(&b.m, lj_ops_cpu(), &c, &o);
    lj_parallelize(&b.m, NULL, NULL);
    lj_plan_build(&b.p, &b.m);
    assert_false(b.m.linear.fp8.active);
    assert_string_equal(b.m.linear.recipe->name, "bf16");
    assert_int_equal(b.p.total_bytes, a.p.total_bytes);
    lj_plan_free(&b.p);
    lj_model_free(&b.m);
    lj_test_model_destroy(&a);
}

/* The recipes are tables chosen once: by name and from the options (FP8 for training plans only),
 * every entry set, and the model runs the one chosen. */
static void test_recipe_tables(void **state) {
    (void)state;
    static const char *names[4] = {"bf16", "delayed", "tensorwise", "blockwise"};
    for (int i = 0; i < 4; i++) {
        const lj_linear_recipe *r = lj_linear_recipe_find(names[i]);
        assert_non_null(r);
        assert_string_equal(r->name, names[i]);
        assert_true(r->fp8_layers && r->plan && r->keeps_inputs && r->plan_layer && r->reset && r->pass_begin &&
                    r->pass_end && r->forward && r->forward_swiglu && r->norm_forward && r->backward && r->state_get &&
                    r->state_set);
        if (i > 0) assert_ptr_equal(lj_linear_recipe_of(LJ_LINEAR_RECIPE_FP8, (lj_fp8_recipe)(i - 1), 1), r);
    }
    assert_null(lj_linear_recipe_find("rowwise"));
    const lj_linear_recipe *bf16 = lj_linear_recipe_find("bf16");
    assert_ptr_equal(lj_linear_recipe_of(LJ_LINEAR_RECIPE_FP8, LJ_FP8_RECIPE_BLOCKWISE, 0), bf16);
    assert_ptr_equal(lj_linear_recipe_of(LJ_LINEAR_RECIPE_DEFAULT, LJ_FP8_RECIPE_TENSORWISE, 1), bf16);
    int first, end;
    lj_linear_fp8_options o = fp8_options(1, LJ_FP8_RECIPE_TENSORWISE, 1, 0);
    o.bf16_layers_start = 1, o.bf16_layers_end = 2;
    bf16->fp8_layers(&o, 5, &first, &end);
    assert_true(first >= end); /* none */
    lj_linear_recipe_find("tensorwise")->fp8_layers(&o, 5, &first, &end);
    assert_int_equal(first, 1), assert_int_equal(end, 3);
    lj_model_config c = odd_config(2);
    lj_test_model t;
    create(&t, &c, &o); /* 1 + 2 bf16 layers of two: nothing left in FP8, so "bf16" runs */
    assert_ptr_equal(t.m.linear.recipe, bf16);
    lj_test_model_destroy(&t);
    o.bf16_layers_start = o.bf16_layers_end = 0;
    create(&t, &c, &o);
    assert_string_equal(t.m.linear.recipe->name, "tensorwise");
    lj_test_model_destroy(&t);
}

/* --fp8-param-gather on one rank of a backend whose params are bf16 (model/linear.h): the CPU
 * table with its param dtype set to bf16, planned and allocated but never run forward (the CPU's
 * kernels read f32 weights). Layer 0 stays bf16. Each FP8 linear's codes and transpose lie in
 * its weight's place in `params`: the plan has no fp8.layers.* and no weight scratch; the upload
 * of weights writes the master and the bf16 copy of everything else, not those places; the cast
 * writes there the codes of the master rounded to bf16 (tensorwise: with that copy's amax) and
 * their transpose; AdamW's segments (lj_dp_segments) are master_only over exactly those weights;
 * the weights read back are the master's. The same model with f32 params (the CPU as it is)
 * keeps the codes beside the params, and so does a shape whose codes do not fit (hidden 40). */
/* max |bf16(x[i])| over x[n]: a loop of its own, kept out of the vectorizer (GCC 12's aarch64
 * vectorizer fails on this reduction inlined into the test below: an internal compiler error) */
static __attribute__((noinline)) float bf16_amax(const float *x, int64_t n) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const float v = fabsf(lj_bf16_to_f32(lj_f32_to_bf16(x[i])));
        if (v > amax) amax = v;
    }
    return amax;
}

static void test_param_gather_in_place(void **state) {
    (void)state;
    lj_ops ops = *lj_ops_cpu();
    ops.param_dtype = LJ_DTYPE_BF16;
    const lj_model_config c = lj_test_small_config(3, 0);
    lj_model_options o = lj_test_train_options(B, T, 1);
    o.linear_recipe = LJ_LINEAR_RECIPE_FP8;
    o.fp8 = fp8_options(1, LJ_FP8_RECIPE_TENSORWISE, 1, 0);
    o.fp8.param_gather = 1;
    o.fp8.bf16_layers_start = 1;
    o.fp8.bf16_layers_end = 0;
    /* which buffers the plans of the three have */
    const lj_model_config odd = odd_config(3);
    const struct { const lj_ops *ops; const lj_model_config *cfg; int in_place; } runs[3] = {
        {&ops, &c, 1}, {lj_ops_cpu(), &c, 0}, {&ops, &odd, 0}};
    for (int r = 0; r < 3; r++) {
        lj_model m;
        lj_plan p;
        lj_model_init(&m, runs[r].ops, runs[r].cfg, &o);
        lj_parallelize(&m, NULL, NULL);
        lj_plan_build(&p, &m);
        int codes = 0, scratch = 0;
        for (int i = 0; i < p.count; i++) {
            codes += !strncmp(p.buffers[i].name, "fp8.layers.", 11);
            scratch += !strcmp(p.buffers[i].name, "fp8.w") || !strcmp(p.buffers[i].name, "fp8.w_t");
        }
        assert_int_equal(codes, runs[r].in_place ? 0 : 2 * 4 * 2);
        assert_int_equal(scratch, 0);
        lj_plan_free(&p);
        lj_model_free(&m);
    }

    lj_test_model t;
    lj_model_init(&t.m, &ops, &c, &o);
    lj_parallelize(&t.m, NULL, NULL);
    lj_plan_build(&t.p, &t.m);
    assert_int_equal(lj_plan_allocate(&t.p, &t.m), LJ_OK);
    lj_model *m = &t.m;
    const lj_linear_fp8_state *f = &m->linear.fp8;
    assert_true(f->kept && !f->sharded && f->num_linears == 8);
    int64_t co[LJ_LINEAR_FP8_MAX], cn[LJ_LINEAR_FP8_MAX];
    const int nc = lj_linear_codes_in_params(&m->linear, &m->layout, co, cn);
    assert_int_equal(nc, 8);
    const int64_t P = m->layout.total;
    float *w0 = lj_malloc((size_t)P * sizeof(float)), *w1 = lj_malloc((size_t)P * sizeof(float));
    const uint16_t *params = m->params;
    lj_model_init_weights(m, 42);
    /* the bf16 copy everywhere but the codes' places, which the upload leaves as they were (zero) */
    int64_t in_codes = 0, r = 0;
    for (int64_t i = 0; i < P; i++) {
        while (r < nc && i >= co[r] + cn[r]) r++;
        const int inside = r < nc && i >= co[r];
        in_codes += inside;
        if (inside) assert_int_equal(params[i], 0);
        else assert_int_equal(params[i], lj_f32_to_bf16(m->master[i]));
    }
    int64_t want = 0;
    for (int l = 1; l < 3; l++)
        for (int k = 0; k < 4; k++) want += (int64_t)m->linear.out_features[k] * m->linear.in_features[k];
    assert_int_equal(in_codes, want);
    /* the cast: the codes of bf16(master) with that copy's amax, then the transpose */
    lj_linear_sync_weights(&m->linear);
    for (int l = 1; l < 3; l++) {
        for (int k = 0; k < 4; k++) {
            const int s = f->slot[l][k], in = m->linear.in_features[k], out = m->linear.out_features[k];
            const int64_t off = m->layout.params[lj_linear_param(&m->layout, (lj_linear_kind)k, l)].offset;
            const uint8_t *q = (const uint8_t *)(params + off), *qt = q + (size_t)out * lj_fp8_ld(in);
            assert_ptr_equal(f->wkept[s], q);
            assert_ptr_equal(f->wkept_t[s], qt);
            const float amax = bf16_amax(m->master + off, (int64_t)out * in);
            const float scale = lj_fp8_current_scale(amax, 448.0f);
            for (int row = 0; row < out; row++) {
                for (int col = 0; col < in; col++) {
                    const float v = lj_bf16_to_f32(lj_f32_to_bf16(m->master[off + (int64_t)row * in + col]));
                    const uint8_t code = lj_fp8_from_f32(v * scale, LJ_FP8_E4M3);
                    assert_int_equal(q[(size_t)row * lj_fp8_ld(in) + col], code);
                    assert_int_equal(qt[(size_t)col * lj_fp8_ld(out) + row], code);
                }
            }
            assert_true(f->wamax[s] == amax);
        }
    }
    /* AdamW updates the master alone over the codes' places */
    const lj_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, LJ_WD_MEGATRON, 0, 0};
    lj_adamw_segment *seg;
    const int ns = lj_dp_segments(m, &ac, &seg);
    int64_t covered = 0, mo = 0;
    for (int i = 0; i < ns; i++) {
        covered += seg[i].count;
        if (!seg[i].master_only) {
            for (int k = 0; k < nc; k++)
                assert_true(seg[i].offset + seg[i].count <= co[k] || co[k] + cn[k] <= seg[i].offset);
            continue;
        }
        mo += seg[i].count;
        int inside = 0;
        for (int k = 0; k < nc; k++) inside |= seg[i].offset >= co[k] && seg[i].offset + seg[i].count <= co[k] + cn[k];
        if (!inside) { /* a run of adjacent ranges (q|k|v and o are neighbours) */
            int64_t at = seg[i].offset;
            for (int k = 0; k < nc; k++)
                if (co[k] == at) at += cn[k];
            assert_int_equal(at, seg[i].offset + seg[i].count);
        }
    }
    assert_int_equal(covered, P);
    assert_int_equal(mo, want);
    free(seg);
    /* new weights: the master and the copy outside the codes, which stay until the next cast */
    lj_model_get_weights(m, w0);
    for (int64_t i = 0; i < P; i++) w1[i] = w0[i] * 0.5f + 0.001f;
    uint8_t *before = lj_malloc((size_t)P * 2);
    memcpy(before, params, (size_t)P * 2);
    lj_model_set_weights(m, w1);
    assert_true(f->stale);
    r = 0;
    for (int64_t i = 0; i < P; i++) {
        while (r < nc && i >= co[r] + cn[r]) r++;
        if (r < nc && i >= co[r]) assert_memory_equal(params + i, before + 2 * i, 2);
        else assert_int_equal(params[i], lj_f32_to_bf16(w1[i]));
    }
    lj_model_get_weights(m, w0);
    assert_memory_equal(w0, w1, (size_t)P * sizeof(float));
    free(before);
    free(w0);
    free(w1);
    lj_test_model_destroy(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recipe_tables),
        cmocka_unit_test(test_bf16_layers),
        cmocka_unit_test(test_against_fp32_tensorwise_e4m3),
        cmocka_unit_test(test_against_fp32_tensorwise_hybrid),
        cmocka_unit_test(test_against_fp32_delayed_hybrid),
        cmocka_unit_test(test_against_fp32_blockwise_hybrid),
        cmocka_unit_test(test_against_fp32_blockwise_e4m3),
        cmocka_unit_test(test_delayed_state),
        cmocka_unit_test(test_saved_inputs_equal_recast),
        cmocka_unit_test(test_norm_cast),
        cmocka_unit_test(test_norm_cast_w8a8),
        cmocka_unit_test(test_resume_needs_recipe_state),
        cmocka_unit_test(test_blockwise_tiles),
        cmocka_unit_test(test_blockwise_blocks),
        cmocka_unit_test(test_blockwise_matmul),
        cmocka_unit_test(test_default_recipe_untouched),
        cmocka_unit_test(test_param_gather_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
