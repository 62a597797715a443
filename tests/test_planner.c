/* test_planner.c: the recompute planner: the breakdown covers every plan byte, the search
 * equals an exhaustive sweep, picks no recompute when memory is plenty and more as it
 * shrinks, refuses (with the numbers) when nothing fits, picks the largest micro-batch when
 * the cost model favours it; the predicted peak is the plan plus the fixed overheads; the
 * cost model's recompute terms; the throughput cache; CHECKPOINT_OPTIMIZATION and
 * Megatron-LM's recompute flags. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan/planner.h"
#include "tests/test_util.h"
#include "parallel/parallel.h"

static lj_model_config small_config(int layers) { return lj_test_small_config(layers, 1); }

/* A target with fixed throughputs and no fixed overheads unless given. */
static lj_planner_target make_target(const lj_ops *ops, size_t memory, size_t lib, size_t ctx) {
    lj_planner_target t;
    memset(&t, 0, sizeof t);
    t.ops = ops;
    t.device_memory_bytes = memory;
    t.margin_bytes = 0;
    t.library_workspace_bytes = lib;
    t.context_bytes = ctx;
    t.memory_source = "test";
    t.context_source = "test";
    lj_perf_rates_default(&t.rates, "cuda", "test");
    t.fused = 1;
    t.grad_accum_steps = 1;
    return t;
}

/* Exact plan total of (B, first k full, next j selective) built the ordinary way. */
static size_t plan_total(const lj_model_config *c, const lj_ops *ops, int B, int T, int k, int j, int fused) {
    lj_model_options o = lj_test_train_options(B, T, fused);
    for (int l = 0; l < k; l++) o.recompute[l] = LJ_RECOMPUTE_FULL;
    for (int l = k; l < k + j; l++) o.recompute[l] = LJ_RECOMPUTE_SELECTIVE;
    lj_model m;
    lj_model_init(&m, ops, c, &o);
    lj_parallelize(&m, NULL, NULL);
    lj_plan p;
    lj_plan_build(&p, &m);
    const size_t total = p.total_bytes;
    lj_plan_free(&p);
    lj_model_free(&m);
    return total;
}

static void test_breakdown_covers_plan(void **state) {
    (void)state;
    const lj_ops *backends[2] = {lj_ops_cpu(), lj_ops_cuda_describe(NULL)};
    int checked = 0;
    for (int bi = 0; bi < 2; bi++) {
        if (!backends[bi]) continue;
        for (int fused = 0; fused <= 1; fused++) {
            lj_model_config c = small_config(5);
            lj_planner_target t = make_target(backends[bi], (size_t)1 << 40, 12345, 777);
            t.fused = fused;
            lj_planner_candidate cand;
            memset(&cand, 0, sizeof cand);
            cand.micro_batch_size = 3;
            cand.num_full = 2;
            cand.num_selective = 1;
            cand.num_none = 2;
            lj_plan plan;
            lj_mem_breakdown bd;
            lj_planner_candidate_plan(&c, 40, &cand, &t, &plan, &bd);
            size_t sum = 0;
            for (int k = 0; k < LJ_MEM_COUNT; k++) sum += bd.bytes[k];
            assert_true(bd.bytes[LJ_MEM_OTHER] == 0);
            assert_true(sum == bd.peak_bytes);
            assert_true(bd.plan_bytes == plan.total_bytes);
            assert_true(bd.peak_bytes == plan.total_bytes + 12345 + 777);
            assert_true(bd.residual_bytes + bd.layer_bytes[0] + bd.layer_bytes[1] + bd.layer_bytes[2] +
                            bd.other_activation_bytes ==
                        bd.bytes[LJ_MEM_ACTIVATIONS]);
            assert_int_equal(bd.layers[LJ_RECOMPUTE_FULL], 2);
            assert_int_equal(bd.layers[LJ_RECOMPUTE_SELECTIVE], 1);
            assert_int_equal(bd.layers[LJ_RECOMPUTE_NONE], 2);
            assert_true(bd.layer_bytes[LJ_RECOMPUTE_FULL] == 0); /* full layers keep only their input */
            /* 2 layers keep everything, 1 layer keeps all but the norms and the SwiGLU product */
            assert_true(bd.layer_bytes[LJ_RECOMPUTE_NONE] > 2 * bd.layer_bytes[LJ_RECOMPUTE_SELECTIVE]);
            assert_true(bd.bytes[LJ_MEM_RECOMPUTE] > 0);
            assert_true(bd.bytes[LJ_MEM_PARAMETERS] > 0 && bd.bytes[LJ_MEM_GRADIENTS] > 0);
            assert_true(bd.bytes[LJ_MEM_OPTIMIZER] >= (size_t)lj_config_num_params(&c) * 8);
            if (!fused) assert_true(bd.bytes[LJ_MEM_LOGITS_LOSS] > (size_t)3 * 40 * 97);
            lj_plan_free(&plan);
            checked++;
        }
    }
    assert_true(checked >= 2);
}

/* The search's choice equals an exhaustive sweep over every per-layer policy (3^L). */
static void test_search_equals_exhaustive(void **state) {
    (void)state;
    const int L = 4, T = 24;
    lj_model_config c = small_config(L);
    const lj_ops *ops = lj_ops_cpu();
    const size_t none = plan_total(&c, ops, 2, T, 0, 0, 1), full = plan_total(&c, ops, 2, T, L, 0, 1);
    for (int step = 0; step <= 8; step++) {
        const size_t budget = full + (none - full) * (size_t)step / 8;
        lj_planner_target t = make_target(ops, budget, 0, 0);
        lj_planner_result *r = malloc(sizeof *r);
        assert_int_equal(lj_planner_search(&c, T, 2, NULL, &t, r), LJ_OK);
        assert_true(r->found && r->chosen.fits && r->chosen.peak_bytes <= budget);
        double best = 0.0;
        for (int code = 0; code < 81; code++) {
            lj_model_options o = lj_test_train_options(2, T, 1);
            for (int l = 0, x = code; l < L; l++, x /= 3) o.recompute[l] = (uint8_t)(x % 3);
            lj_model m;
            lj_model_init(&m, ops, &c, &o);
            lj_parallelize(&m, NULL, NULL);
            lj_plan p;
            lj_plan_build(&p, &m);
            if (p.total_bytes <= budget) {
                lj_step_cost cost;
                lj_cost_step(&c, &o, ops, &t.rates, 1, &cost);
                if (cost.tokens_per_s > best) best = cost.tokens_per_s;
            }
            lj_plan_free(&p);
            lj_model_free(&m);
        }
        assert_true(r->chosen.cost.tokens_per_s >= best * (1.0 - 1e-12));
        free(r);
    }
}

static void test_none_when_plenty_more_as_memory_shrinks(void **state) {
    (void)state;
    const int L = 6, T = 64;
    lj_model_config c = small_config(L);
    const lj_ops *ops = lj_ops_cpu();
    const size_t none = plan_total(&c, ops, 1, T, 0, 0, 1), full = plan_total(&c, ops, 1, T, L, 0, 1);
    assert_true(none > full);
    double last_recompute = -1.0;
    for (int step = 8; step >= 0; step--) {
        const size_t budget = full + (none - full) * (size_t)step / 8;
        lj_planner_target t = make_target(ops, budget + ((size_t)1 << 20), 0, 0);
        t.margin_bytes = (size_t)1 << 20;
        lj_planner_result *r = malloc(sizeof *r);
        assert_int_equal(lj_planner_search(&c, T, 1, NULL, &t, r), LJ_OK);
        assert_true(r->chosen.peak_bytes <= budget);
        if (step == 8) {
            assert_int_equal(r->chosen.num_none, L); /* plenty: no recompute */
            assert_true(r->chosen.cost.recompute_s == 0.0);
            assert_true(strstr(r->explanation, "none (all 6 layers)") != NULL);
        }
        if (step == 4) assert_true(r->chosen.num_none < L);
        if (step == 0) assert_int_equal(r->chosen.num_full, L); /* exactly the all-full plan */
        /* the feasible set shrinks, so the time spent recomputing never falls */
        assert_true(r->chosen.cost.recompute_s >= last_recompute);
        last_recompute = r->chosen.cost.recompute_s;
        assert_true(strstr(r->explanation, "Chose recompute") != NULL);
        free(r);
    }
    assert_true(last_recompute > 0.0);
}

static void test_refuses_when_nothing_fits(void **state) {
    (void)state;
    const int T = 256;
    lj_model_config c = small_config(3);
    const lj_ops *ops = lj_ops_cpu();
    const size_t full1 = plan_total(&c, ops, 1, T, 3, 0, 1);
    lj_planner_target t = make_target(ops, full1 - 1, 1000, 0);
    lj_planner_result *r = malloc(sizeof *r);
    assert_int_equal(lj_planner_search(&c, T, 0, NULL, &t, r), LJ_ERR_OOM);
    assert_false(r->found);
    assert_true(r->min_peak_bytes == full1 + 1000);
    const char *m = lj_error_message();
    assert_true(strstr(m, "does not fit") != NULL);
    assert_true(strstr(m, "needs at least") != NULL);
    assert_true(strstr(m, "ZeRO") != NULL);
    assert_true(strstr(m, "shorter sequence (seq 128 fits") != NULL);
    /* the CPU backend keeps the optimizer state in host memory already: no offload to suggest */
    assert_true(strstr(m, "optimizer offload") == NULL);
    assert_true(strcmp(m, r->explanation) == 0);
    /* a fixed micro-batch that does not fit, when a smaller one would: name the way out */
    lj_planner_target t2 = make_target(ops, plan_total(&c, ops, 2, T, 3, 0, 1), 0, 0);
    assert_int_equal(lj_planner_search(&c, T, 8, NULL, &t2, r), LJ_ERR_OOM);
    assert_true(strstr(lj_error_message(), "--micro-batch-size auto") != NULL);
    /* a fixed policy that does not fit, when auto would */
    uint8_t none[LJ_MAX_LAYERS] = {0};
    assert_int_equal(lj_planner_search(&c, T, 2, none, &t2, r), LJ_ERR_OOM);
    assert_true(strstr(lj_error_message(), "--recompute auto would choose") != NULL);
    free(r);
}

static void test_micro_batch_auto(void **state) {
    (void)state;
    const int seq[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
    for (int i = 0; i + 1 < 10; i++) assert_int_equal(lj_planner_next_micro_batch(seq[i]), seq[i + 1]);
    const int T = 32;
    lj_model_config c = small_config(3);
    const lj_ops *ops = lj_ops_cpu();
    /* room for micro-batch 4 with full recompute, not for 6 (the next size tried) */
    const size_t budget = plan_total(&c, ops, 4, T, 3, 0, 1);
    assert_true(plan_total(&c, ops, 6, T, 3, 0, 1) > budget);
    assert_int_equal(lj_planner_next_micro_batch(4), 6);
    lj_planner_target t = make_target(ops, budget, 0, 0);
    t.rates.memory_bandwidth = 1e6; /* the optimizer step dominates: larger micro-batches amortise it */
    lj_planner_result *r = malloc(sizeof *r);
    assert_int_equal(lj_planner_search(&c, T, 0, NULL, &t, r), LJ_OK);
    assert_int_equal(r->chosen.micro_batch_size, 4);
    assert_int_equal(r->chosen.num_full, 3);
    int saw_no_fit_6 = 0, saw_3 = 0;
    for (int i = 0; i < r->num_alternatives; i++) {
        if (r->alternatives[i].micro_batch_size == 6 && !r->alternatives[i].fits) saw_no_fit_6 = 1;
        saw_3 |= r->alternatives[i].micro_batch_size == 3;
    }
    assert_true(saw_no_fit_6);
    assert_true(saw_3);
    /* the wire-in function gives the same */
    uint8_t policy[LJ_MAX_LAYERS];
    int mb = 0;
    char why[2048];
    assert_int_equal(lj_planner_choose(&c, T, &mb, &t, policy, why, sizeof why), LJ_OK);
    assert_int_equal(mb, 4);
    for (int l = 0; l < 3; l++) assert_int_equal(policy[l], LJ_RECOMPUTE_FULL);
    assert_int_equal(policy[3], 0);
    assert_true(strstr(why, "micro-batch 4") != NULL);
    free(r);
}

/* A model built with options `o` plans peak - fixed bytes, and allocating the plan takes
 * exactly that many bytes from the backend. */
static void assert_peak_is_plan(const lj_model_config *c, const lj_ops *ops, const lj_model_options *o,
                                const lj_zero_options *z, size_t peak, size_t fixed) {
    lj_model m;
    lj_model_init(&m, ops, c, o);
    lj_parallelize(&m, NULL, z);
    lj_plan p;
    lj_plan_build(&p, &m);
    assert_true(peak == p.total_bytes + fixed);
    const size_t before = lj_ops_allocated_bytes();
    assert_int_equal(lj_plan_allocate(&p, &m), LJ_OK);
    assert_true(lj_ops_allocated_bytes() - before == p.total_bytes);
    lj_plan_release(&p, ops);
    lj_plan_free(&p);
    lj_model_free(&m);
}

/* The predicted peak is the plan's total plus the fixed overheads, and the plan is what the
 * CPU backend allocates. */
static void test_peak_equals_plan(void **state) {
    (void)state;
    lj_model_config c = small_config(4);
    const lj_ops *ops = lj_ops_cpu();
    lj_planner_target t = make_target(ops, plan_total(&c, ops, 2, 16, 0, 0, 1) - 4096 + 300000, 100000, 200000);
    lj_planner_result *r = malloc(sizeof *r);
    assert_int_equal(lj_planner_search(&c, 16, 2, NULL, &t, r), LJ_OK);
    uint8_t policy[LJ_MAX_LAYERS];
    lj_planner_candidate_policy(&r->chosen, policy);
    lj_model_options o = lj_test_train_options(2, 16, 1);
    memcpy(o.recompute, policy, sizeof o.recompute);
    assert_peak_is_plan(&c, ops, &o, NULL, r->chosen.peak_bytes, 300000);
    free(r);
}

/* ZeRO-3 over 2 ranks: the planner's peak is the per-rank plan, allocated exactly, and smaller
 * than the replicated one for a model whose state dominates. */
static void test_zero3_per_rank_peak(void **state) {
    (void)state;
    lj_model_config c = small_config(8);
    const lj_ops *ops = lj_ops_cpu();
    lj_planner_target t = make_target(ops, (size_t)1 << 34, 0, 0);
    lj_planner_result *r = malloc(sizeof *r);
    uint8_t none[LJ_MAX_LAYERS] = {0};
    assert_int_equal(lj_planner_search(&c, 16, 1, none, &t, r), LJ_OK);
    const size_t replicated = r->chosen.peak_bytes;
    t.zero_stage = 3;
    t.dp_world_size = 2;
    assert_int_equal(lj_planner_search(&c, 16, 1, none, &t, r), LJ_OK);
    assert_true(r->chosen.peak_bytes < replicated);
    lj_model_options o = lj_test_train_options(1, 16, 1);
    const lj_zero_options z = {.zero_stage = 3, .dp_world_size = 2, .dp_rank = 1};
    assert_peak_is_plan(&c, ops, &o, &z, r->chosen.peak_bytes, 0); /* no library workspace or context in this target */
    free(r);
}

static void test_cost_model(void **state) {
    (void)state;
    lj_model_config c = small_config(4);
    const lj_ops *ops = lj_ops_cpu();
    lj_perf_rates rates;
    lj_perf_rates_default(&rates, "cuda", "test");
    lj_model_options o = lj_test_train_options(2, 64, 1);
    lj_step_cost none, sel, full, unfused;
    lj_cost_step(&c, &o, ops, &rates, 1, &none);
    memset(o.recompute, LJ_RECOMPUTE_SELECTIVE, 4);
    lj_cost_step(&c, &o, ops, &rates, 1, &sel);
    memset(o.recompute, LJ_RECOMPUTE_FULL, 4);
    lj_cost_step(&c, &o, ops, &rates, 1, &full);
    const double N = 128, C = 32, I = 48, V = 97, Q = 32, KV = 16, QKV = Q + 2 * KV;
    const double fwd = 4 * 2 * N * (C * QKV + Q * C + 3 * C * I) + 2 * N * C * V;
    assert_true(fabs(none.matmul_flop - 3 * fwd) < 1e-6 * fwd);
    assert_true(none.recompute_s == 0.0);
    assert_true(sel.recompute_matmul_flop == 0.0 && sel.recompute_bytes > 0.0);
    assert_true(fabs(full.recompute_matmul_flop - 4 * 2 * N * (C * QKV + Q * C + 2 * C * I)) < 1e-6 * fwd);
    assert_true(fabs(full.recompute_attention_flop - 4 * 2 * 2 * 4 * 64.0 * 64 * 8) < 1.0);
    assert_true(none.tokens_per_s > sel.tokens_per_s && sel.tokens_per_s > full.tokens_per_s);
    assert_true(fabs(none.step_s - (none.matmul_s + none.attention_s + none.memory_s)) < 1e-15);
    assert_true(fabs(none.tokens_per_s * none.step_s - N) < 1e-6);
    o.fused = 0;
    memset(o.recompute, 0, 4);
    lj_cost_step(&c, &o, ops, &rates, 1, &unfused);
    assert_true(unfused.elementwise_bytes > none.elementwise_bytes);
    /* the optimizer step shared by 4 micro-batches costs a quarter per micro-batch */
    lj_step_cost acc;
    o.fused = 1;
    lj_cost_step(&c, &o, ops, &rates, 4, &acc);
    assert_true(acc.step_s < none.step_s);
    /* the FP8 recipe: the block GEMMs of its layers (all but the first and last here) at the FP8
     * rate, their casts as element-wise bytes; a GPU-sized model predicts a faster step */
    lj_step_cost f8;
    o.linear_recipe = LJ_LINEAR_RECIPE_FP8;
    o.fp8 = lj_linear_fp8_defaults();
    o.fp8.bf16_layers_start = o.fp8.bf16_layers_end = 1;
    lj_cost_step(&c, &o, ops, &rates, 1, &f8);
    const double block = 2 * N * (C * QKV + Q * C + 3 * C * I);
    assert_true(fabs(f8.fp8_matmul_flop - 2 * 3 * block) < 1e-6 * block);
    assert_true(fabs(f8.matmul_flop - none.matmul_flop) < 1e-6 * fwd);
    assert_true(f8.elementwise_bytes > none.elementwise_bytes);
    lj_model_config big;
    assert_int_equal(lj_config_preset("llama3.2-1b", &big), LJ_OK);
    lj_model_options ob = lj_test_train_options(4, 4096, 1);
    lj_step_cost b16, b8;
    lj_cost_step(&big, &ob, ops, &rates, 1, &b16);
    ob.linear_recipe = LJ_LINEAR_RECIPE_FP8;
    ob.fp8 = lj_linear_fp8_defaults();
    lj_cost_step(&big, &ob, ops, &rates, 1, &b8);
    assert_true(b8.step_s < 0.9 * b16.step_s);
    /* the attention rate rises with T on a GPU: the defaults' 400 TFLOP/s at seq 4096, about 526
     * at 32768 (the two measured 8b steps that fix it), and one rate at every T on the CPU */
    assert_true(fabs(lj_perf_attention_rate(&rates, 4096) - 400e12) < 1e3);
    assert_true(fabs(lj_perf_attention_rate(&rates, 32768) / 1e12 - 526) < 1.0);
    assert_true(lj_perf_attention_rate(&rates, 1024) < lj_perf_attention_rate(&rates, 2048));
    lj_perf_rates cpu_rates;
    lj_perf_rates_default(&cpu_rates, "cpu", "cpu");
    assert_true(lj_perf_attention_rate(&cpu_rates, 32768) == cpu_rates.attention_flops);
    lj_step_cost at4k, at32k;
    lj_model_options o4 = lj_test_train_options(1, 4096, 1), o32 = lj_test_train_options(1, 32768, 1);
    lj_cost_step(&big, &o4, ops, &rates, 1, &at4k);
    lj_cost_step(&big, &o32, ops, &rates, 1, &at32k);
    assert_true(fabs(at4k.attention_s - at4k.attention_flop / 400e12) < 1e-12);
    assert_true(fabs(at32k.attention_s - at32k.attention_flop / lj_perf_attention_rate(&rates, 32768)) < 1e-12);
}

static void test_rates_cache(void **state) {
    (void)state;
    char dir[] = "/tmp/lj_planner_cacheXXXXXX";
    assert_non_null(mkdtemp(dir));
    lj_perf_rates r, back;
    lj_perf_rates_default(&r, "cuda", "NVIDIA H200");
    r.matmul_flops = 612.5e12;
    r.context_bytes = (size_t)577 << 20;
    snprintf(r.source, sizeof r.source, "probe");
    assert_int_equal(lj_perf_rates_load(dir, "NVIDIA H200", &back), LJ_ERR_IO);
    assert_int_equal(lj_perf_rates_save(dir, &r), LJ_OK);
    assert_int_equal(lj_perf_rates_load(dir, "NVIDIA H200", &back), LJ_OK);
    assert_true(fabs(back.matmul_flops - 612.5e12) < 1e3);
    assert_true(fabs(back.attention_flops - 400e12) < 1e3);
    assert_true(back.attention_seq0 == r.attention_seq0 && r.attention_seq0 > 0);
    assert_true(fabs(back.fp8_matmul_flops - r.fp8_matmul_flops) < 1e3);
    assert_true(back.context_bytes == r.context_bytes);
    assert_true(strstr(back.source, "probe") != NULL);
    char path[LJ_PATH_MAX];
    assert_int_equal(lj_perf_rates_path(dir, "NVIDIA H200", path), LJ_OK);
    assert_true(strstr(path, "/planner/NVIDIA_H200.json") != NULL);
    FILE *f = fopen(path, "w");
    fputs("{\"matmul_tflops\": \"fast\", \"attention_tflops\": 1, \"memory_bandwidth_gbs\": 1}", f);
    fclose(f);
    assert_int_equal(lj_perf_rates_load(dir, "NVIDIA H200", &back), LJ_ERR_FORMAT);
    assert_true(strstr(lj_error_message(), "matmul_tflops") != NULL);
    assert_true(strstr(lj_error_message(), path) != NULL);
    /* the target takes the cached context overhead, and the environment overrides it */
    lj_perf_rates_default(&r, "cuda", "NVIDIA H200");
    r.context_bytes = (size_t)577 << 20;
    assert_int_equal(lj_perf_rates_save(dir, &r), LJ_OK);
    const lj_ops *cuda = lj_ops_cuda_describe(NULL);
    if (cuda) {
        lj_planner_target t;
        unsetenv("LJ_CUDA_CONTEXT_OVERHEAD");
        assert_int_equal(lj_planner_target_init(&t, cuda, dir, NULL), LJ_OK);
        assert_true(t.context_bytes == (size_t)577 << 20);
        assert_true(t.device_memory_bytes == LJ_PLANNER_H200_MEMORY_BYTES);
        assert_true(t.library_workspace_bytes > 0);
        setenv("LJ_CUDA_CONTEXT_OVERHEAD", "600MiB", 1);
        assert_int_equal(lj_planner_target_init(&t, cuda, dir, NULL), LJ_OK);
        assert_true(t.context_bytes == (size_t)600 << 20);
        setenv("LJ_CUDA_CONTEXT_OVERHEAD", "lots", 1);
        assert_int_equal(lj_planner_target_init(&t, cuda, dir, NULL), LJ_ERR_ARG);
        assert_true(strstr(lj_error_message(), "LJ_CUDA_CONTEXT_OVERHEAD") != NULL);
        unsetenv("LJ_CUDA_CONTEXT_OVERHEAD");
    }
    unlink(path);
    char sub[600];
    snprintf(sub, sizeof sub, "%s/planner", dir);
    rmdir(sub);
    rmdir(dir);
}

static void test_env_switch(void **state) {
    (void)state;
    int on = -1;
    unsetenv("CHECKPOINT_OPTIMIZATION");
    assert_int_equal(lj_planner_env_enabled(&on), LJ_OK);
    assert_int_equal(on, 0);
    const char *yes[] = {"true", "1", "yes", "on", "TRUE", "Yes"};
    for (int i = 0; i < 6; i++) {
        setenv("CHECKPOINT_OPTIMIZATION", yes[i], 1);
        on = -1;
        assert_int_equal(lj_planner_env_enabled(&on), LJ_OK);
        assert_int_equal(on, 1);
    }
    const char *no[] = {"false", "0", "no", "off", "", "OFF"};
    for (int i = 0; i < 6; i++) {
        setenv("CHECKPOINT_OPTIMIZATION", no[i], 1);
        on = -1;
        assert_int_equal(lj_planner_env_enabled(&on), LJ_OK);
        assert_int_equal(on, 0);
    }
    const char *bad[] = {"ture", "2", "enabled", " true"};
    for (int i = 0; i < 4; i++) {
        setenv("CHECKPOINT_OPTIMIZATION", bad[i], 1);
        assert_int_equal(lj_planner_env_enabled(&on), LJ_ERR_ARG);
        assert_true(strstr(lj_error_message(), "CHECKPOINT_OPTIMIZATION") != NULL);
        assert_true(strstr(lj_error_message(), bad[i]) != NULL);
    }
    unsetenv("CHECKPOINT_OPTIMIZATION");
}

static void test_megatron_flags(void **state) {
    (void)state;
    uint8_t r[LJ_MAX_LAYERS];
    assert_int_equal(lj_planner_megatron_recompute(NULL, NULL, -1, 8, r), LJ_OK);
    for (int l = 0; l < 8; l++) assert_int_equal(r[l], LJ_RECOMPUTE_NONE);
    assert_int_equal(lj_planner_megatron_recompute("full", NULL, -1, 8, r), LJ_OK);
    for (int l = 0; l < 8; l++) assert_int_equal(r[l], LJ_RECOMPUTE_FULL);
    assert_int_equal(r[8], LJ_RECOMPUTE_NONE);
    assert_int_equal(lj_planner_megatron_recompute("selective", "uniform", -1, 8, r), LJ_OK);
    assert_int_equal(r[7], LJ_RECOMPUTE_SELECTIVE);
    assert_int_equal(lj_planner_megatron_recompute("full", "block", 3, 8, r), LJ_OK);
    assert_int_equal(r[2], LJ_RECOMPUTE_FULL);
    assert_int_equal(r[3], LJ_RECOMPUTE_NONE);
    assert_int_equal(lj_planner_megatron_recompute("full", "block", -1, 8, r), LJ_ERR_ARG);
    assert_int_equal(lj_planner_megatron_recompute("full", "block", 9, 8, r), LJ_ERR_ARG);
    assert_true(strstr(lj_error_message(), "--recompute-num-layers 9") != NULL);
    assert_int_equal(lj_planner_megatron_recompute("partial", NULL, -1, 8, r), LJ_ERR_ARG);
    assert_true(strstr(lj_error_message(), "'partial'") != NULL);
    assert_int_equal(lj_planner_megatron_recompute("full", "diagonal", -1, 8, r), LJ_ERR_ARG);
    assert_int_equal(lj_planner_megatron_recompute(NULL, "block", -1, 8, r), LJ_ERR_ARG);
}

static void test_bad_search_args(void **state) {
    (void)state;
    lj_model_config c = small_config(2);
    lj_planner_target t = make_target(lj_ops_cpu(), (size_t)1 << 30, 0, 0);
    lj_planner_result *r = malloc(sizeof *r);
    assert_int_equal(lj_planner_search(&c, 0, 1, NULL, &t, r), LJ_ERR_ARG);
    assert_int_equal(lj_planner_search(&c, 8192, 1, NULL, &t, r), LJ_ERR_ARG);
    assert_true(strstr(lj_error_message(), "max_position_embeddings") != NULL);
    assert_int_equal(lj_planner_search(&c, 16, -3, NULL, &t, r), LJ_ERR_ARG);
    free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_breakdown_covers_plan),
        cmocka_unit_test(test_search_equals_exhaustive),
        cmocka_unit_test(test_none_when_plenty_more_as_memory_shrinks),
        cmocka_unit_test(test_refuses_when_nothing_fits),
        cmocka_unit_test(test_micro_batch_auto),
        cmocka_unit_test(test_peak_equals_plan),
        cmocka_unit_test(test_zero3_per_rank_peak),
        cmocka_unit_test(test_cost_model),
        cmocka_unit_test(test_rates_cache),
        cmocka_unit_test(test_env_switch),
        cmocka_unit_test(test_megatron_flags),
        cmocka_unit_test(test_bad_search_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
