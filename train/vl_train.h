/* vl_train.h: the training loop of the Qwen3-VL models (config/vl.h) on the CPU backend: the
 * multimodal loader (data/mm_loader.h, images decoded on its threads) feeding the vision tower and
 * the decoder (model/vl.h), AdamW over both towers with global-norm clipping and the LR schedule,
 * Megatron-Bridge's freezing options, a log line and JSON lines, checkpoints and exact resume.
 *
 * Packed rows: every sample of a row is its own document (its MRoPE ids restart at 0, from the
 * loader, and attention does not cross it: the decoder's document masking).
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
 * shape; ITER/hf/ is the Hugging Face export (io/hf_vl.h, bf16 unless hf_fp32). A checkpoint of a run with the same --seed, --seq-length and --micro-batch-size resumes
 * exactly (the same losses as an uninterrupted run). */
#ifndef LJ_TRAIN_VL_TRAIN_H
#define LJ_TRAIN_VL_TRAIN_H

#include "config/vl.h"
#include "optim/optim.h"

typedef struct {
    const char *model;       /* --model: preset or config.json; NULL: --load's */
    const char *data_path;   /* --data-path PREFIX of a multimodal dataset (ljperf prepare --image-root) */
    const char *load;        /* --load: a checkpoint root (resume) or an HF Qwen3-VL directory (its weights) */
    const char *save;        /* --save ROOT, or NULL */
    const char *log_json;    /* --log-json FILE: one JSON object per logged iteration */
    const char *command_line; /* the command as typed, for the start record of --log-json (NULL: none) */
    const char *tokenizer_dir; /* the directory of the tokenizer files the HF export carries (NULL: none) */
    int seq_length, micro_batch_size, train_iters, log_interval, save_interval, keep_last, num_workers;
    int no_shuffle;
    uint64_t seed;
    lj_lr_schedule lr;
    lj_adamw_config adamw;
    int freeze_language_model, freeze_vision_model, freeze_vision_projection;
    int hf_fp32;             /* --hf-dtype fp32 */
    int quiet;
} lj_vl_train_config;

void lj_vl_train_config_defaults(lj_vl_train_config *c);

/* Runs the training. Errors: bad flags and data (naming them), a dataset whose token ids are
 * not the model's, I/O of the checkpoints, a non-finite loss. */
lj_status lj_vl_train_run(const lj_vl_train_config *c);

#endif
