/* pool.cu — max, average and adaptive average pooling over NCHW planes and
 * their backward. CPU twins in engine/ops_pool.c. One thread per output
 * element (forward) or per input element (backward, which gathers from the
 * outputs whose windows hold it: no atomics, the CPU's order of addition);
 * the windows are conv_index.h's, replayed on the CPU by
 * tests/c/test_conv_index.c. */
#include "internal.cuh"

static __global__ void max_pool_kernel(float *y, int64_t *idx, const float *x, conv_geom g)
{
    for (int64_t t = VNK_GRID_START; t < g.B * g.C * g.Ho * g.Wo; t += VNK_GRID_STEP)
        max_pool_thread(&g, y, idx, x, t);
}

static __global__ void max_pool_backward_kernel(float *dx, const float *dy, const int64_t *idx,
                                                conv_geom g)
{
    for (int64_t t = VNK_GRID_START; t < g.B * g.C * g.H * g.W; t += VNK_GRID_STEP)
        max_pool_backward_thread(&g, dx, dy, idx, t);
}

static __global__ void avg_pool_kernel(float *y, const float *x, conv_geom g, bool adaptive)
{
    for (int64_t t = VNK_GRID_START; t < g.B * g.C * g.Ho * g.Wo; t += VNK_GRID_STEP)
        avg_pool_thread(&g, adaptive, y, x, t);
}

static __global__ void avg_pool_backward_kernel(float *dx, const float *dy, conv_geom g,
                                                bool adaptive)
{
    for (int64_t t = VNK_GRID_START; t < g.B * g.C * g.H * g.W; t += VNK_GRID_STEP)
        avg_pool_backward_thread(&g, adaptive, dx, dy, t);
}

/* Sizes the engine guarantees; a failure here is a bug in the caller. */
static int check_geom(const conv_geom *g, bool adaptive, const char *kernel)
{
    bool ok = g && g->B >= 0 && g->C >= 0 && g->H >= 1 && g->W >= 1 && g->Ho >= 1 && g->Wo >= 1;
    if (ok && !adaptive) ok = g->kh >= 1 && g->kw >= 1 && g->sh >= 1 && g->sw >= 1;
    return ok ? 0 : vnk__fail("%s: bad geometry (the engine checks it first)", kernel);
}

int vnk_max_pool2d(float *y, int64_t *idx, const float *x, const conv_geom *g)
{
    if (check_geom(g, false, "vnk_max_pool2d")) return 1;
    int64_t total = g->B * g->C * g->Ho * g->Wo;
    if (total == 0) return 0;
    if (!y || !idx || !x) return vnk__fail("vnk_max_pool2d: NULL pointer");
    max_pool_kernel<<<vnk__blocks(total, VNK_THREADS), VNK_THREADS>>>(y, idx, x, *g);
    return vnk__launched("vnk_max_pool2d");
}

int vnk_max_pool2d_backward(float *dx, const float *dy, const int64_t *idx, const conv_geom *g)
{
    if (check_geom(g, false, "vnk_max_pool2d_backward")) return 1;
    int64_t total = g->B * g->C * g->H * g->W;
    if (total == 0) return 0;
    if (!dx || !dy || !idx) return vnk__fail("vnk_max_pool2d_backward: NULL pointer");
    max_pool_backward_kernel<<<vnk__blocks(total, VNK_THREADS), VNK_THREADS>>>(dx, dy, idx, *g);
    return vnk__launched("vnk_max_pool2d_backward");
}

int vnk_avg_pool2d(float *y, const float *x, const conv_geom *g, bool adaptive)
{
    if (check_geom(g, adaptive, "vnk_avg_pool2d")) return 1;
    int64_t total = g->B * g->C * g->Ho * g->Wo;
    if (total == 0) return 0;
    if (!y || !x) return vnk__fail("vnk_avg_pool2d: NULL pointer");
    avg_pool_kernel<<<vnk__blocks(total, VNK_THREADS), VNK_THREADS>>>(y, x, *g, adaptive);
    return vnk__launched(adaptive ? "vnk_avg_pool2d(adaptive)" : "vnk_avg_pool2d");
}

int vnk_avg_pool2d_backward(float *dx, const float *dy, const conv_geom *g, bool adaptive)
{
    if (check_geom(g, adaptive, "vnk_avg_pool2d_backward")) return 1;
    int64_t total = g->B * g->C * g->H * g->W;
    if (total == 0) return 0;
    if (!dx || !dy) return vnk__fail("vnk_avg_pool2d_backward: NULL pointer");
    avg_pool_backward_kernel<<<vnk__blocks(total, VNK_THREADS), VNK_THREADS>>>(dx, dy, *g, adaptive);
    return vnk__launched(adaptive ? "vnk_avg_pool2d_backward(adaptive)" : "vnk_avg_pool2d_backward");
}
