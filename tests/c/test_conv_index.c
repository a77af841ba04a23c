/* The CUDA kernels of conv2d, im2col and pooling without a GPU: their loop
 * bodies (kernels/conv_index.h, the *_thread functions each GPU thread
 * runs) are replayed here on the CPU for every element of the grid and
 * compared with the CPU ops (engine/ops_conv.c, ops_pool.c): im2col,
 * col2im, max/avg/adaptive pooling forward and backward bit for bit (the
 * kernels add in the CPU's order), the convolution through the chunk
 * layout and the regrouping (with a plain GEMM in double standing in for
 * cuBLAS) within float rounding, and the window inversions (which outputs
 * see an input) against brute force. What is left for a GPU run to show is
 * the hardware, cuBLAS and the launch code (tests/gpu/test_conv.lua). */
#include "gradcheck.h"
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int64_t B, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw; } win_case;

/* Odd sizes; stride, padding and dilation mixed; windows that overlap, that
 * leave gaps (stride > kernel) and that cover the whole image. */
static const win_case cases[] = {
    {2, 3, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1},
    {1, 2, 9, 8, 3, 2, 2, 3, 1, 0, 2, 1},
    {3, 1, 5, 7, 2, 3, 1, 2, 1, 1, 1, 1},
    {2, 2, 11, 5, 1, 1, 3, 2, 0, 0, 1, 1},
    {1, 1, 4, 4, 4, 4, 1, 1, 0, 0, 1, 1},
    {2, 3, 13, 9, 3, 3, 2, 2, 1, 1, 1, 1},
    {1, 2, 8, 10, 2, 2, 3, 3, 1, 0, 1, 2},
};
#define NCASES (sizeof cases / sizeof cases[0])

static conv_geom geom_of(const win_case *c)
{
    conv_geom g = {c->B, c->C, c->H, c->W, c->kh, c->kw, c->sh, c->sw, c->ph, c->pw, c->dh, c->dw,
                   0, 0};
    g.Ho = (c->H + 2 * c->ph - c->dh * (c->kh - 1) - 1) / c->sh + 1;
    g.Wo = (c->W + 2 * c->pw - c->dw * (c->kw - 1) - 1) / c->sw + 1;
    return g;
}

static void expect_same(const float *got, const float *want, int64_t n, const char *what, size_t k)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)))
            fail_msg("case %zu, %s[%lld]: kernel body %.9g, CPU op %.9g", k, what, (long long)i,
                     got[i], want[i]);
}

static float *buffer(int64_t n)
{
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = NAN; /* poison: every element must be written */
    return p;
}

/* The gradient that reaches x when `out` (made from x) gets upstream g (a
 * new reference). */
static vn_tensor *grad_through(vn_tensor *x, vn_tensor *out, vn_tensor *g)
{
    CHECK_OK(vn_backward(out, g));
    vn_tensor *dx = vn_tensor_grad(x);
    CHECK_PTR(dx);
    return vn_tensor_retain(dx);
}

/* ---- which outputs see an input: the inversions against brute force ----------- */

static void test_window_inversions(void **state)
{
    (void)state;
    for (int64_t in = 1; in <= 9; in++)
        for (int64_t k = 1; k <= 4; k++)
            for (int64_t s = 1; s <= 3; s++)
                for (int64_t pad = 0; pad <= k / 2 + 1; pad++)
                    for (int adaptive = 0; adaptive < 2; adaptive++) {
                        int64_t out = adaptive ? k + s * 2 : (in + 2 * pad - k) / s + 1;
                        if (!adaptive && (in + 2 * pad < k || 2 * pad > k)) continue;
                        for (int64_t i = 0; i < in; i++) {
                            int64_t lo, hi, blo = -1, bhi = -1;
                            pool_outputs_of(i, in, out, k, s, pad, adaptive, &lo, &hi);
                            for (int64_t o = 0; o < out; o++) {
                                int64_t a, b;
                                pool_window(o, in, out, k, s, pad, adaptive, &a, &b);
                                if (a <= i && i < b) {
                                    if (blo < 0) blo = o;
                                    else if (bhi != o) fail_msg("outputs of %lld not contiguous",
                                                                (long long)i);
                                    bhi = o + 1;
                                }
                            }
                            if (blo < 0) blo = bhi = lo; /* none: any empty range */
                            if (lo != blo || hi != bhi)
                                fail_msg("pool_outputs_of(%lld; in %lld, out %lld, k %lld, s %lld, "
                                         "pad %lld, adaptive %d) = [%lld, %lld), brute force "
                                         "[%lld, %lld)", (long long)i, (long long)in,
                                         (long long)out, (long long)k, (long long)s,
                                         (long long)pad, adaptive, (long long)lo, (long long)hi,
                                         (long long)blo, (long long)bhi);
                        }
                    }
    for (int64_t i = 0; i < 12; i++)
        for (int64_t p = 0; p < 4; p++)
            for (int64_t s = 1; s <= 3; s++)
                for (int64_t pad = 0; pad <= 2; pad++)
                    for (int64_t d = 1; d <= 3; d++) {
                        int64_t want = -1, out = 6;
                        for (int64_t o = 0; o < out; o++)
                            if (o * s - pad + p * d == i) want = o;
                        assert_int_equal(conv_output_of(i, p, s, pad, d, out), want);
                    }
}

/* ---- im2col and col2im ---------------------------------------------------------- */

static void test_im2col_col2im(void **state)
{
    (void)state;
    for (size_t k = 0; k < NCASES; k++) {
        const win_case *c = &cases[k];
        conv_geom g = geom_of(c);
        int64_t K = g.C * g.kh * g.kw, L = g.Ho * g.Wo, N = g.B * g.C * g.H * g.W;
        int64_t xs[4] = {g.B, g.C, g.H, g.W}, cs[3] = {g.B, K, L};
        vn_tensor *x = gc_param(4, xs, -1, 1, (unsigned)k + 1);
        vn_tensor *cols = vn_im2col(x, (int64_t[]){c->kh, c->kw}, (int64_t[]){c->sh, c->sw},
                                    (int64_t[]){c->ph, c->pw}, (int64_t[]){c->dh, c->dw});
        CHECK_PTR(cols);
        float *xv = gc_values(x), *want = gc_values(cols), *got = buffer(g.B * K * L);
        for (int64_t t = 0; t < g.B * K * L; t++) im2col_thread(&g, got, xv, K * L, L, t);
        expect_same(got, want, g.B * K * L, "im2col", k);
        free(want);
        free(got);

        vn_tensor *up = trand(3, cs, -1, 1, 100 + (unsigned)k);
        vn_tensor *dx = grad_through(x, cols, up);
        float *uv = gc_values(up), *dxv = gc_values(dx);
        got = buffer(N);
        for (int64_t t = 0; t < N; t++) col2im_thread(&g, got, uv, K * L, L, t);
        expect_same(got, dxv, N, "col2im", k);
        free(got);
        free(uv);
        free(dxv);
        free(xv);
        GC_RELEASE(x, cols, up, dx);
    }
}

/* ---- conv2d: the chunk layout, the regrouping and col2im, with a plain GEMM ---- */

/* C (m × n) = op(A)·op(B) + beta·C in double, row-major, what vnk_gemm computes. */
static void plain_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t kk, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = beta ? C[i * ldc + j] : 0;
            for (int64_t q = 0; q < kk; q++)
                s += (double)(ta ? A[q * lda + i] : A[i * lda + q]) *
                     (tb ? B[j * ldb + q] : B[q * ldb + j]);
            C[i * ldc + j] = (float)s;
        }
}

static void expect_close(const float *got, const float *want, int64_t n, const char *what, size_t k)
{
    double m = 0, d = 0;
    for (int64_t i = 0; i < n; i++) {
        m = fmax(m, fabs(want[i]));
        d = fmax(d, fabs(got[i] - want[i]));
        if (got[i] != got[i]) fail_msg("case %zu, %s[%lld] not written", k, what, (long long)i);
    }
    if (d > 1e-5 * fmax(m, 1e-30))
        fail_msg("case %zu, %s: relative error %g", k, what, d / m);
}

static void test_conv_emulated(void **state)
{
    (void)state;
    for (size_t k = 0; k < NCASES; k++) {
        const win_case *c = &cases[k];
        conv_geom g = geom_of(c);
        int64_t G = (k % 3 == 1 && g.C % 2 == 0) ? 2 : 1, Cout = 4 * G;
        int64_t K = g.C * g.kh * g.kw, L = g.Ho * g.Wo, nb = g.B, nL = nb * L;
        int64_t Kg = K / G, Cog = Cout / G, N = g.B * g.C * g.H * g.W;
        int64_t xs[4] = {g.B, g.C, g.H, g.W}, ws[4] = {Cout, g.C / G, g.kh, g.kw};
        int64_t ys[4] = {g.B, Cout, g.Ho, g.Wo};
        vn_tensor *x = gc_param(4, xs, -1, 1, 7 + (unsigned)k), *w = gc_param(4, ws, -1, 1, 8);
        vn_tensor *b = gc_param(1, &Cout, -1, 1, 9);
        vn_tensor *y = vn_conv2d(x, w, b, (int64_t[]){c->sh, c->sw}, (int64_t[]){c->ph, c->pw},
                                 (int64_t[]){c->dh, c->dw}, G);
        CHECK_PTR(y);
        float *xv = gc_values(x), *wv = gc_values(w), *bv = gc_values(b), *want = gc_values(y);
        /* the forward as engine/ops_conv.c runs it on CUDA: one chunk of nb images */
        float *cols = buffer(K * nL), *ycols = buffer(Cout * nL), *got = buffer(g.B * Cout * L);
        for (int64_t t = 0; t < K * nL; t++) im2col_thread(&g, cols, xv, L, nL, t);
        for (int64_t q = 0; q < G; q++)
            plain_gemm(false, false, Cog, nL, Kg, wv + q * Cog * Kg, Kg, cols + q * Kg * nL, nL,
                       0, ycols + q * Cog * nL, nL);
        for (int64_t t = 0; t < g.B * Cout * L; t++)
            regroup_thread(got, ycols, nb, Cout, L, bv, true, t);
        expect_close(got, want, g.B * Cout * L, "conv2d", k);

        /* the backward: regroup dY, dW += dY·colsᵀ, dcols = Wᵀ·dY, col2im */
        vn_tensor *up = trand(4, ys, -1, 1, 11 + (unsigned)k);
        CHECK_OK(vn_backward(y, up));
        float *uv = gc_values(up), *dxw = gc_values(vn_tensor_grad(x));
        float *dww = gc_values(vn_tensor_grad(w)), *dw = calloc((size_t)(Cout * Kg), sizeof(float));
        float *dx = buffer(N);
        for (int64_t t = 0; t < Cout * nL; t++) regroup_thread(ycols, uv, nb, Cout, L, NULL, false, t);
        for (int64_t q = 0; q < G; q++)
            plain_gemm(false, true, Cog, Kg, nL, ycols + q * Cog * nL, nL, cols + q * Kg * nL, nL,
                       1, dw + q * Cog * Kg, Kg);
        for (int64_t q = 0; q < G; q++)
            plain_gemm(true, false, Kg, nL, Cog, wv + q * Cog * Kg, Kg, ycols + q * Cog * nL, nL,
                       0, cols + q * Kg * nL, nL);
        for (int64_t t = 0; t < N; t++) col2im_thread(&g, dx, cols, L, nL, t);
        expect_close(dw, dww, Cout * Kg, "conv2d dW", k);
        expect_close(dx, dxw, N, "conv2d dx", k);
        free(xv), free(wv), free(bv), free(want), free(cols), free(ycols), free(got);
        free(uv), free(dxw), free(dww), free(dw), free(dx);
        GC_RELEASE(x, w, b, y, up);
    }
}

/* ---- pooling ------------------------------------------------------------------- */

/* x with many ties (values on a grid of 5 levels) and one NaN, so the
 * first-maximum and NaN rules matter. */
static vn_tensor *tied_input(const conv_geom *g, unsigned seed, bool nan)
{
    int64_t xs[4] = {g->B, g->C, g->H, g->W};
    vn_tensor *x = trand(4, xs, 0, 5, seed);
    float *p = vn_tensor_data(x);
    for (int64_t i = 0; i < vn_tensor_numel(x); i++) p[i] = floorf(p[i]);
    if (nan) p[vn_tensor_numel(x) / 2] = NAN;
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    return x;
}

static void test_max_pool(void **state)
{
    (void)state;
    for (size_t k = 0; k < NCASES; k++) {
        win_case c = cases[k];
        c.dh = c.dw = 1; /* pooling has no dilation */
        if (2 * c.ph > c.kh) c.ph = c.kh / 2;
        if (2 * c.pw > c.kw) c.pw = c.kw / 2;
        conv_geom g = geom_of(&c);
        int64_t L = g.Ho * g.Wo, M = g.B * g.C * L, N = g.B * g.C * g.H * g.W;
        vn_tensor *x = tied_input(&g, 20 + (unsigned)k, k == 2);
        vn_tensor *y = vn_max_pool2d(x, (int64_t[]){c.kh, c.kw}, (int64_t[]){c.sh, c.sw},
                                     (int64_t[]){c.ph, c.pw});
        CHECK_PTR(y);
        vn_tensor *idx = vn_tensor_retain(y->grad_fn->saved[0]); /* the saved positions */
        float *xv = gc_values(x), *want = gc_values(y), *got = buffer(M);
        int64_t *gi = malloc(sizeof(int64_t) * (size_t)M);
        for (int64_t t = 0; t < M; t++) max_pool_thread(&g, got, gi, xv, t);
        expect_same(got, want, M, "max_pool2d", k);
        const int64_t *wi = vn_tensor_data(idx);
        for (int64_t t = 0; t < M; t++)
            if (gi[t] != wi[t])
                fail_msg("case %zu, max_pool2d index[%lld]: kernel body %lld, CPU %lld", k,
                         (long long)t, (long long)gi[t], (long long)wi[t]);

        int64_t ys[4] = {g.B, g.C, g.Ho, g.Wo};
        vn_tensor *up = trand(4, ys, -1, 1, 30 + (unsigned)k);
        vn_tensor *dx = grad_through(x, y, up);
        float *uv = gc_values(up), *dxv = gc_values(dx), *gd = buffer(N);
        for (int64_t t = 0; t < N; t++) max_pool_backward_thread(&g, gd, uv, gi, t);
        expect_same(gd, dxv, N, "max_pool2d backward", k);
        free(xv), free(want), free(got), free(gi), free(uv), free(dxv), free(gd);
        GC_RELEASE(x, y, idx, up, dx);
    }
}

/* avg_pool2d (the case's window) and adaptive_avg_pool2d (to sizes smaller
 * and larger than the input). */
static void test_avg_pool(void **state)
{
    (void)state;
    for (size_t k = 0; k < 2 * NCASES; k++) {
        bool adaptive = k >= NCASES;
        win_case c = cases[k % NCASES];
        c.dh = c.dw = 1;
        if (2 * c.ph > c.kh) c.ph = c.kh / 2;
        if (2 * c.pw > c.kw) c.pw = c.kw / 2;
        conv_geom g = geom_of(&c);
        if (adaptive) { /* Ho, Wo the output size; the window fields unused */
            g.Ho = k % 2 ? c.H + 2 : (c.H + 1) / 2;
            g.Wo = k % 3 ? c.W / 3 + 1 : c.W + 1;
            g.kh = g.kw = g.sh = g.sw = 1;
            g.ph = g.pw = 0;
        }
        int64_t M = g.B * g.C * g.Ho * g.Wo, N = g.B * g.C * g.H * g.W;
        vn_tensor *x = tied_input(&g, 40 + (unsigned)k, false);
        vn_tensor *y = adaptive ? vn_adaptive_avg_pool2d(x, g.Ho, g.Wo)
                                : vn_avg_pool2d(x, (int64_t[]){c.kh, c.kw}, (int64_t[]){c.sh, c.sw},
                                                (int64_t[]){c.ph, c.pw});
        CHECK_PTR(y);
        float *xv = gc_values(x), *want = gc_values(y), *got = buffer(M);
        for (int64_t t = 0; t < M; t++) avg_pool_thread(&g, adaptive, got, xv, t);
        expect_same(got, want, M, adaptive ? "adaptive_avg_pool2d" : "avg_pool2d", k);

        int64_t ys[4] = {g.B, g.C, g.Ho, g.Wo};
        vn_tensor *up = trand(4, ys, -1, 1, 50 + (unsigned)k);
        vn_tensor *dx = grad_through(x, y, up);
        float *uv = gc_values(up), *dxv = gc_values(dx), *gd = buffer(N);
        for (int64_t t = 0; t < N; t++) avg_pool_backward_thread(&g, adaptive, gd, uv, t);
        expect_same(gd, dxv, N, adaptive ? "adaptive_avg_pool2d backward" : "avg_pool2d backward",
                    k);
        free(xv), free(want), free(got), free(uv), free(dxv), free(gd);
        GC_RELEASE(x, y, up, dx);
    }
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_inversions), cmocka_unit_test(test_im2col_col2im),
        cmocka_unit_test(test_conv_emulated), cmocka_unit_test(test_max_pool),
        cmocka_unit_test(test_avg_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
