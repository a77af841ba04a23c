/* venom/shadow.h — the dense shadow of V:N:M pruning (venom.prune, SR-STE:
 * Zhou et al. 2021, "Learning N:M fine-grained structured sparse neural
 * networks from scratch"): while the schedule runs a layer keeps its dense
 * weight W, computes through the current V:N:M pattern m, trains all of W
 * with the straight-through gradient and decays the weights outside m.
 * These two calls fuse what the composition x·(W − W⊙(1−m))ᵀ and
 * W ← W ⊙ (1 − f·(1−m)) does in several passes. Reached only through
 * <venom.h>. */
#ifndef VENOM_H
#error "include <venom.h>, not venom/shadow.h"
#endif

/* y = x·(W⊙m)ᵀ + bias, with m the pattern of s (R × K) and W dense f32
 * (R, K): x (..., K) → y (..., R); bias (R) or NULL. The kept weights are
 * read from W at each call, and the product runs on the V:N:M kernels
 * (vn_vnm_spmm: 2/M of the dense multiply-adds). Differentiable in x
 * (dx = dY·(W⊙m), vn_vnm_spmm_t), bias (column sums of dY) and W with the
 * straight-through estimator: dW = dYᵀ·X at every position, kept or not
 * (one dense sgemm), as if the product had used W itself. All f32 on the
 * CPU; s's own values are not read.
 * Errors: VN_ERR_SHAPE naming the shapes when W is not (R, K), x's last dim
 * is not K or bias is not (R); VN_ERR_DTYPE; VN_ERR_DEVICE for a tensor on
 * CUDA (there the shadow is composed from vn_mul and vn_linear); VN_ERR_ARG
 * for a NULL s. */
vn_tensor *vn_vnm_shadow_linear(const vn_tensor *x, const vn_vnm *s, const vn_tensor *w,
                                const vn_tensor *bias);
/* In place, not recorded: W ← W·(1 − f) at the positions outside the
 * pattern of s, W unchanged (bit for bit) at the kept ones: SR-STE's decay
 * W ← W − f·(1−m)⊙W with f = lr·λ, in one pass over W; (1 − f) is rounded
 * to f32 once, as the composition W ⊙ ((1−m)·(−f) + 1) rounds it.
 * W: contiguous f32 (R, K) on the CPU.
 * Errors: VN_ERR_ARG for a NULL s or f negative, NaN or infinite;
 * VN_ERR_SHAPE, VN_ERR_DTYPE, VN_ERR_DEVICE as above, and VN_ERR_ARG for a
 * W that is not contiguous; VN_ERR_STATE for a W that requires grad while
 * grad mode is on (see the in-place rules of vn_tensor_copy_). Nothing is
 * written when an error is returned. */
vn_status vn_vnm_shadow_decay(vn_tensor *w, const vn_vnm *s, double f);
