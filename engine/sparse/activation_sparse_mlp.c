/* activation_sparse_mlp.c — the fused two-layer MLP with a sparse hidden
 * layer, Y = act(X·W1ᵀ + b1)·W2ᵀ + b2 (SparDA / PIT's transformation, see
 * activation_sparse.c). One index of the hidden layer's kept columns per
 * row tile, built once in the forward, serves the second product, its
 * backward, the activation's backward and the first layer's backward: dZ
 * is zero off the kept columns, so dX = dZ·W1 gathers only the kept rows of
 * W1 (contiguous rows: a copy per row) and dW1 gets only those rows. */
#include "act_sparse_internal.h"

#include "blas.h" /* vn__sgemm: OpenBLAS on OpenMP's threads */

/* SAVED_ZC: the condensed values of Z (act__condense: each tile's kept
 * columns; Z itself on the dense path); SAVED_W2T: W2's operand, W2t or W2
 * (act__weight); SAVED_ROWS: with a mask, the real rows (i64), else NULL. */
enum { SAVED_INDEX, SAVED_ZC, SAVED_W2T, SAVED_ROWS };
struct act_mlp_saved { int64_t rows, d, hidden, out, tile, ntiles; vn_sparse_act act; };
enum { IN_X, IN_W1, IN_W2, IN_B1, IN_B2 };

/* The buffers of one tile: Hc / dZc (tile × hidden), Wc2 and G2 (c2 ×
 * out), W1c and G1 (c1 × d), c2 and c1 the chunks (act__chunk) of the
 * two widths, at most the widest condensed tile. */
typedef struct { float *hc, *wc2, *g2, *w1c, *g1; } mlp_bufs;

static bool mlp_scratch(const act_index *ix, int64_t d, vn_tensor **hold, mlp_bufs *b)
{
    int64_t kmax = act__max_condensed(ix), c2 = act__chunk(ix->out), c1 = act__chunk(d);
    if (c2 > kmax) c2 = kmax;
    if (c1 > kmax) c1 = kmax;
    /* at least one element; no more, so that the dense path's buffer (one
     * tile of all rows) takes the allocator's bin of its exact size */
    int64_t n = ix->tile * ix->in + 2 * ix->out * c2 + 2 * c1 * d;
    if (n == 0) n = 1;
    if (!(*hold = vn__new(VN_F32, 1, &n))) return false;
    b->hc = vn_tensor_data(*hold);
    b->wc2 = b->hc + ix->tile * ix->in;
    b->g2 = b->wc2 + ix->out * c2;
    b->w1c = b->g2 + ix->out * c2;
    b->g1 = b->w1c + c1 * d;
    return true;
}

/* The weight gradients dW1 (hidden × d) and dW2t (hidden × out; or dW2,
 * out × hidden, when W2 is used as it is) are built tile by tile without
 * being zeroed first: a row's first contribution is copied in, later ones
 * added (seen[j]: row j of both has been written), and the rows no tile
 * kept are zeroed at the end (grads_finish). A dense tile's products write
 * every row straight in, with beta 0 on the first tile and 1 after (the
 * rows not yet written zeroed first). dw1, dw2t: NULL when not wanted. */
typedef struct {
    float *dw1, *dw2t;
    uint8_t *seen;
    int64_t hidden, d, out;
    bool plain, any; /* plain: dw2t is dW2 (out × hidden); any: some tile written */
} mlp_grads;

/* Rows not yet written set to 0 (in both gradients). */
static void grads_zero_unseen(const mlp_grads *g)
{
    for (int64_t j = 0; j < g->hidden; j++) {
        if (g->seen[j]) continue;
        if (g->dw1) memset(g->dw1 + j * g->d, 0, sizeof(float) * (size_t)g->d);
        if (g->dw2t && !g->plain) memset(g->dw2t + j * g->out, 0, sizeof(float) * (size_t)g->out);
    }
}

/* The beta of a dense tile's gradient products (see mlp_grads). Plain
 * (all tiles dense or empty): once any tile is written, every row is. */
static float grads_dense_beta(const mlp_grads *g)
{
    if (!g->any) return 0.0f;
    grads_zero_unseen(g);
    return 1.0f;
}

/* After tile t's products: its rows are written. */
static void grads_mark(mlp_grads *g, const act_index *ix, int64_t t)
{
    int64_t k = ix->count[t];
    const int64_t *cols = act__cols(ix, t);
    for (int64_t l = 0; l < k; l++) g->seen[cols[l]] = 1;
    g->any = true;
}

static void grads_finish(mlp_grads *g)
{
    if (g->any) {
        grads_zero_unseen(g);
        return;
    }
    if (g->dw1) memset(g->dw1, 0, sizeof(float) * (size_t)(g->hidden * g->d));
    if (g->dw2t) memset(g->dw2t, 0, sizeof(float) * (size_t)(g->hidden * g->out));
}

/* The second layer's backward on tile t: dW2t[cols, :] (+)= Hcᵀ·dY_t (or,
 * with W2 used as it is, dW2 (+)= dY_tᵀ·H_t), then
 * dZc = (dY_t·Wc2ᵀ) ⊙ act'(Zc) into b->hc (m × k), and db1[cols] += its
 * column sums. A condensed tile goes a chunk of kept columns at a time
 * (act__chunk): Hc's chunk gives its rows of dW2t, then its place in b->hc
 * takes dZc's chunk. */
static void tile_backward_2(const act_index *ix, int64_t t, const float *w2t, const float *dyt,
                            const mlp_grads *g, float *db1, const mlp_bufs *b)
{
    int64_t k = ix->count[t], m = act__tile_rows(ix, t), out = ix->out;
    const int64_t *cols = act__cols(ix, t);
    act__tile_h(ix, t, NULL, b->hc, NULL);
    bool dense = k == ix->in, plain = ix->plain_w;
    if (dense) { /* W2 (or W2t) and the gradient as they are */
        float beta = grads_dense_beta(g);
        if (g->dw2t && plain) /* dW2 (out × hidden) (+)= dY_tᵀ·H_t */
            vn__sgemm(CblasTrans, CblasNoTrans, (int)out, (int)k, (int)m, 1.0f, dyt, (int)out,
                      b->hc, (int)k, beta, g->dw2t, (int)k);
        else if (g->dw2t)
            vn__sgemm(CblasTrans, CblasNoTrans, (int)k, (int)out, (int)m, 1.0f, b->hc,
                      (int)k, dyt, (int)out, beta, g->dw2t, (int)out);
        vn__sgemm(CblasNoTrans, plain ? CblasNoTrans : CblasTrans, (int)m, (int)k, (int)out,
                  1.0f, dyt, (int)out, w2t, (int)(plain ? ix->in : out), 0.0f, b->hc, (int)k);
    } else
        for (int64_t c = 0, kc = act__chunk(out); c < k; c += kc) {
            int64_t n = k - c < kc ? k - c : kc;
            if (g->dw2t) {
                vn__sgemm(CblasTrans, CblasNoTrans, (int)n, (int)out, (int)m, 1.0f, b->hc + c,
                          (int)k, dyt, (int)out, 0.0f, b->g2, (int)out);
                vn__scatter_rows_first_f32(g->dw2t, b->g2, cols + c, n, out, g->seen);
            }
            vn__gather_rows_f32(b->wc2, w2t, cols + c, NULL, n, out);
            vn__sgemm(CblasNoTrans, CblasTrans, (int)m, (int)n, (int)out, 1.0f, dyt, (int)out,
                      b->wc2, (int)out, 0.0f, b->hc + c, (int)k);
        }
    /* Zc's block is contiguous (act__condense): dZc in one pass */
    const float *zc = ix->zc + ix->off[t];
    for (int64_t r = 0; r < m; r++)
        for (int64_t l = 0; l < k; l++) b->hc[r * k + l] *= act__df(ix->act, zc[r * k + l]);
    if (db1 && dense) /* the same sums without the index: vectorized */
        for (int64_t r = 0; r < m; r++)
            for (int64_t l = 0; l < k; l++) db1[l] += b->hc[r * k + l];
    else if (db1)
        for (int64_t r = 0; r < m; r++)
            for (int64_t l = 0; l < k; l++) db1[cols[l]] += b->hc[r * k + l];
}

/* The first layer's backward on tile t from dZc (b->hc, m × k): dX_t =
 * dZc·W1[cols, :] and dW1[cols, :] (+)= dZcᵀ·X_t, a chunk of kept columns
 * at a time when condensed. */
static void tile_backward_1(const act_index *ix, int64_t t, int64_t d, const float *x, const float *w1,
                            float *dx, const mlp_grads *g, const mlp_bufs *b)
{
    int64_t k = ix->count[t], m = act__tile_rows(ix, t), r0 = t * ix->tile;
    const int64_t *cols = act__cols(ix, t);
    if (k == ix->in) { /* dense: W1 and dW1 as they are; tile_backward_2 zeroed the rows not yet written */
        if (dx)
            vn__sgemm(CblasNoTrans, CblasNoTrans, (int)m, (int)d, (int)k, 1.0f, b->hc, (int)k, w1, (int)d,
                      0.0f, dx + r0 * d, (int)d);
        if (g->dw1)
            vn__sgemm(CblasTrans, CblasNoTrans, (int)k, (int)d, (int)m, 1.0f, b->hc, (int)k, x + r0 * d,
                      (int)d, g->any ? 1.0f : 0.0f, g->dw1, (int)d);
        return;
    }
    for (int64_t c = 0, kc = act__chunk(d); c < k; c += kc) {
        int64_t n = k - c < kc ? k - c : kc;
        if (dx) { /* dX_t (+)= dZc[:, chunk]·W1[chunk cols, :] */
            vn__gather_rows_f32(b->w1c, w1, cols + c, NULL, n, d);
            vn__sgemm(CblasNoTrans, CblasNoTrans, (int)m, (int)d, (int)n, 1.0f, b->hc + c, (int)k, b->w1c,
                      (int)d, c ? 1.0f : 0.0f, dx + r0 * d, (int)d);
        }
        if (g->dw1) {
            vn__sgemm(CblasTrans, CblasNoTrans, (int)n, (int)d, (int)m, 1.0f, b->hc + c, (int)k, x + r0 * d,
                      (int)d, 0.0f, b->g1, (int)d);
            vn__scatter_rows_first_f32(g->dw1, b->g1, cols + c, n, d, g->seen);
        }
    }
}

/* t (..., width) as a contiguous matrix of the rows listed in keep (i64),
 * or of all its rows when keep is NULL (t itself when contiguous). */
static vn_tensor *kept_rows(const vn_tensor *t, const vn_tensor *keep, int64_t width)
{
    vn_tensor *c = vn__plain_contiguous(t);
    if (!c || !keep) return c;
    int64_t shape[2] = {keep->shape[0], width};
    vn_tensor *r = vn__new(VN_F32, 2, shape);
    if (r) vn__gather_rows_f32(vn_tensor_data(r), vn_tensor_data(c), vn_tensor_data(keep), NULL, shape[0], width);
    vn_tensor_release(c);
    return r;
}

/* The full tensor (shape, ndim) with the rows of part (keep's count ×
 * width) at the rows keep lists and zeros elsewhere; part itself when keep
 * is NULL. Takes part's reference. */
static vn_tensor *spread_rows(vn_tensor *part, const vn_tensor *keep, int ndim, const int64_t *shape)
{
    if (!part || !keep) return part;
    vn_tensor *full = vn_zeros(VN_F32, ndim, shape);
    if (full)
        vn__scatter_add_rows_f32(vn_tensor_data(full), vn_tensor_data(part), vn_tensor_data(keep), NULL,
                                 keep->shape[0], shape[ndim - 1]);
    vn_tensor_release(part);
    return full;
}

static vn_status act_mlp_backward(vn_node *node, const vn_tensor *gout)
{
    const struct act_mlp_saved *sv = VN_SAVED_STATE(node, struct act_mlp_saved);
    act_index ix = {.rows = sv->rows, .in = sv->hidden, .out = sv->out, .tile = sv->tile,
                    .ntiles = sv->ntiles, .act = sv->act};
    act__index_views(&ix, node->saved[SAVED_INDEX]);
    ix.zc = vn_tensor_data(node->saved[SAVED_ZC]);
    bool want[5];
    for (int i = 0; i < 5; i++) want[i] = i < node->ninputs && node->inputs[i] && vn__input_needs_grad(node, i);
    const vn_tensor *x = node->inputs[IN_X];
    int64_t d = sv->d, w1s[2] = {sv->hidden, d}, w2ts[2] = {sv->hidden, sv->out};
    const vn_tensor *keep = node->saved[SAVED_ROWS]; /* only these rows were computed */
    int64_t xv[2] = {sv->rows, d};
    vn_tensor *dy = kept_rows(gout, keep, sv->out), *xc = dy ? kept_rows(x, keep, d) : NULL;
    vn_tensor *w1 = xc ? vn__plain_contiguous(node->inputs[IN_W1]) : NULL, *buf = NULL, *dw2t = NULL;
    vn_tensor *seen = w1 ? vn_zeros(VN_U8, 1, &sv->hidden) : NULL;
    vn_tensor *g[5] = {NULL, NULL, NULL, NULL, NULL};
    mlp_bufs b;
    bool ok = seen && mlp_scratch(&ix, d, &buf, &b);
    /* dX, dW1 and dW2 are fully written by the tiles (no zero fill first) */
    if (ok && want[IN_X])
        ok = (g[IN_X] = keep ? vn__new(VN_F32, 2, xv) : vn__new(VN_F32, x->ndim, x->shape)) != NULL;
    if (ok && want[IN_W1]) ok = (g[IN_W1] = vn__new(VN_F32, 2, w1s)) != NULL;
    int64_t w2s[2] = {sv->out, sv->hidden}; /* dW2 straight, when W2 was used as it is */
    if (ok && want[IN_W2]) ok = (dw2t = vn__new(VN_F32, 2, ix.plain_w ? w2s : w2ts)) != NULL;
    if (ok && want[IN_B1]) ok = (g[IN_B1] = vn_zeros(VN_F32, 1, &sv->hidden)) != NULL;
    if (ok && want[IN_B2]) ok = (g[IN_B2] = vn_zeros(VN_F32, 1, &sv->out)) != NULL;
#define GP(i) (g[i] ? VN_F32_PTR(g[i]) : NULL)
    if (ok) {
        const float *DY = vn_tensor_data(dy);
        float *dx = GP(IN_X);
        mlp_grads gr = {GP(IN_W1), dw2t ? VN_F32_PTR(dw2t) : NULL, vn_tensor_data(seen), sv->hidden, d,
                        sv->out, ix.plain_w, false};
        for (int64_t t = 0; t < ix.ntiles; t++) {
            if (ix.count[t] == 0) { /* H is all zero here: so are dX's rows, and no weight gradient */
                if (dx) memset(dx + t * ix.tile * d, 0, sizeof(float) * (size_t)(act__tile_rows(&ix, t) * d));
                continue;
            }
            tile_backward_2(&ix, t, vn_tensor_data(node->saved[SAVED_W2T]), DY + t * ix.tile * ix.out, &gr,
                            GP(IN_B1), &b);
            tile_backward_1(&ix, t, d, vn_tensor_data(xc), vn_tensor_data(w1), dx, &gr, &b);
            grads_mark(&gr, &ix, t);
        }
        grads_finish(&gr);
        if (dw2t && ix.plain_w) g[IN_W2] = dw2t, dw2t = NULL;
        else if (dw2t && !(g[IN_W2] = act__transposed(dw2t))) ok = false;
        float *db2 = GP(IN_B2);
        for (int64_t i = 0; db2 && i < ix.rows; i++)
            for (int64_t o = 0; o < ix.out; o++) db2[o] += DY[i * ix.out + o];
    }
#undef GP
    if (ok && g[IN_X]) ok = (g[IN_X] = spread_rows(g[IN_X], keep, x->ndim, x->shape)) != NULL;
    vn_status st = ok ? VN_OK : VN_ERR_MEMORY;
    for (int i = 0; i < 5; i++) {
        if (!st && g[i]) st = vn__accum(node, i, g[i]);
        else vn_tensor_release(g[i]);
    }
    vn_tensor *all[6] = {dy, xc, w1, dw2t, buf, seen};
    for (int k = 0; k < 6; k++) vn_tensor_release(all[k]);
    return st;
}

/* The real rows of a masked call: mask (x's leading dims) u8, nonzero a
 * real row and 0 padding, into an i64 tensor of their numbers (*keep), or
 * *keep NULL without a mask. */
static vn_status mask_rows(const char *op, const vn_tensor *x, const vn_tensor *mask, vn_tensor **keep)
{
    *keep = NULL;
    if (!mask) return VN_OK;
    if (vn__check_arg(mask, op, "mask", 0)) return vn_last_status();
    if (mask->dtype != VN_U8)
        return vn__err(VN_ERR_DTYPE, "%s: mask must be u8 (1 = a real row, 0 = padding), found %s", op,
                       vn_dtype_name(mask->dtype));
    bool same = mask->ndim == x->ndim - 1;
    for (int k = 0; same && k < mask->ndim; k++) same = mask->shape[k] == x->shape[k];
    if (!same)
        return vn__err(VN_ERR_SHAPE, "%s: mask %s must have the input's leading dims (input %s)", op,
                       vn__shape(mask->ndim, mask->shape), vn__shape(x->ndim, x->shape));
    int64_t rows = vn__numel(mask->ndim, mask->shape), n = 0;
    for (int64_t i = 0; i < rows; i++) n += vn__load(mask, vn__offset_of(mask, i)) != 0;
    if (!(*keep = vn__new(VN_I64, 1, &n))) return vn_last_status();
    int64_t *p = vn_tensor_data(*keep);
    for (int64_t i = 0, k = 0; i < rows; i++)
        if (vn__load(mask, vn__offset_of(mask, i)) != 0) p[k++] = i;
    return VN_OK;
}

vn_tensor *vn_act_sparse_mlp_masked(const vn_tensor *x, const vn_tensor *w1, const vn_tensor *b1,
                                    const vn_tensor *w2, const vn_tensor *b2, const vn_tensor *mask,
                                    vn_sparse_act act, int64_t tile_rows, double dense_above,
                                    vn_act_sparse_stats *stats)
{
    const char *op = mask ? "act_sparse_mlp (masked)" : "act_sparse_mlp";
    if (act__check_common(op, x, act, dense_above)) return NULL;
    if (x->ndim == 0) return vn__errp(VN_ERR_SHAPE, "%s: input is 0-d, expected (..., d)", op);
    if (act__check_weight(op, "w1", w1, x->shape[x->ndim - 1], "d, the input's last dim", "b1", b1) ||
        act__check_weight(op, "w2", w2, w1->shape[0], "hidden, w1's rows", "b2", b2))
        return NULL;
    if (dense_above < 0) dense_above = VN_ACT_SPARSE_DENSE_ABOVE;
    int64_t d = w1->shape[1], hidden = w1->shape[0], out = w2->shape[0], ysh[VN_MAX_DIMS];
    act_index ix;
    vn_tensor *keep;
    if (act__prepare(op, x, hidden, out, act, &ix, ysh) || mask_rows(op, x, mask, &keep)) return NULL;
    if (keep) ix.rows = keep->shape[0]; /* padding rows are never multiplied */
    int64_t zs[2] = {ix.rows, hidden}, yvs[2] = {ix.rows, out};
    vn_tensor *xc = kept_rows(x, keep, d), *w1c = xc ? vn__plain_contiguous(w1) : NULL;
    vn_tensor *b1c = w1c && b1 ? vn__plain_contiguous(b1) : NULL;
    vn_tensor *b2c = w1c && (b1c || !b1) && b2 ? vn__plain_contiguous(b2) : NULL;
    vn_tensor *z = w1c && (b1c || !b1) && (b2c || !b2) ? vn__new(VN_F32, 2, zs) : NULL;
    vn_tensor *index = NULL, *zc = NULL, *buf = NULL, *y = NULL, *w2t = NULL;
    if (z) { /* Z = X·W1ᵀ, dense; b1 is added by the index and act__condense, which read Z anyway */
        float *Z = vn_tensor_data(z);
        if (ix.rows && hidden && d)
            vn__sgemm(CblasNoTrans, CblasTrans, (int)ix.rows, (int)hidden, (int)d, 1.0f,
                      vn_tensor_data(xc), (int)d, vn_tensor_data(w1c), (int)d, 0.0f, Z, (int)hidden);
        else
            memset(Z, 0, sizeof(float) * (size_t)(ix.rows * hidden));
        ix.bias = b1c ? vn_tensor_data(b1c) : NULL;
        index = act__index(&ix, Z, tile_rows > 0 ? tile_rows : VN_ACT_SPARSE_TILE_ROWS, dense_above,
                           stats);
    }
    if (index) zc = act__condense(&ix, z); /* Z + b1 at the kept columns; Z itself on the dense path */
    vn_tensor_release(z);
    z = NULL;
    mlp_bufs b;
    if (zc) w2t = act__weight(&ix, w2); /* W2 transposed, or W2 itself on the dense path */
    if (w2t && mlp_scratch(&ix, 0, &buf, &b)) y = keep ? vn__new(VN_F32, 2, yvs) : vn__new(VN_F32, x->ndim, ysh);
    if (y)
        act__forward_tiles(&ix, NULL, vn_tensor_data(w2t), b2c ? vn_tensor_data(b2c) : NULL, b.hc, b.wc2,
                           vn_tensor_data(y), stats);
    y = spread_rows(y, keep, x->ndim, ysh); /* padding rows: 0 */
    const vn_tensor *ins[5] = {x, w1, w2, b1, b2};
    vn_node *node = y ? vn__record(y, op, act_mlp_backward, b2 ? 5 : b1 ? 4 : 3, ins) : NULL;
    if (node) {
        node->saved[SAVED_INDEX] = index;
        node->saved[SAVED_ZC] = zc;
        node->saved[SAVED_W2T] = w2t;
        node->saved[SAVED_ROWS] = keep;
        index = zc = w2t = keep = NULL;
        *VN_SAVED_STATE(node, struct act_mlp_saved) =
            (struct act_mlp_saved){ix.rows, d, hidden, out, ix.tile, ix.ntiles, act};
    }
    vn_tensor *all[9] = {index, zc, buf, xc, w1c, w2t, b1c, b2c, keep};
    for (int k = 0; k < 9; k++) vn_tensor_release(all[k]);
    return y;
}

vn_tensor *vn_act_sparse_mlp(const vn_tensor *x, const vn_tensor *w1, const vn_tensor *b1,
                             const vn_tensor *w2, const vn_tensor *b2, vn_sparse_act act,
                             int64_t tile_rows, double dense_above, vn_act_sparse_stats *stats)
{
    return vn_act_sparse_mlp_masked(x, w1, b1, w2, b2, NULL, act, tile_rows, dense_above, stats);
}
