/* tokenizer_export.c: tokenizer files of a Hugging Face model directory (tokenizer_export.h). */
#include "data/tokenizer_export.h"

#include <cjson/cJSON.h>
#include <string.h>
#include <unistd.h>

#include "base/fs.h"
#include "data/tokenizer.h"

/* The token text of `id` as a NUL-terminated heap string, or NULL. */
static char *token_text(const lj_tokenizer *tok, int32_t id) {
    size_t len = 0;
    const char *b = id >= 0 ? lj_tokenizer_token(tok, id, &len) : NULL;
    if (!b) return NULL;
    char *s = lj_malloc(len + 1);
    memcpy(s, b, len);
    s[len] = '\0';
    return s;
}

static lj_status write_json(const char *dir, const char *name, cJSON *o) {
    char path[LJ_PATH_MAX];
    lj_status s = lj_path_join(path, dir, name);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (s == LJ_OK) {
        const size_t n = strlen(text);
        char *with_nl = lj_malloc(n + 2);
        memcpy(with_nl, text, n);
        with_nl[n] = '\n';
        s = lj_file_write_atomic(path, with_nl, n + 1);
        free(with_nl);
    }
    free(text);
    return s;
}

static lj_status copy_file(const char *from, const char *dir, const char *name) {
    char path[LJ_PATH_MAX];
    LJ_TRY(lj_path_join(path, dir, name));
    char *data = NULL;
    size_t size = 0;
    LJ_TRY(lj_file_read_all(from, &data, &size));
    lj_status s = lj_file_write_atomic(path, data, size);
    free(data);
    return s;
}

/* Whether a post_processor (tokenizer.json) adds special tokens itself (a TemplateProcessing,
 * alone or inside a Sequence). */
static int adds_template(const cJSON *pp) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pp, "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "TemplateProcessing") == 0) return 1;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pp, "processors"), *it;
    cJSON_ArrayForEach(it, list) if (adds_template(it)) return 1;
    return 0;
}

/* {"SpecialToken": {"id": bos, "type_id": t}} or {"Sequence": {"id": seq, "type_id": t}} */
static cJSON *template_piece(const char *kind, const char *id, int type_id) {
    cJSON *o = cJSON_CreateObject(), *in = cJSON_AddObjectToObject(o, kind);
    cJSON_AddStringToObject(in, "id", id);
    cJSON_AddNumberToObject(in, "type_id", type_id);
    return o;
}

/* Writes DIR/tokenizer.json: the run's tokenizer, with BOS prepended by its post-processor when
 * it does not add it already. ljperf's generate starts every prompt with BOS (as Llama 3 was
 * trained), and Meta's published Llama 3 tokenizer.json does the same with a TemplateProcessing
 * after the ByteLevel step, so AutoTokenizer then encodes as ljperf does. A file that needs no
 * such change is copied byte for byte; one that does keeps everything else as it is, in its
 * order (the pre_tokenizer's regex too, which transformers compares with the ones it knows). */
static lj_status export_tokenizer_json(const char *from, const char *dir, const char *bos_text, int32_t bos) {
    char *text = NULL;
    size_t size = 0;
    LJ_TRY(lj_file_read_all(from, &text, &size));
    cJSON *root = cJSON_Parse(text);
    if (!root) {
        free(text);
        return lj_fail(LJ_ERR_FORMAT, "%s: not valid JSON", from);
    }
    cJSON *pp = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
    char path[LJ_PATH_MAX];
    lj_status s = lj_path_join(path, dir, "tokenizer.json");
    if (s == LJ_OK && !(bos_text && !(pp && adds_template(pp)))) { /* nothing to add */
        cJSON_Delete(root);
        s = lj_file_write_atomic(path, text, size);
        free(text);
        return s;
    }
    free(text);
    cJSON *seq = cJSON_CreateObject();
    cJSON_AddStringToObject(seq, "type", "Sequence");
    cJSON *procs = cJSON_AddArrayToObject(seq, "processors");
    if (pp && !cJSON_IsNull(pp)) cJSON_AddItemToArray(procs, cJSON_Duplicate(pp, 1));
    cJSON *tp = cJSON_CreateObject();
    cJSON_AddStringToObject(tp, "type", "TemplateProcessing");
    cJSON *single = cJSON_AddArrayToObject(tp, "single");
    cJSON_AddItemToArray(single, template_piece("SpecialToken", bos_text, 0));
    cJSON_AddItemToArray(single, template_piece("Sequence", "A", 0));
    cJSON *pair = cJSON_AddArrayToObject(tp, "pair");
    cJSON_AddItemToArray(pair, template_piece("SpecialToken", bos_text, 0));
    cJSON_AddItemToArray(pair, template_piece("Sequence", "A", 0));
    cJSON_AddItemToArray(pair, template_piece("SpecialToken", bos_text, 1));
    cJSON_AddItemToArray(pair, template_piece("Sequence", "B", 1));
    cJSON *special = cJSON_AddObjectToObject(tp, "special_tokens");
    cJSON *b = cJSON_AddObjectToObject(special, bos_text);
    cJSON_AddStringToObject(b, "id", bos_text);
    cJSON *ids = cJSON_AddArrayToObject(b, "ids");
    cJSON_AddItemToArray(ids, cJSON_CreateNumber(bos));
    cJSON *toks = cJSON_AddArrayToObject(b, "tokens");
    cJSON_AddItemToArray(toks, cJSON_CreateString(bos_text));
    cJSON_AddItemToArray(procs, tp);
    /* in the old one's place, so the fields keep their order */
    if (pp) cJSON_ReplaceItemInObjectCaseSensitive(root, "post_processor", seq);
    else cJSON_AddItemToObject(root, "post_processor", seq);
    char *out = s == LJ_OK ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (s == LJ_OK) s = lj_file_write_atomic(path, out, strlen(out));
    free(out);
    return s;
}

static lj_status load_checked(const char *tokenizer_path, const lj_model_config *cfg, const char *flag,
                              lj_tokenizer **tok) {
    lj_status s = lj_tokenizer_load(tokenizer_path, tok);
    if (s != LJ_OK) {
        lj_error_prefix("%s", flag);
        return s;
    }
    const int32_t v = lj_tokenizer_vocab_size(*tok);
    if (v > cfg->vocab_size) {
        lj_tokenizer_free(*tok);
        *tok = NULL;
        return lj_fail(LJ_ERR_ARG, "%s %s: the tokenizer has %d ids but the model's vocab_size is %d (the tokenizer "
                                   "of the data this run trains on belongs in the export)",
                       flag, tokenizer_path, v, cfg->vocab_size);
    }
    return LJ_OK;
}

lj_status lj_tokenizer_check_export(const char *tokenizer_path, const lj_model_config *cfg, const char *flag) {
    lj_tokenizer *tok = NULL;
    LJ_TRY(load_checked(tokenizer_path, cfg, flag, &tok));
    lj_tokenizer_free(tok);
    return LJ_OK;
}

lj_status lj_tokenizer_export_hf(const char *tokenizer_path, const char *dir, const lj_model_config *cfg) {
    lj_tokenizer *tok = NULL;
    LJ_TRY(load_checked(tokenizer_path, cfg, "tokenizer", &tok));
    const int32_t bos = lj_tokenizer_bos_id(tok) >= 0 ? lj_tokenizer_bos_id(tok) : cfg->bos_token_id;
    const int32_t eos = lj_tokenizer_eos_id(tok) >= 0 ? lj_tokenizer_eos_id(tok) : cfg->eos_token_id;
    /* the BOS text only for a tokenizer that has one (Qwen's has none: bos_token null) */
    char *bos_text = lj_tokenizer_bos_id(tok) >= 0 ? token_text(tok, bos) : NULL, *eos_text = token_text(tok, eos);
    const int adds_bos = lj_tokenizer_adds_bos(tok), qwen2 = lj_tokenizer_is_qwen2(tok);
    lj_tokenizer_free(tok);

    lj_status s = export_tokenizer_json(tokenizer_path, dir, adds_bos ? bos_text : NULL, bos);
    /* tokenizer_config.json: the one beside the tokenizer, else derived */
    char beside[LJ_PATH_MAX];
    snprintf(beside, sizeof beside, "%s", tokenizer_path);
    char *slash = strrchr(beside, '/');
    const char *cfg_name = "tokenizer_config.json";
    if (slash) slash[1] = '\0';
    else beside[0] = '\0';
    const int fits = strlen(beside) + strlen(cfg_name) < sizeof beside;
    if (fits) strcat(beside, cfg_name);
    cJSON *copied = NULL; /* the copied tokenizer_config.json, which special_tokens_map.json must agree with */
    if (s == LJ_OK && fits && access(beside, R_OK) == 0) {
        s = copy_file(beside, dir, cfg_name);
        char *text = NULL;
        if (s == LJ_OK && lj_file_read_all(beside, &text, NULL) == LJ_OK) copied = cJSON_Parse(text);
        free(text);
    } else if (s == LJ_OK) {
        /* the class the published files name: Qwen2/Qwen3's Qwen2Tokenizer (with the fields of
         * their tokenizer_config.json), else PreTrainedTokenizerFast (Llama 3's) */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "tokenizer_class", qwen2 ? "Qwen2Tokenizer" : "PreTrainedTokenizerFast");
        if (qwen2) cJSON_AddNullToObject(o, "bos_token"); /* Qwen starts no sequence with one */
        else if (bos_text) cJSON_AddStringToObject(o, "bos_token", bos_text);
        if (eos_text) cJSON_AddStringToObject(o, "eos_token", eos_text);
        if (qwen2) {
            cJSON_AddBoolToObject(o, "add_bos_token", 0);
            cJSON_AddBoolToObject(o, "add_prefix_space", 0);
            cJSON_AddStringToObject(o, "errors", "replace");
            if (eos_text) cJSON_AddStringToObject(o, "pad_token", eos_text);
            cJSON_AddNullToObject(o, "unk_token");
            cJSON_AddBoolToObject(o, "split_special_tokens", 0);
        }
        cJSON_AddNumberToObject(o, "model_max_length", cfg->max_position_embeddings);
        cJSON_AddBoolToObject(o, "clean_up_tokenization_spaces", 0);
        cJSON *names = cJSON_AddArrayToObject(o, "model_input_names");
        cJSON_AddItemToArray(names, cJSON_CreateString("input_ids"));
        cJSON_AddItemToArray(names, cJSON_CreateString("attention_mask"));
        s = write_json(dir, cfg_name, o);
    }
    if (s == LJ_OK) {
        /* transformers lets this file override tokenizer_config.json's tokens: the copied config's
         * own tokens when there is one (Qwen's chat config names <|im_end|> as eos_token), else
         * the tokenizer's */
        cJSON *o = cJSON_CreateObject();
        if (copied) {
            static const char *keys[] = {"bos_token", "eos_token", "pad_token", "unk_token"};
            for (int k = 0; k < 4; k++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(copied, keys[k]);
                if (cJSON_IsString(v) || cJSON_IsObject(v)) cJSON_AddItemToObject(o, keys[k], cJSON_Duplicate(v, 1));
            }
        } else {
            if (bos_text && !qwen2) cJSON_AddStringToObject(o, "bos_token", bos_text);
            if (eos_text) cJSON_AddStringToObject(o, "eos_token", eos_text);
            if (eos_text && qwen2) cJSON_AddStringToObject(o, "pad_token", eos_text);
        }
        s = write_json(dir, "special_tokens_map.json", o);
    }
    cJSON_Delete(copied);
    if (s == LJ_OK) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "bos_token_id", bos);
        cJSON_AddNumberToObject(o, "eos_token_id", eos);
        cJSON_AddStringToObject(o, "transformers_version", LJ_HF_TRANSFORMERS_VERSION);
        s = write_json(dir, "generation_config.json", o);
    }
    free(bos_text);
    free(eos_text);
    return s;
}
