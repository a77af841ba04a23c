/* softmax, log_softmax and the losses: values against double-precision
 * references and hand-computed numbers, stability for huge logits,
 * gradients by finite differences, and the errors for bad targets. */
#include "gradcheck.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double at(const vn_tensor *t, const int64_t *index)
{
    double v;
    CHECK_OK(vn_tensor_get(t, index, &v));
    return v;
}

/* The value of a one-element tensor; releases it. */
static double take_item(vn_tensor *t)
{
    double v;
    CHECK_PTR(t);
    CHECK_OK(vn_tensor_item(t, &v));
    vn_tensor_release(t);
    return v;
}

static void expect_error(vn_tensor *r, const char *const *needles)
{
    assert_null(r);
    const char *msg = vn_last_error();
    for (; *needles; needles++)
        if (!strstr(msg, *needles)) fail_msg("error message \"%s\" lacks \"%s\"", msg, *needles);
}

static void release_all(vn_tensor **ts, size_t n)
{
    for (size_t i = 0; i < n; i++) vn_tensor_release(ts[i]);
}
#define RELEASE(...) release_all((vn_tensor *[]){__VA_ARGS__}, \
                                 sizeof((vn_tensor *[]){__VA_ARGS__}) / sizeof(vn_tensor *))

/* Checks y = (log_)softmax(x) along `dim` of a 3-D x against a double
 * reference computed element by element. */
static void check_softmax3(const vn_tensor *x, const vn_tensor *y, int dim, bool logs)
{
    const int64_t *s = vn_tensor_shape(x);
    int64_t idx[3], j[3];
    for (idx[0] = 0; idx[0] < s[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < s[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < s[2]; idx[2]++) {
                memcpy(j, idx, sizeof j);
                double sum = 0;
                for (j[dim] = 0; j[dim] < s[dim]; j[dim]++) sum += exp(at(x, j));
                double want = logs ? at(x, idx) - log(sum) : exp(at(x, idx)) / sum;
                double got = at(y, idx);
                if (fabs(got - want) > 1e-5 * (1 + fabs(want)))
                    fail_msg("%s dim %d: got %g, want %g", logs ? "log_softmax" : "softmax", dim, got,
                             want);
            }
}

static void test_softmax_values(void **state)
{
    const int64_t s[] = {2, 3, 4};
    vn_tensor *x = trand(3, s, -3, 3, 1);
    for (int dim = 0; dim < 3; dim++)
        for (int logs = 0; logs < 2; logs++) {
            vn_tensor *y = logs ? vn_log_softmax(x, dim) : vn_softmax(x, dim);
            CHECK_PTR(y);
            check_softmax3(x, y, dim, logs);
            vn_tensor_release(y);
        }
    /* negative dims count from the end; a non-contiguous input */
    vn_tensor *a = vn_softmax(x, -1), *b = vn_softmax(x, 2);
    assert_true(max_rel_diff(a, b) == 0);
    vn_tensor *xt = vn_transpose(x, 0, 2), *yt = vn_softmax(xt, 0), *back = vn_transpose(yt, 0, 2);
    assert_true(max_rel_diff(back, b) < 1e-6);
    expect_error(vn_softmax(x, 3), (const char *[]){"softmax", NULL});
    vn_tensor *i = vn_zeros(VN_I32, 1, s);
    expect_error(vn_log_softmax(i, 0), (const char *[]){"log_softmax", "i32", NULL});
    RELEASE(x, a, b, xt, yt, back, i);
}

/* Logits like 1000 would overflow exp() without the max shift. */
static void test_softmax_stable(void **state)
{
    const int64_t s[] = {2, 3};
    vn_tensor *x = tf32(2, s, (float[]){1000, 1001, 1002, -1000, -1001, -1002});
    vn_tensor *p = vn_softmax(x, 1), *lp = vn_log_softmax(x, 1);
    CHECK_PTR(p);
    CHECK_PTR(lp);
    /* softmax(0, 1, 2) = e^k / (1 + e + e²) */
    const double sm[3] = {0.09003057317038046, 0.24472847105479764, 0.6652409557748219};
    const double lsm[3] = {-2.4076059644443806, -1.4076059644443806, -0.40760596444438063};
    for (int k = 0; k < 3; k++) {
        int64_t i0[2] = {0, k}, i1[2] = {1, 2 - k};
        assert_true(fabs(at(p, i0) - sm[k]) < 1e-6);
        assert_true(fabs(at(p, i1) - sm[k]) < 1e-6);
        assert_true(fabs(at(lp, i0) - lsm[k]) < 1e-5);
        assert_true(fabs(at(lp, i1) - lsm[k]) < 1e-5);
    }
    vn_tensor *t = vn_from_data(VN_I64, 1, (int64_t[]){2}, (int64_t[]){2, 2});
    double ce = take_item(vn_cross_entropy(x, t, VN_REDUCE_SUM));
    assert_true(fabs(ce - (-lsm[2] - lsm[0])) < 1e-4);
    RELEASE(x, p, lp, t);
}

/* logits [[1 2 3] [1 1 1]], targets [2 0]:
 *   row 0: log(e + e² + e³) − 3 = log(1 + e⁻¹ + e⁻²) = 0.40760596444438
 *   row 1: log 3 = 1.09861228866811 */
static void test_cross_entropy_values(void **state)
{
    const int64_t s[] = {2, 3};
    vn_tensor *x = tf32(2, s, (float[]){1, 2, 3, 1, 1, 1});
    vn_tensor *t32 = vn_from_data(VN_I32, 1, (int64_t[]){2}, (int32_t[]){2, 0});
    vn_tensor *t64 = vn_from_data(VN_I64, 1, (int64_t[]){2}, (int64_t[]){2, 0});
    const double l0 = 0.40760596444438, l1 = 1.09861228866811;
    vn_tensor *ts[2] = {t32, t64};
    for (int k = 0; k < 2; k++) {
        vn_tensor *m = vn_cross_entropy(x, ts[k], VN_REDUCE_MEAN);
        vn_tensor *no = vn_cross_entropy(x, ts[k], VN_REDUCE_NONE);
        CHECK_PTR(m);
        assert_int_equal(vn_tensor_ndim(m), 0);
        assert_true(fabs(take_item(m) - (l0 + l1) / 2) < 1e-6);
        assert_true(fabs(take_item(vn_cross_entropy(x, ts[k], VN_REDUCE_SUM)) - (l0 + l1)) < 1e-6);
        CHECK_PTR(no);
        assert_int_equal(vn_tensor_ndim(no), 1);
        assert_int_equal(vn_tensor_shape(no)[0], 2);
        assert_true(fabs(at(no, (int64_t[]){0}) - l0) < 1e-6);
        assert_true(fabs(at(no, (int64_t[]){1}) - l1) < 1e-6);
        vn_tensor_release(no);
    }
    /* equals nll_loss(log_softmax(x)) on a random case, also for
     * non-contiguous logits */
    vn_tensor *r0 = trand(2, (int64_t[]){7, 5}, -4, 4, 3), *r = vn_transpose(r0, 0, 1);
    vn_tensor *tg = vn_from_data(VN_I32, 1, (int64_t[]){5}, (int32_t[]){0, 6, 3, 3, 1});
    vn_tensor *ce = vn_cross_entropy(r, tg, VN_REDUCE_NONE);
    vn_tensor *lsm = vn_log_softmax(r, 1), *nll = vn_nll_loss(lsm, tg, VN_REDUCE_NONE);
    CHECK_PTR(ce);
    CHECK_PTR(nll);
    assert_true(max_rel_diff(ce, nll) < 1e-6);
    RELEASE(x, t32, t64, r0, r, tg, ce, lsm, nll);
}

static void test_nll_mse_values(void **state)
{
    vn_tensor *lp = tf32(2, (int64_t[]){2, 2}, (float[]){-1, -2, -3, -4});
    vn_tensor *t = vn_from_data(VN_I64, 1, (int64_t[]){2}, (int64_t[]){1, 0});
    assert_true(take_item(vn_nll_loss(lp, t, VN_REDUCE_MEAN)) == 2.5);
    assert_true(take_item(vn_nll_loss(lp, t, VN_REDUCE_SUM)) == 5);
    vn_tensor *a = tf32(1, (int64_t[]){3}, (float[]){1, 2, 3});
    vn_tensor *b = tf32(1, (int64_t[]){3}, (float[]){1, 0, 0});
    assert_true(take_item(vn_mse_loss(a, b, VN_REDUCE_SUM)) == 13);
    assert_true(fabs(take_item(vn_mse_loss(a, b, VN_REDUCE_MEAN)) - 13.0 / 3) < 1e-6);
    vn_tensor *no = vn_mse_loss(a, b, VN_REDUCE_NONE);
    CHECK_PTR(no);
    assert_true(at(no, (int64_t[]){1}) == 4 && at(no, (int64_t[]){2}) == 9);
    vn_tensor *c = tf32(2, (int64_t[]){3, 1}, (float[]){1, 2, 3});
    expect_error(vn_mse_loss(a, c, VN_REDUCE_MEAN), (const char *[]){"mse_loss", "(3,)", "(3, 1)", NULL});
    RELEASE(lp, t, a, b, no, c);
}

static void test_target_errors(void **state)
{
    vn_tensor *x = trand(2, (int64_t[]){4, 3}, -1, 1, 5);
    vn_tensor *big = vn_from_data(VN_I64, 1, (int64_t[]){4}, (int64_t[]){0, 2, 1, 3});
    expect_error(vn_cross_entropy(x, big, VN_REDUCE_MEAN),
                 (const char *[]){"cross_entropy", "target[3]", "3", "3 classes", NULL});
    vn_tensor *neg = vn_from_data(VN_I32, 1, (int64_t[]){4}, (int32_t[]){0, -1, 1, 2});
    expect_error(vn_cross_entropy(x, neg, VN_REDUCE_SUM), (const char *[]){"target[1]", "-1", NULL});
    expect_error(vn_nll_loss(x, neg, VN_REDUCE_SUM), (const char *[]){"nll_loss", "target[1]", NULL});
    vn_tensor *short_ = vn_from_data(VN_I64, 1, (int64_t[]){3}, (int64_t[]){0, 1, 2});
    expect_error(vn_cross_entropy(x, short_, VN_REDUCE_MEAN),
                 (const char *[]){"(4, 3)", "(3,)", NULL});
    vn_tensor *ft = vn_zeros(VN_F32, 1, (int64_t[]){4});
    expect_error(vn_cross_entropy(x, ft, VN_REDUCE_MEAN), (const char *[]){"i32 or i64", "f32", NULL});
    vn_tensor *x1 = trand(1, (int64_t[]){3}, -1, 1, 6);
    expect_error(vn_cross_entropy(x1, big, VN_REDUCE_MEAN), (const char *[]){"2-D", NULL});
    RELEASE(x, big, neg, short_, ft, x1);
}

/* ---- gradients ------------------------------------------------------------ */

typedef struct { int dim; vn_reduction red; const vn_tensor *target; } ctx_t;

static vn_tensor *f_softmax(vn_tensor **in, void *c) { return vn_softmax(in[0], ((ctx_t *)c)->dim); }
static vn_tensor *f_log_softmax(vn_tensor **in, void *c) { return vn_log_softmax(in[0], ((ctx_t *)c)->dim); }
static vn_tensor *f_ce(vn_tensor **in, void *c)
{
    ctx_t *k = c;
    return vn_cross_entropy(in[0], k->target, k->red);
}
static vn_tensor *f_nll(vn_tensor **in, void *c)
{
    ctx_t *k = c;
    return vn_nll_loss(in[0], k->target, k->red);
}
static vn_tensor *f_mse(vn_tensor **in, void *c) { return vn_mse_loss(in[0], in[1], ((ctx_t *)c)->red); }
static vn_tensor *f_mse_twice(vn_tensor **in, void *c) { return vn_mse_loss(in[0], in[0], ((ctx_t *)c)->red); }

static vn_tensor *param(int ndim, const int64_t *shape, double lo, double hi, unsigned seed)
{
    vn_tensor *t = trand(ndim, shape, lo, hi, seed);
    CHECK_OK(vn_tensor_set_requires_grad(t, true));
    return t;
}

static void test_softmax_grad(void **state)
{
    vn_tensor *x = param(3, (int64_t[]){2, 3, 4}, -2, 2, 11);
    for (int dim = -1; dim < 3; dim++) {
        ctx_t c = {.dim = dim};
        gradcheck(f_softmax, &x, 1, &c, 1e-3, 1e-2);
        gradcheck(f_log_softmax, &x, 1, &c, 1e-3, 1e-2);
    }
    vn_tensor_release(x);
}

static void test_loss_grads(void **state)
{
    vn_tensor *x = param(2, (int64_t[]){5, 4}, -2, 2, 12);
    vn_tensor *t32 = vn_from_data(VN_I32, 1, (int64_t[]){5}, (int32_t[]){3, 0, 1, 3, 2});
    vn_tensor *t64 = vn_from_data(VN_I64, 1, (int64_t[]){5}, (int64_t[]){1, 1, 0, 2, 3});
    const vn_reduction reds[3] = {VN_REDUCE_MEAN, VN_REDUCE_SUM, VN_REDUCE_NONE};
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 2; k++) {
            ctx_t c = {.red = reds[r], .target = k ? t64 : t32};
            gradcheck(f_ce, &x, 1, &c, 1e-3, 1e-2);
            gradcheck(f_nll, &x, 1, &c, 1e-3, 1e-2);
        }
    vn_tensor *a = param(2, (int64_t[]){3, 4}, -1, 1, 13), *b = param(2, (int64_t[]){3, 4}, -1, 1, 14);
    vn_tensor *ab[2] = {a, b};
    for (int r = 0; r < 3; r++) {
        ctx_t c = {.red = reds[r]};
        gradcheck(f_mse, ab, 2, &c, 1e-3, 1e-2);
        gradcheck(f_mse_twice, ab, 1, &c, 1e-3, 1e-2); /* (a − a)²: gradient 0 */
    }
    RELEASE(x, t32, t64, a, b);
}

/* The cross-entropy gradient is (softmax − onehot)/N for MEAN. */
static void test_cross_entropy_grad_formula(void **state)
{
    vn_tensor *x = tf32(2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 1, 1, 1});
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    vn_tensor *t = vn_from_data(VN_I64, 1, (int64_t[]){2}, (int64_t[]){2, 0});
    vn_tensor *loss = vn_cross_entropy(x, t, VN_REDUCE_MEAN);
    CHECK_PTR(loss);
    CHECK_OK(vn_backward(loss, NULL));
    const double s0[3] = {0.09003057317038046, 0.24472847105479764, 0.6652409557748219};
    const double want[6] = {s0[0] / 2, s0[1] / 2, (s0[2] - 1) / 2, (1.0 / 3 - 1) / 2, 1.0 / 6, 1.0 / 6};
    float got[6];
    CHECK_OK(vn_tensor_copy_out(vn_tensor_grad(x), got, sizeof got));
    for (int i = 0; i < 6; i++)
        if (fabs(got[i] - want[i]) > 1e-6) fail_msg("grad[%d] = %g, want %g", i, got[i], want[i]);
    RELEASE(x, t, loss);
}

/* Rows in blocks, columns beyond one chunk of exps, rows over the threads:
 * 301 × 300 random logits (a last block of 5 rows; the target of each row
 * its own), every row's loss and the gradient of the mean against
 * log Σ exp and softmax − onehot in double; rows 7 and 300 have their max
 * at a column past the first chunk. */
static void test_cross_entropy_large(void **state)
{
    (void)state;
    const int64_t N = 301, C = 300;
    vn_tensor *x = param(2, (int64_t[]){N, C}, -6, 6, 40);
    int64_t *tv = malloc(sizeof(int64_t) * (size_t)N);
    assert_non_null(tv);
    for (int64_t n = 0; n < N; n++) tv[n] = (n * 37) % C;
    float *px = vn_tensor_data(x);
    px[7 * C + 290] = 9;
    px[300 * C + 299] = 9;
    vn_tensor *t = vn_from_data(VN_I64, 1, &N, tv);
    vn_tensor *none = vn_cross_entropy(x, t, VN_REDUCE_NONE);
    vn_tensor *mean = vn_cross_entropy(x, t, VN_REDUCE_MEAN);
    CHECK_PTR(none);
    CHECK_PTR(mean);
    CHECK_OK(vn_backward(mean, NULL));
    const float *pn = vn_tensor_data(none), *pg = vn_tensor_data(vn_tensor_grad(x));
    for (int64_t n = 0; n < N; n++) {
        const float *xr = px + n * C;
        double mx = -INFINITY, s = 0;
        for (int64_t c = 0; c < C; c++) mx = xr[c] > mx ? xr[c] : mx;
        for (int64_t c = 0; c < C; c++) s += exp(xr[c] - mx);
        double lse = mx + log(s), want = lse - xr[tv[n]];
        if (fabs(pn[n] - want) > 2e-6 * (1 + fabs(want)))
            fail_msg("loss[%lld] = %.9g, expected %.9g", (long long)n, (double)pn[n], want);
        for (int64_t c = 0; c < C; c++) {
            double g = (exp(xr[c] - lse) - (c == tv[n])) / (double)N;
            if (fabs(pg[n * C + c] - g) > 1e-8 + 2e-6 * fabs(g))
                fail_msg("grad[%lld, %lld] = %.9g, expected %.9g", (long long)n, (long long)c,
                         (double)pg[n * C + c], g);
        }
    }
    free(tv);
    RELEASE(x, t, none, mean);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax_values),     cmocka_unit_test(test_softmax_stable),
        cmocka_unit_test(test_cross_entropy_values), cmocka_unit_test(test_nll_mse_values),
        cmocka_unit_test(test_target_errors),      cmocka_unit_test(test_softmax_grad),
        cmocka_unit_test(test_loss_grads),         cmocka_unit_test(test_cross_entropy_grad_formula),
        cmocka_unit_test(test_cross_entropy_large),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
