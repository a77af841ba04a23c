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

int vnk_map(vnk_op op, vn_dtype dtype, vn_dtype out_dtype, void *out, int nin,
            const void *const *in, const vnk_loop *L, double p0, double p1)
{
    NO_CUDA;
}

int vnk_fill(void *out, vn_dtype dtype, int64_t n, double value)
{
    NO_CUDA;
}

int vnk_reduce(vnk_red kind, vn_dtype dtype, const void *in, void *out, int64_t *index,
               int64_t outer, int64_t R, int64_t inner, double scale)
{
    NO_CUDA;
}

int vnk_scatter_extreme(float *gx, const float *g, const int64_t *index, int64_t outer, int64_t R,
                        int64_t inner)
{
    NO_CUDA;
}

int vnk_softmax(const float *x, float *y, int64_t rows, int64_t D, bool log)
{
    NO_CUDA;
}

int vnk_softmax_backward(const float *y, const float *g, float *dx, int64_t rows, int64_t D, bool log)
{
    NO_CUDA;
}

int vnk_check_targets(const void *target, vn_dtype tdtype, int64_t N, int64_t C, int64_t *bad,
                      int64_t *bad_value)
{
    NO_CUDA;
}

int vnk_cross_entropy(const float *x, const void *target, vn_dtype tdtype, int64_t N, int64_t C,
                      float *lse, float *loss)
{
    NO_CUDA;
}

int vnk_cross_entropy_backward(const float *x, const float *lse, const void *target,
                               vn_dtype tdtype, int64_t N, int64_t C, const float *g,
                               int64_t gstride, float mul, float *dx)
{
    NO_CUDA;
}

int vnk_nll(const float *logp, const void *target, vn_dtype tdtype, int64_t N, int64_t C, float *loss)
{
    NO_CUDA;
}

int vnk_nll_backward(const void *target, vn_dtype tdtype, int64_t N, int64_t C, const float *g,
                     int64_t gstride, float mul, float *dx)
{
    NO_CUDA;
}

int vnk_index_select(void *out, const void *in, vn_dtype dtype, int64_t outer, int64_t n_in,
                     int64_t inner, const void *index, vn_dtype idtype, int64_t n_idx)
{
    NO_CUDA;
}

int vnk_index_add(float *gx, const float *g, int64_t outer, int64_t n_in, int64_t inner,
                  const void *index, vn_dtype idtype, int64_t n_idx)
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

int vnk_sgd_step(int count, float *const *param, const float *const *grad, float *const *buf,
                 const int64_t *n, float lr, float momentum, float dampening, float weight_decay,
                 bool nesterov, bool first_step)
{
    NO_CUDA;
}

int vnk_adam_step(int count, float *const *param, const float *const *grad,
                  float *const *exp_avg, float *const *exp_avg_sq, const int64_t *n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, bool decoupled,
                  float bc1, float bc2)
{
    NO_CUDA;
}

int vnk_gemm(bool transa, bool transb, int64_t m, int64_t n, int64_t k, float alpha,
             const void *A, int64_t lda, int64_t strideA, const void *B, int64_t ldb,
             int64_t strideB, float beta, float *C, int64_t ldc, int64_t strideC, int64_t batch,
             vn_dtype ab_dtype, bool allow_tf32)
{
    NO_CUDA;
}

int vnk_vnm_spmm(const vnk_vnm *w, const void *xt, int64_t ldx, int64_t B, const float *bias,
                 float *y)
{
    NO_CUDA;
}

int vnk_vnm_spmm_t(const vnk_vnm *w, const void *dy, int64_t B, float *dx) { NO_CUDA; }

int vnk_vnm_sddmm(const vnk_vnm *w, const void *dy, const void *xt, int64_t ldx, int64_t B,
                  float *dvalues)
{
    NO_CUDA;
}

int vnk_vnm_pack_values(const int32_t *src, int64_t n, const float *values, vn_dtype dtype,
                        void *out)
{
    NO_CUDA;
}

int vnk_vnm_transpose_input(const float *x, int64_t B, int64_t K, vn_dtype dtype, void *xt,
                            int64_t ldx)
{
    NO_CUDA;
}
