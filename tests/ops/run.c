/* run.c: the op harness's driver: selects the cases of one backend and mode from the table
 * (op_cases.c), seeds each case's random inputs from its row, runs it and prints the summary. */
#include <stdlib.h>
#include <string.h>

#include "tests/ops/op_cases.h"
#include "train/ops_config.h"

#ifdef LJ_HAVE_CUDA
#include "ops/cuda/cuda_common.h"
#endif

/* FNV-1a over the row's op, backend, dtype, shape and scalar: a case keeps its inputs when
 * other rows are added or moved. */
static uint64_t case_seed(const lj_op_case *c) {
    uint64_t h = 1469598103934665603ull;
    const char *strs[2] = {c->op, c->backend};
    for (int s = 0; s < 2; s++)
        for (const char *p = strs[s]; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    int64_t words[8] = {c->dtype, c->d[0], c->d[1], c->d[2], c->d[3], c->d[4], c->d[5], (int64_t)(c->param * 1e6)};
    for (int i = 0; i < 8; i++) h = (h ^ (uint64_t)words[i]) * 1099511628211ull;
    return h;
}

static int usage(const char *program) {
    fprintf(stderr,
            "usage: %s [check|grad|perf] [--quick] [--op NAME] [--verbose]\n"
            "  check    every op against its reference (default)\n"
            "  grad     backwards against finite differences (CPU)\n"
            "  perf     timings at the benchmark shapes (CUDA)\n"
            "  --quick  small shapes only; --op NAME: the cases of one op; --verbose: PASS lines too\n",
            program);
    return 2;
}

int lj_op_cases_main(int argc, char **argv, const char *program, const char *backend) {
    lj_harness h;
    lj_harness_init(&h, program);
    lj_harness_mode mode = LJ_HARNESS_CHECK;
    const char *only = NULL;
    const char *q = getenv("LJ_TEST_QUICK");
    h.quick = q && q[0] && strcmp(q, "0") != 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "check"))
            mode = LJ_HARNESS_CHECK;
        else if (!strcmp(argv[i], "grad"))
            mode = LJ_HARNESS_GRAD;
        else if (!strcmp(argv[i], "perf"))
            mode = LJ_HARNESS_PERF;
        else if (!strcmp(argv[i], "--quick"))
            h.quick = 1;
        else if (!strcmp(argv[i], "--verbose"))
            h.verbose = 1;
        else if (!strcmp(argv[i], "--op") && i + 1 < argc)
            only = argv[++i];
        else
            return usage(program);
    }
    const int cuda = strcmp(backend, "cuda") == 0;
    lj_ops_config start; /* the device starts with the environment's LJ_CUDNN_LIBRARY, LJ_CUDA_DEBUG */
    lj_ops_config_from_env(0, &start);
    if (cuda && !lj_ops_cuda_open(&start)) {
        fprintf(stderr, "%s: %s\n", program, lj_error_message());
        return 2;
    }
    if (!lj_ops_cpu()) {
        fprintf(stderr, "%s: the CPU backend is not available: %s\n", program, lj_error_message());
        return 2;
    }
    const char *mode_name = mode == LJ_HARNESS_CHECK ? "check" : mode == LJ_HARNESS_GRAD ? "grad" : "perf";
    printf("%s: mode %s, backend %s%s%s%s\n", program, mode_name, backend, h.quick ? ", quick" : "",
           only ? ", op " : "", only ? only : "");
#ifdef LJ_HAVE_CUDA
    if (cuda) printf("%s\n", lj_cuda_cudnn_attention_describe());
#endif
    int ran = 0;
    for (int i = 0; i < lj_op_num_cases; i++) {
        const lj_op_case *c = &lj_op_cases[i];
        if (strcmp(c->backend, backend) != 0 || !(c->modes & mode) || !c->fn) continue;
        if (h.quick && !c->quick) continue;
        if (only && strcmp(only, c->op) != 0) continue;
        snprintf(h.tag, sizeof h.tag, "%s", cuda ? (c->dtype == LJ_DTYPE_BF16 ? " [grad bf16]" : " [grad f32]") : "");
        lj_rng_seed(&h.rng, case_seed(c));
        c->fn(&h, c, mode);
        ran++;
    }
    h.tag[0] = 0;
    printf("%s: %d cases\n", program, ran);
    if (ran == 0) {
        fprintf(stderr, "%s: no %s cases of backend %s%s%s\n", program, mode_name, backend, only ? " for op " : "",
                only ? only : "");
        return 2;
    }
    return lj_harness_summary(&h);
}
