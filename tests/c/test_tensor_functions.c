/* The tensor functions users reach for: integer clamp (ops_pointwise.c),
 * stack (views.c), eye, linspace, zeros_like/ones_like/full_like
 * (tensor.c) and randint (rng.c): values against plain reference loops,
 * errors, and stack's gradient by finite differences. */
#include "gradcheck.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static double at(const vn_tensor *t, int64_t flat)
{
    /* element `flat` in row-major order of a contiguous tensor */
    int nd = vn_tensor_ndim(t);
    int64_t idx[8];
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = flat % vn_tensor_shape(t)[d];
        flat /= vn_tensor_shape(t)[d];
    }
    double v;
    CHECK_OK(vn_tensor_get(t, idx, &v));
    return v;
}

static int64_t clamp_ref(int64_t x, int64_t lo, int64_t hi)
{
    int64_t y = x < lo ? lo : x;
    return y > hi ? hi : y;
}

static void test_clamp_int(void **state)
{
    (void)state;
    const int64_t n[] = {6};
    /* i64 beyond 2^53, where a clamp through double would round */
    const int64_t big = ((int64_t)1 << 60) + 1;
    const int64_t a64[] = {INT64_MIN, -7, 0, 5, big, INT64_MAX};
    vn_tensor *x64 = vn_from_data(VN_I64, 1, n, a64);
    vn_tensor *c = vn_clamp(x64, -3, (double)((int64_t)1 << 60));
    CHECK_PTR(c);
    assert_int_equal(vn_tensor_dtype(c), VN_I64);
    const int64_t *p = vn_tensor_data(c);
    for (int i = 0; i < 6; i++) assert_true(p[i] == clamp_ref(a64[i], -3, (int64_t)1 << 60));
    /* NaN: that side open, exact at the type's ends */
    vn_tensor *open = vn_clamp(x64, NAN, 4);
    const int64_t *po = vn_tensor_data(open);
    assert_true(po[0] == INT64_MIN && po[4] == 4 && po[5] == 4);
    vn_tensor *open_hi = vn_clamp(x64, 1, NAN);
    const int64_t *ph = vn_tensor_data(open_hi);
    assert_true(ph[0] == 1 && ph[4] == big && ph[5] == INT64_MAX);
    /* i32 and u8, lo > hi gives hi everywhere (min(max(x, lo), hi)) */
    const int32_t a32[] = {INT32_MIN, -5, 0, 7, 100, INT32_MAX};
    const uint8_t a8[] = {0, 3, 9, 128, 200, 255};
    vn_tensor *x32 = vn_from_data(VN_I32, 1, n, a32), *x8 = vn_from_data(VN_U8, 1, n, a8);
    vn_tensor *c32 = vn_clamp(x32, -6, 99), *c8 = vn_clamp(x8, 3, 200), *rev = vn_clamp(x32, 5, 2);
    CHECK_PTR(rev);
    const int32_t *q32 = vn_tensor_data(c32), *qr = vn_tensor_data(rev);
    const uint8_t *q8 = vn_tensor_data(c8);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(q32[i], clamp_ref(a32[i], -6, 99));
        assert_int_equal(q8[i], clamp_ref(a8[i], 3, 200));
        assert_int_equal(qr[i], 2);
    }
    /* bounds the dtype cannot hold are refused, not rounded or wrapped */
    assert_null(vn_clamp(x32, 0.5, 3));
    assert_non_null(strstr(vn_last_error(), "lower bound 0.5 is not representable as i32"));
    assert_null(vn_clamp(x8, 0, 256));
    assert_non_null(strstr(vn_last_error(), "upper bound 256"));
    assert_null(vn_clamp(x8, -1, 3));
    assert_null(vn_clamp(x32, 0, INFINITY));
    assert_null(vn_clamp(x64, 0, 9223372036854775808.0));
    vn_tensor *h = vn_to_dtype(x32, VN_F16);
    assert_null(vn_clamp(h, 0, 1));
    vn_tensor *all[] = {x64, c, open, open_hi, x32, x8, c32, c8, rev, h};
    for (int i = 0; i < 10; i++) vn_tensor_release(all[i]);
}

static vn_tensor *f_stack(vn_tensor **in, void *ctx)
{
    return vn_stack(in, 5, *(int *)ctx);
}

static void test_stack(void **state)
{
    (void)state;
    const int64_t shape[] = {2, 3};
    vn_tensor *ts[5];
    for (int k = 0; k < 5; k++) ts[k] = trand(2, shape, -1, 1, 10u + (unsigned)k);
    for (int dim = -3; dim < 3; dim++) {
        vn_tensor *s = vn_stack(ts, 5, dim);
        CHECK_PTR(s);
        int d = dim < 0 ? dim + 3 : dim;
        assert_int_equal(vn_tensor_ndim(s), 3);
        assert_int_equal(vn_tensor_shape(s)[d], 5);
        /* s[..., k at d, ...] = ts[k][...] */
        for (int k = 0; k < 5; k++)
            for (int64_t i = 0; i < 2; i++)
                for (int64_t j = 0; j < 3; j++) {
                    int64_t src[2] = {i, j}, dst[3], rest[2] = {i, j};
                    for (int e = 0, r = 0; e < 3; e++) dst[e] = e == d ? k : rest[r++];
                    double a, b;
                    CHECK_OK(vn_tensor_get(ts[k], src, &a));
                    CHECK_OK(vn_tensor_get(s, dst, &b));
                    assert_true(a == b);
                }
        vn_tensor_release(s);
    }
    /* one tensor: a copy with the new dim, not a view of the input */
    vn_tensor *one = vn_stack(ts, 1, 0);
    CHECK_PTR(one);
    assert_int_equal(vn_tensor_shape(one)[0], 1);
    assert_true(vn_tensor_data(one) != vn_tensor_data(ts[0]));
    /* 0-d tensors stack into a vector */
    vn_tensor *s0[2] = {vn_full(VN_I64, 0, NULL, 4), vn_full(VN_I64, 0, NULL, -9)};
    vn_tensor *v = vn_stack(s0, 2, 0);
    CHECK_PTR(v);
    assert_int_equal(vn_tensor_ndim(v), 1);
    assert_true(at(v, 0) == 4 && at(v, 1) == -9);
    /* gradients through more inputs than one cat node holds */
    for (int k = 0; k < 5; k++) CHECK_OK(vn_tensor_set_requires_grad(ts[k], true));
    for (int dim = 0; dim < 3; dim++) gradcheck(f_stack, ts, 5, &dim, 1e-3, 1e-2);
    /* errors */
    const int64_t other[] = {3, 2};
    vn_tensor *bad[2] = {ts[0], trand(2, other, 0, 1, 1)};
    assert_null(vn_stack(bad, 2, 0));
    assert_int_equal(vn_last_status(), VN_ERR_SHAPE);
    assert_non_null(strstr(vn_last_error(), "stack: tensor 1 (f32 (3, 2)) does not match tensor 0 (f32 (2, 3))"));
    assert_null(vn_stack(ts, 2, 3));
    assert_non_null(strstr(vn_last_error(), "stack"));
    assert_null(vn_stack(ts, 0, 0));
    assert_null(vn_stack(NULL, 2, 0));
    vn_tensor *withnull[2] = {ts[0], NULL};
    assert_null(vn_stack(withnull, 2, 0));
    for (int k = 0; k < 5; k++) vn_tensor_release(ts[k]);
    vn_tensor *all[] = {one, s0[0], s0[1], v, bad[1]};
    for (int i = 0; i < 5; i++) vn_tensor_release(all[i]);
}

static void test_eye_linspace_like(void **state)
{
    (void)state;
    vn_tensor *e = vn_eye(3, 4, VN_I64);
    CHECK_PTR(e);
    assert_int_equal(vn_tensor_dtype(e), VN_I64);
    for (int64_t i = 0; i < 12; i++) assert_true(at(e, i) == (i / 4 == i % 4 ? 1 : 0));
    vn_tensor *e0 = vn_eye(0, 2, VN_F32);
    CHECK_PTR(e0);
    assert_int_equal(vn_tensor_numel(e0), 0);
    assert_null(vn_eye(-1, 2, VN_F32));
    assert_non_null(strstr(vn_last_error(), "eye"));

    /* linspace: point i = start + i·(end − start)/(steps − 1), both ends exact */
    vn_tensor *l = vn_linspace(-1, 2, 7, VN_F32);
    CHECK_PTR(l);
    for (int64_t i = 0; i < 7; i++) assert_float_equal(at(l, i), -1 + (double)i * 0.5, 1e-6);
    assert_true(at(l, 0) == -1 && at(l, 6) == 2);
    vn_tensor *l3 = vn_linspace(0, 1, 3, VN_F32), *l1 = vn_linspace(5, 9, 1, VN_F32);
    vn_tensor *l0 = vn_linspace(5, 9, 0, VN_F32), *li = vn_linspace(0, 10, 4, VN_I32);
    vn_tensor *ld = vn_linspace(3, 1, 5, VN_F32);
    CHECK_PTR(ld);
    assert_true(at(l3, 1) == 0.5 && at(l3, 2) == 1);
    assert_true(vn_tensor_numel(l1) == 1 && at(l1, 0) == 5); /* steps 1: start, as PyTorch */
    assert_int_equal(vn_tensor_numel(l0), 0);
    assert_true(at(li, 1) == 3 && at(li, 2) == 6 && at(li, 3) == 10); /* 3.33, 6.67 truncated */
    for (int64_t i = 0; i < 5; i++) assert_float_equal(at(ld, i), 3 - 0.5 * (double)i, 1e-6);
    assert_null(vn_linspace(0, 1, -1, VN_F32));
    assert_non_null(strstr(vn_last_error(), "linspace: steps"));
    assert_null(vn_linspace(0, INFINITY, 3, VN_F32));

    /* *_like: t's shape, the dtype and device asked for */
    const int64_t shape[] = {2, 5};
    vn_tensor *x = trand(2, shape, 0, 1, 4);
    vn_tensor *z = vn_zeros_like(x, VN_F32, VN_CPU), *o = vn_ones_like(x, VN_U8, VN_CPU);
    vn_tensor *f = vn_full_like(x, -3, VN_I32, VN_CPU);
    CHECK_PTR(f);
    assert_int_equal(vn_tensor_dtype(o), VN_U8);
    for (int64_t i = 0; i < 10; i++) assert_true(at(z, i) == 0 && at(o, i) == 1 && at(f, i) == -3);
    assert_int_equal(vn_tensor_shape(f)[1], 5);
    assert_null(vn_full_like(NULL, 1, VN_F32, VN_CPU));
    assert_non_null(strstr(vn_last_error(), "full_like"));
    vn_tensor_free(x);
    assert_null(vn_zeros_like(x, VN_F32, VN_CPU));
    assert_int_equal(vn_last_status(), VN_ERR_STATE);
    vn_tensor *all[] = {e, e0, l, l3, l1, l0, li, ld, x, z, o, f};
    for (int i = 0; i < 12; i++) vn_tensor_release(all[i]);
}

static void test_randint(void **state)
{
    (void)state;
    const int64_t shape[] = {4000};
    vn_manual_seed(7);
    vn_tensor *a = vn_randint(-3, 4, VN_I64, 1, shape);
    vn_manual_seed(7);
    vn_tensor *b = vn_randint(-3, 4, VN_I64, 1, shape);
    CHECK_PTR(b);
    assert_int_equal(vn_tensor_dtype(a), VN_I64);
    int count[7] = {0};
    const int64_t *pa = vn_tensor_data(a), *pb = vn_tensor_data(b);
    for (int i = 0; i < 4000; i++) {
        assert_true(pa[i] >= -3 && pa[i] < 4);
        assert_true(pa[i] == pb[i]); /* the seed repeats them */
        count[pa[i] + 3]++;
    }
    for (int v = 0; v < 7; v++) assert_true(count[v] > 450 && count[v] < 700); /* 571 expected */
    /* each dtype; i64 exact beyond 2^53 */
    const int64_t lo = ((int64_t)1 << 62) + 5;
    vn_tensor *big = vn_randint(lo, lo + 3, VN_I64, 1, shape), *u = vn_randint(250, 256, VN_U8, 1, shape);
    vn_tensor *i32 = vn_randint(INT32_MIN, INT32_MIN + 2, VN_I32, 1, shape), *f = vn_randint(0, 2, VN_F32, 1, shape);
    CHECK_PTR(f);
    const int64_t *pbig = vn_tensor_data(big);
    for (int i = 0; i < 4000; i++) {
        assert_true(pbig[i] >= lo && pbig[i] < lo + 3);
        assert_true(at(u, i) >= 250 && at(u, i) <= 255);
        assert_true(at(i32, i) == INT32_MIN || at(i32, i) == INT32_MIN + 1);
        assert_true(at(f, i) == 0 || at(f, i) == 1);
    }
    /* the whole i64 range is a valid range too */
    vn_tensor *wide = vn_randint(INT64_MIN, INT64_MAX, VN_I64, 0, NULL);
    CHECK_PTR(wide);
    /* errors */
    assert_null(vn_randint(3, 3, VN_I64, 1, shape));
    assert_non_null(strstr(vn_last_error(), "randint: expected low < high, got low = 3, high = 3"));
    assert_null(vn_randint(0, 257, VN_U8, 1, shape));
    assert_non_null(strstr(vn_last_error(), "does not fit in u8"));
    assert_null(vn_randint(-1, 2, VN_U8, 1, shape));
    assert_null(vn_randint(0, 2, VN_BF16, 1, shape));
    assert_int_equal(vn_last_status(), VN_ERR_DTYPE);
    const int64_t neg[] = {-2};
    assert_null(vn_randint(0, 2, VN_I64, 1, neg));
    vn_tensor *all[] = {a, b, big, u, i32, f, wide};
    for (int i = 0; i < 7; i++) vn_tensor_release(all[i]);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clamp_int),
        cmocka_unit_test(test_stack),
        cmocka_unit_test(test_eye_linspace_like),
        cmocka_unit_test(test_randint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
