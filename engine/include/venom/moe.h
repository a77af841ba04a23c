/* venom/moe.h — Mixture-of-Experts dispatch: the row gather/scatter that
 * turns a sparse token→expert routing into dense blocks, and the router.
 * Reached only through venom.h. */
#ifndef VENOM_H
#error "include <venom.h>, not <venom/moe.h>"
#endif
#ifndef VENOM_MOE_H
#define VENOM_MOE_H

/* ---- row gather / scatter (the sparse–dense transformation) -------------
 *
 * MoE dispatch (and dynamic activation sparsity) is: gather the rows a
 * computation needs into a dense block, run a dense (or V:N:M) GEMM on the
 * block, and scatter-add the block's rows back, weighted. The gather is
 * vn_index_select(x, 0, idx) (rows x[idx[0]], x[idx[1]], ... of x (n, F...)
 * as (m, F...); its gradient is this scatter-add without weights). The
 * scatter-add is below. */

/* out[i, ...] = Σ_{k : idx[k] = i} w[k] · y[k, ...], for i in [0, n_rows):
 * y (m, F...) f32, idx (m) i32/i64 with entries in [0, n_rows) (repeats
 * allowed: they add up), weights (m) f32 or NULL (all ones) → out
 * (n_rows, F...) f32, zero on the rows no idx names. Differentiable in y
 * (dy[k] = w[k] · dout[idx[k]]) and in weights (dw[k] = ⟨dout[idx[k]], y[k]⟩).
 * CPU only; deterministic (rows are added in the order of k).
 * Errors: VN_ERR_ARG (NULL or freed tensor, n_rows < 0, an index out of
 * range: the message gives its position and value), VN_ERR_DTYPE (y or
 * weights not f32, idx not i32/i64), VN_ERR_SHAPE (idx or weights not 1-d of
 * y's length m, y 0-d), VN_ERR_DEVICE (a CUDA tensor). */
vn_tensor *vn_scatter_add_rows(const vn_tensor *y, const vn_tensor *idx, const vn_tensor *weights,
                               int64_t n_rows);

/* ---- routing ------------------------------------------------------------ */

/* Which experts each token goes to, grouped by expert for the dispatch.
 * S = the kept (token, expert) assignments; tensors are new references (free
 * them with vn_moe_routing_release), indices 0-based. */
typedef struct vn_moe_routing {
    vn_tensor *tokens;  /* (S) i64: the token of each kept assignment, expert 0's
                           first (in token order), then expert 1's, ... */
    vn_tensor *slots;   /* (S) i64: token·E + expert of each kept assignment: its
                           position in the flattened (T·E) score/weight matrix */
    vn_tensor *load;    /* (E) i64: kept assignments per expert (sums to S) */
    vn_tensor *first;   /* (E) i64: tokens whose first choice is each expert
                           (before the capacity drop), for the balance loss */
    vn_tensor *mask;    /* (T, E) u8: 1 where the token chose the expert (before
                           the capacity drop) */
    int64_t selected;   /* assignments chosen, before the drop */
    int64_t dropped;    /* of those, dropped for the capacity (selected − S) */
    int64_t capacity;   /* the most assignments an expert keeps */
} vn_moe_routing;

/* Routes T tokens to E experts from scores (T, E) f32 (router logits, or
 * gate probabilities for the DTS-Gate). Token t chooses its experts in
 * descending score order (ties: the lower expert first): always the first
 * k, then each further expert whose score is > threshold (pass INFINITY for
 * plain top-k; DTS-Gate, Nie et al. arXiv 2112.14397, passes γ on the
 * probabilities). Each expert keeps at most capacity = ⌈capacity_factor ·
 * selected / E⌉ assignments (INFINITY: no limit), filled by rank: every
 * token's first choice before any second choice, then in token order
 * (Switch Transformer, Fedus et al. 2021; GShard, Lepikhin et al. 2020). A
 * dropped assignment is simply absent: the token passes through the
 * residual. On success fills *out (its old contents are overwritten, not
 * released); on failure leaves it zeroed.
 * Errors: VN_ERR_ARG (NULL or freed scores or out, E = 0, k outside
 * [1, E], capacity_factor ≤ 0 or NaN, threshold NaN, a NaN score: the
 * message gives its token and expert), VN_ERR_DTYPE (not f32),
 * VN_ERR_SHAPE (not 2-d), VN_ERR_DEVICE (CUDA), VN_ERR_MEMORY. */
vn_status vn_moe_route(const vn_tensor *scores, int k, double threshold, double capacity_factor,
                       vn_moe_routing *out);
/* Releases the routing's tensors and zeroes it. NULL-safe. */
void vn_moe_routing_release(vn_moe_routing *r);

#endif
