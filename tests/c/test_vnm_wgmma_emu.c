/* The host emulator of the sm_90a forward V:N:M kernel (kernels/
 * vnm_wgmma.cu, k_spmm_wgmma). It replays the kernel's schedule CTA by CTA
 * through the index functions the kernel calls (kernels/
 * vnm_wgmma_index.h): the cp.async copies thread by thread into a model of
 * shared memory (poisoned first, bounds checked, starting at a shared
 * address that is not 1024-aligned so the kernel's alignment is exercised),
 * the A registers and metadata each thread loads, the matrix descriptor the
 * kernel builds, and the epilogue's writes; and it keeps the books of the
 * pipeline (which k-tile a slot holds, in which commit group, what
 * cp.async.wait_group VNM_WG_PENDING has completed, which wgmmas are in
 * flight after wgmma.wait_group VNM_WG_INFLIGHT) to check that each wgmma
 * reads a slot holding its k-tile, arrived, that no copy overwrites a slot
 * before its k-tile is read and its wgmma retired, and that no A register
 * set is rewritten under a wgmma in flight. The model's wgmma itself acts
 * at issue, which is what the books make safe. wgmma.mma_async.sp and the
 * descriptor's swizzled addressing are software models written from the
 * PTX ISA (tests/c/sptc_emu.h: sw_wgmma_sp, sw_desc_b_addr), not from the
 * kernel's helpers, so a helper that disagrees with the ISA as modelled
 * gives a wrong result. The result is compared with the CPU V:N:M kernel
 * (sptc_check.h) for V in {64, 128, 192} × M in {4, 5, 8, 16, 32}, rows,
 * columns and batches that fill no tile, bf16 and f16.
 *
 * What a GPU run still has to prove: that the hardware reads the operands
 * as the ISA text and figures say (the figures of the A and metadata
 * layouts are pictures, read here as the mma.sp m16n8k32 ones per warp),
 * the ordering (wgmma.fence, commit/wait, the proxy fence after cp.async),
 * and the speed. */
#include "gradcheck.h"
#include "sptc_check.h"
#include "sptc_emu.h"
#include "vnm_sptc.h"
#include "vnm_wgmma_index.h"

#include <stdlib.h>
#include <string.h>

/* The shared address of the kernel's dynamic shared memory in the model:
 * 16-byte aligned only, as a reservation in front of it could leave it. */
#define EMU_SMEM_BASE 16u

/* Descriptor bits the emulator flips, for the test that the model notices
 * a wrong descriptor; 0 in the kernel's schedule. */
static uint64_t desc_flip;

/* The ring's bookkeeping, to check the kernel's order of copies, commits,
 * waits, reads and register writes: which k-tile each slot holds and in
 * which cp.async group it arrived (groups numbered from 0 in commit order;
 * the kernel's commits are uniform across threads, so one count serves
 * all), and which wgmmas are in flight (k-tile, slot, register set). The
 * kernel's barrier comes right after each cp.async wait and every warp
 * retires the same wgmmas, so the books after a wait hold for all warps. */
typedef struct {
    int64_t committed, complete; /* groups committed; groups 0..complete−1 waited for */
    int64_t tile[VNM_WG_STAGES], group[VNM_WG_STAGES];
    int64_t issued, retired; /* wgmmas issued; the first `retired` of them done */
    int64_t wg_tile[64];     /* k-tile of wgmma i (i < 64 in flight at most) */
} ring_book;

/* Whether a wgmma in flight reads slot s / register set r. */
static bool inflight_slot(const ring_book *b, int s)
{
    for (int64_t i = b->retired; i < b->issued; i++)
        if (b->wg_tile[i % 64] % VNM_WG_STAGES == s) return true;
    return false;
}
static bool inflight_regs(const ring_book *b, int r)
{
    for (int64_t i = b->retired; i < b->issued; i++)
        if (b->wg_tile[i % 64] % 2 == r) return true;
    return false;
}

/* k-tile kt goes into slot s (in the group committed next): the slot must
 * hold no k-tile still to be read (kt_now: the k-tile of the current
 * iteration, read after these copies) nor one a wgmma in flight reads. */
static void book_load(ring_book *b, int s, int64_t kt, int64_t kt_now)
{
    if (b->tile[s] >= kt_now || inflight_slot(b, s))
        fail_msg("k-tile %lld overwrites slot %d, which holds k-tile %lld not read or still read (iteration "
                 "%lld)", (long long)kt, s, (long long)b->tile[s], (long long)kt_now);
    b->tile[s] = kt, b->group[s] = b->committed;
}
static void book_commit(ring_book *b) { b->committed++; }
/* cp.async.wait_group n: all but the n most recent groups are complete. */
static void book_wait(ring_book *b, int n) { b->complete = b->committed - n; }
/* The A registers and metadata of k-tile kt are written (set kt % 2, as
 * the kernel alternates): no wgmma in flight may read that set. */
static void book_regs(const ring_book *b, int64_t kt)
{
    if (inflight_regs(b, (int)(kt % 2)))
        fail_msg("k-tile %lld's A registers overwrite those of a wgmma in flight", (long long)kt);
}
/* The wgmma of k-tile kt reads slot s: it must hold kt, arrived. */
static void book_issue(ring_book *b, int s, int64_t kt)
{
    if (b->tile[s] != kt || b->group[s] >= b->complete)
        fail_msg("k-tile %lld read from slot %d holding k-tile %lld (group %lld, %lld complete)", (long long)kt,
                 s, (long long)b->tile[s], (long long)b->group[s], (long long)b->complete);
    if (b->issued - b->retired >= 64) fail_msg("more than 64 wgmmas in flight");
    b->wg_tile[b->issued++ % 64] = kt;
}
/* wgmma.wait_group n: all but the n most recent wgmmas are done. */
static void book_wgmma_wait(ring_book *b, int n)
{
    if (b->issued - n > b->retired) b->retired = b->issued - n;
}

/* wg_load_stage of the kernel, thread by thread: k-tile kt into the stage
 * at shared address st. */
static void emu_wg_load_stage(emu_smem *s, uint32_t st, const spmm_args *g, const int32_t *gk,
                              int64_t r0, int64_t n0, int64_t kt)
{
    const vnm_sptc *p = g->p;
    const uint16_t *xend = g->xt + p->K * g->ldx;
    size_t ntiles = (size_t)(p->row_tiles * p->k_tiles);
    for (int tid = 0; tid < VNM_WG_THREADS; tid++)
        for (int q = tid; q < VNM_WG_COPIES; q += VNM_WG_THREADS) {
            vnm_copy c = vnm_wg_copy(q);
            if (c.kind == VNM_COPY_X) {
                int32_t col = gk[c.row];
                int64_t n = n0 + c.piece;
                bool valid = col >= 0 && n < g->B;
                if (col >= p->K) fail_msg("gather entry %d beyond K=%lld", col, (long long)p->K);
                cp_async16(s, st + (size_t)vnm_wg_xs_at(c.row, c.piece), valid ? g->xt + col * g->ldx + n : g->xt,
                           valid, g->xt, xend);
                continue;
            }
            if (r0 / 16 + c.row >= p->row_tiles) continue;
            int64_t t = vnm_tile(r0, c.row, kt, p->k_tiles);
            if (c.kind == VNM_COPY_A)
                cp_async16(s, st + (size_t)vnm_wg_vs_at(c.row, c.piece), p->values + t * 256 + c.piece * 8, true,
                           p->values, p->values + ntiles * 256);
            else
                cp_async16(s, st + (size_t)vnm_wg_ms_at(c.row, 4 * c.piece), p->meta + t * 16 + c.piece * 4, true,
                           p->meta, p->meta + ntiles * 16);
        }
}

/* k_spmm_wgmma over its whole grid. Shared memory offsets are shared
 * addresses (the model's byte 0 is address 0). */
static void emu_spmm_wgmma(const spmm_args *g)
{
    const vnm_sptc *p = g->p;
    if (!vnm_wg_fits(p->V)) fail_msg("V=%lld: not a multiple of 64", (long long)p->V);
    const int64_t gbytes = vnm_fwd_gather_bytes(p->k_tiles), ccols = p->k_tiles * 32;
    emu_smem s = {.n = EMU_SMEM_BASE + (size_t)vnm_wg_smem(gbytes)};
    s.b = malloc(s.n);
    float *acc = malloc(sizeof *acc * VNM_WG_THREADS * VNM_WG_ACC);
    assert_non_null(s.b);
    assert_non_null(acc);
    const uint32_t ring = EMU_SMEM_BASE + vnm_wg_pad(EMU_SMEM_BASE);
    int64_t gx = (p->row_tiles * 16 + VNM_WG_BM - 1) / VNM_WG_BM, gy = (g->B + VNM_WG_BN - 1) / VNM_WG_BN;
    for (int64_t bx = 0; bx < gx; bx++)
        for (int64_t by = 0; by < gy; by++) {
            memset(s.b, 0xff, s.n);
            for (int i = 0; i < VNM_WG_THREADS * VNM_WG_ACC; i++) acc[i] = NAN; /* never zeroed */
            int64_t r0 = vnm_wg_row0(bx), n0 = vnm_wg_batch0(by);
            const int32_t *gather = p->gather + r0 / p->V * ccols;
            if (gbytes) { /* the kernel's 16-byte copies of the gather row */
                uint32_t gs = ring + VNM_WG_STAGES * VNM_WG_STAGE_BYTES;
                for (int64_t q = 0; q < ccols / 4; q++)
                    cp_async16(&s, gs + 16 * (size_t)q, gather + 4 * q, true, p->gather,
                               p->gather + p->nblocks * ccols);
                gather = (const int32_t *)(s.b + gs);
            }
            ring_book book = {0};
            for (int st = 0; st < VNM_WG_STAGES; st++) book.tile[st] = -1;
            for (int st = 0; st < VNM_WG_AHEAD; st++) {
                if (st < p->k_tiles) {
                    book_load(&book, st, st, 0);
                    emu_wg_load_stage(&s, ring + st * VNM_WG_STAGE_BYTES, g, gather + st * 32, r0, n0, st);
                }
                book_commit(&book);
            }
            for (int64_t kt = 0; kt < p->k_tiles; kt++) {
                book_wait(&book, VNM_WG_PENDING); /* then the proxy fence and the barrier */
                int64_t next = kt + VNM_WG_AHEAD;
                if (next < p->k_tiles) {
                    book_load(&book, (int)(next % VNM_WG_STAGES), next, kt);
                    emu_wg_load_stage(&s, ring + (uint32_t)(next % VNM_WG_STAGES) * VNM_WG_STAGE_BYTES, g,
                                      gather + next * 32, r0, n0, next);
                }
                book_commit(&book);
                book_regs(&book, kt);
                uint32_t st = ring + (uint32_t)(kt % VNM_WG_STAGES) * VNM_WG_STAGE_BYTES;
                uint32_t a[VNM_WG_THREADS][4], e[VNM_WG_THREADS];
                for (int t = 0; t < VNM_WG_THREADS; t++) {
                    int w = t / 32, l = t % 32;
                    if (r0 / 16 + w >= p->row_tiles) { /* rows past the matrix: zeros */
                        memset(a[t], 0, sizeof a[t]);
                        e[t] = VNM_WG_META_PAD;
                        continue;
                    }
                    memcpy(a[t], smem_at(&s, st + (size_t)vnm_wg_vs_at(w, l), 16, "A"), 16);
                    memcpy(&e[t], smem_at(&s, st + (size_t)vnm_wg_ms_at(w, vnm_meta_word_lane(l)), 4, "E"), 4);
                }
                book_issue(&book, (int)(kt % VNM_WG_STAGES), kt);
                sw_wgmma_sp(&s, acc, VNM_WG_BN, (const uint32_t(*)[4])a, vnm_wg_desc(st) ^ desc_flip, e, vnm_wg_scale_d(kt),
                            p->dtype);
                book_wgmma_wait(&book, VNM_WG_INFLIGHT);
            }
            book_wgmma_wait(&book, 0);
            for (int t = 0; t < VNM_WG_THREADS; t++)
                for (int i = 0; i < VNM_WG_ACC; i++) {
                    int64_t r = r0 + vnm_wg_d_row(t, i), n = n0 + vnm_wg_d_col(t, i);
                    if (r < p->R && n < g->B)
                        g->y[n * p->R + r] = (p->k_tiles > 0 ? acc[t * VNM_WG_ACC + i] : 0.0f) +
                                             (g->bias ? g->bias[r] : 0.0f);
                }
        }
    free(acc);
    free(s.b);
}

/* The descriptor the kernel builds decodes (by the ISA's field table) to
 * its stage address, LBO, SBO, no base offset and the 128-byte swizzle; and
 * the model's walk of it reaches, for every (k, n) of the B tile, the byte
 * the kernel's copies write (vnm_wg_xs_at): a bijection onto the stage's 8
 * KB in which the 8 k-rows of a 16-byte chunk column fall in 8 bank groups. */
static void test_descriptor_and_swizzle(void **state)
{
    const uint32_t ring = EMU_SMEM_BASE + vnm_wg_pad(EMU_SMEM_BASE);
    assert_int_equal(ring % 1024, 0);
    assert_int_equal(vnm_wg_pad(2048), 0);
    assert_int_equal(VNM_WG_STAGE_BYTES % 1024, 0);
    for (int slot = 0; slot < VNM_WG_STAGES; slot++) {
        uint32_t st = ring + (uint32_t)slot * VNM_WG_STAGE_BYTES;
        sw_desc d = sw_desc_decode(vnm_wg_desc(st));
        assert_int_equal(d.start, st);
        assert_int_equal(d.lbo, VNM_WG_LBO);
        assert_int_equal(d.sbo, VNM_WG_SBO);
        assert_int_equal(d.base_offset, 0);
        assert_int_equal(d.swizzle, 1);
        unsigned char seen[VNM_WG_XS_BYTES / 2] = {0};
        for (int k = 0; k < 32; k++)
            for (int n = 0; n < VNM_WG_BN; n++) {
                uint32_t at = sw_desc_b_addr(&d, k, n);
                if (at != st + (uint32_t)vnm_wg_xs_at(k, n))
                    fail_msg("slot %d: B(%d, %d) at %u by the descriptor, %u by the kernel", slot, k, n, at,
                             st + (uint32_t)vnm_wg_xs_at(k, n));
                uint32_t off = (at - st) / 2;
                assert_true(at >= st && off < VNM_WG_XS_BYTES / 2 && !seen[off]);
                seen[off] = 1;
            }
        for (int k0 = 0; k0 < 32; k0 += 8)
            for (int n = 0; n < VNM_WG_BN; n += 8) {
                unsigned groups = 0;
                for (int k = k0; k < k0 + 8; k++) groups |= 1u << (sw_desc_b_addr(&d, k, n) / 16 % 8);
                assert_int_equal(groups, 0xff);
            }
    }
}

/* Every accumulator element of the warpgroup names a distinct (row, column)
 * of the 64 × 128 tile. */
static void test_accumulator_map(void **state)
{
    static unsigned char seen[VNM_WG_BM][VNM_WG_BN];
    memset(seen, 0, sizeof seen);
    for (int t = 0; t < VNM_WG_THREADS; t++)
        for (int i = 0; i < VNM_WG_ACC; i++) {
            int r = vnm_wg_d_row(t, i), c = vnm_wg_d_col(t, i);
            assert_true(r >= 0 && r < VNM_WG_BM && c >= 0 && c < VNM_WG_BN && !seen[r][c]);
            seen[r][c] = 1;
        }
}

static void check_wg(int64_t R, int64_t K, int64_t V, int64_t M, int64_t B, vn_dtype dt, uint32_t seed)
{
    check_spmm_with(emu_spmm_wgmma, R, K, V, M, B, dt, seed);
}

static void test_wgmma_layouts(void **state)
{
    static const int64_t Vs[] = {64, 128, 192}, Ms[] = {4, 5, 8, 16, 32};
    for (size_t iv = 0; iv < 3; iv++)
        for (size_t im = 0; im < 5; im++) {
            int64_t V = Vs[iv], M = Ms[im];
            /* rows: a partial block and 16-row tile, so the last CTA has
             * warps past the matrix; K: 41 groups (6 k-tiles: the 4-stage
             * ring wraps) with a partial last group; a batch of 2 CTAs, the
             * second partial and ending inside an 8-row piece */
            check_wg(V + 23, 40 * M + 3, V, M, 203, VN_BF16, (uint32_t)(700 + 10 * iv + im));
        }
}

/* f16; one k-tile and one batch row; the gather row too long for shared
 * memory (read from global); several CTAs per block; R a multiple of 64. */
static void test_wgmma_edges(void **state)
{
    check_wg(70, 100, 64, 8, 37, VN_F16, 41);
    check_wg(5, 4, 64, 4, 1, VN_BF16, 42);
    check_wg(20, 4 * 2060, 64, 4, 9, VN_BF16, 43); /* 258 k-tiles: 33 KB of gather */
    check_wg(256, 64, 128, 8, 130, VN_F16, 44);
}

/* The models have teeth: a wrong LBO in the descriptor, or one changed
 * metadata nibble, changes the result. */
static void test_emulator_sees_mistakes(void **state)
{
    vn_vnm *s = test_matrix(64, 256, 64, 8, 45);
    vnm_sptc *p = vnm_sptc_pack(s, VN_BF16);
    CHECK_PTR(p);
    int64_t B = 128, ldx = 128, K = 256;
    uint16_t *xt = aligned_alloc(16, (size_t)(K * ldx * 2));
    for (int64_t i = 0; i < K * ldx; i++) xt[i] = vn__f32_to_bf16((float)(i % 7) - 3.0f);
    size_t ny = (size_t)(B * 64);
    float *y[3];
    for (int i = 0; i < 3; i++) y[i] = malloc(ny * sizeof(float));
    emu_spmm_wgmma(&(spmm_args){p, xt, ldx, B, NULL, y[0]});
    desc_flip = (uint64_t)((VNM_WG_LBO ^ VNM_WG_SBO) >> 4) << 16; /* LBO := SBO */
    emu_spmm_wgmma(&(spmm_args){p, xt, ldx, B, NULL, y[1]});
    desc_flip = 0;
    uint32_t nib = p->meta[0] & 0xf;
    p->meta[0] = (p->meta[0] & ~0xfu) | (nib == 0xe ? 0x4u : 0xeu);
    emu_spmm_wgmma(&(spmm_args){p, xt, ldx, B, NULL, y[2]});
    assert_true(memcmp(y[0], y[1], ny * sizeof(float)) != 0);
    assert_true(memcmp(y[0], y[2], ny * sizeof(float)) != 0);
    for (int i = 0; i < 3; i++) free(y[i]);
    free(xt);
    vnm_sptc_free(p);
    vn_vnm_free(s);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptor_and_swizzle),
        cmocka_unit_test(test_accumulator_map),
        cmocka_unit_test(test_wgmma_layouts),
        cmocka_unit_test(test_wgmma_edges),
        cmocka_unit_test(test_emulator_sees_mistakes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
