/* sampling.c: logits processors and the draw of serve/sampling.h. */
#define _GNU_SOURCE /* qsort_r */
#include "serve/sampling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void lj_sampling_params_default(lj_sampling_params *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 1.0;
    p->top_p = 1.0;
    p->repetition_penalty = 1.0;
    p->max_tokens = 16;
    p->logprobs = -1;
}

void lj_sampler_init(lj_sampler *s, int V) {
    s->V = V;
    s->work = lj_malloc((size_t)V * sizeof(float));
    s->order = lj_malloc((size_t)V * sizeof(int32_t));
    s->counts = lj_calloc((size_t)V, sizeof(uint32_t));
    s->seen = lj_calloc((size_t)V, 1);
}

void lj_sampler_free(lj_sampler *s) {
    free(s->work);
    free(s->order);
    free(s->counts);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

static int by_value_desc(const void *a, const void *b, void *keys) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const float u = ((const float *)keys)[x], v = ((const float *)keys)[y];
    if (u != v) return u < v ? 1 : -1;
    return (x > y) - (x < y);
}

/* The k largest of w[0..V) into order[0..k), by value descending then id (partial selection: a
 * full sort only when k is large). */
static int top_ids(const float *w, int V, int k, int32_t *order) {
    if (k <= 0 || k > V) k = V;
    if (k <= 64) {
        int n = 0;
        for (int i = 0; i < V; i++) {
            if (n == k && !(w[i] > w[order[n - 1]])) continue;
            int j = n < k ? n++ : k - 1;
            while (j > 0 && w[order[j - 1]] < w[i]) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = i;
        }
        return n;
    }
    for (int i = 0; i < V; i++) order[i] = i;
    qsort_r(order, (size_t)V, sizeof *order, by_value_desc, (void *)w);
    return k;
}

int32_t lj_sample(lj_sampler *s, const float *logits, const lj_sampling_params *p, const int32_t *prompt, int np,
                  const int32_t *out, int no, const int32_t *eos, int neos, lj_rng *rng, lj_sample_info *info) {
    const int V = s->V;
    float *w = s->work;
    memcpy(w, logits, (size_t)V * sizeof(float));
    float lse = 0.0f;
    if (info && p->logprobs >= 0) { /* raw logprobs: log_softmax of the logits as they came */
        float mx = -INFINITY;
        for (int i = 0; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
        double sum = 0.0;
        for (int i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
        lse = mx + (float)log(sum);
        info->n_top = p->logprobs > 0 ? top_ids(logits, V, p->logprobs, s->order) : 0;
        for (int i = 0; i < info->n_top; i++) {
            info->top_ids[i] = s->order[i];
            info->top_logprobs[i] = logits[s->order[i]] - lse;
        }
    }
    /* min_tokens: no EOS or stop id before it */
    if (no < p->min_tokens) {
        if (!p->ignore_eos)
            for (int i = 0; i < neos; i++)
                if (eos[i] >= 0 && eos[i] < V) w[eos[i]] = -INFINITY;
        for (int i = 0; i < p->num_stop_ids; i++)
            if (p->stop_ids[i] >= 0 && p->stop_ids[i] < V) w[p->stop_ids[i]] = -INFINITY;
    }
    /* penalties */
    const int rep = p->repetition_penalty != 1.0, freq = p->frequency_penalty != 0.0 || p->presence_penalty != 0.0;
    if (rep || freq) {
        for (int i = 0; i < no; i++) s->counts[out[i]]++;
        if (rep) {
            for (int i = 0; i < np; i++) s->seen[prompt[i]] = 1;
            for (int i = 0; i < no; i++) s->seen[out[i]] = 1;
        }
        const float r = (float)p->repetition_penalty;
        /* visit each touched id once: through the sequences themselves */
        for (int pass = 0; pass < 2; pass++) {
            const int32_t *ids = pass ? out : prompt;
            const int n = pass ? no : np;
            for (int i = 0; i < n; i++) {
                const int32_t t = ids[i];
                if (rep && s->seen[t]) {
                    w[t] = w[t] > 0 ? w[t] / r : w[t] * r;
                    s->seen[t] = 0;
                }
                if (pass && freq && s->counts[t]) {
                    w[t] -= (float)p->frequency_penalty * (float)s->counts[t] + (float)p->presence_penalty;
                    s->counts[t] = 0;
                }
            }
        }
    }
    int32_t token;
    if (p->temperature <= 0.0) {
        token = 0;
        for (int i = 1; i < V; i++)
            if (w[i] > w[token]) token = i;
    } else {
        const float inv_t = (float)(1.0 / p->temperature);
        for (int i = 0; i < V; i++) w[i] *= inv_t;
        const int restrict_k = p->top_k > 0 && p->top_k < V;
        const int need_sort = restrict_k || p->top_p < 1.0 || p->min_p > 0.0;
        float mx = -INFINITY;
        for (int i = 0; i < V; i++) mx = w[i] > mx ? w[i] : mx;
        if (!need_sort) {
            double sum = 0.0;
            for (int i = 0; i < V; i++) sum += (w[i] = (float)exp((double)w[i] - mx));
            const double u = lj_rng_uniform(rng) * sum;
            double acc = 0.0;
            token = -1;
            for (int i = 0; i < V && token < 0; i++)
                if (u < (acc += w[i])) token = i;
            if (token < 0) /* rounding at the very end: the last token of non-zero probability */
                for (int i = V - 1; i >= 0 && token < 0; i--)
                    if (w[i] > 0) token = i;
        } else {
            const int n = top_ids(w, V, restrict_k ? p->top_k : V, s->order);
            /* probabilities over the kept set, in descending order */
            double sum = 0.0;
            for (int i = 0; i < n; i++) sum += exp((double)w[s->order[i]] - mx);
            int keep = n;
            if (p->min_p > 0.0) { /* drop tokens with prob < min_p * max prob */
                const double thr = log(p->min_p);
                for (int i = 0; i < keep; i++)
                    if ((double)w[s->order[i]] - mx < thr) { keep = i > 0 ? i : 1; break; }
            }
            if (p->top_p < 1.0) {
                double mass = 0.0;
                for (int i = 0; i < keep; i++) {
                    mass += exp((double)w[s->order[i]] - mx) / sum;
                    if (mass >= p->top_p) { keep = i + 1; break; }
                }
            }
            double total = 0.0;
            for (int i = 0; i < keep; i++) total += exp((double)w[s->order[i]] - mx);
            const double u = lj_rng_uniform(rng) * total;
            double acc = 0.0;
            token = s->order[keep - 1];
            for (int i = 0; i < keep; i++)
                if (u < (acc += exp((double)w[s->order[i]] - mx))) { token = s->order[i]; break; }
        }
    }
    if (info && p->logprobs >= 0) info->logprob = logits[token] - lse;
    return token;
}
