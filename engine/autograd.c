/* autograd.c — the tape. Ops call vn__record() to attach a node (backward
 * rule + inputs) to their output; vn_backward() orders the nodes reachable
 * from the root topologically and runs their rules in reverse, summing
 * gradients with vn__accum(). Nodes drop their inputs and saved tensors once
 * they have run, so memory is freed as soon as backward is done. */
#include "internal.h"

#include <stdatomic.h>
#include <stdlib.h>

/* Per thread: a thread computing under no_grad must not switch recording
 * off for another thread training at the same time. */
static _Thread_local bool grad_enabled = true;

bool vn_set_grad_enabled(bool enabled)
{
    bool was = grad_enabled;
    grad_enabled = enabled;
    return was;
}

bool vn_is_grad_enabled(void) { return grad_enabled; }

bool vn__needs_grad(const vn_tensor *t)
{
    return grad_enabled && t && (t->requires_grad || t->grad_fn || t->lost_grad_fn);
}

static void node_drop_tensors(vn_node *n)
{
    for (int i = 0; i < VN_NODE_INPUTS; i++) {
        vn_tensor_release(n->inputs[i]);
        n->inputs[i] = NULL;
    }
    for (int i = 0; i < VN_NODE_SAVED; i++) {
        vn_tensor_release(n->saved[i]);
        n->saved[i] = NULL;
    }
    vn_tensor_release(n->gacc);
    n->gacc = NULL;
}

/* Freeing a node releases its inputs, which may free their nodes in turn:
 * on a chain of 10^6 ops plain recursion would overflow the C stack. So a
 * node whose count drops to zero joins a per-thread list, and only the
 * outermost call frees, one node at a time. */
static _Thread_local vn_node *dying;
static _Thread_local bool draining;

void vn__node_release(vn_node *n)
{
    if (!n || --n->refcount > 0) return;
    n->next_dying = dying;
    dying = n;
    if (draining) return;
    draining = true;
    while (dying) {
        vn_node *d = dying;
        dying = d->next_dying;
        node_drop_tensors(d);
        free(d);
    }
    draining = false;
}

vn_node *vn__record(vn_tensor *out, const char *name, vn_backward_fn backward, int ninputs,
                    const vn_tensor *const *inputs)
{
    if (vn__profiling) vn__profile_forward(name);
    bool any = false;
    for (int i = 0; i < ninputs; i++) any |= vn__needs_grad(inputs[i]);
    if (!any || !out) return NULL;
    vn_node *n = calloc(1, sizeof *n);
    if (!n) { /* the op's value is fine; a backward that needs this node reports it */
        out->lost_grad_fn = name;
        return NULL;
    }
    n->refcount = 1;
    n->name = name;
    n->backward = backward;
    n->ninputs = ninputs;
    for (int i = 0; i < ninputs; i++) n->inputs[i] = vn_tensor_retain((vn_tensor *)inputs[i]);
    n->out_ndim = out->ndim;
    memcpy(n->out_shape, out->shape, sizeof n->out_shape);
    for (int i = 0; i < ninputs; i++)
        n->input_version[i] = inputs[i] && inputs[i]->storage ? inputs[i]->storage->version : 0;
    n->out_storage = out->storage;
    n->out_version = out->storage ? out->storage->version : 0;
    out->grad_fn = n;
    return n;
}

bool vn__input_needs_grad(const vn_node *n, int i)
{
    const vn_tensor *t = n->inputs[i];
    return t && (t->requires_grad || t->grad_fn || t->lost_grad_fn);
}

/* The gradient vn_backward is handing to the rule running now, when the walk
 * holds the only reference to it and to its storage; else NULL. The walk
 * drops that reference right after the rule and reads the gradient no more,
 * so the rule may pass it on whole (adopted below, not copied) or compute
 * into it (vn__grad_writable). */
static _Thread_local const vn_tensor *handed;

/* Whether a gradient slot may take g itself instead of a copy: nothing but
 * g can see its storage once the walk has dropped `handed`. So g's holders
 * are the caller (one reference) and at most the walk: g is the handed
 * gradient passed on (the walk's reference, the rule's), or a view of it
 * covering all of it (a reshape) while the walk's reference is its only one.
 * Sharing a storage between two slots would let one slot's in-place sums
 * change the other's gradient. */
static bool adoptable(const vn_tensor *g)
{
    if (!vn_tensor_is_contiguous(g) || g->grad_fn || g->offset != 0) return false;
    if (g->refcount == 1 && g->storage->refcount == 1) return true;
    if (!handed) return false;
    if (g == handed) return g->refcount == 2 && g->storage->refcount == 1;
    return g->storage == handed->storage && handed->refcount == 1 && g->refcount == 1 &&
           g->storage->refcount == 2 && vn_tensor_numel(g) == vn_tensor_numel(handed);
}

bool vn__grad_writable(const vn_tensor *g)
{
    return g && g == handed && g->refcount == 1 && g->storage->refcount == 1 &&
           !g->storage->on_cuda && g->dtype == VN_F32 && g->offset == 0 &&
           vn_tensor_is_contiguous(g);
}

/* *slot += g, where *slot may be NULL (then it takes g). Takes g. */
static vn_status add_into(vn_tensor **slot, vn_tensor *g)
{
    if (*slot && !(*slot)->storage) { /* the user freed the old gradient: start afresh */
        vn_tensor_release(*slot);
        *slot = NULL;
    }
    if (!*slot) {
        if (adoptable(g)) {
            *slot = g;
            return VN_OK;
        }
        *slot = vn_clone(g);
        vn_tensor_release(g);
        return *slot ? VN_OK : VN_ERR_MEMORY;
    }
    if (vn__is_cuda(*slot)) { /* in place: slot = slot + g, element by element */
        const vn_tensor *in[2] = {*slot, g};
        const void *ptr[2];
        vnk_loop L;
        vn_status s = VN_OK;
        if (vn__cuda_loop(*slot, 2, in, &L, ptr) &&
            vnk_map(vn__ptr(*slot), VN_F32, ptr, 2, VN_F32, &L, VNK_ADD, 0, 0))
            s = vn__cuda_err("backward: accumulating a gradient");
        vn_tensor_release(g);
        return s;
    }
    float *dst = vn_tensor_data(*slot);
    int64_t n = vn_tensor_numel(*slot);
    if (vn_tensor_is_contiguous(g)) {
        /* the residual stream's gradients meet here: large, worth the threads */
        const float *src = vn_tensor_data(g);
#pragma omp parallel for simd schedule(static) if (n > VN_OMP_MIN_WORK)
        for (int64_t i = 0; i < n; i++) dst[i] += src[i];
    } else {
        for (int64_t i = 0; i < n; i++) dst[i] += (float)vn__load(g, vn__offset_of(g, i));
    }
    vn_tensor_release(g);
    return VN_OK;
}

/* VN_ERR_MEMORY when t's node could not be recorded (see vn__record):
 * backward reaching t cannot go on without dropping gradients. */
static vn_status lost_node_err(const vn_tensor *t, const char *where)
{
    if (!t->lost_grad_fn) return VN_OK;
    return vn__err(VN_ERR_MEMORY, "%s: op '%s' ran out of memory recording its backward node, so "
                   "no gradient can flow through its output; free memory and recompute the forward "
                   "pass", where, t->lost_grad_fn);
}

vn_status vn__accum(vn_node *n, int i, vn_tensor *g)
{
    if (!g) return vn__err(VN_ERR_MEMORY, "%s backward: %s", n->name, vn_last_error());
    vn_tensor *x = n->inputs[i];
    if (!x || !vn__input_needs_grad(n, i)) {
        vn_tensor_release(g);
        return VN_OK;
    }
    vn_status s = lost_node_err(x, "backward");
    if (!s) s = vn__same_device_strict("backward", 2, (const vn_tensor *[]){g, x},
                                       (const char *[]){"the gradient", "its input"}, NULL);
    if (s) {
        vn_tensor_release(g);
        return vn__err(s, "%s %s", n->name, vn_last_error());
    }
    if (!vn__same_shape(g, x)) {
        vn_tensor *r = vn__sum_to(g, x->ndim, x->shape);
        vn_tensor_release(g);
        if (!r) return vn__err(VN_ERR_SHAPE, "%s backward: %s", n->name, vn_last_error());
        g = r;
    }
    if (x->grad_fn) return add_into(&x->grad_fn->gacc, g);
    return add_into(&x->grad, g);
}

/* The watch of vn__grad_rows_watch: the leaf, its contribution, and the
 * rows handed over so far (slices arrive in order; one out of order ends
 * the handover, and grad_ready still gets the whole gradient). */
static _Thread_local struct {
    vn_tensor *x;
    const float *part;
    int64_t next;
} rows_watch;

bool vn__grad_rows_watch(vn_node *n, int i, const float *part)
{
    vn_tensor *x = n->inputs[i];
    rows_watch.x = NULL;
    /* pending == 1: this node is the last to feed x (the walk counts it down
     * after the rule); an input listed twice would be fed twice by this node. */
    if (!x || !x->grad_rows || x->grad_fn || x->grad_pending != 1 || vn__is_cuda(x) ||
        !vn__input_needs_grad(n, i) || !part)
        return false;
    for (int j = 0; j < n->ninputs; j++)
        if (j != i && n->inputs[j] == x) return false;
    rows_watch.x = x;
    rows_watch.part = part;
    rows_watch.next = 0;
    return true;
}

bool vn__grad_rows_watching(void) { return rows_watch.x != NULL; }

void vn__grad_rows_done(int64_t lo, int64_t hi)
{
    vn_tensor *x = rows_watch.x;
    if (!x) return;
    int64_t rows = x->ndim ? x->shape[0] : 1;
    if (lo != rows_watch.next || hi <= lo || hi > rows) { /* not the next rows: stop here */
        rows_watch.x = NULL;
        return;
    }
    rows_watch.next = hi;
    x->grad_rows(x, x->grad_ready_ud, rows_watch.part, lo, hi);
}

void vn__grad_rows_unwatch(void) { rows_watch.x = NULL; }

vn_status vn__accum_all(vn_node *node, int n, vn_tensor **d)
{
    vn_status s = VN_OK;
    for (int i = 0; i < n; i++) {
        if (!d[i]) continue;
        if (s) vn_tensor_release(d[i]);
        else s = vn__accum(node, i, d[i]);
    }
    return s;
}

/* Depth-first post-order of the nodes reachable from root (iterative, so a
 * deep graph cannot overflow the C stack). order[] ends with root. */
static vn_status topo_order(vn_node *root, vn_node ***order_out, size_t *count_out)
{
    /* Shared by all threads (a graph built on one thread may be walked on
     * another), so every walk takes a fresh number. */
    static _Atomic uint64_t epoch;
    uint64_t mark = atomic_fetch_add(&epoch, 1) + 1;
    size_t cap = 64, count = 0, depth = 0, stack_cap = 64;
    vn_node **order = malloc(cap * sizeof *order);
    struct frame { vn_node *n; int next; } *stack = malloc(stack_cap * sizeof *stack);
    if (!order || !stack) {
        free(order);
        free(stack);
        return vn__err(VN_ERR_MEMORY, "backward: out of memory");
    }
    root->mark = mark;
    stack[depth++] = (struct frame){root, 0};
    while (depth) {
        struct frame *f = &stack[depth - 1];
        if (f->next < f->n->ninputs) {
            vn_tensor *in = f->n->inputs[f->next++];
            vn_node *child = in ? in->grad_fn : NULL;
            if (!child || child->mark == mark) continue;
            child->mark = mark;
            if (depth == stack_cap) {
                stack_cap *= 2;
                void *p = realloc(stack, stack_cap * sizeof *stack);
                if (!p) goto oom;
                stack = p;
            }
            stack[depth++] = (struct frame){child, 0};
            continue;
        }
        if (count == cap) {
            cap *= 2;
            void *p = realloc(order, cap * sizeof *order);
            if (!p) goto oom;
            order = p;
        }
        order[count++] = f->n;
        depth--;
    }
    free(stack);
    *order_out = order;
    *count_out = count;
    return VN_OK;
oom:
    free(order);
    free(stack);
    return vn__err(VN_ERR_MEMORY, "backward: out of memory");
}

/* The rules read their saved values without checks; an input the caller
 * freed (vn_tensor_free) since the forward pass is caught here, before any
 * gradient is touched. */
static vn_status check_inputs_alive(const vn_node *n)
{
    for (int i = 0; i < n->ninputs; i++)
        if (n->inputs[i] && !n->inputs[i]->storage)
            return vn__err(VN_ERR_STATE, "backward: input %d of op '%s' was freed after the "
                                         "forward pass; free tensors only once backward is done",
                           i + 1, n->name);
    for (int i = 0; i < VN_NODE_SAVED; i++)
        if (n->saved[i] && !n->saved[i]->storage)
            return vn__err(VN_ERR_STATE, "backward: a tensor saved by op '%s' was freed after "
                                         "the forward pass", n->name);
    /* Values overwritten in place since the forward pass would give wrong
     * gradients: inputs, and outputs that the rule saved (exp, sigmoid...). */
    for (int i = 0; i < n->ninputs; i++)
        if (n->inputs[i] && n->inputs[i]->storage->version != n->input_version[i])
            return vn__err(VN_ERR_STATE, "backward: input %d of op '%s' was modified in place "
                                         "after the forward pass; its gradient would be wrong",
                           i + 1, n->name);
    for (int i = 0; i < VN_NODE_SAVED; i++)
        if (n->saved[i] && n->saved[i]->storage == n->out_storage &&
            n->saved[i]->storage->version != n->out_version)
            return vn__err(VN_ERR_STATE, "backward: the output of op '%s' was modified in place "
                                         "after the forward pass; its gradient would be wrong",
                           n->name);
    return VN_OK;
}

vn_status vn_backward(vn_tensor *root, const vn_tensor *grad)
{
    vn_status s = vn__check_for(root, "backward", VN_ALLOW_CUDA);
    if (s) return s;
    if ((s = lost_node_err(root, "backward"))) return s;
    if (!root->requires_grad && !root->grad_fn)
        return vn__err(VN_ERR_ARG, "backward: the tensor does not require grad (no parameter "
                                   "with requires_grad was used to compute it, or it was made "
                                   "under no_grad)");
    vn_tensor *seed;
    if (grad) {
        if ((s = vn__check_dtype_for(grad, VN_F32, "backward: gradient", VN_ALLOW_CUDA))) return s;
        if (!vn__same_shape(grad, root))
            return vn__err(VN_ERR_SHAPE, "backward: gradient of shape %s for a tensor of shape %s",
                           vn__shape(grad->ndim, grad->shape), vn__shape(root->ndim, root->shape));
        if ((s = vn__same_device_strict("backward", 2, (const vn_tensor *[]){grad, root},
                                        (const char *[]){"the gradient", "the tensor"}, NULL)))
            return s;
        seed = vn_clone(grad);
    } else {
        if (vn_tensor_numel(root) != 1)
            return vn__err(VN_ERR_SHAPE, "backward: a gradient must be given for a non-scalar "
                                         "tensor (shape %s); expected one element",
                           vn__shape(root->ndim, root->shape));
        seed = vn_full_on(vn__is_cuda(root) ? VN_CUDA : VN_CPU, VN_F32, root->ndim, root->shape, 1);
    }
    if (!seed) return VN_ERR_MEMORY;

    vn_node *top = root->grad_fn;
    if (!top) return add_into(&root->grad, seed); /* a leaf: dL/dL = 1 */
    if (top->released) {
        vn_tensor_release(seed);
        return vn__err(VN_ERR_STATE, "backward: the graph of this tensor was already released "
                                     "by an earlier backward (each graph can be walked once; "
                                     "recompute the forward pass)");
    }
    vn_node **order = NULL;
    size_t count = 0;
    if ((s = topo_order(top, &order, &count))) {
        vn_tensor_release(seed);
        return s;
    }
    for (size_t k = 0; k < count && !s; k++) {
        if (order[k]->released)
            s = vn__err(VN_ERR_STATE, "backward: part of this graph (op '%s') was already "
                                      "released by an earlier backward; recompute the forward "
                                      "pass", order[k]->name);
        else
            s = check_inputs_alive(order[k]);
    }
    if (s) {
        vn_tensor_release(seed);
        free(order);
        return s;
    }
    vn_tensor_release(top->gacc);
    top->gacc = seed;
    /* Hold every node for the walk: dropping a node's inputs can free the
     * last reference to an intermediate tensor, and with it its node. */
    for (size_t k = 0; k < count; k++) order[k]->refcount++;
    /* Leaves with a grad-ready hook count the nodes that feed their gradient,
     * so the hook runs as soon as the last of them has (overlapping, e.g.,
     * a gradient all-reduce with the rest of the backward). */
    for (size_t k = 0; k < count; k++)
        for (int i = 0; i < order[k]->ninputs; i++) {
            vn_tensor *x = order[k]->inputs[i];
            if (x && x->grad_ready && !x->grad_fn) x->grad_pending++;
        }

    bool was = vn_set_grad_enabled(false);
    for (size_t k = count; k-- > 0;) {
        vn_node *n = order[k];
        vn_tensor *g = n->gacc;
        n->gacc = NULL;
        if (g && !s) {
            /* the ops a rule calls are its backward time, not forward ops */
            bool prof = vn__profiling;
            double start = prof ? vn__profile_now() : 0;
            vn__profiling = false;
            handed = g->refcount == 1 && g->storage && g->storage->refcount == 1 ? g : NULL;
            s = n->backward(n, g);
            handed = NULL;
            vn__profiling = prof;
            if (prof) vn__profile_backward(n->name, start);
            if (s) s = vn__err(s, "%s", vn_last_error());
        }
        for (int i = 0; i < n->ninputs; i++) {
            vn_tensor *x = n->inputs[i];
            if (x && x->grad_ready && !x->grad_fn && --x->grad_pending == 0 && !s)
                s = x->grad_ready(x, x->grad_ready_ud);
        }
        vn_tensor_release(g);
        node_drop_tensors(n);
        n->released = true;
        vn__progress(); /* a gradient all-reduce in flight gets a turn */
    }
    vn_set_grad_enabled(was);
    for (size_t k = 0; k < count; k++) vn__node_release(order[k]);
    free(order);
    if (vn__profiling) vn__profile_mark(); /* the walk's own cost is no forward op's */
    return s;
}

/* ---- per-tensor autograd state ------------------------------------------- */

vn_status vn_tensor_set_requires_grad(vn_tensor *t, bool requires_grad)
{
    vn_status s = vn__check_for(t, "requires_grad", VN_ALLOW_CUDA | VN_ALLOW_HALF);
    if (s) return s;
    if (requires_grad && t->dtype != VN_F32)
        return vn__err(VN_ERR_DTYPE, "requires_grad: only f32 tensors can require grad, got %s",
                       vn_dtype_name(t->dtype));
    if (t->grad_fn)
        return vn__err(VN_ERR_ARG, "requires_grad: can only be set on a leaf tensor (this one "
                                   "was made by '%s'); use detach() first", t->grad_fn->name);
    t->requires_grad = requires_grad;
    return VN_OK;
}

bool vn_tensor_requires_grad(const vn_tensor *t)
{
    return t && (t->requires_grad || t->grad_fn || t->lost_grad_fn);
}
bool vn_tensor_is_leaf(const vn_tensor *t) { return t && !t->grad_fn; }
vn_tensor *vn_tensor_grad(const vn_tensor *t) { return t ? t->grad : NULL; }
const char *vn_tensor_grad_fn_name(const vn_tensor *t) { return t && t->grad_fn ? t->grad_fn->name : NULL; }

void vn_tensor_zero_grad(vn_tensor *t)
{
    if (!t) return;
    vn_tensor_release(t->grad);
    t->grad = NULL;
}

vn_status vn_tensor_set_grad(vn_tensor *t, vn_tensor *grad)
{
    vn_status s = vn__check_for(t, "set_grad", VN_ALLOW_CUDA);
    if (s) return s;
    if (grad) {
        if ((s = vn__check_dtype_for(grad, VN_F32, "set_grad: gradient", VN_ALLOW_CUDA))) return s;
        if (!vn__same_shape(grad, t))
            return vn__err(VN_ERR_SHAPE, "set_grad: gradient of shape %s for a tensor of shape %s",
                           vn__shape(grad->ndim, grad->shape), vn__shape(t->ndim, t->shape));
        if ((s = vn__same_device_strict("set_grad", 2, (const vn_tensor *[]){grad, t},
                                        (const char *[]){"the gradient", "the tensor"}, NULL)))
            return s;
        grad = vn_contiguous(grad);
        if (!grad) return vn_last_status();
    }
    vn_tensor_release(t->grad);
    t->grad = grad;
    return VN_OK;
}

vn_tensor *vn_detach(const vn_tensor *t)
{
    if (vn__check_for(t, "detach", VN_ALLOW_CUDA | VN_ALLOW_HALF)) return NULL;
    return vn__alias(t);
}
