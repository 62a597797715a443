/* generate.c: `ljperf generate`: load a checkpoint, encode a prompt, sample with a KV cache
 * (greedy, temperature, top-k, top-p; seeded) and stream the text. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "cli/cli.h"
#include "data/tokenizer.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/state.h"
#include "io/hf.h"
#include "plan/plan.h"
#include "train/train.h"

typedef struct {
    const char *load, *prompt, *tokenizer, *device;
    int max_new_tokens, top_k;
    double temperature, top_p;
    uint64_t seed;
} gen_args;

static void usage(FILE *f) {
    fprintf(f, "usage: ljperf generate --load DIR [--prompt TEXT] [flags]\n"
               "  --load DIR             a training checkpoint root (--save of ljperf train; its latest\n"
               "                         iteration), one of its iter_NNNNNNN directories, or a Hugging\n"
               "                         Face model directory\n"
               "  --prompt TEXT          (default \"In the beginning\")\n"
               "  --max-new-tokens N     (default 64)\n"
               "  --temperature T        0 = greedy (default 0.8)\n"
               "  --top-k K              keep the K most likely tokens (default 0 = all)\n"
               "  --top-p P              nucleus sampling (default 1.0 = off)\n"
               "  --seed S               sampling seed (default 1234)\n"
               "  --tokenizer NAME|PATH  llama3, qwen3 (the set-up script's), a tokenizer.json or a directory\n"
               "                         holding one (default: the one in the model directory, which\n"
               "                         ljperf's exports carry, else the set-up script's Llama 3 tokenizer)\n"
               "  --device auto|cpu|cuda (default auto)\n"
               "Qwen3-VL (with a qwen3_vl model; greedy decoding):\n"
               "  --image FILE           a JPEG, PNG or WebP image: the prompt asks about it (required)\n"
               "  --prompt TEXT          the question (default \"Describe this image.\")\n"
               "  --max-new-tokens N     (default 32)\n"
               "  --output-json FILE     the prompt's ids, the answer's ids and text, the image's grid\n"
               "  (--load, --tokenizer and --device as above; `ljperf generate --image FILE --help` lists them)\n");
}

lj_status lj_cli_model_dir(const char *load, char *buf) {
    char root[LJ_PATH_MAX], cfg[LJ_PATH_MAX];
    int iteration, is_state;
    LJ_TRY(lj_ckpt_resolve_load(load, root, &iteration, &is_state, buf));
    struct stat st;
    LJ_TRY(lj_path_join(cfg, buf, "model.safetensors.index.json"));
    const int weights = stat(cfg, &st) == 0 || (lj_path_join(cfg, buf, "model.safetensors") == LJ_OK && stat(cfg, &st) == 0);
    if (is_state && !weights)
        return lj_fail(LJ_ERR_IO,
                       "--load %s: the training checkpoint of iteration %d has no Hugging Face export (`ljperf "
                       "benchmark --save` writes none; `ljperf train --no-save-hf` writes one in its last save only): "
                       "give the iteration directory of one that has hf/, or resume it with `ljperf train --load` "
                       "(whose saves write the export)", load, iteration);
    LJ_TRY(lj_path_join(cfg, buf, "config.json"));
    if (stat(cfg, &st) != 0) {
        if (is_state)
            return lj_fail(LJ_ERR_IO,
                           "--load %s: the training checkpoint of iteration %d has no Hugging Face export (%s is "
                           "missing); generate reads the export that --save writes next to the state",
                           load, iteration, cfg);
        return lj_fail(LJ_ERR_IO, "--load %s: no checkpoint there (expected %s or %s)", load, LJ_CKPT_LATEST_FILE,
                       "config.json");
    }
    return LJ_OK;
}

typedef struct {
    float p;
    int32_t id;
} candidate;

static int by_probability(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Samples a token id from logits[V] (modified in place): greedy at temperature 0, else from
 * softmax(logits / temperature), restricted to the top_k most likely tokens and then to the
 * smallest set whose probability reaches top_p (nucleus sampling, Holtzman et al. 2020).
 * `cand` is scratch of V entries. */
static int32_t sample(float *logits, int V, const gen_args *a, lj_rng *rng, candidate *cand) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (a->temperature <= 0.0) return best;
    double sum = 0.0;
    const float maxv = logits[best];
    for (int i = 0; i < V; i++) {
        logits[i] = (float)exp((logits[i] - maxv) / a->temperature);
        sum += logits[i];
    }
    if (a->top_k == 0 && a->top_p >= 1.0) { /* plain sampling: no ordering needed */
        double u = lj_rng_uniform(rng) * sum, acc = 0.0;
        for (int i = 0; i < V; i++) {
            acc += logits[i];
            if (u < acc) return i;
        }
        return best;
    }
    for (int i = 0; i < V; i++) cand[i] = (candidate){(float)(logits[i] / sum), i};
    qsort(cand, (size_t)V, sizeof *cand, by_probability);
    int n = a->top_k > 0 && a->top_k < V ? a->top_k : V;
    double mass = 0.0;
    for (int i = 0; i < n; i++) {
        mass += cand[i].p;
        if (a->top_p < 1.0 && mass >= a->top_p) {
            n = i + 1;
            break;
        }
    }
    double u = lj_rng_uniform(rng) * mass, acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += cand[i].p;
        if (u < acc) return cand[i].id;
    }
    return cand[0].id;
}

/* Writes the complete UTF-8 sequences of pending[0..*n) to stdout and keeps the rest. */
static void flush_utf8(char *pending, size_t *n, int final) {
    size_t end = *n;
    if (!final) {
        /* back off an incomplete trailing sequence */
        size_t i = *n;
        int back = 0;
        while (i > 0 && back < 4 && ((unsigned char)pending[i - 1] & 0xC0) == 0x80) {
            i--;
            back++;
        }
        if (i > 0) {
            unsigned char lead = (unsigned char)pending[i - 1];
            int need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
            if (need > back + 1) end = i - 1;
        }
    }
    fwrite(pending, 1, end, stdout);
    fflush(stdout);
    memmove(pending, pending + end, *n - end);
    *n -= end;
}

static lj_status run_generate(const gen_args *a) {
    char dir[LJ_PATH_MAX], tokpath[LJ_PATH_MAX];
    LJ_TRY(lj_cli_model_dir(a->load, dir));
    lj_model_config cfg;
    LJ_TRY(lj_hf_load_config(dir, &cfg));
    const lj_ops *ops;
    LJ_TRY(lj_cli_device(a->device, 0, &ops));
    lj_tokenizer *tok;
    /* --tokenizer, else the tokenizer beside the model, else the default */
    if (a->tokenizer) LJ_TRY(lj_tokenizer_resolve(a->tokenizer, "--tokenizer", tokpath, sizeof tokpath));
    else if (lj_path_join(tokpath, dir, "tokenizer.json") != LJ_OK || access(tokpath, R_OK) != 0)
        lj_tokenizer_default_path(tokpath, sizeof tokpath);
    LJ_TRY(lj_tokenizer_load(tokpath, &tok));
    if (lj_tokenizer_vocab_size(tok) > cfg.vocab_size) {
        const int32_t v = lj_tokenizer_vocab_size(tok);
        lj_tokenizer_free(tok);
        return lj_fail(LJ_ERR_FORMAT, "%s/config.json: vocab_size %d is smaller than the tokenizer's %d", dir,
                       cfg.vocab_size, v);
    }
    int32_t *ids = NULL;
    int64_t n = 0;
    lj_status s = lj_tokenizer_encode(tok, a->prompt, strlen(a->prompt), 0, &ids, &n);
    if (s != LJ_OK) {
        lj_tokenizer_free(tok);
        return s;
    }
    /* BOS first when the tokenizer starts its sequences with it (Llama 3; Qwen does not) */
    const int with_bos = lj_tokenizer_adds_bos(tok);
    if (!with_bos && n == 0) {
        lj_tokenizer_free(tok);
        return lj_fail(LJ_ERR_ARG, "--prompt is empty and the tokenizer adds no BOS: give a prompt");
    }
    int32_t *prompt = lj_malloc((size_t)(n + 1) * sizeof(int32_t));
    prompt[0] = lj_tokenizer_bos_id(tok) >= 0 ? lj_tokenizer_bos_id(tok) : cfg.bos_token_id;
    memcpy(prompt + with_bos, ids, (size_t)n * sizeof(int32_t));
    free(ids);
    const int prompt_len = (int)n + with_bos;
    int total = prompt_len + a->max_new_tokens;
    if (total > cfg.max_position_embeddings) {
        total = cfg.max_position_embeddings;
        if (prompt_len < total)
            lj_log_warn("--max-new-tokens %d: the model's max_position_embeddings (%d) leaves room for %d new tokens "
                        "after the %d-token prompt",
                        a->max_new_tokens, cfg.max_position_embeddings, total - prompt_len, prompt_len);
    }
    if (prompt_len > cfg.max_position_embeddings || (a->max_new_tokens > 0 && prompt_len >= total)) {
        free(prompt);
        lj_tokenizer_free(tok);
        return lj_fail(LJ_ERR_ARG, "--prompt is %d tokens (with BOS, if any): no room below max_position_embeddings (%d)",
                       prompt_len, cfg.max_position_embeddings);
    }

    lj_model_options opt;
    memset(&opt, 0, sizeof opt);
    opt.micro_batch_size = 1;
    opt.seq_length = prompt_len;
    opt.fused = 1;
    opt.kv_cache_tokens = total;
    lj_model m;
    lj_model_init(&m, ops, &cfg, &opt);
    lj_plan plan;
    lj_plan_build(&plan, &m);
    s = lj_plan_allocate(&plan, &m);
    float *weights = NULL, *logits = NULL;
    candidate *order = NULL;
    if (s == LJ_OK) {
        weights = lj_malloc((size_t)m.layout.total * sizeof(float));
        s = lj_hf_import(dir, &cfg, weights);
    }
    if (s == LJ_OK) {
        lj_model_set_weights(&m, weights);
        lj_model_upload_rope(&m);
        logits = lj_malloc((size_t)cfg.vocab_size * sizeof(float));
        order = lj_malloc((size_t)cfg.vocab_size * sizeof(candidate));
        lj_rng rng;
        lj_rng_seed(&rng, a->seed);
        const int32_t eos = lj_tokenizer_eos_id(tok);
        fputs(a->prompt, stdout);
        fflush(stdout);
        char pending[64];
        size_t npending = 0;
        const double t0 = lj_time_sec();
        lj_model_decode(&m, prompt, prompt_len, 0, logits);
        int pos = prompt_len, generated = 0;
        while (pos < total && generated < a->max_new_tokens) {
            int32_t next = sample(logits, cfg.vocab_size, a, &rng, order);
            generated++;
            if (next == eos || next == cfg.eos_token_id) break;
            size_t len = 0;
            const char *bytes = lj_tokenizer_token(tok, next, &len);
            if (bytes && !lj_tokenizer_is_special(tok, next)) {
                if (npending + len > sizeof pending) flush_utf8(pending, &npending, 1);
                if (len <= sizeof pending) {
                    memcpy(pending + npending, bytes, len);
                    npending += len;
                    flush_utf8(pending, &npending, 0);
                } else {
                    fwrite(bytes, 1, len, stdout);
                }
            }
            lj_model_decode(&m, &next, 1, pos, logits);
            pos++;
        }
        flush_utf8(pending, &npending, 1);
        const double dt = lj_time_sec() - t0;
        fputc('\n', stdout);
        fflush(stdout);
        lj_log_info("[%d tokens in %.2f s: %.1f tokens/s on %s]", generated, dt, generated / (dt > 0 ? dt : 1), ops->name);
    }
    free(order);
    free(logits);
    free(weights);
    free(prompt);
    lj_plan_release(&plan, ops);
    lj_plan_free(&plan);
    lj_model_free(&m);
    lj_tokenizer_free(tok);
    return s;
}

int lj_cli_generate(int argc, char **argv) {
    if (lj_cli_generate_is_vl(argc, argv)) return lj_cli_generate_vl(argc, argv); /* cli/generate_vl.c */
    gen_args a = {NULL, "In the beginning", NULL, "auto", 64, 0, 0.8, 1.0, 1234};
    const lj_flag rows[] = {
        {.name = "--load", .kind = LJ_FLAG_STR, .dest = &a.load},
        {.name = "--prompt", .kind = LJ_FLAG_STR, .dest = &a.prompt},
        {.name = "--tokenizer", .kind = LJ_FLAG_STR, .dest = &a.tokenizer},
        {.name = "--device", .kind = LJ_FLAG_STR, .dest = &a.device},
        {.name = "--max-new-tokens", .kind = LJ_FLAG_INT, .dest = &a.max_new_tokens},
        {.name = "--top-k", .kind = LJ_FLAG_INT, .dest = &a.top_k},
        {.name = "--temperature", .kind = LJ_FLAG_DOUBLE, .dest = &a.temperature},
        {.name = "--top-p", .kind = LJ_FLAG_DOUBLE, .dest = &a.top_p},
        {.name = "--seed", .kind = LJ_FLAG_U64, .dest = &a.seed},
    };
    lj_flags_result res;
    if (lj_flags_parse("generate", rows, (int)(sizeof rows / sizeof rows[0]), argc, argv, 0, &res) != LJ_OK)
        return lj_cli_error("generate");
    if (res.help) {
        usage(stdout);
        return 0;
    }
    if (!a.load) {
        lj_fail(LJ_ERR_ARG, "--load DIR is required: give a Hugging Face model folder (e.g. a checkpoint's hf/)");
        return lj_cli_error("generate");
    }
    if (lj_cli_names_vl(a.load)) {
        lj_fail(LJ_ERR_ARG, "--load %s: a Qwen3-VL model (model_type qwen3_vl); generate of it needs --image FILE "
                            "(a JPEG, PNG or WebP image; text-only prompts are not supported): add --image",
                a.load);
        return lj_cli_error("generate");
    }
    char bad_text[96];
    const char *bad = NULL;
    if (a.max_new_tokens < 0) snprintf(bad_text, sizeof bad_text, "--max-new-tokens %d: must be >= 0", a.max_new_tokens);
    else if (a.top_k < 0) snprintf(bad_text, sizeof bad_text, "--top-k %d: must be >= 0", a.top_k);
    else if (!(a.top_p > 0.0 && a.top_p <= 1.0)) snprintf(bad_text, sizeof bad_text, "--top-p %g: must be in (0, 1]", a.top_p);
    else if (!(a.temperature >= 0 && isfinite(a.temperature)))
        snprintf(bad_text, sizeof bad_text, "--temperature %g: must be a finite number >= 0", a.temperature);
    else bad_text[0] = '\0';
    if (bad_text[0]) bad = bad_text;
    if (bad) {
        lj_fail(LJ_ERR_ARG, "%s", bad);
        return lj_cli_error("generate");
    }
    return run_generate(&a) == LJ_OK ? 0 : lj_cli_error("generate");
}
