/* test_tokenizer.c: the byte-level BPE tokenizer (data/tokenizer.h) on the real Llama 3 and
 * Qwen3 tokenizer.json files from the set-up cache and on small tokenizer.json files made here:
 * known vectors, round trips, special tokens, invalid UTF-8, bad files and refused components,
 * normalizers, Split behaviors, the post-processor's BOS, names, threads, split points. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "data/tokenizer.h"

typedef struct {
    lj_tokenizer *tok;
    char tmp[4096];
    char src[4096];
} fixture;

static fixture g_fix; /* test-file state only */

static int setup(void **state) {
    const char *cache = getenv("LJ_CACHE");
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/llama3/tokenizer.json", cache ? cache : ".cache");
    if (lj_tokenizer_load(path, &g_fix.tok) != LJ_OK) {
        fprintf(stderr, "test_tokenizer: cannot load the Llama 3 tokenizer: %s\n"
                        "test_tokenizer: run scripts/setup.sh to fetch it into the cache (LJ_CACHE=%s)\n",
                lj_error_message(), cache ? cache : "(unset)");
        return -1;
    }
    const char *tmp = getenv("LJ_TEST_TMP"), *src = getenv("LJ_SOURCE_DIR");
    snprintf(g_fix.tmp, sizeof g_fix.tmp, "%s/tokenizer", tmp ? tmp : "/tmp/ljperf-test");
    snprintf(g_fix.src, sizeof g_fix.src, "%s", src ? src : ".");
    if (lj_mkdir_p(g_fix.tmp) != LJ_OK) return -1;
    *state = &g_fix;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    lj_tokenizer_free(g_fix.tok);
    return 0;
}

static void encode_ok(lj_tokenizer *tok, const char *text, size_t len, int allow_special, int32_t **ids, int64_t *n) {
    lj_status st = lj_tokenizer_encode(tok, text, len, allow_special, ids, n);
    if (st != LJ_OK) fail_msg("encode failed: %s", lj_error_message());
}

static void assert_ids(const int32_t *got, int64_t n, const int32_t *want, int64_t m) {
    if (n != m) fail_msg("got %lld ids, want %lld", (long long)n, (long long)m);
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i]) fail_msg("id %lld: got %d, want %d", (long long)i, got[i], want[i]);
}

static void round_trip(lj_tokenizer *tok, const char *text, size_t len) {
    int32_t *ids;
    int64_t n;
    encode_ok(tok, text, len, 0, &ids, &n);
    char *back;
    size_t blen;
    assert_int_equal(lj_tokenizer_decode(tok, ids, n, &back, &blen), LJ_OK);
    if (blen != len || memcmp(back, text, len) != 0) fail_msg("round trip changed \"%.60s\"", text);
    free(back);
    free(ids);
}

/* docs/reference.md: "This is a test sentence." with BOS and EOS. */
static void test_known_vector(void **state) {
    lj_tokenizer *tok = ((fixture *)*state)->tok;
    assert_int_equal(lj_tokenizer_vocab_size(tok), 128256);
    assert_int_equal(lj_tokenizer_bos_id(tok), 128000);
    assert_int_equal(lj_tokenizer_eos_id(tok), 128001);
    const char *text = "This is a test sentence.";
    int64_t n = 1, cap = 1;
    int32_t *ids = malloc(sizeof *ids);
    ids[0] = lj_tokenizer_bos_id(tok);
    assert_int_equal(lj_tokenizer_encode_append(tok, text, strlen(text), 0, &ids, &n, &cap), LJ_OK);
    assert_int_equal(lj_tokenizer_encode_append(tok, "", 0, 0, &ids, &n, &cap), LJ_OK); /* appends nothing */
    ids = realloc(ids, (size_t)(n + 1) * sizeof *ids);
    ids[n++] = lj_tokenizer_eos_id(tok);
    const int32_t want[] = {128000, 2028, 374, 264, 1296, 11914, 13, 128001};
    assert_ids(ids, n, want, 8);
    free(ids);
}

/* Ids computed with Hugging Face tokenizers 0.23.2 (npm `tokenizers`) on the same tokenizer.json.
 * They pin behaviour where implementations differ: U+0085 is white space for the reference
 * (Oniguruma's \s), not for JavaScript's \s; U+180E is not white space (PCRE2's own \s says it
 * is). */
static void test_reference_vectors(void **state) {
    lj_tokenizer *tok = ((fixture *)*state)->tok;
    static const struct { const char *text; int32_t ids[16]; int n; } cases[] = {
        {"a\xc2\x85" "b  \xc2\x85 x", {64, 116360, 65, 256, 116360, 865}, 6},
        {"a\xe1\xa0\x8e b \xe1\xa0\x8e\xe1\xa0\x8e c", {64, 157, 254, 236, 293, 87189, 254, 236, 157, 254, 236, 272}, 12},
        {"x\xe2\x80\xa8y \xe2\x80\xa9 z\xe3\x80\x80 \xc2\xa0" "a", {87, 378, 101, 88, 639, 102, 1167, 107945, 4194, 64}, 10},
        {"I'\xe2\x84\xaall", {40, 6, 15284, 103, 657}, 5},
        {"a\x0b\x0c" "b \x00 c", {64, 199, 200, 65, 220, 188, 272}, 7},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t len = strlen(cases[c].text);
        if (c == 4) len = 8; /* holds a NUL */
        int32_t *ids;
        int64_t n;
        encode_ok(tok, cases[c].text, len, 0, &ids, &n);
        assert_ids(ids, n, cases[c].ids, cases[c].n);
        free(ids);
    }
}

static void test_round_trip(void **state) {
    fixture *f = *state;
    static const char *texts[] = {
        "0 7 42 123 1234 12345 1234567890123 3.14159 2,718,281 -15 1/2",
        "!!! ??? ... --- ;;; ''' \"\"\" ``` ((( ))) <<< >>> /// \\\\\\ ||| === ___ !?!?",
        "line one\r\nline two\r\n\r\nlone CR\rend",
        "tabs:\tone\t\ttwo\n\tindented\n \t \t mixed   \n\n\n",
        "emoji: \xf0\x9f\x98\x80 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 "
        "\xf0\x9f\x87\xaf\xf0\x9f\x87\xb5",
        "CJK: \xe5\xa4\xa9\xe5\x9c\xb0\xe7\x8e\x84\xe9\xbb\x84\xef\xbc\x8c\xe5\xae\x87\xe5\xae\x99 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e "
        "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
        "Arabic: \xd8\xa8\xd8\xb3\xd9\x85 \xd8\xa7\xd9\x84\xd9\x84\xd9\x87 \xd8\xa7\xd9\x84\xd8\xb1\xd8\xad\xd9\x85\xd9\x86",
        "Devanagari: \xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87 "
        "\xe0\xa4\xa6\xe0\xa5\x81\xe0\xa4\xa8\xe0\xa4\xbf\xe0\xa4\xaf\xe0\xa4\xbe",
        "combining: e\xcc\x81 a\xcc\x80 Z\xcd\x91\xcd\x92\xcd\x93" "a\xcd\x94 q\xcc\x87\xcc\xa3",
        "contractions: I'm you're he's they'll can't I'M THEY'LL 'twas",
        "", " ", "\n", "a", "  leading and trailing  ",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) round_trip(f->tok, texts[i], strlen(texts[i]));
    char path[4200], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/tests/data/tricky.txt", f->src);
    assert_int_equal(lj_file_read_all(path, &text, &len), LJ_OK);
    round_trip(f->tok, text, len);
    free(text);
    /* every single byte that is UTF-8 by itself, and a run of 100k spaces */
    for (int b = 0; b < 128; b++) {
        char c = (char)b;
        round_trip(f->tok, &c, 1);
    }
    char *spaces = malloc(100001);
    memset(spaces, ' ', 100000);
    spaces[100000] = 'x';
    round_trip(f->tok, spaces, 100001);
    free(spaces);
}

static void test_special_tokens(void **state) {
    lj_tokenizer *tok = ((fixture *)*state)->tok;
    const char *text = "<|begin_of_text|>hi<|eot_id|>";
    int32_t *ids;
    int64_t n;
    encode_ok(tok, text, strlen(text), 1, &ids, &n);
    const int32_t want[] = {128000, 6151, 128009};
    assert_ids(ids, n, want, 3);
    free(ids);
    encode_ok(tok, text, strlen(text), 0, &ids, &n); /* not allowed: plain text */
    assert_true(n > 3);
    for (int64_t i = 0; i < n; i++) assert_true(ids[i] < 128000);
    char *back;
    size_t blen;
    assert_int_equal(lj_tokenizer_decode(tok, ids, n, &back, &blen), LJ_OK);
    assert_string_equal(back, text);
    free(back);
    free(ids);
    assert_true(lj_tokenizer_is_special(tok, 128009));
    assert_false(lj_tokenizer_is_special(tok, 6151));
    size_t len;
    const char *s = lj_tokenizer_token(tok, 128009, &len);
    assert_non_null(s);
    assert_int_equal(len, strlen("<|eot_id|>"));
    assert_int_equal(lj_tokenizer_token_id(tok, "<|eot_id|>", len), 128009);
    s = lj_tokenizer_token(tok, 220, &len); /* byte-level "Ġ" is the raw space */
    assert_int_equal(len, 1);
    assert_int_equal(s[0], ' ');
    assert_int_equal(lj_tokenizer_token_id(tok, " the", 4), 279);
    assert_null(lj_tokenizer_token(tok, 128256, &len));
    int32_t bad[] = {9906, 128256};
    assert_int_equal(lj_tokenizer_decode(tok, bad, 2, &back, &blen), LJ_ERR_ARG);
    assert_non_null(strstr(lj_error_message(), "128256"));
}

static void test_invalid_utf8(void **state) {
    lj_tokenizer *tok = ((fixture *)*state)->tok;
    int32_t *ids;
    int64_t n;
    assert_int_equal(lj_tokenizer_encode(tok, "ab\xff" "cd", 5, 0, &ids, &n), LJ_ERR_FORMAT);
    assert_non_null(strstr(lj_error_message(), "byte offset 2"));
    assert_null(ids);
    static const struct { const char *s; size_t bad, fixes; const char *fixed; } cases[] = {
        {"a\xe2\x82\xac" "b", 5, 0, "a\xe2\x82\xac" "b"},        /* valid */
        {"a\xe2\x82" "b", 1, 1, "a\xef\xbf\xbd" "b"},             /* truncated: one U+FFFD */
        {"\xf0\x80\x80", 0, 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* overlong lead: three */
        {"\xed\xa0\x80x", 0, 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdx"}, /* surrogate */
        {"\xc0\xaf", 0, 2, "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf4\x90\x80\x80", 0, 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
        {"\xf0\x9f\x98", 0, 1, "\xef\xbf\xbd"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = strlen(cases[i].s);
        assert_int_equal(lj_utf8_check(cases[i].s, len), cases[i].bad);
        char *out;
        size_t olen;
        assert_int_equal(lj_utf8_repair(cases[i].s, len, &out, &olen), cases[i].fixes);
        assert_int_equal(olen, strlen(cases[i].fixed));
        assert_memory_equal(out, cases[i].fixed, olen);
        free(out);
    }
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void expect_load_error(const char *dir, const char *name, const char *json, lj_status code, const char *field) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (json) write_file(path, json);
    lj_tokenizer *tok = (lj_tokenizer *)1;
    lj_status st = lj_tokenizer_load(path, &tok);
    if (st != code) fail_msg("%s: status %d, want %d (%s)", name, st, code, lj_error_message());
    assert_null(tok);
    if (!strstr(lj_error_message(), path)) fail_msg("message does not name the file: %s", lj_error_message());
    if (field && !strstr(lj_error_message(), field)) fail_msg("message does not name %s: %s", field, lj_error_message());
}

static void test_bad_files(void **state) {
    const char *dir = ((fixture *)*state)->tmp;
    expect_load_error(dir, "missing.json", NULL, LJ_ERR_IO, NULL);
    expect_load_error(dir, "garbled.json", "{\"model\": {\"vocab\": {\"a\": 0,", LJ_ERR_FORMAT, "not valid JSON");
    expect_load_error(dir, "novocab.json", "{\"model\": {\"type\": \"BPE\", \"merges\": []}}", LJ_ERR_FORMAT, "model.vocab");
    expect_load_error(dir, "nomodel.json", "{\"version\": \"1.0\"}", LJ_ERR_FORMAT, "model");
    expect_load_error(dir, "badmerge.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a c\"]}}",
                      LJ_ERR_FORMAT, "model.merges[0]");
    expect_load_error(dir, "unigram.json", "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", LJ_ERR_UNSUPPORTED, "model.type");
    expect_load_error(dir, "norm.json",
                      "{\"normalizer\": {\"type\": \"Lowercase\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                      LJ_ERR_UNSUPPORTED, "normalizer.type \"Lowercase\"");
    expect_load_error(dir, "badid.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}}", LJ_ERR_FORMAT,
                      "model.vocab");
}

/* Components outside byte-level BPE are refused with the file, the field and the type named. */
static void test_refusals(void **state) {
    const char *dir = ((fixture *)*state)->tmp;
    static const struct { const char *name, *json, *field; } cases[] = {
        {"wordpiece.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}",
         "model.type \"WordPiece\" is not supported (only byte-level BPE tokenizers are supported"},
        {"unigram2.json", "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}",
         "model.type \"Unigram\" is not supported (only byte-level BPE"},
        {"prefix.json", "{\"model\": {\"type\": \"BPE\", \"continuing_subword_prefix\": \"##\", \"vocab\": {\"a\": 0}, "
                        "\"merges\": []}}", "model.continuing_subword_prefix"},
        {"normseq.json", "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, {\"type\": "
                         "\"Replace\"}]}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
         "normalizer.normalizers[1].type \"Replace\""},
        {"metaspace.json", "{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": \"BPE\", \"vocab\": "
                           "{\"a\": 0}, \"merges\": []}}", "pre_tokenizer.type \"Metaspace\""},
        {"digits.json", "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\"}, "
                        "{\"type\": \"ByteLevel\"}]}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
         "pre_tokenizer.pretokenizers[0].type \"Digits\""},
        {"nobl.json", "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                      "\"pattern\": {\"String\": \" \"}, \"behavior\": \"Isolated\"}]}, \"model\": {\"type\": \"BPE\", "
                      "\"vocab\": {\"a\": 0}, \"merges\": []}}", "must end with a ByteLevel step"},
        {"behavior.json", "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                          "\"pattern\": {\"String\": \" \"}, \"behavior\": \"Sideways\"}, {\"type\": \"ByteLevel\"}]}, "
                          "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
         "pre_tokenizer.pretokenizers[0].behavior"},
        {"badregex.json", "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                          "\"pattern\": {\"Regex\": \"(a\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}, "
                          "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
         "pre_tokenizer.pretokenizers[0].pattern: PCRE2 cannot compile"},
        {"bert.json", "{\"post_processor\": {\"type\": \"BertProcessing\"}, \"model\": {\"type\": \"BPE\", \"vocab\": "
                      "{\"a\": 0}, \"merges\": []}}", "post_processor.type \"BertProcessing\""},
        {"wpdec.json", "{\"decoder\": {\"type\": \"WordPiece\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
                       "\"merges\": []}}", "decoder.type \"WordPiece\" is not supported (only byte-level BPE"},
        {"lstrip.json", "{\"added_tokens\": [{\"id\": 1, \"content\": \"<m>\", \"special\": true, \"lstrip\": true}], "
                        "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}", "lstrip true"},
        {"normtok.json", "{\"normalizer\": {\"type\": \"NFC\"}, \"added_tokens\": [{\"id\": 1, \"content\": \"<m>\", "
                         "\"special\": false, \"normalized\": true}], \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
                         "\"merges\": []}}", "normalized true"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int code = strstr(cases[i].field, "PCRE2") ? LJ_ERR_FORMAT : LJ_ERR_UNSUPPORTED;
        expect_load_error(dir, cases[i].name, cases[i].json, code, cases[i].field);
    }
    /* a special token on the id of an ordinary one: every "&" would decode as the document end */
    expect_load_error(dir, "collide.json",
                      "{\"added_tokens\": [{\"id\": 1, \"content\": \"<|endoftext|>\", \"special\": true}], "
                      "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"&\": 1}, \"merges\": []}}",
                      LJ_ERR_FORMAT, "added_tokens (id 1, \"<|endoftext|>\") takes the id of the ordinary token "
                                     "(model.vocab) \"&\"");
    expect_load_error(dir, "collide2.json",
                      "{\"added_tokens\": [{\"id\": 1, \"content\": \"<a>\", \"special\": true}, {\"id\": 1, "
                      "\"content\": \"<b>\", \"special\": true}], \"model\": {\"type\": \"BPE\", \"vocab\": "
                      "{\"a\": 0}, \"merges\": []}}",
                      LJ_ERR_FORMAT, "added_tokens (id 1, \"<b>\") takes the id of the added token \"<a>\"");
}

/* GPT-2's bytes_to_unicode: the byte-level alphabet character of byte b, as UTF-8. */
static void byte_char(int b, char out[4]) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    int cp = b;
    if (!printable) {
        int n = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) snprintf(out, 4, "%c", cp);
    else snprintf(out, 4, "%c%c", 0xc0 | (cp >> 6), 0x80 | (cp & 0x3f));
}

/* A GPT-2 style tokenizer.json: the 256 byte tokens (id = byte), seven merges, <|endoftext|>. */
static void write_mini_gpt2(const char *path, int array_merges) {
    char *json = malloc(1 << 16), *o = json;
    o += sprintf(o, "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 263, \"content\": \"<|endoftext|>\", \"special\": true}],"
                    " \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false,"
                    " \"use_regex\": true}, \"model\": {\"type\": \"BPE\", \"dropout\": null, \"vocab\": {");
    for (int b = 0; b < 256; b++) {
        char c[4];
        byte_char(b, c);
        if (b == '"' || b == '\\') o += sprintf(o, "\"\\%s\": %d, ", c, b);
        else o += sprintf(o, "\"%s\": %d, ", c, b);
    }
    static const char *merges[7][2] = {{"\xc4\xa0", "t"}, {"h", "e"}, {"\xc4\xa0t", "he"}, {"l", "l"},
                                       {"he", "ll"},     {"hell", "o"}, {"\xc4\xa0", "h"}};
    for (int m = 0; m < 7; m++) o += sprintf(o, "\"%s%s\": %d%s", merges[m][0], merges[m][1], 256 + m, m < 6 ? ", " : "");
    o += sprintf(o, "}, \"merges\": [");
    for (int m = 0; m < 7; m++) {
        if (array_merges) o += sprintf(o, "[\"%s\", \"%s\"]%s", merges[m][0], merges[m][1], m < 6 ? ", " : "");
        else o += sprintf(o, "\"%s %s\"%s", merges[m][0], merges[m][1], m < 6 ? ", " : "");
    }
    sprintf(o, "]}}");
    write_file(path, json);
    free(json);
}

/* Expected ids checked with Hugging Face tokenizers 0.23.2 on the same file. */
static void test_gpt2_style(void **state) {
    const char *dir = ((fixture *)*state)->tmp;
    for (int form = 0; form < 2; form++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/gpt2_%d.json", dir, form);
        write_mini_gpt2(path, form);
        lj_tokenizer *tok;
        if (lj_tokenizer_load(path, &tok) != LJ_OK) fail_msg("%s", lj_error_message());
        assert_int_equal(lj_tokenizer_vocab_size(tok), 264);
        assert_int_equal(lj_tokenizer_bos_id(tok), 263);
        assert_int_equal(lj_tokenizer_eos_id(tok), 263);
        int32_t *ids;
        int64_t n;
        encode_ok(tok, "the hello there!", 16, 0, &ids, &n);
        const int32_t want[] = {116, 257, 32, 261, 258, 114, 101, 33};
        assert_ids(ids, n, want, 8);
        free(ids);
        encode_ok(tok, "a<|endoftext|>he's", 18, 1, &ids, &n);
        const int32_t want2[] = {97, 263, 257, 39, 115};
        assert_ids(ids, n, want2, 5);
        free(ids);
        round_trip(tok, "a<|endoftext|>he's \xe2\x82\xac 12", 23);
        lj_tokenizer_free(tok);
    }
}

/* A tokenizer.json of the 256 byte tokens (id = byte) plus `extra` tokens (ids 256...), no merges,
 * ignore_merges (so a piece that is a token is that one id: the pieces show in the ids),
 * <|endoftext|> at 300, and the given normalizer, pre-tokenizer and post-processor (JSON). */
static void write_mini(const char *path, const char *const *extra, int n_extra, const char *normalizer,
                       const char *pre_tokenizer, const char *post_processor) {
    char *json = malloc(1 << 16), *o = json;
    o += sprintf(o, "{\"added_tokens\": [{\"id\": 300, \"content\": \"<|endoftext|>\", \"special\": true}], "
                    "\"normalizer\": %s, \"pre_tokenizer\": %s, \"post_processor\": %s, \"decoder\": {\"type\": \"ByteLevel\"}, "
                    "\"model\": {\"type\": \"BPE\", \"ignore_merges\": true, \"continuing_subword_prefix\": \"\", "
                    "\"end_of_word_suffix\": \"\", \"vocab\": {",
                 normalizer, pre_tokenizer, post_processor);
    for (int b = 0; b < 256; b++) {
        char c[4];
        byte_char(b, c);
        if (b == '"' || b == '\\') o += sprintf(o, "\"\\%s\": %d, ", c, b);
        else o += sprintf(o, "\"%s\": %d, ", c, b);
    }
    for (int i = 0; i < n_extra; i++) o += sprintf(o, "\"%s\": %d, ", extra[i], 256 + i);
    o -= 2;
    sprintf(o, "}, \"merges\": []}}");
    write_file(path, json);
    free(json);
}

/* The ids of `text` as one string of token texts joined by '|'. */
static void pieces_of(lj_tokenizer *tok, const char *text, char *out, size_t cap) {
    int32_t *ids;
    int64_t n;
    encode_ok(tok, text, strlen(text), 1, &ids, &n);
    size_t o = 0;
    out[0] = '\0';
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = lj_tokenizer_token(tok, ids[i], &len);
        o += (size_t)snprintf(out + o, cap - o, "%s%.*s", i ? "|" : "", (int)len, s);
    }
    free(ids);
}

/* HF's documented example of SplitDelimiterBehavior ("the-final--countdown" split on '-'). */
static void test_split_behaviors(void **state) {
    const char *dir = ((fixture *)*state)->tmp;
    static const char *const extra[] = {"the", "final", "countdown", "the-", "final-", "-final", "-countdown", "--"};
    static const struct { const char *behavior; int invert; const char *want; } cases[] = {
        {"Removed", 0, "the|final|countdown"},
        {"Isolated", 0, "the|-|final|-|-|countdown"},
        {"Isolated", 1, "the|-|final|-|-|countdown"},
        {"MergedWithPrevious", 0, "the-|final-|-|countdown"},
        {"MergedWithNext", 0, "the|-final|-|-countdown"},
        {"Contiguous", 0, "the|-|final|--|countdown"},
        {"Removed", 1, "-|-|-"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[4400], pre[512], got[256];
        snprintf(path, sizeof path, "%s/split_%zu.json", dir, c);
        snprintf(pre, sizeof pre, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
                                  "{\"String\": \"-\"}, \"behavior\": \"%s\", \"invert\": %s}, {\"type\": \"ByteLevel\", "
                                  "\"add_prefix_space\": false, \"use_regex\": false}]}",
                 cases[c].behavior, cases[c].invert ? "true" : "false");
        write_mini(path, extra, 8, "null", pre, "null");
        lj_tokenizer *tok;
        if (lj_tokenizer_load(path, &tok) != LJ_OK) fail_msg("%s", lj_error_message());
        pieces_of(tok, "the-final--countdown", got, sizeof got);
        if (strcmp(got, cases[c].want) != 0)
            fail_msg("%s invert %d: got %s, want %s", cases[c].behavior, cases[c].invert, got, cases[c].want);
        lj_tokenizer_free(tok);
    }
}

/* The Unicode normalization forms, alone and in a Sequence; added tokens are matched first, on
 * the raw text. */
static void test_normalizers(void **state) {
    const char *dir = ((fixture *)*state)->tmp;
    static const char *const extra[] = {"caf\xc3\x83\xc2\xa9", "fi"}; /* "café" in the byte-level alphabet */
    static const struct { const char *normalizer, *text, *want; } cases[] = {
        {"{\"type\": \"NFC\"}", "cafe\xcc\x81 x", "caf\xc3\xa9| |x"},
        {"{\"type\": \"NFC\"}", "caf\xc3\xa9<|endoftext|>\xcc\x81", "caf\xc3\xa9|<|endoftext|>|\xcc|\x81"},
        {"{\"type\": \"NFD\"}", "caf\xc3\xa9", "c|a|f|e|\xcc|\x81"},
        {"{\"type\": \"NFKC\"}", "\xef\xac\x81", "fi"},          /* U+FB01 LATIN SMALL LIGATURE FI */
        {"{\"type\": \"NFC\"}", "\xef\xac\x81", "\xef|\xac|\x81"}, /* NFC leaves it */
        {"{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFD\"}, {\"type\": \"NFC\"}]}", "cafe\xcc\x81",
         "caf\xc3\xa9"},
        {"{\"type\": \"Sequence\", \"normalizers\": []}", "cafe\xcc\x81", "c|a|f|e|\xcc|\x81"},
        {"null", "cafe\xcc\x81", "c|a|f|e|\xcc|\x81"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[4400], got[256];
        snprintf(path, sizeof path, "%s/norm_%zu.json", dir, c);
        write_mini(path, extra, 2, cases[c].normalizer,
                   "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, "
                   "\"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}",
                   "{\"type\": \"ByteLevel\"}");
        lj_tokenizer *tok;
        if (lj_tokenizer_load(path, &tok) != LJ_OK) fail_msg("%s", lj_error_message());
        pieces_of(tok, cases[c].text, got, sizeof got);
        if (strcmp(got, cases[c].want) != 0) fail_msg("case %zu (%s): got %s, want %s", c, cases[c].normalizer, got, cases[c].want);
        lj_tokenizer_free(tok);
    }
}

/* BOS from the post-processor's template, else tokenizer_config.json, else the names. */
static void test_bos_rules(void **state) {
    const char *dir = ((fixture *)*state)->tmp;
    static const char *const extra[] = {"<s>"};
    char path[4600], sub[4400], cfg[4600];
    const char *bl = "{\"type\": \"ByteLevel\"}";
    snprintf(path, sizeof path, "%s/bos_template.json", dir);
    write_mini(path, extra, 1, "null", bl,
               "{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\"}, {\"type\": \"TemplateProcessing\", "
               "\"single\": [{\"SpecialToken\": {\"id\": \"<|endoftext|>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
               "\"type_id\": 0}}], \"special_tokens\": {\"<|endoftext|>\": {\"id\": \"<|endoftext|>\", \"ids\": [300]}}}]}");
    lj_tokenizer *tok;
    if (lj_tokenizer_load(path, &tok) != LJ_OK) fail_msg("%s", lj_error_message());
    assert_int_equal(lj_tokenizer_bos_id(tok), 300);
    assert_int_equal(lj_tokenizer_adds_bos(tok), 1);
    lj_tokenizer_free(tok);
    /* no template, no tokenizer_config.json: BOS = EOS = <|endoftext|>, not added (GPT-2) */
    snprintf(path, sizeof path, "%s/bos_none.json", dir);
    write_mini(path, extra, 1, "null", bl, "{\"type\": \"ByteLevel\"}");
    if (lj_tokenizer_load(path, &tok) != LJ_OK) fail_msg("%s", lj_error_message());
    assert_int_equal(lj_tokenizer_bos_id(tok), 300);
    assert_int_equal(lj_tokenizer_eos_id(tok), 300);
    assert_int_equal(lj_tokenizer_adds_bos(tok), 0);
    lj_tokenizer_free(tok);
    /* tokenizer_config.json: bos_token null (Qwen) or add_bos_token true */
    static const struct { const char *config; int bos, adds; } cases[] = {
        {"{\"bos_token\": null, \"eos_token\": \"<s>\"}", -1, 0},
        {"{\"bos_token\": {\"content\": \"<s>\"}}", 256, 1},
        {"{\"bos_token\": \"<s>\", \"add_bos_token\": false}", 256, 0},
        {"{\"add_bos_token\": true}", 300, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        snprintf(sub, sizeof sub, "%s/bos_cfg_%zu", dir, c);
        assert_int_equal(lj_mkdir_p(sub), LJ_OK);
        snprintf(path, sizeof path, "%s/tokenizer.json", sub);
        write_mini(path, extra, 1, "null", bl, "null");
        snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", sub);
        write_file(cfg, cases[c].config);
        if (lj_tokenizer_load(path, &tok) != LJ_OK) fail_msg("%s", lj_error_message());
        assert_int_equal(lj_tokenizer_bos_id(tok), cases[c].bos);
        assert_int_equal(lj_tokenizer_adds_bos(tok), cases[c].adds);
        assert_int_equal(lj_tokenizer_eos_id(tok), 300); /* the end-of-text token, not the config's "<s>" */
        lj_tokenizer_free(tok);
    }
}

static void load_qwen3(lj_tokenizer **tok) {
    const char *cache = getenv("LJ_CACHE");
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/qwen3/tokenizer.json", cache ? cache : ".cache");
    if (lj_tokenizer_load(path, tok) != LJ_OK) fail_msg("%s (run scripts/setup.sh)", lj_error_message());
}

/* The Qwen3 tokenizer: NFC, single digits, no BOS, <|endoftext|> ends a document. Ids from
 * Tokenizers.js (tests/oracle_encode.js) on the same file. */
static void test_qwen3(void **state) {
    lj_tokenizer *tok, *llama = ((fixture *)*state)->tok;
    load_qwen3(&tok);
    assert_int_equal(lj_tokenizer_vocab_size(tok), 151669);
    assert_int_equal(lj_tokenizer_bos_id(tok), -1);
    assert_int_equal(lj_tokenizer_eos_id(tok), 151643);
    assert_int_equal(lj_tokenizer_adds_bos(tok), 0);
    assert_int_equal(lj_tokenizer_adds_bos(llama), 1);
    int32_t *ids;
    int64_t n;
    const char *text = "Hello World 12345";
    encode_ok(tok, text, strlen(text), 0, &ids, &n);
    const int32_t want[] = {9707, 4337, 220, 16, 17, 18, 19, 20};
    assert_ids(ids, n, want, 8);
    free(ids);
    encode_ok(llama, text, strlen(text), 0, &ids, &n); /* Llama 3: digits in threes */
    const int32_t want_llama[] = {9906, 4435, 220, 4513, 1774};
    assert_ids(ids, n, want_llama, 5);
    free(ids);
    text = "<|im_start|>user\ncafe\xcc\x81 \xe4\xbd\xa0\xe5\xa5\xbd<|im_end|><|endoftext|><think>x</think>";
    encode_ok(tok, text, strlen(text), 1, &ids, &n);
    const int32_t want2[] = {151644, 872, 198, 924, 58858, 220, 108386, 151645, 151643, 151667, 87, 151668};
    assert_ids(ids, n, want2, 12);
    char *back;
    size_t blen;
    assert_int_equal(lj_tokenizer_decode(tok, ids, n, &back, &blen), LJ_OK); /* the NFC text comes back */
    assert_string_equal(back, "<|im_start|>user\ncaf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd<|im_end|><|endoftext|><think>x</think>");
    free(back);
    free(ids);
    encode_ok(tok, "<|im_end|><think>", 17, 0, &ids, &n); /* special text as plain text; <think> is not special */
    assert_true(n > 2 && ids[n - 1] == 151667);
    free(ids);
    lj_tokenizer_free(tok);
}

/* --tokenizer NAME|PATH */
static void test_resolve(void **state) {
    fixture *f = *state;
    const char *cache = getenv("LJ_CACHE");
    setenv("LJPERF_CACHE", cache ? cache : ".cache", 1);
    char buf[4400], want[4400];
    assert_int_equal(lj_tokenizer_resolve("qwen3", "--tokenizer", buf, sizeof buf), LJ_OK);
    snprintf(want, sizeof want, "%s/tokenizer/qwen3/tokenizer.json", cache ? cache : ".cache");
    assert_string_equal(buf, want);
    snprintf(want, sizeof want, "%s/tokenizer/llama3", cache ? cache : ".cache");
    assert_int_equal(lj_tokenizer_resolve(want, "--tokenizer", buf, sizeof buf), LJ_OK); /* a directory */
    strcat(want, "/tokenizer.json");
    assert_string_equal(buf, want);
    assert_int_equal(lj_tokenizer_resolve("gpt5", "--tokenizer", buf, sizeof buf), LJ_ERR_IO);
    assert_non_null(strstr(lj_error_message(), "--tokenizer gpt5"));
    assert_non_null(strstr(lj_error_message(), "llama3, qwen3"));
    snprintf(want, sizeof want, "%s/none.json", f->tmp); /* a path is left for the loader to name */
    assert_int_equal(lj_tokenizer_resolve(want, "--tokenizer", buf, sizeof buf), LJ_OK);
    assert_string_equal(buf, want);
    setenv("LJPERF_CACHE", f->tmp, 1);
    assert_int_equal(lj_tokenizer_resolve("qwen3", "--tokenizer", buf, sizeof buf), LJ_ERR_IO);
    assert_non_null(strstr(lj_error_message(), "scripts/setup.sh"));
    unsetenv("LJPERF_CACHE");
}

typedef struct {
    lj_tokenizer *tok;
    const char *text;
    size_t len;
    int32_t *ids;
    int64_t n;
    lj_status st;
} thread_job;

static void *encode_thread(void *arg) {
    thread_job *j = arg;
    for (int rep = 0; rep < 3 && j->st == LJ_OK; rep++) {
        free(j->ids);
        j->st = lj_tokenizer_encode(j->tok, j->text, j->len, 0, &j->ids, &j->n);
    }
    return NULL;
}

static void read_kjv(char **text, size_t *len, size_t max) {
    const char *cache = getenv("LJ_CACHE");
    char path[4096];
    snprintf(path, sizeof path, "%s/data/kjv.txt", cache ? cache : ".cache");
    if (lj_file_read_all(path, text, len) != LJ_OK) fail_msg("%s (run scripts/setup.sh)", lj_error_message());
    if (*len > max) *len = max;
}

/* Concurrent encodes on one tokenizer give the single-threaded ids. */
static void test_threads(void **state) {
    lj_tokenizer *tok = ((fixture *)*state)->tok;
    char *text;
    size_t len;
    read_kjv(&text, &len, 400000);
    enum { T = 4 };
    thread_job jobs[T];
    pthread_t th[T];
    for (int t = 0; t < T; t++) {
        jobs[t] = (thread_job){tok, text + t * (len / T), len / T, NULL, 0, LJ_OK};
        pthread_create(&th[t], NULL, encode_thread, &jobs[t]);
    }
    for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < T; t++) {
        assert_int_equal(jobs[t].st, LJ_OK);
        int32_t *ids;
        int64_t n;
        encode_ok(tok, jobs[t].text, jobs[t].len, 0, &ids, &n);
        assert_ids(jobs[t].ids, jobs[t].n, ids, n);
        free(ids);
        free(jobs[t].ids);
    }
    free(text);
}

/* Encoding the pieces between split points gives the ids of the whole text (Llama 3 and Qwen3;
 * the text has combining marks after some line starts, which NFC composes). */
static void test_split_points(void **state) {
    fixture *f = *state;
    char *kjv;
    size_t kjv_len;
    read_kjv(&kjv, &kjv_len, 300000);
    char *text = malloc(kjv_len * 2);
    size_t len = 0;
    for (size_t i = 0; i < kjv_len; i++) { /* "e" + U+0301 for every tenth "e" at a line start */
        text[len++] = kjv[i];
        if (kjv[i] == 'e' && i > 0 && kjv[i - 1] == '\n' && i % 10 < 5) {
            text[len++] = '\xcc';
            text[len++] = '\x81';
        }
    }
    lj_tokenizer *qwen;
    load_qwen3(&qwen);
    lj_tokenizer *toks[2] = {f->tok, qwen};
    for (int k = 0; k < 2; k++) {
        int32_t *whole;
        int64_t nwhole;
        encode_ok(toks[k], text, len, 0, &whole, &nwhole);
        int32_t *ids = NULL;
        int64_t n = 0, cap = 0;
        int pieces = 0;
        for (size_t start = 0; start < len; pieces++) {
            size_t end = lj_tokenizer_split_point(toks[k], text, len, start + 997);
            assert_true(end > start && end <= len);
            assert_int_equal(lj_tokenizer_encode_append(toks[k], text + start, end - start, 0, &ids, &n, &cap), LJ_OK);
            start = end;
        }
        assert_true(pieces > 100);
        assert_ids(ids, n, whole, nwhole);
        free(ids);
        free(whole);
    }
    lj_tokenizer_free(qwen);
    free(text);
    free(kjv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_vector), cmocka_unit_test(test_reference_vectors), cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_special_tokens), cmocka_unit_test(test_invalid_utf8), cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_refusals),     cmocka_unit_test(test_split_behaviors),   cmocka_unit_test(test_normalizers),
        cmocka_unit_test(test_bos_rules),    cmocka_unit_test(test_qwen3),             cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_gpt2_style),   cmocka_unit_test(test_threads),           cmocka_unit_test(test_split_points),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
