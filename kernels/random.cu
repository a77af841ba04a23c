/* random.cu — counter-based random numbers: element i depends only on the
 * key and i, so a launch needs no state and any grid gives the same numbers.
 *
 * Uniforms and normals come from Philox4x32-10 (Salmon, Moraes, Dror & Shaw,
 * "Parallel random numbers: as easy as 1, 2, 3", SC 2011): the counter is
 * the group g = i / 4, the key the caller's 64 bits, and the four 32-bit
 * words of one call serve elements 4g .. 4g+3. The dropout mask instead
 * repeats the CPU's lowbias32 hash bit for bit (dropout_mask_at in scalar.h,
 * shared with vn_dropout), so CPU and GPU drop the same elements for the same
 * key. */
#include "internal.cuh"
#include "scalar.h"

/* ---- Philox4x32-10 --------------------------------------------------------- */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* golden ratio */
#define PHILOX_W1 0xBB67AE85u /* sqrt(3) − 1 */

/* The four output words for counter (c0, c1, 0, 0) under key (k0, k1). */
static __device__ inline uint4 philox(uint32_t c0, uint32_t c1, uint32_t k0, uint32_t k1)
{
    uint32_t x0 = c0, x1 = c1, x2 = 0, x3 = 0;
    for (int round = 0; round < 10; round++) {
        if (round > 0) { /* the key schedule: a Weyl sequence */
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        uint32_t hi0 = __umulhi(PHILOX_M0, x0), lo0 = PHILOX_M0 * x0;
        uint32_t hi1 = __umulhi(PHILOX_M1, x2), lo1 = PHILOX_M1 * x2;
        uint32_t y0 = hi1 ^ x1 ^ k0, y2 = hi0 ^ x3 ^ k1;
        x0 = y0;
        x1 = lo1;
        x2 = y2;
        x3 = lo0;
    }
    return make_uint4(x0, x1, x2, x3);
}

/* Uniform on [0, 1): the top 24 bits, exactly representable in a float. */
static __device__ inline float uniform24(uint32_t w) { return (float)(w >> 8) * 0x1p-24f; }

/* Box–Muller from two words: u1 in (0, 1] so the log is finite. */
static __device__ inline float2 box_muller(uint32_t a, uint32_t b)
{
    float u1 = 1.0f - uniform24(a), u2 = uniform24(b);
    float r = sqrtf(-2.0f * logf(u1)), s, c;
    sincospif(2.0f * u2, &s, &c);
    return make_float2(r * c, r * s);
}

static __global__ void random_kernel(float *out, int64_t n, uint32_t k0, uint32_t k1, bool normal)
{
    int64_t groups = (n + 3) / 4;
    for (int64_t g = VNK_GRID_START; g < groups; g += VNK_GRID_STEP) {
        uint4 w = philox((uint32_t)g, (uint32_t)((uint64_t)g >> 32), k0, k1);
        float v[4];
        if (normal) {
            float2 p = box_muller(w.x, w.y), q = box_muller(w.z, w.w);
            v[0] = p.x, v[1] = p.y, v[2] = q.x, v[3] = q.y;
        } else {
            v[0] = uniform24(w.x), v[1] = uniform24(w.y), v[2] = uniform24(w.z), v[3] = uniform24(w.w);
        }
        int64_t i0 = 4 * g;
        for (int k = 0; k < 4 && i0 + k < n; k++) out[i0 + k] = v[k];
    }
}

int vnk_random(float *out, int64_t n, uint64_t key, bool normal)
{
    if (n < 0) return vnk__fail("vnk_random: negative count %lld", (long long)n);
    if (n == 0) return 0;
    if (!out) return vnk__fail("vnk_random: NULL output");
    random_kernel<<<vnk__blocks((n + 3) / 4, VNK_THREADS), VNK_THREADS>>>(out, n, (uint32_t)key,
                                                                        (uint32_t)(key >> 32), normal);
    return vnk__launched(normal ? "vnk_random(normal)" : "vnk_random(uniform)");
}

/* ---- dropout ------------------------------------------------------------------- */

/* dropout_mask_at (scalar.h) is the CPU's formula, so both drop the same
 * elements for the same key. */
static __global__ void dropout_kernel(float *mask, int64_t n, uint32_t k0, uint32_t k1,
                                      uint64_t threshold, float scale)
{
    for (int64_t i = VNK_GRID_START; i < n; i += VNK_GRID_STEP)
        mask[i] = dropout_mask_at((uint32_t)i, k0, k1, threshold, scale);
}

int vnk_dropout_mask(float *mask, int64_t n, uint64_t key, uint64_t threshold, float scale)
{
    if (n < 0) return vnk__fail("vnk_dropout_mask: negative count %lld", (long long)n);
    if (n == 0) return 0;
    if (!mask) return vnk__fail("vnk_dropout_mask: NULL output");
    dropout_kernel<<<vnk__blocks(n, VNK_THREADS), VNK_THREADS>>>(mask, n, (uint32_t)key,
                                                                (uint32_t)(key >> 32), threshold, scale);
    return vnk__launched("vnk_dropout_mask");
}
