/* sptc_emu.h — software models of the PTX instructions the V:N:M Sparse
 * Tensor Core kernels use (cp.async, ldmatrix, mma.sp m16n8k32, mma
 * m16n8k16) over a model of one CTA's shared memory, written from the PTX
 * ISA's definitions, not from the kernels' helpers. Included by the host
 * emulator, tests/c/test_vnm_sptc_emu.c, only (static functions). */
#ifndef VENOM_TESTS_SPTC_EMU_H
#define VENOM_TESTS_SPTC_EMU_H

#include "gradcheck.h"
#include "vnm_sptc.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* ---- software instructions (PTX ISA) -------------------------------------------- */

static float half_to_f32(uint16_t bits, vn_dtype dt)
{
    return dt == VN_BF16 ? vn__bf16_to_f32(bits) : vn__f16_to_f32(bits);
}

/* Shared memory of one CTA: bytes, poisoned with 0xff (a NaN in bf16 and
 * f16, and an out-of-range gather entry) before each CTA. */
typedef struct {
    unsigned char *b;
    size_t n;
} emu_smem;

static void *smem_at(const emu_smem *s, size_t off, size_t len, const char *what)
{
    if (off + len > s->n) fail_msg("%s: %zu bytes at shared offset %zu, past %zu", what, len, off, s->n);
    return s->b + off;
}

/* cp.async.cg.shared.global 16 bytes: src (16-byte aligned) or zeros. */
static void cp_async16(emu_smem *s, size_t dst, const void *src, bool valid, const void *lo,
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
static void sw_ldmatrix_x4(const emu_smem *s, const size_t addr[32], uint32_t out[32][4], bool trans)
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
 * Products are exact in f32 (16-bit inputs); sums are f32 in k order. */
static void sw_mma_sp(float d[32][4], const uint32_t a[32][4], const uint32_t b[32][4],
                      const uint32_t e[32], vn_dtype dt)
{
    float A[16][32] = {{0}}, Bm[32][8];
    for (int l = 0; l < 32; l++) {
        int gid = l >> 2, tig = l & 3;
        for (int k = 0; k < 8; k++) {
            int row = (k % 4 < 2) ? gid : gid + 8;
            int ccol = 2 * tig + (k & 1) + (k >= 4 ? 8 : 0), chunk = ccol / 2;
            uint32_t word = e[4 * gid + chunk / 4];
            unsigned nib = (word >> ((row >= 8 ? 16 : 0) + 4 * (chunk % 4))) & 0xf;
            unsigned p0 = nib & 3, p1 = nib >> 2;
            if (p0 >= p1) fail_msg("mma.sp: row %d chunk %d: metadata nibble 0x%x is not two "
                                   "ascending positions", row, chunk, nib);
            uint16_t bits = (uint16_t)(a[l][k / 2] >> (16 * (k & 1)));
            A[row][4 * chunk + ((ccol & 1) ? p1 : p0)] = half_to_f32(bits, dt);
            Bm[2 * tig + (k & 1) + 8 * (k / 2)][gid] = half_to_f32((uint16_t)(b[l][k / 2] >> (16 * (k & 1))), dt);
        }
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
static void sw_mma16(float d[32][4], const uint32_t a[32][4], const uint32_t b[32][2], vn_dtype dt)
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

#endif
