/* test_docmask.c: document masking in packed sequences (Megatron-LM's --reset-position-ids,
 * --reset-attention-mask, --eod-mask-loss): the per-token arrays of data/docmask.h against
 * Megatron's _get_ltor_masks_and_position_ids worked by hand; and the whole model on the CPU
 * backend (Llama, Qwen3's QK-norm, Qwen2's biases; fused and unfused; every recompute policy):
 * a packed micro-batch of several documents with all three flags gives the per-token losses and
 * the summed gradients of running each document as its own sequence, and with the flags on but
 * no EOD in the batch the model is bit for bit the default one; and on data made by `prepare`
 * with the Llama 3 and the Qwen3 tokenizers, the masking splits at the separator the dataset
 * records (Qwen3's <|endoftext|>, not the chat model's EOS), with the same equalities. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "config/config.h"
#include "data/docmask.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "parallel/parallel.h"
#include "plan/plan.h"
#include "tests/test_util.h"

enum { EOD = 2 }; /* lj_test_small_config's eos_token_id */

static void test_sequence_arrays(void **state) {
    (void)state;
    /* inputs: a b EOD c d e EOD EOD f g  (documents [0,3), [3,7), [7,8), [8,10)) */
    const int32_t in[10] = {5, 6, EOD, 7, 8, 9, EOD, EOD, 10, 11};
    const int32_t want_pos[10] = {0, 1, 2, 0, 1, 2, 3, 0, 0, 1};
    const int32_t want_ds[10] = {0, 0, 0, 3, 3, 3, 3, 7, 8, 8};
    int32_t pos[10], ds[10], tg[10];
    for (int t = 0; t < 10; t++) tg[t] = 100 + t;
    const lj_doc_mask all = {1, 1, 1, EOD};
    lj_doc_mask_sequence(&all, in, 10, pos, ds, tg);
    assert_memory_equal(pos, want_pos, sizeof pos);
    assert_memory_equal(ds, want_ds, sizeof ds);
    for (int t = 0; t < 10; t++) assert_int_equal(tg[t], in[t] == EOD ? -1 : 100 + t); /* where the INPUT is EOD */
    /* each flag alone leaves the others' arrays plain */
    const lj_doc_mask pos_only = {1, 0, 0, EOD};
    for (int t = 0; t < 10; t++) tg[t] = 100 + t;
    lj_doc_mask_sequence(&pos_only, in, 10, pos, ds, tg);
    assert_memory_equal(pos, want_pos, sizeof pos);
    for (int t = 0; t < 10; t++) assert_int_equal(ds[t], 0), assert_int_equal(tg[t], 100 + t);
    const lj_doc_mask attn_only = {0, 1, 0, EOD};
    lj_doc_mask_sequence(&attn_only, in, 10, pos, ds, NULL);
    assert_memory_equal(ds, want_ds, sizeof ds);
    for (int t = 0; t < 10; t++) assert_int_equal(pos[t], t);
}

/* ---- the model -------------------------------------------------------------------- */

static lj_model_config family_config(int k) {
    lj_model_config c = lj_test_small_config(2, k % 2);
    c.initializer_range = 0.2;
    if (k / 2 == 1) {
        c.family = LJ_FAMILY_QWEN3;
        c.qk_norm = 1;
        c.head_dim = 16;
        c.rms_norm_eps = 1e-6;
    }
    if (k / 2 == 2) {
        c.family = LJ_FAMILY_QWEN2;
        c.qkv_bias = 1;
    }
    return c;
}

/* The weights of a model of config c from its own init with `seed` (free() them); *P their count. */
static float *family_weights(const lj_model_config *c, uint64_t seed, int64_t *P) {
    lj_test_model tw;
    assert_int_equal(lj_test_model_create(&tw, c, 1, 4, 1, LJ_RECOMPUTE_NONE), LJ_OK);
    lj_model_init_weights(&tw.m, seed);
    *P = tw.m.layout.total;
    float *weights = lj_malloc((size_t)*P * sizeof(float));
    lj_model_get_weights(&tw.m, weights);
    lj_test_model_destroy(&tw);
    return weights;
}

typedef struct {
    lj_test_model t;
    float *losses, *grads; /* host copies after one forward + backward */
    float *qkv0;           /* layer 0's attention input (after RoPE), [B*T, QKV] */
} run;

/* One forward + backward of `tokens` [B, T+1] with dloss and the flags of `dm` (NULL: off). */
static void run_batch(run *r, const lj_model_config *c, const float *weights, int B, int T, int fused, int policy,
                      const lj_doc_mask *dm, const int32_t *tokens, float dloss) {
    lj_model_options o = lj_test_train_options(B, T, fused);
    memset(o.recompute, policy, sizeof o.recompute);
    if (dm) o.doc_mask = *dm;
    lj_model_init(&r->t.m, lj_ops_cpu(), c, &o);
    lj_parallelize(&r->t.m, NULL, NULL);
    lj_plan_build(&r->t.p, &r->t.m);
    assert_int_equal(lj_plan_allocate(&r->t.p, &r->t.m), LJ_OK);
    lj_model_upload_rope(&r->t.m);
    lj_model *m = &r->t.m;
    lj_model_set_weights(m, weights);
    lj_model_set_batch(m, tokens);
    m->ops->memset_zero(m->grads, (size_t)m->layout.total * sizeof(float));
    lj_model_forward(m, 1, dloss);
    lj_model_backward(m);
    r->losses = lj_malloc((size_t)B * T * sizeof(float));
    r->grads = lj_malloc((size_t)m->layout.total * sizeof(float));
    m->ops->download(r->losses, m->losses, (size_t)B * T * sizeof(float));
    m->ops->download(r->grads, m->grads, (size_t)m->layout.total * sizeof(float));
    /* layer 0 is the backward's last: its qkv is in place under every recompute policy */
    const size_t nq = (size_t)B * T * m->spec.QKV;
    r->qkv0 = lj_malloc(nq * sizeof(float));
    m->ops->download(r->qkv0, m->layers[0].qkv, nq * sizeof(float));
}

static void run_free(run *r) {
    lj_test_model_destroy(&r->t);
    free(r->losses);
    free(r->grads);
    free(r->qkv0);
}

enum { PB = 2, PT = 24 };

/* Two sequences of documents with EODs (a one-token document, an EOD as the last input, a
 * document cut by the window's end). */
static void packed_tokens(int32_t *tok) {
    for (int i = 0; i < PB * (PT + 1); i++) tok[i] = 3 + (i * 37 + 11) % 90;
    const int eods[] = {4, 5, 13, 20, PT + 1 + 6, PT + 1 + 15, PT + 1 + PT - 1};
    for (size_t i = 0; i < sizeof eods / sizeof eods[0]; i++) tok[eods[i]] = EOD;
}

/* Checks that the packed batch tok [B, T+1] under dm (all three flags) gives each document's
 * per-token losses, layer 0's RoPE'd qkv and, summed, the gradients of running it as its own
 * sequence; returns the number of documents. */
static int check_packed_equals_alone(const lj_model_config *c, const float *weights, int64_t P, int B, int T,
                                     const lj_doc_mask *dm, const int32_t *tok, int fused, int policy,
                                     const char *what) {
    const float dloss = 1.0f / (float)(B * T);
    const int32_t eod = dm->eod_token;
    run packed;
    run_batch(&packed, c, weights, B, T, fused, policy, dm, tok, dloss);
    /* each document alone: inputs [s, e) of its sequence with the packed targets */
    float *sum = lj_calloc((size_t)P, sizeof(float));
    int docs = 0;
    for (int b = 0; b < B; b++) {
        const int32_t *seq = tok + b * (T + 1);
        for (int s = 0; s < T;) {
            int e = s;
            while (e < T && (e == s || seq[e - 1] != eod)) e++;
            run one;
            run_batch(&one, c, weights, 1, e - s, fused, policy, dm, seq + s, dloss);
            for (int i = 0; i < e - s; i++) {
                const float a = packed.losses[b * T + s + i], r = one.losses[i];
                if (!(fabsf(a - r) <= 2e-6f * (1.0f + fabsf(r))))
                    fail_msg("%s: sequence %d token %d: packed loss %.9g, alone %.9g", what, b, s + i, (double)a,
                             (double)r);
                if (seq[s + i] == eod) assert_true(a == 0.0f); /* --eod-mask-loss */
            }
            /* RoPE by the position in the document (--reset-position-ids) */
            const int QKV = packed.t.m.spec.QKV;
            for (int64_t i = 0; i < (int64_t)(e - s) * QKV; i++) {
                const float a = packed.qkv0[((int64_t)b * T + s) * QKV + i], r = one.qkv0[i];
                if (!(fabsf(a - r) <= 1e-5f * (1.0f + fabsf(r))))
                    fail_msg("%s: sequence %d token %d: layer 0 qkv %.9g, alone %.9g", what, b, s + (int)(i / QKV),
                             (double)a, (double)r);
            }
            for (int64_t i = 0; i < P; i++) sum[i] += one.grads[i];
            run_free(&one);
            docs++;
            s = e;
        }
    }
    double num = 0, den = 0;
    for (int64_t i = 0; i < P; i++) {
        const double d = (double)packed.grads[i] - sum[i];
        num += d * d;
        den += (double)sum[i] * sum[i];
    }
    if (!(sqrt(num) <= 1e-5 * sqrt(den)))
        fail_msg("%s: packed gradients differ from the documents' sum: rel l2 %.3g", what, sqrt(num / den));
    run_free(&packed);
    free(sum);
    return docs;
}

static void test_packed_equals_documents_alone(void **state) {
    (void)state;
    const lj_doc_mask dm = {1, 1, 1, EOD};
    int32_t tok[PB * (PT + 1)];
    packed_tokens(tok);
    for (int k = 0; k < 6; k++) {
        const lj_model_config c = family_config(k);
        for (int variant = 0; variant < 3; variant++) {
            const int fused = variant != 1, policy = variant == 2 ? LJ_RECOMPUTE_FULL : LJ_RECOMPUTE_NONE;
            /* weights of the family from its own init */
            int64_t P;
            float *weights = family_weights(&c, 7, &P);
            char what[64];
            snprintf(what, sizeof what, "k=%d variant=%d", k, variant);
            assert_int_equal(check_packed_equals_alone(&c, weights, P, PB, PT, &dm, tok, fused, policy, what), 8);
            free(weights);
        }
    }
}

/* ---- data made by `prepare`, per tokenizer family ------------------------------------------ */

/* A dataset of three short documents prepared with the tokenizer of `family` (llama3, qwen3) from
 * the set-up script's cache; the model is a small one of that family with the tokenizer's
 * vocabulary and the preset's eos_token_id (Qwen3's is <|im_end|>, 151645, while prepare ends
 * documents with <|endoftext|>, 151643). The masking must split at the id the dataset records:
 * the flags change the losses, and the packed window equals each document run alone. */
static void prepared_family(const char *family, int k, const char *preset, int32_t want_eod) {
    const char *cache = getenv("LJ_CACHE"), *tmp = getenv("LJ_TEST_TMP");
    if (!cache || !tmp) skip();
    char tok_path[1024], dir[900], txt[1000], prefix[1000];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer/%s/tokenizer.json", cache, family);
    snprintf(dir, sizeof dir, "%s/docmask_%s", tmp, family);
    snprintf(txt, sizeof txt, "%s/docs.txt", dir);
    snprintf(prefix, sizeof prefix, "%s/docs", dir);
    assert_int_equal(lj_mkdir_p(dir), LJ_OK);
    FILE *f = fopen(txt, "w");
    assert_non_null(f);
    fputs("In the beginning God created the heaven and the earth.\n\nAnd God said, Let there be light.\n\n"
          "And the evening and the morning were the first day.\n", f);
    fclose(f);
    lj_prepare_config pc;
    lj_prepare_config_init(&pc);
    const char *inputs[1] = {txt};
    pc.inputs = inputs;
    pc.num_inputs = 1;
    pc.output_prefix = prefix;
    pc.tokenizer_path = tok_path;
    pc.split_on = LJ_PREPARE_SPLIT_BLANK_LINE;
    pc.workers = 1;
    lj_prepare_stats ps;
    assert_int_equal(lj_prepare_run(&pc, &ps), LJ_OK);
    assert_int_equal(ps.documents, 3);

    lj_model_config c = family_config(k);
    lj_model_config pre;
    assert_int_equal(lj_config_preset(preset, &pre), LJ_OK);
    c.vocab_size = pre.vocab_size;
    c.eos_token_id = pre.eos_token_id;
    c.bos_token_id = pre.bos_token_id;
    /* the whole stream as one window of T + 1 tokens */
    lj_loader_config lc;
    memset(&lc, 0, sizeof lc);
    lc.num_datasets = 1;
    assert_true(strlen(prefix) < sizeof lc.paths[0]);
    memcpy(lc.paths[0], prefix, strlen(prefix) + 1);
    snprintf(lc.split, sizeof lc.split, "1");
    lc.seq_length = (int)ps.tokens - 1;
    lc.micro_batch_size = 1;
    lc.no_shuffle = 1;
    lj_loader ld;
    assert_int_equal(lj_loader_init(&ld, &lc), LJ_OK);
    int32_t eod = -1;
    assert_int_equal(lj_loader_eod_token(&ld, c.eos_token_id, c.vocab_size, 0, &eod), LJ_OK);
    assert_int_equal(eod, want_eod);
    const int T = lc.seq_length;
    int32_t *tok = lj_malloc((size_t)(T + 1) * sizeof *tok);
    lj_loader_next(&ld, tok);
    lj_loader_free(&ld);
    int eods = 0;
    for (int t = 0; t < T; t++) eods += tok[t] == eod;
    assert_int_equal(eods, 2); /* two documents end inside the inputs, the third at the target */

    int64_t P;
    float *weights = family_weights(&c, 11, &P);
    const lj_doc_mask dm = {1, 1, 1, eod};
    run plain, masked;
    run_batch(&plain, &c, weights, 1, T, 1, LJ_RECOMPUTE_NONE, NULL, tok, 0.01f);
    run_batch(&masked, &c, weights, 1, T, 1, LJ_RECOMPUTE_NONE, &dm, tok, 0.01f);
    int differ = 0;
    for (int t = 0; t < T; t++) differ += plain.losses[t] != masked.losses[t];
    if (differ == 0) fail_msg("%s: the flags left every loss unchanged", family);
    if (c.eos_token_id != eod) { /* masking at the model's EOS: a no-op on this data */
        const lj_doc_mask at_eos = {1, 1, 1, c.eos_token_id};
        run wrong;
        run_batch(&wrong, &c, weights, 1, T, 1, LJ_RECOMPUTE_NONE, &at_eos, tok, 0.01f);
        assert_memory_equal(wrong.losses, plain.losses, (size_t)T * sizeof(float));
        run_free(&wrong);
    }
    run_free(&plain);
    run_free(&masked);
    assert_int_equal(check_packed_equals_alone(&c, weights, P, 1, T, &dm, tok, 1, LJ_RECOMPUTE_NONE, family), 3);
    free(weights);
    free(tok);
}

static void test_prepared_llama3(void **state) {
    (void)state;
    prepared_family("llama3", 0, "llama3-nano", 128001);
}

static void test_prepared_qwen3(void **state) {
    (void)state;
    prepared_family("qwen3", 2, "qwen3-tiny", 151643);
}

/* The flags on but no EOD in the batch: every op of the masked path equals the plain one bit
 * for bit on the CPU, so losses and gradients are the default run's. */
static void test_flags_without_eod_are_default(void **state) {
    (void)state;
    const lj_doc_mask dm = {1, 1, 1, EOD};
    int32_t tok[PB * (PT + 1)];
    for (int i = 0; i < PB * (PT + 1); i++) tok[i] = 3 + (i * 37 + 11) % 90;
    for (int k = 0; k < 6; k++) {
        const lj_model_config c = family_config(k);
        int64_t P;
        float *weights = family_weights(&c, 9, &P);
        run a, b;
        run_batch(&a, &c, weights, PB, PT, 1, LJ_RECOMPUTE_SELECTIVE, NULL, tok, 0.01f);
        run_batch(&b, &c, weights, PB, PT, 1, LJ_RECOMPUTE_SELECTIVE, &dm, tok, 0.01f);
        assert_memory_equal(a.losses, b.losses, (size_t)PB * PT * sizeof(float));
        assert_memory_equal(a.grads, b.grads, (size_t)P * sizeof(float));
        run_free(&a);
        run_free(&b);
        free(weights);
    }
}

/* Sanity of the reference: without the flags the packed batch does not equal the documents. */
static void test_without_flags_documents_interact(void **state) {
    (void)state;
    int32_t tok[PB * (PT + 1)];
    packed_tokens(tok);
    const lj_model_config c = family_config(0);
    int64_t P;
    float *weights = family_weights(&c, 7, &P);
    run a, one;
    run_batch(&a, &c, weights, PB, PT, 1, LJ_RECOMPUTE_NONE, NULL, tok, 0.01f);
    run_batch(&one, &c, weights, 1, PT - 6, 1, LJ_RECOMPUTE_NONE, NULL, tok + 6, 0.01f); /* the document at 6 */
    assert_true(fabsf(a.losses[6 + 3] - one.losses[3]) > 1e-4f);
    run_free(&a);
    run_free(&one);
    free(weights);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sequence_arrays),
        cmocka_unit_test(test_packed_equals_documents_alone),
        cmocka_unit_test(test_flags_without_eod_are_default),
        cmocka_unit_test(test_without_flags_documents_interact),
        cmocka_unit_test(test_prepared_llama3),
        cmocka_unit_test(test_prepared_qwen3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
