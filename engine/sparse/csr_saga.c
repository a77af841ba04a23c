/* csr_saga.c — NGra's SAGA-NN stages on a CSR graph (Ma et al., arXiv
 * 1810.08403) as differentiable CPU ops: Scatter (vertex features onto the
 * edges, from the source or the destination side), Gather (a sum, mean or
 * max of each destination's incoming edges) and the edge softmax of GAT.
 * Edge tensors are (nnz, F...) in the matrix's stored order. Every loop is
 * owned by rows (or edges) so that no two threads write one value: the
 * results do not depend on the thread count. */
#include "csr_internal.h"

static const int64_t *i64(const vn_tensor *t) { return vn_tensor_data(t); }

static vn_tensor *retained(vn_tensor *t) { return vn_tensor_retain(t); }

/* out[e, :] = x[idx[e], :] for e in [0, n). */
static void index_rows(int64_t n, int64_t F, const int64_t *idx, const float *x, float *out)
{
#pragma omp parallel for schedule(static) if (n * F > VN_OMP_MIN_WORK)
    for (int64_t e = 0; e < n; e++)
        for (int64_t f = 0; f < F; f++) out[e * F + f] = x[idx[e] * F + f];
}

/* ---- scatter -------------------------------------------------------------------------- */

/* Node: input x; saved the segments the gradient sums over: the transpose
 * blob (source side) or the row pointers (destination side). */
struct csr_scatter_saved { int64_t nseg; bool source; };

static vn_status csr_scatter_backward(vn_node *node, const vn_tensor *gout)
{
    const struct csr_scatter_saved *sv = VN_SAVED_STATE(node, struct csr_scatter_saved);
    const vn_tensor *x = node->inputs[0], *seg = node->saved[0];
    int64_t F = vn__numel(x->ndim - 1, x->shape + 1);
    vn_tensor *de = vn__plain_contiguous(gout);
    vn_tensor *dx = de ? csr__new_rows(x, sv->nseg) : NULL;
    if (dx)
        csr__segment_sum(sv->nseg, F, sv->source ? csr__tptr(seg) : i64(seg),
                         sv->source ? csr__tperm(seg, sv->nseg) : NULL, NULL, NULL,
                         vn_tensor_data(de), vn_tensor_data(dx));
    vn_tensor_release(de);
    return dx ? vn__accum(node, 0, dx) : VN_ERR_MEMORY;
}

vn_tensor *vn_csr_scatter(const vn_csr *a, const vn_tensor *x, bool source)
{
    int64_t F = 0;
    if (csr__check(a, "csr_scatter") ||
        csr__check_rows(x, source ? a->cols : a->rows, "csr_scatter", "input",
                        source ? "the source vertices: the matrix's columns"
                               : "the destination vertices: the matrix's rows",
                        0, &F))
        return NULL;
    vn_tensor *seg = source ? csr__transpose(a) : a->row_ptr;
    vn_tensor *xc = seg ? vn__plain_contiguous(x) : NULL;
    vn_tensor *out = xc ? csr__new_rows(x, a->nnz) : NULL;
    if (out)
        index_rows(a->nnz, F, i64(source ? a->col_idx : a->row_idx), vn_tensor_data(xc),
                   vn_tensor_data(out));
    vn_tensor_release(xc);
    vn_node *node = out ? vn__record(out, "csr_scatter", csr_scatter_backward, 1,
                                     (const vn_tensor *const[]){x})
                        : NULL;
    if (node) {
        node->saved[0] = retained(seg);
        *VN_SAVED_STATE(node, struct csr_scatter_saved) =
            (struct csr_scatter_saved){source ? a->cols : a->rows, source};
    }
    return out;
}

/* ---- gather ----------------------------------------------------------------------------- */

/* Node: input e; saved the row pointers and the entries' rows, and for max
 * the index of each output's maximum (i64 (rows, F), −1 for an empty row). */
enum { SAVED_ROW_PTR, SAVED_ROW_IDX, SAVED_ARGMAX };
struct csr_gather_saved { int64_t rows; vn_gather_op op; };

static vn_status csr_gather_backward(vn_node *node, const vn_tensor *gout)
{
    const struct csr_gather_saved *sv = VN_SAVED_STATE(node, struct csr_gather_saved);
    const vn_tensor *e = node->inputs[0];
    int64_t nnz = e->shape[0], F = vn__numel(e->ndim - 1, e->shape + 1);
    const int64_t *rp = i64(node->saved[SAVED_ROW_PTR]), *ri = i64(node->saved[SAVED_ROW_IDX]);
    vn_tensor *dy = vn__plain_contiguous(gout);
    vn_tensor *de = dy ? csr__new_rows(e, nnz) : NULL;
    if (!de) {
        vn_tensor_release(dy);
        return VN_ERR_MEMORY;
    }
    const float *g = vn_tensor_data(dy);
    float *d = vn_tensor_data(de);
    if (sv->op == VN_GATHER_MAX) {
        const int64_t *arg = i64(node->saved[SAVED_ARGMAX]);
        /* Row i owns its entries ptr[i] .. ptr[i+1]: no two threads write one. */
#pragma omp parallel for schedule(dynamic, 64) if (nnz * F > VN_OMP_MIN_WORK)
        for (int64_t i = 0; i < sv->rows; i++) {
            for (int64_t k = rp[i]; k < rp[i + 1]; k++)
                for (int64_t f = 0; f < F; f++) d[k * F + f] = 0;
            for (int64_t f = 0; f < F; f++)
                if (arg[i * F + f] >= 0) d[arg[i * F + f] * F + f] = g[i * F + f];
        }
    } else {
        index_rows(nnz, F, ri, g, d);
        if (sv->op == VN_GATHER_MEAN)
#pragma omp parallel for schedule(static) if (nnz * F > VN_OMP_MIN_WORK)
            for (int64_t k = 0; k < nnz; k++) {
                float inv = 1.0f / (float)(rp[ri[k] + 1] - rp[ri[k]]);
                for (int64_t f = 0; f < F; f++) d[k * F + f] *= inv;
            }
    }
    vn_tensor_release(dy);
    return vn__accum(node, 0, de);
}

/* y[i] = max over row i's entries (0 for an empty row), arg[i] = the entry
 * of the first maximum in the stored order (−1 for an empty row). */
static void segment_max(int64_t rows, int64_t F, const int64_t *rp, const float *x, float *y,
                        int64_t *arg)
{
#pragma omp parallel for schedule(dynamic, 64) if (rp[rows] * F > VN_OMP_MIN_WORK)
    for (int64_t i = 0; i < rows; i++)
        for (int64_t f = 0; f < F; f++) {
            int64_t best = -1;
            for (int64_t k = rp[i]; k < rp[i + 1]; k++)
                if (best < 0 || x[k * F + f] > x[best * F + f]) best = k;
            y[i * F + f] = best < 0 ? 0 : x[best * F + f];
            arg[i * F + f] = best;
        }
}

vn_tensor *vn_csr_gather(const vn_csr *a, const vn_tensor *e, vn_gather_op op)
{
    int64_t F = 0;
    if (csr__check(a, "csr_gather") ||
        csr__check_rows(e, a->nnz, "csr_gather", "edge tensor", "the matrix's entries", 0, &F))
        return NULL;
    if (op != VN_GATHER_SUM && op != VN_GATHER_MEAN && op != VN_GATHER_MAX)
        return vn__errp(VN_ERR_ARG, "csr_gather: unknown reduction %d (expected sum, mean or max)",
                        (int)op);
    const int64_t *rp = i64(a->row_ptr);
    int64_t shape[2] = {a->rows, F};
    vn_tensor *ec = vn__plain_contiguous(e);
    vn_tensor *y = ec ? csr__new_rows(e, a->rows) : NULL;
    vn_tensor *arg = y && op == VN_GATHER_MAX ? vn__new(VN_I64, 2, shape) : NULL;
    if (y && op == VN_GATHER_MAX && !arg) {
        vn_tensor_release(y);
        y = NULL;
    }
    const float *x = ec ? vn_tensor_data(ec) : NULL; /* a slice's row pointers start at 0 too */
    if (y && op == VN_GATHER_MAX) {
        segment_max(a->rows, F, rp, x, vn_tensor_data(y), vn_tensor_data(arg));
    } else if (y) {
        csr__segment_sum(a->rows, F, rp, NULL, NULL, NULL, x, vn_tensor_data(y));
        float *yy = vn_tensor_data(y);
        for (int64_t i = 0; op == VN_GATHER_MEAN && i < a->rows; i++) {
            int64_t deg = rp[i + 1] - rp[i];
            for (int64_t f = 0; deg > 1 && f < F; f++) yy[i * F + f] /= (float)deg;
        }
    }
    vn_tensor_release(ec);
    vn_node *node = y ? vn__record(y, "csr_gather", csr_gather_backward, 1,
                                   (const vn_tensor *const[]){e})
                      : NULL;
    if (node) {
        node->saved[SAVED_ROW_PTR] = retained(a->row_ptr);
        node->saved[SAVED_ROW_IDX] = retained(a->row_idx);
        node->saved[SAVED_ARGMAX] = retained(arg);
        *VN_SAVED_STATE(node, struct csr_gather_saved) = (struct csr_gather_saved){a->rows, op};
    }
    vn_tensor_release(arg);
    return y;
}

/* ---- edge softmax ------------------------------------------------------------------------- */

/* Node: input scores; saved the row pointers and the output (an alias). */
struct csr_softmax_saved { int64_t rows; };

static vn_status csr_edge_softmax_backward(vn_node *node, const vn_tensor *gout)
{
    const struct csr_softmax_saved *sv = VN_SAVED_STATE(node, struct csr_softmax_saved);
    const vn_tensor *s = node->inputs[0];
    int64_t H = s->ndim == 2 ? s->shape[1] : 1;
    const int64_t *rp = i64(node->saved[0]);
    const float *y = vn_tensor_data(node->saved[1]);
    vn_tensor *dy = vn__plain_contiguous(gout);
    vn_tensor *ds = dy ? csr__new_rows(s, s->shape[0]) : NULL;
    if (ds) {
        const float *g = vn_tensor_data(dy);
        float *d = vn_tensor_data(ds);
        /* ds = y ⊙ (dy − Σ_row y·dy), per head. */
#pragma omp parallel for schedule(dynamic, 64) if (rp[sv->rows] * H > VN_OMP_MIN_WORK)
        for (int64_t i = 0; i < sv->rows; i++)
            for (int64_t h = 0; h < H; h++) {
                float dot = 0;
                for (int64_t k = rp[i]; k < rp[i + 1]; k++) dot += y[k * H + h] * g[k * H + h];
                for (int64_t k = rp[i]; k < rp[i + 1]; k++)
                    d[k * H + h] = y[k * H + h] * (g[k * H + h] - dot);
            }
    }
    vn_tensor_release(dy);
    return ds ? vn__accum(node, 0, ds) : VN_ERR_MEMORY;
}

vn_tensor *vn_csr_edge_softmax(const vn_csr *a, const vn_tensor *scores)
{
    int64_t H = 0;
    if (csr__check(a, "csr_edge_softmax") ||
        csr__check_rows(scores, a->nnz, "csr_edge_softmax", "scores", "the matrix's entries", 0,
                        &H))
        return NULL;
    if (scores->ndim > 2)
        return vn__errp(VN_ERR_SHAPE, "csr_edge_softmax: scores of shape %s, expected (%lld) or "
                        "(%lld, heads)", vn__shape(scores->ndim, scores->shape),
                        (long long)a->nnz, (long long)a->nnz);
    const int64_t *rp = i64(a->row_ptr);
    vn_tensor *sc = vn__plain_contiguous(scores);
    vn_tensor *y = sc ? csr__new_rows(scores, a->nnz) : NULL;
    if (y) {
        const float *x = vn_tensor_data(sc);
        float *o = vn_tensor_data(y);
#pragma omp parallel for schedule(dynamic, 64) if (a->nnz * H > VN_OMP_MIN_WORK)
        for (int64_t i = 0; i < a->rows; i++)
            for (int64_t h = 0; h < H; h++) {
                float m = -INFINITY, sum = 0;
                for (int64_t k = rp[i]; k < rp[i + 1]; k++) m = fmaxf(m, x[k * H + h]);
                for (int64_t k = rp[i]; k < rp[i + 1]; k++) {
                    o[k * H + h] = expf(x[k * H + h] - m);
                    sum += o[k * H + h];
                }
                for (int64_t k = rp[i]; k < rp[i + 1]; k++) o[k * H + h] /= sum;
            }
    }
    vn_tensor_release(sc);
    vn_node *node = y ? vn__record(y, "csr_edge_softmax", csr_edge_softmax_backward, 1,
                                   (const vn_tensor *const[]){scores})
                      : NULL;
    if (node) {
        node->saved[0] = retained(a->row_ptr);
        *VN_SAVED_STATE(node, struct csr_softmax_saved) = (struct csr_softmax_saved){a->rows};
        /* an alias, not y itself: y owns the node (a reference back would be a cycle) */
        if (!(node->saved[1] = vn__alias(y))) {
            vn_tensor_release(y);
            return NULL;
        }
    }
    return y;
}
