/* checkpoint.h: resumable training-state checkpoints in a Megatron-LM-like layout, and the
 * names of its files.
 *
 * Layout of a checkpoint root (the --save / --load directory):
 *   ROOT/iter_0000100/state.safetensors   named 1-D F32 tensors given by the caller (master
 *                                         weights, AdamW m and v, ...), see io/safetensors.h
 *   ROOT/iter_0000100/state.json          a JSON text given by the caller (step, LR schedule
 *                                         position, RNG states, data-loader position, config)
 *   ROOT/latest_checkpointed_iteration.txt  the iteration number in decimal, no newline
 *                                         (the name and content Megatron-LM uses)
 * Iteration directories are named iter_%07d as in Megatron-LM (megatron/training/checkpointing.py).
 *
 * Crash safety: an iteration is written to ROOT/iter_NNNNNNN.tmp.PID/, every file fsync'd,
 * then renamed to iter_NNNNNNN/; the latest file is replaced atomically after that, and old
 * iterations are deleted only after the latest file points to the new one. A crash at any
 * moment leaves the previously saved checkpoint loadable. One run saves into a root: it holds
 * ROOT/.ljperf.lock (lj_ckpt_lock_acquire), so a second one is refused before it trains.
 *
 * Integrity: state.safetensors' "__metadata__" holds the XXH3-64 (xxHash) of every tensor's bytes
 * as "xxh3_64.NAME" = 16 hex digits, and that of state.json as "xxh3_64.state.json"; the metadata
 * "iteration" is the directory's. A load verifies each tensor it reads and state.json, and names
 * the file and the tensor on a mismatch. A checkpoint written before the checksums existed loads
 * with a note.
 */
#ifndef LJ_CHECKPOINT_H
#define LJ_CHECKPOINT_H

#include "base/fs.h"
#include "io/safetensors.h"

#define LJ_CKPT_LATEST_FILE "latest_checkpointed_iteration.txt"
#define LJ_CKPT_TENSORS_FILE "state.safetensors"
#define LJ_CKPT_STATE_FILE "state.json"
/* Per-rank ZeRO shard of the f32 master weights and AdamW moments (DeepSpeed writes one
 * optimizer-state file per rank), printf format of the rank: zero_shard_rank_00001.safetensors */
#define LJ_CKPT_SHARD_FILE_FMT "zero_shard_rank_%05d.safetensors"
/* The advisory lock of a --save root (flock): held by the run that saves there. */
#define LJ_CKPT_LOCK_FILE ".ljperf.lock"
/* The "__metadata__" key prefix of a tensor's checksum: "xxh3_64." + name. */
#define LJ_CKPT_CHECKSUM_PREFIX "xxh3_64."

/* The lock on a --save root: fd >= 0 while held. */
typedef struct {
    int fd;
} lj_ckpt_lock;

/* Takes the advisory lock ROOT/.ljperf.lock (flock LOCK_EX, not waiting; the kernel drops it when
 * the process ends, so a killed run leaves nothing stuck) and writes this process id into it.
 * Then removes what a killed save left in ROOT: iter_NNNNNNN.tmp.* directories and
 * latest_checkpointed_iteration.txt.tmp.* files (no other run can be writing them). `root` is
 * created if missing. Errors: LJ_ERR_IO "ROOT is in use by another run (process N holds
 * ROOT/.ljperf.lock) ..." or naming the file that cannot be created. */
lj_status lj_ckpt_lock_acquire(lj_ckpt_lock *lock, const char *root);
/* Drops the lock (the file stays). Safe on a lock that is not held (fd < 0). */
void lj_ckpt_lock_release(lj_ckpt_lock *lock);

/* lj_safetensors_write with the checksums of the integrity rule: the `n_meta` given metadata,
 * then "xxh3_64.NAME" for every tensor (each given as F32 `data`), then "xxh3_64.state.json"
 * when `state_json` is not NULL. Errors as lj_safetensors_write. */
lj_status lj_ckpt_write_tensors(const char *path, const lj_st_tensor *tensors, int n, const char *const *meta_keys,
                                const char *const *meta_values, int n_meta, const char *state_json);

/* Checks entry `e` of the open file `st` against its "xxh3_64.NAME" metadata. *missing (if not
 * NULL) is set to 1 when the file records no checksum for it (then LJ_OK).
 * Errors: LJ_ERR_FORMAT "FILE: tensor 'NAME' fails its checksum (XXH3-64 ..., recorded ...): the
 * file is corrupted ...". */
lj_status lj_ckpt_verify_tensor(const lj_safetensors *st, const lj_st_entry *e, int *missing);

/* Reads ROOT/iter_NNNNNNN/state.json into *text (free() it) and checks it against the checksum
 * that state.safetensors records for it, and that it is JSON. Errors: LJ_ERR_IO for a missing
 * file; LJ_ERR_FORMAT naming state.json when it differs from what was saved. */
lj_status lj_ckpt_read_state_json(const char *root, int iteration, char **text);

/* One named fp32 tensor of the training state, stored 1-D ([numel]) in state.safetensors. */
typedef struct {
    const char *name;  /* e.g. "master", "adam.m", "adam.v" */
    float *data;       /* save: the values (read only); load: where the values go */
    int64_t numel;     /* elements; load checks the file holds exactly this many */
} lj_ckpt_tensor;

/* Called by lj_ckpt_save_ex with the iteration's temporary directory before it is sealed, so
 * that the caller can add files (e.g. an HF export with lj_hf_export_into). Files written
 * there must be complete (fsync'd) when it returns; lj_file_write_atomic and the io/ writers
 * do that. */
typedef lj_status (*lj_ckpt_extra_fn)(const char *dir, void *ctx);

/* Saves iteration `iteration` (>= 0) under `root` (created if missing): the `n` tensors,
 * `state_json` (NULL writes "{}"), then updates ROOT/latest_checkpointed_iteration.txt, then
 * deletes older iter_ directories so that the newest `keep_last` iterations at or below this
 * one remain (0 keeps all; newer ones, from before a rollback, stay), and leftover
 * iter_*.tmp.PID directories and latest-file temporaries of dead processes.
 * Saving an iteration that already exists replaces it atomically. A failure to delete old
 * iterations is a warning, not an error.
 * Errors: LJ_ERR_IO naming the file or directory; LJ_ERR_ARG for bad tensor names. On error
 * nothing under `root` that existed before has changed (the temporary directory is removed). */
lj_status lj_ckpt_save(const char *root, int iteration, const lj_ckpt_tensor *tensors, int n, const char *state_json,
                       int keep_last);
/* lj_ckpt_save plus `extra(dir, ctx)` called on the temporary iteration directory (NULL: none). */
lj_status lj_ckpt_save_ex(const char *root, int iteration, const lj_ckpt_tensor *tensors, int n, const char *state_json,
                          int keep_last, lj_ckpt_extra_fn extra, void *ctx);

/* The two halves of lj_ckpt_save_ex, for savers that add files to the sealed iteration before it
 * is published (per-rank ZeRO shard files written by every rank):
 * lj_ckpt_write_iteration writes and installs ROOT/iter_NNNNNNN/ (tensors, state_json, `extra`)
 * without touching the latest file; lj_ckpt_publish then points
 * ROOT/latest_checkpointed_iteration.txt at it and prunes as lj_ckpt_save does. Until published,
 * a resume keeps loading the previous iteration. Errors as lj_ckpt_save_ex. */
lj_status lj_ckpt_write_iteration(const char *root, int iteration, const lj_ckpt_tensor *tensors, int n,
                                  const char *state_json, lj_ckpt_extra_fn extra, void *ctx);
lj_status lj_ckpt_publish(const char *root, int iteration, int keep_last);

/* buf[LJ_PATH_MAX] = ROOT/iter_%07d/zero_shard_rank_%05d.safetensors (rank's shard file).
 * Errors: LJ_ERR_ARG when the path is longer than LJ_PATH_MAX. */
lj_status lj_ckpt_shard_file(const char *root, int iteration, int rank, char *buf);

/* The iteration named by ROOT/latest_checkpointed_iteration.txt. Without that file (a crash
 * during the very first save, after the directory was sealed) the highest complete
 * iter_NNNNNNN directory is used, with a warning.
 * Errors: LJ_ERR_IO "ROOT: no checkpoint found ..." naming root; LJ_ERR_FORMAT naming the
 * latest file if it does not hold a non-negative integer, or if the directory it names is
 * missing. */
lj_status lj_ckpt_latest(const char *root, int *iteration);

/* Creates the checkpoint root `save` (--save) if needed and writes and removes a probe file in it,
 * so that a run finds an unusable --save before its first step, not at its first save.
 * Errors: LJ_ERR_IO "--save SAVE: cannot create the checkpoint directory (why)" or "--save SAVE:
 * cannot write there (why)". */
lj_status lj_ckpt_check_save(const char *save);

/* Loads iteration `iteration` of `root`: every one of the `n` tensors must exist in
 * state.safetensors with dtype F32 and exactly `numel` elements and match its checksum, the
 * file's metadata "iteration" must be `iteration`; nothing is copied unless all of them match. Tensors in the file that were not asked for give a warning.
 * `*state_json` (if state_json is not NULL) receives state.json's text (free() it); it must be
 * valid JSON and match its checksum. Errors: LJ_ERR_IO / LJ_ERR_FORMAT naming the file and the tensor, e.g.
 * "ckpt/iter_0000100/state.safetensors: tensor 'master' has 1000 elements, this run needs
 * 2000 (a checkpoint from another model shape?)". */
lj_status lj_ckpt_load(const char *root, int iteration, const lj_ckpt_tensor *tensors, int n, char **state_json);
/* lj_ckpt_load; `warn_unused` 0 reads a subset of the tensors without the warning (a resume
 * that takes the AdamW moments from the per-rank shard files). */
lj_status lj_ckpt_load_ex(const char *root, int iteration, const lj_ckpt_tensor *tensors, int n, char **state_json,
                          int warn_unused);

/* buf[LJ_PATH_MAX] = ROOT/iter_%07d (the iteration's directory). Errors: LJ_ERR_ARG when the path
 * is longer than LJ_PATH_MAX. */
lj_status lj_ckpt_iter_dir(const char *root, int iteration, char *buf);

#endif
