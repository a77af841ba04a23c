/* dynamic_sparsity — the MLP Y = relu(X·W1ᵀ + b1)·W2ᵀ + b2 (d = 1024 →
 * 4096 → 1024, 2048 tokens), forward + backward (dX, dW1, db1, dW2, db2),
 * at a range of activation sparsities: the plain dense ops (vn_linear,
 * vn_relu, vn_linear: OpenBLAS sgemm) against the fused activation-sparse
 * MLP (vn_act_sparse_mlp) with its dense fallback ("auto") and forced to
 * condense every tile ("condensed", dense_above = 1), alternated in the
 * same run (dense, auto, condensed, dense, ...). A table, never a
 * pass/fail.
 *
 * The zeros: X and W1 are drawn once, and b1 = −(the quantile of
 * Z0 = X·W1ᵀ at 1 − density) sets the share of positive Z, so the same
 * weights serve every row.
 *   random     X ~ N(0, 1), W1 ~ N(0, 1/d): the signs of Z are close to
 *              independent, the zeros scattered (worst case: few columns
 *              are zero in a whole tile);
 *   clustered  the tokens come in segments of 128 (a document, a topic):
 *              X = u_segment + 0.3·noise, so a segment's tokens share most
 *              of their active hidden units;
 *   aligned    the same with 0.05·noise: the zeros nearly aligned to the
 *              segments, so the kept share approaches the density (the
 *              best case of the tile index; what the design can reach);
 *   gpt        (--real FILE) the zeros of a trained ReLU² GPT: FILE holds
 *              each block's MLP input and fc layer on a validation batch
 *              (bench/gpt_activations.lua writes it); its hidden units
 *              are repeated to fill the 4096 (see bench_real).
 * Columns: density (share of positive Z), kept (share of (tile, column)
 * pairs with a positive Z: the share of the product's work done), the
 * median wall-clock ms of each variant (min–max spread) and the speedups
 * over dense, then the same in CPU time of the process (all threads: on a
 * shared, oversubscribed machine the wall clock measures the scheduler as
 * much as the code), and "index ms", the pass that builds the index (a
 * part of auto's time; a sample of the tiles first, so on a row that runs
 * dense only the sample is read). On a row that ran dense, "kept" is the
 * sample's share (see vn_act_sparse_stats).
 *
 *   OMP_WAIT_POLICY=passive build/bench/dynamic_sparsity [--reps 3]
 *       [--sparsity 0,50,70,80,90,95,99] [--patterns random,clustered[,aligned]]
 *       [--tile 64] [--tokens 2048] [--real relu2-mlp.st]
 *
 * --patterns "" with --real runs the gpt rows alone.
 * --tile sets the micro-tile height of the sparse variants (default: the
 * engine's VN_ACT_SPARSE_TILE_ROWS). */
#define BENCH_NAME "dynamic_sparsity"
#include "bench.h"

#include "act_sparse_internal.h"

#include <math.h>
#include <omp.h>
#include <string.h>

enum { D = 1024, HID = 4096 };

typedef struct {
    int reps, tile;
    int64_t tokens;
    char sparsity[256], patterns[256], real[512];
} options;

static options parse_args(int argc, char **argv)
{
    options o = {3, VN_ACT_SPARSE_TILE_ROWS, 2048, "0,50,70,80,90,95,99", "random,clustered", ""};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--reps")) o.reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tile")) o.tile = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tokens")) o.tokens = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--sparsity")) snprintf(o.sparsity, sizeof o.sparsity, "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--patterns")) snprintf(o.patterns, sizeof o.patterns, "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--real")) snprintf(o.real, sizeof o.real, "%s", argv[i + 1]);
        else {
            fprintf(stderr, "%s: unknown option %s\n", BENCH_NAME, argv[i]);
            exit(2);
        }
    }
    if (o.reps < 1 || o.tile < 1 || o.tokens < 1) {
        fprintf(stderr, "%s: --reps, --tile and --tokens must be >= 1\n", BENCH_NAME);
        exit(2);
    }
    return o;
}

static vn_tensor *param(vn_tensor *t)
{
    if (!t || vn_tensor_set_requires_grad(t, true)) die("parameter");
    return t;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* X (tokens × D) for a pattern: N(0, 1) noise, or, with a noise factor
 * (clustered 0.3, aligned 0.05), a per-segment vector plus noise·N(0, 1). */
static vn_tensor *make_x(int64_t tokens, float noise)
{
    bool clustered = noise > 0;
    int64_t xs[2] = {tokens, D}, us[2] = {(tokens + 127) / 128, D};
    vn_tensor *x = vn_randn(2, xs), *u = clustered ? vn_randn(2, us) : NULL;
    if (!x || (clustered && !u)) die("make_x");
    if (clustered) {
        float *px = vn_tensor_data(x);
        const float *pu = vn_tensor_data(u);
        for (int64_t i = 0; i < tokens; i++)
            for (int64_t j = 0; j < D; j++) px[i * D + j] = pu[(i / 128) * D + j] + noise * px[i * D + j];
    }
    vn_tensor_release(u);
    return x;
}

/* b1 = −q with q the (1 − density) quantile of X·W1ᵀ (from 2^20 samples). */
static void set_bias(vn_tensor *b1, const vn_tensor *z0, double density)
{
    int64_t n = vn_tensor_numel(z0), ns = 1 << 20;
    const float *z = vn_tensor_data(z0);
    float *s = malloc(sizeof(float) * (size_t)ns), q;
    for (int64_t k = 0; k < ns; k++) s[k] = z[(k * 2654435761LL) % n];
    qsort(s, (size_t)ns, sizeof(float), cmp_float);
    int64_t at = (int64_t)((1 - density) * (double)ns);
    q = density <= 0 ? s[ns - 1] + 1 : at >= ns ? s[0] - 1 : s[at];
    free(s);
    float *pb = vn_tensor_data(b1);
    for (int j = 0; j < HID; j++) pb[j] = -q;
}

typedef struct { vn_tensor *x, *w1, *b1, *w2, *b2, *dy; } mlp;

static void clear_grads(mlp *m)
{
    vn_tensor *ps[5] = {m->x, m->w1, m->b1, m->w2, m->b2};
    for (int k = 0; k < 5; k++)
        if (vn_tensor_set_grad(ps[k], NULL)) die("clear grads");
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One forward + backward; variant 0 dense ops, 1 auto, 2 condensed.
 * Returns wall seconds, *cpu the process's CPU seconds; *st gets the
 * sparse op's stats. */
static double step(mlp *m, int variant, int tile, vn_act_sparse_stats *st, double *cpu)
{
    clear_grads(m);
    double t0 = now(), c0 = cpu_now();
    vn_tensor *y;
    if (variant == 0) {
        vn_tensor *z = vn_linear(m->x, m->w1, m->b1), *h = z ? vn_relu(z) : NULL;
        y = h ? vn_linear(h, m->w2, m->b2) : NULL;
        vn_tensor_release(z);
        vn_tensor_release(h);
    } else {
        y = vn_act_sparse_mlp(m->x, m->w1, m->b1, m->w2, m->b2, VN_ACT_RELU, tile,
                              variant == 2 ? 1.0 : -1.0, st);
    }
    if (!y || vn_backward(y, m->dy)) die(variant ? "act_sparse_mlp" : "dense mlp");
    vn_tensor_release(y);
    *cpu = cpu_now() - c0;
    return now() - t0;
}

/* The index pass alone on Z = X·W1ᵀ + b1 (precomputed). */
static double index_time(const vn_tensor *z, int64_t tokens, int tile)
{
    act_index ix = {.rows = tokens, .in = HID, .out = D, .act = VN_ACT_RELU};
    double t0 = now();
    vn_tensor *index = act__index(&ix, vn_tensor_data(z), tile, VN_ACT_SPARSE_DENSE_ABOVE, NULL);
    double t = now() - t0;
    if (!index) die("index");
    vn_tensor_release(index);
    return t;
}

static void scale(vn_tensor *t, double s)
{
    float *p = vn_tensor_data(t);
    for (int64_t k = 0; k < vn_tensor_numel(t); k++) p[k] = (float)(p[k] * s);
}

static void median_spread(double *v, int n, double *med, double *lo, double *hi)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    *med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    *lo = v[0];
    *hi = v[n - 1];
}

/* One table row: the three variants alternated on m as it is (X, W1, b1
 * set), after one warm-up of each. */
static void bench_row(mlp *m, const options *o, const char *pat, const char *sp)
{
    bool was = vn_set_grad_enabled(false);
    vn_tensor *z = vn_linear(m->x, m->w1, m->b1);
    vn_set_grad_enabled(was);
    if (!z) die("z");
    vn_act_sparse_stats st = {0}, other;
    double t[6][64], ti[64], med[6], lo[6], hi[6], imed, ilo, ihi;
    int reps = o->reps > 64 ? 64 : o->reps;
    for (int v = 0; v < 3; v++) step(m, v, o->tile, &other, &t[3][0]); /* warm-up */
    for (int r = 0; r < reps; r++) {
        for (int v = 0; v < 3; v++) {
            t[v][r] = 1e3 * step(m, v, o->tile, v == 1 ? &st : &other, &t[3 + v][r]);
            t[3 + v][r] *= 1e3;
        }
        ti[r] = 1e3 * index_time(z, o->tokens, o->tile);
    }
    for (int v = 0; v < 6; v++) median_spread(t[v], reps, &med[v], &lo[v], &hi[v]);
    median_spread(ti, reps, &imed, &ilo, &ihi);
    printf("| %s | %s | %.3f | %.3f |", pat, sp, st.density, st.tile_density);
    for (int v = 0; v < 6; v++) {
        printf(" %.0f (%.0f–%.0f)%s |", med[v], lo[v], hi[v], v % 3 == 1 && st.dense ? " dense" : "");
        if (v % 3 == 2) printf(" %.2f | %.2f |", med[v - 2] / med[v - 1], med[v - 2] / med[v]);
    }
    printf(" %.1f (%.1f–%.1f) |\n", imed, ilo, ihi);
    fflush(stdout);
    vn_tensor_release(z);
}

/* The "gpt" rows: for each block b of the file bench/gpt_activations.lua
 * wrote (x_b: tokens × C, w1_b: 4C × C, b1_b: 4C), X = [x_b, 0] (tokens ×
 * D) and W1, b1 the block's fc layer, its units repeated HID / 4C times
 * (W1[c·4C + j, :C] = w1_b[j], the rest 0): Z's zeros are then the real
 * model's, each unit's column repeated, so every tile keeps the same share
 * of units as in the real model, at the benchmark's shape. */
static void bench_real(mlp *m, const options *o)
{
    vn_tensor_map *f = vn_load(o->real);
    if (!f) die(o->real);
    for (int b = 1;; b++) {
        char name[3][32];
        snprintf(name[0], sizeof name[0], "x_%d", b);
        snprintf(name[1], sizeof name[1], "w1_%d", b);
        snprintf(name[2], sizeof name[2], "b1_%d", b);
        vn_tensor *xr = vn_tensor_map_get(f, name[0]), *wr = vn_tensor_map_get(f, name[1]);
        vn_tensor *br = vn_tensor_map_get(f, name[2]);
        if (!xr) break;
        int64_t C = xr->ndim == 2 ? xr->shape[1] : 0, H = 4 * C;
        if (!wr || !br || C < 1 || C > D || HID % H || xr->shape[0] != o->tokens ||
            wr->ndim != 2 || wr->shape[0] != H || wr->shape[1] != C || br->ndim != 1 || br->shape[0] != H) {
            fprintf(stderr, "%s: %s: block %d is not x (%lld × C), w1 (4C × C), b1 (4C) with 4C dividing "
                    "%d, C <= %d\n", BENCH_NAME, o->real, b, (long long)o->tokens, HID, D);
            exit(2);
        }
        int64_t xs[2] = {o->tokens, D};
        vn_tensor *x = param(vn_zeros(VN_F32, 2, xs));
        float *px = vn_tensor_data(x), *pw = vn_tensor_data(m->w1), *pb = vn_tensor_data(m->b1);
        const float *X = vn_tensor_data(xr), *W = vn_tensor_data(wr), *B = vn_tensor_data(br);
        for (int64_t i = 0; i < o->tokens; i++) memcpy(px + i * D, X + i * C, sizeof(float) * (size_t)C);
        memset(pw, 0, sizeof(float) * (size_t)HID * D);
        for (int64_t u = 0; u < HID; u++) {
            memcpy(pw + u * D, W + (u % H) * C, sizeof(float) * (size_t)C);
            pb[u] = B[u % H];
        }
        vn_tensor_release(m->x);
        m->x = x;
        char pat[32];
        snprintf(pat, sizeof pat, "gpt block %d", b);
        bench_row(m, o, pat, "trained");
    }
    vn_tensor_map_free(f);
}

int main(int argc, char **argv)
{
    passive_omp(argv);
    options o = parse_args(argc, argv);
    vn_manual_seed(0);
    int64_t w1s[2] = {HID, D}, w2s[2] = {D, HID}, hid = HID, d = D, dys[2] = {o.tokens, D};
    mlp m = {NULL, param(vn_randn(2, w1s)), param(vn_zeros(VN_F32, 1, &hid)), param(vn_randn(2, w2s)),
             param(vn_zeros(VN_F32, 1, &d)), vn_randn(2, dys)};
    scale(m.w1, 1 / sqrt((double)D)); /* W ~ N(0, 1/fan_in): Z and Y of unit scale */
    scale(m.w2, 1 / sqrt((double)HID));
    printf("MLP %d → %d → %d, %lld tokens, ReLU, forward + backward, f32; tile %d rows; median of %d "
           "(min–max) ms, variants alternated; %d OpenMP threads\n\n", D, HID, D, (long long)o.tokens,
           o.tile, o.reps, omp_get_max_threads());
    printf("| pattern | sparsity | density | kept | dense ms | auto ms | condensed ms | auto × | "
           "condensed × | dense CPU ms | auto CPU ms | condensed CPU ms | auto × CPU | condensed × CPU | "
           "index ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    char pats[256], *psave = NULL, *ssave = NULL;
    snprintf(pats, sizeof pats, "%s", o.patterns);
    for (char *pat = strtok_r(pats, ",", &psave); pat; pat = strtok_r(NULL, ",", &psave)) {
        float noise = !strcmp(pat, "clustered") ? 0.3f : !strcmp(pat, "aligned") ? 0.05f : 0;
        if (!noise && strcmp(pat, "random")) {
            fprintf(stderr, "%s: unknown pattern %s (random, clustered, aligned)\n", BENCH_NAME, pat);
            return 2;
        }
        m.x = param(make_x(o.tokens, noise));
        bool was = vn_set_grad_enabled(false);
        vn_tensor *z0 = vn_linear(m.x, m.w1, NULL);
        vn_set_grad_enabled(was);
        if (!z0) die("z0");
        char sps[256];
        snprintf(sps, sizeof sps, "%s", o.sparsity);
        for (char *sp = strtok_r(sps, ",", &ssave); sp; sp = strtok_r(NULL, ",", &ssave)) {
            char label[32];
            set_bias(m.b1, z0, 1 - atof(sp) / 100);
            snprintf(label, sizeof label, "%s%%", sp);
            bench_row(&m, &o, pat, label);
        }
        vn_tensor_release(z0);
        vn_tensor_release(m.x);
        m.x = NULL;
    }
    if (o.real[0]) bench_real(&m, &o);
    vn_tensor *all[6] = {m.x, m.w1, m.b1, m.w2, m.b2, m.dy};
    for (int k = 0; k < 6; k++) vn_tensor_release(all[k]);
    return 0;
}
