/* vnm_linear.c — the V:N:M linear layer Y = X·Wᵀ + b as a differentiable op
 * whose trainable weight is the compressed values array, and the three
 * kernels behind it as plain calls (for benchmarks and tests). Each call
 * packs its dense operands into the panel layout of vnm_internal.h; the op
 * keeps the packed X from the forward for the values' gradient. */
#include "vnm_internal.h"

#include "blas.h"     /* vn__sgemm: the shadow's dW */
#include "vec_math.h" /* the fused MLP's GELU */

#include <limits.h>
#include <math.h>
#include <stdio.h>

/* ---- argument checks ------------------------------------------------------ */

static vn_status check_matrix(const vn_vnm *s, const char *op)
{
    if (!s) return vn__err(VN_ERR_ARG, "%s: the V:N:M matrix is NULL", op);
    return VN_OK;
}

/* values must be f32 (R, 2⌈K/M⌉). */
static vn_status check_values(const vn_vnm *s, const vn_tensor *values, const char *op)
{
    vn_status st = vn__check_dtype_arg(values, VN_F32, op, "values", VN_ALLOW_CUDA);
    if (st) return st;
    int64_t cols = 2 * ((s->K + s->M - 1) / s->M);
    if (values->ndim != 2 || values->shape[0] != s->R || values->shape[1] != cols)
        return vn__err(VN_ERR_SHAPE, "%s: values of shape %s, expected (%lld, %lld) for a %lld × "
                       "%lld matrix with M=%lld", op, vn__shape(values->ndim, values->shape),
                       (long long)s->R, (long long)cols, (long long)s->R, (long long)s->K,
                       (long long)s->M);
    return VN_OK;
}

/* t (..., width) f32; *rows = the product of its leading dims. */
static vn_status check_rows(const vn_tensor *t, int64_t width, const char *op, const char *what,
                            const char *width_name, int64_t *rows)
{
    vn_status st = vn__check_dtype_arg(t, VN_F32, op, what, VN_ALLOW_CUDA);
    if (st) return st;
    if (t->ndim == 0 || t->shape[t->ndim - 1] != width)
        return vn__err(VN_ERR_SHAPE, "%s: %s of shape %s has %lld features (last dim), expected "
                       "%lld (%s)", op, what, vn__shape(t->ndim, t->shape),
                       t->ndim ? (long long)t->shape[t->ndim - 1] : 0LL, (long long)width,
                       width_name);
    *rows = vn_tensor_numel(t) / width; /* width >= 1: a matrix has rows and M >= 4 columns */
    return VN_OK;
}

/* Whether the operands (NULLs skipped) are on the GPU; VN_ERR_DEVICE naming
 * both devices when they differ. Every operand is read on the device: no
 * CPU scalar may join. */
static vn_status device_of(const char *op, const vn_tensor *a, const vn_tensor *b,
                           const vn_tensor *c, bool *cuda)
{
    const vn_tensor *ts[3] = {a, b, c};
    return vn__same_device_strict(op, 3, ts, NULL, cuda);
}

/* A contiguous copy of t (or t itself, retained) that is never recorded. */
static vn_tensor *plain(const vn_tensor *t)
{
    bool was = vn_set_grad_enabled(false);
    vn_tensor *c = vn_contiguous(t);
    vn_set_grad_enabled(was);
    return c;
}

/* The rows × C matrix at src in the panel layout, `prows` rows per panel. */
static vn_tensor *packed(const vn_tensor *src, int64_t B, int64_t C, int64_t prows)
{
    int64_t n = (B + VNM_PANEL - 1) / VNM_PANEL * prows * VNM_PANEL;
    vn_tensor *t = vn__new(VN_F32, 1, &n);
    if (t) vnm__pack(vn_tensor_data(src), B, C, C, vn_tensor_data(t), prows);
    return t;
}

/* A new tensor shaped like t with its last dim replaced by `last`. */
static vn_tensor *like_rows(const vn_tensor *t, int64_t last)
{
    int64_t shape[VN_MAX_DIMS];
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    shape[t->ndim - 1] = last;
    return vn__new(VN_F32, t->ndim, shape);
}

/* ---- the kernels as plain calls ------------------------------------------------ */

vn_tensor *vn_vnm_spmm(const vn_vnm *s, const vn_tensor *values, const vn_tensor *x)
{
    int64_t B = 0;
    bool cuda;
    if (check_matrix(s, "vnm_spmm") || check_values(s, values, "vnm_spmm") ||
        check_rows(x, s->K, "vnm_spmm", "input", "the matrix's columns", &B) ||
        device_of("vnm_spmm", values, x, NULL, &cuda))
        return NULL;
    if (cuda) return vnm__cuda_spmm(s, values, x);
    vnm_pattern p = vnm__pattern_of(s);
    vn_tensor *xc = plain(x), *vc = xc ? plain(values) : NULL;
    vn_tensor *xt = vc ? packed(xc, B, p.K, p.xrows) : NULL;
    vn_tensor *y = xt ? like_rows(x, p.R) : NULL;
    if (y && vnm__spmm(&p, vn_tensor_data(vc), vn_tensor_data(xt), B, NULL, vn_tensor_data(y), 0)) {
        vn_tensor_release(y);
        y = NULL;
    }
    vn_tensor_release(xc);
    vn_tensor_release(vc);
    vn_tensor_release(xt);
    return y;
}

/* dX = dY·W into a new tensor shaped like `like` with K features, from dY
 * row-major (dy) or packed (dyt) as vnm__spmm_t takes them; lists as there. */
static vn_tensor *input_grad(const vnm_pattern *p, const float *values, const float *dy,
                             const float *dyt, const vn_tensor *like, int64_t B,
                             const vn_tensor *lists)
{
    int64_t n = (B + VNM_PANEL - 1) / VNM_PANEL * p->xrows * VNM_PANEL;
    vn_tensor *dxt = vn__new(VN_F32, 1, &n);
    vn_tensor *dx = dxt ? like_rows(like, p->K) : NULL;
    if (dx && vnm__spmm_t(p, values, dy, dyt, B, vn_tensor_data(dxt), lists)) {
        vn_tensor_release(dx);
        dx = NULL;
    }
    if (dx) vnm__unpack(vn_tensor_data(dxt), p->xrows, vn_tensor_data(dx), B, p->K, p->K);
    vn_tensor_release(dxt);
    return dx;
}

vn_tensor *vn_vnm_spmm_t(const vn_vnm *s, const vn_tensor *values, const vn_tensor *dy)
{
    int64_t B = 0;
    bool cuda;
    if (check_matrix(s, "vnm_spmm_t") || check_values(s, values, "vnm_spmm_t") ||
        check_rows(dy, s->R, "vnm_spmm_t", "gradient", "the matrix's rows", &B) ||
        device_of("vnm_spmm_t", values, dy, NULL, &cuda))
        return NULL;
    if (cuda) return vnm__cuda_spmm_t(s, values, dy);
    vnm_pattern p = vnm__pattern_of(s);
    vn_tensor *dyc = plain(dy), *vc = dyc ? plain(values) : NULL;
    /* bf16: the pair lists kept in s for these values (repeated calls with
     * unchanged values build them once) */
    bool bf16 = vnm__dx_in_bf16(&p);
    vn_tensor *lists = vc && bf16 ? vnm__bf16_lists_of(s, values, vn_tensor_data(vc)) : NULL;
    vn_tensor *dx = vc && (lists || !bf16)
                        ? input_grad(&p, vn_tensor_data(vc), vn_tensor_data(dyc), NULL, dy, B, lists)
                        : NULL;
    vn_tensor_release(dyc);
    vn_tensor_release(vc);
    vn_tensor_release(lists);
    return dx;
}

/* dvalues from dy (contiguous; or NULL, then by dYt), Xt and dYt if
 * already packed (or NULL). In a backward (node: the values are its input
 * `in`) the SDDMM hands the rows of dvalues over as it computes them
 * (DataParallel, internal.h). */
static vn_tensor *values_grad(vn_node *node, int in, const vnm_pattern *p, const vn_tensor *dy,
                              const float *dyt, const float *xt, int64_t B)
{
    int64_t shape[2] = {p->R, 2 * p->G};
    vn_tensor *dv = vn__new(VN_F32, 2, shape);
    if (dv && node) vn__grad_rows_watch(node, in, vn_tensor_data(dv));
    if (dv && vnm__sddmm(p, dy ? vn_tensor_data(dy) : NULL, dyt, xt, B, vn_tensor_data(dv))) {
        vn_tensor_release(dv);
        dv = NULL;
    }
    vn__grad_rows_unwatch();
    return dv;
}

vn_tensor *vn_vnm_sddmm(const vn_vnm *s, const vn_tensor *dy, const vn_tensor *x)
{
    int64_t B = 0, Bx = 0;
    if (check_matrix(s, "vnm_sddmm") ||
        check_rows(dy, s->R, "vnm_sddmm", "gradient", "the matrix's rows", &B) ||
        check_rows(x, s->K, "vnm_sddmm", "input", "the matrix's columns", &Bx))
        return NULL;
    if (B != Bx)
        return vn__errp(VN_ERR_SHAPE, "vnm_sddmm: the gradient has %lld rows and the input %lld; "
                        "they must match", (long long)B, (long long)Bx);
    bool cuda;
    if (device_of("vnm_sddmm", dy, x, NULL, &cuda)) return NULL;
    if (cuda) return vnm__cuda_sddmm(s, dy, x);
    vnm_pattern p = vnm__pattern_of(s);
    vn_tensor *dyc = plain(dy), *xc = dyc ? plain(x) : NULL;
    vn_tensor *xt = xc ? packed(xc, B, p.K, p.xrows) : NULL;
    vn_tensor *dv = xt ? values_grad(NULL, 1, &p, dyc, NULL, vn_tensor_data(xt), B) : NULL;
    vn_tensor_release(dyc);
    vn_tensor_release(xc);
    vn_tensor_release(xt);
    return dv;
}

/* ---- the differentiable op --------------------------------------------------------- */

/* Node: inputs x, values, bias; saved tensors the pattern blob and the
 * packed X (when the values needed a gradient at the forward; values that
 * start to require one later have X packed again from the input, as every
 * op here decides at backward time); saved state the matrix's shape. */
enum { SAVED_BLOB, SAVED_XT };
struct vnm_linear_saved { int64_t R, K, V, M; };

/* y (..., R) = x·Wᵀ + bias on the CPU kernels, W given by its packed values
 * (R, 2G) under pattern p; x has B rows of K. *xt gets x packed for the
 * kernels (the caller releases it; NULL after a failure). NULL with the
 * error set. */
static vn_tensor *cpu_forward(const vnm_pattern *p, const vn_tensor *x, int64_t B,
                              const float *values, const vn_tensor *bias, vn_tensor **xt)
{
    vn_tensor *xc = plain(x), *bc = xc && bias ? plain(bias) : NULL;
    *xt = xc && (bc || !bias) ? packed(xc, B, p->K, p->xrows) : NULL;
    vn_tensor *y = *xt ? like_rows(x, p->R) : NULL;
    if (y && vnm__spmm(p, values, vn_tensor_data(*xt), B, bc ? vn_tensor_data(bc) : NULL,
                       vn_tensor_data(y), 0)) {
        vn_tensor_release(y);
        y = NULL;
    }
    vn_tensor_release(xc);
    vn_tensor_release(bc);
    return y;
}

/* The bias's gradient, input `in` of the node: db[r] = Σ_b dy[b, r], from
 * dy (B, R) row-major, or with `panels` from dYt (panels of R rows; the
 * lanes past B are not read). Row-major: one thread, in row order: split
 * over two threads by columns (as vn_linear's) it was slower on the 2-core
 * Zen 4 VM, 1.7 against 0.95 ms for 4096 × 1024 (best of 40), a
 * memory-bound pass (bench/RESULTS.md). Panels: rows go to the threads,
 * and the sums are taken in another order (to float rounding the same). */
static vn_status bias_grad(vn_node *node, int in, const vn_tensor *dy, bool panels, int64_t B,
                           int64_t R)
{
    vn_tensor *db = vn_zeros(VN_F32, 1, &R);
    if (db) {
        float *restrict acc = vn_tensor_data(db);
        const float *pdy = vn_tensor_data(dy);
        if (panels) {
            /* Lane by lane over the panels, then the 64 lanes: a vector add
             * per 16 floats read, on 16 rows (4 KiB of each panel) at a time.
             * One scalar chain per row in batch order (the order of the
             * row-major sum) waited on each add: 4% of a 2:8 GPT step. */
            int64_t chunks = (R + 15) / 16;
#pragma omp parallel for schedule(static) if (B * R > VN_OMP_MIN_WORK)
            for (int64_t ch = 0; ch < chunks; ch++) {
                int64_t r0 = ch * 16, nr = R - r0 < 16 ? R - r0 : 16;
                float lanes[16][VNM_PANEL] = {{0}};
                for (int64_t b0 = 0; b0 < B; b0 += VNM_PANEL) {
                    int64_t nb = B - b0 < VNM_PANEL ? B - b0 : VNM_PANEL;
                    const float *src = pdy + (b0 / VNM_PANEL * R + r0) * VNM_PANEL;
                    for (int64_t i = 0; i < nr; i++)
                        for (int64_t l = 0; l < nb; l++) lanes[i][l] += src[i * VNM_PANEL + l];
                }
                for (int64_t i = 0; i < nr; i++)
                    for (int l = 0; l < VNM_PANEL; l++) acc[r0 + i] += lanes[i][l];
            }
        } else
            for (int64_t b = 0; b < B; b++)
                for (int64_t r = 0; r < R; r++) acc[r] += pdy[b * R + r];
        /* handed over whole, before the weight's rows (see the backward rules) */
        if (vn__grad_rows_watch(node, in, acc)) vn__grad_rows_done(0, R);
        vn__grad_rows_unwatch();
    }
    return vn__accum(node, in, db);
}

static vn_status vnm_linear_backward(vn_node *node, const vn_tensor *gout)
{
    const struct vnm_linear_saved *saved = VN_SAVED_STATE(node, struct vnm_linear_saved);
    vnm_pattern p;
    vnm__layout(&p, saved->R, saved->K, saved->V, saved->M,
                vn_tensor_data(node->saved[SAVED_BLOB]));
    int64_t B = p.R ? vn_tensor_numel(gout) / p.R : 0;
    vn_tensor *dy = plain(gout);
    /* dYt feeds the f32 dX = dY·W, so it is packed only when x wants a
     * gradient in f32 (the bf16 dX reads dY; the SDDMM packs its own when
     * it needs one). */
    bool want_dyt = vn__input_needs_grad(node, 0) && !vnm__dx_in_bf16(&p);
    vn_tensor *dyt = dy && want_dyt ? packed(dy, B, p.R, p.R) : NULL;
    if (!dy || (want_dyt && !dyt)) {
        vn_tensor_release(dy);
        return VN_ERR_MEMORY;
    }
    /* The bias, the values, then dX: DataParallel lays the parameters into
     * its buckets in reverse order (the bias before the values), so with
     * the bias handed over first and the values' rows as the SDDMM computes
     * them, their buckets can start while the rest (dX) is computed. */
    vn_status s = VN_OK;
    if (node->ninputs == 3 && vn__input_needs_grad(node, 2)) s = bias_grad(node, 2, dy, false, B, p.R);
    if (!s && vn__input_needs_grad(node, 1)) {
        vn_tensor *xc = node->saved[SAVED_XT] ? NULL : plain(node->inputs[0]);
        vn_tensor *xt = node->saved[SAVED_XT] ? vn_tensor_retain(node->saved[SAVED_XT])
                        : xc ? packed(xc, B, p.K, p.xrows) : NULL;
        s = vn__accum(node, 1, xt ? values_grad(node, 1, &p, dy, dyt ? vn_tensor_data(dyt) : NULL,
                                                   vn_tensor_data(xt), B) : NULL);
        vn_tensor_release(xc);
        vn_tensor_release(xt);
    }
    if (!s && vn__input_needs_grad(node, 0)) {
        vn_tensor *vc = plain(node->inputs[1]);
        vn_tensor *dx = vc ? input_grad(&p, vn_tensor_data(vc), vn_tensor_data(dy),
                                        dyt ? vn_tensor_data(dyt) : NULL, node->inputs[0], B, NULL)
                           : NULL;
        vn_tensor_release(vc);
        s = vn__accum(node, 0, dx);
    }
    vn_tensor_release(dy);
    vn_tensor_release(dyt);
    return s;
}

vn_tensor *vn_vnm_linear(const vn_tensor *x, const vn_vnm *s, const vn_tensor *values,
                         const vn_tensor *bias)
{
    int64_t B = 0;
    if (check_matrix(s, "vnm_linear") || check_values(s, values, "vnm_linear") ||
        check_rows(x, s->K, "vnm_linear", "input", "the layer's in features", &B) ||
        (bias && vn__check_dtype_for(bias, VN_F32, "vnm_linear: bias", VN_ALLOW_CUDA)))
        return NULL;
    if (bias && (bias->ndim != 1 || bias->shape[0] != s->R))
        return vn__errp(VN_ERR_SHAPE, "vnm_linear: bias of shape %s, expected %s",
                        vn__shape(bias->ndim, bias->shape), vn__shape(1, &s->R));
    bool cuda;
    if (device_of("vnm_linear", x, values, bias, &cuda)) return NULL;
    if (cuda) return vnm__cuda_linear(x, s, values, bias);
    vnm_pattern p = vnm__pattern_of(s);
    vn_tensor *vc = plain(values), *xt = NULL;
    vn_tensor *y = vc ? cpu_forward(&p, x, B, vn_tensor_data(vc), bias, &xt) : NULL;
    if (y) {
        const vn_tensor *ins[3] = {x, values, bias};
        vn_node *node = vn__record(y, "vnm_linear", vnm_linear_backward, bias ? 3 : 2, ins);
        if (node) {
            *VN_SAVED_STATE(node, struct vnm_linear_saved) =
                (struct vnm_linear_saved){p.R, p.K, p.V, p.M};
            node->saved[SAVED_BLOB] = vn_tensor_retain(s->blob);
            if (vn__input_needs_grad(node, 1)) node->saved[SAVED_XT] = vn_tensor_retain(xt);
        }
    }
    vn_tensor_release(vc);
    vn_tensor_release(xt);
    return y;
}

/* ---- the fused MLP: y = proj(gelu(fc(x))) ----------------------------------------------- */

/* As three ops (vnm_linear, gelu, vnm_linear), the MLP's hidden activation
 * moves between the row-major tensors that ops exchange and the panel
 * layout that the kernels read four times a step: fc's output written back
 * from the kernel's tiles, proj's input packed, proj's dX unpacked, fc's dY
 * packed (B × 4C floats each in a GPT). Here it stays in panels: fc's
 * kernel writes its tiles into them, the GELU and its backward run on
 * them, proj's kernels read them. Only x, y and their gradients are packed
 * or unpacked.
 *
 * Node: inputs x, fc's values, proj's values, fc's bias, proj's bias (the
 * biases may be NULL); saved the two pattern blobs, x packed (fc's xrows rows
 * per panel) and one tensor holding the hidden pre-activation H, then
 * GELU(H), each in panels of proj's xrows rows; saved state the two shapes. */
enum { MLP_X, MLP_V1, MLP_V2, MLP_B1, MLP_B2 };
enum { MLP_BLOB1, MLP_BLOB2, MLP_XT, MLP_ACT };
struct vnm_mlp_saved { int64_t R1, K1, V1, M1, R2, K2, V2, M2; };

/* out = gelu(h), or with g given g ⊙ gelu'(h), over the first `rows` rows
 * of each of npanels panels: h and g in panels of hrows rows, out of orows
 * rows. out's rows from `rows` on are zeroed: a kernel reads them as
 * padding columns, which it multiplies by zero values (0 · NaN is NaN). */
static void gelu_panels(float *out, int64_t orows, const float *g, const float *h, int64_t hrows,
                        int64_t rows, int64_t npanels)
{
#pragma omp parallel for schedule(static) if (npanels * rows * VNM_PANEL > VN_OMP_MIN_WORK)
    for (int64_t pn = 0; pn < npanels; pn++) {
        float *o = out + pn * orows * VNM_PANEL;
        const float *hp = h + pn * hrows * VNM_PANEL;
        if (g)
            vn__gelu_backward_f32(o, g + pn * hrows * VNM_PANEL, hp, rows * VNM_PANEL);
        else
            vn__gelu_f32(o, hp, rows * VNM_PANEL);
        memset(o + rows * VNM_PANEL, 0, sizeof(float) * (size_t)((orows - rows) * VNM_PANEL));
    }
}

/* A new f32 tensor of n elements, for scratch in panels. */
static vn_tensor *panels_new(int64_t n) { return vn__new(VN_F32, 1, &n); }

static vn_status vnm_mlp_backward(vn_node *node, const vn_tensor *gout)
{
    const struct vnm_mlp_saved *sv = VN_SAVED_STATE(node, struct vnm_mlp_saved);
    vnm_pattern p1, p2;
    vnm__layout(&p1, sv->R1, sv->K1, sv->V1, sv->M1, vn_tensor_data(node->saved[MLP_BLOB1]));
    vnm__layout(&p2, sv->R2, sv->K2, sv->V2, sv->M2, vn_tensor_data(node->saved[MLP_BLOB2]));
    bool want[5];
    for (int i = 0; i < 5; i++)
        want[i] = i < node->ninputs && node->inputs[i] && vn__input_needs_grad(node, i);
    int64_t B = vn_tensor_numel(gout) / p2.R, npanels = (B + VNM_PANEL - 1) / VNM_PANEL;
    const float *hpre = vn_tensor_data(node->saved[MLP_ACT]);
    const float *h = hpre + npanels * p2.xrows * VNM_PANEL;
    vn_tensor *gy = plain(gout), *gyt = gy ? packed(gy, B, p2.R, p2.R) : NULL;
    vn_status s = gyt ? VN_OK : VN_ERR_MEMORY;
    /* proj's bias and values, then fc's, then dX: the order of
     * vnm_linear's backward, for DataParallel's buckets */
    if (!s && want[MLP_B2]) s = bias_grad(node, MLP_B2, gy, false, B, p2.R);
    if (!s && want[MLP_V2])
        s = vn__accum(node, MLP_V2, values_grad(node, MLP_V2, &p2, gy, vn_tensor_data(gyt), h, B));
    vn_tensor *v2 = NULL, *dh = NULL, *dhpre = NULL;
    if (!s && (want[MLP_X] || want[MLP_V1] || want[MLP_B1])) {
        /* dH = dY·W2 in panels of proj's xrows rows, then dH ⊙ gelu'(H) in
         * panels of fc's R rows: the dYt of fc's kernels */
        v2 = plain(node->inputs[MLP_V2]);
        dh = v2 ? panels_new(npanels * p2.xrows * VNM_PANEL) : NULL;
        dhpre = dh ? panels_new(npanels * p1.R * VNM_PANEL) : NULL;
        s = dhpre ? vnm__spmm_t(&p2, vn_tensor_data(v2), NULL, vn_tensor_data(gyt), B,
                                vn_tensor_data(dh), NULL)
                  : VN_ERR_MEMORY;
        if (!s)
            gelu_panels(vn_tensor_data(dhpre), p1.R, vn_tensor_data(dh), hpre, p2.xrows, p1.R, npanels);
    }
    if (!s && want[MLP_B1]) s = bias_grad(node, MLP_B1, dhpre, true, B, p1.R);
    if (!s && want[MLP_V1])
        s = vn__accum(node, MLP_V1, values_grad(node, MLP_V1, &p1, NULL, vn_tensor_data(dhpre),
                                                vn_tensor_data(node->saved[MLP_XT]), B));
    if (!s && want[MLP_X]) {
        vn_tensor *v1 = plain(node->inputs[MLP_V1]);
        vn_tensor *dx = v1 ? input_grad(&p1, vn_tensor_data(v1), NULL, vn_tensor_data(dhpre),
                                        node->inputs[MLP_X], B, NULL)
                           : NULL;
        vn_tensor_release(v1);
        s = vn__accum(node, MLP_X, dx);
    }
    vn_tensor *all[5] = {gy, gyt, v2, dh, dhpre};
    for (int i = 0; i < 5; i++) vn_tensor_release(all[i]);
    return s;
}

/* The checks of vn_vnm_linear for one of the two layers, `which` naming it. */
static vn_status check_layer(const vn_vnm *s, const vn_tensor *values, const vn_tensor *bias,
                             const char *which)
{
    char op[32], what[40];
    snprintf(op, sizeof op, "vnm_mlp: %s", which);
    snprintf(what, sizeof what, "vnm_mlp: %s bias", which);
    if (check_matrix(s, op) || check_values(s, values, op) ||
        (bias && vn__check_dtype_for(bias, VN_F32, what, VN_ALLOW_CUDA)))
        return vn_last_status();
    if (bias && (bias->ndim != 1 || bias->shape[0] != s->R))
        return vn__err(VN_ERR_SHAPE, "%s: bias of shape %s, expected %s", op,
                       vn__shape(bias->ndim, bias->shape), vn__shape(1, &s->R));
    return VN_OK;
}

vn_tensor *vn_vnm_mlp(const vn_tensor *x, const vn_vnm *fc, const vn_tensor *fc_values,
                      const vn_tensor *fc_bias, const vn_vnm *proj, const vn_tensor *proj_values,
                      const vn_tensor *proj_bias)
{
    int64_t B = 0;
    if (check_layer(fc, fc_values, fc_bias, "fc") || check_layer(proj, proj_values, proj_bias, "proj") ||
        check_rows(x, fc->K, "vnm_mlp", "input", "fc's in features", &B))
        return NULL;
    if (proj->K != fc->R)
        return vn__errp(VN_ERR_SHAPE, "vnm_mlp: proj has %lld in features, expected fc's %lld out "
                        "features", (long long)proj->K, (long long)fc->R);
    bool cuda, cuda2;
    if (device_of("vnm_mlp", x, fc_values, fc_bias, &cuda) ||
        device_of("vnm_mlp", x, proj_values, proj_bias, &cuda2))
        return NULL;
    if (cuda) { /* the three ops: the CUDA kernels take row-major operands */
        vn_tensor *h = vn_vnm_linear(x, fc, fc_values, fc_bias), *a = h ? vn_gelu(h) : NULL;
        vn_tensor *y = a ? vn_vnm_linear(a, proj, proj_values, proj_bias) : NULL;
        vn_tensor_release(h);
        vn_tensor_release(a);
        return y;
    }
    vnm_pattern p1 = vnm__pattern_of(fc), p2 = vnm__pattern_of(proj);
    int64_t npanels = (B + VNM_PANEL - 1) / VNM_PANEL, hn = npanels * p2.xrows * VNM_PANEL;
    vn_tensor *xc = plain(x), *v1 = xc ? plain(fc_values) : NULL, *v2 = v1 ? plain(proj_values) : NULL;
    vn_tensor *b1 = v2 && fc_bias ? plain(fc_bias) : NULL, *b2 = v2 && proj_bias ? plain(proj_bias) : NULL;
    bool ok = v2 && (b1 || !fc_bias) && (b2 || !proj_bias);
    vn_tensor *xt = ok ? packed(xc, B, p1.K, p1.xrows) : NULL;
    vn_tensor *act = xt ? panels_new(2 * hn) : NULL; /* H, then GELU(H) */
    vn_tensor *y = act ? like_rows(x, p2.R) : NULL;
    if (y) {
        float *hpre = vn_tensor_data(act), *h = hpre + hn;
        vn_status s = vnm__spmm(&p1, vn_tensor_data(v1), vn_tensor_data(xt), B,
                                b1 ? vn_tensor_data(b1) : NULL, hpre, p2.xrows);
        if (!s) {
            gelu_panels(h, p2.xrows, NULL, hpre, p2.xrows, p1.R, npanels);
            s = vnm__spmm(&p2, vn_tensor_data(v2), h, B, b2 ? vn_tensor_data(b2) : NULL,
                          vn_tensor_data(y), 0);
        }
        if (s) {
            vn_tensor_release(y);
            y = NULL;
        }
    }
    const vn_tensor *ins[5] = {x, fc_values, proj_values, fc_bias, proj_bias};
    vn_node *node = y ? vn__record(y, "vnm_mlp", vnm_mlp_backward, proj_bias ? 5 : fc_bias ? 4 : 3, ins)
                      : NULL;
    if (node) {
        *VN_SAVED_STATE(node, struct vnm_mlp_saved) =
            (struct vnm_mlp_saved){p1.R, p1.K, p1.V, p1.M, p2.R, p2.K, p2.V, p2.M};
        node->saved[MLP_BLOB1] = vn_tensor_retain(fc->blob);
        node->saved[MLP_BLOB2] = vn_tensor_retain(proj->blob);
        node->saved[MLP_XT] = vn_tensor_retain(xt);
        node->saved[MLP_ACT] = vn_tensor_retain(act);
    }
    vn_tensor *all[7] = {xc, v1, v2, b1, b2, xt, act};
    for (int i = 0; i < 7; i++) vn_tensor_release(all[i]);
    return y;
}

/* ---- the dense shadow of V:N:M pruning (venom/shadow.h) ------------------------------ */

/* w must be f32 (R, K) on the CPU. */
static vn_status check_shadow_weight(const vn_vnm *s, const vn_tensor *w, const char *op)
{
    vn_status st = vn__check_dtype_arg(w, VN_F32, op, "weight", 0);
    if (st) return st;
    if (w->ndim != 2 || w->shape[0] != s->R || w->shape[1] != s->K)
        return vn__err(VN_ERR_SHAPE, "%s: weight of shape %s, expected (%lld, %lld), the pattern's "
                       "rows and columns", op, vn__shape(w->ndim, w->shape), (long long)s->R,
                       (long long)s->K);
    return VN_OK;
}

/* The kept weights of dense w (R × K, contiguous) in the values layout
 * (R × 2G), 0 over padding columns. */
static void gather_values(const vnm_pattern *p, const float *w, float *values)
{
#pragma omp parallel for schedule(static) if (p->R * p->G > VN_OMP_MIN_WORK)
    for (int64_t r = 0; r < p->R; r++) {
        const uint16_t *cols = p->cols + r / p->V * p->G * 4;
        for (int64_t g = 0; g < p->G; g++)
            for (int slot = 0; slot < 2; slot++) {
                int64_t c = g * p->M + cols[g * 4 + vnm__index(p, r, g, slot)];
                values[r * 2 * p->G + 2 * g + slot] = c < p->K ? w[r * p->K + c] : 0;
            }
    }
}

/* Node: inputs x, w, bias; saved the pattern blob and the kept values the
 * forward gathered (the product's weights, for dX). */
enum { SHADOW_BLOB, SHADOW_VALUES };

static vn_status shadow_linear_backward(vn_node *node, const vn_tensor *gout)
{
    const struct vnm_linear_saved *saved = VN_SAVED_STATE(node, struct vnm_linear_saved);
    vnm_pattern p;
    vnm__layout(&p, saved->R, saved->K, saved->V, saved->M,
                vn_tensor_data(node->saved[SHADOW_BLOB]));
    int64_t B = vn_tensor_numel(gout) / p.R;
    vn_tensor *dy = plain(gout);
    if (!dy) return VN_ERR_MEMORY;
    /* The bias, dW (its rows handed over as the GEMM computes them), then
     * dX: the order of vnm_linear_backward, for the same reason. */
    vn_status s = VN_OK;
    if (node->ninputs == 3 && vn__input_needs_grad(node, 2)) s = bias_grad(node, 2, dy, false, B, p.R);
    if (!s && vn__input_needs_grad(node, 1)) { /* straight through: dW = dYᵀ·X everywhere */
        vn_tensor *xc = plain(node->inputs[0]);
        int64_t shape[2] = {p.R, p.K};
        vn_tensor *dw = xc ? vn__new(VN_F32, 2, shape) : NULL;
        if (dw && B > 0) {
            vn__grad_rows_watch(node, 1, vn_tensor_data(dw));
            vn__sgemm(CblasTrans, CblasNoTrans, (int)p.R, (int)p.K, (int)B, 1.0f,
                      vn_tensor_data(dy), (int)p.R, vn_tensor_data(xc), (int)p.K, 0.0f,
                      vn_tensor_data(dw), (int)p.K);
            vn__grad_rows_unwatch();
        } else if (dw) {
            memset(vn_tensor_data(dw), 0, sizeof(float) * (size_t)(p.R * p.K));
        }
        vn_tensor_release(xc);
        s = vn__accum(node, 1, dw);
    }
    if (!s && vn__input_needs_grad(node, 0)) {
        vn_tensor *dx = input_grad(&p, vn_tensor_data(node->saved[SHADOW_VALUES]),
                                   vn_tensor_data(dy), NULL, node->inputs[0], B, NULL);
        s = vn__accum(node, 0, dx);
    }
    vn_tensor_release(dy);
    return s;
}

vn_tensor *vn_vnm_shadow_linear(const vn_tensor *x, const vn_vnm *s, const vn_tensor *w,
                                const vn_tensor *bias)
{
    const char *op = "vnm_shadow_linear";
    int64_t B = 0;
    if (check_matrix(s, op) || check_shadow_weight(s, w, op) ||
        check_rows(x, s->K, op, "input", "the layer's in features", &B) ||
        (bias && vn__check_dtype_arg(bias, VN_F32, op, "bias", 0)))
        return NULL;
    if (x->storage && x->storage->on_cuda)
        return vn__errp(VN_ERR_DEVICE, "%s: the input is on CUDA; this op runs on the CPU (on "
                        "CUDA the shadow is composed from mul and linear)", op);
    if (bias && (bias->ndim != 1 || bias->shape[0] != s->R))
        return vn__errp(VN_ERR_SHAPE, "%s: bias of shape %s, expected %s", op,
                        vn__shape(bias->ndim, bias->shape), vn__shape(1, &s->R));
    if (B > INT_MAX)
        return vn__errp(VN_ERR_SHAPE, "%s: %lld input rows, more than BLAS takes (%d)", op,
                        (long long)B, INT_MAX);
    vnm_pattern p = vnm__pattern_of(s);
    int64_t vshape[2] = {p.R, 2 * p.G};
    vn_tensor *wc = plain(w), *values = wc ? vn__new(VN_F32, 2, vshape) : NULL;
    if (values) gather_values(&p, vn_tensor_data(wc), vn_tensor_data(values));
    vn_tensor_release(wc);
    vn_tensor *xt = NULL;
    vn_tensor *y = values ? cpu_forward(&p, x, B, vn_tensor_data(values), bias, &xt) : NULL;
    if (y) {
        const vn_tensor *ins[3] = {x, w, bias};
        vn_node *node = vn__record(y, op, shadow_linear_backward, bias ? 3 : 2, ins);
        if (node) {
            *VN_SAVED_STATE(node, struct vnm_linear_saved) =
                (struct vnm_linear_saved){p.R, p.K, p.V, p.M};
            node->saved[SHADOW_BLOB] = vn_tensor_retain(s->blob);
            node->saved[SHADOW_VALUES] = vn_tensor_retain(values);
        }
    }
    vn_tensor_release(values);
    vn_tensor_release(xt);
    return y;
}

vn_status vn_vnm_shadow_decay(vn_tensor *w, const vn_vnm *s, double f)
{
    const char *op = "vnm_shadow_decay";
    vn_status st = check_matrix(s, op);
    if (!st) st = check_shadow_weight(s, w, op);
    if (st) return st;
    if (!(f >= 0 && f < INFINITY))
        return vn__err(VN_ERR_ARG, "%s: the decay factor f = lr·λ must be a finite number >= 0, "
                       "got %g", op, f);
    if (!vn_tensor_is_contiguous(w))
        return vn__err(VN_ERR_ARG, "%s: the weight must be contiguous (a parameter), found a "
                       "strided view of shape %s", op, vn__shape(w->ndim, w->shape));
    if ((st = vn__begin_write(w, op))) return st;
    vnm_pattern p = vnm__pattern_of(s);
    const float k = 1.0f - (float)f;
    float *pw = vn_tensor_data(w);
    /* Scale whole stretches of a row (a loop GCC vectorises), then put the
     * kept weights back: cheaper than testing every weight against its
     * group's two kept columns. DECAY_GROUPS groups at a time. */
    enum { DECAY_GROUPS = 256 };
#pragma omp parallel for schedule(static) if (p.R * p.K > VN_OMP_MIN_WORK)
    for (int64_t r = 0; r < p.R; r++) {
        const uint16_t *cols = p.cols + r / p.V * p.G * 4;
        float *restrict row = pw + r * p.K;
        float kept[2 * DECAY_GROUPS];
        int64_t at[2 * DECAY_GROUPS];
        for (int64_t g0 = 0; g0 < p.G; g0 += DECAY_GROUPS) {
            int64_t g1 = g0 + DECAY_GROUPS < p.G ? g0 + DECAY_GROUPS : p.G, n = 0;
            for (int64_t g = g0; g < g1; g++)
                for (int slot = 0; slot < 2; slot++) {
                    int64_t c = g * p.M + cols[g * 4 + vnm__index(&p, r, g, slot)];
                    if (c < p.K) {
                        at[n] = c;
                        kept[n++] = row[c];
                    }
                }
            int64_t end = g1 * p.M < p.K ? g1 * p.M : p.K;
            for (int64_t c = g0 * p.M; c < end; c++) row[c] *= k;
            for (int64_t i = 0; i < n; i++) row[at[i]] = kept[i];
        }
    }
    return VN_OK;
}
