/* MoE dispatch: vn_scatter_add_rows against a plain loop, its gradients
 * (rows and weights) by finite differences; vn_moe_route against a
 * brute-force top-k, the DTS threshold, the capacity drop (an imbalanced
 * batch) and its bad input; and a whole MoE layer — router softmax, gather,
 * one GEMM–GELU–GEMM per expert, weighted scatter-add — gradchecked end to
 * end with tokens dropped for capacity. */
#include "gradcheck.h"

#include <math.h>
#include <string.h>

static vn_tensor *ti64(int64_t n, const int64_t *v)
{
    vn_tensor *t = vn_from_data(VN_I64, 1, &n, v);
    CHECK_PTR(t);
    return t;
}

static void expect_error(vn_status got, vn_status want, const char *needle)
{
    assert_int_equal(got, want);
    if (!strstr(vn_last_error(), needle))
        fail_msg("message \"%s\" lacks \"%s\"", vn_last_error(), needle);
}

/* ---- scatter_add_rows ------------------------------------------------------ */

static void test_scatter_values(void **state)
{
    (void)state;
    int64_t ys[3] = {6, 2, 3}, idx_v[6] = {4, 0, 4, 2, 0, 4}, ws = 6;
    vn_tensor *y = trand(3, ys, -1, 1, 1), *w = trand(1, &ws, -2, 2, 2), *idx = ti64(6, idx_v);
    vn_tensor *out = vn_scatter_add_rows(y, idx, w, 5);
    CHECK_PTR(out);
    assert_int_equal(vn_tensor_shape(out)[0], 5);
    const float *yp = vn_tensor_data(y), *wp = vn_tensor_data(w), *op = vn_tensor_data(out);
    for (int64_t r = 0; r < 5; r++)
        for (int64_t f = 0; f < 6; f++) {
            double want = 0; /* row r: the sum over the k that name it */
            for (int64_t k = 0; k < 6; k++)
                if (idx_v[k] == r) want += (double)wp[k] * yp[k * 6 + f];
            assert_true(fabs(op[r * 6 + f] - want) <= 1e-5 * (1 + fabs(want)));
        }
    vn_tensor *plain = vn_scatter_add_rows(y, idx, NULL, 5); /* no weights: all ones */
    CHECK_PTR(plain);
    assert_true(fabsf(((float *)vn_tensor_data(plain))[0 * 6 + 0] - (yp[1 * 6] + yp[4 * 6])) < 1e-6f);
    vn_tensor_release(plain);
    vn_tensor_release(out);
    vn_tensor_release(y);
    vn_tensor_release(w);
    vn_tensor_release(idx);
}

struct scatter_ctx { vn_tensor *idx; int64_t n; };

static vn_tensor *f_scatter(vn_tensor **in, void *ctx)
{
    struct scatter_ctx *c = ctx;
    return vn_scatter_add_rows(in[0], c->idx, in[1], c->n);
}

static vn_tensor *f_gather(vn_tensor **in, void *ctx)
{
    return vn_index_select(in[0], 0, ((struct scatter_ctx *)ctx)->idx);
}

static void test_scatter_gradcheck(void **state)
{
    (void)state;
    int64_t ys[2] = {5, 3}, ws = 5, idx_v[5] = {1, 3, 1, 0, 1}, xs[3] = {4, 2, 3};
    struct scatter_ctx c = {ti64(5, idx_v), 4};
    vn_tensor *in[2] = {trand(2, ys, -1, 1, 3), trand(1, &ws, -1, 1, 4)};
    vn_tensor_set_requires_grad(in[0], true);
    vn_tensor_set_requires_grad(in[1], true);
    gradcheck(f_scatter, in, 2, &c, 1e-2, 1e-3);
    vn_tensor *x = trand(3, xs, -1, 1, 5); /* the gather's gradient is the unweighted scatter */
    vn_tensor_set_requires_grad(x, true);
    gradcheck(f_gather, &x, 1, &c, 1e-2, 1e-3);
    vn_tensor_release(x);
    vn_tensor_release(in[0]);
    vn_tensor_release(in[1]);
    vn_tensor_release(c.idx);
}

static void test_scatter_errors(void **state)
{
    (void)state;
    int64_t ys[2] = {3, 2}, three = 3, two = 2, bad_v[3] = {0, 5, 1}, ok_v[3] = {0, 1, 1};
    vn_tensor *y = trand(2, ys, -1, 1, 6), *bad = ti64(3, bad_v), *idx = ti64(3, ok_v);
    vn_tensor *w2 = vn_zeros(VN_F32, 1, &two), *wi = vn_zeros(VN_I32, 1, &three);
    vn_tensor *fi = vn_zeros(VN_F32, 1, &three);
    assert_null(vn_scatter_add_rows(y, bad, NULL, 4));
    expect_error(vn_last_status(), VN_ERR_ARG, "index[1] = 5 out of range [0, 4)");
    assert_null(vn_scatter_add_rows(y, idx, w2, 4));
    expect_error(vn_last_status(), VN_ERR_SHAPE, "weights must be 1-d with one entry per row (3)");
    assert_null(vn_scatter_add_rows(y, idx, wi, 4));
    assert_int_equal(vn_last_status(), VN_ERR_DTYPE);
    assert_null(vn_scatter_add_rows(y, fi, NULL, 4));
    expect_error(vn_last_status(), VN_ERR_DTYPE, "index must be i32 or i64, found f32");
    assert_null(vn_scatter_add_rows(y, idx, NULL, -1));
    expect_error(vn_last_status(), VN_ERR_ARG, "n_rows must be >= 0");
    assert_null(vn_scatter_add_rows(NULL, idx, NULL, 4));
    assert_int_equal(vn_last_status(), VN_ERR_ARG);
    vn_tensor *tw = vn_zeros(VN_F32, 1, &two); /* 2 rows of idx for 3 rows of y */
    vn_tensor *short_idx = ti64(2, ok_v);
    assert_null(vn_scatter_add_rows(y, short_idx, NULL, 4));
    expect_error(vn_last_status(), VN_ERR_SHAPE, "index must be 1-d with one entry per row (3)");
    vn_tensor *ys_ = y, *list[] = {ys_, bad, idx, w2, wi, fi, tw, short_idx};
    for (size_t i = 0; i < sizeof list / sizeof *list; i++) vn_tensor_release(list[i]);
}

/* ---- routing ----------------------------------------------------------------- */

/* The 0-based top-k experts of each token by repeated argmax (ties: lower e). */
static void brute_topk(const float *s, int64_t T, int64_t E, int k, int64_t *choice)
{
    for (int64_t t = 0; t < T; t++) {
        bool used[16] = {false};
        for (int r = 0; r < k; r++) {
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++)
                if (!used[e] && (best < 0 || s[t * E + e] > s[t * E + best])) best = e;
            used[best] = true;
            choice[t * k + r] = best;
        }
    }
}

static void test_route_topk(void **state)
{
    (void)state;
    enum { T = 13, NE = 5, K = 2 };
    int64_t shape[2] = {T, NE};
    vn_tensor *s = trand(2, shape, -3, 3, 7);
    vn_moe_routing r;
    CHECK_OK(vn_moe_route(s, K, INFINITY, INFINITY, &r));
    int64_t choice[T * K];
    brute_topk(vn_tensor_data(s), T, NE, K, choice);
    assert_int_equal(r.selected, T * K);
    assert_int_equal(r.dropped, 0);
    assert_int_equal(vn_tensor_shape(r.tokens)[0], T * K);
    const int64_t *tok = vn_tensor_data(r.tokens), *slot = vn_tensor_data(r.slots);
    const int64_t *load = vn_tensor_data(r.load), *first = vn_tensor_data(r.first);
    const uint8_t *mask = vn_tensor_data(r.mask);
    int64_t at = 0;
    for (int64_t e = 0; e < NE; e++) {
        int64_t want_load = 0, want_first = 0;
        for (int64_t t = 0; t < T; t++) {
            bool chose = choice[t * K] == e || choice[t * K + 1] == e;
            want_first += choice[t * K] == e;
            assert_int_equal(mask[t * NE + e], chose);
            if (!chose) continue;
            want_load++;
            assert_int_equal(tok[at], t); /* grouped by expert, token order inside */
            assert_int_equal(slot[at], t * NE + e);
            at++;
        }
        assert_int_equal(load[e], want_load);
        assert_int_equal(first[e], want_first);
    }
    vn_moe_routing_release(&r);
    assert_null(r.tokens);
    vn_tensor_release(s);
}

static void test_route_threshold(void **state)
{
    (void)state;
    /* Probabilities: token 0 is dense (all above γ), token 1 has one expert
     * above γ but k = 2 keeps two, token 2 has three above. */
    const float p[3 * 4] = {0.4f, 0.3f, 0.2f, 0.1f, 0.9995f, 0.0003f, 0.0001f, 0.0001f,
                            0.05f, 0.0f, 0.5f, 0.45f};
    int64_t shape[2] = {3, 4};
    vn_tensor *s = tf32(2, shape, p);
    vn_moe_routing r;
    CHECK_OK(vn_moe_route(s, 2, 0.001, INFINITY, &r));
    assert_int_equal(r.selected, 4 + 2 + 3);
    const uint8_t want[12] = {1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 1, 1};
    assert_memory_equal(vn_tensor_data(r.mask), want, 12);
    vn_moe_routing_release(&r);
    vn_tensor_release(s);
}

/* Every token's first choice is expert 2: the expert keeps its capacity,
 * in token order, the rest are dropped; second choices are kept elsewhere. */
static void test_route_imbalance(void **state)
{
    (void)state;
    enum { T = 10, NE = 4 };
    float p[T * NE];
    for (int t = 0; t < T; t++)
        for (int e = 0; e < NE; e++) p[t * NE + e] = e == 2 ? 5.0f : (float)((t + e) % 3);
    int64_t shape[2] = {T, NE};
    vn_tensor *s = tf32(2, shape, p);
    vn_moe_routing r;
    CHECK_OK(vn_moe_route(s, 1, INFINITY, 1.0, &r));
    int64_t cap = (T + NE - 1) / NE; /* ⌈1.0 · 10 / 4⌉ = 3 */
    assert_int_equal(r.capacity, cap);
    assert_int_equal(r.dropped, T - cap);
    assert_int_equal(((int64_t *)vn_tensor_data(r.first))[2], T);
    assert_int_equal(((int64_t *)vn_tensor_data(r.load))[2], cap);
    for (int64_t i = 0; i < cap; i++) assert_int_equal(((int64_t *)vn_tensor_data(r.tokens))[i], i);
    vn_moe_routing_release(&r);
    CHECK_OK(vn_moe_route(s, 2, INFINITY, 1.0, &r)); /* 20 choices, capacity 5 each */
    assert_int_equal(r.capacity, 5);
    assert_int_equal(((int64_t *)vn_tensor_data(r.load))[2], 5);
    int64_t kept = vn_tensor_shape(r.tokens)[0];
    assert_int_equal(kept + r.dropped, 2 * T);
    vn_moe_routing_release(&r);
    vn_tensor_release(s);
}

static void test_route_errors(void **state)
{
    (void)state;
    int64_t shape[2] = {3, 4}, none[2] = {3, 0}, flat = 12;
    vn_tensor *s = trand(2, shape, -1, 1, 8), *empty = vn_zeros(VN_F32, 2, none);
    vn_tensor *v = vn_zeros(VN_F32, 1, &flat), *si = vn_zeros(VN_I64, 2, shape);
    vn_moe_routing r;
    expect_error(vn_moe_route(s, 5, INFINITY, 1, &r), VN_ERR_ARG, "k = 5 experts per token, expected 1..4");
    assert_null(r.tokens);
    expect_error(vn_moe_route(s, 0, INFINITY, 1, &r), VN_ERR_ARG, "k = 0");
    expect_error(vn_moe_route(empty, 1, INFINITY, 1, &r), VN_ERR_ARG, "there are no experts");
    expect_error(vn_moe_route(s, 1, INFINITY, 0, &r), VN_ERR_ARG, "capacity_factor = 0, expected > 0");
    expect_error(vn_moe_route(s, 1, INFINITY, -1.5, &r), VN_ERR_ARG, "capacity_factor = -1.5");
    expect_error(vn_moe_route(s, 1, INFINITY, NAN, &r), VN_ERR_ARG, "capacity_factor = nan");
    expect_error(vn_moe_route(s, 1, NAN, 1, &r), VN_ERR_ARG, "threshold is NaN");
    expect_error(vn_moe_route(v, 1, INFINITY, 1, &r), VN_ERR_SHAPE, "scores must be (tokens, experts), found (12,)");
    expect_error(vn_moe_route(si, 1, INFINITY, 1, &r), VN_ERR_DTYPE, "i64");
    expect_error(vn_moe_route(s, 1, INFINITY, 1, NULL), VN_ERR_ARG, "NULL");
    expect_error(vn_moe_route(NULL, 1, INFINITY, 1, &r), VN_ERR_ARG, "scores");
    ((float *)vn_tensor_data(s))[2 * 4 + 1] = NAN;
    expect_error(vn_moe_route(s, 1, INFINITY, 1, &r), VN_ERR_ARG, "scores[2, 1] is NaN");
    assert_null(r.load); /* a failed route leaves nothing behind */
    vn_tensor_release(s);
    vn_tensor_release(empty);
    vn_tensor_release(v);
    vn_tensor_release(si);
}

/* ---- a whole MoE layer, end to end -------------------------------------------- */

enum { LT = 12, LD = 3, LH = 4, LE = 3 };

struct layer_ctx { vn_moe_routing r; bool renormalise; };

/* out = x + Σ_e scatter_add_rows(W2_e·gelu(W1_e·x[tokens_e]), tokens_e, w_e),
 * w the router softmax at the kept slots (renormalise: softmax over each
 * token's chosen experts, top-k style). The routing is fixed in ctx (it is
 * piecewise constant: finite differences must not move it). */
static vn_tensor *f_layer(vn_tensor **in, void *ctx)
{
    struct layer_ctx *c = ctx;
    vn_tensor *x = in[0], *wr = in[1], *w1 = in[2], *w2 = in[3];
    vn_tensor *logits = vn_matmul(x, wr), *p = NULL;
    if (c->renormalise) { /* logits − 1e9 where not chosen, then softmax */
        vn_tensor *m = vn_to_dtype(c->r.mask, VN_F32), *one = vn_full(VN_F32, 0, NULL, 1.0), *big = vn_full(VN_F32, 0, NULL, 1e9);
        vn_tensor *off = vn_sub(m, one), *bias = vn_mul(off, big), *masked = vn_add(logits, bias);
        p = vn_softmax(masked, 1);
        vn_tensor *tmp[] = {m, one, big, off, bias, masked};
        for (size_t i = 0; i < 6; i++) vn_tensor_release(tmp[i]);
    } else {
        p = vn_softmax(logits, 1);
    }
    int64_t flat = LT * LE;
    vn_tensor *pf = vn_reshape(p, 1, &flat), *w = vn_index_select(pf, 0, c->r.slots);
    vn_tensor *out = vn_clone(x);
    const int64_t *load = vn_tensor_data(c->r.load);
    int64_t start = 0;
    for (int64_t e = 0; e < LE; e++) {
        if (!load[e]) continue;
        vn_tensor *idx = vn_narrow(c->r.tokens, 0, start, load[e]);
        vn_tensor *we = vn_narrow(w, 0, start, load[e]);
        vn_tensor *xe = vn_index_select(x, 0, idx);
        vn_tensor *a = vn_select(w1, 0, e), *b = vn_select(w2, 0, e);
        vn_tensor *h = vn_matmul(xe, a), *g = vn_gelu(h), *ye = vn_matmul(g, b);
        vn_tensor *back = vn_scatter_add_rows(ye, idx, we, LT), *sum = vn_add(out, back);
        vn_tensor *tmp[] = {idx, we, xe, a, b, h, g, ye, back, out};
        for (size_t i = 0; i < 10; i++) vn_tensor_release(tmp[i]);
        out = sum;
        start += load[e];
    }
    vn_tensor *tmp[] = {logits, p, pf, w};
    for (size_t i = 0; i < 4; i++) vn_tensor_release(tmp[i]);
    return out;
}

static void check_layer(int k, double threshold, double cf, bool renormalise, bool expect_drops)
{
    int64_t xs[2] = {LT, LD}, rs[2] = {LD, LE}, w1s[3] = {LE, LD, LH}, w2s[3] = {LE, LH, LD};
    vn_tensor *in[4] = {trand(2, xs, -1, 1, 11), trand(2, rs, -1, 1, 12), trand(3, w1s, -1, 1, 13),
                        trand(3, w2s, -1, 1, 14)};
    for (int i = 0; i < 4; i++) vn_tensor_set_requires_grad(in[i], true);
    struct layer_ctx c = {.renormalise = renormalise};
    vn_tensor *logits = vn_matmul(in[0], in[1]);
    vn_tensor *p = threshold < INFINITY ? vn_softmax(logits, 1) : vn_tensor_retain(logits);
    CHECK_OK(vn_moe_route(p, k, threshold, cf, &c.r));
    if (expect_drops) assert_true(c.r.dropped > 0);
    else assert_int_equal(c.r.dropped, 0);
    gradcheck(f_layer, in, 4, &c, 1e-2, 2e-3);
    vn_moe_routing_release(&c.r);
    vn_tensor_release(logits);
    vn_tensor_release(p);
    for (int i = 0; i < 4; i++) vn_tensor_release(in[i]);
}

static void test_layer_gradcheck(void **state)
{
    (void)state;
    check_layer(1, INFINITY, INFINITY, false, false); /* Switch, no capacity limit */
    check_layer(1, INFINITY, 0.75, false, true);      /* Switch with dropped tokens */
    check_layer(2, INFINITY, 0.6, true, true);        /* top-2, renormalised, drops */
    check_layer(1, 0.2, INFINITY, false, false);      /* DTS: p > γ, at least 1 */
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scatter_values),  cmocka_unit_test(test_scatter_gradcheck),
        cmocka_unit_test(test_scatter_errors),  cmocka_unit_test(test_route_topk),
        cmocka_unit_test(test_route_threshold), cmocka_unit_test(test_route_imbalance),
        cmocka_unit_test(test_route_errors),    cmocka_unit_test(test_layer_gradcheck),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
