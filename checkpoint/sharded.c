/* sharded.c: the sharded training-state format (sharded.h): per-rank shard files, the metadata,
 * and reading byte ranges back with their checksums. */
#include "checkpoint/sharded.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

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

lj_status lj_shard_writer_open(lj_shard_writer *w, const char *dir, int rank, int world, size_t staging_bytes) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    w->rank = rank;
    w->world = world;
    LJ_TRY(lj_path_format(w->dir, "%s", dir));
    LJ_TRY(lj_path_format(w->path, "%s/" LJ_CKPT_SHARD_DATA_FMT, dir, rank, world));
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) return lj_fail(LJ_ERR_IO, "%s: cannot create: %s", w->path, strerror(errno));
    w->staging_numel = (int64_t)(staging_bytes / sizeof(float));
    w->staging = lj_malloc((size_t)w->staging_numel * sizeof(float));
    return LJ_OK;
}

lj_status lj_shard_writer_add(lj_shard_writer *w, const char *tensor, const char *param, int64_t offset, int64_t numel,
                              lj_shard_fetch_fn fetch, void *ctx, int64_t src_offset) {
    LJ_ASSERT(w->fd >= 0 && numel >= 0);
    XXH3_state_t *h = XXH3_createState();
    LJ_ASSERT(h != NULL, "XXH3_createState");
    XXH3_64bits_reset(h);
    lj_status s = LJ_OK;
    for (int64_t k = 0; k < numel && s == LJ_OK; k += w->staging_numel) {
        const int64_t n = numel - k < w->staging_numel ? numel - k : w->staging_numel;
        s = fetch(ctx, src_offset + k, n, w->staging);
        if (s != LJ_OK) break;
        XXH3_64bits_update(h, w->staging, (size_t)n * sizeof(float));
        if (write_full(w->fd, w->staging, (size_t)n * sizeof(float)) != 0)
            s = lj_fail(LJ_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    }
    const uint64_t digest = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    if (s != LJ_OK) return s;
    if (w->count == w->cap) w->slices = lj_realloc(w->slices, (size_t)(w->cap = w->cap ? 2 * w->cap : 64) * sizeof *w->slices);
    lj_shard_slice *sl = &w->slices[w->count++];
    sl->tensor = lj_strdup(tensor);
    sl->param = param ? lj_strdup(param) : NULL;
    sl->file = w->rank;
    sl->offset = offset;
    sl->numel = numel;
    sl->byte_offset = w->bytes;
    sl->xxh3 = digest;
    w->bytes += (uint64_t)numel * sizeof(float);
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
    cJSON_AddItemToObject(o, "file", json_i64(sl->file));
    cJSON_AddItemToObject(o, "offset", json_i64(sl->offset));
    cJSON_AddItemToObject(o, "numel", json_i64(sl->numel));
    cJSON_AddItemToObject(o, "byte_offset", json_i64((int64_t)sl->byte_offset));
    cJSON_AddStringToObject(o, "xxh3_64", hex);
    if (sl->param) cJSON_AddStringToObject(o, "param", sl->param);
    return o;
}

lj_status lj_shard_writer_close(lj_shard_writer *w) {
    LJ_ASSERT(w->fd >= 0);
    lj_status s = LJ_OK;
    if (fsync(w->fd) != 0) s = lj_fail(LJ_ERR_IO, "%s: fsync failed: %s", w->path, strerror(errno));
    if (close(w->fd) != 0 && s == LJ_OK) s = lj_fail(LJ_ERR_IO, "%s: close failed: %s", w->path, strerror(errno));
    w->fd = -1;
    if (s != LJ_OK) return s;
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
    if (w->fd >= 0) close(w->fd);
    slices_free(w->slices, w->count);
    free(w->staging);
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
            if (all[j].offset != covered)
                s = lj_fail(LJ_ERR_FORMAT, "%s: the slices of tensor '%s' do not cover it once (element %" PRId64
                                           " is %s)", dir, all[i].tensor, covered < all[j].offset ? covered : all[j].offset,
                            covered < all[j].offset ? "missing" : "written twice");
            covered = all[j].offset + all[j].numel;
        }
        cJSON *t = cJSON_AddObjectToObject(tensors, all[i].tensor);
        cJSON_AddStringToObject(t, "dtype", "F32");
        cJSON *shape = cJSON_AddArrayToObject(t, "shape");
        cJSON_AddItemToArray(shape, json_i64(covered));
        cJSON *arr = cJSON_AddArrayToObject(t, "slices");
        for (int k = i; k < j; k++) {
            cJSON *o = slice_json(&all[k]);
            cJSON_DeleteItemFromObjectCaseSensitive(o, "tensor");
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
        if (!cJSON_IsString(dtype) || strcmp(dtype->valuestring, "F32") != 0)
            return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': dtype is not \"F32\"", p, st->name);
        if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != 1 || !json_int64(shape->child, &st->numel))
            return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': shape is not [numel]", p, st->name);
        const cJSON *slices = cJSON_GetObjectItemCaseSensitive(t, "slices"), *o;
        st->slices = lj_calloc((size_t)(cJSON_GetArraySize(slices) + 1), sizeof *st->slices);
        int64_t covered = 0;
        cJSON_ArrayForEach(o, slices) {
            lj_shard_slice *sl = &st->slices[st->count];
            LJ_TRY(parse_slice(o, p, st->name, sl));
            st->count++;
            if (sl->file >= c->num_files)
                return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': a slice names file %d of %d", p, st->name, sl->file,
                               c->num_files);
            if (sl->offset != covered)
                return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': the slices do not cover it in order (element %" PRId64 ")",
                               p, st->name, covered);
            if (sl->byte_offset > (*file_bytes)[sl->file] ||
                (uint64_t)sl->numel * sizeof(float) > (*file_bytes)[sl->file] - sl->byte_offset)
                return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': slice [%" PRId64 ", %" PRId64 ") lies beyond the %" PRIu64
                                              " bytes of %s", p, st->name, sl->offset, sl->offset + sl->numel,
                               (*file_bytes)[sl->file], c->files[sl->file]);
            covered += sl->numel;
        }
        if (covered != st->numel)
            return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s': its slices hold %" PRId64 " elements, its shape %" PRId64, p,
                           st->name, covered, st->numel);
    }
    return LJ_OK;
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

lj_status lj_sharded_read(const lj_sharded *c, const char *tensor, int64_t offset, int64_t numel, int verify,
                          float *staging, int64_t staging_numel, lj_shard_sink_fn sink, void *ctx) {
    const lj_sharded_tensor *t = lj_sharded_find(c, tensor);
    if (!t) return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' is missing (a checkpoint of another model or optimizer?)",
                           c->meta_path, tensor);
    if (offset < 0 || numel < 0 || offset + numel > t->numel)
        return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' has %" PRId64 " elements, this run needs [%" PRId64 ", %" PRId64
                                      ") (a checkpoint of another model shape?)", c->meta_path, tensor, t->numel, offset,
                       offset + numel);
    const int64_t end = offset + numel;
    /* the first slice that ends after `offset` */
    int lo = 0, hi = t->count;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (t->slices[mid].offset + t->slices[mid].numel <= offset) lo = mid + 1;
        else hi = mid;
    }
    for (int i = lo; i < t->count && t->slices[i].offset < end; i++) {
        const lj_shard_slice *sl = &t->slices[i];
        const int64_t want_b = sl->offset > offset ? sl->offset : offset;
        const int64_t want_e = sl->offset + sl->numel < end ? sl->offset + sl->numel : end;
        const int64_t rb = verify ? sl->offset : want_b, re = verify ? sl->offset + sl->numel : want_e;
        XXH3_state_t *h = verify ? XXH3_createState() : NULL;
        if (h) XXH3_64bits_reset(h);
        lj_status s = LJ_OK;
        for (int64_t k = rb; k < re && s == LJ_OK; k += staging_numel) {
            const int64_t n = re - k < staging_numel ? re - k : staging_numel;
            s = pread_full(c, sl->file, staging, (size_t)n * sizeof(float),
                           sl->byte_offset + (uint64_t)(k - sl->offset) * sizeof(float));
            if (s != LJ_OK) break;
            if (h) XXH3_64bits_update(h, staging, (size_t)n * sizeof(float));
            const int64_t cb = k > want_b ? k : want_b, ce = k + n < want_e ? k + n : want_e;
            if (ce > cb) sink(ctx, cb - offset, staging + (cb - k), ce - cb);
        }
        const uint64_t digest = h ? XXH3_64bits_digest(h) : 0;
        if (h) XXH3_freeState(h);
        if (s != LJ_OK) return s;
        if (verify && digest != sl->xxh3) {
            char have[17], want[17];
            hex64(digest, have);
            hex64(sl->xxh3, want);
            return lj_fail(LJ_ERR_FORMAT, "%s/%s: tensor '%s' slice [%" PRId64 ", %" PRId64 ")%s%s%s fails its checksum "
                                          "(XXH3-64 %s, recorded %s in %s): the file is corrupted; restore it or resume "
                                          "from another iteration",
                           c->dir, c->files[sl->file], tensor, sl->offset, sl->offset + sl->numel,
                           sl->param ? " (parameter " : "", sl->param ? sl->param : "", sl->param ? ")" : "", have, want,
                           LJ_CKPT_METADATA_FILE);
        }
    }
    return LJ_OK;
}
