/* vision.h: the CPU backend's vision-tower ops (ops/cpu/vision.c): LayerNorm, GELU, the
 * weighted embedding bag, attention over variable-length segments, row gather and scatter.
 * Contracts: the entries of the same names in ops/ops.h. fp32, host memory, deterministic (fixed
 * partitions, no float atomics). */
#ifndef LJ_OPS_CPU_VISION_H
#define LJ_OPS_CPU_VISION_H

#include "ops/ops.h"

void lj_cpu_layernorm_forward(void *out, float *mean, float *rstd, const void *x, const void *w, const void *b, int N,
                              int C, float eps);
void lj_cpu_layernorm_backward(void *dx, void *dw, void *db, const void *dout, const void *x, const void *w,
                               const float *mean, const float *rstd, int N, int C, lj_grad_mode dx_mode,
                               lj_grad_mode dw_mode, void *workspace);
size_t lj_cpu_layernorm_backward_workspace_bytes(int N, int C);
void lj_cpu_gelu_forward(void *out, const void *x, int64_t n, int tanh);
void lj_cpu_gelu_backward(void *dx, const void *dout, const void *x, int64_t n, int tanh);
void lj_cpu_embedding_bag_forward(void *out, const void *table, const int32_t *idx, const float *w, int N, int K,
                                  int C);
void lj_cpu_embedding_bag_backward(void *dtable, const void *dout, const int32_t *idx, const float *w, int N, int K,
                                   int C);
void lj_cpu_attention_varlen_forward(void *out, float *lse, const void *qkv, const int32_t *cu_seqlens, int nseg,
                                     int max_seqlen, int N, int nh, int nkv, int hd, int causal, void *workspace);
void lj_cpu_attention_varlen_backward(void *dqkv, const void *dout, const void *qkv, const void *out,
                                      const float *lse, const int32_t *cu_seqlens, int nseg, int max_seqlen, int N,
                                      int nh, int nkv, int hd, int causal, void *workspace);
size_t lj_cpu_attention_varlen_workspace_bytes(int max_seqlen, int nh, int nkv, int hd);
void lj_cpu_rows_gather(void *out, const void *x, const int32_t *idx, int M, int C);
void lj_cpu_rows_scatter(void *x, const void *src, const int32_t *idx, int M, int C, lj_grad_mode mode);

#endif
