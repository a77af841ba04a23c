/* The vectorized loops of engine/vec_math.c: gelu against gelu computed in
 * double (tanh form), and against kernels/scalar.h's float formulas (what
 * the strided path and the CUDA kernels compute): within a few float ulps
 * over [-12, 12] on a fine grid, lengths that leave a vector tail, NaN kept;
 * the backward written over its gradient bit for bit as into a new array;
 * the softmax's shifted exp against exp in double; the row max against the
 * plain loop. */
#include "gradcheck.h"
#include "scalar.h"
#include "vec_math.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define N 24001 /* x = -12 .. 12 in steps of 1e-3: odd, so the loops have a tail */

/* 0.5·x·(1 + tanh u) as x/(1 + e^(−2u)): no cancellation for negative x */
static double gelu_ref(double x)
{
    return x / (1 + exp(-2 * sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double gelu_grad_ref(double x)
{
    double k = sqrt(2 / M_PI), t = tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

/* |got − want| <= r·|want| + abs. r = rel + 3e-7·|2u|: in float the
 * argument 2u of e^(−2u) is rounded (relative 6e-8), which e^ turns into a
 * relative error of |2u|·6e-8 in the result, for any float formula. */
static void check(const char *what, const float *got, const double *want, const float *x,
                  double rel, double abs)
{
    for (int i = 0; i < N; i++) {
        double u2 = 2 * sqrt(2 / M_PI) * fabs(x[i] + 0.044715 * x[i] * x[i] * x[i]);
        if (!(fabs(got[i] - want[i]) <= (rel + 3e-7 * u2) * fabs(want[i]) + abs))
            fail_msg("%s(%.9g) = %.9g, expected %.9g", what, (double)x[i], (double)got[i],
                     want[i]);
    }
}

static void test_gelu(void **state)
{
    (void)state;
    float *x = malloc(sizeof(float) * N * 4), *y = x + N, *g = y + N, *dy = g + N;
    double *want = malloc(sizeof(double) * N * 2), *scal = want + N;
    assert_non_null(x);
    assert_non_null(want);
    for (int i = 0; i < N; i++) {
        x[i] = (float)(-12.0 + 1e-3 * i);
        g[i] = (float)(0.5 + 1e-4 * (i % 1000)); /* an upstream gradient */
    }
    vn__gelu_f32(y, x, N);
    for (int i = 0; i < N; i++) want[i] = gelu_ref(x[i]), scal[i] = gelu_f(x[i]);
    /* relative accuracy down to ~1e-36; below, the clamped exp gives ~-1e-36
     * where gelu is smaller still. scalar.h's tanh form is 0 where its float
     * tanh rounds to −1 (x < −5, gelu > −1e-6): an absolute bound there. */
    check("gelu", y, want, x, 2e-6, 1e-36);
    check("gelu vs scalar.h", y, scal, x, 4e-6, 1e-6);
    vn__gelu_backward_f32(dy, g, x, N);
    for (int i = 0; i < N; i++)
        want[i] = g[i] * gelu_grad_ref(x[i]), scal[i] = g[i] * gelu_grad(x[i]);
    /* gelu' crosses 0 near x = -0.75: there an absolute bound */
    check("gelu'", dy, want, x, 2e-6, 1e-7);
    check("gelu' vs scalar.h", dy, scal, x, 4e-6, 1e-6);
    /* written over g: the same bits, at every length of vector tail */
    for (int len = N - 16; len <= N; len++) {
        memcpy(y, g, sizeof(float) * N);
        vn__gelu_backward_inplace_f32(y, x, len);
        for (int i = 0; i < N; i++)
            if (memcmp(&y[i], i < len ? &dy[i] : &g[i], sizeof(float)))
                fail_msg("in place, length %d: [%d] = %.9g, expected %.9g", len, i, (double)y[i],
                         (double)(i < len ? dy[i] : g[i]));
    }
    free(x);
    free(want);
}

static void test_gelu_special(void **state)
{
    (void)state;
    float x[5] = {NAN, 0.0f, -0.0f, 100.0f, -100.0f}, y[5], d[5], one[5] = {1, 1, 1, 1, 1};
    vn__gelu_f32(y, x, 5);
    vn__gelu_backward_f32(d, one, x, 5);
    assert_true(isnan(y[0]) && isnan(d[0]));
    assert_true(y[1] == 0 && y[2] == 0 && fabsf(d[1] - 0.5f) < 1e-7f);
    assert_true(y[3] == 100.0f && fabsf(d[3] - 1.0f) < 1e-7f);
    assert_true(fabsf(y[4]) < 1e-30f && fabsf(d[4]) < 1e-30f);
}

/* The softmax rows' exp: e^(x − shift)·scale over [−87, 0] (scores minus
 * their row max) within 3e-7 relative of exp in double (the rounding of
 * x − shift is exact here: both within a factor 2 or shift = 0). */
static void test_exp_shift(void **state)
{
    (void)state;
    enum { n = 8701 }; /* odd: a vector tail */
    float *x = malloc(sizeof(float) * n);
    assert_non_null(x);
    for (int i = 0; i < n; i++) x[i] = (float)(-87.0 + 1e-2 * i);
    vn__exp_shift_f32(x, n, 0.0f, 0.25f);
    for (int i = 0; i < n; i++) {
        double want = 0.25 * exp((double)(float)(-87.0 + 1e-2 * i));
        if (!(fabs(x[i] - want) <= 3e-7 * want))
            fail_msg("exp_shift[%d] = %.9g, expected %.9g", i, (double)x[i], want);
    }
    float y[3] = {5.0f, 3.0f, NAN};
    vn__exp_shift_f32(y, 3, 5.0f, 1.0f);
    assert_true(y[0] == 1.0f && fabsf(y[1] - expf(-2.0f)) < 2e-7f && isnan(y[2]));
    free(x);
}

/* Whether the two paths' results at x agree: bit for bit in an optimized
 * build, where GCC fuses the portable loops' multiply-adds as the
 * intrinsics do; without optimization it fuses none, so there within the
 * rounding bounds of test_gelu (gelu' crosses 0: an absolute 1e-7). */
static bool agree(float a, float b, float x)
{
#ifdef __OPTIMIZE__
    (void)x;
    return !memcmp(&a, &b, sizeof a);
#else
    double u2 = 2 * sqrt(2 / M_PI) * fabs(x + 0.044715 * x * x * x);
    return (isnan(a) && isnan(b)) || a == b ||
           fabs((double)a - b) <= (4e-6 + 3e-7 * u2) * fabs((double)b) + 1e-7;
#endif
}

/* The AVX-512 gelu loops (where the CPU has AVX-512) and the portable
 * ones (VENOM_NO_AVX512 set) give the same bits (see agree): forward,
 * backward and backward in place, on the grid of test_gelu and on every
 * 4099th float bit pattern (infinities, NaNs, subnormals included), at
 * lengths 1..47. */
static void test_gelu_paths_agree(void **state)
{
    (void)state;
    enum { M = 2 * 524288 + 47 };
    float *x = malloc(sizeof(float) * M * 7), *g = x + M, *y[2], *d[2], *in[2];
    assert_non_null(x);
    y[0] = g + M, y[1] = y[0] + M, d[0] = y[1] + M, d[1] = d[0] + M, in[0] = d[1] + M;
    in[1] = malloc(sizeof(float) * M);
    assert_non_null(in[1]);
    int64_t n = 0;
    for (int i = 0; i < N; i++) x[n++] = (float)(-12.0 + 1e-3 * i);
    for (uint64_t b = 0; b < 0x100000000u && n < M; b += 4099) {
        uint32_t u = (uint32_t)b;
        memcpy(&x[n++], &u, sizeof u);
    }
    for (int64_t i = 0; i < n; i++) g[i] = (float)(0.5 + 1e-4 * (double)(i % 1000));
    for (int path = 0; path < 2; path++) {
        if (path) setenv("VENOM_NO_AVX512", "1", 1);
        vn__gelu_f32(y[path], x, n);
        vn__gelu_backward_f32(d[path], g, x, n);
        memcpy(in[path], g, sizeof(float) * (size_t)n);
        vn__gelu_backward_inplace_f32(in[path], x, n);
        for (int len = 1; len < 48; len++) { /* short lengths: the masked tail */
            float a[48], b[48], c[48];
            memcpy(c, g, sizeof c);
            vn__gelu_f32(a, x + N - 24, len);
            vn__gelu_backward_f32(b, g, x + N - 24, len);
            vn__gelu_backward_inplace_f32(c, x + N - 24, len);
            for (int i = 0; i < len; i++)
                if (memcmp(&a[i], &y[path][N - 24 + i], 4) || memcmp(&c[i], &b[i], 4))
                    fail_msg("path %d, length %d: element %d differs", path, len, i);
        }
        unsetenv("VENOM_NO_AVX512");
    }
    const char *what[3] = {"gelu", "gelu'", "gelu' in place"};
    float *pa[3] = {y[0], d[0], in[0]}, *pb[3] = {y[1], d[1], in[1]};
    for (int k = 0; k < 3; k++)
        for (int64_t i = 0; i < n; i++)
            if (!agree(pa[k][i], pb[k][i], x[i]))
                fail_msg("%s(%.9g): %.9g, portable %.9g", what[k], (double)x[i], (double)pa[k][i],
                         (double)pb[k][i]);
    free(in[1]);
    free(x);
}

/* vn__max_f32 against the plain left-to-right loop at every length up to 70
 * (vector bodies and tails), NaNs skipped, −inf for none; zeros compare
 * equal whatever their sign (either may come out). */
static void test_max(void **state)
{
    (void)state;
    float x[70];
    unsigned r = 12345;
    for (int trial = 0; trial < 200; trial++) {
        for (int i = 0; i < 70; i++) {
            r = r * 1103515245u + 12345u;
            int kind = (int)((r >> 16) % 16);
            x[i] = kind == 0 ? NAN : kind == 1 ? -INFINITY : kind == 2 ? -0.0f : kind == 3 ? 0.0f
                 : (float)((int)((r >> 8) % 2001) - 1800) * 0.01f; /* mostly negative */
        }
        for (int n = 0; n <= 70; n++) {
            float want = -INFINITY;
            for (int i = 0; i < n; i++) want = x[i] > want ? x[i] : want;
            float got = vn__max_f32(x, n);
            if (!(got == want))
                fail_msg("trial %d, length %d: max %.9g, expected %.9g", trial, n, (double)got,
                         (double)want);
        }
    }
    float nans[20];
    for (int i = 0; i < 20; i++) nans[i] = NAN;
    assert_true(vn__max_f32(nans, 20) == -INFINITY);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gelu), cmocka_unit_test(test_gelu_special),
                                       cmocka_unit_test(test_exp_shift), cmocka_unit_test(test_max),
                                       cmocka_unit_test(test_gelu_paths_agree)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
