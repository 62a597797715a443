/* tensorboard.c: the TensorBoard event-file writer (format in tensorboard.h): Event protos
 * encoded by protobuf-c, framed as TFRecords with ISA-L's CRC32C, buffered in memory and
 * written at each flush, whole records only. */
#define _GNU_SOURCE
#include "metrics/tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <isa-l/crc.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/fs.h"
#include "metrics/tensorboard_event.pb-c.h"

typedef Ljperf__Tensorboard__Event tb_event;
typedef Ljperf__Tensorboard__Summary tb_summary;
typedef Ljperf__Tensorboard__Summary__Value tb_value;

struct lj_tb_writer {
    int fd;               /* the event file (-1 until it is created) */
    char path[LJ_PATH_MAX];
    const char *flag;     /* the flag or config key that named the directory, for messages */
    uint8_t *buf;         /* encoded records not yet written */
    size_t len, cap;
    int queued, max_queue;
    int64_t records, bytes; /* complete records in the file, and its size: where the next one goes */
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

/* Writes the buffered records at the end of the complete ones. A write that fails or stops short
 * (a full disk, a file-size limit) is undone: the file is cut back to its last complete record and
 * the records stay buffered, so a reader never meets a partial record and a later flush (space
 * freed) writes them whole. */
lj_status lj_tb_writer_flush(lj_tb_writer *w) {
    if (!w || w->len == 0) return LJ_OK;
    size_t done = 0;
    while (done < w->len) {
        const ssize_t n = pwrite(w->fd, w->buf + done, w->len - done, (off_t)(w->bytes + (int64_t)done));
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        const int err = n < 0 ? errno : ENOSPC; /* 0 bytes written: no room */
        if (ftruncate(w->fd, (off_t)w->bytes) != 0)
            return lj_fail(LJ_ERR_IO, "%s: writing the TensorBoard event file %s: %s; cutting it back to its last "
                                      "complete record (%lld bytes) failed too: %s",
                           w->flag, w->path, strerror(err), (long long)w->bytes, strerror(errno));
        return lj_fail(LJ_ERR_IO, "%s: writing the TensorBoard event file %s: %s (it keeps its %lld complete records)",
                       w->flag, w->path, strerror(err), (long long)w->records);
    }
    w->records += w->queued;
    w->bytes += (int64_t)w->len;
    w->len = 0;
    w->queued = 0;
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
    w->fd = -1;
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
    w->fd = fd;
    tb_event ev = LJPERF__TENSORBOARD__EVENT__INIT;
    ev.has_wall_time = 1;
    ev.wall_time = wall_time();
    ev.has_step = 1;
    ev.step = 0;
    ev.file_version = (char *)LJ_TB_FILE_VERSION;
    append_event(w, &ev);
    lj_status s = lj_tb_writer_flush(w);
    if (s != LJ_OK) { /* not even the first record fits: no file is left behind */
        char path[LJ_PATH_MAX];
        snprintf(path, sizeof path, "%s", w->path);
        w->len = 0;
        lj_tb_writer_close(w);
        unlink(path);
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
    if (w->fd >= 0 && close(w->fd) != 0 && s == LJ_OK)
        s = lj_fail(LJ_ERR_IO, "%s: closing the TensorBoard event file %s: %s", w->flag, w->path, strerror(errno));
    free(w->buf);
    free(w);
    return s;
}

const char *lj_tb_writer_path(const lj_tb_writer *w) { return w->path; }
int64_t lj_tb_writer_records(const lj_tb_writer *w) { return w->records; }
int64_t lj_tb_writer_bytes(const lj_tb_writer *w) { return w->bytes; }
