/* attention_cpu.c — causal attention of one (batch, head) in AVX-512
 * registers, for Dh a multiple of 16 and T <= VN_ATT_CPU_MAX_T: at a GPT's
 * small heads OpenBLAS's per-call costs and packing were most of the time,
 * and the causal mask is cut finer here (16 columns, 4 or 8 rows) than its
 * blocks of 32 rows could.
 *
 * Every one of the seven products is one kernel, mac(): a tile of R rows ×
 * NV vectors of 16 floats held in registers, to which each step k adds
 * A[r, k] (one broadcast) times row k of B (NV loads). The products whose B
 * would be read down a column (Q·Kᵀ and G·Vᵀ) get Kᵀ and Vᵀ once per head,
 * transposed 16 × 16 at a time into scratch; the others read B (V, G, K, Q)
 * where it lies, and P, dS down a column through the broadcasts' stride.
 * The causal mask is applied at 16-column granularity in Q·Kᵀ and G·Vᵀ and
 * per row block elsewhere; P and dS are exact zeros above the diagonal, so
 * what a tile reads past the diagonal adds nothing.
 *
 * The file is compiled with -ffp-contract=off (CMakeLists.txt): every fused
 * multiply-add is written out, so the backward's exp(s − max)·(1/Σ) rounds
 * exactly as the forward's did and P is recomputed bit for bit. */
#include "attention_cpu.h"

#include <math.h> /* INFINITY */
#include <stdlib.h>

/* The scratch rows' length: T rounded up to whole vectors of 16. */
static int64_t padded(int64_t T) { return (T + 15) / 16 * 16; }

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,fma")
#include <immintrin.h>

#include "avx512_inline.h" /* vn__transpose16, vn__exp16 */

/* Lanes 0..n−1 of a vector (n in 1..16). */
static __mmask16 first_lanes(int64_t n) { return (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1); }

/* Unrolled early, so that GCC keeps a tile's array in registers only (left
 * to its later unrolling, it kept a copy on the stack as well). */
#define UNROLL _Pragma("GCC unroll 8")

/* O[r, 0:16·NV) = alpha · Σ_{k0 <= k < k1} A[r·rs + k·ks] · B[k·ldb + 0:16·NV)
 * for r < R (O's rows ldo apart), k1 > k0. R and NV are constants at each
 * call (the instances below), so the tile lives in R·NV registers. */
static inline __attribute__((always_inline)) void
mac(int R, int NV, float *O, int64_t ldo, const float *A, int64_t rs, int64_t ks, int64_t k0,
    int64_t k1, const float *B, int64_t ldb, float alpha)
{
    __m512 acc[8][4];
    /* the first step sets the tile, the others add to it */
    UNROLL for (int v = 0; v < NV; v++) {
        __m512 b = _mm512_loadu_ps(B + k0 * ldb + 16 * v);
        UNROLL for (int r = 0; r < R; r++)
            acc[r][v] = _mm512_mul_ps(_mm512_set1_ps(A[k0 * ks + r * rs]), b);
    }
    for (int64_t k = k0 + 1; k < k1; k++) {
        __m512 b[4];
        UNROLL for (int v = 0; v < NV; v++) b[v] = _mm512_loadu_ps(B + k * ldb + 16 * v);
        const float *a = A + k * ks;
        UNROLL for (int r = 0; r < R; r++) {
            __m512 ar = _mm512_set1_ps(a[r * rs]);
            UNROLL for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(ar, b[v], acc[r][v]);
        }
    }
    __m512 al = _mm512_set1_ps(alpha);
    UNROLL for (int r = 0; r < R; r++)
        UNROLL for (int v = 0; v < NV; v++)
            _mm512_storeu_ps(O + r * ldo + 16 * v, _mm512_mul_ps(al, acc[r][v]));
}

typedef void mac_fn(float *, int64_t, const float *, int64_t, int64_t, int64_t, int64_t,
                    const float *, int64_t, float);
#define MAC(R, NV)                                                                           \
    static void mac_##R##_##NV(float *O, int64_t ldo, const float *A, int64_t rs, int64_t ks, \
                               int64_t k0, int64_t k1, const float *B, int64_t ldb, float al) \
    {                                                                                        \
        mac(R, NV, O, ldo, A, rs, ks, k0, k1, B, ldb, al);                                   \
    }
/* Four rows × up to 4 vectors (16 accumulators) where a tile is 3 or 4
 * vectors wide, 8 rows where it is 1 or 2 (Dh = 16, 32: more FMAs per
 * load); one row for the rows left over. */
MAC(8, 1) MAC(8, 2) MAC(4, 3) MAC(4, 4) MAC(4, 1) MAC(4, 2) MAC(1, 1) MAC(1, 2) MAC(1, 3) MAC(1, 4)
#undef MAC

/* The instance for R rows × nv in 1..4 vectors: R = 8 (nv <= 2 only), 4 or 1. */
static mac_fn *mac_for(int R, int64_t nv)
{
    static mac_fn *const t8[2] = {mac_8_1, mac_8_2};
    static mac_fn *const t4[4] = {mac_4_1, mac_4_2, mac_4_3, mac_4_4};
    static mac_fn *const t1[4] = {mac_1_1, mac_1_2, mac_1_3, mac_1_4};
    return (R == 8 ? t8 : R == 4 ? t4 : t1)[nv - 1];
}

/* Rows per tile for a tile nv vectors wide (mac_for's choice). */
static int tile_rows(int64_t nv) { return nv <= 2 ? 8 : 4; }

/* S (T × Tp, row stride Tp): S[i, j] = alpha · Σ_d A[i, d]·Bt[d, j], A
 * (T × Dh, row stride lda), Bt (Dh × Tp) (a transposed K or V). A block of
 * rows r0..r1−1 gets the 16-column vectors that hold keys 0..r1−1; the rest
 * of its rows are left unwritten (above the diagonal). */
static void scores(float *S, int64_t Tp, const float *A, int64_t lda, const float *Bt, int64_t T,
                   int64_t Dh, float alpha)
{
    for (int64_t r0 = 0; r0 < T;) {
        int R = T - r0 >= 4 ? 4 : 1;
        int64_t nvec = (r0 + R + 15) / 16;
        for (int64_t c0 = 0; c0 < nvec; c0 += 4) {
            int64_t nc = nvec - c0 < 4 ? nvec - c0 : 4;
            mac_for(R, nc)(S + r0 * Tp + 16 * c0, Tp, A + r0 * lda, lda, 1, 0, Dh,
                           Bt + 16 * c0, Tp, alpha);
        }
        r0 += R;
    }
}

/* O (T × Dh, row stride ldo) = alpha · op(P)·B, P (T × Tp) zero above the
 * diagonal, B (T × Dh, row stride ldb). op(P) = P (P·V, dS·K): rows r0..r1−1 sum
 * over keys 0..r1−1; op(P) = Pᵀ (Pᵀ·dY, dSᵀ·Q): rows (keys) r0..r1−1 sum over
 * queries r0..T−1, P read down its columns through the broadcasts' stride. */
static void p_times(bool trans, float *O, int64_t ldo, const float *P, int64_t Tp, const float *B,
                    int64_t ldb, int64_t T, int64_t Dh, float alpha)
{
    for (int64_t c0 = 0; c0 < Dh / 16; c0 += 4) {
        int64_t nc = Dh / 16 - c0 < 4 ? Dh / 16 - c0 : 4;
        for (int64_t r0 = 0; r0 < T;) {
            int R = T - r0 >= tile_rows(nc) ? tile_rows(nc) : 1;
            if (trans)
                mac_for(R, nc)(O + r0 * ldo + 16 * c0, ldo, P + r0, 1, Tp, r0, T, B + 16 * c0,
                               ldb, alpha);
            else
                mac_for(R, nc)(O + r0 * ldo + 16 * c0, ldo, P + r0 * Tp, Tp, 1, 0, r0 + R,
                               B + 16 * c0, ldb, alpha);
            r0 += R;
        }
    }
}

/* Bt (Dh × Tp) = Bᵀ, B (T × Dh, row stride ldb), the columns T..Tp−1 zero:
 * 16 × 16 blocks, each transposed in registers. */
static void transpose(float *Bt, int64_t Tp, const float *B, int64_t ldb, int64_t T, int64_t Dh)
{
    for (int64_t t0 = 0; t0 < Tp; t0 += 16)
        for (int64_t d0 = 0; d0 < Dh; d0 += 16) {
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = t0 + i < T ? _mm512_loadu_ps(B + (t0 + i) * ldb + d0) : _mm512_setzero_ps();
            vn__transpose16(r);
            for (int k = 0; k < 16; k++) _mm512_storeu_ps(Bt + (d0 + k) * Tp + t0, r[k]);
        }
}

/* Row t of S (Tp wide) becomes e^(S − m)·inv on keys 0..t and 0 on t+1..Tp−1. */
static void probs_row(float *row, int64_t t, int64_t Tp, float m, float inv)
{
    int64_t nv = t / 16 + 1;
    __m512 mv = _mm512_set1_ps(m), iv = _mm512_set1_ps(inv);
    for (int64_t v = 0; v < nv; v++) {
        __mmask16 k = v == nv - 1 ? first_lanes(t + 1 - 16 * v) : 0xFFFF;
        __m512 e = vn__exp16(_mm512_sub_ps(_mm512_loadu_ps(row + 16 * v), mv));
        _mm512_storeu_ps(row + 16 * v, _mm512_maskz_mul_ps(k, e, iv));
    }
    for (int64_t v = nv; v < Tp / 16; v++) _mm512_storeu_ps(row + 16 * v, _mm512_setzero_ps());
}

/* Causal softmax of S's rows, stats[2t], stats[2t + 1] = max, 1/Σ e^(S − max). */
static void softmax(float *S, int64_t T, int64_t Tp, float *stats)
{
    for (int64_t t = 0; t < T; t++) {
        float *row = S + t * Tp;
        int64_t nv = t / 16 + 1;
        __mmask16 last = first_lanes(t + 1 - 16 * (nv - 1));
        __m512 mv = _mm512_set1_ps(-INFINITY), sv = _mm512_setzero_ps();
        for (int64_t v = 0; v < nv; v++) /* NaN scores are passed over, as the scalar max does */
            mv = _mm512_mask_max_ps(mv, v == nv - 1 ? last : 0xFFFF, _mm512_loadu_ps(row + 16 * v),
                                    mv);
        float m = _mm512_reduce_max_ps(mv);
        for (int64_t v = 0; v < nv; v++) {
            __m512 e = vn__exp16(_mm512_sub_ps(_mm512_loadu_ps(row + 16 * v), _mm512_set1_ps(m)));
            sv = _mm512_mask_add_ps(sv, v == nv - 1 ? last : 0xFFFF, sv, e);
            _mm512_storeu_ps(row + 16 * v, e);
        }
        float inv = 1.0f / _mm512_reduce_add_ps(sv);
        /* e·inv, the product probs_row rounds in the backward */
        __m512 iv = _mm512_set1_ps(inv);
        for (int64_t v = 0; v < nv; v++)
            _mm512_storeu_ps(row + 16 * v, _mm512_maskz_mul_ps(v == nv - 1 ? last : 0xFFFF,
                                                               _mm512_loadu_ps(row + 16 * v), iv));
        for (int64_t v = nv; v < Tp / 16; v++) _mm512_storeu_ps(row + 16 * v, _mm512_setzero_ps());
        stats[2 * t] = m;
        stats[2 * t + 1] = inv;
    }
}

/* dS = P ⊙ (dP − Σ_j dP ⊙ P) on each row's keys 0..t, 0 past them. */
static void softmax_grad(float *dP, const float *P, int64_t T, int64_t Tp)
{
    for (int64_t t = 0; t < T; t++) {
        const float *pr = P + t * Tp;
        float *dr = dP + t * Tp;
        int64_t nv = t / 16 + 1;
        __m512 sv = _mm512_setzero_ps();
        for (int64_t v = 0; v < nv; v++) {
            __mmask16 k = v == nv - 1 ? first_lanes(t + 1 - 16 * v) : 0xFFFF;
            sv = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, dr + 16 * v),
                                 _mm512_loadu_ps(pr + 16 * v), sv);
        }
        __m512 s = _mm512_set1_ps(_mm512_reduce_add_ps(sv));
        for (int64_t v = 0; v < nv; v++) {
            __mmask16 k = v == nv - 1 ? first_lanes(t + 1 - 16 * v) : 0xFFFF;
            __m512 d = _mm512_sub_ps(_mm512_loadu_ps(dr + 16 * v), s);
            _mm512_storeu_ps(dr + 16 * v, _mm512_maskz_mul_ps(k, _mm512_loadu_ps(pr + 16 * v), d));
        }
        for (int64_t v = nv; v < Tp / 16; v++) _mm512_storeu_ps(dr + 16 * v, _mm512_setzero_ps());
    }
}

void vn__attention_cpu_forward(float *O, int64_t ldo, float *stats, const float *Q,
                               const float *K, const float *V, int64_t ld, int64_t T, int64_t Dh,
                               float scale, float *scratch)
{
    int64_t Tp = padded(T);
    float *S = scratch, *Kt = S + T * Tp;
    transpose(Kt, Tp, K, ld, T, Dh);
    scores(S, Tp, Q, ld, Kt, T, Dh, scale);
    softmax(S, T, Tp, stats);
    p_times(false, O, ldo, S, Tp, V, ld, T, Dh, 1.0f);
}

void vn__attention_cpu_backward(float *dQ, float *dK, float *dV, const float *Q, const float *K,
                                const float *V, int64_t ld, const float *G, int64_t ldo,
                                const float *stats, int64_t T, int64_t Dh, float scale,
                                float *scratch)
{
    int64_t Tp = padded(T);
    float *P = scratch, *dP = P + T * Tp, *Kt = dP + T * Tp, *Vt = Kt + Dh * Tp;
    transpose(Kt, Tp, K, ld, T, Dh);
    scores(P, Tp, Q, ld, Kt, T, Dh, scale); /* the forward's scores, the same kernel */
    for (int64_t t = 0; t < T; t++) probs_row(P + t * Tp, t, Tp, stats[2 * t], stats[2 * t + 1]);
    if (dV) p_times(true, dV, ld, P, Tp, G, ldo, T, Dh, 1.0f);
    if (!dQ && !dK) return;
    transpose(Vt, Tp, V, ld, T, Dh);
    scores(dP, Tp, G, ldo, Vt, T, Dh, 1.0f);
    softmax_grad(dP, P, T, Tp);
    if (dQ) p_times(false, dQ, ld, dP, Tp, K, ld, T, Dh, scale);
    if (dK) p_times(true, dK, ld, dP, Tp, Q, ld, T, Dh, scale);
}

#pragma GCC pop_options

bool vn__attention_cpu_fast(int64_t T, int64_t Dh)
{
    const char *off = getenv("VENOM_NO_AVX512");
    return T >= 1 && T <= VN_ATT_CPU_MAX_T && Dh >= 16 && Dh % 16 == 0 &&
           __builtin_cpu_supports("avx512f") && !(off && *off);
}

size_t vn__attention_cpu_scratch(int64_t T, int64_t Dh, bool backward)
{
    int64_t Tp = padded(T); /* P (and dP), Kᵀ (and Vᵀ) */
    return (size_t)((T * Tp + Dh * Tp) * (backward ? 2 : 1));
}

#else /* no AVX-512 kernel on this compiler or CPU family: the OpenBLAS path always */

bool vn__attention_cpu_fast(int64_t T, int64_t Dh) { return false; }

size_t vn__attention_cpu_scratch(int64_t T, int64_t Dh, bool backward) { return 0; }

void vn__attention_cpu_forward(float *O, int64_t ldo, float *stats, const float *Q,
                               const float *K, const float *V, int64_t ld, int64_t T, int64_t Dh,
                               float scale, float *scratch)
{
}

void vn__attention_cpu_backward(float *dQ, float *dK, float *dV, const float *Q, const float *K,
                                const float *V, int64_t ld, const float *G, int64_t ldo,
                                const float *stats, int64_t T, int64_t Dh, float scale,
                                float *scratch)
{
}
#endif
