/* ops_reduce.c — reductions: sum, mean, max, min over all elements or over
 * one dim (with keepdim), argmax/argmin, and vn__sum_to, which sums a
 * broadcast gradient back down to an input's shape.
 *
 * A reduction views its contiguous input as (outer, R, inner) and reduces the
 * middle dim: outer is the product of the dims before it, inner of the dims
 * after. inner == 1 sums contiguous rows; inner > 1 walks R rows of `inner`
 * contiguous values and accumulates column-wise, which is the bias-gradient
 * case (N, C) → (C). f32 sums accumulate in double. */
#include "internal.h"

#include <stdlib.h>

typedef enum { RED_SUM, RED_MEAN, RED_MAX, RED_MIN, RED_ARGMAX, RED_ARGMIN } red_kind;

/* The (outer, R, inner) view of the input and the output shape. */
typedef struct {
    int64_t outer, R, inner;
    int ndim;
    int64_t shape[VN_MAX_DIMS];
} plan;

/* ---- f32 sums ------------------------------------------------------------ */

static double sum_run(const float *x, int64_t n)
{
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += x[i];
    return s;
}

/* Σ x[0..n) for long runs: fixed-size chunks summed in parallel, then the
 * chunk sums in order, so the result does not depend on the thread count. */
#define SUM_CHUNK 16384
static double sum_long(const float *x, int64_t n)
{
    int64_t nc = (n + SUM_CHUNK - 1) / SUM_CHUNK;
    double stack[64], s = 0;
    double *part = nc <= 64 ? stack : malloc(sizeof(double) * (size_t)nc);
    if (!part) { /* same order as below, one thread */
        for (int64_t c = 0; c < nc; c++)
            s += sum_run(x + c * SUM_CHUNK, n - c * SUM_CHUNK < SUM_CHUNK ? n - c * SUM_CHUNK : SUM_CHUNK);
        return s;
    }
#pragma omp parallel for if (nc > 1)
    for (int64_t c = 0; c < nc; c++)
        part[c] = sum_run(x + c * SUM_CHUNK, n - c * SUM_CHUNK < SUM_CHUNK ? n - c * SUM_CHUNK : SUM_CHUNK);
    for (int64_t c = 0; c < nc; c++) s += part[c];
    if (part != stack) free(part);
    return s;
}

/* y[o, j] = scale · Σ_r x[o, r, j]. Column sums go in blocks of COLS
 * columns, each block's accumulators in a stack array of doubles, so the
 * inner loop is a unit-stride vectorizable add over a row segment. */
#define COLS 256
static void sum_f32(const float *x, float *y, int64_t outer, int64_t R, int64_t inner, double scale)
{
    if (inner == 1) {
        if (outer == 1) {
            y[0] = (float)(sum_long(x, R) * scale);
            return;
        }
#pragma omp parallel for if (outer * R >= VN_OMP_MIN_WORK)
        for (int64_t o = 0; o < outer; o++) y[o] = (float)(sum_run(x + o * R, R) * scale);
        return;
    }
    int64_t nb = (inner + COLS - 1) / COLS;
#pragma omp parallel for if (outer * R * inner >= VN_OMP_MIN_WORK)
    for (int64_t k = 0; k < outer * nb; k++) {
        int64_t o = k / nb, j0 = k % nb * COLS, nj = inner - j0 < COLS ? inner - j0 : COLS;
        const float *xo = x + o * R * inner + j0;
        double acc[COLS];
        for (int64_t j = 0; j < nj; j++) acc[j] = 0;
        for (int64_t r = 0; r < R; r++) {
            const float *row = xo + r * inner;
            for (int64_t j = 0; j < nj; j++) acc[j] += row[j];
        }
        for (int64_t j = 0; j < nj; j++) y[o * inner + j0 + j] = (float)(acc[j] * scale);
    }
}

/* ---- integer sums (i64 result, wrapping like NumPy) --------------------- */

#define SUM_INT(T)                                                                  \
    do {                                                                            \
        const T *x = xv;                                                            \
        for (int64_t o = 0; o < outer; o++)                                         \
            for (int64_t j = 0; j < inner; j++) {                                   \
                uint64_t acc = 0;                                                   \
                for (int64_t r = 0; r < R; r++) acc += (uint64_t)x[(o * R + r) * inner + j]; \
                y[o * inner + j] = (int64_t)acc;                                    \
            }                                                                       \
    } while (0)

static void sum_int(vn_dtype dt, const void *xv, int64_t *y, int64_t outer, int64_t R, int64_t inner)
{
    switch (dt) {
    case VN_I32: SUM_INT(int32_t); break;
    case VN_I64: SUM_INT(int64_t); break;
    case VN_U8: SUM_INT(uint8_t); break;
    case VN_F32: break; /* sum_f32 */
    case VN_BF16: case VN_F16: break; /* refused by vn__check */
    }
}

/* ---- max / min ----------------------------------------------------------- */

/* v[o, j] = the max (or min) over r of x[o, r, j]; ix[o, j] = the first r
 * where it occurs. nan beats every number (it propagates, as in NumPy); the
 * first nan wins. R >= 1. One instance per dtype. */
#define DEFINE_EXTREME(NAME, T)                                                       \
    static void NAME(const T *x, T *v, int64_t *ix, int64_t outer, int64_t R,          \
                     int64_t inner, bool want_max)                                     \
    {                                                                                  \
        bool par = outer > 1 && outer * R * inner >= VN_OMP_MIN_WORK;                  \
        _Pragma("omp parallel for if (par)")                                           \
        for (int64_t o = 0; o < outer; o++) {                                          \
            const T *xo = x + o * R * inner;                                           \
            T *vo = v + o * inner;                                                     \
            int64_t *io = ix + o * inner;                                              \
            for (int64_t j = 0; j < inner; j++) {                                      \
                vo[j] = xo[j];                                                         \
                io[j] = 0;                                                             \
            }                                                                          \
            for (int64_t r = 1; r < R; r++) {                                          \
                const T *row = xo + r * inner;                                         \
                for (int64_t j = 0; j < inner; j++) {                                  \
                    T c = row[j], best = vo[j];                                        \
                    bool better = want_max ? c > best : c < best;                      \
                    if (better || (isnan((double)c) && !isnan((double)best))) {        \
                        vo[j] = c;                                                     \
                        io[j] = r;                                                     \
                    }                                                                  \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }
DEFINE_EXTREME(extreme_f32, float)
DEFINE_EXTREME(extreme_i32, int32_t)
DEFINE_EXTREME(extreme_i64, int64_t)
DEFINE_EXTREME(extreme_u8, uint8_t)

static void extreme(vn_dtype dt, const void *x, void *v, int64_t *ix, int64_t outer, int64_t R,
                    int64_t inner, bool want_max)
{
    switch (dt) {
    case VN_F32: extreme_f32(x, v, ix, outer, R, inner, want_max); break;
    case VN_I32: extreme_i32(x, v, ix, outer, R, inner, want_max); break;
    case VN_I64: extreme_i64(x, v, ix, outer, R, inner, want_max); break;
    case VN_U8: extreme_u8(x, v, ix, outer, R, inner, want_max); break;
    case VN_BF16: case VN_F16: break; /* refused by vn__check */
    }
}

/* sum_f32 on the device of x: y (outer, inner) = scale · Σ_r x (outer, R, inner). */
static vn_status sum_f32_on(const vn_tensor *x, vn_tensor *y, int64_t outer, int64_t R, int64_t inner,
                            double scale)
{
    if (!vn__is_cuda(x)) {
        sum_f32(vn__ptr(x), vn__ptr(y), outer, R, inner, scale);
        return VN_OK;
    }
    if (vnk_reduce(vn__ptr(y), NULL, vn__ptr(x), VN_F32, outer, R, inner, VNK_RED_SUM, scale))
        return vn__cuda_err("sum");
    return VN_OK;
}

/* ---- backward rules -------------------------------------------------------- */

/* The input seen as (outer, R, inner) with R the reduced dim; scale is
 * 1/R for mean, 1 otherwise. */
struct reduce_saved { int64_t outer, R, inner; double scale; };

/* sum/mean: dL/dx[o, r, j] = scale · g[o, j]. */
static vn_status sum_backward_cuda(vn_node *n, const vn_tensor *gout)
{
    const struct reduce_saved *saved = VN_SAVED_STATE(n, struct reduce_saved);
    const vn_tensor *x = n->inputs[0];
    int64_t outer = saved->outer, R = saved->R, inner = saved->inner;
    int64_t kept[3] = {outer, 1, inner}, full[3] = {outer, R, inner};
    vn_tensor *g = vn_reshape(gout, 3, kept), *e = g ? vn_expand(g, 3, full) : NULL;
    vn_tensor *scale = e ? vn_full(VN_F32, 0, NULL, saved->scale) : NULL;
    vn_tensor *gx = scale ? vn_mul(e, scale) : NULL; /* contiguous (outer, R, inner) */
    vn_tensor *shaped = gx ? vn_reshape(gx, x->ndim, x->shape) : NULL;
    vn_tensor_release(g);
    vn_tensor_release(e);
    vn_tensor_release(scale);
    vn_tensor_release(gx);
    return vn__accum(n, 0, shaped);
}

static vn_status sum_backward(vn_node *n, const vn_tensor *gout)
{
    const struct reduce_saved *saved = VN_SAVED_STATE(n, struct reduce_saved);
    const vn_tensor *x = n->inputs[0];
    int64_t outer = saved->outer, R = saved->R, inner = saved->inner;
    float scale = (float)saved->scale;
    if (vn__is_cuda(x)) return sum_backward_cuda(n, gout);
    vn_tensor *g = vn_contiguous(gout);
    vn_tensor *gx = g ? vn__new(VN_F32, x->ndim, x->shape) : NULL;
    if (gx) {
        const float *gp = VN_F32_PTR(g);
        float *d = VN_F32_PTR(gx);
        if (inner == 1) {
#pragma omp parallel for if (outer > 1 && outer * R >= VN_OMP_MIN_WORK)
            for (int64_t o = 0; o < outer; o++) {
                float v = gp[o] * scale;
                for (int64_t r = 0; r < R; r++) d[o * R + r] = v;
            }
        } else {
#pragma omp parallel for if (outer * R * inner >= VN_OMP_MIN_WORK)
            for (int64_t k = 0; k < outer * R; k++) {
                const float *go = gp + k / R * inner;
                float *row = d + k * inner;
                for (int64_t j = 0; j < inner; j++) row[j] = go[j] * scale;
            }
        }
    }
    vn_tensor_release(g);
    return vn__accum(n, 0, gx);
}

/* max/min: the gradient goes to the first extremum, 0 elsewhere. */
static vn_status extreme_backward(vn_node *n, const vn_tensor *gout)
{
    const struct reduce_saved *saved = VN_SAVED_STATE(n, struct reduce_saved);
    const vn_tensor *x = n->inputs[0];
    int64_t outer = saved->outer, R = saved->R, inner = saved->inner;
    vn_tensor *g = vn_contiguous(gout);
    if (g && vn__is_cuda(x)) { /* the kernel zeroes gx and scatters */
        vn_tensor *gx = vn__new_like(x, VN_F32, x->ndim, x->shape);
        if (gx && vnk_scatter_extreme(vn__ptr(gx), vn__ptr(g), vn__ptr(n->saved[0]), outer, R, inner)) {
            vn_tensor_release(gx);
            gx = vn__cuda_errp(n->name);
        }
        vn_tensor_release(g);
        return vn__accum(n, 0, gx);
    }
    vn_tensor *gx = g ? vn_zeros(VN_F32, x->ndim, x->shape) : NULL;
    if (gx) {
        const float *gp = VN_F32_PTR(g);
        const int64_t *ix = vn_tensor_data(n->saved[0]);
        float *d = VN_F32_PTR(gx);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < inner; j++)
                d[(o * R + ix[o * inner + j]) * inner + j] = gp[o * inner + j];
    }
    vn_tensor_release(g);
    return vn__accum(n, 0, gx);
}

/* ---- the driver ------------------------------------------------------------ */

static void plan_all(const vn_tensor *t, plan *pl)
{
    pl->outer = pl->inner = 1;
    pl->R = vn_tensor_numel(t);
    pl->ndim = 0;
}

static vn_status plan_dim(const char *op, const vn_tensor *t, int dim, bool keepdim, plan *pl)
{
    vn_status s = vn__wrap_dim(t->ndim, &dim, op);
    if (s) return s;
    pl->outer = pl->inner = pl->R = 1;
    pl->ndim = 0;
    if (t->ndim == 0) return VN_OK; /* a scalar reduces to itself */
    for (int d = 0; d < t->ndim; d++) {
        if (d < dim) pl->outer *= t->shape[d];
        if (d > dim) pl->inner *= t->shape[d];
        if (d == dim) {
            pl->R = t->shape[d];
            if (!keepdim) continue;
        }
        pl->shape[pl->ndim++] = d == dim ? 1 : t->shape[d];
    }
    return VN_OK;
}

/* The CPU kernels of reduce(): see there for out and aux. */
static void reduce_cpu(red_kind kind, vn_dtype dt, const void *xp, vn_tensor *out, vn_tensor *aux,
                       int64_t outer, int64_t R, int64_t inner, double scale)
{
    switch (kind) {
    case RED_SUM:
    case RED_MEAN:
        if (dt == VN_F32) {
            sum_f32(xp, vn_tensor_data(out), outer, R, inner, scale);
        } else if (kind == RED_SUM) {
            sum_int(dt, xp, vn_tensor_data(out), outer, R, inner);
        } else {
            const int64_t *s = vn_tensor_data(aux);
            float *m = vn_tensor_data(out);
            sum_int(dt, xp, vn_tensor_data(aux), outer, R, inner);
            for (int64_t k = 0; k < outer * inner; k++) m[k] = (float)((double)s[k] * scale);
        }
        break;
    case RED_MAX:
    case RED_MIN:
        extreme(dt, xp, vn_tensor_data(out), vn_tensor_data(aux), outer, R, inner, kind == RED_MAX);
        break;
    case RED_ARGMAX:
    case RED_ARGMIN:
        extreme(dt, xp, vn_tensor_data(aux), vn_tensor_data(out), outer, R, inner, kind == RED_ARGMAX);
        break;
    }
}

static vn_tensor *reduce(const char *op, red_kind kind, const vn_tensor *t, const plan *pl)
{
    bool is_extreme = kind >= RED_MAX, is_arg = kind >= RED_ARGMAX;
    if (is_extreme && pl->R == 0)
        return vn__errp(VN_ERR_SHAPE, "%s: cannot reduce over zero elements (input shape %s); "
                        "expected a non-empty dim", op, vn__shape(t->ndim, t->shape));
    vn_dtype od = t->dtype;
    if (kind == RED_SUM && t->dtype != VN_F32) od = VN_I64;
    if (kind == RED_MEAN) od = VN_F32;
    if (is_arg) od = VN_I64;

    int64_t outer = pl->outer, R = pl->R, inner = pl->inner;
    vn_tensor *x = vn_contiguous(t), *out = x ? vn__new_like(t, od, pl->ndim, pl->shape) : NULL;
    vn_tensor *aux = NULL; /* i64 sums of an integer mean; values of an argmax; indices of a max */
    if (out && kind == RED_MEAN && t->dtype != VN_F32)
        aux = vn__new_like(t, VN_I64, pl->ndim, pl->shape);
    if (out && is_extreme)
        aux = vn__new_like(t, is_arg ? t->dtype : VN_I64, pl->ndim, pl->shape);
    if (!out || (!aux && (is_extreme || (kind == RED_MEAN && t->dtype != VN_F32)))) {
        vn_tensor_release(x);
        vn_tensor_release(out);
        return NULL;
    }
    const void *xp = vn__ptr(x);
    double scale = kind == RED_MEAN ? 1.0 / (double)R : 1.0; /* mean of nothing: 0·inf = nan */
    if (vn__is_cuda(t)) {
        static const vnk_red red[] = {[RED_SUM] = VNK_RED_SUM, [RED_MEAN] = VNK_RED_MEAN,
                                      [RED_MAX] = VNK_RED_MAX, [RED_MIN] = VNK_RED_MIN,
                                      [RED_ARGMAX] = VNK_RED_MAX, [RED_ARGMIN] = VNK_RED_MIN};
        void *values = is_arg ? vn__ptr(aux) : vn__ptr(out);
        int64_t *index = is_extreme ? vn__ptr(is_arg ? out : aux) : NULL;
        if (vnk_reduce(values, index, xp, t->dtype, outer, R, inner, red[kind], scale)) {
            vn_tensor_release(x);
            vn_tensor_release(out);
            vn_tensor_release(aux);
            return vn__cuda_errp(op);
        }
    } else {
        reduce_cpu(kind, t->dtype, xp, out, aux, outer, R, inner, scale);
    }
    vn_tensor_release(x);
    if (!is_arg && od == VN_F32) {
        vn_node *n = vn__record(out, op, is_extreme ? extreme_backward : sum_backward, 1, &t);
        if (n) {
            *VN_SAVED_STATE(n, struct reduce_saved) = (struct reduce_saved){outer, R, inner, scale};
            if (is_extreme) {
                n->saved[0] = aux;
                aux = NULL;
            }
        }
    }
    vn_tensor_release(aux);
    return out;
}

static vn_tensor *reduce_all(const char *op, red_kind kind, const vn_tensor *t)
{
    if (vn__check_arg(t, op, "input", VN_ALLOW_CUDA)) return NULL;
    plan pl;
    plan_all(t, &pl);
    return reduce(op, kind, t, &pl);
}

static vn_tensor *reduce_dim(const char *op, red_kind kind, const vn_tensor *t, int dim, bool keepdim)
{
    if (vn__check_arg(t, op, "input", VN_ALLOW_CUDA)) return NULL;
    plan pl;
    if (plan_dim(op, t, dim, keepdim, &pl)) return NULL;
    return reduce(op, kind, t, &pl);
}

vn_tensor *vn_sum_all(const vn_tensor *t) { return reduce_all("sum_all", RED_SUM, t); }
vn_tensor *vn_mean_all(const vn_tensor *t) { return reduce_all("mean_all", RED_MEAN, t); }
vn_tensor *vn_max_all(const vn_tensor *t) { return reduce_all("max_all", RED_MAX, t); }
vn_tensor *vn_min_all(const vn_tensor *t) { return reduce_all("min_all", RED_MIN, t); }

vn_tensor *vn_sum(const vn_tensor *t, int dim, bool keepdim) { return reduce_dim("sum", RED_SUM, t, dim, keepdim); }
vn_tensor *vn_mean(const vn_tensor *t, int dim, bool keepdim) { return reduce_dim("mean", RED_MEAN, t, dim, keepdim); }
vn_tensor *vn_max(const vn_tensor *t, int dim, bool keepdim) { return reduce_dim("max", RED_MAX, t, dim, keepdim); }
vn_tensor *vn_min(const vn_tensor *t, int dim, bool keepdim) { return reduce_dim("min", RED_MIN, t, dim, keepdim); }
vn_tensor *vn_argmax(const vn_tensor *t, int dim, bool keepdim)
{
    return reduce_dim("argmax", RED_ARGMAX, t, dim, keepdim);
}
vn_tensor *vn_argmin(const vn_tensor *t, int dim, bool keepdim)
{
    return reduce_dim("argmin", RED_ARGMIN, t, dim, keepdim);
}

/* ---- sum_to: the reverse of broadcasting ------------------------------------ */

vn_tensor *vn__sum_to(const vn_tensor *g, int ndim, const int64_t *shape)
{
    if (vn__check_dtype_for(g, VN_F32, "sum_to: gradient", VN_ALLOW_CUDA)) return NULL;
    if (g->ndim == ndim && (ndim == 0 || !memcmp(g->shape, shape, sizeof(int64_t) * (size_t)ndim)))
        return vn_tensor_retain((vn_tensor *)g);
    /* Align the shapes at the right and split g's dims into alternating
     * groups of kept and summed dims (dims of size 1 join either). */
    int lead = g->ndim - ndim, ng = 0;
    int64_t size[VN_MAX_DIMS];
    bool summed[VN_MAX_DIMS], ok = true;
    for (int td = 0; td < -lead; td++) ok &= shape[td] == 1;
    for (int d = 0; d < g->ndim && ok; d++) {
        int td = d - lead;
        bool sum = td < 0 || (shape[td] == 1 && g->shape[d] != 1);
        ok = sum || shape[td] == g->shape[d];
        if (g->shape[d] == 1) continue;
        if (ng > 0 && summed[ng - 1] == sum) {
            size[ng - 1] *= g->shape[d];
        } else {
            size[ng] = g->shape[d];
            summed[ng++] = sum;
        }
    }
    if (!ok)
        return vn__errp(VN_ERR_SHAPE, "sum_to: a gradient of shape %s cannot be summed to shape %s",
                        vn__shape(g->ndim, g->shape), vn__shape(ndim, shape));
    vn_device dev = vn__is_cuda(g) ? VN_CUDA : VN_CPU;
    if (vn_tensor_numel(g) == 0) return vn_full_on(dev, VN_F32, ndim, shape, 0);
    vn_tensor *out = vn__new_like(g, VN_F32, ndim, shape), *cur = out ? vn_contiguous(g) : NULL;
    if (!cur) {
        vn_tensor_release(out);
        return NULL;
    }
    /* Sum away the last summed group per pass; the last pass writes out. */
    for (;;) {
        int k = ng - 1;
        while (k >= 0 && !summed[k]) k--;
        if (k < 0) break;
        int64_t outer = 1, inner = 1;
        bool last = true;
        for (int q = 0; q < k; q++) {
            outer *= size[q];
            last &= !summed[q];
        }
        for (int q = k + 1; q < ng; q++) inner *= size[q];
        int64_t nnext = outer * inner;
        vn_tensor *next = last ? vn_tensor_retain(out) : vn__new_like(g, VN_F32, 1, &nnext);
        if (!next || sum_f32_on(cur, next, outer, size[k], inner, 1.0)) {
            vn_tensor_release(next);
            vn_tensor_release(cur);
            vn_tensor_release(out);
            return NULL;
        }
        vn_tensor_release(cur);
        cur = next;
        /* Drop group k; its kept neighbours become one group. */
        if (k > 0 && k + 1 < ng) {
            size[k - 1] *= size[k + 1];
            for (int q = k; q + 2 < ng; q++) {
                size[q] = size[q + 2];
                summed[q] = summed[q + 2];
            }
            ng -= 2;
        } else {
            for (int q = k; q + 1 < ng; q++) {
                size[q] = size[q + 1];
                summed[q] = summed[q + 1];
            }
            ng -= 1;
        }
    }
    if (cur != out) { /* nothing was summed: only size-1 dims differ */
        size_t nbytes = sizeof(float) * (size_t)vn_tensor_numel(out);
        if (!vn__is_cuda(g)) {
            memcpy(VN_F32_PTR(out), VN_F32_PTR(cur), nbytes);
        } else if (vnk_copy(vn__ptr(out), true, vn__ptr(cur), true, nbytes)) {
            vn_tensor_release(cur);
            vn_tensor_release(out);
            return vn__cuda_errp("sum_to");
        }
    }
    vn_tensor_release(cur); /* out keeps the caller's reference */
    return out;
}
