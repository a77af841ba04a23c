/* ops_conv.c — 2-d convolution as im2col + OpenBLAS sgemm (groups,
 * stride, padding, dilation), im2col as an op of its own (the V:N:M sparse
 * convolution multiplies its output), and the window geometry the pooling
 * ops share. CPU only. See venom/conv.h for the formulas. */
#include "conv_internal.h"

#include <cblas.h>
#include <limits.h>

/* ---- geometry ------------------------------------------------------------------- */

static vn_status check_pair(const char *op, const char *name, const int64_t v[2], int64_t min)
{
    if (!v) return vn__err(VN_ERR_ARG, "%s: %s is NULL, expected a {height, width} pair", op, name);
    if (v[0] < min || v[1] < min || v[0] > INT_MAX || v[1] > INT_MAX)
        return vn__err(VN_ERR_ARG, "%s: %s is (%lld, %lld), expected values >= %lld", op, name,
                       (long long)v[0], (long long)v[1], (long long)min);
    return VN_OK;
}

vn_status conv__geom(const char *op, const vn_tensor *x, const int64_t kernel[2],
                     const int64_t stride[2], const int64_t padding[2],
                     const int64_t dilation[2], conv_geom *g)
{
    static const int64_t one[2] = {1, 1};
    if (!dilation) dilation = one;
    vn_status st = vn__check_dtype_arg(x, VN_F32, op, "input", 0);
    if (!st) st = check_pair(op, "kernel size", kernel, 1);
    if (!st) st = check_pair(op, "stride", stride, 1);
    if (!st) st = check_pair(op, "padding", padding, 0);
    if (!st) st = check_pair(op, "dilation", dilation, 1);
    if (st) return st;
    if (x->ndim != 4)
        return vn__err(VN_ERR_SHAPE, "%s: input of shape %s, expected 4-d (B, C, H, W)", op,
                       vn__shape(x->ndim, x->shape));
    *g = (conv_geom){x->shape[0], x->shape[1], x->shape[2], x->shape[3], kernel[0], kernel[1],
                     stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1], 0, 0};
    int64_t eh = g->dh * (g->kh - 1) + 1, ew = g->dw * (g->kw - 1) + 1; /* dilated extent */
    int64_t ih = g->H + 2 * g->ph, iw = g->W + 2 * g->pw;
    if (g->C < 1 || eh > ih || ew > iw)
        return vn__err(VN_ERR_SHAPE, "%s: a %lld×%lld kernel (dilation %lld×%lld) does not fit "
                       "in the input of shape %s padded by (%lld, %lld) to %lld×%lld", op,
                       (long long)g->kh, (long long)g->kw, (long long)g->dh, (long long)g->dw,
                       vn__shape(x->ndim, x->shape), (long long)g->ph, (long long)g->pw,
                       (long long)ih, (long long)iw);
    g->Ho = (ih - eh) / g->sh + 1;
    g->Wo = (iw - ew) / g->sw + 1;
    if (g->Ho * g->Wo > INT_MAX || g->C * g->kh * g->kw > INT_MAX)
        return vn__err(VN_ERR_SHAPE, "%s: %lld output positions of %lld values each; BLAS takes "
                       "at most %d", op, (long long)(g->Ho * g->Wo),
                       (long long)(g->C * g->kh * g->kw), INT_MAX);
    return VN_OK;
}

/* ---- im2col / col2im: one image ------------------------------------------------- */

/* cols (Ho·Wo, C·kh·kw) = the receptive fields of x (C, H, W), zeros in the padding. */
static void im2col(const conv_geom *g, const float *x, float *cols)
{
    int64_t L = g->Ho * g->Wo, K = g->C * g->kh * g->kw;
#pragma omp parallel for if (L * K > VN_OMP_MIN_WORK)
    for (int64_t l = 0; l < L; l++) {
        int64_t y0 = (l / g->Wo) * g->sh - g->ph, x0 = (l % g->Wo) * g->sw - g->pw;
        float *row = cols + l * K;
        for (int64_t c = 0; c < g->C; c++)
            for (int64_t p = 0; p < g->kh; p++) {
                int64_t iy = y0 + p * g->dh;
                const float *src = x + (c * g->H + iy) * g->W;
                bool in = iy >= 0 && iy < g->H;
                for (int64_t q = 0; q < g->kw; q++) {
                    int64_t ix = x0 + q * g->dw;
                    *row++ = in && ix >= 0 && ix < g->W ? src[ix] : 0.0f;
                }
            }
    }
}

/* dx (C, H, W) += the receptive fields in cols summed back into place. Each
 * channel is one thread's, so the sums are deterministic. */
static void col2im(const conv_geom *g, const float *cols, float *dx)
{
    int64_t L = g->Ho * g->Wo, K = g->C * g->kh * g->kw;
#pragma omp parallel for if (L * K > VN_OMP_MIN_WORK)
    for (int64_t c = 0; c < g->C; c++)
        for (int64_t l = 0; l < L; l++) {
            int64_t y0 = (l / g->Wo) * g->sh - g->ph, x0 = (l % g->Wo) * g->sw - g->pw;
            const float *row = cols + l * K + c * g->kh * g->kw;
            for (int64_t p = 0; p < g->kh; p++) {
                int64_t iy = y0 + p * g->dh;
                if (iy < 0 || iy >= g->H) continue;
                float *dst = dx + (c * g->H + iy) * g->W;
                for (int64_t q = 0; q < g->kw; q++) {
                    int64_t ix = x0 + q * g->dw;
                    if (ix >= 0 && ix < g->W) dst[ix] += row[p * g->kw + q];
                }
            }
        }
}

static vn_tensor *zeros_like_shape(const vn_tensor *t)
{
    vn_tensor *z = vn__new(VN_F32, t->ndim, t->shape);
    if (z) memset(vn_tensor_data(z), 0, sizeof(float) * (size_t)vn__numel(t->ndim, t->shape));
    return z;
}

/* ---- conv2d --------------------------------------------------------------------- */

struct conv_saved { int64_t stride[2], padding[2], dilation[2], groups; };

enum { CONV_X, CONV_W, CONV_B };

/* The geometry of x convolved with w (C_out, C_in/groups, kh, kw), and bias. */
static vn_status conv_check(const vn_tensor *x, const vn_tensor *w, const vn_tensor *bias,
                            const struct conv_saved *p, conv_geom *g)
{
    const char *op = "conv2d";
    vn_status st = vn__check_dtype_arg(w, VN_F32, op, "weight", 0);
    if (st) return st;
    if (w->ndim != 4)
        return vn__err(VN_ERR_SHAPE, "conv2d: weight of shape %s, expected 4-d (C_out, C_in/groups, "
                       "kh, kw)", vn__shape(w->ndim, w->shape));
    if ((st = conv__geom(op, x, w->shape + 2, p->stride, p->padding, p->dilation, g))) return st;
    int64_t G = p->groups, Cout = w->shape[0];
    if (G < 1 || G > INT_MAX)
        return vn__err(VN_ERR_ARG, "conv2d: groups is %lld, expected >= 1", (long long)G);
    if (g->C % G || Cout % G)
        return vn__err(VN_ERR_SHAPE, "conv2d: input channels (%lld, input %s) and output channels "
                       "(%lld, weight %s) must both be divisible by groups = %lld",
                       (long long)g->C, vn__shape(x->ndim, x->shape), (long long)Cout,
                       vn__shape(w->ndim, w->shape), (long long)G);
    if (w->shape[1] != g->C / G || Cout < 1)
        return vn__err(VN_ERR_SHAPE, "conv2d: weight of shape %s for input %s with groups = %lld: "
                       "expected (C_out >= 1, %lld, kh, kw)", vn__shape(w->ndim, w->shape),
                       vn__shape(x->ndim, x->shape), (long long)G, (long long)(g->C / G));
    if (!bias) return VN_OK;
    if ((st = vn__check_dtype_arg(bias, VN_F32, op, "bias", 0))) return st;
    if (bias->ndim != 1 || bias->shape[0] != Cout)
        return vn__err(VN_ERR_SHAPE, "conv2d: bias of shape %s, expected (%lld)",
                       vn__shape(bias->ndim, bias->shape), (long long)Cout);
    return VN_OK;
}

static vn_status conv_backward(vn_node *n, const vn_tensor *gout)
{
    const struct conv_saved *p = VN_SAVED_STATE(n, struct conv_saved);
    const vn_tensor *x = n->inputs[CONV_X], *w = n->inputs[CONV_W];
    conv_geom g;
    vn_status st = conv__geom("conv2d", x, w->shape + 2, p->stride, p->padding, p->dilation, &g);
    if (st) return st;
    bool need_x = vn__input_needs_grad(n, CONV_X), need_w = vn__input_needs_grad(n, CONV_W);
    bool need_b = n->ninputs > CONV_B && vn__input_needs_grad(n, CONV_B);
    int64_t G = p->groups, Cout = w->shape[0], Cog = Cout / G, L = g.Ho * g.Wo;
    int64_t K = g.C * g.kh * g.kw, Kg = K / G, cols_n = L * K;
    vn_tensor *gc = vn__plain_contiguous(gout);
    vn_tensor *xc = gc ? vn__plain_contiguous(x) : NULL, *wc = xc ? vn__plain_contiguous(w) : NULL;
    vn_tensor *cols = wc ? vn__new(VN_F32, 1, &cols_n) : NULL;
    vn_tensor *dx = cols && need_x ? zeros_like_shape(x) : NULL;
    vn_tensor *dw = cols && need_w ? zeros_like_shape(w) : NULL;
    vn_tensor *db = cols && need_b ? vn__new(VN_F32, 1, &Cout) : NULL;
    if (cols && (!need_x || dx) && (!need_w || dw) && (!need_b || db)) {
        const float *gy = vn_tensor_data(gc), *xs = vn_tensor_data(xc), *ws = vn_tensor_data(wc);
        float *cb = vn_tensor_data(cols);
        for (int64_t b = 0; b < g.B; b++) {
            const float *gyb = gy + b * Cout * L;
            if (need_w) {
                im2col(&g, xs + b * g.C * g.H * g.W, cb);
                for (int64_t k = 0; k < G; k++) /* dW_k += dY_k (Cog, L) · cols_k (L, Kg) */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Cog, (int)Kg,
                                (int)L, 1.0f, gyb + k * Cog * L, (int)L, cb + k * Kg, (int)K, 1.0f,
                                (float *)vn_tensor_data(dw) + k * Cog * Kg, (int)Kg);
            }
            if (need_x) {
                for (int64_t k = 0; k < G; k++) /* dcols_k (L, Kg) = dY_kᵀ · W_k (Cog, Kg) */
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)L, (int)Kg, (int)Cog,
                                1.0f, gyb + k * Cog * L, (int)L, ws + k * Cog * Kg, (int)Kg, 0.0f,
                                cb + k * Kg, (int)K);
                col2im(&g, cb, (float *)vn_tensor_data(dx) + b * g.C * g.H * g.W);
            }
        }
        if (need_b) {
            float *d = vn_tensor_data(db);
            for (int64_t o = 0; o < Cout; o++) {
                double s = 0;
                for (int64_t b = 0; b < g.B; b++)
                    for (int64_t l = 0; l < L; l++) s += gy[(b * Cout + o) * L + l];
                d[o] = (float)s;
            }
        }
        st = VN_OK;
        if (dx) { st = vn__accum(n, CONV_X, dx); dx = NULL; }
        if (!st && dw) { st = vn__accum(n, CONV_W, dw); dw = NULL; }
        if (!st && db) { st = vn__accum(n, CONV_B, db); db = NULL; }
    } else {
        st = VN_ERR_MEMORY; /* the failed allocation set the message */
    }
    vn_tensor_release(gc);
    vn_tensor_release(xc);
    vn_tensor_release(wc);
    vn_tensor_release(cols);
    vn_tensor_release(dx);
    vn_tensor_release(dw);
    vn_tensor_release(db);
    return st;
}

vn_tensor *vn_conv2d(const vn_tensor *x, const vn_tensor *weight, const vn_tensor *bias,
                     const int64_t stride[2], const int64_t padding[2],
                     const int64_t dilation[2], int64_t groups)
{
    struct conv_saved p = {{0, 0}, {0, 0}, {1, 1}, groups};
    if (check_pair("conv2d", "stride", stride, 1) || check_pair("conv2d", "padding", padding, 0) ||
        (dilation && check_pair("conv2d", "dilation", dilation, 1)))
        return NULL;
    memcpy(p.stride, stride, sizeof p.stride);
    memcpy(p.padding, padding, sizeof p.padding);
    if (dilation) memcpy(p.dilation, dilation, sizeof p.dilation);
    conv_geom g;
    if (conv_check(x, weight, bias, &p, &g)) return NULL;
    int64_t G = groups, Cout = weight->shape[0], Cog = Cout / G, L = g.Ho * g.Wo;
    int64_t K = g.C * g.kh * g.kw, Kg = K / G, cols_n = L * K;
    int64_t oshape[4] = {g.B, Cout, g.Ho, g.Wo};
    vn_tensor *xc = vn__plain_contiguous(x), *wc = xc ? vn__plain_contiguous(weight) : NULL;
    vn_tensor *bc = wc && bias ? vn__plain_contiguous(bias) : NULL;
    vn_tensor *cols = wc && (bc || !bias) ? vn__new(VN_F32, 1, &cols_n) : NULL;
    vn_tensor *out = cols ? vn__new(VN_F32, 4, oshape) : NULL;
    if (out) {
        const float *xs = vn_tensor_data(xc), *ws = vn_tensor_data(wc);
        const float *bs = bc ? vn_tensor_data(bc) : NULL;
        float *cb = vn_tensor_data(cols), *y = vn_tensor_data(out);
        for (int64_t b = 0; b < g.B; b++) {
            float *yb = y + b * Cout * L;
            im2col(&g, xs + b * g.C * g.H * g.W, cb);
            for (int64_t k = 0; k < G; k++) /* Y_k (Cog, L) = W_k (Cog, Kg) · cols_kᵀ */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)Cog, (int)L, (int)Kg,
                            1.0f, ws + k * Cog * Kg, (int)Kg, cb + k * Kg, (int)K, 0.0f,
                            yb + k * Cog * L, (int)L);
            for (int64_t o = 0; bs && o < Cout; o++)
                for (int64_t l = 0; l < L; l++) yb[o * L + l] += bs[o];
        }
        const vn_tensor *in[3] = {x, weight, bias};
        vn_node *n = vn__record(out, "conv2d", conv_backward, bias ? 3 : 2, in);
        if (n) *VN_SAVED_STATE(n, struct conv_saved) = p;
    }
    vn_tensor_release(xc);
    vn_tensor_release(wc);
    vn_tensor_release(bc);
    vn_tensor_release(cols);
    return out;
}

/* ---- im2col as an op ------------------------------------------------------------ */

struct im2col_saved { int64_t kernel[2], stride[2], padding[2], dilation[2]; };

static vn_status im2col_backward(vn_node *n, const vn_tensor *gout)
{
    const struct im2col_saved *p = VN_SAVED_STATE(n, struct im2col_saved);
    const vn_tensor *x = n->inputs[0];
    conv_geom g;
    vn_status st = conv__geom("im2col", x, p->kernel, p->stride, p->padding, p->dilation, &g);
    if (st) return st;
    vn_tensor *gc = vn__plain_contiguous(gout);
    vn_tensor *dx = gc ? zeros_like_shape(x) : NULL;
    if (!dx) {
        vn_tensor_release(gc);
        return VN_ERR_MEMORY;
    }
    int64_t LK = g.Ho * g.Wo * g.C * g.kh * g.kw;
    for (int64_t b = 0; b < g.B; b++)
        col2im(&g, (const float *)vn_tensor_data(gc) + b * LK,
               (float *)vn_tensor_data(dx) + b * g.C * g.H * g.W);
    vn_tensor_release(gc);
    return vn__accum(n, 0, dx);
}

vn_tensor *vn_im2col(const vn_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                     const int64_t padding[2], const int64_t dilation[2])
{
    conv_geom g;
    if (conv__geom("im2col", x, kernel, stride, padding, dilation, &g)) return NULL;
    int64_t L = g.Ho * g.Wo, K = g.C * g.kh * g.kw, oshape[3] = {g.B, L, K};
    vn_tensor *xc = vn__plain_contiguous(x);
    vn_tensor *out = xc ? vn__new(VN_F32, 3, oshape) : NULL;
    if (out) {
        for (int64_t b = 0; b < g.B; b++)
            im2col(&g, (const float *)vn_tensor_data(xc) + b * g.C * g.H * g.W,
                   (float *)vn_tensor_data(out) + b * L * K);
        vn_node *n = vn__record(out, "im2col", im2col_backward, 1, &x);
        if (n) {
            struct im2col_saved *s = VN_SAVED_STATE(n, struct im2col_saved);
            *s = (struct im2col_saved){{g.kh, g.kw}, {g.sh, g.sw}, {g.ph, g.pw}, {g.dh, g.dw}};
        }
    }
    vn_tensor_release(xc);
    return out;
}
