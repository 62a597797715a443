/* prepare.c: `ljperf prepare` (not yet implemented). */
#include <stdio.h>

#include "cli/cli.h"

int lj_cli_prepare(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ljperf prepare: not implemented yet\n");
    return 1;
}
