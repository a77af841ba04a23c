/* vnm_densify.cu — the dense W (R × K, 16-bit) of a packed V:N:M matrix, for
 * the input gradient dX = dY·W on cuBLAS (engine/sparse/vnm_cuda.c rebuilds
 * it once per packed-values version and picks between it and k_dx by the
 * rule of engine/sparse/vnm_sptc.h). The index of each packed value is
 * vnm_densify_at (vnm_sptc_index.h), which tests/c/test_vnm_sptc_emu.c
 * replays for every packed value against the host decoder and the CPU's
 * dense matrix. */
#include "internal.cuh"
#include "vnm_sptc_index.h"

/* One thread per packed value (grid-stride): the value's bits stored at its
 * place; padding values (index −1, always 0) are skipped, the zero fill
 * before this kernel gives them. No two values share a place. */
__global__ void k_densify(vnk_vnm w, int64_t n, uint16_t *dense)
{
    for (int64_t j = VNK_GRID_START; j < n; j += VNK_GRID_STEP) {
        const int64_t at = vnm_densify_at(j, w.meta, w.gather, w.R, w.K, w.V, w.k_tiles);
        if (at >= 0) dense[at] = w.values[j];
    }
}

int vnk_vnm_densify(void *dense, const vnk_vnm *w)
{
    if (!w || !w->values || !w->meta || !w->gather || !dense)
        return vnk__fail("vnk_vnm_densify: an array is NULL");
    if (w->dtype != VN_BF16 && w->dtype != VN_F16)
        return vnk__fail("vnk_vnm_densify: expected dtype bf16 or f16, got %s", vn_dtype_name(w->dtype));
    if (w->V % 16 || w->row_tiles != (w->R + 15) / 16 || w->k_tiles != (w->G + 7) / 8)
        return vnk__fail("vnk_vnm_densify: tile counts (%lld, %lld) do not fit R=%lld, G=%lld, V=%lld",
                         (long long)w->row_tiles, (long long)w->k_tiles, (long long)w->R,
                         (long long)w->G, (long long)w->V);
    if (vnk_fill(dense, w->dtype, w->R * w->K, 0)) return 1;
    const int64_t n = w->row_tiles * w->k_tiles * 256;
    if (n == 0) return 0;
    k_densify<<<vnk__blocks(n, VNK_THREADS), VNK_THREADS>>>(*w, n, (uint16_t *)dense);
    return vnk__launched("vnk_vnm_densify (k_densify)");
}
