/* vision.h: the CUDA backend's vision-tower ops (Qwen3-VL): LayerNorm with bias, the two
 * GELU forms, the weighted embedding bag, row gather and scatter (vision_ops.cu), and attention
 * over variable-length segments (vision_attention.cu). Contracts: the entries of the same names
 * in ops/ops.h; bf16 activations and parameters, fp32 arithmetic, the backend's stream. The ops
 * that write weight gradients take the gradient dtype last (backend.cu binds it per table). */
#ifndef LJ_CUDA_VISION_H
#define LJ_CUDA_VISION_H

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

void lj_cuda_layernorm_forward(void *out, float *mean, float *rstd, const void *x, const void *w, const void *b, int N,
                               int C, float eps);
void lj_cuda_layernorm_backward(void *dx, void *dw, void *db, const void *dout, const void *x, const void *w,
                                const float *mean, const float *rstd, int N, int C, lj_grad_mode dx_mode,
                                lj_grad_mode dw_mode, void *workspace, lj_dtype grad_dtype);
size_t lj_cuda_layernorm_backward_workspace_bytes(int N, int C);
void lj_cuda_gelu_forward(void *out, const void *x, int64_t n, int tanh_form);
void lj_cuda_gelu_backward(void *dx, const void *dout, const void *x, int64_t n, int tanh_form);
void lj_cuda_embedding_bag_forward(void *out, const void *table, const int32_t *idx, const float *w, int N, int K,
                                   int C);
void lj_cuda_embedding_bag_backward(void *dtable, const void *dout, const int32_t *idx, const float *w, int N, int K,
                                    int C, lj_dtype grad_dtype);
void lj_cuda_rows_gather(void *out, const void *x, const int32_t *idx, int M, int C);
void lj_cuda_rows_scatter(void *x, const void *src, const int32_t *idx, int M, int C, lj_grad_mode mode);

/* The attention_varlen entries take the table's configuration `cfg` (backend.cu binds one per
 * table): cuDNN's fused attention runs uniform bidirectional segments only where cfg->attention
 * is LJ_ATTENTION_AUTO and cfg->deterministic is 0, the flash kernels other bidirectional
 * segments at head_dim 64, 72 and 128 unless cfg->attention is LJ_ATTENTION_SIMPLE (their backward
 * not in deterministic mode), the CUDA-core kernels the rest (vision_attention.cu); the workspace
 * is sized for the first two (0 bytes where neither can run). */
void lj_cuda_attention_varlen_forward(void *out, float *lse, const void *qkv, const int32_t *cu_seqlens, int nseg,
                                      int max_seqlen, int N, int nh, int nkv, int hd, int causal, void *workspace,
                                      const lj_ops_config *cfg);
void lj_cuda_attention_varlen_backward(void *dqkv, const void *dout, const void *qkv, const void *out,
                                       const float *lse, const int32_t *cu_seqlens, int nseg, int max_seqlen, int N,
                                       int nh, int nkv, int hd, int causal, void *workspace,
                                       const lj_ops_config *cfg);
size_t lj_cuda_attention_varlen_workspace_bytes(int max_seqlen, int nh, int nkv, int hd, const lj_ops_config *cfg);
/* The kernels attention_varlen_forward (backward 0) or attention_varlen_backward (1) of a table
 * of configuration cfg runs at this shape, for 16-byte aligned tensors and the table's workspace:
 * "cudnn" (one dense attention; lse [nseg, nh, max_seqlen]), "flash" (attention.cu's tensor-core
 * kernels) or "cuda-core" (vision_attention.cu's; both with lse [nh, N]). cuDNN's plans are built
 * by the shape's first uncaptured forward: asked before it, "cudnn" is never the answer. For the
 * op harness and the timings. */
const char *lj_cuda_attention_varlen_kernels(const lj_ops_config *cfg, int nseg, int max_seqlen, int N, int nh,
                                             int nkv, int hd, int causal, int backward);

#ifdef __cplusplus
}
#endif

#endif
