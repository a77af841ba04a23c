/* venom/transformer.h — fused transformer ops beyond venom.h's embedding,
 * layer_norm and causal_attention. Reached only through venom.h. */
#ifndef VENOM_H
#error "include <venom.h>, not <venom/transformer.h>"
#endif
#ifndef VENOM_TRANSFORMER_H
#define VENOM_TRANSFORMER_H

/* GELU (tanh form, Hendrycks & Gimpel 2016) of x plus a bias, in one pass:
 *   out = gelu(x + bias),  gelu(u) = u/2 · (1 + tanh(√(2/π)·(u + 0.044715·u³))),
 * the bias broadcast over the last dim: x (..., D) f32, bias (D) f32 →
 * (..., D) f32, CPU or CUDA (both on one device). With a Linear computed
 * without its bias, this is gelu(Linear(x)) with the bias add fused into the
 * activation (what GPT MLPs run on the GPU). Differentiable in x
 * (dx = dout ⊙ gelu'(x + bias)) and bias (the sum of dx over the leading
 * dims). Same values as vn_gelu(vn_add(x, bias)).
 * Errors: VN_ERR_ARG (NULL or freed tensor), VN_ERR_DTYPE (not f32),
 * VN_ERR_SHAPE (x 0-d, bias not (D) for x's last dim D, or D = 0),
 * VN_ERR_DEVICE (x and bias on two devices). */
vn_tensor *vn_bias_gelu(const vn_tensor *x, const vn_tensor *bias);

/* Multi-head causal self-attention on the fused output of a qkv projection
 * (GPT-2's c_attn): qkv f32 (..., T, 3·C) holds q, k and v side by side
 * along the last dim, each split into n_head heads of Dh = C / n_head
 * consecutive columns; the result (..., T, C) holds each head's output in
 * the same columns. For each head,
 *   out_h = softmax(q_h·k_hᵀ / sqrt(Dh) + mask) · v_h   (vn_causal_attention),
 * mask −inf above the diagonal. Same values as narrowing qkv into q, k, v,
 * reshaping each to (..., T, H, Dh), transposing to (..., H, T, Dh),
 * vn_causal_attention, and transposing and reshaping back; on the CPU
 * without those copies: the GEMMs read the heads where they lie in qkv and
 * write the output in place, and the backward writes dq, dk and dv into
 * one (..., T, 3·C) gradient (no zero-filled slices to add up). CUDA runs
 * that composition (vn_causal_attention's limits on Dh apply).
 * Differentiable in qkv. Errors: VN_ERR_ARG (NULL or freed tensor, n_head
 * < 1, a dim over BLAS's INT_MAX), VN_ERR_DTYPE (not f32), VN_ERR_SHAPE
 * (fewer than 2 dims, or the last dim not a positive multiple of
 * 3·n_head), VN_ERR_MEMORY (the per-thread T × T scratch). */
vn_tensor *vn_causal_self_attention(const vn_tensor *qkv, int64_t n_head);

#endif
