/* Tensors, views, copies and the tape itself (accumulation, release,
 * errors). Gradients of the view ops are checked by finite differences. */
#include "gradcheck.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int64_t S23[] = {2, 3};

static void test_creation(void **state)
{
    vn_tensor *z = vn_zeros(VN_F32, 2, S23), *o = vn_ones(VN_I64, 2, S23);
    vn_tensor *f = vn_full(VN_U8, 2, S23, 7), *a = vn_arange(1, 2, 0.25, VN_F32);
    CHECK_PTR(z); CHECK_PTR(o); CHECK_PTR(f); CHECK_PTR(a);
    assert_int_equal(vn_tensor_numel(z), 6);
    double v;
    int64_t idx[2] = {1, 2};
    CHECK_OK(vn_tensor_get(z, idx, &v)); assert_true(v == 0);
    CHECK_OK(vn_tensor_get(o, idx, &v)); assert_true(v == 1);
    CHECK_OK(vn_tensor_get(f, idx, &v)); assert_true(v == 7);
    assert_int_equal(vn_tensor_shape(a)[0], 4);
    float got[4];
    CHECK_OK(vn_tensor_copy_out(a, got, sizeof got));
    assert_true(got[0] == 1.0f && got[3] == 1.75f);
    /* scalar (0-d) */
    vn_tensor *s = vn_full(VN_F32, 0, NULL, 2.5);
    CHECK_PTR(s);
    CHECK_OK(vn_tensor_item(s, &v));
    assert_true(v == 2.5);
    /* errors */
    int64_t bad[] = {2, -1};
    assert_null(vn_zeros(VN_F32, 2, bad));
    assert_non_null(strstr(vn_last_error(), "-1"));
    assert_null(vn_zeros(VN_F32, 9, S23));
    assert_int_equal(vn_tensor_item(z, &v), VN_ERR_SHAPE);
    assert_non_null(strstr(vn_last_error(), "(2, 3)"));
    idx[1] = 3;
    assert_int_equal(vn_tensor_get(z, idx, &v), VN_ERR_ARG);
    vn_tensor *rows[] = {z, o, f, a, s};
    for (int i = 0; i < 5; i++) vn_tensor_release(rows[i]);
}

static void test_rng(void **state)
{
    int64_t n = 1000;
    vn_manual_seed(42);
    vn_tensor *a = vn_randn(1, &n);
    vn_manual_seed(42);
    vn_tensor *b = vn_randn(1, &n);
    assert_true(max_rel_diff(a, b) == 0);
    /* mean ≈ 0, var ≈ 1 for 1000 normals (5 sigma bounds) */
    float *p = vn_tensor_data(a);
    double sum = 0, sq = 0;
    for (int i = 0; i < n; i++) { sum += p[i]; sq += p[i] * p[i]; }
    assert_true(fabs(sum / n) < 5 / sqrt(n));
    assert_true(fabs(sq / n - 1) < 0.25);
    vn_tensor *perm = vn_randperm(50);
    int64_t *q = vn_tensor_data(perm);
    int seen[50] = {0};
    for (int i = 0; i < 50; i++) { assert_true(q[i] >= 0 && q[i] < 50); seen[q[i]]++; }
    for (int i = 0; i < 50; i++) assert_int_equal(seen[i], 1);
    uint64_t st[4];
    vn_rng_get_state(st);
    vn_tensor *u1 = vn_rand(1, &n);
    vn_rng_set_state(st);
    vn_tensor *u2 = vn_rand(1, &n);
    assert_true(max_rel_diff(u1, u2) == 0);
    for (int i = 0; i < n; i++) assert_true(((float *)vn_tensor_data(u1))[i] >= 0 && ((float *)vn_tensor_data(u1))[i] < 1);
    vn_tensor_release(a); vn_tensor_release(b); vn_tensor_release(perm);
    vn_tensor_release(u1); vn_tensor_release(u2);
}

static double at(const vn_tensor *t, int64_t i, int64_t j)
{
    int64_t idx[2] = {i, j};
    double v;
    CHECK_OK(vn_tensor_get(t, idx, &v));
    return v;
}

static void test_views(void **state)
{
    vn_tensor *x = vn_arange(0, 24, 1, VN_F32);
    int64_t s234[] = {2, 3, 4}, s64[] = {6, -1};
    vn_tensor *x3 = vn_view(x, 3, s234);
    CHECK_PTR(x3);
    assert_ptr_equal(vn_tensor_data(x3), vn_tensor_data(x)); /* shares storage */
    vn_tensor *r = vn_reshape(x3, 2, s64);
    CHECK_PTR(r);
    assert_int_equal(vn_tensor_shape(r)[1], 4);
    /* transpose is a view; view of it fails, reshape copies */
    vn_tensor *t = vn_transpose(r, 0, 1); /* (4, 6) */
    CHECK_PTR(t);
    assert_false(vn_tensor_is_contiguous(t));
    assert_true(at(t, 3, 5) == 23 && at(t, 1, 2) == 9);
    int64_t flat[] = {24};
    assert_null(vn_view(t, 1, flat));
    assert_non_null(strstr(vn_last_error(), "contiguous"));
    vn_tensor *tf = vn_reshape(t, 1, flat);
    CHECK_PTR(tf);
    float got[24];
    CHECK_OK(vn_tensor_copy_out(tf, got, sizeof got));
    for (int i = 0; i < 24; i++) assert_true(got[i] == (float)((i % 6) * 4 + i / 6));
    /* a view of a non-contiguous tensor that re-splits a contiguous chunk */
    vn_tensor *p = vn_permute(x3, (int[]){1, 0, 2}); /* (3, 2, 4) */
    int64_t s3_8[] = {3, 2, 2, 2};
    vn_tensor *pv = vn_view(p, 4, s3_8);
    CHECK_PTR(pv);
    int64_t idx4[] = {2, 1, 1, 0};
    double v;
    CHECK_OK(vn_tensor_get(pv, idx4, &v));
    assert_true(v == 1 * 12 + 2 * 4 + 2); /* x3[1][2][2] */
    /* narrow, select, squeeze/unsqueeze, expand */
    vn_tensor *n = vn_narrow(r, 1, 1, 2); /* (6, 2): columns 1..2 */
    assert_true(at(n, 5, 1) == 22);
    vn_tensor *sel = vn_select(r, 0, 4); /* (4) */
    assert_int_equal(vn_tensor_ndim(sel), 1);
    int64_t i3[] = {3};
    CHECK_OK(vn_tensor_get(sel, i3, &v));
    assert_true(v == 19);
    assert_null(vn_select(r, 0, 6));
    assert_null(vn_narrow(r, 1, 3, 2));
    assert_non_null(strstr(vn_last_error(), "out of bounds"));
    vn_tensor *u = vn_unsqueeze(sel, 0);
    assert_int_equal(vn_tensor_ndim(u), 2);
    vn_tensor *sq = vn_squeeze(u, 0);
    assert_int_equal(vn_tensor_ndim(sq), 1);
    assert_null(vn_squeeze(r, 0));
    int64_t s34[] = {3, 4};
    vn_tensor *e = vn_expand(u, 2, s34);
    CHECK_PTR(e);
    assert_true(at(e, 2, 3) == 19);
    assert_int_equal(vn_tensor_strides(e)[0], 0);
    /* writes through a view reach the base */
    CHECK_OK(vn_tensor_fill_(n, -1));
    assert_true(at(r, 0, 1) == -1 && at(r, 0, 0) == 0 && at(r, 0, 3) == 3);
    vn_tensor *all[] = {x, x3, r, t, tf, p, pv, n, sel, u, sq, e};
    for (int i = 0; i < 12; i++) vn_tensor_release(all[i]);
}

static void test_copies(void **state)
{
    vn_tensor *x = vn_arange(0, 6, 1, VN_F32);
    int64_t s[] = {2, 3};
    vn_tensor *x2 = vn_view(x, 2, s);
    vn_tensor *c = vn_cat((vn_tensor *[]){x2, x2}, 2, 1); /* (2, 6) */
    CHECK_PTR(c);
    assert_true(at(c, 1, 4) == 4 && at(c, 0, 5) == 2);
    vn_tensor *ar = vn_arange(-1.5, 2, 1, VN_F32), *i = vn_to_dtype(ar, VN_I32);
    CHECK_PTR(i);
    int32_t iv[4];
    CHECK_OK(vn_tensor_copy_out(i, iv, sizeof iv));
    assert_true(iv[0] == -1 && iv[1] == 0 && iv[3] == 1); /* truncation toward zero */
    int64_t rows[] = {1, 0, 1};
    int64_t n3 = 3;
    vn_tensor *idx = vn_from_data(VN_I64, 1, &n3, rows);
    vn_tensor *sel = vn_index_select(x2, 0, idx);
    CHECK_PTR(sel);
    assert_true(at(sel, 0, 2) == 5 && at(sel, 1, 0) == 0 && at(sel, 2, 1) == 4);
    vn_tensor *selc = vn_index_select(x2, 1, idx); /* columns */
    assert_true(at(selc, 1, 0) == 4 && at(selc, 0, 1) == 0);
    rows[0] = 2;
    vn_tensor *bad = vn_from_data(VN_I64, 1, &n3, rows);
    assert_null(vn_index_select(x2, 0, bad));
    assert_non_null(strstr(vn_last_error(), "index[0] = 2"));
    assert_null(vn_cat((vn_tensor *[]){x2, x}, 2, 0));
    vn_tensor *all[] = {x, x2, c, ar, i, idx, sel, selc, bad};
    for (int k = 0; k < 9; k++) vn_tensor_release(all[k]);
}

/* ---- gradients of the view ops ----------------------------------------- */

static vn_tensor *f_views(vn_tensor **in, void *ctx)
{
    /* (3,4) → transpose → narrow cols → reshape → expand → contiguous */
    vn_tensor *t = vn_transpose(in[0], 0, 1);            /* (4, 3) */
    vn_tensor *n = vn_narrow(t, 0, 1, 2);                 /* (2, 3) */
    int64_t s[] = {1, 6}, e[] = {2, 6};
    vn_tensor *r = vn_reshape(n, 2, s);                   /* (1, 6), copies */
    vn_tensor *x = vn_expand(r, 2, e);                    /* (2, 6) */
    vn_tensor *sel = vn_select(in[0], 1, 2);              /* (3) */
    vn_tensor *u = vn_unsqueeze(sel, 0);                  /* (1, 3) */
    vn_tensor *c = vn_cat((vn_tensor *[]){u, u}, 2, 1);   /* (1, 6) */
    vn_tensor *out = vn_mul(x, c);                        /* (2, 6) */
    vn_tensor *all[] = {t, n, r, x, sel, u, c};
    for (int k = 0; k < 7; k++) vn_tensor_release(all[k]);
    return out;
}

static vn_tensor *f_index_select(vn_tensor **in, void *ctx)
{
    return vn_index_select(in[0], 0, (vn_tensor *)ctx);
}

static void test_view_gradients(void **state)
{
    int64_t s[] = {3, 4};
    vn_tensor *x = trand(2, s, -1, 1, 1);
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    gradcheck(f_views, &x, 1, NULL, 1e-2, 1e-2);
    int64_t rows[] = {2, 0, 2, 2}, n = 4; /* repeats must accumulate */
    vn_tensor *idx = vn_from_data(VN_I64, 1, &n, rows);
    gradcheck(f_index_select, &x, 1, idx, 1e-2, 1e-2);
    vn_tensor_release(idx);
    vn_tensor_release(x);
}

/* ---- the tape ------------------------------------------------------------ */

static void test_tape(void **state)
{
    int64_t s[] = {3};
    vn_tensor *x = tf32(1, s, (float[]){1, 2, 3});
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    /* y = sum(x*x + x): dy/dx = 2x + 1, accumulated over two backwards */
    for (int rep = 0; rep < 2; rep++) {
        vn_tensor *sq = vn_mul(x, x), *y = vn_add(sq, x), *l = vn_sum_all(y);
        CHECK_OK(vn_backward(l, NULL));
        /* the graph is released: a second walk is a clear error */
        assert_int_equal(vn_backward(l, NULL), VN_ERR_STATE);
        assert_non_null(strstr(vn_last_error(), "released"));
        vn_tensor_release(sq); vn_tensor_release(y); vn_tensor_release(l);
    }
    float g[3];
    CHECK_OK(vn_tensor_copy_out(vn_tensor_grad(x), g, sizeof g));
    assert_true(g[0] == 6 && g[1] == 10 && g[2] == 14);
    vn_tensor_zero_grad(x);
    assert_null(vn_tensor_grad(x));

    /* non-scalar root needs an explicit gradient */
    vn_tensor *y = vn_mul(x, x);
    assert_int_equal(vn_backward(y, NULL), VN_ERR_SHAPE);
    assert_non_null(strstr(vn_last_error(), "non-scalar"));
    vn_tensor *gy = tf32(1, s, (float[]){1, 0, -1});
    CHECK_OK(vn_backward(y, gy));
    CHECK_OK(vn_tensor_copy_out(vn_tensor_grad(x), g, sizeof g));
    assert_true(g[0] == 2 && g[1] == 0 && g[2] == -6);
    vn_tensor_release(y);

    /* no_grad and detach record nothing */
    bool was = vn_set_grad_enabled(false);
    vn_tensor *ng = vn_mul(x, x);
    vn_set_grad_enabled(was);
    assert_false(vn_tensor_requires_grad(ng));
    assert_int_equal(vn_backward(ng, gy), VN_ERR_ARG);
    vn_tensor *d = vn_detach(x);
    assert_true(vn_tensor_is_leaf(d) && !vn_tensor_requires_grad(d));
    assert_ptr_equal(vn_tensor_data(d), vn_tensor_data(x));
    /* requires_grad only on f32 leaves */
    vn_tensor *iv = vn_zeros(VN_I64, 1, s);
    assert_int_equal(vn_tensor_set_requires_grad(iv, true), VN_ERR_DTYPE);
    vn_tensor *m = vn_mul(x, x);
    assert_int_equal(vn_tensor_set_requires_grad(m, false), VN_ERR_ARG);
    assert_string_equal(vn_tensor_grad_fn_name(m), "mul");
    vn_tensor *all[] = {x, gy, ng, d, iv, m};
    for (int k = 0; k < 6; k++) vn_tensor_release(all[k]);
}

static void test_free_and_cache(void **state)
{
    int64_t s[] = {4};
    vn_tensor *x = vn_ones(VN_F32, 1, s);
    vn_tensor *v = vn_narrow(x, 0, 1, 2);
    vn_tensor_free(x);
    vn_tensor_free(x); /* idempotent */
    assert_true(vn_tensor_is_freed(x));
    assert_null(vn_add(x, x));
    assert_non_null(strstr(vn_last_error(), "freed"));
    double val;
    int64_t i0[] = {1};
    CHECK_OK(vn_tensor_get(v, i0, &val)); /* the view keeps its storage */
    assert_true(val == 1);
    vn_tensor_release(x);
    vn_tensor_release(v);
    size_t in_use, cached;
    vn_memory_stats(&in_use, &cached);
    vn_empty_cache();
    size_t cached2;
    vn_memory_stats(NULL, &cached2);
    assert_true(cached2 == 0);
    /* the cache hands back the same block for the same size */
    vn_tensor *a = vn_empty(VN_F32, 1, s);
    void *pa = vn_tensor_data(a);
    vn_tensor_release(a);
    vn_tensor *b = vn_empty(VN_F32, 1, s);
    assert_ptr_equal(vn_tensor_data(b), pa);
    vn_tensor_release(b);
}


/* ---- misuse the tape must catch ------------------------------------------ */

static void test_misuse(void **state)
{
    int64_t s[] = {2};
    vn_tensor *a = tf32(1, s, (float[]){1, 2}), *b = tf32(1, s, (float[]){3, 4});
    CHECK_OK(vn_tensor_set_requires_grad(a, true));

    /* a freed input: an error, not a read of freed memory */
    vn_tensor *y = vn_mul(a, b), *l = vn_sum_all(y);
    vn_tensor_free(b);
    assert_int_equal(vn_backward(l, NULL), VN_ERR_STATE);
    assert_non_null(strstr(vn_last_error(), "freed"));
    vn_tensor_release(y); vn_tensor_release(l); vn_tensor_release(b);

    /* a freed gradient is replaced, not written into */
    vn_tensor *two = vn_full(VN_F32, 1, s, 2);
    for (int rep = 0; rep < 2; rep++) {
        vn_tensor *m = vn_mul(a, two), *ls = vn_sum_all(m);
        CHECK_OK(vn_backward(ls, NULL));
        vn_tensor_release(m); vn_tensor_release(ls);
        if (rep == 0) vn_tensor_free(vn_tensor_grad(a));
    }
    float g[2];
    CHECK_OK(vn_tensor_copy_out(vn_tensor_grad(a), g, sizeof g));
    assert_true(g[0] == 2 && g[1] == 2);

    /* in-place writes: refused on a leaf that requires grad (grad mode on),
     * and caught by backward when a saved value changed since the forward */
    assert_int_equal(vn_tensor_fill_(a, 0), VN_ERR_STATE);
    assert_non_null(strstr(vn_last_error(), "no_grad"));
    vn_tensor *sq = vn_mul(a, a), *lsq = vn_sum_all(sq);
    bool was = vn_set_grad_enabled(false);
    CHECK_OK(vn_tensor_fill_(a, 5));
    vn_set_grad_enabled(was);
    assert_int_equal(vn_backward(lsq, NULL), VN_ERR_STATE);
    assert_non_null(strstr(vn_last_error(), "modified in place"));
    vn_tensor *e = vn_exp(a), *le = vn_sum_all(e);
    CHECK_OK(vn_tensor_fill_(e, 0)); /* exp's backward reads its output */
    assert_int_equal(vn_backward(le, NULL), VN_ERR_STATE);
    assert_non_null(strstr(vn_last_error(), "output of op 'exp'"));
    vn_tensor *all[] = {sq, lsq, e, le, two, a};
    for (int k = 0; k < 6; k++) vn_tensor_release(all[k]);
}

/* Releasing a graph of a million nodes that was never walked must not
 * recurse once per node (it would overflow the stack). */
static void test_long_chain_release(void **state)
{
    int64_t s[] = {1};
    vn_tensor *x = vn_ones(VN_F32, 1, s), *one = vn_ones(VN_F32, 1, s);
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    vn_tensor *acc = vn_tensor_retain(x);
    for (int i = 0; i < 1000000; i++) {
        vn_tensor *next = vn_add(acc, one);
        CHECK_PTR(next);
        vn_tensor_release(acc);
        acc = next;
    }
    double v;
    CHECK_OK(vn_tensor_item(acc, &v));
    assert_true(v == 1000001);
    vn_tensor_release(acc);
    vn_tensor_release(one);
    vn_tensor_release(x);
}

static void test_limits(void **state)
{
    int64_t s11[] = {1, 1}, huge[] = {4294967296LL, 4294967297LL};
    vn_tensor *o = vn_ones(VN_F32, 2, s11);
    assert_null(vn_expand(o, 2, huge));
    assert_non_null(strstr(vn_last_error(), "limit"));
    assert_null(vn_arange(0, 1e300, 1, VN_F32));
    assert_non_null(strstr(vn_last_error(), "limit"));
    /* no elements, but a reduction over dim 0 would make 2^62 of them */
    int64_t empty_huge[] = {0, 4611686018427387904LL};
    assert_null(vn_zeros(VN_F32, 2, empty_huge));
    assert_non_null(strstr(vn_last_error(), "size 4611686018427387904 of dim 1"));
    vn_tensor *e0 = vn_zeros(VN_F32, 1, empty_huge);
    assert_null(vn_reshape(e0, 2, empty_huge));
    assert_null(vn_expand(e0, 2, (int64_t[]){4611686018427387904LL, 0}));
    vn_tensor_release(e0);
    /* float → int conversions saturate; NaN becomes 0 */
    int64_t s4[] = {4};
    vn_tensor *f = tf32(1, s4, (float[]){1e10f, -1e10f, NAN, -2.7f});
    vn_tensor *i32 = vn_to_dtype(f, VN_I32), *u8 = vn_to_dtype(f, VN_U8), *i64 = vn_to_dtype(f, VN_I64);
    int32_t a[4];
    uint8_t b[4];
    int64_t c[4];
    CHECK_OK(vn_tensor_copy_out(i32, a, sizeof a));
    CHECK_OK(vn_tensor_copy_out(u8, b, sizeof b));
    CHECK_OK(vn_tensor_copy_out(i64, c, sizeof c));
    assert_true(a[0] == INT32_MAX && a[1] == INT32_MIN && a[2] == 0 && a[3] == -2);
    assert_true(b[0] == 255 && b[1] == 0 && b[2] == 0 && b[3] == 0);
    assert_true(c[0] == 10000000000LL && c[1] == -10000000000LL && c[2] == 0 && c[3] == -2);
    vn_tensor *all[] = {o, f, i32, u8, i64};
    for (int k = 0; k < 5; k++) vn_tensor_release(all[k]);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_creation),  cmocka_unit_test(test_rng),
        cmocka_unit_test(test_views),     cmocka_unit_test(test_copies),
        cmocka_unit_test(test_view_gradients), cmocka_unit_test(test_tape),
        cmocka_unit_test(test_free_and_cache), cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_long_chain_release), cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
