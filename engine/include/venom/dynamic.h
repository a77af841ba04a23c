/* venom/dynamic.h — dynamic (activation) sparsity: the sparse–dense
 * transformation of SparDA / PIT (Zheng et al., "PIT: Permutation
 * Invariant Transformation for Dynamic Sparse Deep Learning", SOSP 2023,
 * arXiv 2301.10936). Reached only through <venom.h>. */
#ifndef VENOM_H
#error "include <venom.h>, not venom/dynamic.h"
#endif

/* The activation whose zeros the op exploits: ReLU, max(x, 0), or squared
 * ReLU, max(x, 0)² (So et al. 2021, "Primer"). Both are zero exactly where
 * x ≤ 0, and so are their derivatives. */
typedef enum { VN_ACT_RELU = 1, VN_ACT_RELU2 = 2 } vn_sparse_act;

/* Defaults of vn_act_sparse_linear (0 / a negative value pick them):
 * the micro-tile height in rows and the share of kept (tile, column) pairs
 * above which the whole product runs dense. Both measured by
 * bench/dynamic_sparsity (bench/RESULTS.md), MLP 1024 → 4096 → 1024, 2048
 * tokens, one thread, CPU time: at 90% sparsity with clustered zeros,
 * tiles of 16/32/64/128 rows ran 1.05×/1.49×/1.62×/1.77× faster than dense
 * (fewer, larger tiles pay less gathering and scattering per kept column
 * than they lose to a larger kept share); the condensed MLP was 1.09×
 * faster than dense at a kept share of 0.59 and 0.88× at 0.78, so the
 * crossover is near 0.67; 0.65 keeps a margin. */
#define VN_ACT_SPARSE_TILE_ROWS 128
#define VN_ACT_SPARSE_DENSE_ABOVE 0.65

/* What one call of vn_act_sparse_linear saw: the share of H = act(x)'s
 * elements that are nonzero (exact); the share of (row tile, column) pairs
 * that are kept, i.e. the share of the dense product's work done; whether
 * the call ran the plain dense path. The index reads a sample of the tiles
 * first (tiles 0, 8, 16, ...): when the sample's kept share is above
 * dense_above the call runs dense without reading the other tiles, and
 * tile_density is the sample's; otherwise it is over all tiles, and the
 * call runs dense when that share is above dense_above. */
typedef struct vn_act_sparse_stats {
    double density;
    double tile_density;
    bool dense;
} vn_act_sparse_stats;

/* Y = act(X)·Wᵀ + b, computed on the nonzeros of H = act(X) only.
 * x (..., in) f32 is the activation's input (pre-activation), w (out, in)
 * f32, bias (out) f32 or NULL; y (..., out) f32. CPU only.
 * A matrix product is invariant to permuting and dropping the slices of its
 * reduction axis, so, for each tile of tile_rows rows of X (the last tile
 * may be shorter), one pass finds the columns j with some x[i, j] > 0 in the
 * tile (the index), those columns of H and of W are gathered into contiguous
 * buffers, and one dense sgemm multiplies the condensed operands. When the
 * kept share of (tile, column) pairs is above dense_above, the call runs the
 * plain dense product instead (one sgemm on all of H).
 * Autograd (x, w, bias): dW = dYᵀ·H touches only each tile's kept columns;
 * dX = (dY·W) ⊙ act'(X) is zero wherever H is, so dY·W is computed on the
 * kept columns only, reusing the forward's index.
 * tile_rows ≤ 0 picks VN_ACT_SPARSE_TILE_ROWS; dense_above < 0 picks
 * VN_ACT_SPARSE_DENSE_ABOVE (0 always runs dense, 1 never; the choice as
 * vn_act_sparse_stats says). stats may be
 * NULL. Errors: VN_ERR_ARG (NULL or freed tensor, an unknown act,
 * dense_above > 1), VN_ERR_SHAPE (w not 2-d, x's last dim not in, bias not
 * (out)), VN_ERR_DTYPE (not f32), VN_ERR_DEVICE (a CUDA tensor),
 * VN_ERR_MEMORY. */
vn_tensor *vn_act_sparse_linear(const vn_tensor *x, const vn_tensor *w, const vn_tensor *bias,
                                vn_sparse_act act, int64_t tile_rows, double dense_above,
                                vn_act_sparse_stats *stats);

/* The two-layer MLP Y = act(X·W1ᵀ + b1)·W2ᵀ + b2 with its hidden layer
 * sparse, as one op: x (..., d) f32, w1 (hidden, d), b1 (hidden) or NULL,
 * w2 (out, hidden), b2 (out) or NULL; y (..., out). CPU only. The first
 * product Z = X·W1ᵀ + b1 is dense (its zeros are not known before it is
 * computed); the index of Z's positive columns per tile (as in
 * vn_act_sparse_linear) then serves the whole rest: Y = act(Z)·W2ᵀ on the
 * kept columns, and in the backward dW2 and dZ = (dY·W2) ⊙ act'(Z) on them;
 * dZ is zero off them, so the first layer's dX = dZ·W1 reads only the kept
 * rows of W1 and dW1 = dZᵀ·X, db1 touch only those rows. Five of the six
 * products of a training step shrink with the hidden layer's density.
 * tile_rows, dense_above and stats as in vn_act_sparse_linear. Errors: as
 * there, naming w1, b1, w2, b2. */
vn_tensor *vn_act_sparse_mlp(const vn_tensor *x, const vn_tensor *w1, const vn_tensor *b1,
                             const vn_tensor *w2, const vn_tensor *b2, vn_sparse_act act,
                             int64_t tile_rows, double dense_above, vn_act_sparse_stats *stats);

/* vn_act_sparse_mlp on a variable-length batch: only the rows whose mask
 * entry is nonzero are computed. mask u8 (CPU) has x's leading dims (e.g.
 * (batch, time) for x (batch, time, d)): nonzero a real token, 0 padding.
 * The real rows are gathered into a dense block (engine/rows.c), the MLP
 * runs on it (its tiles are tiles of real rows: padding never widens a
 * tile's kept columns, nor costs a product) and the result is scattered
 * back: y's padding rows are 0 (not b2), and so are dX's; padding rows add
 * nothing to any weight or bias gradient. stats are over the real rows.
 * mask NULL is vn_act_sparse_mlp. Errors: as vn_act_sparse_mlp, and
 * VN_ERR_DTYPE (mask not u8), VN_ERR_SHAPE (mask's shape not x's leading
 * dims). */
vn_tensor *vn_act_sparse_mlp_masked(const vn_tensor *x, const vn_tensor *w1, const vn_tensor *b1,
                                    const vn_tensor *w2, const vn_tensor *b2, const vn_tensor *mask,
                                    vn_sparse_act act, int64_t tile_rows, double dense_above,
                                    vn_act_sparse_stats *stats);
