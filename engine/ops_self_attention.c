/* ops_self_attention.c — causal self-attention of a fused q/k/v projection,
 * the way a GPT block calls it: qkv (B, T, 3C) in, (B, T, C) out, the heads
 * split and merged by the op itself.
 *
 * CPU: the composition a model would write (narrow the q, k and v parts,
 * reshape to (B, T, H, Dh), transpose to heads (B, H, T, Dh), copy,
 * vn_causal_attention, transpose back, reshape to (B, T, C)), recorded op by
 * op on the tape: the same numbers as models/gpt.lua computed before this op
 * existed, bit for bit.
 *
 * CUDA: one node. The attention kernels (kernels/attention.cu) read the
 * heads straight out of qkv through strides and write the output in
 * (B, T, C) order, and the backward writes dq, dk and dv into their column
 * ranges of one (B, T, 3C) gradient: no transpose copy either way. */
#include "internal.h"

#include <math.h>

/* ---- CPU: the composition ------------------------------------------------------- */

/* Part i (0 q, 1 k, 2 v) of qkv (B, T, 3C) as contiguous heads (B, H, T, Dh). */
static vn_tensor *heads(const vn_tensor *qkv, int i, int64_t H)
{
    const int64_t *s = qkv->shape;
    int64_t C = s[2] / 3, shape[4] = {s[0], s[1], H, C / H};
    vn_tensor *n = vn_narrow(qkv, 2, i * C, C);
    vn_tensor *r = n ? vn_reshape(n, 4, shape) : NULL;
    vn_tensor *t = r ? vn_transpose(r, 1, 2) : NULL;
    vn_tensor *c = t ? vn_contiguous(t) : NULL;
    vn_tensor_release(n);
    vn_tensor_release(r);
    vn_tensor_release(t);
    return c;
}

static vn_tensor *self_attention_cpu(const vn_tensor *qkv, int64_t H)
{
    const int64_t *s = qkv->shape;
    int64_t oshape[3] = {s[0], s[1], s[2] / 3};
    vn_tensor *q = heads(qkv, 0, H), *k = q ? heads(qkv, 1, H) : NULL;
    vn_tensor *v = k ? heads(qkv, 2, H) : NULL;
    vn_tensor *y = v ? vn_causal_attention(q, k, v) : NULL;
    vn_tensor *yt = y ? vn_transpose(y, 1, 2) : NULL;
    vn_tensor *out = yt ? vn_reshape(yt, 3, oshape) : NULL;
    vn_tensor_release(q);
    vn_tensor_release(k);
    vn_tensor_release(v);
    vn_tensor_release(y);
    vn_tensor_release(yt);
    return out;
}

/* ---- CUDA: strided kernels --------------------------------------------------------- */

struct self_attention_saved {
    int64_t H;
};

/* The three parts of qkv (B, T, 3C) as heads: [q | k | v] along the last
 * dim, head h of each at columns h·Dh.. of its part. */
static att_layout qkv_layout(int64_t T, int64_t C, int64_t Dh)
{
    att_layout l = {T * 3 * C, Dh, 3 * C};
    return l;
}

/* The output (B, T, C): head h at columns h·Dh... */
static att_layout out_layout(int64_t T, int64_t C, int64_t Dh)
{
    att_layout l = {T * C, Dh, C};
    return l;
}

/* From the saved lse (saved[0], (B·H, T)) and output (saved[1]); the kernels
 * write every element of dqkv (the q, k and v column ranges are disjoint). */
static vn_status self_attention_backward(vn_node *node, const vn_tensor *gout)
{
    const vn_tensor *lse = node->saved[0];
    const int64_t *s = node->inputs[0]->shape;
    int64_t B = s[0], T = s[1], C = s[2] / 3, H = VN_SAVED_STATE(node, struct self_attention_saved)->H,
            Dh = C / H;
    vn_tensor *x = vn__plain_contiguous(node->inputs[0]);
    vn_tensor *g = x ? vn__plain_contiguous(gout) : NULL;
    vn_tensor *dvec = g ? vn__new_on(true, VN_F32, 2, lse->shape) : NULL;
    vn_tensor *d = dvec ? vn__new_on(true, VN_F32, 3, s) : NULL;
    bool ok = d != NULL;
    if (ok) {
        const float *px = vn__ptr(x);
        float *pd = vn__ptr(d);
        if (vnk_attention_backward(pd, pd + C, pd + 2 * C, vn__ptr(dvec), px, px + C, px + 2 * C,
                                   vn__ptr(node->saved[1]), vn__ptr(g), vn__ptr(lse),
                                   qkv_layout(T, C, Dh), out_layout(T, C, Dh), B, H, T, Dh,
                                   (float)(1.0 / sqrt((double)Dh))))
            ok = !vn__cuda_err("causal_self_attention backward");
    }
    vn_tensor_release(x);
    vn_tensor_release(g);
    vn_tensor_release(dvec);
    if (!ok) {
        vn_tensor_release(d);
        return vn_last_status();
    }
    return vn__accum(node, 0, d);
}

static vn_tensor *self_attention_cuda(const vn_tensor *qkv, int64_t H)
{
    const int64_t *s = qkv->shape;
    int64_t B = s[0], T = s[1], C = s[2] / 3, Dh = C / H, oshape[3] = {B, T, C},
            lshape[2] = {B * H, T};
    if (Dh != 32 && Dh != 64 && Dh != 128)
        return vn__errp(VN_ERR_ARG, "causal_self_attention: on CUDA the head dim C / n_head must "
                        "be 32, 64 or 128 (the tensor-core tiles), found %lld / %lld = %lld",
                        (long long)C, (long long)H, (long long)Dh);
    if (B * H > 65535 || T > (1 << 30))
        return vn__errp(VN_ERR_ARG, "causal_self_attention: on CUDA at most 65535 batch × heads "
                        "and 2^30 positions, found qkv %s with n_head %lld",
                        vn__shape(3, s), (long long)H);
    vn_tensor *x = vn__plain_contiguous(qkv);
    vn_tensor *lse = x ? vn__new_on(true, VN_F32, 2, lshape) : NULL;
    vn_tensor *out = lse ? vn__new_on(true, VN_F32, 3, oshape) : NULL;
    if (out) {
        const float *px = vn__ptr(x);
        if (vnk_attention_forward(vn__ptr(out), vn__ptr(lse), px, px + C, px + 2 * C,
                                  qkv_layout(T, C, Dh), out_layout(T, C, Dh), B, H, T, Dh,
                                  (float)(1.0 / sqrt((double)Dh)))) {
            vn_tensor_release(out);
            out = vn__cuda_errp("causal_self_attention");
        }
    }
    vn_tensor_release(x);
    vn_node *node = out ? vn__record(out, "causal_self_attention", self_attention_backward, 1,
                                     &qkv)
                        : NULL;
    if (node) {
        VN_SAVED_STATE(node, struct self_attention_saved)->H = H;
        node->saved[0] = vn_tensor_retain(lse);
        node->saved[1] = vn__alias(out);
    }
    vn_tensor_release(lse);
    return out;
}

vn_tensor *vn_causal_self_attention(const vn_tensor *qkv, int64_t n_head)
{
    if (vn__check_dtype_for(qkv, VN_F32, "causal_self_attention: qkv", VN_ALLOW_CUDA))
        return NULL;
    if (qkv->ndim != 3 || n_head < 1 || qkv->shape[2] % (3 * n_head) != 0)
        return vn__errp(VN_ERR_SHAPE, "causal_self_attention: expected qkv (B, T, 3C) with C a "
                        "multiple of n_head ≥ 1, found qkv %s and n_head %lld",
                        vn__shape(qkv->ndim, qkv->shape), (long long)n_head);
    return vn__is_cuda(qkv) ? self_attention_cuda(qkv, n_head) : self_attention_cpu(qkv, n_head);
}
