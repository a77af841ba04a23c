/* ops_pointwise.c — elementwise ops: arithmetic with NumPy broadcasting,
 * comparisons, unary math, where/masked_fill and dropout. Each op's backward
 * rule sits right after its forward.
 *
 * Every op runs through one strided loop (loop_run). The output is a new
 * contiguous tensor; inputs are read through their broadcast strides. Dims are
 * merged first wherever the layout allows, so a contiguous same-shape op is a
 * single flat run and a bias add (N, C) + (C) is N unit-stride runs of C. A
 * kernel processes one run; its unit-stride and broadcast-scalar cases are
 * separate loops so that GCC vectorizes them.
 *
 * Each op is one descriptor (pw_op): its name, CPU kernel, CUDA twin, cost,
 * dtype rule and backward rule. Most public functions pass theirs to
 * binary(), unary() or compare(); where, masked_fill and dropout check
 * their own arguments. Formulas with more than one line, which the CUDA
 * kernels must compute alike, live in kernels/scalar.h. */
#include "internal.h"
#include "scalar.h" /* the formulas shared with the CUDA kernels */
#include "vec_math.h" /* gelu over contiguous arrays, vectorized */

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
    if (total * cost < VN_OMP_MIN_WORK || (cost == 1 && total < VN_OMP_MIN_STREAM)) {
        loop_range(&L, 0, total);
        return;
    }
    int nt = omp_get_max_threads();
#pragma omp parallel for
    for (int c = 0; c < nt; c++) loop_range(&L, total * c / nt, total * (c + 1) / nt);
}

/* ---- one descriptor per op ------------------------------------------------ */

/* An elementwise op, or a formula a backward rule maps (div_gb, relu_b, ...):
 * the CPU kernel and its CUDA twin compute the same formula. */
typedef struct {
    const char *name;        /* in error messages and on the tape */
    kernel_fn cpu;           /* one run on the CPU */
    vnk_op cuda;             /* the same formula in kernels/elementwise.cu */
    int cost;                /* scalar operations per element (1 add, ~20 tanh), see loop_run */
    bool f32_only;           /* inputs must be f32 (else f32, i32, i64 or u8) */
    bool saves_output;       /* the backward reads the output: the node keeps an alias */
    vn_backward_fn backward; /* NULL: not differentiable, or only a backward formula */
} pw_op;

/* Where the nodes of this file keep the tensors their backward rule reads
 * (a unary op's parameters are in struct unary_saved). */
enum {
    SAVED_OUTPUT = 0, /* node->saved: an alias of the output (ops that save it) */
    SAVED_MASK = 0,   /* node->saved: dropout's scaled mask */
};

/* loop_run's work on the GPU: op's CUDA twin over the same strided loop. */
static vn_status cuda_run(const char *name, const pw_op *op, const kparams *p, vn_tensor *out,
                          int nin, const vn_tensor *const *in)
{
    vnk_loop L;
    const void *ptr[MAX_IN];
    if (!vn__cuda_loop(out, nin, in, &L, ptr)) return VN_OK;
    if (vnk_map(vn__ptr(out), out->dtype, ptr, nin, p->dtype, &L, op->cuda, p->p0, p->p1))
        return vn__cuda_err(name);
    return VN_OK;
}

/* A new tensor of dtype out_dtype and the broadcast shape of the inputs,
 * filled by op, on the inputs' device. `name` is the op named in errors (a
 * backward formula runs under its node's name). Arguments are already
 * checked, except shapes and devices. */
static vn_tensor *map(const char *name, const pw_op *op, const kparams *p, vn_dtype out_dtype,
                      int nin, const vn_tensor *const *in)
{
    bool cuda;
    if (vn__same_device(name, nin, in, &cuda)) return NULL;
    int nd = in[0]->ndim;
    int64_t shape[VN_MAX_DIMS];
    memcpy(shape, in[0]->shape, sizeof shape);
    for (int i = 1; i < nin; i++) {
        int64_t prev[VN_MAX_DIMS];
        int pnd = nd;
        memcpy(prev, shape, sizeof prev);
        if (vn__broadcast_shape(name, pnd, prev, in[i]->ndim, in[i]->shape, &nd, shape))
            return NULL;
    }
    if (!cuda) {
        vn_tensor *out = vn__new(out_dtype, nd, shape);
        if (out) loop_run(op->cpu, p, op->cost, out, nin, in);
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
    if (out && cuda_run(name, op, p, out, nin, din)) {
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
    vn_status s = vn__check_arg(a, op, "argument 1", VN_ALLOW_CUDA);
    if (s) return s;
    if ((s = vn__check_arg(b, op, "argument 2", VN_ALLOW_CUDA))) return s;
    if (a->dtype != b->dtype)
        return vn__err(VN_ERR_DTYPE, "%s: expected operands of the same dtype, got %s and %s", op,
                       vn_dtype_name(a->dtype), vn_dtype_name(b->dtype));
    if (f32_only && a->dtype != VN_F32)
        return vn__err(VN_ERR_DTYPE, "%s: expected f32 operands, got %s", op,
                       vn_dtype_name(a->dtype));
    return VN_OK;
}

/* Checks, computes and records a binary op whose output has a's dtype. */
static vn_tensor *binary(const pw_op *op, const vn_tensor *a, const vn_tensor *b)
{
    if (check_pair(op->name, a, b, op->f32_only)) return NULL;
    kparams p = {.dtype = a->dtype};
    const vn_tensor *in[2] = {a, b};
    vn_tensor *out = map(op->name, op, &p, a->dtype, 2, in);
    if (out) vn__record(out, op->name, op->backward, 2, in);
    return out;
}

/* Backward helper: the gradient of input k is formula f mapped over
 * (gout, ...) in f32. */
static vn_status give(vn_node *node, int k, const pw_op *f, const kparams *p, int nin,
                      const vn_tensor *const *in)
{
    if (!vn__input_needs_grad(node, k)) return VN_OK;
    return vn__accum(node, k, map(node->name, f, p, VN_F32, nin, in));
}

/* mul, div and neg differentiate through their own formulas (and sub through
 * neg's), so their rules are declared ahead of the descriptors. */
static vn_status mul_backward(vn_node *node, const vn_tensor *g);
static vn_status div_backward(vn_node *node, const vn_tensor *g);
static vn_status neg_backward(vn_node *node, const vn_tensor *g);

static const pw_op OP_MUL = {.name = "mul", .cpu = k_mul, .cuda = VNK_MUL, .cost = 1,
                             .backward = mul_backward};
static const pw_op OP_DIV = {.name = "div", .cpu = k_div, .cuda = VNK_DIV, .cost = 2,
                             .f32_only = true, .backward = div_backward};
/* neg and abs take any dtype (wrapping for integers like add/sub). */
static const pw_op OP_NEG = {.name = "neg", .cpu = k_neg, .cuda = VNK_NEG, .cost = 1,
                             .backward = neg_backward};

static vn_status add_backward(vn_node *node, const vn_tensor *g)
{
    vn_status s = VN_OK;
    for (int k = 0; k < 2 && !s; k++)
        if (vn__input_needs_grad(node, k)) s = vn__accum(node, k, vn_tensor_retain((vn_tensor *)g));
    return s;
}
static const pw_op OP_ADD = {.name = "add", .cpu = k_add, .cuda = VNK_ADD, .cost = 1,
                             .backward = add_backward};

static vn_status sub_backward(vn_node *node, const vn_tensor *g)
{
    vn_status s = VN_OK;
    if (vn__input_needs_grad(node, 0)) s = vn__accum(node, 0, vn_tensor_retain((vn_tensor *)g));
    if (!s) s = give(node, 1, &OP_NEG, &F32, 1, &g);
    return s;
}
static const pw_op OP_SUB = {.name = "sub", .cpu = k_sub, .cuda = VNK_SUB, .cost = 1,
                             .backward = sub_backward};

static vn_status mul_backward(vn_node *node, const vn_tensor *g)
{
    const vn_tensor *ga[2] = {g, node->inputs[1]}, *gb[2] = {g, node->inputs[0]};
    vn_status s = give(node, 0, &OP_MUL, &F32, 2, ga);
    if (!s) s = give(node, 1, &OP_MUL, &F32, 2, gb);
    return s;
}

/* d(a/b)/db = -a/b² */
static void k_div_gb(KARGS) { RUN3(float, float, float, float, -a * b / (c * c)); }
static const pw_op OP_DIV_GB = {.name = "div_gb", .cpu = k_div_gb, .cuda = VNK_DIV_GB, .cost = 4};

static vn_status div_backward(vn_node *node, const vn_tensor *g)
{
    const vn_tensor *ga[2] = {g, node->inputs[1]}, *gb[3] = {g, node->inputs[0], node->inputs[1]};
    vn_status s = give(node, 0, &OP_DIV, &F32, 2, ga);
    if (!s) s = give(node, 1, &OP_DIV_GB, &F32, 3, gb);
    return s;
}

/* d(a^b)/da = b·a^(b-1);  d(a^b)/db = a^b·ln a (pow_grad_exponent). */
static void k_pow_ga(KARGS) { RUN3(float, float, float, float, a * c * powf(b, c - 1.0f)); }
static void k_pow_gb(KARGS) { RUN3(float, float, float, float, pow_grad_exponent(a, b, c)); }
static const pw_op OP_POW_GA = {.name = "pow_ga", .cpu = k_pow_ga, .cuda = VNK_POW_GA, .cost = 20};
static const pw_op OP_POW_GB = {.name = "pow_gb", .cpu = k_pow_gb, .cuda = VNK_POW_GB, .cost = 30};

static vn_status pow_backward(vn_node *node, const vn_tensor *g)
{
    const vn_tensor *in[3] = {g, node->inputs[0], node->inputs[1]};
    vn_status s = give(node, 0, &OP_POW_GA, &F32, 3, in);
    if (!s) s = give(node, 1, &OP_POW_GB, &F32, 3, in);
    return s;
}
static const pw_op OP_POW = {.name = "pow", .cpu = k_pow, .cuda = VNK_POW, .cost = 20,
                             .f32_only = true, .backward = pow_backward};

vn_tensor *vn_add(const vn_tensor *a, const vn_tensor *b) { return binary(&OP_ADD, a, b); }
vn_tensor *vn_sub(const vn_tensor *a, const vn_tensor *b) { return binary(&OP_SUB, a, b); }
vn_tensor *vn_mul(const vn_tensor *a, const vn_tensor *b) { return binary(&OP_MUL, a, b); }
vn_tensor *vn_div(const vn_tensor *a, const vn_tensor *b) { return binary(&OP_DIV, a, b); }
vn_tensor *vn_pow(const vn_tensor *a, const vn_tensor *b) { return binary(&OP_POW, a, b); }

/* ---- comparisons ----------------------------------------------------------- */

/* k_eq and OP_EQ, ...: a u8 result, no gradient. */
#define COMPARISON(op, OP, CMP)                                                                  \
    static void k_##op(KARGS)                                                                    \
    {                                                                                            \
        VN_DTYPE_SWITCH(p->dtype, T, RUN2(uint8_t, T, T, (uint8_t)(a CMP b)));                   \
    }                                                                                            \
    static const pw_op OP_##OP = {.name = #op, .cpu = k_##op, .cuda = VNK_##OP, .cost = 1};
COMPARISON(eq, EQ, ==)
COMPARISON(ne, NE, !=)
COMPARISON(lt, LT, <)
COMPARISON(le, LE, <=)
COMPARISON(gt, GT, >)
COMPARISON(ge, GE, >=)

static vn_tensor *compare(const pw_op *op, const vn_tensor *a, const vn_tensor *b)
{
    if (check_pair(op->name, a, b, false)) return NULL;
    kparams p = {.dtype = a->dtype};
    const vn_tensor *in[2] = {a, b};
    return map(op->name, op, &p, VN_U8, 2, in);
}

vn_tensor *vn_eq(const vn_tensor *a, const vn_tensor *b) { return compare(&OP_EQ, a, b); }
vn_tensor *vn_ne(const vn_tensor *a, const vn_tensor *b) { return compare(&OP_NE, a, b); }
vn_tensor *vn_lt(const vn_tensor *a, const vn_tensor *b) { return compare(&OP_LT, a, b); }
vn_tensor *vn_le(const vn_tensor *a, const vn_tensor *b) { return compare(&OP_LE, a, b); }
vn_tensor *vn_gt(const vn_tensor *a, const vn_tensor *b) { return compare(&OP_GT, a, b); }
vn_tensor *vn_ge(const vn_tensor *a, const vn_tensor *b) { return compare(&OP_GE, a, b); }

/* ---- unary ops ----------------------------------------------------------- */

struct unary_saved { double p0, p1; }; /* the forward's kparams p0, p1 (exponent, clamp bounds) */

/* Checks t (f32 when op->f32_only), maps op over it with parameters p0, p1
 * and records it, with its output saved (as an alias, so the node does not
 * own its own output) when op->saves_output. */
static vn_tensor *unary(const pw_op *op, const vn_tensor *t, double p0, double p1)
{
    if (op->f32_only ? vn__check_dtype_arg(t, VN_F32, op->name, "input", VN_ALLOW_CUDA)
                     : vn__check_arg(t, op->name, "input", VN_ALLOW_CUDA))
        return NULL;
    kparams p = {.dtype = t->dtype, .p0 = p0, .p1 = p1};
    vn_tensor *out = map(op->name, op, &p, t->dtype, 1, &t);
    if (!out) return NULL;
    vn_node *node = vn__record(out, op->name, op->backward, 1, &t);
    if (node) {
        *VN_SAVED_STATE(node, struct unary_saved) = (struct unary_saved){p0, p1};
        if (op->saves_output && !(node->saved[SAVED_OUTPUT] = vn__alias(out))) {
            vn_tensor_release(out);
            return NULL;
        }
    }
    return out;
}

/* Backward of y = f(x) as g·f'(·), with f' computed by formula df from
 * (g, x) or, when the forward saved its output, from (g, y). */
static vn_status unary_backward(vn_node *node, const vn_tensor *g, const pw_op *df)
{
    const vn_tensor *in[2] = {g, node->saved[SAVED_OUTPUT] ? node->saved[SAVED_OUTPUT]
                                                           : node->inputs[0]};
    const struct unary_saved *saved = VN_SAVED_STATE(node, struct unary_saved);
    kparams p = {.dtype = VN_F32, .p0 = saved->p0, .p1 = saved->p1};
    return give(node, 0, df, &p, 2, in);
}

/* Defines <name>_backward, the rule of a unary op whose derivative is the
 * formula DF (see unary_backward). */
#define UNARY_BACKWARD(name, DF)                                                                 \
    static vn_status name##_backward(vn_node *node, const vn_tensor *g)                          \
    {                                                                                            \
        return unary_backward(node, g, &DF);                                                     \
    }

static vn_status neg_backward(vn_node *node, const vn_tensor *g)
{
    return give(node, 0, &OP_NEG, &F32, 1, &g);
}
vn_tensor *vn_neg(const vn_tensor *t) { return unary(&OP_NEG, t, 0, 0); }

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
static void k_abs_b(KARGS) { RUN2(float, float, float, b > 0 ? a : (b < 0 ? -a : 0.0f)); }
static const pw_op OP_ABS_B = {.name = "abs_b", .cpu = k_abs_b, .cuda = VNK_ABS_B, .cost = 1};
UNARY_BACKWARD(abs, OP_ABS_B)
static const pw_op OP_ABS = {.name = "abs", .cpu = k_abs, .cuda = VNK_ABS, .cost = 1,
                             .backward = abs_backward};
vn_tensor *vn_abs(const vn_tensor *t) { return unary(&OP_ABS, t, 0, 0); }

/* exp: y' = y */
static void k_exp(KARGS) { RUN1(float, float, expf(a)); }
UNARY_BACKWARD(exp, OP_MUL)
static const pw_op OP_EXP = {.name = "exp", .cpu = k_exp, .cuda = VNK_EXP, .cost = 10,
                             .f32_only = true, .saves_output = true, .backward = exp_backward};
vn_tensor *vn_exp(const vn_tensor *t) { return unary(&OP_EXP, t, 0, 0); }

/* log: y' = 1/x */
static void k_log(KARGS) { RUN1(float, float, logf(a)); }
UNARY_BACKWARD(log, OP_DIV)
static const pw_op OP_LOG = {.name = "log", .cpu = k_log, .cuda = VNK_LOG, .cost = 10,
                             .f32_only = true, .backward = log_backward};
vn_tensor *vn_log(const vn_tensor *t) { return unary(&OP_LOG, t, 0, 0); }

/* sqrt: y' = 1/(2y) */
static void k_sqrt(KARGS) { RUN1(float, float, sqrtf(a)); }
static void k_sqrt_b(KARGS) { RUN2(float, float, float, 0.5f * a / b); }
static const pw_op OP_SQRT_B = {.name = "sqrt_b", .cpu = k_sqrt_b, .cuda = VNK_SQRT_B, .cost = 2};
UNARY_BACKWARD(sqrt, OP_SQRT_B)
static const pw_op OP_SQRT = {.name = "sqrt", .cpu = k_sqrt, .cuda = VNK_SQRT, .cost = 2,
                              .f32_only = true, .saves_output = true, .backward = sqrt_backward};
vn_tensor *vn_sqrt(const vn_tensor *t) { return unary(&OP_SQRT, t, 0, 0); }

/* x^e (e = p0): y' = e·x^(e-1). Squares, the common case, skip powf. */
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
static const pw_op OP_POW_SCALAR_B = {.name = "pow_scalar_b", .cpu = k_pows_b,
                                      .cuda = VNK_POW_SCALAR_B, .cost = 20};
UNARY_BACKWARD(pows, OP_POW_SCALAR_B)
static const pw_op OP_POW_SCALAR = {.name = "pow_scalar", .cpu = k_pows, .cuda = VNK_POW_SCALAR,
                                    .cost = 20, .f32_only = true, .backward = pows_backward};
vn_tensor *vn_pow_scalar(const vn_tensor *t, double p) { return unary(&OP_POW_SCALAR, t, p, 0); }

/* relu: y' = [x > 0]. `a < 0 ? 0 : a` keeps nan as nan. */
static void k_relu(KARGS) { RUN1(float, float, a < 0.0f ? 0.0f : a); }
static void k_relu_b(KARGS) { RUN2(float, float, float, b > 0.0f ? a : 0.0f); }
static const pw_op OP_RELU_B = {.name = "relu_b", .cpu = k_relu_b, .cuda = VNK_RELU_B, .cost = 1};
UNARY_BACKWARD(relu, OP_RELU_B)
static const pw_op OP_RELU = {.name = "relu", .cpu = k_relu, .cuda = VNK_RELU, .cost = 1,
                              .f32_only = true, .backward = relu_backward};
vn_tensor *vn_relu(const vn_tensor *t) { return unary(&OP_RELU, t, 0, 0); }

/* gelu (tanh form, gelu_f and gelu_grad in kernels/scalar.h) */
/* contiguous: vec_math.c's vectorized loops; strided: the scalar formula */
static void k_gelu(KARGS)
{
    /* one element: the vector kernel too (its stride may read 0), so that
     * every path of gelu and its backward shares one formula */
    if (st[0] == 1 || n == 1) vn__gelu_f32((float *)out, (const float *)in[0], n);
    else RUN1(float, float, gelu_f(a));
}
static void k_gelu_b(KARGS)
{
    if ((st[0] == 1 && st[1] == 1) || n == 1)
        vn__gelu_backward_f32((float *)out, (const float *)in[0], (const float *)in[1], n);
    else RUN2(float, float, float, a * gelu_grad(b));
}
static const pw_op OP_GELU_B = {.name = "gelu_b", .cpu = k_gelu_b, .cuda = VNK_GELU_B, .cost = 25};

/* When the rule may overwrite g (vn__grad_writable) and x is contiguous on
 * the CPU, dx is computed in g's memory and g passed on: the same numbers
 * without a new array, whose first writes would fetch memory the cache does
 * not hold (an MLP's hidden gradient is 4 MB at tutorial 3's size). */
static vn_status gelu_backward(vn_node *node, const vn_tensor *g)
{
    const vn_tensor *x = node->inputs[0];
    if (!vn__input_needs_grad(node, 0) || !vn__grad_writable(g) || vn__is_cuda(x) ||
        !vn_tensor_is_contiguous(x))
        return unary_backward(node, g, &OP_GELU_B);
    float *pg = vn_tensor_data(g);
    const float *px = vn_tensor_data(x);
    int64_t n = vn_tensor_numel(g);
    int nt = n * OP_GELU_B.cost >= VN_OMP_MIN_WORK ? omp_get_max_threads() : 1;
#pragma omp parallel for if (nt > 1)
    for (int c = 0; c < nt; c++) {
        int64_t lo = n * c / nt, hi = n * (c + 1) / nt;
        vn__gelu_backward_inplace_f32(pg + lo, px + lo, hi - lo);
    }
    return vn__accum(node, 0, vn_tensor_retain((vn_tensor *)g));
}
static const pw_op OP_GELU = {.name = "gelu", .cpu = k_gelu, .cuda = VNK_GELU, .cost = 20,
                              .f32_only = true, .backward = gelu_backward};
vn_tensor *vn_gelu(const vn_tensor *t) { return unary(&OP_GELU, t, 0, 0); }

/* tanh (tanh_f in kernels/scalar.h): y' = 1 − y² */
static void k_tanh(KARGS) { RUN1(float, float, tanh_f(a)); }
static void k_tanh_b(KARGS) { RUN2(float, float, float, a * (1.0f - b * b)); }
static const pw_op OP_TANH_B = {.name = "tanh_b", .cpu = k_tanh_b, .cuda = VNK_TANH_B, .cost = 2};
UNARY_BACKWARD(tanh, OP_TANH_B)
static const pw_op OP_TANH = {.name = "tanh", .cpu = k_tanh, .cuda = VNK_TANH, .cost = 20,
                              .f32_only = true, .saves_output = true, .backward = tanh_backward};
vn_tensor *vn_tanh(const vn_tensor *t) { return unary(&OP_TANH, t, 0, 0); }

/* sigmoid: y' = y·(1 − y). For very negative x, expf overflows to inf and y
 * is exactly 0, which is the right limit. */
static void k_sigmoid(KARGS) { RUN1(float, float, 1.0f / (1.0f + expf(-a))); }
static void k_sigmoid_b(KARGS) { RUN2(float, float, float, a * b * (1.0f - b)); }
static const pw_op OP_SIGMOID_B = {.name = "sigmoid_b", .cpu = k_sigmoid_b, .cuda = VNK_SIGMOID_B,
                                   .cost = 2};
UNARY_BACKWARD(sigmoid, OP_SIGMOID_B)
static const pw_op OP_SIGMOID = {.name = "sigmoid", .cpu = k_sigmoid, .cuda = VNK_SIGMOID,
                                 .cost = 10, .f32_only = true, .saves_output = true,
                                 .backward = sigmoid_backward};
vn_tensor *vn_sigmoid(const vn_tensor *t) { return unary(&OP_SIGMOID, t, 0, 0); }

/* clamp (clamp_f in kernels/scalar.h) to [lo, hi] = [p0, p1]; y' = [lo <= x
 * <= hi]. A nan bound is replaced by an infinite one, which leaves that side
 * open. Integers compare in their own type (VN_CLAMP_BOUND, VN_CLAMP_INT),
 * so i64 values beyond 2^53 come out exact. */
#define CLAMP_INT(T, TMIN, TMAX)                                                                 \
    do {                                                                                         \
        T lo = VN_CLAMP_BOUND(T, p->p0, TMIN, TMAX, TMIN);                                       \
        T hi = VN_CLAMP_BOUND(T, p->p1, TMIN, TMAX, TMAX);                                       \
        RUN1(T, T, VN_CLAMP_INT(a, lo, hi));                                                     \
    } while (0)
static void k_clamp(KARGS)
{
    float lo = (float)p->p0, hi = (float)p->p1;
    switch (p->dtype) {
    case VN_F32: RUN1(float, float, clamp_f(a, lo, hi)); break;
    case VN_I32: CLAMP_INT(int32_t, INT32_MIN, INT32_MAX); break;
    case VN_I64: CLAMP_INT(int64_t, INT64_MIN, INT64_MAX); break;
    case VN_U8: CLAMP_INT(uint8_t, 0, UINT8_MAX); break;
    case VN_BF16: case VN_F16: break; /* refused by vn__check */
    }
}
static void k_clamp_b(KARGS)
{
    float lo = (float)p->p0, hi = (float)p->p1;
    RUN2(float, float, float, (b >= lo && b <= hi) ? a : 0.0f);
}
static const pw_op OP_CLAMP_B = {.name = "clamp_b", .cpu = k_clamp_b, .cuda = VNK_CLAMP_B,
                                 .cost = 2};
UNARY_BACKWARD(clamp, OP_CLAMP_B)
static const pw_op OP_CLAMP = {.name = "clamp", .cpu = k_clamp, .cuda = VNK_CLAMP, .cost = 2,
                               .backward = clamp_backward};
static bool fits(vn_dtype d, double value);
vn_tensor *vn_clamp(const vn_tensor *t, double lo, double hi)
{
    if (vn__check_arg(t, "clamp", "input", VN_ALLOW_CUDA)) return NULL;
    /* An integer clamp is exact: each bound must be a whole number the
     * dtype holds (NaN: no bound), not one rounded or wrapped into it. */
    const double bound[2] = {lo, hi};
    for (int k = 0; k < 2 && t->dtype != VN_F32; k++)
        if (!isnan(bound[k]) && !(fits(t->dtype, bound[k]) && bound[k] == trunc(bound[k])))
            return vn__errp(VN_ERR_ARG, "clamp: the %s bound %g is not representable as %s "
                            "(a whole number in its range)", k ? "upper" : "lower", bound[k],
                            vn_dtype_name(t->dtype));
    if (isnan(lo)) lo = -INFINITY;
    if (isnan(hi)) hi = INFINITY;
    return unary(&OP_CLAMP, t, lo, hi);
}

/* ---- where and masked_fill ---------------------------------------------- */

/* g where the mask is set (keep_set) or clear (keep_clear), else 0. */
static void k_keep_set(KARGS) { RUN2(float, float, uint8_t, b ? a : 0.0f); }
static void k_keep_clear(KARGS) { RUN2(float, float, uint8_t, b ? 0.0f : a); }
static const pw_op OP_KEEP_SET = {.name = "keep_set", .cpu = k_keep_set, .cuda = VNK_KEEP_SET,
                                  .cost = 1};
static const pw_op OP_KEEP_CLEAR = {.name = "keep_clear", .cpu = k_keep_clear,
                                    .cuda = VNK_KEEP_CLEAR, .cost = 1};

static void k_where(KARGS) { VN_DTYPE_SWITCH(p->dtype, T, RUN3(T, uint8_t, T, T, a ? b : c)); }

static vn_status where_backward(vn_node *node, const vn_tensor *g)
{
    const vn_tensor *in[2] = {g, node->inputs[0]};
    vn_status s = give(node, 1, &OP_KEEP_SET, &F32, 2, in);
    if (!s) s = give(node, 2, &OP_KEEP_CLEAR, &F32, 2, in);
    return s;
}
static const pw_op OP_WHERE = {.name = "where", .cpu = k_where, .cuda = VNK_WHERE, .cost = 1,
                               .backward = where_backward};

vn_tensor *vn_where(const vn_tensor *cond, const vn_tensor *a, const vn_tensor *b)
{
    const pw_op *op = &OP_WHERE;
    if (vn__check_dtype_for(cond, VN_U8, "where: condition", VN_ALLOW_CUDA)) return NULL;
    if (check_pair(op->name, a, b, false)) return NULL;
    kparams p = {.dtype = a->dtype};
    const vn_tensor *in[3] = {cond, a, b};
    vn_tensor *out = map(op->name, op, &p, a->dtype, 3, in);
    if (out) vn__record(out, op->name, op->backward, 3, in);
    return out;
}

/* masked_fill: p0 (the fill value) where the mask is set. */
static void k_masked_fill(KARGS)
{
    VN_DTYPE_SWITCH(p->dtype, T, RUN2(T, T, uint8_t, b ? (T)p->p0 : a));
}

static vn_status masked_fill_backward(vn_node *node, const vn_tensor *g)
{
    const vn_tensor *in[2] = {g, node->inputs[1]};
    return give(node, 0, &OP_KEEP_CLEAR, &F32, 2, in);
}
static const pw_op OP_MASKED_FILL = {.name = "masked_fill", .cpu = k_masked_fill,
                                     .cuda = VNK_MASKED_FILL, .cost = 1,
                                     .backward = masked_fill_backward};

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
    const pw_op *op = &OP_MASKED_FILL;
    if (vn__check_for(t, "masked_fill: input", VN_ALLOW_CUDA)) return NULL;
    if (vn__check_dtype_for(mask, VN_U8, "masked_fill: mask", VN_ALLOW_CUDA)) return NULL;
    if (!fits(t->dtype, value))
        return vn__errp(VN_ERR_ARG, "masked_fill: value %g does not fit in dtype %s", value,
                        vn_dtype_name(t->dtype));
    int nd;
    int64_t shape[VN_MAX_DIMS];
    if (vn__broadcast_shape(op->name, t->ndim, t->shape, mask->ndim, mask->shape, &nd, shape))
        return NULL;
    if (nd != t->ndim || memcmp(shape, t->shape, sizeof(int64_t) * (size_t)nd)) {
        return vn__errp(VN_ERR_SHAPE, "masked_fill: mask of shape %s does not broadcast to the "
                        "input's shape %s", vn__shape(mask->ndim, mask->shape), vn__shape(t->ndim, t->shape));
    }
    kparams p = {.dtype = t->dtype, .p0 = value};
    const vn_tensor *in[2] = {t, mask};
    vn_tensor *out = map(op->name, op, &p, t->dtype, 2, in);
    if (out) vn__record(out, op->name, op->backward, 2, in);
    return out;
}

/* ---- dropout --------------------------------------------------------------- */

/* The drop decision for element i of one dropout call hashes i with a
 * per-call key drawn from the engine RNG (dropout_mask_at in
 * kernels/scalar.h, which the CUDA kernel shares). That keeps runs repeatable
 * under vn_manual_seed, takes the RNG lock once per call instead of once per
 * element, and is plain 32-bit arithmetic that GCC vectorizes. */

static vn_status dropout_backward(vn_node *node, const vn_tensor *g)
{
    const vn_tensor *in[2] = {g, node->saved[SAVED_MASK]};
    return give(node, 0, &OP_MUL, &F32, 2, in);
}

static vn_status identity_backward(vn_node *node, const vn_tensor *g)
{
    return vn__accum(node, 0, vn_tensor_retain((vn_tensor *)g));
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
        for (int64_t i = 0; i < numel; i++) m[i] = dropout_mask_at((uint32_t)i, k0, k1, thr, scale);
    }
    const vn_tensor *in[2] = {t, mask};
    vn_tensor *out = map("dropout", &OP_MUL, &F32, VN_F32, 2, in);
    vn_node *node = out ? vn__record(out, "dropout", dropout_backward, 1, &t) : NULL;
    if (node) node->saved[SAVED_MASK] = mask;
    else vn_tensor_release(mask);
    return out;
}
