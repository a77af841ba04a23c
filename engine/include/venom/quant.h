/* venom/quant.h — BitNet b1.58 ternary layers (engine/quant/). Reached only
 * through venom.h.
 *
 * The math (Ma et al. 2024, "The Era of 1-bit LLMs", arXiv 2402.17764, and
 * Wang et al. 2023, arXiv 2310.11453):
 *   weights      γ = mean|W| over the whole matrix,
 *                W̃ = RoundClip(W / (γ + ε), −1, 1) ∈ {−1, 0, 1}, ε = 1e-5,
 *                the layer uses γ·W̃;
 *   activations  per row (token) b: s_b = 127 / max_k |x_bk|,
 *                x̃_bk = clamp(round(x_bk·s_b), −128, 127), the layer uses x̃/s;
 *   output       Y = (x̃·W̃ᵀ)·γ/s (no bias).
 * round() is round-half-to-even (as torch.round). An all-zero row has no
 * scale (s = ∞): its x̃ is 0 and its output row is 0; so has a row whose
 * max |x| is below 127/FLT_MAX ≈ 3.7e-37 (s overflows f32). A zero weight matrix
 * (γ = 0) gives W̃ = 0 and a zero output, never NaN. A row holding a NaN or
 * ∞ gives a NaN output row. */
#ifndef VENOM_H
#error "include <venom.h>, not <venom/quant.h>"
#endif
#ifndef VENOM_QUANT_H
#define VENOM_QUANT_H

/* The BitLinear layer Y = Q(X)·Q(W)ᵀ with the quantisers above, as a
 * differentiable op. x f32 (..., K), w f32 (N, K), both on the CPU or both
 * on CUDA (there the quantisers are built from the engine's elementwise ops
 * and reductions, then cuBLAS; not yet run on a GPU) → y f32 (..., N).
 * Backward is the straight-through estimator (STE) of both roundings:
 * dX = dY·(γW̃) and dW = dYᵀ·(x̃/s), i.e. the quantisers pass the gradient
 * as the identity (the activation clamp never saturates, since |x·s| ≤ 127
 * by the choice of s, so there is nothing to clip). The
 * normalisation before the quantiser (SubLN) is the caller's (nn.BitLinear).
 * Errors: VN_ERR_ARG (NULL or freed), VN_ERR_DTYPE (not f32), VN_ERR_SHAPE
 * (w not 2-D, last dim of x ≠ K), VN_ERR_DEVICE (x and w on different
 * devices), VN_ERR_MEMORY. */
vn_tensor *vn_bitlinear(const vn_tensor *x, const vn_tensor *w);

/* The weight quantiser alone: γ·W̃ for w f32 (N, K) on the CPU, with γ in
 * *gamma (may be NULL). Not recorded on the tape. Errors as vn_bitlinear,
 * and VN_ERR_DEVICE for a CUDA tensor. */
vn_tensor *vn_ternary_quantize(const vn_tensor *w, float *gamma);

/* Packed ternary weights for inference. Row n of W̃ (N, K) takes
 * vn_ternary_row_bytes(K) = 32·⌈K/128⌉ bytes: column k sits in byte
 * 32·(k/128) + k%32 of the row, bits 2·((k%128)/32) and up, as the code
 * W̃+1 ∈ {0, 1, 2}; columns past K hold code 1 (zero). So one 32-byte group
 * holds 128 columns and unpacks to four 32-lane vectors with a shift and a
 * mask. */
int64_t vn_ternary_row_bytes(int64_t K);

/* Quantises w f32 (N, K) (CPU) as above and packs W̃: u8 (N,
 * vn_ternary_row_bytes(K)); γ in *gamma (required). Errors as
 * vn_ternary_quantize, VN_ERR_ARG for a NULL gamma. */
vn_tensor *vn_ternary_pack(const vn_tensor *w, float *gamma);

/* Checks packed weights: u8 (N, vn_ternary_row_bytes(K)) with K ≥ 1, every
 * code 0, 1 or 2 and code 1 past K. VN_OK, or VN_ERR_DTYPE, VN_ERR_SHAPE,
 * VN_ERR_ARG (K < 1), VN_ERR_FORMAT (a bad code: row, column and code in
 * the message). For data from outside (a file) before vn_ternary_matmul,
 * which does not look at every code on each call. */
vn_status vn_ternary_check(const vn_tensor *packed, int64_t K);

/* The inverse: W̃ f32 (N, K) ∈ {−1, 0, 1} from packed u8 (N, row bytes).
 * Errors: VN_ERR_DTYPE (not u8), VN_ERR_SHAPE (not 2-D, or its width is
 * not vn_ternary_row_bytes(K)), VN_ERR_FORMAT (a code 3, or a padding code
 * that is not 1: a corrupt file), VN_ERR_ARG (K < 1). */
vn_tensor *vn_ternary_unpack(const vn_tensor *packed, int64_t K);

/* Inference with packed weights: y f32 (..., N) = (x̃·W̃ᵀ)·γ/s for x f32
 * (..., K), the activations quantised to int8 per row as above and the dot
 * products done in integers (AVX-512 VNNI vpdpbusd, AVX2 vpmaddubsw, or
 * portable C; see vn_ternary_set_kernel). Equal to vn_bitlinear's forward up to f32 rounding. Not
 * recorded on the tape. packed must be valid (made by vn_ternary_pack, or
 * passed by vn_ternary_check): a code 3 would count as 2. Errors: the shape
 * errors of vn_ternary_check, VN_ERR_SHAPE when x's last dim is not K, VN_ERR_ARG for a γ that is
 * negative or not finite. */
vn_tensor *vn_ternary_matmul(const vn_tensor *x, const vn_tensor *packed, int64_t K, float gamma);

/* The packed kernels (vn_ternary_matmul, vn_ternary_vnm_matmul) come in
 * three instruction sets: "avx512vnni" (AVX-512 F, BW and VNNI:
 * vpdpbusd), "avx2" (vpmaddubsw) and "portable" (plain C). All three give
 * the same integer sums, so the same outputs bit for bit; they differ in
 * speed only. The automatic choice (the default) takes the widest the CPU
 * has, per product by its number of activation rows (the product of
 * x's leading dims): on AMD CPUs up to 4 rows (decoding is 1) go to AVX2,
 * which was as fast or faster there than VNNI (Zen 4, bench/RESULTS.md). Environment
 * variables narrow the automatic choice: VENOM_NO_AVX512 (non-empty)
 * skips "avx512vnni", VENOM_NO_AVX2 (non-empty) forces "portable".
 *
 * vn_ternary_set_kernel(name) forces one kernel for every later product in
 * the process, all threads ("avx512vnni", "avx2", "portable"; over the
 * environment variables), or goes back to the automatic choice ("auto"):
 * for benchmarks and tests. Errors: VN_ERR_ARG for NULL, an unknown name,
 * or a kernel this CPU (or build) lacks; the setting is then unchanged. */
vn_status vn_ternary_set_kernel(const char *name);

/* The name of the kernel a product with `rows` activation rows runs now
 * ("avx512vnni", "avx2" or "portable"), for large weights: on AMD CPUs one
 * row against packed weights of at most 1 MiB runs "avx512vnni" (its
 * one-row loop) where this says "avx2". */
const char *vn_ternary_kernel(int64_t rows);

/* The name of the kernel for large products (many rows): the widest
 * instruction set the CPU has (narrowed by the environment variables
 * above), or the forced kernel. */
const char *vn_ternary_isa(void);

/* RMSNorm (Zhang & Sennrich 2019) over the last dim, BitNet's norm (SubLN
 * before each BitLinear): y = x / √(mean(x²) + eps) ⊙ weight, the mean
 * over the last dim of x (..., D) f32, weight (D) f32, eps > 0, CPU or
 * CUDA. When a gradient is wanted (grad mode on, x or weight needing one)
 * and on CUDA it is the composition of the engine's ops (vn_mul, vn_mean,
 * vn_add, vn_sqrt, vn_div, vn_mul), differentiable through them; otherwise
 * (inference) one loop over rows on the CPU that gives the same bits.
 * Errors: VN_ERR_ARG (NULL or freed; eps not positive and finite),
 * VN_ERR_DTYPE, VN_ERR_SHAPE (0-d x, D = 0, weight not (D)), VN_ERR_DEVICE
 * (two devices), VN_ERR_MEMORY. */
vn_tensor *vn_rms_norm(const vn_tensor *x, const vn_tensor *weight, double eps);

/* ---- fake quantisation (the quantisers as ops, for layers that compose them) ---- */

/* γ·W̃ of w f32 (any shape, non-empty) with γ = Σ|w| / count, as a
 * differentiable op whose backward is the STE (the identity). count = the
 * number of elements gives vn_bitlinear's weights; a V:N:M layer passes its
 * number of kept weights (vn_vnm_summary.nnz), so that γ is the mean |w|
 * over the weights the layer has, not over its pruned zeros. CPU or CUDA.
 * Errors: VN_ERR_ARG (NULL, freed, count outside 1..numel), VN_ERR_DTYPE,
 * VN_ERR_SHAPE (an empty w), VN_ERR_MEMORY. */
vn_tensor *vn_ternary_fake_quant(const vn_tensor *w, int64_t count);

/* x̃/s of every row (last dim) of x f32 (..., K), K ≥ 1: the activation
 * quantiser above, differentiable with the STE (the identity; |x·s| ≤ 127,
 * so the clamp never saturates). CPU or CUDA. Errors as
 * vn_ternary_fake_quant (VN_ERR_SHAPE for a 0-d x or K = 0). */
vn_tensor *vn_int8_fake_quant(const vn_tensor *x);

/* ---- ternary V:N:M ("BitNet 2:8") ----------------------------------------------- */

/* A V:N:M matrix s (R × K, G = ⌈K/M⌉ groups; see vn_vnm_from_dense) whose
 * kept weights are ternary: W̃ = RoundClip(v / (γ + ε), −1, 1) for each of
 * its values v, with γ = Σ|v| / nnz, the mean over the kept weights. Packed
 * per row as a dense ternary row over the row block's 4·G kept columns
 * ("compact columns": column 4·g + j is the j-th kept column of group g,
 * j = 0..3; the two a row does not keep hold 0), in the layout of
 * vn_ternary_pack: u8 (R, vn_ternary_row_bytes(4·G)). That is 4 bits per
 * kept weight (its trit and its position among the 4) plus the block's
 * column locations, which stay in s. s's values f32 on the CPU. γ in
 * *gamma (required). Errors: VN_ERR_ARG (NULL s or gamma), VN_ERR_DTYPE,
 * VN_ERR_DEVICE (values on CUDA), VN_ERR_MEMORY. */
vn_tensor *vn_ternary_vnm_pack(const vn_vnm *s, float *gamma);

/* Checks packed weights for s: the shape (R, vn_ternary_row_bytes(4·G)),
 * every code as vn_ternary_check, and zero trits at the two positions of
 * each group that a row does not keep. VN_OK or VN_ERR_SHAPE, VN_ERR_DTYPE,
 * VN_ERR_FORMAT (the row and group in the message), VN_ERR_ARG. */
vn_status vn_ternary_vnm_check(const vn_tensor *packed, const vn_vnm *s);

/* Inference: y f32 (..., R) = (x̃·W̃ᵀ)·γ/s for x f32 (..., K) on the CPU,
 * x quantised to int8 per row as above; for each block of V rows the kernel
 * gathers the block's 4·G columns of x̃ into a compact row, then takes
 * integer dot products with the packed rows (the kernels of
 * vn_ternary_matmul, chosen as vn_ternary_kernel(rows) says). Equal to
 * vn_vnm_linear(vn_int8_fake_quant(x), s, γ·W̃ values, NULL) up to f32
 * rounding. Not recorded on the tape. packed must be valid (from
 * vn_ternary_vnm_pack(s), or passed by vn_ternary_vnm_check). Errors:
 * VN_ERR_ARG (NULL s, a γ negative or not finite), VN_ERR_SHAPE (packed not
 * (R, row bytes of 4·G), x's last dim not K), VN_ERR_DTYPE, VN_ERR_MEMORY. */
vn_tensor *vn_ternary_vnm_matmul(const vn_tensor *x, const vn_vnm *s, const vn_tensor *packed,
                                 float gamma);

#endif
