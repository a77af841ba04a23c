/* ternary_vnm.c — ternary weights in the V:N:M layout ("BitNet 2:8"): the
 * packing of a V:N:M matrix's kept weights as trits and the int8 × ternary
 * product over it (formulas in venom/quant.h).
 *
 * The V rows of a block share the 4 kept columns of each group of M, so a
 * block's rows are a dense ternary matrix over the block's 4·G kept
 * columns ("compact columns"): 4 trits per row and group, two of them the
 * row's kept weights and two zeros. The packed form stores exactly that
 * with the 2-bit packing of ternary.c (4 bits per kept weight, the
 * position among the 4 included), and the product gathers, per block, the
 * 4·G activation columns the block reads into a compact int8 row, then
 * runs the dense packed kernel of ternary.c on the block's rows: the
 * gather of the V:N:M SpMM, with integer dot products behind it. */
#include "quant_internal.h"
#include "vnm_internal.h"

#include <stdlib.h>

/* Compact columns of a packed row: 4 per group, padded to whole groups of
 * 128 by vn_ternary_row_bytes. */
static int64_t compact_cols(const vnm_pattern *p) { return 4 * p->G; }

static vn_status check_matrix(const vn_vnm *s, const char *op)
{
    if (!s) return vn__err(VN_ERR_ARG, "%s: the V:N:M matrix is NULL", op);
    return vn__check_dtype_arg(s->values, VN_F32, op, "values", 0);
}

vn_tensor *vn_ternary_vnm_pack(const vn_vnm *s, float *gamma)
{
    const char *op = "ternary_vnm_pack";
    if (!gamma) return vn__errp(VN_ERR_ARG, "%s: gamma (the output scale) is NULL", op);
    vn_vnm_summary st;
    if (check_matrix(s, op) || vn_vnm_stats(s, &st)) return NULL;
    vnm_pattern p = vnm__pattern_of(s);
    int64_t rb = vn_ternary_row_bytes(compact_cols(&p)), nv = 2 * p.G;
    vn_tensor *vc = vn__plain_contiguous(s->values);
    vn_tensor *out = vc ? vn__new(VN_U8, 2, (int64_t[]){p.R, rb}) : NULL;
    if (!out) {
        vn_tensor_release(vc);
        return NULL;
    }
    const float *v = vn_tensor_data(vc);
    uint8_t *dst = vn_tensor_data(out);
    /* γ over the kept weights only (padding slots hold 0 and add nothing):
     * pruned positions are not weights of the layer. */
    float g = vnq__gamma(v, p.R * nv, st.nnz);
    vnq__clear_packed(dst, p.R * rb);
    for (int64_t r = 0; r < p.R; r++)
        for (int64_t grp = 0; grp < p.G; grp++)
            for (int slot = 0; slot < 2; slot++) {
                int t = (int)vnq__trit(v[r * nv + 2 * grp + slot], g);
                vnq__set_trit(dst + r * rb, 4 * grp + vnm__index(&p, r, grp, slot), t);
            }
    vn_tensor_release(vc);
    *gamma = g;
    return out;
}

/* packed u8 (R, vn_ternary_row_bytes(4·G)) for s, every code valid, and
 * zero trits at the two positions of each group a row does not keep. */
static vn_status check_packed_vnm(const vn_tensor *packed, const vn_vnm *s, const char *op)
{
    vnm_pattern p = vnm__pattern_of(s);
    int64_t Kc = compact_cols(&p);
    vn_status st = vnq__check_packed(packed, Kc, op);
    if (!st && packed->shape[0] != p.R)
        st = vn__err(VN_ERR_SHAPE, "%s: packed weights of shape %s for a V:N:M matrix of %lld rows",
                     op, vn__shape(2, packed->shape), (long long)p.R);
    if (!st) st = vnq__check_codes(packed, Kc, op);
    if (st) return st;
    vn_tensor *pc = vn__plain_contiguous(packed);
    if (!pc) return vn_last_status();
    const uint8_t *w = vn_tensor_data(pc);
    int64_t rb = vn_tensor_shape(packed)[1];
    for (int64_t r = 0; r < p.R && !st; r++)
        for (int64_t grp = 0; grp < p.G && !st; grp++) {
            int a = vnm__index(&p, r, grp, 0), b = vnm__index(&p, r, grp, 1);
            for (int j = 0; j < 4 && !st; j++)
                if (j != a && j != b && vnq__code_at(w + r * rb, 4 * grp + j) != 1)
                    st = vn__err(VN_ERR_FORMAT, "%s: packed weights row %lld, group %lld: a nonzero "
                                 "trit at position %d of 4, which the row does not keep (it keeps %d "
                                 "and %d): corrupt data or another pattern", op, (long long)r,
                                 (long long)grp, j, a, b);
        }
    vn_tensor_release(pc);
    return st;
}

vn_status vn_ternary_vnm_check(const vn_tensor *packed, const vn_vnm *s)
{
    vn_status st = check_matrix(s, "ternary_vnm_check");
    return st ? st : check_packed_vnm(packed, s, "ternary_vnm_check");
}

/* Block blk's compact activations: xc[b·Kc + 4·g + j] = x̃[b·Kx + g·M +
 * cols[blk, g, j]] (zero past 4·G) and their row sums. */
static void gather_block(const vnm_pattern *p, int64_t blk, const int8_t *xq, int64_t Kx, int64_t B,
                         int64_t Kc, int8_t *xc, int32_t *xsum)
{
    const uint16_t *cols = p->cols + blk * p->G * 4;
    for (int64_t b = 0; b < B; b++) {
        const int8_t *x = xq + b * Kx;
        int8_t *c = xc + b * Kc;
        int32_t sum = 0;
        for (int64_t g = 0; g < p->G; g++)
            for (int j = 0; j < 4; j++) {
                c[4 * g + j] = x[g * p->M + cols[4 * g + j]];
                sum += c[4 * g + j];
            }
        memset(c + 4 * p->G, 0, (size_t)(Kc - 4 * p->G));
        xsum[b] = sum;
    }
}

vn_tensor *vn_ternary_vnm_matmul(const vn_tensor *x, const vn_vnm *s, const vn_tensor *packed, float gamma)
{
    const char *op = "ternary_vnm_matmul";
    vn_status st = check_matrix(s, op);
    vnm_pattern p = st ? (vnm_pattern){0} : vnm__pattern_of(s);
    int64_t Kc = compact_cols(&p), rb = vn_ternary_row_bytes(Kc);
    if (!st) st = vnq__check_packed(packed, Kc, op);
    if (!st && packed->shape[0] != p.R)
        st = vn__err(VN_ERR_SHAPE, "%s: packed weights of shape %s for a V:N:M matrix of %lld rows",
                     op, vn__shape(2, packed->shape), (long long)p.R);
    if (!st) st = vn__check_dtype_arg(x, VN_F32, op, "input", 0);
    if (!st && (x->ndim == 0 || x->shape[x->ndim - 1] != p.K))
        st = vn__err(VN_ERR_SHAPE, "%s: input of shape %s, expected (..., %lld)", op,
                     vn__shape(x->ndim, x->shape), (long long)p.K);
    if (!st && !(gamma >= 0 && isfinite(gamma)))
        st = vn__err(VN_ERR_ARG, "%s: gamma = %g, expected a finite γ ≥ 0", op, gamma);
    if (st) return NULL;
    int64_t B = vn_tensor_numel(x) / p.K, Kcp = rb * 4;
    /* x̃ rows reach every column a group can name, padding included. */
    int64_t Kx = (p.G * p.M + VNQ_GROUP - 1) / VNQ_GROUP * VNQ_GROUP;
    int64_t shape[VN_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 1] = p.R;
    vn_tensor *xc = vn__plain_contiguous(x), *pc = xc ? vn__plain_contiguous(packed) : NULL;
    vn_tensor *y = pc ? vn__new(VN_F32, x->ndim, shape) : NULL;
    vnq_rows r = {0};
    if (y && B > 0 && !vnq__quantize_rows(vn_tensor_data(xc), B, p.K, Kx, &r)) {
        vn_tensor_release(y);
        y = NULL;
    }
    if (y && B > 0) {
        vnq_kernel kernel = vnq__kernel_for(B);
        const uint8_t *w = vn_tensor_data(pc);
        float *out = vn_tensor_data(y);
        bool failed = false;
        /* Threads take whole blocks; each gathers into buffers of its own. */
#pragma omp parallel if (p.R * Kcp / 8 * B > VN_OMP_MIN_WORK)
        {
            int8_t *cx = malloc((size_t)(B * Kcp));
            int32_t *csum = malloc(sizeof(int32_t) * (size_t)B);
#pragma omp for schedule(static)
            for (int64_t blk = 0; blk < p.nblocks; blk++) {
                if (!cx || !csum) {
#pragma omp atomic write
                    failed = true;
                    continue;
                }
                int64_t r0 = blk * p.V, rows = p.R - r0 < p.V ? p.R - r0 : p.V;
                gather_block(&p, blk, r.q, Kx, B, Kcp, cx, csum);
                kernel(w + r0 * rb, rows, Kcp, cx, csum, r.s, B, gamma, out + r0, p.R);
            }
            free(cx);
            free(csum);
        }
        vn__mem_free(r.mem, r.nbytes);
        if (failed) {
            vn_tensor_release(y);
            y = vn__errp(VN_ERR_MEMORY, "%s: out of memory for the gathered activations", op);
        }
    }
    vn_tensor_release(xc);
    vn_tensor_release(pc);
    return y;
}
