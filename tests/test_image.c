/* test_image.c: data/image.h: decoding scikit-image's photographs (the set-up script unpacks
 * them into the cache) against Pillow's RGB, broken and refused files (made here from the real
 * ones), smart_resize, the bicubic resizes (Pillow 9.4's results for the PIL kind), the patch
 * layout, and, when tests/fixtures/qwen3vl/ holds them, transformers' own pixel_values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include <math.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <cjson/cJSON.h>
#include <jpeglib.h>
#include <png.h>
#include <webp/encode.h>

#include "data/image.h"
#include "test_util.h"

static char g_images[1024]; /* the cache's images/skimage */
static char g_tmp[1024];

static int setup(void **state) {
    (void)state;
    const char *cache = getenv("LJ_CACHE");
    snprintf(g_images, sizeof g_images, "%s/images/skimage", cache ? cache : ".cache");
    char probe[1200];
    snprintf(probe, sizeof probe, "%s/chelsea.png", g_images);
    if (access(probe, R_OK) != 0) {
        fprintf(stderr, "test_image: %s is absent: run scripts/setup.sh (it unpacks scikit-image's test images)\n",
                probe);
        return -1;
    }
    return lj_test_make_dir(g_tmp, sizeof g_tmp, "image");
}

static void image_path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_images, name); }

static uint64_t rgb_hash(const lj_image *im) {
    return lj_hash(LJ_HASH_INIT, im->rgb, (size_t)im->height * im->width * 3);
}

static void *read_file(const char *path, size_t *n) {
    char *d;
    assert_int_equal(lj_file_read_all(path, &d, n), LJ_OK);
    return d;
}

/* ---- decoding against Pillow ------------------------------------------------------------------ */

/* Pillow 9.4 (Debian 12, the same libjpeg-turbo 2.1.5): Image.open(f).convert("RGB"), FNV-1a 64
 * of the H*W*3 bytes. */
static const struct {
    const char *file;
    int h, w;
    uint64_t fnv;
} k_pillow[] = {
    {"chelsea.png", 300, 451, 0xb2179687966157a8ULL},         /* RGB */
    {"rocket.jpg", 427, 640, 0x34b9b35d9b0edb19ULL},          /* JPEG, 4:2:0 */
    {"camera.png", 512, 512, 0x350bdd5a5fceb30eULL},          /* grey */
    {"logo.png", 500, 500, 0x53277361b10f3de2ULL},            /* RGBA: alpha dropped */
    {"horse.png", 328, 400, 0x1721f9f0cdc2aec9ULL},           /* RGBA */
    {"palette_color.png", 10, 10, 0x75075ef3769146dcULL},     /* palette */
    {"foo3x5x4indexed.png", 3, 5, 0xfd9bf9a950db49b2ULL},     /* palette with tRNS */
    {"checker_bilevel.png", 10, 10, 0x929056621424adc7ULL},   /* 1-bit grey */
    {"chessboard_RGB.png", 200, 200, 0xe20d4996b6f5b4ddULL},  /* 16-bit RGB: high bytes */
};

static void test_decode_like_pillow(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_pillow / sizeof k_pillow[0]; i++) {
        char path[1200];
        image_path(path, sizeof path, k_pillow[i].file);
        lj_image im;
        lj_status st = lj_image_read(path, 0, &im);
        if (st != LJ_OK) fail_msg("%s: %s", k_pillow[i].file, lj_error_message());
        assert_int_equal(im.height, k_pillow[i].h);
        assert_int_equal(im.width, k_pillow[i].w);
        if (rgb_hash(&im) != k_pillow[i].fnv) fail_msg("%s: the RGB pixels differ from Pillow's", k_pillow[i].file);
        lj_image_free(&im);
    }
}

static void test_grey_is_replicated(void **state) {
    (void)state;
    char path[1200];
    image_path(path, sizeof path, "camera.png");
    lj_image im;
    assert_int_equal(lj_image_read(path, 0, &im), LJ_OK);
    int differ = 0;
    for (int64_t i = 0; i < (int64_t)im.height * im.width; i++)
        differ += im.rgb[i * 3] != im.rgb[i * 3 + 1] || im.rgb[i * 3] != im.rgb[i * 3 + 2];
    assert_int_equal(differ, 0);
    lj_image_free(&im);
}

/* A still lossless WebP of chelsea decodes to the same pixels; an animated WebP (a RIFF
 * container built here around two lossless frames) decodes to its first frame. */
static void put_le(uint8_t *p, uint32_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void test_webp(void **state) {
    (void)state;
    char path[1200];
    image_path(path, sizeof path, "chelsea.png");
    lj_image im;
    assert_int_equal(lj_image_read(path, 0, &im), LJ_OK);
    uint8_t *webp = NULL;
    const size_t n = WebPEncodeLosslessRGB(im.rgb, im.width, im.height, im.width * 3, &webp);
    assert_true(n > 0);
    assert_int_equal(lj_image_sniff(webp, n), LJ_IMAGE_WEBP);
    lj_image back;
    assert_int_equal(lj_image_decode(webp, n, "chelsea.webp", 0, &back), LJ_OK);
    assert_int_equal(back.width, im.width);
    assert_int_equal(back.height, im.height);
    assert_true(rgb_hash(&back) == rgb_hash(&im));
    lj_image_free(&back);
    /* two 8x8 frames (red, then blue): VP8X (animation), ANIM, ANMF x 2 */
    uint8_t red[8 * 8 * 3], blue[8 * 8 * 3];
    for (int i = 0; i < 64; i++) red[i * 3] = 255, red[i * 3 + 1] = red[i * 3 + 2] = 0;
    for (int i = 0; i < 64; i++) blue[i * 3 + 2] = 255, blue[i * 3] = blue[i * 3 + 1] = 0;
    uint8_t *f[2];
    size_t fn[2];
    fn[0] = WebPEncodeLosslessRGB(red, 8, 8, 24, &f[0]);
    fn[1] = WebPEncodeLosslessRGB(blue, 8, 8, 24, &f[1]);
    uint8_t anim[4096];
    size_t pos = 12;
    memcpy(anim + pos, "VP8X", 4), put_le(anim + pos + 4, 10, 4);
    memset(anim + pos + 8, 0, 10);
    anim[pos + 8] = 0x02; /* animation flag */
    put_le(anim + pos + 12, 7, 3), put_le(anim + pos + 15, 7, 3);
    pos += 18;
    memcpy(anim + pos, "ANIM", 4), put_le(anim + pos + 4, 6, 4), memset(anim + pos + 8, 0, 6);
    pos += 14;
    for (int k = 0; k < 2; k++) {
        /* the frame's VP8L chunk is the encoded file less its 12-byte RIFF header */
        const size_t body = fn[k] - 12, payload = 16 + body;
        memcpy(anim + pos, "ANMF", 4), put_le(anim + pos + 4, (uint32_t)payload, 4);
        memset(anim + pos + 8, 0, 16);
        put_le(anim + pos + 14, 7, 3), put_le(anim + pos + 17, 7, 3), put_le(anim + pos + 20, 100, 3);
        memcpy(anim + pos + 24, f[k] + 12, body);
        pos += 8 + payload + (payload & 1);
        if (payload & 1) anim[pos - 1] = 0;
        WebPFree(f[k]);
    }
    memcpy(anim, "RIFF", 4), put_le(anim + 4, (uint32_t)(pos - 8), 4), memcpy(anim + 8, "WEBP", 4);
    lj_image first;
    lj_status st = lj_image_decode(anim, pos, "anim.webp", 0, &first);
    if (st != LJ_OK) fail_msg("animated WebP: %s", lj_error_message());
    assert_int_equal(first.width, 8);
    assert_int_equal(first.rgb[0], 255);
    assert_int_equal(first.rgb[2], 0);
    lj_image_free(&first);
    /* a truncated WebP */
    assert_int_equal(lj_image_decode(webp, n / 2, "half.webp", 0, &back), LJ_ERR_FORMAT);
    assert_non_null(strstr(lj_error_message(), "half.webp"));
    WebPFree(webp);
    lj_image_free(&im);
}

/* ---- broken and refused files ----------------------------------------------------------------- */

static void expect_refused(const void *data, size_t n, const char *name, lj_status want, const char *needle) {
    lj_image im;
    lj_status st = lj_image_decode(data, n, name, 0, &im);
    if (st != want) fail_msg("%s: status %d, expected %d (%s)", name, st, want, lj_error_message());
    if (!strstr(lj_error_message(), name)) fail_msg("%s: the message does not name the file: %s", name, lj_error_message());
    if (needle && !strstr(lj_error_message(), needle))
        fail_msg("%s: the message lacks '%s': %s", name, needle, lj_error_message());
    assert_null(im.rgb);
}

static void test_truncated_and_corrupt(void **state) {
    (void)state;
    char path[1200];
    size_t n;
    /* scikit-image's truncated.jpg really is cut short (Pillow: "Truncated File Read") */
    image_path(path, sizeof path, "truncated.jpg");
    lj_image im;
    assert_int_equal(lj_image_read(path, 0, &im), LJ_ERR_FORMAT);
    assert_non_null(strstr(lj_error_message(), "truncated.jpg"));
    image_path(path, sizeof path, "chelsea.png");
    uint8_t *png = read_file(path, &n);
    expect_refused(png, n / 2, "half.png", LJ_ERR_FORMAT, "truncated");
    expect_refused(png, 20, "header-only.png", LJ_ERR_FORMAT, NULL);
    uint8_t *bad = lj_malloc(n);
    memcpy(bad, png, n);
    for (size_t i = n / 2; i < n / 2 + 64; i++) bad[i] ^= 0x5a; /* inside IDAT: a CRC error */
    expect_refused(bad, n, "flipped.png", LJ_ERR_FORMAT, NULL);
    free(bad);
    free(png);
    image_path(path, sizeof path, "rocket.jpg");
    uint8_t *jpg = read_file(path, &n);
    expect_refused(jpg, n / 3, "third.jpg", LJ_ERR_FORMAT, "truncated");
    expect_refused(jpg, 4, "stub.jpg", LJ_ERR_FORMAT, NULL);
    free(jpg);
    expect_refused("", 0, "empty.png", LJ_ERR_FORMAT, "empty");
    expect_refused("hello, world", 12, "text.png", LJ_ERR_FORMAT, "signature");
    expect_refused("GIF89a\x01\x00\x01\x00", 10, "a.gif", LJ_ERR_UNSUPPORTED, "GIF");
    expect_refused("\x00\x00\x00\x18" "ftypisom\x00\x00\x02\x00", 16, "clip.png", LJ_ERR_UNSUPPORTED, "video");
    expect_refused("\x1a\x45\xdf\xa3\x00\x00", 6, "clip.bin", LJ_ERR_UNSUPPORTED, "video");
    /* a video by its name, before reading (the file need not exist) */
    assert_int_equal(lj_image_read("/nonexistent/clip.MP4", 0, &im), LJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(lj_error_message(), "clip.MP4"));
    assert_true(lj_image_is_video_name("a/b.webm"));
    assert_false(lj_image_is_video_name("a.mp4/b.png"));
}

/* A PNG that is only a signature, an IHDR of w x h with its CRC, and IEND. */
static size_t png_header_only(uint8_t *buf, uint32_t w, uint32_t h, int depth, int ctype) {
    memcpy(buf, "\x89PNG\r\n\x1a\n", 8);
    uint8_t *c = buf + 8;
    put_le(c, 0, 4), c[3] = 13; /* big-endian length 13 */
    memcpy(c + 4, "IHDR", 4);
    const uint32_t v[2] = {w, h};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++) c[8 + k * 4 + i] = (uint8_t)(v[k] >> (24 - 8 * i));
    c[16] = (uint8_t)depth, c[17] = (uint8_t)ctype, c[18] = c[19] = c[20] = 0;
    const uint32_t crc = (uint32_t)crc32(0, c + 4, 17);
    for (int i = 0; i < 4; i++) c[21 + i] = (uint8_t)(crc >> (24 - 8 * i));
    memcpy(c + 25, "\0\0\0\0IEND\xae\x42\x60\x82", 12);
    return 8 + 25 + 12;
}

static void test_sizes_refused(void **state) {
    (void)state;
    uint8_t buf[64];
    expect_refused(buf, png_header_only(buf, 100000, 100000, 8, 2), "huge.png", LJ_ERR_UNSUPPORTED, "over the limit");
    expect_refused(buf, png_header_only(buf, 0, 0, 8, 2), "zero.png", LJ_ERR_FORMAT, NULL);
    /* a limit of the caller's */
    char path[1200];
    image_path(path, sizeof path, "chelsea.png");
    lj_image im;
    assert_int_equal(lj_image_read(path, 1000, &im), LJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(lj_error_message(), "over the limit of 1000"));
}

/* A 16-bit greyscale PNG and a CMYK JPEG, written here with libpng and libjpeg. */
static void test_formats_refused(void **state) {
    (void)state;
    char path[1200];
    snprintf(path, sizeof path, "%s/grey16.png", g_tmp);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_init_io(png, f);
    png_set_IHDR(png, info, 4, 4, 16, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    uint8_t row[8] = {0};
    for (int y = 0; y < 4; y++) png_write_row(png, row);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    fclose(f);
    lj_image im;
    assert_int_equal(lj_image_read(path, 0, &im), LJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(lj_error_message(), "16-bit greyscale"));
    assert_non_null(strstr(lj_error_message(), "grey16.png"));

    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    unsigned char *mem = NULL;
    unsigned long memn = 0;
    jpeg_mem_dest(&c, &mem, &memn);
    c.image_width = 16, c.image_height = 16, c.input_components = 4, c.in_color_space = JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_start_compress(&c, TRUE);
    uint8_t cmyk[16 * 4];
    memset(cmyk, 100, sizeof cmyk);
    JSAMPROW r = cmyk;
    for (int y = 0; y < 16; y++) jpeg_write_scanlines(&c, &r, 1);
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    expect_refused(mem, memn, "cmyk.jpg", LJ_ERR_UNSUPPORTED, "CMYK");
    free(mem);
}

/* ---- smart_resize ------------------------------------------------------------------------------- */

static void expect_resize(int64_t h, int64_t w, int64_t mn, int64_t mx, int32_t eh, int32_t ew) {
    int32_t oh = 0, ow = 0;
    lj_status st = lj_smart_resize(h, w, 32, mn, mx, "x", &oh, &ow);
    if (st != LJ_OK || oh != eh || ow != ew)
        fail_msg("smart_resize(%lld, %lld, min %lld, max %lld) = %dx%d (%s), expected %dx%d", (long long)h,
                 (long long)w, (long long)mn, (long long)mx, oh, ow, st ? lj_error_message() : "ok", eh, ew);
}

static void test_smart_resize(void **state) {
    (void)state;
    expect_resize(300, 451, 65536, 16777216, 288, 448); /* chelsea: 9.375 -> 9, 14.09 -> 14 */
    expect_resize(400, 600, 65536, 16777216, 384, 608); /* coffee: 12.5 rounds to even 12 */
    expect_resize(432, 432, 65536, 16777216, 448, 448); /* 13.5 rounds to even 14 */
    expect_resize(400, 600, 65536, 160000, 320, 480);   /* floor path */
    expect_resize(100, 100, 65536, 16777216, 256, 256); /* ceil path: upscaled to min_pixels */
    expect_resize(4096, 4096, 65536, 16777216, 4096, 4096);
    expect_resize(8192, 8192, 65536, 16777216, 4096, 4096);
    expect_resize(20, 500, 65536, 16777216, 64, 1280);  /* a side below 32: upscaled (transformers 5.17) */
    expect_resize(16, 16, 65536, 16777216, 256, 256);
    expect_resize(300, 451, 1024, 1024, 32, 32);        /* the max path keeps one merged patch */
    int32_t oh, ow;
    assert_int_equal(lj_smart_resize(32, 6401, 32, 65536, 16777216, "thin.png", &oh, &ow), LJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(lj_error_message(), "thin.png"));
    assert_non_null(strstr(lj_error_message(), "aspect ratio"));
    assert_int_equal(lj_smart_resize(32, 6400, 32, 0, INT64_MAX, "x", &oh, &ow), LJ_OK); /* exactly 200 */
    assert_int_equal(lj_smart_resize(0, 0, 32, 65536, 16777216, "empty.png", &oh, &ow), LJ_ERR_UNSUPPORTED);
    assert_int_equal(lj_smart_resize(8, 8, 32, 0, 16777216, "dot.png", &oh, &ow), LJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(lj_error_message(), "no merged patch"));
    /* an image too small for one merged patch is refused through the whole processor when the
     * limits leave it none */
    lj_vision_preproc p;
    lj_vision_preproc_qwen3vl(&p);
    p.min_pixels = 0;
    lj_image tiny = {16, 16, lj_calloc(16 * 16 * 3, 1)};
    float *pv = NULL;
    lj_grid_thw g;
    assert_int_equal(lj_vision_preprocess(&p, &tiny, "tiny.png", &pv, &g), LJ_ERR_UNSUPPORTED);
    assert_null(pv);
    lj_vision_preproc_qwen3vl(&p);
    assert_int_equal(lj_vision_preprocess(&p, &tiny, "tiny.png", &pv, &g), LJ_OK); /* upscaled to 256 x 256 */
    assert_true(g.h == 16 && g.w == 16);
    free(pv);
    lj_image_free(&tiny);
}

static char *fixture_path(char *buf, size_t n, const char *file) {
    const char *src = getenv("LJ_SOURCE_DIR");
    snprintf(buf, n, "%s/tests/fixtures/qwen3vl/%s", src ? src : ".", file);
    return buf;
}

/* tests/fixtures/qwen3vl/<file> parsed (cJSON_Delete it), or a skip saying how to make it. */
static cJSON *fixture_json(const char *file) {
    char path[1200];
    fixture_path(path, sizeof path, file);
    if (access(path, R_OK) != 0) {
        print_message("skipped: %s is absent; make it on a machine with transformers: python3 "
                      "tests/fixtures/make_qwen3vl_pixels.py (docs/qwen3-vl.md)\n", path);
        skip();
    }
    size_t n;
    char *text = read_file(path, &n);
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) fail_msg("%s: not valid JSON", path);
    return root;
}

/* The table transformers' smart_resize made (smart_resize.json). */
static void test_smart_resize_table(void **state) {
    (void)state;
    cJSON *root = fixture_json("smart_resize.json");
    const cJSON *rows = cJSON_GetObjectItem(root, "rows");
    int checked = 0, errors = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, rows) {
        const int64_t h = (int64_t)cJSON_GetObjectItem(r, "h")->valuedouble;
        const int64_t w = (int64_t)cJSON_GetObjectItem(r, "w")->valuedouble;
        const int64_t mn = (int64_t)cJSON_GetObjectItem(r, "min_pixels")->valuedouble;
        const int64_t mx = (int64_t)cJSON_GetObjectItem(r, "max_pixels")->valuedouble;
        const cJSON *out = cJSON_GetObjectItem(r, "out");
        int32_t oh = 0, ow = 0;
        const lj_status st = lj_smart_resize(h, w, 32, mn, mx, "x", &oh, &ow);
        const int32_t eh = out ? cJSON_GetArrayItem(out, 0)->valueint : 0;
        const int32_t ew = out ? cJSON_GetArrayItem(out, 1)->valueint : 0;
        if (out && eh > 0 && ew > 0) {
            if (st != LJ_OK || oh != eh || ow != ew)
                fail_msg("smart_resize(%lld, %lld, %lld, %lld): %dx%d, transformers %dx%d", (long long)h, (long long)w,
                         (long long)mn, (long long)mx, oh, ow, eh, ew);
        } else { /* transformers raises (or, in versions before 5.17, returned a side of 0): refused here */
            if (st == LJ_OK)
                fail_msg("smart_resize(%lld, %lld, %lld, %lld): accepted, transformers %s", (long long)h, (long long)w,
                         (long long)mn, (long long)mx, out ? "returns a side of 0" : "raises");
            errors++;
        }
        checked++;
    }
    print_message("smart_resize: %d rows of transformers' table agree (%d errors)\n", checked, errors);
    assert_true(checked > 100);
    cJSON_Delete(root);
}

/* ---- resize and patches --------------------------------------------------------------------------- */

/* Pillow 9.4: Image.open(f).convert("RGB").resize((w, h), Image.BICUBIC), FNV-1a 64. */
static void test_resize_pil(void **state) {
    (void)state;
    static const struct {
        const char *file;
        int h, w;
        uint64_t fnv;
    } k[] = {
        {"chelsea.png", 288, 448, 0x462b6481fabdc557ULL},        /* both passes, slight downscale */
        {"coffee.png", 320, 480, 0x91b79eb34c122858ULL},         /* downscale 1.25 */
        {"rocket.jpg", 128, 192, 0xb1ec13da6ff86c18ULL},         /* downscale 3.3 */
        {"microaneurysms.png", 256, 256, 0x73b82e573d33a2c9ULL}, /* upscale 2.5 */
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char path[1200];
        image_path(path, sizeof path, k[i].file);
        lj_image im, out;
        assert_int_equal(lj_image_read(path, 0, &im), LJ_OK);
        lj_image_resize_bicubic(&im, k[i].h, k[i].w, LJ_RESIZE_PIL, &out);
        if (rgb_hash(&out) != k[i].fnv) fail_msg("%s -> %dx%d: differs from Pillow's resize", k[i].file, k[i].h, k[i].w);
        /* torch's uint8 kernel: the same taps at a lower precision, within 2 of Pillow */
        lj_image tv;
        lj_image_resize_bicubic(&im, k[i].h, k[i].w, LJ_RESIZE_TORCH_U8, &tv);
        int maxd = 0;
        for (int64_t j = 0; j < (int64_t)out.height * out.width * 3; j++) {
            const int d = abs((int)out.rgb[j] - (int)tv.rgb[j]);
            if (d > maxd) maxd = d;
        }
        assert_true(maxd <= 2);
        lj_image_free(&tv);
        lj_image_free(&out);
        lj_image_free(&im);
    }
}

static void test_resize_identity_and_constant(void **state) {
    (void)state;
    lj_image im = {64, 96, lj_malloc(64 * 96 * 3)};
    for (int i = 0; i < 64 * 96 * 3; i++) im.rgb[i] = (uint8_t)(i * 7);
    lj_image out;
    lj_image_resize_bicubic(&im, 64, 96, LJ_RESIZE_TORCH_U8, &out);
    assert_memory_equal(out.rgb, im.rgb, 64 * 96 * 3);
    lj_image_free(&out);
    memset(im.rgb, 200, 64 * 96 * 3);
    for (int kind = 0; kind < 2; kind++) {
        lj_image_resize_bicubic(&im, 37, 211, (lj_resize_kind)kind, &out);
        for (int i = 0; i < 37 * 211 * 3; i++) assert_int_equal(out.rgb[i], 200);
        lj_image_free(&out);
    }
    lj_image_free(&im);
}

/* pv[((t*(gh/2)+bh)*(gw/2)+bw)*4 + mh*2+mw][c*512 + tt*256 + py*16 + px]
 *   = img[c][(2bh+mh)*16+py][(2bw+mw)*16+px], for both frames tt. */
static void test_patch_layout(void **state) {
    (void)state;
    lj_vision_preproc p;
    lj_vision_preproc_qwen3vl(&p);
    const lj_grid_thw g = {1, 4, 6};
    lj_image im = {64, 96, lj_malloc(64 * 96 * 3)};
    for (int y = 0; y < 64; y++)
        for (int x = 0; x < 96; x++)
            for (int c = 0; c < 3; c++) im.rgb[(y * 96 + x) * 3 + c] = (uint8_t)((y * 5 + x * 3 + c * 101) & 255);
    const int64_t n = lj_grid_patches(g), dim = lj_vision_preproc_patch_dim(&p);
    assert_int_equal(n, 24);
    assert_int_equal(dim, 1536);
    assert_int_equal(lj_grid_tokens(g, 2), 6);
    uint8_t *u8 = lj_malloc((size_t)(n * dim));
    lj_vision_patchify_u8(&p, &im, g, u8);
    for (int bh = 0; bh < 2; bh++)
        for (int bw = 0; bw < 3; bw++)
            for (int mh = 0; mh < 2; mh++)
                for (int mw = 0; mw < 2; mw++)
                    for (int c = 0; c < 3; c++)
                        for (int tt = 0; tt < 2; tt++)
                            for (int py = 0; py < 16; py += 5)
                                for (int px = 0; px < 16; px += 3) {
                                    const int64_t row = (bh * 3 + bw) * 4 + mh * 2 + mw;
                                    const int64_t col = c * 512 + tt * 256 + py * 16 + px;
                                    const int y = (2 * bh + mh) * 16 + py, x = (2 * bw + mw) * 16 + px;
                                    assert_int_equal(u8[row * dim + col], im.rgb[(y * 96 + x) * 3 + c]);
                                }
    float *f = lj_malloc(sizeof(float) * (size_t)(n * dim));
    u8[0] = 0, u8[1] = 255, u8[2] = 127;
    lj_vision_normalize(&p, u8, n, f);
    assert_true(f[0] == -1.0f && f[1] == 1.0f);
    assert_true(f[2] == (127.0f - 127.5f) / 127.5f);
    free(f);
    free(u8);
    lj_image_free(&im);
}

/* The one-call processor equals its steps: smart_resize, resize, patchify, normalize. */
static void test_preprocess_is_its_steps(void **state) {
    (void)state;
    char path[1200];
    image_path(path, sizeof path, "coffee.png");
    lj_image im;
    assert_int_equal(lj_image_read(path, 0, &im), LJ_OK);
    lj_vision_preproc p;
    lj_vision_preproc_qwen3vl(&p);
    p.max_pixels = 160000;
    float *pv;
    lj_grid_thw g;
    assert_int_equal(lj_vision_preprocess(&p, &im, "coffee", &pv, &g), LJ_OK);
    assert_true(g.t == 1 && g.h == 20 && g.w == 30);
    lj_image rs;
    lj_image_resize_bicubic(&im, 320, 480, LJ_RESIZE_TORCH_U8, &rs);
    const int64_t n = lj_grid_patches(g), dim = lj_vision_preproc_patch_dim(&p);
    uint8_t *u8 = lj_malloc((size_t)(n * dim));
    float *f = lj_malloc(sizeof(float) * (size_t)(n * dim));
    lj_vision_patchify_u8(&p, &rs, g, u8);
    lj_vision_normalize(&p, u8, n, f);
    assert_memory_equal(pv, f, sizeof(float) * (size_t)(n * dim));
    free(pv), free(f), free(u8);
    lj_image_free(&rs);
    lj_image_free(&im);
}

/* ---- transformers' pixel_values (tests/fixtures/qwen3vl, made by make_qwen3vl_pixels.py) ---------- */

static uint8_t *read_fixture_u8(const char *file, size_t want) {
    char path[1200];
    size_t n;
    uint8_t *d = read_file(fixture_path(path, sizeof path, file), &n);
    if (n != want) fail_msg("%s: %zu bytes, expected %zu", file, n, want);
    return d;
}

/* Tolerances: the uint8 resize must agree within 1 (torch's kernel is what the default
 * processor runs: the same arithmetic); pixel_values within transformers' own tolerance between
 * its fast and slow image processors (tests/test_image_processing_common.py: atol 1e-1, mean
 * absolute difference 5e-3). */
static void test_transformers_fixtures(void **state) {
    (void)state;
    cJSON *root = fixture_json("index.json");
    lj_vision_preproc p;
    lj_vision_preproc_qwen3vl(&p);
    const cJSON *fx;
    int cases = 0;
    cJSON_ArrayForEach(fx, cJSON_GetObjectItem(root, "fixtures")) {
        const char *name = cJSON_GetObjectItem(fx, "name")->valuestring;
        char img[1200];
        image_path(img, sizeof img, cJSON_GetObjectItem(fx, "file")->valuestring);
        lj_image im;
        assert_int_equal(lj_image_read(img, 0, &im), LJ_OK);
        char want_hash[32];
        snprintf(want_hash, sizeof want_hash, "%016llx", (unsigned long long)rgb_hash(&im));
        if (strcmp(want_hash, cJSON_GetObjectItem(fx, "rgb_fnv1a64")->valuestring) != 0)
            fail_msg("%s: the decoded RGB differs from Pillow's on the fixture machine", name);
        p.min_pixels = (int64_t)cJSON_GetObjectItem(fx, "min_pixels")->valuedouble;
        p.max_pixels = (int64_t)cJSON_GetObjectItem(fx, "max_pixels")->valuedouble;
        lj_grid_thw g;
        assert_int_equal(lj_vision_grid(&p, im.height, im.width, name, &g), LJ_OK);
        const cJSON *thw = cJSON_GetObjectItem(fx, "grid_thw");
        if (g.t != cJSON_GetArrayItem(thw, 0)->valueint || g.h != cJSON_GetArrayItem(thw, 1)->valueint ||
            g.w != cJSON_GetArrayItem(thw, 2)->valueint)
            fail_msg("%s: grid (%d, %d, %d) differs from transformers'", name, g.t, g.h, g.w);
        const int64_t np = lj_grid_patches(g), dim = lj_vision_preproc_patch_dim(&p);
        for (int kind = 0; kind < 2; kind++) {
            const cJSON *file = cJSON_GetObjectItem(fx, kind == 0 ? "u8" : "pil_u8");
            if (!file) continue;
            uint8_t *want = read_fixture_u8(file->valuestring, (size_t)(np * dim));
            lj_image rs;
            lj_image_resize_bicubic(&im, g.h * 16, g.w * 16, (lj_resize_kind)kind, &rs);
            uint8_t *got = lj_malloc((size_t)(np * dim));
            lj_vision_patchify_u8(&p, &rs, g, got);
            int maxd = 0;
            int64_t differ = 0;
            for (int64_t j = 0; j < np * dim; j++) {
                const int d = abs((int)got[j] - (int)want[j]);
                differ += d != 0;
                if (d > maxd) maxd = d;
            }
            print_message("%s (%s resize): %lld of %lld values differ, max %d\n", name, kind ? "PIL" : "torch",
                          (long long)differ, (long long)(np * dim), maxd);
            if (maxd > 1) fail_msg("%s: the resized pixels differ by up to %d from transformers'", name, maxd);
            free(got), free(want);
            lj_image_free(&rs);
        }
        const cJSON *f32 = cJSON_GetObjectItem(fx, "f32");
        if (f32) {
            float *want = (float *)read_fixture_u8(f32->valuestring, (size_t)(np * dim) * 4), *got = NULL;
            lj_grid_thw g2;
            assert_int_equal(lj_vision_preprocess(&p, &im, name, &got, &g2), LJ_OK);
            double maxd = 0, sum = 0;
            for (int64_t j = 0; j < np * dim; j++) {
                const double d = fabs((double)got[j] - (double)want[j]);
                sum += d;
                if (d > maxd) maxd = d;
            }
            print_message("%s pixel_values: max |diff| %.3g, mean %.3g\n", name, maxd, sum / (double)(np * dim));
            assert_true(maxd <= 1e-1);
            assert_true(sum / (double)(np * dim) <= 5e-3);
            free(got), free(want);
        }
        lj_image_free(&im);
        cases++;
    }
    assert_true(cases > 0);
    cJSON_Delete(root);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_like_pillow),
        cmocka_unit_test(test_grey_is_replicated),
        cmocka_unit_test(test_webp),
        cmocka_unit_test(test_truncated_and_corrupt),
        cmocka_unit_test(test_sizes_refused),
        cmocka_unit_test(test_formats_refused),
        cmocka_unit_test(test_smart_resize),
        cmocka_unit_test(test_smart_resize_table),
        cmocka_unit_test(test_resize_pil),
        cmocka_unit_test(test_resize_identity_and_constant),
        cmocka_unit_test(test_patch_layout),
        cmocka_unit_test(test_preprocess_is_its_steps),
        cmocka_unit_test(test_transformers_fixtures),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
