/* attention_decode.c — the last position of a causal self-attention alone,
 * for decoding with a KV cache (models/gpt.lua's GPT:generate): each new
 * token's query attends to the keys and values of every position so far,
 * which the cache holds, so only one query row is computed instead of the
 * whole T × T score matrix of vn_causal_self_attention.
 *
 * Per (batch, head) the scores of up to CHUNK positions are held at once
 * and turned into softmax weights by one call of the vectorised exp that
 * vn_causal_self_attention uses (vec_math.h); past CHUNK positions the
 * chunks are joined by the online softmax (a running max m and sum, what
 * was summed rescaled by exp(m_old − m_new) when the max grows; Milakov &
 * Gimelshein 2018), so no scratch of T scores. A decoding window of at
 * most CHUNK positions (tutorial 5's 64) is one chunk: a plain two-pass
 * softmax, with no scalar expf per position (bench/RESULTS.md, issue 20).
 * Single-threaded: at batch 1 there are n_head tasks of T·Dh multiply-adds,
 * far below what a parallel region pays for. */
#include "internal.h"
#include "vec_math.h" /* vn__exp_shift_f32 */

#include <math.h>
#ifdef __FMA__
#include <immintrin.h>
#endif

/* Positions whose scores are computed together: TILE independent dot
 * products in flight instead of one chain of dependent multiply-adds. */
#define TILE 8
/* Positions whose scores are held at once (a multiple of TILE). */
#define CHUNK 64

/* The scores q·k_j of n ≤ TILE positions into s (unscaled), key j at
 * k + j·st_t. With FMA each sums its products in 8 lanes (lane i: d ≡ i mod
 * 8, in d order), the 8 positions' lanes added by one tree of hadds, the
 * last Dh mod 8 products added after in d order; without, in d order. */
static void scores(const float *q, const float *k, int64_t st_t, int64_t Dh, int64_t n, float *s)
{
    float a[TILE]; /* local sums: s may alias q or k for all the compiler knows */
    int64_t d0 = 0;
#ifdef __FMA__
    const float *kj[TILE];
    for (int j = 0; j < TILE; j++) kj[j] = k + (j < n ? j : n - 1) * st_t; /* past n: a copy, unused */
    __m256 acc[TILE];
    for (int j = 0; j < TILE; j++) acc[j] = _mm256_setzero_ps();
    for (; d0 + 8 <= Dh; d0 += 8) {
        __m256 qd = _mm256_loadu_ps(q + d0);
        for (int j = 0; j < TILE; j++) acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(kj[j] + d0), qd, acc[j]);
    }
    /* per 128-bit half: partial sums of positions 0–3 (h0) and 4–7 (h1) */
    __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
    __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
    _mm256_storeu_ps(a, _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20),
                                      _mm256_permute2f128_ps(h0, h1, 0x31)));
#else
    for (int j = 0; j < TILE; j++) a[j] = 0;
#endif
    for (int64_t j = 0; j < n; j++) {
        for (int64_t d = d0; d < Dh; d++) a[j] += q[d] * k[j * st_t + d];
        s[j] = a[j];
    }
}

/* acc[d] += Σ_j p[j] · v_j[d] over n positions (v_j at v + j·st_t), for
 * each d in j order. */
static void weighted_values(const float *p, const float *v, int64_t st_t, int64_t n, int64_t Dh,
                            float *acc)
{
    int64_t d0 = 0;
#ifdef __FMA__
    for (; d0 + 32 <= Dh; d0 += 32) { /* 32 of acc in registers through all n positions */
        __m256 a[4];
        for (int i = 0; i < 4; i++) a[i] = _mm256_loadu_ps(acc + d0 + 8 * i);
        for (int64_t j = 0; j < n; j++) {
            __m256 pj = _mm256_set1_ps(p[j]);
            for (int i = 0; i < 4; i++)
                a[i] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + j * st_t + d0 + 8 * i), a[i]);
        }
        for (int i = 0; i < 4; i++) _mm256_storeu_ps(acc + d0 + 8 * i, a[i]);
    }
#endif
    for (int64_t j = 0; j < n; j++)
        for (int64_t d = d0; d < Dh; d++) acc[d] += p[j] * v[j * st_t + d];
}

/* One sequence (see internal.h): each head's query row T − 1 against keys
 * and values 0..T−1, a chunk of CHUNK positions at a time. Not inlined:
 * one copy for the op and the fused decoder, the same bits. */
__attribute__((noinline)) void vn__attention_last_row(const float *x, int64_t st_t, int64_t T,
                                                      int64_t C, int64_t n_head, float *y)
{
    int64_t Dh = C / n_head;
    float scale = Dh ? (float)(1.0 / sqrt((double)Dh)) : 1.0f; /* as vn_causal_self_attention */
    for (int64_t h = 0; h < n_head; h++) {
        const float *q = x + (T - 1) * st_t + h * Dh;
        const float *k0 = x + C + h * Dh, *v0 = k0 + C;
        float *acc = y + h * Dh, m = -INFINITY, sum = 0;
        for (int64_t d = 0; d < Dh; d++) acc[d] = 0;
        for (int64_t c0 = 0; c0 < T; c0 += CHUNK) {
            int64_t n = T - c0 < CHUNK ? T - c0 : CHUNK;
            float s[CHUNK], cm = m;
            for (int64_t t0 = 0; t0 < n; t0 += TILE)
                scores(q, k0 + (c0 + t0) * st_t, st_t, Dh, n - t0 < TILE ? n - t0 : TILE, s + t0);
            for (int64_t j = 0; j < n; j++) {
                s[j] *= scale;
                cm = s[j] > cm ? s[j] : cm; /* NaN scores leave the max alone (and give NaN) */
            }
            if (cm > m && m > -INFINITY) { /* a later chunk raised the max: rescale the sums */
                float r = m;
                vn__exp_shift_f32(&r, 1, cm, 1.0f);
                sum *= r;
                for (int64_t d = 0; d < Dh; d++) acc[d] *= r;
            }
            m = cm > m ? cm : m;
            if (m == -INFINITY) /* every score so far −inf (or NaN): weight 0 (NaN stays), where
                                 * e^(s − m) would be e^(−inf + inf) = NaN though a later chunk
                                 * may hold finite scores; none at all: 0/0 below, as the full op */
                for (int64_t j = 0; j < n; j++) s[j] = s[j] == -INFINITY ? 0.0f : s[j];
            else
                vn__exp_shift_f32(s, n, m, 1.0f); /* the weights e^(s − m) */
            for (int64_t j = 0; j < n; j++) sum += s[j];
            weighted_values(s, v0 + c0 * st_t, st_t, n, Dh, acc);
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
    /* read in place when the features are adjacent (a narrowed cache is
     * not copied); other strides are copied first, so every layout runs
     * the same loops and gives the same bits */
    vn_tensor *xc = qkv->strides[2] == 1 || C == 0 ? vn_tensor_retain((vn_tensor *)qkv) : vn_contiguous(qkv);
    vn_tensor *out = xc ? vn__new(VN_F32, 3, (int64_t[]){B, 1, C}) : NULL;
    if (out) {
        const float *x = vn__ptr(xc);
        float *y = vn__ptr(out);
        for (int64_t b = 0; b < B; b++)
            vn__attention_last_row(x + b * xc->strides[0], xc->strides[1], T, C, n_head, y + b * C);
    }
    vn_tensor_release(xc);
    return out;
}
