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

/* ---- shared by dX and SDDMM --------------------------------------------------- */

/* A swizzled b16 tile of rows of W 16-byte chunks (W = 2, 4 or 8): chunk q
 * of row n is stored at chunk q ^ s(n), s(n) = (n / (8/W)) % W, so the 8
 * consecutive rows one ldmatrix matrix reads sit in 8 different 16-byte
 * bank groups (8 rows × W chunks span 8·W groups; the XOR spreads the 8/W
 * rows that would share a group over the W chunks of a row). Element
 * offset of (row n, element e): */
static inline VNM_HD int vnm_swz_at(int n, int e, int W)
{
    return n * 8 * W + ((((e >> 3) ^ ((n / (8 / W)) % W))) << 3) + (e & 7);
}

/* dY's rows are copied with 16-byte cp.async when they are 16-byte aligned
 * (R % 8 == 0 and an aligned base), else element by element. */
static inline VNM_HD int vnm_dy_aligned(int64_t R, uintptr_t dy) { return R % 8 == 0 && dy % 16 == 0; }

/* ldmatrix.x4 lane addresses, as (row, element) of a stored tile: lane l
 * gives row l % 8 of matrix l / 8.
 *   A of mma.m16n8k16 from a [row][k] tile (no .trans): matrices (rows 0–7,
 *   k 0–7), (rows 8–15, k 0–7), (rows 0–7, k 8–15), (rows 8–15, k 8–15)
 *   are registers a0..a3; lane l addresses row (l % 8) + 8·((l / 8) & 1),
 *   element 8·(l / 16).
 *   A from a [k][row] tile (.trans): the same matrices, transposed in
 *   storage: lane l addresses k row (l % 8) + 8·(l / 16), element
 *   8·((l / 8) & 1).
 *   B of two n-tiles from an [n][k] tile (no .trans): matrices (n-tile 0,
 *   k 0–7), (n-tile 0, k 8–15), (n-tile 1, k 0–7), (n-tile 1, k 8–15) are
 *   b0, b1 of the first and b0, b1 of the second; lane l addresses n row
 *   (l % 8) + 8·(l / 16), element 8·((l / 8) & 1). */
static inline VNM_HD int vnm_ldm_a_row(int lane) { return (lane & 7) + 8 * ((lane >> 3) & 1); }
static inline VNM_HD int vnm_ldm_a_k(int lane) { return 8 * (lane >> 4); }
static inline VNM_HD int vnm_ldm_at_k(int lane) { return (lane & 7) + 8 * (lane >> 4); }
static inline VNM_HD int vnm_ldm_at_row(int lane) { return 8 * ((lane >> 3) & 1); }
static inline VNM_HD int vnm_ldm_b_n(int lane) { return (lane & 7) + 8 * (lane >> 4); }
static inline VNM_HD int vnm_ldm_b_k(int lane) { return 8 * ((lane >> 3) & 1); }

/* ---- dX (k_dx): dx = dY·W ------------------------------------------------------
 * Wᵀ is not V:N:M, so no mma.sp: per V-block, the dense mma.m16n8k16 of
 * dY's block columns with the block's condensed weights (a V × 32 slice per
 * k-tile), scatter-added into the original columns through gather.
 *
 * A CTA (128 threads, 4 warps) owns BN batch rows and KT k-tiles (original
 * columns col0 = kt0·8M .. col0 + KT·8M − 1) and walks all row tiles of W
 * (16 rows: a tile never straddles two blocks since V % 16 == 0) through a
 * VNM_DX_STAGES-deep cp.async ring; a stage holds dY's 16 block columns for
 * the BN rows (dys, [n][r], 2 chunks per row, swizzled) and the row tile's
 * KT packed tiles (values and metadata, as stored). Warp w owns n-tile w of
 * every k-tile of the CTA (condensed columns 8w..8w+7 of tile j, j < KT),
 * for all BN/16 m-tiles: per stage BN/16 ldmatrix.x4 A fragments and KT B
 * fragments decoded from the packed tile (vnm_dx_b_value), feeding
 * BN/16 · KT mma. The accumulators live in registers for the whole block;
 * when the block ends they are added into the f32 tile accs (BN ×
 * vnm_dx_ld, in shared memory) at the gathered columns. Warp w's columns
 * are groups 2w and 2w + 1 of each k-tile in every block, and a group's
 * condensed columns gather from that group's original columns only, so one
 * warp alone ever writes an element of accs: no atomics, and no barrier
 * between one block's flush and the next's. */
#define VNM_DX_THREADS 128
#define VNM_DX_STAGES 4
#define VNM_DX_SMEM (100 * 1024) /* two CTAs per SM on sm_90 */
/* Row stride of accs: span + 4 floats, so the 8 batch rows of one warp
 * store start 4 banks apart instead of on one bank (span is a multiple of
 * 32 for M % 4 == 0). */
static inline VNM_HD int64_t vnm_dx_ld(int64_t M, int KT) { return (int64_t)KT * 8 * M + 4; }
static inline VNM_HD int vnm_dx_dys_elems(int BN) { return BN * 16; }
static inline VNM_HD int vnm_dx_stage_bytes(int BN, int KT) { return 2 * vnm_dx_dys_elems(BN) + KT * (512 + 64); }
static inline VNM_HD int64_t vnm_dx_smem(int64_t M, int BN, int KT)
{
    return (int64_t)BN * vnm_dx_ld(M, KT) * 4 + (int64_t)VNM_DX_STAGES * vnm_dx_stage_bytes(BN, KT);
}
/* The (BN, KT) of the CTA: the first of the table that fits VNM_DX_SMEM
 * (M ≤ 128 always fits at 16 rows); 0 when none does. */
static inline VNM_HD int vnm_dx_config(int64_t M, int *BN, int *KT)
{
    static const int configs[5][2] = {{64, 4}, {64, 2}, {64, 1}, {32, 1}, {16, 1}};
    for (int i = 0; i < 5; i++)
        if (vnm_dx_smem(M, configs[i][0], configs[i][1]) <= VNM_DX_SMEM) {
            *BN = configs[i][0], *KT = configs[i][1];
            return 1;
        }
    return 0;
}
/* dys element of (batch row n, row r of the tile). */
static inline VNM_HD int vnm_dx_dys_at(int n, int r) { return vnm_swz_at(n, r, 2); }

/* The copies of a stage, q = 0 .. vnm_dx_copies − 1, dealt to threads q =
 * tid, tid + 128, ...: first 2·BN dY pieces (batch row q / 2, rows 8·(q %
 * 2)..+7 of the tile), then 36 pieces of each of the KT packed tiles (32
 * of values: lane piece; 4 of metadata). Kinds as for the forward
 * (VNM_COPY_X stands for dY). */
static inline VNM_HD int vnm_dx_copies(int BN, int KT) { return 2 * BN + 36 * KT; }
static inline VNM_HD vnm_copy vnm_dx_copy(int q, int BN)
{
    vnm_copy c;
    if (q < 2 * BN) {
        c.kind = VNM_COPY_X, c.row = q / 2, c.piece = 8 * (q % 2);
    } else {
        q -= 2 * BN;
        c.row = q / 36, q %= 36; /* row: the k-tile of the CTA */
        c.kind = q < 32 ? VNM_COPY_A : VNM_COPY_META, c.piece = q < 32 ? q : q - 32;
    }
    return c;
}
/* Stage offsets (bytes) of the values and metadata of packed tile j. */
static inline VNM_HD int vnm_dx_vs_at(int BN, int j) { return 2 * vnm_dx_dys_elems(BN) + j * 512; }
static inline VNM_HD int vnm_dx_ms_at(int BN, int KT, int j) { return 2 * vnm_dx_dys_elems(BN) + KT * 512 + j * 64; }

/* The condensed column (0..31, inside its k-tile) of n-tile column gid of
 * warp w, and the tile rows of B register i, half h (mma.m16n8k16's B: k =
 * 2·tig + 8i + h, here a row of W). */
static inline VNM_HD int vnm_dx_col(int lane, int warp) { return 8 * warp + (lane >> 2); }
static inline VNM_HD int vnm_dx_b_row(int lane, int i, int h) { return vnm_mma16_b_k(lane, i) + h; }
/* Where W[r][c] (tile row r, condensed column c) sits in the packed tile,
 * given nib = row r's nibble for chunk c / 4: the value index (0..255), or
 * −1 when row r does not keep column c (the value is 0). The inverse of
 * vnm_a_row / vnm_a_chunk / vnm_a_value: row r, chunk ch is register
 * (r / 8) + 2·(ch / 4) of lane 4·(r % 8) + ch % 4. */
static inline VNM_HD int vnm_dx_b_value(int r, int c, unsigned nib)
{
    const int ch = c >> 2, lane = 4 * (r & 7) + (ch & 3), i = (r >> 3) + 2 * (ch >> 2);
    if ((int)(nib & 3) == (c & 3)) return vnm_a_value(lane, i, 0);
    if ((int)(nib >> 2) == (c & 3)) return vnm_a_value(lane, i, 1);
    return -1;
}

/* ---- the dense W of cuBLAS's dX (k_densify, kernels/vnm_densify.cu) --------------
 * dX = dY·W on cuBLAS reads W dense (R × K, 16-bit, row-major), rebuilt
 * from the packed tiles (not from the f32 values, so it holds exactly the
 * rounded values the sparse kernels read). One thread per packed value j
 * (0 .. row_tiles·k_tiles·256 − 1) of tile t = j / 256: element e = j % 256
 * is value h = e % 2 of register i = (e / 2) % 4 of lane e / 8 (the inverse
 * of vnm_a_value), whose row and chunk give its condensed column through
 * the metadata nibble and its original column through gather. The index
 * row·K + col of W, or −1 for a padding value (a row ≥ R, or gather −1,
 * which the layout gives a group ≥ G and a column ≥ K), which stays 0.
 * Within a block gather is one-to-one and a row's two positions in a chunk
 * differ, so no two values share an index. */
static inline VNM_HD int64_t vnm_densify_at(int64_t j, const uint32_t *meta, const int32_t *gather,
                                            int64_t R, int64_t K, int64_t V, int64_t k_tiles)
{
    const int64_t t = j >> 8, kt = t % k_tiles, row0 = t / k_tiles * 16;
    const int e = (int)(j & 255), lane = e >> 3, i = (e >> 1) & 3, h = e & 1;
    const int rr = vnm_a_row(lane, i), ch = vnm_a_chunk(lane, i);
    if (row0 + rr >= R) return -1;
    const unsigned nib = vnm_meta_nibble(meta + t * 16, rr, ch);
    const int64_t cc = kt * 32 + 4 * ch + (h ? nib >> 2 : nib & 3);
    const int64_t col = gather[(row0 + rr) / V * k_tiles * 32 + cc];
    return col < 0 ? -1 : (row0 + rr) * K + col;
}

/* ---- SDDMM (k_sddmm): dvalues = dYᵀ·X at the kept positions ------------------------
 * A CTA (128 threads, 4 warps) owns BM = 16·MT rows of one V-block (MT = 4,
 * 2 or 1, the most whose tile stays in the block) × VNM_SD_KT k-tiles
 * (BC = 32·VNM_SD_KT condensed columns), and walks the batch (the reduction)
 * in chunks of 32 rows through a VNM_SD_STAGES-deep cp.async ring: dys
 * ([n][r], 32 × BM, BM/8 chunks per row) and xs (the gathered rows of Xᵀ,
 * [c][n], BC × 32, 4 chunks per row), both swizzled. The block's BC gather
 * entries are read once into shared memory. Warps are WARPS_M × WARPS_N
 * (2 × 2, or 1 × 4 when MT = 1) with warp tiles of WM rows × WN columns;
 * per 16 batch rows a warp loads WM/16 A fragments (ldmatrix.x4.trans of
 * dys) and WN/16 B pairs (ldmatrix.x4 of xs) and runs (WM/16)·(WN/8)
 * mma.m16n8k16. The epilogue writes each kept value once.
 *
 * Every condensed column of the tile is computed, kept or not: twice the
 * products the values need, since which 2 of 4 columns a row keeps changes
 * from row to row, so no dense product covers only the kept ones. */
#define VNM_SD_KT 2
#define VNM_SD_BC (32 * VNM_SD_KT)
#define VNM_SD_CHUNK 32
#define VNM_SD_STAGES 3
static inline VNM_HD int vnm_sddmm_mt(int64_t V) { return V % 64 == 0 ? 4 : V % 32 == 0 ? 2 : 1; }
#define VNM_SD_WARPS_M(MT) ((MT) >= 2 ? 2 : 1)
#define VNM_SD_WARPS_N(MT) (4 / VNM_SD_WARPS_M(MT))
#define VNM_SD_WM(MT) (16 * (MT) / VNM_SD_WARPS_M(MT))
#define VNM_SD_WN(MT) (VNM_SD_BC / VNM_SD_WARPS_N(MT))
static inline VNM_HD int vnm_sd_dys_elems(int MT) { return VNM_SD_CHUNK * 16 * MT; }
static inline VNM_HD int vnm_sd_xs_elems(void) { return VNM_SD_BC * VNM_SD_CHUNK; }
static inline VNM_HD int vnm_sd_stage_elems(int MT) { return vnm_sd_dys_elems(MT) + vnm_sd_xs_elems(); }
/* dys element of (batch row n, tile row r); xs element of (column c, batch
 * row n). */
static inline VNM_HD int vnm_sd_dys_at(int n, int r, int MT) { return vnm_swz_at(n, r, 2 * MT); }
static inline VNM_HD int vnm_sd_xs_at(int c, int n) { return vnm_swz_at(c, n, 4); }
/* The copies of a stage, q = 0 .. vnm_sd_copies − 1: first 32·(BM/8) dY
 * pieces (batch row q / (BM/8), tile rows 8·(q % (BM/8))..+7), then 4·BC X
 * pieces (column q / 4, batch rows 8·(q % 4)..+7). */
static inline VNM_HD int vnm_sd_copies(int MT) { return VNM_SD_CHUNK * 2 * MT + 4 * VNM_SD_BC; }
static inline VNM_HD vnm_copy vnm_sd_copy(int q, int MT)
{
    const int dp = VNM_SD_CHUNK * 2 * MT;
    vnm_copy c;
    if (q < dp) {
        c.kind = VNM_COPY_A, c.row = q / (2 * MT), c.piece = 8 * (q % (2 * MT));
    } else {
        q -= dp;
        c.kind = VNM_COPY_X, c.row = q / 4, c.piece = 8 * (q % 4);
    }
    return c;
}
/* A warp's first tile row and condensed column inside the CTA tile. */
static inline VNM_HD int vnm_sd_warp_row(int warp, int MT) { return warp % VNM_SD_WARPS_M(MT) * VNM_SD_WM(MT); }
static inline VNM_HD int vnm_sd_warp_col(int warp, int MT) { return warp / VNM_SD_WARPS_M(MT) * VNM_SD_WN(MT); }

#endif
