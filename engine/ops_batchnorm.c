/* ops_batchnorm.c — batch normalisation (Ioffe & Szegedy, "Batch
 * Normalization: Accelerating Deep Network Training by Reducing Internal
 * Covariate Shift", 2015) over channel dim 1, with running statistics;
 * see venom/conv.h for the contract. CUDA tensors go to the kernels of
 * kernels/batchnorm.cu, which compute the same sums per channel in double.
 *
 * x is seen as (B, C, S): S = the product of the dims after the channel
 * (1 for (B, C)). Per channel c, over its n = B·S values:
 *   forward   x̂ = (x − μ)·r,  r = 1/√(σ² + eps),  y = x̂·γ + β
 *   backward  dβ = Σ dy,  dγ = Σ dy·x̂,  and with g = dy·γ
 *             training: dx = r·(g − mean(g) − x̂·mean(g·x̂))  (μ, σ² depend on x)
 *             eval:     dx = r·g                             (fixed statistics) */
#include "internal.h"

enum { BN_X, BN_W, BN_B };
enum { BN_MEAN, BN_RSTD }; /* saved: the μ and r used, (C) each */

struct bn_saved { bool training; };

/* Σ over the n values of channel c of f(k) where k is the flat index. */
#define BN_CHANNEL_LOOP(B, C, S, c, k, body)                                   \
    for (int64_t b_ = 0; b_ < (B); b_++)                                       \
        for (int64_t s_ = 0; s_ < (S); s_++) {                                 \
            int64_t k = (b_ * (C) + (c)) * (S) + s_;                           \
            body;                                                              \
        }

static vn_status bn_backward(vn_node *n, const vn_tensor *gout)
{
    bool training = VN_SAVED_STATE(n, struct bn_saved)->training;
    const vn_tensor *x = n->inputs[BN_X], *w = n->ninputs > BN_W ? n->inputs[BN_W] : NULL;
    int64_t B = x->shape[0], C = x->shape[1], S = vn__numel(x->ndim - 2, x->shape + 2);
    double cnt = (double)(B * S);
    bool need_x = vn__input_needs_grad(n, BN_X);
    bool need_w = w && vn__input_needs_grad(n, BN_W);
    bool need_b = n->ninputs > BN_B && n->inputs[BN_B] && vn__input_needs_grad(n, BN_B);
    vn_tensor *gc = vn__plain_contiguous(gout), *xc = gc ? vn__plain_contiguous(x) : NULL;
    vn_tensor *wc = xc && w ? vn__plain_contiguous(w) : NULL;
    vn_tensor *dx = xc && (wc || !w) && need_x ? vn__new_like(x, VN_F32, x->ndim, x->shape) : NULL;
    vn_tensor *dw = xc && (wc || !w) && need_w ? vn__new_like(x, VN_F32, 1, &C) : NULL;
    vn_tensor *db = xc && (wc || !w) && need_b ? vn__new_like(x, VN_F32, 1, &C) : NULL;
    vn_status st = VN_ERR_MEMORY;
    bool ready = xc && (wc || !w) && (!need_x || dx) && (!need_w || dw) && (!need_b || db);
    if (ready && vn__is_cuda(x)) {
        st = VN_OK;
        if (vnk_batch_norm_backward(dx ? vn__ptr(dx) : NULL, dw ? vn__ptr(dw) : NULL,
                                    db ? vn__ptr(db) : NULL, vn__ptr(gc), vn__ptr(xc),
                                    vn__ptr(n->saved[BN_MEAN]), vn__ptr(n->saved[BN_RSTD]),
                                    wc ? vn__ptr(wc) : NULL, B, C, S, training))
            st = vn__cuda_err("batch_norm");
        ready = false; /* done: skip the CPU loops */
        if (!st && dx) { st = vn__accum(n, BN_X, dx); dx = NULL; }
        if (!st && dw) { st = vn__accum(n, BN_W, dw); dw = NULL; }
        if (!st && db) { st = vn__accum(n, BN_B, db); db = NULL; }
    }
    if (ready) {
        const float *dy = vn_tensor_data(gc), *xs = vn_tensor_data(xc);
        const float *mu = vn_tensor_data(n->saved[BN_MEAN]), *rs = vn_tensor_data(n->saved[BN_RSTD]);
        const float *ga = wc ? vn_tensor_data(wc) : NULL;
#pragma omp parallel for if (B * C * S > VN_OMP_MIN_WORK)
        for (int64_t c = 0; c < C; c++) {
            double sdy = 0, sdyx = 0, m = mu[c], r = rs[c], gam = ga ? ga[c] : 1.0;
            BN_CHANNEL_LOOP(B, C, S, c, k, {
                sdy += dy[k];
                sdyx += dy[k] * (xs[k] - m) * r;
            });
            if (dw) ((float *)vn_tensor_data(dw))[c] = (float)sdyx;
            if (db) ((float *)vn_tensor_data(db))[c] = (float)sdy;
            if (!dx) continue;
            float *d = vn_tensor_data(dx);
            double mg = training ? gam * sdy / cnt : 0, mgx = training ? gam * sdyx / cnt : 0;
            BN_CHANNEL_LOOP(B, C, S, c, k, {
                double xh = (xs[k] - m) * r;
                d[k] = (float)(r * (gam * dy[k] - mg - xh * mgx));
            });
        }
        st = VN_OK;
        if (dx) { st = vn__accum(n, BN_X, dx); dx = NULL; }
        if (!st && dw) { st = vn__accum(n, BN_W, dw); dw = NULL; }
        if (!st && db) { st = vn__accum(n, BN_B, db); db = NULL; }
    }
    vn_tensor_release(gc);
    vn_tensor_release(xc);
    vn_tensor_release(wc);
    vn_tensor_release(dx);
    vn_tensor_release(dw);
    vn_tensor_release(db);
    return st;
}

/* A per-channel argument: NULL, or a usable f32 (C) tensor. */
static vn_status check_channel(const vn_tensor *t, const char *name, int64_t C)
{
    if (!t) return VN_OK;
    vn_status st = vn__check_dtype_arg(t, VN_F32, "batch_norm", name, VN_ALLOW_CUDA);
    if (st) return st;
    if (t->ndim != 1 || t->shape[0] != C)
        return vn__err(VN_ERR_SHAPE, "batch_norm: %s of shape %s, expected (%lld) (one value per "
                       "channel)", name, vn__shape(t->ndim, t->shape), (long long)C);
    return VN_OK;
}

static vn_status bn_check(const vn_tensor *x, const vn_tensor *weight, const vn_tensor *bias,
                          const vn_tensor *rm, const vn_tensor *rv, bool training,
                          double momentum, double eps)
{
    vn_status st = vn__check_dtype_arg(x, VN_F32, "batch_norm", "input", VN_ALLOW_CUDA);
    if (st) return st;
    if (x->ndim < 2)
        return vn__err(VN_ERR_SHAPE, "batch_norm: input of shape %s, expected (B, C) or (B, C, ...)",
                       vn__shape(x->ndim, x->shape));
    int64_t C = x->shape[1];
    if ((st = check_channel(weight, "weight", C)) || (st = check_channel(bias, "bias", C)) ||
        (st = check_channel(rm, "running_mean", C)) || (st = check_channel(rv, "running_var", C)))
        return st;
    const vn_tensor *ts[5] = {x, weight, bias, rm, rv};
    static const char *const names[5] = {"input", "weight", "bias", "running_mean", "running_var"};
    if ((st = vn__same_device_strict("batch_norm", 5, ts, names, NULL))) return st;
    if (!(eps > 0)) return vn__err(VN_ERR_ARG, "batch_norm: eps is %g, expected > 0", eps);
    if (!(momentum >= 0 && momentum <= 1))
        return vn__err(VN_ERR_ARG, "batch_norm: momentum is %g, expected a number in [0, 1]",
                       momentum);
    if (!rm != !rv)
        return vn__err(VN_ERR_ARG, "batch_norm: give both running_mean and running_var, or neither");
    if (!training && !rm)
        return vn__err(VN_ERR_ARG, "batch_norm: eval mode needs running_mean and running_var");
    if ((rm && vn_tensor_requires_grad(rm)) || (rv && vn_tensor_requires_grad(rv)))
        return vn__err(VN_ERR_ARG, "batch_norm: running_mean and running_var must not require grad");
    int64_t n = vn__numel(x->ndim, x->shape) / (C ? C : 1);
    if (training && C > 0 && n < 2)
        return vn__err(VN_ERR_SHAPE, "batch_norm: input of shape %s has %lld value per channel; "
                       "training needs more than 1", vn__shape(x->ndim, x->shape), (long long)n);
    return VN_OK;
}

vn_tensor *vn_batch_norm(const vn_tensor *x, const vn_tensor *weight, const vn_tensor *bias,
                         vn_tensor *running_mean, vn_tensor *running_var, bool training,
                         double momentum, double eps)
{
    if (bn_check(x, weight, bias, running_mean, running_var, training, momentum, eps)) return NULL;
    int64_t B = x->shape[0], C = x->shape[1], S = vn__numel(x->ndim - 2, x->shape + 2);
    double cnt = (double)(B * S);
    vn_tensor *xc = vn__plain_contiguous(x);
    vn_tensor *wc = xc && weight ? vn__plain_contiguous(weight) : NULL;
    vn_tensor *bc = xc && bias ? vn__plain_contiguous(bias) : NULL;
    vn_tensor *mean = (wc || !weight) && (bc || !bias) && xc ? vn__new_like(x, VN_F32, 1, &C) : NULL;
    vn_tensor *rstd = mean ? vn__new_like(x, VN_F32, 1, &C) : NULL;
    vn_tensor *out = rstd ? vn__new_like(x, VN_F32, x->ndim, x->shape) : NULL;
    if (out && vn__is_cuda(x)) {
        vn_tensor *rm = running_mean, *rv = running_var;
        if (vnk_batch_norm_stats(vn__ptr(mean), vn__ptr(rstd), rm ? vn__ptr(rm) : NULL,
                                 rm ? rm->strides[0] : 0, rv ? vn__ptr(rv) : NULL,
                                 rv ? rv->strides[0] : 0, vn__ptr(xc), B, C, S, training, momentum,
                                 eps) ||
            vnk_batch_norm_apply(vn__ptr(out), vn__ptr(xc), vn__ptr(mean), vn__ptr(rstd),
                                 wc ? vn__ptr(wc) : NULL, bc ? vn__ptr(bc) : NULL, B, C, S)) {
            vn__cuda_err("batch_norm");
            vn_tensor_release(out);
            out = NULL;
        } else if (training && rm) {
            vn__written(rm);
            vn__written(rv);
        }
    } else if (out) {
        const float *xs = vn_tensor_data(xc);
        const float *ga = wc ? vn_tensor_data(wc) : NULL, *be = bc ? vn_tensor_data(bc) : NULL;
        float *mu = vn_tensor_data(mean), *rs = vn_tensor_data(rstd), *y = vn_tensor_data(out);
        if (training) { /* two passes per channel: the mean, then the centred squares */
#pragma omp parallel for if (B * C * S > VN_OMP_MIN_WORK)
            for (int64_t c = 0; c < C; c++) {
                double s = 0, q = 0;
                BN_CHANNEL_LOOP(B, C, S, c, k, s += xs[k]);
                double m = s / cnt;
                BN_CHANNEL_LOOP(B, C, S, c, k, q += (xs[k] - m) * (xs[k] - m));
                mu[c] = (float)m;
                rs[c] = (float)(1 / sqrt(q / cnt + eps));
                if (running_mean) { /* checked contiguous-or-not: written through vn__store */
                    double rm = vn__load(running_mean, vn__offset_of(running_mean, c));
                    double rv = vn__load(running_var, vn__offset_of(running_var, c));
                    vn__store(running_mean, vn__offset_of(running_mean, c),
                              (1 - momentum) * rm + momentum * m);
                    vn__store(running_var, vn__offset_of(running_var, c),
                              (1 - momentum) * rv + momentum * q / (cnt - 1));
                }
            }
            if (running_mean) {
                vn__written(running_mean);
                vn__written(running_var);
            }
        } else {
            for (int64_t c = 0; c < C; c++) {
                mu[c] = (float)vn__load(running_mean, vn__offset_of(running_mean, c));
                double v = vn__load(running_var, vn__offset_of(running_var, c));
                rs[c] = (float)(1 / sqrt(v + eps));
            }
        }
#pragma omp parallel for if (B * C * S > VN_OMP_MIN_WORK)
        for (int64_t c = 0; c < C; c++) {
            float m = mu[c], r = rs[c], gam = ga ? ga[c] : 1.0f, bet = be ? be[c] : 0.0f;
            BN_CHANNEL_LOOP(B, C, S, c, k, y[k] = (xs[k] - m) * r * gam + bet);
        }
    }
    if (out) {
        const vn_tensor *in[3] = {x, weight, bias};
        /* bias without weight: the node's input slots stay in order (weight NULL) */
        vn_node *n = vn__record(out, "batch_norm", bn_backward, bias ? 3 : weight ? 2 : 1, in);
        if (n) {
            VN_SAVED_STATE(n, struct bn_saved)->training = training;
            n->saved[BN_MEAN] = mean;
            n->saved[BN_RSTD] = rstd;
            mean = rstd = NULL;
        }
    }
    vn_tensor_release(xc);
    vn_tensor_release(wc);
    vn_tensor_release(bc);
    vn_tensor_release(mean);
    vn_tensor_release(rstd);
    return out;
}
