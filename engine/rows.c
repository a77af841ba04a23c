/* rows.c — the row side of the sparse–dense transformation (SparDA / PIT):
 * gather the rows a computation needs into a dense block, and scatter-add
 * the block's rows back. One implementation for every user: the MoE
 * dispatch (an expert's token rows, ops_moe.c), index_select's gradient
 * (views.c), the activation-sparse ops (the kept rows of Wᵀ, W1 and their
 * gradients; the real, non-padding rows of a variable-length batch). */
#include "internal.h"

#include <omp.h>
#include <stdlib.h>

/* Both loops split the width among the threads, never the rows: repeated
 * indices then add up in the order of k on every thread count (no race,
 * the same sums every run). One slice of the width per thread, not many
 * short ones: a row copied in one piece is one run of consecutive lines
 * for the prefetcher, and rows of 4 KB (a page) cut into 1 KB pieces were
 * 30% slower to gather from memory (16 gathers of 512 of 4096 rows of 4
 * KB, one thread). A slice is a multiple of 16 floats (a 64-byte line:
 * no two threads write to one line where the rows start on a line); the
 * last thread's may be short or empty. */
static int64_t rows_slice(int64_t m, int64_t width, int *nt)
{
    *nt = m * width > VN_OMP_MIN_WORK && !omp_in_parallel() ? omp_get_max_threads() : 1;
    int64_t per = (width + *nt - 1) / *nt;
    return (per + 15) / 16 * 16;
}

void vn__gather_rows_f32(float *dst, const float *src, const int64_t *idx, const float *w, int64_t m,
                         int64_t width)
{
    int nt;
    int64_t slice = rows_slice(m, width, &nt);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int p = 0; p < nt; p++) {
        int64_t c0 = p * slice, c1 = c0 + slice < width ? c0 + slice : width;
        if (c0 >= c1) continue;
        for (int64_t k = 0; k < m; k++) {
            const float *s = src + idx[k] * width;
            float *d = dst + k * width, wk = w ? w[k] : 1.0f;
            if (w)
                for (int64_t f = c0; f < c1; f++) d[f] = wk * s[f];
            else
                memcpy(d + c0, s + c0, sizeof(float) * (size_t)(c1 - c0));
        }
    }
}

void vn__scatter_add_rows_f32(float *dst, const float *src, const int64_t *idx, const float *w, int64_t m,
                              int64_t width)
{
    int nt;
    int64_t slice = rows_slice(m, width, &nt);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int p = 0; p < nt; p++) {
        int64_t c0 = p * slice, c1 = c0 + slice < width ? c0 + slice : width;
        if (c0 >= c1) continue;
        for (int64_t k = 0; k < m; k++) {
            float *d = dst + idx[k] * width, wk = w ? w[k] : 1.0f;
            const float *s = src + k * width;
            if (w)
                for (int64_t f = c0; f < c1; f++) d[f] += wk * s[f];
            else
                for (int64_t f = c0; f < c1; f++) d[f] += s[f];
        }
    }
}

void vn__scatter_rows_first_f32(float *dst, const float *src, const int64_t *idx, int64_t m, int64_t width,
                                const uint8_t *seen)
{
    int nt;
    int64_t slice = rows_slice(m, width, &nt);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int p = 0; p < nt; p++) {
        int64_t c0 = p * slice, c1 = c0 + slice < width ? c0 + slice : width;
        if (c0 >= c1) continue;
        for (int64_t k = 0; k < m; k++) {
            float *d = dst + idx[k] * width;
            const float *s = src + k * width;
            if (seen[idx[k]])
                for (int64_t f = c0; f < c1; f++) d[f] += s[f];
            else
                memcpy(d + c0, s + c0, sizeof(float) * (size_t)(c1 - c0));
        }
    }
}

int64_t *vn__index_list(const vn_tensor *idx)
{
    int64_t m = idx->shape[0];
    int64_t *list = malloc(sizeof(int64_t) * (size_t)(m ? m : 1));
    if (!list)
        return vn__errp(VN_ERR_MEMORY, "out of memory for a list of %lld row indices", (long long)m);
    for (int64_t k = 0; k < m; k++) list[k] = (int64_t)vn__load(idx, vn__offset_of(idx, k));
    return list;
}
