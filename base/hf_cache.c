/* hf_cache.c: the Hugging Face hub cache, read offline (hf_cache.h). */
#include "base/hf_cache.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int part_ok(const char *s, size_t n) {
    if (n == 0 || s[0] == '-' || s[0] == '.' || s[n - 1] == '-' || s[n - 1] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '-' && c != '_' && c != '.') return 0;
        if (i > 0 && (c == '-' || c == '.') && s[i - 1] == c) return 0; /* "--" or ".." */
    }
    return 1;
}

int lj_hf_repo_id_like(const char *s) {
    const char *slash = strchr(s, '/');
    const size_t n = strlen(s);
    if (!slash || strchr(slash + 1, '/') || n > 96) return 0;
    return part_ok(s, (size_t)(slash - s)) && part_ok(slash + 1, n - (size_t)(slash - s) - 1);
}

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

lj_status lj_hf_cache_dir(char *buf, size_t buflen) {
    const char *v;
    int n;
    if ((v = env("HF_HUB_CACHE")) || (v = env("HUGGINGFACE_HUB_CACHE"))) n = snprintf(buf, buflen, "%s", v);
    else if ((v = env("HF_HOME"))) n = snprintf(buf, buflen, "%s/hub", v);
    else if ((v = env("XDG_CACHE_HOME"))) n = snprintf(buf, buflen, "%s/huggingface/hub", v);
    else if ((v = env("HOME"))) n = snprintf(buf, buflen, "%s/.cache/huggingface/hub", v);
    else return lj_fail(LJ_ERR_IO, "no Hugging Face cache: none of HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME, HOME is set");
    if (n < 0 || (size_t)n >= buflen) return lj_fail(LJ_ERR_ARG, "the Hugging Face cache's path is too long: %s", v);
    return LJ_OK;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

lj_status lj_hf_cache_snapshot(const char *repo_id, const char *flag, char *buf, size_t buflen) {
    char cache[4096], repo[4096 + 128], path[8192];
    LJ_TRY(lj_hf_cache_dir(cache, sizeof cache));
    const char *slash = strchr(repo_id, '/');
    LJ_ASSERT(slash != NULL, "lj_hf_cache_snapshot: %s is not ORG/NAME", repo_id);
    snprintf(repo, sizeof repo, "%s/models--%.*s--%s", cache, (int)(slash - repo_id), repo_id, slash + 1);
    snprintf(path, sizeof path, "%s/snapshots", repo);
    if (!is_dir(path))
        return lj_fail(LJ_ERR_IO, "%s %s: no such file or directory, and not in the Hugging Face cache (no %s; ljperf "
                                  "reads the cache offline: download it first, e.g. `hf download %s`)",
                       flag, repo_id, path, repo_id);
    char rev[256] = "";
    snprintf(path, sizeof path, "%s/refs/main", repo);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(rev, sizeof rev, f)) rev[0] = '\0';
        fclose(f);
        rev[strcspn(rev, " \t\r\n")] = '\0';
        if (!rev[0] || strchr(rev, '/') || !strcmp(rev, ".") || !strcmp(rev, ".."))
            return lj_fail(LJ_ERR_IO, "%s %s: %s holds no commit hash", flag, repo_id, path);
    } else { /* no refs/main: the only snapshot */
        snprintf(path, sizeof path, "%s/snapshots", repo);
        DIR *d = opendir(path);
        int count = 0;
        char other[256] = "";
        for (struct dirent *e; d && (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            if (count++ == 0) snprintf(rev, sizeof rev, "%s", e->d_name);
            else snprintf(other, sizeof other, "%s", e->d_name);
        }
        if (d) closedir(d);
        if (count == 0)
            return lj_fail(LJ_ERR_IO, "%s %s: %s is empty (an interrupted download? download it again)", flag, repo_id,
                           path);
        if (count > 1)
            return lj_fail(LJ_ERR_IO, "%s %s: %s holds %d revisions (%s, %s, ...) and %s/refs/main is missing: give the "
                                      "snapshot directory itself",
                           flag, repo_id, path, count, rev, other, repo);
    }
    snprintf(path, sizeof path, "%s/snapshots/%s", repo, rev);
    if (!is_dir(path))
        return lj_fail(LJ_ERR_IO, "%s %s: %s/refs/main names revision %s, but %s is missing (download it again)", flag,
                       repo_id, repo, rev, path);
    const int n = snprintf(buf, buflen, "%s", path);
    if (n < 0 || (size_t)n >= buflen) return lj_fail(LJ_ERR_ARG, "%s %s: the path is too long: %s", flag, repo_id, path);
    return LJ_OK;
}
