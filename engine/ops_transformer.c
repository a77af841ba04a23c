/* ops_transformer.c — the building blocks of a GPT-style transformer that
 * the generic ops cannot express cheaply: the embedding lookup (backward is
 * a scatter-add), layer normalization over the last dim, and causal
 * scaled-dot-product attention with the mask fused into its softmax. Each
 * op works on row-major copies of its inputs and has its own backward. */
#include "internal.h"
#include "vec_math.h" /* the CPU gelu, also with a bias */

#include "blas.h" /* vn__sgemm */

#include <limits.h>
#include <omp.h>
#include <stdlib.h>

/* Accumulates the gradients d[0..2] (NULL: not wanted) into the node's
 * inputs; after a failure the rest are released. */
static vn_status accum_all(vn_node *node, vn_tensor *d[3])
{
    vn_status s = VN_OK;
    for (int i = 0; i < 3; i++) {
        if (!d[i]) continue;
        if (s) vn_tensor_release(d[i]);
        else s = vn__accum(node, i, d[i]);
    }
    return s;
}

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
    vn_tensor *x = vn__plain_contiguous(xin), *g = x ? vn__plain_contiguous(gout) : NULL;
    vn_tensor *gamma = g && node->inputs[1] ? vn__plain_contiguous(node->inputs[1]) : NULL;
    vn_tensor *dx = g && want_x ? vn__new(VN_F32, xin->ndim, xin->shape) : NULL;
    vn_tensor *dgamma = g && want_g ? vn_zeros(VN_F32, 1, &D) : NULL;
    vn_tensor *dbeta = g && want_b ? vn_zeros(VN_F32, 1, &D) : NULL;
    bool ok = g && (!node->inputs[1] || gamma) && (!want_x || dx) && (!want_g || dgamma) &&
              (!want_b || dbeta);
    if (ok) {
        const float *px = vn_tensor_data(x), *pg = vn_tensor_data(g),
                    *stats = vn_tensor_data(node->saved[0]),
                    *pgam = gamma ? vn_tensor_data(gamma) : NULL;
        float *pdx = dx ? vn_tensor_data(dx) : NULL, *pdg = dgamma ? vn_tensor_data(dgamma) : NULL,
              *pdb = dbeta ? vn_tensor_data(dbeta) : NULL;
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = px + r * D, *gr = pg + r * D;
            float mean = stats[2 * r], rstd = stats[2 * r + 1];
            double s1 = 0, s2 = 0; /* Σ ĝ, Σ ĝ ⊙ x̂ */
            for (int64_t j = 0; j < D; j++) {
                float xh = (xr[j] - mean) * rstd, gh = gr[j] * (pgam ? pgam[j] : 1.0f);
                s1 += gh;
                s2 += (double)gh * xh;
                if (pdg) pdg[j] += gr[j] * xh;
                if (pdb) pdb[j] += gr[j];
            }
            if (!pdx) continue;
            float m1 = (float)(s1 / D), m2 = (float)(s2 / D);
            for (int64_t j = 0; j < D; j++) {
                float xh = (xr[j] - mean) * rstd, gh = gr[j] * (pgam ? pgam[j] : 1.0f);
                pdx[r * D + j] = (gh - m1 - xh * m2) * rstd;
            }
        }
    }
    vn_tensor_release(x);
    vn_tensor_release(g);
    vn_tensor_release(gamma);
    if (!ok) {
        vn_tensor_release(dx);
        vn_tensor_release(dgamma);
        vn_tensor_release(dbeta);
        return vn__err(VN_ERR_MEMORY, "layer_norm backward: %s", vn_last_error());
    }
    return accum_all(node, (vn_tensor *[]){dx, dgamma, dbeta});
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
    return accum_all(node, d);
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
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = px + r * D;
            /* two passes in double: var = mean((x − mean)²) stays exact for
             * rows with a large mean, where E[x²] − mean² would cancel */
            double sum = 0, sq = 0;
            for (int64_t j = 0; j < D; j++) sum += xr[j];
            double mean = sum / D;
            for (int64_t j = 0; j < D; j++) sq += (xr[j] - mean) * (xr[j] - mean);
            float m = (float)mean, rstd = (float)(1.0 / sqrt(sq / D + eps));
            ps[2 * r] = m;
            ps[2 * r + 1] = rstd;
            for (int64_t j = 0; j < D; j++) {
                float y = (xr[j] - m) * rstd;
                po[r * D + j] = (pg ? y * pg[j] : y) + (pb ? pb[j] : 0.0f);
            }
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

/* ---- causal attention --------------------------------------------------------- */

/* Each (batch, head) is one task of a parallel loop over the leading dims,
 * computed with single-threaded GEMMs on a T × T score matrix private to
 * the thread (no (B, H, T, T) tensor is kept between forward and
 * backward). The forward saves each query row's max score and 1/Σ exp; the
 * backward recomputes the scores with the same GEMM and turns them into the
 * same probabilities, bit for bit, from those two numbers. */

static void mm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
               const float *B, float *C)
{
    if (m == 0 || n == 0) return;
    if (k == 0) {
        memset(C, 0, sizeof(float) * (size_t)(m * n));
        return;
    }
    vn__sgemm(ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
              (int)k, alpha, A, ta ? (int)m : (int)k, B, tb ? (int)k : (int)n, 0.0f, C, (int)n);
}

/* Row t of S (T × T) becomes softmax over its entries 0..t, the entries
 * above the diagonal 0, as exp(−inf) would be. stats[2t], stats[2t + 1]:
 * the row's max and 1/Σ exp. With stats given as input (recompute), the
 * same probabilities from the saved numbers. */
static void causal_softmax(float *S, int64_t T, float *stats)
{
    for (int64_t t = 0; t < T; t++) {
        float *row = S + t * T, m = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= t; j++) m = row[j] > m ? row[j] : m;
        for (int64_t j = 0; j <= t; j++) {
            row[j] = expf(row[j] - m);
            sum += row[j];
        }
        float inv = 1.0f / sum;
        for (int64_t j = 0; j <= t; j++) row[j] *= inv;
        for (int64_t j = t + 1; j < T; j++) row[j] = 0;
        stats[2 * t] = m;
        stats[2 * t + 1] = inv;
    }
}

static void causal_probs(float *S, int64_t T, const float *stats)
{
    for (int64_t t = 0; t < T; t++) {
        float *row = S + t * T, m = stats[2 * t], inv = stats[2 * t + 1];
        for (int64_t j = 0; j <= t; j++) row[j] = expf(row[j] - m) * inv;
        for (int64_t j = t + 1; j < T; j++) row[j] = 0;
    }
}

/* nt per-thread blocks of `per` floats, from the caching allocator (so a
 * training step makes no malloc once the first has run); NULL with the
 * error set. */
static vn_tensor *scores_scratch(int nt, size_t per)
{
    int64_t n = (int64_t)(per ? per : 1) * nt;
    return vn__new(VN_F32, 1, &n);
}

/* The parallel loop's condition: enough work to wake the threads. */
static bool attn_parallel(int64_t BH, int64_t T, int64_t Dh)
{
    return (double)BH * T * T * Dh > VN_OMP_MIN_WORK;
}

/* Per (batch, head), with P the recomputed probabilities and G = dL/dout:
 *   dV = Pᵀ·G,  dP = G·Vᵀ,  dS = P ⊙ (dP − rowsum(dP ⊙ P)),
 *   dQ = dS·K / √Dh,  dK = dSᵀ·Q / √Dh.
 * Masked entries have P = 0, so they get dS = 0 with no extra test. */
static vn_status attention_backward_cuda(vn_node *node, const vn_tensor *gout);

static vn_status attention_backward(vn_node *node, const vn_tensor *gout)
{
    if (vn__is_cuda(node->inputs[0])) return attention_backward_cuda(node, gout);
    const vn_tensor *qi = node->inputs[0];
    int nd_ = qi->ndim;
    int64_t T = qi->shape[nd_ - 2], Dh = qi->shape[nd_ - 1];
    int64_t BH = node->saved[0]->shape[0];
    float scale = Dh ? (float)(1.0 / sqrt((double)Dh)) : 1.0f;
    bool want[3];
    for (int i = 0; i < 3; i++) want[i] = vn__input_needs_grad(node, i);
    vn_tensor *in[3] = {NULL, NULL, NULL}, *d[3] = {NULL, NULL, NULL};
    vn_tensor *g = vn__plain_contiguous(gout);
    bool ok = g != NULL;
    for (int i = 0; i < 3 && ok; i++) {
        ok = (in[i] = vn__plain_contiguous(node->inputs[i])) != NULL;
        if (ok && want[i]) ok = (d[i] = vn__new(VN_F32, nd_, qi->shape)) != NULL;
    }
    int nt = attn_parallel(BH, T, Dh) ? omp_get_max_threads() : 1;
    size_t per = (size_t)(2 * T * T); /* P and dP of one (batch, head) */
    vn_tensor *scr = ok ? scores_scratch(nt, per) : NULL;
    float *scratch = scr ? vn_tensor_data(scr) : NULL;
    if (scratch) {
        const float *stats = vn_tensor_data(node->saved[0]), *G = vn_tensor_data(g),
                    *Q = vn_tensor_data(in[0]), *K = vn_tensor_data(in[1]),
                    *Vv = vn_tensor_data(in[2]);
        float *dQ = d[0] ? vn_tensor_data(d[0]) : NULL, *dK = d[1] ? vn_tensor_data(d[1]) : NULL,
              *dV = d[2] ? vn_tensor_data(d[2]) : NULL;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
        for (int64_t b = 0; b < BH; b++) {
            int64_t o = b * T * Dh;
            float *P = scratch + per * (size_t)omp_get_thread_num(), *dP = P + T * T;
            mm(false, true, T, T, Dh, scale, Q + o, K + o, P);
            causal_probs(P, T, stats + 2 * b * T);
            if (dV) mm(true, false, T, Dh, T, 1.0f, P, G + o, dV + o);
            if (!dQ && !dK) continue;
            mm(false, true, T, T, Dh, 1.0f, G + o, Vv + o, dP);
            for (int64_t t = 0; t < T; t++) {
                const float *pr = P + t * T;
                float *dr = dP + t * T, s = 0;
                for (int64_t j = 0; j <= t; j++) s += dr[j] * pr[j];
                for (int64_t j = 0; j < T; j++) dr[j] = pr[j] * (dr[j] - s);
            }
            if (dQ) mm(false, false, T, Dh, T, scale, dP, K + o, dQ + o);
            if (dK) mm(true, false, T, Dh, T, scale, dP, Q + o, dK + o);
        }
    }
    vn_tensor_release(scr);
    vn_tensor_release(g);
    for (int i = 0; i < 3; i++) vn_tensor_release(in[i]);
    if (!scratch) {
        for (int i = 0; i < 3; i++) vn_tensor_release(d[i]);
        return vn__err(VN_ERR_MEMORY, "causal_attention backward: %s", vn_last_error());
    }
    return accum_all(node, d);
}

/* On the GPU (kernels/attention.cu) from the saved lse (saved[0]) and
 * output (saved[1]); the kernels write all three gradients, the unwanted
 * ones are dropped. */
static vn_status attention_backward_cuda(vn_node *node, const vn_tensor *gout)
{
    const vn_tensor *qi = node->inputs[0], *lse = node->saved[0];
    int64_t T = qi->shape[qi->ndim - 2], Dh = qi->shape[qi->ndim - 1], BH = lse->shape[0];
    vn_tensor *in[3] = {NULL, NULL, NULL}, *d[3] = {NULL, NULL, NULL};
    vn_tensor *g = vn__plain_contiguous(gout);
    vn_tensor *dvec = g ? vn__new_on(true, VN_F32, 2, lse->shape) : NULL;
    bool ok = dvec != NULL;
    for (int i = 0; i < 3 && ok; i++)
        ok = (in[i] = vn__plain_contiguous(node->inputs[i])) &&
             (d[i] = vn__new_on(true, VN_F32, qi->ndim, qi->shape));
    att_layout l = att_contiguous(1, T, Dh); /* BH heads of (T, Dh), one after the other */
    if (ok && vnk_attention_backward(vn__ptr(d[0]), vn__ptr(d[1]), vn__ptr(d[2]), vn__ptr(dvec),
                                     vn__ptr(in[0]), vn__ptr(in[1]), vn__ptr(in[2]),
                                     vn__ptr(node->saved[1]), vn__ptr(g), vn__ptr(lse), l, l, BH,
                                     1, T, Dh, (float)(1.0 / sqrt((double)Dh))))
        ok = !vn__cuda_err("causal_attention backward");
    vn_tensor_release(g);
    vn_tensor_release(dvec);
    for (int i = 0; i < 3; i++) {
        vn_tensor_release(in[i]);
        if (!ok || !vn__input_needs_grad(node, i)) {
            vn_tensor_release(d[i]);
            d[i] = NULL;
        }
    }
    return ok ? accum_all(node, d) : vn_last_status();
}

/* The forward on the GPU: out and lse (BH, T) (kernels/attention.cu). */
static vn_tensor *attention_cuda(const vn_tensor *const in[3], int64_t BH)
{
    const vn_tensor *q = in[0];
    int64_t T = q->shape[q->ndim - 2], Dh = q->shape[q->ndim - 1], lshape[2] = {BH, T};
    if (Dh != 32 && Dh != 64 && Dh != 128)
        return vn__errp(VN_ERR_ARG, "causal_attention: on CUDA the head dim must be 32, 64 or "
                        "128 (the tensor-core tiles), found %lld in q %s", (long long)Dh,
                        vn__shape(q->ndim, q->shape));
    if (BH > 65535 || T > (1 << 30))
        return vn__errp(VN_ERR_ARG, "causal_attention: on CUDA at most 65535 batch × heads and "
                        "2^30 positions, found q %s", vn__shape(q->ndim, q->shape));
    vn_tensor *c[3] = {NULL, NULL, NULL};
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++) ok = (c[i] = vn__plain_contiguous(in[i])) != NULL;
    vn_tensor *lse = ok ? vn__new_on(true, VN_F32, 2, lshape) : NULL;
    vn_tensor *out = lse ? vn__new_on(true, VN_F32, q->ndim, q->shape) : NULL;
    att_layout l = att_contiguous(1, T, Dh);
    if (out && vnk_attention_forward(vn__ptr(out), vn__ptr(lse), vn__ptr(c[0]), vn__ptr(c[1]),
                                     vn__ptr(c[2]), l, l, BH, 1, T, Dh,
                                     (float)(1.0 / sqrt((double)Dh)))) {
        vn_tensor_release(out);
        out = vn__cuda_errp("causal_attention");
    }
    for (int i = 0; i < 3; i++) vn_tensor_release(c[i]);
    vn_node *node = out ? vn__record(out, "causal_attention", attention_backward, 3, in) : NULL;
    if (node) {
        node->saved[0] = vn_tensor_retain(lse);
        node->saved[1] = vn__alias(out);
    }
    vn_tensor_release(lse);
    return out;
}

vn_tensor *vn_causal_attention(const vn_tensor *q, const vn_tensor *k, const vn_tensor *v)
{
    if (vn__check_dtype_for(q, VN_F32, "causal_attention: q", VN_ALLOW_CUDA) ||
        vn__check_dtype_for(k, VN_F32, "causal_attention: k", VN_ALLOW_CUDA) ||
        vn__check_dtype_for(v, VN_F32, "causal_attention: v", VN_ALLOW_CUDA))
        return NULL;
    const vn_tensor *inputs[3] = {q, k, v};
    bool cuda;
    if (vn__same_device_strict("causal_attention", 3, inputs, (const char *[]){"q", "k", "v"},
                               &cuda))
        return NULL;
    if (q->ndim < 2 || !vn__same_shape(q, k) || !vn__same_shape(q, v))
        return vn__errp(VN_ERR_SHAPE, "causal_attention: q %s, k %s and v %s must have one shape "
                        "(B, H, T, Dh) (at least 2 dims: T, Dh)", vn__shape(q->ndim, q->shape),
                        vn__shape(k->ndim, k->shape), vn__shape(v->ndim, v->shape));
    int64_t T = q->shape[q->ndim - 2], Dh = q->shape[q->ndim - 1];
    int64_t BH = 1; /* the leading dims are independent batches */
    for (int i = 0; i < q->ndim - 2; i++) BH *= q->shape[i];
    if (cuda) return attention_cuda(inputs, BH);
    if (T > INT_MAX || Dh > INT_MAX)
        return vn__errp(VN_ERR_ARG, "causal_attention: q %s exceeds BLAS's limit of %d",
                        vn__shape(q->ndim, q->shape), INT_MAX);
    int64_t sshape[3] = {BH, T, 2}, tt[3] = {2, T, T}; /* per query row: max score, 1/Σ exp */
    if (vn__check_shape("causal_attention", 3, tt)) return NULL; /* the scratch's size */
    float scale = Dh ? (float)(1.0 / sqrt((double)Dh)) : 1.0f;

    vn_tensor *qc = vn__plain_contiguous(q), *kc = qc ? vn__plain_contiguous(k) : NULL;
    vn_tensor *vc = kc ? vn__plain_contiguous(v) : NULL;
    vn_tensor *stats = vc ? vn__new(VN_F32, 3, sshape) : NULL;
    vn_tensor *out = stats ? vn__new(VN_F32, q->ndim, q->shape) : NULL;
    int nt = attn_parallel(BH, T, Dh) ? omp_get_max_threads() : 1;
    size_t per = (size_t)(T * T);
    vn_tensor *scr = out ? scores_scratch(nt, per) : NULL;
    if (out && !scr) {
        vn_tensor_release(out);
        out = NULL;
    }
    if (out) {
        float *scratch = vn_tensor_data(scr);
        const float *Q = vn_tensor_data(qc), *K = vn_tensor_data(kc), *Vv = vn_tensor_data(vc);
        float *S = vn_tensor_data(stats), *O = vn_tensor_data(out);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
        for (int64_t b = 0; b < BH; b++) {
            int64_t o = b * T * Dh;
            float *P = scratch + per * (size_t)omp_get_thread_num();
            mm(false, true, T, T, Dh, scale, Q + o, K + o, P);
            causal_softmax(P, T, S + 2 * b * T);
            mm(false, false, T, Dh, T, 1.0f, P, Vv + o, O + o);
        }
    }
    vn_tensor_release(scr);
    vn_tensor_release(qc);
    vn_tensor_release(kc);
    vn_tensor_release(vc);
    vn_node *node = out ? vn__record(out, "causal_attention", attention_backward, 3, inputs) : NULL;
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
    return accum_all(node, (vn_tensor *[]){dx, db, NULL});
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
