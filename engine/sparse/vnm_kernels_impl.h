/* vnm_kernels_impl.h — the inner loops of the V:N:M kernels, written once
 * with GCC vector extensions and instantiated by vnm_kernels.c for each
 * instruction set it dispatches to. Before including it, define
 *   VNM_VL      floats per vector (16: AVX-512, 8: AVX2 or two SSE registers)
 *   VNM_ISA(x)  a name suffix, e.g. x##_avx512
 * Operands are in the panel layout of vnm_internal.h: rows of VNM_PANEL
 * floats, 256-byte aligned, so every vector load is aligned.
 *
 * Why the loops look the way they do:
 *  - spmm: for one row of W the kept values pick 2 of the 4 kept columns per
 *    group, so each value is one broadcast times one contiguous panel row of
 *    X (an FMA with a memory operand). Accumulator sets (SETS) keep enough
 *    independent FMA chains in flight, and groups are walked in chunks
 *    whose panel rows stay in L1 while all V rows of the block read them.
 *  - spmm_t (dX = dY·W): the transpose of V:N:M is not V:N:M, so it walks
 *    the transposed pattern: each kept column of a group gathers the rows
 *    of dY that use it, with SETS accumulator sets again.
 *  - sddmm, two ways (vnm_kernels.c chooses): sddmm_tile computes VNM_VL
 *    dot products of a row at once (VNM_VL/2 groups), each a vector
 *    accumulator over the batch, and one transpose-and-add tree turns them
 *    into one vector of VNM_VL sums, stored contiguously (a row keeps its
 *    pairs group after group); sddmm_rows (AVX-512 only) multiplies all 4
 *    kept columns of a group with vectors of the block's rows of dY and lets
 *    each row pick its 2 products at the end. */

#define VEC VNM_ISA(vec)
typedef float VEC __attribute__((vector_size(VNM_VL * 4)));
typedef int VNM_ISA(ivec) __attribute__((vector_size(VNM_VL * 4)));

/* Vectors per pass over a panel row: four. A panel row of 64 floats takes
 * one pass with 16-float vectors and two with 8-float ones. */
#define NACC 4
#define NPASS (VNM_PANEL / (NACC * VNM_VL))
/* Independent sets of NACC accumulators in spmm and spmm_t. An FMA takes 4
 * cycles and two issue per cycle, so 8 chains are just enough and 16 leave
 * slack; AVX-512 has the 32 registers for 16, AVX2's 16 only fit 8. */
#define SETS (VNM_VL == 16 ? 4 : 2)
/* How many rows ahead spmm_tile prefetches values and indices. */
#define PREFETCH_ROWS 4

/* Aligned vector access. Macros rather than functions: a function taking or
 * returning a vector wider than the build's baseline registers would have a
 * different ABI in each instantiation (GCC warns, -Wpsabi). */
#define LOADV(p) (*(const VEC *)(p))
#define STOREV(p, v) (*(VEC *)(p) = (v))

/* tile (rows of block rb × VNM_PANEL) (+)= the block's rows of (X·Wᵀ)ᵀ over
 * groups g0..g1−1 (g0 even, at most SPMM_GROUPS of them), for the batch
 * panel xp (xrows × VNM_PANEL). `first` overwrites the tile instead of adding
 * to it. The panel offsets of the block's kept columns are looked up once
 * into `off`; each index byte then serves two groups. */
static void VNM_ISA(spmm_tile)(const vnm_pattern *p, const float *values, const float *xp,
                               int64_t rb, int64_t g0, int64_t g1, bool first, float *tile)
{
    int64_t r0 = rb * p->V, rows = p->R - r0 < p->V ? p->R - r0 : p->V;
    int64_t ng = g1 - g0;
    const uint16_t *cl = p->cols + (rb * p->G + g0) * 4;
    int32_t off[4 * SPMM_GROUPS];
    for (int64_t k = 0; k < 4 * ng; k++)
        off[k] = (int32_t)(((g0 + k / 4) * p->M + cl[k]) * VNM_PANEL);
    for (int64_t v = 0; v < rows; v++) {
        const float *val = values + (r0 + v) * 2 * p->G + 2 * g0;
        const uint8_t *ix = p->idx + (r0 + v) * p->idx_stride + g0 / 2;
        float *out = tile + v * VNM_PANEL;
        /* The rows' values lie 8·G bytes apart, too many interleaved
         * streams for the hardware prefetcher: fetch a later row's ahead. */
        if (v + PREFETCH_ROWS < rows)
            for (int64_t k = 0; k < 2 * ng; k += 16) {
                __builtin_prefetch(val + PREFETCH_ROWS * 2 * p->G + k);
                if (k % 128 == 0) __builtin_prefetch(ix + PREFETCH_ROWS * p->idx_stride + k / 4);
            }
        for (int h = 0; h < NPASS; h++) {
            const float *xh = xp + h * NACC * VNM_VL;
            VEC acc[SETS][NACC];
            for (int i = 0; i < SETS; i++)
                for (int q = 0; q < NACC; q++)
                    acc[i][q] = first || i > 0 ? (VEC){0} : LOADV(out + (h * NACC + q) * VNM_VL);
            int64_t k = 0;
            for (; k + 1 < ng; k += 2) { /* two groups: four values, one index byte */
                int byte = ix[k / 2];
                const int32_t *o = off + 4 * k;
                const float *x[4] = {xh + o[byte & 3], xh + o[byte >> 2 & 3],
                                     xh + o[4 + (byte >> 4 & 3)], xh + o[4 + (byte >> 6 & 3)]};
                for (int i = 0; i < 4; i++)
                    for (int q = 0; q < NACC; q++)
                        acc[i % SETS][q] += val[2 * k + i] * LOADV(x[i] + q * VNM_VL);
            }
            if (k < ng) { /* an odd last group: the low nibble */
                int byte = ix[k / 2];
                const float *x[2] = {xh + off[4 * k + (byte & 3)], xh + off[4 * k + (byte >> 2 & 3)]};
                for (int i = 0; i < 2; i++)
                    for (int q = 0; q < NACC; q++)
                        acc[i][q] += val[2 * k + i] * LOADV(x[i] + q * VNM_VL);
            }
            for (int q = 0; q < NACC; q++) {
                VEC sum = acc[0][q];
                for (int i = 1; i < SETS; i++) sum += acc[i][q];
                STOREV(out + (h * NACC + q) * VNM_VL, sum);
            }
        }
    }
}

/* dxp rows g0·M..g1·M−1 (the columns of groups g0..g1−1) = (dY·W)ᵀ for the
 * batch panel dyp (R × VNM_PANEL). vt holds the values in the order of
 * t_code. */
static void VNM_ISA(spmm_t_tile)(const vnm_pattern *p, const float *vt, const float *dyp,
                                 int64_t g0, int64_t g1, float *dxp)
{
    memset(dxp + g0 * p->M * VNM_PANEL, 0, sizeof(float) * (size_t)((g1 - g0) * p->M * VNM_PANEL));
    for (int64_t rb = 0; rb < p->nblocks; rb++)
        for (int64_t g = g0; g < g1; g++)
            for (int j = 0; j < 4; j++) {
                int64_t e = (rb * p->G + g) * 4 + j;
                int32_t k0 = p->t_start[e], k1 = p->t_start[e + 1];
                if (k0 == k1) continue;
                float *out = dxp + (g * p->M + p->cols[e]) * VNM_PANEL;
                for (int h = 0; h < NPASS; h++) {
                    const float *yh = dyp + h * NACC * VNM_VL;
                    VEC acc[SETS][NACC];
                    for (int i = 0; i < SETS; i++)
                        for (int q = 0; q < NACC; q++)
                            acc[i][q] = i > 0 ? (VEC){0} : LOADV(out + (h * NACC + q) * VNM_VL);
                    int32_t k = k0;
                    for (; k + SETS <= k1; k += SETS)
                        for (int i = 0; i < SETS; i++) {
                            const float *y = yh + (int64_t)(p->t_code[k + i] >> 1) * VNM_PANEL;
                            for (int q = 0; q < NACC; q++)
                                acc[i][q] += vt[k + i] * LOADV(y + q * VNM_VL);
                        }
                    for (; k < k1; k++) {
                        const float *y = yh + (int64_t)(p->t_code[k] >> 1) * VNM_PANEL;
                        for (int q = 0; q < NACC; q++) acc[0][q] += vt[k] * LOADV(y + q * VNM_VL);
                    }
                    for (int q = 0; q < NACC; q++) {
                        VEC sum = acc[0][q];
                        for (int i = 1; i < SETS; i++) sum += acc[i][q];
                        STOREV(out + (h * NACC + q) * VNM_VL, sum);
                    }
                }
            }
}

/* VNM_VL accumulators → sums[i] = the full sum of accumulator bitrev(i)
 * (the bit-reversal of i over log2(VNM_VL) bits). Each level of the
 * transpose-and-add tree cuts the lanes of two vectors into segments of
 * partial sums, and keeps the segments of both alternately, each halved by
 * adding its upper half to its lower. acc is overwritten. */
static inline void VNM_ISA(reduce)(VEC *acc, float *sums)
{
    typedef VNM_ISA(ivec) iv;
#if VNM_VL == 16
    static const iv lo[4] = {
        {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
        {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
        {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
        {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30}};
    static const iv hi[4] = {
        {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31},
        {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31},
        {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31},
        {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}};
    enum { LEVELS = 4 };
#elif VNM_VL == 8
    static const iv lo[3] = {
        {0, 1, 2, 3, 8, 9, 10, 11}, {0, 1, 8, 9, 4, 5, 12, 13}, {0, 8, 2, 10, 4, 12, 6, 14}};
    static const iv hi[3] = {
        {4, 5, 6, 7, 12, 13, 14, 15}, {2, 3, 10, 11, 6, 7, 14, 15}, {1, 9, 3, 11, 5, 13, 7, 15}};
    enum { LEVELS = 3 };
#else
#error "VNM_VL must be 8 or 16"
#endif
    int n = VNM_VL;
    for (int level = 0; level < LEVELS; level++) {
        n /= 2;
        for (int i = 0; i < n; i++)
            acc[i] = __builtin_shuffle(acc[2 * i], acc[2 * i + 1], lo[level]) +
                     __builtin_shuffle(acc[2 * i], acc[2 * i + 1], hi[level]);
    }
    memcpy(sums, &acc[0], sizeof acc[0]);
}

/* bit-reversal of i over log2(VNM_VL) bits */
static inline int VNM_ISA(bitrev)(int i)
{
    int r = 0;
    for (int n = VNM_VL; n > 1; n /= 2, i >>= 1) r = r << 1 | (i & 1);
    return r;
}

/* dvalues of block rb, groups g0..g0+ng−1 (ng ≤ VNM_VL/2) = dYᵀ·X at the
 * kept positions, from the panels of dYt (R rows) and Xt (xrows rows). xoff is
 * scratch for V × VNM_VL offsets. */
static void VNM_ISA(sddmm_tile)(const vnm_pattern *p, const float *dyt, const float *xt,
                                int64_t npanels, int64_t rb, int64_t g0, int64_t ng,
                                int32_t *xoff, float *dvalues)
{
    enum { DOTS = VNM_VL, PANELS = SDDMM_PANELS };
    int64_t r0 = rb * p->V, rows = p->R - r0 < p->V ? p->R - r0 : p->V;
    const uint16_t *cl = p->cols + rb * p->G * 4;
    /* Accumulator t computes dot bitrev(t), so the reduced vector comes out
     * in dot order; dots past the last group repeat dot 0. */
    for (int64_t v = 0; v < rows; v++)
        for (int t = 0; t < DOTS; t++) {
            int d = VNM_ISA(bitrev)(t);
            if (d >= 2 * ng) d = 0;
            int64_t g = g0 + d / 2;
            xoff[v * DOTS + t] = (int32_t)((g * p->M + cl[4 * g + vnm__index(p, r0 + v, g, d & 1)]) * VNM_PANEL);
        }
    for (int64_t pg = 0; pg < npanels; pg += PANELS) {
        int64_t pend = pg + PANELS < npanels ? pg + PANELS : npanels;
        for (int64_t v = 0; v < rows; v++) {
            /* The next panels' kept rows of Xt into L2, a few per row
             * (spread over the block's rows): else the first row of each
             * group of panels waits on 32 KiB from L3 or memory. */
            int64_t ncol = 4 * ng, pnext = pend + PANELS < npanels ? pend + PANELS : npanels;
            for (int64_t ci = v * ncol / rows; ci < (v + 1) * ncol / rows; ci++) {
                int64_t g = g0 + ci / 4, col = g * p->M + cl[4 * g + ci % 4];
                for (int64_t pn = pend; pn < pnext; pn++)
                    for (int line = 0; line < VNM_PANEL / 16; line++)
                        __builtin_prefetch(xt + (pn * p->xrows + col) * VNM_PANEL + line * 16, 0, 2);
            }
            VEC acc[DOTS];
            /* Half of the dots at a time: the 8 (or 4) column pointers
             * of a half stay in registers, where all 16 spilled to the
             * stack; dY is read twice, from L1. Each accumulator sums the
             * same products in the same order either way. */
            for (int half = 0; half < 2; half++) {
                const int32_t *xo = xoff + v * DOTS + half * (DOTS / 2);
                VEC a[DOTS / 2];
                for (int t = 0; t < DOTS / 2; t++) a[t] = (VEC){0};
                for (int64_t pn = pg; pn < pend; pn++) {
                    const float *dy = dyt + (pn * p->R + r0 + v) * VNM_PANEL;
                    const float *xb = xt + pn * p->xrows * VNM_PANEL;
                    for (int s = 0; s < VNM_PANEL / VNM_VL; s++) {
                        VEC d = LOADV(dy + s * VNM_VL);
                        for (int t = 0; t < DOTS / 2; t++)
                            a[t] += d * LOADV(xb + xo[t] + s * VNM_VL);
                    }
                }
                for (int t = 0; t < DOTS / 2; t++) acc[half * (DOTS / 2) + t] = a[t];
            }
            float sum[VNM_VL];
            VNM_ISA(reduce)(acc, sum);
            float *out = dvalues + (r0 + v) * 2 * p->G + 2 * g0;
            for (int d = 0; d < 2 * ng; d++) out[d] = pg == 0 ? sum[d] : out[d] + sum[d];
        }
    }
}

#if VNM_VL == 16
/* SDDMM by rows, AVX-512 only. It does twice the FMAs of sddmm_tile; that
 * pays where one 64-byte load per FMA bounds sddmm_tile, and not with 8-float
 * vectors, where loads are cheaper (measured with AVX2: by dot products is
 * 1.2× faster at a batch of 128, 1.6× at 1024). */

/* Row vectors per chunk: 4 kept columns × NROW accumulators plus NROW
 * vectors of dY take 20 of the 32 registers. */
#define NROW 4

/* d4[j·ld4 + v] += Σ_l X[l][c_j] · dY[l][v] over the nl batch rows of one
 * panel, for the 4 kept columns c_j of a group (xj[j]: column c_j of the
 * Xt panel) and nv·VNM_VL rows v (dy: batch row l at dy + l·ldy). nv is a
 * constant at each call, so the accumulators stay in registers. */
static inline __attribute__((always_inline)) void VNM_ISA(sddmm_acc)(
    const int nv, const float *dy, int64_t ldy, const float *const *xj, int64_t nl, float *d4,
    int64_t ld4)
{
    VEC acc[4][NROW];
    for (int j = 0; j < 4; j++)
        for (int q = 0; q < nv; q++) acc[j][q] = LOADV(d4 + j * ld4 + q * VNM_VL);
    for (int64_t l = 0; l < nl; l++) {
        VEC y[NROW];
        for (int q = 0; q < nv; q++) y[q] = LOADV(dy + l * ldy + q * VNM_VL);
        for (int j = 0; j < 4; j++) {
            float xv = xj[j][l];
            for (int q = 0; q < nv; q++) acc[j][q] += xv * y[q];
        }
    }
    for (int j = 0; j < 4; j++)
        for (int q = 0; q < nv; q++) STOREV(d4 + j * ld4 + q * VNM_VL, acc[j][q]);
}

/* dvalues of block rb, groups g0..g1−1 (+)= dYᵀ·X at the kept positions over
 * batch rows b_lo..b_hi−1 (b_lo a multiple of VNM_PANEL; `add` adds to
 * dvalues instead of overwriting), from the block's slice of dY (B × Vp:
 * its rows, padded to Vp) and the panels of Xt. For each group, all 4 kept
 * columns against all the block's rows: twice the products needed, but
 * each is a broadcast of X times a contiguous vector of dY, with no
 * reduction across lanes. The sums gather in d4 (scratch of 4·Vp floats
 * per group) panel after panel — the panel's dY rows stay in L1 across the
 * groups — and each row picks its 2 at the end. */
static void VNM_ISA(sddmm_rows)(const vnm_pattern *p, const float *dy, int64_t Vp,
                                const float *xt, int64_t b_lo, int64_t b_hi, int64_t rb,
                                int64_t g0, int64_t g1, bool add, float *d4, float *dvalues)
{
    int64_t r0 = rb * p->V, rows = p->R - r0 < p->V ? p->R - r0 : p->V;
    const uint16_t *cl = p->cols + rb * p->G * 4;
    int64_t nvec = Vp / VNM_VL;
    memset(d4, 0, sizeof(float) * (size_t)(4 * Vp * (g1 - g0)));
    for (int64_t b0 = b_lo; b0 < b_hi; b0 += VNM_PANEL) {
        int64_t nl = b_hi - b0 < VNM_PANEL ? b_hi - b0 : VNM_PANEL;
        const float *xp = xt + b0 / VNM_PANEL * p->xrows * VNM_PANEL, *dyp = dy + b0 * Vp;
        for (int64_t g = g0; g < g1; g++) {
            const float *xj[4];
            for (int j = 0; j < 4; j++) xj[j] = xp + (g * p->M + cl[4 * g + j]) * VNM_PANEL;
            for (int64_t v = 0; v < nvec; v += NROW) {
                const float *y = dyp + v * VNM_VL;
                float *d = d4 + (g - g0) * 4 * Vp + v * VNM_VL;
                switch (nvec - v < NROW ? nvec - v : NROW) {
                case 1: VNM_ISA(sddmm_acc)(1, y, Vp, xj, nl, d, Vp); break;
                case 2: VNM_ISA(sddmm_acc)(2, y, Vp, xj, nl, d, Vp); break;
                case 3: VNM_ISA(sddmm_acc)(3, y, Vp, xj, nl, d, Vp); break;
                default: VNM_ISA(sddmm_acc)(4, y, Vp, xj, nl, d, Vp); break;
                }
            }
        }
    }
    for (int64_t g = g0; g < g1; g++)
        for (int64_t v = 0; v < rows; v++)
            for (int slot = 0; slot < 2; slot++) {
                float *out = dvalues + (r0 + v) * 2 * p->G + 2 * g + slot;
                float sum = d4[((g - g0) * 4 + vnm__index(p, r0 + v, g, slot)) * Vp + v];
                *out = add ? *out + sum : sum;
            }
}

#undef NROW
#endif
#undef NACC
#undef NPASS
#undef SETS
#undef PREFETCH_ROWS
#undef LOADV
#undef STOREV
#undef VEC
