/* prepare.c: `ljperf prepare`: flags, then data/prepare.h does the work; prints the summary. */
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "cli/cli.h"
#include "data/input.h"
#include "data/mmidx.h"
#include "data/prepare.h"
#include "data/tokenizer.h"

static void usage(FILE *f) {
    char def[LJ_PATH_MAX];
    fprintf(f,
            "usage: ljperf prepare --input PATH [--input PATH ...] --output-prefix PREFIX [flags]\n"
            "\n"
            "Tokenizes text into a Megatron-LM indexed dataset: PREFIX.bin (the tokens) and PREFIX.idx\n"
            "(MMIDIDX version 1; int32 tokens for vocabularies of 65500 or more, else uint16), one\n"
            "sequence per document, in input order, and PREFIX.fingerprint.json (checksums, the\n"
            "tokenizer: train and the Hugging Face exports use it without being told). Written under\n"
            "temporary names and renamed at the end: on any error nothing is left behind.\n"
            "\n"
            "  --input PATH          a .txt or .jsonl (.ndjson, .json) file, compressed or not (.gz, .zst),\n"
            "                        a directory (its files with those names, sorted; not recursive), a\n"
            "                        glob such as 'shards/*.jsonl.zst' (quoted: sorted matches), or - for\n"
            "                        stdin (read as text unless --format jsonl); repeat for more inputs.\n"
            "                        Refused: one name both plain and compressed (part.jsonl beside\n"
            "                        part.jsonl.zst: the same documents twice?), a file given twice, and\n"
            "                        Parquet (.parquet: convert it to JSON lines first)\n"
            "  --output-prefix P     writes P.bin and P.idx (parent directories are created); with\n"
            "                        Megatron-LM's --json-keys or --tokenizer-type, P_KEY_document.bin\n"
            "                        and .idx for each key, as tools/preprocess_data.py names them\n"
            "  --tokenizer NAME|PATH llama3 or qwen3 (the set-up script's, in its cache), ORG/NAME (a\n"
            "                        model in the Hugging Face cache, offline), or a Hugging Face\n"
            "                        tokenizer.json (byte-level BPE: Llama 3, Qwen2/Qwen3, GPT-2) or a\n"
            "                        directory holding one; default %s\n"
            "                        (scripts/setup.sh fetches it; BOS/EOS come from the\n"
            "                        tokenizer_config.json beside it when there is one; EOS is the\n"
            "                        end-of-text token, Qwen's <|endoftext|>); also --tokenizer-model\n"
            "  --tokenizer-type T    Megatron-LM's: HuggingFaceTokenizer (with --tokenizer-model) or\n"
            "                        Llama3Tokenizer (--tokenizer-model's tokenizer.json, default llama3);\n"
            "                        the others (GPT2BPETokenizer, SentencePieceTokenizer, TikTokenizer,\n"
            "                        NullTokenizer, ...) are refused by name\n"
            "  --split-on MODE       file: each .txt file is one document, byte for byte (default);\n"
            "                        blank-line: a line that is empty or only spaces/tabs ends a\n"
            "                        document (the document drops its last line end)\n"
            "  --format FMT          auto (by file extension; default), txt or jsonl\n"
            "  --json-key KEY        the string field of each .jsonl object to tokenize (default text)\n"
            "  --json-keys K [K...]  Megatron-LM's: one dataset per key, P_KEY_document (default text)\n"
            "  --append-eos          end each document with EOS (default; Megatron's --append-eod)\n"
            "  --no-append-eos       do not\n"
            "  --prepend-bos         start each document with BOS (also --append-bos)\n"
            "  --allow-special-tokens  turn special-token text such as <|eot_id|> into its id (default:\n"
            "                        it is tokenized as ordinary text)\n"
            "  --utf8-errors MODE    error (default: stop at ill-formed UTF-8, naming file, line and\n"
            "                        byte offset) or replace (each ill-formed subpart becomes U+FFFD,\n"
            "                        as Python's errors='replace' and Node.js do)\n"
            "  --workers N           tokenizing threads (default: all cores, %d here)\n"
            "  --partitions N        accepted (Megatron-LM's file partitions): ljperf tokenizes in one pass\n"
            "                        on --workers threads and keeps the input order (Megatron's N > 1\n"
            "                        interleaves the documents unless --keep-sequential-samples)\n"
            "  --split-sentences     refused: Megatron splits with NLTK's Punkt models, which ljperf has\n"
            "                        not; the documents are written whole\n"
            "  --quiet               no progress on stderr\n"
            "\n"
            "Vision-language data (Qwen3-VL; docs/qwen3-vl.md): with --image-root, or WebDataset tar\n"
            "shards (.tar, .tar.gz) as inputs, writes a multimodal dataset (PREFIX.mmidx, .mmtok,\n"
            "PREFIX.mmmask, .mmimg) from LLaVA JSON/JSON lines (conversations with <image>) or shards:\n"
            "  --image-root DIR      the folder LLaVA's image paths are relative to (also --image-folder);\n"
            "                        a JSON input is multimodal only with it (else read as text)\n"
            "  --min-pixels N        smart_resize's minimum area, positive (default 65536, Qwen3-VL's)\n"
            "  --max-pixels N        smart_resize's maximum area, positive (default 16777216, Qwen3-VL's)\n"
            "  (--utf8-errors applies to the turns and captions; video input is refused)\n"
            "  --help                this text\n"
            "\n"
            "Empty documents are skipped. The summary goes to stdout; progress (a bar on a terminal,\n"
            "else a line every 10 s) to stderr.\n"
            "\n"
            "example:\n"
            "  ljperf prepare --input .cache/data/kjv.txt --split-on blank-line --output-prefix data/kjv\n",
            lj_tokenizer_default_path(def, sizeof def), lj_num_threads());
}

static int usage_error(const char *msg) {
    fprintf(stderr, "ljperf prepare: %s (see ljperf prepare --help)\n", msg);
    return 2;
}

static void free_inputs(char **inputs, int n) {
    for (int i = 0; i < n; i++) free(inputs[i]);
    free(inputs);
}

static int ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Parquet is refused by name rather than read as text: Debian 12 has no well-kept C reader (Arrow's
 * C++ library is not packaged). */
static lj_status refuse_parquet(const char *path, const char *given) {
    return lj_fail(LJ_ERR_UNSUPPORTED,
                   "--input %s: %s is Parquet, which prepare does not read (Debian 12 packages no C reader); "
                   "convert it to JSON lines first, e.g. python3 -c \"import pandas as p; "
                   "p.read_parquet('%s').to_json('out.jsonl', orient='records', lines=True)\"",
                   given, path, path);
}

/* A name prepare reads: .txt, .jsonl, .ndjson or .json, each also .gz or .zst. */
static int input_name(const char *name) {
    const size_t n = lj_input_base_len(name);
    const char *ext[4] = {".txt", ".jsonl", ".ndjson", ".json"};
    for (int i = 0; i < 4; i++) {
        const size_t m = strlen(ext[i]);
        if (n > m && strncmp(name + n - m, ext[i], m) == 0) return 1;
    }
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Appends the files one --input value names to (*list, *n): a directory's input files
 * (sorted), a glob's matches (sorted), else the value itself (a file or "-", checked later). */
static lj_status expand_input(const char *v, char ***list, int *n) {
    struct stat st;
    const int exists = stat(v, &st) == 0;
    char **found = NULL;
    int count = 0;
    if (exists && S_ISDIR(st.st_mode)) {
        DIR *d = opendir(v);
        if (!d) return lj_fail(LJ_ERR_IO, "--input %s: cannot read the directory: %s", v, strerror(errno));
        struct dirent *e;
        lj_status bad = LJ_OK;
        while ((e = readdir(d))) {
            if (e->d_name[0] != '.' && ends_with(e->d_name, ".parquet") && bad == LJ_OK) {
                char path[LJ_PATH_MAX];
                bad = lj_path_join(path, v, e->d_name) == LJ_OK ? refuse_parquet(path, v) : lj_fail(LJ_ERR_ARG, "path too long");
            }
            if (e->d_name[0] == '.' || !input_name(e->d_name)) continue;
            char path[LJ_PATH_MAX];
            struct stat fs;
            if (lj_path_join(path, v, e->d_name) != LJ_OK || stat(path, &fs) != 0 || !S_ISREG(fs.st_mode)) continue;
            found = lj_realloc(found, (size_t)(count + 1) * sizeof *found);
            found[count++] = lj_strdup(path);
        }
        closedir(d);
        if (bad != LJ_OK) {
            for (int i = 0; i < count; i++) free(found[i]);
            free(found);
            return bad;
        }
        if (count == 0)
            return lj_fail(LJ_ERR_ARG, "--input %s: the directory holds no .txt, .jsonl, .ndjson or .json file "
                                       "(compressed or not)", v);
        qsort(found, (size_t)count, sizeof *found, by_name);
    } else if (!exists && strpbrk(v, "*?[")) {
        glob_t g;
        const int rc = glob(v, 0, NULL, &g);
        if (rc == GLOB_NOMATCH)
            return lj_fail(LJ_ERR_ARG, "--input %s: no file matches: expected a file, a directory or a pattern that "
                                       "matches one", v);
        if (rc != 0) return lj_fail(LJ_ERR_IO, "--input %s: cannot expand the pattern", v);
        for (size_t i = 0; i < g.gl_pathc; i++)
            if (ends_with(g.gl_pathv[i], ".parquet")) {
                lj_status bad = refuse_parquet(g.gl_pathv[i], v);
                globfree(&g);
                return bad;
            }
        count = (int)g.gl_pathc; /* glob sorts them */
        found = lj_malloc((size_t)count * sizeof *found);
        for (int i = 0; i < count; i++) found[i] = lj_strdup(g.gl_pathv[i]);
        globfree(&g);
    } else {
        if (ends_with(v, ".parquet")) return refuse_parquet(v, v);
        found = lj_malloc(sizeof *found);
        found[count++] = lj_strdup(v);
    }
    *list = lj_realloc(*list, (size_t)(*n + count) * sizeof **list);
    memcpy(*list + *n, found, (size_t)count * sizeof *found);
    *n += count;
    free(found);
    return LJ_OK;
}

typedef struct {
    char **list;
    int n;
} input_list;

/* --input (every occurrence adds its files). */
static lj_status add_input(void *dest, const char *flag, const char *value) {
    (void)flag;
    input_list *in = dest;
    return expand_input(value, &in->list, &in->n);
}

typedef struct {
    char *key;         /* the real directory + the name without .gz / .zst */
    const char *path;  /* as expanded */
} input_key;

static int by_key(const void *a, const void *b) {
    const input_key *x = a, *y = b;
    const int c = strcmp(x->key, y->key);
    return c ? c : strcmp(x->path, y->path);
}

/* Refuses two inputs that are one file, or one name with and without a compression suffix
 * (part.jsonl beside part.jsonl.zst): reading both would train on the same documents twice, and
 * which one is the right one (complete, current) only the user knows. */
static lj_status check_duplicates(char **inputs, int n) {
    input_key *keys = lj_calloc((size_t)(n > 0 ? n : 1), sizeof *keys);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(inputs[i], "-")) continue;
        char dir[LJ_PATH_MAX];
        snprintf(dir, sizeof dir, "%s", inputs[i]);
        char *slash = strrchr(dir, '/');
        const char *base = slash ? slash + 1 : inputs[i];
        if (slash) slash[slash == dir ? 1 : 0] = '\0';
        else snprintf(dir, sizeof dir, ".");
        char *real = realpath(dir, NULL);
        if (!real) continue; /* reported when it is opened */
        const size_t len = strlen(real) + lj_input_base_len(base) + 2;
        keys[m].key = lj_malloc(len);
        snprintf(keys[m].key, len, "%s/%.*s", real, (int)lj_input_base_len(base), base);
        keys[m].path = inputs[i];
        free(real);
        m++;
    }
    qsort(keys, (size_t)m, sizeof *keys, by_key);
    lj_status st = LJ_OK;
    for (int i = 1; i < m && st == LJ_OK; i++) {
        if (strcmp(keys[i - 1].key, keys[i].key) != 0) continue;
        const lj_input_compression a = lj_input_compression_of(keys[i - 1].path), b = lj_input_compression_of(keys[i].path);
        st = a == b ? lj_fail(LJ_ERR_ARG, "--input: %s is given twice (a directory, a glob and a file can name it "
                                          "again): it would be read twice; give it once", keys[i].path)
                    : lj_fail(LJ_ERR_ARG, "--input: %s and %s are one name %s (the same documents twice?): prepare "
                                          "reads neither; keep the one that is complete, or give the other a name of "
                                          "its own",
                              keys[i - 1].path, keys[i].path,
                              a == LJ_INPUT_PLAIN || b == LJ_INPUT_PLAIN ? "with and without compression"
                                                                        : "in two compressions");
    }
    for (int i = 0; i < m; i++) free(keys[i].key);
    free(keys);
    return st;
}

/* --tokenizer-type (Megatron-LM's --tokenizer-type) and --tokenizer-model / --tokenizer: the
 * argument of the tokenizer to resolve, into *arg. */
static lj_status tokenizer_arg(const char *type, const char *model, const char *tokenizer, const char **arg) {
    if (model && tokenizer && strcmp(model, tokenizer) != 0)
        return lj_fail(LJ_ERR_ARG, "--tokenizer-model %s and --tokenizer %s: two tokenizers; give one", model, tokenizer);
    *arg = model ? model : tokenizer;
    if (!type) return LJ_OK;
    if (!strcmp(type, "HuggingFaceTokenizer")) {
        if (!*arg)
            return lj_fail(LJ_ERR_ARG, "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model: a tokenizer.json, "
                                       "its directory, ORG/NAME of the Hugging Face cache, or llama3 / qwen3");
        return LJ_OK;
    }
    if (!strcmp(type, "Llama3Tokenizer")) { /* Megatron's reads Meta's tiktoken file; ljperf the same model's tokenizer.json */
        if (!*arg) *arg = "llama3";
        const size_t n = strlen(*arg);
        if (n > 6 && !strcmp(*arg + n - 6, ".model"))
            return lj_fail(LJ_ERR_UNSUPPORTED, "--tokenizer-model %s: a tiktoken model file, which ljperf does not read; "
                                               "give the tokenizer.json of the same model (the Hugging Face repository "
                                               "has it beside original/), or llama3", *arg);
        return LJ_OK;
    }
    const char *why = !strcmp(type, "GPT2BPETokenizer") ? " (it reads vocab.json and merges.txt; the model's tokenizer.json "
                                                          "holds both: give it with HuggingFaceTokenizer)"
                      : !strcmp(type, "NullTokenizer") ? " (text of integer ids: give real text and a tokenizer)"
                                                       : " (ljperf's tokenizer is byte-level BPE from a tokenizer.json)";
    return lj_fail(LJ_ERR_ARG, "--tokenizer-type: '%s' is not one of HuggingFaceTokenizer, Llama3Tokenizer%s", type, why);
}
/* The folders prepare creates for an output prefix: its parent folder and the first of its
 * ancestors that does not exist yet ("" when the parent exists). A failed run removes them
 * again (empty ones only), never a folder that was there before. */
typedef struct {
    char parent[LJ_PATH_MAX], first_new[LJ_PATH_MAX];
} new_dirs;

static void find_new_dirs(const char *prefix, new_dirs *d) {
    d->parent[0] = d->first_new[0] = '\0';
    if (snprintf(d->parent, sizeof d->parent, "%s", prefix) >= (int)sizeof d->parent) return;
    char *slash = strrchr(d->parent, '/');
    if (!slash || slash == d->parent) {
        d->parent[0] = '\0';
        return;
    }
    *slash = '\0';
    char dir[LJ_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", d->parent);
    for (char *q = dir + 1;; q++) {
        if (*q != '/' && *q != '\0') continue;
        const char c = *q;
        *q = '\0';
        struct stat sb;
        if (stat(dir, &sb) != 0 && errno == ENOENT) {
            snprintf(d->first_new, sizeof d->first_new, "%s", dir);
            return;
        }
        *q = c;
        if (!c) return;
    }
}

static void remove_new_dirs(const new_dirs *d) {
    if (!d->first_new[0]) return;
    char dir[LJ_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", d->parent);
    const size_t stop = strlen(d->first_new);
    while (strlen(dir) >= stop) {
        if (rmdir(dir) != 0) return; /* not empty, or not there: leave it */
        char *slash = strrchr(dir, '/');
        if (!slash) return;
        *slash = '\0';
    }
}

int lj_cli_prepare(int argc, char **argv) {
    lj_prepare_config cfg;
    lj_prepare_config_init(&cfg);
    input_list in = {NULL, 0};
    const char *split_on = NULL, *format = NULL, *utf8 = NULL, *json_key = NULL;
    lj_flag_list json_keys = {0, NULL};
    const char *tokenizer = NULL, *tokenizer_model = NULL, *tokenizer_type = NULL;
    int quiet = 0, workers_given = 0, partitions = 1, json_key_given = 0;
    const char *image_root = NULL;
    int64_t min_pixels = -1, max_pixels = -1; /* -1: not given */
    const lj_flag rows[] = {
        {.name = "--input", .kind = LJ_FLAG_FUNC, .dest = &in, .fn = add_input},
        {.name = "--output-prefix", .kind = LJ_FLAG_STR, .dest = &cfg.output_prefix},
        {.name = "--tokenizer", .kind = LJ_FLAG_STR, .dest = &tokenizer},
        {.name = "--tokenizer-model", .kind = LJ_FLAG_STR, .dest = &tokenizer_model},
        {.name = "--tokenizer-type", .kind = LJ_FLAG_STR, .dest = &tokenizer_type},
        {.name = "--split-on", .kind = LJ_FLAG_STR, .dest = &split_on},
        {.name = "--format", .kind = LJ_FLAG_STR, .dest = &format},
        {.name = "--json-key", .kind = LJ_FLAG_STR, .dest = &json_key, .given = &json_key_given},
        {.name = "--json-keys", .kind = LJ_FLAG_LIST, .dest = &json_keys}, /* Megatron-LM: nargs='+' */
        {.name = "--append-eos", .kind = LJ_FLAG_SWITCH, .dest = &cfg.append_eos, .ival = 1},
        {.name = "--append-eod", .kind = LJ_FLAG_SWITCH, .dest = &cfg.append_eos, .ival = 1},
        {.name = "--no-append-eos", .kind = LJ_FLAG_SWITCH, .dest = &cfg.append_eos},
        {.name = "--prepend-bos", .kind = LJ_FLAG_SWITCH, .dest = &cfg.prepend_bos, .ival = 1},
        {.name = "--append-bos", .kind = LJ_FLAG_SWITCH, .dest = &cfg.prepend_bos, .ival = 1},
        {.name = "--allow-special-tokens", .kind = LJ_FLAG_SWITCH, .dest = &cfg.allow_special, .ival = 1},
        {.name = "--utf8-errors", .kind = LJ_FLAG_STR, .dest = &utf8},
        {.name = "--workers", .kind = LJ_FLAG_INT, .dest = &cfg.workers, .given = &workers_given, .min = 1, .max = 1024},
        {.name = "--partitions", .kind = LJ_FLAG_INT, .dest = &partitions},
        {.name = "--split-sentences", .kind = LJ_FLAG_REFUSED,
         .help = "Megatron-LM splits documents into sentences with NLTK's Punkt models, which ljperf does not have; "
                 "the documents are written whole as PREFIX_KEY_document"},
        {.name = "--keep-sequential-samples", .kind = LJ_FLAG_IGNORED,
         .help = "ljperf always keeps the input order (it splits no files into partitions)"},
        {.name = "--log-interval", .kind = LJ_FLAG_IGNORED, .ival = 1,
         .help = "progress is shown by time: a bar on a terminal, else a line every 10 s (--quiet: none)"},
        {.name = "--quiet", .kind = LJ_FLAG_SWITCH, .dest = &quiet, .ival = 1},
        {.name = "-q", .kind = LJ_FLAG_SWITCH, .dest = &quiet, .ival = 1},
        {.name = "--image-root", .kind = LJ_FLAG_STR, .dest = &image_root},
        {.name = "--image-folder", .kind = LJ_FLAG_STR, .dest = &image_root},
        {.name = "--min-pixels", .kind = LJ_FLAG_I64, .dest = &min_pixels},
        {.name = "--max-pixels", .kind = LJ_FLAG_I64, .dest = &max_pixels},
    };
    lj_flags_result res;
    lj_status st = lj_flags_parse("prepare", rows, (int)(sizeof rows / sizeof rows[0]), argc, argv, 0, &res);
    if (st == LJ_OK && res.help) {
        usage(stdout);
        free_inputs(in.list, in.n);
        return 0;
    }
    if (st == LJ_OK && split_on) {
        if (strcmp(split_on, "file") == 0) cfg.split_on = LJ_PREPARE_SPLIT_FILE;
        else if (strcmp(split_on, "blank-line") == 0) cfg.split_on = LJ_PREPARE_SPLIT_BLANK_LINE;
        else st = lj_fail(LJ_ERR_ARG, "--split-on: '%s' is not one of file, blank-line", split_on);
    }
    if (st == LJ_OK && format) {
        if (strcmp(format, "auto") == 0) cfg.format = LJ_PREPARE_FORMAT_AUTO;
        else if (strcmp(format, "txt") == 0) cfg.format = LJ_PREPARE_FORMAT_TXT;
        else if (strcmp(format, "jsonl") == 0) cfg.format = LJ_PREPARE_FORMAT_JSONL;
        else st = lj_fail(LJ_ERR_ARG, "--format: '%s' is not one of auto, txt, jsonl", format);
    }
    /* Megatron-LM's invocation (--json-keys, --tokenizer-type): its file names, PREFIX_KEY_document */
    cfg.megatron_names = json_keys.count > 0 || tokenizer_type != NULL;
    if (st == LJ_OK && json_key_given && json_keys.count > 0)
        st = lj_fail(LJ_ERR_ARG, "--json-key %s and --json-keys %s: give one (--json-keys writes PREFIX_KEY_document, "
                                 "one dataset per key)", json_key, json_keys.values[0]);
    else if (st == LJ_OK && json_keys.count > LJ_PREPARE_MAX_KEYS)
        st = lj_fail(LJ_ERR_ARG, "--json-keys: %d keys; expected 1 to %d", json_keys.count, LJ_PREPARE_MAX_KEYS);
    else if (json_keys.count > 0) {
        cfg.json_keys = (const char *const *)json_keys.values;
        cfg.num_keys = json_keys.count;
    } else if (json_key_given) {
        cfg.json_keys = (const char *const *)&json_key;
    }
    if (st == LJ_OK && (partitions < 1 || partitions > 1024))
        st = lj_fail(LJ_ERR_ARG, "--partitions %d: expected 1 to 1024 (Megatron-LM's file partitions)", partitions);
    if (st == LJ_OK && utf8) {
        if (strcmp(utf8, "error") == 0) cfg.utf8_replace = 0;
        else if (strcmp(utf8, "replace") == 0) cfg.utf8_replace = 1;
        else st = lj_fail(LJ_ERR_ARG, "--utf8-errors: '%s' is not one of error, replace", utf8);
    }
    char tok_path[LJ_PATH_MAX];
    const char *tok_arg = NULL;
    if (st == LJ_OK) st = tokenizer_arg(tokenizer_type, tokenizer_model, tokenizer, &tok_arg);
    if (st == LJ_OK && tok_arg) {
        st = lj_tokenizer_resolve(tok_arg, tokenizer_model ? "--tokenizer-model" : "--tokenizer", tok_path, sizeof tok_path);
        cfg.tokenizer_path = tok_path;
        struct stat sb; /* a name (llama3, ORG/NAME) is recorded as given; a path as the file's */
        cfg.tokenizer_name = stat(tok_arg, &sb) == 0 ? NULL : tok_arg;
    }
    if (st == LJ_OK && workers_given && (cfg.workers < 1 || cfg.workers > 1024))
        st = lj_fail(LJ_ERR_ARG, "--workers %d: expected 1 to 1024 worker threads", cfg.workers);
    if (quiet) cfg.progress = 0;
    char **inputs = in.list;
    const int ninputs = in.n;
    int rc = 0;
    if (st == LJ_OK) st = check_duplicates(inputs, ninputs);
    if (st == LJ_OK && partitions > 1 && !quiet)
        lj_log_info("--partitions %d: ljperf tokenizes in one pass on --workers threads; the documents keep the input "
                    "order", partitions);
    if (st == LJ_OK && !quiet) lj_flags_log_ignored("prepare", &res);
    if (st != LJ_OK) {
        fprintf(stderr, "ljperf prepare: %s\n", lj_error_message()); /* flag errors name the flag */
        rc = 2;
    }
    if (rc == 0 && ninputs == 0) rc = usage_error("no --input given");
    if (rc == 0 && !cfg.output_prefix) rc = usage_error("no --output-prefix given");
    if (rc != 0) {
        free_inputs(inputs, ninputs);
        return rc;
    }
    new_dirs created;
    find_new_dirs(cfg.output_prefix, &created);
    if (lj_cli_prepare_mm_wanted(image_root, (const char *const *)inputs, ninputs)) {
        rc = lj_cli_prepare_mm((const char *const *)inputs, ninputs, cfg.output_prefix, cfg.tokenizer_path, image_root,
                               min_pixels, max_pixels, cfg.utf8_replace, quiet);
        free_inputs(inputs, ninputs);
        if (rc != 0) remove_new_dirs(&created);
        return rc;
    }
    cfg.inputs = (const char *const *)inputs;
    cfg.num_inputs = ninputs;
    lj_prepare_stats s;
    st = lj_prepare_run(&cfg, &s);
    free_inputs(inputs, ninputs);
    if (st != LJ_OK) {
        remove_new_dirs(&created);
        return lj_cli_error("prepare");
    }
    double secs = s.seconds > 1e-9 ? s.seconds : 1e-9;
    for (int k = 0; k < cfg.num_keys; k++) {
        char prefix[LJ_PATH_MAX];
        if (lj_prepare_output_prefix(&cfg, k, prefix) != LJ_OK) continue;
        printf("prepare: wrote %s.bin and %s.idx (%s tokens, vocabulary %d", prefix, prefix,
               s.dtype_code == LJ_MMIDX_U16 ? "uint16" : "int32", s.vocab_size);
        if (cfg.num_keys > 1 || cfg.megatron_names)
            printf("; key \"%s\": %lld documents, %lld tokens", cfg.json_keys[k], (long long)s.key_documents[k],
                   (long long)s.key_tokens[k]);
        printf(")\n");
    }
    if (cfg.megatron_names) {
        char prefix[LJ_PATH_MAX];
        if (lj_prepare_output_prefix(&cfg, 0, prefix) == LJ_OK) printf("  train with      --data-path %s\n", prefix);
    }
    printf("  documents        %lld", (long long)s.documents);
    if (s.empty_skipped) printf(" (%lld empty skipped)", (long long)s.empty_skipped);
    printf("\n  tokens           %lld\n", (long long)s.tokens);
    printf("  bytes            %lld of text (%lld read)\n", (long long)s.text_bytes, (long long)s.input_bytes);
    printf("  tokens per byte  %.4f\n", s.text_bytes ? (double)s.tokens / (double)s.text_bytes : 0.0);
    if (s.utf8_replaced) printf("  UTF-8 repaired   %lld ill-formed sequences became U+FFFD\n", (long long)s.utf8_replaced);
    printf("  seconds          %.3f (%d workers; tokenizer load %.3f s more)\n", s.seconds, s.workers, s.load_seconds);
    printf("  throughput       %.2f MB/s, %.2fM tokens/s\n", (double)s.text_bytes / 1e6 / secs, (double)s.tokens / 1e6 / secs);
    return 0;
}
