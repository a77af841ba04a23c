/* vnm_bf16.c — the bf16 forward SpMM and dX of a V:N:M layer on CPUs with
 * AVX-512 BF16 (vn_vnm_set_precision(VN_VNM_BF16)).
 *
 * `vdpbf16ps` (_mm512_dpbf16_ps) adds to each f32 lane the sum of two
 * products of bf16 pairs: acc[l] += a[2l]·b[2l] + a[2l+1]·b[2l+1]. A row of
 * W keeps two values per group, so one instruction can do a whole group for
 * 16 batch lanes: a = the row's two values (one 32-bit broadcast), b = the
 * two kept columns of X it uses, interleaved lane by lane. The f32 kernel
 * needs two FMAs and two 64-byte loads of X for the same work, and one load
 * of X per FMA bounds it (vnm_kernels_impl.h); here one 64-byte load feeds
 * twice the products.
 *
 * Which two of its block's 4 kept columns a row uses differs from row to
 * row (6 possible pairs), so for each batch panel, block and chunk of groups
 * all 6 interleaved pairs are built once (`pairs`, 24 KiB: in L1) and then
 * read by every row of the block: 24 permutes per group against 4·V
 * dot-product instructions. Measured on Zen 4 (one core, 64:2:8): 1.3–1.6×
 * the f32 forward, not 2×: the row loop still makes a 64-byte load per
 * instruction plus the row's offsets and values, and adds its chunk to
 * the tile (chunks of 8 or 24–32 groups, or the panel in quarters so that
 * a row sums longer chunks in registers, were slower).
 *
 * Rounding: X and the values are rounded to bf16 (nearest even; the
 * instructions treat bf16 subnormals as zero), products and sums are f32.
 * Each product is then within 2^-7 relative of the f32 one, so an output
 * is within about 2^-7·Σ_k |w_k·x_k| of the f32 result. */
#include "vnm_internal.h"

#include "avx512_inline.h" /* vn__transpose16 */

_Static_assert(VNM_PANEL == 64, "the bf16 tile reads a panel row as 4 vectors of 16 lanes");

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512bf16")
#include <immintrin.h>
#include <string.h>

bool vnm__have_bf16(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
}

void vnm__to_bf16(const float *src, int64_t n, uint16_t *dst)
{
    int64_t n32 = n / 32 * 32;
#pragma omp parallel for schedule(static) if (n > VN_OMP_MIN_WORK)
    for (int64_t i = 0; i < n32; i += 32) {
        /* cvtne2ps: the second operand gives elements 0..15, the first 16..31 */
        __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512(dst + i, (__m512i)h);
    }
    for (int64_t i = n32; i < n; i++) dst[i] = vn__f32_to_bf16(src[i]);
}

/* The 6 pairs (a, b), a < b, of a group's 4 kept columns, and the pair of
 * each index nibble (slot 0 in bits 0–1, slot 1 in bits 2–3; slot 0 < slot 1
 * always, so the other 10 nibbles never occur). */
static const uint8_t pair_cols[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
static const uint8_t pair_of[16] = {[0 | 1 << 2] = 0, [0 | 2 << 2] = 1, [0 | 3 << 2] = 2,
                                    [1 | 2 << 2] = 3, [1 | 3 << 2] = 4, [2 | 3 << 2] = 5};

void vnm__bf16_chunk_rows(const vnm_pattern *p, const uint32_t *vals, uint32_t *cvals, uint16_t *off)
{
    int64_t nchunks = (p->G + VNM_BF16_GROUPS - 1) / VNM_BF16_GROUPS;
#pragma omp parallel for schedule(static) if (p->R * p->G > VN_OMP_MIN_WORK)
    for (int64_t r = 0; r < p->R; r++)
        for (int64_t g = 0; g < p->G; g++) {
            int nib = (p->idx[r * p->idx_stride + g / 2] >> (g & 1) * 4) & 15;
            int64_t e = vnm__bf16_chunk_at(p, nchunks, r, g);
            cvals[e] = vals[r * p->G + g];
            off[e] = (uint16_t)(((g % VNM_BF16_GROUPS) * 6 + pair_of[nib]) * 4 * 64);
        }
}

/* Independent accumulator sets: vdpbf16ps takes ~6 cycles and one issues
 * per cycle, so 4 sets × 4 quarters of the panel keep 16 chains in flight. */
#define SETS 4
/* How many rows ahead the row loop prefetches values and offsets. */
#define PREFETCH_ROWS 4

/* tile (rows of block rb × VNM_PANEL) = the block's rows of (X·Wᵀ)ᵀ for the
 * batch panel xp (xrows rows of VNM_PANEL bf16), from vals (pairs of bf16
 * values, a row's pair of a group as one 32-bit word, slot 0 in the low
 * half) and poff, both in the chunk-major order of vnm__bf16_chunk_rows.
 * pairs is scratch of VNM_BF16_PAIRS_BYTES.
 *
 * For each chunk of VNM_BF16_GROUPS groups the 6 pairs of each group are
 * built for the whole panel (24 KiB, in L1), then every row of the block
 * adds its sums over the chunk to its tile. Loads bound the row loop, so
 * it makes few besides the pairs: the offsets come 4 to a 64-bit load. */
void vnm__spmm_tile_bf16(const vnm_pattern *p, const uint32_t *vals, const uint16_t *poff,
                         const uint16_t *xp, int64_t rb, void *pairs, float *tile)
{
    /* permutex2var picks lanes 0..31 of the first source, 32..63 of the
     * second: interleave lanes 0..15 (lo) or 16..31 (hi) of the two. */
    static const int16_t ilo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                    8,  40, 9,  41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    static const int16_t ihi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                    24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
    const __m512i lo_idx = _mm512_loadu_si512(ilo), hi_idx = _mm512_loadu_si512(ihi);
    __m512i *pv = pairs; /* [group in chunk][pair][quarter of the panel] */
    const char *pb = pairs;
    int64_t r0 = rb * p->V, rows = p->R - r0 < p->V ? p->R - r0 : p->V;
    const uint16_t *cl = p->cols + rb * p->G * 4;
    int64_t nchunks = (p->G + VNM_BF16_GROUPS - 1) / VNM_BF16_GROUPS;
    for (int64_t g0 = 0; g0 < p->G; g0 += VNM_BF16_GROUPS) {
        int64_t ng = p->G - g0 < VNM_BF16_GROUPS ? p->G - g0 : VNM_BF16_GROUPS;
        for (int64_t k = 0; k < ng; k++) {
            int64_t g = g0 + k;
            __m512i x[4][2]; /* kept column j, batch lanes 0..31 and 32..63 */
            for (int j = 0; j < 4; j++) {
                const uint16_t *c = xp + (g * p->M + cl[4 * g + j]) * VNM_PANEL;
                x[j][0] = _mm512_loadu_si512(c);
                x[j][1] = _mm512_loadu_si512(c + 32);
            }
            for (int pr = 0; pr < 6; pr++) {
                int a = pair_cols[pr][0], b = pair_cols[pr][1];
                __m512i *d = pv + (k * 6 + pr) * 4;
                for (int h = 0; h < 2; h++) {
                    d[2 * h] = _mm512_permutex2var_epi16(x[a][h], lo_idx, x[b][h]);
                    d[2 * h + 1] = _mm512_permutex2var_epi16(x[a][h], hi_idx, x[b][h]);
                }
            }
        }
        for (int64_t v = 0; v < rows; v++) {
            int64_t e = vnm__bf16_chunk_at(p, nchunks, r0 + v, g0);
            const uint32_t *w = vals + e;
            const uint16_t *po = poff + e;
            float *out = tile + v * VNM_PANEL;
            /* The block's rows' values and offsets of this chunk follow
             * each other (VNM_BF16_GROUPS words per row): one stream. */
            if (v + PREFETCH_ROWS < rows) {
                __builtin_prefetch(w + PREFETCH_ROWS * VNM_BF16_GROUPS);
                __builtin_prefetch(po + PREFETCH_ROWS * VNM_BF16_GROUPS);
            }
            __m512 acc[SETS][4];
            for (int i = 0; i < SETS; i++)
                for (int q = 0; q < 4; q++)
                    acc[i][q] = g0 == 0 || i > 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(out + 16 * q);
            int64_t k = 0;
            for (; k + SETS <= ng; k += SETS) {
                uint64_t o4;
                memcpy(&o4, po + k, sizeof o4); /* SETS = 4 offsets */
                for (int i = 0; i < SETS; i++) {
                    const __m512bh *x = (const __m512bh *)(pb + ((o4 >> 16 * i) & 0xffff));
                    __m512bh wv = (__m512bh)_mm512_set1_epi32((int)w[k + i]);
                    for (int q = 0; q < 4; q++) acc[i][q] = _mm512_dpbf16_ps(acc[i][q], x[q], wv);
                }
            }
            for (; k < ng; k++) {
                const __m512bh *x = (const __m512bh *)(pb + po[k]);
                __m512bh wv = (__m512bh)_mm512_set1_epi32((int)w[k]);
                for (int q = 0; q < 4; q++) acc[0][q] = _mm512_dpbf16_ps(acc[0][q], x[q], wv);
            }
            for (int q = 0; q < 4; q++) {
                __m512 sum = acc[0][q];
                for (int i = 1; i < SETS; i++) sum = _mm512_add_ps(sum, acc[i][q]);
                _mm512_storeu_ps(out + 16 * q, sum);
            }
        }
    }
}

/* ---- dX = dY·W in bf16 ------------------------------------------------------
 * dX's sums run over the rows of W, and a column of a block is kept by a
 * varying set of its rows, so there is no perfect pairing as in the
 * forward. Rows are paired fixed, (2i, 2i+1): dY is stored with each such
 * pair's two rows interleaved lane by lane (vnm__bf16_pair_rows). For a
 * group, a pair's two rows use 2 to 4 of the block's 4 columns (3 on
 * average: each row uses 2), and each used column gets one vdpbf16ps per
 * 16 lanes with the two rows' values (0 for a row that does not use it):
 * 3 instructions per pair where f32 makes 4 FMAs.
 *
 * The tile keeps a group's 4 columns × 64 lanes in 16 registers and loads
 * each row pair's slice of dY once for all the columns it feeds, so loads
 * no longer bound it (the f32 kernel makes one load per FMA). Which
 * columns a pair feeds varies, so the pairs of each group are sorted by
 * that set (the "mask") and each of the 14 possible masks runs its own
 * loop with the set fixed at compile time: no branch per pair.
 *
 * The tile makes one vdpbf16ps per 16 lanes per used column and runs at
 * close to one per cycle, so what a call does besides the tiles counts: dY
 * is rounded straight from its row-major rows into the paired layout
 * (vnm__bf16_pair_rows_of; no f32 panels in between), and a plain
 * vn_vnm_spmm_t keeps the sorted lists in the matrix until the values are
 * written (vnm__bf16_lists_of). A training step writes the values once per
 * step and runs one dX per step, so the backward builds its lists every
 * time (about a tenth of its dX on 4096 × 1024, 2:8). */

void vnm__bf16_pair_rows(const float *dyt, int64_t npanels, int64_t R, uint16_t *dy2)
{
    /* cvtne2ps(b, a) puts a's 16 bf16 in elements 0..15 and b's in 16..31;
     * this permutation interleaves them: a0 b0 a1 b1 ... */
    static const int16_t mix[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                    8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    int64_t R2 = (R + 1) / 2;
#pragma omp parallel for schedule(static) if (npanels * R > VN_OMP_MIN_WORK / VNM_PANEL)
    for (int64_t pn = 0; pn < npanels; pn++) {
        const __m512i idx = _mm512_loadu_si512(mix);
        for (int64_t i = 0; i < R2; i++) {
            const float *a = dyt + (pn * R + 2 * i) * VNM_PANEL, *b = a + VNM_PANEL;
            uint16_t *d = dy2 + (pn * R2 + i) * 2 * VNM_PANEL;
            for (int q = 0; q < 4; q++) {
                __m512 bv = 2 * i + 1 < R ? _mm512_loadu_ps(b + 16 * q) : _mm512_setzero_ps();
                __m512i h = (__m512i)_mm512_cvtne2ps_pbh(bv, _mm512_loadu_ps(a + 16 * q));
                _mm512_storeu_si512(d + 32 * q, _mm512_permutexvar_epi16(idx, h));
            }
        }
    }
}

void vnm__transpose16(const float *src, int64_t lds, float *dst, int64_t ldd, int64_t nb, int64_t nc)
{
    int64_t nb16 = nb / 16 * 16, nc16 = nc / 16 * 16;
    for (int64_t l = 0; l < nb16; l += 16)
        for (int64_t c = 0; c < nc16; c += 16) {
            __m512 r[16];
            for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + (l + i) * lds + c);
            vn__transpose16(r);
            for (int k = 0; k < 16; k++) _mm512_storeu_ps(dst + (c + k) * ldd + l, r[k]);
        }
    /* the ragged edges: rows past nb16 (all columns), columns past nc16 */
    if (nb16 < nb) vnm__transpose(src + nb16 * lds, lds, dst + nb16, ldd, nb - nb16, nc);
    if (nc16 < nc) vnm__transpose(src + nc16, lds, dst + nc16 * ldd, ldd, nb16, nc - nc16);
}

void vnm__bf16_pair_rows_of(const float *dy, int64_t B, int64_t R, uint16_t *dy2)
{
    /* Row b's columns 2i and 2i+1 sit side by side, so rounding a row to
     * bf16 (cvtne2ps: 32 floats) gives its words of 16 pairs; 16 rows of
     * such words, transposed, are 16 pairs' words of 16 lanes: what
     * vnm__bf16_pair_rows makes from the f32 panels, without them. */
    int64_t R2 = (R + 1) / 2, npanels = (B + VNM_PANEL - 1) / VNM_PANEL;
#pragma omp parallel for schedule(static) if (B * R > VN_OMP_MIN_WORK)
    for (int64_t pn = 0; pn < npanels; pn++)
        for (int64_t l0 = 0; l0 < VNM_PANEL; l0 += 16)
            for (int64_t i0 = 0; i0 < R2; i0 += 16) {
                int64_t nc = R - 2 * i0 < 32 ? R - 2 * i0 : 32, np = R2 - i0 < 16 ? R2 - i0 : 16;
                /* columns past R (a missing last row of a pair) read as 0 */
                __mmask16 mlo = (__mmask16)(nc >= 16 ? 0xffff : (1u << nc) - 1);
                __mmask16 mhi = (__mmask16)(nc >= 32 ? 0xffff : nc > 16 ? (1u << (nc - 16)) - 1 : 0);
                __m512 r[16];
                for (int l = 0; l < 16; l++) {
                    int64_t b = pn * VNM_PANEL + l0 + l;
                    if (b >= B) { /* the last panel's lanes past B: 0, as packing leaves them */
                        r[l] = _mm512_setzero_ps();
                        continue;
                    }
                    const float *src = dy + b * R + 2 * i0;
                    __m512bh h = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(mhi, src + 16),
                                                     _mm512_maskz_loadu_ps(mlo, src));
                    r[l] = (__m512)h;
                }
                vn__transpose16(r);
                for (int64_t k = 0; k < np; k++)
                    _mm512_storeu_ps(dy2 + ((pn * R2 + i0 + k) * VNM_PANEL + l0) * 2, r[k]);
            }
}

void vnm__bf16_t_lists(const vnm_pattern *p, const float *values, int64_t slots, uint32_t *tv,
                       uint16_t *tp, uint16_t *tcount)
{
#pragma omp parallel for schedule(static) if (p->R * p->G > VN_OMP_MIN_WORK)
    for (int64_t rb = 0; rb < p->nblocks; rb++) {
        int64_t r0 = rb * p->V, r1 = p->R < r0 + p->V ? p->R : r0 + p->V;
        for (int64_t g = 0; g < p->G; g++) {
            int64_t bg = vnm__bf16_t_at(p, rb, g);
            uint16_t *cnt = tcount + bg * 16;
            memset(cnt, 0, 16 * sizeof *cnt);
            /* two passes over the pairs: count each mask, then place the
             * pairs mask by mask (a counting sort) */
            for (int pass = 0; pass < 2; pass++) {
                int at[16] = {0};
                for (int m = 0, sum = 0; m < 16 && pass; m++) at[m] = sum, sum += cnt[m];
                for (int64_t i = r0 / 2; 2 * i < r1; i++) {
                    uint32_t w[4] = {0, 0, 0, 0};
                    int mask = 0;
                    for (int s = 0; s < 2; s++) {
                        int64_t r = 2 * i + s;
                        if (r < r0 || r >= r1) continue; /* the other block's row: 0 here */
                        for (int slot = 0; slot < 2; slot++) {
                            int j = vnm__index(p, r, g, slot);
                            mask |= 1 << j;
                            if (pass) /* the values only once placed */
                                w[j] |= (uint32_t)vn__f32_to_bf16(values[r * 2 * p->G + 2 * g + slot]) << 16 * s;
                        }
                    }
                    /* Two columns → three (the lowest unused one, its values
                     * 0): 5 masks per group instead of 11, so fewer and
                     * longer loops for 1/6 of the pairs doing 4 more products. */
                    if (__builtin_popcount((unsigned)mask) == 2) mask |= ~mask & (mask + 1);
                    if (!pass) {
                        cnt[mask]++;
                        continue;
                    }
                    int64_t e = bg * slots + at[mask]++;
                    tp[e] = (uint16_t)(i - r0 / 2);
                    memcpy(tv + 4 * e, w, sizeof w);
                }
            }
        }
    }
}

/* acc[j] += the products of the n pairs of one mask (a compile-time
 * constant once inlined, so acc stays in registers). */
static inline __attribute__((always_inline)) void mask_pairs(int mask, __m512 acc[4][4],
                                                             const uint16_t *tp, const uint32_t *tv,
                                                             int n, const uint16_t *yb)
{
    for (int k = 0; k < n; k++) {
        const __m512bh *y = (const __m512bh *)(yb + (int64_t)tp[k] * 2 * VNM_PANEL);
        __m512bh y0 = y[0], y1 = y[1], y2 = y[2], y3 = y[3];
        for (int j = 0; j < 4; j++) {
            if (!(mask >> j & 1)) continue;
            __m512bh wv = (__m512bh)_mm512_set1_epi32((int)tv[4 * k + j]);
            acc[j][0] = _mm512_dpbf16_ps(acc[j][0], y0, wv);
            acc[j][1] = _mm512_dpbf16_ps(acc[j][1], y1, wv);
            acc[j][2] = _mm512_dpbf16_ps(acc[j][2], y2, wv);
            acc[j][3] = _mm512_dpbf16_ps(acc[j][3], y3, wv);
        }
    }
}

void vnm__spmm_t_tile_bf16(const vnm_pattern *p, const uint32_t *tv, const uint16_t *tp,
                           const uint16_t *tcount, int64_t slots, const uint16_t *dy2, int64_t g0,
                           int64_t g1, float *dxp)
{
    memset(dxp + g0 * p->M * VNM_PANEL, 0, sizeof(float) * (size_t)((g1 - g0) * p->M * VNM_PANEL));
    for (int64_t rb = 0; rb < p->nblocks; rb++) {
        const uint16_t *yb = dy2 + rb * p->V / 2 * 2 * VNM_PANEL; /* the block's first row pair */
        for (int64_t g = g0; g < g1; g++) {
            int64_t bg = vnm__bf16_t_at(p, rb, g);
            float *out[4];
            __m512 acc[4][4];
            for (int j = 0; j < 4; j++) {
                out[j] = dxp + (g * p->M + p->cols[(rb * p->G + g) * 4 + j]) * VNM_PANEL;
                for (int q = 0; q < 4; q++) acc[j][q] = _mm512_loadu_ps(out[j] + 16 * q);
            }
            const uint16_t *cnt = tcount + bg * 16;
            int64_t e = bg * slots;
            for (int m = 1; m < 16; m++) {
                int n = cnt[m];
                if (!n) continue;
                switch (m) { /* each mask its own loop */
#define MASK_CASE(c) \
    case c: mask_pairs(c, acc, tp + e, tv + 4 * e, n, yb); break;
                    MASK_CASE(1) MASK_CASE(2) MASK_CASE(3) MASK_CASE(4) MASK_CASE(5)
                    MASK_CASE(6) MASK_CASE(7) MASK_CASE(8) MASK_CASE(9) MASK_CASE(10)
                    MASK_CASE(11) MASK_CASE(12) MASK_CASE(13) MASK_CASE(14) MASK_CASE(15)
#undef MASK_CASE
                }
                e += n;
            }
            for (int j = 0; j < 4; j++)
                for (int q = 0; q < 4; q++) _mm512_storeu_ps(out[j] + 16 * q, acc[j][q]);
        }
    }
}

#undef SETS
#undef PREFETCH_ROWS
#pragma GCC pop_options

#else /* no x86 AVX-512 BF16 build: vnm__have_bf16 is false, so the others are never called */

bool vnm__have_bf16(void) { return false; }
void vnm__to_bf16(const float *src, int64_t n, uint16_t *dst)
{
    for (int64_t i = 0; i < n; i++) dst[i] = vn__f32_to_bf16(src[i]);
}
void vnm__bf16_chunk_rows(const vnm_pattern *p, const uint32_t *vals, uint32_t *cvals, uint16_t *off)
{
    (void)p, (void)vals, (void)cvals, (void)off;
}
void vnm__spmm_tile_bf16(const vnm_pattern *p, const uint32_t *vals, const uint16_t *poff,
                         const uint16_t *xp, int64_t rb, void *pairs, float *tile)
{
    (void)p, (void)vals, (void)poff, (void)xp, (void)rb, (void)pairs, (void)tile;
}
void vnm__bf16_pair_rows(const float *dyt, int64_t npanels, int64_t R, uint16_t *dy2)
{
    (void)dyt, (void)npanels, (void)R, (void)dy2;
}
void vnm__transpose16(const float *src, int64_t lds, float *dst, int64_t ldd, int64_t nb, int64_t nc)
{
    vnm__transpose(src, lds, dst, ldd, nb, nc);
}
void vnm__bf16_pair_rows_of(const float *dy, int64_t B, int64_t R, uint16_t *dy2)
{
    (void)dy, (void)B, (void)R, (void)dy2;
}
void vnm__bf16_t_lists(const vnm_pattern *p, const float *values, int64_t slots, uint32_t *tv,
                       uint16_t *tp, uint16_t *tcount)
{
    (void)p, (void)values, (void)slots, (void)tv, (void)tp, (void)tcount;
}
void vnm__spmm_t_tile_bf16(const vnm_pattern *p, const uint32_t *tv, const uint16_t *tp,
                           const uint16_t *tcount, int64_t slots, const uint16_t *dy2, int64_t g0,
                           int64_t g1, float *dxp)
{
    (void)p, (void)tv, (void)tp, (void)tcount, (void)slots, (void)dy2, (void)g0, (void)g1, (void)dxp;
}
#endif
