/* ops_pointwise.c — elementwise ops: arithmetic with NumPy broadcasting,
 * comparisons, unary math, where/masked_fill and dropout. Each op's backward
 * rule sits right after its forward.
 *
 * Every op runs through one strided loop (loop_run). The output is a new
 * contiguous tensor; inputs are read through their broadcast strides. Dims are
 * merged first wherever the layout allows, so a contiguous same-shape op is a
 * single flat run and a bias add (N, C) + (C) is N unit-stride runs of C. A
 * kernel processes one run; its unit-stride and broadcast-scalar cases are
 * separate loops so that GCC vectorizes them. */
#include "internal.h"

#include <omp.h>
#include <stdio.h>

/* ---- the loop ------------------------------------------------------------ */

typedef struct {
    vn_dtype dtype; /* dtype of the (non-mask) inputs */
    double p0, p1;  /* op parameters: exponent, clamp bounds, fill value */
} kparams;

/* Processes n elements: out[i] = f(in[0][i * st[0]], in[1][i * st[1]], ...).
 * out is contiguous. */
typedef void (*kernel_fn)(char *out, const char *const *in, const int64_t *st, int64_t n,
                          const kparams *p);

#define MAX_IN 3

typedef struct {
    kernel_fn k;
    const kparams *p;
    int nin, ndim;
    int64_t shape[VN_MAX_DIMS];
    int64_t st[MAX_IN][VN_MAX_DIMS]; /* element strides, per input */
    const char *base[MAX_IN];
    size_t esz[MAX_IN];
    char *out;
    size_t oesz;
} loop;

/* Runs the flat output positions [begin, end) as runs along the last dim. */
static void loop_range(const loop *L, int64_t begin, int64_t end)
{
    int nd = L->ndim;
    int64_t idx[VN_MAX_DIMS], rest = begin;
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = rest % L->shape[d];
        rest /= L->shape[d];
    }
    int64_t inner_st[MAX_IN];
    for (int k = 0; k < L->nin; k++) inner_st[k] = L->st[k][nd - 1];
    for (int64_t pos = begin; pos < end;) {
        const char *ip[MAX_IN];
        for (int k = 0; k < L->nin; k++) {
            int64_t off = 0;
            for (int d = 0; d < nd; d++) off += idx[d] * L->st[k][d];
            ip[k] = L->base[k] + off * (int64_t)L->esz[k];
        }
        int64_t n = L->shape[nd - 1] - idx[nd - 1];
        if (n > end - pos) n = end - pos;
        L->k(L->out + pos * (int64_t)L->oesz, ip, inner_st, n, L->p);
        pos += n;
        idx[nd - 1] += n;
        for (int d = nd - 1; d > 0 && idx[d] == L->shape[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

/* out = k(in...), with every input broadcast to out's shape. `cost` is a
 * rough count of scalar operations per element (1 for add, ~20 for tanh),
 * used to decide whether threads pay off. */
static void loop_run(kernel_fn k, const kparams *p, int cost, vn_tensor *out, int nin,
                     const vn_tensor *const *in)
{
    int64_t total = vn_tensor_numel(out);
    if (total == 0) return;
    loop L = {.k = k, .p = p, .nin = nin, .out = vn_tensor_data(out),
              .oesz = vn_dtype_size(out->dtype)};
    int64_t bst[MAX_IN][VN_MAX_DIMS];
    for (int i = 0; i < nin; i++) {
        vn__broadcast_strides(in[i], out->ndim, out->shape, bst[i]);
        L.base[i] = vn_tensor_data(in[i]);
        L.esz[i] = vn_dtype_size(in[i]->dtype);
    }
    /* Merge dim d into the previous kept dim when every input steps through
     * both as through one (the output is contiguous, so it always does). */
    for (int d = 0; d < out->ndim; d++) {
        int64_t size = out->shape[d];
        if (size == 1) continue;
        bool merge = L.ndim > 0;
        for (int i = 0; i < nin && merge; i++)
            merge = L.st[i][L.ndim - 1] == bst[i][d] * size;
        if (merge) {
            L.shape[L.ndim - 1] *= size;
        } else {
            L.shape[L.ndim] = size;
            L.ndim++;
        }
        for (int i = 0; i < nin; i++) L.st[i][L.ndim - 1] = bst[i][d];
    }
    if (L.ndim == 0) { /* one element */
        L.ndim = 1;
        L.shape[0] = 1;
        for (int i = 0; i < nin; i++) L.st[i][0] = 0;
    }
    if (total * cost < VN_OMP_MIN_WORK) {
        loop_range(&L, 0, total);
        return;
    }
    int nt = omp_get_max_threads();
#pragma omp parallel for
    for (int c = 0; c < nt; c++) loop_range(&L, total * c / nt, total * (c + 1) / nt);
}

static vnk_op cuda_op_of(kernel_fn k); /* at the end of the file */

/* The same on the GPU: kernels/elementwise.cu has each kernel under the
 * vnk_op that cuda_op_of maps it to. */
static vn_status cuda_run(const char *op, kernel_fn k, const kparams *p, vn_tensor *out, int nin,
                          const vn_tensor *const *in)
{
    vnk_loop L;
    const void *ptr[MAX_IN];
    if (!vn__cuda_loop(out, nin, in, &L, ptr)) return VN_OK;
    if (vnk_map(vn__ptr(out), out->dtype, ptr, nin, p->dtype, &L, cuda_op_of(k), p->p0, p->p1))
        return vn__cuda_err(op);
    return VN_OK;
}

/* A new tensor of dtype out_dtype and the broadcast shape of the inputs,
 * filled by kernel k, on the inputs' device. Arguments are already checked,
 * except shapes and devices. */
static vn_tensor *map(const char *op, kernel_fn k, int cost, const kparams *p, vn_dtype out_dtype,
                      int nin, const vn_tensor *const *in)
{
    bool cuda;
    if (vn__same_device(op, nin, in, &cuda)) return NULL;
    int nd = in[0]->ndim;
    int64_t shape[VN_MAX_DIMS];
    memcpy(shape, in[0]->shape, sizeof shape);
    for (int i = 1; i < nin; i++) {
        int64_t prev[VN_MAX_DIMS];
        int pnd = nd;
        memcpy(prev, shape, sizeof prev);
        if (vn__broadcast_shape(op, pnd, prev, in[i]->ndim, in[i]->shape, &nd, shape)) return NULL;
    }
    if (!cuda) {
        vn_tensor *out = vn__new(out_dtype, nd, shape);
        if (out) loop_run(k, p, cost, out, nin, in);
        return out;
    }
    const vn_tensor *din[MAX_IN];
    vn_tensor *hold[MAX_IN] = {NULL};
    vn_status s = VN_OK;
    for (int i = 0; i < nin; i++) {
        din[i] = in[i];
        if (!s) s = vn__scalar_to_cuda(&din[i], &hold[i]);
    }
    vn_tensor *out = s ? NULL : vn__new_on(true, out_dtype, nd, shape);
    if (out && cuda_run(op, k, p, out, nin, din)) {
        vn_tensor_release(out);
        out = NULL;
    }
    for (int i = 0; i < nin; i++) vn_tensor_release(hold[i]);
    return out;
}

/* ---- kernel bodies ------------------------------------------------------- */

/* The run loops bind the current elements of inputs 0, 1, 2 to a, b, c and
 * store EXPR. Broadcast operands (stride 0) are hoisted out of the loop. */
#define RUN1(TO, TA, EXPR)                                                     \
    do {                                                                       \
        TO *o_ = (TO *)out;                                                    \
        const TA *a_ = (const TA *)in[0];                                      \
        int64_t sa_ = st[0];                                                   \
        if (sa_ == 1) {                                                        \
            for (int64_t i = 0; i < n; i++) { TA a = a_[i]; o_[i] = (EXPR); }  \
        } else {                                                               \
            for (int64_t i = 0; i < n; i++) { TA a = a_[i * sa_]; o_[i] = (EXPR); } \
        }                                                                      \
    } while (0)

#define RUN2(TO, TA, TB, EXPR)                                                 \
    do {                                                                       \
        TO *o_ = (TO *)out;                                                    \
        const TA *a_ = (const TA *)in[0];                                      \
        const TB *b_ = (const TB *)in[1];                                      \
        int64_t sa_ = st[0], sb_ = st[1];                                      \
        if (sa_ == 1 && sb_ == 1) {                                            \
            for (int64_t i = 0; i < n; i++) { TA a = a_[i]; TB b = b_[i]; o_[i] = (EXPR); } \
        } else if (sa_ == 1 && sb_ == 0) {                                     \
            const TB b = b_[0];                                                \
            for (int64_t i = 0; i < n; i++) { TA a = a_[i]; o_[i] = (EXPR); }  \
        } else if (sa_ == 0 && sb_ == 1) {                                     \
            const TA a = a_[0];                                                \
            for (int64_t i = 0; i < n; i++) { TB b = b_[i]; o_[i] = (EXPR); }  \
        } else {                                                               \
            for (int64_t i = 0; i < n; i++) {                                  \
                TA a = a_[i * sa_];                                            \
                TB b = b_[i * sb_];                                            \
                o_[i] = (EXPR);                                                \
            }                                                                  \
        }                                                                      \
    } while (0)

#define RUN3(TO, TA, TB, TC, EXPR)                                             \
    do {                                                                       \
        TO *o_ = (TO *)out;                                                    \
        const TA *a_ = (const TA *)in[0];                                      \
        const TB *b_ = (const TB *)in[1];                                      \
        const TC *c_ = (const TC *)in[2];                                      \
        int64_t sa_ = st[0], sb_ = st[1], sc_ = st[2];                         \
        if (sa_ == 1 && sb_ == 1 && sc_ == 1) {                                \
            for (int64_t i = 0; i < n; i++) {                                  \
                TA a = a_[i];                                                  \
                TB b = b_[i];                                                  \
                TC c = c_[i];                                                  \
                o_[i] = (EXPR);                                                \
            }                                                                  \
        } else {                                                               \
            for (int64_t i = 0; i < n; i++) {                                  \
                TA a = a_[i * sa_];                                            \
                TB b = b_[i * sb_];                                            \
                TC c = c_[i * sc_];                                            \
                o_[i] = (EXPR);                                                \
            }                                                                  \
        }                                                                      \
    } while (0)

#define KARGS char *out, const char *const *in, const int64_t *st, int64_t n, const kparams *p

/* Integer add/sub/mul/neg wrap around (two's complement) as in NumPy. They
 * are done in the unsigned type so that overflow is defined behaviour. u8
 * promotes to int, which cannot overflow for these ops. */
#define WRAP(x) _Generic((x), int32_t: (uint32_t)(x), int64_t: (uint64_t)(x), default: (x))

/* ---- binary arithmetic ---------------------------------------------------- */

static void k_add(KARGS) { VN_DTYPE_SWITCH(p->dtype, T, RUN2(T, T, T, (T)(WRAP(a) + WRAP(b)))); }
static void k_sub(KARGS) { VN_DTYPE_SWITCH(p->dtype, T, RUN2(T, T, T, (T)(WRAP(a) - WRAP(b)))); }
static void k_mul(KARGS) { VN_DTYPE_SWITCH(p->dtype, T, RUN2(T, T, T, (T)(WRAP(a) * WRAP(b)))); }
static void k_div(KARGS) { RUN2(float, float, float, a / b); }
static void k_pow(KARGS) { RUN2(float, float, float, powf(a, b)); }
static void k_neg(KARGS) { VN_DTYPE_SWITCH(p->dtype, T, RUN1(T, T, (T)(-WRAP(a)))); }

static const kparams F32 = {.dtype = VN_F32};

/* Checks both operands of a binary op (shapes are checked by map). */
static vn_status check_pair(const char *op, const vn_tensor *a, const vn_tensor *b, bool f32_only)
{
    char what[64];
    snprintf(what, sizeof what, "%s: argument 1", op);
    vn_status s = vn__check_for(a, what, VN_ALLOW_CUDA);
    if (s) return s;
    snprintf(what, sizeof what, "%s: argument 2", op);
    if ((s = vn__check_for(b, what, VN_ALLOW_CUDA))) return s;
    if (a->dtype != b->dtype)
        return vn__err(VN_ERR_DTYPE, "%s: expected operands of the same dtype, got %s and %s", op,
                       vn_dtype_name(a->dtype), vn_dtype_name(b->dtype));
    if (f32_only && a->dtype != VN_F32)
        return vn__err(VN_ERR_DTYPE, "%s: expected f32 operands, got %s", op,
                       vn_dtype_name(a->dtype));
    return VN_OK;
}

/* Checks, computes and records a binary op whose output has a's dtype. */
static vn_tensor *binary(const char *op, kernel_fn k, int cost, bool f32_only, vn_backward_fn bw,
                         const vn_tensor *a, const vn_tensor *b)
{
    if (check_pair(op, a, b, f32_only)) return NULL;
    kparams p = {.dtype = a->dtype};
    const vn_tensor *in[2] = {a, b};
    vn_tensor *out = map(op, k, cost, &p, a->dtype, 2, in);
    if (out) vn__record(out, op, bw, 2, in);
    return out;
}

/* Backward helpers: g_k = map over (gout, ...) in f32, handed to input k. */
static vn_status give(vn_node *n, int k, kernel_fn kern, const kparams *p, int nin,
                      const vn_tensor *const *in)
{
    if (!vn__input_needs_grad(n, k)) return VN_OK;
    return vn__accum(n, k, map(n->name, kern, 4, p, VN_F32, nin, in));
}

static vn_status add_backward(vn_node *n, const vn_tensor *g)
{
    vn_status s = VN_OK;
    for (int k = 0; k < 2 && !s; k++)
        if (vn__input_needs_grad(n, k)) s = vn__accum(n, k, vn_tensor_retain((vn_tensor *)g));
    return s;
}

static vn_status sub_backward(vn_node *n, const vn_tensor *g)
{
    vn_status s = VN_OK;
    if (vn__input_needs_grad(n, 0)) s = vn__accum(n, 0, vn_tensor_retain((vn_tensor *)g));
    if (!s) s = give(n, 1, k_neg, &F32, 1, &g);
    return s;
}

static vn_status mul_backward(vn_node *n, const vn_tensor *g)
{
    const vn_tensor *ga[2] = {g, n->inputs[1]}, *gb[2] = {g, n->inputs[0]};
    vn_status s = give(n, 0, k_mul, &F32, 2, ga);
    if (!s) s = give(n, 1, k_mul, &F32, 2, gb);
    return s;
}

/* d(a/b)/db = -a/b² */
static void k_div_gb(KARGS) { RUN3(float, float, float, float, -a * b / (c * c)); }

static vn_status div_backward(vn_node *n, const vn_tensor *g)
{
    const vn_tensor *ga[2] = {g, n->inputs[1]}, *gb[3] = {g, n->inputs[0], n->inputs[1]};
    vn_status s = give(n, 0, k_div, &F32, 2, ga);
    if (!s) s = give(n, 1, k_div_gb, &F32, 3, gb);
    return s;
}

/* d(a^b)/da = b·a^(b-1);  d(a^b)/db = a^b·ln a, taken as 0 where a = 0 and
 * b >= 0 (the limit from a > 0; ln 0 would give nan there). */
static void k_pow_ga(KARGS) { RUN3(float, float, float, float, a * c * powf(b, c - 1.0f)); }
static void k_pow_gb(KARGS)
{
    RUN3(float, float, float, float, (b == 0.0f && c >= 0.0f) ? 0.0f : a * powf(b, c) * logf(b));
}

static vn_status pow_backward(vn_node *n, const vn_tensor *g)
{
    const vn_tensor *in[3] = {g, n->inputs[0], n->inputs[1]};
    vn_status s = give(n, 0, k_pow_ga, &F32, 3, in);
    if (!s) s = give(n, 1, k_pow_gb, &F32, 3, in);
    return s;
}

vn_tensor *vn_add(const vn_tensor *a, const vn_tensor *b)
{
    return binary("add", k_add, 1, false, add_backward, a, b);
}

vn_tensor *vn_sub(const vn_tensor *a, const vn_tensor *b)
{
    return binary("sub", k_sub, 1, false, sub_backward, a, b);
}

vn_tensor *vn_mul(const vn_tensor *a, const vn_tensor *b)
{
    return binary("mul", k_mul, 1, false, mul_backward, a, b);
}

vn_tensor *vn_div(const vn_tensor *a, const vn_tensor *b)
{
    return binary("div", k_div, 2, true, div_backward, a, b);
}

vn_tensor *vn_pow(const vn_tensor *a, const vn_tensor *b)
{
    return binary("pow", k_pow, 20, true, pow_backward, a, b);
}

/* ---- comparisons ----------------------------------------------------------- */

#define CMP_KERNEL(name, OP) \
    static void name(KARGS) { VN_DTYPE_SWITCH(p->dtype, T, RUN2(uint8_t, T, T, (uint8_t)(a OP b))); }
CMP_KERNEL(k_eq, ==)
CMP_KERNEL(k_ne, !=)
CMP_KERNEL(k_lt, <)
CMP_KERNEL(k_le, <=)
CMP_KERNEL(k_gt, >)
CMP_KERNEL(k_ge, >=)

static vn_tensor *compare(const char *op, kernel_fn k, const vn_tensor *a, const vn_tensor *b)
{
    if (check_pair(op, a, b, false)) return NULL;
    kparams p = {.dtype = a->dtype};
    const vn_tensor *in[2] = {a, b};
    return map(op, k, 1, &p, VN_U8, 2, in);
}

vn_tensor *vn_eq(const vn_tensor *a, const vn_tensor *b) { return compare("eq", k_eq, a, b); }
vn_tensor *vn_ne(const vn_tensor *a, const vn_tensor *b) { return compare("ne", k_ne, a, b); }
vn_tensor *vn_lt(const vn_tensor *a, const vn_tensor *b) { return compare("lt", k_lt, a, b); }
vn_tensor *vn_le(const vn_tensor *a, const vn_tensor *b) { return compare("le", k_le, a, b); }
vn_tensor *vn_gt(const vn_tensor *a, const vn_tensor *b) { return compare("gt", k_gt, a, b); }
vn_tensor *vn_ge(const vn_tensor *a, const vn_tensor *b) { return compare("ge", k_ge, a, b); }

/* ---- unary ops ----------------------------------------------------------- */

/* Checks t (f32 unless any_dtype), maps k over it and records the op with
 * its output saved (as an alias, so the node does not own its own output)
 * when save_out is set. */
static vn_tensor *unary(const char *op, kernel_fn k, int cost, bool any_dtype, double p0,
                        double p1, vn_backward_fn bw, bool save_out, const vn_tensor *t)
{
    char what[64];
    snprintf(what, sizeof what, "%s: input", op);
    if (any_dtype ? vn__check_for(t, what, VN_ALLOW_CUDA)
                  : vn__check_dtype_for(t, VN_F32, what, VN_ALLOW_CUDA))
        return NULL;
    kparams p = {.dtype = t->dtype, .p0 = p0, .p1 = p1};
    vn_tensor *out = map(op, k, cost, &p, t->dtype, 1, &t);
    if (!out) return NULL;
    vn_node *node = vn__record(out, op, bw, 1, &t);
    if (node) {
        node->f[0] = p0;
        node->f[1] = p1;
        if (save_out && !(node->saved[0] = vn__alias(out))) {
            vn_tensor_release(out);
            return NULL;
        }
    }
    return out;
}

/* Backward of y = f(x) as g·f'(·), with f' computed by kern from (g, x) or,
 * when the forward saved its output, from (g, y). */
static vn_status unary_backward(vn_node *n, const vn_tensor *g, kernel_fn kern)
{
    const vn_tensor *in[2] = {g, n->saved[0] ? n->saved[0] : n->inputs[0]};
    kparams p = {.dtype = VN_F32, .p0 = n->f[0], .p1 = n->f[1]};
    return give(n, 0, kern, &p, 2, in);
}

/* neg and abs take any dtype (wrapping for integers like add/sub). */
static void k_abs(KARGS)
{
    switch (p->dtype) {
    case VN_F32: RUN1(float, float, fabsf(a)); break;
    case VN_I32: RUN1(int32_t, int32_t, (int32_t)(a < 0 ? 0u - (uint32_t)a : (uint32_t)a)); break;
    case VN_I64: RUN1(int64_t, int64_t, (int64_t)(a < 0 ? 0u - (uint64_t)a : (uint64_t)a)); break;
    case VN_U8: RUN1(uint8_t, uint8_t, a); break;
    case VN_BF16: case VN_F16: break; /* refused by vn__check */
    }
}

static vn_status neg_backward(vn_node *n, const vn_tensor *g) { return give(n, 0, k_neg, &F32, 1, &g); }

static void k_abs_b(KARGS) { RUN2(float, float, float, b > 0 ? a : (b < 0 ? -a : 0.0f)); }
static vn_status abs_backward(vn_node *n, const vn_tensor *g) { return unary_backward(n, g, k_abs_b); }

vn_tensor *vn_neg(const vn_tensor *t) { return unary("neg", k_neg, 1, true, 0, 0, neg_backward, false, t); }
vn_tensor *vn_abs(const vn_tensor *t) { return unary("abs", k_abs, 1, true, 0, 0, abs_backward, false, t); }

/* exp: y' = y */
static void k_exp(KARGS) { RUN1(float, float, expf(a)); }
static vn_status exp_backward(vn_node *n, const vn_tensor *g) { return unary_backward(n, g, k_mul); }
vn_tensor *vn_exp(const vn_tensor *t) { return unary("exp", k_exp, 10, false, 0, 0, exp_backward, true, t); }

/* log: y' = 1/x */
static void k_log(KARGS) { RUN1(float, float, logf(a)); }
static vn_status log_backward(vn_node *n, const vn_tensor *g) { return unary_backward(n, g, k_div); }
vn_tensor *vn_log(const vn_tensor *t) { return unary("log", k_log, 10, false, 0, 0, log_backward, false, t); }

/* sqrt: y' = 1/(2y) */
static void k_sqrt(KARGS) { RUN1(float, float, sqrtf(a)); }
static void k_sqrt_b(KARGS) { RUN2(float, float, float, 0.5f * a / b); }
static vn_status sqrt_backward(vn_node *n, const vn_tensor *g) { return unary_backward(n, g, k_sqrt_b); }
vn_tensor *vn_sqrt(const vn_tensor *t) { return unary("sqrt", k_sqrt, 2, false, 0, 0, sqrt_backward, true, t); }

/* x^e: y' = e·x^(e-1). Squares, the common case, skip powf. */
static void k_pows(KARGS)
{
    float e = (float)p->p0;
    if (e == 2.0f) RUN1(float, float, a * a);
    else RUN1(float, float, powf(a, e));
}
static void k_pows_b(KARGS)
{
    float e = (float)p->p0;
    if (e == 2.0f) RUN2(float, float, float, 2.0f * a * b);
    else RUN2(float, float, float, a * e * powf(b, e - 1.0f));
}
static vn_status pows_backward(vn_node *n, const vn_tensor *g) { return unary_backward(n, g, k_pows_b); }
vn_tensor *vn_pow_scalar(const vn_tensor *t, double p)
{
    return unary("pow_scalar", k_pows, 20, false, p, 0, pows_backward, false, t);
}

/* relu: y' = [x > 0]. `a < 0 ? 0 : a` keeps nan as nan. */
static void k_relu(KARGS) { RUN1(float, float, a < 0.0f ? 0.0f : a); }
static void k_relu_b(KARGS) { RUN2(float, float, float, b > 0.0f ? a : 0.0f); }
static vn_status relu_backward(vn_node *n, const vn_tensor *g) { return unary_backward(n, g, k_relu_b); }
vn_tensor *vn_relu(const vn_tensor *t) { return unary("relu", k_relu, 1, false, 0, 0, relu_backward, false, t); }

/* tanh through expf: glibc's tanhf goes through expm1f and costs ~30 ns on
 * moderate inputs, 7x this. tanh|x| = (1 − e)/(1 + e) with e = exp(−2|x|);
 * below 0.1, where 1 − e cancels, a Taylor polynomial (error < 1e-10).
 * Within 2 ulp of tanh everywhere; nan stays nan. */
static inline float tanh_f(float x)
{
    float ax = fabsf(x);
    if (ax < 0.1f) {
        float x2 = x * x;
        return x * (1.0f + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315))));
    }
    float e = expf(-2.0f * ax);
    return copysignf((1.0f - e) / (1.0f + e), x);
}

/* gelu (tanh form): y = x/2·(1 + tanh u), u = k·(x + c·x³), so
 * y' = (1 + tanh u)/2 + x/2·(1 − tanh² u)·k·(1 + 3c·x²). */
static const float GELU_K = 0.7978845608028654f; /* sqrt(2/pi) */
static const float GELU_C = 0.044715f;

static inline float gelu_f(float x)
{
    float t = tanh_f(GELU_K * (x + GELU_C * x * x * x));
    return 0.5f * x * (1.0f + t);
}

static inline float gelu_grad(float x)
{
    float t = tanh_f(GELU_K * (x + GELU_C * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * x * x);
}

static void k_gelu(KARGS) { RUN1(float, float, gelu_f(a)); }
static void k_gelu_b(KARGS) { RUN2(float, float, float, a * gelu_grad(b)); }
static vn_status gelu_backward(vn_node *n, const vn_tensor *g) { return unary_backward(n, g, k_gelu_b); }
vn_tensor *vn_gelu(const vn_tensor *t) { return unary("gelu", k_gelu, 20, false, 0, 0, gelu_backward, false, t); }

/* tanh: y' = 1 − y² */
static void k_tanh(KARGS) { RUN1(float, float, tanh_f(a)); }
static void k_tanh_b(KARGS) { RUN2(float, float, float, a * (1.0f - b * b)); }
static vn_status tanh_backward(vn_node *n, const vn_tensor *g) { return unary_backward(n, g, k_tanh_b); }
vn_tensor *vn_tanh(const vn_tensor *t) { return unary("tanh", k_tanh, 20, false, 0, 0, tanh_backward, true, t); }

/* sigmoid: y' = y·(1 − y). For very negative x, expf overflows to inf and y
 * is exactly 0, which is the right limit. */
static void k_sigmoid(KARGS) { RUN1(float, float, 1.0f / (1.0f + expf(-a))); }
static void k_sigmoid_b(KARGS) { RUN2(float, float, float, a * b * (1.0f - b)); }
static vn_status sigmoid_backward(vn_node *n, const vn_tensor *g) { return unary_backward(n, g, k_sigmoid_b); }
vn_tensor *vn_sigmoid(const vn_tensor *t)
{
    return unary("sigmoid", k_sigmoid, 10, false, 0, 0, sigmoid_backward, true, t);
}

/* clamp: min(max(x, lo), hi); y' = [lo <= x <= hi]. A nan bound is replaced
 * by an infinite one, which leaves that side open. */
static inline float clamp_f(float x, float lo, float hi)
{
    float y = x < lo ? lo : x;
    return y > hi ? hi : y;
}
static void k_clamp(KARGS)
{
    float lo = (float)p->p0, hi = (float)p->p1;
    RUN1(float, float, clamp_f(a, lo, hi));
}
static void k_clamp_b(KARGS)
{
    float lo = (float)p->p0, hi = (float)p->p1;
    RUN2(float, float, float, (b >= lo && b <= hi) ? a : 0.0f);
}
static vn_status clamp_backward(vn_node *n, const vn_tensor *g) { return unary_backward(n, g, k_clamp_b); }
vn_tensor *vn_clamp(const vn_tensor *t, double lo, double hi)
{
    if (isnan(lo)) lo = -INFINITY;
    if (isnan(hi)) hi = INFINITY;
    return unary("clamp", k_clamp, 2, false, lo, hi, clamp_backward, false, t);
}

/* ---- where and masked_fill ---------------------------------------------- */

/* g where the mask is set (k_keep_set) or clear (k_keep_clear), else 0. */
static void k_keep_set(KARGS) { RUN2(float, float, uint8_t, b ? a : 0.0f); }
static void k_keep_clear(KARGS) { RUN2(float, float, uint8_t, b ? 0.0f : a); }

static void k_where(KARGS) { VN_DTYPE_SWITCH(p->dtype, T, RUN3(T, uint8_t, T, T, a ? b : c)); }

static vn_status where_backward(vn_node *n, const vn_tensor *g)
{
    const vn_tensor *in[2] = {g, n->inputs[0]};
    vn_status s = give(n, 1, k_keep_set, &F32, 2, in);
    if (!s) s = give(n, 2, k_keep_clear, &F32, 2, in);
    return s;
}

vn_tensor *vn_where(const vn_tensor *cond, const vn_tensor *a, const vn_tensor *b)
{
    if (vn__check_dtype_for(cond, VN_U8, "where: condition", VN_ALLOW_CUDA)) return NULL;
    if (check_pair("where", a, b, false)) return NULL;
    kparams p = {.dtype = a->dtype};
    const vn_tensor *in[3] = {cond, a, b};
    vn_tensor *out = map("where", k_where, 1, &p, a->dtype, 3, in);
    if (out) vn__record(out, "where", where_backward, 3, in);
    return out;
}

static void k_masked_fill(KARGS) { VN_DTYPE_SWITCH(p->dtype, T, RUN2(T, T, uint8_t, b ? (T)p->p0 : a)); }

static vn_status masked_fill_backward(vn_node *n, const vn_tensor *g)
{
    const vn_tensor *in[2] = {g, n->inputs[1]};
    return give(n, 0, k_keep_clear, &F32, 2, in);
}

/* Whether `value` can be stored in dtype d (integers truncate toward zero,
 * as in to_dtype; out-of-range values would be undefined behaviour). */
static bool fits(vn_dtype d, double value)
{
    switch (d) {
    case VN_F32: return true;
    case VN_I32: return value > -2147483649.0 && value < 2147483648.0;
    case VN_I64: return value >= -9223372036854775808.0 && value < 9223372036854775808.0;
    case VN_U8: return value > -1.0 && value < 256.0;
    case VN_BF16: case VN_F16: return false; /* refused by the checks before */
    }
    return false;
}

vn_tensor *vn_masked_fill(const vn_tensor *t, const vn_tensor *mask, double value)
{
    if (vn__check_for(t, "masked_fill: input", VN_ALLOW_CUDA)) return NULL;
    if (vn__check_dtype_for(mask, VN_U8, "masked_fill: mask", VN_ALLOW_CUDA)) return NULL;
    if (!fits(t->dtype, value))
        return vn__errp(VN_ERR_ARG, "masked_fill: value %g does not fit in dtype %s", value,
                        vn_dtype_name(t->dtype));
    int nd;
    int64_t shape[VN_MAX_DIMS];
    if (vn__broadcast_shape("masked_fill", t->ndim, t->shape, mask->ndim, mask->shape, &nd, shape))
        return NULL;
    if (nd != t->ndim || memcmp(shape, t->shape, sizeof(int64_t) * (size_t)nd)) {
        char a[128], b[128];
        return vn__errp(VN_ERR_SHAPE, "masked_fill: mask of shape %s does not broadcast to the "
                        "input's shape %s", vn_shape_str(mask->ndim, mask->shape, a, sizeof a),
                        vn_shape_str(t->ndim, t->shape, b, sizeof b));
    }
    kparams p = {.dtype = t->dtype, .p0 = value};
    const vn_tensor *in[2] = {t, mask};
    vn_tensor *out = map("masked_fill", k_masked_fill, 1, &p, t->dtype, 2, in);
    if (out) vn__record(out, "masked_fill", masked_fill_backward, 2, in);
    return out;
}

/* ---- dropout --------------------------------------------------------------- */

/* The drop decision for element i of one dropout call hashes i with a
 * per-call key drawn from the engine RNG (lowbias32, C. Wellons). That keeps
 * runs repeatable under vn_manual_seed, takes the RNG lock once per call
 * instead of once per element, and is plain 32-bit arithmetic that GCC
 * vectorizes. */
static inline uint32_t hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

static vn_status dropout_backward(vn_node *n, const vn_tensor *g)
{
    const vn_tensor *in[2] = {g, n->saved[0]};
    return give(n, 0, k_mul, &F32, 2, in);
}

static vn_status identity_backward(vn_node *n, const vn_tensor *g)
{
    return vn__accum(n, 0, vn_tensor_retain((vn_tensor *)g));
}

vn_tensor *vn_dropout(const vn_tensor *t, double p, bool training)
{
    if (vn__check_dtype_for(t, VN_F32, "dropout: input", VN_ALLOW_CUDA)) return NULL;
    if (!(p >= 0 && p < 1))
        return vn__errp(VN_ERR_ARG, "dropout: expected 0 <= p < 1, got p = %g", p);
    if (!training || p == 0) {
        /* A new header (not t itself), so that freeing the result cannot
         * free the caller's input. */
        vn_tensor *out = vn__alias(t);
        if (out) vn__record(out, "dropout", identity_backward, 1, &t);
        return out;
    }
    vn_tensor *mask = vn__new_like(t, VN_F32, t->ndim, t->shape);
    if (!mask) return NULL;
    float scale = (float)(1.0 / (1.0 - p));
    int64_t numel = vn_tensor_numel(mask);
    uint64_t key = vn__rng_next();
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    uint64_t thr = (uint64_t)(p * 4294967296.0); /* drop when the hash < p·2³² */
    if (vn__is_cuda(t)) { /* the same mask, computed on the GPU */
        if (vnk_dropout_mask(vn__ptr(mask), numel, key, thr, scale)) {
            vn_tensor_release(mask);
            return vn__cuda_errp("dropout");
        }
    } else {
        float *m = vn_tensor_data(mask);
#pragma omp parallel for if (numel >= VN_OMP_MIN_WORK)
        for (int64_t i = 0; i < numel; i++)
            m[i] = hash32(hash32((uint32_t)i ^ k0) + k1) < thr ? 0.0f : scale;
    }
    const vn_tensor *in[2] = {t, mask};
    vn_tensor *out = map("dropout", k_mul, 1, &F32, VN_F32, 2, in);
    vn_node *node = out ? vn__record(out, "dropout", dropout_backward, 1, &t) : NULL;
    if (node) node->saved[0] = mask;
    else vn_tensor_release(mask);
    return out;
}

/* ---- the CUDA twin of each kernel ------------------------------------------ */

static vnk_op cuda_op_of(kernel_fn k)
{
    static const struct {
        kernel_fn k;
        vnk_op op;
    } table[] = {
        {k_add, VNK_ADD},         {k_sub, VNK_SUB},           {k_mul, VNK_MUL},
        {k_div, VNK_DIV},         {k_pow, VNK_POW},           {k_eq, VNK_EQ},
        {k_ne, VNK_NE},           {k_lt, VNK_LT},             {k_le, VNK_LE},
        {k_gt, VNK_GT},           {k_ge, VNK_GE},             {k_neg, VNK_NEG},
        {k_abs, VNK_ABS},         {k_exp, VNK_EXP},           {k_log, VNK_LOG},
        {k_sqrt, VNK_SQRT},       {k_pows, VNK_POW_SCALAR},   {k_relu, VNK_RELU},
        {k_gelu, VNK_GELU},       {k_tanh, VNK_TANH},         {k_sigmoid, VNK_SIGMOID},
        {k_clamp, VNK_CLAMP},     {k_div_gb, VNK_DIV_GB},     {k_pow_ga, VNK_POW_GA},
        {k_pow_gb, VNK_POW_GB},   {k_abs_b, VNK_ABS_B},       {k_sqrt_b, VNK_SQRT_B},
        {k_pows_b, VNK_POW_SCALAR_B}, {k_relu_b, VNK_RELU_B}, {k_gelu_b, VNK_GELU_B},
        {k_tanh_b, VNK_TANH_B},   {k_sigmoid_b, VNK_SIGMOID_B}, {k_clamp_b, VNK_CLAMP_B},
        {k_keep_set, VNK_KEEP_SET}, {k_keep_clear, VNK_KEEP_CLEAR}, {k_where, VNK_WHERE},
        {k_masked_fill, VNK_MASKED_FILL},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].k == k) return table[i].op;
    return VNK_COPY; /* unreachable: every kernel above has its entry */
}
