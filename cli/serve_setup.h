/* serve_setup.h: the model and engine behind `ljperf serve`, set up from vLLM's engine flags
 * (cli/serve.c), shared with `ljperf bench serve --offline` (cli/bench_serve.c), which drives
 * the same engine in-process. */
#ifndef LJ_CLI_SERVE_SETUP_H
#define LJ_CLI_SERVE_SETUP_H

#include "cli/cli.h"
#include "data/tokenizer.h"
#include "serve/http.h"

/* The engine flags (vLLM's names; docs/serving.md). */
typedef struct {
    const char *load, *tokenizer, *device, *served_model_name, *kv_cache_dtype, *load_format, *quantization;
    int max_model_len, max_num_seqs, max_num_batched_tokens, kv_cache_tokens, prefix_caching;
    int max_model_len_given, kv_cache_tokens_given; /* the flags were given (0 is then a value to refuse) */
    int max_waiting_requests;
    int enforce_eager; /* vLLM's --enforce-eager: no CUDA graphs for decode */
    double gpu_memory_utilization;
} lj_cli_serve_args;

/* The defaults of `ljperf serve`. */
void lj_cli_serve_args_default(lj_cli_serve_args *a);
/* The flag rows of *a into rows[] (at least LJ_CLI_SERVE_FLAGS); returns their count. */
#define LJ_CLI_SERVE_FLAGS 20
int lj_cli_serve_flag_rows(lj_cli_serve_args *a, lj_flag *rows);
/* LJ_OK, or LJ_ERR_ARG with a message naming the flag, its value and what is expected. */
lj_status lj_cli_serve_args_check(const lj_cli_serve_args *a);
/* --kv-cache-dtype and --quantization as the engine's values (after lj_cli_serve_args_check). */
lj_serve_kv_dtype lj_cli_serve_kv_dtype(const lj_cli_serve_args *a);
lj_serve_quantization lj_cli_serve_quantization(const lj_cli_serve_args *a);

/* What a server runs: the weights, the forward's buffers, the engine, the tokenizer. */
typedef struct {
    char dir[LJ_PATH_MAX], tokpath[LJ_PATH_MAX];
    lj_model_config cfg;
    const lj_ops *ops;
    lj_tokenizer *tok;
    lj_model m;
    lj_plan plan;
    int have_model;
    lj_serve_model sm;
    lj_serve_engine *engine;
    char bos[256], eos[256];
    char *tmpl;
    lj_api_model am;
    int num_blocks;
} lj_cli_served;

/* Resolves the model and the device, loads the tokenizer (step 1: before the server listens). */
lj_status lj_cli_serve_prepare(const lj_cli_serve_args *a, lj_cli_served *sv);
/* Loads the weights, sizes the KV cache and starts the engine (step 2). */
lj_status lj_cli_serve_open(const lj_cli_serve_args *a, lj_cli_served *sv);
/* Stops the engine (drain: finish the requests in flight) and frees everything. */
void lj_cli_serve_close(lj_cli_served *sv, int drain);

/* Reads the weights of the HF directory that `load` names (lj_cli_model_dir: a checkpoint root's
 * latest iteration) and swaps them into the running engine between two steps
 * (lj_serve_engine_update_weights). Errors: the import's, or LJ_ERR_ARG when its config.json
 * has another shape. */
lj_status lj_cli_serve_update_weights(lj_cli_served *sv, const char *load, char *dir_out);

#endif
