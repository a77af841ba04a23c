/* csr.c — sparse matrices in CSR form: construction from COO (sorted by
 * row, then column, duplicates summed), the arrays, edge-range slices, the
 * cached transpose, and SpMM Y = A·X with its gradients (dX = Aᵀ·dY, and
 * the SDDMM dvalues[e] = dY[row e]·X[col e]). The SAGA-NN stages are in
 * csr_saga.c, the CUDA path in csr_cuda.c. */
#include "csr_internal.h"

#include <stdlib.h>

/* ---- shared checks and kernels ----------------------------------------------- */

vn_status csr__check(const vn_csr *a, const char *op)
{
    return a ? VN_OK : vn__err(VN_ERR_ARG, "%s: the sparse matrix is NULL", op);
}

vn_status csr__check_rows(const vn_tensor *t, int64_t want, const char *op, const char *name,
                          const char *rows_name, unsigned allow, int64_t *F)
{
    vn_status st = vn__check_dtype_arg(t, VN_F32, op, name, allow);
    if (st) return st;
    if (t->ndim == 0 || t->shape[0] != want)
        return vn__err(VN_ERR_SHAPE, "%s: %s of shape %s, expected %lld rows (%s) in its first dim",
                       op, name, vn__shape(t->ndim, t->shape), (long long)want, rows_name);
    *F = vn__numel(t->ndim - 1, t->shape + 1);
    return VN_OK;
}

vn_tensor *csr__new_rows(const vn_tensor *t, int64_t n)
{
    int64_t shape[VN_MAX_DIMS];
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    shape[0] = n;
    return vn__new_on(vn__is_cuda(t), VN_F32, t->ndim, shape);
}

/* The segment sum is a stream of gathered rows x[src(e), :], read at random:
 * its speed is memory latency and bandwidth, not arithmetic. So the kernel
 * (1) keeps a block of up to 64 columns of y[s, :] in registers for the
 * whole segment (acc of constant width W, which GCC unrolls into AVX
 * registers) instead of loading and storing y once per entry, (2) prefetches
 * the row it will gather about 4 KiB of gathers later (64 entries ahead at
 * W = 16, 16 at W = 64; the hardware prefetcher cannot guess a gather, and
 * on a 1M-node graph at F = 16 this alone more than halves the time), and
 * (3) walks F in W-wide blocks so a wide row is summed block by block with
 * the block in registers. Each y[s, f] is still summed in entry order by
 * one thread, so results do not change. */

#define CSR_SRC(k) (src ? src[perm ? perm[k] : (k)] : (perm ? perm[k] : (k)))

static inline __attribute__((always_inline)) void
segment_block(int W, int64_t lo, int64_t hi, int64_t end, int64_t F, const int64_t *perm,
              const int64_t *src, const float *vals, const float *x, float *ys)
{
    int64_t ahead = W >= 64 ? 16 : W >= 32 ? 32 : 64; /* entries; tuned on the 1M-node graph */
    float acc[64];
    for (int f = 0; f < W; f++) acc[f] = 0;
    for (int64_t k = lo; k < hi; k++) {
        if (k + ahead < end) {
            const float *next = x + CSR_SRC(k + ahead) * F;
            for (int f = 0; f < W; f += 16) __builtin_prefetch(next + f);
        }
        int64_t e = perm ? perm[k] : k;
        float v = vals ? vals[e] : 1.0f;
        const float *xs = x + (src ? src[e] : e) * F;
        for (int f = 0; f < W; f++) acc[f] += v * xs[f];
    }
    for (int f = 0; f < W; f++) ys[f] = acc[f];
}

/* Multiply-adds below which a segment sum runs on one thread. Waking the
 * second, sleeping OpenMP thread (OMP_WAIT_POLICY=passive, as `venom` set
 * until it spun ~1 ms instead: lua/main.c) and joining it costs ~70 µs on the 2-core VMs we measure on, about what
 * one thread does in 0.5M multiply-adds: on Cora (13k entries) F = 64 took
 * 0.12 ms on one thread against 0.18–0.22 ms on two (bench/spmm, RESULTS.md). */
#define CSR_PARALLEL_MIN_WORK ((int64_t)1 << 21)

void csr__segment_sum(int64_t nseg, int64_t F, const int64_t *ptr, const int64_t *perm,
                      const int64_t *src, const float *vals, const float *x, float *y)
{
    int64_t end = ptr[nseg];
#pragma omp parallel for schedule(dynamic, 64) if (end * F > CSR_PARALLEL_MIN_WORK)
    for (int64_t s = 0; s < nseg; s++) {
        int64_t lo = ptr[s], hi = ptr[s + 1], f0 = 0;
        /* Constant widths 64, 32, 16, 8, then the last < 8 columns in one pass. */
        for (; f0 + 64 <= F; f0 += 64)
            segment_block(64, lo, hi, end, F, perm, src, vals, x + f0, y + s * F + f0);
        if (f0 + 32 <= F) {
            segment_block(32, lo, hi, end, F, perm, src, vals, x + f0, y + s * F + f0);
            f0 += 32;
        }
        if (f0 + 16 <= F) {
            segment_block(16, lo, hi, end, F, perm, src, vals, x + f0, y + s * F + f0);
            f0 += 16;
        }
        if (f0 + 8 <= F) {
            segment_block(8, lo, hi, end, F, perm, src, vals, x + f0, y + s * F + f0);
            f0 += 8;
        }
        if (f0 < F)
            segment_block((int)(F - f0), lo, hi, end, F, perm, src, vals, x + f0, y + s * F + f0);
    }
}

static int64_t *i64_data(const vn_tensor *t) { return vn_tensor_data(t); }

/* ---- construction ----------------------------------------------------------------- */

/* idx (E) i32/i64 as a new contiguous i64 tensor, each value checked
 * against [0, limit): the first bad one is reported with its position. */
static vn_tensor *read_indices(const vn_tensor *idx, int64_t limit, const char *name)
{
    vn_tensor *c = vn__plain_contiguous(idx);
    vn_tensor *out = c ? vn__new(VN_I64, 1, idx->shape) : NULL;
    if (!out) {
        vn_tensor_release(c);
        return NULL;
    }
    int64_t E = idx->shape[0], *o = i64_data(out), bad = -1;
    const void *p = vn_tensor_data(c);
    for (int64_t k = 0; k < E && bad < 0; k++) {
        o[k] = idx->dtype == VN_I32 ? ((const int32_t *)p)[k] : ((const int64_t *)p)[k];
        if (o[k] < 0 || o[k] >= limit) bad = k;
    }
    vn_tensor_release(c);
    if (bad >= 0) {
        vn__err(VN_ERR_ARG, "csr_from_coo: %s index %lld at position %lld is out of range "
                "[0, %lld)", name, (long long)o[bad], (long long)bad, (long long)limit);
        vn_tensor_release(out);
        return NULL;
    }
    return out;
}

static vn_status check_index_arg(const vn_tensor *t, const char *name)
{
    vn_status st = vn__check_arg(t, "csr_from_coo", name, 0);
    if (st) return st;
    if (t->dtype != VN_I32 && t->dtype != VN_I64)
        return vn__err(VN_ERR_DTYPE, "csr_from_coo: %s is %s, expected i32 or i64", name,
                       vn_dtype_name(t->dtype));
    if (t->ndim != 1)
        return vn__err(VN_ERR_SHAPE, "csr_from_coo: %s of shape %s, expected 1-d (E)", name,
                       vn__shape(t->ndim, t->shape));
    return VN_OK;
}

static vn_status check_coo(int64_t rows, int64_t cols, const vn_tensor *row, const vn_tensor *col,
                           const vn_tensor *values)
{
    if (rows < 0 || cols < 0 || rows > VN_MAX_NUMEL || cols > VN_MAX_NUMEL)
        return vn__err(VN_ERR_ARG, "csr_from_coo: a %lld × %lld matrix; sizes must be in [0, 1e15]",
                       (long long)rows, (long long)cols);
    vn_status st = check_index_arg(row, "row");
    if (!st) st = check_index_arg(col, "col");
    if (st) return st;
    if (col->shape[0] != row->shape[0])
        return vn__err(VN_ERR_SHAPE, "csr_from_coo: row has %lld entries and col %lld; they must "
                       "match", (long long)row->shape[0], (long long)col->shape[0]);
    if (!values) return VN_OK;
    if ((st = vn__check_dtype_arg(values, VN_F32, "csr_from_coo", "values", 0))) return st;
    if (values->ndim != 1 || values->shape[0] != row->shape[0])
        return vn__err(VN_ERR_SHAPE, "csr_from_coo: values of shape %s, expected (%lld)",
                       vn__shape(values->ndim, values->shape), (long long)row->shape[0]);
    return VN_OK;
}

/* order[k] = the input position of the k-th entry sorted by (row, col),
 * stable: a counting sort by column, then a stable one by row. */
static void sort_entries(int64_t rows, int64_t cols, int64_t E, const int64_t *r,
                         const int64_t *c, int64_t *count, int64_t *tmp, int64_t *order)
{
    for (int64_t j = 0; j <= cols; j++) count[j] = 0;
    for (int64_t k = 0; k < E; k++) count[c[k] + 1]++;
    for (int64_t j = 0; j < cols; j++) count[j + 1] += count[j];
    for (int64_t k = 0; k < E; k++) tmp[count[c[k]]++] = k;
    for (int64_t i = 0; i <= rows; i++) count[i] = 0;
    for (int64_t k = 0; k < E; k++) count[r[k] + 1]++;
    for (int64_t i = 0; i < rows; i++) count[i + 1] += count[i];
    for (int64_t k = 0; k < E; k++) order[count[r[tmp[k]]]++] = tmp[k];
}

static vn_csr *new_csr(int64_t rows, int64_t cols)
{
    vn_csr *a = calloc(1, sizeof *a);
    if (!a) return vn__errp(VN_ERR_MEMORY, "csr: out of memory allocating a sparse matrix");
    a->rows = rows;
    a->cols = cols;
    return a;
}

/* Fills a's arrays from the sorted order, summing duplicates. */
static vn_csr *fill_sorted(vn_csr *a, int64_t E, const int64_t *r, const int64_t *c,
                           const float *v, const int64_t *order)
{
    int64_t nnz = 0;
    bool dup = false;
    for (int64_t k = 0; k < E; k++) {
        bool same = k && r[order[k]] == r[order[k - 1]] && c[order[k]] == c[order[k - 1]];
        dup |= same;
        nnz += !same;
    }
    int64_t nrp = a->rows + 1;
    a->nnz = nnz;
    a->row_ptr = vn__new(VN_I64, 1, &nrp);
    a->row_idx = a->row_ptr ? vn__new(VN_I64, 1, &nnz) : NULL;
    a->col_idx = a->row_idx ? vn__new(VN_I64, 1, &nnz) : NULL;
    if (a->col_idx && (v || dup)) a->values = vn__new(VN_F32, 1, &nnz);
    if (!a->col_idx || ((v || dup) && !a->values)) {
        vn_csr_free(a);
        return NULL;
    }
    int64_t *rp = i64_data(a->row_ptr), *ri = i64_data(a->row_idx), *ci = i64_data(a->col_idx);
    float *vals = a->values ? vn_tensor_data(a->values) : NULL;
    int64_t n = -1;
    for (int64_t k = 0; k < E; k++) {
        int64_t p = order[k];
        float x = v ? v[p] : 1.0f;
        if (n >= 0 && r[p] == ri[n] && c[p] == ci[n]) {
            vals[n] += x;
            continue;
        }
        n++;
        ri[n] = r[p];
        ci[n] = c[p];
        if (vals) vals[n] = x;
    }
    for (int64_t i = 0; i <= a->rows; i++) rp[i] = 0;
    for (int64_t k = 0; k < nnz; k++) rp[ri[k] + 1]++;
    for (int64_t i = 0; i < a->rows; i++) rp[i + 1] += rp[i];
    return a;
}

vn_csr *vn_csr_from_coo(int64_t rows, int64_t cols, const vn_tensor *row, const vn_tensor *col,
                        const vn_tensor *values)
{
    if (check_coo(rows, cols, row, col, values)) return NULL;
    int64_t E = row->shape[0];
    int64_t scratch_n = 2 * E + (rows > cols ? rows : cols) + 1;
    vn_tensor *r = read_indices(row, rows, "row");
    vn_tensor *c = r ? read_indices(col, cols, "col") : NULL;
    vn_tensor *v = c && values ? vn__plain_contiguous(values) : NULL;
    vn_tensor *scratch = c && (v || !values) ? vn__new(VN_I64, 1, &scratch_n) : NULL;
    vn_csr *a = scratch ? new_csr(rows, cols) : NULL;
    if (a) {
        int64_t *s = i64_data(scratch), *order = s, *tmp = s + E, *count = s + 2 * E;
        sort_entries(rows, cols, E, i64_data(r), i64_data(c), count, tmp, order);
        a = fill_sorted(a, E, i64_data(r), i64_data(c), v ? vn_tensor_data(v) : NULL, order);
    }
    vn_tensor_release(r);
    vn_tensor_release(c);
    vn_tensor_release(v);
    vn_tensor_release(scratch);
    return a;
}

void vn_csr_free(vn_csr *a)
{
    if (!a) return;
    vn_tensor_release(a->row_ptr);
    vn_tensor_release(a->row_idx);
    vn_tensor_release(a->col_idx);
    vn_tensor_release(a->values);
    vn_tensor_release(atomic_load(&a->transpose));
    vn_tensor_release(atomic_load(&a->cuda_a));
    vn_tensor_release(atomic_load(&a->cuda_t));
    free(a);
}

/* ---- sizes, arrays, slices ---------------------------------------------------------- */

#define CSR_SIZE(name, field)                                                   \
    int64_t vn_csr_##name(const vn_csr *a)                                      \
    {                                                                           \
        return csr__check(a, "csr_" #name) ? 0 : a->field;                      \
    }
CSR_SIZE(rows, rows)
CSR_SIZE(cols, cols)
CSR_SIZE(nnz, nnz)

static vn_tensor *retained(vn_tensor *t)
{
    if (t) vn_tensor_retain(t);
    return t;
}

#define CSR_ARRAY(name)                                                         \
    vn_tensor *vn_csr_##name(const vn_csr *a)                                   \
    {                                                                           \
        return csr__check(a, "csr_" #name) ? NULL : retained(a->name);          \
    }
CSR_ARRAY(row_ptr)
CSR_ARRAY(row_idx)
CSR_ARRAY(col_idx)

vn_tensor *vn_csr_values(const vn_csr *a)
{
    if (csr__check(a, "csr_values")) return NULL;
    vn_clear_error(); /* NULL for "all ones" is not a failure */
    return retained(a->values);
}

vn_csr *vn_csr_slice(const vn_csr *a, int64_t first, int64_t count)
{
    if (csr__check(a, "csr_slice")) return NULL;
    if (first < 0 || count < 0 || first > a->nnz || count > a->nnz - first)
        return vn__errp(VN_ERR_ARG, "csr_slice: entries [%lld, %lld + %lld) are outside [0, %lld)",
                        (long long)first, (long long)first, (long long)count,
                        (long long)a->nnz);
    vn_csr *s = new_csr(a->rows, a->cols);
    if (!s) return NULL;
    int64_t nrp = a->rows + 1;
    s->nnz = count;
    s->row_ptr = vn__new(VN_I64, 1, &nrp);
    s->row_idx = s->row_ptr ? vn_narrow(a->row_idx, 0, first, count) : NULL;
    s->col_idx = s->row_idx ? vn_narrow(a->col_idx, 0, first, count) : NULL;
    if (s->col_idx && a->values) s->values = vn_narrow(a->values, 0, first, count);
    if (!s->col_idx || (a->values && !s->values)) {
        vn_csr_free(s);
        return NULL;
    }
    const int64_t *rp = i64_data(a->row_ptr);
    int64_t *sp = i64_data(s->row_ptr);
    for (int64_t i = 0; i <= a->rows; i++) {
        int64_t p = rp[i] - first;
        sp[i] = p < 0 ? 0 : p > count ? count : p;
    }
    return s;
}

/* ---- the transpose ------------------------------------------------------------------ */

vn_tensor *csr__transpose(const vn_csr *a)
{
    vn_csr *m = (vn_csr *)a; /* the cache is the only field written after construction */
    vn_tensor *t = atomic_load(&m->transpose);
    if (t) return t;
    int64_t n = a->cols + 1 + a->nnz;
    t = vn__new(VN_I64, 1, &n);
    if (!t) return NULL;
    int64_t *tptr = i64_data(t), *perm = tptr + a->cols + 1;
    const int64_t *ci = i64_data(a->col_idx);
    for (int64_t j = 0; j <= a->cols; j++) tptr[j] = 0;
    for (int64_t k = 0; k < a->nnz; k++) tptr[ci[k] + 1]++;
    for (int64_t j = 0; j < a->cols; j++) tptr[j + 1] += tptr[j];
    /* Entries in stored (row) order, so each column's run is row-sorted. */
    for (int64_t k = 0; k < a->nnz; k++) perm[tptr[ci[k]]++] = k;
    for (int64_t j = a->cols; j > 0; j--) tptr[j] = tptr[j - 1];
    tptr[0] = 0;
    vn_tensor *expected = NULL;
    if (!atomic_compare_exchange_strong(&m->transpose, &expected, t)) {
        vn_tensor_release(t);
        return expected;
    }
    return t;
}

/* ---- SpMM ---------------------------------------------------------------------------- */

/* Node: inputs x and the values used (NULL: all ones); saved the entries'
 * rows and columns and the transpose blob, all CPU tensors (the CUDA path
 * saves its device arrays instead, see csr_cuda.c). */
enum { SAVED_ROW_IDX, SAVED_COL_IDX, SAVED_TRANSPOSE };
struct csr_spmm_saved { int64_t rows, cols, nnz; };

static vn_status csr_spmm_backward(vn_node *node, const vn_tensor *gout)
{
    const struct csr_spmm_saved *sv = VN_SAVED_STATE(node, struct csr_spmm_saved);
    const vn_tensor *x = node->inputs[0], *vals = node->inputs[1];
    int64_t F = sv->rows ? vn_tensor_numel(gout) / sv->rows : vn__numel(x->ndim - 1, x->shape + 1);
    const int64_t *ri = i64_data(node->saved[SAVED_ROW_IDX]);
    const int64_t *ci = i64_data(node->saved[SAVED_COL_IDX]);
    vn_tensor *dy = vn__plain_contiguous(gout);
    vn_tensor *vc = dy && vals ? vn__plain_contiguous(vals) : NULL;
    vn_status st = !dy || (vals && !vc) ? VN_ERR_MEMORY : VN_OK;
    if (!st && vn__input_needs_grad(node, 0)) {
        const vn_tensor *t = node->saved[SAVED_TRANSPOSE];
        vn_tensor *dx = csr__new_rows(x, sv->cols);
        if (dx)
            csr__segment_sum(sv->cols, F, csr__tptr(t), csr__tperm(t, sv->cols), ri,
                             vc ? vn_tensor_data(vc) : NULL, vn_tensor_data(dy),
                             vn_tensor_data(dx));
        st = dx ? vn__accum(node, 0, dx) : VN_ERR_MEMORY;
    }
    if (!st && vals && vn__input_needs_grad(node, 1)) {
        vn_tensor *xc = vn__plain_contiguous(x);
        vn_tensor *dv = xc ? vn__new(VN_F32, 1, &sv->nnz) : NULL;
        if (dv) {
            const float *X = vn_tensor_data(xc), *DY = vn_tensor_data(dy);
            float *d = vn_tensor_data(dv);
#pragma omp parallel for schedule(static) if (sv->nnz * F > VN_OMP_MIN_WORK)
            for (int64_t e = 0; e < sv->nnz; e++) {
                float s = 0;
                for (int64_t f = 0; f < F; f++) s += DY[ri[e] * F + f] * X[ci[e] * F + f];
                d[e] = s;
            }
        }
        vn_tensor_release(xc);
        st = dv ? vn__accum(node, 1, dv) : VN_ERR_MEMORY;
    }
    vn_tensor_release(dy);
    vn_tensor_release(vc);
    return st;
}

vn_tensor *vn_csr_spmm(const vn_csr *a, const vn_tensor *values, const vn_tensor *x)
{
    int64_t F = 0;
    if (csr__check(a, "csr_spmm") ||
        csr__check_rows(x, a->cols, "csr_spmm", "input", "the matrix's columns", VN_ALLOW_CUDA,
                        &F))
        return NULL;
    if (values) {
        int64_t one = 0;
        if (csr__check_rows(values, a->nnz, "csr_spmm", "values", "the matrix's entries",
                            VN_ALLOW_CUDA, &one))
            return NULL;
        if (values->ndim != 1)
            return vn__errp(VN_ERR_SHAPE, "csr_spmm: values of shape %s, expected (%lld)",
                            vn__shape(values->ndim, values->shape), (long long)a->nnz);
    }
    const vn_tensor *vals = values ? values : a->values;
    const vn_tensor *both[2] = {x, values};
    bool cuda = false;
    if (vn__same_device_strict("csr_spmm", 2, both, (const char *const[]){"input", "values"},
                               &cuda))
        return NULL;
    if (cuda) return csr__cuda_spmm(a, values, x);
    vn_tensor *t = csr__transpose(a); /* built at the forward, so backward never fails on it */
    vn_tensor *xc = t ? vn__plain_contiguous(x) : NULL;
    vn_tensor *vc = xc && vals ? vn__plain_contiguous(vals) : NULL;
    vn_tensor *y = xc && (vc || !vals) ? csr__new_rows(x, a->rows) : NULL;
    if (y)
        csr__segment_sum(a->rows, F, i64_data(a->row_ptr), NULL, i64_data(a->col_idx),
                         vc ? vn_tensor_data(vc) : NULL, vn_tensor_data(xc), vn_tensor_data(y));
    vn_tensor_release(xc);
    vn_tensor_release(vc);
    const vn_tensor *inputs[2] = {x, vals};
    vn_node *node = y ? vn__record(y, "csr_spmm", csr_spmm_backward, 2, inputs) : NULL;
    if (node) {
        node->saved[SAVED_ROW_IDX] = retained(a->row_idx);
        node->saved[SAVED_COL_IDX] = retained(a->col_idx);
        node->saved[SAVED_TRANSPOSE] = retained(t);
        *VN_SAVED_STATE(node, struct csr_spmm_saved) =
            (struct csr_spmm_saved){a->rows, a->cols, a->nnz};
    }
    return y;
}
