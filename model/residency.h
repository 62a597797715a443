/* residency.h: where a model's parameters and gradients live while it computes. The forward and
 * backward loops (model.c) call this small interface at fixed points, around each unit they run,
 * and never mention how the state is parallelised:
 *
 *   lj_residency_fetch(m, u, dir)   before unit u reads its weights (dir: +1 forward, -1 backward:
 *                                   which units come next, for prefetching)
 *   lj_residency_release(m, u)      after its last read in this pass
 *   lj_residency_grad_begin(m, u)   before its backward writes weight gradients; returns how the
 *                                   ops must write them (accumulate, or overwrite a buffer that
 *                                   was not zeroed)
 *   lj_residency_grad_end(m, u)     after its backward (the gradients may leave: a reduction)
 *   lj_residency_pass_end(m)        at the end of a forward or backward pass
 *
 * Units, in forward order: LJ_UNIT_EMBED (the embedding), layers 0..L-1, L (the final norm),
 * L + 1 (lm_head; with tied embeddings it is the embedding's unit, and its gradient is held
 * from the loss to the embedding backward).
 *
 * Implementations, one per residency mode:
 *   - replicated (m->residency == NULL, this file): every parameter and gradient at its offset
 *     in the flat buffers m->params and m->grads (no ZeRO, ZeRO-1, and every CPU/GPU run on one
 *     rank); the hooks do nothing and weight gradients accumulate;
 *   - ZeRO-2 and ZeRO-3 over several ranks (parallel/zero3.h): gather slots with prefetch and
 *     per-layer gradient slots reduced to the shard owners;
 *   - serving under --quantization fp8 (serve/weights.h): the block linears' weights as FP8
 *     codes in the linear module, the other parameters compact in m->params.
 * Optimizer offload changes where the optimizer state lives, not where the loop reads: it is
 * the optimizer's (optim/offload.h).
 */
#ifndef LJ_RESIDENCY_H
#define LJ_RESIDENCY_H

#include "model/buffers.h"
#include "ops/ops.h"

typedef struct lj_model lj_model;

enum { LJ_UNIT_EMBED = -1 }; /* then layers 0..L-1, the final norm L, lm_head L + 1 */

/* A residency mode: every entry is required. `param` and `grad` return where parameter `index`
 * (layout order, config/config.h) and its gradient are while the unit holding it is fetched /
 * between grad_begin and grad_end. */
typedef struct {
    const char *name;
    void (*fetch)(lj_model *m, int unit, int direction);
    void (*release)(lj_model *m, int unit);
    lj_grad_mode (*grad_begin)(lj_model *m, int unit);
    void (*grad_end)(lj_model *m, int unit);
    void (*pass_end)(lj_model *m);
    /* A new gradient accumulation starts (lj_model_zero_grads). */
    void (*grads_zeroed)(lj_model *m);
    void *(*param)(const lj_model *m, int index);
    void *(*grad)(const lj_model *m, int index);
    /* Host f32 values [offset, offset + n) of the flat parameter buffer into this rank's f32 shard
     * `dst` (host memory when dst_host), and cast to the param dtype into cast_dst (or NULL). dst
     * NULL: the model keeps no f32 master weights (an inference model): cast_dst alone. */
    void (*upload_shard)(const lj_model *m, float *dst, const float *src, int64_t offset, int64_t n, void *cast_dst,
                         int dst_host);
    /* 1 when the parameters themselves are sharded (m->params is this rank's shard only). */
    int shards_params;
    /* Its plan entry (model/buffers.h): declares the device buffers the mode keeps besides the
     * flat parameter and gradient buffers (e.g. gather and gradient slots) and binds them. */
    void (*plan)(lj_model *m, lj_buffer_walker *w);
    void (*destroy)(lj_model *m);
} lj_residency;

#endif
