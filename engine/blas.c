/* blas.c — one thread pool for GEMMs and loops (blas.h). With OpenBLAS's
 * pthreads build, its threads spin (sched_yield) for a while after each
 * call, and a training step makes hundreds of small GEMMs between
 * OpenMP-parallel loops: on a machine with as many cores as threads the two
 * pools took cores from each other. So OpenBLAS runs single-threaded and the
 * split into threads is done here, with OpenMP. */
#include "blas.h"
#include "internal.h"

#include <math.h>
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

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_ROWS_DOT_AVX512 1
#pragma GCC push_options
#pragma GCC target("avx512f,fma") /* fma: the 256-bit beta term; a Debug build has no -march */
#include <immintrin.h>

/* c[i] = alpha · (row i of B) · a (+ beta · c[i]; c is not read when beta
 * is 0, as in BLAS) for n rows of k floats, B row-major (row stride ldb),
 * a contiguous: y = W·x of a Linear layer at batch 1. Eight rows at a time,
 * each summed in 16 lanes (eight independent chains of fused multiply-adds
 * against x's 16 columns), the eight reduced together by one tree of hadds.
 * On Zen 4 at the decoding shapes of a narrow GPT (256 × 128, 384 × 128)
 * OpenBLAS 0.3.21's sgemv keeps four rows of two accumulators, one chain of
 * dependent FMAs per row, and is latency-bound (bench/RESULTS.md, issue 20). */
static void rows_dot_avx512(int n, int k, float alpha, const float *B, int ldb, const float *a,
                            float beta, float *c)
{
    const __mmask16 tail = (__mmask16)((1u << (k % 16)) - 1);
    int kf = k - k % 16, i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512 acc[8];
        for (int r = 0; r < 8; r++) acc[r] = _mm512_setzero_ps();
        for (int j = 0; j < kf; j += 16) {
            __m512 x = _mm512_loadu_ps(a + j);
            for (int r = 0; r < 8; r++)
                acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(B + (size_t)(i + r) * ldb + j), x, acc[r]);
        }
        if (tail) {
            __m512 x = _mm512_maskz_loadu_ps(tail, a + kf);
            for (int r = 0; r < 8; r++)
                acc[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, B + (size_t)(i + r) * ldb + kf), x,
                                         acc[r]);
        }
        /* the 16 lanes of row r folded to 8, then hadds: h holds, per
         * 128-bit half, partial sums of rows 0–3 and 4–7 */
        __m256 f[8];
        for (int r = 0; r < 8; r++)
            f[r] = _mm256_add_ps(_mm512_castps512_ps256(acc[r]),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r]), 1)));
        __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(f[0], f[1]), _mm256_hadd_ps(f[2], f[3]));
        __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(f[4], f[5]), _mm256_hadd_ps(f[6], f[7]));
        __m256 sums = _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20), _mm256_permute2f128_ps(h0, h1, 0x31));
        __m256 y = _mm256_mul_ps(_mm256_set1_ps(alpha), sums);
        if (beta != 0) y = _mm256_fmadd_ps(_mm256_set1_ps(beta), _mm256_loadu_ps(c + i), y);
        _mm256_storeu_ps(c + i, y);
    }
    for (; i < n; i++) { /* the last n mod 8 rows */
        __m512 acc = _mm512_setzero_ps();
        for (int j = 0; j < kf; j += 16)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(B + (size_t)i * ldb + j), _mm512_loadu_ps(a + j), acc);
        if (tail)
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, B + (size_t)i * ldb + kf),
                                  _mm512_maskz_loadu_ps(tail, a + kf), acc);
        float y = alpha * _mm512_reduce_add_ps(acc);
        c[i] = beta != 0 ? fmaf(beta, c[i], y) : y;
    }
}
#pragma GCC pop_options
#endif

/* One row of C (1 × n) = a (1 × k, stride inca) · op(B) as a matrix-vector
 * product: OpenBLAS's sgemm with m = 1 packs all of B first (at 2048 × 512
 * it was 10× slower than sgemv), and a single row is what decoding a
 * token at batch 1 multiplies. A Linear's product (B n × k row-major, a
 * contiguous) runs rows_dot_avx512 where the CPU has AVX-512. */
static void gemv_row(CBLAS_TRANSPOSE tb, int n, int k, float alpha, const float *a, int inca,
                     const float *B, int ldb, float beta, float *c)
{
#ifdef HAVE_ROWS_DOT_AVX512
    if (tb == CblasTrans && inca == 1 && __builtin_cpu_supports("avx512f")) {
        rows_dot_avx512(n, k, alpha, B, ldb, a, beta, c);
        return;
    }
#endif
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
