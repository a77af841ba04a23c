/* attention.cu — causal scaled-dot-product attention in the FlashAttention-2
 * style (Dao 2023): a CTA takes 64 rows, each of its 4 warps 16 of them, and
 * sweeps 64-wide tiles of the other side, so the T × T scores never exist in
 * memory. Products run on bf16 tensor cores (mma.sync.m16n8k16, f32
 * accumulation); inputs and outputs are f32 and are rounded to bf16 when
 * they are loaded. The softmax is online (running max and sum per row) and
 * the forward saves lse = max + log(sum) per row, from which the backward
 * recomputes the probabilities.
 *
 * Tiles of K, V (Q, dO in the dK/dV kernel) sit in shared memory as bf16,
 * rows padded by 8 so that the 8 rows an ldmatrix reads fall in 8
 * different groups of 4 banks; the B operands come from there by
 * ldmatrix(.trans), the A operands live in registers.
 *
 * Backward, deterministic (no atomics): one kernel over key tiles gives dK
 * and dV, another over query tiles gives dQ; both recompute P from lse.
 * With D = rowsum(dO ⊙ O):  dS = P ⊙ (dO·Vᵀ − D),  dV = Pᵀ·dO,
 * dK = dSᵀ·Q·scale,  dQ = dS·K·scale.
 *
 * Tile and fragment arithmetic: kernels/attention_tile.h, shared with the
 * host emulator tests/c/test_attention_emu.c, which replays these loops. */
#include "attention_tile.h"
#include "internal.cuh"

typedef __nv_bfloat16 bf16;

/* Two floats as one register of bf16 (lo in the low half), rounded to nearest even. */
static __device__ inline uint32_t pack2(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* d (16 × 8 f32) += a (16 × 16 bf16) · b (16 × 8 bf16). */
static __device__ inline void mma16816(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* The A fragments (D/16 of them) of rows r0..r0+15 of a (T × D) f32 matrix
 * with rows ld elements apart, rows past T read as 0. */
template <int D>
static __device__ inline void load_a(uint32_t f[D / 16][4], const float *X, int64_t ld, int r0,
                                     int T, int lane)
{
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            int row = r0 + att_a_row(lane, 2 * r), col = ks * 16 + att_a_col(lane, 2 * r);
            float lo = row < T ? X[row * ld + col] : 0.0f;
            float hi = row < T ? X[row * ld + col + 1] : 0.0f;
            f[ks][r] = pack2(lo, hi);
        }
}

/* Rows c0..c0+63 of a (T × D) f32 matrix with rows ld elements apart into
 * shared memory as bf16 (rows past T zero), by the whole CTA. */
template <int D>
static __device__ inline void load_tile(bf16 (*s)[D + VNK_ATT_PAD], const float *X, int64_t ld,
                                        int c0, int T)
{
    for (int e = threadIdx.x; e < VNK_ATT_BC * D; e += blockDim.x) {
        int r = e / D, c = e % D;
        s[r][c] = __float2bfloat16_rn(c0 + r < T ? X[(c0 + r) * ld + c] : 0.0f);
    }
}

static __device__ inline uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* The B fragment of rows (k) ks·16.. and columns (n) nb·8.. of a matrix whose
 * element (k, n) is s[n][k] (B = Xᵀ for a row-major tile X): one ldmatrix.x2
 * (addresses: attention_tile.h). */
template <int D>
static __device__ inline void frag_bt(uint32_t b[2], bf16 (*s)[D + VNK_ATT_PAD], int ks, int nb,
                                      int lane)
{
    const bf16 *p = &s[att_ldm_bt_row(lane, nb)][att_ldm_bt_col(lane, ks)];
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(smem_addr(p)));
}

/* The same, for a matrix whose element (k, n) is s[k][n] (B = X): one
 * ldmatrix.x2.trans. */
template <int D>
static __device__ inline void frag_b(uint32_t b[2], bf16 (*s)[D + VNK_ATT_PAD], int ks, int nb,
                                     int lane)
{
    const bf16 *p = &s[att_ldm_b_row(lane, ks)][att_ldm_b_col(nb)];
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(smem_addr(p)));
}

/* c (16 × 16, two C fragments) = a (16 × D, A fragments) · sᵀ restricted to
 * rows 16j..16j+15 of s (64 × D row-major smem): chunk j of a score tile. */
template <int D>
static __device__ inline void mma_qkt16(float c[2][4], const uint32_t a[D / 16][4],
                                        bf16 (*s)[D + VNK_ATT_PAD], int j, int lane)
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
#pragma unroll
        for (int i = 0; i < 4; i++) c[h][i] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++) {
            uint32_t b[2];
            frag_bt<D>(b, s, ks, 2 * j + h, lane);
            mma16816(c[h], a[ks], b);
        }
    }
}

/* acc (16 × D) += c (16 × 16, two C fragments, rounded to bf16 as an A
 * fragment) · rows 16j..16j+15 of s (64 × D row-major smem). */
template <int D>
static __device__ inline void mma_pv16(float acc[D / 8][4], const float c[2][4],
                                       bf16 (*s)[D + VNK_ATT_PAD], int j, int lane)
{
    uint32_t a[4];
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const float *t = c[att_c_to_a_tile(r)];
        a[r] = pack2(t[att_c_to_a_elem(r)], t[att_c_to_a_elem(r) + 1]);
    }
#pragma unroll
    for (int nd = 0; nd < D / 8; nd++) {
        uint32_t b[2];
        frag_b<D>(b, s, j, nd, lane);
        mma16816(acc[nd], a, b);
    }
}

/* The sum (max) over the 4 lanes of a quad: the lanes that hold one row. */
static __device__ inline float quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

static __device__ inline float quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

/* ---- forward ---------------------------------------------------------------------- */

/* Head blockIdx.y, queries blockIdx.x·64..: q, k, v in layout `in`, O in
 * `ol`, lse (B·H, T) contiguous. */
template <int D>
__global__ void __launch_bounds__(VNK_ATT_WARPS * 32)
attention_fwd(float *O, float *lse, const float *Q, const float *K, const float *V,
              att_layout in, att_layout ol, int H, int T, float scale)
{
    __shared__ __align__(16) bf16 sK[VNK_ATT_BC][D + VNK_ATT_PAD], sV[VNK_ATT_BC][D + VNK_ATT_PAD];
    int bh = blockIdx.y;
    int64_t ib = att_head_offset(in, bh, H);
    Q += ib, K += ib, V += ib, O += att_head_offset(ol, bh, H), lse += (int64_t)bh * T;
    int lane = threadIdx.x & 31, q0 = blockIdx.x * VNK_ATT_BR,
        qw = q0 + (threadIdx.x >> 5) * VNK_ATT_ROWS;
    uint32_t qf[D / 16][4];
    load_a<D>(qf, Q, in.row, qw, T, lane);
    float o[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    int tiles = att_key_tiles(q0, T);
    for (int kt = 0; kt < tiles; kt++) {
        int k0 = kt * VNK_ATT_BC;
        __syncthreads(); /* the previous tile is used up */
        load_tile<D>(sK, K, in.row, k0, T);
        load_tile<D>(sV, V, in.row, k0, T);
        __syncthreads();
        /* the whole 16 × 64 score tile: the online softmax wants its row max */
        float s[VNK_ATT_BC / 8][4];
#pragma unroll
        for (int j = 0; j < VNK_ATT_BC / 16; j++) mma_qkt16<D>(s + 2 * j, qf, sK, j, lane);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nb = 0; nb < VNK_ATT_BC / 8; nb++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int q = qw + att_c_row(lane, i), k = k0 + nb * 8 + att_c_col(lane, i);
                s[nb][i] = att_visible(q, k, T) ? s[nb][i] * scale : -INFINITY;
                mx[i >> 1] = fmaxf(mx[i >> 1], s[nb][i]);
            }
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float mn = fmaxf(m[h], quad_max(mx[h]));
            alpha[h] = att_rescale(m[h], mn);
            m[h] = mn;
            l[h] *= alpha[h];
        }
#pragma unroll
        for (int nb = 0; nb < VNK_ATT_BC / 8; nb++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                s[nb][i] = att_prob(s[nb][i], m[i >> 1]);
                l[i >> 1] += s[nb][i];
            }
#pragma unroll
        for (int nd = 0; nd < D / 8; nd++)
#pragma unroll
            for (int i = 0; i < 4; i++) o[nd][i] *= alpha[i >> 1];
#pragma unroll
        for (int j = 0; j < VNK_ATT_BC / 16; j++) mma_pv16<D>(o, s + 2 * j, sV, j, lane);
    }
#pragma unroll
    for (int h = 0; h < 2; h++) l[h] = quad_sum(l[h]);
#pragma unroll
    for (int nd = 0; nd < D / 8; nd++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int q = qw + att_c_row(lane, i);
            if (q < T) O[q * ol.row + nd * 8 + att_c_col(lane, i)] = o[nd][i] / l[i >> 1];
        }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int q = qw + att_c_row(lane, 2 * h);
        if ((lane & 3) == 0 && q < T) lse[q] = m[h] + logf(l[h]);
    }
}

/* ---- backward ------------------------------------------------------------------------ */

/* dvec[bh·T + t] = Σ_d dO[bh, t, d]·O[bh, t, d] (both in layout ol), one
 * warp per row. */
__global__ void attention_bwd_dot(float *dvec, const float *dO, const float *O, att_layout ol,
                                  int H, int T, int64_t rows, int D)
{
    int lane = threadIdx.x & 31;
    for (int64_t r = VNK_GRID_START >> 5; r < rows; r += VNK_GRID_STEP >> 5) {
        int64_t at = att_head_offset(ol, (int)(r / T), H) + (r % T) * ol.row;
        float s = 0.0f;
        for (int d = lane; d < D; d += 32) s += dO[at + d] * O[at + d];
        s = vnk__warp_sum(s);
        if (lane == 0) dvec[r] = s;
    }
}

/* dK and dV of keys k0..k0+63; warp w owns keys kw..kw+15 and sweeps the
 * query tiles that see them, 16 queries (one chunk) at a time. Scores are
 * held transposed (keys × queries). */
template <int D>
__global__ void __launch_bounds__(VNK_ATT_WARPS * 32)
attention_bwd_dkdv(float *dK, float *dV, const float *Q, const float *K, const float *V,
                   const float *dO, const float *lse, const float *dvec, att_layout in,
                   att_layout ol, int H, int T, float scale)
{
    __shared__ __align__(16) bf16 sQ[VNK_ATT_BC][D + VNK_ATT_PAD], sdO[VNK_ATT_BC][D + VNK_ATT_PAD];
    __shared__ float sl[VNK_ATT_BC], sd[VNK_ATT_BC];
    int bh = blockIdx.y;
    int64_t ib = att_head_offset(in, bh, H);
    Q += ib, K += ib, V += ib, dK += ib, dV += ib, dO += att_head_offset(ol, bh, H);
    lse += (int64_t)bh * T, dvec += (int64_t)bh * T;
    int lane = threadIdx.x & 31, k0 = blockIdx.x * VNK_ATT_BR,
        kw = k0 + (threadIdx.x >> 5) * VNK_ATT_ROWS;
    uint32_t kf[D / 16][4], vf[D / 16][4];
    load_a<D>(kf, K, in.row, kw, T, lane);
    load_a<D>(vf, V, in.row, kw, T, lane);
    float dk[D / 8][4] = {}, dv[D / 8][4] = {};
    for (int qt = att_first_query_tile(k0); qt < att_tiles(T); qt++) {
        int q0 = qt * VNK_ATT_BC;
        __syncthreads();
        load_tile<D>(sQ, Q, in.row, q0, T);
        load_tile<D>(sdO, dO, ol.row, q0, T);
        for (int e = threadIdx.x; e < VNK_ATT_BC; e += blockDim.x) {
            sl[e] = q0 + e < T ? lse[q0 + e] : 0.0f;
            sd[e] = q0 + e < T ? dvec[q0 + e] : 0.0f;
        }
        __syncthreads();
#pragma unroll 1 /* one chunk's scores live at a time: the register budget */
        for (int j = 0; j < VNK_ATT_BC / VNK_ATT_CHUNK; j++) {
            float p[2][4], dp[2][4];
            mma_qkt16<D>(p, kf, sQ, j, lane);   /* Sᵀ = K·Qᵀ */
            mma_qkt16<D>(dp, vf, sdO, j, lane); /* dPᵀ = V·dOᵀ */
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int k = kw + att_c_row(lane, i), qc = (2 * j + h) * 8 + att_c_col(lane, i);
                    float pr = att_visible(q0 + qc, k, T) ? expf(p[h][i] * scale - sl[qc]) : 0.0f;
                    p[h][i] = pr;
                    dp[h][i] = pr * (dp[h][i] - sd[qc]);
                }
            mma_pv16<D>(dv, p, sdO, j, lane); /* dV += Pᵀ·dO */
            mma_pv16<D>(dk, dp, sQ, j, lane); /* dK += dSᵀ·Q */
        }
    }
#pragma unroll
    for (int nd = 0; nd < D / 8; nd++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int k = kw + att_c_row(lane, i);
            int64_t at = k * in.row + nd * 8 + att_c_col(lane, i);
            if (k < T) {
                dK[at] = dk[nd][i] * scale;
                dV[at] = dv[nd][i];
            }
        }
}

/* dQ of queries q0..q0+63, sweeping the key tiles as the forward does, 16
 * keys (one chunk) at a time. */
template <int D>
__global__ void __launch_bounds__(VNK_ATT_WARPS * 32)
attention_bwd_dq(float *dQ, const float *Q, const float *K, const float *V, const float *dO,
                 const float *lse, const float *dvec, att_layout in, att_layout ol, int H, int T,
                 float scale)
{
    __shared__ __align__(16) bf16 sK[VNK_ATT_BC][D + VNK_ATT_PAD], sV[VNK_ATT_BC][D + VNK_ATT_PAD];
    int bh = blockIdx.y;
    int64_t ib = att_head_offset(in, bh, H);
    Q += ib, K += ib, V += ib, dQ += ib, dO += att_head_offset(ol, bh, H);
    lse += (int64_t)bh * T, dvec += (int64_t)bh * T;
    int lane = threadIdx.x & 31, q0 = blockIdx.x * VNK_ATT_BR,
        qw = q0 + (threadIdx.x >> 5) * VNK_ATT_ROWS;
    uint32_t qf[D / 16][4], of[D / 16][4];
    load_a<D>(qf, Q, in.row, qw, T, lane);
    load_a<D>(of, dO, ol.row, qw, T, lane);
    float rl[2], rd[2], dq[D / 8][4] = {};
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int q = qw + att_c_row(lane, 2 * h);
        rl[h] = q < T ? lse[q] : 0.0f;
        rd[h] = q < T ? dvec[q] : 0.0f;
    }
    int tiles = att_key_tiles(q0, T);
    for (int kt = 0; kt < tiles; kt++) {
        int k0 = kt * VNK_ATT_BC;
        __syncthreads();
        load_tile<D>(sK, K, in.row, k0, T);
        load_tile<D>(sV, V, in.row, k0, T);
        __syncthreads();
#pragma unroll 1
        for (int j = 0; j < VNK_ATT_BC / VNK_ATT_CHUNK; j++) {
            float p[2][4], dp[2][4];
            mma_qkt16<D>(p, qf, sK, j, lane);  /* S = Q·Kᵀ */
            mma_qkt16<D>(dp, of, sV, j, lane); /* dP = dO·Vᵀ */
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int q = qw + att_c_row(lane, i), k = k0 + (2 * j + h) * 8 + att_c_col(lane, i);
                    float pr = att_visible(q, k, T) ? expf(p[h][i] * scale - rl[i >> 1]) : 0.0f;
                    dp[h][i] = pr * (dp[h][i] - rd[i >> 1]);
                }
            mma_pv16<D>(dq, dp, sK, j, lane); /* dQ += dS·K */
        }
    }
#pragma unroll
    for (int nd = 0; nd < D / 8; nd++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int q = qw + att_c_row(lane, i);
            if (q < T) dQ[q * in.row + nd * 8 + att_c_col(lane, i)] = dq[nd][i] * scale;
        }
}

/* ---- the C ABI -------------------------------------------------------------------------- */

static int check_dims(const char *op, int64_t BH, int64_t T, int64_t D)
{
    if (D != 32 && D != 64 && D != 128)
        return vnk__fail("%s: head dim %lld, expected 32, 64 or 128", op, (long long)D);
    if (T > INT32_MAX / 2 || BH > 65535)
        return vnk__fail("%s: T = %lld and B·H = %lld exceed the grid (T < 2^30, B·H ≤ 65535)",
                         op, (long long)T, (long long)BH);
    return 0;
}

#define VNK_ATT_DISPATCH(D, launch)                                   \
    switch (D) {                                                      \
    case 32: { constexpr int HD = 32; launch; } break;                \
    case 64: { constexpr int HD = 64; launch; } break;                \
    default: { constexpr int HD = 128; launch; } break;               \
    }

extern "C" int vnk_attention_forward(float *out, float *lse, const float *q, const float *k,
                                     const float *v, att_layout in, att_layout ol, int64_t B,
                                     int64_t H, int64_t T, int64_t D, float scale)
{
    if (check_dims("attention_forward", B * H, T, D)) return 1;
    if (B * H == 0 || T == 0) return 0;
    dim3 grid((unsigned)att_tiles((int)T), (unsigned)(B * H));
    VNK_ATT_DISPATCH(D, (attention_fwd<HD><<<grid, VNK_ATT_WARPS * 32>>>(
                            out, lse, q, k, v, in, ol, (int)H, (int)T, scale)));
    return vnk__launched("attention_forward");
}

extern "C" int vnk_attention_backward(float *dq, float *dk, float *dv, float *dvec,
                                      const float *q, const float *k, const float *v,
                                      const float *out, const float *dout, const float *lse,
                                      att_layout in, att_layout ol, int64_t B, int64_t H,
                                      int64_t T, int64_t D, float scale)
{
    int64_t BH = B * H;
    if (check_dims("attention_backward", BH, T, D)) return 1;
    if (BH == 0 || T == 0) return 0;
    attention_bwd_dot<<<vnk__blocks(BH * T * 32, VNK_THREADS), VNK_THREADS>>>(
        dvec, dout, out, ol, (int)H, (int)T, BH * T, (int)D);
    if (vnk__launched("attention_backward (rowsum dO·O)")) return 1;
    dim3 grid((unsigned)att_tiles((int)T), (unsigned)BH);
    VNK_ATT_DISPATCH(D, (attention_bwd_dkdv<HD><<<grid, VNK_ATT_WARPS * 32>>>(
                            dk, dv, q, k, v, dout, lse, dvec, in, ol, (int)H, (int)T, scale)));
    if (vnk__launched("attention_backward (dK, dV)")) return 1;
    VNK_ATT_DISPATCH(D, (attention_bwd_dq<HD><<<grid, VNK_ATT_WARPS * 32>>>(
                            dq, q, k, v, dout, lse, dvec, in, ol, (int)H, (int)T, scale)));
    return vnk__launched("attention_backward (dQ)");
}
