/* cli.h: one entry point per subcommand (one file each in cli/). Each takes the arguments
 * after the subcommand name and returns the process exit status (0 ok, 1 error, 2 usage).
 * Errors are printed as "ljperf <cmd>: <message>" with the file and field named. */
#ifndef LJ_CLI_H
#define LJ_CLI_H

int lj_cli_prepare(int argc, char **argv);
int lj_cli_train(int argc, char **argv);
int lj_cli_benchmark(int argc, char **argv);
int lj_cli_plan(int argc, char **argv);
int lj_cli_generate(int argc, char **argv);

/* Prints "ljperf <cmd>: <lj_error_message()>" to stderr and returns 1. */
int lj_cli_error(const char *cmd);

#endif
