/* ternary_lanes.c — packed ternary weights re-laid with the weight rows in
 * vector lanes, and the one-row (decoding) product over that layout
 * (AVX-512 VNNI).
 *
 * Why: in the packed layout (venom/quant.h) a row's 128-column group is 32
 * contiguous bytes, so a kernel for one activation row ends every weight row
 * with a horizontal sum of its vector lanes. At the small K of a narrow
 * model (tutorial 5: K = 128, one group per row) that sum and the unpacking
 * shifts cost as much as the vpdpbusd themselves (bench/RESULTS.md, issue
 * 20). Here a tile of 16 weight rows keeps row l in 32-bit lane l: each
 * vpdpbusd adds four columns of x̃ (one dword, broadcast) to all 16 rows,
 * and the 16 sums come out in their lanes, with no reduction at all. The
 * codes are not shifted down either: a 2-bit field masked in place is the
 * code times 4^f, summed in its own accumulator, and the four accumulators
 * are shifted back once per tile (exact: each is a multiple of 4^f).
 *
 * The fused decoder (engine/decode.c) re-lays its packed weights once when
 * it is made and runs every product of the generation on the copy. The
 * integer sums are the packed kernels' and the scaling is finish()'s
 * (engine/quant/ternary.c), so the outputs are theirs bit for bit.
 *
 * Layout: tile t holds weight rows 16t .. 16t+15 (rows past N: code 0, their
 * outputs never stored), as Kp/16 blocks of 64 bytes; in block j, byte
 * 4l + m holds in bits 2f, 2f+1 the code of row 16t + l at column
 * 16j + 4f + m. */
#include "quant_internal.h"

size_t vnq__lanes_bytes(int64_t N, int64_t Kp) { return (size_t)((N + 15) / 16 * 16 * (Kp / 4)); }

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")
#include <immintrin.h>

bool vnq__lanes_usable(int64_t N, int64_t K)
{
    return N >= 1 && K >= 1 && K <= VNQ_LANES_MAX_K &&
           N <= VNQ_LANES_MAX_BYTES / vn_ternary_row_bytes(K) && vnq__kernel("avx512vnni") != NULL;
}

/* In a packed group (32 bytes: byte i, field q holds column 32q + i), the
 * 16-column block 2q + h holds, at byte m, field f, column 32q + 16h + 4f +
 * m: field q of byte 16h + 4f + m, i.e. field q of byte m of dword 4h + f.
 * So per row and per half h, the four dwords d_f = dword 4h + f give the
 * blocks' dwords o_q = Σ_f ((d_f >> 2q) & 0x03…) << 2f: a 4 × 4 transpose of
 * 2-bit fields (dword index f against field index q) in each byte
 * position. It runs in two steps of swapping 4-bit, then 2-bit, halves
 * between dword pairs, on two rows per zmm (one 128-bit lane per half of a
 * row), and the tile's 16 rows × 8 dwords are then transposed to 8 blocks
 * of 16 lanes by three rounds of two-source permutes. (A gather per dword
 * of 16 rows took about twice as long.) */

/* One swap step: each dword with its partner (shuffle), where mask's bits
 * keep the dword's own bits and the others come from the partner rotated
 * left by rot (a per-dword count). */
#define SWAP(z, shuffle, rot, mask) \
    _mm512_ternarylogic_epi32(mask, z, _mm512_rolv_epi32(_mm512_shuffle_epi32(z, shuffle), rot), 0xca)

/* Indices of a two-source permute (vpermt2d) that takes, for output dword
 * e, the input dword src(e) of a (0–15) or b (16–31). */
static __m512i permute_index(int level, int which)
{
    int idx[16];
    for (int e = 0; e < 16; e++) {
        if (level == 1) { /* rows 0–3 × positions 4·which + 0–3, from rows 0,1 | 2,3 × 8 */
            int row = e & 3, pos = 4 * which + (e >> 2);
            idx[e] = (row >= 2 ? 16 : 0) + 8 * (row & 1) + pos;
        } else if (level == 2) { /* rows 0–7 × 2 positions, from rows 0–3 | 4–7 × 4 */
            int row = e & 7, pos = 2 * which + (e >> 3);
            idx[e] = (row >= 4 ? 16 : 0) + 4 * pos + (row & 3);
        } else { /* rows 0–15 × 1 position, from rows 0–7 | 8–15 × 2 */
            idx[e] = (e >= 8 ? 16 : 0) + 8 * which + (e & 7);
        }
    }
    return _mm512_loadu_si512(idx);
}

void vnq__lanes_pack(const uint8_t *packed, int64_t N, int64_t Kp, uint8_t *lanes)
{
    int64_t rb = Kp / 4, G = Kp / VNQ_GROUP, KB = Kp / 16;
    /* per dword of a 128-bit lane: the rotations and kept bits of the two
     * steps (4-bit halves between dwords f and f ^ 2, 2-bit between f and
     * f ^ 1) */
    const int hi4 = (int)0xf0f0f0f0, lo4 = 0x0f0f0f0f, hi2 = (int)0xcccccccc, lo2 = 0x33333333;
    const __m512i rot1 = _mm512_set4_epi32(28, 28, 4, 4), keep1 = _mm512_set4_epi32(hi4, hi4, lo4, lo4);
    const __m512i rot2 = _mm512_set4_epi32(30, 2, 30, 2), keep2 = _mm512_set4_epi32(hi2, lo2, hi2, lo2);
    __m512i p1[2], p2[2], p3[2];
    for (int w = 0; w < 2; w++)
        p1[w] = permute_index(1, w), p2[w] = permute_index(2, w), p3[w] = permute_index(3, w);
    for (int64_t t = 0; t < (N + 15) / 16; t++) {
        const uint8_t *src = packed + 16 * t * rb;
        uint8_t *dst = lanes + t * KB * 64;
        for (int64_t g = 0; g < G; g++) {
            __m512i z[8], u[4][2], v[2][2][2];
            for (int r = 0; r < 8; r++) { /* rows 2r, 2r+1; rows past N read as code 0 */
                __mmask8 m0 = 16 * t + 2 * r < N ? 0xff : 0, m1 = 16 * t + 2 * r + 1 < N ? 0xff : 0;
                const uint8_t *row = src + 2 * r * rb + g * VNQ_GROUP_BYTES;
                __m256i lo = _mm256_maskz_loadu_epi32(m0, row), hi = _mm256_maskz_loadu_epi32(m1, row + rb);
                __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
                x = SWAP(x, _MM_PERM_BADC, rot1, keep1);
                z[r] = SWAP(x, _MM_PERM_CDAB, rot2, keep2); /* dword 8·(row & 1) + 4h + q: block (q, h) */
            }
            for (int j = 0; j < 4; j++)
                for (int w = 0; w < 2; w++)
                    u[j][w] = _mm512_permutex2var_epi32(z[2 * j], p1[w], z[2 * j + 1]);
            for (int k = 0; k < 2; k++)
                for (int hf = 0; hf < 2; hf++)
                    for (int w = 0; w < 2; w++)
                        v[k][hf][w] = _mm512_permutex2var_epi32(u[2 * k][hf], p2[w], u[2 * k + 1][hf]);
            for (int hf = 0; hf < 2; hf++)
                for (int sub = 0; sub < 2; sub++)
                    for (int w = 0; w < 2; w++) {
                        int pos = 4 * hf + 2 * sub + w, h = pos >> 2, q = pos & 3;
                        _mm512_storeu_si512(dst + (8 * g + 2 * q + h) * 64,
                                            _mm512_permutex2var_epi32(v[0][hf][sub], p3[w], v[1][hf][sub]));
                    }
        }
    }
}

/* The 16 sums of a tile from its four field accumulators (field f's is
 * 4^f · Σ code·x̃, shifted back exactly), scaled as finish() scales. */
static inline void store_tile(__m512i a0, __m512i a1, __m512i a2, __m512i a3, __m512i off, __m512 scale,
                              float *y, __mmask16 live)
{
    __m512i sum = _mm512_add_epi32(_mm512_add_epi32(a0, _mm512_srai_epi32(a1, 2)),
                                   _mm512_add_epi32(_mm512_srai_epi32(a2, 4), _mm512_srai_epi32(a3, 6)));
    _mm512_mask_storeu_ps(y, live, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sum, off)), scale));
}

/* Field f of each byte of p, in place (the code times 4^f), times four
 * columns of x̃ broadcast to every lane, added into acc. */
#define FIELD(acc, p, f, x) \
    acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(p, _mm512_set1_epi8((char)(3 << 2 * (f)))), x)

/* Four columns of x̃ (from column c) in every lane, straight from memory. */
#define X4(c) _mm512_broadcastd_epi32(_mm_loadu_si32(xq + (c)))

/* GCC's partial redundancy elimination made the loops below copy all eight
 * accumulators every iteration (vmovdqa; vpdpbusd adds into its
 * destination); without it they stay in place (1.1–1.2× in a throwaway
 * harness). */
#pragma GCC optimize("no-tree-pre")

/* Two tiles (w: the first; the second follows) per pass share each
 * broadcast of x̃ and keep eight independent accumulator chains; three or
 * four tiles per pass were no faster (a throwaway harness). */
static void tile_pair(const uint8_t *w, int64_t KB, const int8_t *xq, __m512i off, __m512 scale, float *y,
                      __mmask16 live)
{
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    const uint8_t *v = w + KB * 64;
    for (int64_t kb = 0; kb < KB; kb++) {
        __m512i p = _mm512_loadu_si512(w + kb * 64), q = _mm512_loadu_si512(v + kb * 64);
        __m512i x0 = X4(16 * kb), x1 = X4(16 * kb + 4), x2 = X4(16 * kb + 8), x3 = X4(16 * kb + 12);
        FIELD(a0, p, 0, x0);
        FIELD(b0, q, 0, x0);
        FIELD(a1, p, 1, x1);
        FIELD(b1, q, 1, x1);
        FIELD(a2, p, 2, x2);
        FIELD(b2, q, 2, x2);
        FIELD(a3, p, 3, x3);
        FIELD(b3, q, 3, x3);
    }
    store_tile(a0, a1, a2, a3, off, scale, y, 0xffff);
    store_tile(b0, b1, b2, b3, off, scale, y + 16, live);
}

static void tile_one(const uint8_t *w, int64_t KB, const int8_t *xq, __m512i off, __m512 scale, float *y,
                     __mmask16 live)
{
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t kb = 0; kb < KB; kb++) {
        __m512i p = _mm512_loadu_si512(w + kb * 64);
        FIELD(a0, p, 0, X4(16 * kb));
        FIELD(a1, p, 1, X4(16 * kb + 4));
        FIELD(a2, p, 2, X4(16 * kb + 8));
        FIELD(a3, p, 3, X4(16 * kb + 12));
    }
    store_tile(a0, a1, a2, a3, off, scale, y, live);
}

void vnq__lanes_product(const uint8_t *lanes, int64_t N, int64_t Kp, const int8_t *xq, int32_t xsum,
                        float s, float gamma, float *y)
{
    int64_t KB = Kp / 16, T = (N + 15) / 16, t = 0;
    /* as finish(): s = 0 (a zero row, whose sums are 0) gives 0, s = NaN NaN */
    const __m512 scale = _mm512_set1_ps(s == 0 ? 0.0f : gamma / s);
    const __m512i off = _mm512_set1_epi32(xsum);
    __mmask16 last = N % 16 ? (__mmask16)((1u << (N % 16)) - 1) : 0xffff;
    for (; t + 2 <= T; t += 2)
        tile_pair(lanes + t * KB * 64, KB, xq, off, scale, y + 16 * t, t + 2 == T ? last : 0xffff);
    if (t < T) tile_one(lanes + t * KB * 64, KB, xq, off, scale, y + 16 * t, last);
}
#pragma GCC pop_options

#else
bool vnq__lanes_usable(int64_t N, int64_t K)
{
    (void)N, (void)K;
    return false;
}

void vnq__lanes_pack(const uint8_t *packed, int64_t N, int64_t Kp, uint8_t *lanes)
{
    (void)packed, (void)N, (void)Kp, (void)lanes;
}

void vnq__lanes_product(const uint8_t *lanes, int64_t N, int64_t Kp, const int8_t *xq, int32_t xsum,
                        float s, float gamma, float *y)
{
    (void)lanes, (void)N, (void)Kp, (void)xq, (void)xsum, (void)s, (void)gamma, (void)y;
}
#endif
