/* embedding, layer_norm, causal_attention and causal_self_attention (against
 * the composition of views and causal_attention it replaces): values against double
 * reference loops, gradients by finite differences, the causal property
 * (future keys and values cannot change earlier outputs), and the errors
 * for bad ids, shapes and dtypes. */
#include "gradcheck.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void release_all(vn_tensor **ts, size_t n)
{
    for (size_t i = 0; i < n; i++) vn_tensor_release(ts[i]);
}
#define RELEASE(...) release_all((vn_tensor *[]){__VA_ARGS__}, \
                                 sizeof((vn_tensor *[]){__VA_ARGS__}) / sizeof(vn_tensor *))

static vn_tensor *param(int ndim, const int64_t *shape, double lo, double hi, unsigned seed)
{
    vn_tensor *t = trand(ndim, shape, lo, hi, seed);
    CHECK_OK(vn_tensor_set_requires_grad(t, true));
    return t;
}

static void expect_error(vn_tensor *r, vn_status want, const char *const *needles)
{
    if (r) fail_msg("expected an error, got a tensor");
    assert_int_equal(vn_last_status(), want);
    const char *msg = vn_last_error();
    for (; *needles; needles++)
        if (!strstr(msg, *needles)) fail_msg("error message \"%s\" lacks \"%s\"", msg, *needles);
}
#define EXPECT_ERROR(r, st, ...) expect_error((r), (st), (const char *const[]){__VA_ARGS__, NULL})

/* Contiguous f32 copy of t's elements, malloc'd. */
static float *values(const vn_tensor *t)
{
    int64_t n = vn_tensor_numel(t);
    float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
    CHECK_OK(vn_tensor_copy_out(t, p, sizeof(float) * (size_t)n));
    return p;
}

static void check_close(const float *got, const double *want, int64_t n, double tol,
                        const char *what)
{
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]))))
            fail_msg("%s[%lld] = %.8g, want %.8g", what, (long long)i, got[i], want[i]);
}

/* ---- embedding ------------------------------------------------------------- */

static void test_embedding_values(void **state)
{
    (void)state;
    vn_tensor *w = trand(2, (int64_t[]){5, 3}, -1, 1, 1);
    vn_tensor *ids = vn_from_data(VN_I32, 2, (int64_t[]){2, 3}, (int32_t[]){4, 0, 4, 2, 1, 0});
    vn_tensor *out = vn_embedding(w, ids);
    CHECK_PTR(out);
    assert_int_equal(vn_tensor_ndim(out), 3);
    assert_int_equal(vn_tensor_shape(out)[2], 3);
    float *pw = values(w), *po = values(out);
    const int32_t *pi = vn_tensor_data(ids);
    for (int p = 0; p < 6; p++)
        for (int j = 0; j < 3; j++) assert_true(po[p * 3 + j] == pw[pi[p] * 3 + j]);
    free(pw);
    free(po);
    /* a 0-d id gives one row; a transposed weight reads through its strides */
    vn_tensor *one = vn_from_data(VN_I64, 0, NULL, (int64_t[]){2});
    vn_tensor *wt = vn_transpose(w, 0, 1), *wtc = vn_contiguous(wt);
    vn_tensor *wback = vn_transpose(wtc, 0, 1); /* same values as w, other strides */
    vn_tensor *row = vn_embedding(wback, one), *want = vn_select(w, 0, 2);
    CHECK_PTR(row);
    assert_int_equal(vn_tensor_ndim(row), 1);
    assert_true(max_rel_diff(row, want) == 0);
    RELEASE(w, ids, out, one, wt, wtc, wback, row, want);
}

static vn_tensor *f_embedding(vn_tensor **in, void *ctx) { return vn_embedding(in[0], ctx); }

/* Repeated ids must accumulate: row 1 appears three times. */
static void test_embedding_grad(void **state)
{
    (void)state;
    vn_tensor *w = param(2, (int64_t[]){4, 3}, -1, 1, 2);
    vn_tensor *ids = vn_from_data(VN_I64, 2, (int64_t[]){2, 3}, (int64_t[]){1, 3, 1, 0, 1, 3});
    gradcheck(f_embedding, &w, 1, ids, 1e-3, 1e-2);
    /* d sum(out) / dW = how often each row was used */
    vn_tensor_zero_grad(w);
    vn_tensor *out = vn_embedding(w, ids), *s = vn_sum_all(out);
    CHECK_OK(vn_backward(s, NULL));
    float *g = values(vn_tensor_grad(w));
    const double count[4] = {1, 3, 0, 2};
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < 3; j++) assert_true(g[r * 3 + j] == count[r]);
    free(g);
    RELEASE(w, ids, out, s);
}

static void test_embedding_errors(void **state)
{
    (void)state;
    vn_tensor *w = trand(2, (int64_t[]){4, 3}, -1, 1, 3);
    vn_tensor *hi = vn_from_data(VN_I64, 1, (int64_t[]){3}, (int64_t[]){0, 4, 1});
    EXPECT_ERROR(vn_embedding(w, hi), VN_ERR_ARG, "embedding", "ids[1] = 4", "0..3");
    vn_tensor *neg = vn_from_data(VN_I32, 1, (int64_t[]){2}, (int32_t[]){0, -1});
    EXPECT_ERROR(vn_embedding(w, neg), VN_ERR_ARG, "ids[1] = -1");
    vn_tensor *huge = vn_from_data(VN_I64, 1, (int64_t[]){1}, (int64_t[]){INT64_MAX});
    EXPECT_ERROR(vn_embedding(w, huge), VN_ERR_ARG, "ids[0] = 9223372036854775807");
    vn_tensor_release(huge);
    vn_tensor *fl = trand(1, (int64_t[]){2}, 0, 1, 4);
    EXPECT_ERROR(vn_embedding(w, fl), VN_ERR_DTYPE, "embedding", "i32 or i64", "f32");
    vn_tensor *w1 = trand(1, (int64_t[]){4}, 0, 1, 5), *ok = vn_zeros(VN_I64, 1, (int64_t[]){2});
    EXPECT_ERROR(vn_embedding(w1, ok), VN_ERR_SHAPE, "embedding", "(V, D)", "(4,)");
    EXPECT_ERROR(vn_embedding(NULL, ok), VN_ERR_ARG, "NULL");
    RELEASE(w, hi, neg, fl, w1, ok);
}

/* ---- layer_norm ------------------------------------------------------------- */

/* y over rows of x (rows × D) in double. */
static void layer_norm_ref(const float *x, const float *g, const float *b, int64_t rows, int64_t D,
                           double eps, double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < D; j++) m += x[r * D + j];
        m /= D;
        for (int64_t j = 0; j < D; j++) v += (x[r * D + j] - m) * (x[r * D + j] - m);
        v /= D;
        for (int64_t j = 0; j < D; j++) {
            double h = (x[r * D + j] - m) / sqrt(v + eps);
            y[r * D + j] = h * (g ? g[j] : 1) + (b ? b[j] : 0);
        }
    }
}

static void test_layer_norm_values(void **state)
{
    (void)state;
    int64_t shape[3] = {2, 3, 8};
    /* an offset of 1000 checks that the variance does not cancel */
    vn_tensor *x = trand(3, shape, 999, 1001, 6);
    vn_tensor *g = trand(1, (int64_t[]){8}, 0.5, 1.5, 7), *b = trand(1, (int64_t[]){8}, -1, 1, 8);
    float *px = values(x), *pg = values(g), *pb = values(b);
    double want[48];
    for (int affine = 0; affine < 2; affine++) {
        vn_tensor *y = vn_layer_norm(x, affine ? g : NULL, affine ? b : NULL, 1e-5);
        CHECK_PTR(y);
        layer_norm_ref(px, affine ? pg : NULL, affine ? pb : NULL, 6, 8, 1e-5, want);
        float *py = values(y);
        check_close(py, want, 48, 2e-4, "layer_norm");
        free(py);
        vn_tensor_release(y);
    }
    free(px);
    free(pg);
    free(pb);
    RELEASE(x, g, b);
}

typedef struct {
    bool gamma, beta;
} ln_ctx;

static vn_tensor *f_layer_norm(vn_tensor **in, void *ctx)
{
    const ln_ctx *c = ctx;
    return vn_layer_norm(in[0], c->gamma ? in[1] : NULL, c->beta ? in[2] : NULL, 1e-5);
}

static void test_layer_norm_grad(void **state)
{
    (void)state;
    vn_tensor *in[3] = {param(3, (int64_t[]){2, 3, 5}, -2, 2, 9),
                        param(1, (int64_t[]){5}, 0.5, 1.5, 10),
                        param(1, (int64_t[]){5}, -1, 1, 11)};
    const ln_ctx cases[3] = {{true, true}, {false, false}, {true, false}};
    for (int c = 0; c < 3; c++)
        gradcheck(f_layer_norm, in, 1 + cases[c].gamma + cases[c].beta, (void *)&cases[c], 1e-3,
                  1e-2);
    /* only x requires grad: the gamma/beta branches must not be needed */
    CHECK_OK(vn_tensor_set_requires_grad(in[1], false));
    CHECK_OK(vn_tensor_set_requires_grad(in[2], false));
    gradcheck(f_layer_norm, in, 3, (void *)&cases[0], 1e-3, 1e-2);
    RELEASE(in[0], in[1], in[2]);
}

/* A size whose backward runs on all threads (rows split, dgamma and dbeta
 * summed per thread): the three gradients of sum(y ⊙ w) against the
 * formulas in double, dx = (ĝ − mean(ĝ) − x̂·mean(ĝ ⊙ x̂)) / σ with ĝ = w ⊙ gamma,
 * dgamma = Σ_rows w ⊙ x̂, dbeta = Σ_rows w. */
static void test_layer_norm_grad_large(void **state)
{
    (void)state;
    int64_t rows = 301, D = 129, n = rows * D;
    vn_tensor *x = param(2, (int64_t[]){rows, D}, -2, 2, 70), *g = param(1, &D, 0.5, 1.5, 71),
              *b = param(1, &D, -1, 1, 72), *w = trand(2, (int64_t[]){rows, D}, -1, 1, 73);
    vn_tensor *y = vn_layer_norm(x, g, b, 1e-5);
    CHECK_PTR(y);
    CHECK_OK(vn_backward(y, w));
    float *px = values(x), *pg = values(g), *pw = values(w);
    double *dx = calloc((size_t)(n + 2 * D), sizeof(double)), *dg = dx + n, *db = dg + D;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = px + r * D, *wr = pw + r * D;
        double m = 0, v = 0, m1 = 0, m2 = 0;
        for (int64_t j = 0; j < D; j++) m += xr[j] / (double)D;
        for (int64_t j = 0; j < D; j++) v += (xr[j] - m) * (xr[j] - m) / (double)D;
        double rstd = 1 / sqrt(v + 1e-5);
        for (int64_t j = 0; j < D; j++) {
            double xh = (xr[j] - m) * rstd, gh = (double)wr[j] * pg[j];
            m1 += gh / (double)D;
            m2 += gh * xh / (double)D;
            dg[j] += wr[j] * xh;
            db[j] += wr[j];
        }
        for (int64_t j = 0; j < D; j++) {
            double xh = (xr[j] - m) * rstd;
            dx[r * D + j] = ((double)wr[j] * pg[j] - m1 - xh * m2) * rstd;
        }
    }
    const double *ref[3] = {dx, dg, db};
    vn_tensor *in[3] = {x, g, b};
    const char *name[3] = {"dx", "dgamma", "dbeta"};
    for (int i = 0; i < 3; i++) {
        float *got = values(vn_tensor_grad(in[i]));
        check_close(got, ref[i], i ? D : n, 1e-4, name[i]);
        free(got);
    }
    free(px);
    free(pg);
    free(pw);
    free(dx);
    RELEASE(x, g, b, w, y);
}

static void test_layer_norm_errors(void **state)
{
    (void)state;
    vn_tensor *x = trand(2, (int64_t[]){2, 4}, -1, 1, 12), *g3 = trand(1, (int64_t[]){3}, 0, 1, 13);
    EXPECT_ERROR(vn_layer_norm(x, g3, NULL, 1e-5), VN_ERR_SHAPE, "layer_norm", "gamma", "(3,)",
                 "(4,)");
    EXPECT_ERROR(vn_layer_norm(x, NULL, g3, 1e-5), VN_ERR_SHAPE, "beta");
    EXPECT_ERROR(vn_layer_norm(x, NULL, NULL, 0), VN_ERR_ARG, "eps");
    EXPECT_ERROR(vn_layer_norm(x, NULL, NULL, NAN), VN_ERR_ARG, "eps");
    vn_tensor *empty = vn_zeros(VN_F32, 2, (int64_t[]){3, 0}), *s = vn_zeros(VN_F32, 0, NULL);
    EXPECT_ERROR(vn_layer_norm(empty, NULL, NULL, 1e-5), VN_ERR_SHAPE, "last dim", "(3, 0)");
    EXPECT_ERROR(vn_layer_norm(s, NULL, NULL, 1e-5), VN_ERR_SHAPE, "layer_norm");
    vn_tensor *xi = vn_zeros(VN_I32, 2, (int64_t[]){2, 4});
    EXPECT_ERROR(vn_layer_norm(xi, NULL, NULL, 1e-5), VN_ERR_DTYPE, "layer_norm");
    RELEASE(x, g3, empty, s, xi);
}

/* ---- causal attention -------------------------------------------------------- */

/* out for q, k, v (BH, T, Dh) contiguous, in double. */
static void attention_ref(const float *q, const float *k, const float *v, int64_t BH, int64_t T,
                          int64_t Dh, double *out)
{
    double *p = malloc(sizeof(double) * (size_t)T);
    for (int64_t b = 0; b < BH; b++)
        for (int64_t t = 0; t < T; t++) {
            const float *qt = q + (b * T + t) * Dh;
            double m = -INFINITY, sum = 0;
            for (int64_t j = 0; j <= t; j++) {
                double s = 0;
                for (int64_t d = 0; d < Dh; d++) s += (double)qt[d] * k[(b * T + j) * Dh + d];
                p[j] = s / sqrt((double)Dh);
                m = p[j] > m ? p[j] : m;
            }
            for (int64_t j = 0; j <= t; j++) sum += p[j] = exp(p[j] - m);
            for (int64_t d = 0; d < Dh; d++) {
                double o = 0;
                for (int64_t j = 0; j <= t; j++) o += p[j] / sum * v[(b * T + j) * Dh + d];
                out[(b * T + t) * Dh + d] = o;
            }
        }
    free(p);
}

static void test_attention_values(void **state)
{
    (void)state;
    int64_t shape[4] = {2, 3, 5, 4}, n = 2 * 3 * 5 * 4;
    vn_tensor *q = trand(4, shape, -2, 2, 14), *k = trand(4, shape, -2, 2, 15),
              *v = trand(4, shape, -1, 1, 16);
    vn_tensor *out = vn_causal_attention(q, k, v);
    CHECK_PTR(out);
    float *pq = values(q), *pk = values(k), *pv = values(v), *po = values(out);
    double *want = malloc(sizeof(double) * (size_t)n);
    attention_ref(pq, pk, pv, 6, 5, 4, want);
    check_close(po, want, n, 1e-5, "attention");
    /* the first position attends only to itself: out = v there */
    for (int64_t d = 0; d < 4; d++) assert_true(fabsf(po[d] - pv[d]) < 1e-6f);

    /* non-contiguous inputs, as a GPT makes them: (B, T, H, Dh) → transpose */
    int64_t bthd[4] = {2, 5, 3, 4};
    vn_tensor *qv = vn_reshape(q, 4, bthd), *qt = vn_transpose(qv, 1, 2);
    vn_tensor *qtc = vn_contiguous(qt), *o1 = vn_causal_attention(qt, k, v),
              *o2 = vn_causal_attention(qtc, k, v);
    CHECK_PTR(o1);
    CHECK_PTR(o2);
    assert_true(max_rel_diff(o1, o2) == 0);
    free(pq);
    free(pk);
    free(pv);
    free(po);
    free(want);
    RELEASE(q, k, v, out, qv, qt, qtc, o1, o2);
}

/* Changing the key and value at position s leaves outputs 0..s-1 exactly as
 * they were, and changes position s. */
static void test_attention_causal(void **state)
{
    (void)state;
    int64_t shape[3] = {2, 6, 4}, s = 3;
    vn_tensor *q = trand(3, shape, -1, 1, 17), *k = trand(3, shape, -1, 1, 18),
              *v = trand(3, shape, -1, 1, 19);
    vn_tensor *before = vn_causal_attention(q, k, v);
    CHECK_PTR(before);
    float *pk = vn_tensor_data(k), *pv = vn_tensor_data(v);
    for (int64_t b = 0; b < 2; b++)
        for (int64_t t = s; t < 6; t++)
            for (int64_t d = 0; d < 4; d++) {
                pk[(b * 6 + t) * 4 + d] += 5.0f;
                pv[(b * 6 + t) * 4 + d] -= 3.0f;
            }
    vn_tensor *after = vn_causal_attention(q, k, v);
    CHECK_PTR(after);
    float *p0 = values(before), *p1 = values(after);
    for (int64_t b = 0; b < 2; b++)
        for (int64_t t = 0; t < 6; t++) {
            float diff = 0;
            const float *r0 = p0 + (b * 6 + t) * 4, *r1 = p1 + (b * 6 + t) * 4;
            for (int64_t d = 0; d < 4; d++) diff += fabsf(r0[d] - r1[d]);
            if (t < s && diff != 0)
                fail_msg("batch %lld position %lld changed by %g", (long long)b, (long long)t,
                         diff);
            if (t >= s && !(diff > 1e-3f))
                fail_msg("batch %lld position %lld did not change", (long long)b, (long long)t);
        }
    free(p0);
    free(p1);
    RELEASE(q, k, v, before, after);
}

static vn_tensor *f_attention(vn_tensor **in, void *ctx)
{
    (void)ctx;
    return vn_causal_attention(in[0], in[1], in[2]);
}

static void test_attention_grad(void **state)
{
    (void)state;
    int64_t shape[4] = {1, 2, 4, 3};
    vn_tensor *in[3] = {param(4, shape, -1, 1, 20), param(4, shape, -1, 1, 21),
                        param(4, shape, -1, 1, 22)};
    gradcheck(f_attention, in, 3, NULL, 1e-3, 1e-2);
    /* one input at a time, and q used as all three */
    CHECK_OK(vn_tensor_set_requires_grad(in[0], false));
    CHECK_OK(vn_tensor_set_requires_grad(in[2], false));
    gradcheck(f_attention, in, 3, NULL, 1e-3, 1e-2);
    vn_tensor *same[3] = {in[1], in[1], in[1]};
    gradcheck(f_attention, same, 1, NULL, 1e-3, 1e-2);
    RELEASE(in[0], in[1], in[2]);
}

/* dq, dk, dv (BH, T, Dh) of sum(out ⊙ w), in double, from the explicit
 * probabilities: dv_j = Σ_t p_tj w_t, ds_tj = p_tj (w_t·v_j − Σ_i p_ti w_t·v_i),
 * dq_t = Σ_j ds_tj k_j / √Dh, dk_j = Σ_t ds_tj q_t / √Dh. */
static void attention_grad_ref(const float *q, const float *k, const float *v, const float *w,
                               int64_t BH, int64_t T, int64_t Dh, double *dq, double *dk,
                               double *dv)
{
    double *p = malloc(sizeof(double) * (size_t)T * 2), *ds = p + T, sc = 1 / sqrt((double)Dh);
    memset(dq, 0, sizeof(double) * (size_t)(BH * T * Dh));
    memset(dk, 0, sizeof(double) * (size_t)(BH * T * Dh));
    memset(dv, 0, sizeof(double) * (size_t)(BH * T * Dh));
    for (int64_t b = 0; b < BH; b++)
        for (int64_t t = 0; t < T; t++) {
            const float *qt = q + (b * T + t) * Dh, *wt = w + (b * T + t) * Dh;
            double m = -INFINITY, sum = 0, dot = 0;
            for (int64_t j = 0; j <= t; j++) {
                double s = 0;
                for (int64_t d = 0; d < Dh; d++) s += (double)qt[d] * k[(b * T + j) * Dh + d];
                p[j] = s * sc;
                m = p[j] > m ? p[j] : m;
            }
            for (int64_t j = 0; j <= t; j++) sum += p[j] = exp(p[j] - m);
            for (int64_t j = 0; j <= t; j++) {
                p[j] /= sum;
                ds[j] = 0;
                for (int64_t d = 0; d < Dh; d++) ds[j] += (double)wt[d] * v[(b * T + j) * Dh + d];
                dot += p[j] * ds[j];
            }
            for (int64_t j = 0; j <= t; j++) {
                double g = p[j] * (ds[j] - dot) * sc;
                for (int64_t d = 0; d < Dh; d++) {
                    dq[(b * T + t) * Dh + d] += g * k[(b * T + j) * Dh + d];
                    dk[(b * T + j) * Dh + d] += g * qt[d];
                    dv[(b * T + j) * Dh + d] += p[j] * wt[d];
                }
            }
        }
    free(p);
}

/* Values and all three gradients of a (B, H, T, Dh) case against the double
 * references. */
static void attention_case(int64_t B, int64_t H, int64_t T, int64_t Dh)
{
    int64_t shape[4] = {B, H, T, Dh}, BH = B * H, n = BH * T * Dh;
    vn_tensor *q = param(4, shape, -2, 2, 40), *k = param(4, shape, -2, 2, 41),
              *v = param(4, shape, -1, 1, 42), *w = trand(4, shape, -1, 1, 43);
    vn_tensor *out = vn_causal_attention(q, k, v);
    CHECK_PTR(out);
    CHECK_OK(vn_backward(out, w));
    float *pq = values(q), *pk = values(k), *pv = values(v), *pw = values(w), *po = values(out);
    double *want = malloc(sizeof(double) * (size_t)n * 4), *dq = want + n, *dk = dq + n,
           *dv = dk + n;
    attention_ref(pq, pk, pv, BH, T, Dh, want);
    check_close(po, want, n, 1e-5, "attention");
    attention_grad_ref(pq, pk, pv, pw, BH, T, Dh, dq, dk, dv);
    const double *ref[3] = {dq, dk, dv};
    const char *name[3] = {"dq", "dk", "dv"};
    vn_tensor *in[3] = {q, k, v};
    for (int i = 0; i < 3; i++) {
        float *g = values(vn_tensor_grad(in[i]));
        check_close(g, ref[i], n, 1e-5, name[i]);
        free(g);
    }
    free(pq);
    free(pk);
    free(pv);
    free(pw);
    free(po);
    free(want);
    RELEASE(q, k, v, w, out);
}

/* A size that runs the kernels' parallel loop over (batch, head), odd T and
 * Dh; and T = 70, three of the CPU kernel's 32-query blocks, the last one
 * partial (the products skip the blocks above the diagonal). */
static void test_attention_large(void **state)
{
    (void)state;
    attention_case(2, 3, 37, 17);
    attention_case(1, 2, 70, 8);
}

static void test_attention_errors(void **state)
{
    (void)state;
    vn_tensor *a = trand(3, (int64_t[]){2, 4, 3}, 0, 1, 23);
    vn_tensor *b = trand(3, (int64_t[]){2, 5, 3}, 0, 1, 24);
    EXPECT_ERROR(vn_causal_attention(a, b, a), VN_ERR_SHAPE, "causal_attention", "(2, 4, 3)",
                 "(2, 5, 3)");
    vn_tensor *one = trand(1, (int64_t[]){3}, 0, 1, 25);
    EXPECT_ERROR(vn_causal_attention(one, one, one), VN_ERR_SHAPE, "at least 2 dims");
    vn_tensor *ai = vn_zeros(VN_I32, 3, (int64_t[]){2, 4, 3});
    EXPECT_ERROR(vn_causal_attention(a, a, ai), VN_ERR_DTYPE, "causal_attention: v");
    EXPECT_ERROR(vn_causal_attention(a, NULL, a), VN_ERR_ARG, "NULL");
    /* empty sequences are fine */
    vn_tensor *e = vn_zeros(VN_F32, 3, (int64_t[]){2, 0, 3}), *r = vn_causal_attention(e, e, e);
    CHECK_PTR(r);
    assert_int_equal(vn_tensor_numel(r), 0);
    RELEASE(a, b, one, ai, e, r);
}

/* ---- causal_self_attention ---------------------------------------------------- */

/* The composition the op replaces: q, k, v sliced out of qkv (B, T, 3C),
 * split into heads, attention, heads merged back into (B, T, C). */
static vn_tensor *composed_self_attention(vn_tensor *qkv, int64_t H)
{
    int64_t B = vn_tensor_shape(qkv)[0], T = vn_tensor_shape(qkv)[1],
            C = vn_tensor_shape(qkv)[2] / 3;
    vn_tensor *h[3], *tmp[6];
    for (int i = 0; i < 3; i++) {
        tmp[2 * i] = vn_narrow(qkv, 2, i * C, C);
        tmp[2 * i + 1] = vn_reshape(tmp[2 * i], 4, (int64_t[]){B, T, H, C / H});
        h[i] = vn_transpose(tmp[2 * i + 1], 1, 2);
    }
    vn_tensor *y = vn_causal_attention(h[0], h[1], h[2]), *yt = vn_transpose(y, 1, 2);
    vn_tensor *out = vn_reshape(yt, 3, (int64_t[]){B, T, C});
    RELEASE(h[0], h[1], h[2], tmp[0], tmp[1], tmp[2], tmp[3], tmp[4], tmp[5], y, yt);
    return out;
}

/* Values and the gradient of qkv against the composition, at a size that
 * runs one thread and at one that runs the parallel loop (odd T and Dh);
 * tests/lua/test_self_attention.lua checks smaller sizes bit for bit. */
static void test_self_attention_values(void **state)
{
    (void)state;
    const int64_t sizes[2][4] = {{2, 5, 3, 4}, {2, 37, 2, 17}}; /* B, T, H, Dh */
    for (int c = 0; c < 2; c++) {
        int64_t B = sizes[c][0], T = sizes[c][1], H = sizes[c][2], C = H * sizes[c][3];
        int64_t shape[3] = {B, T, 3 * C}, oshape[3] = {B, T, C};
        vn_tensor *x1 = param(3, shape, -2, 2, 50 + (unsigned)c),
                  *x2 = param(3, shape, -2, 2, 50 + (unsigned)c); /* the same values */
        vn_tensor *w = trand(3, oshape, -1, 1, 60 + (unsigned)c);
        vn_tensor *y1 = vn_causal_self_attention(x1, H), *y2 = composed_self_attention(x2, H);
        CHECK_PTR(y1);
        CHECK_PTR(y2);
        assert_int_equal(vn_tensor_ndim(y1), 3);
        assert_int_equal(vn_tensor_shape(y1)[2], C);
        if (max_rel_diff(y1, y2) > 1e-6) fail_msg("size %d: output differs", c);
        CHECK_OK(vn_backward(y1, w));
        CHECK_OK(vn_backward(y2, w));
        if (max_rel_diff(vn_tensor_grad(x1), vn_tensor_grad(x2)) > 1e-6)
            fail_msg("size %d: dqkv differs", c);
        RELEASE(x1, x2, w, y1, y2);
    }
}

static vn_tensor *f_self_attention(vn_tensor **in, void *ctx)
{
    return vn_causal_self_attention(in[0], *(const int64_t *)ctx);
}

static void test_self_attention_grad(void **state)
{
    (void)state;
    int64_t H = 2;
    vn_tensor *in[1] = {param(3, (int64_t[]){2, 4, 3 * 2 * 3}, -1, 1, 55)};
    gradcheck(f_self_attention, in, 1, &H, 1e-3, 1e-2);
    RELEASE(in[0]);
}

static void test_self_attention_errors(void **state)
{
    (void)state;
    vn_tensor *a = trand(3, (int64_t[]){2, 4, 12}, 0, 1, 56);
    EXPECT_ERROR(vn_causal_self_attention(a, 0), VN_ERR_SHAPE, "n_head 0");
    EXPECT_ERROR(vn_causal_self_attention(a, 3), VN_ERR_SHAPE, "causal_self_attention",
                 "(2, 4, 12)", "n_head 3");
    vn_tensor *one = trand(1, (int64_t[]){12}, 0, 1, 57);
    EXPECT_ERROR(vn_causal_self_attention(one, 1), VN_ERR_SHAPE, "(12,)");
    vn_tensor *ai = vn_zeros(VN_I32, 3, (int64_t[]){2, 4, 12});
    EXPECT_ERROR(vn_causal_self_attention(ai, 2), VN_ERR_DTYPE, "causal_self_attention: qkv");
    EXPECT_ERROR(vn_causal_self_attention(NULL, 2), VN_ERR_ARG, "NULL");
    /* empty sequences are fine */
    vn_tensor *e = vn_zeros(VN_F32, 3, (int64_t[]){2, 0, 12}), *r = vn_causal_self_attention(e, 2);
    CHECK_PTR(r);
    assert_int_equal(vn_tensor_shape(r)[2], 4);
    RELEASE(a, one, ai, e, r);
}

/* ---- bias_gelu ----------------------------------------------------------------- */

static void test_bias_gelu(void **state)
{
    (void)state;
    /* the same bits as the unfused gelu(x + bias) */
    vn_tensor *x = trand(3, (int64_t[]){2, 3, 5}, -4, 4, 40), *b = trand(1, (int64_t[]){5}, -1, 1, 41);
    vn_tensor *y = vn_bias_gelu(x, b), *u = vn_add(x, b), *want = vn_gelu(u);
    CHECK_PTR(y);
    CHECK_PTR(want);
    assert_true(max_rel_diff(y, want) == 0);
    RELEASE(x, b, y, u, want);
}

static vn_tensor *f_bias_gelu(vn_tensor **in, void *ctx)
{
    (void)ctx;
    return vn_bias_gelu(in[0], in[1]);
}

static void test_bias_gelu_grad(void **state)
{
    (void)state;
    vn_tensor *in[2] = {param(3, (int64_t[]){2, 3, 4}, -3, 3, 42), param(1, (int64_t[]){4}, -1, 1, 43)};
    gradcheck(f_bias_gelu, in, 2, NULL, 1e-3, 1e-2);
    CHECK_OK(vn_tensor_set_requires_grad(in[1], false)); /* x alone */
    gradcheck(f_bias_gelu, in, 2, NULL, 1e-3, 1e-2);
    CHECK_OK(vn_tensor_set_requires_grad(in[0], false)); /* bias alone */
    CHECK_OK(vn_tensor_set_requires_grad(in[1], true));
    gradcheck(f_bias_gelu, in, 2, NULL, 1e-3, 1e-2);
    RELEASE(in[0], in[1]);
}

static void test_bias_gelu_errors(void **state)
{
    (void)state;
    vn_tensor *x = trand(2, (int64_t[]){2, 4}, -1, 1, 44), *b3 = trand(1, (int64_t[]){3}, 0, 1, 45);
    vn_tensor *bi = vn_zeros(VN_I32, 1, (int64_t[]){4}), *s = vn_zeros(VN_F32, 0, NULL);
    EXPECT_ERROR(vn_bias_gelu(x, b3), VN_ERR_SHAPE, "bias_gelu", "(2, 4)", "(3,)");
    EXPECT_ERROR(vn_bias_gelu(s, s), VN_ERR_SHAPE, "bias_gelu");
    EXPECT_ERROR(vn_bias_gelu(x, bi), VN_ERR_DTYPE, "bias_gelu: bias");
    EXPECT_ERROR(vn_bias_gelu(NULL, b3), VN_ERR_ARG, "NULL");
    RELEASE(x, b3, bi, s);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedding_values),  cmocka_unit_test(test_embedding_grad),
        cmocka_unit_test(test_embedding_errors),  cmocka_unit_test(test_layer_norm_values),
        cmocka_unit_test(test_layer_norm_grad),   cmocka_unit_test(test_layer_norm_errors),
        cmocka_unit_test(test_layer_norm_grad_large),
        cmocka_unit_test(test_attention_values),  cmocka_unit_test(test_attention_causal),
        cmocka_unit_test(test_attention_grad),    cmocka_unit_test(test_attention_errors),
        cmocka_unit_test(test_bias_gelu),         cmocka_unit_test(test_bias_gelu_grad),
        cmocka_unit_test(test_bias_gelu_errors),
        cmocka_unit_test(test_attention_large),
        cmocka_unit_test(test_self_attention_values),
        cmocka_unit_test(test_self_attention_grad),
        cmocka_unit_test(test_self_attention_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
