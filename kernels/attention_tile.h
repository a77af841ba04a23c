/* attention_tile.h — the index arithmetic of the causal attention kernels
 * (kernels/attention.cu): tile sizes, which key tiles a query tile visits and
 * the other way round, the causal mask, the online-softmax factors, and where
 * each element of an mma.sync.m16n8k16 (bf16 in, f32 accumulate) fragment
 * sits in its matrix. The kernels and the host emulator of the tests
 * (tests/c/test_attention_emu.c, compiled by gcc) call these same functions,
 * so a CPU run of the emulator checks the kernel's schedule and fragment
 * bookkeeping; only the hardware's own arithmetic is left to a GPU run.
 * Plain C: no CUDA types. */
#ifndef VENOM_KERNELS_ATTENTION_TILE_H
#define VENOM_KERNELS_ATTENTION_TILE_H

#include <stdint.h>

#include "scalar.h" /* VN_HD, math.h */

/* Where a set of heads lives in memory: element (b, h, t, d) of heads shaped
 * (B, H, T, D) sits at b·batch + h·head + t·row + d from the first element
 * (the head dim is contiguous). Contiguous (B, H, T, D) heads are
 * {H·T·D, T·D, D}; the q, k or v part of a fused (B, T, 3C) projection
 * (C = H·D, [q | k | v] along the last dim) is {3C·T, D, 3C} counted from
 * element 0, C or 2C; an output in (B, T, C) layout is {C·T, D, C}. The
 * kernels read and write through these strides, so no transpose copy is
 * needed around them. */
typedef struct {
    int64_t batch, head, row;
} att_layout;

/* The layout of contiguous (B, H, T, D) heads. */
static inline VN_HD att_layout att_contiguous(int64_t H, int64_t T, int64_t D)
{
    att_layout l;
    l.batch = H * T * D, l.head = T * D, l.row = D;
    return l;
}

/* Offset of head bh = b·H + h (the kernels' blockIdx.y) in layout l. */
static inline VN_HD int64_t att_head_offset(att_layout l, int bh, int H)
{
    return (int64_t)(bh / H) * l.batch + (int64_t)(bh % H) * l.head;
}

/* A CTA holds 4 warps; each warp owns 16 rows (queries in the forward and
 * dQ kernels, keys in the dK/dV kernel) and sweeps tiles of 64 columns.
 * The backward kernels take a tile's columns 16 at a time (a "chunk", the
 * k of the second product): their scores need no row max, and keeping one
 * chunk of scores live instead of the whole 16 × 64 tile is what lets the
 * D = 128 dK/dV kernel (K, V, dK and dV fragments: 192 registers) fit in
 * 255 registers without spilling. */
#define VNK_ATT_WARPS 4
#define VNK_ATT_ROWS 16                             /* rows per warp: the mma's M */
#define VNK_ATT_BR (VNK_ATT_WARPS * VNK_ATT_ROWS)   /* rows per CTA */
#define VNK_ATT_BC 64                               /* columns per tile */
#define VNK_ATT_CHUNK 16 /* columns of a backward chunk: one mma's K */
#define VNK_ATT_PAD 8 /* bf16 padding of a shared-memory row (fewer bank conflicts) */

/* ---- fragments of mma.m16n8k16 with .bf16 inputs (PTX ISA 9.7.14.5.8) ----
 * With g = lane >> 2 (groupID) and t = lane % 4 (threadID_in_group):
 *   A (16 × 16), a0..a7: row g for i in {0, 1, 4, 5}, else g + 8;
 *                        col 2t + (i & 1), + 8 for i ≥ 4;
 *   B (16 × 8),  b0..b3: row 2t + (i & 1), + 8 for i ≥ 2; col g;
 *   C (16 × 8),  c0..c3: row g for i < 2, else g + 8; col 2t + (i & 1).
 * Two consecutive elements (a0, a1), (a2, a3), ... share one 32-bit
 * register, the lower index in the low half. */
static inline VN_HD int att_a_row(int lane, int i) { return (lane >> 2) + 8 * ((i >> 1) & 1); }
static inline VN_HD int att_a_col(int lane, int i) { return 2 * (lane & 3) + (i & 1) + 8 * (i >> 2); }
static inline VN_HD int att_b_row(int lane, int i) { return 2 * (lane & 3) + (i & 1) + 8 * (i >> 1); }
static inline VN_HD int att_b_col(int lane) { return lane >> 2; }
static inline VN_HD int att_c_row(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
static inline VN_HD int att_c_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }

/* ---- ldmatrix (PTX ISA, "ldmatrix") ------------------------------------------
 * ldmatrix.x2 loads two 8 × 8 b16 matrices from shared memory: lane 8m + i
 * (m = 0, 1) gives the address of row i of matrix m (8 consecutive b16,
 * 16-byte aligned; lanes 16..31 give addresses that are ignored). Register
 * m of lane l then holds row l/4, elements 2(l%4) and +1, of matrix m; with
 * .trans it holds elements (row 2(l%4), col l/4) and (row 2(l%4) + 1, col
 * l/4). So both B fragments of a 16 × 8 block come in one instruction:
 *   B = Xᵀ (element (k, n) at s[n][k]): matrix m = rows n = 8nb.., columns
 *       k = 16ks + 8m..; plain ldmatrix gives b[m] = s[n][k], s[n][k + 1]
 *       with n = 8nb + g, k = 16ks + 8m + 2t, the mma's B layout;
 *   B = X (element (k, n) at s[k][n]): matrix m = rows k = 16ks + 8m..,
 *       columns n = 8nb..; .trans gives b[m] = s[k][n], s[k + 1][n].
 * Below: the (row, column) of s whose address lane l gives. */
static inline VN_HD int att_ldm_bt_row(int lane, int nb) { return nb * 8 + (lane & 7); }
static inline VN_HD int att_ldm_bt_col(int lane, int ks) { return ks * 16 + 8 * ((lane >> 3) & 1); }
static inline VN_HD int att_ldm_b_row(int lane, int ks) { return ks * 16 + 8 * ((lane >> 3) & 1) + (lane & 7); }
static inline VN_HD int att_ldm_b_col(int nb) { return nb * 8; }

/* The C fragments of two neighbouring 16 × 8 tiles (columns 16j..16j+7 and
 * 16j+8..16j+15) are, element for element, the A fragment of the 16 × 16
 * tile they form: register r of A is elements (2·(r&1), +1) of C tile
 * 2j + (r >> 1). This is how a score tile becomes the A operand of the next
 * product without a trip through memory (FlashAttention-2, Dao 2023). */
static inline VN_HD int att_c_to_a_tile(int r) { return r >> 1; }
static inline VN_HD int att_c_to_a_elem(int r) { return 2 * (r & 1); }

/* ---- the causal schedule ---------------------------------------------------- */

/* Query q sees key k when k ≤ q; rows and columns past T are padding. */
static inline VN_HD int att_visible(int q, int k, int T) { return k <= q && q < T; }

/* Number of 64-key tiles the query rows q0..q0+BR−1 visit: up to the tile
 * holding their last real row's diagonal. */
static inline VN_HD int att_key_tiles(int q0, int T)
{
    int last = (q0 + VNK_ATT_BR < T ? q0 + VNK_ATT_BR : T) - 1;
    return last / VNK_ATT_BC + 1;
}

/* The first 64-query tile in which some query sees key k0 (queries before
 * k0 see none of the keys k0..): the dK/dV kernel starts there. */
static inline VN_HD int att_first_query_tile(int k0) { return k0 / VNK_ATT_BC; }

/* Number of 64-wide tiles covering T. */
static inline VN_HD int att_tiles(int T) { return (T + VNK_ATT_BC - 1) / VNK_ATT_BC; }

/* ---- the online softmax -------------------------------------------------------- */

/* The factor that rescales a row's running sum and output when its running
 * max moves from m_old to m_new: 0 before the first visible key. */
static inline VN_HD float att_rescale(float m_old, float m_new)
{
    return m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
}

/* exp(s − m) for a scaled score s (−inf when masked); 0 for a row that has
 * seen no key yet (m = −inf), instead of exp(−inf + inf) = NaN. */
static inline VN_HD float att_prob(float s, float m) { return m == -INFINITY ? 0.0f : expf(s - m); }

#endif
