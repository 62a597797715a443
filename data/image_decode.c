/* image_decode.c: JPEG (libjpeg-turbo), PNG (libpng) and WebP (libwebp's animation decoder)
 * to 8-bit RGB, as Pillow reads them and Image.convert("RGB") converts them (see image.h). */
#include <ctype.h>
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>
#include <webp/decode.h>
#include <webp/demux.h>

#include "data/image.h"

void lj_image_free(lj_image *img) {
    if (!img) return;
    free(img->rgb);
    memset(img, 0, sizeof *img);
}

lj_image_format lj_image_sniff(const void *data, size_t size) {
    const uint8_t *b = data;
    if (size >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return LJ_IMAGE_JPEG;
    if (size >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0) return LJ_IMAGE_PNG;
    if (size >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WEBP", 4) == 0) return LJ_IMAGE_WEBP;
    return LJ_IMAGE_UNKNOWN;
}

int lj_image_is_video_name(const char *path) {
    static const char *const ext[] = {".mp4", ".m4v", ".mov", ".avi", ".mkv", ".webm", ".mpg", ".mpeg",
                                      ".ts",  ".flv", ".wmv", ".3gp", ".ogv", ".m2ts"};
    const char *dot = strrchr(path, '.');
    if (!dot || strchr(dot, '/')) return 0;
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (strcasecmp(dot, ext[i]) == 0) return 1;
    return 0;
}

/* What a file that is no supported image is, by its first bytes (NULL: nothing known). */
static const char *other_format(const uint8_t *b, size_t n) {
    if (n >= 12 && memcmp(b + 4, "ftyp", 4) == 0) {
        if (memcmp(b + 8, "heic", 4) == 0 || memcmp(b + 8, "heix", 4) == 0 || memcmp(b + 8, "mif1", 4) == 0 ||
            memcmp(b + 8, "avif", 4) == 0)
            return "a HEIF/AVIF image";
        return "an MP4/QuickTime video";
    }
    if (n >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "AVI ", 4) == 0) return "an AVI video";
    if (n >= 4 && memcmp(b, "\x1a\x45\xdf\xa3", 4) == 0) return "a Matroska/WebM video";
    if (n >= 4 && memcmp(b, "\x00\x00\x01\xba", 4) == 0) return "an MPEG video";
    if (n >= 3 && memcmp(b, "FLV", 3) == 0) return "an FLV video";
    if (n >= 4 && memcmp(b, "GIF8", 4) == 0) return "a GIF image";
    if (n >= 2 && memcmp(b, "BM", 2) == 0) return "a BMP image";
    if (n >= 4 && (memcmp(b, "II*\0", 4) == 0 || memcmp(b, "MM\0*", 4) == 0)) return "a TIFF image";
    return NULL;
}

static int is_video(const char *what) { return what && strstr(what, "video") != NULL; }

static lj_status check_size(const char *name, int64_t w, int64_t h, int64_t max_pixels) {
    if (w <= 0 || h <= 0) return lj_fail(LJ_ERR_FORMAT, "%s: the image is %lldx%lld (empty)", name, (long long)w, (long long)h);
    if (w > INT32_MAX / 4 || h > INT32_MAX / 4 || w * h > max_pixels)
        return lj_fail(LJ_ERR_UNSUPPORTED,
                       "%s: the image is %lldx%lld = %lld pixels, over the limit of %lld (a decompression bomb "
                       "or a mistake; Pillow's MAX_IMAGE_PIXELS is the default limit)",
                       name, (long long)w, (long long)h, (long long)(w * h), (long long)max_pixels);
    return LJ_OK;
}

/* ---- JPEG ---------------------------------------------------------------------------------- */

typedef struct {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    int truncated;
    char what[JMSG_LENGTH_MAX]; /* libjpeg's warning */
} jpeg_err;

static void jpeg_on_error(j_common_ptr cinfo) {
    jpeg_err *e = (jpeg_err *)cinfo->err;
    longjmp(e->jump, 1);
}

/* Warnings: Pillow fails on a premature end of the data (its "image file is truncated"). Both
 * ways the data can end before the image does, which libjpeg only warns about and fills in, are
 * errors here: the file ends (JWRN_JPEG_EOF, "Premature end of JPEG file"), or the scan data
 * ends at a marker (JWRN_HIT_MARKER, "premature end of data segment": a frame header that claims
 * more rows than the scan holds; refused so as not to train on filled-in rows). The other
 * warnings (extraneous bytes before a marker, a bad ICC marker) are ignored, as Pillow does. */
static void jpeg_on_message(j_common_ptr cinfo, int level) {
    jpeg_err *e = (jpeg_err *)cinfo->err;
    if (level < 0 && (cinfo->err->msg_code == JWRN_JPEG_EOF || cinfo->err->msg_code == JWRN_HIT_MARKER)) {
        e->truncated = 1;
        cinfo->err->format_message(cinfo, e->what);
    }
}

static lj_status decode_jpeg(const uint8_t *data, size_t size, const char *name, int64_t max_pixels, lj_image *out) {
    struct jpeg_decompress_struct cinfo;
    jpeg_err err;
    memset(&cinfo, 0, sizeof cinfo);
    cinfo.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = jpeg_on_error;
    err.mgr.emit_message = jpeg_on_message;
    err.truncated = 0;
    err.what[0] = '\0';
    uint8_t *volatile rgb = NULL;
    if (setjmp(err.jump)) {
        char msg[JMSG_LENGTH_MAX];
        err.mgr.format_message((j_common_ptr)&cinfo, msg);
        jpeg_destroy_decompress(&cinfo);
        free(rgb);
        return lj_fail(LJ_ERR_FORMAT, "%s: not a readable JPEG file: %s", name, msg);
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)size);
    jpeg_read_header(&cinfo, TRUE);
    lj_status st = err.truncated ? lj_fail(LJ_ERR_FORMAT, "%s: the JPEG data ends early (truncated file: %s)", name, err.what) : LJ_OK;
    if (st == LJ_OK) st = check_size(name, cinfo.image_width, cinfo.image_height, max_pixels);
    if (st == LJ_OK && (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK))
        st = lj_fail(LJ_ERR_UNSUPPORTED,
                     "%s: a CMYK JPEG; convert it to RGB first (Pillow's CMYK to RGB conversion ignores the colour "
                     "profile, so no faithful RGB exists to train on)",
                     name);
    if (st == LJ_OK && cinfo.num_components != 1 && cinfo.num_components != 3)
        st = lj_fail(LJ_ERR_UNSUPPORTED, "%s: a JPEG with %d components (1 or 3 expected)", name, cinfo.num_components);
    if (st != LJ_OK) {
        jpeg_destroy_decompress(&cinfo);
        return st;
    }
    cinfo.out_color_space = JCS_RGB; /* grey -> R = G = B, as convert("RGB") does */
    cinfo.dct_method = JDCT_ISLOW;
    cinfo.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&cinfo);
    const size_t stride = (size_t)cinfo.output_width * 3;
    rgb = lj_malloc(stride * cinfo.output_height);
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = rgb + stride * cinfo.output_scanline;
        jpeg_read_scanlines(&cinfo, &row, 1);
        if (err.truncated) break;
    }
    if (err.truncated) {
        jpeg_destroy_decompress(&cinfo);
        free(rgb);
        return lj_fail(LJ_ERR_FORMAT, "%s: the JPEG data ends early (truncated file: %s)", name, err.what);
    }
    out->width = (int32_t)cinfo.output_width;
    out->height = (int32_t)cinfo.output_height;
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    out->rgb = rgb;
    return LJ_OK;
}

/* ---- PNG ----------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *data;
    size_t size, pos;
    char msg[256];
} png_src;

static void png_on_read(png_structp png, png_bytep dst, png_size_t n) {
    png_src *s = png_get_io_ptr(png);
    if (n > s->size - s->pos) png_error(png, "the file ends early (truncated)");
    memcpy(dst, s->data + s->pos, n);
    s->pos += n;
}

static void png_on_error(png_structp png, png_const_charp msg) {
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

static lj_status decode_png(const uint8_t *data, size_t size, const char *name, int64_t max_pixels, lj_image *out) {
    /* the size from IHDR (the first chunk) before libpng reads on */
    if (size >= 24 && memcmp(data + 12, "IHDR", 4) == 0) LJ_TRY(check_size(name, be32(data + 16), be32(data + 20), max_pixels));
    png_src src = {data, size, 0, ""};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
    if (!png) return lj_fail(LJ_ERR_OOM, "%s: libpng could not start", name);
    png_infop info = png_create_info_struct(png);
    uint8_t *volatile buf = NULL, *volatile rgb = NULL;
    png_bytep *volatile rows = NULL;
    if (!info || setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        free(buf), free(rgb), free(rows);
        return lj_fail(LJ_ERR_FORMAT, "%s: not a readable PNG file: %s", name, src.msg[0] ? src.msg : "libpng failed");
    }
    png_set_read_fn(png, &src, png_on_read);
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff); /* the pixel limit below is ours */
    png_read_info(png, info);
    const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    const int depth = png_get_bit_depth(png, info), ctype = png_get_color_type(png, info);
    lj_status st = check_size(name, w, h, max_pixels);
    if (st == LJ_OK && depth == 16 && ctype == PNG_COLOR_TYPE_GRAY)
        st = lj_fail(LJ_ERR_UNSUPPORTED,
                     "%s: a 16-bit greyscale PNG; Pillow reads it as mode I;16 and clips every value above 255 "
                     "when converting to RGB, so convert it to 8 bits first",
                     name);
    if (st != LJ_OK) {
        png_destroy_read_struct(&png, &info, NULL);
        return st;
    }
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16) png_set_strip_16(png); /* the high byte, as Pillow's RGB;16B unpacker */
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const int ch = png_get_channels(png, info);
    const size_t rowbytes = png_get_rowbytes(png, info);
    if (ch < 1 || ch > 4 || rowbytes != (size_t)w * ch) png_error(png, "unexpected pixel layout after expansion");
    buf = lj_malloc(rowbytes * h);
    rows = lj_malloc(sizeof(png_bytep) * h);
    for (png_uint_32 y = 0; y < h; y++) rows[y] = buf + rowbytes * y;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    /* channels to RGB: grey (1) and grey+alpha (2) replicated, alpha dropped */
    rgb = lj_malloc((size_t)w * h * 3);
    const size_t n = (size_t)w * h;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = buf + i * ch;
        uint8_t *q = rgb + i * 3;
        if (ch <= 2) q[0] = q[1] = q[2] = p[0];
        else q[0] = p[0], q[1] = p[1], q[2] = p[2];
    }
    free(buf);
    out->width = (int32_t)w;
    out->height = (int32_t)h;
    out->rgb = rgb;
    return LJ_OK;
}

/* ---- WebP ---------------------------------------------------------------------------------- */

/* Pillow decodes every WebP (still or animated) with libwebp's animation decoder into RGBA and
 * shows the first frame; the same here, alpha dropped. */
static lj_status decode_webp(const uint8_t *data, size_t size, const char *name, int64_t max_pixels, lj_image *out) {
    WebPBitstreamFeatures f;
    if (WebPGetFeatures(data, size, &f) != VP8_STATUS_OK)
        return lj_fail(LJ_ERR_FORMAT, "%s: not a readable WebP file (bad header)", name);
    WebPData wd = {data, size};
    WebPDemuxer *dmx = WebPDemux(&wd);
    if (!dmx) return lj_fail(LJ_ERR_FORMAT, "%s: not a readable WebP file (truncated or corrupt container)", name);
    const int64_t cw = WebPDemuxGetI(dmx, WEBP_FF_CANVAS_WIDTH), chh = WebPDemuxGetI(dmx, WEBP_FF_CANVAS_HEIGHT);
    WebPDemuxDelete(dmx);
    LJ_TRY(check_size(name, cw, chh, max_pixels));
    WebPAnimDecoderOptions opt;
    if (!WebPAnimDecoderOptionsInit(&opt)) return lj_fail(LJ_ERR_UNSUPPORTED, "%s: libwebp version mismatch", name);
    opt.color_mode = MODE_RGBA;
    opt.use_threads = 0;
    WebPAnimDecoder *dec = WebPAnimDecoderNew(&wd, &opt);
    if (!dec) return lj_fail(LJ_ERR_FORMAT, "%s: not a readable WebP file", name);
    uint8_t *frame = NULL;
    int ts = 0;
    if (!WebPAnimDecoderGetNext(dec, &frame, &ts) || !frame) {
        WebPAnimDecoderDelete(dec);
        return lj_fail(LJ_ERR_FORMAT, "%s: the WebP image data is truncated or corrupt", name);
    }
    const size_t n = (size_t)cw * chh;
    uint8_t *rgb = lj_malloc(n * 3);
    for (size_t i = 0; i < n; i++) memcpy(rgb + i * 3, frame + i * 4, 3);
    WebPAnimDecoderDelete(dec);
    out->width = (int32_t)cw;
    out->height = (int32_t)chh;
    out->rgb = rgb;
    return LJ_OK;
}

/* ---- entry points ---------------------------------------------------------------------------- */

lj_status lj_image_decode(const void *data, size_t size, const char *name, int64_t max_pixels, lj_image *out) {
    memset(out, 0, sizeof *out);
    if (max_pixels <= 0) max_pixels = LJ_IMAGE_MAX_PIXELS_DEFAULT;
    if (size == 0) return lj_fail(LJ_ERR_FORMAT, "%s: the file is empty", name);
    lj_status st;
    switch (lj_image_sniff(data, size)) {
    case LJ_IMAGE_JPEG: st = decode_jpeg(data, size, name, max_pixels, out); break;
    case LJ_IMAGE_PNG: st = decode_png(data, size, name, max_pixels, out); break;
    case LJ_IMAGE_WEBP: st = decode_webp(data, size, name, max_pixels, out); break;
    default: {
        const char *what = other_format(data, size);
        if (is_video(what))
            return lj_fail(LJ_ERR_UNSUPPORTED, "%s: %s; only images are supported (JPEG, PNG, WebP)", name, what);
        if (what) return lj_fail(LJ_ERR_UNSUPPORTED, "%s: %s; supported are JPEG, PNG and WebP", name, what);
        return lj_fail(LJ_ERR_FORMAT, "%s: not a JPEG, PNG or WebP file (unknown signature)", name);
    }
    }
    if (st != LJ_OK) memset(out, 0, sizeof *out);
    return st;
}

lj_status lj_image_read(const char *path, int64_t max_pixels, lj_image *out) {
    memset(out, 0, sizeof *out);
    if (lj_image_is_video_name(path))
        return lj_fail(LJ_ERR_UNSUPPORTED, "%s: a video file (by its extension); only images are supported", path);
    char *data;
    size_t size;
    LJ_TRY(lj_file_read_all(path, &data, &size));
    lj_status st = lj_image_decode(data, size, path, max_pixels, out);
    free(data);
    return st;
}
