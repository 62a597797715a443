/* tensorboard.c: the TensorBoard event-file writer (format in tensorboard.h): Event protos
 * encoded by protobuf-c, framed as TFRecords with ISA-L's CRC32C, buffered in memory and
 * written at each flush. */
#define _GNU_SOURCE
#include "metrics/tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <isa-l/crc.h>
#include <math.h>
#include <inttypes.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/fs.h"
#include "metrics/tensorboard_event.pb-c.h"

typedef Ljperf__Tensorboard__Event tb_event;
typedef Ljperf__Tensorboard__Summary tb_summary;
typedef Ljperf__Tensorboard__Summary__Value tb_value;
typedef Ljperf__Tensorboard__TensorProto tb_tensor;

struct lj_tb_writer {
    FILE *file;
    char path[LJ_PATH_MAX];
    const char *flag;     /* the flag or config key that named the directory, for messages */
    uint8_t *buf;         /* encoded records not yet written */
    size_t len, cap;
    int queued, max_queue;
    int64_t records, bytes;
};

uint32_t lj_tb_crc32c(const void *data, size_t size) {
    /* ISA-L's crc32_iscsi leaves the initial value and the final inversion to the caller */
    uint32_t crc = 0xFFFFFFFFu;
    const unsigned char *p = data;
    while (size > 0) {
        const int n = size > (1u << 30) ? (1 << 30) : (int)size;
        crc = crc32_iscsi((unsigned char *)p, n, crc);
        p += n;
        size -= (size_t)n;
    }
    return ~crc;
}

uint32_t lj_tb_mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

static double wall_time(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Appends one TFRecord holding `ev` to the buffer. */
static void append_event(lj_tb_writer *w, const tb_event *ev) {
    const size_t n = ljperf__tensorboard__event__get_packed_size(ev);
    const size_t need = w->len + n + 16;
    if (need > w->cap) {
        w->cap = need * 2 > 4096 ? need * 2 : 4096;
        w->buf = lj_realloc(w->buf, w->cap);
    }
    uint8_t *rec = w->buf + w->len;
    const uint64_t len64 = n;
    for (int i = 0; i < 8; i++) rec[i] = (uint8_t)(len64 >> (8 * i));
    put_u32(rec + 8, lj_tb_mask_crc(lj_tb_crc32c(rec, 8)));
    const size_t packed = ljperf__tensorboard__event__pack(ev, rec + 12);
    LJ_ASSERT(packed == n, "protobuf-c packed %zu bytes, announced %zu", packed, n);
    put_u32(rec + 12 + n, lj_tb_mask_crc(lj_tb_crc32c(rec + 12, n)));
    w->len += n + 16;
    w->queued++;
}

lj_status lj_tb_writer_flush(lj_tb_writer *w) {
    if (!w) return LJ_OK;
    if (w->len > 0) {
        if (fwrite(w->buf, 1, w->len, w->file) != w->len || fflush(w->file) != 0)
            return lj_fail(LJ_ERR_IO, "%s: writing the TensorBoard event file %s: %s", w->flag, w->path, strerror(errno));
        w->records += w->queued;
        w->bytes += (int64_t)w->len;
        w->len = 0;
        w->queued = 0;
    }
    return LJ_OK;
}

lj_status lj_tb_writer_open(lj_tb_writer **out, const char *dir, int max_queue, const char *flag) {
    *out = NULL;
    if (!dir || !*dir) return lj_fail(LJ_ERR_ARG, "%s: the directory name is empty", flag);
    if (lj_mkdir_p(dir) != LJ_OK) {
        lj_error_prefix("%s %s", flag, dir);
        return LJ_ERR_IO;
    }
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    lj_tb_writer *w = lj_calloc(1, sizeof *w);
    w->flag = flag;
    w->max_queue = max_queue > 0 ? max_queue : 1000;
    const long now = (long)time(NULL);
    int fd = -1;
    for (int n = 0; n < 1000 && fd < 0; n++) {
        if (lj_path_format(w->path, "%s/events.out.tfevents.%010ld.%s.%d.%d", dir, now, host, (int)getpid(), n) !=
            LJ_OK) {
            free(w);
            lj_error_prefix("%s", flag);
            return LJ_ERR_ARG;
        }
        fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST) {
            lj_status s = lj_fail(LJ_ERR_IO, "%s %s: cannot create %s: %s", flag, dir, w->path, strerror(errno));
            free(w);
            return s;
        }
    }
    if (fd < 0) {
        free(w);
        return lj_fail(LJ_ERR_IO, "%s %s: 1000 event files of this second and process exist already", flag, dir);
    }
    w->file = fdopen(fd, "wb");
    LJ_ASSERT(w->file, "fdopen of a new file failed");
    tb_event ev = LJPERF__TENSORBOARD__EVENT__INIT;
    ev.has_wall_time = 1;
    ev.wall_time = wall_time();
    ev.has_step = 1;
    ev.step = 0;
    ev.file_version = (char *)LJ_TB_FILE_VERSION;
    append_event(w, &ev);
    lj_status s = lj_tb_writer_flush(w);
    if (s != LJ_OK) {
        lj_tb_writer_close(w);
        return s;
    }
    *out = w;
    return LJ_OK;
}

lj_status lj_tb_writer_add_scalar(lj_tb_writer *w, const char *tag, double value, int64_t step) {
    tb_value v = LJPERF__TENSORBOARD__SUMMARY__VALUE__INIT;
    v.tag = (char *)tag;
    v.has_simple_value = 1; /* present even when 0: TensorBoard drops a value without it */
    v.simple_value = (float)value;
    tb_value *values[1] = {&v};
    tb_summary summary = LJPERF__TENSORBOARD__SUMMARY__INIT;
    summary.n_value = 1;
    summary.value = values;
    tb_event ev = LJPERF__TENSORBOARD__EVENT__INIT;
    ev.has_wall_time = 1;
    ev.wall_time = wall_time();
    ev.has_step = 1;
    ev.step = step;
    ev.summary = &summary;
    append_event(w, &ev);
    return w->queued >= w->max_queue ? lj_tb_writer_flush(w) : LJ_OK;
}

lj_status lj_tb_writer_close(lj_tb_writer *w) {
    if (!w) return LJ_OK;
    lj_status s = lj_tb_writer_flush(w);
    if (w->file && fclose(w->file) != 0 && s == LJ_OK)
        s = lj_fail(LJ_ERR_IO, "%s: closing the TensorBoard event file %s: %s", w->flag, w->path, strerror(errno));
    free(w->buf);
    free(w);
    return s;
}

const char *lj_tb_writer_path(const lj_tb_writer *w) { return w->path; }
int64_t lj_tb_writer_records(const lj_tb_writer *w) { return w->records; }
int64_t lj_tb_writer_bytes(const lj_tb_writer *w) { return w->bytes; }

/* ---- reading ---------------------------------------------------------------------- */

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int lj_tb_is_event_data(const void *data, size_t size) {
    return size >= 12 && get_u32((const uint8_t *)data + 8) == lj_tb_mask_crc(lj_tb_crc32c(data, 8));
}

/* The scalar of a one-element float or double tensor (DT_FLOAT 1, DT_DOUBLE 2): 1 and *out, or 0. */
static int tensor_scalar(const tb_tensor *t, double *out) {
    if (t->n_float_val == 1) return *out = t->float_val[0], 1;
    if (t->n_double_val == 1) return *out = t->double_val[0], 1;
    const int dtype = t->has_dtype ? t->dtype : 0;
    if (t->has_tensor_content && dtype == 1 && t->tensor_content.len == 4) {
        float f;
        memcpy(&f, t->tensor_content.data, 4); /* little-endian hosts only, as the rest of ljperf */
        return *out = f, 1;
    }
    if (t->has_tensor_content && dtype == 2 && t->tensor_content.len == 8) {
        double d;
        memcpy(&d, t->tensor_content.data, 8);
        return *out = d, 1;
    }
    return 0;
}

/* Hands each value of `ev` to fn. */
static lj_status event_values(const tb_event *ev, lj_tb_value_fn fn, void *ctx) {
    if (!ev->summary) return LJ_OK;
    for (size_t i = 0; i < ev->summary->n_value; i++) {
        const tb_value *v = ev->summary->value[i];
        lj_tb_value out = {.tag = v->tag ? v->tag : "", .step = ev->has_step ? ev->step : 0,
                           .wall_time = ev->has_wall_time ? ev->wall_time : NAN};
        const tb_tensor *t = v->tensor;
        const char *plugin = v->metadata && v->metadata->plugin_data ? v->metadata->plugin_data->plugin_name : NULL;
        if (v->has_simple_value) {
            out.value = v->simple_value;
        } else if (t && t->n_string_val > 0 && (!plugin || strcmp(plugin, "text") == 0)) {
            const ProtobufCBinaryData *b = &t->string_val[0];
            char *text = lj_malloc(b->len + 1);
            if (b->len) memcpy(text, b->data, b->len);
            text[b->len] = '\0';
            out.is_text = 1;
            out.text = text;
            lj_status s = fn(ctx, &out);
            free(text);
            LJ_TRY(s);
            continue;
        } else if (!(t && (!plugin || strcmp(plugin, "scalars") == 0) && tensor_scalar(t, &out.value))) {
            continue; /* an image, a histogram, ...: not drawn */
        }
        LJ_TRY(fn(ctx, &out));
    }
    return LJ_OK;
}

lj_status lj_tb_read(const void *data, size_t size, const char *name, lj_tb_value_fn fn, void *ctx,
                     lj_tb_read_info *info) {
    memset(info, 0, sizeof *info);
    info->first_wall_time = NAN;
    info->truncated_at = -1;
    const uint8_t *p = data;
    size_t off = 0;
    while (off < size) {
        if (size - off < 12) {
            info->truncated_at = (int64_t)off;
            break;
        }
        uint64_t len = 0;
        for (int i = 0; i < 8; i++) len |= (uint64_t)p[off + i] << (8 * i);
        if (get_u32(p + off + 8) != lj_tb_mask_crc(lj_tb_crc32c(p + off, 8)))
            return lj_fail(LJ_ERR_FORMAT, "%s: byte %zu: the record's length CRC does not match: not a TensorBoard "
                                          "event file, or a corrupt one (expected TFRecord framing: length, masked "
                                          "CRC32C, data, masked CRC32C)", name, off);
        if (len > size - off - 12 || size - off - 12 - len < 4) {
            info->truncated_at = (int64_t)off;
            break;
        }
        const uint8_t *rec = p + off + 12;
        if (get_u32(rec + len) != lj_tb_mask_crc(lj_tb_crc32c(rec, (size_t)len)))
            return lj_fail(LJ_ERR_FORMAT, "%s: byte %zu: the record's data CRC does not match (a corrupt TensorBoard "
                                          "event file: expected the masked CRC32C of its %" PRIu64 " bytes)",
                           name, off, len);
        tb_event *ev = ljperf__tensorboard__event__unpack(NULL, (size_t)len, rec);
        if (!ev)
            return lj_fail(LJ_ERR_FORMAT, "%s: byte %zu: the record is not a TensorBoard Event protocol buffer "
                                          "(expected event.proto's fields)", name, off);
        info->records++;
        if (ev->has_wall_time && isnan(info->first_wall_time)) info->first_wall_time = ev->wall_time;
        if (ev->file_version && !info->file_version[0])
            snprintf(info->file_version, sizeof info->file_version, "%s", ev->file_version);
        lj_status s = event_values(ev, fn, ctx);
        ljperf__tensorboard__event__free_unpacked(ev, NULL);
        LJ_TRY(s);
        off += 16 + (size_t)len;
    }
    return LJ_OK;
}
