/* gemm.cu — dense batched GEMM through cuBLAS (cublasGemmStridedBatchedEx).
 *
 * venom's matrices are row-major; cuBLAS's are column-major. A row-major
 * m × n matrix read as column-major is its transpose, so instead of
 * C = op(A)·op(B) we ask cuBLAS for Cᵀ = op(B)ᵀ·op(A)ᵀ: the same call with
 * A and B swapped, m and n swapped, and each operand's transpose flag kept
 * (row-major B read column-major already is Bᵀ).
 *
 * One cuBLAS handle serves the process, created on first use under a mutex.
 * Every call is made under that mutex and goes to the legacy default
 * stream, so GEMMs are serialized with each other and ordered with every
 * other kernel of the backend. libcublas itself is opened then too
 * (vnk__dlopen in internal.cuh says why). */
#include "internal.cuh"

#include <cublas_v2.h>
#include <limits.h>
#include <pthread.h>

static cublasHandle_t handle;
static pthread_mutex_t handle_lock = PTHREAD_MUTEX_INITIALIZER;

/* cublasGemmStridedBatchedEx with the cublasComputeType_t argument
 * (cublas_api.h overloads it for C++ with the legacy cudaDataType). */
typedef cublasStatus_t (*gemm_strided_batched_fn)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *, const void *,
    cudaDataType, int, long long, const void *, cudaDataType, int, long long, const void *, void *,
    cudaDataType, int, long long, int, cublasComputeType_t, cublasGemmAlgo_t);
/* (unevaluated: overload resolution checks the type, nothing is linked) */
static_assert(sizeof(static_cast<gemm_strided_batched_fn>(&cublasGemmStridedBatchedEx)) > 0,
              "cublasGemmStridedBatchedEx has no overload of this type");

/* The cuBLAS entry points this file calls, resolved when the library is opened. */
#define CUBLAS_FNS(X)                                                                     \
    X(create, cublasCreate_v2, decltype(&cublasCreate_v2))                                \
    X(destroy, cublasDestroy_v2, decltype(&cublasDestroy_v2))                             \
    X(set_stream, cublasSetStream_v2, decltype(&cublasSetStream_v2))                      \
    X(gemm_strided_batched, cublasGemmStridedBatchedEx, gemm_strided_batched_fn)          \
    X(status_string, cublasGetStatusString, decltype(&cublasGetStatusString))
static struct { CUBLAS_FNS(VNK_FN_FIELD) } cublas;

/* Opens libcublas and fills `cublas`; 0 on success. Called with handle_lock
 * held, so a failed attempt is simply retried by the next call. */
static int load_cublas(void)
{
    static bool loaded;
    if (loaded) return 0;
    const char *soname = VNK_CUBLAS_SONAME;
    void *lib = vnk__dlopen(soname, VNK_CUBLAS_PATH);
    if (!lib) return 1;
    auto &fns = cublas;
    CUBLAS_FNS(VNK_DLSYM_FIELD)
    loaded = true;
    return 0;
}

static int cublas_fail(cublasStatus_t s, const char *what)
{
    return vnk__fail("%s: %s", what, cublas.status_string(s));
}

/* Opens cuBLAS and creates the handle if needed; called with handle_lock held. */
static int ensure_handle(void)
{
    if (handle) return 0;
    if (load_cublas()) return 1;
    cublasStatus_t s = cublas.create(&handle);
    if (s != CUBLAS_STATUS_SUCCESS) {
        handle = NULL;
        return cublas_fail(s, "vnk_gemm: cublasCreate");
    }
    s = cublas.set_stream(handle, 0);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cublas.destroy(handle);
        handle = NULL;
        return cublas_fail(s, "vnk_gemm: cublasSetStream(default stream)");
    }
    return 0;
}

/* C_b = beta·C_b for the k == 0 case, where cuBLAS has nothing to multiply;
 * beta == 0 writes zeros without reading C (BLAS semantics: NaN in an
 * uninitialized C must not survive). */
static __global__ void scale_c(float *C, int64_t m, int64_t n, int64_t ldc, int64_t strideC,
                               int64_t batch, float beta)
{
    int64_t total = batch * m * n;
    for (int64_t t = VNK_GRID_START; t < total; t += VNK_GRID_STEP) {
        int64_t j = t % n, i = t / n % m, b = t / (m * n);
        float *c = C + b * strideC + i * ldc + j;
        *c = beta == 0.0f ? 0.0f : beta * *c;
    }
}

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

int vnk_gemm(float *C, int64_t ldc, int64_t strideC, const void *A, int64_t lda, int64_t strideA,
             const void *B, int64_t ldb, int64_t strideB, vn_dtype ab_dtype, bool transa,
             bool transb, int64_t m, int64_t n, int64_t k, int64_t batch, float alpha, float beta,
             bool allow_tf32)
{
    cudaDataType ab_type;
    switch (ab_dtype) {
    case VN_F32: ab_type = CUDA_R_32F; break;
    case VN_BF16: ab_type = CUDA_R_16BF; break;
    case VN_F16: ab_type = CUDA_R_16F; break;
    default:
        return vnk__fail("vnk_gemm: A and B must be f32, bf16 or f16, got %s",
                         vn_dtype_name(ab_dtype));
    }
    if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(batch))
        return vnk__fail("vnk_gemm: m = %lld, n = %lld, k = %lld, batch = %lld: each must be in "
                         "0..%d (cuBLAS takes int)", (long long)m, (long long)n, (long long)k,
                         (long long)batch, INT_MAX);
    if (!fits_int(lda) || !fits_int(ldb) || !fits_int(ldc))
        return vnk__fail("vnk_gemm: lda = %lld, ldb = %lld, ldc = %lld: each must be in 0..%d "
                         "(cuBLAS takes int)", (long long)lda, (long long)ldb, (long long)ldc, INT_MAX);
    if (strideA < 0 || strideB < 0 || strideC < 0)
        return vnk__fail("vnk_gemm: negative batch stride");
    /* Row-major leading dims are at least the stored row lengths. */
    int64_t a_cols = transa ? m : k, b_cols = transb ? k : n;
    if (lda < (a_cols > 1 ? a_cols : 1) || ldb < (b_cols > 1 ? b_cols : 1) || ldc < (n > 1 ? n : 1))
        return vnk__fail("vnk_gemm: leading dims lda = %lld, ldb = %lld, ldc = %lld are shorter "
                         "than the rows they step over (%lld, %lld, %lld)", (long long)lda,
                         (long long)ldb, (long long)ldc, (long long)a_cols, (long long)b_cols,
                         (long long)n);
    if (m == 0 || n == 0 || batch == 0) return 0;
    if (!C) return vnk__fail("vnk_gemm: NULL C");
    if (k == 0) {
        scale_c<<<vnk__blocks(batch * m * n, VNK_THREADS), VNK_THREADS>>>(C, m, n, ldc, strideC,
                                                                         batch, beta);
        return vnk__launched("vnk_gemm(k = 0: C = beta·C)");
    }
    if (!A || !B) return vnk__fail("vnk_gemm: NULL A or B");

    cublasComputeType_t compute =
        ab_dtype == VN_F32 && allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    pthread_mutex_lock(&handle_lock);
    int rc = ensure_handle();
    if (!rc) {
        /* column-major Cᵀ (n × m) = op(B)ᵀ (n × k) · op(A)ᵀ (k × m) */
        cublasStatus_t s = cublas.gemm_strided_batched(
            handle, opb, opa, (int)n, (int)m, (int)k, &alpha, B, ab_type, (int)ldb, strideB, A,
            ab_type, (int)lda, strideA, &beta, C, CUDA_R_32F, (int)ldc, strideC, (int)batch,
            compute, CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) rc = cublas_fail(s, "vnk_gemm: cublasGemmStridedBatchedEx");
    }
    pthread_mutex_unlock(&handle_lock);
    return rc;
}
