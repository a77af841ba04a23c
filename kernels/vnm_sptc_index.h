/* vnm_sptc_index.h — the index arithmetic of the V:N:M Sparse Tensor Core
 * kernels (kernels/vnm_sptc.cu), written once for nvcc and gcc: which tile a
 * CTA and a warp own, which gather row and batch piece a thread copies,
 * where a piece sits in a swizzled shared-memory tile, which fragment
 * element a lane holds, which metadata word and nibble describe it. The
 * kernels call these functions; so do the host packing (engine/sparse/
 * vnm_sptc.c) and the host emulator (tests/c/test_vnm_sptc_emu.c), which
 * replays each kernel's tile schedule on the CPU with a software mma.sp and
 * ldmatrix written from the PTX ISA and compares with the CPU kernels. So a
 * wrong index here fails a CPU test, not only a GPU one.
 *
 * Plain C: no CUDA types. Fragment names follow the PTX ISA: for lane l,
 * gid = l >> 2 ("groupID") and tig = l & 3 ("threadID_in_group"). The
 * packed layout these functions describe is documented in
 * engine/sparse/vnm_sptc.h. */
#ifndef VENOM_KERNELS_VNM_SPTC_INDEX_H
#define VENOM_KERNELS_VNM_SPTC_INDEX_H

#include <stdint.h>

#ifdef __CUDACC__
#define VNM_HD __host__ __device__
#else
#define VNM_HD
#endif

/* ---- mma.sp m16n8k32 (A 2:4 sparse, 16 × 32; B 32 × 8; C/D 16 × 8) ---------- */

/* A: register i (0..3) of a lane holds two values of row gid (i even) or
 * gid + 8 (i odd), from the 4-wide chunk tig (i < 2) or 4 + tig (i ≥ 2). */
static inline VNM_HD int vnm_a_row(int lane, int i) { return (lane >> 2) + 8 * (i & 1); }
static inline VNM_HD int vnm_a_chunk(int lane, int i) { return (lane & 3) + 4 * (i >> 1); }
/* Value h (0/1) of register i of a lane within a packed 256-value tile: one
 * 16-byte load per lane brings its four registers. */
static inline VNM_HD int vnm_a_value(int lane, int i, int h) { return lane * 8 + 2 * i + h; }

/* Metadata (selector 0): lane (gid, 0) holds chunks 0–3 and lane (gid, 1)
 * chunks 4–7, rows gid in bits 0–15 and gid + 8 in bits 16–31. The 16 words
 * of a tile are stored word = 2·gid + (chunk / 4); lanes with tig 2 and 3
 * (not read by the hardware) load word 2·gid + (tig & 1). */
static inline VNM_HD int vnm_meta_word_of(int rr, int chunk) { return 2 * (rr & 7) + (chunk >> 2); }
static inline VNM_HD int vnm_meta_word_lane(int lane) { return 2 * (lane >> 2) + (lane & 1); }
/* The nibble of row rr (0..15), chunk (0..7) inside its word: the first
 * value's position (0..3) in bits 0–1, the second's in bits 2–3. */
static inline VNM_HD int vnm_meta_shift(int rr, int chunk) { return 16 * (rr >> 3) + 4 * (chunk & 3); }
static inline VNM_HD unsigned vnm_meta_nibble(const uint32_t *tile_meta, int rr, int chunk)
{
    return (tile_meta[vnm_meta_word_of(rr, chunk)] >> vnm_meta_shift(rr, chunk)) & 0xfu;
}

/* Whether a row whose nibble is nib keeps position pos (0..3) of the chunk. */
static inline VNM_HD int vnm_kept(unsigned nib, int pos)
{
    return (int)(nib & 3) == pos || (int)(nib >> 2) == pos;
}

/* C/D element i (0..3) of a lane: row gid (+8 for i ≥ 2), column 2·tig (+1
 * for odd i). Also the layout of the dense mma.m16n8k16's C/D. */
static inline VNM_HD int vnm_c_row(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
static inline VNM_HD int vnm_c_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }

/* ---- forward (k_spmm): the tile schedule -------------------------------------
 * A CTA owns BM rows of one V-block (BM = 128, 64, 32 or 16, the largest
 * that divides V) and BN batch rows, with 8 warps as WARPS_M × WARPS_N warp
 * tiles of WM rows × 32 batch rows (WM = min(BM, 64)). Each k-step (a
 * k-tile: 32 condensed columns = 8 groups) a warp loads NT = 4 B fragments
 * (ldmatrix.x4.trans) and MT = WM/16 A fragments and runs MT·NT mma.sp, so
 * each B fragment feeds MT of them and each A fragment NT.
 *
 * A stage of the cp.async pipeline (FWD_STAGES deep) holds, in shared
 * memory: xs, the k-tile's 32 gathered rows of Xᵀ × BN batch (32·BN b16,
 * rows of BN/8 16-byte chunks, chunk q of row c stored at chunk q ^ (c & 7)
 * so that the 8 rows one ldmatrix matrix reads sit in 8 different bank
 * groups); vs, the BM/16 packed A tiles (256 b16 each); ms, their metadata
 * (16 words each). The block's gather row sits in shared memory when it fits
 * FWD_GATHER_SMEM bytes. */
#define VNM_FWD_THREADS 256
#define VNM_FWD_STAGES 3
#define VNM_FWD_WN 32
#define VNM_FWD_NT (VNM_FWD_WN / 8)
#define VNM_FWD_GATHER_SMEM (32 * 1024)
#define VNM_FWD_WM(BM) ((BM) < 64 ? (BM) : 64)
#define VNM_FWD_WARPS_M(BM) ((BM) / VNM_FWD_WM(BM))
#define VNM_FWD_WARPS_N(BM) (8 / VNM_FWD_WARPS_M(BM))
#define VNM_FWD_BN(BM) (VNM_FWD_WARPS_N(BM) * VNM_FWD_WN)
#define VNM_FWD_MT(BM) (VNM_FWD_WM(BM) / 16)

/* BM for a matrix with V rows per block (V a multiple of 16). */
static inline VNM_HD int vnm_fwd_bm(int64_t V)
{
    return V % 128 == 0 ? 128 : V % 64 == 0 ? 64 : V % 32 == 0 ? 32 : 16;
}
/* b16 elements, 32-bit words and bytes of one stage. */
static inline VNM_HD int vnm_fwd_xs_elems(int BM) { return 32 * VNM_FWD_BN(BM); }
static inline VNM_HD int vnm_fwd_vs_elems(int BM) { return BM / 16 * 256; }
static inline VNM_HD int vnm_fwd_ms_words(int BM) { return BM / 16 * 16; }
static inline VNM_HD int vnm_fwd_stage_bytes(int BM)
{
    return 2 * (vnm_fwd_xs_elems(BM) + vnm_fwd_vs_elems(BM)) + 4 * vnm_fwd_ms_words(BM);
}
/* The gather row in shared memory (bytes, 0 when it stays in global). */
static inline VNM_HD int64_t vnm_fwd_gather_bytes(int64_t k_tiles)
{
    return k_tiles * 32 * 4 <= VNM_FWD_GATHER_SMEM ? k_tiles * 32 * 4 : 0;
}

/* Element offset of (row c, batch n) in a swizzled xs stage with BN columns. */
static inline VNM_HD int vnm_fwd_xs_at(int c, int n, int BN)
{
    return c * BN + (((n >> 3) ^ (c & 7)) << 3) + (n & 7);
}
/* The stage slot of k-tile kt. */
static inline VNM_HD int vnm_fwd_slot(int64_t kt) { return (int)(kt % VNM_FWD_STAGES); }

/* The CTA's first row and batch row, and its V-block. */
static inline VNM_HD int64_t vnm_fwd_row0(int64_t bx, int BM) { return bx * BM; }
static inline VNM_HD int64_t vnm_fwd_batch0(int64_t by, int BM) { return by * VNM_FWD_BN(BM); }
/* A warp's first row and batch row inside the CTA tile. */
static inline VNM_HD int vnm_fwd_warp_row(int warp, int BM) { return warp % VNM_FWD_WARPS_M(BM) * VNM_FWD_WM(BM); }
static inline VNM_HD int vnm_fwd_warp_batch(int warp, int BM) { return warp / VNM_FWD_WARPS_M(BM) * VNM_FWD_WN; }

/* The copies of a stage, numbered q = 0 .. vnm_fwd_copies(BM) − 1 and dealt
 * to threads q = tid, tid + 256, ...: first 32 · BN/8 pieces of xs (piece q
 * is row c = q / (BN/8), batch 8·(q % (BN/8))), then 32 lane pieces of each
 * A tile (16 bytes: a lane's 4 registers), then 4 pieces of each tile's
 * metadata (16 bytes each). */
static inline VNM_HD int vnm_fwd_copies(int BM) { return 32 * VNM_FWD_BN(BM) / 8 + BM / 16 * 36; }
enum { VNM_COPY_X, VNM_COPY_A, VNM_COPY_META };
typedef struct {
    int kind;
    int row;   /* X: condensed column c (0..31); A, META: m-tile of the CTA */
    int piece; /* X: first batch row (multiple of 8); A: lane; META: word / 4 */
} vnm_copy;
static inline VNM_HD vnm_copy vnm_fwd_copy(int q, int BM)
{
    const int xp = 32 * VNM_FWD_BN(BM) / 8, per_row = VNM_FWD_BN(BM) / 8;
    vnm_copy c;
    if (q < xp) {
        c.kind = VNM_COPY_X, c.row = q / per_row, c.piece = 8 * (q % per_row);
    } else if (q < xp + BM / 16 * 32) {
        q -= xp;
        c.kind = VNM_COPY_A, c.row = q / 32, c.piece = q % 32;
    } else {
        q -= xp + BM / 16 * 32;
        c.kind = VNM_COPY_META, c.row = q / 4, c.piece = q % 4;
    }
    return c;
}

/* Packed tile index of m-tile mi of a CTA starting at row r0, k-tile kt. */
static inline VNM_HD int64_t vnm_tile(int64_t r0, int mi, int64_t kt, int64_t k_tiles)
{
    return (r0 / 16 + mi) * k_tiles + kt;
}

/* ldmatrix.x4.trans for n-tile j of a warp: lane l gives the address of xs
 * row l (condensed column l: matrix l / 8 covers k rows 8·(l/8)..+7) at the
 * n-tile's first batch row; register m then holds B register m of the
 * mma.sp fragment (k rows 8m + 2·tig, +1; batch column gid). */
static inline VNM_HD int vnm_fwd_ldm_at(int lane, int warp, int j, int BM)
{
    return vnm_fwd_xs_at(lane, vnm_fwd_warp_batch(warp, BM) + 8 * j, VNM_FWD_BN(BM));
}

/* Where accumulator element i of m-tile mi, n-tile j of a lane goes: row
 * and batch row in the output, relative to the CTA's r0, n0. */
static inline VNM_HD int vnm_fwd_out_row(int lane, int warp, int mi, int i, int BM)
{
    return vnm_fwd_warp_row(warp, BM) + 16 * mi + vnm_c_row(lane, i);
}
static inline VNM_HD int vnm_fwd_out_batch(int lane, int warp, int j, int i, int BM)
{
    return vnm_fwd_warp_batch(warp, BM) + 8 * j + vnm_c_col(lane, i);
}

/* ---- dense mma.m16n8k16 (A 16 × 16 row, B 16 × 8 col; dX and SDDMM) ------------ */

/* A register i of a lane: row gid (+8 for odd i), columns c and c + 1 with
 * c = 2·tig (+8 for i ≥ 2). B register i: rows k and k + 1 with k = 2·tig
 * + 8i, column gid. C/D as for mma.sp (vnm_c_row, vnm_c_col). */
static inline VNM_HD int vnm_mma16_a_row(int lane, int i) { return (lane >> 2) + 8 * (i & 1); }
static inline VNM_HD int vnm_mma16_a_col(int lane, int i) { return 2 * (lane & 3) + 8 * (i >> 1); }
static inline VNM_HD int vnm_mma16_b_k(int lane, int i) { return 2 * (lane & 3) + 8 * i; }
static inline VNM_HD int vnm_mma16_b_n(int lane) { return lane >> 2; }

/* ---- dX (k_spmm_t): dx = dY·W ---------------------------------------------------
 * A CTA (128 threads, 4 warps) owns KT k-tiles from kt0 = bx·KT (original
 * columns col0 = kt0·8·M .. col0 + KT·8·M − 1) and BN batch rows from
 * by·BN, and loops over all V-blocks b: dys[n][r] ← dY (batch n, block row
 * r), wc[c][r] ← the block's packed tiles decoded (c: the CTA's condensed
 * column, 0..32·KT − 1), both with row stride V + 8; D (BN × 32·KT) = dys ·
 * wcᵀ by mma.m16n8k16, warp w owning n-tiles w, w + 4, ...; D added into
 * the f32 accumulator at column gather[b][kt0·32 + c] − col0. */
#define VNM_DXT_THREADS 128
#define VNM_DXT_SMEM (96 * 1024) /* every sm_90 part allows it */
/* Shared memory of a CTA with BN batch rows and KT k-tiles: the f32
 * accumulator, dys and wc. */
static inline VNM_HD int64_t vnm_dxt_smem(int64_t V, int64_t M, int BN, int KT)
{
    return (int64_t)BN * KT * 8 * M * 4 + (int64_t)(BN + KT * 32) * (V + 8) * 2;
}
/* The (BN, KT) of the CTA: as many k-tiles, then batch rows, as fit
 * VNM_DXT_SMEM (V, M ≤ 128 always fit at 16 rows); 0 when none does. */
static inline VNM_HD int vnm_dxt_config(int64_t V, int64_t M, int *BN, int *KT)
{
    static const int configs[5][2] = {{64, 4}, {64, 2}, {64, 1}, {32, 1}, {16, 1}};
    for (int i = 0; i < 5; i++)
        if (vnm_dxt_smem(V, M, configs[i][0], configs[i][1]) <= VNM_DXT_SMEM) {
            *BN = configs[i][0], *KT = configs[i][1];
            return 1;
        }
    return 0;
}
static inline VNM_HD int vnm_dxt_ld(int64_t V) { return (int)V + 8; }
static inline VNM_HD int vnm_dxt_ntile(int warp, int j) { return warp + 4 * j; }
/* The decode of (tile, lane, register) number q of a CTA with KT k-tiles. */
typedef struct {
    int i, lane, kk, mt; /* register, lane, k-tile of the CTA, row tile of the block */
} vnm_dxt_item;
static inline VNM_HD vnm_dxt_item vnm_dxt_decode_item(int q, int KT)
{
    vnm_dxt_item d;
    d.i = q & 3, d.lane = (q >> 2) & 31, d.kk = (q >> 7) % KT, d.mt = (q >> 7) / KT;
    return d;
}

/* ---- SDDMM (k_sddmm): dvalues = dYᵀ·X at the kept positions ------------------------
 * A CTA (128 threads, 4 warps) owns MT row tiles (16·MT rows of one V-block:
 * MT = 4, 2 or 1, the most that keeps the CTA in one block) × one k-tile (32
 * condensed columns) and walks the batch in chunks of VNM_SDDMM_CHUNK rows:
 * dyt[r][n] ← dY and xs[c][n] ← X's gathered columns (row stride
 * VNM_SDDMM_LD), then D (16·MT × 32) += dyt · xsᵀ by mma.m16n8k16 (k = batch
 * rows), warp w owning n-tile w (condensed columns 8w..8w + 7). */
#define VNM_SDDMM_CHUNK 32
#define VNM_SDDMM_LD (VNM_SDDMM_CHUNK + 8)
static inline VNM_HD int vnm_sddmm_mt(int64_t V) { return V % 64 == 0 ? 4 : V % 32 == 0 ? 2 : 1; }

#endif
