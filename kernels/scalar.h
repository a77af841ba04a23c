/* scalar.h — scalar formulas that the CPU kernels (engine/ops_pointwise.c,
 * compiled by gcc) and the CUDA kernels (kernels/elementwise.cu and
 * random.cu, compiled by nvcc) must compute alike. Each is written once here,
 * so both devices round the same way and a dropout mask is the same bits on
 * either. Plain C: no tensors, no CUDA types. */
#ifndef VENOM_KERNELS_SCALAR_H
#define VENOM_KERNELS_SCALAR_H

#include <math.h>
#include <stdint.h>

/* Callable from host and device code under nvcc; nothing in C. */
#ifdef __CUDACC__
#define VN_HD __host__ __device__
#else
#define VN_HD
#endif

/* Whether the 16-bit float bits h (the low 16 bits) are Inf or NaN, an
 * all-ones exponent: bf16 (8 exponent bits, mask 0x7f80) when bf16, else f16
 * (5 bits, 0x7c00). Tested on the rounded bits, not on the f32 they came
 * from: a finite f32 past the 16-bit range rounds to Inf, and the rounded
 * value is what a tensor-core product multiplies (k_dx's fragments and the
 * dY flag of vnk_f32_to_half_check ask the same question). */
static inline VN_HD int b16_nonfinite(uint32_t h, int bf16)
{
    const uint32_t e = bf16 ? 0x7f80u : 0x7c00u;
    return (h & e) == e;
}

/* tanh through expf: glibc's tanhf goes through expm1f and costs ~30 ns on
 * moderate inputs, 7x this. tanh|x| = (1 − e)/(1 + e) with e = exp(−2|x|);
 * below 0.1, where 1 − e cancels, a Taylor polynomial (error < 1e-10).
 * Within 2 ulp of tanh everywhere; nan stays nan. */
static inline VN_HD float tanh_f(float x)
{
    float ax = fabsf(x);
    if (ax < 0.1f) {
        float x2 = x * x;
        return x * (1.0f + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315))));
    }
    float e = expf(-2.0f * ax);
    return copysignf((1.0f - e) / (1.0f + e), x);
}

/* gelu (tanh form): y = x/2·(1 + tanh u), u = k·(x + c·x³), computed as
 * y = x·s with s = (1 + tanh u)/2 = 1/(1 + e^(−2u)), so
 * y' = s + 2k·x·s·(1 − s)·(1 + 3c·x²). (x/2·(1 + tanh u) itself cancels
 * where tanh u → −1: 35% off at x = −5.) The same formulas as vec_math.c's
 * vectorized loops, with expf. */
#define VN_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define VN_GELU_C 0.044715f
/* Beyond ±VN_GELU_FLAT gelu is 0 or x and its derivative 0 or 1 to float
 * precision (|y| < 2e-37 below −10), and the formulas are not usable far out:
 * c·x³ overflows (past ~1.9e12), and x times a vanishing factor gave
 * −960 for gelu'(−1e14), NaN for gelu'(+inf), −inf for gelu(−inf). */
#define VN_GELU_FLAT 10.0f

static inline VN_HD float gelu_f(float x)
{
    if (x < -VN_GELU_FLAT) return 0.0f;
    return x / (1.0f + expf(-2.0f * VN_GELU_K * (x + VN_GELU_C * x * x * x)));
}

static inline VN_HD float gelu_grad(float x)
{
    if (x < -VN_GELU_FLAT) return 0.0f;
    if (x > VN_GELU_FLAT) return 1.0f;
    float s = 1.0f / (1.0f + expf(-2.0f * VN_GELU_K * (x + VN_GELU_C * x * x * x)));
    return s + 2.0f * VN_GELU_K * x * s * (1.0f - s) * (1.0f + 3.0f * VN_GELU_C * x * x);
}

/* min(max(x, lo), hi); nan x stays nan (both comparisons are false). */
static inline VN_HD float clamp_f(float x, float lo, float hi)
{
    float y = x < lo ? lo : x;
    return y > hi ? hi : y;
}

/* An integer clamp's bound v as a T in [tmin, tmax]: saturating, so ±inf
 * (no bound) becomes the range's end, and NaN becomes nan_to (the engine
 * has replaced NaN bounds already). Exact for the whole numbers in range
 * the engine accepts, i64 beyond 2^53 included. */
#define VN_CLAMP_BOUND(T, v, tmin, tmax, nan_to)                                   \
    ((v) != (v) ? (T)(nan_to) : (v) <= (double)(tmin) ? (T)(tmin)                 \
     : (v) >= (double)(tmax) ? (T)(tmax) : (T)(v))

/* min(max(x, lo), hi) in x's integer type (clamp_f's order: hi wins when
 * lo > hi). */
#define VN_CLAMP_INT(x, lo, hi) ((x) < (lo) ? ((lo) > (hi) ? (hi) : (lo)) : ((x) > (hi) ? (hi) : (x)))

/* g·d(a^b)/db = g·a^b·ln a, taken as 0 where a = 0 and b >= 0 (the limit
 * from a > 0; ln 0 would give nan there). */
static inline VN_HD float pow_grad_exponent(float g, float a, float b)
{
    return (a == 0.0f && b >= 0.0f) ? 0.0f : g * powf(a, b) * logf(a);
}

/* lowbias32 (C. Wellons): a 32-bit integer hash with good avalanche, in plain
 * 32-bit arithmetic that GCC vectorizes. */
static inline VN_HD uint32_t hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* Element i of an inverted-dropout mask under the key (k0, k1): 0 when its
 * hash falls below threshold = p·2³², else scale = 1/(1 − p). Element i
 * depends only on the key and i, so any thread order gives the same mask. */
static inline VN_HD float dropout_mask_at(uint32_t i, uint32_t k0, uint32_t k1,
                                          uint64_t threshold, float scale)
{
    return hash32(hash32(i ^ k0) + k1) < threshold ? 0.0f : scale;
}

#endif
