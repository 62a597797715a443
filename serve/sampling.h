/* sampling.h: the next token from a row of logits, per request: vLLM's sampling parameters
 * (vllm/sampling_params.py; the OpenAI fields and vLLM's extras). The order is vLLM V1's
 * sampler: raw logprobs (before anything else, vLLM's default logprobs mode "raw_logprobs"),
 * then min_tokens (stop ids masked), the penalties (repetition over prompt and output,
 * presence and frequency over the output: vllm/model_executor/layers/utils.py
 * apply_penalties), then greedy at temperature 0, else temperature, top-k, top-p, min-p
 * (vllm/v1/sample/ops/topk_topp_sampler.py, min_p as in its sampler) and a draw from the
 * request's own generator (seeded: reproducible). */
#ifndef LJ_SERVE_SAMPLING_H
#define LJ_SERVE_SAMPLING_H

#include "base/base.h"

#define LJ_SAMPLING_MAX_STOP_IDS 64
#define LJ_SAMPLING_MAX_LOGPROBS 20 /* OpenAI's top_logprobs limit */

typedef struct {
    double temperature;        /* 0: greedy */
    double top_p;              /* (0, 1] */
    int top_k;                 /* 0 or -1: all */
    double min_p;              /* [0, 1] */
    double presence_penalty, frequency_penalty; /* [-2, 2] */
    double repetition_penalty; /* > 0; 1: none */
    int has_seed;
    uint64_t seed;
    int max_tokens;            /* >= 1 */
    int min_tokens;            /* >= 0 */
    int ignore_eos;
    int logprobs;              /* -1: none; 0..LJ_SAMPLING_MAX_LOGPROBS: the sampled token's and this many top ones */
    int num_stop_ids;
    int32_t stop_ids[LJ_SAMPLING_MAX_STOP_IDS];
} lj_sampling_params;

/* OpenAI's defaults: temperature 1, top_p 1, no top-k/min-p/penalties, max_tokens 16. */
void lj_sampling_params_default(lj_sampling_params *p);

/* What a draw returns besides the token. */
typedef struct {
    float logprob;                 /* of the chosen token under the raw distribution */
    int n_top;
    int32_t top_ids[LJ_SAMPLING_MAX_LOGPROBS];
    float top_logprobs[LJ_SAMPLING_MAX_LOGPROBS];
} lj_sample_info;

/* Scratch of one sampler (V entries). */
typedef struct {
    int V;
    float *work;
    int32_t *order;
    uint32_t *counts; /* output-token counts of the sequence */
    uint8_t *seen;    /* prompt-or-output presence */
} lj_sampler;

void lj_sampler_init(lj_sampler *s, int V);
void lj_sampler_free(lj_sampler *s);

/* The next token of a sequence from logits[V] (host f32, not modified): prompt ids[0..np) and
 * output ids out[0..no), the request's parameters p, its generator rng (advanced by one draw when
 * temperature > 0), eos ids eos[0..neos) (masked while no < min_tokens, as the stop ids). info,
 * if not NULL, receives the raw logprobs (p->logprobs >= 0). */
int32_t lj_sample(lj_sampler *s, const float *logits, const lj_sampling_params *p, const int32_t *prompt, int np,
                  const int32_t *out, int no, const int32_t *eos, int neos, lj_rng *rng, lj_sample_info *info);

#endif
