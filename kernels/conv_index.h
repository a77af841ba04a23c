/* conv_index.h — the index arithmetic of the sliding-window ops (im2col,
 * col2im, max/avg/adaptive pooling and their backward), written once for the
 * CUDA kernels (kernels/conv.cu, pool.cu, compiled by nvcc) and for the host
 * test that replays those kernels element by element on the CPU and compares
 * them with the CPU ops (tests/c/test_conv_index.c), so the index math is
 * checked without a GPU. Plain C: no tensors, no CUDA types.
 *
 * Each *_at function computes one output element; each *_thread function is
 * the whole body of a kernel's grid-stride loop for flat element t (the
 * split of t into indices, the read and the store), so the host test runs
 * exactly what a GPU thread runs. The backward ones gather (each thread sums what reaches its input
 * element) instead of scattering with atomics, so they are deterministic,
 * and they add in the order the CPU loops of engine/ops_conv.c and
 * ops_pool.c add (kernel offsets, then output positions, in row-major
 * order), so their sums are the CPU's bit for bit. */
#ifndef VENOM_KERNELS_CONV_INDEX_H
#define VENOM_KERNELS_CONV_INDEX_H

#include <stdbool.h>
#include <stdint.h>

#include "scalar.h" /* VN_HD */

/* A window sliding over NCHW images: input (B, C, H, W), kernel kh × kw,
 * stride, padding, dilation, output Ho × Wo (filled by the engine's checks,
 * engine/ops_conv.c conv__geom). */
typedef struct {
    int64_t B, C, H, W;             /* input */
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t Ho, Wo;                 /* output */
} conv_geom;

/* ---- im2col / col2im ---------------------------------------------------------- */

/* Element (r, l) of one image's columns, r = (c·kh + p)·kw + q and
 * l = oy·Wo + ox: x[c, oy·sh − ph + p·dh, ox·sw − pw + q·dw], 0 in the
 * padding. x is that image (C, H, W). */
static inline VN_HD float conv_im2col_at(const conv_geom *g, const float *x, int64_t r, int64_t l)
{
    int64_t q = r % g->kw, p = (r / g->kw) % g->kh, c = r / (g->kw * g->kh);
    int64_t iy = (l / g->Wo) * g->sh - g->ph + p * g->dh;
    int64_t ix = (l % g->Wo) * g->sw - g->pw + q * g->dw;
    if (iy < 0 || iy >= g->H || ix < 0 || ix >= g->W) return 0.0f;
    return x[(c * g->H + iy) * g->W + ix];
}

/* The output row (or column) o whose window reads input row i through
 * kernel offset p, o·s − pad + p·d = i: o = (i + pad − p·d)/s when that is
 * a whole number in [0, out), else −1. */
static inline VN_HD int64_t conv_output_of(int64_t i, int64_t p, int64_t s, int64_t pad, int64_t d,
                                           int64_t out)
{
    int64_t t = i + pad - p * d;
    if (t < 0 || t % s) return -1;
    return t / s < out ? t / s : -1;
}

/* col2im at input element (c, iy, ix) of image i: the sum of every column
 * value im2col took from there (rows of image i at cols + i·istride +
 * r·ldc), over the kernel offsets (p, q) in row-major order. */
static inline VN_HD float conv_col2im_at(const conv_geom *g, const float *cols, int64_t istride,
                                         int64_t ldc, int64_t i, int64_t c, int64_t iy, int64_t ix)
{
    float s = 0.0f;
    for (int64_t p = 0; p < g->kh; p++) {
        int64_t oy = conv_output_of(iy, p, g->sh, g->ph, g->dh, g->Ho);
        if (oy < 0) continue;
        for (int64_t q = 0; q < g->kw; q++) {
            int64_t ox = conv_output_of(ix, q, g->sw, g->pw, g->dw, g->Wo);
            if (ox < 0) continue;
            int64_t r = (c * g->kh + p) * g->kw + q;
            s += cols[i * istride + r * ldc + oy * g->Wo + ox];
        }
    }
    return s;
}

/* ---- pooling windows ------------------------------------------------------------ */

/* [*lo, *hi): the input rows (or columns) of output o's window, clipped to
 * the image: fixed windows o·s − pad … o·s − pad + k, or adaptive ones
 * ⌊o·in/out⌋ … ⌈(o + 1)·in/out⌉. */
static inline VN_HD void pool_window(int64_t o, int64_t in, int64_t out, int64_t k, int64_t s,
                                     int64_t pad, bool adaptive, int64_t *lo, int64_t *hi)
{
    if (adaptive) {
        *lo = o * in / out;
        *hi = ((o + 1) * in + out - 1) / out;
        return;
    }
    int64_t a = o * s - pad, b = a + k;
    *lo = a < 0 ? 0 : a;
    *hi = b > in ? in : b;
}

/* ⌊a/b⌋ for b > 0 and any a (C's / truncates toward zero). */
static inline VN_HD int64_t floor_div(int64_t a, int64_t b)
{
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/* [*lo, *hi): the outputs whose windows (pool_window) hold input i.
 * Fixed: o·s − pad ≤ i < o·s − pad + k, so ⌊(i + pad − k)/s⌋ < o ≤
 * ⌊(i + pad)/s⌋. Adaptive: ⌊o·in/out⌋ ≤ i < ⌈(o + 1)·in/out⌉ holds for
 * ⌊i·out/in⌋ ≤ o < ⌈(i + 1)·out/in⌉. Clipped to [0, out). */
static inline VN_HD void pool_outputs_of(int64_t i, int64_t in, int64_t out, int64_t k, int64_t s,
                                         int64_t pad, bool adaptive, int64_t *lo, int64_t *hi)
{
    if (adaptive) {
        *lo = i * out / in;
        *hi = ((i + 1) * out + in - 1) / in;
    } else {
        *lo = floor_div(i + pad - k, s) + 1;
        *hi = floor_div(i + pad, s) + 1;
    }
    if (*lo < 0) *lo = 0;
    if (*hi > out) *hi = out;
    if (*lo > *hi) *lo = *hi;
}

/* ---- max pooling ------------------------------------------------------------------ */

/* Output (oy, ox) of one plane (H × W): the window's maximum into *m and
 * its flat position iy·W + ix returned. The first maximum in row-major
 * order wins; a NaN beats everything (as in PyTorch); padding never wins. */
static inline VN_HD int64_t max_pool_at(const conv_geom *g, const float *plane, int64_t oy,
                                        int64_t ox, float *m)
{
    int64_t ya, yb, xa, xb, best = -1;
    pool_window(oy, g->H, g->Ho, g->kh, g->sh, g->ph, false, &ya, &yb);
    pool_window(ox, g->W, g->Wo, g->kw, g->sw, g->pw, false, &xa, &xb);
    float v0 = 0.0f;
    for (int64_t iy = ya; iy < yb; iy++)
        for (int64_t ix = xa; ix < xb; ix++) {
            float v = plane[iy * g->W + ix];
            if (best < 0 || v > v0 || (v != v && v0 == v0)) {
                v0 = v;
                best = iy * g->W + ix;
            }
        }
    *m = v0;
    return best;
}

/* The max-pool gradient at input (iy, ix) of one plane: the sum of dy over
 * the outputs whose saved position (idx, flat in the plane) is this one, in
 * row-major output order. dy and idx are the plane's Ho × Wo values. */
static inline VN_HD float max_pool_grad_at(const conv_geom *g, const float *dy, const int64_t *idx,
                                           int64_t iy, int64_t ix)
{
    int64_t ya, yb, xa, xb, at = iy * g->W + ix;
    pool_outputs_of(iy, g->H, g->Ho, g->kh, g->sh, g->ph, false, &ya, &yb);
    pool_outputs_of(ix, g->W, g->Wo, g->kw, g->sw, g->pw, false, &xa, &xb);
    float s = 0.0f;
    for (int64_t oy = ya; oy < yb; oy++)
        for (int64_t ox = xa; ox < xb; ox++)
            if (idx[oy * g->Wo + ox] == at) s += dy[oy * g->Wo + ox];
    return s;
}

/* ---- average pooling (fixed and adaptive windows) ------------------------------ */

/* The divisor of output (oy, ox): kh·kw for fixed windows (the zero padding
 * counted), the window's size for adaptive ones. */
static inline VN_HD double avg_pool_divisor(const conv_geom *g, bool adaptive, int64_t oy,
                                            int64_t ox)
{
    if (!adaptive) return (double)(g->kh * g->kw);
    int64_t ya, yb, xa, xb;
    pool_window(oy, g->H, g->Ho, g->kh, g->sh, g->ph, true, &ya, &yb);
    pool_window(ox, g->W, g->Wo, g->kw, g->sw, g->pw, true, &xa, &xb);
    return (double)((yb - ya) * (xb - xa));
}

/* Output (oy, ox) of one plane: the window's mean (summed in double). */
static inline VN_HD float avg_pool_at(const conv_geom *g, bool adaptive, const float *plane,
                                      int64_t oy, int64_t ox)
{
    int64_t ya, yb, xa, xb;
    pool_window(oy, g->H, g->Ho, g->kh, g->sh, g->ph, adaptive, &ya, &yb);
    pool_window(ox, g->W, g->Wo, g->kw, g->sw, g->pw, adaptive, &xa, &xb);
    double s = 0;
    for (int64_t iy = ya; iy < yb; iy++)
        for (int64_t ix = xa; ix < xb; ix++) s += plane[iy * g->W + ix];
    return (float)(s / avg_pool_divisor(g, adaptive, oy, ox));
}

/* The average-pool gradient at input (iy, ix) of one plane: each output
 * whose window holds it gives dy/divisor, summed in row-major output order
 * (dy: the plane's Ho × Wo values). */
static inline VN_HD float avg_pool_grad_at(const conv_geom *g, bool adaptive, const float *dy,
                                           int64_t iy, int64_t ix)
{
    int64_t ya, yb, xa, xb;
    pool_outputs_of(iy, g->H, g->Ho, g->kh, g->sh, g->ph, adaptive, &ya, &yb);
    pool_outputs_of(ix, g->W, g->Wo, g->kw, g->sw, g->pw, adaptive, &xa, &xb);
    float s = 0.0f;
    for (int64_t oy = ya; oy < yb; oy++)
        for (int64_t ox = xa; ox < xb; ox++)
            s += (float)(dy[oy * g->Wo + ox] / avg_pool_divisor(g, adaptive, oy, ox));
    return s;
}

/* ---- the kernels' loop bodies, element t of the output ----------------------- */

/* im2col, t < nb·C·kh·kw·Ho·Wo: row r of image i at cols + i·istride + r·ldc. */
static inline VN_HD void im2col_thread(const conv_geom *g, float *cols, const float *x,
                                       int64_t istride, int64_t ldc, int64_t t)
{
    int64_t K = g->C * g->kh * g->kw, L = g->Ho * g->Wo;
    int64_t i = t / (K * L), r = t / L % K, l = t % L;
    cols[i * istride + r * ldc + l] = conv_im2col_at(g, x + i * g->C * g->H * g->W, r, l);
}

/* col2im, t < nb·C·H·W (dx overwritten). */
static inline VN_HD void col2im_thread(const conv_geom *g, float *dx, const float *cols,
                                       int64_t istride, int64_t ldc, int64_t t)
{
    int64_t ix = t % g->W, iy = t / g->W % g->H, c = t / (g->W * g->H) % g->C;
    dx[t] = conv_col2im_at(g, cols, istride, ldc, t / (g->W * g->H * g->C), c, iy, ix);
}

/* The GEMM's (Cout, nb·L) ↔ images (nb, Cout, L), t < nb·Cout·L. */
static inline VN_HD void regroup_thread(float *dst, const float *src, int64_t nb, int64_t Cout,
                                        int64_t L, const float *bias, bool to_images, int64_t t)
{
    int64_t l = t % L;
    if (to_images) { /* t = (i·Cout + o)·L + l */
        int64_t o = t / L % Cout, i = t / (L * Cout);
        dst[t] = src[(o * nb + i) * L + l] + (bias ? bias[o] : 0.0f);
    } else { /* t = (o·nb + i)·L + l */
        int64_t i = t / L % nb, o = t / (L * nb);
        dst[t] = src[(i * Cout + o) * L + l];
    }
}

/* Pooling forward, t < B·C·Ho·Wo; backward, t < B·C·H·W. */
static inline VN_HD void max_pool_thread(const conv_geom *g, float *y, int64_t *idx,
                                         const float *x, int64_t t)
{
    int64_t L = g->Ho * g->Wo, l = t % L;
    float m;
    idx[t] = max_pool_at(g, x + t / L * g->H * g->W, l / g->Wo, l % g->Wo, &m);
    y[t] = m;
}

static inline VN_HD void max_pool_backward_thread(const conv_geom *g, float *dx, const float *dy,
                                                  const int64_t *idx, int64_t t)
{
    int64_t HW = g->H * g->W, L = g->Ho * g->Wo, pl = t / HW, at = t % HW;
    dx[t] = max_pool_grad_at(g, dy + pl * L, idx + pl * L, at / g->W, at % g->W);
}

static inline VN_HD void avg_pool_thread(const conv_geom *g, bool adaptive, float *y,
                                         const float *x, int64_t t)
{
    int64_t L = g->Ho * g->Wo, l = t % L;
    y[t] = avg_pool_at(g, adaptive, x + t / L * g->H * g->W, l / g->Wo, l % g->Wo);
}

static inline VN_HD void avg_pool_backward_thread(const conv_geom *g, bool adaptive, float *dx,
                                                  const float *dy, int64_t t)
{
    int64_t HW = g->H * g->W, L = g->Ho * g->Wo, pl = t / HW, at = t % HW;
    dx[t] = avg_pool_grad_at(g, adaptive, dy + pl * L, at / g->W, at % g->W);
}

#endif
