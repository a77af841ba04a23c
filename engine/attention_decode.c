/* attention_decode.c — the last position of a causal self-attention alone,
 * for decoding with a KV cache (models/gpt.lua's GPT:generate): each new
 * token's query attends to the keys and values of every position so far,
 * which the cache holds, so only one query row is computed instead of the
 * whole T × T score matrix of vn_causal_self_attention.
 *
 * One pass over the keys per (batch, head) with the online softmax (a
 * running max m and sum, the partial output rescaled by exp(m_old − m_new)
 * when the max grows; Milakov & Gimelshein 2018): no scratch of T scores.
 * Single-threaded: at batch 1 there are n_head tasks of T·Dh multiply-adds,
 * far below what a parallel region pays for. */
#include "internal.h"

#include <math.h>

/* One sequence (see internal.h): each head's query row T − 1 against keys
 * and values 0..T−1, one pass with the online softmax. Not inlined: one
 * copy for the op and the fused decoder, the same bits. */
__attribute__((noinline)) void vn__attention_last_row(const float *x, int64_t st_t, int64_t st_f, int64_t T, int64_t C,
                            int64_t n_head, float *y)
{
    int64_t Dh = C / n_head;
    float scale = Dh ? (float)(1.0 / sqrt((double)Dh)) : 1.0f; /* as vn_causal_self_attention */
    for (int64_t h = 0; h < n_head; h++) {
        const float *q = x + (T - 1) * st_t + h * Dh * st_f;
        float *acc = y + h * Dh, m = -INFINITY, sum = 0;
        for (int64_t d = 0; d < Dh; d++) acc[d] = 0;
        for (int64_t t = 0; t < T; t++) {
            const float *k = x + t * st_t + (C + h * Dh) * st_f;
            const float *v = k + C * st_f;
            float s = 0;
            for (int64_t d = 0; d < Dh; d++) s += q[d * st_f] * k[d * st_f];
            s *= scale;
            if (s > m) { /* a new max: rescale what was summed under the old one */
                float r = expf(m - s);
                sum *= r;
                for (int64_t d = 0; d < Dh; d++) acc[d] *= r;
                m = s;
            }
            float p = expf(s - m);
            sum += p;
            for (int64_t d = 0; d < Dh; d++) acc[d] += p * v[d * st_f];
        }
        for (int64_t d = 0; d < Dh; d++) acc[d] /= sum;
    }
}

vn_tensor *vn_causal_self_attention_last(const vn_tensor *qkv, int64_t n_head)
{
    const char *op = "causal_self_attention_last";
    if (vn__check_dtype_arg(qkv, VN_F32, op, "qkv", 0)) return NULL;
    if (qkv->ndim != 3 || qkv->shape[1] < 1 || n_head < 1 || qkv->shape[2] % (3 * n_head))
        return vn__errp(VN_ERR_SHAPE,
                        "%s: qkv of shape %s with n_head %lld, expected (B, T ≥ 1, 3·C) with C a "
                        "multiple of n_head ≥ 1",
                        op, vn__shape(qkv->ndim, qkv->shape), (long long)n_head);
    int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3;
    const int64_t *st = qkv->strides; /* read in place: a narrowed cache is not copied */
    vn_tensor *out = vn__new(VN_F32, 3, (int64_t[]){B, 1, C});
    if (!out) return NULL;
    const float *x = vn__ptr(qkv);
    float *y = vn__ptr(out);
    for (int64_t b = 0; b < B; b++) vn__attention_last_row(x + b * st[0], st[1], st[2], T, C, n_head, y + b * C);
    return out;
}
