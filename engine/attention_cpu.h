/* attention_cpu.h — the AVX-512 causal attention of one (batch, head) for
 * small heads (attention_cpu.c), used by ops_attention.c's CPU path where
 * vn__attention_cpu_fast says so; the OpenBLAS path serves every other
 * shape and CPU. Same inputs, outputs and saved stats as that path: per
 * query row t, stats[2t] = the row's max score, stats[2t + 1] = 1/Σ exp;
 * the backward recomputes the probabilities bit for bit from them. */
#ifndef VENOM_ATTENTION_CPU_H
#define VENOM_ATTENTION_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest sequence the kernel takes. Measured on one Zen 4 core
 * (bench/RESULTS.md, issue 16): 1.6–2.5× OpenBLAS's forward and 1.2–1.8×
 * its backward from T 64 to 1024 (Dh 32 and 64); at 2048, where the
 * backward's P and dP (T × T each, per thread) are 32 MiB, its backward was
 * no faster. */
#define VN_ATT_CPU_MAX_T 1024

/* True when the kernel serves (T, Dh): the CPU has AVX-512F, Dh is a
 * multiple of 16 (whole vectors per row), 1 <= T <= VN_ATT_CPU_MAX_T, and
 * the environment variable VENOM_NO_AVX512 is unset or empty (set, it
 * forces the OpenBLAS path, as it forces the portable V:N:M kernels; the
 * tests use it to run both paths on one machine). */
bool vn__attention_cpu_fast(int64_t T, int64_t Dh);

/* Floats of per-thread scratch the forward (backward false) or the
 * backward needs at (T, Dh). */
size_t vn__attention_cpu_scratch(int64_t T, int64_t Dh, bool backward);

/* One head, forward: O (T × Dh, row stride ldo) = softmax(scale · Q·Kᵀ,
 * causal)·V, with Q, K, V (T × Dh, row stride ld) read where they lie;
 * stats (T, 2) as above. scratch: vn__attention_cpu_scratch(T, Dh, false)
 * floats. Only for shapes vn__attention_cpu_fast accepts. */
void vn__attention_cpu_forward(float *O, int64_t ldo, float *stats, const float *Q,
                               const float *K, const float *V, int64_t ld, int64_t T, int64_t Dh,
                               float scale, float *scratch);

/* One head, backward, with P recomputed from stats and G = dL/dO (row
 * stride ldo): dV = Pᵀ·G, dS = P ⊙ (G·Vᵀ − rowsum(G·Vᵀ ⊙ P)),
 * dQ = scale · dS·K, dK = scale · dSᵀ·Q, each written whole (row stride
 * ld); a NULL gradient is not computed. scratch:
 * vn__attention_cpu_scratch(T, Dh, true) floats. */
void vn__attention_cpu_backward(float *dQ, float *dK, float *dV, const float *Q, const float *K,
                                const float *V, int64_t ld, const float *G, int64_t ldo,
                                const float *stats, int64_t T, int64_t Dh, float scale,
                                float *scratch);

#endif
