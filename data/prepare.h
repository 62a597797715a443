/* prepare.h: `ljperf prepare`: tokenizes .txt / .jsonl text (or stdin) with a byte-level BPE
 * tokenizer on all cores and writes a Megatron-LM indexed dataset (PREFIX.bin + PREFIX.idx,
 * MMIDIDX version 1; format: docs/reference.md, data/mmidx.h), one sequence per document, in input
 * order whatever the number of workers.
 *
 * Documents: a .txt file is one document, byte for byte (split_on FILE), or is cut at blank lines
 * (split_on BLANK_LINE: a line that is empty or holds only spaces, tabs or CR ends a document; a
 * document is its lines with their line ends, less the line end of its last line). Each line of
 * a .jsonl file is a JSON object; the string of each of its `json_keys` is a document of that
 * key's dataset (blank lines are skipped). Empty documents are skipped (and counted). Each
 * document gets BOS first when prepend_bos, and EOS last when append_eos (the default, like
 * Megatron's --append-eod).
 *
 * Outputs: one dataset per key. With megatron_names, key K's is PREFIX_K_document.bin/.idx, as
 * Megatron-LM's tools/preprocess_data.py names it (one pair per --json-keys key); else the one
 * key's is PREFIX.bin/.idx. Each dataset's sidecar (data/mmidx.h) records the tokenizer
 * (lj_mmidx_tokenizer: its name as given, path, XXH3-64, vocabulary and special ids).
 *
 * Errors (each names the file and the line or field; the outputs are left as they were: the
 * dataset is written under temporary names, removed on error, and installed at the end as a new
 * version behind one link, data/mmidx.h):
 *   LJ_ERR_IO      an input or the tokenizer cannot be read, the output cannot be written;
 *   LJ_ERR_FORMAT  a .jsonl line that is not a JSON object or lacks a key (file:line), invalid
 *                  UTF-8 (file:line and byte offset) unless utf8_replace, a bad tokenizer.json;
 *   LJ_ERR_ARG     no inputs, no documents at all (or none for one key), a bad flag value, several
 *                  keys with an input that is not JSON lines.
 * With several keys each dataset is installed as a whole, one after the other; an error while
 * installing one leaves those before it installed.
 * A run killed by a signal leaves nothing either where the file system has O_TMPFILE (the
 * dataset files have no name until they are complete; see data/mmidx_write.c).
 */
#ifndef LJ_PREPARE_H
#define LJ_PREPARE_H

#include "base/base.h"

typedef enum { LJ_PREPARE_SPLIT_FILE = 0, LJ_PREPARE_SPLIT_BLANK_LINE } lj_prepare_split;
/* AUTO: .jsonl / .ndjson / .json are JSON lines, anything else (and stdin) is text. */
typedef enum { LJ_PREPARE_FORMAT_AUTO = 0, LJ_PREPARE_FORMAT_TXT, LJ_PREPARE_FORMAT_JSONL } lj_prepare_format;

typedef struct {
    const char *const *inputs; /* paths, "-" is stdin */
    int num_inputs;
    const char *output_prefix;  /* writes PREFIX.bin and PREFIX.idx (parent directories are made) */
    int megatron_names;         /* 1: PREFIX_KEY_document.bin/.idx per key (Megatron-LM's names) */
    const char *tokenizer_path; /* NULL: lj_tokenizer_default_path() */
    const char *tokenizer_name; /* how the user named it (recorded in the sidecar); NULL: the path */
    lj_prepare_split split_on;
    lj_prepare_format format;
    const char *const *json_keys; /* [num_keys], at most LJ_PREPARE_MAX_KEYS; default {"text"} */
    int num_keys;
    int append_eos;             /* default 1 */
    int prepend_bos;            /* default 0 */
    int allow_special;          /* 1: special-token strings in the text become their ids */
    int utf8_replace;           /* 1: replace ill-formed UTF-8 by U+FFFD instead of failing */
    int workers;                /* tokenizing threads; <= 0: lj_num_threads() */
    int progress;               /* 1: progress on stderr (a bar on a terminal, else a line every 10 s) */
} lj_prepare_config;

enum { LJ_PREPARE_MAX_KEYS = 16 };

typedef struct {
    int64_t documents;      /* written */
    int64_t empty_skipped;  /* empty documents skipped */
    int64_t tokens;         /* written, BOS/EOS included */
    int64_t text_bytes;     /* UTF-8 bytes of document text tokenized */
    int64_t input_bytes;    /* bytes read from the inputs */
    int64_t utf8_replaced;  /* ill-formed subparts replaced (utf8_replace) */
    int64_t key_documents[LJ_PREPARE_MAX_KEYS], key_tokens[LJ_PREPARE_MAX_KEYS]; /* per key's dataset */
    int dtype_code;         /* LJ_MMIDX_U16 or LJ_MMIDX_I32 */
    int32_t vocab_size;
    int workers;
    double load_seconds;    /* loading the tokenizer */
    double seconds;         /* reading, tokenizing and writing (after loading) */
} lj_prepare_stats;

/* Fills the defaults above (no inputs, no prefix). */
void lj_prepare_config_init(lj_prepare_config *cfg);

/* The prefix of key k's dataset into buf[LJ_PATH_MAX]: PREFIX_KEY_document with megatron_names,
 * else PREFIX. Errors: LJ_ERR_ARG for a path too long. */
lj_status lj_prepare_output_prefix(const lj_prepare_config *cfg, int k, char *buf);

/* Runs the whole preparation. stats may be NULL. Errors: see the top of this file. */
lj_status lj_prepare_run(const lj_prepare_config *cfg, lj_prepare_stats *stats);

#endif
