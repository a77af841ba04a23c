/* The bf16 V:N:M forward and dX (vn_vnm_set_precision(VN_VNM_BF16)): their outputs
 * against products of the bf16-rounded operands summed in double (which
 * catches a wrong pairing of values and columns: that costs whole
 * products) and against the f32 products within the documented bound, for
 * shapes that do not divide by V, M, the kernel's chunk of groups or the
 * batch panel; the f32 path bit for bit the same before and after a bf16
 * call; dX likewise, also for odd V (row pairs across blocks); bad input. The bf16 checks skip on a CPU without avx512_bf16. */
#include "bf16_ref.h"
#include "gradcheck.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* y (B × R) of vn_vnm_linear at the current precision. */
static vn_tensor *forward(const vn_tensor *x, const vn_vnm *s, const vn_tensor *v, const vn_tensor *b)
{
    vn_tensor *y = vn_vnm_linear(x, s, v, b);
    CHECK_PTR(y);
    return y;
}

/* {R, K, V, N, M, B}: G = ⌈K/M⌉ from 1 to 40 groups (chunks of 8 and a
 * ragged last one), padded K, R not a multiple of V, batches below, at and
 * past the 64-row panel. */
static const int64_t shapes[][5] = {
    {16, 8, 16, 8, 1},     {7, 9, 4, 4, 5},      {64, 168, 16, 8, 64},   {130, 300, 64, 8, 130},
    {96, 640, 32, 16, 77}, {33, 1000, 1, 32, 3}, {128, 256, 128, 4, 200},
};

static void test_forward(void **state)
{
    (void)state;
    if (!have_bf16()) skip();
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t R = shapes[i][0], K = shapes[i][1], V = shapes[i][2], M = shapes[i][3], B = shapes[i][4];
        unsigned seed = 40 + 7 * (unsigned)i;
        vn_tensor *w = trand(2, (int64_t[]){R, K}, -1, 1, seed);
        vn_tensor *x = trand(2, (int64_t[]){B, K}, -2, 2, seed + 1);
        vn_tensor *bias = trand(1, (int64_t[]){R}, -1, 1, seed + 2);
        vn_vnm *s = vn_vnm_from_dense(w, V, 2, M);
        CHECK_PTR(s);
        vn_tensor *vals = vn_vnm_values(s), *wd = vn_vnm_to_dense(s);
        CHECK_PTR(wd);
        vn_tensor *y32 = forward(x, s, vals, bias);
        CHECK_OK(vn_vnm_set_precision(VN_VNM_BF16));
        assert_int_equal(vn_vnm_get_precision(), VN_VNM_BF16);
        vn_tensor *y16 = forward(x, s, vals, bias);
        CHECK_OK(vn_vnm_set_precision(VN_VNM_F32));
        vn_tensor *again = forward(x, s, vals, bias);
        /* The f32 path is untouched by a bf16 call in between. */
        assert_memory_equal(vn_tensor_data(y32), vn_tensor_data(again), sizeof(float) * (size_t)(B * R));

        const float *W = vn_tensor_data(wd), *X = vn_tensor_data(x), *b = vn_tensor_data(bias);
        const float *a32 = vn_tensor_data(y32), *a16 = vn_tensor_data(y16);
        /* roundings in a sum: the kept products, the chunks, the accumulator sets, the bias */
        int64_t terms = 3 * ((K + M - 1) / M) + 8;
        double max_diff = 0;
        for (int64_t l = 0; l < B; l++)
            for (int64_t r = 0; r < R; r++) {
                double exact16 = b[r], abs_sum = fabs(b[r]);
                for (int64_t k = 0; k < K; k++) {
                    if (W[r * K + k] == 0) continue;
                    exact16 += bf16(W[r * K + k]) * bf16(X[l * K + k]);
                    abs_sum += fabs((double)W[r * K + k] * X[l * K + k]);
                }
                double got = a16[l * R + r], f32 = a32[l * R + r];
                /* f32 sums of exact bf16 products: K-scaled float rounding */
                double sum_tol = (double)terms * 0x1p-24 * 1.5 * abs_sum + 1e-30;
                if (fabs(got - exact16) > sum_tol)
                    fail_msg("shape %zu (B %lld row %lld): bf16 forward %.9g, bf16 products summed "
                             "in double %.9g, tolerance %.3g", i, (long long)l, (long long)r, got,
                             exact16, sum_tol);
                /* against f32: both operands rounded (2^-8 each) plus the sums */
                double tol = (0x1p-7 + 0x1p-16) * abs_sum + 2 * sum_tol;
                if (fabs(got - f32) > tol)
                    fail_msg("shape %zu (B %lld row %lld): bf16 forward %.9g, f32 %.9g, tolerance %.3g",
                             i, (long long)l, (long long)r, got, f32, tol);
                if (fabs(got - f32) > max_diff) max_diff = fabs(got - f32);
            }
        /* bf16 did run: its rounding shows somewhere */
        assert_true(max_diff > 0);
        GC_RELEASE(w, x, bias, vals, wd, y32, y16, again);
        vn_vnm_free(s);
    }
}

/* {R, K, V, M, B} for dX: odd V (a row pair straddles two blocks), odd R
 * (a last row without a partner), V = 1, V past R. */
static const int64_t dx_shapes[][5] = {
    {16, 8, 16, 8, 1},    {7, 9, 4, 4, 5},     {50, 96, 5, 8, 70},     {9, 40, 3, 4, 65},
    {130, 300, 64, 8, 130}, {33, 1000, 1, 32, 3}, {96, 640, 32, 16, 77}, {20, 64, 128, 8, 64},
};

static vn_tensor *dx_of(const vn_vnm *s, const vn_tensor *v, const vn_tensor *dy)
{
    vn_tensor *dx = vn_vnm_spmm_t(s, v, dy);
    CHECK_PTR(dx);
    return dx;
}

static void test_dx(void **state)
{
    (void)state;
    if (!have_bf16()) skip();
    for (size_t i = 0; i < sizeof dx_shapes / sizeof dx_shapes[0]; i++) {
        int64_t R = dx_shapes[i][0], K = dx_shapes[i][1], V = dx_shapes[i][2], M = dx_shapes[i][3],
                B = dx_shapes[i][4];
        unsigned seed = 90 + 5 * (unsigned)i;
        vn_tensor *w = trand(2, (int64_t[]){R, K}, -1, 1, seed);
        vn_tensor *dy = trand(2, (int64_t[]){B, R}, -2, 2, seed + 1);
        vn_vnm *s = vn_vnm_from_dense(w, V, 2, M);
        CHECK_PTR(s);
        vn_tensor *vals = vn_vnm_values(s), *wd = vn_vnm_to_dense(s);
        CHECK_PTR(wd);
        vn_tensor *d32 = dx_of(s, vals, dy);
        CHECK_OK(vn_vnm_set_precision(VN_VNM_BF16));
        vn_tensor *d16 = dx_of(s, vals, dy);
        CHECK_OK(vn_vnm_set_precision(VN_VNM_F32));
        vn_tensor *again = dx_of(s, vals, dy);
        assert_memory_equal(vn_tensor_data(d32), vn_tensor_data(again), sizeof(float) * (size_t)(B * K));

        const float *W = vn_tensor_data(wd), *Y = vn_tensor_data(dy);
        const float *a32 = vn_tensor_data(d32), *a16 = vn_tensor_data(d16);
        /* roundings in a sum: one per pair instruction and its add, the sets */
        int64_t terms = R + 8;
        double max_diff = 0;
        for (int64_t l = 0; l < B; l++)
            for (int64_t k = 0; k < K; k++) {
                double exact16 = 0, abs_sum = 0;
                for (int64_t r = 0; r < R; r++) {
                    if (W[r * K + k] == 0) continue;
                    exact16 += bf16(Y[l * R + r]) * bf16(W[r * K + k]);
                    abs_sum += fabs((double)Y[l * R + r] * W[r * K + k]);
                }
                double got = a16[l * K + k], f32 = a32[l * K + k];
                double sum_tol = (double)terms * 0x1p-24 * 1.5 * abs_sum + 1e-30;
                if (fabs(got - exact16) > sum_tol)
                    fail_msg("shape %zu (B %lld col %lld): bf16 dX %.9g, bf16 products summed in "
                             "double %.9g, tolerance %.3g", i, (long long)l, (long long)k, got, exact16,
                             sum_tol);
                double tol = (0x1p-7 + 0x1p-16) * abs_sum + 2 * sum_tol;
                if (fabs(got - f32) > tol)
                    fail_msg("shape %zu (B %lld col %lld): bf16 dX %.9g, f32 %.9g, tolerance %.3g", i,
                             (long long)l, (long long)k, got, f32, tol);
                if (fabs(got - f32) > max_diff) max_diff = fabs(got - f32);
            }
        assert_true(max_diff > 0);
        GC_RELEASE(w, dy, vals, wd, d32, d16, again);
        vn_vnm_free(s);
    }
}

/* dX of (s, v) in bf16 must equal, bit for bit, that of a new matrix with
 * s's pattern (columns and indices) and a copy of v's numbers in a new
 * tensor: lists built afresh. A stale cached list gives other numbers. */
static void check_fresh(const vn_vnm *s, int64_t R, int64_t K, int64_t V, int64_t M,
                        const vn_tensor *v, const vn_tensor *dy, const char *what)
{
    vn_tensor *cols = vn_vnm_columns(s), *idx = vn_vnm_indices(s), *copy = vn_clone(v);
    CHECK_PTR(copy);
    vn_vnm *fresh = vn_vnm_from_pattern(R, K, V, 2, M, cols, idx, copy);
    CHECK_PTR(fresh);
    vn_tensor *got = dx_of(s, v, dy), *want = dx_of(fresh, copy, dy);
    int64_t n = vn_tensor_numel(got);
    if (memcmp(vn_tensor_data(got), vn_tensor_data(want), sizeof(float) * (size_t)n))
        fail_msg("%s: bf16 dX differs from a new matrix's with the same pattern and values", what);
    GC_RELEASE(cols, idx, copy, got, want);
    vn_vnm_free(fresh);
}

/* The pattern's other valid index nibble: (a, b) → the next of the 6 pairs. */
static uint8_t other_pair(uint8_t nib)
{
    static const uint8_t next[16] = {[4] = 8, [8] = 12, [12] = 9, [9] = 13, [13] = 14, [14] = 4};
    return next[nib & 15];
}

/* The bf16 dX keeps its pair lists in the matrix for the values tensor at
 * its storage version (vn_vnm_spmm_t): an in-place write (copy_, fill_), a
 * different values tensor, a matrix with other indices over the same
 * values tensor, and a new matrix of the same shape after the old one is
 * freed must each see the values and pattern of the call. */
static void test_dx_lists_cache(void **state)
{
    (void)state;
    if (!have_bf16()) skip();
    const int64_t R = 130, K = 300, V = 64, M = 8, B = 70;
    vn_tensor *w = trand(2, (int64_t[]){R, K}, -1, 1, 301), *dy = trand(2, (int64_t[]){B, R}, -2, 2, 302);
    vn_vnm *s = vn_vnm_from_dense(w, V, 2, M);
    CHECK_PTR(s);
    vn_tensor *v = vn_vnm_values(s);
    CHECK_OK(vn_vnm_set_precision(VN_VNM_BF16));
    vn_tensor *first = dx_of(s, v, dy), *again = dx_of(s, v, dy);
    /* a hit gives the same bits */
    assert_memory_equal(vn_tensor_data(first), vn_tensor_data(again), sizeof(float) * (size_t)(B * K));
    check_fresh(s, R, K, V, M, v, dy, "first call");

    /* values overwritten in place: copy_ from other numbers, then fill_ */
    vn_tensor *other = trand(2, (int64_t[]){R, 2 * ((K + M - 1) / M)}, -3, 3, 303);
    CHECK_OK(vn_tensor_copy_(v, other));
    vn_tensor *after = dx_of(s, v, dy);
    assert_true(memcmp(vn_tensor_data(first), vn_tensor_data(after), sizeof(float) * (size_t)(B * K)));
    check_fresh(s, R, K, V, M, v, dy, "after copy_");
    CHECK_OK(vn_tensor_fill_(v, 0.5));
    check_fresh(s, R, K, V, M, v, dy, "after fill_");

    /* another values tensor, then the first one again; and two made alike
     * (the same version): only their storage tells them apart */
    check_fresh(s, R, K, V, M, other, dy, "another values tensor");
    check_fresh(s, R, K, V, M, v, dy, "the first values tensor again");
    vn_tensor *va = trand(2, (int64_t[]){R, 2 * ((K + M - 1) / M)}, -1, 1, 305);
    vn_tensor *vb = trand(2, (int64_t[]){R, 2 * ((K + M - 1) / M)}, -1, 1, 306);
    check_fresh(s, R, K, V, M, va, dy, "a values tensor of version 0");
    check_fresh(s, R, K, V, M, vb, dy, "another of version 0");
    GC_RELEASE(va, vb);

    /* other indices over the very same values tensor (same storage and
     * version): a matrix of its own */
    vn_tensor *cols = vn_vnm_columns(s), *idx = vn_vnm_indices(s);
    CHECK_PTR(idx);
    vn_vnm *sa = vn_vnm_from_pattern(R, K, V, 2, M, cols, idx, other);
    CHECK_PTR(sa);
    uint8_t *ib = vn_tensor_data(idx);
    for (int64_t i = 0; i < vn_tensor_numel(idx); i++)
        ib[i] = (uint8_t)(other_pair(ib[i] & 15) | other_pair(ib[i] >> 4) << 4);
    vn_vnm *sb = vn_vnm_from_pattern(R, K, V, 2, M, cols, idx, other);
    CHECK_PTR(sb);
    vn_tensor *da = dx_of(sa, other, dy), *db = dx_of(sb, other, dy);
    assert_true(memcmp(vn_tensor_data(da), vn_tensor_data(db), sizeof(float) * (size_t)(B * K)));
    check_fresh(sb, R, K, V, M, other, dy, "other indices, same values tensor");
    check_fresh(sa, R, K, V, M, other, dy, "the first indices again");

    /* a new matrix of the same shape once the old one and its values are
     * gone (its storage may come back at the same address, version 0) */
    vn_vnm_free(s);
    GC_RELEASE(v);
    vn_tensor *w2 = trand(2, (int64_t[]){R, K}, -1, 1, 304);
    vn_vnm *s2 = vn_vnm_from_dense(w2, V, 2, M);
    CHECK_PTR(s2);
    vn_tensor *v2 = vn_vnm_values(s2);
    check_fresh(s2, R, K, V, M, v2, dy, "a new matrix of the same shape");
    CHECK_OK(vn_vnm_set_precision(VN_VNM_F32));
    GC_RELEASE(w, dy, first, again, other, after, cols, idx, da, db, w2, v2);
    vn_vnm_free(sa);
    vn_vnm_free(sb);
    vn_vnm_free(s2);
}

/* With VENOM_NO_AVX512 set after choosing bf16, the portable f32 loops run
 * (bit for bit those of f32), and choosing bf16 again is refused. */
static void test_portable_fallback(void **state)
{
    (void)state;
    if (!have_bf16()) skip();
    vn_tensor *w = trand(2, (int64_t[]){40, 96}, -1, 1, 7), *x = trand(2, (int64_t[]){70, 96}, -1, 1, 8);
    vn_vnm *s = vn_vnm_from_dense(w, 8, 2, 8);
    CHECK_PTR(s);
    vn_tensor *vals = vn_vnm_values(s);
    setenv("VENOM_NO_AVX512", "1", 1);
    vn_tensor *y32 = forward(x, s, vals, NULL);
    unsetenv("VENOM_NO_AVX512");
    CHECK_OK(vn_vnm_set_precision(VN_VNM_BF16));
    setenv("VENOM_NO_AVX512", "1", 1);
    vn_tensor *y = forward(x, s, vals, NULL);
    assert_memory_equal(vn_tensor_data(y32), vn_tensor_data(y), sizeof(float) * 70 * 40);
    /* dX too: x's rows as dY (40 wide) against the f32 portable dX */
    vn_tensor *dy = trand(2, (int64_t[]){70, 40}, -1, 1, 9);
    vn_tensor *dx = dx_of(s, vals, dy);
    CHECK_OK(vn_vnm_set_precision(VN_VNM_F32));
    vn_tensor *dx32 = dx_of(s, vals, dy);
    assert_memory_equal(vn_tensor_data(dx32), vn_tensor_data(dx), sizeof(float) * 70 * 96);
    GC_RELEASE(dy, dx, dx32);
    CHECK_OK(vn_vnm_set_precision(VN_VNM_F32));
    assert_int_equal(vn_vnm_set_precision(VN_VNM_BF16), VN_ERR_ARG);
    assert_non_null(strstr(vn_last_error(), "VENOM_NO_AVX512"));
    assert_int_equal(vn_vnm_get_precision(), VN_VNM_F32);
    unsetenv("VENOM_NO_AVX512");
    GC_RELEASE(w, x, vals, y32, y);
    vn_vnm_free(s);
}

static void test_errors(void **state)
{
    (void)state;
    assert_int_equal(vn_vnm_set_precision((vn_vnm_precision)7), VN_ERR_ARG);
    assert_non_null(strstr(vn_last_error(), "precision 7"));
    assert_non_null(strstr(vn_last_error(), "VN_VNM_BF16"));
    assert_int_equal(vn_vnm_get_precision(), VN_VNM_F32);
    if (!have_bf16()) { /* a CPU without it: refused, saying so */
        assert_int_equal(vn_vnm_set_precision(VN_VNM_BF16), VN_ERR_ARG);
        assert_non_null(strstr(vn_last_error(), "avx512_bf16"));
        assert_int_equal(vn_vnm_get_precision(), VN_VNM_F32);
    }
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward),
        cmocka_unit_test(test_dx),
        cmocka_unit_test(test_dx_lists_cache),
        cmocka_unit_test(test_portable_fallback),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
