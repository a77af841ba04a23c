/* tensor.c — tensor lifetime, creation, accessors and copies. Views live in
 * views.c, the tape in autograd.c. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>

void vn__node_release(vn_node *n); /* autograd.c */

/* ---- storage and headers ------------------------------------------------- */

static vn_storage *storage_new(size_t nbytes, bool on_cuda)
{
    vn_storage *s = malloc(sizeof *s);
    if (!s) return NULL;
    s->data = on_cuda ? vnk_alloc(nbytes) : vn__mem_alloc(nbytes);
    if (!s->data) {
        free(s);
        return NULL;
    }
    s->on_cuda = on_cuda;
    s->nbytes = nbytes;
    s->refcount = 1;
    s->version = 0; /* malloc'd: compared by the caches keyed on versions */
    return s;
}

static void storage_release(vn_storage *s)
{
    if (s && --s->refcount == 0) {
        if (s->on_cuda) vnk_free(s->data, s->nbytes);
        else vn__mem_free(s->data, s->nbytes);
        free(s);
    }
}

int64_t vn__numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

void vn__contig_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= shape[d];
    }
}

bool vn__same_shape(const vn_tensor *a, const vn_tensor *b)
{
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

const char *vn_shape_str(int ndim, const int64_t *shape, char *buf, size_t n)
{
    if (!buf || n == 0) return "";
    if (ndim < 0 || ndim > VN_MAX_DIMS || (ndim > 0 && !shape)) {
        snprintf(buf, n, "(invalid shape)");
        return buf;
    }
    size_t used = 0;
    used += (size_t)snprintf(buf, n, "(");
    for (int d = 0; d < ndim && used < n; d++)
        used += (size_t)snprintf(buf + used, n - used, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (used < n) snprintf(buf + used, n - used, ndim == 1 ? ",)" : ")");
    return buf;
}

const char *vn__shape(int ndim, const int64_t *shape)
{
    /* A message may quote several shapes: each call takes the next buffer. */
    static _Thread_local char slots[VN_SHAPE_SLOTS][VN_SHAPE_LEN];
    static _Thread_local unsigned next;
    char *buf = slots[next++ % VN_SHAPE_SLOTS];
    return vn_shape_str(ndim, shape, buf, VN_SHAPE_LEN);
}

/* Each size within [0, VN_MAX_NUMEL] and so is their product. Each size is
 * checked on its own too: an empty tensor of shape (0, 2^62) has no
 * elements, but reducing its first dim would give 2^62 of them. */
vn_status vn__check_shape(const char *op, int ndim, const int64_t *shape)
{
    if (ndim < 0 || ndim > VN_MAX_DIMS)
        return vn__err(VN_ERR_ARG, "%s: ndim must be 0..%d, got %d", op, VN_MAX_DIMS, ndim);
    if (ndim > 0 && !shape) return vn__err(VN_ERR_ARG, "%s: shape is NULL", op);
    double total = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return vn__err(VN_ERR_ARG, "%s: size of dim %d must be >= 0, got %lld", op, d,
                           (long long)shape[d]);
        if ((double)shape[d] > VN_MAX_NUMEL)
            return vn__err(VN_ERR_ARG, "%s: size %lld of dim %d is more than the limit of %g", op,
                           (long long)shape[d], d, VN_MAX_NUMEL);
        total *= (double)shape[d];
    }
    if (total > VN_MAX_NUMEL)
        return vn__err(VN_ERR_ARG, "%s: %g elements is more than the limit of %g", op, total,
                       VN_MAX_NUMEL);
    return VN_OK;
}

vn_tensor *vn__new_on(bool on_cuda, vn_dtype dtype, int ndim, const int64_t *shape)
{
    vn_tensor *t = calloc(1, sizeof *t);
    if (!t) return vn__errp(VN_ERR_MEMORY, "out of memory allocating a tensor header");
    int64_t n = vn__numel(ndim, shape);
    size_t nbytes = (size_t)n * vn_dtype_size(dtype);
    t->storage = storage_new(nbytes, on_cuda);
    if (!t->storage) {
        free(t);
        return vn__errp(VN_ERR_MEMORY, "out of %s memory allocating %zu bytes for a %s tensor of "
                        "shape %s%s%s", on_cuda ? "GPU" : "host", nbytes, vn_dtype_name(dtype),
                        vn__shape(ndim, shape), on_cuda ? ": " : "",
                        on_cuda ? vnk_error() : "");
    }
    t->refcount = 1;
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim) memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    vn__contig_strides(ndim, shape, t->strides);
    return t;
}

vn_tensor *vn__new(vn_dtype dtype, int ndim, const int64_t *shape)
{
    return vn__new_on(false, dtype, ndim, shape);
}

vn_tensor *vn__new_like(const vn_tensor *like, vn_dtype dtype, int ndim, const int64_t *shape)
{
    return vn__new_on(vn__is_cuda(like), dtype, ndim, shape);
}

void *vn__ptr(const vn_tensor *t)
{
    return (char *)t->storage->data + t->offset * (int64_t)vn_dtype_size(t->dtype);
}

vn_tensor *vn__alias(const vn_tensor *t)
{
    vn_tensor *a = calloc(1, sizeof *a);
    if (!a) return vn__errp(VN_ERR_MEMORY, "out of memory allocating a tensor header");
    a->refcount = 1;
    a->dtype = t->dtype;
    a->ndim = t->ndim;
    memcpy(a->shape, t->shape, sizeof a->shape);
    memcpy(a->strides, t->strides, sizeof a->strides);
    a->offset = t->offset;
    a->storage = t->storage;
    if (a->storage) a->storage->refcount++;
    return a;
}

vn_tensor *vn_tensor_retain(vn_tensor *t)
{
    if (t) t->refcount++;
    return t;
}

void vn_tensor_release(vn_tensor *t)
{
    if (!t || --t->refcount > 0) return;
    storage_release(t->storage);
    vn_tensor_release(t->grad);
    vn__node_release(t->grad_fn);
    free(t);
}

void vn_tensor_free(vn_tensor *t)
{
    if (!t) return;
    storage_release(t->storage);
    t->storage = NULL;
    vn_tensor_release(t->grad);
    t->grad = NULL;
    vn__node_release(t->grad_fn);
    t->grad_fn = NULL;
}

bool vn_tensor_is_freed(const vn_tensor *t) { return !t || !t->storage; }

/* ---- creation ------------------------------------------------------------ */

static bool valid_dtype(vn_dtype d) { return d >= VN_F32 && d <= VN_F16; }

/* VN_OK when `device` can hold tensors now. */
static vn_status device_ready(const char *op, vn_device device)
{
    if (device == VN_CPU) return VN_OK;
    if (device != VN_CUDA) return vn__err(VN_ERR_ARG, "%s: unknown device %d", op, (int)device);
    if (!vn_cuda_is_available())
        return vn__err(VN_ERR_DEVICE, "%s: expected a CUDA device, found none (%s)", op,
                       vnk_error()[0] ? vnk_error() : "no device or driver");
    return VN_OK;
}

vn_tensor *vn_empty_on(vn_device device, vn_dtype dtype, int ndim, const int64_t *shape)
{
    if (!valid_dtype(dtype)) return vn__errp(VN_ERR_DTYPE, "empty: unknown dtype %d", (int)dtype);
    if (vn__check_shape("empty", ndim, shape) || device_ready("empty", device)) return NULL;
    return vn__new_on(device == VN_CUDA, dtype, ndim, shape);
}

vn_tensor *vn_empty(vn_dtype dtype, int ndim, const int64_t *shape)
{
    return vn_empty_on(VN_CPU, dtype, ndim, shape);
}

vn_tensor *vn_full_on(vn_device device, vn_dtype dtype, int ndim, const int64_t *shape,
                      double value)
{
    vn_tensor *t = vn_empty_on(device, dtype, ndim, shape);
    if (t && vn_tensor_fill_(t, value)) {
        vn_tensor_release(t);
        return NULL;
    }
    return t;
}

vn_tensor *vn_full(vn_dtype dtype, int ndim, const int64_t *shape, double value)
{
    return vn_full_on(VN_CPU, dtype, ndim, shape, value);
}

vn_tensor *vn_zeros(vn_dtype dtype, int ndim, const int64_t *shape)
{
    vn_tensor *t = vn_empty(dtype, ndim, shape);
    if (t) memset(t->storage->data, 0, (size_t)vn_tensor_numel(t) * vn_dtype_size(dtype));
    return t;
}

vn_tensor *vn_ones(vn_dtype dtype, int ndim, const int64_t *shape)
{
    return vn_full(dtype, ndim, shape, 1.0);
}

vn_tensor *vn_from_data(vn_dtype dtype, int ndim, const int64_t *shape, const void *data)
{
    vn_tensor *t = vn_empty(dtype, ndim, shape);
    if (!t) return NULL;
    size_t nbytes = (size_t)vn_tensor_numel(t) * vn_dtype_size(dtype);
    if (nbytes && !data) {
        vn_tensor_release(t);
        return vn__errp(VN_ERR_ARG, "from_data: data is NULL");
    }
    if (nbytes) memcpy(t->storage->data, data, nbytes);
    return t;
}

vn_tensor *vn_arange(double start, double end, double step, vn_dtype dtype)
{
    if (step == 0 || !isfinite(step) || !isfinite(start) || !isfinite(end))
        return vn__errp(VN_ERR_ARG, "arange: start, end and a nonzero step must be finite (got %g, %g, %g)",
                        start, end, step);
    double count = ceil((end - start) / step);
    if (count > VN_MAX_NUMEL)
        return vn__errp(VN_ERR_ARG, "arange: %g elements from %g to %g by %g is more than the "
                        "limit of %g", count, start, end, step, VN_MAX_NUMEL);
    int64_t n = count > 0 ? (int64_t)count : 0;
    vn_tensor *t = vn_empty(dtype, 1, &n);
    if (!t) return NULL;
    for (int64_t i = 0; i < n; i++) vn__store(t, i, start + (double)i * step);
    return t;
}

vn_tensor *vn_full_like(const vn_tensor *t, double value, vn_dtype dtype, vn_device device)
{
    if (vn__check_arg(t, "full_like", "input", VN_ALLOW_CUDA | VN_ALLOW_HALF)) return NULL;
    return vn_full_on(device, dtype, t->ndim, t->shape, value);
}

vn_tensor *vn_zeros_like(const vn_tensor *t, vn_dtype dtype, vn_device device)
{
    return vn_full_like(t, 0, dtype, device);
}

vn_tensor *vn_ones_like(const vn_tensor *t, vn_dtype dtype, vn_device device)
{
    return vn_full_like(t, 1, dtype, device);
}

vn_tensor *vn_eye(int64_t n, int64_t m, vn_dtype dtype)
{
    if (n < 0 || m < 0)
        return vn__errp(VN_ERR_ARG, "eye: sizes must be >= 0, got %lld × %lld", (long long)n,
                        (long long)m);
    const int64_t shape[2] = {n, m};
    vn_tensor *t = vn_zeros(dtype, 2, shape);
    for (int64_t i = 0; t && i < n && i < m; i++) vn__store(t, i * m + i, 1);
    return t;
}

vn_tensor *vn_linspace(double start, double end, int64_t steps, vn_dtype dtype)
{
    if (!isfinite(start) || !isfinite(end))
        return vn__errp(VN_ERR_ARG, "linspace: start and end must be finite, got %g and %g", start, end);
    if (steps < 0 || steps > VN_MAX_NUMEL)
        return vn__errp(VN_ERR_ARG, "linspace: steps must be in [0, %g], got %lld", VN_MAX_NUMEL,
                        (long long)steps);
    vn_tensor *t = vn_empty(dtype, 1, &steps);
    if (!t) return NULL;
    double step = steps > 1 ? (end - start) / (double)(steps - 1) : 0;
    /* The first half counts from start and the second from end, so the
     * last point is end itself, not start plus a rounded sum (as PyTorch). */
    for (int64_t i = 0; i < steps; i++)
        vn__store(t, i, i < steps / 2 || steps == 1 ? start + (double)i * step
                                                    : end - (double)(steps - 1 - i) * step);
    return t;
}

/* ---- accessors ----------------------------------------------------------- */

/* Metadata stays readable after vn_tensor_free (only the storage goes), so
 * these check for NULL alone; NULL gives a neutral value and an error. */
int vn_tensor_ndim(const vn_tensor *t)
{
    return t ? t->ndim : (vn__err(VN_ERR_ARG, "ndim: expected a tensor, got NULL"), 0);
}

const int64_t *vn_tensor_shape(const vn_tensor *t)
{
    return t ? t->shape : vn__errp(VN_ERR_ARG, "shape: expected a tensor, got NULL");
}

const int64_t *vn_tensor_strides(const vn_tensor *t)
{
    return t ? t->strides : vn__errp(VN_ERR_ARG, "strides: expected a tensor, got NULL");
}

int64_t vn_tensor_numel(const vn_tensor *t)
{
    return t ? vn__numel(t->ndim, t->shape)
             : (vn__err(VN_ERR_ARG, "numel: expected a tensor, got NULL"), 0);
}

vn_dtype vn_tensor_dtype(const vn_tensor *t)
{
    return t ? t->dtype : (vn__err(VN_ERR_ARG, "dtype: expected a tensor, got NULL"), VN_F32);
}

bool vn_tensor_is_contiguous(const vn_tensor *t)
{
    if (!t) return vn__err(VN_ERR_ARG, "is_contiguous: expected a tensor, got NULL"), false;
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != s) return false;
        s *= t->shape[d];
    }
    return true;
}

void *vn_tensor_data(const vn_tensor *t)
{
    if (vn__check_for(t, "data", VN_ALLOW_HALF)) return NULL;
    return vn__ptr(t);
}

double vn__load(const vn_tensor *t, int64_t off)
{
    const void *base = t->storage->data;
    switch (t->dtype) {
    case VN_F32: return ((const float *)base)[off];
    case VN_I32: return ((const int32_t *)base)[off];
    case VN_I64: return (double)((const int64_t *)base)[off];
    case VN_U8: return ((const uint8_t *)base)[off];
    case VN_BF16: return vn__bf16_to_f32(((const uint16_t *)base)[off]);
    case VN_F16: return vn__f16_to_f32(((const uint16_t *)base)[off]);
    }
    return 0;
}

/* ---- 16-bit floats ---------------------------------------------------------- */

uint16_t vn__f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

float vn__bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Drops the low `shift` bits of m, rounding to nearest, ties to even. */
static uint32_t round_shift(uint32_t m, int shift)
{
    if (shift > 31) return 0;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    return q + (rem > half || (rem == half && (q & 1)));
}

uint16_t vn__f32_to_f16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu, mant = a & 0x7fffff;
    int e = (int)(a >> 23) - 127;
    if (a > 0x7f800000u) return sign | 0x7e00; /* NaN */
    if (e > 15) return sign | 0x7c00;          /* too large: infinity */
    if (e >= -14) /* normal; a carry out of the mantissa bumps the exponent (to inf at the top) */
        return sign | (uint16_t)((((uint32_t)(e + 15) << 10) | (mant >> 13)) +
                                 (round_shift(mant, 13) - (mant >> 13)));
    /* subnormal: units of 2^-24 */
    return sign | (uint16_t)round_shift(mant | 0x800000, -e - 1);
}

float vn__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (e == 0) return (sign ? -1.0f : 1.0f) * ldexpf((float)mant, -24);
    uint32_t u = sign | (e == 31 ? 0x7f800000u | (mant << 13) : ((e + 112) << 23) | (mant << 13));
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* v limited to [lo, hi], NaN to 0: converting an out-of-range double to an
 * integer type is undefined in C, so conversions saturate instead. */
static double saturate(double v, double lo, double hi)
{
    return v != v ? 0 : v < lo ? lo : v > hi ? hi : v;
}

/* v made safe to cast to dtype's C type. */
static double in_range(vn_dtype dtype, double v)
{
    switch (dtype) {
    case VN_F32: return v;
    case VN_I32: return saturate(v, INT32_MIN, INT32_MAX);
    case VN_I64: return saturate(v, -0x1p63, 0x1p63 - 1024); /* the largest double below 2^63 */
    case VN_U8: return saturate(v, 0, 255);
    case VN_BF16: case VN_F16: return v;
    }
    return 0;
}

void vn__store(vn_tensor *t, int64_t off, double v)
{
    void *base = t->storage->data;
    v = in_range(t->dtype, v);
    switch (t->dtype) {
    case VN_F32: ((float *)base)[off] = (float)v; break;
    case VN_I32: ((int32_t *)base)[off] = (int32_t)v; break;
    case VN_I64: ((int64_t *)base)[off] = (int64_t)v; break;
    case VN_U8: ((uint8_t *)base)[off] = (uint8_t)v; break;
    case VN_BF16: ((uint16_t *)base)[off] = vn__f32_to_bf16((float)v); break;
    case VN_F16: ((uint16_t *)base)[off] = vn__f32_to_f16((float)v); break;
    }
}

int64_t vn__offset_of(const vn_tensor *t, int64_t flat)
{
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t size = t->shape[d];
        if (size == 0) return t->offset;
        off += (flat % size) * t->strides[d];
        flat /= size;
    }
    return off;
}

/* Element at storage offset off as double, from either device (a CUDA
 * element comes over with one synchronous copy). */
static vn_status load_any(const vn_tensor *t, int64_t off, double *out)
{
    if (!vn__is_cuda(t)) {
        *out = vn__load(t, off);
        return VN_OK;
    }
    uint64_t word = 0;
    size_t esz = vn_dtype_size(t->dtype);
    if (vnk_copy(&word, false, (const char *)t->storage->data + off * (int64_t)esz, true, esz))
        return vn__cuda_err("reading a cuda tensor element");
    vn_storage st = {.data = &word, .nbytes = esz, .refcount = 1};
    vn_tensor one = {.refcount = 1, .dtype = t->dtype, .storage = &st};
    *out = vn__load(&one, 0);
    return VN_OK;
}

vn_status vn_tensor_item(const vn_tensor *t, double *out)
{
    vn_status s = vn__check_for(t, "item", VN_ALLOW_CUDA | VN_ALLOW_HALF);
    if (s) return s;
    if (!out) return vn__err(VN_ERR_ARG, "item: out is NULL");
    if (vn_tensor_numel(t) != 1)
        return vn__err(VN_ERR_SHAPE, "item: expected a tensor with one element, got shape %s",
                       vn__shape(t->ndim, t->shape));
    return load_any(t, t->offset, out);
}

static vn_status index_offset(const vn_tensor *t, const int64_t *index, int64_t *off, const char *op)
{
    vn_status s = vn__check_for(t, op, VN_ALLOW_CUDA | VN_ALLOW_HALF);
    if (s) return s;
    if (!index && t->ndim > 0) return vn__err(VN_ERR_ARG, "%s: index is NULL", op);
    *off = t->offset;
    for (int d = 0; d < t->ndim; d++) {
        if (index[d] < 0 || index[d] >= t->shape[d])
            return vn__err(VN_ERR_ARG, "%s: index %lld out of range for dim %d of size %lld", op,
                           (long long)index[d], d, (long long)t->shape[d]);
        *off += index[d] * t->strides[d];
    }
    return VN_OK;
}

vn_status vn_tensor_get(const vn_tensor *t, const int64_t *index, double *out)
{
    int64_t off;
    if (!out) return vn__err(VN_ERR_ARG, "get: out is NULL");
    vn_status s = index_offset(t, index, &off, "get");
    return s ? s : load_any(t, off, out);
}

vn_status vn_tensor_set(vn_tensor *t, const int64_t *index, double value)
{
    int64_t off;
    vn_status s = index_offset(t, index, &off, "set");
    if (!s) s = vn__begin_write(t, "set");
    if (s || !vn__is_cuda(t)) {
        if (!s) vn__store(t, off, value);
        return s;
    }
    uint64_t word = 0; /* the element converted on the host, then copied over */
    size_t esz = vn_dtype_size(t->dtype);
    vn_storage st = {.data = &word, .nbytes = esz, .refcount = 1};
    vn_tensor one = {.refcount = 1, .dtype = t->dtype, .storage = &st};
    vn__store(&one, 0, value);
    if (vnk_copy((char *)t->storage->data + off * (int64_t)esz, true, &word, false, esz))
        return vn__cuda_err("set");
    return VN_OK;
}

/* ---- in-place writes ------------------------------------------------------ */

void vn__written(vn_tensor *t)
{
    if (t && t->storage) t->storage->version++;
}

vn_status vn__begin_write(vn_tensor *t, const char *op)
{
    if (t->requires_grad && vn_is_grad_enabled())
        return vn__err(VN_ERR_STATE, "%s: in-place write into a leaf tensor that requires grad; "
                       "do it with grad mode off (no_grad)", op);
    vn__written(t);
    return VN_OK;
}

/* ---- copies -------------------------------------------------------------- */

/* dst[i] = src[i] over dst's shape, with src's strides already broadcast.
 * Walks the index like an odometer so any layout works; the innermost dim
 * is a plain loop for the common contiguous case. */
static void strided_copy(vn_tensor *dst, const vn_tensor *src, const int64_t *sstrides)
{
    int nd = dst->ndim;
    int64_t numel = vn_tensor_numel(dst);
    if (numel == 0) return;
    if (dst->dtype == src->dtype && vn_tensor_is_contiguous(dst) && vn_tensor_is_contiguous(src) &&
        vn__same_shape(dst, src)) {
        memcpy(vn_tensor_data(dst), vn_tensor_data(src), (size_t)numel * vn_dtype_size(dst->dtype));
        return;
    }
    int64_t inner = nd ? dst->shape[nd - 1] : 1;
    int64_t dstep = nd ? dst->strides[nd - 1] : 0, sstep = nd ? sstrides[nd - 1] : 0;
    int64_t idx[VN_MAX_DIMS] = {0};
    int64_t doff = dst->offset, soff = src->offset;
    for (int64_t done = 0; done < numel; done += inner) {
        if (dst->dtype == VN_F32 && src->dtype == VN_F32) {
            float *d = (float *)dst->storage->data + doff;
            const float *s = (const float *)src->storage->data + soff;
            for (int64_t i = 0; i < inner; i++) d[i * dstep] = s[i * sstep];
        } else if (dst->dtype == VN_F32 && src->dtype == VN_U8 && dstep == 1 && sstep == 1) {
            /* u8 images to f32 (a data loader's every batch): unit strides
             * spelled out so that GCC vectorises the conversion */
            float *restrict d = (float *)dst->storage->data + doff;
            const uint8_t *restrict s = (const uint8_t *)src->storage->data + soff;
            for (int64_t i = 0; i < inner; i++) d[i] = s[i];
        } else if (dst->dtype == VN_F32 && src->dtype == VN_U8) {
            float *d = (float *)dst->storage->data + doff;
            const uint8_t *s = (const uint8_t *)src->storage->data + soff;
            for (int64_t i = 0; i < inner; i++) d[i * dstep] = s[i * sstep];
        } else {
            for (int64_t i = 0; i < inner; i++)
                vn__store(dst, doff + i * dstep, vn__load(src, soff + i * sstep));
        }
        /* advance the odometer over the outer dims */
        for (int d = nd - 2; d >= 0; d--) {
            idx[d]++;
            doff += dst->strides[d];
            soff += sstrides[d];
            if (idx[d] < dst->shape[d]) break;
            doff -= dst->strides[d] * dst->shape[d];
            soff -= sstrides[d] * dst->shape[d];
            idx[d] = 0;
        }
    }
}

/* dst (contiguous, on CUDA) = src (on CUDA, broadcast to dst), converted. */
static vn_status cuda_copy(const char *op, vn_tensor *dst, const vn_tensor *src)
{
    if (!vn_tensor_is_contiguous(dst))
        return vn__err(VN_ERR_DEVICE, "%s: writing into a non-contiguous cuda tensor is not "
                       "supported; write into a contiguous one", op);
    vnk_loop L;
    const void *in;
    if (!vn__cuda_loop(dst, 1, &src, &L, &in)) return VN_OK;
    if (vnk_map(vn__ptr(dst), dst->dtype, &in, 1, src->dtype, &L, VNK_COPY, 0, 0))
        return vn__cuda_err(op);
    return VN_OK;
}

vn_status vn_tensor_copy_(vn_tensor *dst, const vn_tensor *src)
{
    const unsigned any = VN_ALLOW_CUDA | VN_ALLOW_HALF;
    vn_status s = vn__check_for(dst, "copy_: destination", any);
    if (!s) s = vn__check_for(src, "copy_: source", any);
    if (!s) s = vn__begin_write(dst, "copy_");
    if (s) return s;
    int nd;
    int64_t shape[VN_MAX_DIMS];
    s = vn__broadcast_shape("copy_", src->ndim, src->shape, dst->ndim, dst->shape, &nd, shape);
    if (s) return s;
    if (nd != dst->ndim || memcmp(shape, dst->shape, sizeof(int64_t) * (size_t)nd))
        return vn__err(VN_ERR_SHAPE, "copy_: source of shape %s does not broadcast to destination %s",
                       vn__shape(src->ndim, src->shape), vn__shape(dst->ndim, dst->shape));
    /* Across devices: bring the source over first (a contiguous copy). */
    vn_tensor *moved = NULL;
    if (vn__is_cuda(src) != vn__is_cuda(dst)) {
        bool grad = vn_set_grad_enabled(false);
        moved = vn_to_device(src, vn__is_cuda(dst) ? VN_CUDA : VN_CPU);
        vn_set_grad_enabled(grad);
        if (!moved) return vn_last_status();
        src = moved;
    }
    if (vn__is_cuda(dst)) {
        s = cuda_copy("copy_", dst, src);
    } else {
        int64_t sstrides[VN_MAX_DIMS];
        vn__broadcast_strides(src, dst->ndim, dst->shape, sstrides);
        strided_copy(dst, src, sstrides);
    }
    vn_tensor_release(moved);
    return s;
}

vn_status vn_tensor_fill_(vn_tensor *t, double value)
{
    vn_status s = vn__check_for(t, "fill_", VN_ALLOW_CUDA | VN_ALLOW_HALF);
    if (!s) s = vn__begin_write(t, "fill_");
    if (s) return s;
    int64_t n = vn_tensor_numel(t);
    if (vn__is_cuda(t)) {
        if (!vn_tensor_is_contiguous(t))
            return vn__err(VN_ERR_DEVICE, "fill_: writing into a non-contiguous cuda tensor is not "
                           "supported; fill a contiguous one");
        if (vnk_fill(vn__ptr(t), t->dtype, n, in_range(t->dtype, value))) return vn__cuda_err("fill_");
        return VN_OK;
    }
    if (vn_tensor_is_contiguous(t) && t->dtype != VN_BF16 && t->dtype != VN_F16) {
        VN_DTYPE_SWITCH(t->dtype, T, {
            T *p = vn_tensor_data(t);
            T v = (T)in_range(t->dtype, value);
            for (int64_t i = 0; i < n; i++) p[i] = v;
        });
        return VN_OK;
    }
    for (int64_t i = 0; i < n; i++) vn__store(t, vn__offset_of(t, i), value);
    return VN_OK;
}

vn_status vn_tensor_copy_out(const vn_tensor *t, void *buf, size_t nbytes)
{
    vn_status s = vn__check_for(t, "copy_out", VN_ALLOW_CUDA | VN_ALLOW_HALF);
    if (s) return s;
    size_t need = (size_t)vn_tensor_numel(t) * vn_dtype_size(t->dtype);
    if (nbytes != need)
        return vn__err(VN_ERR_ARG, "copy_out: buffer of %zu bytes, expected %zu", nbytes, need);
    if (!need) return VN_OK;
    if (!buf) return vn__err(VN_ERR_ARG, "copy_out: buf is NULL");
    if (vn__is_cuda(t)) { /* made contiguous on the device, then one copy over */
        vn_tensor *c = vn__plain_contiguous(t);
        if (!c) return vn_last_status();
        s = vnk_copy(buf, false, vn__ptr(c), true, need) ? vn__cuda_err("copy_out") : VN_OK;
        vn_tensor_release(c);
        return s;
    }
    vn_tensor dst = {.refcount = 1, .dtype = t->dtype, .ndim = t->ndim};
    vn_storage st = {.data = buf, .nbytes = nbytes, .refcount = 1};
    memcpy(dst.shape, t->shape, sizeof dst.shape);
    vn__contig_strides(t->ndim, t->shape, dst.strides);
    dst.storage = &st;
    strided_copy(&dst, t, t->strides);
    return VN_OK;
}
