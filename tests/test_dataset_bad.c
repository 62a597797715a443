/* test_dataset_bad.c: bad token datasets are refused with a message naming the file and the
 * field: Megatron .idx with a bad magic, version, dtype, truncated arrays, bad document indices,
 * a .bin shorter than the .idx says, ids at or above the vocabulary size; llm.c shards with a
 * bad version or length; missing files; and the loader passing these errors on. */
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

static char g_dir[512];

static const char *tmp_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/loader_bad_%d_%s", g_dir, (int)getpid(), name);
    return buf;
}

static void write_file(const char *path, const void *data, size_t n) {
    assert_int_equal(lj_test_write_file(path, data, n), 0);
}

/* A good little int32 dataset: 3 sequences of 4 tokens (ids 0..11), as bytes. */
typedef struct {
    uint8_t idx[34 + 3 * 12 + 4 * 8];
    int32_t bin[12];
} good_dataset;

static void make_good(good_dataset *g) {
    uint8_t *p = g->idx;
    memcpy(p, "MMIDIDX\0\0", 9), p += 9;
    uint64_t version = 1, nseq = 3, ndoc = 4;
    memcpy(p, &version, 8), p += 8;
    *p++ = LJ_MMIDX_I32;
    memcpy(p, &nseq, 8), p += 8;
    memcpy(p, &ndoc, 8), p += 8;
    for (int i = 0; i < 3; i++) {
        int32_t len = 4;
        memcpy(p + 4 * i, &len, 4);
        int64_t off = 16 * i, doc = i;
        memcpy(p + 12 + 8 * i, &off, 8);
        memcpy(p + 36 + 8 * i, &doc, 8);
    }
    int64_t last = 3;
    memcpy(p + 36 + 24, &last, 8);
    for (int i = 0; i < 12; i++) g->bin[i] = i;
}

/* Writes the dataset under `name` (PREFIX.idx with idx_n bytes, PREFIX.bin with bin_n bytes),
 * opens it and returns the status; the prefix is left in `prefix`. */
static lj_status open_variant(const good_dataset *g, size_t idx_n, size_t bin_n, const char *name, char *prefix,
                              size_t prefix_n) {
    char path[700];
    tmp_path(prefix, prefix_n, name);
    snprintf(path, sizeof path, "%s.idx", prefix);
    write_file(path, g->idx, idx_n);
    snprintf(path, sizeof path, "%s.bin", prefix);
    write_file(path, g->bin, bin_n);
    lj_token_dataset ds;
    lj_status s = lj_token_dataset_open(&ds, prefix);
    if (s == LJ_OK) lj_token_dataset_close(&ds);
    return s;
}

static void expect_message(const char *a, const char *b) {
    const char *m = lj_error_message();
    if (!strstr(m, a) || (b && !strstr(m, b))) {
        fprintf(stderr, "message \"%s\" lacks \"%s\" / \"%s\"\n", m, a, b ? b : "");
        fail();
    }
}

static void test_good_dataset_opens(void **state) {
    (void)state;
    good_dataset g;
    make_good(&g);
    char prefix[600];
    assert_int_equal(open_variant(&g, sizeof g.idx, sizeof g.bin, "good", prefix, sizeof prefix), LJ_OK);
}

static void test_bad_magic(void **state) {
    (void)state;
    good_dataset g;
    make_good(&g);
    g.idx[3] = 'X';
    char prefix[600], want[1200];
    assert_int_equal(open_variant(&g, sizeof g.idx, sizeof g.bin, "magic", prefix, sizeof prefix), LJ_ERR_FORMAT);
    snprintf(want, sizeof want, "%s.idx", prefix);
    expect_message(want, "bad magic (expected MMIDIDX");
}

static void test_bad_version(void **state) {
    (void)state;
    good_dataset g;
    make_good(&g);
    g.idx[9] = 2;
    char prefix[600], want[1200];
    assert_int_equal(open_variant(&g, sizeof g.idx, sizeof g.bin, "version", prefix, sizeof prefix), LJ_ERR_FORMAT);
    snprintf(want, sizeof want, "%s.idx", prefix);
    expect_message(want, "bad version 2 (expected 1)");
}

static void test_bad_dtype(void **state) {
    (void)state;
    good_dataset g;
    make_good(&g);
    char prefix[600];
    g.idx[17] = LJ_MMIDX_I64; /* valid Megatron, not a supported token width */
    assert_int_equal(open_variant(&g, sizeof g.idx, sizeof g.bin, "dtype64", prefix, sizeof prefix), LJ_ERR_UNSUPPORTED);
    expect_message("dtype code 5 (int64) is not supported", NULL);
    g.idx[17] = LJ_MMIDX_F32;
    assert_int_equal(open_variant(&g, sizeof g.idx, sizeof g.bin, "dtypef", prefix, sizeof prefix), LJ_ERR_FORMAT);
    expect_message("bad dtype code 7 (float32", NULL);
    g.idx[17] = 99;
    assert_int_equal(open_variant(&g, sizeof g.idx, sizeof g.bin, "dtype99", prefix, sizeof prefix), LJ_ERR_FORMAT);
    expect_message(".idx: bad dtype code 99", NULL);
}

static void test_truncated_idx(void **state) {
    (void)state;
    good_dataset g;
    make_good(&g);
    char prefix[600], want[1200];
    /* Inside the header, and inside the arrays. */
    assert_int_equal(open_variant(&g, 20, sizeof g.bin, "trunc_hdr", prefix, sizeof prefix), LJ_ERR_FORMAT);
    snprintf(want, sizeof want, "%s.idx", prefix);
    expect_message(want, "truncated: 20 bytes, shorter than the 34-byte header");
    assert_int_equal(open_variant(&g, sizeof g.idx - 5, sizeof g.bin, "trunc_arr", prefix, sizeof prefix),
                     LJ_ERR_FORMAT);
    snprintf(want, sizeof want, "%s.idx", prefix);
    expect_message(want, "truncated: 97 bytes but the header (sequence count 3, document count 4) needs 102");
    /* An empty file fails on the magic, a zero-length .idx is no crash. */
    assert_int_equal(open_variant(&g, 0, sizeof g.bin, "empty", prefix, sizeof prefix), LJ_ERR_FORMAT);
    expect_message("bad magic", NULL);
}

static void test_bad_document_indices(void **state) {
    (void)state;
    good_dataset g;
    make_good(&g);
    char prefix[600];
    int64_t bad = 7; /* document_indices[2] beyond the 3 sequences */
    memcpy(g.idx + 34 + 36 + 16, &bad, 8);
    assert_int_equal(open_variant(&g, sizeof g.idx, sizeof g.bin, "docs", prefix, sizeof prefix), LJ_ERR_FORMAT);
    expect_message(".idx: document_indices[2] = 7", NULL);
    make_good(&g);
    int32_t neg = -4;
    memcpy(g.idx + 34 + 4, &neg, 4);
    assert_int_equal(open_variant(&g, sizeof g.idx, sizeof g.bin, "neglen", prefix, sizeof prefix), LJ_ERR_FORMAT);
    expect_message(".idx: sequence_lengths[1] = -4 is negative", NULL);
    make_good(&g);
    int64_t odd = 17;
    memcpy(g.idx + 34 + 12 + 8, &odd, 8);
    assert_int_equal(open_variant(&g, sizeof g.idx, sizeof g.bin, "oddoff", prefix, sizeof prefix), LJ_ERR_FORMAT);
    expect_message(".idx: sequence_pointers[1] = 17", NULL);
}

static void test_short_bin(void **state) {
    (void)state;
    good_dataset g;
    make_good(&g);
    char prefix[600], want[1500];
    assert_int_equal(open_variant(&g, sizeof g.idx, 40, "shortbin", prefix, sizeof prefix), LJ_ERR_FORMAT);
    snprintf(want, sizeof want, "%s.bin: 40 bytes but %s.idx says 48", prefix, prefix);
    expect_message(want, NULL);
}

static void test_vocab(void **state) {
    (void)state;
    good_dataset g;
    make_good(&g);
    g.bin[9] = 1000; /* reaches vocab_size 1000 */
    char prefix[600], want[1200];
    assert_int_equal(open_variant(&g, sizeof g.idx, sizeof g.bin, "vocab", prefix, sizeof prefix), LJ_OK);
    lj_token_dataset ds;
    assert_int_equal(lj_token_dataset_open(&ds, prefix), LJ_OK);
    assert_int_equal(lj_token_dataset_check_vocab(&ds, 1001), LJ_OK);
    assert_int_equal(lj_token_dataset_check_vocab(&ds, 1000), LJ_ERR_FORMAT);
    snprintf(want, sizeof want, "%s.bin: token 1000 at position 9 is >= vocab_size 1000", prefix);
    expect_message(want, NULL);
    lj_token_dataset_close(&ds);
    /* Through the loader, and a negative int32 id. */
    g.bin[9] = 9;
    g.bin[4] = -3;
    assert_int_equal(open_variant(&g, sizeof g.idx, sizeof g.bin, "vocabneg", prefix, sizeof prefix), LJ_OK);
    lj_loader_config c;
    memset(&c, 0, sizeof c);
    c.num_datasets = 1;
    snprintf(c.paths[0], sizeof c.paths[0], "%s", prefix);
    snprintf(c.split, sizeof c.split, "1");
    c.seq_length = 4;
    c.micro_batch_size = 1;
    lj_loader ld;
    assert_int_equal(lj_loader_init(&ld, &c), LJ_OK);
    assert_int_equal(lj_loader_check_vocab(&ld, 128256), LJ_ERR_FORMAT);
    snprintf(want, sizeof want, "%s.bin: token -3 at position 4 is negative", prefix);
    expect_message(want, NULL);
    lj_loader_free(&ld);
}

static void test_llmc_bad(void **state) {
    (void)state;
    char path[600];
    int32_t buf[256 + 8] = {20240520, 1, 16}; /* 16 uint16 tokens = 32 bytes = 8 int32 */
    tmp_path(path, sizeof path, "shard.bin");
    write_file(path, buf, sizeof buf);
    lj_token_dataset ds;
    assert_int_equal(lj_token_dataset_open(&ds, path), LJ_OK);
    lj_token_dataset_close(&ds);
    buf[1] = 3;
    write_file(path, buf, sizeof buf);
    assert_int_equal(lj_token_dataset_open(&ds, path), LJ_ERR_FORMAT);
    expect_message(path, "bad version 3 in the llm.c header (expected 1");
    buf[1] = 1;
    buf[2] = 17;
    write_file(path, buf, sizeof buf);
    assert_int_equal(lj_token_dataset_open(&ds, path), LJ_ERR_FORMAT);
    expect_message(path, "1056 bytes but its llm.c header says 1024 + 17 tokens x 2 bytes = 1058");
    buf[0] = 20240801; /* uint32 shard: version must be 7 */
    write_file(path, buf, sizeof buf);
    assert_int_equal(lj_token_dataset_open(&ds, path), LJ_ERR_FORMAT);
    expect_message("expected 7", NULL);
    write_file(path, buf, 100);
    assert_int_equal(lj_token_dataset_open(&ds, path), LJ_ERR_FORMAT);
    expect_message(path, "shorter than the 1024-byte llm.c header");
    buf[0] = 12345; /* neither llm.c nor beside an .idx */
    write_file(path, buf, sizeof buf);
    assert_int_equal(lj_token_dataset_open(&ds, path), LJ_ERR_FORMAT);
    expect_message(path, "not an llm.c shard (magic 12345");
}

static void test_missing_files(void **state) {
    (void)state;
    char prefix[600], want[LJ_LOADER_PATH_MAX + 8];
    tmp_path(prefix, sizeof prefix, "nothing_here");
    lj_token_dataset ds;
    assert_int_equal(lj_token_dataset_open(&ds, prefix), LJ_ERR_IO);
    snprintf(want, sizeof want, "%s.idx: cannot open", prefix);
    expect_message(want, NULL);
    /* .idx present, .bin missing */
    good_dataset g;
    make_good(&g);
    assert_int_equal(open_variant(&g, sizeof g.idx, sizeof g.bin, "nobin", prefix, sizeof prefix), LJ_OK);
    char bin[700];
    snprintf(bin, sizeof bin, "%s.bin", prefix);
    assert_int_equal(unlink(bin), 0);
    assert_int_equal(lj_token_dataset_open(&ds, prefix), LJ_ERR_IO);
    expect_message(bin, "cannot open");
    /* The loader passes the reader's message on. */
    lj_loader_config c;
    memset(&c, 0, sizeof c);
    c.num_datasets = 2;
    tmp_path(c.paths[0], sizeof c.paths[0], "good2");
    write_file(bin, g.bin, sizeof g.bin);
    snprintf(want, sizeof want, "%s.idx", c.paths[0]);
    write_file(want, g.idx, sizeof g.idx);
    snprintf(want, sizeof want, "%s.bin", c.paths[0]);
    write_file(want, g.bin, sizeof g.bin);
    g.idx[0] = 'Q';
    snprintf(c.paths[1], sizeof c.paths[1], "%s", prefix);
    snprintf(want, sizeof want, "%s.idx", prefix);
    write_file(want, g.idx, sizeof g.idx);
    c.seq_length = 4;
    c.micro_batch_size = 1;
    snprintf(c.split, sizeof c.split, "1");
    lj_loader ld;
    assert_int_equal(lj_loader_init(&ld, &c), LJ_ERR_FORMAT);
    expect_message(want, "bad magic");
}

int main(void) {
    const char *t = getenv("LJ_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s", t && t[0] ? t : "/tmp");
    if (lj_mkdir_p(g_dir) != LJ_OK) {
        fprintf(stderr, "%s\n", lj_error_message());
        return 1;
    }
    lj_log_set_quiet(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_dataset_opens),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_bad_version),
        cmocka_unit_test(test_bad_dtype),
        cmocka_unit_test(test_truncated_idx),
        cmocka_unit_test(test_bad_document_indices),
        cmocka_unit_test(test_short_bin),
        cmocka_unit_test(test_vocab),
        cmocka_unit_test(test_llmc_bad),
        cmocka_unit_test(test_missing_files),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -f %s/loader_bad_%d_*", g_dir, (int)getpid());
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s/loader_bad_%d_*\n", g_dir, (int)getpid());
    return rc;
}
