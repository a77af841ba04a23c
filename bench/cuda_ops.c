/* cuda_ops — the CUDA backend against cuBLAS and the card's ceilings, in
 * one run. Prints tables, never pass/fail; without a CUDA device it says so
 * and exits 0. Exits 1 only when a call fails (the numbers would be wrong).
 *
 *  (a) GEMM, C (m × n) = A (m × k) · B (k × n), row-major, for each size:
 *      venom's vn_matmul on f32 CUDA tensors under autocast bf16 (the
 *      conversion of both operands to bf16 included, as a training step pays
 *      it); vnk_gemm on operands converted to bf16 beforehand; cuBLAS called
 *      directly (cublasGemmEx, bf16 inputs, compute 32F, f32 output and bf16
 *      output); then f32 and TF32, venom against cuBLAS. Times are medians
 *      of --reps runs timed with CUDA events after 2 warm-up runs. TFLOP/s =
 *      2·m·n·k / time; "% ceil" against 790 TFLOP/s (bf16 dense, as measured
 *      on an H200), 494 (TF32 dense, the data sheet) or 67 (f32, the data
 *      sheet). "rel diff" is ‖C − C_ref‖/‖C_ref‖ over the first 4M entries,
 *      C_ref being cuBLAS's result at the same input precision.
 *  (b) Launch overhead: µs per small op (add, mul, relu on CUDA tensors of 1
 *      and 1024 elements through the public API, result released each time)
 *      over --ops calls and one synchronize, next to the same ops on the CPU
 *      and bare kernels.h launches (vnk_fill, vnk_map on a preallocated
 *      output: no tensor, no allocation).
 *  (c) Bandwidth of a large elementwise copy (vnk_map copy of 1 GiB, f32),
 *      cudaMemcpy device to device, and vn_add through the API, against
 *      4.3 TB/s (bytes read + written).
 *
 * The lines "SUMMARY key=value" at the end are read by
 * tests/gpu/device-check.sh.
 *
 *   build/bench/cuda_ops [--reps 10] [--ops 10000] [--quick]
 *       [--sizes 4096x4096x4096,8192x8192x8192,16384x4096x4096]   (m x n x k)
 */
#include "kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZES 8
#define PEAK_BF16 790.0
#define PEAK_TF32 494.0
#define PEAK_F32 67.0
#define PEAK_BW 4.3e12

static int reps = 10, nops = 10000, failures = 0;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define CUDA_OK(call)                                                                     \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "cuda_ops: %s: %s\n", #call, cudaGetErrorString(e_));         \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "cuda_ops: %s: %s\n", what, msg);
    exit(1);
}

static uint32_t rng = 12345;
static float uniform(void) /* [-1, 1), xorshift32 */
{
    rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
    return (float)(rng >> 8) / 8388608.0f - 1.0f;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- timing ---------------------------------------------------------------- */

typedef int (*work_fn)(void *ctx); /* 0 on success */

/* Median milliseconds of fn over `reps` runs, each between two CUDA events
 * on the legacy default stream (venom's and the cuBLAS handle's), after two
 * warm-up runs. NAN when a run fails (the message is printed). */
static double median_ms(work_fn fn, void *ctx, const char *what)
{
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    double *ms = malloc(sizeof(double) * (size_t)reps), result = NAN;
    for (int i = 0; i < 2; i++)
        if (fn(ctx)) goto fail;
    if (vnk_synchronize()) goto fail;
    for (int r = 0; r < reps; r++) {
        float t;
        CUDA_OK(cudaEventRecord(e0, 0));
        if (fn(ctx)) goto fail;
        CUDA_OK(cudaEventRecord(e1, 0));
        CUDA_OK(cudaEventSynchronize(e1));
        CUDA_OK(cudaEventElapsedTime(&t, e0, e1));
        ms[r] = t;
    }
    if (vnk_synchronize()) goto fail;
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_double);
    result = ms[reps / 2];
    goto done;
fail:
    fprintf(stderr, "cuda_ops: %s failed: %s%s\n", what, vn_last_error(),
            *vn_last_error() ? "" : vnk_error());
    failures++;
done:
    free(ms);
    CUDA_OK(cudaEventDestroy(e0));
    CUDA_OK(cudaEventDestroy(e1));
    return result;
}

/* ---- (a) GEMM -------------------------------------------------------------- */

typedef struct {
    int64_t m, n, k;
    cublasHandle_t h;
    float *a32, *b32, *c32;   /* dev */
    uint16_t *a16, *b16, *c16; /* dev, bf16 */
    vn_tensor *ta, *tb;       /* f32 CUDA tensors holding the same values */
    vn_tensor *last;          /* venom's latest result */
    cublasComputeType_t compute;
} gemm_ctx;

static int run_venom(void *p)
{
    gemm_ctx *g = p;
    vn_tensor *c = vn_matmul(g->ta, g->tb);
    if (!c) return 1;
    vn_tensor_release(g->last);
    g->last = c;
    return 0;
}

static int run_vnk(void *p)
{
    gemm_ctx *g = p;
    return vnk_gemm(g->c32, g->n, 0, g->a16, g->k, 0, g->b16, g->n, 0, VN_BF16, false, false, g->m,
                    g->n, g->k, 1, 1.0f, 0.0f, false);
}

/* Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: cuBLAS gets B first. */
static int cublas_gemm(gemm_ctx *g, const void *a, const void *b, cudaDataType_t ab, void *c,
                       cudaDataType_t ct)
{
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s = cublasGemmEx(g->h, CUBLAS_OP_N, CUBLAS_OP_N, (int)g->n, (int)g->m,
                                    (int)g->k, &one, b, ab, (int)g->n, a, ab, (int)g->k, &zero, c,
                                    ct, (int)g->n, g->compute, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cuda_ops: cublasGemmEx: %s\n", cublasGetStatusString(s));
        return 1;
    }
    return cudaGetLastError() != cudaSuccess;
}
static int run_cublas_bf16_f32(void *p)
{
    gemm_ctx *g = p;
    return cublas_gemm(g, g->a16, g->b16, CUDA_R_16BF, g->c32, CUDA_R_32F);
}
static int run_cublas_bf16_bf16(void *p)
{
    gemm_ctx *g = p;
    return cublas_gemm(g, g->a16, g->b16, CUDA_R_16BF, g->c16, CUDA_R_16BF);
}
static int run_cublas_f32(void *p)
{
    gemm_ctx *g = p;
    return cublas_gemm(g, g->a32, g->b32, CUDA_R_32F, g->c32, CUDA_R_32F);
}

/* The first `count` entries of a dev buffer (f32 or bf16) as host floats. */
static float *fetch(const void *dev, bool bf16, size_t count)
{
    float *h = malloc(count * 4);
    if (!bf16) {
        if (vnk_copy(h, false, dev, true, count * 4)) die("copy", vnk_error());
        return h;
    }
    uint16_t *raw = malloc(count * 2);
    if (vnk_copy(raw, false, dev, true, count * 2)) die("copy", vnk_error());
    for (size_t i = 0; i < count; i++) {
        uint32_t u = (uint32_t)raw[i] << 16;
        memcpy(&h[i], &u, 4);
    }
    free(raw);
    return h;
}
static float *fetch_tensor(const vn_tensor *t, size_t count)
{
    vn_tensor *c = vn_to_device(t, VN_CPU);
    if (!c) die("vn_to_device", vn_last_error());
    float *h = malloc(count * 4);
    memcpy(h, vn_tensor_data(c), count * 4);
    vn_tensor_release(c);
    return h;
}
static double rel_diff(const float *x, const float *ref, size_t count)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < count; i++) {
        double d = (double)x[i] - ref[i];
        num += d * d, den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : NAN;
}

static void row(const char *name, double ms, double flop, double peak, double diff)
{
    double tf = flop / ms / 1e9;
    printf("  %-44s %9.3f %8.1f %6.1f%%", name, ms, tf, 100 * tf / peak);
    if (isnan(diff)) printf("   %9s\n", "(ref)");
    else printf("   %9.2e\n", diff);
}

static void bench_gemm(cublasHandle_t h, int64_t m, int64_t n, int64_t k)
{
    gemm_ctx g = {.m = m, .n = n, .k = k, .h = h, .compute = CUBLAS_COMPUTE_32F};
    size_t na = (size_t)(m * k), nb = (size_t)(k * n), nc = (size_t)(m * n);
    size_t ncheck = nc < ((size_t)4 << 20) ? nc : ((size_t)4 << 20);
    double flop = 2.0 * (double)m * (double)n * (double)k;
    char key[64];
    snprintf(key, sizeof key, "%lldx%lldx%lld", (long long)m, (long long)n, (long long)k);

    float *ha = malloc(na * 4), *hb = malloc(nb * 4);
    for (size_t i = 0; i < na; i++) ha[i] = uniform();
    for (size_t i = 0; i < nb; i++) hb[i] = uniform();
    g.a32 = vnk_alloc(na * 4), g.b32 = vnk_alloc(nb * 4), g.c32 = vnk_alloc(nc * 4);
    g.a16 = vnk_alloc(na * 2), g.b16 = vnk_alloc(nb * 2), g.c16 = vnk_alloc(nc * 2);
    if (!g.a32 || !g.b32 || !g.c32 || !g.a16 || !g.b16 || !g.c16) die("vnk_alloc", vnk_error());
    if (vnk_copy(g.a32, true, ha, false, na * 4) || vnk_copy(g.b32, true, hb, false, nb * 4))
        die("copy", vnk_error());
    vnk_loop L = {.ndim = 1};
    L.st[0][0] = 1;
    L.shape[0] = (int64_t)na;
    if (vnk_map(g.a16, VN_BF16, (const void *[]){g.a32}, 1, VN_F32, &L, VNK_COPY, 0, 0))
        die("vnk_map", vnk_error());
    L.shape[0] = (int64_t)nb;
    if (vnk_map(g.b16, VN_BF16, (const void *[]){g.b32}, 1, VN_F32, &L, VNK_COPY, 0, 0))
        die("vnk_map", vnk_error());
    vn_tensor *ca = vn_from_data(VN_F32, 2, (int64_t[]){m, k}, ha);
    vn_tensor *cb = vn_from_data(VN_F32, 2, (int64_t[]){k, n}, hb);
    if (!ca || !cb) die("vn_from_data", vn_last_error());
    g.ta = vn_to_device(ca, VN_CUDA), g.tb = vn_to_device(cb, VN_CUDA);
    if (!g.ta || !g.tb) die("vn_to_device", vn_last_error());
    vn_tensor_release(ca), vn_tensor_release(cb);
    free(ha), free(hb);

    printf("\nGEMM m=%lld n=%lld k=%lld (%.2f TFLOP per call)\n", (long long)m, (long long)n,
           (long long)k, flop / 1e12);
    printf("  %-44s %9s %8s %7s   %9s\n", "variant", "ms", "TFLOP/s", "% ceil", "rel diff");

    /* bf16 inputs, f32 accumulation: reference cuBLAS bf16 → f32. */
    double t_ref = median_ms(run_cublas_bf16_f32, &g, "cublasGemmEx bf16");
    float *ref = fetch(g.c32, false, ncheck);
    vn_dtype prev;
    vn_set_autocast(VN_BF16, &prev);
    double t_venom = median_ms(run_venom, &g, "vn_matmul autocast bf16");
    vn_set_autocast(prev, NULL);
    float *x = g.last ? fetch_tensor(g.last, ncheck) : NULL;
    row("venom vn_matmul, autocast bf16 (f32 in/out)", t_venom, flop, PEAK_BF16,
        x ? rel_diff(x, ref, ncheck) : NAN);
    free(x);
    double t_vnk = median_ms(run_vnk, &g, "vnk_gemm bf16");
    x = fetch(g.c32, false, ncheck);
    row("venom vnk_gemm, bf16 in (pre-converted)", t_vnk, flop, PEAK_BF16,
        rel_diff(x, ref, ncheck));
    free(x);
    row("cuBLAS GemmEx bf16 in, f32 out", t_ref, flop, PEAK_BF16, NAN);
    double t_b16 = median_ms(run_cublas_bf16_bf16, &g, "cublasGemmEx bf16 out");
    x = fetch(g.c16, true, ncheck);
    row("cuBLAS GemmEx bf16 in, bf16 out", t_b16, flop, PEAK_BF16, rel_diff(x, ref, ncheck));
    free(x), free(ref);
    printf("SUMMARY gemm_bf16_venom_%s=%.1f\n", key, flop / t_venom / 1e9);
    printf("SUMMARY gemm_bf16_vnk_%s=%.1f\n", key, flop / t_vnk / 1e9);
    printf("SUMMARY gemm_bf16_cublas_%s=%.1f\n", key, flop / t_ref / 1e9);

    /* f32 and TF32: venom against cuBLAS at the same math mode. */
    for (int tf32 = 0; tf32 < 2; tf32++) {
        g.compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        double peak = tf32 ? PEAK_TF32 : PEAK_F32;
        t_ref = median_ms(run_cublas_f32, &g, tf32 ? "cublasGemmEx tf32" : "cublasGemmEx f32");
        ref = fetch(g.c32, false, ncheck);
        bool prev_tf32 = vn_cuda_set_allow_tf32(tf32);
        t_venom = median_ms(run_venom, &g, tf32 ? "vn_matmul tf32" : "vn_matmul f32");
        vn_cuda_set_allow_tf32(prev_tf32);
        x = g.last ? fetch_tensor(g.last, ncheck) : NULL;
        row(tf32 ? "venom vn_matmul, allow_tf32" : "venom vn_matmul, f32", t_venom, flop, peak,
            x ? rel_diff(x, ref, ncheck) : NAN);
        row(tf32 ? "cuBLAS GemmEx f32, compute 32F_FAST_TF32" : "cuBLAS GemmEx f32, compute 32F",
            t_ref, flop, peak, NAN);
        free(x), free(ref);
        printf("SUMMARY gemm_%s_venom_%s=%.1f\n", tf32 ? "tf32" : "f32", key,
               flop / t_venom / 1e9);
        printf("SUMMARY gemm_%s_cublas_%s=%.1f\n", tf32 ? "tf32" : "f32", key, flop / t_ref / 1e9);
    }
    printf("  (%% ceil: bf16 of %.0f, TF32 of %.0f, f32 of %.0f TFLOP/s)\n", PEAK_BF16, PEAK_TF32,
           PEAK_F32);

    vn_tensor_release(g.last), vn_tensor_release(g.ta), vn_tensor_release(g.tb);
    vnk_free(g.a32, na * 4), vnk_free(g.b32, nb * 4), vnk_free(g.c32, nc * 4);
    vnk_free(g.a16, na * 2), vnk_free(g.b16, nb * 2), vnk_free(g.c16, nc * 2);
    vn_cuda_empty_cache();
}

/* ---- (b) launch overhead ----------------------------------------------------- */

/* µs per call of op over nops calls (after 100 warm-up ones), one
 * synchronize at the end. */
static double us_per_op(int which, const vn_tensor *x, const vn_tensor *y, bool cuda)
{
    double t0 = 0;
    for (int i = -100; i < nops; i++) {
        if (i == 0) {
            if (cuda && vn_cuda_synchronize()) break;
            t0 = now();
        }
        vn_tensor *r = which == 0 ? vn_add(x, y) : which == 1 ? vn_mul(x, y) : vn_relu(x);
        if (!r) {
            fprintf(stderr, "cuda_ops: small op failed: %s\n", vn_last_error());
            failures++;
            return NAN;
        }
        vn_tensor_release(r);
    }
    if (cuda && vn_cuda_synchronize()) {
        fprintf(stderr, "cuda_ops: synchronize: %s\n", vn_last_error());
        failures++;
        return NAN;
    }
    return (now() - t0) / nops * 1e6;
}

static double us_per_kernel(int which, float *out, const float *a, const float *b, int64_t n)
{
    vnk_loop L = {.ndim = 1};
    L.shape[0] = n;
    L.st[0][0] = L.st[1][0] = 1;
    double t0 = 0;
    for (int i = -100; i < nops; i++) {
        if (i == 0) {
            if (vnk_synchronize()) break;
            t0 = now();
        }
        int rc = which == 0 ? vnk_fill(out, VN_F32, n, 1.0)
                            : vnk_map(out, VN_F32, (const void *[]){a, b}, 2, VN_F32, &L, VNK_ADD, 0, 0);
        if (rc) {
            fprintf(stderr, "cuda_ops: kernel failed: %s\n", vnk_error());
            failures++;
            return NAN;
        }
    }
    if (vnk_synchronize()) {
        fprintf(stderr, "cuda_ops: synchronize: %s\n", vnk_error());
        failures++;
        return NAN;
    }
    return (now() - t0) / nops * 1e6;
}

static void bench_launch(void)
{
    printf("\nLaunch overhead: us per call, %d calls, one synchronize at the end\n", nops);
    printf("  %-36s %10s %10s\n", "op", "1 elt", "1024 elts");
    static const char *names[3] = {"add", "mul", "relu"};
    double cuda_us[3][2] = {{0}}, cpu_us[3][2] = {{0}};
    for (int dev = 0; dev < 2; dev++)
        for (int s = 0; s < 2; s++) {
            int64_t n = s ? 1024 : 1;
            vn_tensor *x = vn_randn_on(dev ? VN_CUDA : VN_CPU, 1, &n);
            vn_tensor *y = vn_randn_on(dev ? VN_CUDA : VN_CPU, 1, &n);
            if (!x || !y) die("vn_randn_on", vn_last_error());
            for (int w = 0; w < 3; w++)
                (dev ? cuda_us : cpu_us)[w][s] = us_per_op(w, x, y, dev);
            vn_tensor_release(x), vn_tensor_release(y);
        }
    for (int w = 0; w < 3; w++) {
        char label[64];
        snprintf(label, sizeof label, "venom %s, CUDA tensors", names[w]);
        printf("  %-36s %10.2f %10.2f\n", label, cuda_us[w][0], cuda_us[w][1]);
    }
    for (int w = 0; w < 3; w++) {
        char label[64];
        snprintf(label, sizeof label, "venom %s, CPU tensors", names[w]);
        printf("  %-36s %10.2f %10.2f\n", label, cpu_us[w][0], cpu_us[w][1]);
    }
    float *a = vnk_alloc(4096), *b = vnk_alloc(4096), *out = vnk_alloc(4096);
    if (!a || !b || !out) die("vnk_alloc", vnk_error());
    if (vnk_fill(a, VN_F32, 1024, 1.0) || vnk_fill(b, VN_F32, 1024, 2.0)) die("vnk_fill", vnk_error());
    double kf[2], km[2];
    for (int s = 0; s < 2; s++) {
        kf[s] = us_per_kernel(0, out, a, b, s ? 1024 : 1);
        km[s] = us_per_kernel(1, out, a, b, s ? 1024 : 1);
    }
    printf("  %-36s %10.2f %10.2f\n", "kernels.h vnk_fill (bare launch)", kf[0], kf[1]);
    printf("  %-36s %10.2f %10.2f\n", "kernels.h vnk_map add (bare launch)", km[0], km[1]);
    vnk_free(a, 4096), vnk_free(b, 4096), vnk_free(out, 4096);
    printf("SUMMARY launch_us_add1=%.2f\n", cuda_us[0][0]);
    printf("SUMMARY launch_us_mul1=%.2f\n", cuda_us[1][0]);
    printf("SUMMARY launch_us_relu1=%.2f\n", cuda_us[2][0]);
    printf("SUMMARY launch_us_add1024=%.2f\n", cuda_us[0][1]);
    printf("SUMMARY launch_us_kernel=%.2f\n", km[0]);
}

/* ---- (c) bandwidth ------------------------------------------------------------- */

typedef struct {
    float *src, *dst;
    int64_t n;
    vn_tensor *x, *y;
} bw_ctx;

static int run_map_copy(void *p)
{
    bw_ctx *b = p;
    vnk_loop L = {.ndim = 1};
    L.shape[0] = b->n;
    L.st[0][0] = 1;
    return vnk_map(b->dst, VN_F32, (const void *[]){b->src}, 1, VN_F32, &L, VNK_COPY, 0, 0);
}
static int run_memcpy(void *p)
{
    bw_ctx *b = p;
    return cudaMemcpyAsync(b->dst, b->src, (size_t)b->n * 4, cudaMemcpyDeviceToDevice, 0) !=
           cudaSuccess;
}
static int run_api_add(void *p)
{
    bw_ctx *b = p;
    vn_tensor *r = vn_add(b->x, b->y);
    vn_tensor_release(r);
    return r == NULL;
}

static void bench_bandwidth(int64_t n)
{
    bw_ctx b = {.n = n};
    b.src = vnk_alloc((size_t)n * 4), b.dst = vnk_alloc((size_t)n * 4);
    if (!b.src || !b.dst) die("vnk_alloc", vnk_error());
    if (vnk_fill(b.src, VN_F32, n, 1.5)) die("vnk_fill", vnk_error());
    b.x = vn_randn_on(VN_CUDA, 1, &n), b.y = vn_randn_on(VN_CUDA, 1, &n);
    if (!b.x || !b.y) die("vn_randn_on", vn_last_error());
    printf("\nBandwidth: f32 arrays of %lld elements (%.2f GiB each), bytes read + written\n",
           (long long)n, (double)n * 4 / (1 << 30));
    printf("  %-36s %9s %8s %7s\n", "operation", "ms", "TB/s", "% 4.3");
    struct {
        const char *name;
        work_fn fn;
        double bytes;
    } ops[3] = {{"vnk_map copy (elementwise kernel)", run_map_copy, 8.0 * (double)n},
                {"cudaMemcpyAsync device to device", run_memcpy, 8.0 * (double)n},
                {"vn_add through the API (2 in, 1 out)", run_api_add, 12.0 * (double)n}};
    double copy_tbs = NAN;
    for (int i = 0; i < 3; i++) {
        double ms = median_ms(ops[i].fn, &b, ops[i].name), tbs = ops[i].bytes / ms / 1e9;
        if (i == 0) copy_tbs = tbs;
        printf("  %-36s %9.3f %8.2f %6.1f%%\n", ops[i].name, ms, tbs, 100 * tbs * 1e12 / PEAK_BW);
    }
    printf("SUMMARY copy_tbs=%.2f\n", copy_tbs);
    vn_tensor_release(b.x), vn_tensor_release(b.y);
    vnk_free(b.src, (size_t)n * 4), vnk_free(b.dst, (size_t)n * 4);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* a run killed at its time limit keeps its finished rows */
    int64_t sizes[MAX_SIZES][3] = {{4096, 4096, 4096}, {8192, 8192, 8192}, {16384, 4096, 4096}};
    int nsizes = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick")) {
            reps = 3, nops = 1000, nsizes = 1;
            continue;
        }
        if (!v) goto usage;
        i++;
        if (!strcmp(a, "--reps") && atoi(v) > 0) reps = atoi(v);
        else if (!strcmp(a, "--ops") && atoi(v) > 0) nops = atoi(v);
        else if (!strcmp(a, "--sizes")) {
            nsizes = 0;
            for (const char *s = v; *s && nsizes < MAX_SIZES;) {
                long long m, n, k;
                if (sscanf(s, "%lldx%lldx%lld", &m, &n, &k) != 3 || m < 1 || n < 1 || k < 1)
                    goto usage;
                sizes[nsizes][0] = m, sizes[nsizes][1] = n, sizes[nsizes][2] = k, nsizes++;
                s = strchr(s, ',');
                if (!s) break;
                s++;
            }
        } else goto usage;
    }
    if (vn_cuda_device_count() == 0) {
        printf("cuda_ops: no CUDA device (or venom built without CUDA); nothing to measure\n");
        return 0;
    }
    char dev[128];
    if (vn_cuda_device_name(dev, sizeof dev)) die("vn_cuda_device_name", vn_last_error());
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver), cudaRuntimeGetVersion(&runtime);
    printf("cuda_ops on %s, driver API %d, runtime %d, medians of %d runs\n", dev, driver, runtime,
           reps);
    vn_set_grad_enabled(false);

    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) die("cublasCreate", "failed");
    for (int s = 0; s < nsizes; s++) bench_gemm(h, sizes[s][0], sizes[s][1], sizes[s][2]);
    cublasDestroy(h);

    bench_launch();
    bench_bandwidth(nsizes == 1 && reps == 3 ? (int64_t)1 << 26 : (int64_t)1 << 28);
    if (failures) printf("cuda_ops: %d measurements failed (see the messages above)\n", failures);
    return failures ? 1 : 0;

usage:
    fprintf(stderr, "usage: cuda_ops [--reps N] [--ops N] [--quick] [--sizes MxNxK,...]\n");
    return 2;
}
