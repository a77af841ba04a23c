/* CSR graphs: construction (the stored order, duplicates summed, row
 * pointers), SpMM against a dense A·X summed in double, the SAGA-NN stages
 * against plain loops, gradients of all of them by finite differences,
 * slices (the gathers of edge chunks sum to the whole), empty graphs and
 * rows, and bad input with the position and value in the message. */
#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define ROWS 7
#define COLS 5
#define E 24

static int64_t coo_r[E], coo_c[E];
static float coo_v[E];

/* A fixed random COO list with duplicates and with rows 3 and 6 empty. */
static void make_coo(void)
{
    uint32_t s = 12345;
    for (int k = 0; k < E; k++) {
        s = s * 1664525u + 1013904223u;
        int64_t r = (s >> 8) % 5;
        coo_r[k] = r == 3 ? 4 : r; /* rows 0, 1, 2, 4, 5 (5 from below) */
        if (k % 7 == 6) coo_r[k] = 5;
        s = s * 1664525u + 1013904223u;
        coo_c[k] = (s >> 8) % COLS;
        s = s * 1664525u + 1013904223u;
        coo_v[k] = (float)((s >> 8) % 1000) / 500.0f - 1.0f;
    }
    coo_r[E - 1] = coo_r[0], coo_c[E - 1] = coo_c[0]; /* surely one duplicate */
}

static vn_tensor *ti64(int64_t n, const int64_t *v)
{
    vn_tensor *t = vn_from_data(VN_I64, 1, &n, v);
    CHECK_PTR(t);
    return t;
}

static vn_csr *make_csr(bool with_values)
{
    make_coo();
    vn_tensor *r = ti64(E, coo_r), *c = ti64(E, coo_c);
    vn_tensor *v = with_values ? tf32(1, (int64_t[]){E}, coo_v) : NULL;
    vn_csr *a = vn_csr_from_coo(ROWS, COLS, r, c, v);
    CHECK_PTR(a);
    vn_tensor_release(r);
    vn_tensor_release(c);
    vn_tensor_release(v);
    return a;
}

/* The dense matrix of the COO list (duplicates summed), in double. */
static void dense_of_coo(bool with_values, double A[ROWS][COLS])
{
    memset(A, 0, sizeof(double) * ROWS * COLS);
    for (int k = 0; k < E; k++) A[coo_r[k]][coo_c[k]] += with_values ? coo_v[k] : 1.0;
}

static const int64_t *i64p(const vn_tensor *t) { return vn_tensor_data(t); }
static const float *f32p(const vn_tensor *t) { return vn_tensor_data(t); }

static void test_from_coo(void **state)
{
    (void)state;
    vn_csr *a = make_csr(true);
    double A[ROWS][COLS];
    dense_of_coo(true, A);
    vn_tensor *rp = vn_csr_row_ptr(a), *ri = vn_csr_row_idx(a), *ci = vn_csr_col_idx(a);
    vn_tensor *v = vn_csr_values(a);
    CHECK_PTR(rp);
    CHECK_PTR(v);
    int64_t nnz = vn_csr_nnz(a), want = 0;
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++) {
            bool any = false;
            for (int k = 0; k < E; k++) any |= coo_r[k] == i && coo_c[k] == j;
            want += any;
        }
    assert_int_equal(nnz, want);
    assert_true(nnz < E); /* duplicates were merged */
    assert_int_equal(vn_csr_rows(a), ROWS);
    assert_int_equal(vn_csr_cols(a), COLS);
    assert_int_equal(vn_tensor_numel(rp), ROWS + 1);
    assert_int_equal(i64p(rp)[0], 0);
    assert_int_equal(i64p(rp)[ROWS], nnz);
    assert_int_equal(i64p(rp)[4], i64p(rp)[3]); /* row 3 is empty */
    for (int64_t k = 0; k < nnz; k++) {
        int64_t r = i64p(ri)[k], c = i64p(ci)[k];
        assert_true(k >= i64p(rp)[r] && k < i64p(rp)[r + 1]);
        if (k) /* the stored order: by row, then column, no repeats */
            assert_true(i64p(ri)[k - 1] < r || (i64p(ri)[k - 1] == r && i64p(ci)[k - 1] < c));
        assert_float_equal(f32p(v)[k], A[r][c], 1e-5);
    }
    vn_tensor *rs[] = {rp, ri, ci, v};
    for (int k = 0; k < 4; k++) vn_tensor_release(rs[k]);
    vn_csr_free(a);

    /* Without values, a duplicate counts twice: the matrix gets values. */
    a = make_csr(false);
    dense_of_coo(false, A);
    v = vn_csr_values(a);
    CHECK_PTR(v);
    ri = vn_csr_row_idx(a);
    ci = vn_csr_col_idx(a);
    for (int64_t k = 0; k < vn_csr_nnz(a); k++)
        assert_float_equal(f32p(v)[k], A[i64p(ri)[k]][i64p(ci)[k]], 0);
    assert_float_equal(A[coo_r[0]][coo_c[0]], 2, 0);
    vn_tensor *rs2[] = {ri, ci, v};
    for (int k = 0; k < 3; k++) vn_tensor_release(rs2[k]);
    vn_csr_free(a);
    /* Without values or duplicates: all ones, values NULL and no error. */
    vn_tensor *r = ti64(2, (int64_t[]){1, 0});
    a = vn_csr_from_coo(2, 2, r, r, NULL);
    CHECK_PTR(a);
    assert_null(vn_csr_values(a));
    assert_int_equal(vn_last_status(), VN_OK);
    vn_tensor_release(r);
    vn_csr_free(a);
}

static void test_spmm_values(void **state)
{
    (void)state;
    for (int wv = 0; wv < 2; wv++) {
        vn_csr *a = make_csr(wv);
        double A[ROWS][COLS];
        dense_of_coo(wv, A);
        int64_t F = 3;
        vn_tensor *x = trand(2, (int64_t[]){COLS, F}, -1, 1, 7);
        vn_tensor *y = vn_csr_spmm(a, NULL, x);
        CHECK_PTR(y);
        assert_int_equal(vn_tensor_shape(y)[0], ROWS);
        for (int i = 0; i < ROWS; i++)
            for (int f = 0; f < F; f++) {
                double s = 0;
                for (int j = 0; j < COLS; j++) s += A[i][j] * f32p(x)[j * F + f];
                assert_float_equal(f32p(y)[i * F + f], s, 1e-5);
            }
        for (int f = 0; f < F; f++) assert_float_equal(f32p(y)[3 * F + f], 0, 0); /* empty row */
        vn_tensor_release(x);
        vn_tensor_release(y);
        vn_csr_free(a);
    }
}

typedef struct { vn_csr *a; int mode; } ctx_t;

static vn_tensor *f_spmm(vn_tensor **in, void *c) { return vn_csr_spmm(((ctx_t *)c)->a, in[1], in[0]); }
static vn_tensor *f_spmm_own(vn_tensor **in, void *c) { return vn_csr_spmm(((ctx_t *)c)->a, NULL, in[0]); }
static vn_tensor *f_scatter(vn_tensor **in, void *c)
{
    return vn_csr_scatter(((ctx_t *)c)->a, in[0], ((ctx_t *)c)->mode);
}
static vn_tensor *f_gather(vn_tensor **in, void *c)
{
    return vn_csr_gather(((ctx_t *)c)->a, in[0], (vn_gather_op)((ctx_t *)c)->mode);
}
static vn_tensor *f_softmax(vn_tensor **in, void *c) { return vn_csr_edge_softmax(((ctx_t *)c)->a, in[0]); }

static vn_tensor *grad_input(int ndim, const int64_t *shape, unsigned seed)
{
    vn_tensor *t = trand(ndim, shape, -1, 1, seed);
    CHECK_OK(vn_tensor_set_requires_grad(t, true));
    return t;
}

static void test_gradcheck(void **state)
{
    (void)state;
    ctx_t c = {make_csr(true), 0};
    int64_t nnz = vn_csr_nnz(c.a);
    vn_tensor *in[2] = {grad_input(2, (int64_t[]){COLS, 3}, 1), grad_input(1, &nnz, 2)};
    gradcheck(f_spmm, in, 2, &c, 1e-2, 1e-3);
    vn_tensor_release(in[1]);
    gradcheck(f_spmm_own, in, 1, &c, 1e-2, 1e-3); /* A's own values, X (cols, 2, 2) */
    vn_tensor_release(in[0]);
    in[0] = grad_input(3, (int64_t[]){COLS, 2, 2}, 3);
    gradcheck(f_spmm_own, in, 1, &c, 1e-2, 1e-3);
    vn_tensor_release(in[0]);

    for (c.mode = 0; c.mode < 2; c.mode++) { /* destination, source */
        in[0] = grad_input(2, (int64_t[]){c.mode ? COLS : ROWS, 3}, 4);
        gradcheck(f_scatter, in, 1, &c, 1e-2, 1e-3);
        vn_tensor_release(in[0]);
    }
    for (c.mode = VN_GATHER_SUM; c.mode <= VN_GATHER_MAX; c.mode++) {
        in[0] = grad_input(2, (int64_t[]){nnz, 3}, 5); /* distinct values: max is smooth */
        gradcheck(f_gather, in, 1, &c, 1e-3, 1e-3);
        vn_tensor_release(in[0]);
    }
    in[0] = grad_input(1, &nnz, 6);
    gradcheck(f_softmax, in, 1, &c, 1e-2, 1e-3);
    vn_tensor_release(in[0]);
    in[0] = grad_input(2, (int64_t[]){nnz, 2}, 7);
    gradcheck(f_softmax, in, 1, &c, 1e-2, 1e-3);
    vn_tensor_release(in[0]);
    vn_csr_free(c.a);
}

/* The SAGA stages against plain loops over the entries. */
static void test_saga_values(void **state)
{
    (void)state;
    vn_csr *a = make_csr(true);
    int64_t nnz = vn_csr_nnz(a), F = 2;
    vn_tensor *ri = vn_csr_row_idx(a), *ci = vn_csr_col_idx(a), *rp = vn_csr_row_ptr(a);
    vn_tensor *x = trand(2, (int64_t[]){COLS, F}, -1, 1, 9);
    vn_tensor *e = vn_csr_scatter(a, x, true);
    CHECK_PTR(e);
    for (int64_t k = 0; k < nnz; k++)
        for (int f = 0; f < F; f++)
            assert_float_equal(f32p(e)[k * F + f], f32p(x)[i64p(ci)[k] * F + f], 0);
    vn_tensor *y[3];
    for (int op = 0; op < 3; op++) CHECK_PTR(y[op] = vn_csr_gather(a, e, (vn_gather_op)op));
    for (int i = 0; i < ROWS; i++)
        for (int f = 0; f < F; f++) {
            double s = 0, m = -INFINITY;
            int64_t n = i64p(rp)[i + 1] - i64p(rp)[i];
            for (int64_t k = i64p(rp)[i]; k < i64p(rp)[i + 1]; k++) {
                s += f32p(e)[k * F + f];
                m = fmax(m, f32p(e)[k * F + f]);
            }
            assert_float_equal(f32p(y[0])[i * F + f], s, 1e-5);
            assert_float_equal(f32p(y[1])[i * F + f], n ? s / n : 0, 1e-5);
            assert_float_equal(f32p(y[2])[i * F + f], n ? m : 0, 1e-6);
        }
    vn_tensor *v = vn_csr_values(a), *sm = vn_csr_edge_softmax(a, v);
    CHECK_PTR(sm);
    for (int i = 0; i < ROWS; i++) {
        double s = 0;
        for (int64_t k = i64p(rp)[i]; k < i64p(rp)[i + 1]; k++) s += f32p(sm)[k];
        if (i64p(rp)[i + 1] > i64p(rp)[i]) assert_float_equal(s, 1, 1e-5);
    }
    vn_tensor *rs[] = {ri, ci, rp, x, e, y[0], y[1], y[2], sm, v};
    for (int k = 0; k < 10; k++) vn_tensor_release(rs[k]);
    vn_csr_free(a);
}

/* Gathers over edge chunks (slices) sum to the gather of the whole. */
static void test_slices(void **state)
{
    (void)state;
    vn_csr *a = make_csr(true);
    int64_t nnz = vn_csr_nnz(a), F = 3;
    vn_tensor *x = trand(2, (int64_t[]){COLS, F}, -1, 1, 11);
    vn_tensor *whole = vn_csr_spmm(a, NULL, x), *sum = vn_zeros(VN_F32, 2, (int64_t[]){ROWS, F});
    CHECK_PTR(whole);
    for (int64_t first = 0; first < nnz; first += 4) {
        int64_t count = nnz - first < 4 ? nnz - first : 4;
        vn_csr *s = vn_csr_slice(a, first, count);
        CHECK_PTR(s);
        assert_int_equal(vn_csr_nnz(s), count);
        vn_tensor *part = vn_csr_spmm(s, NULL, x), *e = vn_csr_scatter(s, x, true);
        vn_tensor *v = vn_csr_values(s), *vr = vn_reshape(v, 2, (int64_t[]){count, 1});
        vn_tensor *ev = e && vr ? vn_mul(e, vr) : NULL;
        vn_tensor *g = ev ? vn_csr_gather(s, ev, VN_GATHER_SUM) : NULL;
        CHECK_PTR(part);
        CHECK_PTR(g);
        assert_true(max_rel_diff(g, part) < 1e-5); /* scatter, ApplyEdge (×A), gather = SpMM */
        vn_tensor *t = vn_add(sum, part);
        vn_tensor_release(sum);
        sum = t;
        vn_tensor *rs[] = {part, e, g, v, vr, ev};
        for (int k = 0; k < 6; k++) vn_tensor_release(rs[k]);
        vn_csr_free(s);
    }
    assert_true(max_rel_diff(sum, whole) < 1e-5);
    assert_null(vn_csr_slice(a, nnz - 1, 2));
    assert_int_equal(vn_last_status(), VN_ERR_ARG);
    vn_tensor *rs[] = {x, whole, sum};
    for (int k = 0; k < 3; k++) vn_tensor_release(rs[k]);
    vn_csr_free(a);
}

static void expect_error(const void *result, vn_status want, const char *needle)
{
    assert_null(result);
    assert_int_equal(vn_last_status(), want);
    if (!strstr(vn_last_error(), needle))
        fail_msg("error \"%s\" does not mention \"%s\"", vn_last_error(), needle);
}

static void test_empty(void **state)
{
    (void)state;
    vn_tensor *none = vn_empty(VN_I64, 1, (int64_t[]){0});
    vn_csr *a = vn_csr_from_coo(4, 4, none, none, NULL);
    CHECK_PTR(a);
    assert_int_equal(vn_csr_nnz(a), 0);
    vn_tensor *x = trand(2, (int64_t[]){4, 2}, -1, 1, 3), *y = vn_csr_spmm(a, NULL, x);
    CHECK_PTR(y);
    for (int k = 0; k < 8; k++) assert_float_equal(f32p(y)[k], 0, 0);
    vn_tensor *e = vn_csr_scatter(a, x, true), *g = e ? vn_csr_gather(a, e, VN_GATHER_MAX) : NULL;
    CHECK_PTR(g);
    for (int k = 0; k < 8; k++) assert_float_equal(f32p(g)[k], 0, 0);
    vn_csr *z = vn_csr_from_coo(0, 0, none, none, NULL);
    CHECK_PTR(z);
    vn_tensor *rs[] = {none, x, y, e, g};
    for (int k = 0; k < 5; k++) vn_tensor_release(rs[k]);
    vn_csr_free(a);
    vn_csr_free(z);
}

static void test_errors(void **state)
{
    (void)state;
    vn_tensor *r = ti64(3, (int64_t[]){0, 1, 2}), *bad = ti64(3, (int64_t[]){0, 5, 1});
    vn_tensor *neg = ti64(3, (int64_t[]){0, 1, -2}), *two = ti64(2, (int64_t[]){0, 1});
    expect_error(vn_csr_from_coo(3, 3, r, bad, NULL), VN_ERR_ARG, "col index 5 at position 1");
    expect_error(vn_csr_from_coo(3, 3, neg, r, NULL), VN_ERR_ARG, "row index -2 at position 2");
    expect_error(vn_csr_from_coo(3, 3, r, two, NULL), VN_ERR_SHAPE, "must match");
    expect_error(vn_csr_from_coo(-1, 3, r, r, NULL), VN_ERR_ARG, "-1");
    expect_error(vn_csr_from_coo(3, 3, NULL, r, NULL), VN_ERR_ARG, "NULL");
    vn_tensor *f = tf32(1, (int64_t[]){3}, (float[]){0, 1, 2});
    expect_error(vn_csr_from_coo(3, 3, f, r, NULL), VN_ERR_DTYPE, "i32 or i64");
    expect_error(vn_csr_from_coo(3, 3, r, r, two), VN_ERR_DTYPE, "values");
    vn_csr *a = vn_csr_from_coo(3, 3, r, r, NULL);
    CHECK_PTR(a);
    vn_tensor *x = trand(2, (int64_t[]){4, 2}, -1, 1, 3);
    expect_error(vn_csr_spmm(a, NULL, x), VN_ERR_SHAPE, "expected 3 rows");
    expect_error(vn_csr_spmm(NULL, NULL, x), VN_ERR_ARG, "NULL");
    expect_error(vn_csr_spmm(a, x, f), VN_ERR_SHAPE, "values");
    expect_error(vn_csr_gather(a, x, VN_GATHER_SUM), VN_ERR_SHAPE, "edge tensor");
    expect_error(vn_csr_gather(a, f, (vn_gather_op)7), VN_ERR_ARG, "reduction");
    expect_error(vn_csr_edge_softmax(a, x), VN_ERR_SHAPE, "scores");
    expect_error(vn_csr_scatter(a, x, false), VN_ERR_SHAPE, "destination");
    assert_int_equal(vn_csr_nnz(NULL), 0);
    vn_tensor *rs[] = {r, bad, neg, two, f, x};
    for (int k = 0; k < 6; k++) vn_tensor_release(rs[k]);
    vn_csr_free(a);
    vn_csr_free(NULL);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_from_coo),  cmocka_unit_test(test_spmm_values),
        cmocka_unit_test(test_gradcheck), cmocka_unit_test(test_saga_values),
        cmocka_unit_test(test_slices),    cmocka_unit_test(test_empty),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
