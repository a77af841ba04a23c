/* conv.cu — the data movement of conv2d on the GPU: im2col, col2im and the
 * regrouping between the GEMM's (Cout, nb·L) layout and images; the GEMMs
 * themselves are cuBLAS (vnk_gemm, gemm.cu), driven by engine/ops_conv.c
 * exactly as it drives OpenBLAS on the CPU. One thread per output element;
 * the index math is conv_index.h's, which tests/c/test_conv_index.c replays
 * on the CPU against the CPU ops. */
#include "internal.cuh"

static __global__ void im2col_kernel(float *cols, const float *x, conv_geom g, int64_t total,
                                     int64_t istride, int64_t ldc)
{
    for (int64_t t = VNK_GRID_START; t < total; t += VNK_GRID_STEP)
        im2col_thread(&g, cols, x, istride, ldc, t);
}

static __global__ void col2im_kernel(float *dx, const float *cols, conv_geom g, int64_t total,
                                     int64_t istride, int64_t ldc)
{
    for (int64_t t = VNK_GRID_START; t < total; t += VNK_GRID_STEP)
        col2im_thread(&g, dx, cols, istride, ldc, t);
}

static int check_geom(const conv_geom *g, const char *kernel)
{
    if (!g || g->C < 0 || g->H < 0 || g->W < 0 || g->Ho < 0 || g->Wo < 0 || g->kh < 1 ||
        g->kw < 1 || g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1)
        return vnk__fail("%s: bad geometry (the engine checks it first)", kernel);
    return 0;
}

int vnk_im2col(float *cols, const float *x, const conv_geom *g, int64_t nb, int64_t istride,
               int64_t ldc)
{
    if (check_geom(g, "vnk_im2col")) return 1;
    int64_t total = nb * g->C * g->kh * g->kw * g->Ho * g->Wo;
    if (total <= 0) return 0;
    if (!cols || !x) return vnk__fail("vnk_im2col: NULL pointer");
    im2col_kernel<<<vnk__blocks(total, VNK_THREADS), VNK_THREADS>>>(cols, x, *g, total, istride, ldc);
    return vnk__launched("vnk_im2col");
}

int vnk_col2im(float *dx, const float *cols, const conv_geom *g, int64_t nb, int64_t istride,
               int64_t ldc)
{
    if (check_geom(g, "vnk_col2im")) return 1;
    int64_t total = nb * g->C * g->H * g->W;
    if (total <= 0) return 0;
    if (!cols || !dx) return vnk__fail("vnk_col2im: NULL pointer");
    col2im_kernel<<<vnk__blocks(total, VNK_THREADS), VNK_THREADS>>>(dx, cols, *g, total, istride, ldc);
    return vnk__launched("vnk_col2im");
}

static __global__ void regroup_kernel(float *dst, const float *src, int64_t nb, int64_t Cout,
                                      int64_t L, const float *bias, bool to_images)
{
    for (int64_t t = VNK_GRID_START; t < nb * Cout * L; t += VNK_GRID_STEP)
        regroup_thread(dst, src, nb, Cout, L, bias, to_images, t);
}

int vnk_conv_regroup(float *dst, const float *src, int64_t nb, int64_t Cout, int64_t L,
                     const float *bias, bool to_images)
{
    if (nb < 0 || Cout < 0 || L < 0) return vnk__fail("vnk_conv_regroup: negative size");
    int64_t total = nb * Cout * L;
    if (total == 0) return 0;
    if (!dst || !src) return vnk__fail("vnk_conv_regroup: NULL pointer");
    regroup_kernel<<<vnk__blocks(total, VNK_THREADS), VNK_THREADS>>>(dst, src, nb, Cout, L, bias,
                                                                    to_images);
    return vnk__launched("vnk_conv_regroup");
}
