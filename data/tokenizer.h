/* tokenizer.h: byte-level BPE tokenizer (Llama 3, Qwen2/Qwen3, GPT-2) loaded from a Hugging Face
 * tokenizer.json, plus the UTF-8 checks its callers need.
 *
 * The tokenizer follows what the file declares (source: huggingface/tokenizers, tokenizers/src/
 * models/bpe, normalizers/{unicode,utils}.rs, pre_tokenizers/{split,byte_level,sequence}.rs,
 * processors/template.rs, tokenizer/added_vocabulary.rs; docs/reference.md "The Llama 3
 * tokenizer" and "The Qwen tokenizer"). Supported, and anything else refused by name
 * (LJ_ERR_UNSUPPORTED naming the file and the field: a WordPiece or Unigram model, a Metaspace
 * pre-tokenizer, a Lowercase normalizer ...):
 *   - model.type "BPE" with vocab {token: id} over GPT-2's byte-level alphabet and merges in
 *     either form ("a b" strings or [a, b] arrays; the rank of a merge is its index),
 *     ignore_merges, no dropout, continuing_subword_prefix / end_of_word_suffix null or "", no
 *     byte_fallback;
 *   - normalizer null (Llama 3, GPT-2), NFC (Qwen2/Qwen3), NFD, NFKC, NFKD, or a Sequence of
 *     them, applied in order with utf8proc (utf8proc_map, UTF8PROC_STABLE and COMPOSE /
 *     DECOMPOSE / COMPAT) to the text between added tokens;
 *   - pre_tokenizer: Split steps (a Regex or String pattern; behavior Isolated, Removed,
 *     MergedWithPrevious, MergedWithNext or Contiguous; invert), in a Sequence that ends with
 *     ByteLevel (Llama 3's and Qwen2's regexes, docs/reference.md), or ByteLevel alone, or null.
 *     ByteLevel's add_prefix_space is honoured per piece and its use_regex (default true) adds
 *     the GPT-2 regex, as in tokenizers;
 *   - added_tokens: matched on the raw text before normalization, leftmost-longest. Special ones
 *     only when the caller allows them (like tiktoken's allowed_special); non-special ones always
 *     (as HF). lstrip / rstrip / single_word true are refused, and so is normalized true when
 *     there is a normalizer (all false in Llama 3, Qwen and GPT-2);
 *   - post_processor: null, ByteLevel, TemplateProcessing, or a Sequence of them; a template
 *     whose "single" starts with a SpecialToken makes that token the BOS that starts a
 *     sequence (lj_tokenizer_adds_bos);
 *   - decoder: null or ByteLevel (alone or in a Sequence).
 * The regex is compiled with PCRE2 (PCRE2_UTF | PCRE2_UCP, JIT). `\s` and `\S` are rewritten to
 * \p{White_Space} / \P{White_Space}, the definition of the reference (Oniguruma / Rust regex),
 * because PCRE2's own \s also matches U+180E.
 *
 * Exactness: the ids equal those of HF tokenizers 0.23.2 (checked on the KJV Bible, the Jargon
 * File, a file of hard cases and 330 KB of random Unicode; and of llama3-tokenizer-js, and for
 * Qwen3 of Tokenizers.js, in tests/test_tokenizer_oracle.sh) for all text whose code points are
 * assigned in the Unicode version of the PCRE2 library (14.0 for PCRE2 10.42; utf8proc 2.8
 * normalizes by Unicode 15). Letters and digits assigned later
 * (Unicode 15/16: CJK Extension H, Kawi, Todhri, ...) are not \p{L}/\p{N} to PCRE2 10.42 and may
 * be split differently from a reference with newer tables.
 *
 * With a normalizer the ids are those of the normalized text, so decoding gives that text (NFC:
 * "e" + U+0301 comes back as U+00E9).
 *
 * Text is UTF-8. Invalid UTF-8 is an error (LJ_ERR_FORMAT naming the byte offset), as it is for
 * Megatron-LM's preprocess_data.py, which decodes its input strictly; callers who prefer the
 * replacement character can run lj_utf8_repair first (what Node.js, and so llama3-tokenizer-js,
 * does to bytes read as 'utf8').
 *
 * Token ids are int32. Ids are in [0, lj_tokenizer_vocab_size()). The tokenizer is immutable after
 * loading, and encode/decode may be called concurrently from any number of threads on one loaded
 * tokenizer (each call borrows a per-thread scratch state from a small locked pool).
 */
#ifndef LJ_TOKENIZER_H
#define LJ_TOKENIZER_H

#include "base/base.h"

typedef struct lj_tokenizer lj_tokenizer;

/* Loads `path` (a tokenizer.json). The special tokens, with tokenizer_config.json in the same
 * directory when it exists:
 *   EOS, the end of a document (what `prepare` appends, Megatron-LM's EOD): the added token
 *     <|end_of_text|> (Llama 3) or <|endoftext|> (GPT-2, Qwen: 151643; a Qwen chat model's
 *     tokenizer_config.json names <|im_end|>, the end of a turn, which is not a document end),
 *     else tokenizer_config.json's eos_token, else -1;
 *   BOS: the post-processor template's first token, else tokenizer_config.json's bos_token (null:
 *     none, as Qwen's), else <|begin_of_text|> (Llama 3) or <|endoftext|> (GPT-2), else -1;
 *   whether a sequence starts with BOS (lj_tokenizer_adds_bos): the template says; without one,
 *     tokenizer_config.json's add_bos_token, else whether it names a bos_token (Llama 3: yes,
 *     Qwen: no), else whether BOS is a token of its own (not EOS).
 * Errors: LJ_ERR_IO (file missing), LJ_ERR_FORMAT (not JSON, a field missing or of the wrong
 * type, a merge whose parts are not in the vocab; the message names the file and the field),
 * LJ_ERR_UNSUPPORTED (a model, normalizer, pre-tokenizer, added-token option, post-processor or
 * decoder outside the list above, named with its field). */
lj_status lj_tokenizer_load(const char *path, lj_tokenizer **tok);
void lj_tokenizer_free(lj_tokenizer *tok);

/* The tokenizer.json that a --tokenizer argument names (`flag` names the flag in messages): an
 * existing file as it is, an existing directory's tokenizer.json, else for ORG/NAME
 * (lj_hf_repo_id_like) the tokenizer.json of that model's snapshot in the Hugging Face cache
 * (base/hf_cache.h), else for a word without '/' and not ending in .json a name of the set-up
 * script's tokenizers, <cache>/tokenizer/NAME/tokenizer.json (llama3, qwen3; <cache> from
 * lj_cache_dir), else the path as it is (lj_tokenizer_load then names it). Writes the path into
 * buf. Errors: LJ_ERR_IO for a name whose file is missing (a known name: with scripts/setup.sh to
 * fetch it; another word: with the known names), for ORG/NAME not in the cache or a snapshot
 * without tokenizer.json; LJ_ERR_ARG for a path longer than buflen. */
lj_status lj_tokenizer_resolve(const char *arg, const char *flag, char *buf, size_t buflen);

/* The default tokenizer path: <cache>/tokenizer/llama3/tokenizer.json with <cache> from
 * lj_cache_dir (base/base.h), which is where scripts/setup.sh puts it. Writes into buf
 * (NUL-terminated) and returns buf. The file may not exist. */
const char *lj_tokenizer_default_path(char *buf, size_t buflen);

/* Encodes `len` bytes of UTF-8 `text` and appends the ids to the growable array (*ids, *n, *cap)
 * (realloc'd as needed; start with NULL, 0, 0). allow_special: 1 to turn special added tokens in
 * the text into their ids, 0 to encode them as plain text. No BOS/EOS is added.
 * Errors: LJ_ERR_FORMAT "invalid UTF-8 at byte offset N" (nothing appended),
 * LJ_ERR_UNSUPPORTED when a byte has no byte-level token or PCRE2 gives up. Thread-safe. */
lj_status lj_tokenizer_encode_append(lj_tokenizer *tok, const char *text, size_t len, int allow_special,
                                     int32_t **ids, int64_t *n, int64_t *cap);

/* As lj_tokenizer_encode_append into a fresh array: *ids (free() it) of *n ids. */
lj_status lj_tokenizer_encode(lj_tokenizer *tok, const char *text, size_t len, int allow_special,
                              int32_t **ids, int64_t *n);

/* Decodes `n` ids into bytes: *text (free() it, NUL-terminated) of *len bytes. Special tokens
 * decode to their text. The bytes are those that were encoded, so decode(encode(x)) == x (unless
 * the tokenizer has add_prefix_space, whose added spaces decode too, or a normalizer, whose
 * normalized text decodes; a Split step that is Removed drops its matches).
 * Errors: LJ_ERR_ARG naming the position of an id outside the vocabulary. */
lj_status lj_tokenizer_decode(const lj_tokenizer *tok, const int32_t *ids, int64_t n, char **text, size_t *len);

/* One more than the largest id (vocab and added tokens): 128256 for Llama 3, 151669 for Qwen3,
 * 50257 for GPT-2. */
int32_t lj_tokenizer_vocab_size(const lj_tokenizer *tok);
/* BOS / EOS ids (see lj_tokenizer_load), or -1 when the tokenizer has none. */
int32_t lj_tokenizer_bos_id(const lj_tokenizer *tok);
int32_t lj_tokenizer_eos_id(const lj_tokenizer *tok);
/* 1 if a sequence starts with BOS (Llama 3), 0 if not (Qwen, GPT-2); see lj_tokenizer_load. */
int lj_tokenizer_adds_bos(const lj_tokenizer *tok);
/* 1 if the pre-tokenizer is Qwen2's (one Split of the Qwen2/Qwen3 regex, digits one at a time,
 * then ByteLevel: transformers' Qwen2Tokenizer), 0 otherwise (Llama 3, GPT-2, ...). */
int lj_tokenizer_is_qwen2(const lj_tokenizer *tok);
/* XXH3-64 of the tokenizer.json's bytes. */
uint64_t lj_tokenizer_file_hash(const lj_tokenizer *tok);
/* XXH3-64 of what decides the ids of a text: the unformatted JSON (cJSON's) of the file's
 * normalizer, pre_tokenizer, model and added_tokens, in that order. Two files equal in those
 * (the post_processor, decoder or formatting may differ, as in ljperf's HF export of Llama 3)
 * give the same ids. */
uint64_t lj_tokenizer_ids_hash(const lj_tokenizer *tok);
/* The path it was loaded from. */
const char *lj_tokenizer_path(const lj_tokenizer *tok);

/* The bytes of token `id` (raw bytes, not the byte-level alphabet; special tokens: their text),
 * not NUL-terminated, valid while the tokenizer lives. Returns NULL for an unused id. */
const char *lj_tokenizer_token(const lj_tokenizer *tok, int32_t id, size_t *len);
/* The id whose bytes are exactly `bytes[0..len)` (vocab first, then added tokens), or -1. */
int32_t lj_tokenizer_token_id(const lj_tokenizer *tok, const char *bytes, size_t len);
/* 1 if `id` is a special added token. */
int lj_tokenizer_is_special(const lj_tokenizer *tok, int32_t id);

/* A byte position p in (from, len] such that encoding text[0..p) and text[p..len) separately
 * and concatenating gives the ids of encoding the whole text, or len when the tokenizer cannot
 * promise one. Only the Llama 3 and Qwen2 pre-tokenizers are known to allow it: p follows a '\n'
 * and starts an ASCII letter, a point no match of their regexes can straddle (and a boundary of
 * every normalization form). Used to encode one big document on many threads. */
size_t lj_tokenizer_split_point(const lj_tokenizer *tok, const char *text, size_t len, size_t from);

/* ---- UTF-8 ----------------------------------------------------------------------- */

/* Offset of the first byte of the first ill-formed sequence in s[0..len) (Unicode 15, table
 * 3-7: no overlongs, no surrogates, nothing above U+10FFFF), or len when all of it is UTF-8. */
size_t lj_utf8_check(const char *s, size_t len);

/* Copies s[0..len) to *out (free() it; NUL-terminated, *out_len bytes), replacing each maximal
 * ill-formed subpart by U+FFFD (Unicode 15 section 3.9, the practice of the WHATWG Encoding
 * standard, Node.js and Python's errors='replace'). Returns the number of replacements. */
size_t lj_utf8_repair(const char *s, size_t len, char **out, size_t *out_len);

#endif
