/* test_util.h: what several cmocka tests share: a small Llama configuration (vocabulary 97,
 * d 32, I 48, 4 query / 2 KV heads of 8, GQA) that builds and runs in milliseconds, a fresh
 * temporary directory under $LJ_TEST_TMP, a whole-file writer, and a planned and allocated
 * CPU training model. */
#ifndef LJ_TEST_UTIL_H
#define LJ_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include <string.h>

#include "plan/plan.h"
#include "parallel/parallel.h"

/* Makes a new directory $LJ_TEST_TMP/<tag>.XXXXXX (or under /tmp) into buf. Returns 0 or -1. */
static inline int lj_test_make_dir(char *buf, size_t len, const char *tag) {
    const char *base = getenv("LJ_TEST_TMP");
    if (!base || !base[0]) base = "/tmp";
    if (lj_mkdir_p(base) != LJ_OK) return -1;
    snprintf(buf, len, "%s/%s.XXXXXX", base, tag);
    return mkdtemp(buf) ? 0 : -1;
}

/* n normal values of standard deviation `scale` from `rng` (free() them). */
static inline float *lj_test_randf(lj_rng *rng, int64_t n, float scale) {
    float *x = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = (float)(lj_rng_normal(rng) * scale);
    return x;
}

/* Writes n bytes to path. Returns 0 or -1. */
static inline int lj_test_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    const int ok = n == 0 || fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static inline lj_model_config lj_test_small_config(int layers, int tie) {
    lj_model_config c;
    if (lj_config_preset("llama3-nano", &c) != LJ_OK) abort();
    c.vocab_size = 97;
    c.hidden_size = 32;
    c.intermediate_size = 48;
    c.num_hidden_layers = layers;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.max_position_embeddings = 4096;
    c.tie_word_embeddings = tie;
    c.bos_token_id = 1;
    c.eos_token_id = 2;
    return c;
}

/* A training model of `cfg` on the CPU backend with micro-batch B, sequence T, fused or not and
 * one recompute policy for every layer: planned, allocated, RoPE tables uploaded. Returns
 * lj_plan_allocate's status. Free with lj_test_model_destroy. */
typedef struct {
    lj_model m;
    lj_plan p;
} lj_test_model;

/* Options of a single-rank training model: micro-batch B, sequence T, fused or not, no
 * recompute, every other field zero. */
static inline lj_model_options lj_test_train_options(int B, int T, int fused) {
    lj_model_options o;
    memset(&o, 0, sizeof o);
    o.micro_batch_size = B;
    o.seq_length = T;
    o.training = 1;
    o.fused = fused;
    return o;
}

static inline lj_status lj_test_model_create(lj_test_model *t, const lj_model_config *cfg, int B, int T, int fused,
                                             int policy) {
    lj_model_options o = lj_test_train_options(B, T, fused);
    memset(o.recompute, policy, sizeof o.recompute);
    lj_model_init(&t->m, lj_ops_cpu(), cfg, &o);
    lj_parallelize(&t->m, NULL, NULL);
    lj_plan_build(&t->p, &t->m);
    lj_status s = lj_plan_allocate(&t->p, &t->m);
    if (s == LJ_OK) lj_model_upload_rope(&t->m);
    return s;
}

static inline void lj_test_model_destroy(lj_test_model *t) {
    lj_plan_release(&t->p, t->m.ops);
    lj_plan_free(&t->p);
    lj_model_free(&t->m);
}

#endif
