/* sptc_emu.h — software models of the PTX instructions the V:N:M Sparse
 * Tensor Core kernels use (cp.async, ldmatrix, mma.sp m16n8k32, mma
 * m16n8k16, and on sm_90a wgmma.mma_async.sp m64nNk32 with its shared-
 * memory matrix descriptor) over a model of one CTA's shared memory,
 * written from the PTX ISA's definitions, not from the kernels' helpers.
 * Included by the host emulators, tests/c/test_vnm_sptc_emu.c and
 * test_vnm_wgmma_emu.c, only (static inline: each uses a part). */
#ifndef VENOM_TESTS_SPTC_EMU_H
#define VENOM_TESTS_SPTC_EMU_H

#include "gradcheck.h"
#include "vnm_sptc.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- software instructions (PTX ISA) -------------------------------------------- */

static inline float half_to_f32(uint16_t bits, vn_dtype dt)
{
    return dt == VN_BF16 ? vn__bf16_to_f32(bits) : vn__f16_to_f32(bits);
}

/* Shared memory of one CTA: bytes, poisoned with 0xff (a NaN in bf16 and
 * f16, and an out-of-range gather entry) before each CTA. */
typedef struct {
    unsigned char *b;
    size_t n;
} emu_smem;

static inline void *smem_at(const emu_smem *s, size_t off, size_t len, const char *what)
{
    if (off + len > s->n) fail_msg("%s: %zu bytes at shared offset %zu, past %zu", what, len, off, s->n);
    return s->b + off;
}

/* cp.async.cg.shared.global 16 bytes: src (16-byte aligned) or zeros. */
static inline void cp_async16(emu_smem *s, size_t dst, const void *src, bool valid, const void *lo,
                       const void *hi)
{
    if (dst % 16) fail_msg("cp.async: shared offset %zu not 16-byte aligned", dst);
    unsigned char *d = smem_at(s, dst, 16, "cp.async");
    if (!valid) {
        memset(d, 0, 16);
        return;
    }
    const unsigned char *p = src;
    if ((uintptr_t)p % 16 || p < (const unsigned char *)lo || p + 16 > (const unsigned char *)hi)
        fail_msg("cp.async: global source out of its array or misaligned");
    memcpy(d, p, 16);
}

/* ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane 8m + i gives the
 * address (byte offset) of row i of matrix m, 8 b16 elements, 16-byte
 * aligned. Without .trans, lane l receives, in register m, elements 2(l % 4)
 * and 2(l % 4) + 1 of row l / 4 of matrix m, the first in the low half;
 * .trans delivers the transpose: elements (row 2(l % 4), column l / 4) and
 * (row 2(l % 4) + 1, column l / 4). */
static inline void sw_ldmatrix_x4(const emu_smem *s, const size_t addr[32], uint32_t out[32][4], bool trans)
{
    for (int l = 0; l < 32; l++)
        if (addr[l] % 16) fail_msg("ldmatrix: lane %d address %zu not 16-byte aligned", l, addr[l]);
    /* Each 8×8 matrix is one shared-memory wavefront when its 8 rows sit in
     * 8 different groups of 4 banks (16 bytes of the 128-byte bank line):
     * what the swizzles of the tiles are for. */
    for (int m = 0; m < 4; m++) {
        unsigned seen = 0;
        for (int i = 0; i < 8; i++) seen |= 1u << (addr[8 * m + i] / 16 % 8);
        if (seen != 0xff) fail_msg("ldmatrix: matrix %d's rows share banks (groups 0x%02x)", m, seen);
    }
    for (int m = 0; m < 4; m++)
        for (int l = 0; l < 32; l++) {
            uint16_t v[2];
            for (int h = 0; h < 2; h++) {
                if (trans) {
                    const uint16_t *row = smem_at(s, addr[8 * m + 2 * (l % 4) + h], 16, "ldmatrix");
                    v[h] = row[l / 4];
                } else {
                    const uint16_t *row = smem_at(s, addr[8 * m + l / 4], 16, "ldmatrix");
                    v[h] = row[2 * (l % 4) + h];
                }
            }
            out[l][m] = (uint32_t)v[0] | (uint32_t)v[1] << 16;
        }
}

/* mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.{bf16,f16}.f32,
 * sparsity selector 0: d[l] += A·B for the warp's fragments.
 *   A: lane l's 4 registers hold a0..a7 (two per register, low half
 *      first) of the 16 × 16 compressed A: row gid for a0, a1, a4, a5 and
 *      gid + 8 otherwise; compressed column 2·tig + (k & 1), + 8 for k ≥ 4.
 *      Compressed columns 2c, 2c + 1 are the two kept values of the 4-wide
 *      chunk c of the row.
 *   metadata: with selector 0, lanes with tig 0 and 1 hold it: lane (gid,
 *      0) chunks 0..3, lane (gid, 1) chunks 4..7; bits 0–15 row gid, 16–31
 *      row gid + 8; within a half, chunk c % 4 in bits 4(c % 4)..+3, the
 *      position (0..3) of its first kept value in the low 2 bits, of the
 *      second in the high 2; ordered metadata wants them ascending.
 *   B: lane l's 4 registers hold b0..b7: row 2·tig + (k & 1) + 8·(k / 2),
 *      column gid.
 *   C/D: c0..c3: row gid (+8 for c2, c3), column 2·tig + (k & 1).
 * Products are exact in f32 (16-bit inputs); sums are f32 in k order.
 * sw_sp_decode_a expands one warp's A registers and metadata (as above)
 * into the dense 16 × 32 A; sw_wgmma_sp uses it for each warp too. */
static inline void sw_sp_decode_a(float A[16][32], const uint32_t a[32][4], const uint32_t e[32], vn_dtype dt,
                           const char *what)
{
    memset(A, 0, sizeof(float) * 16 * 32);
    for (int l = 0; l < 32; l++) {
        int gid = l >> 2, tig = l & 3;
        for (int k = 0; k < 8; k++) {
            int row = (k % 4 < 2) ? gid : gid + 8;
            int ccol = 2 * tig + (k & 1) + (k >= 4 ? 8 : 0), chunk = ccol / 2;
            uint32_t word = e[4 * gid + chunk / 4];
            unsigned nib = (word >> ((row >= 8 ? 16 : 0) + 4 * (chunk % 4))) & 0xf;
            unsigned p0 = nib & 3, p1 = nib >> 2;
            if (p0 >= p1) fail_msg("%s: row %d chunk %d: metadata nibble 0x%x is not two "
                                   "ascending positions", what, row, chunk, nib);
            uint16_t bits = (uint16_t)(a[l][k / 2] >> (16 * (k & 1)));
            A[row][4 * chunk + ((ccol & 1) ? p1 : p0)] = half_to_f32(bits, dt);
        }
    }
}

static inline void sw_mma_sp(float d[32][4], const uint32_t a[32][4], const uint32_t b[32][4],
                      const uint32_t e[32], vn_dtype dt)
{
    float A[16][32], Bm[32][8];
    sw_sp_decode_a(A, a, e, dt, "mma.sp");
    for (int l = 0; l < 32; l++) {
        int gid = l >> 2, tig = l & 3;
        for (int k = 0; k < 8; k++)
            Bm[2 * tig + (k & 1) + 8 * (k / 2)][gid] = half_to_f32((uint16_t)(b[l][k / 2] >> (16 * (k & 1))), dt);
    }
    for (int l = 0; l < 32; l++) {
        int gid = l >> 2, tig = l & 3;
        for (int k = 0; k < 4; k++) {
            int row = gid + (k >= 2 ? 8 : 0), col = 2 * tig + (k & 1);
            float sum = d[l][k];
            for (int kk = 0; kk < 32; kk++) sum += A[row][kk] * Bm[kk][col];
            d[l][k] = sum;
        }
    }
}

/* mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.f32: d[l] += A·B.
 *   A (16 × 16): lane l's registers hold a0..a7 (two per register, low half
 *      first): row gid for a0, a1, a4, a5, else gid + 8; column 2·tig +
 *      (k & 1), + 8 for k ≥ 4.
 *   B (16 × 8): b0..b3: row 2·tig + (k & 1), + 8 for k ≥ 2; column gid.
 *   C/D: as for mma.sp. */
static inline void sw_mma16(float d[32][4], const uint32_t a[32][4], const uint32_t b[32][2], vn_dtype dt)
{
    float A[16][16], Bm[16][8];
    for (int l = 0; l < 32; l++) {
        int gid = l >> 2, tig = l & 3;
        for (int k = 0; k < 8; k++) {
            int row = (k % 4 < 2) ? gid : gid + 8, col = 2 * tig + (k & 1) + (k >= 4 ? 8 : 0);
            A[row][col] = half_to_f32((uint16_t)(a[l][k / 2] >> (16 * (k & 1))), dt);
        }
        for (int k = 0; k < 4; k++)
            Bm[2 * tig + (k & 1) + (k >= 2 ? 8 : 0)][gid] =
                half_to_f32((uint16_t)(b[l][k / 2] >> (16 * (k & 1))), dt);
    }
    for (int l = 0; l < 32; l++) {
        int gid = l >> 2, tig = l & 3;
        for (int k = 0; k < 4; k++) {
            int row = gid + (k >= 2 ? 8 : 0), col = 2 * tig + (k & 1);
            float sum = d[l][k];
            for (int kk = 0; kk < 16; kk++) sum += A[row][kk] * Bm[kk][col];
            d[l][k] = sum;
        }
    }
}

/* ---- wgmma (sm_90a) ------------------------------------------------------------- */

/* A wgmma matrix descriptor's fields (PTX ISA, "Matrix Descriptor Format"):
 * bits 0–13, 16–29 and 32–45 hold the start address, the leading and the
 * stride dimension byte offsets, each stored as (x & 0x3FFFF) >> 4; bits
 * 49–51 the base offset; bits 62–63 the swizzle mode (0 none, 1 128-byte,
 * 2 64-byte, 3 32-byte). */
typedef struct {
    uint32_t start, lbo, sbo, base_offset, swizzle;
} sw_desc;

static inline sw_desc sw_desc_decode(uint64_t d)
{
    return (sw_desc){.start = (uint32_t)(d & 0x3fff) << 4,
                     .lbo = (uint32_t)((d >> 16) & 0x3fff) << 4,
                     .sbo = (uint32_t)((d >> 32) & 0x3fff) << 4,
                     .base_offset = (uint32_t)((d >> 49) & 7),
                     .swizzle = (uint32_t)(d >> 62)};
}

/* The shared address of element (k, n) of an MN-major (N-major) 16-bit B
 * operand with 128-byte swizzling, as the PTX ISA's "Canonical Layouts"
 * give it: ((T,8,m),(8,k)) : ((1,T,LBO),(8T,SBO)) in elements (T = 8), so
 * n = n0 + 8·n1 + 64·n2, k = k0 + 8·k1 sits at byte start + 2·n0 + 16·n1 +
 * LBO·n2 + 128·k0 + SBO·k1, then Swizzle<3,4,3> on the byte address: bits
 * 4–6 XOR bits 7–9. Base offset 0 means the pattern repeats from 1024-byte
 * boundaries, which is the only case modelled. */
static inline uint32_t sw_desc_b_addr(const sw_desc *d, int k, int n)
{
    if (d->swizzle != 1 || d->base_offset != 0)
        fail_msg("wgmma: only the 128-byte swizzle with base offset 0 is modelled (got mode %u, "
                 "base offset %u)", d->swizzle, d->base_offset);
    uint32_t a = d->start + 2 * (uint32_t)(n % 8) + 16 * (uint32_t)(n / 8 % 8) + d->lbo * (uint32_t)(n / 64) +
                 128 * (uint32_t)(k % 8) + d->sbo * (uint32_t)(k / 8);
    return a ^ (((a >> 7) & 7) << 4);
}

/* wgmma.mma_async.sp.sync.aligned.m64nNk32.f32.{bf16,f16}.{bf16,f16} with A
 * from registers, B from shared memory through descriptor bdesc, N-major
 * (imm-trans-b = 1), sparsity selector 0: d[t] = A·B + d[t] for the 128
 * threads of the warpgroup, or A·B when the predicate scale_d is false (d's
 * old values are then not read). Per the PTX ISA ("Matrix fragments for
 * warpgroup-level multiply-accumulate operation with sparse matrix A"),
 * warp w (threads 32w..32w+31) provides rows 16w..16w+15 of A, its
 * registers and metadata laid out as for mma.sp m16n8k32 (the same figure).
 * D (N/2 f32 per thread): register i of thread t in warp w, lane (gid,
 * tig): row 16w + gid + 8·(bit 1 of i), column 8·(i/4) + 2·tig + (i & 1)
 * ("WGMMA .m64nNk16 register fragment layout for accumulator matrix D").
 * d is [128][N/2]. */
static inline void sw_wgmma_sp(const emu_smem *s, float *d, int N, const uint32_t a[128][4], uint64_t bdesc,
                               const uint32_t e[128], bool scale_d, vn_dtype dt)
{
    float A[64][32];
    float *Bm = malloc(sizeof(float) * 32 * (size_t)N);
    assert_non_null(Bm);
    for (int w = 0; w < 4; w++)
        sw_sp_decode_a(A + 16 * w, a + 32 * w, e + 32 * w, dt, "wgmma.sp");
    sw_desc dd = sw_desc_decode(bdesc);
    if (dd.start % 16) fail_msg("wgmma: B start address %u not 16-byte aligned", dd.start);
    for (int k = 0; k < 32; k++)
        for (int n = 0; n < N; n++)
            Bm[k * N + n] = half_to_f32(*(const uint16_t *)smem_at(s, sw_desc_b_addr(&dd, k, n), 2, "wgmma B"), dt);
    for (int t = 0; t < 128; t++) {
        int w = t / 32, gid = (t % 32) / 4, tig = t % 4;
        for (int i = 0; i < N / 2; i++) {
            int row = 16 * w + gid + 8 * ((i >> 1) & 1), col = 8 * (i / 4) + 2 * tig + (i & 1);
            float sum = scale_d ? d[t * (N / 2) + i] : 0.0f;
            for (int kk = 0; kk < 32; kk++) sum += A[row][kk] * Bm[kk * N + col];
            d[t * (N / 2) + i] = sum;
        }
    }
    free(Bm);
}

#endif
