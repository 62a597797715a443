/* mm_loader.h: the vision-language data loader: packed micro-batches of a multimodal dataset
 * (data/mm_dataset.h) with their images decoded and preprocessed (data/image.h) on the loader's
 * own threads, ahead of the training step, which only sees tokens, labels, positions and patches.
 *
 * The sample stream: epoch e is a Fisher-Yates shuffle of all samples driven by lj_rng seeded
 * with seed + e (no_shuffle: file order); global sample g is sample perm_(g / N)[g mod N]; rank r
 * of W takes global samples r, r + W, r + 2W, ... (each rank packs its own samples).
 *
 * Packing (first fit in stream order, never through an image): a sample of n tokens gives n - 1
 * (input, label) pairs. A row of T pairs takes samples while they fit; a sample that does not
 * fit the rest of a non-empty row starts the next row (the rest is padding). A sample longer
 * than T is cut at T pairs, or, when the cut falls inside an image (its <|vision_start|> ..
 * <|vision_end|> span), just before that image's <|vision_start|>; images after the cut are
 * left out, and a sample whose kept piece would train nothing is skipped (counted). Each packed
 * sample is a segment: its positions restart at 0 and attention must not cross it (cu_seqlens).
 *
 * Positions are Qwen3-VL's 3-D MRoPE ids (transformers' get_rope_index, per segment): text
 * tokens get t = h = w = running index; an image's pad tokens get (0, row, col) of its merged
 * grid plus the index after the text before it; the text after an image resumes at one more than
 * the largest id so far. Padding gets input <|endoftext|>, label -100, position 1.
 */
#ifndef LJ_MM_LOADER_H
#define LJ_MM_LOADER_H

#include "base/base.h"
#include "data/image.h"
#include "data/mm_dataset.h"

#define LJ_MM_IGNORE_INDEX (-100) /* Hugging Face's ignore_index */

typedef struct {
    const char *prefix;    /* the dataset: PREFIX.mmidx ... */
    int seq_length;        /* T: (input, label) pairs per row */
    int micro_batch_size;  /* B: rows per batch */
    uint64_t seed;
    int no_shuffle;
    int dp_rank, dp_world_size; /* world 0 is taken as 1 */
    int num_workers;       /* decoding threads; <= 0: 2 */
    int prefetch;          /* batches built ahead; <= 0: 2 * num_workers */
    int hold;              /* batches the caller keeps at once (lj_mm_loader_next); <= 0: 1. Gradient
                              accumulation holds an iteration's micro-batches to count their trained
                              tokens first; the ring grows by hold - 1 slots (host memory: their patches) */
    lj_resize_kind resize; /* LJ_RESIZE_TORCH_U8 (transformers' default processor) */
    int64_t max_image_pixels; /* decode limit; 0: LJ_IMAGE_MAX_PIXELS_DEFAULT */
    int64_t start_position;   /* resume: a saved lj_mm_loader_position (same seed, world size, T, B) */
} lj_mm_loader_config;

/* One micro-batch. Owned by the loader; valid until the next lj_mm_loader_next (with `hold` H:
 * while it is one of the last H returned). */
typedef struct {
    int B, T;
    int32_t *input_ids;    /* [B, T] */
    int32_t *labels;       /* [B, T]: the next token where it is trained, else LJ_MM_IGNORE_INDEX */
    int32_t *position_ids; /* [3, B, T]: MRoPE (t, h, w) */
    int32_t *segment_ids;  /* [B, T]: the packed sample's index within its row, -1 on padding */
    int32_t *cu_seqlens;   /* [num_segments + 1]: segment starts over the flattened B*T tokens
                              (padding is a segment of its own), as varlen attention takes them */
    int num_segments;
    int num_images;
    lj_grid_thw *image_grid_thw; /* [num_images], in token order (rows in order) */
    int64_t num_patches;         /* sum of t*h*w */
    float *pixel_values;         /* [num_patches, patch_dim] float32 (transformers' pixel_values) */
    int64_t samples;             /* samples packed into this batch (pieces of cut samples count) */
    int64_t skipped;             /* samples skipped so far (an image larger than a row) */
} lj_mm_batch;

typedef struct lj_mm_loader lj_mm_loader;

/* Opens the dataset and starts the workers. Errors: those of lj_mm_dataset_open, LJ_ERR_ARG for
 * a bad config (naming the field). */
lj_status lj_mm_loader_open(lj_mm_loader **ld, const lj_mm_loader_config *cfg);

/* The next micro-batch of this rank (blocks until its images are ready). When the caller has
 * `hold` batches, the oldest goes back to the ring first (hold 1: the previous one). Errors: an
 * image that no longer decodes (the dataset changed after prepare), or a grid that differs from
 * the one prepared (naming the dataset, the sample and the image). */
lj_status lj_mm_loader_next(lj_mm_loader *ld, const lj_mm_batch **batch);

/* This rank's position in its sample stream after the batch last returned (start_position
 * before the first): save it with a checkpoint, pass it back as start_position to resume with
 * the next batch. It depends on the rank and the world size (no elastic resume). */
int64_t lj_mm_loader_position(const lj_mm_loader *ld);

/* The dataset it reads. */
const lj_mm_dataset *lj_mm_loader_dataset(const lj_mm_loader *ld);

/* The samples the loader skips wherever they fall in the stream: longer than a row, and nothing
 * trained in the pairs that fit before the first image the row would cut (counted over the whole
 * dataset at open; only reported: which samples are used does not depend on it). The loader logs
 * lj_mm_loader_skip_message (lj_log_info) when it first skips one. */
typedef struct {
    int64_t samples;  /* in the dataset */
    int64_t skipped;  /* of them, never used */
    int64_t longest;  /* tokens of the longest skipped one (0: none skipped) */
    int seq_length;   /* T */
} lj_mm_loader_skips;

void lj_mm_loader_skip_count(const lj_mm_loader *ld, lj_mm_loader_skips *out);

/* "N of M samples are longer than --seq-length T (the longest: K tokens) and are skipped: ...",
 * without a final newline, into buf; returns 0 (and buf "") when none is skipped. */
int lj_mm_loader_skip_message(const lj_mm_loader *ld, char *buf, size_t n);

void lj_mm_loader_close(lj_mm_loader *ld);

#endif
