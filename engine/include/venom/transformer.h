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

#endif
