/* batchnorm.cu — batch normalisation's per-channel statistics, the
 * normalisation itself and its backward, and the per-channel sum that is
 * conv2d's bias gradient. CPU twins in engine/ops_batchnorm.c and
 * ops_conv.c. Each channel's sums belong to one block: every thread adds a
 * fixed stride of the channel's values in double, then a fixed tree
 * combines the threads, so the result repeats bit for bit (no atomics). */
#include "internal.cuh"

#define BN_THREADS 256

/* The sum of v over the block (blockDim.x a multiple of 32), to every
 * thread; every thread must call it. */
static __device__ double block_sum(double v)
{
    __shared__ double part[32];
    __shared__ double total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double w = lane < nwarps ? part[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) w += __shfl_down_sync(0xffffffffu, w, o);
        if (lane == 0) total = w;
    }
    __syncthreads();
    double r = total;
    __syncthreads(); /* part and total are reused by the next call */
    return r;
}

/* Flat index of value k (of B·S) of channel c in x (B, C, S). */
static __device__ inline int64_t at(int64_t k, int64_t c, int64_t C, int64_t S)
{
    return (k / S * C + c) * S + k % S;
}

static unsigned channel_blocks(int64_t C)
{
    return (unsigned)(C < VNK_MAX_BLOCKS ? (C > 0 ? C : 1) : VNK_MAX_BLOCKS);
}

static __global__ void channel_sum_kernel(float *out, const float *x, int64_t B, int64_t C,
                                          int64_t S)
{
    for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
        double s = 0;
        for (int64_t k = threadIdx.x; k < B * S; k += blockDim.x) s += x[at(k, c, C, S)];
        s = block_sum(s);
        if (threadIdx.x == 0) out[c] = (float)s;
    }
}

int vnk_channel_sum(float *out, const float *x, int64_t B, int64_t C, int64_t S)
{
    if (B < 0 || C < 0 || S < 0) return vnk__fail("vnk_channel_sum: negative size");
    if (C == 0) return 0;
    if (!out || !x) return vnk__fail("vnk_channel_sum: NULL pointer");
    channel_sum_kernel<<<channel_blocks(C), BN_THREADS>>>(out, x, B, C, S);
    return vnk__launched("vnk_channel_sum");
}

static __global__ void bn_stats_kernel(float *mean, float *rstd, float *rm, int64_t rms, float *rv,
                                       int64_t rvs, const float *x, int64_t B, int64_t C,
                                       int64_t S, bool training, double momentum, double eps)
{
    for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
        if (!training) {
            if (threadIdx.x == 0) {
                mean[c] = rm[c * rms];
                rstd[c] = (float)(1 / sqrt((double)rv[c * rvs] + eps));
            }
            continue;
        }
        double n = (double)(B * S), s = 0, q = 0;
        for (int64_t k = threadIdx.x; k < B * S; k += blockDim.x) s += x[at(k, c, C, S)];
        double m = block_sum(s) / n;
        for (int64_t k = threadIdx.x; k < B * S; k += blockDim.x) {
            double d = x[at(k, c, C, S)] - m;
            q += d * d;
        }
        q = block_sum(q);
        if (threadIdx.x == 0) {
            mean[c] = (float)m;
            rstd[c] = (float)(1 / sqrt(q / n + eps));
            if (rm) {
                rm[c * rms] = (float)((1 - momentum) * rm[c * rms] + momentum * m);
                rv[c * rvs] = (float)((1 - momentum) * rv[c * rvs] + momentum * q / (n - 1));
            }
        }
    }
}

int vnk_batch_norm_stats(float *mean, float *rstd, float *running_mean, int64_t rm_stride,
                         float *running_var, int64_t rv_stride, const float *x, int64_t B,
                         int64_t C, int64_t S, bool training, double momentum, double eps)
{
    if (B < 0 || C < 0 || S < 0) return vnk__fail("vnk_batch_norm_stats: negative size");
    if (C == 0) return 0;
    if (!mean || !rstd || (training && !x) || (!training && (!running_mean || !running_var)) ||
        !running_mean != !running_var)
        return vnk__fail("vnk_batch_norm_stats: NULL pointer");
    bn_stats_kernel<<<channel_blocks(C), BN_THREADS>>>(mean, rstd, running_mean, rm_stride,
                                                       running_var, rv_stride, x, B, C, S,
                                                       training, momentum, eps);
    return vnk__launched("vnk_batch_norm_stats");
}

static __global__ void bn_apply_kernel(float *y, const float *x, const float *mean,
                                       const float *rstd, const float *w, const float *b,
                                       int64_t C, int64_t S, int64_t total)
{
    for (int64_t t = VNK_GRID_START; t < total; t += VNK_GRID_STEP) {
        int64_t c = t / S % C;
        y[t] = (x[t] - mean[c]) * rstd[c] * (w ? w[c] : 1.0f) + (b ? b[c] : 0.0f);
    }
}

int vnk_batch_norm_apply(float *y, const float *x, const float *mean, const float *rstd,
                         const float *w, const float *b, int64_t B, int64_t C, int64_t S)
{
    if (B < 0 || C < 0 || S < 0) return vnk__fail("vnk_batch_norm_apply: negative size");
    int64_t total = B * C * S;
    if (total == 0) return 0;
    if (!y || !x || !mean || !rstd) return vnk__fail("vnk_batch_norm_apply: NULL pointer");
    bn_apply_kernel<<<vnk__blocks(total, VNK_THREADS), VNK_THREADS>>>(y, x, mean, rstd, w, b, C,
                                                                      S, total);
    return vnk__launched("vnk_batch_norm_apply");
}

static __global__ void bn_backward_kernel(float *dx, float *dw, float *db, const float *dy,
                                          const float *x, const float *mean, const float *rstd,
                                          const float *w, int64_t B, int64_t C, int64_t S,
                                          bool training)
{
    for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
        double m = mean[c], r = rstd[c], gam = w ? w[c] : 1.0, n = (double)(B * S);
        double sdy = 0, sdyx = 0;
        for (int64_t k = threadIdx.x; k < B * S; k += blockDim.x) {
            int64_t i = at(k, c, C, S);
            sdy += dy[i];
            sdyx += dy[i] * (x[i] - m) * r;
        }
        sdy = block_sum(sdy);
        sdyx = block_sum(sdyx);
        if (threadIdx.x == 0) {
            if (dw) dw[c] = (float)sdyx;
            if (db) db[c] = (float)sdy;
        }
        if (!dx) continue;
        double mg = training ? gam * sdy / n : 0, mgx = training ? gam * sdyx / n : 0;
        for (int64_t k = threadIdx.x; k < B * S; k += blockDim.x) {
            int64_t i = at(k, c, C, S);
            double xh = (x[i] - m) * r;
            dx[i] = (float)(r * (gam * dy[i] - mg - xh * mgx));
        }
    }
}

int vnk_batch_norm_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                            const float *mean, const float *rstd, const float *w, int64_t B,
                            int64_t C, int64_t S, bool training)
{
    if (B < 0 || C < 0 || S < 0) return vnk__fail("vnk_batch_norm_backward: negative size");
    if (C == 0) return 0;
    if (!dy || !x || !mean || !rstd) return vnk__fail("vnk_batch_norm_backward: NULL pointer");
    bn_backward_kernel<<<channel_blocks(C), BN_THREADS>>>(dx, dw, db, dy, x, mean, rstd, w, B, C,
                                                          S, training);
    return vnk__launched("vnk_batch_norm_backward");
}
