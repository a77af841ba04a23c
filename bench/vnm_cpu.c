/* vnm_cpu — the three V:N:M CPU kernels against dense OpenBLAS sgemm on the
 * same shapes, in the same run. For each weight W (R × K) and X of B rows:
 *
 *   forward  Y = X·Wᵀ          dense: sgemm(X, Wᵀ)    sparse: vn_vnm_spmm
 *   dX       dX = dY·W         dense: sgemm(dY, W)    sparse: vn_vnm_spmm_t
 *   dW       dYᵀ·X             dense: sgemm(dYᵀ, X)   sparse: vn_vnm_sddmm
 *                              (the full dW)          (only at kept positions)
 *
 * Each time is the best of --reps runs after one warm-up; the sparse calls
 * include packing their operands, as a training step pays it. GFLOP/s are
 * dense-equivalent (2·B·R·K / time, whatever the sparsity), so the sparse
 * and dense columns compare directly, and ×dense is the dense time over
 * the sparse time. A table, never a pass/fail.
 *
 *   OMP_WAIT_POLICY=passive build/bench/vnm_cpu [--reps 3] [--batch 2048]
 *       [--shapes 1024x1024,4096x4096,4096x1024] [--M 4,8,16,32] [--V 32,64,128]
 *       [--clock wall|cpu] [--precision f32|bf16|both]
 *
 * --clock cpu times each call by the CPU time of the whole process (all its
 * threads) instead of the wall clock: on a machine shared with other jobs,
 * time spent waiting for a core is then not counted, so the ratios stay
 * meaningful under load (threads waiting at a barrier sleep under the
 * passive wait policy and cost nothing either way). It measures work, not
 * parallel speedup.
 *
 * --precision bf16 runs the sparse forward, dX and dW in bf16
 * (vn_vnm_set_precision; AVX-512 BF16 CPUs only); both times the f32 and
 * the bf16 kernels of each matrix in the same run and adds the bf16
 * columns at the end.
 *
 * (Without OMP_WAIT_POLICY set, the program sets it to passive and
 * re-executes itself: spinning OpenMP threads starve OpenBLAS's.) */
#define BENCH_NAME "vnm_cpu"
#include "bench.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_LIST BENCH_MAX_LIST

typedef struct {
    int reps;
    bool cpu_clock;
    int precision; /* 0 f32, 1 bf16, 2 both */
    int64_t batch;
    int nshapes, nM, nV;
    int64_t shapes[MAX_LIST][2], M[MAX_LIST], V[MAX_LIST];
} options;

static options parse_args(int argc, char **argv)
{
    options o = {.reps = 3, .batch = 2048};
    o.nshapes = parse_list("1024x1024,4096x4096,4096x1024", NULL, o.shapes, "--shapes");
    o.nM = parse_list("4,8,16,32", o.M, NULL, "--M");
    o.nV = parse_list("32,64,128", o.V, NULL, "--V");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "usage: vnm_cpu [--reps N] [--batch B] [--shapes RxK,...] "
                            "[--M 4,8,...] [--V 32,...] [--clock wall|cpu] [--precision f32|bf16|both]\n");
            exit(2);
        }
        if (!strcmp(a, "--reps")) o.reps = atoi(v);
        else if (!strcmp(a, "--batch")) o.batch = atoll(v);
        else if (!strcmp(a, "--shapes")) o.nshapes = parse_list(v, NULL, o.shapes, a);
        else if (!strcmp(a, "--M")) o.nM = parse_list(v, o.M, NULL, a);
        else if (!strcmp(a, "--V")) o.nV = parse_list(v, o.V, NULL, a);
        else if (!strcmp(a, "--clock")) {
            if (strcmp(v, "wall") && strcmp(v, "cpu")) {
                fprintf(stderr, "vnm_cpu: --clock takes wall or cpu, got '%s'\n", v);
                exit(2);
            }
            o.cpu_clock = !strcmp(v, "cpu");
        }
        else if (!strcmp(a, "--precision")) {
            o.precision = !strcmp(v, "f32") ? 0 : !strcmp(v, "bf16") ? 1 : !strcmp(v, "both") ? 2 : -1;
            if (o.precision < 0) {
                fprintf(stderr, "vnm_cpu: --precision takes f32, bf16 or both, got '%s'\n", v);
                exit(2);
            }
        }
        else {
            fprintf(stderr, "vnm_cpu: unknown option %s\n", a);
            exit(2);
        }
        i++;
    }
    if (o.reps < 1 || o.batch < 1) {
        fprintf(stderr, "vnm_cpu: --reps and --batch must be >= 1\n");
        exit(2);
    }
    return o;
}

/* ---- what gets timed ------------------------------------------------------------ */

typedef struct {
    int kind; /* 0 forward, 1 dX, 2 dW */
    int64_t B, R, K;
    const float *x, *dy, *w;
    float *out;
    vn_vnm *s;
    vn_tensor *values, *tx, *tdy;
} job;

static void run_dense(const job *j)
{
    int B = (int)j->B, R = (int)j->R, K = (int)j->K;
    if (j->kind == 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, R, K, 1, j->x, K, j->w, K, 0, j->out, R);
    else if (j->kind == 1)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, K, R, 1, j->dy, R, j->w, K, 0, j->out, K);
    else
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, R, K, B, 1, j->dy, R, j->x, K, 0, j->out, K);
}

static void run_sparse(const job *j)
{
    vn_tensor *r = j->kind == 0   ? vn_vnm_spmm(j->s, j->values, j->tx)
                   : j->kind == 1 ? vn_vnm_spmm_t(j->s, j->values, j->tdy)
                                  : vn_vnm_sddmm(j->s, j->tdy, j->tx);
    if (!r) die("sparse kernel");
    vn_tensor_release(r);
}

static bool cpu_clock;

/* Seconds of the wall clock or, with --clock cpu, of the process's CPU time. */
static double clock_now(void)
{
    if (!cpu_clock) return now();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best of reps runs, after one warm-up, in seconds. */
static double best_time(void (*fn)(const job *), const job *j, int reps)
{
    fn(j);
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        double t0 = clock_now();
        fn(j);
        double t = clock_now() - t0;
        if (t < best) best = t;
    }
    return best;
}

/* The cells of n times (forward, dX, dW, then the bf16 forward, dX, dW),
 * each against the dense time of its kind. */
static void print_cells(int n, const double *t, const double dense[3], double flops)
{
    for (int k = 0; k < n; k++)
        printf(" | %8.2f | %6.1f | %5.2f", 1e3 * t[k], flops / t[k] * 1e-9, dense[k % 3] / t[k]);
    printf(" |\n");
}

static void set_precision(vn_vnm_precision p)
{
    if (vn_vnm_set_precision(p)) die("vnm_set_precision");
}

static void bench_shape(const options *o, int64_t R, int64_t K)
{
    int64_t B = o->batch;
    vn_tensor *w = vn_randn(2, (int64_t[]){R, K}), *x = vn_randn(2, (int64_t[]){B, K});
    vn_tensor *dy = vn_randn(2, (int64_t[]){B, R});
    int64_t big = R * K > B * K ? R * K : B * K;
    if (B * R > big) big = B * R;
    vn_tensor *out = vn_empty(VN_F32, 1, &big);
    if (!w || !x || !dy || !out) die("allocating operands");
    job j = {.B = B, .R = R, .K = K, .x = vn_tensor_data(x), .dy = vn_tensor_data(dy),
             .w = vn_tensor_data(w), .out = vn_tensor_data(out), .tx = x, .tdy = dy};
    double flops = 2.0 * (double)B * (double)R * (double)K, dense[3];
    for (j.kind = 0; j.kind < 3; j.kind++) dense[j.kind] = best_time(run_dense, &j, o->reps);
    printf("| %lld×%lld | dense | –", (long long)R, (long long)K);
    print_cells(3, dense, dense, flops);
    fflush(stdout);
    for (int im = 0; im < o->nM; im++)
        for (int iv = 0; iv < o->nV; iv++) {
            int64_t M = o->M[im], V = o->V[iv];
            double t0 = clock_now();
            j.s = vn_vnm_from_dense(w, V, 2, M);
            double t_compress = clock_now() - t0;
            if (!j.s) die("vnm_from_dense");
            j.values = vn_vnm_values(j.s);
            double t[6];
            for (j.kind = 0; j.kind < 3; j.kind++) t[j.kind] = best_time(run_sparse, &j, o->reps);
            if (o->precision == 2) { /* the bf16 kernels, right after the f32 ones */
                set_precision(VN_VNM_BF16);
                for (j.kind = 0; j.kind < 3; j.kind++) t[3 + j.kind] = best_time(run_sparse, &j, o->reps);
                set_precision(VN_VNM_F32);
            }
            printf("| %lld×%lld | %lld:2:%lld | %.0f", (long long)R, (long long)K, (long long)V,
                   (long long)M, 1e3 * t_compress);
            print_cells(o->precision == 2 ? 6 : 3, t, dense, flops);
            fflush(stdout);
            vn_tensor_release(j.values);
            vn_vnm_free(j.s);
        }
    vn_tensor_release(w);
    vn_tensor_release(x);
    vn_tensor_release(dy);
    vn_tensor_release(out);
}

int main(int argc, char **argv)
{
    passive_omp(argv);
    options o = parse_args(argc, argv);
    cpu_clock = o.cpu_clock;
    if (o.precision == 1) set_precision(VN_VNM_BF16);
    vn_manual_seed(0);
    static const char *const prec[] = {"f32", "bf16", "f32 and bf16"};
    printf("V:N:M CPU kernels vs OpenBLAS sgemm: X of %lld rows, %s, best of %d (%s time); "
           "kernels: %s; OPENBLAS_CORETYPE=%s\n\n", (long long)o.batch, prec[o.precision], o.reps,
           o.cpu_clock ? "process CPU" : "wall", vn_vnm_isa(),
           getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(auto)");
    printf("| W (R×K) | V:N:M | compress ms | fwd ms | GFLOP/s | ×dense | dX ms | GFLOP/s | ×dense "
           "| dW ms | GFLOP/s | ×dense |%s\n",
           o.precision == 2 ? " bf16 fwd ms | GFLOP/s | ×dense | bf16 dX ms | GFLOP/s | ×dense "
                              "| bf16 dW ms | GFLOP/s | ×dense |" : "");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|%s\n",
           o.precision == 2 ? "---|---|---|---|---|---|---|---|---|" : "");
    for (int i = 0; i < o.nshapes; i++) bench_shape(&o, o.shapes[i][0], o.shapes[i][1]);
    return 0;
}
