/* ops_transformer.c — the building blocks of a GPT-style transformer that
 * the generic ops cannot express cheaply: the embedding lookup (backward is
 * a scatter-add), layer normalization over the last dim and the bias + GELU
 * of an MLP (attention is ops_attention.c). Each op works on row-major
 * copies of its inputs and has its own backward. */
#include "internal.h"
#include "vec_math.h" /* the CPU gelu, also with a bias */

#include <omp.h>
#include <stdlib.h>

/* ---- embedding ----------------------------------------------------------- */

/* dW = zeros(V, D); dW[ids[n]] += dL/dout[n] for every position n, so an id
 * used twice gets both rows. Sequential: two positions may share a row. The
 * CUDA kernel gives each row of dW to one CTA that adds in the same order. */
static vn_status embedding_backward(vn_node *node, const vn_tensor *gout)
{
    const vn_tensor *ids = node->saved[0], *w = node->inputs[0];
    bool cuda = vn__is_cuda(w);
    int64_t V = w->shape[0], D = w->shape[1], n = vn_tensor_numel(ids);
    vn_tensor *g = vn__plain_contiguous(gout);
    vn_tensor *dw = g ? (cuda ? vn__new_on(true, VN_F32, 2, w->shape) : vn_zeros(VN_F32, 2, w->shape))
                      : NULL;
    if (dw && cuda) {
        if (vnk_embedding_backward(vn__ptr(dw), vn__ptr(g), vn__ptr(ids), n, V, D)) {
            vn_tensor_release(dw);
            dw = vn__cuda_errp("embedding backward");
        }
    } else if (dw) {
        const int64_t *pi = vn_tensor_data(ids);
        const float *pg = vn_tensor_data(g);
        float *pw = vn_tensor_data(dw);
        for (int64_t p = 0; p < n; p++) {
            float *row = pw + pi[p] * D;
            const float *src = pg + p * D;
            for (int64_t j = 0; j < D; j++) row[j] += src[j];
        }
    }
    vn_tensor_release(g);
    return dw ? vn__accum(node, 0, dw) : vn_last_status();
}

/* A private i64 copy of the ids on their device, each checked against
 * 0..V−1: backward must see the ids of the forward pass even if the caller
 * overwrites its tensor in between. */
static vn_tensor *checked_ids(const vn_tensor *ids, int64_t V)
{
    int64_t n = vn_tensor_numel(ids), bad = -1, value = 0;
    vn_tensor *idx = vn__new_on(vn__is_cuda(ids), VN_I64, ids->ndim, ids->shape);
    if (!idx) return NULL;
    if (vn__is_cuda(ids)) {
        vnk_loop L;
        const void *in[1];
        vn_tensor *src = vn__plain_contiguous(ids);
        bool bad_copy = src && vn__cuda_loop(idx, 1, (const vn_tensor *const *)&src, &L, in) &&
                        vnk_map(vn__ptr(idx), VN_I64, in, 1, ids->dtype, &L, VNK_COPY, 0, 0);
        vn_tensor_release(src);
        if (!src || bad_copy || vnk_check_targets(&bad, &value, vn__ptr(idx), VN_I64, n, V)) {
            vn_tensor_release(idx);
            return src ? vn__cuda_errp("embedding") : NULL;
        }
    } else {
        int64_t *pi = vn_tensor_data(idx);
        const void *base = ids->storage->data; /* read as integers: a double would round large ids */
        for (int64_t p = 0; p < n && bad < 0; p++) {
            int64_t off = vn__offset_of(ids, p);
            pi[p] = ids->dtype == VN_I32 ? ((const int32_t *)base)[off] : ((const int64_t *)base)[off];
            if (pi[p] < 0 || pi[p] >= V) bad = p, value = pi[p];
        }
    }
    if (bad >= 0) {
        vn_tensor_release(idx);
        return vn__errp(VN_ERR_ARG, "embedding: ids[%lld] = %lld is out of range for %lld rows "
                        "(expected 0..%lld)", (long long)bad, (long long)value, (long long)V,
                        (long long)V - 1);
    }
    return idx;
}

vn_tensor *vn_embedding(const vn_tensor *weight, const vn_tensor *ids)
{
    if (vn__check_dtype_for(weight, VN_F32, "embedding: weight", VN_ALLOW_CUDA) ||
        vn__check_for(ids, "embedding: ids", VN_ALLOW_CUDA) ||
        vn__same_device_strict("embedding", 2, (const vn_tensor *[]){weight, ids},
                               (const char *[]){"weight", "ids"}, NULL))
        return NULL;
    if (weight->ndim != 2)
        return vn__errp(VN_ERR_SHAPE, "embedding: weight must be 2-D (V, D), found %s",
                        vn__shape(weight->ndim, weight->shape));
    if (ids->dtype != VN_I32 && ids->dtype != VN_I64)
        return vn__errp(VN_ERR_DTYPE, "embedding: ids must be i32 or i64 row indices, found %s",
                        vn_dtype_name(ids->dtype));
    if (ids->ndim >= VN_MAX_DIMS)
        return vn__errp(VN_ERR_SHAPE, "embedding: ids %s have %d dims; at most %d leave room for "
                        "the embedding dim", vn__shape(ids->ndim, ids->shape),
                        ids->ndim, VN_MAX_DIMS - 1);
    int64_t V = weight->shape[0], D = weight->shape[1], n = vn_tensor_numel(ids);
    bool cuda = vn__is_cuda(weight);
    vn_tensor *idx = checked_ids(ids, V);
    if (!idx) return NULL;

    int64_t shape[VN_MAX_DIMS];
    memcpy(shape, ids->shape, sizeof(int64_t) * (size_t)ids->ndim);
    shape[ids->ndim] = D;
    vn_tensor *w = vn__plain_contiguous(weight);
    vn_tensor *out = w ? vn__new_on(cuda, VN_F32, ids->ndim + 1, shape) : NULL;
    if (out && cuda) { /* a row gather */
        if (n * D > 0 && vnk_index_select(vn__ptr(out), vn__ptr(w), VN_F32, vn__ptr(idx), VN_I64, 1,
                                      V, D, n)) {
            vn_tensor_release(out);
            out = vn__cuda_errp("embedding");
        }
    } else if (out) {
        const int64_t *pi = vn_tensor_data(idx);
        const float *pw = vn_tensor_data(w);
        float *po = vn_tensor_data(out);
#pragma omp parallel for schedule(static) if (n * D > VN_OMP_MIN_WORK)
        for (int64_t p = 0; p < n; p++)
            memcpy(po + p * D, pw + pi[p] * D, sizeof(float) * (size_t)D);
    }
    vn_tensor_release(w);
    vn_node *node = out ? vn__record(out, "embedding", embedding_backward, 1, &weight) : NULL;
    if (node) node->saved[0] = vn_tensor_retain(idx);
    vn_tensor_release(idx);
    return out;
}

/* ---- layer_norm ------------------------------------------------------------ */

/* Shape check of an optional affine parameter: NULL or (D) f32. */
static vn_status check_affine(const vn_tensor *p, const char *name, int64_t D, const vn_tensor *x)
{
    if (!p) return VN_OK;
    vn_status st = vn__check_dtype_arg(p, VN_F32, "layer_norm", name, VN_ALLOW_CUDA);
    if (st) return st;
    if (p->ndim != 1 || p->shape[0] != D)
        return vn__err(VN_ERR_SHAPE, "layer_norm: %s %s does not match input %s: expected %s", name,
                       vn__shape(p->ndim, p->shape), vn__shape(x->ndim, x->shape), vn__shape(1, &D));
    return VN_OK;
}

/* Row sums in f32 over LN_LANES partial sums, which GCC keeps in vector
 * registers (a single running sum is a serial chain it may not reorder);
 * the lanes are added in a fixed order, so a row gives the same bits on
 * every run. f32 is enough at these widths: the rows are centred before
 * the squares are summed. */
#define LN_LANES 16
/* Rows whose serial chains run side by side (ln_rows). */
#define LN_ROWS 4

static float lanes_total(const float *a, float tail)
{
    for (int l = 0; l < LN_LANES; l++) tail += a[l];
    return tail;
}

/* From the saved per-row (mean, 1/σ) and x̂ = (x − mean)/σ, with
 * ĝ = g ⊙ gamma:
 *   dx = (ĝ − mean(ĝ) − x̂ · mean(ĝ ⊙ x̂)) / σ,
 *   dgamma = Σ_rows g ⊙ x̂,  dbeta = Σ_rows g. */
static vn_status layer_norm_backward_cuda(vn_node *node, const vn_tensor *gout);

static vn_status layer_norm_backward(vn_node *node, const vn_tensor *gout)
{
    if (vn__is_cuda(node->inputs[0])) return layer_norm_backward_cuda(node, gout);
    const vn_tensor *xin = node->inputs[0];
    int64_t D = xin->shape[xin->ndim - 1], rows = D ? vn_tensor_numel(xin) / D : 0;
    bool want_x = vn__input_needs_grad(node, 0), want_g = vn__input_needs_grad(node, 1),
         want_b = vn__input_needs_grad(node, 2);
    /* Rows are split over the threads; each thread sums its rows' dgamma
     * and dbeta into a partial row of its own, added up in thread order
     * afterwards (deterministic for a given thread count). */
    int nt = rows * D > VN_OMP_MIN_WORK ? omp_get_max_threads() : 1;
    int64_t pshape[3] = {nt, 2, D};
    /* dx is computed in g's memory, row by row after the row is read: in
     * gout itself when the rule may overwrite it (no new array), else in a
     * copy. */
    vn_tensor *x = vn__plain_contiguous(xin), *g = NULL;
    if (x && want_x && vn__grad_writable(gout)) {
        g = vn_tensor_retain((vn_tensor *)gout);
    } else if (x && want_x) {
        g = vn__new(VN_F32, gout->ndim, gout->shape);
        if (g && vn_tensor_copy_(g, gout)) vn_tensor_release(g), g = NULL;
    } else if (x) {
        g = vn__plain_contiguous(gout);
    }
    vn_tensor *gamma = g && node->inputs[1] ? vn__plain_contiguous(node->inputs[1]) : NULL;
    vn_tensor *dx = g && want_x ? vn_tensor_retain(g) : NULL;
    vn_tensor *dgamma = g && want_g ? vn__new(VN_F32, 1, &D) : NULL;
    vn_tensor *dbeta = g && want_b ? vn__new(VN_F32, 1, &D) : NULL;
    vn_tensor *part = g && (want_g || want_b) ? vn_zeros(VN_F32, 3, pshape) : NULL;
    bool ok = g && (!node->inputs[1] || gamma) && (!want_x || dx) && (!want_g || dgamma) &&
              (!want_b || dbeta) && (!(want_g || want_b) || part);
    if (ok) {
        const float *px = vn_tensor_data(x), *stats = vn_tensor_data(node->saved[0]),
                    *pgam = gamma ? vn_tensor_data(gamma) : NULL;
        float *pg = vn_tensor_data(g), *ppart = part ? vn_tensor_data(part) : NULL;
        bool write_dx = dx != NULL;
#pragma omp parallel num_threads(nt) if (nt > 1)
        {
            int t = omp_get_thread_num(), n = omp_get_num_threads();
            float *pdg = ppart ? ppart + 2 * D * t : NULL, *pdb = pdg ? pdg + D : NULL;
            for (int64_t r = rows * t / n; r < rows * (t + 1) / n; r++) {
                const float *xr = px + r * D;
                float *gr = pg + r * D;
                float mean = stats[2 * r], rstd = stats[2 * r + 1];
                if (pdg)
                    for (int64_t j = 0; j < D; j++) {
                        pdg[j] += gr[j] * ((xr[j] - mean) * rstd);
                        pdb[j] += gr[j];
                    }
                if (!write_dx) continue;
                /* Σ ĝ and Σ ĝ ⊙ x̂ over lanes, as ln_rows sums */
                float a1[LN_LANES] = {0}, a2[LN_LANES] = {0}, t1 = 0, t2 = 0;
                int64_t body = D - D % LN_LANES, j;
                for (j = 0; j < body; j += LN_LANES)
                    for (int l = 0; l < LN_LANES; l++) {
                        float xh = (xr[j + l] - mean) * rstd;
                        float gh = gr[j + l] * (pgam ? pgam[j + l] : 1.0f);
                        a1[l] += gh;
                        a2[l] += gh * xh;
                    }
                for (; j < D; j++) {
                    float xh = (xr[j] - mean) * rstd, gh = gr[j] * (pgam ? pgam[j] : 1.0f);
                    t1 += gh;
                    t2 += gh * xh;
                }
                float m1 = lanes_total(a1, t1) / (float)D, m2 = lanes_total(a2, t2) / (float)D;
                for (int64_t j = 0; j < D; j++) {
                    float xh = (xr[j] - mean) * rstd, gh = gr[j] * (pgam ? pgam[j] : 1.0f);
                    gr[j] = (gh - m1 - xh * m2) * rstd;
                }
            }
        }
        for (int w = 0; w < 2; w++) {
            float *out = w ? (dbeta ? vn_tensor_data(dbeta) : NULL)
                           : (dgamma ? vn_tensor_data(dgamma) : NULL);
            if (!out) continue;
            for (int64_t j = 0; j < D; j++) {
                float sum = 0;
                for (int t = 0; t < nt; t++) sum += ppart[(2 * t + w) * D + j];
                out[j] = sum;
            }
        }
    }
    vn_tensor_release(x);
    vn_tensor_release(g);
    vn_tensor_release(gamma);
    vn_tensor_release(part);
    if (!ok) {
        vn_tensor_release(dx);
        vn_tensor_release(dgamma);
        vn_tensor_release(dbeta);
        return vn__err(VN_ERR_MEMORY, "layer_norm backward: %s", vn_last_error());
    }
    return vn__accum_all(node, 3, (vn_tensor *[]){dx, dgamma, dbeta});
}

/* The same on the GPU: dx by one warp per row, dgamma and dbeta as
 * per-chunk column sums that vnk_reduce adds in chunk order (deterministic). */
static vn_status layer_norm_backward_cuda(vn_node *node, const vn_tensor *gout)
{
    const vn_tensor *xin = node->inputs[0];
    int64_t D = xin->shape[xin->ndim - 1], rows = vn_tensor_numel(xin) / D;
    int64_t pshape[2] = {vnk_layer_norm_chunks(rows), D};
    bool want_x = vn__input_needs_grad(node, 0), want_g = vn__input_needs_grad(node, 1),
         want_b = vn__input_needs_grad(node, 2);
    vn_tensor *x = vn__plain_contiguous(xin), *g = x ? vn__plain_contiguous(gout) : NULL;
    vn_tensor *gamma = g && node->inputs[1] ? vn__plain_contiguous(node->inputs[1]) : NULL;
    vn_tensor *d[3] = {NULL, NULL, NULL}, *part[2] = {NULL, NULL};
    bool ok = g && (!node->inputs[1] || gamma);
    if (ok && want_x) ok = (d[0] = vn__new_on(true, VN_F32, xin->ndim, xin->shape)) != NULL;
    for (int i = 0; i < 2 && ok; i++)
        if (i ? want_b : want_g)
            ok = (part[i] = vn__new_on(true, VN_F32, 2, pshape)) && (d[i + 1] = vn__new_on(true, VN_F32, 1, &D));
    if (ok && vnk_layer_norm_backward(d[0] ? vn__ptr(d[0]) : NULL, part[0] ? vn__ptr(part[0]) : NULL,
                                      part[1] ? vn__ptr(part[1]) : NULL, vn__ptr(g), vn__ptr(x),
                                      vn__ptr(node->saved[0]), gamma ? vn__ptr(gamma) : NULL, rows, D))
        ok = !vn__cuda_err("layer_norm backward");
    for (int i = 0; i < 2 && ok; i++)
        if (part[i] && vnk_reduce(vn__ptr(d[i + 1]), NULL, vn__ptr(part[i]), VN_F32, 1, pshape[0],
                                  D, VNK_RED_SUM, 1.0))
            ok = !vn__cuda_err("layer_norm backward");
    vn_tensor_release(x);
    vn_tensor_release(g);
    vn_tensor_release(gamma);
    vn_tensor_release(part[0]);
    vn_tensor_release(part[1]);
    if (!ok) {
        for (int i = 0; i < 3; i++) vn_tensor_release(d[i]);
        return vn_last_status();
    }
    return vn__accum_all(node, 3, d);
}

/* LN_ROWS rows x[r] (D values each) → y[r] = (x[r] − mean)/σ ⊙ g + b (g, b
 * may be NULL), stats[r] = {mean, 1/σ}. Two passes per row (sums over
 * LN_LANES lanes), so var = mean((x − mean)²) stays exact for rows with a
 * large mean, where E[x²] − mean² would cancel. The rows go side by side:
 * a row's lane totals and 1/sqrt are one serial chain, which alone would
 * leave the core waiting on each operation; four chains overlap. A row may
 * be listed again right after itself (a last group, the decoder's one row):
 * it gets the same values and is written once. Not inlined: the one copy of
 * the arithmetic serves vn_layer_norm and the fused decoder (decode.c, via
 * vn__layer_norm_row), so the two give the same bits (FMA contraction may
 * differ between copies). */
static __attribute__((noinline)) void ln_rows(const float *const *x, const float *g,
                                              const float *b, int64_t D, double eps,
                                              float *const *y, float *const *stats)
{
    float m[LN_ROWS], rstd[LN_ROWS];
    int64_t body = D - D % LN_LANES;
    /* one phase for all rows, then the next: each row's chain stays close to
     * the others' in the instruction stream, where the core overlaps them */
    for (int r = 0; r < LN_ROWS; r++) {
        float a[LN_LANES] = {0}, tail = 0;
        int64_t j;
        for (j = 0; j < body; j += LN_LANES)
            for (int l = 0; l < LN_LANES; l++) a[l] += x[r][j + l];
        for (; j < D; j++) tail += x[r][j];
        m[r] = lanes_total(a, tail) / (float)D;
    }
    for (int r = 0; r < LN_ROWS; r++) {
        float a[LN_LANES] = {0}, tail = 0;
        int64_t j;
        for (j = 0; j < body; j += LN_LANES)
            for (int l = 0; l < LN_LANES; l++) a[l] += (x[r][j + l] - m[r]) * (x[r][j + l] - m[r]);
        for (; j < D; j++) tail += (x[r][j] - m[r]) * (x[r][j] - m[r]);
        rstd[r] = (float)(1.0 / sqrt((double)lanes_total(a, tail) / (double)D + eps));
    }
    for (int r = 0; r < LN_ROWS; r++) {
        if (r && x[r] == x[r - 1]) continue;
        stats[r][0] = m[r];
        stats[r][1] = rstd[r];
        for (int64_t j = 0; j < D; j++) {
            float v = (x[r][j] - m[r]) * rstd[r];
            y[r][j] = (g ? v * g[j] : v) + (b ? b[j] : 0.0f);
        }
    }
}

void vn__layer_norm_row(const float *x, const float *g, const float *b, int64_t D, double eps,
                        float *y, float *stats)
{
    const float *xs[LN_ROWS] = {x, x, x, x};
    float *ys[LN_ROWS] = {y, y, y, y}, *ss[LN_ROWS] = {stats, stats, stats, stats};
    ln_rows(xs, g, b, D, eps, ys, ss);
}

vn_tensor *vn_layer_norm(const vn_tensor *x, const vn_tensor *gamma, const vn_tensor *beta,
                         double eps)
{
    if (vn__check_dtype_for(x, VN_F32, "layer_norm: input", VN_ALLOW_CUDA)) return NULL;
    if (x->ndim == 0 || x->shape[x->ndim - 1] == 0)
        return vn__errp(VN_ERR_SHAPE, "layer_norm: input must have a non-empty last dim to "
                        "normalize over, found %s", vn__shape(x->ndim, x->shape));
    int64_t D = x->shape[x->ndim - 1], rows = vn_tensor_numel(x) / D;
    if (check_affine(gamma, "gamma", D, x) || check_affine(beta, "beta", D, x)) return NULL;
    if (!(eps > 0) || !isfinite(eps))
        return vn__errp(VN_ERR_ARG, "layer_norm: eps must be positive and finite, found %g", eps);
    bool cuda;
    if (vn__same_device_strict("layer_norm", 3, (const vn_tensor *[]){x, gamma, beta},
                               (const char *[]){"input", "gamma", "beta"}, &cuda))
        return NULL;

    int64_t stats_shape[2] = {rows, 2}; /* per row: mean, 1/sqrt(var + eps) */
    vn_tensor *xc = vn__plain_contiguous(x);
    vn_tensor *gc = xc && gamma ? vn__plain_contiguous(gamma) : NULL;
    vn_tensor *bc = xc && beta ? vn__plain_contiguous(beta) : NULL;
    vn_tensor *stats = xc ? vn__new_on(cuda, VN_F32, 2, stats_shape) : NULL;
    vn_tensor *out = stats ? vn__new_on(cuda, VN_F32, x->ndim, x->shape) : NULL;
    if (out && ((gamma && !gc) || (beta && !bc))) {
        vn_tensor_release(out);
        out = NULL;
    }
    if (out && cuda) {
        if (vnk_layer_norm(vn__ptr(out), vn__ptr(stats), vn__ptr(xc), gc ? vn__ptr(gc) : NULL,
                           bc ? vn__ptr(bc) : NULL, rows, D, (float)eps)) {
            vn_tensor_release(out);
            out = vn__cuda_errp("layer_norm");
        }
    } else if (out) {
        const float *px = vn_tensor_data(xc), *pg = gc ? vn_tensor_data(gc) : NULL,
                    *pb = bc ? vn_tensor_data(bc) : NULL;
        float *po = vn_tensor_data(out), *ps = vn_tensor_data(stats);
#pragma omp parallel for schedule(static) if (rows * D > VN_OMP_MIN_WORK)
        for (int64_t r0 = 0; r0 < rows; r0 += LN_ROWS) {
            const float *xs[LN_ROWS];
            float *ys[LN_ROWS], *ss[LN_ROWS];
            for (int r = 0; r < LN_ROWS; r++) { /* past the last row: the last row again */
                int64_t k = r0 + r < rows ? r0 + r : rows - 1;
                xs[r] = px + k * D, ys[r] = po + k * D, ss[r] = ps + 2 * k;
            }
            ln_rows(xs, pg, pb, D, eps, ys, ss);
        }
    }
    vn_tensor_release(xc);
    vn_tensor_release(gc);
    vn_tensor_release(bc);
    const vn_tensor *inputs[3] = {x, gamma, beta};
    vn_node *node = out ? vn__record(out, "layer_norm", layer_norm_backward, 3, inputs) : NULL;
    if (node) node->saved[0] = vn_tensor_retain(stats);
    vn_tensor_release(stats);
    return out;
}

/* ---- bias + GELU ---------------------------------------------------------------- */

/* u = x + bias:  dx = g ⊙ gelu'(u),  dbias = Σ_rows dx. */
static vn_status bias_gelu_backward(vn_node *node, const vn_tensor *gout)
{
    const vn_tensor *xin = node->inputs[0];
    int64_t D = xin->shape[xin->ndim - 1], n = vn_tensor_numel(xin), rows = n / D;
    bool cuda = vn__is_cuda(xin);
    vn_tensor *x = vn__plain_contiguous(xin), *b = x ? vn__plain_contiguous(node->inputs[1]) : NULL;
    vn_tensor *g = b ? vn__plain_contiguous(gout) : NULL;
    vn_tensor *dx = g ? vn__new_on(cuda, VN_F32, xin->ndim, xin->shape) : NULL;
    if (dx && cuda) {
        if (vnk_bias_gelu(vn__ptr(dx), vn__ptr(x), vn__ptr(b), vn__ptr(g), n, D)) {
            vn_tensor_release(dx);
            dx = vn__cuda_errp("bias_gelu backward");
        }
    } else if (dx) {
        const float *px = vn_tensor_data(x), *pb = vn_tensor_data(b), *pg = vn_tensor_data(g);
        float *pd = vn_tensor_data(dx);
        vn__bias_gelu_backward_f32(pd, pg, px, pb, rows, D);
    }
    vn_tensor *flat = dx && vn__input_needs_grad(node, 1) ? vn_reshape(dx, 2, (int64_t[]){rows, D})
                                                          : NULL;
    vn_tensor *db = flat ? vn_sum(flat, 0, false) : NULL;
    vn_status s = dx ? VN_OK : vn_last_status();
    if (dx && vn__input_needs_grad(node, 1) && !db) s = vn_last_status();
    vn_tensor_release(x);
    vn_tensor_release(b);
    vn_tensor_release(g);
    vn_tensor_release(flat);
    if (s) {
        vn_tensor_release(dx);
        vn_tensor_release(db);
        return s;
    }
    if (!vn__input_needs_grad(node, 0)) {
        vn_tensor_release(dx);
        dx = NULL;
    }
    return vn__accum_all(node, 2, (vn_tensor *[]){dx, db});
}

vn_tensor *vn_bias_gelu(const vn_tensor *x, const vn_tensor *bias)
{
    const vn_tensor *in[2] = {x, bias};
    bool cuda;
    if (vn__check_dtype_for(x, VN_F32, "bias_gelu: x", VN_ALLOW_CUDA) ||
        vn__check_dtype_for(bias, VN_F32, "bias_gelu: bias", VN_ALLOW_CUDA) ||
        vn__same_device_strict("bias_gelu", 2, in, (const char *[]){"x", "bias"}, &cuda))
        return NULL;
    if (x->ndim == 0 || bias->ndim != 1 || bias->shape[0] != x->shape[x->ndim - 1] ||
        bias->shape[0] == 0)
        return vn__errp(VN_ERR_SHAPE, "bias_gelu: expected x (..., D) and bias (D) with D > 0, "
                        "found x %s and bias %s", vn__shape(x->ndim, x->shape),
                        vn__shape(bias->ndim, bias->shape));
    int64_t D = bias->shape[0], n = vn_tensor_numel(x);
    vn_tensor *xc = vn__plain_contiguous(x), *bc = xc ? vn__plain_contiguous(bias) : NULL;
    vn_tensor *out = bc ? vn__new_on(cuda, VN_F32, x->ndim, x->shape) : NULL;
    if (out && cuda) {
        if (vnk_bias_gelu(vn__ptr(out), vn__ptr(xc), vn__ptr(bc), NULL, n, D)) {
            vn_tensor_release(out);
            out = vn__cuda_errp("bias_gelu");
        }
    } else if (out) {
        const float *px = vn_tensor_data(xc), *pb = vn_tensor_data(bc);
        float *po = vn_tensor_data(out);
        vn__bias_gelu_f32(po, px, pb, n / D, D);
    }
    vn_tensor_release(xc);
    vn_tensor_release(bc);
    if (out) vn__record(out, "bias_gelu", bias_gelu_backward, 2, in);
    return out;
}
