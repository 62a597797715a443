/* state.h: a training run's resumable state, saved at each checkpoint and read back for an exact
 * resume, over the files of checkpoint.h:
 *
 *   ROOT/iter_NNNNNNN/state.safetensors   the consolidated f32 tensors "master", "adam.m",
 *                                         "adam.v", each [P] in the parameter layout
 *                                         (config/config.h), gathered from every rank's shard
 *   ROOT/iter_NNNNNNN/state.json          {"iteration", "consumed_samples", "data" (the loader's
 *                                         position, data/loader.h), "model" (the shape), "run"
 *                                         (micro_batch_size, seq_length, global_batch_size, seed),
 *                                         "zero" (world_size, stage, shard_files)}
 *   ROOT/iter_NNNNNNN/hf/                 the Hugging Face export (io/hf.h), with the tokenizer
 *                                         files when the run names its tokenizer
 *   ROOT/iter_NNNNNNN/zero_shard_rank_RRRRR.safetensors
 *                                         under ZeRO stage >= 1 over several ranks: each rank's
 *                                         shard of the master weights and moments ("master",
 *                                         "adam_m", "adam_v", 1-D F32 [shard_numel], with
 *                                         "__metadata__" format "ljperf-zero-shard", iteration,
 *                                         world_size, zero_stage, rank, partition ("flat" or
 *                                         "zero3"), shard_begin, shard_numel, parameters)
 *
 * A resume on the saving world size and ZeRO stage reads the shard files; any other world size
 * takes its shard from the consolidated file. The consolidated weights give the parameters in
 * both cases, so the losses of a resumed run equal the uninterrupted run's bit for bit.
 */
#ifndef LJ_STATE_H
#define LJ_STATE_H

#include "base/fs.h"
#include "data/loader.h"
#include "model/model.h"
#include "parallel/dp.h"

typedef struct {
    /* the run (read only) */
    const lj_model_config *model_cfg;
    int micro_batch_size, seq_length, global_batch_size;
    uint64_t seed;
    lj_model *model;
    lj_dp *dp;
    lj_loader *train_data;
    const char *save;  /* --save root */
    int keep_last;     /* --keep-last (0: all) */
    lj_dtype hf_dtype; /* dtype of the HF export */
    const char *tokenizer; /* tokenizer.json copied into the HF export with the other tokenizer files
                              (data/tokenizer_export.h); NULL: none */
    int quiet;         /* no info lines */
    /* the position in the run: saved by lj_run_state_save, set by lj_run_state_load */
    int iteration;
    int64_t consumed_samples;
} lj_run_state;

/* Saves iteration s->iteration under s->save. The ranks gather the sharded state to rank 0, which
 * writes the iteration directory with the whole state; under ZeRO stage >= 1 over several ranks
 * every rank then adds its shard file, and only when all are written does rank 0 publish the
 * iteration in the latest file (a published checkpoint has all its shards). Collective: every
 * rank learns whether each phase worked, so none waits for a rank that stopped.
 * Errors: LJ_ERR_IO naming the file (the previous checkpoint stays loadable). */
lj_status lj_run_state_save(lj_run_state *s);

/* Loads `load` (--load): a training-state root or iteration directory (exact resume: weights,
 * moments, iteration, consumed samples, the loader's position), or else a Hugging Face model
 * directory (weights only, the optimizer starts fresh). Collective.
 * Errors: LJ_ERR_FORMAT naming the file and field for a checkpoint of another model shape,
 * sequence length or global batch; LJ_ERR_IO for missing files. */
lj_status lj_run_state_load(lj_run_state *s, const char *load);

/* Classifies a --load path: a training checkpoint root (latest_checkpointed_iteration.txt or
 * iter_NNNNNNN directories: its latest iteration), one iter_NNNNNNN directory of a root, or else
 * a Hugging Face model directory (*is_state = 0). For a training checkpoint, root[LJ_PATH_MAX]
 * and *iteration name it and hf_dir[LJ_PATH_MAX] its Hugging Face export; for an HF directory
 * hf_dir = path. Errors: LJ_ERR_FORMAT / LJ_ERR_IO for a broken root (a latest file naming no
 * iteration); LJ_ERR_ARG for a path longer than LJ_PATH_MAX. */
lj_status lj_ckpt_resolve_load(const char *path, char *root, int *iteration, int *is_state, char *hf_dir);

#endif
