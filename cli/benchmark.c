/* benchmark.c: `ljperf benchmark` (not yet implemented). */
#include <stdio.h>

#include "cli/cli.h"

int lj_cli_benchmark(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ljperf benchmark: not implemented yet\n");
    return 1;
}
