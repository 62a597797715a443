/* vl_train.h: the training loop of the Qwen3-VL models (config/vl.h) on the configured backend
 * (the CPU, or CUDA with bf16 activations and parameters, f32 master weights and moments, the
 * table's gradient dtype): the multimodal loader (data/mm_loader.h, images decoded and
 * preprocessed on its host threads, the patches copied to the device per step) feeding the
 * vision tower and the decoder (model/vl.h; both in one static memory plan, plan/build.h
 * lj_vl_build), AdamW over both towers with global-norm clipping and the LR schedule,
 * Megatron-Bridge's freezing options, a log line and JSON lines, checkpoints and exact resume.
 *
 * Packed rows: every sample of a row is its own document (its MRoPE ids restart at 0, from the
 * loader, and attention does not cross it: the decoder's document masking).
 *
 * An iteration is global_batch_size / micro_batch_size = A micro-batches (gradient accumulation):
 * the gradients are zeroed once, and every micro-batch's per-token losses are scaled by 1 / N, N
 * the trained tokens of all A (the loader holds the A batches, so N is known before the first
 * backward). The loss is so the mean over the global batch's trained tokens, as in the text loop
 * (a mean over the global batch), and A micro-batches of B rows make the update of one of A·B rows.
 *
 * Recompute (--recompute): the decoder's layers replay their forward in the backward; the losses
 * and gradients are those of a run without it, bit for bit on the CPU.
 *
 * Freezing (Megatron-Bridge's Qwen3-VL provider options): freeze_language_model = the decoder
 * (embeddings, layers, final norm, lm_head); freeze_vision_model = the ViT (patch embedding,
 * position grid, blocks); freeze_vision_projection = the final merger and the DeepStack mergers.
 * A frozen part gets no update and does not count in the gradient norm.
 *
 * Checkpoint (checkpoint/checkpoint.h, ROOT/iter_NNNNNNN/state.safetensors + state.json): the
 * tensors text.params, text.adam.m, text.adam.v ([text layout total] f32, config/config.h's
 * layout) and vision.params, vision.adam.m, vision.adam.v ([vision layout total] f32,
 * config/vl.h's layout); state.json holds the iteration, the loader's position and the run's
 * shape; ITER/hf/ is the Hugging Face export (io/hf_vl.h, bf16 unless hf_fp32). A checkpoint of
 * a run with the same --seed, --seq-length and --micro-batch-size resumes exactly on the CPU (the
 * same losses as an uninterrupted run); on CUDA with the same state (the decoder's attention
 * backward adds dQ with atomics, so its losses agree to rounding, not bit for bit). A save
 * downloads the tensors into host copies, a resume uploads them (the parameters rounded from the
 * master weights), on every backend.
 *
 * FP8 (--fp8-format; linear_recipe LJ_LINEAR_RECIPE_FP8 with `fp8`): the decoder's block linears
 * (model/linear.h, as `ljperf train` of a text model runs them) and the vision tower's (qkv, proj,
 * fc1, fc2 of every block, model/vision.h) run the recipe, each tower with its own amax histories
 * and scales; the patch embedding, the mergers, the embedding and lm_head stay in the act dtype.
 * A checkpoint then also holds text.fp8.state and vision.fp8.state (lj_linear_state_get: the
 * histories and scales; state.json's "fp8" says their shapes), so that a resume is exact; a
 * checkpoint without them, or of another shape, starts the recipe fresh, saying so. After every
 * step the amaxes are checked: one that is not finite stops the run naming the tensor. */
#ifndef LJ_TRAIN_VL_TRAIN_H
#define LJ_TRAIN_VL_TRAIN_H

#include "config/vl.h"
#include "model/vl.h"
#include "optim/optim.h"

typedef struct {
    const char *model;       /* --model: preset or config.json; NULL: --load's */
    const lj_ops *ops;       /* the backend (--device, --grad-dtype); NULL: the CPU's */
    const char *data_path;   /* --data-path PREFIX of a multimodal dataset (ljperf prepare --image-root) */
    const char *load;        /* --load: a checkpoint root (resume) or an HF Qwen3-VL directory (its weights) */
    const char *save;        /* --save ROOT, or NULL */
    const char *log_json;    /* --log-json FILE: one JSON object per logged iteration */
    const char *command_line; /* the command as typed, for the start record of --log-json (NULL: none) */
    const char *tokenizer_dir; /* the directory of the tokenizer files the HF export carries (NULL: none) */
    int seq_length, micro_batch_size, train_iters, log_interval, save_interval, keep_last, num_workers;
    int global_batch_size;   /* --global-batch-size: rows per optimizer step, a positive multiple of
                                micro_batch_size (0: micro_batch_size), accumulated as above */
    const char *recompute;   /* --recompute none|selective|full|auto of the decoder (NULL: none;
                                plan/planner_vl.h lj_vl_recompute_of) */
    int vision_recompute;    /* --recompute-vision: the tower's blocks' recompute (model/vision.h), 0 none,
                                1 full, or LJ_VL_VISION_RECOMPUTE_AUTO (the default: none, unless under
                                --recompute auto nothing fits without it, as in the benchmark) */
    int no_shuffle;
    uint64_t seed;
    lj_lr_schedule lr;
    lj_adamw_config adamw;
    int freeze_language_model, freeze_vision_model, freeze_vision_projection;
    int hf_fp32;             /* --hf-dtype fp32 */
    int quiet;
    lj_linear_recipe_kind linear_recipe; /* --fp8-format: LJ_LINEAR_RECIPE_FP8 (above); default: the act dtype */
    lj_linear_fp8_options fp8;           /* its settings (--fp8-recipe, ...; no --fp8-param-gather) */
} lj_vl_train_config;

void lj_vl_train_config_defaults(lj_vl_train_config *c);

/* The model a run of `c` trains, as lj_vl_train_run resolves it: --model (a preset or config.json),
 * else the config of --load (an HF Qwen3-VL directory, or the export of the checkpoint a resume
 * reads). For the command line's checks before the run (the FP8 flags against the decoder's
 * layers). Errors: those of lj_vl_config_resolve / lj_vl_config_load, LJ_ERR_ARG without either. */
lj_status lj_vl_train_model_config(const lj_vl_train_config *c, lj_vl_config *cfg);

/* Runs the training. Errors: bad flags and data (naming them), a dataset whose token ids are
 * not the model's, I/O of the checkpoints, a non-finite loss. */
lj_status lj_vl_train_run(const lj_vl_train_config *c);

/* ---- the optimizer step over both towers (train and the benchmark) ------------------------ */

/* One trainable range of a tower's flat buffers with its AdamW segments (offsets relative to
 * begin). */
typedef struct {
    int64_t begin, count;
    lj_adamw_segment *seg;
    int num_seg;
} lj_vl_range;

/* The parts AdamW steps: 0 the decoder (config/config.h's layout), 1 the ViT (the tower's layout
 * before the final merger: patch embedding, position grid, blocks), 2 the final and DeepStack
 * mergers; each with its segments (Megatron's weight-decay groups, lj_adamw_segments) and
 * whether it trains (Megatron-Bridge's freeze_language_model, freeze_vision_model,
 * freeze_vision_projection). */
typedef struct {
    lj_vl_range ranges[3];
    int trainable[3];
    lj_adamw_config adamw;
} lj_vl_optimizer;

/* Errors: LJ_ERR_ARG when all three parts are frozen. */
lj_status lj_vl_optimizer_init(lj_vl_optimizer *o, const lj_vl *vl, const lj_adamw_config *adamw, int freeze_language,
                               int freeze_vision, int freeze_projection);
void lj_vl_optimizer_free(lj_vl_optimizer *o);

/* The optimizer step after the backward: the squared gradient norm of each trained part
 * (global_norm_sq into the decoder's grad_norm_sq, read back and summed in double on the host),
 * their sum as the clipping norm, the step scalars of `step` (1-based) at `lr`, and AdamW over
 * each trained part (master weights and moments f32, the parameters' rounded copy). Returns the
 * global gradient norm. Synchronizes. */
double lj_vl_optimizer_step(const lj_vl_optimizer *o, lj_vl *vl, float lr, int step);

#endif
