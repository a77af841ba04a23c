/* Dynamic activation sparsity (vn_act_sparse_linear): the condensed
 * product against a plain loop in double for random and clustered zeros,
 * all-zero and all-positive tiles, row counts that are not a multiple of
 * the tile, both activations, the condensed, mixed and dense paths; the
 * backward (dX, dW, db) against the loop too, and by finite differences
 * through the ReLU; the stats; the fused MLP, also with layers wide enough
 * for several chunks of kept columns per tile and on a variable-length
 * batch (a mask of padding rows); bad input. */
#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RANDOM, CLUSTERED, BLOCKS, PATTERNS };

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* x (rows × in): |x| in [0.1, 1] (so finite differences never cross the
 * kink), its sign by pattern: RANDOM positive with probability 0.3;
 * CLUSTERED positive only in a quarter of the columns of each tile (chosen
 * per tile), there with probability 0.5; BLOCKS random, except tile 1 all
 * negative (an all-zero block of H) and tile 2 all positive. */
static vn_tensor *make_x(int64_t rows, int64_t in, int64_t tile, int pattern, uint32_t seed)
{
    float *v = malloc(sizeof(float) * (size_t)(rows * in));
    char *alive = malloc((size_t)in);
    for (int64_t i = 0; i < rows; i++) {
        int64_t t = i / tile;
        if (i % tile == 0) {
            uint32_t ts = seed * 7919u + (uint32_t)t;
            for (int64_t j = 0; j < in; j++) alive[j] = lcg(&ts) % 4 == 0;
        }
        for (int64_t j = 0; j < in; j++) {
            float mag = 0.1f + 0.9f * (float)(lcg(&seed) % 1000) / 1000.0f;
            bool pos = lcg(&seed) % 10 < 3;
            if (pattern == CLUSTERED) pos = alive[j] && lcg(&seed) % 2;
            if (pattern == BLOCKS && t == 1) pos = false;
            if (pattern == BLOCKS && t == 2) pos = true;
            v[i * in + j] = pos ? mag : -mag;
        }
    }
    vn_tensor *x = tf32(2, (int64_t[]){rows, in}, v);
    free(v);
    free(alive);
    return x;
}

static double act_d(vn_sparse_act act, double x) { return x > 0 ? (act == VN_ACT_RELU2 ? x * x : x) : 0; }
static double dact_d(vn_sparse_act act, double x) { return x > 0 ? (act == VN_ACT_RELU2 ? 2 * x : 1) : 0; }

static const float *F(const vn_tensor *t) { return vn_tensor_data(t); }

/* Largest |a − ref| / (1 + max|ref|) over a (n) against ref in double. */
static double rel_err(const float *a, const double *ref, int64_t n)
{
    double scale = 1, worst = 0;
    for (int64_t k = 0; k < n; k++) scale = fmax(scale, fabs(ref[k]));
    for (int64_t k = 0; k < n; k++) worst = fmax(worst, fabs(a[k] - ref[k]) / scale);
    return worst;
}

/* Forward and backward against loops in double, for one configuration. */
static void check_against_loops(int64_t rows, int64_t in, int64_t out, int64_t tile, int pattern,
                                vn_sparse_act act, double dense_above)
{
    vn_tensor *x = make_x(rows, in, tile ? tile : VN_ACT_SPARSE_TILE_ROWS, pattern, 100u + (uint32_t)pattern);
    vn_tensor *w = trand(2, (int64_t[]){out, in}, -1, 1, 2), *b = trand(1, &out, -1, 1, 3);
    vn_tensor *r = trand(2, (int64_t[]){rows, out}, -1, 1, 4);
    CHECK_OK(vn_tensor_set_requires_grad(x, true));
    CHECK_OK(vn_tensor_set_requires_grad(w, true));
    CHECK_OK(vn_tensor_set_requires_grad(b, true));
    vn_act_sparse_stats st;
    vn_tensor *y = vn_act_sparse_linear(x, w, b, act, tile, dense_above, &st);
    CHECK_PTR(y);
    CHECK_OK(vn_backward(y, r));
    const float *X = F(x), *W = F(w), *B = F(b), *R = F(r);
    double *ref = calloc((size_t)(rows * (in > out ? in : out) + out * in), sizeof(double));
    /* y */
    int64_t nz = 0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t o = 0; o < out; o++) {
            double s = B[o];
            for (int64_t j = 0; j < in; j++) s += act_d(act, X[i * in + j]) * W[o * in + j];
            ref[i * out + o] = s;
        }
    for (int64_t k = 0; k < rows * in; k++) nz += X[k] > 0;
    double e = rel_err(F(y), ref, rows * out);
    if (e > 1e-5) fail_msg("y: pattern %d act %d tile %lld dense_above %g: error %g", pattern, act,
                           (long long)tile, dense_above, e);
    assert_true(fabs(st.density - (double)nz / (double)(rows * in)) < 1e-12);
    /* dX = (R·W) ⊙ act'(x) */
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < in; j++) {
            double s = 0;
            for (int64_t o = 0; o < out; o++) s += R[i * out + o] * W[o * in + j];
            ref[i * in + j] = s * dact_d(act, X[i * in + j]);
        }
    e = rel_err(F(vn_tensor_grad(x)), ref, rows * in);
    if (e > 1e-5) fail_msg("dx: pattern %d act %d: error %g", pattern, act, e);
    /* dW = Rᵀ·act(x), db = column sums of R */
    for (int64_t o = 0; o < out; o++)
        for (int64_t j = 0; j < in; j++) {
            double s = 0;
            for (int64_t i = 0; i < rows; i++) s += R[i * out + o] * act_d(act, X[i * in + j]);
            ref[o * in + j] = s;
        }
    e = rel_err(F(vn_tensor_grad(w)), ref, out * in);
    if (e > 1e-5) fail_msg("dw: pattern %d act %d: error %g", pattern, act, e);
    for (int64_t o = 0; o < out; o++) {
        ref[o] = 0;
        for (int64_t i = 0; i < rows; i++) ref[o] += R[i * out + o];
    }
    e = rel_err(F(vn_tensor_grad(b)), ref, out);
    if (e > 1e-5) fail_msg("db: error %g", e);
    free(ref);
    vn_tensor *all[5] = {x, w, b, r, y};
    for (int k = 0; k < 5; k++) vn_tensor_release(all[k]);
}

static void test_against_loops(void **state)
{
    (void)state;
    /* 45 rows: 5 full tiles of 8 and one of 5. dense_above 1 never runs
     * dense, 0.2 mixes condensed and dense tiles, 0 is the dense path. */
    const double modes[] = {1.0, 0.2, 0.0, -1};
    for (int p = 0; p < PATTERNS; p++)
        for (int a = VN_ACT_RELU; a <= VN_ACT_RELU2; a++)
            for (size_t m = 0; m < sizeof modes / sizeof *modes; m++)
                check_against_loops(45, 37, 19, 8, p, (vn_sparse_act)a, modes[m]);
    check_against_loops(3, 37, 19, 64, RANDOM, VN_ACT_RELU, 1.0); /* fewer rows than a tile */
    check_against_loops(130, 64, 33, 0, CLUSTERED, VN_ACT_RELU2, -1); /* the default tile */
    /* out = 1100: the forward gathers W's kept columns 238 at a time
     * (act__chunk), and a tile keeps about 940 of the 1000 */
    check_against_loops(45, 1000, 1100, 8, RANDOM, VN_ACT_RELU, 1.0);
}

/* The kept share of (tile, column) pairs of x over the tiles t with
 * (t % 8 == 0) == sample, or over all tiles (all). */
static double kept_share(const float *X, int64_t rows, int64_t in, int64_t tile, bool all, bool sample)
{
    int64_t kept = 0, pairs = 0;
    for (int64_t t = 0; t * tile < rows; t++) {
        if (!all && (t % 8 == 0) != sample) continue;
        for (int64_t j = 0; j < in; j++) {
            bool any = false;
            for (int64_t i = t * tile; i < (t + 1) * tile && i < rows; i++) any |= X[i * in + j] > 0;
            kept += any;
        }
        pairs += in;
    }
    return (double)kept / (double)pairs;
}

/* The stats and paths: the kept share of (tile, column) pairs against a
 * count, and the dense path taken exactly when the sample's share (tiles
 * 0 and 8 of 10) or else the share of all tiles is above the threshold;
 * the density exact either way. */
static void test_stats(void **state)
{
    (void)state;
    int64_t rows = 76, in = 32, tile = 8, nz = 0;
    vn_tensor *x = make_x(rows, in, tile, CLUSTERED, 9), *w = trand(2, (int64_t[]){5, in}, -1, 1, 1);
    const float *X = F(x);
    for (int64_t k = 0; k < rows * in; k++) nz += X[k] > 0;
    double density = (double)nz / (double)(rows * in);
    double full = kept_share(X, rows, in, tile, true, false);
    double sample = kept_share(X, rows, in, tile, false, true);
    if (fabs(full - sample) < 0.02) fail_msg("the test's x should tell the sample from the whole: %g, %g",
                                             sample, full);
    struct { double dense_above, tile_density; bool dense; } cases[] = {
        {fmax(full, sample) + 0.01, full, false},             /* condensed: every tile read */
        {fmin(full, sample) - 0.01, sample, true},             /* the sample alone decides */
        {0.5 * (full + sample), full > sample ? full : sample, true}, /* one of the two is above */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        vn_act_sparse_stats st;
        vn_tensor *y = vn_act_sparse_linear(x, w, NULL, VN_ACT_RELU, tile, cases[c].dense_above, &st);
        CHECK_PTR(y);
        if (fabs(st.tile_density - cases[c].tile_density) > 1e-12 || st.dense != cases[c].dense ||
            fabs(st.density - density) > 1e-12)
            fail_msg("case %zu: tile_density %g dense %d density %g, expected %g %d %g", c, st.tile_density,
                     st.dense, st.density, cases[c].tile_density, cases[c].dense, density);
        vn_tensor_release(y);
    }
    vn_tensor_release(x);
    vn_tensor_release(w);
}

typedef struct { vn_sparse_act act; double dense_above; } ctx_t;

static vn_tensor *f_op(vn_tensor **in, void *c)
{
    const ctx_t *k = c;
    return vn_act_sparse_linear(in[0], in[1], in[2], k->act, 4, k->dense_above, NULL);
}

/* Finite differences through the ReLU (and ReLU²), condensed and dense,
 * with an input of 3 dims (2 × 5 rows: tiles of 4, the last of 2). */
static void test_gradcheck(void **state)
{
    (void)state;
    vn_tensor *x0 = make_x(10, 9, 4, BLOCKS, 5);
    vn_tensor *x = vn_reshape(x0, 3, (int64_t[]){2, 5, 9});
    vn_tensor *in[3] = {x, trand(2, (int64_t[]){6, 9}, -1, 1, 6), trand(1, (int64_t[]){6}, -1, 1, 7)};
    for (int k = 0; k < 3; k++) CHECK_OK(vn_tensor_set_requires_grad(in[k], true));
    for (int a = VN_ACT_RELU; a <= VN_ACT_RELU2; a++)
        for (int d = 0; d < 2; d++) {
            ctx_t c = {(vn_sparse_act)a, d ? 0.0 : 1.0};
            gradcheck(f_op, in, 3, &c, 1e-2, 1e-3);
        }
    for (int k = 0; k < 3; k++) vn_tensor_release(in[k]);
    vn_tensor_release(x0);
}


/* ---- the fused MLP ---------------------------------------------------------------------- */

enum { MD = 13, MH = 29, MO = 7, MROWS = 45, MTILE = 8 };

/* Inputs whose hidden layer Z = X·W1ᵀ + b1 has clustered zeros: b1 keeps a
 * third of the columns alive; column 0 of X makes tile 2 all positive,
 * column 1 tile 1 all negative (an all-zero tile of H). */
static void make_mlp(vn_tensor **in)
{
    float x[MROWS * MD], w1[MH * MD], b1[MH];
    uint32_t s = 77;
    for (int i = 0; i < MROWS * MD; i++) x[i] = (float)(lcg(&s) % 2000) / 1000.0f - 1.0f;
    for (int i = 0; i < MH * MD; i++) w1[i] = (float)(lcg(&s) % 300) / 1000.0f - 0.15f;
    for (int j = 0; j < MH; j++) {
        b1[j] = j % 3 ? -1.0f : 0.5f;
        w1[j * MD] = w1[j * MD + 1] = 1;
    }
    for (int i = 0; i < MROWS; i++) {
        x[i * MD] = i / MTILE == 2 ? 3.0f : 0.0f;
        x[i * MD + 1] = i / MTILE == 1 ? -3.0f : 0.0f;
    }
    in[0] = tf32(2, (int64_t[]){MROWS, MD}, x);
    in[1] = tf32(2, (int64_t[]){MH, MD}, w1);
    in[2] = trand(2, (int64_t[]){MO, MH}, -1, 1, 8);
    in[3] = tf32(1, (int64_t[]){MH}, b1);
    in[4] = trand(1, (int64_t[]){MO}, -1, 1, 9);
    for (int k = 0; k < 5; k++) CHECK_OK(vn_tensor_set_requires_grad(in[k], true));
}

/* The same MLP from the plain ops: linear, relu (squared), linear. */
static vn_tensor *plain_mlp(vn_tensor **in, vn_sparse_act act)
{
    vn_tensor *z = vn_linear(in[0], in[1], in[3]), *h = z ? vn_relu(z) : NULL;
    vn_tensor *h2 = h && act == VN_ACT_RELU2 ? vn_mul(h, h) : NULL;
    vn_tensor *y = h ? vn_linear(act == VN_ACT_RELU2 ? h2 : h, in[2], in[4]) : NULL;
    vn_tensor_release(z);
    vn_tensor_release(h);
    vn_tensor_release(h2);
    return y;
}

/* The fused MLP on in (x, w1, w2, b1, b2) against the plain ops: y and
 * all five gradients under the upstream gradient r, within 1e-5. */
static void mlp_vs_plain(vn_tensor **in, const vn_tensor *r, vn_sparse_act act, int64_t tile, double dense_above,
                         vn_act_sparse_stats *st)
{
    vn_tensor *grads[2][5], *ys[2];
    for (int pass = 0; pass < 2; pass++) {
        vn_tensor *y = pass ? plain_mlp(in, act)
                            : vn_act_sparse_mlp(in[0], in[1], in[3], in[2], in[4], act, tile, dense_above, st);
        CHECK_PTR(y);
        CHECK_OK(vn_backward(y, r));
        ys[pass] = y;
        for (int k = 0; k < 5; k++) {
            grads[pass][k] = vn_clone(vn_tensor_grad(in[k]));
            CHECK_OK(vn_tensor_set_grad(in[k], NULL));
        }
    }
    double e = max_rel_diff(ys[0], ys[1]);
    if (e > 1e-5) fail_msg("mlp act %d dense_above %g: y differs by %g", act, dense_above, e);
    for (int k = 0; k < 5; k++) {
        e = max_rel_diff(grads[0][k], grads[1][k]);
        if (e > 1e-5) fail_msg("mlp act %d dense_above %g: input %d's gradient differs by %g", act, dense_above,
                               k, e);
        vn_tensor_release(grads[0][k]);
        vn_tensor_release(grads[1][k]);
    }
    vn_tensor_release(ys[0]);
    vn_tensor_release(ys[1]);
}

/* Output and all five gradients against the plain ops' (themselves
 * checked against finite differences in their own tests), condensed,
 * mixed and dense, both activations; then the tile stats. */
static void test_mlp_against_plain(void **state)
{
    (void)state;
    const double modes[] = {1.0, 0.4, 0.0};
    vn_tensor *in[5];
    make_mlp(in);
    vn_tensor *r = trand(2, (int64_t[]){MROWS, MO}, -1, 1, 10);
    for (int a = VN_ACT_RELU; a <= VN_ACT_RELU2; a++)
        for (size_t m = 0; m < 3; m++) {
            vn_act_sparse_stats st;
            mlp_vs_plain(in, r, (vn_sparse_act)a, MTILE, modes[m], &st);
            assert_int_equal(st.dense, modes[m] == 0.0);
            assert_true(st.tile_density < 0.5); /* the clustered zeros were found */
        }
    /* The output itself, against the plain ops, condensed. */
    vn_tensor *y = vn_act_sparse_mlp(in[0], in[1], NULL, in[2], NULL, VN_ACT_RELU2, MTILE, 1.0, NULL);
    vn_tensor *z = vn_linear(in[0], in[1], NULL), *h = vn_relu(z), *h2 = vn_mul(h, h);
    vn_tensor *ref = vn_linear(h2, in[2], NULL);
    CHECK_PTR(y);
    assert_true(max_rel_diff(y, ref) < 1e-5);
    vn_tensor *all[6] = {y, z, h, h2, ref, r};
    for (int k = 0; k < 6; k++) vn_tensor_release(all[k]);
    for (int k = 0; k < 5; k++) vn_tensor_release(in[k]);
}

/* Wide layers, so that a tile's kept columns go through the products in
 * several chunks (act__chunk: 238 rows of W1 at d = 1100, 174 of W2ᵀ at
 * out = 1500): 300 rows in tiles of 128 (the last of 44), 600 hidden
 * units. Z's sign is set per tile: unit j can be positive in tile t only
 * if it is in A_t (then for about half the rows), where A_0 = even j <
 * 560 (280 units: 2 chunks), A_1 = j < 590 (590: 3–4 chunks, or a dense
 * tile at dense_above 0.65, between two condensed ones), A_2 = j % 5 == 1,
 * j < 560 (112); units 590–599 are zero everywhere (their rows of dW1,
 * dW2ᵀ must come out exactly 0, never written by a tile). Condensed,
 * mixed and dense, both activations, against the plain ops. */
static void test_mlp_chunks(void **state)
{
    (void)state;
    enum { R = 300, D = 1100, HID = 600, O = 1500, TILE = 128 };
    float *x = malloc(sizeof(float) * R * D), *w1 = malloc(sizeof(float) * HID * D);
    uint32_t s = 5;
    for (int i = 0; i < R * D; i++) x[i] = 0.01f * ((float)(lcg(&s) % 2000) / 1000.0f - 1.0f);
    for (int i = 0; i < HID * D; i++) w1[i] = 0.05f * ((float)(lcg(&s) % 2000) / 1000.0f - 1.0f);
    for (int i = 0; i < R; i++) {
        for (int t = 0; t < 3; t++) x[i * D + t] = i / TILE == t ? 1.0f : 0.0f;
        x[i * D + 3] = lcg(&s) % 2 ? 1.0f : -1.0f;
    }
    for (int j = 0; j < HID; j++) {
        bool a[3] = {j % 2 == 0 && j < 560, j < 590, j % 5 == 1 && j < 560};
        for (int t = 0; t < 3; t++) w1[j * D + t] = a[t] ? 0.2f : -0.3f; /* in A_t: 0.2 ± 0.25, else −0.3 ± 0.25 */
        w1[j * D + 3] = 0.25f;
    }
    vn_tensor *in[5] = {tf32(2, (int64_t[]){R, D}, x), tf32(2, (int64_t[]){HID, D}, w1),
                        trand(2, (int64_t[]){O, HID}, -0.1, 0.1, 21), trand(1, (int64_t[]){HID}, -0.01, 0.01, 22),
                        trand(1, (int64_t[]){O}, -1, 1, 23)};
    for (int k = 0; k < 5; k++) CHECK_OK(vn_tensor_set_requires_grad(in[k], true));
    vn_tensor *r = trand(2, (int64_t[]){R, O}, -1, 1, 24);
    const double modes[] = {1.0, 0.65, 0.0};
    for (int a = VN_ACT_RELU; a <= VN_ACT_RELU2; a++)
        for (size_t m = 0; m < 3; m++) {
            vn_act_sparse_stats st;
            mlp_vs_plain(in, r, (vn_sparse_act)a, TILE, modes[m], &st);
            assert_int_equal(st.dense, modes[m] == 0.0);
            if (modes[m] > 0) /* 280 + 590 + 112 of 3 × 600 pairs */
                assert_true(fabs(st.tile_density - 982.0 / 1800.0) < 1e-12);
            /* the dead units' gradient rows: exactly 0 */
            vn_tensor *y = vn_act_sparse_mlp(in[0], in[1], in[3], in[2], in[4], (vn_sparse_act)a, TILE, modes[m],
                                             NULL);
            CHECK_PTR(y);
            CHECK_OK(vn_backward(y, r));
            const float *dw1 = vn_tensor_data(vn_tensor_grad(in[1])), *dw2 = vn_tensor_data(vn_tensor_grad(in[2]));
            for (int j = 590; j < HID; j++) {
                for (int c = 0; c < D; c++) assert_true(dw1[j * D + c] == 0.0f);
                for (int o = 0; o < O; o++) assert_true(dw2[o * HID + j] == 0.0f);
            }
            for (int k = 0; k < 5; k++) CHECK_OK(vn_tensor_set_grad(in[k], NULL));
            vn_tensor_release(y);
        }
    for (int k = 0; k < 5; k++) vn_tensor_release(in[k]);
    vn_tensor_release(r);
    free(x);
    free(w1);
}

/* Nothing to condense: every unit off in every tile (b1 far below Z), and
 * a batch that is all padding (no real row). No tile writes a weight
 * gradient, so all of them come from the final fill: y = b2 (or 0 for
 * padding), and dX, dW1, dW2, db1 exactly 0 (db2 the column sums of r, or
 * 0 for padding). */
static void test_mlp_nothing_kept(void **state)
{
    (void)state;
    vn_tensor *in[5];
    make_mlp(in);
    float *b1 = vn_tensor_data(in[3]);
    for (int j = 0; j < MH; j++) b1[j] = -100.0f;
    vn_tensor *r = trand(2, (int64_t[]){MROWS, MO}, -1, 1, 12);
    vn_tensor *none = vn_zeros(VN_U8, 1, (int64_t[]){MROWS});
    for (int padded = 0; padded < 2; padded++) {
        vn_act_sparse_stats st;
        vn_tensor *y = vn_act_sparse_mlp_masked(in[0], in[1], in[3], in[2], in[4], padded ? none : NULL,
                                                VN_ACT_RELU, MTILE, 1.0, &st);
        CHECK_PTR(y);
        CHECK_OK(vn_backward(y, r));
        const float *Y = vn_tensor_data(y), *B2 = vn_tensor_data(in[4]), *R = vn_tensor_data(r);
        for (int i = 0; i < MROWS; i++)
            for (int o = 0; o < MO; o++) assert_true(Y[i * MO + o] == (padded ? 0.0f : B2[o]));
        for (int k = 0; k < 4; k++) {
            const float *g = vn_tensor_data(vn_tensor_grad(in[k]));
            for (int64_t e = 0; e < vn_tensor_numel(in[k]); e++)
                if (g[e] != 0.0f) fail_msg("padded %d: input %d's gradient [%lld] = %g, expected 0", padded, k,
                                           (long long)e, g[e]);
        }
        const float *db2 = vn_tensor_data(vn_tensor_grad(in[4]));
        for (int o = 0; o < MO; o++) {
            double sum = 0;
            for (int i = 0; i < MROWS; i++) sum += R[i * MO + o];
            assert_true(fabs(db2[o] - (padded ? 0.0 : sum)) < 1e-5);
        }
        if (!padded) assert_true(st.tile_density == 0.0 && !st.dense);
        for (int k = 0; k < 5; k++) CHECK_OK(vn_tensor_set_grad(in[k], NULL));
        vn_tensor_release(y);
    }
    vn_tensor_release(none);
    vn_tensor_release(r);
    for (int k = 0; k < 5; k++) vn_tensor_release(in[k]);
}

/* A NaN pre-activation reaches the output, as through the dense relu
 * (which keeps NaN): all units off but one whose bias is NaN, on the
 * condensed path (dense_above 1) and the dense one (0, taken as soon as a
 * column is kept), both activations: every output is NaN, not b2. */
static void test_mlp_nan(void **state)
{
    (void)state;
    vn_tensor *in[5];
    make_mlp(in);
    float *b1 = vn_tensor_data(in[3]);
    for (int j = 0; j < MH; j++) b1[j] = -100.0f;
    b1[MH / 2] = NAN;
    for (int c = 0; c < 4; c++) {
        vn_sparse_act act = c % 2 ? VN_ACT_RELU2 : VN_ACT_RELU;
        double dense_above = c < 2 ? 1.0 : 0.0;
        vn_tensor *y = vn_act_sparse_mlp(in[0], in[1], in[3], in[2], in[4], act, MTILE, dense_above, NULL);
        CHECK_PTR(y);
        const float *Y = vn_tensor_data(y);
        for (int64_t e = 0; e < vn_tensor_numel(y); e++)
            if (!isnan(Y[e])) fail_msg("act %d, dense_above %g: y[%lld] = %g, expected NaN", (int)act,
                                       dense_above, (long long)e, Y[e]);
        vn_tensor_release(y);
    }
    for (int k = 0; k < 5; k++) vn_tensor_release(in[k]);
}

static vn_tensor *f_mlp(vn_tensor **in, void *c)
{
    const ctx_t *k = c;
    return vn_act_sparse_mlp(in[0], in[1], in[3], in[2], in[4], k->act, MTILE, k->dense_above, NULL);
}

/* Finite differences through the fused MLP (x, w1, w2, b1, b2). */
static void test_mlp_gradcheck(void **state)
{
    (void)state;
    vn_tensor *in[5];
    make_mlp(in);
    /* 20 rows (tiles 0 random, 1 all zero, 2 all positive and short): a
     * smaller sum, so f32 differences keep their digits */
    vn_tensor *part = vn_narrow(in[0], 0, 0, 20), *copy = vn_clone(part);
    vn_tensor_release(in[0]);
    in[0] = vn_detach(copy);
    vn_tensor_release(part);
    vn_tensor_release(copy);
    CHECK_OK(vn_tensor_set_requires_grad(in[0], true));
    for (int a = VN_ACT_RELU; a <= VN_ACT_RELU2; a++) {
        ctx_t c = {(vn_sparse_act)a, 1.0};
        gradcheck(f_mlp, in, 5, &c, 1e-3, 5e-3); /* f32: eps 1e-3 stays off the kinks */
    }
    for (int k = 0; k < 5; k++) vn_tensor_release(in[k]);
}

/* A variable-length batch: x (5, 9, MD) with a mask of real rows (per
 * sequence a length, 0 to 9, padding after; the padding rows of x hold
 * large positive values, which would widen every tile were they counted).
 * The masked op against the plain MLP on the real rows alone, scattered
 * back (index_select, then scatter_add_rows): y, all five gradients, zero
 * y and dX rows at the padding, stats over the real rows. */
static void test_mlp_masked(void **state)
{
    (void)state;
    vn_tensor *in[5];
    make_mlp(in);
    const int B = 5, T = 9, len[5] = {9, 0, 4, 7, 1};
    uint8_t m[45];
    int64_t idx[45], n = 0;
    float *X = vn_tensor_data(in[0]);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            m[b * T + t] = t < len[b];
            if (t < len[b]) idx[n++] = b * T + t;
            else for (int j = 0; j < MD; j++) X[(b * T + t) * MD + j] = 50.0f; /* padding: garbage */
        }
    vn_tensor *mask = vn_from_data(VN_U8, 2, (int64_t[]){B, T}, m), *keep = vn_from_data(VN_I64, 1, &n, idx);
    vn_tensor *x3 = vn_reshape(in[0], 3, (int64_t[]){B, T, MD});
    vn_tensor *r = trand(3, (int64_t[]){B, T, MO}, -1, 1, 11);
    vn_tensor *r2 = vn_reshape(r, 2, (int64_t[]){MROWS, MO});
    CHECK_PTR(mask);
    CHECK_PTR(keep);
    for (int a = VN_ACT_RELU; a <= VN_ACT_RELU2; a++)
        for (int dense = 0; dense < 2; dense++) {
            vn_tensor *grads[2][5], *ys[2];
            vn_act_sparse_stats st;
            double density = 0;
            for (int pass = 0; pass < 2; pass++) {
                vn_tensor *y;
                if (pass == 0) {
                    vn_tensor *xv = vn_reshape(in[0], 3, (int64_t[]){B, T, MD}); /* a fresh graph each time */
                    y = vn_act_sparse_mlp_masked(xv, in[1], in[3], in[2], in[4], mask, (vn_sparse_act)a, MTILE,
                                                 dense ? 0.0 : 1.0, &st);
                    CHECK_PTR(y);
                    CHECK_OK(vn_backward(y, r));
                    vn_tensor_release(xv);
                } else { /* the real rows alone through the plain ops */
                    vn_tensor *xr = vn_index_select(in[0], 0, keep), *sub[5] = {xr, in[1], in[2], in[3], in[4]};
                    vn_tensor *yr = plain_mlp(sub, (vn_sparse_act)a), *z = vn_linear(xr, in[1], in[3]);
                    int64_t pos = 0;
                    for (int64_t k = 0; k < n * MH; k++) pos += ((const float *)vn_tensor_data(z))[k] > 0;
                    density = (double)pos / (double)(n * MH);
                    vn_tensor_release(z);
                    y = vn_scatter_add_rows(yr, keep, NULL, MROWS);
                    CHECK_PTR(y);
                    CHECK_OK(vn_backward(y, r2));
                    vn_tensor_release(xr);
                    vn_tensor_release(yr);
                }
                ys[pass] = vn_reshape(y, 2, (int64_t[]){MROWS, MO});
                vn_tensor_release(y);
                for (int k = 0; k < 5; k++) {
                    grads[pass][k] = vn_clone(vn_tensor_grad(in[k]));
                    CHECK_OK(vn_tensor_set_grad(in[k], NULL));
                }
            }
            if (max_rel_diff(ys[0], ys[1]) > 1e-5) fail_msg("masked y act %d dense %d", a, dense);
            for (int k = 0; k < 5; k++) {
                double e = max_rel_diff(grads[0][k], grads[1][k]);
                if (e > 1e-5)
                    fail_msg("masked act %d dense %d: input %d's gradient differs by %g", a, dense, k, e);
                vn_tensor_release(grads[0][k]);
                vn_tensor_release(grads[1][k]);
            }
            const float *Y = vn_tensor_data(ys[0]);
            for (int64_t i = 0; i < MROWS; i++) /* exact zeros, not merely close to the reference */
                for (int o = 0; o < MO; o++) if (!m[i]) assert_true(Y[i * MO + o] == 0.0f);
            assert_int_equal(st.dense, dense);
            if (fabs(st.density - density) > 1e-12) /* over the real rows: padding Z is all positive */
                fail_msg("masked density %g, expected %g", st.density, density);
            vn_tensor_release(ys[0]);
            vn_tensor_release(ys[1]);
        }
    vn_tensor *bad = vn_zeros(VN_F32, 2, (int64_t[]){B, T}), *bad2 = vn_zeros(VN_U8, 1, (int64_t[]){MROWS});
    expect_null_error(vn_act_sparse_mlp_masked(x3, in[1], in[3], in[2], in[4], bad, VN_ACT_RELU, 0, -1, NULL),
                      VN_ERR_DTYPE, "mask must be u8");
    expect_null_error(vn_act_sparse_mlp_masked(x3, in[1], in[3], in[2], in[4], bad2, VN_ACT_RELU, 0, -1, NULL),
                      VN_ERR_SHAPE, "mask (45,) must have the input's leading dims");
    vn_tensor *all[7] = {mask, keep, x3, r, r2, bad, bad2};
    for (int k = 0; k < 7; k++) vn_tensor_release(all[k]);
    for (int k = 0; k < 5; k++) vn_tensor_release(in[k]);
}

static void test_errors(void **state)
{
    (void)state;
    vn_tensor *x = trand(2, (int64_t[]){4, 6}, -1, 1, 1), *w = trand(2, (int64_t[]){3, 6}, -1, 1, 2);
    vn_tensor *w5 = trand(2, (int64_t[]){3, 5}, -1, 1, 3), *b = trand(1, (int64_t[]){4}, -1, 1, 4);
    vn_tensor *xi = vn_zeros(VN_I32, 2, (int64_t[]){4, 6}), *w1 = trand(1, (int64_t[]){6}, -1, 1, 5);
    expect_null_error(vn_act_sparse_linear(x, w5, NULL, VN_ACT_RELU, 0, -1, NULL), VN_ERR_SHAPE,
                 "expected 2-d (out, the input's last dim = 6)");
    expect_null_error(vn_act_sparse_linear(x, w1, NULL, VN_ACT_RELU, 0, -1, NULL), VN_ERR_SHAPE, "2-d");
    expect_null_error(vn_act_sparse_linear(x, w, b, VN_ACT_RELU, 0, -1, NULL), VN_ERR_SHAPE,
                 "bias of shape (4,), expected (3)");
    expect_null_error(vn_act_sparse_linear(xi, w, NULL, VN_ACT_RELU, 0, -1, NULL), VN_ERR_DTYPE, "input");
    expect_null_error(vn_act_sparse_linear(x, w, NULL, (vn_sparse_act)9, 0, -1, NULL), VN_ERR_ARG,
                 "activation 9");
    expect_null_error(vn_act_sparse_linear(x, w, NULL, VN_ACT_RELU, 0, 1.5, NULL), VN_ERR_ARG,
                 "dense_above 1.5");
    expect_null_error(vn_act_sparse_linear(x, w, NULL, VN_ACT_RELU, 0, NAN, NULL), VN_ERR_ARG, "dense_above");
    expect_null_error(vn_act_sparse_linear(NULL, w, NULL, VN_ACT_RELU, 0, -1, NULL), VN_ERR_ARG, "NULL");
    expect_null_error(vn_act_sparse_mlp(x, w, NULL, w5, NULL, VN_ACT_RELU, 0, -1, NULL), VN_ERR_SHAPE,
                 "w2 of shape (3, 5), expected 2-d (out, hidden, w1's rows = 3)");
    expect_null_error(vn_act_sparse_mlp(x, w, b, w, NULL, VN_ACT_RELU, 0, -1, NULL), VN_ERR_SHAPE,
                 "b1 of shape (4,), expected (3)");
    vn_tensor *all[6] = {x, w, w5, b, xi, w1};
    for (int k = 0; k < 6; k++) vn_tensor_release(all[k]);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_loops), cmocka_unit_test(test_stats),
        cmocka_unit_test(test_gradcheck),     cmocka_unit_test(test_mlp_against_plain),
        cmocka_unit_test(test_mlp_chunks),    cmocka_unit_test(test_mlp_nothing_kept), cmocka_unit_test(test_mlp_nan),
        cmocka_unit_test(test_mlp_gradcheck),
        cmocka_unit_test(test_mlp_masked),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
