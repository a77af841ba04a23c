/* sort and topk (ops_sort.c) and var, std, norm (ops_stats.c): values and
 * indices against plain reference loops over every dim, stable ties, NaN,
 * 0-d and empty inputs, errors, and gradients by finite differences
 * (including the 2-norm's 0 gradient at the zero vector). */
#include "gradcheck.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double at(const vn_tensor *t, const int64_t *idx)
{
    double v;
    CHECK_OK(vn_tensor_get(t, idx, &v));
    return v;
}

/* Position `flat` of a row-major walk over shape, with dim `dim` fixed to j. */
static void index_of(int ndim, const int64_t *shape, int dim, int64_t outer_flat, int64_t j, int64_t *idx)
{
    for (int d = ndim - 1; d >= 0; d--) {
        if (d == dim) continue;
        idx[d] = outer_flat % shape[d];
        outer_flat /= shape[d];
    }
    idx[dim] = j;
}

/* Checks sorted/topk output along dim against a selection-sort reference:
 * the values are t at the indices, in order, ties by increasing index. */
static void check_order(const vn_tensor *t, int dim, int64_t k, bool descending, const vn_tensor *v,
                        const vn_tensor *ix)
{
    int nd = vn_tensor_ndim(t);
    const int64_t *shape = vn_tensor_shape(t);
    int64_t n = shape[dim], outer = vn_tensor_numel(t) / (n ? n : 1);
    assert_int_equal(vn_tensor_shape(v)[dim], k);
    assert_int_equal(vn_tensor_dtype(ix), VN_I64);
    int64_t idx[8];
    for (int64_t o = 0; o < outer; o++) {
        bool *used = calloc((size_t)n, 1);
        for (int64_t j = 0; j < k; j++) {
            int64_t best = -1;
            double bv = 0;
            for (int64_t c = 0; c < n; c++) {
                if (used[c]) continue;
                index_of(nd, shape, dim, o, c, idx);
                double x = at(t, idx);
                bool better = best < 0 || (descending ? (isnan(x) && !isnan(bv)) || x > bv
                                                      : (!isnan(x) && isnan(bv)) || x < bv);
                if (better) best = c, bv = x;
            }
            used[best] = true;
            index_of(nd, shape, dim, o, j, idx);
            assert_int_equal((int64_t)at(ix, idx), best);
            double got = at(v, idx);
            if (isnan(bv)) assert_true(isnan(got));
            else assert_true(got == bv);
        }
        free(used);
    }
}

static void test_sort_topk_values(void **state)
{
    (void)state;
    const int64_t shape[] = {3, 5, 4};
    vn_tensor *x = trand(3, shape, -2, 2, 11);
    /* ties and a NaN */
    const int64_t i0[] = {0, 0, 0}, i1[] = {0, 1, 0}, i2[] = {0, 2, 0}, i3[] = {1, 3, 2};
    CHECK_OK(vn_tensor_set(x, i1, 0.5));
    CHECK_OK(vn_tensor_set(x, i2, 0.5));
    CHECK_OK(vn_tensor_set(x, i0, 0.5));
    CHECK_OK(vn_tensor_set(x, i3, NAN));
    for (int dim = 0; dim < 3; dim++) {
        for (int desc = 0; desc < 2; desc++) {
            vn_tensor *v, *ix;
            CHECK_OK(vn_sort(x, dim, desc, &v, &ix));
            check_order(x, dim, shape[dim], desc, v, ix);
            vn_tensor_release(v);
            vn_tensor_release(ix);
            CHECK_OK(vn_topk(x, 2, dim - 3, desc, &v, &ix)); /* negative dim */
            check_order(x, dim, 2, desc, v, ix);
            vn_tensor_release(v);
            vn_tensor_release(ix);
        }
    }
    /* integer dtypes and a transposed (non-contiguous) input */
    vn_tensor *xi = vn_to_dtype(x, VN_I32), *xt = vn_transpose(xi, 0, 2);
    CHECK_PTR(xt);
    vn_tensor *v, *ix;
    CHECK_OK(vn_sort(xt, 1, true, &v, &ix));
    assert_int_equal(vn_tensor_dtype(v), VN_I32);
    check_order(xt, 1, 5, true, v, ix);
    vn_tensor_release(v);
    vn_tensor_release(ix);
    /* a 0-d tensor sorts as itself */
    vn_tensor *s = vn_full(VN_F32, 0, NULL, 3);
    CHECK_OK(vn_sort(s, 0, false, &v, &ix));
    assert_int_equal(vn_tensor_ndim(v), 0);
    assert_true(at(v, NULL) == 3 && at(ix, NULL) == 0);
    vn_tensor_release(v);
    vn_tensor_release(ix);
    /* k = 0 gives empty outputs */
    CHECK_OK(vn_topk(x, 0, 1, true, &v, &ix));
    assert_int_equal(vn_tensor_numel(v), 0);
    vn_tensor_release(v);
    vn_tensor_release(ix);
    vn_tensor *all[] = {x, xi, xt, s};
    for (int i = 0; i < 4; i++) vn_tensor_release(all[i]);
}

static void test_sort_errors(void **state)
{
    (void)state;
    const int64_t shape[] = {2, 3};
    vn_tensor *x = trand(2, shape, 0, 1, 3), *v = NULL, *ix = NULL;
    assert_int_equal(vn_topk(x, 4, 1, true, &v, &ix), VN_ERR_ARG);
    assert_non_null(strstr(vn_last_error(), "k must be in [0, 3]"));
    assert_null(v);
    assert_int_equal(vn_topk(x, -1, 1, true, &v, &ix), VN_ERR_ARG);
    assert_int_equal(vn_sort(x, 2, false, &v, &ix), VN_ERR_ARG);
    assert_non_null(strstr(vn_last_error(), "sort"));
    assert_int_equal(vn_sort(x, 0, false, NULL, &ix), VN_ERR_ARG);
    assert_int_not_equal(vn_sort(NULL, 0, false, &v, &ix), VN_OK);
    vn_tensor *h = vn_to_dtype(x, VN_BF16);
    assert_int_not_equal(vn_sort(h, 0, false, &v, &ix), VN_OK);
    assert_null(v);
    vn_tensor_release(h);
    vn_tensor_release(x);
}

typedef struct {
    int kind; /* 0 sort, 1 topk, 2 var, 3 std, 4 norm, 5 var_all, 6 norm_all */
    int dim;
    double arg; /* k, correction or p */
    bool flag;  /* descending/largest or keepdim */
} op_ctx;

static vn_tensor *f_op(vn_tensor **in, void *p)
{
    const op_ctx *c = p;
    vn_tensor *v = NULL, *ix = NULL;
    switch (c->kind) {
    case 0: vn_sort(in[0], c->dim, c->flag, &v, &ix); break;
    case 1: vn_topk(in[0], (int64_t)c->arg, c->dim, c->flag, &v, &ix); break;
    case 2: v = vn_var(in[0], c->dim, c->arg, c->flag); break;
    case 3: v = vn_std(in[0], c->dim, c->arg, c->flag); break;
    case 4: v = vn_norm(in[0], c->arg, c->dim, c->flag); break;
    case 5: v = vn_var_all(in[0], c->arg); break;
    case 6: v = vn_norm_all(in[0], c->arg); break;
    }
    vn_tensor_release(ix);
    return v;
}

static void test_grads(void **state)
{
    (void)state;
    const int64_t shape[] = {3, 4, 5};
    vn_tensor *x = trand(3, shape, -1, 1, 5);
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    const op_ctx cases[] = {
        {0, 1, 0, false}, {0, -1, 0, true}, {1, 2, 3, true}, {1, 0, 2, false}, {2, 1, 1, false},
        {2, 2, 0, true},  {3, 0, 1, true},  {4, 1, 1, false}, {4, 2, 2, true}, {4, 0, INFINITY, false},
        {5, 0, 1, false}, {6, 0, 2, false}, {6, 0, 1, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) gradcheck(f_op, &x, 1, (void *)&cases[i], 1e-3, 1e-2);
    vn_tensor_release(x);
}

static double sum_sq_dev(const double *v, int n, double *mean)
{
    double m = 0, s = 0;
    for (int i = 0; i < n; i++) m += v[i];
    m /= n;
    for (int i = 0; i < n; i++) s += (v[i] - m) * (v[i] - m);
    *mean = m;
    return s;
}

static void test_stats_values(void **state)
{
    (void)state;
    const int64_t shape[] = {4, 6};
    vn_tensor *x = trand(2, shape, -3, 3, 9);
    double rows[4][6];
    for (int64_t r = 0; r < 4; r++)
        for (int64_t c = 0; c < 6; c++) rows[r][c] = at(x, (int64_t[]){r, c});
    vn_tensor *var = vn_var(x, 1, 1, false), *std0 = vn_std(x, -1, 0, true);
    vn_tensor *n1 = vn_norm(x, 1, 1, false), *n2 = vn_norm(x, 2, 1, false), *ninf = vn_norm(x, INFINITY, 1, false);
    CHECK_PTR(ninf);
    assert_int_equal(vn_tensor_ndim(std0), 2);
    for (int64_t r = 0; r < 4; r++) {
        double mean, ss = sum_sq_dev(rows[r], 6, &mean), a1 = 0, a2 = 0, amax = 0;
        for (int c = 0; c < 6; c++) {
            a1 += fabs(rows[r][c]);
            a2 += rows[r][c] * rows[r][c];
            amax = fmax(amax, fabs(rows[r][c]));
        }
        assert_float_equal(at(var, &r), ss / 5, 1e-5);
        assert_float_equal(at(std0, (int64_t[]){r, 0}), sqrt(ss / 6), 1e-5);
        assert_float_equal(at(n1, &r), a1, 1e-4);
        assert_float_equal(at(n2, &r), sqrt(a2), 1e-5);
        assert_float_equal(at(ninf, &r), amax, 1e-6);
    }
    double flat[24], mean;
    memcpy(flat, rows, sizeof flat);
    vn_tensor *va = vn_var_all(x, 1), *sa = vn_std_all(x, 0);
    CHECK_PTR(sa);
    double ss = sum_sq_dev(flat, 24, &mean);
    assert_float_equal(at(va, NULL), ss / 23, 1e-5);
    assert_float_equal(at(sa, NULL), sqrt(ss / 24), 1e-5);
    /* one element with Bessel's correction: 0/0, as in PyTorch */
    vn_tensor *one = vn_full(VN_F32, 0, NULL, 2), *v1 = vn_var_all(one, 1);
    CHECK_PTR(v1);
    assert_true(isnan(at(v1, NULL)));
    /* errors */
    assert_null(vn_norm(x, 3, 0, false));
    assert_non_null(strstr(vn_last_error(), "p must be 1, 2 or inf, got 3"));
    assert_null(vn_var(x, 0, -1, false));
    assert_non_null(strstr(vn_last_error(), "correction"));
    assert_null(vn_std(x, 5, 1, false));
    vn_tensor *all[] = {x, var, std0, n1, n2, ninf, va, sa, one, v1};
    for (int i = 0; i < 10; i++) vn_tensor_release(all[i]);
}

/* The 2-norm of a zero row has gradient 0 there, not NaN. */
static void test_norm2_zero(void **state)
{
    (void)state;
    const int64_t shape[] = {2, 3};
    vn_tensor *x = vn_full(VN_F32, 2, shape, 0);
    const int64_t i[] = {1, 1};
    CHECK_OK(vn_tensor_set(x, i, 3));
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    vn_tensor *n = vn_norm(x, 2, 1, false), *s = vn_sum_all(n);
    CHECK_OK(vn_backward(s, NULL));
    const vn_tensor *g = vn_tensor_grad(x);
    CHECK_PTR(g);
    for (int64_t r = 0; r < 2; r++)
        for (int64_t c = 0; c < 3; c++) assert_true(at(g, (int64_t[]){r, c}) == (r == 1 && c == 1 ? 1 : 0));
    vn_tensor_release(x);
    vn_tensor_release(n);
    vn_tensor_release(s);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sort_topk_values), cmocka_unit_test(test_sort_errors),
        cmocka_unit_test(test_grads),            cmocka_unit_test(test_stats_values),
        cmocka_unit_test(test_norm2_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
