/* loader.h: the training data loader: (seq_length + 1)-token windows over one token dataset
 * or a weighted blend of several (Megatron `--data-path 0.7 A 0.3 B`), split into train /
 * valid / test by documents (Megatron `--split 969,30,1`), shuffled per epoch from a seed,
 * partitioned over data-parallel ranks, with a position that can be saved and restored.
 *
 * The sample stream, stated once:
 *   - A dataset's split is the concatenation of its sequences [first, last) in file order
 *     (documents keep their EOS; windows cross document boundaries, as Megatron's GPTDataset
 *     does). Sample i of a dataset is stream tokens [i*T, i*T + T + 1), so a dataset has
 *     (num_tokens - 1) / T samples per epoch; inputs are window[0:T], targets window[1:T+1].
 *   - Split (Megatron megatron/core/datasets/blended_megatron_dataset_builder.py,
 *     _get_split_indices): with the split fractions normalised to sum 1, split s holds the
 *     sequences [idx[s], idx[s+1]) where idx[s+1] = idx[s] + round_half_even(f[s] * n), then
 *     every idx[1..3] is shifted so that idx[3] = n.
 *   - Blending (Megatron megatron/core/datasets/helpers.cpp, build_blending_indices): global
 *     sample k takes the next sample of the dataset j that maximises
 *     w[j] * max(k, 1) - taken[j] (the first such j on ties), with w normalised to sum 1.
 *   - Order: the s-th sample taken from dataset j is sample perm(j, e)[s mod n_j] of epoch
 *     e = s / n_j, where perm(j, e) is a Fisher-Yates shuffle of 0..n_j-1 driven by lj_rng
 *     seeded with seed + e (+ j * 0x9E3779B97F4A7C15 for the j-th dataset). Within an epoch of
 *     a dataset no sample is skipped or repeated.
 *   - Ranks: global samples are dealt in groups of dp_world_size; rank r takes member r of each
 *     group (global sample k goes to rank k % world when the run started at sample 0). A rank's
 *     micro-batch is its next micro_batch_size samples. One call of lj_loader_next on every
 *     rank consumes micro_batch_size * dp_world_size global samples, so the union over ranks
 *     of a step is exactly the single-rank stream over the same global samples.
 */
#ifndef LJ_LOADER_H
#define LJ_LOADER_H

#include <cjson/cJSON.h>

#include "base/base.h"
#include "data/mmidx.h"

#define LJ_LOADER_MAX_DATASETS 256 /* llm.c's FineWeb-10B has 103 shards */
#define LJ_LOADER_PATH_MAX 1024

typedef enum { LJ_SPLIT_TRAIN = 0, LJ_SPLIT_VALID = 1, LJ_SPLIT_TEST = 2 } lj_split;

/* A zero-initialised config plus one path, seq_length and micro_batch_size is a valid
 * single-dataset, single-rank, shuffled, split "969,30,1" train loader. */
typedef struct {
    int num_datasets;
    /* Megatron prefix (PREFIX.idx + PREFIX.bin; PREFIX.bin or PREFIX.idx also accepted) or an
     * llm.c shard (.bin with an llm.c header). */
    char paths[LJ_LOADER_MAX_DATASETS][LJ_LOADER_PATH_MAX];
    /* Blending weights, any positive scale (normalised). All zero: proportional to each
     * dataset's samples in the chosen split (Megatron's rule when no weights are given). */
    double weights[LJ_LOADER_MAX_DATASETS];
    char split[64];        /* Megatron --split, e.g. "969,30,1" or "98,2"; "" = "969,30,1" */
    lj_split which;        /* the split this loader reads */
    int seq_length;        /* T (tokens); windows are T + 1 tokens */
    int micro_batch_size;  /* B (windows per lj_loader_next call) */
    uint64_t seed;
    int dp_rank;           /* 0 .. dp_world_size - 1 */
    int dp_world_size;     /* 0 is taken as 1 */
    int no_shuffle;        /* 1: epoch order is 0, 1, 2, ... (no permutation) */
    int mock_vocab_size;   /* > 0: one synthetic dataset (lj_token_dataset_mock, Megatron's --mock-data)
                              of LJ_LOADER_MOCK_SEQUENCES documents over this vocabulary instead of
                              paths; num_datasets is then 1 */
} lj_loader_config;

#define LJ_LOADER_MOCK_SEQUENCES 2048
#define LJ_LOADER_MOCK_SEED 1234 /* the same documents whatever --seed (which orders them) */

/* The loader's position: everything lj_loader_set_state needs for an exact resume. It does
 * not depend on the rank, and may be restored with another dp_world_size (elastic resume).
 * For dataset j: epoch = dataset_samples[j] / samples_per_epoch(j), position in that epoch =
 * the remainder. */
typedef struct {
    int64_t consumed_samples;  /* global samples consumed over all ranks (Megatron's name) */
    uint64_t seed;             /* the loader's seed, checked on restore */
    int num_datasets;
    int64_t dataset_samples[LJ_LOADER_MAX_DATASETS]; /* samples taken from each dataset */
} lj_loader_state;

/* One dataset of the blend, restricted to the split (internal; read-only for callers). */
typedef struct {
    lj_token_dataset ds;
    int64_t first_seq, last_seq;  /* the split's sequences [first_seq, last_seq) */
    int64_t *stream_start;        /* [last_seq - first_seq + 1] stream offset of each sequence */
    int64_t num_tokens;           /* tokens in the split */
    int64_t num_samples;          /* samples per epoch: (num_tokens - 1) / T */
    double weight;                /* normalised blending weight */
    int64_t *perm;                /* [num_samples] the order of epoch perm_epoch (NULL: no shuffle) */
    int64_t perm_epoch;           /* -1 before the first use */
} lj_loader_source;

typedef struct {
    int num_sources;
    lj_loader_source *sources;  /* [num_sources] */
    int seq_length, micro_batch_size, dp_rank, dp_world_size, shuffle;
    uint64_t seed;
    lj_split which;
    lj_loader_state state;
} lj_loader;

/* "train", "valid", "test". */
const char *lj_split_name(lj_split which);

/* Parses a Megatron --split string ("969,30,1", "969, 30, 1", "98,2", "1", "'99,1,0'"): up to
 * three non-negative numbers separated by commas, slashes or spaces, padded with zeros, normalised
 * to sum 1 into fractions[3]; one pair of matching quotes around the whole text is dropped (a launch
 * script's quoting left in the value). Errors: LJ_ERR_ARG naming --split, the text and what is
 * expected: a part that is not a non-negative number, more than three, none at all ("" or ","), a
 * sum of 0. */
lj_status lj_loader_parse_split(const char *text, double fractions[3]);

/* Fills cfg->num_datasets, cfg->paths and cfg->weights from a Megatron --data-path argument
 * list: "A" (one dataset), "0.7 A 0.3 B" (weight/path pairs), or "A B C" (paths only: weights
 * proportional to size). Each argv element may hold several whitespace-separated items, so a
 * single string "0.7 A 0.3 B" works too. Source: megatron/core/datasets/utils.py,
 * get_blend_from_list. Errors: LJ_ERR_ARG (empty list, a mix of weights and paths, a weight
 * that is not positive, too many datasets, a path over LJ_LOADER_PATH_MAX). */
lj_status lj_loader_parse_data_path(lj_loader_config *cfg, int argc, const char *const *argv);

/* Opens every dataset, computes the split, the sample counts and the weights. Errors:
 * LJ_ERR_IO / LJ_ERR_FORMAT / LJ_ERR_UNSUPPORTED from lj_token_dataset_open (naming the file
 * and the field); LJ_ERR_ARG for a bad config or a split with fewer than T + 1 tokens (naming
 * the dataset and the split). On error *ld needs no lj_loader_free. */
lj_status lj_loader_init(lj_loader *ld, const lj_loader_config *cfg);
void lj_loader_free(lj_loader *ld);

/* Fills tokens: [B, T + 1] int32, row-major (B = micro_batch_size, T = seq_length) with this
 * rank's next B windows; inputs are tokens[:, 0:T], targets tokens[:, 1:T+1]. Never fails:
 * everything was checked by lj_loader_init. */
void lj_loader_next(lj_loader *ld, int32_t *tokens);

/* Copies the position out / restores it. set_state errors: LJ_ERR_ARG when the state is from a
 * loader with another number of datasets or another seed, or is inconsistent. */
void lj_loader_get_state(const lj_loader *ld, lj_loader_state *state);
lj_status lj_loader_set_state(lj_loader *ld, const lj_loader_state *state);
/* Back to the start of epoch 0 (restarts the valid split for each evaluation pass). */
void lj_loader_reset(lj_loader *ld);

/* Samples per epoch of dataset j in this loader's split, and the sum over datasets. */
int64_t lj_loader_samples_per_epoch(const lj_loader *ld, int dataset);
/* The epoch dataset j is in at the current position (0 at the start). */
int64_t lj_loader_epoch(const lj_loader *ld, int dataset);

/* Checks that every id of every dataset (the whole files, all splits) is in [0, vocab_size).
 * Errors: LJ_ERR_FORMAT naming the file, the position and the id. */
lj_status lj_loader_check_vocab(const lj_loader *ld, int vocab_size);

/* The end-of-document id document masking splits at (data/docmask.h): the one the datasets'
 * sidecars record (the separator `prepare` appended, data/mmidx.h), else `fallback` (the
 * tokenizer's EOS: the model's eos_token_id, as Megatron-LM takes tokenizer.eod), with a note
 * per dataset that records none when `log`. Errors: LJ_ERR_FORMAT when two datasets record
 * different ids (naming both sidecars); LJ_ERR_ARG when the id is not in [0, vocab_size). */
lj_status lj_loader_eod_token(const lj_loader *ld, int32_t fallback, int vocab_size, int log, int32_t *eod);

/* Logs one line per dataset (path, dtype, sequences of the split, tokens, samples, weight). */
void lj_loader_log_summary(const lj_loader *ld);

/* The state as a JSON object {"consumed_samples": n, "seed": "decimal", "dataset_samples":
 * [n, ...]} (the seed is a string so that all 64 bits survive), and back. from_json errors:
 * LJ_ERR_FORMAT naming `where` (the file) and the field. */
cJSON *lj_loader_state_to_json(const lj_loader_state *state);
/* The fingerprint of every dataset as a JSON array (the checkpoint's record of the data it was
 * trained on): [{"path", "bin_bytes", "bin_xxh3_64", "idx_xxh3_64"}, ...], the hashes those of
 * the dataset's sidecar (data/mmidx.h; computed at open when it has none), 16 hex digits. */
cJSON *lj_loader_fingerprint_to_json(const lj_loader *ld);
/* Compares `saved` (lj_loader_fingerprint_to_json of the checkpoint; NULL: none recorded, LJ_OK)
 * with the loader's datasets (their number, sizes and hashes; not their paths: a dataset moved
 * elsewhere is the same data). Errors: LJ_ERR_ARG naming `where` (the state.json) and both
 * datasets unless `override` (--override-data), which logs a warning instead when `log`;
 * LJ_ERR_FORMAT for a malformed record. */
lj_status lj_loader_check_fingerprint(const lj_loader *ld, const cJSON *saved, const char *where, int override,
                                      int log);
lj_status lj_loader_state_from_json(const cJSON *obj, lj_loader_state *state, const char *where);

#endif
