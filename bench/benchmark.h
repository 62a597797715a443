/* benchmark.h: the benchmark harness behind `ljperf benchmark`: timed training steps on
 * synthetic (or real) tokens, and the metrics the field reports: tokens/s, TFLOP/s, MFU,
 * step-time percentiles and peak memory, measured and as planned. */
#ifndef LJ_BENCHMARK_H
#define LJ_BENCHMARK_H

#include "model/model.h"
#include "optim/optim.h"
#include "parallel/dp.h"

typedef struct {
    lj_model_config model;
    const lj_ops *ops;
    int micro_batch_size;
    int accumulation;       /* micro-batches per step and rank (--global-batch-size / (micro-batch x ranks));
                               0 or 1: one, the step as one lj_dp_train_step */
    int seq_length;
    int train_iters;        /* timed steps */
    int warmup_iters;       /* untimed steps first */
    int fused;
    lj_linear_recipe_kind linear_recipe; /* --fp8-format: LJ_LINEAR_RECIPE_FP8 (model/linear.h) */
    lj_linear_fp8_options fp8;      /* its settings */
    lj_dtype exp_avg_dtype;         /* AdamW's moments as stored (--exp-avg-dtype, --exp-avg-sq-dtype): */
    lj_dtype exp_avg_sq_dtype;      /* LJ_DTYPE_F32 (the default) or LJ_DTYPE_BF16 */
    uint8_t recompute[LJ_MAX_LAYERS];
    uint64_t seed;
    lj_doc_mask doc_mask;   /* --reset-position-ids, --reset-attention-mask, --eod-mask-loss (with --data); its
                               eod_token: the model's EOS, replaced by lj_bench_run with the separator the
                               datasets record (lj_loader_eod_token) */
    int num_data_args;      /* --data: real tokens instead of synthetic ones */
    char **data_args;
    int progress;           /* 1: a progress line on stderr */
    const char *save;       /* --save DIR: the training state saved every save_interval steps (ljperf train's
                               checkpoint, no HF export), the steps' stalls for it measured; NULL: none */
    int save_interval;      /* --save-interval N (>= 1) */
    int async_save;         /* --async-save: copied to host memory, written by a background thread */
    double cpu_peak_tflops; /* CPU: the sgemm rate to count MFU against; 0 = measure it (and keep it here) */
    lj_dp *dp;              /* the data-parallel ranks (lj_dp_init; a world of one without a launcher) */
    int zero_stage_asked;   /* the ZeRO stage asked for (deepspeed/ names: 3), reported; dp->zero_stage is
                               what runs (stage 3 on one rank shards nothing and runs as stage 0) */
} lj_bench_config;

typedef struct {
    double tokens_per_s;             /* all ranks together */
    double tokens_per_s_per_device;
    double tflops;           /* achieved model TFLOP/s (docs/reference.md FLOP convention) */
    double mfu;              /* tflops / peak_tflops */
    double peak_tflops;      /* bf16 dense peak of the device, or the measured sgemm rate on the CPU */
    const char *peak_source; /* where peak_tflops comes from */
    double step_ms_median, step_ms_p90;
    double loss_first, loss_last;
    size_t planned_bytes;    /* the plan, plus on a GPU what the process held before allocating it
                                (CUDA context, cuBLASLt workspace), measured at start-up */
    size_t measured_bytes;   /* whole process: device used (CUDA) or peak RSS (CPU) */
    double flops_per_token;
    /* with document masking, over the timed steps' sequences (data/docmask.h's documents): */
    double docs_per_sequence;  /* documents (or parts of one) per sequence */
    double attention_fraction; /* sum over documents of l(l+1)/2, over T(T+1)/2: the attention work left
                                  by --reset-attention-mask against full causal attention */
    /* with optimizer offload, ms per timed step: gradients to the host and their norm, the host
       AdamW, parameters to the device (wall time of each, inside the step time) */
    int offloaded; /* the optimizer state was in host memory (not on the CPU backend: already there) */
    double offload_ms[3];
    /* with --save: the saves during the timed steps and the time the step loop was held by each
       (the copy to host memory with --async-save, the whole write without), inside the step time */
    int saves;
    double save_stall_mean_s, save_stall_max_s;
} lj_bench_result;

/* Device memory in use by the whole process: total - free on a GPU (cudaMemGetInfo), the peak
 * resident set (VmHWM) on the CPU. */
size_t lj_bench_device_used_bytes(const lj_ops *ops);

/* The steps of a benchmark loop (the text and the Qwen3-VL benchmarks): `warmup` untimed steps,
 * then `timed` timed ones. lj_bench_steps_record takes step s (1-based) with its seconds, mean
 * loss and rate (`rate` `unit` per second, for the progress line on stderr): the losses of the
 * first and the last step, the device memory in use at the first timed and the last step (the
 * most of it, lj_bench_device_used_bytes), the timed steps' milliseconds. lj_bench_steps_finish
 * ends the progress line and gives the median and p90 step time (ms); it frees the steps. */
typedef struct {
    const lj_ops *ops;
    int warmup, timed, progress;
    double *step_ms;     /* [timed] */
    double timed_sec;    /* the timed steps' seconds */
    double loss_first, loss_last;
    size_t used_bytes;   /* the most device memory in use seen */
} lj_bench_steps;
void lj_bench_steps_init(lj_bench_steps *s, const lj_ops *ops, int warmup, int timed, int progress);
void lj_bench_steps_record(lj_bench_steps *s, int step, double sec, double loss, double rate, const char *unit);
void lj_bench_steps_finish(lj_bench_steps *s, double *median_ms, double *p90_ms);

/* The peak MFU counts against, TFLOP/s: 989 (bf16 dense, H100/H200 SXM: docs/reference.md) on a
 * GPU; on the CPU the OpenBLAS sgemm rate at 1024^3, measured once into *cpu_peak_tflops (kept
 * when already above 0). *source says which. */
double lj_bench_peak_tflops(const lj_ops *ops, double *cpu_peak_tflops, const char **source);

/* Runs the benchmark. Errors: plan does not fit, data errors, device errors. */
lj_status lj_bench_run(lj_bench_config *cfg, lj_bench_result *res);

/* Prints the result table (metric / value rows). */
void lj_bench_print(const lj_bench_config *cfg, const lj_bench_result *res, FILE *f);

/* "ZeRO stage S" for the report, or "ZeRO stage 3: one rank, nothing to shard" when the stage
 * asked for is not the one that runs. buf: at least 64 bytes. */
void lj_bench_describe_stage(const lj_bench_config *cfg, char *buf, size_t len);

/* Writes the result as one JSON object (keys as in scripts/gpu/pytorch_ref.py). */
lj_status lj_bench_write_json(const lj_bench_config *cfg, const lj_bench_result *res, const char *path);

#endif
