/* vnm_sptc.cu — the three V:N:M kernels on the GPU, for a matrix packed by
 * vnm_sptc_pack (engine/vnm_sptc.h gives the layout; kernels.h the ABI).
 * The CPU kernels of engine/vnm_kernels.c are the reference the GPU test and
 * bench/vnm_gpu.c compare with.
 *
 *   spmm    Yᵀ tile = W tile (2:4 on the condensed columns) · gathered Xᵀ:
 *           mma.sp m16n8k32. A CTA owns BM rows of one V-block × BN batch
 *           rows, 8 warps of 64×32 (or BM×32) warp tiles; per k-tile the
 *           block's 32 kept columns (rows of xt, through the gather row held
 *           in shared memory), the packed values and the metadata go to
 *           shared memory by cp.async in a 3-stage pipeline (swizzled X
 *           tile read by ldmatrix.trans); bias is added in the epilogue.
 *           Every index is a function of vnm_sptc_index.h, which the host
 *           emulator (tests/c/test_vnm_sptc_emu.c) replays on the CPU.
 *           On a compute capability 9.0 device, for V % 64 == 0, a build
 *           with the sm_90a code runs k_spmm_wgmma (vnm_wgmma.cu) instead
 *           (vnk_vnm_spmm_with below; the rule is in kernels.h).
 *   sddmm   (k_sddmm) dvalues = dYᵀ·X at the kept positions: a CTA owns
 *           16·MT rows of one V-block × 64 condensed columns and walks the
 *           batch in 32-row chunks through a 3-stage cp.async ring (dY's
 *           block columns and X's gathered rows, swizzled, read by
 *           ldmatrix.x4(.trans)), 2 × 2 warps of mma m16n8k16; each kept
 *           value written once from the accumulators.
 *   spmm_t  (k_dx) dX = dY·W. Wᵀ is not V:N:M, so no mma.sp: per V-block
 *           the dense mma of dY's block columns with the block's condensed
 *           weights, scatter-added into the original columns. A CTA owns
 *           BN batch rows × KT k-tiles and walks all row tiles of W through
 *           a 4-stage cp.async ring (16 dY columns, KT packed tiles), the B
 *           fragments decoded from the packed tiles in registers; the sums
 *           stay in registers for a block and are added into an f32 tile in
 *           shared memory when the block ends (no atomics: a deterministic
 *           sum). A warp whose dY fragments hold Inf or NaN sums that stage
 *           over the kept weights only, as the CPU does (the mma would
 *           multiply the zeros of unkept positions: 0 · Inf = NaN).
 *           Against dense cuBLAS on a dense 16-bit W (dY·W_dense, W rebuilt
 *           once per packed-values version by k_densify, vnm_densify.cu):
 *           this kernel does 4/M of the dense flops on mma.sync at a lower
 *           fraction of peak than cuBLAS's wgmma; the engine's rule between
 *           the two is in engine/sparse/vnm_sptc.h (vnm_sptc_dx_dense). On
 *           the dense path this kernel is queued after cuBLAS guarded by a
 *           flag the conversion of dY sets on Inf or NaN, and rewrites dX
 *           only then (vnk_vnm_spmm_t_if).
 * The three kernels' indices are functions of vnm_sptc_index.h, replayed on
 * the CPU by tests/c/test_vnm_sptc_emu.c. */
#include "async_copy.cuh"
#include "internal.cuh"
#include "scalar.h"
#include "vnm_sptc_index.h"
#include "vnm_wgmma_index.h"


/* ---- small device helpers ---------------------------------------------------- */

/* Four 8×8 b16 matrices, transposed: register m gets, from the matrix whose
 * rows lanes 8m..8m+7 address, elements (rows 2·tig, 2·tig+1; column gid). */
static __device__ inline void ldmatrix_x4_trans(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* d += A (16×32, 2:4, metadata e, selector 0) · B (32×8). */
template <bool BF16>
static __device__ inline void mma_sp(float d[4], const uint4 &a, const uint32_t b[4], uint32_t e)
{
    if (BF16)
        asm volatile("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9, %10, %11}, "
                     "{%0, %1, %2, %3}, %12, 0x0;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b[0]), "r"(b[1]), "r"(b[2]),
                       "r"(b[3]), "r"(e));
    else
        asm volatile("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9, %10, %11}, "
                     "{%0, %1, %2, %3}, %12, 0x0;\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b[0]), "r"(b[1]), "r"(b[2]),
                       "r"(b[3]), "r"(e));
}

/* d += A (16×16) · B (16×8), dense. */
template <bool BF16>
static __device__ inline void mma_dense(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    if (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* ---- forward: y = X·Wᵀ + bias ------------------------------------------------- */

/* One stage of the pipeline (k-tile kt into slot base): thread tid's share
 * of the copies listed by vnm_fwd_copy. X pieces are zero-filled for a
 * padding column (gather < 0) or batch rows past B; A and metadata pieces of
 * m-tiles past the matrix are not copied (those warps skip their mma). */
template <int BM>
static __device__ inline void fwd_load_stage(unsigned char *base, const vnk_vnm &w, const int32_t *gk,
                                             const uint16_t *xt, int64_t ldx, int64_t B, int64_t r0,
                                             int64_t n0, int64_t kt)
{
    constexpr int BN = VNM_FWD_BN(BM);
    uint16_t *xs = (uint16_t *)base, *vs = xs + vnm_fwd_xs_elems(BM);
    uint32_t *ms = (uint32_t *)(vs + vnm_fwd_vs_elems(BM));
    for (int q = threadIdx.x; q < vnm_fwd_copies(BM); q += VNM_FWD_THREADS) {
        vnm_copy c = vnm_fwd_copy(q, BM);
        if (c.kind == VNM_COPY_X) {
            int32_t col = gk[c.row];
            int64_t n = n0 + c.piece;
            bool valid = col >= 0 && n < B;
            cp_async16(xs + vnm_fwd_xs_at(c.row, c.piece, BN), valid ? xt + col * ldx + n : xt, valid);
            continue;
        }
        if (r0 / 16 + c.row >= w.row_tiles) continue;
        int64_t t = vnm_tile(r0, c.row, kt, w.k_tiles);
        if (c.kind == VNM_COPY_A)
            cp_async16(vs + c.row * 256 + c.piece * 8, w.values + t * 256 + c.piece * 8, true);
        else
            cp_async16(ms + c.row * 16 + c.piece * 4, w.meta + t * 16 + c.piece * 4, true);
    }
}

/* Grid: (⌈16·row_tiles / BM⌉, ⌈B / BN⌉), VNM_FWD_THREADS threads; dynamic
 * shared memory: VNM_FWD_STAGES stages, then the gather row when
 * gather_smem (vnm_sptc_index.h gives the schedule and every index). */
template <int BM, bool BF16>
__global__ void __launch_bounds__(VNM_FWD_THREADS)
    k_spmm(vnk_vnm w, const uint16_t *xt, int64_t ldx, int64_t B, const float *bias, float *y,
           bool gather_smem)
{
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int MT = VNM_FWD_MT(BM), NT = VNM_FWD_NT;
    const int SB = vnm_fwd_stage_bytes(BM);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t r0 = vnm_fwd_row0(blockIdx.x, BM), n0 = vnm_fwd_batch0(blockIdx.y, BM);
    const int64_t ccols = w.k_tiles * 32;
    const int32_t *gather = w.gather + r0 / w.V * ccols;
    if (gather_smem) { /* read by every stage's copies: one pass of 16-byte copies */
        int32_t *gs = (int32_t *)(smem + VNM_FWD_STAGES * SB);
        for (int64_t q = threadIdx.x; q < ccols / 4; q += VNM_FWD_THREADS)
            cp_async16(gs + 4 * q, gather + 4 * q, true);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        gather = gs;
    }
    const int wr = vnm_fwd_warp_row(warp, BM);
    /* m-tiles of this warp inside the matrix (the last CTA may overhang) */
    const int64_t left = w.row_tiles - (r0 + wr) / 16;
    const int live = left < MT ? (int)left : MT;
    float acc[MT][NT][4] = {};
    for (int s = 0; s < VNM_FWD_STAGES - 1; s++) {
        if (s < w.k_tiles) fwd_load_stage<BM>(smem + s * SB, w, gather + s * 32, xt, ldx, B, r0, n0, s);
        cp_async_commit();
    }
    for (int64_t kt = 0; kt < w.k_tiles; kt++) {
        cp_async_wait<VNM_FWD_STAGES - 2>();
        __syncthreads(); /* stage kt is in; every warp is done with stage kt − 1 */
        const int64_t next = kt + VNM_FWD_STAGES - 1;
        if (next < w.k_tiles)
            fwd_load_stage<BM>(smem + vnm_fwd_slot(next) * SB, w, gather + next * 32, xt, ldx, B, r0,
                               n0, next);
        cp_async_commit();

        const unsigned char *st = smem + vnm_fwd_slot(kt) * SB;
        const uint16_t *xs = (const uint16_t *)st, *vs = xs + vnm_fwd_xs_elems(BM);
        const uint32_t *ms = (const uint32_t *)(vs + vnm_fwd_vs_elems(BM));
        uint32_t b[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++) ldmatrix_x4_trans(b[j], xs + vnm_fwd_ldm_at(lane, warp, j, BM));
#pragma unroll
        for (int mi = 0; mi < MT; mi++) {
            if (mi >= live) continue; /* not break: a fully unrolled loop keeps acc in registers */
            const int m = wr / 16 + mi;
            const uint4 a = *(const uint4 *)(vs + m * 256 + vnm_a_value(lane, 0, 0));
            const uint32_t e = ms[m * 16 + vnm_meta_word_lane(lane)];
#pragma unroll
            for (int j = 0; j < NT; j++) mma_sp<BF16>(acc[mi][j], a, b[j], e);
        }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int mi = 0; mi < MT; mi++) /* fixed bounds: acc stays in registers */
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                if (mi >= live) continue;
                int64_t r = r0 + vnm_fwd_out_row(lane, warp, mi, i, BM);
                int64_t n = n0 + vnm_fwd_out_batch(lane, warp, j, i, BM);
                if (r < w.R && n < B) y[n * w.R + r] = acc[mi][j][i] + (bias ? bias[r] : 0.0f);
            }
}

/* ---- shared by dX and SDDMM ----------------------------------------------------- */

template <bool BF16> static __device__ inline float half_to_float(uint16_t h)
{
    return BF16 ? __uint_as_float((uint32_t)h << 16) : __half2float(__ushort_as_half(h));
}

/* Whether either 16-bit half of x is Inf or NaN (exponent all ones). */
template <bool BF16> static __device__ inline bool nonfinite_pair(uint32_t x)
{
    return b16_nonfinite(x, BF16) || b16_nonfinite(x >> 16, BF16);
}

/* Eight b16 of dY's row n from column r into shared memory at dst (16-byte
 * aligned): one cp.async when dY's rows are 16-byte aligned, else plain
 * loads and one 16-byte store. Columns ≥ R and rows ≥ B read as 0. */
static __device__ inline void copy_dy8(uint16_t *dst, const uint16_t *dy, int64_t R, int64_t B,
                                       bool aligned, int64_t n, int64_t r)
{
    if (aligned) {
        bool valid = n < B && r < R; /* R % 8 == 0: the piece is whole */
        cp_async16(dst, valid ? dy + n * R + r : dy, valid);
        return;
    }
    union { uint4 v; uint16_t h[8]; } u;
#pragma unroll
    for (int e = 0; e < 8; e++) u.h[e] = n < B && r + e < R ? dy[n * R + r + e] : 0;
    *(uint4 *)dst = u.v;
}

/* Four 8×8 b16 matrices: register m gets, from the matrix whose rows lanes
 * 8m..8m+7 address, row gid, elements 2·tig and 2·tig + 1. */
static __device__ inline void ldmatrix_x4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* ---- SDDMM: dvalues = dYᵀ·X at the kept positions -------------------------------- */

/* One stage of k_sddmm's ring: batch rows n0..n0+31 of dY's BM block
 * columns and of X's BC gathered columns (vnm_sd_copy lists the pieces). */
template <int MT>
static __device__ inline void sd_load_stage(uint16_t *st, const vnk_vnm &w, const uint16_t *dy,
                                            bool aligned, const uint16_t *xt, int64_t ldx, int64_t B,
                                            const int32_t *gs, int64_t r0, int64_t n0)
{
    uint16_t *xs = st + vnm_sd_dys_elems(MT);
    for (int q = threadIdx.x; q < vnm_sd_copies(MT); q += 128) {
        vnm_copy c = vnm_sd_copy(q, MT);
        if (c.kind == VNM_COPY_A) {
            copy_dy8(st + vnm_sd_dys_at(c.row, c.piece, MT), dy, w.R, B, aligned, n0 + c.row,
                     r0 + c.piece);
        } else {
            int32_t col = gs[c.row];
            int64_t n = n0 + c.piece;
            bool valid = col >= 0 && n < B;
            cp_async16(xs + vnm_sd_xs_at(c.row, c.piece), valid ? xt + col * ldx + n : xt, valid);
        }
    }
}

/* Grid: (⌈row_tiles / MT⌉, ⌈k_tiles / VNM_SD_KT⌉), 128 threads (the
 * schedule and every index: vnm_sptc_index.h). */
template <int MT, bool BF16>
__global__ void __launch_bounds__(128) k_sddmm(vnk_vnm w, const uint16_t *dy, bool aligned,
                                                const uint16_t *xt, int64_t ldx, int64_t B,
                                                float *dvalues)
{
    constexpr int BM = 16 * MT, MW = VNM_SD_WM(MT) / 16, NW = VNM_SD_WN(MT) / 8;
    constexpr int SE = VNM_SD_CHUNK * BM + VNM_SD_BC * VNM_SD_CHUNK; /* vnm_sd_stage_elems */
    __shared__ __align__(16) uint16_t ring[VNM_SD_STAGES][SE];
    __shared__ int32_t gs[VNM_SD_BC];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wr = vnm_sd_warp_row(warp, MT), wc = vnm_sd_warp_col(warp, MT);
    const int64_t rt0 = (int64_t)blockIdx.x * MT, r0 = rt0 * 16, kt0 = (int64_t)blockIdx.y * VNM_SD_KT;
    const int64_t ccols = w.k_tiles * 32, chunks = (B + VNM_SD_CHUNK - 1) / VNM_SD_CHUNK;
    const int32_t *gather = w.gather + r0 / w.V * ccols;
    for (int q = threadIdx.x; q < VNM_SD_BC; q += 128) {
        int64_t cc = kt0 * 32 + q;
        gs[q] = cc < ccols ? gather[cc] : -1;
    }
    __syncthreads();
    float acc[MW][NW][4] = {};
    for (int s = 0; s < VNM_SD_STAGES - 1; s++) {
        if (s < chunks) sd_load_stage<MT>(ring[s], w, dy, aligned, xt, ldx, B, gs, r0, s * VNM_SD_CHUNK);
        cp_async_commit();
    }
    for (int64_t ch = 0; ch < chunks; ch++) {
        cp_async_wait<VNM_SD_STAGES - 2>();
        __syncthreads(); /* chunk ch is in; every warp is done with chunk ch − 1 */
        const int64_t next = ch + VNM_SD_STAGES - 1;
        if (next < chunks)
            sd_load_stage<MT>(ring[next % VNM_SD_STAGES], w, dy, aligned, xt, ldx, B, gs, r0,
                              next * VNM_SD_CHUNK);
        cp_async_commit();
        const uint16_t *dys = ring[ch % VNM_SD_STAGES], *xs = dys + VNM_SD_CHUNK * BM;
#pragma unroll
        for (int kk = 0; kk < VNM_SD_CHUNK; kk += 16) {
            uint32_t a[MW][4], b[NW / 2][4];
#pragma unroll
            for (int mi = 0; mi < MW; mi++)
                ldmatrix_x4_trans(a[mi], dys + vnm_sd_dys_at(kk + vnm_ldm_at_k(lane),
                                                             wr + 16 * mi + vnm_ldm_at_row(lane), MT));
#pragma unroll
            for (int p = 0; p < NW / 2; p++)
                ldmatrix_x4(b[p], xs + vnm_sd_xs_at(wc + 16 * p + vnm_ldm_b_n(lane), kk + vnm_ldm_b_k(lane)));
#pragma unroll
            for (int mi = 0; mi < MW; mi++)
#pragma unroll
                for (int j = 0; j < NW; j++) {
                    const uint32_t bb[2] = {b[j / 2][2 * (j & 1)], b[j / 2][2 * (j & 1) + 1]};
                    mma_dense<BF16>(acc[mi][j], a[mi], bb);
                }
        }
    }
    cp_async_wait<0>();
    /* Element (row, condensed column c) is kept when c % 4 is one of the
     * row's two positions in chunk c / 4; each kept value is written once,
     * 0 at a padding column. */
#pragma unroll
    for (int mi = 0; mi < MW; mi++)
#pragma unroll
        for (int j = 0; j < NW; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int rr = wr + 16 * mi + vnm_c_row(lane, i), c = wc + 8 * j + vnm_c_col(lane, i);
                const int64_t r = r0 + rr, kt = kt0 + c / 32, g = kt * 8 + (c % 32) / 4;
                if (r >= w.R || g >= w.G) continue;
                unsigned nib = vnm_meta_nibble(w.meta + ((rt0 + rr / 16) * w.k_tiles + kt) * 16, rr % 16,
                                               (c % 32) / 4);
                float v = gs[c] >= 0 ? acc[mi][j][i] : 0.0f;
                if ((int)(nib & 3) == (c & 3)) dvalues[r * 2 * w.G + 2 * g] = v;
                if ((int)(nib >> 2) == (c & 3)) dvalues[r * 2 * w.G + 2 * g + 1] = v;
            }
}

/* ---- input gradient: dx = dY·W (k_dx) --------------------------------------------- */

/* One stage of k_dx's ring: row tile rt's 16 dY columns for the CTA's BN
 * batch rows and its KT packed tiles (zeros past the last k-tile). */
template <int BN, int KT>
static __device__ inline void dx_load_stage(unsigned char *st, const vnk_vnm &w, const uint16_t *dy,
                                            int64_t B, bool aligned, int64_t n0, int64_t kt0, int64_t rt)
{
    for (int q = threadIdx.x; q < vnm_dx_copies(BN, KT); q += VNM_DX_THREADS) {
        vnm_copy c = vnm_dx_copy(q, BN);
        if (c.kind == VNM_COPY_X) {
            copy_dy8((uint16_t *)st + vnm_dx_dys_at(c.row, c.piece), dy, w.R, B, aligned, n0 + c.row,
                     rt * 16 + c.piece);
            continue;
        }
        const int64_t kt = kt0 + c.row, t = rt * w.k_tiles + kt;
        const bool in = kt < w.k_tiles;
        if (c.kind == VNM_COPY_A)
            cp_async16(st + vnm_dx_vs_at(BN, c.row) + 16 * c.piece, in ? w.values + t * 256 + 8 * c.piece : w.values, in);
        else
            cp_async16(st + vnm_dx_ms_at(BN, KT, c.row) + 16 * c.piece, in ? w.meta + t * 16 + 4 * c.piece : w.meta, in);
    }
}

/* W[r][c] of a staged packed tile (values vs, metadata ms) as a b16, 0
 * where row r does not keep condensed column c. */
static __device__ inline uint32_t dx_w(const uint16_t *vs, const uint32_t *ms, int r, int c)
{
    int v = vnm_dx_b_value(r, c, vnm_meta_nibble(ms, r, c >> 2));
    return v >= 0 ? vs[v] : 0u;
}

/* The contribution of one stage (row tile rt) to the lane's elements of
 * accs, from the kept weights only: the mma also multiplies the zeros of
 * the positions a row does not keep, and 0 · Inf is NaN where the CPU,
 * which reads kept weights only, stays finite. Taken by a warp whose dY
 * fragments hold an Inf or a NaN. It adds into accs directly (elements of
 * the warp's own columns, as in dx_flush), with loops left rolled, so that
 * the rare path adds no registers to the kernel's loop. */
template <bool BF16, int BN, int KT>
static __device__ inline void dx_kept_only(const unsigned char *st, const vnk_vnm &w, int64_t rt,
                                           float *accs, int64_t ld, int64_t kt0, int64_t col0,
                                           int lane, int warp)
{
    const int64_t ccols = w.k_tiles * 32;
    const int32_t *gather = w.gather + rt * 16 / w.V * ccols;
    const uint16_t *dys = (const uint16_t *)st;
#pragma unroll 1
    for (int j = 0; j < KT; j++) {
        const uint16_t *vs = (const uint16_t *)(st + vnm_dx_vs_at(BN, j));
        const uint32_t *ms = (const uint32_t *)(st + vnm_dx_ms_at(BN, KT, j));
#pragma unroll 1
        for (int e = 0; e < BN / 16 * 4; e++) { /* m-tile e / 4, element e % 4 */
            const int n = 16 * (e / 4) + vnm_c_row(lane, e % 4), c = 8 * warp + vnm_c_col(lane, e % 4);
            const int64_t cc = (kt0 + j) * 32 + c;
            const int32_t col = cc < ccols ? gather[cc] : -1;
            if (col < 0) continue;
            float sum = 0;
#pragma unroll 1
            for (int r = 0; r < 16; r++) {
                int v = vnm_dx_b_value(r, c, vnm_meta_nibble(ms, r, c >> 2));
                if (v >= 0) sum += half_to_float<BF16>(dys[vnm_dx_dys_at(n, r)]) * half_to_float<BF16>(vs[v]);
            }
            accs[n * ld + (col - col0)] += sum;
        }
    }
}

/* Adds a block's accumulators into accs at the block's gathered columns
 * (gather: the block's row of the table). */
template <int BN, int KT>
static __device__ inline void dx_flush(float (&d)[BN / 16][KT][4], float *accs, int64_t ld,
                                       const int32_t *gather, int64_t kt0, int64_t col0,
                                       int64_t ccols, int lane, int warp)
{
#pragma unroll
    for (int m = 0; m < BN / 16; m++)
#pragma unroll
        for (int j = 0; j < KT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int64_t cc = (kt0 + j) * 32 + 8 * warp + vnm_c_col(lane, i);
                const int32_t col = cc < ccols ? gather[cc] : -1;
                if (col >= 0) accs[(16 * m + vnm_c_row(lane, i)) * ld + (col - col0)] += d[m][j][i];
                d[m][j][i] = 0;
            }
}

/* Grid: (⌈k_tiles / KT⌉, ⌈B / BN⌉), VNM_DX_THREADS threads; dynamic shared
 * memory vnm_dx_smem: the f32 tile accs, then the ring (the schedule and
 * every index: vnm_sptc_index.h). With only_if non-NULL, every CTA returns
 * at once unless *only_if is non-zero (the dense path's guard: see
 * vnk_vnm_spmm_t_if). */
template <int BN, int KT, bool BF16>
__global__ void __launch_bounds__(VNM_DX_THREADS) k_dx(vnk_vnm w, const uint16_t *dy, bool aligned,
                                                       int64_t B, float *dx, const int *only_if)
{
    if (only_if && !*only_if) return; /* the same for every thread: no barrier is left waiting */
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int MTB = BN / 16;
    const int SB = vnm_dx_stage_bytes(BN, KT);
    const int64_t ld = vnm_dx_ld(w.M, KT), span = (int64_t)KT * 8 * w.M, rows = w.row_tiles;
    float *accs = (float *)smem;
    unsigned char *ring = smem + BN * ld * 4; /* a multiple of 64 bytes: BN % 16 == 0 */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = vnm_dx_col(lane, warp);
    const int64_t kt0 = (int64_t)blockIdx.x * KT, n0 = (int64_t)blockIdx.y * BN;
    const int64_t col0 = kt0 * 8 * w.M, ccols = w.k_tiles * 32;

    for (int64_t q = threadIdx.x; q < BN * ld; q += VNM_DX_THREADS) accs[q] = 0;
    for (int s = 0; s < VNM_DX_STAGES - 1; s++) {
        if (s < rows) dx_load_stage<BN, KT>(ring + s * SB, w, dy, B, aligned, n0, kt0, s);
        cp_async_commit();
    }
    float d[MTB][KT][4] = {};
    for (int64_t rt = 0; rt < rows; rt++) {
        cp_async_wait<VNM_DX_STAGES - 2>();
        __syncthreads(); /* row tile rt is in; every warp is done with rt − 1 */
        const int64_t next = rt + VNM_DX_STAGES - 1;
        if (next < rows)
            dx_load_stage<BN, KT>(ring + (next % VNM_DX_STAGES) * SB, w, dy, B, aligned, n0, kt0, next);
        cp_async_commit();

        const unsigned char *st = ring + (rt % VNM_DX_STAGES) * SB;
        uint32_t a[MTB][4], b[KT][2];
        bool bad = false;
#pragma unroll
        for (int m = 0; m < MTB; m++) {
            ldmatrix_x4(a[m], (const uint16_t *)st +
                                  vnm_dx_dys_at(16 * m + vnm_ldm_a_row(lane), vnm_ldm_a_k(lane)));
#pragma unroll
            for (int i = 0; i < 4; i++) bad |= nonfinite_pair<BF16>(a[m][i]);
        }
#pragma unroll
        for (int j = 0; j < KT; j++) {
            const uint16_t *vs = (const uint16_t *)(st + vnm_dx_vs_at(BN, j));
            const uint32_t *ms = (const uint32_t *)(st + vnm_dx_ms_at(BN, KT, j));
#pragma unroll
            for (int i = 0; i < 2; i++)
                b[j][i] = dx_w(vs, ms, vnm_dx_b_row(lane, i, 0), c) |
                          dx_w(vs, ms, vnm_dx_b_row(lane, i, 1), c) << 16;
        }
        if (__any_sync(0xffffffffu, bad)) /* rare: Inf or NaN in this stage of dY */
            dx_kept_only<BF16, BN, KT>(st, w, rt, accs, ld, kt0, col0, lane, warp);
        else
#pragma unroll
            for (int m = 0; m < MTB; m++)
#pragma unroll
                for (int j = 0; j < KT; j++) mma_dense<BF16>(d[m][j], a[m], b[j]);
        /* The block's last row tile: its sums go to accs (the warp's own
         * columns: see vnm_sptc_index.h). */
        if ((rt + 1) * 16 % w.V == 0 || rt + 1 == rows)
            dx_flush<BN, KT>(d, accs, ld, w.gather + rt * 16 / w.V * ccols, kt0, col0, ccols, lane, warp);
    }
    cp_async_wait<0>();
    __syncthreads(); /* every warp's last flush is in */
    for (int64_t q = threadIdx.x; q < BN * span; q += VNM_DX_THREADS) {
        const int64_t n = q / span, x = q % span;
        if (n0 + n < B && col0 + x < w.K) dx[(n0 + n) * w.K + col0 + x] = accs[n * ld + x];
    }
}

/* ---- conversions before the kernels ----------------------------------------------- */


/* out[j] = values[src[j]] (0 where src[j] < 0), grid-stride. */
template <typename T>
__global__ void k_pack_values(const int32_t *src, int64_t n, const float *values, T *out)
{
    for (int64_t j = VNK_GRID_START; j < n; j += VNK_GRID_STEP)
        out[j] = vnk__round_half<T>(src[j] >= 0 ? values[src[j]] : 0.0f);
}

/* Grid: (⌈ldx/32⌉, ⌈K/32⌉), 32 × 8 threads. A 32 × 32 tile goes through
 * shared memory so that both the reads of x and the writes of xt are
 * coalesced; the extra column of the tile keeps the transposed reads off
 * one bank. */
template <typename T>
__global__ void k_transpose_input(const float *x, int64_t B, int64_t K, T *xt, int64_t ldx)
{
    __shared__ float tile[32][33];
    const int64_t b0 = (int64_t)blockIdx.x * 32, k0 = (int64_t)blockIdx.y * 32;
    for (int i = threadIdx.y; i < 32; i += 8) {
        int64_t b = b0 + i, k = k0 + threadIdx.x;
        tile[i][threadIdx.x] = b < B && k < K ? x[b * K + k] : 0.0f;
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {
        int64_t k = k0 + i, b = b0 + threadIdx.x;
        if (k < K && b < ldx) xt[k * ldx + b] = vnk__round_half<T>(tile[threadIdx.x][i]);
    }
}

/* ---- host side ------------------------------------------------------------------ */

static int check_matrix(const char *op, const vnk_vnm *w)
{
    if (!w || !w->values || !w->meta || !w->gather)
        return vnk__fail("%s: expected a packed V:N:M matrix on the device, got NULL", op);
    if (w->dtype != VN_BF16 && w->dtype != VN_F16)
        return vnk__fail("%s: expected dtype bf16 or f16, got %s", op, vn_dtype_name(w->dtype));
    if (w->V % 16 != 0)
        return vnk__fail("%s: V must be a multiple of 16 (one mma tile of rows), got V=%lld", op,
                         (long long)w->V);
    if (w->row_tiles != (w->R + 15) / 16 || w->k_tiles != (w->G + 7) / 8 ||
        w->nblocks != (w->R + w->V - 1) / w->V)
        return vnk__fail("%s: tile counts (%lld, %lld, %lld blocks) do not fit R=%lld, G=%lld, V=%lld",
                         op, (long long)w->row_tiles, (long long)w->k_tiles, (long long)w->nblocks,
                         (long long)w->R, (long long)w->G, (long long)w->V);
    return 0;
}

static int check_xt(const char *op, const void *xt, int64_t ldx, int64_t B)
{
    if (B == 0) return 0; /* nothing is read */
    if (!xt) return vnk__fail("%s: xt is NULL", op);
    if (ldx < (B + 7) / 8 * 8 || ldx % 8 != 0 || ((uintptr_t)xt & 15) != 0)
        return vnk__fail("%s: xt needs a row stride that is a multiple of 8 and at least B=%lld "
                         "rounded up to 8 (got %lld) and 16-byte alignment", op, (long long)B,
                         (long long)ldx);
    return 0;
}

/* Launches k_spmm<BM> (dynamic shared memory: the stages and, when it
 * fits, the gather row). */
template <int BM>
static int launch_spmm(float *y, const vnk_vnm *w, const uint16_t *xt, int64_t ldx,
                       const float *bias, int64_t B)
{
    int64_t gbytes = vnm_fwd_gather_bytes(w->k_tiles);
    size_t smem = (size_t)VNM_FWD_STAGES * vnm_fwd_stage_bytes(BM) + (size_t)gbytes;
    int64_t ny = (B + VNM_FWD_BN(BM) - 1) / VNM_FWD_BN(BM);
    if (ny > 65535)
        return vnk__fail("vnk_vnm_spmm: B=%lld needs more than 65535 batch tiles", (long long)B);
    dim3 grid((unsigned)((w->row_tiles * 16 + BM - 1) / BM), (unsigned)ny);
    bool bf16 = w->dtype == VN_BF16;
    const void *fn = bf16 ? (const void *)k_spmm<BM, true> : (const void *)k_spmm<BM, false>;
    if (vnk__cuda(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                  "vnk_vnm_spmm: allowing %zu bytes of shared memory", smem))
        return 1;
    if (bf16)
        k_spmm<BM, true><<<grid, VNM_FWD_THREADS, smem>>>(*w, xt, ldx, B, bias, y, gbytes > 0);
    else
        k_spmm<BM, false><<<grid, VNM_FWD_THREADS, smem>>>(*w, xt, ldx, B, bias, y, gbytes > 0);
    return vnk__launched("vnk_vnm_spmm (k_spmm)");
}

#ifdef VNK_HAVE_SM90A
/* kernels/vnm_wgmma.cu (sm_90a code): launches k_spmm_wgmma. */
int vnk__vnm_spmm_wgmma(float *y, const vnk_vnm *w, const uint16_t *xt, int64_t ldx, const float *bias,
                        int64_t B);
#endif

/* Why k_spmm_wgmma cannot run w on the current device, or NULL when it can
 * (the rule of kernels.h, vnk_vnm_fwd). */
static const char *wgmma_unusable(const vnk_vnm *w)
{
#ifndef VNK_HAVE_SM90A
    return "libvenom was built without the sm_90a code (VENOM_CUDA_SM90A=OFF)";
#else
    if (!vnm_wg_fits(w->V)) return "V is not a multiple of 64";
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        (void)cudaGetLastError(); /* not left for the next launch check */
        return "the device's compute capability could not be read";
    }
    if (major != 9 || minor != 0) return "the device's compute capability is not 9.0 (sm_90a code runs only there)";
    return NULL;
#endif
}

vnk_vnm_fwd vnk_vnm_fwd_auto(const vnk_vnm *w)
{
    return w && !wgmma_unusable(w) ? VNK_VNM_FWD_WGMMA : VNK_VNM_FWD_MMA_SP;
}

int vnk_vnm_spmm(float *y, const vnk_vnm *w, const void *xt, int64_t ldx, const float *bias,
                 int64_t B)
{
    return vnk_vnm_spmm_with(VNK_VNM_FWD_AUTO, y, w, xt, ldx, bias, B);
}

int vnk_vnm_spmm_with(vnk_vnm_fwd kernel, float *y, const vnk_vnm *w, const void *xt, int64_t ldx,
                      const float *bias, int64_t B)
{
    if (check_matrix("vnk_vnm_spmm", w) || check_xt("vnk_vnm_spmm", xt, ldx, B)) return 1;
    if (!y) return vnk__fail("vnk_vnm_spmm: y is NULL");
    if (kernel != VNK_VNM_FWD_AUTO && kernel != VNK_VNM_FWD_MMA_SP && kernel != VNK_VNM_FWD_WGMMA)
        return vnk__fail("vnk_vnm_spmm: unknown kernel %d", (int)kernel);
    const char *why = kernel == VNK_VNM_FWD_MMA_SP ? "" : wgmma_unusable(w);
    if (kernel == VNK_VNM_FWD_WGMMA && why)
        return vnk__fail("vnk_vnm_spmm: the wgmma kernel cannot run V=%lld here: %s", (long long)w->V, why);
    if (B == 0) return 0;
    const uint16_t *x = (const uint16_t *)xt;
#ifdef VNK_HAVE_SM90A
    if (!why) return vnk__vnm_spmm_wgmma(y, w, x, ldx, bias, B);
#endif
    switch (vnm_fwd_bm(w->V)) {
    case 128: return launch_spmm<128>(y, w, x, ldx, bias, B);
    case 64: return launch_spmm<64>(y, w, x, ldx, bias, B);
    case 32: return launch_spmm<32>(y, w, x, ldx, bias, B);
    default: return launch_spmm<16>(y, w, x, ldx, bias, B);
    }
}

/* Launches k_sddmm<MT> (static shared memory). */
template <int MT>
static void launch_sddmm(float *dvalues, const vnk_vnm *w, const uint16_t *dy, const uint16_t *xt,
                         int64_t ldx, int64_t B)
{
    dim3 grid((unsigned)((w->row_tiles + MT - 1) / MT), (unsigned)((w->k_tiles + VNM_SD_KT - 1) / VNM_SD_KT));
    bool aligned = vnm_dy_aligned(w->R, (uintptr_t)dy);
    if (w->dtype == VN_BF16)
        k_sddmm<MT, true><<<grid, 128>>>(*w, dy, aligned, xt, ldx, B, dvalues);
    else
        k_sddmm<MT, false><<<grid, 128>>>(*w, dy, aligned, xt, ldx, B, dvalues);
}

int vnk_vnm_sddmm(float *dvalues, const vnk_vnm *w, const void *dy, const void *xt, int64_t ldx,
                  int64_t B)
{
    if (check_matrix("vnk_vnm_sddmm", w) || check_xt("vnk_vnm_sddmm", xt, ldx, B)) return 1;
    if (!dy || !dvalues) return vnk__fail("vnk_vnm_sddmm: dy or dvalues is NULL");
    if ((w->k_tiles + VNM_SD_KT - 1) / VNM_SD_KT > 65535)
        return vnk__fail("vnk_vnm_sddmm: %lld k-tiles exceed the grid's 65535 pairs",
                         (long long)w->k_tiles);
    const uint16_t *d = (const uint16_t *)dy, *x = (const uint16_t *)xt;
    switch (vnm_sddmm_mt(w->V)) {
    case 4: launch_sddmm<4>(dvalues, w, d, x, ldx, B); break;
    case 2: launch_sddmm<2>(dvalues, w, d, x, ldx, B); break;
    default: launch_sddmm<1>(dvalues, w, d, x, ldx, B); break;
    }
    return vnk__launched("vnk_vnm_sddmm (k_sddmm)");
}

/* Launches k_dx<BN, KT> after raising its shared-memory limit. */
template <int BN, int KT>
static int launch_dx(const vnk_vnm *w, const uint16_t *dy, int64_t B, float *dx, const int *only_if)
{
    size_t smem = (size_t)vnm_dx_smem(w->M, BN, KT);
    dim3 grid((unsigned)((w->k_tiles + KT - 1) / KT), (unsigned)((B + BN - 1) / BN));
    if ((B + BN - 1) / BN > 65535)
        return vnk__fail("vnk_vnm_spmm_t: B=%lld needs more than 65535 batch tiles", (long long)B);
    bool bf16 = w->dtype == VN_BF16, aligned = vnm_dy_aligned(w->R, (uintptr_t)dy);
    const void *fn = bf16 ? (const void *)k_dx<BN, KT, true> : (const void *)k_dx<BN, KT, false>;
    if (vnk__cuda(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                  "vnk_vnm_spmm_t: allowing %zu bytes of shared memory", smem))
        return 1;
    if (bf16)
        k_dx<BN, KT, true><<<grid, VNM_DX_THREADS, smem>>>(*w, dy, aligned, B, dx, only_if);
    else
        k_dx<BN, KT, false><<<grid, VNM_DX_THREADS, smem>>>(*w, dy, aligned, B, dx, only_if);
    return vnk__launched("vnk_vnm_spmm_t (k_dx)");
}

int vnk_vnm_spmm_t(float *dx, const vnk_vnm *w, const void *dy, int64_t B)
{
    return vnk_vnm_spmm_t_if(dx, w, dy, B, NULL);
}

int vnk_vnm_spmm_t_if(float *dx, const vnk_vnm *w, const void *dy, int64_t B, const int *only_if)
{
    if (check_matrix("vnk_vnm_spmm_t", w)) return 1;
    if (!dy || !dx) return vnk__fail("vnk_vnm_spmm_t: dy or dx is NULL");
    if (B == 0) return 0;
    int BN = 16, KT = 1;
    if (!vnm_dx_config(w->M, &BN, &KT))
        return vnk__fail("vnk_vnm_spmm_t: M=%lld needs %lld bytes of shared memory even at 16 "
                         "batch rows per block, more than the %d budgeted (M <= 128 fits)",
                         (long long)w->M, (long long)vnm_dx_smem(w->M, 16, 1), VNM_DX_SMEM);
    const uint16_t *d = (const uint16_t *)dy;
    switch (BN * 8 + KT) {
    case 64 * 8 + 4: return launch_dx<64, 4>(w, d, B, dx, only_if);
    case 64 * 8 + 2: return launch_dx<64, 2>(w, d, B, dx, only_if);
    case 64 * 8 + 1: return launch_dx<64, 1>(w, d, B, dx, only_if);
    case 32 * 8 + 1: return launch_dx<32, 1>(w, d, B, dx, only_if);
    default: return launch_dx<16, 1>(w, d, B, dx, only_if);
    }
}

int vnk_vnm_pack_values(void *out, vn_dtype dtype, const float *values, const int32_t *src,
                        int64_t n)
{
    if (!src || !values || !out) return vnk__fail("vnk_vnm_pack_values: an array is NULL");
    if (dtype != VN_BF16 && dtype != VN_F16)
        return vnk__fail("vnk_vnm_pack_values: expected dtype bf16 or f16, got %s",
                         vn_dtype_name(dtype));
    if (n == 0) return 0;
    unsigned blocks = vnk__blocks(n, VNK_THREADS);
    if (dtype == VN_BF16)
        k_pack_values<<<blocks, VNK_THREADS>>>(src, n, values, (__nv_bfloat16 *)out);
    else
        k_pack_values<<<blocks, VNK_THREADS>>>(src, n, values, (__half *)out);
    return vnk__launched("vnk_vnm_pack_values (k_pack_values)");
}

int vnk_vnm_transpose_input(void *xt, vn_dtype dtype, int64_t ldx, const float *x, int64_t B,
                            int64_t K)
{
    if (!x || !xt) return vnk__fail("vnk_vnm_transpose_input: x or xt is NULL");
    if (dtype != VN_BF16 && dtype != VN_F16)
        return vnk__fail("vnk_vnm_transpose_input: expected dtype bf16 or f16, got %s",
                         vn_dtype_name(dtype));
    if (ldx < B) return vnk__fail("vnk_vnm_transpose_input: ldx=%lld is less than B=%lld",
                                  (long long)ldx, (long long)B);
    if (ldx == 0 || K == 0) return 0;
    if ((K + 31) / 32 > 65535)
        return vnk__fail("vnk_vnm_transpose_input: K=%lld needs more than 65535 tiles", (long long)K);
    dim3 grid((unsigned)((ldx + 31) / 32), (unsigned)((K + 31) / 32)), block(32, 8);
    if (dtype == VN_BF16)
        k_transpose_input<<<grid, block>>>(x, B, K, (__nv_bfloat16 *)xt, ldx);
    else
        k_transpose_input<<<grid, block>>>(x, B, K, (__half *)xt, ldx);
    return vnk__launched("vnk_vnm_transpose_input (k_transpose_input)");
}
