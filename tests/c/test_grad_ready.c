/* The grad-ready hook of vn_backward (vn_tensor.grad_ready, what
 * DataParallel's gradient buckets hang on): it runs once per hooked leaf
 * and backward, as soon as the leaf's gradient is final (equal, when the
 * hook runs, to its value after the backward), also for a leaf used by
 * several ops; the backward reaches the last layer's weight first; a hook
 * that fails fails the backward; leaves without a hook are left alone.
 * Also the progress hook (vn__progress, what DataParallel's in-flight
 * all-reduces get turns from): vn_backward calls it after each node, and a
 * large GEMM runs in slices with a call after each, computing the same
 * product. And the grad_rows hook: a linear layer's weight gradient handed
 * over in row slices as its GEMM computes them, and a V:N:M layer's (the
 * values' as the SDDMM computes them; the GMP shadow's dense dW). */
#include "gradcheck.h"
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What a hook saw: the order of the calls and a copy of the gradient. */
struct seen {
    int calls, order;
    int watched_pending; /* how many nodes had yet to add to `watched`'s gradient */
    float grad[16];
    int64_t n;
};
static int clock_ticks;
static const vn_tensor *watched;

static vn_status record_hook(vn_tensor *t, void *ud)
{
    struct seen *s = ud;
    s->calls++;
    s->order = ++clock_ticks;
    s->watched_pending = watched ? watched->grad_pending : 0;
    s->n = vn_tensor_numel(t->grad);
    memcpy(s->grad, vn_tensor_data(t->grad), (size_t)s->n * sizeof(float));
    return VN_OK;
}

static vn_status failing_hook(vn_tensor *t, void *ud)
{
    return vn__err(VN_ERR_STATE, "the hook refused");
}

static vn_tensor *param(int64_t rows, int64_t cols)
{
    vn_tensor *p = vn_randn(2, (int64_t[]){rows, cols});
    CHECK_OK(vn_tensor_set_requires_grad(p, true));
    return p;
}

/* loss = sum(relu(x·W1)·W2) + sum(W1·3): W1 feeds two ops. */
static vn_tensor *loss_of(vn_tensor *x, vn_tensor *w1, vn_tensor *w2)
{
    vn_tensor *h = vn_matmul(x, w1), *a = vn_relu(h), *y = vn_matmul(a, w2);
    vn_tensor *three = vn_full(VN_F32, 0, NULL, 3.0), *w1s = vn_mul(w1, three);
    vn_tensor *s1 = vn_sum_all(y), *s2 = vn_sum_all(w1s), *loss = vn_add(s1, s2);
    vn_tensor *tmp[] = {h, a, y, three, w1s, s1, s2};
    for (int i = 0; i < 7; i++) vn_tensor_release(tmp[i]);
    return loss;
}

static void test_hook_sees_final_gradient(void **state)
{
    vn_manual_seed(3);
    vn_tensor *x = vn_randn(2, (int64_t[]){3, 4}), *w1 = param(4, 2), *w2 = param(2, 2);
    struct seen s1 = {0}, s2 = {0};
    w1->grad_ready = record_hook, w1->grad_ready_ud = &s1;
    w2->grad_ready = record_hook, w2->grad_ready_ud = &s2;
    clock_ticks = 0;
    watched = w1;
    vn_tensor *loss = loss_of(x, w1, w2);
    CHECK_OK(vn_backward(loss, NULL));
    assert_int_equal(s1.calls, 1);
    assert_int_equal(s2.calls, 1);
    assert_true(s2.order < s1.order); /* the last layer's weight is final first, */
    assert_true(s2.watched_pending > 0); /* while the backward still had W1's ops to run */
    const float *g1 = vn_tensor_data(w1->grad), *g2 = vn_tensor_data(w2->grad);
    for (int64_t i = 0; i < 8; i++) assert_true(s1.grad[i] == g1[i]);
    for (int64_t i = 0; i < 4; i++) assert_true(s2.grad[i] == g2[i]);
    assert_int_equal(w1->grad_pending, 0);
    /* A second backward (fresh graph) calls each hook once more. */
    vn_tensor_release(loss);
    loss = loss_of(x, w1, w2);
    CHECK_OK(vn_backward(loss, NULL));
    assert_int_equal(s1.calls, 2);
    assert_int_equal(s2.calls, 2);
    watched = NULL;
    vn_tensor_release(loss);
    vn_tensor_release(x);
    vn_tensor_release(w1);
    vn_tensor_release(w2);
}

static void test_failing_hook_fails_backward(void **state)
{
    vn_tensor *x = vn_randn(2, (int64_t[]){3, 4}), *w1 = param(4, 2), *w2 = param(2, 2);
    w2->grad_ready = failing_hook;
    vn_tensor *loss = loss_of(x, w1, w2);
    assert_int_equal(vn_backward(loss, NULL), VN_ERR_STATE);
    assert_non_null(strstr(vn_last_error(), "the hook refused"));
    assert_int_equal(w2->grad_pending, 0);
    assert_int_equal(w1->grad_pending, 0);
    vn_tensor_release(loss);
    vn_tensor_release(x);
    vn_tensor_release(w1);
    vn_tensor_release(w2);
}

static int progress_calls;
static void count_progress(void *ud)
{
    (void)ud;
    progress_calls++;
}

static void test_progress_hook(void **state)
{
    vn_manual_seed(5);
    /* A product large enough to be sliced: (96, 200) × (200, 128). */
    vn_tensor *a = vn_randn(2, (int64_t[]){96, 200}), *b = vn_randn(2, (int64_t[]){200, 128});
    vn_tensor *plain = vn_matmul(a, b);
    progress_calls = 0;
    vn__progress_fn = count_progress;
    vn_tensor *sliced = vn_matmul(a, b);
    int gemm_calls = progress_calls;
    /* A backward of 7 nodes calls it after each. */
    vn_tensor *x = vn_randn(2, (int64_t[]){3, 4}), *w1 = param(4, 2), *w2 = param(2, 2);
    vn_tensor *loss = loss_of(x, w1, w2);
    progress_calls = 0;
    CHECK_OK(vn_backward(loss, NULL));
    int backward_calls = progress_calls;
    vn__progress_fn = NULL;
    assert_true(gemm_calls >= 2);
    assert_true(backward_calls >= 7);
    const float *p = vn_tensor_data(plain), *q = vn_tensor_data(sliced);
    for (int64_t i = 0; i < 96 * 128; i++) assert_true(fabsf(p[i] - q[i]) <= 1e-4f * (1 + fabsf(p[i])));
    vn_tensor_release(loss);
    vn_tensor_release(x);
    vn_tensor_release(w1);
    vn_tensor_release(w2);
    vn_tensor_release(a);
    vn_tensor_release(b);
    vn_tensor_release(plain);
    vn_tensor_release(sliced);
}

/* What a grad_rows hook saw: the rows in call order, the gradient they add
 * up to, and when they came relative to the grad-ready hooks. */
struct rows_seen {
    int calls, first_order, last_order, ready_order;
    int64_t next_row; /* rows come in order from 0: the next one expected */
    bool in_order;
    float *assembled; /* t->grad + part, row by row, as a reducer copies them */
};

static void record_rows(vn_tensor *t, void *ud, const float *part, int64_t lo, int64_t hi)
{
    struct rows_seen *s = ud;
    int64_t row_len = vn_tensor_numel(t) / t->shape[0];
    const float *old = t->grad ? vn_tensor_data(t->grad) : NULL;
    s->in_order &= lo == s->next_row && hi > lo;
    s->next_row = hi;
    for (int64_t i = lo * row_len; i < hi * row_len; i++) s->assembled[i] = old ? old[i] + part[i] : part[i];
    s->calls++;
    s->last_order = ++clock_ticks;
    if (s->calls == 1) s->first_order = s->last_order;
}

static vn_status rows_ready(vn_tensor *t, void *ud)
{
    ((struct rows_seen *)ud)->ready_order = ++clock_ticks;
    return VN_OK;
}

static void hook_rows(vn_tensor *t, struct rows_seen *s, float *buf)
{
    *s = (struct rows_seen){.in_order = true, .assembled = buf};
    t->grad_ready = rows_ready, t->grad_rows = record_rows, t->grad_ready_ud = s;
}

/* A linear layer's weight gradient comes over in row slices while its GEMM
 * runs (what lets DataParallel start the first layer's buckets early): the
 * slices cover every row once, in order, before the grad-ready hook, after
 * the bias (handed over whole, first); their sum with the old gradient is
 * the final gradient bit for bit, also when the backward accumulates onto a
 * gradient from before. */
static void test_weight_rows_handed_over(void **state)
{
    vn_manual_seed(9);
    /* dW = dYᵀ·X is (256 × 64) over 16 rows: 262,144 multiply-adds, sliced */
    vn_tensor *x = vn_randn(2, (int64_t[]){16, 64}), *w = param(256, 64);
    vn_tensor *b = vn_randn(1, (int64_t[]){256});
    CHECK_OK(vn_tensor_set_requires_grad(b, true));
    float *wbuf = calloc(256 * 64, sizeof *wbuf); /* the largest weight below */
    float *bbuf = calloc(256, sizeof *bbuf);
    struct rows_seen sw, sb;
    for (int round = 0; round < 2; round++) { /* round 1 accumulates onto round 0's gradient */
        hook_rows(w, &sw, wbuf);
        hook_rows(b, &sb, bbuf);
        clock_ticks = 0;
        vn_tensor *y = vn_linear(x, w, b), *a = vn_relu(y), *loss = vn_sum_all(a);
        CHECK_OK(vn_backward(loss, NULL));
        assert_true(sw.calls >= 2); /* sliced */
        assert_true(sw.in_order);
        assert_int_equal(sw.next_row, 256); /* every row, once */
        assert_true(sw.last_order < sw.ready_order);
        assert_int_equal(sb.calls, 1);
        assert_int_equal(sb.next_row, 256);
        assert_true(sb.last_order < sw.first_order); /* the bias before the weight's rows */
        assert_true(!memcmp(wbuf, vn_tensor_data(w->grad), 256 * 64 * sizeof(float)));
        assert_true(!memcmp(bbuf, vn_tensor_data(b->grad), 256 * sizeof(float)));
        vn_tensor *tmp[] = {y, a, loss};
        for (int i = 0; i < 3; i++) vn_tensor_release(tmp[i]);
    }
    /* A wide weight (48 × 256: fewer rows than columns, which a GEMM would
     * otherwise cut by columns) still comes over by rows, in 3 slices. */
    vn_tensor *xw = vn_randn(2, (int64_t[]){32, 256}), *wide = param(48, 256);
    hook_rows(wide, &sw, wbuf);
    vn_tensor *yw = vn_linear(xw, wide, NULL), *lw = vn_sum_all(yw);
    CHECK_OK(vn_backward(lw, NULL));
    assert_int_equal(sw.calls, 3);
    assert_true(sw.in_order && sw.next_row == 48 && sw.last_order < sw.ready_order);
    assert_true(!memcmp(wbuf, vn_tensor_data(wide->grad), 48 * 256 * sizeof(float)));
    vn_tensor *wtmp[] = {xw, wide, yw, lw};
    for (int i = 0; i < 4; i++) vn_tensor_release(wtmp[i]);
    /* A weight that is also the input of the same node (fed twice by it):
     * no rows, only the grad-ready hook. */
    vn_tensor *sq = param(64, 64);
    hook_rows(sq, &sw, wbuf);
    vn_tensor *y = vn_linear(sq, sq, NULL), *loss = vn_sum_all(y);
    CHECK_OK(vn_backward(loss, NULL));
    assert_int_equal(sw.calls, 0);
    assert_true(sw.ready_order > 0);
    vn_tensor *tmp[] = {y, loss, sq, x, w, b};
    for (int i = 0; i < 6; i++) vn_tensor_release(tmp[i]);
    free(wbuf);
    free(bbuf);
}

/* One backward of sum(relu(layer(x))) for a V:N:M layer: vn_vnm_linear over
 * the values, or (shadow) the GMP shadow over the dense weight w. */
static void vnm_backward(const vn_tensor *x, const vn_vnm *s, const vn_tensor *weight,
                         const vn_tensor *b, bool shadow)
{
    vn_tensor *y = shadow ? vn_vnm_shadow_linear(x, s, weight, b) : vn_vnm_linear(x, s, weight, b);
    vn_tensor *a = vn_relu(y), *loss = vn_sum_all(a);
    CHECK_OK(vn_backward(loss, NULL));
    vn_tensor *tmp[] = {y, a, loss};
    for (int i = 0; i < 3; i++) vn_tensor_release(tmp[i]);
}

/* The V:N:M layers hand their weight gradient over by rows too: the values'
 * as the SDDMM computes its row blocks (nn.SparseLinear; both of its
 * kernels: by rows and by dot products), the GMP shadow's
 * dense dW as its GEMM does, each after the bias. The rows cover the
 * gradient once, in order, before the grad-ready hook; with the old
 * gradient they add up to the final one bit for bit; and the slicing
 * changes no number: the gradients equal those of a backward without hooks
 * (the values' bit for bit; the shadow's dW, whose GEMM the slices cut
 * differently, to 1e-6). */
static void test_vnm_rows_handed_over(void **state)
{
    vn_manual_seed(12);
    /* W 256 × 96 at V = 32, M = 8: 8 row blocks, values (256, 24); a batch
     * of 64: 64·256·24 multiply-adds in the SDDMM, enough to be sliced */
    enum { R = 256, K = 96, B = 64 };
    vn_tensor *w = vn_randn(2, (int64_t[]){R, K}), *b = vn_randn(1, (int64_t[]){R});
    vn_tensor *x = vn_randn(2, (int64_t[]){B, K});
    vn_vnm *s = vn_vnm_from_dense(w, 32, 2, 8);
    CHECK_PTR(s);
    vn_tensor *values = vn_vnm_values(s);
    CHECK_OK(vn_tensor_set_requires_grad(values, true));
    CHECK_OK(vn_tensor_set_requires_grad(w, true));
    CHECK_OK(vn_tensor_set_requires_grad(b, true));
    float *ref = calloc(R * K, sizeof *ref), *wbuf = calloc(R * K, sizeof *wbuf);
    float *bbuf = calloc(R, sizeof *bbuf);
    /* the values with the CPU's kernels (with AVX-512: the SDDMM by rows),
     * the values with the portable ones (by dot products), the shadow */
    for (int pass = 0; pass < 3; pass++) {
        bool shadow = pass == 2;
        if (pass == 1) setenv("VENOM_NO_AVX512", "1", 1);
        vn_tensor *weight = shadow ? w : values;
        int64_t n = vn_tensor_numel(weight), rows = weight->shape[0];
        vnm_backward(x, s, weight, b, shadow); /* no hooks: the reference */
        memcpy(ref, vn_tensor_data(vn_tensor_grad(weight)), (size_t)n * sizeof *ref);
        vn_tensor_zero_grad(weight);
        vn_tensor_zero_grad(b);
        struct rows_seen sw, sb;
        hook_rows(weight, &sw, wbuf);
        hook_rows(b, &sb, bbuf);
        clock_ticks = 0;
        vnm_backward(x, s, weight, b, shadow);
        const float *g = vn_tensor_data(vn_tensor_grad(weight));
        assert_true(sw.calls >= 2); /* sliced */
        assert_true(sw.in_order);
        assert_int_equal(sw.next_row, rows); /* every row, once */
        assert_true(sw.last_order < sw.ready_order);
        assert_int_equal(sb.calls, 1);
        assert_true(sb.last_order < sw.first_order); /* the bias before the weight's rows */
        assert_true(!memcmp(wbuf, g, (size_t)n * sizeof *g));
        assert_true(!memcmp(bbuf, vn_tensor_data(vn_tensor_grad(b)), R * sizeof(float)));
        if (!shadow) {
            assert_true(!memcmp(ref, g, (size_t)n * sizeof *g));
        } else {
            for (int64_t i = 0; i < n; i++) assert_true(fabsf(g[i] - ref[i]) <= 1e-6f * (1 + fabsf(ref[i])));
        }
        weight->grad_ready = NULL, weight->grad_rows = NULL, weight->grad_ready_ud = NULL;
        b->grad_ready = NULL, b->grad_rows = NULL, b->grad_ready_ud = NULL;
        vn_tensor_zero_grad(weight);
        vn_tensor_zero_grad(b);
        if (pass == 1) unsetenv("VENOM_NO_AVX512");
    }
    free(ref);
    free(wbuf);
    free(bbuf);
    vn_vnm_free(s);
    vn_tensor *tmp[] = {w, b, x, values};
    for (int i = 0; i < 4; i++) vn_tensor_release(tmp[i]);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hook_sees_final_gradient),
        cmocka_unit_test(test_failing_hook_fails_backward),
        cmocka_unit_test(test_progress_hook),
        cmocka_unit_test(test_weight_rows_handed_over),
        cmocka_unit_test(test_vnm_rows_handed_over),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
