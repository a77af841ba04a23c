/* venom/conv.h — convolutions, pooling, batch normalisation and flatten
 * (engine/ops_conv.c, ops_pool.c, ops_batchnorm.c; flatten in views.c).
 * Reached only through venom.h.
 *
 * Images are NCHW: (B, C, H, W) f32 tensors, any strides (read through a
 * contiguous copy). Every op here is differentiable and runs on the CPU or
 * on CUDA (all tensor arguments on one device, else VN_ERR_DEVICE naming
 * both; the CUDA kernels are kernels/conv.cu, pool.cu and batchnorm.cu, with
 * cuBLAS for the convolution's GEMMs, TF32 only when
 * vn_cuda_set_allow_tf32 allows it; no float atomics, so a GPU result
 * repeats bit for bit run after run). Output sizes follow
 * the usual formula, per spatial dim,
 *     out = ⌊(in + 2·padding − dilation·(kernel − 1) − 1) / stride⌋ + 1,
 * and an op whose kernel does not fit in the padded input (out < 1) fails
 * with VN_ERR_SHAPE naming the input shape, kernel, padding and dilation.
 * Strides and dilations must be ≥ 1 and paddings ≥ 0 (VN_ERR_ARG). */
#ifndef VENOM_H
#error "include <venom.h>, not <venom/conv.h>"
#endif
#ifndef VENOM_CONV_H
#define VENOM_CONV_H

/* 2-d convolution (cross-correlation, as in every deep learning library):
 *   y[b, o, i, j] = bias[o] + Σ_{c, p, q} w[o, c, p, q] ·
 *                   x[b, g·C_in/groups + c, i·sh − ph + p·dh, j·sw − pw + q·dw]
 * with g = o / (C_out/groups) and x zero outside the image.
 * x (B, C_in, H, W), weight (C_out, C_in/groups, kh, kw), bias (C_out) or
 * NULL, all f32 → (B, C_out, Ho, Wo). stride, padding, dilation are
 * {height, width} pairs; groups ≥ 1 must divide C_in and C_out (groups =
 * C_in = C_out is a depthwise convolution). Computed as im2col (each output
 * position's receptive field as a column of C_in·kh·kw values) and one
 * sgemm per group (OpenBLAS, or cuBLAS on CUDA) for a chunk of images at
 * once; backward:
 * dW = dY·colsᵀ and dcols = Wᵀ·dY scattered back (col2im), the columns
 * recomputed, not saved.
 * Errors: VN_ERR_ARG (NULL, freed, bad stride/padding/dilation/groups, the
 * message says which), VN_ERR_SHAPE (ranks, channels that do not match or
 * do not divide by groups, a kernel larger than the padded input; both
 * shapes in the message), VN_ERR_DTYPE, VN_ERR_DEVICE, VN_ERR_MEMORY. */
vn_tensor *vn_conv2d(const vn_tensor *x, const vn_tensor *weight, const vn_tensor *bias,
                     const int64_t stride[2], const int64_t padding[2],
                     const int64_t dilation[2], int64_t groups);

/* im2col as an op (PyTorch's unfold): x (B, C, H, W) f32 →
 * (B, C·kh·kw, Ho·Wo), element [b, (c·kh + p)·kw + q, i·Wo + j] =
 * x[b, c, i·sh − ph + p·dh, j·sw − pw + q·dw] (0 in the padding): column
 * i·Wo + j is the receptive field of output position (i, j). A convolution
 * is the weight (C_out, C·kh·kw) times these columns; the V:N:M sparse
 * convolution runs it as the V:N:M SpMM (vn_vnm_linear) on their transpose.
 * Backward: col2im (sums the overlapping windows). kernel is {kh, kw}, the
 * rest as for vn_conv2d; same errors. */
vn_tensor *vn_im2col(const vn_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                     const int64_t padding[2], const int64_t dilation[2]);

/* Max pooling: y[b, c, i, j] = max over the kh × kw window at
 * (i·sh − ph, j·sw − pw) of x (padding never wins: it is −∞), x (B, C, H, W)
 * f32 → (B, C, Ho, Wo). The position of each maximum (the first, scanning
 * rows then columns, among equal values; a NaN wins) is saved for the
 * backward, which routes dY there. padding ≤ kernel/2 per dim (VN_ERR_ARG),
 * so every window holds at least one input. Errors as for vn_conv2d. */
vn_tensor *vn_max_pool2d(const vn_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                         const int64_t padding[2]);

/* Average pooling: the mean over each kh × kw window, the zero padding
 * counted (count_include_pad, PyTorch's default: the divisor is always
 * kh·kw). x (B, C, H, W) f32 → (B, C, Ho, Wo); padding ≤ kernel/2. Errors as
 * for vn_max_pool2d. */
vn_tensor *vn_avg_pool2d(const vn_tensor *x, const int64_t kernel[2], const int64_t stride[2],
                         const int64_t padding[2]);

/* Adaptive average pooling to a fixed (oh, ow): output (i, j) is the mean of
 * rows ⌊i·H/oh⌋ … ⌈(i+1)·H/oh⌉ − 1 and the same for columns (windows may
 * overlap when H is not a multiple of oh). x (B, C, H, W) f32 →
 * (B, C, oh, ow), for any oh, ow ≥ 1 (larger than the input repeats
 * rows and columns). Errors: VN_ERR_ARG (oh or ow < 1), VN_ERR_SHAPE
 * (rank, an empty image), VN_ERR_DTYPE, VN_ERR_DEVICE. */
vn_tensor *vn_adaptive_avg_pool2d(const vn_tensor *x, int64_t oh, int64_t ow);

/* Batch normalisation (Ioffe & Szegedy, 2015) over channel dim 1 of x
 * (B, C) or (B, C, d1, ...), f32:
 *   y = (x − μ) / √(σ² + eps) · weight + bias      (per channel)
 * training: μ, σ² are the mean and biased variance over every dim but 1 of
 * this batch, and running_mean/running_var (C, f32, when not NULL) are
 * updated in place: r ← (1 − momentum)·r + momentum·s, with the unbiased
 * variance n/(n − 1)·σ² for running_var (n = values per channel); a channel
 * with a single value is refused (VN_ERR_SHAPE). Not training: μ, σ² are
 * running_mean and running_var (required). weight and bias (C) may be NULL
 * (1 and 0). Differentiable in x, weight and bias (the batch statistics are
 * differentiated through in training). The running tensors must not
 * require grad. Errors: VN_ERR_ARG (NULL x, missing running stats in eval,
 * momentum outside [0, 1], eps ≤ 0), VN_ERR_SHAPE, VN_ERR_DTYPE,
 * VN_ERR_DEVICE. */
vn_tensor *vn_batch_norm(const vn_tensor *x, const vn_tensor *weight, const vn_tensor *bias,
                         vn_tensor *running_mean, vn_tensor *running_var, bool training,
                         double momentum, double eps);

/* Dims start_dim … end_dim of x merged into one (negative dims count from
 * the end): (B, C, H, W) with (1, -1) → (B, C·H·W). A view when the strides
 * allow, else a copy (as vn_reshape); differentiable. Errors: VN_ERR_ARG
 * (dims out of range or start after end). */
vn_tensor *vn_flatten(const vn_tensor *x, int start_dim, int end_dim);

#endif
