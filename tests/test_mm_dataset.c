/* test_mm_dataset.c: the multimodal dataset: prepare from LLaVA JSON and from a WebDataset tar
 * (made here with libarchive) over scikit-image's photographs, the rendered chat template and
 * its loss mask (decoded with the Qwen3 tokenizer), bad inputs, and the loader: packing,
 * labels, MRoPE positions, cu_seqlens, the images' pixel_values, ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include <archive.h>
#include <archive_entry.h>
#include <string.h>
#include <unistd.h>

#include "data/mm_dataset.h"
#include "data/mm_loader.h"
#include "data/mm_prepare.h"
#include "data/tokenizer.h"
#include "test_util.h"

static char g_images[1024], g_tok[1024], g_tmp[1024];
static lj_tokenizer *g_tokenizer;

static int setup(void **state) {
    (void)state;
    const char *cache = getenv("LJ_CACHE");
    snprintf(g_images, sizeof g_images, "%s/images/skimage", cache ? cache : ".cache");
    snprintf(g_tok, sizeof g_tok, "%s/tokenizer/qwen3/tokenizer.json", cache ? cache : ".cache");
    char probe[1200];
    snprintf(probe, sizeof probe, "%s/chelsea.png", g_images);
    if (access(probe, R_OK) != 0 || lj_tokenizer_load(g_tok, &g_tokenizer) != LJ_OK) {
        fprintf(stderr, "test_mm_dataset: needs %s and %s: run scripts/setup.sh\n", probe, g_tok);
        return -1;
    }
    return lj_test_make_dir(g_tmp, sizeof g_tmp, "mm");
}

static int teardown(void **state) {
    (void)state;
    lj_tokenizer_free(g_tokenizer);
    return 0;
}

static const char k_llava[] =
    "[{\"id\": \"a1\", \"image\": \"chelsea.png\", \"conversations\": ["
    "{\"from\": \"human\", \"value\": \"<image>\\nWhat animal is this?\"}, {\"from\": \"gpt\", \"value\": \"A cat.\"},"
    "{\"from\": \"human\", \"value\": \"What colour?\"}, {\"from\": \"gpt\", \"value\": \"Ginger.\"}]},"
    "{\"id\": \"a2\", \"image\": [\"rocket.jpg\", \"coffee.png\"], \"conversations\": ["
    "{\"from\": \"human\", \"value\": \"Compare <image> and <image>.\"}, {\"from\": \"gpt\", \"value\": \"A rocket, a cup.\"}]},"
    "{\"id\": \"t\", \"conversations\": [{\"from\": \"system\", \"value\": \"Be brief.\"},"
    "{\"from\": \"human\", \"value\": \"Hi\"}, {\"from\": \"gpt\", \"value\": \"Hello.\"}]}]";

static lj_status prepare(const char *input, const char *prefix, const char *root, lj_mm_prepare_stats *s) {
    lj_mm_prepare_config c;
    lj_mm_prepare_config_init(&c);
    const char *in[1] = {input};
    c.inputs = in;
    c.num_inputs = 1;
    c.output_prefix = prefix;
    c.tokenizer_path = g_tok;
    c.image_root = root;
    c.progress = 0;
    return lj_mm_prepare_run(&c, s);
}

static void write_text(const char *path, const char *text) {
    assert_int_equal(lj_test_write_file(path, text, strlen(text)), 0);
}

static char *decode(const int32_t *ids, int64_t n) {
    char *text;
    size_t len;
    assert_int_equal(lj_tokenizer_decode(g_tokenizer, ids, n, &text, &len), LJ_OK);
    return text;
}

/* "<|image_pad|>" n times between vision_start and vision_end. */
static void append_image(char *buf, int pads) {
    strcat(buf, "<|vision_start|>");
    for (int i = 0; i < pads; i++) strcat(buf, "<|image_pad|>");
    strcat(buf, "<|vision_end|>");
}

static void make_llava(char *prefix, size_t n) {
    char json[1200];
    snprintf(json, sizeof json, "%s/llava.json", g_tmp);
    write_text(json, k_llava);
    snprintf(prefix, n, "%s/out/llava", g_tmp);
    lj_mm_prepare_stats s;
    lj_status st = prepare(json, prefix, g_images, &s);
    if (st != LJ_OK) fail_msg("prepare: %s", lj_error_message());
    assert_int_equal(s.samples, 3);
    assert_int_equal(s.images, 3);
    /* chelsea 300x451 -> 288x448: 126 tokens; rocket 427x640 -> 416x640: 260; coffee 400x600 -> 384x608: 228 */
    assert_int_equal(s.image_tokens, 126 + 260 + 228 + 3 * 2);
}

static void test_template_and_mask(void **state) {
    (void)state;
    char prefix[1200];
    make_llava(prefix, sizeof prefix);
    lj_mm_dataset ds;
    assert_int_equal(lj_mm_dataset_open(&ds, prefix), LJ_OK);
    assert_int_equal(ds.num_samples, 3);
    static char want[1 << 16];
    want[0] = 0;
    strcat(want, "<|im_start|>user\n");
    append_image(want, 126);
    strcat(want, "\nWhat animal is this?<|im_end|>\n<|im_start|>assistant\nA cat.<|im_end|>\n"
                 "<|im_start|>user\nWhat colour?<|im_end|>\n<|im_start|>assistant\nGinger.<|im_end|>\n");
    char *got = decode(ds.tokens, lj_mm_sample_tokens(&ds, 0));
    assert_string_equal(got, want);
    free(got);
    /* the trained tokens: the assistant contents and their <|im_end|> */
    int32_t trained[64];
    int nt = 0;
    for (int64_t i = 0; i < lj_mm_sample_tokens(&ds, 0); i++)
        if (ds.mask[i]) trained[nt++] = ds.tokens[i];
    got = decode(trained, nt);
    assert_string_equal(got, "A cat.<|im_end|>Ginger.<|im_end|>");
    free(got);
    /* sample 1: two images in place */
    want[0] = 0;
    strcat(want, "<|im_start|>user\nCompare ");
    append_image(want, 260);
    strcat(want, " and ");
    append_image(want, 228);
    strcat(want, ".<|im_end|>\n<|im_start|>assistant\nA rocket, a cup.<|im_end|>\n");
    got = decode(ds.tokens + ds.sample_token_start[1], lj_mm_sample_tokens(&ds, 1));
    assert_string_equal(got, want);
    free(got);
    const lj_mm_image_rec *r = &ds.images[ds.sample_image_start[1] + 1];
    assert_int_equal(r->grid_h, 24);
    assert_int_equal(r->grid_w, 38);
    assert_int_equal(ds.tokens[ds.sample_token_start[1] + r->token_pos], ds.meta.vision_start_id);
    /* sample 2: text only, a system turn */
    got = decode(ds.tokens + ds.sample_token_start[2], lj_mm_sample_tokens(&ds, 2));
    assert_string_equal(got, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                             "<|im_start|>assistant\nHello.<|im_end|>\n");
    free(got);
    /* the image bytes are the file's */
    char path[1200];
    snprintf(path, sizeof path, "%s/chelsea.png", g_images);
    char *file;
    size_t n;
    assert_int_equal(lj_file_read_all(path, &file, &n), LJ_OK);
    assert_int_equal(ds.images[0].byte_size, (int64_t)n);
    assert_memory_equal(ds.image_data + ds.images[0].byte_offset, file, n);
    free(file);
    lj_mm_dataset_close(&ds);
}

static void expect_prepare_error(const char *name, const char *json, lj_status want, const char *needle) {
    char in[1200], prefix[1200], idx[1300];
    snprintf(in, sizeof in, "%s/%s", g_tmp, name);
    write_text(in, json);
    snprintf(prefix, sizeof prefix, "%s/bad/%s", g_tmp, name);
    lj_mm_prepare_stats s;
    const lj_status st = prepare(in, prefix, g_images, &s);
    if (st != want) fail_msg("%s: status %d, expected %d: %s", name, st, want, lj_error_message());
    if (!strstr(lj_error_message(), name) || !strstr(lj_error_message(), needle))
        fail_msg("%s: the message should name the file and say '%s': %s", name, needle, lj_error_message());
    snprintf(idx, sizeof idx, "%s.mmidx", prefix);
    assert_int_not_equal(access(idx, F_OK), 0); /* nothing left behind */
}

static void test_bad_inputs(void **state) {
    (void)state;
    expect_prepare_error("count.json",
                         "[{\"image\": \"chelsea.png\", \"conversations\": [{\"from\": \"human\", \"value\": "
                         "\"<image> <image>\"}, {\"from\": \"gpt\", \"value\": \"x\"}]}]",
                         LJ_ERR_FORMAT, "2 <image> placeholders for 1 images");
    expect_prepare_error("missing.json",
                         "[{\"image\": \"no-such.jpg\", \"conversations\": [{\"from\": \"human\", \"value\": "
                         "\"<image>\"}, {\"from\": \"gpt\", \"value\": \"x\"}]}]",
                         LJ_ERR_IO, "no-such.jpg");
    expect_prepare_error("role.jsonl",
                         "{\"conversations\": [{\"from\": \"robot\", \"value\": \"hi\"}]}\n", LJ_ERR_FORMAT, "role.jsonl:1");
    expect_prepare_error("broken.json",
                         "[{\"image\": \"truncated.jpg\", \"conversations\": [{\"from\": \"human\", \"value\": "
                         "\"<image>\"}, {\"from\": \"gpt\", \"value\": \"x\"}]}]",
                         LJ_ERR_FORMAT, "truncated.jpg");
    expect_prepare_error("video.json",
                         "[{\"image\": \"clip.mp4\", \"conversations\": [{\"from\": \"human\", \"value\": "
                         "\"<image>\"}, {\"from\": \"gpt\", \"value\": \"x\"}]}]",
                         LJ_ERR_UNSUPPORTED, "video");
    expect_prepare_error("noanswer.json", "[{\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}]}]",
                         LJ_ERR_FORMAT, "no assistant turn");
    expect_prepare_error("syntax.json", "[{\"conversations\": ", LJ_ERR_FORMAT, "not valid JSON");
    /* video: a "video" key (LLaVA-style video data) or a <video> placeholder is refused, naming the field */
    expect_prepare_error("videokey.jsonl",
                         "{\"video\": \"clip.mp4\", \"conversations\": [{\"from\": \"human\", \"value\": "
                         "\"<video>\\nWhat happens?\"}, {\"from\": \"gpt\", \"value\": \"x\"}]}\n",
                         LJ_ERR_UNSUPPORTED, "videokey.jsonl:1: \"video\": video input is not supported");
    expect_prepare_error("videotag.jsonl",
                         "{\"conversations\": [{\"from\": \"human\", \"value\": \"<video> What happens?\"}, "
                         "{\"from\": \"gpt\", \"value\": \"x\"}]}\n",
                         LJ_ERR_UNSUPPORTED, "videotag.jsonl:1: conversations[0].value: a <video> placeholder: video input "
                         "is not supported");
    /* the image field is named, and why it is no image file */
    expect_prepare_error("nofile.jsonl",
                         "{\"image\": \"no-such.jpg\", \"conversations\": [{\"from\": \"human\", \"value\": "
                         "\"<image>\"}, {\"from\": \"gpt\", \"value\": \"x\"}]}\n",
                         LJ_ERR_IO, "nofile.jsonl:1: image: /");
    expect_prepare_error("dot.jsonl",
                         "{\"image\": \".\", \"conversations\": [{\"from\": \"human\", \"value\": "
                         "\"<image>\"}, {\"from\": \"gpt\", \"value\": \"x\"}]}\n",
                         LJ_ERR_FORMAT, "is a directory");
    expect_prepare_error("emptypath.jsonl",
                         "{\"images\": [\"chelsea.png\", \"\"], \"conversations\": [{\"from\": \"human\", \"value\": "
                         "\"<image><image>\"}, {\"from\": \"gpt\", \"value\": \"x\"}]}\n",
                         LJ_ERR_FORMAT, "emptypath.jsonl:1: images[1]: the path is empty");
    assert_null(strstr(lj_error_message(), ": : "));
    char path[1200], json[3000];
    snprintf(path, sizeof path, "%s/empty.png", g_tmp);
    assert_int_equal(lj_test_write_file(path, "", 0), 0);
    snprintf(json, sizeof json, "{\"image\": \"%s\", \"conversations\": [{\"from\": \"human\", \"value\": "
             "\"<image>\"}, {\"from\": \"gpt\", \"value\": \"x\"}]}\n", path);
    expect_prepare_error("emptyfile.jsonl", json, LJ_ERR_FORMAT, "empty.png is empty (0 bytes)");
    /* ill-formed UTF-8: the field and the byte within it */
    const char *bad_utf8 = "{\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}, "
                           "{\"from\": \"gpt\", \"value\": \"ok \xff there\"}]}\n";
    expect_prepare_error("utf8.jsonl", bad_utf8, LJ_ERR_FORMAT,
                         "utf8.jsonl:1: conversations[1].value: invalid UTF-8 at byte 3 of the string (byte 0xff)");
}

/* --utf8-errors replace applies to the text of multimodal samples too. */
static void test_utf8_replace(void **state) {
    (void)state;
    char in[1200], prefix[1200];
    snprintf(in, sizeof in, "%s/utf8r.jsonl", g_tmp);
    write_text(in, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                   "{\"role\": \"assistant\", \"content\": \"ok \xff there\"}]}\n");
    snprintf(prefix, sizeof prefix, "%s/out/utf8r", g_tmp);
    lj_mm_prepare_config c;
    lj_mm_prepare_config_init(&c);
    const char *inputs[1] = {in};
    c.inputs = inputs;
    c.num_inputs = 1;
    c.output_prefix = prefix;
    c.tokenizer_path = g_tok;
    c.image_root = g_images;
    c.progress = 0;
    c.utf8_replace = 1;
    lj_mm_prepare_stats s;
    if (lj_mm_prepare_run(&c, &s) != LJ_OK) fail_msg("prepare: %s", lj_error_message());
    assert_int_equal(s.utf8_replaced, 1);
    lj_mm_dataset ds;
    assert_int_equal(lj_mm_dataset_open(&ds, prefix), LJ_OK);
    char *got = decode(ds.tokens, lj_mm_sample_tokens(&ds, 0));
    assert_non_null(strstr(got, "ok \xef\xbf\xbd there<|im_end|>"));
    free(got);
    lj_mm_dataset_close(&ds);
}

/* A JPEG whose data ends before its image does is refused, as Pillow refuses it ("image file is
 * truncated"): cut in half (libjpeg's "Premature end of JPEG file"), and a frame header that claims
 * twice the rows (its "premature end of data segment"); libjpeg only warns and fills the rest in. */
static void test_truncated_jpeg(void **state) {
    (void)state;
    char path[1200], json[3000];
    snprintf(path, sizeof path, "%s/rocket.jpg", g_images);
    char *data;
    size_t n;
    assert_int_equal(lj_file_read_all(path, &data, &n), LJ_OK);
    snprintf(path, sizeof path, "%s/half.jpg", g_tmp);
    assert_int_equal(lj_test_write_file(path, data, n / 2), 0);
    snprintf(json, sizeof json, "{\"image\": \"%s\", \"conversations\": [{\"from\": \"human\", \"value\": "
             "\"<image>\"}, {\"from\": \"gpt\", \"value\": \"x\"}]}\n", path);
    expect_prepare_error("half.jsonl", json, LJ_ERR_FORMAT, "half.jpg: the JPEG data ends early");
    /* the SOF0 height doubled */
    uint8_t *b = (uint8_t *)data;
    size_t i = 2;
    while (i + 9 < n && b[i] == 0xFF && b[i + 1] != 0xC0 && b[i + 1] != 0xC2) i += 2 + ((size_t)b[i + 2] << 8 | b[i + 3]);
    assert_true(i + 9 < n && b[i] == 0xFF);
    const unsigned h = (unsigned)b[i + 5] << 8 | b[i + 6];
    assert_int_equal(h, 427);
    b[i + 5] = (uint8_t)((2 * h) >> 8), b[i + 6] = (uint8_t)(2 * h);
    snprintf(path, sizeof path, "%s/tall.jpg", g_tmp);
    assert_int_equal(lj_test_write_file(path, data, n), 0);
    free(data);
    lj_image img;
    assert_int_equal(lj_image_read(path, 0, &img), LJ_ERR_FORMAT);
    assert_non_null(strstr(lj_error_message(), "tall.jpg: the JPEG data ends early"));
    snprintf(json, sizeof json, "{\"image\": \"%s\", \"conversations\": [{\"from\": \"human\", \"value\": "
             "\"<image>\"}, {\"from\": \"gpt\", \"value\": \"x\"}]}\n", path);
    expect_prepare_error("tall.jsonl", json, LJ_ERR_FORMAT, "tall.jpg: the JPEG data ends early");
}

static void tar_add(struct archive *a, const char *name, const void *data, size_t n) {
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, name);
    archive_entry_set_size(e, (la_int64_t)n);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
    assert_int_equal(archive_write_data(a, data, n), (la_ssize_t)n);
    archive_entry_free(e);
}

static void test_webdataset(void **state) {
    (void)state;
    char tar[1200], prefix[1200], path[1200];
    snprintf(tar, sizeof tar, "%s/shard-000000.tar", g_tmp);
    struct archive *a = archive_write_new();
    archive_write_set_format_ustar(a);
    assert_int_equal(archive_write_open_filename(a, tar), ARCHIVE_OK);
    const char *files[2] = {"rocket.jpg", "chelsea.png"};
    char *data[2];
    size_t n[2];
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", g_images, files[i]);
        assert_int_equal(lj_file_read_all(path, &data[i], &n[i]), LJ_OK);
    }
    tar_add(a, "s/000001.jpg", data[0], n[0]);
    tar_add(a, "s/000001.txt", "A rocket on its pad.", 20);
    tar_add(a, "s/000002.png", data[1], n[1]);
    const char *conv = "{\"conversations\": [{\"from\": \"human\", \"value\": \"<image>\\nName it.\"},"
                       "{\"from\": \"gpt\", \"value\": \"Chelsea.\"}]}";
    tar_add(a, "s/000002.json", conv, strlen(conv));
    tar_add(a, "s/000002.cls", "3", 1);
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
    free(data[0]), free(data[1]);
    snprintf(prefix, sizeof prefix, "%s/out/wds", g_tmp);
    lj_mm_prepare_stats s;
    lj_status st = prepare(tar, prefix, NULL, &s);
    if (st != LJ_OK) fail_msg("prepare: %s", lj_error_message());
    assert_int_equal(s.samples, 2);
    assert_int_equal(s.images, 2);
    lj_mm_dataset ds;
    assert_int_equal(lj_mm_dataset_open(&ds, prefix), LJ_OK);
    static char want[1 << 15];
    want[0] = 0;
    strcat(want, "<|im_start|>user\n");
    append_image(want, 260);
    strcat(want, "\n<|im_end|>\n<|im_start|>assistant\nA rocket on its pad.<|im_end|>\n");
    char *got = decode(ds.tokens, lj_mm_sample_tokens(&ds, 0));
    assert_string_equal(got, want);
    free(got);
    lj_mm_dataset_close(&ds);
    /* rows of 64 tokens: every sample starts with an image of 130 or 262 tokens */
    lj_mm_loader_config lc;
    memset(&lc, 0, sizeof lc);
    lc.prefix = prefix;
    lc.seq_length = 64;
    lc.micro_batch_size = 1;
    lj_mm_loader *ld;
    assert_int_equal(lj_mm_loader_open(&ld, &lc), LJ_OK);
    const lj_mm_batch *b;
    assert_int_equal(lj_mm_loader_next(ld, &b), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "no sample fits --seq-length 64"));
    lj_mm_loader_close(ld);
    /* a shard cut short */
    char *bytes;
    size_t size;
    assert_int_equal(lj_file_read_all(tar, &bytes, &size), LJ_OK);
    snprintf(path, sizeof path, "%s/cut.tar", g_tmp);
    assert_int_equal(lj_test_write_file(path, bytes, size / 3), 0);
    free(bytes);
    snprintf(prefix, sizeof prefix, "%s/out/cut", g_tmp);
    assert_int_equal(prepare(path, prefix, NULL, &s), LJ_ERR_FORMAT);
    assert_non_null(strstr(lj_error_message(), "cut.tar"));
}

/* ---- the loader ------------------------------------------------------------------------------------- */

static void check_batch_invariants(const lj_mm_dataset *ds, const lj_mm_batch *b) {
    const int64_t BT = (int64_t)b->B * b->T;
    int64_t pads = 0;
    for (int64_t i = 0; i < BT; i++) {
        pads += b->input_ids[i] == ds->meta.image_pad_id;
        /* a label is the next input of the same segment */
        if (b->labels[i] != LJ_MM_IGNORE_INDEX) {
            assert_true((i + 1) % b->T != 0 && b->segment_ids[i + 1] == b->segment_ids[i]);
            assert_int_equal(b->labels[i], b->input_ids[i + 1]);
        }
        if (b->input_ids[i] == ds->meta.image_pad_id) assert_int_equal(b->labels[i], LJ_MM_IGNORE_INDEX);
    }
    int64_t patches = 0;
    for (int k = 0; k < b->num_images; k++) patches += lj_grid_patches(b->image_grid_thw[k]);
    assert_int_equal(patches, b->num_patches);
    assert_int_equal(pads * 4, b->num_patches);
    assert_int_equal(b->cu_seqlens[0], 0);
    assert_int_equal(b->cu_seqlens[b->num_segments], BT);
    for (int k = 0; k < b->num_segments; k++) {
        const int32_t s = b->cu_seqlens[k], e = b->cu_seqlens[k + 1];
        assert_true(e > s && s / b->T == (e - 1) / b->T);
        for (int32_t i = s; i < e; i++) assert_int_equal(b->segment_ids[i], b->segment_ids[s]);
        if (b->segment_ids[s] >= 0) assert_int_equal(b->position_ids[s], 0); /* positions restart */
    }
}

/* A loader over the LLaVA dataset (made again in `prefix`) in file order. */
static lj_mm_loader *open_loader(char *prefix, size_t n, int T, int B, int workers, lj_mm_loader_config *c) {
    make_llava(prefix, n);
    memset(c, 0, sizeof *c);
    c->prefix = prefix;
    c->seq_length = T;
    c->micro_batch_size = B;
    c->no_shuffle = 1;
    c->num_workers = workers;
    lj_mm_loader *ld;
    assert_int_equal(lj_mm_loader_open(&ld, c), LJ_OK);
    return ld;
}

static void test_loader(void **state) {
    (void)state;
    char prefix[1200];
    lj_mm_loader_config c;
    lj_mm_loader *ld = open_loader(prefix, sizeof prefix, 1024, 1, 2, &c);
    const lj_mm_dataset *ds = lj_mm_loader_dataset(ld);
    const lj_mm_batch *b;
    assert_int_equal(lj_mm_loader_next(ld, &b), LJ_OK);
    /* 162 + 512 + 20 + 162 pairs: samples 0, 1, 2 and epoch 1's sample 0 share the row */
    check_batch_invariants(ds, b);
    assert_int_equal(b->num_images, 4);
    assert_int_equal(b->samples, 4);
    assert_int_equal(b->num_segments, 5);
    assert_int_equal(b->image_grid_thw[0].h, 18);
    assert_int_equal(b->image_grid_thw[0].w, 28);
    /* MRoPE: <|vision_start|> at 3, the pads from 4 in a 9 x 14 merged grid, <|vision_end|> at 4 + 14 */
    const int64_t T = b->T;
    assert_int_equal(b->input_ids[3], ds->meta.vision_start_id);
    assert_int_equal(b->position_ids[3], 3);
    const int64_t last_pad = 4 + 126 - 1, vend = 4 + 126;
    assert_int_equal(b->position_ids[last_pad], 4);               /* t */
    assert_int_equal(b->position_ids[T + last_pad], 4 + 8);       /* h: row 8 */
    assert_int_equal(b->position_ids[2 * T + last_pad], 4 + 13);  /* w: column 13 */
    assert_int_equal(b->input_ids[vend], ds->meta.vision_end_id);
    for (int a = 0; a < 3; a++) assert_int_equal(b->position_ids[a * T + vend], 18);
    /* the first image's pixel_values are chelsea's, preprocessed */
    char path[1200];
    snprintf(path, sizeof path, "%s/chelsea.png", g_images);
    lj_image im;
    assert_int_equal(lj_image_read(path, 0, &im), LJ_OK);
    lj_vision_preproc p;
    lj_vision_preproc_qwen3vl(&p);
    float *pv;
    lj_grid_thw g;
    assert_int_equal(lj_vision_preprocess(&p, &im, "chelsea", &pv, &g), LJ_OK);
    assert_memory_equal(b->pixel_values, pv, sizeof(float) * 504 * 1536);
    free(pv);
    lj_image_free(&im);
    /* the stream goes on (epoch 1); a loader resumed at a saved position gives the same batch */
    int32_t after[1024];
    int64_t pos = 0;
    for (int i = 0; i < 3; i++) {
        if (i == 1) pos = lj_mm_loader_position(ld);
        assert_int_equal(lj_mm_loader_next(ld, &b), LJ_OK);
        check_batch_invariants(ds, b);
        if (i == 1) memcpy(after, b->input_ids, sizeof after);
    }
    lj_mm_loader_close(ld);
    assert_true(pos > 0);
    c.start_position = pos;
    assert_int_equal(lj_mm_loader_open(&ld, &c), LJ_OK);
    assert_int_equal(lj_mm_loader_next(ld, &b), LJ_OK);
    assert_memory_equal(b->input_ids, after, sizeof after);
    lj_mm_loader_close(ld);
}

/* Short rows: a sample cut before an image, a sample that cannot fit, two ranks. */
static void test_loader_packing(void **state) {
    (void)state;
    char prefix[1200];
    lj_mm_loader_config c;
    lj_mm_loader *ld = open_loader(prefix, sizeof prefix, 200, 2, 3, &c); /* a ring of 6 slots */
    const lj_mm_dataset *ds = lj_mm_loader_dataset(ld);
    int64_t images = 0, skipped = 0;
    for (int i = 0; i < 6; i++) {
        const lj_mm_batch *b;
        assert_int_equal(lj_mm_loader_next(ld, &b), LJ_OK);
        check_batch_invariants(ds, b);
        for (int k = 0; k < b->num_images; k++) assert_true(b->image_grid_thw[k].h == 18); /* only chelsea fits */
        images += b->num_images;
        skipped = b->skipped;
    }
    assert_true(images > 0);
    assert_true(skipped > 0); /* sample 1: its first image (262 tokens) is longer than a row */
    /* counted for the message: sample 1 (its 262-token image first) is the one skipped */
    lj_mm_loader_skips k;
    lj_mm_loader_skip_count(ld, &k);
    assert_int_equal(k.samples, 3);
    assert_int_equal(k.skipped, 1);
    assert_int_equal(k.longest, lj_mm_sample_tokens(ds, 1));
    char msg[256];
    assert_int_equal(lj_mm_loader_skip_message(ld, msg, sizeof msg), 1);
    char want[256];
    snprintf(want, sizeof want, "1 of 3 samples are longer than --seq-length 200 (the longest: %lld tokens) and are skipped",
             (long long)k.longest);
    assert_non_null(strstr(msg, want));
    lj_mm_loader_close(ld);
    /* two ranks read disjoint samples: rank 1 starts with sample 1, which it must skip, then 3 = 0 */
    c.seq_length = 1024;
    c.micro_batch_size = 1;
    c.dp_world_size = 2;
    c.dp_rank = 1;
    assert_int_equal(lj_mm_loader_open(&ld, &c), LJ_OK);
    ds = lj_mm_loader_dataset(ld);
    const lj_mm_batch *b;
    assert_int_equal(lj_mm_loader_next(ld, &b), LJ_OK);
    check_batch_invariants(ds, b);
    assert_int_equal(b->image_grid_thw[0].h, 26); /* rocket first: sample 1 */
    char msg2[256];
    assert_int_equal(lj_mm_loader_skip_message(ld, msg2, sizeof msg2), 0); /* all fit 1024 */
    assert_string_equal(msg2, "");
    lj_mm_loader_close(ld);
}

/* hold H: the last H batches stay valid together, each the batch a loader of hold 1 gives at that
 * point of the stream, and the position is the last one's. */
static void test_loader_hold(void **state) {
    (void)state;
    enum { N = 6, H = 3, T = 200 };
    char prefix[1200];
    lj_mm_loader_config c;
    lj_mm_loader *ld = open_loader(prefix, sizeof prefix, T, 1, 2, &c);
    static int32_t want[N][T];
    int64_t pos[N];
    const lj_mm_batch *b;
    for (int i = 0; i < N; i++) {
        assert_int_equal(lj_mm_loader_next(ld, &b), LJ_OK);
        memcpy(want[i], b->input_ids, sizeof want[i]);
        pos[i] = lj_mm_loader_position(ld);
    }
    lj_mm_loader_close(ld);
    assert_true(pos[N - 1] > pos[0]);
    c.hold = H;
    assert_int_equal(lj_mm_loader_open(&ld, &c), LJ_OK);
    const lj_mm_batch *held[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(lj_mm_loader_next(ld, &held[i]), LJ_OK);
        assert_int_equal(lj_mm_loader_position(ld), pos[i]);
        for (int k = i >= H - 1 ? i - H + 1 : 0; k <= i; k++)
            assert_memory_equal(held[k]->input_ids, want[k], sizeof want[k]);
    }
    lj_mm_loader_close(ld);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_and_mask),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_utf8_replace),
        cmocka_unit_test(test_truncated_jpeg),
        cmocka_unit_test(test_webdataset),
        cmocka_unit_test(test_loader),
        cmocka_unit_test(test_loader_packing),
        cmocka_unit_test(test_loader_hold),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
