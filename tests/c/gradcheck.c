#include "gradcheck.h"

#include <string.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

vn_tensor *tf32(int ndim, const int64_t *shape, const float *data)
{
    vn_tensor *t = vn_from_data(VN_F32, ndim, shape, data);
    CHECK_PTR(t);
    return t;
}

/* A small LCG so that test data never depends on the engine RNG. */
static double lcg_uniform(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (*state >> 8) / 16777216.0;
}

vn_tensor *trand(int ndim, const int64_t *shape, double lo, double hi, unsigned seed)
{
    vn_tensor *t = vn_empty(VN_F32, ndim, shape);
    CHECK_PTR(t);
    float *p = vn_tensor_data(t);
    unsigned s = seed * 2654435761u + 12345u;
    for (int64_t i = 0; i < vn_tensor_numel(t); i++)
        p[i] = (float)(lo + (hi - lo) * lcg_uniform(&s));
    return t;
}

vn_tensor *gc_param(int ndim, const int64_t *shape, double lo, double hi, unsigned seed)
{
    vn_tensor *t = trand(ndim, shape, lo, hi, seed);
    CHECK_OK(vn_tensor_set_requires_grad(t, true));
    return t;
}

float *gc_values(const vn_tensor *t)
{
    int64_t n = vn_tensor_numel(t);
    float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
    CHECK_OK(vn_tensor_copy_out(t, p, sizeof(float) * (size_t)n));
    return p;
}

void gc_expect_error(vn_tensor *r, vn_status want, const char *const *needles)
{
    if (r) fail_msg("expected an error, got a tensor");
    assert_int_equal(vn_last_status(), want);
    const char *msg = vn_last_error();
    for (; *needles; needles++)
        if (!strstr(msg, *needles)) fail_msg("error message \"%s\" lacks \"%s\"", msg, *needles);
}

void gc_release_all(vn_tensor **ts, size_t n)
{
    for (size_t i = 0; i < n; i++) vn_tensor_release(ts[i]);
}

static double *to_doubles(const vn_tensor *t)
{
    vn_tensor *f = vn_to_dtype(t, VN_F32);
    CHECK_PTR(f);
    int64_t n = vn_tensor_numel(f);
    float *tmp = malloc(sizeof(float) * (size_t)(n ? n : 1));
    double *out = malloc(sizeof(double) * (size_t)(n ? n : 1));
    CHECK_OK(vn_tensor_copy_out(f, tmp, sizeof(float) * (size_t)n));
    for (int64_t i = 0; i < n; i++) out[i] = tmp[i];
    free(tmp);
    vn_tensor_release(f);
    return out;
}

double max_rel_diff(const vn_tensor *a, const vn_tensor *b)
{
    assert_int_equal(vn_tensor_numel(a), vn_tensor_numel(b));
    assert_int_equal(vn_tensor_ndim(a), vn_tensor_ndim(b));
    for (int d = 0; d < vn_tensor_ndim(a); d++)
        assert_int_equal(vn_tensor_shape(a)[d], vn_tensor_shape(b)[d]);
    double *x = to_doubles(a), *y = to_doubles(b), worst = 0;
    for (int64_t i = 0; i < vn_tensor_numel(a); i++) {
        double e = fabs(x[i] - y[i]) / (1 + fabs(y[i]));
        if (isnan(e)) e = INFINITY;
        if (e > worst) worst = e;
    }
    free(x);
    free(y);
    return worst;
}

/* sum(f(inputs) * R) as a double, with R drawn from a fixed seed. */
static vn_tensor *projected(gc_fn f, vn_tensor **inputs, void *ctx)
{
    vn_tensor *out = f(inputs, ctx);
    CHECK_PTR(out);
    vn_tensor *fout = vn_tensor_dtype(out) == VN_F32 ? vn_tensor_retain(out) : vn_to_dtype(out, VN_F32);
    vn_tensor *r = trand(vn_tensor_ndim(fout), vn_tensor_shape(fout), -1, 1, 777);
    vn_tensor *prod = vn_mul(fout, r);
    CHECK_PTR(prod);
    vn_tensor *loss = vn_sum_all(prod);
    CHECK_PTR(loss);
    vn_tensor_release(out);
    vn_tensor_release(fout);
    vn_tensor_release(r);
    vn_tensor_release(prod);
    return loss;
}

static double eval(gc_fn f, vn_tensor **inputs, void *ctx)
{
    bool was = vn_set_grad_enabled(false);
    vn_tensor *loss = projected(f, inputs, ctx);
    double v;
    CHECK_OK(vn_tensor_item(loss, &v));
    vn_tensor_release(loss);
    vn_set_grad_enabled(was);
    return v;
}

double gradcheck(gc_fn f, vn_tensor **inputs, int n, void *ctx, double eps, double tol)
{
    for (int k = 0; k < n; k++) vn_tensor_zero_grad(inputs[k]);
    vn_tensor *loss = projected(f, inputs, ctx);
    CHECK_OK(vn_backward(loss, NULL));
    vn_tensor_release(loss);

    double worst = 0;
    for (int k = 0; k < n; k++) {
        vn_tensor *x = inputs[k];
        if (!vn_tensor_requires_grad(x)) continue;
        vn_tensor *g = vn_tensor_grad(x);
        if (!g) fail_msg("input %d: no gradient after backward", k);
        assert_true(vn_tensor_is_contiguous(x));
        float *p = vn_tensor_data(x);
        double *ga = to_doubles(g);
        for (int64_t i = 0; i < vn_tensor_numel(x); i++) {
            float keep = p[i];
            p[i] = keep + (float)eps;
            double fp = eval(f, inputs, ctx);
            p[i] = keep - (float)eps;
            double fm = eval(f, inputs, ctx);
            p[i] = keep;
            double num = (fp - fm) / (2 * eps);
            double err = fabs(ga[i] - num) / (1 + fabs(num));
            if (!(err <= tol))
                fail_msg("input %d element %lld: analytic %.6g, numeric %.6g (err %.3g > tol %.3g)",
                         k, (long long)i, ga[i], num, err, tol);
            if (err > worst) worst = err;
        }
        free(ga);
    }
    return worst;
}

void expect_null_error(const void *result, vn_status want, const char *needle)
{
    assert_null(result);
    assert_int_equal(vn_last_status(), want);
    if (!strstr(vn_last_error(), needle))
        fail_msg("error \"%s\" does not mention \"%s\"", vn_last_error(), needle);
}
