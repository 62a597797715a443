/* mm_dataset.h: ljperf's multimodal dataset (vision-language samples): the format, its writer
 * (used by `ljperf prepare --image-root`) and its mmap reader (used by data/mm_loader.h).
 *
 * Four files beside each other, all little-endian:
 *   PREFIX.mmtok   int32 token ids, the samples one after another (the chat template rendered,
 *                  each image as <|vision_start|>, grid_h*grid_w/merge^2 x <|image_pad|>,
 *                  <|vision_end|>)
 *   PREFIX.mmmask  uint8, one per token: 1 where the token is a training target (assistant
 *                  content and its <|im_end|>), 0 elsewhere (prompts, template, image tokens)
 *   PREFIX.mmimg   the images' encoded bytes (JPEG / PNG / WebP as read), one after another
 *   PREFIX.mmidx   the index:
 *     header (96 bytes): magic "LJMMIDX1", u32 version (1), u32 header bytes (96),
 *       i64 num_samples, num_images, num_tokens, image_bytes,
 *       i32 image_pad_id, vision_start_id, vision_end_id, pad_id (<|endoftext|>),
 *       i32 patch_size, merge_size, temporal_patch_size, 0, i64 min_pixels, max_pixels
 *       (the preprocessing the pad counts were computed with: a loader must use the same);
 *     i64 sample_token_start[num_samples + 1] (prefix sums into .mmtok);
 *     i64 sample_image_start[num_samples + 1] (prefix sums into the image records);
 *     image records [num_images] of 48 bytes (lj_mm_image_rec).
 * The files are written under temporary names and renamed .mmtok, .mmmask, .mmimg, .mmidx last,
 * so a complete .mmidx means complete data files; the reader checks every size against it.
 *
 * Images are stored encoded, not as patches: decoding and preprocessing run in the loader's
 * threads at a measured cost well below a training step's (docs/qwen3-vl.md), while float32
 * patches would be about 100 times the bytes of a JPEG.
 */
#ifndef LJ_MM_DATASET_H
#define LJ_MM_DATASET_H

#include "base/base.h"

#define LJ_MM_MAGIC "LJMMIDX1"
#define LJ_MM_VERSION 1
#define LJ_MM_HEADER_BYTES 96

/* The token ids and the preprocessing a dataset was written with. */
typedef struct {
    int32_t image_pad_id, vision_start_id, vision_end_id, pad_id;
    int32_t patch_size, merge_size, temporal_patch_size;
    int64_t min_pixels, max_pixels;
} lj_mm_meta;

/* One image of a sample (48 bytes on disk, this layout). */
typedef struct {
    int64_t byte_offset; /* into .mmimg */
    int64_t byte_size;
    int64_t token_pos;   /* position of its <|vision_start|> within the sample's tokens */
    int32_t height, width;             /* decoded size */
    int32_t grid_t, grid_h, grid_w;    /* patches (transformers' image_grid_thw) */
    int32_t reserved;
} lj_mm_image_rec;

/* ---- writer (data/mm_dataset.c) ---- */
typedef struct lj_mm_writer lj_mm_writer;

/* Opens the four files under temporary names. Errors: LJ_ERR_IO naming the file. */
lj_status lj_mm_writer_open(lj_mm_writer **w, const char *prefix, const lj_mm_meta *meta);
/* Appends one sample: n tokens with their mask, and nimg images (records with everything but
 * byte_offset, which the writer sets, and their bytes). Errors: LJ_ERR_IO. */
lj_status lj_mm_writer_add(lj_mm_writer *w, const int32_t *tokens, const uint8_t *mask, int64_t n,
                           const lj_mm_image_rec *images, const void *const *bytes, int nimg);
/* Writes the index, fsyncs and renames the files into place (.mmidx last). Frees w. */
lj_status lj_mm_writer_finish(lj_mm_writer *w);
/* Removes the temporary files and frees w. */
void lj_mm_writer_abort(lj_mm_writer *w);

/* ---- reader ---- */
typedef struct {
    char *prefix;
    lj_mm_meta meta;
    int64_t num_samples, num_images, num_tokens, image_bytes;
    const int32_t *tokens;            /* [num_tokens] */
    const uint8_t *mask;              /* [num_tokens] */
    const uint8_t *image_data;        /* [image_bytes] */
    const int64_t *sample_token_start; /* [num_samples + 1] */
    const int64_t *sample_image_start; /* [num_samples + 1] */
    const lj_mm_image_rec *images;    /* [num_images] */
    void *map[4];
    size_t map_size[4];
} lj_mm_dataset;

/* Opens PREFIX.mmidx and its data files (mmap). Checks the magic, the version, every file's size,
 * that the offsets are monotonic and every image record lies inside its sample and .mmimg.
 * Errors: LJ_ERR_IO / LJ_ERR_FORMAT naming the file and the field. */
lj_status lj_mm_dataset_open(lj_mm_dataset *ds, const char *prefix);
void lj_mm_dataset_close(lj_mm_dataset *ds);

static inline int64_t lj_mm_sample_tokens(const lj_mm_dataset *ds, int64_t i) {
    return ds->sample_token_start[i + 1] - ds->sample_token_start[i];
}

#endif
