/* train.c: `ljperf train` (not yet implemented). */
#include <stdio.h>

#include "cli/cli.h"

int lj_cli_train(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ljperf train: not implemented yet\n");
    return 1;
}
