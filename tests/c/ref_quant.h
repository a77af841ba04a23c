/* ref_quant.h — the BitNet b1.58 quantisers written plainly, the reference
 * the quantisation tests (test_bitnet.c, test_ternary_vnm.c) compare with.
 * Header-only, for tests. */
#ifndef VENOM_TEST_REF_QUANT_H
#define VENOM_TEST_REF_QUANT_H

#include <math.h>
#include <stdint.h>

/* RoundClip(w / (γ + ε), −1, 1), ε = 1e-5. */
static float ref_trit(float w, float gamma)
{
    float r = rintf(w / (gamma + 1e-5f));
    return fminf(1.0f, fmaxf(-1.0f, r));
}

/* x̃ of row x (K) into q, returns s (0 for a zero row). */
static float ref_act(const float *x, int64_t K, float *q)
{
    float m = 0;
    for (int64_t k = 0; k < K; k++)
        if (fabsf(x[k]) > m) m = fabsf(x[k]);
    float s = m > 0 ? 127.0f / m : 0;
    for (int64_t k = 0; k < K; k++) q[k] = fminf(127.0f, fmaxf(-128.0f, rintf(x[k] * s)));
    return s;
}

#endif
