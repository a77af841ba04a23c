/* ops_stats.c — statistics of a tensor: variance, standard deviation and
 * vector norms, over one dim or all elements. var/std and the 1- and
 * inf-norms are built from the public ops, so their gradients (and their
 * CUDA paths) come from those ops; the 2-norm has its own backward so that
 * its gradient at the zero vector is 0 (the subgradient PyTorch uses), not
 * the 0/0 the chain rule through sqrt would give. */
#include "internal.h"

/* A 0-d f32 tensor on t's device holding v. */
static vn_tensor *scalar_like(const vn_tensor *t, double v)
{
    return vn_full_on(vn__is_cuda(t) ? VN_CUDA : VN_CPU, VN_F32, 0, NULL, v);
}

/* all: over every element (dim and keepdim unused). */
static vn_tensor *var_impl(const char *op, const vn_tensor *t, bool all, int dim, double correction,
                           bool keepdim)
{
    if (vn__check_dtype_arg(t, VN_F32, op, "input", VN_ALLOW_CUDA)) return NULL;
    all = all || t->ndim == 0; /* a 0-d tensor: its one element is the whole */
    if (!(correction >= 0 && correction <= 1e15))
        return vn__errp(VN_ERR_ARG, "%s: correction must be a number >= 0, got %g", op, correction);
    int d = dim;
    if (!all && vn__wrap_dim(t->ndim ? t->ndim : 1, &d, op)) return NULL;
    int64_t n = all ? vn_tensor_numel(t) : (t->ndim ? t->shape[d] : 1);
    /* Σ(x − mean)² / (n − correction): n − correction ≤ 0 gives inf or nan,
     * as in PyTorch. */
    vn_tensor *mean = all ? vn_mean_all(t) : vn_mean(t, d, true);
    vn_tensor *dev = mean ? vn_sub(t, mean) : NULL;
    vn_tensor *sq = dev ? vn_mul(dev, dev) : NULL;
    vn_tensor *sum = sq ? (all ? vn_sum_all(sq) : vn_sum(sq, d, keepdim)) : NULL;
    vn_tensor *den = sum ? scalar_like(t, (double)n - correction) : NULL;
    vn_tensor *out = den ? vn_div(sum, den) : NULL;
    vn_tensor_release(mean);
    vn_tensor_release(dev);
    vn_tensor_release(sq);
    vn_tensor_release(sum);
    vn_tensor_release(den);
    return out;
}

static vn_tensor *std_of(vn_tensor *var)
{
    vn_tensor *out = var ? vn_sqrt(var) : NULL;
    vn_tensor_release(var);
    return out;
}

vn_tensor *vn_var(const vn_tensor *t, int dim, double correction, bool keepdim)
{
    return var_impl("var", t, false, dim, correction, keepdim);
}
vn_tensor *vn_var_all(const vn_tensor *t, double correction) { return var_impl("var_all", t, true, 0, correction, false); }
vn_tensor *vn_std(const vn_tensor *t, int dim, double correction, bool keepdim)
{
    return std_of(var_impl("std", t, false, dim, correction, keepdim));
}
vn_tensor *vn_std_all(const vn_tensor *t, double correction) { return std_of(var_impl("std_all", t, true, 0, correction, false)); }

/* d‖x‖₂/dx = x / ‖x‖₂, and 0 where ‖x‖₂ = 0. saved[0] is the norm with
 * keepdim (an alias when the output already has that shape), so it
 * broadcasts against x. */
static vn_status norm2_backward(vn_node *node, const vn_tensor *gout)
{
    const vn_tensor *x = node->inputs[0], *norm = node->saved[0];
    vn_tensor *g = vn_reshape(gout, norm->ndim, norm->shape);
    vn_tensor *zero = g ? scalar_like(x, 0) : NULL;
    vn_tensor *is0 = zero ? vn_eq(norm, zero) : NULL;
    vn_tensor *ratio = is0 ? vn_div(x, norm) : NULL;
    vn_tensor *safe = ratio ? vn_where(is0, zero, ratio) : NULL;
    vn_tensor *dx = safe ? vn_mul(safe, g) : NULL;
    vn_status s = dx ? vn__accum(node, 0, dx) : VN_ERR_MEMORY; /* the failed call set the message */
    vn_tensor_release(g);
    vn_tensor_release(zero);
    vn_tensor_release(is0);
    vn_tensor_release(ratio);
    vn_tensor_release(safe);
    return s;
}

static vn_tensor *norm_impl(const char *op, const vn_tensor *t, double p, bool all, int dim, bool keepdim)
{
    if (vn__check_dtype_arg(t, VN_F32, op, "input", VN_ALLOW_CUDA)) return NULL;
    if (!(p == 1 || p == 2 || p == INFINITY))
        return vn__errp(VN_ERR_ARG, "%s: p must be 1, 2 or inf, got %g", op, p);
    all = all || t->ndim == 0;
    int d = dim;
    if (!all && vn__wrap_dim(t->ndim ? t->ndim : 1, &d, op)) return NULL;
    if (p != 2) { /* Σ|x| or max|x|: abs, sum and max carry the gradient */
        vn_tensor *a = vn_abs(t), *out = NULL;
        if (a && p == 1) out = all ? vn_sum_all(a) : vn_sum(a, d, keepdim);
        if (a && p != 1) out = all ? vn_max_all(a) : vn_max(a, d, keepdim);
        vn_tensor_release(a);
        return out;
    }
    /* √Σx², computed without recording; the node below is the gradient. */
    bool prev = vn_set_grad_enabled(false);
    vn_tensor *sq = vn_mul(t, t);
    vn_tensor *sum = sq ? (all ? vn_sum_all(sq) : vn_sum(sq, d, true)) : NULL;
    vn_tensor *kept = sum ? vn_sqrt(sum) : NULL; /* the norm with keepdim (0-d when all) */
    vn_set_grad_enabled(prev);
    vn_tensor *out = NULL;
    if (kept) out = all || keepdim ? vn__alias(kept) : vn_squeeze(kept, d);
    vn_node *node = out ? vn__record(out, op, norm2_backward, 1, &t) : NULL;
    if (node) node->saved[0] = vn_tensor_retain(kept); /* kept is not out: no cycle */
    vn_tensor_release(sq);
    vn_tensor_release(sum);
    vn_tensor_release(kept);
    return out;
}

vn_tensor *vn_norm(const vn_tensor *t, double p, int dim, bool keepdim) { return norm_impl("norm", t, p, false, dim, keepdim); }
vn_tensor *vn_norm_all(const vn_tensor *t, double p) { return norm_impl("norm_all", t, p, true, 0, false); }
