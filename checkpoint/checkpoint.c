/* checkpoint.c: training-state checkpoints (iter_NNNNNNN/ directories, the latest file,
 * pruning, the root's lock, the checksums). */
#include "checkpoint/checkpoint.h"

#include "base/fs.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <sys/file.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/sharded.h"
#include "io/safetensors.h"

#include <xxhash.h>

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
/* Whether ".tmp.PID" (the text after a temporary's name) names a process other than this one
 * that may still run (`all`: any other process, for the holder of the root's lock). */
static int stale_temporary(const char *suffix, int all) {
    if (strncmp(suffix, ".tmp.", 5) != 0) return 0;
    char *end;
    long pid = strtol(suffix + 5, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == (long)getpid()) return 0;
    return all || (kill((pid_t)pid, 0) != 0 && errno == ESRCH);
}

/* Removes the temporaries a killed save left in `root`: iter_NNNNNNN.tmp.PID directories and
 * latest-file temporaries, of dead processes (`all`: of any other process). */
static void remove_temporaries(const char *root, int all) {
    DIR *d = opendir(root);
    if (!d) return;
    size_t plen = strlen(root) + 300;
    char *path = lj_malloc(plen);
    const size_t nlatest = strlen(LJ_CKPT_LATEST_FILE);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *suffix = NULL;
        const int dir = parse_iter_name(de->d_name, &suffix) >= 0;
        if (!dir && strncmp(de->d_name, LJ_CKPT_LATEST_FILE, nlatest) == 0) suffix = de->d_name + nlatest;
        if (!suffix || !stale_temporary(suffix, all)) continue;
        snprintf(path, plen, "%s/%s", root, de->d_name);
        int err = dir ? lj_dir_remove_quiet(path) : (unlink(path) == 0 ? 0 : errno);
        if (err) lj_log_warn("%s: cannot remove a leftover of an interrupted save: %s", path, strerror(err));
        else lj_log_info("%s: removed, a leftover of an interrupted save", path);
    }
    closedir(d);
    free(path);
}

static void prune(const char *root, int current, int keep_last) {
    remove_temporaries(root, 0);
    DIR *d = opendir(root);
    if (!d) return;
    int *iters = NULL, n = 0, cap = 0;
    size_t plen = strlen(root) + 300;
    char *path = lj_malloc(plen);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int it = parse_iter_name(de->d_name, NULL);
        if (it < 0 || it >= current || keep_last <= 0) continue; /* newer ones (a rollback's) stay */
        snprintf(path, plen, "%s/%s", root, de->d_name);
        if (!is_dir(path)) continue;
        if (n == cap) iters = lj_realloc(iters, (size_t)(cap = cap ? 2 * cap : 16) * sizeof(int));
        iters[n++] = it;
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

/* ---- integrity ------------------------------------------------------------------------ */

static void checksum_text(uint64_t h, char out[17]) { snprintf(out, 17, "%016" PRIx64, h); }

lj_status lj_ckpt_write_tensors(const char *path, const lj_st_tensor *tensors, int n, const char *const *meta_keys,
                                const char *const *meta_values, int n_meta, const char *state_json) {
    const int total = n_meta + n + (state_json != NULL);
    const char **keys = lj_calloc((size_t)total, sizeof(char *)), **values = lj_calloc((size_t)total, sizeof(char *));
    char *text = lj_calloc((size_t)(n + 1), 17);
    char **owned = lj_calloc((size_t)(n + 1), sizeof(char *));
    for (int i = 0; i < n_meta; i++) keys[i] = meta_keys[i], values[i] = meta_values[i];
    for (int i = 0; i <= n; i++) {
        const int json = i == n;
        if (json && !state_json) break;
        const char *name = json ? LJ_CKPT_STATE_FILE : tensors[i].name;
        const size_t klen = strlen(LJ_CKPT_CHECKSUM_PREFIX) + strlen(name) + 1;
        owned[i] = lj_malloc(klen);
        snprintf(owned[i], klen, "%s%s", LJ_CKPT_CHECKSUM_PREFIX, name);
        LJ_ASSERT(json || (tensors[i].dtype == LJ_ST_F32 && !tensors[i].from_f32));
        const uint64_t h = json ? XXH3_64bits(state_json, strlen(state_json))
                                : XXH3_64bits(tensors[i].data, (size_t)lj_st_tensor_numel(&tensors[i]) * sizeof(float));
        checksum_text(h, text + 17 * i);
        keys[n_meta + i] = owned[i];
        values[n_meta + i] = text + 17 * i;
    }
    lj_status s = lj_safetensors_write(path, tensors, n, keys, values, total);
    for (int i = 0; i <= n; i++) free(owned[i]);
    free(owned);
    free(text);
    free(keys);
    free(values);
    return s;
}

/* The recorded checksum of `name` in `st`, or NULL. */
static const char *recorded_checksum(const lj_safetensors *st, const char *name) {
    char key[600];
    snprintf(key, sizeof key, "%s%s", LJ_CKPT_CHECKSUM_PREFIX, name);
    return lj_safetensors_metadata(st, key);
}

lj_status lj_ckpt_verify_tensor(const lj_safetensors *st, const lj_st_entry *e, int *missing) {
    const char *want = recorded_checksum(st, e->name);
    if (missing) *missing = want == NULL;
    if (!want) return LJ_OK;
    char have[17];
    checksum_text(XXH3_64bits(e->data, (size_t)(e->end - e->begin)), have);
    if (strcmp(have, want) != 0)
        return lj_fail(LJ_ERR_FORMAT, "%s: tensor '%s' fails its checksum (XXH3-64 %s, recorded %.20s): the file is "
                                      "corrupted; restore it or resume from another iteration",
                       st->path, e->name, have, want);
    return LJ_OK;
}

lj_status lj_ckpt_read_state_json(const char *root, int iteration, char **out) {
    char dir[LJ_PATH_MAX], file[LJ_PATH_MAX];
    LJ_TRY(lj_ckpt_iter_dir(root, iteration, dir));
    char want[17] = "";
    const char *recorded_in = LJ_CKPT_TENSORS_FILE;
    LJ_TRY(lj_sharded_check_metadata(dir));
    if (lj_sharded_present(dir)) { /* the sharded format: metadata.json records it */
        recorded_in = LJ_CKPT_METADATA_FILE;
        LJ_TRY(lj_path_join(file, dir, LJ_CKPT_METADATA_FILE));
        char *meta = NULL;
        LJ_TRY(lj_file_read_all(file, &meta, NULL));
        cJSON *root_json = cJSON_Parse(meta);
        free(meta);
        if (!root_json) return lj_fail(LJ_ERR_FORMAT, "%s: not valid JSON", file);
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root_json, "state.json"), "xxh3_64");
        if (cJSON_IsString(h)) snprintf(want, sizeof want, "%s", h->valuestring);
        cJSON_Delete(root_json);
    } else {
        LJ_TRY(lj_path_join(file, dir, LJ_CKPT_TENSORS_FILE));
        lj_safetensors st;
        LJ_TRY(lj_safetensors_open(&st, file));
        const char *rec = recorded_checksum(&st, LJ_CKPT_STATE_FILE);
        if (rec) snprintf(want, sizeof want, "%s", rec);
        lj_safetensors_close(&st);
    }
    LJ_TRY(lj_path_join(file, dir, LJ_CKPT_STATE_FILE));
    char *text = NULL;
    size_t size = 0;
    LJ_TRY(lj_file_read_all(file, &text, &size));
    char have[17];
    checksum_text(XXH3_64bits(text, size), have);
    lj_status s = LJ_OK;
    if (want[0] && strcmp(have, want) != 0)
        s = lj_fail(LJ_ERR_FORMAT, "%s: fails its checksum (XXH3-64 %s, recorded %s in %s): the file was changed or "
                                   "corrupted after the save; restore it or resume from another iteration",
                    file, have, want, recorded_in);
    cJSON *json = s == LJ_OK ? cJSON_Parse(text) : NULL;
    if (s == LJ_OK && !json) s = lj_fail(LJ_ERR_FORMAT, "%s: not valid JSON", file);
    cJSON_Delete(json);
    if (s != LJ_OK) {
        free(text);
        return s;
    }
    *out = text;
    return LJ_OK;
}

/* ---- the root's lock ------------------------------------------------------------------- */

lj_status lj_ckpt_lock_acquire(lj_ckpt_lock *lock, const char *root) {
    lock->fd = -1;
    LJ_TRY(lj_mkdir_p(root));
    char path[LJ_PATH_MAX];
    LJ_TRY(lj_path_join(path, root, LJ_CKPT_LOCK_FILE));
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return lj_fail(LJ_ERR_IO, "--save %s: cannot create the lock file %s: %s", root, path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        char holder[32] = "";
        ssize_t got = pread(fd, holder, sizeof holder - 1, 0);
        holder[got > 0 ? got : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        close(fd);
        if (err == EWOULDBLOCK)
            return lj_fail(LJ_ERR_IO, "--save %s is in use by another run (process %s holds %s): two runs saving into "
                                      "one directory would replace each other's checkpoints; wait for it to end, or "
                                      "give this run another --save",
                           root, holder[0] ? holder : "?", path);
        return lj_fail(LJ_ERR_IO, "%s: cannot lock: %s", path, strerror(err));
    }
    char pid[32];
    const int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len)
        lj_log_warn("%s: cannot record this process id: %s", path, strerror(errno));
    lock->fd = fd;
    remove_temporaries(root, 1); /* nobody else saves here now */
    return LJ_OK;
}

void lj_ckpt_lock_release(lj_ckpt_lock *lock) {
    if (lock->fd >= 0) close(lock->fd); /* closing the last descriptor drops the flock */
    lock->fd = -1;
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
    const char *text = state_json ? state_json : "{}";
    snprintf(file, plen, "%s/%s", tmp, LJ_CKPT_TENSORS_FILE);
    s = lj_ckpt_write_tensors(file, st, n, meta_keys, meta_values, 2, text);
    if (s == LJ_OK) {
        snprintf(file, plen, "%s/%s", tmp, LJ_CKPT_STATE_FILE);
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
        snprintf(path, plen, "%s/%s/%s", root, de->d_name, LJ_CKPT_METADATA_FILE);
        if (access(path, R_OK) == 0) best = it;
    }
    closedir(d);
    free(path);
    return best;
}

lj_status lj_ckpt_check_save(const char *save) {
    if (lj_mkdir_p(save) != LJ_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", lj_error_message());
        return lj_fail(LJ_ERR_IO, "--save %s: cannot create the checkpoint directory (%s): give a directory that "
                                  "can be written", save, why);
    }
    char probe[LJ_PATH_MAX];
    LJ_TRY(lj_path_join(probe, save, ".ljperf-write-test"));
    FILE *f = fopen(probe, "w");
    if (!f)
        return lj_fail(LJ_ERR_IO, "--save %s: cannot write there (%s): give a directory that can be written", save,
                       strerror(errno));
    fclose(f);
    remove(probe);
    return LJ_OK;
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
    const char *meta_it = s == LJ_OK ? lj_safetensors_metadata(&st, "iteration") : NULL;
    if (s == LJ_OK && meta_it && (strtol(meta_it, NULL, 10) != iteration || !*meta_it))
        s = lj_fail(LJ_ERR_FORMAT, "%s: metadata 'iteration' is %.20s, but the directory is iteration %d (a file "
                                   "copied from another checkpoint?)", file, meta_it, iteration);
    int unchecked = 0;
    for (int i = 0; i < n && s == LJ_OK; i++) {
        int missing = 0;
        s = lj_ckpt_verify_tensor(&st, lj_safetensors_find(&st, tensors[i].name), &missing);
        unchecked += missing;
    }
    if (s == LJ_OK && unchecked)
        lj_log_info("%s: no checksums recorded for %d tensor(s) (saved before ljperf recorded them): loaded unchecked",
                    file, unchecked);
    if (s != LJ_OK) goto close;
    for (int i = 0; i < st.count && warn_unused; i++) {
        int asked = 0;
        for (int j = 0; j < n && !asked; j++) asked = strcmp(st.entries[i].name, tensors[j].name) == 0;
        if (!asked) lj_log_warn("%s: tensor '%s' is not used by this run", file, st.entries[i].name);
    }
    if (state_json && (s = lj_ckpt_read_state_json(root, iteration, &text)) != LJ_OK) goto close;
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
