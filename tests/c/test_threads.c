/* Threads: the rules written in venom.h, checked. Several threads train
 * their own small models at the same time, share one read-only weight for
 * inference, switch grad mode, fail with their own messages and draw from
 * the one RNG; every result must equal the one computed on a single
 * thread. */
#include "gradcheck.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 4
#define STEPS 25

static const int64_t SX[] = {12, 8}, SW1[] = {16, 8}, SW2[] = {3, 16}, SB[] = {16};

/* What one job computes: the loss before and after training, the trained
 * second-layer weight, and an inference through the shared weight. */
typedef struct {
    int job;
    const vn_tensor *shared; /* (16, 8), read by every thread */
    double loss0, loss1;
    float w2[3 * 16];
    float infer[12 * 16];
    bool grad_mode_ok, message_ok;
    pthread_barrier_t *barrier;
    char error[256];
} job_t;

static vn_tensor *mlp_loss(vn_tensor *x, vn_tensor *w1, vn_tensor *b1, vn_tensor *w2,
                           vn_tensor *target)
{
    vn_tensor *h = vn_linear(x, w1, b1), *a = h ? vn_tanh(h) : NULL;
    vn_tensor *logits = a ? vn_linear(a, w2, NULL) : NULL;
    vn_tensor *loss = logits ? vn_cross_entropy(logits, target, VN_REDUCE_MEAN) : NULL;
    vn_tensor_release(h);
    vn_tensor_release(a);
    vn_tensor_release(logits);
    return loss;
}

#define FAIL(...) do { snprintf(j->error, sizeof j->error, __VA_ARGS__); goto out; } while (0)

/* The job: plain SGD on an MLP whose data and initial weights depend only
 * on the job number (the test's own generator, not the engine RNG). */
static void train(job_t *j)
{
    unsigned s = 100 * (unsigned)j->job;
    vn_tensor *x = trand(2, SX, -1, 1, s + 1), *w1 = trand(2, SW1, -0.4, 0.4, s + 2);
    vn_tensor *b1 = trand(1, SB, -0.1, 0.1, s + 3), *w2 = trand(2, SW2, -0.4, 0.4, s + 4);
    int64_t labels[12];
    for (int i = 0; i < 12; i++) labels[i] = (i * 7 + j->job) % 3;
    vn_tensor *target = vn_from_data(VN_I64, 1, SX, labels);
    vn_tensor *params[] = {w1, b1, w2};
    for (int k = 0; k < 3; k++)
        if (vn_tensor_set_requires_grad(params[k], true)) FAIL("requires_grad: %s", vn_last_error());

    for (int step = 0; step < STEPS; step++) {
        vn_tensor *loss = mlp_loss(x, w1, b1, w2, target);
        if (!loss) FAIL("forward: %s", vn_last_error());
        double l;
        vn_tensor_item(loss, &l);
        if (step == 0) j->loss0 = l;
        vn_status st = vn_backward(loss, NULL);
        vn_tensor_release(loss);
        if (st) FAIL("backward: %s", vn_last_error());
        for (int k = 0; k < 3; k++) {
            st = vn_sgd_step(params[k], vn_tensor_grad(params[k]), NULL, 0.5, 0, 0, 0, false, true);
            vn_tensor_zero_grad(params[k]);
            if (st) FAIL("sgd_step: %s", vn_last_error());
        }
    }

    /* Grad mode is per thread: switch it off here while the others train. */
    bool was = vn_set_grad_enabled(false);
    vn_tensor *loss = mlp_loss(x, w1, b1, w2, target);
    vn_tensor *through = vn_linear(x, j->shared, NULL); /* retains and views the shared weight */
    vn_tensor *shared_t = vn_transpose(j->shared, 0, 1);
    vn_tensor *again = shared_t ? vn_matmul(x, shared_t) : NULL;
    j->grad_mode_ok = was && loss && !vn_tensor_grad_fn_name(loss);
    vn_set_grad_enabled(true);
    if (!loss || !through || !again) FAIL("inference: %s", vn_last_error());
    vn_tensor_item(loss, &j->loss1);
    vn_tensor_copy_out(w2, j->w2, sizeof j->w2);
    vn_tensor_copy_out(through, j->infer, sizeof j->infer);
    float check[12 * 16]; /* no cmocka assertions off the main thread */
    vn_tensor_copy_out(again, check, sizeof check);
    j->grad_mode_ok = j->grad_mode_ok && memcmp(check, j->infer, sizeof check) == 0;
    vn_tensor_release(loss);
    vn_tensor_release(through);
    vn_tensor_release(shared_t);
    vn_tensor_release(again);

out:
    vn_tensor_release(x);
    vn_tensor_release(w1);
    vn_tensor_release(b1);
    vn_tensor_release(w2);
    vn_tensor_release(target);
}

/* The error message is per thread: each fails with its own shape, waits
 * until all have failed, then reads its own message back. */
static void check_message(job_t *j)
{
    int64_t bad[] = {j->job + 2, 5};
    vn_tensor *odd = vn_zeros(VN_F32, 2, bad), *x = vn_zeros(VN_F32, 2, SX);
    vn_tensor *r = vn_matmul(odd, x); /* inner dims 5 and 12 differ */
    pthread_barrier_wait(j->barrier);
    char want[32];
    snprintf(want, sizeof want, "(%d, 5)", j->job + 2);
    j->message_ok = !r && vn_last_status() == VN_ERR_SHAPE && strstr(vn_last_error(), want);
    vn_tensor_release(odd);
    vn_tensor_release(x);
}

static void *run_job(void *arg)
{
    job_t *j = arg;
    train(j); /* on failure it still returns, so the barrier below is reached */
    if (j->barrier) check_message(j);
    return NULL;
}

static void test_concurrent_training(void **state)
{
    vn_tensor *shared = trand(2, SW1, -1, 1, 4242);
    job_t ref[NTHREADS], par[NTHREADS];
    for (int k = 0; k < NTHREADS; k++) {
        ref[k] = (job_t){.job = k, .shared = shared};
        run_job(&ref[k]);
        if (ref[k].error[0]) fail_msg("job %d alone: %s", k, ref[k].error);
        assert_true(ref[k].loss1 < 0.5 * ref[k].loss0); /* training works at all */
    }
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, NTHREADS);
    pthread_t th[NTHREADS];
    for (int k = 0; k < NTHREADS; k++) {
        par[k] = (job_t){.job = k, .shared = shared, .barrier = &barrier};
        assert_int_equal(pthread_create(&th[k], NULL, run_job, &par[k]), 0);
    }
    for (int k = 0; k < NTHREADS; k++) pthread_join(th[k], NULL);
    pthread_barrier_destroy(&barrier);
    for (int k = 0; k < NTHREADS; k++) {
        if (par[k].error[0]) fail_msg("job %d on a thread: %s", k, par[k].error);
        assert_true(par[k].loss0 == ref[k].loss0 && par[k].loss1 == ref[k].loss1);
        assert_memory_equal(par[k].w2, ref[k].w2, sizeof ref[k].w2);
        assert_memory_equal(par[k].infer, ref[k].infer, sizeof ref[k].infer);
        assert_true(par[k].grad_mode_ok);
        assert_true(par[k].message_ok);
    }
    /* the main thread's grad mode was never touched by the jobs */
    assert_true(vn_is_grad_enabled());
    vn_tensor_release(shared);
}

/* ---- the RNG ------------------------------------------------------------------ */

#define DRAWS 2000

typedef struct {
    float values[DRAWS];
} draws_t;

static void *draw(void *arg)
{
    draws_t *d = arg;
    for (int i = 0; i < DRAWS; i += 100) {
        int64_t n = 100;
        vn_tensor *u = vn_rand(1, &n);
        if (u) vn_tensor_copy_out(u, d->values + i, sizeof(float) * 100);
        vn_tensor_release(u);
    }
    return NULL;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Threads drawing at once share the one stream under its lock: together they
 * get exactly the numbers a single thread would have drawn, each once. */
static void test_rng_shared_stream(void **state)
{
    static draws_t seq[NTHREADS], par[NTHREADS];
    vn_manual_seed(7);
    for (int k = 0; k < NTHREADS; k++) draw(&seq[k]);
    vn_manual_seed(7);
    pthread_t th[NTHREADS];
    for (int k = 0; k < NTHREADS; k++) assert_int_equal(pthread_create(&th[k], NULL, draw, &par[k]), 0);
    for (int k = 0; k < NTHREADS; k++) pthread_join(th[k], NULL);
    qsort(seq, NTHREADS * DRAWS, sizeof(float), cmp_float);
    qsort(par, NTHREADS * DRAWS, sizeof(float), cmp_float);
    assert_memory_equal(seq, par, sizeof seq);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_training),
        cmocka_unit_test(test_rng_shared_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
