/* vec_math.c — the loops of vec_math.h. Each element goes through
 * branch-free formulas (a polynomial exp, selects for the clamps) so that
 * the loops vectorize; CMakeLists.txt compiles this file with
 * -fno-trapping-math, without which GCC keeps the clamps' compares as
 * branches (they could raise FP exceptions, which venom never reads). */
#include "vec_math.h"
#include "internal.h" /* VN_OMP_MIN_WORK */

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX__
#include <immintrin.h>
#endif

/* Each loop compiled twice, for AVX-512 (x86-64-v4) and for the build's
 * baseline, the CPU picking one when the library loads (GCC's ifunc
 * clones): 16 floats per instruction where the CPU has AVX-512. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VEC_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define VEC_CLONES
#endif

/* e^x for finite x, to about 2 ulp (Cephes' expf polynomial): x = n·ln2 + r
 * with |r| <= ln2/2, e^r by a degree-6 polynomial, 2^n put into the exponent
 * bits. x is clamped to [-87.3, 88.3], so the result stays a normal float
 * (e^-87.3 ≈ 1.2e-38 where expf would go subnormal, 2.1e38 for large x);
 * NaN in gives NaN out. */
static inline float exp_poly(float x)
{
    float c = x > VN_EXP_MIN ? x : VN_EXP_MIN; /* selects, not branches (see the top); NaN → min */
    c = c < 88.3f ? c : 88.3f;
    float n = __builtin_floorf(c * 1.44269504088896341f + 0.5f); /* c / ln2, rounded */
    float r = c - n * 0.693359375f + n * 2.12194440e-4f;   /* ln2 split in two: r exact */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23; /* 2^n, n in [-126, 127]: a normal float */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    return x != x ? x : y;
}

/* gelu, tanh form (kernels/scalar.h), through 0.5·(1 + tanh u) = 1/(1 + e^(−2u)):
 * gelu(x) = x / (1 + e^(−2u)), u = k·(x + c·x³). */
static inline float gelu_poly(float x)
{
    if (x < -VN_GELU_FLAT) return 0.0f; /* kernels/scalar.h says why */
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x / (1.0f + exp_poly(-2.0f * u));
}

/* gelu'(x) = s + 2k·x·s·(1 − s)·(1 + 3c·x²) with s = 1/(1 + e^(−2u)), the
 * same derivative as kernels/scalar.h's gelu_grad (0.5·(1 + tanh u) = s,
 * 0.5·(1 − tanh² u) = 2s(1 − s)). */
static inline float gelu_grad_poly(float x)
{
    if (x < -VN_GELU_FLAT) return 0.0f;
    if (x > VN_GELU_FLAT) return 1.0f;
    float x2 = x * x, u = 0.7978845608028654f * (x + 0.044715f * x2 * x);
    float s = 1.0f / (1.0f + exp_poly(-2.0f * u));
    return s + 2.0f * 0.7978845608028654f * x * s * (1.0f - s) * (1.0f + 3.0f * 0.044715f * x2);
}

/* The portable loops; on a CPU with AVX-512 the functions below run the
 * intrinsics of gelu16 and gelu_grad16 instead, which give the same bits. */
VEC_CLONES static void gelu_loop(float *restrict out, const float *restrict x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) out[i] = gelu_poly(x[i]);
}

VEC_CLONES static void gelu_backward_loop(float *restrict out, const float *restrict g,
                                          const float *restrict x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) out[i] = g[i] * gelu_grad_poly(x[i]);
}

VEC_CLONES static void gelu_backward_inplace_loop(float *restrict g, const float *restrict x,
                                                  int64_t n)
{
    for (int64_t i = 0; i < n; i++) g[i] = g[i] * gelu_grad_poly(x[i]);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VEC_AVX512 1
#pragma GCC push_options
#pragma GCC target("avx512f,fma") /* fma: a Debug build has no -march */
#include <immintrin.h>

#include "avx512_inline.h" /* vn__exp16 */

#define SPLAT(v) _mm512_set1_ps(v)

/* −2u = −2·(k·t) from t = x + c·x³ (the two formulas round c·x³ apart) */
static inline __m512 minus_2u(__m512 t)
{
    return _mm512_mul_ps(_mm512_mul_ps(t, SPLAT(0.7978845608028654f)), SPLAT(-2.0f));
}

/* gelu_poly: x / (1 + e^(−2u)), c·x³ as ((c·x)·x)·x */
static inline __m512 gelu16(__m512 x)
{
    __m512 t = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(SPLAT(0.044715f), x), x), x, x);
    __m512 y = _mm512_div_ps(x, _mm512_add_ps(SPLAT(1.0f), vn__exp16(minus_2u(t))));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, SPLAT(-VN_GELU_FLAT), _CMP_LT_OQ),
                              _mm512_setzero_ps());
}

/* gelu_grad_poly: s + ((2k·x·s)·(1 − s))·(1 + 3c·x²), c·x³ as (c·x²)·x */
static inline __m512 gelu_grad16(__m512 x)
{
    __m512 x2 = _mm512_mul_ps(x, x);
    __m512 t = _mm512_fmadd_ps(_mm512_mul_ps(SPLAT(0.044715f), x2), x, x);
    __m512 s = _mm512_div_ps(SPLAT(1.0f), _mm512_add_ps(SPLAT(1.0f), vn__exp16(minus_2u(t))));
    __m512 a = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(SPLAT(2.0f * 0.7978845608028654f), x), s),
                             _mm512_sub_ps(SPLAT(1.0f), s));
    __m512 d = _mm512_fmadd_ps(a, _mm512_fmadd_ps(SPLAT(3.0f * 0.044715f), x2, SPLAT(1.0f)), s);
    d = _mm512_mask_mov_ps(d, _mm512_cmp_ps_mask(x, SPLAT(-VN_GELU_FLAT), _CMP_LT_OQ),
                           _mm512_setzero_ps());
    return _mm512_mask_mov_ps(d, _mm512_cmp_ps_mask(x, SPLAT(VN_GELU_FLAT), _CMP_GT_OQ),
                              SPLAT(1.0f));
}

/* the lanes of x[i..n) that exist, at most 16 */
static inline __mmask16 lanes(int64_t i, int64_t n)
{
    return n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
}

static void gelu_avx512(float *out, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = lanes(i, n);
        _mm512_mask_storeu_ps(out + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

/* out may be g: each block of g is read before out's is written */
static void gelu_backward_avx512(float *out, const float *g, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = lanes(i, n);
        __m512 d = gelu_grad16(_mm512_maskz_loadu_ps(m, x + i));
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, g + i), d));
    }
}

/* one row of gelu(x + b) and of g ⊙ gelu'(x + b), n = the row's length */
static void bias_gelu_row_avx512(float *out, const float *x, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = lanes(i, n);
        __m512 u = _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, b + i));
        _mm512_mask_storeu_ps(out + i, m, gelu16(u));
    }
}

static void bias_gelu_backward_row_avx512(float *out, const float *g, const float *x,
                                          const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = lanes(i, n);
        __m512 u = _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, b + i));
        _mm512_mask_storeu_ps(out + i, m,
                              _mm512_mul_ps(_mm512_maskz_loadu_ps(m, g + i), gelu_grad16(u)));
    }
}

#undef SPLAT
#pragma GCC pop_options
#endif

/* The AVX-512 loops when the CPU has AVX-512, unless VENOM_NO_AVX512 is set
 * (non-empty), which forces the portable ones (as for the V:N:M kernels). */
static bool use_avx512(void)
{
#ifdef VEC_AVX512
    const char *off = getenv("VENOM_NO_AVX512");
    return __builtin_cpu_supports("avx512f") && !(off && *off);
#else
    return false;
#endif
}

void vn__gelu_f32(float *out, const float *x, int64_t n)
{
#ifdef VEC_AVX512
    if (use_avx512()) {
        gelu_avx512(out, x, n);
        return;
    }
#endif
    gelu_loop(out, x, n);
}

void vn__gelu_backward_f32(float *out, const float *g, const float *x, int64_t n)
{
#ifdef VEC_AVX512
    if (use_avx512()) {
        gelu_backward_avx512(out, g, x, n);
        return;
    }
#endif
    gelu_backward_loop(out, g, x, n);
}

void vn__gelu_backward_inplace_f32(float *g, const float *x, int64_t n)
{
#ifdef VEC_AVX512
    if (use_avx512()) {
        gelu_backward_avx512(g, g, x, n);
        return;
    }
#endif
    gelu_backward_inplace_loop(g, x, n);
}

/* The bias-gelu rows through the same kernels as vn__gelu_f32 and its
 * backward (gelu16 / gelu_grad16 or the portable loops' formulas), so that
 * gelu(x + bias) has the bits of gelu applied to the sum in any build. */
void vn__bias_gelu_f32(float *restrict out, const float *restrict x, const float *restrict b,
                       int64_t rows, int64_t D)
{
    bool wide = use_avx512();
#pragma omp parallel for schedule(static) if (rows * D > VN_OMP_MIN_WORK)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * D;
        float *o = out + r * D;
#ifdef VEC_AVX512
        if (wide) {
            bias_gelu_row_avx512(o, xr, b, D);
            continue;
        }
#endif
        for (int64_t j = 0; j < D; j++) o[j] = gelu_poly(xr[j] + b[j]);
    }
    (void)wide;
}

void vn__bias_gelu_backward_f32(float *restrict out, const float *restrict g,
                                const float *restrict x, const float *restrict b, int64_t rows,
                                int64_t D)
{
    bool wide = use_avx512();
#pragma omp parallel for schedule(static) if (rows * D > VN_OMP_MIN_WORK)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * D, *gr = g + r * D;
        float *o = out + r * D;
#ifdef VEC_AVX512
        if (wide) {
            bias_gelu_backward_row_avx512(o, gr, xr, b, D);
            continue;
        }
#endif
        for (int64_t j = 0; j < D; j++) o[j] = gr[j] * gelu_grad_poly(xr[j] + b[j]);
    }
    (void)wide;
}

float vn__max_f32(const float *x, int64_t n)
{
    float a[16], m = -INFINITY;
    int64_t body = n - n % 16, j = 0;
#ifdef __AVX__
    /* _mm256_max_ps(v, a) is v > a ? v : a in each lane: the rule of the
     * loop below, which GCC does not vectorize */
    __m256 lo = _mm256_set1_ps(-INFINITY), hi = lo;
    for (; j < body; j += 16) {
        lo = _mm256_max_ps(_mm256_loadu_ps(x + j), lo);
        hi = _mm256_max_ps(_mm256_loadu_ps(x + j + 8), hi);
    }
    _mm256_storeu_ps(a, lo);
    _mm256_storeu_ps(a + 8, hi);
#else
    for (int l = 0; l < 16; l++) a[l] = -INFINITY;
    for (; j < body; j += 16)
        for (int l = 0; l < 16; l++) a[l] = x[j + l] > a[l] ? x[j + l] : a[l];
#endif
    for (; j < n; j++) m = x[j] > m ? x[j] : m;
    for (int l = 0; l < 16; l++) m = a[l] > m ? a[l] : m;
    return m;
}

VEC_CLONES void vn__exp_shift_f32(float *restrict x, int64_t n, float shift, float scale)
{
    for (int64_t i = 0; i < n; i++) x[i] = exp_poly(x[i] - shift) * scale;
}
