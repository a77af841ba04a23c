/* venom/sparse.h — the sparse weight formats: V:N:M matrices (VENOM) with
 * their SpMM / SDDMM kernels, and CSR matrices with the graph ops. Reached
 * only through venom.h, which includes it where these declarations used to
 * stand (the types above it are all it needs). */
#ifndef VENOM_H
#error "include <venom.h>, not <venom/sparse.h>"
#endif
#ifndef VENOM_SPARSE_H
#define VENOM_SPARSE_H

/* ---- V:N:M sparse matrices (VENOM) --------------------------------------- */

/* A V:N:M sparse matrix, the format of VENOM (Castro et al., "VENOM: A
 * Vectorized N:M Format for Unleashing the Power of Sparse Tensor Cores",
 * SC 2023). W (R rows × K columns) is cut into blocks of V rows × M columns;
 * a block keeps the same 4 of its M columns in all its V rows, and each row
 * keeps N = 2 of those 4 (the 2:4 pattern of Sparse Tensor Cores), so the
 * sparsity is 1 − 2/M. R and K need not divide by V and M: the last block
 * and group are padded, and padding never holds a kept weight of a real
 * column. Compressed storage:
 *   values            f32 R × 2·⌈K/M⌉: each row's kept weights, group after
 *                     group, in column order;
 *   indices           2 bits per value: which of the 4 kept columns it is in;
 *   column locations  ⌈R/V⌉ × ⌈K/M⌉ × 4 offsets 0..M−1 (uint16).
 * The values are an ordinary f32 tensor (the trainable parameter of a sparse
 * layer, updated in place by the optimizer steps); the pattern is fixed once
 * built. A vn_vnm is read-only after vn_vnm_from_dense and may be shared by
 * threads (its one cache, the pattern's copy on the GPU, is set once,
 * atomically). */
typedef struct vn_vnm vn_vnm;

typedef struct {
    int64_t rows, cols, V, N, M;
    int64_t nnz;          /* kept weights in real (unpadded) columns */
    double sparsity;      /* 1 − nnz / (rows·cols) */
    int64_t value_bytes;  /* 4 per value, padding included */
    int64_t index_bytes;  /* 2 bits per value */
    int64_t column_bytes; /* 2 per column location */
    int64_t bytes;        /* value_bytes + index_bytes + column_bytes */
    int64_t dense_bytes;  /* rows·cols·4, for comparison */
} vn_vnm_summary;

/* Compresses w (R × K f32, any layout) by magnitude. For each block of V rows
 * and group of M columns it keeps the 4 columns that maximise
 * Σ_rows (the two largest |w| among them): exhaustively over all C(M,4)
 * subsets when M ≤ 16; for M > 16 over the subsets of the 16 columns with
 * the largest Σ_rows |w| in the block (a greedy pre-selection that bounds
 * the search at C(16,4) = 1820 subsets). Ties go to the first subset in
 * lexicographic order. Each row then keeps its two largest |w| of the 4
 * (the lower column on ties). The new matrix owns its values tensor.
 * Errors: VN_ERR_ARG for V < 1, N ≠ 2, M < 4 or M > 65535, or a NaN/Inf
 * weight (the message gives its position and value); VN_ERR_SHAPE for a w
 * that is not 2-D, has no rows, or fewer than M columns; VN_ERR_DTYPE. */
vn_vnm *vn_vnm_from_dense(const vn_tensor *w, int64_t V, int64_t N, int64_t M);
/* Releases s (NULL-safe). Tensors obtained from it, and graphs recorded
 * through it, stay valid. */
void vn_vnm_free(vn_vnm *s);
/* New reference to s's values tensor, f32 (R, 2·⌈K/M⌉). */
vn_tensor *vn_vnm_values(const vn_vnm *s);
/* Dense R × K f32 copy of s with its current values (zeros elsewhere), on
 * the values' device (values on CUDA are copied to the CPU, scattered and
 * the result copied back: for inspection and pruning, not per step). */
vn_tensor *vn_vnm_to_dense(const vn_vnm *s);
/* u8 R × K on the CPU (the pattern's device, whatever the values'): 1 at
 * the kept positions, 0 elsewhere (R·K/M·2 ones when M divides K). */
vn_tensor *vn_vnm_mask(const vn_vnm *s);
/* Sizes and counts of s (see vn_vnm_summary). */
vn_status vn_vnm_stats(const vn_vnm *s, vn_vnm_summary *out);
/* The pattern as plain tensors, for saving s: the column locations, i32
 * (⌈R/V⌉, ⌈K/M⌉, 4), ascending offsets 0..M−1 within each group; and the
 * 2-bit indices, u8 (R, ⌈⌈K/M⌉/2⌉), where byte g/2 of row r holds group g
 * in its low (g even) or high (g odd) nibble: bits 0–1 the position (0..3)
 * among the group's kept columns of the row's first value, bits 2–3 that of
 * its second, first < second. */
vn_tensor *vn_vnm_columns(const vn_vnm *s);
vn_tensor *vn_vnm_indices(const vn_vnm *s);
/* Rebuilds a R × K matrix from a saved pattern (columns and indices as
 * above, on the CPU). The matrix keeps a reference to `values` (f32
 * (R, 2·⌈K/M⌉), contiguous, on the CPU or CUDA) as its values tensor, not
 * a copy, so a parameter an optimizer already holds stays the same tensor;
 * NULL gives zeros on the CPU.
 * Errors: those of vn_vnm_from_dense for R, K, V, N, M; VN_ERR_SHAPE or
 * VN_ERR_DTYPE for arrays of the wrong shape or dtype; VN_ERR_ARG for a
 * column location out of range or out of order, or an index pair that is
 * not two ascending positions 0..3 (the message names the block, row and
 * group). */
vn_vnm *vn_vnm_from_pattern(int64_t R, int64_t K, int64_t V, int64_t N, int64_t M,
                            const vn_tensor *columns, const vn_tensor *indices, vn_tensor *values);
/* The inner loops the V:N:M CPU kernels use on this machine: "avx512" or
 * "portable" (GCC vector code for the build's target). Setting the
 * environment variable VENOM_NO_AVX512 to a non-empty value forces
 * "portable". */
const char *vn_vnm_isa(void);

/* The precision of the V:N:M forward product (y = x·Wᵀ of vn_vnm_linear,
 * vn_vnm_spmm and vn_vnm_shadow_linear), of the input gradient (dx = dY·W
 * of the backward of vn_vnm_linear and vn_vnm_mlp, and vn_vnm_spmm_t) and
 * of the values' gradient on the CPU, for the whole process (all threads):
 *   VN_VNM_F32   (the default) f32 operands, f32 sums.
 *   VN_VNM_BF16  the forward: x and the values are rounded to bf16 (round
 *                to nearest even, bf16 subnormals read as zero) and
 *                multiplied in pairs by `vdpbf16ps` (AVX-512 BF16) with f32
 *                sums: each output within about 2^-7·Σ_k |w_k·x_k| of the
 *                f32 one. dx likewise: dY and the values rounded to bf16,
 *                products of row pairs of W summed in f32, each output
 *                within about 2^-7·Σ_r |dy_r·w_r| of the f32 one (in f32
 *                still for V:N:M blocks of 131070 rows or more). The
 *                values stay f32 (the master copy) and are rounded at each
 *                call, so optimizer updates are always seen. The values'
 *                gradient (dvalues = dYᵀ·x at the kept positions: the
 *                backward of vn_vnm_linear and vn_vnm_mlp, and
 *                vn_vnm_sddmm) likewise: dY and x rounded to bf16, products
 *                of batch-row pairs summed in f32, each entry within about
 *                2^-7·Σ_b |dy_b·x_b| of the f32 one.
 * CUDA is not affected (it always rounds to bf16 or f16, see
 * vn_vnm_linear).
 * Errors: VN_ERR_ARG for a value that is neither, or for VN_VNM_BF16 on a
 * CPU without avx512_bf16 or with VENOM_NO_AVX512 set (the message says
 * which); the precision is then unchanged. */
typedef enum { VN_VNM_F32 = 0, VN_VNM_BF16 = 1 } vn_vnm_precision;
vn_status vn_vnm_set_precision(vn_vnm_precision precision);
vn_vnm_precision vn_vnm_get_precision(void);

/* y = x·Wᵀ + bias for the sparse W given by the pattern of s and the
 * compressed `values` (f32 (R, 2·⌈K/M⌉), e.g. vn_vnm_values(s)): x (..., K)
 * → y (..., R); bias (R) or NULL. Differentiable in x, values and bias; the
 * gradient of values is dY ᵀ·X sampled at the kept positions only (SDDMM),
 * that of x is dY·W. All f32 on the CPU.
 * On CUDA (x, values and bias all on the GPU; s's pattern stays on the CPU
 * and is copied to the device once, on first use) the products run on
 * Sparse Tensor Cores (mma.sp, VENOM's condensed 2:4 form; the forward on
 * wgmma.mma_async.sp on a compute capability 9.0 GPU when V % 64 == 0, in a
 * build with the sm_90a code): x, the values
 * and dY are rounded to bf16 (f16 under vn_set_autocast(VN_F16), round to
 * nearest even), products are summed in f32, and y and every gradient are
 * f32; the values are packed from `values` once per version of that tensor
 * (cached in s: an in-place write, as an optimizer step, bumps the version
 * and the next call packs again), so in-place optimizer updates are always
 * seen. The input gradient runs on the sparse kernel or on cuBLAS with a
 * dense W, see vn_vnm_set_cuda_dx. CUDA needs V a multiple of 16, and
 * M ≤ 128 when x needs a gradient (VN_ERR_ARG naming V and M).
 * Errors: VN_ERR_SHAPE naming the shapes when x's last dim is not K,
 * values are not (R, 2·⌈K/M⌉) or bias is not (R); VN_ERR_DTYPE;
 * VN_ERR_DEVICE when the tensors are on different devices (both named) or
 * a CUDA call fails (CUDA's message); VN_ERR_ARG for a NULL s. */
vn_tensor *vn_vnm_linear(const vn_tensor *x, const vn_vnm *s, const vn_tensor *values,
                         const vn_tensor *bias);
/* The MLP of a transformer block with both projections V:N:M:
 * y = gelu(x·W1ᵀ + b1)·W2ᵀ + b2 (GELU in its tanh form), for x (..., K1)
 * → y (..., R2), fc = W1 (R1 × K1) with fc_values and fc_bias (R1) or
 * NULL, proj = W2 (R2 × R1) with proj_values and proj_bias (R2) or NULL.
 * The same numbers as vn_vnm_linear, vn_gelu, vn_vnm_linear one after the
 * other, up to the summation order of fc's values gradient; differentiable
 * in x, both values and both biases. On the CPU the hidden (..., R1)
 * activation never leaves the kernels' panel layout (no transposes of it
 * between the ops), and it is kept for the backward in that layout with
 * its GELU (2·B·R1 floats for B rows of x, where the three ops keep
 * 3·B·R1). On CUDA it is those three ops. Errors: those of vn_vnm_linear, naming "fc" or
 * "proj"; VN_ERR_SHAPE when proj's K is not fc's R. */
vn_tensor *vn_vnm_mlp(const vn_tensor *x, const vn_vnm *fc, const vn_tensor *fc_values,
                      const vn_tensor *fc_bias, const vn_vnm *proj, const vn_tensor *proj_values,
                      const vn_tensor *proj_bias);
/* The three kernels of vn_vnm_linear as plain calls (not recorded), same
 * shape, device and precision rules: forward SpMM y = x·Wᵀ (..., R); input
 * gradient dx = dy·W (..., K) for dy (..., R); SDDMM dvalues = dyᵀ·x at the
 * kept positions, (R, 2·⌈K/M⌉), for dy and x with the same number of rows.
 * On CUDA spmm_t needs M ≤ 128. */
vn_tensor *vn_vnm_spmm(const vn_vnm *s, const vn_tensor *values, const vn_tensor *x);
vn_tensor *vn_vnm_spmm_t(const vn_vnm *s, const vn_tensor *values, const vn_tensor *dy);
vn_tensor *vn_vnm_sddmm(const vn_vnm *s, const vn_tensor *dy, const vn_tensor *x);

/* How the input gradient dx = dY·W of vn_vnm_linear and vn_vnm_spmm_t runs
 * on CUDA, for the whole process:
 *   VN_VNM_DX_AUTO    (default) the rule below;
 *   VN_VNM_DX_SPARSE  the Sparse Tensor Core kernel (k_dx) always;
 *   VN_VNM_DX_DENSE   cuBLAS on a dense 16-bit W (R × K), rebuilt from the
 *                     packed values once per values version (an optimizer
 *                     step) and cached in the matrix (R·K·2 bytes more).
 * The rule of AUTO (an estimate until a GPU has timed both; the reasons
 * are in engine/sparse/vnm_sptc.h): dense when M < 8, dY has at least 256
 * rows and R·K ≥ 2^20; else sparse. Both give the CPU's dx up to f32
 * summation order; on the dense path a dY holding Inf or NaN (where W's
 * zeros would give 0 · Inf = NaN) makes the sparse kernel rewrite dx, so dx
 * is finite wherever the CPU's is. The CPU is not affected. Errors:
 * VN_ERR_ARG for another value (the setting is then unchanged). */
typedef enum { VN_VNM_DX_AUTO = 0, VN_VNM_DX_SPARSE = 1, VN_VNM_DX_DENSE = 2 } vn_vnm_cuda_dx;
vn_status vn_vnm_set_cuda_dx(vn_vnm_cuda_dx path);
vn_vnm_cuda_dx vn_vnm_get_cuda_dx(void);

/* ---- sparse matrices and graphs (CSR) ------------------------------------ */

/* A sparse matrix in CSR (compressed sparse row) form. As a graph, row =
 * destination vertex and col = source vertex: the edge j→i is entry (i, j),
 * so Y = A·X sums, into each vertex, the features of its in-neighbours. The
 * graph-neural-network ops follow NGra's SAGA-NN stages (Ma et al., "Towards
 * Efficient Large-Scale Graph Neural Network Computing", arXiv 1810.08403):
 * Scatter (vertex data onto edges), ApplyEdge (ordinary tensor ops on the
 * (nnz, F) edge tensor), Gather (a reduction into destination vertices),
 * ApplyVertex (ordinary ops). A vn_csr is read-only once built (its
 * transpose is built on first need, thread-safely) and may be shared by
 * threads; the ops keep what their backward needs, so the matrix may be
 * freed while a graph that used it still waits for backward. The index
 * arrays live on the CPU; vn_csr_spmm also runs on CUDA tensors (cuSPARSE),
 * the other ops are CPU only (VN_ERR_DEVICE for a CUDA tensor). Every op is
 * deterministic: each output row is summed by one thread in the stored
 * order. */
typedef struct vn_csr vn_csr;
/* From COO: row, col are (E) i32/i64 0-based tensors, values (E) f32 or NULL
 * (all ones). Entries are sorted by row, then col (a stable sort: this is
 * "the stored order" that edge tensors follow); duplicate (row, col) pairs
 * are summed into one entry (in their input order; duplicates without
 * values give an entry of value 2, 3, ...). rows or E may be 0. Errors:
 * VN_ERR_ARG for a negative size or an index out of range or negative (the
 * message gives the position and value), VN_ERR_SHAPE when row, col and
 * values are not 1-d of one length, VN_ERR_DTYPE, VN_ERR_DEVICE. */
vn_csr *vn_csr_from_coo(int64_t rows, int64_t cols, const vn_tensor *row, const vn_tensor *col,
                        const vn_tensor *values);
void vn_csr_free(vn_csr *a); /* NULL is a no-op */
/* Sizes; 0 (and the error set) for NULL. */
int64_t vn_csr_rows(const vn_csr *a);
int64_t vn_csr_cols(const vn_csr *a);
int64_t vn_csr_nnz(const vn_csr *a);
/* The arrays, each a new reference: row pointers i64 (rows + 1); each
 * entry's row (destination) i64 (nnz); each entry's column (source) i64
 * (nnz); the matrix's own values f32 (nnz), shared, not a copy, or NULL with
 * vn_last_status() VN_OK when the matrix has none (all ones). */
vn_tensor *vn_csr_row_ptr(const vn_csr *a);
vn_tensor *vn_csr_row_idx(const vn_csr *a);
vn_tensor *vn_csr_col_idx(const vn_csr *a);
vn_tensor *vn_csr_values(const vn_csr *a);
/* Y = A·X: X (cols, F...) f32 → Y (rows, F...). values (nnz) f32 overrides
 * A's own values when not NULL (attention weights computed by a model).
 * Autograd: dX = Aᵀ·dY (the transpose built once and cached in a) and, when
 * the values used (given or A's own; on CUDA the given ones) require grad, dvalues[e] = dY[row e] ·
 * X[col e] (SDDMM at the stored positions). CPU: OpenMP over rows. CUDA
 * (X and values on the device): cuSPARSE cusparseSpMM, the index arrays
 * copied to the device once and cached. Errors: VN_ERR_SHAPE (X's first dim
 * is not cols, values not (nnz)), VN_ERR_DTYPE, VN_ERR_DEVICE. */
vn_tensor *vn_csr_spmm(const vn_csr *a, const vn_tensor *values, const vn_tensor *x);
/* SAGA-NN stages, differentiable, deterministic (CPU):
 * scatter: x (cols, F...) for the source side [or (rows, F...) for the
 *   destination side] → (nnz, F...); entry e gets x[col e] (source) or
 *   x[row e]. The gradient sums each vertex's edges in the stored order.
 * gather: e (nnz, F...) → (rows, F...), reduced over each row's entries:
 *   sum, mean, max (rows without entries give 0; max's gradient goes to the
 *   first maximum in the stored order).
 * edge_softmax: scores (nnz) or (nnz, H) → softmax over each row's entries
 *   (per head), as in GAT (Veličković et al. 2018): α_e = exp(s_e − m) /
 *   Σ_{e' into the same vertex} exp(s_e' − m), m the row's maximum. */
typedef enum { VN_GATHER_SUM, VN_GATHER_MEAN, VN_GATHER_MAX } vn_gather_op;
vn_tensor *vn_csr_scatter(const vn_csr *a, const vn_tensor *x, bool source);
vn_tensor *vn_csr_gather(const vn_csr *a, const vn_tensor *e, vn_gather_op op);
vn_tensor *vn_csr_edge_softmax(const vn_csr *a, const vn_tensor *scores);
/* The entries [first, first + count) in the stored order as a matrix of the
 * same shape (rows × cols), for NGra's edge-chunk streaming: the gather of
 * each chunk, summed over the chunks, is the gather of the whole. Errors:
 * VN_ERR_ARG for a range outside [0, nnz]. */
vn_csr *vn_csr_slice(const vn_csr *a, int64_t first, int64_t count);

#endif
