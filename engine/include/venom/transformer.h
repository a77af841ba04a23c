/* venom/transformer.h — fused transformer ops beyond venom.h's embedding,
 * layer_norm and causal_attention: bias + GELU, self-attention of a fused
 * qkv projection, and its last position alone (decoding with a KV cache). Reached only through venom.h. */
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

/* Causal self-attention of a fused projection, as a GPT block calls it:
 *   q, k, v = qkv[..., 0:C], qkv[..., C:2C], qkv[..., 2C:3C], each split
 *   into n_head heads of Dh = C / n_head columns (head h: columns h·Dh..),
 *   out[b, t, h·Dh + d] = (softmax(q_h·k_hᵀ / √Dh, causal) · v_h)[t, d].
 * qkv (B, T, 3C) f32, CPU or CUDA → out (B, T, C) f32 on the same device;
 * differentiable in qkv. The same values as splitting the heads out
 * ((B, H, T, Dh) copies), vn_causal_attention, and merging them back (on
 * the CPU bit for bit), without those copies: vn_causal_attention's kernels
 * read the heads straight out of qkv through strides (on the CPU, GEMMs
 * with a leading dimension; on CUDA the FlashAttention-2 kernels, bf16
 * tensor cores with f32 accumulation) and write out in (B, T, C) order, and
 * the backward writes one (B, T, 3C) gradient. On CUDA Dh must be 32, 64
 * or 128. Errors: VN_ERR_ARG (NULL or freed tensor; on CUDA another Dh,
 * B·n_head > 65535 or T > 2^30; on the CPU a size over BLAS's INT_MAX),
 * VN_ERR_DTYPE (not f32), VN_ERR_SHAPE (qkv not 3-d, n_head < 1, or the
 * last dim not a multiple of 3·n_head), VN_ERR_MEMORY (the CPU's per-thread
 * T × T scratch). */
vn_tensor *vn_causal_self_attention(const vn_tensor *qkv, int64_t n_head);

/* The last position of vn_causal_self_attention(qkv, n_head), alone: for
 * decoding with a KV cache, where rows 0..T−2 of qkv are the cached
 * projections of the tokens so far and row T−1 the new token's, whose query
 * attends to all T keys:
 *   out[b, 0, h·Dh + d] = Σ_t softmax_t(q_h[T−1]·k_h[t] / √Dh) · v_h[t, d].
 * qkv (B, T, 3C) f32 on the CPU, any strides (a narrowed view of a longer
 * cache is read in place) → out (B, 1, C) f32. The same values as the last
 * row of vn_causal_self_attention up to f32 rounding (expf and the online
 * softmax against its vectorized exp). Not recorded on the tape
 * (inference). Errors: VN_ERR_ARG (NULL or freed), VN_ERR_DTYPE (not f32),
 * VN_ERR_DEVICE (a CUDA tensor), VN_ERR_SHAPE (qkv not 3-d, T = 0, n_head
 * < 1, or the last dim not a multiple of 3·n_head), VN_ERR_MEMORY. */
vn_tensor *vn_causal_self_attention_last(const vn_tensor *qkv, int64_t n_head);

#endif
