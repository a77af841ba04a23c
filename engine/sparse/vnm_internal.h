/* vnm_internal.h — what the V:N:M files share: the layout of a compressed
 * matrix's pattern and the CPU kernels that read it (vnm_kernels.c).
 *
 * A V:N:M matrix W (R × K) is cut into blocks of V rows and groups of M
 * columns; G = ⌈K/M⌉ groups, nblocks = ⌈R/V⌉ blocks, and K is padded with
 * zero columns to Kp = G·M. Block b keeps 4 columns of each group, the same
 * for its V rows; each row keeps 2 of those 4. The pattern arrays:
 *
 *   cols    uint16 nblocks × G × 4  the 4 kept columns of a group, as offsets
 *                                   0..M−1 inside the group, ascending
 *   idx     uint8  R × ⌈G/2⌉        2 bits per kept value: which of the 4
 *                                   columns it sits in. Group g of a row uses
 *                                   the nibble (g & 1) of byte g/2: bits 0–1
 *                                   the first value, bits 2–3 the second.
 *   t_start int32  nblocks·G·4 + 1  the transposed pattern, for dX = dY·W:
 *   t_code  int32  2·R·G            entries t_start[e]..t_start[e+1]−1 of
 *                                   e = (block·G + g)·4 + j list the values
 *                                   in column j of that group, as
 *                                   row·2 + slot (slot 0 or 1 of the row's
 *                                   pair), rows ascending.
 *
 * The values array (R × 2G f32) holds each row's pair per group in column
 * order; a value whose column is padding is 0 and gets a zero gradient.
 *
 * All four arrays live in one u8 tensor (the "pattern blob") so that an
 * autograd node can keep them alive with an ordinary tensor reference, even
 * after the vn_vnm that made them is freed. */
#ifndef VENOM_VNM_INTERNAL_H
#define VENOM_VNM_INTERNAL_H

#include "internal.h"

#include <stdatomic.h>

typedef struct {
    int64_t R, K, V, M;
    int64_t G, Kp, nblocks, idx_stride; /* derived: ⌈K/M⌉, G·M, ⌈R/V⌉, ⌈G/2⌉ */
    int64_t xrows; /* derived: rows per panel of Xt and dXt (vnm__layout) */
    const int32_t *t_start, *t_code;
    const uint16_t *cols;
    const uint8_t *idx;
} vnm_pattern;

/* A tensor made from a matrix's values (the CUDA kernels' packed values,
 * the bf16 dX's pair lists) with what it was made from: the values tensor,
 * kept alive so that its storage cannot be reused under the key, and that
 * storage's version. Valid until an in-place write (an optimizer step)
 * bumps the version. `lock` is held only to read or swap the fields. */
typedef struct {
    atomic_flag lock;
    vn_tensor *value, *from;
    uint32_t version;
} vnm_derived;

struct vn_vnm {
    int64_t R, K, V, M;
    vn_tensor *blob;   /* u8: the pattern arrays, laid out by vnm__layout */
    vn_tensor *values; /* f32 (R, 2G): the kept weights, on the CPU or CUDA */
    /* The pattern packed for the Sparse Tensor Core kernels, on the device
     * (vnm_cuda.c): built on first CUDA use and then only read, so threads
     * sharing the matrix set it once with a compare-and-swap. */
    _Atomic(vn_tensor *) device_pattern;
    /* The values packed for those kernels (vnm_cuda.c). */
    vnm_derived packed;
    /* The dense 16-bit W (R × K) of the cuBLAS dX path, built from the
     * packed tensor dense_of (kept alive, so the pointer stays a valid
     * key): rebuilt when the packed values are, i.e. once per optimizer
     * step. Guarded by packed.lock. */
    vn_tensor *dense, *dense_of;
    /* The bf16 dX's pair lists (vnm__bf16_lists): a plain vn_vnm_spmm_t
     * reuses them until the values are written in place. */
    vnm_derived lists;
};

/* The derived tensor in d, retained, when it was made from `values` (same
 * storage, offset and strides) at `version`; else NULL. */
vn_tensor *vnm__derived_get(vnm_derived *d, const vn_tensor *values, uint32_t version);
/* Keeps `value`, made from `values` at `version`, in d (retained; the
 * tensors it replaces are released). */
void vnm__derived_put(vnm_derived *d, const vn_tensor *values, uint32_t version, vn_tensor *value);

/* Fills the derived sizes of p from R, K, V, M and returns the blob's size
 * in bytes; with `blob` non-NULL also points p's arrays into it. */
size_t vnm__layout(vnm_pattern *p, int64_t R, int64_t K, int64_t V, int64_t M, uint8_t *blob);

/* The pattern of s, pointing into its blob. */
vnm_pattern vnm__pattern_of(const vn_vnm *s);
/* The checks shared by every way of building a matrix (op names the caller):
 * V ≥ 1, N = 2, 4 ≤ M ≤ 65535, R ≥ 1, K ≥ M, and sizes within int32. */
vn_status vnm__check_params(const char *op, int64_t R, int64_t K, int64_t V, int64_t N, int64_t M);
/* Fills the transposed pattern (t_start, t_code) from cols and idx: for each
 * (block, group, column j) the values in that column, rows ascending. */
void vnm__build_transposed(const vnm_pattern *p, int32_t *t_start, int32_t *t_code);

/* Which of the 4 kept columns value `slot` (0/1) of group g of row r sits in. */
static inline int vnm__index(const vnm_pattern *p, int64_t r, int64_t g, int slot)
{
    int byte = p->idx[r * p->idx_stride + g / 2];
    return (byte >> ((g & 1) * 4 + slot * 2)) & 3;
}

/* ---- kernels (vnm_kernels.c) -----------------------------------------------
 * The dense operands are read in a panel layout: a batch of B rows is cut
 * into ⌈B/VNM_PANEL⌉ panels of VNM_PANEL rows, and each panel stores its
 * columns as rows of VNM_PANEL floats. Element (batch b, column c) of a
 * panelled matrix with `rows` rows per panel sits at
 *   ((b / VNM_PANEL)·rows + c)·VNM_PANEL + b % VNM_PANEL.
 * So Xt has xrows ≥ Kp rows per panel (padding columns and batch rows are
 * 0; rows Kp.. are never read), dYt R rows and dXt xrows rows. A kept
 * column's slice of a panel is then 256 contiguous bytes, and all the
 * columns one block reads from a panel sit close together in memory.
 *
 * Why xrows and not Kp: with Kp a multiple of 16 (256 or 1024 in a GPT)
 * consecutive panels lie a multiple of 4 KiB apart, so the same column of
 * the SDDMM's 4 panels falls in the same sets of the 8-way L1 (and L2), and
 * the 32 KiB of kept rows it reuses across a block's rows evict each
 * other. xrows ≡ 4 (mod 16) puts those panels a quarter of the L1's sets
 * apart: the SDDMM ~10% faster at the GPT's MLP shapes (bench/RESULTS.md),
 * the other kernels unchanged. */
#define VNM_PANEL 64

/* dst (panels of `rows` ≥ C rows) = src (B × C, row stride lds), zero-padded. */
void vnm__pack(const float *src, int64_t B, int64_t C, int64_t lds, float *dst, int64_t rows);
/* dst (nc × nb, stride ldd) = the transpose of the nb × nc block at src
 * (stride lds), in 8 × 8 tiles, element by element at the ragged edges. */
void vnm__transpose(const float *src, int64_t lds, float *dst, int64_t ldd, int64_t nb, int64_t nc);
/* dst (B × C, row stride ldd) = the first C rows of each panel of src. */
void vnm__unpack(const float *src, int64_t rows, float *dst, int64_t B, int64_t C, int64_t ldd);

/* Y = X·Wᵀ + bias (bias may be NULL), from Xt: with yrows 0, y is B × R
 * row-major; with yrows >= R, y is Yt in panels of yrows rows (rows R..
 * yrows−1 and the lanes past B in the last panel are left as they are),
 * written straight from the kernel's tiles with no transpose. */
vn_status vnm__spmm(const vnm_pattern *p, const float *values, const float *xt, int64_t B,
                    const float *bias, float *y, int64_t yrows);
/* dXt = (dY·W)ᵀ in panels of xrows rows, from dYt (panels of R rows) or, with
 * dyt NULL, from dY (B × R, row-major: packed here, or under bf16 read
 * straight into the kernel's bf16 layout). lists: the bf16 dX's lists for p
 * and these values (vnm__bf16_lists), or NULL to build them here; unused
 * in f32. */
vn_status vnm__spmm_t(const vnm_pattern *p, const float *values, const float *dy, const float *dyt,
                      int64_t B, float *dxt, const vn_tensor *lists);
/* dvalues (R × 2G) = dYᵀ·X sampled at the kept positions, from dY (B × R,
 * row-major), Xt and, if the caller has it, dYt (else NULL: packed here
 * when needed). dY may be NULL when dYt is given: then always by dot
 * products (sddmm_by_rows reads dY row-major). */
vn_status vnm__sddmm(const vnm_pattern *p, const float *dy, const float *dyt, const float *xt,
                     int64_t B, float *dvalues);

/* ---- the bf16 forward (vnm_bf16.c) ------------------------------------------
 * Under vn_vnm_set_precision(VN_VNM_BF16) vnm__spmm rounds Xt and the values
 * to bf16 (vnm__to_bf16, same layouts) and builds each tile with
 * vnm__spmm_tile_bf16 instead of the f32 spmm_tile. */
#define VNM_BF16_GROUPS 16 /* groups per chunk of the pair buffer (24 KiB) */
#define VNM_BF16_PAIRS_BYTES (VNM_BF16_GROUPS * 6 * 4 * 64)
_Static_assert(VNM_BF16_PAIRS_BYTES <= 65536, "vnm__bf16_chunk_rows stores offsets into it as uint16");
/* vnm__transpose in 16 × 16 blocks of AVX-512 shuffles (the same bits):
 * the bf16 forward's write-back of its tiles. AVX-512 CPUs only. */
void vnm__transpose16(const float *src, int64_t lds, float *dst, int64_t ldd, int64_t nb, int64_t nc);
/* Whether this CPU (and build) has AVX-512 BF16. */
bool vnm__have_bf16(void);
/* dst[i] = bf16(src[i]), round to nearest even. */
void vnm__to_bf16(const float *src, int64_t n, uint16_t *dst);
/* Where row r's word of group g sits in the forward's chunk-major order:
 * block, then chunk of VNM_BF16_GROUPS groups, then the block's rows, then
 * the group in its chunk. A block's rows read a chunk's values one after
 * the other, so this is one stream per tile; row-major order made it V
 * streams G words apart, which at K = 4096 (G = 512 at M = 8: 2 KiB) fell
 * into 2 of the L1's 64 sets. nchunks = ⌈G / VNM_BF16_GROUPS⌉; the buffers
 * hold nblocks·nchunks·V·VNM_BF16_GROUPS entries (tails unused). */
static inline int64_t vnm__bf16_chunk_at(const vnm_pattern *p, int64_t nchunks, int64_t r, int64_t g)
{
    return ((r / p->V * nchunks + g / VNM_BF16_GROUPS) * p->V + r % p->V) * VNM_BF16_GROUPS +
           g % VNM_BF16_GROUPS;
}
/* cvals, off (chunk-major, vnm__bf16_chunk_at) = for each row and group,
 * the row's bf16 value pair from vals (R × G words, row-major) and the byte
 * offset in the tile's pair buffer of the interleaved pair of X columns
 * that the two values multiply (the group's place in its chunk and which
 * of the 6 pairs). */
void vnm__bf16_chunk_rows(const vnm_pattern *p, const uint32_t *vals, uint32_t *cvals, uint16_t *off);
/* tile (the rows of block rb × VNM_PANEL) = those rows of (X·Wᵀ)ᵀ for one
 * batch panel xp of bf16 Xt, from vals (words: a row's two bf16 values of
 * a group, slot 0 in the low half) and poff, both from
 * vnm__bf16_chunk_rows; pairs: VNM_BF16_PAIRS_BYTES of scratch, 64-byte
 * aligned. */
void vnm__spmm_tile_bf16(const vnm_pattern *p, const uint32_t *vals, const uint16_t *poff,
                         const uint16_t *xp, int64_t rb, void *pairs, float *tile);

/* ---- the bf16 dX (vnm_bf16.c) -----------------------------------------------
 * Under VN_VNM_BF16 vnm__spmm_t pairs W's rows (2i, 2i+1) and sums each pair
 * with one vdpbf16ps per used column. */
/* dy2 (npanels × ⌈R/2⌉ × VNM_PANEL × 2 bf16) = dYt (panels of R rows) with
 * rows 2i and 2i+1 of each panel interleaved lane by lane (row 2i first; a
 * missing last row is 0). */
void vnm__bf16_pair_rows(const float *dyt, int64_t npanels, int64_t R, uint16_t *dy2);
/* The same dy2 from dY (B × R, row-major) instead of dYt, bit for bit. */
void vnm__bf16_pair_rows_of(const float *dy, int64_t B, int64_t R, uint16_t *dy2);
/* The bf16 dX's unit of work is one batch panel and a chunk of
 * vnm__bf16_t_chunk(p) groups (64 columns of dXt, or one group when M ≥ 64)
 * for all blocks, so the lists are stored in that order: chunk, block, group
 * in the chunk (vnm__bf16_t_at). A work item then reads its lists as one
 * stream; block-major order made it nblocks runs G lists apart, which at
 * K = 4096 (20 MiB of lists at 4096 × 4096, 2:8, read again for every panel)
 * the hardware prefetcher followed poorly. */
static inline int64_t vnm__bf16_t_chunk(const vnm_pattern *p) { return p->M >= 64 ? 1 : 64 / p->M; }
static inline int64_t vnm__bf16_t_at(const vnm_pattern *p, int64_t rb, int64_t g)
{
    int64_t gc = vnm__bf16_t_chunk(p), c0 = g / gc * gc, n = p->G - c0 < gc ? p->G - c0 : gc;
    return c0 * p->nblocks + rb * n + g - c0;
}
/* For each block and group, bg = vnm__bf16_t_at(p, block, g): the row pairs of the block
 * (tp: the pair's index minus the block's first pair, r0/2) with, for each
 * of the group's 4 kept columns j, the two rows' bf16 values there (tv[4·e
 * + j], row 2i in the low half, 0 for a row that does not use j or lies
 * outside the block), sorted by the set of columns the pair uses (its
 * mask, bit j for column j): entries bg·slots.., tcount[bg·16 + mask] of
 * each mask in increasing order. slots ≥ min(V, R)/2 + 1. */
void vnm__bf16_t_lists(const vnm_pattern *p, const float *values, int64_t slots, uint32_t *tv,
                       uint16_t *tp, uint16_t *tcount);
/* Whether vnm__spmm_t runs in bf16 for p now (the precision, the CPU, and
 * blocks of at most 131070 rows). */
bool vnm__dx_in_bf16(const vnm_pattern *p);
/* A new u8 tensor holding the lists of vnm__bf16_t_lists for p and values
 * (R × 2G f32), for vnm__spmm_t; NULL with the error set. */
vn_tensor *vnm__bf16_lists(const vnm_pattern *p, const float *values);
/* The same for s's pattern and the values tensor `values` (f32 data: its
 * contiguous data), cached in s until that tensor's storage is written in
 * place (its version). Retained: the caller releases it. */
vn_tensor *vnm__bf16_lists_of(const vn_vnm *s, const vn_tensor *values, const float *data);
/* dxp's rows of groups g0..g1−1 (one panel of dXt, xrows rows) = those rows of
 * (dY·W)ᵀ from one panel dy2 of vnm__bf16_pair_rows and the lists. */
void vnm__spmm_t_tile_bf16(const vnm_pattern *p, const uint32_t *tv, const uint16_t *tp,
                           const uint16_t *tcount, int64_t slots, const uint16_t *dy2, int64_t g0,
                           int64_t g1, float *dxp);

/* ---- the bf16 dW (vnm_bf16_sddmm.c) -------------------------------------------
 * Under VN_VNM_BF16 vnm__sddmm pairs the batch rows (b, b+1) of dY and X
 * and runs the SDDMM by rows with vdpbf16ps: for each group all 4 kept
 * columns against all the block's rows, each row picking its 2 sums. */
typedef struct {
    int64_t Vp, npanels; /* a block's rows padded to 16; batch panels */
    uint32_t *dy2;       /* nblocks × npanels·32 pairs × Vp (vnm__sddmm_bf16_dy) */
    uint16_t *xt2;       /* Xt in bf16, same layout */
    size_t dy_bytes, xt_bytes;
} vnm_sddmm_bf16;
/* dy2 = for each block, batch pair i (rows 2i, 2i+1) and row v of the block
 * (< Vp), the 32-bit word (bf16 dY[2i, r0+v] low, bf16 dY[2i+1, r0+v]
 * high), from dy (B × R row-major) or, with dy NULL, from dYt (panels of R
 * rows); batch rows past B and rows past the block are 0. */
void vnm__sddmm_bf16_dy(const vnm_pattern *p, const float *dy, const float *dyt, int64_t B,
                        int64_t Vp, uint32_t *dy2);
/* dvalues of block rb, groups g0..g1−1 = dYᵀ·X at the kept positions over
 * the whole batch, from dy2 and xt2 (Xt in bf16); d4: 4·Vp·(g1−g0) floats
 * of scratch. */
void vnm__sddmm_tile_bf16(const vnm_pattern *p, const uint32_t *dy2, int64_t Vp, const uint16_t *xt2,
                          int64_t npanels, int64_t rb, int64_t g0, int64_t g1, float *d4,
                          float *dvalues);
/* Allocates and fills o from dY (or dYt, dy NULL) and Xt; VN_ERR_MEMORY
 * (o then empty). */
vn_status vnm__sddmm_bf16_prepare(const vnm_pattern *p, const float *dy, const float *dyt,
                                  const float *xt, int64_t B, vnm_sddmm_bf16 *o);
void vnm__sddmm_bf16_free(vnm_sddmm_bf16 *o);
/* dvalues' rows of blocks rb_lo..rb_hi−1, over OpenMP threads. */
vn_status vnm__sddmm_bf16(const vnm_pattern *p, const vnm_sddmm_bf16 *o, int64_t rb_lo, int64_t rb_hi,
                          float *dvalues);

/* ---- the CUDA path (vnm_cuda.c) ---------------------------------------------
 * vn_vnm_linear and the three plain calls with x, values (and bias) on the
 * GPU, after the callers' shape and dtype checks. */
vn_tensor *vnm__cuda_linear(const vn_tensor *x, const vn_vnm *s, const vn_tensor *values,
                            const vn_tensor *bias);
vn_tensor *vnm__cuda_spmm(const vn_vnm *s, const vn_tensor *values, const vn_tensor *x);
vn_tensor *vnm__cuda_spmm_t(const vn_vnm *s, const vn_tensor *values, const vn_tensor *dy);
vn_tensor *vnm__cuda_sddmm(const vn_vnm *s, const vn_tensor *dy, const vn_tensor *x);

#endif
