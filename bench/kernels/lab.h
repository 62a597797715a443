/* lab.h: what every kernel-lab program shares (bench/kernels/kl_*.cu). A program holds the
 * numbered versions of one hot kernel of the CUDA backend, each a standalone copy of the kernel
 * as it stood at a commit (the comment above each version says what changed and the effect
 * measured then, from bench/results/); the last version is the backend's current kernel. Each
 * version is checked against the reference (the CPU backend's op, or the current CUDA op where
 * the CPU would take minutes) and timed against the card's ceilings with the op harness's one set
 * of check and timing helpers (tests/ops/harness.h).
 *
 *   kl_<kernel>               every version
 *   kl_<kernel> --version N   version N only
 */
#ifndef LJ_BENCH_KERNELS_LAB_H
#define LJ_BENCH_KERNELS_LAB_H

#include <stdlib.h>
#include <string.h>

#include "tests/ops/harness_cuda.cuh"
#include "train/ops_config.h"

/* Parses argv: returns the version asked (1..num_versions) or 0 for all; exits with a usage
 * line (status 2) on anything else. Starts the CUDA backend and prints the card. */
static inline int lj_lab_start(lj_harness *h, const char *program, int num_versions, int argc, char **argv,
                               const lj_ops **ops) {
    lj_harness_init(h, program);
    int version = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--version") && i + 1 < argc) {
            version = atoi(argv[++i]);
            if (version >= 1 && version <= num_versions) continue;
        }
        fprintf(stderr, "usage: %s [--version N]   (N = 1..%d; default: every version)\n", program, num_versions);
        exit(2);
    }
    lj_ops_config cfg; /* the default configuration, started with the environment's cuDNN path */
    lj_ops_config_from_env(0, &cfg);
    cfg.attention = LJ_ATTENTION_AUTO;
    *ops = lj_ops_cuda_open(&cfg);
    if (!*ops) {
        fprintf(stderr, "%s: %s\n", program, lj_error_message());
        exit(2);
    }
    lj_harness_print_device(program);
    return version;
}

#endif
