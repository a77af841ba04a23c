/* device.c — what the engine knows about devices: CUDA availability, moving
 * tensors between the CPU and the GPU (differentiably), the device checks
 * ops share, the strided-loop description handed to the CUDA elementwise
 * kernels, and the per-thread autocast setting. The kernels themselves are
 * in kernels/ behind kernels/kernels.h. */
#include "internal.h"

#include <stdatomic.h>
#include <stdio.h>

/* ---- the CUDA device ------------------------------------------------------ */

int vn_cuda_device_count(void) { return vnk_device_count(); }
bool vn_cuda_is_available(void) { return vnk_device_count() > 0; }

vn_status vn_cuda_device_name(char *buf, size_t n)
{
    if (!buf || n == 0) return vn__err(VN_ERR_ARG, "cuda_device_name: buf is NULL or empty");
    if (!vn_cuda_is_available()) return vn__err(VN_ERR_DEVICE, "cuda_device_name: no CUDA device");
    return vnk_device_name(buf, n) ? vn__cuda_err("cuda_device_name") : VN_OK;
}

vn_status vn_cuda_synchronize(void)
{
    if (!vn_cuda_is_available()) return VN_OK; /* nothing can be queued */
    return vnk_synchronize() ? vn__cuda_err("cuda_synchronize") : VN_OK;
}

void vn_cuda_memory_stats(size_t *in_use, size_t *cached) { vnk_memory_stats(in_use, cached); }
void vn_cuda_empty_cache(void) { vnk_empty_cache(); }

vn_status vn__cuda_err(const char *op) { return vn__err(VN_ERR_DEVICE, "%s: %s", op, vnk_error()); }

void *vn__cuda_errp(const char *op)
{
    vn__cuda_err(op);
    return NULL;
}

const char *vn_device_name(vn_device d)
{
    return d == VN_CPU ? "cpu" : d == VN_CUDA ? "cuda" : "unknown device";
}

vn_device vn_tensor_device(const vn_tensor *t)
{
    if (vn__check_for(t, "device", VN_ALLOW_CUDA | VN_ALLOW_HALF)) return VN_CPU;
    return vn__is_cuda(t) ? VN_CUDA : VN_CPU;
}

/* ---- checks shared by the ops -------------------------------------------- */

/* The device rule, once: the n tensors (NULLs skipped) on one device, which
 * is the first tensor's; when `scalars` is set the first non-scalar's, and a
 * 0-d CPU tensor may join CUDA ones. */
static vn_status check_devices(const char *op, int n, const vn_tensor *const *ts,
                               const char *const *names, bool scalars, bool *on_cuda)
{
    int ref = -1;
    for (int k = 0; k < n; k++)
        if (ts[k] && (ref < 0 || (scalars && ts[ref]->ndim == 0 && !vn__is_cuda(ts[ref])))) ref = k;
    bool cuda = ref >= 0 && vn__is_cuda(ts[ref]);
    if (on_cuda) *on_cuda = cuda;
    for (int k = 0; k < n; k++) {
        const vn_tensor *t = ts[k];
        if (!t || vn__is_cuda(t) == cuda) continue;
        if (scalars && cuda && t->ndim == 0) continue; /* a CPU scalar next to CUDA tensors */
        char arg[2][24];
        const char *name[2];
        int which[2] = {k, ref};
        for (int j = 0; j < 2; j++) {
            snprintf(arg[j], sizeof arg[j], "argument %d", which[j] + 1);
            name[j] = names && names[which[j]] ? names[which[j]] : arg[j];
        }
        return vn__err(VN_ERR_DEVICE, "%s: expected all tensors on one device, got %s on %s and "
                       "%s on %s; move them with :cuda() / :cpu() (vn_to_device)", op, name[0],
                       vn__is_cuda(t) ? "cuda" : "cpu", name[1], cuda ? "cuda" : "cpu");
    }
    return VN_OK;
}

vn_status vn__same_device(const char *op, int n, const vn_tensor *const *ts, bool *on_cuda)
{
    return check_devices(op, n, ts, NULL, true, on_cuda);
}

vn_status vn__same_device_strict(const char *op, int n, const vn_tensor *const *ts,
                                 const char *const *names, bool *on_cuda)
{
    return check_devices(op, n, ts, names, false, on_cuda);
}

vn_status vn__scalar_to_cuda(const vn_tensor **t, vn_tensor **hold)
{
    *hold = NULL;
    if (!*t || vn__is_cuda(*t)) return VN_OK;
    bool was = vn_set_grad_enabled(false); /* a constant: no gradient flows to it */
    *hold = vn_to_device(*t, VN_CUDA);
    vn_set_grad_enabled(was);
    if (!*hold) return vn_last_status();
    *t = *hold;
    return VN_OK;
}

bool vn__cuda_loop(const vn_tensor *out, int n, const vn_tensor *const *in, vnk_loop *L,
                   const void **in_ptr)
{
    if (vn_tensor_numel(out) == 0) return false;
    memset(L, 0, sizeof *L);
    int64_t bst[3][VN_MAX_DIMS];
    for (int k = 0; k < n; k++) {
        vn__broadcast_strides(in[k], out->ndim, out->shape, bst[k]);
        in_ptr[k] = vn__ptr(in[k]);
    }
    /* Merge dim d into the previous kept one when every input steps through
     * both as through one; size-1 dims drop out. */
    for (int d = 0; d < out->ndim; d++) {
        int64_t size = out->shape[d];
        if (size == 1) continue;
        bool merge = L->ndim > 0;
        for (int k = 0; k < n && merge; k++) merge = L->st[k][L->ndim - 1] == bst[k][d] * size;
        if (merge) {
            L->shape[L->ndim - 1] *= size;
        } else {
            L->shape[L->ndim] = size;
            L->ndim++;
        }
        for (int k = 0; k < n; k++) L->st[k][L->ndim - 1] = bst[k][d];
    }
    if (L->ndim == 0) { /* one element */
        L->ndim = 1;
        L->shape[0] = 1;
    }
    return true;
}

/* ---- moving tensors -------------------------------------------------------- */

static vn_status to_device_backward(vn_node *n, const vn_tensor *g)
{
    return vn__accum(n, 0, vn_to_device(g, vn__is_cuda(n->inputs[0]) ? VN_CUDA : VN_CPU));
}

vn_tensor *vn_to_device(const vn_tensor *t, vn_device device)
{
    if (vn__check_for(t, "to_device", VN_ALLOW_CUDA | VN_ALLOW_HALF)) return NULL;
    if (device != VN_CPU && device != VN_CUDA)
        return vn__errp(VN_ERR_ARG, "to_device: expected VN_CPU or VN_CUDA, got %d", (int)device);
    bool to_cuda = device == VN_CUDA;
    if (vn__is_cuda(t) == to_cuda) return vn_tensor_retain((vn_tensor *)t);
    if (to_cuda && !vn_cuda_is_available())
        return vn__errp(VN_ERR_DEVICE, "to_device: expected a CUDA device, found none (%s)",
                        vnk_error()[0] ? vnk_error() : "no device or driver, or a build without CUDA");
    vn_tensor *src = vn__plain_contiguous(t); /* on t's device */
    if (!src) return NULL;
    vn_tensor *out = vn__new_on(to_cuda, t->dtype, t->ndim, t->shape);
    size_t nbytes = (size_t)vn_tensor_numel(t) * vn_dtype_size(t->dtype);
    if (out && nbytes && vnk_copy(vn__ptr(out), to_cuda, vn__ptr(src), !to_cuda, nbytes)) {
        vn_tensor_release(out);
        out = vn__cuda_errp("to_device");
    }
    vn_tensor_release(src);
    if (out) vn__record(out, "to_device", to_device_backward, 1, &t);
    return out;
}

/* ---- precision settings ------------------------------------------------------ */

static _Thread_local vn_dtype autocast = VN_F32;
static atomic_bool allow_tf32;

vn_status vn_set_autocast(vn_dtype dtype, vn_dtype *previous)
{
    if (dtype != VN_F32 && dtype != VN_BF16 && dtype != VN_F16)
        return vn__err(VN_ERR_DTYPE, "set_autocast: expected f32 (off), bf16 or f16, got %s",
                       vn_dtype_name(dtype));
    if (previous) *previous = autocast;
    autocast = dtype;
    return VN_OK;
}

vn_dtype vn_get_autocast(void) { return autocast; }
vn_dtype vn__autocast(void) { return autocast; }

bool vn_cuda_set_allow_tf32(bool allow) { return atomic_exchange(&allow_tf32, allow); }
bool vn__allow_tf32(void) { return atomic_load(&allow_tf32); }
