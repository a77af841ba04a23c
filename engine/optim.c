/* optim.c — in-place optimizer updates (SGD with momentum, Adam/AdamW) on
 * contiguous f32 parameters. One pass over memory per step; the loops are
 * plain so GCC vectorizes them, and split over threads when large. */
#include "internal.h"

#include <omp.h>
#include <stdlib.h>

/* Checks that t is a usable contiguous f32 tensor shaped like param and on
 * its device. */
static vn_status check_state(const vn_tensor *t, const vn_tensor *param, const char *op,
                             const char *name)
{
    vn_status s = vn__check_dtype_arg(t, VN_F32, op, name, VN_ALLOW_CUDA);
    if (s) return s;
    if (param && (s = vn__same_device_strict(op, 2, (const vn_tensor *[]){t, param},
                                             (const char *[]){name, "the parameter"}, NULL)))
        return s;
    if (!vn_tensor_is_contiguous(t))
        return vn__err(VN_ERR_ARG, "%s: %s must be contiguous", op, name);
    if (param && !vn__same_shape(t, param))
        return vn__err(VN_ERR_SHAPE, "%s: %s has shape %s, expected the parameter's shape %s", op,
                       name, vn__shape(t->ndim, t->shape), vn__shape(param->ndim, param->shape));
    return VN_OK;
}

/* A hyperparameter in [lo, hi) (hi = INFINITY: any finite value >= lo). */
static vn_status check_hyper(const char *op, const char *name, double v, double lo, double hi)
{
    if (!(v >= lo && v < hi) || !isfinite(v))
        return vn__err(VN_ERR_ARG, "%s: %s must be a finite number in [%g, %g), got %g", op, name,
                       lo, hi, v);
    return VN_OK;
}

vn_status vn_sgd_step(vn_tensor *param, const vn_tensor *grad, vn_tensor *momentum_buf,
                      double lr, double momentum, double dampening, double weight_decay,
                      bool nesterov, bool first_step)
{
    vn_status s;
    if ((s = check_state(param, NULL, "sgd_step", "parameter")) ||
        (s = check_state(grad, param, "sgd_step", "gradient")) ||
        (s = check_hyper("sgd_step", "lr", lr, 0, INFINITY)) ||
        (s = check_hyper("sgd_step", "momentum", momentum, 0, INFINITY)) ||
        (s = check_hyper("sgd_step", "dampening", dampening, 0, INFINITY)) ||
        (s = check_hyper("sgd_step", "weight_decay", weight_decay, 0, INFINITY)))
        return s;
    if (momentum != 0) {
        if (!momentum_buf)
            return vn__err(VN_ERR_ARG, "sgd_step: momentum %g needs a momentum buffer, got NULL",
                           momentum);
        if ((s = check_state(momentum_buf, param, "sgd_step", "momentum buffer"))) return s;
    }
    int64_t n = vn_tensor_numel(param);
    vn__written(param); /* a graph still holding the old values must not run */
    if (vn__is_cuda(param)) {
        float *p = vn__ptr(param), *buf = momentum != 0 ? vn__ptr(momentum_buf) : NULL;
        const float *g = vn__ptr(grad);
        if (vnk_sgd_step(&p, &buf, &g, &n, 1, (float)lr, (float)momentum, (float)dampening,
                         (float)weight_decay, nesterov, first_step))
            return vn__cuda_err("sgd_step");
        return VN_OK;
    }
    float *restrict p = vn_tensor_data(param);
    const float *restrict g = vn_tensor_data(grad);
    const float flr = (float)lr, wd = (float)weight_decay, mu = (float)momentum,
                keep = (float)(1 - dampening);

    if (momentum == 0) {
#pragma omp parallel for simd schedule(static) if (n > VN_OMP_MIN_WORK)
        for (int64_t i = 0; i < n; i++) p[i] -= flr * (g[i] + wd * p[i]);
        return VN_OK;
    }
    float *restrict buf = vn_tensor_data(momentum_buf);
    /* the first step takes buf = g: the same update with mu = 0, keep = 1 */
    const float bmu = first_step ? 0.0f : mu, bkeep = first_step ? 1.0f : keep;
#pragma omp parallel for simd schedule(static) if (n > VN_OMP_MIN_WORK)
    for (int64_t i = 0; i < n; i++) {
        float d = g[i] + wd * p[i];
        float b = bmu * buf[i] + bkeep * d;
        buf[i] = b;
        p[i] -= flr * (nesterov ? d + mu * b : b);
    }
    return VN_OK;
}

/* The checks of vn_adam_step, before anything is written. */
static vn_status adam_check(const vn_tensor *param, const vn_tensor *grad, const vn_tensor *exp_avg,
                            const vn_tensor *exp_avg_sq, int64_t step, double lr, double beta1,
                            double beta2, double eps, double weight_decay)
{
    vn_status s;
    if ((s = check_state(param, NULL, "adam_step", "parameter")) ||
        (s = check_state(grad, param, "adam_step", "gradient")) ||
        (s = check_state(exp_avg, param, "adam_step", "exp_avg")) ||
        (s = check_state(exp_avg_sq, param, "adam_step", "exp_avg_sq")) ||
        (s = check_hyper("adam_step", "lr", lr, 0, INFINITY)) ||
        (s = check_hyper("adam_step", "beta1", beta1, 0, 1)) ||
        (s = check_hyper("adam_step", "beta2", beta2, 0, 1)) ||
        (s = check_hyper("adam_step", "eps", eps, 0, INFINITY)) ||
        (s = check_hyper("adam_step", "weight_decay", weight_decay, 0, INFINITY)))
        return s;
    if (vn__ptr(exp_avg) == vn__ptr(exp_avg_sq) || vn__ptr(exp_avg) == vn__ptr(param))
        return vn__err(VN_ERR_ARG, "adam_step: param, exp_avg and exp_avg_sq must be distinct "
                                   "tensors");
    if (step < 1)
        return vn__err(VN_ERR_ARG, "adam_step: step must be >= 1 (it counts from 1), got %lld",
                       (long long)step);
    return VN_OK;
}

/* Adam's per-step constants, as floats. */
typedef struct {
    float step_size, inv_sqrt_bc2, b1, b2, c1, c2, eps, decay, wd;
} adam_coef;

static adam_coef adam_coefs(int64_t step, double lr, double beta1, double beta2, double eps,
                            double weight_decay, bool decoupled)
{
    double bc1 = 1 - pow(beta1, (double)step), bc2 = 1 - pow(beta2, (double)step);
    /* p − lr·(m/bc1)/(sqrt(v/bc2) + eps) = p − (lr/bc1)·m/(sqrt(v)/sqrt(bc2) + eps) */
    return (adam_coef){.step_size = (float)(lr / bc1), .inv_sqrt_bc2 = (float)(1 / sqrt(bc2)),
                       .b1 = (float)beta1, .b2 = (float)beta2, .c1 = (float)(1 - beta1),
                       .c2 = (float)(1 - beta2), .eps = (float)eps,
                       .decay = decoupled ? (float)(1 - lr * weight_decay) : 1.0f,
                       .wd = decoupled ? 0.0f : (float)weight_decay};
}

/* Elements lo..hi−1 of one parameter: the one loop body of both CPU paths. */
static void adam_update(const adam_coef *k, float *restrict p, const float *restrict g,
                        float *restrict m, float *restrict v, int64_t lo, int64_t hi)
{
#pragma omp simd
    for (int64_t i = lo; i < hi; i++) {
        float pi = p[i] * k->decay;
        float gi = g[i] + k->wd * p[i];
        float mi = k->b1 * m[i] + k->c1 * gi;
        float vi = k->b2 * v[i] + k->c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - k->step_size * mi / (sqrtf(vi) * k->inv_sqrt_bc2 + k->eps);
    }
}

/* The CPU update of n parameters (checked) as one range of elements split
 * evenly over the threads, so small tensors need no parallel loop of their
 * own; every element gets the update vn_adam_step gives it. */
static void adam_cpu(int n, vn_tensor *const *param, const vn_tensor *const *grad,
                     vn_tensor *const *exp_avg, vn_tensor *const *exp_avg_sq, const adam_coef *k)
{
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        vn__written(param[i]); /* a graph still holding the old values must not run */
        total += vn_tensor_numel(param[i]);
    }
    int nt = total > VN_OMP_MIN_WORK ? omp_get_max_threads() : 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int t = omp_get_thread_num(), nth = omp_get_num_threads();
        int64_t lo = total * t / nth, hi = total * (t + 1) / nth, base = 0;
        for (int i = 0; i < n && base < hi; i++) {
            int64_t size = vn_tensor_numel(param[i]);
            int64_t a = lo > base ? lo - base : 0, b = hi < base + size ? hi - base : size;
            if (a < b)
                adam_update(k, vn_tensor_data(param[i]), vn_tensor_data(grad[i]),
                            vn_tensor_data(exp_avg[i]), vn_tensor_data(exp_avg_sq[i]), a, b);
            base += size;
        }
    }
    if (vn__profiling) vn__profile_forward("adam_step"); /* records no node: time it here */
}

vn_status vn_adam_step(vn_tensor *param, const vn_tensor *grad, vn_tensor *exp_avg,
                       vn_tensor *exp_avg_sq, int64_t step, double lr, double beta1,
                       double beta2, double eps, double weight_decay, bool decoupled)
{
    vn_status s = adam_check(param, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps,
                             weight_decay);
    if (s) return s;
    if (vn__is_cuda(param)) {
        int64_t n = vn_tensor_numel(param);
        double bc1 = 1 - pow(beta1, (double)step), bc2 = 1 - pow(beta2, (double)step);
        vn__written(param); /* a graph still holding the old values must not run */
        float *p = vn__ptr(param), *m = vn__ptr(exp_avg), *v = vn__ptr(exp_avg_sq);
        const float *g = vn__ptr(grad);
        if (vnk_adam_step(&p, &m, &v, &g, &n, 1, (float)lr, (float)beta1, (float)beta2,
                          (float)eps, (float)weight_decay, decoupled, (float)bc1, (float)bc2))
            return vn__cuda_err("adam_step");
        return VN_OK;
    }
    adam_coef k = adam_coefs(step, lr, beta1, beta2, eps, weight_decay, decoupled);
    adam_cpu(1, &param, &grad, &exp_avg, &exp_avg_sq, &k);
    return VN_OK;
}

vn_status vn_adam_step_multi(int n, vn_tensor *const *param, const vn_tensor *const *grad,
                             vn_tensor *const *exp_avg, vn_tensor *const *exp_avg_sq, int64_t step,
                             double lr, double beta1, double beta2, double eps,
                             double weight_decay, bool decoupled)
{
    if (n < 0 || (n > 0 && (!param || !grad || !exp_avg || !exp_avg_sq)))
        return vn__err(VN_ERR_ARG, "adam_step_multi: expected n >= 0 and four arrays of n "
                       "tensors, got n = %d%s", n, n > 0 ? " and a NULL array" : "");
    int ncuda = 0;
    for (int i = 0; i < n; i++) { /* every check first: a bad entry leaves all unchanged */
        vn_status s = adam_check(param[i], grad[i], exp_avg[i], exp_avg_sq[i], step, lr, beta1,
                                 beta2, eps, weight_decay);
        if (s) return vn__err(s, "adam_step_multi: parameter %d: %s", i, vn_last_error());
        ncuda += vn__is_cuda(param[i]);
    }
    if (ncuda == 0) { /* all on the CPU: one parallel loop over all their elements */
        adam_coef k = adam_coefs(step, lr, beta1, beta2, eps, weight_decay, decoupled);
        if (n > 0) adam_cpu(n, param, grad, exp_avg, exp_avg_sq, &k);
        return VN_OK;
    }
    if (ncuda < n) { /* mixed devices: one by one */
        for (int i = 0; i < n; i++) {
            vn_status s = vn_adam_step(param[i], grad[i], exp_avg[i], exp_avg_sq[i], step, lr,
                                       beta1, beta2, eps, weight_decay, decoupled);
            if (s) return s;
        }
        return VN_OK;
    }
    /* All on the GPU: one kernel launch per chunk of parameters. */
    float **p = malloc(sizeof *p * (size_t)n * 4);
    int64_t *size = malloc(sizeof *size * (size_t)n);
    if (!p || !size) {
        free(p);
        free(size);
        return vn__err(VN_ERR_MEMORY, "adam_step_multi: out of memory");
    }
    float **m = p + n, **v = p + 2 * n;
    const float **g = (const float **)(p + 3 * n);
    for (int i = 0; i < n; i++) {
        vn__written(param[i]);
        p[i] = vn__ptr(param[i]), g[i] = vn__ptr(grad[i]);
        m[i] = vn__ptr(exp_avg[i]), v[i] = vn__ptr(exp_avg_sq[i]);
        size[i] = vn_tensor_numel(param[i]);
    }
    double bc1 = 1 - pow(beta1, (double)step), bc2 = 1 - pow(beta2, (double)step);
    vn_status s = vnk_adam_step(p, m, v, g, size, n, (float)lr, (float)beta1, (float)beta2,
                                (float)eps, (float)weight_decay, decoupled, (float)bc1, (float)bc2)
                      ? vn__cuda_err("adam_step_multi")
                      : VN_OK;
    free(p);
    free(size);
    return s;
}
