/* quant_internal.h — what the files of engine/quant/ (and its white-box
 * tests) share: the two quantisers of BitNet b1.58 as plain loops, and the
 * packed ternary kernels by instruction set. The formulas are in
 * venom/quant.h. */
#ifndef VENOM_QUANT_INTERNAL_H
#define VENOM_QUANT_INTERNAL_H

#include "internal.h"

#include <float.h>
#include <stdint.h>

#define VNQ_EPS 1e-5f    /* ε of W / (γ + ε) */
#define VNQ_GROUP 128    /* columns per 32-byte group of a packed row */
#define VNQ_GROUP_BYTES 32

/* γ = Σ|w| / count over n values (summed in double: n may be 10⁸); count
 * is n for BitLinear, the number of kept weights for a V:N:M matrix. */
float vnq__gamma(const float *w, int64_t n, int64_t count);

/* W̃ = RoundClip(w / (γ + ε), −1, 1), as a float in {−1, 0, 1}. */
static inline float vnq__trit(float w, float gamma)
{
    float r = nearbyintf(w / (gamma + VNQ_EPS)); /* half to even, as torch.round */
    return r > 1.0f ? 1.0f : r < -1.0f ? -1.0f : r;
}

/* The least row max |x| whose s = 127 / max is finite in f32 (≈ 3.7e-37):
 * a row below it has no scale, as an all-zero row (0·∞ would give NaN). */
#define VNQ_MIN_ROW_MAX (127.0f / FLT_MAX)

/* Row x (K values) → s = 127 / max|x| (0 for an all-zero row, or one whose
 * max is below VNQ_MIN_ROW_MAX, whose x̃ is 0; NaN for a row holding a NaN
 * or ∞, whose x̃ is 0 and x̃/s NaN), and
 * x̃ = clamp(round(x·s), −128, 127) into q as int8 (q may be NULL) and as
 * x̃/s into xq (may be NULL). Returns s. */
float vnq__quantize_row(const float *x, int64_t K, int8_t *q, float *xq);
/* The same given m = max|x| and finite = whether every x is finite (its
 * first pass, where the caller had them already). */
float vnq__quantize_row_max(const float *x, int64_t K, float m, int finite, int8_t *q, float *xq);

/* The two quantisers built from public ops (vn_abs, vn_mean_all, vn_div,
 * vn_clamp, ...), for CUDA tensors: γ·W̃ of w (any shape, γ = Σ|w| / count),
 * and x̃/s of every row of
 * x (..., K). Run with grad mode off. The same values as the loops above
 * (γ up to its f32 summation). */
vn_tensor *vnq__quantize_weight_ops(const vn_tensor *w, int64_t count);
vn_tensor *vnq__quantize_input_ops(const vn_tensor *x);

/* The packed kernel, over N weight rows: y[b·ldy + n] = (Σ_k x̃[b·Kp + k]·
 * W̃[n, k])·γ/s[b] for b < B, n < N; packed rows of Kp/4 bytes, x̃ rows of
 * Kp int8 (Kp a multiple of 128, zero past K), xsum[b] = Σ_k x̃[b, k].
 * s[b] = 0 gives a zero row, s[b] = NaN a NaN row. Single-threaded: the
 * callers split the rows over threads. */
typedef void (*vnq_kernel)(const uint8_t *packed, int64_t N, int64_t Kp, const int8_t *xq,
                           const int32_t *xsum, const float *s, int64_t B, float gamma, float *y,
                           int64_t ldy);
/* By name: "portable", "avx2" or "avx512vnni" (NULL where the build or
 * CPU lacks it); NULL: the kernel vn_ternary_isa names. */
vnq_kernel vnq__kernel(const char *isa);
/* The kernel a product of `rows` activation rows runs: the one forced by
 * vn_ternary_set_kernel, else the automatic choice (vn_ternary_kernel). */
vnq_kernel vnq__kernel_for(int64_t rows);
/* The same for a product with N packed weight rows of row_bytes bytes each
 * (vnq__kernel_for: of unknown size, taken as large and wide). */
vnq_kernel vnq__kernel_for_shape(int64_t rows, int64_t N, int64_t row_bytes);

/* Where column k of a packed row sits: byte and bit shift; its code. */
static inline int64_t vnq__code_byte(int64_t k) { return k / VNQ_GROUP * VNQ_GROUP_BYTES + k % 32; }
static inline int vnq__code_shift(int64_t k) { return 2 * (int)(k % VNQ_GROUP / 32); }
static inline int vnq__code_at(const uint8_t *row, int64_t k)
{
    return row[vnq__code_byte(k)] >> vnq__code_shift(k) & 3;
}

/* Packing (layout in venom/quant.h): every code of nbytes of packed rows
 * set to 1 (zero); column k of a packed row set to the trit t ∈ {−1, 0, 1}. */
void vnq__clear_packed(uint8_t *dst, int64_t nbytes);
void vnq__set_trit(uint8_t *row, int64_t k, int t);
/* packed u8 (N, vn_ternary_row_bytes(K)) with K ≥ 1: the shape only (op
 * names the caller in the message). */
vn_status vnq__check_packed(const vn_tensor *packed, int64_t K, const char *op);
/* vnq__check_packed, then every code (vn_ternary_check with op's name). */
vn_status vnq__check_codes(const vn_tensor *packed, int64_t K, const char *op);

/* x's B rows (K values each) quantised for the kernel: x̃ (B × Kp int8, zero
 * past K), Σ x̃ and s per row, in one allocation from the cache (free with
 * vn__mem_free(mem, nbytes)). False when out of memory. */
typedef struct {
    void *mem;
    size_t nbytes;
    int8_t *q;
    int32_t *sum;
    float *s;
} vnq_rows;
bool vnq__quantize_rows(const float *x, int64_t B, int64_t K, int64_t Kp, vnq_rows *r);
/* The same in memory the caller holds (the fused decoder's scratch):
 * vnq__rows_bytes(B, Kp) bytes at mem, laid out by vnq__rows_at, then filled
 * by vnq__quantize_into. */
size_t vnq__rows_bytes(int64_t B, int64_t Kp);
void vnq__rows_at(void *mem, int64_t B, int64_t Kp, vnq_rows *r);
void vnq__quantize_into(const float *x, int64_t B, int64_t K, int64_t Kp, vnq_rows *r);
/* out (B, N) = the product of the quantised rows r with N packed weight rows
 * p (Kp/4 bytes each), times γ/s: vn_ternary_matmul's kernel call, split
 * over threads when large. kernel: NULL for vnq__kernel_for_shape(B, N,
 * Kp/4), which reads the environment (VENOM_NO_AVX2, ...) on every call;
 * a caller making many small products (the decoder) picks it once. */
void vnq__product(vnq_kernel kernel, const uint8_t *p, int64_t N, int64_t Kp, const vnq_rows *r,
                  int64_t B, float gamma, float *out);
/* Packed weights re-laid with 16 weight rows per tile, one row per 32-bit
 * vector lane, for one activation row (ternary_lanes.c, where the layout is
 * described). The largest K it takes: each field's int32 sum is up to
 * 4³·2·128 per column of a quarter of Kp, below 2³¹ up to Kp = 2¹⁹. */
#define VNQ_LANES_MAX_K (1 << 18)
/* The most bytes of packed weights (one matrix) it is used for: measured
 * only on tutorial 5's small weights (bench/RESULTS.md, issue 20, wt-a),
 * and the copy doubles the weights' memory. */
#define VNQ_LANES_MAX_BYTES (1 << 20)
/* Whether this build and CPU run it (AVX-512 VNNI) for N rows of K columns
 * (K ≤ VNQ_LANES_MAX_K, at most VNQ_LANES_MAX_BYTES packed). */
bool vnq__lanes_usable(int64_t N, int64_t K);
/* Bytes of the re-laid copy of N packed rows of Kp/4 bytes (N rounded up
 * to 16 rows). */
size_t vnq__lanes_bytes(int64_t N, int64_t Kp);
/* lanes (vnq__lanes_bytes(N, Kp) bytes) = the N packed rows re-laid; only
 * where vnq__lanes_usable. */
void vnq__lanes_pack(const uint8_t *packed, int64_t N, int64_t Kp, uint8_t *lanes);
/* y (N) = the one-row product of x̃ (Kp int8, zero past K; Σ x̃ = xsum, scale
 * s) with the re-laid weights, times γ/s: the packed kernels' outputs bit for
 * bit. Only where vnq__lanes_usable. */
void vnq__lanes_product(const uint8_t *lanes, int64_t N, int64_t Kp, const int8_t *xq, int32_t xsum,
                        float s, float gamma, float *y);
/* RMSNorm of one row (vn_rms_norm at inference; rms_norm.c). */
void vnq__rms_row(const float *x, const float *w, int64_t D, double eps, float *y);
/* One row through RMSNorm and then quantised for the packed products, as
 * vnq__rms_row (into y, D values) and vnq__quantize_into (one row into r,
 * Kp ≥ D) give it, in fewer passes (the fused decoder's packed layers). */
void vnq__rms_quantize_row(const float *x, const float *w, int64_t D, double eps, float *y, int64_t Kp,
                           vnq_rows *r);

#endif
