/* sharded.c: the sharded training-state format (sharded.h): per-rank shard files, the metadata,
 * and reading byte ranges back with their checksums. */
#include "checkpoint/sharded.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "base/worker.h"

size_t lj_ckpt_staging_bytes(void) {
    const char *env = getenv("LJPERF_CKPT_STAGING_BYTES");
    if (env && *env) {
        char *end;
        const unsigned long long v = strtoull(env, &end, 10);
        if (*end == '\0' && v >= 4096) return (size_t)v;
        lj_log_warn("LJPERF_CKPT_STAGING_BYTES=%s is not a byte count >= 4096: using %u", env, LJ_CKPT_STAGING_BYTES);
    }
    return LJ_CKPT_STAGING_BYTES;
}

static void hex64(uint64_t h, char out[17]) { snprintf(out, 17, "%016" PRIx64, h); }

static int parse_hex64(const char *s, uint64_t *h) {
    if (!s || strlen(s) != 16) return 0;
    char *end;
    *h = strtoull(s, &end, 16);
    return *end == '\0';
}

/* ---- the writer -------------------------------------------------------------------------- */

static int write_full(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        const ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The writer thread (base/worker.h) and the hash state of the slice it is on, which only the
 * jobs touch; `collected`: chunks whose digest the caller has copied into the slices. */
enum { WRITE_FAILED = 1, FETCH_FAILED = 2 }; /* the worker's error codes: whose message to report */
struct lj_shard_pipe {
    lj_worker worker;
    XXH3_state_t *hash;
    int64_t collected;
};

/* The job: hashes and writes chunk `job` (half job % 2). After a failure the chunks are hashed
 * but not written; the first failed write leaves its message in w->write_error. */
static int write_chunk(void *ctx, int64_t job, int failed) {
    lj_shard_writer *w = ctx;
    lj_shard_chunk *c = &w->chunks[job % 2];
    struct lj_shard_pipe *p = w->pipe;
    if (c->first) XXH3_64bits_reset(p->hash);
    XXH3_64bits_update(p->hash, c->buf, c->bytes);
    int e = 0;
    if (!failed && write_full(w->fd, c->buf, c->bytes) != 0) {
        snprintf(w->write_error, sizeof w->write_error, "%s: write failed: %s", w->path, strerror(errno));
        e = WRITE_FAILED;
    }
    if (c->last) c->digest = XXH3_64bits_digest(p->hash);
    return e;
}

/* Waits until at most `pending` chunks are the writer thread's, then copies the digests of the
 * finished slices into w->slices. NULL, or the message of the first failure. */
static const char *writer_wait(lj_shard_writer *w, int64_t pending) {
    struct lj_shard_pipe *p = w->pipe;
    int64_t done;
    const int e = lj_worker_wait(&p->worker, pending, &done);
    for (; p->collected < done; p->collected++) {
        const lj_shard_chunk *c = &w->chunks[p->collected % 2];
        if (c->last) w->slices[c->slice].xxh3 = c->digest;
    }
    return e == 0 ? NULL : e == FETCH_FAILED ? w->error : w->write_error;
}

lj_status lj_shard_writer_open(lj_shard_writer *w, const char *dir, int rank, int world, size_t staging_bytes,
                               lj_host_alloc_fn host_alloc, lj_host_free_fn host_free) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    w->rank = rank;
    w->world = world;
    LJ_TRY(lj_path_format(w->dir, "%s", dir));
    LJ_TRY(lj_path_format(w->path, "%s/" LJ_CKPT_SHARD_DATA_FMT, dir, rank, world));
    /* two halves, together within staging_bytes (one value each at the least) */
    w->staging_numel = (int64_t)(staging_bytes / sizeof(float) / 2);
    if (w->staging_numel < 1) w->staging_numel = 1;
    const size_t bytes = 2 * (size_t)w->staging_numel * sizeof(float);
    void *pinned = NULL;
    if (host_alloc && host_alloc(&pinned, bytes) != LJ_OK) pinned = NULL; /* pageable, then: slower, as right */
    w->staging = pinned ? pinned : lj_malloc(bytes);
    w->staging_free = pinned ? host_free : NULL;
    w->chunks[0].buf = w->staging;
    w->chunks[1].buf = w->staging + w->staging_numel;
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) return lj_fail(LJ_ERR_IO, "%s: cannot create: %s", w->path, strerror(errno));
    struct lj_shard_pipe *p = lj_calloc(1, sizeof *p);
    p->hash = XXH3_createState();
    LJ_ASSERT(p->hash != NULL, "XXH3_createState");
    w->pipe = p;
    lj_worker_start(&p->worker, write_chunk, w);
    return LJ_OK;
}

lj_status lj_shard_writer_add(lj_shard_writer *w, const char *tensor, const char *param, int64_t offset, int64_t numel,
                              lj_dtype dtype, lj_shard_fetch_fn fetch, void *ctx, int64_t src_offset) {
    LJ_ASSERT(w->fd >= 0 && w->pipe && numel >= 0 && (dtype == LJ_DTYPE_F32 || dtype == LJ_DTYPE_BF16));
    const size_t es = lj_dtype_size(dtype);
    const char *failed = writer_wait(w, 2);
    if (failed) return lj_fail(LJ_ERR_IO, "%s", failed); /* an earlier write failed */
    if (w->count == w->cap) w->slices = lj_realloc(w->slices, (size_t)(w->cap = w->cap ? 2 * w->cap : 64) * sizeof *w->slices);
    const int slice = w->count++;
    lj_shard_slice *sl = &w->slices[slice];
    sl->tensor = lj_strdup(tensor);
    sl->param = param ? lj_strdup(param) : NULL;
    sl->file = w->rank;
    sl->dtype = dtype;
    sl->offset = offset;
    sl->numel = numel;
    sl->byte_offset = w->bytes;
    sl->xxh3 = 0; /* writer_wait sets it once the slice's last chunk is hashed */
    w->bytes += (uint64_t)numel * es;
    int64_t k = 0;
    do { /* one chunk at least: an empty slice has a checksum too */
        const int64_t n = numel - k < w->staging_numel ? numel - k : w->staging_numel;
        if ((failed = writer_wait(w, 1))) return lj_fail(LJ_ERR_IO, "%s", failed); /* a half is free */
        lj_shard_chunk *c = &w->chunks[w->pipe->worker.queued % 2];
        if (n > 0) {
            const lj_status s = fetch(ctx, src_offset + k, n, c->buf);
            if (s != LJ_OK) {
                if (lj_worker_fail(&w->pipe->worker, FETCH_FAILED))
                    snprintf(w->error, sizeof w->error, "%s: not written: the fetch of tensor '%s' failed", w->path, tensor);
                return s;
            }
        }
        c->n = n;
        c->bytes = (size_t)n * es;
        c->slice = slice;
        c->first = k == 0;
        c->last = k + n >= numel;
        lj_worker_submit(&w->pipe->worker);
        k += n;
        w->staged += (uint64_t)n * es;
        if (w->progress) lj_progress_update(w->progress, w->staged);
    } while (k < numel);
    return LJ_OK;
}

static cJSON *json_i64(int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return cJSON_CreateRaw(buf);
}

static cJSON *slice_json(const lj_shard_slice *sl) {
    cJSON *o = cJSON_CreateObject();
    char hex[17];
    hex64(sl->xxh3, hex);
    cJSON_AddStringToObject(o, "tensor", sl->tensor);
    cJSON_AddStringToObject(o, "dtype", lj_dtype_name(sl->dtype));
    cJSON_AddItemToObject(o, "file", json_i64(sl->file));
    cJSON_AddItemToObject(o, "offset", json_i64(sl->offset));
    cJSON_AddItemToObject(o, "numel", json_i64(sl->numel));
    cJSON_AddItemToObject(o, "byte_offset", json_i64((int64_t)sl->byte_offset));
    cJSON_AddStringToObject(o, "xxh3_64", hex);
    if (sl->param) cJSON_AddStringToObject(o, "param", sl->param);
    return o;
}

lj_status lj_shard_writer_close(lj_shard_writer *w) {
    LJ_ASSERT(w->fd >= 0 && w->pipe);
    lj_status s = LJ_OK;
    const char *failed = writer_wait(w, 0);
    if (failed) s = lj_fail(LJ_ERR_IO, "%s", failed);
    lj_worker_stop(&w->pipe->worker);
    if (s == LJ_OK && fsync(w->fd) != 0) s = lj_fail(LJ_ERR_IO, "%s: fsync failed: %s", w->path, strerror(errno));
    if (close(w->fd) != 0 && s == LJ_OK) s = lj_fail(LJ_ERR_IO, "%s: close failed: %s", w->path, strerror(errno));
    w->fd = -1;
    if (s != LJ_OK) return s;
    if (w->progress) lj_progress_end(w->progress); /* after the fsync: the disk's rate */
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "rank", json_i64(w->rank));
    cJSON_AddItemToObject(root, "bytes", json_i64((int64_t)w->bytes));
    cJSON *arr = cJSON_AddArrayToObject(root, "slices");
    for (int i = 0; i < w->count; i++) cJSON_AddItemToArray(arr, slice_json(&w->slices[i]));
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    char path[LJ_PATH_MAX];
    s = lj_path_format(path, "%s/" LJ_CKPT_SHARD_INDEX_FMT, w->dir, w->rank, w->world);
    if (s == LJ_OK) s = lj_file_write_atomic(path, text, strlen(text));
    free(text);
    return s;
}

static void slices_free(lj_shard_slice *sl, int n) {
    for (int i = 0; i < n; i++) {
        free(sl[i].tensor);
        free(sl[i].param);
    }
    free(sl);
}

void lj_shard_writer_free(lj_shard_writer *w) {
    if (w->pipe) {
        lj_worker_stop(&w->pipe->worker);
        XXH3_freeState(w->pipe->hash);
        free(w->pipe);
    }
    if (w->fd >= 0) close(w->fd);
    slices_free(w->slices, w->count);
    if (w->staging_free) w->staging_free(w->staging);
    else free(w->staging);
    memset(w, 0, sizeof *w);
    w->fd = -1;
}

/* ---- the metadata ------------------------------------------------------------------------- */

static int json_int64(const cJSON *it, int64_t *v) {
    if (!cJSON_IsNumber(it) && !cJSON_IsRaw(it)) return 0;
    if (cJSON_IsNumber(it)) {
        if (it->valuedouble < 0 || it->valuedouble != (double)(int64_t)it->valuedouble) return 0;
        *v = (int64_t)it->valuedouble;
        return 1;
    }
    char *end;
    *v = strtoll(it->valuestring, &end, 10);
    return *end == '\0' && *v >= 0;
}

/* "F32" or "BF16" (the dtypes the format stores), into *dt; 0 for anything else. */
static int parse_dtype(const cJSON *it, lj_dtype *dt) {
    if (!cJSON_IsString(it)) return 0;
    if (strcmp(it->valuestring, "F32") == 0) *dt = LJ_DTYPE_F32;
    else if (strcmp(it->valuestring, "BF16") == 0) *dt = LJ_DTYPE_BF16;
    else return 0;
    return 1;
}

/* Parses one slice object (of `file` when it carries no "tensor"/"file" itself). */
static lj_status parse_slice(const cJSON *o, const char *path, const char *tensor, lj_shard_slice *sl) {
    memset(sl, 0, sizeof *sl);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tensor");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "param");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "xxh3_64");
    int64_t file = 0, off = 0, n = 0, boff = 0;
    if (!tensor && !cJSON_IsString(t)) return lj_fail(LJ_ERR_FORMAT, "%s: a slice has no field 'tensor'", path);
    const char *name = tensor ? tensor : t->valuestring;
    if (!json_int64(cJSON_GetObjectItemCaseSensitive(o, "file"), &file) ||
        !json_int64(cJSON_GetObjectItemCaseSensitive(o, "offset"), &off) ||
        !json_int64(cJSON_GetObjectItemCaseSensitive(o, "numel"), &n) ||
        !json_int64(cJSON_GetObjectItemCaseSensitive(o, "byte_offset"), &boff))
        return lj_fail(LJ_ERR_FORMAT, "%s: a slice of tensor '%s' lacks a non-negative integer 'file', 'offset', "
                                      "'numel' or 'byte_offset'", path, name);
    if (!cJSON_IsString(h) || !parse_hex64(h->valuestring, &sl->xxh3))
        return lj_fail(LJ_ERR_FORMAT, "%s: a slice of tensor '%s' has no 16-digit 'xxh3_64'", path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "dtype");
    sl->dtype = LJ_DTYPE_F32;
    if (dt && !parse_dtype(dt, &sl->dtype))
        return lj_fail(LJ_ERR_FORMAT, "%s: a slice of tensor '%s': field 'dtype' is not \"F32\" or \"BF16\"", path, name);
    if (file > 0x7fffffff || n > (INT64_MAX / 8) || off > INT64_MAX - n)
        return lj_fail(LJ_ERR_FORMAT, "%s: a slice of tensor '%s' is out of range", path, name);
    sl->tensor = lj_strdup(name);
    sl->param = cJSON_IsString(p) ? lj_strdup(p->valuestring) : NULL;
    sl->file = (int)file;
    sl->offset = off;
    sl->numel = n;
    sl->byte_offset = (uint64_t)boff;
    return LJ_OK;
}

static int cmp_slice(const void *a, const void *b) {
    const lj_shard_slice *x = a, *y = b;
    const int t = strcmp(x->tensor, y->tensor);
    if (t) return t;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

lj_status lj_sharded_write_metadata(const char *dir, int iteration, int world, int zero_stage, const char *partition,
                                    const char *state_json) {
    lj_shard_slice *all = NULL;
    int n = 0, cap = 0;
    lj_status s = LJ_OK;
    cJSON *files = cJSON_CreateArray();
    char path[LJ_PATH_MAX];
    for (int r = 0; r < world && s == LJ_OK; r++) {
        s = lj_path_format(path, "%s/" LJ_CKPT_SHARD_INDEX_FMT, dir, r, world);
        char *text = NULL;
        if (s == LJ_OK) s = lj_file_read_all(path, &text, NULL);
        cJSON *idx = s == LJ_OK ? cJSON_Parse(text) : NULL;
        free(text);
        if (s == LJ_OK && !idx) s = lj_fail(LJ_ERR_FORMAT, "%s: not valid JSON", path);
        int64_t bytes = 0;
        if (s == LJ_OK && !json_int64(cJSON_GetObjectItemCaseSensitive(idx, "bytes"), &bytes))
            s = lj_fail(LJ_ERR_FORMAT, "%s: no field 'bytes'", path);
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(idx, "slices"), *o;
        cJSON_ArrayForEach(o, arr) {
            if (s != LJ_OK) break;
            if (n == cap) all = lj_realloc(all, (size_t)(cap = cap ? 2 * cap : 256) * sizeof *all);
            s = parse_slice(o, path, NULL, &all[n]);
            if (s == LJ_OK && all[n].file != r) s = lj_fail(LJ_ERR_FORMAT, "%s: a slice names file %d", path, all[n].file);
            if (s == LJ_OK) n++;
        }
        if (s == LJ_OK) {
            char name[64];
            snprintf(name, sizeof name, LJ_CKPT_SHARD_DATA_FMT, r, world);
            cJSON *f = cJSON_CreateObject();
            cJSON_AddStringToObject(f, "name", name);
            cJSON_AddItemToObject(f, "bytes", json_i64(bytes));
            cJSON_AddItemToArray(files, f);
        }
        cJSON_Delete(idx);
    }
    if (s == LJ_OK && n > 1) qsort(all, (size_t)n, sizeof *all, cmp_slice);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", LJ_CKPT_SHARDED_FORMAT);
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddNumberToObject(root, "iteration", iteration);
    cJSON_AddNumberToObject(root, "world_size", world);
    cJSON_AddNumberToObject(root, "zero_stage", zero_stage);
    cJSON_AddStringToObject(root, "partition", partition);
    cJSON_AddItemToObject(root, "files", files);
    cJSON *tensors = cJSON_AddObjectToObject(root, "tensors");
    for (int i = 0; i < n && s == LJ_OK;) {
        int j = i;
        int64_t covered = 0;
        for (; j < n && strcmp(all[j].tensor, all[i].tensor) == 0; j++) {
            if (all[j].dtype != all[i].dtype && s == LJ_OK)
                s = lj_fail(LJ_ERR_FORMAT, "%s: the slices of tensor '%s' are stored as both %s and %s", dir,
                            all[i].tensor, lj_dtype_name(all[i].dtype), lj_dtype_name(all[j].dtype));
            if (all[j].offset != covered)
                s = lj_fail(LJ_ERR_FORMAT, "%s: the slices of tensor '%s' do not cover it once (element %" PRId64
                                           " is %s)", dir, all[i].tensor, covered < all[j].offset ? covered : all[j].offset,
                            covered < all[j].offset ? "missing" : "written twice");
            covered = all[j].offset + all[j].numel;
        }
        cJSON *t = cJSON_AddObjectToObject(tensors, all[i].tensor);
        cJSON_AddStringToObject(t, "dtype", lj_dtype_name(all[i].dtype));
        cJSON *shape = cJSON_AddArrayToObject(t, "shape");
        cJSON_AddItemToArray(shape, json_i64(covered));
        cJSON *arr = cJSON_AddArrayToObject(t, "slices");
        for (int k = i; k < j; k++) {
            cJSON *o = slice_json(&all[k]);
            cJSON_DeleteItemFromObjectCaseSensitive(o, "tensor");
            cJSON_DeleteItemFromObjectCaseSensitive(o, "dtype"); /* the tensor's */
            cJSON_AddItemToArray(arr, o);
        }
        i = j;
    }
    char hex[17];
    hex64(XXH3_64bits(state_json, strlen(state_json)), hex);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "state.json"), "xxh3_64", hex);
    if (s == LJ_OK) {
        char *text = cJSON_Print(root);
        s = lj_path_join(path, dir, LJ_CKPT_METADATA_FILE);
        if (s == LJ_OK) s = lj_file_write_atomic(path, text, strlen(text));
        free(text);
    }
    cJSON_Delete(root);
    slices_free(all, n);
    for (int r = 0; r < world && s == LJ_OK; r++) {
        if (lj_path_format(path, "%s/" LJ_CKPT_SHARD_INDEX_FMT, dir, r, world) == LJ_OK) unlink(path);
    }
    return s;
}

/* ---- the reader --------------------------------------------------------------------------- */

int lj_sharded_present(const char *dir) {
    char path[LJ_PATH_MAX];
    struct stat sb;
    return lj_path_join(path, dir, LJ_CKPT_METADATA_FILE) == LJ_OK && stat(path, &sb) == 0;
}

lj_status lj_sharded_check_metadata(const char *dir) {
    if (lj_sharded_present(dir)) return LJ_OK;
    DIR *d = opendir(dir);
    char shard[256] = "";
    for (struct dirent *e; d && (e = readdir(d)) && !shard[0];) {
        int r, w, n = 0;
        if (sscanf(e->d_name, "shard_%5d_of_%5d.bin%n", &r, &w, &n) == 2 && n > 0 && e->d_name[n] == '\0')
            snprintf(shard, sizeof shard, "%s", e->d_name);
    }
    if (d) closedir(d);
    if (!shard[0]) return LJ_OK;
    return lj_fail(LJ_ERR_FORMAT, "%s/%s is missing: the sharded checkpoint's shard files (%s, ...) cannot be read "
                                  "without it (it says which file holds which slice of each tensor, with its checksum); "
                                  "restore it or resume from another iteration", dir, LJ_CKPT_METADATA_FILE, shard);
}

void lj_sharded_close(lj_sharded *c) {
    for (int i = 0; i < c->num_files; i++) {
        free(c->files ? c->files[i] : NULL);
        if (c->fds && c->fds[i] >= 0) close(c->fds[i]);
    }
    free(c->files);
    free(c->fds);
    for (int i = 0; i < c->num_tensors; i++) {
        free(c->tensors[i].name);
        slices_free(c->tensors[i].slices, c->tensors[i].count);
    }
    free(c->tensors);
    memset(c, 0, sizeof *c);
}

/* One slice's bytes in its file, for check_tiling. */
typedef struct {
    int file;
    uint64_t begin, end;
    const char *tensor;
} byte_range;

static int cmp_range(const void *a, const void *b) {
    const byte_range *x = a, *y = b;
    if (x->file != y->file) return x->file - y->file;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

/* The writer puts each file's slices back to back: together they tile its bytes exactly. A
 * dtype or a shape edited in the metadata breaks that, and is reported here by field rather
 * than later as a corrupted slice. */
static lj_status check_tiling(const lj_sharded *c, const char *p, const uint64_t *file_bytes) {
    int n = 0;
    for (int i = 0; i < c->num_tensors; i++) n += c->tensors[i].count;
    byte_range *r = lj_malloc((size_t)(n > 0 ? n : 1) * sizeof *r);
    int k = 0;
    for (int i = 0; i < c->num_tensors; i++)
        for (int j = 0; j < c->tensors[i].count; j++) {
            const lj_shard_slice *sl = &c->tensors[i].slices[j];
            r[k++] = (byte_range){sl->file, sl->byte_offset,
                                  sl->byte_offset + (uint64_t)sl->numel * lj_dtype_size(c->tensors[i].dtype),
                                  c->tensors[i].name};
        }
    qsort(r, (size_t)n, sizeof *r, cmp_range);
    lj_status s = LJ_OK;
    for (int f = 0, i = 0; f < c->num_files && s == LJ_OK; f++) {
        uint64_t at = 0;
        for (; i < n && r[i].file == f && s == LJ_OK; i++) {
            if (r[i].begin != at)
                s = lj_fail(LJ_ERR_FORMAT, "%s: the slices of %s do not tile it: byte %" PRIu64 " is %s (at tensor '%s': "
                                           "a 'dtype' or 'shape' that does not match the file?)",
                            p, c->files[f], r[i].begin < at ? r[i].begin : at,
                            r[i].begin < at ? "in two slices" : "in none", r[i].tensor);
            at = r[i].end;
        }
        if (s == LJ_OK && at != file_bytes[f])
            s = lj_fail(LJ_ERR_FORMAT, "%s: the slices of %s hold %" PRIu64 " bytes, the file %" PRIu64
                                       " (a 'dtype' or 'shape' that does not match the file?)",
                        p, c->files[f], at, file_bytes[f]);
    }
    free(r);
    return s;
}

static lj_status parse_metadata(lj_sharded *c, const cJSON *root, uint64_t **file_bytes) {
    const char *p = c->meta_path;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, LJ_CKPT_SHARDED_FORMAT) != 0)
        return lj_fail(LJ_ERR_FORMAT, "%s: field 'format' is not \"%s\"", p, LJ_CKPT_SHARDED_FORMAT);
    if (!cJSON_IsNumber(ver) || ver->valueint != 1)
        return lj_fail(LJ_ERR_FORMAT, "%s: field 'version' is not 1 (a checkpoint of a newer ljperf?)", p);
    const struct { const char *key; int *dst; } ints[] = {
        {"iteration", &c->iteration}, {"world_size", &c->world_size}, {"zero_stage", &c->zero_stage}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, ints[i].key);
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 0x7fffffff)
            return lj_fail(LJ_ERR_FORMAT, "%s: field '%s' is not a non-negative integer", p, ints[i].key);
        *ints[i].dst = it->valueint;
    }
    const cJSON *part = cJSON_GetObjectItemCaseSensitive(root, "partition");
    snprintf(c->partition, sizeof c->partition, "%s", cJSON_IsString(part) ? part->valuestring : "?");
    const cJSON *sj = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "state.json"), "xxh3_64");
    if (cJSON_IsString(sj)) snprintf(c->state_json_xxh3, sizeof c->state_json_xxh3, "%s", sj->valuestring);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files"), *f;
    if (!cJSON_IsArray(files) || cJSON_GetArraySize(files) < 1)
        return lj_fail(LJ_ERR_FORMAT, "%s: field 'files' is not a list of shard files", p);
    c->num_files = cJSON_GetArraySize(files);
    c->files = lj_calloc((size_t)c->num_files, sizeof(char *));
    c->fds = lj_malloc((size_t)c->num_files * sizeof(int));
    *file_bytes = lj_calloc((size_t)c->num_files, sizeof(uint64_t));
    for (int i = 0; i < c->num_files; i++) c->fds[i] = -1;
    int i = 0;
    cJSON_ArrayForEach(f, files) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        int64_t bytes;
        if (!cJSON_IsString(name) || strchr(name->valuestring, '/') || !name->valuestring[0] ||
            !json_int64(cJSON_GetObjectItemCaseSensitive(f, "bytes"), &bytes))
            return lj_fail(LJ_ERR_FORMAT, "%s: files[%d] needs a plain file 'name' and its 'bytes'", p, i);
        c->files[i] = lj_strdup(name->valuestring);
        (*file_bytes)[i++] = (uint64_t)bytes;
    }
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(root, "tensors"), *t;
    if (!cJSON_IsObject(tensors)) return lj_fail(LJ_ERR_FORMAT, "%s: field 'tensors' is missing", p);
    c->num_tensors = cJSON_GetArraySize(tensors);
    c->tensors = lj_calloc((size_t)(c->num_tensors ? c->num_tensors : 1), sizeof *c->tensors);
    int k = 0;
    cJSON_ArrayForEach(t, tensors) {
        lj_sharded_tensor *st = &c->tensors[k++];
        st->name = lj_strdup(t->string);
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(t, "dtype");
        if (!parse_dtype(dtype, &st->dtype))
            return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': dtype is not \"F32\" or \"BF16\"", p, st->name);
        if (st->dtype != LJ_DTYPE_F32 && (!strcmp(st->name, "master") || !strcmp(st->name, "fp8.state")))
            return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': dtype is \"%s\"; the format keeps it as \"F32\"", p, st->name,
                           lj_dtype_name(st->dtype));
        const size_t es = lj_dtype_size(st->dtype);
        if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != 1 || !json_int64(shape->child, &st->numel))
            return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': shape is not [numel]", p, st->name);
        const cJSON *slices = cJSON_GetObjectItemCaseSensitive(t, "slices"), *o;
        st->slices = lj_calloc((size_t)(cJSON_GetArraySize(slices) + 1), sizeof *st->slices);
        int64_t covered = 0;
        cJSON_ArrayForEach(o, slices) {
            lj_shard_slice *sl = &st->slices[st->count];
            LJ_TRY(parse_slice(o, p, st->name, sl));
            st->count++;
            if (cJSON_GetObjectItemCaseSensitive(o, "dtype") && sl->dtype != st->dtype)
                return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': a slice's dtype \"%s\" is not the tensor's \"%s\"", p,
                               st->name, lj_dtype_name(sl->dtype), lj_dtype_name(st->dtype));
            sl->dtype = st->dtype;
            if (sl->file >= c->num_files)
                return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': a slice names file %d of %d", p, st->name, sl->file,
                               c->num_files);
            if (sl->offset != covered)
                return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': the slices do not cover it in order (element %" PRId64 ")",
                               p, st->name, covered);
            if (sl->byte_offset > (*file_bytes)[sl->file] ||
                (uint64_t)sl->numel * es > (*file_bytes)[sl->file] - sl->byte_offset)
                return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': slice [%" PRId64 ", %" PRId64 ") lies beyond the %" PRIu64
                                              " bytes of %s", p, st->name, sl->offset, sl->offset + sl->numel,
                               (*file_bytes)[sl->file], c->files[sl->file]);
            covered += sl->numel;
        }
        if (covered != st->numel)
            return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': its slices hold %" PRId64 " elements, its shape %" PRId64, p,
                           st->name, covered, st->numel);
    }
    return check_tiling(c, p, *file_bytes);
}

lj_status lj_sharded_open(lj_sharded *c, const char *dir) {
    memset(c, 0, sizeof *c);
    LJ_TRY(lj_path_format(c->dir, "%s", dir));
    LJ_TRY(lj_path_join(c->meta_path, dir, LJ_CKPT_METADATA_FILE));
    char *text = NULL;
    LJ_TRY(lj_file_read_all(c->meta_path, &text, NULL));
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return lj_fail(LJ_ERR_FORMAT, "%s: not valid JSON", c->meta_path);
    uint64_t *bytes = NULL;
    lj_status s = parse_metadata(c, root, &bytes);
    cJSON_Delete(root);
    for (int i = 0; i < c->num_files && s == LJ_OK; i++) {
        char path[LJ_PATH_MAX];
        s = lj_path_join(path, dir, c->files[i]);
        if (s != LJ_OK) break;
        c->fds[i] = open(path, O_RDONLY | O_CLOEXEC);
        struct stat sb;
        if (c->fds[i] < 0) s = lj_fail(LJ_ERR_IO, "%s: cannot open: %s (a shard file of this checkpoint)", path, strerror(errno));
        else if (fstat(c->fds[i], &sb) != 0 || (uint64_t)sb.st_size != bytes[i])
            s = lj_fail(LJ_ERR_FORMAT, "%s: %lld bytes, %s records %" PRIu64 " (a truncated or replaced shard file)", path,
                        (long long)sb.st_size, LJ_CKPT_METADATA_FILE, bytes[i]);
    }
    free(bytes);
    if (s != LJ_OK) lj_sharded_close(c);
    return s;
}

const lj_sharded_tensor *lj_sharded_find(const lj_sharded *c, const char *name) {
    for (int i = 0; i < c->num_tensors; i++)
        if (strcmp(c->tensors[i].name, name) == 0) return &c->tensors[i];
    return NULL;
}

static lj_status pread_full(const lj_sharded *c, int file, void *dst, size_t n, uint64_t at) {
    char *p = dst;
    while (n > 0) {
        const ssize_t got = pread(c->fds[file], p, n, (off_t)at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            return lj_fail(LJ_ERR_IO, "%s/%s: read at byte %" PRIu64 " failed: %s", c->dir, c->files[file], at,
                           got < 0 ? strerror(errno) : "end of file");
        p += got;
        n -= (size_t)got;
        at += (uint64_t)got;
    }
    return LJ_OK;
}

/* n bf16 values at the start of buf widened in place to n f32 (exactly), from the last down:
 * f32 i covers bf16 2i and 2i+1, both read already for i > 0, and i itself for i = 0. */
static void widen_bf16(float *buf, int64_t n) {
    const uint16_t *h = (const uint16_t *)buf;
    for (int64_t i = n - 1; i >= 0; i--) buf[i] = lj_bf16_to_f32(h[i]);
}

/* One chunk the reader thread read (and hashed) for the caller's sink. */
typedef struct {
    float *buf;
    int req;              /* the request it belongs to */
    int64_t sink_at, n;   /* hand buf[skip, skip + n) to the sink at sink_at of the request */
    int64_t skip;
    int bad_slice;        /* >= 0: the slice (of the request's tensor) whose checksum fails after this chunk */
    uint64_t digest;      /* the failing slice's XXH3-64 */
    int failed;           /* the read failed: `error` says how */
    char error[2048];
} read_chunk;

typedef struct {
    const lj_sharded *c;
    const lj_shard_request *reqs;
    int nreq, verify;
    read_chunk chunks[2];
    int64_t half;         /* f32 per chunk buffer */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t produced, consumed; /* chunks [consumed, produced) wait for the sink */
    int finished, stop;
    lj_shard_sink_fn inline_sink; /* non-NULL: no thread; the caller reads and sinks each chunk */
    lj_status inline_status;
} read_pipe;

static lj_status consume_chunk(const lj_sharded *c, const lj_shard_request *reqs, const read_chunk *ch,
                               lj_shard_sink_fn sink);

/* The index of the first slice of t that ends after `offset`. */
static int first_slice(const lj_sharded_tensor *t, int64_t offset) {
    int lo = 0, hi = t->count;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (t->slices[mid].offset + t->slices[mid].numel <= offset) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Waits for a free chunk buffer (the reader thread); NULL when told to stop. */
static read_chunk *reader_slot(read_pipe *rp) {
    if (rp->inline_sink) return rp->stop ? NULL : &rp->chunks[0];
    pthread_mutex_lock(&rp->mu);
    while (rp->produced - rp->consumed >= 2 && !rp->stop) pthread_cond_wait(&rp->cv, &rp->mu);
    read_chunk *ch = rp->stop ? NULL : &rp->chunks[rp->produced % 2];
    pthread_mutex_unlock(&rp->mu);
    return ch;
}

static void reader_publish(read_pipe *rp, int finished) {
    if (rp->inline_sink) {
        if (!finished) rp->inline_status = consume_chunk(rp->c, rp->reqs, &rp->chunks[0], rp->inline_sink);
        rp->stop = rp->inline_status != LJ_OK;
        return;
    }
    pthread_mutex_lock(&rp->mu);
    if (finished) rp->finished = 1;
    else rp->produced++;
    pthread_cond_broadcast(&rp->cv);
    pthread_mutex_unlock(&rp->mu);
}

/* The reader thread: every request's slices in order, chunk by chunk, hashed when verifying.
 * A failed read is the last chunk it publishes. Without a thread (inline_sink) the caller runs
 * it, and each chunk is sunk as it is published. */
static void *reader_thread(void *arg) {
    read_pipe *rp = arg;
    const lj_sharded *c = rp->c;
    XXH3_state_t *h = rp->verify ? XXH3_createState() : NULL;
    LJ_ASSERT(!rp->verify || h != NULL, "XXH3_createState");
    int ok = 1;
    for (int r = 0; r < rp->nreq && ok; r++) {
        const lj_shard_request *q = &rp->reqs[r];
        const lj_sharded_tensor *t = lj_sharded_find(c, q->tensor);
        const int64_t offset = q->offset, end = q->offset + q->numel;
        const size_t es = lj_dtype_size(t->dtype);
        for (int i = first_slice(t, offset); i < t->count && t->slices[i].offset < end && ok; i++) {
            const lj_shard_slice *sl = &t->slices[i];
            const int64_t want_b = sl->offset > offset ? sl->offset : offset;
            const int64_t want_e = sl->offset + sl->numel < end ? sl->offset + sl->numel : end;
            const int64_t rb = rp->verify ? sl->offset : want_b, re = rp->verify ? sl->offset + sl->numel : want_e;
            if (h) XXH3_64bits_reset(h);
            for (int64_t k = rb; k < re || (k == rb && rb == re); k += rp->half) {
                const int64_t n = re - k < rp->half ? re - k : rp->half;
                read_chunk *ch = reader_slot(rp);
                if (!ch) {
                    ok = 0;
                    break;
                }
                ch->req = r;
                ch->failed = 0;
                ch->bad_slice = -1;
                if (n > 0 && pread_full(c, sl->file, ch->buf, (size_t)n * es,
                                        sl->byte_offset + (uint64_t)(k - sl->offset) * es) != LJ_OK) {
                    snprintf(ch->error, sizeof ch->error, "%s", lj_error_message());
                    ch->failed = 1;
                    ch->n = 0;
                    reader_publish(rp, 0);
                    ok = 0;
                    break;
                }
                if (h) XXH3_64bits_update(h, ch->buf, (size_t)n * es);
                if (t->dtype == LJ_DTYPE_BF16) widen_bf16(ch->buf, n);
                const int64_t cb = k > want_b ? k : want_b, ce = k + n < want_e ? k + n : want_e;
                ch->sink_at = cb - offset;
                ch->skip = cb - k;
                ch->n = ce > cb ? ce - cb : 0;
                if (h && k + n >= re) {
                    ch->digest = XXH3_64bits_digest(h);
                    if (ch->digest != sl->xxh3) ch->bad_slice = i;
                }
                reader_publish(rp, 0);
                if (n == 0) break;
            }
        }
    }
    if (h) XXH3_freeState(h);
    reader_publish(rp, 1);
    return NULL;
}

/* Checks the requests against the metadata before anything is read. */
static lj_status check_request(const lj_sharded *c, const lj_shard_request *q) {
    const lj_sharded_tensor *t = lj_sharded_find(c, q->tensor);
    if (!t) return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' is missing (a checkpoint of another model or optimizer?)",
                           c->meta_path, q->tensor);
    if (q->offset < 0 || q->numel < 0 || q->offset + q->numel > t->numel)
        return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' has %" PRId64 " elements, this run needs [%" PRId64 ", %" PRId64
                                      ") (a checkpoint of another model shape?)", c->meta_path, q->tensor, t->numel,
                       q->offset, q->offset + q->numel);
    return LJ_OK;
}

/* The caller's side of a chunk: the sink, then the verdict of a slice that ends with it. */
static lj_status consume_chunk(const lj_sharded *c, const lj_shard_request *reqs, const read_chunk *ch,
                               lj_shard_sink_fn sink) {
    if (ch->failed) return lj_fail(LJ_ERR_IO, "%s", ch->error);
    const lj_shard_request *q = &reqs[ch->req];
    if (ch->n > 0) sink(q->ctx, ch->sink_at, ch->buf + ch->skip, ch->n);
    if (ch->bad_slice < 0) return LJ_OK;
    const lj_shard_slice *sl = &lj_sharded_find(c, q->tensor)->slices[ch->bad_slice];
    char have[17], want[17];
    hex64(ch->digest, have);
    hex64(sl->xxh3, want);
    return lj_fail(LJ_ERR_FORMAT, "%s/%s: tensor '%s' slice [%" PRId64 ", %" PRId64 ")%s%s%s fails its checksum "
                                  "(XXH3-64 %s, recorded %s in %s): the file is corrupted; restore it or resume "
                                  "from another iteration",
                   c->dir, c->files[sl->file], q->tensor, sl->offset, sl->offset + sl->numel,
                   sl->param ? " (parameter " : "", sl->param ? sl->param : "", sl->param ? ")" : "", have, want,
                   LJ_CKPT_METADATA_FILE);
}

lj_status lj_sharded_read_many(const lj_sharded *c, const lj_shard_request *reqs, int nreq, int verify, float *staging,
                               int64_t staging_numel, lj_shard_sink_fn sink) {
    for (int r = 0; r < nreq; r++) LJ_TRY(check_request(c, &reqs[r]));
    /* two halves when the staging has room for them, else one (the caller then waits for each read) */
    const int two = staging_numel >= 2;
    read_pipe rp = {.c = c, .reqs = reqs, .nreq = nreq, .verify = verify, .half = two ? staging_numel / 2 : staging_numel};
    rp.chunks[0].buf = staging;
    rp.chunks[1].buf = staging + (two ? rp.half : 0);
    pthread_mutex_init(&rp.mu, NULL);
    pthread_cond_init(&rp.cv, NULL);
    pthread_t thread;
    lj_status s = LJ_OK;
    if (two && pthread_create(&thread, NULL, reader_thread, &rp) == 0) {
        pthread_mutex_lock(&rp.mu);
        for (;;) {
            while (rp.consumed == rp.produced && !rp.finished) pthread_cond_wait(&rp.cv, &rp.mu);
            if (rp.consumed == rp.produced) break; /* finished, all taken */
            const read_chunk *ch = &rp.chunks[rp.consumed % 2];
            pthread_mutex_unlock(&rp.mu);
            s = consume_chunk(c, reqs, ch, sink);
            pthread_mutex_lock(&rp.mu);
            rp.consumed++;
            if (s != LJ_OK) rp.stop = 1; /* the thread stops at its next chunk */
            pthread_cond_broadcast(&rp.cv);
            if (s != LJ_OK) break;
        }
        pthread_mutex_unlock(&rp.mu);
        pthread_join(thread, NULL);
    } else {
        /* no thread: the caller reads each chunk itself, the whole staging at a time */
        rp.chunks[0].buf = staging;
        rp.half = staging_numel;
        rp.inline_sink = sink;
        reader_thread(&rp);
        s = rp.inline_status;
    }
    pthread_mutex_destroy(&rp.mu);
    pthread_cond_destroy(&rp.cv);
    return s;
}

lj_status lj_sharded_read_into(const lj_sharded *c, const char *tensor, int64_t offset, int64_t numel, float *dst) {
    const lj_shard_request q = {tensor, offset, numel, NULL};
    LJ_TRY(check_request(c, &q));
    const lj_sharded_tensor *t = lj_sharded_find(c, tensor);
    const int64_t end = offset + numel;
    for (int i = first_slice(t, offset); i < t->count && t->slices[i].offset < end; i++) {
        const lj_shard_slice *sl = &t->slices[i];
        const int64_t b = sl->offset > offset ? sl->offset : offset;
        const int64_t e = sl->offset + sl->numel < end ? sl->offset + sl->numel : end;
        const size_t es = lj_dtype_size(t->dtype);
        if (e > b) {
            LJ_TRY(pread_full(c, sl->file, dst + (b - offset), (size_t)(e - b) * es,
                              sl->byte_offset + (uint64_t)(b - sl->offset) * es));
            if (t->dtype == LJ_DTYPE_BF16) widen_bf16(dst + (b - offset), e - b);
        }
    }
    return LJ_OK;
}

lj_status lj_sharded_read(const lj_sharded *c, const char *tensor, int64_t offset, int64_t numel, int verify,
                          float *staging, int64_t staging_numel, lj_shard_sink_fn sink, void *ctx) {
    const lj_shard_request q = {tensor, offset, numel, ctx};
    return lj_sharded_read_many(c, &q, 1, verify, staging, staging_numel, sink);
}
