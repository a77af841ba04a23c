/* quant_internal.h — what the files of engine/quant/ (and its white-box
 * tests) share: the two quantisers of BitNet b1.58 as plain loops, and the
 * packed ternary kernels by instruction set. The formulas are in
 * venom/quant.h. */
#ifndef VENOM_QUANT_INTERNAL_H
#define VENOM_QUANT_INTERNAL_H

#include "internal.h"

#include <stdint.h>

#define VNQ_EPS 1e-5f    /* ε of W / (γ + ε) */
#define VNQ_GROUP 128    /* columns per 32-byte group of a packed row */
#define VNQ_GROUP_BYTES 32

/* γ = mean |w| over n values (summed in double: n may be 10⁸). */
float vnq__gamma(const float *w, int64_t n);

/* W̃ = RoundClip(w / (γ + ε), −1, 1), as a float in {−1, 0, 1}. */
static inline float vnq__trit(float w, float gamma)
{
    float r = nearbyintf(w / (gamma + VNQ_EPS)); /* half to even, as torch.round */
    return r > 1.0f ? 1.0f : r < -1.0f ? -1.0f : r;
}

/* Row x (K values) → s = 127 / max|x| (0 for an all-zero row, whose x̃ is
 * 0; NaN for a row holding a NaN or ∞, whose x̃ is 0 and x̃/s NaN), and
 * x̃ = clamp(round(x·s), −128, 127) into q as int8 (q may be NULL) and as
 * x̃/s into xq (may be NULL). Returns s. */
float vnq__quantize_row(const float *x, int64_t K, int8_t *q, float *xq);

/* The two quantisers built from public ops (vn_abs, vn_mean_all, vn_div,
 * vn_clamp, ...), for CUDA tensors: γ·W̃ of w (N, K), and x̃/s of every row of
 * x (..., K). Run with grad mode off. The same values as the loops above
 * (γ up to its f32 summation). */
vn_tensor *vnq__quantize_weight_ops(const vn_tensor *w);
vn_tensor *vnq__quantize_input_ops(const vn_tensor *x);

/* The packed kernel: y[b·N + n] = (Σ_k x̃[b·Kp + k]·W̃[n, k])·γ/s[b] for
 * b < B, n < N; packed rows of Kp/4 bytes, x̃ rows of Kp int8 (Kp a
 * multiple of 128, zero past K), xsum[b] = Σ_k x̃[b, k]. s[b] = 0 gives a
 * zero row, s[b] = NaN a NaN row. */
typedef void (*vnq_kernel)(const uint8_t *packed, int64_t N, int64_t Kp, const int8_t *xq,
                           const int32_t *xsum, const float *s, int64_t B, float gamma, float *y);
/* By name: "portable" or "avx2" (NULL where the build or CPU lacks it);
 * NULL picks as vn_ternary_isa does. */
vnq_kernel vnq__kernel(const char *isa);

#endif
