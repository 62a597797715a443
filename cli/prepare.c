/* prepare.c: `ljperf prepare`: flags, then data/prepare.h does the work; prints the summary. */
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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
            "sequence per document, in input order. Written under temporary names and renamed at the\n"
            "end: on any error nothing is left behind.\n"
            "\n"
            "  --input PATH          a .txt or .jsonl (.ndjson, .json) file, compressed or not (.gz, .zst),\n"
            "                        a directory (its files with those names, sorted; not recursive), a\n"
            "                        glob such as 'shards/*.jsonl.zst' (quoted: sorted matches), or - for\n"
            "                        stdin (read as text unless --format jsonl); repeat for more inputs\n"
            "  --output-prefix P     writes P.bin and P.idx (parent directories are created)\n"
            "  --tokenizer NAME|PATH llama3 or qwen3 (the set-up script's, in its cache), or a Hugging\n"
            "                        Face tokenizer.json (byte-level BPE: Llama 3, Qwen2/Qwen3, GPT-2)\n"
            "                        or a directory holding one; default %s\n"
            "                        (scripts/setup.sh fetches it; BOS/EOS come from the\n"
            "                        tokenizer_config.json beside it when there is one; EOS is the\n"
            "                        end-of-text token, Qwen's <|endoftext|>)\n"
            "  --split-on MODE       file: each .txt file is one document, byte for byte (default);\n"
            "                        blank-line: a line that is empty or only spaces/tabs ends a\n"
            "                        document (the document drops its last line end)\n"
            "  --format FMT          auto (by file extension; default), txt or jsonl\n"
            "  --json-key KEY        the string field of each .jsonl object to tokenize (default text;\n"
            "                        also Megatron-LM's --json-keys, with one key)\n"
            "  --append-eos          end each document with EOS (default; Megatron's --append-eod)\n"
            "  --no-append-eos       do not\n"
            "  --prepend-bos         start each document with BOS (also --append-bos)\n"
            "  --allow-special-tokens  turn special-token text such as <|eot_id|> into its id (default:\n"
            "                        it is tokenized as ordinary text)\n"
            "  --utf8-errors MODE    error (default: stop at ill-formed UTF-8, naming file, line and\n"
            "                        byte offset) or replace (each ill-formed subpart becomes U+FFFD,\n"
            "                        as Python's errors='replace' and Node.js do)\n"
            "  --workers N           tokenizing threads (default: all cores, %d here)\n"
            "  --quiet               no progress on stderr\n"
            "\n"
            "Vision-language data (Qwen3-VL; docs/qwen3-vl.md): with --image-root, or WebDataset tar\n"
            "shards (.tar, .tar.gz) as inputs, writes a multimodal dataset (PREFIX.mmidx, .mmtok,\n"
            "PREFIX.mmmask, .mmimg) from LLaVA JSON/JSON lines (conversations with <image>) or shards:\n"
            "  --image-root DIR      the folder LLaVA's image paths are relative to (also --image-folder)\n"
            "  --min-pixels N        smart_resize's minimum area (default 65536, Qwen3-VL's)\n"
            "  --max-pixels N        smart_resize's maximum area (default 16777216, Qwen3-VL's)\n"
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
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.' || !input_name(e->d_name)) continue;
            char path[LJ_PATH_MAX];
            struct stat fs;
            if (lj_path_join(path, v, e->d_name) != LJ_OK || stat(path, &fs) != 0 || !S_ISREG(fs.st_mode)) continue;
            found = lj_realloc(found, (size_t)(count + 1) * sizeof *found);
            found[count++] = lj_strdup(path);
        }
        closedir(d);
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
        count = (int)g.gl_pathc; /* glob sorts them */
        found = lj_malloc((size_t)count * sizeof *found);
        for (int i = 0; i < count; i++) found[i] = lj_strdup(g.gl_pathv[i]);
        globfree(&g);
    } else {
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

int lj_cli_prepare(int argc, char **argv) {
    lj_prepare_config cfg;
    lj_prepare_config_init(&cfg);
    input_list in = {NULL, 0};
    const char *split_on = NULL, *format = NULL, *utf8 = NULL;
    lj_flag_list json_keys = {0, NULL};
    int quiet = 0, workers_given = 0;
    const char *image_root = NULL;
    int64_t min_pixels = 0, max_pixels = 0;
    const lj_flag rows[] = {
        {.name = "--input", .kind = LJ_FLAG_FUNC, .dest = &in, .fn = add_input},
        {.name = "--output-prefix", .kind = LJ_FLAG_STR, .dest = &cfg.output_prefix},
        {.name = "--tokenizer", .kind = LJ_FLAG_STR, .dest = &cfg.tokenizer_path},
        {.name = "--split-on", .kind = LJ_FLAG_STR, .dest = &split_on},
        {.name = "--format", .kind = LJ_FLAG_STR, .dest = &format},
        {.name = "--json-key", .kind = LJ_FLAG_STR, .dest = &cfg.json_key},
        {.name = "--json-keys", .kind = LJ_FLAG_LIST, .dest = &json_keys}, /* Megatron-LM: nargs='+' */
        {.name = "--append-eos", .kind = LJ_FLAG_SWITCH, .dest = &cfg.append_eos, .ival = 1},
        {.name = "--append-eod", .kind = LJ_FLAG_SWITCH, .dest = &cfg.append_eos, .ival = 1},
        {.name = "--no-append-eos", .kind = LJ_FLAG_SWITCH, .dest = &cfg.append_eos},
        {.name = "--prepend-bos", .kind = LJ_FLAG_SWITCH, .dest = &cfg.prepend_bos, .ival = 1},
        {.name = "--append-bos", .kind = LJ_FLAG_SWITCH, .dest = &cfg.prepend_bos, .ival = 1},
        {.name = "--allow-special-tokens", .kind = LJ_FLAG_SWITCH, .dest = &cfg.allow_special, .ival = 1},
        {.name = "--utf8-errors", .kind = LJ_FLAG_STR, .dest = &utf8},
        {.name = "--workers", .kind = LJ_FLAG_INT, .dest = &cfg.workers, .given = &workers_given, .min = 1, .max = 1024},
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
    if (st == LJ_OK && json_keys.count > 1)
        st = lj_fail(LJ_ERR_ARG, "--json-keys %s %s: one key per run (ljperf writes one dataset; run prepare once per key)",
                     json_keys.values[0], json_keys.values[1]);
    else if (json_keys.count == 1) cfg.json_key = json_keys.values[0];
    if (st == LJ_OK && utf8) {
        if (strcmp(utf8, "error") == 0) cfg.utf8_replace = 0;
        else if (strcmp(utf8, "replace") == 0) cfg.utf8_replace = 1;
        else st = lj_fail(LJ_ERR_ARG, "--utf8-errors: '%s' is not one of error, replace", utf8);
    }
    char tok_path[LJ_PATH_MAX];
    if (st == LJ_OK && cfg.tokenizer_path) {
        st = lj_tokenizer_resolve(cfg.tokenizer_path, "--tokenizer", tok_path, sizeof tok_path);
        cfg.tokenizer_path = tok_path;
    }
    if (st == LJ_OK && workers_given && (cfg.workers < 1 || cfg.workers > 1024))
        st = lj_fail(LJ_ERR_ARG, "--workers %d: expected 1 to 1024 worker threads", cfg.workers);
    if (quiet) cfg.progress = 0;
    char **inputs = in.list;
    const int ninputs = in.n;
    int rc = 0;
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
    if (lj_cli_prepare_mm_wanted(image_root, (const char *const *)inputs, ninputs)) {
        rc = lj_cli_prepare_mm((const char *const *)inputs, ninputs, cfg.output_prefix, cfg.tokenizer_path, image_root,
                               min_pixels, max_pixels, quiet);
        free_inputs(inputs, ninputs);
        return rc;
    }
    cfg.inputs = (const char *const *)inputs;
    cfg.num_inputs = ninputs;
    lj_prepare_stats s;
    st = lj_prepare_run(&cfg, &s);
    free_inputs(inputs, ninputs);
    if (st != LJ_OK) return lj_cli_error("prepare");
    double secs = s.seconds > 1e-9 ? s.seconds : 1e-9;
    printf("prepare: wrote %s.bin and %s.idx (%s tokens, vocabulary %d)\n", cfg.output_prefix, cfg.output_prefix,
           s.dtype_code == LJ_MMIDX_U16 ? "uint16" : "int32", s.vocab_size);
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
