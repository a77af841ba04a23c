/* Ternary × V:N:M (engine/quant/ternary_vnm.c) and the fake quantisers
 * (bitlinear.c): the fake quantisers against plain loops with γ over a
 * count, their STE gradient (the identity); the layer's composite
 * vnm_linear(int8_fake_quant(x), S, ternary_fake_quant(values, nnz)) with
 * its gradients against central finite differences of the STE surrogate;
 * the packing byte for byte against a plain packer of the compact columns;
 * the product (with each kernel ISA the CPU has) against double loops
 * over the dense ternary matrix on odd sizes with padding; γ = 0, zero rows; bad input
 * and corrupt packed data. */
#include "gradcheck.h"
#include "ref_quant.h"
#include "quant_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float *f32(const vn_tensor *t) { return vn_tensor_data(t); }

static void assert_close(double got, double want, double tol, const char *what, int64_t i)
{
    if (!(fabs(got - want) <= tol * (1 + fabs(want))))
        fail_msg("%s[%lld]: got %.9g, expected %.9g", what, (long long)i, got, want);
}

/* The dense ternary reference of s: W̃ (R × K) and γ = Σ|kept| / kept. */
static float *ref_trits(const vn_vnm *s, int64_t R, int64_t K, float *gamma)
{
    vn_tensor *d = vn_vnm_to_dense(s), *m = vn_vnm_mask(s);
    CHECK_PTR(d);
    CHECK_PTR(m);
    const uint8_t *mk = vn_tensor_data(m);
    double sum = 0;
    int64_t kept = 0;
    for (int64_t i = 0; i < R * K; i++) sum += mk[i] ? fabs((double)f32(d)[i]) : 0, kept += mk[i];
    /* max(.., 1): gcc -O2 with the sanitizers otherwise warns that a
     * non-positive R·K would ask calloc for more than SIZE_MAX/2 bytes. */
    float g = (float)(sum / (double)kept), *t = calloc(R * K > 0 ? (size_t)(R * K) : 1, sizeof *t);
    for (int64_t i = 0; i < R * K; i++) t[i] = mk[i] ? ref_trit(f32(d)[i], g) + 0.0f : 0.0f;
    vn_tensor_release(d);
    vn_tensor_release(m);
    *gamma = g;
    return t;
}

static vn_vnm *random_vnm(int64_t R, int64_t K, int64_t V, int64_t M, unsigned seed)
{
    vn_tensor *w = trand(2, (int64_t[]){R, K}, -1, 1, seed);
    vn_vnm *s = vn_vnm_from_dense(w, V, 2, M);
    CHECK_PTR(s);
    vn_tensor_release(w);
    return s;
}

/* The fake quantisers: values as the loops (γ over count), gradient the
 * identity. */
static void test_fake_quant(void **state)
{
    (void)state;
    int64_t N = 7, K = 19, count = 50;
    vn_tensor *w = trand(2, (int64_t[]){N, K}, -1, 1, 1), *x = trand(3, (int64_t[]){2, 3, K}, -4, 4, 2);
    memset(f32(x) + K, 0, sizeof(float) * (size_t)K); /* a zero row */
    CHECK_OK(vn_tensor_set_requires_grad(w, true));
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    vn_tensor *wq = vn_ternary_fake_quant(w, count), *xq = vn_int8_fake_quant(x);
    CHECK_PTR(wq);
    CHECK_PTR(xq);
    double sum = 0;
    for (int64_t i = 0; i < N * K; i++) sum += fabs((double)f32(w)[i]);
    float g = (float)(sum / (double)count);
    for (int64_t i = 0; i < N * K; i++) assert_close(f32(wq)[i], g * ref_trit(f32(w)[i], g), 1e-6, "wq", i);
    float q[19];
    for (int64_t b = 0; b < 6; b++) {
        float s = ref_act(f32(x) + b * K, K, q);
        for (int64_t k = 0; k < K; k++)
            assert_close(f32(xq)[b * K + k], s > 0 ? q[k] / s : 0, 1e-7, "xq", b * K + k);
    }
    /* count = numel is vn_ternary_quantize's γ·W̃, bit for bit */
    vn_tensor *wa = vn_ternary_fake_quant(w, N * K), *wb = vn_ternary_quantize(w, NULL);
    CHECK_PTR(wa);
    CHECK_PTR(wb);
    assert_memory_equal(f32(wa), f32(wb), sizeof(float) * (size_t)(N * K));
    vn_tensor *rw = trand(2, (int64_t[]){N, K}, -1, 1, 3), *rx = trand(3, (int64_t[]){2, 3, K}, -1, 1, 4);
    CHECK_OK(vn_backward(wq, rw));
    CHECK_OK(vn_backward(xq, rx));
    assert_memory_equal(f32(vn_tensor_grad(w)), f32(rw), sizeof(float) * (size_t)(N * K));
    assert_memory_equal(f32(vn_tensor_grad(x)), f32(rx), sizeof(float) * (size_t)(6 * K));
    vn_tensor *ts[] = {w, x, wq, xq, wa, wb, rw, rx};
    for (int k = 0; k < 8; k++) vn_tensor_release(ts[k]);
}

/* Σ R ∘ vnm_linear(a, s, v) for plain (unrecorded) tensors. */
static double surrogate(const vn_tensor *a, const vn_vnm *s, const vn_tensor *v, const vn_tensor *r)
{
    vn_tensor *y = vn_vnm_spmm(s, v, a);
    CHECK_PTR(y);
    double acc = 0;
    for (int64_t i = 0; i < vn_tensor_numel(y); i++) acc += (double)f32(y)[i] * f32(r)[i];
    vn_tensor_release(y);
    return acc;
}

/* The layer of nn.SparseBitLinear composed from the ops, its gradients
 * against central differences of the STE surrogate: dL/dx that of
 * Σ R ∘ (x·Wqᵀ) with Wq frozen at this point, dL/dvalues that of
 * Σ R ∘ (Xq·W(v)ᵀ) with Xq frozen. */
static void test_layer_ste_finite_differences(void **state)
{
    (void)state;
    int64_t B = 3, R = 10, K = 14, V = 4, M = 5; /* K % M ≠ 0: a padded group */
    vn_vnm *s = random_vnm(R, K, V, M, 5);
    vn_vnm_summary st;
    CHECK_OK(vn_vnm_stats(s, &st));
    vn_tensor *v = vn_vnm_values(s), *x = trand(2, (int64_t[]){B, K}, -1, 1, 6);
    vn_tensor *r = trand(2, (int64_t[]){B, R}, -1, 1, 7);
    CHECK_OK(vn_tensor_set_requires_grad(v, true));
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    vn_tensor *xq = vn_int8_fake_quant(x), *wq = vn_ternary_fake_quant(v, st.nnz);
    vn_tensor *y = vn_vnm_linear(xq, s, wq, NULL);
    CHECK_PTR(y);
    CHECK_OK(vn_backward(y, r));
    vn_tensor *xq0 = vn_detach(xq), *wq0 = vn_detach(wq), *xd = vn_detach(x), *vd = vn_detach(v);
    vn_tensor *xc = vn_clone(xd), *vc = vn_clone(vd);
    const float eps = 1e-2f;
    for (int64_t i = 0; i < B * K; i++) {
        float keep = f32(xc)[i];
        f32(xc)[i] = keep + eps;
        double hi = surrogate(xc, s, wq0, r);
        f32(xc)[i] = keep - eps;
        double lo = surrogate(xc, s, wq0, r);
        f32(xc)[i] = keep;
        assert_close(f32(vn_tensor_grad(x))[i], (hi - lo) / (2 * eps), 1e-4, "dx vs FD", i);
    }
    for (int64_t i = 0; i < vn_tensor_numel(v); i++) {
        float keep = f32(vc)[i];
        f32(vc)[i] = keep + eps;
        double hi = surrogate(xq0, s, vc, r);
        f32(vc)[i] = keep - eps;
        double lo = surrogate(xq0, s, vc, r);
        f32(vc)[i] = keep;
        assert_close(f32(vn_tensor_grad(v))[i], (hi - lo) / (2 * eps), 1e-4, "dvalues vs FD", i);
    }
    vn_tensor *ts[] = {v, x, r, xq, wq, y, xq0, wq0, xd, vd, xc, vc};
    for (int k = 0; k < 12; k++) vn_tensor_release(ts[k]);
    vn_vnm_free(s);
}

/* The packed rows of s written out plainly: row r, compact column
 * 4·g + j = the trit at column g·M + cols[r/V][g][j]. */
static uint8_t *ref_pack(const vn_vnm *s, const float *trits, int64_t R, int64_t K, int64_t V,
                         int64_t M, int64_t *rb)
{
    vn_tensor *cols = vn_vnm_columns(s);
    CHECK_PTR(cols);
    const int32_t *c = vn_tensor_data(cols);
    int64_t G = (K + M - 1) / M, Kc = 4 * G;
    *rb = (Kc + 127) / 128 * 32;
    uint8_t *p = calloc((size_t)(R * *rb), 1);
    for (int64_t r = 0; r < R; r++)
        for (int64_t k = 0; k < *rb * 4; k++) {
            int code = 1;
            if (k < Kc) {
                int64_t col = k / 4 * M + c[((r / V) * G + k / 4) * 4 + k % 4];
                code = col < K ? (int)trits[r * K + col] + 1 : 1;
            }
            p[r * *rb + (k / 128) * 32 + k % 32] |= (uint8_t)(code << (2 * (k % 128 / 32)));
        }
    vn_tensor_release(cols);
    return p;
}

/* y = (x̃·W̃ᵀ)·γ/s in double from the dense trits. */
static double *ref_product(const float *x, const float *trits, float g, int64_t B, int64_t R, int64_t K)
{
    double *y = calloc((size_t)(B * R), sizeof *y);
    float *q = malloc(sizeof(float) * (size_t)K);
    for (int64_t b = 0; b < B; b++) {
        float s = ref_act(x + b * K, K, q);
        for (int64_t r = 0; r < R; r++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) acc += (double)q[k] * trits[r * K + k];
            y[b * R + r] = s > 0 ? acc * g / s : 0;
        }
    }
    free(q);
    return y;
}

/* Packing byte for byte, then the product by both kernels against the
 * loops and against the training forward, on odd sizes: R not a multiple
 * of V, K not a multiple of M, 4·G below and above 128, B across the
 * kernels' row tiles. */
static void test_pack_and_product(void **state)
{
    (void)state;
    const int64_t cases[][4] = {{37, 45, 8, 6}, {70, 301, 16, 8}, {5, 260, 64, 4}, {33, 40, 1, 10}};
    const int64_t Bs[] = {1, 5, 18};
    for (int c = 0; c < 4; c++) {
        int64_t R = cases[c][0], K = cases[c][1], V = cases[c][2], M = cases[c][3], rb;
        vn_vnm *s = random_vnm(R, K, V, M, 10 + (unsigned)c);
        vn_vnm_summary st;
        CHECK_OK(vn_vnm_stats(s, &st));
        float g_ref, g = -1;
        float *trits = ref_trits(s, R, K, &g_ref);
        uint8_t *want = ref_pack(s, trits, R, K, V, M, &rb);
        vn_tensor *p = vn_ternary_vnm_pack(s, &g);
        CHECK_PTR(p);
        assert_close(g, g_ref, 1e-6, "gamma", c);
        assert_int_equal(vn_tensor_shape(p)[0], R);
        assert_int_equal(vn_tensor_shape(p)[1], rb);
        assert_memory_equal(vn_tensor_data(p), want, (size_t)(R * rb));
        CHECK_OK(vn_ternary_vnm_check(p, s));
        vn_tensor *v = vn_vnm_values(s), *wq = vn_ternary_fake_quant(v, st.nnz);
        CHECK_PTR(wq);
        for (int ib = 0; ib < 3; ib++) {
            int64_t B = Bs[ib];
            vn_tensor *x = trand(2, (int64_t[]){B, K}, -3, 3, 20 + (unsigned)(ib + 3 * c));
            if (B > 1) memset(f32(x) + K, 0, sizeof(float) * (size_t)K); /* a zero row */
            double *ref = ref_product(f32(x), trits, g, B, R, K);
            const char *isas[] = {"portable", "avx2", "avx512vnni"};
            for (int i = 0; i < 3; i++) {
                if (!vnq__kernel(isas[i])) continue; /* not on this CPU */
                CHECK_OK(vn_ternary_set_kernel(isas[i]));
                assert_string_equal(vn_ternary_kernel(B), isas[i]);
                vn_tensor *y = vn_ternary_vnm_matmul(x, s, p, g);
                CHECK_PTR(y);
                for (int64_t j = 0; j < B * R; j++) assert_close(f32(y)[j], ref[j], 1e-6, isas[i], j);
                vn_tensor_release(y);
            }
            CHECK_OK(vn_ternary_set_kernel("auto"));
            /* the packed product is the training forward */
            vn_tensor *xq = vn_int8_fake_quant(x), *yt = xq ? vn_vnm_spmm(s, wq, xq) : NULL;
            vn_tensor *y = vn_ternary_vnm_matmul(x, s, p, g);
            CHECK_PTR(yt);
            CHECK_PTR(y);
            for (int64_t j = 0; j < B * R; j++) assert_close(f32(y)[j], f32(yt)[j], 1e-5, "vs forward", j);
            vn_tensor *ts[] = {x, xq, yt, y};
            for (int k = 0; k < 4; k++) vn_tensor_release(ts[k]);
            free(ref);
        }
        free(trits);
        free(want);
        vn_tensor_release(p);
        vn_tensor_release(v);
        vn_tensor_release(wq);
        vn_vnm_free(s);
    }
}

/* Zero values (γ = 0): packed zeros and a zero output, no NaN; a NaN row
 * gives a NaN row only. */
static void test_zeros(void **state)
{
    (void)state;
    int64_t R = 9, K = 24, B = 3;
    vn_vnm *s = random_vnm(R, K, 4, 8, 30);
    vn_tensor *v = vn_vnm_values(s);
    CHECK_OK(vn_tensor_fill_(v, 0));
    float g = -1;
    vn_tensor *p = vn_ternary_vnm_pack(s, &g), *x = trand(2, (int64_t[]){B, K}, -1, 1, 31);
    CHECK_PTR(p);
    assert_float_equal(g, 0, 0);
    vn_tensor *y = vn_ternary_vnm_matmul(x, s, p, g);
    CHECK_PTR(y);
    for (int64_t i = 0; i < B * R; i++) assert_float_equal(f32(y)[i], 0, 0);
    vn_tensor *wq = vn_ternary_fake_quant(v, 2 * R * 3);
    CHECK_PTR(wq);
    for (int64_t i = 0; i < vn_tensor_numel(wq); i++) assert_float_equal(f32(wq)[i], 0, 0);
    vn_tensor_release(p);
    vn_tensor_release(y);
    vn_vnm_free(s);
    s = random_vnm(R, K, 4, 8, 32);
    p = vn_ternary_vnm_pack(s, &g);
    f32(x)[K + 3] = NAN;
    y = vn_ternary_vnm_matmul(x, s, p, g);
    CHECK_PTR(y);
    for (int64_t r = 0; r < R; r++) {
        assert_true(isnan(f32(y)[R + r]));
        assert_false(isnan(f32(y)[r]) || isnan(f32(y)[2 * R + r]));
    }
    vn_tensor *ts[] = {v, p, x, y, wq};
    for (int k = 0; k < 5; k++) vn_tensor_release(ts[k]);
    vn_vnm_free(s);
}

static void test_errors(void **state)
{
    (void)state;
    int64_t R = 6, K = 16;
    vn_vnm *s = random_vnm(R, K, 2, 8, 40), *other = random_vnm(R + 1, K, 2, 8, 41);
    float g;
    vn_tensor *p = vn_ternary_vnm_pack(s, &g), *x = trand(2, (int64_t[]){2, K}, -1, 1, 42);
    vn_tensor *x5 = trand(2, (int64_t[]){2, 5}, -1, 1, 43), *w = trand(2, (int64_t[]){3, 4}, -1, 1, 44);
    vn_tensor *e = vn_zeros(VN_F32, 2, (int64_t[]){0, 4}), *wi = vn_zeros(VN_I32, 2, (int64_t[]){3, 4});
    CHECK_PTR(p);
    expect_null_error(vn_ternary_vnm_pack(NULL, &g), VN_ERR_ARG, "matrix is NULL");
    expect_null_error(vn_ternary_vnm_pack(s, NULL), VN_ERR_ARG, "gamma");
    expect_null_error(vn_ternary_vnm_matmul(x, NULL, p, g), VN_ERR_ARG, "matrix is NULL");
    expect_null_error(vn_ternary_vnm_matmul(x5, s, p, g), VN_ERR_SHAPE, "expected (..., 16)");
    expect_null_error(vn_ternary_vnm_matmul(x, other, p, g), VN_ERR_SHAPE, "7 rows");
    expect_null_error(vn_ternary_vnm_matmul(x, s, x, g), VN_ERR_DTYPE, "packed weights");
    expect_null_error(vn_ternary_vnm_matmul(x, s, p, NAN), VN_ERR_ARG, "gamma");
    expect_null_error(vn_ternary_vnm_matmul(x, s, p, -1), VN_ERR_ARG, "gamma");
    expect_null_error(vn_ternary_fake_quant(w, 0), VN_ERR_ARG, "count = 0");
    expect_null_error(vn_ternary_fake_quant(w, 13), VN_ERR_ARG, "count = 13");
    expect_null_error(vn_ternary_fake_quant(e, 1), VN_ERR_SHAPE, "non-empty");
    expect_null_error(vn_ternary_fake_quant(wi, 1), VN_ERR_DTYPE, "ternary_fake_quant");
    expect_null_error(vn_int8_fake_quant(NULL), VN_ERR_ARG, "int8_fake_quant");
    expect_null_error(vn_int8_fake_quant(wi), VN_ERR_DTYPE, "int8_fake_quant");
    /* Corrupt data: a code 3; a nonzero trit where the row keeps nothing. */
    uint8_t *b = vn_tensor_data(p);
    int64_t rb = vn_tensor_shape(p)[1];
    uint8_t keep = b[rb];
    b[rb] |= 3;
    assert_int_equal(vn_ternary_vnm_check(p, s), VN_ERR_FORMAT);
    b[rb] = keep;
    vn_tensor *cols = vn_vnm_indices(s);
    int first = ((const uint8_t *)vn_tensor_data(cols))[0] & 3;
    int second = ((const uint8_t *)vn_tensor_data(cols))[0] >> 2 & 3;
    int j = 0;
    while (j == first || j == second) j++; /* a position row 0 does not keep in group 0 */
    b[j] = (uint8_t)((b[j] & ~3) | 2); /* trit +1 at compact column j */
    assert_int_equal(vn_ternary_vnm_check(p, s), VN_ERR_FORMAT);
    if (!strstr(vn_last_error(), "row 0, group 0")) fail_msg("message: %s", vn_last_error());
    vn_tensor *ts[] = {p, x, x5, w, e, wi, cols};
    for (int k = 0; k < 7; k++) vn_tensor_release(ts[k]);
    vn_vnm_free(s);
    vn_vnm_free(other);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fake_quant),       cmocka_unit_test(test_layer_ste_finite_differences),
        cmocka_unit_test(test_pack_and_product), cmocka_unit_test(test_zeros),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
