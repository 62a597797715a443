/* fs.c: directory helpers (recursive remove, fsync, atomic install) and the one path join. */
#define _GNU_SOURCE /* renameat2, nftw */
#include "base/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

lj_status lj_path_format(char *buf, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf, LJ_PATH_MAX, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= LJ_PATH_MAX) {
        buf[0] = '\0';
        return lj_fail(LJ_ERR_ARG, "path too long (%d bytes, the limit is %d): %.80s...", n, LJ_PATH_MAX - 1, fmt);
    }
    return LJ_OK;
}

lj_status lj_path_join(char *buf, const char *dir, const char *name) {
    const size_t d = strlen(dir);
    const int slash = d > 0 && dir[d - 1] != '/';
    const size_t n = d + (size_t)slash + strlen(name);
    if (n >= LJ_PATH_MAX) {
        buf[0] = '\0';
        return lj_fail(LJ_ERR_ARG, "%.80s%s%.80s: path too long (%zu bytes, the limit is %d)", dir, slash ? "/" : "",
                       name, n, LJ_PATH_MAX - 1);
    }
    memcpy(buf, dir, d);
    if (slash) buf[d] = '/';
    memcpy(buf + d + slash, name, strlen(name) + 1);
    return LJ_OK;
}

/* ---- directory helpers ----------------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

int lj_dir_remove_quiet(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT ? 0 : errno;
    if (!S_ISDIR(sb.st_mode)) return unlink(path) == 0 ? 0 : errno;
    return nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : (errno ? errno : EIO);
}

lj_status lj_dir_remove(const char *path) {
    int err = lj_dir_remove_quiet(path);
    return err ? lj_fail(LJ_ERR_IO, "%s: cannot remove: %s", path, strerror(err)) : LJ_OK;
}

lj_status lj_dir_fsync(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return lj_fail(LJ_ERR_IO, "%s: cannot open directory: %s", path, strerror(errno));
    int rc = fsync(fd), err = errno;
    close(fd);
    /* Some file systems cannot fsync a directory (EINVAL); their renames are still ordered. */
    if (rc != 0 && err != EINVAL) return lj_fail(LJ_ERR_IO, "%s: fsync failed: %s", path, strerror(err));
    return LJ_OK;
}

static char *parent_of(const char *path) {
    char *dir = lj_strdup(path);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') dir[--n] = '\0';
    char *slash = strrchr(dir, '/');
    if (!slash) {
        free(dir);
        return lj_strdup(".");
    }
    slash[slash == dir ? 1 : 0] = '\0';
    return dir;
}

static lj_status fsync_parent(const char *path) {
    char *dir = parent_of(path);
    lj_status s = lj_dir_fsync(dir);
    free(dir);
    return s;
}

lj_status lj_dir_install(const char *tmp, const char *final) {
    LJ_TRY(lj_dir_fsync(tmp));
    if (rename(tmp, final) == 0) return fsync_parent(final);
    if (errno != ENOTEMPTY && errno != EEXIST)
        return lj_fail(LJ_ERR_IO, "%s: cannot rename %s into place: %s", final, tmp, strerror(errno));
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
        /* `tmp` now holds the old contents. */
        LJ_TRY(fsync_parent(final));
        int err = lj_dir_remove_quiet(tmp);
        if (err) lj_log_warn("%s: cannot remove the replaced directory: %s", tmp, strerror(err));
        return LJ_OK;
    }
    if (errno != EINVAL && errno != ENOSYS)
        return lj_fail(LJ_ERR_IO, "%s: cannot exchange with %s: %s", final, tmp, strerror(errno));
    /* No atomic exchange on this file system: move the old one aside, then the new one in. */
    size_t len = strlen(final) + 32;
    char *old = lj_malloc(len);
    snprintf(old, len, "%s.old.%d", final, (int)getpid());
    lj_status s = LJ_OK;
    if (rename(final, old) != 0) {
        s = lj_fail(LJ_ERR_IO, "%s: cannot move aside to %s: %s", final, old, strerror(errno));
    } else if (rename(tmp, final) != 0) {
        s = lj_fail(LJ_ERR_IO, "%s: cannot rename %s into place: %s", final, tmp, strerror(errno));
        rename(old, final);
    } else {
        s = fsync_parent(final);
        int err = lj_dir_remove_quiet(old);
        if (err) lj_log_warn("%s: cannot remove the replaced directory: %s", old, strerror(err));
    }
    free(old);
    return s;
}
