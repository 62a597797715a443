/* benchmark_vl.h: `ljperf benchmark` of a Qwen3-VL model (config/vl.h): timed training steps of
 * the vision tower and the decoder together on synthetic samples, each one image of a stated
 * resolution and a number of text tokens, and the metrics: decoder tokens/s, samples/s, TFLOP/s
 * and MFU counting the ViT's FLOPs, step-time percentiles, peak memory measured and planned.
 *
 * A sample is one row of the micro-batch: <|vision_start|>, the image's pads (its merged tokens,
 * h*w/m^2 for the grid the processor gives the stated size: smart_resize, data/image.h),
 * <|vision_end|>, then the text tokens (uniform random ids below the first special id), so
 * T = image tokens + 2 + text tokens. The targets are the next token at the text positions
 * (from <|vision_end|> on). The images are random patches in [-1, 1], made once; each step
 * uploads them with the batch (lj_vl_set_batch, as a training step does) and runs zero-grad,
 * the tower's and the decoder's forward and backward, the global norm and AdamW over both
 * (lj_vl_optimizer_step). */
#ifndef LJ_BENCHMARK_VL_H
#define LJ_BENCHMARK_VL_H

#include "config/vl.h"
#include "data/image.h"
#include "model/linear.h"
#include "ops/ops.h"

/* The most samples a step of the Qwen3-VL forms of plan, benchmark and train takes (the text
 * planner's bound, LJ_PLANNER_MAX_MICRO_BATCH). */
#define LJ_VL_MAX_MICRO_BATCH 1024

typedef struct {
    lj_vl_config model;
    const lj_ops *ops;
    int micro_batch_size;   /* samples per micro-batch */
    int accumulation;       /* micro-batches per optimizer step (--global-batch-size / micro-batch); 0 or 1: one */
    int img_h, img_w;       /* the synthetic images' size in pixels, before smart_resize */
    int text_tokens;        /* text tokens per sample, after the image */
    int train_iters;        /* timed steps */
    int warmup_iters;       /* untimed steps first */
    uint64_t seed;
    int progress;           /* 1: a progress line on stderr */
    double cpu_peak_tflops; /* CPU: the sgemm rate to count MFU against; 0 = measure it */
    const char *recompute;  /* the decoder's recompute: "none" (NULL), "selective", "full" on every layer,
                               or "auto": plan/planner_vl.h's choice for the device's memory */
    size_t device_memory_bytes, margin_bytes; /* "auto" plans for these when device_memory_bytes > 0
                                                 (--device-memory, --margin); else the device's */
    int vision_recompute;   /* the tower's blocks' recompute (--recompute-vision): 0 none, 1 full, or
                               LJ_VL_VISION_RECOMPUTE_AUTO (plan/planner_vl.h): none unless "auto" needs it */
    lj_linear_recipe_kind linear_recipe; /* --fp8-format: both towers' block linears in FP8 (model/vl.h); 0: the act dtype */
    lj_linear_fp8_options fp8;           /* its settings (used with LJ_LINEAR_RECIPE_FP8) */
} lj_vl_bench_config;

/* The shape of one sample: the image's grid (smart_resize of img_h x img_w with the model's patch
 * and merge sizes and Qwen3-VL's min/max pixels), its tokens and the row length T. */
typedef struct {
    lj_grid_thw grid;
    int patches, image_tokens, seq_length;
} lj_vl_bench_shape;

/* Errors: LJ_ERR_ARG naming --img-h and --img-w for a size smart_resize refuses (an aspect ratio
 * above 200), or --text-tokens when T exceeds the decoder's max_position_embeddings. */
lj_status lj_vl_bench_shape_of(const lj_vl_config *cfg, int img_h, int img_w, int text_tokens, lj_vl_bench_shape *s);

/* Training FLOPs of one sample (docs/qwen3-vl.md "The FLOP count"): the tower's on its image
 * (lj_vision_flops_per_frame) and the decoder's on its row (T * lj_config_flops_per_token). */
void lj_vl_bench_flops(const lj_vl_config *cfg, const lj_vl_bench_shape *s, double *vit, double *llm);

typedef struct {
    lj_vl_bench_shape shape;
    double tokens_per_s;       /* decoder tokens (image pads included) per second */
    double samples_per_s;
    double tflops, mfu, peak_tflops;
    const char *peak_source;
    double vit_flops_per_sample, llm_flops_per_sample;
    double step_ms_median, step_ms_p90;
    double loss_first, loss_last;
    size_t planned_bytes, vision_planned_bytes; /* the plan (+ what a GPU held before it), the tower's part */
    size_t fp8_planned_bytes, vision_fp8_planned_bytes; /* of the plan, the FP8 recipes' buffers ("fp8.*" and
                                                          "vision.fp8.*": state, casts' scratch, workspace) */
    int fp8_linears, vision_fp8_linears; /* FP8 linears of the decoder's and the tower's blocks (0: bf16) */
    size_t measured_bytes;     /* device used (CUDA) or peak RSS (CPU) */
    char recompute[96];        /* the decoder's recompute that ran: "none (28 layers)", "8 full + 4 selective + ..." */
    int vision_recompute;      /* the tower's that ran: 0 none, 1 full */
} lj_vl_bench_result;

/* Runs it. Errors: shape errors, an unknown cfg->recompute (LJ_ERR_ARG naming --recompute), the plan
 * does not fit (under "auto": LJ_ERR_OOM with the smallest peak), device errors. */
lj_status lj_vl_bench_run(lj_vl_bench_config *cfg, lj_vl_bench_result *res);
void lj_vl_bench_print(const lj_vl_bench_config *cfg, const lj_vl_bench_result *res, FILE *f);
/* One JSON object (the keys of lj_bench_write_json where they mean the same, plus the sample's
 * shape, samples_per_s and the two FLOP terms). Errors: LJ_ERR_IO naming --json. */
lj_status lj_vl_bench_write_json(const lj_vl_bench_config *cfg, const lj_vl_bench_result *res, const char *path);

#endif
