/* docmask.h: document masking inside packed sequences, Megatron-LM's --reset-position-ids,
 * --reset-attention-mask and --eod-mask-loss: from a sequence's input tokens and the
 * end-of-document id, the per-token positions, the first key each query may attend to, and
 * the loss mask.
 *
 * Source: Megatron-LM, megatron/core/datasets/gpt_dataset.py, _get_ltor_masks_and_position_ids
 * (the sample's tokens are text[:-1], its labels text[1:]). For each EOD at position i of the
 * inputs: attention_mask[(i+1):, :(i+1)] = 0 (the EOD belongs to the document it ends; the next
 * document starts at i+1), position_ids[(i+1):] restart at 0, and with --eod-mask-loss
 * loss_mask[tokens == eod] = 0, i.e. the loss of the position whose INPUT is the EOD (its target
 * is the next document's first token) is masked; the EOD is still learned as a target. */
#ifndef LJ_DATA_DOCMASK_H
#define LJ_DATA_DOCMASK_H

#include <stdint.h>

typedef struct {
    int reset_position_ids;   /* --reset-position-ids: RoPE positions restart at 0 after each EOD */
    int reset_attention_mask; /* --reset-attention-mask: attention does not cross an EOD */
    int eod_mask_loss;        /* --eod-mask-loss: no loss where the input token is the EOD */
    int32_t eod_token;        /* the end-of-document id (Megatron's tokenizer.eod; ljperf's EOS) */
} lj_doc_mask;

/* 1 when any of the three is on (the default run has none: no per-token arrays exist). */
static inline int lj_doc_mask_any(const lj_doc_mask *d) {
    return d->reset_position_ids || d->reset_attention_mask || d->eod_mask_loss;
}

/* One sequence of T input tokens inputs[T] (i32):
 *   - position_ids[T] (i32, when not NULL): t minus the start of t's document (t without
 *     reset_position_ids);
 *   - doc_start[T] (i32, when not NULL): the first position of t's document: the position after
 *     the last EOD at a position < t, else 0 (0 without reset_attention_mask); so doc_start[t] <= t
 *     and it never decreases;
 *   - targets[T] (i32, in place, when not NULL): with eod_mask_loss, -1 (ignored) where
 *     inputs[t] == eod_token; unchanged otherwise.
 * Any T >= 0; no allocation. */
void lj_doc_mask_sequence(const lj_doc_mask *d, const int32_t *inputs, int T, int32_t *position_ids,
                          int32_t *doc_start, int32_t *targets);

#endif
