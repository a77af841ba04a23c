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
 *   sddmm   per V-block, the dense product dYᵀ·X over the 32 condensed
 *           columns of one k-tile (mma m16n8k16), kept only where the row's
 *           metadata says a value sits.
 *   spmm_t  dX = dY·W. Wᵀ is not V:N:M, so no mma.sp: per V-block the
 *           dense mma of dY's V columns with the block's condensed V × 32
 *           slice, scatter-added into the original columns. Several blocks
 *           hit the same columns, so one CTA owns a span of groups and loops
 *           over all blocks, accumulating in shared memory (no atomics, a
 *           deterministic sum). Chosen over dense cuBLAS (dY·W_dense) because
 *           it does 4/M of the dense flops and reads only the kept weights,
 *           while a dense W would have to be rebuilt from the values after
 *           every optimizer step; for M = 4 dense cuBLAS is likely faster
 *           and the engine may pick it (bench/vnm_gpu.c measures both). A
 *           block whose dY slice holds Inf or NaN is summed over its kept
 *           weights only, as the CPU does (the mma would multiply the
 *           zeros of unkept positions: 0 · Inf = NaN).
 * The three kernels' indices are functions of vnm_sptc_index.h, replayed on
 * the CPU by tests/c/test_vnm_sptc_emu.c. */
#include "internal.cuh"
#include "vnm_sptc_index.h"


/* ---- small device helpers ---------------------------------------------------- */

static __device__ inline uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global → shared, asynchronously; zero-filled when !valid. */
static __device__ inline void cp_async16(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
static __device__ inline void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ inline void cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

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

/* Two 16-bit values at p (4-byte aligned) as one register. */
static __device__ inline uint32_t ld_pair(const uint16_t *p) { return *(const uint32_t *)p; }

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

/* ---- SDDMM: dvalues = dYᵀ·X at the kept positions -------------------------------- */

/* Grid: (⌈row_tiles / MT⌉, k_tiles), 128 threads (the schedule of
 * vnm_sptc_index.h). */
template <int MT, bool BF16>
__global__ void __launch_bounds__(128) k_sddmm(vnk_vnm w, const uint16_t *dy, const uint16_t *xt,
                                                int64_t ldx, int64_t B, float *dvalues)
{
    __shared__ __align__(16) uint16_t dyt[16 * MT][VNM_SDDMM_LD]; /* [row][batch] */
    __shared__ __align__(16) uint16_t xs[32][VNM_SDDMM_LD];       /* [condensed col][batch] */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t rt0 = (int64_t)blockIdx.x * MT, kt = blockIdx.y, r0 = rt0 * 16;
    const int64_t block = r0 / w.V;
    const int32_t *gather = w.gather + block * w.k_tiles * 32 + kt * 32;
    float acc[MT][4] = {};
    for (int64_t n0 = 0; n0 < B; n0 += VNM_SDDMM_CHUNK) {
        for (int q = threadIdx.x; q < 16 * MT * VNM_SDDMM_CHUNK; q += 128) {
            int n = q / (16 * MT), r = q % (16 * MT); /* consecutive threads: consecutive rows */
            bool in = n0 + n < B && r0 + r < w.R;
            dyt[r][n] = in ? dy[(n0 + n) * w.R + r0 + r] : 0;
        }
        for (int q = threadIdx.x; q < 32 * VNM_SDDMM_CHUNK; q += 128) {
            int c = q / VNM_SDDMM_CHUNK, n = q % VNM_SDDMM_CHUNK;
            int32_t col = gather[c];
            xs[c][n] = col >= 0 && n0 + n < B ? xt[(int64_t)col * ldx + n0 + n] : 0;
        }
        __syncthreads();
        for (int kk = 0; kk < VNM_SDDMM_CHUNK; kk += 16) {
            const uint16_t *xrow = xs[8 * warp + vnm_mma16_b_n(lane)] + kk;
            uint32_t b[2] = {ld_pair(xrow + vnm_mma16_b_k(lane, 0)), ld_pair(xrow + vnm_mma16_b_k(lane, 1))};
            for (int m = 0; m < MT; m++) {
                uint32_t a[4];
                for (int i = 0; i < 4; i++)
                    a[i] = ld_pair(&dyt[16 * m + vnm_mma16_a_row(lane, i)][kk + vnm_mma16_a_col(lane, i)]);
                mma_dense<BF16>(acc[m], a, b);
            }
        }
        __syncthreads();
    }
    /* Element (row, condensed column c) is kept when c % 4 is one of the
     * row's two positions in chunk c / 4; each kept value is written once. */
    for (int m = 0; m < MT; m++)
        for (int i = 0; i < 4; i++) {
            int rr = vnm_c_row(lane, i), c = 8 * warp + vnm_c_col(lane, i), ch = c >> 2;
            int64_t r = r0 + 16 * m + rr, g = kt * 8 + ch;
            if (r >= w.R || g >= w.G) continue;
            unsigned nib = vnm_meta_nibble(w.meta + ((rt0 + m) * w.k_tiles + kt) * 16, rr, ch);
            float v = gather[c] >= 0 ? acc[m][i] : 0.0f;
            if ((int)(nib & 3) == (c & 3)) dvalues[r * 2 * w.G + 2 * g] = v;
            if ((int)(nib >> 2) == (c & 3)) dvalues[r * 2 * w.G + 2 * g + 1] = v;
        }
}

/* ---- input gradient: dx = dY·W --------------------------------------------------- */

/* The block's contribution to the accumulator from its kept weights only,
 * one thread per (batch row, condensed column): the tensor-core path also
 * multiplies the zeros at the positions a row does not keep, and 0 · Inf is
 * NaN where the CPU kernel, which reads kept weights only, stays finite.
 * Used for a block whose dY slice holds an Inf or a NaN. Not inlined: inline,
 * it raised the register pressure of the whole kernel into spills; as a call
 * it costs a stack frame on this rare path only. */
template <bool BF16> static __device__ inline float half_to_float(uint16_t h)
{
    return BF16 ? __uint_as_float((uint32_t)h << 16) : __half2float(__ushort_as_half(h));
}

template <bool BF16>
static __device__ __noinline__ void spmm_t_kept_only(const vnk_vnm &w, const uint16_t *dys, int ldv,
                                        const uint16_t *wc, float *accs, int64_t span, int64_t b,
                                        int64_t kt0, int cols, int BN)
{
    const int64_t r0 = b * w.V, ccols = w.k_tiles * 32, col0 = kt0 * 8 * w.M;
    for (int q = threadIdx.x; q < BN * cols; q += blockDim.x) {
        int n = q / cols, c = q % cols;
        int64_t cc = kt0 * 32 + c;
        int32_t col = cc < ccols ? w.gather[b * ccols + cc] : -1;
        if (col < 0) continue;
        float sum = 0;
        for (int r = 0; r < w.V && r0 + r < w.R; r++) {
            int64_t t = vnm_tile(r0, r / 16, cc / 32, w.k_tiles);
            unsigned nib = vnm_meta_nibble(w.meta + t * 16, r % 16, (int)(cc % 32) / 4);
            if (vnm_kept(nib, (int)(cc % 4)))
                sum += half_to_float<BF16>(dys[n * ldv + r]) * half_to_float<BF16>(wc[c * ldv + r]);
        }
        accs[n * span + (col - col0)] += sum;
    }
}

/* Grid: (⌈k_tiles / KT⌉, ⌈B / BN⌉), 128 threads; dynamic shared memory:
 * the f32 accumulator BN × KT·8·M (original columns of the CTA's groups),
 * dY's block columns dys[BN][V] and the condensed weights wc[KT·32][V].
 * For each V-block: wc ← the packed tiles decoded (the same reading as
 * vnm_sptc_decode), D (BN × KT·32) = dys · wcᵀ by mma m16n8k16, and D
 * added into the accumulator at the gathered columns. Warp w owns n-tiles
 * w, w + 4, … of every m-tile, so no two threads add into one place. */
template <int BN, int KT, bool BF16>
__global__ void __launch_bounds__(VNM_DXT_THREADS) k_spmm_t(vnk_vnm w, const uint16_t *dy, int64_t B,
                                                            float *dx)
{
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int MTB = BN / 16, NTW = KT; /* m-tiles; n-tiles per warp */
    const int64_t span = (int64_t)KT * 8 * w.M; /* original columns of the CTA */
    const int V = (int)w.V, ldv = vnm_dxt_ld(w.V);
    float *accs = (float *)smem;
    uint16_t *dys = (uint16_t *)(accs + BN * span);
    uint16_t *wc = dys + BN * ldv;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t kt0 = (int64_t)blockIdx.x * KT, n0 = (int64_t)blockIdx.y * BN;
    const int64_t col0 = kt0 * 8 * w.M, ccols = w.k_tiles * 32;
    constexpr uint16_t EXP_MASK = BF16 ? 0x7f80 : 0x7c00; /* all ones: Inf or NaN */

    for (int64_t q = threadIdx.x; q < BN * span; q += VNM_DXT_THREADS) accs[q] = 0;
    for (int64_t b = 0; b < w.nblocks; b++) {
        const int64_t r0 = b * w.V;
        int inf_or_nan = 0;
        for (int q = threadIdx.x; q < BN * V; q += VNM_DXT_THREADS) {
            int n = q / V, r = q % V;
            bool in = n0 + n < B && r0 + r < w.R;
            uint16_t h = in ? dy[(n0 + n) * w.R + r0 + r] : 0;
            inf_or_nan |= (h & EXP_MASK) == EXP_MASK;
            dys[n * ldv + r] = h;
        }
        for (int q = threadIdx.x; q < KT * 32 * ldv; q += VNM_DXT_THREADS) wc[q] = 0;
        inf_or_nan = __syncthreads_or(inf_or_nan);
        /* Decode: one thread per (tile, lane, register) of the block's V/16
         * row tiles and the CTA's KT k-tiles (the reading of vnm_sptc_decode). */
        for (int q = threadIdx.x; q < (V / 16) * KT * 128; q += VNM_DXT_THREADS) {
            vnm_dxt_item d = vnm_dxt_decode_item(q, KT);
            int64_t kt = kt0 + d.kk;
            if (kt >= w.k_tiles || r0 / 16 + d.mt >= w.row_tiles) continue;
            int64_t t = vnm_tile(r0, d.mt, kt, w.k_tiles);
            int rr = vnm_a_row(d.lane, d.i), ch = vnm_a_chunk(d.lane, d.i);
            unsigned nib = vnm_meta_nibble(w.meta + t * 16, rr, ch);
            const uint16_t *v = w.values + t * 256 + vnm_a_value(d.lane, d.i, 0);
            int c = d.kk * 32 + 4 * ch, r = d.mt * 16 + rr;
            wc[(c + (nib & 3)) * ldv + r] = v[0];
            wc[(c + (nib >> 2)) * ldv + r] = v[1];
        }
        __syncthreads();
        if (inf_or_nan) { /* rare: dY holds Inf or NaN in this block */
            spmm_t_kept_only<BF16>(w, dys, ldv, wc, accs, span, b, kt0, KT * 32, BN);
            __syncthreads();
            continue;
        }
        float d[MTB][NTW][4] = {};
        for (int k = 0; k < V; k += 16)
            for (int m = 0; m < MTB; m++) {
                uint32_t a[4];
                for (int i = 0; i < 4; i++)
                    a[i] = ld_pair(dys + (16 * m + vnm_mma16_a_row(lane, i)) * ldv + k +
                                   vnm_mma16_a_col(lane, i));
                for (int j = 0; j < NTW; j++) {
                    const uint16_t *bcol = wc + (8 * vnm_dxt_ntile(warp, j) + vnm_mma16_b_n(lane)) * ldv + k;
                    uint32_t bb[2] = {ld_pair(bcol + vnm_mma16_b_k(lane, 0)),
                                      ld_pair(bcol + vnm_mma16_b_k(lane, 1))};
                    mma_dense<BF16>(d[m][j], a, bb);
                }
            }
        for (int m = 0; m < MTB; m++)
            for (int j = 0; j < NTW; j++)
                for (int i = 0; i < 4; i++) {
                    int n = 16 * m + vnm_c_row(lane, i);
                    int c = 8 * vnm_dxt_ntile(warp, j) + vnm_c_col(lane, i);
                    int64_t cc = kt0 * 32 + c;
                    int32_t col = cc < ccols ? w.gather[b * ccols + cc] : -1;
                    if (col >= 0) accs[n * span + (col - col0)] += d[m][j][i];
                }
        __syncthreads(); /* dys, wc and the accumulator are reused */
    }
    for (int64_t q = threadIdx.x; q < BN * span; q += VNM_DXT_THREADS) {
        int64_t n = q / span, col = col0 + q % span;
        if (n0 + n < B && col < w.K) dx[(n0 + n) * w.K + col] = accs[q];
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

/* k_sddmm<MT, bf16> for MT = vnm_sddmm_mt(V). */
#define DISPATCH_MT(mt, bf16, KERNEL, ...)                                    \
    switch (mt * 2 + (bf16 ? 1 : 0)) {                                        \
    case 8: KERNEL<4, false><<<__VA_ARGS__; break;                            \
    case 9: KERNEL<4, true><<<__VA_ARGS__; break;                             \
    case 4: KERNEL<2, false><<<__VA_ARGS__; break;                            \
    case 5: KERNEL<2, true><<<__VA_ARGS__; break;                             \
    case 2: KERNEL<1, false><<<__VA_ARGS__; break;                            \
    default: KERNEL<1, true><<<__VA_ARGS__; break;                            \
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

int vnk_vnm_spmm(float *y, const vnk_vnm *w, const void *xt, int64_t ldx, const float *bias,
                 int64_t B)
{
    if (check_matrix("vnk_vnm_spmm", w) || check_xt("vnk_vnm_spmm", xt, ldx, B)) return 1;
    if (!y) return vnk__fail("vnk_vnm_spmm: y is NULL");
    if (B == 0) return 0;
    const uint16_t *x = (const uint16_t *)xt;
    switch (vnm_fwd_bm(w->V)) {
    case 128: return launch_spmm<128>(y, w, x, ldx, bias, B);
    case 64: return launch_spmm<64>(y, w, x, ldx, bias, B);
    case 32: return launch_spmm<32>(y, w, x, ldx, bias, B);
    default: return launch_spmm<16>(y, w, x, ldx, bias, B);
    }
}

int vnk_vnm_sddmm(float *dvalues, const vnk_vnm *w, const void *dy, const void *xt, int64_t ldx,
                  int64_t B)
{
    if (check_matrix("vnk_vnm_sddmm", w) || check_xt("vnk_vnm_sddmm", xt, ldx, B)) return 1;
    if (!dy || !dvalues) return vnk__fail("vnk_vnm_sddmm: dy or dvalues is NULL");
    int mt = vnm_sddmm_mt(w->V);
    dim3 grid((unsigned)(w->row_tiles + mt - 1) / mt, (unsigned)w->k_tiles);
    if (w->k_tiles > 65535)
        return vnk__fail("vnk_vnm_sddmm: %lld k-tiles exceed the grid's 65535", (long long)w->k_tiles);
    const uint16_t *d = (const uint16_t *)dy, *x = (const uint16_t *)xt;
    DISPATCH_MT(mt, w->dtype == VN_BF16, k_sddmm, grid, 128>>>(*w, d, x, ldx, B, dvalues))
    return vnk__launched("vnk_vnm_sddmm (k_sddmm)");
}

/* Launches k_spmm_t<BN, KT> after raising its shared-memory limit. */
template <int BN, int KT>
static int launch_spmm_t(const vnk_vnm *w, const uint16_t *dy, int64_t B, float *dx)
{
    size_t smem = (size_t)vnm_dxt_smem(w->V, w->M, BN, KT);
    dim3 grid((unsigned)((w->k_tiles + KT - 1) / KT), (unsigned)((B + BN - 1) / BN));
    if ((B + BN - 1) / BN > 65535)
        return vnk__fail("vnk_vnm_spmm_t: B=%lld needs more than 65535 batch tiles", (long long)B);
    bool bf16 = w->dtype == VN_BF16;
    const void *fn = bf16 ? (const void *)k_spmm_t<BN, KT, true> : (const void *)k_spmm_t<BN, KT, false>;
    if (vnk__cuda(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                  "vnk_vnm_spmm_t: allowing %zu bytes of shared memory", smem))
        return 1;
    if (bf16)
        k_spmm_t<BN, KT, true><<<grid, VNM_DXT_THREADS, smem>>>(*w, dy, B, dx);
    else
        k_spmm_t<BN, KT, false><<<grid, VNM_DXT_THREADS, smem>>>(*w, dy, B, dx);
    return vnk__launched("vnk_vnm_spmm_t (k_spmm_t)");
}

int vnk_vnm_spmm_t(float *dx, const vnk_vnm *w, const void *dy, int64_t B)
{
    if (check_matrix("vnk_vnm_spmm_t", w)) return 1;
    if (!dy || !dx) return vnk__fail("vnk_vnm_spmm_t: dy or dx is NULL");
    if (B == 0) return 0;
    if (w->V > 128)
        return vnk__fail("vnk_vnm_spmm_t: V must be at most 128 (a block's dY columns sit in "
                         "shared memory), got V=%lld", (long long)w->V);
    int BN = 16, KT = 1;
    if (!vnm_dxt_config(w->V, w->M, &BN, &KT))
        return vnk__fail("vnk_vnm_spmm_t: M=%lld with V=%lld needs %lld bytes of shared memory "
                         "even at 16 batch rows per block, more than the %d budgeted (M <= 128 "
                         "fits)", (long long)w->M, (long long)w->V,
                         (long long)vnm_dxt_smem(w->V, w->M, 16, 1), VNM_DXT_SMEM);
    const uint16_t *d = (const uint16_t *)dy;
    switch (BN * 8 + KT) {
    case 64 * 8 + 4: return launch_spmm_t<64, 4>(w, d, B, dx);
    case 64 * 8 + 2: return launch_spmm_t<64, 2>(w, d, B, dx);
    case 64 * 8 + 1: return launch_spmm_t<64, 1>(w, d, B, dx);
    case 32 * 8 + 1: return launch_spmm_t<32, 1>(w, d, B, dx);
    default: return launch_spmm_t<16, 1>(w, d, B, dx);
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
