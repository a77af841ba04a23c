/* blas.c — one thread pool for GEMMs and loops (blas.h). With OpenBLAS's
 * pthreads build, its threads spin (sched_yield) for a while after each
 * call, and a training step makes hundreds of small GEMMs between
 * OpenMP-parallel loops: on a machine with as many cores as threads the two
 * pools took cores from each other. So OpenBLAS runs single-threaded and the
 * split into threads is done here, with OpenMP. */
#include "blas.h"
#include "internal.h"

#include <omp.h>
#include <pthread.h>
#include <stdint.h>

/* Below this m·n·k a product runs on one thread (OpenBLAS's own threshold:
 * the split costs more than it saves). */
#define SPLIT_WORK (4.0 * 65536)
/* Each thread takes at least this many rows (or columns) of C. */
#define MIN_BLOCK 16

_Thread_local void (*vn__progress_fn)(void *ud);
_Thread_local void *vn__progress_ud;

/* With a progress hook set or a gradient's rows watched (internal.h), a
 * product of at least SPLIT_WORK runs as up to PROGRESS_SLICES consecutive
 * slices with a progress call (and a handover of the rows) after each. */
#define PROGRESS_SLICES 8

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_single_threaded(void) { openblas_set_num_threads(1); }

/* One row of C (1 × n) = a (1 × k, stride inca) · op(B) as a matrix-vector
 * product: OpenBLAS's sgemm with m = 1 packs all of B first (at 2048 × 512
 * it was 10× slower than sgemv), and a single row is what decoding a
 * token at batch 1 multiplies. */
static void gemv_row(CBLAS_TRANSPOSE tb, int n, int k, float alpha, const float *a, int inca,
                     const float *B, int ldb, float beta, float *c)
{
    if (tb == CblasTrans) /* B is n × k: c = B·a */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, alpha, B, ldb, a, inca, beta, c, 1);
    else /* B is k × n: c = Bᵀ·a */
        cblas_sgemv(CblasRowMajor, CblasTrans, k, n, alpha, B, ldb, a, inca, beta, c, 1);
}

/* The product's rows lo..hi of C (by_rows) or its columns lo..hi. */
static void gemm_block(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                       const float *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc, int by_rows, int lo, int hi)
{
    int inca = ta == CblasNoTrans ? 1 : lda; /* along a row of op(A) */
    if (by_rows && hi - lo == 1) /* one row of op(A): row lo of A, or column lo when transposed */
        gemv_row(tb, n, k, alpha, ta == CblasNoTrans ? A + (size_t)lo * lda : A + lo, inca, B, ldb,
                 beta, C + (size_t)lo * ldc);
    else if (!by_rows && m == 1) /* columns lo..hi of op(B): rows lo..hi of B, or its columns */
        gemv_row(tb, hi - lo, k, alpha, A, inca, tb == CblasNoTrans ? B + lo : B + (size_t)lo * ldb,
                 ldb, beta, C + lo);
    else if (by_rows) /* rows lo..hi of op(A): row i of A, or column i when transposed */
        cblas_sgemm(CblasRowMajor, ta, tb, hi - lo, n, k, alpha,
                    ta == CblasNoTrans ? A + (size_t)lo * lda : A + lo, lda, B, ldb, beta,
                    C + (size_t)lo * ldc, ldc);
    else /* columns lo..hi of op(B): column j of B, or row j when transposed */
        cblas_sgemm(CblasRowMajor, ta, tb, m, hi - lo, k, alpha, A, lda,
                    tb == CblasNoTrans ? B + lo : B + (size_t)lo * ldb, ldb, beta, C + lo, ldc);
}

/* Rows (or columns) lo..hi of C, split over up to `parts` OpenMP threads. */
static void gemm_range(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                       const float *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc, int by_rows, int lo, int hi, int parts)
{
    if (parts > (hi - lo) / MIN_BLOCK) parts = (hi - lo) / MIN_BLOCK;
    if (parts <= 1) {
        gemm_block(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, by_rows, lo, hi);
        return;
    }
#pragma omp parallel for num_threads(parts) schedule(static)
    for (int p = 0; p < parts; p++) {
        int a = lo + (int)((int64_t)(hi - lo) * p / parts);
        int b = lo + (int)((int64_t)(hi - lo) * (p + 1) / parts);
        gemm_block(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, by_rows, a, b);
    }
}

void vn__sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
               const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    pthread_once(&blas_once, blas_single_threaded);
    /* split the longer side of C; each block is the same product on a
     * slice of op(A)'s rows or op(B)'s columns. Not bit for bit the
     * unsplit product (OpenBLAS picks its kernels by block shape), but
     * deterministic for a given thread count (and progress hook). */
    /* C's rows are a gradient's, wanted as they are done: cut by rows when
     * it has rows enough for two blocks */
    bool watched = vn__grad_rows_watching();
    int by_rows = m >= n || (watched && m >= 2 * MIN_BLOCK), len = by_rows ? m : n;
    bool large = !omp_in_parallel() && (double)m * n * k >= SPLIT_WORK;
    int parts = large ? omp_get_max_threads() : 1;
    /* With an all-reduce in flight or a gradient watched, consecutive slices
     * (each split over the threads), each handing its rows over and giving
     * MPI a turn. */
    int slices = 1;
    if (large && (vn__progress_fn || watched)) {
        slices = len / MIN_BLOCK < PROGRESS_SLICES ? len / MIN_BLOCK : PROGRESS_SLICES;
        if (slices < 1) slices = 1;
    }
    for (int s = 0; s < slices; s++) {
        int lo = (int)((int64_t)len * s / slices), hi = (int)((int64_t)len * (s + 1) / slices);
        gemm_range(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, by_rows, lo, hi, parts);
        if (watched && by_rows) vn__grad_rows_done(lo, hi);
        if (slices > 1) vn__progress();
    }
    if (watched && !by_rows) vn__grad_rows_done(0, m);
}
