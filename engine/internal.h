/* internal.h — what the engine's own files share: the tensor and tape-node
 * structs, error helpers, and the small toolkit every op uses (argument
 * checks, broadcasting, recording a node, accumulating a gradient). */
#ifndef VENOM_INTERNAL_H
#define VENOM_INTERNAL_H

#include "venom.h"
#include "kernels.h" /* the CUDA backend's C ABI (kernels/) */

#include <math.h>
#include <stdarg.h>
#include <stddef.h> /* max_align_t */
#include <string.h>

/* Refcounts of tensors and storages are atomic: threads that share a
 * read-only tensor (weights used for inference on several threads) retain
 * and release it, and views of it share its storage. */
typedef struct vn_storage {
    void *data;         /* host memory, or device memory when on_cuda */
    bool on_cuda;
    size_t nbytes;
    _Atomic int refcount;
    uint32_t version; /* bumped by every in-place write; see vn__written */
} vn_storage;

typedef struct vn_node vn_node;

struct vn_tensor {
    _Atomic int refcount;
    vn_dtype dtype;
    int ndim;
    int64_t shape[VN_MAX_DIMS];
    int64_t strides[VN_MAX_DIMS]; /* in elements; 0 on broadcast dims */
    int64_t offset;               /* in elements */
    vn_storage *storage;          /* NULL once vn_tensor_free'd */
    bool requires_grad;           /* leaf parameter: accumulate into grad */
    vn_tensor *grad;              /* owned; same shape, contiguous f32 */
    vn_node *grad_fn;             /* owned; the op that made this tensor */
    const char *lost_grad_fn;     /* the op whose node could not be recorded (out of
                                     memory): backward reaching here fails */
    /* A leaf's grad-ready hook (engine/dist: DataParallel's gradient buckets):
     * vn_backward calls grad_ready(t, grad_ready_ud) as soon as the last node
     * feeding t's gradient has run; grad_pending counts those nodes during a
     * walk. A failed hook fails the backward. */
    vn_status (*grad_ready)(vn_tensor *t, void *ud);
    void *grad_ready_ud;
    int grad_pending;
    /* Optional, beside grad_ready: the rule of the node that last feeds t's
     * gradient may hand rows over as its GEMM finishes them (vn__grad_rows_*
     * below), so a bucket can start during that GEMM. grad_rows(t, ud, part,
     * lo, hi): rows lo..hi of t's final gradient are t->grad's rows (when
     * t->grad has storage) plus part's (part: contiguous, t's shape, row 0
     * first). Calls come in increasing row order, before grad_ready; a
     * hook that fails remembers the failure for grad_ready to return. */
    void (*grad_rows)(vn_tensor *t, void *ud, const float *part, int64_t lo, int64_t hi);
};

/* A tape node: one op's backward rule and what it needs.
 * backward(n, gout) receives dL/d(output) and calls vn__accum(n, i, g) for
 * each input i that needs a gradient (vn__input_needs_grad). It runs with
 * grad mode off, so it may use the public ops freely. */
#define VN_NODE_INPUTS 5 /* the fused MLP of engine/sparse/activation_sparse_mlp.c has 5 */
#define VN_NODE_SAVED 4
#define VN_NODE_STATE_BYTES 64
typedef vn_status (*vn_backward_fn)(vn_node *n, const vn_tensor *gout);

struct vn_node {
    int refcount;
    const char *name;
    vn_backward_fn backward;
    int ninputs;
    vn_tensor *inputs[VN_NODE_INPUTS]; /* retained; their values are saved */
    vn_tensor *saved[VN_NODE_SAVED];   /* retained extras (outputs as aliases, masks, indices) */
    /* The op's own parameters (dims, sizes, a reduction); see VN_SAVED_STATE. */
    _Alignas(max_align_t) unsigned char saved_state[VN_NODE_STATE_BYTES];
    int out_ndim;
    int64_t out_shape[VN_MAX_DIMS];
    vn_tensor *gacc;  /* dL/d(output), summed over the output's uses */
    bool released;    /* backward done: inputs and saved dropped */
    uint64_t mark;    /* graph walk bookkeeping */
    vn_node *next_dying; /* see vn__node_release */
    /* Storage versions at record time: backward refuses to run on values
     * that were overwritten in place since (they would give wrong grads). */
    uint32_t input_version[VN_NODE_INPUTS];
    const vn_storage *out_storage; /* compared only, never dereferenced */
    uint32_t out_version;
};

/* The non-tensor values an op saves for its backward rule live inside the
 * node, so recording allocates nothing more. Each op names them in a struct
 * of its own beside its rule, e.g. struct narrow_saved { int64_t dim, start,
 * length; }, and reaches them as VN_SAVED_STATE(node, struct narrow_saved)
 * (zeroed by vn__record). A struct larger than VN_NODE_STATE_BYTES fails the
 * build here: the array size in the sizeof goes negative. */
#define VN_SAVED_STATE(node, type)                                                      \
    ((type *)(void *)((node)->saved_state +                                             \
                      0 * sizeof(char[sizeof(type) <= VN_NODE_STATE_BYTES ? 1 : -1])))

/* ---- errors -------------------------------------------------------------- */

/* Store a printf-style message for vn_last_error() and return s: the
 * public vn_set_error under the name the engine's files use. */
#define vn__err vn_set_error
/* Same, for functions that return a pointer: always returns NULL. */
void *vn__errp(vn_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Checks that t is a usable tensor (non-NULL, not freed). `what` names the
 * argument in the message, e.g. "matmul: argument 2". Unless `allow` says
 * the op handles them, CUDA tensors are refused (VN_ERR_DEVICE: the op is
 * CPU only) and so are bf16/f16 ones (VN_ERR_DTYPE: storage-only dtypes):
 * an op must opt in to each, so no CPU loop ever sees a device pointer or
 * a 16-bit float. */
#define VN_ALLOW_CUDA 1u /* the op has a CUDA path */
#define VN_ALLOW_HALF 2u /* the op handles bf16 and f16 */
vn_status vn__check_for(const vn_tensor *t, const char *what, unsigned allow);
#define vn__check(t, what) vn__check_for(t, what, 0)
/* vn__check_for plus a dtype requirement. */
vn_status vn__check_dtype_for(const vn_tensor *t, vn_dtype want, const char *what, unsigned allow);
#define vn__check_dtype(t, want, what) vn__check_dtype_for(t, want, what, 0)
/* dim in [-ndim, ndim) → [0, ndim); VN_ERR_ARG otherwise. */
vn_status vn__wrap_dim(int ndim, int *dim, const char *what);

/* ---- argument checks and messages (engine/error.c) ---------------------- */

/* vn__check_for and vn__check_dtype_for with the argument named apart from
 * the op: messages start "op: name" ("op" alone when name is NULL), e.g.
 * vn__check_arg(t, op, "input", VN_ALLOW_CUDA) for any op name. */
vn_status vn__check_arg(const vn_tensor *t, const char *op, const char *name, unsigned allow);
vn_status vn__check_dtype_arg(const vn_tensor *t, vn_dtype want, const char *op, const char *name,
                              unsigned allow);
/* A shape as text, "(2, 3)", for error messages (in engine/tensor.c, beside
 * vn_shape_str): formatted into one of VN_SHAPE_SLOTS per-thread buffers
 * taken in turn, so one message can quote up to that many shapes without
 * buffers of its own. Valid until VN_SHAPE_SLOTS more calls on the thread. */
#define VN_SHAPE_SLOTS 4
#define VN_SHAPE_LEN 192 /* VN_MAX_DIMS sizes of up to 20 characters each */
const char *vn__shape(int ndim, const int64_t *shape);

/* Largest element count a tensor may have (any more and byte sizes and
 * flat indices could overflow int64). */
#define VN_MAX_NUMEL 1e15

/* Each size in [0, VN_MAX_NUMEL] and their product too; VN_ERR_ARG names
 * the op and the offending size otherwise. */
vn_status vn__check_shape(const char *op, int ndim, const int64_t *shape);

/* ---- memory -------------------------------------------------------------- */

void *vn__mem_alloc(size_t nbytes); /* 64-byte aligned, from the cache */
void vn__mem_free(void *p, size_t nbytes);

/* A new contiguous tensor, uninitialized (vn_empty without checks), on the
 * CPU or on the device of `like` (vn__new_like). */
vn_tensor *vn__new(vn_dtype dtype, int ndim, const int64_t *shape);
vn_tensor *vn__new_on(bool on_cuda, vn_dtype dtype, int ndim, const int64_t *shape);
vn_tensor *vn__new_like(const vn_tensor *like, vn_dtype dtype, int ndim, const int64_t *shape);
/* Address of element [0,...,0] on whichever device t lives (no checks). */
void *vn__ptr(const vn_tensor *t);
/* A new tensor header over t's storage (shares it; no grad_fn, no grad). */
vn_tensor *vn__alias(const vn_tensor *t);
/* t itself (retained) if contiguous, else a contiguous copy that is not
 * recorded on the tape: for kernels that want plain row-major input. */
vn_tensor *vn__plain_contiguous(const vn_tensor *t);
/* numel of a shape. */
int64_t vn__numel(int ndim, const int64_t *shape);
/* Contiguous row-major strides for a shape. */
void vn__contig_strides(int ndim, const int64_t *shape, int64_t *strides);
bool vn__same_shape(const vn_tensor *a, const vn_tensor *b);

/* Element access as double through any dtype (slow path, for generic code). */
double vn__load(const vn_tensor *t, int64_t elem_offset);
void vn__store(vn_tensor *t, int64_t elem_offset, double v);
/* Element offset of the flat row-major position `flat` in t. */
int64_t vn__offset_of(const vn_tensor *t, int64_t flat);

/* ---- broadcasting -------------------------------------------------------- */

/* The broadcast shape of a and b (NumPy rules). VN_ERR_SHAPE with both
 * shapes in the message when they do not broadcast; `op` names the op. */
vn_status vn__broadcast_shape(const char *op, int na, const int64_t *sa, int nb,
                              const int64_t *sb, int *nout, int64_t *sout);
/* t's strides when viewed with the broadcast shape (ndim, shape): leading
 * new dims and stretched dims get stride 0. */
void vn__broadcast_strides(const vn_tensor *t, int ndim, const int64_t *shape,
                           int64_t *strides);
/* Sum g (broadcast shape) down to `shape` (the reverse of broadcasting).
 * Returns a new f32 tensor; g itself (retained) if shapes already match. */
vn_tensor *vn__sum_to(const vn_tensor *g, int ndim, const int64_t *shape);

/* ---- devices (engine/device.c) ------------------------------------------ */

static inline bool vn__is_cuda(const vn_tensor *t) { return t->storage && t->storage->on_cuda; }
/* Checks that the n tensors (NULLs skipped) share a device and returns
 * whether it is CUDA; a 0-d CPU tensor may join CUDA tensors (the caller
 * moves it with vn__scalar_to). VN_ERR_DEVICE names both devices. */
vn_status vn__same_device(const char *op, int n, const vn_tensor *const *ts, bool *on_cuda);
/* The same rule without the scalar exception, for ops whose CUDA path reads
 * every argument on the device (no CPU scalar is moved over) and for pairs
 * that must match (a gradient and its tensor, optimizer state and its
 * parameter). names[k] names tensor k in the message (names or names[k]
 * NULL: "argument k+1"); on_cuda may be NULL. */
vn_status vn__same_device_strict(const char *op, int n, const vn_tensor *const *ts,
                                 const char *const *names, bool *on_cuda);
/* *t moved to the CUDA device when it is a CPU tensor (a 0-d scalar next to
 * CUDA tensors): replaces *t with a new reference stored in *hold (release
 * it after use), or leaves both alone. */
vn_status vn__scalar_to_cuda(const vn_tensor **t, vn_tensor **hold);
/* The failure of a vnk_* call as VN_ERR_DEVICE "op: <CUDA message>". */
vn_status vn__cuda_err(const char *op);
void *vn__cuda_errp(const char *op);
/* The strided loop over contiguous `out` (on CUDA) reading the n inputs
 * broadcast to its shape, dims merged where the layouts allow; the inputs'
 * element offsets are folded into *in_ptr[k]. Defined for kernels.h's
 * vnk_loop; returns false for an empty output. */
bool vn__cuda_loop(const vn_tensor *out, int n, const vn_tensor *const *in, vnk_loop *L,
                   const void **in_ptr);
/* The autocast dtype of this thread (VN_F32 when off). */
vn_dtype vn__autocast(void);
bool vn__allow_tf32(void);

/* ---- random numbers (engine/rng.c) -------------------------------------- */

uint64_t vn__rng_next(void);   /* 64 random bits */
double vn__rng_uniform(void);  /* uniform on [0, 1) */
float vn__rng_uniform_f32(void); /* one element of vn_rand: a float uniform on [0, 1) */

/* In-place writes. vn__begin_write refuses a leaf that requires grad while
 * grad mode is on (its old value may be needed by backward; write under
 * no_grad), then marks the storage written. vn__written only marks it. */
vn_status vn__begin_write(vn_tensor *t, const char *op);
void vn__written(vn_tensor *t);

/* ---- the tape ------------------------------------------------------------ */

/* True when grad mode is on and t needs a gradient (a leaf with
 * requires_grad, or the output of a recorded op). */
bool vn__needs_grad(const vn_tensor *t);
/* The per-op profiler (profile.c, venom/profile.h): when vn__profiling is
 * set on this thread, vn__record calls vn__profile_forward(name) (the time
 * since the last op ends here) and vn_backward wraps each rule in
 * vn__profile_now() / vn__profile_backward(name, start). Work that records
 * no node but should not be charged to the next op (the optimizer steps)
 * calls vn__profile_forward with a name of its own. */
/* The progress hook: while this thread has a non-blocking gradient
 * all-reduce in flight (engine/dist/dist_reducer.c), fn is set, and long
 * computations call vn__progress() now and then: vn_backward after each
 * node, vn__sgemm between slices of a large product. Open MPI moves a
 * non-blocking collective's data only inside MPI calls (no progress
 * thread), so without these calls the transfer waits for the backward's
 * end. Never called inside an OpenMP parallel region. */
extern _Thread_local void (*vn__progress_fn)(void *ud);
extern _Thread_local void *vn__progress_ud;
static inline void vn__progress(void)
{
    if (vn__progress_fn) vn__progress_fn(vn__progress_ud);
}

/* Row-by-row handover of a gradient (vn_tensor.grad_rows). A backward rule
 * about to compute input i's whole contribution `part` (CPU, contiguous, the
 * input's shape) with one vn__sgemm whose C is part calls
 * vn__grad_rows_watch(n, i, part); when that input is a hooked leaf and this
 * node is the last to feed its gradient, the watch is on (true) until
 * vn__grad_rows_unwatch(), and vn__sgemm computes C by rows in slices
 * (vnm__sddmm: dvalues by row blocks), calling vn__grad_rows_done(lo, hi)
 * after each. A rule that computes part
 * itself calls vn__grad_rows_done(0, rows) when it is complete. Changes no
 * number: the hook only reads. */
bool vn__grad_rows_watch(vn_node *n, int i, const float *part);
bool vn__grad_rows_watching(void);
void vn__grad_rows_done(int64_t lo, int64_t hi);
void vn__grad_rows_unwatch(void);

extern _Thread_local bool vn__profiling;
double vn__profile_now(void);
void vn__profile_forward(const char *op);
void vn__profile_backward(const char *op, double start);
void vn__profile_mark(void);
/* If any of the inputs needs a gradient, create a node for `out`, retain the
 * inputs in it and return it (for the caller to fill saved and saved_state);
 * otherwise return NULL and record nothing. Out of memory, it returns NULL
 * and marks `out` (lost_grad_fn), so that a backward reaching `out` fails
 * with VN_ERR_MEMORY instead of dropping the gradient without a word. */
vn_node *vn__record(vn_tensor *out, const char *name, vn_backward_fn backward,
                    int ninputs, const vn_tensor *const *inputs);
/* Whether input i of node n wants a gradient. */
bool vn__input_needs_grad(const vn_node *n, int i);
/* Add g (takes ownership) into the gradient of input i of n. g may have the
 * broadcast shape; it is summed down to the input's shape here. It must be
 * on the input's device (VN_ERR_DEVICE otherwise, for the first gradient
 * too: a backward rule that built it on the wrong device is refused). */
vn_status vn__accum(vn_node *n, int i, vn_tensor *g);
/* vn__accum of d[i] into input i for i < n, skipping NULLs (gradients not
 * wanted); after a failure the remaining ones are released. */
vn_status vn__accum_all(vn_node *node, int n, vn_tensor **d);
/* Whether the rule running now may overwrite gout, the gradient the walk
 * handed it: nothing else holds gout or its storage, and it is contiguous f32
 * on the CPU from offset 0. A rule computing its input's gradient element by
 * element (or row by row) from gout can then write it into gout and pass
 * gout on (vn__accum(n, i, vn_tensor_retain(gout))): no new tensor, no
 * copy, the same numbers. */
bool vn__grad_writable(const vn_tensor *gout);

/* ---- loops --------------------------------------------------------------- */

/* Parallelise a loop over `work` scalar operations only when it pays. */
#define VN_OMP_MIN_WORK 32768
/* A pass that streams memory at about one operation per element (add, mul,
 * relu, a bias row, column sums) stays on one thread below this many
 * elements: waking the sleeping second thread (OMP_WAIT_POLICY=passive, as
 * `venom` ran when this was measured; it now spins ~1 ms first, lua/main.c,
 * so the limit may be on the safe side) costs more than the pass. On the 2-core Zen 4 VM, relu over
 * 131,072 floats took 12 µs on one thread and 20-25 µs on two. */
#define VN_OMP_MIN_STREAM 262144

/* Apply a statement to every dtype: VN_DTYPE_SWITCH(d, T, stmt) runs stmt
 * with T typedef'd to the C type of d. */
#define VN_DTYPE_SWITCH(d, T, ...)                  \
    switch (d) {                                    \
    case VN_F32: { typedef float T; __VA_ARGS__; } break;   \
    case VN_I32: { typedef int32_t T; __VA_ARGS__; } break; \
    case VN_I64: { typedef int64_t T; __VA_ARGS__; } break; \
    case VN_U8: { typedef uint8_t T; __VA_ARGS__; } break;  \
    case VN_BF16: case VN_F16: break; /* refused by vn__check */ \
    }

/* 16-bit floats on the CPU (storage and conversion only), round to nearest
 * even; NaN stays NaN. */
uint16_t vn__f32_to_bf16(float x);
float vn__bf16_to_f32(uint16_t h);
uint16_t vn__f32_to_f16(float x);
float vn__f16_to_f32(uint16_t h);

#define VN_F32_PTR(t) ((float *)vn_tensor_data(t))

/* The row side of the sparse–dense transformation (engine/rows.c), shared
 * by the MoE dispatch, index_select's gradient and the activation-sparse
 * ops. Rows of `width` floats, row k of the dense block ↔ row idx[k] of
 * the full matrix (idx entries in range: the caller checked them), each
 * times w[k] (w NULL: 1).
 * gather: dst[k, :] = w[k] · src[idx[k], :], k in [0, m).
 * scatter-add: dst[idx[k], :] += w[k] · src[k, :], in the order of k, so
 * repeated indices add up the same way on every run and thread count. */
void vn__gather_rows_f32(float *dst, const float *src, const int64_t *idx, const float *w, int64_t m,
                         int64_t width);
void vn__scatter_add_rows_f32(float *dst, const float *src, const int64_t *idx, const float *w, int64_t m,
                              int64_t width);
/* The scatter-add of a sum built without zeroing dst first: dst[idx[k], :]
 * = src[k, :] where seen[idx[k]] is 0 (the row's first contribution: copied,
 * whatever dst held), += where it is 1. The indices must be distinct; seen
 * is read only (the caller marks the rows it has written). */
void vn__scatter_rows_first_f32(float *dst, const float *src, const int64_t *idx, int64_t m, int64_t width,
                                const uint8_t *seen);
/* The m entries of a 1-d i32/i64 index tensor (any layout) as a malloc'd
 * array for the row loops (free() it); NULL and the error set when out of
 * memory. */
int64_t *vn__index_list(const vn_tensor *idx);

/* Rows shared by an op and the fused decoder (engine/decode.c), one copy
 * each so that both give the same bits. LayerNorm of one row x (D values):
 * y = (x − mean)/σ ⊙ g + b (g, b may be NULL), stats = {mean, 1/σ}
 * (engine/ops_transformer.c). The last position's causal self-attention
 * over T positions of one sequence whose qkv row t, feature f sits at
 * qkv[t·st_t + f] (3C features: q | k | v) → y (C values)
 * (engine/attention_decode.c). */
void vn__layer_norm_row(const float *x, const float *g, const float *b, int64_t D, double eps,
                        float *y, float *stats);
void vn__attention_last_row(const float *qkv, int64_t st_t, int64_t T, int64_t C, int64_t n_head,
                            float *y);

#endif
