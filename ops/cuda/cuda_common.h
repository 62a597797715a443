/* cuda_common.h: shared pieces of the CUDA backend: the backend's one stream, error checks
 * that name the failing call and kernel, the cuBLASLt GEMM helper, and the declarations of
 * every op the backend's table points to (the .cu files of ops/cuda/).
 *
 * The first block is plain C (host code may include it, e.g. for CUDA-graph capture on
 * lj_cuda_stream()); the rest is for the .cu files only.
 *
 * Recipe: act_dtype BF16, param_dtype BF16, grad_dtype BF16 (default) or F32
 * (lj_ops_config.grad_dtype), fp32 accumulation everywhere, fp32 master weights, AdamW moments
 * and loss. Every op runs on lj_cuda_stream() and is
 * capturable in a CUDA graph (no allocation, no host synchronisation, no blocking copy). */
#ifndef LJ_CUDA_COMMON_H
#define LJ_CUDA_COMMON_H

#include <cuda_runtime_api.h>
#include <library_types.h>

#include "ops/cuda/cuda_version.h" /* CUDA 12.8 or newer; the switches for newer APIs */

#ifdef __cplusplus
extern "C" {
#endif

#include "ops/ops.h"

/* The stream every op of the CUDA backend runs on (created, non-blocking, by the first
 * lj_ops_cuda_open).
 * Capture it with cudaStreamBeginCapture to record a training step as one CUDA graph. */
cudaStream_t lj_cuda_stream(void);

/* Device memory the backend holds for its whole life, allocated once at start-up
 * through the tracked alloc (so it is part of lj_ops_allocated_bytes()): the cuBLASLt
 * workspace, 32 MiB. The memory plan adds this figure as the backend's fixed overhead. */
size_t lj_cuda_fixed_workspace_bytes(void);

/* A gradient dtype (bf16 or fp32) as a cuBLASLt data type. The ops that write or read weight
 * gradients take the dtype as their last argument; each of the backend's tables (one per
 * gradient dtype, backend.cu) passes its own. */
static inline cudaDataType_t lj_cuda_ctype(lj_dtype dtype) { return dtype == LJ_DTYPE_F32 ? CUDA_R_32F : CUDA_R_16BF; }

/* The index of configuration `cfg` among the backend's constant tables (backend.cu: one per
 * gradient dtype and attention configuration), or -1 with a message when cfg is not one of its
 * configurations; the table of an index (with or without a device: its entries run only after
 * lj_ops_cuda_open started the device); the planning form of that table's attention workspace
 * size (lj_cuda_attention_workspace_bytes_described bound to its configuration). */
int lj_cuda_config_index(const lj_ops_config *cfg);
const lj_ops *lj_cuda_table(int index);
size_t (*lj_cuda_attention_workspace_described(int index))(int B, int T, int nh, int nkv, int hd);

/* cuDNN fused attention (attention_cudnn.cu): used by attention_forward/backward of a table whose
 * attention kernels are LJ_ATTENTION_AUTO, when available for the shape; the own kernels
 * otherwise. `det`: the table's deterministic mode (cuDNN's deterministic backward: dQ written
 * without an accumulation whose order varies from run to run, so a run repeats bit for bit and
 * a resumed run equals the uninterrupted one; its cost a workspace of B*nh*T^2 bf16 values, T
 * rounded up to 64, and a slower backward). Plans are built per shape and mode, when the
 * workspace is sized or on the first uncaptured call, and cached. Each forward/backward returns
 * 1 when cuDNN ran the op. `library`: the cuDNN graph library to load (NULL: the default). */
void lj_cuda_cudnn_attention_init(const char *library);
int lj_cuda_cudnn_attention_active(int B, int T, int nh, int nkv, int hd, int det);
/* Whether cuDNN runs the shape with its deterministic backward (mode det = 1, plans built). */
int lj_cuda_cudnn_attention_deterministic(int B, int T, int nh, int nkv, int hd);
const char *lj_cuda_cudnn_attention_describe(void);
size_t lj_cuda_cudnn_attention_workspace_bytes(int B, int T, int nh, int nkv, int hd, int det);
int lj_cuda_cudnn_attention_forward(void *out, float *lse, const void *qkv, int B, int T, int nh, int nkv, int hd,
                                    void *plan_ws, int det);
int lj_cuda_cudnn_attention_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                                     int B, int T, int nh, int nkv, int hd, float *softmax_sum, float *dq_accum,
                                     void *plan_ws, int det);
/* Full (bidirectional, no mask) attention of B sequences of T rows on cuDNN, for
 * attention_varlen's uniform segments (B = segments, T = their length; vision_attention.cu).
 * qkv [B*T, (nh + 2 nkv) hd] bf16 (q heads, k heads, v heads per row), out/dout [B*T, nh*hd]
 * bf16, dqkv [B*T, (nh + 2 nkv) hd] bf16 (overwritten); lse [B, nh, T] f32: cuDNN's
 * log-sum-exp layout, not the own varlen kernel's [nh, B*T] (each backward reads only its own
 * forward's lse, and the two always take the same path). softmax_sum [B, nh, T] f32 and dq_accum
 * [B*T, nh*hd] f32: the backward's workspace tensors; plan_ws: plan_ws_bytes bytes of workspace
 * for cuDNN's plans. Non-deterministic mode only; head_dim 64 or 128; 16-byte aligned tensors.
 * Each returns 1 when cuDNN ran the op, 0 when it did not (cuDNN not loaded, shape not supported,
 * plans not buildable, the stream capturing before the plans exist, the plans' workspace larger
 * than plan_ws_bytes, a tensor misaligned): the caller then runs its own kernels. Both apply the
 * same test, and the backward builds no plans (the forward does), so a backward runs on cuDNN
 * exactly when its forward did; if then dqkv or dout is misaligned it stops with an error. */
int lj_cuda_cudnn_attention_full_forward(void *out, float *lse, const void *qkv, int B, int T, int nh, int nkv, int hd,
                                         void *plan_ws, size_t plan_ws_bytes);
int lj_cuda_cudnn_attention_full_backward(void *dqkv, const void *dout, const void *qkv, const void *out,
                                          const float *lse, int B, int T, int nh, int nkv, int hd, float *softmax_sum,
                                          float *dq_accum, void *plan_ws, size_t plan_ws_bytes);
/* Whether the full attention of this shape runs on cuDNN with plan_ws_bytes of plan workspace:
 * its plans built (by an earlier forward) and fitting (16-byte aligned tensors assumed). Builds
 * nothing; for telling which kernels ran (the op harness). */
int lj_cuda_cudnn_attention_full_active(int B, int T, int nh, int nkv, int hd, size_t plan_ws_bytes);

/* ---- internal entry points (the op table's targets, defined in the .cu files) ---- */

/* backend.cu */
lj_status lj_cuda_alloc(void **ptr, size_t bytes);
void lj_cuda_free(void *ptr);

/* matmul.cu: column-major GEMM through cuBLASLt, C[m,n] = alpha*op(A) op(B) + beta*C,
 * A and B bf16, C (= D, in place) of type `ctype` (CUDA_R_16BF or CUDA_R_32F), fp32 compute.
 * `what` names the caller in error messages. */
void lj_cuda_gemm(const char *what, int transa, int transb, int m, int n, int k, const void *A, int lda,
                  const void *B, int ldb, void *C, cudaDataType_t ctype, int ldc, float alpha, float beta);
/* Creates the cuBLASLt handle and its workspace (lj_cuda_fixed_workspace_bytes). */
lj_status lj_cuda_matmul_init(void);
void lj_cuda_matmul_forward(void *out, const void *x, const void *w, int N, int IC, int OC);
void lj_cuda_matmul_backward(void *dx, void *dw, const void *dout, const void *x, const void *w, int N, int IC,
                             int OC, lj_grad_mode dx_mode, lj_grad_mode dw_mode, lj_dtype grad_dtype);

/* matmul.cu: the FP8 GEMM (cuBLASLt, "TN", per-tensor scale pointers, or the blockwise recipe's
 * 1x128 / 128x128 scale modes); fp8.cu: the casts */
void lj_cuda_fp8_matmul(void *out, lj_dtype out_dtype, const void *a, lj_fp8_format fa, const float *a_scale_inv,
                        const void *b, lj_fp8_format fb, const float *b_scale_inv, int M, int N, int K,
                        lj_grad_mode mode, void *workspace);
size_t lj_cuda_fp8_matmul_workspace_bytes(int M, int N, int K);
void lj_cuda_fp8_amax(float *amax, const void *x, int64_t n);
void lj_cuda_fp8_amax_f32(float *amax, const float *x, int64_t n, lj_dtype via);
void lj_cuda_fp8_quantize_f32(void *q, void *q_t, const float *x, int rows, int cols, lj_dtype via, lj_fp8_format fmt,
                              const lj_fp8_scaling *sc);
void lj_cuda_fp8_swiglu_quantize(void *h, int write_h, void *q, void *q_t, const void *gate_up, int N, int I,
                                 lj_fp8_format fmt, const lj_fp8_scaling *sc);
void lj_cuda_fp8_swiglu_amax(float *amax, void *h, const void *gate_up, int N, int I);
void lj_cuda_fp8_rmsnorm_quantize(void *res_out, void *out, int write_out, float *rstd, void *q, void *q_t,
                                  const void *res_in, const void *y, const void *w, int N, int C, float eps,
                                  lj_fp8_format fmt, const lj_fp8_scaling *sc);
/* the fused norm cast's shared memory limit, set once at start-up */
void lj_cuda_fp8_init(void);
void lj_cuda_fp8_quantize(void *q, void *q_t, const void *x, int rows, int cols, lj_fp8_format fmt,
                          const lj_fp8_scaling *sc);
/* the blockwise recipe (ops.h fp8_quantize_tiles, fp8_quantize_blocks, fp8_matmul_blockwise) */
void lj_cuda_fp8_quantize_tiles(void *q, float *q_sinv, void *q_t, float *q_t_sinv, const void *x, int rows, int cols,
                                lj_fp8_format fmt, float *amax);
void lj_cuda_fp8_quantize_blocks(void *q, float *sinv, void *q_t, float *sinv_t, const void *x, int rows, int cols,
                                 lj_fp8_format fmt, float *amax);
void lj_cuda_fp8_matmul_blockwise(void *out, lj_dtype out_dtype, const void *a, lj_fp8_format fa, const float *a_sinv,
                                  int a_blocks, const void *b, lj_fp8_format fb, const float *b_sinv, int b_blocks,
                                  int M, int N, int K, lj_grad_mode mode, void *workspace);
void lj_cuda_fp8_transpose(void *q_t, const void *q, int rows, int cols);
void lj_cuda_fp8_scale_update(float *amax_history, float *scale, float *scale_inv, int num, int history_len,
                              int num_first, float scaled_max_first, float scaled_max_rest, int algo_max);

/* cast.cu */
void lj_cuda_cast_f32_to_param(void *dst, const float *src, int64_t n);
void lj_cuda_cast_to_f32(float *dst, const void *src, lj_dtype dtype, int64_t n);
/* embedding.cu */
void lj_cuda_embedding_forward(void *out, const int32_t *ids, const void *wte, int N, int C);
void lj_cuda_embedding_backward(void *dwte, const void *dout, const int32_t *ids, int N, int C, void *workspace,
                                lj_dtype grad_dtype);
size_t lj_cuda_embedding_backward_workspace_bytes(int N);
/* rmsnorm.cu: plain and fused with the residual add */
void lj_cuda_rmsnorm_forward(void *out, float *rstd, const void *x, const void *w, int N, int C, float eps);
void lj_cuda_rmsnorm_backward(void *dx, void *dw, const void *dout, const void *x, const void *w, const float *rstd,
                              int N, int C, lj_grad_mode dw_mode, void *workspace, lj_dtype grad_dtype);
size_t lj_cuda_rmsnorm_backward_workspace_bytes(int N, int C);
void lj_cuda_residual_rmsnorm_forward(void *res_out, void *out, float *rstd, const void *res_in, const void *y,
                                      const void *w, int N, int C, float eps);
/* add.cu */
void lj_cuda_add(void *out, const void *a, const void *b, int64_t n);
/* rope.cu */
void lj_cuda_rope_forward(void *qkv, const float *cos, const float *sin, int B, int T, int nh, int nkv, int hd);
void lj_cuda_rope_backward(void *dqkv, const float *cos, const float *sin, int B, int T, int nh, int nkv, int hd);
void lj_cuda_rope_forward_pos(void *qkv, const float *cos, const float *sin, const int32_t *pos, int B, int T, int nh,
                              int nkv, int hd);
void lj_cuda_rope_backward_pos(void *dqkv, const float *cos, const float *sin, const int32_t *pos, int B, int T,
                               int nh, int nkv, int hd);

/* qknorm.cu: QK-norm (plain and fused with RoPE) and the projection bias; the backwards take
 * the gradient dtype last, like every op that writes weight gradients */
void lj_cuda_qk_norm_forward(void *out, float *rstd, const void *x, const void *w, int N, int nh, int nkv, int hd,
                             float eps);
void lj_cuda_qk_norm_rope_forward(void *out, float *rstd, const void *x, const void *w, const float *cos,
                                  const float *sin, int B, int T, int nh, int nkv, int hd, float eps);
void lj_cuda_qk_norm_backward(void *dx, void *dw, const void *dout, const void *x, const void *w, const float *rstd,
                              int N, int nh, int nkv, int hd, lj_grad_mode dw_mode, void *workspace,
                              lj_dtype grad_dtype);
void lj_cuda_qk_norm_rope_backward(void *dx, void *dw, const void *dout, const void *x, const void *w,
                                   const float *rstd, const float *cos, const float *sin, int B, int T, int nh,
                                   int nkv, int hd, lj_grad_mode dw_mode, void *workspace, lj_dtype grad_dtype);
size_t lj_cuda_qk_norm_backward_workspace_bytes(int N, int nh, int nkv, int hd);
void lj_cuda_bias_add(void *x, const void *b, int N, int C);
void lj_cuda_bias_backward(void *db, const void *dout, int N, int C, lj_grad_mode dw_mode, void *workspace,
                           lj_dtype grad_dtype);
size_t lj_cuda_bias_backward_workspace_bytes(int N, int C);
/* swiglu.cu */
void lj_cuda_swiglu_forward(void *out, const void *gate_up, int N, int I);
void lj_cuda_swiglu_backward(void *dgate_up, const void *dout, const void *gate_up, int N, int I);
void lj_cuda_swiglu_forward_unfused(void *out, void *tmp, const void *gate_up, int N, int I);
void lj_cuda_swiglu_backward_unfused(void *dgate_up, void *tmp, const void *dout, const void *gate_up, int N, int I);

/* cross_entropy.cu */
void lj_cuda_cross_entropy_fused(float *losses, void *dx, void *dw, const void *x, const void *w,
                                 const int32_t *targets, int N, int C, int V, float dloss, void *workspace,
                                 lj_dtype grad_dtype);
size_t lj_cuda_cross_entropy_fused_workspace_bytes(int N, int C, int V);
void lj_cuda_cross_entropy_forward_backward(float *losses, void *dlogits, const void *logits,
                                            const int32_t *targets, int N, int V, float dloss);

/* graph.cu: the table's graph entries (capture on lj_cuda_stream(), replay, destroy) */
lj_status lj_cuda_graph_capture_begin(void);
lj_status lj_cuda_graph_capture_end(void **graph);
void lj_cuda_graph_launch(void *graph);
void lj_cuda_graph_destroy(void *graph);

/* profile.cu: the table's profiling entries (NVTX ranges, the CUDA profiler's capture range) */
void lj_cuda_range_push(const char *name);
void lj_cuda_range_pop(void);
lj_status lj_cuda_profiler_start(void);
lj_status lj_cuda_profiler_stop(void);

/* adamw.cu */
void lj_cuda_global_norm_sq(float *out, const void *grad, int64_t n, void *workspace, lj_dtype grad_dtype);
size_t lj_cuda_global_norm_workspace_bytes(int64_t n);
void lj_cuda_adamw_update(void *params, float *master, const void *grad, void *m, void *v,
                          const lj_adamw_segment *segments, int num_segments, const lj_adamw_hparams *hp,
                          const float *step_scalars, const float *grad_norm_sq, lj_dtype grad_dtype);

/* attention.cu (flash kernels) and attention_simple.cu (fp32 reference kernels). The entries
 * take the table's configuration `cfg` (its deterministic, attention and flash_forward_mtiles:
 * ops.h lj_ops_config); backend.cu binds one per table. */
void lj_cuda_attention_init(const char *cudnn_library);
void lj_cuda_attention_forward(void *out, float *lse, const void *qkv, int B, int T, int nh, int nkv, int hd,
                               void *workspace, const lj_ops_config *cfg);
void lj_cuda_attention_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                                int B, int T, int nh, int nkv, int hd, void *workspace, const lj_ops_config *cfg);
/* Within documents (ops.h attention_forward_docs): the own flash kernels (head_dim 64, 128, aligned),
 * else the simple ones; never cuDNN. */
void lj_cuda_attention_forward_docs(void *out, float *lse, const void *qkv, const int32_t *doc_start, int B, int T,
                                    int nh, int nkv, int hd, void *workspace, const lj_ops_config *cfg);
void lj_cuda_attention_backward_docs(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                                     const int32_t *doc_start, int B, int T, int nh, int nkv, int hd, void *workspace,
                                     const lj_ops_config *cfg);
/* attention_varlen's bidirectional segments on the flash kernels (vision_attention.cu decides
 * when): qkv [N, (nh + 2 nkv) hd] bf16 packed from the nseg segments of cu_seqlens ([nseg + 1]
 * i32, device), out/dout [N, nh*hd] bf16, lse [nh, N] f32 (the layout of the CUDA-core varlen
 * kernels: either backward accepts either forward's lse), dqkv overwritten. mtiles: the head_dim
 * 64 forward's m-tiles (1 or 2, the table's flash_forward_mtiles). The backward's scratch: dsum
 * [nh, N] f32 and dq_acc [N, nh*hd] f32. Supported: head_dim 64, 72 (padded to 80 in the kernels)
 * and 128, every tensor 16-byte aligned (lj_cuda_flash_segments_supported says). */
int lj_cuda_flash_segments_supported(int hd, const void *a, const void *b, const void *c, const void *d);
void lj_cuda_flash_segments_forward(void *out, float *lse, const void *qkv, const int32_t *cu_seqlens, int nseg,
                                    int N, int nh, int nkv, int hd, int mtiles);
void lj_cuda_flash_segments_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                                     const int32_t *cu_seqlens, int nseg, int N, int nh, int nkv, int hd, float *dsum,
                                     float *dq_acc);
size_t lj_cuda_attention_workspace_bytes(int B, int T, int nh, int nkv, int hd, const lj_ops_config *cfg);
/* The same without a GPU (lj_ops_cuda_describe: planning only), where cuDNN cannot be asked:
 * cuDNN SDPA's workspace taken as B*T*nh*hd*4 bytes (the backward's fp32 dQ accumulator), what
 * cuDNN 9.14 reported on an H200 for every shape checked (llama3.2-1b/3b, llama3-8b; seq 2048,
 * 4096, 8192; micro-batch 1-4; bench/results/2026-11-30-h200x2-8b-time.md). */
size_t lj_cuda_attention_workspace_bytes_described(int B, int T, int nh, int nkv, int hd, const lj_ops_config *cfg);
void lj_cuda_attention_decode(void *out, void *kv_cache, const void *qkv, int p0, int Tq, int nh, int nkv, int hd);
/* doc_start: [B*T] i32 or NULL (plain causal), as ops.h attention_forward_docs. */
void lj_cuda_attention_forward_simple(void *out, float *lse, const void *qkv, const int32_t *doc_start, int B, int T,
                                      int nh, int nkv, int hd);
/* dq_f32: [B*T, nh*hd] f32 scratch; d: [B, nh, T] f32 scratch (both from the workspace). */
void lj_cuda_attention_backward_simple(void *dqkv, const void *dout, const void *qkv, const void *out,
                                       const float *lse, const int32_t *doc_start, int B, int T, int nh, int nkv,
                                       int hd, float *d);
/* d[b, h, t] = sum_i dout[bt, h*hd+i] * out[bt, h*hd+i] (fp32), shared by both backwards. */
void lj_cuda_attention_rowdot(float *d, const void *dout, const void *out, int B, int T, int nh, int hd);

/* ---- error reporting ---- */

/* Prints "ljperf: CUDA error in <what>: <detail> (<file>:<line>)" and exits (status 1): a
 * failing device call inside an op has no status to return. */
void lj_cuda_die(const char *what, const char *detail, const char *file, int line) __attribute__((noreturn));
/* Checks cudaGetLastError() after a kernel launch; with the start-up configuration's
 * debug_sync (LJ_CUDA_DEBUG=1 where the CLI resolves it) it also synchronises (outside graph capture) so that a fault names its kernel. */
void lj_cuda_check_launch(const char *kernel, const char *file, int line);
/* Number of multiprocessors of the device (for grid sizing). */
int lj_cuda_num_sms(void);

#ifdef __cplusplus
}
#endif

/* Checks a CUDA runtime call; `what` names it ("cudaMemcpyAsync in download"). */
#define LJ_CUDA_CHECK(call, what)                                                     \
    do {                                                                              \
        cudaError_t lj_cuda_e_ = (call);                                              \
        if (lj_cuda_e_ != cudaSuccess)                                                \
            lj_cuda_die((what), cudaGetErrorString(lj_cuda_e_), __FILE__, __LINE__);  \
    } while (0)

/* After `kernel<<<...>>>(...)`: names the kernel if the launch (or, in debug mode, the
 * kernel) failed. */
#define LJ_CUDA_LAUNCHED(kernel_name) lj_cuda_check_launch(kernel_name, __FILE__, __LINE__)

#ifdef __CUDACC__
#include <cuda_bf16.h>

typedef __nv_bfloat16 lj_bf16;

/* Sum over the 32 lanes of a warp (every lane gets the result). */
/* The segment s with cu[s] <= r < cu[s+1] of the nseg packed segments whose row offsets are
 * cu[0..nseg] (r < cu[nseg]): the largest s with cu[s] <= r, which skips empty segments (the
 * varlen attention kernels' row-to-segment map, found on the device by binary search). */
static __device__ __forceinline__ int lj_segment_of(const int32_t *cu, int nseg, int r) {
    int lo = 0, hi = nseg;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (cu[mid] <= r) lo = mid;
        else hi = mid;
    }
    return lo;
}

static __device__ __forceinline__ float lj_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float lj_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* 8 bf16 <-> 8 floats through one 16-byte access (p must be 16-byte aligned). */
static __device__ __forceinline__ void lj_load8(float *f, const lj_bf16 *p) {
    uint4 u = *(const uint4 *)p;
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
    for (int i = 0; i < 4; i++) {
        float2 t = __bfloat1622float2(h[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}
static __device__ __forceinline__ void lj_store8(lj_bf16 *p, const float *f) {
    uint4 u;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&u;
    for (int i = 0; i < 4; i++) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    *(uint4 *)p = u;
}
/* SwiGLU's forward value silu(g) u = g sigmoid(g) u in fp32: one expression for the SwiGLU
 * kernels and the FP8 cast fused into the SwiGLU (fp8.cu), so that both give the same bits. */
static __device__ __forceinline__ float lj_swiglu_value(float g, float u) {
    const float s = 1.0f / (1.0f + expf(-g));
    return g * s * u;
}
/* One row of the RMSNorm by one warp, for a row of C = 8k elements at 16-byte aligned addresses:
 * lane l takes the 8-vectors at columns 8l + 256i, in order. rmsnorm.cu's vector kernels and
 * the FP8 cast fused into the norm (fp8.cu) share these, so that both give the same bits.
 * lj_rmsnorm_sumsq8: the row's sum of squares (every lane gets it). lj_rmsnorm_residual_sumsq8:
 * the residual form, x = bf16(a + b) written to x_out (which may alias a or b: each element is
 * read before the same lane writes it), and its sum of squares. lj_rmsnorm_rstd: 1/sqrt(mean(x^2)
 * + eps) (HF LlamaRMSNorm, fp32). lj_rmsnorm_scale8: the 8 values x r w at x and w (fp32, before
 * the act dtype's rounding). */
static __device__ __forceinline__ float lj_rmsnorm_sumsq8(const lj_bf16 *x, int C, int lane) {
    float ss = 0.0f;
    for (int c = lane * 8; c < C; c += 256) {
        float v[8];
        lj_load8(v, x + c);
        for (int j = 0; j < 8; j++) ss += v[j] * v[j];
    }
    return lj_warp_sum(ss);
}
static __device__ __forceinline__ float lj_rmsnorm_residual_sumsq8(lj_bf16 *x_out, const lj_bf16 *a_in,
                                                                   const lj_bf16 *b_in, int C, int lane) {
    float ss = 0.0f;
    for (int c = lane * 8; c < C; c += 256) {
        float a[8], b[8];
        lj_load8(a, a_in + c);
        lj_load8(b, b_in + c);
        for (int j = 0; j < 8; j++) a[j] = __bfloat162float(__float2bfloat16_rn(a[j] + b[j]));
        lj_store8(x_out + c, a);
        for (int j = 0; j < 8; j++) ss += a[j] * a[j];
    }
    return lj_warp_sum(ss);
}
static __device__ __forceinline__ float lj_rmsnorm_rstd(float ss, int C, float eps) {
    return 1.0f / sqrtf(ss / (float)C + eps);
}
static __device__ __forceinline__ void lj_rmsnorm_scale8(float *v, const lj_bf16 *x, const lj_bf16 *w, float r) {
    float g[8];
    lj_load8(v, x);
    lj_load8(g, w);
    for (int j = 0; j < 8; j++) v[j] = v[j] * r * g[j];
}
static __device__ __forceinline__ float lj_ld(const lj_bf16 *p) { return __bfloat162float(*p); }
static __device__ __forceinline__ void lj_st(lj_bf16 *p, float v) { *p = __float2bfloat16_rn(v); }
/* fp32 twins, so that kernels templated on the gradient type read and write either. */
static __device__ __forceinline__ float lj_ld(const float *p) { return *p; }
static __device__ __forceinline__ void lj_st(float *p, float v) { *p = v; }

/* RoPE's rotation of one pair (x1, x2) = (x[i], x[i + hd/2]) by (cos, sin) = (c, s). Forward:
 * (x1 c - x2 s, x2 c + x1 s) (HF rotate_half); backward: the transpose, (d1 c + d2 s, d2 c - d1 s).
 * Shared by the RoPE kernels and QK-norm's fused RoPE. */
template <bool BACKWARD>
static __device__ __forceinline__ void lj_rope_pair(float &x1, float &x2, float c, float s) {
    const float y1 = BACKWARD ? x1 * c + x2 * s : x1 * c - x2 * s;
    const float y2 = BACKWARD ? x2 * c - x1 * s : x2 * c + x1 * s;
    x1 = y1;
    x2 = y2;
}

/* 1 when every pointer is 16-byte aligned (host side, for choosing vector paths). */
static inline int lj_cuda_aligned16(const void *a, const void *b, const void *c) {
    return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15u) == 0;
}

/* Blocks for a grid-stride loop over `units` work items of `threads` each. */
static inline unsigned lj_cuda_blocks(int64_t units, int threads) {
    int64_t b = (units + threads - 1) / threads;
    int64_t cap = (int64_t)lj_cuda_num_sms() * 32;
    if (b > cap) b = cap;
    if (b < 1) b = 1;
    return (unsigned)b;
}
#endif

#endif
