/* vnm_random.h — random V:N:M matrices for the white-box tests of the
 * Sparse Tensor Core packing (test_vnm_sptc.c) and its kernels' host
 * emulator (test_vnm_sptc_emu.c): any pattern the format allows, not only
 * those magnitude selection produces. Header-only (static functions), so
 * each test includes it once. */
#ifndef VENOM_TEST_VNM_RANDOM_H
#define VENOM_TEST_VNM_RANDOM_H

#include "gradcheck.h"
#include "vnm_internal.h"

#include <math.h>

/* xorshift32: the test's own generator, independent of the engine's. */
static uint32_t next(uint32_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 17, *s ^= *s << 5;
    return *s;
}

/* A non-zero f32 with a random sign, mantissa and exponent in 2^-30..2^20,
 * so f16 rounding meets subnormals and overflow and bf16 every mantissa. */
static float random_value(uint32_t *s)
{
    uint32_t u = next(s);
    float mant = 1.0f + (float)(u & 0x7fffff) / 8388608.0f;
    float v = ldexpf(mant, (int)(next(s) % 51) - 30);
    return (u >> 31) ? -v : v;
}

/* A V:N:M matrix with a random pattern (4 random columns per block-group,
 * a random ascending pair per row-group) and random non-zero values. */
static vn_vnm *random_vnm(int64_t R, int64_t K, int64_t V, int64_t M, uint32_t seed)
{
    int64_t G = (K + M - 1) / M, nb = (R + V - 1) / V, is = (G + 1) / 2;
    uint32_t s = seed;
    vn_tensor *cols = vn_zeros(VN_I32, 3, (int64_t[]){nb, G, 4});
    vn_tensor *idx = vn_zeros(VN_U8, 2, (int64_t[]){R, is});
    vn_tensor *vals = vn_zeros(VN_F32, 2, (int64_t[]){R, 2 * G});
    CHECK_PTR(cols);
    CHECK_PTR(idx);
    CHECK_PTR(vals);
    int32_t *c = vn_tensor_data(cols);
    for (int64_t e = 0; e < nb * G; e++) { /* 4 distinct offsets by rejection, then sorted */
        int n = 0;
        while (n < 4) {
            int32_t m = (int32_t)(next(&s) % (uint32_t)M), dup = 0;
            for (int k = 0; k < n; k++) dup |= c[e * 4 + k] == m;
            if (!dup) c[e * 4 + n++] = m;
        }
        for (int i = 1; i < 4; i++)
            for (int k = i; k > 0 && c[e * 4 + k] < c[e * 4 + k - 1]; k--) {
                int32_t t = c[e * 4 + k];
                c[e * 4 + k] = c[e * 4 + k - 1], c[e * 4 + k - 1] = t;
            }
    }
    static const uint8_t pairs[6] = {0x4, 0x8, 0xc, 0x9, 0xd, 0xe}; /* (a, b), a < b */
    uint8_t *ix = vn_tensor_data(idx);
    float *v = vn_tensor_data(vals);
    for (int64_t r = 0; r < R; r++)
        for (int64_t g = 0; g < G; g++) {
            ix[r * is + g / 2] |= (uint8_t)(pairs[next(&s) % 6] << ((g & 1) * 4));
            v[r * 2 * G + 2 * g] = random_value(&s);
            v[r * 2 * G + 2 * g + 1] = random_value(&s);
        }
    vn_vnm *m = vn_vnm_from_pattern(R, K, V, 2, M, cols, idx, vals);
    CHECK_PTR(m);
    vn_tensor_release(cols);
    vn_tensor_release(idx);
    vn_tensor_release(vals);
    return m;
}

#endif
