/* bitlinear.c — the BitNet b1.58 quantisers and the BitLinear op
 * Y = Q(X)·Q(W)ᵀ with its straight-through backward (formulas in
 * venom/quant.h). The forward quantises W once (γ·W̃, kept for the
 * backward's dX) and X once (x̃/s, kept for dW), then multiplies them with
 * the f32 GEMM: training keeps latent f32 weights, so the integer kernels
 * of ternary.c serve inference only. The quantisers are plain loops on the
 * CPU and the same formulas built from the engine's public ops on CUDA
 * tensors (elementwise ops and reductions there, then cuBLAS). */
#include "quant_internal.h"

#include <float.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

float vnq__gamma(const float *w, int64_t n, int64_t count)
{
    double sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static) if (n > VN_OMP_MIN_WORK)
    for (int64_t i = 0; i < n; i++) sum += fabsf(w[i]);
    return count ? (float)(sum / (double)count) : 0.0f;
}

float vnq__quantize_row(const float *x, int64_t K, int8_t *q, float *xq)
{
    float m = 0;
    int finite = 1;
    /* A max is exact in any order, so the loop may run in vector lanes (at
     * batch 1 this row is quantised before every packed product). */
#pragma omp simd reduction(max : m) reduction(& : finite)
    for (int64_t k = 0; k < K; k++) {
        float a = fabsf(x[k]);
        m = a > m ? a : m; /* not fmaxf: a libm call per element; a NaN is caught below */
        finite &= a <= FLT_MAX; /* false for NaN too */
    }
    return vnq__quantize_row_max(x, K, m, finite, q, xq);
}

float vnq__quantize_row_max(const float *x, int64_t K, float m, int finite, int8_t *q, float *xq)
{
    /* A row with a NaN or ∞ has no meaningful scale: s = NaN, so the row's
     * output is NaN and the bad value shows (int8 cannot hold it). */
    if (!finite) {
        for (int64_t k = 0; k < K; k++) {
            if (q) q[k] = 0;
            if (xq) xq[k] = NAN;
        }
        return NAN;
    }
    /* An all-zero row has no scale (127/0), nor has one too small for a
     * finite 127/max: it quantises to zeros (outputs 0). */
    float s = m >= VNQ_MIN_ROW_MAX ? 127.0f / m : 0.0f;
    if (q && !xq) { /* the packed products' case */
        int64_t k = 0;
#ifdef __AVX2__
        /* 32 at a time: cvtps rounds to nearest even (as nearbyintf in the
         * default mode) and the saturating packs are the clamp (|x·s| ≤ 127
         * up to rounding here: no value near int32's range); the packs
         * interleave 128-bit halves, which the permute puts back in order.
         * GCC's vectorisation of the loop below took 3× longer. */
        const __m256 vs = _mm256_set1_ps(s);
        const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for (; k + 32 <= K; k += 32) {
            __m256i i[4];
            for (int j = 0; j < 4; j++) i[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * j), vs));
            __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
            _mm256_storeu_si256((__m256i *)(void *)(q + k), _mm256_permutevar8x32_epi32(b, order));
        }
#endif
        for (; k < K; k++) {
            float r = nearbyintf(x[k] * s);
            q[k] = (int8_t)(r > 127.0f ? 127.0f : r < -128.0f ? -128.0f : r);
        }
        return s;
    }
    for (int64_t k = 0; k < K; k++) {
        float r = nearbyintf(x[k] * s);
        r = r > 127.0f ? 127.0f : r < -128.0f ? -128.0f : r;
        if (q) q[k] = (int8_t)r;
        if (xq) xq[k] = s > 0 ? r / s : 0.0f;
    }
    return s;
}

/* w f32 (N, K), N, K ≥ 1; on the CPU unless allow has VN_ALLOW_CUDA. */
static vn_status check_weight(const vn_tensor *w, const char *op, unsigned allow)
{
    vn_status st = vn__check_dtype_arg(w, VN_F32, op, "weight", allow);
    if (st) return st;
    if (w->ndim != 2 || w->shape[0] < 1 || w->shape[1] < 1)
        return vn__err(VN_ERR_SHAPE, "%s: weight must be a non-empty 2-D (out, in) matrix, found %s",
                       op, vn__shape(w->ndim, w->shape));
    return VN_OK;
}

/* x f32 (..., K) for a valid w (N, K), on w's device; *B = rows of x. */
static vn_status check_input(const vn_tensor *x, const vn_tensor *w, const char *op, int64_t *B)
{
    vn_status st = vn__check_dtype_arg(x, VN_F32, op, "input", VN_ALLOW_CUDA);
    if (st) return st;
    if (x->ndim == 0 || x->shape[x->ndim - 1] != w->shape[1])
        return vn__err(VN_ERR_SHAPE, "%s: input %s and weight %s: expected the input's last dim "
                       "to be the weight's in features (%lld)", op, vn__shape(x->ndim, x->shape),
                       vn__shape(2, w->shape), (long long)w->shape[1]);
    *B = vn_tensor_numel(x) / w->shape[1];
    const vn_tensor *ts[2] = {x, w};
    return vn__same_device_strict(op, 2, ts, (const char *const[]){"input", "weight"}, NULL);
}

/* γ·W̃ of w (any shape) with γ = Σ|w| / count. */
static vn_tensor *quantize_weight(const vn_tensor *w, int64_t count, float *gamma)
{
    vn_tensor *wc = vn__plain_contiguous(w);
    vn_tensor *wq = wc ? vn__new(VN_F32, w->ndim, w->shape) : NULL;
    if (wq) {
        const float *src = vn_tensor_data(wc);
        float *dst = vn_tensor_data(wq);
        int64_t n = vn_tensor_numel(w);
        float g = vnq__gamma(src, n, count);
#pragma omp parallel for schedule(static) if (n > VN_OMP_MIN_WORK)
        for (int64_t i = 0; i < n; i++) dst[i] = g * vnq__trit(src[i], g);
        if (gamma) *gamma = g;
    }
    vn_tensor_release(wc);
    return wq;
}

vn_tensor *vn_ternary_quantize(const vn_tensor *w, float *gamma)
{
    if (check_weight(w, "ternary_quantize", 0)) return NULL;
    return quantize_weight(w, vn_tensor_numel(w), gamma);
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

/* ---- the quantisers from public ops (the CUDA path) ------------------------ */

/* A 0-d f32 tensor holding v on t's device. */
static vn_tensor *scalar_on(const vn_tensor *t, double v)
{
    return vn_full_on(vn__is_cuda(t) ? VN_CUDA : VN_CPU, VN_F32, 0, NULL, v);
}

/* Round half to even of every element of t, |t| < 2²²: after adding
 * 1.5·2²³ no fraction bits are left, and f32 addition rounds to even; taking
 * it back is exact. (Two ops, so no compiler may fold them.) */
static vn_tensor *round_even(const vn_tensor *t)
{
    vn_tensor *c = scalar_on(t, 12582912.0);
    vn_tensor *up = c ? vn_add(t, c) : NULL;
    vn_tensor *r = up ? vn_sub(up, c) : NULL;
    vn_tensor_release(c);
    vn_tensor_release(up);
    return r;
}

vn_tensor *vnq__quantize_weight_ops(const vn_tensor *w, int64_t count)
{
    vn_tensor *a = vn_abs(w);
    vn_tensor *sum = a ? vn_sum_all(a) : NULL;
    vn_tensor *cnt = sum ? scalar_on(w, (double)count) : NULL;
    /* count = 0 only for an empty w, whose output is empty too */
    vn_tensor *g = cnt ? vn_div(sum, count ? cnt : sum) : NULL;
    vn_tensor *eps = g ? scalar_on(w, VNQ_EPS) : NULL;
    vn_tensor *ge = eps ? vn_add(g, eps) : NULL;
    vn_tensor *r = ge ? vn_div(w, ge) : NULL;
    /* Clamped to ±2 before the rounding (which needs small values): the
     * final clamp to ±1 gives the same W̃. */
    vn_tensor *rc = r ? vn_clamp(r, -2, 2) : NULL;
    vn_tensor *rr = rc ? round_even(rc) : NULL;
    vn_tensor *t = rr ? vn_clamp(rr, -1, 1) : NULL;
    vn_tensor *wq = t ? vn_mul(t, g) : NULL;
    vn_tensor *tmp[] = {a, sum, cnt, g, eps, ge, r, rc, rr, t};
    for (int i = 0; i < 10; i++) vn_tensor_release(tmp[i]);
    return wq;
}

vn_tensor *vnq__quantize_input_ops(const vn_tensor *x)
{
    vn_tensor *a = vn_abs(x);
    vn_tensor *m = a ? vn_max(a, -1, true) : NULL;
    vn_tensor *least = m ? scalar_on(x, VNQ_MIN_ROW_MAX) : NULL, *one = least ? scalar_on(x, 1) : NULL;
    vn_tensor *pos = one ? vn_ge(m, least) : NULL;
    /* A zero row, or one too small for a finite 127/max, divides by 1
     * instead: its x̃ and x̃/s are 0 all the same. */
    vn_tensor *ms = pos ? vn_where(pos, m, one) : NULL;
    vn_tensor *c127 = ms ? scalar_on(x, 127) : NULL;
    vn_tensor *s = c127 ? vn_div(c127, ms) : NULL;
    vn_tensor *xs = s ? vn_mul(x, s) : NULL;
    /* |x·s| ≤ 127: round_even applies, and the clamp to [−128, 127] has
     * nothing to do. */
    vn_tensor *r = xs ? round_even(xs) : NULL;
    vn_tensor *xq = r ? vn_div(r, s) : NULL;
    vn_tensor *tmp[] = {a, m, least, one, pos, ms, c127, s, xs, r};
    for (int i = 0; i < 10; i++) vn_tensor_release(tmp[i]);
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
    if (check_weight(w, "bitlinear", VN_ALLOW_CUDA) || check_input(x, w, "bitlinear", &B)) return NULL;
    bool cuda = vn__is_cuda(w), was = vn_set_grad_enabled(false);
    int64_t n = vn_tensor_numel(w);
    vn_tensor *wq = cuda ? vnq__quantize_weight_ops(w, n) : quantize_weight(w, n, NULL);
    vn_tensor *xq = !wq ? NULL : cuda ? vnq__quantize_input_ops(x) : quantize_input(x, B, w->shape[1]);
    vn_tensor *y = xq ? vn_linear(xq, wq, NULL) : NULL;
    vn_set_grad_enabled(was);
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

/* ---- fake quantisation: the quantisers alone, with the STE ------------------ */

/* Node: input t; the STE passes dL/d(output) through unchanged. */
static vn_status fake_quant_backward(vn_node *node, const vn_tensor *gout)
{
    return vn__accum(node, 0, vn_tensor_retain((vn_tensor *)gout));
}

static vn_tensor *record_fake_quant(vn_tensor *y, const vn_tensor *t, const char *name)
{
    if (y) vn__record(y, name, fake_quant_backward, 1, (const vn_tensor *[]){t});
    return y;
}

vn_tensor *vn_ternary_fake_quant(const vn_tensor *w, int64_t count)
{
    const char *op = "ternary_fake_quant";
    if (vn__check_dtype_arg(w, VN_F32, op, "weight", VN_ALLOW_CUDA)) return NULL;
    int64_t n = vn_tensor_numel(w);
    if (n == 0 || count < 1 || count > n)
        return vn__errp(n ? VN_ERR_ARG : VN_ERR_SHAPE, "%s: weight %s and count = %lld: expected a "
                        "non-empty weight and 1 ≤ count ≤ its %lld elements", op,
                        vn__shape(w->ndim, w->shape), (long long)count, (long long)n);
    bool was = vn_set_grad_enabled(false);
    vn_tensor *y = vn__is_cuda(w) ? vnq__quantize_weight_ops(w, count) : quantize_weight(w, count, NULL);
    vn_set_grad_enabled(was);
    return record_fake_quant(y, w, op);
}

vn_tensor *vn_int8_fake_quant(const vn_tensor *x)
{
    const char *op = "int8_fake_quant";
    if (vn__check_dtype_arg(x, VN_F32, op, "input", VN_ALLOW_CUDA)) return NULL;
    if (x->ndim == 0 || x->shape[x->ndim - 1] == 0)
        return vn__errp(VN_ERR_SHAPE, "%s: input %s, expected (..., K) with K ≥ 1", op,
                        vn__shape(x->ndim, x->shape));
    int64_t K = x->shape[x->ndim - 1];
    bool was = vn_set_grad_enabled(false);
    vn_tensor *y = vn__is_cuda(x) ? vnq__quantize_input_ops(x) : quantize_input(x, vn_tensor_numel(x) / K, K);
    vn_set_grad_enabled(was);
    return record_fake_quant(y, x, op);
}
