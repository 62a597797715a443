/* main.c: the `ljperf` binary: dispatches to one subcommand. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "cli/cli.h"
#include "parallel/dist.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ljperf <command> [flags]\n"
            "\n"
            "commands:\n"
            "  prepare    tokenize .txt/.jsonl text into a Megatron-LM indexed dataset (.bin/.idx)\n"
            "  train      train a Llama model (CPU or CUDA; flags use Megatron-LM names)\n"
            "  benchmark  measure tokens/s, TFLOP/s, MFU and peak memory\n"
            "  plan       print the static memory plan and the recompute recommendation\n"
            "  generate   sample text from a checkpoint\n"
            "  serve      an OpenAI-compatible inference server (continuous batching, paged KV cache)\n"
            "  bench      `bench serve`: a benchmark client of an OpenAI-compatible server (vLLM's bench serve)\n"
            "  report     draw a run (loss, throughput, memory plan, ablation) as an offline HTML page\n"
            "\n"
            "`ljperf <command> --help` lists a command's flags.\n");
}

int lj_cli_error(const char *cmd) {
    /* One of several ranks: every rank that fails says so (a rank's own file or device may be
     * the cause), and ranks other than 0 name themselves. */
    lj_dist_env env;
    lj_set_command(cmd);
    if (lj_dist_env_detect(&env) == LJ_OK) lj_error_print(env.rank, env.world_size);
    else lj_error_print(0, 1);
    return 1;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
        printf("ljperf %s (commit %s)\n", lj_version(), lj_build_commit());
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    static const struct { const char *name; int (*run)(int, char **); } cmds[] = {
        {"prepare", lj_cli_prepare}, {"train", lj_cli_train}, {"benchmark", lj_cli_benchmark},
        {"plan", lj_cli_plan},       {"generate", lj_cli_generate}, {"report", lj_cli_report},
        {"serve", lj_cli_serve},     {"bench", lj_cli_bench},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(argv[1], cmds[i].name) == 0) {
            lj_set_command(cmds[i].name);
            return cmds[i].run(argc - 2, argv + 2);
        }
    fprintf(stderr, "ljperf: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
