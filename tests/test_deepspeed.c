/* test_deepspeed.c: DeepSpeed JSON configs (parallel/deepspeed.h): every supported key, "auto",
 * DeepSpeed's batch-size derivation and its rule on contradictions (named in the message),
 * batch sizes past int refused by key, command-line agreement (train/train.h
 * lj_train_apply_deepspeed: a flag and a key that disagree are refused naming both, "auto" takes
 * the flag), unknown-key warnings with dotted paths, bad JSON and bad values (file and key
 * named), unsupported settings, the deepspeed/ default, and the LR schedules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "parallel/deepspeed.h"
#include "train/train.h"

static lj_deepspeed_hints hints(int world, int64_t micro, int64_t global) {
    lj_deepspeed_hints h = {world, 4096, micro, global, 0, -1};
    return h;
}

static void test_full_config(void **state) {
    (void)state;
    const char *text =
        "{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 8,\n"
        " \"gradient_clipping\": 1.0, \"bf16\": {\"enabled\": true}, \"fp16\": {\"enabled\": false, \"loss_scale\": 0},\n"
        " \"steps_per_print\": 10, \"wall_clock_breakdown\": false,\n"
        " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-4, \"betas\": [0.9, 0.95], \"eps\": 1e-8,\n"
        "                 \"weight_decay\": 0.1}},\n"
        " \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 1000, \"warmup_min_ratio\": 0.1,\n"
        "                 \"warmup_num_steps\": 50, \"cos_min_ratio\": 0.01, \"warmup_type\": \"linear\"}},\n"
        " \"zero_optimization\": {\"stage\": 3, \"overlap_comm\": true, \"contiguous_gradients\": false,\n"
        "   \"reduce_bucket_size\": 5e7, \"allgather_bucket_size\": 2e8, \"stage3_prefetch_bucket_size\": 1000,\n"
        "   \"stage3_param_persistence_threshold\": 77, \"stage3_max_live_parameters\": 3e9,\n"
        "   \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}, \"offload_param\": {\"device\": \"none\"},\n"
        "   \"reduce_scatter\": true, \"stage3_gather_16bit_weights_on_model_save\": true},\n"
        " \"data_types\": {\"grad_accum_dtype\": \"fp32\"}}";
    lj_deepspeed_config c;
    assert_int_equal(lj_deepspeed_parse(&c, text, "full.json"), LJ_OK);
    assert_int_equal(c.num_unknown, 0);
    assert_true(c.train_batch_size == 64 && c.train_micro_batch_size_per_gpu == 4 && c.gradient_accumulation_steps == 8);
    assert_true(c.gradient_clipping == 1.0 && c.bf16_enabled == 1);
    assert_int_equal(c.optimizer.type, LJ_DS_OPTIMIZER_ADAMW);
    assert_true(c.optimizer.lr == 3e-4 && c.optimizer.beta1 == 0.9 && c.optimizer.beta2 == 0.95);
    assert_true(c.optimizer.eps == 1e-8 && c.optimizer.weight_decay == 0.1);
    assert_int_equal(c.scheduler.type, LJ_DS_SCHEDULER_WARMUP_COSINE_LR);
    assert_true(c.scheduler.total_num_steps == 1000 && c.scheduler.warmup_num_steps == 50);
    assert_true(c.scheduler.warmup_min_ratio == 0.1 && c.scheduler.cos_min_ratio == 0.01);
    assert_int_equal(c.scheduler.warmup_type, LJ_DS_WARMUP_LINEAR);
    assert_int_equal(c.zero.stage, 3);
    assert_true(c.zero.overlap_comm == 1 && c.zero.contiguous_gradients == 0);
    assert_true(c.zero.reduce_bucket_size == 50000000 && c.zero.allgather_bucket_size == 200000000);
    assert_true(c.zero.stage3_prefetch_bucket_size == 1000 && c.zero.stage3_param_persistence_threshold == 77);
    assert_true(c.zero.stage3_max_live_parameters == 3000000000LL && c.zero.offload_optimizer_cpu == 1);
    assert_string_equal(c.grad_accum_dtype, "fp32");
    lj_deepspeed_hints h = hints(2, 0, 0);
    assert_int_equal(lj_deepspeed_resolve(&c, &h), LJ_OK);
}

static void test_defaults_and_auto(void **state) {
    (void)state;
    lj_deepspeed_config c;
    assert_int_equal(lj_deepspeed_parse(&c, "{\"train_micro_batch_size_per_gpu\": 2}", "a.json"), LJ_OK);
    assert_int_equal(c.zero.stage, 0);
    assert_true(c.zero.reduce_bucket_size == 500000000 && c.zero.stage3_prefetch_bucket_size == 50000000);
    assert_true(c.zero.stage3_param_persistence_threshold == 100000 && c.zero.contiguous_gradients == 1);
    assert_true(isnan(c.gradient_clipping) && c.optimizer.type == LJ_DS_OPTIMIZER_NONE);
    lj_deepspeed_hints h = hints(4, 0, 0);
    assert_int_equal(lj_deepspeed_resolve(&c, &h), LJ_OK);
    assert_true(c.train_batch_size == 8 && c.gradient_accumulation_steps == 1);
    assert_int_equal(c.zero.overlap_comm, 0); /* DeepSpeed: on by default only for stage 3 */

    const char *hf = "{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\",\n"
                     " \"gradient_accumulation_steps\": \"auto\", \"gradient_clipping\": \"auto\",\n"
                     " \"bf16\": {\"enabled\": \"auto\"},\n"
                     " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\", \"betas\": \"auto\",\n"
                     "   \"eps\": \"auto\", \"weight_decay\": \"auto\"}},\n"
                     " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_min_lr\": \"auto\",\n"
                     "   \"warmup_max_lr\": \"auto\", \"warmup_num_steps\": \"auto\", \"total_num_steps\": \"auto\"}},\n"
                     " \"zero_optimization\": {\"stage\": 3, \"reduce_bucket_size\": \"auto\",\n"
                     "   \"stage3_prefetch_bucket_size\": \"auto\", \"stage3_param_persistence_threshold\": \"auto\"}}";
    assert_int_equal(lj_deepspeed_parse(&c, hf, "hf.json"), LJ_OK);
    assert_true(c.train_batch_size == LJ_DS_AUTO && c.bf16_enabled == LJ_DS_AUTO);
    assert_true(isnan(c.optimizer.lr) && isnan(c.optimizer.beta1) && isnan(c.scheduler.warmup_max_lr));
    h = hints(2, 4, 32);
    h.train_iters = 500;
    h.warmup_iters = 20;
    assert_int_equal(lj_deepspeed_resolve(&c, &h), LJ_OK);
    assert_true(c.train_batch_size == 32 && c.train_micro_batch_size_per_gpu == 4 && c.gradient_accumulation_steps == 4);
    assert_true(c.zero.reduce_bucket_size == 4096LL * 4096 && c.zero.stage3_prefetch_bucket_size == 15099494);
    assert_true(c.zero.stage3_param_persistence_threshold == 40960 && c.zero.overlap_comm == 1);
    assert_true(c.scheduler.total_num_steps == 500 && c.scheduler.warmup_num_steps == 20);

    lj_deepspeed_default(&c, 2048);
    assert_true(c.zero.stage == 3 && c.zero.overlap_comm == 1 && c.bf16_enabled == 1);
    assert_true(c.zero.stage3_prefetch_bucket_size == 3774873 && c.zero.stage3_param_persistence_threshold == 20480);
    assert_true(c.optimizer.type == LJ_DS_OPTIMIZER_ADAMW && isnan(c.optimizer.lr));
    h = hints(2, 2, 0);
    assert_int_equal(lj_deepspeed_resolve(&c, &h), LJ_OK);
    assert_true(c.train_batch_size == 4 && c.gradient_accumulation_steps == 1);
}

/* Resolves {train, micro, accum} (0 = absent) for `world`; returns the status. */
static lj_status resolve3(int64_t tb, int64_t mb, int64_t ga, int world, int64_t out[3]) {
    char text[256];
    int n = snprintf(text, sizeof text, "{");
    if (tb) n += snprintf(text + n, sizeof text - (size_t)n, "\"train_batch_size\": %lld,", (long long)tb);
    if (mb) n += snprintf(text + n, sizeof text - (size_t)n, "\"train_micro_batch_size_per_gpu\": %lld,", (long long)mb);
    if (ga) n += snprintf(text + n, sizeof text - (size_t)n, "\"gradient_accumulation_steps\": %lld,", (long long)ga);
    n += snprintf(text + n, sizeof text - (size_t)n, "\"steps_per_print\": 1}");
    lj_deepspeed_config c;
    assert_int_equal(lj_deepspeed_parse(&c, text, "ds_config.json"), LJ_OK);
    lj_deepspeed_hints h = hints(world, 0, 0);
    lj_status s = lj_deepspeed_resolve(&c, &h);
    out[0] = c.train_batch_size;
    out[1] = c.train_micro_batch_size_per_gpu;
    out[2] = c.gradient_accumulation_steps;
    return s;
}

static void test_batch_rule(void **state) {
    (void)state;
    int64_t r[3];
    assert_int_equal(resolve3(32, 4, 0, 2, r), LJ_OK);
    assert_true(r[2] == 4);
    assert_int_equal(resolve3(32, 0, 2, 4, r), LJ_OK);
    assert_true(r[1] == 4);
    assert_int_equal(resolve3(0, 2, 3, 2, r), LJ_OK);
    assert_true(r[0] == 12);
    assert_int_equal(resolve3(8, 0, 0, 2, r), LJ_OK);
    assert_true(r[1] == 4 && r[2] == 1);
    assert_int_equal(resolve3(64, 4, 8, 2, r), LJ_OK);

    assert_int_equal(resolve3(16, 4, 8, 4, r), LJ_ERR_ARG);
    const char *m = lj_error_message();
    assert_non_null(strstr(m, "ds_config.json"));
    assert_non_null(strstr(m, "train_batch_size is not equal to train_micro_batch_size_per_gpu * "
                              "gradient_accumulation_steps * world_size"));
    assert_non_null(strstr(m, "16 != 4 * 8 * 4"));
    assert_int_equal(resolve3(10, 3, 0, 1, r), LJ_ERR_ARG); /* 10 // 3 = 3 accumulation steps: 9 != 10 */
    assert_non_null(strstr(lj_error_message(), "10 != 3 * 3 * 1"));
    assert_int_equal(resolve3(0, 0, 4, 1, r), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "either train_batch_size or train_micro_batch_size_per_gpu"));

    lj_deepspeed_config c;
    assert_int_equal(lj_deepspeed_parse(&c, "{\"train_micro_batch_size_per_gpu\": 4}", "b.json"), LJ_OK);
    lj_deepspeed_hints h = hints(1, 2, 0);
    assert_int_equal(lj_deepspeed_resolve(&c, &h), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "train_micro_batch_size_per_gpu is 4 but --micro-batch-size is 2"));
}

/* A batch size past int, given or derived, is refused naming its key: 2^40 once wrapped to 0,
 * which the run read as "not given" and replaced by its default. */
static void test_batch_int_range(void **state) {
    (void)state;
    int64_t r[3];
    const int64_t big = (int64_t)1 << 40;
    assert_int_equal(resolve3(big, 2, 0, 1, r), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "train_batch_size is 1099511627776 (as given): at most 2147483647"));
    assert_int_equal(resolve3(0, (int64_t)1 << 35, 32, 1, r), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "train_batch_size is 1099511627776 (derived by DeepSpeed's rule)"));
    assert_int_equal(resolve3(big, 0, 1, 1, r), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "train_batch_size is 1099511627776"));
    assert_int_equal(resolve3(2147483646, 2, 0, 1, r), LJ_OK); /* the largest even int fits */
    assert_true(r[0] == 2147483646 && r[2] == 1073741823);
}

/* lj_train_apply_deepspeed on `text` with flags already in *c as `g` says; world size 1. */
static lj_status apply(lj_train_config *c, const lj_train_given *g, const char *text) {
    lj_deepspeed_config ds;
    assert_int_equal(lj_deepspeed_parse(&ds, text, "ds.json"), LJ_OK);
    int gbs = 0, mb = 0;
    return lj_train_apply_deepspeed(c, g, &ds, 1, &gbs, &mb);
}

static void expect_conflict(lj_train_config *c, const lj_train_given *g, const char *text, const char *flag,
                            const char *key) {
    assert_int_equal(apply(c, g, text), LJ_ERR_ARG);
    const char *m = lj_error_message();
    if (!strstr(m, flag) || !strstr(m, key) || !strstr(m, "ds.json") || !strstr(m, "disagrees"))
        fail_msg("message '%s' lacks '%s', '%s' or the file", m, flag, key);
}

/* A flag given on the command line and the same setting in the file: a disagreement is refused
 * naming the flag and the key with both values (the file once won silently); agreement is
 * fine; "auto" or absence in the file takes the flag; the file applies where no flag is given. */
static void test_flag_and_file(void **state) {
    (void)state;
    lj_train_config c;
    lj_train_given g;
    const char *opt = "{\"train_batch_size\": 4, \"gradient_clipping\": 0.5, \"optimizer\": {\"type\": \"AdamW\", "
                      "\"params\": {\"lr\": 0.002, \"betas\": [0.9, 0.99], \"eps\": 1e-6, \"weight_decay\": 0.05}}, "
                      "\"zero_optimization\": {\"stage\": 1}}";
    static const struct { int offset; const char *flag, *key; } pairs[] = {
        {offsetof(lj_train_given, lr), "--lr 0.001", "optimizer.params.lr 0.002"},
        {offsetof(lj_train_given, clip_grad), "--clip-grad 1", "gradient_clipping 0.5"},
        {offsetof(lj_train_given, adam_beta2), "--adam-beta2 0.95", "optimizer.params.betas[1] 0.99"},
        {offsetof(lj_train_given, adam_eps), "--adam-eps 1e-08", "optimizer.params.eps 1e-06"},
        {offsetof(lj_train_given, weight_decay), "--weight-decay 0.1", "optimizer.params.weight_decay 0.05"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        lj_train_config_defaults(&c);
        c.lr.lr = 1e-3;
        memset(&g, 0, sizeof g);
        g.lr_warmup_iters = -1;
        *(int *)((char *)&g + pairs[i].offset) = 1;
        expect_conflict(&c, &g, opt, pairs[i].flag, pairs[i].key);
    }
    /* the ZeRO stage, overlap_comm, the bucket, offload, the scheduler's warm-up */
    lj_train_config_defaults(&c);
    memset(&g, 0, sizeof g);
    g.lr_warmup_iters = -1;
    c.zero.zero_stage = 2;
    g.zero_stage = 1;
    expect_conflict(&c, &g, opt, "--zero-stage 2", "zero_optimization.stage 1");
    assert_int_equal(apply(&c, &g, "{\"train_batch_size\": 4}"), LJ_OK); /* no stage in the file: the flag's */
    assert_int_equal(c.zero.zero_stage, 2);
    const char *z2 = "{\"train_batch_size\": 4, \"zero_optimization\": {\"stage\": 2, \"overlap_comm\": true, "
                     "\"reduce_bucket_size\": 5000, \"offload_optimizer\": {\"device\": \"cpu\"}}}";
    c.zero.overlap_comm = 0;
    g.overlap_comm = 1;
    expect_conflict(&c, &g, z2, "--no-overlap-comm", "zero_optimization.overlap_comm true");
    g.overlap_comm = 0;
    c.zero.zero_reduce_bucket_numel = 100;
    g.reduce_bucket_size = 1;
    expect_conflict(&c, &g, z2, "--reduce-bucket-size 100", "zero_optimization.reduce_bucket_size 5000");
    g.reduce_bucket_size = 0;
    c.offload_optimizer = 0;
    g.offload_optimizer = 1;
    expect_conflict(&c, &g, z2, "--offload-optimizer none", "zero_optimization.offload_optimizer.device \"cpu\"");
    g.offload_optimizer = 0;
    g.lr_warmup_iters = 5;
    expect_conflict(&c, &g,
                    "{\"train_batch_size\": 4, \"scheduler\": {\"type\": \"WarmupLR\", "
                    "\"params\": {\"warmup_num_steps\": 10}}}",
                    "--lr-warmup-iters 5", "scheduler.params.warmup_num_steps 10");
    /* no flags: the file's values */
    memset(&g, 0, sizeof g);
    g.lr_warmup_iters = -1;
    lj_train_config_defaults(&c);
    assert_int_equal(apply(&c, &g, z2), LJ_OK);
    assert_true(c.zero.zero_stage == 2 && c.zero.overlap_comm == 1 && c.zero.zero_reduce_bucket_numel == 5000);
    assert_true(c.offload_optimizer == 1 && strstr(c.offload_source, "offload_optimizer.device"));
    assert_int_equal(apply(&c, &g, opt), LJ_OK);
    assert_true(c.lr.lr == 0.002 && c.adamw.max_grad_norm == 0.5f && c.adamw.beta2 == 0.99f && c.zero.zero_stage == 1);
    /* agreement, and "auto", take the flag */
    lj_train_config_defaults(&c);
    c.lr.lr = 0.002;
    c.adamw.max_grad_norm = 0.5f;
    g.lr = g.clip_grad = 1;
    assert_int_equal(apply(&c, &g, opt), LJ_OK);
    c.lr.lr = 7e-3;
    c.adamw.max_grad_norm = 0.25f;
    assert_int_equal(apply(&c, &g,
                           "{\"train_batch_size\": 4, \"gradient_clipping\": \"auto\", \"optimizer\": {\"type\": "
                           "\"AdamW\", \"params\": {\"lr\": \"auto\"}}}"),
                     LJ_OK);
    assert_true(c.lr.lr == 7e-3 && c.adamw.max_grad_norm == 0.25f);
}

static void test_unknown_keys(void **state) {
    (void)state;
    const char *text = "{\"foo\": 1, \"steps_per_print\": 5,\n"
                       " \"zero_optimization\": {\"stage\": 2, \"stage3_prefetch_bucket_sise\": 5, \"reduce_scatter\": true},\n"
                       " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 1e-4, \"bogus\": 1, \"torch_adam\": true}},\n"
                       " \"bf16\": {\"enabled\": true, \"mystery\": 2}}";
    lj_deepspeed_config c;
    assert_int_equal(lj_deepspeed_parse(&c, text, "u.json"), LJ_OK);
    assert_int_equal(c.num_unknown, 4);
    assert_non_null(strstr(c.unknown, "foo"));
    assert_non_null(strstr(c.unknown, "zero_optimization.stage3_prefetch_bucket_sise"));
    assert_non_null(strstr(c.unknown, "optimizer.params.bogus"));
    assert_non_null(strstr(c.unknown, "bf16.mystery"));
    assert_null(strstr(c.unknown, "steps_per_print"));
    assert_int_equal(c.optimizer.type, LJ_DS_OPTIMIZER_ADAM);
    assert_int_equal(c.zero.stage, 2);
}

static void expect_error(const char *text, lj_status code, const char *needle) {
    lj_deepspeed_config c;
    assert_int_equal(lj_deepspeed_parse(&c, text, "bad.json"), code);
    const char *m = lj_error_message();
    if (!strstr(m, needle) || !strstr(m, "bad.json")) fail_msg("message '%s' lacks '%s' or the file name", m, needle);
}

static void test_bad_input(void **state) {
    (void)state;
    expect_error("{\"zero_optimization\": {\"stage\": 4}}", LJ_ERR_FORMAT, "zero_optimization.stage: expected 0, 1, 2 or 3");
    expect_error("{\"train_batch_size\": \"abc\"}", LJ_ERR_FORMAT, "train_batch_size: expected an integer");
    expect_error("{\"train_batch_size\": 2.5}", LJ_ERR_FORMAT, "train_batch_size");
    expect_error("{\"gradient_clipping\": -1}", LJ_ERR_FORMAT, "gradient_clipping");
    expect_error("{\"zero_optimization\": {\"overlap_comm\": 1}}", LJ_ERR_FORMAT, "zero_optimization.overlap_comm");
    expect_error("{\"optimizer\": {\"type\": \"Lamb\"}}", LJ_ERR_UNSUPPORTED, "optimizer.type: 'Lamb'");
    expect_error("{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"adam_w_mode\": false}}}", LJ_ERR_UNSUPPORTED,
                 "optimizer.params.adam_w_mode");
    expect_error("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9]}}}", LJ_ERR_FORMAT,
                 "optimizer.params.betas");
    expect_error("{\"scheduler\": {\"type\": \"OneCycle\"}}", LJ_ERR_UNSUPPORTED, "scheduler.type: 'OneCycle'");
    expect_error("{\"fp16\": {\"enabled\": true}}", LJ_ERR_UNSUPPORTED, "fp16.enabled");
    expect_error("{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"cpu\"}}}", LJ_ERR_UNSUPPORTED,
                 "zero_optimization.offload_param.device");
    expect_error("{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"nvme\"}}}",
                 LJ_ERR_UNSUPPORTED, "zero_optimization.offload_optimizer.device");
    expect_error("{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\"}}}", LJ_ERR_ARG, "stage is 0");
    expect_error("[1, 2]", LJ_ERR_FORMAT, "expected an object");
    expect_error("{\"data_types\": {\"grad_accum_dtype\": \"fp16\"}}", LJ_ERR_FORMAT,
                 "data_types.grad_accum_dtype: expected \"fp32\" or \"bf16\"");
    expect_error("{\"a\": 1,\n \"b\": 2,\n \"c\": }", LJ_ERR_FORMAT, "not valid JSON (error at line 3");

    char dir[512], path[600];
    const char *tmp = getenv("LJ_TEST_TMP");
    snprintf(dir, sizeof dir, "%s/deepspeed", tmp && *tmp ? tmp : "/tmp");
    assert_int_equal(lj_mkdir_p(dir), LJ_OK);
    snprintf(path, sizeof path, "%s/broken.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\n  \"train_batch_size\": 8,\n  \"zero_optimization\": {\"stage\": 2,,}\n}\n", f);
    fclose(f);
    lj_deepspeed_config c;
    assert_int_equal(lj_deepspeed_load(&c, path), LJ_ERR_FORMAT);
    assert_non_null(strstr(lj_error_message(), path));
    assert_non_null(strstr(lj_error_message(), "line 3"));
    snprintf(path, sizeof path, "%s/missing.json", dir);
    assert_int_equal(lj_deepspeed_load(&c, path), LJ_ERR_IO);
    assert_non_null(strstr(lj_error_message(), "missing.json"));
}

static void test_schedules(void **state) {
    (void)state;
    lj_deepspeed_config c;
    assert_int_equal(lj_deepspeed_parse(&c,
                                        "{\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0,"
                                        " \"warmup_max_lr\": 1.0, \"warmup_num_steps\": 10, \"warmup_type\": \"linear\"}}}",
                                        "s.json"),
                     LJ_OK);
    assert_true(lj_lr_deepspeed_at(&c.scheduler, 5.0, 1) == 0.0); /* last_batch_iteration -1 */
    assert_true(lj_lr_deepspeed_at(&c.scheduler, 5.0, 2) == 0.0); /* iteration 0 */
    assert_true(fabs(lj_lr_deepspeed_at(&c.scheduler, 5.0, 3) - 0.1) < 1e-12);
    assert_true(lj_lr_deepspeed_at(&c.scheduler, 5.0, 12) == 1.0 && lj_lr_deepspeed_at(&c.scheduler, 5.0, 1000) == 1.0);
    c.scheduler.warmup_type = LJ_DS_WARMUP_LOG;
    assert_true(fabs(lj_lr_deepspeed_at(&c.scheduler, 5.0, 3) - log(2.0) / log(10.0)) < 1e-12);

    assert_int_equal(lj_deepspeed_parse(&c,
                                        "{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": 20,"
                                        " \"warmup_max_lr\": 2.0, \"warmup_num_steps\": 10}}}",
                                        "s.json"),
                     LJ_OK);
    assert_true(fabs(lj_lr_deepspeed_at(&c.scheduler, 5.0, 17) - 2.0 * 0.5) < 1e-12); /* iteration 15: (20 - 15) / 10 */
    assert_true(lj_lr_deepspeed_at(&c.scheduler, 5.0, 40) == 0.0);

    assert_int_equal(lj_deepspeed_parse(&c,
                                        "{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 20,"
                                        " \"warmup_num_steps\": 10, \"cos_min_ratio\": 0.1, \"warmup_type\": \"linear\"}}}",
                                        "s.json"),
                     LJ_OK);
    assert_true(lj_lr_deepspeed_at(&c.scheduler, 3.0, 1) == 0.0);
    assert_true(fabs(lj_lr_deepspeed_at(&c.scheduler, 3.0, 7) - 3.0 * 0.5) < 1e-12); /* iteration 5 of 10 */
    const double want = 3.0 * (0.1 + 0.9 * (1 + cos(M_PI * 0.1)) / 2);  /* iteration 10: progress 1/10 */
    assert_true(fabs(lj_lr_deepspeed_at(&c.scheduler, 3.0, 12) - want) < 1e-12);
    assert_true(fabs(lj_lr_deepspeed_at(&c.scheduler, 3.0, 500) - 0.3) < 1e-12);
    lj_deepspeed_hints h = hints(1, 1, 0);
    c.scheduler.total_num_steps = LJ_DS_UNSET;
    assert_int_equal(lj_deepspeed_resolve(&c, &h), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "total_num_steps"));

    lj_deepspeed_init(&c);
    assert_true(lj_lr_deepspeed_at(&c.scheduler, 0.25, 7) == 0.25);
}

int main(void) {
    lj_log_set_quiet(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_config), cmocka_unit_test(test_defaults_and_auto), cmocka_unit_test(test_batch_rule),
        cmocka_unit_test(test_unknown_keys), cmocka_unit_test(test_bad_input), cmocka_unit_test(test_schedules),
        cmocka_unit_test(test_batch_int_range), cmocka_unit_test(test_flag_and_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
