/* test_tensorboard.c: the TensorBoard event-file writer and reader (metrics/tensorboard.h):
 * CRC32C and its mask against known values, the TFRecord framing of a written file read back
 * from the format's description with protobuf-c's decoder, a file per writer (never
 * overwritten), write errors reported with the file named (a file-size limit makes the disk
 * "full"), bad directories, the cost of a scalar and of a flush (printed); the reader
 * (lj_tb_read) on the writer's file with other writers' forms added (a text summary, tensor
 * scalars), cut at every byte and with a corrupt byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/base.h"
#include "base/fs.h"
#include "metrics/tensorboard.h"
#include "metrics/tensorboard_event.pb-c.h"
#include "train/tensorboard.h"
#include "test_util.h"

static void test_crc32c_known_values(void **state) {
    (void)state;
    assert_int_equal(lj_tb_crc32c("123456789", 9), 0xE3069283u); /* the Castagnoli check value */
    assert_int_equal(lj_tb_crc32c("", 0), 0u);
    /* RFC 3720 B.4: 32 bytes of zeros, of 0xff, and ascending 0..31 */
    uint8_t b[32];
    memset(b, 0, sizeof b);
    assert_int_equal(lj_tb_crc32c(b, 32), 0x8A9136AAu);
    memset(b, 0xff, sizeof b);
    assert_int_equal(lj_tb_crc32c(b, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++) b[i] = (uint8_t)i;
    assert_int_equal(lj_tb_crc32c(b, 32), 0x46DD794Eu);
    /* the mask: rotate right by 15, add 0xa282ead8 */
    assert_int_equal(lj_tb_mask_crc(0), 0xa282ead8u);
    assert_int_equal(lj_tb_mask_crc(0x00008000u), 0xa282ead9u);
}

static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint32_t get_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* The only file in dir, into path. */
static int only_file(const char *dir, char *path, size_t len) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0) {
            snprintf(path, len, "%s/%s", dir, e->d_name);
            n++;
        }
    closedir(d);
    return n == 1 ? 0 : -1;
}

static void test_write_and_read_back(void **state) {
    (void)state;
    char dir[512], path[1024];
    assert_int_equal(lj_test_make_dir(dir, sizeof dir, "tb"), 0);
    char sub[600];
    snprintf(sub, sizeof sub, "%s/a/b", dir); /* created with its parents */
    lj_tb_writer *w = NULL;
    assert_int_equal(lj_tb_writer_open(&w, sub, 0, "--tensorboard-dir"), LJ_OK);
    assert_int_equal(lj_tb_writer_add_scalar(w, "lm loss", 11.75, 1), LJ_OK);
    assert_int_equal(lj_tb_writer_add_scalar(w, "learning-rate", 0.0, 0), LJ_OK); /* zero: still present */
    assert_int_equal(lj_tb_writer_add_scalar(w, "lm loss vs samples", -2.5, 1LL << 40), LJ_OK);
    assert_int_equal(lj_tb_writer_records(w), 1); /* buffered until the flush */
    assert_int_equal(lj_tb_writer_close(w), LJ_OK);
    assert_int_equal(only_file(sub, path, sizeof path), 0);
    assert_non_null(strstr(path, "events.out.tfevents."));

    char *data = NULL;
    size_t size = 0;
    assert_int_equal(lj_file_read_all(path, &data, &size), LJ_OK);
    const uint8_t *p = (const uint8_t *)data;
    const char *tags[] = {NULL, "lm loss", "learning-rate", "lm loss vs samples"};
    const float values[] = {0, 11.75f, 0.0f, -2.5f};
    const int64_t steps[] = {0, 1, 0, 1LL << 40};
    size_t off = 0;
    int n = 0;
    while (off < size) {
        assert_true(size - off >= 16);
        const uint64_t len = get_u64(p + off);
        assert_int_equal(get_u32(p + off + 8), lj_tb_mask_crc(lj_tb_crc32c(p + off, 8)));
        assert_true(off + 16 + len <= size);
        assert_int_equal(get_u32(p + off + 12 + len), lj_tb_mask_crc(lj_tb_crc32c(p + off + 12, len)));
        Ljperf__Tensorboard__Event *ev = ljperf__tensorboard__event__unpack(NULL, len, p + off + 12);
        assert_non_null(ev);
        assert_true(ev->has_wall_time && ev->wall_time > 1.6e9);
        assert_true(ev->has_step);
        assert_true(ev->step == steps[n]);
        if (n == 0) {
            assert_string_equal(ev->file_version, LJ_TB_FILE_VERSION);
            assert_null(ev->summary);
        } else {
            assert_non_null(ev->summary);
            assert_int_equal(ev->summary->n_value, 1);
            assert_string_equal(ev->summary->value[0]->tag, tags[n]);
            assert_true(ev->summary->value[0]->has_simple_value);
            assert_true(ev->summary->value[0]->simple_value == values[n]);
        }
        ljperf__tensorboard__event__free_unpacked(ev, NULL);
        off += 16 + len;
        n++;
    }
    assert_int_equal(n, 4);
    free(data);

    /* a second writer in the same directory gets its own file */
    assert_int_equal(lj_tb_writer_open(&w, sub, 0, "--tensorboard-dir"), LJ_OK);
    char first[1024];
    snprintf(first, sizeof first, "%s", path);
    assert_string_not_equal(lj_tb_writer_path(w), first);
    assert_int_equal(lj_tb_writer_close(w), LJ_OK);
    lj_dir_remove_quiet(dir);
}

/* Appends one framed record of `ev` to buf[*len..). */
static void frame(uint8_t *buf, size_t *len, const Ljperf__Tensorboard__Event *ev) {
    const size_t n = ljperf__tensorboard__event__get_packed_size(ev);
    uint8_t *r = buf + *len;
    for (int i = 0; i < 8; i++) r[i] = (uint8_t)((uint64_t)n >> (8 * i));
    const uint32_t hc = lj_tb_mask_crc(lj_tb_crc32c(r, 8));
    memcpy(r + 8, &hc, 4); /* little-endian host */
    ljperf__tensorboard__event__pack(ev, r + 12);
    const uint32_t dc = lj_tb_mask_crc(lj_tb_crc32c(r + 12, n));
    memcpy(r + 12 + n, &dc, 4);
    *len += n + 16;
}

typedef struct {
    int scalars, texts;
    char tags[8][64];
    double values[8];
    int64_t steps[8];
    char text[64];
} seen;

static lj_status collect(void *ctx, const lj_tb_value *v) {
    seen *s = ctx;
    if (v->is_text) {
        s->texts++;
        snprintf(s->text, sizeof s->text, "%s=%s", v->tag, v->text);
    } else if (s->scalars < 8) {
        snprintf(s->tags[s->scalars], sizeof s->tags[0], "%s", v->tag);
        s->values[s->scalars] = v->value;
        s->steps[s->scalars++] = v->step;
    }
    return LJ_OK;
}

static void test_reader(void **state) {
    (void)state;
    char dir[512], path[1024];
    assert_int_equal(lj_test_make_dir(dir, sizeof dir, "tbread"), 0);
    lj_tb_writer *w = NULL;
    assert_int_equal(lj_tb_writer_open(&w, dir, 0, "--tensorboard-dir"), LJ_OK);
    assert_int_equal(lj_tb_writer_add_scalar(w, "lm loss", 11.75, 1), LJ_OK);
    assert_int_equal(lj_tb_writer_add_scalar(w, "learning-rate", 0.0, 2), LJ_OK);
    assert_int_equal(lj_tb_writer_close(w), LJ_OK);
    assert_int_equal(only_file(dir, path, sizeof path), 0);
    char *data = NULL;
    size_t size = 0;
    assert_int_equal(lj_file_read_all(path, &data, &size), LJ_OK);
    /* other writers' forms: a text summary (SummaryWriter.add_text, as Megatron-LM writes its
     * arguments), a one-element float tensor and a double in tensor_content (TensorFlow 2) */
    uint8_t *buf = malloc(size + 4096);
    memcpy(buf, data, size);
    size_t len = size;
    Ljperf__Tensorboard__SummaryMetadata__PluginData text_plugin = LJPERF__TENSORBOARD__SUMMARY_METADATA__PLUGIN_DATA__INIT,
                                                     scalar_plugin = LJPERF__TENSORBOARD__SUMMARY_METADATA__PLUGIN_DATA__INIT;
    text_plugin.plugin_name = "text";
    scalar_plugin.plugin_name = "scalars";
    Ljperf__Tensorboard__SummaryMetadata text_meta = LJPERF__TENSORBOARD__SUMMARY_METADATA__INIT,
                                         scalar_meta = LJPERF__TENSORBOARD__SUMMARY_METADATA__INIT;
    text_meta.plugin_data = &text_plugin;
    scalar_meta.plugin_data = &scalar_plugin;
    ProtobufCBinaryData sv = {4, (uint8_t *)"4096"};
    Ljperf__Tensorboard__TensorProto tt = LJPERF__TENSORBOARD__TENSOR_PROTO__INIT, tf = LJPERF__TENSORBOARD__TENSOR_PROTO__INIT,
                                     td = LJPERF__TENSORBOARD__TENSOR_PROTO__INIT;
    tt.has_dtype = 1, tt.dtype = 7, tt.n_string_val = 1, tt.string_val = &sv;
    float fv = 3.5f;
    tf.has_dtype = 1, tf.dtype = 1, tf.n_float_val = 1, tf.float_val = &fv;
    double dv = -0.125;
    td.has_dtype = 1, td.dtype = 2, td.has_tensor_content = 1, td.tensor_content = (ProtobufCBinaryData){8, (uint8_t *)&dv};
    Ljperf__Tensorboard__Summary__Value v_text = LJPERF__TENSORBOARD__SUMMARY__VALUE__INIT,
                                        v_f = LJPERF__TENSORBOARD__SUMMARY__VALUE__INIT,
                                        v_d = LJPERF__TENSORBOARD__SUMMARY__VALUE__INIT;
    v_text.tag = "seq_length/text_summary", v_text.tensor = &tt, v_text.metadata = &text_meta;
    v_f.tag = "loss", v_f.tensor = &tf, v_f.metadata = &scalar_meta;
    v_d.tag = "lr", v_d.tensor = &td;
    Ljperf__Tensorboard__Summary__Value *vals[3] = {&v_text, &v_f, &v_d};
    Ljperf__Tensorboard__Summary sum = LJPERF__TENSORBOARD__SUMMARY__INIT;
    sum.n_value = 3, sum.value = vals;
    Ljperf__Tensorboard__Event ev = LJPERF__TENSORBOARD__EVENT__INIT;
    ev.has_step = 1, ev.step = 7, ev.summary = &sum;
    frame(buf, &len, &ev);

    seen got;
    memset(&got, 0, sizeof got);
    lj_tb_read_info info;
    assert_int_equal(lj_tb_read(buf, len, path, collect, &got, &info), LJ_OK);
    assert_int_equal(info.records, 4);
    assert_int_equal(info.truncated_at, -1);
    assert_string_equal(info.file_version, LJ_TB_FILE_VERSION);
    assert_true(info.first_wall_time > 1.6e9);
    assert_int_equal(got.scalars, 4);
    assert_string_equal(got.tags[0], "lm loss");
    assert_true(got.values[0] == 11.75 && got.steps[0] == 1);
    assert_string_equal(got.tags[1], "learning-rate");
    assert_true(got.values[1] == 0.0 && got.steps[1] == 2);
    assert_string_equal(got.tags[2], "loss");
    assert_true(got.values[2] == 3.5 && got.steps[2] == 7);
    assert_string_equal(got.tags[3], "lr");
    assert_true(got.values[3] == -0.125);
    assert_int_equal(got.texts, 1);
    assert_string_equal(got.text, "seq_length/text_summary=4096");
    assert_true(lj_tb_is_event_data(buf, len));

    /* cut at every byte: the whole records before the cut, never an error */
    size_t ends[4], off = 0;
    for (int i = 0; i < 4; i++) {
        uint64_t n = 0;
        memcpy(&n, buf + off, 8);
        off += 16 + (size_t)n;
        ends[i] = off;
    }
    for (size_t cut = 0; cut < len; cut++) {
        memset(&got, 0, sizeof got);
        assert_int_equal(lj_tb_read(buf, cut, path, collect, &got, &info), LJ_OK);
        int whole = 0;
        while (whole < 4 && ends[whole] <= cut) whole++;
        assert_int_equal(info.records, whole);
        assert_int_equal(info.truncated_at, whole == 0 ? (cut ? 0 : -1) : (ends[whole - 1] == cut ? -1 : (int64_t)ends[whole - 1]));
    }
    /* a corrupt byte: the data CRC, or the length CRC, with the record's offset */
    buf[ends[1] + 14] ^= 0x40;
    assert_int_equal(lj_tb_read(buf, len, path, collect, &got, &info), LJ_ERR_FORMAT);
    assert_non_null(strstr(lj_error_message(), "data CRC does not match"));
    char at[64];
    snprintf(at, sizeof at, "byte %zu:", ends[1]);
    assert_non_null(strstr(lj_error_message(), at));
    buf[ends[1] + 14] ^= 0x40;
    buf[ends[0] + 2] ^= 0x01;
    assert_int_equal(lj_tb_read(buf, len, path, collect, &got, &info), LJ_ERR_FORMAT);
    assert_non_null(strstr(lj_error_message(), "length CRC does not match"));
    assert_false(lj_tb_is_event_data("{\"iteration\": 1}", 16));
    free(buf);
    free(data);
    lj_dir_remove_quiet(dir);
}

static void test_bad_directories(void **state) {
    (void)state;
    char dir[512], file[600], under[700];
    assert_int_equal(lj_test_make_dir(dir, sizeof dir, "tb_bad"), 0);
    snprintf(file, sizeof file, "%s/plain-file", dir);
    assert_int_equal(lj_test_write_file(file, "x", 1), 0);
    lj_tb_writer *w = (lj_tb_writer *)1;
    /* a regular file where the directory should be, and a directory below a file */
    assert_int_equal(lj_tb_writer_open(&w, file, 0, "--tensorboard-dir"), LJ_ERR_IO);
    assert_null(w);
    assert_non_null(strstr(lj_error_message(), "--tensorboard-dir"));
    assert_non_null(strstr(lj_error_message(), "plain-file"));
    snprintf(under, sizeof under, "%s/sub", file);
    assert_int_equal(lj_tb_writer_open(&w, under, 0, "tensorboard.output_path"), LJ_ERR_IO);
    assert_non_null(strstr(lj_error_message(), "tensorboard.output_path"));
    assert_int_equal(lj_tb_writer_open(&w, "", 0, "--tensorboard-dir"), LJ_ERR_ARG);
    lj_dir_remove_quiet(dir);
}

static void test_write_error_is_reported(void **state) {
    (void)state;
    char dir[512];
    assert_int_equal(lj_test_make_dir(dir, sizeof dir, "tb_full"), 0);
    lj_tb_writer *w = NULL;
    assert_int_equal(lj_tb_writer_open(&w, dir, 0, "--tensorboard-dir"), LJ_OK);
    /* a file-size limit just above what is written: the next write fails with EFBIG */
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = (rlim_t)lj_tb_writer_bytes(w) + 64;
    setrlimit(RLIMIT_FSIZE, &lim);
    for (int i = 0; i < 100; i++) assert_int_equal(lj_tb_writer_add_scalar(w, "lm loss", 1.0, i), LJ_OK);
    const lj_status s = lj_tb_writer_flush(w);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(s, LJ_ERR_IO);
    assert_non_null(strstr(lj_error_message(), "events.out.tfevents."));
    assert_non_null(strstr(lj_error_message(), "--tensorboard-dir"));
    lj_tb_writer_close(w); /* frees whatever the flush says */
    lj_dir_remove_quiet(dir);
}

/* LJ_TEST_TIMING=1: the cost tests also hold their times to a bound (on an idle machine). */
static int timing_verdicts(void) {
    const char *v = getenv("LJ_TEST_TIMING");
    return v && !strcmp(v, "1");
}

/* What a training step pays: encoding its scalars (10 per iteration: 5 tags and their "vs
 * samples" copies) and, at a log line, one flush. */
static void test_cost_per_scalar(void **state) {
    (void)state;
    char dir[512];
    assert_int_equal(lj_test_make_dir(dir, sizeof dir, "tb_cost"), 0);
    lj_tb_writer *w = NULL;
    const int n = 200000;
    assert_int_equal(lj_tb_writer_open(&w, dir, n + 1, "--tensorboard-dir"), LJ_OK);
    const double t0 = lj_time_sec();
    for (int i = 0; i < n; i++) assert_int_equal(lj_tb_writer_add_scalar(w, "learning-rate vs samples", 1e-4, i), LJ_OK);
    const double t1 = lj_time_sec();
    assert_int_equal(lj_tb_writer_flush(w), LJ_OK);
    const double t2 = lj_time_sec();
    /* a log line's flush: 15 records */
    double flush_max = 0.0, flush_sum = 0.0;
    for (int k = 0; k < 100; k++) {
        for (int i = 0; i < 15; i++) lj_tb_writer_add_scalar(w, "lm loss", 2.0, k);
        const double a = lj_time_sec();
        assert_int_equal(lj_tb_writer_flush(w), LJ_OK);
        const double d = lj_time_sec() - a;
        flush_sum += d;
        if (d > flush_max) flush_max = d;
    }
    const double per_scalar = (t1 - t0) / n;
    printf("tensorboard writer: %.3f us per scalar (encode + CRC32C into the buffer), %.1f MB/s when %d records "
           "are written at once, a 15-record flush %.1f us mean / %.1f us max; 10 scalars per iteration = %.2f us\n",
           per_scalar * 1e6, (double)lj_tb_writer_bytes(w) / (t2 - t1) / 1e6, n, flush_sum / 100 * 1e6,
           flush_max * 1e6, per_scalar * 10 * 1e6);
    /* a bound on time is a verdict on the machine's load, not on the writer: only when asked */
    if (timing_verdicts()) assert_true(per_scalar < 20e-6);
    assert_int_equal(lj_tb_writer_close(w), LJ_OK);
    lj_dir_remove_quiet(dir);
}

/* The whole per-iteration hook of the training loop (train/tensorboard.h): its scalars every
 * iteration, and at each log line the interval values, the memory reading and a flush. */
static void test_cost_per_iteration(void **state) {
    (void)state;
    char dir[512];
    assert_int_equal(lj_test_make_dir(dir, sizeof dir, "tb_iter"), 0);
    lj_train_config c;
    lj_train_config_defaults(&c);
    assert_int_equal(lj_config_preset("llama3-nano", &c.model), LJ_OK);
    c.ops = lj_ops_cpu();
    c.seq_length = 128;
    c.global_batch_size = 8;
    c.tensorboard_dir = dir;
    const int n = 20000;
    c.train_iters = n;
    const int intervals[2] = {1, 10};
    for (int k = 0; k < 2; k++) {
        c.log_interval = intervals[k];
        lj_train_tb tb;
        assert_int_equal(lj_train_tb_open(&tb, &c, 1, 1 << 20), LJ_OK);
        const double t0 = lj_time_sec();
        for (int i = 1; i <= n; i++) {
            const lj_train_tb_step s = {i, (int64_t)i * 8, 8, 5.0, 3e-4, 1.0, 0.0015};
            lj_train_tb_iteration(&tb, &s);
        }
        const double dt = lj_time_sec() - t0;
        assert_non_null(tb.writer); /* no write failed */
        lj_train_tb_close(&tb);
        printf("tensorboard hook: %.2f us per iteration with --log-interval %d (a log line, memory reading and "
               "flush every %d)\n",
               dt / n * 1e6, intervals[k], intervals[k]);
        if (timing_verdicts()) assert_true(dt / n < 500e-6);
    }
    lj_dir_remove_quiet(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_known_values),
        cmocka_unit_test(test_write_and_read_back),
        cmocka_unit_test(test_reader),
        cmocka_unit_test(test_bad_directories),
        cmocka_unit_test(test_write_error_is_reported),
        cmocka_unit_test(test_cost_per_scalar),
        cmocka_unit_test(test_cost_per_iteration),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
