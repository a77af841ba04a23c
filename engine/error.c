/* error.c — the per-thread error state behind vn_last_error() and
 * vn_last_status(), and the checks every op makes on its tensor arguments. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];
static _Thread_local vn_status last_status;

const char *vn_last_error(void) { return last_error; }
vn_status vn_last_status(void) { return last_status; }

void vn_clear_error(void)
{
    last_error[0] = '\0';
    last_status = VN_OK;
}

/* A message with VN_OK would read as "no error": report it as an argument
 * error instead, so the pair stays consistent. */
static vn_status set_error(vn_status s, const char *fmt, va_list ap)
{
    if (s == VN_OK) s = VN_ERR_ARG;
    /* The message may quote the previous one (vn__err(s, "%s", vn_last_error()));
     * format into a copy so the source is not overwritten while read. */
    char msg[sizeof last_error];
    vsnprintf(msg, sizeof msg, fmt ? fmt : "(no message)", ap);
    /* glibc prints a NaN with its sign bit ("-nan", e.g. 0/0); the sign of a
     * NaN means nothing to a user, so every message says "nan". */
    for (char *p = strstr(msg, "-nan"); p; p = strstr(p, "-nan")) memmove(p, p + 1, strlen(p));
    memcpy(last_error, msg, sizeof msg);
    last_status = s;
    return s;
}

void *vn__errp(vn_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_error(s, fmt, ap);
    va_end(ap);
    return NULL;
}

vn_status vn_set_error(vn_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    s = set_error(s, fmt, ap);
    va_end(ap);
    return s;
}

const char *vn_status_name(vn_status s)
{
    switch (s) {
    case VN_OK: return "ok";
    case VN_ERR_ARG: return "argument error";
    case VN_ERR_SHAPE: return "shape error";
    case VN_ERR_DTYPE: return "dtype error";
    case VN_ERR_MEMORY: return "out of memory";
    case VN_ERR_IO: return "I/O error";
    case VN_ERR_FORMAT: return "format error";
    case VN_ERR_STATE: return "state error";
    case VN_ERR_SCRIPT: return "script error";
    case VN_ERR_DEVICE: return "device error";
    }
    return "unknown status";
}

const char *vn_dtype_name(vn_dtype d)
{
    switch (d) {
    case VN_F32: return "f32";
    case VN_I32: return "i32";
    case VN_I64: return "i64";
    case VN_U8: return "u8";
    case VN_BF16: return "bf16";
    case VN_F16: return "f16";
    }
    return "unknown dtype";
}

size_t vn_dtype_size(vn_dtype d)
{
    switch (d) {
    case VN_F32: case VN_I32: return 4;
    case VN_I64: return 8;
    case VN_U8: return 1;
    case VN_BF16: case VN_F16: return 2;
    }
    return 0;
}

/* The checks behind vn__check_for and vn__check_arg: messages start with
 * "op: name" ("op" alone when name is NULL), so no caller formats a prefix
 * into a buffer of its own. */
#define ARG_FMT "%s%s%s"
#define ARG_ARGS(op, name) (op), (name) ? ": " : "", (name) ? (name) : ""

static vn_status check_tensor(const vn_tensor *t, const char *op, const char *name, unsigned allow)
{
    if (!t) return vn__err(VN_ERR_ARG, ARG_FMT ": expected a tensor, got NULL", ARG_ARGS(op, name));
    if (!t->storage) return vn__err(VN_ERR_STATE, ARG_FMT ": the tensor was freed", ARG_ARGS(op, name));
    if (t->storage->on_cuda && !(allow & VN_ALLOW_CUDA))
        return vn__err(VN_ERR_DEVICE, ARG_FMT ": expected a cpu tensor, got a cuda one (this op runs "
                       "on the CPU only so far; move the tensor with :cpu() / vn_to_device)",
                       ARG_ARGS(op, name));
    if ((t->dtype == VN_BF16 || t->dtype == VN_F16) && !(allow & VN_ALLOW_HALF))
        return vn__err(VN_ERR_DTYPE, ARG_FMT ": got a %s tensor, which only stores values; convert "
                       "it to f32 first (:float() / vn_to_dtype)", ARG_ARGS(op, name),
                       vn_dtype_name(t->dtype));
    return VN_OK;
}

static vn_status check_tensor_dtype(const vn_tensor *t, vn_dtype want, const char *op,
                                    const char *name, unsigned allow)
{
    vn_status s = check_tensor(t, op, name, allow | VN_ALLOW_HALF);
    if (s) return s;
    if (t->dtype != want)
        return vn__err(VN_ERR_DTYPE, ARG_FMT ": expected dtype %s, got %s%s", ARG_ARGS(op, name),
                       vn_dtype_name(want), vn_dtype_name(t->dtype),
                       want == VN_F32 && (t->dtype == VN_BF16 || t->dtype == VN_F16)
                           ? ", which only stores values; convert it to f32 first (:float() / "
                             "vn_to_dtype)"
                           : "");
    return VN_OK;
}

vn_status vn__check_for(const vn_tensor *t, const char *what, unsigned allow)
{
    return check_tensor(t, what, NULL, allow);
}

vn_status vn__check_dtype_for(const vn_tensor *t, vn_dtype want, const char *what, unsigned allow)
{
    return check_tensor_dtype(t, want, what, NULL, allow);
}

vn_status vn__check_arg(const vn_tensor *t, const char *op, const char *name, unsigned allow)
{
    return check_tensor(t, op, name, allow);
}

vn_status vn__check_dtype_arg(const vn_tensor *t, vn_dtype want, const char *op, const char *name,
                              unsigned allow)
{
    return check_tensor_dtype(t, want, op, name, allow);
}

vn_status vn__wrap_dim(int ndim, int *dim, const char *what)
{
    int d = *dim;
    int lo = ndim > 0 ? -ndim : -1, hi = ndim > 0 ? ndim - 1 : 0;
    if (d < lo || d > hi)
        return vn__err(VN_ERR_ARG, "%s: dim %d out of range for a %d-d tensor (expected %d..%d)",
                       what, d, ndim, lo, hi);
    if (d < 0) d += ndim > 0 ? ndim : 1;
    *dim = d;
    return VN_OK;
}
