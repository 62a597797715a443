/* input.c: compressed inputs as stdio streams (input.h), through glibc's fopencookie. */
#define _GNU_SOURCE
#include "data/input.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

static int ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

lj_input_compression lj_input_compression_of(const char *path) {
    if (ends_with(path, ".gz")) return LJ_INPUT_GZIP;
    if (ends_with(path, ".zst")) return LJ_INPUT_ZSTD;
    return LJ_INPUT_PLAIN;
}

size_t lj_input_base_len(const char *path) {
    const size_t n = strlen(path);
    switch (lj_input_compression_of(path)) {
    case LJ_INPUT_GZIP: return n - 3;
    case LJ_INPUT_ZSTD: return n - 4;
    default: return n;
    }
}

/* ---- gzip ---- */

typedef struct {
    gzFile gz;
    char *err;
    size_t err_len;
} gz_cookie;

static ssize_t gz_read(void *c, char *buf, size_t size) {
    gz_cookie *g = c;
    const unsigned n = size > (1u << 30) ? (1u << 30) : (unsigned)size;
    const int got = gzread(g->gz, buf, n);
    if (got > 0 && gzdirect(g->gz)) {
        snprintf(g->err, g->err_len, "not gzip data (no gzip header)");
        errno = EIO;
        return -1;
    }
    if (got < 0) {
        int zerr = 0;
        const char *msg = gzerror(g->gz, &zerr);
        snprintf(g->err, g->err_len, "gzip data: %s", zerr == Z_ERRNO ? strerror(errno) : msg);
        errno = EIO;
        return -1;
    }
    /* zlib reads a truncated member as its end; it says so through gzerror */
    int zerr = 0;
    const char *msg = gzerror(g->gz, &zerr);
    if (got == 0 && zerr != Z_OK && zerr != Z_STREAM_END) {
        snprintf(g->err, g->err_len, "gzip data: %s", msg);
        errno = EIO;
        return -1;
    }
    return got;
}

static int gz_close(void *c) {
    gz_cookie *g = c;
    const int rc = gzclose(g->gz);
    free(g);
    return rc == Z_OK ? 0 : EOF;
}

/* ---- zstd ---- */

typedef struct {
    FILE *f;
    ZSTD_DStream *ds;
    ZSTD_inBuffer in;
    char *inbuf;
    size_t incap;
    size_t last; /* the decompressor's last hint: 0 when a frame has just ended */
    int started;
    char *err;
    size_t err_len;
} zst_cookie;

static ssize_t zst_read(void *c, char *buf, size_t size) {
    zst_cookie *z = c;
    ZSTD_outBuffer out = {buf, size, 0};
    while (out.pos == 0) {
        if (z->in.pos == z->in.size) {
            z->in.size = fread(z->inbuf, 1, z->incap, z->f);
            z->in.pos = 0;
            if (z->in.size == 0) {
                if (ferror(z->f)) {
                    snprintf(z->err, z->err_len, "%s", strerror(errno));
                    errno = EIO;
                    return -1;
                }
                if (z->started && z->last != 0) {
                    snprintf(z->err, z->err_len, "zstd data: the file ends inside a frame (truncated)");
                    errno = EIO;
                    return -1;
                }
                return 0;
            }
        }
        const size_t r = ZSTD_decompressStream(z->ds, &out, &z->in);
        if (ZSTD_isError(r)) {
            snprintf(z->err, z->err_len, "zstd data: %s", ZSTD_getErrorName(r));
            errno = EIO;
            return -1;
        }
        z->last = r;
        z->started = 1;
    }
    return (ssize_t)out.pos;
}

static int zst_close(void *c) {
    zst_cookie *z = c;
    const int rc = fclose(z->f);
    ZSTD_freeDStream(z->ds);
    free(z->inbuf);
    free(z);
    return rc;
}

FILE *lj_input_open(const char *path, char *err, size_t err_len) {
    err[0] = '\0';
    switch (lj_input_compression_of(path)) {
    case LJ_INPUT_GZIP: {
        gzFile gz = gzopen(path, "rb");
        if (!gz) return NULL;
        gzbuffer(gz, 1 << 20);
        gz_cookie *g = lj_calloc(1, sizeof *g);
        g->gz = gz, g->err = err, g->err_len = err_len;
        cookie_io_functions_t io = {gz_read, NULL, NULL, gz_close};
        return fopencookie(g, "rb", io);
    }
    case LJ_INPUT_ZSTD: {
        FILE *f = fopen(path, "rb");
        if (!f) return NULL;
        zst_cookie *z = lj_calloc(1, sizeof *z);
        z->f = f, z->err = err, z->err_len = err_len;
        z->ds = ZSTD_createDStream();
        LJ_ASSERT(z->ds, "ZSTD_createDStream failed");
        ZSTD_initDStream(z->ds);
        z->incap = ZSTD_DStreamInSize();
        z->inbuf = lj_malloc(z->incap);
        z->in.src = z->inbuf;
        cookie_io_functions_t io = {zst_read, NULL, NULL, zst_close};
        return fopencookie(z, "rb", io);
    }
    default:
        return fopen(path, "rb");
    }
}
