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
    __m256 sums = _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20), _mm256_permute2f128_ps(h0, h1, 0x31));
    if (d0 == Dh && n == TILE) { /* no tail: the eight scores as they are */
        _mm256_storeu_ps(s, sums);
        return;
    }
    _mm256_storeu_ps(a, sums);
#else
    for (int j = 0; j < TILE; j++) a[j] = 0;
#endif
    for (int64_t j = 0; j < n; j++) {
        for (int64_t d = d0; d < Dh; d++) a[j] += q[d] * k[j * st_t + d];
        s[j] = a[j];
    }
}

/* s[j] *= scale for j < n, and *cm = the max of *cm and every s[j] as
 * s > cm ? s : cm takes it (a NaN score leaves the max alone, and gives
 * NaN later). In vector lanes: maxps is that same choice per lane, and a
 * max is exact in any order (up to the sign of a zero max, which e^(s − m)
 * does not see). */
static void scale_max(float *s, int64_t n, float scale, float *cm)
{
    float m = *cm;
    int64_t j = 0;
#ifdef __FMA__
    __m256 vs = _mm256_set1_ps(scale), vm = _mm256_set1_ps(m);
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + j), vs);
        _mm256_storeu_ps(s + j, v);
        vm = _mm256_max_ps(v, vm);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, vm);
    for (int i = 0; i < 8; i++) m = lanes[i] > m ? lanes[i] : m;
#endif
    for (; j < n; j++) {
        s[j] *= scale;
        m = s[j] > m ? s[j] : m;
    }
    *cm = m;
}

/* acc_i[d] += Σ_j p_i[j] · v_i,j[d] over n positions for nh ≤ 2 heads
 * (v_i,j at v_i + j·st_t), for each d in j order. Two heads interleaved:
 * each 8-float block's sum is a chain of dependent FMAs, so one head's
 * four chains wait on the FMA latency, and a second head's four fill the
 * gaps (the same order per head, so the same bits). */
static void weighted_values(int nh, const float *const p[2], const float *const v[2], int64_t st_t,
                            int64_t n, int64_t Dh, float *const acc[2])
{
    int64_t d0 = 0;
#ifdef __FMA__
    for (; d0 + 32 <= Dh; d0 += 32) { /* 32 of each acc in registers through all n positions */
        __m256 a[2][4];
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < 4; i++) a[h][i] = _mm256_loadu_ps(acc[h] + d0 + 8 * i);
        if (nh == 2)
            for (int64_t j = 0; j < n; j++) {
                __m256 p0 = _mm256_set1_ps(p[0][j]), p1 = _mm256_set1_ps(p[1][j]);
                for (int i = 0; i < 4; i++) {
                    a[0][i] = _mm256_fmadd_ps(p0, _mm256_loadu_ps(v[0] + j * st_t + d0 + 8 * i), a[0][i]);
                    a[1][i] = _mm256_fmadd_ps(p1, _mm256_loadu_ps(v[1] + j * st_t + d0 + 8 * i), a[1][i]);
                }
            }
        else
            for (int64_t j = 0; j < n; j++) {
                __m256 p0 = _mm256_set1_ps(p[0][j]);
                for (int i = 0; i < 4; i++)
                    a[0][i] = _mm256_fmadd_ps(p0, _mm256_loadu_ps(v[0] + j * st_t + d0 + 8 * i), a[0][i]);
            }
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < 4; i++) _mm256_storeu_ps(acc[h] + d0 + 8 * i, a[h][i]);
    }
#endif
    for (int h = 0; h < nh; h++)
        for (int64_t j = 0; j < n; j++)
            for (int64_t d = d0; d < Dh; d++) acc[h][d] += p[h][j] * v[h][j * st_t + d];
}

/* One sequence (see internal.h): each head's query row T − 1 against keys
 * and values 0..T−1, a chunk of CHUNK positions at a time, two heads at a
 * time (their sums of weights and weighted values interleaved: above).
 * Not inlined: one copy for the op and the fused decoder, the same bits. */
__attribute__((noinline)) void vn__attention_last_row(const float *x, int64_t st_t, int64_t T,
                                                      int64_t C, int64_t n_head, float *y)
{
    int64_t Dh = C / n_head;
    float scale = Dh ? (float)(1.0 / sqrt((double)Dh)) : 1.0f; /* as vn_causal_self_attention */
    for (int64_t h0 = 0; h0 < n_head; h0 += 2) {
        int nh = n_head - h0 < 2 ? 1 : 2;
        const float *q[2], *k0[2], *v0[2];
        float *acc[2], m[2] = {-INFINITY, -INFINITY}, sum[2] = {0, 0};
        for (int i = 0; i < nh; i++) {
            q[i] = x + (T - 1) * st_t + (h0 + i) * Dh;
            k0[i] = x + C + (h0 + i) * Dh, v0[i] = k0[i] + C;
            acc[i] = y + (h0 + i) * Dh;
            for (int64_t d = 0; d < Dh; d++) acc[i][d] = 0;
        }
        for (int64_t c0 = 0; c0 < T; c0 += CHUNK) {
            int64_t n = T - c0 < CHUNK ? T - c0 : CHUNK;
            float s[2][CHUNK];
            const float *p[2] = {s[0], s[1]}, *v[2];
            for (int i = 0; i < nh; i++) {
                float cm = m[i];
                for (int64_t t0 = 0; t0 < n; t0 += TILE)
                    scores(q[i], k0[i] + (c0 + t0) * st_t, st_t, Dh, n - t0 < TILE ? n - t0 : TILE,
                           s[i] + t0);
                scale_max(s[i], n, scale, &cm);
                if (cm > m[i] && m[i] > -INFINITY) { /* a later chunk raised the max: rescale the sums */
                    float r = m[i];
                    vn__exp_shift_f32(&r, 1, cm, 1.0f);
                    sum[i] *= r;
                    for (int64_t d = 0; d < Dh; d++) acc[i][d] *= r;
                }
                m[i] = cm > m[i] ? cm : m[i];
                if (m[i] == -INFINITY) /* every score so far −inf (or NaN): weight 0 (NaN stays), where
                                        * e^(s − m) would be e^(−inf + inf) = NaN though a later chunk
                                        * may hold finite scores; none at all: 0/0 below, as the full op */
                    for (int64_t j = 0; j < n; j++) s[i][j] = s[i][j] == -INFINITY ? 0.0f : s[i][j];
                else
                    vn__exp_shift_f32(s[i], n, m[i], 1.0f); /* the weights e^(s − m) */
                v[i] = v0[i] + c0 * st_t;
            }
            /* each head's sum in position order, the two chains side by side */
            if (nh == 2)
                for (int64_t j = 0; j < n; j++) sum[0] += s[0][j], sum[1] += s[1][j];
            else
                for (int64_t j = 0; j < n; j++) sum[0] += s[0][j];
            weighted_values(nh, p, v, st_t, n, Dh, acc);
        }
        for (int i = 0; i < nh; i++)
            for (int64_t d = 0; d < Dh; d++) acc[i][d] /= sum[i];
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
