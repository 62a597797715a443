/* state.h: a training run's resumable state, saved at each checkpoint and read back for an exact
 * resume, over the files of checkpoint.h.
 *
 * The sharded format (the default, `--ckpt-format torch_dist`; checkpoint/sharded.h): every
 * rank writes its own part of the f32 state at the same time, streamed through a bounded host
 * buffer (LJ_CKPT_STAGING_BYTES), then rank 0 writes the metadata and seals the directory:
 *
 *   ROOT/iter_NNNNNNN/shard_RRRRR_of_WWWWW.bin  rank R's slices of "master", "adam.m", "adam.v"
 *                                         ([P] each in the parameter layout, config/config.h):
 *                                         its contiguous flat ranges under ZeRO-1/2, its layer
 *                                         pieces under ZeRO-3, an even 1/W split of the
 *                                         replicated state without ZeRO; rank 0 adds "fp8.state"
 *   ROOT/iter_NNNNNNN/metadata.json       the global layout: each tensor's shape, which file
 *                                         holds which slice, and each slice's XXH3-64
 *   ROOT/iter_NNNNNNN/state.json          {"iteration", "consumed_samples", "data" (the loader's
 *                                         position, data/loader.h), "model" (the shape), "run"
 *                                         (micro_batch_size, seq_length, global_batch_size, seed,
 *                                         and under a ramp-up rampup_batch_size [start, increment,
 *                                         samples]),
 *                                         "zero" (world_size, stage), "fp8", and after a
 *                                         --no-load-optim start "optimizer_start_iteration"}
 *   ROOT/iter_NNNNNNN/config.json         the model's configuration (lj_config_save)
 *   ROOT/iter_NNNNNNN/hf/                 the Hugging Face export (io/hf.h), written by rank 0
 *                                         tensor by tensor from the shard files; left out by
 *                                         --no-save-hf except in the run's last save
 *
 * A resume on any world size or ZeRO stage streams what it reads through the same bound: the
 * whole master under ZeRO 0-2 (their parameters are replicated), its own pieces under ZeRO-3,
 * and only the slices of the AdamW moments its own shard needs.
 *
 * The single-file format (`--ckpt-format torch`, and every checkpoint written before the
 * sharded one, which still loads): rank 0 gathers the whole state into state.safetensors
 * ("master", "adam.m", "adam.v", "fp8.state", 1-D F32), and under ZeRO stage >= 1 over several
 * ranks every rank adds zero_shard_rank_RRRRR.safetensors (its shard: "master", "adam_m",
 * "adam_v", with "__metadata__" format "ljperf-zero-shard", iteration, world_size, zero_stage,
 * rank, partition, shard_begin, shard_numel, parameters), read back on the saving world size.
 *
 * Either way the losses of a resumed run equal the uninterrupted run's bit for bit.
 */
#ifndef LJ_STATE_H
#define LJ_STATE_H

#include "base/fs.h"
#include "data/loader.h"
#include "model/model.h"
#include "parallel/dp.h"

/* --ckpt-format (Megatron-LM's names) */
typedef enum { LJ_CKPT_FORMAT_TORCH_DIST = 0, LJ_CKPT_FORMAT_TORCH } lj_ckpt_format;

/* The background writer of --async-save, kept across the saves of a run (lj_ckpt_async_create). */
typedef struct lj_ckpt_async lj_ckpt_async;

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
    lj_ckpt_format format;
    int save_hf;       /* this save writes the HF export (hf/) */
    lj_ckpt_async *async; /* --async-save: the run's background writer; NULL: synchronous saves */
    lj_batch_rampup rampup; /* --rampup-batch-size (start 0: none): state.json's run.rampup_batch_size;
                               a resume keeps it (the consumed samples of iteration i follow it) */
    /* the position in the run: saved by lj_run_state_save, set by lj_run_state_load */
    int iteration;
    int64_t consumed_samples;
    /* the iteration at which the optimizer and the LR schedule started: 0 for a run from scratch,
     * the loaded iteration for a run loaded with no_load_optim (state.json
     * "optimizer_start_iteration", kept by every later save); the AdamW step and the schedule's
     * step of iteration i are i - schedule_start */
    int schedule_start;
    int override_data; /* read only: --override-data: a load onto other data than the checkpoint records (its
                          datasets' fingerprints, data/loader.h) warns instead of failing */
    int no_load_optim; /* read only: lj_run_state_load leaves the AdamW moments at zero and sets
                          schedule_start to the loaded iteration (Megatron-LM's --no-load-optim) */
} lj_run_state;

/* Saves iteration s->iteration under s->save. Sharded format: rank 0 creates ROOT/iter_NNNNNNN.tmp.PID,
 * every rank writes its shard file into it, rank 0 writes metadata.json, state.json,
 * config.json and the HF export (s->save_hf), renames the directory to iter_NNNNNNN, then
 * points the latest file at it: a crash leaves the previous checkpoint as the latest. With
 * s->async, a previous save is finished first (lj_run_state_finish), the state is copied to
 * host memory (the step waits for that only) and written by a background thread; the rest
 * happens at the first lj_run_state_poll after the writers are done, or at the next save or
 * lj_run_state_finish, which wait for them. Logs one line per save: time, bytes,
 * throughput and the save's peak host memory (VmHWM above the RSS before it). A state with a
 * non-finite weight or moment is not saved (an error; with s->async the writer finds it and
 * the poll, next save or lj_run_state_finish reports it). Collective: every rank learns whether
 * each phase worked, so none waits for a rank that stopped.
 * Errors: LJ_ERR_IO naming the file (the previous checkpoint stays loadable), LJ_ERR_ARG for a
 * diverged state. */
lj_status lj_run_state_save(lj_run_state *s);

/* With s->async (the sharded format): allocates, and pins where the backend can, the host copy
 * the saves of --async-save copy the state into, so that the first save's step pays for the copy
 * only (pinning tens of GiB takes seconds). Call once the model is bound, before the first step.
 * Never fails: without the memory it warns and the first save makes the copy (or saves
 * synchronously, as it says). */
lj_status lj_run_state_reserve(lj_run_state *s);

/* Waits for the background write of the last --async-save and seals and publishes it (rank 0),
 * as lj_run_state_save does; LJ_OK at once when nothing is pending. Collective. Errors: the
 * writer's (a rank that could not write its shard file), then as lj_run_state_save. */
lj_status lj_run_state_finish(lj_run_state *s);

/* Once every rank's background writer is done, seals and publishes the pending --async-save as
 * lj_run_state_finish does; otherwise returns at once. Called after every iteration, so that a
 * written checkpoint becomes the latest without waiting for the next save (Megatron-LM's
 * non-blocking maybe_finalize_async_save). Collective (one float summed across ranks while a
 * save is pending). Errors: as lj_run_state_finish. */
lj_status lj_run_state_poll(lj_run_state *s);

/* The background writer of a run (host copies kept between saves); free it after
 * lj_run_state_finish. */
lj_ckpt_async *lj_ckpt_async_create(void);
void lj_ckpt_async_free(lj_ckpt_async *a);

/* Loads `load` (--load): a training-state root or iteration directory of either format (exact
 * resume: weights, moments, iteration, consumed samples, the loader's position, schedule_start),
 * or else a Hugging Face model directory (weights only, the optimizer starts fresh). With
 * s->no_load_optim the moments are zeroed after the load and schedule_start = the iteration. A sharded checkpoint
 * loads on any world size and ZeRO stage; every slice read is checked against its XXH3-64.
 * Collective.
 * Errors: LJ_ERR_FORMAT naming the file and field for a checkpoint of another model shape,
 * sequence length, global batch or batch ramp-up, or the file, tensor and parameter of a slice that fails its
 * checksum; LJ_ERR_IO for missing files. */
lj_status lj_run_state_load(lj_run_state *s, const char *load);

/* Classifies a --load path: a training checkpoint root (latest_checkpointed_iteration.txt or
 * iter_NNNNNNN directories: its latest iteration), one iter_NNNNNNN directory of a root, or else
 * a Hugging Face model directory (*is_state = 0), which ORG/NAME that is no local path names in
 * the Hugging Face cache (base/hf_cache.h: its snapshot of refs/main). For a training checkpoint, root[LJ_PATH_MAX]
 * and *iteration name it and hf_dir[LJ_PATH_MAX] its Hugging Face export (the iteration
 * directory itself, which holds config.json, when it was saved without one); for an HF directory
 * hf_dir = path. Errors: LJ_ERR_FORMAT / LJ_ERR_IO for a broken root (a latest file naming no
 * iteration); LJ_ERR_ARG for a path longer than LJ_PATH_MAX. */
lj_status lj_ckpt_resolve_load(const char *path, char *root, int *iteration, int *is_state, char *hf_dir);

#endif
