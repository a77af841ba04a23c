/* act_sparse_index.c — the index of dynamic activation sparsity (which
 * columns of each row tile of act(X) are nonzero), the gathers into
 * condensed operands, and the condensed forward product (SparDA / PIT,
 * Zheng et al., SOSP 2023). Shared by the layer op (activation_sparse.c)
 * and the fused MLP (activation_sparse_mlp.c). */
#include "act_sparse_internal.h"

#include "blas.h" /* vn__sgemm: OpenBLAS on OpenMP's threads */

void act__index_views(act_index *ix, const vn_tensor *t)
{
    const int64_t *p = vn_tensor_data(t);
    ix->count = p;
    ix->cols = p + ix->ntiles;
    ix->plain_w = act__max_condensed(ix) == 0;
}

int64_t act__max_condensed(const act_index *ix)
{
    int64_t kmax = 0;
    for (int64_t t = 0; t < ix->ntiles; t++)
        if (ix->count[t] < ix->in && ix->count[t] > kmax) kmax = ix->count[t];
    return kmax;
}

/* One pass over x: each tile's kept columns (some x > 0 in the tile) into
 * cnt and cols, the number of positive elements (*nz) and of kept (tile,
 * column) pairs (*kept). A tile whose kept share is above dense_above is
 * made dense (identity columns): condensing it would cost more than it
 * saves. */
static void scan_tiles(const act_index *ix, const float *x, int64_t *cnt, int64_t *cols,
                       double dense_above, int64_t *nz, int64_t *kept)
{
    int64_t in = ix->in, total_nz = 0, total_kept = 0;
#pragma omp parallel for schedule(static) reduction(+ : total_nz, total_kept) \
    if (ix->rows * in > VN_OMP_MIN_WORK)
    for (int64_t t = 0; t < ix->ntiles; t++) {
        int64_t r1 = t * ix->tile + act__tile_rows(ix, t);
        int64_t *slot = cols + t * in, n = 0, z = 0;
        /* slot doubles as the flags: any-positive per column, then compacted
         * in place (position n ≤ j, so no flag is overwritten before read). */
        for (int64_t j = 0; j < in; j++) slot[j] = 0;
        for (int64_t i = t * ix->tile; i < r1; i++) {
            const float *row = x + i * in;
            for (int64_t j = 0; j < in; j++) {
                int64_t pos = row[j] > 0;
                slot[j] |= pos;
                z += pos;
            }
        }
        for (int64_t j = 0; j < in; j++)
            if (slot[j]) slot[n++] = j;
        total_nz += z;
        total_kept += n;
        if ((double)n > dense_above * (double)in) {
            for (int64_t j = 0; j < in; j++) slot[j] = j;
            n = in;
        }
        cnt[t] = n;
    }
    *nz = total_nz;
    *kept = total_kept;
}

vn_tensor *act__index(act_index *ix, const float *x, int64_t tile, double dense_above,
                      vn_act_sparse_stats *stats)
{
    int64_t rows = ix->rows, in = ix->in, nz = 0, kept = 0;
    ix->tile = tile > rows && rows > 0 ? rows : tile;
    ix->ntiles = rows ? (rows + ix->tile - 1) / ix->tile : 0;
    int64_t n = ix->ntiles * (1 + in), pairs = ix->ntiles * in;
    vn_tensor *index = vn__new(VN_I64, 1, &n);
    if (!index) return NULL;
    int64_t *p = vn_tensor_data(index);
    scan_tiles(ix, x, p, p + ix->ntiles, dense_above, &nz, &kept);
    bool dense = ix->ntiles && (double)kept > dense_above * (double)pairs;
    if (dense) { /* the dense path: one tile of all rows, all columns, one sgemm */
        vn_tensor_release(index);
        n = 1 + in;
        if (!(index = vn__new(VN_I64, 1, &n))) return NULL;
        p = vn_tensor_data(index);
        p[0] = in;
        for (int64_t j = 0; j < in; j++) p[1 + j] = j;
        ix->tile = rows;
        ix->ntiles = 1;
    }
    act__index_views(ix, index);
    if (stats) {
        double all = (double)rows * (double)in;
        *stats = (vn_act_sparse_stats){all ? (double)nz / all : 0,
                                       pairs ? (double)kept / (double)pairs : 0, dense};
    }
    return index;
}

vn_tensor *act__transposed(const vn_tensor *w)
{
    /* In 32 × 32 blocks, so both the rows read and the rows written stay in
     * cache (a plain strided copy misses on every element of one side). */
    int64_t R = w->shape[0], C = w->shape[1], ts[2] = {C, R};
    vn_tensor *wc = vn__plain_contiguous(w), *t = wc ? vn__new(VN_F32, 2, ts) : NULL;
    if (t) {
        const float *src = vn_tensor_data(wc);
        float *dst = vn_tensor_data(t);
#pragma omp parallel for schedule(static) if (R * C > VN_OMP_MIN_WORK)
        for (int64_t i0 = 0; i0 < R; i0 += 32)
            for (int64_t j0 = 0; j0 < C; j0 += 32)
                for (int64_t i = i0; i < i0 + 32 && i < R; i++)
                    for (int64_t j = j0; j < j0 + 32 && j < C; j++) dst[j * R + i] = src[i * C + j];
    }
    vn_tensor_release(wc);
    return t;
}

vn_tensor *act__weight(const act_index *ix, const vn_tensor *w)
{
    return ix->plain_w ? vn__plain_contiguous(w) : act__transposed(w);
}

const float *act__gather_tile(const act_index *ix, int64_t t, const float *x, const float *wt,
                              float *hc, float *wc)
{
    int64_t in = ix->in, k = ix->count[t], r0 = t * ix->tile, m = act__tile_rows(ix, t);
    const int64_t *cols = ix->cols + t * in;
#pragma omp parallel for schedule(static) if (m * k > VN_OMP_MIN_WORK)
    for (int64_t r = 0; r < m; r++) {
        const float *row = x + (r0 + r) * in;
        for (int64_t l = 0; l < k; l++) hc[r * k + l] = act__f(ix->act, row[cols[l]]);
    }
    if (k == in) return wt;
    act__gather_rows(ix, t, wt, ix->out, wc);
    return wc;
}

void act__gather_rows(const act_index *ix, int64_t t, const float *src, int64_t width, float *dst)
{
    int64_t k = ix->count[t];
    const int64_t *cols = ix->cols + t * ix->in;
#pragma omp parallel for schedule(static) if (width * k > VN_OMP_MIN_WORK)
    for (int64_t l = 0; l < k; l++)
        memcpy(dst + l * width, src + cols[l] * width, sizeof(float) * (size_t)width);
}

void act__scatter_add_rows(const act_index *ix, int64_t t, const float *g, int64_t width, float *dst)
{
    int64_t k = ix->count[t];
    const int64_t *cols = ix->cols + t * ix->in;
#pragma omp parallel for schedule(static) if (width * k > VN_OMP_MIN_WORK)
    for (int64_t l = 0; l < k; l++) {
        float *row = dst + cols[l] * width;
        const float *gl = g + l * width;
        for (int64_t j = 0; j < width; j++) row[j] += gl[j];
    }
}

void act__forward_tiles(const act_index *ix, const float *x, const float *wt, const float *b,
                        float *hc, float *wc, float *y)
{
    for (int64_t i = 0; i < ix->rows; i++)
        for (int64_t o = 0; o < ix->out; o++) y[i * ix->out + o] = b ? b[o] : 0;
    for (int64_t t = 0; t < ix->ntiles; t++) {
        int64_t k = ix->count[t], m = act__tile_rows(ix, t);
        if (k == 0) continue; /* H is all zero in this tile */
        const float *wop = act__gather_tile(ix, t, x, wt, hc, wc);
        vn__sgemm(CblasNoTrans, ix->plain_w ? CblasTrans : CblasNoTrans, (int)m,
                    (int)ix->out, (int)k, 1.0f, hc, (int)k, wop, (int)(ix->plain_w ? ix->in : ix->out),
                    1.0f, y + t * ix->tile * ix->out, (int)ix->out);
    }
}
