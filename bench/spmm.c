/* spmm — CSR SpMM Y = A·X (vn_csr_spmm) on graphs, for F = 16, 64, 256
 * feature columns, with the machine's memory bandwidth measured in the same
 * run. A table, never a pass/fail.
 *
 * Graphs (all deterministic):
 *   cora    /work/shared/data/cora/cora.cites (0-based "a b" pairs; nodes =
 *           the largest id + 1), both directions plus a self loop per node,
 *           duplicates merged;
 *   pl100k, pl1m  synthetic power-law graphs of 100k and 1M nodes: each node
 *           (a row, the destination) gets 10–20 in-edges, uniform; each
 *           edge's source is drawn from Zipf(s = 1) over the nodes (rank
 *           r = ⌊(n+1)^u⌋, u uniform, then a fixed random permutation maps
 *           ranks to node ids, so hubs are scattered as in real graphs);
 *           duplicates merged.
 * Values on every graph are the GCN normalisation 1/√(d_row(i)·d_col(j))
 * with d = the row and column entry counts (on Cora, with its self loops,
 * exactly Kipf & Welling's D^-½(A+I)D^-½).
 *
 * Columns: ms is the median of --reps calls after one warm-up, with the
 * min–max spread; GFLOP/s = 2·nnz·F / median. GB/s counts the bytes of the
 * edge stream: per entry an 8-byte column index, a 4-byte value and the
 * gathered X row (F·4 bytes, as if no row were reused from cache), plus
 * (rows+1)·8 of row pointers and rows·F·4 written to Y. "bound ms" is those
 * bytes at the measured triad bandwidth, ×bound the median over it. The
 * dense column (Cora only, where rows² floats fit) is cblas_sgemm of the
 * dense A by X.
 *
 *   OMP_WAIT_POLICY=passive build/bench/spmm [--cora PATH] [--reps 5]
 *       [--F 16,64,256] [--graphs cora,pl100k,pl1m] [--dump DIR]
 *
 * --dump DIR writes each graph as raw little-endian arrays for
 * bench/torch_spmm.py: NAME.row_ptr.i64, NAME.col_idx.i64, NAME.values.f32
 * and NAME.txt ("rows cols nnz"), then runs the benchmark as usual. */
#define BENCH_NAME "spmm"
#include "bench.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_F 16

typedef struct {
    int reps, nF;
    int64_t F[MAX_F];
    const char *cora, *graphs, *dump;
} options;

static options parse_args(int argc, char **argv)
{
    options o = {.reps = 5, .nF = 3, .F = {16, 64, 256},
                 .cora = "/work/shared/data/cora/cora.cites", .graphs = "cora,pl100k,pl1m"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "usage: spmm [--cora PATH] [--reps N] [--F 16,64,...] "
                            "[--graphs cora,pl100k,pl1m] [--dump DIR]\n");
            exit(2);
        }
        if (!strcmp(a, "--reps")) o.reps = atoi(v);
        else if (!strcmp(a, "--cora")) o.cora = v;
        else if (!strcmp(a, "--graphs")) o.graphs = v;
        else if (!strcmp(a, "--dump")) o.dump = v;
        else if (!strcmp(a, "--F")) {
            o.nF = 0;
            for (const char *p = v; *p && o.nF < MAX_F; p = strchr(p, ',') ? strchr(p, ',') + 1 : "")
                if ((o.F[o.nF++] = atoll(p)) < 1) {
                    fprintf(stderr, "spmm: bad --F list '%s'\n", v);
                    exit(2);
                }
        } else {
            fprintf(stderr, "spmm: unknown option %s\n", a);
            exit(2);
        }
        i++;
    }
    if (o.reps < 1) {
        fprintf(stderr, "spmm: --reps must be >= 1\n");
        exit(2);
    }
    return o;
}

/* ---- memory bandwidth: a STREAM-style triad --------------------------------------- */

/* a = b + s·c over three 64 MiB arrays (far past the L3), both threads, best
 * of 5; counted as STREAM does, 12 bytes per element (the write-allocate
 * read of a is not counted). */
static double triad_gbs(void)
{
    int64_t n = (int64_t)16 << 20;
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    float *c = malloc(sizeof(float) * (size_t)n);
    if (!a || !b || !c) {
        fprintf(stderr, "spmm: out of memory for the triad\n");
        exit(1);
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2;
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
        double t = now() - t0;
        if (t < best) best = t;
    }
    volatile float sink = a[n / 2]; /* the stores are used, so they stay */
    (void)sink;
    double gbs = 12.0 * (double)n / best * 1e-9;
    free(a);
    free(b);
    free(c);
    return gbs;
}

/* ---- graphs -------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    vn_csr *a;
    vn_tensor *values;
    int64_t rows, cols, nnz;
} graph;

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s) { return (double)(splitmix(s) >> 11) * 0x1.0p-53; }

/* The CSR of the COO pairs (duplicates merged) with GCN-normalised values. */
static graph make_graph(const char *name, int64_t n, vn_tensor *row, vn_tensor *col)
{
    graph g = {.name = name, .rows = n, .cols = n};
    g.a = vn_csr_from_coo(n, n, row, col, NULL);
    vn_tensor_release(row);
    vn_tensor_release(col);
    if (!g.a) die(name);
    g.nnz = vn_csr_nnz(g.a);
    vn_tensor *rp = vn_csr_row_ptr(g.a), *ci = vn_csr_col_idx(g.a);
    g.values = vn_empty(VN_F32, 1, &g.nnz);
    double *dc = calloc((size_t)n, sizeof *dc);
    if (!rp || !ci || !g.values || !dc) die("graph arrays");
    const int64_t *p = vn_tensor_data(rp), *c = vn_tensor_data(ci);
    float *v = vn_tensor_data(g.values);
    for (int64_t k = 0; k < g.nnz; k++) dc[c[k]] += 1;
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = p[i]; k < p[i + 1]; k++)
            v[k] = (float)(1.0 / sqrt((double)(p[i + 1] - p[i]) * dc[c[k]]));
    free(dc);
    vn_tensor_release(rp);
    vn_tensor_release(ci);
    return g;
}

static graph load_cora(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "spmm: cannot open %s (pass --cora PATH or drop cora from --graphs)\n", path);
        exit(1);
    }
    int64_t cap = 1 << 14, m = 0, n = 0;
    int64_t *pairs = malloc(sizeof(int64_t) * 2 * (size_t)cap);
    long long a, b;
    while (pairs && fscanf(f, "%lld %lld", &a, &b) == 2) {
        if (a < 0 || b < 0) {
            fprintf(stderr, "spmm: %s: negative node id\n", path);
            exit(1);
        }
        if (m == cap) pairs = realloc(pairs, sizeof(int64_t) * 2 * (size_t)(cap *= 2));
        if (!pairs) break;
        pairs[2 * m] = a, pairs[2 * m + 1] = b, m++;
        if (a >= n) n = a + 1;
        if (b >= n) n = b + 1;
    }
    fclose(f);
    int64_t E = 2 * m + n;
    vn_tensor *row = vn_empty(VN_I64, 1, &E), *col = vn_empty(VN_I64, 1, &E);
    if (!pairs || !row || !col) die("reading cora");
    int64_t *r = vn_tensor_data(row), *c = vn_tensor_data(col);
    for (int64_t k = 0; k < m; k++) {
        r[2 * k] = pairs[2 * k], c[2 * k] = pairs[2 * k + 1];
        r[2 * k + 1] = pairs[2 * k + 1], c[2 * k + 1] = pairs[2 * k];
    }
    for (int64_t i = 0; i < n; i++) r[2 * m + i] = c[2 * m + i] = i;
    free(pairs);
    return make_graph("cora", n, row, col);
}

static graph power_law(const char *name, int64_t n, uint64_t seed)
{
    uint64_t s = seed;
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)n), *deg = malloc(sizeof(int64_t) * (size_t)n);
    if (!perm || !deg) die("power-law graph");
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher–Yates */
        int64_t j = (int64_t)(splitmix(&s) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int64_t E = 0;
    for (int64_t i = 0; i < n; i++) E += deg[i] = 10 + (int64_t)(splitmix(&s) % 11);
    vn_tensor *row = vn_empty(VN_I64, 1, &E), *col = vn_empty(VN_I64, 1, &E);
    if (!row || !col) die("power-law graph");
    int64_t *r = vn_tensor_data(row), *c = vn_tensor_data(col), e = 0;
    double logn1 = log((double)(n + 1));
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < deg[i]; k++, e++) {
            int64_t rank = (int64_t)exp(uniform(&s) * logn1) - 1; /* Zipf(1): P(rank) ∝ 1/rank */
            r[e] = i;
            c[e] = perm[rank < 0 ? 0 : rank >= n ? n - 1 : rank];
        }
    free(perm);
    free(deg);
    return make_graph(name, n, row, col);
}

static void write_array(const char *dir, const char *name, const char *ext, const void *p,
                        size_t bytes)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, bytes, f) != bytes || fclose(f)) {
        fprintf(stderr, "spmm: cannot write %s\n", path);
        exit(1);
    }
}

static void dump_graph(const char *dir, const graph *g)
{
    vn_tensor *rp = vn_csr_row_ptr(g->a), *ci = vn_csr_col_idx(g->a);
    if (!rp || !ci) die("dump");
    write_array(dir, g->name, "row_ptr.i64", vn_tensor_data(rp), sizeof(int64_t) * (size_t)(g->rows + 1));
    write_array(dir, g->name, "col_idx.i64", vn_tensor_data(ci), sizeof(int64_t) * (size_t)g->nnz);
    write_array(dir, g->name, "values.f32", vn_tensor_data(g->values), sizeof(float) * (size_t)g->nnz);
    char meta[128];
    int len = snprintf(meta, sizeof meta, "%lld %lld %lld\n", (long long)g->rows,
                       (long long)g->cols, (long long)g->nnz);
    write_array(dir, g->name, "txt", meta, (size_t)len);
    vn_tensor_release(rp);
    vn_tensor_release(ci);
}

/* ---- timing ----------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median, min and max of reps calls after one warm-up, in seconds. */
typedef struct { double med, min, max; } timing;

static timing time_spmm(const graph *g, const vn_tensor *x, const float *dense, float *out,
                        int64_t F, int reps)
{
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!t) die("timing");
    for (int r = -1; r < reps; r++) {
        double t0 = now();
        if (dense) {
            int n = (int)g->rows;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, (int)F, n, 1, dense, n,
                        vn_tensor_data(x), (int)F, 0, out, (int)F);
        } else {
            vn_tensor *y = vn_csr_spmm(g->a, g->values, x);
            if (!y) die("csr_spmm");
            vn_tensor_release(y);
        }
        if (r >= 0) t[r] = now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    timing m = {reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]), t[0], t[reps - 1]};
    free(t);
    return m;
}

static void bench_graph(const options *o, const graph *g, double bw)
{
    float *dense = NULL, *out = NULL;
    if (!strcmp(g->name, "cora")) { /* rows² floats: 29 MB for Cora */
        vn_tensor *rp = vn_csr_row_ptr(g->a), *ci = vn_csr_col_idx(g->a);
        dense = calloc((size_t)(g->rows * g->cols), sizeof(float));
        out = malloc(sizeof(float) * (size_t)g->rows * 256);
        if (!rp || !ci || !dense || !out) die("dense A");
        const int64_t *p = vn_tensor_data(rp), *c = vn_tensor_data(ci);
        const float *v = vn_tensor_data(g->values);
        for (int64_t i = 0; i < g->rows; i++)
            for (int64_t k = p[i]; k < p[i + 1]; k++) dense[i * g->cols + c[k]] = v[k];
        vn_tensor_release(rp);
        vn_tensor_release(ci);
    }
    for (int i = 0; i < o->nF; i++) {
        int64_t F = o->F[i];
        vn_tensor *x = vn_randn(2, (int64_t[]){g->cols, F});
        if (!x) die("X");
        timing t = time_spmm(g, x, NULL, NULL, F, o->reps);
        double bytes = (double)g->nnz * (12.0 + 4.0 * (double)F) + 8.0 * (double)(g->rows + 1) +
                       4.0 * (double)g->rows * (double)F;
        printf("| %s | %lld | %lld | %lld | %.3f (%.3f–%.3f) | %.2f | %.1f | %.3f | %.2f | ",
               g->name, (long long)g->rows, (long long)g->nnz, (long long)F, 1e3 * t.med,
               1e3 * t.min, 1e3 * t.max, 2.0 * (double)g->nnz * (double)F / t.med * 1e-9,
               bytes / t.med * 1e-9, 1e3 * bytes / (bw * 1e9), t.med / (bytes / (bw * 1e9)));
        if (dense && F <= 256) {
            timing d = time_spmm(g, x, dense, out, F, o->reps);
            printf("%.3f (%.3f–%.3f) |\n", 1e3 * d.med, 1e3 * d.min, 1e3 * d.max);
        } else {
            printf("– |\n");
        }
        fflush(stdout);
        vn_tensor_release(x);
    }
    free(dense);
    free(out);
}

int main(int argc, char **argv)
{
    passive_omp(argv);
    options o = parse_args(argc, argv);
    vn_manual_seed(0);
    double bw = triad_gbs();
    printf("CSR SpMM Y = A·X (vn_csr_spmm), f32, median of %d (min–max), %d OpenMP threads; "
           "triad bandwidth %.1f GB/s\n\n", o.reps, omp_get_max_threads(), bw);
    printf("| graph | nodes | nnz | F | ms | GFLOP/s | GB/s | bound ms | ×bound | dense sgemm ms |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    char *list = strdup(o.graphs), *save = NULL;
    for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        graph g;
        if (!strcmp(name, "cora")) g = load_cora(o.cora);
        else if (!strcmp(name, "pl100k")) g = power_law("pl100k", 100000, 100);
        else if (!strcmp(name, "pl1m")) g = power_law("pl1m", 1000000, 1000);
        else {
            fprintf(stderr, "spmm: unknown graph '%s' (cora, pl100k, pl1m)\n", name);
            exit(2);
        }
        if (o.dump) dump_graph(o.dump, &g);
        bench_graph(&o, &g, bw);
        vn_tensor_release(g.values);
        vn_csr_free(g.a);
    }
    free(list);
    return 0;
}
