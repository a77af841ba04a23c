/* avx512_inline.h — the two AVX-512 register routines that several of the
 * engine's intrinsic kernels share: a 16 × 16 transpose (the V:N:M bf16
 * packing, the CPU attention's Kᵀ and Vᵀ) and e^x on 16 lanes (gelu, the CPU
 * attention's softmax). Each carries its own target attribute, so a file
 * includes this inside or outside its AVX-512 region alike; a caller needs
 * at least that target (avx512f, and fma for vn__exp16). */
#ifndef VENOM_AVX512_INLINE_H
#define VENOM_AVX512_INLINE_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "vec_math.h" /* VN_EXP_MIN */

/* The 16 × 16 words of r transposed in place: r[k] becomes column k. The
 * three rounds of the usual in-lane unpack, in-lane shuffle and 128-bit
 * lane shuffles; they move bits and never look at them as floats. */
static inline __attribute__((always_inline, target("avx512f"))) void vn__transpose16(__m512 r[16])
{
    __m512 t[16], q[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);     /* per 128-bit lane: a0 b0 a1 b1 */
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]); /* a2 b2 a3 b3 */
    }
    for (int i = 0; i < 16; i += 4) { /* column c, c+4, c+8, c+12 of rows i..i+3 per lane */
        q[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        q[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        q[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        q[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int h = 0; h < 16; h += 8) /* 0x88: lanes 0, 2 of each; 0xdd: lanes 1, 3 */
        for (int j = 0; j < 4; j++) {
            t[h + j] = _mm512_shuffle_f32x4(q[h + j], q[h + j + 4], 0x88);
            t[h + j + 4] = _mm512_shuffle_f32x4(q[h + j], q[h + j + 4], 0xdd);
        }
    for (int k = 0; k < 8; k++) {
        r[k] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0x88);
        r[k + 8] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0xdd);
    }
}

/* vec_math.c's exp_poly on 16 lanes (Cephes' expf polynomial, x clamped to
 * [VN_EXP_MIN, 88.3] so 2^n stays a normal float, about 2 ulp): its
 * operations in its order, with the multiply-adds GCC fuses in exp_poly when
 * it optimizes, so every lane gets exp_poly's bits (an unoptimized build
 * fuses none there). The clamps are vmaxps / vminps; a NaN lane gives NaN, as
 * exp_poly does. */
static inline __attribute__((always_inline, target("avx512f,fma"))) __m512 vn__exp16(__m512 x)
{
    __m512 c = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(VN_EXP_MIN)), _mm512_set1_ps(88.3f));
    __m512 n = _mm512_roundscale_ps(
        _mm512_fmadd_ps(c, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
        _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f),
                               _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), c));
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}
#endif

#endif
