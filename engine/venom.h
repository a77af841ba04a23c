/* venom.h — public C API of libvenom, a small tensor and autograd engine.
 *
 * Conventions (they hold for every function below unless it says otherwise):
 *
 *  - Errors. Functions returning vn_status return VN_OK on success; functions
 *    returning a pointer return NULL on failure. Either way a message naming
 *    what was expected and what was found is stored per thread and read with
 *    vn_last_error(). The library never aborts, exits or longjmps.
 *  - Ownership. Every function that returns a vn_tensor* hands the caller one
 *    reference; drop it with vn_tensor_release(). Tensor arguments are
 *    borrowed. Views (reshape, transpose, narrow...) share storage with their
 *    source; the storage lives until its last tensor is released.
 *  - Indices are 0-based. Negative dims count from the end (-1 = last).
 *  - dtypes: VN_F32 (default, all arithmetic), VN_I32, VN_I64 (indices,
 *    class targets), VN_U8 (masks, raw image bytes). Arithmetic ops need both
 *    operands of the same dtype; use vn_to_dtype() to convert.
 *  - Broadcasting follows NumPy: shapes are aligned at the right; a dim of
 *    size 1 stretches to the other's size.
 *  - Autograd. An op records itself on the tape when grad mode is on and
 *    some input requires a gradient. vn_backward() walks the tape in reverse
 *    topological order and accumulates (+=) into the .grad of leaf tensors;
 *    saved tensors are freed afterwards, so a second backward through the same
 *    graph is an error.
 *  - Threads. Distinct tensors may be used from distinct threads. Grad mode,
 *    the error message and the RNG are per process except the error message
 *    (per thread). A tensor must not be used by two threads at once.
 */
#ifndef VENOM_H
#define VENOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VN_MAX_DIMS 8

typedef enum {
    VN_OK = 0,
    VN_ERR_ARG,    /* an argument is out of range, NULL, or of the wrong kind */
    VN_ERR_SHAPE,  /* shapes do not match or do not broadcast */
    VN_ERR_DTYPE,  /* wrong dtype for this op */
    VN_ERR_MEMORY, /* out of memory */
    VN_ERR_IO,     /* a file could not be opened, read or written */
    VN_ERR_FORMAT, /* a file is malformed (bad magic, truncated, ...) */
    VN_ERR_STATE   /* the call is not valid now (freed tensor, released graph) */
} vn_status;

typedef enum { VN_F32 = 0, VN_I32, VN_I64, VN_U8 } vn_dtype;

typedef enum { VN_REDUCE_MEAN = 0, VN_REDUCE_SUM, VN_REDUCE_NONE } vn_reduction;

typedef struct vn_tensor vn_tensor;

/* ---- errors and library state ------------------------------------------ */

/* The message of the last failed call on this thread ("" if none). */
const char *vn_last_error(void);
/* Name of a status code, e.g. "shape error". */
const char *vn_status_name(vn_status s);
/* Name of a dtype: "f32", "i32", "i64", "u8". */
const char *vn_dtype_name(vn_dtype d);
/* Size of one element in bytes. */
size_t vn_dtype_size(vn_dtype d);

/* Seed the engine RNG (xoshiro256**; normals by Box–Muller). Every random
 * choice (rand, randn, randperm, dropout) draws from it, so a fixed seed gives
 * the same run. The state can be saved and restored (4 × uint64). */
void vn_manual_seed(uint64_t seed);
void vn_rng_get_state(uint64_t state[4]);
void vn_rng_set_state(const uint64_t state[4]);

/* Grad mode. Returns the previous setting. While off, no op is recorded. */
bool vn_set_grad_enabled(bool enabled);
bool vn_is_grad_enabled(void);

/* Caching allocator: bytes held by live tensors, and bytes cached in the free
 * lists for reuse. vn_empty_cache() returns the cached bytes to the system. */
void vn_memory_stats(size_t *in_use, size_t *cached);
void vn_empty_cache(void);

/* ---- creation ----------------------------------------------------------- */

/* New contiguous tensors of the given shape (ndim 0..VN_MAX_DIMS; ndim 0 is a
 * scalar). Errors: VN_ERR_ARG for a negative size or ndim out of range,
 * VN_ERR_MEMORY. */
vn_tensor *vn_empty(vn_dtype dtype, int ndim, const int64_t *shape);
vn_tensor *vn_zeros(vn_dtype dtype, int ndim, const int64_t *shape);
vn_tensor *vn_ones(vn_dtype dtype, int ndim, const int64_t *shape);
vn_tensor *vn_full(vn_dtype dtype, int ndim, const int64_t *shape, double value);
/* Copies numel elements of `dtype` from `data` (host memory, row-major). */
vn_tensor *vn_from_data(vn_dtype dtype, int ndim, const int64_t *shape, const void *data);
/* 1-D tensor start, start+step, ... < end (> end for negative step). */
vn_tensor *vn_arange(double start, double end, double step, vn_dtype dtype);
/* f32 uniform on [0, 1) and standard normal N(0, 1), from the engine RNG. */
vn_tensor *vn_rand(int ndim, const int64_t *shape);
vn_tensor *vn_randn(int ndim, const int64_t *shape);
/* i64 random permutation of 0..n-1 (Fisher–Yates on the engine RNG). */
vn_tensor *vn_randperm(int64_t n);

/* ---- tensor lifetime and properties ------------------------------------- */

vn_tensor *vn_tensor_retain(vn_tensor *t);  /* returns t; NULL-safe */
void vn_tensor_release(vn_tensor *t);       /* NULL-safe */
/* Drops this tensor's storage and gradient now (idempotent). Later use of t
 * is a VN_ERR_STATE error; views of it keep their storage alive. */
void vn_tensor_free(vn_tensor *t);
bool vn_tensor_is_freed(const vn_tensor *t);

int vn_tensor_ndim(const vn_tensor *t);
const int64_t *vn_tensor_shape(const vn_tensor *t);   /* ndim entries */
const int64_t *vn_tensor_strides(const vn_tensor *t); /* in elements */
int64_t vn_tensor_numel(const vn_tensor *t);
vn_dtype vn_tensor_dtype(const vn_tensor *t);
bool vn_tensor_is_contiguous(const vn_tensor *t);
/* Pointer to element [0,...,0] (host memory); NULL if freed. */
void *vn_tensor_data(const vn_tensor *t);
/* Writes "(2, 3)"-style text of the shape into buf. */
const char *vn_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

/* Value of a one-element tensor as double. VN_ERR_SHAPE if numel != 1. */
vn_status vn_tensor_item(const vn_tensor *t, double *out);
/* Element at a multi-index (ndim entries, 0-based) as double / set from
 * double. VN_ERR_ARG for an index out of range. */
vn_status vn_tensor_get(const vn_tensor *t, const int64_t *index, double *out);
vn_status vn_tensor_set(vn_tensor *t, const int64_t *index, double value);
/* Copies all elements, in row-major order, into buf of `nbytes` bytes
 * (numel × dtype size). */
vn_status vn_tensor_copy_out(const vn_tensor *t, void *buf, size_t nbytes);
/* In place: dst[...] = src (broadcast to dst's shape, converted to dst's
 * dtype). Not recorded by autograd. */
vn_status vn_tensor_copy_(vn_tensor *dst, const vn_tensor *src);
/* In place: every element = value. Not recorded by autograd. */
vn_status vn_tensor_fill_(vn_tensor *t, double value);

/* ---- autograd ----------------------------------------------------------- */

/* Mark a leaf tensor as a parameter whose gradient backward accumulates.
 * VN_ERR_DTYPE for a non-f32 tensor; VN_ERR_ARG for a non-leaf. */
vn_status vn_tensor_set_requires_grad(vn_tensor *t, bool requires_grad);
bool vn_tensor_requires_grad(const vn_tensor *t);
bool vn_tensor_is_leaf(const vn_tensor *t);
/* Borrowed pointer to the accumulated gradient, or NULL if none yet. */
vn_tensor *vn_tensor_grad(const vn_tensor *t);
/* Replace the gradient (NULL clears it). Shape must match. */
vn_status vn_tensor_set_grad(vn_tensor *t, vn_tensor *grad);
/* Drop the gradient (the next backward starts from zero). */
void vn_tensor_zero_grad(vn_tensor *t);
/* Name of the op that produced t ("matmul", ...) or NULL for a leaf. */
const char *vn_tensor_grad_fn_name(const vn_tensor *t);

/* Back-propagate from `root`. `grad` is dL/droot (same shape); NULL means 1
 * and requires root to have one element (VN_ERR_SHAPE otherwise).
 * Errors: VN_ERR_ARG if root does not require grad, VN_ERR_STATE if the
 * graph was already released by an earlier backward. */
vn_status vn_backward(vn_tensor *root, const vn_tensor *grad);
/* A new tensor sharing t's storage, cut from the graph. */
vn_tensor *vn_detach(const vn_tensor *t);

/* ---- views and copies (differentiable) ---------------------------------- */

/* Same data, new shape; one entry may be -1 (inferred). A view when t's
 * layout allows it, a copy otherwise. VN_ERR_SHAPE if numel differs. */
vn_tensor *vn_reshape(const vn_tensor *t, int ndim, const int64_t *shape);
/* Like reshape but never copies: VN_ERR_SHAPE if t's strides do not allow. */
vn_tensor *vn_view(const vn_tensor *t, int ndim, const int64_t *shape);
vn_tensor *vn_transpose(const vn_tensor *t, int dim0, int dim1);
/* dims: a permutation of 0..ndim-1. */
vn_tensor *vn_permute(const vn_tensor *t, const int *dims);
/* Elements start..start+length-1 along dim (a view). */
vn_tensor *vn_narrow(const vn_tensor *t, int dim, int64_t start, int64_t length);
/* Element `index` along dim, removing that dim (a view). */
vn_tensor *vn_select(const vn_tensor *t, int dim, int64_t index);
vn_tensor *vn_unsqueeze(const vn_tensor *t, int dim);
/* dim = a dim of size 1 to remove. */
vn_tensor *vn_squeeze(const vn_tensor *t, int dim);
/* Broadcast view to `shape` (stride 0 on stretched dims). */
vn_tensor *vn_expand(const vn_tensor *t, int ndim, const int64_t *shape);
/* A contiguous tensor with t's values (t itself, retained, if already so). */
vn_tensor *vn_contiguous(const vn_tensor *t);
/* A contiguous copy. */
vn_tensor *vn_clone(const vn_tensor *t);
/* A copy converted to dtype (f32→int truncates toward zero). Differentiable
 * only f32→f32. */
vn_tensor *vn_to_dtype(const vn_tensor *t, vn_dtype dtype);
/* Concatenate n tensors along dim (other dims equal). */
vn_tensor *vn_cat(vn_tensor *const *ts, int n, int dim);
/* out[i] = t[index[i]] along dim 0 for a 1-D i32/i64 index: rows of t. */
vn_tensor *vn_index_select(const vn_tensor *t, int dim, const vn_tensor *index);

/* ---- elementwise (broadcasting, differentiable for f32) ----------------- */

/* add, sub, mul take any dtype (both operands the same; the result has it);
 * integers wrap around in two's complement. div and pow are f32 only
 * (VN_ERR_DTYPE otherwise). VN_ERR_SHAPE names both shapes when they do not
 * broadcast. */
vn_tensor *vn_add(const vn_tensor *a, const vn_tensor *b);
vn_tensor *vn_sub(const vn_tensor *a, const vn_tensor *b);
vn_tensor *vn_mul(const vn_tensor *a, const vn_tensor *b);
vn_tensor *vn_div(const vn_tensor *a, const vn_tensor *b);
/* a^b elementwise. */
vn_tensor *vn_pow(const vn_tensor *a, const vn_tensor *b);
/* Comparisons give u8 0/1 tensors; not differentiable. */
vn_tensor *vn_eq(const vn_tensor *a, const vn_tensor *b);
vn_tensor *vn_ne(const vn_tensor *a, const vn_tensor *b);
vn_tensor *vn_lt(const vn_tensor *a, const vn_tensor *b);
vn_tensor *vn_le(const vn_tensor *a, const vn_tensor *b);
vn_tensor *vn_gt(const vn_tensor *a, const vn_tensor *b);
vn_tensor *vn_ge(const vn_tensor *a, const vn_tensor *b);

/* Unary ops (f32 only except neg and abs, which take any dtype; integer
 * neg/abs wrap, so -INT32_MIN is INT32_MIN). */
vn_tensor *vn_neg(const vn_tensor *t);
vn_tensor *vn_abs(const vn_tensor *t);
vn_tensor *vn_exp(const vn_tensor *t);
vn_tensor *vn_log(const vn_tensor *t);
vn_tensor *vn_sqrt(const vn_tensor *t);
vn_tensor *vn_pow_scalar(const vn_tensor *t, double p);
vn_tensor *vn_relu(const vn_tensor *t);
/* GELU, tanh approximation (Hendrycks & Gimpel 2016):
 * 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). */
vn_tensor *vn_gelu(const vn_tensor *t);
vn_tensor *vn_tanh(const vn_tensor *t);
vn_tensor *vn_sigmoid(const vn_tensor *t);
/* min(max(t, lo), hi); pass NAN for no bound. Gradient 1 inside, 0 outside. */
vn_tensor *vn_clamp(const vn_tensor *t, double lo, double hi);
/* cond ? a : b, with cond a u8 tensor; all three broadcast. */
vn_tensor *vn_where(const vn_tensor *cond, const vn_tensor *a, const vn_tensor *b);
/* t with `value` where mask (u8, broadcast to t) is nonzero. The result has
 * t's shape and dtype; VN_ERR_ARG if value does not fit the dtype. */
vn_tensor *vn_masked_fill(const vn_tensor *t, const vn_tensor *mask, double value);
/* Inverted dropout: zero each element with probability p and scale the rest
 * by 1/(1-p) (Srivastava et al. 2014). Identity when !training or p == 0 (a
 * new tensor sharing t's storage). The mask hashes the element index with a
 * key drawn from the engine RNG, so vn_manual_seed makes it repeatable.
 * VN_ERR_ARG unless 0 <= p < 1. */
vn_tensor *vn_dropout(const vn_tensor *t, double p, bool training);

/* ---- reductions ---------------------------------------------------------- */

/* Over all elements (0-d result) ... */
vn_tensor *vn_sum_all(const vn_tensor *t);
vn_tensor *vn_mean_all(const vn_tensor *t);
vn_tensor *vn_max_all(const vn_tensor *t);
vn_tensor *vn_min_all(const vn_tensor *t);
/* ... or over one dim, removed unless keepdim. sum/mean of integer tensors
 * give i64/f32. max/min backward sends the gradient to the first arg-extremum.
 * argmax/argmin return i64 indices (first of ties); not differentiable.
 * nan counts as the largest and the smallest value (it propagates). Over zero
 * elements sum is 0, mean nan, and max/min/argmax/argmin a VN_ERR_SHAPE
 * error. A 0-d tensor reduces over dim 0 (or -1) to itself. */
vn_tensor *vn_sum(const vn_tensor *t, int dim, bool keepdim);
vn_tensor *vn_mean(const vn_tensor *t, int dim, bool keepdim);
vn_tensor *vn_max(const vn_tensor *t, int dim, bool keepdim);
vn_tensor *vn_min(const vn_tensor *t, int dim, bool keepdim);
vn_tensor *vn_argmax(const vn_tensor *t, int dim, bool keepdim);
vn_tensor *vn_argmin(const vn_tensor *t, int dim, bool keepdim);

/* ---- linear algebra ------------------------------------------------------ */

/* Matrix product (f32, OpenBLAS sgemm).
 *   (n,k)·(k,m) → (n,m); 1-D operands are treated as a row / column vector
 *   and that dim is dropped from the result; 3-D and more: batched over the
 *   leading dims, which broadcast. VN_ERR_SHAPE names both shapes if the
 *   inner dims differ. Transposed views are passed to BLAS without a copy. */
vn_tensor *vn_matmul(const vn_tensor *a, const vn_tensor *b);
/* y = x·wᵀ + b: x (..., in), w (out, in), bias (out) or NULL → (..., out). */
vn_tensor *vn_linear(const vn_tensor *x, const vn_tensor *w, const vn_tensor *bias);

/* ---- softmax and losses ------------------------------------------------- */

/* softmax(x)_i = exp(x_i − max x) / Σ_j exp(x_j − max x) along dim. */
vn_tensor *vn_softmax(const vn_tensor *t, int dim);
/* log_softmax(x)_i = x_i − max x − log Σ_j exp(x_j − max x) along dim. */
vn_tensor *vn_log_softmax(const vn_tensor *t, int dim);
/* Cross-entropy of logits (N, C) f32 against class targets (N) i32/i64 in
 * 0..C-1: −log softmax(logits)[n, target[n]], averaged (MEAN), summed (SUM)
 * or kept per sample (NONE → shape (N)). Fused and numerically stable.
 * Errors: VN_ERR_SHAPE (N mismatch), VN_ERR_DTYPE, VN_ERR_ARG for a target
 * out of range (the message gives the position and value). */
vn_tensor *vn_cross_entropy(const vn_tensor *logits, const vn_tensor *target,
                            vn_reduction reduction);
/* Negative log-likelihood of log-probabilities (N, C): −logp[n, target[n]]. */
vn_tensor *vn_nll_loss(const vn_tensor *logp, const vn_tensor *target,
                       vn_reduction reduction);
/* Mean squared error (a − b)², a and b of the same shape. */
vn_tensor *vn_mse_loss(const vn_tensor *a, const vn_tensor *b, vn_reduction reduction);

/* ---- optimizer steps (in place on the parameter; not recorded) ---------- */

/* SGD with momentum and weight decay (PyTorch's convention):
 *   g ← grad + wd·p;  buf ← momentum·buf + (1 − dampening)·g  (buf = g on
 *   the first step, signalled by first_step);  g ← nesterov ? g + momentum·buf
 *   : buf (when momentum > 0);  p ← p − lr·g.
 * momentum_buf may be NULL when momentum == 0. All tensors f32, contiguous,
 * same shape. */
vn_status vn_sgd_step(vn_tensor *param, const vn_tensor *grad, vn_tensor *momentum_buf,
                      double lr, double momentum, double dampening, double weight_decay,
                      bool nesterov, bool first_step);
/* Adam (Kingma & Ba 2015) and AdamW (Loshchilov & Hutter 2019), step t ≥ 1:
 *   decoupled: p ← p·(1 − lr·wd)   else: g ← grad + wd·p
 *   m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
 *   p ← p − lr · (m / (1−β1^t)) / (sqrt(v / (1−β2^t)) + eps). */
vn_status vn_adam_step(vn_tensor *param, const vn_tensor *grad, vn_tensor *exp_avg,
                       vn_tensor *exp_avg_sq, int64_t step, double lr, double beta1,
                       double beta2, double eps, double weight_decay, bool decoupled);

/* ---- datasets ------------------------------------------------------------ */

/* Read an IDX file (MNIST/Fashion-MNIST format; gzip-compressed or plain,
 * detected by zlib). Returns a u8/i32/f32... tensor of the shape in its
 * header. Errors: VN_ERR_IO (missing file: the message names the path),
 * VN_ERR_FORMAT (bad magic, unsupported type code, truncated data; the
 * message gives expected and found byte counts). */
vn_tensor *vn_idx_load(const char *path);

#ifdef __cplusplus
}
#endif
#endif
