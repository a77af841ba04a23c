/* views.c — shape manipulation: broadcasting rules, views that share
 * storage (reshape, transpose, permute, narrow, select, (un)squeeze, expand)
 * and the copies (contiguous, clone, to_dtype, cat, index_select), each with
 * its backward rule beside it. */
#include "internal.h"

/* Views and copies work on every device and dtype. */
#define VN_ANY (VN_ALLOW_CUDA | VN_ALLOW_HALF)

#include <stdlib.h>

/* ---- broadcasting -------------------------------------------------------- */

vn_status vn__broadcast_shape(const char *op, int na, const int64_t *sa, int nb,
                              const int64_t *sb, int *nout, int64_t *sout)
{
    int n = na > nb ? na : nb;
    for (int k = 0; k < n; k++) { /* k counts from the right */
        int64_t a = k < na ? sa[na - 1 - k] : 1, b = k < nb ? sb[nb - 1 - k] : 1;
        if (a != b && a != 1 && b != 1) {
            return vn__err(VN_ERR_SHAPE,
                           "%s: shapes %s and %s do not broadcast (dim %d from the right: %lld vs %lld)",
                           op, vn__shape(na, sa), vn__shape(nb, sb), k + 1, (long long)a, (long long)b);
        }
        sout[n - 1 - k] = a == 1 ? b : a;
    }
    if (vn__check_shape(op, n, sout)) {
        /* vn__err formats before it stores, so it may quote the last error */
        return vn__err(VN_ERR_SHAPE, "%s (broadcasting %s and %s)", vn_last_error(),
                       vn__shape(na, sa), vn__shape(nb, sb));
    }
    *nout = n;
    return VN_OK;
}

void vn__broadcast_strides(const vn_tensor *t, int ndim, const int64_t *shape, int64_t *strides)
{
    int lead = ndim - t->ndim;
    for (int d = 0; d < ndim; d++) {
        int td = d - lead;
        strides[d] = (td < 0 || (t->shape[td] == 1 && shape[d] != 1)) ? 0 : t->strides[td];
    }
}

/* ---- views --------------------------------------------------------------- */

/* A view of t with a new shape/strides/offset, recorded with `backward`. */
static vn_tensor *make_view(const vn_tensor *t, int ndim, const int64_t *shape,
                            const int64_t *strides, int64_t offset)
{
    vn_tensor *v = vn__alias(t);
    if (!v) return NULL;
    v->ndim = ndim;
    memset(v->shape, 0, sizeof v->shape);
    memset(v->strides, 0, sizeof v->strides);
    if (ndim) {
        memcpy(v->shape, shape, sizeof(int64_t) * (size_t)ndim);
        memcpy(v->strides, strides, sizeof(int64_t) * (size_t)ndim);
    }
    v->offset = offset;
    return v;
}

/* Gradient of any op that only reshapes: reshape g back to the input. */
static vn_status reshape_backward(vn_node *n, const vn_tensor *g)
{
    const vn_tensor *x = n->inputs[0];
    return vn__accum(n, 0, vn_reshape(g, x->ndim, x->shape));
}

/* Strides for viewing t with `shape` without copying, if possible. t's dims
 * fall into chunks that are contiguous among themselves; a new shape is a
 * view exactly when its dims re-split each chunk (scanning from the right). */
static bool view_strides(const vn_tensor *t, int ndim, const int64_t *shape, int64_t *strides)
{
    if (vn_tensor_is_contiguous(t) || t->ndim == 0) {
        vn__contig_strides(ndim, shape, strides);
        return true;
    }
    int vd = ndim - 1;
    int64_t base = t->strides[t->ndim - 1], tn = 1, vn = 1;
    for (int td = t->ndim - 1; td >= 0; td--) {
        tn *= t->shape[td];
        bool chunk_ends = td == 0 || (t->shape[td - 1] != 1 && t->strides[td - 1] != tn * base);
        if (!chunk_ends) continue;
        while (vd >= 0 && (vn < tn || shape[vd] == 1)) {
            strides[vd] = vn * base;
            vn *= shape[vd];
            vd--;
        }
        if (vn != tn) return false;
        if (td > 0) {
            base = t->strides[td - 1];
            tn = vn = 1;
        }
    }
    return vd < 0;
}

static vn_status infer_shape(const char *op, const vn_tensor *t, int ndim, const int64_t *in,
                             int64_t *out)
{
    if (ndim < 0 || ndim > VN_MAX_DIMS)
        return vn__err(VN_ERR_ARG, "%s: ndim must be 0..%d, got %d", op, VN_MAX_DIMS, ndim);
    if (ndim > 0 && !in) return vn__err(VN_ERR_ARG, "%s: shape is NULL", op);
    int infer = -1;
    int64_t known = 1;
    for (int d = 0; d < ndim; d++) {
        out[d] = in[d];
        if (in[d] == -1) {
            if (infer >= 0) return vn__err(VN_ERR_ARG, "%s: only one dim can be -1", op);
            infer = d;
        } else if (in[d] < 0) {
            return vn__err(VN_ERR_ARG, "%s: invalid size %lld at dim %d", op, (long long)in[d], d);
        } else {
            known *= in[d];
        }
    }
    int64_t numel = vn_tensor_numel(t);
    if (infer >= 0) {
        if (known == 0 || numel % known)
            return vn__err(VN_ERR_SHAPE, "%s: cannot view %lld elements of shape %s as %s", op,
                           (long long)numel, vn__shape(t->ndim, t->shape), vn__shape(ndim, in));
        out[infer] = numel / known;
    } else if (vn__check_shape(op, ndim, in)) {
        return VN_ERR_ARG;
    } else if (known != numel) {
        return vn__err(VN_ERR_SHAPE, "%s: shape %s has %lld elements but the target %s has %lld", op,
                       vn__shape(t->ndim, t->shape), (long long)numel, vn__shape(ndim, in),
                       (long long)known);
    }
    return VN_OK;
}

static vn_tensor *reshape_impl(const vn_tensor *t, int ndim, const int64_t *in, bool allow_copy,
                               const char *op)
{
    if (vn__check_for(t, op, VN_ANY)) return NULL;
    int64_t shape[VN_MAX_DIMS], strides[VN_MAX_DIMS];
    if (infer_shape(op, t, ndim, in, shape)) return NULL;
    vn_tensor *out;
    if (view_strides(t, ndim, shape, strides)) {
        out = make_view(t, ndim, shape, strides, t->offset);
    } else if (allow_copy) {
        vn_tensor *c = vn__new_like(t, t->dtype, t->ndim, t->shape);
        if (!c) return NULL;
        vn_tensor_copy_(c, t);
        vn__contig_strides(ndim, shape, strides);
        out = make_view(c, ndim, shape, strides, 0);
        vn_tensor_release(c);
    } else {
        return vn__errp(VN_ERR_SHAPE, "%s: a tensor of shape %s with these strides cannot be viewed "
                        "without a copy; use reshape or contiguous()", op, vn__shape(t->ndim, t->shape));
    }
    if (out) vn__record(out, op, reshape_backward, 1, &t);
    return out;
}

vn_tensor *vn_reshape(const vn_tensor *t, int ndim, const int64_t *shape)
{
    return reshape_impl(t, ndim, shape, true, "reshape");
}

vn_tensor *vn_view(const vn_tensor *t, int ndim, const int64_t *shape)
{
    return reshape_impl(t, ndim, shape, false, "view");
}

struct permute_saved { int dims[VN_MAX_DIMS]; }; /* wrapped to [0, ndim) */

static vn_status permute_backward(vn_node *n, const vn_tensor *g)
{
    const struct permute_saved *saved = VN_SAVED_STATE(n, struct permute_saved);
    int inverse[VN_MAX_DIMS];
    for (int d = 0; d < g->ndim; d++) inverse[saved->dims[d]] = d;
    return vn__accum(n, 0, vn_permute(g, inverse));
}

vn_tensor *vn_permute(const vn_tensor *t, const int *dims)
{
    if (vn__check_for(t, "permute", VN_ANY)) return NULL;
    if (!dims && t->ndim > 0) return vn__errp(VN_ERR_ARG, "permute: dims is NULL");
    int64_t shape[VN_MAX_DIMS], strides[VN_MAX_DIMS];
    bool seen[VN_MAX_DIMS] = {false};
    for (int d = 0; d < t->ndim; d++) {
        int s = dims[d];
        if (vn__wrap_dim(t->ndim, &s, "permute")) return NULL;
        if (seen[s]) return vn__errp(VN_ERR_ARG, "permute: dim %d appears twice", s);
        seen[s] = true;
        shape[d] = t->shape[s];
        strides[d] = t->strides[s];
    }
    vn_tensor *out = make_view(t, t->ndim, shape, strides, t->offset);
    vn_node *n = out ? vn__record(out, "permute", permute_backward, 1, &t) : NULL;
    if (n) {
        struct permute_saved *saved = VN_SAVED_STATE(n, struct permute_saved);
        for (int d = 0; d < t->ndim; d++) {
            int s = dims[d];
            vn__wrap_dim(t->ndim, &s, "permute");
            saved->dims[d] = s;
        }
    }
    return out;
}

vn_tensor *vn_transpose(const vn_tensor *t, int d0, int d1)
{
    if (vn__check_for(t, "transpose", VN_ANY)) return NULL;
    if (vn__wrap_dim(t->ndim, &d0, "transpose") || vn__wrap_dim(t->ndim, &d1, "transpose"))
        return NULL;
    int dims[VN_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) dims[d] = d;
    dims[d0] = d1;
    dims[d1] = d0;
    return vn_permute(t, dims);
}

struct narrow_saved { int dim; int64_t start, length; };

/* Backward of narrow/select: the gradient lands in a zero tensor of the
 * input's shape, on the input's device, at the positions the view covered. */
static vn_status narrow_backward(vn_node *n, const vn_tensor *g)
{
    const struct narrow_saved *saved = VN_SAVED_STATE(n, struct narrow_saved);
    const vn_tensor *x = n->inputs[0];
    vn_tensor *full = vn_full_on(vn__is_cuda(x) ? VN_CUDA : VN_CPU, VN_F32, x->ndim, x->shape, 0);
    if (!full) return VN_ERR_MEMORY;
    vn_tensor *part = vn_narrow(full, saved->dim, saved->start, saved->length);
    vn_status s = VN_ERR_MEMORY;
    if (part) {
        vn_tensor *gv = vn_reshape(g, part->ndim, part->shape); /* select: re-add the dim */
        s = gv ? vn_tensor_copy_(part, gv) : VN_ERR_MEMORY;
        vn_tensor_release(gv);
    }
    vn_tensor_release(part);
    if (s) {
        vn_tensor_release(full);
        return s;
    }
    return vn__accum(n, 0, full);
}

static vn_tensor *narrow_impl(const vn_tensor *t, int dim, int64_t start, int64_t length,
                              bool drop_dim, const char *op)
{
    if (vn__check_for(t, op, VN_ANY)) return NULL;
    if (t->ndim == 0) return vn__errp(VN_ERR_ARG, "%s: cannot index a 0-d tensor", op);
    if (vn__wrap_dim(t->ndim, &dim, op)) return NULL;
    int64_t size = t->shape[dim];
    if (start < 0 || length < 0 || start + length > size)
        return vn__errp(VN_ERR_ARG, "%s: range [%lld, %lld) out of bounds for dim %d of size %lld", op,
                        (long long)start, (long long)(start + length), dim, (long long)size);
    int64_t shape[VN_MAX_DIMS], strides[VN_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (d == dim && drop_dim) continue;
        shape[nd] = d == dim ? length : t->shape[d];
        strides[nd++] = t->strides[d];
    }
    vn_tensor *out = make_view(t, nd, shape, strides, t->offset + start * t->strides[dim]);
    vn_node *n = out ? vn__record(out, op, narrow_backward, 1, &t) : NULL;
    if (n) *VN_SAVED_STATE(n, struct narrow_saved) = (struct narrow_saved){dim, start, length};
    return out;
}

vn_tensor *vn_narrow(const vn_tensor *t, int dim, int64_t start, int64_t length)
{
    return narrow_impl(t, dim, start, length, false, "narrow");
}

vn_tensor *vn_select(const vn_tensor *t, int dim, int64_t index)
{
    if (t && t->storage && t->ndim > 0) {
        int d = dim;
        if (!vn__wrap_dim(t->ndim, &d, "select") && (index < 0 || index >= t->shape[d]))
            return vn__errp(VN_ERR_ARG, "select: index %lld out of range for dim %d of size %lld",
                            (long long)index, d, (long long)t->shape[d]);
    }
    return narrow_impl(t, dim, index, 1, true, "select");
}

vn_tensor *vn_unsqueeze(const vn_tensor *t, int dim)
{
    if (vn__check_for(t, "unsqueeze", VN_ANY)) return NULL;
    if (t->ndim == VN_MAX_DIMS) return vn__errp(VN_ERR_ARG, "unsqueeze: already %d dims", VN_MAX_DIMS);
    if (vn__wrap_dim(t->ndim + 1, &dim, "unsqueeze")) return NULL;
    int64_t shape[VN_MAX_DIMS];
    for (int d = 0, k = 0; d <= t->ndim; d++) shape[d] = d == dim ? 1 : t->shape[k++];
    return reshape_impl(t, t->ndim + 1, shape, false, "unsqueeze");
}

vn_tensor *vn_squeeze(const vn_tensor *t, int dim)
{
    if (vn__check_for(t, "squeeze", VN_ANY)) return NULL;
    if (t->ndim == 0) return vn__errp(VN_ERR_ARG, "squeeze: a 0-d tensor has no dim to remove");
    if (vn__wrap_dim(t->ndim, &dim, "squeeze")) return NULL;
    if (t->shape[dim] != 1)
        return vn__errp(VN_ERR_SHAPE, "squeeze: dim %d has size %lld, expected 1", dim,
                        (long long)t->shape[dim]);
    int64_t shape[VN_MAX_DIMS];
    for (int d = 0, k = 0; d < t->ndim; d++)
        if (d != dim) shape[k++] = t->shape[d];
    return reshape_impl(t, t->ndim - 1, shape, false, "squeeze");
}

static vn_status expand_backward(vn_node *n, const vn_tensor *g)
{
    return vn__accum(n, 0, vn_tensor_retain((vn_tensor *)g)); /* vn__accum sums it down */
}

vn_tensor *vn_expand(const vn_tensor *t, int ndim, const int64_t *shape)
{
    if (vn__check_for(t, "expand", VN_ANY)) return NULL;
    int nd;
    int64_t out_shape[VN_MAX_DIMS], strides[VN_MAX_DIMS];
    if (ndim < t->ndim || ndim > VN_MAX_DIMS)
        return vn__errp(VN_ERR_SHAPE, "expand: cannot expand %d dims to %d", t->ndim, ndim);
    if (ndim > 0 && !shape) return vn__errp(VN_ERR_ARG, "expand: shape is NULL");
    if (vn__broadcast_shape("expand", t->ndim, t->shape, ndim, shape, &nd, out_shape)) return NULL;
    if (memcmp(out_shape, shape, sizeof(int64_t) * (size_t)ndim))
        return vn__errp(VN_ERR_SHAPE, "expand: shape %s cannot be expanded to %s",
                        vn__shape(t->ndim, t->shape), vn__shape(ndim, shape));
    vn__broadcast_strides(t, ndim, shape, strides);
    vn_tensor *out = make_view(t, ndim, shape, strides, t->offset);
    if (out) vn__record(out, "expand", expand_backward, 1, &t);
    return out;
}

/* ---- copies -------------------------------------------------------------- */

static vn_status identity_backward(vn_node *n, const vn_tensor *g)
{
    return vn__accum(n, 0, vn_tensor_retain((vn_tensor *)g));
}

vn_tensor *vn_clone(const vn_tensor *t)
{
    if (vn__check_for(t, "clone", VN_ANY)) return NULL;
    vn_tensor *out = vn__new_like(t, t->dtype, t->ndim, t->shape);
    if (!out) return NULL;
    vn_tensor_copy_(out, t);
    vn__record(out, "clone", identity_backward, 1, &t);
    return out;
}

vn_tensor *vn__plain_contiguous(const vn_tensor *t)
{
    if (vn_tensor_is_contiguous(t)) return vn_tensor_retain((vn_tensor *)t);
    vn_tensor *c = vn__new_like(t, t->dtype, t->ndim, t->shape);
    if (c && vn_tensor_copy_(c, t)) {
        vn_tensor_release(c);
        return NULL;
    }
    return c;
}

vn_tensor *vn_contiguous(const vn_tensor *t)
{
    if (vn__check_for(t, "contiguous", VN_ANY)) return NULL;
    if (vn_tensor_is_contiguous(t)) return vn_tensor_retain((vn_tensor *)t);
    return vn_clone(t);
}

vn_tensor *vn_to_dtype(const vn_tensor *t, vn_dtype dtype)
{
    if (vn__check_for(t, "to_dtype", VN_ANY)) return NULL;
    if (dtype < VN_F32 || dtype > VN_F16)
        return vn__errp(VN_ERR_DTYPE, "to_dtype: unknown dtype %d", (int)dtype);
    if (dtype == t->dtype) return vn_clone(t);
    vn_tensor *out = vn__new_like(t, dtype, t->ndim, t->shape);
    if (out) vn_tensor_copy_(out, t); /* int targets are not differentiable: no node */
    return out;
}

/* What cat and index_select save: the dim they work along. */
struct dim_saved { int dim; };

static vn_status cat_backward(vn_node *n, const vn_tensor *g)
{
    int dim = VN_SAVED_STATE(n, struct dim_saved)->dim;
    int64_t start = 0;
    vn_status s = VN_OK;
    for (int k = 0; k < n->ninputs && !s; k++) {
        int64_t len = n->inputs[k]->shape[dim];
        if (vn__input_needs_grad(n, k)) {
            vn_tensor *part = vn_narrow(g, dim, start, len);
            s = part ? vn__accum(n, k, vn_contiguous(part)) : VN_ERR_MEMORY;
            vn_tensor_release(part);
        }
        start += len;
    }
    return s;
}

/* cat along dim > 0 of CUDA tensors, which can only be written whole: the
 * same cat along dim 0 of the tensors with dims 0 and dim swapped, swapped
 * back into a contiguous result. Recorded ops throughout, so the gradient
 * follows without a rule of its own. */
static vn_tensor *cat_cuda_inner(vn_tensor *const *ts, int n, int dim)
{
    vn_tensor **sw = calloc((size_t)n, sizeof *sw), *flat = NULL, *back = NULL, *out = NULL;
    if (!sw) return vn__errp(VN_ERR_MEMORY, "cat: out of memory");
    int k = 0;
    while (k < n && (sw[k] = vn_transpose(ts[k], 0, dim))) k++;
    if (k == n) flat = vn_cat(sw, n, 0);
    if (flat) back = vn_transpose(flat, 0, dim);
    if (back) out = vn_contiguous(back);
    for (int j = 0; j < k; j++) vn_tensor_release(sw[j]);
    free(sw);
    vn_tensor_release(flat);
    vn_tensor_release(back);
    return out;
}

vn_tensor *vn_cat(vn_tensor *const *ts, int n, int dim)
{
    if (n < 1 || !ts) return vn__errp(VN_ERR_ARG, "cat: expected at least one tensor, got %d", n);
    for (int k = 0; k < n; k++)
        if (vn__check_for(ts[k], "cat", VN_ANY)) return NULL;
    const vn_tensor *a = ts[0];
    if (a->ndim == 0) return vn__errp(VN_ERR_ARG, "cat: cannot concatenate 0-d tensors");
    if (vn__same_device_strict("cat", n, (const vn_tensor *const *)ts, NULL, NULL)) return NULL;
    if (vn__wrap_dim(a->ndim, &dim, "cat")) return NULL;
    int64_t shape[VN_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[dim] = 0;
    for (int k = 0; k < n; k++) {
        const vn_tensor *b = ts[k];
        bool ok = b->ndim == a->ndim && b->dtype == a->dtype;
        for (int d = 0; ok && d < a->ndim; d++) ok = d == dim || b->shape[d] == a->shape[d];
        if (!ok)
            return vn__errp(VN_ERR_SHAPE, "cat: tensor %d (%s %s) does not match tensor 0 (%s %s) "
                            "outside dim %d", k, vn_dtype_name(b->dtype), vn__shape(b->ndim, b->shape),
                            vn_dtype_name(a->dtype), vn__shape(a->ndim, a->shape), dim);
        shape[dim] += b->shape[dim];
    }
    if (vn__is_cuda(a) && dim != 0) return cat_cuda_inner(ts, n, dim);
    vn_tensor *out = vn__new_like(a, a->dtype, a->ndim, shape);
    if (!out) return NULL;
    int64_t start = 0;
    bool was = vn_set_grad_enabled(false);
    vn_status s = VN_OK;
    for (int k = 0; k < n && !s; k++) {
        vn_tensor *part = vn_narrow(out, dim, start, ts[k]->shape[dim]);
        s = part ? vn_tensor_copy_(part, ts[k]) : vn_last_status();
        vn_tensor_release(part);
        start += ts[k]->shape[dim];
    }
    vn_set_grad_enabled(was);
    if (s) {
        vn_tensor_release(out);
        return vn__errp(s, "%s", vn_last_error());
    }
    /* A node holds at most VN_NODE_INPUTS inputs: record cat only then. */
    if (n <= VN_NODE_INPUTS) {
        vn_node *node = vn__record(out, "cat", cat_backward, n, (const vn_tensor *const *)ts);
        if (node) VN_SAVED_STATE(node, struct dim_saved)->dim = dim;
    } else {
        for (int k = 0; k < n; k++)
            if (vn__needs_grad(ts[k])) {
                vn_tensor_release(out);
                return vn__errp(VN_ERR_ARG, "cat: with gradients, at most %d tensors at once "
                                "(got %d); concatenate in steps", VN_NODE_INPUTS, n);
            }
    }
    return out;
}

/* Each tensor gets a dim of size 1 at dim, then they are concatenated along
 * it. A node holds at most VN_NODE_INPUTS inputs, so with gradients the cat
 * runs in rounds of that many (a tree of cats); without, in one. */
vn_tensor *vn_stack(vn_tensor *const *ts, int n, int dim)
{
    if (n < 1 || !ts) return vn__errp(VN_ERR_ARG, "stack: expected at least one tensor, got %d", n);
    for (int k = 0; k < n; k++)
        if (vn__check_for(ts[k], "stack", VN_ANY)) return NULL;
    const vn_tensor *a = ts[0];
    for (int k = 1; k < n; k++) {
        const vn_tensor *b = ts[k];
        if (b->ndim != a->ndim || b->dtype != a->dtype ||
            memcmp(b->shape, a->shape, sizeof(int64_t) * (size_t)a->ndim))
            return vn__errp(VN_ERR_SHAPE, "stack: tensor %d (%s %s) does not match tensor 0 (%s %s); "
                            "stack needs one shape and dtype", k, vn_dtype_name(b->dtype),
                            vn__shape(b->ndim, b->shape), vn_dtype_name(a->dtype), vn__shape(a->ndim, a->shape));
    }
    if (vn__same_device_strict("stack", n, (const vn_tensor *const *)ts, NULL, NULL)) return NULL;
    if (a->ndim == VN_MAX_DIMS)
        return vn__errp(VN_ERR_ARG, "stack: the tensors have %d dims already, the most a tensor has",
                        VN_MAX_DIMS);
    if (vn__wrap_dim(a->ndim + 1, &dim, "stack")) return NULL;
    vn_tensor **parts = calloc((size_t)n, sizeof *parts);
    if (!parts) return vn__errp(VN_ERR_MEMORY, "stack: out of memory");
    int m = 0, group = n;
    while (m < n && (parts[m] = vn_unsqueeze(ts[m], dim))) m++;
    for (int k = 0; k < n; k++)
        if (vn__needs_grad(ts[k])) group = VN_NODE_INPUTS;
    bool ok = m == n;
    do { /* one round: parts[k..k+group) → parts[k / group]; one tensor is copied too */
        int w = 0;
        for (int k = 0; k < m; k += group) {
            int len = m - k < group ? m - k : group;
            vn_tensor *c = ok ? vn_cat(parts + k, len, dim) : NULL;
            ok = c != NULL;
            for (int j = k; j < k + len; j++) vn_tensor_release(parts[j]);
            parts[w++] = c;
        }
        m = w;
    } while (ok && m > 1);
    vn_tensor *out = ok ? parts[0] : NULL;
    for (int k = ok ? 1 : 0; k < m; k++) vn_tensor_release(parts[k]);
    free(parts);
    return out;
}

/* The index_select kernels of kernels/ view t as (outer, size, inner) around
 * dim; the index is contiguous. */
static void around(const vn_tensor *t, int dim, int64_t *outer, int64_t *inner)
{
    *outer = *inner = 1;
    for (int d = 0; d < dim; d++) *outer *= t->shape[d];
    for (int d = dim + 1; d < t->ndim; d++) *inner *= t->shape[d];
}

static vn_status index_select_backward_cuda(vn_node *n, const vn_tensor *g)
{
    const vn_tensor *x = n->inputs[0], *idx = n->saved[0];
    int dim = VN_SAVED_STATE(n, struct dim_saved)->dim;
    int64_t outer, inner;
    around(x, dim, &outer, &inner);
    vn_tensor *gc = vn__plain_contiguous(g);
    vn_tensor *full = gc ? vn__new_like(x, VN_F32, x->ndim, x->shape) : NULL;
    if (full && vnk_index_add(vn__ptr(full), vn__ptr(gc), vn__ptr(idx), idx->dtype, outer,
                              x->shape[dim], inner, idx->shape[0])) {
        vn_tensor_release(full);
        full = vn__cuda_errp("index_select backward");
    }
    vn_tensor_release(gc);
    return vn__accum(n, 0, full);
}

/* index_select on the GPU: the index range is checked there too and the
 * first bad entry comes back for the message. */
static vn_tensor *index_select_cuda(const vn_tensor *t, int dim, const vn_tensor *index)
{
    int64_t outer, inner, m = index->shape[0], size = t->shape[dim], bad = -1, value = 0;
    around(t, dim, &outer, &inner);
    vn_tensor *idx = vn__plain_contiguous(index), *x = idx ? vn__plain_contiguous(t) : NULL;
    if (!x) {
        vn_tensor_release(idx);
        return NULL;
    }
    vn_tensor *out = NULL;
    if (vnk_check_targets(&bad, &value, vn__ptr(idx), idx->dtype, m, size)) {
        vn__cuda_err("index_select");
    } else if (bad >= 0) {
        vn__err(VN_ERR_ARG, "index_select: index[%lld] = %lld out of range for dim %d of size %lld",
                (long long)bad, (long long)value, dim, (long long)size);
    } else {
        int64_t shape[VN_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        shape[dim] = m;
        out = vn__new_like(t, t->dtype, t->ndim, shape);
        if (out && vnk_index_select(vn__ptr(out), vn__ptr(x), t->dtype, vn__ptr(idx), idx->dtype,
                                    outer, size, inner, m)) {
            vn_tensor_release(out);
            out = vn__cuda_errp("index_select");
        }
    }
    const vn_tensor *in[2] = {t, index};
    vn_node *n = out ? vn__record(out, "index_select", index_select_backward_cuda, 2, in) : NULL;
    if (n) {
        VN_SAVED_STATE(n, struct dim_saved)->dim = dim;
        n->saved[0] = vn_tensor_retain(idx);
    }
    vn_tensor_release(idx);
    vn_tensor_release(x);
    return out;
}

static vn_status index_select_backward(vn_node *n, const vn_tensor *g)
{
    const vn_tensor *x = n->inputs[0], *idx = n->inputs[1];
    int dim = VN_SAVED_STATE(n, struct dim_saved)->dim;
    int64_t outer, inner;
    around(x, dim, &outer, &inner);
    vn_tensor *gc = vn__plain_contiguous(g);
    vn_tensor *full = gc ? vn_zeros(VN_F32, x->ndim, x->shape) : NULL;
    int64_t *rows = full ? vn__index_list(idx) : NULL, m = idx->shape[0], size = x->shape[dim];
    for (int64_t o = 0; rows && o < outer; o++) /* scatter-add: repeats accumulate */
        vn__scatter_add_rows_f32(VN_F32_PTR(full) + o * size * inner, VN_F32_PTR(gc) + o * m * inner, rows,
                                 NULL, m, inner);
    if (!rows) vn_tensor_release(full), full = NULL;
    free(rows);
    vn_tensor_release(gc);
    return full ? vn__accum(n, 0, full) : VN_ERR_MEMORY;
}

vn_tensor *vn_index_select(const vn_tensor *t, int dim, const vn_tensor *index)
{
    const vn_tensor *both[2] = {t, index};
    bool cuda;
    if (vn__check_for(t, "index_select", VN_ALLOW_CUDA) ||
        vn__check_for(index, "index_select: index", VN_ALLOW_CUDA) ||
        vn__same_device_strict("index_select", 2, both, (const char *[]){"input", "index"}, &cuda))
        return NULL;
    if (index->dtype != VN_I64 && index->dtype != VN_I32)
        return vn__errp(VN_ERR_DTYPE, "index_select: index must be i32 or i64, got %s",
                        vn_dtype_name(index->dtype));
    if (index->ndim != 1)
        return vn__errp(VN_ERR_SHAPE, "index_select: index must be 1-d, got %d dims", index->ndim);
    if (t->ndim == 0) return vn__errp(VN_ERR_ARG, "index_select: cannot index a 0-d tensor");
    if (vn__wrap_dim(t->ndim, &dim, "index_select")) return NULL;
    if (cuda) return index_select_cuda(t, dim, index);
    int64_t m = index->shape[0], size = t->shape[dim];
    for (int64_t k = 0; k < m; k++) {
        int64_t v = (int64_t)vn__load(index, vn__offset_of(index, k));
        if (v < 0 || v >= size)
            return vn__errp(VN_ERR_ARG, "index_select: index[%lld] = %lld out of range for dim %d "
                            "of size %lld", (long long)k, (long long)v, dim, (long long)size);
    }
    int64_t shape[VN_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[dim] = m;
    vn_tensor *out = vn__new_like(t, t->dtype, t->ndim, shape);
    if (!out) return NULL;
    /* Copy slab by slab: for dim 0 of a contiguous tensor each slab is one
     * memcpy (the DataLoader's batch gather). */
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < dim; d++) outer *= t->shape[d];
    for (int d = dim + 1; d < t->ndim; d++) inner *= t->shape[d];
    size_t es = vn_dtype_size(t->dtype);
    if (vn_tensor_is_contiguous(t)) {
        const char *src = vn_tensor_data(t);
        char *dst = vn_tensor_data(out);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t k = 0; k < m; k++) {
                int64_t v = (int64_t)vn__load(index, vn__offset_of(index, k));
                memcpy(dst + (size_t)((o * m + k) * inner) * es,
                       src + (size_t)((o * size + v) * inner) * es, (size_t)inner * es);
            }
    } else {
        bool was = vn_set_grad_enabled(false);
        for (int64_t k = 0; k < m; k++) {
            int64_t v = (int64_t)vn__load(index, vn__offset_of(index, k));
            vn_tensor *src = vn_select(t, dim, v), *dst = vn_select(out, dim, k);
            vn_tensor_copy_(dst, src);
            vn_tensor_release(src);
            vn_tensor_release(dst);
        }
        vn_set_grad_enabled(was);
    }
    const vn_tensor *in[2] = {t, index};
    vn_node *n = vn__record(out, "index_select", index_select_backward, 2, in);
    if (n) VN_SAVED_STATE(n, struct dim_saved)->dim = dim;
    return out;
}

/* ---- flatten ------------------------------------------------------------------ */

vn_tensor *vn_flatten(const vn_tensor *x, int start_dim, int end_dim)
{
    if (vn__check_for(x, "flatten: input", VN_ALLOW_CUDA | VN_ALLOW_HALF)) return NULL;
    int nd = x->ndim ? x->ndim : 1; /* a 0-d tensor flattens to (1) */
    if (vn__wrap_dim(nd, &start_dim, "flatten: start_dim") ||
        vn__wrap_dim(nd, &end_dim, "flatten: end_dim"))
        return NULL;
    if (start_dim > end_dim)
        return vn__errp(VN_ERR_ARG, "flatten: start_dim %d comes after end_dim %d (of %d dims)",
                        start_dim, end_dim, nd);
    int64_t shape[VN_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (d <= start_dim || d > end_dim) shape[n++] = x->shape[d];
        else shape[n - 1] *= x->shape[d];
    }
    if (x->ndim == 0) shape[n++] = 1;
    return vn_reshape(x, n, shape);
}
