/* image_preproc.c: the Qwen2-VL / Qwen3-VL image processor of transformers in C: smart_resize,
 * the antialiased bicubic resize (torch's uint8 kernel or Pillow's), patch flattening and the
 * fused rescale + normalize. Sources: transformers models/qwen2_vl/image_processing_qwen2_vl.py
 * (smart_resize, the patch permute), image_processing_backends.py (the fused normalize),
 * aten/src/ATen/native/cpu/UpSampleKernel.cpp (torch's uint8 antialiased weights), Pillow's
 * libImaging/Resample.c (the taps and 22-bit weights). docs/qwen3-vl.md has the details. */
#include <math.h>
#include <string.h>

#include "data/image.h"

void lj_vision_preproc_qwen3vl(lj_vision_preproc *p) {
    memset(p, 0, sizeof *p);
    p->patch_size = 16;
    p->temporal_patch_size = 2;
    p->merge_size = 2;
    p->min_pixels = 65536;
    p->max_pixels = 16777216;
    for (int c = 0; c < 3; c++) p->image_mean[c] = 0.5f, p->image_std[c] = 0.5f;
    p->rescale_factor = 1.0 / 255.0;
    p->resize = LJ_RESIZE_TORCH_U8;
}

lj_status lj_smart_resize(int64_t height, int64_t width, int factor, int64_t min_pixels, int64_t max_pixels,
                          const char *name, int32_t *out_height, int32_t *out_width) {
    if (!name) name = "image";
    if (height <= 0 || width <= 0)
        return lj_fail(LJ_ERR_UNSUPPORTED, "%s: %lldx%lld (height x width) has no pixels", name, (long long)height,
                       (long long)width);
    const int64_t lo = height < width ? height : width, hi = height < width ? width : height;
    if ((double)hi / (double)lo > 200.0)
        return lj_fail(LJ_ERR_UNSUPPORTED, "%s: %lldx%lld has an aspect ratio of %.2f, above smart_resize's limit of 200",
                       name, (long long)height, (long long)width, (double)hi / (double)lo);
    const double f = factor;
    /* Python's round() is half to even: nearbyint in the default rounding mode. A side below
     * factor rounds to 0, and the area (0) then takes the min_pixels path: upscaled. */
    int64_t hb = (int64_t)nearbyint((double)height / f) * factor;
    int64_t wb = (int64_t)nearbyint((double)width / f) * factor;
    if (hb * wb > max_pixels) {
        const double beta = sqrt((double)(height * width) / (double)max_pixels);
        hb = (int64_t)floor((double)height / beta / f) * factor;
        wb = (int64_t)floor((double)width / beta / f) * factor;
        if (hb < factor) hb = factor;
        if (wb < factor) wb = factor;
    } else if (hb * wb < min_pixels) {
        const double beta = sqrt((double)min_pixels / (double)(height * width));
        hb = (int64_t)ceil((double)height * beta / f) * factor;
        wb = (int64_t)ceil((double)width * beta / f) * factor;
    }
    if (hb <= 0 || wb <= 0 || hb > INT32_MAX / 4 || wb > INT32_MAX / 4)
        return lj_fail(LJ_ERR_UNSUPPORTED,
                       "%s: smart_resize of %lldx%lld gives %lldx%lld: no merged patch (min_pixels %lld too small?)",
                       name, (long long)height, (long long)width, (long long)hb, (long long)wb, (long long)min_pixels);
    *out_height = (int32_t)hb;
    *out_width = (int32_t)wb;
    return LJ_OK;
}

lj_status lj_vision_grid(const lj_vision_preproc *p, int64_t height, int64_t width, const char *name,
                         lj_grid_thw *grid) {
    int32_t h = 0, w = 0;
    LJ_TRY(lj_smart_resize(height, width, p->patch_size * p->merge_size, p->min_pixels, p->max_pixels, name, &h, &w));
    grid->t = 1; /* one image: its frame repeated temporal_patch_size times is one temporal patch */
    grid->h = h / p->patch_size;
    grid->w = w / p->patch_size;
    return LJ_OK;
}

/* ---- the resize ----------------------------------------------------------------------------- */

/* Keys' cubic with a = -0.5, in torch's form (aten UpSample.h cubic_convolution1/2) and in
 * Pillow's (Resample.c bicubic_filter): the same polynomial, rounded differently. */
static double cubic_torch(double x) {
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    return 0.0;
}

static double cubic_pil(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

/* One axis's taps: output i reads inputs [xmin[i], xmin[i] + xsize[i]) with integer weights
 * k[i * ksize + j] at `prec` fractional bits. */
typedef struct {
    int ksize, prec;
    int32_t *xmin, *xsize, *k;
} taps;

static void taps_make(int in, int out, lj_resize_kind kind, taps *t) {
    const double scale = (double)in / (double)out;
    const double fs = scale < 1.0 ? 1.0 : scale;
    const double support = 2.0 * fs; /* bicubic's support 2, widened by the downscale (antialias) */
    const double ss = 1.0 / fs;
    const int ksize = (int)ceil(support) * 2 + 1;
    double *w = lj_calloc((size_t)out * ksize, sizeof *w);
    t->ksize = ksize;
    t->xmin = lj_malloc(sizeof(int32_t) * out);
    t->xsize = lj_malloc(sizeof(int32_t) * out);
    t->k = lj_calloc((size_t)out * ksize, sizeof(int32_t));
    double wmax = 0.0;
    for (int i = 0; i < out; i++) {
        const double center = (i + 0.5) * scale;
        int64_t xmin = (int64_t)(center - support + 0.5), xmax = (int64_t)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in) xmax = in;
        int64_t xs = xmax - xmin;
        if (xs < 0) xs = 0;
        if (xs > ksize) xs = ksize; /* torch clips a rare overshoot by one */
        double *wi = w + (size_t)i * ksize, total = 0.0;
        for (int64_t j = 0; j < xs; j++) {
            const double x = ((double)(j + xmin) - center + 0.5) * ss;
            wi[j] = kind == LJ_RESIZE_PIL ? cubic_pil(x) : cubic_torch(x);
            total += wi[j];
        }
        if (total != 0.0)
            for (int64_t j = 0; j < xs; j++) {
                wi[j] /= total;
                if (wi[j] > wmax) wmax = wi[j];
            }
        t->xmin[i] = (int32_t)xmin;
        t->xsize[i] = (int32_t)xs;
    }
    int prec = 22; /* Pillow's PRECISION_BITS (32 - 8 - 2) */
    if (kind == LJ_RESIZE_TORCH_U8) /* the largest precision that keeps the weights in int16 */
        for (prec = 0; prec < 22; prec++)
            if ((int)(0.5 + wmax * (double)(1 << (prec + 1))) >= (1 << 15)) break;
    t->prec = prec;
    for (size_t i = 0; i < (size_t)out * ksize; i++) {
        const double v = w[i] * (double)(1 << prec);
        t->k[i] = v < 0 ? (int32_t)(-0.5 + v) : (int32_t)(0.5 + v);
    }
    free(w);
}

static void taps_free(taps *t) { free(t->xmin), free(t->xsize), free(t->k); }

/* Both sources accumulate in a C int: 32 bits hold 255 * the weights' sum of magnitudes at either
 * precision (about 1.3 * 2^22 at most). */
static inline uint8_t clip8(int32_t acc, int prec) {
    const int32_t v = acc >> prec;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* [h, win, 3] -> [h, wout, 3] */
static void pass_horizontal(const uint8_t *in, int h, int win, uint8_t *out, int wout, const taps *t) {
    const int32_t half = (int32_t)1 << (t->prec - 1);
    for (int y = 0; y < h; y++) {
        const uint8_t *row = in + (size_t)y * win * 3;
        uint8_t *orow = out + (size_t)y * wout * 3;
        for (int x = 0; x < wout; x++) {
            const int32_t *k = t->k + (size_t)x * t->ksize;
            const uint8_t *src = row + (size_t)t->xmin[x] * 3;
            int32_t a0 = half, a1 = half, a2 = half;
            for (int j = 0; j < t->xsize[x]; j++) {
                a0 += (int32_t)src[j * 3 + 0] * k[j];
                a1 += (int32_t)src[j * 3 + 1] * k[j];
                a2 += (int32_t)src[j * 3 + 2] * k[j];
            }
            orow[x * 3 + 0] = clip8(a0, t->prec);
            orow[x * 3 + 1] = clip8(a1, t->prec);
            orow[x * 3 + 2] = clip8(a2, t->prec);
        }
    }
}

/* [hin, w, 3] -> [hout, w, 3]; a row of accumulators, so the inner loop runs along the row */
static void pass_vertical(const uint8_t *in, int w, uint8_t *out, int hout, const taps *t) {
    const int32_t half = (int32_t)1 << (t->prec - 1);
    const size_t stride = (size_t)w * 3;
    int32_t *acc = lj_malloc(sizeof(int32_t) * stride);
    for (int y = 0; y < hout; y++) {
        const int32_t *k = t->k + (size_t)y * t->ksize;
        const uint8_t *src = in + (size_t)t->xmin[y] * stride;
        for (size_t x = 0; x < stride; x++) acc[x] = half;
        for (int j = 0; j < t->xsize[y]; j++) {
            const uint8_t *r = src + (size_t)j * stride;
            const int32_t kj = k[j];
            for (size_t x = 0; x < stride; x++) acc[x] += (int32_t)r[x] * kj;
        }
        uint8_t *orow = out + (size_t)y * stride;
        for (size_t x = 0; x < stride; x++) orow[x] = clip8(acc[x], t->prec);
    }
    free(acc);
}

void lj_image_resize_bicubic(const lj_image *in, int32_t out_height, int32_t out_width, lj_resize_kind kind,
                             lj_image *out) {
    LJ_ASSERT(in->height > 0 && in->width > 0 && out_height > 0 && out_width > 0);
    const uint8_t *cur = in->rgb;
    uint8_t *tmp = NULL;
    if (out_width != in->width) {
        taps t;
        taps_make(in->width, out_width, kind, &t);
        tmp = lj_malloc((size_t)in->height * out_width * 3);
        pass_horizontal(cur, in->height, in->width, tmp, out_width, &t);
        taps_free(&t);
        cur = tmp;
    }
    uint8_t *res;
    if (out_height != in->height) {
        taps t;
        taps_make(in->height, out_height, kind, &t);
        res = lj_malloc((size_t)out_height * out_width * 3);
        pass_vertical(cur, out_width, res, out_height, &t);
        taps_free(&t);
        free(tmp);
    } else if (tmp) {
        res = tmp;
    } else {
        res = lj_malloc((size_t)out_height * out_width * 3);
        memcpy(res, in->rgb, (size_t)out_height * out_width * 3);
    }
    out->height = out_height;
    out->width = out_width;
    out->rgb = res;
}

/* ---- patches ---------------------------------------------------------------------------------- */

void lj_vision_patchify_u8(const lj_vision_preproc *p, const lj_image *img, lj_grid_thw grid, uint8_t *out) {
    const int ps = p->patch_size, tps = p->temporal_patch_size, ms = p->merge_size;
    LJ_ASSERT(img->height == grid.h * ps && img->width == grid.w * ps && grid.h % ms == 0 && grid.w % ms == 0);
    const int64_t dim = lj_vision_preproc_patch_dim(p);
    const int bh_n = grid.h / ms, bw_n = grid.w / ms;
    int64_t r = 0;
    for (int t = 0; t < grid.t; t++)
        for (int bh = 0; bh < bh_n; bh++)
            for (int bw = 0; bw < bw_n; bw++)
                for (int mh = 0; mh < ms; mh++)
                    for (int mw = 0; mw < ms; mw++, r++) {
                        uint8_t *row = out + r * dim;
                        const int y0 = (bh * ms + mh) * ps, x0 = (bw * ms + mw) * ps;
                        for (int c = 0; c < 3; c++)
                            for (int py = 0; py < ps; py++) {
                                const uint8_t *src = img->rgb + ((size_t)(y0 + py) * img->width + x0) * 3 + c;
                                uint8_t *dst = row + ((int64_t)c * tps * ps + py) * ps;
                                for (int px = 0; px < ps; px++) dst[px] = src[px * 3];
                                for (int tt = 1; tt < tps; tt++) memcpy(dst + (int64_t)tt * ps * ps, dst, (size_t)ps);
                            }
                    }
}

void lj_vision_normalize(const lj_vision_preproc *p, const uint8_t *patches, int64_t num_patches, float *out) {
    const int64_t dim = lj_vision_preproc_patch_dim(p), per_c = dim / 3;
    const float inv = (float)(1.0 / p->rescale_factor);
    float mean[3], std[3];
    for (int c = 0; c < 3; c++) mean[c] = p->image_mean[c] * inv, std[c] = p->image_std[c] * inv;
    for (int64_t r = 0; r < num_patches; r++)
        for (int64_t j = 0; j < dim; j++) {
            const int c = (int)(j / per_c);
            out[r * dim + j] = ((float)patches[r * dim + j] - mean[c]) / std[c];
        }
}

lj_status lj_vision_preprocess(const lj_vision_preproc *p, const lj_image *img, const char *name,
                               float **pixel_values, lj_grid_thw *grid) {
    LJ_TRY(lj_vision_grid(p, img->height, img->width, name, grid));
    lj_image rs;
    const int ps = p->patch_size, tps = p->temporal_patch_size, ms = p->merge_size;
    lj_image_resize_bicubic(img, grid->h * ps, grid->w * ps, p->resize, &rs);
    /* normalized channel planes [3][H][W] (the same formula as lj_vision_normalize), then rows of
     * ps floats copied into place: lj_vision_normalize(lj_vision_patchify_u8()) in two cheap passes */
    const size_t H = (size_t)rs.height, W = (size_t)rs.width;
    float *planes = lj_malloc(sizeof(float) * 3 * H * W);
    const float inv = (float)(1.0 / p->rescale_factor);
    for (int c = 0; c < 3; c++) {
        const float mean = p->image_mean[c] * inv, std = p->image_std[c] * inv;
        float *pl = planes + (size_t)c * H * W;
        for (size_t i = 0; i < H * W; i++) pl[i] = ((float)rs.rgb[i * 3 + c] - mean) / std;
    }
    lj_image_free(&rs);
    const int64_t n = lj_grid_patches(*grid), dim = lj_vision_preproc_patch_dim(p);
    float *out = *pixel_values = lj_malloc(sizeof(float) * (size_t)(n * dim));
    int64_t r = 0;
    for (int t = 0; t < grid->t; t++)
        for (int bh = 0; bh < grid->h / ms; bh++)
            for (int bw = 0; bw < grid->w / ms; bw++)
                for (int mh = 0; mh < ms; mh++)
                    for (int mw = 0; mw < ms; mw++, r++) {
                        const size_t y0 = (size_t)(bh * ms + mh) * ps, x0 = (size_t)(bw * ms + mw) * ps;
                        for (int c = 0; c < 3; c++)
                            for (int tt = 0; tt < tps; tt++)
                                for (int py = 0; py < ps; py++)
                                    memcpy(out + r * dim + ((int64_t)(c * tps + tt) * ps + py) * ps,
                                           planes + ((size_t)c * H + y0 + py) * W + x0, sizeof(float) * (size_t)ps);
                    }
    free(planes);
    return LJ_OK;
}
