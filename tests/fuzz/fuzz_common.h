/* fuzz_common.h: what the fuzz targets share: the input written to a file in a private
 * directory (the parsers under test read paths), and the messages of refused inputs kept quiet. */
#ifndef LJ_FUZZ_COMMON_H
#define LJ_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

static char lj_fuzz_dir[512];

/* A directory of this process for the input and output files; removed at exit. */
static void lj_fuzz_remove_dir(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", lj_fuzz_dir);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", lj_fuzz_dir);
}

static const char *lj_fuzz_path(const char *name) {
    static char path[600];
    if (!lj_fuzz_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(lj_fuzz_dir, sizeof lj_fuzz_dir, "%s/ljperf-fuzz.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(lj_fuzz_dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(lj_fuzz_remove_dir);
        lj_log_set_quiet(1);
    }
    snprintf(path, sizeof path, "%s/%s", lj_fuzz_dir, name);
    return path;
}

/* Writes data[0..size) to the file `name` of the fuzz directory; returns its path. */
static const char *lj_fuzz_write(const char *name, const uint8_t *data, size_t size) {
    const char *path = lj_fuzz_path(name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
        perror("fuzz: writing the input");
        abort();
    }
    return path;
}

#endif
