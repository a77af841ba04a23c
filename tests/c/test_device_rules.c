/* The engine's device and gradient rules and its message helpers, checked
 * on the CPU. A CUDA tensor cannot be made without a GPU, so the device
 * rules are driven with a CPU tensor whose storage is marked as CUDA for
 * the duration of a check (white-box: nothing reads its data meanwhile,
 * and the mark is taken off before it is freed). */
#include "gradcheck.h"
#include "internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static void expect_msg(const char *const *needles)
{
    const char *msg = vn_last_error();
    for (; *needles; needles++)
        if (!strstr(msg, *needles)) fail_msg("error message \"%s\" lacks \"%s\"", msg, *needles);
}

/* Marks t's storage as CUDA (on = true) or as the CPU's again. */
static void pretend_cuda(vn_tensor *t, bool on) { t->storage->on_cuda = on; }

/* ---- vn__same_device and its strict mode -------------------------------- */

static void test_scalar_joins_only_when_lenient(void **state)
{
    (void)state;
    vn_tensor *c = vn_zeros(VN_F32, 2, (int64_t[]){2, 3}), *s = vn_zeros(VN_F32, 0, NULL);
    CHECK_PTR(c);
    CHECK_PTR(s);
    pretend_cuda(c, true);
    const vn_tensor *ts[2] = {s, c}; /* the scalar first: the device is still c's */
    bool cuda = false;
    assert_int_equal(vn__same_device("add", 2, ts, &cuda), VN_OK);
    assert_true(cuda);
    assert_int_equal(vn__same_device_strict("matmul", 2, ts, NULL, &cuda), VN_ERR_DEVICE);
    expect_msg((const char *[]){"matmul", "argument 2 on cuda", "argument 1 on cpu", NULL});
    assert_int_equal(vn__same_device_strict("linear", 2, ts, (const char *[]){"bias", "weight"}, NULL),
                     VN_ERR_DEVICE);
    expect_msg((const char *[]){"linear", "weight on cuda", "bias on cpu", NULL});
    /* NULLs are skipped; one device passes and says which */
    const vn_tensor *same[3] = {c, NULL, c};
    cuda = false;
    assert_int_equal(vn__same_device_strict("cat", 3, same, NULL, &cuda), VN_OK);
    assert_true(cuda);
    pretend_cuda(c, false);
    const vn_tensor *cpu[2] = {s, c};
    assert_int_equal(vn__same_device_strict("matmul", 2, cpu, NULL, &cuda), VN_OK);
    assert_false(cuda);
    vn_tensor_release(c);
    vn_tensor_release(s);
}

/* A non-scalar CPU tensor next to a CUDA one is refused by both modes. */
static void test_lenient_refuses_cpu_tensors(void **state)
{
    (void)state;
    vn_tensor *c = vn_zeros(VN_F32, 1, (int64_t[]){3}), *h = vn_zeros(VN_F32, 1, (int64_t[]){3});
    CHECK_PTR(c);
    CHECK_PTR(h);
    pretend_cuda(c, true);
    const vn_tensor *ts[2] = {c, h};
    bool cuda;
    assert_int_equal(vn__same_device("mul", 2, ts, &cuda), VN_ERR_DEVICE);
    expect_msg((const char *[]){"mul", "one device", "argument 2 on cpu", "argument 1 on cuda", NULL});
    pretend_cuda(c, false);
    vn_tensor_release(c);
    vn_tensor_release(h);
}

/* ---- vn__accum ------------------------------------------------------------ */

static vn_status no_backward(vn_node *n, const vn_tensor *g)
{
    (void)n;
    (void)g;
    return VN_OK;
}

/* The first gradient of an input is checked as later ones are: a CPU
 * gradient for a CUDA input is refused, and the input keeps no gradient. */
static void test_first_gradient_on_wrong_device(void **state)
{
    (void)state;
    const int64_t shape[2] = {2, 2};
    vn_tensor *x = vn_zeros(VN_F32, 2, shape), *out = vn_zeros(VN_F32, 2, shape);
    CHECK_PTR(x);
    CHECK_PTR(out);
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    const vn_tensor *in[1] = {x};
    vn_node *n = vn__record(out, "fake_op", no_backward, 1, in);
    CHECK_PTR(n);
    pretend_cuda(x, true);
    vn_tensor *g = vn_ones(VN_F32, 2, shape);
    CHECK_PTR(g);
    assert_int_equal(vn__accum(n, 0, g), VN_ERR_DEVICE); /* takes g either way */
    expect_msg((const char *[]){"fake_op backward", "the gradient on cpu", "its input on cuda", NULL});
    assert_null(vn_tensor_grad(x));
    pretend_cuda(x, false);
    /* on the right device the same call lands */
    CHECK_OK(vn__accum(n, 0, vn_ones(VN_F32, 2, shape)));
    CHECK_PTR(vn_tensor_grad(x));
    vn_tensor_release(out); /* frees the node */
    vn_tensor_release(x);
}

/* backward's seed and set_grad follow the same rule. */
static void test_seed_and_set_grad_device(void **state)
{
    (void)state;
    vn_tensor *x = vn_zeros(VN_F32, 1, (int64_t[]){3}), *g = vn_ones(VN_F32, 1, (int64_t[]){3});
    CHECK_PTR(x);
    CHECK_PTR(g);
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    pretend_cuda(x, true);
    assert_int_equal(vn_tensor_set_grad(x, g), VN_ERR_DEVICE);
    expect_msg((const char *[]){"set_grad", "the gradient on cpu", "the tensor on cuda", NULL});
    assert_int_equal(vn_backward(x, g), VN_ERR_DEVICE);
    expect_msg((const char *[]){"backward", "the gradient on cpu", "the tensor on cuda", NULL});
    pretend_cuda(x, false);
    assert_null(vn_tensor_grad(x));
    vn_tensor_release(x);
    vn_tensor_release(g);
}

/* ---- a node that could not be recorded ------------------------------------ */

/* vn__record marks its output when the node cannot be allocated; here the
 * mark is set by hand, as calloc cannot be made to fail from a test. A
 * backward reaching the marked tensor fails instead of dropping its share
 * of the gradient. */
static void test_lost_node_is_an_error(void **state)
{
    (void)state;
    const int64_t shape[1] = {3};
    vn_tensor *a = vn_ones(VN_F32, 1, shape), *w = vn_ones(VN_F32, 1, shape);
    CHECK_PTR(a);
    CHECK_PTR(w);
    CHECK_OK(vn_tensor_set_requires_grad(w, true));
    vn_tensor *y = vn_exp(a); /* a constant, then marked as if exp had needed a node */
    CHECK_PTR(y);
    assert_false(vn_tensor_requires_grad(y));
    y->lost_grad_fn = "exp";
    assert_true(vn_tensor_requires_grad(y));
    vn_tensor *p = vn_mul(y, w), *loss = p ? vn_sum_all(p) : NULL;
    CHECK_PTR(loss);
    assert_int_equal(vn_backward(loss, NULL), VN_ERR_MEMORY);
    expect_msg((const char *[]){"backward", "'exp'", "out of memory", NULL});
    vn_tensor *seed = vn_ones(VN_F32, 1, shape);
    CHECK_PTR(seed);
    assert_int_equal(vn_backward(y, seed), VN_ERR_MEMORY);
    expect_msg((const char *[]){"'exp'", "out of memory", NULL});
    vn_tensor *ts[] = {a, w, y, p, loss, seed};
    for (size_t k = 0; k < sizeof ts / sizeof *ts; k++) vn_tensor_release(ts[k]);
}

/* ---- message helpers ------------------------------------------------------ */

static void test_shape_slots(void **state)
{
    (void)state;
    const int64_t s1[1] = {3}, s2[2] = {2, 5};
    int64_t big[VN_MAX_DIMS];
    for (int d = 0; d < VN_MAX_DIMS; d++) big[d] = INT64_MIN + 1;
    const char *p[VN_SHAPE_SLOTS];
    p[0] = vn__shape(1, s1);
    p[1] = vn__shape(2, s2);
    p[2] = vn__shape(0, NULL);
    p[3] = vn__shape(VN_MAX_DIMS, big);
    assert_string_equal(p[0], "(3,)");
    assert_string_equal(p[1], "(2, 5)");
    assert_string_equal(p[2], "()");
    /* the longest shape fits whole */
    assert_int_equal(strlen(p[3]), 2 + VN_MAX_DIMS * 20 + (VN_MAX_DIMS - 1) * 2);
    assert_int_equal(p[3][strlen(p[3]) - 1], ')');
}

static void test_check_arg_names(void **state)
{
    (void)state;
    assert_int_equal(vn__check_arg(NULL, "sum_all", "input", 0), VN_ERR_ARG);
    expect_msg((const char *[]){"sum_all: input: expected a tensor, got NULL", NULL});
    assert_int_equal(vn__check_arg(NULL, "sum_all", NULL, 0), VN_ERR_ARG);
    assert_string_equal(vn_last_error(), "sum_all: expected a tensor, got NULL");
    vn_tensor *i = vn_zeros(VN_I64, 1, (int64_t[]){2});
    CHECK_PTR(i);
    assert_int_equal(vn__check_dtype_arg(i, VN_F32, "adam_step", "exp_avg", 0), VN_ERR_DTYPE);
    expect_msg((const char *[]){"adam_step: exp_avg: expected dtype f32, got i64", NULL});
    vn_tensor_release(i);
    /* vn__err is vn_set_error: one status, one message */
    assert_int_equal(vn__err(VN_ERR_IO, "x%d", 1), VN_ERR_IO);
    assert_int_equal(vn_last_status(), VN_ERR_IO);
    assert_string_equal(vn_last_error(), "x1");
    vn_clear_error();
}

/* Shape messages quote both shapes whole. */
static void test_two_shapes_in_a_message(void **state)
{
    (void)state;
    vn_tensor *a = vn_zeros(VN_F32, 2, (int64_t[]){2, 3}), *b = vn_zeros(VN_F32, 2, (int64_t[]){4, 5});
    CHECK_PTR(a);
    CHECK_PTR(b);
    assert_null(vn_matmul(a, b));
    expect_msg((const char *[]){"matmul: (2, 3) and (4, 5): inner dims 3 and 4 differ", NULL});
    assert_null(vn_mse_loss(a, b, VN_REDUCE_MEAN));
    expect_msg((const char *[]){"mse_loss: shapes (2, 3) and (4, 5) differ", NULL});
    vn_tensor_release(a);
    vn_tensor_release(b);
}

/* ---- cross_entropy saves log Σ exp(x) per row ----------------------------- */

/* Huge logits: the gradient is still softmax − onehot, finite. */
static void test_cross_entropy_grad_huge_logits(void **state)
{
    (void)state;
    vn_tensor *x = tf32(2, (int64_t[]){1, 3}, (float[]){1001, 1002, 1003});
    CHECK_PTR(x);
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    vn_tensor *t = vn_from_data(VN_I64, 1, (int64_t[]){1}, (int64_t[]){0});
    vn_tensor *loss = vn_cross_entropy(x, t, VN_REDUCE_SUM);
    CHECK_PTR(loss);
    CHECK_OK(vn_backward(loss, NULL));
    const double want[3] = {0.09003057317038046 - 1, 0.24472847105479764, 0.6652409557748219};
    float got[3];
    CHECK_OK(vn_tensor_copy_out(vn_tensor_grad(x), got, sizeof got));
    for (int i = 0; i < 3; i++)
        if (fabs(got[i] - want[i]) > 1e-4) fail_msg("grad[%d] = %g, want %g", i, got[i], want[i]);
    vn_tensor_release(x);
    vn_tensor_release(t);
    vn_tensor_release(loss);
}

/* ---- DataParallel's gradient reducer ------------------------------------- */

/* The reducer takes parameters on one device (CPU ones go over MPI, CUDA
 * ones over NCCL), and CUDA ones only in a build with NCCL: both refused,
 * naming the devices, before any other rank is asked (so here, without
 * vn_dist_init, too). A build without MPI refuses everything, saying so. */
static void test_data_parallel_devices(void **state)
{
    (void)state;
    vn_tensor *a = vn_zeros(VN_F32, 2, (int64_t[]){3, 2}), *b = vn_zeros(VN_F32, 1, (int64_t[]){3});
    CHECK_PTR(a);
    CHECK_PTR(b);
    CHECK_OK(vn_tensor_set_requires_grad(a, true));
    CHECK_OK(vn_tensor_set_requires_grad(b, true));
    vn_tensor *params[2] = {a, b};
    pretend_cuda(b, true);
    assert_null(vn_dist_reducer_new(params, 2, 1 << 20));
    if (!vn_dist_built()) {
        expect_msg((const char *[]){"DataParallel", "without MPI", NULL});
    } else {
        expect_msg((const char *[]){"DataParallel", "parameter 2 is on cuda", "parameter 1 on cpu",
                                    "one device", NULL});
        pretend_cuda(a, true);
        assert_null(vn_dist_reducer_new(params, 2, 1 << 20));
        if (!vn_dist_nccl_built())
            expect_msg((const char *[]){"DataParallel", "CUDA tensors", "without NCCL", NULL});
        else /* the checks pass; the world was never joined */
            expect_msg((const char *[]){"DataParallel", "init", NULL});
        pretend_cuda(a, false);
    }
    assert_null(a->grad_ready); /* nothing was hooked */
    pretend_cuda(b, false);
    vn_tensor_release(a);
    vn_tensor_release(b);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_joins_only_when_lenient),
        cmocka_unit_test(test_lenient_refuses_cpu_tensors),
        cmocka_unit_test(test_first_gradient_on_wrong_device),
        cmocka_unit_test(test_seed_and_set_grad_device),
        cmocka_unit_test(test_lost_node_is_an_error),
        cmocka_unit_test(test_shape_slots),
        cmocka_unit_test(test_check_arg_names),
        cmocka_unit_test(test_two_shapes_in_a_message),
        cmocka_unit_test(test_cross_entropy_grad_huge_logits),
        cmocka_unit_test(test_data_parallel_devices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
