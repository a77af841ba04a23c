/* csr_internal.h — the CSR matrix struct and the row kernels that csr.c
 * (construction, SpMM) and csr_saga.c (the SAGA-NN stages) share. */
#ifndef VENOM_CSR_INTERNAL_H
#define VENOM_CSR_INTERNAL_H

#include "internal.h"

#include <stdatomic.h>

/* Every array is a contiguous CPU i64/f32 tensor (a slice's are views into
 * its source's). The transpose and the device copies are built on first
 * need and published with a compare-and-swap, so threads sharing a
 * read-only matrix may race to build them: the loser frees its copy. */
struct vn_csr {
    int64_t rows, cols, nnz;
    vn_tensor *row_ptr; /* i64 (rows + 1) */
    vn_tensor *row_idx; /* i64 (nnz): the entry's row */
    vn_tensor *col_idx; /* i64 (nnz): the entry's column */
    vn_tensor *values;  /* f32 (nnz), or NULL: all ones */
    /* i64 (cols + 1 + nnz): the transpose's column pointers, then perm:
     * column j's entries are perm[tptr[j] .. tptr[j+1]), in row order. */
    _Atomic(vn_tensor *) transpose;
    _Atomic(vn_tensor *) cuda_row_ptr, cuda_col_idx; /* device copies for cuSPARSE */
};

/* The transpose blob of a (built now if needed); borrowed, lives as long
 * as a. NULL (message set) when out of memory. */
vn_tensor *csr__transpose(const vn_csr *a);
static inline const int64_t *csr__tptr(const vn_tensor *blob) { return vn_tensor_data(blob); }
static inline const int64_t *csr__tperm(const vn_tensor *blob, int64_t cols)
{
    return (const int64_t *)vn_tensor_data(blob) + cols + 1;
}

/* The segment sum behind SpMM and the gradients of scatter and gather:
 * y[s, :] = Σ_{k in ptr[s] .. ptr[s+1]} v(e) · x[src(e), :], with
 * e = perm ? perm[k] : k, v(e) = vals ? vals[e] : 1, src(e) = src ?
 * src[e] : e. y is (nseg, F); each segment is summed by one thread, in
 * order, so the result does not depend on the thread count. */
void csr__segment_sum(int64_t nseg, int64_t F, const int64_t *ptr, const int64_t *perm,
                      const int64_t *src, const float *vals, const float *x, float *y);

/* Checks shared by the ops: a usable matrix, and t (n, F...) f32 with
 * n = want (its rows named by `rows_name`); *F = the product of the rest. */
vn_status csr__check(const vn_csr *a, const char *op);
vn_status csr__check_rows(const vn_tensor *t, int64_t want, const char *op, const char *name,
                          const char *rows_name, unsigned allow, int64_t *F);
/* vn_csr_spmm for x (and values) on the CUDA device (csr_cuda.c). */
vn_tensor *csr__cuda_spmm(const vn_csr *a, const vn_tensor *values, const vn_tensor *x);
/* A new f32 tensor shaped like t with its first dim replaced by n. */
vn_tensor *csr__new_rows(const vn_tensor *t, int64_t n);

#endif
