/* vnm_kernels.c — the three CPU kernels of a V:N:M linear layer (forward
 * SpMM, dX = dY·W, SDDMM for the values' gradient), the packing of dense
 * operands into the panel layout they read, and the choice between the
 * AVX-512 and the portable instantiation of their inner loops
 * (vnm_kernels_impl.h). Work is split over OpenMP threads by blocks of rows
 * or by batch panels, so that no two threads write the same output. */
#include "vnm_internal.h"

#include <stdlib.h>

/* ---- the two instantiations of the inner loops -------------------------------- */

/* Groups per pass of the forward tile: 4 kept columns × 24 groups × 256 B
 * of panel rows = 24 KiB, read by every row of the block from L1. Even, so
 * that a pass starts on an index byte. */
#define SPMM_GROUPS 24
/* Batch panels per SDDMM reduction: the VNM_VL/2 groups' 32 kept rows of
 * X × 4 panels × 256 B = 32 KiB stay in L1 across the block's rows. */
#define SDDMM_PANELS 4

#define VNM_VL 8
#define VNM_ISA(x) x##_generic
#include "vnm_kernels_impl.h"
#undef VNM_VL
#undef VNM_ISA

#if defined(__x86_64__) && defined(__GNUC__)
#define VNM_HAVE_AVX512 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512dq,avx512bw")
#define VNM_VL 16
#define VNM_ISA(x) x##_avx512
#include "vnm_kernels_impl.h"
#undef VNM_VL
#undef VNM_ISA
#pragma GCC pop_options
#endif

typedef struct {
    void (*spmm_tile)(const vnm_pattern *, const float *, const float *, int64_t, int64_t,
                      int64_t, bool, float *);
    void (*spmm_t_tile)(const vnm_pattern *, const float *, const float *, int64_t, int64_t,
                        float *);
    void (*sddmm_tile)(const vnm_pattern *, const float *, const float *, int64_t, int64_t,
                       int64_t, int64_t, int32_t *, float *);
    void (*sddmm_rows)(const vnm_pattern *, const float *, int64_t, const float *, int64_t, int64_t,
                       int64_t, int64_t, int64_t, bool, float *, float *); /* NULL: not worth it here */
    int dots; /* groups per sddmm tile × 2 */
} vnm_kernels;

static const vnm_kernels generic = {spmm_tile_generic, spmm_t_tile_generic, sddmm_tile_generic,
                                    NULL, 8};
#ifdef VNM_HAVE_AVX512
static const vnm_kernels avx512 = {spmm_tile_avx512, spmm_t_tile_avx512, sddmm_tile_avx512,
                                   sddmm_rows_avx512, 16};
#endif

/* AVX-512 when the CPU has it, unless VENOM_NO_AVX512 is set (non-empty):
 * that forces the portable loops, e.g. to test them on an AVX-512 machine. */
static const vnm_kernels *pick(void)
{
#ifdef VNM_HAVE_AVX512
    const char *off = getenv("VENOM_NO_AVX512");
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") && !(off && *off))
        return &avx512;
#endif
    return &generic;
}

const char *vn_vnm_isa(void) { return pick() == &generic ? "portable" : "avx512"; }

/* The precision of the forward, dX and dW, for every thread (vn_vnm_set_precision). */
static _Atomic int precision = VN_VNM_F32;

vn_status vn_vnm_set_precision(vn_vnm_precision prec)
{
    if (prec != VN_VNM_F32 && prec != VN_VNM_BF16)
        return vn__err(VN_ERR_ARG, "vnm_set_precision: precision %d; expected VN_VNM_F32 (0) or "
                       "VN_VNM_BF16 (1)", (int)prec);
    if (prec == VN_VNM_BF16 && (pick() == &generic || !vnm__have_bf16()))
        return vn__err(VN_ERR_ARG, "vnm_set_precision: bf16 needs a CPU with AVX-512 BF16 "
                       "(avx512_bf16), and this one %s",
                       pick() == &generic && vnm__have_bf16() ? "has it but VENOM_NO_AVX512 is set"
                                                              : "does not have it");
    precision = prec;
    return VN_OK;
}

vn_vnm_precision vn_vnm_get_precision(void) { return (vn_vnm_precision)precision; }

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- packing ---------------------------------------------------------------------- */

typedef float vnm_v8 __attribute__((vector_size(32)));

/* dst rows 0..7 (stride ldd) = the transpose of the 8 × 8 block at src
 * (stride lds): three rounds of pairwise shuffles (the classic unpack,
 * shuffle, lane-swap sequence), 24 shuffles for 64 floats instead of 64
 * strided scalar stores. Pointers only in the signature: see LOADV. */
static void transpose8(const float *src, int64_t lds, float *dst, int64_t ldd)
{
    typedef int vnm_i8 __attribute__((vector_size(32)));
    vnm_v8 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++) memcpy(&r[i], src + i * lds, sizeof r[i]);
    for (int i = 0; i < 8; i += 2) {
        t[i] = __builtin_shuffle(r[i], r[i + 1], (vnm_i8){0, 8, 1, 9, 4, 12, 5, 13});
        t[i + 1] = __builtin_shuffle(r[i], r[i + 1], (vnm_i8){2, 10, 3, 11, 6, 14, 7, 15});
    }
    for (int i = 0; i < 8; i += 4)
        for (int j = 0; j < 2; j++) {
            u[i + 2 * j] = __builtin_shuffle(t[i + j], t[i + j + 2], (vnm_i8){0, 1, 8, 9, 4, 5, 12, 13});
            u[i + 2 * j + 1] = __builtin_shuffle(t[i + j], t[i + j + 2], (vnm_i8){2, 3, 10, 11, 6, 7, 14, 15});
        }
    for (int j = 0; j < 4; j++) {
        vnm_v8 lo = __builtin_shuffle(u[j], u[j + 4], (vnm_i8){0, 1, 2, 3, 8, 9, 10, 11});
        vnm_v8 hi = __builtin_shuffle(u[j], u[j + 4], (vnm_i8){4, 5, 6, 7, 12, 13, 14, 15});
        memcpy(dst + j * ldd, &lo, sizeof lo);
        memcpy(dst + (j + 4) * ldd, &hi, sizeof hi);
    }
}

void vnm__transpose(const float *src, int64_t lds, float *dst, int64_t ldd, int64_t nb,
                            int64_t nc)
{
    int64_t nb8 = nb / 8 * 8, nc8 = nc / 8 * 8;
    for (int64_t l = 0; l < nb8; l += 8)
        for (int64_t c = 0; c < nc8; c += 8) transpose8(src + l * lds + c, lds, dst + c * ldd + l, ldd);
    for (int64_t l = 0; l < nb; l++)
        for (int64_t c = l < nb8 ? nc8 : 0; c < nc; c++) dst[c * ldd + l] = src[l * lds + c];
}

/* The transpose of pack and unpack: under bf16 (only set on AVX-512 CPUs)
 * the 16 × 16 AVX-512 one; the same bits either way, so the f32 path keeps
 * the portable one it always had. */
static void (*transposer(void))(const float *, int64_t, float *, int64_t, int64_t, int64_t)
{
    return precision == VN_VNM_BF16 && pick() != &generic ? vnm__transpose16 : vnm__transpose;
}

void vnm__pack(const float *src, int64_t B, int64_t C, int64_t lds, float *dst, int64_t rows)
{
    void (*transpose)(const float *, int64_t, float *, int64_t, int64_t, int64_t) = transposer();
    int64_t npanels = (B + VNM_PANEL - 1) / VNM_PANEL;
#pragma omp parallel for schedule(static) if (B * C > VN_OMP_MIN_WORK)
    for (int64_t pn = 0; pn < npanels; pn++) {
        float *panel = dst + pn * rows * VNM_PANEL;
        int64_t nb = min64(VNM_PANEL, B - pn * VNM_PANEL);
        for (int64_t c0 = 0; c0 < C; c0 += VNM_PANEL) {
            int64_t nc = min64(VNM_PANEL, C - c0);
            transpose(src + pn * VNM_PANEL * lds + c0, lds, panel + c0 * VNM_PANEL, VNM_PANEL, nb, nc);
            for (int64_t c = 0; c < nc && nb < VNM_PANEL; c++)
                memset(panel + (c0 + c) * VNM_PANEL + nb, 0, sizeof(float) * (size_t)(VNM_PANEL - nb));
        }
        memset(panel + C * VNM_PANEL, 0, sizeof(float) * (size_t)((rows - C) * VNM_PANEL));
    }
}

void vnm__unpack(const float *src, int64_t rows, float *dst, int64_t B, int64_t C, int64_t ldd)
{
    void (*transpose)(const float *, int64_t, float *, int64_t, int64_t, int64_t) = transposer();
    int64_t npanels = (B + VNM_PANEL - 1) / VNM_PANEL;
#pragma omp parallel for schedule(static) if (B * C > VN_OMP_MIN_WORK)
    for (int64_t pn = 0; pn < npanels; pn++) {
        const float *panel = src + pn * rows * VNM_PANEL;
        int64_t nb = min64(VNM_PANEL, B - pn * VNM_PANEL);
        for (int64_t c0 = 0; c0 < C; c0 += VNM_PANEL)
            transpose(panel + c0 * VNM_PANEL, VNM_PANEL, dst + pn * VNM_PANEL * ldd + c0, ldd,
                      min64(VNM_PANEL, C - c0), nb);
    }
}

/* ---- forward: Y = X·Wᵀ + b ------------------------------------------------------------ */

/* The bf16 operands of the forward: Xt rounded to bf16 in its layout, the
 * values rounded to bf16 (vals, R × 2G, read as one 32-bit word per row and
 * group) and then put in chunk-major order with their pair offsets (cvals,
 * poff: vnm__bf16_chunk_rows). */
typedef struct {
    uint16_t *xt, *vals, *poff;
    uint32_t *cvals;
    size_t xt_bytes, vals_bytes, poff_bytes, cvals_bytes;
} bf16_operands;

static void bf16_free(bf16_operands *o)
{
    if (o->xt) vn__mem_free(o->xt, o->xt_bytes);
    if (o->vals) vn__mem_free(o->vals, o->vals_bytes);
    if (o->poff) vn__mem_free(o->poff, o->poff_bytes);
    if (o->cvals) vn__mem_free(o->cvals, o->cvals_bytes);
}

/* Rounds Xt (npanels·xrows·VNM_PANEL floats) and the values (R × 2G) to bf16,
 * and turns the indices into the kernel's offsets. At each call, so that
 * in-place optimizer updates are always seen: R·3G steps against B·R·2G
 * products. */
static vn_status bf16_convert(const vnm_pattern *p, const float *values, const float *xt,
                              int64_t npanels, bf16_operands *o)
{
    int64_t nx = npanels * p->xrows * VNM_PANEL, nv = p->R * 2 * p->G;
    int64_t nc = p->nblocks * ((p->G + VNM_BF16_GROUPS - 1) / VNM_BF16_GROUPS) * p->V * VNM_BF16_GROUPS;
    o->xt_bytes = sizeof(uint16_t) * (size_t)nx;
    o->vals_bytes = sizeof(uint16_t) * (size_t)nv;
    o->poff_bytes = sizeof(uint16_t) * (size_t)nc;
    o->cvals_bytes = sizeof(uint32_t) * (size_t)nc;
    o->xt = vn__mem_alloc(o->xt_bytes);
    o->vals = vn__mem_alloc(o->vals_bytes);
    o->poff = vn__mem_alloc(o->poff_bytes);
    o->cvals = vn__mem_alloc(o->cvals_bytes);
    if (!o->xt || !o->vals || !o->poff || !o->cvals) {
        bf16_free(o);
        return vn__err(VN_ERR_MEMORY, "vnm_linear: out of memory for %zu bytes of bf16 operands",
                       o->xt_bytes + o->vals_bytes + o->poff_bytes + o->cvals_bytes);
    }
    vnm__to_bf16(xt, nx, o->xt);
    vnm__to_bf16(values, nv, o->vals);
    vnm__bf16_chunk_rows(p, (const uint32_t *)o->vals, o->cvals, o->poff);
    return VN_OK;
}

vn_status vnm__spmm(const vnm_pattern *p, const float *values, const float *xt, int64_t B,
                    const float *bias, float *y, int64_t yrows)
{
    const vnm_kernels *k = pick();
    int64_t npanels = (B + VNM_PANEL - 1) / VNM_PANEL, vrows = min64(p->V, p->R);
    int64_t work = p->nblocks * npanels;
    /* bf16 only with the AVX-512 loops: VENOM_NO_AVX512 set after
     * vn_vnm_set_precision still gets the portable f32 ones. */
    bool bf16 = precision == VN_VNM_BF16 && k != &generic;
    bf16_operands o = {0};
    if (bf16 && bf16_convert(p, values, xt, npanels, &o)) return VN_ERR_MEMORY;
    size_t tile_bytes = sizeof(float) * (size_t)(vrows * VNM_PANEL);
    size_t scratch_bytes = tile_bytes + (bf16 ? VNM_BF16_PAIRS_BYTES : 0);
    bool oom = false;
#pragma omp parallel reduction(|| : oom) if (B * p->R * p->G > VN_OMP_MIN_WORK)
    {
        /* the tile, then (bf16) the pair buffer: tile_bytes is a multiple of 256 */
        float *tile = vn__mem_alloc(scratch_bytes);
        oom = !tile;
#pragma omp for schedule(dynamic)
        for (int64_t w = 0; w < work; w++) {
            if (!tile) continue;
            int64_t pn = w / p->nblocks, rb = w % p->nblocks; /* blocks inner: one panel of X stays in L2 */
            int64_t r0 = rb * p->V, rows = min64(p->V, p->R - r0);
            /* Panels out: the tile is rows r0.. of panel pn, so the kernel
             * writes it in place. */
            float *out = yrows ? y + (pn * yrows + r0) * VNM_PANEL : tile;
            if (bf16)
                vnm__spmm_tile_bf16(p, o.cvals, o.poff, o.xt + pn * p->xrows * VNM_PANEL, rb,
                                    (char *)tile + tile_bytes, out);
            else
                for (int64_t g0 = 0; g0 < p->G; g0 += SPMM_GROUPS)
                    k->spmm_tile(p, values, xt + pn * p->xrows * VNM_PANEL, rb, g0,
                                 min64(p->G, g0 + SPMM_GROUPS), g0 == 0, out);
            /* The tile holds Yᵀ for these rows: add the bias along its rows
             * (contiguous, in L1), then write it back transposed in 8 × 8
             * blocks; an element-by-element transpose here cost about a
             * tenth of the forward. */
            int64_t nb = min64(VNM_PANEL, B - pn * VNM_PANEL);
            for (int64_t v = 0; v < rows && bias; v++)
                for (int64_t l = 0; l < nb; l++) out[v * VNM_PANEL + l] += bias[r0 + v];
            if (!yrows)
                (bf16 ? vnm__transpose16 : vnm__transpose)(tile, VNM_PANEL, y + pn * VNM_PANEL * p->R + r0,
                                                           p->R, rows, nb);
        }
        if (tile) vn__mem_free(tile, scratch_bytes);
    }
    bf16_free(&o);
    return oom ? vn__err(VN_ERR_MEMORY, "vnm_linear: out of memory for a %zu-byte tile", scratch_bytes)
               : VN_OK;
}

/* ---- dX = dY·W -------------------------------------------------------------------------- */

/* The bf16 dX (vnm_bf16.c): dY's row pairs interleaved in bf16, and each
 * block and group's row pairs with their bf16 values, `slots` entries per
 * block and group (a block of V rows touches at most V/2 + 1 pairs). The
 * lists live in one u8 tensor, so that a matrix can keep them
 * (vnm__bf16_lists_of) and a call can hold them while another replaces
 * them: tv (nbg·slots·4 words), then tp (nbg·slots), then tcount (nbg·16). */
static int64_t list_slots(const vnm_pattern *p) { return min64(p->V, p->R) / 2 + 1; }

typedef struct {
    const uint32_t *tv;
    const uint16_t *tp, *tc;
} bf16_lists;

static bf16_lists lists_in(const vnm_pattern *p, const vn_tensor *t)
{
    int64_t nbg = p->nblocks * p->G, slots = list_slots(p);
    const uint8_t *b = vn_tensor_data(t);
    bf16_lists l = {(const uint32_t *)b, (const uint16_t *)(b + 16 * nbg * slots), NULL};
    l.tc = l.tp + nbg * slots;
    return l;
}

bool vnm__dx_in_bf16(const vnm_pattern *p)
{
    /* a list's row pairs are stored as uint16 offsets in their block, so
     * blocks of 131070 rows or more stay in f32 */
    return precision == VN_VNM_BF16 && pick() != &generic && list_slots(p) <= UINT16_MAX;
}

vn_tensor *vnm__bf16_lists(const vnm_pattern *p, const float *values)
{
    int64_t nbg = p->nblocks * p->G, slots = list_slots(p);
    int64_t n = nbg * slots * (16 + 2) + nbg * 16 * 2;
    vn_tensor *t = vn__new(VN_U8, 1, &n);
    if (!t) return NULL;
    bf16_lists l = lists_in(p, t);
    vnm__bf16_t_lists(p, values, slots, (uint32_t *)l.tv, (uint16_t *)l.tp, (uint16_t *)l.tc);
    return t;
}

vn_tensor *vnm__bf16_lists_of(const vn_vnm *s, const vn_tensor *values, const float *data)
{
    vn_vnm *m = (vn_vnm *)s; /* the cache is the only part of s that changes */
    uint32_t version = values->storage->version;
    vn_tensor *lists = vnm__derived_get(&m->lists, values, version);
    if (lists) return lists;
    vnm_pattern p = vnm__pattern_of(s);
    if ((lists = vnm__bf16_lists(&p, data))) vnm__derived_put(&m->lists, values, version, lists);
    return lists;
}

static vn_status spmm_t_bf16(const vnm_pattern *p, const float *values, const float *dy,
                             const float *dyt, int64_t B, float *dxt, const vn_tensor *lists)
{
    int64_t npanels = (B + VNM_PANEL - 1) / VNM_PANEL, R2 = (p->R + 1) / 2, slots = list_slots(p);
    size_t y_bytes = sizeof(uint16_t) * (size_t)(npanels * R2 * 2 * VNM_PANEL);
    uint16_t *dy2 = vn__mem_alloc(y_bytes);
    vn_tensor *own = dy2 && !lists ? vnm__bf16_lists(p, values) : NULL;
    if (!dy2 || (!lists && !own)) {
        if (dy2) vn__mem_free(dy2, y_bytes);
        return vn__err(VN_ERR_MEMORY, "vnm spmm_t: out of memory for %zu bytes of bf16 operands", y_bytes);
    }
    if (dyt)
        vnm__bf16_pair_rows(dyt, npanels, p->R, dy2);
    else
        vnm__bf16_pair_rows_of(dy, B, p->R, dy2);
    bf16_lists l = lists_in(p, lists ? lists : own);
    int64_t gchunk = vnm__bf16_t_chunk(p), nchunks = (p->G + gchunk - 1) / gchunk;
#pragma omp parallel for schedule(dynamic) if (B * p->R * p->G > VN_OMP_MIN_WORK)
    for (int64_t w = 0; w < npanels * nchunks; w++) {
        int64_t pn = w / nchunks, g0 = (w % nchunks) * gchunk;
        vnm__spmm_t_tile_bf16(p, l.tv, l.tp, l.tc, slots, dy2 + pn * R2 * 2 * VNM_PANEL, g0,
                              min64(p->G, g0 + gchunk), dxt + pn * p->xrows * VNM_PANEL);
    }
    vn__mem_free(dy2, y_bytes);
    vn_tensor_release(own);
    return VN_OK;
}

vn_status vnm__spmm_t(const vnm_pattern *p, const float *values, const float *dy, const float *dyt,
                      int64_t B, float *dxt, const vn_tensor *lists)
{
    const vnm_kernels *k = pick();
    if (vnm__dx_in_bf16(p)) return spmm_t_bf16(p, values, dy, dyt, B, dxt, lists);
    int64_t npanels = (B + VNM_PANEL - 1) / VNM_PANEL;
    size_t dyt_bytes = dyt ? 0 : sizeof(float) * (size_t)(npanels * p->R * VNM_PANEL);
    float *own = dyt ? NULL : vn__mem_alloc(dyt_bytes);
    if (!dyt && !own)
        return vn__err(VN_ERR_MEMORY, "vnm spmm_t: out of memory for %zu bytes", dyt_bytes);
    if (own) vnm__pack(dy, B, p->R, p->R, own, p->R);
    if (own) dyt = own;
    int64_t nvals = 2 * p->R * p->G;
    float *vt = vn__mem_alloc(sizeof(float) * (size_t)nvals);
    if (!vt) {
        if (own) vn__mem_free(own, dyt_bytes);
        return vn__err(VN_ERR_MEMORY, "vnm spmm_t: out of memory for %lld values", (long long)nvals);
    }
    /* The values in the order of the transposed pattern, read contiguously
     * by the kernel. */
#pragma omp parallel for schedule(static) if (nvals > VN_OMP_MIN_WORK)
    for (int64_t rb = 0; rb < p->nblocks; rb++)
        for (int64_t g = 0; g < p->G; g++) {
            int64_t e = (rb * p->G + g) * 4;
            for (int32_t i = p->t_start[e]; i < p->t_start[e + 4]; i++) {
                int32_t code = p->t_code[i];
                vt[i] = values[(int64_t)(code >> 1) * 2 * p->G + 2 * g + (code & 1)];
            }
        }
    /* A work item owns the rows of dXt of some groups in one batch panel:
     * about 64 rows (16 KiB), so they stay in L1 while every block of dY
     * adds into them. */
    int64_t gchunk = vnm__bf16_t_chunk(p), nchunks = (p->G + gchunk - 1) / gchunk;
#pragma omp parallel for schedule(dynamic) if (B * p->R * p->G > VN_OMP_MIN_WORK)
    for (int64_t w = 0; w < npanels * nchunks; w++) {
        int64_t pn = w / nchunks, g0 = (w % nchunks) * gchunk;
        k->spmm_t_tile(p, vt, dyt + pn * p->R * VNM_PANEL, g0, min64(p->G, g0 + gchunk),
                       dxt + pn * p->xrows * VNM_PANEL);
    }
    vn__mem_free(vt, sizeof(float) * (size_t)nvals);
    if (own) vn__mem_free(own, dyt_bytes);
    return VN_OK;
}

/* ---- dValues = (dYᵀ·X) at the kept positions ------------------------------------------------ */

/* Two ways to the same sums. By dot products (sddmm_tile): each row's kept
 * positions as VNM_VL dot products over the batch at once, reduced across
 * lanes at the end of every 4 panels; it reads each block's kept rows of Xt
 * 4 panels at a time. By rows (sddmm_rows): all 4 kept columns of a group
 * against a vector of rows of dY, twice the products but no reduction and
 * no per-row setup, which wins for small batches with AVX-512 (1.6× at a
 * batch of 128; see vnm_kernels_impl.h for AVX2); but it sweeps the block's kept columns of Xt over the whole batch,
 * and once Xt outgrows the caches, re-reading it block after block costs
 * more than the products (on a 32 MiB-L3 EPYC: even at 8 MiB of Xt, half
 * the speed at 32 MiB). */
#define SDDMM_ROWS_MAX_X_BYTES (8 << 20)
/* Bytes of Xt per slice of the batch in sddmm_by_rows, and the fewest rows
 * a slice has (each slice costs every work item a pass over its d4 sums). */
#define SDDMM_ROWS_SLICE_BYTES (2 << 20)
#define SDDMM_ROWS_MIN_SLICE 256
/* With a gradient's rows watched (DataParallel's row handover, internal.h)
 * or a progress hook set, an SDDMM of at least SDDMM_SLICE_WORK
 * multiply-adds runs over its row blocks in up to SDDMM_SLICES consecutive
 * slices, handing each slice's rows of dvalues over and giving MPI a turn
 * after it (as vn__sgemm does for a linear layer's dW). Each entry comes
 * from the same work item over the batch in the same order as in one pass:
 * the same bits. */
#define SDDMM_SLICES 8
#define SDDMM_SLICE_WORK (4.0 * 65536)

/* Both compute the row blocks [rb_lo, rb_hi) of dvalues. */
static vn_status sddmm_by_dots(const vnm_pattern *p, const vnm_kernels *k, const float *dyt,
                               const float *xt, int64_t B, int64_t rb_lo, int64_t rb_hi,
                               float *dvalues)
{
    int64_t npanels = (B + VNM_PANEL - 1) / VNM_PANEL;
    int64_t gchunk = k->dots / 2, nchunks = (p->G + gchunk - 1) / gchunk;
    size_t xoff_bytes = sizeof(int32_t) * (size_t)(min64(p->V, p->R) * k->dots);
    bool oom = false;
#pragma omp parallel reduction(|| : oom) if (B * (rb_hi - rb_lo) * p->V * p->G > VN_OMP_MIN_WORK)
    {
        int32_t *xoff = vn__mem_alloc(xoff_bytes);
        oom = !xoff;
#pragma omp for schedule(dynamic)
        for (int64_t w = 0; w < (rb_hi - rb_lo) * nchunks; w++) {
            int64_t rb = rb_lo + w / nchunks, g0 = (w % nchunks) * gchunk;
            if (xoff) k->sddmm_tile(p, dyt, xt, npanels, rb, g0, min64(gchunk, p->G - g0), xoff, dvalues);
        }
        if (xoff) vn__mem_free(xoff, xoff_bytes);
    }
    return oom ? vn__err(VN_ERR_MEMORY, "vnm sddmm: out of memory for %zu bytes of scratch", xoff_bytes)
               : VN_OK;
}

static vn_status sddmm_by_rows(const vnm_pattern *p, const vnm_kernels *k, const float *dy,
                               const float *xt, int64_t B, int64_t rb_lo, int64_t rb_hi,
                               float *dvalues)
{
    int64_t Vp = (min64(p->V, p->R) + 15) / 16 * 16, nb = rb_hi - rb_lo;
    /* Groups per work item: their sums, 4·Vp floats each, stay in L2. */
    int64_t gchunk = min64(p->G, (256 * 1024) / (16 * Vp) + 1), nchunks = (p->G + gchunk - 1) / gchunk;
    size_t dyp_bytes = sizeof(float) * (size_t)(B * nb * Vp);
    size_t d4_bytes = sizeof(float) * (size_t)(4 * Vp * gchunk);
    float *dyp = vn__mem_alloc(dyp_bytes);
    if (!dyp) return vn__err(VN_ERR_MEMORY, "vnm sddmm: out of memory for %zu bytes", dyp_bytes);
    /* dY block by block (B × Vp each, rows padded to Vp): a block's slice
     * is contiguous, and every vector load is whole. */
#pragma omp parallel for schedule(static) if (B * nb * p->V > VN_OMP_MIN_WORK)
    for (int64_t rb = rb_lo; rb < rb_hi; rb++)
        for (int64_t b = 0; b < B; b++) {
            int64_t rows = min64(p->V, p->R - rb * p->V);
            float *d = dyp + ((rb - rb_lo) * B + b) * Vp;
            memcpy(d, dy + b * p->R + rb * p->V, sizeof(float) * (size_t)rows);
            memset(d + rows, 0, sizeof(float) * (size_t)(Vp - rows));
        }
    /* The batch in slices whose part of Xt (about SDDMM_ROWS_SLICE_BYTES)
     * stays in the caches while every block reads its kept columns of it
     * (one sweep of the whole batch per block fetched those columns from L3
     * or memory again for every block: 1.1–1.2× dense on 4096×1024, batch
     * 2048, against 1.5–1.7× in slices, same loaded session). Each slice's
     * sums are added to dvalues (the end of each `omp for` is a barrier, so
     * no two slices touch an entry at once). */
    int64_t slice = SDDMM_ROWS_SLICE_BYTES / (p->Kp * (int64_t)sizeof(float)) / VNM_PANEL * VNM_PANEL;
    if (slice < SDDMM_ROWS_MIN_SLICE) slice = SDDMM_ROWS_MIN_SLICE;
    bool oom = false;
#pragma omp parallel reduction(|| : oom) if (B * nb * p->V * p->G > VN_OMP_MIN_WORK)
    {
        float *d4 = vn__mem_alloc(d4_bytes);
        oom = !d4;
        for (int64_t b_lo = 0; b_lo < B; b_lo += slice) {
#pragma omp for schedule(dynamic)
            for (int64_t w = 0; w < nb * nchunks; w++) {
                int64_t rb = rb_lo + w / nchunks, g0 = w % nchunks * gchunk;
                if (d4)
                    k->sddmm_rows(p, dyp + (rb - rb_lo) * B * Vp, Vp, xt, b_lo, min64(B, b_lo + slice), rb, g0,
                                  min64(p->G, g0 + gchunk), b_lo > 0, d4, dvalues);
            }
        }
        if (d4) vn__mem_free(d4, d4_bytes);
    }
    vn__mem_free(dyp, dyp_bytes);
    return oom ? vn__err(VN_ERR_MEMORY, "vnm sddmm: out of memory for %zu bytes of scratch", d4_bytes)
               : VN_OK;
}

vn_status vnm__sddmm(const vnm_pattern *p, const float *dy, const float *dyt, const float *xt,
                     int64_t B, float *dvalues)
{
    const vnm_kernels *k = pick();
    if (B == 0) {
        memset(dvalues, 0, sizeof(float) * (size_t)(2 * p->R * p->G));
        return VN_OK;
    }
    /* bf16 as in vnm__spmm (vnm_bf16_sddmm.c): dY and X in bf16 first */
    bool bf16 = precision == VN_VNM_BF16 && k != &generic;
    vnm_sddmm_bf16 o = {0};
    if (bf16 && vnm__sddmm_bf16_prepare(p, dy, dyt, xt, B, &o)) return VN_ERR_MEMORY;
    bool by_rows = dy && k->sddmm_rows && (double)B * (double)p->Kp * sizeof(float) <= SDDMM_ROWS_MAX_X_BYTES;
    size_t bytes = 0;
    float *packed = NULL;
    if (!bf16 && !by_rows && !dyt) {
        bytes = sizeof(float) * (size_t)((B + VNM_PANEL - 1) / VNM_PANEL * p->R * VNM_PANEL);
        if (!(packed = vn__mem_alloc(bytes)))
            return vn__err(VN_ERR_MEMORY, "vnm sddmm: out of memory for %zu bytes", bytes);
        vnm__pack(dy, B, p->R, p->R, packed, p->R);
        dyt = packed;
    }
    bool watched = vn__grad_rows_watching();
    int64_t slices = 1;
    if ((watched || vn__progress_fn) && (double)B * (double)p->R * 2.0 * (double)p->G >= SDDMM_SLICE_WORK)
        slices = min64(p->nblocks, SDDMM_SLICES);
    vn_status st = VN_OK;
    for (int64_t s = 0; s < slices && !st; s++) {
        int64_t lo = p->nblocks * s / slices, hi = p->nblocks * (s + 1) / slices;
        st = bf16      ? vnm__sddmm_bf16(p, &o, lo, hi, dvalues)
             : by_rows ? sddmm_by_rows(p, k, dy, xt, B, lo, hi, dvalues)
                       : sddmm_by_dots(p, k, dyt, xt, B, lo, hi, dvalues);
        if (!st && watched) vn__grad_rows_done(lo * p->V, min64(hi * p->V, p->R));
        if (slices > 1) vn__progress();
    }
    if (packed) vn__mem_free(packed, bytes);
    vnm__sddmm_bf16_free(&o);
    return st;
}
