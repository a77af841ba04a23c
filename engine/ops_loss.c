/* ops_loss.c — softmax, log_softmax and the losses (cross_entropy, nll_loss,
 * mse_loss), each with its backward rule. Softmax kernels work on rows of a
 * contiguous tensor; another dim is first swapped to the end. Every exp is
 * taken of x − max(x), so large logits cannot overflow. */
#include "internal.h"
#include "vec_math.h" /* vn__exp_shift_f32, vn__max_f32: vectorised exp and max */

#include <stdlib.h>

/* A contiguous copy of t with dims `dim` and last swapped (not recorded);
 * t itself, retained, when dim is already last and t contiguous. Swapping
 * twice restores the original order. */
static vn_tensor *swap_to_last(const vn_tensor *t, int dim)
{
    int last = t->ndim - 1;
    if (dim == last) return vn__plain_contiguous(t);
    vn_tensor *v = vn__alias(t);
    if (!v) return NULL;
    int64_t sh = v->shape[dim], st = v->strides[dim];
    v->shape[dim] = v->shape[last], v->strides[dim] = v->strides[last];
    v->shape[last] = sh, v->strides[last] = st;
    vn_tensor *c = vn__plain_contiguous(v);
    vn_tensor_release(v);
    return c;
}

static bool valid_reduction(vn_reduction r)
{
    return r == VN_REDUCE_MEAN || r == VN_REDUCE_SUM || r == VN_REDUCE_NONE;
}

/* ---- softmax and log_softmax ----------------------------------------------- */

/* y = softmax or log_softmax of each row of x (rows × D, contiguous). */
static void softmax_rows(const float *x, float *y, int64_t rows, int64_t D, bool log)
{
#pragma omp parallel for schedule(static) if (rows * D > VN_OMP_MIN_WORK)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * D;
        float *yr = y + r * D;
        float m = -INFINITY;
        for (int64_t j = 0; j < D; j++) m = xr[j] > m ? xr[j] : m;
        float s = 0;
        for (int64_t j = 0; j < D; j++) {
            float e = expf(xr[j] - m);
            yr[j] = e;
            s += e;
        }
        if (log) {
            /* (x − m) − log s, not x − (m + log s): exact when x ≈ m is large */
            float ls = logf(s);
            for (int64_t j = 0; j < D; j++) yr[j] = (xr[j] - m) - ls;
        } else {
            float inv = 1.0f / s;
            for (int64_t j = 0; j < D; j++) yr[j] *= inv;
        }
    }
}

/* dx from the saved output y and dL/dy per row:
 *   softmax:      dx = y ⊙ (g − Σ g⊙y)
 *   log_softmax:  dx = g − exp(y) · Σ g */
static void softmax_rows_backward(const float *y, const float *g, float *dx, int64_t rows, int64_t D,
                                  bool log)
{
#pragma omp parallel for schedule(static) if (rows * D > VN_OMP_MIN_WORK)
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * D, *gr = g + r * D;
        float *dr = dx + r * D;
        float s = 0;
        if (log) {
            for (int64_t j = 0; j < D; j++) s += gr[j];
            for (int64_t j = 0; j < D; j++) dr[j] = gr[j] - expf(yr[j]) * s;
        } else {
            for (int64_t j = 0; j < D; j++) s += gr[j] * yr[j];
            for (int64_t j = 0; j < D; j++) dr[j] = yr[j] * (gr[j] - s);
        }
    }
}

struct softmax_saved { int dim; bool log; };

static vn_status softmax_backward(vn_node *node, const vn_tensor *gout)
{
    const struct softmax_saved *saved = VN_SAVED_STATE(node, struct softmax_saved);
    int dim = saved->dim;
    bool log = saved->log;
    vn_tensor *y = swap_to_last(node->saved[0], dim), *g = swap_to_last(gout, dim);
    vn_tensor *dx = y && g ? vn__new_like(y, VN_F32, y->ndim, y->shape) : NULL, *res = NULL;
    if (dx) {
        int64_t D = y->ndim ? y->shape[y->ndim - 1] : 1, rows = D ? vn_tensor_numel(y) / D : 0;
        if (!vn__is_cuda(y))
            softmax_rows_backward(vn__ptr(y), vn__ptr(g), vn__ptr(dx), rows, D, log);
        if (!vn__is_cuda(y) || !vnk_softmax_backward(vn__ptr(dx), vn__ptr(y), vn__ptr(g), rows, D, log))
            res = swap_to_last(dx, dim);
        else
            vn__cuda_err(node->name);
    }
    vn_tensor_release(y);
    vn_tensor_release(g);
    vn_tensor_release(dx);
    return vn__accum(node, 0, res);
}

static vn_tensor *softmax_impl(const vn_tensor *t, int dim, bool log)
{
    const char *op = log ? "log_softmax" : "softmax";
    if (vn__check_dtype_arg(t, VN_F32, op, "input", VN_ALLOW_CUDA)) return NULL;
    if (vn__wrap_dim(t->ndim, &dim, log ? "log_softmax: dim" : "softmax: dim")) return NULL;

    vn_tensor *x = swap_to_last(t, dim);
    vn_tensor *y = x ? vn__new_like(x, VN_F32, x->ndim, x->shape) : NULL, *out = NULL;
    if (y) {
        int64_t D = x->shape[x->ndim - 1], rows = D ? vn_tensor_numel(x) / D : 0;
        if (!vn__is_cuda(x)) softmax_rows(vn__ptr(x), vn__ptr(y), rows, D, log);
        if (!vn__is_cuda(x) || !vnk_softmax(vn__ptr(y), vn__ptr(x), rows, D, log))
            out = swap_to_last(y, dim);
        else
            vn__cuda_err(op);
    }
    vn_tensor_release(x);
    vn_tensor_release(y);
    if (!out) return NULL;
    vn_node *node = vn__record(out, op, softmax_backward, 1, &t);
    if (node) {
        *VN_SAVED_STATE(node, struct softmax_saved) = (struct softmax_saved){dim, log};
        /* an alias, not out itself: out owns the node, so a reference back
         * would be a cycle */
        node->saved[0] = vn__alias(out);
        if (!node->saved[0]) {
            vn_tensor_release(out);
            return NULL;
        }
    }
    return out;
}

vn_tensor *vn_softmax(const vn_tensor *t, int dim) { return softmax_impl(t, dim, false); }
vn_tensor *vn_log_softmax(const vn_tensor *t, int dim) { return softmax_impl(t, dim, true); }

/* ---- class-target losses ------------------------------------------------- */

/* What cross_entropy, nll_loss and mse_loss save besides tensors. */
struct loss_saved { vn_reduction reduction; };

static int64_t target_at(const vn_tensor *t, int64_t n)
{
    const char *base = vn_tensor_data(t);
    int64_t off = n * t->strides[0];
    return t->dtype == VN_I32 ? ((const int32_t *)base)[off] : ((const int64_t *)base)[off];
}

/* Checks scores (N, C) f32 and target (N) i32/i64 with every value in
 * 0..C-1, naming `op` and the first bad position. */
static vn_status check_class_args(const char *op, const vn_tensor *scores, const char *sname,
                                  const vn_tensor *target, vn_reduction reduction)
{
    vn_status s = vn__check_dtype_arg(scores, VN_F32, op, sname, VN_ALLOW_CUDA);
    if (s) return s;
    if ((s = vn__check_arg(target, op, "target", VN_ALLOW_CUDA))) return s;
    const vn_tensor *both[2] = {scores, target};
    bool cuda;
    if ((s = vn__same_device_strict(op, 2, both, (const char *[]){sname, "target"}, &cuda))) return s;
    if (target->dtype != VN_I32 && target->dtype != VN_I64)
        return vn__err(VN_ERR_DTYPE, "%s: target must be i32 or i64 class indices, found %s", op,
                       vn_dtype_name(target->dtype));
    if (scores->ndim != 2)
        return vn__err(VN_ERR_SHAPE, "%s: %s must be 2-D (N, C), found %s", op, sname,
                       vn__shape(scores->ndim, scores->shape));
    if (target->ndim != 1 || target->shape[0] != scores->shape[0])
        return vn__err(VN_ERR_SHAPE, "%s: %s %s and target %s: expected target of shape (%lld)",
                       op, sname, vn__shape(scores->ndim, scores->shape),
                       vn__shape(target->ndim, target->shape), (long long)scores->shape[0]);
    if (!valid_reduction(reduction))
        return vn__err(VN_ERR_ARG, "%s: unknown reduction %d (expected mean, sum or none)", op,
                       (int)reduction);
    int64_t N = scores->shape[0], C = scores->shape[1];
    if (cuda) { /* checked on the GPU; the first bad position comes back */
        vn_tensor *tc = vn__plain_contiguous(target);
        int64_t bad = -1, value = 0;
        if (!tc) return vn_last_status();
        s = vnk_check_targets(&bad, &value, vn__ptr(tc), tc->dtype, N, C) ? vn__cuda_err(op) : VN_OK;
        vn_tensor_release(tc);
        if (!s && bad >= 0)
            s = vn__err(VN_ERR_ARG, "%s: target[%lld] = %lld is out of range for %lld classes "
                        "(expected 0..%lld)", op, (long long)bad, (long long)value, (long long)C,
                        (long long)C - 1);
        return s;
    }
    for (int64_t n = 0; n < N; n++) {
        int64_t t = target_at(target, n);
        if (t < 0 || t >= C)
            return vn__err(VN_ERR_ARG, "%s: target[%lld] = %lld is out of range for %lld classes "
                           "(expected 0..%lld)", op, (long long)n, (long long)t, (long long)C,
                           (long long)C - 1);
    }
    return VN_OK;
}

/* The loss tensor from per-sample losses: (N) for NONE, else a 0-d sum or
 * mean (accumulated in double). */
static vn_tensor *reduce_losses(const double *per, int64_t N, vn_reduction reduction)
{
    if (reduction == VN_REDUCE_NONE) {
        vn_tensor *out = vn__new(VN_F32, 1, &N);
        if (out) {
            float *p = vn_tensor_data(out);
            for (int64_t n = 0; n < N; n++) p[n] = (float)per[n];
        }
        return out;
    }
    double sum = 0;
    for (int64_t n = 0; n < N; n++) sum += per[n];
    vn_tensor *out = vn__new(VN_F32, 0, NULL);
    if (out) *(float *)vn_tensor_data(out) = (float)(reduction == VN_REDUCE_MEAN ? sum / N : sum);
    return out;
}

/* dL/d(loss_n) for each sample: the incoming gradient spread by the
 * reduction. Returns a malloc'd array of N floats, or NULL. */
static float *per_sample_scale(const vn_tensor *gout, int64_t N, vn_reduction reduction)
{
    float *scale = malloc(sizeof(float) * (size_t)(N ? N : 1));
    if (!scale) {
        vn__err(VN_ERR_MEMORY, "out of memory in a loss backward");
        return NULL;
    }
    if (reduction == VN_REDUCE_NONE) {
        for (int64_t n = 0; n < N; n++) scale[n] = (float)vn__load(gout, vn__offset_of(gout, n));
    } else {
        double g = vn__load(gout, gout->offset);
        float v = (float)(reduction == VN_REDUCE_MEAN ? g / N : g);
        for (int64_t n = 0; n < N; n++) scale[n] = v;
    }
    return scale;
}

/* d logits = (softmax(logits) − onehot(target)) · scale_n, with softmax
 * rebuilt from the saved lse = log Σ exp(x) of each row: exp(x − lse), as
 * vnk_cross_entropy_backward does on the GPU. */
static vn_status cross_entropy_backward(vn_node *node, const vn_tensor *gout)
{
    const vn_tensor *target = node->saved[0], *lse = node->saved[1];
    vn_tensor *x = vn__plain_contiguous(node->inputs[0]);
    int64_t N = node->inputs[0]->shape[0], C = node->inputs[0]->shape[1];
    vn_reduction reduction = VN_SAVED_STATE(node, struct loss_saved)->reduction;
    float *scale = x ? per_sample_scale(gout, N, reduction) : NULL;
    vn_tensor *dx = scale ? vn__new(VN_F32, 2, node->inputs[0]->shape) : NULL;
    if (dx) {
        const float *px = vn_tensor_data(x), *pl = vn_tensor_data(lse);
        float *pd = vn_tensor_data(dx);
#pragma omp parallel for schedule(static) if (N * C > VN_OMP_MIN_WORK)
        for (int64_t n = 0; n < N; n++) {
            const float *xr = px + n * C;
            float *dr = pd + n * C, s = scale[n];
            memcpy(dr, xr, sizeof(float) * (size_t)C);
            vn__exp_shift_f32(dr, C, pl[n], s); /* exp(x − lse) · s, vectorised */
            dr[target_at(target, n)] -= s;
        }
    }
    free(scale);
    vn_tensor_release(x);
    return vn__accum(node, 0, dx);
}

/* ---- the CUDA path of the class-target losses -------------------------------
 * Kernels give per-sample losses; the reduction is a sum or mean op. The
 * cross-entropy node saves lse (N) = log Σ exp(x) of each row, as on the CPU. */

/* The per-sample losses (N) reduced as asked; takes `per`. */
static vn_tensor *reduce_losses_cuda(vn_tensor *per, vn_reduction reduction)
{
    if (reduction == VN_REDUCE_NONE) return per;
    vn_tensor *out = reduction == VN_REDUCE_MEAN ? vn_mean_all(per) : vn_sum_all(per);
    vn_tensor_release(per);
    return out;
}

/* How the upstream gradient g reaches each sample: sample n reads
 * g[n · *stride] (stride 0: one scalar for all) times *mul (1/N for MEAN). */
static void upstream(const vn_tensor *g, vn_reduction r, int64_t N, int64_t *stride, float *mul)
{
    *stride = r == VN_REDUCE_NONE ? g->strides[0] : 0;
    *mul = r == VN_REDUCE_MEAN ? (float)(1.0 / (double)N) : 1.0f;
}

static vn_status cross_entropy_backward_cuda(vn_node *node, const vn_tensor *gout)
{
    const vn_tensor *target = node->saved[0], *lse = node->saved[1];
    vn_tensor *x = vn__plain_contiguous(node->inputs[0]);
    int64_t N = node->inputs[0]->shape[0], C = node->inputs[0]->shape[1], gs;
    float mul;
    upstream(gout, VN_SAVED_STATE(node, struct loss_saved)->reduction, N, &gs, &mul);
    vn_tensor *dx = x ? vn__new_like(x, VN_F32, 2, x->shape) : NULL;
    if (dx && vnk_cross_entropy_backward(vn__ptr(dx), vn__ptr(x), vn__ptr(lse), vn__ptr(target),
                                         target->dtype, vn__ptr(gout), gs, N, C, mul)) {
        vn_tensor_release(dx);
        dx = vn__cuda_errp(node->name);
    }
    vn_tensor_release(x);
    return vn__accum(node, 0, dx);
}

static vn_tensor *cross_entropy_cuda(const vn_tensor *logits, const vn_tensor *target,
                                     vn_reduction reduction)
{
    int64_t N = logits->shape[0], C = logits->shape[1];
    vn_tensor *x = vn__plain_contiguous(logits), *t = x ? vn__plain_contiguous(target) : NULL;
    vn_tensor *lse = t ? vn__new_like(x, VN_F32, 1, &N) : NULL;
    vn_tensor *per = lse ? vn__new_like(x, VN_F32, 1, &N) : NULL, *out = NULL;
    if (per && vnk_cross_entropy(vn__ptr(lse), vn__ptr(per), vn__ptr(x), vn__ptr(t), t->dtype, N, C)) {
        vn__cuda_err("cross_entropy");
    } else if (per) {
        out = reduce_losses_cuda(per, reduction);
        per = NULL;
    }
    vn_tensor_release(per);
    vn_tensor_release(x);
    vn_node *node = out ? vn__record(out, "cross_entropy", cross_entropy_backward_cuda, 1, &logits) : NULL;
    if (node) {
        VN_SAVED_STATE(node, struct loss_saved)->reduction = reduction;
        node->saved[0] = vn_tensor_retain(t);
        node->saved[1] = vn_tensor_retain(lse);
    }
    vn_tensor_release(t);
    vn_tensor_release(lse);
    return out;
}

static vn_status nll_backward_cuda(vn_node *node, const vn_tensor *gout)
{
    const vn_tensor *target = node->saved[0];
    int64_t N = node->inputs[0]->shape[0], C = node->inputs[0]->shape[1], gs;
    float mul;
    upstream(gout, VN_SAVED_STATE(node, struct loss_saved)->reduction, N, &gs, &mul);
    vn_tensor *dx = vn__new_like(target, VN_F32, 2, node->inputs[0]->shape);
    if (dx && vnk_nll_backward(vn__ptr(dx), vn__ptr(target), target->dtype, vn__ptr(gout), gs, N,
                               C, mul)) {
        vn_tensor_release(dx);
        dx = vn__cuda_errp(node->name);
    }
    return vn__accum(node, 0, dx);
}

static vn_tensor *nll_loss_cuda(const vn_tensor *logp, const vn_tensor *target,
                                vn_reduction reduction)
{
    int64_t N = logp->shape[0], C = logp->shape[1];
    vn_tensor *x = vn__plain_contiguous(logp), *t = x ? vn__plain_contiguous(target) : NULL;
    vn_tensor *per = t ? vn__new_like(x, VN_F32, 1, &N) : NULL, *out = NULL;
    if (per && vnk_nll(vn__ptr(per), vn__ptr(x), vn__ptr(t), t->dtype, N, C)) {
        vn__cuda_err("nll_loss");
    } else if (per) {
        out = reduce_losses_cuda(per, reduction);
        per = NULL;
    }
    vn_tensor_release(per);
    vn_tensor_release(x);
    vn_node *node = out ? vn__record(out, "nll_loss", nll_backward_cuda, 1, &logp) : NULL;
    if (node) {
        VN_SAVED_STATE(node, struct loss_saved)->reduction = reduction;
        node->saved[0] = vn_tensor_retain(t);
    }
    vn_tensor_release(t);
    return out;
}

/* The forward's exps go through a stack buffer of this many floats per row. */
#define CE_CHUNK 256
/* Rows done side by side: each row's Σ exp is a serial chain in column order
 * (so a row's sum has the same bits however the rows are grouped or split
 * over threads), and one row's chain alone would leave the core waiting on
 * each add's latency. */
#define CE_ROWS 8

/* Rows n0 .. n0 + CE_ROWS − 1 of x (N, C), the missing ones past N−1
 * computed as copies of row N−1 and not stored: lse[n] = log Σ exp(x) and
 * per[n] = the loss of row n. */
static void ce_rows(const float *px, const vn_tensor *target, int64_t N, int64_t C, int64_t n0,
                    float *lse, double *per)
{
    const float *xr[CE_ROWS];
    float m[CE_ROWS], s[CE_ROWS], e[CE_ROWS][CE_CHUNK];
    for (int r = 0; r < CE_ROWS; r++) {
        xr[r] = px + (n0 + r < N ? n0 + r : N - 1) * C;
        m[r] = -INFINITY;
        s[r] = 0;
    }
    /* A row whose max is 0 may get either zero: the same numbers below (x − m
     * is ±0 for a zero x, whose exp is 1; log s >= +0 is added to m and m − x_t). */
    for (int r = 0; r < CE_ROWS; r++) m[r] = vn__max_f32(xr[r], C);
    /* Σ exp(x − m) in row order, the exps vectorised a chunk at a time */
    for (int64_t c0 = 0; c0 < C; c0 += CE_CHUNK) {
        int64_t len = C - c0 < CE_CHUNK ? C - c0 : CE_CHUNK;
        for (int r = 0; r < CE_ROWS; r++) {
            memcpy(e[r], xr[r] + c0, sizeof(float) * (size_t)len);
            vn__exp_shift_f32(e[r], len, m[r], 1.0f);
        }
        for (int64_t c = 0; c < len; c++)
            for (int r = 0; r < CE_ROWS; r++) s[r] += e[r][c];
    }
    for (int r = 0; r < CE_ROWS && n0 + r < N; r++) {
        lse[n0 + r] = m[r] + logf(s[r]);
        /* (m − x_t) + log s in double keeps its digits when x_t ≈ m is large */
        per[n0 + r] = (double)(m[r] - xr[r][target_at(target, n0 + r)]) + log((double)s[r]);
    }
}

vn_tensor *vn_cross_entropy(const vn_tensor *logits, const vn_tensor *target,
                            vn_reduction reduction)
{
    if (check_class_args("cross_entropy", logits, "logits", target, reduction)) return NULL;
    if (vn__is_cuda(logits)) return cross_entropy_cuda(logits, target, reduction);
    int64_t N = logits->shape[0], C = logits->shape[1];
    vn_tensor *x = vn__plain_contiguous(logits);
    vn_tensor *lse = x ? vn__new(VN_F32, 1, &N) : NULL; /* per row: log Σ exp(x), as on CUDA */
    double *per = lse ? malloc(sizeof(double) * (size_t)(N ? N : 1)) : NULL;
    vn_tensor *out = NULL;
    if (per) {
        const float *px = vn_tensor_data(x);
        float *pl = vn_tensor_data(lse);
#pragma omp parallel for schedule(static) if (N * C > VN_OMP_MIN_WORK)
        for (int64_t n0 = 0; n0 < N; n0 += CE_ROWS) ce_rows(px, target, N, C, n0, pl, per);
        out = reduce_losses(per, N, reduction);
    } else if (lse) {
        vn__err(VN_ERR_MEMORY, "cross_entropy: out of memory");
    }
    free(per);
    vn_tensor_release(x);
    vn_node *node = out ? vn__record(out, "cross_entropy", cross_entropy_backward, 1, &logits) : NULL;
    if (node) {
        VN_SAVED_STATE(node, struct loss_saved)->reduction = reduction;
        node->saved[0] = vn_tensor_retain((vn_tensor *)target);
        node->saved[1] = vn_tensor_retain(lse);
    }
    vn_tensor_release(lse);
    return out;
}

/* d logp[n, target[n]] = −scale_n; zero elsewhere. */
static vn_status nll_backward(vn_node *node, const vn_tensor *gout)
{
    const vn_tensor *target = node->saved[0];
    int64_t N = node->inputs[0]->shape[0], C = node->inputs[0]->shape[1];
    float *scale = per_sample_scale(gout, N, VN_SAVED_STATE(node, struct loss_saved)->reduction);
    vn_tensor *dx = scale ? vn_zeros(VN_F32, 2, node->inputs[0]->shape) : NULL;
    if (dx) {
        float *pd = vn_tensor_data(dx);
        for (int64_t n = 0; n < N; n++) pd[n * C + target_at(target, n)] = -scale[n];
    }
    free(scale);
    return vn__accum(node, 0, dx);
}

vn_tensor *vn_nll_loss(const vn_tensor *logp, const vn_tensor *target, vn_reduction reduction)
{
    if (check_class_args("nll_loss", logp, "log-probabilities", target, reduction)) return NULL;
    if (vn__is_cuda(logp)) return nll_loss_cuda(logp, target, reduction);
    int64_t N = logp->shape[0];
    double *per = malloc(sizeof(double) * (size_t)(N ? N : 1));
    if (!per) return vn__errp(VN_ERR_MEMORY, "nll_loss: out of memory");
    const float *p = vn_tensor_data(logp);
    for (int64_t n = 0; n < N; n++)
        per[n] = -p[n * logp->strides[0] + target_at(target, n) * logp->strides[1]];
    vn_tensor *out = reduce_losses(per, N, reduction);
    free(per);
    vn_node *node = out ? vn__record(out, "nll_loss", nll_backward, 1, &logp) : NULL;
    if (node) {
        VN_SAVED_STATE(node, struct loss_saved)->reduction = reduction;
        node->saved[0] = vn_tensor_retain((vn_tensor *)target);
    }
    return out;
}

/* ---- mse_loss -------------------------------------------------------------- */

/* da = 2(a − b) · scale, db = −da, with scale 1/numel (mean), 1 (sum) or
 * the incoming gradient of each element (none). */
static vn_status mse_backward(vn_node *node, const vn_tensor *gout)
{
    vn_reduction r = VN_SAVED_STATE(node, struct loss_saved)->reduction;
    vn_tensor *a = vn__plain_contiguous(node->inputs[0]), *b = vn__plain_contiguous(node->inputs[1]);
    vn_tensor *g = a && b ? vn__plain_contiguous(gout) : NULL;
    vn_tensor *da = g ? vn__new(VN_F32, a->ndim, a->shape) : NULL;
    vn_status s = VN_ERR_MEMORY; /* unless all went well; the failed call set the message */
    if (da) {
        int64_t n = vn_tensor_numel(a);
        const float *pa = vn_tensor_data(a), *pb = vn_tensor_data(b), *pg = vn_tensor_data(g);
        float *pd = vn_tensor_data(da);
        if (r == VN_REDUCE_NONE) {
            for (int64_t i = 0; i < n; i++) pd[i] = 2 * (pa[i] - pb[i]) * pg[i];
        } else {
            float k = (float)(2.0 * pg[0] / (r == VN_REDUCE_MEAN ? (double)n : 1.0));
            for (int64_t i = 0; i < n; i++) pd[i] = k * (pa[i] - pb[i]);
        }
        s = vn__input_needs_grad(node, 1) ? vn__accum(node, 1, vn_neg(da)) : VN_OK;
        if (!s) s = vn__accum(node, 0, da); /* hands da over */
        else vn_tensor_release(da);
    }
    vn_tensor_release(a);
    vn_tensor_release(b);
    vn_tensor_release(g);
    return s;
}

vn_tensor *vn_mse_loss(const vn_tensor *a, const vn_tensor *b, vn_reduction reduction)
{
    if (vn__check_dtype_for(a, VN_F32, "mse_loss: argument 1", VN_ALLOW_CUDA) ||
        vn__check_dtype_for(b, VN_F32, "mse_loss: argument 2", VN_ALLOW_CUDA))
        return NULL;
    const vn_tensor *both[2] = {a, b};
    bool cuda;
    if (vn__same_device("mse_loss", 2, both, &cuda)) return NULL;
    if (!vn__same_shape(a, b))
        return vn__errp(VN_ERR_SHAPE, "mse_loss: shapes %s and %s differ; expected equal shapes",
                        vn__shape(a->ndim, a->shape), vn__shape(b->ndim, b->shape));
    if (!valid_reduction(reduction))
        return vn__errp(VN_ERR_ARG, "mse_loss: unknown reduction %d (expected mean, sum or none)",
                        (int)reduction);
    if (cuda) { /* composed of recorded ops, which give the gradient */
        vn_tensor *d = vn_sub(a, b), *sq = d ? vn_mul(d, d) : NULL;
        vn_tensor_release(d);
        return sq ? reduce_losses_cuda(sq, reduction) : NULL;
    }
    vn_tensor *ac = vn__plain_contiguous(a), *bc = ac ? vn__plain_contiguous(b) : NULL, *out = NULL;
    if (bc) {
        int64_t n = vn_tensor_numel(ac);
        const float *pa = vn_tensor_data(ac), *pb = vn_tensor_data(bc);
        if (reduction == VN_REDUCE_NONE) {
            out = vn__new(VN_F32, a->ndim, a->shape);
            float *po = out ? vn_tensor_data(out) : NULL;
            for (int64_t i = 0; po && i < n; i++) po[i] = (pa[i] - pb[i]) * (pa[i] - pb[i]);
        } else {
            double sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static) if (n > VN_OMP_MIN_WORK)
            for (int64_t i = 0; i < n; i++) {
                double d = (double)pa[i] - pb[i];
                sum += d * d;
            }
            out = vn__new(VN_F32, 0, NULL);
            if (out) *(float *)vn_tensor_data(out) = (float)(reduction == VN_REDUCE_MEAN ? sum / n : sum);
        }
    }
    vn_tensor_release(ac);
    vn_tensor_release(bc);
    if (out) {
        const vn_tensor *ins[2] = {a, b};
        vn_node *node = vn__record(out, "mse_loss", mse_backward, 2, ins);
        if (node) VN_SAVED_STATE(node, struct loss_saved)->reduction = reduction;
    }
    return out;
}
