/* vnm.c — the V:N:M compressed matrix: choosing the pattern by magnitude,
 * building the compressed arrays, and reading them back (dense, mask, stats).
 * The layout is described in vnm_internal.h; the kernels are in
 * vnm_kernels.c and the differentiable op in vnm_linear.c. */
#include "vnm_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

/* Exhaustive selection looks at every 4-subset of at most this many columns
 * of a group: all M columns when M ≤ 16 (C(16,4) = 1820 subsets), otherwise
 * the 16 with the largest Σ|w| over the block's rows. */
#define VNM_MAX_CANDIDATES 16

/* Rows of a block are scored this many at a time (independent lanes that
 * GCC turns into one vector). */
#define VNM_LANES 8

/* ---- layout ---------------------------------------------------------------- */

size_t vnm__layout(vnm_pattern *p, int64_t R, int64_t K, int64_t V, int64_t M, uint8_t *blob)
{
    p->R = R, p->K = K, p->V = V, p->M = M;
    p->G = (K + M - 1) / M;
    p->Kp = p->G * M;
    p->xrows = p->Kp + (20 - p->Kp % 16) % 16; /* ≡ 4 (mod 16): see vnm_internal.h */
    p->nblocks = (R + V - 1) / V;
    p->idx_stride = (p->G + 1) / 2;
    /* int32 arrays first, then uint16, then bytes: each stays aligned. */
    size_t n_start = (size_t)(p->nblocks * p->G * 4 + 1), n_code = (size_t)(2 * R * p->G);
    size_t n_cols = (size_t)(p->nblocks * p->G * 4), n_idx = (size_t)(R * p->idx_stride);
    size_t off_code = 4 * n_start, off_cols = off_code + 4 * n_code;
    size_t off_idx = off_cols + 2 * n_cols, total = off_idx + n_idx;
    if (blob) {
        p->t_start = (const int32_t *)blob;
        p->t_code = (const int32_t *)(blob + off_code);
        p->cols = (const uint16_t *)(blob + off_cols);
        p->idx = blob + off_idx;
    }
    return total;
}

vnm_pattern vnm__pattern_of(const vn_vnm *s)
{
    vnm_pattern p;
    vnm__layout(&p, s->R, s->K, s->V, s->M, vn_tensor_data(s->blob));
    return p;
}

/* ---- selection --------------------------------------------------------------- */

/* Sum of the two largest of four non-negative numbers. */
static inline float top2(float a, float b, float c, float d)
{
    float hi1 = a > b ? a : b, lo1 = a > b ? b : a;
    float hi2 = c > d ? c : d, lo2 = c > d ? d : c;
    float top = hi1 > hi2 ? hi1 : hi2, mid = hi1 > hi2 ? hi2 : hi1;
    float low = lo1 > lo2 ? lo1 : lo2;
    return top + (mid > low ? mid : low);
}

/* Score of keeping columns (c0, c1, c2, c3) of a block: Σ over rows of the
 * two largest |w| among them. mag holds |w| column by column, vp rows each
 * (vp a multiple of VNM_LANES, extra rows 0). */
static double subset_score(const float *mag, int64_t vp, int c0, int c1, int c2, int c3)
{
    const float *a = mag + c0 * vp, *b = mag + c1 * vp, *c = mag + c2 * vp, *d = mag + c3 * vp;
    float acc[VNM_LANES] = {0};
    for (int64_t v = 0; v < vp; v += VNM_LANES)
        for (int l = 0; l < VNM_LANES; l++) acc[l] += top2(a[v + l], b[v + l], c[v + l], d[v + l]);
    double sum = 0;
    for (int l = 0; l < VNM_LANES; l++) sum += acc[l];
    return sum;
}

/* The 4 columns (offsets in the group, ascending) that block rows keep:
 * the subset of the candidates with the largest subset_score, the first in
 * lexicographic order on ties. Candidates are all M columns, or for
 * M > VNM_MAX_CANDIDATES the VNM_MAX_CANDIDATES with the largest Σ|w|
 * (lower offset first on ties). */
static void select_columns(const float *mag, int64_t vp, int64_t M, uint16_t out[4])
{
    int cand[VNM_MAX_CANDIDATES], nc = 0;
    if (M <= VNM_MAX_CANDIDATES) {
        for (int m = 0; m < M; m++) cand[nc++] = m;
    } else {
        double sums[VNM_MAX_CANDIDATES];
        for (int64_t m = 0; m < M; m++) {
            double s = 0;
            for (int64_t v = 0; v < vp; v++) s += mag[m * vp + v];
            /* Insert into the list of the best so far, kept by decreasing sum. */
            int at = nc;
            while (at > 0 && s > sums[at - 1]) at--;
            if (at >= VNM_MAX_CANDIDATES) continue;
            if (nc < VNM_MAX_CANDIDATES) nc++;
            for (int k = nc - 1; k > at; k--) sums[k] = sums[k - 1], cand[k] = cand[k - 1];
            sums[at] = s, cand[at] = (int)m;
        }
        for (int i = 1; i < nc; i++) /* ascending offsets */
            for (int k = i; k > 0 && cand[k] < cand[k - 1]; k--) {
                int t = cand[k];
                cand[k] = cand[k - 1], cand[k - 1] = t;
            }
    }
    double best = -1;
    for (int i = 0; i < nc; i++)
        for (int j = i + 1; j < nc; j++)
            for (int k = j + 1; k < nc; k++)
                for (int l = k + 1; l < nc; l++) {
                    double s = subset_score(mag, vp, cand[i], cand[j], cand[k], cand[l]);
                    if (s > best) {
                        best = s;
                        out[0] = (uint16_t)cand[i], out[1] = (uint16_t)cand[j];
                        out[2] = (uint16_t)cand[k], out[3] = (uint16_t)cand[l];
                    }
                }
}

/* The two of the four kept columns with the largest |w| (the lower one on
 * ties), as positions 0..3 in ascending order. */
static void select_pair(const float *w4, int *first, int *second)
{
    int a = 0;
    for (int j = 1; j < 4; j++)
        if (fabsf(w4[j]) > fabsf(w4[a])) a = j;
    int b = a == 0 ? 1 : 0;
    for (int j = 0; j < 4; j++)
        if (j != a && fabsf(w4[j]) > fabsf(w4[b])) b = j;
    *first = a < b ? a : b;
    *second = a < b ? b : a;
}

/* Fills the block's column locations, 2-bit indices and values from w
 * (contiguous R × K). mag is scratch of M × vp floats. */
static void compress_block(const vnm_pattern *p, const float *w, int64_t rb, float *mag,
                           int64_t vp, uint16_t *cols, uint8_t *idx, float *values)
{
    int64_t r0 = rb * p->V, rows = p->R - r0 < p->V ? p->R - r0 : p->V;
    for (int64_t g = 0; g < p->G; g++) {
        for (int64_t m = 0; m < p->M; m++) {
            int64_t c = g * p->M + m;
            for (int64_t v = 0; v < vp; v++)
                mag[m * vp + v] = v < rows && c < p->K ? fabsf(w[(r0 + v) * p->K + c]) : 0;
        }
        uint16_t *cl = cols + (rb * p->G + g) * 4;
        select_columns(mag, vp, p->M, cl);
        for (int64_t v = 0; v < rows; v++) {
            int64_t r = r0 + v;
            float w4[4];
            for (int j = 0; j < 4; j++) {
                int64_t c = g * p->M + cl[j];
                w4[j] = c < p->K ? w[r * p->K + c] : 0;
            }
            int i0, i1;
            select_pair(w4, &i0, &i1);
            idx[r * p->idx_stride + g / 2] |= (uint8_t)((i0 | i1 << 2) << ((g & 1) * 4));
            values[r * 2 * p->G + 2 * g] = w4[i0];
            values[r * 2 * p->G + 2 * g + 1] = w4[i1];
        }
    }
}

void vnm__build_transposed(const vnm_pattern *p, int32_t *t_start, int32_t *t_code)
{
    int32_t e = 0;
    for (int64_t rb = 0; rb < p->nblocks; rb++) {
        int64_t r0 = rb * p->V, r1 = p->R < r0 + p->V ? p->R : r0 + p->V;
        for (int64_t g = 0; g < p->G; g++)
            for (int j = 0; j < 4; j++) {
                t_start[(rb * p->G + g) * 4 + j] = e;
                for (int64_t r = r0; r < r1; r++)
                    for (int slot = 0; slot < 2; slot++)
                        if (vnm__index(p, r, g, slot) == j) t_code[e++] = (int32_t)(r * 2 + slot);
            }
    }
    t_start[p->nblocks * p->G * 4] = e;
}

/* ---- public API ------------------------------------------------------------------ */

vn_status vnm__check_params(const char *op, int64_t R, int64_t K, int64_t V, int64_t N, int64_t M)
{
    if (V < 1) return vn__err(VN_ERR_ARG, "%s: V must be >= 1, got V=%lld", op, (long long)V);
    if (N != 2)
        return vn__err(VN_ERR_ARG, "%s: N must be 2 (2 of the 4 kept columns per row, the 2:4 "
                       "pattern of Sparse Tensor Cores), got N=%lld", op, (long long)N);
    if (M < 4) return vn__err(VN_ERR_ARG, "%s: M must be >= 4, got M=%lld", op, (long long)M);
    if (M > UINT16_MAX)
        return vn__err(VN_ERR_ARG, "%s: M must be <= %d, got M=%lld", op, UINT16_MAX, (long long)M);
    if (K < M)
        return vn__err(VN_ERR_SHAPE, "%s: the weight has %lld columns, fewer than M=%lld (each "
                       "group of M columns keeps 4)", op, (long long)K, (long long)M);
    if (R < 1) return vn__err(VN_ERR_SHAPE, "%s: the weight has no rows", op);
    int64_t G = (K + M - 1) / M;
    /* Counts and offsets are int32 in the kernels: 2·R·G values, and panel
     * offsets up to Kp·VNM_PANEL floats. */
    if (R > INT32_MAX / 2 / G || G * M > INT32_MAX / VNM_PANEL)
        return vn__err(VN_ERR_ARG, "%s: a %lld × %lld matrix is too large for the V:N:M "
                       "kernels' 32-bit offsets", op, (long long)R, (long long)K);
    return VN_OK;
}

/* The first non-finite weight, as a VN_ERR_ARG naming its position. */
static vn_status check_finite(const float *w, int64_t R, int64_t K)
{
    for (int64_t i = 0; i < R * K; i++)
        if (!isfinite(w[i]))
            return vn__err(VN_ERR_ARG, "vnm_from_dense: weight (%lld, %lld) is %s; selection by "
                           "magnitude needs finite weights", (long long)(i / K),
                           (long long)(i % K), isnan(w[i]) ? "nan" : w[i] > 0 ? "inf" : "-inf");
    return VN_OK;
}

vn_vnm *vn_vnm_from_dense(const vn_tensor *w, int64_t V, int64_t N, int64_t M)
{
    if (vn__check_dtype(w, VN_F32, "vnm_from_dense: weight")) return NULL;
    if (w->ndim != 2)
        return vn__errp(VN_ERR_SHAPE, "vnm_from_dense: weight must be 2-D (rows, cols), got %s",
                        vn__shape(w->ndim, w->shape));
    int64_t R = w->shape[0], K = w->shape[1];
    if (vnm__check_params("vnm_from_dense", R, K, V, N, M)) return NULL;
    vn_tensor *wc = vn_contiguous(w);
    if (!wc) return NULL;
    const float *pw = vn_tensor_data(wc);
    vn_vnm *s = NULL;
    if (check_finite(pw, R, K)) goto done;

    vnm_pattern p;
    int64_t nbytes = (int64_t)vnm__layout(&p, R, K, V, M, NULL);
    int64_t vshape[2] = {R, 2 * p.G};
    s = calloc(1, sizeof *s);
    if (!s) {
        vn__err(VN_ERR_MEMORY, "vnm_from_dense: out of memory");
        goto done;
    }
    s->R = R, s->K = K, s->V = V, s->M = M;
    s->blob = vn_zeros(VN_U8, 1, &nbytes);
    s->values = s->blob ? vn_zeros(VN_F32, 2, vshape) : NULL;
    if (!s->values) {
        vn_vnm_free(s);
        s = NULL;
        goto done;
    }
    uint8_t *blob = vn_tensor_data(s->blob);
    vnm__layout(&p, R, K, V, M, blob);
    int64_t vp = (V < R ? V : R);
    vp = (vp + VNM_LANES - 1) / VNM_LANES * VNM_LANES;
    bool oom = false;
#pragma omp parallel reduction(|| : oom)
    {
        size_t mbytes = sizeof(float) * (size_t)(vp * M);
        float *mag = vn__mem_alloc(mbytes);
        oom = !mag;
#pragma omp for schedule(dynamic)
        for (int64_t rb = 0; rb < p.nblocks; rb++)
            if (mag)
                compress_block(&p, pw, rb, mag, vp, (uint16_t *)p.cols, (uint8_t *)p.idx,
                               vn_tensor_data(s->values));
        if (mag) vn__mem_free(mag, mbytes);
    }
    if (oom) {
        vn__err(VN_ERR_MEMORY, "vnm_from_dense: out of memory for scratch space");
        vn_vnm_free(s);
        s = NULL;
        goto done;
    }
    vnm__build_transposed(&p, (int32_t *)p.t_start, (int32_t *)p.t_code);
done:
    vn_tensor_release(wc);
    return s;
}

void vn_vnm_free(vn_vnm *s)
{
    if (!s) return;
    vn_tensor_release(s->blob);
    vn_tensor_release(s->values);
    vn_tensor_release(atomic_load(&s->device_pattern));
    vn_tensor_release(s->packed.value);
    vn_tensor_release(s->packed.from);
    vn_tensor_release(s->dense);
    vn_tensor_release(s->dense_of);
    vn_tensor_release(s->lists.value);
    vn_tensor_release(s->lists.from);
    free(s);
}

static void derived_lock(vnm_derived *d)
{
    while (atomic_flag_test_and_set_explicit(&d->lock, memory_order_acquire)) {}
}
static void derived_unlock(vnm_derived *d) { atomic_flag_clear_explicit(&d->lock, memory_order_release); }

vn_tensor *vnm__derived_get(vnm_derived *d, const vn_tensor *values, uint32_t version)
{
    derived_lock(d);
    const vn_tensor *from = d->from;
    bool hit = d->value && from->storage == values->storage && from->offset == values->offset &&
               !memcmp(from->strides, values->strides, sizeof from->strides) && d->version == version;
    vn_tensor *value = hit ? vn_tensor_retain(d->value) : NULL;
    derived_unlock(d);
    return value;
}

void vnm__derived_put(vnm_derived *d, const vn_tensor *values, uint32_t version, vn_tensor *value)
{
    derived_lock(d);
    vn_tensor *old = d->value, *old_from = d->from;
    d->value = vn_tensor_retain(value);
    d->from = vn_tensor_retain((vn_tensor *)values);
    d->version = version;
    derived_unlock(d);
    vn_tensor_release(old); /* outside the lock: a release may free */
    vn_tensor_release(old_from);
}

vn_tensor *vn_vnm_values(const vn_vnm *s)
{
    if (!s) return vn__errp(VN_ERR_ARG, "vnm_values: the matrix is NULL");
    return vn_tensor_retain(s->values);
}

vn_status vn_vnm_stats(const vn_vnm *s, vn_vnm_summary *out)
{
    if (!s || !out) return vn__err(VN_ERR_ARG, "vnm_stats: %s is NULL", s ? "out" : "the matrix");
    vnm_pattern p = vnm__pattern_of(s);
    int64_t nnz = 0;
    for (int64_t rb = 0; rb < p.nblocks; rb++)
        for (int64_t g = 0; g < p.G; g++)
            for (int j = 0; j < 4; j++) {
                int64_t e = (rb * p.G + g) * 4 + j; /* values in a padding column do not count */
                if (g * p.M + p.cols[e] < p.K) nnz += p.t_start[e + 1] - p.t_start[e];
            }
    out->rows = p.R, out->cols = p.K, out->V = p.V, out->N = 2, out->M = p.M;
    out->nnz = nnz;
    out->sparsity = 1 - (double)nnz / ((double)p.R * (double)p.K);
    out->value_bytes = p.R * 2 * p.G * (int64_t)sizeof(float);
    out->index_bytes = p.R * p.idx_stride;
    out->column_bytes = p.nblocks * p.G * 4 * (int64_t)sizeof(uint16_t);
    out->bytes = out->value_bytes + out->index_bytes + out->column_bytes;
    out->dense_bytes = p.R * p.K * (int64_t)sizeof(float);
    return VN_OK;
}

/* A new R × K tensor, zero except at the kept positions of real columns:
 * there the value (f32: to_dense) or 1 (u8: mask). Values on the GPU are
 * copied to the CPU and the dense result goes back: to_dense is for
 * inspection and pruning, not for the training step. */
static vn_tensor *scatter(const vn_vnm *s, vn_dtype dtype, const char *op)
{
    if (!s) return vn__errp(VN_ERR_ARG, "%s: the matrix is NULL", op);
    bool values = dtype == VN_F32, on_cuda = values && vn__is_cuda(s->values);
    if (values && vn__check_arg(s->values, op, "values", VN_ALLOW_CUDA)) return NULL;
    int64_t shape[2] = {s->R, s->K};
    vn_tensor *out = vn_zeros(dtype, 2, shape);
    if (!out) return NULL;
    vnm_pattern p = vnm__pattern_of(s);
    bool was = vn_set_grad_enabled(false);
    vn_tensor *host = values ? vn_to_device(s->values, VN_CPU) : NULL;
    vn_tensor *vc = host ? vn_contiguous(host) : NULL;
    vn_tensor_release(host);
    if (values && !vc) {
        vn_tensor_release(out);
        out = NULL;
    }
    const float *val = vc ? vn_tensor_data(vc) : NULL;
    for (int64_t r = 0; out && r < p.R; r++)
        for (int64_t g = 0; g < p.G; g++)
            for (int slot = 0; slot < 2; slot++) {
                int64_t c = g * p.M + p.cols[((r / p.V) * p.G + g) * 4 + vnm__index(&p, r, g, slot)];
                if (c >= p.K) continue;
                if (values)
                    ((float *)vn_tensor_data(out))[r * p.K + c] = val[r * 2 * p.G + 2 * g + slot];
                else
                    ((uint8_t *)vn_tensor_data(out))[r * p.K + c] = 1;
            }
    vn_tensor_release(vc);
    if (out && on_cuda) {
        vn_tensor *moved = vn_to_device(out, VN_CUDA);
        vn_tensor_release(out);
        out = moved;
    }
    vn_set_grad_enabled(was);
    return out;
}

vn_tensor *vn_vnm_to_dense(const vn_vnm *s) { return scatter(s, VN_F32, "vnm_to_dense"); }
vn_tensor *vn_vnm_mask(const vn_vnm *s) { return scatter(s, VN_U8, "vnm_mask"); }
