/* mm_prepare.h: `ljperf prepare --image-root DIR`: vision-language conversations in, an ljperf
 * multimodal dataset (data/mm_dataset.h) out.
 *
 * Inputs (by name; .gz / .zst compression is read for JSON, libarchive's filters for tar):
 *   - LLaVA JSON (.json: an array of samples, or one object) and JSON lines (.jsonl, .ndjson).
 *     A sample is {"image": "a/b.jpg" | ["a.jpg", ...] (optional), "conversations": [{"from":
 *     "human"|"gpt"|"system", "value": "..."}]}, or ShareGPT's {"images": [...], "messages":
 *     [{"role": "user"|"assistant"|"system", "content": "..."}]}. Image paths are relative to
 *     image_root (absolute paths are taken as they are; no image_root: the JSON file's folder).
 *   - WebDataset tar shards (.tar, .tar.gz, ...): members grouped by key (the path up to the first
 *     dot of the file name), each group one sample: its .jpg / .jpeg / .png / .webp members are
 *     the images (member order), its .json a sample as above (without "image"), else its .txt
 *     (or the json's "caption"/"txt"/"text" string) a caption: one user turn with the images, one
 *     assistant turn with the caption.
 * Each "<image>" in a turn is where the next image goes; a sample with images and no "<image>"
 * gets them at the start of its first user turn, each followed by "\n" (LLaVA's layout). The
 * counts must agree.
 *
 * Rendering (Qwen3-VL's chat template, no default system prompt): each turn is
 * <|im_start|>ROLE\nCONTENT<|im_end|>\n, each image <|vision_start|> then grid_h*grid_w/merge^2
 * <|image_pad|> then <|vision_end|> (the grid from smart_resize of the decoded size). Text between
 * special tokens is tokenized as one piece, as the Hugging Face tokenizer does with the rendered
 * string. Loss mask: 1 on the assistant turns' CONTENT and their <|im_end|>, 0 elsewhere (the
 * ROLE\n header, the "\n" after <|im_end|>, prompts, image tokens) - Megatron-Bridge's rule.
 *
 * Every image is decoded once here (a file that cannot be decoded fails the run now, naming the
 * file and the sample, not later in training), 256 samples' images at a time on all cores
 * (OpenMP; the output does not depend on the thread count), and stored as read.
 * Errors (each names the input file, the sample (line, index or tar key) and the field):
 * LJ_ERR_IO, LJ_ERR_FORMAT (bad JSON, a missing field, an unknown role, a count mismatch, an
 * image that does not decode, an image path that is empty or a directory, ill-formed UTF-8 in a
 * text field, naming the field and the byte within it, unless utf8_replace), LJ_ERR_UNSUPPORTED
 * (an image refused by data/image.h; video: a "video"/"videos" key, a <video> placeholder or a
 * video member of a shard), LJ_ERR_ARG (a tokenizer without Qwen's vision tokens, no samples).
 * Nothing is left behind on error.
 */
#ifndef LJ_MM_PREPARE_H
#define LJ_MM_PREPARE_H

#include "base/base.h"
#include "data/image.h"

typedef struct {
    const char *const *inputs;
    int num_inputs;
    const char *output_prefix;  /* PREFIX.mmidx, .mmtok, .mmmask, .mmimg */
    const char *tokenizer_path; /* NULL: lj_tokenizer_default_path() (a Qwen tokenizer is needed) */
    const char *image_root;     /* LLaVA's --image-folder; NULL: each JSON file's folder */
    lj_vision_preproc preproc;  /* lj_vision_preproc_qwen3vl() by default */
    int64_t max_image_pixels;   /* decode limit; 0: LJ_IMAGE_MAX_PIXELS_DEFAULT */
    int progress;               /* 1: a line every 10 s on stderr */
    int utf8_replace;           /* 1: ill-formed UTF-8 in a text field becomes U+FFFD; 0: an error */
} lj_mm_prepare_config;

typedef struct {
    int64_t samples, images, tokens, target_tokens, image_tokens, image_bytes;
    int64_t utf8_replaced; /* ill-formed sequences replaced (utf8_replace) */
    double seconds, image_seconds; /* all, and decoding + smart_resize of the images */
} lj_mm_prepare_stats;

void lj_mm_prepare_config_init(lj_mm_prepare_config *c);

/* 1 if `path` names a multimodal input by itself (a tar shard). */
int lj_mm_prepare_is_shard(const char *path);

lj_status lj_mm_prepare_run(const lj_mm_prepare_config *c, lj_mm_prepare_stats *stats);

#endif
