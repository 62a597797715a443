/* test_checkpoint.c: checkpoint/checkpoint.c: training-state save/load round trip, the latest pointer,
 * keep-last pruning, crash leftovers, re-saving an iteration, the root's lock, the checksums, the
 * sharded format's writer, metadata and range reads (checkpoint/sharded.c), and
 * rejection of checkpoints that do not fit the run or were corrupted (tests named test_bad_* also
 * run under valgrind from test_io_bad.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <string.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fs.h"
#include "tests/test_util.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/sharded.h"
#include "io/safetensors.h"
#include <fcntl.h>
#include <xxhash.h>

static char g_dir[512];
static int g_case;

static int setup_dir(void **state) {
    (void)state;
    return lj_test_make_dir(g_dir, sizeof g_dir, "ckpt");
}

static int teardown_dir(void **state) {
    (void)state;
    return lj_dir_remove(g_dir) == LJ_OK ? 0 : -1;
}

/* A fresh checkpoint root for each test. */
static char *new_root(void) {
    char *p = lj_malloc(strlen(g_dir) + 32);
    sprintf(p, "%s/run%d", g_dir, g_case++);
    return p;
}

static char *join(const char *a, const char *b) {
    char *p = lj_malloc(strlen(a) + strlen(b) + 2);
    sprintf(p, "%s/%s", a, b);
    return p;
}

static int exists(const char *root, const char *name) {
    char *p = join(root, name);
    int ok = access(p, F_OK) == 0;
    free(p);
    return ok;
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

typedef struct {
    float *master, *m, *v;
    int64_t n;
    lj_ckpt_tensor t[3];
} state3;

static void state_init(state3 *s, int64_t n, uint64_t seed) {
    s->n = n;
    s->master = lj_malloc((size_t)n * sizeof(float));
    s->m = lj_malloc((size_t)n * sizeof(float));
    s->v = lj_malloc((size_t)n * sizeof(float));
    lj_rng rng;
    lj_rng_seed(&rng, seed);
    for (int64_t i = 0; i < n; i++) {
        s->master[i] = (float)lj_rng_normal(&rng);
        s->m[i] = (float)lj_rng_normal(&rng) * 1e-3f;
        s->v[i] = lj_rng_uniform(&rng) * 1e-6f;
    }
    s->t[0] = (lj_ckpt_tensor){"master", s->master, n};
    s->t[1] = (lj_ckpt_tensor){"adam.m", s->m, n};
    s->t[2] = (lj_ckpt_tensor){"adam.v", s->v, n};
}

static void state_free(state3 *s) {
    free(s->master);
    free(s->m);
    free(s->v);
}

static void assert_states_equal(const state3 *a, const state3 *b) {
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->master, b->master, (size_t)a->n * sizeof(float));
    assert_memory_equal(a->m, b->m, (size_t)a->n * sizeof(float));
    assert_memory_equal(a->v, b->v, (size_t)a->n * sizeof(float));
}

static void expect_error(lj_status got, lj_status want, const char *a, const char *b, const char *c) {
    const char *msg = lj_error_message();
    if (got != want) fail_msg("expected status %d, got %d (%s)", (int)want, (int)got, msg);
    if (a && !strstr(msg, a)) fail_msg("message lacks '%s': %s", a, msg);
    if (b && !strstr(msg, b)) fail_msg("message lacks '%s': %s", b, msg);
    if (c && !strstr(msg, c)) fail_msg("message lacks '%s': %s", c, msg);
}

static void test_round_trip(void **state) {
    (void)state;
    char *root = new_root();
    state3 a, b;
    state_init(&a, 1000, 1);
    state_init(&b, 1000, 2);
    const char *json = "{\"iteration\": 100, \"rng\": [\"1\", \"2\", \"3\", \"4\"], \"consumed_samples\": 3200}";
    assert_int_equal(lj_ckpt_save(root, 100, a.t, 3, json, 0), LJ_OK);
    assert_true(exists(root, "iter_0000100/state.safetensors"));
    assert_true(exists(root, "iter_0000100/state.json"));
    char *latest_path = join(root, LJ_CKPT_LATEST_FILE), *text;
    assert_int_equal(lj_file_read_all(latest_path, &text, NULL), LJ_OK);
    assert_string_equal(text, "100"); /* Megatron's format: the number, no newline */
    free(text);
    int it = -1;
    assert_int_equal(lj_ckpt_latest(root, &it), LJ_OK);
    assert_int_equal(it, 100);
    char *got = NULL;
    assert_int_equal(lj_ckpt_load(root, it, b.t, 3, &got), LJ_OK);
    assert_states_equal(&a, &b);
    assert_string_equal(got, json);
    free(got);
    /* Tensors are 1-D F32 with the checkpoint's metadata. */
    char *file = join(root, "iter_0000100/state.safetensors");
    lj_safetensors st;
    assert_int_equal(lj_safetensors_open(&st, file), LJ_OK);
    assert_string_equal(lj_safetensors_metadata(&st, "iteration"), "100");
    const lj_st_entry *e = lj_safetensors_find(&st, "adam.v");
    assert_non_null(e);
    assert_int_equal(e->dtype, LJ_ST_F32);
    assert_int_equal(e->ndim, 1);
    assert_int_equal(e->shape[0], 1000);
    lj_safetensors_close(&st);
    free(file);
    free(latest_path);
    state_free(&a);
    state_free(&b);
    free(root);
}

static void test_keep_last(void **state) {
    (void)state;
    char *root = new_root();
    state3 a;
    state_init(&a, 10, 3);
    for (int i = 1; i <= 5; i++) assert_int_equal(lj_ckpt_save(root, i * 10, a.t, 3, NULL, 2), LJ_OK);
    assert_false(exists(root, "iter_0000010"));
    assert_false(exists(root, "iter_0000030"));
    assert_true(exists(root, "iter_0000040"));
    assert_true(exists(root, "iter_0000050"));
    assert_int_equal(count_entries(root), 3); /* two iterations + the latest file */
    /* keep_last 0 keeps everything; keep_last 1 then leaves only the newest. */
    assert_int_equal(lj_ckpt_save(root, 60, a.t, 3, NULL, 0), LJ_OK);
    assert_int_equal(count_entries(root), 4);
    assert_int_equal(lj_ckpt_save(root, 70, a.t, 3, NULL, 1), LJ_OK);
    assert_int_equal(count_entries(root), 2);
    assert_true(exists(root, "iter_0000070"));
    /* Iterations newer than the one saved (a run resumed from an older checkpoint) stay. */
    assert_int_equal(lj_ckpt_save(root, 65, a.t, 3, NULL, 1), LJ_OK);
    assert_true(exists(root, "iter_0000070"));
    int it;
    assert_int_equal(lj_ckpt_latest(root, &it), LJ_OK);
    assert_int_equal(it, 65);
    state_free(&a);
    free(root);
}

/* A crash in the middle of a save leaves iter_N.tmp.PID behind: the previous checkpoint still
 * loads, and the next save removes the leftover. */
static void test_crash_leftover(void **state) {
    (void)state;
    char *root = new_root();
    state3 a, b;
    state_init(&a, 100, 4);
    state_init(&b, 100, 5);
    assert_int_equal(lj_ckpt_save(root, 10, a.t, 3, "{\"step\": 10}", 3), LJ_OK);
    /* pid_max is at most 2^22 on Linux, so this process cannot exist. */
    char *tmp = join(root, "iter_0000020.tmp.2147483646");
    assert_int_equal(lj_mkdir_p(tmp), LJ_OK);
    char *half = join(tmp, "state.safetensors.tmp.2147483646");
    assert_int_equal(lj_file_write_atomic(half, "\x40\0\0\0\0\0\0\0{\"master\":", 18), LJ_OK);
    int it;
    assert_int_equal(lj_ckpt_latest(root, &it), LJ_OK);
    assert_int_equal(it, 10);
    assert_int_equal(lj_ckpt_load(root, it, b.t, 3, NULL), LJ_OK);
    assert_states_equal(&a, &b);
    /* A crash after the rename but before the latest file moved: latest still wins. */
    assert_int_equal(lj_ckpt_save(root, 30, b.t, 3, "{}", 0), LJ_OK);
    assert_false(exists(root, "iter_0000020.tmp.2147483646"));
    char *latest = join(root, LJ_CKPT_LATEST_FILE);
    assert_int_equal(lj_file_write_atomic(latest, "10", 2), LJ_OK);
    assert_int_equal(lj_ckpt_latest(root, &it), LJ_OK);
    assert_int_equal(it, 10);
    /* Without a latest file, the newest complete iteration is used. */
    assert_int_equal(unlink(latest), 0);
    lj_log_set_quiet(1);
    assert_int_equal(lj_ckpt_latest(root, &it), LJ_OK);
    assert_int_equal(it, 30);
    free(latest);
    free(half);
    free(tmp);
    state_free(&a);
    state_free(&b);
    free(root);
}

/* Saving an iteration that exists replaces it whole. */
static void test_resave_same_iteration(void **state) {
    (void)state;
    char *root = new_root();
    state3 a, b, c;
    state_init(&a, 50, 6);
    state_init(&b, 50, 7);
    state_init(&c, 50, 8);
    assert_int_equal(lj_ckpt_save(root, 7, a.t, 3, "{\"v\": 1}", 2), LJ_OK);
    assert_int_equal(lj_ckpt_save(root, 7, b.t, 3, "{\"v\": 2}", 2), LJ_OK);
    char *json;
    assert_int_equal(lj_ckpt_load(root, 7, c.t, 3, &json), LJ_OK);
    assert_states_equal(&b, &c);
    assert_string_equal(json, "{\"v\": 2}");
    free(json);
    assert_int_equal(count_entries(root), 2);
    state_free(&a);
    state_free(&b);
    state_free(&c);
    free(root);
}

static lj_status write_note(const char *dir, void *ctx) {
    char *p = join(dir, "note.txt");
    lj_status s = lj_file_write_atomic(p, ctx, strlen(ctx));
    free(p);
    return s;
}

static lj_status fail_hook(const char *dir, void *ctx) {
    (void)ctx;
    return lj_fail(LJ_ERR_IO, "%s: simulated failure", dir);
}

/* The extra-files hook writes into the iteration; a failing hook leaves nothing behind. */
static void test_save_hook(void **state) {
    (void)state;
    char *root = new_root();
    state3 a;
    state_init(&a, 8, 9);
    assert_int_equal(lj_ckpt_save_ex(root, 1, a.t, 3, NULL, 0, write_note, "hello"), LJ_OK);
    assert_true(exists(root, "iter_0000001/note.txt"));
    expect_error(lj_ckpt_save_ex(root, 2, a.t, 3, NULL, 0, fail_hook, NULL), LJ_ERR_IO, "simulated failure", NULL, NULL);
    assert_int_equal(count_entries(root), 2); /* iter_0000001 and the latest file only */
    int it;
    assert_int_equal(lj_ckpt_latest(root, &it), LJ_OK);
    assert_int_equal(it, 1);
    state_free(&a);
    free(root);
}

/* ---- bad input ---------------------------------------------------------------------- */

/* A checkpoint from another model shape or optimizer: named file and tensor, nothing copied. */
static void test_bad_other_shape(void **state) {
    (void)state;
    char *root = new_root();
    state3 a, b;
    state_init(&a, 1000, 10);
    state_init(&b, 1200, 11);
    assert_int_equal(lj_ckpt_save(root, 5, a.t, 3, "{}", 0), LJ_OK);
    float first = b.master[0];
    expect_error(lj_ckpt_load(root, 5, b.t, 3, NULL), LJ_ERR_FORMAT, "iter_0000005/state.safetensors",
                 "tensor 'master' has 1000 elements, this run needs 1200", "another model shape");
    assert_true(b.master[0] == first);
    lj_ckpt_tensor more[4] = {a.t[0], a.t[1], a.t[2], {"adam.step", a.v, 1}};
    expect_error(lj_ckpt_load(root, 5, more, 4, NULL), LJ_ERR_FORMAT, "iter_0000005/state.safetensors",
                 "tensor 'adam.step' is missing", NULL);
    /* A state tensor stored in another dtype. */
    char *dir = join(root, "iter_0000006");
    assert_int_equal(lj_mkdir_p(dir), LJ_OK);
    char *file = join(dir, "state.safetensors");
    lj_st_tensor t = {.name = "master", .dtype = LJ_ST_BF16, .ndim = 1, .shape = {1000}, .from_f32 = a.master};
    assert_int_equal(lj_safetensors_write(file, &t, 1, NULL, NULL, 0), LJ_OK);
    expect_error(lj_ckpt_load(root, 6, a.t, 1, NULL), LJ_ERR_FORMAT, file, "tensor 'master' has dtype BF16, expected F32", NULL);
    /* Truncated tensors file. */
    struct stat sb;
    assert_int_equal(stat(file, &sb), 0);
    assert_int_equal(truncate(file, sb.st_size / 2), 0);
    expect_error(lj_ckpt_load(root, 6, a.t, 1, NULL), LJ_ERR_FORMAT, file, "'master'", "exceed the buffer");
    /* A state.json that is not JSON. */
    char *json_path = join(root, "iter_0000005/state.json");
    assert_int_equal(lj_file_write_atomic(json_path, "{\"step\": ", 9), LJ_OK);
    char *json = NULL;
    expect_error(lj_ckpt_load(root, 5, a.t, 3, &json), LJ_ERR_FORMAT, json_path, "fails its checksum", NULL);
    assert_null(json);
    free(json_path);
    free(file);
    free(dir);
    state_free(&a);
    state_free(&b);
    free(root);
}

static void test_bad_latest(void **state) {
    (void)state;
    char *root = new_root();
    int it = -1;
    assert_int_equal(lj_mkdir_p(root), LJ_OK);
    expect_error(lj_ckpt_latest(root, &it), LJ_ERR_IO, root, "no checkpoint found", NULL);
    char *missing = join(root, "nope");
    expect_error(lj_ckpt_latest(missing, &it), LJ_ERR_IO, missing, "no checkpoint found", NULL);
    char *latest = join(root, LJ_CKPT_LATEST_FILE);
    assert_int_equal(lj_file_write_atomic(latest, "release", 7), LJ_OK);
    expect_error(lj_ckpt_latest(root, &it), LJ_ERR_FORMAT, latest, "\"release\"", NULL);
    assert_int_equal(lj_file_write_atomic(latest, "42\n", 3), LJ_OK);
    expect_error(lj_ckpt_latest(root, &it), LJ_ERR_FORMAT, LJ_CKPT_LATEST_FILE, "iteration 42", "iter_0000042");
    assert_int_equal(it, -1);
    expect_error(lj_ckpt_load(root, 42, NULL, 0, NULL), LJ_ERR_IO, "iter_0000042/state.safetensors", NULL, NULL);
    /* The root is a file: saving fails and names it. */
    state3 a;
    state_init(&a, 4, 12);
    expect_error(lj_ckpt_save(latest, 1, a.t, 3, NULL, 0), LJ_ERR_IO, latest, NULL, NULL);
    state_free(&a);
    free(latest);
    free(missing);
    free(root);
}

/* Flips one bit of byte `at` of `path`. */
static void flip_byte(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, at, SEEK_SET), 0);
    int c = fgetc(f);
    assert_true(c != EOF);
    assert_int_equal(fseek(f, at, SEEK_SET), 0);
    fputc(c ^ 0x10, f);
    fclose(f);
}

/* A flipped byte in a tensor or in state.json is named at load, with the file and the tensor;
 * nothing is copied. */
static void test_bad_checksum(void **state) {
    (void)state;
    char *root = new_root();
    state3 a, b;
    state_init(&a, 1000, 21);
    state_init(&b, 1000, 22);
    assert_int_equal(lj_ckpt_save(root, 7, a.t, 3, "{\"iteration\": 7}", 0), LJ_OK);
    char *file = join(root, "iter_0000007/state.safetensors");
    lj_safetensors st;
    assert_int_equal(lj_safetensors_open(&st, file), LJ_OK);
    assert_non_null(lj_safetensors_metadata(&st, "xxh3_64.master"));
    assert_non_null(lj_safetensors_metadata(&st, "xxh3_64.state.json"));
    const lj_st_entry *e = lj_safetensors_find(&st, "adam.m");
    const long at = (long)(8 + st.header_bytes + e->begin + 123);
    lj_safetensors_close(&st);
    flip_byte(file, at);
    float before = b.m[30];
    expect_error(lj_ckpt_load(root, 7, b.t, 3, NULL), LJ_ERR_FORMAT, file, "tensor 'adam.m' fails its checksum", NULL);
    assert_true(b.m[30] == before); /* nothing copied */
    flip_byte(file, at);
    assert_int_equal(lj_ckpt_load(root, 7, b.t, 3, NULL), LJ_OK);
    /* state.json edited into other valid JSON */
    char *json_path = join(root, "iter_0000007/state.json");
    assert_int_equal(lj_file_write_atomic(json_path, "{\"iteration\": 8}", 16), LJ_OK);
    char *json = NULL;
    expect_error(lj_ckpt_load(root, 7, b.t, 3, &json), LJ_ERR_FORMAT, json_path, "fails its checksum", NULL);
    assert_null(json);
    free(json_path);
    free(file);
    state_free(&a);
    state_free(&b);
    free(root);
}

/* A state.safetensors copied into another iteration's directory is refused by its iteration; a
 * file written without checksums (before they existed) loads. */
static void test_bad_iteration_metadata(void **state) {
    (void)state;
    char *root = new_root();
    state3 a;
    state_init(&a, 100, 23);
    assert_int_equal(lj_ckpt_save(root, 10, a.t, 3, "{}", 0), LJ_OK);
    char *from = join(root, "iter_0000010"), *to = join(root, "iter_0000020");
    assert_int_equal(rename(from, to), 0);
    expect_error(lj_ckpt_load(root, 20, a.t, 3, NULL), LJ_ERR_FORMAT, "iter_0000020/state.safetensors",
                 "metadata 'iteration' is 10", "iteration 20");
    char *file = join(to, "state.safetensors");
    lj_st_tensor t[3];
    for (int i = 0; i < 3; i++)
        t[i] = (lj_st_tensor){.name = a.t[i].name, .dtype = LJ_ST_F32, .ndim = 1, .shape = {100}, .data = a.t[i].data};
    assert_int_equal(lj_safetensors_write(file, t, 3, NULL, NULL, 0), LJ_OK);
    lj_log_set_quiet(1);
    assert_int_equal(lj_ckpt_load(root, 20, a.t, 3, NULL), LJ_OK);
    lj_log_set_quiet(0);
    free(file);
    free(from);
    free(to);
    state_free(&a);
    free(root);
}

/* One run at a time: a second lock on the root is refused and names the holder; a killed
 * holder leaves nothing stuck; taking the lock removes what a killed save left behind. */
static void test_lock(void **state) {
    (void)state;
    char *root = new_root();
    lj_ckpt_lock a, b;
    assert_int_equal(lj_ckpt_lock_acquire(&a, root), LJ_OK);
    char pid[32];
    snprintf(pid, sizeof pid, "process %d", (int)getpid());
    expect_error(lj_ckpt_lock_acquire(&b, root), LJ_ERR_IO, "is in use by another run", pid, LJ_CKPT_LOCK_FILE);
    assert_true(b.fd < 0);
    lj_ckpt_lock_release(&a);
    lj_ckpt_lock_release(&a); /* twice: harmless */
    /* a child takes the lock and is killed while holding it */
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        lj_ckpt_lock c;
        if (lj_ckpt_lock_acquire(&c, root) != LJ_OK) _exit(1);
        (void)!write(ready[1], "x", 1);
        pause();
        _exit(0);
    }
    char x;
    assert_int_equal(read(ready[0], &x, 1), 1);
    assert_int_equal(lj_ckpt_lock_acquire(&b, root), LJ_ERR_IO);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(ready[0]);
    close(ready[1]);
    /* what a killed save leaves: a temporary latest file and a temporary iteration directory */
    char *tmp_latest = join(root, LJ_CKPT_LATEST_FILE ".tmp.12345");
    char *tmp_dir = join(root, "iter_0000003.tmp.12345");
    assert_int_equal(lj_file_write_atomic(tmp_latest, "3", 1), LJ_OK);
    assert_int_equal(lj_mkdir_p(tmp_dir), LJ_OK);
    lj_log_set_quiet(1);
    assert_int_equal(lj_ckpt_lock_acquire(&b, root), LJ_OK);
    lj_log_set_quiet(0);
    assert_false(exists(root, LJ_CKPT_LATEST_FILE ".tmp.12345"));
    assert_false(exists(root, "iter_0000003.tmp.12345"));
    lj_ckpt_lock_release(&b);
    free(tmp_latest);
    free(tmp_dir);
    free(root);
}

/* A save removes the temporary latest file a killed save left (of a process that is gone). */
static void test_latest_tmp_leftover(void **state) {
    (void)state;
    char *root = new_root();
    state3 a;
    state_init(&a, 10, 24);
    assert_int_equal(lj_ckpt_save(root, 1, a.t, 3, NULL, 2), LJ_OK);
    /* pid_max is at most 2^22 on Linux, so this process cannot exist. */
    char *tmp = join(root, LJ_CKPT_LATEST_FILE ".tmp.2147483646");
    assert_int_equal(lj_file_write_atomic(tmp, "1", 1), LJ_OK);
    lj_log_set_quiet(1);
    assert_int_equal(lj_ckpt_save(root, 2, a.t, 3, NULL, 2), LJ_OK);
    lj_log_set_quiet(0);
    assert_false(exists(root, LJ_CKPT_LATEST_FILE ".tmp.2147483646"));
    assert_int_equal(count_entries(root), 3); /* two iterations + the latest file */
    free(tmp);
    state_free(&a);
    free(root);
}

/* ---- the sharded format (checkpoint/sharded.h) ---- */

static lj_status fetch_array(void *ctx, int64_t at, int64_t n, void *dst) {
    memcpy(dst, (const float *)ctx + at, (size_t)n * sizeof(float));
    return LJ_OK;
}

static lj_status fetch_bf16(void *ctx, int64_t at, int64_t n, void *dst) {
    memcpy(dst, (const uint16_t *)ctx + at, (size_t)n * sizeof(uint16_t));
    return LJ_OK;
}

typedef struct {
    float *dst;
} sink_ctx;

static void sink_array(void *ctx, int64_t at, const float *src, int64_t n) {
    memcpy(((sink_ctx *)ctx)->dst + at, src, (size_t)n * sizeof(float));
}

/* Two "ranks" write [0, 300) + [300, 700) and [700, 1000) of a tensor of 1000 through a staging of
 * 16 elements; reads of any range (through a staging of 7) give the values back, checked; a
 * flipped byte names the file, tensor and parameter; a truncated file and a gap are refused. */
static void test_sharded(void **state) {
    (void)state;
    char *dir = new_root();
    assert_int_equal(lj_mkdir_p(dir), LJ_OK);
    float x[1000];
    for (int i = 0; i < 1000; i++) x[i] = (float)i * 0.25f - 7.0f;
    lj_shard_writer w;
    assert_int_equal(lj_shard_writer_open(&w, dir, 0, 2, 16 * sizeof(float), NULL, NULL), LJ_OK);
    assert_int_equal(lj_shard_writer_add(&w, "master", "a.weight", 0, 300, LJ_DTYPE_F32, fetch_array, x, 0), LJ_OK);
    assert_int_equal(lj_shard_writer_add(&w, "master", "b.weight", 300, 400, LJ_DTYPE_F32, fetch_array, x, 300), LJ_OK);
    assert_int_equal(lj_shard_writer_close(&w), LJ_OK);
    lj_shard_writer_free(&w);
    assert_int_equal(lj_shard_writer_open(&w, dir, 1, 2, 16 * sizeof(float), NULL, NULL), LJ_OK);
    assert_int_equal(lj_shard_writer_add(&w, "master", "c.weight", 700, 300, LJ_DTYPE_F32, fetch_array, x, 700), LJ_OK);
    assert_int_equal(lj_shard_writer_close(&w), LJ_OK);
    lj_shard_writer_free(&w);
    assert_int_equal(lj_sharded_write_metadata(dir, 3, 2, 1, "flat", "{}"), LJ_OK);
    lj_sharded c;
    assert_int_equal(lj_sharded_open(&c, dir), LJ_OK);
    assert_int_equal(c.iteration, 3);
    assert_int_equal(c.world_size, 2);
    float got[1000], staging[7];
    const int64_t ranges[][2] = {{0, 1000}, {250, 750}, {299, 301}, {700, 1}, {999, 1}, {0, 0}};
    for (int verify = 0; verify < 2; verify++)
        for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++) {
            memset(got, 0, sizeof got);
            sink_ctx sc = {got};
            assert_int_equal(lj_sharded_read(&c, "master", ranges[k][0], ranges[k][1], verify, staging, 7, sink_array, &sc),
                             LJ_OK);
            assert_memory_equal(got, x + ranges[k][0], (size_t)ranges[k][1] * sizeof(float));
        }
    for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++) { /* straight into the destination */
        memset(got, 0, sizeof got);
        assert_int_equal(lj_sharded_read_into(&c, "master", ranges[k][0], ranges[k][1], got), LJ_OK);
        assert_memory_equal(got, x + ranges[k][0], (size_t)ranges[k][1] * sizeof(float));
    }
    expect_error(lj_sharded_read_into(&c, "master", 900, 200, got), LJ_ERR_FORMAT, "has 1000 elements", NULL, NULL);
    sink_ctx sc = {got};
    expect_error(lj_sharded_read(&c, "adam.m", 0, 1, 1, staging, 7, sink_array, &sc), LJ_ERR_FORMAT, "'adam.m' is missing",
                 NULL, NULL);
    expect_error(lj_sharded_read(&c, "master", 900, 200, 1, staging, 7, sink_array, &sc), LJ_ERR_FORMAT,
                 "has 1000 elements", NULL, NULL);
    lj_sharded_close(&c);
    /* a flipped byte in rank 0's file, in b.weight's slice: a read that touches it fails */
    char file[1024];
    snprintf(file, sizeof file, "%s/" LJ_CKPT_SHARD_DATA_FMT, dir, 0, 2);
    flip_byte(file, 300 * 4 + 123);
    assert_int_equal(lj_sharded_open(&c, dir), LJ_OK);
    assert_int_equal(lj_sharded_read(&c, "master", 0, 300, 1, staging, 7, sink_array, &sc), LJ_OK); /* a.weight only */
    expect_error(lj_sharded_read(&c, "master", 650, 100, 1, staging, 7, sink_array, &sc), LJ_ERR_FORMAT,
                 "shard_00000_of_00002.bin: tensor 'master' slice [300, 700) (parameter b.weight) fails its checksum", NULL,
                 NULL);
    lj_sharded_close(&c);
    /* a truncated file is refused at open */
    snprintf(file, sizeof file, "%s/" LJ_CKPT_SHARD_DATA_FMT, dir, 1, 2);
    assert_int_equal(truncate(file, 100), 0);
    expect_error(lj_sharded_open(&c, dir), LJ_ERR_FORMAT, "shard_00001_of_00002.bin: 100 bytes", "truncated", NULL);
    /* rank 1's index missing its slice: the metadata would leave a gap */
    assert_int_equal(lj_shard_writer_open(&w, dir, 0, 2, 64, NULL, NULL), LJ_OK);
    assert_int_equal(lj_shard_writer_add(&w, "master", NULL, 0, 10, LJ_DTYPE_F32, fetch_array, x, 0), LJ_OK);
    assert_int_equal(lj_shard_writer_close(&w), LJ_OK);
    lj_shard_writer_free(&w);
    assert_int_equal(lj_shard_writer_open(&w, dir, 1, 2, 64, NULL, NULL), LJ_OK);
    assert_int_equal(lj_shard_writer_add(&w, "master", NULL, 20, 10, LJ_DTYPE_F32, fetch_array, x, 20), LJ_OK);
    assert_int_equal(lj_shard_writer_close(&w), LJ_OK);
    lj_shard_writer_free(&w);
    expect_error(lj_sharded_write_metadata(dir, 3, 2, 1, "flat", "{}"), LJ_ERR_FORMAT, "do not cover it once",
                 "element 10 is missing", NULL);
    free(dir);
}

/* A bf16 tensor (AdamW's moments stored as bf16) beside an f32 one: the file holds its 2-byte
 * codes, the metadata says "BF16", every read (staged, checked, or straight into the
 * destination) widens it exactly, a flipped byte fails its checksum, and slices of one tensor
 * in two dtypes are refused. */
static void test_sharded_bf16(void **state) {
    (void)state;
    char *dir = new_root();
    assert_int_equal(lj_mkdir_p(dir), LJ_OK);
    float x[100], want[100];
    uint16_t h[100];
    for (int i = 0; i < 100; i++) {
        x[i] = (float)i * 1.5f;
        h[i] = lj_f32_to_bf16((float)i * 0.013f - 0.4f);
        want[i] = lj_bf16_to_f32(h[i]);
    }
    lj_shard_writer w;
    assert_int_equal(lj_shard_writer_open(&w, dir, 0, 1, 16 * sizeof(float), NULL, NULL), LJ_OK);
    assert_int_equal(lj_shard_writer_add(&w, "master", NULL, 0, 100, LJ_DTYPE_F32, fetch_array, x, 0), LJ_OK);
    assert_int_equal(lj_shard_writer_add(&w, "adam.m", "a.weight", 0, 40, LJ_DTYPE_BF16, fetch_bf16, h, 0), LJ_OK);
    assert_int_equal(lj_shard_writer_add(&w, "adam.m", "b.weight", 40, 60, LJ_DTYPE_BF16, fetch_bf16, h, 40), LJ_OK);
    assert_int_equal(lj_shard_writer_close(&w), LJ_OK);
    assert_int_equal(w.bytes, 100 * 4 + 100 * 2);
    assert_true(w.slices[2].xxh3 == XXH3_64bits(h + 40, 60 * sizeof(uint16_t)));
    lj_shard_writer_free(&w);
    assert_int_equal(lj_sharded_write_metadata(dir, 1, 1, 0, "replicated", "{}"), LJ_OK);
    char path[1024], *text = NULL;
    snprintf(path, sizeof path, "%s/metadata.json", dir);
    assert_int_equal(lj_file_read_all(path, &text, NULL), LJ_OK);
    assert_non_null(strstr(text, "\"BF16\"")); /* adam.m's dtype */
    free(text);
    lj_sharded c;
    assert_int_equal(lj_sharded_open(&c, dir), LJ_OK);
    assert_int_equal(lj_sharded_find(&c, "adam.m")->dtype, LJ_DTYPE_BF16);
    float got[100], staging[9];
    sink_ctx sc = {got};
    const int64_t ranges[][2] = {{0, 100}, {39, 2}, {41, 59}, {0, 1}};
    for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++)
        for (int verify = 0; verify < 3; verify++) {
            memset(got, 0, sizeof got);
            if (verify < 2)
                assert_int_equal(lj_sharded_read(&c, "adam.m", ranges[k][0], ranges[k][1], verify, staging, 9, sink_array,
                                                 &sc), LJ_OK);
            else
                assert_int_equal(lj_sharded_read_into(&c, "adam.m", ranges[k][0], ranges[k][1], got), LJ_OK);
            assert_memory_equal(got, want + ranges[k][0], (size_t)ranges[k][1] * sizeof(float));
        }
    assert_int_equal(lj_sharded_read(&c, "master", 0, 100, 1, staging, 9, sink_array, &sc), LJ_OK);
    assert_memory_equal(got, x, sizeof x);
    lj_sharded_close(&c);
    snprintf(path, sizeof path, "%s/" LJ_CKPT_SHARD_DATA_FMT, dir, 0, 1);
    flip_byte(path, 400 + 2 * 50 + 1); /* in b.weight's slice */
    assert_int_equal(lj_sharded_open(&c, dir), LJ_OK);
    expect_error(lj_sharded_read(&c, "adam.m", 40, 10, 1, staging, 9, sink_array, &sc), LJ_ERR_FORMAT,
                 "tensor 'adam.m' slice [40, 100) (parameter b.weight) fails its checksum", NULL, NULL);
    lj_sharded_close(&c);
    /* metadata whose dtypes do not match the bytes, a slice dtype against its tensor's, a BF16
     * master: each refused by field when opened */
    char *meta = new_root();
    assert_int_equal(lj_mkdir_p(meta), LJ_OK);
    assert_int_equal(lj_shard_writer_open(&w, meta, 0, 1, 64, NULL, NULL), LJ_OK);
    assert_int_equal(lj_shard_writer_add(&w, "adam.m", NULL, 0, 40, LJ_DTYPE_BF16, fetch_bf16, h, 0), LJ_OK);
    assert_int_equal(lj_shard_writer_add(&w, "adam.v", NULL, 0, 40, LJ_DTYPE_BF16, fetch_bf16, h, 0), LJ_OK);
    assert_int_equal(lj_shard_writer_add(&w, "master", NULL, 0, 10, LJ_DTYPE_F32, fetch_array, x, 0), LJ_OK);
    assert_int_equal(lj_shard_writer_close(&w), LJ_OK);
    lj_shard_writer_free(&w);
    assert_int_equal(lj_sharded_write_metadata(meta, 1, 1, 0, "replicated", "{}"), LJ_OK);
    assert_int_equal(lj_sharded_open(&c, meta), LJ_OK);
    lj_sharded_close(&c);
    snprintf(path, sizeof path, "%s/metadata.json", meta);
    assert_int_equal(lj_file_read_all(path, &text, NULL), LJ_OK);
    const struct { const char *from, *to, *want; } edits[] = {
        {"\"BF16\"", "\"F32\"", "do not tile it: byte 80 is in two slices (at tensor 'adam.v'"}, /* adam.m's */
        {"\"F32\"", "\"BF16\"", "tensor 'master': dtype is \"BF16\"; the format keeps it as \"F32\""},
        {"\"byte_offset\":", "\"dtype\": \"F32\", \"byte_offset\":", "tensor 'adam.m': a slice's dtype \"F32\" is not the tensor's \"BF16\""},
    };
    for (size_t k = 0; k < sizeof edits / sizeof edits[0]; k++) {
        const char *at = strstr(text, edits[k].from);
        assert_non_null(at);
        char edited[8192];
        assert_true(strlen(text) + 64 < sizeof edited);
        snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - text), text, edits[k].to, at + strlen(edits[k].from));
        assert_int_equal(lj_file_write_atomic(path, edited, strlen(edited)), LJ_OK);
        expect_error(lj_sharded_open(&c, meta), LJ_ERR_FORMAT, "metadata.json", edits[k].want, NULL);
    }
    free(text);
    free(meta);
    /* one tensor, two dtypes: refused when the ranks' indexes merge */
    assert_int_equal(lj_shard_writer_open(&w, dir, 0, 1, 64, NULL, NULL), LJ_OK);
    assert_int_equal(lj_shard_writer_add(&w, "adam.v", NULL, 0, 10, LJ_DTYPE_F32, fetch_array, x, 0), LJ_OK);
    assert_int_equal(lj_shard_writer_add(&w, "adam.v", NULL, 10, 10, LJ_DTYPE_BF16, fetch_bf16, h, 0), LJ_OK);
    assert_int_equal(lj_shard_writer_close(&w), LJ_OK);
    lj_shard_writer_free(&w);
    expect_error(lj_sharded_write_metadata(dir, 1, 1, 0, "replicated", "{}"), LJ_ERR_FORMAT,
                 "the slices of tensor 'adam.v' are stored as both F32 and BF16", NULL, NULL);
    free(dir);
}

/* Fails at element `fail_at` of its source (a fetch that finds a non-finite value, say). */
typedef struct {
    const float *x;
    int64_t fail_at;
} failing_source;

static lj_status fetch_failing(void *ctx, int64_t at, int64_t n, void *dst) {
    const failing_source *f = ctx;
    if (at + n > f->fail_at) return lj_fail(LJ_ERR_ARG, "simulated fetch failure at %lld", (long long)f->fail_at);
    memcpy(dst, f->x + at, (size_t)n * sizeof(float));
    return LJ_OK;
}

/* The pipelined writer and reader (two halves of the staging, one thread each side): the slice
 * checksums are the XXH3-64 of the slices' bytes whatever the staging (1 value per half up to
 * all in one), an empty slice included, and the file is the values back to back; a write that
 * fails on the writer thread (a shard file on /dev/full), a fetch that fails mid-slice, and a
 * read that fails on the reader thread each name their cause, and nothing waits forever; a
 * batched read delivers the requests before a corrupted one whole. */
static void test_sharded_pipeline(void **state) {
    (void)state;
    char *dir = new_root();
    assert_int_equal(lj_mkdir_p(dir), LJ_OK);
    float x[1000];
    for (int i = 0; i < 1000; i++) x[i] = (float)i * 0.5f + 3.0f;
    const int64_t cuts[][2] = {{0, 333}, {333, 0}, {333, 667}};
    const size_t stagings[] = {2 * sizeof(float), 3 * sizeof(float), 16 * sizeof(float), 4096, sizeof x, 1};
    char file[1024];
    snprintf(file, sizeof file, "%s/" LJ_CKPT_SHARD_DATA_FMT, dir, 0, 1);
    for (size_t k = 0; k < sizeof stagings / sizeof stagings[0]; k++) {
        lj_shard_writer w;
        assert_int_equal(lj_shard_writer_open(&w, dir, 0, 1, stagings[k], NULL, NULL), LJ_OK);
        for (int i = 0; i < 3; i++)
            assert_int_equal(lj_shard_writer_add(&w, "master", NULL, cuts[i][0], cuts[i][1], LJ_DTYPE_F32, fetch_array, x, cuts[i][0]),
                             LJ_OK);
        assert_int_equal(lj_shard_writer_close(&w), LJ_OK);
        assert_int_equal(w.count, 3);
        for (int i = 0; i < 3; i++) {
            assert_int_equal(w.slices[i].byte_offset, (uint64_t)cuts[i][0] * sizeof(float));
            if (w.slices[i].xxh3 != XXH3_64bits(x + cuts[i][0], (size_t)cuts[i][1] * sizeof(float)))
                fail_msg("staging %zu bytes: slice %d has the wrong checksum", stagings[k], i);
        }
        lj_shard_writer_free(&w);
        char *bytes = NULL;
        size_t len = 0;
        assert_int_equal(lj_file_read_all(file, &bytes, &len), LJ_OK);
        assert_int_equal(len, sizeof x);
        assert_memory_equal(bytes, x, sizeof x);
        free(bytes);
    }
    assert_int_equal(lj_sharded_write_metadata(dir, 1, 1, 0, "replicated", "{}"), LJ_OK);
    lj_sharded c;
    assert_int_equal(lj_sharded_open(&c, dir), LJ_OK);
    float got[1000], staging[9];
    sink_ctx sc = {got};
    for (int64_t sn = 1; sn <= 9; sn += 4) {
        memset(got, 0, sizeof got);
        assert_int_equal(lj_sharded_read(&c, "master", 0, 1000, 1, staging, sn, sink_array, &sc), LJ_OK);
        assert_memory_equal(got, x, sizeof x);
    }
    /* a read that fails on the reader thread (the file descriptor is a directory's) */
    const int fd = c.fds[0];
    c.fds[0] = open(dir, O_RDONLY | O_DIRECTORY);
    assert_true(c.fds[0] >= 0);
    expect_error(lj_sharded_read(&c, "master", 0, 1000, 1, staging, 9, sink_array, &sc), LJ_ERR_IO,
                 "shard_00000_of_00001.bin: read at byte 0 failed", NULL, NULL);
    close(c.fds[0]);
    c.fds[0] = fd;
    lj_sharded_close(&c);
    /* a flipped byte in the last slice: a batched read gives the requests before it whole */
    flip_byte(file, 900 * 4 + 1);
    assert_int_equal(lj_sharded_open(&c, dir), LJ_OK);
    float a[333], b[667];
    sink_ctx sa = {a}, sb = {b};
    const lj_shard_request reqs[2] = {{"master", 0, 333, &sa}, {"master", 333, 667, &sb}};
    memset(a, 0, sizeof a);
    expect_error(lj_sharded_read_many(&c, reqs, 2, 1, staging, 9, sink_array), LJ_ERR_FORMAT,
                 "slice [333, 1000) fails its checksum", NULL, NULL);
    assert_memory_equal(a, x, sizeof a);
    assert_int_equal(lj_sharded_read_many(&c, reqs, 2, 0, staging, 9, sink_array), LJ_OK); /* unchecked */
    assert_memory_equal(b, x + 333, 100 * sizeof(float));
    lj_sharded_close(&c);
    /* a write that fails on the writer thread: the shard file is /dev/full (ENOSPC) */
    lj_shard_writer w;
    if (unlink(file) == 0 && symlink("/dev/full", file) == 0) {
        assert_int_equal(lj_shard_writer_open(&w, dir, 0, 1, 16 * sizeof(float), NULL, NULL), LJ_OK);
        lj_status s = LJ_OK;
        for (int i = 0; i < 3 && s == LJ_OK; i++) s = lj_shard_writer_add(&w, "master", NULL, cuts[i][0], cuts[i][1],
                                                                          LJ_DTYPE_F32, fetch_array, x, cuts[i][0]);
        if (s == LJ_OK) s = lj_shard_writer_close(&w);
        expect_error(s, LJ_ERR_IO, "shard_00000_of_00001.bin: write failed", NULL, NULL);
        lj_shard_writer_free(&w);
        unlink(file);
    } else {
        print_message("no symlink to /dev/full: the failing write is not tested\n");
    }
    /* a fetch that fails mid-slice: its error, then the writer refuses more */
    failing_source fs = {x, 500};
    assert_int_equal(lj_shard_writer_open(&w, dir, 0, 1, 16 * sizeof(float), NULL, NULL), LJ_OK);
    expect_error(lj_shard_writer_add(&w, "master", NULL, 0, 1000, LJ_DTYPE_F32, fetch_failing, &fs, 0), LJ_ERR_ARG,
                 "simulated fetch failure at 500", NULL, NULL);
    expect_error(lj_shard_writer_close(&w), LJ_ERR_IO, "the fetch of tensor 'master' failed", NULL, NULL);
    lj_shard_writer_free(&w);
    free(dir);
}

int main(void) {
    const char *filter = getenv("LJ_TEST_FILTER");
    if (filter && filter[0]) cmocka_set_test_filter(filter);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),      cmocka_unit_test(test_keep_last),
        cmocka_unit_test(test_crash_leftover),  cmocka_unit_test(test_resave_same_iteration),
        cmocka_unit_test(test_save_hook),       cmocka_unit_test(test_bad_other_shape),
        cmocka_unit_test(test_bad_latest),      cmocka_unit_test(test_bad_checksum),
        cmocka_unit_test(test_bad_iteration_metadata), cmocka_unit_test(test_lock),
        cmocka_unit_test(test_latest_tmp_leftover), cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_sharded_pipeline), cmocka_unit_test(test_sharded_bf16),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
