/* loss.cu — softmax and log_softmax with their backward, the class-target
 * losses (cross_entropy, nll) and the index kernels (index_select and its
 * backward, index_add). CPU twins: softmax_rows, softmax_rows_backward,
 * check_class_args, vn_cross_entropy, cross_entropy_backward, vn_nll_loss,
 * nll_backward in engine/ops_loss.c; vn_index_select in engine/views.c.
 *
 * Row kernels give each row to one block (grid-stride over rows): a row of
 * a vocabulary-sized softmax is long enough to need many threads, and the
 * block-wide reductions keep the max/sum in fast shared memory. */
#include "internal.cuh"

#include <math.h>

#define ROW_THREADS 256

static unsigned row_blocks(int64_t rows)
{
    return (unsigned)(rows < VNK_MAX_BLOCKS ? (rows > 0 ? rows : 1) : VNK_MAX_BLOCKS);
}

static bool target_dtype_ok(vn_dtype d) { return d == VN_I32 || d == VN_I64; }

/* ---- softmax ------------------------------------------------------------------ */

/* Every exp is of x − row max, so large logits cannot overflow. The max
 * skips NaN as the CPU's `x > m ? x : m` does; a NaN still poisons the sum. */
static __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t D, bool log)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * D;
        float *yr = y + r * D;
        float m = -INFINITY, s = 0.0f;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) m = fmaxf(m, xr[j]);
        m = vnk__block_reduce(m, true);
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) s += expf(xr[j] - m);
        s = vnk__block_reduce(s, false);
        if (log) {
            /* (x − m) − log s, not x − (m + log s): exact when x ≈ m is large */
            float ls = logf(s);
            for (int64_t j = threadIdx.x; j < D; j += blockDim.x) yr[j] = (xr[j] - m) - ls;
        } else {
            float inv = 1.0f / s;
            for (int64_t j = threadIdx.x; j < D; j += blockDim.x) yr[j] = expf(xr[j] - m) * inv;
        }
    }
}

int vnk_softmax(float *y, const float *x, int64_t rows, int64_t D, bool log)
{
    if (rows < 0 || D < 0)
        return vnk__fail("vnk_softmax: negative shape (%lld, %lld)", (long long)rows, (long long)D);
    if (rows == 0 || D == 0) return 0;
    if (!x || !y) return vnk__fail("vnk_softmax: NULL pointer");
    softmax_rows<<<row_blocks(rows), ROW_THREADS>>>(x, y, rows, D, log);
    return vnk__launched(log ? "vnk_softmax(log)" : "vnk_softmax");
}

/* softmax: dx = y·(g − Σ g·y);  log_softmax: dx = g − exp(y)·Σ g. */
static __global__ void softmax_rows_backward(const float *y, const float *g, float *dx, int64_t rows,
                                             int64_t D, bool log)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *yr = y + r * D, *gr = g + r * D;
        float *dr = dx + r * D;
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) s += log ? gr[j] : gr[j] * yr[j];
        s = vnk__block_reduce(s, false);
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x)
            dr[j] = log ? gr[j] - expf(yr[j]) * s : yr[j] * (gr[j] - s);
    }
}

int vnk_softmax_backward(float *dx, const float *y, const float *g, int64_t rows, int64_t D,
                         bool log)
{
    if (rows < 0 || D < 0)
        return vnk__fail("vnk_softmax_backward: negative shape (%lld, %lld)", (long long)rows,
                         (long long)D);
    if (rows == 0 || D == 0) return 0;
    if (!y || !g || !dx) return vnk__fail("vnk_softmax_backward: NULL pointer");
    softmax_rows_backward<<<row_blocks(rows), ROW_THREADS>>>(y, g, dx, rows, D, log);
    return vnk__launched("vnk_softmax_backward");
}

/* ---- target checks ---------------------------------------------------------------- */

/* *bad = the smallest n whose target lies outside 0..C−1 (left alone when
 * there is none). */
static __global__ void find_bad_target(const void *target, bool is64, int64_t N, int64_t C,
                                       long long *bad)
{
    for (int64_t n = VNK_GRID_START; n < N; n += VNK_GRID_STEP) {
        int64_t t = vnk__index_at(target, is64, n);
        if (t < 0 || t >= C) atomicMin(bad, (long long)n);
    }
}

int vnk_check_targets(int64_t *bad, int64_t *bad_value, const void *target, vn_dtype tdtype,
                      int64_t N, int64_t C)
{
    if (!bad || !bad_value) return vnk__fail("vnk_check_targets: NULL result pointer");
    *bad = -1;
    *bad_value = 0;
    if (!target_dtype_ok(tdtype))
        return vnk__fail("vnk_check_targets: targets must be i32 or i64, got %s",
                         vn_dtype_name(tdtype));
    if (N < 0) return vnk__fail("vnk_check_targets: negative count %lld", (long long)N);
    if (N == 0) return 0;
    if (!target) return vnk__fail("vnk_check_targets: NULL targets");
    long long *dbad = (long long *)vnk_alloc(sizeof(long long));
    if (!dbad) return vnk__fail("vnk_check_targets: %s", vnk_error());
    const long long none = INT64_MAX;
    long long first = none;
    bool is64 = tdtype == VN_I64;
    int rc = vnk_copy(dbad, true, &none, false, sizeof none);
    if (!rc) {
        find_bad_target<<<vnk__blocks(N, VNK_THREADS), VNK_THREADS>>>(target, is64, N, C, dbad);
        rc = vnk__launched("vnk_check_targets");
    }
    if (!rc) rc = vnk_copy(&first, false, dbad, true, sizeof first);
    vnk_free(dbad, sizeof(long long));
    if (rc || first == none) return rc;
    *bad = first;
    if (is64) {
        rc = vnk_copy(bad_value, false, (const int64_t *)target + first, true, sizeof(int64_t));
    } else {
        int32_t v = 0;
        rc = vnk_copy(&v, false, (const int32_t *)target + first, true, sizeof v);
        *bad_value = v;
    }
    return rc;
}

/* ---- cross entropy ---------------------------------------------------------------------- */

/* Per row: lse = m + log s with s = Σ exp(x − m); the loss is formed as
 * (m − x_t) + log s in double, as on the CPU, which keeps its digits when
 * x_t ≈ m is large. A target outside 0..C−1 (not checked first) gives NaN
 * instead of a stray read. */
static __global__ void cross_entropy_rows(const float *x, const void *target, bool is64, int64_t N,
                                          int64_t C, float *lse, float *loss)
{
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const float *xr = x + n * C;
        /* One pass over the row (online softmax, Milakov & Gimelshein 2018):
         * each thread keeps its running max m and Σ exp(x − m), rescaling
         * the sum when the max moves; the block then brings every thread's
         * sum to the common max. */
        float m = -INFINITY, s = 0.0f;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            float v = xr[c];
            if (v > m) { /* exp(v − v): 1, or NaN for v = inf as in the two-pass form */
                s = s * expf(m - v) + expf(v - v);
                m = v;
            } else {
                s += expf(v - m);
            }
        }
        float mt = m;
        m = vnk__block_reduce(mt, true);
        s = vnk__block_reduce(s == 0.0f ? 0.0f : s * expf(mt - m), false);
        if (threadIdx.x == 0) {
            int64_t t = vnk__index_at(target, is64, n);
            lse[n] = m + logf(s);
            loss[n] = t >= 0 && t < C ? (float)((double)(m - xr[t]) + log((double)s)) : NAN;
        }
    }
}

int vnk_cross_entropy(float *lse, float *loss, const float *x, const void *target, vn_dtype tdtype,
                      int64_t N, int64_t C)
{
    if (!target_dtype_ok(tdtype))
        return vnk__fail("vnk_cross_entropy: targets must be i32 or i64, got %s",
                         vn_dtype_name(tdtype));
    if (N < 0 || C < 1)
        return vnk__fail("vnk_cross_entropy: bad shape (%lld, %lld)", (long long)N, (long long)C);
    if (N == 0) return 0;
    if (!x || !target || !lse || !loss) return vnk__fail("vnk_cross_entropy: NULL pointer");
    cross_entropy_rows<<<row_blocks(N), ROW_THREADS>>>(x, target, tdtype == VN_I64, N, C, lse, loss);
    return vnk__launched("vnk_cross_entropy");
}

/* dx[n,c] = (exp(x[n,c] − lse[n]) − [c == t_n]) · g[n·gstride] · mul. */
static __global__ void cross_entropy_grad(const float *x, const float *lse, const void *target,
                                          bool is64, int64_t N, int64_t C, const float *g,
                                          int64_t gstride, float mul, float *dx)
{
    for (int64_t i = VNK_GRID_START; i < N * C; i += VNK_GRID_STEP) {
        int64_t n = i / C, c = i % C;
        float p = expf(x[i] - lse[n]);
        float hit = vnk__index_at(target, is64, n) == c ? 1.0f : 0.0f;
        dx[i] = (p - hit) * (g[n * gstride] * mul);
    }
}

int vnk_cross_entropy_backward(float *dx, const float *x, const float *lse, const void *target,
                               vn_dtype tdtype, const float *g, int64_t gstride, int64_t N,
                               int64_t C, float mul)
{
    if (!target_dtype_ok(tdtype))
        return vnk__fail("vnk_cross_entropy_backward: targets must be i32 or i64, got %s",
                         vn_dtype_name(tdtype));
    if (N < 0 || C < 0 || gstride < 0)
        return vnk__fail("vnk_cross_entropy_backward: bad shape (%lld, %lld) or gstride %lld",
                         (long long)N, (long long)C, (long long)gstride);
    if (N * C == 0) return 0;
    if (!x || !lse || !target || !g || !dx)
        return vnk__fail("vnk_cross_entropy_backward: NULL pointer");
    cross_entropy_grad<<<vnk__blocks(N * C, VNK_THREADS), VNK_THREADS>>>(
        x, lse, target, tdtype == VN_I64, N, C, g, gstride, mul, dx);
    return vnk__launched("vnk_cross_entropy_backward");
}

/* ---- nll ------------------------------------------------------------------------------- */

static __global__ void nll_rows(const float *logp, const void *target, bool is64, int64_t N,
                                int64_t C, float *loss)
{
    for (int64_t n = VNK_GRID_START; n < N; n += VNK_GRID_STEP) {
        int64_t t = vnk__index_at(target, is64, n);
        loss[n] = t >= 0 && t < C ? -logp[n * C + t] : NAN;
    }
}

int vnk_nll(float *loss, const float *logp, const void *target, vn_dtype tdtype, int64_t N,
            int64_t C)
{
    if (!target_dtype_ok(tdtype))
        return vnk__fail("vnk_nll: targets must be i32 or i64, got %s", vn_dtype_name(tdtype));
    if (N < 0 || C < 1) return vnk__fail("vnk_nll: bad shape (%lld, %lld)", (long long)N, (long long)C);
    if (N == 0) return 0;
    if (!logp || !target || !loss) return vnk__fail("vnk_nll: NULL pointer");
    nll_rows<<<vnk__blocks(N, VNK_THREADS), VNK_THREADS>>>(logp, target, tdtype == VN_I64, N, C, loss);
    return vnk__launched("vnk_nll");
}

static __global__ void nll_grad(const void *target, bool is64, int64_t N, int64_t C, const float *g,
                                int64_t gstride, float mul, float *dx)
{
    for (int64_t n = VNK_GRID_START; n < N; n += VNK_GRID_STEP) {
        int64_t t = vnk__index_at(target, is64, n);
        if (t >= 0 && t < C) dx[n * C + t] = -(g[n * gstride] * mul);
    }
}

int vnk_nll_backward(float *dx, const void *target, vn_dtype tdtype, const float *g,
                     int64_t gstride, int64_t N, int64_t C, float mul)
{
    if (!target_dtype_ok(tdtype))
        return vnk__fail("vnk_nll_backward: targets must be i32 or i64, got %s",
                         vn_dtype_name(tdtype));
    if (N < 0 || C < 0 || gstride < 0)
        return vnk__fail("vnk_nll_backward: bad shape (%lld, %lld) or gstride %lld", (long long)N,
                         (long long)C, (long long)gstride);
    if (N * C == 0) return 0;
    if (!target || !g || !dx) return vnk__fail("vnk_nll_backward: NULL pointer");
    if (vnk__cuda(cudaMemsetAsync(dx, 0, (size_t)(N * C) * sizeof(float), 0),
                  "vnk_nll_backward: cudaMemsetAsync(%lld floats)", (long long)(N * C)))
        return 1;
    nll_grad<<<vnk__blocks(N, VNK_THREADS), VNK_THREADS>>>(target, tdtype == VN_I64, N, C, g, gstride,
                                                          mul, dx);
    return vnk__launched("vnk_nll_backward");
}

/* ---- index_select / index_add ------------------------------------------------------------- */

/* out[o, j, k] = in[o, index[j], k]; U is an unsigned type of the element
 * size (a copy moves bits, whatever the dtype). */
template <typename U>
static __global__ void index_select_kernel(U *out, const U *in, int64_t outer, int64_t n_in,
                                           int64_t inner, const void *index, bool is64, int64_t n_idx)
{
    int64_t total = outer * n_idx * inner;
    for (int64_t i = VNK_GRID_START; i < total; i += VNK_GRID_STEP) {
        int64_t k = i % inner, j = i / inner % n_idx, o = i / (inner * n_idx);
        int64_t row = vnk__index_at(index, is64, j);
        if (row >= 0 && row < n_in) out[i] = in[(o * n_in + row) * inner + k];
    }
}

static int check_index_args(const char *op, vn_dtype idtype, int64_t outer, int64_t n_in,
                            int64_t inner, int64_t n_idx)
{
    if (!target_dtype_ok(idtype))
        return vnk__fail("%s: indices must be i32 or i64, got %s", op, vn_dtype_name(idtype));
    if (outer < 0 || n_in < 0 || inner < 0 || n_idx < 0)
        return vnk__fail("%s: negative extent (outer %lld, n_in %lld, inner %lld, n_idx %lld)", op,
                         (long long)outer, (long long)n_in, (long long)inner, (long long)n_idx);
    return 0;
}

int vnk_index_select(void *out, const void *in, vn_dtype dtype, const void *index, vn_dtype idtype,
                     int64_t outer, int64_t n_in, int64_t inner, int64_t n_idx)
{
    if (check_index_args("vnk_index_select", idtype, outer, n_in, inner, n_idx)) return 1;
    size_t size = vn_dtype_size(dtype);
    if (!size) return vnk__fail("vnk_index_select: unknown dtype %d", (int)dtype);
    int64_t total = outer * n_idx * inner;
    if (total == 0) return 0;
    if (!out || !in || !index) return vnk__fail("vnk_index_select: NULL pointer");
    bool is64 = idtype == VN_I64;
    unsigned blocks = vnk__blocks(total, VNK_THREADS);
    switch (size) {
    case 1: index_select_kernel<<<blocks, VNK_THREADS>>>((uint8_t *)out, (const uint8_t *)in, outer, n_in, inner, index, is64, n_idx); break;
    case 2: index_select_kernel<<<blocks, VNK_THREADS>>>((uint16_t *)out, (const uint16_t *)in, outer, n_in, inner, index, is64, n_idx); break;
    case 4: index_select_kernel<<<blocks, VNK_THREADS>>>((uint32_t *)out, (const uint32_t *)in, outer, n_in, inner, index, is64, n_idx); break;
    default: index_select_kernel<<<blocks, VNK_THREADS>>>((uint64_t *)out, (const uint64_t *)in, outer, n_in, inner, index, is64, n_idx); break;
    }
    return vnk__launched("vnk_index_select");
}

/* gx[o, index[j], k] += g[o, j, k]; repeated indices meet in atomicAdd, so
 * their order (and the last bits of the sum) may vary between runs. */
static __global__ void index_add_kernel(float *gx, const float *g, int64_t outer, int64_t n_in,
                                        int64_t inner, const void *index, bool is64, int64_t n_idx)
{
    int64_t total = outer * n_idx * inner;
    for (int64_t i = VNK_GRID_START; i < total; i += VNK_GRID_STEP) {
        int64_t k = i % inner, j = i / inner % n_idx, o = i / (inner * n_idx);
        int64_t row = vnk__index_at(index, is64, j);
        if (row >= 0 && row < n_in) atomicAdd(&gx[(o * n_in + row) * inner + k], g[i]);
    }
}

int vnk_index_add(float *gx, const float *g, const void *index, vn_dtype idtype, int64_t outer,
                  int64_t n_in, int64_t inner, int64_t n_idx)
{
    if (check_index_args("vnk_index_add", idtype, outer, n_in, inner, n_idx)) return 1;
    int64_t nx = outer * n_in * inner, total = outer * n_idx * inner;
    if (nx == 0) return 0;
    if (!gx) return vnk__fail("vnk_index_add: NULL gradient");
    if (vnk__cuda(cudaMemsetAsync(gx, 0, (size_t)nx * sizeof(float), 0),
                  "vnk_index_add: cudaMemsetAsync(%lld floats)", (long long)nx))
        return 1;
    if (total == 0) return 0;
    if (!g || !index) return vnk__fail("vnk_index_add: NULL pointer");
    index_add_kernel<<<vnk__blocks(total, VNK_THREADS), VNK_THREADS>>>(gx, g, outer, n_in, inner, index,
                                                                      idtype == VN_I64, n_idx);
    return vnk__launched("vnk_index_add");
}
