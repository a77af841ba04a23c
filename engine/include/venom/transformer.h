/* venom/transformer.h — fused transformer ops beyond venom.h's embedding,
 * layer_norm and causal_attention: bias + GELU, self-attention of a fused
 * qkv projection, and its last position alone (decoding with a KV cache);
 * a GPT's whole decoding step in one call (vn_gpt_decoder). Reached only
 * through venom.h. */
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
 * cache is read in place; features not adjacent are copied first) → out
 * (B, 1, C) f32. The same values as the last row of
 * vn_causal_self_attention up to f32 rounding (the same vectorized exp;
 * the scores summed in another order, and past 64 positions the online
 * softmax over chunks of 64). Not recorded on the tape
 * (inference). Errors: VN_ERR_ARG (NULL or freed), VN_ERR_DTYPE (not f32),
 * VN_ERR_DEVICE (a CUDA tensor), VN_ERR_SHAPE (qkv not 3-d, T = 0, n_head
 * < 1, or the last dim not a multiple of 3·n_head), VN_ERR_MEMORY. */
vn_tensor *vn_causal_self_attention_last(const vn_tensor *qkv, int64_t n_head);

/* ---- a GPT's decoding step in one call ----------------------------------------- */

/* A decoder runs one new token through a GPT-2-style model (models/gpt.lua:
 * pre-norm blocks x + attn(ln1(x)), then + mlp(ln2(·)) with a GELU MLP, a
 * final norm and the head tied to the token embedding) at batch 1, with a
 * KV cache per block: the row of vn_causal_self_attention_last's step, but
 * the checks are made once, when the decoder is made, and a step allocates
 * nothing. For generation on the CPU, where at batch 1 the per-op overhead
 * outweighs a narrow model's products. The logits are bit for bit those of
 * the same step through the ops (vn_embedding + vn_add, vn_layer_norm or
 * vn_rms_norm, vn_linear or vn_rms_norm + vn_ternary_matmul, the cache row
 * written, vn_causal_self_attention_last, vn_gelu, vn_linear with wte).
 *
 * A norm: LayerNorm y = (x − mean)/σ ⊙ weight + bias (bias may be NULL), or
 * with rms RMSNorm y = x / √(mean(x²) + eps) ⊙ weight (no bias). weight
 * and bias f32 (C). */
typedef struct {
    const vn_tensor *weight, *bias;
    double eps;
    bool rms;
} vn_decode_norm;

/* A projection K → N: f32 weight (N, K) and bias (N) or NULL, y = x·Wᵀ + b;
 * or BitNet b1.58 packed ternary weights (weight NULL): packed u8 (N,
 * vn_ternary_row_bytes(K)) with its γ (vn_ternary_matmul), after an
 * optional RMSNorm of the input, norm f32 (K) with norm_eps (nn.BitLinear's
 * SubLN; NULL: none). */
typedef struct {
    const vn_tensor *weight, *bias;
    const vn_tensor *packed;
    float gamma;
    const vn_tensor *norm;
    double norm_eps;
} vn_decode_linear;

/* One block: qkv C → 3C (q | k | v, heads of C / n_head), attn_proj C → C,
 * fc C → H, mlp_proj H → C (H the same for every block), and its KV cache
 * f32 (1, block_size, 3C), contiguous: a step at position t writes row t
 * (the token's qkv projection) and reads rows 0..t. */
typedef struct {
    vn_decode_norm ln1, ln2;
    vn_decode_linear qkv, attn_proj, fc, mlp_proj;
    vn_tensor *cache;
} vn_decode_block;

/* The model: token embedding wte f32 (vocab, C) (also the head), position
 * embedding wpe f32 (block_size, C), n_layer blocks, the final norm ln_f. */
typedef struct {
    const vn_tensor *wte, *wpe;
    vn_decode_norm ln_f;
    int64_t n_layer, n_head;
    const vn_decode_block *blocks;
} vn_gpt_decoder_spec;

typedef struct vn_gpt_decoder vn_gpt_decoder;

/* Checks the spec (every tensor on the CPU, contiguous, of the dtype and
 * shape above; packed codes as vn_ternary_check) and makes a decoder that
 * holds a reference to each tensor: it reads the f32 weights and norms as
 * they are at each step. Packed ternary weights are read once, here: where
 * the packed products run the AVX-512 VNNI kernel and no packed weight
 * exceeds 1 MiB, the decoder keeps a copy re-laid with one weight row per
 * vector lane (as many bytes again as the packed weights), which its steps
 * use; a change to packed weights after
 * this call needs a new decoder (vn_gpt_decoder_current tells). Errors: VN_ERR_ARG (NULL spec or tensor, n_head not dividing
 * C, n_layer < 1, a projection with both or neither of weight and packed, a
 * bias or norm where the kind has none, eps or γ out of range, a
 * non-contiguous tensor, a cache sharing memory with another tensor of the
 * spec, which the steps would overwrite), VN_ERR_STATE (a freed tensor), VN_ERR_DTYPE,
 * VN_ERR_DEVICE, VN_ERR_SHAPE (the message names the tensor, blocks
 * counted from 1: "block 2 of 4: fc weight"; an MLP of width 0), VN_ERR_FORMAT (a corrupt packed code),
 * VN_ERR_MEMORY. */
vn_gpt_decoder *vn_gpt_decoder_new(const vn_gpt_decoder_spec *spec);

/* One step: token (0..vocab−1) at position pos (0..block_size−1), whose
 * cache rows 0..pos−1 hold the earlier positions' projections (from earlier
 * steps, or written by the caller from a forward pass over a prompt).
 * Returns the logits (vocab floats), owned by the decoder and overwritten
 * by the next step; NULL on error: VN_ERR_ARG (NULL decoder, token or pos
 * out of range), VN_ERR_STATE (a tensor it holds was freed since, or one
 * other than a cache was written in place since: vn_gpt_decoder_current
 * is false). */
const float *vn_gpt_decoder_step(vn_gpt_decoder *d, int64_t token, int64_t pos);

/* The last step's logits (as vn_gpt_decoder_step returned them); NULL with
 * VN_ERR_ARG for a NULL decoder, VN_ERR_STATE before the first step. */
const float *vn_gpt_decoder_logits(const vn_gpt_decoder *d);

/* Whether the decoder still reads what its spec's tensors hold: false when
 * one of them (the caches aside, which the steps write) was freed, or its
 * storage written in place (vn_tensor_copy_, vn_tensor_fill_, an optimizer
 * step: every engine write bumps the storage's version) since
 * vn_gpt_decoder_new; false for NULL. A caller that keeps a decoder between
 * generations makes a new one when this is false: the packed weights' copy
 * and their code check date from vn_gpt_decoder_new. Writes through
 * vn_tensor_data's pointer are not seen. */
bool vn_gpt_decoder_current(const vn_gpt_decoder *d);

/* The vocabulary size (the logits' length) and the block size (positions
 * 0..block_size−1); 0 for NULL. */
int64_t vn_gpt_decoder_vocab(const vn_gpt_decoder *d);
int64_t vn_gpt_decoder_block_size(const vn_gpt_decoder *d);

/* A draw from the distribution ∝ exp(l_i / temperature) over the n logits l
 * (double), restricted to those ≥ the top_k-th largest (top_k = 0: all):
 * with w_i = exp((l_i − max l) / temperature) (in f32, by the polynomial exp
 * of the engine's softmaxes, to about 2 ulp; 0 outside the top_k and for an
 * exponent below −87.3), the first i whose running sum Σ_{j ≤ i} w_j (in
 * double) exceeds u·Σ w (the last i with
 * w_i > 0 if rounding leaves none); u is a uniform draw in [0, 1) from the
 * caller's RNG. models/gpt.lua's generate draws each token so. *index gets
 * i (0-based). Errors: VN_ERR_ARG (NULL pointers, n < 1, temperature not
 * positive and finite, top_k < 0, u outside [0, 1), a logit NaN or +inf,
 * every logit −inf), VN_ERR_MEMORY. */
vn_status vn_sample_logits(const double *logits, int64_t n, double temperature, int64_t top_k,
                           double u, int64_t *index);

/* A step and a draw in one call, for generation: vn_gpt_decoder_step(d,
 * token, pos), then vn_sample_logits over its logits with u drawn from the
 * engine RNG as vn_rand draws one element (so a seed gives the tokens of
 * vn_rand + vn_sample_logits); the drawn token (0-based) in *next. Errors:
 * those of both; a temperature or top_k out of range, or a NULL next, is
 * refused before the step, so the cache and the RNG are untouched. */
vn_status vn_gpt_decoder_next(vn_gpt_decoder *d, int64_t token, int64_t pos, double temperature,
                              int64_t top_k, int64_t *next);

/* Releases the decoder and its references (NULL is a no-op). */
void vn_gpt_decoder_free(vn_gpt_decoder *d);

#endif
