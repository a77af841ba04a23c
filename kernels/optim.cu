/* optim.cu — SGD and Adam/AdamW steps over many parameters per launch, with
 * the formulas of vn_sgd_step / vn_adam_step (engine/optim.c).
 *
 * A model has dozens of parameter tensors, many of them small (biases); a
 * launch each would cost more than the arithmetic. So up to CHUNK tensors
 * travel in one struct passed by value (kernel parameters live in constant
 * memory, limit 4 KiB classic), and a prefix sum of per-tensor block counts
 * (`first`) tells each block which tensor it serves. */
#include "internal.cuh"

#include <math.h>
#include <string.h>

#define CHUNK 48
/* Blocks per tensor at most; larger tensors are walked grid-stride. */
#define MAX_BLOCKS_PER_TENSOR 1024

typedef struct {
    float *p[CHUNK];
    const float *g[CHUNK];
    float *s1[CHUNK]; /* momentum buffer, or Adam's exp_avg */
    float *s2[CHUNK]; /* Adam's exp_avg_sq */
    int64_t n[CHUNK];
    int first[CHUNK + 1]; /* tensor t owns blocks first[t] .. first[t+1]−1 */
    int count;
} chunk;

/* The tensor this block serves and the block's rank among its blocks. */
static __device__ inline int tensor_of(const chunk &c, int *rank, int *nblocks)
{
    int b = (int)blockIdx.x, t = 0;
    while (t + 1 < c.count && c.first[t + 1] <= b) t++;
    *rank = b - c.first[t];
    *nblocks = c.first[t + 1] - c.first[t];
    return t;
}

typedef struct {
    float lr, momentum, keep, wd; /* keep = 1 − dampening */
    bool nesterov, first_step;
} sgd_hyper;

static __global__ void sgd_kernel(chunk c, sgd_hyper h)
{
    int rank, nb, t = tensor_of(c, &rank, &nb);
    float *p = c.p[t], *buf = c.s1[t];
    const float *g = c.g[t];
    int64_t n = c.n[t];
    /* the first momentum step takes buf = d: the same update with mu = 0,
     * keep = 1 */
    float bmu = h.first_step ? 0.0f : h.momentum, bkeep = h.first_step ? 1.0f : h.keep;
    for (int64_t i = (int64_t)rank * blockDim.x + threadIdx.x; i < n; i += (int64_t)nb * blockDim.x) {
        if (h.momentum == 0.0f) {
            p[i] -= h.lr * (g[i] + h.wd * p[i]);
            continue;
        }
        float d = g[i] + h.wd * p[i];
        float b = bmu * buf[i] + bkeep * d;
        buf[i] = b;
        p[i] -= h.lr * (h.nesterov ? d + h.momentum * b : b);
    }
}

typedef struct {
    float step_size, inv_sqrt_bc2, b1, b2, c1, c2, eps, decay, wd;
} adam_hyper;

static __global__ void adam_kernel(chunk c, adam_hyper h)
{
    int rank, nb, t = tensor_of(c, &rank, &nb);
    float *p = c.p[t], *m = c.s1[t], *v = c.s2[t];
    const float *g = c.g[t];
    int64_t n = c.n[t];
    for (int64_t i = (int64_t)rank * blockDim.x + threadIdx.x; i < n; i += (int64_t)nb * blockDim.x) {
        float pi = p[i] * h.decay;
        float gi = g[i] + h.wd * p[i];
        float mi = h.b1 * m[i] + h.c1 * gi;
        float vi = h.b2 * v[i] + h.c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - h.step_size * mi / (sqrtf(vi) * h.inv_sqrt_bc2 + h.eps);
    }
}

/* Fills c with tensors [start, start + c->count) (those with n > 0) and the
 * block prefix; returns the total number of blocks (0: nothing to do). */
static int fill_chunk(chunk *c, int start, int end, float *const *param, const float *const *grad,
                      float *const *s1, float *const *s2, const int64_t *n)
{
    int k = 0, blocks = 0;
    for (int t = start; t < end; t++) {
        if (n[t] == 0) continue;
        int64_t nb = (n[t] + VNK_THREADS - 1) / VNK_THREADS;
        if (nb > MAX_BLOCKS_PER_TENSOR) nb = MAX_BLOCKS_PER_TENSOR;
        c->p[k] = param[t];
        c->g[k] = grad[t];
        c->s1[k] = s1 ? s1[t] : NULL;
        c->s2[k] = s2 ? s2[t] : NULL;
        c->n[k] = n[t];
        c->first[k] = blocks;
        blocks += (int)nb;
        k++;
    }
    c->first[k] = blocks;
    c->count = k;
    return blocks;
}

/* Checks the arrays and every tensor's pointers; `need1`/`need2` say
 * whether s1/s2 must be present. */
static int check_lists(const char *op, int count, float *const *param, const float *const *grad,
                       float *const *s1, bool need1, float *const *s2, bool need2, const int64_t *n)
{
    if (count < 0) return vnk__fail("%s: negative count %d", op, count);
    if (count == 0) return 0;
    if (!param || !grad || !n || (need1 && !s1) || (need2 && !s2))
        return vnk__fail("%s: NULL pointer array", op);
    for (int t = 0; t < count; t++) {
        if (n[t] < 0) return vnk__fail("%s: parameter %d has negative size %lld", op, t, (long long)n[t]);
        if (n[t] > 0 && (!param[t] || !grad[t] || (need1 && !s1[t]) || (need2 && !s2[t])))
            return vnk__fail("%s: parameter %d has a NULL tensor", op, t);
    }
    return 0;
}

int vnk_sgd_step(float *const *param, float *const *buf, const float *const *grad, const int64_t *n,
                 int count, float lr, float momentum, float dampening, float weight_decay,
                 bool nesterov, bool first_step)
{
    bool need_buf = momentum != 0.0f;
    if (check_lists("vnk_sgd_step", count, param, grad, buf, need_buf, NULL, false, n)) return 1;
    sgd_hyper h = {lr, momentum, (float)(1.0 - (double)dampening), weight_decay, nesterov, first_step};
    chunk c;
    memset(&c, 0, sizeof c);
    for (int start = 0; start < count; start += CHUNK) {
        int end = start + CHUNK < count ? start + CHUNK : count;
        int blocks = fill_chunk(&c, start, end, param, grad, need_buf ? buf : NULL, NULL, n);
        if (blocks == 0) continue;
        sgd_kernel<<<blocks, VNK_THREADS>>>(c, h);
        if (vnk__launched("vnk_sgd_step")) return 1;
    }
    return 0;
}

int vnk_adam_step(float *const *param, float *const *exp_avg, float *const *exp_avg_sq,
                  const float *const *grad, const int64_t *n, int count, float lr, float beta1,
                  float beta2, float eps, float weight_decay, bool decoupled, float bc1, float bc2)
{
    if (check_lists("vnk_adam_step", count, param, grad, exp_avg, true, exp_avg_sq, true, n)) return 1;
    if (!(bc1 > 0.0f) || !(bc2 > 0.0f))
        return vnk__fail("vnk_adam_step: bias corrections must be > 0, got %g and %g", (double)bc1,
                         (double)bc2);
    /* Folded as on the CPU, in double:
     * p − lr·(m/bc1)/(sqrt(v/bc2) + eps) = p − (lr/bc1)·m/(sqrt(v)/sqrt(bc2) + eps) */
    adam_hyper h;
    h.step_size = (float)((double)lr / (double)bc1);
    h.inv_sqrt_bc2 = (float)(1.0 / sqrt((double)bc2));
    h.b1 = beta1;
    h.b2 = beta2;
    h.c1 = (float)(1.0 - (double)beta1);
    h.c2 = (float)(1.0 - (double)beta2);
    h.eps = eps;
    h.decay = decoupled ? (float)(1.0 - (double)lr * (double)weight_decay) : 1.0f;
    h.wd = decoupled ? 0.0f : weight_decay;
    chunk c;
    memset(&c, 0, sizeof c);
    for (int start = 0; start < count; start += CHUNK) {
        int end = start + CHUNK < count ? start + CHUNK : count;
        int blocks = fill_chunk(&c, start, end, param, grad, exp_avg, exp_avg_sq, n);
        if (blocks == 0) continue;
        adam_kernel<<<blocks, VNK_THREADS>>>(c, h);
        if (vnk__launched("vnk_adam_step")) return 1;
    }
    return 0;
}
