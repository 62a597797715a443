/* image.h: images in for vision-language models: decoding JPEG, PNG and WebP to 8-bit RGB
 * (libjpeg-turbo, libpng, libwebp), and the Qwen2-VL / Qwen3-VL image processor of Hugging Face
 * transformers in C: smart_resize, the antialiased bicubic resize, rescale and normalize, the
 * temporal repeat and the patch flattening into pixel_values [num_patches, 3*T*P*P] with the
 * grid (t, h, w). docs/qwen3-vl.md states every rule with its source.
 *
 * RGB conversion follows Pillow's Image.convert("RGB"), which transformers' convert_to_rgb calls:
 * grey is replicated, a palette is looked up, alpha (and PNG tRNS transparency) is dropped, not
 * composited. Decoding follows what Pillow reads: JPEG with the ISLOW DCT and fancy upsampling,
 * EXIF orientation ignored; 16-bit RGB(A) PNG keeps the high byte of each sample; the first frame
 * of an animated WebP and the default image of an APNG. Refused, each with a message naming the
 * file: truncated or corrupt files, CMYK/YCCK JPEG, 16-bit greyscale PNG (Pillow would clip it to
 * 255), images over the pixel limit (checked from the header, before any allocation), other
 * formats (GIF, BMP, TIFF, HEIF), and video files.
 */
#ifndef LJ_IMAGE_H
#define LJ_IMAGE_H

#include "base/base.h"

/* An 8-bit RGB image, row-major [height, width, 3]. */
typedef struct {
    int32_t height, width;
    uint8_t *rgb;
} lj_image;

typedef enum { LJ_IMAGE_UNKNOWN = 0, LJ_IMAGE_JPEG, LJ_IMAGE_PNG, LJ_IMAGE_WEBP } lj_image_format;

/* Pillow's Image.MAX_IMAGE_PIXELS (1024*1024*1024 / 4 / 3): the default decoding limit. */
#define LJ_IMAGE_MAX_PIXELS_DEFAULT 89478485LL

/* The format of `data` by its first bytes (JPEG FF D8 FF, PNG's signature, RIFF....WEBP). */
lj_image_format lj_image_sniff(const void *data, size_t size);

/* Decodes `size` bytes of a JPEG, PNG or WebP file to RGB into *out (owned, lj_image_free).
 * `name` names the file in messages. max_pixels: refuse width*height above it (<= 0: the
 * default). Errors: LJ_ERR_FORMAT (truncated, corrupt, empty, 0x0), LJ_ERR_UNSUPPORTED (another
 * format, a video, CMYK, 16-bit grey, over the pixel limit). *out is zeroed on error. */
lj_status lj_image_decode(const void *data, size_t size, const char *name, int64_t max_pixels, lj_image *out);

/* Reads and decodes the file at `path`. Errors: as lj_image_decode, plus LJ_ERR_IO; a video by
 * its extension (.mp4, .mov, .avi, .mkv, .webm, ...) is refused before reading. */
lj_status lj_image_read(const char *path, int64_t max_pixels, lj_image *out);

void lj_image_free(lj_image *img);

/* 1 if `path`'s extension is a video container's (case-insensitive). */
int lj_image_is_video_name(const char *path);

/* ---- the Qwen2-VL / Qwen3-VL image processor ------------------------------------------------ */

/* The two bicubic (a = -0.5) antialiased resizes with the same taps (Pillow's Resample.c),
 * which differ in the fixed-point weights:
 *   LJ_RESIZE_TORCH_U8  torch's uint8 CPU kernel (aten UpSampleKernel, the Pillow-SIMD port):
 *                       int16 weights at the largest precision p < 22 that keeps them in int16.
 *                       What transformers' default (torchvision, "fast") processor runs on the
 *                       CPU for uint8 images: the default here.
 *   LJ_RESIZE_PIL       Pillow's Image.resize(BICUBIC): 22-bit weights (the PIL backend,
 *                       Qwen2VLImageProcessorPil / the slow class). */
typedef enum { LJ_RESIZE_TORCH_U8 = 0, LJ_RESIZE_PIL } lj_resize_kind;

/* The processor's settings (preprocessor_config.json). */
typedef struct {
    int patch_size;          /* 16 */
    int temporal_patch_size; /* 2 */
    int merge_size;          /* 2 */
    int64_t min_pixels;      /* size.shortest_edge: 65536 */
    int64_t max_pixels;      /* size.longest_edge: 16777216 */
    float image_mean[3];     /* 0.5 */
    float image_std[3];      /* 0.5 */
    double rescale_factor;   /* 1/255 */
    lj_resize_kind resize;   /* LJ_RESIZE_TORCH_U8 */
} lj_vision_preproc;

/* The grid of one image in patch units: t frames of h x w patches. */
typedef struct {
    int32_t t, h, w;
} lj_grid_thw;

/* Qwen3-VL's published preprocessor_config.json values (above). */
void lj_vision_preproc_qwen3vl(lj_vision_preproc *p);

/* transformers' smart_resize(height, width, factor, min_pixels, max_pixels) as of transformers
 * 5.17: both sides a multiple of factor, the area within [min, max], the aspect ratio kept;
 * Python's round (half to even), floor and ceil in double; the max path keeps at least factor
 * per side; a side below factor is upscaled through the min path (older transformers raised).
 * Errors (LJ_ERR_UNSUPPORTED, naming `name`): no pixels, an aspect ratio above 200, a result
 * with a side of 0 (min_pixels 0) or outside int32. */
lj_status lj_smart_resize(int64_t height, int64_t width, int factor, int64_t min_pixels, int64_t max_pixels,
                          const char *name, int32_t *out_height, int32_t *out_width);

/* The grid an image of height x width gets: (1, H/patch, W/patch) for the smart_resize H x W
 * with factor patch*merge. Errors: as lj_smart_resize. */
lj_status lj_vision_grid(const lj_vision_preproc *p, int64_t height, int64_t width, const char *name,
                         lj_grid_thw *grid);

/* Patches (rows of pixel_values) of a grid: t*h*w; the LLM's image tokens: t*h*w/merge^2. */
static inline int64_t lj_grid_patches(lj_grid_thw g) { return (int64_t)g.t * g.h * g.w; }
static inline int64_t lj_grid_tokens(lj_grid_thw g, int merge_size) {
    return lj_grid_patches(g) / ((int64_t)merge_size * merge_size);
}
/* Columns of pixel_values: 3 * temporal_patch_size * patch_size^2 (1536 for Qwen3-VL). */
static inline int64_t lj_vision_preproc_patch_dim(const lj_vision_preproc *p) {
    return 3LL * p->temporal_patch_size * p->patch_size * p->patch_size;
}

/* Resizes `in` to out_height x out_width (bicubic, antialiased, separable: the horizontal pass
 * first into an 8-bit intermediate, then the vertical; a pass whose size does not change is
 * skipped, as in both sources). *out is owned (lj_image_free). */
void lj_image_resize_bicubic(const lj_image *in, int32_t out_height, int32_t out_width, lj_resize_kind kind,
                             lj_image *out);

/* Flattens an image already resized to (grid.h*patch) x (grid.w*patch) into uint8 patches
 * [t*h*w, patch_dim]: rows (t, bh, bw, mh, mw), columns (c, tt, py, px), the frame repeated
 * temporal_patch_size times (transformers' reshape/permute (0,3,6,4,7,2,1,5,8)). */
void lj_vision_patchify_u8(const lj_vision_preproc *p, const lj_image *resized, lj_grid_thw grid, uint8_t *out);

/* pixel_values from uint8 patches: (x - mean*255) / (std*255) in float32, per channel (the
 * fused rescale+normalize of transformers' torchvision backend; 1/rescale_factor is 255). */
void lj_vision_normalize(const lj_vision_preproc *p, const uint8_t *patches, int64_t num_patches, float *out);

/* The whole processor for one decoded image: smart_resize, resize, patchify, normalize.
 * *pixel_values is allocated here: [lj_grid_patches(*grid), lj_vision_preproc_patch_dim(p)] float32.
 * Errors: as lj_smart_resize (nothing allocated). */
lj_status lj_vision_preprocess(const lj_vision_preproc *p, const lj_image *img, const char *name,
                               float **pixel_values, lj_grid_thw *grid);

#endif
