/* The bf16 V:N:M values' gradient (SDDMM, vn_vnm_set_precision(VN_VNM_BF16),
 * engine/sparse/vnm_bf16_sddmm.c): vn_vnm_sddmm against products of the
 * bf16-rounded operands summed in double (a wrong pairing of batch rows,
 * rows or columns costs whole products) and against f32 within the
 * documented bound, for odd batches and batches that are not whole 64-row
 * panels, V not a multiple of 16 (odd, 1, past R), M = 4, 5, 8, 16, 32 and
 * groups past one work item; the f32 path bit for bit the same after a
 * bf16 call; dY read from panels (the fused MLP's path) bit for bit as
 * from rows, with junk past the batch ignored; NaN and Inf in dY where f32
 * has them; the gradients of vn_vnm_linear and vn_vnm_mlp through autograd.
 * Skips on a CPU without avx512_bf16. */
#include "bf16_ref.h"
#include "gradcheck.h"
#include "vnm_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kept column of value `slot` of group g in row r, from the mask (kept
 * columns in ascending order), or -1 when that value sits in padding. */
static int64_t kept_column(const uint8_t *mk, int64_t K, int64_t M, int64_t r, int64_t g, int slot)
{
    int seen = 0;
    for (int64_t c = g * M; c < (g + 1) * M && c < K; c++)
        if (mk[r * K + c] && seen++ == slot) return c;
    return -1;
}

static vn_tensor *sddmm_at(vn_vnm_precision prec, const vn_vnm *s, const vn_tensor *dy, const vn_tensor *x)
{
    CHECK_OK(vn_vnm_set_precision(prec));
    vn_tensor *dv = vn_vnm_sddmm(s, dy, x);
    CHECK_OK(vn_vnm_set_precision(VN_VNM_F32));
    CHECK_PTR(dv);
    return dv;
}

/* dv16 (R × 2G, bf16 path) against the bf16-rounded products of dy and x
 * summed in double, within f32 rounding of B + 8 terms, and against dv32
 * (f32 path) within 2^-7 of Σ|dy·x| plus that rounding twice. Returns the
 * largest |dv16 − dv32|. */
static double check_against(const char *what, const vn_tensor *dv16, const vn_tensor *dv32,
                            const float *DY, const float *X, const uint8_t *mk, int64_t R, int64_t K,
                            int64_t M, int64_t B)
{
    int64_t G = (K + M - 1) / M;
    const float *a16 = vn_tensor_data(dv16), *a32 = vn_tensor_data(dv32);
    double max_diff = 0;
    for (int64_t r = 0; r < R; r++)
        for (int64_t g = 0; g < G; g++)
            for (int slot = 0; slot < 2; slot++) {
                int64_t c = kept_column(mk, K, M, r, g, slot);
                double exact16 = 0, abs_sum = 0;
                for (int64_t b = 0; c >= 0 && b < B; b++) {
                    exact16 += bf16(DY[b * R + r]) * bf16(X[b * K + c]);
                    abs_sum += fabs((double)DY[b * R + r] * X[b * K + c]);
                }
                double got = a16[r * 2 * G + 2 * g + slot], f32 = a32[r * 2 * G + 2 * g + slot];
                /* f32 sums of exact bf16 products: one rounding per pair
                 * instruction (two adds each), a few more for slack */
                double sum_tol = (double)(B + 8) * 0x1p-24 * 1.5 * abs_sum + 1e-30;
                if (fabs(got - exact16) > sum_tol)
                    fail_msg("%s (row %lld group %lld slot %d): bf16 dW %.9g, bf16 products summed "
                             "in double %.9g, tolerance %.3g", what, (long long)r, (long long)g, slot,
                             got, exact16, sum_tol);
                double tol = (0x1p-7 + 0x1p-16) * abs_sum + 2 * sum_tol;
                if (fabs(got - f32) > tol)
                    fail_msg("%s (row %lld group %lld slot %d): bf16 dW %.9g, f32 %.9g, tolerance %.3g",
                             what, (long long)r, (long long)g, slot, got, f32, tol);
                if (fabs(got - f32) > max_diff) max_diff = fabs(got - f32);
            }
    return max_diff;
}

/* {R, K, V, M, B}: B = 1, odd, past one and two panels; V odd, 1, past R,
 * 48 and 80 (row vectors 3 and 4 + 1); M = 4, 5, 8, 16, 32; padded K; and
 * 70 groups at V = 128 (two work items of groups). */
static const int64_t shapes[][5] = {
    {16, 8, 16, 8, 1},     {7, 9, 4, 4, 5},       {50, 96, 5, 5, 70},    {130, 300, 64, 8, 131},
    {96, 640, 32, 16, 77}, {33, 1000, 1, 32, 3},  {20, 64, 128, 8, 64},  {100, 200, 48, 16, 100},
    {80, 96, 80, 4, 33},   {128, 560, 128, 8, 65}, {64, 512, 64, 16, 128},
};

static void test_sddmm(void **state)
{
    (void)state;
    if (!have_bf16()) skip();
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t R = shapes[i][0], K = shapes[i][1], V = shapes[i][2], M = shapes[i][3], B = shapes[i][4];
        unsigned seed = 140 + 7 * (unsigned)i;
        vn_tensor *w = trand(2, (int64_t[]){R, K}, -1, 1, seed);
        vn_tensor *x = trand(2, (int64_t[]){B, K}, -2, 2, seed + 1);
        vn_tensor *dy = trand(2, (int64_t[]){B, R}, -1, 1, seed + 2);
        vn_vnm *s = vn_vnm_from_dense(w, V, 2, M);
        CHECK_PTR(s);
        vn_tensor *mask = vn_vnm_mask(s);
        CHECK_PTR(mask);
        vn_tensor *d32 = sddmm_at(VN_VNM_F32, s, dy, x), *d16 = sddmm_at(VN_VNM_BF16, s, dy, x);
        vn_tensor *again = sddmm_at(VN_VNM_F32, s, dy, x);
        int64_t G = (K + M - 1) / M;
        /* The f32 path is untouched by a bf16 call in between. */
        assert_memory_equal(vn_tensor_data(d32), vn_tensor_data(again), sizeof(float) * (size_t)(R * 2 * G));
        char what[96];
        snprintf(what, sizeof what, "R %lld K %lld V %lld M %lld B %lld", (long long)R, (long long)K,
                 (long long)V, (long long)M, (long long)B);
        double max_diff = check_against(what, d16, d32, vn_tensor_data(dy), vn_tensor_data(x),
                                        vn_tensor_data(mask), R, K, M, B);
        /* bf16 did run: its rounding shows somewhere */
        assert_true(max_diff > 0);
        GC_RELEASE(w, x, dy, mask, d32, d16, again);
        vn_vnm_free(s);
    }
}

/* dY from panels (dYt, as the fused MLP hands it over) gives the same bits
 * as from rows, also with NaN in the panel's lanes past the batch (the
 * kernel must not read them). White-box: vnm__sddmm on packed operands. */
static void test_dy_from_panels(void **state)
{
    (void)state;
    if (!have_bf16()) skip();
    static const int64_t cases[][5] = {{130, 300, 64, 8, 131}, {50, 96, 5, 5, 70}, {20, 64, 128, 8, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t R = cases[i][0], K = cases[i][1], V = cases[i][2], M = cases[i][3], B = cases[i][4];
        vn_tensor *w = trand(2, (int64_t[]){R, K}, -1, 1, 60 + (unsigned)i);
        vn_tensor *x = trand(2, (int64_t[]){B, K}, -2, 2, 70 + (unsigned)i);
        vn_tensor *dy = trand(2, (int64_t[]){B, R}, -1, 1, 80 + (unsigned)i);
        vn_vnm *s = vn_vnm_from_dense(w, V, 2, M);
        CHECK_PTR(s);
        vnm_pattern p = vnm__pattern_of(s);
        int64_t npanels = (B + VNM_PANEL - 1) / VNM_PANEL, n = 2 * p.R * p.G;
        float *xt = calloc((size_t)(npanels * p.xrows * VNM_PANEL), sizeof(float));
        float *dyt = calloc((size_t)(npanels * p.R * VNM_PANEL), sizeof(float));
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
        assert_true(xt && dyt && a && b);
        vnm__pack(vn_tensor_data(x), B, K, K, xt, p.xrows);
        vnm__pack(vn_tensor_data(dy), B, R, R, dyt, R);
        for (int64_t r = 0; r < R; r++) /* junk in the last panel's lanes past B */
            for (int64_t l = B % VNM_PANEL; l > 0 && l < VNM_PANEL; l++)
                dyt[((npanels - 1) * R + r) * VNM_PANEL + l] = NAN;
        CHECK_OK(vn_vnm_set_precision(VN_VNM_BF16));
        CHECK_OK(vnm__sddmm(&p, vn_tensor_data(dy), NULL, xt, B, a));
        CHECK_OK(vnm__sddmm(&p, NULL, dyt, xt, B, b));
        CHECK_OK(vn_vnm_set_precision(VN_VNM_F32));
        assert_memory_equal(a, b, sizeof(float) * (size_t)n);
        free(xt), free(dyt), free(a), free(b);
        GC_RELEASE(w, x, dy);
        vn_vnm_free(s);
    }
}

/* NaN and ±Inf in dY reach the same entries, with the same sign, as in f32
 * (x has no zeros, so Inf·x stays infinite), including the last row of an
 * odd batch, whose pair partner is padding. */
static void test_nan_inf(void **state)
{
    (void)state;
    if (!have_bf16()) skip();
    int64_t R = 130, K = 300, V = 64, M = 8, B = 131, G = (K + M - 1) / M;
    vn_tensor *w = trand(2, (int64_t[]){R, K}, -1, 1, 5);
    vn_tensor *x = trand(2, (int64_t[]){B, K}, 0.5, 2, 6);
    vn_tensor *dy = trand(2, (int64_t[]){B, R}, -1, 1, 7);
    float *pdy = vn_tensor_data(dy);
    pdy[5 * R + 3] = NAN;
    pdy[100 * R + 70] = INFINITY;
    pdy[130 * R + 129] = -INFINITY;
    pdy[64 * R + 128] = INFINITY; /* with a NaN in the same row: NaN */
    pdy[65 * R + 128] = NAN;
    vn_vnm *s = vn_vnm_from_dense(w, V, 2, M);
    CHECK_PTR(s);
    vn_tensor *d32 = sddmm_at(VN_VNM_F32, s, dy, x), *d16 = sddmm_at(VN_VNM_BF16, s, dy, x);
    const float *a32 = vn_tensor_data(d32), *a16 = vn_tensor_data(d16);
    int special = 0;
    for (int64_t e = 0; e < R * 2 * G; e++) {
        if (isnan(a32[e]) != isnan(a16[e]) || isinf(a32[e]) != isinf(a16[e]) ||
            (isinf(a32[e]) && signbit(a32[e]) != signbit(a16[e])))
            fail_msg("entry %lld (row %lld): f32 %g, bf16 %g", (long long)e, (long long)(e / (2 * G)),
                     a32[e], a16[e]);
        special += !isfinite(a32[e]);
    }
    /* the four rows' kept entries (2G each, padding slots aside) */
    assert_true(special >= 4 * 2 * (K / M));
    GC_RELEASE(w, x, dy, d32, d16);
    vn_vnm_free(s);
}

/* The values' gradient of vn_vnm_linear through autograd under bf16 (dY the
 * given output gradient, so the same bound as the plain call), and of both
 * layers of vn_vnm_mlp (fc's dY comes from panels) against f32 autograd:
 * there the bf16 forward and dX change dY too, so the check is on the
 * whole gradient, ‖bf16 − f32‖ ≤ 2^-5·‖f32‖. */
static void test_autograd(void **state)
{
    (void)state;
    if (!have_bf16()) skip();
    int64_t R = 96, K = 200, V = 32, M = 8, B = 77, G = (K + M - 1) / M;
    vn_tensor *w = trand(2, (int64_t[]){R, K}, -1, 1, 11);
    vn_tensor *x = trand(2, (int64_t[]){B, K}, -2, 2, 12);
    vn_tensor *g = trand(2, (int64_t[]){B, R}, -1, 1, 13);
    vn_vnm *s = vn_vnm_from_dense(w, V, 2, M);
    CHECK_PTR(s);
    vn_tensor *mask = vn_vnm_mask(s), *vals = vn_vnm_values(s);
    CHECK_OK(vn_tensor_set_requires_grad(vals, true));
    vn_tensor *grads[2];
    for (int k = 0; k < 2; k++) {
        CHECK_OK(vn_vnm_set_precision(k ? VN_VNM_BF16 : VN_VNM_F32));
        vn_tensor *y = vn_vnm_linear(x, s, vals, NULL);
        CHECK_PTR(y);
        CHECK_OK(vn_backward(y, g));
        CHECK_OK(vn_vnm_set_precision(VN_VNM_F32));
        grads[k] = vn_contiguous(vn_tensor_grad(vals));
        CHECK_PTR(grads[k]);
        CHECK_OK(vn_tensor_set_grad(vals, NULL));
        vn_tensor_release(y);
    }
    assert_true(check_against("vnm_linear", grads[1], grads[0], vn_tensor_data(g), vn_tensor_data(x),
                              vn_tensor_data(mask), R, K, M, B) > 0);
    (void)G;
    GC_RELEASE(grads[0], grads[1], mask, vals, w, g);

    /* the MLP: x (B, K) → fc (H = R rows, K) → GELU → proj (K rows, H) */
    vn_tensor *w2 = trand(2, (int64_t[]){K, R}, -1, 1, 14);
    vn_vnm *s2 = vn_vnm_from_dense(w2, 16, 2, 4);
    CHECK_PTR(s2);
    vn_tensor *v1 = vn_vnm_values(s), *v2 = vn_vnm_values(s2), *gy = trand(2, (int64_t[]){B, K}, -1, 1, 15);
    CHECK_OK(vn_tensor_set_requires_grad(v1, true));
    CHECK_OK(vn_tensor_set_requires_grad(v2, true));
    vn_tensor *mg[2][2];
    for (int k = 0; k < 2; k++) {
        CHECK_OK(vn_vnm_set_precision(k ? VN_VNM_BF16 : VN_VNM_F32));
        vn_tensor *y = vn_vnm_mlp(x, s, v1, NULL, s2, v2, NULL);
        CHECK_PTR(y);
        CHECK_OK(vn_backward(y, gy));
        CHECK_OK(vn_vnm_set_precision(VN_VNM_F32));
        for (int l = 0; l < 2; l++) {
            vn_tensor *v = l ? v2 : v1;
            mg[k][l] = vn_contiguous(vn_tensor_grad(v));
            CHECK_PTR(mg[k][l]);
            CHECK_OK(vn_tensor_set_grad(v, NULL));
        }
        vn_tensor_release(y);
    }
    for (int l = 0; l < 2; l++) {
        const float *a = vn_tensor_data(mg[1][l]), *b = vn_tensor_data(mg[0][l]);
        double diff = 0, norm = 0;
        for (int64_t e = 0; e < vn_tensor_numel(mg[0][l]); e++) {
            diff += ((double)a[e] - b[e]) * ((double)a[e] - b[e]);
            norm += (double)b[e] * b[e];
        }
        if (!(sqrt(diff) <= 0x1p-5 * sqrt(norm)) || diff == 0)
            fail_msg("vnm_mlp layer %d: ‖bf16 − f32‖ %.3g against ‖f32‖ %.3g", l + 1, sqrt(diff), sqrt(norm));
    }
    GC_RELEASE(mg[0][0], mg[0][1], mg[1][0], mg[1][1], v1, v2, gy, w2, x);
    vn_vnm_free(s);
    vn_vnm_free(s2);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sddmm),
        cmocka_unit_test(test_dy_from_panels),
        cmocka_unit_test(test_nan_inf),
        cmocka_unit_test(test_autograd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
