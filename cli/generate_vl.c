/* generate_vl.c: `ljperf generate --image FILE` of a Qwen3-VL model (CPU or CUDA): the image decoded
 * and preprocessed as transformers' processor does (data/image.h), the prompt rendered with
 * Qwen3-VL's chat template (one user turn: the image, then the text; the generation prompt), the
 * vision tower once, then greedy decoding. Positions are get_rope_index's over the whole
 * sequence: the text after the image continues from the largest position + 1 and each new token
 * advances all three MRoPE axes together (what transformers' rope_deltas give while decoding).
 * Each step runs the decoder over the sequence so far (no KV cache yet); the image's patches are
 * uploaded once per step with the batch (lj_vl_set_batch), the tower runs once. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fs.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "data/image.h"
#include "data/tokenizer.h"
#include "io/hf_vl.h"
#include "model/vl.h"
#include "parallel/parallel.h"
#include "plan/build.h"
#include "plan/plan.h"

int lj_cli_generate_is_vl(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--image") == 0 || strncmp(argv[i], "--image=", 8) == 0) return 1;
    return 0;
}

typedef struct {
    const char *load, *image, *prompt, *tokenizer, *device, *output_json;
    int max_new_tokens;
    double temperature;
} vl_gen_args;

/* The processor's min/max pixels from DIR/preprocessor_config.json (size.shortest_edge /
 * longest_edge), when it has them. */
static void read_processor(const char *dir, lj_vision_preproc *p) {
    char path[LJ_PATH_MAX + 32], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    if (lj_file_read_all(path, &text, &len) != LJ_OK) return;
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(j, "size");
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(size, "shortest_edge");
    const cJSON *hi = cJSON_GetObjectItemCaseSensitive(size, "longest_edge");
    if (cJSON_IsNumber(lo)) p->min_pixels = (int64_t)lo->valuedouble;
    if (cJSON_IsNumber(hi)) p->max_pixels = (int64_t)hi->valuedouble;
    cJSON_Delete(j);
}

/* The prompt's ids: <|im_start|>user\n<|vision_start|> pads <|vision_end|>PROMPT<|im_end|>\n
 * <|im_start|>assistant\n (the template's rendering of [image, text] with the generation prompt;
 * the processor expands the one pad to the image's tokens). Special tokens split the text, so
 * encoding the pieces equals encoding the rendered string. */
static lj_status prompt_ids(lj_tokenizer *tok, const lj_vl_config *c, const char *prompt, int64_t image_tokens,
                            int32_t **ids, int64_t *n) {
    int64_t cap = 0;
    *ids = NULL;
    *n = 0;
    const char *head = "<|im_start|>user\n<|vision_start|>", *tail = "<|im_end|>\n<|im_start|>assistant\n";
    LJ_TRY(lj_tokenizer_encode_append(tok, head, strlen(head), 1, ids, n, &cap));
    for (int64_t i = 0; i <= image_tokens; i++) {
        if (*n == cap) {
            cap = cap * 2 + 16;
            *ids = realloc(*ids, (size_t)cap * sizeof(int32_t));
            LJ_ASSERT(*ids, "out of memory");
        }
        (*ids)[(*n)++] = i < image_tokens ? c->image_token_id : c->vision_end_token_id;
    }
    LJ_TRY(lj_tokenizer_encode_append(tok, prompt, strlen(prompt), 0, ids, n, &cap));
    return lj_tokenizer_encode_append(tok, tail, strlen(tail), 1, ids, n, &cap);
}

/* Row t of the unfused logits [T, V] (act dtype: f32 on the CPU, bf16 on CUDA) into host f32
 * row[V]; stage: [V] host scratch for a bf16 row. */
static void logits_row(const lj_model *m, int t, float *row, uint16_t *stage) {
    const int V = m->cfg.vocab_size;
    const size_t act = lj_dtype_size(m->ops->act_dtype);
    const char *src = (const char *)m->logits + (size_t)t * V * act;
    if (m->ops->act_dtype == LJ_DTYPE_F32) {
        m->ops->download(row, src, (size_t)V * sizeof(float));
        return;
    }
    m->ops->download(stage, src, (size_t)V * sizeof(uint16_t));
    for (int i = 0; i < V; i++) row[i] = lj_bf16_to_f32(stage[i]);
}

static lj_status run(const vl_gen_args *a) {
    if (lj_image_is_video_name(a->image))
        return lj_fail(LJ_ERR_UNSUPPORTED, "--image %s: a video file; generate takes one image (JPEG, PNG or WebP)",
                       a->image);
    if (a->temperature != 0.0)
        return lj_fail(LJ_ERR_UNSUPPORTED, "--temperature %g: generate --image decodes greedily (--temperature 0)",
                       a->temperature);
    const lj_ops *ops;
    LJ_TRY(lj_cli_device(a->device ? a->device : "auto", 0, &ops));
    char dir[LJ_PATH_MAX], path[LJ_PATH_MAX + 32];
    LJ_TRY(lj_cli_model_dir(a->load, dir));
    lj_vl_config cfg;
    snprintf(path, sizeof path, "%s/config.json", dir);
    LJ_TRY(lj_vl_config_load(path, &cfg));
    char tok_path[LJ_PATH_MAX + 32];
    if (a->tokenizer) LJ_TRY(lj_tokenizer_resolve(a->tokenizer, "--tokenizer", tok_path, sizeof tok_path));
    else snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", dir);
    lj_tokenizer *tok;
    LJ_TRY(lj_tokenizer_load(tok_path, &tok));

    lj_vision_preproc pre;
    lj_vision_preproc_qwen3vl(&pre);
    read_processor(dir, &pre);
    lj_image img;
    float *pixels = NULL;
    lj_grid_thw grid;
    lj_status s = lj_image_read(a->image, 0, &img);
    if (s == LJ_OK) {
        s = lj_vision_preprocess(&pre, &img, a->image, &pixels, &grid);
        lj_image_free(&img);
    }
    int32_t *ids = NULL;
    int64_t n = 0;
    if (s == LJ_OK) s = prompt_ids(tok, &cfg, a->prompt, lj_grid_tokens(grid, pre.merge_size), &ids, &n);
    const int T = (int)n + (a->max_new_tokens > 0 ? a->max_new_tokens : 1);
    if (s == LJ_OK && T > cfg.text.max_position_embeddings)
        s = lj_fail(LJ_ERR_ARG, "--max-new-tokens %d: the prompt (%" PRId64 " tokens with the image) and the answer "
                    "exceed max_position_embeddings %d", a->max_new_tokens, n, cfg.text.max_position_embeddings);
    lj_model m;
    lj_plan plan;
    lj_vl vl;
    int have_model = 0, have_plan = 0, have_vl = 0;
    float *tw = NULL, *vw = NULL;
    if (s == LJ_OK) {
        /* forward only, unfused (the logits of every position are kept) */
        lj_model_setup setup = {.ops = ops, .cfg = &cfg.text};
        setup.model.micro_batch_size = 1;
        setup.model.seq_length = T;
        const int np = (int)lj_grid_patches(grid);
        s = lj_vl_build(&vl, &m, &plan, &setup, &cfg, np, 1, NULL);
        have_model = have_vl = s == LJ_OK;
    }
    if (s == LJ_OK) {
        s = lj_plan_allocate(&plan, &m);
        have_plan = s == LJ_OK;
    }
    if (s == LJ_OK) {
        tw = lj_malloc((size_t)m.layout.total * sizeof(float));
        vw = lj_malloc((size_t)vl.vis.layout.total * sizeof(float));
        s = lj_hf_vl_import(dir, &cfg, tw, vw);
    }
    int32_t *seq = NULL, *targets = NULL, *out = NULL;
    int num_out = 0;
    double t0 = 0.0;
    if (s == LJ_OK) {
        lj_model_set_weights(&m, tw);
        lj_vision_set_weights(&vl.vis, vw);
        seq = lj_malloc((size_t)T * sizeof(int32_t));
        targets = lj_malloc((size_t)T * sizeof(int32_t));
        out = lj_malloc((size_t)T * sizeof(int32_t));
        for (int t = 0; t < T; t++) {
            seq[t] = t < n ? ids[t] : cfg.text.eos_token_id; /* after the current position: never attended */
            targets[t] = -1;
        }
        const int32_t g[3] = {grid.t, grid.h, grid.w};
        const int V = cfg.text.vocab_size;
        float *row = lj_malloc((size_t)V * sizeof(float));
        uint16_t *stage = lj_malloc((size_t)V * sizeof(uint16_t));
        int cur = (int)n;
        t0 = lj_time_sec();
        for (int k = 0; k < a->max_new_tokens && s == LJ_OK; k++) {
            s = lj_vl_set_batch(&vl, seq, targets, pixels, g, 1);
            if (s != LJ_OK) break;
            if (k == 0) lj_vision_forward(&vl.vis, 0);
            lj_model_forward(&m, 0, 0.0f);
            logits_row(&m, cur - 1, row, stage);
            int best = 0;
            for (int i = 1; i < V; i++)
                if (row[i] > row[best]) best = i;
            out[num_out++] = best;
            if (best == cfg.text.eos_token_id || best == 151643 /* <|endoftext|> */ || cur >= T) break;
            seq[cur++] = best;
        }
        free(row);
        free(stage);
    }
    char *text = NULL;
    size_t len = 0;
    int keep = num_out;
    if (s == LJ_OK) {
        if (keep > 0 && (out[keep - 1] == cfg.text.eos_token_id || out[keep - 1] == 151643)) keep--;
        s = lj_tokenizer_decode(tok, out, keep, &text, &len);
    }
    if (s == LJ_OK) {
        const double dt = lj_time_sec() - t0;
        fwrite(text, 1, len, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        /* as the text generate reports; the end token is not counted, so an answer that is only
         * <|im_end|> says 0 tokens */
        lj_log_info("[%d tokens in %.2f s: %.1f tokens/s on %s%s]", keep, dt, keep / (dt > 0 ? dt : 1), ops->name,
                    keep < num_out ? "; then the end token" : "");
        if (a->output_json) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddItemToObject(j, "prompt_ids", cJSON_CreateIntArray(ids, (int)n));
            cJSON_AddItemToObject(j, "ids", cJSON_CreateIntArray(out, num_out));
            cJSON_AddStringToObject(j, "text", text);
            cJSON_AddStringToObject(j, "image", a->image);
            cJSON_AddStringToObject(j, "prompt", a->prompt);
            cJSON_AddItemToObject(j, "image_grid_thw", cJSON_CreateIntArray((const int[]){grid.t, grid.h, grid.w}, 3));
            char *js = cJSON_Print(j);
            s = lj_file_write_atomic(a->output_json, js, strlen(js));
            free(js);
            cJSON_Delete(j);
        }
    }
    free(text);
    free(seq);
    free(targets);
    free(out);
    free(tw);
    free(vw);
    free(ids);
    free(pixels);
    if (have_vl) lj_vl_free(&vl);
    if (have_model) {
        if (have_plan) lj_plan_release(&plan, m.ops);
        lj_plan_free(&plan);
        lj_model_free(&m);
    }
    lj_tokenizer_free(tok);
    return s;
}

int lj_cli_generate_vl(int argc, char **argv) {
    vl_gen_args a = {NULL, NULL, "Describe this image.", NULL, NULL, NULL, 32, 0.0};
    const lj_flag rows[] = {
        {.name = "--load", .kind = LJ_FLAG_STR, .dest = &a.load, .help = "DIR  a Qwen3-VL checkpoint root, iteration or HF directory"},
        {.name = "--image", .kind = LJ_FLAG_STR, .dest = &a.image, .help = "FILE  a JPEG, PNG or WebP image"},
        {.name = "--prompt", .kind = LJ_FLAG_STR, .dest = &a.prompt, .help = "TEXT  the question (\"Describe this image.\")"},
        {.name = "--max-new-tokens", .kind = LJ_FLAG_INT, .dest = &a.max_new_tokens, .help = "N  (32)"},
        {.name = "--temperature", .kind = LJ_FLAG_DOUBLE, .dest = &a.temperature, .help = "0  (greedy only)"},
        {.name = "--tokenizer", .kind = LJ_FLAG_STR, .dest = &a.tokenizer, .help = "NAME|PATH  (the model directory's)"},
        {.name = "--device", .kind = LJ_FLAG_STR, .dest = &a.device, .help = "auto|cpu|cuda  (auto: the GPU if usable)"},
        {.name = "--output-json", .kind = LJ_FLAG_STR, .dest = &a.output_json,
         .help = "FILE  the prompt's ids, the answer's ids and text"},
    };
    lj_flags_result res;
    if (lj_flags_parse("generate", rows, (int)(sizeof rows / sizeof rows[0]), argc, argv, 0, &res) != LJ_OK)
        return lj_cli_error("generate");
    const int help = res.help;
    lj_flags_result_free(&res);
    if (help) {
        printf("usage: ljperf generate --load DIR --image FILE [--prompt TEXT] [flags]\n");
        lj_flags_print_help(stdout, rows, (int)(sizeof rows / sizeof rows[0]));
        return 0;
    }
    lj_status s = LJ_OK;
    if (!a.load || !a.image)
        s = lj_fail(LJ_ERR_ARG, "--load DIR and --image FILE are required: give both (a Qwen3-VL model folder and a "
                                "JPEG, PNG or WebP image)");
    else if (a.max_new_tokens < 1) s = lj_fail(LJ_ERR_ARG, "--max-new-tokens %d: expected >= 1", a.max_new_tokens);
    if (s == LJ_OK) s = run(&a);
    return s == LJ_OK ? 0 : lj_cli_error("generate");
}
