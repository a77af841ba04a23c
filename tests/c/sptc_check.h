/* sptc_check.h — the comparison half of the Sparse Tensor Core kernels'
 * host emulators (test_vnm_sptc_emu.c for the sm_90 kernels,
 * test_vnm_wgmma_emu.c for the sm_90a one): test matrices, 16-bit rounding
 * of the operands, and the check of an emulated forward against the CPU
 * kernel. Header-only (static functions), included once per test. */
#ifndef VENOM_TESTS_SPTC_CHECK_H
#define VENOM_TESTS_SPTC_CHECK_H

#include "gradcheck.h"
#include "sptc_emu.h"
#include "vnm_random.h"
#include "vnm_sptc.h"

#include <math.h>
#include <stdlib.h>

/* The forward's operands as a kernel receives them (kernels.h): xt is X
 * transposed (K × ldx, 16-bit), y is B × R f32. */
typedef struct {
    const vnm_sptc *p;
    const uint16_t *xt;
    int64_t ldx, B;
    const float *bias;
    float *y;
} spmm_args;

static uint16_t to_half(float v, vn_dtype dt)
{
    return dt == VN_BF16 ? vn__f32_to_bf16(v) : vn__f32_to_f16(v);
}

/* Rounds t (f32, CPU) in place to dt, and returns |t| (a new tensor) when
 * want_abs. */
static vn_tensor *round_in_place(vn_tensor *t, vn_dtype dt, bool want_abs)
{
    float *v = vn_tensor_data(t);
    int64_t n = vn_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) v[i] = half_to_f32(to_half(v[i], dt), dt);
    if (!want_abs) return NULL;
    vn_tensor *a = vn_abs(t);
    CHECK_PTR(a);
    return a;
}

/* Values in ±[2^-8, 2^8): wide enough that rounding matters, narrow enough
 * that f16 neither overflows nor goes subnormal in a product. */
static vn_vnm *test_matrix(int64_t R, int64_t K, int64_t V, int64_t M, uint32_t seed)
{
    vn_vnm *s = random_vnm(R, K, V, M, seed);
    vn_tensor *vals = vn_vnm_values(s);
    float *v = vn_tensor_data(vals);
    for (int64_t i = 0; i < vn_tensor_numel(vals); i++) v[i] = ldexpf(frexpf(v[i], &(int){0}), (int)(seed + i) % 16 - 7);
    vn_tensor_release(vals);
    return s;
}

/* The forward emulated by emu against vn_vnm_spmm on the CPU with the same
 * rounded operands: |got − want| ≤ 1e-5 · (|W|·|X|) elementwise (f32 sums
 * of exact products in another order), bias added. y starts as NaN, so an
 * element the emulated kernel does not write fails. */
static void check_spmm_with(void (*emu)(const spmm_args *), int64_t R, int64_t K, int64_t V, int64_t M,
                            int64_t B, vn_dtype dt, uint32_t seed)
{
    vn_vnm *s = test_matrix(R, K, V, M, seed);
    vn_tensor *vals = vn_vnm_values(s);
    vn_tensor *avals = round_in_place(vals, dt, true);
    vn_tensor *x = trand(2, (int64_t[]){B, K}, -2, 2, seed + 7);
    vn_tensor *ax = round_in_place(x, dt, true);
    vn_tensor *bias = trand(1, (int64_t[]){R}, -1, 1, seed + 9);
    vnm_sptc *p = vnm_sptc_pack(s, dt);
    CHECK_PTR(p);
    int64_t ldx = (B + 7) / 8 * 8;
    uint16_t *xt = aligned_alloc(16, (size_t)((K * ldx * 2 + 15) / 16 * 16));
    const float *xv = vn_tensor_data(x);
    for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < ldx; n++) xt[k * ldx + n] = n < B ? to_half(xv[n * K + k], dt) : 0;
    float *y = malloc((size_t)(B * R) * sizeof *y);
    for (int64_t i = 0; i < B * R; i++) y[i] = NAN;
    emu(&(spmm_args){p, xt, ldx, B, vn_tensor_data(bias), y});

    vn_tensor *want = vn_vnm_spmm(s, vals, x);
    CHECK_PTR(want);
    vn_tensor *bound = vn_vnm_spmm(s, avals, ax);
    CHECK_PTR(bound);
    const float *w = vn_tensor_data(want), *bd = vn_tensor_data(bound), *bi = vn_tensor_data(bias);
    for (int64_t i = 0; i < B * R; i++) {
        float ref = w[i] + bi[i % R];
        if (!(fabsf(y[i] - ref) <= 1e-5f * bd[i] + 1e-6f * fabsf(bi[i % R])))
            fail_msg("R=%lld K=%lld V=%lld M=%lld B=%lld %s: y[%lld][%lld] = %g, CPU %g",
                     (long long)R, (long long)K, (long long)V, (long long)M, (long long)B,
                     vn_dtype_name(dt), (long long)(i / R), (long long)(i % R), (double)y[i],
                     (double)ref);
    }
    free(y);
    free(xt);
    vnm_sptc_free(p);
    vn_tensor *ts[] = {vals, avals, x, ax, bias, want, bound};
    gc_release_all(ts, sizeof ts / sizeof ts[0]);
    vn_vnm_free(s);
}

#endif
