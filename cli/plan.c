/* plan.c: `ljperf plan` (not yet implemented). */
#include <stdio.h>

#include "cli/cli.h"

int lj_cli_plan(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ljperf plan: not implemented yet\n");
    return 1;
}
