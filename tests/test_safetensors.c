/* test_safetensors.c: io/safetensors: write/read round trips, the exact bytes of a small file,
 * fp32 -> bf16/f16 conversion, atomic writes, and rejection of malformed files (the tests named
 * test_bad_* also run under valgrind from test_io_bad.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "tests/test_util.h"
#include "checkpoint/checkpoint.h"
#include "io/safetensors.h"

static char g_dir[512];

static int setup_dir(void **state) {
    (void)state;
    return lj_test_make_dir(g_dir, sizeof g_dir, "st");
}

static int teardown_dir(void **state) {
    (void)state;
    return lj_dir_remove(g_dir) == LJ_OK ? 0 : -1;
}

static const char *tmp_path(const char *name) {
    static char buf[600];
    snprintf(buf, sizeof buf, "%s/%s", g_dir, name);
    return buf;
}

/* Writes a file by hand: the 8-byte length, `header` padded with spaces to `header_len`
 * (0: no padding), then `data_bytes` bytes of data. Returns the path. */
static const char *write_raw(const char *name, const char *header, uint64_t header_len, size_t data_bytes) {
    const char *path = tmp_path(name);
    size_t hl = strlen(header);
    if (header_len == 0) header_len = hl;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    unsigned char n8[8];
    for (int i = 0; i < 8; i++) n8[i] = (unsigned char)(header_len >> (8 * i));
    fwrite(n8, 1, 8, f);
    fwrite(header, 1, hl, f);
    for (uint64_t i = hl; i < header_len && i < hl + 64; i++) fputc(' ', f);
    for (size_t i = 0; i < data_bytes; i++) fputc((int)(i * 7 + 1), f);
    fclose(f);
    return path;
}

/* Opens `path`, expects failure `code` and a message containing each of the strings. */
static void expect_open_error(const char *path, lj_status code, const char *a, const char *b) {
    lj_safetensors st;
    lj_status s = lj_safetensors_open(&st, path);
    if (s != code) fail_msg("expected status %d, got %d (%s)", (int)code, (int)s, lj_error_message());
    const char *msg = lj_error_message();
    if (!strstr(msg, path)) fail_msg("message does not name the file: %s", msg);
    if (a && !strstr(msg, a)) fail_msg("message lacks '%s': %s", a, msg);
    if (b && !strstr(msg, b)) fail_msg("message lacks '%s': %s", b, msg);
}

static int count_tmp_files(void) {
    DIR *d = opendir(g_dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) n += strstr(de->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static void test_round_trip_all_dtypes(void **state) {
    (void)state;
    lj_st_tensor ts[LJ_ST_DTYPE_COUNT + 2];
    unsigned char *bufs[LJ_ST_DTYPE_COUNT + 2];
    lj_rng rng;
    lj_rng_seed(&rng, 7);
    int n = 0;
    for (int d = 0; d < LJ_ST_DTYPE_COUNT; d++, n++) {
        char *name = lj_malloc(32);
        snprintf(name, 32, "t.%s", lj_st_dtype_name((lj_st_dtype)d));
        ts[n] = (lj_st_tensor){.name = name, .dtype = (lj_st_dtype)d, .ndim = 2, .shape = {3, 5 + d}};
        size_t bytes = (size_t)lj_st_tensor_numel(&ts[n]) * lj_st_dtype_size((lj_st_dtype)d);
        bufs[n] = lj_malloc(bytes);
        for (size_t i = 0; i < bytes; i++) bufs[n][i] = (unsigned char)lj_rng_u64(&rng);
        ts[n].data = bufs[n];
    }
    /* A scalar and an empty tensor. */
    bufs[n] = lj_malloc(8);
    memset(bufs[n], 0xab, 8);
    ts[n] = (lj_st_tensor){.name = lj_strdup("scalar"), .dtype = LJ_ST_I64, .ndim = 0, .data = bufs[n]};
    n++;
    bufs[n] = NULL;
    ts[n] = (lj_st_tensor){.name = lj_strdup("empty"), .dtype = LJ_ST_F32, .ndim = 2, .shape = {0, 4}};
    n++;
    const char *keys[] = {"format", "note"}, *values[] = {"pt", "a \"quoted\" value"};
    const char *path = tmp_path("all.safetensors");
    assert_int_equal(lj_safetensors_write(path, ts, n, keys, values, 2), LJ_OK);

    lj_safetensors st;
    assert_int_equal(lj_safetensors_open(&st, path), LJ_OK);
    assert_int_equal(st.count, n);
    assert_int_equal((8 + st.header_bytes) % 8, 0);
    assert_string_equal(lj_safetensors_metadata(&st, "format"), "pt");
    assert_string_equal(lj_safetensors_metadata(&st, "note"), "a \"quoted\" value");
    assert_null(lj_safetensors_metadata(&st, "missing"));
    for (int i = 0; i < n; i++) {
        const lj_st_entry *e = lj_safetensors_find(&st, ts[i].name);
        assert_non_null(e);
        assert_string_equal(e->name, ts[i].name);
        assert_ptr_equal(e, &st.entries[i]); /* entries are in data (= write) order */
        assert_int_equal(e->dtype, ts[i].dtype);
        assert_int_equal(e->ndim, ts[i].ndim);
        for (int d = 0; d < e->ndim; d++) assert_int_equal(e->shape[d], ts[i].shape[d]);
        size_t bytes = (size_t)lj_st_tensor_numel(&ts[i]) * lj_st_dtype_size(ts[i].dtype);
        assert_int_equal(e->end - e->begin, bytes);
        if (bytes) assert_memory_equal(e->data, ts[i].data, bytes);
    }
    assert_null(lj_safetensors_find(&st, "t.F31"));
    lj_safetensors_close(&st);
    for (int i = 0; i < n; i++) {
        free((char *)ts[i].name);
        free(bufs[i]);
    }
}

/* The exact bytes: u64 LE header length, JSON padded with spaces to 8, then the data. */
static void test_header_bytes(void **state) {
    (void)state;
    const float data[2] = {1.0f, 2.0f};
    lj_st_tensor t = {.name = "a", .dtype = LJ_ST_F32, .ndim = 1, .shape = {2}, .data = data};
    const char *keys[] = {"format"}, *values[] = {"pt"};
    const char *path = tmp_path("tiny.safetensors");
    assert_int_equal(lj_safetensors_write(path, &t, 1, keys, values, 1), LJ_OK);
    const char json[] = "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t jl = strlen(json), padded = (jl + 7) / 8 * 8;
    assert_int_equal(jl, 85);
    assert_int_equal(padded, 88);
    unsigned char want[8 + 88 + 8] = {88, 0, 0, 0, 0, 0, 0, 0};
    memcpy(want + 8, json, jl);
    memset(want + 8 + jl, ' ', padded - jl);
    const unsigned char tail[8] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40};
    memcpy(want + 8 + padded, tail, 8);
    char *got;
    size_t size;
    assert_int_equal(lj_file_read_all(path, &got, &size), LJ_OK);
    assert_int_equal(size, sizeof want);
    assert_memory_equal(got, want, sizeof want);
    free(got);
}

static void test_from_f32_conversion(void **state) {
    (void)state;
    /* binary16 values by hand: 1, -2, max, the tie to inf, min subnormal, ties to even. */
    const struct { float f; uint16_t h; } cases[] = {
        {1.0f, 0x3c00}, {-2.0f, 0xc000}, {65504.0f, 0x7bff}, {65519.0f, 0x7bff}, {65520.0f, 0x7c00},
        {5.9604644775390625e-8f, 0x0001}, {2.98023223876953125e-8f, 0x0000}, {4.470348358154296875e-8f, 0x0001},
        {0.1f, 0x2e66}, {6.103515625e-5f, 0x0400}, {1.0009765625f, 0x3c01}, {1.00048828125f, 0x3c00},
        {1.00146484375f, 0x3c02}, {0.0f, 0x0000}, {-0.0f, 0x8000}, {1e9f, 0x7c00},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (lj_f32_to_f16(cases[i].f) != cases[i].h)
            fail_msg("f16(%g) = 0x%04x, want 0x%04x", (double)cases[i].f, lj_f32_to_f16(cases[i].f), cases[i].h);
    }
    /* Every non-NaN binary16 value survives f16 -> f32 -> f16. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;
        assert_int_equal(lj_f32_to_f16(lj_f16_to_f32((uint16_t)h)), h);
    }
    enum { N = 1000 };
    float *x = lj_malloc(N * sizeof(float)), *back = lj_malloc(N * sizeof(float));
    lj_rng rng;
    lj_rng_seed(&rng, 3);
    for (int i = 0; i < N; i++) x[i] = (float)(lj_rng_normal(&rng) * 10.0);
    lj_st_tensor ts[3] = {
        {.name = "bf16", .dtype = LJ_ST_BF16, .ndim = 2, .shape = {10, 100}, .from_f32 = x},
        {.name = "f16", .dtype = LJ_ST_F16, .ndim = 1, .shape = {N}, .from_f32 = x},
        {.name = "f32", .dtype = LJ_ST_F32, .ndim = 1, .shape = {N}, .from_f32 = x},
    };
    const char *path = tmp_path("conv.safetensors");
    assert_int_equal(lj_safetensors_write(path, ts, 3, NULL, NULL, 0), LJ_OK);
    lj_safetensors st;
    assert_int_equal(lj_safetensors_open(&st, path), LJ_OK);
    assert_int_equal(lj_safetensors_read_f32(&st, lj_safetensors_find(&st, "bf16"), back), LJ_OK);
    for (int i = 0; i < N; i++) assert_true(back[i] == lj_bf16_to_f32(lj_f32_to_bf16(x[i])));
    assert_int_equal(lj_safetensors_read_f32(&st, lj_safetensors_find(&st, "f16"), back), LJ_OK);
    for (int i = 0; i < N; i++) assert_true(back[i] == lj_f16_to_f32(lj_f32_to_f16(x[i])));
    assert_int_equal(lj_safetensors_read_f32(&st, lj_safetensors_find(&st, "f32"), back), LJ_OK);
    assert_memory_equal(back, x, N * sizeof(float));
    lj_safetensors_close(&st);
    free(x);
    free(back);
}

/* A failed write leaves the old file as it was and no temporary file behind. */
static void test_write_atomic(void **state) {
    (void)state;
    const float v[2] = {3, 4};
    lj_st_tensor good = {.name = "w", .dtype = LJ_ST_F32, .ndim = 1, .shape = {2}, .data = v};
    const char *path = tmp_path("keep.safetensors");
    assert_int_equal(lj_safetensors_write(path, &good, 1, NULL, NULL, 0), LJ_OK);
    char *before;
    size_t nb;
    assert_int_equal(lj_file_read_all(path, &before, &nb), LJ_OK);
    lj_st_tensor dup[2] = {good, good};
    assert_int_equal(lj_safetensors_write(path, dup, 2, NULL, NULL, 0), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "'w' given twice"));
    lj_st_tensor bad = {.name = "i", .dtype = LJ_ST_I32, .ndim = 1, .shape = {2}, .from_f32 = v};
    assert_int_equal(lj_safetensors_write(path, &bad, 1, NULL, NULL, 0), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "'i'"));
    char *after;
    size_t na;
    assert_int_equal(lj_file_read_all(path, &after, &na), LJ_OK);
    assert_int_equal(na, nb);
    assert_memory_equal(after, before, nb);
    free(before);
    free(after);
    char missing[700];
    snprintf(missing, sizeof missing, "%s/no/such/dir/x.safetensors", g_dir);
    assert_int_equal(lj_safetensors_write(missing, &good, 1, NULL, NULL, 0), LJ_ERR_IO);
    assert_non_null(strstr(lj_error_message(), missing));
    assert_int_equal(count_tmp_files(), 0);
}

/* A streamed source: x[offset + i], failing at element `fail_at` (-1: never). */
typedef struct {
    const float *x;
    int64_t fail_at;
    int calls;
} stream_src;

static lj_status read_stream(void *ctx, int64_t offset, int64_t n, float *dst) {
    stream_src *s = ctx;
    s->calls++;
    if (n > LJ_ST_STREAM_CHUNK) return lj_fail(LJ_ERR_ARG, "a chunk of %lld values", (long long)n);
    if (s->fail_at >= 0 && offset + n > s->fail_at) return lj_fail(LJ_ERR_IO, "simulated read failure");
    memcpy(dst, s->x + offset, (size_t)n * sizeof(float));
    return LJ_OK;
}

/* Streamed tensors (read_f32, two chunk buffers and a writer thread per file) give the bytes of
 * the same tensors from memory (from_f32), with a tensor from memory between them; a source that
 * fails mid-tensor and a write that fails (the temporary file is /dev/full) are reported naming
 * the file, leave no temporary file, and the old file as it was. */
static void test_write_streamed(void **state) {
    (void)state;
    const int64_t N = 2 * LJ_ST_STREAM_CHUNK + 12345; /* three chunks, the last one partial */
    float *x = lj_malloc((size_t)N * sizeof(float));
    lj_rng rng;
    lj_rng_seed(&rng, 5);
    for (int64_t i = 0; i < N; i++) x[i] = (float)lj_rng_normal(&rng);
    stream_src src = {x, -1, 0};
    const float v[3] = {1, 2, 3};
    lj_st_tensor mem[4] = {
        {.name = "a", .dtype = LJ_ST_BF16, .ndim = 1, .shape = {N}, .from_f32 = x},
        {.name = "b", .dtype = LJ_ST_F32, .ndim = 1, .shape = {3}, .data = v},
        {.name = "c", .dtype = LJ_ST_F32, .ndim = 2, .shape = {2, N / 2}, .from_f32 = x + 1},
        {.name = "d", .dtype = LJ_ST_F16, .ndim = 1, .shape = {7}, .from_f32 = x + 5},
    };
    lj_st_tensor str[4];
    memcpy(str, mem, sizeof str);
    const int64_t offsets[4] = {0, 0, 1, 5};
    for (int i = 0; i < 4; i++) {
        if (i == 1) continue;
        str[i].from_f32 = NULL;
        str[i].read_f32 = read_stream;
        str[i].read_ctx = &src;
        str[i].read_offset = offsets[i];
    }
    const char *p1 = tmp_path("mem.safetensors");
    assert_int_equal(lj_safetensors_write(p1, mem, 4, NULL, NULL, 0), LJ_OK);
    char *want, *got;
    size_t nw, ng;
    assert_int_equal(lj_file_read_all(p1, &want, &nw), LJ_OK);
    char p2[700];
    snprintf(p2, sizeof p2, "%s", tmp_path("streamed.safetensors"));
    assert_int_equal(lj_safetensors_write(p2, str, 4, NULL, NULL, 0), LJ_OK);
    assert_int_equal(src.calls, 3 + 3 + 1);
    assert_int_equal(lj_file_read_all(p2, &got, &ng), LJ_OK);
    assert_int_equal(ng, nw);
    assert_memory_equal(got, want, nw);
    free(got);
    /* the source fails in tensor c's second chunk */
    src.fail_at = 1 + LJ_ST_STREAM_CHUNK + 10;
    assert_int_equal(lj_safetensors_write(p2, str, 4, NULL, NULL, 0), LJ_ERR_IO);
    if (!strstr(lj_error_message(), p2) || !strstr(lj_error_message(), "simulated read failure"))
        fail_msg("message: %s", lj_error_message());
    assert_int_equal(count_tmp_files(), 0);
    /* a write that fails on the writer thread: PATH.tmp.PID is /dev/full (ENOSPC) */
    src.fail_at = -1;
    char tmp[800];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", p2, (int)getpid());
    if (symlink("/dev/full", tmp) == 0) {
        assert_int_equal(lj_safetensors_write(p2, str, 4, NULL, NULL, 0), LJ_ERR_IO);
        if (!strstr(lj_error_message(), p2) || !strstr(lj_error_message(), "failed"))
            fail_msg("message: %s", lj_error_message());
        assert_int_equal(count_tmp_files(), 0);
    } else {
        print_message("no symlink to /dev/full: the failing write is not tested\n");
    }
    assert_int_equal(lj_file_read_all(p2, &got, &ng), LJ_OK); /* the old file, as it was */
    assert_int_equal(ng, nw);
    assert_memory_equal(got, want, nw);
    free(got);
    free(want);
    free(x);
}

/* ---- bad input ---------------------------------------------------------------------- */

static void test_bad_truncated(void **state) {
    (void)state;
    float v[16] = {0};
    lj_st_tensor ts[2] = {{.name = "model.embed_tokens.weight", .dtype = LJ_ST_F32, .ndim = 2, .shape = {2, 4}, .data = v},
                          {.name = "model.norm.weight", .dtype = LJ_ST_F32, .ndim = 1, .shape = {8}, .data = v}};
    const char *path = tmp_path("trunc.safetensors");
    assert_int_equal(lj_safetensors_write(path, ts, 2, NULL, NULL, 0), LJ_OK);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size - 10), 0);
    expect_open_error(path, LJ_ERR_FORMAT, "tensor 'model.norm.weight': data_offsets [32, 64] exceed the buffer (54 bytes)",
                      "truncated");
    assert_int_equal(truncate(path, 5), 0);
    expect_open_error(path, LJ_ERR_FORMAT, "too short", NULL);
    assert_int_equal(truncate(path, 40), 0); /* inside the header */
    expect_open_error(path, LJ_ERR_FORMAT, "header length", "past the end of the file (40 bytes)");
    expect_open_error(tmp_path("nonexistent.safetensors"), LJ_ERR_IO, "cannot open", NULL);
}

static void test_bad_header_length(void **state) {
    (void)state;
    const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    expect_open_error(write_raw("long.safetensors", h, 1000, 4), LJ_ERR_FORMAT, "header length 1000", "past the end");
    expect_open_error(write_raw("huge.safetensors", h, 1ull << 60, 4), LJ_ERR_FORMAT, "limit", NULL);
}

static void test_bad_json(void **state) {
    (void)state;
    expect_open_error(write_raw("garbled.safetensors", "{\"a\":{\"dtype\":\"F32\",\"sha", 0, 4), LJ_ERR_FORMAT,
                      "not valid JSON", NULL);
    expect_open_error(write_raw("notobj.safetensors", "[1, 2]", 0, 0), LJ_ERR_FORMAT, "'{'", NULL);
    expect_open_error(write_raw("trail.safetensors", "{} x", 0, 0), LJ_ERR_FORMAT, "bytes after the JSON", NULL);
    expect_open_error(write_raw("entry.safetensors", "{\"w\": 3}", 0, 0), LJ_ERR_FORMAT, "tensor 'w'", "not a JSON object");
    expect_open_error(write_raw("nooff.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, 4), LJ_ERR_FORMAT,
                      "tensor 'w'", "missing field 'data_offsets'");
    expect_open_error(write_raw("dtype.safetensors", "{\"w\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 0, 4),
                      LJ_ERR_FORMAT, "tensor 'w'", "unknown dtype \"F33\"");
    expect_open_error(write_raw("shape.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 0, 4),
                      LJ_ERR_FORMAT, "tensor 'w'", "shape[0]");
    expect_open_error(write_raw("offs.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.5,4]}}", 0, 4),
                      LJ_ERR_FORMAT, "tensor 'w'", "data_offsets");
    expect_open_error(write_raw("meta.safetensors", "{\"__metadata__\":{\"k\":1}}", 0, 0), LJ_ERR_FORMAT, "__metadata__", "'k'");
    expect_open_error(
        write_raw("dup.safetensors",
                  "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[4,8]}}",
                  0, 8),
        LJ_ERR_FORMAT, "tensor 'w'", "twice");
}

static void test_bad_offsets(void **state) {
    (void)state;
    expect_open_error(
        write_raw("oob.safetensors", "{\"model.norm.weight\":{\"dtype\":\"F32\",\"shape\":[25],\"data_offsets\":[0,100]}}", 0, 64),
        LJ_ERR_FORMAT, "tensor 'model.norm.weight': data_offsets [0, 100] exceed the buffer (64 bytes)", NULL);
    expect_open_error(
        write_raw("overlap.safetensors",
                  "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
                  "\"data_offsets\":[4,12]}}",
                  0, 12),
        LJ_ERR_FORMAT, "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]", NULL);
    expect_open_error(
        write_raw("gap.safetensors",
                  "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
                  "\"data_offsets\":[12,20]}}",
                  0, 20),
        LJ_ERR_FORMAT, "tensor 'b'", "gap: bytes [8, 12)");
    expect_open_error(
        write_raw("start.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 0, 12),
        LJ_ERR_FORMAT, "tensor 'a'", "gap: bytes [0, 4)");
    expect_open_error(write_raw("span.safetensors", "{\"a\":{\"dtype\":\"BF16\",\"shape\":[3, 2],\"data_offsets\":[0,8]}}", 0, 8),
                      LJ_ERR_FORMAT, "tensor 'a'", "span 8 bytes, but shape [3, 2] of BF16 needs 12 bytes");
    expect_open_error(write_raw("rev.safetensors", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,0]}}", 0, 8),
                      LJ_ERR_FORMAT, "tensor 'a'", "end before they begin");
    expect_open_error(write_raw("trailing.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 12),
                      LJ_ERR_FORMAT, "cover 8 bytes", "holds 12");
    /* Header padding with spaces is valid. */
    lj_safetensors st;
    const char *ok = write_raw("padded.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 64, 8);
    assert_int_equal(lj_safetensors_open(&st, ok), LJ_OK);
    assert_int_equal(st.count, 1);
    assert_int_equal(((const unsigned char *)st.entries[0].data)[0], 1);
    lj_safetensors_close(&st);
}

int main(void) {
    const char *filter = getenv("LJ_TEST_FILTER");
    if (filter && filter[0]) cmocka_set_test_filter(filter);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_all_dtypes), cmocka_unit_test(test_header_bytes),
        cmocka_unit_test(test_from_f32_conversion),   cmocka_unit_test(test_write_atomic),
        cmocka_unit_test(test_write_streamed),
        cmocka_unit_test(test_bad_truncated),         cmocka_unit_test(test_bad_header_length),
        cmocka_unit_test(test_bad_json),              cmocka_unit_test(test_bad_offsets),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
