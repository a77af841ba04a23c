/* csr_cuda.c — vn_csr_spmm on the CUDA device: cuSPARSE SpMM for Y = A·X
 * and for dX = Aᵀ·dY (through the transpose in CSR, its values gathered
 * by the permutation, so both products run the deterministic algorithm),
 * and the SDDMM kernel for dvalues (kernels/csr.cu). The index arrays are
 * copied to the device once per matrix and cached in it. */
#include "csr_internal.h"

/* The i64 CPU arrays parts[0..n) concatenated into one device tensor. */
static vn_tensor *device_blob(int n, const int64_t *const *parts, const int64_t *sizes)
{
    int64_t total = 0;
    for (int k = 0; k < n; k++) total += sizes[k];
    vn_tensor *host = vn__new(VN_I64, 1, &total);
    if (!host) return NULL;
    int64_t *h = vn_tensor_data(host);
    for (int k = 0; k < n; k++) {
        memcpy(h, parts[k], sizeof(int64_t) * (size_t)sizes[k]);
        h += sizes[k];
    }
    vn_tensor *dev = vn_to_device(host, VN_CUDA);
    vn_tensor_release(host);
    return dev;
}

/* *slot, built by make(a) on first use; the loser of a race frees its copy. */
static vn_tensor *cached(_Atomic(vn_tensor *) *slot, const vn_csr *a,
                         vn_tensor *(*make)(const vn_csr *))
{
    vn_tensor *t = atomic_load(slot);
    if (t) return t;
    if (!(t = make(a))) return NULL;
    vn_tensor *expected = NULL;
    if (!atomic_compare_exchange_strong(slot, &expected, t)) {
        vn_tensor_release(t);
        return expected;
    }
    return t;
}

static vn_tensor *make_cuda_a(const vn_csr *a)
{
    const int64_t *parts[3] = {vn_tensor_data(a->row_ptr), vn_tensor_data(a->col_idx),
                               vn_tensor_data(a->row_idx)};
    return device_blob(3, parts, (const int64_t[]){a->rows + 1, a->nnz, a->nnz});
}

static vn_tensor *make_cuda_t(const vn_csr *a)
{
    vn_tensor *t = csr__transpose(a);
    int64_t n = a->nnz;
    vn_tensor *trow = t ? vn__new(VN_I64, 1, &n) : NULL;
    if (!trow) return NULL;
    const int64_t *perm = csr__tperm(t, a->cols), *ri = vn_tensor_data(a->row_idx);
    int64_t *tr = vn_tensor_data(trow);
    for (int64_t k = 0; k < n; k++) tr[k] = ri[perm[k]];
    const int64_t *parts[3] = {csr__tptr(t), tr, perm};
    vn_tensor *d = device_blob(3, parts, (const int64_t[]){a->cols + 1, n, n});
    vn_tensor_release(trow);
    return d;
}

static const int64_t *dev_i64(const vn_tensor *t, int64_t at)
{
    return (const int64_t *)vn__ptr(t) + at;
}

/* The values A multiplies by, on the device: the given ones, A's own
 * (copied), or ones. A new reference. */
static vn_tensor *device_values(const vn_csr *a, const vn_tensor *values)
{
    if (values) return vn__plain_contiguous(values);
    if (a->values) return vn_to_device(a->values, VN_CUDA);
    vn_tensor *ones = vn__new_on(true, VN_F32, 1, &a->nnz);
    if (ones && vnk_fill(vn__ptr(ones), VN_F32, a->nnz, 1.0)) {
        vn_tensor_release(ones);
        return vn__cuda_errp("csr_spmm");
    }
    return ones;
}

/* Node: inputs x and the given values (NULL: A's own or ones, which get no
 * gradient on this path); saved the device arrays of A and of its
 * transpose, and the values used. */
enum { SAVED_A, SAVED_T, SAVED_VALUES };
struct csr_cuda_saved { int64_t rows, cols, nnz; };

static vn_status csr_cuda_spmm_backward(vn_node *node, const vn_tensor *gout)
{
    const struct csr_cuda_saved *sv = VN_SAVED_STATE(node, struct csr_cuda_saved);
    const vn_tensor *x = node->inputs[0], *da = node->saved[SAVED_A], *dt = node->saved[SAVED_T];
    int64_t F = vn__numel(x->ndim - 1, x->shape + 1), n = sv->nnz;
    vn_tensor *dy = vn__plain_contiguous(gout);
    vn_status st = dy ? VN_OK : VN_ERR_MEMORY;
    if (!st && vn__input_needs_grad(node, 0)) {
        vn_tensor *tv = vn__new_on(true, VN_F32, 1, &n);
        vn_tensor *dx = tv ? csr__new_rows(x, sv->cols) : NULL;
        if (dx && (vnk_gather_f32(vn__ptr(tv), vn__ptr(node->saved[SAVED_VALUES]),
                                  dev_i64(dt, sv->cols + 1 + n), n) ||
                   vnk_csr_spmm(vn__ptr(dx), dev_i64(dt, 0), dev_i64(dt, sv->cols + 1),
                                vn__ptr(tv), vn__ptr(dy), sv->cols, sv->rows, n, F))) {
            vn_tensor_release(dx);
            dx = NULL;
            vn__cuda_err("csr_spmm backward");
        }
        vn_tensor_release(tv);
        st = dx ? vn__accum(node, 0, dx) : vn_last_status();
    }
    if (!st && vn__input_needs_grad(node, 1)) {
        vn_tensor *xc = vn__plain_contiguous(x);
        vn_tensor *dv = xc ? vn__new_on(true, VN_F32, 1, &n) : NULL;
        if (dv && vnk_csr_sddmm(vn__ptr(dv), dev_i64(da, sv->rows + 1 + n),
                                dev_i64(da, sv->rows + 1), vn__ptr(dy), vn__ptr(xc), n, F)) {
            vn_tensor_release(dv);
            dv = NULL;
            vn__cuda_err("csr_spmm backward");
        }
        vn_tensor_release(xc);
        st = dv ? vn__accum(node, 1, dv) : vn_last_status();
    }
    vn_tensor_release(dy);
    return st;
}

vn_tensor *csr__cuda_spmm(const vn_csr *a, const vn_tensor *values, const vn_tensor *x)
{
    int64_t F = vn__numel(x->ndim - 1, x->shape + 1);
    vn_tensor *da = cached(&((vn_csr *)a)->cuda_a, a, make_cuda_a);
    vn_tensor *dt = da ? cached(&((vn_csr *)a)->cuda_t, a, make_cuda_t) : NULL;
    vn_tensor *vals = dt ? device_values(a, values) : NULL;
    vn_tensor *xc = vals ? vn__plain_contiguous(x) : NULL;
    vn_tensor *y = xc ? csr__new_rows(x, a->rows) : NULL;
    if (y && vnk_csr_spmm(vn__ptr(y), dev_i64(da, 0), dev_i64(da, a->rows + 1), vn__ptr(vals),
                          vn__ptr(xc), a->rows, a->cols, a->nnz, F)) {
        vn_tensor_release(y);
        y = vn__cuda_errp("csr_spmm");
    }
    vn_tensor_release(xc);
    vn_node *node = y ? vn__record(y, "csr_spmm", csr_cuda_spmm_backward, 2,
                                   (const vn_tensor *const[]){x, values})
                      : NULL;
    if (node) {
        node->saved[SAVED_A] = vn_tensor_retain(da);
        node->saved[SAVED_T] = vn_tensor_retain(dt);
        node->saved[SAVED_VALUES] = vn_tensor_retain(vals);
        *VN_SAVED_STATE(node, struct csr_cuda_saved) =
            (struct csr_cuda_saved){a->rows, a->cols, a->nnz};
    }
    vn_tensor_release(vals);
    return y;
}
