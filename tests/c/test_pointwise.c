/* Elementwise ops: values against plain reference loops for every dtype
 * path, NumPy broadcasting, non-contiguous inputs, errors, and gradients of
 * every differentiable op against central finite differences. */
#include "gradcheck.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* All values of t in row-major order as doubles (through vn_tensor_get, so
 * views are read by their strides). */
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

static void expect_shape(const vn_tensor *t, int ndim, const int64_t *shape)
{
    assert_int_equal(vn_tensor_ndim(t), ndim);
    for (int d = 0; d < ndim; d++) assert_int_equal(vn_tensor_shape(t)[d], shape[d]);
}

static void release_all(vn_tensor **ts, int n)
{
    for (int i = 0; i < n; i++) vn_tensor_release(ts[i]);
}

/* ---- binary arithmetic --------------------------------------------------- */

static void test_binary_f32(void **state)
{
    const int64_t s[] = {2, 3};
    const float av[] = {1.5f, -2, 3, 0.25f, 4, -1}, bv[] = {2, 0.5f, -3, 4, 1.5f, 2};
    vn_tensor *a = tf32(2, s, av), *b = tf32(2, s, bv), *abs_a = vn_abs(a);
    vn_tensor *r[5] = {vn_add(a, b), vn_sub(a, b), vn_mul(a, b), vn_div(a, b), vn_pow(abs_a, b)};
    for (int k = 0; k < 5; k++) {
        CHECK_PTR(r[k]);
        expect_shape(r[k], 2, s);
        assert_int_equal(vn_tensor_dtype(r[k]), VN_F32);
    }
    float got[5][6];
    for (int k = 0; k < 5; k++) CHECK_OK(vn_tensor_copy_out(r[k], got[k], sizeof got[k]));
    for (int i = 0; i < 6; i++) {
        assert_true(got[0][i] == av[i] + bv[i]);
        assert_true(got[1][i] == av[i] - bv[i]);
        assert_true(got[2][i] == av[i] * bv[i]);
        assert_true(got[3][i] == av[i] / bv[i]);
        assert_true(fabs(got[4][i] - pow(fabs(av[i]), bv[i])) < 1e-5 * (1 + pow(fabs(av[i]), bv[i])));
    }
    /* division by zero follows IEEE */
    const float z[] = {0, 0, 0, 0, 0, 0};
    vn_tensor *zero = tf32(2, s, z), *q = vn_div(a, zero);
    float qv[6];
    CHECK_OK(vn_tensor_copy_out(q, qv, sizeof qv));
    assert_true(isinf(qv[0]) && qv[0] > 0 && isinf(qv[1]) && qv[1] < 0);
    vn_tensor *all[] = {a, b, abs_a, r[0], r[1], r[2], r[3], r[4], zero, q};
    release_all(all, 10);
}

static void test_binary_int(void **state)
{
    const int64_t s[] = {4};
    const int32_t a32[] = {INT32_MAX, -7, 6, INT32_MIN}, b32[] = {1, 3, -4, 1};
    const int64_t a64[] = {INT64_MAX, -7, 3000000000LL, 5}, b64[] = {1, 3, 3000000000LL, -6};
    const uint8_t a8[] = {200, 3, 16, 255}, b8[] = {100, 5, 16, 255};
    vn_tensor *x32 = vn_from_data(VN_I32, 1, s, a32), *y32 = vn_from_data(VN_I32, 1, s, b32);
    vn_tensor *x64 = vn_from_data(VN_I64, 1, s, a64), *y64 = vn_from_data(VN_I64, 1, s, b64);
    vn_tensor *x8 = vn_from_data(VN_U8, 1, s, a8), *y8 = vn_from_data(VN_U8, 1, s, b8);
    vn_tensor *(*ops[3])(const vn_tensor *, const vn_tensor *) = {vn_add, vn_sub, vn_mul};
    for (int k = 0; k < 3; k++) {
        vn_tensor *r32 = ops[k](x32, y32), *r64 = ops[k](x64, y64), *r8 = ops[k](x8, y8);
        CHECK_PTR(r32); CHECK_PTR(r64); CHECK_PTR(r8);
        assert_int_equal(vn_tensor_dtype(r32), VN_I32);
        assert_int_equal(vn_tensor_dtype(r64), VN_I64);
        assert_int_equal(vn_tensor_dtype(r8), VN_U8);
        int32_t g32[4];
        int64_t g64[4];
        uint8_t g8[4];
        CHECK_OK(vn_tensor_copy_out(r32, g32, sizeof g32));
        CHECK_OK(vn_tensor_copy_out(r64, g64, sizeof g64));
        CHECK_OK(vn_tensor_copy_out(r8, g8, sizeof g8));
        for (int i = 0; i < 4; i++) {
            /* reference: two's complement wrap-around, computed unsigned */
            uint32_t u32 = k == 0 ? (uint32_t)a32[i] + (uint32_t)b32[i]
                         : k == 1 ? (uint32_t)a32[i] - (uint32_t)b32[i] : (uint32_t)a32[i] * (uint32_t)b32[i];
            uint64_t u64 = k == 0 ? (uint64_t)a64[i] + (uint64_t)b64[i]
                         : k == 1 ? (uint64_t)a64[i] - (uint64_t)b64[i] : (uint64_t)a64[i] * (uint64_t)b64[i];
            uint8_t u8 = (uint8_t)(k == 0 ? a8[i] + b8[i] : k == 1 ? a8[i] - b8[i] : a8[i] * b8[i]);
            assert_true((uint32_t)g32[i] == u32);
            assert_true((uint64_t)g64[i] == u64);
            assert_int_equal(g8[i], u8);
        }
        vn_tensor *rs[] = {r32, r64, r8};
        release_all(rs, 3);
    }
    /* a few by hand */
    vn_tensor *sum = vn_add(x32, y32), *diff = vn_sub(x8, y8);
    int32_t sv[4];
    uint8_t dv[4];
    CHECK_OK(vn_tensor_copy_out(sum, sv, sizeof sv));
    CHECK_OK(vn_tensor_copy_out(diff, dv, sizeof dv));
    assert_true(sv[0] == INT32_MIN && sv[1] == -4 && sv[2] == 2);
    assert_true(dv[0] == 100 && dv[1] == 254 && dv[2] == 0);
    /* div and pow are f32 only; mixed dtypes are refused */
    assert_null(vn_div(x32, y32));
    assert_non_null(strstr(vn_last_error(), "i32"));
    assert_null(vn_pow(x64, y64));
    assert_null(vn_add(x32, x64));
    assert_non_null(strstr(vn_last_error(), "i32"));
    assert_non_null(strstr(vn_last_error(), "i64"));
    vn_tensor *all[] = {x32, y32, x64, y64, x8, y8, sum, diff};
    release_all(all, 8);
}

/* ---- broadcasting ------------------------------------------------------------ */

static void test_broadcast(void **state)
{
    /* (3,1) + (1,4) → (3,4) */
    const int64_t s31[] = {3, 1}, s14[] = {1, 4}, s34[] = {3, 4};
    const float cv[] = {1, 2, 3}, rv[] = {10, 20, 30, 40};
    vn_tensor *col = tf32(2, s31, cv), *row = tf32(2, s14, rv);
    vn_tensor *o = vn_add(col, row), *m = vn_sub(row, col);
    CHECK_PTR(o); CHECK_PTR(m);
    expect_shape(o, 2, s34);
    double *ov = vals(o), *mv = vals(m);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            assert_true(ov[i * 4 + j] == cv[i] + rv[j]);
            assert_true(mv[i * 4 + j] == rv[j] - cv[i]);
        }
    free(ov);
    free(mv);
    /* 0-d scalar on either side */
    float two = 2;
    vn_tensor *sc = vn_from_data(VN_F32, 0, NULL, &two);
    vn_tensor *sm = vn_mul(sc, row), *sd = vn_div(row, sc);
    expect_shape(sm, 2, s14);
    double *smv = vals(sm), *sdv = vals(sd);
    for (int j = 0; j < 4; j++) assert_true(smv[j] == 2 * rv[j] && sdv[j] == rv[j] / 2);
    free(smv);
    free(sdv);
    vn_tensor *ss = vn_add(sc, sc);
    assert_int_equal(vn_tensor_ndim(ss), 0);
    double v;
    CHECK_OK(vn_tensor_item(ss, &v));
    assert_true(v == 4);
    /* 3-D: (2,1,3) * (4,1) → (2,4,3) */
    const int64_t s213[] = {2, 1, 3}, s41[] = {4, 1}, s243[] = {2, 4, 3};
    vn_tensor *p = trand(3, s213, -1, 1, 3), *q = trand(2, s41, -1, 1, 4), *pq = vn_mul(p, q);
    expect_shape(pq, 3, s243);
    double *pv = vals(p), *qv = vals(q), *pqv = vals(pq);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 3; k++)
                assert_true(pqv[(i * 4 + j) * 3 + k] == (double)(float)(pv[i * 3 + k] * qv[j]));
    free(pv);
    free(qv);
    free(pqv);
    /* bias add (N, C) + (C), big enough for the threaded path */
    const int64_t snc[] = {64, 1000}, sc_[] = {1000};
    vn_tensor *x = trand(2, snc, -1, 1, 5), *bias = trand(1, sc_, -1, 1, 6), *y = vn_add(x, bias);
    const float *xp = vn_tensor_data(x), *bp = vn_tensor_data(bias), *yp = vn_tensor_data(y);
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 1000; j++) assert_true(yp[i * 1000 + j] == xp[i * 1000 + j] + bp[j]);
    /* a column (N, 1) against (N, C): x - max per row, the softmax shape */
    const int64_t sn1[] = {64, 1};
    vn_tensor *c = trand(2, sn1, -1, 1, 7), *yc = vn_sub(x, c);
    const float *cp = vn_tensor_data(c), *ycp = vn_tensor_data(yc);
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 1000; j++) assert_true(ycp[i * 1000 + j] == xp[i * 1000 + j] - cp[i]);
    /* shapes that do not broadcast: the message names both */
    const int64_t s23[] = {2, 3}, s4[] = {4};
    vn_tensor *e1 = vn_zeros(VN_F32, 2, s23), *e2 = vn_zeros(VN_F32, 1, s4);
    assert_null(vn_add(e1, e2));
    assert_non_null(strstr(vn_last_error(), "add"));
    assert_non_null(strstr(vn_last_error(), "(2, 3)"));
    assert_non_null(strstr(vn_last_error(), "(4,)"));
    assert_null(vn_mul(col, e1)); /* (3,1) vs (2,3) */
    assert_non_null(strstr(vn_last_error(), "(3, 1)"));
    assert_non_null(strstr(vn_last_error(), "(2, 3)"));
    vn_tensor *all[] = {col, row, o, m, sc, sm, sd, ss, p, q, pq, x, bias, y, c, yc, e1, e2};
    release_all(all, 18);
}

static void test_noncontiguous(void **state)
{
    /* transposed (3,2)ᵀ + (2,3) and a narrowed view */
    const int64_t s32[] = {3, 2}, s23[] = {2, 3};
    vn_tensor *a = trand(2, s32, -1, 1, 10), *b = trand(2, s23, -1, 1, 11);
    vn_tensor *at = vn_transpose(a, 0, 1), *sum = vn_add(at, b);
    CHECK_PTR(sum);
    expect_shape(sum, 2, s23);
    double *av = vals(a), *bv = vals(b), *sv = vals(sum);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) assert_true(sv[i * 3 + j] == (double)(float)(av[j * 2 + i] + bv[i * 3 + j]));
    free(sv);
    vn_tensor *nb = vn_narrow(b, 1, 1, 2), *ex = vn_exp(nb); /* columns 1..2 */
    double *ev = vals(ex);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) assert_true(fabs(ev[i * 2 + j] - exp(bv[i * 3 + j + 1])) < 1e-6);
    free(ev);
    free(av);
    free(bv);
    /* a large transposed operand: the threaded loop splits runs mid-row */
    const int64_t sbig[] = {301, 203}, sbt[] = {203, 301};
    vn_tensor *big = trand(2, sbig, -1, 1, 12), *bt = vn_transpose(big, 0, 1);
    vn_tensor *other = trand(2, sbt, -1, 1, 13), *prod = vn_mul(bt, other);
    const float *gp = vn_tensor_data(big), *op = vn_tensor_data(other), *pp = vn_tensor_data(prod);
    for (int i = 0; i < 203; i++)
        for (int j = 0; j < 301; j++) assert_true(pp[i * 301 + j] == gp[j * 203 + i] * op[i * 301 + j]);
    vn_tensor *all[] = {a, b, at, sum, nb, ex, big, bt, other, prod};
    release_all(all, 10);
}

/* ---- comparisons ----------------------------------------------------------- */

static void test_compare(void **state)
{
    const int64_t s31[] = {3, 1}, s3[] = {3};
    const float af[] = {1, 2, 3}, bf[] = {2, 2, 1};
    const int64_t ai[] = {1, 2, 3}, bi[] = {2, 2, 1};
    vn_tensor *a[2] = {tf32(2, s31, af), vn_from_data(VN_I64, 2, s31, ai)};
    vn_tensor *b[2] = {tf32(1, s3, bf), vn_from_data(VN_I64, 1, s3, bi)};
    vn_tensor *(*ops[6])(const vn_tensor *, const vn_tensor *) = {vn_eq, vn_ne, vn_lt, vn_le, vn_gt, vn_ge};
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 6; k++) {
            vn_tensor *r = ops[k](a[d], b[d]);
            CHECK_PTR(r);
            assert_int_equal(vn_tensor_dtype(r), VN_U8);
            const int64_t s33[] = {3, 3};
            expect_shape(r, 2, s33);
            uint8_t got[9];
            CHECK_OK(vn_tensor_copy_out(r, got, sizeof got));
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++) {
                    float x = af[i], y = bf[j];
                    int want = k == 0 ? x == y : k == 1 ? x != y : k == 2 ? x < y : k == 3 ? x <= y
                             : k == 4 ? x > y : x >= y;
                    assert_int_equal(got[i * 3 + j], want);
                }
            vn_tensor_release(r);
        }
    assert_null(vn_lt(a[0], b[1]));
    assert_non_null(strstr(vn_last_error(), "f32"));
    release_all(a, 2);
    release_all(b, 2);
}

/* ---- unary ops -------------------------------------------------------------- */

static double ref_gelu(double x)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static void test_unary_f32(void **state)
{
    const int64_t s[] = {7};
    const float xv[] = {-3, -1, -0.25f, 0, 0.5f, 1, 2.5f};
    vn_tensor *x = tf32(1, s, xv), *ax = vn_abs(x);
    struct { vn_tensor *t; double (*ref)(double); } cases[] = {
        {vn_exp(x), exp}, {vn_log(ax), log}, {vn_sqrt(ax), sqrt}, {vn_tanh(x), tanh}, {vn_gelu(x), ref_gelu},
    };
    for (int k = 0; k < 5; k++) {
        CHECK_PTR(cases[k].t);
        double *got = vals(cases[k].t);
        for (int i = 0; i < 7; i++) {
            double want = cases[k].ref(k == 1 || k == 2 ? fabs(xv[i]) : xv[i]); /* log, sqrt of |x| */
            if (isinf(want)) assert_true(isinf(got[i]) && got[i] < 0); /* log 0 */
            else assert_true(fabs(got[i] - want) <= 2e-6 * (1 + fabs(want)));
        }
        free(got);
        vn_tensor_release(cases[k].t);
    }
    /* gelu(1) by hand: 0.5·(1 + tanh(0.79788456·1.044715)) = 0.8411920 */
    double *g = NULL;
    vn_tensor *ge = vn_gelu(x);
    g = vals(ge);
    assert_true(fabs(g[5] - 0.841192) < 1e-6);
    free(g);
    vn_tensor *sg = vn_sigmoid(x), *re = vn_relu(x), *ng = vn_neg(x), *p3 = vn_pow_scalar(x, 3);
    vn_tensor *p2 = vn_pow_scalar(x, 2), *ph = vn_pow_scalar(ax, -0.5);
    vn_tensor *cl = vn_clamp(x, -1, 1), *clo = vn_clamp(x, NAN, 0.5), *chi = vn_clamp(x, 0, NAN);
    double *sv = vals(sg), *rv = vals(re), *nv = vals(ng), *p3v = vals(p3), *p2v = vals(p2), *phv = vals(ph);
    double *cv = vals(cl), *clov = vals(clo), *chiv = vals(chi), *av = vals(ax);
    for (int i = 0; i < 7; i++) {
        double xi = xv[i];
        assert_true(fabs(sv[i] - 1 / (1 + exp(-xi))) < 1e-6);
        assert_true(rv[i] == (xi > 0 ? xi : 0));
        assert_true(nv[i] == -xi && av[i] == fabs(xi));
        assert_true(fabs(p3v[i] - xi * xi * xi) < 1e-5 * (1 + fabs(xi * xi * xi)));
        assert_true(p2v[i] == (double)(float)(xi * xi));
        if (xi != 0) assert_true(fabs(phv[i] - 1 / sqrt(fabs(xi))) < 1e-6);
        assert_true(cv[i] == fmin(fmax(xi, -1), 1));
        assert_true(clov[i] == fmin(xi, 0.5));
        assert_true(chiv[i] == fmax(xi, 0));
    }
    /* tanh to a few ulp over its range: tiny, near 0.1, moderate, saturated */
    const float tv[] = {1e-6f, -0.003f, 0.0999f, 0.1f, -0.5f, 1.7f, 9, -30};
    const int64_t s8[] = {8};
    vn_tensor *tx = tf32(1, s8, tv), *th = vn_tanh(tx);
    double *thv = vals(th);
    for (int i = 0; i < 8; i++) assert_true(fabs(thv[i] - tanh(tv[i])) <= 3e-7 * fabs(tanh(tv[i])));
    free(thv);
    vn_tensor_release(tx);
    vn_tensor_release(th);
    /* sigmoid saturates cleanly; relu keeps nan */
    const float ext[] = {-200, 200, NAN};
    const int64_t s3[] = {3};
    vn_tensor *e = tf32(1, s3, ext), *se = vn_sigmoid(e), *rn = vn_relu(e);
    double *sev = vals(se), *rnv = vals(rn);
    assert_true(sev[0] == 0 && sev[1] == 1 && isnan(rnv[2]));
    /* f32 only */
    vn_tensor *ix = vn_to_dtype(x, VN_I32);
    vn_tensor *(*f32only[])(const vn_tensor *) = {vn_exp, vn_log, vn_sqrt, vn_relu, vn_gelu, vn_tanh, vn_sigmoid};
    for (int k = 0; k < 7; k++) {
        assert_null(f32only[k](ix));
        assert_non_null(strstr(vn_last_error(), "i32"));
    }
    assert_null(vn_clamp(ix, 0.5, 1)); /* integers clamp (test_tensor_functions.c), to whole bounds */
    assert_non_null(strstr(vn_last_error(), "i32"));
    assert_null(vn_exp(NULL));
    assert_non_null(strstr(vn_last_error(), "NULL"));
    double *frees[] = {sv, rv, nv, p3v, p2v, phv, cv, clov, chiv, av, sev, rnv};
    for (int k = 0; k < 12; k++) free(frees[k]);
    vn_tensor *all[] = {x, ax, ge, sg, re, ng, p3, p2, ph, cl, clo, chi, e, se, rn, ix};
    release_all(all, 16);
}

static void test_unary_int(void **state)
{
    const int64_t s[] = {4};
    const int32_t a32[] = {INT32_MIN, -5, 0, 7};
    const int64_t a64[] = {INT64_MIN, -5, 0, 7};
    const uint8_t a8[] = {0, 1, 128, 255};
    vn_tensor *x32 = vn_from_data(VN_I32, 1, s, a32), *x64 = vn_from_data(VN_I64, 1, s, a64);
    vn_tensor *x8 = vn_from_data(VN_U8, 1, s, a8);
    vn_tensor *n32 = vn_neg(x32), *b32 = vn_abs(x32), *n64 = vn_neg(x64), *b64 = vn_abs(x64);
    vn_tensor *n8 = vn_neg(x8), *b8 = vn_abs(x8);
    int32_t gn32[4], gb32[4];
    int64_t gn64[4], gb64[4];
    uint8_t gn8[4], gb8[4];
    CHECK_OK(vn_tensor_copy_out(n32, gn32, sizeof gn32));
    CHECK_OK(vn_tensor_copy_out(b32, gb32, sizeof gb32));
    CHECK_OK(vn_tensor_copy_out(n64, gn64, sizeof gn64));
    CHECK_OK(vn_tensor_copy_out(b64, gb64, sizeof gb64));
    CHECK_OK(vn_tensor_copy_out(n8, gn8, sizeof gn8));
    CHECK_OK(vn_tensor_copy_out(b8, gb8, sizeof gb8));
    /* the most negative value wraps to itself, as in two's complement */
    assert_true(gn32[0] == INT32_MIN && gn32[1] == 5 && gn32[2] == 0 && gn32[3] == -7);
    assert_true(gb32[0] == INT32_MIN && gb32[1] == 5 && gb32[3] == 7);
    assert_true(gn64[0] == INT64_MIN && gn64[1] == 5 && gn64[3] == -7);
    assert_true(gb64[1] == 5 && gb64[2] == 0 && gb64[3] == 7);
    assert_true(gn8[0] == 0 && gn8[1] == 255 && gn8[2] == 128 && gn8[3] == 1);
    assert_true(memcmp(gb8, a8, 4) == 0);
    assert_int_equal(vn_tensor_dtype(n8), VN_U8);
    vn_tensor *all[] = {x32, x64, x8, n32, b32, n64, b64, n8, b8};
    release_all(all, 9);
}

/* ---- where, masked_fill, dropout ---------------------------------------- */

static void test_where_masked_fill(void **state)
{
    const int64_t s31[] = {3, 1}, s14[] = {1, 4}, s34[] = {3, 4};
    const uint8_t cv[] = {1, 0, 2};
    const int64_t av[] = {10, 20, 30, 40}, bv = -1;
    vn_tensor *c = vn_from_data(VN_U8, 2, s31, cv), *a = vn_from_data(VN_I64, 2, s14, av);
    vn_tensor *b = vn_from_data(VN_I64, 0, NULL, &bv), *w = vn_where(c, a, b);
    CHECK_PTR(w);
    expect_shape(w, 2, s34);
    assert_int_equal(vn_tensor_dtype(w), VN_I64);
    int64_t wv[12];
    CHECK_OK(vn_tensor_copy_out(w, wv, sizeof wv));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) assert_true(wv[i * 4 + j] == (cv[i] ? av[j] : -1));
    /* masked_fill on f32 and i32; the mask broadcasts to the input */
    vn_tensor *x = trand(2, s34, -1, 1, 20), *mf = vn_masked_fill(x, c, 7.5);
    double *xv = vals(x), *mv = vals(mf);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) assert_true(mv[i * 4 + j] == (cv[i] ? 7.5 : xv[i * 4 + j]));
    vn_tensor *xi = vn_to_dtype(x, VN_I32), *mi = vn_masked_fill(xi, c, -3.9);
    int32_t miv[12];
    CHECK_OK(vn_tensor_copy_out(mi, miv, sizeof miv));
    for (int j = 0; j < 4; j++) assert_true(miv[j] == -3 && miv[8 + j] == -3 && miv[4 + j] == 0);
    /* errors */
    const int64_t s4[] = {4};
    vn_tensor *fl = vn_zeros(VN_F32, 1, s4), *bad = vn_zeros(VN_F32, 2, s31);
    assert_null(vn_where(fl, a, b)); /* f32 condition */
    assert_non_null(strstr(vn_last_error(), "u8"));
    assert_null(vn_where(c, a, fl)); /* i64 vs f32 */
    vn_tensor *wide = vn_zeros(VN_U8, 2, s34);
    assert_null(vn_masked_fill(bad, wide, 1)); /* mask (3,4) is bigger than (3,1) */
    assert_non_null(strstr(vn_last_error(), "(3, 4)"));
    assert_non_null(strstr(vn_last_error(), "(3, 1)"));
    vn_tensor *u8 = vn_zeros(VN_U8, 1, s4);
    vn_tensor *m4 = vn_ones(VN_U8, 1, s4);
    assert_null(vn_masked_fill(u8, m4, 300));
    assert_non_null(strstr(vn_last_error(), "300"));
    free(xv);
    free(mv);
    vn_tensor *all[] = {c, a, b, w, x, mf, xi, mi, fl, bad, wide, u8, m4};
    release_all(all, 13);
}

static void test_dropout(void **state)
{
    const int64_t s[] = {100, 100};
    vn_tensor *x = trand(2, s, 0.5, 1.5, 30);
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    vn_manual_seed(7);
    vn_tensor *y = vn_dropout(x, 0.3, true);
    vn_manual_seed(7);
    vn_tensor *y2 = vn_dropout(x, 0.3, true);
    vn_tensor *y3 = vn_dropout(x, 0.3, true);
    CHECK_PTR(y); CHECK_PTR(y2); CHECK_PTR(y3);
    assert_true(max_rel_diff(y, y2) == 0); /* same seed, same mask */
    assert_true(max_rel_diff(y, y3) > 0);  /* the stream moves on */
    const float *xp = vn_tensor_data(x), *yp = vn_tensor_data(y);
    int zeros = 0;
    for (int i = 0; i < 10000; i++) {
        if (yp[i] == 0) zeros++;
        else assert_true(fabsf(yp[i] - xp[i] / 0.7f) <= 1e-6f * fabsf(yp[i]));
    }
    /* 10000 Bernoulli(0.3): sd ≈ 46, allow 5 sd */
    assert_true(abs(zeros - 3000) < 230);
    /* backward: the same mask and scale */
    vn_tensor *l = vn_sum_all(y);
    CHECK_OK(vn_backward(l, NULL));
    const float *g = vn_tensor_data(vn_tensor_grad(x));
    for (int i = 0; i < 10000; i++)
        assert_true(yp[i] == 0 ? g[i] == 0 : fabsf(g[i] - 1 / 0.7f) < 1e-6f);
    /* eval mode and p = 0: same values in a new tensor, gradient 1 */
    vn_tensor_zero_grad(x);
    vn_tensor *e = vn_dropout(x, 0.3, false), *z = vn_dropout(x, 0, true);
    assert_true(e != x && z != x);
    assert_true(max_rel_diff(e, x) == 0 && max_rel_diff(z, x) == 0);
    vn_tensor *le = vn_sum_all(e);
    CHECK_OK(vn_backward(le, NULL));
    g = vn_tensor_data(vn_tensor_grad(x));
    for (int i = 0; i < 10000; i++) assert_true(g[i] == 1);
    vn_tensor_free(e); /* freeing the result leaves the input alive */
    assert_false(vn_tensor_is_freed(x));
    /* p out of range */
    assert_null(vn_dropout(x, 1, true));
    assert_non_null(strstr(vn_last_error(), "p = 1"));
    assert_null(vn_dropout(x, -0.1, true));
    /* a NaN p is refused, and the message says "nan" whatever its sign bit
     * (glibc's printf writes "-nan" for the NaN that 0/0 gives) */
    volatile double zero = 0;
    double nan_neg = -(zero / zero);
    if (!signbit(nan_neg)) nan_neg = -nan_neg;
    assert_null(vn_dropout(x, nan_neg, true));
    assert_non_null(strstr(vn_last_error(), "p = nan"));
    assert_null(strstr(vn_last_error(), "-nan"));
    vn_tensor *all[] = {x, y, y2, y3, l, e, z, le};
    release_all(all, 8);
}

/* ---- gradients ------------------------------------------------------------ */

typedef vn_tensor *(*binop)(const vn_tensor *, const vn_tensor *);
typedef vn_tensor *(*unop)(const vn_tensor *);

static vn_tensor *f_binary(vn_tensor **in, void *ctx) { return ((binop)ctx)(in[0], in[1]); }

/* The first input transposed, so the op reads a non-contiguous view. */
static vn_tensor *f_binary_t(vn_tensor **in, void *ctx)
{
    vn_tensor *t = vn_transpose(in[0], 0, 1), *out = ((binop)ctx)(t, in[1]);
    vn_tensor_release(t);
    return out;
}

static vn_tensor *f_unary(vn_tensor **in, void *ctx) { return ((unop)ctx)(in[0]); }

static vn_tensor *f_unary_t(vn_tensor **in, void *ctx)
{
    vn_tensor *t = vn_transpose(in[0], 0, 1), *out = ((unop)ctx)(t);
    vn_tensor_release(t);
    return out;
}

static vn_tensor *leaf(int ndim, const int64_t *shape, double lo, double hi, unsigned seed)
{
    vn_tensor *t = trand(ndim, shape, lo, hi, seed);
    CHECK_OK(vn_tensor_set_requires_grad(t, true));
    return t;
}

static void test_grad_binary(void **state)
{
    binop ops[] = {vn_add, vn_sub, vn_mul, vn_div, vn_pow};
    const int64_t s23[] = {2, 3}, s31[] = {3, 1}, s14[] = {1, 4}, s3[] = {3}, s32[] = {3, 2};
    for (int k = 0; k < 5; k++) {
        /* positive bases keep pow and div smooth */
        vn_tensor *in[2] = {leaf(2, s23, 0.5, 2, 40 + k), leaf(2, s23, 0.5, 2, 50 + k)};
        gradcheck(f_binary, in, 2, (void *)ops[k], 1e-3, 1e-2);
        release_all(in, 2);
        /* broadcasting (3,1) with (1,4), and a bias (2,3) with (3) */
        vn_tensor *bc[2] = {leaf(2, s31, 0.5, 2, 60 + k), leaf(2, s14, 0.5, 2, 70 + k)};
        gradcheck(f_binary, bc, 2, (void *)ops[k], 1e-3, 1e-2);
        release_all(bc, 2);
        vn_tensor *bias[2] = {leaf(2, s23, 0.5, 2, 80 + k), leaf(1, s3, 0.5, 2, 90 + k)};
        gradcheck(f_binary, bias, 2, (void *)ops[k], 1e-3, 1e-2);
        release_all(bias, 2);
        /* only one side requires grad; 0-d scalar on the other */
        float sv = 1.25f;
        vn_tensor *sc[2] = {leaf(2, s23, 0.5, 2, 95 + k), vn_from_data(VN_F32, 0, NULL, &sv)};
        gradcheck(f_binary, sc, 2, (void *)ops[k], 1e-3, 1e-2);
        release_all(sc, 2);
        /* a transposed (3,2) view against (2,3) */
        vn_tensor *nc[2] = {leaf(2, s32, 0.5, 2, 100 + k), leaf(2, s23, 0.5, 2, 110 + k)};
        gradcheck(f_binary_t, nc, 2, (void *)ops[k], 1e-3, 1e-2);
        release_all(nc, 2);
    }
}

/* y = x·x and z = x + x: one input reaching an op twice gets both shares. */
static vn_tensor *f_twice(vn_tensor **in, void *ctx)
{
    vn_tensor *y = vn_mul(in[0], in[0]), *z = vn_add(in[0], in[0]), *out = vn_add(y, z);
    vn_tensor_release(y);
    vn_tensor_release(z);
    return out;
}

static void test_grad_twice(void **state)
{
    const int64_t s[] = {2, 3};
    vn_tensor *x = leaf(2, s, -1, 1, 120);
    gradcheck(f_twice, &x, 1, NULL, 1e-3, 1e-2);
    /* and exactly: d/dx Σ(x² + 2x) = 2x + 2 */
    vn_tensor *o = f_twice(&x, NULL), *l = vn_sum_all(o);
    vn_tensor_zero_grad(x);
    CHECK_OK(vn_backward(l, NULL));
    const float *xp = vn_tensor_data(x), *gp = vn_tensor_data(vn_tensor_grad(x));
    for (int i = 0; i < 6; i++) assert_true(fabsf(gp[i] - (2 * xp[i] + 2)) < 1e-6f);
    vn_tensor *all[] = {x, o, l};
    release_all(all, 3);
}

static vn_tensor *pow3(const vn_tensor *t) { return vn_pow_scalar(t, 3); }
static vn_tensor *pow2(const vn_tensor *t) { return vn_pow_scalar(t, 2); }
static vn_tensor *pow_mhalf(const vn_tensor *t) { return vn_pow_scalar(t, -0.5); }
static vn_tensor *clamp_both(const vn_tensor *t) { return vn_clamp(t, -0.5, 0.5); }
static vn_tensor *clamp_lo(const vn_tensor *t) { return vn_clamp(t, -0.5, NAN); }

static void test_grad_unary(void **state)
{
    /* smooth ops on random inputs in their domain */
    struct { unop f; double lo, hi; } smooth[] = {
        {vn_neg, -2, 2}, {vn_exp, -2, 2}, {vn_log, 0.2, 3}, {vn_sqrt, 0.2, 3}, {pow2, -2, 2},
        {pow3, -2, 2}, {pow_mhalf, 0.3, 3}, {vn_gelu, -3, 3}, {vn_tanh, -2, 2}, {vn_sigmoid, -3, 3},
    };
    const int64_t s[] = {2, 3}, st[] = {3, 2};
    for (size_t k = 0; k < sizeof smooth / sizeof smooth[0]; k++) {
        vn_tensor *x = leaf(2, s, smooth[k].lo, smooth[k].hi, 130 + (unsigned)k);
        gradcheck(f_unary, &x, 1, (void *)smooth[k].f, 1e-3, 1e-2);
        vn_tensor *xt = leaf(2, st, smooth[k].lo, smooth[k].hi, 150 + (unsigned)k);
        gradcheck(f_unary_t, &xt, 1, (void *)smooth[k].f, 1e-3, 1e-2);
        vn_tensor_release(x);
        vn_tensor_release(xt);
    }
    /* kinks (relu, abs, clamp): inputs kept away from them */
    const float kv[] = {-1.5f, -0.7f, -0.2f, 0.3f, 0.6f, 1.4f};
    unop kinked[] = {vn_relu, vn_abs, clamp_both, clamp_lo};
    for (int k = 0; k < 4; k++) {
        vn_tensor *x = tf32(2, s, kv);
        CHECK_OK(vn_tensor_set_requires_grad(x, true));
        gradcheck(f_unary, &x, 1, (void *)kinked[k], 1e-3, 1e-2);
        gradcheck(f_unary_t, &x, 1, (void *)kinked[k], 1e-3, 1e-2);
        vn_tensor_release(x);
    }
    /* the gelu derivative against the closed form at a few points */
    const float gv[] = {-2, -0.5f, 0, 0.5f, 1, 3};
    vn_tensor *x = tf32(2, s, gv);
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    vn_tensor *y = vn_gelu(x), *l = vn_sum_all(y);
    CHECK_OK(vn_backward(l, NULL));
    const float *g = vn_tensor_data(vn_tensor_grad(x));
    for (int i = 0; i < 6; i++) {
        double h = 1e-4, num = (ref_gelu(gv[i] + h) - ref_gelu(gv[i] - h)) / (2 * h);
        assert_true(fabs(g[i] - num) < 1e-5);
    }
    vn_tensor *all[] = {x, y, l};
    release_all(all, 3);
}

static vn_tensor *f_where(vn_tensor **in, void *ctx) { return vn_where((vn_tensor *)ctx, in[0], in[1]); }
static vn_tensor *f_masked(vn_tensor **in, void *ctx) { return vn_masked_fill(in[0], (vn_tensor *)ctx, -2); }

static void test_grad_where(void **state)
{
    const int64_t s31[] = {3, 1}, s14[] = {1, 4}, s34[] = {3, 4};
    const uint8_t cv[] = {1, 0, 1};
    vn_tensor *c = vn_from_data(VN_U8, 2, s31, cv);
    vn_tensor *in[2] = {leaf(2, s14, -1, 1, 170), leaf(2, s34, -1, 1, 171)};
    gradcheck(f_where, in, 2, c, 1e-3, 1e-2);
    vn_tensor *x = leaf(2, s34, -1, 1, 172);
    gradcheck(f_masked, &x, 1, c, 1e-3, 1e-2);
    /* the gradient is exactly 0 where filled, 1 elsewhere */
    vn_tensor *y = vn_masked_fill(x, c, 0), *l = vn_sum_all(y);
    vn_tensor_zero_grad(x);
    CHECK_OK(vn_backward(l, NULL));
    const float *g = vn_tensor_data(vn_tensor_grad(x));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) assert_true(g[i * 4 + j] == (cv[i] ? 0 : 1));
    vn_tensor *all[] = {c, in[0], in[1], x, y, l};
    release_all(all, 6);
}

/* Integer ops and comparisons record nothing. */
static void test_no_grad_paths(void **state)
{
    const int64_t s[] = {3};
    vn_tensor *x = leaf(1, s, -1, 1, 180);
    vn_tensor *c = vn_gt(x, x), *n = vn_neg(x);
    assert_false(vn_tensor_requires_grad(c));
    assert_true(vn_tensor_requires_grad(n));
    assert_string_equal(vn_tensor_grad_fn_name(n), "neg");
    bool was = vn_set_grad_enabled(false);
    vn_tensor *m = vn_mul(x, x);
    vn_set_grad_enabled(was);
    assert_false(vn_tensor_requires_grad(m));
    vn_tensor *all[] = {x, c, n, m};
    release_all(all, 4);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_binary_f32),      cmocka_unit_test(test_binary_int),
        cmocka_unit_test(test_broadcast),       cmocka_unit_test(test_noncontiguous),
        cmocka_unit_test(test_compare),         cmocka_unit_test(test_unary_f32),
        cmocka_unit_test(test_unary_int),       cmocka_unit_test(test_where_masked_fill),
        cmocka_unit_test(test_dropout),         cmocka_unit_test(test_grad_binary),
        cmocka_unit_test(test_grad_twice),      cmocka_unit_test(test_grad_unary),
        cmocka_unit_test(test_grad_where),      cmocka_unit_test(test_no_grad_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
