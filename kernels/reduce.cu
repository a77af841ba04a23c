/* reduce.cu — sum, mean, max and min over the middle dim of a contiguous
 * (outer, R, inner) array, and the scatter that is max/min's backward. The
 * CPU twins are sum_f32, sum_int and extreme in engine/ops_reduce.c.
 *
 * Two layouts, two kernels per kind:
 *  - rows (inner == 1): each output is a contiguous row of R; a warp reads
 *    it with consecutive lanes on consecutive elements;
 *  - cols (inner > 1): a thread per output column, consecutive threads on
 *    consecutive columns, so each step over r is one coalesced read.
 * When there are few outputs for the size of R (sum_all, max over a long
 * dim, a bias gradient (N, C) → (C)), R is cut into P parts: pass 1 writes
 * P partial results per output, pass 2 reduces those with the same kernel
 * (the partials of the rows layout form rows of P; those of the cols layout
 * form a (1, P, outputs) array). The split is fixed by the shape, so results
 * do not vary from run to run. */
#include "internal.cuh"

#include <math.h>

/* Work per part when R is split, and how many warps (rows) or threads (cols)
 * a launch should have before splitting stops paying. */
#define ROWS_MIN_PART 2048
#define ROWS_TARGET_WARPS 8192
#define COLS_MIN_PART 64
#define COLS_TARGET_THREADS 131072
#define COLS_MAX_PARTS 1024

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* R is cut into parts of `len` rows; P = ceil(R / len) parts, so none is
 * empty (pass 2 cannot take a max/min partial without an index). `want` is
 * the number of parts the launch would like. */
typedef struct {
    int64_t P, len;
} split;

static split split_of(int64_t R, int64_t want)
{
    split s = {1, R};
    if (want > 1 && R > 1) {
        s.len = ceil_div(R, want);
        s.P = ceil_div(R, s.len);
    }
    return s;
}

static split split_rows(int64_t outputs, int64_t R)
{
    return split_of(R, min64(ceil_div(R, ROWS_MIN_PART), ceil_div(ROWS_TARGET_WARPS, outputs)));
}

static split split_cols(int64_t outputs, int64_t R)
{
    int64_t want = min64(ceil_div(R, COLS_MIN_PART), ceil_div(COLS_TARGET_THREADS, outputs));
    return split_of(R, min64(want, COLS_MAX_PARTS));
}

/* ---- sums ------------------------------------------------------------------------ */

/* f32 sums accumulate in double; integer sums in uint64, where wrapping is
 * defined and equals the CPU's (order cannot change a modular sum). */
typedef enum {
    OUT_PARTIAL,  /* the accumulator itself, for pass 2 */
    OUT_F32,      /* (float)(acc · scale) */
    OUT_I64,      /* (int64)acc */
    OUT_INT_MEAN, /* (float)((double)(int64)acc · scale) */
} out_mode;

typedef struct {
    void *p;
    out_mode mode;
    double scale;
} sum_out;

static __device__ inline void store_sum(sum_out o, int64_t i, double acc)
{
    if (o.mode == OUT_PARTIAL) ((double *)o.p)[i] = acc;
    else ((float *)o.p)[i] = (float)(acc * o.scale);
}

static __device__ inline void store_sum(sum_out o, int64_t i, uint64_t acc)
{
    switch (o.mode) {
    case OUT_PARTIAL: ((uint64_t *)o.p)[i] = acc; break;
    case OUT_INT_MEAN: ((float *)o.p)[i] = (float)((double)(int64_t)acc * o.scale); break;
    default: ((int64_t *)o.p)[i] = (int64_t)acc; break;
    }
}

/* Item w (one per warp) is part w % P of row w / P; the result goes to
 * out[w]. The loop bound is the same for the whole warp, so every lane
 * reaches the shuffles. */
template <typename T, typename Acc>
static __global__ void sum_rows(const T *x, sum_out out, int64_t rows, int64_t R, int64_t P,
                         int64_t len)
{
    int64_t lane = threadIdx.x & 31;
    int64_t step = VNK_GRID_STEP / 32;
    for (int64_t w = VNK_GRID_START / 32; w < rows * P; w += step) {
        int64_t o = w / P, r0 = w % P * len, r1 = r0 + len < R ? r0 + len : R;
        const T *row = x + o * R;
        Acc acc = 0;
        for (int64_t r = r0 + lane; r < r1; r += 32) acc += (Acc)row[r];
        for (int s = 16; s > 0; s >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, s);
        if (lane == 0) store_sum(out, w, acc);
    }
}

/* Item t is part t / (outer·inner) of output column t % (outer·inner); the
 * result goes to out[t]. */
template <typename T, typename Acc>
static __global__ void sum_cols(const T *x, sum_out out, int64_t outer, int64_t R, int64_t inner,
                                int64_t P, int64_t len)
{
    int64_t cols = outer * inner;
    for (int64_t t = VNK_GRID_START; t < cols * P; t += VNK_GRID_STEP) {
        int64_t q = t % cols, o = q / inner, j = q % inner;
        int64_t r0 = t / cols * len, r1 = r0 + len < R ? r0 + len : R;
        const T *col = x + o * R * inner + j;
        Acc acc = 0;
#pragma unroll 4
        for (int64_t r = r0; r < r1; r++) acc += (Acc)col[r * inner];
        store_sum(out, t, acc);
    }
}

/* Σ over R of T into `out` (mode), through Acc, split as described above. */
template <typename T, typename Acc>
static int sum_any(const T *x, sum_out out, int64_t outer, int64_t R, int64_t inner)
{
    int64_t outputs = outer * inner;
    bool rows = inner == 1;
    split sp = rows ? split_rows(outputs, R) : split_cols(outputs, R);
    int64_t P = sp.P;
    if (P == 1) {
        if (rows) sum_rows<T, Acc><<<vnk__blocks(outputs * 32, VNK_THREADS), VNK_THREADS>>>(x, out, outer, R, 1, R);
        else sum_cols<T, Acc><<<vnk__blocks(outputs, VNK_THREADS), VNK_THREADS>>>(x, out, outer, R, inner, 1, R);
        return vnk__launched("vnk_reduce(sum)");
    }
    size_t bytes = (size_t)(P * outputs) * sizeof(Acc);
    Acc *part = (Acc *)vnk_alloc(bytes);
    if (!part) return vnk__fail("vnk_reduce(sum): partial sums: %s", vnk_error());
    sum_out mid = {part, OUT_PARTIAL, 1.0};
    int rc;
    if (rows) {
        sum_rows<T, Acc><<<vnk__blocks(outputs * P * 32, VNK_THREADS), VNK_THREADS>>>(x, mid, outer, R, P, sp.len);
        rc = vnk__launched("vnk_reduce(sum, pass 1)");
        if (!rc) sum_rows<Acc, Acc><<<vnk__blocks(outputs * 32, VNK_THREADS), VNK_THREADS>>>(part, out, outer, P, 1, P);
    } else {
        sum_cols<T, Acc><<<vnk__blocks(outputs * P, VNK_THREADS), VNK_THREADS>>>(x, mid, outer, R, inner, P, sp.len);
        rc = vnk__launched("vnk_reduce(sum, pass 1)");
        if (!rc) sum_cols<Acc, Acc><<<vnk__blocks(outputs, VNK_THREADS), VNK_THREADS>>>(part, out, 1, P, outputs, 1, P);
    }
    if (!rc) rc = vnk__launched("vnk_reduce(sum, pass 2)");
    vnk_free(part, bytes); /* stream-ordered: a later user of the block runs after pass 2 */
    return rc;
}

/* ---- max / min --------------------------------------------------------------------- */

static __device__ inline bool is_nan(float v) { return isnan(v); }
template <typename T> static __device__ inline bool is_nan(T) { return false; }

/* Whether candidate (c at ci) beats the best so far (b at bi; bi < 0: none).
 * NaN beats every number and the first extremum wins, in any order of
 * combination: ties go to the smaller index. */
template <typename T>
static __device__ inline bool beats(T c, int64_t ci, T b, int64_t bi, bool want_max)
{
    if (bi < 0) return ci >= 0;
    if (ci < 0) return false;
    bool cn = is_nan(c), bn = is_nan(b);
    if (cn || bn) return cn && (!bn || ci < bi);
    if (c == b) return ci < bi;
    return want_max ? c > b : c < b;
}

/* Shuffles for every element type (u8 travels as an unsigned int). */
static __device__ inline float shfl_down(float v, int s) { return __shfl_down_sync(0xffffffffu, v, s); }
static __device__ inline int32_t shfl_down(int32_t v, int s) { return __shfl_down_sync(0xffffffffu, v, s); }
static __device__ inline int64_t shfl_down(int64_t v, int s)
{
    return (int64_t)__shfl_down_sync(0xffffffffu, (long long)v, s);
}
static __device__ inline uint8_t shfl_down(uint8_t v, int s)
{
    return (uint8_t)__shfl_down_sync(0xffffffffu, (unsigned)v, s);
}

/* Pass-1 outputs are partial (value, index) pairs; in pass 2 the index found
 * is a position among the partials, and remap (the partial indices, laid
 * out like x) turns it into the position in R. remap is NULL in a one-pass
 * reduction. */
template <typename T>
static __global__ void ext_rows(const T *x, T *val, int64_t *idx, const int64_t *remap,
                                int64_t rows, int64_t R, int64_t P, int64_t len, bool want_max)
{
    int64_t lane = threadIdx.x & 31;
    int64_t step = VNK_GRID_STEP / 32;
    for (int64_t w = VNK_GRID_START / 32; w < rows * P; w += step) {
        int64_t o = w / P, r0 = w % P * len, r1 = r0 + len < R ? r0 + len : R;
        const T *row = x + o * R;
        T best = 0;
        int64_t bi = -1;
        for (int64_t r = r0 + lane; r < r1; r += 32)
            if (beats(row[r], r, best, bi, want_max)) {
                best = row[r];
                bi = r;
            }
        for (int s = 16; s > 0; s >>= 1) {
            T c = shfl_down(best, s);
            int64_t ci = (int64_t)__shfl_down_sync(0xffffffffu, (long long)bi, s);
            if (beats(c, ci, best, bi, want_max)) {
                best = c;
                bi = ci;
            }
        }
        if (lane == 0) {
            val[w] = best;
            idx[w] = remap ? remap[o * R + bi] : bi;
        }
    }
}

template <typename T>
static __global__ void ext_cols(const T *x, T *val, int64_t *idx, const int64_t *remap,
                                int64_t outer, int64_t R, int64_t inner, int64_t P, int64_t len,
                                bool want_max)
{
    int64_t cols = outer * inner;
    for (int64_t t = VNK_GRID_START; t < cols * P; t += VNK_GRID_STEP) {
        int64_t q = t % cols, o = q / inner, j = q % inner;
        int64_t r0 = t / cols * len, r1 = r0 + len < R ? r0 + len : R;
        const T *col = x + o * R * inner + j;
        T best = 0;
        int64_t bi = -1;
        for (int64_t r = r0; r < r1; r++) {
            T c = col[r * inner];
            if (beats(c, r, best, bi, want_max)) {
                best = c;
                bi = r;
            }
        }
        val[t] = best;
        idx[t] = remap ? remap[(o * R + bi) * inner + j] : bi;
    }
}

template <typename T>
static int extreme_any(const T *x, T *val, int64_t *idx, int64_t outer, int64_t R, int64_t inner,
                       bool want_max)
{
    int64_t outputs = outer * inner;
    bool rows = inner == 1;
    split sp = rows ? split_rows(outputs, R) : split_cols(outputs, R);
    int64_t P = sp.P;
    if (P == 1) {
        if (rows) ext_rows<T><<<vnk__blocks(outputs * 32, VNK_THREADS), VNK_THREADS>>>(x, val, idx, NULL, outer, R, 1, R, want_max);
        else ext_cols<T><<<vnk__blocks(outputs, VNK_THREADS), VNK_THREADS>>>(x, val, idx, NULL, outer, R, inner, 1, R, want_max);
        return vnk__launched("vnk_reduce(max/min)");
    }
    size_t vbytes = (size_t)(P * outputs) * sizeof(T), ibytes = (size_t)(P * outputs) * sizeof(int64_t);
    T *pval = (T *)vnk_alloc(vbytes);
    int64_t *pidx = pval ? (int64_t *)vnk_alloc(ibytes) : NULL;
    if (!pidx) {
        vnk_free(pval, vbytes);
        return vnk__fail("vnk_reduce(max/min): partial results: %s", vnk_error());
    }
    int rc;
    if (rows) {
        ext_rows<T><<<vnk__blocks(outputs * P * 32, VNK_THREADS), VNK_THREADS>>>(x, pval, pidx, NULL, outer, R, P, sp.len, want_max);
        rc = vnk__launched("vnk_reduce(max/min, pass 1)");
        if (!rc) ext_rows<T><<<vnk__blocks(outputs * 32, VNK_THREADS), VNK_THREADS>>>(pval, val, idx, pidx, outer, P, 1, P, want_max);
    } else {
        ext_cols<T><<<vnk__blocks(outputs * P, VNK_THREADS), VNK_THREADS>>>(x, pval, pidx, NULL, outer, R, inner, P, sp.len, want_max);
        rc = vnk__launched("vnk_reduce(max/min, pass 1)");
        if (!rc) ext_cols<T><<<vnk__blocks(outputs, VNK_THREADS), VNK_THREADS>>>(pval, val, idx, pidx, 1, P, outputs, 1, P, want_max);
    }
    if (!rc) rc = vnk__launched("vnk_reduce(max/min, pass 2)");
    vnk_free(pidx, ibytes);
    vnk_free(pval, vbytes);
    return rc;
}

/* ---- the entry points --------------------------------------------------------------- */

int vnk_reduce(void *out, int64_t *index, const void *in, vn_dtype dtype, int64_t outer, int64_t R,
               int64_t inner, vnk_red kind, double scale)
{
    if (outer < 0 || R < 0 || inner < 0)
        return vnk__fail("vnk_reduce: negative extent (outer %lld, R %lld, inner %lld)",
                         (long long)outer, (long long)R, (long long)inner);
    if (dtype != VN_F32 && dtype != VN_I32 && dtype != VN_I64 && dtype != VN_U8)
        return vnk__fail("vnk_reduce: expected an f32, i32, i64 or u8 input, got %s",
                         vn_dtype_name(dtype));
    if (kind != VNK_RED_SUM && kind != VNK_RED_MEAN && kind != VNK_RED_MAX && kind != VNK_RED_MIN)
        return vnk__fail("vnk_reduce: unknown reduction %d", (int)kind);
    if (outer * inner == 0) return 0;
    if (!out || (!in && R > 0)) return vnk__fail("vnk_reduce: NULL input or output");

    if (kind == VNK_RED_MAX || kind == VNK_RED_MIN) {
        if (R == 0) return vnk__fail("vnk_reduce(max/min): cannot reduce over zero elements");
        if (!index) return vnk__fail("vnk_reduce(max/min): NULL index output");
        bool want_max = kind == VNK_RED_MAX;
        int rc = 1;
        VNK_DTYPE_SWITCH(dtype, T, break,
            rc = extreme_any<T>((const T *)in, (T *)out, index, outer, R, inner, want_max));
        return rc;
    }
    /* MEAN divides as the CPU does, sum · (1/R): R == 0 gives 0 · inf = NaN. */
    double inv_r = 1.0 / (double)R;
    if (dtype == VN_F32) {
        sum_out o = {out, OUT_F32, kind == VNK_RED_MEAN ? inv_r : scale};
        return sum_any<float, double>((const float *)in, o, outer, R, inner);
    }
    sum_out o = {out, kind == VNK_RED_MEAN ? OUT_INT_MEAN : OUT_I64, inv_r};
    switch (dtype) {
    case VN_I32: return sum_any<int32_t, uint64_t>((const int32_t *)in, o, outer, R, inner);
    case VN_I64: return sum_any<int64_t, uint64_t>((const int64_t *)in, o, outer, R, inner);
    default: return sum_any<uint8_t, uint64_t>((const uint8_t *)in, o, outer, R, inner);
    }
}

/* gx[o, index[o, j], j] = g[o, j] (gx zeroed first). */
static __global__ void scatter_extreme(float *gx, const float *g, const int64_t *index, int64_t outer,
                                       int64_t R, int64_t inner)
{
    for (int64_t t = VNK_GRID_START; t < outer * inner; t += VNK_GRID_STEP) {
        int64_t o = t / inner, j = t % inner, r = index[t];
        if (r >= 0 && r < R) gx[(o * R + r) * inner + j] = g[t];
    }
}

int vnk_scatter_extreme(float *gx, const float *g, const int64_t *index, int64_t outer, int64_t R,
                        int64_t inner)
{
    if (outer < 0 || R < 0 || inner < 0)
        return vnk__fail("vnk_scatter_extreme: negative extent (outer %lld, R %lld, inner %lld)",
                         (long long)outer, (long long)R, (long long)inner);
    int64_t n = outer * R * inner;
    if (n == 0) return 0;
    if (!gx || !g || !index) return vnk__fail("vnk_scatter_extreme: NULL pointer");
    if (vnk__cuda(cudaMemsetAsync(gx, 0, (size_t)n * sizeof(float), 0),
                  "vnk_scatter_extreme: cudaMemsetAsync(%lld floats)", (long long)n))
        return 1;
    scatter_extreme<<<vnk__blocks(outer * inner, VNK_THREADS), VNK_THREADS>>>(gx, g, index, outer, R, inner);
    return vnk__launched("vnk_scatter_extreme");
}
