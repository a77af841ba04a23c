/* ops_moe.c — Mixture-of-Experts dispatch as a sparse–dense transformation:
 * the weighted row scatter-add (the way back from an expert's dense block;
 * the way in is vn_index_select along dim 0; the scatter-add and its
 * gradient's gather are engine/rows.c's row loops) and the router that decides which rows go to which expert
 * (top-k, the DTS-Gate threshold, capacity). The expert GEMMs themselves
 * are plain vn_matmul / V:N:M layers. */
#include "internal.h"

#include <stdlib.h>

/* Entry k of a 1-d i32/i64 index tensor (any layout). */
static int64_t index_at(const vn_tensor *idx, int64_t k)
{
    return (int64_t)vn__load(idx, vn__offset_of(idx, k));
}

/* ---- scatter_add_rows ------------------------------------------------------------------ */

/* Node inputs: y, idx, and weights when given (then ninputs = 3). */
static vn_status scatter_add_rows_backward(vn_node *n, const vn_tensor *g)
{
    const vn_tensor *y = n->inputs[0], *idx = n->inputs[1];
    const vn_tensor *w = n->ninputs > 2 ? n->inputs[2] : NULL;
    int64_t m = y->shape[0], F = vn__numel(y->ndim - 1, y->shape + 1);
    bool want_y = vn__input_needs_grad(n, 0), want_w = w && vn__input_needs_grad(n, 2);
    vn_tensor *gc = vn__plain_contiguous(g);
    vn_tensor *yc = gc && want_w ? vn__plain_contiguous(y) : NULL;
    vn_tensor *wc = gc && w && want_y ? vn__plain_contiguous(w) : NULL;
    vn_tensor *dy = gc && want_y && (!w || wc) ? vn__new(VN_F32, y->ndim, y->shape) : NULL;
    vn_tensor *dw = gc && want_w && yc ? vn__new(VN_F32, 1, &m) : NULL;
    int64_t *rows = gc && (dy || dw) ? vn__index_list(idx) : NULL;
    vn_status s = gc && (!want_y || dy) && (!want_w || dw) && (rows || !(dy || dw)) ? VN_OK : VN_ERR_MEMORY;
    if (!s && dy) /* dy[k] = w[k] · g[idx[k]] */
        vn__gather_rows_f32(vn_tensor_data(dy), vn_tensor_data(gc), rows, wc ? vn_tensor_data(wc) : NULL, m, F);
    if (!s && dw) { /* dw[k] = ⟨g[idx[k]], y[k]⟩ */
        const float *gp = vn_tensor_data(gc);
        for (int64_t k = 0; k < m; k++) {
            const float *row = gp + rows[k] * F, *yk = VN_F32_PTR(yc) + k * F;
            double acc = 0;
            for (int64_t f = 0; f < F; f++) acc += (double)row[f] * yk[f];
            VN_F32_PTR(dw)[k] = (float)acc;
        }
    }
    free(rows);
    if (!s && dy) s = vn__accum(n, 0, dy);
    else vn_tensor_release(dy);
    if (!s && dw) s = vn__accum(n, 2, dw);
    else vn_tensor_release(dw);
    vn_tensor_release(gc);
    vn_tensor_release(yc);
    vn_tensor_release(wc);
    return s;
}

/* Checks an index tensor for the row ops: 1-d i32/i64 of length m, entries in [0, n). */
static vn_status check_row_index(const vn_tensor *idx, int64_t m, int64_t n, const char *op)
{
    if (vn__check_arg(idx, op, "index", 0)) return vn_last_status();
    if (idx->dtype != VN_I32 && idx->dtype != VN_I64)
        return vn__err(VN_ERR_DTYPE, "%s: index must be i32 or i64, found %s", op,
                       vn_dtype_name(idx->dtype));
    if (idx->ndim != 1 || idx->shape[0] != m)
        return vn__err(VN_ERR_SHAPE, "%s: index must be 1-d with one entry per row (%lld), found %s",
                       op, (long long)m, vn__shape(idx->ndim, idx->shape));
    for (int64_t k = 0; k < m; k++) {
        int64_t v = index_at(idx, k);
        if (v < 0 || v >= n)
            return vn__err(VN_ERR_ARG, "%s: index[%lld] = %lld out of range [0, %lld)", op,
                           (long long)k, (long long)v, (long long)n);
    }
    return VN_OK;
}

vn_tensor *vn_scatter_add_rows(const vn_tensor *y, const vn_tensor *idx, const vn_tensor *weights,
                               int64_t n_rows)
{
    const char *op = "scatter_add_rows";
    if (vn__check_dtype_arg(y, VN_F32, op, "input", 0)) return NULL;
    if (y->ndim == 0) return vn__errp(VN_ERR_SHAPE, "%s: input must have rows (1-d or more), found a 0-d tensor", op);
    if (n_rows < 0) return vn__errp(VN_ERR_ARG, "%s: n_rows must be >= 0, found %lld", op, (long long)n_rows);
    int64_t m = y->shape[0];
    if (check_row_index(idx, m, n_rows, op)) return NULL;
    if (weights) {
        if (vn__check_dtype_arg(weights, VN_F32, op, "weights", 0)) return NULL;
        if (weights->ndim != 1 || weights->shape[0] != m)
            return vn__errp(VN_ERR_SHAPE, "%s: weights must be 1-d with one entry per row (%lld), found %s",
                            op, (long long)m, vn__shape(weights->ndim, weights->shape));
    }
    int64_t shape[VN_MAX_DIMS];
    memcpy(shape, y->shape, sizeof shape);
    shape[0] = n_rows;
    vn_tensor *yc = vn__plain_contiguous(y), *wc = yc && weights ? vn__plain_contiguous(weights) : NULL;
    vn_tensor *out = yc && (!weights || wc) ? vn_zeros(VN_F32, y->ndim, shape) : NULL;
    int64_t *rows = out ? vn__index_list(idx) : NULL;
    if (rows)
        vn__scatter_add_rows_f32(vn_tensor_data(out), vn_tensor_data(yc), rows, wc ? vn_tensor_data(wc) : NULL,
                                 m, vn__numel(y->ndim - 1, y->shape + 1));
    else vn_tensor_release(out), out = NULL;
    free(rows);
    vn_tensor_release(yc);
    vn_tensor_release(wc);
    const vn_tensor *in[3] = {y, idx, weights};
    if (out) vn__record(out, op, scatter_add_rows_backward, weights ? 3 : 2, in);
    return out;
}

/* ---- routing ----------------------------------------------------------------------------- */

void vn_moe_routing_release(vn_moe_routing *r)
{
    if (!r) return;
    vn_tensor_release(r->tokens);
    vn_tensor_release(r->slots);
    vn_tensor_release(r->load);
    vn_tensor_release(r->first);
    vn_tensor_release(r->mask);
    memset(r, 0, sizeof *r);
}

static vn_status route_check(const vn_tensor *scores, int k, double threshold, double cf,
                             const vn_moe_routing *out)
{
    const char *op = "moe_route";
    if (!out) return vn__err(VN_ERR_ARG, "%s: the routing to fill is NULL", op);
    if (vn__check_dtype_arg(scores, VN_F32, op, "scores", 0)) return vn_last_status();
    if (scores->ndim != 2)
        return vn__err(VN_ERR_SHAPE, "%s: scores must be (tokens, experts), found %s", op,
                       vn__shape(scores->ndim, scores->shape));
    int64_t E = scores->shape[1];
    if (E == 0) return vn__err(VN_ERR_ARG, "%s: there are no experts (scores %s)", op,
                               vn__shape(2, scores->shape));
    if (k < 1 || k > E)
        return vn__err(VN_ERR_ARG, "%s: k = %d experts per token, expected 1..%lld (the number of experts)",
                       op, k, (long long)E);
    if (!(cf > 0))
        return vn__err(VN_ERR_ARG, "%s: capacity_factor = %g, expected > 0 (INFINITY for no limit)", op, cf);
    if (isnan(threshold)) return vn__err(VN_ERR_ARG, "%s: threshold is NaN", op);
    return VN_OK;
}

/* Token t's experts in descending score order into order[0..E) (ties: the
 * lower expert first; an insertion sort, E is small); returns how many it
 * chooses: k, then those still above the threshold. */
static int64_t rank_experts(const float *s, int64_t E, int k, double threshold, int64_t *order)
{
    for (int64_t e = 0; e < E; e++) {
        int64_t j = e;
        while (j > 0 && s[order[j - 1]] < s[e]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = e;
    }
    int64_t n = k;
    while (n < E && s[order[n]] > threshold) n++;
    return n;
}

vn_status vn_moe_route(const vn_tensor *scores, int k, double threshold, double capacity_factor,
                       vn_moe_routing *out)
{
    if (out) memset(out, 0, sizeof *out);
    if (route_check(scores, k, threshold, capacity_factor, out)) return vn_last_status();
    int64_t T = scores->shape[0], E = scores->shape[1];
    vn_tensor *sc = vn__plain_contiguous(scores);
    if (!sc) return vn_last_status();
    const float *s = vn_tensor_data(sc);
    for (int64_t i = 0; i < T * E; i++)
        if (isnan(s[i])) {
            vn_tensor_release(sc);
            return vn__err(VN_ERR_ARG, "moe_route: scores[%lld, %lld] is NaN (token %lld, expert %lld): "
                           "the router's logits are not finite", (long long)(i / E), (long long)(i % E),
                           (long long)(i / E), (long long)(i % E));
        }
    /* rank[t·E + e]: the rank at which t chose e, or -1. */
    int64_t *rank = malloc(sizeof(int64_t) * (size_t)(T * E + E + 1)), *order = rank + T * E;
    int64_t shape_e = E;
    out->load = vn_zeros(VN_I64, 1, &shape_e);
    out->first = vn_zeros(VN_I64, 1, &shape_e);
    out->mask = vn_zeros(VN_U8, 2, scores->shape);
    if (!rank || !out->load || !out->first || !out->mask) {
        free(rank);
        vn_tensor_release(sc);
        vn_moe_routing_release(out);
        return vn__err(VN_ERR_MEMORY, "moe_route: out of memory for %lld tokens × %lld experts",
                       (long long)T, (long long)E);
    }
    int64_t *load = vn_tensor_data(out->load), *first = vn_tensor_data(out->first);
    uint8_t *mask = vn_tensor_data(out->mask);
    int64_t selected = 0, max_rank = 0;
    for (int64_t t = 0; t < T; t++) {
        int64_t n = rank_experts(s + t * E, E, k, threshold, order);
        for (int64_t e = 0; e < E; e++) rank[t * E + e] = -1;
        for (int64_t r = 0; r < n; r++) {
            rank[t * E + order[r]] = r;
            mask[t * E + order[r]] = 1;
        }
        first[order[0]]++;
        selected += n;
        if (n > max_rank) max_rank = n;
    }
    vn_tensor_release(sc);
    double cap = ceil(capacity_factor * (double)selected / (double)E);
    int64_t capacity = cap < (double)selected ? (int64_t)cap : selected;
    /* Fill by rank: all first choices, then all second choices, ...; an
     * assignment over its expert's capacity is dropped (rank set to -1). */
    for (int64_t r = 0; r < max_rank; r++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t e = 0; e < E; e++)
                if (rank[t * E + e] == r) {
                    if (load[e] < capacity) load[e]++;
                    else rank[t * E + e] = -1;
                }
    int64_t S = 0;
    for (int64_t e = 0; e < E; e++) {
        order[e] = S; /* where expert e's assignments start */
        S += load[e];
    }
    out->tokens = vn__new(VN_I64, 1, &S);
    out->slots = out->tokens ? vn__new(VN_I64, 1, &S) : NULL;
    if (!out->slots) {
        free(rank);
        vn_moe_routing_release(out);
        return vn_last_status();
    }
    int64_t *tok = vn_tensor_data(out->tokens), *slot = vn_tensor_data(out->slots);
    for (int64_t t = 0; t < T; t++) /* in token order within each expert */
        for (int64_t e = 0; e < E; e++)
            if (rank[t * E + e] >= 0) {
                int64_t at = order[e]++;
                tok[at] = t;
                slot[at] = t * E + e;
            }
    free(rank);
    out->selected = selected;
    out->dropped = selected - S;
    out->capacity = capacity;
    return VN_OK;
}
