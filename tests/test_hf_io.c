/* test_hf_io.c: io/hf: Hugging Face export/import round trips (F32 bit-exact, BF16 equal to
 * round-to-nearest-even; single file and sharded; tied and untied), directory replacement,
 * and rejection of checkpoints that do not fit the config (tests named test_bad_* also run
 * under valgrind from test_io_bad.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "tests/test_util.h"
#include "checkpoint/checkpoint.h"
#include "io/hf.h"
#include "io/safetensors.h"

static char g_dir[512];

static int setup_dir(void **state) {
    (void)state;
    return lj_test_make_dir(g_dir, sizeof g_dir, "hf");
}

static int teardown_dir(void **state) {
    (void)state;
    return lj_dir_remove(g_dir) == LJ_OK ? 0 : -1;
}

static char *tmp_path(const char *name) {
    size_t n = strlen(g_dir) + strlen(name) + 2;
    char *p = lj_malloc(n);
    snprintf(p, n, "%s/%s", g_dir, name);
    return p;
}

/* A tiny Llama (V=96, d=16, I=40, L=2, 4 heads, 2 KV heads of 4) with llama3 RoPE scaling. */
static lj_model_config tiny_config(int tied) {
    lj_model_config c;
    assert_int_equal(lj_config_preset("llama3-nano", &c), LJ_OK);
    snprintf(c.name, sizeof c.name, "tiny");
    c.vocab_size = 96;
    c.hidden_size = 16;
    c.intermediate_size = 40;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 4;
    c.max_position_embeddings = 64;
    c.bos_token_id = 1;
    c.eos_token_id = 2;
    c.tie_word_embeddings = tied;
    assert_int_equal(lj_config_validate(&c, "tiny"), LJ_OK);
    return c;
}

static float *random_params(const lj_model_config *c, uint64_t seed) {
    int64_t n = lj_config_num_params(c);
    float *p = lj_malloc((size_t)n * sizeof(float));
    lj_rng rng;
    lj_rng_seed(&rng, seed);
    for (int64_t i = 0; i < n; i++) p[i] = (float)(lj_rng_normal(&rng) * 0.02);
    return p;
}

static int file_exists(const char *dir, const char *name) {
    char *p = lj_malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    int ok = access(p, F_OK) == 0;
    free(p);
    return ok;
}

static int count_entries(const char *dir, const char *substr) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.' && strstr(de->d_name, substr)) n++;
    closedir(d);
    return n;
}

static void expect_error(lj_status got, lj_status want, const char *a, const char *b, const char *c) {
    const char *msg = lj_error_message();
    if (got != want) fail_msg("expected status %d, got %d (%s)", (int)want, (int)got, msg);
    if (a && !strstr(msg, a)) fail_msg("message lacks '%s': %s", a, msg);
    if (b && !strstr(msg, b)) fail_msg("message lacks '%s': %s", b, msg);
    if (c && !strstr(msg, c)) fail_msg("message lacks '%s': %s", c, msg);
}

/* Export, reload the config from the directory, import, compare. */
static void round_trip(int tied, lj_dtype dtype, uint64_t shard_bytes, int want_shards) {
    lj_model_config c = tiny_config(tied);
    float *p = random_params(&c, 11 + tied);
    int64_t n = lj_config_num_params(&c);
    char *dir = tmp_path("rt");
    assert_int_equal(lj_hf_export(dir, &c, p, dtype, shard_bytes), LJ_OK);
    assert_true(file_exists(dir, "config.json"));
    assert_int_equal(file_exists(dir, "model.safetensors"), want_shards == 0);
    assert_int_equal(file_exists(dir, "model.safetensors.index.json"), want_shards > 0);
    assert_int_equal(count_entries(dir, "-of-"), want_shards);
    assert_int_equal(count_entries(g_dir, ".tmp."), 0);

    lj_model_config c2;
    assert_int_equal(lj_hf_load_config(dir, &c2), LJ_OK);
    assert_int_equal(c2.hidden_size, c.hidden_size);
    assert_int_equal(c2.intermediate_size, c.intermediate_size);
    assert_int_equal(c2.num_key_value_heads, c.num_key_value_heads);
    assert_int_equal(c2.tie_word_embeddings, tied);
    assert_int_equal(c2.rope_scaling_llama3, 1);

    float *q = lj_calloc((size_t)n, sizeof(float));
    assert_int_equal(lj_hf_import(dir, &c2, q), LJ_OK);
    if (dtype == LJ_DTYPE_F32) {
        assert_memory_equal(q, p, (size_t)n * sizeof(float));
    } else {
        for (int64_t i = 0; i < n; i++) assert_true(q[i] == lj_bf16_to_f32(lj_f32_to_bf16(p[i])));
    }

    /* The file itself: names, shapes, dtype, metadata {"format": "pt"}, no lm_head when tied. */
    lj_param_layout lo;
    lj_param_layout_init(&lo, &c);
    if (want_shards == 0) {
        char *file = tmp_path("rt/model.safetensors");
        lj_safetensors st;
        assert_int_equal(lj_safetensors_open(&st, file), LJ_OK);
        assert_string_equal(lj_safetensors_metadata(&st, "format"), "pt");
        assert_int_equal(st.count, lo.count);
        for (int i = 0; i < lo.count; i++) {
            const lj_st_entry *e = lj_safetensors_find(&st, lo.params[i].name);
            assert_non_null(e);
            assert_int_equal(e->dtype, dtype == LJ_DTYPE_F32 ? LJ_ST_F32 : LJ_ST_BF16);
            assert_int_equal(e->ndim, lo.params[i].ndim);
            assert_int_equal(e->shape[0], lo.params[i].shape[0]);
        }
        assert_int_equal(lj_safetensors_find(&st, "lm_head.weight") != NULL, !tied);
        lj_safetensors_close(&st);
        free(file);
    } else {
        char *file = tmp_path("rt/model.safetensors.index.json");
        char *text;
        assert_int_equal(lj_file_read_all(file, &text, NULL), LJ_OK);
        cJSON *root = cJSON_Parse(text);
        assert_non_null(root);
        const cJSON *total = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "metadata"), "total_size");
        assert_true(cJSON_IsNumber(total));
        assert_true(total->valuedouble == (double)n * (dtype == LJ_DTYPE_F32 ? 4 : 2));
        const cJSON *map = cJSON_GetObjectItem(root, "weight_map");
        assert_int_equal(cJSON_GetArraySize(map), lo.count);
        char first[64], last[64];
        snprintf(first, sizeof first, "model-%05d-of-%05d.safetensors", 1, want_shards);
        snprintf(last, sizeof last, "model-%05d-of-%05d.safetensors", want_shards, want_shards);
        assert_string_equal(cJSON_GetObjectItem(map, "model.embed_tokens.weight")->valuestring, first);
        assert_string_equal(cJSON_GetObjectItem(map, lo.params[lo.count - 1].name)->valuestring, last);
        cJSON_Delete(root);
        free(text);
        free(file);
    }
    lj_param_layout_free(&lo);
    free(p);
    free(q);
    free(dir);
}

static void test_round_trip_f32_untied(void **state) { (void)state; round_trip(0, LJ_DTYPE_F32, 0, 0); }
static void test_round_trip_f32_tied(void **state) { (void)state; round_trip(1, LJ_DTYPE_F32, 1ull << 30, 0); }
static void test_round_trip_bf16(void **state) { (void)state; round_trip(0, LJ_DTYPE_BF16, 0, 0); }

/* Shards the greedy split should give: a shard takes tensors in layout order until the next
 * one would overflow it (5 for the untied tiny model at 8000 bytes in F32). */
static int expected_shards(const lj_model_config *c, uint64_t limit, size_t esize) {
    lj_param_layout lo;
    lj_param_layout_init(&lo, c);
    int shards = 0;
    uint64_t cur = 0;
    for (int i = 0; i < lo.count; i++) {
        uint64_t b = (uint64_t)lo.params[i].numel * esize;
        if (i == 0 || (cur > 0 && cur + b > limit)) shards++, cur = 0;
        cur += b;
    }
    lj_param_layout_free(&lo);
    return shards;
}

static void test_round_trip_sharded(void **state) {
    (void)state;
    lj_model_config c = tiny_config(0);
    int k = expected_shards(&c, 8000, 4);
    assert_int_equal(k, 5);
    round_trip(0, LJ_DTYPE_F32, 8000, k);
    c = tiny_config(1);
    round_trip(1, LJ_DTYPE_BF16, 4000, expected_shards(&c, 4000, 2));
}

/* Exporting over an old checkpoint replaces it whole (no stale shards); other data is refused. */
static void test_export_replaces(void **state) {
    (void)state;
    lj_model_config c = tiny_config(0);
    float *a = random_params(&c, 1), *b = random_params(&c, 2);
    int64_t n = lj_config_num_params(&c);
    char *dir = tmp_path("replace");
    assert_int_equal(lj_hf_export(dir, &c, a, LJ_DTYPE_F32, 8000), LJ_OK);
    assert_true(count_entries(dir, "-of-") >= 3);
    char *slash = tmp_path("replace/");
    assert_int_equal(lj_hf_export(slash, &c, b, LJ_DTYPE_F32, 0), LJ_OK);
    assert_int_equal(count_entries(dir, "-of-"), 0);
    assert_false(file_exists(dir, "model.safetensors.index.json"));
    assert_int_equal(count_entries(g_dir, ".tmp."), 0);
    assert_int_equal(count_entries(g_dir, ".old."), 0);
    float *q = lj_calloc((size_t)n, sizeof(float));
    assert_int_equal(lj_hf_import(dir, &c, q), LJ_OK);
    assert_memory_equal(q, b, (size_t)n * sizeof(float));

    char *other = tmp_path("notes");
    assert_int_equal(lj_mkdir_p(other), LJ_OK);
    char *note = tmp_path("notes/todo.txt");
    assert_int_equal(lj_file_write_atomic(note, "keep me", 7), LJ_OK);
    expect_error(lj_hf_export(other, &c, a, LJ_DTYPE_F32, 0), LJ_ERR_ARG, other, "refusing", NULL);
    assert_true(file_exists(other, "todo.txt"));
    expect_error(lj_hf_export(dir, &c, a, LJ_DTYPE_I32, 0), LJ_ERR_ARG, "I32", NULL, NULL);
    free(other);
    free(note);
    free(slash);
    free(dir);
    free(a);
    free(b);
    free(q);
}

/* Writes the layout's tensors of `c` as F32 to DIR/model.safetensors, with tensor `skip` left
 * out, tensor `retype` written as I32, and `extra` tensors appended. */
static char *write_custom(const char *name, const lj_model_config *c, const float *p, const char *skip, const char *retype,
                          const lj_st_tensor *extra, int n_extra) {
    char *dir = tmp_path(name);
    assert_int_equal(lj_mkdir_p(dir), LJ_OK);
    lj_param_layout lo;
    lj_param_layout_init(&lo, c);
    lj_st_tensor *ts = lj_calloc((size_t)(lo.count + n_extra), sizeof(lj_st_tensor));
    int n = 0;
    for (int i = 0; i < lo.count; i++) {
        const lj_param_info *pi = &lo.params[i];
        if (skip && strcmp(pi->name, skip) == 0) continue;
        ts[n] = (lj_st_tensor){.name = pi->name, .dtype = LJ_ST_F32, .ndim = pi->ndim, .shape = {pi->shape[0], pi->shape[1]},
                               .data = p + pi->offset};
        if (retype && strcmp(pi->name, retype) == 0) ts[n].dtype = LJ_ST_I32;
        n++;
    }
    for (int i = 0; i < n_extra; i++) ts[n++] = extra[i];
    char *file = lj_malloc(strlen(dir) + 32);
    sprintf(file, "%s/model.safetensors", dir);
    const char *k[] = {"format"}, *v[] = {"pt"};
    assert_int_equal(lj_safetensors_write(file, ts, n, k, v, 1), LJ_OK);
    free(file);
    free(ts);
    lj_param_layout_free(&lo);
    return dir;
}

/* A tied model accepts a stored lm_head.weight of the right shape (ignored) and skips rotary
 * buffers; a plain .safetensors path also works. Other extras: test_bad_dropped_tensors. */
static void test_import_extras(void **state) {
    (void)state;
    lj_model_config c = tiny_config(1);
    float *p = random_params(&c, 5);
    int64_t n = lj_config_num_params(&c);
    float inv_freq[2] = {1, 2};
    lj_st_tensor extra[2] = {
        {.name = "lm_head.weight", .dtype = LJ_ST_F32, .ndim = 2, .shape = {96, 16}, .data = p},
        {.name = "model.layers.0.self_attn.rotary_emb.inv_freq", .dtype = LJ_ST_F32, .ndim = 1, .shape = {2}, .data = inv_freq},
    };
    char *dir = write_custom("extras", &c, p, NULL, NULL, extra, 2);
    float *q = lj_calloc((size_t)n, sizeof(float));
    assert_int_equal(lj_hf_import(dir, &c, q), LJ_OK);
    assert_memory_equal(q, p, (size_t)n * sizeof(float));
    char *file = tmp_path("extras/model.safetensors");
    memset(q, 0, (size_t)n * sizeof(float));
    assert_int_equal(lj_hf_import(file, &c, q), LJ_OK);
    assert_memory_equal(q, p, (size_t)n * sizeof(float));
    free(file);
    free(dir);
    free(p);
    free(q);
}

/* ---- bad input ---------------------------------------------------------------------- */

/* A checkpoint from another shape: the first mismatching tensor is named with both shapes. */
static void test_bad_wrong_shape(void **state) {
    (void)state;
    lj_model_config c = tiny_config(0);
    float *p = random_params(&c, 3);
    char *dir = tmp_path("shape");
    assert_int_equal(lj_hf_export(dir, &c, p, LJ_DTYPE_F32, 0), LJ_OK);
    lj_model_config other = c;
    other.intermediate_size = 48;
    int64_t n = lj_config_num_params(&other);
    float *q = lj_malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) q[i] = 7.0f;
    expect_error(lj_hf_import(dir, &other, q), LJ_ERR_FORMAT, "shape/model.safetensors",
                 "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [40, 16], the config needs [48, 16]", NULL);
    for (int64_t i = 0; i < n; i++) assert_true(q[i] == 7.0f); /* nothing written on error */
    /* Sharded: the message names the shard. */
    assert_int_equal(lj_hf_export(dir, &c, p, LJ_DTYPE_BF16, 4000), LJ_OK);
    expect_error(lj_hf_import(dir, &other, q), LJ_ERR_FORMAT, "-of-", "'model.layers.0.mlp.gate_proj.weight' has shape", NULL);
    free(dir);
    free(p);
    free(q);
}

/* Flips one byte inside tensor `name` of the safetensors file `path` (8-byte header length, the
 * JSON header, then the data). */
static void flip_tensor_byte(const char *path, const char *name) {
    lj_safetensors st;
    assert_int_equal(lj_safetensors_open(&st, path), LJ_OK);
    const lj_st_entry *e = lj_safetensors_find(&st, name);
    assert_non_null(e);
    const uint64_t begin = e->begin;
    lj_safetensors_close(&st);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    uint64_t n = 0;
    assert_int_equal(fread(&n, 8, 1, f), 1);
    assert_int_equal(fseek(f, (long)(8 + n + begin + 3), SEEK_SET), 0);
    const int c = fgetc(f);
    assert_int_equal(fseek(f, (long)(8 + n + begin + 3), SEEK_SET), 0);
    fputc(c ^ 0x10, f);
    fclose(f);
}

/* A damaged export (one flipped byte in a tensor) is refused by its checksums sidecar, naming the
 * file and the tensor; single-file and sharded. */
static void test_bad_damaged_export(void **state) {
    (void)state;
    lj_model_config c = tiny_config(0);
    float *p = random_params(&c, 5);
    const int64_t n = lj_config_num_params(&c);
    float *q = lj_malloc((size_t)n * sizeof(float));
    char *dir = tmp_path("damaged");
    assert_int_equal(lj_hf_export(dir, &c, p, LJ_DTYPE_BF16, 0), LJ_OK);
    assert_true(file_exists(dir, LJ_HF_CHECKSUMS_FILE));
    assert_int_equal(lj_hf_import(dir, &c, q), LJ_OK);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    flip_tensor_byte(path, "model.layers.1.self_attn.k_proj.weight");
    expect_error(lj_hf_import(dir, &c, q), LJ_ERR_FORMAT, "damaged/model.safetensors",
                 "tensor 'model.layers.1.self_attn.k_proj.weight' fails its checksum", LJ_HF_CHECKSUMS_FILE);
    /* sharded: the shard is named */
    assert_int_equal(lj_hf_export(dir, &c, p, LJ_DTYPE_F32, 4000), LJ_OK);
    assert_int_equal(lj_hf_import(dir, &c, q), LJ_OK);
    snprintf(path, sizeof path, "%s/model-00001-of-%05d.safetensors", dir, count_entries(dir, "-of-"));
    flip_tensor_byte(path, "model.embed_tokens.weight");
    expect_error(lj_hf_import(dir, &c, q), LJ_ERR_FORMAT, "model-00001-of-",
                 "tensor 'model.embed_tokens.weight' fails its checksum", NULL);
    free(dir);
    free(p);
    free(q);
}

static void test_bad_dtype_and_missing(void **state) {
    (void)state;
    lj_model_config c = tiny_config(0);
    float *p = random_params(&c, 4);
    float *q = lj_malloc((size_t)lj_config_num_params(&c) * sizeof(float));
    char *dir = write_custom("dtype", &c, p, NULL, "model.norm.weight", NULL, 0);
    expect_error(lj_hf_import(dir, &c, q), LJ_ERR_FORMAT, "dtype/model.safetensors", "tensor 'model.norm.weight' has dtype I32",
                 NULL);
    free(dir);
    dir = write_custom("missing", &c, p, "model.layers.1.self_attn.k_proj.weight", NULL, NULL, 0);
    expect_error(lj_hf_import(dir, &c, q), LJ_ERR_FORMAT, "missing/model.safetensors",
                 "tensor 'model.layers.1.self_attn.k_proj.weight' is missing", NULL);
    free(dir);
    /* An untied config on a tied checkpoint: lm_head.weight is missing, with the reason. */
    lj_model_config tied = tiny_config(1);
    dir = write_custom("tied", &tied, p, NULL, NULL, NULL, 0);
    expect_error(lj_hf_import(dir, &c, q), LJ_ERR_FORMAT, "tied/model.safetensors", "'lm_head.weight' is missing",
                 "tie_word_embeddings false");
    free(dir);
    /* A tied config with a stored lm_head of the wrong shape. */
    lj_st_tensor bad_head = {.name = "lm_head.weight", .dtype = LJ_ST_F32, .ndim = 2, .shape = {16, 96}, .data = p};
    dir = write_custom("head", &tied, p, NULL, NULL, &bad_head, 1);
    expect_error(lj_hf_import(dir, &tied, q), LJ_ERR_FORMAT, "head/model.safetensors", "'lm_head.weight' has shape [16, 96]",
                 "[96, 16]");
    free(dir);
    dir = tmp_path("empty");
    assert_int_equal(lj_mkdir_p(dir), LJ_OK);
    expect_error(lj_hf_import(dir, &c, q), LJ_ERR_IO, dir, "model.safetensors", NULL);
    free(dir);
    free(p);
    free(q);
}

static void test_bad_sharded_index(void **state) {
    (void)state;
    lj_model_config c = tiny_config(0);
    float *p = random_params(&c, 6);
    float *q = lj_malloc((size_t)lj_config_num_params(&c) * sizeof(float));
    char *dir = tmp_path("idx");
    char *index = tmp_path("idx/model.safetensors.index.json");
    assert_int_equal(lj_hf_export(dir, &c, p, LJ_DTYPE_F32, 8000), LJ_OK);
    char *text;
    assert_int_equal(lj_file_read_all(index, &text, NULL), LJ_OK);
    cJSON *root = cJSON_Parse(text);
    free(text);
    cJSON *map = cJSON_GetObjectItem(root, "weight_map");
    /* The index sends a tensor to a shard that does not hold it. */
    const char *shard1 = cJSON_GetObjectItem(map, "model.embed_tokens.weight")->valuestring;
    cJSON_ReplaceItemInObject(map, "model.norm.weight", cJSON_CreateString(shard1));
    text = cJSON_Print(root);
    assert_int_equal(lj_file_write_atomic(index, text, strlen(text)), LJ_OK);
    free(text);
    expect_error(lj_hf_import(dir, &c, q), LJ_ERR_FORMAT, "model-00001-of-", "'model.norm.weight' is missing", NULL);
    /* The index lacks a tensor. */
    cJSON_DeleteItemFromObject(map, "model.norm.weight");
    text = cJSON_Print(root);
    assert_int_equal(lj_file_write_atomic(index, text, strlen(text)), LJ_OK);
    free(text);
    expect_error(lj_hf_import(dir, &c, q), LJ_ERR_FORMAT, index, "'model.norm.weight' is missing", NULL);
    /* A file name that leaves the directory. */
    cJSON_AddItemToObject(map, "model.norm.weight", cJSON_CreateString("../elsewhere.safetensors"));
    text = cJSON_Print(root);
    assert_int_equal(lj_file_write_atomic(index, text, strlen(text)), LJ_OK);
    free(text);
    expect_error(lj_hf_import(dir, &c, q), LJ_ERR_FORMAT, index, "'model.norm.weight'", "not a file name");
    /* Not JSON. */
    assert_int_equal(lj_file_write_atomic(index, "{\"weight_map\": ", 15), LJ_OK);
    expect_error(lj_hf_import(dir, &c, q), LJ_ERR_FORMAT, index, "not a JSON object", NULL);
    cJSON_Delete(root);
    free(index);
    free(dir);
    free(p);
    free(q);
}

/* No checkpoint loads with tensors dropped or missing: a Qwen2 checkpoint under a Llama config
 * (its biases would be dropped), a Qwen2 config on a checkpoint from before biases existed, a
 * Qwen3 checkpoint without its QK-norm weights; each names the tensor. A Qwen2 and a Qwen3
 * checkpoint load back bit for bit. */
static void test_bad_dropped_tensors(void **state) {
    (void)state;
    lj_model_config llama = tiny_config(0), qwen2 = llama, qwen3 = llama;
    qwen2.family = LJ_FAMILY_QWEN2, qwen2.qkv_bias = 1;
    qwen3.family = LJ_FAMILY_QWEN3, qwen3.qk_norm = 1;
    float *p2 = random_params(&qwen2, 8), *p3 = random_params(&qwen3, 9);
    float *q = lj_malloc((size_t)lj_config_num_params(&qwen2) * sizeof(float));
    char *dir = write_custom("qwen2", &qwen2, p2, NULL, NULL, NULL, 0);
    expect_error(lj_hf_import(dir, &llama, q), LJ_ERR_FORMAT, "qwen2/model.safetensors",
                 "tensor 'model.layers.0.self_attn.q_proj.bias' is not part of this model", "\"llama\"");
    assert_int_equal(lj_hf_import(dir, &qwen2, q), LJ_OK);
    assert_memory_equal(q, p2, (size_t)lj_config_num_params(&qwen2) * sizeof(float));
    free(dir);
    dir = write_custom("nobias", &qwen2, p2, "model.layers.1.self_attn.v_proj.bias", NULL, NULL, 0);
    expect_error(lj_hf_import(dir, &qwen2, q), LJ_ERR_FORMAT, "nobias/model.safetensors",
                 "tensor 'model.layers.1.self_attn.v_proj.bias' is missing", NULL);
    free(dir);
    dir = write_custom("nonorm", &qwen3, p3, "model.layers.0.self_attn.k_norm.weight", NULL, NULL, 0);
    expect_error(lj_hf_import(dir, &qwen3, q), LJ_ERR_FORMAT, "nonorm/model.safetensors",
                 "tensor 'model.layers.0.self_attn.k_norm.weight' is missing", NULL);
    free(dir);
    /* export -> import of Qwen3 (sharded): the layout's names and order */
    dir = tmp_path("qwen3");
    assert_int_equal(lj_hf_export(dir, &qwen3, p3, LJ_DTYPE_F32, 4000), LJ_OK);
    lj_model_config back;
    assert_int_equal(lj_hf_load_config(dir, &back), LJ_OK);
    assert_true(back.family == LJ_FAMILY_QWEN3 && back.qk_norm && !back.qkv_bias);
    assert_int_equal(lj_hf_import(dir, &back, q), LJ_OK);
    assert_memory_equal(q, p3, (size_t)lj_config_num_params(&qwen3) * sizeof(float));
    free(dir);
    lj_st_tensor odd = {.name = "model.something_else", .dtype = LJ_ST_F32, .ndim = 1, .shape = {1}, .data = p2};
    dir = write_custom("odd", &llama, p2, NULL, NULL, &odd, 1);
    expect_error(lj_hf_import(dir, &llama, q), LJ_ERR_FORMAT, "odd/model.safetensors", "'model.something_else'",
                 "not part of this model");
    free(dir);
    free(p2);
    free(p3);
    free(q);
}

/* A config.json without hidden_size is rejected with the file and the field named. */
static void test_bad_config_missing_hidden_size(void **state) {
    (void)state;
    lj_model_config c = tiny_config(0), got;
    char *dir = tmp_path("cfg");
    char *path = tmp_path("cfg/config.json");
    assert_int_equal(lj_mkdir_p(dir), LJ_OK);
    assert_int_equal(lj_config_save(&c, path, "float32"), LJ_OK);
    assert_int_equal(lj_hf_load_config(dir, &got), LJ_OK);
    char *text;
    assert_int_equal(lj_file_read_all(path, &text, NULL), LJ_OK);
    cJSON *root = cJSON_Parse(text);
    free(text);
    cJSON_DeleteItemFromObject(root, "hidden_size");
    text = cJSON_Print(root);
    assert_int_equal(lj_file_write_atomic(path, text, strlen(text)), LJ_OK);
    free(text);
    cJSON_Delete(root);
    expect_error(lj_hf_load_config(dir, &got), LJ_ERR_FORMAT, path, "hidden_size", NULL);
    free(path);
    free(dir);
}

int main(void) {
    const char *filter = getenv("LJ_TEST_FILTER");
    if (filter && filter[0]) cmocka_set_test_filter(filter);
    lj_log_set_quiet(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_f32_untied),
        cmocka_unit_test(test_round_trip_f32_tied),
        cmocka_unit_test(test_round_trip_bf16),
        cmocka_unit_test(test_round_trip_sharded),
        cmocka_unit_test(test_export_replaces),
        cmocka_unit_test(test_import_extras),
        cmocka_unit_test(test_bad_wrong_shape),
        cmocka_unit_test(test_bad_dtype_and_missing),
        cmocka_unit_test(test_bad_damaged_export),
        cmocka_unit_test(test_bad_sharded_index),
        cmocka_unit_test(test_bad_dropped_tensors),
        cmocka_unit_test(test_bad_config_missing_hidden_size),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
