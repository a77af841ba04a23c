/* conv2d, im2col, max/avg/adaptive pooling, batch_norm and flatten: values
 * against plain direct loops in double (odd sizes; stride, padding,
 * dilation and groups combined), gradients by finite differences, running
 * statistics, and the errors for bad geometry. */
#include "gradcheck.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_close(const vn_tensor *got, const double *want, int64_t n, double tol,
                        const char *what)
{
    assert_int_equal(vn_tensor_numel(got), n);
    float *g = gc_values(got);
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(g[i] - want[i]) <= tol * (1 + fabs(want[i]))))
            fail_msg("%s[%lld] = %.8g, want %.8g", what, (long long)i, g[i], want[i]);
    free(g);
}

static void check_shape(const vn_tensor *t, int ndim, const int64_t *shape)
{
    assert_int_equal(vn_tensor_ndim(t), ndim);
    for (int d = 0; d < ndim; d++) assert_int_equal(vn_tensor_shape(t)[d], shape[d]);
}

/* ---- conv2d --------------------------------------------------------------------- */

typedef struct {
    int64_t B, C, H, W, Cout, kh, kw, sh, sw, ph, pw, dh, dw, groups;
    bool bias;
} conv_case;

static const conv_case conv_cases[] = {
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {1, 4, 9, 8, 6, 3, 2, 2, 3, 1, 0, 2, 1, 2, true},   /* groups, stride, dilation */
    {2, 3, 5, 7, 3, 3, 3, 1, 1, 1, 1, 1, 1, 3, false},  /* depthwise */
    {1, 2, 6, 5, 3, 1, 1, 2, 2, 0, 0, 1, 1, 1, true},   /* 1×1, stride 2 */
    {1, 1, 4, 4, 2, 4, 4, 1, 1, 0, 0, 1, 1, 1, true},   /* kernel = image */
    {3, 6, 5, 5, 4, 2, 3, 1, 2, 1, 2, 2, 1, 2, true},   /* padding larger than half */
};

static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d)
{
    return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* The definition, in double. */
static double *ref_conv(const conv_case *c, const float *x, const float *w, const float *b)
{
    int64_t Ho = out_size(c->H, c->kh, c->sh, c->ph, c->dh);
    int64_t Wo = out_size(c->W, c->kw, c->sw, c->pw, c->dw);
    int64_t Cg = c->C / c->groups, Cog = c->Cout / c->groups;
    double *y = calloc((size_t)(c->B * c->Cout * Ho * Wo), sizeof(double));
    for (int64_t n = 0; n < c->B; n++)
        for (int64_t o = 0; o < c->Cout; o++)
            for (int64_t i = 0; i < Ho; i++)
                for (int64_t j = 0; j < Wo; j++) {
                    double s = b ? b[o] : 0;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t p = 0; p < c->kh; p++)
                            for (int64_t q = 0; q < c->kw; q++) {
                                int64_t iy = i * c->sh - c->ph + p * c->dh;
                                int64_t ix = j * c->sw - c->pw + q * c->dw;
                                if (iy < 0 || iy >= c->H || ix < 0 || ix >= c->W) continue;
                                int64_t cin = (o / Cog) * Cg + ci;
                                s += (double)w[((o * Cg + ci) * c->kh + p) * c->kw + q] *
                                     x[((n * c->C + cin) * c->H + iy) * c->W + ix];
                            }
                    y[((n * c->Cout + o) * Ho + i) * Wo + j] = s;
                }
    return y;
}

static vn_tensor *conv_fn(vn_tensor **in, void *ctx)
{
    const conv_case *c = ctx;
    return vn_conv2d(in[0], in[1], c->bias ? in[2] : NULL, (int64_t[]){c->sh, c->sw},
                     (int64_t[]){c->ph, c->pw}, (int64_t[]){c->dh, c->dw}, c->groups);
}

static void conv_tensors(const conv_case *c, vn_tensor **in, unsigned seed)
{
    in[0] = gc_param(4, (int64_t[]){c->B, c->C, c->H, c->W}, -1, 1, seed);
    in[1] = gc_param(4, (int64_t[]){c->Cout, c->C / c->groups, c->kh, c->kw}, -1, 1, seed + 1);
    in[2] = gc_param(1, (int64_t[]){c->Cout}, -1, 1, seed + 2);
}

static void test_conv2d_values(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof conv_cases / sizeof *conv_cases; k++) {
        const conv_case *c = &conv_cases[k];
        vn_tensor *in[3];
        conv_tensors(c, in, 10 + (unsigned)k);
        vn_tensor *y = conv_fn(in, (void *)c);
        CHECK_PTR(y);
        int64_t Ho = out_size(c->H, c->kh, c->sh, c->ph, c->dh);
        int64_t Wo = out_size(c->W, c->kw, c->sw, c->pw, c->dw);
        check_shape(y, 4, (int64_t[]){c->B, c->Cout, Ho, Wo});
        float *x = gc_values(in[0]), *w = gc_values(in[1]), *b = gc_values(in[2]);
        double *want = ref_conv(c, x, w, c->bias ? b : NULL);
        check_close(y, want, vn_tensor_numel(y), 1e-5, "conv2d");
        free(x); free(w); free(b); free(want);
        GC_RELEASE(in[0], in[1], in[2], y);
    }
}

static void test_conv2d_grad(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof conv_cases / sizeof *conv_cases; k++) {
        const conv_case *c = &conv_cases[k];
        vn_tensor *in[3];
        conv_tensors(c, in, 20 + (unsigned)k);
        gradcheck(conv_fn, in, c->bias ? 3 : 2, (void *)c, 1e-2, 2e-2);
        GC_RELEASE(in[0], in[1], in[2]);
    }
}

/* A strided (transposed) input gives the same result as its contiguous copy. */
static void test_conv2d_strided_input(void **state)
{
    (void)state;
    vn_tensor *x = trand(4, (int64_t[]){2, 3, 6, 5}, -1, 1, 3), *w = trand(4, (int64_t[]){2, 3, 3, 3}, -1, 1, 4);
    vn_tensor *xt = vn_transpose(x, 2, 3), *xc = vn_contiguous(xt);
    int64_t one[2] = {1, 1}, zero[2] = {0, 0};
    vn_tensor *a = vn_conv2d(xt, w, NULL, one, one, NULL, 1), *b = vn_conv2d(xc, w, NULL, one, one, NULL, 1);
    CHECK_PTR(a);
    CHECK_PTR(b);
    assert_true(max_rel_diff(a, b) == 0);
    vn_tensor *m = vn_max_pool2d(xt, (int64_t[]){2, 2}, (int64_t[]){2, 2}, zero);
    vn_tensor *mc = vn_max_pool2d(xc, (int64_t[]){2, 2}, (int64_t[]){2, 2}, zero);
    CHECK_PTR(m);
    assert_true(max_rel_diff(m, mc) == 0);
    GC_RELEASE(x, w, xt, xc, a, b, m, mc);
}

/* ---- im2col --------------------------------------------------------------------- */

static vn_tensor *im2col_fn(vn_tensor **in, void *ctx)
{
    const conv_case *c = ctx;
    return vn_im2col(in[0], (int64_t[]){c->kh, c->kw}, (int64_t[]){c->sh, c->sw},
                     (int64_t[]){c->ph, c->pw}, (int64_t[]){c->dh, c->dw});
}

/* the flattened weight times im2col's columns is the convolution (groups = 1) */
static void test_im2col(void **state)
{
    (void)state;
    const conv_case *c = &conv_cases[1];
    conv_case c1 = *c;
    c1.groups = 1;
    vn_tensor *in[3];
    conv_tensors(&c1, in, 30);
    vn_tensor *cols = im2col_fn(in, &c1);
    CHECK_PTR(cols);
    int64_t Ho = out_size(c1.H, c1.kh, c1.sh, c1.ph, c1.dh), Wo = out_size(c1.W, c1.kw, c1.sw, c1.pw, c1.dw);
    int64_t K = c1.C * c1.kh * c1.kw;
    check_shape(cols, 3, (int64_t[]){c1.B, K, Ho * Wo});
    vn_tensor *w2 = vn_reshape(in[1], 2, (int64_t[]){c1.Cout, K}), *wt = vn_tensor_retain(w2);
    vn_tensor *prod = vn_matmul(w2, cols); /* (B, Cout, L) */
    vn_tensor *y = vn_tensor_retain(prod);
    float *x = gc_values(in[0]), *w = gc_values(in[1]);
    double *want = ref_conv(&c1, x, w, NULL);
    vn_tensor *yc = vn_contiguous(y);
    check_close(yc, want, vn_tensor_numel(yc), 1e-5, "im2col · weight");
    free(x); free(w); free(want);
    gradcheck(im2col_fn, in, 1, &c1, 1e-2, 1e-2);
    GC_RELEASE(in[0], in[1], in[2], cols, w2, wt, prod, y, yc);
}

/* ---- pooling -------------------------------------------------------------------- */

typedef struct { int64_t B, C, H, W, kh, kw, sh, sw, ph, pw; int kind; } pool_case; /* kind: 0 max, 1 avg */

static const pool_case pool_cases[] = {
    {2, 3, 7, 6, 2, 2, 2, 2, 0, 0, 0}, {1, 2, 9, 8, 3, 2, 2, 1, 1, 1, 0}, {2, 1, 5, 5, 3, 3, 1, 1, 1, 1, 0},
    {2, 3, 7, 6, 2, 2, 2, 2, 0, 0, 1}, {1, 2, 9, 8, 3, 2, 2, 1, 1, 1, 1}, {2, 1, 5, 5, 3, 3, 1, 1, 1, 1, 1},
};

static double *ref_pool(const pool_case *c, const float *x)
{
    int64_t Ho = out_size(c->H, c->kh, c->sh, c->ph, 1), Wo = out_size(c->W, c->kw, c->sw, c->pw, 1);
    double *y = calloc((size_t)(c->B * c->C * Ho * Wo), sizeof(double));
    for (int64_t pl = 0; pl < c->B * c->C; pl++)
        for (int64_t i = 0; i < Ho; i++)
            for (int64_t j = 0; j < Wo; j++) {
                double m = -INFINITY, s = 0;
                for (int64_t p = 0; p < c->kh; p++)
                    for (int64_t q = 0; q < c->kw; q++) {
                        int64_t iy = i * c->sh - c->ph + p, ix = j * c->sw - c->pw + q;
                        if (iy < 0 || iy >= c->H || ix < 0 || ix >= c->W) continue;
                        double v = x[(pl * c->H + iy) * c->W + ix];
                        m = v > m ? v : m;
                        s += v;
                    }
                y[(pl * Ho + i) * Wo + j] = c->kind == 0 ? m : s / (double)(c->kh * c->kw);
            }
    return y;
}

static vn_tensor *pool_fn(vn_tensor **in, void *ctx)
{
    const pool_case *c = ctx;
    int64_t k[2] = {c->kh, c->kw}, s[2] = {c->sh, c->sw}, p[2] = {c->ph, c->pw};
    return c->kind == 0 ? vn_max_pool2d(in[0], k, s, p) : vn_avg_pool2d(in[0], k, s, p);
}

static void test_pool(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof pool_cases / sizeof *pool_cases; k++) {
        const pool_case *c = &pool_cases[k];
        /* distinct values (a permutation), so the maximum is never a tie and
         * finite differences do not cross a switch of the argmax */
        int64_t n = c->B * c->C * c->H * c->W;
        float *d = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) d[i] = (float)(((i * 37) % n) - n / 2) * 0.1f;
        vn_tensor *x = tf32(4, (int64_t[]){c->B, c->C, c->H, c->W}, d);
        CHECK_OK(vn_tensor_set_requires_grad(x, true));
        vn_tensor *y = pool_fn(&x, (void *)c);
        CHECK_PTR(y);
        double *want = ref_pool(c, d);
        check_close(y, want, vn_tensor_numel(y), 1e-6, c->kind ? "avg_pool2d" : "max_pool2d");
        gradcheck(pool_fn, &x, 1, (void *)c, 1e-3, 1e-2);
        free(d);
        free(want);
        GC_RELEASE(x, y);
    }
}

static vn_tensor *adaptive_fn(vn_tensor **in, void *ctx)
{
    const int64_t *o = ctx;
    return vn_adaptive_avg_pool2d(in[0], o[0], o[1]);
}

static void test_adaptive_avg_pool(void **state)
{
    (void)state;
    int64_t sizes[][2] = {{1, 1}, {3, 2}, {4, 7}, {7, 5}};
    vn_tensor *x = gc_param(4, (int64_t[]){2, 3, 7, 5}, -1, 1, 40);
    float *xs = gc_values(x);
    for (int k = 0; k < 4; k++) {
        int64_t oh = sizes[k][0], ow = sizes[k][1];
        vn_tensor *y = adaptive_fn(&x, sizes[k]);
        CHECK_PTR(y);
        check_shape(y, 4, (int64_t[]){2, 3, oh, ow});
        double *want = calloc((size_t)(6 * oh * ow), sizeof(double));
        for (int64_t pl = 0; pl < 6; pl++)
            for (int64_t i = 0; i < oh; i++)
                for (int64_t j = 0; j < ow; j++) {
                    /* rows ⌊i·H/oh⌋ .. ⌈(i+1)·H/oh⌉ − 1 */
                    int64_t y0 = (int64_t)floor(i * 7.0 / oh), y1 = (int64_t)ceil((i + 1) * 7.0 / oh);
                    int64_t x0 = (int64_t)floor(j * 5.0 / ow), x1 = (int64_t)ceil((j + 1) * 5.0 / ow);
                    double s = 0;
                    for (int64_t a = y0; a < y1; a++)
                        for (int64_t b = x0; b < x1; b++) s += xs[(pl * 7 + a) * 5 + b];
                    want[(pl * oh + i) * ow + j] = s / (double)((y1 - y0) * (x1 - x0));
                }
        check_close(y, want, vn_tensor_numel(y), 1e-6, "adaptive_avg_pool2d");
        gradcheck(adaptive_fn, &x, 1, sizes[k], 1e-2, 1e-2);
        free(want);
        vn_tensor_release(y);
    }
    free(xs);
    vn_tensor_release(x);
}

/* ---- batch_norm ----------------------------------------------------------------- */

typedef struct { bool training; vn_tensor *rm, *rv; } bn_ctx;

static vn_tensor *bn_fn(vn_tensor **in, void *ctx)
{
    bn_ctx *c = ctx;
    /* the running statistics are not checked here: no update in gradcheck */
    return vn_batch_norm(in[0], in[1], in[2], c->training ? NULL : c->rm,
                         c->training ? NULL : c->rv, c->training, 0.1, 1e-5);
}

static void test_batch_norm(void **state)
{
    (void)state;
    int64_t shapes[][4] = {{5, 3, 1, 1}, {4, 3, 3, 2}};
    int nds[] = {2, 4};
    for (int k = 0; k < 2; k++) {
        int nd = nds[k];
        int64_t B = shapes[k][0], C = shapes[k][1], S = shapes[k][2] * shapes[k][3];
        vn_tensor *in[3] = {gc_param(nd, shapes[k], -2, 3, 50 + k), gc_param(1, &C, 0.5, 1.5, 60 + k),
                            gc_param(1, &C, -1, 1, 70 + k)};
        vn_tensor *rm = trand(1, &C, -0.5, 0.5, 80 + k), *rv = trand(1, &C, 0.5, 2, 90 + k);
        float *x = gc_values(in[0]), *g = gc_values(in[1]), *b = gc_values(in[2]);
        float *rm0 = gc_values(rm), *rv0 = gc_values(rv);
        /* training: batch statistics and the running update */
        vn_tensor *y = vn_batch_norm(in[0], in[1], in[2], rm, rv, true, 0.1, 1e-5);
        CHECK_PTR(y);
        int64_t n = B * C * S;
        double *want = malloc(sizeof(double) * (size_t)n), rmw[8], rvw[8];
        for (int64_t c = 0; c < C; c++) {
            double s = 0, q = 0, cnt = (double)(B * S);
            for (int64_t i = 0; i < B; i++)
                for (int64_t j = 0; j < S; j++) s += x[(i * C + c) * S + j];
            double m = s / cnt;
            for (int64_t i = 0; i < B; i++)
                for (int64_t j = 0; j < S; j++) q += pow(x[(i * C + c) * S + j] - m, 2);
            for (int64_t i = 0; i < B; i++)
                for (int64_t j = 0; j < S; j++) {
                    int64_t at = (i * C + c) * S + j;
                    want[at] = (x[at] - m) / sqrt(q / cnt + 1e-5) * g[c] + b[c];
                }
            rmw[c] = 0.9 * rm0[c] + 0.1 * m;
            rvw[c] = 0.9 * rv0[c] + 0.1 * q / (cnt - 1);
        }
        check_close(y, want, n, 1e-5, "batch_norm (training)");
        check_close(rm, rmw, C, 1e-6, "running_mean");
        check_close(rv, rvw, C, 1e-6, "running_var");
        /* eval: the running statistics */
        vn_tensor *ye = vn_batch_norm(in[0], in[1], in[2], rm, rv, false, 0.1, 1e-5);
        CHECK_PTR(ye);
        for (int64_t i = 0; i < n; i++) {
            int64_t c = (i / S) % C;
            want[i] = (x[i] - rmw[c]) / sqrt(rvw[c] + 1e-5) * g[c] + b[c];
        }
        check_close(ye, want, n, 1e-5, "batch_norm (eval)");
        bn_ctx ctx = {true, rm, rv};
        gradcheck(bn_fn, in, 3, &ctx, 1e-2, 2e-2);
        ctx.training = false;
        gradcheck(bn_fn, in, 3, &ctx, 1e-2, 2e-2);
        free(x); free(g); free(b); free(rm0); free(rv0); free(want);
        GC_RELEASE(in[0], in[1], in[2], rm, rv, y, ye);
    }
}

/* ---- flatten -------------------------------------------------------------------- */

static void test_flatten(void **state)
{
    (void)state;
    vn_tensor *x = trand(4, (int64_t[]){2, 3, 4, 5}, -1, 1, 5);
    vn_tensor *a = vn_flatten(x, 1, -1), *b = vn_flatten(x, 0, 1), *c = vn_flatten(x, 2, 2);
    CHECK_PTR(a);
    CHECK_PTR(b);
    CHECK_PTR(c);
    check_shape(a, 2, (int64_t[]){2, 60});
    check_shape(b, 3, (int64_t[]){6, 4, 5});
    check_shape(c, 4, (int64_t[]){2, 3, 4, 5});
    float *xs = gc_values(x), *as = gc_values(a);
    assert_memory_equal(xs, as, sizeof(float) * 120);
    free(xs);
    free(as);
    GC_EXPECT_ERROR(vn_flatten(x, 2, 1), VN_ERR_ARG, "flatten", "start_dim 2", "end_dim 1");
    GC_EXPECT_ERROR(vn_flatten(x, 0, 4), VN_ERR_ARG, "flatten: end_dim");
    GC_RELEASE(x, a, b, c);
}

/* ---- bad input ------------------------------------------------------------------ */

static void test_errors(void **state)
{
    (void)state;
    vn_tensor *x = trand(4, (int64_t[]){1, 4, 5, 5}, -1, 1, 6);
    vn_tensor *w = trand(4, (int64_t[]){2, 4, 7, 7}, -1, 1, 7), *w3 = trand(4, (int64_t[]){3, 2, 3, 3}, -1, 1, 8);
    vn_tensor *x3 = trand(3, (int64_t[]){4, 5, 5}, -1, 1, 9), *wr = trand(2, (int64_t[]){2, 4}, -1, 1, 9);
    int64_t one[2] = {1, 1}, zero[2] = {0, 0}, two[2] = {2, 2}, k3[2] = {3, 3};
    GC_EXPECT_ERROR(vn_conv2d(x, w, NULL, one, zero, NULL, 1), VN_ERR_SHAPE, "conv2d", "7×7 kernel",
                 "(1, 4, 5, 5)", "does not fit");
    GC_EXPECT_ERROR(vn_conv2d(x, w, NULL, zero, zero, NULL, 1), VN_ERR_ARG, "conv2d: stride is (0, 0)",
                 ">= 1");
    GC_EXPECT_ERROR(vn_conv2d(x, w3, NULL, one, one, NULL, 2), VN_ERR_SHAPE, "divisible by groups = 2",
                 "(3, 2, 3, 3)");
    GC_EXPECT_ERROR(vn_conv2d(x, w3, NULL, one, one, NULL, 0), VN_ERR_ARG, "groups is 0");
    GC_EXPECT_ERROR(vn_conv2d(x3, w3, NULL, one, one, NULL, 1), VN_ERR_SHAPE, "(4, 5, 5)", "4-d");
    GC_EXPECT_ERROR(vn_conv2d(x, wr, NULL, one, one, NULL, 1), VN_ERR_SHAPE, "weight of shape (2, 4)");
    GC_EXPECT_ERROR(vn_conv2d(x, NULL, NULL, one, one, NULL, 1), VN_ERR_ARG, "conv2d: weight");
    vn_tensor *wok = trand(4, (int64_t[]){2, 4, 3, 3}, -1, 1, 10), *bad_b = trand(1, (int64_t[]){3}, 0, 1, 1);
    GC_EXPECT_ERROR(vn_conv2d(x, wok, bad_b, one, one, NULL, 1), VN_ERR_SHAPE, "bias of shape (3,)", "expected (2)");
    GC_EXPECT_ERROR(vn_conv2d(x, wok, NULL, one, (int64_t[]){-1, 0}, NULL, 1), VN_ERR_ARG, "padding");
    GC_EXPECT_ERROR(vn_max_pool2d(x, (int64_t[]){6, 6}, one, zero), VN_ERR_SHAPE, "max_pool2d", "6×6 kernel");
    GC_EXPECT_ERROR(vn_max_pool2d(x, two, zero, zero), VN_ERR_ARG, "max_pool2d: stride");
    GC_EXPECT_ERROR(vn_avg_pool2d(x, k3, one, two), VN_ERR_ARG, "more than half the kernel");
    GC_EXPECT_ERROR(vn_adaptive_avg_pool2d(x, 0, 2), VN_ERR_ARG, "output size (0, 2)");
    GC_EXPECT_ERROR(vn_im2col(x3, k3, one, zero, one), VN_ERR_SHAPE, "im2col", "4-d");
    vn_tensor *xi = vn_zeros(VN_I32, 4, (int64_t[]){1, 1, 3, 3});
    GC_EXPECT_ERROR(vn_max_pool2d(xi, two, one, zero), VN_ERR_DTYPE, "max_pool2d");
    /* batch_norm */
    int64_t C = 4;
    vn_tensor *rm = vn_zeros(VN_F32, 1, &C), *rv = vn_ones(VN_F32, 1, &C), *g3 = trand(1, (int64_t[]){3}, 0, 1, 2);
    vn_tensor *one_per = trand(2, (int64_t[]){1, 4}, 0, 1, 3);
    GC_EXPECT_ERROR(vn_batch_norm(x, NULL, NULL, NULL, NULL, false, 0.1, 1e-5), VN_ERR_ARG,
                 "eval mode needs running_mean");
    GC_EXPECT_ERROR(vn_batch_norm(one_per, NULL, NULL, rm, rv, true, 0.1, 1e-5), VN_ERR_SHAPE,
                 "(1, 4)", "more than 1");
    GC_EXPECT_ERROR(vn_batch_norm(x, g3, NULL, rm, rv, true, 0.1, 1e-5), VN_ERR_SHAPE, "weight of shape (3,)");
    GC_EXPECT_ERROR(vn_batch_norm(x, NULL, NULL, rm, rv, true, 1.5, 1e-5), VN_ERR_ARG, "momentum");
    /* a failed call changes nothing: the running stats are as they were */
    float *rms = gc_values(rm);
    for (int i = 0; i < 4; i++) assert_true(rms[i] == 0);
    free(rms);
    GC_RELEASE(x, w, w3, x3, wr, wok, bad_b, xi, rm, rv, g3, one_per);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv2d_values), cmocka_unit_test(test_conv2d_grad),
        cmocka_unit_test(test_conv2d_strided_input), cmocka_unit_test(test_im2col),
        cmocka_unit_test(test_pool), cmocka_unit_test(test_adaptive_avg_pool),
        cmocka_unit_test(test_batch_norm), cmocka_unit_test(test_flatten),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
