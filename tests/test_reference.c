/* test_reference.c: PyTorch's reference rows and the goals table `ljperf benchmark` prints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/reference.h"

static void test_find(void **state) {
    (void)state;
    const lj_reference *r = lj_reference_find("llama3-8b", 4096, 2);
    assert_non_null(r);
    assert_int_equal((int)r->tokens_per_s, 9390);
    assert_int_equal((int)r->goal_tokens_per_s, 11300);
    assert_true(r->memory_goal);
    r = lj_reference_find("llama3.2-1b", 4096, 1);
    assert_non_null(r);
    assert_int_equal((int)r->goal_tokens_per_s, 58600);
    assert_null(lj_reference_find("llama3-8b", 2048, 2));
    assert_null(lj_reference_find("llama3-8b", 4096, 4));
    assert_null(lj_reference_find("llama3-tiny", 4096, 1));
}

/* The table for `tokens` per GPU and `gib` GiB of peak memory. */
static char *table(const lj_reference *r, double tokens, double gib) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    lj_reference_print(r, tokens, gib * 1073741824.0, 2, f);
    fclose(f);
    return buf;
}

static int count(const char *s, const char *word) {
    int n = 0;
    const size_t len = strlen(s), w = strlen(word);
    for (size_t i = 0; i + w <= len; i++) n += strncmp(s + i, word, w) == 0;
    return n;
}

static void test_print_goals(void **state) {
    (void)state;
    const lj_reference *r = lj_reference_find("llama3-8b", 4096, 2);
    char *t = table(r, 11400.0, 101.2);
    assert_int_equal(count(t, "not met"), 0);
    assert_int_equal(count(t, " met\n"), 2);
    assert_non_null(strstr(t, "FSDP2"));
    assert_non_null(strstr(t, "11400 (1.21x)"));
    free(t);
    t = table(r, 10800.0, 101.2); /* too slow */
    assert_int_equal(count(t, "not met"), 1);
    free(t);
    t = table(r, 11400.0, 107.0); /* more memory than PyTorch */
    assert_int_equal(count(t, "not met"), 1);
    assert_non_null(strstr(t, "107.00 GiB"));
    free(t);
    /* no memory goal: the row is printed without a verdict */
    t = table(lj_reference_find("llama3-8b", 4096, 1), 9000.0, 138.7);
    assert_int_equal(count(t, "not met"), 0);
    assert_int_equal(count(t, " met\n"), 1);
    free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_print_goals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
