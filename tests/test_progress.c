/* test_progress.c: progress of long work (base/progress.h) as a log file sees it (CI=true:
 * plain lines): nothing within the first second, then a line with the percentage, bytes, MB/s
 * and time left, at most one per 5 s, and a closing line with the time and rate; nothing at all
 * when logging is quiet; LJPERF_PROGRESS=always shows short work too, =never nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "base/progress.h"
#include "test_util.h"

/* Runs fn with stderr sent to a file; returns what it printed (free() it). */
static char *capture(void (*fn)(void)) {
    char dir[512], path[600];
    assert_int_equal(lj_test_make_dir(dir, sizeof dir, "progress"), 0);
    snprintf(path, sizeof path, "%s/stderr.txt", dir);
    fflush(stderr);
    const int saved = dup(2);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    dup2(fileno(f), 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(f);
    char *text = NULL;
    size_t n = 0;
    assert_int_equal(lj_file_read_all(path, &text, &n), LJ_OK);
    remove(path);
    rmdir(dir);
    return text;
}

static void short_work(void) {
    lj_progress p;
    lj_progress_begin(&p, "writing quick.safetensors", 1000);
    lj_progress_update(&p, 500);
    lj_progress_update(&p, 1000);
    lj_progress_end(&p);
}

static void long_work(void) {
    lj_progress p;
    lj_progress_begin(&p, "writing big.safetensors", 400u << 20);
    lj_progress_update(&p, 10u << 20); /* within the first second: nothing */
    /* 100 s later, without waiting for them: the start moved back (no verdict on a sleep's length) */
    p.t0 -= 100.0;
    p.last = p.t0;
    lj_progress_update(&p, 200u << 20); /* a line */
    lj_progress_update(&p, 300u << 20); /* within 5 s of it: nothing */
    lj_progress_update(&p, 400u << 20);
    lj_progress_end(&p);
}

static void test_plain_lines(void **state) {
    (void)state;
    setenv("CI", "true", 1);
    char *out = capture(short_work);
    assert_string_equal(out, ""); /* done within a second: silent */
    free(out);
    out = capture(long_work);
    printf("%s", out);
    /* "writing big.safetensors: 50% (200.00 MiB of 400.00 MiB, 190 MB/s, 1 s left)" */
    assert_non_null(strstr(out, "writing big.safetensors: 50% (200.00 MiB of 400.00 MiB, "));
    assert_non_null(strstr(out, " MB/s, "));
    assert_non_null(strstr(out, " s left)\n"));
    assert_null(strstr(out, "75%"));
    const char *done = strstr(out, "writing big.safetensors: 400.00 MiB in ");
    assert_non_null(done);
    const double secs = strtod(done + strlen("writing big.safetensors: 400.00 MiB in "), NULL);
    assert_true(secs >= 100.0 && secs < 160.0); /* the 100 s, and less than a minute of this test */
    assert_null(strchr(out, '\r')); /* no bar in a file */
    int lines = 0;
    for (const char *c = out; *c; c++) lines += *c == '\n';
    assert_int_equal(lines, 2);
    free(out);
}

static void test_quiet(void **state) {
    (void)state;
    setenv("CI", "true", 1);
    lj_log_set_quiet(1);
    char *out = capture(long_work);
    lj_log_set_quiet(0);
    assert_string_equal(out, "");
    free(out);
}

/* LJPERF_PROGRESS=always: the short work too, a line at once and the closing line; =never: none. */
static void test_forced(void **state) {
    (void)state;
    setenv("CI", "true", 1);
    setenv("LJPERF_PROGRESS", "always", 1);
    char *out = capture(short_work);
    assert_non_null(strstr(out, "writing quick.safetensors: 50% (500 B of 1000 B, "));
    assert_non_null(strstr(out, "writing quick.safetensors: 1000 B in "));
    free(out);
    setenv("LJPERF_PROGRESS", "never", 1);
    out = capture(long_work);
    assert_string_equal(out, "");
    free(out);
    unsetenv("LJPERF_PROGRESS");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_lines),
        cmocka_unit_test(test_quiet),
        cmocka_unit_test(test_forced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
