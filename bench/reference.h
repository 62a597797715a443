/* reference.h: PyTorch's measured numbers on H200s (docs/reference.md, "PyTorch on one H200"
 * and its FSDP2 paragraph) and the project's goals against them, so that `ljperf benchmark` can
 * print its result next to them. */
#ifndef LJ_REFERENCE_H
#define LJ_REFERENCE_H

#include <stdio.h>

typedef struct {
    const char *model;         /* preset name (model.name) */
    int seq_length;
    int world_size;            /* GPUs */
    int micro_batch_size;      /* PyTorch's */
    const char *pytorch_run;   /* what PyTorch ran, e.g. "FSDP2 + torch.compile" */
    double tokens_per_s;       /* per GPU */
    double mfu;                /* 0..1 */
    double peak_gib;           /* PyTorch's peak memory per GPU, GiB (0: not recorded) */
    double goal_tokens_per_s;  /* per GPU */
    double goal_ratio;         /* the goal as a multiple of tokens_per_s */
    int memory_goal;           /* 1: the goal also asks for at most PyTorch's memory */
} lj_reference;

/* The reference row for a run of `model` at `seq_length` on `world_size` GPUs, or NULL when
 * docs/reference.md has none. */
const lj_reference *lj_reference_find(const char *model, int seq_length, int world_size);

/* Whether a run with `tokens_per_s` per GPU and `peak_bytes` per GPU meets r's speed goal, and
 * its memory goal (1 when r has none). */
int lj_reference_speed_met(const lj_reference *r, double tokens_per_s);
int lj_reference_memory_met(const lj_reference *r, double peak_bytes);

/* Prints the comparison of a run (tokens/s per GPU, peak memory per GPU in bytes, its
 * micro-batch) with reference `r` and its goals, as a small table, each goal marked met or not
 * met. */
void lj_reference_print(const lj_reference *r, double tokens_per_s, double peak_bytes, int micro_batch_size, FILE *f);

#endif
