/* The host emulator of the V:N:M Sparse Tensor Core kernels
 * (kernels/vnm_sptc.cu: k_spmm, k_dx, k_sddmm; kernels/vnm_densify.cu:
 * k_densify, the dense W of the cuBLAS dX path). It replays each
 * kernel's exact tile schedule on the CPU, CTA by CTA, through the same
 * index functions the kernel calls (kernels/vnm_sptc_index.h): the copies
 * thread by thread into a model of shared memory (poisoned first, bounds
 * checked), ldmatrix with the addresses each lane gives, mma.sp and mma with
 * the fragments each lane holds, and the epilogue's writes (for k_dx, that
 * one warp alone writes each element of its shared f32 tile). The instructions
 * themselves are software models (tests/c/sptc_emu.h) written from the PTX
 * ISA's definitions ("Matrix Fragments for sparse mma.m16n8k32 with .f16
 * and .bf16 types", "Sparse matrix storage", "Matrix Fragments for
 * mma.m16n8k16", "ldmatrix"), not from the kernels' helpers, so a
 * disagreement between a helper and the ISA shows up as a wrong result. The result is compared
 * with the CPU V:N:M kernel on the same bf16/f16-rounded operands, for every
 * (V, M) in {16, 32, 64, 128} × {4, 5, 8, 16, 32}, rows, columns and
 * batches that fill no block, group or tile.
 *
 * What a GPU run still has to prove: that the hardware follows the ISA as
 * modelled here (and its speed). */
#include "gradcheck.h"
#include "scalar.h"
#include "sptc_check.h"
#include "sptc_emu.h"
#include "vnm_random.h"
#include "vnm_sptc.h"
#include "vnm_sptc_index.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- k_spmm replayed ---------------------------------------------------------------- */

/* fwd_load_stage of the kernel, thread by thread. */
static void emu_fwd_load_stage(emu_smem *s, size_t base, const spmm_args *g, const int32_t *gk,
                               int64_t r0, int64_t n0, int64_t kt, int BM)
{
    const vnm_sptc *p = g->p;
    const int BN = VNM_FWD_BN(BM);
    size_t vs = base + 2 * (size_t)vnm_fwd_xs_elems(BM), ms = vs + 2 * (size_t)vnm_fwd_vs_elems(BM);
    const uint16_t *xend = g->xt + p->K * g->ldx;
    size_t ntiles = (size_t)(p->row_tiles * p->k_tiles);
    for (int tid = 0; tid < VNM_FWD_THREADS; tid++)
        for (int q = tid; q < vnm_fwd_copies(BM); q += VNM_FWD_THREADS) {
            vnm_copy c = vnm_fwd_copy(q, BM);
            if (c.kind == VNM_COPY_X) {
                int32_t col = gk[c.row];
                int64_t n = n0 + c.piece;
                bool valid = col >= 0 && n < g->B;
                if (col >= p->K) fail_msg("gather entry %d beyond K=%lld", col, (long long)p->K);
                cp_async16(s, base + 2 * (size_t)vnm_fwd_xs_at(c.row, c.piece, BN),
                           valid ? g->xt + col * g->ldx + n : g->xt, valid, g->xt, xend);
                continue;
            }
            if (r0 / 16 + c.row >= p->row_tiles) continue;
            int64_t t = vnm_tile(r0, c.row, kt, p->k_tiles);
            if (c.kind == VNM_COPY_A)
                cp_async16(s, vs + 2 * (size_t)(c.row * 256 + c.piece * 8),
                           p->values + t * 256 + c.piece * 8, true, p->values, p->values + ntiles * 256);
            else
                cp_async16(s, ms + 4 * (size_t)(c.row * 16 + c.piece * 4), p->meta + t * 16 + c.piece * 4,
                           true, p->meta, p->meta + ntiles * 16);
        }
}

/* k_spmm<BM> over its whole grid. */
static void emu_spmm(const spmm_args *g)
{
    const vnm_sptc *p = g->p;
    const int BM = vnm_fwd_bm(p->V), BN = VNM_FWD_BN(BM), MT = VNM_FWD_MT(BM), NT = VNM_FWD_NT;
    const size_t SB = (size_t)vnm_fwd_stage_bytes(BM);
    const int64_t gbytes = vnm_fwd_gather_bytes(p->k_tiles), ccols = p->k_tiles * 32;
    emu_smem s = {.n = VNM_FWD_STAGES * SB + (size_t)gbytes};
    s.b = malloc(s.n);
    float(*acc)[32][4] = malloc(sizeof *acc * 8 * MT * NT); /* [warp][mi][j] */
    uint32_t(*bf)[32][4] = malloc(sizeof *bf * NT);
    assert_non_null(s.b);
    int64_t gx = (p->row_tiles * 16 + BM - 1) / BM, gy = (g->B + BN - 1) / BN;
    for (int64_t bx = 0; bx < gx; bx++)
        for (int64_t by = 0; by < gy; by++) {
            memset(s.b, 0xff, s.n);
            memset(acc, 0, sizeof *acc * 8 * MT * NT);
            int64_t r0 = vnm_fwd_row0(bx, BM), n0 = vnm_fwd_batch0(by, BM);
            const int32_t *gather = p->gather + r0 / p->V * ccols;
            if (gbytes) { /* the kernel's 16-byte copies of the gather row */
                size_t gs = VNM_FWD_STAGES * SB;
                for (int64_t q = 0; q < ccols / 4; q++)
                    cp_async16(&s, gs + 16 * (size_t)q, gather + 4 * q, true, p->gather,
                               p->gather + p->nblocks * ccols);
                gather = (const int32_t *)(s.b + gs);
            }
            for (int st = 0; st < VNM_FWD_STAGES - 1; st++)
                if (st < p->k_tiles) emu_fwd_load_stage(&s, st * SB, g, gather + st * 32, r0, n0, st, BM);
            for (int64_t kt = 0; kt < p->k_tiles; kt++) {
                int64_t next = kt + VNM_FWD_STAGES - 1; /* issued before the compute, as on the GPU */
                if (next < p->k_tiles)
                    emu_fwd_load_stage(&s, vnm_fwd_slot(next) * SB, g, gather + next * 32, r0, n0,
                                       next, BM);
                size_t st = vnm_fwd_slot(kt) * SB, vs = st + 2 * (size_t)vnm_fwd_xs_elems(BM);
                size_t ms = vs + 2 * (size_t)vnm_fwd_vs_elems(BM);
                for (int warp = 0; warp < 8; warp++) {
                    for (int j = 0; j < NT; j++) {
                        size_t addr[32];
                        for (int l = 0; l < 32; l++) addr[l] = st + 2 * (size_t)vnm_fwd_ldm_at(l, warp, j, BM);
                        sw_ldmatrix_x4(&s, addr, bf[j], true);
                    }
                    int wr = vnm_fwd_warp_row(warp, BM);
                    int64_t left = p->row_tiles - (r0 + wr) / 16;
                    for (int mi = 0; mi < MT && mi < left; mi++) {
                        int m = wr / 16 + mi;
                        uint32_t a[32][4], e[32];
                        for (int l = 0; l < 32; l++) {
                            memcpy(a[l], smem_at(&s, vs + 2 * (size_t)(m * 256 + vnm_a_value(l, 0, 0)), 16, "A"), 16);
                            memcpy(&e[l], smem_at(&s, ms + 4 * (size_t)(m * 16 + vnm_meta_word_lane(l)), 4, "E"), 4);
                        }
                        for (int j = 0; j < NT; j++) sw_mma_sp(acc[(warp * MT + mi) * NT + j], a, bf[j], e, p->dtype);
                    }
                }
            }
            for (int warp = 0; warp < 8; warp++) {
                int64_t left = p->row_tiles - (r0 + vnm_fwd_warp_row(warp, BM)) / 16;
                for (int mi = 0; mi < MT && mi < left; mi++)
                    for (int j = 0; j < NT; j++)
                        for (int l = 0; l < 32; l++)
                            for (int i = 0; i < 4; i++) {
                                int64_t r = r0 + vnm_fwd_out_row(l, warp, mi, i, BM);
                                int64_t n = n0 + vnm_fwd_out_batch(l, warp, j, i, BM);
                                if (r < p->R && n < g->B)
                                    g->y[n * p->R + r] = acc[(warp * MT + mi) * NT + j][l][i] +
                                                         (g->bias ? g->bias[r] : 0.0f);
                            }
            }
        }
    free(bf);
    free(acc);
    free(s.b);
}

/* ---- shared by k_dx and k_sddmm replayed ----------------------------------------------- */

/* copy_dy8 of the kernels: 8 b16 of dY's row n from column r to shared
 * offset dst, by cp.async when aligned, else element by element. */
static void emu_copy_dy8(emu_smem *s, size_t dst, const uint16_t *dy, int64_t R, int64_t B,
                         bool aligned, int64_t n, int64_t r)
{
    if (aligned) {
        bool valid = n < B && r < R;
        cp_async16(s, dst, valid ? dy + n * R + r : dy, valid, dy, dy + B * R);
        return;
    }
    if (dst % 16) fail_msg("copy_dy8: shared offset %zu not 16-byte aligned", dst);
    uint16_t *d = smem_at(s, dst, 16, "copy_dy8");
    for (int e = 0; e < 8; e++) d[e] = n < B && r + e < R ? dy[n * R + r + e] : 0;
}

/* Checks that one warp alone writes each element of a CTA's f32 tile, the
 * reason the kernel needs no atomics and no barrier between flushes. */
typedef struct {
    int *warp; /* the element's writer, −1 before the first write */
    int64_t n;
} owner_check;

static void owned_write(owner_check *oc, int64_t i, int warp)
{
    if (i < 0 || i >= oc->n) fail_msg("accs: element %lld outside %lld", (long long)i, (long long)oc->n);
    if (oc->warp[i] >= 0 && oc->warp[i] != warp)
        fail_msg("accs[%lld]: written by warps %d and %d", (long long)i, oc->warp[i], warp);
    oc->warp[i] = warp;
}

static uint16_t smem_u16(const emu_smem *s, size_t off) { return *(const uint16_t *)smem_at(s, off, 2, "b16"); }
static uint32_t smem_u32(const emu_smem *s, size_t off) { return *(const uint32_t *)smem_at(s, off, 4, "b32"); }

/* ---- k_dx replayed -------------------------------------------------------------------- */

/* dx_w of the kernel: W[r][c] of the packed tile staged at byte offsets vs,
 * ms, as a b16 (0 where row r does not keep column c). */
static uint32_t emu_dx_w(const emu_smem *s, size_t vs, size_t ms, int r, int c)
{
    uint32_t words[16];
    for (int k = 0; k < 16; k++) words[k] = smem_u32(s, ms + 4 * (size_t)k);
    int v = vnm_dx_b_value(r, c, vnm_meta_nibble(words, r, c >> 2));
    return v >= 0 ? smem_u16(s, vs + 2 * (size_t)v) : 0u;
}

/* dx_load_stage of the kernel, thread by thread: row tile rt into ring slot. */
typedef struct {
    const vnm_sptc *p;
    const uint16_t *dy;
    int64_t B;
    bool aligned;
    int64_t n0, kt0;
    size_t ring;
    int SB, BN, KT;
} dx_ctx;

static void emu_dx_load_stage(emu_smem *s, const dx_ctx *x, int slot, int64_t rt)
{
    const vnm_sptc *p = x->p;
    const int64_t ntiles = p->row_tiles * p->k_tiles;
    const size_t st = x->ring + (size_t)slot * x->SB;
    for (int q = 0; q < vnm_dx_copies(x->BN, x->KT); q++) {
        vnm_copy c = vnm_dx_copy(q, x->BN);
        if (c.kind == VNM_COPY_X) {
            emu_copy_dy8(s, st + 2 * (size_t)vnm_dx_dys_at(c.row, c.piece), x->dy, p->R, x->B, x->aligned,
                         x->n0 + c.row, rt * 16 + c.piece);
            continue;
        }
        int64_t kt = x->kt0 + c.row, t = rt * p->k_tiles + kt;
        bool in = kt < p->k_tiles;
        if (c.kind == VNM_COPY_A)
            cp_async16(s, st + (size_t)vnm_dx_vs_at(x->BN, c.row) + 16 * (size_t)c.piece,
                       in ? p->values + t * 256 + 8 * c.piece : p->values, in, p->values,
                       p->values + ntiles * 256);
        else
            cp_async16(s, st + (size_t)vnm_dx_ms_at(x->BN, x->KT, c.row) + 16 * (size_t)c.piece,
                       in ? p->meta + t * 16 + 4 * c.piece : p->meta, in, p->meta, p->meta + ntiles * 16);
    }
}

/* k_dx<BN, KT> over its whole grid: dx (B × K) = dY (B × R, 16-bit) · W. */
static void emu_dx(const vnm_sptc *p, const uint16_t *dy, int64_t B, float *dx)
{
    int BN = 16, KT = 1;
    assert_true(vnm_dx_config(p->M, &BN, &KT));
    const int MTB = BN / 16, SB = vnm_dx_stage_bytes(BN, KT), S = VNM_DX_STAGES;
    const int64_t ld = vnm_dx_ld(p->M, KT), span = (int64_t)KT * 8 * p->M, ccols = p->k_tiles * 32;
    const int64_t rows = p->row_tiles;
    const bool aligned = vnm_dy_aligned(p->R, (uintptr_t)dy);
    const size_t ring = (size_t)BN * (size_t)ld * 4;
    const uint16_t EXP = p->dtype == VN_BF16 ? 0x7f80 : 0x7c00;
    emu_smem s = {.n = (size_t)vnm_dx_smem(p->M, BN, KT)};
    s.b = malloc(s.n);
    owner_check oc = {.n = BN * ld};
    oc.warp = malloc((size_t)oc.n * sizeof *oc.warp);
    float(*d)[32][4] = malloc(sizeof *d * 4 * MTB * KT); /* [warp][m][j] */
    uint32_t(*a)[32][4] = malloc(sizeof *a * MTB);
    assert_true(s.b && oc.warp && d && a);
    assert_true(ring % 16 == 0);
    float *accs = (float *)s.b;
    for (int64_t bx = 0; bx < (p->k_tiles + KT - 1) / KT; bx++)
        for (int64_t by = 0; by < (B + BN - 1) / BN; by++) {
            const int64_t kt0 = bx * KT, n0 = by * BN, col0 = kt0 * 8 * p->M;
            memset(s.b, 0xff, s.n);
            memset(d, 0, sizeof *d * 4 * MTB * KT);
            for (int64_t q = 0; q < oc.n; q++) oc.warp[q] = -1;
            for (int64_t q = 0; q < BN * ld; q++) accs[q] = 0;
            /* dx_load_stage, thread by thread */
            dx_ctx cx = {p, dy, B, aligned, n0, kt0, ring, SB, BN, KT};
            for (int k = 0; k < S - 1; k++)
                if (k < rows) emu_dx_load_stage(&s, &cx, k, k);
            for (int64_t rt = 0; rt < rows; rt++) {
                const int64_t next = rt + S - 1;
                if (next < rows) emu_dx_load_stage(&s, &cx, (int)(next % S), next);
                const size_t st = ring + (size_t)(rt % S) * SB;
                for (int warp = 0; warp < 4; warp++) {
                    bool bad = false;
                    for (int m = 0; m < MTB; m++) {
                        size_t addr[32];
                        for (int l = 0; l < 32; l++)
                            addr[l] = st + 2 * (size_t)vnm_dx_dys_at(16 * m + vnm_ldm_a_row(l), vnm_ldm_a_k(l));
                        sw_ldmatrix_x4(&s, addr, a[m], false);
                        for (int l = 0; l < 32; l++)
                            for (int i = 0; i < 4; i++)
                                for (int h = 0; h < 2; h++)
                                    bad |= ((a[m][l][i] >> (16 * h)) & EXP) == EXP;
                    }
                    if (bad) { /* dx_kept_only */
                        const int32_t *gather = p->gather + rt * 16 / p->V * ccols;
                        for (int j = 0; j < KT; j++) {
                            size_t vs = st + (size_t)vnm_dx_vs_at(BN, j), ms = st + (size_t)vnm_dx_ms_at(BN, KT, j);
                            for (int l = 0; l < 32; l++)
                                for (int e = 0; e < MTB * 4; e++) {
                                    int n = 16 * (e / 4) + vnm_c_row(l, e % 4), c = 8 * warp + vnm_c_col(l, e % 4);
                                    int64_t cc = (kt0 + j) * 32 + c;
                                    int32_t col = cc < ccols ? gather[cc] : -1;
                                    if (col < 0) continue;
                                    uint32_t words[16];
                                    for (int k = 0; k < 16; k++) words[k] = smem_u32(&s, ms + 4 * (size_t)k);
                                    float sum = 0;
                                    for (int r = 0; r < 16; r++) /* kept weights only */
                                        if (vnm_dx_b_value(r, c, vnm_meta_nibble(words, r, c >> 2)) >= 0)
                                            sum += half_to_f32(smem_u16(&s, st + 2 * (size_t)vnm_dx_dys_at(n, r)), p->dtype) *
                                                   half_to_f32((uint16_t)emu_dx_w(&s, vs, ms, r, c), p->dtype);
                                    int64_t at = n * ld + (col - col0);
                                    owned_write(&oc, at, warp);
                                    accs[at] += sum;
                                }
                        }
                    } else {
                        for (int j = 0; j < KT; j++) {
                            size_t vs = st + (size_t)vnm_dx_vs_at(BN, j), ms = st + (size_t)vnm_dx_ms_at(BN, KT, j);
                            uint32_t b[32][2];
                            for (int l = 0; l < 32; l++) {
                                int c = vnm_dx_col(l, warp);
                                for (int i = 0; i < 2; i++)
                                    b[l][i] = emu_dx_w(&s, vs, ms, vnm_dx_b_row(l, i, 0), c) |
                                              emu_dx_w(&s, vs, ms, vnm_dx_b_row(l, i, 1), c) << 16;
                            }
                            for (int m = 0; m < MTB; m++) sw_mma16(d[(warp * MTB + m) * KT + j], a[m], b, p->dtype);
                        }
                    }
                    if ((rt + 1) * 16 % p->V == 0 || rt + 1 == rows) { /* dx_flush */
                        const int32_t *gather = p->gather + rt * 16 / p->V * ccols;
                        for (int m = 0; m < MTB; m++)
                            for (int j = 0; j < KT; j++)
                                for (int l = 0; l < 32; l++)
                                    for (int i = 0; i < 4; i++) {
                                        int64_t cc = (kt0 + j) * 32 + 8 * warp + vnm_c_col(l, i);
                                        int32_t col = cc < ccols ? gather[cc] : -1;
                                        float *dv = &d[(warp * MTB + m) * KT + j][l][i];
                                        if (col >= 0) {
                                            int64_t at = (16 * m + vnm_c_row(l, i)) * ld + (col - col0);
                                            owned_write(&oc, at, warp);
                                            accs[at] += *dv;
                                        }
                                        *dv = 0;
                                    }
                    }
                }
            }
            for (int64_t q = 0; q < BN * span; q++) {
                int64_t n = q / span, x = q % span;
                if (n0 + n < B && col0 + x < p->K) dx[(n0 + n) * p->K + col0 + x] = accs[n * ld + x];
            }
        }
    free(a);
    free(d);
    free(oc.warp);
    free(s.b);
}

/* ---- k_sddmm replayed ------------------------------------------------------------------ */

/* sd_load_stage of the kernel, thread by thread: batch rows n0.. into ring slot. */
typedef struct {
    const vnm_sptc *p;
    const uint16_t *dy;
    bool aligned;
    const uint16_t *xt;
    int64_t ldx, B;
    const int32_t *gs;
    int64_t r0;
    size_t SB;
    int MT;
} sd_ctx;

static void emu_sd_load_stage(emu_smem *s, const sd_ctx *x, int slot, int64_t n0)
{
    const vnm_sptc *p = x->p;
    const size_t st = (size_t)slot * x->SB;
    for (int q = 0; q < vnm_sd_copies(x->MT); q++) {
        vnm_copy c = vnm_sd_copy(q, x->MT);
        if (c.kind == VNM_COPY_A) {
            emu_copy_dy8(s, st + 2 * (size_t)vnm_sd_dys_at(c.row, c.piece, x->MT), x->dy, p->R, x->B,
                         x->aligned, n0 + c.row, x->r0 + c.piece);
        } else {
            int32_t col = x->gs[c.row];
            int64_t n = n0 + c.piece;
            bool valid = col >= 0 && n < x->B;
            cp_async16(s, st + 2 * (size_t)(vnm_sd_dys_elems(x->MT) + vnm_sd_xs_at(c.row, c.piece)),
                       valid ? x->xt + col * x->ldx + n : x->xt, valid, x->xt, x->xt + p->K * x->ldx);
        }
    }
}

/* k_sddmm<MT> over its whole grid: dv (R × 2G) = dYᵀ·X at the kept positions. */
static void emu_sddmm(const vnm_sptc *p, const uint16_t *dy, const uint16_t *xt, int64_t ldx,
                      int64_t B, float *dv)
{
    const int MT = vnm_sddmm_mt(p->V), S = VNM_SD_STAGES, CH = VNM_SD_CHUNK;
    const int MW = VNM_SD_WM(MT) / 16, NW = VNM_SD_WN(MT) / 8;
    const size_t SB = 2 * (size_t)vnm_sd_stage_elems(MT);
    const int64_t ccols = p->k_tiles * 32, chunks = (B + CH - 1) / CH;
    const bool aligned = vnm_dy_aligned(p->R, (uintptr_t)dy);
    emu_smem s = {.n = S * SB};
    s.b = malloc(s.n);
    float(*acc)[32][4] = malloc(sizeof *acc * 4 * MW * NW); /* [warp][mi][j] */
    assert_true(s.b && acc);
    int32_t gs[VNM_SD_BC];
    for (int64_t bx = 0; bx < (p->row_tiles + MT - 1) / MT; bx++)
        for (int64_t by = 0; by < (p->k_tiles + VNM_SD_KT - 1) / VNM_SD_KT; by++) {
            const int64_t rt0 = bx * MT, r0 = rt0 * 16, kt0 = by * VNM_SD_KT;
            const int32_t *gather = p->gather + r0 / p->V * ccols;
            memset(s.b, 0xff, s.n);
            memset(acc, 0, sizeof *acc * 4 * MW * NW);
            for (int q = 0; q < VNM_SD_BC; q++) {
                int64_t cc = kt0 * 32 + q;
                gs[q] = cc < ccols ? gather[cc] : -1;
                if (gs[q] >= p->K) fail_msg("gather entry %d beyond K=%lld", gs[q], (long long)p->K);
            }
            sd_ctx cx = {p, dy, aligned, xt, ldx, B, gs, r0, SB, MT};
            for (int k = 0; k < S - 1; k++)
                if (k < chunks) emu_sd_load_stage(&s, &cx, k, (int64_t)k * CH);
            for (int64_t ch = 0; ch < chunks; ch++) {
                const int64_t next = ch + S - 1;
                if (next < chunks) emu_sd_load_stage(&s, &cx, (int)(next % S), next * CH);
                const size_t dys = (size_t)(ch % S) * SB, xs = dys + 2 * (size_t)vnm_sd_dys_elems(MT);
                for (int warp = 0; warp < 4; warp++) {
                    const int wr = vnm_sd_warp_row(warp, MT), wc = vnm_sd_warp_col(warp, MT);
                    for (int kk = 0; kk < CH; kk += 16) {
                        uint32_t a[4][32][4], b[4][32][4];
                        size_t addr[32];
                        for (int mi = 0; mi < MW; mi++) {
                            for (int l = 0; l < 32; l++)
                                addr[l] = dys + 2 * (size_t)vnm_sd_dys_at(kk + vnm_ldm_at_k(l),
                                                                          wr + 16 * mi + vnm_ldm_at_row(l), MT);
                            sw_ldmatrix_x4(&s, addr, a[mi], true);
                        }
                        for (int q = 0; q < NW / 2; q++) {
                            for (int l = 0; l < 32; l++)
                                addr[l] = xs + 2 * (size_t)vnm_sd_xs_at(wc + 16 * q + vnm_ldm_b_n(l), kk + vnm_ldm_b_k(l));
                            sw_ldmatrix_x4(&s, addr, b[q], false);
                        }
                        for (int mi = 0; mi < MW; mi++)
                            for (int j = 0; j < NW; j++) {
                                uint32_t bb[32][2];
                                for (int l = 0; l < 32; l++)
                                    bb[l][0] = b[j / 2][l][2 * (j & 1)], bb[l][1] = b[j / 2][l][2 * (j & 1) + 1];
                                sw_mma16(acc[(warp * MW + mi) * NW + j], a[mi], bb, p->dtype);
                            }
                    }
                }
            }
            for (int warp = 0; warp < 4; warp++)
                for (int mi = 0; mi < MW; mi++)
                    for (int j = 0; j < NW; j++)
                        for (int l = 0; l < 32; l++)
                            for (int i = 0; i < 4; i++) {
                                int rr = vnm_sd_warp_row(warp, MT) + 16 * mi + vnm_c_row(l, i);
                                int c = vnm_sd_warp_col(warp, MT) + 8 * j + vnm_c_col(l, i);
                                int64_t r = r0 + rr, kt = kt0 + c / 32, g = kt * 8 + (c % 32) / 4;
                                if (r >= p->R || g >= p->G) continue;
                                unsigned nib = vnm_meta_nibble(p->meta + ((rt0 + rr / 16) * p->k_tiles + kt) * 16,
                                                               rr % 16, (c % 32) / 4);
                                float v = gs[c] >= 0 ? acc[(warp * MW + mi) * NW + j][l][i] : 0.0f;
                                if ((int)(nib & 3) == (c & 3)) dv[r * 2 * p->G + 2 * g] = v;
                                if ((int)(nib >> 2) == (c & 3)) dv[r * 2 * p->G + 2 * g + 1] = v;
                            }
        }
    free(acc);
    free(s.b);
}

/* ---- the comparison ------------------------------------------------------------------- */

/* The emulated forward against the CPU kernel (sptc_check.h). */
static void check_spmm(int64_t R, int64_t K, int64_t V, int64_t M, int64_t B, vn_dtype dt,
                       uint32_t seed)
{
    check_spmm_with(emu_spmm, R, K, V, M, B, dt, seed);
}

static void test_spmm_all_layouts(void **state)
{
    static const int64_t Vs[] = {16, 32, 64, 128}, Ms[] = {4, 5, 8, 16, 32};
    for (size_t iv = 0; iv < 4; iv++)
        for (size_t im = 0; im < 5; im++) {
            int64_t V = Vs[iv], M = Ms[im];
            /* rows: a partial block and tile; K: 25 groups (4 k-tiles, so the
             * 3-stage ring wraps) with a partial last group; a batch that
             * fills no tile (and no 8-row piece) */
            check_spmm(V + 23, 24 * M + 3, V, M, 203, VN_BF16, (uint32_t)(100 * iv + im + 1));
        }
}

/* One k-tile and one batch row; f16; the gather row too long for shared
 * memory (read from global); several blocks per CTA row range. */
static void test_spmm_edges(void **state)
{
    check_spmm(5, 4, 16, 4, 1, VN_BF16, 11);
    check_spmm(70, 100, 32, 8, 37, VN_F16, 12);
    check_spmm(20, 4 * 2060, 16, 4, 9, VN_BF16, 13); /* 258 k-tiles: 33 KB of gather */
    check_spmm(300, 64, 48, 8, 520, VN_BF16, 14);    /* V = 48: BM = 16, three CTAs per block */
}

/* One dX case: a V:N:M matrix, its values and a dY, each also rounded to
 * dt (the bound's operands), dY's element inf_at set to `big`, and the
 * packed form. */
typedef struct {
    int64_t R, V, M;
    vn_vnm *s;
    vn_tensor *vals, *avals, *dy, *ady;
    float *dyv;
    vnm_sptc *p;
} dx_case;

static dx_case dx_case_new(int64_t R, int64_t K, int64_t V, int64_t M, int64_t B, vn_dtype dt,
                           uint32_t seed, int64_t inf_at, float big)
{
    dx_case c = {.R = R, .V = V, .M = M};
    c.s = test_matrix(R, K, V, M, seed);
    c.vals = vn_vnm_values(c.s);
    c.avals = round_in_place(c.vals, dt, true);
    c.dy = trand(2, (int64_t[]){B, R}, -2, 2, seed + 3);
    c.ady = round_in_place(c.dy, dt, true);
    c.dyv = vn_tensor_data(c.dy);
    if (inf_at >= 0) c.dyv[inf_at] = big;
    c.p = vnm_sptc_pack(c.s, dt);
    CHECK_PTR(c.p);
    return c;
}

static void dx_case_free(dx_case *c)
{
    vnm_sptc_free(c->p);
    vn_tensor *ts[] = {c->vals, c->avals, c->dy, c->ady};
    gc_release_all(ts, sizeof ts / sizeof ts[0]);
    vn_vnm_free(c->s);
}

/* dx (B × K) against the CPU's vn_vnm_spmm_t: within 1e-5 of the bound
 * |W|·|dY| where the CPU is finite, the same Inf or NaN where it is not.
 * Returns how many of the CPU's values are not finite. */
static int64_t dx_against_cpu(const dx_case *c, const float *dx, int64_t B, int64_t K, vn_dtype dt,
                              const char *what)
{
    vn_tensor *want = vn_vnm_spmm_t(c->s, c->vals, c->dy), *bound = vn_vnm_spmm_t(c->s, c->avals, c->ady);
    CHECK_PTR(want);
    CHECK_PTR(bound);
    const float *w = vn_tensor_data(want), *bd = vn_tensor_data(bound);
    int64_t nonfinite = 0;
    for (int64_t i = 0; i < B * K; i++) {
        bool ok = isfinite(w[i]) ? fabsf(dx[i] - w[i]) <= 1e-5f * bd[i] + 1e-30f
                                 : (isnan(w[i]) ? isnan(dx[i]) : dx[i] == w[i]);
        nonfinite += !isfinite(w[i]);
        if (!ok)
            fail_msg("R=%lld K=%lld V=%lld M=%lld B=%lld %s: %s[%lld][%lld] = %g, CPU %g",
                     (long long)c->R, (long long)K, (long long)c->V, (long long)c->M, (long long)B,
                     vn_dtype_name(dt), what, (long long)(i / K), (long long)(i % K), (double)dx[i],
                     (double)w[i]);
    }
    vn_tensor_release(want);
    vn_tensor_release(bound);
    return nonfinite;
}

/* The emulated dX against vn_vnm_spmm_t on the CPU with the same rounded
 * operands (bound as for check_spmm). With inf_at ≥ 0, that element of dY
 * is +Inf: where the CPU's dX is finite the emulator's must be close, and
 * where the CPU has Inf or NaN the emulator must have the same. */
static void check_spmm_t(int64_t R, int64_t K, int64_t V, int64_t M, int64_t B, vn_dtype dt,
                         uint32_t seed, int64_t inf_at)
{
    dx_case c = dx_case_new(R, K, V, M, B, dt, seed, inf_at, INFINITY);
    uint16_t *dy16 = malloc((size_t)(B * R) * 2);
    float *dx = malloc((size_t)(B * K) * sizeof *dx);
    assert_true(dy16 && dx);
    for (int64_t i = 0; i < B * R; i++) dy16[i] = to_half(c.dyv[i], dt);
    for (int64_t i = 0; i < B * K; i++) dx[i] = NAN;
    emu_dx(c.p, dy16, B, dx);
    int64_t nonfinite = dx_against_cpu(&c, dx, B, K, dt, "dx");
    if (inf_at >= 0) assert_true(nonfinite > 0 && nonfinite < K); /* Inf reached some columns, not all */
    free(dx);
    free(dy16);
    dx_case_free(&c);
}

static void test_spmm_t_all_layouts(void **state)
{
    static const int64_t Vs[] = {16, 32, 64, 128}, Ms[] = {4, 5, 8, 16, 32};
    for (size_t iv = 0; iv < 4; iv++)
        for (size_t im = 0; im < 5; im++) {
            int64_t V = Vs[iv], M = Ms[im];
            /* 41 groups: 6 k-tiles, a partial CTA of k-tiles for KT = 4; 75
             * batch rows: a partial CTA of 64 */
            check_spmm_t(V + 23, 40 * M + 3, V, M, 75, VN_BF16, (uint32_t)(300 + 10 * iv + im), -1);
        }
}

/* An Inf in dY (batch row 2, output row 5 of W): the tensor-core path would
 * give 0 · Inf = NaN at every column of the block; the kept-only path gives
 * the CPU's values. The second Inf sits in the first row tile of block 1
 * (row 35, V = 32), the stage after block 0's sums were flushed.
 * Also f16, M = 128 (BN = 16), V = 256 (no limit on V), and R % 8 == 0
 * (dY copied by cp.async; R = V + 23 elsewhere takes the plain loads). */
static void test_spmm_t_inf_and_edges(void **state)
{
    check_spmm_t(40, 100, 16, 8, 7, VN_BF16, 31, 2 * 40 + 5);
    check_spmm_t(40, 100, 32, 5, 7, VN_F16, 32, 2 * 40 + 35);
    check_spmm_t(70, 300, 64, 128, 40, VN_BF16, 33, -1);
    check_spmm_t(272, 77, 256, 8, 19, VN_BF16, 34, -1);
    check_spmm_t(96, 131, 32, 8, 70, VN_BF16, 35, -1);
    check_spmm_t(96, 131, 32, 8, 70, VN_F16, 36, 64 * 96 + 70);
}

/* The emulated SDDMM against vn_vnm_sddmm on the CPU with the same rounded
 * operands, within 1e-5 of |dY|ᵀ·|X| at each kept position. */
static void check_sddmm(int64_t R, int64_t K, int64_t V, int64_t M, int64_t B, vn_dtype dt,
                        uint32_t seed)
{
    vn_vnm *s = test_matrix(R, K, V, M, seed);
    vn_tensor *dy = trand(2, (int64_t[]){B, R}, -2, 2, seed + 5);
    vn_tensor *ady = round_in_place(dy, dt, true);
    vn_tensor *x = trand(2, (int64_t[]){B, K}, -2, 2, seed + 6);
    vn_tensor *ax = round_in_place(x, dt, true);
    vnm_sptc *p = vnm_sptc_pack(s, dt);
    CHECK_PTR(p);
    int64_t ldx = (B + 7) / 8 * 8, nv = R * 2 * p->G;
    uint16_t *xt = calloc((size_t)(K * ldx), 2), *dy16 = malloc((size_t)(B * R) * 2);
    const float *xv = vn_tensor_data(x), *dyv = vn_tensor_data(dy);
    for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < B; n++) xt[k * ldx + n] = to_half(xv[n * K + k], dt);
    for (int64_t i = 0; i < B * R; i++) dy16[i] = to_half(dyv[i], dt);
    float *dv = malloc((size_t)nv * sizeof *dv);
    for (int64_t i = 0; i < nv; i++) dv[i] = NAN;
    emu_sddmm(p, dy16, xt, ldx, B, dv);
    vn_tensor *want = vn_vnm_sddmm(s, dy, x), *bound = vn_vnm_sddmm(s, ady, ax);
    CHECK_PTR(want);
    CHECK_PTR(bound);
    const float *w = vn_tensor_data(want), *bd = vn_tensor_data(bound);
    for (int64_t i = 0; i < nv; i++)
        if (!(fabsf(dv[i] - w[i]) <= 1e-5f * bd[i] + 1e-30f))
            fail_msg("R=%lld K=%lld V=%lld M=%lld B=%lld %s: dvalues[%lld][%lld] = %g, CPU %g",
                     (long long)R, (long long)K, (long long)V, (long long)M, (long long)B,
                     vn_dtype_name(dt), (long long)(i / (2 * p->G)), (long long)(i % (2 * p->G)),
                     (double)dv[i], (double)w[i]);
    free(dv);
    free(dy16);
    free(xt);
    vnm_sptc_free(p);
    vn_tensor *ts[] = {dy, ady, x, ax, want, bound};
    gc_release_all(ts, sizeof ts / sizeof ts[0]);
    vn_vnm_free(s);
}

static void test_sddmm_all_layouts(void **state)
{
    static const int64_t Vs[] = {16, 32, 64, 128}, Ms[] = {4, 5, 8, 16, 32};
    for (size_t iv = 0; iv < 4; iv++)
        for (size_t im = 0; im < 5; im++) /* 3 batch chunks, the last partial */
            check_sddmm(Vs[iv] + 23, 12 * Ms[im] + 3, Vs[iv], Ms[im], 75, VN_BF16,
                        (uint32_t)(500 + 10 * iv + im));
    check_sddmm(300, 64, 48, 8, 33, VN_F16, 77); /* V = 48: MT = 1 */
    check_sddmm(128, 203, 64, 8, 40, VN_BF16, 78); /* R % 8 == 0: dY by cp.async */
    check_sddmm(96, 40, 32, 5, 1, VN_F16, 79);     /* one batch row; 2 k-tiles */
}

/* ---- the dense-W dX path (k_densify, cuBLAS, the guarded k_dx) ---------------------- */

/* k_densify over its whole grid: dense zeroed (vnk_fill), then each packed
 * value j stored at vnm_densify_at(j) by its own thread; each index may be
 * written once, and a value the helper calls padding must be 0. */
static void emu_densify(const vnm_sptc *p, uint16_t *dense)
{
    memset(dense, 0, (size_t)(p->R * p->K) * 2);
    uint8_t *seen = calloc((size_t)(p->R * p->K), 1);
    assert_non_null(seen);
    for (int64_t j = 0; j < p->row_tiles * p->k_tiles * 256; j++) {
        const int e = (int)(j & 255);
        assert_int_equal(vnm_a_value(e >> 3, (e >> 1) & 3, e & 1), e); /* the helper's inverse */
        int64_t at = vnm_densify_at(j, p->meta, p->gather, p->R, p->K, p->V, p->k_tiles);
        if (at < 0) {
            if (p->values[j] != 0) fail_msg("packed value %lld is %#x but has no place", (long long)j, p->values[j]);
            continue;
        }
        assert_true(at < p->R * p->K);
        if (seen[at]++) fail_msg("two packed values at (%lld, %lld)", (long long)(at / p->K), (long long)(at % p->K));
        dense[at] = p->values[j];
    }
    free(seen);
}

/* The dense path of dX as the engine queues it: the conversion of dY sets a
 * flag where an element, rounded, is Inf or NaN (b16_nonfinite, the
 * kernel's test); dX = dY·W on the dense W (a plain double GEMM stands in
 * for cuBLAS); k_dx, guarded by the flag, rewrites dX only when it is set.
 * Checked: the dense W equals the host decoder's and vn_vnm_to_dense of the
 * rounded values bit for bit, and dX equals the CPU's as check_spmm_t asks.
 * With inf_at ≥ 0, dY's element there is `big` (Inf, or a finite f32 that
 * overflows the 16-bit type): the flag must be set, and without the guard
 * the dense product would have NaN (checked too). A finite `big` that
 * overflows has no CPU value to match (the CPU keeps it finite): there the
 * check is the flag only. */
static void check_dense_dx(int64_t R, int64_t K, int64_t V, int64_t M, int64_t B, vn_dtype dt,
                           uint32_t seed, int64_t inf_at, float big)
{
    dx_case c = dx_case_new(R, K, V, M, B, dt, seed, inf_at, big);
    uint16_t *dense = malloc((size_t)(R * K) * 2), *dy16 = malloc((size_t)(B * R) * 2);
    float *decoded = malloc((size_t)(R * K) * sizeof *decoded), *dx = malloc((size_t)(B * K) * sizeof *dx);
    assert_true(dense && dy16 && decoded && dx);
    emu_densify(c.p, dense);
    CHECK_OK(vnm_sptc_decode(c.p, decoded));
    vn_tensor *ref = vn_vnm_to_dense(c.s);
    CHECK_PTR(ref);
    const float *rv = vn_tensor_data(ref);
    for (int64_t i = 0; i < R * K; i++) {
        float got = half_to_f32(dense[i], dt);
        if (memcmp(&got, &decoded[i], 4) || memcmp(&got, &rv[i], 4))
            fail_msg("R=%lld K=%lld V=%lld M=%lld: dense W[%lld][%lld] = %g, decoder %g, to_dense %g",
                     (long long)R, (long long)K, (long long)V, (long long)M, (long long)(i / K),
                     (long long)(i % K), (double)got, (double)decoded[i], (double)rv[i]);
    }
    int flag = 0;
    for (int64_t i = 0; i < B * R; i++) {
        dy16[i] = to_half(c.dyv[i], dt);
        if (b16_nonfinite(dy16[i], dt == VN_BF16)) flag = 1;
    }
    int64_t nan_from_dense = 0;
    for (int64_t n = 0; n < B; n++)
        for (int64_t k = 0; k < K; k++) {
            double acc = 0;
            for (int64_t r = 0; r < R; r++) acc += (double)half_to_f32(dy16[n * R + r], dt) * half_to_f32(dense[r * K + k], dt);
            dx[n * K + k] = (float)acc;
            nan_from_dense += isnan(acc);
        }
    assert_int_equal(flag, inf_at >= 0);
    if (inf_at >= 0) assert_true(nan_from_dense > 0); /* what the guard is for */
    if (flag) emu_dx(c.p, dy16, B, dx);
    if (isfinite(big) && inf_at >= 0) { /* overflowed in the rounding: no CPU value to match */
        free(dense), free(dy16), free(decoded), free(dx);
        vn_tensor_release(ref);
        dx_case_free(&c);
        return;
    }
    dx_against_cpu(&c, dx, B, K, dt, "dense-path dx");
    free(dense);
    free(dy16);
    free(decoded);
    free(dx);
    vn_tensor_release(ref);
    dx_case_free(&c);
}

/* Every (V, M) with a partial V-block, row tile, group and k-tile; f16; V =
 * 48 and 256; M = 128; an Inf in dY (the guarded k_dx rewrites dX); a
 * finite f32 that overflows f16 (the flag looks at the rounded bits). */
static void test_dense_dx(void **state)
{
    static const int64_t Vs[] = {16, 32, 64, 128}, Ms[] = {4, 5, 8, 16, 32};
    for (size_t iv = 0; iv < 4; iv++)
        for (size_t im = 0; im < 5; im++)
            check_dense_dx(Vs[iv] + 23, 9 * Ms[im] + 3, Vs[iv], Ms[im], 11, VN_BF16,
                           (uint32_t)(700 + 10 * iv + im), -1, 0);
    check_dense_dx(100, 77, 48, 5, 7, VN_F16, 791, -1, 0);
    check_dense_dx(272, 77, 256, 8, 5, VN_BF16, 792, -1, 0);
    check_dense_dx(40, 300, 16, 128, 3, VN_BF16, 793, -1, 0);
    check_dense_dx(40, 100, 16, 4, 7, VN_BF16, 794, 2 * 40 + 5, INFINITY);
    check_dense_dx(70, 100, 32, 5, 7, VN_F16, 795, 3 * 70 + 35, INFINITY);
    check_dense_dx(40, 100, 16, 4, 7, VN_F16, 796, 2 * 40 + 5, 7e4f); /* f16 max 65504: rounds to Inf */
}

/* The emulator has teeth: one changed metadata nibble changes the result. */
static void test_emulator_sees_a_bad_nibble(void **state)
{
    vn_vnm *s = test_matrix(16, 32, 16, 8, 21);
    vnm_sptc *p = vnm_sptc_pack(s, VN_BF16);
    CHECK_PTR(p);
    int64_t B = 8, ldx = 8;
    uint16_t xt[32 * 8] __attribute__((aligned(16)));
    for (int i = 0; i < 32 * 8; i++) xt[i] = vn__f32_to_bf16((float)(i % 7) - 3.0f);
    float y1[16 * 8], y2[16 * 8];
    emu_spmm(&(spmm_args){p, xt, ldx, B, NULL, y1});
    uint32_t nib = p->meta[0] & 0xf;
    p->meta[0] = (p->meta[0] & ~0xfu) | (nib == 0xe ? 0x4u : 0xeu);
    emu_spmm(&(spmm_args){p, xt, ldx, B, NULL, y2});
    assert_true(memcmp(y1, y2, sizeof y1) != 0);
    vnm_sptc_free(p);
    vn_vnm_free(s);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spmm_all_layouts),
        cmocka_unit_test(test_spmm_edges),
        cmocka_unit_test(test_emulator_sees_a_bad_nibble),
        cmocka_unit_test(test_spmm_t_all_layouts),
        cmocka_unit_test(test_spmm_t_inf_and_edges),
        cmocka_unit_test(test_sddmm_all_layouts),
        cmocka_unit_test(test_dense_dx),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
