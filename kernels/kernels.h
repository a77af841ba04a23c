/* kernels.h — the C ABI of the CUDA backend (the .cu files in kernels/), called by the
 * engine's device dispatch (engine/device.c and the ops). Nothing here knows
 * about tensors or autograd: arguments are raw device pointers, element
 * counts and strides (in elements), dtypes as vn_dtype.
 *
 * Conventions:
 *  - Every function returning int returns 0 on success and nonzero on
 *    failure, after storing a message for vnk_error() that names the kernel
 *    or CUDA call and CUDA's own error string ("cudaMalloc(4096 bytes):
 *    out of memory"). Every CUDA runtime/cuBLAS call is checked, and so is
 *    cudaGetLastError() after every launch.
 *  - All work goes to one stream per process (the legacy default stream), so
 *    calls are ordered; only copies to the host synchronize.
 *  - Pointers marked "dev" are device memory from vnk_alloc; "host" is host
 *    memory.
 *  - Empty work (n == 0) launches nothing and succeeds.
 *  - Arguments come destination first, as in Torch7's TH and llm.c: the
 *    output pointer(s), then the inputs, then sizes and options. A pointer's
 *    dtype and leading dimension follow it.
 *  - Without CUDA (VENOM_CUDA=OFF or no toolkit), kernels/stub.c provides
 *    these symbols: vnk_device_count() is 0 and everything else fails with
 *    "venom was built without CUDA".
 */
#ifndef VENOM_KERNELS_H
#define VENOM_KERNELS_H

#include "venom.h"
#include "attention_tile.h" /* att_layout */
#include "conv_index.h" /* conv_geom */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- runtime ------------------------------------------------------------- */

/* Number of usable CUDA devices; 0 when there is no device, no driver, or no
 * CUDA in the build (never an error). Device 0 is the one venom uses. */
int vnk_device_count(void);
/* Message of this thread's last failure. */
const char *vnk_error(void);
/* Writes "NVIDIA H200 (sm_90, 139.8 GiB)"-style text into buf. */
int vnk_device_name(char *buf, size_t n);
/* Waits for all queued work; reports an asynchronous kernel failure. */
int vnk_synchronize(void);

/* Caching device allocator: sizes are rounded up (power-of-two bins from
 * 512 bytes) and freed blocks wait in per-bin free lists, so a training step
 * in steady state never calls cudaMalloc/cudaFree. When cudaMalloc fails the
 * cache is emptied and the allocation retried once. NULL on failure. */
void *vnk_alloc(size_t nbytes);
void vnk_free(void *dev, size_t nbytes);
void vnk_memory_stats(size_t *in_use, size_t *cached);
void vnk_empty_cache(void);

/* Copies nbytes between host and device memory in any direction
 * (dst_on_device / src_on_device say which is which). Copies to the host
 * synchronize; others are queued. */
int vnk_copy(void *dst, bool dst_on_device, const void *src, bool src_on_device, size_t nbytes);

/* ---- elementwise --------------------------------------------------------- */

/* A strided loop over a contiguous output of `shape` (ndim 1..VN_MAX_DIMS,
 * dims already merged by the caller) reading input k at
 * in[k] + Σ_d idx[d]·st[k][d] (stride 0 = broadcast). */
typedef struct {
    int ndim;
    int64_t shape[VN_MAX_DIMS];
    int64_t st[3][VN_MAX_DIMS];
} vnk_loop;

/* The elementwise ops, with the same formulas as the CPU kernels of
 * engine/ops_pointwise.c (a, b, c are inputs 0, 1, 2; p0, p1 parameters);
 * those with more than one line are written once, in kernels/scalar.h. */
typedef enum {
    /* binary, any of f32/i32/i64/u8 (integers wrap): */
    VNK_ADD, VNK_SUB, VNK_MUL,
    /* f32 only: */
    VNK_DIV, VNK_POW,
    /* comparisons: u8 output, inputs of `dtype`: */
    VNK_EQ, VNK_NE, VNK_LT, VNK_LE, VNK_GT, VNK_GE,
    /* unary (NEG and ABS any dtype, the rest f32): */
    VNK_NEG, VNK_ABS, VNK_EXP, VNK_LOG, VNK_SQRT,
    VNK_POW_SCALAR, /* a^p0 */
    VNK_RELU, VNK_GELU, VNK_TANH, VNK_SIGMOID,
    VNK_CLAMP, /* min(max(a, p0), p1), NaN bound = no bound; also i32, i64, u8 */
    /* backward helpers, f32: */
    VNK_DIV_GB,     /* −a·b/c² */
    VNK_POW_GA,     /* a·c·b^(c−1) */
    VNK_POW_GB,     /* a·b^c·log b, 0 where b == 0 and c ≥ 0 (pow_grad_exponent) */
    VNK_ABS_B,      /* b > 0 ? a : (b < 0 ? −a : 0) */
    VNK_SQRT_B,     /* 0.5·a/b */
    VNK_POW_SCALAR_B, /* a·p0·b^(p0−1) */
    VNK_RELU_B,     /* b > 0 ? a : 0 */
    VNK_GELU_B,     /* a·gelu'(b) */
    VNK_TANH_B,     /* a·(1 − b²) */
    VNK_SIGMOID_B,  /* a·b·(1 − b) */
    VNK_CLAMP_B,    /* a where p0 <= b <= p1 (NaN bound = none), else 0 */
    VNK_KEEP_SET,   /* f32 a, u8 b: b ? a : 0 */
    VNK_KEEP_CLEAR, /* f32 a, u8 b: b ? 0 : a */
    /* selection: */
    VNK_WHERE,       /* u8 a ? b : c, b and c of `dtype` */
    VNK_MASKED_FILL, /* a of `dtype`, u8 b: b ? p0 : a */
    /* conversion: out (out_dtype) = a (dtype), as vn_to_dtype: float → int
     * truncates toward zero and saturates, NaN → 0; f32 ↔ bf16/f16 round to
     * nearest even. */
    VNK_COPY,
} vnk_op;

/* out (contiguous, out_dtype) = op(in[0], in[1], in[2]) over loop L.
 * `dtype` is the dtype of the value inputs (see each op; masks are u8). */
int vnk_map(void *out, vn_dtype out_dtype, const void *const *in, int nin, vn_dtype dtype,
            const vnk_loop *L, vnk_op op, double p0, double p1);
/* out[0..n) = value converted to dtype. */
int vnk_fill(void *out, vn_dtype dtype, int64_t n, double value);
/* out[0..n) (dtype VN_BF16 or VN_F16) = in[0..n) (f32) rounded to nearest
 * even, both contiguous (in 16-byte aligned, out 8-byte aligned): four
 * elements per thread and step, the fast path of the conversions before the
 * 16-bit tensor-core kernels (the generic VNK_COPY of vnk_map walks strides
 * with 64-bit division). */
int vnk_f32_to_half(void *out, vn_dtype dtype, const float *in, int64_t n);
/* vnk_f32_to_half that also sets *nonfinite (dev int) to 1 when an element
 * of out is Inf or NaN (of out, as rounded: an f32 beyond the 16-bit range
 * counts; the test is scalar.h's b16_nonfinite, as in k_dx); it never
 * clears it (the caller zeroes it first). The
 * flag travels on the device: a later kernel reads it (vnk_vnm_spmm_t_if),
 * the host need not wait for it. */
int vnk_f32_to_half_check(void *out, vn_dtype dtype, const float *in, int64_t n, int *nonfinite);

/* ---- reductions ---------------------------------------------------------- */

typedef enum { VNK_RED_SUM, VNK_RED_MEAN, VNK_RED_MAX, VNK_RED_MIN } vnk_red;

/* Reduces the contiguous input viewed as (outer, R, inner) over R, giving
 * (outer, inner):
 *   SUM  f32 → f32 (·scale), ints → i64 (scale ignored);
 *   MEAN any → f32: sum / R (ints summed exactly in i64 first);
 *   MAX/MIN: values in the input dtype into `out` and the index of the first
 *   extremum (i64) into `index`; NaN counts as the extreme (propagates).
 * f32 sums accumulate in double or in a tree; the result must agree with the
 * CPU to relative 1e-5. R == 0: SUM gives 0, MEAN NaN (the caller refuses
 * MAX/MIN over zero elements). */
int vnk_reduce(void *out, int64_t *index, const void *in, vn_dtype dtype, int64_t outer,
               int64_t R, int64_t inner, vnk_red kind, double scale);
/* The backward of MAX/MIN: gx (f32, (outer, R, inner), zeroed by the
 * kernel) gets g[o, i] at [o, index[o, i], i]. */
int vnk_scatter_extreme(float *gx, const float *g, const int64_t *index, int64_t outer, int64_t R,
                        int64_t inner);

/* ---- softmax and losses (f32, contiguous rows of D) ---------------------- */

/* y = softmax(x) or log_softmax(x) of each row, stable (x − row max). */
int vnk_softmax(float *y, const float *x, int64_t rows, int64_t D, bool log);
/* dx from y (the forward output) and g = dL/dy:
 *   softmax:     dx = y·(g − Σ g·y)
 *   log_softmax: dx = g − exp(y)·Σ g */
int vnk_softmax_backward(float *dx, const float *y, const float *g, int64_t rows, int64_t D,
                         bool log);
/* Targets are i32 or i64 (tdtype), 0-based. Before any loss is computed the
 * kernels check every target against 0..C−1; the first bad position (or −1)
 * is written to *bad (host), and its value to *bad_value. */
int vnk_check_targets(int64_t *bad, int64_t *bad_value, const void *target, vn_dtype tdtype,
                      int64_t N, int64_t C);
/* Per row n of logits x (N, C): lse[n] = log Σ_c exp(x[n,c]) (stable) and
 * loss[n] = lse[n] − x[n, target[n]]. */
int vnk_cross_entropy(float *lse, float *loss, const float *x, const void *target,
                      vn_dtype tdtype, int64_t N, int64_t C);
/* dx[n,c] = (exp(x[n,c] − lse[n]) − [c == target[n]]) · g[n·gstride] · mul
 * (gstride 0 for a scalar upstream gradient, as with MEAN/SUM). */
int vnk_cross_entropy_backward(float *dx, const float *x, const float *lse, const void *target,
                               vn_dtype tdtype, const float *g, int64_t gstride, int64_t N,
                               int64_t C, float mul);
/* loss[n] = −logp[n, target[n]]. */
int vnk_nll(float *loss, const float *logp, const void *target, vn_dtype tdtype, int64_t N,
            int64_t C);
/* dx zeroed, then dx[n, target[n]] = −g[n·gstride]·mul. */
int vnk_nll_backward(float *dx, const void *target, vn_dtype tdtype, const float *g,
                     int64_t gstride, int64_t N, int64_t C, float mul);

/* ---- indexing ------------------------------------------------------------ */

/* out (outer, n_idx, inner) = in (outer, n_in, inner) at rows index[j]
 * (i32/i64, 0-based, checked by the caller with vnk_check_targets). */
int vnk_index_select(void *out, const void *in, vn_dtype dtype, const void *index,
                     vn_dtype idtype, int64_t outer, int64_t n_in, int64_t inner, int64_t n_idx);
/* The backward: gx (f32 (outer, n_in, inner), zeroed by the kernel)
 * += g (outer, n_idx, inner) at rows index[j] (atomic adds; repeats sum). */
int vnk_index_add(float *gx, const float *g, const void *index, vn_dtype idtype, int64_t outer,
                  int64_t n_in, int64_t inner, int64_t n_idx);

/* ---- transformer blocks (kernels/transformer.cu, kernels/attention.cu) --- */

/* dw (V, D) = Σ over positions p with ids[p] == v of g[p, :] (ids i64,
 * 0-based, checked by the caller; g (n, D)); written in full, summed in the
 * order of p (the CPU's order: the same bits). */
int vnk_embedding_backward(float *dw, const float *g, const int64_t *ids, int64_t n, int64_t V,
                           int64_t D);
/* Layer norm over rows of D (f32): y = (x − mean)·rstd·gamma + beta (gamma,
 * beta (D) or NULL), stats (rows, 2) = (mean, rstd = 1/sqrt(var + eps)). */
int vnk_layer_norm(float *y, float *stats, const float *x, const float *gamma, const float *beta,
                   int64_t rows, int64_t D, float eps);
/* The backward from the saved stats: dx (rows, D) when dx != NULL; the
 * per-chunk column sums part_g[c, :] = Σ g ⊙ x̂, part_b[c, :] = Σ g over
 * chunk c of vnk_layer_norm_chunks(rows) chunks (either may be NULL), for
 * the caller to add in chunk order (vnk_reduce). */
int vnk_layer_norm_backward(float *dx, float *part_g, float *part_b, const float *g,
                            const float *x, const float *stats, const float *gamma, int64_t rows,
                            int64_t D);
int vnk_layer_norm_chunks(int64_t rows);
/* y (n) = gelu(x + bias[i mod D]) (tanh form, kernels/scalar.h), or with
 * g != NULL the backward y = g · gelu'(x + bias[i mod D]). f32. */
int vnk_bias_gelu(float *y, const float *x, const float *bias, const float *g, int64_t n,
                  int64_t D);

/* Causal attention, FlashAttention-2 style on bf16 tensor cores (f32 in and
 * out, inputs rounded to bf16, f32 accumulation), for B·H independent heads
 * of T rows × D, D = 32, 64 or 128, any T:
 *   out = softmax(q·kᵀ·scale, causal) · v,  lse (B·H, T) = log Σ exp(scores).
 * q, k, v (and dq, dk, dv) are addressed through layout `in`, out and dout
 * through `ol` (attention_tile.h: strides of batch, head and row, so heads
 * can be read from a fused (B, T, 3C) projection and written as (B, T, C)).
 * The backward takes dout and the forward's out and lse and writes every
 * element of dq, dk, dv and dvec (B·H, T) = rowsum(dout ⊙ out), a scratch
 * array. */
int vnk_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                          att_layout in, att_layout ol, int64_t B, int64_t H, int64_t T,
                          int64_t D, float scale);
int vnk_attention_backward(float *dq, float *dk, float *dv, float *dvec, const float *q,
                           const float *k, const float *v, const float *out, const float *dout,
                           const float *lse, att_layout in, att_layout ol, int64_t B, int64_t H,
                           int64_t T, int64_t D, float scale);

/* ---- random numbers (counter-based: element i depends only on key and i) - */

/* out[i] uniform on [0, 1) (normal = false) or N(0, 1) (Box–Muller). */
int vnk_random(float *out, int64_t n, uint64_t key, bool normal);
/* Inverted-dropout mask, bit-identical to the CPU's for the same key
 * (vn_dropout): with k0, k1 the low and high halves of key, mask[i] =
 * hash32(hash32((uint32_t)i ^ k0) + k1) < threshold ? 0 : scale, where
 * hash32 is lowbias32 and threshold = p·2³² (as uint64); both devices
 * compute it with dropout_mask_at in kernels/scalar.h. */
int vnk_dropout_mask(float *mask, int64_t n, uint64_t key, uint64_t threshold, float scale);

/* ---- optimizer steps (f32, contiguous, in place) ------------------------- */

/* Formulas of vn_sgd_step / vn_adam_step in venom.h. One launch handles
 * `count` parameters: arrays of `count` device pointers and sizes (host
 * arrays; the kernel receives them by value in chunks). The arrays updated
 * in place (param and the optimizer state) come first. momentum buffers may
 * be NULL when momentum == 0. bc1 = 1 − β1^t, bc2 = 1 − β2^t. */
int vnk_sgd_step(float *const *param, float *const *buf, const float *const *grad,
                 const int64_t *n, int count, float lr, float momentum, float dampening,
                 float weight_decay, bool nesterov, bool first_step);
int vnk_adam_step(float *const *param, float *const *exp_avg, float *const *exp_avg_sq,
                  const float *const *grad, const int64_t *n, int count, float lr, float beta1,
                  float beta2, float eps, float weight_decay, bool decoupled, float bc1,
                  float bc2);

/* ---- GEMM (cuBLAS) ------------------------------------------------------- */

/* Row-major, like cblas_sgemm(CblasRowMajor, ...), batched with strides:
 *   C_b (m × n, ldc) = alpha · op(A_b) · op(B_b) + beta · C_b, b < batch,
 * with op(A) m × k (A stored k × m when transa), op(B) k × n. A and B are
 * f32, bf16 or f16 (ab_dtype, both the same); C is f32; accumulation is f32.
 * f32 inputs use TF32 tensor cores only when allow_tf32. */
int vnk_gemm(float *C, int64_t ldc, int64_t strideC, const void *A, int64_t lda,
             int64_t strideA, const void *B, int64_t ldb, int64_t strideB, vn_dtype ab_dtype,
             bool transa, bool transb, int64_t m, int64_t n, int64_t k, int64_t batch,
             float alpha, float beta, bool allow_tf32);

/* ---- convolution, pooling, batch norm (kernels/conv.cu, pool.cu, batchnorm.cu) -- */

/* f32, NCHW, contiguous; g is the window checked by the engine (conv__geom;
 * for adaptive pooling Ho, Wo are the output size and the kernel, stride
 * and padding fields are unused). The CPU twins are in engine/ops_conv.c,
 * ops_pool.c and ops_batchnorm.c; the per-element index math is shared
 * with them through conv_index.h. No kernel here uses float atomics: every
 * sum has one thread (or one block, in a fixed tree) and a fixed order, so
 * results repeat bit for bit.
 *
 * im2col: the columns of nb images x (nb, C, H, W): row r of image i
 *   (Ho·Wo values) at cols + i·istride + r·ldc (conv2d: istride Ho·Wo, ldc
 *   nb·Ho·Wo; the im2col op: istride C·kh·kw·Ho·Wo, ldc Ho·Wo).
 * col2im: dx (nb, C, H, W), overwritten, = the columns summed back into
 *   place (conv_col2im_at). */
int vnk_im2col(float *cols, const float *x, const conv_geom *g, int64_t nb, int64_t istride,
               int64_t ldc);
int vnk_col2im(float *dx, const float *cols, const conv_geom *g, int64_t nb, int64_t istride,
               int64_t ldc);
/* The GEMM layout (Cout, nb·L) ↔ images (nb, Cout, L):
 *   to_images:  dst[(i·Cout + o)·L + l] = src[(o·nb + i)·L + l] + bias[o]
 *               (bias NULL: + 0);
 *   otherwise:  dst[(o·nb + i)·L + l] = src[(i·Cout + o)·L + l] (bias unused). */
int vnk_conv_regroup(float *dst, const float *src, int64_t nb, int64_t Cout, int64_t L,
                     const float *bias, bool to_images);
/* out[c] = Σ_{b < B, s < S} x[(b·C + c)·S + s] (summed in double, one block
 * per channel): the bias gradient of conv2d. */
int vnk_channel_sum(float *out, const float *x, int64_t B, int64_t C, int64_t S);

/* max pooling over the B·C planes: y (B, C, Ho, Wo) and idx (i64, the flat
 * position iy·W + ix of each maximum in its plane), as max_pool_at; the
 * backward: dx (B, C, H, W), overwritten, as max_pool_grad_at. */
int vnk_max_pool2d(float *y, int64_t *idx, const float *x, const conv_geom *g);
int vnk_max_pool2d_backward(float *dx, const float *dy, const int64_t *idx, const conv_geom *g);
/* average pooling (fixed windows, the padding counted, or adaptive): y as
 * avg_pool_at; the backward: dx overwritten, as avg_pool_grad_at. */
int vnk_avg_pool2d(float *y, const float *x, const conv_geom *g, bool adaptive);
int vnk_avg_pool2d_backward(float *dx, const float *dy, const conv_geom *g, bool adaptive);

/* Batch norm over x (B, C, S) per channel c (formulas of vn_batch_norm).
 * stats, training: mean[c] and rstd[c] = 1/√(σ² + eps) of the batch (two
 * passes in double, one block per channel), and when running_mean is not
 * NULL, running_mean/var (stride rm_stride / rv_stride elements) ←
 * (1 − momentum)·r + momentum·(μ, n/(n − 1)·σ²); not training: mean and
 * rstd from the running statistics. */
int vnk_batch_norm_stats(float *mean, float *rstd, float *running_mean, int64_t rm_stride,
                         float *running_var, int64_t rv_stride, const float *x, int64_t B,
                         int64_t C, int64_t S, bool training, double momentum, double eps);
/* y = (x − mean[c])·rstd[c]·w[c] + b[c] (w, b NULL: 1, 0). */
int vnk_batch_norm_apply(float *y, const float *x, const float *mean, const float *rstd,
                         const float *w, const float *b, int64_t B, int64_t C, int64_t S);
/* dw[c] = Σ dy·x̂, db[c] = Σ dy (each NULL when not wanted), and dx (NULL
 * when not wanted) = r·(γ·dy − mean(γ·dy) − x̂·mean(γ·dy·x̂)) in training,
 * r·γ·dy otherwise; x̂ = (x − mean)·rstd, γ = w (NULL: 1). */
int vnk_batch_norm_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                            const float *mean, const float *rstd, const float *w, int64_t B,
                            int64_t C, int64_t S, bool training);

/* ---- V:N:M on Sparse Tensor Cores (kernels/vnm_sptc.cu) ------------------ */

/* A V:N:M matrix packed by vnm_sptc_pack (engine/vnm_sptc.h, which gives
 * the exact layout), its three arrays copied to the device. The kernels
 * need V to be a multiple of 16 (a 16-row mma tile never straddles two
 * blocks); spmm_t also needs M ≤ 128 (its shared-memory accumulator). */
typedef struct {
    int64_t R, K, V, M, G, nblocks, row_tiles, k_tiles;
    vn_dtype dtype;         /* VN_BF16 or VN_F16: values and the dense operands */
    const uint16_t *values; /* dev, row_tiles·k_tiles·256 */
    const uint32_t *meta;   /* dev, row_tiles·k_tiles·16 */
    const int32_t *gather;  /* dev, nblocks·k_tiles·32 */
} vnk_vnm;

/* The dense operands are 16-bit (w->dtype). X enters transposed, xt (K × B
 * with row stride ldx ≥ B rounded up to 8, 16-byte aligned), so that a kept
 * column of W selects a contiguous row of xt (the engine's f32 → bf16
 * conversion writes it transposed); its columns B..ldx−1 must hold finite
 * values (sddmm reads them in 8-wide pieces and multiplies them by 0; the
 * engine's conversion writes zeros). dy is B × R row-major (rows that are
 * 16-byte aligned, R % 8 == 0, are copied by cp.async, others element by
 * element). Outputs are f32, written in full.
 *   spmm:   y (B × R) = X·Wᵀ + bias (bias (R) or NULL), by the kernel
 *           vnk_vnm_fwd_auto picks;
 *   spmm_t: dx (B × K) = dY·W;
 *   sddmm:  dvalues (R × 2G) = dYᵀ·X at the kept positions (0 at padding). */
int vnk_vnm_spmm(float *y, const vnk_vnm *w, const void *xt, int64_t ldx, const float *bias,
                 int64_t B);
/* The forward kernels (same operands, same result up to f32 summation
 * order):
 *   VNK_VNM_FWD_MMA_SP  k_spmm, mma.sp.sync m16n8k32 (runs on sm_90 and
 *                       newer);
 *   VNK_VNM_FWD_WGMMA   k_spmm_wgmma (kernels/vnm_wgmma.cu),
 *                       wgmma.mma_async.sp m64n128k32: needs a libvenom
 *                       built with its sm_90a code (VENOM_CUDA_SM90A, on by
 *                       default), a device of compute capability exactly
 *                       9.0 (sm_90a code runs nowhere else: H100, H200),
 *                       and V % 64 == 0 (a 64-row CTA tile in one block);
 *   VNK_VNM_FWD_AUTO    WGMMA where it can run, else MMA_SP: the rule of
 *                       vnk_vnm_spmm.
 * vnk_vnm_fwd_auto says which AUTO picks for w on the current device
 * (MMA_SP when the device cannot be queried). vnk_vnm_spmm_with runs the
 * given kernel; WGMMA where it cannot run fails with a message that says
 * why. */
typedef enum { VNK_VNM_FWD_AUTO, VNK_VNM_FWD_MMA_SP, VNK_VNM_FWD_WGMMA } vnk_vnm_fwd;
vnk_vnm_fwd vnk_vnm_fwd_auto(const vnk_vnm *w);
int vnk_vnm_spmm_with(vnk_vnm_fwd kernel, float *y, const vnk_vnm *w, const void *xt, int64_t ldx,
                      const float *bias, int64_t B);
int vnk_vnm_spmm_t(float *dx, const vnk_vnm *w, const void *dy, int64_t B);
/* vnk_vnm_spmm_t whose every CTA returns at once, writing nothing, unless
 * *only_if (dev int, read when the kernel runs) is non-zero; only_if NULL is
 * vnk_vnm_spmm_t. The dense dX path queues it after cuBLAS's dY·W_dense with
 * the flag vnk_f32_to_half_check set on dY: when dY held Inf or NaN (where
 * W_dense's zeros would give 0 · Inf = NaN) it rewrites dX in full with the
 * sparse kernel's kept-only sums, and otherwise costs one launch of empty
 * CTAs, with no host synchronisation either way. */
int vnk_vnm_spmm_t_if(float *dx, const vnk_vnm *w, const void *dy, int64_t B, const int *only_if);
/* dense (R × K, row-major, w->dtype, dev) = W: zeros, then each packed value
 * stored at its place (vnm_densify_at of vnm_sptc_index.h; one thread per
 * packed value, kernels/vnm_densify.cu). The values are copied, not
 * rounded again: dense holds exactly what the sparse kernels multiply. For
 * the cuBLAS dX, rebuilt once per packed-values version. */
int vnk_vnm_densify(void *dense, const vnk_vnm *w);
int vnk_vnm_sddmm(float *dvalues, const vnk_vnm *w, const void *dy, const void *xt, int64_t ldx,
                  int64_t B);

/* The two conversions the engine runs before the kernels (dtype bf16 or
 * f16, f32 rounded to nearest even):
 *   pack_values:     out[j] = values[src[j]], or 0 where src[j] < 0, for
 *                    j < n: the packed values refreshed from the f32
 *                    trainable array (src from vnm_sptc_layout);
 *   transpose_input: xt (K × ldx) = xᵀ for x (B × K f32, row-major), with
 *                    columns B..ldx−1 of xt set to 0. */
int vnk_vnm_pack_values(void *out, vn_dtype dtype, const float *values, const int32_t *src,
                        int64_t n);
int vnk_vnm_transpose_input(void *xt, vn_dtype dtype, int64_t ldx, const float *x, int64_t B,
                            int64_t K);

/* ---- CSR sparse matrices (kernels/csr.cu) -------------------------------- */

/* y (rows, F) = A·x (cols, F), row-major f32, for A in CSR with i64
 * row_ptr (rows + 1), col_idx (nnz) and f32 vals (nnz), all dev: cuSPARSE
 * cusparseSpMM with CUSPARSE_SPMM_CSR_ALG2 (deterministic: the same bits
 * run after run). nnz may be 0 (y = 0). */
int vnk_csr_spmm(float *y, const int64_t *row_ptr, const int64_t *col_idx, const float *vals,
                 const float *x, int64_t rows, int64_t cols, int64_t nnz, int64_t F);
/* SDDMM at the stored positions: dv[e] = dy[row_idx[e], :] · x[col_idx[e], :]
 * for e < nnz, dy (rows, F) and x (cols, F) row-major f32 (one warp per
 * entry, no atomics). */
int vnk_csr_sddmm(float *dv, const int64_t *row_idx, const int64_t *col_idx, const float *dy,
                  const float *x, int64_t nnz, int64_t F);
/* out[k] = in[idx[k]] for k < n (f32; the transpose's values). */
int vnk_gather_f32(float *out, const float *in, const int64_t *idx, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
