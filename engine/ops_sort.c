/* ops_sort.c — ordering along a dim: sort and topk, with the gradient of
 * the values sent back to the positions they came from. CPU only. */
#include "internal.h"

#include <stdlib.h>

/* One row being ordered: keys as doubles (exact for every dtype venom sorts:
 * f32, i32, u8, and i64 up to 2^53), positions 0..n-1. */
typedef struct {
    double key;
    int64_t pos;
} sort_item;

/* NaN counts as larger than every number (as in PyTorch and NumPy), and
 * ties keep their original order, so results never depend on qsort. */
static int cmp_key(double a, double b)
{
    bool na = a != a, nb = b != b;
    if (na || nb) return na - nb;
    return (a > b) - (a < b);
}
static int cmp_ascending(const void *pa, const void *pb)
{
    const sort_item *a = pa, *b = pb;
    int c = cmp_key(a->key, b->key);
    return c ? c : (a->pos > b->pos) - (a->pos < b->pos);
}
static int cmp_descending(const void *pa, const void *pb)
{
    const sort_item *a = pa, *b = pb;
    int c = cmp_key(b->key, a->key);
    return c ? c : (a->pos > b->pos) - (a->pos < b->pos);
}

/* What sort/topk's backward needs besides the indices (saved[0]). */
struct sort_saved {
    int dim;
};

/* g (the values' gradient) scattered into zeros of the input's shape at the
 * saved indices, along the saved dim. Works in the "dim last" layout the
 * forward used, then views it back. */
static vn_status sort_backward(vn_node *node, const vn_tensor *gout)
{
    const vn_tensor *x = node->inputs[0], *idx = node->saved[0];
    int dim = VN_SAVED_STATE(node, struct sort_saved)->dim;
    int64_t one = 1, k = idx->shape[idx->ndim - 1], n = x->ndim ? x->shape[dim] : 1;
    int64_t rows = k ? vn_tensor_numel(idx) / k : 0;
    /* A 0-d input was ordered as one element. */
    vn_tensor *gt = x->ndim ? vn_transpose(gout, dim, -1) : vn_reshape(gout, 1, &one);
    vn_tensor *g = gt ? vn__plain_contiguous(gt) : NULL;
    int64_t shape[VN_MAX_DIMS];
    memcpy(shape, idx->shape, sizeof shape);
    shape[idx->ndim - 1] = n;
    vn_tensor *dx = g ? vn_full(VN_F32, idx->ndim, shape, 0) : NULL;
    vn_tensor *back = NULL;
    if (dx) {
        const float *pg = vn__ptr(g);
        const int64_t *pi = vn__ptr(idx);
        float *pd = vn__ptr(dx);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < k; j++) pd[r * n + pi[r * k + j]] += pg[r * k + j];
        back = x->ndim ? vn_transpose(dx, dim, -1) : vn_reshape(dx, 0, NULL);
    }
    vn_status s = back ? vn__accum(node, 0, back) : VN_ERR_MEMORY; /* the failed call set the message */
    vn_tensor_release(gt);
    vn_tensor_release(g);
    vn_tensor_release(dx);
    return s;
}

/* The k first of each row along dim in the given order (k = -1: all of
 * them): values (t's dtype) and i64 indices, both with dim of size k. */
static vn_status order(const char *op, const vn_tensor *t, int64_t k, int dim, bool descending,
                       vn_tensor **values, vn_tensor **indices)
{
    if (!values || !indices) return vn__err(VN_ERR_ARG, "%s: values and indices must not be NULL", op);
    *values = *indices = NULL;
    vn_status s = vn__check_arg(t, op, "input", 0);
    if (s) return s;
    int ndim = t->ndim ? t->ndim : 1; /* a 0-d tensor orders as one element */
    if (vn__wrap_dim(ndim, &dim, op)) return VN_ERR_ARG;
    int64_t n = t->ndim ? t->shape[dim] : 1;
    if (k == -1 && !strcmp(op, "sort")) k = n;
    if (k < 0 || k > n)
        return vn__err(VN_ERR_ARG, "%s: k must be in [0, %lld] (the size of dim %d), got %lld", op,
                       (long long)n, dim, (long long)k);

    vn_tensor *t1 = t->ndim ? vn_tensor_retain((vn_tensor *)t) : vn_unsqueeze(t, 0);
    vn_tensor *tt = t1 ? vn_transpose(t1, dim, -1) : NULL;
    vn_tensor *x = tt ? vn__plain_contiguous(tt) : NULL;
    int64_t shape[VN_MAX_DIMS];
    vn_tensor *v = NULL, *ix = NULL;
    sort_item *items = NULL;
    if (x) {
        memcpy(shape, x->shape, sizeof shape);
        shape[x->ndim - 1] = k;
        v = vn__new(t->dtype, x->ndim, shape);
        ix = v ? vn__new(VN_I64, x->ndim, shape) : NULL;
        items = ix ? malloc(sizeof *items * (size_t)(n ? n : 1)) : NULL;
        if (ix && !items) vn__err(VN_ERR_MEMORY, "%s: out of memory for a row of %lld", op, (long long)n);
    }
    s = items ? VN_OK : VN_ERR_MEMORY;
    if (!s) {
        int64_t rows = n ? vn_tensor_numel(x) / n : 0;
        int64_t *pi = vn__ptr(ix);
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t j = 0; j < n; j++) items[j] = (sort_item){vn__load(x, r * n + j), j};
            qsort(items, (size_t)n, sizeof *items, descending ? cmp_descending : cmp_ascending);
            for (int64_t j = 0; j < k; j++) {
                vn__store(v, r * k + j, items[j].key);
                pi[r * k + j] = items[j].pos;
            }
        }
    }
    free(items);
    /* Back to the caller's layout (dim in place, a 0-d input stays 0-d). */
    vn_tensor *vt = s ? NULL : vn_transpose(v, dim, -1), *it = vt ? vn_transpose(ix, dim, -1) : NULL;
    vn_tensor *vout = it ? vn_contiguous(vt) : NULL, *iout = vout ? vn_contiguous(it) : NULL;
    if (iout && !t->ndim) {
        vn_tensor *a = vn_squeeze(vout, 0), *b = a ? vn_squeeze(iout, 0) : NULL;
        vn_tensor_release(vout);
        vn_tensor_release(iout);
        vout = a, iout = b;
        if (!b) vn_tensor_release(a), vout = NULL;
    }
    if (iout && t->dtype == VN_F32) {
        vn_node *node = vn__record(vout, op, sort_backward, 1, &t);
        if (node) {
            VN_SAVED_STATE(node, struct sort_saved)->dim = dim;
            node->saved[0] = vn_tensor_retain(ix); /* the "dim last" indices backward scatters with */
        }
    }
    vn_tensor_release(t1);
    vn_tensor_release(tt);
    vn_tensor_release(x);
    vn_tensor_release(v);
    vn_tensor_release(ix);
    vn_tensor_release(vt);
    vn_tensor_release(it);
    if (!iout) {
        vn_tensor_release(vout);
        return s ? s : VN_ERR_MEMORY;
    }
    *values = vout;
    *indices = iout;
    return VN_OK;
}

vn_status vn_sort(const vn_tensor *t, int dim, bool descending, vn_tensor **values, vn_tensor **indices)
{
    return order("sort", t, -1, dim, descending, values, indices);
}

vn_status vn_topk(const vn_tensor *t, int64_t k, int dim, bool largest, vn_tensor **values,
                  vn_tensor **indices)
{
    return order("topk", t, k, dim, largest, values, indices);
}
