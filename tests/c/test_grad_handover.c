/* Gradients that backward passes on without a copy (engine/autograd.c:
 * a slot adopts the gradient the walk handed to a rule when nothing else
 * holds it): add, sub, dropout at p = 0 or in eval mode, clone and reshape
 * pass theirs on, and gelu computes its own in the handed gradient. Each graph sends a gradient to two places and then adds
 * more into them in place; if the two places shared memory, each one's
 * gradient would change with the other's. Every gradient is checked against
 * its formula, worked out here in double. */
#include "gradcheck.h"
#include "vec_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int64_t S34[] = {3, 4};

static vn_tensor *scalar(float v) { return vn_from_data(VN_F32, 0, NULL, &v); }

static vn_tensor *times(const vn_tensor *t, float c)
{
    vn_tensor *k = scalar(c), *out = vn_mul(t, k);
    vn_tensor_release(k);
    return out;
}

/* Σ a ⊙ w */
static vn_tensor *dot(const vn_tensor *a, const vn_tensor *w)
{
    vn_tensor *p = vn_mul(a, w), *s = vn_sum_all(p);
    vn_tensor_release(p);
    return s;
}

/* x's gradient against want[i] (float-rounding tolerance) */
static void expect_grad(const vn_tensor *x, const double *want, int64_t n)
{
    const vn_tensor *g = vn_tensor_grad(x);
    assert_non_null(g);
    float *v = gc_values(g);
    for (int64_t i = 0; i < n; i++)
        if (fabs(v[i] - want[i]) > 1e-5 * (1 + fabs(want[i])))
            fail_msg("gradient[%lld] = %.9g, expected %.9g", (long long)i, v[i], want[i]);
    free(v);
}

/* The walk runs the rules in reverse order of a depth-first post-order
 * from the loss, inputs in order. So in loss = (Σ q ⊙ w3 + Σ p ⊙ w2) +
 * Σ s ⊙ w, s's rule runs first and hands its gradient to both of its
 * inputs; then the two dot products add into those inputs' gradients, each
 * in place, before either input's own rule runs. Shared memory would show. */
static vn_tensor *uses_after(const vn_tensor *s, const vn_tensor *p, const vn_tensor *q,
                             const vn_tensor *w, const vn_tensor *w2, const vn_tensor *w3)
{
    vn_tensor *lq = dot(q, w3), *lp = dot(p, w2), *ls = dot(s, w);
    vn_tensor *a = vn_add(lq, lp), *loss = vn_add(a, ls);
    GC_RELEASE(lq, lp, ls, a);
    return loss;
}

/* u = 3x, v = 5x, s = u + v (or u − (−v)), p and q = u and v in either
 * order: dx = 3·(w + w2) + 5·(w + w3), or with w2 and w3 swapped. */
static void test_add_gives_two_places(void **state)
{
    (void)state;
    vn_tensor *w = trand(2, S34, -1, 1, 1), *w2 = trand(2, S34, -1, 1, 2),
              *w3 = trand(2, S34, -1, 1, 3);
    float *pw = gc_values(w), *pw2 = gc_values(w2), *pw3 = gc_values(w3);
    for (int sub = 0; sub < 2; sub++)
        for (int swap = 0; swap < 2; swap++) {
            vn_tensor *x = gc_param(2, S34, -1, 1, 4);
            vn_tensor *u = times(x, 3), *v = times(x, 5);
            vn_tensor *nv = sub ? times(v, -1) : NULL;
            vn_tensor *s = sub ? vn_sub(u, nv) : vn_add(u, v);
            vn_tensor *loss = uses_after(s, swap ? v : u, swap ? u : v, w, w2, w3);
            CHECK_PTR(loss);
            CHECK_OK(vn_backward(loss, NULL));
            double want[12];
            for (int i = 0; i < 12; i++)
                want[i] = swap ? 3.0 * (pw[i] + pw3[i]) + 5.0 * (pw[i] + pw2[i])
                               : 3.0 * (pw[i] + pw2[i]) + 5.0 * (pw[i] + pw3[i]);
            expect_grad(x, want, 12);
            GC_RELEASE(x, u, v, nv, s, loss);
        }
    free(pw);
    free(pw2);
    free(pw3);
    GC_RELEASE(w, w2, w3);
}

/* a = 2x, f = dropout(a) at p = 0 or in eval mode, or clone(a) (rules that
 * pass the gradient on unchanged), h = a + f, used as above:
 * dx = 2·(w + w2 + w + w3), a's share and f's. */
static void test_identity_rules(void **state)
{
    (void)state;
    vn_tensor *w = trand(2, S34, -1, 1, 5), *w2 = trand(2, S34, -1, 1, 6),
              *w3 = trand(2, S34, -1, 1, 7);
    float *pw = gc_values(w), *pw2 = gc_values(w2), *pw3 = gc_values(w3);
    for (int k = 0; k < 3; k++) {
        vn_tensor *x = gc_param(2, S34, -1, 1, 8);
        vn_tensor *a = times(x, 2);
        vn_tensor *f = k == 0 ? vn_dropout(a, 0, true) : k == 1 ? vn_dropout(a, 0.5, false)
                                                                  : vn_clone(a);
        vn_tensor *h = vn_add(a, f), *loss = uses_after(h, a, f, w, w2, w3);
        CHECK_PTR(loss);
        CHECK_OK(vn_backward(loss, NULL));
        double want[12];
        for (int i = 0; i < 12; i++) want[i] = 2.0 * (2.0 * pw[i] + pw2[i] + pw3[i]);
        expect_grad(x, want, 12);
        GC_RELEASE(x, a, f, h, loss);
    }
    free(pw);
    free(pw2);
    free(pw3);
    GC_RELEASE(w, w2, w3);
}

/* m = 2x (3, 4), r = reshape(m) (4, 3) used twice (r + r), loss =
 * Σ (r + r) ⊙ w + Σ m ⊙ w2: dx = 2·(2·reshape(w) + w2). The reshape's rule
 * passes a view of its gradient, which m's slot adopts and then adds
 * into. */
static void test_reshape_view(void **state)
{
    (void)state;
    const int64_t s43[] = {4, 3};
    vn_tensor *w = trand(2, s43, -1, 1, 7), *w2 = trand(2, S34, -1, 1, 8);
    float *pw = gc_values(w), *pw2 = gc_values(w2);
    vn_tensor *x = gc_param(2, S34, -1, 1, 9);
    vn_tensor *m = times(x, 2), *r = vn_reshape(m, 2, s43), *rr = vn_add(r, r);
    vn_tensor *l1 = dot(rr, w), *l2 = dot(m, w2), *loss = vn_add(l1, l2);
    CHECK_PTR(loss);
    CHECK_OK(vn_backward(loss, NULL));
    double want[12];
    for (int i = 0; i < 12; i++) want[i] = 2.0 * (2.0 * pw[i] + pw2[i]);
    expect_grad(x, want, 12);
    GC_RELEASE(x, m, r, rr, l1, l2, loss, w, w2);
    free(pw);
    free(pw2);
}

/* A leaf that adopts the gradient it is handed owns it: the caller's
 * gradient tensor (backward copies it) and later backward passes stay
 * apart from it. */
static void test_leaf_owns_its_gradient(void **state)
{
    (void)state;
    vn_tensor *x = gc_param(2, S34, -1, 1, 10), *G = trand(2, S34, -1, 1, 11);
    float *pg = gc_values(G);
    vn_tensor *y = vn_dropout(x, 0, true);
    CHECK_OK(vn_backward(y, G));
    ((float *)vn_tensor_data(G))[0] = 99; /* the caller's tensor changes afterwards */
    double want[12];
    for (int i = 0; i < 12; i++) want[i] = pg[i];
    expect_grad(x, want, 12);
    vn_tensor *y2 = vn_dropout(x, 0, true), *l = dot(y2, G); /* the second adds into it */
    CHECK_OK(vn_backward(l, NULL));
    want[0] += 99;
    for (int i = 1; i < 12; i++) want[i] += pg[i];
    expect_grad(x, want, 12);
    free(pg);
    GC_RELEASE(x, G, y, y2, l);
}

/* gelu's rule computes in the gradient it is handed, split over the
 * threads: x.grad of Σ gelu(x) ⊙ w is vn__gelu_backward_f32(w, x) bit for
 * bit (tests/c/test_vec_math.c checks that loop against gelu' in double).
 * 513 columns: the threads' ranges do not fall on vector boundaries. */
static void test_gelu_in_place(void **state)
{
    (void)state;
    const int64_t s[] = {256, 513};
    int64_t n = s[0] * s[1];
    vn_tensor *x = gc_param(2, s, -4, 4, 12), *w = trand(2, s, -1, 1, 13);
    vn_tensor *y = vn_gelu(x), *loss = dot(y, w);
    CHECK_PTR(loss);
    CHECK_OK(vn_backward(loss, NULL));
    float *want = malloc(sizeof(float) * (size_t)n);
    assert_non_null(want);
    vn__gelu_backward_f32(want, vn_tensor_data(w), vn_tensor_data(x), n);
    const float *got = vn_tensor_data(vn_tensor_grad(x));
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)))
            fail_msg("gelu gradient[%lld] = %.9g, expected %.9g", (long long)i, (double)got[i],
                     (double)want[i]);
    free(want);
    GC_RELEASE(x, w, y, loss);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_gives_two_places),
        cmocka_unit_test(test_identity_rules),
        cmocka_unit_test(test_reshape_view),
        cmocka_unit_test(test_leaf_owns_its_gradient),
        cmocka_unit_test(test_gelu_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
