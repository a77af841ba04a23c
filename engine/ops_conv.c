/* ops_conv.c — 2-d convolution as im2col + sgemm (groups, stride,
 * padding, dilation), im2col as an op of its own (the V:N:M sparse
 * convolution multiplies its output), and the window geometry the pooling
 * ops share. See venom/conv.h for the formulas. On the CPU the GEMMs are
 * OpenBLAS's; on CUDA the same steps run as the kernels of kernels/conv.cu
 * and cuBLAS GEMMs (vnk_gemm), chunk for chunk. */
#include "conv_internal.h"

#include "blas.h" /* vn__sgemm: OpenBLAS on OpenMP's threads */
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
    vn_status st = vn__check_dtype_arg(x, VN_F32, op, "input", VN_ALLOW_CUDA);
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

/* ---- im2col / col2im ----------------------------------------------------------- */

/* The output columns ox whose input column ox·sw + off lies in [0, W):
 * [*lo, *hi), so the loops below run without a test per element. */
static void valid_range(const conv_geom *g, int64_t off, int64_t *lo, int64_t *hi)
{
    *lo = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
    *hi = g->W - 1 - off < 0 ? 0 : (g->W - 1 - off) / g->sw + 1;
    if (*hi > g->Wo) *hi = g->Wo;
    if (*lo > *hi) *lo = *hi;
}

/* Row r = (c·kh + p)·kw + q of one image's columns: dst[oy·Wo + ox] =
 * x[c, oy·sh − ph + p·dh, ox·sw − pw + q·dw], 0 in the padding. */
static void im2col_row(const conv_geom *g, const float *x, int64_t r, float *dst)
{
    int64_t q = r % g->kw, p = (r / g->kw) % g->kh, c = r / (g->kw * g->kh);
    int64_t off = q * g->dw - g->pw, lo, hi;
    valid_range(g, off, &lo, &hi);
    for (int64_t oy = 0; oy < g->Ho; oy++, dst += g->Wo) {
        int64_t iy = oy * g->sh - g->ph + p * g->dh;
        if (iy < 0 || iy >= g->H) {
            memset(dst, 0, sizeof(float) * (size_t)g->Wo);
            continue;
        }
        const float *src = x + (c * g->H + iy) * g->W + off;
        for (int64_t ox = 0; ox < lo; ox++) dst[ox] = 0;
        if (g->sw == 1)
            memcpy(dst + lo, src + lo, sizeof(float) * (size_t)(hi - lo));
        else
            for (int64_t ox = lo; ox < hi; ox++) dst[ox] = src[ox * g->sw];
        for (int64_t ox = hi; ox < g->Wo; ox++) dst[ox] = 0;
    }
}

/* The columns of nb images x (nb, C, H, W): row r of image i, Ho·Wo values,
 * at cols + i·istride + r·ldc. The conv lays a chunk out as (C·kh·kw,
 * nb·Ho·Wo) (istride Ho·Wo, ldc nb·Ho·Wo: one GEMM per chunk); the im2col op
 * as (nb, C·kh·kw, Ho·Wo). */
static void im2col(const conv_geom *g, const float *x, int64_t nb, float *cols, int64_t istride,
                   int64_t ldc)
{
    int64_t K = g->C * g->kh * g->kw, CHW = g->C * g->H * g->W;
#pragma omp parallel for if (nb * K * g->Ho * g->Wo > VN_OMP_MIN_WORK)
    for (int64_t ir = 0; ir < nb * K; ir++) {
        int64_t i = ir / K, r = ir % K;
        im2col_row(g, x + i * CHW, r, cols + i * istride + r * ldc);
    }
}

/* dx (nb, C, H, W) += the columns (laid out as for im2col) summed back into
 * place. Each (image, channel) plane is one thread's, so the sums are
 * deterministic. */
static void col2im(const conv_geom *g, const float *cols, int64_t nb, int64_t istride,
                   int64_t ldc, float *dx)
{
    int64_t khw = g->kh * g->kw;
#pragma omp parallel for if (nb * g->C * khw * g->Ho * g->Wo > VN_OMP_MIN_WORK)
    for (int64_t ic = 0; ic < nb * g->C; ic++) {
        int64_t i = ic / g->C, c = ic % g->C;
        float *plane = dx + ic * g->H * g->W;
        for (int64_t pq = 0; pq < khw; pq++) {
            int64_t p = pq / g->kw, q = pq % g->kw, off = q * g->dw - g->pw, lo, hi;
            valid_range(g, off, &lo, &hi);
            const float *src = cols + i * istride + (c * khw + pq) * ldc;
            for (int64_t oy = 0; oy < g->Ho; oy++, src += g->Wo) {
                int64_t iy = oy * g->sh - g->ph + p * g->dh;
                if (iy < 0 || iy >= g->H) continue;
                float *dst = plane + iy * g->W + off;
                for (int64_t ox = lo; ox < hi; ox++) dst[ox * g->sw] += src[ox];
            }
        }
    }
}

/* Images per chunk of the convolution: one sgemm per chunk and group (few,
 * large products rather than one small one per image), with the chunk's
 * column buffer kept under about 32 MB. */
static int64_t chunk_images(const conv_geom *g)
{
    int64_t per = g->Ho * g->Wo * g->C * g->kh * g->kw, nb = ((int64_t)8 << 20) / (per ? per : 1);
    return nb < 1 ? 1 : nb > g->B ? (g->B ? g->B : 1) : nb;
}

/* y (nb, Cout, L) ↔ the GEMMs' (Cout, nb·L): the same rows of L values,
 * grouped by channel instead of by image. to_images adds the bias. */
static void to_images(const float *ycols, int64_t nb, int64_t Cout, int64_t L, const float *bias,
                      float *y)
{
#pragma omp parallel for if (nb * L * Cout > VN_OMP_MIN_WORK)
    for (int64_t io = 0; io < nb * Cout; io++) {
        int64_t i = io / Cout, o = io % Cout;
        const float *src = ycols + (o * nb + i) * L;
        float b = bias ? bias[o] : 0.0f, *dst = y + io * L;
        for (int64_t l = 0; l < L; l++) dst[l] = src[l] + b;
    }
}

static void from_images(const float *y, int64_t nb, int64_t Cout, int64_t L, float *ycols)
{
#pragma omp parallel for if (nb * L * Cout > VN_OMP_MIN_WORK)
    for (int64_t io = 0; io < nb * Cout; io++) {
        int64_t i = io / Cout, o = io % Cout;
        memcpy(ycols + (o * nb + i) * L, y + io * L, sizeof(float) * (size_t)L);
    }
}

/* A zeroed f32 tensor of t's shape on t's device. */
static vn_tensor *zeros_like_shape(const vn_tensor *t)
{
    int64_t n = vn__numel(t->ndim, t->shape);
    vn_tensor *z = vn__new_like(t, VN_F32, t->ndim, t->shape);
    if (!z || !vn__is_cuda(t)) {
        if (z) memset(vn_tensor_data(z), 0, sizeof(float) * (size_t)n);
        return z;
    }
    if (!vnk_fill(vn__ptr(z), VN_F32, n, 0)) return z;
    vn_tensor_release(z);
    return vn__cuda_errp("conv2d");
}

/* ---- the steps on either device ---------------------------------------------- */

/* Each runs the CPU loop above or its CUDA kernel (kernels/conv.cu) and
 * returns false, the error set, when a CUDA call failed. */
static bool cuda_ok(int rc, const char *op)
{
    if (rc) vn__cuda_err(op);
    return !rc;
}

static bool run_im2col(bool cuda, const char *op, const conv_geom *g, const float *x, int64_t nb,
                       float *cols, int64_t istride, int64_t ldc)
{
    if (cuda) return cuda_ok(vnk_im2col(cols, x, g, nb, istride, ldc), op);
    im2col(g, x, nb, cols, istride, ldc);
    return true;
}

/* dx (nb images) += the columns summed back; on CUDA dx is overwritten (the
 * callers pass zeros or a slice no other chunk writes). */
static bool run_col2im(bool cuda, const char *op, const conv_geom *g, const float *cols,
                       int64_t nb, int64_t istride, int64_t ldc, float *dx)
{
    if (cuda) return cuda_ok(vnk_col2im(dx, cols, g, nb, istride, ldc), op);
    col2im(g, cols, nb, istride, ldc, dx);
    return true;
}

static bool run_regroup(bool cuda, float *dst, const float *src, int64_t nb, int64_t Cout,
                        int64_t L, const float *bias, bool to)
{
    if (cuda) return cuda_ok(vnk_conv_regroup(dst, src, nb, Cout, L, bias, to), "conv2d");
    if (to) to_images(src, nb, Cout, L, bias, dst);
    else from_images(src, nb, Cout, L, dst);
    return true;
}

/* C (m × n, ldc) = op(A)·op(B) + beta·C, row-major, as cblas_sgemm. */
static bool sgemm(bool cuda, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (cuda)
        return cuda_ok(vnk_gemm(C, ldc, 0, A, lda, 0, B, ldb, 0, VN_F32, ta, tb, m, n, k, 1, 1.0f,
                                beta, vn__allow_tf32()), "conv2d");
    vn__sgemm(ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
              (int)k, 1.0f, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
    return true;
}

/* ---- conv2d --------------------------------------------------------------------- */

struct conv_saved { int64_t stride[2], padding[2], dilation[2], groups; };

enum { CONV_X, CONV_W, CONV_B };

/* The geometry of x convolved with w (C_out, C_in/groups, kh, kw), and bias. */
static vn_status conv_check(const vn_tensor *x, const vn_tensor *w, const vn_tensor *bias,
                            const struct conv_saved *p, conv_geom *g)
{
    const char *op = "conv2d";
    vn_status st = vn__check_dtype_arg(w, VN_F32, op, "weight", VN_ALLOW_CUDA);
    if (!st && bias) st = vn__check_dtype_arg(bias, VN_F32, op, "bias", VN_ALLOW_CUDA);
    if (!st) st = vn__check_dtype_arg(x, VN_F32, op, "input", VN_ALLOW_CUDA);
    const vn_tensor *ts[3] = {x, w, bias};
    static const char *const names[3] = {"input", "weight", "bias"};
    if (!st) st = vn__same_device_strict(op, 3, ts, names, NULL);
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
    if (Cout > INT_MAX / 2)
        return vn__err(VN_ERR_SHAPE, "conv2d: %lld output channels; BLAS takes at most %d",
                       (long long)Cout, INT_MAX / 2);
    if (!bias) return VN_OK;
    if (bias->ndim != 1 || bias->shape[0] != Cout)
        return vn__err(VN_ERR_SHAPE, "conv2d: bias of shape %s, expected (%lld)",
                       vn__shape(bias->ndim, bias->shape), (long long)Cout);
    return VN_OK;
}

/* The products of one chunk of nb images, per group k (Cog = Cout/G output
 * channels, Kg = K/G rows of cols and columns of the weight), with cols
 * (K, nb·L) and Y, or dY, as (Cout, nb·L):
 *   forward   Y_k = W_k (Cog, Kg) · cols_k
 *   backward  dW_k += dY_k · cols_kᵀ,   dcols_k = W_kᵀ · dY_k */
typedef struct { int64_t nL, Kg, Cog; bool cuda; } conv_dims;

static bool gemm_forward(const conv_dims *d, int64_t k, const float *w, const float *cols,
                         float *y)
{
    return sgemm(d->cuda, false, false, d->Cog, d->nL, d->Kg, w + k * d->Cog * d->Kg, d->Kg,
                 cols + k * d->Kg * d->nL, d->nL, 0.0f, y + k * d->Cog * d->nL, d->nL);
}

static bool gemm_weight_grad(const conv_dims *d, int64_t k, const float *dy, const float *cols,
                             float *dw)
{
    return sgemm(d->cuda, false, true, d->Cog, d->Kg, d->nL, dy + k * d->Cog * d->nL, d->nL,
                 cols + k * d->Kg * d->nL, d->nL, 1.0f, dw + k * d->Cog * d->Kg, d->Kg);
}

static bool gemm_input_grad(const conv_dims *d, int64_t k, const float *w, const float *dy,
                            float *dcols)
{
    return sgemm(d->cuda, true, false, d->Kg, d->nL, d->Cog, w + k * d->Cog * d->Kg, d->Kg,
                 dy + k * d->Cog * d->nL, d->nL, 0.0f, dcols + k * d->Kg * d->nL, d->nL);
}

static vn_status conv_backward(vn_node *n, const vn_tensor *gout)
{
    const struct conv_saved *p = VN_SAVED_STATE(n, struct conv_saved);
    const vn_tensor *x = n->inputs[CONV_X], *w = n->inputs[CONV_W];
    conv_geom g;
    vn_status st = conv__geom("conv2d", x, w->shape + 2, p->stride, p->padding, p->dilation, &g);
    if (st) return st;
    bool need_x = vn__input_needs_grad(n, CONV_X), need_w = vn__input_needs_grad(n, CONV_W);
    bool need_b = n->ninputs > CONV_B && vn__input_needs_grad(n, CONV_B), cuda = vn__is_cuda(x);
    int64_t G = p->groups, Cout = w->shape[0], L = g.Ho * g.Wo, K = g.C * g.kh * g.kw;
    int64_t nb = chunk_images(&g), cols_n = nb * L * K, ycols_n = nb * L * Cout;
    vn_tensor *gc = vn__plain_contiguous(gout);
    vn_tensor *xc = gc ? vn__plain_contiguous(x) : NULL, *wc = xc ? vn__plain_contiguous(w) : NULL;
    vn_tensor *cols = wc ? vn__new_on(cuda, VN_F32, 1, &cols_n) : NULL;
    vn_tensor *ycols = cols ? vn__new_on(cuda, VN_F32, 1, &ycols_n) : NULL;
    vn_tensor *dx = ycols && need_x ? zeros_like_shape(x) : NULL;
    vn_tensor *dw = ycols && need_w ? zeros_like_shape(w) : NULL;
    vn_tensor *db = ycols && need_b ? vn__new_on(cuda, VN_F32, 1, &Cout) : NULL;
    bool ok = ycols && (!need_x || dx) && (!need_w || dw) && (!need_b || db);
    const float *gy = ok ? vn__ptr(gc) : NULL, *xs = ok ? vn__ptr(xc) : NULL;
    const float *ws = ok ? vn__ptr(wc) : NULL;
    float *cb = ok ? vn__ptr(cols) : NULL, *yb = ok ? vn__ptr(ycols) : NULL;
    for (int64_t b0 = 0; ok && b0 < g.B; b0 += nb) {
        int64_t m = g.B - b0 < nb ? g.B - b0 : nb;
        conv_dims d = {m * L, K / G, Cout / G, cuda};
        ok = run_regroup(cuda, yb, gy + b0 * Cout * L, m, Cout, L, NULL, false);
        if (ok && need_w) {
            ok = run_im2col(cuda, "conv2d", &g, xs + b0 * g.C * g.H * g.W, m, cb, L, m * L);
            for (int64_t k = 0; ok && k < G; k++) ok = gemm_weight_grad(&d, k, yb, cb, vn__ptr(dw));
        }
        if (ok && need_x) {
            for (int64_t k = 0; ok && k < G; k++) ok = gemm_input_grad(&d, k, ws, yb, cb);
            if (ok)
                ok = run_col2im(cuda, "conv2d", &g, cb, m, L, m * L,
                                (float *)vn__ptr(dx) + b0 * g.C * g.H * g.W);
        }
    }
    if (ok && need_b && cuda) {
        ok = cuda_ok(vnk_channel_sum(vn__ptr(db), gy, g.B, Cout, L), "conv2d");
    } else if (ok && need_b) {
        float *dbs = vn__ptr(db);
        for (int64_t o = 0; o < Cout; o++) {
            double s = 0;
            for (int64_t b = 0; b < g.B; b++)
                for (int64_t l = 0; l < L; l++) s += gy[(b * Cout + o) * L + l];
            dbs[o] = (float)s;
        }
    }
    st = ok ? VN_OK : vn_last_status(); /* the failed allocation or CUDA call set it */
    if (!st && dx) { st = vn__accum(n, CONV_X, dx); dx = NULL; }
    if (!st && dw) { st = vn__accum(n, CONV_W, dw); dw = NULL; }
    if (!st && db) { st = vn__accum(n, CONV_B, db); db = NULL; }
    vn_tensor_release(gc);
    vn_tensor_release(xc);
    vn_tensor_release(wc);
    vn_tensor_release(cols);
    vn_tensor_release(ycols);
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
    bool cuda = vn__is_cuda(x);
    int64_t G = groups, Cout = weight->shape[0], L = g.Ho * g.Wo, K = g.C * g.kh * g.kw;
    int64_t nb = chunk_images(&g), cols_n = nb * L * K, ycols_n = nb * L * Cout;
    int64_t oshape[4] = {g.B, Cout, g.Ho, g.Wo};
    if (vn__check_shape("conv2d", 4, oshape)) return NULL;
    vn_tensor *xc = vn__plain_contiguous(x), *wc = xc ? vn__plain_contiguous(weight) : NULL;
    vn_tensor *bc = wc && bias ? vn__plain_contiguous(bias) : NULL;
    vn_tensor *cols = wc && (bc || !bias) ? vn__new_on(cuda, VN_F32, 1, &cols_n) : NULL;
    vn_tensor *ycols = cols ? vn__new_on(cuda, VN_F32, 1, &ycols_n) : NULL;
    vn_tensor *out = ycols ? vn__new_on(cuda, VN_F32, 4, oshape) : NULL;
    bool ok = out != NULL;
    const float *xs = ok ? vn__ptr(xc) : NULL, *ws = ok ? vn__ptr(wc) : NULL;
    const float *bs = ok && bc ? vn__ptr(bc) : NULL;
    float *cb = ok ? vn__ptr(cols) : NULL, *yb = ok ? vn__ptr(ycols) : NULL;
    float *y = ok ? vn__ptr(out) : NULL;
    for (int64_t b0 = 0; ok && b0 < g.B; b0 += nb) {
        int64_t m = g.B - b0 < nb ? g.B - b0 : nb;
        conv_dims d = {m * L, K / G, Cout / G, cuda};
        ok = run_im2col(cuda, "conv2d", &g, xs + b0 * g.C * g.H * g.W, m, cb, L, m * L);
        for (int64_t k = 0; ok && k < G; k++) ok = gemm_forward(&d, k, ws, cb, yb);
        if (ok) ok = run_regroup(cuda, y + b0 * Cout * L, yb, m, Cout, L, bs, true);
    }
    if (!ok) {
        vn_tensor_release(out);
        out = NULL;
    }
    if (out) {
        const vn_tensor *in[3] = {x, weight, bias};
        vn_node *n = vn__record(out, "conv2d", conv_backward, bias ? 3 : 2, in);
        if (n) *VN_SAVED_STATE(n, struct conv_saved) = p;
    }
    vn_tensor_release(xc);
    vn_tensor_release(wc);
    vn_tensor_release(bc);
    vn_tensor_release(cols);
    vn_tensor_release(ycols);
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
    int64_t K = g.C * g.kh * g.kw, L = g.Ho * g.Wo;
    bool ok = run_col2im(vn__is_cuda(x), "im2col", &g, vn__ptr(gc), g.B, K * L, L, vn__ptr(dx));
    vn_tensor_release(gc);
    if (ok) return vn__accum(n, 0, dx);
    vn_tensor_release(dx);
    return vn_last_status();
}

vn_tensor *vn_im2col(const vn_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                     const int64_t padding[2], const int64_t dilation[2])
{
    conv_geom g;
    if (conv__geom("im2col", x, kernel, stride, padding, dilation, &g)) return NULL;
    int64_t L = g.Ho * g.Wo, K = g.C * g.kh * g.kw, oshape[3] = {g.B, K, L};
    if (vn__check_shape("im2col", 3, oshape)) return NULL;
    vn_tensor *xc = vn__plain_contiguous(x);
    vn_tensor *out = xc ? vn__new_like(x, VN_F32, 3, oshape) : NULL;
    if (out && !run_im2col(vn__is_cuda(x), "im2col", &g, vn__ptr(xc), g.B, vn__ptr(out), K * L, L)) {
        vn_tensor_release(out);
        out = NULL;
    }
    if (out) {
        vn_node *n = vn__record(out, "im2col", im2col_backward, 1, &x);
        if (n) {
            struct im2col_saved *s = VN_SAVED_STATE(n, struct im2col_saved);
            *s = (struct im2col_saved){{g.kh, g.kw}, {g.sh, g.sw}, {g.ph, g.pw}, {g.dh, g.dw}};
        }
    }
    vn_tensor_release(xc);
    return out;
}
