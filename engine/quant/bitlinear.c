/* bitlinear.c — the BitNet b1.58 quantisers and the BitLinear op
 * Y = Q(X)·Q(W)ᵀ with its straight-through backward (formulas in
 * venom/quant.h). The forward quantises W once (γ·W̃, kept for the
 * backward's dX) and X once (x̃/s, kept for dW), then multiplies them with
 * the f32 GEMM: training keeps latent f32 weights, so the integer kernels
 * of ternary.c serve inference only. */
#include "quant_internal.h"

float vnq__gamma(const float *w, int64_t n)
{
    double sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static) if (n > VN_OMP_MIN_WORK)
    for (int64_t i = 0; i < n; i++) sum += fabsf(w[i]);
    return n ? (float)(sum / (double)n) : 0.0f;
}

float vnq__quantize_row(const float *x, int64_t K, int8_t *q, float *xq)
{
    float m = 0;
    for (int64_t k = 0; k < K; k++) m = fmaxf(m, fabsf(x[k]));
    /* An all-zero row has no scale (127/0): it quantises to zeros. A row
     * with a NaN or ∞ keeps it, so the bad value shows in the output. */
    float s = m > 0 ? 127.0f / m : 0.0f;
    for (int64_t k = 0; k < K; k++) {
        float r = nearbyintf(x[k] * s);
        r = r > 127.0f ? 127.0f : r < -128.0f ? -128.0f : r;
        if (q) q[k] = (int8_t)r;
        if (xq) xq[k] = s > 0 ? r / s : 0.0f;
    }
    return s;
}

/* w f32 (N, K) on the CPU, N, K ≥ 1. */
static vn_status check_weight(const vn_tensor *w, const char *op)
{
    vn_status st = vn__check_dtype_arg(w, VN_F32, op, "weight", 0);
    if (st) return st;
    if (w->ndim != 2 || w->shape[0] < 1 || w->shape[1] < 1)
        return vn__err(VN_ERR_SHAPE, "%s: weight must be a non-empty 2-D (out, in) matrix, found %s",
                       op, vn__shape(w->ndim, w->shape));
    return VN_OK;
}

/* x f32 (..., K) on the CPU for a valid w (N, K); *B = rows of x. */
static vn_status check_input(const vn_tensor *x, const vn_tensor *w, const char *op, int64_t *B)
{
    vn_status st = vn__check_dtype_arg(x, VN_F32, op, "input", 0);
    if (st) return st;
    if (x->ndim == 0 || x->shape[x->ndim - 1] != w->shape[1])
        return vn__err(VN_ERR_SHAPE, "%s: input %s and weight %s: expected the input's last dim "
                       "to be the weight's in features (%lld)", op, vn__shape(x->ndim, x->shape),
                       vn__shape(2, w->shape), (long long)w->shape[1]);
    *B = vn_tensor_numel(x) / w->shape[1];
    return VN_OK;
}

static vn_tensor *quantize_weight(const vn_tensor *w, float *gamma)
{
    vn_tensor *wc = vn__plain_contiguous(w);
    vn_tensor *wq = wc ? vn__new(VN_F32, 2, w->shape) : NULL;
    if (wq) {
        const float *src = vn_tensor_data(wc);
        float *dst = vn_tensor_data(wq);
        int64_t n = vn_tensor_numel(w);
        float g = vnq__gamma(src, n);
#pragma omp parallel for schedule(static) if (n > VN_OMP_MIN_WORK)
        for (int64_t i = 0; i < n; i++) dst[i] = g * vnq__trit(src[i], g);
        if (gamma) *gamma = g;
    }
    vn_tensor_release(wc);
    return wq;
}

vn_tensor *vn_ternary_quantize(const vn_tensor *w, float *gamma)
{
    if (check_weight(w, "ternary_quantize")) return NULL;
    return quantize_weight(w, gamma);
}

/* x̃/s for every row of x, shaped like x. */
static vn_tensor *quantize_input(const vn_tensor *x, int64_t B, int64_t K)
{
    vn_tensor *xc = vn__plain_contiguous(x);
    vn_tensor *xq = xc ? vn__new(VN_F32, x->ndim, x->shape) : NULL;
    if (xq) {
        const float *src = vn_tensor_data(xc);
        float *dst = vn_tensor_data(xq);
#pragma omp parallel for schedule(static) if (B * K > VN_OMP_MIN_WORK)
        for (int64_t b = 0; b < B; b++) vnq__quantize_row(src + b * K, K, NULL, dst + b * K);
    }
    vn_tensor_release(xc);
    return xq;
}

/* Node: inputs x, w; saved γW̃ (N, K) and x̃/s (shaped like x). */
enum { SAVED_WQ, SAVED_XQ };

/* The STE: each quantiser's derivative is taken as the identity, so the
 * gradients are those of the product of the quantised operands. */
static vn_status bitlinear_backward(vn_node *node, const vn_tensor *gout)
{
    const vn_tensor *wq = node->saved[SAVED_WQ], *xq = node->saved[SAVED_XQ];
    vn_status s = VN_OK;
    if (vn__input_needs_grad(node, 0)) s = vn__accum(node, 0, vn_matmul(gout, wq));
    if (!s && vn__input_needs_grad(node, 1)) {
        int64_t N = wq->shape[0], K = wq->shape[1], B = vn_tensor_numel(xq) / K;
        vn_tensor *g2 = vn_reshape(gout, 2, (int64_t[]){B, N});
        vn_tensor *gt = g2 ? vn_transpose(g2, 0, 1) : NULL;
        vn_tensor *x2 = gt ? vn_reshape(xq, 2, (int64_t[]){B, K}) : NULL;
        s = vn__accum(node, 1, x2 ? vn_matmul(gt, x2) : NULL);
        vn_tensor_release(g2);
        vn_tensor_release(gt);
        vn_tensor_release(x2);
    }
    return s;
}

vn_tensor *vn_bitlinear(const vn_tensor *x, const vn_tensor *w)
{
    int64_t B = 0;
    if (check_weight(w, "bitlinear") || check_input(x, w, "bitlinear", &B)) return NULL;
    vn_tensor *wq = quantize_weight(w, NULL);
    vn_tensor *xq = wq ? quantize_input(x, B, w->shape[1]) : NULL;
    vn_tensor *y = NULL;
    if (xq) {
        bool was = vn_set_grad_enabled(false);
        y = vn_linear(xq, wq, NULL);
        vn_set_grad_enabled(was);
    }
    if (y) {
        const vn_tensor *ins[2] = {x, w};
        vn_node *node = vn__record(y, "bitlinear", bitlinear_backward, 2, ins);
        if (node) {
            node->saved[SAVED_WQ] = vn_tensor_retain(wq);
            node->saved[SAVED_XQ] = vn_tensor_retain(xq);
        }
    }
    vn_tensor_release(wq);
    vn_tensor_release(xq);
    return y;
}
