/* The public API on bad handles: every function that takes a tensor is
 * called with NULL and with a freed tensor in each tensor slot in turn, and
 * must return VN_ERR_ARG / VN_ERR_STATE (or NULL with that vn_last_status)
 * with a message, never crash. Non-tensor pointer arguments (shapes, out
 * pointers, buffers) get the same treatment, and the accessors give their
 * documented values for NULL. Run under the sanitizer build, a crash or an
 * invalid read here fails the suite. */
#include "gradcheck.h"

#include <math.h>
#include <string.h>

/* ---- one table row per function -------------------------------------------- */

/* Argument kinds, one letter per tensor slot:
 *   f  f32 (2, 3)      F  f32 (3, 2)      r  f32 (1, 3)
 *   b  f32 (2)         u  u8 (2, 3)       i  i64 (2) holding 0, 2
 *   g  f32 (2, 3) that requires grad      S  a 0-d f32
 *   G  a 0-d f32 that requires grad */
typedef vn_status (*call_fn)(vn_tensor **a);

typedef struct {
    const char *name;
    const char *kinds;
    call_fn call;
    unsigned optional; /* bit k: NULL is a valid value for slot k */
} api_row;

/* A pointer result as a status: VN_OK (the result released) or the status
 * the failed call left in vn_last_status(). */
static vn_status ptr_status(vn_tensor *r)
{
    if (!r) return vn_last_status();
    vn_tensor_release(r);
    return VN_OK;
}

#define P(expr) return ptr_status(expr)

static const int64_t S23[] = {2, 3}, S32[] = {3, 2}, S6[] = {6};
static const int DIMS10[] = {1, 0};

static vn_status c_detach(vn_tensor **a) { P(vn_detach(a[0])); }
static vn_status c_reshape(vn_tensor **a) { P(vn_reshape(a[0], 2, S32)); }
static vn_status c_view(vn_tensor **a) { P(vn_view(a[0], 1, S6)); }
static vn_status c_transpose(vn_tensor **a) { P(vn_transpose(a[0], 0, 1)); }
static vn_status c_permute(vn_tensor **a) { P(vn_permute(a[0], DIMS10)); }
static vn_status c_narrow(vn_tensor **a) { P(vn_narrow(a[0], 1, 1, 2)); }
static vn_status c_select(vn_tensor **a) { P(vn_select(a[0], 0, 1)); }
static vn_status c_unsqueeze(vn_tensor **a) { P(vn_unsqueeze(a[0], 0)); }
static vn_status c_squeeze(vn_tensor **a) { P(vn_squeeze(a[0], 0)); }
static vn_status c_expand(vn_tensor **a) { P(vn_expand(a[0], 2, S23)); }
static vn_status c_contiguous(vn_tensor **a) { P(vn_contiguous(a[0])); }
static vn_status c_clone(vn_tensor **a) { P(vn_clone(a[0])); }
static vn_status c_to_dtype(vn_tensor **a) { P(vn_to_dtype(a[0], VN_I32)); }
static vn_status c_cat(vn_tensor **a) { P(vn_cat(a, 2, 0)); }
static vn_status c_index_select(vn_tensor **a) { P(vn_index_select(a[0], 1, a[1])); }
static vn_status c_add(vn_tensor **a) { P(vn_add(a[0], a[1])); }
static vn_status c_sub(vn_tensor **a) { P(vn_sub(a[0], a[1])); }
static vn_status c_mul(vn_tensor **a) { P(vn_mul(a[0], a[1])); }
static vn_status c_div(vn_tensor **a) { P(vn_div(a[0], a[1])); }
static vn_status c_pow(vn_tensor **a) { P(vn_pow(a[0], a[1])); }
static vn_status c_eq(vn_tensor **a) { P(vn_eq(a[0], a[1])); }
static vn_status c_ne(vn_tensor **a) { P(vn_ne(a[0], a[1])); }
static vn_status c_lt(vn_tensor **a) { P(vn_lt(a[0], a[1])); }
static vn_status c_le(vn_tensor **a) { P(vn_le(a[0], a[1])); }
static vn_status c_gt(vn_tensor **a) { P(vn_gt(a[0], a[1])); }
static vn_status c_ge(vn_tensor **a) { P(vn_ge(a[0], a[1])); }
static vn_status c_neg(vn_tensor **a) { P(vn_neg(a[0])); }
static vn_status c_abs(vn_tensor **a) { P(vn_abs(a[0])); }
static vn_status c_exp(vn_tensor **a) { P(vn_exp(a[0])); }
static vn_status c_log(vn_tensor **a) { P(vn_log(a[0])); }
static vn_status c_sqrt(vn_tensor **a) { P(vn_sqrt(a[0])); }
static vn_status c_pow_scalar(vn_tensor **a) { P(vn_pow_scalar(a[0], 2)); }
static vn_status c_relu(vn_tensor **a) { P(vn_relu(a[0])); }
static vn_status c_gelu(vn_tensor **a) { P(vn_gelu(a[0])); }
static vn_status c_tanh(vn_tensor **a) { P(vn_tanh(a[0])); }
static vn_status c_sigmoid(vn_tensor **a) { P(vn_sigmoid(a[0])); }
static vn_status c_clamp(vn_tensor **a) { P(vn_clamp(a[0], -1, 1)); }
static vn_status c_where(vn_tensor **a) { P(vn_where(a[0], a[1], a[2])); }
static vn_status c_masked_fill(vn_tensor **a) { P(vn_masked_fill(a[0], a[1], 0)); }
static vn_status c_dropout(vn_tensor **a) { P(vn_dropout(a[0], 0.5, true)); }
static vn_status c_sum_all(vn_tensor **a) { P(vn_sum_all(a[0])); }
static vn_status c_mean_all(vn_tensor **a) { P(vn_mean_all(a[0])); }
static vn_status c_max_all(vn_tensor **a) { P(vn_max_all(a[0])); }
static vn_status c_min_all(vn_tensor **a) { P(vn_min_all(a[0])); }
static vn_status c_sum(vn_tensor **a) { P(vn_sum(a[0], 1, false)); }
static vn_status c_mean(vn_tensor **a) { P(vn_mean(a[0], 1, true)); }
static vn_status c_max(vn_tensor **a) { P(vn_max(a[0], 1, false)); }
static vn_status c_min(vn_tensor **a) { P(vn_min(a[0], 0, false)); }
static vn_status c_argmax(vn_tensor **a) { P(vn_argmax(a[0], 1, false)); }
static vn_status c_argmin(vn_tensor **a) { P(vn_argmin(a[0], 1, false)); }
static vn_status c_matmul(vn_tensor **a) { P(vn_matmul(a[0], a[1])); }
static vn_status c_linear(vn_tensor **a) { P(vn_linear(a[0], a[1], a[2])); }
static vn_status c_softmax(vn_tensor **a) { P(vn_softmax(a[0], 1)); }
static vn_status c_log_softmax(vn_tensor **a) { P(vn_log_softmax(a[0], -1)); }
static vn_status c_cross_entropy(vn_tensor **a) { P(vn_cross_entropy(a[0], a[1], VN_REDUCE_MEAN)); }
static vn_status c_nll_loss(vn_tensor **a) { P(vn_nll_loss(a[0], a[1], VN_REDUCE_SUM)); }
static vn_status c_mse_loss(vn_tensor **a) { P(vn_mse_loss(a[0], a[1], VN_REDUCE_NONE)); }

static vn_status c_item(vn_tensor **a)
{
    double v;
    return vn_tensor_item(a[0], &v);
}
static vn_status c_get(vn_tensor **a)
{
    const int64_t ix[] = {1, 2};
    double v;
    return vn_tensor_get(a[0], ix, &v);
}
static vn_status c_set(vn_tensor **a)
{
    const int64_t ix[] = {1, 2};
    return vn_tensor_set(a[0], ix, 5);
}
static vn_status c_copy_out(vn_tensor **a)
{
    float buf[6];
    return vn_tensor_copy_out(a[0], buf, sizeof buf);
}
static vn_status c_copy_(vn_tensor **a) { return vn_tensor_copy_(a[0], a[1]); }
static vn_status c_fill_(vn_tensor **a) { return vn_tensor_fill_(a[0], 3); }
static vn_status c_set_requires_grad(vn_tensor **a) { return vn_tensor_set_requires_grad(a[0], true); }
static vn_status c_set_grad(vn_tensor **a) { return vn_tensor_set_grad(a[0], a[1]); }
static vn_status c_backward(vn_tensor **a)
{
    vn_tensor *y = vn_sum_all(a[0]);
    vn_status s = y ? vn_backward(y, a[1]) : vn_last_status();
    vn_tensor_release(y);
    return s;
}
static vn_status c_backward_root(vn_tensor **a) { return vn_backward(a[0], NULL); }
static vn_status c_sgd_step(vn_tensor **a)
{
    return vn_sgd_step(a[0], a[1], a[2], 0.1, 0.9, 0, 0, false, false);
}
static vn_status c_adam_step(vn_tensor **a)
{
    return vn_adam_step(a[0], a[1], a[2], a[3], 1, 1e-3, 0.9, 0.999, 1e-8, 0, true);
}

#define ROW(name, kinds) {#name, kinds, c_##name, 0}

static const api_row rows[] = {
    ROW(detach, "f"), ROW(reshape, "f"), ROW(view, "f"), ROW(transpose, "f"),
    ROW(permute, "f"), ROW(narrow, "f"), ROW(select, "f"), ROW(unsqueeze, "f"),
    ROW(squeeze, "r"), ROW(expand, "r"), ROW(contiguous, "f"), ROW(clone, "f"),
    ROW(to_dtype, "f"), ROW(cat, "ff"), ROW(index_select, "fi"),
    ROW(add, "ff"), ROW(sub, "ff"), ROW(mul, "ff"), ROW(div, "ff"), ROW(pow, "ff"),
    ROW(eq, "ff"), ROW(ne, "ff"), ROW(lt, "ff"), ROW(le, "ff"), ROW(gt, "ff"), ROW(ge, "ff"),
    ROW(neg, "f"), ROW(abs, "f"), ROW(exp, "f"), ROW(log, "f"), ROW(sqrt, "f"),
    ROW(pow_scalar, "f"), ROW(relu, "f"), ROW(gelu, "f"), ROW(tanh, "f"), ROW(sigmoid, "f"),
    ROW(clamp, "f"), ROW(where, "uff"), ROW(masked_fill, "fu"), ROW(dropout, "f"),
    ROW(sum_all, "f"), ROW(mean_all, "f"), ROW(max_all, "f"), ROW(min_all, "f"),
    ROW(sum, "f"), ROW(mean, "f"), ROW(max, "f"), ROW(min, "f"), ROW(argmax, "f"),
    ROW(argmin, "f"), ROW(matmul, "fF"), {"linear", "ffb", c_linear, 1u << 2},
    ROW(softmax, "f"), ROW(log_softmax, "f"), ROW(cross_entropy, "fi"), ROW(nll_loss, "fi"),
    ROW(mse_loss, "ff"),
    ROW(item, "S"), ROW(get, "f"), ROW(set, "f"), ROW(copy_out, "f"), ROW(copy_, "ff"),
    ROW(fill_, "f"), ROW(set_requires_grad, "f"), {"set_grad", "gf", c_set_grad, 1u << 1},
    {"backward", "gS", c_backward, 1u << 1}, ROW(backward_root, "G"),
    ROW(sgd_step, "fff"), ROW(adam_step, "ffff"),
};

/* ---- making arguments ------------------------------------------------------- */

static vn_tensor *make(char kind, unsigned seed)
{
    static const int64_t s13[] = {1, 3}, s2[] = {2};
    static const int64_t targets[] = {0, 2};
    vn_tensor *t = NULL;
    switch (kind) {
    case 'f': t = trand(2, S23, 0.5, 2, seed); break;
    case 'F': t = trand(2, S32, 0.5, 2, seed); break;
    case 'r': t = trand(2, s13, 0.5, 2, seed); break;
    case 'b': t = trand(1, s2, 0.5, 2, seed); break;
    case 'u': t = vn_ones(VN_U8, 2, S23); break;
    case 'i': t = vn_from_data(VN_I64, 1, s2, targets); break;
    case 'g':
        t = trand(2, S23, 0.5, 2, seed);
        CHECK_OK(vn_tensor_set_requires_grad(t, true));
        break;
    case 'S': t = vn_full(VN_F32, 0, NULL, 1.5); break;
    case 'G':
        t = vn_full(VN_F32, 0, NULL, 1.5);
        CHECK_OK(vn_tensor_set_requires_grad(t, true));
        break;
    }
    CHECK_PTR(t);
    return t;
}

/* Calls row r with slot `bad` replaced by `what` (NULL or a freed tensor;
 * bad = -1 replaces nothing) and returns the status. */
static vn_status call_with(const api_row *r, int bad, vn_tensor *what)
{
    vn_tensor *args[4] = {NULL};
    int n = (int)strlen(r->kinds);
    for (int k = 0; k < n; k++) args[k] = k == bad ? what : make(r->kinds[k], 10 + (unsigned)k);
    vn_clear_error();
    vn_status s = r->call(args);
    for (int k = 0; k < n; k++)
        if (k != bad) vn_tensor_release(args[k]);
    return s;
}

static void test_every_tensor_slot(void **state)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const api_row *r = &rows[i];
        vn_status s = call_with(r, -1, NULL);
        if (s != VN_OK) fail_msg("%s with valid arguments: %s", r->name, vn_last_error());
        for (int k = 0; r->kinds[k]; k++) {
            s = call_with(r, k, NULL);
            if (r->optional & (1u << k)) {
                if (s != VN_OK) fail_msg("%s: NULL is valid for argument %d: %s", r->name, k + 1,
                                         vn_last_error());
            } else if (s != VN_ERR_ARG || vn_last_status() != VN_ERR_ARG ||
                       !strstr(vn_last_error(), "NULL")) {
                fail_msg("%s: NULL argument %d gave %s, '%s'", r->name, k + 1,
                         vn_status_name(s), vn_last_error());
            }
            vn_tensor *freed = make(r->kinds[k], 99);
            vn_tensor_free(freed);
            s = call_with(r, k, freed);
            if (s != VN_ERR_STATE || vn_last_status() != VN_ERR_STATE ||
                !strstr(vn_last_error(), "freed"))
                fail_msg("%s: freed argument %d gave %s, '%s'", r->name, k + 1,
                         vn_status_name(s), vn_last_error());
            vn_tensor_release(freed);
        }
    }
}

/* ---- functions outside the table --------------------------------------------- */

static void expect(vn_status got, vn_status want, const char *what)
{
    if (got != want || vn_last_status() != want)
        fail_msg("%s: expected %s, got %s (last status %s): '%s'", what, vn_status_name(want),
                 vn_status_name(got), vn_status_name(vn_last_status()), vn_last_error());
}

static void test_accessors_on_null(void **state)
{
    vn_clear_error();
    assert_int_equal(vn_tensor_ndim(NULL), 0);
    expect(VN_ERR_ARG, VN_ERR_ARG, "ndim(NULL)");
    assert_null(vn_tensor_shape(NULL));
    assert_null(vn_tensor_strides(NULL));
    assert_int_equal(vn_tensor_numel(NULL), 0);
    assert_int_equal(vn_tensor_dtype(NULL), VN_F32);
    assert_false(vn_tensor_is_contiguous(NULL));
    assert_null(vn_tensor_data(NULL));
    assert_true(vn_tensor_is_freed(NULL));
    assert_false(vn_tensor_requires_grad(NULL));
    assert_false(vn_tensor_is_leaf(NULL));
    assert_null(vn_tensor_grad(NULL));
    assert_null(vn_tensor_grad_fn_name(NULL));
    assert_null(vn_tensor_retain(NULL));
    vn_tensor_release(NULL);
    vn_tensor_free(NULL);
    vn_tensor_zero_grad(NULL);
    char buf[32];
    assert_string_equal(vn_shape_str(2, NULL, buf, sizeof buf), "(invalid shape)");
    assert_string_equal(vn_shape_str(1, S6, NULL, 0), "");
    vn_memory_stats(NULL, NULL);
}

static void test_accessors_on_freed(void **state)
{
    vn_tensor *t = make('g', 1);
    vn_tensor *v = vn_transpose(t, 0, 1);
    CHECK_PTR(v);
    vn_tensor_free(t);
    vn_tensor_free(t); /* idempotent */
    assert_true(vn_tensor_is_freed(t));
    /* metadata stays readable; the data does not */
    assert_int_equal(vn_tensor_ndim(t), 2);
    assert_int_equal(vn_tensor_shape(t)[1], 3);
    assert_int_equal(vn_tensor_numel(t), 6);
    vn_clear_error();
    assert_null(vn_tensor_data(t));
    expect(VN_ERR_STATE, VN_ERR_STATE, "data(freed)");
    assert_null(vn_tensor_grad(t));
    /* a view made before the free keeps the storage and its values */
    assert_false(vn_tensor_is_freed(v));
    const int64_t ix[] = {2, 1};
    double x;
    CHECK_OK(vn_tensor_get(v, ix, &x));
    assert_true(x >= 0.5 && x < 2);
    vn_tensor_release(v);
    vn_tensor_release(t);
}

static void test_other_pointer_arguments(void **state)
{
    vn_tensor *t = make('f', 2);
    double v;
    expect(vn_tensor_item(t, NULL), VN_ERR_ARG, "item(out NULL)");
    expect(vn_tensor_get(t, NULL, &v), VN_ERR_ARG, "get(index NULL)");
    const int64_t ix[] = {0, 0};
    expect(vn_tensor_get(t, ix, NULL), VN_ERR_ARG, "get(out NULL)");
    expect(vn_tensor_set(t, NULL, 1), VN_ERR_ARG, "set(index NULL)");
    expect(vn_tensor_copy_out(t, NULL, 24), VN_ERR_ARG, "copy_out(buf NULL)");
    expect(ptr_status(vn_reshape(t, 2, NULL)), VN_ERR_ARG, "reshape(shape NULL)");
    expect(ptr_status(vn_view(t, 1, NULL)), VN_ERR_ARG, "view(shape NULL)");
    expect(ptr_status(vn_permute(t, NULL)), VN_ERR_ARG, "permute(dims NULL)");
    expect(ptr_status(vn_expand(t, 2, NULL)), VN_ERR_ARG, "expand(shape NULL)");
    expect(ptr_status(vn_cat(NULL, 2, 0)), VN_ERR_ARG, "cat(NULL array)");
    expect(ptr_status(vn_empty(VN_F32, 2, NULL)), VN_ERR_ARG, "empty(shape NULL)");
    expect(ptr_status(vn_zeros(VN_F32, 1, NULL)), VN_ERR_ARG, "zeros(shape NULL)");
    expect(ptr_status(vn_rand(2, NULL)), VN_ERR_ARG, "rand(shape NULL)");
    expect(ptr_status(vn_from_data(VN_F32, 2, S23, NULL)), VN_ERR_ARG, "from_data(data NULL)");
    expect(ptr_status(vn_idx_load(NULL)), VN_ERR_ARG, "idx_load(NULL)");
    expect(vn_rng_get_state(NULL), VN_ERR_ARG, "rng_get_state(NULL)");
    expect(vn_rng_set_state(NULL), VN_ERR_ARG, "rng_set_state(NULL)");
    const uint64_t zero[4] = {0};
    expect(vn_rng_set_state(zero), VN_ERR_ARG, "rng_set_state(all zeros)");
    /* momentum 0 needs no buffer: NULL is fine there */
    vn_tensor *g = make('f', 3);
    CHECK_OK(vn_sgd_step(t, g, NULL, 0.1, 0, 0, 0, false, true));
    /* a NULL gradient clears, which needs no gradient to be there */
    vn_tensor *p = make('g', 4);
    CHECK_OK(vn_tensor_set_grad(p, NULL));
    vn_tensor_release(p);
    vn_tensor_release(g);
    vn_tensor_release(t);
}

static void test_wrong_dtype(void **state)
{
    /* each op names what it wanted and what it got */
    vn_tensor *f = make('f', 5), *u = make('u', 5), *i = make('i', 5);
    expect(ptr_status(vn_add(f, u)), VN_ERR_DTYPE, "add(f32, u8)");
    assert_non_null(strstr(vn_last_error(), "u8"));
    expect(ptr_status(vn_exp(u)), VN_ERR_DTYPE, "exp(u8)");
    expect(ptr_status(vn_matmul(u, u)), VN_ERR_DTYPE, "matmul(u8, u8)");
    expect(ptr_status(vn_cross_entropy(f, f, VN_REDUCE_MEAN)), VN_ERR_DTYPE, "cross_entropy(target f32)");
    expect(ptr_status(vn_where(f, f, f)), VN_ERR_DTYPE, "where(cond f32)");
    expect(ptr_status(vn_index_select(f, 0, f)), VN_ERR_DTYPE, "index_select(index f32)");
    expect(vn_tensor_set_requires_grad(i, true), VN_ERR_DTYPE, "requires_grad(i64)");
    expect(ptr_status(vn_empty((vn_dtype)42, 1, S6)), VN_ERR_DTYPE, "empty(bad dtype)");
    assert_string_equal(vn_dtype_name((vn_dtype)42), "unknown dtype");
    assert_int_equal(vn_dtype_size((vn_dtype)42), 0);
    assert_string_equal(vn_status_name((vn_status)42), "unknown status");
    vn_tensor_release(f);
    vn_tensor_release(u);
    vn_tensor_release(i);
}

/* The inputs an op saved for its backward can be freed before the backward
 * runs: the backward then fails with a state error instead of reading freed
 * memory. */
static void test_free_before_backward(void **state)
{
    const char *ops[] = {"mul", "div", "matmul", "pow"};
    for (int k = 0; k < 4; k++) {
        vn_tensor *a = make('g', 7), *b = make(k == 2 ? 'F' : 'f', 8);
        vn_tensor *y = k == 0 ? vn_mul(a, b) : k == 1 ? vn_div(a, b)
                     : k == 2 ? vn_matmul(a, b) : vn_pow(a, b);
        CHECK_PTR(y);
        vn_tensor *loss = vn_sum_all(y);
        CHECK_PTR(loss);
        vn_tensor_free(b);
        if (vn_backward(loss, NULL) != VN_ERR_STATE || !strstr(vn_last_error(), "freed"))
            fail_msg("%s: backward after freeing a saved input: '%s'", ops[k], vn_last_error());
        vn_tensor_release(loss);
        vn_tensor_release(y);
        vn_tensor_release(a);
        vn_tensor_release(b);
    }
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_tensor_slot),
        cmocka_unit_test(test_accessors_on_null),
        cmocka_unit_test(test_accessors_on_freed),
        cmocka_unit_test(test_other_pointer_arguments),
        cmocka_unit_test(test_wrong_dtype),
        cmocka_unit_test(test_free_before_backward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
