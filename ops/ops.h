/* ops.h: the op table. Every computation the model and the optimizer run goes through one
 * of these function pointers, so a backend (ops/cpu/, ops/cuda/) is one filled-in table and
 * a fused kernel is one more entry, never a change to the model.
 *
 * Conventions (all ops):
 *   - Pointers are device pointers of the backend (host pointers for the CPU backend).
 *   - "act" tensors use the backend's act_dtype (CPU: fp32, CUDA: bf16); "param" tensors its
 *     param_dtype; "grad" tensors its grad_dtype; tensors marked f32 are always fp32.
 *   - Row-major. N = B*T rows (micro-batch times sequence length), C = hidden size d,
 *     Q = nh*hd, KV = nkv*hd, QKV = Q + 2*KV, I = intermediate size, V = vocabulary.
 *   - The QKV layout of a row is [q heads (nh*hd) | k heads (nkv*hd) | v heads (nkv*hd)];
 *     within a head the RoPE pairs are (i, i + hd/2) (HF half-split convention).
 *   - Gradients of weights ACCUMULATE (+=) so that micro-batches add up, and the caller zeroes
 *     them once per optimizer step; the ops that can also overwrite them take an lj_grad_mode
 *     argument. Gradients of activations overwrite unless the op says so.
 *   - The table is stateless: no entry changes what another does, and nothing outside the
 *     table changes what an entry does. What can vary (the gradient dtype, deterministic mode,
 *     the attention kernels) is the table's configuration (lj_ops_config), fixed when the table
 *     is opened: another configuration is another table.
 *   - Ops run asynchronously in stream order on the backend's stream; only the memcpy
 *     download and synchronize wait for the device. upload is stream-ordered too (the host
 *     source may be reused as soon as it returns).
 *   - Per-step values an op reads from memory rather than from its arguments (AdamW's lr and
 *     bias corrections) are what lets a captured graph replay a whole training step.
 *   - Workspaces are planned: each op that needs scratch reports its size through a
 *     *_workspace_bytes entry, and the memory plan (plan/plan.c) reserves it.
 */
#ifndef LJ_OPS_H
#define LJ_OPS_H

#include "base/base.h"
#include "base/fp8.h"

/* The learning-rate groups of AdamW: each has its own set of per-step scalars (its own lr on the
 * same schedule shape). Group 0 is the main learning rate (Megatron-LM's --lr); group 1 the
 * embedding and output layer's under --decoupled-lr. */
#define LJ_ADAMW_LR_GROUPS 2

/* One contiguous range of the flat parameter buffer updated by AdamW with its own weight
 * decay (norms and embeddings get none unless asked) and learning-rate group. */
typedef struct {
    int64_t offset; /* elements from the start of the flat buffers */
    int64_t count;  /* elements */
    float weight_decay;
    int lr_group;   /* which set of step scalars the range reads: 0 .. LJ_ADAMW_LR_GROUPS - 1 */
    int master_only; /* 1: the master weights (and moments) only; the range's place in the param
                        buffer holds something else and is not written (--fp8-param-gather's FP8
                        codes, model/linear.h); 0 (the default): the rounded copy too */
} lj_adamw_segment;

/* AdamW. Source: Loshchilov & Hutter, "Decoupled Weight Decay Regularization" (2019),
 * Algorithm 2, with PyTorch's bias correction (torch/optim/adamw.py):
 *   g  = grad * clip_scale,  clip_scale = min(1, max_grad_norm / (||grad||_2 + 1e-6))
 *   m  = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2
 *   p -= lr * (wd*p + (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps))
 * evaluated in PyTorch's order (single-tensor path): p *= 1 - lr*wd; then
 *   p -= step_size * m / (sqrt(v) / bc2_sqrt + eps),  step_size = lr / (1-b1^t), bc2_sqrt = sqrt(1-b2^t).
 *
 * The hyper-parameters come in two parts, so that a whole training step can be captured as one
 * CUDA graph and replayed at every step:
 *   - lj_adamw_hparams, fixed for a run, passed by value (a captured step bakes them in);
 *   - the per-step scalars (lr and the bias corrections of step t), f32 in backend memory
 *     (device memory on a GPU, host memory on the CPU), read by the update when it runs: the
 *     host fills them with lj_adamw_step_scalars and uploads them, in stream order, before
 *     the step (before the graph launch). One set per learning-rate group, the sets back to
 *     back: a segment of group k reads step_scalars[k * LJ_ADAMW_NUM_SCALARS ..]. */
typedef struct {
    float beta1, beta2, eps;
    float max_grad_norm;   /* <= 0: no clipping */
    /* The storage of the moments m and v (Megatron-LM's --exp-avg-dtype and --exp-avg-sq-dtype,
     * with --use-precision-aware-optimizer): LJ_DTYPE_F32 (0, the default) or LJ_DTYPE_BF16.
     * Either way the update computes in f32 (a bf16 moment is widened exactly on load) and
     * the master step uses the f32 values of this step; only what is stored back is rounded
     * (to nearest even), as Transformer Engine's FusedAdam does with bf16 states. */
    lj_dtype exp_avg_dtype, exp_avg_sq_dtype;
} lj_adamw_hparams;

/* Indices of the per-step scalars: float [LJ_ADAMW_NUM_SCALARS]. */
enum {
    LJ_ADAMW_LR = 0,        /* lr (the weight decay factor 1 - lr*wd is formed from it, in double) */
    LJ_ADAMW_STEP_SIZE,     /* lr / (1 - beta1^t), computed in double, rounded once to f32 */
    LJ_ADAMW_BC2_SQRT,      /* sqrt(1 - beta2^t), computed in double, rounded once to f32 */
    LJ_ADAMW_NUM_SCALARS
};

/* Host: out[LJ_ADAMW_NUM_SCALARS] = the scalars of step `step` (t, starting at 1) with learning
 * rate `lr`; the bias corrections 1 - beta^t, step_size and bc2_sqrt in double as Python
 * computes them in PyTorch's _single_tensor_adamw, then rounded once to f32. */
void lj_adamw_step_scalars(float *out, const lj_adamw_hparams *hp, float lr, int step);

/* How an op writes a gradient it produces: OVERWRITE (dst = g) or ACCUMULATE (dst += g). A
 * buffer that the backward writes exactly once per step (ZeRO's per-layer gradient slots) can
 * be overwritten instead of zeroed first. */
typedef enum {
    LJ_GRAD_OVERWRITE = 0,
    LJ_GRAD_ACCUMULATE = 1,
} lj_grad_mode;

/* Where a per-tensor FP8 cast finds and leaves its scale (f32 scalars in backend memory; see
 * fp8_quantize). Source of the recipes: TransformerEngine's DelayedScaling and
 * Float8CurrentScaling (docs/reference.md, "FP8 recipes"). */
typedef struct {
    float *scale;     /* [1]: q = fp8(x * scale); written by a current-scaling cast */
    float *scale_inv; /* [1]: 1 / scale, the GEMM's dequantization factor; written likewise */
    float *amax;      /* [1]: current scaling reads the tensor's amax here (fp8_amax wrote it);
                         delayed scaling, when not NULL, raises it to max(amax, max|x|) (the amax
                         history's newest entry); NULL with current = 0: the scale is only read */
    int current;      /* 1: current (tensorwise) scaling: scale = lj_fp8_current_scale(*amax, max);
                         0: delayed: *scale as it is */
} lj_fp8_scaling;

/* The attention kernels a CUDA table runs (the op harness and the kernel lab compare them). */
typedef enum {
    LJ_ATTENTION_AUTO = 0, /* cuDNN's fused SDPA where it serves the shape, else the own flash kernels
                              (head_dim 64 or 128, 16-byte aligned), else the simple ones */
    LJ_ATTENTION_FLASH,    /* the own flash kernels, else the simple ones; cuDNN never */
    LJ_ATTENTION_SIMPLE,   /* the simple fp32 kernels for every head_dim (a reference, slow) */
} lj_attention_kernels;

/* A backend's configuration, given when its table is opened (lj_ops_cpu_open, lj_ops_cuda_open,
 * lj_ops_cuda_describe) and fixed for the table's life: the table opened with it is one of the
 * backend's constant tables, and `config` in the table says which. Environment variables are
 * not read by the backends: the caller resolves the run's configuration (cli/args.c) and opens
 * the table with it. */
typedef struct {
    /* The CUDA backend's gradient dtype (DeepSpeed's data_types.grad_accum_dtype): LJ_DTYPE_BF16
     * (the default: 2 bytes per parameter; weight-gradient GEMMs accumulate in fp32 and round
     * once per micro-batch) or LJ_DTYPE_F32 (4 bytes; exact accumulation over micro-batches).
     * The CPU keeps fp32 gradients whatever is asked (its table says LJ_DTYPE_F32). */
    lj_dtype grad_dtype;
    /* Deterministic mode (Megatron-LM's --deterministic-mode): every op of a step gives the
     * same bits on every run, so a resumed run equals the uninterrupted one. The CPU backend
     * always is (its table records the mode only); the CUDA backend selects cuDNN's
     * deterministic attention backward (a workspace of B*nh*T^2 bf16 values, and 0.5-2.5% of
     * an H200 step at seq 4096; off by default, as in Megatron-LM and Transformer Engine). The
     * own flash kernels (--reset-attention-mask, or cuDNN missing) still add dQ with atomics. */
    int deterministic;
    lj_attention_kernels attention; /* CUDA: the attention kernels; the CPU has one */
    /* CUDA: query m-tiles of 16 rows per warp in the head_dim 64 flash forward: 2 (128-query
     * blocks, each K/V fragment feeds two mma; the default, also for 0) or 1 (64-query blocks,
     * fewer registers), for the kernel lab's comparison. */
    int flash_forward_mtiles;
    /* CUDA start-up, read by the open that starts the device (the first), ignored by later
     * ones and not part of a table (0 in its `config`): the device index (-1: the runtime's
     * current device; a data-parallel rank passes its local rank), a synchronisation after
     * every kernel launch so that a fault names its kernel (debugging), and the cuDNN graph
     * library's path (NULL: libcudnn_graph.so.9 on the loader's path). */
    int device;
    int debug_sync;
    const char *cudnn_library;
} lj_ops_config;

/* The default configuration: bf16 gradients (CUDA), not deterministic, attention AUTO, two
 * m-tiles, the current device. */
#define LJ_OPS_CONFIG_DEFAULT                                                                                   \
    ((lj_ops_config){.grad_dtype = LJ_DTYPE_BF16, .deterministic = 0, .attention = LJ_ATTENTION_AUTO,            \
                     .flash_forward_mtiles = 2, .device = -1, .debug_sync = 0, .cudnn_library = NULL})

typedef struct lj_ops lj_ops;
struct lj_ops {
    const char *name;      /* "cpu" or "cuda" */
    lj_dtype act_dtype;
    lj_dtype param_dtype;
    lj_dtype grad_dtype;
    lj_ops_config config;  /* the configuration the table was opened with (start-up fields 0) */

    /* ---- memory ---- */
    /* Allocates `bytes` of device memory (one arena of the plan). Errors: LJ_ERR_OOM. */
    lj_status (*alloc)(void **ptr, size_t bytes);
    void (*free)(void *ptr);
    void (*memset_zero)(void *dst, size_t bytes);
    void (*upload)(void *dst, const void *src_host, size_t bytes);
    void (*download)(void *dst_host, const void *src, size_t bytes);
    /* Page-locked (pinned) host memory, for fast copies between it and the device (the host copy
     * of --async-save); NULL on a backend whose memory is host memory already (use malloc).
     * Errors: LJ_ERR_OOM. */
    lj_status (*host_alloc)(void **ptr, size_t bytes);
    void (*host_free)(void *ptr);
    /* Copies beside the stream (--async-save's copy of the optimizer state): download_async
     * queues a copy of `bytes` from device memory to host memory (pinned, for it to overlap) on a
     * second stream, after the work queued so far, so that the work queued next runs beside it;
     * download_async_wait blocks the calling thread (any thread) until every such copy is done;
     * download_async_fence queues on the stream a wait for them (in a captured graph: a wait, at
     * each launch, for the copies queued before it), which the writers of the state call first.
     * All three NULL on a backend without streams (use download). */
    void (*download_async)(void *dst_host, const void *src, size_t bytes);
    void (*download_async_wait)(void);
    void (*download_async_fence)(void);
    void (*copy)(void *dst, const void *src, size_t bytes);
    void (*synchronize)(void);
    /* The stream the ops run on (a cudaStream_t), for ordering collectives against them; NULL
     * entry on the CPU. */
    void *(*stream)(void);
    /* Free and total memory of the device in bytes (CPU: available and total host RAM). */
    lj_status (*memory_info)(size_t *free_bytes, size_t *total_bytes);
    /* The device's name, for a run's identity (--log-json's start record): CUDA the runtime's
     * (cudaDeviceProp.name of the device the table started on, e.g. "NVIDIA H200"), the CPU
     * /proc/cpuinfo's first "model name" (else the machine name of uname(2), e.g. "aarch64").
     * A static string; NULL entry in a description without a device (lj_ops_cuda_describe). */
    const char *(*device_name)(void);
    /* dst[n] (param_dtype) = src[n] (f32), with round-to-nearest-even for bf16. */
    void (*cast_f32_to_param)(void *dst, const float *src, int64_t n);
    /* dst[n] (f32) = src[n] (act_dtype or param_dtype, given by `dtype`). */
    void (*cast_to_f32)(float *dst, const void *src, lj_dtype dtype, int64_t n);

    /* ---- embedding ---- */
    /* out[N,C] act = wte[ids[n], :]. ids: [N] i32 device; wte: [V,C] param. */
    void (*embedding_forward)(void *out, const int32_t *ids, const void *wte, int N, int C);
    /* dwte[ids[n], :] += dout[n, :]. dwte: [V,C] grad; dout: [N,C] act. `workspace` holds
     * embedding_backward_workspace_bytes(N) bytes (CUDA: the ids sorted with their positions, so
     * that each row of dwte is summed in fp32 by one block in a fixed order and written once). */
    void (*embedding_backward)(void *dwte, const void *dout, const int32_t *ids, int N, int C, void *workspace);
    size_t (*embedding_backward_workspace_bytes)(int N);

    /* ---- RMSNorm (Zhang & Sennrich 2019; HF LlamaRMSNorm: y = w * x / sqrt(mean(x^2) + eps),
     * computed in fp32) ---- */
    /* out[N,C] act, rstd[N] f32 = 1/sqrt(mean(x^2)+eps); x[N,C] act; w[C] param. */
    void (*rmsnorm_forward)(void *out, float *rstd, const void *x, const void *w, int N, int C, float eps);
    /* dx[N,C] += d/dx; dw[C] (grad) += d/dw, or = with dw_mode LJ_GRAD_OVERWRITE. dout[N,C] act;
     * x, w, rstd as saved by forward. `workspace` holds rmsnorm_backward_workspace_bytes(N, C)
     * bytes. */
    void (*rmsnorm_backward)(void *dx, void *dw, const void *dout, const void *x, const void *w, const float *rstd,
                             int N, int C, lj_grad_mode dw_mode, void *workspace);
    size_t (*rmsnorm_backward_workspace_bytes)(int N, int C);
    /* Fused residual add + RMSNorm: res_out = res_in + y; out = rmsnorm(res_out).
     * Equal to add() then rmsnorm_forward() on res_out, bit for bit on the CPU. */
    void (*residual_rmsnorm_forward)(void *res_out, void *out, float *rstd, const void *res_in, const void *y,
                                     const void *w, int N, int C, float eps);
    /* out[n] = a[n] + b[n], act dtype (the unfused twin of the residual add). */
    void (*add)(void *out, const void *a, const void *b, int64_t n);

    /* ---- matmul: out[N,OC] = x[N,IC] w[OC,IC]^T (fp32 accumulation) ---- */
    void (*matmul_forward)(void *out, const void *x, const void *w, int N, int IC, int OC);
    /* dx[N,IC] act = dout w (dx_mode: = or +=; skipped when dx is NULL);
     * dw[OC,IC] grad = dout^T x (dw_mode: += or =; skipped when dw is NULL). */
    void (*matmul_backward)(void *dx, void *dw, const void *dout, const void *x, const void *w, int N, int IC,
                            int OC, lj_grad_mode dx_mode, lj_grad_mode dw_mode);

    /* ---- FP8 (the FP8 linear recipe, model/linear.h) ----
     * An FP8 matrix [rows, cols] is row-major with row stride lj_fp8_ld(cols) bytes (cols
     * rounded up to 16), one byte per element (base/fp8.h codes), the padding columns zero. */
    /* amax[0] (f32) = max |x[i]| over x[n] (act dtype); NaN when any x[i] is NaN. Overwrites. */
    void (*fp8_amax)(float *amax, const void *x, int64_t n);
    /* q[rows, ld(cols)] = fp8(x * s) of x[rows, cols] (act dtype), rounded to nearest even and
     * saturated (lj_fp8_from_f32; the CUDA backend's cvt.rn.satfinite), and q_t[cols, ld(rows)]
     * the same codes transposed (the "TN" operand of a backward GEMM); either may be NULL. The
     * scale s comes from `sc` (lj_fp8_scaling): a current-scaling cast computes it from *amax and
     * writes scale and scale_inv; a delayed one reads *scale and raises *amax (if not NULL) to
     * max|x|. One pass over x (amax, scale and cast together), the form a producer kernel
     * fuses. */
    void (*fp8_quantize)(void *q, void *q_t, const void *x, int rows, int cols, lj_fp8_format fmt,
                         const lj_fp8_scaling *sc);
    /* The casts of f32 values as another dtype holds them: each x[i] (f32) first rounded to `via`
     * (LJ_DTYPE_BF16: to nearest even, as cast_f32_to_param and AdamW's param copy round it;
     * LJ_DTYPE_F32: as it is), then as fp8_amax and fp8_quantize of those values (the same
     * amax, codes, transpose, padding and scales as those ops give of a buffer holding them, bit
     * for bit). For --fp8-param-gather's cast of the f32 master weights where the param-dtype
     * copy is not kept (model/linear.h): the codes of the copy the run without that flag reads. */
    void (*fp8_amax_f32)(float *amax, const float *x, int64_t n, lj_dtype via);
    void (*fp8_quantize_f32)(void *q, void *q_t, const float *x, int rows, int cols, lj_dtype via, lj_fp8_format fmt,
                             const lj_fp8_scaling *sc);
    /* q_t[cols, ld(rows)] = q[rows, ld(cols)] transposed, codes moved as they are (the "TN"
     * operand of the data gradient from weight codes gathered without their transpose:
     * --fp8-param-gather under ZeRO-3, model/linear.h); q_t's padding columns zero, q's not read.
     * q and q_t 4-byte aligned. */
    void (*fp8_transpose)(void *q_t, const void *q, int rows, int cols);
    /* The cast fused into its producer, the SwiGLU: x = h = silu(gate) * up of gate_up [N, 2I]
     * (gate in columns [0, I), up in [I, 2I), as swiglu_forward), rounded to the act dtype, then
     * cast into q [N, ld(I)] and q_t [I, ld(N)] (either may be NULL) exactly as fp8_quantize
     * casts x, with delayed scaling only (sc->current 0: the scale is known before h exists).
     * h [N, I] (act dtype) is written when write_h; otherwise the kernel may skip it (the CUDA
     * backend does when I is a multiple of 8 and the buffers are 16-byte aligned) but h must
     * still be a buffer of that size (the fallback and the CPU write it). Equal, bit for bit,
     * to swiglu_forward into h followed by fp8_quantize of h; one pass over gate_up instead of
     * a write and two reads of h. */
    void (*fp8_swiglu_quantize)(void *h, int write_h, void *q, void *q_t, const void *gate_up, int N, int I,
                                lj_fp8_format fmt, const lj_fp8_scaling *sc);
    /* Current scaling's form: h [N, I] = the SwiGLU of gate_up as swiglu_forward writes it, and
     * amax[0] = max |h| as fp8_amax computes it, in one pass (the cast of h follows, with the
     * scale this amax gives). Bit for bit swiglu_forward then fp8_amax. */
    void (*fp8_swiglu_amax)(float *amax, void *h, const void *gate_up, int N, int I);
    /* The cast fused into the other producer, the RMSNorm before the QKV and gate/up linears:
     * out [N, C] (act dtype) and rstd [N] = the RMSNorm of x with the weight w [C] (param), as
     * rmsnorm_forward computes them with x = res_in when y is NULL, or as
     * residual_rmsnorm_forward with y: res_out = res_in + y (written; it may alias res_in) and x
     * = res_out; then out cast into q [N, ld(C)] and q_t [C, ld(N)] (either may be NULL)
     * exactly as fp8_quantize casts out, with the scaling of `sc`:
     *   delayed (sc->current 0): *scale is read and *amax (when not NULL) raised to max|out|;
     *     one pass over x;
     *   current (1): *amax = max|out| as fp8_amax computes it (overwritten), then scale and
     *     scale_inv from it, as fp8_amax followed by a current-scaling fp8_quantize. CUDA: for
     *     a few rows (q_t NULL; serving's decode) one block does all of it, else a first pass
     *     writes res_out, rstd and the amax and the cast follows, recomputing out from x.
     * out is written when write_out; otherwise the kernel may skip it (the CUDA backend does
     * when C is a multiple of 8 and the buffers are 16-byte aligned), but out must still be a
     * buffer of that size (the CPU and the fallback write it). Equal, bit for bit, to the norm
     * into out followed by (fp8_amax and) fp8_quantize of out. */
    void (*fp8_rmsnorm_quantize)(void *res_out, void *out, int write_out, float *rstd, void *q, void *q_t,
                                 const void *res_in, const void *y, const void *w, int N, int C, float eps,
                                 lj_fp8_format fmt, const lj_fp8_scaling *sc);
    /* Delayed scaling's update over `num` tensors, once per pass (TransformerEngine's
     * amax_and_scale_update): amax_history [history_len, num] f32 (row 0 the newest) is rolled
     * by one row (row i takes row i+1, the last row takes the old row 0, row 0 becomes 0, ready
     * to record), the amax is the old history's max (algo_max = 1) or its row 0 (most recent),
     * and scale[t] = lj_fp8_delayed_scale(amax, scaled_max, scale[t]),
     * scale_inv[LJ_FP8_SCALE_INV_STRIDE * t] = 1/scale[t] (base/fp8.h: one per 16 bytes),
     * with scaled_max = scaled_max_first for t < num_first, scaled_max_rest after (fp8_max /
     * 2^margin of each format). */
    void (*fp8_scale_update)(float *amax_history, float *scale, float *scale_inv, int num, int history_len,
                             int num_first, float scaled_max_first, float scaled_max_rest, int algo_max);
    /* out[M, N] (out_dtype: act dtype, or the grad dtype for a weight gradient; = or += as mode
     * says) = (a_scale_inv * b_scale_inv) * a[M, K] b[N, K]^T, FP8 a (format fa) and b (fb) with
     * row stride lj_fp8_ld(K), fp32 accumulation; a_scale_inv, b_scale_inv: [1] f32 in backend
     * memory, 16-byte aligned (LJ_FP8_SCALE_INV_STRIDE). Not both formats E5M2 (cuBLASLt has no such kernel). CUDA: cuBLASLt's FP8 GEMM
     * ("TN", A/B_SCALE_POINTER), N a multiple of 8 (16-byte output rows). CPU: the codes decoded
     * exactly to fp32 into `workspace` (fp8_matmul_workspace_bytes) and one sgemm. */
    void (*fp8_matmul)(void *out, lj_dtype out_dtype, const void *a, lj_fp8_format fa, const float *a_scale_inv,
                       const void *b, lj_fp8_format fb, const float *b_scale_inv, int M, int N, int K,
                       lj_grad_mode mode, void *workspace);
    size_t (*fp8_matmul_workspace_bytes)(int M, int N, int K);
    /* The blockwise recipe (base/fp8.h "tiles"; DeepSeek-V3 section 3.3.1, TransformerEngine's
     * Float8BlockScaling): current scaling per tile, s = lj_fp8_current_scale(amax of the tile,
     * lj_fp8_max(fmt)) (1 for an all-zero tile), codes lj_fp8_from_f32(x * s), dequantization
     * factor 1/s in the tile's place of the scale layout (its padding entries 1).
     * fp8_quantize_tiles: q[rows, ld(cols)] with 1x128 tiles along cols and q_sinv (tiles
     * layout of [rows, cols]); q_t[cols, ld(rows)] = the columnwise quantization, x^T with its
     * own 1x128 tiles along rows, and q_t_sinv (tiles layout of [cols, rows]). Either pair may
     * be NULL. amax, if not NULL: [1] f32 = max|x| (overwritten; NaN when any x is NaN), the
     * overflow report's. x: [rows, cols] act dtype. */
    void (*fp8_quantize_tiles)(void *q, float *q_sinv, void *q_t, float *q_t_sinv, const void *x, int rows, int cols,
                               lj_fp8_format fmt, float *amax);
    /* fp8_quantize_blocks: 128x128 blocks of x[rows, cols] (act dtype): q[rows, ld(cols)] and
     * sinv (blocks layout of [rows, cols]); q_t[cols, ld(rows)] the same codes transposed and
     * sinv_t (blocks layout of [cols, rows]: the transposed grid). Either pair may be NULL;
     * amax as fp8_quantize_tiles. */
    void (*fp8_quantize_blocks)(void *q, float *sinv, void *q_t, float *sinv_t, const void *x, int rows, int cols,
                                lj_fp8_format fmt, float *amax);
    /* out[M, N] (out_dtype as fp8_matmul; = or += by mode) = sum_k (a[m, k] sa(m, k)) (b[n, k] sb(n, k))
     * with a[M, ld(K)], b[N, ld(K)] FP8 (formats fa, fb, not both E5M2), each scaled along K by
     * 1x128 tiles (a_blocks / b_blocks = 0: a_sinv in the tiles layout of [M, K]) or 128x128
     * blocks (1: the blocks layout); not both blocks (cuBLASLt has no 128x128 x 128x128 kernel).
     * Scale tensors 16-byte aligned. CUDA: cuBLASLt with A/B_SCALE_MODE VEC128_32F /
     * BLK128x128_32F (cuBLAS 12.9, sm_90; lj_ops_cuda_fp8_blockwise_check), M and N multiples
     * of 4 (cuBLASLt's factor layouts), N a multiple of 8.
     * CPU: each code decoded and multiplied by its tile's factor in fp32 into `workspace`
     * (fp8_matmul_workspace_bytes), then one sgemm. */
    void (*fp8_matmul_blockwise)(void *out, lj_dtype out_dtype, const void *a, lj_fp8_format fa, const float *a_sinv,
                                 int a_blocks, const void *b, lj_fp8_format fb, const float *b_sinv, int b_blocks,
                                 int M, int N, int K, lj_grad_mode mode, void *workspace);

    /* ---- RoPE in the QKV layout (Su et al. 2021; HF apply_rotary_pos_emb, half-split) ----
     * qkv[B*T, QKV] act, rotated in place for the q and k heads; row (b, t) uses position
     * t of cos/sin: [T, hd/2] f32 (pass cos + p0*hd/2 to start at position p0). */
    void (*rope_forward)(void *qkv, const float *cos, const float *sin, int B, int T, int nh, int nkv, int hd);
    /* The transpose rotation, applied in place to dqkv's q and k heads. */
    void (*rope_backward)(void *dqkv, const float *cos, const float *sin, int B, int T, int nh, int nkv, int hd);
    /* Per-token positions (documents packed in a sequence, Megatron-LM's --reset-position-ids):
     * row n = (b, t) uses position pos[n] of cos/sin ([max position + 1, hd/2] f32); pos: [B*T] i32
     * in backend memory, each in [0, rows of the tables). With pos[n] = t equal to rope_forward /
     * rope_backward bit for bit. */
    void (*rope_forward_pos)(void *qkv, const float *cos, const float *sin, const int32_t *pos, int B, int T, int nh,
                             int nkv, int hd);
    void (*rope_backward_pos)(void *dqkv, const float *cos, const float *sin, const int32_t *pos, int B, int T,
                              int nh, int nkv, int hd);

    /* ---- QK-norm (Qwen3; HF Qwen3Attention's q_norm and k_norm: Qwen3RMSNorm over head_dim, the
     * Llama RMSNorm formula, applied to each q and k head before RoPE) ----
     * x, out: [N, QKV] act rows in the QKV layout; w: [2, hd] param, row 0 q_norm.weight and row 1
     * k_norm.weight, shared by the heads; rstd: [N, nh + nkv] f32, per row and head (q heads then
     * k heads), 1/sqrt(mean_i x^2 + eps) over the head's hd values.
     * out = w * x * rstd for the q and k heads; the v heads are copied. out may alias x. */
    void (*qk_norm_forward)(void *out, float *rstd, const void *x, const void *w, int N, int nh, int nkv, int hd,
                            float eps);
    /* dx[N, QKV] act (overwritten; may alias dout): the q and k heads through the norm's backward,
     * dx = rstd * (w*dout - x * rstd^2 * sum(w*dout*x) / hd), the v heads copied; dw[2, hd] grad
     * (+= or = by dw_mode) = sum over rows and heads of dout * x * rstd. x, w, rstd as saved by the
     * forward. `workspace` holds qk_norm_backward_workspace_bytes(N, nh, nkv, hd) bytes. */
    void (*qk_norm_backward)(void *dx, void *dw, const void *dout, const void *x, const void *w, const float *rstd,
                             int N, int nh, int nkv, int hd, lj_grad_mode dw_mode, void *workspace);
    size_t (*qk_norm_backward_workspace_bytes)(int N, int nh, int nkv, int hd);
    /* Fused with RoPE in the QKV layout (N = B*T; cos, sin as rope_forward): out = rope(qk_norm(x)),
     * equal to qk_norm_forward then rope_forward on out (bit for bit on the CPU). */
    void (*qk_norm_rope_forward)(void *out, float *rstd, const void *x, const void *w, const float *cos,
                                 const float *sin, int B, int T, int nh, int nkv, int hd, float eps);
    /* Its backward: dx = qk_norm_backward(rope_backward(dout)) (dx may alias dout), dw as there;
     * the workspace of qk_norm_backward. */
    void (*qk_norm_rope_backward)(void *dx, void *dw, const void *dout, const void *x, const void *w,
                                  const float *rstd, const float *cos, const float *sin, int B, int T, int nh, int nkv,
                                  int hd, lj_grad_mode dw_mode, void *workspace);

    /* ---- projection bias (Qwen2's q/k/v biases, one [QKV] vector: HF nn.Linear(bias=True)) ----
     * x[N, C] act += b[C] param, row by row, in place. */
    void (*bias_add)(void *x, const void *b, int N, int C);
    /* db[C] grad (+= or = by dw_mode) = sum_n dout[n, :], the column sums of dout[N, C] act, in a
     * fixed order. `workspace` holds bias_backward_workspace_bytes(N, C) bytes. */
    void (*bias_backward)(void *db, const void *dout, int N, int C, lj_grad_mode dw_mode, void *workspace);
    size_t (*bias_backward_workspace_bytes)(int N, int C);

    /* ---- causal GQA attention, softmax scale 1/sqrt(hd); query head h uses kv head
     * h / (nh/nkv); K/V are never repeated in memory ----
     * out[B*T, Q] act; lse[B, nh, T] f32 (log-sum-exp of the scaled scores, saved for the
     * backward); qkv[B*T, QKV] act (after RoPE). */
    void (*attention_forward)(void *out, float *lse, const void *qkv, int B, int T, int nh, int nkv, int hd,
                              void *workspace);
    /* dqkv[B*T, QKV] (overwrite) from dout[B*T, Q] and the saved qkv, out, lse. */
    void (*attention_backward)(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                               int B, int T, int nh, int nkv, int hd, void *workspace);
    size_t (*attention_workspace_bytes)(int B, int T, int nh, int nkv, int hd);
    /* Causal attention within documents (Megatron-LM's --reset-attention-mask): query t of sequence b
     * attends to keys j with doc_start[b*T + t] <= j <= t only. doc_start: [B*T] i32 in backend
     * memory, positions within the sequence, with doc_start[b*T + t] <= t and non-decreasing in t
     * (data/docmask.h builds it: the position after the last EOD before t, else 0). Same out, lse
     * and dqkv contracts and the same workspace as attention_forward / attention_backward, which a
     * doc_start of zeros equals (the CPU: bit for bit). CUDA: the own flash kernels (cuDNN's SDPA
     * serves only the plain causal mask here). */
    void (*attention_forward_docs)(void *out, float *lse, const void *qkv, const int32_t *doc_start, int B, int T,
                                   int nh, int nkv, int hd, void *workspace);
    void (*attention_backward_docs)(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                                    const int32_t *doc_start, int B, int T, int nh, int nkv, int hd, void *workspace);
    /* The workspace attention_forward_docs alone needs (no backward follows: serving's prompt
     * chunks): the CPU's per-thread rows; 0 on CUDA (its own forward kernels need none, and no
     * cuDNN plan is built for the shape, as attention_workspace_bytes would). */
    size_t (*attention_forward_docs_workspace_bytes)(int B, int T, int nh, int nkv, int hd);
    /* Generation with a KV cache (B = 1): the k and v parts of qkv[Tq, QKV] (after RoPE,
     * positions p0..p0+Tq-1) are written to kv_cache[Tmax, 2*KV] rows p0.., then query i
     * attends to cache rows 0..p0+i. out: [Tq, Q] act. */
    void (*attention_decode)(void *out, void *kv_cache, const void *qkv, int p0, int Tq, int nh, int nkv, int hd);

    /* ---- serving: attention over a paged KV cache (serve/kv_cache.h; vLLM's PagedAttention,
     * Kwon et al. 2023) ----
     * A layer's cache is kv_cache[num_slots, 2*KV] act, one row per token position held:
     * [k heads (KV) | v heads (KV)], the row layout of attention_decode's cache. Slots are cut
     * into blocks of block_size: slot = block * block_size + offset. A batch holds N query rows
     * of up to S sequences of different lengths; sequence s keeps its positions in the blocks
     * block_tables[s * max_blocks + p / block_size] (i32, backend memory). */
    /* kv_cache[slots[n], :] = the k and v parts of qkv[n, :] (after RoPE) for n < N; slots[n] < 0
     * is skipped. slots: [N] i32 backend memory, distinct. */
    void (*paged_kv_write)(void *kv_cache, const void *qkv, const int32_t *slots, int N, int nh, int nkv, int hd);
    /* out[N, Q] act: query row n (the q heads of qkv[n], after RoPE) of sequence seq[n] at
     * position pos[n] attends, causally, to its positions 0..pos[n] in kv_cache (written before,
     * this step's rows by paged_kv_write); softmax scale 1/sqrt(hd), GQA as attention_forward.
     * seq, pos: [N] i32 backend memory; a row with seq[n] < 0 is skipped (out[n] untouched: the
     * caller computed it, as serving does for a prompt's first chunk with attention_forward_docs).
     * The CPU accumulates keys in position order with the
     * online softmax of attention_decode, so a sequence gets the same bits as there whatever
     * else is in the batch. */
    void (*paged_attention)(void *out, const void *qkv, const void *kv_cache, const int32_t *block_tables,
                            const int32_t *seq, const int32_t *pos, int N, int max_blocks, int block_size, int nh,
                            int nkv, int hd);
    /* The FP8 cache (--kv-cache-dtype fp8; vLLM's fp8_e4m3 with per-tensor scales): the same
     * layout with one E4M3 code (base/fp8.h) per element, kv_cache[num_slots, 2*KV] u8.
     * k_scale, v_scale: [1] f32 in backend memory, the layer's dequantization factors (vLLM's
     * convention: stored = x / scale, read = code * scale): a key element x is stored as
     * lj_fp8_from_f32(x * inv_k) with inv_k = 1 / *k_scale rounded to f32 once (round to nearest
     * even, saturating at +-448, as fp8_quantize), and read back as lj_fp8_to_f32(code) *
     * *k_scale; values likewise with v_scale. The codes equal, bit for bit, on every backend. */
    /* paged_kv_write into an FP8 cache: the k and v parts of qkv[n, :] (act) quantized into
     * kv_cache[slots[n], :] for n < N; slots[n] < 0 skipped, distinct. */
    void (*paged_kv_write_fp8)(void *kv_cache, const void *qkv, const int32_t *slots, int N, int nh, int nkv, int hd,
                               const float *k_scale, const float *v_scale);
    /* The k and v parts of qkv[n, :] (act, n < N) replaced in place by what an FP8 cache returns
     * for them: decode(code(x / scale)) * scale, with paged_kv_write_fp8's codes. Serving runs it
     * before a prompt's first chunk attends within itself on qkv (attention_forward_docs), so that
     * those rows see the keys and values that later rows read from the cache. */
    void (*paged_kv_round_fp8)(void *qkv, int N, int nh, int nkv, int hd, const float *k_scale, const float *v_scale);
    /* paged_attention over an FP8 cache: every key and value dequantized as it is read (fp32),
     * the rest as paged_attention (fp32 scores, online softmax and sums; out[N, Q] act). The
     * CPU multiplies each decoded element by its scale; CUDA folds k_scale into the query and
     * v_scale into the output (the same values up to fp32 rounding). */
    void (*paged_attention_fp8)(void *out, const void *qkv, const void *kv_cache, const int32_t *block_tables,
                                const int32_t *seq, const int32_t *pos, int N, int max_blocks, int block_size,
                                int nh, int nkv, int hd, const float *k_scale, const float *v_scale);
    /* out[M, C] act = x[rows[m], :] for m < M (the rows whose logits a step samples from).
     * rows: [M] i32 backend memory. */
    void (*gather_rows)(void *out, const void *x, const int32_t *rows, int M, int C);
    /* out[m] = the index of the largest of x[m, 0..V) for m < M (greedy decoding), as a scan
     * from index 0 that takes an element only when it is greater than the one held: the first
     * of equal maxima; a NaN is never taken, and a NaN at index 0 is kept (index 0). x: [M, V]
     * act; out: [M] i32 backend memory. */
    void (*argmax_rows)(int32_t *out, const void *x, int M, int V);

    /* ---- SwiGLU (Shazeer 2020): out[N,I] = silu(gate) * up, gate_up[N, 2I] = [gate | up] */
    void (*swiglu_forward)(void *out, const void *gate_up, int N, int I);
    /* dgate_up[N, 2I] (overwrite) from dout[N, I] and the saved gate_up. */
    void (*swiglu_backward)(void *dgate_up, const void *dout, const void *gate_up, int N, int I);
    /* Unfused twins (for the ablation): silu(gate) into tmp[N,I] act, then tmp * up; the
     * backward likewise in separate passes through tmp. Same results as the fused ops. */
    void (*swiglu_forward_unfused)(void *out, void *tmp, const void *gate_up, int N, int I);
    void (*swiglu_backward_unfused)(void *dgate_up, void *tmp, const void *dout, const void *gate_up, int N, int I);

    /* ---- lm_head + cross-entropy ----
     * Fused, in chunks of rows so that no [N, V] fp32 logits tensor exists:
     *   logits = x w^T; losses[n] = logsumexp(logits[n]) - logits[n, targets[n]] (f32, 0 where
     *   targets[n] < 0); if dx is not NULL: dlogits = (softmax - onehot) * dloss,
     *   dx[N,C] = dlogits w (overwrite), dw[V,C] += dlogits^T x.
     * x: [N,C] act; w: [V,C] param; targets: [N] i32 device. */
    void (*cross_entropy_fused)(float *losses, void *dx, void *dw, const void *x, const void *w,
                                const int32_t *targets, int N, int C, int V, float dloss, void *workspace);
    size_t (*cross_entropy_fused_workspace_bytes)(int N, int C, int V);
    /* Unfused twin, over full logits[N,V] act (from matmul_forward): writes losses[N] f32 and,
     * if dlogits is not NULL, dlogits[N,V] act (may alias logits). */
    void (*cross_entropy_forward_backward)(float *losses, void *dlogits, const void *logits, const int32_t *targets,
                                           int N, int V, float dloss);

    /* ---- vision tower (Qwen3-VL; HF transformers modeling_qwen3_vl.py, Qwen3VLVisionModel) ----
     * The CPU backend has them (ops/cpu/vision.c); NULL on a backend without them. The 2-D
     * RoPE of the tower and the text model's interleaved MRoPE use rope_forward_pos /
     * rope_backward_pos with one table row per token (pos[n] = n): model/vision.h builds the
     * rows. */
    /* LayerNorm (Ba et al. 2016; torch.nn.LayerNorm with weight and bias, biased variance):
     * out[N,C] act = (x - mean) * rstd * w + b; mean[N], rstd[N] f32 = 1/sqrt(var + eps) saved
     * for the backward. x: [N,C] act; w, b: [C] param. */
    void (*layernorm_forward)(void *out, float *mean, float *rstd, const void *x, const void *w, const void *b, int N,
                              int C, float eps);
    /* dx[N,C] act (= or += by dx_mode; skipped when dx is NULL) = rstd * (g - mean(g) - xhat *
     * mean(g * xhat)) with g = w * dout, xhat = (x - mean) * rstd; dw[C], db[C] grad (= or += by
     * dw_mode) = sum_n dout * xhat, sum_n dout. `workspace`: layernorm_backward_workspace_bytes. */
    void (*layernorm_backward)(void *dx, void *dw, void *db, const void *dout, const void *x, const void *w,
                               const float *mean, const float *rstd, int N, int C, lj_grad_mode dx_mode,
                               lj_grad_mode dw_mode, void *workspace);
    size_t (*layernorm_backward_workspace_bytes)(int N, int C);
    /* GELU (Hendrycks & Gimpel 2016), out[n] = gelu(x[n]) act, in place allowed. tanh = 0: the
     * exact form x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (torch.nn.GELU()); tanh = 1: PyTorch's
     * approximate="tanh" (HF "gelu_pytorch_tanh") 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
    void (*gelu_forward)(void *out, const void *x, int64_t n, int tanh);
    /* dx[n] act (overwrite; may alias dout) = dout * gelu'(x) of the same form. */
    void (*gelu_backward)(void *dx, const void *dout, const void *x, int64_t n, int tanh);
    /* Weighted embedding bag (torch.nn.EmbeddingBag, mode "sum", per_sample_weights): out[n,:] act
     * = sum over k < K, in that order, of w[n*K + k] * table[idx[n*K + k], :]. table: [R,C] param;
     * idx: [N*K] i32, w: [N*K] f32, both in backend memory. The position grid's bilinear
     * interpolation is K = 4 (model/vision.h). */
    void (*embedding_bag_forward)(void *out, const void *table, const int32_t *idx, const float *w, int N, int K,
                                  int C);
    /* dtable[idx[n*K+k], :] += w[n*K+k] * dout[n, :] (grad dtype), summed in a fixed order. */
    void (*embedding_bag_backward)(void *dtable, const void *dout, const int32_t *idx, const float *w, int N, int K,
                                   int C);
    /* Attention over packed variable-length segments (FlashAttention's varlen interface): rows
     * [cu_seqlens[s], cu_seqlens[s+1]) of qkv[N, QKV] act are segment s (nseg segments,
     * cu_seqlens[0] = 0, cu_seqlens[nseg] = N, i32 in backend memory); a query attends to every
     * key of its segment (causal = 0, the vision tower) or to the keys at or before it (causal
     * = 1); scale 1/sqrt(hd), GQA as attention_forward. out[N, Q] act; lse: nh*N f32 values
     * whose layout is the backend's (the backward reads what the forward wrote: [nh, N], or
     * [nseg, nh, max_seqlen] where a backend runs uniform segments as one dense attention).
     * max_seqlen: the longest segment; when nseg * max_seqlen == N every segment has that
     * length and a backend may run one dense attention of nseg x max_seqlen. workspace: as
     * sized by attention_varlen_workspace_bytes for at least N rows. */
    void (*attention_varlen_forward)(void *out, float *lse, const void *qkv, const int32_t *cu_seqlens, int nseg,
                                     int max_seqlen, int N, int nh, int nkv, int hd, int causal, void *workspace);
    /* dqkv[N, QKV] (overwrite) from dout[N, Q] and the saved qkv, out, lse (the forward's, with
     * the same cu_seqlens, nseg, max_seqlen, N, heads, causal and workspace). */
    void (*attention_varlen_backward)(void *dqkv, const void *dout, const void *qkv, const void *out,
                                      const float *lse, const int32_t *cu_seqlens, int nseg, int max_seqlen, int N,
                                      int nh, int nkv, int hd, int causal, void *workspace);
    /* Bytes of workspace either needs for up to max_seqlen rows in all (a bound on N, and so on
     * every segment's length: the planner passes the most patch rows). */
    size_t (*attention_varlen_workspace_bytes)(int max_seqlen, int nh, int nkv, int hd);
    /* Row gather: out[i, :] = x[idx[i], :] for i < M; out [M,C], x [R,C] act; idx [M] i32 in
     * backend memory (the rows of x at the image positions: DeepStack's gradient). */
    void (*rows_gather)(void *out, const void *x, const int32_t *idx, int M, int C);
    /* Row scatter: x[idx[i], :] = src[i, :] (mode OVERWRITE) or += src[i, :] (ACCUMULATE), for
     * i < M; src NULL with OVERWRITE writes zeros. Distinct idx. (The image splice into the
     * embedding output, and DeepStack's add after a decoder layer.) */
    void (*rows_scatter)(void *x, const void *src, const int32_t *idx, int M, int C, lj_grad_mode mode);

    /* ---- optimizer ---- */
    /* out[0] (f32, device) = sum of squares of grad[n] (grad dtype). */
    void (*global_norm_sq)(float *out, const void *grad, int64_t n, void *workspace);
    size_t (*global_norm_workspace_bytes)(int64_t n);
    /* AdamW over every segment of the flat buffers, in one pass. master[n] f32 is updated;
     * params[n] (param dtype) receives the rounded copy, unless params == master (CPU) or the
     * segment is master_only (its part of params is left as it is).
     * hp: the fixed hyper-parameters (by value: baked into a captured graph);
     * step_scalars: [G][LJ_ADAMW_NUM_SCALARS] f32 in backend memory, G above every segment's
     * lr_group (lj_adamw_step_scalars per group, uploaded before the op runs; read on the
     * device, so a replayed graph uses each step's);
     * grad_norm_sq: the device f32 written by global_norm_sq (read for clipping). A grad_norm_sq
     * that is inf or NaN skips the step: nothing is written (Megatron-LM's skipped iteration).
     * m[n] and v[n] are of hp->exp_avg_dtype and hp->exp_avg_sq_dtype. */
    void (*adamw_update)(void *params, float *master, const void *grad, void *m, void *v,
                         const lj_adamw_segment *segments, int num_segments, const lj_adamw_hparams *hp,
                         const float *step_scalars, const float *grad_norm_sq);

    /* ---- graphs (NULL on backends without them) ----
     * Between capture_begin and capture_end the ops issued are recorded, not run; the
     * returned graph replays them with the same pointers and arguments. Every op above is
     * capturable except the memory entries that allocate, upload, download or synchronize:
     * inputs that change between replays (the batch, the AdamW step scalars) are uploaded
     * into their buffers before graph_launch, which runs in stream order after them. */
    lj_status (*graph_capture_begin)(void);
    lj_status (*graph_capture_end)(void **graph);
    void (*graph_launch)(void *graph);
    void (*graph_destroy)(void *graph);

    /* ---- profiling (NULL on backends without a profiler: the CPU) ----
     * range_push / range_pop: a named NVTX range on the calling thread (nvtxRangePushA /
     * nvtxRangePop; Nsight Systems shows them on its NVTX row, nested in push order). A host
     * event: pushed while a graph is captured, a range does not come back when the graph is
     * replayed. `name` is copied. The caller decides when ranges are on (without a profiler
     * attached each call still costs a function call, so a run calls them only while it
     * profiles).
     * profiler_start / profiler_stop: the CUDA profiler's capture range (cudaProfilerStart /
     * cudaProfilerStop: `nsys profile --capture-range=cudaProfilerApi` records between them; without
     * a profiler attached they do nothing). Errors: LJ_ERR_DEVICE naming the call. */
    void (*range_push)(const char *name);
    void (*range_pop)(void);
    lj_status (*profiler_start)(void);
    lj_status (*profiler_stop)(void);
};

/* The CPU backend (C + OpenMP + OpenBLAS). Always available. lj_ops_cpu() is the table of the
 * default configuration; lj_ops_cpu_open that of `cfg` (NULL: the default), of which the CPU
 * reads `deterministic` only (its ops are deterministic either way; the table records the
 * mode the run asked for). */
const lj_ops *lj_ops_cpu(void);
const lj_ops *lj_ops_cpu_open(const lj_ops_config *cfg);

/* The CUDA backend's table of configuration `cfg` (NULL: LJ_OPS_CONFIG_DEFAULT), starting the
 * device on the first call (with cfg's start-up fields). NULL with a message (lj_error_message)
 * when this build has no CUDA, no usable GPU is present, or cfg is not a configuration of the
 * backend (a gradient dtype other than bf16 and fp32, m-tiles other than 0, 1, 2). Each
 * configuration is its own constant table: the planner prices a what-if by opening (or
 * describing) another one. */
const lj_ops *lj_ops_cuda_open(const lj_ops_config *cfg);

/* How many CUDA devices this process sees (cudaGetDeviceCount; it starts no device and allocates
 * nothing, so a launcher may ask before it starts its workers); 0 without CUDA or a GPU. */
int lj_ops_cuda_device_count(void);

/* The CUDA backend's table of `cfg` reduced to its name, dtypes, configuration and
 * workspace-size entries (every other entry NULL), without touching a device: for planning GPU
 * runs on a machine without one. The attention workspace is the size cuDNN reports on an H200
 * (ops/cuda/attention.cu), since cuDNN cannot be asked without a device. NULL when this build
 * has no CUDA or cfg is not a configuration of the backend (as lj_ops_cuda_open). */
const lj_ops *lj_ops_cuda_describe(const lj_ops_config *cfg);

/* Whether the causal attention backward of `ops` at this shape gives the same bits on every
 * run: always on the CPU; on the CUDA backend only when cuDNN runs it with its deterministic
 * backward (the table opened in deterministic mode with attention AUTO, cuDNN found, head_dim
 * 64 or 128, the device started). */
int lj_ops_attention_deterministic(const lj_ops *ops, int B, int T, int nh, int nkv, int hd);

/* Whether this GPU and toolkit can run the FP8 linear recipe (model/linear.h): a GPU with FP8
 * tensor cores (compute capability 8.9 or 9.x; this build's kernels are sm_90a) and cuBLASLt's
 * FP8 GEMM. Errors: LJ_ERR_UNSUPPORTED naming what is missing (also in a build without CUDA).
 * Call after lj_ops_cuda_open(). */
lj_status lj_ops_cuda_fp8_check(void);

/* Whether this GPU and cuBLASLt can run the blockwise FP8 recipe (--fp8-recipe blockwise): a
 * Hopper GPU (compute capability 9.x: cuBLASLt's 1x128 / 128x128 scale modes exist only there)
 * and cuBLASLt 12.9 or later, at run time (cublasLtGetVersion) and in this build's headers.
 * Errors: LJ_ERR_UNSUPPORTED naming what is missing (also in a build without CUDA). Call after
 * lj_ops_cuda_fp8_check. */
lj_status lj_ops_cuda_fp8_blockwise_check(void);

/* Bytes that `ops->alloc` has handed out and not freed (for the plan-equals-allocation
 * test and for the benchmark's "planned" figure). */
size_t lj_ops_allocated_bytes(void);

/* Records an allocation of `bytes` (>0) at `ptr` or the free (<0) of it; backends call it. */
void lj_ops_track(const void *ptr, int64_t bytes);

/* The allocator's history (--record-memory-history): while on, every allocation and free that
 * the backends track (lj_ops_track) is kept with its time, address and size, in order. */
typedef struct {
    double time_sec;  /* lj_time_sec() at the call */
    const void *ptr;  /* the allocation's address */
    int64_t bytes;    /* > 0: allocated; < 0: freed */
    size_t allocated; /* lj_ops_allocated_bytes() after it */
} lj_ops_memory_event;

/* Starts the history (forgetting any earlier one) with on = 1; stops recording with 0 (what was
 * recorded stays readable). At most 100000 events are kept (the first ones: a run allocates
 * once, at set-up); the rest are counted. */
void lj_ops_memory_history(int on);

/* What lj_ops_memory_events reports besides the events. */
typedef struct {
    double start_sec; /* lj_time_sec() when recording started */
    size_t baseline;  /* bytes allocated then */
    size_t peak;      /* the most allocated at any time since (>= baseline) */
    int64_t dropped;  /* events past the limit, not kept */
} lj_ops_memory_summary;

/* A copy of the recorded events ([*count], malloc'd: free it; NULL when there are none) and the
 * summary (`sum` may be NULL). */
lj_ops_memory_event *lj_ops_memory_events(int *count, lj_ops_memory_summary *sum);

#endif
