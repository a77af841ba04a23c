/* ops_linalg.c — matmul and linear on OpenBLAS sgemm, with their backward
 * rules. Operands go to BLAS as they lie in memory whenever BLAS can read
 * them (row-major, or a transposed view passed with CblasTrans); only a
 * layout neither fits (broadcast stride 0, a strided slice of columns) is
 * copied first. */
#include "internal.h"

#include "blas.h" /* vn__sgemm: OpenBLAS on OpenMP's threads */
#include <limits.h>
#include <omp.h>

/* How BLAS reads one rows × cols matrix: whether it is stored column-major
 * (pass CblasTrans) and its leading dimension. */
typedef struct {
    int64_t rows, cols;
    bool trans;
    int64_t ld;
} blas_mat;

/* Fills m for a rows × cols matrix with element strides (rs, cs), or returns
 * false when BLAS cannot read it in place. A stride on a dim of size 1 never
 * matters, so such a dim fits either layout. */
static bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, blas_mat *m)
{
    m->rows = rows;
    m->cols = cols;
    if ((cols == 1 || cs == 1) && (rows == 1 || rs >= cols)) {
        m->trans = false;
        m->ld = rows == 1 ? cols : rs;
    } else if ((rows == 1 || rs == 1) && (cols == 1 || cs >= rows)) {
        m->trans = true;
        m->ld = cols == 1 ? rows : cs;
    } else {
        return false;
    }
    if (m->ld < 1) m->ld = 1; /* an empty matrix: BLAS still wants ld >= 1 */
    return m->ld <= INT_MAX;
}

/* t (..., cols) as one rows × cols matrix, merging all leading dims into the
 * rows; false when their strides do not allow that without a copy. */
static bool as_matrix(const vn_tensor *t, blas_mat *m)
{
    int nd = t->ndim;
    int64_t rows = 1, rs = 0;
    for (int d = nd - 2; d >= 0; d--) {
        if (t->shape[d] == 1) continue;
        if (rows == 1) rs = t->strides[d];
        else if (t->strides[d] != rows * rs) return false;
        rows *= t->shape[d];
    }
    return blas_layout(rows, t->shape[nd - 1], rs, t->strides[nd - 1], m);
}

/* Where and how a product runs: on the CPU (OpenBLAS), or on the GPU
 * (cuBLAS) with f32 inputs or, under autocast, 16-bit ones. */
typedef struct {
    bool cuda;
    vn_dtype prec; /* VN_F32, VN_BF16 or VN_F16; CPU products are always f32 */
} gemm_ctx;

static gemm_ctx ctx_of(const vn_tensor *t, vn_dtype prec)
{
    return (gemm_ctx){.cuda = vn__is_cuda(t), .prec = vn__is_cuda(t) ? prec : VN_F32};
}

/* A 16-bit copy of the rows × cols matrix stored at p with leading dim ld,
 * made contiguous (ld = cols) in device memory the caller frees with
 * vnk_free(*buf, *nbytes). */
static bool to_half(const float *p, int64_t rows, int64_t cols, int64_t ld, vn_dtype prec,
                    void **buf, size_t *nbytes)
{
    *nbytes = (size_t)(rows * cols) * 2;
    if (!(*buf = vnk_alloc(*nbytes))) return false;
    if (ld == cols && (uintptr_t)p % 16 == 0 && (uintptr_t)*buf % 8 == 0) { /* contiguous: vectorised */
        if (!vnk_f32_to_half(*buf, prec, p, rows * cols)) return true;
        vnk_free(*buf, *nbytes);
        return false;
    }
    vnk_loop L = {.ndim = 2, .shape = {rows, cols}, .st = {{ld, 1}}};
    const void *in = p;
    if (vnk_map(*buf, prec, &in, 1, VN_F32, &L, VNK_COPY, 0, 0)) {
        vnk_free(*buf, *nbytes);
        return false;
    }
    return true;
}

/* The GPU half of gemm(). Under autocast both operands are converted to
 * 16 bits first (as stored, so transposed views stay transposed). */
static bool gemm_cuda(const gemm_ctx *g, const blas_mat *A, const float *a, const blas_mat *B,
                      const float *b, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      float beta, float *c, int64_t ldc)
{
    if (g->prec == VN_F32)
        return !vnk_gemm(c, ldc, 0, a, A->ld, 0, b, B->ld, 0, VN_F32, ta, tb, m, n, k, 1, 1.0f,
                         beta, vn__allow_tf32());
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    void *ha = NULL, *hb = NULL;
    size_t na = 0, nb = 0;
    bool ok = to_half(a, ar, ac, A->ld, g->prec, &ha, &na) &&
              to_half(b, br, bc, B->ld, g->prec, &hb, &nb) &&
              !vnk_gemm(c, ldc, 0, ha, ac, 0, hb, bc, 0, g->prec, ta, tb, m, n, k, 1, 1.0f, beta,
                        false);
    if (ha) vnk_free(ha, na);
    if (hb) vnk_free(hb, nb);
    return ok;
}

/* C (m × n, row-major, ldc) = op(A)·op(B) + beta·C with op(A) m × k and
 * op(B) k × n, beta 0 or 1. Empty products are handled here because BLAS
 * implementations differ on them. False (with the error set) when a CUDA
 * call failed. */
static bool gemm(const gemm_ctx *g, const blas_mat *A, const float *a, const blas_mat *B,
                 const float *b, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float beta,
                 float *c, int64_t ldc)
{
    if (m == 0 || n == 0) return true;
    if (k == 0 && beta != 0) return true; /* C + 0 */
    if (g->cuda) {
        bool ok = k == 0 ? (ldc == n && !vnk_fill(c, VN_F32, m * n, 0))
                         : gemm_cuda(g, A, a, B, b, ta, tb, m, n, k, beta, c, ldc);
        if (!ok) vn__cuda_err("matmul");
        return ok;
    }
    if (k == 0) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = 0;
        return true;
    }
    vn__sgemm(ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)m, (int)n, (int)k, 1.0f, a, (int)A->ld, b, (int)B->ld, beta, c, (int)ldc);
    return true;
}

static bool too_big_for_blas(int64_t n) { return n > INT_MAX; }

/* ---- matmul --------------------------------------------------------------- */

/* One matmul operand with 1-D promoted to a matrix: a vector on the left is
 * a 1 × k row, on the right a k × 1 column. Batch dims are those before the
 * matrix dims. */
typedef struct {
    int nbatch;
    const int64_t *bshape, *bstrides;
    int64_t rows, cols, rs, cs;
} operand;

static operand promote(const vn_tensor *t, bool right)
{
    operand o = {.nbatch = t->ndim >= 2 ? t->ndim - 2 : 0, .bshape = t->shape, .bstrides = t->strides};
    int nd = t->ndim;
    if (nd == 1 && !right) {
        o.rows = 1, o.cols = t->shape[0], o.rs = 0, o.cs = t->strides[0];
    } else if (nd == 1) {
        o.rows = t->shape[0], o.cols = 1, o.rs = t->strides[0], o.cs = 0;
    } else {
        o.rows = t->shape[nd - 2], o.cols = t->shape[nd - 1];
        o.rs = t->strides[nd - 2], o.cs = t->strides[nd - 1];
    }
    return o;
}

/* Reads a matmul operand's matrices as BLAS can: *t itself, or a contiguous
 * copy that replaces it (*copy owns it then). False when the copy failed. */
static bool blas_operand(const vn_tensor **t, bool right, operand *o, blas_mat *m, vn_tensor **copy)
{
    *o = promote(*t, right);
    if (blas_layout(o->rows, o->cols, o->rs, o->cs, m)) return true;
    if (!(*copy = vn__plain_contiguous(*t))) return false;
    *t = *copy;
    *o = promote(*t, right);
    return blas_layout(o->rows, o->cols, o->rs, o->cs, m);
}

/* out (contiguous, batch × n × m) = a · b, the batch dims of a and b
 * broadcasting to (nb, bshape). */
static bool matmul_into(const gemm_ctx *g, const vn_tensor *a, const vn_tensor *b, int nb,
                        const int64_t *bshape, float *out)
{
    operand oa, ob;
    blas_mat A = {0}, B = {0}, AF = {0};
    vn_tensor *ac = NULL, *bc = NULL;
    if (!blas_operand(&a, false, &oa, &A, &ac) || !blas_operand(&b, true, &ob, &B, &bc)) {
        vn_tensor_release(ac);
        vn_tensor_release(bc);
        return false;
    }
    int64_t n = oa.rows, k = oa.cols, m = ob.cols;
    const float *pa = vn__ptr(a), *pb = vn__ptr(b);
    bool ok = true;

    /* When b is one matrix and a's batch dims merge into its rows, the whole
     * product is a single gemm (the common x·W case). */
    int64_t b_batch = 1;
    for (int d = 0; d < ob.nbatch; d++) b_batch *= ob.bshape[d];
    if (b_batch == 1 && a->ndim >= 2 && as_matrix(a, &AF) && !AF.trans && AF.rows <= INT_MAX) {
        ok = gemm(g, &AF, pa, &B, pb, false, B.trans, AF.rows, m, k, 0, out, m);
    } else {
        /* Batch strides under the broadcast batch shape (right-aligned; a
         * stretched dim has stride 0), walked with an odometer. */
        int64_t sa[VN_MAX_DIMS], sb[VN_MAX_DIMS], idx[VN_MAX_DIMS] = {0}, nbatch = 1;
        for (int d = 0; d < nb; d++) {
            int da = d - (nb - oa.nbatch), db = d - (nb - ob.nbatch);
            sa[d] = da >= 0 && oa.bshape[da] != 1 ? oa.bstrides[da] : 0;
            sb[d] = db >= 0 && ob.bshape[db] != 1 ? ob.bstrides[db] : 0;
            nbatch *= bshape[d];
        }
        int64_t offa = 0, offb = 0;
        for (int64_t i = 0; i < nbatch && ok; i++) {
            ok = gemm(g, &A, pa + offa, &B, pb + offb, A.trans, B.trans, n, m, k, 0, out + i * n * m, m);
            for (int d = nb - 1; d >= 0; d--) {
                offa += sa[d], offb += sb[d];
                if (++idx[d] < bshape[d]) break;
                offa -= sa[d] * bshape[d], offb -= sb[d] * bshape[d];
                idx[d] = 0;
            }
        }
    }
    vn_tensor_release(ac);
    vn_tensor_release(bc);
    return ok;
}

/* What matmul and linear save: the precision of the forward's products. */
struct gemm_saved { vn_dtype prec; };

/* dA = dC·Bᵀ and dB = Aᵀ·dC on the promoted operands; vn__accum sums away
 * broadcast batch dims. A 1-D operand's gradient loses its promoted dim. */
static vn_status matmul_backward(vn_node *node, const vn_tensor *g)
{
    vn_dtype prev; /* the products below run at the forward's precision */
    vn_set_autocast(VN_SAVED_STATE(node, struct gemm_saved)->prec, &prev);
    const vn_tensor *a = node->inputs[0], *b = node->inputs[1];
    int64_t k = a->shape[a->ndim - 1];
    vn_tensor *a2 = a->ndim == 1 ? vn_unsqueeze(a, 0) : vn_tensor_retain((vn_tensor *)a);
    vn_tensor *b2 = b->ndim == 1 ? vn_unsqueeze(b, 1) : vn_tensor_retain((vn_tensor *)b);
    /* dC with the dropped dims put back: batch × n × m. */
    int gn = 0;
    int64_t gshape[VN_MAX_DIMS];
    for (int d = 0; d < g->ndim - (a->ndim > 1) - (b->ndim > 1); d++) gshape[gn++] = g->shape[d];
    gshape[gn++] = a->ndim == 1 ? 1 : a->shape[a->ndim - 2];
    gshape[gn++] = b->ndim == 1 ? 1 : b->shape[b->ndim - 1];
    vn_tensor *g2 = a2 && b2 ? vn_reshape(g, gn, gshape) : NULL;
    vn_status s = g2 ? VN_OK : VN_ERR_MEMORY; /* the failed call set the message */

    if (!s && vn__input_needs_grad(node, 0)) {
        vn_tensor *bt = vn_transpose(b2, -1, -2);
        vn_tensor *da = bt ? vn_matmul(g2, bt) : NULL;
        if (da && a->ndim == 1) {
            vn_tensor *sq = vn_squeeze(da, -2);
            vn_tensor_release(da);
            da = sq;
        }
        vn_tensor_release(bt);
        s = vn__accum(node, 0, da);
    }
    if (!s && vn__input_needs_grad(node, 1)) {
        vn_tensor *db;
        if (b2->ndim == 2 && a2->ndim > 2) {
            /* b was one matrix for the whole batch: Σ_batch Aᵀ·dC is one gemm
             * over the merged rows. */
            int64_t ashape[2] = {-1, k}, cshape[2] = {-1, gshape[gn - 1]};
            vn_tensor *af = vn_reshape(a2, 2, ashape), *gf = vn_reshape(g2, 2, cshape);
            vn_tensor *at = af ? vn_transpose(af, 0, 1) : NULL;
            db = at && gf ? vn_matmul(at, gf) : NULL;
            vn_tensor_release(af);
            vn_tensor_release(gf);
            vn_tensor_release(at);
        } else {
            vn_tensor *at = vn_transpose(a2, -1, -2);
            db = at ? vn_matmul(at, g2) : NULL;
            vn_tensor_release(at);
        }
        if (db && b->ndim == 1) {
            vn_tensor *sq = vn_squeeze(db, -1);
            vn_tensor_release(db);
            db = sq;
        }
        s = vn__accum(node, 1, db);
    }
    vn_tensor_release(a2);
    vn_tensor_release(b2);
    vn_tensor_release(g2);
    vn_set_autocast(prev, NULL);
    return s;
}

vn_tensor *vn_matmul(const vn_tensor *a, const vn_tensor *b)
{
    const vn_tensor *ins[2] = {a, b};
    bool cuda;
    if (vn__check_dtype_for(a, VN_F32, "matmul: argument 1", VN_ALLOW_CUDA) ||
        vn__check_dtype_for(b, VN_F32, "matmul: argument 2", VN_ALLOW_CUDA) ||
        vn__same_device_strict("matmul", 2, ins, NULL, &cuda))
        return NULL;
    if (a->ndim == 0 || b->ndim == 0)
        return vn__errp(VN_ERR_SHAPE, "matmul: %s and %s: both operands need at least 1 dim",
                        vn__shape(a->ndim, a->shape), vn__shape(b->ndim, b->shape));
    operand oa = promote(a, false), ob = promote(b, true);
    if (oa.cols != ob.rows)
        return vn__errp(VN_ERR_SHAPE, "matmul: %s and %s: inner dims %lld and %lld differ",
                        vn__shape(a->ndim, a->shape), vn__shape(b->ndim, b->shape),
                        (long long)oa.cols, (long long)ob.rows);
    if (too_big_for_blas(oa.rows) || too_big_for_blas(oa.cols) || too_big_for_blas(ob.cols))
        return vn__errp(VN_ERR_ARG, "matmul: %s and %s: a matrix dim exceeds BLAS's limit of %d",
                        vn__shape(a->ndim, a->shape), vn__shape(b->ndim, b->shape), INT_MAX);

    /* Broadcast the batch dims (right-aligned). */
    int nb = oa.nbatch > ob.nbatch ? oa.nbatch : ob.nbatch;
    int64_t shape[VN_MAX_DIMS];
    for (int d = 0; d < nb; d++) {
        int da = d - (nb - oa.nbatch), db = d - (nb - ob.nbatch);
        int64_t x = da >= 0 ? oa.bshape[da] : 1, y = db >= 0 ? ob.bshape[db] : 1;
        if (x != y && x != 1 && y != 1)
            return vn__errp(VN_ERR_SHAPE, "matmul: %s and %s: batch dims %lld and %lld do not "
                            "broadcast", vn__shape(a->ndim, a->shape), vn__shape(b->ndim, b->shape),
                            (long long)x, (long long)y);
        shape[d] = x == 1 ? y : x;
    }
    int ndim = nb;
    if (a->ndim > 1) shape[ndim++] = oa.rows;
    if (b->ndim > 1) shape[ndim++] = ob.cols;

    gemm_ctx g = ctx_of(a, vn__autocast());
    vn_tensor *out = vn__new_like(a, VN_F32, ndim, shape);
    if (out && !matmul_into(&g, a, b, nb, shape, vn__ptr(out))) {
        vn_tensor_release(out);
        return NULL;
    }
    if (!out) return NULL;
    vn_node *node = vn__record(out, "matmul", matmul_backward, 2, ins);
    if (node) VN_SAVED_STATE(node, struct gemm_saved)->prec = g.prec;
    return out;
}

/* ---- linear --------------------------------------------------------------- */

/* t as a BLAS matrix in *m (leading dims merged into rows). Returns t itself
 * or, when its strides do not allow that, a contiguous copy; a new reference
 * either way, NULL on failure. */
static vn_tensor *matrix_view(const vn_tensor *t, blas_mat *m)
{
    if (as_matrix(t, m)) return vn_tensor_retain((vn_tensor *)t);
    vn_tensor *c = vn__plain_contiguous(t);
    if (c) as_matrix(c, m);
    return c;
}

/* dx = dy·w, db = column sums of dy, dw = dyᵀ·x (rows of every leading dim
 * merged): two straight sgemm calls and one pass over dy, dW last so that
 * its rows can be handed to a grad-rows hook while the GEMM runs. */
static vn_status linear_backward(vn_node *node, const vn_tensor *gout)
{
    const vn_tensor *x = node->inputs[0], *w = node->inputs[1];
    int64_t out_f = w->shape[0], in_f = w->shape[1];
    blas_mat DY, W, X;
    gemm_ctx g = ctx_of(x, VN_SAVED_STATE(node, struct gemm_saved)->prec);
    vn_tensor *dy = matrix_view(gout, &DY);
    if (!dy) return VN_ERR_MEMORY;
    const float *pdy = vn__ptr(dy);
    int64_t rows = DY.rows;
    vn_status s = VN_OK;

    if (vn__input_needs_grad(node, 0)) {
        vn_tensor *wv = matrix_view(w, &W);
        vn_tensor *dx = wv ? vn__new_like(x, VN_F32, x->ndim, x->shape) : NULL;
        if (dx && !gemm(&g, &DY, pdy, &W, vn__ptr(wv), DY.trans, W.trans, rows, in_f, out_f, 0,
                        vn__ptr(dx), in_f)) {
            vn_tensor_release(dx);
            dx = NULL;
        }
        vn_tensor_release(wv);
        s = vn__accum(node, 0, dx);
    }
    if (!s && node->ninputs == 3 && vn__input_needs_grad(node, 2) && g.cuda) {
        s = vn__accum(node, 2, vn__sum_to(gout, 1, &out_f)); /* column sums on the GPU */
    } else if (!s && node->ninputs == 3 && vn__input_needs_grad(node, 2)) {
        vn_tensor *db = vn_zeros(VN_F32, 1, &out_f);
        if (db) {
            float *restrict acc = vn_tensor_data(db);
            /* Each thread sums whole columns, in row order as one thread
             * would: the same bits for any thread count. */
            bool par = rows * out_f >= VN_OMP_MIN_STREAM;
            if (!DY.trans) {
                int nt = par ? omp_get_max_threads() : 1;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
                for (int c = 0; c < nt; c++) {
                    int64_t lo = out_f * c / nt, hi = out_f * (c + 1) / nt;
                    for (int64_t i = 0; i < rows; i++) {
                        const float *restrict row = pdy + i * DY.ld;
                        for (int64_t j = lo; j < hi; j++) acc[j] += row[j];
                    }
                }
            } else { /* column-major dy: each output column is contiguous */
#pragma omp parallel for schedule(static) if (par)
                for (int64_t j = 0; j < out_f; j++) {
                    const float *restrict col = pdy + j * DY.ld;
                    float sum = 0;
                    for (int64_t i = 0; i < rows; i++) sum += col[i];
                    acc[j] = sum;
                }
            }
        }
        /* db before dW: the bias is handed over first, so that its bucket
         * (which precedes the weight's in the backward's order) can start
         * while dW is still being computed */
        if (db && vn__grad_rows_watch(node, 2, vn_tensor_data(db))) vn__grad_rows_done(0, out_f);
        vn__grad_rows_unwatch();
        s = vn__accum(node, 2, db);
    }
    if (!s && vn__input_needs_grad(node, 1)) {
        vn_tensor *xv = matrix_view(x, &X);
        vn_tensor *dw = xv ? vn__new_like(x, VN_F32, 2, w->shape) : NULL;
        /* dW's rows go to a grad-rows hook (DataParallel) slice by slice */
        if (dw && !g.cuda) vn__grad_rows_watch(node, 1, vn__ptr(dw));
        if (dw && !gemm(&g, &DY, pdy, &X, vn__ptr(xv), !DY.trans, X.trans, out_f, in_f, rows, 0,
                        vn__ptr(dw), in_f)) {
            vn_tensor_release(dw);
            dw = NULL;
        }
        vn__grad_rows_unwatch();
        vn_tensor_release(xv);
        s = vn__accum(node, 1, dw);
    }
    vn_tensor_release(dy);
    return s;
}

vn_tensor *vn_linear(const vn_tensor *x, const vn_tensor *w, const vn_tensor *bias)
{
    const vn_tensor *ins[3] = {x, w, bias};
    bool cuda;
    if (vn__check_dtype_for(x, VN_F32, "linear: input", VN_ALLOW_CUDA) ||
        vn__check_dtype_for(w, VN_F32, "linear: weight", VN_ALLOW_CUDA) ||
        (bias && vn__check_dtype_for(bias, VN_F32, "linear: bias", VN_ALLOW_CUDA)) ||
        vn__same_device_strict("linear", 3, ins, (const char *[]){"input", "weight", "bias"}, &cuda))
        return NULL;
    if (w->ndim != 2)
        return vn__errp(VN_ERR_SHAPE, "linear: weight must be 2-D (out, in), found %s",
                        vn__shape(w->ndim, w->shape));
    int64_t out_f = w->shape[0], in_f = w->shape[1];
    if (x->ndim == 0 || x->shape[x->ndim - 1] != in_f)
        return vn__errp(VN_ERR_SHAPE, "linear: input %s and weight %s: in features %lld and %lld "
                        "differ", vn__shape(x->ndim, x->shape), vn__shape(w->ndim, w->shape),
                        x->ndim ? (long long)x->shape[x->ndim - 1] : 0LL, (long long)in_f);
    if (bias && (bias->ndim != 1 || bias->shape[0] != out_f))
        return vn__errp(VN_ERR_SHAPE, "linear: bias %s does not match weight %s: expected %s",
                        vn__shape(bias->ndim, bias->shape), vn__shape(w->ndim, w->shape),
                        vn__shape(1, &out_f));
    if (too_big_for_blas(out_f) || too_big_for_blas(in_f))
        return vn__errp(VN_ERR_ARG, "linear: weight %s exceeds BLAS's limit of %d",
                        vn__shape(w->ndim, w->shape), INT_MAX);

    int64_t shape[VN_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 1] = out_f;
    vn_tensor *y = vn__new_like(x, VN_F32, x->ndim, shape);
    blas_mat X, W;
    vn_tensor *xv = y ? matrix_view(x, &X) : NULL;
    vn_tensor *wv = xv ? matrix_view(w, &W) : NULL;
    vn_tensor *bv = wv && bias ? vn__plain_contiguous(bias) : NULL;
    if (!wv || (bias && !bv) || too_big_for_blas(X.rows)) {
        if (wv && X.rows > INT_MAX)
            vn__err(VN_ERR_ARG, "linear: input %s has more than %d rows", vn__shape(x->ndim, x->shape),
                    INT_MAX);
        vn_tensor_release(y);
        vn_tensor_release(xv);
        vn_tensor_release(wv);
        vn_tensor_release(bv);
        return NULL;
    }
    float *py = vn__ptr(y);
    gemm_ctx g = ctx_of(x, vn__autocast());
    bool ok = true;
    if (bv && !cuda) {
        /* Start every row at the bias; sgemm adds x·wᵀ onto it (beta = 1),
         * so the bias costs no extra pass over the result. */
        const float *pb = vn_tensor_data(bv);
#pragma omp parallel for schedule(static) if (X.rows * out_f >= VN_OMP_MIN_STREAM)
        for (int64_t i = 0; i < X.rows; i++) memcpy(py + i * out_f, pb, sizeof(float) * (size_t)out_f);
    } else if (bv) { /* the same with a broadcast copy on the GPU */
        vnk_loop L;
        const void *pb;
        const vn_tensor *b1 = bv;
        if (vn__cuda_loop(y, 1, &b1, &L, &pb) && vnk_map(py, VN_F32, &pb, 1, VN_F32, &L, VNK_COPY, 0, 0))
            ok = !vn__cuda_err("linear");
    }
    ok = ok && gemm(&g, &X, vn__ptr(xv), &W, vn__ptr(wv), X.trans, !W.trans, X.rows, out_f, in_f,
                    bv ? 1.0f : 0.0f, py, out_f);
    vn_tensor_release(xv);
    vn_tensor_release(wv);
    vn_tensor_release(bv);
    if (!ok) {
        vn_tensor_release(y);
        return NULL;
    }
    vn_node *node = vn__record(y, "linear", linear_backward, bias ? 3 : 2, ins);
    if (node) VN_SAVED_STATE(node, struct gemm_saved)->prec = g.prec;
    return y;
}
