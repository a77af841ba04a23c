/* activation_sparse.c — dynamic activation sparsity, the layer op:
 * Y = act(X)·Wᵀ + b on the nonzeros of H = act(X) only, by the sparse–dense
 * transformation of SparDA / PIT (Zheng et al., SOSP 2023, arXiv
 * 2301.10936). A product is invariant to permuting and dropping the slices
 * of its reduction axis, so per tile of rows the columns of H that are zero
 * in every row of the tile are dropped, the others (and the matching
 * columns of W) gathered into contiguous buffers, and the condensed
 * operands go to one dense sgemm (act_sparse_index.c). The backward reuses
 * the forward's index: dW only on kept columns, dX = (dY·W) ⊙ act'(X) only
 * on kept columns (act' is 0 wherever H is). The fused two-layer MLP is in
 * activation_sparse_mlp.c. */
#include "act_sparse_internal.h"

#include "blas.h" /* vn__sgemm: OpenBLAS on OpenMP's threads */
#include <limits.h>

enum { SAVED_INDEX, SAVED_WT }; /* SAVED_WT: the weight operand, Wt or W (act__weight) */
struct act_sparse_saved { int64_t rows, in, out, tile, ntiles; vn_sparse_act act; };

/* Scratch: Hc (tile × in at most), then Wc and, for the backward's dW, G
 * (the widest condensed tile × out each; a dense tile uses Wt and dWt in
 * place). *wc and *g point into it. */
static float *scratch(const act_index *ix, bool with_g, vn_tensor **hold, float **wc, float **g)
{
    int64_t kmax = act__max_condensed(ix);
    int64_t n = ix->tile * ix->in + (with_g ? 2 : 1) * ix->out * kmax; /* as mlp_scratch's */
    if (n == 0) n = 1;
    *hold = vn__new(VN_F32, 1, &n);
    float *s = *hold ? vn_tensor_data(*hold) : NULL;
    if (s) {
        *wc = s + ix->tile * ix->in;
        *g = *wc + ix->out * kmax;
    }
    return s;
}

/* ---- backward --------------------------------------------------------------------------- */

/* dX rows of tile t: dHc (m × k) ⊙ act'(x) on the kept columns, 0 elsewhere. */
static void write_dx_tile(const act_index *ix, int64_t t, const float *dhc, const float *x, float *dx)
{
    int64_t in = ix->in, k = ix->count[t], r0 = t * ix->tile, m = act__tile_rows(ix, t);
    const int64_t *cols = act__cols(ix, t);
#pragma omp parallel for schedule(static) if (m * in > VN_OMP_MIN_WORK)
    for (int64_t r = 0; r < m; r++) {
        float *d = dx + (r0 + r) * in;
        const float *row = x + (r0 + r) * in;
        if (k == in) /* a dense tile: the same without the index, vectorized */
            for (int64_t j = 0; j < in; j++) d[j] = dhc[r * in + j] * act__df(ix->act, row[j]);
        else {
            for (int64_t j = 0; j < in; j++) d[j] = 0;
            for (int64_t l = 0; l < k; l++) d[cols[l]] = dhc[r * k + l] * act__df(ix->act, row[cols[l]]);
        }
    }
}

static vn_status act_sparse_backward(vn_node *node, const vn_tensor *gout)
{
    const struct act_sparse_saved *sv = VN_SAVED_STATE(node, struct act_sparse_saved);
    act_index ix = {.rows = sv->rows, .in = sv->in, .out = sv->out, .tile = sv->tile, .ntiles = sv->ntiles,
                    .act = sv->act};
    act__index_views(&ix, node->saved[SAVED_INDEX]);
    const vn_tensor *x = node->inputs[0];
    bool want_x = vn__input_needs_grad(node, 0), want_w = vn__input_needs_grad(node, 1);
    bool want_b = node->ninputs == 3 && vn__input_needs_grad(node, 2);
    int64_t out_n = sv->out, ws[2] = {sv->in, sv->out}, wplain[2] = {sv->out, sv->in};
    vn_tensor *dy = vn__plain_contiguous(gout), *xc = dy ? vn__plain_contiguous(x) : NULL, *buf = NULL;
    float *wc = NULL, *g = NULL;
    float *s = xc && (want_x || want_w) ? scratch(&ix, want_w, &buf, &wc, &g) : NULL;
    vn_tensor *dx = s && want_x ? vn__new(VN_F32, x->ndim, x->shape) : NULL;
    /* dW builds as dWt (in × out) and is transposed at the end, unless W
     * was used as it is (ix.plain_w): then straight into dW (out × in). */
    vn_tensor *dwt = s && want_w ? vn_zeros(VN_F32, 2, ix.plain_w ? wplain : ws) : NULL, *dw = NULL;
    vn_tensor *db = xc && want_b ? vn_zeros(VN_F32, 1, &out_n) : NULL;
    vn_status st = !xc || ((want_x || want_w) && !s) || (want_x && !dx) || (want_w && !dwt) ||
                   (want_b && !db) ? VN_ERR_MEMORY : VN_OK;
    if (!st && s) {
        const float *X = vn_tensor_data(xc), *WT = vn_tensor_data(node->saved[SAVED_WT]);
        const float *DY = vn_tensor_data(dy);
        float *hc = s;
        for (int64_t t = 0; t < ix.ntiles; t++) {
            int64_t k = ix.count[t], m = act__tile_rows(&ix, t);
            const float *dyt = DY + t * ix.tile * ix.out;
            if (k == 0) { /* H is all zero here: no dW, and dX is 0 */
                if (dx) write_dx_tile(&ix, t, NULL, X, VN_F32_PTR(dx));
                continue;
            }
            const float *wop = act__gather_tile(&ix, t, X, WT, hc, wc, NULL);
            if (dwt && ix.plain_w) /* dW += dY_tᵀ·H_t */
                vn__sgemm(CblasTrans, CblasNoTrans, (int)ix.out, (int)k, (int)m, 1.0f,
                            dyt, (int)ix.out, hc, (int)k, 1.0f, VN_F32_PTR(dwt), (int)k);
            else if (dwt) { /* dWt[cols, :] += Hcᵀ·dY_t */
                bool dense = k == ix.in;
                vn__sgemm(CblasTrans, CblasNoTrans, (int)k, (int)ix.out, (int)m, 1.0f,
                            hc, (int)k, dyt, (int)ix.out, dense ? 1.0f : 0.0f,
                            dense ? VN_F32_PTR(dwt) : g, (int)ix.out);
                if (!dense)
                    vn__scatter_add_rows_f32(VN_F32_PTR(dwt), g, act__cols(&ix, t), NULL, k, ix.out);
            }
            if (dx) { /* dHc = dY_t·Wcᵀ (or dY_t·W), in hc's space (Hc is no longer needed) */
                vn__sgemm(CblasNoTrans, ix.plain_w ? CblasNoTrans : CblasTrans, (int)m,
                            (int)k, (int)ix.out, 1.0f, dyt, (int)ix.out, wop,
                            (int)(ix.plain_w ? ix.in : ix.out), 0.0f, hc, (int)k);
                write_dx_tile(&ix, t, hc, X, VN_F32_PTR(dx));
            }
        }
        if (dwt && ix.plain_w) dw = dwt, dwt = NULL;
        else if (dwt && !(dw = act__transposed(dwt))) st = VN_ERR_MEMORY;
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
    vn_tensor *all[7] = {dx, dw, dwt, db, dy, xc, buf};
    for (int k = 0; k < 7; k++) vn_tensor_release(all[k]);
    return st;
}

/* ---- forward ------------------------------------------------------------------------------ */

vn_status act__check_common(const char *op, const vn_tensor *x, vn_sparse_act act, double dense_above)
{
    vn_status st = vn__check_dtype_arg(x, VN_F32, op, "input", 0);
    if (st) return st;
    if (act != VN_ACT_RELU && act != VN_ACT_RELU2)
        return vn__err(VN_ERR_ARG, "%s: activation %d, expected VN_ACT_RELU (1) or VN_ACT_RELU2 (2)",
                       op, (int)act);
    if (!(dense_above <= 1)) /* NaN too */
        return vn__err(VN_ERR_ARG, "%s: dense_above %g, expected a share in [0, 1] (or < 0 for the "
                       "default)", op, dense_above);
    return VN_OK;
}

vn_status act__check_weight(const char *op, const char *wname, const vn_tensor *w, int64_t in,
                            const char *in_name, const char *bname, const vn_tensor *b)
{
    vn_status st = vn__check_dtype_arg(w, VN_F32, op, wname, 0);
    if (!st && b) st = vn__check_dtype_arg(b, VN_F32, op, bname, 0);
    if (st) return st;
    if (w->ndim != 2 || w->shape[1] != in)
        return vn__err(VN_ERR_SHAPE, "%s: %s of shape %s, expected 2-d (out, %s = %lld)", op, wname,
                       vn__shape(w->ndim, w->shape), in_name, (long long)in);
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return vn__err(VN_ERR_SHAPE, "%s: %s of shape %s, expected (%lld)", op, bname,
                       vn__shape(b->ndim, b->shape), (long long)w->shape[0]);
    if (w->shape[0] > INT_MAX || w->shape[1] > INT_MAX)
        return vn__err(VN_ERR_ARG, "%s: %s %s exceeds BLAS's limit of %d", op, wname,
                       vn__shape(2, w->shape), INT_MAX);
    return VN_OK;
}

vn_status act__prepare(const char *op, const vn_tensor *x, int64_t in, int64_t out, vn_sparse_act act,
                       act_index *ix, int64_t *ysh)
{
    *ix = (act_index){.rows = vn__numel(x->ndim - 1, x->shape), .in = in, .out = out, .act = act};
    if (ix->rows > INT_MAX)
        return vn__err(VN_ERR_ARG, "%s: input %s has more than %d rows", op, vn__shape(x->ndim, x->shape),
                       INT_MAX);
    memcpy(ysh, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    ysh[x->ndim - 1] = out;
    return VN_OK;
}

vn_tensor *vn_act_sparse_linear(const vn_tensor *x, const vn_tensor *w, const vn_tensor *bias,
                                vn_sparse_act act, int64_t tile_rows, double dense_above,
                                vn_act_sparse_stats *stats)
{
    const char *op = "act_sparse_linear";
    if (act__check_common(op, x, act, dense_above)) return NULL;
    if (x->ndim == 0)
        return vn__errp(VN_ERR_SHAPE, "%s: input is 0-d, expected (..., in)", op);
    if (act__check_weight(op, "weight", w, x->shape[x->ndim - 1], "the input's last dim", "bias", bias))
        return NULL;
    if (dense_above < 0) dense_above = VN_ACT_SPARSE_DENSE_ABOVE;
    int64_t ysh[VN_MAX_DIMS];
    act_index ix;
    if (act__prepare(op, x, w->shape[1], w->shape[0], act, &ix, ysh)) return NULL;
    vn_tensor *xc = vn__plain_contiguous(x), *bc = xc && bias ? vn__plain_contiguous(bias) : NULL;
    vn_tensor *index = xc && (bc || !bias) ? act__index(&ix, vn_tensor_data(xc),
                                                        tile_rows > 0 ? tile_rows : VN_ACT_SPARSE_TILE_ROWS,
                                                        dense_above, stats) : NULL;
    vn_tensor *wt = index ? act__weight(&ix, w) : NULL, *buf = NULL, *y = NULL;
    float *wbuf = NULL, *unused = NULL;
    float *s = wt ? scratch(&ix, false, &buf, &wbuf, &unused) : NULL;
    if (s) y = vn__new(VN_F32, x->ndim, ysh);
    if (y)
        act__forward_tiles(&ix, vn_tensor_data(xc), vn_tensor_data(wt), bc ? vn_tensor_data(bc) : NULL,
                           s, wbuf, vn_tensor_data(y), stats);
    const vn_tensor *ins[3] = {x, w, bias};
    vn_node *node = y ? vn__record(y, op, act_sparse_backward, bias ? 3 : 2, ins) : NULL;
    if (node) {
        node->saved[SAVED_INDEX] = index;
        node->saved[SAVED_WT] = wt;
        index = wt = NULL;
        *VN_SAVED_STATE(node, struct act_sparse_saved) =
            (struct act_sparse_saved){ix.rows, ix.in, ix.out, ix.tile, ix.ntiles, ix.act};
    }
    vn_tensor *all[5] = {index, buf, xc, wt, bc};
    for (int k = 0; k < 5; k++) vn_tensor_release(all[k]);
    return y;
}
