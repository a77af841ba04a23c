/* ops_transformer.c — the building blocks of a GPT-style transformer that
 * the generic ops cannot express cheaply: the embedding lookup (backward is
 * a scatter-add), layer normalization over the last dim, and causal
 * scaled-dot-product attention with the mask fused into its softmax. Each
 * op works on row-major copies of its inputs and has its own backward. */
#include "internal.h"

#include "blas.h" /* vn__sgemm */

#include <limits.h>
#include <omp.h>
#include <stdlib.h>

/* ---- embedding ----------------------------------------------------------- */

/* dW = zeros(V, D); dW[ids[n]] += dL/dout[n] for every position n, so an id
 * used twice gets both rows. Sequential: two positions may share a row. */
static vn_status embedding_backward(vn_node *node, const vn_tensor *gout)
{
    const vn_tensor *ids = node->saved[0];
    vn_tensor *g = vn__plain_contiguous(gout);
    vn_tensor *dw = g ? vn_zeros(VN_F32, 2, node->inputs[0]->shape) : NULL;
    if (dw) {
        int64_t D = node->inputs[0]->shape[1], n = vn_tensor_numel(ids);
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
    return vn__accum(node, 0, dw);
}

vn_tensor *vn_embedding(const vn_tensor *weight, const vn_tensor *ids)
{
    if (vn__check_dtype(weight, VN_F32, "embedding: weight") || vn__check(ids, "embedding: ids"))
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

    /* A private i64 copy: backward must see the ids of the forward pass even
     * if the caller overwrites its tensor in between. */
    vn_tensor *idx = vn__new(VN_I64, ids->ndim, ids->shape);
    if (!idx) return NULL;
    int64_t *pi = vn_tensor_data(idx);
    const void *base = ids->storage->data; /* read as integers: a double would round large ids */
    for (int64_t p = 0; p < n; p++) {
        int64_t off = vn__offset_of(ids, p);
        pi[p] = ids->dtype == VN_I32 ? ((const int32_t *)base)[off] : ((const int64_t *)base)[off];
        if (pi[p] < 0 || pi[p] >= V) {
            long long bad = (long long)pi[p];
            vn_tensor_release(idx);
            return vn__errp(VN_ERR_ARG, "embedding: ids[%lld] = %lld is out of range for %lld rows "
                            "(expected 0..%lld)", (long long)p, bad, (long long)V,
                            (long long)V - 1);
        }
    }

    int64_t shape[VN_MAX_DIMS];
    memcpy(shape, ids->shape, sizeof(int64_t) * (size_t)ids->ndim);
    shape[ids->ndim] = D;
    vn_tensor *w = vn__plain_contiguous(weight);
    vn_tensor *out = w ? vn__new(VN_F32, ids->ndim + 1, shape) : NULL;
    if (out) {
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
    vn_status st = vn__check_dtype_arg(p, VN_F32, "layer_norm", name, 0);
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
static vn_status layer_norm_backward(vn_node *node, const vn_tensor *gout)
{
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
    vn_tensor *d[3] = {dx, dgamma, dbeta};
    vn_status s = VN_OK;
    for (int i = 0; i < 3; i++) {
        if (!d[i]) continue;
        if (s) vn_tensor_release(d[i]);
        else s = vn__accum(node, i, d[i]);
    }
    return s;
}

vn_tensor *vn_layer_norm(const vn_tensor *x, const vn_tensor *gamma, const vn_tensor *beta,
                         double eps)
{
    if (vn__check_dtype(x, VN_F32, "layer_norm: input")) return NULL;
    if (x->ndim == 0 || x->shape[x->ndim - 1] == 0)
        return vn__errp(VN_ERR_SHAPE, "layer_norm: input must have a non-empty last dim to "
                        "normalize over, found %s", vn__shape(x->ndim, x->shape));
    int64_t D = x->shape[x->ndim - 1], rows = vn_tensor_numel(x) / D;
    if (check_affine(gamma, "gamma", D, x) || check_affine(beta, "beta", D, x)) return NULL;
    if (!(eps > 0) || !isfinite(eps))
        return vn__errp(VN_ERR_ARG, "layer_norm: eps must be positive and finite, found %g", eps);

    int64_t stats_shape[2] = {rows, 2}; /* per row: mean, 1/sqrt(var + eps) */
    vn_tensor *xc = vn__plain_contiguous(x);
    vn_tensor *gc = xc && gamma ? vn__plain_contiguous(gamma) : NULL;
    vn_tensor *bc = xc && beta ? vn__plain_contiguous(beta) : NULL;
    vn_tensor *stats = xc ? vn__new(VN_F32, 2, stats_shape) : NULL;
    vn_tensor *out = stats ? vn__new(VN_F32, x->ndim, x->shape) : NULL;
    if (out && ((gamma && !gc) || (beta && !bc))) {
        vn_tensor_release(out);
        out = NULL;
    }
    if (out) {
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
static vn_status attention_backward(vn_node *node, const vn_tensor *gout)
{
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
    vn_status st = VN_OK;
    for (int i = 0; i < 3; i++) {
        if (!want[i]) continue;
        if (st) vn_tensor_release(d[i]);
        else st = vn__accum(node, i, d[i]);
    }
    return st;
}

vn_tensor *vn_causal_attention(const vn_tensor *q, const vn_tensor *k, const vn_tensor *v)
{
    if (vn__check_dtype(q, VN_F32, "causal_attention: q") ||
        vn__check_dtype(k, VN_F32, "causal_attention: k") ||
        vn__check_dtype(v, VN_F32, "causal_attention: v"))
        return NULL;
    if (q->ndim < 2 || !vn__same_shape(q, k) || !vn__same_shape(q, v))
        return vn__errp(VN_ERR_SHAPE, "causal_attention: q %s, k %s and v %s must have one shape "
                        "(B, H, T, Dh) (at least 2 dims: T, Dh)", vn__shape(q->ndim, q->shape),
                        vn__shape(k->ndim, k->shape), vn__shape(v->ndim, v->shape));
    int64_t T = q->shape[q->ndim - 2], Dh = q->shape[q->ndim - 1];
    if (T > INT_MAX || Dh > INT_MAX)
        return vn__errp(VN_ERR_ARG, "causal_attention: q %s exceeds BLAS's limit of %d",
                        vn__shape(q->ndim, q->shape), INT_MAX);
    int64_t BH = 1; /* the leading dims are independent batches */
    for (int i = 0; i < q->ndim - 2; i++) BH *= q->shape[i];
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
    const vn_tensor *inputs[3] = {q, k, v};
    vn_node *node = out ? vn__record(out, "causal_attention", attention_backward, 3, inputs) : NULL;
    if (node) node->saved[0] = vn_tensor_retain(stats);
    vn_tensor_release(stats);
    return out;
}
