/* test_plan.c: the static memory plan: the bytes allocated equal the plan exactly for many
 * configurations (the FP8 recipes' too), buffers lie inside their arenas without overlap, and
 * recompute policies shrink the saved activations as they should. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "parallel/zero3.h"
#include "plan/plan.h"
#include "tests/test_util.h"
#include "parallel/parallel.h"


static void check_layout(const lj_plan *p) {
    size_t sum = 0;
    for (int a = 0; a < LJ_ARENA_COUNT; a++) sum += p->arena_bytes[a];
    assert_true(sum == p->total_bytes);
    for (int i = 0; i < p->count; i++) {
        const lj_plan_buffer *b = &p->buffers[i];
        assert_true(b->offset % LJ_PLAN_ALIGN == 0);
        assert_true(b->offset + b->bytes <= p->arena_bytes[b->arena]);
        for (int j = i + 1; j < p->count; j++) {
            const lj_plan_buffer *o = &p->buffers[j];
            if (o->arena != b->arena || !o->bytes || !b->bytes) continue;
            assert_true(o->offset >= b->offset + b->bytes || b->offset >= o->offset + o->bytes);
        }
    }
}

/* Allocates the plan on the CPU backend and checks the allocation equals the plan. */
static size_t allocate_and_check(const lj_model_config *c, const lj_model_options *o, const lj_zero_options *z) {
    lj_model m;
    lj_model_init(&m, lj_ops_cpu(), c, o);
    lj_parallelize(&m, NULL, z);
    lj_plan p;
    lj_plan_build(&p, &m);
    check_layout(&p);
    const size_t before = lj_ops_allocated_bytes();
    assert_int_equal(lj_plan_allocate(&p, &m), LJ_OK);
    assert_true(lj_ops_allocated_bytes() - before == p.total_bytes);
    assert_non_null(m.params);
    assert_non_null(m.final_ln);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        assert_non_null(m.layers[l].ln1);
        assert_non_null(m.layers[l].qkv);
        assert_non_null(m.layers[l].mlp_act);
        if (o->kv_cache_tokens) assert_non_null(m.layers[l].kv_cache);
    }
    if (o->training && !o->kv_cache_tokens) {
        assert_non_null(m.grads);
        assert_non_null(m.adam_v);
        assert_non_null(m.d_qkv);
    }
    lj_plan_release(&p, m.ops);
    assert_true(lj_ops_allocated_bytes() == before);
    const size_t total = p.total_bytes;
    lj_plan_free(&p);
    lj_model_free(&m);
    return total;
}

static void test_plan_equals_allocation(void **state) {
    (void)state;
    int configs = 0;
    for (int tie = 0; tie <= 1; tie++) {
        lj_model_config c = lj_test_small_config(3, tie);
        const int shapes[][2] = {{1, 7}, {2, 16}, {3, 33}};
        for (size_t s = 0; s < 3; s++) {
            for (int fused = 0; fused <= 1; fused++) {
                for (int policy = 0; policy < 3; policy++) {
                    for (int training = 0; training <= 1; training++) {
                        lj_model_options o;
                        memset(&o, 0, sizeof o);
                        o.micro_batch_size = shapes[s][0];
                        o.seq_length = shapes[s][1];
                        o.training = training;
                        o.fused = fused;
                        memset(o.recompute, policy, sizeof o.recompute);
                        o.recompute[1] = LJ_RECOMPUTE_NONE; /* mixed policies */
                        allocate_and_check(&c, &o, NULL);
                        configs++;
                    }
                }
            }
        }
        lj_model_options g;
        memset(&g, 0, sizeof g);
        g.micro_batch_size = 1;
        g.seq_length = 9;
        g.fused = 1;
        g.kv_cache_tokens = 40;
        allocate_and_check(&c, &g, NULL);
        configs++;
    }
    assert_true(configs == 74);
}

/* The FP8 recipes' plans: the allocation equals the plan for each recipe and recompute mix;
 * blockwise plans exactly the tensorwise buffers plus its scale tensors, each of the size of its
 * layout (base/fp8.h), N = 2 x 33 tokens and hidden sizes not multiples of 128. */
static void test_plan_fp8_recipes(void **state) {
    (void)state;
    lj_model_config c = lj_test_small_config(3, 0);
    for (int policy = 0; policy < 3; policy++) {
        size_t total[3];
        lj_plan plans[3];
        lj_model models[3];
        for (int r = 0; r < 3; r++) {
            lj_model_options o = lj_test_train_options(2, 33, 1);
            memset(o.recompute, policy, sizeof o.recompute);
            o.recompute[1] = LJ_RECOMPUTE_NONE;
            o.linear_recipe = LJ_LINEAR_RECIPE_FP8;
            o.fp8 = lj_linear_fp8_defaults();
            o.fp8.recipe = (lj_fp8_recipe)r;
            total[r] = allocate_and_check(&c, &o, NULL);
            lj_model_init(&models[r], lj_ops_cpu(), &c, &o);
            lj_parallelize(&models[r], NULL, NULL);
            lj_plan_build(&plans[r], &models[r]);
        }
        assert_true(total[LJ_FP8_RECIPE_DELAYED] == total[LJ_FP8_RECIPE_TENSORWISE]);
        const lj_plan *bw = &plans[LJ_FP8_RECIPE_BLOCKWISE];
        const lj_linear_fp8_state *f = &models[LJ_FP8_RECIPE_BLOCKWISE].linear.fp8;
        const int N = 2 * 33;
        size_t extra = 0;
        int scales = 0;
        for (int i = 0; i < bw->count; i++) {
            const lj_plan_buffer *b = &bw->buffers[i];
            const size_t n = strlen(b->name);
            if (n < 6 || strcmp(b->name + n - 6, "_scale") != 0) continue;
            size_t want = 0;
            if (!strcmp(b->name, "fp8.w_scale") || !strcmp(b->name, "fp8.w_t_scale")) want = (size_t)f->max_wscale * 4;
            else if (!strcmp(b->name, "fp8.x_scale")) want = (size_t)lj_fp8_tile_scales_numel(N, f->max_in) * 4;
            else if (!strcmp(b->name, "fp8.x_t_scale")) want = (size_t)lj_fp8_tile_scales_numel(f->max_in, N) * 4;
            else if (!strcmp(b->name, "fp8.dy_scale")) want = (size_t)lj_fp8_tile_scales_numel(N, f->max_out) * 4;
            else if (!strcmp(b->name, "fp8.dy_t_scale")) want = (size_t)lj_fp8_tile_scales_numel(f->max_out, N) * 4;
            else if (strstr(b->name, "fp8.mlp_act_t_scale")) want = (size_t)lj_fp8_tile_scales_numel(c.intermediate_size, N) * 4;
            else if (strstr(b->name, "fp8.ln1_t_scale") || strstr(b->name, "fp8.ln2_t_scale"))
                want = (size_t)lj_fp8_tile_scales_numel(c.hidden_size, N) * 4;
            assert_true(want > 0 && b->bytes == want);
            extra += (b->bytes + LJ_PLAN_ALIGN - 1) / LJ_PLAN_ALIGN * LJ_PLAN_ALIGN;
            scales++;
        }
        /* six scratch tensors, and three per layer that keeps its FP8 inputs (recompute none) */
        int kept = 0;
        for (int l = 0; l < c.num_hidden_layers; l++) kept += (policy == LJ_RECOMPUTE_NONE || l == 1);
        assert_int_equal(scales, 6 + 3 * kept);
        assert_true(total[LJ_FP8_RECIPE_BLOCKWISE] == total[LJ_FP8_RECIPE_TENSORWISE] + extra);
        for (int r = 0; r < 3; r++) lj_plan_free(&plans[r]), lj_model_free(&models[r]);
    }
}

/* ZeRO-3 per-rank plans (W = 2, 3, every rank): the allocation equals the plan, the shards are
 * about 1/W of the parameters, and the gather and gradient slots are planned buffers. */
static void test_plan_zero3_per_rank(void **state) {
    (void)state;
    int configs = 0;
    for (int tie = 0; tie <= 1; tie++) {
        lj_model_config c = lj_test_small_config(3, tie);
        const int64_t P = lj_config_num_params(&c);
        for (int W = 2; W <= 3; W++) {
            for (int rank = 0; rank < W; rank++) {
                for (int fused = 0; fused <= 1; fused++) {
                    for (int policy = 0; policy < 3; policy++) {
                        lj_model_options o = lj_test_train_options(2, 16, fused);
                        const lj_zero_options z = {.zero_stage = 3, .dp_rank = rank, .dp_world_size = W};
                        memset(o.recompute, policy, sizeof o.recompute);
                        allocate_and_check(&c, &o, &z);
                        lj_model m;
                        lj_model_init(&m, lj_ops_cpu(), &c, &o);
                        lj_parallelize(&m, NULL, &z);
                        assert_non_null(lj_zero3_of(&m));
                        assert_true(m.padded_numel == m.shard_numel && m.shard_begin == 0);
                        assert_true(m.shard_numel * W >= P && m.shard_numel * W <= P + 6 * W * 64);
                        lj_plan p;
                        lj_plan_build(&p, &m);
                        int gather = 0, grad = 0;
                        for (int i = 0; i < p.count; i++) {
                            gather += strncmp(p.buffers[i].name, "zero3.gather.", 13) == 0;
                            grad += strncmp(p.buffers[i].name, "zero3.grad.", 11) == 0;
                            if (!strcmp(p.buffers[i].name, "params")) assert_true(p.buffers[i].bytes == (size_t)m.shard_numel * 4);
                        }
                        assert_true(gather >= 2 && grad == 3);
                        lj_plan_free(&p);
                        lj_model_free(&m);
                        configs++;
                    }
                }
            }
        }
        /* stage 3 on one rank shards nothing: the plan of stage 0 */
        lj_model_options o = lj_test_train_options(2, 16, 1);
        const size_t stage0 = allocate_and_check(&c, &o, NULL);
        const lj_zero_options one = {.zero_stage = 3, .dp_world_size = 1};
        assert_true(allocate_and_check(&c, &o, &one) == stage0);
    }
    assert_true(configs == 2 * (2 + 3) * 2 * 3);
}

/* ZeRO-2 per-rank plans (W = 2, 3, every rank): the allocation equals the plan, the gradient
 * buffer is this rank's shard only (not the full P), three gradient slots are planned, the
 * parameters stay full, and the plan differs from stage 1's exactly by the gradients: the
 * shard plus the slots instead of the padded full buffer. */
static void test_plan_zero2_per_rank(void **state) {
    (void)state;
    for (int tie = 0; tie <= 1; tie++) {
        lj_model_config c = lj_test_small_config(3, tie);
        const int64_t P = lj_config_num_params(&c);
        for (int W = 2; W <= 3; W++) {
            for (int rank = 0; rank < W; rank++) {
                lj_model_options o = lj_test_train_options(2, 16, 1);
                lj_zero_options z = {.zero_stage = 2, .dp_rank = rank, .dp_world_size = W};
                const size_t total2 = allocate_and_check(&c, &o, &z);
                z.zero_stage = 1;
                const size_t total1 = allocate_and_check(&c, &o, &z);
                z.zero_stage = 2;
                lj_model m;
                lj_model_init(&m, lj_ops_cpu(), &c, &o);
                lj_parallelize(&m, NULL, &z);
                assert_non_null(lj_zero3_of(&m));
                assert_false(lj_zero3_of(&m)->shard_params);
                assert_true(m.grad_numel == m.shard_numel && m.padded_numel == m.shard_numel * W);
                assert_true(m.shard_begin == m.shard_numel * rank && m.shard_numel * W >= P);
                assert_false(m.opt.graphs);
                lj_plan p;
                lj_plan_build(&p, &m);
                int grad_slots = 0, gather = 0;
                size_t slot_bytes = 0;
                for (int i = 0; i < p.count; i++) {
                    const lj_plan_buffer *b = &p.buffers[i];
                    if (!strncmp(b->name, "zero3.grad.", 11))
                        grad_slots++, slot_bytes += (b->bytes + LJ_PLAN_ALIGN - 1) / LJ_PLAN_ALIGN * LJ_PLAN_ALIGN;
                    gather += !strncmp(b->name, "zero3.gather.", 13);
                    if (!strcmp(b->name, "grads")) assert_true(b->bytes == (size_t)m.shard_numel * 4);
                    if (!strcmp(b->name, "params")) assert_true(b->bytes == (size_t)m.padded_numel * 4);
                }
                assert_true(grad_slots == 3 && gather == 0);
                /* stage 1 holds the W S padded gradients; stage 2 the shard S plus the slots, and
                 * nothing else differs */
#define ALIGNED(x) (((x) + LJ_PLAN_ALIGN - 1) / LJ_PLAN_ALIGN * LJ_PLAN_ALIGN)
                assert_true(total2 + ALIGNED((size_t)m.padded_numel * 4) ==
                            total1 + ALIGNED((size_t)m.shard_numel * 4) + slot_bytes);
#undef ALIGNED
                lj_plan_free(&p);
                lj_model_free(&m);
            }
        }
    }
}

static void test_recompute_saves_memory(void **state) {
    (void)state;
    lj_model_config c = lj_test_small_config(3, 1);
    c.num_hidden_layers = 8;
    size_t act[3];
    for (int policy = 0; policy < 3; policy++) {
        lj_model_options o = lj_test_train_options(2, 64, 1);
        memset(o.recompute, policy, sizeof o.recompute);
        lj_model m;
        lj_model_init(&m, lj_ops_cpu(), &c, &o);
        lj_parallelize(&m, NULL, NULL);
        lj_plan p;
        lj_plan_build(&p, &m);
        act[policy] = p.arena_bytes[LJ_ARENA_ACTIVATIONS] + p.arena_bytes[LJ_ARENA_SCRATCH];
        lj_plan_free(&p);
        lj_model_free(&m);
    }
    assert_true(act[LJ_RECOMPUTE_SELECTIVE] < act[LJ_RECOMPUTE_NONE]);
    assert_true(act[LJ_RECOMPUTE_FULL] < act[LJ_RECOMPUTE_SELECTIVE]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_equals_allocation),
        cmocka_unit_test(test_plan_fp8_recipes),
        cmocka_unit_test(test_plan_zero3_per_rank),
        cmocka_unit_test(test_plan_zero2_per_rank),
        cmocka_unit_test(test_recompute_saves_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
