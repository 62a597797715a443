/* mmidx_write.c: the Megatron-LM indexed dataset writer (MMIDIDX version 1, PREFIX.bin + PREFIX.idx)
 * declared in data/mmidx.h. Format: docs/reference.md "Megatron-LM indexed dataset" (source:
 * megatron/core/datasets/indexed_dataset.py, _IndexWriter.write). One sequence per document, so
 * the document indices are 0, 1, ..., N and the .idx document count is N + 1 (the length of that
 * array, as Megatron writes it).
 *
 * Where the file system allows it (Linux O_TMPFILE), both files are written unnamed and get their
 * temporary names only when complete, just before the rename: a run killed by any signal leaves
 * nothing behind. Elsewhere they are written under the temporary names from the start. The
 * fingerprint sidecar (mmidx.h) is written last, into the new version directory the two files
 * are then linked into; one link, PREFIX.current, is switched to it (lj_mmidx_writer_finish,
 * mmidx.h). */
#define _GNU_SOURCE /* O_TMPFILE, linkat */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <inttypes.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <cjson/cJSON.h>

#include "data/mmidx.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "mmidx_write.c writes the host's integers as little-endian"
#endif

enum { BUF_BYTES = 1 << 20 };

struct lj_mmidx_writer {
    char *bin_path, *idx_path, *bin_tmp, *idx_tmp, *fp_path, *fp_tmp;
    int bin_fd, idx_fd;
    int unnamed;                 /* O_TMPFILE: the files have no name until finish */
    int dtype_code;
    size_t item;                 /* bytes per token */
    unsigned char *buf;          /* pending .bin bytes */
    size_t buf_len;
    int32_t *lengths;            /* [num_docs] tokens */
    int64_t num_docs, cap_docs;
    int64_t bin_bytes;           /* bytes written to .bin so far (incl. buf) */
    int32_t eod_token;           /* recorded in the sidecar when >= 0 (lj_mmidx_writer_set_eod) */
    lj_mmidx_tokenizer tok;      /* recorded when has_tok (lj_mmidx_writer_set_tokenizer) */
    int has_tok;
};

static char *path_with(const char *prefix, const char *suffix) {
    size_t n = strlen(prefix) + strlen(suffix) + 1;
    char *p = lj_malloc(n);
    snprintf(p, n, "%s%s", prefix, suffix);
    return p;
}

static lj_status write_all(int fd, const char *path, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return lj_fail(LJ_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
    return LJ_OK;
}

/* Opens an unnamed file in the directory of `path` (O_TMPFILE), or -1 when unsupported. */
static int open_unnamed(const char *path) {
#ifdef O_TMPFILE
    char *dir = lj_strdup(path);
    char *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = '\0';
    else strcpy(dir, ".");
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0644); /* read back for the fingerprint */
    free(dir);
    return fd;
#else
    (void)path;
    return -1;
#endif
}

/* Gives the unnamed file `fd` the name `path` (replacing a stale file of that name). */
static lj_status name_unnamed(int fd, const char *path) {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    unlink(path);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) != 0)
        return lj_fail(LJ_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    return LJ_OK;
}

static lj_status flush_bin(lj_mmidx_writer *w) {
    lj_status st = write_all(w->bin_fd, w->bin_tmp, w->buf, w->buf_len);
    w->buf_len = 0;
    return st;
}

lj_status lj_mmidx_writer_open(lj_mmidx_writer **out, const char *prefix, int dtype_code) {
    LJ_ASSERT(dtype_code == LJ_MMIDX_U16 || dtype_code == LJ_MMIDX_I32, "dtype code %d", dtype_code);
    *out = NULL;
    lj_mmidx_writer *w = lj_calloc(1, sizeof *w);
    char suffix[64];
    w->bin_path = path_with(prefix, ".bin");
    w->idx_path = path_with(prefix, ".idx");
    snprintf(suffix, sizeof suffix, ".bin.tmp.%d", (int)getpid());
    w->bin_tmp = path_with(prefix, suffix);
    snprintf(suffix, sizeof suffix, ".idx.tmp.%d", (int)getpid());
    w->idx_tmp = path_with(prefix, suffix);
    w->fp_path = path_with(prefix, LJ_MMIDX_FINGERPRINT_SUFFIX);
    snprintf(suffix, sizeof suffix, "%s.tmp.%d", LJ_MMIDX_FINGERPRINT_SUFFIX, (int)getpid());
    w->fp_tmp = path_with(prefix, suffix);
    w->dtype_code = dtype_code;
    w->eod_token = -1;
    w->item = dtype_code == LJ_MMIDX_U16 ? 2 : 4;
    w->idx_fd = -1;
    w->bin_fd = open_unnamed(w->bin_tmp);
    if (w->bin_fd >= 0) {
        w->idx_fd = open_unnamed(w->idx_tmp);
        if (w->idx_fd >= 0) {
            w->unnamed = 1;
            w->buf = lj_malloc(BUF_BYTES);
            *out = w;
            return LJ_OK;
        }
        close(w->bin_fd);
    }
    w->bin_fd = open(w->bin_tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->bin_fd < 0) {
        lj_status st = lj_fail(LJ_ERR_IO, "%s: cannot create: %s", w->bin_tmp, strerror(errno));
        lj_mmidx_writer_abort(w);
        return st;
    }
    w->idx_fd = open(w->idx_tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->idx_fd < 0) {
        lj_status st = lj_fail(LJ_ERR_IO, "%s: cannot create: %s", w->idx_tmp, strerror(errno));
        lj_mmidx_writer_abort(w);
        return st;
    }
    w->buf = lj_malloc(BUF_BYTES);
    *out = w;
    return LJ_OK;
}

void lj_mmidx_writer_set_eod(lj_mmidx_writer *w, int32_t eod_token) { w->eod_token = eod_token; }

void lj_mmidx_writer_set_tokenizer(lj_mmidx_writer *w, const lj_mmidx_tokenizer *t) {
    w->tok = *t;
    w->has_tok = 1;
}

/* ", \"tokenizer\": {...}" of the sidecar (lj_mmidx_tokenizer), or "" (free the result). */
static char *tokenizer_json(const lj_mmidx_writer *w) {
    if (!w->has_tok) return lj_strdup("");
    const lj_mmidx_tokenizer *t = &w->tok;
    cJSON *o = cJSON_CreateObject();
    char h[17];
    cJSON_AddStringToObject(o, "name", t->name);
    cJSON_AddStringToObject(o, "path", t->path);
    snprintf(h, sizeof h, "%016" PRIx64, t->file_xxh3_64);
    cJSON_AddStringToObject(o, "file_xxh3_64", h);
    snprintf(h, sizeof h, "%016" PRIx64, t->ids_xxh3_64);
    cJSON_AddStringToObject(o, "ids_xxh3_64", h);
    cJSON_AddNumberToObject(o, "vocab_size", t->vocab_size);
    if (t->bos_token_id >= 0) cJSON_AddNumberToObject(o, "bos_token_id", t->bos_token_id);
    else cJSON_AddNullToObject(o, "bos_token_id");
    if (t->eos_token_id >= 0) cJSON_AddNumberToObject(o, "eos_token_id", t->eos_token_id);
    else cJSON_AddNullToObject(o, "eos_token_id");
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    const size_t n = strlen(body) + 32;
    char *out = lj_malloc(n);
    snprintf(out, n, ", \"%s\": %s", LJ_MMIDX_TOKENIZER_FIELD, body);
    free(body);
    return out;
}

lj_status lj_mmidx_writer_add(lj_mmidx_writer *w, const int32_t *tokens, int64_t n) {
    if (n < 0 || n > INT32_MAX)
        return lj_fail(LJ_ERR_ARG, "%s: a document of %lld tokens does not fit the int32 sequence length", w->idx_path,
                       (long long)n);
    int32_t max = w->dtype_code == LJ_MMIDX_U16 ? 65535 : INT32_MAX;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] > max)
            return lj_fail(LJ_ERR_ARG, "%s: token id %d (document %lld, position %lld) does not fit %s", w->bin_path,
                           tokens[i], (long long)w->num_docs, (long long)i, w->item == 2 ? "uint16" : "int32");
    if (w->num_docs == w->cap_docs) {
        w->cap_docs = w->cap_docs ? w->cap_docs * 2 : 1024;
        w->lengths = lj_realloc(w->lengths, (size_t)w->cap_docs * sizeof *w->lengths);
    }
    w->lengths[w->num_docs++] = (int32_t)n;
    for (int64_t i = 0; i < n;) {
        if (w->buf_len + w->item > BUF_BYTES) LJ_TRY(flush_bin(w));
        size_t room = (BUF_BYTES - w->buf_len) / w->item;
        int64_t k = n - i < (int64_t)room ? n - i : (int64_t)room;
        if (w->item == 4) {
            memcpy(w->buf + w->buf_len, tokens + i, (size_t)k * 4);
        } else {
            uint16_t *dst = (uint16_t *)(void *)(w->buf + w->buf_len);
            for (int64_t j = 0; j < k; j++) dst[j] = (uint16_t)tokens[i + j];
        }
        w->buf_len += (size_t)k * w->item;
        i += k;
    }
    w->bin_bytes += n * (int64_t)w->item;
    return LJ_OK;
}

/* The .idx: header, int32 lengths, int64 byte offsets, int64 document indices 0..N. */
static lj_status write_idx(lj_mmidx_writer *w) {
    unsigned char head[9 + 8 + 1 + 8 + 8];
    uint64_t version = LJ_MMIDX_VERSION, seqs = (uint64_t)w->num_docs, docs = (uint64_t)w->num_docs + 1;
    memcpy(head, LJ_MMIDX_MAGIC, 9);
    memcpy(head + 9, &version, 8);
    head[17] = (unsigned char)w->dtype_code;
    memcpy(head + 18, &seqs, 8);
    memcpy(head + 26, &docs, 8);
    LJ_TRY(write_all(w->idx_fd, w->idx_tmp, head, sizeof head));
    if (w->num_docs) LJ_TRY(write_all(w->idx_fd, w->idx_tmp, w->lengths, (size_t)w->num_docs * sizeof(int32_t)));
    enum { CHUNK = 1 << 16 };
    int64_t *chunk = lj_malloc(CHUNK * sizeof *chunk), offset = 0;
    lj_status st = LJ_OK;
    for (int64_t i = 0; i < w->num_docs && st == LJ_OK;) { /* byte offsets */
        int64_t k = 0;
        for (; k < CHUNK && i < w->num_docs; k++, i++) {
            chunk[k] = offset;
            offset += (int64_t)w->lengths[i] * (int64_t)w->item;
        }
        st = write_all(w->idx_fd, w->idx_tmp, chunk, (size_t)k * sizeof *chunk);
    }
    for (int64_t i = 0; i <= w->num_docs && st == LJ_OK;) { /* document indices */
        int64_t k = 0;
        for (; k < CHUNK && i <= w->num_docs; k++, i++) chunk[k] = i;
        st = write_all(w->idx_fd, w->idx_tmp, chunk, (size_t)k * sizeof *chunk);
    }
    free(chunk);
    return st;
}

static void fsync_dir_of(const char *path) {
    char *dir = lj_strdup(path);
    char *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = '\0';
    else strcpy(dir, ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

/* The XXH3-64 of the `size` bytes of file `fd` (mmap'd), whole or sampled (`bin`). */
static lj_status hash_file(int fd, const char *path, size_t size, int bin, uint64_t *out) {
    if (size == 0) {
        *out = bin ? lj_mmidx_bin_fingerprint(NULL, 0) : XXH3_64bits(NULL, 0);
        return LJ_OK;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return lj_fail(LJ_ERR_IO, "%s: cannot map to fingerprint it: %s", path, strerror(errno));
    *out = bin ? lj_mmidx_bin_fingerprint(map, size) : XXH3_64bits(map, size);
    munmap(map, size);
    return LJ_OK;
}

/* The sidecar PREFIX.fingerprint.json under its temporary name, fsync'd. */
static lj_status write_fingerprint(lj_mmidx_writer *w, int64_t idx_bytes) {
    uint64_t hb = 0, hi = 0;
    LJ_TRY(hash_file(w->bin_fd, w->bin_tmp, (size_t)w->bin_bytes, 1, &hb));
    LJ_TRY(hash_file(w->idx_fd, w->idx_tmp, (size_t)idx_bytes, 0, &hi));
    char eod[64] = "";
    if (w->eod_token >= 0) snprintf(eod, sizeof eod, ", \"%s\": %d", LJ_MMIDX_EOD_FIELD, (int)w->eod_token);
    char *tok = tokenizer_json(w);
    const size_t cap = 400 + strlen(tok);
    char *text = lj_malloc(cap);
    const int n = snprintf(text, cap,
                           "{\"format\": \"ljperf-dataset-fingerprint\", \"version\": 1, \"bin_bytes\": %" PRId64
                           ", \"bin_xxh3_64\": \"%016" PRIx64 "\", \"idx_bytes\": %" PRId64 ", \"idx_xxh3_64\": \"%016" PRIx64
                           "\"%s%s}\n", w->bin_bytes, hb, idx_bytes, hi, eod, tok);
    free(tok);
    int fd = open(w->fp_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(text);
        return lj_fail(LJ_ERR_IO, "%s: cannot create: %s", w->fp_tmp, strerror(errno));
    }
    lj_status st = write_all(fd, w->fp_tmp, text, (size_t)n);
    free(text);
    if (st == LJ_OK && fsync(fd) != 0) st = lj_fail(LJ_ERR_IO, "%s: cannot flush: %s", w->fp_tmp, strerror(errno));
    if (close(fd) != 0 && st == LJ_OK) st = lj_fail(LJ_ERR_IO, "%s: cannot close: %s", w->fp_tmp, strerror(errno));
    if (st != LJ_OK) unlink(w->fp_tmp);
    return st;
}

static void free_writer(lj_mmidx_writer *w) {
    free(w->bin_path);
    free(w->idx_path);
    free(w->bin_tmp);
    free(w->idx_tmp);
    free(w->fp_path);
    free(w->fp_tmp);
    free(w->buf);
    free(w->lengths);
    free(w);
}

/* ---- the install: versions and one pointer (mmidx.h) ---- */

static const char *const k_kinds[3] = {".bin", ".idx", LJ_MMIDX_FINGERPRINT_SUFFIX};

/* The names of an install of PREFIX = DIR/BASE. */
typedef struct {
    char *dir, *base;      /* DIR ("." when PREFIX has no slash), BASE */
    char *versions;        /* PREFIX.versions */
    char *current;         /* PREFIX.current */
} install_names;

static void names_init(install_names *n, const char *prefix) {
    const char *slash = strrchr(prefix, '/');
    n->base = lj_strdup(slash ? slash + 1 : prefix);
    if (slash) {
        n->dir = lj_strdup(prefix);
        n->dir[slash == prefix ? 1 : slash - prefix] = '\0';
    } else {
        n->dir = lj_strdup(".");
    }
    n->versions = path_with(prefix, ".versions");
    n->current = path_with(prefix, ".current");
}

static void names_free(install_names *n) {
    free(n->dir);
    free(n->base);
    free(n->versions);
    free(n->current);
}

/* PREFIX.versions/K/BASE<kind>. */
static char *version_file(const install_names *n, int k, const char *kind) {
    size_t len = strlen(n->versions) + strlen(n->base) + strlen(kind) + 32;
    char *p = lj_malloc(len);
    snprintf(p, len, "%s/%d/%s%s", n->versions, k, n->base, kind);
    return p;
}

static char *version_dir(const install_names *n, int k) {
    size_t len = strlen(n->versions) + 24;
    char *p = lj_malloc(len);
    snprintf(p, len, "%s/%d", n->versions, k);
    return p;
}

/* The version PREFIX.current points to, or -1 when it is not a link of ours. */
static int current_version(const install_names *n) {
    char target[4096];
    ssize_t len = readlink(n->current, target, sizeof target - 1);
    if (len <= 0) return -1;
    target[len] = '\0';
    const size_t b = strlen(n->base);
    int k = -1, end = 0;
    if (strncmp(target, n->base, b) != 0 || strncmp(target + b, ".versions/", 10) != 0) return -1;
    if (sscanf(target + b + 10, "%d%n", &k, &end) != 1 || target[b + 10 + end] != '\0' || k < 0) return -1;
    return k;
}

/* Removes version directory k (its three files; a leftover of a killed prepare may hold fewer). */
static void remove_version(const install_names *n, int k) {
    for (int i = 0; i < 3; i++) {
        char *f = version_file(n, k, k_kinds[i]);
        unlink(f);
        free(f);
    }
    char *d = version_dir(n, k);
    rmdir(d);
    free(d);
}

/* Removes every version but `keep` (what killed prepares left) and returns the next free number. */
static int sweep_versions(const install_names *n, int keep) {
    int next = keep + 1;
    DIR *d = opendir(n->versions);
    for (struct dirent *e; d && (e = readdir(d));) {
        int k = -1, end = 0;
        if (sscanf(e->d_name, "%d%n", &k, &end) != 1 || e->d_name[end] != '\0' || k < 0) continue;
        if (k != keep) remove_version(n, k);
        if (k >= next) next = k + 1;
    }
    if (d) closedir(d);
    return next;
}

/* Points `path` at `target` (a symbolic link), replacing what is there in one rename. */
static lj_status switch_link(const char *path, const char *target) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    unlink(tmp);
    if (symlink(target, tmp) != 0) return lj_fail(LJ_ERR_IO, "%s: cannot create a symbolic link: %s", tmp, strerror(errno));
    if (rename(tmp, path) != 0) {
        const int err = errno;
        unlink(tmp);
        return lj_fail(LJ_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(err));
    }
    return LJ_OK;
}

/* A dataset of an older prepare, or of Megatron's preprocess_data.py, is the regular files
 * PREFIX.bin / .idx (/ .fingerprint.json): they become version `k` by hard links (no copy),
 * PREFIX.current points to it, and PREFIX.bin ... are switched to links one at a time: each
 * names the same bytes before and after, so the old dataset stays readable throughout. */
static lj_status adopt_regular_files(const install_names *n, const char *prefix, int k, int *adopted) {
    *adopted = 0;
    struct stat sb;
    int any = 0;
    for (int i = 0; i < 2; i++) {
        char *p = path_with(prefix, k_kinds[i]);
        if (lstat(p, &sb) == 0 && !S_ISLNK(sb.st_mode)) any = 1;
        free(p);
    }
    if (!any) return LJ_OK;
    char *d = version_dir(n, k);
    lj_status st = mkdir(d, 0755) == 0 ? LJ_OK : lj_fail(LJ_ERR_IO, "%s: cannot create: %s", d, strerror(errno));
    free(d);
    for (int i = 0; i < 3 && st == LJ_OK; i++) {
        char *p = path_with(prefix, k_kinds[i]), *v = version_file(n, k, k_kinds[i]);
        if (lstat(p, &sb) == 0 && !S_ISLNK(sb.st_mode)) {
            if (!S_ISREG(sb.st_mode))
                st = lj_fail(LJ_ERR_IO, "%s: not a regular file (%s); the dataset there is left as it is and the new one "
                                        "is not installed: remove or rename it", p, S_ISDIR(sb.st_mode) ? "a directory" : "");
            else if (link(p, v) != 0)
                st = lj_fail(LJ_ERR_IO, "%s: cannot link it to %s to keep it while the new dataset is installed: %s", p, v,
                             strerror(errno));
        }
        free(p);
        free(v);
    }
    if (st != LJ_OK) {
        remove_version(n, k);
        return st;
    }
    char target[600];
    snprintf(target, sizeof target, "%s.versions/%d", n->base, k);
    st = switch_link(n->current, target);
    if (st != LJ_OK) remove_version(n, k);
    else *adopted = 1;
    return st;
}

/* PREFIX.bin, .idx, .fingerprint.json as the links BASE.current/BASE<kind>. */
static lj_status fixed_links(const install_names *n, const char *prefix) {
    for (int i = 0; i < 3; i++) {
        char target[600], have[600];
        snprintf(target, sizeof target, "%s.current/%s%s", n->base, n->base, k_kinds[i]);
        char *p = path_with(prefix, k_kinds[i]);
        struct stat sb;
        ssize_t len = readlink(p, have, sizeof have - 1);
        lj_status st = LJ_OK;
        if (len > 0 && (size_t)len == strlen(target) && memcmp(have, target, (size_t)len) == 0) {
            /* in place */
        } else if (lstat(p, &sb) == 0 && !S_ISLNK(sb.st_mode) && !S_ISREG(sb.st_mode)) {
            st = lj_fail(LJ_ERR_IO, "%s: not a regular file; the new dataset is not installed: remove or rename it", p);
        } else {
            st = switch_link(p, target);
        }
        free(p);
        if (st != LJ_OK) return st;
    }
    return LJ_OK;
}

/* Moves the finished .bin and .idx into PREFIX.versions/K/ (the sidecar is written there). */
static lj_status place_files(lj_mmidx_writer *w, const install_names *n, int k) {
    char *d = version_dir(n, k);
    lj_status st = LJ_OK;
    char *bin = version_file(n, k, ".bin"), *idx = version_file(n, k, ".idx");
    if (w->unnamed) {
        st = name_unnamed(w->bin_fd, bin);
        if (st == LJ_OK) st = name_unnamed(w->idx_fd, idx);
    } else if (st == LJ_OK) {
        if (rename(w->bin_tmp, bin) != 0) st = lj_fail(LJ_ERR_IO, "%s: cannot rename to %s: %s", w->bin_tmp, bin, strerror(errno));
        else if (rename(w->idx_tmp, idx) != 0)
            st = lj_fail(LJ_ERR_IO, "%s: cannot rename to %s: %s", w->idx_tmp, idx, strerror(errno));
    }
    if (st == LJ_OK) {
        int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0) {
            fsync(fd);
            close(fd);
        }
    }
    free(d);
    free(bin);
    free(idx);
    return st;
}

lj_status lj_mmidx_writer_finish(lj_mmidx_writer *w) {
    lj_status st = flush_bin(w);
    if (st == LJ_OK) st = write_idx(w);
    if (st == LJ_OK && fsync(w->bin_fd) != 0) st = lj_fail(LJ_ERR_IO, "%s: cannot flush: %s", w->bin_tmp, strerror(errno));
    if (st == LJ_OK && fsync(w->idx_fd) != 0) st = lj_fail(LJ_ERR_IO, "%s: cannot flush: %s", w->idx_tmp, strerror(errno));
    if (st != LJ_OK) {
        lj_mmidx_writer_abort(w);
        return st;
    }
    /* PREFIX without its suffix: bin_path is PREFIX.bin */
    char *prefix = lj_strdup(w->bin_path);
    prefix[strlen(prefix) - 4] = '\0';
    install_names n;
    names_init(&n, prefix);
    if (mkdir(n.versions, 0755) != 0 && errno != EEXIST)
        st = lj_fail(LJ_ERR_IO, "%s: cannot create: %s", n.versions, strerror(errno));
    const int old = current_version(&n);
    int k = st == LJ_OK ? sweep_versions(&n, old) : 0;
    if (st == LJ_OK) { /* the new version's directory; the sidecar is written straight into it */
        char *d = version_dir(&n, k);
        if (mkdir(d, 0755) != 0) st = lj_fail(LJ_ERR_IO, "%s: cannot create: %s", d, strerror(errno));
        free(d);
        free(w->fp_tmp);
        w->fp_tmp = version_file(&n, k, k_kinds[2]);
    }
    if (st == LJ_OK) {
        struct stat sb;
        st = fstat(w->idx_fd, &sb) == 0 ? write_fingerprint(w, (int64_t)sb.st_size)
                                         : lj_fail(LJ_ERR_IO, "%s: cannot stat: %s", w->idx_tmp, strerror(errno));
    }
    int adopted = 0;
    if (st == LJ_OK) st = place_files(w, &n, k);
    if (st == LJ_OK) {
        w->unnamed = 0; /* named inside the version directory now */
        st = adopt_regular_files(&n, prefix, k + 1, &adopted);
    }
    if (st == LJ_OK) st = fixed_links(&n, prefix);
    /* the one step that replaces the dataset: before it the old one is read, after it the new */
    char target[600];
    snprintf(target, sizeof target, "%s.versions/%d", n.base, k);
    if (st == LJ_OK) st = switch_link(n.current, target);
    if (st == LJ_OK) {
        fsync_dir_of(prefix);
        if (adopted) remove_version(&n, k + 1);
        if (old >= 0) remove_version(&n, old);
    } else {
        remove_version(&n, k); /* the new dataset; the old one is untouched */
    }
    int a = close(w->bin_fd), b = close(w->idx_fd);
    w->bin_fd = w->idx_fd = -1;
    if (st == LJ_OK && (a != 0 || b != 0)) st = lj_fail(LJ_ERR_IO, "%s: cannot close: %s", w->bin_path, strerror(errno));
    if (!w->unnamed) { /* the temporaries are in the version directory or gone */
        unlink(w->bin_tmp);
        unlink(w->idx_tmp);
    }
    names_free(&n);
    free(prefix);
    free_writer(w);
    return st;
}

void lj_mmidx_writer_abort(lj_mmidx_writer *w) {
    if (!w) return;
    if (w->bin_fd >= 0) close(w->bin_fd);
    if (w->idx_fd >= 0) close(w->idx_fd);
    if (w->bin_tmp && !w->unnamed) unlink(w->bin_tmp);
    if (w->idx_tmp && !w->unnamed) unlink(w->idx_tmp);
    if (w->fp_tmp) unlink(w->fp_tmp);
    free_writer(w);
}
