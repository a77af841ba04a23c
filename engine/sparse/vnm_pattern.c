/* vnm_pattern.c — a V:N:M matrix's pattern as plain tensors and back, so that
 * a checkpoint can store a sparse layer (values + column locations + 2-bit
 * indices + V, N, M) and restore it exactly, whatever the pattern a fresh
 * model would have chosen. Restoring checks every entry: a corrupt file
 * gives an error naming the bad entry, never a matrix the kernels would
 * read out of bounds. */
#include "vnm_internal.h"

#include <stdio.h>
#include <stdlib.h>

vn_tensor *vn_vnm_columns(const vn_vnm *s)
{
    if (!s) return vn__errp(VN_ERR_ARG, "vnm_columns: the matrix is NULL");
    vnm_pattern p = vnm__pattern_of(s);
    int64_t shape[3] = {p.nblocks, p.G, 4};
    vn_tensor *t = vn_empty(VN_I32, 3, shape);
    if (!t) return NULL;
    int32_t *out = vn_tensor_data(t);
    for (int64_t i = 0; i < p.nblocks * p.G * 4; i++) out[i] = p.cols[i];
    return t;
}

vn_tensor *vn_vnm_indices(const vn_vnm *s)
{
    if (!s) return vn__errp(VN_ERR_ARG, "vnm_indices: the matrix is NULL");
    vnm_pattern p = vnm__pattern_of(s);
    int64_t shape[2] = {p.R, p.idx_stride};
    return vn_from_data(VN_U8, 2, shape, p.idx);
}

/* VN_ERR_SHAPE/DTYPE unless t is a `dtype` tensor of the given shape. */
static vn_status check_array(const vn_tensor *t, vn_dtype dtype, int ndim, const int64_t *shape,
                             const char *what, unsigned allow)
{
    char name[64], got[128], want[128];
    snprintf(name, sizeof name, "vnm_from_pattern: %s", what);
    vn_status st = vn__check_dtype_for(t, dtype, name, allow);
    if (st) return st;
    bool same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same)
        return vn__err(VN_ERR_SHAPE, "vnm_from_pattern: %s of shape %s, expected %s", what,
                       vn_shape_str(t->ndim, t->shape, got, sizeof got),
                       vn_shape_str(ndim, shape, want, sizeof want));
    return VN_OK;
}

/* Copies the column locations in, checking that each group's 4 are
 * ascending offsets in 0..M−1. */
static vn_status load_columns(const vnm_pattern *p, const int32_t *in, uint16_t *cols)
{
    for (int64_t e = 0; e < p->nblocks * p->G; e++) {
        const int32_t *c = in + 4 * e;
        for (int j = 0; j < 4; j++)
            if (c[j] < 0 || c[j] >= p->M || (j > 0 && c[j] <= c[j - 1]))
                return vn__err(VN_ERR_ARG, "vnm_from_pattern: columns (%lld, %lld) are {%d, %d, "
                               "%d, %d}; expected 4 ascending offsets in 0..%lld",
                               (long long)(e / p->G), (long long)(e % p->G), c[0], c[1], c[2],
                               c[3], (long long)(p->M - 1));
        for (int j = 0; j < 4; j++) cols[4 * e + j] = (uint16_t)c[j];
    }
    return VN_OK;
}

/* Checks the packed indices: each pair names two distinct kept columns, in
 * order, and the unused nibble after an odd last group is 0. */
static vn_status check_indices(const vnm_pattern *p, const uint8_t *idx)
{
    for (int64_t r = 0; r < p->R; r++) {
        for (int64_t g = 0; g < p->G; g++) {
            int nib = idx[r * p->idx_stride + g / 2] >> ((g & 1) * 4) & 15;
            if ((nib & 3) >= (nib >> 2))
                return vn__err(VN_ERR_ARG, "vnm_from_pattern: indices of row %lld, group %lld "
                               "are %d and %d; expected two positions 0..3 in ascending order",
                               (long long)r, (long long)g, nib & 3, nib >> 2);
        }
        if (p->G % 2 && idx[r * p->idx_stride + p->G / 2] >> 4)
            return vn__err(VN_ERR_ARG, "vnm_from_pattern: row %lld has bits set after its last "
                           "group", (long long)r);
    }
    return VN_OK;
}

vn_vnm *vn_vnm_from_pattern(int64_t R, int64_t K, int64_t V, int64_t N, int64_t M,
                            const vn_tensor *columns, const vn_tensor *indices, vn_tensor *values)
{
    if (vnm__check_params("vnm_from_pattern", R, K, V, N, M)) return NULL;
    vnm_pattern p;
    int64_t nbytes = (int64_t)vnm__layout(&p, R, K, V, M, NULL);
    int64_t cshape[3] = {p.nblocks, p.G, 4}, ishape[2] = {R, p.idx_stride}, vshape[2] = {R, 2 * p.G};
    /* The values are only referenced, so they may live on the GPU. */
    if (check_array(columns, VN_I32, 3, cshape, "columns", 0) ||
        check_array(indices, VN_U8, 2, ishape, "indices", 0) ||
        (values && check_array(values, VN_F32, 2, vshape, "values", VN_ALLOW_CUDA)))
        return NULL;
    if (values && !vn_tensor_is_contiguous(values))
        return vn__errp(VN_ERR_ARG, "vnm_from_pattern: values must be contiguous");
    vn_tensor *cc = vn_contiguous(columns), *ic = cc ? vn_contiguous(indices) : NULL;
    vn_vnm *s = ic ? calloc(1, sizeof *s) : NULL;
    if (ic && !s) vn__err(VN_ERR_MEMORY, "vnm_from_pattern: out of memory");
    if (s) {
        s->R = R, s->K = K, s->V = V, s->M = M;
        s->blob = vn_zeros(VN_U8, 1, &nbytes);
        s->values = !s->blob ? NULL : values ? vn_tensor_retain(values) : vn_zeros(VN_F32, 2, vshape);
    }
    if (s && s->values) {
        vnm__layout(&p, R, K, V, M, vn_tensor_data(s->blob));
        if (load_columns(&p, vn_tensor_data(cc), (uint16_t *)p.cols) ||
            check_indices(&p, vn_tensor_data(ic))) {
            vn_vnm_free(s);
            s = NULL;
        } else {
            memcpy((uint8_t *)p.idx, vn_tensor_data(ic), (size_t)(R * p.idx_stride));
            vnm__build_transposed(&p, (int32_t *)p.t_start, (int32_t *)p.t_code);
        }
    } else if (s) {
        vn_vnm_free(s);
        s = NULL;
    }
    vn_tensor_release(cc);
    vn_tensor_release(ic);
    return s;
}
