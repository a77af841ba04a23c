/* activation_sparse.c — dynamic activation sparsity: Y = act(X)·Wᵀ + b on
 * the nonzeros of H = act(X) only, by the sparse–dense transformation of
 * SparDA / PIT (Zheng et al., SOSP 2023, arXiv 2301.10936). A product is
 * invariant to permuting and dropping the slices of its reduction axis, so
 * per tile of rows the columns of H that are zero in every row of the tile
 * are dropped, the others (and the matching columns of W) gathered into
 * contiguous buffers, and the condensed operands go to one dense sgemm.
 * The backward reuses the forward's index: dW only on kept columns, dX =
 * (dY·W) ⊙ act'(X) only on kept columns (act' is 0 wherever H is). */
#include "internal.h"

#include <cblas.h>
#include <limits.h>

/* The index of a call, one i64 tensor: count[t] (ntiles), then for each
 * tile a slot of `in` column numbers of which the first count[t] are its
 * kept columns in ascending order. A tile run dense has count = in and the
 * identity in its slot. */
typedef struct {
    int64_t rows, in, out, tile, ntiles;
    vn_sparse_act act;
    const int64_t *count, *cols; /* cols of tile t: cols + t·in */
} act_index;

static inline float act_f(vn_sparse_act act, float x)
{
    float r = x > 0 ? x : 0;
    return act == VN_ACT_RELU2 ? r * r : r;
}

static inline float act_df(vn_sparse_act act, float x)
{
    return x > 0 ? (act == VN_ACT_RELU2 ? 2 * x : 1) : 0;
}

static void index_views(act_index *ix, const vn_tensor *t)
{
    const int64_t *p = vn_tensor_data(t);
    ix->count = p;
    ix->cols = p + ix->ntiles;
}

/* One pass over X: each tile's kept columns (some x > 0 in the tile), the
 * number of positive elements (*nz) and of kept (tile, column) pairs
 * (*kept). A tile whose kept share is above dense_above, or every tile when
 * the whole call's share is, is made dense (identity columns): condensing
 * it would cost more than it saves. */
static void build_index(act_index *ix, const float *x, int64_t *cnt, int64_t *cols, double dense_above,
                        int64_t *nz, int64_t *kept)
{
    int64_t in = ix->in, total_nz = 0, total_kept = 0;
#pragma omp parallel for schedule(static) reduction(+ : total_nz, total_kept) \
    if (ix->rows * in > VN_OMP_MIN_WORK)
    for (int64_t t = 0; t < ix->ntiles; t++) {
        int64_t r0 = t * ix->tile, r1 = r0 + ix->tile < ix->rows ? r0 + ix->tile : ix->rows;
        int64_t *slot = cols + t * in, n = 0, z = 0;
        /* slot doubles as the flags: any-positive per column, then compacted
         * in place (position n ≤ j, so no flag is overwritten before read). */
        for (int64_t j = 0; j < in; j++) slot[j] = 0;
        for (int64_t i = r0; i < r1; i++) {
            const float *row = x + i * in;
            for (int64_t j = 0; j < in; j++) {
                int64_t pos = row[j] > 0;
                slot[j] |= pos;
                z += pos;
            }
        }
        for (int64_t j = 0; j < in; j++)
            if (slot[j]) slot[n++] = j;
        cnt[t] = n;
        total_nz += z;
        total_kept += n;
    }
    *nz = total_nz;
    *kept = total_kept;
    bool all_dense = ix->ntiles && (double)total_kept > dense_above * (double)(ix->ntiles * in);
    for (int64_t t = 0; t < ix->ntiles; t++) {
        if (!all_dense && (double)cnt[t] <= dense_above * (double)in) continue;
        for (int64_t j = 0; j < in; j++) cols[t * in + j] = j;
        cnt[t] = in;
    }
}

/* Hc (m × k) = act(X[r0 .. r0+m, cols]) and, unless the tile is dense,
 * Wc (out × k) = W[:, cols]. Returns the W operand to use (W itself for a
 * dense tile, leading dimension in; else Wc, leading dimension k). */
static const float *gather_tile(const act_index *ix, int64_t t, const float *x, const float *w,
                                float *hc, float *wc, int64_t *ldw)
{
    int64_t in = ix->in, k = ix->count[t], r0 = t * ix->tile;
    int64_t m = r0 + ix->tile < ix->rows ? ix->tile : ix->rows - r0;
    const int64_t *cols = ix->cols + t * in;
#pragma omp parallel for schedule(static) if (m * k > VN_OMP_MIN_WORK)
    for (int64_t r = 0; r < m; r++) {
        const float *row = x + (r0 + r) * in;
        for (int64_t l = 0; l < k; l++) hc[r * k + l] = act_f(ix->act, row[cols[l]]);
    }
    if (k == in) {
        *ldw = in;
        return w;
    }
#pragma omp parallel for schedule(static) if (ix->out * k > VN_OMP_MIN_WORK)
    for (int64_t o = 0; o < ix->out; o++)
        for (int64_t l = 0; l < k; l++) wc[o * k + l] = w[o * in + cols[l]];
    *ldw = k;
    return wc;
}

static int64_t tile_rows_of(const act_index *ix, int64_t t)
{
    int64_t r0 = t * ix->tile;
    return r0 + ix->tile < ix->rows ? ix->tile : ix->rows - r0;
}

/* Scratch for one tile: Hc (tile × in at most), then Wc and, for the
 * backward's dW, G (out × the widest condensed tile each; a dense tile uses
 * W and dW in place). *wc and *g point into it. */
static float *scratch(const act_index *ix, bool with_g, vn_tensor **hold, float **wc, float **g)
{
    int64_t kmax = 0;
    for (int64_t t = 0; t < ix->ntiles; t++)
        if (ix->count[t] < ix->in && ix->count[t] > kmax) kmax = ix->count[t];
    int64_t n = ix->tile * ix->in + (with_g ? 2 : 1) * ix->out * kmax + 1;
    *hold = vn__new(VN_F32, 1, &n);
    float *s = *hold ? vn_tensor_data(*hold) : NULL;
    if (s) {
        *wc = s + ix->tile * ix->in;
        *g = *wc + ix->out * kmax;
    }
    return s;
}

/* ---- backward --------------------------------------------------------------------------- */

enum { SAVED_INDEX };
struct act_sparse_saved { int64_t rows, in, out, tile, ntiles; vn_sparse_act act; };

/* dW[:, cols] += G for a condensed tile (G out × k); a dense tile's sgemm
 * wrote into dW directly. */
static void scatter_add_cols(const act_index *ix, int64_t t, const float *g, float *dw)
{
    int64_t in = ix->in, k = ix->count[t];
    const int64_t *cols = ix->cols + t * in;
#pragma omp parallel for schedule(static) if (ix->out * k > VN_OMP_MIN_WORK)
    for (int64_t o = 0; o < ix->out; o++)
        for (int64_t l = 0; l < k; l++) dw[o * in + cols[l]] += g[o * k + l];
}

/* dX rows of tile t: dHc (m × k) ⊙ act'(x) on the kept columns, 0 elsewhere. */
static void write_dx_tile(const act_index *ix, int64_t t, const float *dhc, const float *x, float *dx)
{
    int64_t in = ix->in, k = ix->count[t], r0 = t * ix->tile, m = tile_rows_of(ix, t);
    const int64_t *cols = ix->cols + t * in;
#pragma omp parallel for schedule(static) if (m * in > VN_OMP_MIN_WORK)
    for (int64_t r = 0; r < m; r++) {
        float *d = dx + (r0 + r) * in;
        const float *row = x + (r0 + r) * in;
        for (int64_t j = 0; j < in; j++) d[j] = 0;
        for (int64_t l = 0; l < k; l++) d[cols[l]] = dhc[r * k + l] * act_df(ix->act, row[cols[l]]);
    }
}

static vn_status act_sparse_backward(vn_node *node, const vn_tensor *gout)
{
    const struct act_sparse_saved *sv = VN_SAVED_STATE(node, struct act_sparse_saved);
    act_index ix = {sv->rows, sv->in, sv->out, sv->tile, sv->ntiles, sv->act, NULL, NULL};
    index_views(&ix, node->saved[SAVED_INDEX]);
    const vn_tensor *x = node->inputs[0], *w = node->inputs[1];
    bool want_x = vn__input_needs_grad(node, 0), want_w = vn__input_needs_grad(node, 1);
    bool want_b = node->ninputs == 3 && vn__input_needs_grad(node, 2);
    int64_t out_n = sv->out, ws[2] = {sv->out, sv->in};
    vn_tensor *dy = vn__plain_contiguous(gout), *xc = dy ? vn__plain_contiguous(x) : NULL;
    vn_tensor *wcon = xc ? vn__plain_contiguous(w) : NULL, *buf = NULL;
    float *wc = NULL, *g = NULL;
    float *s = wcon && (want_x || want_w) ? scratch(&ix, want_w, &buf, &wc, &g) : NULL;
    vn_tensor *dx = s && want_x ? vn__new(VN_F32, x->ndim, x->shape) : NULL;
    vn_tensor *dw = s && want_w ? vn_zeros(VN_F32, 2, ws) : NULL;
    vn_tensor *db = wcon && want_b ? vn_zeros(VN_F32, 1, &out_n) : NULL;
    vn_status st = !wcon || ((want_x || want_w) && !s) || (want_x && !dx) || (want_w && !dw) ||
                   (want_b && !db) ? VN_ERR_MEMORY : VN_OK;
    if (!st && s) {
        const float *X = vn_tensor_data(xc), *W = vn_tensor_data(wcon), *DY = vn_tensor_data(dy);
        float *hc = s;
        for (int64_t t = 0; t < ix.ntiles; t++) {
            int64_t k = ix.count[t], m = tile_rows_of(&ix, t), ldw;
            const float *dyt = DY + t * ix.tile * ix.out;
            if (k == 0) { /* H is all zero here: no dW, and dX is 0 */
                if (dx) write_dx_tile(&ix, t, NULL, X, VN_F32_PTR(dx));
                continue;
            }
            const float *wop = gather_tile(&ix, t, X, W, hc, wc, &ldw);
            if (dw) { /* dW[:, cols] += dY_tᵀ·Hc */
                bool dense = k == ix.in;
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ix.out, (int)k, (int)m,
                            1.0f, dyt, (int)ix.out, hc, (int)k, dense ? 1.0f : 0.0f,
                            dense ? VN_F32_PTR(dw) : g, (int)k);
                if (!dense) scatter_add_cols(&ix, t, g, VN_F32_PTR(dw));
            }
            if (dx) { /* dHc = dY_t·Wc, reusing hc's space (Hc is no longer needed) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)k, (int)ix.out,
                            1.0f, dyt, (int)ix.out, wop, (int)ldw, 0.0f, hc, (int)k);
                write_dx_tile(&ix, t, hc, X, VN_F32_PTR(dx));
            }
        }
    }
    if (!st && db) {
        const float *DY = vn_tensor_data(dy);
        float *acc = vn_tensor_data(db);
        for (int64_t i = 0; i < ix.rows; i++)
            for (int64_t o = 0; o < ix.out; o++) acc[o] += DY[i * ix.out + o];
    }
    if (!st && dx) st = vn__accum(node, 0, dx), dx = NULL;
    if (!st && dw) st = vn__accum(node, 1, dw), dw = NULL;
    if (!st && db) st = vn__accum(node, 2, db), db = NULL;
    vn_tensor_release(dx);
    vn_tensor_release(dw);
    vn_tensor_release(db);
    vn_tensor_release(dy);
    vn_tensor_release(xc);
    vn_tensor_release(wcon);
    vn_tensor_release(buf);
    return st;
}

/* ---- forward ------------------------------------------------------------------------------ */

static vn_status check_args(const vn_tensor *x, const vn_tensor *w, const vn_tensor *bias,
                            vn_sparse_act act, double dense_above)
{
    const char *op = "act_sparse_linear";
    vn_status st = vn__check_dtype_arg(x, VN_F32, op, "input", 0);
    if (!st) st = vn__check_dtype_arg(w, VN_F32, op, "weight", 0);
    if (!st && bias) st = vn__check_dtype_arg(bias, VN_F32, op, "bias", 0);
    if (st) return st;
    if (act != VN_ACT_RELU && act != VN_ACT_RELU2)
        return vn__err(VN_ERR_ARG, "%s: activation %d, expected VN_ACT_RELU (1) or VN_ACT_RELU2 (2)",
                       op, (int)act);
    if (!(dense_above <= 1)) /* NaN too */
        return vn__err(VN_ERR_ARG, "%s: dense_above %g, expected a share in [0, 1] (or < 0 for the "
                       "default)", op, dense_above);
    if (w->ndim != 2)
        return vn__err(VN_ERR_SHAPE, "%s: weight of shape %s, expected 2-d (out, in)", op,
                       vn__shape(w->ndim, w->shape));
    if (x->ndim == 0 || x->shape[x->ndim - 1] != w->shape[1])
        return vn__err(VN_ERR_SHAPE, "%s: input of shape %s and weight %s: expected the input's "
                       "last dim to be in = %lld", op, vn__shape(x->ndim, x->shape),
                       vn__shape(2, w->shape), (long long)w->shape[1]);
    if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0]))
        return vn__err(VN_ERR_SHAPE, "%s: bias of shape %s, expected (%lld)", op,
                       vn__shape(bias->ndim, bias->shape), (long long)w->shape[0]);
    if (w->shape[0] > INT_MAX || w->shape[1] > INT_MAX)
        return vn__err(VN_ERR_ARG, "%s: weight %s exceeds BLAS's limit of %d", op,
                       vn__shape(2, w->shape), INT_MAX);
    return VN_OK;
}

/* Y rows of every tile: bias (or 0), then += Hc·Wcᵀ. */
static void forward_tiles(const act_index *ix, const float *x, const float *w, const float *b,
                          float *hc, float *wc, float *y)
{
    for (int64_t i = 0; i < ix->rows; i++)
        for (int64_t o = 0; o < ix->out; o++) y[i * ix->out + o] = b ? b[o] : 0;
    for (int64_t t = 0; t < ix->ntiles; t++) {
        int64_t k = ix->count[t], m = tile_rows_of(ix, t), ldw;
        if (k == 0) continue; /* H is all zero in this tile */
        const float *wop = gather_tile(ix, t, x, w, hc, wc, &ldw);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)ix->out, (int)k, 1.0f,
                    hc, (int)k, wop, (int)ldw, 1.0f, y + t * ix->tile * ix->out, (int)ix->out);
    }
}

vn_tensor *vn_act_sparse_linear(const vn_tensor *x, const vn_tensor *w, const vn_tensor *bias,
                                vn_sparse_act act, int64_t tile_rows, double dense_above,
                                vn_act_sparse_stats *stats)
{
    if (check_args(x, w, bias, act, dense_above)) return NULL;
    if (dense_above < 0) dense_above = VN_ACT_SPARSE_DENSE_ABOVE;
    int64_t in = w->shape[1], out = w->shape[0];
    int64_t rows = in ? vn_tensor_numel(x) / in : vn__numel(x->ndim - 1, x->shape);
    int64_t tile = tile_rows > 0 ? tile_rows : VN_ACT_SPARSE_TILE_ROWS;
    if (rows > INT_MAX)
        return vn__errp(VN_ERR_ARG, "act_sparse_linear: input %s has more than %d rows",
                        vn__shape(x->ndim, x->shape), INT_MAX);
    if (tile > rows && rows > 0) tile = rows;
    act_index ix = {rows, in, out, tile, rows ? (rows + tile - 1) / tile : 0, act, NULL, NULL};
    int64_t ysh[VN_MAX_DIMS], nidx = ix.ntiles * (1 + in), nz = 0, kept = 0;
    memcpy(ysh, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    ysh[x->ndim - 1] = out;
    vn_tensor *xc = vn__plain_contiguous(x), *wc = xc ? vn__plain_contiguous(w) : NULL;
    vn_tensor *bc = wc && bias ? vn__plain_contiguous(bias) : NULL;
    vn_tensor *index = wc && (bc || !bias) ? vn__new(VN_I64, 1, &nidx) : NULL;
    vn_tensor *buf = NULL, *y = NULL;
    bool dense_path = false;
    if (index) {
        int64_t *p = vn_tensor_data(index);
        build_index(&ix, vn_tensor_data(xc), p, p + ix.ntiles, dense_above, &nz, &kept);
        index_views(&ix, index);
        if (ix.ntiles && (double)kept > dense_above * (double)(ix.ntiles * in)) {
            /* The dense path: one tile of all rows, one sgemm. */
            int64_t one = 1 + in;
            vn_tensor *dense_index = vn__new(VN_I64, 1, &one);
            if (dense_index) {
                int64_t *d = vn_tensor_data(dense_index);
                d[0] = in;
                for (int64_t j = 0; j < in; j++) d[1 + j] = j;
            }
            vn_tensor_release(index);
            index = dense_index;
            ix.tile = rows;
            ix.ntiles = 1;
            dense_path = true;
            if (index) index_views(&ix, index);
        }
    }
    float *wbuf = NULL, *unused = NULL;
    float *s = index ? scratch(&ix, false, &buf, &wbuf, &unused) : NULL;
    if (s) y = vn__new(VN_F32, x->ndim, ysh);
    if (y)
        forward_tiles(&ix, vn_tensor_data(xc), vn_tensor_data(wc), bc ? vn_tensor_data(bc) : NULL, s,
                      wbuf, vn_tensor_data(y));
    if (y && stats) {
        double all = (double)rows * (double)in, pairs = (double)(rows ? (rows + tile - 1) / tile : 0) * in;
        *stats = (vn_act_sparse_stats){all ? nz / all : 0, pairs ? kept / pairs : 0, dense_path};
    }
    const vn_tensor *ins[3] = {x, w, bias};
    vn_node *node = y ? vn__record(y, "act_sparse_linear", act_sparse_backward, bias ? 3 : 2, ins) : NULL;
    if (node) {
        node->saved[SAVED_INDEX] = index;
        index = NULL;
        *VN_SAVED_STATE(node, struct act_sparse_saved) =
            (struct act_sparse_saved){ix.rows, ix.in, ix.out, ix.tile, ix.ntiles, ix.act};
    }
    vn_tensor_release(index);
    vn_tensor_release(buf);
    vn_tensor_release(xc);
    vn_tensor_release(wc);
    vn_tensor_release(bc);
    return y;
}
