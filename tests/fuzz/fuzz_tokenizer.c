/* fuzz_tokenizer.c: libFuzzer target of the tokenizer.json reader: any bytes as a tokenizer
 * file; one that loads encodes and decodes a short text. */
#include "data/tokenizer.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *in = lj_fuzz_write("tokenizer.json", data, size);
    lj_tokenizer *tok = NULL;
    if (lj_tokenizer_load(in, &tok) != LJ_OK) return 0;
    static const char text[] = "Hello, world! 123 \xc3\xa9t\xc3\xa9 <|end_of_text|>\n\n  x";
    int32_t *ids = NULL;
    int64_t n = 0;
    if (lj_tokenizer_encode(tok, text, sizeof text - 1, 1, &ids, &n) == LJ_OK) {
        char *out = NULL;
        size_t len = 0;
        if (lj_tokenizer_decode(tok, ids, n, &out, &len) == LJ_OK) free(out);
        free(ids);
    }
    lj_tokenizer_free(tok);
    return 0;
}
