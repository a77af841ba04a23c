/* rms_norm.c — RMSNorm (Zhang & Sennrich 2019) as one op: the norm of
 * every BitNet b1.58 layer (SubLN before each BitLinear, and the blocks'
 * norms), which nn.RMSNorm used to build from six elementwise ops and a
 * reduction; at batch 1 (decoding) those calls cost more than the layer's
 * product. Forward and backward are plain loops over rows on the CPU; on
 * CUDA the op is composed from the engine's public ops, whose own nodes
 * then carry the gradient.
 *
 *   y = x / √(mean(x²) + ε) ⊙ w, per row (the last dim, D values);
 *   with r = 1/√(mean(x²) + ε), x̂ = x·r and ĝ = g ⊙ w:
 *   dx = r · (ĝ − x̂ · mean(ĝ ⊙ x̂)),   dw = Σ_rows g ⊙ x̂. */
#include "quant_internal.h"

#include <math.h>

/* Saved: r per row, (rows). */
static vn_status rms_norm_backward(vn_node *node, const vn_tensor *gout)
{
    const vn_tensor *xin = node->inputs[0];
    int64_t D = xin->shape[xin->ndim - 1], rows = vn_tensor_numel(xin) / D;
    bool want_x = vn__input_needs_grad(node, 0), want_w = vn__input_needs_grad(node, 1);
    vn_tensor *x = vn__plain_contiguous(xin), *g = x ? vn__plain_contiguous(gout) : NULL;
    vn_tensor *w = g ? vn__plain_contiguous(node->inputs[1]) : NULL;
    vn_tensor *dx = w && want_x ? vn__new(VN_F32, xin->ndim, xin->shape) : NULL;
    vn_tensor *dw = w && want_w ? vn__new(VN_F32, 1, &D) : NULL;
    bool ok = w && (!want_x || dx) && (!want_w || dw);
    if (ok) {
        const float *px = vn_tensor_data(x), *pg = vn_tensor_data(g), *pw = vn_tensor_data(w),
                    *r = vn_tensor_data(node->saved[0]);
        if (dx) {
            float *pdx = vn_tensor_data(dx);
#pragma omp parallel for schedule(static) if (rows * D > VN_OMP_MIN_WORK)
            for (int64_t i = 0; i < rows; i++) {
                const float *xr = px + i * D, *gr = pg + i * D;
                double s = 0; /* Σ ĝ ⊙ x̂ */
                for (int64_t j = 0; j < D; j++) s += (double)(gr[j] * pw[j]) * (xr[j] * r[i]);
                float m = (float)(s / (double)D);
                for (int64_t j = 0; j < D; j++)
                    pdx[i * D + j] = r[i] * (gr[j] * pw[j] - xr[j] * r[i] * m);
            }
        }
        if (dw) { /* column by column: each thread owns its columns, no partial sums */
            float *pdw = vn_tensor_data(dw);
#pragma omp parallel for schedule(static) if (rows * D > VN_OMP_MIN_WORK)
            for (int64_t j = 0; j < D; j++) {
                double s = 0;
                for (int64_t i = 0; i < rows; i++) s += (double)pg[i * D + j] * (px[i * D + j] * r[i]);
                pdw[j] = (float)s;
            }
        }
    }
    vn_tensor_release(x);
    vn_tensor_release(g);
    vn_tensor_release(w);
    if (!ok) {
        vn_tensor_release(dx);
        vn_tensor_release(dw);
        return vn__err(VN_ERR_MEMORY, "rms_norm backward: %s", vn_last_error());
    }
    return vn__accum_all(node, 2, (vn_tensor *[]){dx, dw});
}

/* CUDA: the same formula from public ops (recorded by them). */
static vn_tensor *rms_norm_ops(const vn_tensor *x, const vn_tensor *w, double eps)
{
    vn_tensor *sq = vn_mul(x, x), *ms = sq ? vn_mean(sq, -1, true) : NULL;
    vn_tensor *e = ms ? vn_full_on(VN_CUDA, VN_F32, 0, NULL, eps) : NULL;
    vn_tensor *v = e ? vn_add(ms, e) : NULL, *d = v ? vn_sqrt(v) : NULL;
    vn_tensor *xn = d ? vn_div(x, d) : NULL, *y = xn ? vn_mul(xn, w) : NULL;
    vn_tensor *tmp[] = {sq, ms, e, v, d, xn};
    for (int i = 0; i < 6; i++) vn_tensor_release(tmp[i]);
    return y;
}

/* One row of D values: y = x / √(mean(x²) + ε) ⊙ w, and r = 1/√(...). */
static void rms_row(const float *x, const float *w, int64_t D, double eps, float *y, float *r)
{
    double s = 0;
    for (int64_t j = 0; j < D; j++) s += (double)x[j] * x[j];
    float d = sqrtf((float)(s / (double)D) + (float)eps);
    *r = 1.0f / d;
    for (int64_t j = 0; j < D; j++) y[j] = x[j] / d * w[j];
}

vn_tensor *vn_rms_norm(const vn_tensor *x, const vn_tensor *w, double eps)
{
    const char *op = "rms_norm";
    if (vn__check_dtype_arg(x, VN_F32, op, "input", VN_ALLOW_CUDA) ||
        vn__check_dtype_arg(w, VN_F32, op, "weight", VN_ALLOW_CUDA))
        return NULL;
    int64_t D = x->ndim ? x->shape[x->ndim - 1] : 0;
    if (D == 0)
        return vn__errp(VN_ERR_SHAPE, "%s: input must have a non-empty last dim, found %s", op,
                        vn__shape(x->ndim, x->shape));
    if (w->ndim != 1 || w->shape[0] != D)
        return vn__errp(VN_ERR_SHAPE, "%s: weight %s does not match input %s: expected %s", op,
                        vn__shape(w->ndim, w->shape), vn__shape(x->ndim, x->shape), vn__shape(1, &D));
    if (!(eps > 0) || !isfinite(eps))
        return vn__errp(VN_ERR_ARG, "%s: eps must be positive and finite, found %g", op, eps);
    bool cuda;
    if (vn__same_device_strict(op, 2, (const vn_tensor *[]){x, w}, (const char *[]){"input", "weight"},
                               &cuda))
        return NULL;
    if (cuda) return rms_norm_ops(x, w, eps);
    int64_t rows = vn_tensor_numel(x) / D;
    vn_tensor *xc = vn__plain_contiguous(x), *wc = xc ? vn__plain_contiguous(w) : NULL;
    vn_tensor *r = wc ? vn__new(VN_F32, 1, &rows) : NULL;
    vn_tensor *out = r ? vn__new(VN_F32, x->ndim, x->shape) : NULL;
    if (out) {
        const float *px = vn_tensor_data(xc), *pw = vn_tensor_data(wc);
        float *po = vn_tensor_data(out), *pr = vn_tensor_data(r);
        /* No OpenMP region for small inputs (a decoding step's row): even
         * `parallel if (false)` costs libgomp two futex system calls. */
        if (rows * D > VN_OMP_MIN_WORK) {
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < rows; i++) rms_row(px + i * D, pw, D, eps, po + i * D, pr + i);
        } else {
            for (int64_t i = 0; i < rows; i++) rms_row(px + i * D, pw, D, eps, po + i * D, pr + i);
        }
    }
    vn_tensor_release(xc);
    vn_tensor_release(wc);
    vn_node *node = out ? vn__record(out, op, rms_norm_backward, 2, (const vn_tensor *[]){x, w}) : NULL;
    if (node) node->saved[0] = vn_tensor_retain(r);
    vn_tensor_release(r);
    return out;
}
