/* transformer.cu — the GPT's other blocks on the GPU (the CPU versions are in
 * engine/ops_transformer.c and engine/ops_pointwise.c): the embedding's
 * backward scatter-add, layer normalization forward and backward, and the
 * GELU fused with the bias add of the Linear before it. The embedding's
 * forward is a row gather (vnk_index_select). Everything here is
 * deterministic: no float atomics, each output element summed in a fixed
 * order. */
#include "internal.cuh"
#include "scalar.h"

/* ---- embedding backward ------------------------------------------------------- */

/* Row ownership: CTA (v, column slice) owns dW[v, slice] and walks all n ids
 * in order, adding the gradient rows of the positions that hold v — the same
 * additions in the same order as the CPU loop, so the result is the CPU's
 * bit for bit. The cost is V·n id reads (cached, shared by the CTA), fine
 * for byte-level vocabularies; a 50k-token vocabulary would want the ids
 * sorted first. */
__global__ void embedding_backward(float *dw, const float *g, const int64_t *ids, int64_t n,
                                   int64_t V, int64_t D)
{
    int64_t j = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    for (int64_t v = blockIdx.x; v < V; v += gridDim.x) {
        float acc = 0.0f;
        for (int64_t p = 0; p < n; p++)
            if (ids[p] == v && j < D) acc += g[p * D + j];
        if (j < D) dw[v * D + j] = acc;
    }
}

extern "C" int vnk_embedding_backward(float *dw, const float *g, const int64_t *ids, int64_t n,
                                      int64_t V, int64_t D)
{
    if (V == 0 || D == 0) return 0;
    int64_t slices = (D + VNK_THREADS - 1) / VNK_THREADS;
    if (slices > 65535) return vnk__fail("embedding_backward: D = %lld is too wide", (long long)D);
    dim3 grid(vnk__blocks(V, 1), (unsigned)slices);
    embedding_backward<<<grid, VNK_THREADS>>>(dw, g, ids, n, V, D);
    return vnk__launched("embedding_backward");
}

/* ---- layer_norm ------------------------------------------------------------------ */

/* One warp per row, two passes over the row in f32 (mean, then Σ(x − mean)²:
 * no cancellation for rows with a large mean). stats[2r] = mean,
 * stats[2r + 1] = 1/sqrt(var + eps). */
__global__ void layer_norm_fwd(float *y, float *stats, const float *x, const float *gamma,
                               const float *beta, int64_t rows, int64_t D, float eps)
{
    int lane = threadIdx.x & 31;
    for (int64_t r = VNK_GRID_START >> 5; r < rows; r += VNK_GRID_STEP >> 5) {
        const float *xr = x + r * D;
        float s = 0.0f;
        for (int64_t j = lane; j < D; j += 32) s += xr[j];
        float mean = __shfl_sync(0xffffffffu, vnk__warp_sum(s), 0) / (float)D;
        float q = 0.0f;
        for (int64_t j = lane; j < D; j += 32) {
            float c = xr[j] - mean;
            q += c * c;
        }
        float rstd = rsqrtf(__shfl_sync(0xffffffffu, vnk__warp_sum(q), 0) / (float)D + eps);
        if (lane == 0) stats[2 * r] = mean, stats[2 * r + 1] = rstd;
        for (int64_t j = lane; j < D; j += 32) {
            float h = (xr[j] - mean) * rstd;
            y[r * D + j] = (gamma ? h * gamma[j] : h) + (beta ? beta[j] : 0.0f);
        }
    }
}

extern "C" int vnk_layer_norm(float *y, float *stats, const float *x, const float *gamma,
                              const float *beta, int64_t rows, int64_t D, float eps)
{
    if (rows == 0) return 0;
    layer_norm_fwd<<<vnk__blocks(rows * 32, VNK_THREADS), VNK_THREADS>>>(y, stats, x, gamma, beta,
                                                                          rows, D, eps);
    return vnk__launched("layer_norm");
}

/* dx of each row, one warp per row (formula in engine/ops_transformer.c):
 * dx = (ĝ − mean(ĝ) − x̂·mean(ĝ ⊙ x̂))·rstd, ĝ = g ⊙ gamma. */
__global__ void layer_norm_bwd_x(float *dx, const float *g, const float *x, const float *stats,
                                 const float *gamma, int64_t rows, int64_t D)
{
    int lane = threadIdx.x & 31;
    for (int64_t r = VNK_GRID_START >> 5; r < rows; r += VNK_GRID_STEP >> 5) {
        const float *xr = x + r * D, *gr = g + r * D;
        float mean = stats[2 * r], rstd = stats[2 * r + 1], s1 = 0.0f, s2 = 0.0f;
        for (int64_t j = lane; j < D; j += 32) {
            float gh = gr[j] * (gamma ? gamma[j] : 1.0f);
            s1 += gh;
            s2 += gh * (xr[j] - mean) * rstd;
        }
        float m1 = __shfl_sync(0xffffffffu, vnk__warp_sum(s1), 0) / (float)D;
        float m2 = __shfl_sync(0xffffffffu, vnk__warp_sum(s2), 0) / (float)D;
        for (int64_t j = lane; j < D; j += 32) {
            float gh = gr[j] * (gamma ? gamma[j] : 1.0f), xh = (xr[j] - mean) * rstd;
            dx[r * D + j] = (gh - m1 - xh * m2) * rstd;
        }
    }
}

/* Partial column sums over chunks of LN_CHUNK rows: part_g[c, j] = Σ g·x̂,
 * part_b[c, j] = Σ g over the rows of chunk c; vnk_reduce then adds the
 * chunks in order. */
#define LN_CHUNK 256
__global__ void layer_norm_bwd_params(float *part_g, float *part_b, const float *g, const float *x,
                                      const float *stats, int64_t rows, int64_t D)
{
    int64_t j = (int64_t)blockIdx.y * blockDim.x + threadIdx.x, c = blockIdx.x;
    if (j >= D) return;
    float sg = 0.0f, sb = 0.0f;
    int64_t end = (c + 1) * LN_CHUNK < rows ? (c + 1) * LN_CHUNK : rows;
    for (int64_t r = c * LN_CHUNK; r < end; r++) {
        float gv = g[r * D + j];
        sg += gv * (x[r * D + j] - stats[2 * r]) * stats[2 * r + 1];
        sb += gv;
    }
    if (part_g) part_g[c * D + j] = sg;
    if (part_b) part_b[c * D + j] = sb;
}

extern "C" int vnk_layer_norm_chunks(int64_t rows) { return (int)((rows + LN_CHUNK - 1) / LN_CHUNK); }

extern "C" int vnk_layer_norm_backward(float *dx, float *part_g, float *part_b, const float *g,
                                       const float *x, const float *stats, const float *gamma,
                                       int64_t rows, int64_t D)
{
    if (rows == 0) return 0;
    if (dx) {
        layer_norm_bwd_x<<<vnk__blocks(rows * 32, VNK_THREADS), VNK_THREADS>>>(dx, g, x, stats,
                                                                                gamma, rows, D);
        if (vnk__launched("layer_norm_backward (dx)")) return 1;
    }
    if (!part_g && !part_b) return 0;
    int64_t slices = (D + VNK_THREADS - 1) / VNK_THREADS, chunks = vnk_layer_norm_chunks(rows);
    if (slices > 65535 || chunks > INT32_MAX)
        return vnk__fail("layer_norm_backward: (%lld, %lld) is too large", (long long)rows,
                         (long long)D);
    dim3 grid((unsigned)chunks, (unsigned)slices);
    layer_norm_bwd_params<<<grid, VNK_THREADS>>>(part_g, part_b, g, x, stats, rows, D);
    return vnk__launched("layer_norm_backward (dgamma, dbeta)");
}

/* ---- bias + GELU ------------------------------------------------------------------- */

/* y = gelu(x + b[j]) over rows of D, or (backward) dx = g·gelu'(x + b[j]);
 * gelu_f and gelu_grad from kernels/scalar.h, as on the CPU. */
__global__ void bias_gelu(float *y, const float *x, const float *b, const float *g, int64_t n,
                          int64_t D)
{
    for (int64_t i = VNK_GRID_START; i < n; i += VNK_GRID_STEP) {
        float u = x[i] + b[i % D];
        y[i] = g ? g[i] * gelu_grad(u) : gelu_f(u);
    }
}

extern "C" int vnk_bias_gelu(float *y, const float *x, const float *bias, const float *g,
                             int64_t n, int64_t D)
{
    if (n == 0) return 0;
    bias_gelu<<<vnk__blocks(n, VNK_THREADS), VNK_THREADS>>>(y, x, bias, g, n, D);
    return vnk__launched(g ? "bias_gelu backward" : "bias_gelu");
}
