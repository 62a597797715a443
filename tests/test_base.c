/* test_base.c: base/ helpers: bf16 rounding, RNG determinism, byte-count parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/worker.h"
#include "config/config.h"

static void test_bf16_round_trip(void **state) {
    (void)state;
    assert_int_equal(lj_f32_to_bf16(1.0f), 0x3f80);
    assert_true(lj_bf16_to_f32(lj_f32_to_bf16(3.140625f)) == 3.140625f);
    /* 1 + 2^-8 is a tie between 1 and 1 + 2^-7: round to even (1). */
    assert_int_equal(lj_f32_to_bf16(1.00390625f), 0x3f80);
    assert_int_equal(lj_f32_to_bf16(1.01171875f), 0x3f82); /* tie, rounds up to even */
}

static void test_rng_deterministic(void **state) {
    (void)state;
    lj_rng a, b;
    lj_rng_seed(&a, 1234);
    lj_rng_seed(&b, 1234);
    for (int i = 0; i < 100; i++) assert_true(lj_rng_u64(&a) == lj_rng_u64(&b));
    lj_rng_seed(&b, 1235);
    assert_true(lj_rng_u64(&a) != lj_rng_u64(&b));
}

static void test_parse_bytes(void **state) {
    (void)state;
    uint64_t v;
    assert_int_equal(lj_parse_bytes("80GiB", &v), LJ_OK);
    assert_true(v == 80ull << 30);
    assert_int_equal(lj_parse_bytes("1.5MB", &v), LJ_OK);
    assert_true(v == 1500000ull);
    assert_int_equal(lj_parse_bytes("12 parsecs", &v), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "parsecs"));
    /* not finite, negative, or beyond what a uint64_t holds: refused, not 8 EiB or 0 */
    const char *bad[] = {"nanGiB", "nan", "infGiB", "-1GiB", "1e30GiB", "16EiB", "18446744073709551616"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) assert_int_equal(lj_parse_bytes(bad[i], &v), LJ_ERR_ARG);
    assert_int_equal(lj_parse_bytes("1048576TiB", &v), LJ_OK); /* 1 EiB */
    assert_true(v == 1ull << 60);
}

static void test_presets_param_counts(void **state) {
    (void)state;
    /* docs/reference.md */
    const struct { const char *name; int64_t params; } want[] = {
        {"llama3.2-1b", 1235814400}, {"llama3.2-3b", 3212749824}, {"llama3-8b", 8030261248}};
    for (int i = 0; i < 3; i++) {
        lj_model_config c;
        assert_int_equal(lj_config_preset(want[i].name, &c), LJ_OK);
        assert_true(lj_config_num_params(&c) == want[i].params);
    }
    lj_model_config c;
    assert_int_equal(lj_config_preset("llama4-giant", &c), LJ_ERR_ARG);
}

/* The job thread of base/worker.h: jobs run in submission order; the first error code is kept
 * and later jobs are told; a caller's failure counts only when it is the first. */
typedef struct {
    int64_t order[8];
    int failed_seen[8];
    int n;
} worker_log;

static int log_job(void *ctx, int64_t job, int failed) {
    worker_log *l = ctx;
    l->order[l->n] = job;
    l->failed_seen[l->n++] = failed;
    return job == 2 ? 7 : 0; /* job 2 fails with code 7 */
}

/* lj_file_write_atomic on what is not a plain file: a link's target is replaced (the link stays),
 * a FIFO is written through (not replaced by a file), a directory and a dangling link are refused. */
static void test_write_atomic_special(void **state) {
    (void)state;
    char dir[] = "/tmp/ljperf-atomic.XXXXXX", a[96], b[96], c[96], d[96];
    assert_non_null(mkdtemp(dir));
    snprintf(a, sizeof a, "%s/target.json", dir);
    snprintf(b, sizeof b, "%s/link.json", dir);
    snprintf(c, sizeof c, "%s/fifo", dir);
    snprintf(d, sizeof d, "%s/dangling.json", dir);
    assert_int_equal(lj_file_write_atomic(a, "old", 3), LJ_OK);
    assert_int_equal(symlink("target.json", b), 0);
    assert_int_equal(lj_file_write_atomic(b, "new!", 4), LJ_OK);
    struct stat st;
    assert_int_equal(lstat(b, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    char *text = NULL;
    size_t n = 0;
    assert_int_equal(lj_file_read_all(a, &text, &n), LJ_OK);
    assert_int_equal(n, 4);
    assert_memory_equal(text, "new!", 4);
    free(text);
    /* a FIFO with a reader that does not block */
    assert_int_equal(mkfifo(c, 0600), 0);
    const int rd = open(c, O_RDONLY | O_NONBLOCK);
    assert_true(rd >= 0);
    assert_int_equal(lj_file_write_atomic(c, "through", 7), LJ_OK);
    char buf[16] = {0};
    assert_int_equal(read(rd, buf, sizeof buf), 7);
    assert_memory_equal(buf, "through", 7);
    close(rd);
    assert_int_equal(lstat(c, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    lj_log_set_quiet(1);
    assert_int_equal(lj_file_write_atomic(dir, "x", 1), LJ_ERR_IO);
    assert_int_equal(symlink("nowhere.json", d), 0);
    assert_int_equal(lj_file_write_atomic(d, "x", 1), LJ_ERR_IO);
    lj_log_set_quiet(0);
    unlink(a), unlink(b), unlink(c), unlink(d);
    assert_int_equal(rmdir(dir), 0);
}

static void test_worker(void **state) {
    (void)state;
    worker_log l = {{0}, {0}, 0};
    lj_worker w;
    lj_worker_start(&w, log_job, &l);
    for (int j = 0; j < 5; j++) {
        lj_worker_wait(&w, 1, NULL);
        lj_worker_submit(&w);
    }
    int64_t done = -1;
    assert_int_equal(lj_worker_wait(&w, 0, &done), 7);
    assert_int_equal(done, 5);
    assert_int_equal(lj_worker_fail(&w, 9), 0); /* not the first: the code stays 7 */
    assert_int_equal(lj_worker_wait(&w, 0, NULL), 7);
    lj_worker_stop(&w);
    lj_worker_stop(&w); /* idempotent */
    assert_int_equal(l.n, 5);
    for (int j = 0; j < 5; j++) {
        assert_int_equal(l.order[j], j);
        assert_int_equal(l.failed_seen[j], j > 2);
    }
    lj_worker_start(&w, log_job, &l);
    assert_int_equal(lj_worker_fail(&w, 9), 1); /* the caller first */
    assert_int_equal(lj_worker_wait(&w, 0, NULL), 9);
    lj_worker_stop(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_round_trip),
        cmocka_unit_test(test_rng_deterministic),
        cmocka_unit_test(test_parse_bytes),
        cmocka_unit_test(test_presets_param_counts),
        cmocka_unit_test(test_worker),
        cmocka_unit_test(test_write_atomic_special),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
