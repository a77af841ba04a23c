/* vnm_bf16_sddmm.c — the bf16 values' gradient (SDDMM) of a V:N:M layer on
 * CPUs with AVX-512 BF16 (vn_vnm_set_precision(VN_VNM_BF16)):
 *
 *   dvalues[r, kept j] = Σ_b dY[b, r] · X[b, col(r, j)]
 *
 * `vdpbf16ps` adds to each f32 lane two products of bf16 pairs, so the
 * pairs run along the batch: rows (b, b+1) of dY and of X. The kernel is
 * the f32 SDDMM by rows (vnm_kernels_impl.h, sddmm_rows) with those pairs:
 * the lanes of a vector are 16 rows of a block, each lane one 32-bit pair
 * (dY[b, r], dY[b+1, r]); for each group the pair of each of the block's 4
 * kept columns, (X[b, c], X[b+1, c]), is broadcast and multiplied into all
 * the block's rows. The 4 columns are the same for the V rows of a block,
 * so one broadcast feeds V/16 instructions and one vector of dY feeds 4:
 * with 4 vectors of rows a step makes 8 loads for 16 instructions, and no
 * reduction across lanes. Each row keeps 2 of the 4 columns, so half the
 * products are thrown away (each row picks its 2 sums at the end); per
 * instruction that still leaves 16 useful products, twice the f32 FMA's 8
 * in sddmm_rows.
 *
 * Operands, converted at each call (in-place optimizer updates do not
 * matter here, but X and dY are new every step): X from Xt, its panel
 * layout rounded to bf16 as is (a panel row of a column holds the batch in
 * order, so lanes 2l and 2l+1 are already a pair); dY into blocks of
 * 32 pairs per batch panel × Vp rows (V padded to whole vectors, as
 * sddmm_rows pads it; vnm__sddmm_bf16_dy), from row-major dY or from dYt.
 * Batch rows past B and rows past the block are zero.
 *
 * Rounding: dY and X are rounded to bf16 (nearest even; the instruction
 * reads bf16 subnormals as zero and flushes f32 subnormal results), the
 * product of two bf16 is exact in f32 and the sums are f32. Each product is
 * within 2^-7 relative of the f32 one, so an entry is within about
 * 2^-7·Σ_b |dy_b·x_b| (plus f32 summation rounding over ⌈B/2⌉ terms) of
 * the f32 result. A NaN or Inf in dY or X reaches the entries it feeds as
 * in f32 (an f32 value past the largest bf16 rounds to Inf). */
#include "vnm_internal.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512bf16")
#include <immintrin.h>

void vnm__sddmm_bf16_dy(const vnm_pattern *p, const float *dy, const float *dyt, int64_t B,
                        int64_t Vp, uint32_t *dy2)
{
    /* cvtne2ps(b, a) puts a's 16 bf16 in elements 0..15 and b's in 16..31;
     * this permutation interleaves them: a0 b0 a1 b1 ... */
    static const int16_t mix[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                    8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    int64_t npanels = (B + VNM_PANEL - 1) / VNM_PANEL, P = npanels * VNM_PANEL / 2;
#pragma omp parallel for collapse(2) schedule(static) if (B * p->R > VN_OMP_MIN_WORK)
    for (int64_t rb = 0; rb < p->nblocks; rb++)
        for (int64_t pn = 0; pn < npanels; pn++) {
            int64_t r0 = rb * p->V, rows = p->R - r0 < p->V ? p->R - r0 : p->V;
            int64_t nb = B - pn * VNM_PANEL < VNM_PANEL ? B - pn * VNM_PANEL : VNM_PANEL;
            uint32_t *d = dy2 + (rb * P + pn * VNM_PANEL / 2) * Vp;
            if (dy) {
                /* rows 2i and 2i+1 of dY: 16 of the block's rows at a time */
                const __m512i idx = _mm512_loadu_si512(mix);
                for (int64_t i = 0; i < VNM_PANEL / 2; i++) {
                    int64_t b = pn * VNM_PANEL + 2 * i;
                    for (int64_t v = 0; v < Vp; v += 16) {
                        __mmask16 m = v >= rows ? 0 : rows - v >= 16 ? 0xffff : (__mmask16)((1u << (rows - v)) - 1);
                        __m512 a = b < B ? _mm512_maskz_loadu_ps(m, dy + b * p->R + r0 + v) : _mm512_setzero_ps();
                        __m512 c = b + 1 < B ? _mm512_maskz_loadu_ps(m, dy + (b + 1) * p->R + r0 + v)
                                             : _mm512_setzero_ps();
                        __m512i h = (__m512i)_mm512_cvtne2ps_pbh(c, a);
                        _mm512_storeu_si512(d + i * Vp + v, _mm512_permutexvar_epi16(idx, h));
                    }
                }
            } else {
                /* A row of a dYt panel holds its 64 lanes in batch order, so
                 * in bf16 its 32-bit words are the pairs already: convert
                 * the row, then write its 32 pairs down the column v. */
                __mmask64 lanes = nb == VNM_PANEL ? ~(__mmask64)0 : ((__mmask64)1 << nb) - 1;
                for (int64_t v = 0; v < Vp; v++) {
                    uint32_t w[VNM_PANEL / 2];
                    if (v < rows) {
                        const float *src = dyt + (pn * p->R + r0 + v) * VNM_PANEL;
                        for (int h = 0; h < 2; h++) {
                            __mmask16 lo = (__mmask16)(lanes >> (32 * h)), hi = (__mmask16)(lanes >> (32 * h + 16));
                            __m512i c = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + 32 * h + 16),
                                                                     _mm512_maskz_loadu_ps(lo, src + 32 * h));
                            _mm512_storeu_si512(w + 16 * h, c);
                        }
                    } else
                        memset(w, 0, sizeof w);
                    for (int i = 0; i < VNM_PANEL / 2; i++) d[i * Vp + v] = w[i];
                }
            }
        }
}

/* Row vectors per step: 4 kept columns × NROW accumulators, NROW vectors
 * of dY and the broadcasts take 24 of the 32 registers. */
#define NROW 4

/* d4[j·Vp + v] += Σ over the 32 pairs l of one panel of dY pair (l, v) ·
 * X pair (l, c_j), for the 4 kept columns (xj[j]: column c_j's pairs in
 * the panel) and nv·16 rows v (dy: pair l at dy + l·Vp). nv is a constant
 * at each call, so the accumulators stay in registers. */
static inline __attribute__((always_inline)) void sddmm_acc(const int nv, const uint32_t *dy,
                                                            int64_t Vp, const uint32_t *const *xj,
                                                            float *d4)
{
    __m512 acc[4][NROW];
    for (int j = 0; j < 4; j++)
        for (int q = 0; q < nv; q++) acc[j][q] = _mm512_loadu_ps(d4 + j * Vp + 16 * q);
    for (int l = 0; l < VNM_PANEL / 2; l++) {
        __m512bh y[NROW];
        for (int q = 0; q < nv; q++) y[q] = (__m512bh)_mm512_loadu_si512(dy + l * Vp + 16 * q);
        for (int j = 0; j < 4; j++) {
            __m512bh x = (__m512bh)_mm512_set1_epi32((int)xj[j][l]);
            for (int q = 0; q < nv; q++) acc[j][q] = _mm512_dpbf16_ps(acc[j][q], y[q], x);
        }
    }
    for (int j = 0; j < 4; j++)
        for (int q = 0; q < nv; q++) _mm512_storeu_ps(d4 + j * Vp + 16 * q, acc[j][q]);
}

void vnm__sddmm_tile_bf16(const vnm_pattern *p, const uint32_t *dy2, int64_t Vp, const uint16_t *xt2,
                          int64_t npanels, int64_t rb, int64_t g0, int64_t g1, float *d4,
                          float *dvalues)
{
    int64_t r0 = rb * p->V, rows = p->R - r0 < p->V ? p->R - r0 : p->V;
    const uint16_t *cl = p->cols + rb * p->G * 4;
    int64_t nvec = Vp / 16, P = npanels * VNM_PANEL / 2;
    const uint32_t *yb = dy2 + rb * P * Vp;
    memset(d4, 0, sizeof(float) * (size_t)(4 * Vp * (g1 - g0)));
    for (int64_t pn = 0; pn < npanels; pn++) {
        /* a column's panel row, 64 bf16, as 32 pairs */
        const uint32_t *xp = (const uint32_t *)(xt2 + pn * p->xrows * VNM_PANEL);
        const uint32_t *yp = yb + pn * (VNM_PANEL / 2) * Vp;
        for (int64_t g = g0; g < g1; g++) {
            const uint32_t *xj[4];
            for (int j = 0; j < 4; j++) {
                xj[j] = xp + (g * p->M + cl[4 * g + j]) * (VNM_PANEL / 2);
                /* the same columns of the next panel, a panel's work ahead:
                 * every block reads its own columns of X, from L3 or memory */
                if (pn + 1 < npanels) {
                    const char *next = (const char *)(xj[j] + p->xrows * (VNM_PANEL / 2));
                    __builtin_prefetch(next, 0, 2);
                    __builtin_prefetch(next + 64, 0, 2);
                }
            }
            for (int64_t v = 0; v < nvec; v += NROW) {
                const uint32_t *y = yp + v * 16;
                float *d = d4 + (g - g0) * 4 * Vp + v * 16;
                switch (nvec - v < NROW ? nvec - v : NROW) {
                case 1: sddmm_acc(1, y, Vp, xj, d); break;
                case 2: sddmm_acc(2, y, Vp, xj, d); break;
                case 3: sddmm_acc(3, y, Vp, xj, d); break;
                default: sddmm_acc(4, y, Vp, xj, d); break;
                }
            }
        }
    }
    for (int64_t g = g0; g < g1; g++)
        for (int64_t v = 0; v < rows; v++)
            for (int slot = 0; slot < 2; slot++)
                dvalues[(r0 + v) * 2 * p->G + 2 * g + slot] =
                    d4[((g - g0) * 4 + vnm__index(p, r0 + v, g, slot)) * Vp + v];
}

#undef NROW
#pragma GCC pop_options

#else /* no x86 AVX-512 BF16 build: vnm__have_bf16 is false, so these are never called */

void vnm__sddmm_bf16_dy(const vnm_pattern *p, const float *dy, const float *dyt, int64_t B,
                        int64_t Vp, uint32_t *dy2)
{
    (void)p, (void)dy, (void)dyt, (void)B, (void)Vp, (void)dy2;
}
void vnm__sddmm_tile_bf16(const vnm_pattern *p, const uint32_t *dy2, int64_t Vp, const uint16_t *xt2,
                          int64_t npanels, int64_t rb, int64_t g0, int64_t g1, float *d4,
                          float *dvalues)
{
    (void)p, (void)dy2, (void)Vp, (void)xt2, (void)npanels, (void)rb, (void)g0, (void)g1, (void)d4,
        (void)dvalues;
}
#endif

/* Groups per work item: their sums (4·Vp floats each) stay in L2. */
#define SDDMM_BF16_D4_BYTES (128 * 1024)

vn_status vnm__sddmm_bf16_prepare(const vnm_pattern *p, const float *dy, const float *dyt,
                                  const float *xt, int64_t B, vnm_sddmm_bf16 *o)
{
    int64_t npanels = (B + VNM_PANEL - 1) / VNM_PANEL;
    /* a block's rows padded to whole vectors */
    *o = (vnm_sddmm_bf16){.Vp = ((p->V < p->R ? p->V : p->R) + 15) / 16 * 16, .npanels = npanels};
    o->dy_bytes = sizeof(uint32_t) * (size_t)(p->nblocks * npanels * VNM_PANEL / 2 * o->Vp);
    o->xt_bytes = sizeof(uint16_t) * (size_t)(npanels * p->xrows * VNM_PANEL);
    o->dy2 = vn__mem_alloc(o->dy_bytes);
    o->xt2 = vn__mem_alloc(o->xt_bytes);
    if (!o->dy2 || !o->xt2) {
        vnm__sddmm_bf16_free(o);
        return vn__err(VN_ERR_MEMORY, "vnm sddmm: out of memory for %zu bytes of bf16 operands",
                       o->dy_bytes + o->xt_bytes);
    }
    vnm__sddmm_bf16_dy(p, dy, dyt, B, o->Vp, o->dy2);
    vnm__to_bf16(xt, npanels * p->xrows * VNM_PANEL, o->xt2);
    return VN_OK;
}

void vnm__sddmm_bf16_free(vnm_sddmm_bf16 *o)
{
    if (o->dy2) vn__mem_free(o->dy2, o->dy_bytes);
    if (o->xt2) vn__mem_free(o->xt2, o->xt_bytes);
    o->dy2 = NULL;
    o->xt2 = NULL;
}

vn_status vnm__sddmm_bf16(const vnm_pattern *p, const vnm_sddmm_bf16 *o, int64_t rb_lo, int64_t rb_hi,
                          float *dvalues)
{
    int64_t gchunk = SDDMM_BF16_D4_BYTES / (int64_t)(4 * sizeof(float)) / o->Vp;
    if (gchunk < 1) gchunk = 1;
    if (gchunk > p->G) gchunk = p->G;
    int64_t nchunks = (p->G + gchunk - 1) / gchunk, nb = rb_hi - rb_lo;
    size_t d4_bytes = sizeof(float) * (size_t)(4 * o->Vp * gchunk);
    bool oom = false;
#pragma omp parallel reduction(|| : oom) if (o->npanels * nb * o->Vp * p->G * VNM_PANEL > VN_OMP_MIN_WORK)
    {
        float *d4 = vn__mem_alloc(d4_bytes);
        oom = !d4;
#pragma omp for schedule(dynamic)
        for (int64_t w = 0; w < nb * nchunks; w++) {
            int64_t rb = rb_lo + w / nchunks, g0 = w % nchunks * gchunk;
            int64_t g1 = g0 + gchunk < p->G ? g0 + gchunk : p->G;
            if (d4) vnm__sddmm_tile_bf16(p, o->dy2, o->Vp, o->xt2, o->npanels, rb, g0, g1, d4, dvalues);
        }
        if (d4) vn__mem_free(d4, d4_bytes);
    }
    return oom ? vn__err(VN_ERR_MEMORY, "vnm sddmm: out of memory for %zu bytes of scratch", d4_bytes)
               : VN_OK;
}
