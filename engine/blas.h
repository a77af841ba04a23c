/* blas.h — the engine's one CPU GEMM entry point (blas.c). Private. */
#ifndef VENOM_BLAS_H
#define VENOM_BLAS_H

#include <cblas.h>

/* cblas_sgemm(CblasRowMajor, ...) with the same arguments, run on OpenMP's
 * threads: OpenBLAS itself is set to one thread (its own pthreads would
 * spin between calls, fighting OpenMP's for the cores), and a large product
 * is split into blocks of C rows (or columns) that OpenMP's threads compute
 * with one single-threaded call each. Called inside a parallel region, it
 * runs on the calling thread alone. With a progress hook set (internal.h),
 * a large product runs as consecutive slices with vn__progress() after
 * each. A Linear's one-row product (m = 1, B transposed, a contiguous)
 * runs blas.c's own AVX-512 loop where the CPU has it, other rows sgemv. */
void vn__sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
               const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
#endif
