/* checkpoint.c: training-state checkpoints (iter_NNNNNNN/ directories, the latest file,
 * pruning). */
#include "checkpoint/checkpoint.h"

#include "base/fs.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"

/* ---- checkpoints ----------------------------------------------------------------- */

/* buf[len] = ROOT/iter_%07d; len >= strlen(root) + 20 */
static void iter_dir(const char *root, int iteration, char *buf, size_t len) {
    snprintf(buf, len, "%s/iter_%07d", root, iteration);
}

lj_status lj_ckpt_iter_dir(const char *root, int iteration, char *buf) {
    return lj_path_format(buf, "%s/iter_%07d", root, iteration);
}

/* Parses "iter_" followed by digits only (at least 7). Returns the iteration or -1. */
static int parse_iter_name(const char *name, const char **suffix) {
    if (strncmp(name, "iter_", 5) != 0) return -1;
    const char *p = name + 5;
    long long v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 10) v = v * 10 + (*p++ - '0'), digits++;
    if (digits < 7 || v > 0x7fffffff) return -1;
    if (suffix) *suffix = p;
    else if (*p) return -1;
    return (int)v;
}

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int cmp_int_desc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x < y) - (x > y);
}

/* Deletes iterations below `current` beyond the newest keep_last (current included), and
 * leftover temporary directories of processes that no longer run. Failures are warnings. */
static void prune(const char *root, int current, int keep_last) {
    DIR *d = opendir(root);
    if (!d) return;
    int *iters = NULL, n = 0, cap = 0;
    size_t plen = strlen(root) + 300;
    char *path = lj_malloc(plen);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *suffix = NULL;
        int it = parse_iter_name(de->d_name, &suffix);
        if (it < 0) continue;
        snprintf(path, plen, "%s/%s", root, de->d_name);
        if (*suffix == '\0') {
            if (keep_last > 0 && it < current && is_dir(path)) {
                if (n == cap) iters = lj_realloc(iters, (size_t)(cap = cap ? 2 * cap : 16) * sizeof(int));
                iters[n++] = it;
            }
        } else if (strncmp(suffix, ".tmp.", 5) == 0) {
            char *end;
            long pid = strtol(suffix + 5, &end, 10);
            if (*end == '\0' && pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
                int err = lj_dir_remove_quiet(path);
                if (err) lj_log_warn("%s: cannot remove a leftover temporary checkpoint: %s", path, strerror(err));
            }
        }
    }
    closedir(d);
    if (n > 1) qsort(iters, (size_t)n, sizeof(int), cmp_int_desc);
    for (int i = keep_last > 0 ? keep_last - 1 : n; i < n; i++) { /* iters[0 .. keep_last-2] stay beside current */
        iter_dir(root, iters[i], path, plen);
        int err = lj_dir_remove_quiet(path);
        if (err) lj_log_warn("%s: cannot remove an old checkpoint: %s", path, strerror(err));
    }
    free(iters);
    free(path);
}

lj_status lj_ckpt_save(const char *root, int iteration, const lj_ckpt_tensor *tensors, int n, const char *state_json,
                       int keep_last) {
    return lj_ckpt_save_ex(root, iteration, tensors, n, state_json, keep_last, NULL, NULL);
}

lj_status lj_ckpt_save_ex(const char *root, int iteration, const lj_ckpt_tensor *tensors, int n, const char *state_json,
                          int keep_last, lj_ckpt_extra_fn extra, void *ctx) {
    LJ_TRY(lj_ckpt_write_iteration(root, iteration, tensors, n, state_json, extra, ctx));
    return lj_ckpt_publish(root, iteration, keep_last);
}

lj_status lj_ckpt_shard_file(const char *root, int iteration, int rank, char *buf) {
    return lj_path_format(buf, "%s/iter_%07d/" LJ_CKPT_SHARD_FILE_FMT, root, iteration, rank);
}

lj_status lj_ckpt_write_iteration(const char *root, int iteration, const lj_ckpt_tensor *tensors, int n,
                                  const char *state_json, lj_ckpt_extra_fn extra, void *ctx) {
    LJ_ASSERT(iteration >= 0 && n >= 0 && (n == 0 || tensors));
    LJ_TRY(lj_mkdir_p(root));
    size_t plen = strlen(root) + 128;
    char *final = lj_malloc(plen), *tmp = lj_malloc(plen), *file = lj_malloc(plen);
    iter_dir(root, iteration, final, plen);
    snprintf(tmp, plen, "%s.tmp.%d", final, (int)getpid());
    lj_st_tensor *st = lj_calloc((size_t)(n ? n : 1), sizeof(lj_st_tensor));
    for (int i = 0; i < n; i++) {
        st[i].name = tensors[i].name;
        st[i].dtype = LJ_ST_F32;
        st[i].ndim = 1;
        st[i].shape[0] = tensors[i].numel;
        st[i].data = tensors[i].data;
    }
    char iter_text[32];
    snprintf(iter_text, sizeof iter_text, "%d", iteration);
    const char *meta_keys[] = {"format", "iteration"}, *meta_values[] = {"ljperf-train-state", iter_text};
    lj_status s = LJ_OK;
    int err = lj_dir_remove_quiet(tmp);
    if (err) s = lj_fail(LJ_ERR_IO, "%s: cannot remove a stale temporary directory: %s", tmp, strerror(err));
    else if (mkdir(tmp, 0755) != 0) s = lj_fail(LJ_ERR_IO, "%s: cannot create directory: %s", tmp, strerror(errno));
    if (s != LJ_OK) goto out;
    snprintf(file, plen, "%s/%s", tmp, LJ_CKPT_TENSORS_FILE);
    s = lj_safetensors_write(file, st, n, meta_keys, meta_values, 2);
    if (s == LJ_OK) {
        snprintf(file, plen, "%s/%s", tmp, LJ_CKPT_STATE_FILE);
        const char *text = state_json ? state_json : "{}";
        s = lj_file_write_atomic(file, text, strlen(text));
    }
    if (s == LJ_OK && extra) s = extra(tmp, ctx);
    if (s == LJ_OK) s = lj_dir_install(tmp, final);
    if (s != LJ_OK) lj_dir_remove_quiet(tmp);
out:
    free(st);
    free(final);
    free(tmp);
    free(file);
    return s;
}

lj_status lj_ckpt_publish(const char *root, int iteration, int keep_last) {
    LJ_ASSERT(iteration >= 0 && keep_last >= 0);
    /* the iteration is complete and durable: point the latest file at it */
    size_t plen = strlen(root) + 128;
    char *file = lj_malloc(plen);
    char iter_text[32];
    snprintf(iter_text, sizeof iter_text, "%d", iteration);
    snprintf(file, plen, "%s/%s", root, LJ_CKPT_LATEST_FILE);
    lj_status s = lj_file_write_atomic(file, iter_text, strlen(iter_text));
    if (s == LJ_OK) s = lj_dir_fsync(root);
    if (s == LJ_OK) prune(root, iteration, keep_last);
    free(file);
    return s;
}

/* The highest iter_NNNNNNN directory of `root` that holds both state files, or -1. */
static int highest_complete(const char *root) {
    DIR *d = opendir(root);
    if (!d) return -1;
    size_t plen = strlen(root) + 300;
    char *path = lj_malloc(plen);
    int best = -1;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int it = parse_iter_name(de->d_name, NULL);
        if (it <= best) continue;
        snprintf(path, plen, "%s/%s/%s", root, de->d_name, LJ_CKPT_STATE_FILE);
        if (access(path, R_OK) != 0) continue;
        snprintf(path, plen, "%s/%s/%s", root, de->d_name, LJ_CKPT_TENSORS_FILE);
        if (access(path, R_OK) == 0) best = it;
    }
    closedir(d);
    free(path);
    return best;
}

lj_status lj_ckpt_latest(const char *root, int *iteration) {
    if (!is_dir(root)) return lj_fail(LJ_ERR_IO, "%s: no checkpoint found (not a directory)", root);
    size_t plen = strlen(root) + 128;
    char *file = lj_malloc(plen);
    snprintf(file, plen, "%s/%s", root, LJ_CKPT_LATEST_FILE);
    char *text = NULL;
    lj_status s = LJ_OK;
    if (access(file, F_OK) != 0) {
        int it = highest_complete(root);
        if (it < 0) {
            s = lj_fail(LJ_ERR_IO, "%s: no checkpoint found (no %s and no complete iter_NNNNNNN directory)", root,
                        LJ_CKPT_LATEST_FILE);
        } else {
            lj_log_warn("%s: %s is missing; using the newest complete checkpoint, iteration %d", root, LJ_CKPT_LATEST_FILE, it);
            *iteration = it;
        }
        free(file);
        return s;
    }
    if ((s = lj_file_read_all(file, &text, NULL)) != LJ_OK) goto out;
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    while (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t') end++;
    if (end == text || *end != '\0' || errno || v < 0 || v > 0x7fffffff) {
        s = lj_fail(LJ_ERR_FORMAT, "%s: expected an iteration number, found \"%.40s\"", file, text);
        goto out;
    }
    iter_dir(root, (int)v, file, plen);
    if (!is_dir(file)) {
        s = lj_fail(LJ_ERR_FORMAT, "%s/%s: names iteration %ld, but %s is missing", root, LJ_CKPT_LATEST_FILE, v, file);
        goto out;
    }
    *iteration = (int)v;
out:
    free(text);
    free(file);
    return s;
}

lj_status lj_ckpt_load(const char *root, int iteration, const lj_ckpt_tensor *tensors, int n, char **state_json) {
    return lj_ckpt_load_ex(root, iteration, tensors, n, state_json, 1);
}

lj_status lj_ckpt_load_ex(const char *root, int iteration, const lj_ckpt_tensor *tensors, int n, char **state_json,
                          int warn_unused) {
    LJ_ASSERT(iteration >= 0 && n >= 0 && (n == 0 || tensors));
    size_t plen = strlen(root) + 128;
    char *dir = lj_malloc(plen), *file = lj_malloc(plen);
    iter_dir(root, iteration, dir, plen);
    snprintf(file, plen, "%s/%s", dir, LJ_CKPT_TENSORS_FILE);
    lj_safetensors st;
    char *text = NULL;
    lj_status s = lj_safetensors_open(&st, file);
    if (s != LJ_OK) goto out;
    for (int i = 0; i < n && s == LJ_OK; i++) {
        const lj_st_entry *e = lj_safetensors_find(&st, tensors[i].name);
        if (!e)
            s = lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' is missing (a checkpoint from another model or optimizer?)", file,
                        tensors[i].name);
        else if (e->dtype != LJ_ST_F32)
            s = lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' has dtype %s, expected F32", file, e->name, lj_st_dtype_name(e->dtype));
        else if (e->numel != tensors[i].numel)
            s = lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' has %lld elements, this run needs %lld (a checkpoint from another model shape?)",
                        file, e->name, (long long)e->numel, (long long)tensors[i].numel);
    }
    if (s != LJ_OK) goto close;
    for (int i = 0; i < st.count && warn_unused; i++) {
        int asked = 0;
        for (int j = 0; j < n && !asked; j++) asked = strcmp(st.entries[i].name, tensors[j].name) == 0;
        if (!asked) lj_log_warn("%s: tensor '%s' is not used by this run", file, st.entries[i].name);
    }
    if (state_json) {
        snprintf(file, plen, "%s/%s", dir, LJ_CKPT_STATE_FILE);
        if ((s = lj_file_read_all(file, &text, NULL)) != LJ_OK) goto close;
        cJSON *root_json = cJSON_Parse(text);
        if (!root_json) {
            s = lj_fail(LJ_ERR_FORMAT, "%s: not valid JSON", file);
            goto close;
        }
        cJSON_Delete(root_json);
    }
    for (int i = 0; i < n; i++) {
        const lj_st_entry *e = lj_safetensors_find(&st, tensors[i].name);
        if (e->numel) memcpy(tensors[i].data, e->data, (size_t)e->numel * sizeof(float));
    }
    if (state_json) {
        *state_json = text;
        text = NULL;
    }
close:
    lj_safetensors_close(&st);
out:
    free(text);
    free(dir);
    free(file);
    return s;
}
