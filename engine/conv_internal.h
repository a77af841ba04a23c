/* conv_internal.h — what ops_conv.c and ops_pool.c share: the geometry of a
 * sliding window over NCHW images, checked once. */
#ifndef VENOM_CONV_INTERNAL_H
#define VENOM_CONV_INTERNAL_H

#include "internal.h"

/* conv_geom (input, window, output sizes) and the per-element index math
 * the CUDA kernels use live in kernels/conv_index.h, reached through
 * kernels.h. */

/* Checks x (a usable 4-d f32 CPU tensor: `op: input`) and the window
 * (kernel ≥ 1, stride ≥ 1, padding ≥ 0, dilation ≥ 1; dilation NULL means 1)
 * and fills g, output size included; VN_ERR_SHAPE when the dilated kernel
 * does not fit in the padded input, naming all of them. */
vn_status conv__geom(const char *op, const vn_tensor *x, const int64_t kernel[2],
                     const int64_t stride[2], const int64_t padding[2],
                     const int64_t dilation[2], conv_geom *g);

#endif
