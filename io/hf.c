/* hf.c: Hugging Face checkpoint (Llama, Qwen2, Qwen3) export (single or sharded safetensors + config.json)
 * and import (single or sharded; F32/BF16/F16) of the flat parameter buffer. */
#include "io/hf.h"

#include "base/fs.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "io/safetensors.h"

#define INDEX_FILE "model.safetensors.index.json"
#define SINGLE_FILE "model.safetensors"

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = lj_malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* ---- export ---------------------------------------------------------------------- */

static lj_status export_dtype(lj_dtype dtype, lj_st_dtype *st, const char **torch_name) {
    switch (dtype) {
    case LJ_DTYPE_F32: *st = LJ_ST_F32, *torch_name = "float32"; return LJ_OK;
    case LJ_DTYPE_BF16: *st = LJ_ST_BF16, *torch_name = "bfloat16"; return LJ_OK;
    case LJ_DTYPE_F16: *st = LJ_ST_F16, *torch_name = "float16"; return LJ_OK;
    default: return lj_fail(LJ_ERR_ARG, "HF export: dtype %s is not supported (F32, BF16 or F16)", lj_dtype_name(dtype));
    }
}

static cJSON *json_uint(uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return cJSON_CreateRaw(buf);
}

/* ---- the checksums sidecar (LJ_HF_CHECKSUMS_FILE) ---- */

static void hex64(uint64_t h, char out[17]) { snprintf(out, 17, "%016" PRIx64, h); }

/* Adds {tensor: XXH3-64 of its bytes} of the written file `dir/name` to `files` under "name". */
static lj_status checksum_file(const char *dir, const char *name, cJSON *files) {
    char *path = path_join(dir, name);
    lj_safetensors st;
    lj_status s = lj_safetensors_open(&st, path);
    free(path);
    if (s != LJ_OK) return s;
    cJSON *o = cJSON_AddObjectToObject(files, name);
    for (int i = 0; i < st.count; i++) {
        char h[17];
        hex64(XXH3_64bits(st.entries[i].data, (size_t)(st.entries[i].end - st.entries[i].begin)), h);
        cJSON_AddStringToObject(o, st.entries[i].name, h);
    }
    lj_safetensors_close(&st);
    return LJ_OK;
}

/* Writes dir/LJ_HF_CHECKSUMS_FILE for the weight files `names[n]`, read back from disk: the
 * bytes a later load will hash. */
static lj_status write_checksums(const char *dir, const char *const *names, int n) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "ljperf-checksums");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "algorithm", "xxh3_64");
    cJSON *files = cJSON_AddObjectToObject(root, "files");
    lj_status s = LJ_OK;
    for (int k = 0; k < n && s == LJ_OK; k++) s = checksum_file(dir, names[k], files);
    if (s == LJ_OK) {
        char *text = cJSON_Print(root);
        char *path = path_join(dir, LJ_HF_CHECKSUMS_FILE);
        s = lj_file_write_atomic(path, text, strlen(text));
        free(path);
        free(text);
    }
    cJSON_Delete(root);
    return s;
}

/* The export of params, or of `read` when params is NULL. */
static lj_status export_into(const char *dir, const lj_model_config *cfg, const float *params, lj_st_read_f32_fn read,
                             void *ctx, lj_dtype dtype, uint64_t max_shard_bytes) {
    lj_st_dtype st_dtype = LJ_ST_F32;
    const char *torch_name = "float32";
    LJ_TRY(export_dtype(dtype, &st_dtype, &torch_name));
    char *path = path_join(dir, "config.json");
    lj_status s = lj_config_save(cfg, path, torch_name);
    free(path);
    if (s != LJ_OK) return s;

    lj_param_layout lo;
    lj_param_layout_init(&lo, cfg);
    lj_st_tensor *ts = lj_calloc((size_t)lo.count, sizeof(lj_st_tensor));
    uint64_t *bytes = lj_calloc((size_t)lo.count, sizeof(uint64_t)), total = 0;
    for (int i = 0; i < lo.count; i++) {
        const lj_param_info *p = &lo.params[i];
        ts[i].name = p->name;
        ts[i].dtype = st_dtype;
        ts[i].ndim = p->ndim;
        ts[i].shape[0] = p->shape[0];
        ts[i].shape[1] = p->shape[1];
        if (params) ts[i].from_f32 = params + p->offset;
        else ts[i].read_f32 = read, ts[i].read_ctx = ctx, ts[i].read_offset = p->offset;
        bytes[i] = (uint64_t)p->numel * lj_st_dtype_size(st_dtype);
        total += bytes[i];
    }
    const char *meta_keys[] = {"format"}, *meta_values[] = {"pt"};
    if (max_shard_bytes == 0 || total <= max_shard_bytes) {
        path = path_join(dir, SINGLE_FILE);
        s = lj_safetensors_write(path, ts, lo.count, meta_keys, meta_values, 1);
        free(path);
        const char *single[1] = {SINGLE_FILE};
        if (s == LJ_OK) s = write_checksums(dir, single, 1);
        goto out;
    }
    /* Greedy split in layout order, as transformers' shard_checkpoint does. */
    int *first = lj_calloc((size_t)lo.count + 1, sizeof(int)), nshards = 0;
    uint64_t cur = 0;
    for (int i = 0; i < lo.count; i++) {
        if (i == 0 || (cur > 0 && cur + bytes[i] > max_shard_bytes)) {
            first[nshards++] = i;
            cur = 0;
        }
        cur += bytes[i];
    }
    first[nshards] = lo.count;
    cJSON *index = cJSON_CreateObject();
    cJSON_AddItemToObject(cJSON_AddObjectToObject(index, "metadata"), "total_size", json_uint(total));
    cJSON *map = cJSON_AddObjectToObject(index, "weight_map");
    char(*names)[64] = lj_calloc((size_t)nshards, sizeof *names);
    const char **name_ptrs = lj_calloc((size_t)nshards, sizeof *name_ptrs);
    for (int k = 0; k < nshards && s == LJ_OK; k++) {
        char *name = names[k];
        name_ptrs[k] = name;
        snprintf(name, sizeof names[k], "model-%05d-of-%05d.safetensors", k + 1, nshards);
        path = path_join(dir, name);
        s = lj_safetensors_write(path, ts + first[k], first[k + 1] - first[k], meta_keys, meta_values, 1);
        free(path);
        for (int i = first[k]; i < first[k + 1]; i++) cJSON_AddStringToObject(map, ts[i].name, name);
    }
    if (s == LJ_OK) {
        char *text = cJSON_Print(index);
        path = path_join(dir, INDEX_FILE);
        s = lj_file_write_atomic(path, text, strlen(text));
        free(path);
        free(text);
    }
    if (s == LJ_OK) s = write_checksums(dir, name_ptrs, nshards);
    free(names);
    free(name_ptrs);
    cJSON_Delete(index);
    free(first);
out:
    free(ts);
    free(bytes);
    lj_param_layout_free(&lo);
    return s;
}

lj_status lj_hf_export_into(const char *dir, const lj_model_config *cfg, const float *params, lj_dtype dtype,
                            uint64_t max_shard_bytes) {
    return export_into(dir, cfg, params, NULL, NULL, dtype, max_shard_bytes);
}

lj_status lj_hf_export_stream_into(const char *dir, const lj_model_config *cfg, lj_st_read_f32_fn read, void *ctx,
                                   lj_dtype dtype, uint64_t max_shard_bytes) {
    return export_into(dir, cfg, NULL, read, ctx, dtype, max_shard_bytes);
}

/* An existing export target may be replaced only if it is empty or looks like a checkpoint. */
static lj_status check_replaceable(const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) != 0) return LJ_OK;
    if (!S_ISDIR(sb.st_mode)) return lj_fail(LJ_ERR_ARG, "%s: exists and is not a directory", dir);
    DIR *d = opendir(dir);
    if (!d) return lj_fail(LJ_ERR_IO, "%s: cannot read directory: %s", dir, strerror(errno));
    int entries = 0, checkpoint = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        entries++;
        size_t n = strlen(de->d_name);
        if (strcmp(de->d_name, "config.json") == 0 || (n > 12 && strcmp(de->d_name + n - 12, ".safetensors") == 0))
            checkpoint = 1;
    }
    closedir(d);
    if (entries > 0 && !checkpoint)
        return lj_fail(LJ_ERR_ARG, "%s: exists and holds no config.json or .safetensors; refusing to replace it", dir);
    return LJ_OK;
}

lj_status lj_hf_export(const char *dir_arg, const lj_model_config *cfg, const float *params, lj_dtype dtype,
                       uint64_t max_shard_bytes) {
    lj_st_dtype st_dtype = LJ_ST_F32;
    const char *torch_name = "float32";
    LJ_TRY(export_dtype(dtype, &st_dtype, &torch_name));
    char *dir = lj_strdup(dir_arg);
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') dir[--len] = '\0';
    char *tmp = lj_malloc(len + 32);
    snprintf(tmp, len + 32, "%s.tmp.%d", dir, (int)getpid());
    lj_status s = check_replaceable(dir);
    if (s == LJ_OK) s = lj_dir_remove(tmp);
    if (s == LJ_OK) s = lj_mkdir_p(tmp);
    if (s == LJ_OK) s = lj_hf_export_into(tmp, cfg, params, dtype, max_shard_bytes);
    if (s == LJ_OK) s = lj_dir_install(tmp, dir);
    if (s != LJ_OK) {
        char *msg = lj_strdup(lj_error_message());
        lj_dir_remove(tmp);
        lj_fail(s, "%s", msg);
        free(msg);
    }
    free(tmp);
    free(dir);
    return s;
}

/* ---- import ---------------------------------------------------------------------- */

typedef struct {
    char *index_path;     /* NULL for a single file */
    int nfiles;
    lj_safetensors *files;
    int nmapped;          /* weight_map entries (sharded) */
    char **mapped_names;
    int *mapped_file;     /* [nmapped] index into files */
} hf_source;

static void source_free(hf_source *src) {
    for (int i = 0; i < src->nfiles; i++) lj_safetensors_close(&src->files[i]);
    for (int i = 0; i < src->nmapped; i++) free(src->mapped_names[i]);
    free(src->files);
    free(src->mapped_names);
    free(src->mapped_file);
    free(src->index_path);
    memset(src, 0, sizeof *src);
}

/* Reads model.safetensors.index.json and opens every shard it names. */
static lj_status open_sharded(hf_source *src, const char *dir, const char *index_path) {
    src->index_path = lj_strdup(index_path);
    char *text;
    LJ_TRY(lj_file_read_all(index_path, &text, NULL));
    cJSON *root = cJSON_Parse(text);
    free(text);
    lj_status s = LJ_OK;
    const cJSON *map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!root || !cJSON_IsObject(root)) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: not a JSON object", index_path);
        goto out;
    }
    if (!cJSON_IsObject(map)) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: field 'weight_map' is missing or not an object", index_path);
        goto out;
    }
    int n = cJSON_GetArraySize(map);
    src->mapped_names = lj_calloc((size_t)n, sizeof(char *));
    src->mapped_file = lj_calloc((size_t)n, sizeof(int));
    char **file_names = lj_calloc((size_t)n, sizeof(char *));
    for (const cJSON *it = map->child; it && s == LJ_OK; it = it->next) {
        const char *f = cJSON_IsString(it) ? it->valuestring : NULL;
        if (!f || !f[0] || strchr(f, '/') || strcmp(f, ".") == 0 || strcmp(f, "..") == 0) {
            s = lj_fail(LJ_ERR_FORMAT, "%s: weight_map entry for tensor '%s' is not a file name in the directory", index_path,
                        it->string);
            break;
        }
        int k = 0;
        while (k < src->nfiles && strcmp(file_names[k], f) != 0) k++;
        if (k == src->nfiles) file_names[src->nfiles++] = lj_strdup(f);
        src->mapped_names[src->nmapped] = lj_strdup(it->string);
        src->mapped_file[src->nmapped++] = k;
    }
    src->files = lj_calloc((size_t)(src->nfiles ? src->nfiles : 1), sizeof(lj_safetensors));
    int opened = 0;
    for (int k = 0; k < src->nfiles && s == LJ_OK; k++) {
        char *path = path_join(dir, file_names[k]);
        s = lj_safetensors_open(&src->files[k], path);
        free(path);
        if (s == LJ_OK) opened++;
    }
    for (int k = 0; k < src->nfiles; k++) free(file_names[k]);
    free(file_names);
    src->nfiles = opened; /* only the opened ones are closed by source_free */
out:
    cJSON_Delete(root);
    return s;
}

static lj_status open_source(hf_source *src, const char *dir) {
    memset(src, 0, sizeof *src);
    struct stat sb;
    if (stat(dir, &sb) != 0) return lj_fail(LJ_ERR_IO, "%s: no such file or directory", dir);
    char *single = S_ISDIR(sb.st_mode) ? path_join(dir, SINGLE_FILE) : lj_strdup(dir);
    char *index = path_join(dir, INDEX_FILE);
    lj_status s;
    if (S_ISDIR(sb.st_mode) && access(index, F_OK) == 0) {
        s = open_sharded(src, dir, index);
    } else if (access(single, F_OK) == 0) {
        src->files = lj_calloc(1, sizeof(lj_safetensors));
        s = lj_safetensors_open(&src->files[0], single);
        if (s == LJ_OK) src->nfiles = 1;
    } else {
        s = lj_fail(LJ_ERR_IO, "%s: no %s or %s (not a Hugging Face checkpoint directory?)", dir, SINGLE_FILE, INDEX_FILE);
    }
    free(single);
    free(index);
    if (s != LJ_OK) source_free(src);
    return s;
}

/* Finds tensor `name`: its entry and the file that holds it, or an error naming the file. */
static lj_status source_find(const hf_source *src, const char *name, const lj_st_entry **e, const lj_safetensors **file) {
    if (!src->index_path) {
        *file = &src->files[0];
        *e = lj_safetensors_find(*file, name);
        if (!*e) return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' is missing", src->files[0].path, name);
        return LJ_OK;
    }
    for (int i = 0; i < src->nmapped; i++) {
        if (strcmp(src->mapped_names[i], name) != 0) continue;
        *file = &src->files[src->mapped_file[i]];
        *e = lj_safetensors_find(*file, name);
        if (!*e) return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' is missing (%s lists it in this file)", (*file)->path, name, INDEX_FILE);
        return LJ_OK;
    }
    return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' is missing", src->index_path, name);
}

static void shape_text(int ndim, const int64_t *shape, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && n < len; d++) n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

/* Checks dtype and shape of `e` against parameter `p`. */
static lj_status check_entry(const lj_safetensors *file, const lj_st_entry *e, const lj_param_info *p) {
    if (e->dtype != LJ_ST_F32 && e->dtype != LJ_ST_BF16 && e->dtype != LJ_ST_F16)
        return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' has dtype %s; expected F32, BF16 or F16", file->path, e->name,
                       lj_st_dtype_name(e->dtype));
    int same = e->ndim == p->ndim;
    for (int d = 0; d < p->ndim && same; d++) same = e->shape[d] == p->shape[d];
    if (!same) {
        char got[256], want[64];
        shape_text(e->ndim, e->shape, got, sizeof got);
        shape_text(p->ndim, p->shape, want, sizeof want);
        return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' has shape %s, the config needs %s", file->path, e->name, got, want);
    }
    return LJ_OK;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Tensors in the checkpoint that the layout does not use: the tied lm_head (checked and
 * ignored), rotary buffers (ignored); anything else is an error, since it would be dropped (a
 * Qwen2 checkpoint's biases under a Llama config, say). */
static lj_status check_extra(const hf_source *src, const lj_model_config *cfg, const lj_param_layout *lo) {
    int total = src->index_path ? src->nmapped : src->files[0].count;
    for (int i = 0; i < total; i++) {
        const char *name = src->index_path ? src->mapped_names[i] : src->files[0].entries[i].name;
        if (lj_param_find(lo, name) >= 0 || ends_with(name, "rotary_emb.inv_freq")) continue;
        if (strcmp(name, "lm_head.weight") == 0 && cfg->tie_word_embeddings) {
            const lj_st_entry *e, *emb;
            const lj_safetensors *file, *emb_file;
            LJ_TRY(source_find(src, name, &e, &file));
            LJ_TRY(check_entry(file, e, &lo->params[lo->embed]));
            if (source_find(src, lo->params[lo->embed].name, &emb, &emb_file) == LJ_OK && emb->dtype == e->dtype &&
                memcmp(emb->data, e->data, e->end - e->begin) != 0)
                lj_log_warn("%s: tensor 'lm_head.weight' differs from model.embed_tokens.weight, but the config ties them: "
                            "it is ignored", file->path);
            continue;
        }
        return lj_fail(LJ_ERR_FORMAT,
                       "%s: tensor '%s' is not part of this model (model_type \"%s\"); loading without it would drop "
                       "it (does config.json name the checkpoint's model family?)",
                       src->index_path ? src->index_path : src->files[0].path, name, lj_model_family_type(cfg->family));
    }
    return LJ_OK;
}

/* Checks each tensor the import reads (entries[n] of files[n]) against dir/LJ_HF_CHECKSUMS_FILE
 * when there is one (an export of ljperf; other checkpoints have none). */
static lj_status verify_checksums(const char *dir, const lj_st_entry *const *entries, const lj_safetensors *const *files,
                                  int n) {
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return LJ_OK; /* a single .safetensors path */
    char *path = path_join(dir, LJ_HF_CHECKSUMS_FILE);
    if (access(path, F_OK) != 0) {
        free(path);
        return LJ_OK;
    }
    char *text = NULL;
    lj_status s = lj_file_read_all(path, &text, NULL);
    cJSON *root = s == LJ_OK ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *recorded = cJSON_GetObjectItemCaseSensitive(root, "files");
    if (s == LJ_OK && !cJSON_IsObject(recorded))
        s = lj_fail(LJ_ERR_FORMAT, "%s: not a checksums file (no \"files\" object)", path);
    for (int i = 0; i < n && s == LJ_OK; i++) {
        const char *base = strrchr(files[i]->path, '/');
        base = base ? base + 1 : files[i]->path;
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(recorded, base),
                                                             entries[i]->name);
        if (!want) continue; /* not recorded */
        char have[17];
        hex64(XXH3_64bits(entries[i]->data, (size_t)(entries[i]->end - entries[i]->begin)), have);
        if (!cJSON_IsString(want) || strcmp(have, want->valuestring) != 0)
            s = lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' fails its checksum (XXH3-64 %s, recorded %.16s in %s): the file "
                                       "is damaged; export it again (or restore it)",
                        files[i]->path, entries[i]->name, have, cJSON_IsString(want) ? want->valuestring : "?",
                        LJ_HF_CHECKSUMS_FILE);
    }
    cJSON_Delete(root);
    free(path);
    return s;
}

lj_status lj_hf_import(const char *dir, const lj_model_config *cfg, float *params) {
    hf_source src;
    LJ_TRY(open_source(&src, dir));
    lj_param_layout lo;
    lj_param_layout_init(&lo, cfg);
    const lj_st_entry **entries = lj_calloc((size_t)lo.count, sizeof(lj_st_entry *));
    const lj_safetensors **files = lj_calloc((size_t)lo.count, sizeof(lj_safetensors *));
    lj_status s = LJ_OK;
    for (int i = 0; i < lo.count && s == LJ_OK; i++) {
        s = source_find(&src, lo.params[i].name, &entries[i], &files[i]);
        if (s != LJ_OK && i == lo.lm_head && !cfg->tie_word_embeddings) {
            char *msg = lj_strdup(lj_error_message());
            lj_fail(s, "%s (the config has tie_word_embeddings false)", msg);
            free(msg);
        }
        if (s == LJ_OK) s = check_entry(files[i], entries[i], &lo.params[i]);
    }
    if (s == LJ_OK) s = check_extra(&src, cfg, &lo);
    if (s == LJ_OK) s = verify_checksums(dir, entries, files, lo.count);
    for (int i = 0; i < lo.count && s == LJ_OK; i++) s = lj_safetensors_read_f32(files[i], entries[i], params + lo.params[i].offset);
    free(entries);
    free(files);
    lj_param_layout_free(&lo);
    source_free(&src);
    return s;
}

/* check_entry with lj_hf_tensor's flatten rule. */
static lj_status check_wanted(const lj_safetensors *file, const lj_st_entry *e, const lj_hf_tensor *w) {
    if (w->flatten && e->ndim > 2 && e->shape[0] == w->param->shape[0] && e->numel == w->param->numel &&
        (e->dtype == LJ_ST_F32 || e->dtype == LJ_ST_BF16 || e->dtype == LJ_ST_F16))
        return LJ_OK;
    return check_entry(file, e, w->param);
}

/* The first NaN or infinite value of w's destination (as read from `file`), as an error naming both;
 * one pass over the tensor just read (the exponent bits of each value: all ones is NaN or inf). */
static lj_status check_finite(const lj_safetensors *file, const lj_hf_tensor *w) {
    const float *x = w->dst;
    const int64_t n = w->param->numel;
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    if (!bad) return LJ_OK;
    int64_t i = 0, count = 0;
    while (isfinite(x[i])) i++;
    for (int64_t k = i; k < n; k++) count += !isfinite(x[k]);
    return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' holds %" PRId64 " non-finite value%s (the first, %g, at element "
                   "%" PRId64 "): the checkpoint's weights are damaged or diverged; use another checkpoint",
                   file->path, w->name, count, count == 1 ? "" : "s", (double)x[i], i);
}

lj_status lj_hf_import_tensors(const char *dir, const lj_hf_tensor *want, int n) {
    hf_source src;
    LJ_TRY(open_source(&src, dir));
    const lj_st_entry **entries = lj_calloc((size_t)(n > 0 ? n : 1), sizeof(lj_st_entry *));
    const lj_safetensors **files = lj_calloc((size_t)(n > 0 ? n : 1), sizeof(lj_safetensors *));
    lj_status s = LJ_OK;
    for (int i = 0; i < n && s == LJ_OK; i++) {
        s = source_find(&src, want[i].name, &entries[i], &files[i]);
        if (s != LJ_OK && want[i].optional) {
            entries[i] = NULL;
            s = LJ_OK;
            continue;
        }
        if (s == LJ_OK) s = check_wanted(files[i], entries[i], &want[i]);
    }
    const int total = src.index_path ? src.nmapped : src.files[0].count;
    for (int k = 0; k < total && s == LJ_OK; k++) {
        const char *name = src.index_path ? src.mapped_names[k] : src.files[0].entries[k].name;
        int found = ends_with(name, "rotary_emb.inv_freq");
        for (int i = 0; i < n && !found; i++) found = strcmp(want[i].name, name) == 0;
        if (!found)
            s = lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' is not part of this model; loading without it would drop it",
                        src.index_path ? src.index_path : src.files[0].path, name);
    }
    for (int i = 0; i < n && s == LJ_OK; i++) {
        if (!entries[i] || !want[i].dst) continue;
        s = lj_safetensors_read_f32(files[i], entries[i], want[i].dst);
        if (s == LJ_OK && want[i].check_finite) s = check_finite(files[i], &want[i]);
    }
    free(entries);
    free(files);
    source_free(&src);
    return s;
}

lj_status lj_hf_load_config(const char *dir, lj_model_config *cfg) {
    char *path = path_join(dir, "config.json");
    lj_status s = lj_config_load(path, cfg);
    free(path);
    return s;
}
