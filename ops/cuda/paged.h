/* paged.h: the CUDA backend's ops over serving's paged KV cache (paged.cu): the entries
 * paged_kv_write, paged_attention, their FP8 forms, gather_rows and argmax_rows of the op table;
 * contracts in ops/ops.h. */
#ifndef LJ_CUDA_PAGED_H
#define LJ_CUDA_PAGED_H

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

void lj_cuda_paged_kv_write(void *kv_cache, const void *qkv, const int32_t *slots, int N, int nh, int nkv, int hd);
void lj_cuda_paged_attention(void *out, const void *qkv, const void *kv_cache, const int32_t *block_tables,
                             const int32_t *seq, const int32_t *pos, int N, int max_blocks, int block_size, int nh,
                             int nkv, int hd);
void lj_cuda_paged_kv_write_fp8(void *kv_cache, const void *qkv, const int32_t *slots, int N, int nh, int nkv, int hd,
                                const float *k_scale, const float *v_scale);
void lj_cuda_paged_kv_round_fp8(void *qkv, int N, int nh, int nkv, int hd, const float *k_scale, const float *v_scale);
void lj_cuda_paged_attention_fp8(void *out, const void *qkv, const void *kv_cache, const int32_t *block_tables,
                                 const int32_t *seq, const int32_t *pos, int N, int max_blocks, int block_size,
                                 int nh, int nkv, int hd, const float *k_scale, const float *v_scale);
void lj_cuda_gather_rows(void *out, const void *x, const int32_t *rows, int M, int C);
void lj_cuda_argmax_rows(int32_t *out, const void *x, int M, int V);

#ifdef __cplusplus
}
#endif

#endif
