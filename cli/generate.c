/* generate.c: `ljperf generate` (not yet implemented). */
#include <stdio.h>

#include "cli/cli.h"

int lj_cli_generate(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ljperf generate: not implemented yet\n");
    return 1;
}
