/* vnm_wgmma_index.h — the index arithmetic of the sm_90a forward V:N:M
 * kernel (kernels/vnm_wgmma.cu, k_spmm_wgmma), written once for nvcc and
 * gcc: the tile a CTA owns, the copies of a pipeline stage, where an element
 * of X sits in the 128-byte-swizzled shared-memory tile that the wgmma B
 * descriptor describes, the descriptor's bits, and which output element an
 * accumulator register holds. The kernel calls these functions; so does the
 * host emulator (tests/c/test_vnm_wgmma_emu.c), which replays the kernel's
 * schedule with a software wgmma.mma_async.sp and a software descriptor
 * walk written from the PTX ISA (tests/c/sptc_emu.h), not from these
 * functions, and compares with the CPU kernel.
 *
 * The schedule. A CTA is one warpgroup (128 threads, warps 0–3) and owns
 * VNM_WG_BM = 64 rows of one V-block (so V % 64 == 0) × VNM_WG_BN = 128
 * batch rows. Per k-tile (32 condensed columns = 8 groups of the block) it
 * runs one
 *   wgmma.mma_async.sp.sync.aligned.m64n128k32.f32.{bf16,f16}.{bf16,f16}
 * with
 *   A (64 × 32, 2:4) from registers: warp w holds rows 16w..16w+15, and the
 *     PTX ISA gives each warp's four A registers and its metadata word the
 *     layout of mma.sp m16n8k32 ("Matrix fragments for warpgroup-level
 *     multiply-accumulate operation with sparse matrix A": each warp
 *     provides 16 rows; Figure "Sparse WGMMA .m64nNk32 metadata layout" is
 *     the mma.sp m16n8k32 one), so warp w loads packed tile (r0/16 + w, kt)
 *     of engine/sparse/vnm_sptc.h as it is: one 16-byte load per lane, the
 *     metadata word vnm_meta_word_lane(lane), sparsity selector 0;
 *   B (32 × 128) from shared memory through a matrix descriptor: the
 *     k-tile's 32 gathered rows of Xᵀ, N-major (imm-trans-b = 1: a row k
 *     holds consecutive batch rows n, as xt does), 128-byte swizzle.
 * A stage of the cp.async ring (VNM_WG_STAGES deep) holds xs (the B tile,
 * 8 KB, first, so 1024-aligned), vs (the 4 packed A tiles, 2 KB) and ms
 * (their metadata, 256 bytes); the stride is rounded up to 1024 bytes so
 * every stage's xs starts on a swizzle-pattern boundary (base offset 0 in
 * the descriptor). The ring starts at the first 1024-aligned shared address
 * of the dynamic shared memory (vnm_wg_pad); the block's gather row follows
 * the ring when it fits VNM_FWD_GATHER_SMEM.
 *
 * The B layout (PTX ISA, "Shared Memory Matrix Layout", canonical layout
 * of an MN-major operand with 128-byte swizzling, T = 8 16-bit elements per
 * 16 bytes: ((T,8,m),(8,k)) : ((1,T,LBO),(8T,SBO)) then Swizzle<3,4,3>):
 * the tile is 4 × 2 swizzle atoms of 8 k-rows × 64 n (1024 bytes, one
 * 128-byte line per k-row). Atom (k/8, n/64) starts at byte (k/8)·SBO +
 * (n/64)·LBO with LBO = 1024 (the next 64 batch rows: "MN-major, swizzled:
 * offset from the first (swizzle-byte-size/16) rows to the next") and SBO =
 * 2048 (the next 8 k-rows: "offset from the first 8 columns to the next 8
 * columns"). Inside an atom, element (k, n) is at byte 128·(k%8) + 2·(n%64)
 * before the swizzle, which XORs address bits 4–6 (the 16-byte chunk in the
 * 128-byte line) with bits 7–9 (the line in the 1024-byte pattern), here
 * k % 8: chunk (n%64)/8 of line k%8 sits at chunk ((n%64)/8) ^ (k%8). So
 * the 8 k-rows of one chunk column lie in 8 different 16-byte bank groups.
 *
 * Plain C: no CUDA types. */
#ifndef VENOM_KERNELS_VNM_WGMMA_INDEX_H
#define VENOM_KERNELS_VNM_WGMMA_INDEX_H

#include "vnm_sptc_index.h"

#define VNM_WG_THREADS 128
#define VNM_WG_BM 64
#define VNM_WG_BN 128
#define VNM_WG_STAGES 5
#define VNM_WG_LBO 1024
#define VNM_WG_SBO 2048
#define VNM_WG_XS_BYTES (32 * VNM_WG_BN * 2)
#define VNM_WG_VS_BYTES (VNM_WG_BM / 16 * 512)
#define VNM_WG_MS_BYTES (VNM_WG_BM / 16 * 64)
#define VNM_WG_STAGE_BYTES ((VNM_WG_XS_BYTES + VNM_WG_VS_BYTES + VNM_WG_MS_BYTES + 1023) / 1024 * 1024)
/* The pipeline. One wgmma stays in flight while the next is issued
 * (wgmma.wait_group VNM_WG_INFLIGHT after each commit), so a slot is free
 * for new copies only two iterations after its k-tile was read: the copies
 * run VNM_WG_AHEAD = STAGES − 2 k-tiles ahead (the prologue loads k-tiles
 * 0 .. AHEAD − 1, iteration kt loads kt + AHEAD into the slot of kt − 2,
 * whose wgmma every warp has retired before iteration kt's barrier). The
 * A registers and the metadata word alternate between two sets (k-tile
 * parity), so those of the wgmma in flight are not overwritten.
 * cp.async groups a thread may leave pending when it waits for k-tile kt:
 * AHEAD from the prologue plus one per earlier iteration are committed,
 * kt's is number kt (from 0), so the AHEAD − 1 after it may be in flight. */
#define VNM_WG_INFLIGHT 1
#define VNM_WG_AHEAD (VNM_WG_STAGES - 2)
#define VNM_WG_PENDING (VNM_WG_AHEAD - 1)
/* The wgmma's scale-d predicate for k-tile kt: the first one writes
 * D = A·B over accumulators that are never zeroed (a zeroing mov inside
 * the pipeline makes ptxas serialize the wgmmas), the others add. */
static inline VNM_HD int vnm_wg_scale_d(int64_t kt) { return kt > 0; }
/* Accumulator registers per thread: N/2 f32 for m64nNk32 (64 × N / 128). */
#define VNM_WG_ACC (VNM_WG_BN / 2)
/* A metadata word for a warp whose rows lie past the matrix: every chunk
 * keeps positions (0, 1) (nibble 0b0100), a valid pattern; its values are
 * zeros. */
#define VNM_WG_META_PAD 0x44444444u

/* Whether the wgmma kernel can run a matrix with V rows per block: a
 * 64-row CTA tile must stay in one block (one gather row). */
static inline VNM_HD int vnm_wg_fits(int64_t V) { return V % VNM_WG_BM == 0; }

/* Bytes from a shared address to the next multiple of 1024 (0 if it is
 * one): the ring starts there. */
static inline VNM_HD uint32_t vnm_wg_pad(uint32_t addr) { return (1024u - (addr & 1023u)) & 1023u; }

/* Dynamic shared memory of a launch: the worst-case pad, the ring, the
 * gather row (gbytes, from vnm_fwd_gather_bytes). */
static inline VNM_HD int64_t vnm_wg_smem(int64_t gbytes)
{
    return 1024 + (int64_t)VNM_WG_STAGES * VNM_WG_STAGE_BYTES + gbytes;
}

/* Byte offset, inside a stage's xs, of X element (k-row k of the k-tile,
 * batch row n of the CTA), 0 ≤ k < 32, 0 ≤ n < 128 (see the header). */
static inline VNM_HD int vnm_wg_xs_at(int k, int n)
{
    return (k >> 3) * VNM_WG_SBO + (n >> 6) * VNM_WG_LBO + (k & 7) * 128 +
           ((((n >> 3) & 7) ^ (k & 7)) << 4) + (n & 7) * 2;
}

/* The wgmma matrix descriptor of the B tile at shared address addr
 * (1024-aligned): bits 0–13 addr >> 4, 16–29 LBO >> 4, 32–45 SBO >> 4
 * (each field "(x & 0x3FFFF) >> 4"), 49–51 base offset 0 (the tile starts
 * on a pattern boundary), 62–63 swizzle mode 1 (128-byte). */
static inline VNM_HD uint64_t vnm_wg_desc(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | (uint64_t)((VNM_WG_LBO & 0x3FFFF) >> 4) << 16 |
           (uint64_t)((VNM_WG_SBO & 0x3FFFF) >> 4) << 32 | (uint64_t)1 << 62;
}

/* The copies of a stage, q = 0 .. VNM_WG_COPIES − 1, dealt to threads q =
 * tid, tid + 128, ...: first 32 · 16 pieces of xs (piece q: k-row q / 16,
 * batch rows 8·(q % 16)..+7, one 16-byte chunk), then 32 lane pieces of
 * each of the 4 A tiles, then 4 metadata pieces of each. */
#define VNM_WG_COPIES (32 * VNM_WG_BN / 8 + VNM_WG_BM / 16 * 36)
static inline VNM_HD vnm_copy vnm_wg_copy(int q)
{
    const int per_row = VNM_WG_BN / 8, xp = 32 * per_row;
    vnm_copy c;
    if (q < xp) {
        c.kind = VNM_COPY_X, c.row = q / per_row, c.piece = 8 * (q % per_row);
    } else if (q < xp + VNM_WG_BM / 16 * 32) {
        q -= xp;
        c.kind = VNM_COPY_A, c.row = q / 32, c.piece = q % 32;
    } else {
        q -= xp + VNM_WG_BM / 16 * 32;
        c.kind = VNM_COPY_META, c.row = q / 4, c.piece = q % 4;
    }
    return c;
}
/* Stage byte offsets of A tile m's lane piece l and metadata piece p. */
static inline VNM_HD int vnm_wg_vs_at(int m, int lane) { return VNM_WG_XS_BYTES + m * 512 + lane * 16; }
static inline VNM_HD int vnm_wg_ms_at(int m, int word) { return VNM_WG_XS_BYTES + VNM_WG_VS_BYTES + m * 64 + word * 4; }

/* The CTA's first row and batch row. */
static inline VNM_HD int64_t vnm_wg_row0(int64_t bx) { return bx * VNM_WG_BM; }
static inline VNM_HD int64_t vnm_wg_batch0(int64_t by) { return by * VNM_WG_BN; }

/* Accumulator register i (0 .. VNM_WG_ACC − 1) of thread tid (warp tid/32,
 * lane gid = (tid%32)/4, tig = tid%4): row 16·warp + gid (+8 when bit 1 of
 * i is set), batch column 8·(i/4) + 2·tig + (i & 1), relative to the CTA's
 * r0, n0 (PTX ISA, "WGMMA .m64nNk16 register fragment layout for
 * accumulator matrix D", which m64nNk32 shares). */
static inline VNM_HD int vnm_wg_d_row(int tid, int i) { return 16 * (tid >> 5) + ((tid & 31) >> 2) + 8 * ((i >> 1) & 1); }
static inline VNM_HD int vnm_wg_d_col(int tid, int i) { return 8 * (i >> 2) + 2 * (tid & 3) + (i & 1); }

#endif
