/* attention_simple.cu: plain fp32 attention kernels (causal, GQA) for any head_dim up
 * to 256: the reference the flash kernels are checked against, the path for head dims the
 * flash kernels do not cover, and generation with a KV cache (attention_decode).
 *
 * One block of LJ_SA_THREADS threads per query row (forward, dQ) or key row (dK/dV); keys or
 * queries go in tiles of LJ_SA_THREADS, one per thread, with an online softmax (Milakov &
 * Gimelshein 2018) in the forward. Backward (Dao 2023, FlashAttention-2, Algorithm 2):
 * P = exp(s*scale - lse), dS = P (dO.V - D), D = rowsum(dO * O), dQ = scale dS K,
 * dK = scale dS^T Q, dV = P^T dO. */
#include "ops/cuda/cuda_common.h"

#include <math.h>

#define LJ_SA_THREADS 128
#define LJ_SA_MAX_HD 256

/* Where the q, k and v rows of one (batch, head) live. Row r of q is q + b*q_batch + r*q_row;
 * key row j of k/v is k + b*kv_batch + j*kv_row (likewise v). */
typedef struct {
    const lj_bf16 *q, *k, *v;
    int64_t q_row, q_batch, kv_row, kv_batch, q_head, kv_head;
    lj_bf16 *out;
    int64_t out_row, out_batch, out_head;
} lj_sa_layout;

static __device__ float sa_block_max(float v, float *red) {
    v = lj_warp_max(v);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    float r = red[0];
    for (int w = 1; w < LJ_SA_THREADS / 32; w++) r = fmaxf(r, red[w]);
    __syncthreads();
    return r;
}

static __device__ float sa_block_sum(float v, float *red) {
    v = lj_warp_sum(v);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    float r = 0.0f;
    for (int w = 0; w < LJ_SA_THREADS / 32; w++) r += red[w];
    __syncthreads();
    return r;
}

static __device__ float sa_dot(const float *a, const lj_bf16 *b, int hd) {
    float s = 0.0f;
    for (int i = 0; i < hd; i++) s += a[i] * lj_ld(b + i);
    return s;
}

/* Block (t, h, b): query t of head h attends keys first..p0+t, first = doc_start[b*Tq + t] (0 when
 * doc_start is NULL). lse (natural log of the sum of exp of the scaled scores) is written when
 * not NULL, at lse[(b*nh + h)*Tq + t]. */
__global__ void __launch_bounds__(LJ_SA_THREADS) attention_forward_simple_kernel(lj_sa_layout L, float *lse,
                                                                                 const int32_t *doc_start, int Tq,
                                                                                 int nh, int group, int hd, int p0,
                                                                                 float scale) {
    __shared__ float sq[LJ_SA_MAX_HD], sp[LJ_SA_THREADS], red[LJ_SA_THREADS / 32];
    int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    int kvh = h / group;
    const lj_bf16 *q = L.q + b * L.q_batch + (int64_t)t * L.q_row + h * L.q_head;
    const lj_bf16 *k = L.k + b * L.kv_batch + kvh * L.kv_head;
    const lj_bf16 *v = L.v + b * L.kv_batch + kvh * L.kv_head;
    for (int i = tid; i < hd; i += LJ_SA_THREADS) sq[i] = lj_ld(q + i);
    __syncthreads();
    float acc[LJ_SA_MAX_HD / LJ_SA_THREADS] = {0.0f, 0.0f};
    float m = -INFINITY, l = 0.0f;
    int last = p0 + t; /* the last key this query sees */
    const int first = doc_start ? doc_start[(int64_t)b * Tq + t] : 0;
    for (int j0 = first; j0 <= last; j0 += LJ_SA_THREADS) {
        int j = j0 + tid;
        float s = j <= last ? sa_dot(sq, k + (int64_t)j * L.kv_row, hd) * scale : -INFINITY;
        float mx = sa_block_max(s, red);
        float m_new = fmaxf(m, mx);
        float alpha = expf(m - m_new);
        float p = j <= last ? expf(s - m_new) : 0.0f;
        sp[tid] = p;
        l = l * alpha + sa_block_sum(p, red); /* the sum's barriers also publish sp */
        int nj = min(LJ_SA_THREADS, last - j0 + 1);
        for (int r = 0; r < LJ_SA_MAX_HD / LJ_SA_THREADS; r++) {
            int d = tid + r * LJ_SA_THREADS;
            if (d >= hd) break;
            float a = acc[r] * alpha;
            for (int jj = 0; jj < nj; jj++) a += sp[jj] * lj_ld(v + (int64_t)(j0 + jj) * L.kv_row + d);
            acc[r] = a;
        }
        __syncthreads();
        m = m_new;
    }
    lj_bf16 *o = L.out + b * L.out_batch + (int64_t)t * L.out_row + h * L.out_head;
    for (int r = 0; r < LJ_SA_MAX_HD / LJ_SA_THREADS; r++) {
        int d = tid + r * LJ_SA_THREADS;
        if (d < hd) lj_st(o + d, acc[r] / l);
    }
    if (lse && tid == 0) lse[((int64_t)b * nh + h) * Tq + t] = m + logf(l);
}

/* d[(b*nh + h)*T + t] = sum_i dout[bt, h*hd + i] * out[bt, h*hd + i]: one warp per (bt, h). */
__global__ void attention_rowdot_kernel(float *d, const lj_bf16 *dout, const lj_bf16 *out, int B, int T, int nh,
                                        int hd) {
    int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (w >= (int64_t)B * T * nh) return;
    int h = (int)(w % nh);
    int64_t bt = w / nh;
    int64_t off = bt * nh * hd + (int64_t)h * hd;
    float s = 0.0f;
    for (int i = lane; i < hd; i += 32) s += lj_ld(dout + off + i) * lj_ld(out + off + i);
    s = lj_warp_sum(s);
    if (lane == 0) {
        int64_t b = bt / T, t = bt % T;
        d[(b * nh + h) * T + t] = s;
    }
}

void lj_cuda_attention_rowdot(float *d, const void *dout, const void *out, int B, int T, int nh, int hd) {
    int64_t warps = (int64_t)B * T * nh;
    attention_rowdot_kernel<<<(unsigned)((warps * 32 + 255) / 256), 256, 0, lj_cuda_stream()>>>(
        d, (const lj_bf16 *)dout, (const lj_bf16 *)out, B, T, nh, hd);
    LJ_CUDA_LAUNCHED("attention_rowdot_kernel");
}

/* Block (i, h, b): dQ row i of head h = scale * sum_{j <= i} dS_ij k_j. */
__global__ void __launch_bounds__(LJ_SA_THREADS) attention_dq_simple_kernel(lj_bf16 *dqkv, const lj_bf16 *dout,
                                                                            const lj_bf16 *qkv, const float *lse,
                                                                            const float *dsum,
                                                                            const int32_t *doc_start, int T, int nh,
                                                                            int nkv, int hd, float scale) {
    __shared__ float sq[LJ_SA_MAX_HD], sdo[LJ_SA_MAX_HD], sds[LJ_SA_THREADS];
    int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    int group = nh / nkv, kvh = h / group;
    int64_t row = (int64_t)(nh + 2 * nkv) * hd, Qw = (int64_t)nh * hd, KVw = (int64_t)nkv * hd;
    int64_t bt = (int64_t)b * T + i;
    for (int x = tid; x < hd; x += LJ_SA_THREADS) {
        sq[x] = lj_ld(qkv + bt * row + (int64_t)h * hd + x);
        sdo[x] = lj_ld(dout + bt * Qw + (int64_t)h * hd + x);
    }
    __syncthreads();
    int64_t hi = ((int64_t)b * nh + h) * T + i;
    float L = lse[hi], D = dsum[hi];
    const lj_bf16 *k = qkv + (int64_t)b * T * row + Qw + (int64_t)kvh * hd;
    const lj_bf16 *v = k + KVw;
    float acc[LJ_SA_MAX_HD / LJ_SA_THREADS] = {0.0f, 0.0f};
    const int first = doc_start ? doc_start[bt] : 0;
    for (int j0 = first; j0 <= i; j0 += LJ_SA_THREADS) {
        int j = j0 + tid;
        float ds = 0.0f;
        if (j <= i) {
            float p = expf(sa_dot(sq, k + (int64_t)j * row, hd) * scale - L);
            ds = p * (sa_dot(sdo, v + (int64_t)j * row, hd) - D);
        }
        sds[tid] = ds;
        __syncthreads();
        int nj = min(LJ_SA_THREADS, i - j0 + 1);
        for (int r = 0; r < LJ_SA_MAX_HD / LJ_SA_THREADS; r++) {
            int d = tid + r * LJ_SA_THREADS;
            if (d >= hd) break;
            float a = acc[r];
            for (int jj = 0; jj < nj; jj++) a += sds[jj] * lj_ld(k + (int64_t)(j0 + jj) * row + d);
            acc[r] = a;
        }
        __syncthreads();
    }
    for (int r = 0; r < LJ_SA_MAX_HD / LJ_SA_THREADS; r++) {
        int d = tid + r * LJ_SA_THREADS;
        if (d < hd) lj_st(dqkv + bt * row + (int64_t)h * hd + d, acc[r] * scale);
    }
}

/* Block (j, kvh, b): dK and dV of key row j of kv head kvh, summed over the group's query
 * heads and the queries i >= j (of j's document: doc_start[b*T + i] <= j, when doc_start is set). */
__global__ void __launch_bounds__(LJ_SA_THREADS) attention_dkv_simple_kernel(lj_bf16 *dqkv, const lj_bf16 *dout,
                                                                             const lj_bf16 *qkv, const float *lse,
                                                                             const float *dsum,
                                                                             const int32_t *doc_start, int T, int nh,
                                                                             int nkv, int hd, float scale) {
    __shared__ float sk[LJ_SA_MAX_HD], sv[LJ_SA_MAX_HD], sp[LJ_SA_THREADS], sds[LJ_SA_THREADS];
    int j = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    int group = nh / nkv;
    int64_t row = (int64_t)(nh + 2 * nkv) * hd, Qw = (int64_t)nh * hd, KVw = (int64_t)nkv * hd;
    const lj_bf16 *base = qkv + (int64_t)b * T * row;
    int64_t koff = (int64_t)j * row + Qw + (int64_t)kvh * hd;
    for (int x = tid; x < hd; x += LJ_SA_THREADS) {
        sk[x] = lj_ld(base + koff + x);
        sv[x] = lj_ld(base + koff + KVw + x);
    }
    __syncthreads();
    float dk[LJ_SA_MAX_HD / LJ_SA_THREADS] = {0.0f, 0.0f}, dv[LJ_SA_MAX_HD / LJ_SA_THREADS] = {0.0f, 0.0f};
    for (int hq = 0; hq < group; hq++) {
        int h = kvh * group + hq;
        const lj_bf16 *q = base + (int64_t)h * hd;
        const lj_bf16 *g = dout + (int64_t)b * T * Qw + (int64_t)h * hd;
        const float *Lh = lse + ((int64_t)b * nh + h) * T, *Dh = dsum + ((int64_t)b * nh + h) * T;
        for (int i0 = j; i0 < T; i0 += LJ_SA_THREADS) {
            int i = i0 + tid;
            float p = 0.0f, ds = 0.0f;
            if (i < T && (!doc_start || doc_start[(int64_t)b * T + i] <= j)) {
                const lj_bf16 *qi = q + (int64_t)i * row, *gi = g + (int64_t)i * Qw;
                float s = 0.0f, dp = 0.0f;
                for (int x = 0; x < hd; x++) {
                    s += lj_ld(qi + x) * sk[x];
                    dp += lj_ld(gi + x) * sv[x];
                }
                p = expf(s * scale - Lh[i]);
                ds = p * (dp - Dh[i]);
            }
            sp[tid] = p;
            sds[tid] = ds;
            __syncthreads();
            int ni = min(LJ_SA_THREADS, T - i0);
            for (int r = 0; r < LJ_SA_MAX_HD / LJ_SA_THREADS; r++) {
                int d = tid + r * LJ_SA_THREADS;
                if (d >= hd) break;
                float a = dk[r], c = dv[r];
                for (int ii = 0; ii < ni; ii++) {
                    a += sds[ii] * lj_ld(q + (int64_t)(i0 + ii) * row + d);
                    c += sp[ii] * lj_ld(g + (int64_t)(i0 + ii) * Qw + d);
                }
                dk[r] = a;
                dv[r] = c;
            }
            __syncthreads();
        }
    }
    lj_bf16 *dst = dqkv + (int64_t)b * T * row + koff;
    for (int r = 0; r < LJ_SA_MAX_HD / LJ_SA_THREADS; r++) {
        int d = tid + r * LJ_SA_THREADS;
        if (d >= hd) break;
        lj_st(dst + d, dk[r] * scale);
        lj_st(dst + KVw + d, dv[r]);
    }
}

void lj_cuda_attention_forward_simple(void *out, float *lse, const void *qkv, const int32_t *doc_start, int B, int T,
                                      int nh, int nkv, int hd) {
    LJ_ASSERT(hd <= LJ_SA_MAX_HD && nkv > 0 && nh % nkv == 0, "attention: hd %d nh %d nkv %d", hd, nh, nkv);
    if (B <= 0 || T <= 0) return;
    int64_t row = (int64_t)(nh + 2 * nkv) * hd;
    lj_sa_layout L;
    L.q = (const lj_bf16 *)qkv;
    L.k = L.q + (int64_t)nh * hd;
    L.v = L.k + (int64_t)nkv * hd;
    L.q_row = row;
    L.q_batch = row * T;
    L.kv_row = row;
    L.kv_batch = row * T;
    L.q_head = hd;
    L.kv_head = hd;
    L.out = (lj_bf16 *)out;
    L.out_row = (int64_t)nh * hd;
    L.out_batch = L.out_row * T;
    L.out_head = hd;
    dim3 grid((unsigned)T, (unsigned)nh, (unsigned)B);
    attention_forward_simple_kernel<<<grid, LJ_SA_THREADS, 0, lj_cuda_stream()>>>(L, lse, doc_start, T, nh, nh / nkv,
                                                                                 hd, 0,
                                                                                 1.0f / sqrtf((float)hd));
    LJ_CUDA_LAUNCHED("attention_forward_simple_kernel");
}

void lj_cuda_attention_backward_simple(void *dqkv, const void *dout, const void *qkv, const void *out,
                                       const float *lse, const int32_t *doc_start, int B, int T, int nh, int nkv,
                                       int hd, float *d) {
    LJ_ASSERT(hd <= LJ_SA_MAX_HD && nkv > 0 && nh % nkv == 0, "attention: hd %d nh %d nkv %d", hd, nh, nkv);
    if (B <= 0 || T <= 0) return;
    float scale = 1.0f / sqrtf((float)hd);
    lj_cuda_attention_rowdot(d, dout, out, B, T, nh, hd);
    attention_dq_simple_kernel<<<dim3((unsigned)T, (unsigned)nh, (unsigned)B), LJ_SA_THREADS, 0, lj_cuda_stream()>>>(
        (lj_bf16 *)dqkv, (const lj_bf16 *)dout, (const lj_bf16 *)qkv, lse, d, doc_start, T, nh, nkv, hd, scale);
    LJ_CUDA_LAUNCHED("attention_dq_simple_kernel");
    attention_dkv_simple_kernel<<<dim3((unsigned)T, (unsigned)nkv, (unsigned)B), LJ_SA_THREADS, 0,
                                  lj_cuda_stream()>>>((lj_bf16 *)dqkv, (const lj_bf16 *)dout, (const lj_bf16 *)qkv,
                                                      lse, d, doc_start, T, nh, nkv, hd, scale);
    LJ_CUDA_LAUNCHED("attention_dkv_simple_kernel");
}

/* ---- generation with a KV cache --------------------------------------------------- */

/* kv_cache[p0 + i, :] = [k heads | v heads] of qkv row i. */
__global__ void kv_cache_write_kernel(lj_bf16 *cache, const lj_bf16 *qkv, int p0, int Tq, int nh, int nkv, int hd) {
    int64_t KVw = (int64_t)nkv * hd, row = (int64_t)(nh + 2 * nkv) * hd;
    int64_t total = (int64_t)Tq * 2 * KVw;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = idx / (2 * KVw), c = idx % (2 * KVw);
        cache[(p0 + i) * 2 * KVw + c] = qkv[i * row + (int64_t)nh * hd + c];
    }
}

void lj_cuda_attention_decode(void *out, void *kv_cache, const void *qkv, int p0, int Tq, int nh, int nkv, int hd) {
    LJ_ASSERT(hd <= LJ_SA_MAX_HD && nkv > 0 && nh % nkv == 0, "attention_decode: hd %d nh %d nkv %d", hd, nh, nkv);
    if (Tq <= 0) return;
    int64_t KVw = (int64_t)nkv * hd;
    kv_cache_write_kernel<<<lj_cuda_blocks((int64_t)Tq * 2 * KVw, 256), 256, 0, lj_cuda_stream()>>>(
        (lj_bf16 *)kv_cache, (const lj_bf16 *)qkv, p0, Tq, nh, nkv, hd);
    LJ_CUDA_LAUNCHED("kv_cache_write_kernel");
    lj_sa_layout L;
    L.q = (const lj_bf16 *)qkv;
    L.q_row = (int64_t)(nh + 2 * nkv) * hd;
    L.q_batch = 0;
    L.q_head = hd;
    L.k = (const lj_bf16 *)kv_cache;
    L.v = L.k + KVw;
    L.kv_row = 2 * KVw;
    L.kv_batch = 0;
    L.kv_head = hd;
    L.out = (lj_bf16 *)out;
    L.out_row = (int64_t)nh * hd;
    L.out_batch = 0;
    L.out_head = hd;
    attention_forward_simple_kernel<<<dim3((unsigned)Tq, (unsigned)nh, 1), LJ_SA_THREADS, 0, lj_cuda_stream()>>>(
        L, NULL, NULL, Tq, nh, nh / nkv, hd, p0, 1.0f / sqrtf((float)hd));
    LJ_CUDA_LAUNCHED("attention_decode_kernel");
}
