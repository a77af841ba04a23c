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
#if defined(__AVX__) || defined(__FMA__)
#include <immintrin.h>
#endif

/* Positions whose scores are computed together: TILE independent dot
 * products in flight instead of one chain of dependent multiply-adds. */
#define TILE 8
/* Positions whose scores are held at once (a multiple of TILE). */
#define CHUNK 64

/* The scores q·k_t of n ≤ TILE positions t0..t0+n−1 into s (unscaled).
 * Each is q[0]·k[0] + q[1]·k[1] + ... summed in d order with every product
 * rounded before it is added (no fused multiply-add): the arithmetic the
 * compiler made of the one-dot-at-a-time loop this replaced, so the same
 * bits; only TILE of these chains are interleaved instead of one. */
__attribute__((noinline, optimize("fp-contract=off"))) static void
scores(const float *q, const float *k0, int64_t st_t, int64_t st_f, int64_t Dh, int64_t t0, int64_t n,
       float *s)
{
    float a[TILE] = {0}; /* local sums: s may alias q or k for all the compiler knows */
#ifdef __AVX__
    if (n == TILE && st_f == 1) { /* the cache's layout: 8 positions in the 8 lanes of a vector */
        __m256 acc = _mm256_setzero_ps();
        int64_t d = 0;
        for (; d + 8 <= Dh; d += 8) {
            /* the 8 × 8 block k[t0 + j][d + i] transposed, so that c[i] holds
             * column d + i of the 8 positions */
            __m256 r[8], u[8], c[8];
            for (int j = 0; j < 8; j++) r[j] = _mm256_loadu_ps(k0 + (t0 + j) * st_t + d);
            for (int j = 0; j < 8; j += 2) {
                u[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
                u[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
            }
            for (int j = 0; j < 8; j += 4) {
                r[j] = _mm256_shuffle_ps(u[j], u[j + 2], 0x44);
                r[j + 1] = _mm256_shuffle_ps(u[j], u[j + 2], 0xee);
                r[j + 2] = _mm256_shuffle_ps(u[j + 1], u[j + 3], 0x44);
                r[j + 3] = _mm256_shuffle_ps(u[j + 1], u[j + 3], 0xee);
            }
            for (int j = 0; j < 4; j++) {
                c[j] = _mm256_permute2f128_ps(r[j], r[j + 4], 0x20);
                c[j + 4] = _mm256_permute2f128_ps(r[j], r[j + 4], 0x31);
            }
            /* in d order, each product rounded before it is added (no FMA:
             * this function is compiled with fp-contract off) */
            for (int i = 0; i < 8; i++)
                acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(q[d + i]), c[i]));
        }
        _mm256_storeu_ps(a, acc);
        for (; d < Dh; d++)
            for (int j = 0; j < TILE; j++) a[j] += q[d] * k0[(t0 + j) * st_t + d];
    } else
#endif
    if (n == TILE) { /* a full tile: the compiler keeps the TILE sums in registers */
        for (int64_t d = 0; d < Dh; d++) {
            float qd = q[d * st_f];
            const float *k = k0 + t0 * st_t + d * st_f;
            for (int j = 0; j < TILE; j++) a[j] += qd * k[j * st_t];
        }
    } else {
        for (int64_t d = 0; d < Dh; d++)
            for (int64_t j = 0; j < n; j++) a[j] += q[d * st_f] * k0[(t0 + j) * st_t + d * st_f];
    }
    for (int j = 0; j < TILE; j++) s[j] = a[j];
}

/* acc[d] += Σ_j p[j] · v_j[d] over n positions (v_j[d] at v[j·st_t +
 * d·st_f]), for each d in j order, each step one fused multiply-add. */
static void weighted_values(const float *p, const float *v, int64_t st_t, int64_t st_f, int64_t n,
                            int64_t Dh, float *acc)
{
    int64_t d0 = 0;
#ifdef __FMA__
    if (st_f == 1) /* the cache's layout: 32 of acc in registers through all n positions */
        for (; d0 + 32 <= Dh; d0 += 32) {
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
        for (int64_t d = d0; d < Dh; d++) acc[d] = fmaf(p[j], v[j * st_t + d * st_f], acc[d]);
}

/* One sequence (see internal.h): each head's query row T − 1 against keys
 * and values 0..T−1, a chunk of CHUNK positions at a time. Not inlined:
 * one copy for the op and the fused decoder, the same bits. */
__attribute__((noinline)) void vn__attention_last_row(const float *x, int64_t st_t, int64_t st_f,
                                                      int64_t T, int64_t C, int64_t n_head, float *y)
{
    int64_t Dh = C / n_head;
    float scale = Dh ? (float)(1.0 / sqrt((double)Dh)) : 1.0f; /* as vn_causal_self_attention */
    for (int64_t h = 0; h < n_head; h++) {
        const float *q = x + (T - 1) * st_t + h * Dh * st_f;
        const float *k0 = x + (C + h * Dh) * st_f, *v0 = k0 + C * st_f;
        float *acc = y + h * Dh, m = -INFINITY, sum = 0;
        for (int64_t d = 0; d < Dh; d++) acc[d] = 0;
        for (int64_t c0 = 0; c0 < T; c0 += CHUNK) {
            int64_t n = T - c0 < CHUNK ? T - c0 : CHUNK;
            float s[CHUNK], cm = m;
            for (int64_t t0 = 0; t0 < n; t0 += TILE)
                scores(q, k0, st_t, st_f, Dh, c0 + t0, n - t0 < TILE ? n - t0 : TILE, s + t0);
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
            vn__exp_shift_f32(s, n, m, 1.0f); /* the weights e^(s − m) */
            for (int64_t j = 0; j < n; j++) sum += s[j];
            weighted_values(s, v0 + c0 * st_t, st_t, st_f, n, Dh, acc);
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
    for (int64_t b = 0; b < B; b++)
        vn__attention_last_row(x + b * st[0], st[1], st[2], T, C, n_head, y + b * C);
    return out;
}
