/* docmask.c: positions, document starts and the loss mask of a packed sequence (docmask.h). */
#include "data/docmask.h"

void lj_doc_mask_sequence(const lj_doc_mask *d, const int32_t *inputs, int T, int32_t *position_ids,
                          int32_t *doc_start, int32_t *targets) {
    int32_t start = 0; /* the current document's first position */
    for (int t = 0; t < T; t++) {
        if (position_ids) position_ids[t] = d->reset_position_ids ? t - start : t;
        if (doc_start) doc_start[t] = d->reset_attention_mask ? start : 0;
        const int eod = inputs[t] == d->eod_token;
        if (targets && d->eod_mask_loss && eod) targets[t] = -1;
        if (eod) start = t + 1; /* the EOD ends its document: the next one starts after it */
    }
}
