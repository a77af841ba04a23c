/* vnm_sptc.h — a V:N:M matrix packed for Sparse Tensor Cores: the operand
 * order of mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.
 * {bf16,f16}.{bf16,f16}.f32 with sparsity selector 0, built on the host
 * (vnm_sptc.c) and read by the CUDA kernels (kernels/vnm_sptc.cu), plus a
 * host decoder that reads the packed arrays the way the hardware does so
 * the packing is tested without a GPU (tests/c/test_vnm_sptc.c). The
 * fragment and metadata indices are functions of kernels/vnm_sptc_index.h,
 * shared by this packing, the kernels and their host emulator.
 *
 * The idea (VENOM, Castro et al., SC'23): the V rows of a block share the 4
 * kept columns of each group of M, so block b's rows, restricted to those
 * columns, form a "condensed" matrix of R × 4G columns (G = ⌈K/M⌉):
 * condensed column 4g + j is original column g·M + cols[b][g][j]. Each row
 * keeps 2 of every 4 condensed columns: plain 2:4 sparsity, with group g
 * being the 2:4 chunk g and our 2-bit indices being the chunk positions.
 *
 * Tiles. Rows are padded to 16·row_tiles (row_tiles = ⌈R/16⌉), condensed
 * columns to 32·k_tiles (k_tiles = ⌈G/8⌉: a k32 step covers 8 groups).
 * Tile (rt, kt) covers rows 16rt..16rt+15 and groups 8kt..8kt+7; the tiles
 * are stored row-tile major: tile index t = rt·k_tiles + kt. A padding row,
 * a padding group (g ≥ G) and a kept value whose original column is ≥ K
 * all hold the value 0 with indices (0, 1), so every metadata nibble is
 * valid for the hardware.
 *
 * PTX facts used (PTX ISA, "Matrix Fragments for sparse mma.m16n8k32 with
 * .f16 and .bf16 types" and "Sparse matrix storage"; the lane assignment
 * matches the per-thread loads of LLVM's sparse-mma-2-4-f16 MLIR
 * integration test, which runs on sm_80 hardware); for lane l,
 * gid = l >> 2 and tig = l & 3:
 *   A (4 × .b32): register i holds two 16-bit values, the first (lower
 *     index) in bits 0–15; registers 0 and 2 are row gid, 1 and 3 row
 *     gid + 8; registers 0 and 1 cover the 4-wide chunk tig (condensed
 *     columns 4·tig..4·tig+3 of the tile), 2 and 3 the chunk 4 + tig.
 *   metadata (1 × .b32, selector 0): only lanes with tig 0 and 1 are read.
 *     Lane (gid, t) holds, in bits 0–15, row gid and in bits 16–31 row
 *     gid + 8, each for chunks 4t..4t+3 of the tile: chunk 4t + c in bits
 *     4c..4c+3, the first value's position (0..3) in the low 2 bits, the
 *     second's in the high 2 (ascending, as .sp::ordered_metadata wants).
 *
 * Packed arrays (what the kernels read):
 *   values  uint16 (bf16 or f16 bits), row_tiles × k_tiles × 256: tile t's
 *           512 bytes are 32 lanes × 16 bytes; lane l's 16 bytes are its
 *           A registers 0..3 in order (one 16-byte load per lane):
 *             values[t·256 + l·8 + 2i + h] = value h (0/1) of register i.
 *   meta    uint32, row_tiles × k_tiles × 16: meta[t·16 + 2·gid + tig]
 *           is the word of lane (gid, tig) for tig 0 and 1; lanes with tig
 *           2 and 3 (not read by the hardware) may load word 2·gid +
 *           (tig & 1).
 *   gather  int32, nblocks × 32·k_tiles: the original column of block b's
 *           condensed column c, or −1 for padding (group ≥ G or column
 *           ≥ K). Kernels gather the dense operand's columns with it and
 *           scatter dX into them.
 *   src     int32, like values: where each packed value comes from in the
 *           f32 values array (R × 2G), r·2G + 2g + h for value h of group
 *           g of row r, or −1 for a value that is 0 (padding row or group,
 *           or a kept column ≥ K). */
#ifndef VENOM_VNM_SPTC_H
#define VENOM_VNM_SPTC_H

#include "vnm_internal.h"

/* Rows and condensed columns of one mma.sp A tile, and groups per tile. */
#define VNM_SPTC_ROWS 16
#define VNM_SPTC_COLS 32
#define VNM_SPTC_GROUPS 8
/* uint16 values and uint32 metadata words of one tile. */
#define VNM_SPTC_TILE_VALUES 256
#define VNM_SPTC_TILE_META 16

typedef struct {
    int64_t R, K, V, M, G, nblocks;
    int64_t row_tiles, k_tiles; /* ⌈R/16⌉, ⌈G/8⌉ */
    vn_dtype dtype;             /* VN_BF16 or VN_F16 */
    uint16_t *values;           /* row_tiles·k_tiles·256; NULL until packed */
    uint32_t *meta;             /* row_tiles·k_tiles·16 */
    int32_t *gather;            /* nblocks·k_tiles·32 */
    int32_t *src;               /* row_tiles·k_tiles·256 */
} vnm_sptc;

/* The pattern part of s's packing, in a new vnm_sptc (free with
 * vnm_sptc_free): meta, gather and src; values stays NULL. It depends on
 * the pattern only, so the engine uploads it once per matrix and refreshes
 * the values from src after every optimizer step. Errors: VN_ERR_ARG for a
 * NULL s, VN_ERR_DTYPE for a dtype other than VN_BF16 or VN_F16,
 * VN_ERR_MEMORY. */
vnm_sptc *vnm_sptc_layout(const vn_vnm *s, vn_dtype dtype);
/* p->values[j] = values[src[j]] rounded to p->dtype (round to nearest
 * even), or 0 where src[j] < 0, for the f32 values array (R × 2G) of the
 * matrix p was laid out from; allocates p->values on first use. The host
 * twin of vnk_vnm_pack_values. Errors: VN_ERR_MEMORY. */
vn_status vnm_sptc_pack_values(vnm_sptc *p, const float *values);
/* vnm_sptc_layout then vnm_sptc_pack_values with s's own values, which must
 * be on the CPU (VN_ERR_DEVICE otherwise). */
vnm_sptc *vnm_sptc_pack(const vn_vnm *s, vn_dtype dtype);
void vnm_sptc_free(vnm_sptc *p);

/* The dense R × K f32 matrix that p holds (dense, row-major, written in
 * full), read lane by lane and register by register as mma.sp reads it:
 * each value's row from its lane and register, its condensed column from
 * the metadata word of the lane that holds its chunk, and its original
 * column from gather. Errors (VN_ERR_FORMAT, the message names the tile,
 * lane and register): a metadata nibble the hardware refuses (positions not
 * ascending), or a non-zero value at a padding row, group or column. */
vn_status vnm_sptc_decode(const vnm_sptc *p, float *dense);

/* The engine's rule for dX = dY·W on CUDA (vn_vnm_set_cuda_dx "auto"): true
 * when cuBLAS on the dense 16-bit W (rebuilt once per packed-values
 * version, vnk_vnm_densify) is expected to beat the sparse kernel k_dx, for
 * B rows of dY and W R × K at V:2:M. An estimate, not a measurement (no GPU
 * has timed the two yet; bench/vnm_gpu's "dX" and "dense dY·W" columns per
 * shape are the table that should replace it):
 *   - M < 8: k_dx multiplies the 4 kept columns of every group of M, 4/M of
 *     the dense flops, on mma.sync m16n8k16 plus a per-block scatter, taken
 *     to reach half the rate of cuBLAS's wgmma: dense wins when 4/M > 1/2.
 *     M = 8 (a tie by this count) stays sparse, which saves W_dense's R·K·2
 *     bytes;
 *   - B ≥ 256: only then is the dense product bound by the tensor cores
 *     (it does B flops per byte of W_dense read; an H200 gives about 790
 *     TFLOP/s / 4.3 TB/s ≈ 184); with fewer rows it streams all of W_dense,
 *     M/2 times the bytes of the packed values k_dx streams;
 *   - R·K ≥ 2^20: below a million weights both take microseconds, and the
 *     dense path's two extra launches (the guard's flag and the guarded
 *     k_dx) and W_dense's memory are not worth it. */
static inline bool vnm_sptc_dx_dense(int64_t M, int64_t B, int64_t R, int64_t K)
{
    return M < 8 && B >= 256 && R * K >= ((int64_t)1 << 20);
}

#endif
