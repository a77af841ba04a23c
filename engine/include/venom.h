/* venom.h — public C API of libvenom, a small tensor and autograd engine.
 *
 * Usable on its own from C (no Lua involved): link with
 * `pkg-config --cflags --libs venom` (add --static for libvenom.a) or the
 * CMake target venom::venom from find_package(venom). To run Lua scripts
 * from C on the same tensors, see venom_lua.h (libvenom_lua).
 * tutorials/04-embedding-in-c shows both.
 *
 * Conventions (they hold for every function below unless it says otherwise):
 *
 *  - Errors. Functions returning vn_status return VN_OK on success; functions
 *    returning a pointer return NULL on failure. Either way a message naming
 *    what was expected and what was found is stored per thread and read with
 *    vn_last_error(), and the status with vn_last_status() (what a
 *    NULL-returning function would have returned). The library never aborts,
 *    exits or longjmps, whatever the input.
 *  - Ownership. Every function that returns a vn_tensor* hands the caller one
 *    reference; drop it with vn_tensor_release(), which frees the tensor when
 *    its last reference goes. vn_tensor_retain() adds one. Tensor arguments
 *    are borrowed: the callee retains what it keeps (the autograd tape keeps
 *    the inputs an op needs for backward), so the caller may release its
 *    reference right after a call. Views (reshape, transpose, narrow...)
 *    share storage with their source; the storage lives until its last
 *    tensor is released. Pointers into a tensor (vn_tensor_data, _shape,
 *    _strides) stay valid while the tensor lives; vn_tensor_grad is borrowed
 *    until the gradient is replaced or dropped.
 *  - Bad handles. A NULL tensor argument is a VN_ERR_ARG error (the message
 *    says "NULL"), except where a parameter says NULL is allowed (a bias, a
 *    gradient seed); accessors that cannot return a status give a neutral
 *    value for NULL (0, NULL, false) and set the error too.
 *    vn_tensor_free() drops a tensor's storage now while the handle stays:
 *    any later use of it in an op is a VN_ERR_STATE error ("freed"), and so
 *    is a backward through a graph whose saved input was freed; shape and
 *    dtype stay readable. Using a tensor after its last vn_tensor_release()
 *    is a use-after-free the library cannot detect: undefined behaviour.
 *  - Devices. A tensor lives on the CPU (host memory) or on the CUDA device
 *    (VN_CUDA, device 0; see "devices" below). Creation functions make CPU
 *    tensors unless they take a device; vn_to_device moves data. An op's
 *    tensor arguments must all be on one device (VN_ERR_DEVICE names both
 *    devices otherwise), except that a 0-d CPU tensor (a scalar) may join
 *    CUDA tensors; the result is on that device. Every op of the sections
 *    views, elementwise, reductions, linear algebra, softmax and losses and
 *    optimizer steps runs on CUDA tensors too (with autograd), as do
 *    item/get/set, copy_ and fill_ (whose destination must then be
 *    contiguous: VN_ERR_DEVICE otherwise), vn_save and vn_tensor_copy_out.
 *    A few refuse CUDA tensors (VN_ERR_DEVICE) and say so in their comments:
 *    MoE rows, the graph's SAGA stages, dynamic sparsity, images.
 *    Without a CUDA build or device, vn_cuda_device_count() is 0
 *    and moving to VN_CUDA is a VN_ERR_DEVICE error.
 *  - Indices are 0-based. Negative dims count from the end (-1 = last).
 *  - dtypes: VN_F32 (default, all arithmetic), VN_I32, VN_I64 (indices,
 *    class targets), VN_U8 (masks, raw image bytes), and the 16-bit floats
 *    VN_BF16 and VN_F16, which are for storage and conversion (create, copy,
 *    view, vn_to_dtype, item/get/set, save/load): other ops refuse them with
 *    VN_ERR_DTYPE, and bf16 arithmetic on the GPU happens inside matmul under
 *    autocast (vn_set_autocast). Arithmetic ops need both operands of the
 *    same dtype; use vn_to_dtype() to convert.
 *  - Broadcasting follows NumPy: shapes are aligned at the right; a dim of
 *    size 1 stretches to the other's size.
 *  - Autograd. An op records itself on the tape when grad mode is on and
 *    some input requires a gradient. vn_backward() walks the tape in reverse
 *    topological order and accumulates (+=) into the .grad of leaf tensors;
 *    saved tensors are freed afterwards, so a second backward through the same
 *    graph is an error.
 *  - Threads. The library may be called from several threads at once under
 *    these rules:
 *      - A tensor that some thread writes (in-place ops, fill_/copy_/set,
 *        optimizer steps, vn_tensor_free, set_requires_grad/set_grad/
 *        zero_grad, a backward that accumulates into its .grad) must not be
 *        used by any other thread at the same time.
 *      - A tensor that no thread writes may be read by many threads at once,
 *        as an op input (shared weights for inference, say): reference counts
 *        are atomic, so retaining, viewing and releasing it concurrently is
 *        safe. If it requires grad, each thread's backward would write its
 *        .grad: compute under grad mode off, or serialize the backwards.
 *      - A graph (the tensors an op chain recorded) is walked by one thread:
 *        vn_backward on graphs that share recorded nodes must not overlap. A
 *        graph built on one thread may be walked on another later.
 *      - Grad mode (vn_set_grad_enabled) and the error state (vn_last_error,
 *        vn_last_status) are per thread; a new thread starts with grad mode on.
 *      - The RNG is one stream per process behind a lock: concurrent draws are
 *        safe and each number of the stream goes to one thread only, but
 *        which thread gets which depends on timing. Seed and draw from one
 *        thread for repeatable runs.
 *      - The caching allocator is shared behind a lock; vn_memory_stats and
 *        vn_empty_cache count and free the blocks of all threads.
 *    Large ops also use OpenMP threads internally (OpenBLAS is set to one
 *    thread and the engine splits products over OpenMP's). Run the host
 *    program with GOMP_SPINCOUNT=30000 in its environment (the venom
 *    executable sets it itself): an idle thread then spins ~1 ms before it
 *    sleeps, which was measured faster than both OMP_WAIT_POLICY=passive
 *    and libgomp's default (bench/RESULTS.md).
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

/* printf format checking where the compiler has it (the header is plain C11
 * and C++ otherwise). */
#if defined(__GNUC__) || defined(__clang__)
#define VN_PRINTF_LIKE(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define VN_PRINTF_LIKE(fmt, args)
#endif

typedef enum {
    VN_OK = 0,
    VN_ERR_ARG,    /* an argument is out of range, NULL, or of the wrong kind */
    VN_ERR_SHAPE,  /* shapes do not match or do not broadcast */
    VN_ERR_DTYPE,  /* wrong dtype for this op */
    VN_ERR_MEMORY, /* out of memory */
    VN_ERR_IO,     /* a file could not be opened, read or written */
    VN_ERR_FORMAT, /* a file is malformed (bad magic, truncated, ...) */
    VN_ERR_STATE,  /* the call is not valid now (freed tensor, released graph) */
    VN_ERR_SCRIPT, /* a Lua script failed (libvenom_lua, venom_lua.h): syntax or runtime error */
    VN_ERR_DEVICE  /* wrong or mixed devices, no CUDA device, or a failed CUDA call */
} vn_status;

/* bf16: bfloat16 (1 sign, 8 exponent, 7 mantissa bits); f16: IEEE binary16.
 * Conversions from f32 round to nearest even. */
typedef enum { VN_F32 = 0, VN_I32, VN_I64, VN_U8, VN_BF16, VN_F16 } vn_dtype;

typedef enum { VN_CPU = 0, VN_CUDA } vn_device;

typedef enum { VN_REDUCE_MEAN = 0, VN_REDUCE_SUM, VN_REDUCE_NONE } vn_reduction;

typedef struct vn_tensor vn_tensor;

/* ---- errors and library state ------------------------------------------ */

/* The message of the last failed call on this thread ("" if none). The
 * string is owned by the library and valid until the next call on this
 * thread that fails (copy it to keep it). */
const char *vn_last_error(void);
/* The status of the last failed call on this thread (VN_OK if none): what a
 * function that returned NULL would have returned as a vn_status. Like
 * errno, successful calls leave it alone: read it right after a failure. */
vn_status vn_last_status(void);
/* Reset this thread's error state: vn_last_error() gives "" and
 * vn_last_status() VN_OK. */
void vn_clear_error(void);
/* Store a printf-style message and status for vn_last_error() /
 * vn_last_status() and return s (VN_OK is stored as VN_ERR_ARG). For
 * libraries built on venom (the Lua bridge) that report through it. */
vn_status vn_set_error(vn_status s, const char *fmt, ...) VN_PRINTF_LIKE(2, 3);
/* Name of a status code, e.g. "shape error". */
const char *vn_status_name(vn_status s);
/* Name of a dtype: "f32", "i32", "i64", "u8", "bf16", "f16". */
const char *vn_dtype_name(vn_dtype d);
/* Size of one element in bytes. */
size_t vn_dtype_size(vn_dtype d);

/* Seed the engine RNG (xoshiro256**; normals by Box–Muller). Every random
 * choice (rand, randn, randperm, dropout) draws from it, so a fixed seed gives
 * the same run. One stream per process, behind a lock: threads drawing at
 * the same time each get distinct numbers, but which thread gets which
 * depends on timing. The state can be saved and restored (4 × uint64).
 * Errors: VN_ERR_ARG for a NULL state, or an all-zero one (a fixed point of
 * xoshiro that no seed produces). */
void vn_manual_seed(uint64_t seed);
vn_status vn_rng_get_state(uint64_t state[4]);
vn_status vn_rng_set_state(const uint64_t state[4]);

/* Grad mode of the calling thread (each thread starts with it on). Returns
 * the previous setting. While off, no op is recorded. */
bool vn_set_grad_enabled(bool enabled);
bool vn_is_grad_enabled(void);

/* Caching allocator: bytes held by live tensors, and bytes cached in the free
 * lists for reuse. vn_empty_cache() returns the cached bytes to the system. */
void vn_memory_stats(size_t *in_use, size_t *cached);
void vn_empty_cache(void);

/* ---- devices (CUDA) ------------------------------------------------------ */

/* Number of CUDA devices usable by venom: 0 when the build has no CUDA
 * (VENOM_CUDA=OFF or no toolkit), there is no driver or no device. venom
 * uses device 0. Never an error. */
int vn_cuda_device_count(void);
bool vn_cuda_is_available(void);
/* "NVIDIA H200 (sm_90, 139.8 GiB)"-style description of device 0 into buf
 * (n bytes); VN_ERR_DEVICE without a device. */
vn_status vn_cuda_device_name(char *buf, size_t n);
/* Waits until every queued GPU operation has finished (kernels run
 * asynchronously; copies to the host and vn_tensor_item wait by
 * themselves). Reports a failure of a kernel queued earlier. */
vn_status vn_cuda_synchronize(void);
/* The CUDA caching allocator's counters (bytes held by live tensors, bytes
 * cached for reuse) and vn_cuda_empty_cache(), which returns cached blocks
 * to the driver. Zeros without CUDA. */
void vn_cuda_memory_stats(size_t *in_use, size_t *cached);
void vn_cuda_empty_cache(void);

/* "cpu" or "cuda". */
const char *vn_device_name(vn_device d);
/* Device of t (VN_CPU for NULL, with an error set). */
vn_device vn_tensor_device(const vn_tensor *t);
/* A copy of t on `device` (contiguous), or t itself (a new reference) when
 * it is there already. Differentiable: the gradient goes back to t's
 * device. Errors: VN_ERR_DEVICE when CUDA is not available (the message
 * says why), VN_ERR_MEMORY, VN_ERR_ARG for an unknown device. */
vn_tensor *vn_to_device(const vn_tensor *t, vn_device device);

/* Autocast for matmul and linear on CUDA tensors (per thread, like grad
 * mode): VN_BF16 or VN_F16 run the GEMM on tensor cores with 16-bit inputs
 * (converted from the f32 operands on the fly, round to nearest even) and
 * f32 accumulation and output, while parameters, gradients and every other
 * op stay f32 (mixed precision with f32 master weights, Micikevicius et al.
 * 2018). VN_F32 (the default) turns it off. The backward of a matmul
 * recorded under autocast runs its GEMMs with the same precision. CPU
 * matmuls are not affected. Returns the previous setting; VN_ERR_DTYPE
 * (and no change) for another dtype. */
vn_status vn_set_autocast(vn_dtype dtype, vn_dtype *previous);
vn_dtype vn_get_autocast(void);
/* f32 GEMMs on CUDA may use TF32 tensor cores (10-bit mantissa inputs,
 * f32 accumulation) when enabled; off by default. Per process. Returns the
 * previous setting. */
bool vn_cuda_set_allow_tf32(bool allow);

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
/* The same on a given device. On VN_CPU these are vn_empty/vn_full/
 * vn_rand/vn_randn. On VN_CUDA memory comes from the caching allocator and
 * random numbers from a counter-based generator on the GPU: one key drawn
 * from the engine RNG per call, element i a function of (key, i) only, so
 * vn_manual_seed makes GPU runs repeatable too (the numbers differ from the
 * CPU's). Errors: those of vn_empty, plus VN_ERR_DEVICE. */
vn_tensor *vn_empty_on(vn_device device, vn_dtype dtype, int ndim, const int64_t *shape);
vn_tensor *vn_full_on(vn_device device, vn_dtype dtype, int ndim, const int64_t *shape,
                      double value);
vn_tensor *vn_rand_on(vn_device device, int ndim, const int64_t *shape);
vn_tensor *vn_randn_on(vn_device device, int ndim, const int64_t *shape);
/* i64 random permutation of 0..n-1 (Fisher–Yates on the engine RNG). */
vn_tensor *vn_randperm(int64_t n);
/* Integers drawn uniformly from [low, high) (each value equally likely:
 * draws are rejected rather than folded with a modulo bias), from the
 * engine RNG, so vn_manual_seed repeats them. dtype i64, i32, u8 or f32;
 * the range must fit the dtype (for f32 within ±2^24, where every integer
 * is exact). Errors: VN_ERR_ARG unless low < high and the range fits,
 * VN_ERR_DTYPE for bf16/f16, and those of vn_empty. */
vn_tensor *vn_randint(int64_t low, int64_t high, vn_dtype dtype, int ndim, const int64_t *shape);
/* A new tensor of t's shape filled with 0, 1 or value (converted as
 * vn_tensor_fill_ does), of `dtype` on `device`: pass vn_tensor_dtype(t)
 * and vn_tensor_device(t) for t's own (PyTorch's zeros_like, ones_like,
 * full_like). t is only read for its shape. Errors: those of vn_empty_on,
 * VN_ERR_ARG for a NULL t, VN_ERR_STATE for a freed one. */
vn_tensor *vn_zeros_like(const vn_tensor *t, vn_dtype dtype, vn_device device);
vn_tensor *vn_ones_like(const vn_tensor *t, vn_dtype dtype, vn_device device);
vn_tensor *vn_full_like(const vn_tensor *t, double value, vn_dtype dtype, vn_device device);
/* The n × m identity: 1 at [i, i], 0 elsewhere (n = m for a square one).
 * VN_ERR_ARG for a negative size. */
vn_tensor *vn_eye(int64_t n, int64_t m, vn_dtype dtype);
/* `steps` evenly spaced points from start to end, both included (PyTorch's
 * linspace): point i = start + i·(end − start)/(steps − 1), computed from
 * the nearer end so that the last point is exactly end; steps = 1 gives
 * [start], steps = 0 an empty tensor. Integer dtypes truncate each point
 * toward zero. VN_ERR_ARG for a negative steps or a start or end that is
 * not finite. */
vn_tensor *vn_linspace(double start, double end, int64_t steps, vn_dtype dtype);

/* ---- tensor lifetime and properties ------------------------------------- */

/* Add a reference to t and return t (NULL gives NULL, no error). Safe from
 * several threads on the same tensor. */
vn_tensor *vn_tensor_retain(vn_tensor *t);
/* Drop one reference; the last one frees the tensor (and its storage, once
 * no view shares it). NULL is a no-op. Using t after its last reference is
 * gone is undefined behaviour (the library cannot tell). */
void vn_tensor_release(vn_tensor *t);
/* Drop this tensor's storage, gradient and graph node now, without waiting
 * for its references to go (idempotent; NULL is a no-op). The handle stays
 * valid until released: ops on it fail with VN_ERR_STATE, vn_tensor_data
 * gives NULL, shape/dtype/ndim/numel still answer. Views made from t before
 * keep the storage alive. For holders of a tensor that is also referenced
 * elsewhere (Lua's garbage collector) to give memory back at once. */
void vn_tensor_free(vn_tensor *t);
/* Whether t was freed with vn_tensor_free (true for NULL). */
bool vn_tensor_is_freed(const vn_tensor *t);

/* Metadata; readable after vn_tensor_free. For NULL: ndim 0, shape and
 * strides NULL, numel 0, dtype VN_F32, is_contiguous false, each with a
 * VN_ERR_ARG error set. shape/strides point to ndim entries owned by t. */
int vn_tensor_ndim(const vn_tensor *t);
const int64_t *vn_tensor_shape(const vn_tensor *t);
const int64_t *vn_tensor_strides(const vn_tensor *t); /* in elements */
int64_t vn_tensor_numel(const vn_tensor *t);
vn_dtype vn_tensor_dtype(const vn_tensor *t);
bool vn_tensor_is_contiguous(const vn_tensor *t);
/* Pointer to element [0,...,0] in host memory, laid out by the strides; the
 * caller may read and write through it (no copy). NULL with VN_ERR_ARG for
 * NULL, VN_ERR_STATE for a freed tensor, VN_ERR_DEVICE for a CUDA tensor
 * (copy it to the CPU with vn_to_device first). */
void *vn_tensor_data(const vn_tensor *t);
/* Writes "(2, 3)"-style text of the shape into buf (n bytes, truncated to
 * fit) and returns buf; "" if buf is NULL or n is 0, "(invalid shape)" for
 * a NULL shape or ndim out of range. */
const char *vn_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

/* Value of a one-element tensor as double. VN_ERR_SHAPE if numel != 1;
 * VN_ERR_ARG for a NULL out (as for every out pointer below). */
vn_status vn_tensor_item(const vn_tensor *t, double *out);
/* Element at a multi-index (ndim entries, 0-based) as double / set from
 * double. VN_ERR_ARG for an index out of range.
 *
 * In-place writes (set, copy_, fill_) convert values to the tensor's dtype
 * as vn_to_dtype does (toward zero, saturating, NaN → 0); the Lua binding
 * refuses numbers an integer dtype cannot hold exactly before calling them.
 * They return VN_ERR_STATE for a leaf that requires grad while grad mode is
 * on (write under vn_set_grad_enabled(false)), and they mark the storage
 * written, so a backward that needs the old values fails with VN_ERR_STATE
 * instead of computing a wrong gradient. */
vn_status vn_tensor_get(const vn_tensor *t, const int64_t *index, double *out);
vn_status vn_tensor_set(vn_tensor *t, const int64_t *index, double value);
/* Copies all elements, in row-major order, into buf of `nbytes` bytes
 * (numel × dtype size; VN_ERR_ARG if it differs). */
vn_status vn_tensor_copy_out(const vn_tensor *t, void *buf, size_t nbytes);
/* In place: dst[...] = src (broadcast to dst's shape, converted to dst's
 * dtype). Not recorded by autograd (see the in-place rules above). */
vn_status vn_tensor_copy_(vn_tensor *dst, const vn_tensor *src);
/* In place: every element = value. Not recorded by autograd (see the
 * in-place rules above). */
vn_status vn_tensor_fill_(vn_tensor *t, double value);

/* ---- autograd ----------------------------------------------------------- */

/* Mark a leaf tensor as a parameter whose gradient backward accumulates.
 * VN_ERR_DTYPE for a non-f32 tensor; VN_ERR_ARG for a non-leaf. */
vn_status vn_tensor_set_requires_grad(vn_tensor *t, bool requires_grad);
/* Whether t needs a gradient (a parameter, or computed from one while grad
 * mode was on); false for NULL. */
bool vn_tensor_requires_grad(const vn_tensor *t);
/* Whether t was not produced by a recorded op; false for NULL. */
bool vn_tensor_is_leaf(const vn_tensor *t);
/* Borrowed pointer to the accumulated gradient (contiguous f32, t's shape),
 * or NULL if none yet (and for NULL t). Valid until the gradient is
 * replaced, dropped or t freed; retain it to keep it longer. */
vn_tensor *vn_tensor_grad(const vn_tensor *t);
/* Replace the gradient (NULL clears it). Shape must match; the tensor is
 * retained (or copied if not contiguous). */
vn_status vn_tensor_set_grad(vn_tensor *t, vn_tensor *grad);
/* Drop the gradient (the next backward starts from zero). NULL is a no-op. */
void vn_tensor_zero_grad(vn_tensor *t);
/* Name of the op that produced t ("matmul", ...); NULL for a leaf or NULL. */
const char *vn_tensor_grad_fn_name(const vn_tensor *t);

/* Back-propagate from `root`. `grad` is dL/droot (same shape); NULL means 1
 * and requires root to have one element (VN_ERR_SHAPE otherwise).
 * Errors: VN_ERR_ARG if root does not require grad, VN_ERR_STATE if the
 * graph was already released by an earlier backward or an input it saved
 * was freed since (checked before any gradient is touched). */
vn_status vn_backward(vn_tensor *root, const vn_tensor *grad);
/* A new tensor sharing t's storage, cut from the graph. */
vn_tensor *vn_detach(const vn_tensor *t);

/* ---- views and copies (differentiable) ---------------------------------- */

/* Errors common to this section: VN_ERR_ARG for a dim or position out of
 * range (the message gives the valid range) or a NULL shape/dims array. */

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
/* A copy converted to dtype (f32→int truncates toward zero and saturates at
 * the integer type's range; NaN becomes 0). Differentiable
 * only f32→f32. */
vn_tensor *vn_to_dtype(const vn_tensor *t, vn_dtype dtype);
/* Concatenate n tensors along dim (other dims equal). */
vn_tensor *vn_cat(vn_tensor *const *ts, int n, int dim);
/* Stack n tensors of one shape, dtype and device along a new dim `dim`
 * (0..ndim, negative from the end of the result's dims): n tensors of
 * shape (a, b) stacked at dim 1 give (a, n, b). A new contiguous tensor,
 * made of vn_unsqueeze and vn_cat, so the gradient of each input is its
 * slice of the output's. VN_ERR_ARG for n < 1 or a bad dim, VN_ERR_SHAPE
 * (naming both shapes) when the shapes or dtypes differ. */
vn_tensor *vn_stack(vn_tensor *const *ts, int n, int dim);
/* The entries index[0], index[1], ... of t along dim (a 1-D i32/i64 index,
 * 0-based, repeats allowed): for dim 0, rows of t. VN_ERR_ARG for an index
 * out of range, VN_ERR_DTYPE for another index dtype. */
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
 * 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), computed as x / (1 + e^(−2u))
 * (no cancelling for negative x). Below −10 it is 0 and above 10 x (its
 * gradient 0 and 1), so gelu(−inf) = 0, gelu(inf) = inf; NaN stays NaN. */
vn_tensor *vn_gelu(const vn_tensor *t);
vn_tensor *vn_tanh(const vn_tensor *t);
vn_tensor *vn_sigmoid(const vn_tensor *t);
/* min(max(t, lo), hi); pass NAN for no bound. Gradient 1 inside, 0 outside.
 * f32, i32, i64 or u8; an integer clamp compares in its own type, so its
 * results are exact, and each bound must be a whole number the dtype holds
 * (VN_ERR_ARG for 0.5, or 300 for u8). lo > hi gives hi everywhere. */
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

/* Statistics (f32, CPU or CUDA; gradients through the ops they are made of).
 * var: Σ(x − mean)² / (n − correction) over dim (or all elements), n the
 * number of elements reduced; correction 1 is Bessel's (the unbiased
 * sample variance, PyTorch's default), 0 the population variance; n ≤
 * correction gives inf or nan, as in PyTorch. std = √var. VN_ERR_ARG for a
 * negative or NaN correction or a bad dim. */
vn_tensor *vn_var(const vn_tensor *t, int dim, double correction, bool keepdim);
vn_tensor *vn_var_all(const vn_tensor *t, double correction);
vn_tensor *vn_std(const vn_tensor *t, int dim, double correction, bool keepdim);
vn_tensor *vn_std_all(const vn_tensor *t, double correction);
/* Vector p-norm over dim (or all elements): p = 1 (Σ|x|), 2 (√Σx²) or
 * INFINITY (max|x|); VN_ERR_ARG for another p. The 2-norm's gradient is
 * x/‖x‖ and 0 at the zero vector; the inf-norm's goes to the first largest
 * |x|. */
vn_tensor *vn_norm(const vn_tensor *t, double p, int dim, bool keepdim);
vn_tensor *vn_norm_all(const vn_tensor *t, double p);

/* ---- ordering ------------------------------------------------------------ */

/* Sort along dim (CPU; f32, i32, i64, u8): *values has t's shape and dtype,
 * *indices (i64, 0-based) says where each value was along dim, so that
 * values = gather(t, dim, indices). Ascending unless descending. NaN sorts
 * as the largest value; equal values keep their order (stable), so the
 * result is the same on every run. A 0-d tensor sorts as one element.
 * f32 values carry a gradient: dL/dt gets dL/dvalues at the indices. Both
 * outputs are new references (NULL on error). Errors: VN_ERR_ARG (NULL
 * outputs, bad dim), VN_ERR_DEVICE (CUDA), VN_ERR_DTYPE (bf16/f16). */
vn_status vn_sort(const vn_tensor *t, int dim, bool descending, vn_tensor **values, vn_tensor **indices);
/* The k largest (or smallest, !largest) along dim, in order (largest first
 * when largest), as vn_sort's first k; ties go to the lower index. dim has
 * size k in both outputs. VN_ERR_ARG unless 0 <= k <= size of dim. */
vn_status vn_topk(const vn_tensor *t, int64_t k, int dim, bool largest, vn_tensor **values,
                  vn_tensor **indices);

/* ---- linear algebra ------------------------------------------------------ */

/* Matrix product (f32, OpenBLAS sgemm).
 *   (n,k)·(k,m) → (n,m); 1-D operands are treated as a row / column vector
 *   and that dim is dropped from the result; 3-D and more: batched over the
 *   leading dims, which broadcast. VN_ERR_SHAPE names both shapes if the
 *   inner dims differ. Transposed views are passed to BLAS without a copy. */
vn_tensor *vn_matmul(const vn_tensor *a, const vn_tensor *b);
/* y = x·wᵀ + b: x (..., in), w (out, in), bias (out) or NULL → (..., out). */
vn_tensor *vn_linear(const vn_tensor *x, const vn_tensor *w, const vn_tensor *bias);

#include "venom/sparse.h" /* V:N:M (VENOM) and CSR sparse matrices */

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

/* ---- transformer building blocks ----------------------------------------- */

/* Token embedding lookup: out[..., :] = weight[ids[...], :].
 * weight (V, D) f32, ids (...) i32/i64 of 0-based rows (any shape, 0-d
 * included) → (..., D), CPU or CUDA (both on one device). Differentiable in
 * weight: backward adds each row of dL/dout into the row of weight it came
 * from, in position order on either device (deterministic, the same bits).
 * Errors: VN_ERR_SHAPE for a weight that is not 2-D or an ids tensor with
 * VN_MAX_DIMS dims (no room for D); VN_ERR_DTYPE; VN_ERR_DEVICE; VN_ERR_ARG
 * for an id outside 0..V-1 (the message gives its flat position and value). */
vn_tensor *vn_embedding(const vn_tensor *weight, const vn_tensor *ids);

/* Layer normalization over the last dim (Ba, Kiros & Hinton 2016):
 *   y = (x − mean) / sqrt(var + eps) · gamma + beta,
 * with mean and the biased variance var taken over the last dim of x
 * (..., D) f32. gamma and beta are (D) f32, or NULL for 1 and 0. CPU or
 * CUDA (f32 statistics; all on one device). Differentiable in x, gamma and
 * beta (their gradients sum over the leading dims). Errors: VN_ERR_SHAPE for
 * a 0-d x, an empty last dim (D = 0) or a gamma/beta that is not (D);
 * VN_ERR_DTYPE; VN_ERR_DEVICE; VN_ERR_ARG unless eps > 0 and finite. */
vn_tensor *vn_layer_norm(const vn_tensor *x, const vn_tensor *gamma, const vn_tensor *beta,
                         double eps);

/* Causal scaled dot-product attention (Vaswani et al. 2017), no dropout:
 *   out = softmax(q·kᵀ / sqrt(Dh) + mask) · v,
 * where mask is −inf above the diagonal, so query position t attends to key
 * positions 0..t only. q, k, v f32 of the same shape (B, H, T, Dh) — in
 * general (..., T, Dh) with ≥ 2 dims, the leading dims being independent
 * batches — → out of that shape. The softmax is fused with the mask (the
 * masked scores are never materialised) and taken of score − row max, so
 * it cannot overflow. The mask is exact for finite inputs; a NaN or inf in
 * a later position's k or v can still reach earlier rows (as 0 · NaN in
 * the products over a block of rows, as in a masked matmul). CPU: parallel
 * over the leading dims; each (batch, head) in AVX-512 register tiles where
 * the CPU has it, T ≤ 1024 and Dh a multiple of 16 (VENOM_NO_AVX512 set:
 * never), else with single-threaded GEMMs on a T × T score matrix of its
 * thread; only each row's max and 1/Σ exp, (..., T, 2), are kept for backward,
 * which recomputes the probabilities from them (as FlashAttention, Dao et
 * al. 2022, does) to give the gradients of q, k and v. CUDA:
 * FlashAttention-2 (Dao 2023) on bf16 tensor cores with f32 accumulation
 * (inputs rounded to bf16), saving the log-sum-exp per row, Dh = 32, 64 or
 * 128. Errors: VN_ERR_SHAPE naming the shapes when they differ or have < 2
 * dims; VN_ERR_DTYPE; VN_ERR_DEVICE (not all on one device); VN_ERR_ARG when
 * T or Dh exceeds BLAS's INT_MAX, or on CUDA another Dh; VN_ERR_MEMORY for
 * the per-thread T × T scratch. */
vn_tensor *vn_causal_attention(const vn_tensor *q, const vn_tensor *k, const vn_tensor *v);

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

/* The Adam/AdamW step for n parameters at once, all at the same step t:
 * param[i], grad[i], exp_avg[i], exp_avg_sq[i] as in vn_adam_step. Every
 * entry is checked before any is updated (the message names the index).
 * All CUDA: one kernel launch per chunk of up to 48 parameters; all CPU: one
 * parallel loop over all their elements (small tensors need no loop of their
 * own); mixed: vn_adam_step on each in turn. Same values as vn_adam_step. */
vn_status vn_adam_step_multi(int n, vn_tensor *const *param, const vn_tensor *const *grad,
                             vn_tensor *const *exp_avg, vn_tensor *const *exp_avg_sq, int64_t step,
                             double lr, double beta1, double beta2, double eps,
                             double weight_decay, bool decoupled);

/* ---- datasets ------------------------------------------------------------ */

/* Read an IDX file (MNIST/Fashion-MNIST format; gzip-compressed or plain,
 * detected by zlib). Returns a u8/i32/f32... tensor of the shape in its
 * header. Errors: VN_ERR_IO (missing file: the message names the path),
 * VN_ERR_FORMAT (bad magic, unsupported type code, truncated data; the
 * message gives expected and found byte counts). */
vn_tensor *vn_idx_load(const char *path);
/* The bytes of a file as a 1-D u8 tensor, decompressed when it is gzip
 * (zlib detects it; a plain file is read as it is): for text data sets
 * shipped as .gz. Errors: VN_ERR_IO (cannot open or read: the message names
 * the path and the system's reason), VN_ERR_FORMAT (a damaged gzip stream),
 * VN_ERR_ARG (over 4 GiB), VN_ERR_MEMORY. */
vn_tensor *vn_read_file(const char *path);

/* ---- checkpoints: safetensors files ------------------------------------- */

/* Named tensors plus string metadata: what a safetensors file holds
 * (https://github.com/huggingface/safetensors). For vn_save the caller fills
 * it with borrowed arrays; vn_load returns one that owns everything. */
typedef struct {
    int n;                          /* number of tensors */
    const char *const *names;       /* n unique names ("layers.1.weight") */
    vn_tensor *const *tensors;      /* n tensors */
    int n_meta;                     /* number of metadata pairs */
    const char *const *meta_keys;   /* n_meta unique keys */
    const char *const *meta_values; /* n_meta values */
} vn_tensor_map;

/* Writes the tensors of `m` (f32 as F32, i32 I32, i64 I64, u8 U8; any
 * layout, written row-major) and its metadata ("__metadata__") to `path` in
 * the safetensors format: an 8-byte little-endian header length, the JSON
 * header (padded with spaces to a multiple of 8 bytes), then the raw
 * little-endian data of each tensor in the order given. The same map always
 * gives the same bytes.
 * Atomic: the file is written under a temporary name in the same directory,
 * fsync'ed, renamed over `path`, and the directory fsync'ed; a crash at any
 * point leaves either the old file or the new one, never a mix (a killed
 * process can leave its temporary file, ".<name>.tmp-<pid>-<k>", behind;
 * the next save to the same path removes those whose process is gone,
 * kill(pid, 0) failing with ESRCH, and never those of a live process).
 * Errors: VN_ERR_ARG (NULL or duplicate names, the reserved name
 * "__metadata__", names or metadata that are not UTF-8, a freed tensor),
 * VN_ERR_DTYPE, VN_ERR_IO (the message names the path and the system error;
 * `path` is left untouched). */
vn_status vn_save(const char *path, const vn_tensor_map *m);

/* Reads a safetensors file. Tensors come in the order of their data in the
 * file, as new contiguous tensors (each read once, with pread, straight into
 * its storage: no second copy of the file in memory). The dtypes venom has
 * load as they are (F32, I32, I64, U8, BF16, F16); F64 loads converted to
 * f32, each value rounded to the nearest f32: magnitudes beyond f32's range
 * (about 3.4e38) become ±inf, those below its smallest subnormal ±0. Other
 * dtypes are refused. Free the result with vn_tensor_map_free; retain
 * a tensor to keep it longer.
 * Errors: VN_ERR_IO (missing or unreadable file), VN_ERR_FORMAT for every
 * malformed file, with the tensor and the numbers in the message: a file
 * shorter than 8 bytes, a header length beyond the file or above 100 MB,
 * malformed JSON, duplicate names, an unknown or unsupported dtype, a shape
 * of more than VN_MAX_DIMS dims or whose byte size differs from its
 * data_offsets, offsets past the data, overlapping, leaving gaps or leaving
 * trailing bytes, metadata values that are not strings. VN_ERR_MEMORY. */
vn_tensor_map *vn_load(const char *path);
/* Releases the map's tensors and strings. NULL-safe. */
void vn_tensor_map_free(vn_tensor_map *m);
/* The tensor called `name` (borrowed), or NULL (VN_ERR_ARG) if absent. */
vn_tensor *vn_tensor_map_get(const vn_tensor_map *m, const char *name);
/* The metadata value under `key`, or NULL (VN_ERR_ARG) if absent. */
const char *vn_tensor_map_meta(const vn_tensor_map *m, const char *key);

/* Mixture-of-Experts dispatch: row scatter-add, routing. */
#include "venom/moe.h"
#include "venom/transformer.h" /* bias + GELU */
#include "venom/dynamic.h" /* dynamic activation sparsity (SparDA / PIT) */
#include "venom/quant.h" /* BitNet b1.58 ternary layers and packed kernels */
/* Convolutions, pooling, batch normalisation, flatten. */
#include "venom/conv.h"
#include "venom/dist.h" /* collectives over MPI, data parallelism */
#include "venom/profile.h" /* per-op forward/backward timers */
#include "venom/shadow.h" /* the dense shadow of V:N:M pruning (SR-STE) */

#ifdef __cplusplus
}
#endif

#include "venom/image.h"
#endif
