/* ops_pool.c — 2-d pooling over NCHW images: max_pool2d (the position of
 * each maximum saved for the backward), avg_pool2d (zero padding counted)
 * and adaptive_avg_pool2d; see venom/conv.h. Each (image, channel) plane
 * is independent, so the loops run over planes in parallel and every
 * plane's gradient is summed by one thread. CUDA tensors go to the kernels
 * of kernels/pool.cu, whose windows (kernels/conv_index.h) are the ones
 * these loops use. */
#include "conv_internal.h"

#include <stdlib.h>

struct pool_saved { int64_t kernel[2], stride[2], padding[2]; bool adaptive; };

/* padding at most half the kernel (so no window is all padding), and the
 * geometry. */
static vn_status pool_geom(const char *op, const vn_tensor *x, const int64_t kernel[2],
                           const int64_t stride[2], const int64_t padding[2], conv_geom *g)
{
    vn_status st = conv__geom(op, x, kernel, stride, padding, NULL, g);
    if (st) return st;
    if (2 * g->ph > g->kh || 2 * g->pw > g->kw)
        return vn__err(VN_ERR_ARG, "%s: padding (%lld, %lld) is more than half the kernel "
                       "(%lld, %lld)", op, (long long)g->ph, (long long)g->pw, (long long)g->kh,
                       (long long)g->kw);
    return VN_OK;
}

/* The output (B, C, Ho, Wo) of dtype dt on x's device. */
static vn_tensor *new_out(const char *op, const vn_tensor *x, const conv_geom *g, vn_dtype dt)
{
    int64_t shape[4] = {g->B, g->C, g->Ho, g->Wo};
    return vn__check_shape(op, 4, shape) ? NULL : vn__new_like(x, dt, 4, shape);
}

/* A gradient of t's shape on t's device: zeroed on the CPU (the loops add
 * into it), left for the kernel to overwrite on CUDA. */
static vn_tensor *new_grad(const vn_tensor *t)
{
    vn_tensor *z = vn__new_like(t, VN_F32, t->ndim, t->shape);
    if (z && !vn__is_cuda(t))
        memset(vn_tensor_data(z), 0, sizeof(float) * (size_t)vn__numel(t->ndim, t->shape));
    return z;
}

/* The geometry of a pooling node from its input and output shapes. */
static conv_geom saved_geom(const struct pool_saved *p, const vn_tensor *x, const vn_tensor *gout)
{
    return (conv_geom){x->shape[0], x->shape[1], x->shape[2], x->shape[3], p->kernel[0],
                       p->kernel[1], p->stride[0], p->stride[1], p->padding[0], p->padding[1],
                       1, 1, gout->shape[2], gout->shape[3]};
}

/* A CUDA kernel's status as the op's: false (the error set) on failure. */
static bool cuda_ok(int rc, const char *op)
{
    if (rc) vn__cuda_err(op);
    return !rc;
}

/* ---- max_pool2d ------------------------------------------------------------------ */

static vn_status max_pool_backward(vn_node *n, const vn_tensor *gout)
{
    const vn_tensor *x = n->inputs[0], *idx = n->saved[0];
    int64_t planes = x->shape[0] * x->shape[1], HW = x->shape[2] * x->shape[3];
    int64_t L = idx->shape[2] * idx->shape[3];
    vn_tensor *gc = vn__plain_contiguous(gout), *dx = gc ? new_grad(x) : NULL;
    if (!dx) {
        vn_tensor_release(gc);
        return VN_ERR_MEMORY;
    }
    if (vn__is_cuda(x)) {
        const struct pool_saved *p = VN_SAVED_STATE(n, struct pool_saved);
        conv_geom g = saved_geom(p, x, gout);
        bool ok = cuda_ok(vnk_max_pool2d_backward(vn__ptr(dx), vn__ptr(gc), vn__ptr(idx), &g),
                          "max_pool2d");
        vn_tensor_release(gc);
        if (ok) return vn__accum(n, 0, dx);
        vn_tensor_release(dx);
        return vn_last_status();
    }
    const float *gy = vn_tensor_data(gc);
    const int64_t *ix = vn_tensor_data(idx);
    float *d = vn_tensor_data(dx);
#pragma omp parallel for if (planes * L > VN_OMP_MIN_WORK)
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t l = 0; l < L; l++) d[pl * HW + ix[pl * L + l]] += gy[pl * L + l];
    vn_tensor_release(gc);
    return vn__accum(n, 0, dx);
}

vn_tensor *vn_max_pool2d(const vn_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                         const int64_t padding[2])
{
    conv_geom g;
    if (pool_geom("max_pool2d", x, kernel, stride, padding, &g)) return NULL;
    vn_tensor *xc = vn__plain_contiguous(x);
    vn_tensor *out = xc ? new_out("max_pool2d", x, &g, VN_F32) : NULL;
    vn_tensor *idx = out ? new_out("max_pool2d", x, &g, VN_I64) : NULL;
    if (idx && vn__is_cuda(x)) {
        if (!cuda_ok(vnk_max_pool2d(vn__ptr(out), vn__ptr(idx), vn__ptr(xc), &g), "max_pool2d")) {
            vn_tensor_release(out);
            out = NULL;
        }
    } else if (idx) {
        const float *xs = vn_tensor_data(xc);
        float *y = vn_tensor_data(out);
        int64_t *ix = vn_tensor_data(idx), planes = g.B * g.C, L = g.Ho * g.Wo;
#pragma omp parallel for if (planes * L * g.kh * g.kw > VN_OMP_MIN_WORK)
        for (int64_t pl = 0; pl < planes; pl++)
            for (int64_t l = 0; l < L; l++)
                ix[pl * L + l] = max_pool_at(&g, xs + pl * g.H * g.W, l / g.Wo, l % g.Wo,
                                             &y[pl * L + l]);
    }
    if (idx && out) {
        vn_node *n = vn__record(out, "max_pool2d", max_pool_backward, 1, &x);
        if (n) {
            *VN_SAVED_STATE(n, struct pool_saved) =
                (struct pool_saved){{g.kh, g.kw}, {g.sh, g.sw}, {g.ph, g.pw}, false};
            n->saved[0] = idx;
            idx = NULL;
        }
    }
    vn_tensor_release(xc);
    vn_tensor_release(idx);
    return out;
}

/* ---- average pooling: fixed and adaptive windows ------------------------------- */

/* The window of output row i (or column, dim 1) is [lo[i], hi[i]) of the
 * input, clipped to the image. */
static void windows(const struct pool_saved *p, int dim, int64_t in, int64_t out, int64_t *lo,
                    int64_t *hi)
{
    for (int64_t i = 0; i < out; i++)
        pool_window(i, in, out, p->kernel[dim], p->stride[dim], p->padding[dim], p->adaptive,
                    &lo[i], &hi[i]);
}

/* forward (dy NULL): y = the window means of x; backward: dx += dy spread
 * evenly over each window. Planes of H×W in, Ho×Wo out. */
static vn_status avg_run(const struct pool_saved *p, int64_t planes, int64_t H, int64_t W,
                         int64_t Ho, int64_t Wo, const float *x, float *y, const float *dy,
                         float *dx)
{
    int64_t *r = malloc(sizeof(int64_t) * (size_t)(2 * (Ho + Wo)));
    if (!r) return vn__err(VN_ERR_MEMORY, "avg_pool2d: out of memory");
    int64_t *ylo = r, *yhi = r + Ho, *xlo = r + 2 * Ho, *xhi = r + 2 * Ho + Wo;
    windows(p, 0, H, Ho, ylo, yhi);
    windows(p, 1, W, Wo, xlo, xhi);
#pragma omp parallel for if (planes * H * W > VN_OMP_MIN_WORK)
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t i = 0; i < Ho; i++)
            for (int64_t j = 0; j < Wo; j++) {
                int64_t n = (yhi[i] - ylo[i]) * (xhi[j] - xlo[j]);
                double div = p->adaptive ? (double)n : (double)(p->kernel[0] * p->kernel[1]);
                int64_t o = (pl * Ho + i) * Wo + j;
                double s = 0, share = dy ? dy[o] / div : 0;
                for (int64_t iy = ylo[i]; iy < yhi[i]; iy++)
                    for (int64_t jx = xlo[j]; jx < xhi[j]; jx++) {
                        int64_t at = (pl * H + iy) * W + jx;
                        if (dy) dx[at] += (float)share;
                        else s += x[at];
                    }
                if (!dy) y[o] = (float)(s / div);
            }
    free(r);
    return VN_OK;
}

static vn_status avg_backward(vn_node *n, const vn_tensor *gout)
{
    const struct pool_saved *p = VN_SAVED_STATE(n, struct pool_saved);
    const vn_tensor *x = n->inputs[0];
    vn_tensor *gc = vn__plain_contiguous(gout), *dx = gc ? new_grad(x) : NULL;
    conv_geom g = saved_geom(p, x, gout);
    vn_status st = !dx ? VN_ERR_MEMORY
                   : vn__is_cuda(x)
                       ? (cuda_ok(vnk_avg_pool2d_backward(vn__ptr(dx), vn__ptr(gc), &g, p->adaptive),
                                  n->name) ? VN_OK : vn_last_status())
                       : avg_run(p, g.B * g.C, g.H, g.W, g.Ho, g.Wo, NULL, NULL, vn__ptr(gc),
                                 vn__ptr(dx));
    vn_tensor_release(gc);
    if (!st) return vn__accum(n, 0, dx);
    vn_tensor_release(dx);
    return st;
}

static vn_tensor *avg_pool(const char *op, const vn_tensor *x, const struct pool_saved *p,
                           const conv_geom *g)
{
    vn_tensor *xc = vn__plain_contiguous(x), *out = xc ? new_out(op, x, g, VN_F32) : NULL;
    bool ok = !out ? false
              : vn__is_cuda(x) ? cuda_ok(vnk_avg_pool2d(vn__ptr(out), vn__ptr(xc), g, p->adaptive), op)
                               : !avg_run(p, g->B * g->C, g->H, g->W, g->Ho, g->Wo, vn__ptr(xc),
                                          vn__ptr(out), NULL, NULL);
    if (out && !ok) {
        vn_tensor_release(out);
        out = NULL;
    }
    vn_tensor_release(xc);
    if (out) {
        vn_node *n = vn__record(out, op, avg_backward, 1, &x);
        if (n) *VN_SAVED_STATE(n, struct pool_saved) = *p;
    }
    return out;
}

vn_tensor *vn_avg_pool2d(const vn_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                         const int64_t padding[2])
{
    conv_geom g;
    if (pool_geom("avg_pool2d", x, kernel, stride, padding, &g)) return NULL;
    struct pool_saved p = {{g.kh, g.kw}, {g.sh, g.sw}, {g.ph, g.pw}, false};
    return avg_pool("avg_pool2d", x, &p, &g);
}

vn_tensor *vn_adaptive_avg_pool2d(const vn_tensor *x, int64_t oh, int64_t ow)
{
    const char *op = "adaptive_avg_pool2d";
    if (oh < 1 || ow < 1 || oh > INT32_MAX || ow > INT32_MAX)
        return vn__errp(VN_ERR_ARG, "%s: output size (%lld, %lld), expected sizes in [1, 2^31)", op,
                        (long long)oh, (long long)ow);
    if (vn__check_dtype_arg(x, VN_F32, op, "input", VN_ALLOW_CUDA)) return NULL;
    if (x->ndim != 4 || x->shape[2] < 1 || x->shape[3] < 1)
        return vn__errp(VN_ERR_SHAPE, "%s: input of shape %s, expected (B, C, H, W) with H, W >= 1",
                        op, vn__shape(x->ndim, x->shape));
    conv_geom g = {x->shape[0], x->shape[1], x->shape[2], x->shape[3], 1, 1, 1, 1, 0, 0, 1, 1,
                   oh, ow};
    struct pool_saved p = {{oh, ow}, {1, 1}, {0, 0}, true};
    return avg_pool(op, x, &p, &g);
}
