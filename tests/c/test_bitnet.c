/* BitNet b1.58 (engine/quant/): the BitLinear forward against a plain
 * reference of the quantised product, its STE gradients against plain
 * reference loops and against central finite differences of the surrogate
 * (the product with the other operand's quantiser frozen), γ = 0 and zero
 * rows, the quantisers of the CUDA path (public ops) against the loops, the 2-bit packing byte for byte against a plain packer, the packed
 * kernels (portable, AVX2, AVX-512 VNNI: those this CPU has) against a
 * plain integer loop for odd sizes and bit for bit against each other,
 * each forced through vn_ternary_set_kernel against the portable one,
 * corrupt packed data, and bad arguments; RMSNorm (vn_rms_norm) against a
 * plain loop and finite differences. */
#include "gradcheck.h"
#include "ref_quant.h"
#include "quant_internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *f32(const vn_tensor *t) { return vn_tensor_data(t); }

static void expect_error(const void *result, vn_status want, const char *needle)
{
    assert_null(result);
    assert_int_equal(vn_last_status(), want);
    if (!strstr(vn_last_error(), needle))
        fail_msg("error \"%s\" does not mention \"%s\"", vn_last_error(), needle);
}

/* The reference quantisers, written from the formulas of venom/quant.h. */
static float ref_gamma(const float *w, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += fabs((double)w[i]);
    return (float)(s / (double)n);
}

/* Reference quantised operands: Xq = x̃/s (B × K) and Wq = γ·W̃ (N × K). */
static void ref_operands(const float *x, const float *w, int64_t B, int64_t N, int64_t K,
                         double *xq, double *wq)
{
    float g = ref_gamma(w, N * K);
    for (int64_t i = 0; i < N * K; i++) wq[i] = (double)g * ref_trit(w[i], g);
    float *q = malloc((size_t)K * sizeof *q);
    for (int64_t b = 0; b < B; b++) {
        float s = ref_act(x + b * K, K, q);
        for (int64_t k = 0; k < K; k++) xq[b * K + k] = s > 0 ? q[k] / (double)s : 0;
    }
    free(q);
}

static void assert_close(double got, double want, double tol, const char *what, int64_t i)
{
    if (!(fabs(got - want) <= tol * (1 + fabs(want))))
        fail_msg("%s[%lld]: got %.9g, expected %.9g", what, (long long)i, got, want);
}

/* Forward and STE gradients of bitlinear on x (B, K), w (N, K), upstream R. */
static void check_bitlinear(vn_tensor *x, vn_tensor *w, int64_t B, int64_t N, int64_t K)
{
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    CHECK_OK(vn_tensor_set_requires_grad(w, true));
    vn_tensor *y = vn_bitlinear(x, w);
    CHECK_PTR(y);
    assert_string_equal(vn_tensor_grad_fn_name(y), "bitlinear");
    vn_tensor *r = trand(vn_tensor_ndim(y), vn_tensor_shape(y), -1, 1, 99);
    CHECK_OK(vn_backward(y, r));
    double *xq = malloc(sizeof(double) * (size_t)(B * K)), *wq = malloc(sizeof(double) * (size_t)(N * K));
    ref_operands(f32(x), f32(w), B, N, K, xq, wq);
    /* y = Xq·Wqᵀ, dX = R·Wq, dW = Rᵀ·Xq, each summed in double. */
    for (int64_t b = 0; b < B; b++)
        for (int64_t n = 0; n < N; n++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) acc += xq[b * K + k] * wq[n * K + k];
            assert_close(f32(y)[b * N + n], acc, 1e-5, "y", b * N + n);
        }
    const float *R = f32(r), *dx = f32(vn_tensor_grad(x)), *dw = f32(vn_tensor_grad(w));
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < K; k++) {
            double acc = 0;
            for (int64_t n = 0; n < N; n++) acc += R[b * N + n] * wq[n * K + k];
            assert_close(dx[b * K + k], acc, 1e-5, "dX", b * K + k);
        }
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            double acc = 0;
            for (int64_t b = 0; b < B; b++) acc += R[b * N + n] * xq[b * K + k];
            assert_close(dw[n * K + k], acc, 1e-5, "dW", n * K + k);
        }
    free(xq);
    free(wq);
    vn_tensor_release(y);
    vn_tensor_release(r);
}

static void test_forward_and_ste(void **state)
{
    (void)state;
    int64_t B = 5, N = 11, K = 37;
    vn_tensor *x = trand(2, (int64_t[]){B, K}, -2, 2, 1), *w = trand(2, (int64_t[]){N, K}, -0.1, 0.1, 2);
    check_bitlinear(x, w, B, N, K);
    /* The weights are ternary: γ·W̃ / γ ∈ {−1, 0, 1}, all three present. */
    float g = -1;
    vn_tensor *wq = vn_ternary_quantize(w, &g);
    CHECK_PTR(wq);
    assert_float_equal(g, ref_gamma(f32(w), N * K), 0);
    int seen[3] = {0};
    for (int64_t i = 0; i < N * K; i++) {
        float t = f32(wq)[i] / g;
        if (t != -1 && t != 0 && t != 1) fail_msg("W̃[%lld] = %g is not ternary", (long long)i, t);
        seen[(int)t + 1]++;
    }
    assert_true(seen[0] && seen[1] && seen[2]);
    vn_tensor_release(wq);
    vn_tensor_release(x);
    vn_tensor_release(w);
}

/* sum(R ∘ (A·Bᵀ)) for A (B × K), Bm (N × K) in double. */
static double surrogate(const float *a, const float *bm, const float *r, int64_t B, int64_t N, int64_t K)
{
    double s = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t n = 0; n < N; n++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) acc += (double)a[b * K + k] * bm[n * K + k];
            s += r[b * N + n] * acc;
        }
    return s;
}

/* The STE by definition: dL/dX is the derivative of sum(R ∘ (X·Wqᵀ)) with
 * the weight quantiser frozen at this W, and dL/dW that of
 * sum(R ∘ (Xq·Wᵀ)) with the activation quantiser frozen: both by central
 * differences, against bitlinear's backward. */
static void test_ste_finite_differences(void **state)
{
    (void)state;
    int64_t B = 3, N = 4, K = 9;
    vn_tensor *x = trand(2, (int64_t[]){B, K}, -1, 1, 5), *w = trand(2, (int64_t[]){N, K}, -1, 1, 6);
    vn_tensor *r = trand(2, (int64_t[]){B, N}, -1, 1, 7);
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    CHECK_OK(vn_tensor_set_requires_grad(w, true));
    vn_tensor *y = vn_bitlinear(x, w);
    CHECK_PTR(y);
    CHECK_OK(vn_backward(y, r));
    vn_tensor *wq = vn_ternary_quantize(w, NULL);
    CHECK_PTR(wq);
    float *xq = malloc(sizeof(float) * (size_t)(B * K)), q[9];
    for (int64_t b = 0; b < B; b++) {
        float s = ref_act(f32(x) + b * K, K, q);
        for (int64_t k = 0; k < K; k++) xq[b * K + k] = q[k] / s;
    }
    const float eps = 1e-2f;
    float *px = f32(x), *pw = f32(w);
    for (int64_t i = 0; i < B * K; i++) {
        float v = px[i];
        px[i] = v + eps;
        double hi = surrogate(px, f32(wq), f32(r), B, N, K);
        px[i] = v - eps;
        double lo = surrogate(px, f32(wq), f32(r), B, N, K);
        px[i] = v;
        assert_close(f32(vn_tensor_grad(x))[i], (hi - lo) / (2 * eps), 1e-4, "dX vs FD", i);
    }
    for (int64_t i = 0; i < N * K; i++) {
        float v = pw[i];
        pw[i] = v + eps;
        double hi = surrogate(xq, pw, f32(r), B, N, K);
        pw[i] = v - eps;
        double lo = surrogate(xq, pw, f32(r), B, N, K);
        pw[i] = v;
        assert_close(f32(vn_tensor_grad(w))[i], (hi - lo) / (2 * eps), 1e-4, "dW vs FD", i);
    }
    free(xq);
    vn_tensor *ts[] = {x, w, r, y, wq};
    for (int k = 0; k < 5; k++) vn_tensor_release(ts[k]);
}

/* γ = 0 (a zero weight matrix) and an all-zero activation row: zeros, never
 * NaN, in the output and both gradients. A 3-D input too. */
static void test_zeros(void **state)
{
    (void)state;
    int64_t B = 4, N = 3, K = 6;
    vn_tensor *x = trand(3, (int64_t[]){2, 2, K}, -1, 1, 8), *w = vn_zeros(VN_F32, 2, (int64_t[]){N, K});
    CHECK_PTR(w);
    for (int k = 0; k < K; k++) f32(x)[K + k] = 0; /* row 1 is zero */
    check_bitlinear(x, w, B, N, K); /* γ = 0: y = 0, dX = 0 */
    vn_tensor *y = vn_bitlinear(x, w);
    CHECK_PTR(y);
    for (int64_t i = 0; i < B * N; i++) assert_float_equal(f32(y)[i], 0, 0);
    vn_tensor_release(y);
    vn_tensor *w2 = trand(2, (int64_t[]){N, K}, -1, 1, 9);
    check_bitlinear(x, w2, B, N, K); /* the zero row: its output row and its share of dW are 0 */
    y = vn_bitlinear(x, w2);
    for (int64_t n = 0; n < N; n++) assert_float_equal(f32(y)[N + n], 0, 0);
    for (int64_t i = 0; i < B * N; i++) assert_false(isnan(f32(y)[i]));
    vn_tensor *ts[] = {x, w, w2, y};
    for (int k = 0; k < 4; k++) vn_tensor_release(ts[k]);
}

/* The quantisers built from public ops (the CUDA path), run here on the
 * CPU: x̃/s the same bits as the loop, γ·W̃ the same up to γ's f32
 * summation; γ = 0 and a zero row give zeros. */
static void test_ops_path(void **state)
{
    (void)state;
    int64_t B = 4, N = 9, K = 300;
    vn_tensor *x = trand(2, (int64_t[]){B, K}, -5, 5, 40), *w = trand(2, (int64_t[]){N, K}, -1, 1, 41);
    memset(f32(x) + 2 * K, 0, sizeof(float) * (size_t)K);
    vn_tensor *xq = vnq__quantize_input_ops(x), *wq = vnq__quantize_weight_ops(w, vn_tensor_numel(w));
    CHECK_PTR(xq);
    CHECK_PTR(wq);
    float *row = malloc(sizeof(float) * (size_t)K);
    for (int64_t b = 0; b < B; b++) {
        vnq__quantize_row(f32(x) + b * K, K, NULL, row);
        for (int64_t k = 0; k < K; k++)
            if (f32(xq)[b * K + k] != row[k])
                fail_msg("x̃/s[%lld][%lld]: ops %.9g, loop %.9g", (long long)b, (long long)k,
                         f32(xq)[b * K + k], row[k]);
    }
    float g;
    vn_tensor *wl = vn_ternary_quantize(w, &g);
    CHECK_PTR(wl);
    for (int64_t i = 0; i < N * K; i++) assert_close(f32(wq)[i], f32(wl)[i], 1e-6, "γ·W̃ ops", i);
    vn_tensor *z = vn_zeros(VN_F32, 2, (int64_t[]){N, K}), *zq = vnq__quantize_weight_ops(z, N * K);
    CHECK_PTR(zq);
    for (int64_t i = 0; i < N * K; i++) assert_float_equal(f32(zq)[i], 0, 0);
    free(row);
    vn_tensor *ts[] = {x, w, xq, wq, wl, z, zq};
    for (int k = 0; k < 7; k++) vn_tensor_release(ts[k]);
}

/* The layout of venom/quant.h, written out plainly. */
static uint8_t *ref_pack(const float *trits, int64_t N, int64_t K, int64_t *rb)
{
    *rb = (K + 127) / 128 * 32;
    uint8_t *p = malloc((size_t)(N * *rb));
    memset(p, 0, (size_t)(N * *rb));
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < *rb * 4; k++) {
            int code = k < K ? (int)trits[n * K + k] + 1 : 1;
            p[n * *rb + (k / 128) * 32 + k % 32] |= (uint8_t)(code << (2 * (k % 128 / 32)));
        }
    return p;
}

static void test_pack_and_kernels(void **state)
{
    (void)state;
    /* K odd, or not a multiple of 64 or 128 (padded groups); B below, at
     * and past the 4 and 8 rows the SIMD kernels take per pass. */
    const int64_t Ks[] = {1, 37, 128, 129, 300}, Bs[] = {1, 3, 8, 64};
    for (int ik = 0; ik < 5; ik++) {
        int64_t K = Ks[ik], N = 21, rb; /* two blocks of 8 weight rows and 5 more */
        vn_tensor *w = trand(2, (int64_t[]){N, K}, -1, 1, 10 + (unsigned)ik);
        float g = 0, g2 = 0;
        vn_tensor *p = vn_ternary_pack(w, &g), *wq = vn_ternary_quantize(w, &g2);
        CHECK_PTR(p);
        assert_float_equal(g, g2, 0);
        float *trits = malloc(sizeof(float) * (size_t)(N * K));
        for (int64_t i = 0; i < N * K; i++) trits[i] = ref_trit(f32(w)[i], g) + 0.0f; /* no −0 */
        uint8_t *want = ref_pack(trits, N, K, &rb);
        assert_int_equal(vn_tensor_shape(p)[1], rb);
        assert_memory_equal(vn_tensor_data(p), want, (size_t)(N * rb));
        vn_tensor *u = vn_ternary_unpack(p, K);
        CHECK_PTR(u);
        assert_memory_equal(f32(u), trits, sizeof(float) * (size_t)(N * K));
        for (int ib = 0; ib < 4; ib++) {
            int64_t B = Bs[ib], Kp = rb * 4;
            vn_tensor *x = trand(2, (int64_t[]){B, K}, -3, 3, 20 + (unsigned)(ib + ik));
            if (B > 1) memset(f32(x) + K, 0, sizeof(float) * (size_t)K); /* zero rows */
            if (B > 8) memset(f32(x) + 9 * K, 0, sizeof(float) * (size_t)K);
            int8_t *xq = calloc((size_t)(B * Kp), 1);
            int32_t *sum = calloc((size_t)B, sizeof *sum);
            float *s = calloc((size_t)B, sizeof *s), *y = calloc((size_t)(B * N), sizeof *y);
            float *y0 = calloc((size_t)(B * N), sizeof *y0); /* the portable kernel's */
            float *q = malloc(sizeof(float) * (size_t)K);
            double *ref = calloc((size_t)(B * N), sizeof *ref);
            for (int64_t b = 0; b < B; b++) {
                s[b] = ref_act(f32(x) + b * K, K, q);
                for (int64_t k = 0; k < K; k++) xq[b * Kp + k] = (int8_t)q[k], sum[b] += (int32_t)q[k];
                for (int64_t n = 0; n < N; n++) {
                    long acc = 0;
                    for (int64_t k = 0; k < K; k++) acc += (long)q[k] * (long)trits[n * K + k];
                    ref[b * N + n] = s[b] > 0 ? (double)acc * g / s[b] : 0;
                }
            }
            const char *isas[] = {"portable", "avx2", "avx512vnni"};
            for (int i = 0; i < 3; i++) {
                vnq_kernel kern = vnq__kernel(isas[i]);
                if (!kern) continue; /* not on this CPU */
                memset(y, 0xff, sizeof(float) * (size_t)(B * N));
                kern(vn_tensor_data(p), N, Kp, xq, sum, s, B, g, y, N);
                for (int64_t j = 0; j < B * N; j++) assert_close(y[j], ref[j], 1e-6, isas[i], j);
                /* Integer sums, one scaling: every ISA gives the same bits. */
                if (i == 0) memcpy(y0, y, sizeof(float) * (size_t)(B * N));
                else assert_memory_equal(y, y0, sizeof(float) * (size_t)(B * N));
            }
            /* The public product matches the training forward. */
            vn_tensor *yt = vn_ternary_matmul(x, p, K, g), *yb = vn_bitlinear(x, w);
            CHECK_PTR(yt);
            CHECK_PTR(yb);
            for (int64_t j = 0; j < B * N; j++) assert_close(f32(yt)[j], f32(yb)[j], 1e-5, "matmul", j);
            vn_tensor_release(yt);
            vn_tensor_release(yb);
            vn_tensor_release(x);
            free(xq), free(sum), free(s), free(y), free(y0), free(q), free(ref);
        }
        free(trits);
        free(want);
        vn_tensor *ts[] = {w, p, wq, u};
        for (int k = 0; k < 4; k++) vn_tensor_release(ts[k]);
    }
}

/* vnq__rms_quantize_row (the fused decoder's RMSNorm and quantiser in one)
 * against vnq__rms_row then vnq__quantize_into, byte for byte (y, x̃ with
 * its zero padding, Σ x̃, s): K = 1, 37, 128, 300 (padded to 128, 384),
 * random rows, a zero row (s = 0), one with an ∞ (s = NaN) and one whose
 * norm is below the quantiser's least max. */
static void test_rms_quantize_row(void **state)
{
    (void)state;
    const int64_t Ks[] = {1, 37, 128, 300};
    unsigned seed = 3;
    for (int ik = 0; ik < 4; ik++)
        for (int kind = 0; kind < 4; kind++) {
            int64_t K = Ks[ik], Kp = vn_ternary_row_bytes(K) * 4;
            float *x = malloc(sizeof(float) * (size_t)K), *w = malloc(sizeof(float) * (size_t)K);
            float *y0 = malloc(sizeof(float) * (size_t)K), *y1 = malloc(sizeof(float) * (size_t)K);
            for (int64_t k = 0; k < K; k++) {
                seed = seed * 1103515245u + 12345u;
                x[k] = kind == 1 ? 0.0f : ((float)((seed >> 8) % 20001) - 10000.0f) / 3000.0f;
                w[k] = 0.5f + (float)(k % 7) / 4.0f;
                if (kind == 3) w[k] = 1e-38f; /* y below 127 / FLT_MAX: no scale */
            }
            if (kind == 2) x[K / 2] = INFINITY;
            vnq_rows r0, r1;
            void *m0 = malloc(vnq__rows_bytes(1, Kp)), *m1 = malloc(vnq__rows_bytes(1, Kp));
            vnq__rows_at(m0, 1, Kp, &r0);
            vnq__rows_at(m1, 1, Kp, &r1);
            memset(r1.q, 0x7f, (size_t)Kp); /* the padding must be written */
            vnq__rms_row(x, w, K, 1e-6, y0);
            vnq__quantize_into(y0, 1, K, Kp, &r0);
            vnq__rms_quantize_row(x, w, K, 1e-6, y1, Kp, &r1);
            assert_memory_equal(y1, y0, sizeof(float) * (size_t)K);
            assert_memory_equal(r1.q, r0.q, (size_t)Kp);
            assert_int_equal(r1.sum[0], r0.sum[0]);
            assert_memory_equal(r1.s, r0.s, sizeof(float));
            if (kind == 1 || kind == 3) assert_true(r1.s[0] == 0);
            if (kind == 2) assert_true(isnan(r1.s[0]));
            free(x), free(w), free(y0), free(y1), free(m0), free(m1);
        }
}

/* The packed products' row quantiser (vnq__quantize_row into int8, its
 * vector loop and its tail) against the plain reference, exactly: K below,
 * at and past the 32 values of a vector pass, with ties (the max 127 makes
 * s = 1, so ±0.5, 2.5, −3.5 round half to even) and values that round to
 * ±127 and −128 at the clamp. */
static void test_quantize_row(void **state)
{
    (void)state;
    const int64_t Ks[] = {5, 32, 37, 128, 300};
    for (int ik = 0; ik < 5; ik++) {
        int64_t K = Ks[ik];
        vn_tensor *x = trand(1, &K, -120, 120, 90 + (unsigned)ik);
        float *v = f32(x), ties[] = {0.5f, -0.5f, 2.5f, -3.5f, 126.5f, -127.0f, 127.0f};
        for (int64_t k = 0; k < K; k++)
            if (k % 3 == 0) v[k] = ties[(k / 3) % 7];
        v[K - 1] = 127.0f; /* the max: s = 1 */
        int8_t q[300];
        float want[300];
        float s = vnq__quantize_row(v, K, q, NULL), s_ref = ref_act(v, K, want);
        assert_true(s == s_ref);
        for (int64_t k = 0; k < K; k++)
            if (q[k] != (int8_t)want[k])
                fail_msg("K %lld: q[%lld] = %d for x = %g, expected %g", (long long)K, (long long)k, q[k],
                         v[k], want[k]);
        vn_tensor_release(x);
    }
}

/* Rows whose max |x| is below 127/FLT_MAX (≈ 3.7e-37, normal floats), where
 * s = 127/max would overflow to inf (and 0·inf gave NaN): no scale, as a
 * zero row, so x̃ = 0 and the outputs are 0, in the loop, the CUDA path's
 * ops and both products; a row whose max is exactly 127/FLT_MAX still has
 * its scale (FLT_MAX) and quantises as the reference. */
static void test_tiny_rows(void **state)
{
    (void)state;
    int64_t K = 40, N = 3;
    vn_tensor *x = vn_zeros(VN_F32, 2, (int64_t[]){3, K}), *w = trand(2, (int64_t[]){N, K}, -1, 1, 33);
    float *v = f32(x), edge = 127.0f / FLT_MAX;
    for (int64_t k = 0; k < K; k++) {
        v[k] = (float)((k % 7) - 3) * 1e-38f;   /* row 0: tiny, with zeros */
        v[K + k] = (float)((k % 5) - 2) / 2 * edge; /* row 1: the max is 127/FLT_MAX */
        v[2 * K + k] = (float)k - 20;              /* row 2: plain */
    }
    int8_t q[40];
    float xq[40], want[40];
    assert_true(vnq__quantize_row(v, K, q, NULL) == 0 && vnq__quantize_row(v, K, NULL, xq) == 0);
    for (int64_t k = 0; k < K; k++) assert_true(q[k] == 0 && xq[k] == 0);
    float s = vnq__quantize_row(v + K, K, q, NULL), s_ref = ref_act(v + K, K, want);
    assert_true(s == FLT_MAX && s == s_ref);
    for (int64_t k = 0; k < K; k++) assert_int_equal(q[k], (int8_t)want[k]);
    vn_tensor *ops = vnq__quantize_input_ops(x);
    CHECK_PTR(ops);
    for (int64_t b = 0; b < 3; b++) {
        vnq__quantize_row(v + b * K, K, NULL, xq);
        assert_memory_equal(f32(ops) + b * K, xq, sizeof xq);
    }
    float g;
    vn_tensor *p = vn_ternary_pack(w, &g), *yt = p ? vn_ternary_matmul(x, p, K, g) : NULL;
    vn_tensor *yb = vn_bitlinear(x, w);
    CHECK_PTR(yt);
    CHECK_PTR(yb);
    for (int64_t n = 0; n < N; n++) {
        assert_true(f32(yt)[n] == 0 && f32(yb)[n] == 0);
        assert_close(f32(yt)[2 * N + n], f32(yb)[2 * N + n], 1e-5, "plain row", n);
    }
    vn_tensor *ts[] = {x, w, ops, p, yt, yb};
    for (int k = 0; k < 6; k++) vn_tensor_release(ts[k]);
}

/* N rows of K random trits (an LCG from *seed), as int8 in w (N × K) and
 * packed at vn_ternary_row_bytes(K) per row in p. */
static void random_packed_trits(uint8_t *p, int8_t *w, int64_t N, int64_t K, unsigned *seed)
{
    int64_t rb = vn_ternary_row_bytes(K);
    vnq__clear_packed(p, N * rb);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            *seed = *seed * 1103515245u + 12345u;
            w[n * K + k] = (int8_t)((*seed >> 16) % 3) - 1;
            vnq__set_trit(p + n * rb, k, w[n * K + k]);
        }
}
/* An int8 activation row of K for pass 0..3: all −128, all 127, random
 * (an LCG from *seed), all 0; returns its sum (the kernels' zero-point term). */
static int32_t activation_pass(int8_t *xq, int64_t K, int pass, unsigned *seed)
{
    int32_t sum = 0;
    for (int64_t k = 0; k < K; k++) {
        *seed = *seed * 1103515245u + 12345u;
        int v = pass == 0 ? -128 : pass == 1 ? 127 : pass == 2 ? (int)((*seed >> 16) % 256) - 128 : 0;
        xq[k] = (int8_t)v, sum += v;
    }
    return sum;
}
/* One activation row (decoding) through each kernel this CPU has, against
 * the portable one bit for bit and an exact integer sum: N past the rows a
 * pass takes (4, 8) and not a multiple of them, K not a multiple of the
 * 128-column group, random codes with x̃ at the int8 extremes (−128, 127)
 * as well as random, and a zero row (s = 0: output 0). The trits are drawn
 * uniformly and set one by one (vnq__set_trit), not by vn_ternary_pack. */
static void test_one_row_kernels(void **state)
{
    (void)state;
    const int64_t Ks[] = {37, 128, 300, 512}, N = 21;
    unsigned seed = 7;
    for (int ik = 0; ik < 4; ik++) {
        int64_t K = Ks[ik], rb = vn_ternary_row_bytes(K), Kp = rb * 4;
        uint8_t *p = malloc((size_t)(N * rb));
        int8_t *xq = calloc((size_t)Kp, 1), *w = malloc((size_t)(N * K));
        random_packed_trits(p, w, N, K, &seed);
        for (int pass = 0; pass < 4; pass++) {
            int32_t sum = activation_pass(xq, K, pass, &seed);
            float s = pass == 3 ? 0.0f : 0.37f, g = 0.81f, y0[21], y[21];
            const char *isas[] = {"portable", "avx2", "avx512vnni"};
            for (int i = 0; i < 3; i++) {
                vnq_kernel kern = vnq__kernel(isas[i]);
                if (!kern) continue; /* not on this CPU */
                float *out = i == 0 ? y0 : y;
                memset(out, 0xff, sizeof y);
                kern(p, N, Kp, xq, &sum, &s, 1, g, out, N);
                if (i > 0) assert_memory_equal(y, y0, sizeof y);
            }
            for (int64_t n = 0; n < N; n++) {
                int32_t acc = 0;
                for (int64_t k = 0; k < K; k++) acc += w[n * K + k] * xq[k];
                float want = s == 0 ? 0.0f : (float)acc * (g / s);
                assert_memory_equal(&y0[n], &want, sizeof want);
            }
        }
        free(p), free(xq), free(w);
    }
}

/* Every kernel this CPU has at 1 to 9 activation rows (VNNI's one-row loop,
 * its narrow multi-row loop and the general one) against an exact integer
 * sum: weight rows below, at and past the narrow loop's 8 and not a
 * multiple of it, K not a multiple of 32, 64 or 128, and at and past the
 * narrow loop's 1024 (8 groups); a zero activation row (s = 0) and one at
 * the int8 extremes. */
static void test_narrow_rows_kernels(void **state)
{
    (void)state;
    const int64_t Ks[] = {1, 31, 100, 1024, 1025}, Ns[] = {1, 7, 8, 9, 17};
    unsigned seed = 11;
    for (int ik = 0; ik < 5; ik++)
        for (int in = 0; in < 5; in++) {
            int64_t K = Ks[ik], N = Ns[in], rb = vn_ternary_row_bytes(K), Kp = rb * 4;
            uint8_t *p = malloc((size_t)(N * rb));
            int8_t *w = malloc((size_t)(N * K)), *xq = calloc((size_t)(9 * Kp), 1);
            random_packed_trits(p, w, N, K, &seed);
            int32_t sum[9] = {0};
            float s[9], y[9 * 17], g = 0.63f;
            for (int64_t b = 0; b < 9; b++) {
                s[b] = b == 2 ? 0.0f : 0.25f + 0.1f * (float)b; /* row 2: zero */
                for (int64_t k = 0; k < K && b != 2; k++) {
                    seed = seed * 1103515245u + 12345u;
                    int v = b == 5 ? (k % 2 ? 127 : -128) : (int)((seed >> 16) % 256) - 128;
                    xq[b * Kp + k] = (int8_t)v, sum[b] += v;
                }
            }
            const char *isas[] = {"portable", "avx2", "avx512vnni"};
            for (int i = 0; i < 3; i++) {
                vnq_kernel kern = vnq__kernel(isas[i]);
                if (!kern) continue; /* not on this CPU */
                for (int64_t B = 1; B <= 9; B++) {
                    memset(y, 0xff, sizeof y);
                    kern(p, N, Kp, xq, sum, s, B, g, y, N);
                    for (int64_t b = 0; b < B; b++)
                        for (int64_t n = 0; n < N; n++) {
                            int32_t acc = 0;
                            for (int64_t k = 0; k < K; k++) acc += w[n * K + k] * xq[b * Kp + k];
                            float want = s[b] == 0 ? 0.0f : (float)acc * (g / s[b]);
                            if (memcmp(&y[b * N + n], &want, sizeof want) != 0)
                                fail_msg("%s K %lld N %lld B %lld: y[%lld, %lld] = %g, expected %g", isas[i],
                                         (long long)K, (long long)N, (long long)B, (long long)b, (long long)n,
                                         y[b * N + n], want);
                        }
                }
            }
            free(p), free(w), free(xq);
        }
}

/* The re-laid copy (vnq__lanes_pack, one weight row per vector lane) and
 * its one-row product against an exact integer sum, bit for bit: weight rows
 * around the 16-row tile and the two-tile pass (1, 15–17, 31–33, 50), K
 * not a multiple of the 16-column block or the 128-column group, x̃ at the
 * int8 extremes, random and zero (s = 0); nothing written past y[N - 1].
 * Then the largest K it takes, all weights +1 against x̃ = −128 and 127:
 * the field sums' bound (quant_internal.h) without a wrap. */
static void test_lanes_product(void **state)
{
    (void)state;
    if (!vnq__lanes_usable(1, 1)) skip(); /* not on this CPU */
    assert_false(vnq__lanes_usable(1, VNQ_LANES_MAX_K + 1));
    assert_false(vnq__lanes_usable(VNQ_LANES_MAX_BYTES / 32 + 1, 128)); /* past the byte cap */
    assert_true(vnq__lanes_usable(VNQ_LANES_MAX_BYTES / 32, 128));
    const int64_t Ks[] = {1, 37, 128, 300, 1025}, Ns[] = {1, 15, 16, 17, 31, 32, 33, 50};
    unsigned seed = 5;
    for (int ik = 0; ik < 5; ik++)
        for (int in = 0; in < 8; in++) {
            int64_t K = Ks[ik], N = Ns[in], rb = vn_ternary_row_bytes(K), Kp = rb * 4;
            uint8_t *p = malloc((size_t)(N * rb)), *lanes = malloc(vnq__lanes_bytes(N, Kp));
            int8_t *w = malloc((size_t)(N * K)), *xq = calloc((size_t)Kp, 1);
            float y[51], g = 0.81f;
            random_packed_trits(p, w, N, K, &seed);
            vnq__lanes_pack(p, N, Kp, lanes);
            for (int pass = 0; pass < 4; pass++) {
                int32_t sum = activation_pass(xq, K, pass, &seed);
                float s = pass == 3 ? 0.0f : 0.37f;
                memset(y, 0xff, sizeof y);
                vnq__lanes_product(lanes, N, Kp, xq, sum, s, g, y);
                for (int64_t n = 0; n < N; n++) {
                    int32_t acc = 0;
                    for (int64_t k = 0; k < K; k++) acc += w[n * K + k] * xq[k];
                    float want = s == 0 ? 0.0f : (float)acc * (g / s);
                    if (memcmp(&y[n], &want, sizeof want) != 0)
                        fail_msg("K %lld N %lld pass %d: y[%lld] = %g, expected %g", (long long)K,
                                 (long long)N, pass, (long long)n, y[n], want);
                }
                uint32_t guard;
                memcpy(&guard, &y[N], sizeof guard);
                assert_int_equal(guard, 0xffffffffu);
            }
            free(p), free(lanes), free(w), free(xq);
        }
    int64_t K = VNQ_LANES_MAX_K, Kp = vn_ternary_row_bytes(K) * 4, N = 3;
    uint8_t *p = malloc((size_t)(N * Kp / 4)), *lanes = malloc(vnq__lanes_bytes(N, Kp));
    int8_t *xq = malloc((size_t)Kp);
    memset(p, 0xaa, (size_t)(N * Kp / 4)); /* code 2 (+1) everywhere */
    vnq__lanes_pack(p, N, Kp, lanes);
    for (int v = -128; v <= 127; v += 255) {
        memset(xq, v, (size_t)Kp);
        /* xsum passed as 0, so y is the raw Σ c·x̃ = 2·v·K (field 3's sum:
         * 4³·2·v·K/4, −2³⁰ at v = −128) */
        float y[3], want = (float)(2 * (int64_t)v * K);
        vnq__lanes_product(lanes, N, Kp, xq, 0, 1.0f, 1.0f, y);
        for (int n = 0; n < 3; n++) assert_memory_equal(&y[n], &want, sizeof want);
    }
    free(p), free(lanes), free(xq);
}

/* Rows of x̃ = 127 against all-+1 weights: the largest sums the s16 lanes
 * see, exact in the output (no saturation); rows with a NaN or an ∞. */
static void test_kernel_extremes(void **state)
{
    (void)state;
    int64_t K = 1000, N = 3;
    vn_tensor *w = vn_zeros(VN_F32, 2, (int64_t[]){N, K}), *x = vn_zeros(VN_F32, 2, (int64_t[]){2, K});
    CHECK_OK(vn_tensor_fill_(w, 0.5));
    CHECK_OK(vn_tensor_fill_(x, 3));
    for (int64_t k = 0; k < K; k++) f32(x)[K + k] = -3;
    float g;
    vn_tensor *p = vn_ternary_pack(w, &g), *y = p ? vn_ternary_matmul(x, p, K, g) : NULL;
    CHECK_PTR(y);
    for (int64_t n = 0; n < N; n++) {
        assert_close(f32(y)[n], 0.5 * 3 * K, 1e-6, "y+", n);
        assert_close(f32(y)[N + n], -0.5 * 3 * K, 1e-6, "y-", n);
    }
    /* A NaN or an ∞ in a row: that row's output is NaN (in both products),
     * the other row's is untouched. */
    f32(x)[5] = NAN;
    f32(x)[K + 7] = INFINITY;
    vn_tensor *x3 = vn_zeros(VN_F32, 2, (int64_t[]){3, K});
    CHECK_OK(vn_tensor_fill_(x3, 3));
    memcpy(f32(x3), f32(x), sizeof(float) * (size_t)(2 * K));
    vn_tensor *yt = vn_ternary_matmul(x3, p, K, g), *yb = vn_bitlinear(x3, w);
    CHECK_PTR(yt);
    CHECK_PTR(yb);
    for (int64_t n = 0; n < N; n++) {
        assert_true(isnan(f32(yt)[n]) && isnan(f32(yt)[N + n]));
        assert_true(isnan(f32(yb)[n]) && isnan(f32(yb)[N + n]));
        assert_close(f32(yt)[2 * N + n], 0.5 * 3 * K, 1e-6, "finite row", n);
    }
    vn_tensor *ts[] = {w, x, p, y, x3, yt, yb};
    for (int k = 0; k < 7; k++) vn_tensor_release(ts[k]);
}

static void test_errors(void **state)
{
    (void)state;
    vn_tensor *x = trand(2, (int64_t[]){2, 5}, -1, 1, 30), *w = trand(2, (int64_t[]){3, 5}, -1, 1, 31);
    vn_tensor *w1 = trand(1, (int64_t[]){5}, -1, 1, 32), *w4 = trand(2, (int64_t[]){3, 4}, -1, 1, 33);
    vn_tensor *xi = vn_zeros(VN_I32, 2, (int64_t[]){2, 5});
    expect_error(vn_bitlinear(NULL, w), VN_ERR_ARG, "bitlinear: input");
    expect_error(vn_bitlinear(x, NULL), VN_ERR_ARG, "bitlinear: weight");
    expect_error(vn_bitlinear(x, w1), VN_ERR_SHAPE, "2-D (out, in)");
    expect_error(vn_bitlinear(x, w4), VN_ERR_SHAPE, "in features (4)");
    expect_error(vn_bitlinear(xi, w), VN_ERR_DTYPE, "bitlinear: input");
    float g;
    vn_tensor *p = vn_ternary_pack(w, &g);
    CHECK_PTR(p);
    expect_error(vn_ternary_pack(w, NULL), VN_ERR_ARG, "gamma");
    expect_error(vn_ternary_matmul(x, p, 6, g), VN_ERR_SHAPE, "(..., 6)");
    expect_error(vn_ternary_matmul(x, p, 200, g), VN_ERR_SHAPE, "expected (N, 64)");
    expect_error(vn_ternary_matmul(x, w, 5, g), VN_ERR_DTYPE, "packed weights");
    expect_error(vn_ternary_matmul(x, p, 5, NAN), VN_ERR_ARG, "gamma");
    expect_error(vn_ternary_unpack(p, 0), VN_ERR_ARG, "K = 0");
    /* Corrupt data: a code 3 inside, a nonzero code in the padding. */
    uint8_t *b = vn_tensor_data(p), keep = b[33];
    b[33] |= 3 << 2; /* row 1 (32 bytes a row), column 32 + 1 */
    assert_int_equal(vn_ternary_check(p, 5), VN_ERR_FORMAT);
    expect_error(vn_ternary_unpack(p, 5), VN_ERR_FORMAT, "row 1, column 33: code 3");
    b[33] = keep;
    b[10] = (uint8_t)((b[10] & ~3) | 2); /* row 0, column 10 ≥ K: padding must be code 1 */
    expect_error(vn_ternary_unpack(p, 5), VN_ERR_FORMAT, "row 0, column 10: code 2");
    vn_tensor *ts[] = {x, w, w1, w4, xi, p};
    for (int k = 0; k < 6; k++) vn_tensor_release(ts[k]);
}

/* vn_ternary_set_kernel: each kernel this CPU has, forced, gives the
 * portable kernel's output bit for bit through the public product, at one
 * row (where the automatic choice may differ) and more, over two chunks of
 * weight rows; "auto" goes back; a bad or unavailable name is refused and
 * changes nothing. */
static void test_set_kernel(void **state)
{
    (void)state;
    const char *names[] = {"portable", "avx2", "avx512vnni"};
    int64_t K = 300, N = 70, Bs[] = {1, 2, 9};
    vn_tensor *w = trand(2, (int64_t[]){N, K}, -1, 1, 40);
    float g;
    vn_tensor *p = vn_ternary_pack(w, &g);
    CHECK_PTR(p);
    for (int ib = 0; ib < 3; ib++) {
        int64_t B = Bs[ib];
        vn_tensor *x = trand(2, (int64_t[]){B, K}, -2, 2, 41 + (unsigned)ib);
        CHECK_OK(vn_ternary_set_kernel("portable"));
        vn_tensor *ref = vn_ternary_matmul(x, p, K, g);
        CHECK_PTR(ref);
        for (int i = 0; i < 3; i++) {
            if (!vnq__kernel(names[i])) { /* not on this CPU or build: refused */
                assert_int_equal(vn_ternary_set_kernel(names[i]), VN_ERR_ARG);
                assert_non_null(strstr(vn_last_error(), "not available"));
                continue;
            }
            CHECK_OK(vn_ternary_set_kernel(names[i]));
            assert_string_equal(vn_ternary_kernel(B), names[i]);
            assert_string_equal(vn_ternary_isa(), names[i]);
            vn_tensor *y = vn_ternary_matmul(x, p, K, g);
            CHECK_PTR(y);
            assert_memory_equal(vn_tensor_data(y), vn_tensor_data(ref), sizeof(float) * (size_t)(B * N));
            vn_tensor_release(y);
        }
        vn_tensor_release(x);
        vn_tensor_release(ref);
    }
    /* Bad names leave the forced kernel as it was. */
    CHECK_OK(vn_ternary_set_kernel("portable"));
    assert_int_equal(vn_ternary_set_kernel("vnni"), VN_ERR_ARG);
    assert_non_null(strstr(vn_last_error(), "unknown kernel \"vnni\", expected \"auto\""));
    assert_int_equal(vn_ternary_set_kernel(NULL), VN_ERR_ARG);
    assert_string_equal(vn_ternary_kernel(1), "portable");
    /* "auto": the widest kernel for several rows (as vn_ternary_isa says). */
    CHECK_OK(vn_ternary_set_kernel("auto"));
    assert_string_equal(vn_ternary_kernel(8), vn_ternary_isa());
    vn_tensor_release(w);
    vn_tensor_release(p);
}

/* vn_rms_norm: values against a plain loop (odd D, rows of very different
 * scales, a zero row: y = 0), the inference loop (no gradient) bit for bit
 * against the composition that runs when a gradient is wanted, gradients of
 * x and weight against central finite differences, bad arguments. */
static vn_tensor *f_rms_norm(vn_tensor **in, void *ctx)
{
    (void)ctx;
    return vn_rms_norm(in[0], in[1], 1e-6);
}

static void test_rms_norm(void **state)
{
    (void)state;
    int64_t B = 4, D = 37;
    vn_tensor *x = gc_param(2, (int64_t[]){B, D}, -2, 2, 80), *w = gc_param(1, &D, 0.5, 1.5, 81);
    for (int64_t j = 0; j < D; j++) f32(x)[D + j] *= 1000, f32(x)[2 * D + j] *= 0.1f;
    vn_tensor *y = vn_rms_norm(x, w, 1e-6);
    CHECK_PTR(y);
    for (int64_t b = 0; b < B; b++) {
        double ms = 0;
        for (int64_t j = 0; j < D; j++) ms += (double)f32(x)[b * D + j] * f32(x)[b * D + j];
        ms /= (double)D;
        for (int64_t j = 0; j < D; j++)
            assert_close(f32(y)[b * D + j], f32(x)[b * D + j] / sqrt(ms + 1e-6) * f32(w)[j], 1e-6, "y",
                         b * D + j);
    }
    bool was = vn_set_grad_enabled(false);
    vn_tensor *yi = vn_rms_norm(x, w, 1e-6); /* the loop; y above: the composed ops */
    vn_set_grad_enabled(was);
    CHECK_PTR(yi);
    assert_memory_equal(vn_tensor_data(yi), vn_tensor_data(y), sizeof(float) * (size_t)(B * D));
    vn_tensor *in[2] = {x, w};
    gradcheck(f_rms_norm, in, 2, NULL, 1e-3, 1e-2);
    /* a zero row: 0, not NaN (ε keeps the root positive) */
    vn_tensor *z = vn_zeros(VN_F32, 2, (int64_t[]){1, D}), *yz = vn_rms_norm(z, w, 1e-6);
    CHECK_PTR(yz);
    for (int64_t j = 0; j < D; j++) assert_float_equal(f32(yz)[j], 0, 0);
    vn_tensor *w2 = vn_zeros(VN_F32, 1, (int64_t[]){D + 1}), *xi = vn_zeros(VN_I32, 2, (int64_t[]){1, D});
    expect_error(vn_rms_norm(x, w2, 1e-6), VN_ERR_SHAPE, "weight (38,) does not match input (4, 37)");
    expect_error(vn_rms_norm(x, w, 0), VN_ERR_ARG, "eps must be positive");
    expect_error(vn_rms_norm(xi, w, 1e-6), VN_ERR_DTYPE, "rms_norm: input");
    expect_error(vn_rms_norm(x, NULL, 1e-6), VN_ERR_ARG, "rms_norm: weight");
    GC_RELEASE(x, w, y, yi, z, yz, w2, xi);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_and_ste), cmocka_unit_test(test_ste_finite_differences),
        cmocka_unit_test(test_zeros),           cmocka_unit_test(test_pack_and_kernels),
        cmocka_unit_test(test_kernel_extremes), cmocka_unit_test(test_one_row_kernels),
        cmocka_unit_test(test_narrow_rows_kernels), cmocka_unit_test(test_lanes_product),
        cmocka_unit_test(test_tiny_rows),
        cmocka_unit_test(test_quantize_row),    cmocka_unit_test(test_rms_quantize_row),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_ops_path),        cmocka_unit_test(test_set_kernel),
        cmocka_unit_test(test_rms_norm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
