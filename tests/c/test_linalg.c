/* matmul and linear: values against a naive triple loop for 2-D, 1-D,
 * batched and broadcast shapes and for operands in every memory layout
 * (transposed views, strided slices, broadcast views); gradients by finite
 * differences; shape errors. */
#include "gradcheck.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* a[index] as a double, failing the test on error. */
static double at(const vn_tensor *t, const int64_t *index)
{
    double v;
    CHECK_OK(vn_tensor_get(t, index, &v));
    return v;
}

/* Checks c = a·b against the definition, summed in double: batch dims
 * broadcast, a 1-D a is a row vector and a 1-D b a column vector, and their
 * dims are dropped from c's shape. */
static void check_matmul(const vn_tensor *a, const vn_tensor *b, const vn_tensor *c)
{
    int na = vn_tensor_ndim(a), nb = vn_tensor_ndim(b);
    const int64_t *sa = vn_tensor_shape(a), *sb = vn_tensor_shape(b);
    int64_t n = na == 1 ? 1 : sa[na - 2], k = sa[na - 1], m = nb == 1 ? 1 : sb[nb - 1];
    int ba = na > 2 ? na - 2 : 0, bb = nb > 2 ? nb - 2 : 0, nbd = ba > bb ? ba : bb;
    int64_t bshape[8], want[8];
    int nw = 0;
    for (int d = 0; d < nbd; d++) {
        int64_t x = d - (nbd - ba) >= 0 ? sa[d - (nbd - ba)] : 1;
        int64_t y = d - (nbd - bb) >= 0 ? sb[d - (nbd - bb)] : 1;
        bshape[d] = x == 1 ? y : x;
        want[nw++] = bshape[d];
    }
    if (na > 1) want[nw++] = n;
    if (nb > 1) want[nw++] = m;
    assert_int_equal(vn_tensor_ndim(c), nw);
    for (int d = 0; d < nw; d++) assert_int_equal(vn_tensor_shape(c)[d], want[d]);

    int64_t nbatch = 1, bi[8] = {0};
    for (int d = 0; d < nbd; d++) nbatch *= bshape[d];
    for (int64_t t = 0; t < nbatch; t++) {
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < m; j++) {
                int64_t ia[8], ib[8], ic[8];
                for (int d = 0; d < ba; d++) ia[d] = sa[d] == 1 ? 0 : bi[d + nbd - ba];
                for (int d = 0; d < bb; d++) ib[d] = sb[d] == 1 ? 0 : bi[d + nbd - bb];
                int nc = 0;
                for (int d = 0; d < nbd; d++) ic[nc++] = bi[d];
                if (na > 1) ic[nc++] = i;
                if (nb > 1) ic[nc++] = j;
                double sum = 0;
                for (int64_t p = 0; p < k; p++) {
                    if (na > 1) ia[na - 2] = i;
                    ia[na - 1] = p;
                    ib[nb == 1 ? 0 : nb - 2] = p;
                    if (nb > 1) ib[nb - 1] = j;
                    sum += at(a, ia) * at(b, ib);
                }
                double got = at(c, ic);
                if (fabs(got - sum) > 1e-4 * (1 + fabs(sum)))
                    fail_msg("matmul element mismatch: got %g, want %g", got, sum);
            }
        for (int d = nbd - 1; d >= 0; d--) { /* next batch index */
            if (++bi[d] < bshape[d]) break;
            bi[d] = 0;
        }
    }
}

static void matmul_case(const vn_tensor *a, const vn_tensor *b)
{
    vn_tensor *c = vn_matmul(a, b);
    CHECK_PTR(c);
    check_matmul(a, b, c);
    vn_tensor_release(c);
}

static vn_tensor *rnd(int ndim, const int64_t *shape, unsigned seed)
{
    return trand(ndim, shape, -1, 1, seed);
}

static void test_matmul_2d_and_1d(void **state)
{
    struct { int na, nb; int64_t sa[2], sb[2]; } cases[] = {
        {2, 2, {3, 4}, {4, 5}}, {2, 2, {1, 1}, {1, 1}}, {2, 2, {1, 7}, {7, 1}},
        {2, 2, {33, 65}, {65, 17}}, /* past any small-matrix special case in BLAS */
        {1, 2, {4}, {4, 5}},     {2, 1, {3, 4}, {4}}, {1, 1, {6}, {6}},
        {2, 2, {0, 3}, {3, 4}},  {2, 2, {2, 0}, {0, 3}}, /* empty: zeros */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vn_tensor *a = rnd(cases[i].na, cases[i].sa, 1 + i), *b = rnd(cases[i].nb, cases[i].sb, 50 + i);
        matmul_case(a, b);
        vn_tensor_release(a);
        vn_tensor_release(b);
    }
    /* 1-D · 1-D is a dot product: a 0-d tensor */
    const int64_t s3[] = {3};
    vn_tensor *u = tf32(1, s3, (float[]){1, 2, 3}), *v = tf32(1, s3, (float[]){4, -5, 6});
    vn_tensor *d = vn_matmul(u, v);
    CHECK_PTR(d);
    double val;
    assert_int_equal(vn_tensor_ndim(d), 0);
    CHECK_OK(vn_tensor_item(d, &val));
    assert_true(val == 12);
    vn_tensor_release(u);
    vn_tensor_release(v);
    vn_tensor_release(d);
}

/* Operands in layouts BLAS reads in place (transposed, row-strided) and
 * ones it cannot (broadcast stride 0, column-strided) give the same values. */
static void test_matmul_layouts(void **state)
{
    const int64_t s43[] = {4, 3}, s54[] = {5, 4}, s38[] = {3, 8}, s14[] = {1, 4}, s34[] = {3, 4};
    const int64_t s45[] = {4, 5};
    vn_tensor *a0 = rnd(2, s43, 3), *b0 = rnd(2, s54, 4), *w = rnd(2, s38, 5), *row = rnd(2, s14, 6);
    vn_tensor *at_ = vn_transpose(a0, 0, 1);          /* (3, 4), strides (1, 3) */
    vn_tensor *bt = vn_transpose(b0, 0, 1);           /* (4, 5), strides (1, 4) */
    vn_tensor *an = vn_narrow(w, 1, 2, 4);            /* (3, 4), strides (8, 1) */
    vn_tensor *ae = vn_expand(row, 2, s34);           /* (3, 4), strides (0, 1) */
    vn_tensor *big = rnd(2, (int64_t[]){4, 10}, 7);
    vn_tensor *bcols = NULL;
    {   /* (4, 5) with column stride 2: neither row- nor column-major */
        vn_tensor *r = vn_reshape(big, 3, (int64_t[]){4, 5, 2});
        bcols = vn_select(r, 2, 1);
        vn_tensor_release(r);
    }
    CHECK_PTR(at_); CHECK_PTR(bt); CHECK_PTR(an); CHECK_PTR(ae); CHECK_PTR(bcols);
    vn_tensor *b = rnd(2, s45, 8);
    const vn_tensor *lefts[] = {at_, an, ae};
    const vn_tensor *rights[] = {b, bt, bcols};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) matmul_case(lefts[i], rights[j]);
    /* a transposed view times itself (both operands the same storage) */
    vn_tensor *sq = rnd(2, (int64_t[]){4, 4}, 9), *sqt = vn_transpose(sq, 0, 1);
    matmul_case(sqt, sq);
    matmul_case(sqt, sqt);
    vn_tensor *ts[] = {a0, b0, w, row, at_, bt, an, ae, big, bcols, b, sq, sqt};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) vn_tensor_release(ts[i]);
}

/* Products big enough for engine/blas.c to split C over the threads (m·n·k
 * above 262 144, 16+ rows or columns a block): by rows (m > n) and by
 * columns, each operand plain and transposed, against the definition. */
static void test_matmul_split(void **state)
{
    (void)state;
    for (int by_rows = 0; by_rows < 2; by_rows++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int64_t m = by_rows ? 90 : 70, n = by_rows ? 70 : 90, k = 65;
                int64_t sa[2] = {ta ? k : m, ta ? m : k}, sb[2] = {tb ? n : k, tb ? k : n};
                vn_tensor *a0 = rnd(2, sa, 30 + ta), *b0 = rnd(2, sb, 32 + tb);
                vn_tensor *a = ta ? vn_transpose(a0, 0, 1) : vn_tensor_retain(a0);
                vn_tensor *b = tb ? vn_transpose(b0, 0, 1) : vn_tensor_retain(b0);
                CHECK_PTR(a);
                CHECK_PTR(b);
                matmul_case(a, b);
                vn_tensor *ts[] = {a0, b0, a, b};
                for (int i = 0; i < 4; i++) vn_tensor_release(ts[i]);
            }
}

/* One row of C (engine/blas.c's sgemv path and its AVX-512 loop for a
 * plain row, what decoding at batch 1 multiplies): on the left a (1, k) row, or a row of a column-major matrix
 * (strides (1, 3): the transposed operand, its elements 3 apart), each
 * right operand plain and transposed, small and large enough to be split
 * over the threads by columns, against the definition. */
static void test_matmul_one_row(void **state)
{
    (void)state;
    for (int big = 0; big < 2; big++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                /* 13 × 21: a block of 8 rows and 5 more, 16 columns and 5 more */
                int64_t n = big ? 5000 : 13, k = big ? 64 : 21;
                int64_t sa[2] = {ta ? k : 1, ta ? 3 : k}, sb[2] = {tb ? n : k, tb ? k : n};
                vn_tensor *a0 = rnd(2, sa, 40 + ta), *b0 = rnd(2, sb, 42 + tb);
                vn_tensor *at = ta ? vn_transpose(a0, 0, 1) : NULL;
                vn_tensor *a = ta ? (at ? vn_narrow(at, 0, 1, 1) : NULL) : vn_tensor_retain(a0);
                vn_tensor_release(at);
                vn_tensor *b = tb ? vn_transpose(b0, 0, 1) : vn_tensor_retain(b0);
                CHECK_PTR(a);
                CHECK_PTR(b);
                matmul_case(a, b);
                vn_tensor *ts[] = {a0, b0, a, b};
                for (int i = 0; i < 4; i++) vn_tensor_release(ts[i]);
            }
}

/* The AVX-512 one-row loop (a Linear's y = W·x at batch 1) at widths below,
 * at and past its 16 columns and 8 rows, with W a column slice of a wider
 * matrix (row stride k + 3) whose cut-off columns are NaN (never read), and
 * NaN, ±inf and 0·inf among the values: each output against the plain
 * formula summed in double, NaN where it is NaN, the same inf where it is
 * inf, else close. */
static void test_one_row_widths_and_specials(void **state)
{
    (void)state;
    const int64_t ks[] = {1, 15, 16, 17, 48}, ns[] = {1, 7, 8, 9, 17};
    for (int ik = 0; ik < 5; ik++)
        for (int in = 0; in < 5; in++)
            for (int special = 0; special < 2; special++) {
                int64_t k = ks[ik], n = ns[in];
                vn_tensor *wide = rnd(2, (int64_t[]){n, k + 3}, 60 + (unsigned)(ik * 5 + in));
                vn_tensor *x = rnd(2, (int64_t[]){1, k}, 90 + (unsigned)ik);
                float *wd = vn_tensor_data(wide), *xd = vn_tensor_data(x);
                for (int64_t i = 0; i < n; i++) wd[i * (k + 3)] = wd[i * (k + 3) + k + 1] = wd[i * (k + 3) + k + 2] = NAN;
                if (special) { /* row i: NaN, +inf, -inf, +inf and -inf, inf · 0 by turns */
                    xd[k - 1] = 0;
                    for (int64_t i = 0; i < n; i++) {
                        float *row = wd + i * (k + 3) + 1;
                        int kind = (int)(i % 5);
                        if (kind == 0) row[k / 2] = NAN;
                        if (kind == 1) row[0] = xd[0] > 0 ? INFINITY : -INFINITY;
                        if (kind == 2) row[k - 1 - (k > 1)] = -INFINITY * (xd[k - 1 - (k > 1)] > 0 ? 1 : -1);
                        if (kind == 3 && k > 2) row[0] = INFINITY * (xd[0] > 0 ? 1 : -1),
                                                row[1] = -INFINITY * (xd[1] > 0 ? 1 : -1);
                        if (kind == 4) row[k - 1] = INFINITY; /* against x = 0 */
                    }
                }
                vn_tensor *w = vn_narrow(wide, 1, 1, k), *wt = w ? vn_transpose(w, 0, 1) : NULL;
                vn_tensor *y = wt ? vn_matmul(x, wt) : NULL;
                CHECK_PTR(y);
                for (int64_t i = 0; i < n; i++) {
                    double want = 0;
                    for (int64_t j = 0; j < k; j++) want += (double)wd[i * (k + 3) + 1 + j] * xd[j];
                    double got = ((float *)vn_tensor_data(y))[i];
                    bool same = isnan(want) ? isnan(got) : isinf(want) ? got == want
                                                         : fabs(got - want) <= 1e-5 * (1 + fabs(want));
                    if (!same)
                        fail_msg("k %lld n %lld%s: y[%lld] = %g, expected %g", (long long)k, (long long)n,
                                 special ? " (specials)" : "", (long long)i, got, want);
                }
                vn_tensor *ts[] = {wide, x, w, wt, y};
                for (int t = 0; t < 5; t++) vn_tensor_release(ts[t]);
            }
}

static void test_matmul_batched(void **state)
{
    struct { int na, nb; int64_t sa[4], sb[4]; } cases[] = {
        {3, 2, {2, 3, 4}, {4, 5}},        /* one weight for the batch (merged gemm) */
        {2, 3, {3, 4}, {2, 4, 5}},        /* batch only on the right */
        {3, 3, {2, 3, 4}, {2, 4, 5}},
        {4, 3, {2, 1, 3, 4}, {3, 4, 5}},  /* broadcast batch dims both ways */
        {3, 3, {1, 3, 4}, {2, 4, 5}},
        {4, 4, {3, 2, 3, 4}, {3, 1, 4, 5}}, /* b stretched inside its batch */
        {3, 4, {2, 3, 4}, {1, 1, 4, 5}},  /* size-1 leading batch dims on b */
        {1, 3, {4}, {2, 4, 5}},           /* vector on the left */
        {3, 1, {2, 3, 4}, {4}},           /* vector on the right */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vn_tensor *a = rnd(cases[i].na, cases[i].sa, 10 + i), *b = rnd(cases[i].nb, cases[i].sb, 90 + i);
        matmul_case(a, b);
        vn_tensor_release(a);
        vn_tensor_release(b);
    }
    /* batched with transposed matrices: (2, 4, 3) → (2, 3, 4) strides (12, 1, 3) */
    vn_tensor *a0 = rnd(3, (int64_t[]){2, 4, 3}, 20), *b0 = rnd(3, (int64_t[]){2, 5, 4}, 21);
    vn_tensor *a = vn_transpose(a0, 1, 2), *b = vn_transpose(b0, 1, 2);
    vn_tensor *w = rnd(2, (int64_t[]){4, 5}, 22);
    matmul_case(a, b);
    matmul_case(a, w); /* cannot merge the batch into rows: per-batch gemms */
    /* permuted batch: (3, 2, 4) seen as (2, 3, 4) with rows not mergeable */
    vn_tensor *p0 = rnd(3, (int64_t[]){3, 2, 4}, 23), *p = vn_transpose(p0, 0, 1);
    matmul_case(p, w);
    vn_tensor *ts[] = {a0, b0, a, b, w, p0, p};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) vn_tensor_release(ts[i]);
}

/* r must be NULL with a message containing every string of `needles`. */
static void expect_error(vn_tensor *r, const char *const *needles)
{
    assert_null(r);
    const char *msg = vn_last_error();
    for (; *needles; needles++)
        if (!strstr(msg, *needles)) fail_msg("error message \"%s\" lacks \"%s\"", msg, *needles);
}

static void test_matmul_errors(void **state)
{
    vn_tensor *a = rnd(2, (int64_t[]){2, 3}, 1), *b = rnd(2, (int64_t[]){4, 5}, 2);
    expect_error(vn_matmul(a, b),
                 (const char *[]){"matmul", "(2, 3)", "(4, 5)", "3", "4", NULL});
    vn_tensor *c = rnd(3, (int64_t[]){2, 3, 4}, 3), *d = rnd(3, (int64_t[]){3, 4, 5}, 4);
    expect_error(vn_matmul(c, d), (const char *[]){"(2, 3, 4)", "(3, 4, 5)", NULL});
    vn_tensor *i = vn_zeros(VN_I32, 2, (int64_t[]){3, 4});
    expect_error(vn_matmul(a, i), (const char *[]){"matmul", "i32", NULL});
    vn_tensor *s = vn_full(VN_F32, 0, NULL, 1);
    expect_error(vn_matmul(s, a), (const char *[]){"matmul", NULL});
    vn_tensor *ts[] = {a, b, c, d, i, s};
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) vn_tensor_release(ts[k]);
}

/* linear(x, w, b) against matmul(x, wᵀ) + b for several x shapes/layouts. */
static void check_linear(const vn_tensor *x, const vn_tensor *w, const vn_tensor *bias)
{
    vn_tensor *y = vn_linear(x, w, bias);
    CHECK_PTR(y);
    vn_tensor *wt = vn_transpose(w, 0, 1), *ref = vn_matmul(x, wt);
    CHECK_PTR(ref);
    if (bias) {
        vn_tensor *r2 = vn_add(ref, bias);
        vn_tensor_release(ref);
        ref = r2;
    }
    double e = max_rel_diff(y, ref);
    if (e > 1e-5) fail_msg("linear differs from matmul + bias by %g", e);
    vn_tensor_release(y);
    vn_tensor_release(wt);
    vn_tensor_release(ref);
}

static void test_linear_values(void **state)
{
    vn_tensor *w = rnd(2, (int64_t[]){4, 7}, 1), *bias = rnd(1, (int64_t[]){4}, 2);
    vn_tensor *x2 = rnd(2, (int64_t[]){5, 7}, 3), *x3 = rnd(3, (int64_t[]){2, 3, 7}, 4);
    vn_tensor *x1 = rnd(1, (int64_t[]){7}, 5), *x0 = rnd(2, (int64_t[]){0, 7}, 6);
    vn_tensor *xt0 = rnd(2, (int64_t[]){7, 5}, 7), *xt = vn_transpose(xt0, 0, 1);
    vn_tensor *wt0 = rnd(2, (int64_t[]){7, 4}, 8), *wt = vn_transpose(wt0, 0, 1);
    vn_tensor *xs0 = rnd(3, (int64_t[]){3, 2, 7}, 9), *xs = vn_transpose(xs0, 0, 1);
    const vn_tensor *xs_[] = {x2, x3, x1, x0, xt, xs};
    for (int i = 0; i < 6; i++) {
        check_linear(xs_[i], w, bias);
        check_linear(xs_[i], w, NULL);
        check_linear(xs_[i], wt, bias);
    }
    /* hand-computed: x = [1 2], w = [[1 0] [3 -1]], b = [0.5 -2] → [1.5, -1] */
    vn_tensor *x = tf32(2, (int64_t[]){1, 2}, (float[]){1, 2});
    vn_tensor *w2 = tf32(2, (int64_t[]){2, 2}, (float[]){1, 0, 3, -1});
    vn_tensor *b2 = tf32(1, (int64_t[]){2}, (float[]){0.5f, -2});
    vn_tensor *y = vn_linear(x, w2, b2);
    CHECK_PTR(y);
    float got[2];
    CHECK_OK(vn_tensor_copy_out(y, got, sizeof got));
    assert_true(got[0] == 1.5f && got[1] == -1.0f);
    vn_tensor *ts[] = {w, bias, x2, x3, x1, x0, xt0, xt, wt0, wt, xs0, xs, x, w2, b2, y};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) vn_tensor_release(ts[i]);
}

static void test_linear_errors(void **state)
{
    vn_tensor *x = rnd(2, (int64_t[]){128, 784}, 1), *w = rnd(2, (int64_t[]){16, 700}, 2);
    expect_error(vn_linear(x, w, NULL),
                 (const char *[]){"linear", "(128, 784)", "(16, 700)", "784", "700", NULL});
    vn_tensor *w2 = rnd(2, (int64_t[]){16, 784}, 3), *b = rnd(1, (int64_t[]){15}, 4);
    expect_error(vn_linear(x, w2, b), (const char *[]){"bias", "(15,)", "(16,)", NULL});
    vn_tensor *w1 = rnd(1, (int64_t[]){784}, 5);
    expect_error(vn_linear(x, w1, NULL), (const char *[]){"2-D", NULL});
    vn_tensor *ts[] = {x, w, w2, b, w1};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) vn_tensor_release(ts[i]);
}

/* ---- gradients ------------------------------------------------------------ */

static vn_tensor *f_matmul(vn_tensor **in, void *ctx) { return vn_matmul(in[0], in[1]); }
static vn_tensor *f_matmul_tt(vn_tensor **in, void *ctx)
{   /* both operands as transposed views: the Trans paths in backward */
    vn_tensor *a = vn_transpose(in[0], -1, -2), *b = vn_transpose(in[1], -1, -2);
    vn_tensor *c = vn_matmul(a, b);
    vn_tensor_release(a);
    vn_tensor_release(b);
    return c;
}
static vn_tensor *f_square(vn_tensor **in, void *ctx) { return vn_matmul(in[0], in[0]); }

static vn_tensor *param(int ndim, const int64_t *shape, unsigned seed)
{
    vn_tensor *t = rnd(ndim, shape, seed);
    CHECK_OK(vn_tensor_set_requires_grad(t, true));
    return t;
}

static void gc2(gc_fn f, int na, const int64_t *sa, int nb, const int64_t *sb)
{
    vn_tensor *in[2] = {param(na, sa, 31), param(nb, sb, 32)};
    gradcheck(f, in, 2, NULL, 1e-2, 1e-3);
    vn_tensor_release(in[0]);
    vn_tensor_release(in[1]);
}

static void test_matmul_grad(void **state)
{
    gc2(f_matmul, 2, (int64_t[]){3, 4}, 2, (int64_t[]){4, 5});
    gc2(f_matmul, 1, (int64_t[]){4}, 2, (int64_t[]){4, 5});
    gc2(f_matmul, 2, (int64_t[]){3, 4}, 1, (int64_t[]){4});
    gc2(f_matmul, 1, (int64_t[]){4}, 1, (int64_t[]){4});
    gc2(f_matmul, 3, (int64_t[]){2, 3, 4}, 2, (int64_t[]){4, 5});
    gc2(f_matmul, 3, (int64_t[]){2, 3, 4}, 1, (int64_t[]){4});
    gc2(f_matmul, 1, (int64_t[]){4}, 3, (int64_t[]){2, 4, 5});
    gc2(f_matmul, 2, (int64_t[]){3, 4}, 3, (int64_t[]){2, 4, 5});
    gc2(f_matmul, 4, (int64_t[]){2, 1, 3, 4}, 3, (int64_t[]){3, 4, 5});
    gc2(f_matmul_tt, 2, (int64_t[]){4, 3}, 2, (int64_t[]){5, 4});
    gc2(f_matmul_tt, 3, (int64_t[]){2, 4, 3}, 3, (int64_t[]){2, 5, 4});
    vn_tensor *x = param(2, (int64_t[]){4, 4}, 33);
    gradcheck(f_square, &x, 1, NULL, 1e-2, 1e-3); /* x used twice */
    vn_tensor_release(x);
}

static vn_tensor *f_linear(vn_tensor **in, void *ctx) { return vn_linear(in[0], in[1], in[2]); }
static vn_tensor *f_linear_nobias(vn_tensor **in, void *ctx) { return vn_linear(in[0], in[1], NULL); }
static vn_tensor *f_linear_wt(vn_tensor **in, void *ctx)
{   /* weight stored as (in, out) and passed as a transposed view */
    vn_tensor *w = vn_transpose(in[1], 0, 1);
    vn_tensor *y = vn_linear(in[0], w, in[2]);
    vn_tensor_release(w);
    return y;
}
static vn_tensor *f_linear_shared(vn_tensor **in, void *ctx)
{   /* the same weight in two layers: its gradient sums both uses */
    vn_tensor *h = vn_linear(in[0], in[1], in[2]);
    vn_tensor *t = vn_tanh(h);
    vn_tensor *y = vn_linear(t, in[1], NULL);
    vn_tensor_release(h);
    vn_tensor_release(t);
    return y;
}

static void test_linear_grad(void **state)
{
    vn_tensor *in[3] = {param(2, (int64_t[]){5, 4}, 41), param(2, (int64_t[]){3, 4}, 42),
                        param(1, (int64_t[]){3}, 43)};
    gradcheck(f_linear, in, 3, NULL, 1e-2, 1e-3);
    gradcheck(f_linear_nobias, in, 2, NULL, 1e-2, 1e-3);
    vn_tensor *x3 = param(3, (int64_t[]){2, 3, 4}, 44);
    vn_tensor *in3[3] = {x3, in[1], in[2]};
    gradcheck(f_linear, in3, 3, NULL, 1e-2, 1e-3);
    vn_tensor *wt = param(2, (int64_t[]){4, 3}, 45);
    vn_tensor *int_[3] = {in[0], wt, in[2]};
    gradcheck(f_linear_wt, int_, 3, NULL, 1e-2, 1e-3);
    /* x that needs no gradient: only w and b get one */
    vn_tensor *xc = rnd(2, (int64_t[]){5, 4}, 46);
    vn_tensor *inc[3] = {xc, in[1], in[2]};
    gradcheck(f_linear, inc, 3, NULL, 1e-2, 1e-3);
    assert_null(vn_tensor_grad(xc));
    vn_tensor *sq[3] = {param(2, (int64_t[]){5, 4}, 47), param(2, (int64_t[]){4, 4}, 48),
                        param(1, (int64_t[]){4}, 49)};
    gradcheck(f_linear_shared, sq, 3, NULL, 1e-2, 2e-3);
    vn_tensor *ts[] = {in[0], in[1], in[2], x3, wt, xc, sq[0], sq[1], sq[2]};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) vn_tensor_release(ts[i]);
}

/* The backward of linear equals the hand formulas dx = dy·w, dw = dyᵀ·x,
 * db = Σ_rows dy on a larger case (checked against matmul and sum). */
static void test_linear_backward_formulas(void **state)
{
    vn_tensor *x = param(2, (int64_t[]){37, 29}, 51), *w = param(2, (int64_t[]){23, 29}, 52);
    vn_tensor *b = param(1, (int64_t[]){23}, 53);
    vn_tensor *dy = rnd(2, (int64_t[]){37, 23}, 54);
    vn_tensor *y = vn_linear(x, w, b);
    CHECK_PTR(y);
    CHECK_OK(vn_backward(y, dy));
    bool was = vn_set_grad_enabled(false);
    vn_tensor *dyt = vn_transpose(dy, 0, 1);
    vn_tensor *dx = vn_matmul(dy, w), *dw = vn_matmul(dyt, x), *db = vn_sum(dy, 0, false);
    vn_set_grad_enabled(was);
    assert_true(max_rel_diff(vn_tensor_grad(x), dx) < 1e-5);
    assert_true(max_rel_diff(vn_tensor_grad(w), dw) < 1e-5);
    assert_true(max_rel_diff(vn_tensor_grad(b), db) < 1e-5);
    vn_tensor *ts[] = {x, w, b, dy, y, dyt, dx, dw, db};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) vn_tensor_release(ts[i]);
}

/* sum_all hands backward a broadcast gradient (stride 0): matmul and linear
 * must read it correctly. d/da Σ(a·b) = 1·bᵀ, d/dw Σ(x·wᵀ + b) = 1ᵀ·x. */
static void test_broadcast_gradient(void **state)
{
    vn_tensor *a = param(2, (int64_t[]){3, 4}, 61), *b = param(2, (int64_t[]){4, 5}, 62);
    vn_tensor *c = vn_matmul(a, b), *s = vn_sum_all(c);
    CHECK_PTR(s);
    CHECK_OK(vn_backward(s, NULL));
    for (int64_t i = 0; i < 3; i++)
        for (int64_t p = 0; p < 4; p++) {
            double want = 0;
            for (int64_t j = 0; j < 5; j++) want += at(b, (int64_t[]){p, j});
            assert_true(fabs(at(vn_tensor_grad(a), (int64_t[]){i, p}) - want) < 1e-5);
        }
    vn_tensor *x = param(2, (int64_t[]){6, 4}, 63), *w = param(2, (int64_t[]){3, 4}, 64);
    vn_tensor *bias = param(1, (int64_t[]){3}, 65);
    vn_tensor *y = vn_linear(x, w, bias), *ys = vn_sum_all(y);
    CHECK_PTR(ys);
    CHECK_OK(vn_backward(ys, NULL));
    for (int64_t o = 0; o < 3; o++) {
        assert_true(at(vn_tensor_grad(bias), (int64_t[]){o}) == 6);
        for (int64_t i = 0; i < 4; i++) {
            double want = 0;
            for (int64_t n = 0; n < 6; n++) want += at(x, (int64_t[]){n, i});
            assert_true(fabs(at(vn_tensor_grad(w), (int64_t[]){o, i}) - want) < 1e-5);
        }
    }
    vn_tensor *ts[] = {a, b, c, s, x, w, bias, y, ys};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) vn_tensor_release(ts[i]);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_2d_and_1d), cmocka_unit_test(test_matmul_layouts),
        cmocka_unit_test(test_matmul_batched),   cmocka_unit_test(test_matmul_errors),
        cmocka_unit_test(test_matmul_split),     cmocka_unit_test(test_matmul_one_row),
        cmocka_unit_test(test_one_row_widths_and_specials),
        cmocka_unit_test(test_linear_values),    cmocka_unit_test(test_linear_errors),
        cmocka_unit_test(test_matmul_grad),      cmocka_unit_test(test_linear_grad),
        cmocka_unit_test(test_linear_backward_formulas), cmocka_unit_test(test_broadcast_gradient),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
