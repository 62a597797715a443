/* test_loader.c: the dataset reader and the data loader: window contents (Megatron uint16 /
 * int32, llm.c uint16 / uint32 shards, sequences stored out of order), determinism, the
 * per-epoch permutation, rank partitioning, resume through JSON, blending proportions, the
 * train/valid split and the --data-path / --split parsers. The tests write their own tiny
 * datasets (layout: docs/reference.md) under $LJ_TEST_TMP. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>
#include <unistd.h>

#include "tests/test_util.h"
#include "base/base.h"
#include "data/loader.h"
#include "data/mmidx.h"

/* ---- tiny dataset writers ---------------------------------------------------------- */

static char g_dir[512];

static const char *tmp_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/loader_%d_%s", g_dir, (int)getpid(), name);
    return buf;
}

static void write_file(const char *path, const void *data, size_t n) {
    assert_int_equal(lj_test_write_file(path, data, n), 0);
}

/* Writes PREFIX.bin/.idx with `nseq` sequences of lens[i] tokens, taken in order from the
 * stream `tok`. reverse = 1 stores the sequences in the .bin in reverse order (the offsets
 * still point at each one), which the reader must handle. */
static void write_megatron(const char *prefix, int code, int nseq, const int32_t *lens, const int32_t *tok, int reverse) {
    size_t ts = code == LJ_MMIDX_U16 ? 2 : 4;
    int64_t total = 0;
    for (int i = 0; i < nseq; i++) total += lens[i];
    uint8_t *bin = malloc((size_t)total * ts + 1);
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(nseq + 1));
    int64_t *stream_at = malloc(sizeof(int64_t) * (size_t)(nseq + 1));
    int64_t s = 0;
    for (int i = 0; i < nseq; i++) stream_at[i] = s, s += lens[i];
    int64_t pos = 0; /* in tokens, in the .bin */
    for (int k = 0; k < nseq; k++) {
        int i = reverse ? nseq - 1 - k : k;
        off[i] = pos * (int64_t)ts;
        for (int t = 0; t < lens[i]; t++, pos++) {
            int32_t v = tok[stream_at[i] + t];
            if (ts == 2) {
                uint16_t u = (uint16_t)v;
                memcpy(bin + pos * 2, &u, 2);
            } else {
                memcpy(bin + pos * 4, &v, 4);
            }
        }
    }
    char path[1024];
    snprintf(path, sizeof path, "%s.bin", prefix);
    write_file(path, bin, (size_t)total * ts);
    size_t idx_n = 34 + (size_t)nseq * 12 + (size_t)(nseq + 1) * 8;
    uint8_t *idx = calloc(1, idx_n), *p = idx;
    memcpy(p, "MMIDIDX\0\0", 9), p += 9;
    uint64_t version = 1, count = (uint64_t)nseq, docs = (uint64_t)nseq + 1;
    memcpy(p, &version, 8), p += 8;
    *p++ = (uint8_t)code;
    memcpy(p, &count, 8), p += 8;
    memcpy(p, &docs, 8), p += 8;
    memcpy(p, lens, (size_t)nseq * 4), p += nseq * 4;
    memcpy(p, off, (size_t)nseq * 8), p += nseq * 8;
    for (int64_t d = 0; d <= nseq; d++) memcpy(p, &d, 8), p += 8;
    snprintf(path, sizeof path, "%s.idx", prefix);
    write_file(path, idx, idx_n);
    free(bin), free(off), free(stream_at), free(idx);
}

/* llm.c shard: 256 x int32 header (magic, version, count), then uint16 or uint32 tokens. */
static void write_llmc(const char *path, int u32, int n, const int32_t *tok) {
    size_t ts = u32 ? 4 : 2;
    uint8_t *buf = calloc(1, 1024 + (size_t)n * ts);
    int32_t h[3] = {u32 ? 20240801 : 20240520, u32 ? 7 : 1, n};
    memcpy(buf, h, sizeof h);
    for (int i = 0; i < n; i++) {
        if (u32) {
            uint32_t v = (uint32_t)tok[i];
            memcpy(buf + 1024 + 4 * i, &v, 4);
        } else {
            uint16_t v = (uint16_t)tok[i];
            memcpy(buf + 1024 + 2 * i, &v, 2);
        }
    }
    write_file(path, buf, 1024 + (size_t)n * ts);
    free(buf);
}

/* A dataset whose stream token at position p is base + p, cut into sequences of pseudo-random
 * lengths 0..2*mean (some empty). */
static void make_counting(const char *prefix, int code, int64_t ntok, int32_t base, int mean, int reverse) {
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)ntok);
    for (int64_t i = 0; i < ntok; i++) tok[i] = base + (int32_t)i;
    int32_t *lens = malloc(sizeof(int32_t) * (size_t)ntok);
    int nseq = 0;
    int64_t left = ntok;
    lj_rng rng;
    lj_rng_seed(&rng, 99);
    while (left > 0) {
        int64_t l = (int64_t)lj_rng_below(&rng, (uint64_t)(2 * mean + 1));
        if (l > left) l = left;
        lens[nseq++] = (int32_t)l;
        left -= l;
    }
    write_megatron(prefix, code, nseq, lens, tok, reverse);
    free(tok), free(lens);
}

static lj_loader_config base_config(const char *path, int T, int B) {
    lj_loader_config c;
    memset(&c, 0, sizeof c);
    c.num_datasets = 1;
    snprintf(c.paths[0], sizeof c.paths[0], "%s", path);
    snprintf(c.split, sizeof c.split, "1,0,0");
    c.seq_length = T;
    c.micro_batch_size = B;
    c.seed = 1234;
    return c;
}

/* Asserts that row is base + s*T .. base + s*T + T for some s and returns s. */
static int64_t window_index(const int32_t *row, int T, int32_t base) {
    int64_t s = (row[0] - base) / T;
    assert_int_equal((row[0] - base) % T, 0);
    for (int t = 0; t <= T; t++) assert_int_equal(row[t], base + s * T + t);
    return s;
}

/* ---- tests ------------------------------------------------------------------------- */

static void check_contents(int code, int reverse) {
    char prefix[600];
    tmp_path(prefix, sizeof prefix, code == LJ_MMIDX_U16 ? "u16" : reverse ? "i32rev" : "i32");
    const int64_t ntok = 5003;
    const int T = 7, B = 3;
    make_counting(prefix, code, ntok, 3, 20, reverse);
    lj_loader_config c = base_config(prefix, T, B);
    c.no_shuffle = 1;
    lj_loader ld;
    assert_int_equal(lj_loader_init(&ld, &c), LJ_OK);
    int64_t n = lj_loader_samples_per_epoch(&ld, 0);
    assert_int_equal(n, (ntok - 1) / T);
    int32_t tok[3 * 8];
    for (int64_t k = 0; k < n; k += B) { /* in order: window k covers stream [kT, kT + T] */
        lj_loader_next(&ld, tok);
        for (int b = 0; b < B; b++) assert_int_equal(window_index(tok + b * (T + 1), T, 3), (k + b) % n);
    }
    assert_int_equal(lj_loader_check_vocab(&ld, 3 + (int)ntok), LJ_OK);
    lj_loader_free(&ld);
}

static void test_window_contents_i32(void **state) { (void)state; check_contents(LJ_MMIDX_I32, 0); }
static void test_window_contents_u16(void **state) { (void)state; check_contents(LJ_MMIDX_U16, 0); }
static void test_window_contents_out_of_order(void **state) { (void)state; check_contents(LJ_MMIDX_I32, 1); }

static void test_reader_fields(void **state) {
    (void)state;
    char prefix[600], path[700];
    tmp_path(prefix, sizeof prefix, "fields");
    int32_t tok[10] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, lens[3] = {4, 0, 6};
    write_megatron(prefix, LJ_MMIDX_I32, 3, lens, tok, 0);
    lj_token_dataset ds;
    /* PREFIX, PREFIX.bin and PREFIX.idx all name the same dataset. */
    const char *suffix[3] = {"", ".bin", ".idx"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s%s", prefix, suffix[i]);
        assert_int_equal(lj_token_dataset_open(&ds, path), LJ_OK);
        assert_int_equal(ds.dtype_code, LJ_MMIDX_I32);
        assert_int_equal(ds.num_sequences, 3);
        assert_int_equal(ds.num_tokens, 10);
        assert_int_equal(ds.seq_lengths[2], 6);
        assert_int_equal(ds.seq_offsets[2], 16);
        assert_int_equal(lj_token_dataset_get(&ds, 9), 14);
        assert_string_equal(ds.path, prefix);
        lj_token_dataset_close(&ds);
    }
}

static void test_llmc_shards(void **state) {
    (void)state;
    const int n = 3001, T = 10;
    int32_t *tok = malloc(sizeof(int32_t) * n);
    for (int u32 = 0; u32 < 2; u32++) {
        int32_t base = u32 ? 100000 : 1000; /* uint32 ids above 65535 must survive */
        for (int i = 0; i < n; i++) tok[i] = base + i;
        char path[600];
        tmp_path(path, sizeof path, u32 ? "shard_u32.bin" : "shard_u16.bin");
        write_llmc(path, u32, n, tok);
        lj_token_dataset ds;
        assert_int_equal(lj_token_dataset_open(&ds, path), LJ_OK);
        assert_int_equal(ds.token_size, u32 ? 4 : 2);
        assert_int_equal(ds.num_tokens, n);
        assert_int_equal(ds.num_sequences, 1);
        assert_int_equal(lj_token_dataset_get(&ds, 17), base + 17);
        assert_int_equal(lj_token_dataset_check_vocab(&ds, base + n), LJ_OK);
        assert_int_equal(lj_token_dataset_check_vocab(&ds, base + n - 1), LJ_ERR_FORMAT);
        lj_token_dataset_close(&ds);

        /* The default split (969,30,1) puts a one-sequence shard in train. */
        lj_loader_config c = base_config(path, T, 2);
        c.split[0] = '\0';
        lj_loader ld;
        assert_int_equal(lj_loader_init(&ld, &c), LJ_OK);
        assert_int_equal(lj_loader_samples_per_epoch(&ld, 0), (n - 1) / T);
        int32_t out[2 * 11];
        char seen[300] = {0};
        for (int k = 0; k < 300; k += 2) {
            lj_loader_next(&ld, out);
            for (int b = 0; b < 2; b++) seen[window_index(out + b * (T + 1), T, base)]++;
        }
        for (int k = 0; k < 300; k++) assert_int_equal(seen[k], 1);
        lj_loader_free(&ld);
    }
    free(tok);
}

/* Reads `steps` micro-batches and returns the window indices, [steps * B]. */
static int64_t *read_indices(lj_loader *ld, int steps, int T, int B, int32_t base) {
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)steps * (size_t)B);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)B * (size_t)(T + 1));
    for (int s = 0; s < steps; s++) {
        lj_loader_next(ld, tok);
        for (int b = 0; b < B; b++) idx[s * B + b] = window_index(tok + b * (T + 1), T, base);
    }
    free(tok);
    return idx;
}

static void test_determinism_and_epochs(void **state) {
    (void)state;
    char prefix[600];
    tmp_path(prefix, sizeof prefix, "det");
    const int T = 16, B = 4;
    make_counting(prefix, LJ_MMIDX_I32, 16 * 100 + 1, 0, 30, 0); /* exactly 100 samples */
    lj_loader_config c = base_config(prefix, T, B);
    lj_loader a, b;
    assert_int_equal(lj_loader_init(&a, &c), LJ_OK);
    assert_int_equal(lj_loader_init(&b, &c), LJ_OK);
    assert_int_equal(lj_loader_samples_per_epoch(&a, 0), 100);
    int64_t *ia = read_indices(&a, 50, T, B, 0), *ib = read_indices(&b, 50, T, B, 0); /* two epochs */
    assert_memory_equal(ia, ib, sizeof(int64_t) * 200);
    /* Each epoch is a permutation of the 100 samples, and the two epochs differ in order. */
    for (int e = 0; e < 2; e++) {
        int seen[100] = {0};
        for (int k = 0; k < 100; k++) seen[ia[e * 100 + k]]++;
        for (int k = 0; k < 100; k++) assert_int_equal(seen[k], 1);
    }
    assert_true(memcmp(ia, ia + 100, sizeof(int64_t) * 100) != 0);
    /* Shuffled: not the identity order. */
    int identity = 1;
    for (int k = 0; k < 100; k++) identity &= ia[k] == k;
    assert_false(identity);
    assert_int_equal(lj_loader_epoch(&a, 0), 2);
    lj_loader_free(&b);
    c.seed = 1235;
    assert_int_equal(lj_loader_init(&b, &c), LJ_OK);
    int64_t *ic = read_indices(&b, 25, T, B, 0);
    assert_true(memcmp(ia, ic, sizeof(int64_t) * 100) != 0);
    free(ia), free(ib), free(ic);
    lj_loader_free(&a), lj_loader_free(&b);
}

static void test_rank_partition(void **state) {
    (void)state;
    char prefix[600];
    tmp_path(prefix, sizeof prefix, "ranks");
    const int T = 8, n = 97; /* 97 samples: not a multiple of any world * B below */
    make_counting(prefix, LJ_MMIDX_I32, (int64_t)T * n + 1, 0, 12, 0);
    const int B = 3, total = 3 * n; /* three epochs of global samples */
    lj_loader_config c = base_config(prefix, T, 1);
    lj_loader one;
    assert_int_equal(lj_loader_init(&one, &c), LJ_OK);
    int64_t *global = read_indices(&one, total + 64, T, 1, 0);
    for (int world = 2; world <= 3; world++) {
        int *count = calloc((size_t)n, sizeof(int));
        int steps = total / (world * B) + 1;
        for (int r = 0; r < world; r++) {
            lj_loader_config rc = base_config(prefix, T, B);
            rc.dp_rank = r;
            rc.dp_world_size = world;
            lj_loader ld;
            assert_int_equal(lj_loader_init(&ld, &rc), LJ_OK);
            int64_t *mine = read_indices(&ld, steps, T, B, 0);
            if (r == 0) { /* elastic resume: this world's position, continued by one rank */
                lj_loader_state st;
                lj_loader_get_state(&ld, &st);
                assert_int_equal(st.consumed_samples, (int64_t)steps * B * world);
                assert_int_equal(lj_loader_set_state(&one, &st), LJ_OK);
                int64_t *next = read_indices(&one, 1, T, 1, 0);
                assert_int_equal(next[0], global[st.consumed_samples]);
                free(next);
            }
            for (int m = 0; m < steps * B; m++) {
                int64_t k = r + (int64_t)world * m; /* the global sample this rank got */
                if (k >= total) break;
                assert_int_equal(mine[m], global[k]);
                if (k < n) count[mine[m]]++; /* the first epoch */
            }
            free(mine);
            lj_loader_free(&ld);
        }
        for (int s = 0; s < n; s++) assert_int_equal(count[s], 1); /* union over ranks = the epoch */
        free(count);
    }
    free(global);
    lj_loader_free(&one);
}

static void test_resume_json(void **state) {
    (void)state;
    char pa[600], pb[600];
    tmp_path(pa, sizeof pa, "resA");
    tmp_path(pb, sizeof pb, "resB");
    const int T = 8, B = 2;
    make_counting(pa, LJ_MMIDX_I32, 8 * 50 + 1, 0, 10, 0);
    make_counting(pb, LJ_MMIDX_U16, 8 * 30 + 1, 1000, 10, 0);
    lj_loader_config c = base_config(pa, T, B);
    const char *args[] = {"0.6", pa, "0.4", pb};
    assert_int_equal(lj_loader_parse_data_path(&c, 4, args), LJ_OK);
    c.dp_world_size = 2;
    c.dp_rank = 1;
    lj_loader a, b;
    assert_int_equal(lj_loader_init(&a, &c), LJ_OK);
    int32_t ta[2 * 9], tb[2 * 9];
    for (int i = 0; i < 37; i++) lj_loader_next(&a, ta); /* past the first epoch of both */
    lj_loader_state st, back;
    lj_loader_get_state(&a, &st);
    assert_int_equal(st.consumed_samples, 37 * B * 2);
    cJSON *j = lj_loader_state_to_json(&st);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    cJSON *parsed = cJSON_Parse(text);
    assert_int_equal(lj_loader_state_from_json(parsed, &back, "ckpt/state.json"), LJ_OK);
    cJSON_Delete(parsed);
    free(text);
    assert_int_equal(lj_loader_init(&b, &c), LJ_OK);
    assert_int_equal(lj_loader_set_state(&b, &back), LJ_OK);
    for (int i = 0; i < 60; i++) {
        lj_loader_next(&a, ta);
        lj_loader_next(&b, tb);
        assert_memory_equal(ta, tb, sizeof ta);
    }
    /* A state from another seed or dataset count is refused. */
    back.seed++;
    assert_int_equal(lj_loader_set_state(&b, &back), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "seed"));
    back.seed--;
    back.num_datasets = 1;
    assert_int_equal(lj_loader_set_state(&b, &back), LJ_ERR_ARG);
    /* A missing field in the JSON names the field and the file. */
    cJSON *bad = cJSON_Parse("{\"seed\": \"1\", \"dataset_samples\": [1]}");
    assert_int_equal(lj_loader_state_from_json(bad, &back, "ckpt/state.json"), LJ_ERR_FORMAT);
    assert_non_null(strstr(lj_error_message(), "ckpt/state.json"));
    assert_non_null(strstr(lj_error_message(), "consumed_samples"));
    cJSON_Delete(bad);
    lj_loader_free(&a), lj_loader_free(&b);
}

static void test_blend_proportions(void **state) {
    (void)state;
    char pa[600], pb[600];
    tmp_path(pa, sizeof pa, "blA");
    tmp_path(pb, sizeof pb, "blB");
    const int T = 4, B = 8;
    make_counting(pa, LJ_MMIDX_I32, 4 * 500 + 1, 0, 10, 0);          /* 500 samples, ids < 1e6 */
    make_counting(pb, LJ_MMIDX_I32, 4 * 2000 + 1, 1000000, 10, 0);   /* 2000 samples */
    char data_path[1400];
    snprintf(data_path, sizeof data_path, "0.7 %s 0.3 %s", pa, pb);
    lj_loader_config c = base_config(pa, T, B);
    const char *args[] = {data_path};
    assert_int_equal(lj_loader_parse_data_path(&c, 1, args), LJ_OK);
    assert_int_equal(c.num_datasets, 2);
    assert_true(c.weights[0] == 0.7 && c.weights[1] == 0.3);
    assert_string_equal(c.paths[1], pb);
    lj_loader ld;
    assert_int_equal(lj_loader_init(&ld, &c), LJ_OK);
    const int steps = 1250; /* 10000 samples: A passes 14 epochs, B 1.5 */
    int64_t na = 0, nb = 0;
    int32_t tok[8 * 5];
    int *seen_a = calloc(500, sizeof(int));
    for (int s = 0; s < steps; s++) {
        lj_loader_next(&ld, tok);
        for (int b = 0; b < B; b++) {
            const int32_t *row = tok + b * (T + 1);
            if (row[0] >= 1000000) {
                window_index(row, T, 1000000);
                nb++;
            } else {
                int64_t w = window_index(row, T, 0);
                if (na < 500) seen_a[w]++; /* the first epoch of A */
                na++;
            }
        }
    }
    for (int k = 0; k < 500; k++) assert_int_equal(seen_a[k], 1);
    free(seen_a);
    double fa = (double)na / (double)(na + nb);
    assert_true(fa > 0.69 && fa < 0.71);
    assert_int_equal(na + nb, 10000);
    assert_true(na == 7000 || na == 7001); /* the greedy rule is exact to one sample */
    lj_loader_free(&ld);

    /* Paths only: weights proportional to the samples (500 : 2000). */
    snprintf(data_path, sizeof data_path, "%s %s", pa, pb);
    assert_int_equal(lj_loader_parse_data_path(&c, 1, args), LJ_OK);
    assert_true(c.weights[0] == 0 && c.weights[1] == 0);
    assert_int_equal(lj_loader_init(&ld, &c), LJ_OK);
    assert_true(ld.sources[0].weight > 0.199 && ld.sources[0].weight < 0.201);
    lj_loader_free(&ld);
}

/* The first picks of Megatron's greedy rule, derived by hand from helpers.cpp:
 * 0.7/0.3 -> A B A A B A A B A A; 0.5/0.5 -> A B A B (ties go to the first dataset). */
static void test_blend_order(void **state) {
    (void)state;
    char pa[600], pb[600];
    tmp_path(pa, sizeof pa, "boA");
    tmp_path(pb, sizeof pb, "boB");
    make_counting(pa, LJ_MMIDX_I32, 4 * 50 + 1, 0, 10, 0);
    make_counting(pb, LJ_MMIDX_I32, 4 * 50 + 1, 1000000, 10, 0);
    const double w[2][2] = {{0.7, 0.3}, {0.5, 0.5}};
    const char *want[2] = {"ABAABAABAA", "ABABABABAB"};
    for (int v = 0; v < 2; v++) {
        lj_loader_config c = base_config(pa, 4, 10);
        c.num_datasets = 2;
        snprintf(c.paths[1], sizeof c.paths[1], "%s", pb);
        c.weights[0] = w[v][0], c.weights[1] = w[v][1];
        lj_loader ld;
        assert_int_equal(lj_loader_init(&ld, &c), LJ_OK);
        int32_t tok[10 * 5];
        char got[11] = {0};
        lj_loader_next(&ld, tok);
        for (int b = 0; b < 10; b++) got[b] = tok[b * 5] >= 1000000 ? 'B' : 'A';
        assert_string_equal(got, want[v]);
        lj_loader_free(&ld);
    }
}

static void test_split_disjoint(void **state) {
    (void)state;
    char prefix[600];
    tmp_path(prefix, sizeof prefix, "split");
    /* 1000 sequences of 6 tokens; every token of sequence d is d. */
    enum { NSEQ = 1000, L = 6 };
    int32_t *tok = malloc(sizeof(int32_t) * NSEQ * L), lens[NSEQ];
    for (int d = 0; d < NSEQ; d++) {
        lens[d] = L;
        for (int t = 0; t < L; t++) tok[d * L + t] = d;
    }
    write_megatron(prefix, LJ_MMIDX_U16, NSEQ, lens, tok, 0);
    free(tok);
    const int T = 5, B = 2;
    const int lo[3] = {0, 969, 999}, hi[3] = {969, 999, 1000};
    for (int which = 0; which < 3; which++) {
        lj_loader_config c = base_config(prefix, T, B);
        snprintf(c.split, sizeof c.split, "969, 30, 1");
        c.which = (lj_split)which;
        lj_loader ld;
        assert_int_equal(lj_loader_init(&ld, &c), LJ_OK);
        assert_int_equal(ld.sources[0].first_seq, lo[which]);
        assert_int_equal(ld.sources[0].last_seq, hi[which]);
        int64_t n = lj_loader_samples_per_epoch(&ld, 0);
        assert_int_equal(n, ((hi[which] - lo[which]) * L - 1) / T);
        int32_t out[2 * 6], first[2 * 6];
        for (int64_t k = 0; k < n + 4; k += B) {
            lj_loader_next(&ld, out);
            if (k == 0) memcpy(first, out, sizeof out);
            for (int i = 0; i < B * (T + 1); i++) assert_true(out[i] >= lo[which] && out[i] < hi[which]);
        }
        /* reset restarts the split from its first batch */
        lj_loader_reset(&ld);
        lj_loader_next(&ld, out);
        assert_memory_equal(out, first, sizeof out);
        lj_loader_free(&ld);
    }
    tmp_path(prefix, sizeof prefix, "split10");
    int32_t tok10[60], lens10[10];
    for (int i = 0; i < 60; i++) tok10[i] = i;
    for (int i = 0; i < 10; i++) lens10[i] = 6;
    write_megatron(prefix, LJ_MMIDX_I32, 10, lens10, tok10, 0);
    /* Megatron's bounds on 10 sequences. 46,46,8: round(4.6), round(4.6), round(0.8) = 5, 5, 1,
     * shifted by -1 -> [0, 4, 9, 10] (floor would give [0, 6, 10, 10]). 1,1,2: round half to
     * even of 2.5, 2.5, 5 = 2, 2, 5, shifted by +1 -> [0, 3, 5, 10] (half up: [0, 2, 5, 10]). */
    lj_loader ld;
    lj_loader_config c = base_config(prefix, 4, 1);
    const char *splits[2] = {"46,46,8", "1,1,2"};
    const int bounds[2][4] = {{0, 4, 9, 10}, {0, 3, 5, 10}};
    for (int v = 0; v < 2; v++) {
        snprintf(c.split, sizeof c.split, "%s", splits[v]);
        for (int which = 0; which < 3; which++) {
            c.which = (lj_split)which;
            assert_int_equal(lj_loader_init(&ld, &c), LJ_OK);
            assert_int_equal(ld.sources[0].first_seq, bounds[v][which]);
            assert_int_equal(ld.sources[0].last_seq, bounds[v][which + 1]);
            lj_loader_free(&ld);
        }
    }
    /* 969,30,1 of 10 sequences: train 10, valid 0, test 0. */
    c.split[0] = '\0';
    c.which = LJ_SPLIT_VALID;
    assert_int_equal(lj_loader_init(&ld, &c), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), prefix));
    assert_non_null(strstr(lj_error_message(), "valid split"));
    assert_non_null(strstr(lj_error_message(), "has 0 tokens"));
    c.which = LJ_SPLIT_TRAIN;
    c.seq_length = 60; /* 60 tokens cannot hold one 61-token window */
    assert_int_equal(lj_loader_init(&ld, &c), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "train split"));
    c.seq_length = 59;
    assert_int_equal(lj_loader_init(&ld, &c), LJ_OK);
    assert_int_equal(lj_loader_samples_per_epoch(&ld, 0), 1);
    lj_loader_free(&ld);
}

static void test_parsers(void **state) {
    (void)state;
    double f[3];
    assert_int_equal(lj_loader_parse_split("969,30,1", f), LJ_OK);
    assert_true(f[0] == 0.969 && f[1] == 0.03 && f[2] == 0.001);
    assert_int_equal(lj_loader_parse_split("98,2", f), LJ_OK);
    assert_true(f[0] == 0.98 && f[1] == 0.02 && f[2] == 0);
    assert_int_equal(lj_loader_parse_split("1,2,3,4", f), LJ_ERR_ARG);
    assert_int_equal(lj_loader_parse_split("90,x", f), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "--split"));
    assert_int_equal(lj_loader_parse_split("0,0", f), LJ_ERR_ARG);
    /* the quotes a launch script's "--split '99,1,0'" leaves in the value: read as Megatron-LM does */
    assert_int_equal(lj_loader_parse_split("'99,1,0'", f), LJ_OK);
    assert_true(f[0] == 0.99 && f[1] == 0.01 && f[2] == 0);
    assert_int_equal(lj_loader_parse_split("\"98,2\"", f), LJ_OK);
    assert_true(f[0] == 0.98 && f[1] == 0.02 && f[2] == 0);
    assert_int_equal(lj_loader_parse_split("'99,1", f), LJ_ERR_ARG); /* unmatched: not a quoted value */

    lj_loader_config c;
    memset(&c, 0, sizeof c);
    const char *one[] = {"data/kjv"};
    assert_int_equal(lj_loader_parse_data_path(&c, 1, one), LJ_OK);
    assert_int_equal(c.num_datasets, 1);
    assert_string_equal(c.paths[0], "data/kjv");
    const char *mixed[] = {"0.5", "A", "B", "C"};
    assert_int_equal(lj_loader_parse_data_path(&c, 4, mixed), LJ_ERR_ARG);
    const char *neg[] = {"-1", "A", "2", "B"};
    assert_int_equal(lj_loader_parse_data_path(&c, 4, neg), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "weight"));
    assert_int_equal(lj_loader_parse_data_path(&c, 0, NULL), LJ_ERR_ARG);
}

int main(void) {
    const char *t = getenv("LJ_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s", t && t[0] ? t : "/tmp");
    if (lj_mkdir_p(g_dir) != LJ_OK) {
        fprintf(stderr, "%s\n", lj_error_message());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_contents_i32),
        cmocka_unit_test(test_window_contents_u16),
        cmocka_unit_test(test_window_contents_out_of_order),
        cmocka_unit_test(test_reader_fields),
        cmocka_unit_test(test_llmc_shards),
        cmocka_unit_test(test_determinism_and_epochs),
        cmocka_unit_test(test_rank_partition),
        cmocka_unit_test(test_resume_json),
        cmocka_unit_test(test_blend_proportions),
        cmocka_unit_test(test_blend_order),
        cmocka_unit_test(test_split_disjoint),
        cmocka_unit_test(test_parsers),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    /* Remove this run's files. */
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -f %s/loader_%d_*", g_dir, (int)getpid());
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s/loader_%d_*\n", g_dir, (int)getpid());
    return rc;
}
