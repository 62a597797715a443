/* reference.c: PyTorch's measured numbers and the goals against them (reference.h). */
#include "bench/reference.h"

#include <string.h>

/* docs/reference.md, "PyTorch on one H200" (PyTorch 2.11, transformers 5.17, bf16 autocast,
 * fused AdamW, SDPA; one H200, or two with FSDP2: bf16 params, fp32 reduce, torch.compile per
 * layer). The project's goals: >= 1.25x torch.compile at no more memory (llama3.2-1b, 3b),
 * >= 1.3x full checkpointing (llama3-8b on one GPU), >= 1.2x FSDP2 (two GPUs; for llama3-8b at
 * no more memory). */
static const lj_reference g_refs[] = {
    {"llama3.2-1b", 4096, 1, 4, "torch.compile", 46900, 0.428, 52.7, 58600, 1.25, 1},
    {"llama3.2-3b", 4096, 1, 2, "torch.compile", 18600, 0.443, 75.9, 23300, 1.25, 1},
    {"llama3-8b", 4096, 1, 1, "eager, full checkpointing", 6480, 0.337, 120.8, 8400, 1.3, 0},
    {"llama3-8b", 4096, 2, 2, "FSDP2 + torch.compile", 9390, 0.489, 106.5, 11300, 1.2, 1},
    {"llama3.2-1b", 4096, 2, 4, "FSDP2 + torch.compile", 50500, 0.461, 0.0, 60600, 1.2, 0},
};

const lj_reference *lj_reference_find(const char *model, int seq_length, int world_size) {
    for (size_t i = 0; i < sizeof g_refs / sizeof g_refs[0]; i++)
        if (!strcmp(g_refs[i].model, model) && g_refs[i].seq_length == seq_length && g_refs[i].world_size == world_size)
            return &g_refs[i];
    return NULL;
}

int lj_reference_speed_met(const lj_reference *r, double tokens_per_s) { return tokens_per_s >= r->goal_tokens_per_s; }

int lj_reference_memory_met(const lj_reference *r, double peak_bytes) {
    return !r->memory_goal || peak_bytes <= r->peak_gib * 1024.0 * 1024.0 * 1024.0;
}

void lj_reference_print(const lj_reference *r, double tokens_per_s, double peak_bytes, int micro_batch_size, FILE *f) {
    const double gib = peak_bytes / (1024.0 * 1024.0 * 1024.0);
    fprintf(f, "against PyTorch (docs/reference.md: %s, %d x H200, micro-batch %d; this run: micro-batch %d):\n",
            r->pytorch_run, r->world_size, r->micro_batch_size, micro_batch_size);
    fprintf(f, "  %-20s %-14s %-22s %-18s %s\n", "metric", "PyTorch", "goal", "ljperf", "");
    char goal[48], mine[48];
    snprintf(goal, sizeof goal, ">= %.0f (%gx)", r->goal_tokens_per_s, r->goal_ratio);
    snprintf(mine, sizeof mine, "%.0f (%.2fx)", tokens_per_s, tokens_per_s / r->tokens_per_s);
    fprintf(f, "  %-20s %-14.0f %-22s %-18s %s\n", "tokens/s per GPU", r->tokens_per_s, goal, mine,
            lj_reference_speed_met(r, tokens_per_s) ? "met" : "not met");
    if (r->peak_gib > 0.0) {
        char theirs[32];
        snprintf(theirs, sizeof theirs, "%.1f GiB", r->peak_gib);
        snprintf(goal, sizeof goal, r->memory_goal ? "<= %.1f GiB" : "(none)", r->peak_gib);
        snprintf(mine, sizeof mine, "%.2f GiB", gib);
        fprintf(f, "  %-20s %-14s %-22s %-18s %s\n", "peak memory per GPU", theirs, goal, mine,
                !r->memory_goal ? "" : lj_reference_memory_met(r, peak_bytes) ? "met" : "not met");
    }
}
