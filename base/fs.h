/* fs.h: directory helpers shared by every writer (checkpoints, HF exports, datasets) and the
 * one path length limit of ljperf with a join that fails instead of truncating. */
#ifndef LJ_FS_H
#define LJ_FS_H

#include "base/base.h"

/* Every path ljperf builds fits in LJ_PATH_MAX bytes (NUL included): Linux's PATH_MAX. */
#define LJ_PATH_MAX 4096

/* buf[LJ_PATH_MAX] = dir + "/" + name (no slash added when dir ends in one or is empty).
 * Errors: LJ_ERR_ARG naming the path when it does not fit (buf is then ""). */
lj_status lj_path_join(char *buf, const char *dir, const char *name);

/* buf[LJ_PATH_MAX] = the printf formatting of fmt. Errors: LJ_ERR_ARG when it does not fit. */
lj_status lj_path_format(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Removes `path` and everything below it (rm -rf; symlinks are removed, not followed). A
 * missing path is not an error. Errors: LJ_ERR_IO naming the entry that could not go. */
lj_status lj_dir_remove(const char *path);
/* The same without touching the error message: 0, or the errno value of the failure. */
int lj_dir_remove_quiet(const char *path);

/* fsyncs directory `path` so that renames and creations inside it are durable.
 * Errors: LJ_ERR_IO naming the directory. */
lj_status lj_dir_fsync(const char *path);

/* Moves the complete directory `tmp` to `final` atomically: a plain rename when `final`
 * does not exist, else an atomic exchange (Linux renameat2 RENAME_EXCHANGE; elsewhere
 * rename the old one aside first) followed by removing the old contents. fsyncs the parent
 * of `final`. Errors: LJ_ERR_IO naming both paths; on error `final` is unchanged. */
lj_status lj_dir_install(const char *tmp, const char *final);

#endif
