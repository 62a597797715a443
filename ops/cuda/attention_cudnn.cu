/* attention_cudnn.cu: causal GQA attention forward and backward on cuDNN's fused
 * flash-attention (SDPA) engines, behind the op table's attention entries (dispatch in
 * attention.cu; the own kernels stay the fallback), and the same without the mask
 * (bidirectional, "full") behind attention_varlen when every segment has one length
 * (vision_attention.cu: the vision tower's images of one resolution).
 *
 * The graphs are built with the cuDNN backend API (cudnn_graph.h: descriptors, operation
 * graph, engine heuristics, execution plan, variant pack), as cudnn-frontend's composite SDPA
 * nodes lower them (NVIDIA/cudnn-frontend, include/cudnn_frontend/node/
 * scaled_dot_product_flash_attention.h and softmax.h; the causal mask of
 * attn::score_modifiers::causal_mask):
 *   forward   S = Q K^T * scale; causal mask (GEN_INDEX row >= col, else -FLT_MAX; left out
 *             in the full graphs);
 *             M = rowmax S; E = exp(S - M); Z = rowsum E; stats = M + log Z; O = (E / Z) V
 *   backward  Dsum = rowsum(dO * O); P = exp(mask(Q K^T * scale) - stats); dV = P^T dO;
 *             dS = P (dO V^T - Dsum) * scale; dK = dS^T Q; dQ = dS K (fp32 accumulator)
 * with K/V of nkv heads broadcast over the nh query heads (GQA; dK and dV reduced over each
 * group by the graph). stats is [B, nh, T, 1] f32, the natural-log log-sum-exp of the scaled,
 * masked scores: exactly the op table's lse [B, nh, T], so either backward accepts either
 * forward's lse.
 *
 * Tensors are described by strides straight on the op table's layouts: qkv [B*T, QKV] rows
 * hold the q heads, then the k heads, then the v heads (QKV = (nh + 2 nkv) hd), so Q is
 * dims [B, nh, T, hd] with strides [T*QKV, hd, QKV, 1], K and V likewise with nkv heads; out
 * and dout are [B*T, nh*hd]. No copy, no transpose.
 *
 * libcudnn_graph.so.9 is opened with dlopen on first use (the start-up configuration's
 * cudnn_library, LJ_CUDNN_LIBRARY where the CLI resolves it, names another
 * file), so the binary runs where cuDNN is missing, with the own kernels. Plans are built per
 * shape when the workspace is sized (attention_workspace_bytes, called at planning time,
 * before any CUDA-graph capture) or on the first uncaptured call, and cached for the
 * process's life; the full plans (keyed apart from the causal ones) on the first uncaptured
 * forward of their shape only. Nothing is built while the stream is capturing. */
#include "ops/cuda/cuda_common.h"

#include "base/fs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>



#ifndef LJ_HAVE_CUDNN

/* Built without cuDNN's headers: the own kernels always run. */
void lj_cuda_cudnn_attention_init(const char *) {}
int lj_cuda_cudnn_attention_active(int, int, int, int, int, int) { return 0; }
int lj_cuda_cudnn_attention_deterministic(int, int, int, int, int) { return 0; }
const char *lj_cuda_cudnn_attention_describe(void) { return "cuDNN attention: not built (no cuDNN headers)"; }
size_t lj_cuda_cudnn_attention_workspace_bytes(int, int, int, int, int, int) { return 0; }
int lj_cuda_cudnn_attention_forward(void *, float *, const void *, int, int, int, int, int, void *, int) { return 0; }
int lj_cuda_cudnn_attention_backward(void *, const void *, const void *, const void *, const float *, int, int, int,
                                     int, int, float *, float *, void *, int) {
    return 0;
}
int lj_cuda_cudnn_attention_full_forward(void *, float *, const void *, int, int, int, int, int, void *, size_t) {
    return 0;
}
int lj_cuda_cudnn_attention_full_backward(void *, const void *, const void *, const void *, const float *, int, int,
                                          int, int, int, float *, float *, void *, size_t) {
    return 0;
}
int lj_cuda_cudnn_attention_full_active(int, int, int, int, int, size_t) { return 0; }

#else

#include <cudnn_graph.h>
#include <dlfcn.h>

/* Messages are cut to their buffers on purpose (as the C build's -Wno-format-truncation). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include <float.h>
#include <math.h>

typedef cudnnBackendDescriptor_t cdesc;

/* The entry points taken from the library with dlsym. */
#define LJ_CUDNN_FUNCTIONS(X)                                                                           \
    X(cudnnGetVersion)                                                                                  \
    X(cudnnCreate)                                                                                      \
    X(cudnnSetStream)                                                                                   \
    X(cudnnGetErrorString)                                                                              \
    X(cudnnGetLastErrorString)                                                                          \
    X(cudnnBackendCreateDescriptor)                                                                     \
    X(cudnnBackendDestroyDescriptor)                                                                    \
    X(cudnnBackendSetAttribute)                                                                         \
    X(cudnnBackendGetAttribute)                                                                         \
    X(cudnnBackendFinalize)                                                                             \
    X(cudnnBackendExecute)

/* Tensor ids of the variant packs (virtual tensors take ids from LJ_UID_VIRTUAL on). */
enum {
    LJ_UID_Q = 1, LJ_UID_K, LJ_UID_V, LJ_UID_O, LJ_UID_STATS, LJ_UID_SCALE, LJ_UID_LOWEST, LJ_UID_ONE, LJ_UID_DO,
    LJ_UID_DQ, LJ_UID_DK, LJ_UID_DV, LJ_UID_SOFTMAX_SUM, LJ_UID_DQ_ACCUM, LJ_UID_VIRTUAL = 100
};

#define LJ_CUDNN_MAX_ENTRIES 64 /* shapes; the planner's searches size several */
#define LJ_GB_MAX_DESCS 224
#define LJ_GB_MAX_OPS 48

/* One shape's plans. bwd_variant 2 (deterministic mode, the table's configuration): softmax_sum a
 * workspace tensor and dQ = dS K written straight to dQ, with no fp32 accumulator, which makes
 * cuDNN pick its deterministic Hopper kernels (cudnn-frontend's set_deterministic_algorithm
 * lowers to this graph); 1: the same with dQ accumulated in an fp32 workspace tensor, in an
 * order that changes from run to run once a query tile sums over more than two key tiles (the
 * frontend 1.x's default for cuDNN >= 9); 0: softmax_sum virtual, dQ accumulator in the F16x16
 * reordering, dP * 1 (the frontend's lowering for cuDNN 9.0-9.5), tried when 1 finds no
 * engine. */
typedef struct {
    int B, T, nh, nkv, hd, det; /* det: built for deterministic mode (variant 2 tried first) */
    int causal;                 /* 1: the causal mask (attention_forward); 0: none (full) */
    int ok, warned;
    int reported; /* its workspace was reported by attention_workspace_bytes (so callers hold it) */
    cdesc fwd, bwd;
    int64_t fwd_ws, bwd_ws, fwd_engine, bwd_engine;
    int bwd_variant;
    double build_s;
    float scale, lowest, one;
    char why[200]; /* when !ok */
} lj_cudnn_entry;

/* The backend's cuDNN state (created on first use, lives until the process ends). */
static struct {
    int backend_up;  /* lj_cuda_cudnn_attention_init ran (the CUDA backend is started) */
    char library[LJ_PATH_MAX]; /* the library to load (the start-up configuration's; empty: the default) */
    int load_tried, loaded;
    void *lib;
#define LJ_X(f) decltype(&::f) p_##f;
    LJ_CUDNN_FUNCTIONS(LJ_X)
#undef LJ_X
    cudnnHandle_t handle;
    size_t version;
    char lib_name[160];
    char status[400];
    lj_cudnn_entry entries[LJ_CUDNN_MAX_ENTRIES];
    int num_entries;
} g_dnn;

/* ---- loading --------------------------------------------------------------------------- */

static int cudnn_load(void) {
    if (g_dnn.load_tried) return g_dnn.loaded;
    g_dnn.load_tried = 1;
    const char *path = g_dnn.library[0] ? g_dnn.library : "libcudnn_graph.so.9";
    snprintf(g_dnn.lib_name, sizeof g_dnn.lib_name, "%s", path);
    g_dnn.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!g_dnn.lib) {
        const char *e = dlerror();
        snprintf(g_dnn.status, sizeof g_dnn.status,
                 "cuDNN attention: unavailable (dlopen %s: %s; set LJ_CUDNN_LIBRARY to libcudnn_graph.so.9's path)",
                 path, e ? e : "?");
        return 0;
    }
#define LJ_X(f)                                                                                         \
    g_dnn.p_##f = (decltype(g_dnn.p_##f))dlsym(g_dnn.lib, #f);                                          \
    if (!g_dnn.p_##f) {                                                                                 \
        snprintf(g_dnn.status, sizeof g_dnn.status, "cuDNN attention: unavailable (%s lacks %s)", path, #f); \
        return 0;                                                                                       \
    }
    LJ_CUDNN_FUNCTIONS(LJ_X)
#undef LJ_X
    g_dnn.version = g_dnn.p_cudnnGetVersion();
    if (g_dnn.version < 90000) {
        snprintf(g_dnn.status, sizeof g_dnn.status, "cuDNN attention: unavailable (%s is version %zu; 9.0+ needed)",
                 path, g_dnn.version);
        return 0;
    }
    cudnnStatus_t s = g_dnn.p_cudnnCreate(&g_dnn.handle);
    if (s == CUDNN_STATUS_SUCCESS) s = g_dnn.p_cudnnSetStream(g_dnn.handle, lj_cuda_stream());
    if (s != CUDNN_STATUS_SUCCESS) {
        snprintf(g_dnn.status, sizeof g_dnn.status, "cuDNN attention: unavailable (cudnnCreate: %s)",
                 g_dnn.p_cudnnGetErrorString(s));
        return 0;
    }
    snprintf(g_dnn.status, sizeof g_dnn.status, "cuDNN attention: cuDNN %zu.%zu.%zu (%s)", g_dnn.version / 10000,
             g_dnn.version / 100 % 100, g_dnn.version % 100, path);
    g_dnn.loaded = 1;
    return 1;
}

/* ---- graph builder ----------------------------------------------------------------------- */

/* Every descriptor of one graph (kept alive with the plan) and its operations; the first
 * failing call is recorded (later calls do nothing). */
typedef struct {
    cdesc all[LJ_GB_MAX_DESCS];
    int n;
    cdesc ops[LJ_GB_MAX_OPS];
    int nops;
    int64_t next_uid;
    cudnnStatus_t st;
    char why[200];
} lj_gb;

static void gb_fail(lj_gb *b, cudnnStatus_t s, const char *what) {
    if (b->st != CUDNN_STATUS_SUCCESS) return;
    b->st = s == CUDNN_STATUS_SUCCESS ? CUDNN_STATUS_BAD_PARAM : s;
    char last[120] = "";
    g_dnn.p_cudnnGetLastErrorString(last, sizeof last);
    snprintf(b->why, sizeof b->why, "%s: %s%s%s", what, g_dnn.p_cudnnGetErrorString(b->st), last[0] ? ": " : "", last);
}

static cdesc gb_make(lj_gb *b, cudnnBackendDescriptorType_t type, const char *what) {
    if (b->st != CUDNN_STATUS_SUCCESS) return NULL;
    if (b->n == LJ_GB_MAX_DESCS) {
        gb_fail(b, CUDNN_STATUS_BAD_PARAM, "too many descriptors");
        return NULL;
    }
    cdesc d = NULL;
    cudnnStatus_t s = g_dnn.p_cudnnBackendCreateDescriptor(type, &d);
    if (s != CUDNN_STATUS_SUCCESS) {
        gb_fail(b, s, what);
        return NULL;
    }
    b->all[b->n++] = d;
    return d;
}

static void gb_set(lj_gb *b, cdesc d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                   const void *value, const char *what) {
    if (b->st != CUDNN_STATUS_SUCCESS) return;
    cudnnStatus_t s = g_dnn.p_cudnnBackendSetAttribute(d, name, type, count, value);
    if (s != CUDNN_STATUS_SUCCESS) gb_fail(b, s, what);
}

static void gb_link(lj_gb *b, cdesc d, cudnnBackendAttributeName_t name, cdesc value, const char *what) {
    gb_set(b, d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value, what);
}

static void gb_finalize(lj_gb *b, cdesc d, const char *what) {
    if (b->st != CUDNN_STATUS_SUCCESS) return;
    cudnnStatus_t s = g_dnn.p_cudnnBackendFinalize(d);
    if (s != CUDNN_STATUS_SUCCESS) gb_fail(b, s, what);
}

static void gb_push(lj_gb *b, cdesc op) {
    if (b->st != CUDNN_STATUS_SUCCESS) return;
    if (b->nops == LJ_GB_MAX_OPS) {
        gb_fail(b, CUDNN_STATUS_BAD_PARAM, "too many operations");
        return;
    }
    b->ops[b->nops++] = op;
}

/* A tensor: dims and strides [4] in elements; uid 0 takes a fresh virtual id. */
static cdesc gb_tensor(lj_gb *b, int64_t uid, cudnnDataType_t dtype, const int64_t dim[4], const int64_t stride[4],
                       bool is_virtual, bool by_value, bool reorder_f16x16) {
    cdesc t = gb_make(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor descriptor");
    if (uid == 0) uid = b->next_uid++;
    int64_t align = 16;
    gb_set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor id");
    gb_set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype, "tensor data type");
    gb_set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, "tensor dims");
    gb_set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride, "tensor strides");
    gb_set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    if (is_virtual) gb_set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor virtual");
    if (by_value) gb_set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by value");
    if (reorder_f16x16) {
        cudnnBackendTensorReordering_t r = CUDNN_TENSOR_REORDERING_F16x16;
        gb_set(b, t, CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &r, "tensor reordering");
    }
    gb_finalize(b, t, "tensor finalize");
    return t;
}

static cdesc gb_virtual(lj_gb *b, cudnnDataType_t dtype, const int64_t dim[4], const int64_t stride[4]) {
    return gb_tensor(b, 0, dtype, dim, stride, true, false, false);
}

/* A host float passed by value (its address goes in the variant pack). */
static cdesc gb_scalar(lj_gb *b, int64_t uid) {
    const int64_t one[4] = {1, 1, 1, 1};
    return gb_tensor(b, uid, CUDNN_DATA_FLOAT, one, one, false, true, false);
}

/* y = mode(x[, b[, t]]) at precision prec; axis >= 0 for GEN_INDEX. Returns y. */
static cdesc gb_pointwise(lj_gb *b, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cdesc x, cdesc in_b, cdesc in_t,
                          cdesc y, int64_t axis) {
    cdesc pw = gb_make(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise descriptor");
    gb_set(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    gb_set(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    if (axis >= 0) gb_set(b, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    gb_finalize(b, pw, "pointwise finalize");
    cdesc op = gb_make(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
    gb_link(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, "pointwise op descriptor");
    gb_link(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "pointwise x");
    if (in_b) gb_link(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, in_b, "pointwise b");
    if (in_t) gb_link(b, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, in_t, "pointwise t");
    gb_link(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "pointwise y");
    gb_finalize(b, op, "pointwise operation finalize");
    gb_push(b, op);
    return y;
}

static cdesc gb_reduction(lj_gb *b, cudnnReduceTensorOp_t mode, cdesc x, cdesc y) {
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cdesc r = gb_make(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction descriptor");
    gb_set(b, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, "reduction operator");
    gb_set(b, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "reduction precision");
    gb_finalize(b, r, "reduction finalize");
    cdesc op = gb_make(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation");
    gb_link(b, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r, "reduction op descriptor");
    gb_link(b, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, "reduction x");
    gb_link(b, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, "reduction y");
    gb_finalize(b, op, "reduction operation finalize");
    gb_push(b, op);
    return y;
}

/* c = a b over the last two dims (batch dims broadcast: K/V heads over the query heads). */
static cdesc gb_matmul(lj_gb *b, cdesc a, cdesc bb, cdesc c) {
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cdesc m = gb_make(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul descriptor");
    gb_set(b, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "matmul precision");
    gb_finalize(b, m, "matmul finalize");
    cdesc op = gb_make(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation");
    gb_link(b, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, "matmul a");
    gb_link(b, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, bb, "matmul b");
    gb_link(b, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, "matmul c");
    gb_link(b, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, m, "matmul op descriptor");
    gb_finalize(b, op, "matmul operation finalize");
    gb_push(b, op);
    return c;
}

/* y = x seen through y's dims and strides (a transpose of a virtual or input tensor). */
static cdesc gb_reshape(lj_gb *b, cdesc x, cdesc y) {
    cdesc op = gb_make(b, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape operation");
    gb_link(b, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x, "reshape x");
    gb_link(b, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y, "reshape y");
    gb_finalize(b, op, "reshape operation finalize");
    gb_push(b, op);
    return y;
}

/* Top-left causal mask of scores x [B, nh, T, T]: keep row >= col, else -FLT_MAX (lowest). */
static cdesc gb_causal(lj_gb *b, cdesc x, cdesc lowest, const int64_t dim[4], const int64_t stride[4]) {
    cdesc row = gb_pointwise(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, NULL, NULL,
                             gb_virtual(b, CUDNN_DATA_INT32, dim, stride), 2);
    cdesc col = gb_pointwise(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, NULL, NULL,
                             gb_virtual(b, CUDNN_DATA_INT32, dim, stride), 3);
    cdesc keep = gb_pointwise(b, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL,
                              gb_virtual(b, CUDNN_DATA_BOOLEAN, dim, stride), -1);
    return gb_pointwise(b, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, lowest, keep,
                        gb_virtual(b, CUDNN_DATA_FLOAT, dim, stride), -1);
}

/* The operation graph of b's ops, then the first engine configuration (heuristics mode A,
 * then the fallback list) whose plan finalizes. Returns the plan or NULL (b->why says why). */
static cdesc gb_plan(lj_gb *b, int64_t *ws_bytes, int64_t *engine) {
    cdesc graph = gb_make(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    gb_set(b, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &g_dnn.handle, "graph handle");
    gb_set(b, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, b->nops, b->ops, "graph ops");
    gb_finalize(b, graph, "operation graph finalize");
    if (b->st != CUDNN_STATUS_SUCCESS) return NULL;
    char last_fail[200] = "heuristics returned no engine configuration";
    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    for (int mi = 0; mi < 2; mi++) {
        cdesc heur = gb_make(b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
        gb_link(b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics graph");
        gb_set(b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[mi], "heuristics mode");
        gb_finalize(b, heur, "heuristics finalize");
        if (b->st != CUDNN_STATUS_SUCCESS) {
            /* no heuristics of this mode for the graph: try the next mode */
            snprintf(last_fail, sizeof last_fail, "%s", b->why);
            b->st = CUDNN_STATUS_SUCCESS;
            continue;
        }
        int64_t count = 0;
        if (g_dnn.p_cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                             &count, NULL) != CUDNN_STATUS_SUCCESS)
            count = 0;
        if (count > 8) count = 8;
        cdesc cfgs[8];
        int64_t got = 0;
        for (int64_t i = 0; i < count; i++) cfgs[i] = gb_make(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
        if (count > 0 && b->st == CUDNN_STATUS_SUCCESS &&
            g_dnn.p_cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                             &got, cfgs) != CUDNN_STATUS_SUCCESS)
            got = 0;
        for (int64_t i = 0; i < got; i++) {
            cdesc plan = NULL;
            if (g_dnn.p_cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) !=
                CUDNN_STATUS_SUCCESS)
                break;
            cudnnStatus_t s = g_dnn.p_cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                                               CUDNN_TYPE_HANDLE, 1, &g_dnn.handle);
            if (s == CUDNN_STATUS_SUCCESS)
                s = g_dnn.p_cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
            if (s == CUDNN_STATUS_SUCCESS) s = g_dnn.p_cudnnBackendFinalize(plan);
            if (s != CUDNN_STATUS_SUCCESS) {
                char last[120] = "";
                g_dnn.p_cudnnGetLastErrorString(last, sizeof last);
                snprintf(last_fail, sizeof last_fail, "plan finalize: %s%s%s", g_dnn.p_cudnnGetErrorString(s),
                         last[0] ? ": " : "", last);
                g_dnn.p_cudnnBackendDestroyDescriptor(plan);
                continue;
            }
            int64_t n = 0;
            *ws_bytes = 0;
            g_dnn.p_cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                             ws_bytes);
            *engine = -1;
            cdesc eng = NULL;
            if (g_dnn.p_cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) == CUDNN_STATUS_SUCCESS) {
                if (g_dnn.p_cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) == CUDNN_STATUS_SUCCESS)
                    g_dnn.p_cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                                     engine);
                g_dnn.p_cudnnBackendDestroyDescriptor(eng);
            }
            return plan;
        }
    }
    snprintf(b->why, sizeof b->why, "%s", last_fail);
    b->st = CUDNN_STATUS_NOT_SUPPORTED;
    return NULL;
}

/* ---- the two graphs ------------------------------------------------------------------- */

/* Dims and strides (elements) of one shape's tensors on the op table's layouts. */
typedef struct {
    int64_t q_dim[4], q_str[4];   /* Q, dQ in qkv/dqkv: [B, nh, T, hd] */
    int64_t kv_dim[4], kv_str[4]; /* K, V, dK, dV: [B, nkv, T, hd] */
    int64_t kt_dim[4], kt_str[4]; /* K^T, V^T: [B, nkv, hd, T] */
    int64_t o_str[4];             /* O, dO: [B*T, nh*hd] as [B, nh, T, hd] */
    int64_t s_dim[4], s_str[4];   /* scores [B, nh, T, T] */
    int64_t st_str[4];            /* scores transposed [B, nh, T(kv), T(q)] */
    int64_t r_dim[4], r_str[4];   /* per row [B, nh, T, 1] (stats, softmax_sum) */
    int64_t full_str[4];          /* packed [B, nh, T, hd] (dQ accumulator, per-head dK/dV) */
    int64_t dodo_str[4];          /* dO * O, as cudnn-frontend gives it */
} lj_att_layout;

static lj_att_layout att_layout(int B, int T, int nh, int nkv, int hd) {
    const int64_t b = B, s = T, h = nh, hk = nkv, d = hd, row = (int64_t)(nh + 2 * nkv) * hd;
    lj_att_layout L = {{b, h, s, d},      {s * row, d, row, 1}, {b, hk, s, d},     {s * row, d, row, 1},
                       {b, hk, d, s},     {s * row, d, 1, row}, {s * h * d, d, h * d, 1},
                       {b, h, s, s},      {h * s * s, s * s, s, 1}, {h * s * s, s * s, 1, s},
                       {b, h, s, 1},      {h * s, s, 1, 1},     {h * s * d, s * d, d, 1},
                       {h * s * d, s * d, h * d, 1}};
    return L;
}

/* causal 0 leaves the mask out, and with it the lowest scalar (LJ_UID_LOWEST is then not in
 * the graph, so not in its variant packs). */
static void build_forward(lj_gb *b, const lj_att_layout *L, int causal) {
    const cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
    cdesc Q = gb_tensor(b, LJ_UID_Q, bf, L->q_dim, L->q_str, false, false, false);
    cdesc KT = gb_tensor(b, LJ_UID_K, bf, L->kt_dim, L->kt_str, false, false, false);
    cdesc V = gb_tensor(b, LJ_UID_V, bf, L->kv_dim, L->kv_str, false, false, false);
    cdesc O = gb_tensor(b, LJ_UID_O, bf, L->q_dim, L->o_str, false, false, false);
    cdesc stats = gb_tensor(b, LJ_UID_STATS, f32, L->r_dim, L->r_str, false, false, false);
    cdesc scale = gb_scalar(b, LJ_UID_SCALE), lowest = causal ? gb_scalar(b, LJ_UID_LOWEST) : NULL;
    const int64_t *sd = L->s_dim, *ss = L->s_str, *rd = L->r_dim, *rs = L->r_str;

    cdesc s = gb_matmul(b, Q, KT, gb_virtual(b, f32, sd, ss));
    s = gb_pointwise(b, CUDNN_POINTWISE_MUL, f32, s, scale, NULL, gb_virtual(b, f32, sd, ss), -1);
    if (causal) s = gb_causal(b, s, lowest, sd, ss);
    cdesc m = gb_reduction(b, CUDNN_REDUCE_TENSOR_MAX, s, gb_virtual(b, f32, rd, rs));
    cdesc e = gb_pointwise(b, CUDNN_POINTWISE_SUB, f32, s, m, NULL, gb_virtual(b, f32, sd, ss), -1);
    e = gb_pointwise(b, CUDNN_POINTWISE_EXP, f32, e, NULL, NULL, gb_virtual(b, f32, sd, ss), -1);
    cdesc z = gb_reduction(b, CUDNN_REDUCE_TENSOR_ADD, e, gb_virtual(b, f32, rd, rs));
    cdesc lz = gb_pointwise(b, CUDNN_POINTWISE_LOG, f32, z, NULL, NULL, gb_virtual(b, f32, rd, rs), -1);
    gb_pointwise(b, CUDNN_POINTWISE_ADD, f32, m, lz, NULL, stats, -1);
    cdesc p = gb_pointwise(b, CUDNN_POINTWISE_DIV, f32, e, z, NULL, gb_virtual(b, bf, sd, ss), -1);
    gb_matmul(b, p, V, O);
}

static void build_backward(lj_gb *b, const lj_att_layout *L, int variant, int causal) {
    const cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
    const int gqa = L->q_dim[1] != L->kv_dim[1];
    cdesc Q = gb_tensor(b, LJ_UID_Q, bf, L->q_dim, L->q_str, false, false, false);
    cdesc KT = gb_tensor(b, LJ_UID_K, bf, L->kt_dim, L->kt_str, false, false, false);
    cdesc VT = gb_tensor(b, LJ_UID_V, bf, L->kt_dim, L->kt_str, false, false, false);
    cdesc O = gb_tensor(b, LJ_UID_O, bf, L->q_dim, L->o_str, false, false, false);
    cdesc dO = gb_tensor(b, LJ_UID_DO, bf, L->q_dim, L->o_str, false, false, false);
    cdesc stats = gb_tensor(b, LJ_UID_STATS, f32, L->r_dim, L->r_str, false, false, false);
    cdesc dQ = gb_tensor(b, LJ_UID_DQ, bf, L->q_dim, L->q_str, false, false, false);
    cdesc dK = gb_tensor(b, LJ_UID_DK, bf, L->kv_dim, L->kv_str, false, false, false);
    cdesc dV = gb_tensor(b, LJ_UID_DV, bf, L->kv_dim, L->kv_str, false, false, false);
    cdesc scale = gb_scalar(b, LJ_UID_SCALE), one = gb_scalar(b, LJ_UID_ONE);
    cdesc lowest = causal ? gb_scalar(b, LJ_UID_LOWEST) : NULL;
    const int64_t *sd = L->s_dim, *ss = L->s_str, *rd = L->r_dim, *rs = L->r_str;

    /* softmax_sum = rowsum(dO * O) */
    cdesc t = gb_pointwise(b, CUDNN_POINTWISE_MUL, f32, dO, O, NULL, gb_virtual(b, f32, L->q_dim, L->dodo_str), -1);
    t = gb_reduction(b, CUDNN_REDUCE_TENSOR_ADD, t, gb_virtual(b, f32, rd, rs));
    cdesc ssum = variant >= 1 ? gb_tensor(b, LJ_UID_SOFTMAX_SUM, f32, rd, rs, false, false, false)
                              : gb_virtual(b, f32, rd, rs);
    gb_pointwise(b, CUDNN_POINTWISE_MUL, f32, t, one, NULL, ssum, -1);

    /* P = exp(mask(Q K^T * scale) - stats); dV = P^T dO (summed over each kv group) */
    cdesc s = gb_matmul(b, Q, KT, gb_virtual(b, f32, sd, ss));
    s = gb_pointwise(b, CUDNN_POINTWISE_MUL, f32, s, scale, NULL, gb_virtual(b, f32, sd, ss), -1);
    if (causal) s = gb_causal(b, s, lowest, sd, ss);
    s = gb_pointwise(b, CUDNN_POINTWISE_SUB, f32, s, stats, NULL, gb_virtual(b, f32, sd, ss), -1);
    cdesc p = gb_pointwise(b, CUDNN_POINTWISE_EXP, f32, s, NULL, NULL, gb_virtual(b, f32, sd, ss), -1);
    cdesc pt = gb_reshape(b, p, gb_virtual(b, bf, sd, L->st_str));
    if (!gqa) {
        gb_matmul(b, pt, dO, dV);
    } else {
        cdesc dvh = gb_matmul(b, pt, dO, gb_virtual(b, bf, L->q_dim, L->full_str));
        gb_reduction(b, CUDNN_REDUCE_TENSOR_ADD, dvh, dV);
    }

    /* dS = P (dO V^T - softmax_sum) * scale; dK = dS^T Q; dQ = dS K */
    cdesc dp = gb_matmul(b, dO, VT, gb_virtual(b, f32, sd, ss));
    if (variant == 0) dp = gb_pointwise(b, CUDNN_POINTWISE_MUL, f32, dp, one, NULL, gb_virtual(b, f32, sd, ss), -1);
    cdesc ds = gb_pointwise(b, CUDNN_POINTWISE_SUB, f32, dp, ssum, NULL, gb_virtual(b, f32, sd, ss), -1);
    ds = gb_pointwise(b, CUDNN_POINTWISE_MUL, f32, ds, p, NULL, gb_virtual(b, f32, sd, ss), -1);
    ds = gb_pointwise(b, CUDNN_POINTWISE_MUL, f32, ds, scale, NULL, gb_virtual(b, f32, sd, ss), -1);
    cdesc dst = gb_reshape(b, ds, gb_virtual(b, bf, sd, L->st_str));
    if (!gqa) {
        gb_matmul(b, dst, Q, dK);
    } else {
        cdesc dkh = gb_matmul(b, dst, Q, gb_virtual(b, bf, L->q_dim, L->full_str));
        gb_reduction(b, CUDNN_REDUCE_TENSOR_ADD, dkh, dK);
    }
    cdesc K = gb_reshape(b, KT, gb_virtual(b, bf, L->kv_dim, L->kv_str));
    if (variant == 2) {
        gb_matmul(b, ds, K, dQ);
        return;
    }
    cdesc acc = gb_tensor(b, LJ_UID_DQ_ACCUM, f32, L->q_dim, L->full_str, false, false, variant == 0);
    gb_matmul(b, ds, K, acc);
    gb_pointwise(b, CUDNN_POINTWISE_IDENTITY, f32, acc, NULL, NULL, dQ, -1);
}

/* ---- plan cache ------------------------------------------------------------------------ */

static lj_gb *gb_new(void) {
    lj_gb *b = (lj_gb *)lj_calloc(1, sizeof(lj_gb));
    b->next_uid = LJ_UID_VIRTUAL;
    return b;
}

/* Builds the entry's plans; the builders' descriptors are kept (the plans may refer to them). */
static void entry_build(lj_cudnn_entry *e) {
    double t0 = lj_time_sec();
    lj_att_layout L = att_layout(e->B, e->T, e->nh, e->nkv, e->hd);
    e->scale = 1.0f / sqrtf((float)e->hd), e->lowest = -FLT_MAX, e->one = 1.0f;
    if (g_dnn.version <= 91500 && e->T % 128 != 0) {
        /* cudnn-frontend adds a padding mask there (a backward bug below 9.16); not done here */
        snprintf(e->why, sizeof e->why, "T %% 128 != 0 needs cuDNN 9.16+ (have %zu)", g_dnn.version);
        return;
    }
    lj_gb *bf = gb_new();
    build_forward(bf, &L, e->causal);
    e->fwd = bf->st == CUDNN_STATUS_SUCCESS ? gb_plan(bf, &e->fwd_ws, &e->fwd_engine) : NULL;
    if (!e->fwd) {
        snprintf(e->why, sizeof e->why, "forward graph: %s", bf->why);
        return;
    }
    char why2[200] = "", why1[200] = "";
    for (int variant = e->det ? 2 : 1; variant >= 0 && !e->bwd; variant--) {
        lj_gb *bb = gb_new();
        build_backward(bb, &L, variant, e->causal);
        e->bwd = bb->st == CUDNN_STATUS_SUCCESS ? gb_plan(bb, &e->bwd_ws, &e->bwd_engine) : NULL;
        e->bwd_variant = variant;
        if (!e->bwd && variant == 2) snprintf(why2, sizeof why2, "%s", bb->why);
        if (!e->bwd && variant == 1) snprintf(why1, sizeof why1, "%s", bb->why);
        if (!e->bwd && variant == 0)
            snprintf(e->why, sizeof e->why, "backward graph: %s%s%s; variant 0: %s", why2, why2[0] ? "; variant 1: " : "",
                     why1, bb->why);
    }
    if (!e->bwd) return;
    if (e->det && e->bwd_variant != 2)
        lj_log_warn("cuDNN has no deterministic attention backward for B=%d T=%d nh=%d nkv=%d hd=%d (%s): its "
                    "accumulating one runs, so dQ's last bits may differ from run to run",
                    e->B, e->T, e->nh, e->nkv, e->hd, why2);
    e->ok = 1;
    e->build_s = lj_time_sec() - t0;
    snprintf(g_dnn.status, sizeof g_dnn.status,
             "cuDNN attention: cuDNN %zu.%zu.%zu (%s); last plans B=%d T=%d nh=%d nkv=%d hd=%d%s: forward engine "
             "%lld (workspace %lld B), backward engine %lld variant %d (workspace %lld B), built in %.2f s",
             g_dnn.version / 10000, g_dnn.version / 100 % 100, g_dnn.version % 100, g_dnn.lib_name, e->B, e->T, e->nh,
             e->nkv, e->hd, e->causal ? "" : " full", (long long)e->fwd_engine, (long long)e->fwd_ws, (long long)e->bwd_engine, e->bwd_variant,
             (long long)e->bwd_ws, e->build_s);
}

static int capturing(void) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(lj_cuda_stream(), &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone;
}

/* The shape's entry (causal 1: masked; 0: full), built now if `build` and nothing is being
 * captured; NULL if none. */
static lj_cudnn_entry *entry_get(int B, int T, int nh, int nkv, int hd, int det, int causal, int build) {
    /* the cuDNN path covers head_dim 64 and 128 (the own flash kernels' sizes) */
    det = det != 0;
    causal = causal != 0;
    if (!g_dnn.backend_up || B <= 0 || T <= 0 || nkv <= 0 || nh % nkv != 0 || (hd != 64 && hd != 128))
        return NULL;
    for (int i = 0; i < g_dnn.num_entries; i++) {
        lj_cudnn_entry *e = &g_dnn.entries[i];
        if (e->B == B && e->T == T && e->nh == nh && e->nkv == nkv && e->hd == hd && e->det == det &&
            e->causal == causal)
            return e;
    }
    if (!build || g_dnn.num_entries == LJ_CUDNN_MAX_ENTRIES || capturing()) return NULL;
    if (!g_dnn.load_tried && !cudnn_load()) lj_log_warn("%s; the own attention kernels run", g_dnn.status);
    if (!g_dnn.loaded) return NULL;
    lj_cudnn_entry *e = &g_dnn.entries[g_dnn.num_entries++];
    memset(e, 0, sizeof *e);
    e->B = B, e->T = T, e->nh = nh, e->nkv = nkv, e->hd = hd, e->det = det, e->causal = causal;
    entry_build(e);
    if (!e->ok && !e->warned) {
        e->warned = 1;
        lj_log_warn("cuDNN attention not used for B=%d T=%d nh=%d nkv=%d hd=%d%s (%s); the own kernels run", B, T,
                    nh, nkv, hd, causal ? "" : " full", e->why);
    }
    return e;
}

/* ---- entry points ------------------------------------------------------------------------- */

void lj_cuda_cudnn_attention_init(const char *library) {
    g_dnn.backend_up = 1;
    snprintf(g_dnn.library, sizeof g_dnn.library, "%s", library && library[0] ? library : "");
}

int lj_cuda_cudnn_attention_active(int B, int T, int nh, int nkv, int hd, int det) {
    lj_cudnn_entry *e = entry_get(B, T, nh, nkv, hd, det, 1, 1);
    return e && e->ok;
}

int lj_cuda_cudnn_attention_deterministic(int B, int T, int nh, int nkv, int hd) {
    lj_cudnn_entry *e = entry_get(B, T, nh, nkv, hd, 1, 1, 1);
    return e && e->ok && e->bwd_variant == 2;
}

const char *lj_cuda_cudnn_attention_describe(void) {
    if (!g_dnn.status[0]) return "cuDNN attention: not loaded yet";
    return g_dnn.status;
}

size_t lj_cuda_cudnn_attention_workspace_bytes(int B, int T, int nh, int nkv, int hd, int det) {
    lj_cudnn_entry *e = entry_get(B, T, nh, nkv, hd, det, 1, 1);
    if (!e || !e->ok) return 0;
    e->reported = 1;
    return (size_t)(e->fwd_ws > e->bwd_ws ? e->fwd_ws : e->bwd_ws);
}

/* Runs one plan; a failure is a CUDA-level error of the op (no status to return). */
static void execute(cdesc plan, int n, const int64_t *uids, void **ptrs, void *ws, const char *what) {
    cdesc vp = NULL;
    cudnnStatus_t s = g_dnn.p_cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (s == CUDNN_STATUS_SUCCESS)
        s = g_dnn.p_cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (s == CUDNN_STATUS_SUCCESS)
        s = g_dnn.p_cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (s == CUDNN_STATUS_SUCCESS)
        s = g_dnn.p_cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (s == CUDNN_STATUS_SUCCESS) s = g_dnn.p_cudnnBackendFinalize(vp);
    if (s == CUDNN_STATUS_SUCCESS) s = g_dnn.p_cudnnBackendExecute(g_dnn.handle, plan, vp);
    if (vp) g_dnn.p_cudnnBackendDestroyDescriptor(vp);
    if (s != CUDNN_STATUS_SUCCESS) {
        char last[200] = "";
        g_dnn.p_cudnnGetLastErrorString(last, sizeof last);
        char detail[320];
        snprintf(detail, sizeof detail, "%s%s%s", g_dnn.p_cudnnGetErrorString(s), last[0] ? ": " : "", last);
        lj_cuda_die(what, detail, __FILE__, __LINE__);
    }
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Runs e's forward plan over the op table's layouts (qkv [B*T, QKV], out [B*T, Q], lse [B, nh, T]);
 * the lowest scalar only in a causal entry's pack (its graph alone has the mask). */
static void run_forward(lj_cudnn_entry *e, void *out, float *lse, const void *qkv, void *plan_ws, const char *what) {
    const lj_bf16 *q = (const lj_bf16 *)qkv;
    const int64_t Qw = (int64_t)e->nh * e->hd, KVw = (int64_t)e->nkv * e->hd;
    const int64_t uids[7] = {LJ_UID_Q, LJ_UID_K, LJ_UID_V, LJ_UID_O, LJ_UID_STATS, LJ_UID_SCALE, LJ_UID_LOWEST};
    void *ptrs[7] = {(void *)q, (void *)(q + Qw), (void *)(q + Qw + KVw), out, lse, &e->scale, &e->lowest};
    execute(e->fwd, e->causal ? 7 : 6, uids, ptrs, plan_ws, what);
}

/* Runs e's backward plan: dqkv [B*T, QKV] from dout, qkv, out and lse; softmax_sum [B, nh, T] and
 * dq_accum [B*T, Q] f32 scratch (each used by the plan's variant only); the pack as run_forward's. */
static void run_backward(lj_cudnn_entry *e, void *dqkv, const void *dout, const void *qkv, const void *out,
                         const float *lse, float *softmax_sum, float *dq_accum, void *plan_ws, const char *what) {
    const lj_bf16 *q = (const lj_bf16 *)qkv;
    lj_bf16 *dq = (lj_bf16 *)dqkv;
    const int64_t Qw = (int64_t)e->nh * e->hd, KVw = (int64_t)e->nkv * e->hd;
    /* cuDNN before 9.6 (and the old lowering) expects a zeroed dQ accumulator */
    if (e->bwd_variant < 2 && (g_dnn.version < 90600 || e->bwd_variant == 0))
        LJ_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, (size_t)e->B * e->T * Qw * 4, lj_cuda_stream()),
                      "cudaMemsetAsync of the dQ accumulator in the cuDNN attention backward");
    int64_t uids[14] = {LJ_UID_Q, LJ_UID_K, LJ_UID_V, LJ_UID_O, LJ_UID_DO, LJ_UID_STATS, LJ_UID_DQ, LJ_UID_DK,
                        LJ_UID_DV, LJ_UID_SCALE, LJ_UID_ONE};
    void *ptrs[14] = {(void *)q,   (void *)(q + Qw), (void *)(q + Qw + KVw), (void *)out, (void *)dout,
                      (void *)lse, dq,               dq + Qw,                dq + Qw + KVw, &e->scale,
                      &e->one};
    int n = 11;
    if (e->causal) uids[n] = LJ_UID_LOWEST, ptrs[n] = &e->lowest, n++;
    if (e->bwd_variant < 2) uids[n] = LJ_UID_DQ_ACCUM, ptrs[n] = dq_accum, n++; /* variant 2 has none */
    if (e->bwd_variant >= 1) uids[n] = LJ_UID_SOFTMAX_SUM, ptrs[n] = softmax_sum, n++;
    execute(e->bwd, n, uids, ptrs, plan_ws, what);
}

int lj_cuda_cudnn_attention_forward(void *out, float *lse, const void *qkv, int B, int T, int nh, int nkv, int hd,
                                    void *plan_ws, int det) {
    lj_cudnn_entry *e = entry_get(B, T, nh, nkv, hd, det, 1, 1);
    /* a workspace sized before the plans existed has no room for theirs */
    if (!e || !e->ok || (e->fwd_ws > 0 && (!plan_ws || !e->reported))) return 0;
    if (!aligned16(out) || !aligned16(lse) || !aligned16(qkv)) return 0;
    run_forward(e, out, lse, qkv, plan_ws, "cudnnBackendExecute in attention_forward (cuDNN SDPA)");
    return 1;
}

int lj_cuda_cudnn_attention_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                                     int B, int T, int nh, int nkv, int hd, float *softmax_sum, float *dq_accum,
                                     void *plan_ws, int det) {
    lj_cudnn_entry *e = entry_get(B, T, nh, nkv, hd, det, 1, 1);
    if (!e || !e->ok || (e->bwd_ws > 0 && (!plan_ws || !e->reported))) return 0;
    if (!aligned16(dqkv) || !aligned16(dout) || !aligned16(qkv) || !aligned16(out) || !aligned16(lse)) return 0;
    run_backward(e, dqkv, dout, qkv, out, lse, softmax_sum, dq_accum, plan_ws,
                 "cudnnBackendExecute in attention_backward (cuDNN SDPA)");
    return 1;
}

/* ---- full (bidirectional) attention: attention_varlen's uniform segments ------------------ */

/* The full entry of the shape when cuDNN can run it with plan_ws: built (a non-deterministic
 * plan pair, no mask), and both plans' workspace within plan_ws_bytes. The forward may build the
 * plans (`build`, never while capturing); the backward only looks them up, so that it takes
 * cuDNN's path exactly when its forward did (a forward captured before any plan existed ran
 * the own kernel; its backward must too). Same test in both otherwise. */
static lj_cudnn_entry *full_usable(int B, int T, int nh, int nkv, int hd, const void *plan_ws, size_t plan_ws_bytes,
                                   int build) {
    lj_cudnn_entry *e = entry_get(B, T, nh, nkv, hd, 0, 0, build);
    if (!e || !e->ok) return NULL;
    const int64_t ws = e->fwd_ws > e->bwd_ws ? e->fwd_ws : e->bwd_ws;
    if ((size_t)ws > plan_ws_bytes || (ws > 0 && !plan_ws)) return NULL;
    return e;
}

int lj_cuda_cudnn_attention_full_forward(void *out, float *lse, const void *qkv, int B, int T, int nh, int nkv, int hd,
                                         void *plan_ws, size_t plan_ws_bytes) {
    lj_cudnn_entry *e = full_usable(B, T, nh, nkv, hd, plan_ws, plan_ws_bytes, 1);
    if (!e || !aligned16(out) || !aligned16(lse) || !aligned16(qkv)) return 0;
    run_forward(e, out, lse, qkv, plan_ws, "cudnnBackendExecute in attention_varlen_forward (cuDNN SDPA)");
    return 1;
}

int lj_cuda_cudnn_attention_full_active(int B, int T, int nh, int nkv, int hd, size_t plan_ws_bytes) {
    lj_cudnn_entry *e = entry_get(B, T, nh, nkv, hd, 0, 0, 0);
    if (!e || !e->ok) return 0;
    return (size_t)(e->fwd_ws > e->bwd_ws ? e->fwd_ws : e->bwd_ws) <= plan_ws_bytes;
}

int lj_cuda_cudnn_attention_full_backward(void *dqkv, const void *dout, const void *qkv, const void *out,
                                          const float *lse, int B, int T, int nh, int nkv, int hd, float *softmax_sum,
                                          float *dq_accum, void *plan_ws, size_t plan_ws_bytes) {
    lj_cudnn_entry *e = full_usable(B, T, nh, nkv, hd, plan_ws, plan_ws_bytes, 0);
    /* the forward's test (on the tensors both see) */
    if (!e || !aligned16(out) || !aligned16(lse) || !aligned16(qkv)) return 0;
    /* the forward ran on cuDNN, so lse is in its layout: the own kernels cannot take over */
    LJ_ASSERT(aligned16(dqkv) && aligned16(dout) && softmax_sum && dq_accum,
              "attention_varlen_backward (cuDNN): dqkv and dout must be 16-byte aligned and the workspace given");
    run_backward(e, dqkv, dout, qkv, out, lse, softmax_sum, dq_accum, plan_ws,
                 "cudnnBackendExecute in attention_varlen_backward (cuDNN SDPA)");
    return 1;
}

#endif
