/* ops_attention.c — causal scaled-dot-product attention, two entry points
 * over one kernel per device: vn_causal_attention on heads (..., T, Dh), and
 * vn_causal_self_attention on the fused (B, T, 3C) output of a qkv
 * projection, which reads the heads where they lie and writes (B, T, C) (what
 * a GPT block needs: no narrow, transpose or copy around it, and its backward
 * writes dq, dk and dv into one (B, T, 3C) gradient). Where the heads lie is
 * an att_layout (kernels/attention_tile.h), for both devices.
 *
 * CPU: each (batch, head) is one task of a parallel loop, computed with
 * single-threaded GEMMs (reading the heads with a leading dimension) on a
 * T × T score matrix private to the thread (no (B, H, T, T) tensor is kept
 * between forward and backward). The forward saves each query row's max
 * score and 1/Σ exp; the backward recomputes the scores with the same GEMM
 * and turns them into the same probabilities, bit for bit, from those two
 * numbers (the exp is vec_math.c's polynomial, 8 lanes at a time). Heads
 * with T <= 1024 and Dh a multiple of 16 go, where the CPU has AVX-512, to
 * attention_cpu.c's register tiles instead (the same saved stats; the
 * GEMMs' per-call costs and packing were most of the time there).
 *
 * CUDA: the FlashAttention-2 kernels of kernels/attention.cu, through the
 * same layouts. */
#include "internal.h"

#include "attention_cpu.h" /* the AVX-512 kernel for small heads */
#include "blas.h"          /* vn__sgemm */
#include "vec_math.h"      /* the softmax's exp, vectorized */

#include <limits.h>
#include <omp.h>

/* The q, k and v parts of a fused qkv (B, T, 3C) as heads ([q | k | v]
 * along the last dim, head h at columns h·Dh.. of its part; counted from
 * element 0, C and 2C), and the (B, T, C) output with head h at columns
 * h·Dh.. */
static att_layout qkv_layout(int64_t T, int64_t C, int64_t Dh)
{
    att_layout l = {T * 3 * C, Dh, 3 * C};
    return l;
}

static att_layout out_layout(int64_t T, int64_t C, int64_t Dh)
{
    att_layout l = {T * C, Dh, C};
    return l;
}

/* C (m × n, row stride ldc) = alpha · op(A) · op(B), op(A) m × k, op(B)
 * k × n, each stored row-major with its leading dimension. */
static void mm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
               int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc)
{
    if (m == 0 || n == 0) return;
    if (k == 0) {
        for (int64_t i = 0; i < m; i++) memset(C + i * ldc, 0, sizeof(float) * (size_t)n);
        return;
    }
    vn__sgemm(ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
              (int)k, alpha, A, (int)lda, B, (int)ldb, 0.0f, C, (int)ldc);
}

/* Row t of S (T × T) becomes softmax over its entries 0..t, the entries
 * above the diagonal 0, as exp(−inf) would be. stats[2t], stats[2t + 1]:
 * the row's max and 1/Σ exp. */
static void causal_softmax(float *S, int64_t T, float *stats)
{
    for (int64_t t = 0; t < T; t++) {
        float *row = S + t * T, m = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= t; j++) m = row[j] > m ? row[j] : m;
        vn__exp_shift_f32(row, t + 1, m, 1.0f);
        for (int64_t j = 0; j <= t; j++) sum += row[j];
        float inv = 1.0f / sum;
        for (int64_t j = 0; j <= t; j++) row[j] *= inv;
        for (int64_t j = t + 1; j < T; j++) row[j] = 0;
        stats[2 * t] = m;
        stats[2 * t + 1] = inv;
    }
}

/* The same probabilities from the scores and the saved stats. */
static void causal_probs(float *S, int64_t T, const float *stats)
{
    for (int64_t t = 0; t < T; t++) {
        float *row = S + t * T;
        vn__exp_shift_f32(row, t + 1, stats[2 * t], stats[2 * t + 1]); /* e · 1/Σ, as forward */
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

/* The threads of the loop over (batch, head): all of them when there is
 * enough work to wake them. */
static int attn_threads(int64_t BH, int64_t T, int64_t Dh)
{
    return (double)BH * T * T * Dh > VN_OMP_MIN_WORK ? omp_get_max_threads() : 1;
}

static float attn_scale(int64_t Dh) { return Dh ? (float)(1.0 / sqrt((double)Dh)) : 1.0f; }

/* The causal mask lets the products skip what lies above the diagonal: the
 * queries go in blocks of this many rows, and query block [r0, r1) meets
 * only keys 0..r1−1 (key block [c0, c1) only queries c0..T−1). At T = 64 the
 * GEMMs do 3/4 of the full T × T work, at T = 128 5/8. Smaller blocks skip
 * more but make more, smaller calls. */
#define ATT_BLOCK 32

/* The end of the block that starts at r0. */
static int64_t block_end(int64_t r0, int64_t T) { return r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T; }

/* P (T × T, row stride T) = scale · A·Bᵀ (A, B: T × Dh) on and below the
 * diagonal's blocks; what lies right of a row block's last key is left
 * unwritten. */
static void causal_scores(float *P, const float *A, int64_t lda, const float *B, int64_t ldb,
                          int64_t T, int64_t Dh, float scale)
{
    for (int64_t r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int64_t r1 = block_end(r0, T);
        mm(false, true, r1 - r0, r1, Dh, scale, A + r0 * lda, lda, B, ldb, P + r0 * T, T);
    }
}

/* Out (T × Dh, row stride ldo) = P·B over the keys each row block meets,
 * P (T × T) zero above the diagonal. */
static void causal_pv(float *Out, int64_t ldo, const float *P, const float *B, int64_t ldb,
                      int64_t T, int64_t Dh, float alpha)
{
    for (int64_t r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int64_t r1 = block_end(r0, T);
        mm(false, false, r1 - r0, Dh, r1, alpha, P + r0 * T, T, B, ldb, Out + r0 * ldo, ldo);
    }
}

/* Out (T × Dh) = Pᵀ·B over the queries each key block meets (rows c0..T−1
 * of B for keys c0..c1−1). */
static void causal_ptb(float *Out, int64_t ldo, const float *P, const float *B, int64_t ldb,
                       int64_t T, int64_t Dh, float alpha)
{
    for (int64_t c0 = 0; c0 < T; c0 += ATT_BLOCK) {
        int64_t c1 = block_end(c0, T);
        mm(true, false, c1 - c0, Dh, T - c0, alpha, P + c0 * T + c0, T, B + c0 * ldb, ldb,
           Out + c0 * ldo, ldo);
    }
}

/* out and stats (B·H, T, 2) from q, k, v (read through layout in, out
 * written through ol); false (error set) when the scratch cannot be
 * allocated. */
static bool forward_cpu(float *O, float *stats, const float *Q, const float *K, const float *V,
                        att_layout in, att_layout ol, int64_t B, int64_t H, int64_t T, int64_t Dh)
{
    float scale = attn_scale(Dh);
    int nt = attn_threads(B * H, T, Dh);
    bool fast = vn__attention_cpu_fast(T, Dh);
    size_t per = fast ? vn__attention_cpu_scratch(T, Dh, false) : (size_t)(T * T);
    vn_tensor *scr = scores_scratch(nt, per);
    if (!scr) return false;
    float *scratch = vn_tensor_data(scr);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t bh = 0; bh < B * H; bh++) {
        int64_t i = att_head_offset(in, (int)bh, (int)H);
        float *P = scratch + per * (size_t)omp_get_thread_num();
        if (fast) {
            vn__attention_cpu_forward(O + att_head_offset(ol, (int)bh, (int)H), ol.row,
                                      stats + 2 * bh * T, Q + i, K + i, V + i, in.row, T, Dh,
                                      scale, P);
            continue;
        }
        causal_scores(P, Q + i, in.row, K + i, in.row, T, Dh, scale);
        causal_softmax(P, T, stats + 2 * bh * T);
        causal_pv(O + att_head_offset(ol, (int)bh, (int)H), ol.row, P, V + i, in.row, T, Dh, 1.0f);
    }
    vn_tensor_release(scr);
    return true;
}

/* Per (batch, head), with P the recomputed probabilities and G = dL/dout:
 *   dV = Pᵀ·G,  dP = G·Vᵀ,  dS = P ⊙ (dP − rowsum(dP ⊙ P)),
 *   dQ = dS·K / √Dh,  dK = dSᵀ·Q / √Dh.
 * Masked entries have P = 0 and dS = 0; the products run over the blocks
 * on and below the diagonal only (causal_scores). dQ, dK
 * or dV NULL: not wanted. Every wanted gradient is written whole (no
 * zeroing first). False (error set) when the scratch cannot be allocated. */
static bool backward_cpu(float *dQ, float *dK, float *dV, const float *Q, const float *K,
                         const float *V, const float *G, const float *stats, att_layout in,
                         att_layout ol, int64_t B, int64_t H, int64_t T, int64_t Dh)
{
    int64_t ld = in.row, ldo = ol.row;
    float scale = attn_scale(Dh);
    int nt = attn_threads(B * H, T, Dh);
    bool fast = vn__attention_cpu_fast(T, Dh);
    /* P and dP of one (batch, head); the kernel's Kᵀ and Vᵀ too */
    size_t per = fast ? vn__attention_cpu_scratch(T, Dh, true) : (size_t)(2 * T * T);
    vn_tensor *scr = scores_scratch(nt, per);
    if (!scr) return false;
    float *scratch = vn_tensor_data(scr);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t bh = 0; bh < B * H; bh++) {
        int64_t i = att_head_offset(in, (int)bh, (int)H), o = att_head_offset(ol, (int)bh, (int)H);
        float *P = scratch + per * (size_t)omp_get_thread_num(), *dP = P + T * T;
        if (fast) {
            vn__attention_cpu_backward(dQ ? dQ + i : NULL, dK ? dK + i : NULL, dV ? dV + i : NULL,
                                       Q + i, K + i, V + i, ld, G + o, ldo, stats + 2 * bh * T, T,
                                       Dh, scale, P);
            continue;
        }
        causal_scores(P, Q + i, ld, K + i, ld, T, Dh, scale);
        causal_probs(P, T, stats + 2 * bh * T);
        if (dV) causal_ptb(dV + i, ld, P, G + o, ldo, T, Dh, 1.0f);
        if (!dQ && !dK) continue;
        causal_scores(dP, G + o, ldo, V + i, ld, T, Dh, 1.0f);
        for (int64_t t = 0; t < T; t++) {
            const float *pr = P + t * T;
            float *dr = dP + t * T, s = 0;
            for (int64_t j = 0; j <= t; j++) s += dr[j] * pr[j];
            for (int64_t j = 0; j <= t; j++) dr[j] = pr[j] * (dr[j] - s);
            /* above the diagonal dS = 0 (P = 0 there); past the row block's
             * keys dP was never written, so no product with it */
            for (int64_t j = t + 1; j < T; j++) dr[j] = 0;
        }
        if (dQ) causal_pv(dQ + i, ld, dP, K + i, ld, T, Dh, scale);
        if (dK) causal_ptb(dK + i, ld, dP, Q + i, ld, T, Dh, scale);
    }
    vn_tensor_release(scr);
    return true;
}

/* The product of t's dims before its last `keep` ones. */
static int64_t leading(const vn_tensor *t, int keep)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim - keep; i++) n *= t->shape[i];
    return n;
}

/* ---- vn_causal_attention -------------------------------------------------- */

static vn_status attention_backward_cuda(vn_node *node, const vn_tensor *gout);

static vn_status attention_backward(vn_node *node, const vn_tensor *gout)
{
    if (vn__is_cuda(node->inputs[0])) return attention_backward_cuda(node, gout);
    const vn_tensor *qi = node->inputs[0];
    int nd = qi->ndim;
    int64_t BH = node->saved[0]->shape[0], T = qi->shape[nd - 2], Dh = qi->shape[nd - 1];
    att_layout l = att_contiguous(1, T, Dh); /* BH heads of (T, Dh), one after the other */
    vn_tensor *in[3] = {NULL, NULL, NULL}, *d[3] = {NULL, NULL, NULL};
    vn_tensor *g = vn__plain_contiguous(gout);
    bool ok = g != NULL;
    for (int i = 0; i < 3 && ok; i++) {
        ok = (in[i] = vn__plain_contiguous(node->inputs[i])) != NULL;
        if (ok && vn__input_needs_grad(node, i)) ok = (d[i] = vn__new(VN_F32, nd, qi->shape)) != NULL;
    }
    float *pd[3];
    for (int i = 0; i < 3; i++) pd[i] = d[i] ? vn_tensor_data(d[i]) : NULL;
    ok = ok && backward_cpu(pd[0], pd[1], pd[2], vn_tensor_data(in[0]), vn_tensor_data(in[1]),
                            vn_tensor_data(in[2]), vn_tensor_data(g), vn_tensor_data(node->saved[0]),
                            l, l, BH, 1, T, Dh);
    vn_tensor_release(g);
    for (int i = 0; i < 3; i++) vn_tensor_release(in[i]);
    if (!ok) {
        for (int i = 0; i < 3; i++) vn_tensor_release(d[i]);
        return vn__err(VN_ERR_MEMORY, "causal_attention backward: %s", vn_last_error());
    }
    return vn__accum_all(node, 3, d);
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
                                     1, T, Dh, attn_scale(Dh)))
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
    return ok ? vn__accum_all(node, 3, d) : vn_last_status();
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
                                     vn__ptr(c[2]), l, l, BH, 1, T, Dh, attn_scale(Dh))) {
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
    int64_t BH = leading(q, 2); /* the leading dims are independent batches */
    if (cuda) return attention_cuda(inputs, BH);
    if (T > INT_MAX || Dh > INT_MAX || BH > INT_MAX) /* BLAS sizes; head numbers are int */
        return vn__errp(VN_ERR_ARG, "causal_attention: q %s exceeds BLAS's limit of %d",
                        vn__shape(q->ndim, q->shape), INT_MAX);
    int64_t sshape[3] = {BH, T, 2}, tt[3] = {2, T, T}; /* per query row: max score, 1/Σ exp */
    if (vn__check_shape("causal_attention", 3, tt)) return NULL; /* the scratch's size */

    vn_tensor *qc = vn__plain_contiguous(q), *kc = qc ? vn__plain_contiguous(k) : NULL;
    vn_tensor *vc = kc ? vn__plain_contiguous(v) : NULL;
    vn_tensor *stats = vc ? vn__new(VN_F32, 3, sshape) : NULL;
    vn_tensor *out = stats ? vn__new(VN_F32, q->ndim, q->shape) : NULL;
    att_layout l = att_contiguous(1, T, Dh);
    if (out && !forward_cpu(vn_tensor_data(out), vn_tensor_data(stats), vn_tensor_data(qc),
                            vn_tensor_data(kc), vn_tensor_data(vc), l, l, BH, 1, T, Dh)) {
        vn_tensor_release(out);
        out = NULL;
    }
    vn_tensor_release(qc);
    vn_tensor_release(kc);
    vn_tensor_release(vc);
    vn_node *node = out ? vn__record(out, "causal_attention", attention_backward, 3, inputs) : NULL;
    if (node) node->saved[0] = vn_tensor_retain(stats);
    vn_tensor_release(stats);
    return out;
}

/* ---- vn_causal_self_attention ---------------------------------------------- */

struct self_attention_saved {
    int64_t H;
};

static vn_status self_attention_backward_cuda(vn_node *node, const vn_tensor *gout);

/* dqkv (B, T, 3C) in one buffer: each head's dq, dk and dv land in their
 * columns of it, which together cover it whole (no zeroing first). CPU from
 * the saved stats (saved[0]). */
static vn_status self_attention_backward(vn_node *node, const vn_tensor *gout)
{
    if (vn__is_cuda(node->inputs[0])) return self_attention_backward_cuda(node, gout);
    const int64_t *s = node->inputs[0]->shape;
    int64_t B = s[0], T = s[1], C = s[2] / 3,
            H = VN_SAVED_STATE(node, struct self_attention_saved)->H, Dh = C / H;
    vn_tensor *x = vn__plain_contiguous(node->inputs[0]);
    vn_tensor *g = x ? vn__plain_contiguous(gout) : NULL;
    vn_tensor *d = g ? vn__new(VN_F32, 3, s) : NULL;
    bool ok = d != NULL;
    if (ok) {
        const float *px = vn_tensor_data(x);
        float *pd = vn_tensor_data(d);
        ok = backward_cpu(pd, pd + C, pd + 2 * C, px, px + C, px + 2 * C, vn_tensor_data(g),
                          vn_tensor_data(node->saved[0]), qkv_layout(T, C, Dh),
                          out_layout(T, C, Dh), B, H, T, Dh);
    }
    vn_tensor_release(x);
    vn_tensor_release(g);
    if (!ok) {
        vn_tensor_release(d);
        return vn__err(VN_ERR_MEMORY, "causal_self_attention backward: %s", vn_last_error());
    }
    return vn__accum(node, 0, d);
}

/* The same on the GPU from the saved lse (saved[0], (B·H, T)) and output
 * (saved[1]); the kernels write every element of dqkv. */
static vn_status self_attention_backward_cuda(vn_node *node, const vn_tensor *gout)
{
    const vn_tensor *lse = node->saved[0];
    const int64_t *s = node->inputs[0]->shape;
    int64_t B = s[0], T = s[1], C = s[2] / 3,
            H = VN_SAVED_STATE(node, struct self_attention_saved)->H, Dh = C / H;
    vn_tensor *x = vn__plain_contiguous(node->inputs[0]);
    vn_tensor *g = x ? vn__plain_contiguous(gout) : NULL;
    vn_tensor *dvec = g ? vn__new_on(true, VN_F32, 2, lse->shape) : NULL;
    vn_tensor *d = dvec ? vn__new_on(true, VN_F32, 3, s) : NULL;
    bool ok = d != NULL;
    if (ok) {
        const float *px = vn__ptr(x);
        float *pd = vn__ptr(d);
        if (vnk_attention_backward(pd, pd + C, pd + 2 * C, vn__ptr(dvec), px, px + C, px + 2 * C,
                                   vn__ptr(node->saved[1]), vn__ptr(g), vn__ptr(lse),
                                   qkv_layout(T, C, Dh), out_layout(T, C, Dh), B, H, T, Dh,
                                   attn_scale(Dh)))
            ok = !vn__cuda_err("causal_self_attention backward");
    }
    vn_tensor_release(x);
    vn_tensor_release(g);
    vn_tensor_release(dvec);
    if (!ok) {
        vn_tensor_release(d);
        return vn_last_status();
    }
    return vn__accum(node, 0, d);
}

vn_tensor *vn_causal_self_attention(const vn_tensor *qkv, int64_t n_head)
{
    if (vn__check_dtype_for(qkv, VN_F32, "causal_self_attention: qkv", VN_ALLOW_CUDA))
        return NULL;
    if (qkv->ndim != 3 || n_head < 1 || qkv->shape[2] % (3 * n_head) != 0)
        return vn__errp(VN_ERR_SHAPE, "causal_self_attention: expected qkv (B, T, 3C) with C a "
                        "multiple of n_head ≥ 1, found qkv %s and n_head %lld",
                        vn__shape(qkv->ndim, qkv->shape), (long long)n_head);
    const int64_t *s = qkv->shape;
    int64_t B = s[0], T = s[1], C = s[2] / 3, H = n_head, Dh = C / H, oshape[3] = {B, T, C};
    bool cuda = vn__is_cuda(qkv);
    if (cuda && Dh != 32 && Dh != 64 && Dh != 128)
        return vn__errp(VN_ERR_ARG, "causal_self_attention: on CUDA the head dim C / n_head must "
                        "be 32, 64 or 128 (the tensor-core tiles), found %lld / %lld = %lld",
                        (long long)C, (long long)H, (long long)Dh);
    if (cuda && (B * H > 65535 || T > (1 << 30)))
        return vn__errp(VN_ERR_ARG, "causal_self_attention: on CUDA at most 65535 batch × heads "
                        "and 2^30 positions, found qkv %s with n_head %lld",
                        vn__shape(3, s), (long long)H);
    if (!cuda && (T > INT_MAX || 3 * C > INT_MAX || B * H > INT_MAX))
        return vn__errp(VN_ERR_ARG, "causal_self_attention: qkv %s exceeds BLAS's limit of %d",
                        vn__shape(3, s), INT_MAX);
    /* per query row: the lse on CUDA, (max score, 1/Σ exp) on the CPU */
    int64_t sshape[3] = {B * H, T, cuda ? 1 : 2}, tt[3] = {2, T, T};
    if (!cuda && vn__check_shape("causal_self_attention", 3, tt)) return NULL; /* the scratch */

    vn_tensor *x = vn__plain_contiguous(qkv);
    vn_tensor *stats = x ? vn__new_on(cuda, VN_F32, cuda ? 2 : 3, sshape) : NULL;
    vn_tensor *out = stats ? vn__new_on(cuda, VN_F32, 3, oshape) : NULL;
    if (out && cuda) {
        const float *px = vn__ptr(x);
        if (vnk_attention_forward(vn__ptr(out), vn__ptr(stats), px, px + C, px + 2 * C,
                                  qkv_layout(T, C, Dh), out_layout(T, C, Dh), B, H, T, Dh,
                                  attn_scale(Dh))) {
            vn_tensor_release(out);
            out = vn__cuda_errp("causal_self_attention");
        }
    } else if (out) {
        const float *px = vn_tensor_data(x);
        if (!forward_cpu(vn_tensor_data(out), vn_tensor_data(stats), px, px + C, px + 2 * C,
                         qkv_layout(T, C, Dh), out_layout(T, C, Dh), B, H, T, Dh)) {
            vn_tensor_release(out);
            out = NULL;
        }
    }
    vn_tensor_release(x);
    vn_node *node = out ? vn__record(out, "causal_self_attention", self_attention_backward, 1, &qkv)
                        : NULL;
    if (node) {
        VN_SAVED_STATE(node, struct self_attention_saved)->H = H;
        node->saved[0] = vn_tensor_retain(stats);
        if (cuda) node->saved[1] = vn__alias(out);
    }
    vn_tensor_release(stats);
    return out;
}
