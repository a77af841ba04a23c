/* Optimizer steps against a scalar reference in double, run for several
 * steps with changing gradients: SGD (plain, momentum with dampening,
 * Nesterov, weight decay), Adam (L2 weight decay) and AdamW (decoupled). */
#include "gradcheck.h"

#include <math.h>
#include <string.h>

#define N 7
#define STEPS 6

/* A gradient that changes with the step and depends on the parameter. */
static void make_grad(const float *p, int t, float *g)
{
    for (int i = 0; i < N; i++) g[i] = 0.3f * p[i] + (float)cos(1.3 * i + 0.7 * t);
}

static vn_tensor *vec(const float *data) { return tf32(1, (int64_t[]){N}, data); }

static void expect_close(const float *got, const double *want, const char *what, int t)
{
    for (int i = 0; i < N; i++)
        if (fabs(got[i] - want[i]) > 1e-5 * (1 + fabs(want[i])))
            fail_msg("%s, step %d, element %d: got %.8g, want %.8g", what, t, i, got[i], want[i]);
}

typedef struct { double lr, mu, damp, wd; bool nesterov; } sgd_cfg;

static void run_sgd(sgd_cfg c)
{
    float p0[N], g[N], pf[N], bf[N];
    double p[N], buf[N] = {0};
    for (int i = 0; i < N; i++) p[i] = p0[i] = (float)(0.5 * i - 1.2);
    vn_tensor *param = vec(p0), *grad = vec(p0), *mbuf = vn_zeros(VN_F32, 1, (int64_t[]){N});
    for (int t = 1; t <= STEPS; t++) {
        memcpy(pf, vn_tensor_data(param), sizeof pf);
        make_grad(pf, t, g);
        memcpy(vn_tensor_data(grad), g, sizeof g);
        CHECK_OK(vn_sgd_step(param, grad, c.mu ? mbuf : NULL, c.lr, c.mu, c.damp, c.wd,
                             c.nesterov, t == 1));
        for (int i = 0; i < N; i++) {
            double d = g[i] + c.wd * p[i];
            if (c.mu != 0) {
                buf[i] = t == 1 ? d : c.mu * buf[i] + (1 - c.damp) * d;
                d = c.nesterov ? d + c.mu * buf[i] : buf[i];
            }
            p[i] -= c.lr * d;
        }
        expect_close(vn_tensor_data(param), p, "sgd parameter", t);
        if (c.mu != 0) {
            memcpy(bf, vn_tensor_data(mbuf), sizeof bf);
            expect_close(bf, buf, "sgd momentum buffer", t);
        }
    }
    vn_tensor_release(param);
    vn_tensor_release(grad);
    vn_tensor_release(mbuf);
}

static void test_sgd(void **state)
{
    run_sgd((sgd_cfg){.lr = 0.1});
    run_sgd((sgd_cfg){.lr = 0.05, .wd = 0.01});
    run_sgd((sgd_cfg){.lr = 0.1, .mu = 0.9});
    run_sgd((sgd_cfg){.lr = 0.1, .mu = 0.9, .damp = 0.1, .wd = 0.001});
    run_sgd((sgd_cfg){.lr = 0.1, .mu = 0.9, .nesterov = true});
    run_sgd((sgd_cfg){.lr = 0.02, .mu = 0.5, .wd = 0.1, .nesterov = true});
}

typedef struct { double lr, b1, b2, eps, wd; bool decoupled; } adam_cfg;

static void run_adam(adam_cfg c)
{
    float p0[N], g[N], pf[N];
    double p[N], m[N] = {0}, v[N] = {0};
    for (int i = 0; i < N; i++) p[i] = p0[i] = (float)(0.5 * i - 1.2);
    vn_tensor *param = vec(p0), *grad = vec(p0);
    vn_tensor *ea = vn_zeros(VN_F32, 1, (int64_t[]){N}), *eas = vn_zeros(VN_F32, 1, (int64_t[]){N});
    for (int t = 1; t <= STEPS; t++) {
        memcpy(pf, vn_tensor_data(param), sizeof pf);
        make_grad(pf, t, g);
        memcpy(vn_tensor_data(grad), g, sizeof g);
        CHECK_OK(vn_adam_step(param, grad, ea, eas, t, c.lr, c.b1, c.b2, c.eps, c.wd, c.decoupled));
        for (int i = 0; i < N; i++) {
            double gi = g[i];
            if (c.decoupled) p[i] *= 1 - c.lr * c.wd;
            else gi += c.wd * p[i];
            m[i] = c.b1 * m[i] + (1 - c.b1) * gi;
            v[i] = c.b2 * v[i] + (1 - c.b2) * gi * gi;
            double mh = m[i] / (1 - pow(c.b1, t)), vh = v[i] / (1 - pow(c.b2, t));
            p[i] -= c.lr * mh / (sqrt(vh) + c.eps);
        }
        expect_close(vn_tensor_data(param), p, c.decoupled ? "adamw parameter" : "adam parameter", t);
        expect_close(vn_tensor_data(ea), m, "adam exp_avg", t);
        expect_close(vn_tensor_data(eas), v, "adam exp_avg_sq", t);
    }
    vn_tensor_release(param);
    vn_tensor_release(grad);
    vn_tensor_release(ea);
    vn_tensor_release(eas);
}

static void test_adam(void **state)
{
    run_adam((adam_cfg){.lr = 1e-2, .b1 = 0.9, .b2 = 0.999, .eps = 1e-8});
    run_adam((adam_cfg){.lr = 1e-2, .b1 = 0.9, .b2 = 0.999, .eps = 1e-8, .wd = 0.1});
    run_adam((adam_cfg){.lr = 1e-2, .b1 = 0.9, .b2 = 0.999, .eps = 1e-8, .wd = 0.1, .decoupled = true});
    run_adam((adam_cfg){.lr = 0.1, .b1 = 0.5, .b2 = 0.9, .eps = 1e-3, .wd = 0.5, .decoupled = true});
}

static void expect_error(vn_status s, vn_status want, const char *needle)
{
    assert_int_equal(s, want);
    if (!strstr(vn_last_error(), needle))
        fail_msg("error message \"%s\" lacks \"%s\"", vn_last_error(), needle);
}

/* adam_step_multi on two parameters gives exactly what two adam_step calls
 * give, and a bad entry is refused before anything is written. */
static void test_adam_multi(void **state)
{
    float init[N], g[N];
    for (int i = 0; i < N; i++) init[i] = (float)sin(1.0 + i);
    vn_tensor *p[2], *q[2], *gr[2], *m[4], *v[4];
    for (int k = 0; k < 2; k++) {
        p[k] = vec(init), q[k] = vec(init);
        make_grad(init, k, g);
        gr[k] = vec(g);
        for (int j = 0; j < 2; j++) {
            m[2 * k + j] = vn_zeros(VN_F32, 1, (int64_t[]){N});
            v[2 * k + j] = vn_zeros(VN_F32, 1, (int64_t[]){N});
        }
    }
    for (int t = 1; t <= 3; t++) {
        vn_tensor *ms[2] = {m[0], m[2]}, *vs[2] = {v[0], v[2]};
        CHECK_OK(vn_adam_step_multi(2, p, (const vn_tensor *const *)gr, ms, vs, t, 1e-2, 0.9, 0.99,
                                    1e-8, 0.1, true));
        for (int k = 0; k < 2; k++)
            CHECK_OK(vn_adam_step(q[k], gr[k], m[2 * k + 1], v[2 * k + 1], t, 1e-2, 0.9, 0.99, 1e-8,
                                  0.1, true));
    }
    for (int k = 0; k < 2; k++)
        assert_memory_equal(vn_tensor_data(p[k]), vn_tensor_data(q[k]), sizeof(float) * N);
    /* entry 1's gradient has the wrong shape: entry 0 must stay untouched */
    float before[N];
    memcpy(before, vn_tensor_data(p[0]), sizeof before);
    vn_tensor *bad = vn_zeros(VN_F32, 1, (int64_t[]){N + 1});
    const vn_tensor *gs[2] = {gr[0], bad};
    vn_tensor *ms[2] = {m[0], m[2]}, *vs[2] = {v[0], v[2]};
    expect_error(vn_adam_step_multi(2, p, gs, ms, vs, 4, 1e-2, 0.9, 0.99, 1e-8, 0, false),
                 VN_ERR_SHAPE, "parameter 1");
    assert_memory_equal(vn_tensor_data(p[0]), before, sizeof before);
    expect_error(vn_adam_step_multi(2, NULL, gs, ms, vs, 1, 1e-2, 0.9, 0.99, 1e-8, 0, false),
                 VN_ERR_ARG, "NULL array");
    vn_tensor_release(bad);
    for (int k = 0; k < 2; k++) {
        vn_tensor_release(p[k]);
        vn_tensor_release(q[k]);
        vn_tensor_release(gr[k]);
    }
    for (int j = 0; j < 4; j++) {
        vn_tensor_release(m[j]);
        vn_tensor_release(v[j]);
    }
}

static void test_errors(void **state)
{
    vn_tensor *p = vn_zeros(VN_F32, 2, (int64_t[]){2, 3}), *g = vn_zeros(VN_F32, 2, (int64_t[]){3, 2});
    vn_tensor *ok = vn_zeros(VN_F32, 2, (int64_t[]){2, 3}), *gt = vn_transpose(g, 0, 1);
    vn_tensor *gi = vn_zeros(VN_I32, 2, (int64_t[]){2, 3});
    expect_error(vn_sgd_step(p, g, NULL, 0.1, 0, 0, 0, false, true), VN_ERR_SHAPE, "(3, 2)");
    expect_error(vn_sgd_step(p, gt, NULL, 0.1, 0, 0, 0, false, true), VN_ERR_ARG, "contiguous");
    expect_error(vn_sgd_step(p, gi, NULL, 0.1, 0, 0, 0, false, true), VN_ERR_DTYPE, "i32");
    expect_error(vn_sgd_step(p, ok, NULL, 0.1, 0.9, 0, 0, false, true), VN_ERR_ARG, "momentum");
    expect_error(vn_sgd_step(p, ok, g, 0.1, 0.9, 0, 0, false, true), VN_ERR_SHAPE, "momentum buffer");
    vn_tensor *m = vn_zeros(VN_F32, 2, (int64_t[]){2, 3}), *v = vn_zeros(VN_F32, 2, (int64_t[]){2, 3});
    expect_error(vn_adam_step(p, ok, m, v, 0, 0.1, 0.9, 0.999, 1e-8, 0, false), VN_ERR_ARG,
                 "step must be >= 1");
    expect_error(vn_adam_step(p, ok, m, m, 1, 0.1, 0.9, 0.999, 1e-8, 0, false), VN_ERR_ARG, "distinct");
    expect_error(vn_adam_step(p, ok, m, v, 1, 0.1, 1.5, 0.999, 1e-8, 0, false), VN_ERR_ARG,
                 "beta1 must be a finite number in [0, 1), got 1.5");
    expect_error(vn_sgd_step(p, ok, NULL, NAN, 0, 0, 0, false, true), VN_ERR_ARG, "lr must be");
    expect_error(vn_sgd_step(p, ok, NULL, 0.1, 0, 0, -1, false, true), VN_ERR_ARG, "weight_decay");
    vn_tensor_release(m);
    vn_tensor_release(v);
    expect_error(vn_adam_step(p, ok, g, ok, 1, 0.1, 0.9, 0.999, 1e-8, 0, false), VN_ERR_SHAPE, "exp_avg");
    vn_tensor_release(p);
    vn_tensor_release(g);
    vn_tensor_release(ok);
    vn_tensor_release(gt);
    vn_tensor_release(gi);
}

/* A large parameter takes the threaded path: same result as the reference. */
static void test_large(void **state)
{
    const int64_t n = 1 << 17;
    vn_tensor *p = trand(1, &n, -1, 1, 3), *g = trand(1, &n, -1, 1, 4);
    vn_tensor *m = vn_zeros(VN_F32, 1, &n), *v = vn_zeros(VN_F32, 1, &n), *p0 = vn_clone(p);
    CHECK_OK(vn_adam_step(p, g, m, v, 1, 1e-3, 0.9, 0.999, 1e-8, 0.01, true));
    const float *pp = vn_tensor_data(p), *pg = vn_tensor_data(g), *q = vn_tensor_data(p0);
    for (int64_t i = 0; i < n; i++) {
        /* step 1: m̂ = g, v̂ = g², so p ← p(1 − lr·wd) − lr·g/(|g| + eps) */
        double want = q[i] * (1 - 1e-5) - 1e-3 * pg[i] / (fabs(pg[i]) + 1e-8);
        if (fabs(pp[i] - want) > 1e-6) fail_msg("element %lld: %g vs %g", (long long)i, pp[i], want);
    }
    vn_tensor_release(p);
    vn_tensor_release(g);
    vn_tensor_release(m);
    vn_tensor_release(v);
    vn_tensor_release(p0);
}

/* Four parameters of uneven sizes, enough elements for the threads: the
 * split between threads falls inside a tensor. adam_step_multi's one loop
 * over all elements gives the bits of adam_step on each. */
static void test_adam_multi_large(void **state)
{
    (void)state;
    const int64_t size[4] = {7, 40000, 13, 25001};
    vn_tensor *p[4], *q[4], *g[4], *m[8], *v[8];
    for (int k = 0; k < 4; k++) {
        p[k] = vn_zeros(VN_F32, 1, &size[k]);
        q[k] = vn_zeros(VN_F32, 1, &size[k]);
        g[k] = vn_zeros(VN_F32, 1, &size[k]);
        float *pp = vn_tensor_data(p[k]), *pq = vn_tensor_data(q[k]), *pg = vn_tensor_data(g[k]);
        for (int64_t i = 0; i < size[k]; i++) {
            pp[i] = pq[i] = (float)sin(0.1 * (double)i + k);
            pg[i] = (float)cos(0.37 * (double)i - k);
        }
        for (int j = 0; j < 2; j++) {
            m[2 * k + j] = vn_zeros(VN_F32, 1, &size[k]);
            v[2 * k + j] = vn_zeros(VN_F32, 1, &size[k]);
        }
    }
    vn_tensor *ms[4] = {m[0], m[2], m[4], m[6]}, *vs[4] = {v[0], v[2], v[4], v[6]};
    for (int t = 1; t <= 2; t++) {
        CHECK_OK(vn_adam_step_multi(4, p, (const vn_tensor *const *)g, ms, vs, t, 1e-2, 0.9, 0.99,
                                    1e-8, 0.1, true));
        for (int k = 0; k < 4; k++)
            CHECK_OK(vn_adam_step(q[k], g[k], m[2 * k + 1], v[2 * k + 1], t, 1e-2, 0.9, 0.99, 1e-8,
                                  0.1, true));
    }
    for (int k = 0; k < 4; k++) {
        assert_memory_equal(vn_tensor_data(p[k]), vn_tensor_data(q[k]),
                            sizeof(float) * (size_t)size[k]);
        assert_memory_equal(vn_tensor_data(m[2 * k]), vn_tensor_data(m[2 * k + 1]),
                            sizeof(float) * (size_t)size[k]);
        vn_tensor_release(p[k]);
        vn_tensor_release(q[k]);
        vn_tensor_release(g[k]);
        for (int j = 0; j < 2; j++) {
            vn_tensor_release(m[2 * k + j]);
            vn_tensor_release(v[2 * k + j]);
        }
    }
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd), cmocka_unit_test(test_adam), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_large), cmocka_unit_test(test_adam_multi),
        cmocka_unit_test(test_adam_multi_large),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
