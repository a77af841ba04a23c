/* Reductions: sum, mean, max, min, argmax, argmin over every dim (with and
 * without keepdim) and over all elements, for every dtype, against plain
 * reference loops; empty inputs; non-contiguous inputs; errors; gradients by
 * finite differences; and vn__sum_to, the reverse of broadcasting. */
#include "gradcheck.h"
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void release_all(vn_tensor **ts, int n)
{
    for (int i = 0; i < n; i++) vn_tensor_release(ts[i]);
}

/* All values of t in row-major order as doubles (views read by strides). */
static double *vals(const vn_tensor *t)
{
    int nd = vn_tensor_ndim(t);
    int64_t n = vn_tensor_numel(t), idx[8];
    double *out = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t f = 0; f < n; f++) {
        int64_t rest = f;
        for (int d = nd - 1; d >= 0; d--) {
            idx[d] = rest % vn_tensor_shape(t)[d];
            rest /= vn_tensor_shape(t)[d];
        }
        CHECK_OK(vn_tensor_get(t, idx, &out[f]));
    }
    return out;
}

enum { SUM, MEAN, MAX, MIN, ARGMAX, ARGMIN, NKINDS };
typedef vn_tensor *(*dimop)(const vn_tensor *, int, bool);
static const dimop DIMOPS[NKINDS] = {vn_sum, vn_mean, vn_max, vn_min, vn_argmax, vn_argmin};

/* Reference reduction of x (row-major values, shape (outer, R, inner)) at
 * output position (o, j). Ties go to the first index; nan wins. */
static double ref_reduce(int kind, const double *x, int64_t R, int64_t inner, int64_t o, int64_t j)
{
    double acc = 0, best = x[o * R * inner + j];
    int64_t at = 0;
    for (int64_t r = 0; r < R; r++) {
        double v = x[(o * R + r) * inner + j];
        acc += v;
        bool better = (kind == MAX || kind == ARGMAX) ? v > best : v < best;
        if (r > 0 && (better || (isnan(v) && !isnan(best)))) {
            best = v;
            at = r;
        }
    }
    switch (kind) {
    case SUM: return acc;
    case MEAN: return acc / (double)R;
    case MAX: case MIN: return best;
    default: return (double)at;
    }
}

/* Checks every kind over every dim (negative too), keepdim on and off. */
static void check_all_dims(const vn_tensor *t)
{
    int nd = vn_tensor_ndim(t);
    const int64_t *shape = vn_tensor_shape(t);
    double *x = vals(t);
    bool is_f32 = vn_tensor_dtype(t) == VN_F32;
    for (int kind = 0; kind < NKINDS; kind++)
        for (int dim = -nd; dim < nd; dim++)
            for (int keep = 0; keep < 2; keep++) {
                vn_tensor *r = DIMOPS[kind](t, dim, keep);
                CHECK_PTR(r);
                int d = dim < 0 ? dim + nd : dim;
                int64_t outer = 1, inner = 1, R = shape[d];
                for (int q = 0; q < d; q++) outer *= shape[q];
                for (int q = d + 1; q < nd; q++) inner *= shape[q];
                /* shape: dim removed, or kept as 1 */
                assert_int_equal(vn_tensor_ndim(r), keep ? nd : nd - 1);
                for (int q = 0, k = 0; q < nd; q++) {
                    if (q == d && !keep) continue;
                    assert_int_equal(vn_tensor_shape(r)[k++], q == d ? 1 : shape[q]);
                }
                /* dtype rules */
                vn_dtype want = vn_tensor_dtype(t);
                if (kind == SUM && !is_f32) want = VN_I64;
                if (kind == MEAN) want = VN_F32;
                if (kind >= ARGMAX) want = VN_I64;
                assert_int_equal(vn_tensor_dtype(r), want);
                double *got = vals(r);
                for (int64_t o = 0; o < outer; o++)
                    for (int64_t j = 0; j < inner; j++) {
                        double w = ref_reduce(kind, x, R, inner, o, j), g = got[o * inner + j];
                        if (isnan(w)) assert_true(isnan(g));
                        else if (want == VN_F32) assert_true(fabs(g - w) <= 1e-6 * (1 + fabs(w)));
                        else assert_true(g == w);
                    }
                free(got);
                vn_tensor_release(r);
            }
    free(x);
}

static void test_dims_all_dtypes(void **state)
{
    const int64_t s[] = {2, 3, 4};
    vn_tensor *f = trand(3, s, -5, 5, 1);
    check_all_dims(f);
    /* integers with ties; u8 sums past 255 */
    const int32_t iv[] = {3, -1, 3, 7, 0, 0, -9, 2, 5, 5, 5, 5, 1, 2, 3, 4, -4, -3, -2, -1, 8, 8, -8, 8};
    vn_tensor *i32 = vn_from_data(VN_I32, 3, s, iv);
    vn_tensor *i64 = vn_to_dtype(i32, VN_I64);
    uint8_t uv[24];
    for (int i = 0; i < 24; i++) uv[i] = (uint8_t)(200 + i * 7);
    vn_tensor *u8 = vn_from_data(VN_U8, 3, s, uv);
    check_all_dims(i32);
    check_all_dims(i64);
    check_all_dims(u8);
    /* first of ties, by hand: row {5, 5, 5, 5} and {8, 8, -8, 8} */
    vn_tensor *am = vn_argmax(i32, -1, false), *an = vn_argmin(i32, 2, true);
    int64_t amv[6], anv[6];
    CHECK_OK(vn_tensor_copy_out(am, amv, sizeof amv));
    CHECK_OK(vn_tensor_copy_out(an, anv, sizeof anv));
    assert_true(amv[0] == 3 && amv[2] == 0 && amv[5] == 0);
    assert_true(anv[0] == 1 && anv[1] == 2 && anv[2] == 0 && anv[5] == 2);
    vn_tensor *all[] = {f, i32, i64, u8, am, an};
    release_all(all, 6);
}

static void test_all(void **state)
{
    const int64_t s[] = {2, 3};
    const float fv[] = {1.5f, -2, 4, 0.25f, 4, -3};
    vn_tensor *f = tf32(2, s, fv);
    vn_tensor *r[4] = {vn_sum_all(f), vn_mean_all(f), vn_max_all(f), vn_min_all(f)};
    const double want[4] = {4.75, 4.75 / 6, 4, -3};
    for (int k = 0; k < 4; k++) {
        CHECK_PTR(r[k]);
        assert_int_equal(vn_tensor_ndim(r[k]), 0);
        assert_int_equal(vn_tensor_dtype(r[k]), VN_F32);
        double v;
        CHECK_OK(vn_tensor_item(r[k], &v));
        assert_true(fabs(v - want[k]) < 1e-6);
    }
    release_all(r, 4);
    /* integers: sum → i64 without overflow, mean → f32, max keeps the dtype */
    const int32_t iv[] = {2000000000, 2000000000, -1, 5, 7, 1};
    vn_tensor *i = vn_from_data(VN_I32, 2, s, iv);
    vn_tensor *is = vn_sum_all(i), *im = vn_mean_all(i), *ix = vn_max_all(i), *in = vn_min_all(i);
    assert_int_equal(vn_tensor_dtype(is), VN_I64);
    assert_int_equal(vn_tensor_dtype(im), VN_F32);
    assert_int_equal(vn_tensor_dtype(ix), VN_I32);
    int64_t sv;
    CHECK_OK(vn_tensor_copy_out(is, &sv, sizeof sv));
    assert_true(sv == 4000000012LL);
    double v;
    CHECK_OK(vn_tensor_item(im, &v));
    assert_true(fabs(v - 4000000012.0 / 6) < 1e3); /* f32 precision */
    CHECK_OK(vn_tensor_item(ix, &v));
    assert_true(v == 2000000000);
    CHECK_OK(vn_tensor_item(in, &v));
    assert_true(v == -1);
    /* nan propagates through max/min and argmax points at it */
    const float nv[] = {1, NAN, 3, 4, 5, 6};
    vn_tensor *nt = tf32(2, s, nv), *nm = vn_max_all(nt), *na = vn_argmax(nt, 1, false);
    CHECK_OK(vn_tensor_item(nm, &v));
    assert_true(isnan(v));
    int64_t nav[2];
    CHECK_OK(vn_tensor_copy_out(na, nav, sizeof nav));
    assert_true(nav[0] == 1 && nav[1] == 2);
    /* 0-d input: dim 0 reduces a scalar to itself */
    float three = 3;
    vn_tensor *sc = vn_from_data(VN_F32, 0, NULL, &three), *ss = vn_sum(sc, 0, false);
    CHECK_PTR(ss);
    assert_int_equal(vn_tensor_ndim(ss), 0);
    CHECK_OK(vn_tensor_item(ss, &v));
    assert_true(v == 3);
    vn_tensor *all[] = {f, i, is, im, ix, in, nt, nm, na, sc, ss};
    release_all(all, 11);
}

static void test_empty(void **state)
{
    const int64_t s03[] = {0, 3};
    vn_tensor *e = vn_zeros(VN_F32, 2, s03), *ei = vn_zeros(VN_I32, 2, s03);
    vn_tensor *s = vn_sum_all(e), *si = vn_sum_all(ei), *m = vn_mean_all(e), *s0 = vn_sum(e, 0, false);
    double v;
    CHECK_OK(vn_tensor_item(s, &v));
    assert_true(v == 0);
    CHECK_OK(vn_tensor_item(si, &v));
    assert_true(v == 0);
    CHECK_OK(vn_tensor_item(m, &v));
    assert_true(isnan(v)); /* 0/0 */
    assert_int_equal(vn_tensor_shape(s0)[0], 3);
    double *s0v = vals(s0);
    assert_true(s0v[0] == 0 && s0v[1] == 0 && s0v[2] == 0);
    free(s0v);
    /* max of nothing is an error; over a non-empty dim of an empty tensor it is not */
    assert_null(vn_max_all(e));
    assert_non_null(strstr(vn_last_error(), "(0, 3)"));
    assert_null(vn_min(e, 0, true));
    assert_null(vn_argmax(ei, 0, false));
    vn_tensor *m1 = vn_max(e, 1, false);
    CHECK_PTR(m1);
    assert_int_equal(vn_tensor_numel(m1), 0);
    vn_tensor *all[] = {e, ei, s, si, m, s0, m1};
    release_all(all, 7);
}

static void test_noncontiguous(void **state)
{
    const int64_t s[] = {4, 5};
    vn_tensor *x = trand(2, s, -1, 1, 2), *t = vn_transpose(x, 0, 1), *n = vn_narrow(x, 1, 1, 3);
    check_all_dims(t);
    check_all_dims(n);
    vn_tensor *st = vn_sum_all(t), *sx = vn_sum_all(x);
    double a, b;
    CHECK_OK(vn_tensor_item(st, &a));
    CHECK_OK(vn_tensor_item(sx, &b));
    assert_true(fabs(a - b) < 1e-6);
    vn_tensor *all[] = {x, t, n, st, sx};
    release_all(all, 5);
}

/* The threaded paths: column sums of (N, C) in blocks, row sums, and a long
 * sum_all in chunks, against double loops; repeated calls agree exactly. */
static void test_large(void **state)
{
    const int64_t s[] = {300, 1000};
    vn_tensor *x = trand(2, s, -1, 1, 3);
    const float *xp = vn_tensor_data(x);
    vn_tensor *c = vn_sum(x, 0, false), *r = vn_mean(x, 1, true), *a = vn_sum_all(x), *a2 = vn_sum_all(x);
    vn_tensor *mx = vn_max(x, 0, false);
    const float *cp = vn_tensor_data(c), *rp = vn_tensor_data(r), *mp = vn_tensor_data(mx);
    double total = 0;
    for (int j = 0; j < 1000; j++) {
        double acc = 0, best = -INFINITY;
        for (int i = 0; i < 300; i++) {
            acc += xp[i * 1000 + j];
            best = fmax(best, xp[i * 1000 + j]);
        }
        assert_true(fabs(cp[j] - acc) < 1e-5);
        assert_true(mp[j] == best);
    }
    for (int i = 0; i < 300; i++) {
        double acc = 0;
        for (int j = 0; j < 1000; j++) acc += xp[i * 1000 + j];
        assert_true(fabs(rp[i] - acc / 1000) < 1e-6);
        total += acc;
    }
    double av, av2;
    CHECK_OK(vn_tensor_item(a, &av));
    CHECK_OK(vn_tensor_item(a2, &av2));
    assert_true(fabs(av - total) < 1e-3 && av == av2);
    vn_tensor *all[] = {x, c, r, a, a2, mx};
    release_all(all, 6);
}

static void test_errors(void **state)
{
    const int64_t s[] = {2, 3};
    vn_tensor *x = vn_zeros(VN_F32, 2, s);
    assert_null(vn_sum(x, 2, false));
    assert_non_null(strstr(vn_last_error(), "dim 2"));
    assert_null(vn_argmax(x, -3, false));
    assert_null(vn_sum(NULL, 0, false));
    assert_non_null(strstr(vn_last_error(), "NULL"));
    assert_null(vn_max_all(NULL));
    vn_tensor *y = vn_zeros(VN_F32, 2, s);
    vn_tensor_free(y);
    assert_null(vn_mean_all(y));
    assert_non_null(strstr(vn_last_error(), "freed"));
    vn_tensor_release(x);
    vn_tensor_release(y);
}

/* ---- gradients ------------------------------------------------------------ */

typedef struct { dimop op; int dim; bool keep; } dimcase;

static vn_tensor *f_dim(vn_tensor **in, void *ctx)
{
    const dimcase *c = ctx;
    return c->op(in[0], c->dim, c->keep);
}

static vn_tensor *f_dim_t(vn_tensor **in, void *ctx)
{
    const dimcase *c = ctx;
    vn_tensor *t = vn_transpose(in[0], 0, 2), *out = c->op(t, c->dim, c->keep);
    vn_tensor_release(t);
    return out;
}

static vn_tensor *f_all(vn_tensor **in, void *ctx) { return ((vn_tensor * (*)(const vn_tensor *)) ctx)(in[0]); }

static void test_grad(void **state)
{
    const int64_t s[] = {2, 3, 4};
    vn_tensor *x = trand(3, s, -2, 2, 4); /* distinct values: no ties for max/min */
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    dimop ops[] = {vn_sum, vn_mean, vn_max, vn_min};
    for (int k = 0; k < 4; k++)
        for (int dim = -1; dim < 3; dim++)
            for (int keep = 0; keep < 2; keep++) {
                dimcase c = {ops[k], dim, keep};
                gradcheck(f_dim, &x, 1, &c, 1e-3, 1e-2);
                gradcheck(f_dim_t, &x, 1, &c, 1e-3, 1e-2);
            }
    vn_tensor *(*alls[])(const vn_tensor *) = {vn_sum_all, vn_mean_all, vn_max_all, vn_min_all};
    for (int k = 0; k < 4; k++) gradcheck(f_all, &x, 1, (void *)alls[k], 1e-3, 1e-2);
    vn_tensor_release(x);
}

/* max routes the gradient to the first of tied maxima only. */
static void test_grad_ties(void **state)
{
    const int64_t s[] = {2, 3};
    const float v[] = {5, 1, 5, 2, 2, -1};
    vn_tensor *x = tf32(2, s, v);
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    vn_tensor *m = vn_max(x, 1, false), *l = vn_sum_all(m);
    CHECK_OK(vn_backward(l, NULL));
    float g[6];
    CHECK_OK(vn_tensor_copy_out(vn_tensor_grad(x), g, sizeof g));
    const float want[] = {1, 0, 0, 1, 0, 0};
    assert_memory_equal(g, want, sizeof g);
    vn_tensor_zero_grad(x);
    vn_tensor *mn = vn_min_all(x), *ln = vn_mul(mn, mn); /* d(min²) = 2·min at the first min */
    CHECK_OK(vn_backward(ln, NULL));
    CHECK_OK(vn_tensor_copy_out(vn_tensor_grad(x), g, sizeof g));
    const float want2[] = {0, 0, 0, 0, 0, -2};
    assert_memory_equal(g, want2, sizeof g);
    vn_tensor *all[] = {x, m, l, mn, ln};
    release_all(all, 5);
}

/* A reduction and its input used together: z = sum(x, 0) + max(x, 0). */
static vn_tensor *f_shared(vn_tensor **in, void *ctx)
{
    vn_tensor *a = vn_sum(in[0], 0, true), *b = vn_max(in[0], 0, true), *c = vn_add(a, b);
    vn_tensor *out = vn_mul(c, in[0]);
    vn_tensor *all[] = {a, b, c};
    release_all(all, 3);
    return out;
}

static void test_grad_shared(void **state)
{
    const int64_t s[] = {3, 4};
    vn_tensor *x = trand(2, s, -1, 1, 5);
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    gradcheck(f_shared, &x, 1, NULL, 1e-3, 1e-2);
    vn_tensor_release(x);
}

/* ---- sum_to ---------------------------------------------------------------- */

/* g (2,3,4) summed to `shape` must equal the reference loop that adds each
 * element of g into the broadcast position of the target. */
static void check_sum_to(const vn_tensor *g, int ndim, const int64_t *shape)
{
    vn_tensor *r = vn__sum_to(g, ndim, shape);
    CHECK_PTR(r);
    assert_int_equal(vn_tensor_ndim(r), ndim);
    for (int d = 0; d < ndim; d++) assert_int_equal(vn_tensor_shape(r)[d], shape[d]);
    int gnd = vn_tensor_ndim(g);
    const int64_t *gs = vn_tensor_shape(g);
    int64_t n = vn__numel(ndim, shape), strides[VN_MAX_DIMS];
    vn__contig_strides(ndim, shape, strides);
    double *want = calloc((size_t)(n ? n : 1), sizeof(double)), *gv = vals(g), *got = vals(r);
    for (int64_t f = 0; f < vn_tensor_numel(g); f++) {
        int64_t rest = f, off = 0;
        for (int d = gnd - 1; d >= 0; d--) {
            int64_t i = rest % gs[d];
            rest /= gs[d];
            int td = d - (gnd - ndim);
            if (td >= 0 && shape[td] != 1) off += i * strides[td];
        }
        want[off] += gv[f];
    }
    for (int64_t i = 0; i < n; i++) assert_true(fabs(got[i] - want[i]) < 1e-5);
    free(want);
    free(gv);
    free(got);
    vn_tensor_release(r);
}

static void test_sum_to(void **state)
{
    const int64_t s[] = {2, 3, 4};
    vn_tensor *g = trand(3, s, -1, 1, 6);
    const int64_t t1[] = {4}, t2[] = {3, 1}, t3[] = {1, 3, 1}, t4[] = {2, 1, 4}, t5[] = {1}, t6[] = {2, 3, 4},
                  t7[] = {1, 1, 1, 1}, t8[] = {1, 2, 3, 4};
    check_sum_to(g, 1, t1);  /* leading dims */
    check_sum_to(g, 2, t2);  /* summed, kept, summed */
    check_sum_to(g, 3, t3);
    check_sum_to(g, 3, t4);  /* a middle dim */
    check_sum_to(g, 1, t5);  /* everything */
    check_sum_to(g, 0, NULL);
    check_sum_to(g, 4, t7);  /* extra leading 1s in the target */
    check_sum_to(g, 4, t8);
    /* summed, kept, summed, kept, summed: two kept groups meet after a pass */
    const int64_t s5[] = {2, 3, 4, 5, 6}, t10[] = {3, 1, 5, 1};
    vn_tensor *g5 = trand(5, s5, -1, 1, 8);
    check_sum_to(g5, 4, t10);
    vn_tensor_release(g5);
    vn_tensor *same = vn__sum_to(g, 3, t6);
    assert_ptr_equal(same, g); /* nothing to do: g itself */
    vn_tensor_release(same);
    /* a transposed gradient */
    vn_tensor *gt = vn_transpose(g, 0, 2); /* (4, 3, 2) */
    const int64_t t9[] = {4, 1, 1};
    check_sum_to(gt, 3, t9);
    /* the bias-gradient case, big enough to thread */
    const int64_t sb[] = {256, 1024}, tb[] = {1024};
    vn_tensor *gb = trand(2, sb, -1, 1, 7);
    check_sum_to(gb, 1, tb);
    /* shapes that are not a broadcast of each other */
    const int64_t bad[] = {5};
    assert_null(vn__sum_to(g, 1, bad));
    assert_non_null(strstr(vn_last_error(), "(2, 3, 4)"));
    assert_non_null(strstr(vn_last_error(), "(5,)"));
    vn_tensor *all[] = {g, gt, gb};
    release_all(all, 3);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dims_all_dtypes), cmocka_unit_test(test_all),
        cmocka_unit_test(test_empty),           cmocka_unit_test(test_noncontiguous),
        cmocka_unit_test(test_large),           cmocka_unit_test(test_errors),
        cmocka_unit_test(test_grad),            cmocka_unit_test(test_grad_ties),
        cmocka_unit_test(test_grad_shared),     cmocka_unit_test(test_sum_to),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
