/* ternary.c — packed ternary weights (2 bits each, layout in venom/quant.h)
 * and the inference product with int8 activations: integer dot products,
 * one scale per output. Three instantiations of the kernel: portable C,
 * AVX2 with vpmaddubsw (u8 × s8 → pairwise s16 sums), and AVX-512 VNNI with
 * vpdpbusd (u8 × s8 → s32 sums of four), picked at run time by the CPU like
 * the V:N:M kernels (engine/sparse/vnm_kernels.c).
 *
 * The weights are stored as codes c = W̃ + 1 ∈ {0, 1, 2}, which are unsigned
 * as vpmaddubsw and vpdpbusd want their first operand: Σ c·x̃ = Σ W̃·x̃ + Σ x̃, so the
 * kernel subtracts Σ x̃ of the row (computed once per row) at the end. */
#include "quant_internal.h"

#include <stdlib.h>

int64_t vn_ternary_row_bytes(int64_t K)
{
    return (K + VNQ_GROUP - 1) / VNQ_GROUP * VNQ_GROUP_BYTES;
}


/* ---- the kernels ------------------------------------------------------------------ */

/* The scaled output of one (row, weight row) pair: 0 for a zero row
 * (s = 0), NaN for a row that held a NaN or ∞ (s = NaN). */
static inline float finish(int32_t acc, int32_t xsum, float s, float gamma)
{
    return s == 0 ? 0.0f : (float)(acc - xsum) * (gamma / s);
}

/* Activation rows per pass over a weight row (the portable loop keeps
 * their sums in an array, the AVX2 one in registers). */
#define PORTABLE_ROWS 16

/* Plain C: each 128-column group of the weight row is unpacked once to
 * int8 W̃ and then dotted with the group of every activation row of the
 * tile, a loop of int8 products compilers vectorise. */
static void kernel_portable(const uint8_t *packed, int64_t N, int64_t Kp, const int8_t *xq,
                            const int32_t *xsum, const float *s, int64_t B, float gamma, float *y,
                            int64_t ldy)
{
    int64_t rb = Kp / 4;
    (void)xsum; /* the unpacked W̃ are signed: no offset to take back */
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *row = packed + n * rb;
        for (int64_t b0 = 0; b0 < B; b0 += PORTABLE_ROWS) {
            int nb = B - b0 < PORTABLE_ROWS ? (int)(B - b0) : PORTABLE_ROWS;
            int32_t acc[PORTABLE_ROWS] = {0};
            for (int64_t g = 0; g < Kp / VNQ_GROUP; g++) {
                int8_t w[VNQ_GROUP];
                for (int q = 0; q < 4; q++)
                    for (int i = 0; i < 32; i++) w[q * 32 + i] = (int8_t)(((row[g * 32 + i] >> (2 * q)) & 3) - 1);
                for (int j = 0; j < nb; j++) {
                    const int8_t *xr = xq + (b0 + j) * Kp + g * VNQ_GROUP;
                    int32_t dot = 0;
                    for (int i = 0; i < VNQ_GROUP; i++) dot += w[i] * xr[i];
                    acc[j] += dot;
                }
            }
            for (int j = 0; j < nb; j++) y[(b0 + j) * ldy + n] = finish(acc[j], 0, s[b0 + j], gamma);
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define VNQ_HAVE_AVX2 1
#pragma GCC push_options
#pragma GCC target("avx2")
#include <immintrin.h>

/* Activation rows per pass over a weight row: the group's four unpacked
 * weight vectors serve this many rows from registers. */
#define AVX2_ROWS 4

static int32_t hsum_epi32(__m256i v)
{
    __m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0x4e));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0xb1));
    return _mm_cvtsi128_si32(a);
}

/* The general AVX2 loop: each weight row against AVX2_ROWS activation rows
 * at a time, one horizontal sum per (row, weight row). */
static void avx2_rows(const uint8_t *packed, int64_t N, int64_t Kp, const int8_t *xq,
                      const int32_t *xsum, const float *s, int64_t B, float gamma, float *y,
                      int64_t ldy)
{
    int64_t rb = Kp / 4, G = Kp / VNQ_GROUP;
    const __m256i mask = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *row = packed + n * rb;
        for (int64_t b0 = 0; b0 < B; b0 += AVX2_ROWS) {
            int nb = B - b0 < AVX2_ROWS ? (int)(B - b0) : AVX2_ROWS;
            __m256i acc[AVX2_ROWS];
            for (int j = 0; j < AVX2_ROWS; j++) acc[j] = _mm256_setzero_si256();
            for (int64_t g = 0; g < G; g++) {
                __m256i p = _mm256_loadu_si256((const __m256i *)(row + g * 32));
                /* The 16-bit shifts move bits across byte borders; the mask
                 * keeps each byte's own two. */
                __m256i w0 = _mm256_and_si256(p, mask);
                __m256i w1 = _mm256_and_si256(_mm256_srli_epi16(p, 2), mask);
                __m256i w2 = _mm256_and_si256(_mm256_srli_epi16(p, 4), mask);
                __m256i w3 = _mm256_and_si256(_mm256_srli_epi16(p, 6), mask);
                for (int j = 0; j < nb; j++) {
                    const __m256i *xr = (const __m256i *)(xq + (b0 + j) * Kp + g * VNQ_GROUP);
                    /* Each s16 lane ≤ 2·2·128 = 512 in size, four of them ≤ 2048: no
                     * saturation before the widening vpmaddwd. */
                    __m256i t = _mm256_add_epi16(
                        _mm256_add_epi16(_mm256_maddubs_epi16(w0, _mm256_loadu_si256(xr)),
                                         _mm256_maddubs_epi16(w1, _mm256_loadu_si256(xr + 1))),
                        _mm256_add_epi16(_mm256_maddubs_epi16(w2, _mm256_loadu_si256(xr + 2)),
                                         _mm256_maddubs_epi16(w3, _mm256_loadu_si256(xr + 3))));
                    acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(t, ones));
                }
            }
            for (int j = 0; j < nb; j++)
                y[(b0 + j) * ldy + n] = finish(hsum_epi32(acc[j]), xsum[b0 + j], s[b0 + j], gamma);
        }
    }
}

/* One activation row (decoding): four weight rows per pass share the loads
 * of x̃, and their four accumulators are reduced by one tree of hadds and
 * scaled as one vector. At the small K of a narrow model (128: one group
 * per row) the per-row horizontal sum and scalar scaling of avx2_rows cost
 * as much as the products. The same integer sums and the same float
 * operations as finish(), so the same bits. */
static void avx2_one_row(const uint8_t *packed, int64_t N, int64_t Kp, const int8_t *xq,
                         const int32_t *xsum, const float *s, float gamma, float *y)
{
    int64_t rb = Kp / 4, G = Kp / VNQ_GROUP, n = 0;
    const __m256i mask = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    /* s = 0 (a zero row, whose sums are 0) gives 0; s = NaN gives NaN */
    const __m128 scale = _mm_set1_ps(s[0] == 0 ? 0.0f : gamma / s[0]);
    const __m128i off = _mm_set1_epi32(xsum[0]);
    for (; n + 4 <= N; n += 4) {
        __m256i acc[4];
        for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_si256();
        for (int64_t g = 0; g < G; g++) {
            const __m256i *xr = (const __m256i *)(xq + g * VNQ_GROUP);
            __m256i x0 = _mm256_loadu_si256(xr), x1 = _mm256_loadu_si256(xr + 1),
                    x2 = _mm256_loadu_si256(xr + 2), x3 = _mm256_loadu_si256(xr + 3);
            for (int r = 0; r < 4; r++) {
                __m256i p = _mm256_loadu_si256((const __m256i *)(packed + (n + r) * rb + g * 32));
                __m256i t = _mm256_add_epi16(
                    _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(p, mask), x0),
                                     _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(p, 2), mask), x1)),
                    _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(p, 4), mask), x2),
                                     _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(p, 6), mask), x3)));
                acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(t, ones));
            }
        }
        /* per 128-bit half: [Σacc0, Σacc1, Σacc2, Σacc3]; then the halves added */
        __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(acc[0], acc[1]), _mm256_hadd_epi32(acc[2], acc[3]));
        __m128i sums = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        _mm_storeu_ps(y + n, _mm_mul_ps(_mm_cvtepi32_ps(_mm_sub_epi32(sums, off)), scale));
    }
    if (n < N) avx2_rows(packed + n * rb, N - n, Kp, xq, xsum, s, 1, gamma, y + n, 1);
}

static void kernel_avx2(const uint8_t *packed, int64_t N, int64_t Kp, const int8_t *xq,
                        const int32_t *xsum, const float *s, int64_t B, float gamma, float *y,
                        int64_t ldy)
{
    if (B == 1) avx2_one_row(packed, N, Kp, xq, xsum, s, gamma, y);
    else avx2_rows(packed, N, Kp, xq, xsum, s, B, gamma, y, ldy);
}
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")

/* Activation rows per pass over a weight row, as AVX2_ROWS: 32 zmm
 * registers hold the accumulators, the two weight vectors and the loads. */
#define VNNI_ROWS 8

/* Weight rows per pass of vnni_one_row: two per zmm, four zmm accumulators. */
#define VNNI_ONE_ROW_N 8

/* y[0..7] = (Σ of rows 0..7 − off) · scale, the same float operations as
 * finish(), where rows 2r and 2r+1 are the 256-bit halves of acc[r]. Per
 * 128-bit lane, h[0] holds partial sums of rows 0–3 and h[1] of rows 4–7;
 * adding the two lanes gives the eight row sums in order. */
static inline void store_eight(const __m512i acc[VNNI_ONE_ROW_N / 2], __m256i off, __m256 scale, float *y)
{
    __m256i h[2];
    for (int q = 0; q < 2; q++) {
        __m512i u = acc[2 * q], v = acc[2 * q + 1];
        h[q] = _mm256_hadd_epi32(
            _mm256_hadd_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1)),
            _mm256_hadd_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)));
    }
    __m256i sums = _mm256_add_epi32(_mm256_permute2x128_si256(h[0], h[1], 0x20),
                                    _mm256_permute2x128_si256(h[0], h[1], 0x31));
    _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sums, off)), scale));
}

/* One activation row (decoding) with VNNI: each zmm holds the same group of
 * two weight rows (one per 256-bit half) against x̃'s group broadcast to
 * both halves, so one instruction serves two rows, and unlike the general
 * loop below no 512-bit horizontal sum per row: the eight rows of a pass
 * are reduced together by one tree of hadds and scaled as one vector (the
 * same float operations as finish(), so the same bits). On Zen 4 faster
 * than avx2_one_row for weights that fit in L2, slower past them
 * (auto_kernel below). */
static void vnni_one_row(const uint8_t *packed, int64_t N, int64_t Kp, const int8_t *xq,
                         const int32_t *xsum, const float *s, float gamma, float *y)
{
    int64_t rb = Kp / 4, G = Kp / VNQ_GROUP, n = 0;
    const __m512i mask = _mm512_set1_epi8(3);
    const __m256 scale = _mm256_set1_ps(s[0] == 0 ? 0.0f : gamma / s[0]); /* as avx2_one_row */
    const __m256i off = _mm256_set1_epi32(xsum[0]);
    for (; n + VNNI_ONE_ROW_N <= N; n += VNNI_ONE_ROW_N) {
        __m512i acc[VNNI_ONE_ROW_N / 2];
        for (int r = 0; r < VNNI_ONE_ROW_N / 2; r++) acc[r] = _mm512_setzero_si512();
        for (int64_t g = 0; g < G; g++) {
            const __m256i *xr = (const __m256i *)(xq + g * VNQ_GROUP);
            __m512i x0 = _mm512_broadcast_i64x4(_mm256_loadu_si256(xr)),
                    x1 = _mm512_broadcast_i64x4(_mm256_loadu_si256(xr + 1)),
                    x2 = _mm512_broadcast_i64x4(_mm256_loadu_si256(xr + 2)),
                    x3 = _mm512_broadcast_i64x4(_mm256_loadu_si256(xr + 3));
            for (int r = 0; r < VNNI_ONE_ROW_N / 2; r++) {
                const uint8_t *w = packed + (n + 2 * r) * rb + g * 32; /* rows n+2r, n+2r+1 */
                __m512i p = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)w)),
                                               _mm256_loadu_si256((const __m256i *)(w + rb)), 1);
                /* two chains of two vpdpbusd each, not one of four (latency) */
                __m512i a = _mm512_dpbusd_epi32(acc[r], _mm512_and_si512(p, mask), x0);
                __m512i b = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                                _mm512_and_si512(_mm512_srli_epi16(p, 2), mask), x1);
                a = _mm512_dpbusd_epi32(a, _mm512_and_si512(_mm512_srli_epi16(p, 4), mask), x2);
                b = _mm512_dpbusd_epi32(b, _mm512_and_si512(_mm512_srli_epi16(p, 6), mask), x3);
                acc[r] = _mm512_add_epi32(a, b);
            }
        }
        store_eight(acc, off, scale, y + n);
    }
    const __m256i m = _mm256_set1_epi8(3);
    for (; n < N; n++) { /* the last N mod 8 rows, one at a time */
        const uint8_t *w = packed + n * rb;
        __m256i acc = _mm256_setzero_si256();
        for (int64_t g = 0; g < G; g++) {
            const __m256i *xr = (const __m256i *)(xq + g * VNQ_GROUP);
            __m256i p = _mm256_loadu_si256((const __m256i *)(w + g * 32));
            for (int q = 0; q < 4; q++) /* columns 32q .. 32q+31 of the group */
                acc = _mm256_dpbusd_epi32(acc, _mm256_and_si256(_mm256_srli_epi16(p, 2 * q), m),
                                          _mm256_loadu_si256(xr + q));
        }
        y[n] = finish(hsum_epi32(acc), xsum[0], s[0], gamma);
    }
}

/* Groups per row up to which several activation rows take narrow_rows:
 * 8 weight rows unpacked are 1 KiB per group, in L1. */
#define VNNI_NARROW_MAX_GROUPS 8

/* Several activation rows against narrow weights (K ≤ 1024: a sliding
 * window's 64 rows through tutorial 5's model): blocks of eight weight rows
 * are unpacked once, as vnni_one_row lays them out (two rows per zmm, the
 * codes of one 32-column quarter of a group per vector), and each activation
 * row then runs vnni_one_row's products and reduction on them: per output
 * about a quarter of the operations of the general loop below, whose
 * 512-bit horizontal sum per (row, weight row) dominates at one or two
 * groups. The same integer sums and float operations, so the same bits.
 * The last N mod 8 weight rows go to the general loop (rows). */
static void vnni_narrow_rows(const uint8_t *packed, int64_t N, int64_t Kp, const int8_t *xq,
                             const int32_t *xsum, const float *s, int64_t B, float gamma, float *y,
                             int64_t ldy, vnq_kernel rows)
{
    int64_t rb = Kp / 4, G = Kp / VNQ_GROUP, n = 0;
    const __m512i mask = _mm512_set1_epi8(3);
    __m512i w[VNNI_NARROW_MAX_GROUPS][VNNI_ONE_ROW_N / 2][4]; /* [group][row pair][quarter] */
    for (; n + VNNI_ONE_ROW_N <= N; n += VNNI_ONE_ROW_N) {
        for (int64_t g = 0; g < G; g++)
            for (int r = 0; r < VNNI_ONE_ROW_N / 2; r++) {
                const uint8_t *pw = packed + (n + 2 * r) * rb + g * 32;
                __m512i p = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)pw)),
                                               _mm256_loadu_si256((const __m256i *)(pw + rb)), 1);
                for (int q = 0; q < 4; q++) w[g][r][q] = _mm512_and_si512(_mm512_srli_epi16(p, 2 * (unsigned)q), mask);
            }
        for (int64_t b = 0; b < B; b++) {
            __m512i acc[VNNI_ONE_ROW_N / 2];
            for (int r = 0; r < VNNI_ONE_ROW_N / 2; r++) acc[r] = _mm512_setzero_si512();
            for (int64_t g = 0; g < G; g++) {
                const __m256i *xr = (const __m256i *)(xq + b * Kp + g * VNQ_GROUP);
                __m512i x0 = _mm512_broadcast_i64x4(_mm256_loadu_si256(xr)),
                        x1 = _mm512_broadcast_i64x4(_mm256_loadu_si256(xr + 1)),
                        x2 = _mm512_broadcast_i64x4(_mm256_loadu_si256(xr + 2)),
                        x3 = _mm512_broadcast_i64x4(_mm256_loadu_si256(xr + 3));
                for (int r = 0; r < VNNI_ONE_ROW_N / 2; r++) { /* as vnni_one_row */
                    __m512i a = _mm512_dpbusd_epi32(acc[r], w[g][r][0], x0);
                    __m512i c = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[g][r][1], x1);
                    a = _mm512_dpbusd_epi32(a, w[g][r][2], x2);
                    c = _mm512_dpbusd_epi32(c, w[g][r][3], x3);
                    acc[r] = _mm512_add_epi32(a, c);
                }
            }
            const __m256 scale = _mm256_set1_ps(s[b] == 0 ? 0.0f : gamma / s[b]); /* as finish() */
            store_eight(acc, _mm256_set1_epi32(xsum[b]), scale, y + b * ldy + n);
        }
    }
    if (n < N) rows(packed + n * rb, N - n, Kp, xq, xsum, s, B, gamma, y + n, ldy);
}

/* AVX-512 VNNI: vpdpbusd adds the four u8 × s8 products of each 32-bit
 * lane straight into an s32 accumulator (no s16 step, no saturation). One
 * 128-column group is two 64-byte vectors: the group's 32 packed bytes are
 * broadcast to both halves of a zmm and shifted by 0 | 2 bits (columns
 * 0–63 of the group, in x̃'s order) and by 4 | 6 bits (columns 64–127).
 * One activation row goes to vnni_one_row. */
static void kernel_avx512vnni(const uint8_t *packed, int64_t N, int64_t Kp, const int8_t *xq,
                              const int32_t *xsum, const float *s, int64_t B, float gamma, float *y,
                              int64_t ldy)
{
    int64_t rb = Kp / 4, G = Kp / VNQ_GROUP;
    const __m512i mask = _mm512_set1_epi8(3);
    /* Per-16-bit-lane shift counts: the low 256 bits by a, the high by b. */
    const __m512i sh01 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    const __m512i sh23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    if (B == 1) {
        vnni_one_row(packed, N, Kp, xq, xsum, s, gamma, y);
        return;
    }
    if (G <= VNNI_NARROW_MAX_GROUPS && N >= VNNI_ONE_ROW_N) {
        vnni_narrow_rows(packed, N, Kp, xq, xsum, s, B, gamma, y, ldy, kernel_avx512vnni);
        return;
    }
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *row = packed + n * rb;
        for (int64_t b0 = 0; b0 < B; b0 += VNNI_ROWS) {
            int nb = B - b0 < VNNI_ROWS ? (int)(B - b0) : VNNI_ROWS;
            __m512i acc[VNNI_ROWS];
            for (int j = 0; j < VNNI_ROWS; j++) acc[j] = _mm512_setzero_si512();
            for (int64_t g = 0; g < G; g++) {
                __m512i p = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(row + g * 32)));
                /* As in AVX2, the mask keeps each byte's own two bits. */
                __m512i w01 = _mm512_and_si512(_mm512_srlv_epi16(p, sh01), mask);
                __m512i w23 = _mm512_and_si512(_mm512_srlv_epi16(p, sh23), mask);
                for (int j = 0; j < nb; j++) {
                    const int8_t *xr = xq + (b0 + j) * Kp + g * VNQ_GROUP;
                    /* The group's sum starts from zero so that the chain
                     * carried from group to group is one vpaddd, not two
                     * vpdpbusd (several cycles of latency each). */
                    __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w01, _mm512_loadu_si512(xr));
                    t = _mm512_dpbusd_epi32(t, w23, _mm512_loadu_si512(xr + 64));
                    acc[j] = _mm512_add_epi32(acc[j], t);
                }
            }
            for (int j = 0; j < nb; j++)
                y[(b0 + j) * ldy + n] =
                    finish(_mm512_reduce_add_epi32(acc[j]), xsum[b0 + j], s[b0 + j], gamma);
        }
    }
}
#pragma GCC pop_options
#endif

/* The kernels by name; NULL where the build or the CPU lacks one. */
static vnq_kernel by_name(const char *isa)
{
#ifdef VNQ_HAVE_AVX2
    if (!strcmp(isa, "avx512vnni") && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512vnni"))
        return kernel_avx512vnni;
    if (!strcmp(isa, "avx2") && __builtin_cpu_supports("avx2")) return kernel_avx2;
#endif
    return !strcmp(isa, "portable") ? kernel_portable : NULL;
}

/* VENOM_NO_AVX512 (as for the V:N:M kernels) and VENOM_NO_AVX2, when set
 * (non-empty), skip the kernels of that ISA and above in the automatic
 * choice: to test and time the others on one machine. */
static bool env_set(const char *name)
{
    const char *v = getenv(name);
    return v && *v;
}

/* The kernel vn_ternary_set_kernel forced (NULL: the automatic choice).
 * Atomic: products on other threads read it on every call. */
static vnq_kernel forced;

/* Up to this many activation rows, AMD CPUs get the AVX2 kernel rather than
 * VNNI: on Zen 4 (which runs 512-bit operations as two 256-bit halves) the
 * VNNI kernel was 1.1–1.6× slower than AVX2 for one row, level at 2–4 rows
 * and 10–40% faster from 8 rows on 4096-wide weights, and 2–6× slower at 1–4
 * rows on the 128-wide weights of tutorial 5's model (bench/RESULTS.md,
 * "AVX-512 VNNI" and issue 20's batch-1 dispatch). Intel CPUs were not
 * measured and keep VNNI for every batch. */
#define VNQ_AVX2_MAX_ROWS 4

/* ... except against packed weights of at most this many bytes (the 1 MiB
 * L2 of a Zen 4 core) for one row, or for 2–4 rows when the weights are
 * narrow (vnni_narrow_rows): there VNNI's one-row loop was 1.1–1.4× AVX2's
 * (384×128 to 2048×512), and 1.25× slower at 4096×4096 (4 MiB, streamed
 * from L3) (bench/RESULTS.md, issue 20, wt-k); the narrow loop 1.25–3× AVX2's
 * at 2 and 4 rows (384×128, 128×512, 1536×512; wt-c). */
#define VNQ_VNNI_ONE_ROW_MAX_BYTES (1 << 20)

static vnq_kernel auto_kernel(int64_t rows, int64_t N, int64_t row_bytes)
{
    if (env_set("VENOM_NO_AVX2")) return kernel_portable;
    vnq_kernel k = env_set("VENOM_NO_AVX512") ? NULL : by_name("avx512vnni");
#ifdef VNQ_HAVE_AVX2
    int64_t weight_bytes = N > INT64_MAX / row_bytes ? INT64_MAX : N * row_bytes;
    bool narrow = row_bytes <= VNNI_NARROW_MAX_GROUPS * VNQ_GROUP_BYTES && N >= VNNI_ONE_ROW_N;
    bool small = weight_bytes <= VNQ_VNNI_ONE_ROW_MAX_BYTES && (rows == 1 || narrow);
    if (k && rows <= VNQ_AVX2_MAX_ROWS && !small && __builtin_cpu_is("amd")) k = NULL;
#else
    (void)rows, (void)N, (void)row_bytes;
#endif
    if (!k) k = by_name("avx2");
    return k ? k : kernel_portable;
}

vnq_kernel vnq__kernel(const char *isa)
{
    return isa ? by_name(isa) : vnq__kernel_for(INT64_MAX);
}

vnq_kernel vnq__kernel_for(int64_t rows) { return vnq__kernel_for_shape(rows, INT64_MAX, INT64_MAX); }

vnq_kernel vnq__kernel_for_shape(int64_t rows, int64_t N, int64_t row_bytes)
{
    vnq_kernel k = __atomic_load_n(&forced, __ATOMIC_RELAXED);
    return k ? k : auto_kernel(rows, N, row_bytes);
}

static const char *kernel_name(vnq_kernel k)
{
#ifdef VNQ_HAVE_AVX2
    if (k == kernel_avx512vnni) return "avx512vnni";
    if (k == kernel_avx2) return "avx2";
#endif
    (void)k;
    return "portable";
}

vn_status vn_ternary_set_kernel(const char *name)
{
    static const char names[] = "\"auto\", \"avx512vnni\", \"avx2\" or \"portable\"";
    if (!name) return vn__err(VN_ERR_ARG, "ternary_set_kernel: name is NULL, expected %s", names);
    vnq_kernel k = NULL;
    if (strcmp(name, "auto")) {
        if (strcmp(name, "avx512vnni") && strcmp(name, "avx2") && strcmp(name, "portable"))
            return vn__err(VN_ERR_ARG, "ternary_set_kernel: unknown kernel \"%s\", expected %s", name,
                           names);
        if (!(k = by_name(name)))
            return vn__err(VN_ERR_ARG, "ternary_set_kernel: kernel \"%s\" is not available: %s", name,
#ifdef VNQ_HAVE_AVX2
                           "this CPU lacks its instructions"
#else
                           "this build has no x86 SIMD kernels"
#endif
            );
    }
    __atomic_store_n(&forced, k, __ATOMIC_RELAXED);
    return VN_OK;
}

const char *vn_ternary_kernel(int64_t rows) { return kernel_name(vnq__kernel_for(rows)); }

const char *vn_ternary_isa(void) { return kernel_name(vnq__kernel(NULL)); }

/* ---- packing ---------------------------------------------------------------------- */

void vnq__clear_packed(uint8_t *dst, int64_t nbytes)
{
    memset(dst, 0x55, (size_t)nbytes); /* code 1 (zero) everywhere, padding included */
}

void vnq__set_trit(uint8_t *row, int64_t k, int t)
{
    uint8_t *byte = row + vnq__code_byte(k);
    *byte = (uint8_t)((*byte & ~(3 << vnq__code_shift(k))) | (t + 1) << vnq__code_shift(k));
}

vn_tensor *vn_ternary_pack(const vn_tensor *w, float *gamma)
{
    if (!gamma) return vn__errp(VN_ERR_ARG, "ternary_pack: gamma (the output scale) is NULL");
    float g = 0;
    vn_tensor *wq = vn_ternary_quantize(w, &g); /* γ·W̃ */
    if (!wq) return NULL;
    int64_t N = wq->shape[0], K = wq->shape[1], rb = vn_ternary_row_bytes(K);
    vn_tensor *p = vn__new(VN_U8, 2, (int64_t[]){N, rb});
    if (p) {
        const float *src = vn_tensor_data(wq);
        uint8_t *dst = vn_tensor_data(p);
        vnq__clear_packed(dst, N * rb);
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++)
                /* γ·W̃ / γ is exactly ±1 or 0; with γ = 0 every W̃ is 0. */
                vnq__set_trit(dst + n * rb, k, g > 0 ? (int)(src[n * K + k] / g) : 0);
        *gamma = g;
    }
    vn_tensor_release(wq);
    return p;
}


/* packed u8 (N, vn_ternary_row_bytes(K)), K ≥ 1: the shape only. */
vn_status vnq__check_packed(const vn_tensor *packed, int64_t K, const char *op)
{
    vn_status st = vn__check_dtype_arg(packed, VN_U8, op, "packed weights", 0);
    if (st) return st;
    if (K < 1) return vn__err(VN_ERR_ARG, "%s: in features K = %lld, expected K ≥ 1", op, (long long)K);
    int64_t rb = vn_ternary_row_bytes(K);
    if (packed->ndim != 2 || packed->shape[1] != rb)
        return vn__err(VN_ERR_SHAPE, "%s: packed weights of shape %s, expected (N, %lld) for "
                       "K = %lld (32 bytes per 128 columns)", op,
                       vn__shape(packed->ndim, packed->shape), (long long)rb, (long long)K);
    return VN_OK;
}

vn_status vnq__check_codes(const vn_tensor *packed, int64_t K, const char *op)
{
    vn_status st = vnq__check_packed(packed, K, op);
    if (st) return st;
    int64_t rb = vn_ternary_row_bytes(K);
    vn_tensor *pc = vn__plain_contiguous(packed);
    if (!pc) return vn_last_status();
    const uint8_t *p = vn_tensor_data(pc);
    int64_t N = packed->shape[0], bad_n = -1, bad_k = 0;
    int bad_code = 0;
    /* A code 3 has both its bits set: one test per byte over the whole
     * matrix (vectorised), and rows are looked at one by one only to find
     * a bad code or to check the padding columns. */
    uint8_t any_three = 0;
    for (int64_t i = 0; i < N * rb; i++) any_three |= p[i] & (p[i] >> 1) & 0x55;
    if (!any_three && K == rb * 4) N = 0; /* nothing to find */
    for (int64_t n = 0; n < N && bad_n < 0; n++) {
        const uint8_t *row = p + n * rb;
        uint8_t threes = 0;
        for (int64_t i = 0; i < rb; i++) threes |= row[i] & (row[i] >> 1) & 0x55;
        for (int64_t k = threes ? 0 : K; k < rb * 4; k++) {
            int code = vnq__code_at(row, k);
            if (code == 3 || (k >= K && code != 1)) {
                bad_n = n, bad_k = k, bad_code = code;
                break;
            }
        }
    }
    vn_tensor_release(pc);
    if (bad_n >= 0)
        return vn__err(VN_ERR_FORMAT, "%s: packed weights row %lld, column %lld: code %d, "
                       "expected 0, 1 or 2 (W̃ + 1), and 1 past K = %lld: corrupt data", op,
                       (long long)bad_n, (long long)bad_k, bad_code, (long long)K);
    return VN_OK;
}

vn_status vn_ternary_check(const vn_tensor *packed, int64_t K)
{
    return vnq__check_codes(packed, K, "ternary_check");
}

vn_tensor *vn_ternary_unpack(const vn_tensor *packed, int64_t K)
{
    if (vnq__check_codes(packed, K, "ternary_unpack")) return NULL;
    int64_t N = packed->shape[0], rb = vn_ternary_row_bytes(K);
    vn_tensor *pc = vn__plain_contiguous(packed);
    vn_tensor *w = pc ? vn__new(VN_F32, 2, (int64_t[]){N, K}) : NULL;
    if (w) {
        const uint8_t *p = vn_tensor_data(pc);
        float *dst = vn_tensor_data(w);
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++) dst[n * K + k] = (float)(vnq__code_at(p + n * rb, k) - 1);
    }
    vn_tensor_release(pc);
    return w;
}

/* ---- the product ------------------------------------------------------------------ */

/* Weight rows per task of the OpenMP loop. */
#define ROW_CHUNK 64

/* Small products run without an OpenMP region: libgomp's `parallel if
 * (false)` still makes two futex system calls per region, which at batch 1
 * (decoding a narrow model) cost as much as the product itself. */

/* Row b of x quantised into r: x̃ (zero past K), Σ x̃ and s. */
static void quantize_one(const float *x, int64_t b, int64_t K, int64_t Kp, vnq_rows *r)
{
    int8_t *q = r->q + b * Kp;
    r->s[b] = vnq__quantize_row(x + b * K, K, q, NULL);
    memset(q + K, 0, (size_t)(Kp - K));
    int32_t sum = 0;
    for (int64_t k = 0; k < K; k++) sum += q[k];
    r->sum[b] = sum;
}

size_t vnq__rows_bytes(int64_t B, int64_t Kp)
{
    return (size_t)(B * Kp + 63) / 64 * 64 + 2 * (size_t)B * 4;
}

void vnq__rows_at(void *mem, int64_t B, int64_t Kp, vnq_rows *r)
{
    size_t qb = (size_t)(B * Kp + 63) / 64 * 64, sb = (size_t)B * 4;
    r->mem = mem;
    r->nbytes = vnq__rows_bytes(B, Kp);
    r->q = mem;
    r->sum = (int32_t *)(void *)((char *)mem + qb);
    r->s = (float *)(void *)((char *)mem + qb + sb);
}

bool vnq__quantize_rows(const float *x, int64_t B, int64_t K, int64_t Kp, vnq_rows *r)
{
    void *mem = vn__mem_alloc(vnq__rows_bytes(B, Kp));
    if (!mem) return false;
    vnq__rows_at(mem, B, Kp, r);
    vnq__quantize_into(x, B, K, Kp, r);
    return true;
}

void vnq__quantize_into(const float *x, int64_t B, int64_t K, int64_t Kp, vnq_rows *r)
{
    if (B * K > VN_OMP_MIN_WORK) {
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < B; b++) quantize_one(x, b, K, Kp, r);
    } else { /* no OpenMP region: see above */
        for (int64_t b = 0; b < B; b++) quantize_one(x, b, K, Kp, r);
    }
}

void vnq__product(vnq_kernel kernel, const uint8_t *p, int64_t N, int64_t Kp, const vnq_rows *r,
                  int64_t B, float gamma, float *out)
{
    int64_t rb = Kp / 4;
    if (!kernel) kernel = vnq__kernel_for_shape(B, N, rb);
    /* Threads take chunks of weight rows; every chunk reads all of x̃.
     * A small product is one call, outside any OpenMP region (above). */
    if (N * Kp / 8 * B > VN_OMP_MIN_WORK) {
#pragma omp parallel for schedule(static)
        for (int64_t n0 = 0; n0 < N; n0 += ROW_CHUNK)
            kernel(p + n0 * rb, N - n0 < ROW_CHUNK ? N - n0 : ROW_CHUNK, Kp, r->q, r->sum, r->s, B,
                   gamma, out + n0, N);
    } else {
        kernel(p, N, Kp, r->q, r->sum, r->s, B, gamma, out, N);
    }
}

vn_tensor *vn_ternary_matmul(const vn_tensor *x, const vn_tensor *packed, int64_t K, float gamma)
{
    vn_status st = vnq__check_packed(packed, K, "ternary_matmul");
    int64_t rb = st ? 0 : vn_ternary_row_bytes(K);
    if (!st) st = vn__check_dtype_arg(x, VN_F32, "ternary_matmul", "input", 0);
    if (!st && (x->ndim == 0 || x->shape[x->ndim - 1] != K))
        st = vn__err(VN_ERR_SHAPE, "ternary_matmul: input of shape %s, expected (..., %lld)",
                     vn__shape(x->ndim, x->shape), (long long)K);
    if (!st && !(gamma >= 0 && isfinite(gamma)))
        st = vn__err(VN_ERR_ARG, "ternary_matmul: gamma = %g, expected a finite γ ≥ 0", gamma);
    if (st) return NULL;
    int64_t N = packed->shape[0], B = vn_tensor_numel(x) / K, Kp = rb * 4;
    int64_t shape[VN_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 1] = N;
    vn_tensor *xc = vn__plain_contiguous(x), *pc = xc ? vn__plain_contiguous(packed) : NULL;
    vn_tensor *y = pc ? vn__new(VN_F32, x->ndim, shape) : NULL;
    vnq_rows r = {0};
    if (y && B > 0 && !vnq__quantize_rows(vn_tensor_data(xc), B, K, Kp, &r)) {
        vn_tensor_release(y);
        y = NULL;
    }
    if (y && B > 0) {
        vnq__product(NULL, vn_tensor_data(pc), N, Kp, &r, B, gamma, vn_tensor_data(y));
        vn__mem_free(r.mem, r.nbytes);
    }
    vn_tensor_release(xc);
    vn_tensor_release(pc);
    return y;
}
