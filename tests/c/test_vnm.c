/* V:N:M sparse matrices: the compressed pattern against a plain reference of
 * the selection rule, decompression and stats, the three kernels against
 * dense masked products summed in double (for shapes that do not divide by
 * V or M, V from 1 to 128, M from 4 to 32, on both the AVX-512 and the
 * portable loops), gradients of vn_vnm_linear by finite differences, and
 * bad input. */
#include "gradcheck.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *f32(const vn_tensor *t) { return vn_tensor_data(t); }

static vn_tensor *new_f32(int64_t rows, int64_t cols)
{
    vn_tensor *t = vn_zeros(VN_F32, 2, (int64_t[]){rows, cols});
    CHECK_PTR(t);
    return t;
}

/* Σ of the two largest of n numbers. */
static double top2_sum(const double *a, int n)
{
    double hi = 0, lo = 0;
    for (int i = 0; i < n; i++) {
        if (a[i] > hi) lo = hi, hi = a[i];
        else if (a[i] > lo) lo = a[i];
    }
    return hi + lo;
}

/* |w[r][c]|, 0 for a padding column. */
static double mag(const float *w, int64_t K, int64_t r, int64_t c)
{
    return c < K ? fabs((double)w[r * K + c]) : 0;
}

/* The candidate columns of a block-group under the documented rule: all M
 * when M ≤ 16, else the 16 with the largest Σ_rows |w| (lower first on ties). */
static int candidates(const float *w, int64_t K, int64_t r0, int64_t r1, int64_t c0, int64_t M,
                      int *cand)
{
    if (M <= 16) {
        for (int m = 0; m < M; m++) cand[m] = m;
        return (int)M;
    }
    double *sum = calloc((size_t)M, sizeof *sum);
    bool *taken = calloc((size_t)M, sizeof *taken);
    for (int64_t m = 0; m < M; m++)
        for (int64_t r = r0; r < r1; r++) sum[m] += mag(w, K, r, c0 + m);
    for (int k = 0; k < 16; k++) {
        int best = -1;
        for (int m = 0; m < M; m++)
            if (!taken[m] && (best < 0 || sum[m] > sum[best])) best = m;
        taken[best] = true;
    }
    int n = 0;
    for (int m = 0; m < M; m++)
        if (taken[m]) cand[n++] = m;
    free(sum);
    free(taken);
    return n;
}

/* Checks s against w: to_dense is w masked exactly; each row keeps 2 per
 * group (fewer only where the group has fewer than 2 real columns); the
 * rows of a block keep at most 4 distinct columns of a group, all among
 * the candidates; each row keeps its 2 largest of those; and the block's
 * kept Σ|w| is the best over all 4-subsets of the candidates. */
static void check_pattern(const vn_tensor *wt, const vn_vnm *s, int64_t V, int64_t M)
{
    int64_t R = vn_tensor_shape(wt)[0], K = vn_tensor_shape(wt)[1], G = (K + M - 1) / M;
    const float *w = f32(wt);
    vn_tensor *mask = vn_vnm_mask(s), *dense = vn_vnm_to_dense(s);
    CHECK_PTR(mask);
    CHECK_PTR(dense);
    assert_int_equal(vn_tensor_dtype(mask), VN_U8);
    const uint8_t *mk = vn_tensor_data(mask);
    const float *d = f32(dense);
    for (int64_t i = 0; i < R * K; i++) {
        assert_true(mk[i] <= 1);
        float want = mk[i] ? w[i] : 0.0f;
        if (memcmp(&d[i], &want, sizeof want) != 0)
            fail_msg("to_dense (%lld, %lld): %g, want %g", (long long)(i / K), (long long)(i % K),
                     d[i], want);
    }
    for (int64_t r0 = 0; r0 < R; r0 += V) {
        int64_t r1 = r0 + V < R ? r0 + V : R;
        for (int64_t g = 0; g < G; g++) {
            int64_t c0 = g * M, real = K - c0 < M ? K - c0 : M;
            int cand[64];
            int nc = candidates(w, K, r0, r1, c0, M, cand);
            bool used[64] = {false};
            double kept = 0;
            for (int64_t r = r0; r < r1; r++) {
                int count = 0;
                for (int64_t m = 0; m < real; m++)
                    if (mk[r * K + c0 + m]) count++, used[m] = true, kept += mag(w, K, r, c0 + m);
                int want = real < 2 ? (int)real : 2;
                if (count != want)
                    fail_msg("row %lld group %lld keeps %d, want %d", (long long)r, (long long)g,
                             count, want);
            }
            int nused = 0;
            for (int m = 0; m < M; m++)
                if (used[m]) {
                    nused++;
                    bool is_cand = false;
                    for (int k = 0; k < nc; k++) is_cand |= cand[k] == m;
                    if (!is_cand) fail_msg("block %lld group %lld keeps column %d, not a candidate",
                                           (long long)(r0 / V), (long long)g, m);
                }
            if (nused > 4)
                fail_msg("block at row %lld group %lld keeps %d columns, more than 4",
                         (long long)r0, (long long)g, nused);
            /* Each row's pair is its best among the block's kept columns. */
            for (int64_t r = r0; r < r1; r++) {
                double a[64], row_kept = 0;
                int n = 0;
                for (int m = 0; m < M; m++)
                    if (used[m]) {
                        a[n++] = mag(w, K, r, c0 + m);
                        if (m < real && mk[r * K + c0 + m]) row_kept += mag(w, K, r, c0 + m);
                    }
                assert_true(row_kept >= top2_sum(a, n) - 1e-7);
            }
            double best = 0;
            for (int i = 0; i < nc; i++)
                for (int j = i + 1; j < nc; j++)
                    for (int k = j + 1; k < nc; k++)
                        for (int l = k + 1; l < nc; l++) {
                            double score = 0;
                            for (int64_t r = r0; r < r1; r++) {
                                double a[4] = {mag(w, K, r, c0 + cand[i]), mag(w, K, r, c0 + cand[j]),
                                               mag(w, K, r, c0 + cand[k]), mag(w, K, r, c0 + cand[l])};
                                score += top2_sum(a, 4);
                            }
                            if (score > best) best = score;
                        }
            if (kept < best * (1 - 1e-6))
                fail_msg("block at row %lld group %lld keeps Σ|w| %.9g, the best subset has %.9g",
                         (long long)r0, (long long)g, kept, best);
        }
    }
    vn_tensor_release(mask);
    vn_tensor_release(dense);
}

static void test_compress(void **state)
{
    (void)state;
    /* {R, K, V, M}: divisible and not, V from 1 to 128, M from 4 to 32
     * (exhaustive up to 16, candidate pre-selection above). */
    const int64_t shapes[][4] = {
        {8, 16, 4, 8},    {5, 9, 1, 4},     {37, 50, 8, 8},   {70, 100, 64, 16},
        {40, 96, 128, 32}, {20, 70, 32, 13}, {13, 45, 3, 5},  {16, 68, 16, 17},
        {3, 10, 2, 8},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t R = shapes[i][0], K = shapes[i][1], V = shapes[i][2], M = shapes[i][3];
        vn_tensor *w = trand(2, (int64_t[]){R, K}, -1, 1, 100 + (unsigned)i);
        vn_vnm *s = vn_vnm_from_dense(w, V, 2, M);
        CHECK_PTR(s);
        check_pattern(w, s, V, M);
        vn_vnm_free(s);
        vn_tensor_release(w);
    }
}

/* Ties and zeros: an all-zero matrix still keeps 2 per group (the first
 * columns), and the values are exactly its (zero) weights. */
static void test_compress_ties(void **state)
{
    (void)state;
    vn_tensor *w = new_f32(6, 16);
    vn_vnm *s = vn_vnm_from_dense(w, 4, 2, 8);
    CHECK_PTR(s);
    check_pattern(w, s, 4, 8);
    vn_tensor *mask = vn_vnm_mask(s);
    const uint8_t *mk = vn_tensor_data(mask);
    for (int64_t r = 0; r < 6; r++)
        for (int64_t c = 0; c < 16; c++) assert_int_equal(mk[r * 16 + c], c % 8 < 2);
    vn_tensor_release(mask);
    vn_vnm_free(s);
    vn_tensor_release(w);
}

static void test_stats_and_values(void **state)
{
    (void)state;
    vn_tensor *w = trand(2, (int64_t[]){70, 100}, -1, 1, 7);
    vn_vnm *s = vn_vnm_from_dense(w, 16, 2, 8);
    CHECK_PTR(s);
    vn_vnm_summary st;
    CHECK_OK(vn_vnm_stats(s, &st));
    vn_tensor *mask = vn_vnm_mask(s);
    int64_t ones = 0;
    for (int64_t i = 0; i < 7000; i++) ones += ((uint8_t *)vn_tensor_data(mask))[i];
    /* 100 = 12 groups of 8 + 4 real columns: 13 groups, 2 per row each. */
    assert_int_equal(st.rows, 70);
    assert_int_equal(st.cols, 100);
    assert_int_equal(st.V, 16);
    assert_int_equal(st.N, 2);
    assert_int_equal(st.M, 8);
    assert_int_equal(st.nnz, ones);
    assert_int_equal(st.nnz, 70 * 13 * 2);
    assert_true(fabs(st.sparsity - (1 - 1820.0 / 7000)) < 1e-12);
    assert_int_equal(st.value_bytes, 70 * 26 * 4);
    assert_int_equal(st.index_bytes, 70 * 7);       /* 26 values × 2 bits = 6.5 → 7 bytes */
    assert_int_equal(st.column_bytes, 5 * 13 * 4 * 2); /* ⌈70/16⌉ blocks */
    assert_int_equal(st.bytes, st.value_bytes + st.index_bytes + st.column_bytes);
    assert_int_equal(st.dense_bytes, 28000);

    /* The values tensor is shared: an in-place change shows in to_dense. */
    vn_tensor *v1 = vn_vnm_values(s), *v2 = vn_vnm_values(s);
    assert_ptr_equal(v1, v2);
    assert_int_equal(vn_tensor_shape(v1)[0], 70);
    assert_int_equal(vn_tensor_shape(v1)[1], 26);
    CHECK_OK(vn_tensor_fill_(v1, 2.0));
    vn_tensor *d = vn_vnm_to_dense(s);
    for (int64_t i = 0; i < 7000; i++)
        assert_true(f32(d)[i] == (((uint8_t *)vn_tensor_data(mask))[i] ? 2.0f : 0.0f));
    /* Everything stays usable after the matrix is freed. */
    vn_vnm_free(s);
    assert_true(f32(v1)[0] == 2.0f);
    vn_tensor *ts[] = {w, mask, v1, v2, d};
    for (size_t i = 0; i < 5; i++) vn_tensor_release(ts[i]);
}

/* ---- kernels ----------------------------------------------------------------- */

/* The kept column of value `slot` of group g in row r, from the mask (kept
 * columns in ascending order), or -1 when that value sits in padding. */
static int64_t kept_column(const uint8_t *mk, int64_t K, int64_t M, int64_t r, int64_t g, int slot)
{
    int seen = 0;
    for (int64_t c = g * M; c < (g + 1) * M && c < K; c++)
        if (mk[r * K + c] && seen++ == slot) return c;
    return -1;
}

static void check_kernels(int64_t R, int64_t K, int64_t V, int64_t M, int64_t B, unsigned seed)
{
    int64_t G = (K + M - 1) / M;
    vn_tensor *w = trand(2, (int64_t[]){R, K}, -1, 1, seed);
    vn_vnm *s = vn_vnm_from_dense(w, V, 2, M);
    CHECK_PTR(s);
    vn_tensor *values = vn_vnm_values(s), *wd = vn_vnm_to_dense(s), *mask = vn_vnm_mask(s);
    vn_tensor *x = trand(2, (int64_t[]){B, K}, -1, 1, seed + 1);
    vn_tensor *dy = trand(2, (int64_t[]){B, R}, -1, 1, seed + 2);
    const float *pw = f32(wd), *px = f32(x), *pdy = f32(dy);
    const uint8_t *mk = vn_tensor_data(mask);

    vn_tensor *y_ref = new_f32(B, R), *dx_ref = new_f32(B, K), *dv_ref = new_f32(R, 2 * G);
    for (int64_t b = 0; b < B; b++)
        for (int64_t r = 0; r < R; r++) {
            double acc = 0;
            for (int64_t c = 0; c < K; c++) acc += (double)px[b * K + c] * pw[r * K + c];
            f32(y_ref)[b * R + r] = (float)acc;
        }
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < K; c++) {
            double acc = 0;
            for (int64_t r = 0; r < R; r++) acc += (double)pdy[b * R + r] * pw[r * K + c];
            f32(dx_ref)[b * K + c] = (float)acc;
        }
    for (int64_t r = 0; r < R; r++)
        for (int64_t g = 0; g < G; g++)
            for (int slot = 0; slot < 2; slot++) {
                int64_t c = kept_column(mk, K, M, r, g, slot);
                double acc = 0;
                for (int64_t b = 0; c >= 0 && b < B; b++) acc += (double)pdy[b * R + r] * px[b * K + c];
                f32(dv_ref)[r * 2 * G + 2 * g + slot] = (float)acc;
            }

    vn_tensor *y = vn_vnm_spmm(s, values, x), *dx = vn_vnm_spmm_t(s, values, dy);
    vn_tensor *dv = vn_vnm_sddmm(s, dy, x);
    CHECK_PTR(y);
    CHECK_PTR(dx);
    CHECK_PTR(dv);
    double ey = max_rel_diff(y, y_ref), ex = max_rel_diff(dx, dx_ref), ev = max_rel_diff(dv, dv_ref);
    /* The kernels sum in f32 in their own order (blocks of kept columns,
     * slices of the batch for sddmm), the reference in double: the gap grows
     * with the number of terms n of each sum, so the bound is 1e-5 up to 256
     * terms and grows with n beyond (seen: sddmm 1.0e-5 at B = 600). */
    double G2 = 2.0 * (double)G;
    double ty = 1e-5 * fmax(1, G2 / 256), tx = 1e-5 * fmax(1, (double)R / 256),
           tv = 1e-5 * fmax(1, (double)B / 256);
    if (ey > ty || ex > tx || ev > tv)
        fail_msg("R=%lld K=%lld V=%lld M=%lld B=%lld (%s): spmm %.3g, spmm_t %.3g, sddmm %.3g",
                 (long long)R, (long long)K, (long long)V, (long long)M, (long long)B, vn_vnm_isa(),
                 ey, ex, ev);

    /* The op: the same product plus a bias, for a 3-D input. */
    if (B % 2 == 0) {
        vn_tensor *bias = trand(1, (int64_t[]){R}, -1, 1, seed + 3);
        vn_tensor *x3 = vn_reshape(x, 3, (int64_t[]){2, B / 2, K});
        vn_tensor *y3 = vn_vnm_linear(x3, s, values, bias);
        CHECK_PTR(y3);
        assert_int_equal(vn_tensor_ndim(y3), 3);
        assert_int_equal(vn_tensor_shape(y3)[2], R);
        for (int64_t b = 0; b < B; b++)
            for (int64_t r = 0; r < R; r++) {
                float got = f32(y3)[b * R + r], want = f32(y)[b * R + r] + f32(bias)[r];
                assert_true(fabsf(got - want) <= 1e-6f * (1 + fabsf(want)));
            }
        vn_tensor_release(bias);
        vn_tensor_release(x3);
        vn_tensor_release(y3);
    }
    vn_tensor *ts[] = {w, values, wd, mask, x, dy, y_ref, dx_ref, dv_ref, y, dx, dv};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) vn_tensor_release(ts[i]);
    vn_vnm_free(s);
}

/* {R, K, V, M, B}: a representative grid of shapes that do not divide by V,
 * M or the kernels' 64-row batch panels, and one large enough in B·K for the
 * other SDDMM strategy. */
static const int64_t kernel_shapes[][5] = {
    {5, 9, 1, 4, 3},      {37, 50, 8, 8, 70},    {130, 100, 64, 16, 65}, {200, 96, 128, 32, 130},
    {64, 70, 32, 13, 17}, {33, 45, 3, 5, 129},   {16, 68, 16, 17, 4},    {1, 8, 64, 8, 1},
    {96, 256, 64, 8, 64}, {150, 200, 128, 4, 2}, {70, 300, 16, 32, 96},  {9, 40, 2, 6, 200},
    {24, 1100, 8, 8, 2000}, /* X over 8 MiB: the SDDMM by dot products */
    {24, 2048, 8, 8, 600},  /* the SDDMM by rows (AVX-512) in three slices of the batch */
};

static void run_kernel_grid(void)
{
    for (size_t i = 0; i < sizeof kernel_shapes / sizeof kernel_shapes[0]; i++) {
        const int64_t *k = kernel_shapes[i];
        check_kernels(k[0], k[1], k[2], k[3], k[4], 300 + 10 * (unsigned)i);
    }
}

static void test_kernels_native(void **state)
{
    (void)state;
    unsetenv("VENOM_NO_AVX512");
    run_kernel_grid();
}

static void test_kernels_portable(void **state)
{
    (void)state;
    setenv("VENOM_NO_AVX512", "1", 1);
    assert_string_equal(vn_vnm_isa(), "portable");
    run_kernel_grid();
    unsetenv("VENOM_NO_AVX512");
}

/* ---- gradients ------------------------------------------------------------------ */

typedef struct {
    vn_vnm *s;
} op_ctx;

static vn_tensor *f_vnm_linear(vn_tensor **in, void *ctx)
{
    return vn_vnm_linear(in[0], ((op_ctx *)ctx)->s, in[1], in[2]);
}

static void gradcheck_shape(int64_t R, int64_t K, int64_t V, int64_t M, int64_t B, unsigned seed)
{
    vn_tensor *w = trand(2, (int64_t[]){R, K}, -1, 1, seed);
    op_ctx ctx = {vn_vnm_from_dense(w, V, 2, M)};
    CHECK_PTR(ctx.s);
    vn_tensor *x = trand(2, (int64_t[]){B, K}, -1, 1, seed + 1);
    vn_tensor *values = vn_vnm_values(ctx.s);
    vn_tensor *bias = trand(1, (int64_t[]){R}, -1, 1, seed + 2);
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    CHECK_OK(vn_tensor_set_requires_grad(values, true));
    CHECK_OK(vn_tensor_set_requires_grad(bias, true));
    vn_tensor *in[3] = {x, values, bias};
    gradcheck(f_vnm_linear, in, 3, &ctx, 1e-2, 1e-3);
    vn_tensor_release(w);
    vn_tensor_release(x);
    vn_tensor_release(values);
    vn_tensor_release(bias);
    vn_vnm_free(ctx.s);
}

static void test_gradcheck(void **state)
{
    (void)state;
    gradcheck_shape(10, 13, 4, 5, 3, 11); /* padding in rows and columns */
    gradcheck_shape(6, 8, 1, 4, 2, 12);   /* V = 1 */
    gradcheck_shape(5, 18, 8, 17, 4, 13); /* V > R, candidate pre-selection */
}

/* The bias's gradient of a batch of 4 panels of 64 rows (the last with 8)
 * with B·R over VN_OMP_MIN_WORK, so that the kernels run on the threads:
 * against Σ_b dy[b, r] in double, and the same bits on one thread as on
 * two. */
static void test_bias_grad_panels(void **state)
{
    (void)state;
    enum { R = 200, K = 16, B = 200 };
    vn_tensor *w = trand(2, (int64_t[]){R, K}, -1, 1, 31);
    vn_vnm *s = vn_vnm_from_dense(w, 8, 2, 8);
    CHECK_PTR(s);
    vn_tensor *x = trand(2, (int64_t[]){B, K}, -1, 1, 32), *dy = trand(2, (int64_t[]){B, R}, -1, 1, 33);
    vn_tensor *values = vn_vnm_values(s), *bias = trand(1, (int64_t[]){R}, -1, 1, 34);
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    CHECK_OK(vn_tensor_set_requires_grad(bias, true));
    int threads0 = omp_get_max_threads();
    float on_two[R];
    for (int threads = 2; threads >= 1; threads--) {
        omp_set_num_threads(threads);
        vn_tensor_zero_grad(bias);
        vn_tensor *y = vn_vnm_linear(x, s, values, bias);
        CHECK_PTR(y);
        CHECK_OK(vn_backward(y, dy));
        const float *db = f32(vn_tensor_grad(bias));
        for (int64_t r = 0; r < R; r++) {
            double want = 0;
            for (int64_t b = 0; b < B; b++) want += f32(dy)[b * R + r];
            if (fabs(db[r] - want) > 1e-5 * (1 + fabs(want)))
                fail_msg("db[%lld] = %.9g, expected %.9g", (long long)r, db[r], want);
        }
        if (threads == 2) memcpy(on_two, db, sizeof on_two);
        else assert_memory_equal(on_two, db, sizeof on_two);
        vn_tensor_release(y);
    }
    omp_set_num_threads(threads0);
    vn_tensor *ts[] = {w, x, dy, values, bias};
    for (size_t i = 0; i < 5; i++) vn_tensor_release(ts[i]);
    vn_vnm_free(s);
}

/* The values' gradient is zero where a value sits in a padding column, so
 * training never moves weight into padding. */
static void test_padding_gradient(void **state)
{
    (void)state;
    vn_tensor *w = trand(2, (int64_t[]){4, 9}, -1, 1, 21); /* group 2 has 1 real column */
    vn_vnm *s = vn_vnm_from_dense(w, 4, 2, 4);
    vn_tensor *x = trand(2, (int64_t[]){5, 9}, -1, 1, 22), *dy = trand(2, (int64_t[]){5, 4}, -1, 1, 23);
    vn_tensor *dv = vn_vnm_sddmm(s, dy, x), *v = vn_vnm_values(s);
    CHECK_PTR(dv);
    for (int64_t r = 0; r < 4; r++) {
        assert_true(f32(dv)[r * 6 + 5] == 0.0f); /* second value of the last group: padding */
        assert_true(f32(v)[r * 6 + 5] == 0.0f);
        assert_true(f32(dv)[r * 6 + 4] != 0.0f); /* the one real column */
    }
    vn_tensor *ts[] = {w, x, dy, dv, v};
    for (size_t i = 0; i < 5; i++) vn_tensor_release(ts[i]);
    vn_vnm_free(s);
}

static void expect_error(void *result, vn_status want, const char *needle)
{
    assert_null(result);
    assert_int_equal(vn_last_status(), want);
    if (!strstr(vn_last_error(), needle))
        fail_msg("error \"%s\" does not mention \"%s\"", vn_last_error(), needle);
}

/* ---- saving and restoring the pattern ------------------------------------------------- */

/* A matrix rebuilt from its columns and indices is the same matrix: same
 * dense form and the same products, on the very values tensor given. */
static void test_pattern_roundtrip(void **state)
{
    (void)state;
    int64_t R = 21, K = 45, V = 8, M = 6, G = 8;
    vn_tensor *w = trand(2, (int64_t[]){R, K}, -1, 1, 41);
    vn_vnm *s = vn_vnm_from_dense(w, V, 2, M);
    vn_tensor *cols = vn_vnm_columns(s), *idx = vn_vnm_indices(s), *values = vn_vnm_values(s);
    CHECK_PTR(cols);
    CHECK_PTR(idx);
    assert_int_equal(vn_tensor_dtype(cols), VN_I32);
    assert_int_equal(vn_tensor_shape(cols)[0], 3);
    assert_int_equal(vn_tensor_shape(cols)[1], G);
    assert_int_equal(vn_tensor_shape(cols)[2], 4);
    assert_int_equal(vn_tensor_shape(idx)[1], G / 2);
    vn_vnm *s2 = vn_vnm_from_pattern(R, K, V, 2, M, cols, idx, values);
    CHECK_PTR(s2);
    vn_tensor *v2 = vn_vnm_values(s2);
    assert_ptr_equal(v2, values);
    vn_tensor *d1 = vn_vnm_to_dense(s), *d2 = vn_vnm_to_dense(s2);
    assert_memory_equal(vn_tensor_data(d1), vn_tensor_data(d2), sizeof(float) * (size_t)(R * K));
    vn_tensor *x = trand(2, (int64_t[]){5, K}, -1, 1, 42);
    vn_tensor *y1 = vn_vnm_spmm(s, values, x), *y2 = vn_vnm_spmm(s2, values, x);
    assert_memory_equal(vn_tensor_data(y1), vn_tensor_data(y2), sizeof(float) * (size_t)(5 * R));

    /* Without values: zeros of the right shape. */
    vn_vnm *s3 = vn_vnm_from_pattern(R, K, V, 2, M, cols, idx, NULL);
    vn_tensor *v3 = vn_vnm_values(s3);
    assert_int_equal(vn_tensor_shape(v3)[1], 2 * G);
    assert_true(f32(v3)[0] == 0.0f);

    /* Corrupt arrays are refused with the entry named. */
    int32_t *c = vn_tensor_data(cols);
    int32_t keep = c[4 * 9 + 2];
    c[4 * 9 + 2] = c[4 * 9 + 1]; /* block 1, group 1: not ascending */
    expect_error(vn_vnm_from_pattern(R, K, V, 2, M, cols, idx, values), VN_ERR_ARG, "columns (1, 1)");
    c[4 * 9 + 2] = keep;
    keep = c[3];
    c[3] = 6; /* an offset past M − 1 */
    expect_error(vn_vnm_from_pattern(R, K, V, 2, M, cols, idx, values), VN_ERR_ARG, "0..5");
    c[3] = keep;
    uint8_t *ix = vn_tensor_data(idx);
    uint8_t byte = ix[2 * (G / 2) + 1];
    ix[2 * (G / 2) + 1] = (uint8_t)((byte & 0xf0) | 1 | 1 << 2); /* row 2, group 2: 1 and 1 */
    expect_error(vn_vnm_from_pattern(R, K, V, 2, M, cols, idx, values), VN_ERR_ARG,
                 "row 2, group 2 are 1 and 1");
    ix[2 * (G / 2) + 1] = byte;
    expect_error(vn_vnm_from_pattern(R, K, V, 2, 8, cols, idx, values), VN_ERR_SHAPE,
                 "columns of shape (3, 8, 4), expected (3, 6, 4)");
    expect_error(vn_vnm_from_pattern(R, K, V, 2, M, idx, cols, values), VN_ERR_DTYPE, "columns");
    expect_error(vn_vnm_from_pattern(R, K, V, 3, M, cols, idx, values), VN_ERR_ARG, "N=3");

    vn_tensor *ts[] = {w, cols, idx, values, v2, d1, d2, x, y1, y2, v3};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) vn_tensor_release(ts[i]);
    vn_vnm_free(s);
    vn_vnm_free(s2);
    vn_vnm_free(s3);
}

/* ---- bad input --------------------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    vn_tensor *w = trand(2, (int64_t[]){8, 16}, -1, 1, 31);
    expect_error(vn_vnm_from_dense(w, 4, 2, 3), VN_ERR_ARG, "M=3");
    expect_error(vn_vnm_from_dense(w, 0, 2, 8), VN_ERR_ARG, "V=0");
    expect_error(vn_vnm_from_dense(w, 4, 3, 8), VN_ERR_ARG, "N=3");
    expect_error(vn_vnm_from_dense(w, 4, 2, 32), VN_ERR_SHAPE, "16 columns, fewer than M=32");
    vn_tensor *w1 = vn_zeros(VN_F32, 1, (int64_t[]){16});
    expect_error(vn_vnm_from_dense(w1, 4, 2, 8), VN_ERR_SHAPE, "2-D");
    vn_tensor *wi = vn_zeros(VN_I32, 2, (int64_t[]){8, 16});
    expect_error(vn_vnm_from_dense(wi, 4, 2, 8), VN_ERR_DTYPE, "i32");

    f32(w)[3 * 16 + 5] = NAN;
    expect_error(vn_vnm_from_dense(w, 4, 2, 8), VN_ERR_ARG, "(3, 5) is nan");
    f32(w)[3 * 16 + 5] = -INFINITY;
    expect_error(vn_vnm_from_dense(w, 4, 2, 8), VN_ERR_ARG, "(3, 5) is -inf");
    f32(w)[3 * 16 + 5] = 0.5f;

    vn_vnm *s = vn_vnm_from_dense(w, 4, 2, 8);
    CHECK_PTR(s);
    vn_tensor *values = vn_vnm_values(s);
    vn_tensor *x = trand(2, (int64_t[]){3, 15}, -1, 1, 32);
    expect_error(vn_vnm_linear(x, s, values, NULL), VN_ERR_SHAPE, "has 15 features");
    expect_error(vn_vnm_spmm(s, values, x), VN_ERR_SHAPE, "expected 16");
    vn_tensor *x16 = trand(2, (int64_t[]){3, 16}, -1, 1, 33);
    vn_tensor *bad_v = vn_zeros(VN_F32, 2, (int64_t[]){8, 3});
    expect_error(vn_vnm_linear(x16, s, bad_v, NULL), VN_ERR_SHAPE, "expected (8, 4)");
    vn_tensor *bad_b = vn_zeros(VN_F32, 1, (int64_t[]){7});
    expect_error(vn_vnm_linear(x16, s, values, bad_b), VN_ERR_SHAPE, "bias of shape (7,), expected (8,)");
    expect_error(vn_vnm_linear(x16, NULL, values, NULL), VN_ERR_ARG, "NULL");
    vn_tensor *dy = trand(2, (int64_t[]){2, 8}, -1, 1, 34);
    expect_error(vn_vnm_sddmm(s, dy, x16), VN_ERR_SHAPE, "2 rows and the input 3");
    assert_int_equal(vn_vnm_stats(NULL, NULL), VN_ERR_ARG);
    vn_vnm_free(NULL);
    /* the pruning shadow's ops (values and gradients: tests/lua/test_shadow_op.lua) */
    expect_error(vn_vnm_shadow_linear(x16, NULL, w, NULL), VN_ERR_ARG, "NULL");
    expect_error(vn_vnm_shadow_linear(x16, s, NULL, NULL), VN_ERR_ARG, "weight");
    expect_error(vn_vnm_shadow_linear(NULL, s, w, NULL), VN_ERR_ARG, "input");
    expect_error(vn_vnm_shadow_linear(x16, s, values, NULL), VN_ERR_SHAPE, "expected (8, 16)");
    assert_int_equal(vn_vnm_shadow_decay(w, NULL, 0.1), VN_ERR_ARG);
    assert_int_equal(vn_vnm_shadow_decay(NULL, s, 0.1), VN_ERR_ARG);
    assert_int_equal(vn_vnm_shadow_decay(w, s, NAN), VN_ERR_ARG);

    vn_tensor *ts[] = {w, w1, wi, values, x, x16, bad_v, bad_b, dy};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) vn_tensor_release(ts[i]);
    vn_vnm_free(s);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compress),         cmocka_unit_test(test_compress_ties),
        cmocka_unit_test(test_stats_and_values), cmocka_unit_test(test_kernels_native),
        cmocka_unit_test(test_kernels_portable), cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_padding_gradient), cmocka_unit_test(test_pattern_roundtrip),
        cmocka_unit_test(test_errors),           cmocka_unit_test(test_bias_grad_panels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
