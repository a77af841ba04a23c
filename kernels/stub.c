/* stub.c — the kernels.h symbols for a build without CUDA (VENOM_CUDA=OFF or
 * no toolkit): no devices, no memory, and every kernel fails with a message
 * that says how to get CUDA. */
#include "kernels.h"

#include <stddef.h>

static const char no_cuda[] =
    "venom was built without CUDA (configure with -DVENOM_CUDA=ON and the CUDA toolkit)";

/* The arguments go unused on purpose: these functions only exist to fail. */
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define NO_CUDA return 1

int vnk_device_count(void) { return 0; }
const char *vnk_error(void) { return no_cuda; }

int vnk_device_name(char *buf, size_t n) { NO_CUDA; }
int vnk_synchronize(void) { NO_CUDA; }

void *vnk_alloc(size_t nbytes) { return NULL; }
void vnk_free(void *dev, size_t nbytes) {}
void vnk_memory_stats(size_t *in_use, size_t *cached)
{
    if (in_use) *in_use = 0;
    if (cached) *cached = 0;
}
void vnk_empty_cache(void) {}

int vnk_copy(void *dst, bool dst_on_device, const void *src, bool src_on_device, size_t nbytes)
{
    NO_CUDA;
}

int vnk_map(void *out, vn_dtype out_dtype, const void *const *in, int nin, vn_dtype dtype,
            const vnk_loop *L, vnk_op op, double p0, double p1)
{
    NO_CUDA;
}

int vnk_fill(void *out, vn_dtype dtype, int64_t n, double value)
{
    NO_CUDA;
}

int vnk_f32_to_half(void *out, vn_dtype dtype, const float *in, int64_t n)
{
    NO_CUDA;
}

int vnk_f32_to_half_check(void *out, vn_dtype dtype, const float *in, int64_t n, int *nonfinite)
{
    NO_CUDA;
}

int vnk_reduce(void *out, int64_t *index, const void *in, vn_dtype dtype, int64_t outer, int64_t R,
               int64_t inner, vnk_red kind, double scale)
{
    NO_CUDA;
}

int vnk_scatter_extreme(float *gx, const float *g, const int64_t *index, int64_t outer, int64_t R,
                        int64_t inner)
{
    NO_CUDA;
}

int vnk_softmax(float *y, const float *x, int64_t rows, int64_t D, bool log)
{
    NO_CUDA;
}

int vnk_softmax_backward(float *dx, const float *y, const float *g, int64_t rows, int64_t D,
                         bool log)
{
    NO_CUDA;
}

int vnk_check_targets(int64_t *bad, int64_t *bad_value, const void *target, vn_dtype tdtype,
                      int64_t N, int64_t C)
{
    NO_CUDA;
}

int vnk_cross_entropy(float *lse, float *loss, const float *x, const void *target, vn_dtype tdtype,
                      int64_t N, int64_t C)
{
    NO_CUDA;
}

int vnk_cross_entropy_backward(float *dx, const float *x, const float *lse, const void *target,
                               vn_dtype tdtype, const float *g, int64_t gstride, int64_t N,
                               int64_t C, float mul)
{
    NO_CUDA;
}

int vnk_nll(float *loss, const float *logp, const void *target, vn_dtype tdtype, int64_t N,
            int64_t C)
{
    NO_CUDA;
}

int vnk_nll_backward(float *dx, const void *target, vn_dtype tdtype, const float *g,
                     int64_t gstride, int64_t N, int64_t C, float mul)
{
    NO_CUDA;
}

int vnk_index_select(void *out, const void *in, vn_dtype dtype, const void *index, vn_dtype idtype,
                     int64_t outer, int64_t n_in, int64_t inner, int64_t n_idx)
{
    NO_CUDA;
}

int vnk_index_add(float *gx, const float *g, const void *index, vn_dtype idtype, int64_t outer,
                  int64_t n_in, int64_t inner, int64_t n_idx)
{
    NO_CUDA;
}

int vnk_embedding_backward(float *dw, const float *g, const int64_t *ids, int64_t n, int64_t V,
                           int64_t D)
{
    NO_CUDA;
}
int vnk_layer_norm(float *y, float *stats, const float *x, const float *gamma, const float *beta,
                   int64_t rows, int64_t D, float eps)
{
    NO_CUDA;
}
int vnk_layer_norm_backward(float *dx, float *part_g, float *part_b, const float *g,
                            const float *x, const float *stats, const float *gamma, int64_t rows,
                            int64_t D)
{
    NO_CUDA;
}
int vnk_layer_norm_chunks(int64_t rows) { return 0; }
int vnk_bias_gelu(float *y, const float *x, const float *bias, const float *g, int64_t n,
                  int64_t D)
{
    NO_CUDA;
}
int vnk_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                          att_layout in, att_layout ol, int64_t B, int64_t H, int64_t T,
                          int64_t D, float scale)
{
    NO_CUDA;
}
int vnk_attention_backward(float *dq, float *dk, float *dv, float *dvec, const float *q,
                           const float *k, const float *v, const float *out, const float *dout,
                           const float *lse, att_layout in, att_layout ol, int64_t B, int64_t H,
                           int64_t T, int64_t D, float scale)
{
    NO_CUDA;
}

int vnk_random(float *out, int64_t n, uint64_t key, bool normal)
{
    NO_CUDA;
}

int vnk_dropout_mask(float *mask, int64_t n, uint64_t key, uint64_t threshold, float scale)
{
    NO_CUDA;
}

int vnk_sgd_step(float *const *param, float *const *buf, const float *const *grad, const int64_t *n,
                 int count, float lr, float momentum, float dampening, float weight_decay,
                 bool nesterov, bool first_step)
{
    NO_CUDA;
}

int vnk_adam_step(float *const *param, float *const *exp_avg, float *const *exp_avg_sq,
                  const float *const *grad, const int64_t *n, int count, float lr, float beta1,
                  float beta2, float eps, float weight_decay, bool decoupled, float bc1, float bc2)
{
    NO_CUDA;
}

int vnk_gemm(float *C, int64_t ldc, int64_t strideC, const void *A, int64_t lda, int64_t strideA,
             const void *B, int64_t ldb, int64_t strideB, vn_dtype ab_dtype, bool transa,
             bool transb, int64_t m, int64_t n, int64_t k, int64_t batch, float alpha, float beta,
             bool allow_tf32)
{
    NO_CUDA;
}

int vnk_vnm_spmm(float *y, const vnk_vnm *w, const void *xt, int64_t ldx, const float *bias,
                 int64_t B)
{
    NO_CUDA;
}

vnk_vnm_fwd vnk_vnm_fwd_auto(const vnk_vnm *w) { return VNK_VNM_FWD_MMA_SP; }

int vnk_vnm_spmm_with(vnk_vnm_fwd kernel, float *y, const vnk_vnm *w, const void *xt, int64_t ldx,
                      const float *bias, int64_t B)
{
    NO_CUDA;
}

int vnk_vnm_spmm_t(float *dx, const vnk_vnm *w, const void *dy, int64_t B) { NO_CUDA; }
int vnk_vnm_spmm_t_if(float *dx, const vnk_vnm *w, const void *dy, int64_t B, const int *only_if)
{
    NO_CUDA;
}
int vnk_vnm_densify(void *dense, const vnk_vnm *w) { NO_CUDA; }

int vnk_vnm_sddmm(float *dvalues, const vnk_vnm *w, const void *dy, const void *xt, int64_t ldx,
                  int64_t B)
{
    NO_CUDA;
}

int vnk_vnm_pack_values(void *out, vn_dtype dtype, const float *values, const int32_t *src,
                        int64_t n)
{
    NO_CUDA;
}

int vnk_vnm_transpose_input(void *xt, vn_dtype dtype, int64_t ldx, const float *x, int64_t B,
                            int64_t K)
{
    NO_CUDA;
}

int vnk_csr_spmm(float *y, const int64_t *row_ptr, const int64_t *col_idx, const float *vals,
                 const float *x, int64_t rows, int64_t cols, int64_t nnz, int64_t F)
{
    NO_CUDA;
}

int vnk_csr_sddmm(float *dv, const int64_t *row_idx, const int64_t *col_idx, const float *dy,
                  const float *x, int64_t nnz, int64_t F)
{
    NO_CUDA;
}

int vnk_gather_f32(float *out, const float *in, const int64_t *idx, int64_t n) { NO_CUDA; }

int vnk_im2col(float *cols, const float *x, const conv_geom *g, int64_t nb, int64_t istride,
               int64_t ldc)
{
    NO_CUDA;
}

int vnk_col2im(float *dx, const float *cols, const conv_geom *g, int64_t nb, int64_t istride,
               int64_t ldc)
{
    NO_CUDA;
}

int vnk_conv_regroup(float *dst, const float *src, int64_t nb, int64_t Cout, int64_t L,
                     const float *bias, bool to_images)
{
    NO_CUDA;
}

int vnk_channel_sum(float *out, const float *x, int64_t B, int64_t C, int64_t S) { NO_CUDA; }

int vnk_max_pool2d(float *y, int64_t *idx, const float *x, const conv_geom *g) { NO_CUDA; }

int vnk_max_pool2d_backward(float *dx, const float *dy, const int64_t *idx, const conv_geom *g)
{
    NO_CUDA;
}

int vnk_avg_pool2d(float *y, const float *x, const conv_geom *g, bool adaptive) { NO_CUDA; }

int vnk_avg_pool2d_backward(float *dx, const float *dy, const conv_geom *g, bool adaptive)
{
    NO_CUDA;
}

int vnk_batch_norm_stats(float *mean, float *rstd, float *running_mean, int64_t rm_stride,
                         float *running_var, int64_t rv_stride, const float *x, int64_t B,
                         int64_t C, int64_t S, bool training, double momentum, double eps)
{
    NO_CUDA;
}

int vnk_batch_norm_apply(float *y, const float *x, const float *mean, const float *rstd,
                         const float *w, const float *b, int64_t B, int64_t C, int64_t S)
{
    NO_CUDA;
}

int vnk_batch_norm_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                            const float *mean, const float *rstd, const float *w, int64_t B,
                            int64_t C, int64_t S, bool training)
{
    NO_CUDA;
}
