/* rms_norm.c — RMSNorm (Zhang & Sennrich 2019), the norm of every BitNet
 * b1.58 layer (SubLN before each BitLinear, and the blocks' norms):
 *
 *   y = x / √(mean(x²) + ε) ⊙ w, per row (the last dim, D values).
 *
 * Where a gradient is wanted (training), and on CUDA, the op is composed
 * from the engine's public ops (x·x, mean, +ε, √, ÷, ⊙w), whose own nodes
 * carry the gradient: the numbers training computes stay those of the
 * composition nn.RMSNorm was written as (a fused backward rounds
 * differently, and 400 training steps turn that into a different model:
 * bench/RESULTS.md, issue 20, wt-g). Without a gradient (inference, evaluation) a
 * plain loop over rows gives the same bits in one call: at batch 1
 * (decoding) the six calls cost more than the layer's product, and a BitNet
 * GPT runs 13 of these norms per token. */
#include "quant_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* The composition, recorded by its ops. */
static vn_tensor *rms_norm_ops(const vn_tensor *x, const vn_tensor *w, double eps)
{
    vn_tensor *sq = vn_mul(x, x), *ms = sq ? vn_mean(sq, -1, true) : NULL;
    vn_tensor *e = ms ? vn_full_on(vn__is_cuda(x) ? VN_CUDA : VN_CPU, VN_F32, 0, NULL, eps) : NULL;
    vn_tensor *v = e ? vn_add(ms, e) : NULL, *d = v ? vn_sqrt(v) : NULL;
    vn_tensor *xn = d ? vn_div(x, d) : NULL, *y = xn ? vn_mul(xn, w) : NULL;
    vn_tensor *tmp[] = {sq, ms, e, v, d, xn};
    for (int i = 0; i < 6; i++) vn_tensor_release(tmp[i]);
    return y;
}

/* The divisor of one row of D values, rounded step by step as the
 * composition: x·x in f32, its mean as vn_mean sums a row (in double, a
 * simd reduction, times 1/D), + ε and √ in f32. Not inlined: one copy for
 * this op and the fused decoder's norms (engine/decode.c), so all give the
 * same bits. */
__attribute__((noinline)) static float rms_denominator(const float *x, int64_t D, double eps)
{
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < D; j++) {
        float sq = x[j] * x[j];
        s += sq;
    }
    return sqrtf((float)(s * (1.0 / (double)D)) + (float)eps);
}

/* y = x / d ⊙ w: the division, then the product, in f32. */
void vnq__rms_row(const float *x, const float *w, int64_t D, double eps, float *y)
{
    float d = rms_denominator(x, D, eps);
    for (int64_t j = 0; j < D; j++) y[j] = x[j] / d * w[j];
}

/* The quantiser's first pass (max |y|, and whether all are finite) rides
 * along with the norm's last; the sum of x̃ follows the int8 row. */
void vnq__rms_quantize_row(const float *x, const float *w, int64_t D, double eps, float *y, int64_t Kp,
                           vnq_rows *r)
{
    float d = rms_denominator(x, D, eps), m = 0;
    int finite = 1;
#pragma omp simd reduction(max : m) reduction(& : finite)
    for (int64_t j = 0; j < D; j++) {
        y[j] = x[j] / d * w[j];
        float a = fabsf(y[j]);
        m = a > m ? a : m; /* as vnq__quantize_row */
        finite &= a <= FLT_MAX;
    }
    r->s[0] = vnq__quantize_row_max(y, D, m, finite, r->q, NULL);
    memset(r->q + D, 0, (size_t)(Kp - D));
    int32_t sum = 0;
    for (int64_t j = 0; j < D; j++) sum += r->q[j];
    r->sum[0] = sum;
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
    if (cuda || vn__needs_grad(x) || vn__needs_grad(w)) return rms_norm_ops(x, w, eps);
    int64_t rows = vn_tensor_numel(x) / D;
    vn_tensor *xc = vn__plain_contiguous(x), *wc = xc ? vn__plain_contiguous(w) : NULL;
    vn_tensor *out = wc ? vn__new(VN_F32, x->ndim, x->shape) : NULL;
    if (out) {
        const float *px = vn_tensor_data(xc), *pw = vn_tensor_data(wc);
        float *po = vn_tensor_data(out);
        /* No OpenMP region for small inputs (a decoding step's row): even
         * `parallel if (false)` costs libgomp two futex system calls. */
        if (rows * D > VN_OMP_MIN_WORK) {
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < rows; i++) vnq__rms_row(px + i * D, pw, D, eps, po + i * D);
        } else {
            for (int64_t i = 0; i < rows; i++) vnq__rms_row(px + i * D, pw, D, eps, po + i * D);
        }
    }
    vn_tensor_release(xc);
    vn_tensor_release(wc);
    return out;
}
