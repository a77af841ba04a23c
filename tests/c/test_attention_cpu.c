/* The CPU causal attention's two paths (engine/attention_cpu.c's AVX-512
 * register tiles for T <= 1024 and Dh a multiple of 16, OpenBLAS for the
 * rest, and for everything when VENOM_NO_AVX512 is set): output and all
 * three gradients against a double-precision reference, at sequence
 * lengths around the kernel's 16-column vectors and 4/8-row tiles and head
 * dims of 1 to 5 vectors (and ones it refuses), through both layouts
 * (vn_causal_attention on (B, H, T, Dh) heads, vn_causal_self_attention on
 * a fused (B, T, 3C) qkv), each with the dispatch as the CPU allows and
 * forced to OpenBLAS; a finite-difference check at a kernel shape. */
#include "gradcheck.h"

#include "attention_cpu.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* out and dq, dk, dv of sum(out ⊙ w) for one head: q, k, v, w (T × Dh)
 * with row stride ld (ldw for w), in double; out, dq, dk, dv contiguous
 * (T × Dh). dS_tj = p_tj (w_t·v_j − Σ_i p_ti w_t·v_i). */
static void head_ref(const float *q, const float *k, const float *v, int64_t ld, const float *w,
                     int64_t ldw, int64_t T, int64_t Dh, double *out, double *dq, double *dk,
                     double *dv)
{
    double *p = malloc(sizeof(double) * (size_t)T * 2), *dp = p + T, sc = 1 / sqrt((double)Dh);
    memset(dq, 0, sizeof(double) * (size_t)(T * Dh));
    memset(dk, 0, sizeof(double) * (size_t)(T * Dh));
    memset(dv, 0, sizeof(double) * (size_t)(T * Dh));
    for (int64_t t = 0; t < T; t++) {
        double m = -INFINITY, sum = 0, dot = 0;
        for (int64_t j = 0; j <= t; j++) {
            double s = 0;
            for (int64_t d = 0; d < Dh; d++) s += (double)q[t * ld + d] * k[j * ld + d];
            p[j] = s * sc;
            m = p[j] > m ? p[j] : m;
        }
        for (int64_t j = 0; j <= t; j++) sum += p[j] = exp(p[j] - m);
        for (int64_t j = 0; j <= t; j++) {
            p[j] /= sum;
            dp[j] = 0;
            for (int64_t d = 0; d < Dh; d++) dp[j] += (double)w[t * ldw + d] * v[j * ld + d];
            dot += p[j] * dp[j];
        }
        for (int64_t d = 0; d < Dh; d++) {
            double o = 0;
            for (int64_t j = 0; j <= t; j++) o += p[j] * v[j * ld + d];
            out[t * Dh + d] = o;
        }
        for (int64_t j = 0; j <= t; j++) {
            double g = p[j] * (dp[j] - dot) * sc;
            for (int64_t d = 0; d < Dh; d++) {
                dq[t * Dh + d] += g * k[j * ld + d];
                dk[j * Dh + d] += g * q[t * ld + d];
                dv[j * Dh + d] += p[j] * w[t * ldw + d];
            }
        }
    }
    free(p);
}

/* got (T × Dh, row stride ld) against want (T × Dh); relative tolerance. */
static void check_head(const float *got, int64_t ld, const double *want, int64_t T, int64_t Dh,
                       const char *what, int64_t head, int64_t Tc, int64_t Dhc, bool fast)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t d = 0; d < Dh; d++) {
            double g = got[t * ld + d], e = want[t * Dh + d];
            if (!(fabs(g - e) <= 2e-5 * (1 + fabs(e))))
                fail_msg("T %lld Dh %lld (%s path): %s of head %lld at (%lld, %lld) = %.8g, want "
                         "%.8g", (long long)Tc, (long long)Dhc, fast ? "AVX-512" : "OpenBLAS",
                         what, (long long)head, (long long)t, (long long)d, g, e);
        }
}

/* Whether this run expects the register tiles at (T, Dh): the CPU has
 * AVX-512F and the dispatch is not forced off. */
static bool expect_fast(int64_t T, int64_t Dh, bool forced_off)
{
    return !forced_off && __builtin_cpu_supports("avx512f") && T <= VN_ATT_CPU_MAX_T &&
           Dh % 16 == 0;
}

/* (B, H, T, Dh) heads through vn_causal_attention, checked head by head. */
static void heads_case(int64_t B, int64_t H, int64_t T, int64_t Dh, bool fast)
{
    int64_t shape[4] = {B, H, T, Dh}, n = T * Dh;
    vn_tensor *q = gc_param(4, shape, -2, 2, 40), *k = gc_param(4, shape, -2, 2, 41),
              *v = gc_param(4, shape, -1, 1, 42), *w = trand(4, shape, -1, 1, 43);
    vn_tensor *out = vn_causal_attention(q, k, v);
    CHECK_PTR(out);
    CHECK_OK(vn_backward(out, w));
    float *pq = gc_values(q), *pk = gc_values(k), *pv = gc_values(v), *pw = gc_values(w);
    float *got[4] = {gc_values(out), gc_values(vn_tensor_grad(q)), gc_values(vn_tensor_grad(k)),
                     gc_values(vn_tensor_grad(v))};
    double *want = malloc(sizeof(double) * (size_t)n * 4);
    const char *name[4] = {"out", "dq", "dk", "dv"};
    for (int64_t h = 0; h < B * H; h++) {
        int64_t o = h * n;
        head_ref(pq + o, pk + o, pv + o, Dh, pw + o, Dh, T, Dh, want, want + n, want + 2 * n,
                 want + 3 * n);
        for (int i = 0; i < 4; i++) check_head(got[i] + o, Dh, want + i * n, T, Dh, name[i], h,
                                               T, Dh, fast);
    }
    for (int i = 0; i < 4; i++) free(got[i]);
    free(pq);
    free(pk);
    free(pv);
    free(pw);
    free(want);
    GC_RELEASE(q, k, v, w, out);
}

/* A fused qkv (B, T, 3·H·Dh) through vn_causal_self_attention: head h of
 * batch b reads columns h·Dh.. of the q, k and v thirds and writes columns
 * h·Dh.. of the (B, T, C) output; dqkv the same way. */
static void fused_case(int64_t B, int64_t H, int64_t T, int64_t Dh, bool fast)
{
    int64_t C = H * Dh, shape[3] = {B, T, 3 * C}, oshape[3] = {B, T, C}, n = T * Dh;
    vn_tensor *x = gc_param(3, shape, -2, 2, 50), *w = trand(3, oshape, -1, 1, 51);
    vn_tensor *out = vn_causal_self_attention(x, H);
    CHECK_PTR(out);
    CHECK_OK(vn_backward(out, w));
    float *px = gc_values(x), *pw = gc_values(w), *po = gc_values(out),
          *pd = gc_values(vn_tensor_grad(x));
    double *want = malloc(sizeof(double) * (size_t)n * 4);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const float *xb = px + b * T * 3 * C + h * Dh;
            const float *dx = pd + b * T * 3 * C + h * Dh;
            int64_t ob = b * T * C + h * Dh;
            head_ref(xb, xb + C, xb + 2 * C, 3 * C, pw + ob, C, T, Dh, want, want + n,
                     want + 2 * n, want + 3 * n);
            check_head(po + ob, C, want, T, Dh, "fused out", b * H + h, T, Dh, fast);
            check_head(dx, 3 * C, want + n, T, Dh, "fused dq", b * H + h, T, Dh, fast);
            check_head(dx + C, 3 * C, want + 2 * n, T, Dh, "fused dk", b * H + h, T, Dh, fast);
            check_head(dx + 2 * C, 3 * C, want + 3 * n, T, Dh, "fused dv", b * H + h, T, Dh,
                       fast);
        }
    free(px);
    free(pw);
    free(po);
    free(pd);
    free(want);
    GC_RELEASE(x, w, out);
}

static const int64_t Ts[] = {1, 2, 15, 16, 17, 33, 64, 100, 128, 256, 257};
static const int64_t Dhs[] = {8, 16, 24, 32, 48, 64, 80};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Every (T, Dh) through both layouts, with the dispatch the CPU allows
 * (forced_off false) or forced to OpenBLAS; checks that the dispatch took
 * the path expected, so the comparisons test the kernel meant. */
static void all_shapes(bool forced_off)
{
    if (forced_off) setenv("VENOM_NO_AVX512", "1", 1);
    for (size_t i = 0; i < COUNT(Ts); i++)
        for (size_t j = 0; j < COUNT(Dhs); j++) {
            int64_t T = Ts[i], Dh = Dhs[j];
            bool fast = vn__attention_cpu_fast(T, Dh);
            if (fast != expect_fast(T, Dh, forced_off))
                fail_msg("T %lld Dh %lld: dispatch says %d", (long long)T, (long long)Dh, fast);
            /* several heads per call (the parallel loop and the head
             * offsets); fewer where the reference is slow */
            int64_t B = T > 128 ? 1 : 2;
            heads_case(B, 3, T, Dh, fast);
            fused_case(B, 2, T, Dh, fast);
        }
    /* at the kernel's longest T and one past it, one head of Dh 16 */
    for (int64_t T = VN_ATT_CPU_MAX_T; T <= VN_ATT_CPU_MAX_T + 1; T++) {
        bool fast = vn__attention_cpu_fast(T, 16);
        if (fast != expect_fast(T, 16, forced_off))
            fail_msg("T %lld Dh 16: dispatch says %d", (long long)T, fast);
        heads_case(1, 1, T, 16, fast);
        fused_case(1, 1, T, 16, fast);
    }
    unsetenv("VENOM_NO_AVX512");
}

static void test_shapes_dispatched(void **state)
{
    (void)state;
    all_shapes(false);
}

static void test_shapes_openblas(void **state)
{
    (void)state;
    all_shapes(true);
}

static vn_tensor *f_attention(vn_tensor **in, void *ctx)
{
    (void)ctx;
    return vn_causal_attention(in[0], in[1], in[2]);
}

/* Finite differences at a shape the register tiles take (where the CPU
 * has them): T 19 (a row tail after the 4- and 8-row tiles, keys past one
 * vector), Dh 16. */
static void test_grad_fast_shape(void **state)
{
    (void)state;
    int64_t shape[4] = {1, 2, 19, 16};
    vn_tensor *in[3] = {gc_param(4, shape, -1, 1, 60), gc_param(4, shape, -1, 1, 61),
                        gc_param(4, shape, -1, 1, 62)};
    gradcheck(f_attention, in, 3, NULL, 1e-3, 1e-2);
    GC_RELEASE(in[0], in[1], in[2]);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes_dispatched),
        cmocka_unit_test(test_shapes_openblas),
        cmocka_unit_test(test_grad_fast_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
