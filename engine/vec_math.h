/* vec_math.h — elementwise math over arrays, in loops GCC vectorizes
 * (vec_math.c): with the Release flags (-march=x86-64-v3) 8 floats per AVX2
 * instruction, 16 per AVX-512 instruction where the CPU has it (a second
 * copy of each loop, chosen when the library loads). The results differ from kernels/scalar.h's formulas (which
 * the CUDA kernels compute) by float rounding only; tests/c/test_vec_math.c
 * bounds the difference. */
#ifndef VENOM_VEC_MATH_H
#define VENOM_VEC_MATH_H

#include <stdint.h>

/* out[i] = gelu(x[i]), tanh form: x/2·(1 + tanh(k·(x + c·x³))). */
void vn__gelu_f32(float *out, const float *x, int64_t n);
/* out[i] = g[i] · gelu'(x[i]). */
void vn__gelu_backward_f32(float *out, const float *g, const float *x, int64_t n);
/* The same written over g (g[i] = g[i] · gelu'(x[i])), bit for bit:
 * a backward rule that may overwrite its incoming gradient saves a new
 * array and its first writes. */
void vn__gelu_backward_inplace_f32(float *g, const float *x, int64_t n);

/* The same with a bias added first, row by row: x (rows, D), b (D);
 * out = gelu(x + b), and its backward out = g ⊙ gelu'(x + b). Bit for bit
 * vn__gelu_f32 / vn__gelu_backward_f32 of the sum. */
void vn__bias_gelu_f32(float *out, const float *x, const float *b, int64_t rows, int64_t D);
void vn__bias_gelu_backward_f32(float *out, const float *g, const float *x, const float *b,
                                int64_t rows, int64_t D);

/* The largest of x[0..n): NaNs are skipped, −inf if there is nothing else,
 * the value of the plain left-to-right loop m = x > m ? x : m, except that
 * of a +0 and a −0 either may come out (16 lanes, combined at the end). */
float vn__max_f32(const float *x, int64_t n);

/* x[i] = e^(x[i] − shift) · scale, in place: the rows of a softmax (shift
 * the row's max, so every exponent is <= 0). The exponent is clamped to
 * [VN_EXP_MIN, 88.3] (to about 2 ulp; NaN stays NaN): below VN_EXP_MIN the
 * result is e^VN_EXP_MIN ≈ 1.2e-38, not 0. */
#define VN_EXP_MIN (-87.3f)
void vn__exp_shift_f32(float *x, int64_t n, float shift, float scale);

#endif
