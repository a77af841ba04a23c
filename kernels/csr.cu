/* csr.cu — CSR SpMM through cuSPARSE (cusparseSpMM), the SDDMM of its
 * values' gradient, and an index gather for the transpose's values.
 *
 * One cuSPARSE handle serves the process, created on first use under a
 * mutex (libcusparse itself is opened then: vnk__dlopen in internal.cuh
 * says why); every call is made under that mutex on the legacy default stream,
 * ordered with every other kernel of the backend. The algorithm is
 * CUSPARSE_SPMM_CSR_ALG2 (row-major dense operands, deterministic). */
#include "internal.cuh"

#include <cusparse.h>
#include <pthread.h>

static cusparseHandle_t handle;
static pthread_mutex_t handle_lock = PTHREAD_MUTEX_INITIALIZER;
static void *workspace;
static size_t workspace_bytes;

/* The cuSPARSE entry points this file calls, resolved when the library is opened. */
#define CUSPARSE_FNS(X)                                                                   \
    X(create, cusparseCreate, decltype(&cusparseCreate))                                  \
    X(set_stream, cusparseSetStream, decltype(&cusparseSetStream))                        \
    X(create_csr, cusparseCreateCsr, decltype(&cusparseCreateCsr))                        \
    X(create_dn_mat, cusparseCreateDnMat, decltype(&cusparseCreateDnMat))                 \
    X(destroy_sp_mat, cusparseDestroySpMat, decltype(&cusparseDestroySpMat))              \
    X(destroy_dn_mat, cusparseDestroyDnMat, decltype(&cusparseDestroyDnMat))              \
    X(spmm_buffer_size, cusparseSpMM_bufferSize, decltype(&cusparseSpMM_bufferSize))      \
    X(spmm, cusparseSpMM, decltype(&cusparseSpMM))                                        \
    X(error_string, cusparseGetErrorString, decltype(&cusparseGetErrorString))
static struct { CUSPARSE_FNS(VNK_FN_FIELD) } cusparse;

/* Opens libcusparse and fills `cusparse`; 0 on success. Called with
 * handle_lock held, so a failed attempt is simply retried by the next call. */
static int load_cusparse(void)
{
    static bool loaded;
    if (loaded) return 0;
    const char *soname = VNK_CUSPARSE_SONAME;
    void *lib = vnk__dlopen(soname, VNK_CUSPARSE_PATH);
    if (!lib) return 1;
    auto &fns = cusparse;
    CUSPARSE_FNS(VNK_DLSYM_FIELD)
    loaded = true;
    return 0;
}

static int sparse_fail(cusparseStatus_t s, const char *what)
{
    return vnk__fail("%s: %s", what, cusparse.error_string(s));
}

#define SP_CHECK(call, what)                                                    \
    do {                                                                        \
        cusparseStatus_t s_ = (call);                                           \
        if (s_ != CUSPARSE_STATUS_SUCCESS) { rc = sparse_fail(s_, what); goto done; } \
    } while (0)

/* The SpMM under handle_lock; descriptors are destroyed on every path. */
static int spmm_locked(float *y, const int64_t *row_ptr, const int64_t *col_idx,
                       const float *vals, const float *x, int64_t rows, int64_t cols,
                       int64_t nnz, int64_t F)
{
    int rc = 0;
    cusparseSpMatDescr_t A = NULL;
    cusparseDnMatDescr_t X = NULL, Y = NULL;
    float one = 1.0f, zero = 0.0f;
    size_t need = 0;
    if (!handle) {
        if (load_cusparse()) return 1;
        SP_CHECK(cusparse.create(&handle), "vnk_csr_spmm: cusparseCreate");
        SP_CHECK(cusparse.set_stream(handle, 0), "vnk_csr_spmm: cusparseSetStream");
    }
    SP_CHECK(cusparse.create_csr(&A, rows, cols, nnz, (void *)row_ptr, (void *)col_idx,
                               (void *)vals, CUSPARSE_INDEX_64I, CUSPARSE_INDEX_64I,
                               CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F),
             "vnk_csr_spmm: cusparseCreateCsr");
    SP_CHECK(cusparse.create_dn_mat(&X, cols, F, F, (void *)x, CUDA_R_32F, CUSPARSE_ORDER_ROW),
             "vnk_csr_spmm: cusparseCreateDnMat(x)");
    SP_CHECK(cusparse.create_dn_mat(&Y, rows, F, F, y, CUDA_R_32F, CUSPARSE_ORDER_ROW),
             "vnk_csr_spmm: cusparseCreateDnMat(y)");
    SP_CHECK(cusparse.spmm_buffer_size(handle, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                     CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, X, &zero, Y,
                                     CUDA_R_32F, CUSPARSE_SPMM_CSR_ALG2, &need),
             "vnk_csr_spmm: cusparseSpMM_bufferSize");
    if (need > workspace_bytes) {
        vnk_free(workspace, workspace_bytes);
        workspace_bytes = 0;
        if (!(workspace = vnk_alloc(need))) {
            rc = 1; /* vnk_alloc set the message */
            goto done;
        }
        workspace_bytes = need;
    }
    SP_CHECK(cusparse.spmm(handle, CUSPARSE_OPERATION_NON_TRANSPOSE,
                          CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, X, &zero, Y, CUDA_R_32F,
                          CUSPARSE_SPMM_CSR_ALG2, workspace),
             "vnk_csr_spmm: cusparseSpMM");
done:
    if (A) cusparse.destroy_sp_mat(A);
    if (X) cusparse.destroy_dn_mat(X);
    if (Y) cusparse.destroy_dn_mat(Y);
    return rc;
}

int vnk_csr_spmm(float *y, const int64_t *row_ptr, const int64_t *col_idx, const float *vals,
                 const float *x, int64_t rows, int64_t cols, int64_t nnz, int64_t F)
{
    if (rows == 0 || F == 0) return 0;
    if (nnz == 0 || cols == 0) return vnk_fill(y, VN_F32, rows * F, 0);
    pthread_mutex_lock(&handle_lock);
    int rc = spmm_locked(y, row_ptr, col_idx, vals, x, rows, cols, nnz, F);
    pthread_mutex_unlock(&handle_lock);
    return rc;
}

/* One warp per entry: lanes stride over the features, then a warp sum. */
__global__ void csr_sddmm_kernel(float *dv, const int64_t *row_idx, const int64_t *col_idx,
                                 const float *dy, const float *x, int64_t nnz, int64_t F)
{
    int64_t warps = (int64_t)gridDim.x * blockDim.x / 32;
    int lane = threadIdx.x % 32;
    for (int64_t e = VNK_GRID_START / 32; e < nnz; e += warps) {
        const float *a = dy + row_idx[e] * F, *b = x + col_idx[e] * F;
        float s = 0;
        for (int64_t f = lane; f < F; f += 32) s += a[f] * b[f];
        for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
        if (lane == 0) dv[e] = s;
    }
}

int vnk_csr_sddmm(float *dv, const int64_t *row_idx, const int64_t *col_idx, const float *dy,
                  const float *x, int64_t nnz, int64_t F)
{
    if (nnz == 0) return 0;
    csr_sddmm_kernel<<<vnk__blocks(nnz * 32, VNK_THREADS), VNK_THREADS>>>(dv, row_idx, col_idx,
                                                                          dy, x, nnz, F);
    return vnk__launched("vnk_csr_sddmm");
}

__global__ void gather_f32_kernel(float *out, const float *in, const int64_t *idx, int64_t n)
{
    for (int64_t k = VNK_GRID_START; k < n; k += VNK_GRID_STEP) out[k] = in[idx[k]];
}

int vnk_gather_f32(float *out, const float *in, const int64_t *idx, int64_t n)
{
    if (n == 0) return 0;
    gather_f32_kernel<<<vnk__blocks(n, VNK_THREADS), VNK_THREADS>>>(out, in, idx, n);
    return vnk__launched("vnk_gather_f32");
}
