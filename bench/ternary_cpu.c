/* ternary_cpu — BitNet b1.58 inference product y = x·Wᵀ on the CPU, in the
 * same run: f32 OpenBLAS (sgemv at batch 1, sgemm above), our V:2:8 SpMM
 * (vn_vnm_spmm on the f32 kept values, 64:2:8), the packed ternary
 * kernel (vn_ternary_matmul: 2-bit weights, int8 activations quantised per
 * row inside the call) with the AVX-512 VNNI, AVX2 and portable loops (each
 * forced by vn_ternary_set_kernel), and
 * the ternary 64:2:8 kernel (vn_ternary_vnm_matmul: the same kernels over
 * each block's gathered kept columns, 4 bits per kept weight). Variants
 * whose ISA this CPU lacks are left out of the table. For each
 * weight shape N × K and batch B, the variants run in turn (A B C D A B C
 * D ...) --reps times, each timed call right after an untimed call of the
 * same variant: every variant finds its own data in the caches as far as
 * they hold it (the 4 MiB of packed 4096×4096 weights fit in L3), instead
 * of the first ternary variant after the f32 ones paying for their eviction
 * (30–50% at B = 1 on an AMD EPYC); the table gives the median
 * time in µs, the spread (min–max) and ×f32 = median f32 time / median
 * time. A table, never a pass/fail.
 *
 *   OMP_WAIT_POLICY=passive build/bench/ternary_cpu [--reps 15]
 *       [--shapes 4096x4096,11008x4096] [--batch 1,8,64]
 *
 * (Without OMP_WAIT_POLICY set, the program sets it to passive and
 * re-executes itself, as vnm_cpu does.) */
#define BENCH_NAME "ternary_cpu"
#include "bench.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LIST BENCH_MAX_LIST
#define MAX_REPS 101
enum {
    F32, VNM, TERNARY_VNNI, TERNARY_AVX2, TERNARY_PORTABLE, TVNM_VNNI, TVNM_AVX2, TVNM_PORTABLE,
    NVARIANTS
};
static const char *const variant_names[NVARIANTS] = {
    "f32 OpenBLAS", "64:2:8 f32",
    "ternary avx512vnni", "ternary avx2", "ternary portable",
    "ternary 64:2:8 avx512vnni", "ternary 64:2:8 avx2", "ternary 64:2:8 portable"};
/* The packed kernels' ISA per variant (NULL: not a packed kernel). */
static const char *const variant_isa[NVARIANTS] = {NULL, NULL, "avx512vnni", "avx2", "portable",
                                                   "avx512vnni", "avx2", "portable"};

/* Points the packed products at the variant's kernel (vn_ternary_set_kernel:
 * the bench times each kernel at every batch size, whatever the automatic
 * choice would run); false where this CPU lacks it. */
static bool select_kernel(int variant)
{
    return vn_ternary_set_kernel(variant_isa[variant] ? variant_isa[variant] : "auto") == VN_OK;
}

/* The variants this CPU can run. */
static bool available(int variant)
{
    bool ok = select_kernel(variant);
    vn_ternary_set_kernel("auto");
    return ok;
}

typedef struct {
    int64_t N, K, B;
    const float *w, *x;
    float *y;
    vn_tensor *tx, *packed, *values, *packed_vnm;
    vn_vnm *s;
    float gamma, gamma_vnm;
} job;

static void run(int variant, const job *j)
{
    int N = (int)j->N, K = (int)j->K, B = (int)j->B;
    vn_tensor *r = NULL;
    switch (variant) {
    case F32:
        if (B == 1) cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1, j->w, K, j->x, 1, 0, j->y, 1);
        else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, N, K, 1, j->x, K, j->w, K, 0, j->y, N);
        return;
    case VNM:
        r = vn_vnm_spmm(j->s, j->values, j->tx);
        break;
    default:
        if (!select_kernel(variant)) die(variant_names[variant]);
        if (variant >= TVNM_VNNI) r = vn_ternary_vnm_matmul(j->tx, j->s, j->packed_vnm, j->gamma_vnm);
        else r = vn_ternary_matmul(j->tx, j->packed, j->K, j->gamma);
    }
    if (!r) die(variant_names[variant]);
    vn_tensor_release(r);
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void bench(int64_t N, int64_t K, const int64_t *batches, int nb, int reps)
{
    vn_tensor *w = vn_randn(2, (int64_t[]){N, K});
    if (!w) die("allocating W");
    job j = {.N = N, .K = K, .w = vn_tensor_data(w)};
    if (!(j.packed = vn_ternary_pack(w, &j.gamma))) die("ternary_pack");
    if (!(j.s = vn_vnm_from_dense(w, 64, 2, 8)) || !(j.values = vn_vnm_values(j.s))) die("vnm_from_dense");
    if (!(j.packed_vnm = vn_ternary_vnm_pack(j.s, &j.gamma_vnm))) die("ternary_vnm_pack");
    for (int ib = 0; ib < nb; ib++) {
        j.B = batches[ib];
        j.tx = vn_randn(2, (int64_t[]){j.B, K});
        vn_tensor *y = vn_empty(VN_F32, 2, (int64_t[]){j.B, N});
        if (!j.tx || !y) die("allocating x, y");
        j.x = vn_tensor_data(j.tx), j.y = vn_tensor_data(y);
        double t[NVARIANTS][MAX_REPS];
        for (int r = 0; r < reps; r++)
            for (int v = 0; v < NVARIANTS; v++) {
                if (!available(v)) continue;
                run(v, &j); /* untimed: see the top of the file */
                double t0 = now();
                run(v, &j);
                t[v][r] = now() - t0;
            }
        double med[NVARIANTS];
        for (int v = 0; v < NVARIANTS; v++) {
            if (!available(v)) continue;
            qsort(t[v], (size_t)reps, sizeof(double), by_value);
            med[v] = t[v][reps / 2];
        }
        for (int v = 0; v < NVARIANTS; v++)
            if (available(v))
                printf("| %lld×%lld | %lld | %s | %.0f | %.0f–%.0f | %.2f |\n", (long long)N, (long long)K,
                   (long long)j.B, variant_names[v], 1e6 * med[v], 1e6 * t[v][0],
                   1e6 * t[v][reps - 1], med[F32] / med[v]);
        fflush(stdout);
        vn_tensor_release(j.tx);
        vn_tensor_release(y);
    }
    vn_tensor_release(w);
    vn_tensor_release(j.packed);
    vn_tensor_release(j.packed_vnm);
    vn_tensor_release(j.values);
    vn_vnm_free(j.s);
}

int main(int argc, char **argv)
{
    passive_omp(argv);
    int reps = 15;
    int64_t shapes[MAX_LIST][2], batches[MAX_LIST];
    int ns = parse_list("4096x4096,11008x4096", NULL, shapes, "--shapes");
    int nb = parse_list("1,8,64", batches, NULL, "--batch");
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(a, "--reps")) reps = atoi(v);
        else if (v && !strcmp(a, "--shapes")) ns = parse_list(v, NULL, shapes, a);
        else if (v && !strcmp(a, "--batch")) nb = parse_list(v, batches, NULL, a);
        else {
            fprintf(stderr, "usage: ternary_cpu [--reps N] [--shapes NxK,...] [--batch 1,8,...]\n");
            exit(2);
        }
    }
    if (reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "ternary_cpu: --reps must be in 1..%d\n", MAX_REPS);
        exit(2);
    }
    vn_manual_seed(0);
    printf("y = x·Wᵀ, W (N×K), x (B×K): median of %d alternating runs; the automatic choice "
           "here: %s at B = 1, %s at B = 4, %s at B = 8; OMP_NUM_THREADS=%s\n\n", reps,
           vn_ternary_kernel(1), vn_ternary_kernel(4), vn_ternary_kernel(8),
           getenv("OMP_NUM_THREADS") ? getenv("OMP_NUM_THREADS") : "(all)");
    printf("| W (N×K) | B | kernel | median µs | min–max µs | ×f32 |\n|---|---|---|---|---|---|\n");
    for (int i = 0; i < ns; i++) bench(shapes[i][0], shapes[i][1], batches, nb, reps);
    return 0;
}
