/* vnm_gpu.c — the V:N:M Sparse Tensor Core kernels (kernels/vnm_sptc.cu,
 * and the sm_90a forward kernels/vnm_wgmma.cu where it runs) against
 * cuBLAS dense bf16 GEMM of the same shape, in the same run. Where the
 * forward is the wgmma kernel, each row also times the mma.sp forward
 * (its fallback) and the check covers both.
 * Prints a table (never pass/fail on time): for W of R × K, X of B rows,
 * each M and V, the median time of forward SpMM, dX, SDDMM and a whole
 * layer step (the three), the dense-equivalent TFLOP/s (2·B·R·K per GEMM)
 * and the speedup over the dense GEMMs (forward: X·Wᵀ; dX: dY·W; SDDMM
 * and step against the dense weight gradient dYᵀ·X and the three dense
 * GEMMs). Before timing each (R, K, M, V) it checks one output of each
 * kernel against the CPU kernels (vn_vnm_spmm, vn_vnm_spmm_t, vn_vnm_sddmm)
 * on fresh random inputs of 96 rows, outputs poisoned with NaN first, and
 * prints PASS/FAIL with the relative error. The dense dX path of the engine
 * (issue 18 part 4) is checked and timed too: k_densify's W bit for bit
 * against the CPU's dense matrix, dY·W_dense followed by the guarded k_dx
 * against the CPU's dX with and without an Inf in dY (the flag of
 * vnk_f32_to_half_check), and the guard writing nothing when its flag is 0;
 * each row ends with the densify time and the dense path's time against
 * k_dx's, the table that should replace the estimated rule of
 * engine/sparse/vnm_sptc.h (vnm_sptc_dx_dense).
 *
 * Links libvenom (built with CUDA), its kernels and the CUDA runtime (for
 * events); includes the engine's internal vnm_sptc.h for the packing. */
#include "kernels.h"
#include "vnm_sptc.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define REPS 9
#define CHECK_B 96

static uint32_t rng = 12345;
static uint32_t next_u32(void) /* xorshift32 */
{
    rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
    return rng;
}
static float uniform(void) /* [-1, 1) */
{
    return (float)(next_u32() >> 8) / 8388608.0f - 1.0f;
}

#define OK(call)                                                                          \
    do {                                                                                  \
        if (call) {                                                                       \
            fprintf(stderr, "vnm_gpu: %s failed: %s\n", #call, vnk_error());             \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)
#define CUDA_OK(call)                                                                     \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "vnm_gpu: %s: %s\n", #call, cudaGetErrorString(e_));          \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)
#define VN_OK_PTR(p)                                                                      \
    do {                                                                                  \
        if (!(p)) {                                                                       \
            fprintf(stderr, "vnm_gpu: %s: %s\n", #p, vn_last_error());                   \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static void *dev_copy(const void *host, size_t n)
{
    void *d = vnk_alloc(n);
    if (!d) OK(1);
    OK(vnk_copy(d, true, host, false, n));
    return d;
}

/* A random V:N:M pattern with bf16-exact random values (the CPU and the GPU
 * then see the same weights). */
static vn_vnm *random_vnm(int64_t R, int64_t K, int64_t V, int64_t M)
{
    int64_t G = (K + M - 1) / M, nb = (R + V - 1) / V;
    vn_tensor *cols = vn_zeros(VN_I32, 3, (int64_t[]){nb, G, 4});
    vn_tensor *idx = vn_zeros(VN_U8, 2, (int64_t[]){R, (G + 1) / 2});
    vn_tensor *vals = vn_zeros(VN_F32, 2, (int64_t[]){R, 2 * G});
    VN_OK_PTR(cols && idx && vals);
    int32_t *c = vn_tensor_data(cols);
    for (int64_t e = 0; e < nb * G; e++) { /* 4 distinct columns by rejection, sorted */
        int n = 0;
        while (n < 4) {
            int32_t m = (int32_t)(next_u32() % (uint32_t)M), dup = 0;
            for (int k = 0; k < n; k++) dup |= c[e * 4 + k] == m;
            if (!dup) c[e * 4 + n++] = m;
        }
        for (int i = 1; i < 4; i++)
            for (int k = i; k > 0 && c[e * 4 + k] < c[e * 4 + k - 1]; k--) {
                int32_t t = c[e * 4 + k];
                c[e * 4 + k] = c[e * 4 + k - 1], c[e * 4 + k - 1] = t;
            }
    }
    static const uint8_t pairs[6] = {0x4, 0x8, 0xc, 0x9, 0xd, 0xe};
    uint8_t *ix = vn_tensor_data(idx);
    float *v = vn_tensor_data(vals);
    for (int64_t r = 0; r < R; r++)
        for (int64_t g = 0; g < G; g++) {
            ix[r * ((G + 1) / 2) + g / 2] |= (uint8_t)(pairs[(r + 5 * g) % 6] << ((g & 1) * 4));
            v[r * 2 * G + 2 * g] = vn__bf16_to_f32(vn__f32_to_bf16(uniform()));
            v[r * 2 * G + 2 * g + 1] = vn__bf16_to_f32(vn__f32_to_bf16(uniform()));
        }
    vn_vnm *s = vn_vnm_from_pattern(R, K, V, 2, M, cols, idx, vals);
    VN_OK_PTR(s);
    vn_tensor_release(cols);
    vn_tensor_release(idx);
    vn_tensor_release(vals);
    return s;
}

/* The packed matrix on the device (free with free_dev). */
static vnk_vnm to_device(const vnm_sptc *p)
{
    size_t tiles = (size_t)(p->row_tiles * p->k_tiles);
    vnk_vnm w = {p->R, p->K, p->V, p->M, p->G, p->nblocks, p->row_tiles, p->k_tiles, p->dtype,
                 dev_copy(p->values, tiles * 512), dev_copy(p->meta, tiles * 64),
                 dev_copy(p->gather, (size_t)(p->nblocks * p->k_tiles * 32) * 4)};
    return w;
}

static void free_dev(const vnk_vnm *w)
{
    size_t tiles = (size_t)(w->row_tiles * w->k_tiles);
    vnk_free((void *)w->values, tiles * 512);
    vnk_free((void *)w->meta, tiles * 64);
    vnk_free((void *)w->gather, (size_t)(w->nblocks * w->k_tiles * 32) * 4);
}

/* bf16 copies of a (rows × cols f32): row-major and, if t, transposed
 * (cols × ld, ld = rows rounded up to 8), on the device. */
static void *dev_bf16(const float *a, int64_t rows, int64_t cols, int t, int64_t *ld)
{
    int64_t l = t ? (rows + 7) / 8 * 8 : cols;
    size_t n = (size_t)(t ? cols * l : rows * cols);
    uint16_t *h = calloc(n ? n : 1, 2);
    if (!h) {
        fprintf(stderr, "vnm_gpu: out of host memory for a %lld x %lld matrix\n", (long long)rows,
                (long long)cols);
        exit(1);
    }
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            h[t ? j * l + i : i * cols + j] = vn__f32_to_bf16(a[i * cols + j]);
    void *d = dev_copy(h, n * 2);
    free(h);
    if (ld) *ld = l;
    return d;
}

static double rel_err(const float *gpu, const float *cpu, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)gpu[i] - cpu[i];
        if (d != d) return INFINITY; /* NaN: an output left unwritten */
        num = fmax(num, fabs(d)), den = fmax(den, fabs((double)cpu[i]));
    }
    return num / (den > 0 ? den : 1);
}

/* The three kernels on fresh CHECK_B-row inputs against the CPU kernels. */
static void verify(const vn_vnm *s, const vnk_vnm *w)
{
    int64_t R = w->R, K = w->K, B = CHECK_B, ldx;
    vn_tensor *x = vn_zeros(VN_F32, 2, (int64_t[]){B, K}), *dy = vn_zeros(VN_F32, 2, (int64_t[]){B, R});
    VN_OK_PTR(x && dy);
    float *xf = vn_tensor_data(x), *dyf = vn_tensor_data(dy);
    for (int64_t i = 0; i < B * K; i++) xf[i] = vn__bf16_to_f32(vn__f32_to_bf16(uniform()));
    for (int64_t i = 0; i < B * R; i++) dyf[i] = vn__bf16_to_f32(vn__f32_to_bf16(uniform()));
    void *xt_d = dev_bf16(xf, B, K, 1, &ldx), *dy_d = dev_bf16(dyf, B, R, 0, NULL);
    vn_tensor *values = vn_vnm_values(s);
    vn_tensor *ref[3] = {vn_vnm_spmm(s, values, x), vn_vnm_spmm_t(s, values, dy), vn_vnm_sddmm(s, dy, x)};
    int64_t n[3] = {B * R, B * K, R * 2 * w->G};
    bool wg = vnk_vnm_fwd_auto(w) == VNK_VNM_FWD_WGMMA;
    const char *name[4] = {wg ? "forward (wgmma)" : "forward (mma.sp)", "dX", "SDDMM", "forward (mma.sp)"};
    for (int k = 0; k < (wg ? 4 : 3); k++) {
        if (k == 3) { /* the fallback forward too, against the same reference */
            float *out = vnk_alloc((size_t)n[0] * 4), *host = malloc((size_t)n[0] * 4);
            CUDA_OK(cudaMemset(out, 0xff, (size_t)n[0] * 4));
            OK(vnk_vnm_spmm_with(VNK_VNM_FWD_MMA_SP, out, w, xt_d, ldx, NULL, B));
            OK(vnk_copy(host, false, out, true, (size_t)n[0] * 4));
            double e = rel_err(host, vn_tensor_data(ref[0]), n[0]);
            printf("  check %-16s %s (relative error %.2e)\n", name[3], e < 1e-3 ? "PASS" : "FAIL", e);
            vnk_free(out, (size_t)n[0] * 4);
            free(host);
            break;
        }
        VN_OK_PTR(ref[k]);
        float *out = vnk_alloc((size_t)n[k] * 4), *host = malloc((size_t)n[k] * 4);
        CUDA_OK(cudaMemset(out, 0xff, (size_t)n[k] * 4)); /* NaN poison */
        if (k == 0) OK(vnk_vnm_spmm(out, w, xt_d, ldx, NULL, B));
        if (k == 1) OK(vnk_vnm_spmm_t(out, w, dy_d, B));
        if (k == 2) OK(vnk_vnm_sddmm(out, w, dy_d, xt_d, ldx, B));
        OK(vnk_copy(host, false, out, true, (size_t)n[k] * 4));
        double e = rel_err(host, vn_tensor_data(ref[k]), n[k]);
        printf("  check %-16s %s (relative error %.2e)\n", name[k], e < 1e-3 ? "PASS" : "FAIL", e);
        vnk_free(out, (size_t)n[k] * 4);
        free(host);
    }
    for (int k = 0; k < 3; k++) vn_tensor_release(ref[k]);
    vnk_free(xt_d, (size_t)(K * ldx) * 2);
    vnk_free(dy_d, (size_t)(B * R) * 2);
    vn_tensor_release(values);
    vn_tensor_release(x);
    vn_tensor_release(dy);
}

static void check_line(const char *name, bool pass, const char *fmt, double v)
{
    printf("  check %-16s %s (", name, pass ? "PASS" : "FAIL");
    printf(fmt, v);
    printf(")\n");
}

/* dX = dY·W as the engine's dense path runs it, into dx (device, B × K):
 * dy (device f32, B × R) converted with the Inf/NaN flag, cuBLAS on
 * wdense, then k_dx guarded by the flag. Returns the flag. */
static int dense_dx(const vnk_vnm *w, const float *dy, int64_t B, const void *wdense, float *dx)
{
    int64_t R = w->R, K = w->K;
    int flag_h = 0;
    void *dy16 = vnk_alloc((size_t)(B * R) * 2);
    int *flag = vnk_alloc(sizeof *flag);
    if (!dy16 || !flag) OK(1);
    CUDA_OK(cudaMemset(flag, 0, sizeof *flag));
    OK(vnk_f32_to_half_check(dy16, VN_BF16, dy, B * R, flag));
    OK(vnk_gemm(dx, K, 0, dy16, R, 0, wdense, K, 0, VN_BF16, false, false, B, K, R, 1, 1, 0, false));
    OK(vnk_vnm_spmm_t_if(dx, w, dy16, B, flag));
    OK(vnk_copy(&flag_h, false, flag, true, sizeof *flag));
    vnk_free(dy16, (size_t)(B * R) * 2);
    vnk_free(flag, sizeof *flag);
    return flag_h;
}

/* The dense dX path against the CPU (see the file's comment). */
static void verify_dense_dx(const vn_vnm *s, const vnk_vnm *w)
{
    int64_t R = w->R, K = w->K, B = CHECK_B, bad = 0;
    size_t nw = (size_t)(R * K), nx = (size_t)(B * K);
    uint16_t *wd = vnk_alloc(nw * 2), *wh = malloc(nw * 2);
    float *dx = vnk_alloc(nx * 4), *dxh = malloc(nx * 4), *dy_d = vnk_alloc((size_t)(B * R) * 4);
    vn_tensor *dense = vn_vnm_to_dense(s), *values = vn_vnm_values(s);
    vn_tensor *dy = vn_zeros(VN_F32, 2, (int64_t[]){B, R});
    VN_OK_PTR(dense && values && dy && wd && wh && dx && dxh && dy_d);
    CUDA_OK(cudaMemset(wd, 0xff, nw * 2));
    OK(vnk_vnm_densify(wd, w));
    OK(vnk_copy(wh, false, wd, true, nw * 2));
    const float *df = vn_tensor_data(dense);
    for (size_t i = 0; i < nw; i++) bad += wh[i] != vn__f32_to_bf16(df[i]);
    check_line("densify", bad == 0, "%.0f elements differ from the CPU's", (double)bad);

    float *dyf = vn_tensor_data(dy);
    for (int64_t i = 0; i < B * R; i++) dyf[i] = vn__bf16_to_f32(vn__f32_to_bf16(uniform()));
    for (int inf = 0; inf < 2; inf++) {
        if (inf) dyf[3 * R + R / 2] = INFINITY; /* batch row 3 */
        vn_tensor *ref = vn_vnm_spmm_t(s, values, dy);
        VN_OK_PTR(ref);
        OK(vnk_copy(dy_d, true, dyf, false, (size_t)(B * R) * 4));
        CUDA_OK(cudaMemset(dx, 0xff, nx * 4));
        int flag = dense_dx(w, dy_d, B, wd, dx);
        OK(vnk_copy(dxh, false, dx, true, nx * 4));
        const float *rf = vn_tensor_data(ref);
        double num = 0, den = 0;
        int64_t nan_bad = 0;
        for (size_t i = 0; i < nx; i++) {
            if (!isfinite(rf[i])) {
                nan_bad += isnan(rf[i]) != isnan(dxh[i]);
                continue;
            }
            nan_bad += !isfinite(dxh[i]);
            num = fmax(num, fabs((double)dxh[i] - rf[i])), den = fmax(den, fabs((double)rf[i]));
        }
        double e = num / (den > 0 ? den : 1);
        check_line(inf ? "dX dense, Inf" : "dX dense", flag == inf && nan_bad == 0 && e < 1e-3,
                   "relative error %.2e", e);
        vn_tensor_release(ref);
    }
    /* The guard off: k_dx with a zero flag leaves the poisoned dX as it was. */
    int *flag = vnk_alloc(sizeof *flag);
    if (!flag) OK(1);
    CUDA_OK(cudaMemset(flag, 0, sizeof *flag));
    CUDA_OK(cudaMemset(dx, 0xff, nx * 4));
    void *dy16 = vnk_alloc((size_t)(B * R) * 2);
    if (!dy16) OK(1);
    OK(vnk_f32_to_half(dy16, VN_BF16, dy_d, B * R));
    OK(vnk_vnm_spmm_t_if(dx, w, dy16, B, flag));
    OK(vnk_copy(dxh, false, dx, true, nx * 4));
    bad = 0;
    for (size_t i = 0; i < nx; i++) bad += ((const uint32_t *)dxh)[i] != 0xffffffffu;
    check_line("guard off", bad == 0, "%.0f elements written", (double)bad);
    vnk_free(flag, sizeof *flag);
    vnk_free(dy16, (size_t)(B * R) * 2);
    vnk_free(wd, nw * 2), vnk_free(dx, nx * 4), vnk_free(dy_d, (size_t)(B * R) * 4);
    free(wh), free(dxh);
    vn_tensor_release(dense), vn_tensor_release(values), vn_tensor_release(dy);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of `what` (0 fwd (the kernel vnk_vnm_spmm picks),
 * 1 dX, 2 SDDMM, 3 step, 4 dense X·Wᵀ, 5 dense dY·W, 6 dense dYᵀ·X, 7 fwd
 * by the mma.sp kernel, 8 k_densify into wdn, 9 the engine's dense dX path
 * after the conversion: dY·wdn on cuBLAS then k_dx guarded by a zero flag)
 * after one warm-up run. */
typedef struct {
    const vnk_vnm *w;
    int64_t B, R, K, ldx;
    void *xt, *x, *dy, *wd, *wdn;
    float *y, *dx, *dv, *dw;
    const int *flag0; /* dev, 0 */
} bench_args;

static void run_once(const bench_args *a, int what)
{
    const vnk_vnm *w = a->w;
    if (what == 0 || what == 3) OK(vnk_vnm_spmm(a->y, w, a->xt, a->ldx, NULL, a->B));
    if (what == 1 || what == 3) OK(vnk_vnm_spmm_t(a->dx, w, a->dy, a->B));
    if (what == 2 || what == 3) OK(vnk_vnm_sddmm(a->dv, w, a->dy, a->xt, a->ldx, a->B));
    if (what == 7) OK(vnk_vnm_spmm_with(VNK_VNM_FWD_MMA_SP, a->y, w, a->xt, a->ldx, NULL, a->B));
    if (what == 4)
        OK(vnk_gemm(a->y, a->R, 0, a->x, a->K, 0, a->wd, a->K, 0, VN_BF16, false, true, a->B, a->R, a->K, 1, 1, 0, false));
    if (what == 5)
        OK(vnk_gemm(a->dx, a->K, 0, a->dy, a->R, 0, a->wd, a->K, 0, VN_BF16, false, false, a->B, a->K, a->R, 1, 1, 0, false));
    if (what == 6)
        OK(vnk_gemm(a->dw, a->K, 0, a->dy, a->R, 0, a->x, a->K, 0, VN_BF16, true, false, a->R, a->K, a->B, 1, 1, 0, false));
    if (what == 8) OK(vnk_vnm_densify(a->wdn, w));
    if (what == 9) {
        OK(vnk_gemm(a->dx, a->K, 0, a->dy, a->R, 0, a->wdn, a->K, 0, VN_BF16, false, false, a->B, a->K, a->R, 1, 1, 0, false));
        OK(vnk_vnm_spmm_t_if(a->dx, w, a->dy, a->B, a->flag0));
    }
}

static float time_ms(const bench_args *a, int what)
{
    cudaEvent_t t0, t1;
    float ms[REPS];
    CUDA_OK(cudaEventCreate(&t0));
    CUDA_OK(cudaEventCreate(&t1));
    run_once(a, what);
    for (int r = 0; r < REPS; r++) {
        CUDA_OK(cudaEventRecord(t0, 0));
        run_once(a, what);
        CUDA_OK(cudaEventRecord(t1, 0));
        CUDA_OK(cudaEventSynchronize(t1));
        CUDA_OK(cudaEventElapsedTime(&ms[r], t0, t1));
    }
    OK(vnk_synchronize());
    CUDA_OK(cudaEventDestroy(t0));
    CUDA_OK(cudaEventDestroy(t1));
    qsort(ms, REPS, sizeof ms[0], cmp_float);
    return ms[REPS / 2];
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* a run killed at its time limit keeps its finished rows */
    if (vnk_device_count() == 0) {
        printf("vnm_gpu: no CUDA device\n");
        return 0;
    }
    char dev[128];
    OK(vnk_device_name(dev, sizeof dev));
    printf("vnm_gpu on %s, bf16 inputs, f32 accumulation, medians of %d runs\n", dev, REPS);
    const int64_t shapes[3][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008}};
    const int64_t Bs[2] = {4096, 16384}, Ms[5] = {4, 8, 16, 32, 64}, Vs[2] = {64, 128};
    /* One set of random 16-bit operands, sized for the largest shape. */
    size_t big = (size_t)16384 * 11008;
    uint16_t *h = malloc(big * 2);
    for (size_t i = 0; i < big; i++) h[i] = vn__f32_to_bf16(uniform());
    void *xt = dev_copy(h, big * 2), *x = dev_copy(h, big * 2), *dy = dev_copy(h, big * 2),
         *wd = dev_copy(h, (size_t)11008 * 4096 * 2), *wdn = vnk_alloc((size_t)11008 * 4096 * 2);
    int *flag0 = vnk_alloc(sizeof *flag0);
    if (!wdn || !flag0) OK(1);
    CUDA_OK(cudaMemset(flag0, 0, sizeof *flag0));
    float *y = vnk_alloc(big * 4), *dx = vnk_alloc(big * 4), *dv = vnk_alloc(big * 4),
          *dw = vnk_alloc((size_t)11008 * 4096 * 4);
    free(h);
    if (!y || !dx || !dv || !dw) OK(1);
    printf("forward kernel: wgmma (sm_90a) where V %% 64 == 0 on a compute capability 9.0 device in a "
           "build with the sm_90a code, else mma.sp; rows with V=64 here use %s\n",
           vnk_vnm_fwd_auto(&(vnk_vnm){.V = 64}) == VNK_VNM_FWD_WGMMA ? "wgmma" : "mma.sp");
    printf("%6s %6s %6s %3s %4s | %-22s | %-22s | %-22s | %-22s\n", "R", "K", "B", "M", "V",
           "fwd ms TF/s x", "dX ms TF/s x", "SDDMM ms TF/s x", "step ms TF/s x");
    for (int sh = 0; sh < 3; sh++)
        for (int im = 0; im < 5; im++)
            for (int iv = 0; iv < 2; iv++) {
                int64_t R = shapes[sh][0], K = shapes[sh][1], M = Ms[im], V = Vs[iv];
                vn_vnm *s = random_vnm(R, K, V, M);
                vnm_sptc *p = vnm_sptc_pack(s, VN_BF16);
                VN_OK_PTR(p);
                vnk_vnm w = to_device(p);
                printf("R=%lld K=%lld M=%lld V=%lld\n", (long long)R, (long long)K, (long long)M, (long long)V);
                verify(s, &w);
                verify_dense_dx(s, &w);
                for (int ib = 0; ib < 2; ib++) {
                    int64_t B = Bs[ib];
                    bench_args a = {&w, B, R, K, B, xt, x, dy, wd, wdn, y, dx, dv, dw, flag0};
                    float dense[3] = {time_ms(&a, 4), time_ms(&a, 5), time_ms(&a, 6)};
                    float dense_step = dense[0] + dense[1] + dense[2];
                    double flop = 2.0 * B * R * K;
                    printf("%6lld %6lld %6lld %3lld %4lld", (long long)R, (long long)K, (long long)B,
                           (long long)M, (long long)V);
                    float sparse_dx = 0;
                    for (int k = 0; k < 4; k++) {
                        float ms = time_ms(&a, k), base = k < 3 ? dense[k] : dense_step;
                        double f = k < 3 ? flop : 3 * flop;
                        printf(" | %7.3f %6.1f %5.2fx", ms, f / ms / 1e9, base / ms);
                        if (k == 1) sparse_dx = ms;
                    }
                    printf(" | dense fwd %.3f ms %.1f TF/s", dense[0], flop / dense[0] / 1e9);
                    if (vnk_vnm_fwd_auto(&w) == VNK_VNM_FWD_WGMMA) { /* fwd was wgmma: the fallback too */
                        float ms = time_ms(&a, 7);
                        printf(" | fwd mma.sp %.3f ms %.2fx", ms, dense[0] / ms);
                    }
                    float dense_path = time_ms(&a, 9);
                    printf(" | densify %.3f ms | dX dense path %.3f ms %.2fx of k_dx", time_ms(&a, 8),
                           dense_path, sparse_dx / dense_path);
                    printf("\n");
                }
                free_dev(&w);
                vnm_sptc_free(p);
                vn_vnm_free(s);
            }
    vnk_free(xt, big * 2), vnk_free(x, big * 2), vnk_free(dy, big * 2);
    vnk_free(wd, (size_t)11008 * 4096 * 2), vnk_free(wdn, (size_t)11008 * 4096 * 2);
    vnk_free(flag0, sizeof *flag0);
    vnk_free(y, big * 4), vnk_free(dx, big * 4), vnk_free(dv, big * 4);
    vnk_free(dw, (size_t)11008 * 4096 * 4);
    return 0;
}
