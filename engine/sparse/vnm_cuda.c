/* vnm_cuda.c — vn_vnm_linear and the plain V:N:M calls on CUDA tensors,
 * through the Sparse Tensor Core kernels of kernels/vnm_sptc.cu.
 *
 * What goes to the device when:
 *   - the pattern (metadata words, gather table and the source of each
 *     packed value, from vnm_sptc_layout) once per matrix, on first use,
 *     cached in the vn_vnm. A pattern never changes (GMP's recompression
 *     builds a new matrix, whose cache starts empty), so it cannot go stale;
 *   - the values are packed from the f32 trainable tensor (one gather
 *     kernel over the R·2G values) once per version of that tensor: the
 *     packed copy is cached in the vn_vnm and reused until an in-place
 *     write (an optimizer step) bumps the values' storage version; the
 *     backward uses the copy its forward packed;
 *   - the input is rounded and transposed per call (Xᵀ, K × ldx, the
 *     layout the kernels gather from) and kept for the values' gradient;
 *   - on the dense dX path (vn_vnm_set_cuda_dx, the rule in vnm_sptc.h) a
 *     dense 16-bit W, rebuilt from the packed values when they are (cached
 *     in the vn_vnm, keyed on the packed tensor) and kept by the node.
 * Precision: operands in bf16 (f16 under autocast f16), products summed in
 * f32, f32 outputs and gradients; the trainable values stay f32 (master
 * weights), as in mixed-precision training. */
#include "vnm_sptc.h"

/* The 16-bit dtype of the operands: f16 under autocast f16, else bf16 (the
 * wider exponent: activations and gradients need no loss scaling). */
static vn_dtype operand_dtype(void) { return vn__autocast() == VN_F16 ? VN_F16 : VN_BF16; }

/* What the kernels cannot do, refused before any work with the layout
 * named: V a multiple of 16 always; M ≤ 128 when dX is needed. */
static vn_status check_layout(const char *op, const vn_vnm *s, bool input_grad)
{
    if (s->V % VNM_SPTC_ROWS)
        return vn__err(VN_ERR_ARG, "%s: on CUDA, V must be a multiple of 16 (the rows of one "
                       "Sparse Tensor Core tile), got V=%lld; build the layer with V = 16, 32, 64 "
                       "or 128, or run it on the CPU", op, (long long)s->V);
    if (input_grad && s->M > 128)
        return vn__err(VN_ERR_ARG, "%s: the input gradient on CUDA needs M <= 128 (its "
                       "accumulators for 8 groups of M columns live in shared memory), got "
                       "V=%lld, M=%lld", op, (long long)s->V, (long long)s->M);
    return VN_OK;
}

/* ---- the device pattern ------------------------------------------------------ */

/* Byte offsets of the three arrays in the device pattern tensor. */
typedef struct {
    int64_t meta, gather, src, nbytes, npacked;
} dev_offsets;

static dev_offsets offsets_of(const vnk_vnm *w)
{
    int64_t tiles = w->row_tiles * w->k_tiles;
    dev_offsets o = {.meta = 0, .npacked = tiles * VNM_SPTC_TILE_VALUES};
    o.gather = tiles * VNM_SPTC_TILE_META * 4;
    o.src = o.gather + w->nblocks * w->k_tiles * VNM_SPTC_COLS * 4;
    o.nbytes = o.src + o.npacked * 4;
    return o;
}

/* Sizes of s as the kernels see them (pointers unset). */
static vnk_vnm sizes_of(const vn_vnm *s, vn_dtype dtype)
{
    int64_t G = (s->K + s->M - 1) / s->M;
    return (vnk_vnm){.R = s->R, .K = s->K, .V = s->V, .M = s->M, .G = G,
                     .nblocks = (s->R + s->V - 1) / s->V,
                     .row_tiles = (s->R + VNM_SPTC_ROWS - 1) / VNM_SPTC_ROWS,
                     .k_tiles = (G + VNM_SPTC_GROUPS - 1) / VNM_SPTC_GROUPS, .dtype = dtype};
}

/* The pattern of s laid out on the host and copied to the device as one u8
 * tensor (meta, gather, src at offsets_of). */
static vn_tensor *upload_pattern(const vn_vnm *s)
{
    vnm_sptc *p = vnm_sptc_layout(s, VN_BF16); /* the pattern arrays do not depend on dtype */
    if (!p) return NULL;
    vnk_vnm w = sizes_of(s, VN_BF16);
    dev_offsets o = offsets_of(&w);
    vn_tensor *host = vn__new(VN_U8, 1, &o.nbytes), *dev = NULL;
    if (host) {
        uint8_t *b = vn_tensor_data(host);
        memcpy(b + o.meta, p->meta, (size_t)(o.gather - o.meta));
        memcpy(b + o.gather, p->gather, (size_t)(o.src - o.gather));
        memcpy(b + o.src, p->src, (size_t)(o.nbytes - o.src));
        dev = vn_to_device(host, VN_CUDA);
    }
    vn_tensor_release(host);
    vnm_sptc_free(p);
    return dev;
}

/* s's device pattern (borrowed: s holds it), uploaded on first use. Two
 * threads may race to build it; the loser frees its copy. */
static const vn_tensor *device_pattern(const vn_vnm *s)
{
    _Atomic(vn_tensor *) *slot = (_Atomic(vn_tensor *) *)&s->device_pattern; /* a cache */
    vn_tensor *d = atomic_load(slot);
    if (d) return d;
    vn_tensor *mine = upload_pattern(s), *none = NULL;
    if (!mine) return NULL;
    if (atomic_compare_exchange_strong(slot, &none, mine)) return mine;
    vn_tensor_release(mine);
    return none; /* the winner's */
}

/* The kernels' view of s: device pattern `pat`, packed values `packed`
 * (NULL when the call reads no weights). */
static vnk_vnm kernel_matrix(const vn_vnm *s, const vn_tensor *pat, const vn_tensor *packed,
                             vn_dtype dtype)
{
    vnk_vnm w = sizes_of(s, dtype);
    dev_offsets o = offsets_of(&w);
    const uint8_t *b = vn__ptr(pat);
    w.meta = (const uint32_t *)(b + o.meta);
    w.gather = (const int32_t *)(b + o.gather);
    w.values = packed ? vn__ptr(packed) : b; /* sddmm reads no values; any non-NULL will do */
    return w;
}

/* ---- per-call conversions ---------------------------------------------------- */

/* The values (f32 (R, 2G) on the device) packed in the mma.sp order as a
 * new 16-bit device tensor. */
static vn_tensor *pack_values(const vn_vnm *s, const vn_tensor *pat, const vn_tensor *values,
                              vn_dtype dtype)
{
    vnk_vnm w = sizes_of(s, dtype);
    dev_offsets o = offsets_of(&w);
    vn_tensor *vc = vn__plain_contiguous(values);
    vn_tensor *packed = vc ? vn__new_on(true, dtype, 1, &o.npacked) : NULL;
    if (packed && vnk_vnm_pack_values(vn__ptr(packed), dtype, vn__ptr(vc),
                                      (const int32_t *)((const uint8_t *)vn__ptr(pat) + o.src),
                                      o.npacked)) {
        vn_tensor_release(packed);
        packed = vn__cuda_errp("vnm_linear: packing the values");
    }
    vn_tensor_release(vc);
    return packed;
}

static void lock_packed(const vn_vnm *s)
{
    while (atomic_flag_test_and_set_explicit(&((vn_vnm *)s)->packed.lock, memory_order_acquire)) {}
}
static void unlock_packed(const vn_vnm *s)
{
    atomic_flag_clear_explicit(&((vn_vnm *)s)->packed.lock, memory_order_release);
}

/* pack_values, cached in s: the values tensor of the last pack (same
 * storage, offset and strides) at the same version and dtype gets the same
 * packed tensor back. So a training step packs once per optimizer step
 * (which bumps the version), not once per call. */
static vn_tensor *packed_values(const vn_vnm *s, const vn_tensor *pat, const vn_tensor *values,
                                vn_dtype dtype)
{
    vn_vnm *m = (vn_vnm *)s; /* the cache is the only part of s that changes */
    uint32_t version = values->storage->version;
    vn_tensor *packed = vnm__derived_get(&m->packed, values, version);
    if (packed && packed->dtype == dtype) return packed;
    vn_tensor_release(packed);
    packed = pack_values(s, pat, values, dtype);
    if (packed) vnm__derived_put(&m->packed, values, version, packed);
    return packed;
}

/* Xᵀ (K × ldx, 16-bit) of x (..., K) with B rows; *ldx = B rounded up to 8. */
static vn_tensor *transposed_input(const vn_tensor *x, int64_t B, int64_t K, vn_dtype dtype,
                                   int64_t *ldx)
{
    *ldx = (B + 7) / 8 * 8;
    int64_t shape[2] = {K, *ldx};
    vn_tensor *xc = vn__plain_contiguous(x);
    vn_tensor *xt = xc ? vn__new_on(true, dtype, 2, shape) : NULL;
    if (xt && vnk_vnm_transpose_input(vn__ptr(xt), dtype, *ldx, vn__ptr(xc), B, K)) {
        vn_tensor_release(xt);
        xt = vn__cuda_errp("vnm_linear: converting the input");
    }
    vn_tensor_release(xc);
    return xt;
}

/* dy (..., R) f32 on the device as a contiguous 16-bit tensor: one
 * vectorised pass over a contiguous copy (vnk_f32_to_half), or the generic
 * conversion when the copy is not aligned for it. With `flag` (a zeroed
 * device i32, the dense dX path's guard) the pass also sets it to 1 where dy
 * holds Inf or NaN; the generic conversion cannot tell, so it sets the flag
 * anyway (the guarded sparse kernel then recomputes dX: right, only
 * slower). */
static vn_tensor *half_rows(const vn_tensor *dy, vn_dtype dtype, vn_tensor *flag)
{
    vn_tensor *dc = vn__plain_contiguous(dy);
    vn_tensor *h = dc ? vn__new_on(true, dtype, dc->ndim, dc->shape) : NULL;
    int64_t n = dc ? vn_tensor_numel(dc) : 0;
    if (h && ((uintptr_t)vn__ptr(dc) % 16 || (uintptr_t)vn__ptr(h) % 8)) {
        bool was = vn_set_grad_enabled(false);
        vn_tensor_release(h);
        h = vn_to_dtype(dc, dtype);
        vn_set_grad_enabled(was);
        if (h && flag && vnk_fill(vn__ptr(flag), VN_I32, 1, 1)) {
            vn_tensor_release(h);
            h = vn__cuda_errp("vnm_linear: converting dY");
        }
    } else if (h && (flag ? vnk_f32_to_half_check(vn__ptr(h), dtype, vn__ptr(dc), n, vn__ptr(flag))
                          : vnk_f32_to_half(vn__ptr(h), dtype, vn__ptr(dc), n))) {
        vn_tensor_release(h);
        h = vn__cuda_errp("vnm_linear: converting dY");
    }
    vn_tensor_release(dc);
    return h;
}

/* A device i32 set to 0: the flag of half_rows. */
static vn_tensor *zero_flag(void)
{
    int64_t one = 1;
    vn_tensor *f = vn__new_on(true, VN_I32, 1, &one);
    if (f && vnk_fill(vn__ptr(f), VN_I32, 1, 0)) {
        vn_tensor_release(f);
        f = vn__cuda_errp("vnm_linear: the input gradient's flag");
    }
    return f;
}

/* A new f32 device tensor shaped like t with its last dim replaced. */
static vn_tensor *like_rows(const vn_tensor *t, int64_t last)
{
    int64_t shape[VN_MAX_DIMS];
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    shape[t->ndim - 1] = last;
    return vn__new_on(true, VN_F32, t->ndim, shape);
}

/* ---- the three products --------------------------------------------------------- */

/* y (..., R) = X·Wᵀ + bias from Xᵀ. */
static vn_tensor *forward(const vnk_vnm *w, const vn_tensor *xt, int64_t ldx, const vn_tensor *x,
                          int64_t B, const vn_tensor *bias)
{
    vn_tensor *bc = bias ? vn__plain_contiguous(bias) : NULL;
    vn_tensor *y = !bias || bc ? like_rows(x, w->R) : NULL;
    if (y && vnk_vnm_spmm(vn__ptr(y), w, vn__ptr(xt), ldx, bc ? vn__ptr(bc) : NULL, B)) {
        vn_tensor_release(y);
        y = vn__cuda_errp("vnm_linear: forward (spmm)");
    }
    vn_tensor_release(bc);
    return y;
}

/* dX (shaped like `like`, K features) = dY·W from the 16-bit dY: by the
 * sparse kernel (k_dx), or with `dense` (W, R × K, 16-bit) by cuBLAS
 * followed by k_dx guarded by `flag` (half_rows' Inf/NaN flag of dY): it
 * rewrites dX with its kept-only sums exactly when dY was not finite, where
 * the dense W's zeros give 0 · Inf = NaN and the CPU a finite value. The
 * choice between the two: dx_dense. */
static vn_tensor *input_grad(const vnk_vnm *w, const vn_tensor *dy16, const vn_tensor *dense,
                             const vn_tensor *flag, const vn_tensor *like, int64_t B)
{
    vn_tensor *dx = like_rows(like, w->K);
    if (!dx || B == 0) return dx; /* cuBLAS is not asked for an empty product */
    bool failed = dense ? vnk_gemm(vn__ptr(dx), w->K, 0, vn__ptr(dy16), w->R, 0, vn__ptr(dense), w->K,
                                   0, w->dtype, false, false, B, w->K, w->R, 1, 1.0f, 0.0f, false) ||
                              vnk_vnm_spmm_t_if(vn__ptr(dx), w, vn__ptr(dy16), B, vn__ptr(flag))
                        : vnk_vnm_spmm_t(vn__ptr(dx), w, vn__ptr(dy16), B);
    if (failed) {
        vn_tensor_release(dx);
        dx = vn__cuda_errp(dense ? "vnm_linear: input gradient (cuBLAS on the dense W)"
                                 : "vnm_linear: input gradient (spmm_t)");
    }
    return dx;
}

/* ---- the dense W of the input gradient ------------------------------------------- */

static _Atomic int cuda_dx = VN_VNM_DX_AUTO; /* vn_vnm_set_cuda_dx; read by every call */

vn_status vn_vnm_set_cuda_dx(vn_vnm_cuda_dx path)
{
    if (path != VN_VNM_DX_AUTO && path != VN_VNM_DX_SPARSE && path != VN_VNM_DX_DENSE)
        return vn__err(VN_ERR_ARG, "vnm_set_cuda_dx: expected VN_VNM_DX_AUTO (0), "
                       "VN_VNM_DX_SPARSE (1) or VN_VNM_DX_DENSE (2), got %d", (int)path);
    atomic_store(&cuda_dx, (int)path);
    return VN_OK;
}

vn_vnm_cuda_dx vn_vnm_get_cuda_dx(void) { return (vn_vnm_cuda_dx)atomic_load(&cuda_dx); }

/* Whether dX of B rows through s goes to cuBLAS on the dense W. */
static bool dx_dense(const vn_vnm *s, int64_t B)
{
    vn_vnm_cuda_dx p = vn_vnm_get_cuda_dx();
    return p == VN_VNM_DX_DENSE || (p == VN_VNM_DX_AUTO && vnm_sptc_dx_dense(s->M, B, s->R, s->K));
}

/* The dense 16-bit W (R × K) of the packed values `packed`, cached in s:
 * built by vnk_vnm_densify when s holds none for this packed tensor (a new
 * one comes with each values version), else s's. */
static vn_tensor *dense_weights(const vn_vnm *s, const vn_tensor *pat, vn_tensor *packed)
{
    vn_vnm *m = (vn_vnm *)s; /* the cache is the only part of s that changes */
    lock_packed(s);
    vn_tensor *dense = m->dense_of == packed ? vn_tensor_retain(m->dense) : NULL;
    unlock_packed(s);
    if (dense) return dense;
    int64_t shape[2] = {s->R, s->K};
    vnk_vnm w = kernel_matrix(s, pat, packed, packed->dtype);
    dense = vn__new_on(true, packed->dtype, 2, shape);
    if (dense && vnk_vnm_densify(vn__ptr(dense), &w)) {
        vn_tensor_release(dense);
        dense = vn__cuda_errp("vnm_linear: the dense W of the input gradient");
    }
    if (!dense) return NULL;
    lock_packed(s);
    vn_tensor *old = m->dense, *old_of = m->dense_of;
    m->dense = vn_tensor_retain(dense);
    m->dense_of = vn_tensor_retain(packed);
    unlock_packed(s);
    vn_tensor_release(old);
    vn_tensor_release(old_of);
    return dense;
}

/* dvalues (R, 2G) = dYᵀ·X at the kept positions. */
static vn_tensor *values_grad(const vnk_vnm *w, const vn_tensor *dy16, const vn_tensor *xt,
                              int64_t ldx, int64_t B)
{
    int64_t shape[2] = {w->R, 2 * w->G};
    vn_tensor *dv = vn__new_on(true, VN_F32, 2, shape);
    if (dv && vnk_vnm_sddmm(vn__ptr(dv), w, vn__ptr(dy16), vn__ptr(xt), ldx, B)) {
        vn_tensor_release(dv);
        dv = vn__cuda_errp("vnm_linear: values gradient (sddmm)");
    }
    return dv;
}

/* ---- the differentiable op ------------------------------------------------------- */

/* Node: inputs x, values, bias; saved tensors the device pattern, the
 * packed values (when x needed a gradient at the forward), Xᵀ (when the
 * values did) and the dense W (when x needed a gradient and dx_dense chose
 * cuBLAS for it); saved state the matrix's shape, the operand dtype and Xᵀ's
 * leading dimension. An input that starts to require a gradient after the
 * forward has its operand rebuilt from the inputs here (every op decides at
 * backward time; the inputs' versions are checked, so they are those of the
 * forward). */
enum { SAVED_PATTERN, SAVED_PACKED, SAVED_XT, SAVED_DENSE };
struct cuda_linear_saved { int64_t R, K, V, M; vn_dtype dtype; int64_t ldx; };

static vn_status cuda_linear_backward(vn_node *node, const vn_tensor *gout)
{
    const struct cuda_linear_saved *saved = VN_SAVED_STATE(node, struct cuda_linear_saved);
    vn_vnm shape = {.R = saved->R, .K = saved->K, .V = saved->V, .M = saved->M};
    vn_dtype dtype = saved->dtype;
    int64_t B = vn_tensor_numel(gout) / shape.R, ldx = saved->ldx;
    bool dx = vn__input_needs_grad(node, 0), dvalues = vn__input_needs_grad(node, 1);
    vn_tensor *saved_packed = node->saved[SAVED_PACKED], *saved_xt = node->saved[SAVED_XT];
    if (dx && !saved_packed && check_layout("vnm_linear backward", &shape, true))
        return vn_last_status();
    const vn_tensor *pat = node->saved[SAVED_PATTERN];
    vn_tensor *packed = !dx ? NULL : saved_packed ? vn_tensor_retain(saved_packed)
                                   : pack_values(&shape, pat, node->inputs[1], dtype);
    vn_tensor *xt = !dvalues ? NULL : saved_xt ? vn_tensor_retain(saved_xt)
                                    : transposed_input(node->inputs[0], B, shape.K, dtype, &ldx);
    /* The dense path only with the forward's own packed values (a late
     * input gradient packs again here and takes the sparse kernel). */
    const vn_tensor *dense = dx && saved_packed ? node->saved[SAVED_DENSE] : NULL;
    vn_tensor *flag = dense ? zero_flag() : NULL;
    vn_tensor *dy16 = (!dx || packed) && (!dvalues || xt) && (!dense || flag)
                          ? half_rows(gout, dtype, flag) : NULL;
    vnk_vnm w = kernel_matrix(&shape, pat, packed, dtype);
    vn_status st = dy16 ? VN_OK : vn_last_status();
    if (!st && dx) st = vn__accum(node, 0, input_grad(&w, dy16, dense, flag, node->inputs[0], B));
    if (!st && dvalues) st = vn__accum(node, 1, values_grad(&w, dy16, xt, ldx, B));
    if (!st && node->ninputs == 3 && vn__input_needs_grad(node, 2))
        st = vn__accum(node, 2, vn__sum_to(gout, 1, &shape.R));
    vn_tensor_release(packed);
    vn_tensor_release(xt);
    vn_tensor_release(dy16);
    vn_tensor_release(flag);
    return st;
}

/* What a forward call makes on the device, kept by the node or released. */
typedef struct {
    const vn_tensor *pat; /* borrowed from s */
    vn_tensor *packed, *xt;
    int64_t ldx;
} fwd_operands;

/* y = X·Wᵀ + bias (bias may be NULL) with the operands made in *o (the
 * caller releases o->packed and o->xt, also on failure). */
static vn_tensor *spmm_forward(const vn_vnm *s, const vn_tensor *values, const vn_tensor *x,
                               const vn_tensor *bias, vn_dtype dtype, fwd_operands *o)
{
    int64_t B = vn_tensor_numel(x) / s->K;
    *o = (fwd_operands){.pat = device_pattern(s)};
    o->packed = o->pat ? packed_values(s, o->pat, values, dtype) : NULL;
    o->xt = o->packed ? transposed_input(x, B, s->K, dtype, &o->ldx) : NULL;
    if (!o->xt) return NULL;
    vnk_vnm w = kernel_matrix(s, o->pat, o->packed, dtype);
    return forward(&w, o->xt, o->ldx, x, B, bias);
}

vn_tensor *vnm__cuda_linear(const vn_tensor *x, const vn_vnm *s, const vn_tensor *values,
                            const vn_tensor *bias)
{
    bool dx = vn__needs_grad(x), dvalues = vn__needs_grad(values);
    if (check_layout("vnm_linear", s, dx)) return NULL;
    vn_dtype dtype = operand_dtype();
    fwd_operands o;
    vn_tensor *y = spmm_forward(s, values, x, bias, dtype, &o);
    /* The dense W is made here, where s is at hand (the node does not keep
     * s), and kept by the node for its backward. */
    bool want_dense = y && dx && dx_dense(s, vn_tensor_numel(x) / s->K);
    vn_tensor *dense = want_dense ? dense_weights(s, o.pat, o.packed) : NULL;
    if (want_dense && !dense) {
        vn_tensor_release(y);
        y = NULL;
    }
    if (y) {
        const vn_tensor *ins[3] = {x, values, bias};
        vn_node *node = vn__record(y, "vnm_linear", cuda_linear_backward, bias ? 3 : 2, ins);
        if (node) {
            *VN_SAVED_STATE(node, struct cuda_linear_saved) =
                (struct cuda_linear_saved){s->R, s->K, s->V, s->M, dtype, o.ldx};
            node->saved[SAVED_PATTERN] = vn_tensor_retain((vn_tensor *)o.pat);
            if (dx) node->saved[SAVED_PACKED] = vn_tensor_retain(o.packed);
            if (dvalues) node->saved[SAVED_XT] = vn_tensor_retain(o.xt);
            node->saved[SAVED_DENSE] = dense;
            dense = NULL;
        }
    }
    vn_tensor_release(dense);
    vn_tensor_release(o.packed);
    vn_tensor_release(o.xt);
    return y;
}

/* ---- the plain calls ----------------------------------------------------------------- */

vn_tensor *vnm__cuda_spmm(const vn_vnm *s, const vn_tensor *values, const vn_tensor *x)
{
    if (check_layout("vnm_spmm", s, false)) return NULL;
    fwd_operands o;
    vn_tensor *y = spmm_forward(s, values, x, NULL, operand_dtype(), &o);
    vn_tensor_release(o.packed);
    vn_tensor_release(o.xt);
    return y;
}

vn_tensor *vnm__cuda_spmm_t(const vn_vnm *s, const vn_tensor *values, const vn_tensor *dy)
{
    if (check_layout("vnm_spmm_t", s, true)) return NULL;
    vn_dtype dtype = operand_dtype();
    int64_t B = vn_tensor_numel(dy) / s->R;
    const vn_tensor *pat = device_pattern(s);
    vn_tensor *packed = pat ? packed_values(s, pat, values, dtype) : NULL;
    bool use_dense = packed && dx_dense(s, B);
    vn_tensor *dense = use_dense ? dense_weights(s, pat, packed) : NULL;
    vn_tensor *flag = dense ? zero_flag() : NULL;
    vn_tensor *dy16 = packed && (!use_dense || flag) ? half_rows(dy, dtype, flag) : NULL;
    vnk_vnm w = pat ? kernel_matrix(s, pat, packed, dtype) : (vnk_vnm){0};
    vn_tensor *dx = dy16 ? input_grad(&w, dy16, dense, flag, dy, B) : NULL;
    vn_tensor_release(packed);
    vn_tensor_release(dense);
    vn_tensor_release(flag);
    vn_tensor_release(dy16);
    return dx;
}

vn_tensor *vnm__cuda_sddmm(const vn_vnm *s, const vn_tensor *dy, const vn_tensor *x)
{
    if (check_layout("vnm_sddmm", s, false)) return NULL;
    vn_dtype dtype = operand_dtype();
    int64_t B = vn_tensor_numel(x) / s->K, ldx;
    const vn_tensor *pat = device_pattern(s);
    vn_tensor *xt = pat ? transposed_input(x, B, s->K, dtype, &ldx) : NULL;
    vn_tensor *dy16 = xt ? half_rows(dy, dtype, NULL) : NULL;
    vnk_vnm w = pat ? kernel_matrix(s, pat, NULL, dtype) : (vnk_vnm){0};
    vn_tensor *dv = dy16 ? values_grad(&w, dy16, xt, ldx, B) : NULL;
    vn_tensor_release(xt);
    vn_tensor_release(dy16);
    return dv;
}
