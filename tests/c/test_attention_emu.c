/* A host emulator of the CUDA causal attention (kernels/attention.cu): it
 * replays the kernels' tile schedule and fragment bookkeeping — the same
 * functions of kernels/attention_tile.h — warp by warp and lane by lane,
 * with a software mma.m16n8k16 built from the PTX ISA's fragment layouts
 * and bf16 rounding wherever the kernel rounds, and compares the forward
 * output and the three gradients with the CPU's vn_causal_attention for
 * head dims 32, 64 and 128 and odd T (one tile, a ragged last tile,
 * several tiles), the B fragments loaded by a software ldmatrix from the
 * addresses the kernels give; and the same kernels reading the heads out of a fused
 * (B, T, 3C) qkv through strides and writing (B, T, C), against the CPU's
 * vn_causal_self_attention. Also: the header's fragment maps are the PTX ISA's and
 * cover each matrix element once; the causal schedule visits every tile
 * holding a visible (query, key) pair. */
#include "gradcheck.h"
#include "attention_tile.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BR VNK_ATT_BR
#define BC VNK_ATT_BC

/* Per lane: an A fragment holds 8 elements, B 4, C 4 (as floats; A and B
 * hold bf16 values). */
typedef struct { float v[32][8]; } frag_a;
typedef struct { float v[32][4]; } frag_b;
typedef struct { float v[32][4]; } frag_c;

/* f32 → bf16 → f32, round to nearest even (as __float2bfloat16_rn; the
 * inputs here are finite). */
static float bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* The fragment layouts of mma.m16n8k16 with .bf16 inputs as the PTX ISA
 * states them (9.7.14.5.8), transcribed here apart from attention_tile.h so
 * that a slip in the header's arithmetic shows: g = groupID = lane >> 2,
 * t = threadID_in_group = lane % 4. */
static int ptx_a_row(int lane, int i) { return (i < 2 || (i >= 4 && i < 6)) ? lane >> 2 : (lane >> 2) + 8; }
static int ptx_a_col(int lane, int i) { return (lane % 4) * 2 + (i & 1) + (i >= 4 ? 8 : 0); }
static int ptx_b_row(int lane, int i) { return (lane % 4) * 2 + (i & 1) + (i >= 2 ? 8 : 0); }
static int ptx_b_col(int lane) { return lane >> 2; }
static int ptx_c_row(int lane, int i) { return i < 2 ? lane >> 2 : (lane >> 2) + 8; }
static int ptx_c_col(int lane, int i) { return (lane % 4) * 2 + (i & 1); }

/* d += a·b, the software mma: the matrices rebuilt from the lanes'
 * fragments by the PTX layouts, multiplied, scattered back to C. */
static void mma(frag_c *d, const frag_a *a, const frag_b *b)
{
    float A[16][16], B[16][8];
    for (int lane = 0; lane < 32; lane++) {
        for (int i = 0; i < 8; i++) A[ptx_a_row(lane, i)][ptx_a_col(lane, i)] = a->v[lane][i];
        for (int i = 0; i < 4; i++) B[ptx_b_row(lane, i)][ptx_b_col(lane)] = b->v[lane][i];
    }
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
            int r = ptx_c_row(lane, i), c = ptx_c_col(lane, i);
            float s = d->v[lane][i];
            for (int k = 0; k < 16; k++) s += A[r][k] * B[k][c];
            d->v[lane][i] = s;
        }
}

/* The kernel's load_a: rows r0.. of X (T × D, rows ld apart), bf16, 0 past T. */
static void load_a(frag_a *f, const float *X, int64_t ld, int r0, int T, int D)
{
    for (int ks = 0; ks < D / 16; ks++)
        for (int lane = 0; lane < 32; lane++)
            for (int i = 0; i < 8; i++) {
                int row = r0 + att_a_row(lane, i), col = ks * 16 + att_a_col(lane, i);
                f[ks].v[lane][i] = row < T ? bf16(X[row * ld + col]) : 0.0f;
            }
}

/* The kernel's load_tile: rows c0..c0+63 of X (rows ld apart) into s (64 × D), bf16. */
static void load_tile(float *s, const float *X, int64_t ld, int c0, int T, int D)
{
    for (int r = 0; r < BC; r++)
        for (int c = 0; c < D; c++) s[r * D + c] = c0 + r < T ? bf16(X[(c0 + r) * ld + c]) : 0;
}

/* ldmatrix.sync.aligned.m8n8.x2{,.trans}.shared.b16 on a 64 × D tile s
 * (stored here without the kernel's padding; addresses are checked as the
 * kernel's padded bf16 rows would place them). Lane 8m + i gives (row[],
 * col[]) of row i of matrix m (8 consecutive elements). Without .trans,
 * lane l receives in register m the elements 2(l % 4) and 2(l % 4) + 1 of
 * row l / 4 of matrix m; with .trans, element l / 4 of rows 2(l % 4) and
 * 2(l % 4) + 1. Register m is b[2m], b[2m + 1] here (low half first). */
static void sw_ldmatrix_x2(frag_b *b, const float *s, int D, const int row[32], const int col[32],
                           bool trans)
{
    for (int m = 0; m < 2; m++) {
        unsigned seen = 0;
        for (int i = 0; i < 8; i++) {
            int l = 8 * m + i;
            size_t byte = ((size_t)row[l] * (size_t)(D + VNK_ATT_PAD) + (size_t)col[l]) * 2;
            if (byte % 16 || row[l] < 0 || row[l] >= BC || col[l] < 0 || col[l] + 8 > D)
                fail_msg("ldmatrix: lane %d gives row %d col %d (D %d)", l, row[l], col[l], D);
            seen |= 1u << (byte / 16 % 8);
        }
        /* one wavefront per matrix: its 8 rows in 8 different 16-byte bank groups */
        if (seen != 0xff) fail_msg("ldmatrix: matrix %d's rows share banks (D %d)", m, D);
    }
    for (int l = 0; l < 32; l++)
        for (int m = 0; m < 2; m++)
            for (int h = 0; h < 2; h++) {
                int src = trans ? 8 * m + 2 * (l % 4) + h : 8 * m + l / 4;
                int e = trans ? l / 4 : 2 * (l % 4) + h;
                b->v[l][2 * m + h] = s[row[src] * D + col[src] + e];
            }
}

/* The kernel's frag_bt (B with element (k, n) at s[n][k]: ldmatrix) and
 * frag_b (at s[k][n]: ldmatrix.trans), with the addresses of the header. */
static void frag_bt(frag_b *b, const float *s, int D, int ks, int nb)
{
    int row[32], col[32];
    for (int l = 0; l < 32; l++) row[l] = att_ldm_bt_row(l, nb), col[l] = att_ldm_bt_col(l, ks);
    sw_ldmatrix_x2(b, s, D, row, col, false);
}

static void frag_bn(frag_b *b, const float *s, int D, int ks, int nb)
{
    int row[32], col[32];
    for (int l = 0; l < 32; l++) row[l] = att_ldm_b_row(l, ks), col[l] = att_ldm_b_col(nb);
    sw_ldmatrix_x2(b, s, D, row, col, true);
}

/* The kernel's mma_qkt16: chunk j (16 columns, two C tiles) of a · sᵀ; and
 * mma_pv16: acc (16 × D) += c (that chunk, rounded to bf16 on the way
 * through the C → A correspondence) · rows 16j.. of s. */
static void mma_qkt16(frag_c c[2], const frag_a *a, const float *s, int D, int j)
{
    for (int h = 0; h < 2; h++) {
        memset(&c[h], 0, sizeof c[h]);
        for (int ks = 0; ks < D / 16; ks++) {
            frag_b b;
            frag_bt(&b, s, D, ks, 2 * j + h);
            mma(&c[h], &a[ks], &b);
        }
    }
}

static void mma_pv16(frag_c *acc, const frag_c c[2], const float *s, int D, int j)
{
    frag_a a;
    for (int lane = 0; lane < 32; lane++)
        for (int r = 0; r < 4; r++) {
            const frag_c *t = &c[att_c_to_a_tile(r)];
            a.v[lane][2 * r] = bf16(t->v[lane][att_c_to_a_elem(r)]);
            a.v[lane][2 * r + 1] = bf16(t->v[lane][att_c_to_a_elem(r) + 1]);
        }
    for (int nd = 0; nd < D / 8; nd++) {
        frag_b b;
        frag_bn(&b, s, D, j, nd);
        mma(&acc[nd], &a, &b);
    }
}

/* The xor-shuffle reductions over the 4 lanes of a quad, for every lane. */
static void quad(float v[32], bool max)
{
    float w[32];
    for (int l = 0; l < 32; l++) w[l] = max ? fmaxf(v[l], v[l ^ 1]) : v[l] + v[l ^ 1];
    for (int l = 0; l < 32; l++) v[l] = max ? fmaxf(w[l], w[l ^ 2]) : w[l] + w[l ^ 2];
}

/* One launch's geometry: B·H heads (blockIdx.y) of T × D; q, k, v, dq, dk,
 * dv in layout `in`, out and dout in `ol`; lse and dvec (B·H, T). */
typedef struct {
    att_layout in, ol;
    int B, H, T, D;
    float scale;
} launch;

/* ---- the kernels, one CTA and one warp at a time ------------------------------------ */

static void emu_forward(float *O, float *lse, const float *Q, const float *K, const float *V,
                        const launch *g, float *sK, float *sV)
{
    int T = g->T, D = g->D;
    for (int bh = 0; bh < g->B * g->H; bh++)
        for (int cta = 0; cta < att_tiles(T); cta++)
            for (int w = 0; w < VNK_ATT_WARPS; w++) {
                int64_t ib = att_head_offset(g->in, bh, g->H), ob = att_head_offset(g->ol, bh, g->H);
                int q0 = cta * BR, qw = q0 + w * VNK_ATT_ROWS;
                frag_a qf[8];
                frag_c o[16], s[BC / 8];
                float m[2][32], l[2][32];
                load_a(qf, Q + ib, g->in.row, qw, T, D);
                memset(o, 0, sizeof o);
                for (int lane = 0; lane < 32; lane++)
                    m[0][lane] = m[1][lane] = -INFINITY, l[0][lane] = l[1][lane] = 0;
                for (int kt = 0; kt < att_key_tiles(q0, T); kt++) {
                    int k0 = kt * BC;
                    load_tile(sK, K + ib, g->in.row, k0, T, D);
                    load_tile(sV, V + ib, g->in.row, k0, T, D);
                    for (int j = 0; j < BC / 16; j++) mma_qkt16(s + 2 * j, qf, sK, D, j);
                    float mx[2][32], alpha[2][32];
                    for (int lane = 0; lane < 32; lane++) {
                        mx[0][lane] = mx[1][lane] = -INFINITY;
                        for (int nb = 0; nb < BC / 8; nb++)
                            for (int i = 0; i < 4; i++) {
                                int q = qw + att_c_row(lane, i), k = k0 + nb * 8 + att_c_col(lane, i);
                                float *e = &s[nb].v[lane][i];
                                *e = att_visible(q, k, T) ? *e * g->scale : -INFINITY;
                                mx[i >> 1][lane] = fmaxf(mx[i >> 1][lane], *e);
                            }
                    }
                    for (int h = 0; h < 2; h++) {
                        quad(mx[h], true);
                        for (int lane = 0; lane < 32; lane++) {
                            float mn = fmaxf(m[h][lane], mx[h][lane]);
                            alpha[h][lane] = att_rescale(m[h][lane], mn);
                            m[h][lane] = mn;
                            l[h][lane] *= alpha[h][lane];
                        }
                    }
                    for (int lane = 0; lane < 32; lane++) {
                        for (int nb = 0; nb < BC / 8; nb++)
                            for (int i = 0; i < 4; i++) {
                                float *e = &s[nb].v[lane][i];
                                *e = att_prob(*e, m[i >> 1][lane]);
                                l[i >> 1][lane] += *e;
                            }
                        for (int nd = 0; nd < D / 8; nd++)
                            for (int i = 0; i < 4; i++) o[nd].v[lane][i] *= alpha[i >> 1][lane];
                    }
                    for (int j = 0; j < BC / 16; j++) mma_pv16(o, s + 2 * j, sV, D, j);
                }
                quad(l[0], false);
                quad(l[1], false);
                for (int lane = 0; lane < 32; lane++) {
                    for (int nd = 0; nd < D / 8; nd++)
                        for (int i = 0; i < 4; i++) {
                            int q = qw + att_c_row(lane, i);
                            if (q < T)
                                O[ob + q * g->ol.row + nd * 8 + att_c_col(lane, i)] =
                                    o[nd].v[lane][i] / l[i >> 1][lane];
                        }
                    for (int h = 0; h < 2; h++) {
                        int q = qw + att_c_row(lane, 2 * h);
                        if ((lane & 3) == 0 && q < T)
                            lse[(int64_t)bh * T + q] = m[h][lane] + logf(l[h][lane]);
                    }
                }
            }
}

/* attention_bwd_dot: one row (bh, t) at a time. */
static void emu_dot(float *dvec, const float *dO, const float *O, const launch *g)
{
    for (int64_t r = 0; r < (int64_t)g->B * g->H * g->T; r++) {
        int64_t at = att_head_offset(g->ol, (int)(r / g->T), g->H) + (r % g->T) * g->ol.row;
        float s = 0;
        for (int d = 0; d < g->D; d++) s += dO[at + d] * O[at + d];
        dvec[r] = s;
    }
}

static void emu_dkdv(float *dK, float *dV, const float *Q, const float *K, const float *V,
                     const float *dO, const float *lse, const float *dvec, const launch *g,
                     float *sQ, float *sdO)
{
    int T = g->T, D = g->D;
    for (int bh = 0; bh < g->B * g->H; bh++)
        for (int cta = 0; cta < att_tiles(T); cta++)
            for (int w = 0; w < VNK_ATT_WARPS; w++) {
                int64_t ib = att_head_offset(g->in, bh, g->H), ob = att_head_offset(g->ol, bh, g->H);
                const float *L = lse + (int64_t)bh * T, *Dv = dvec + (int64_t)bh * T;
                int k0 = cta * BR, kw = k0 + w * VNK_ATT_ROWS;
                frag_a kf[8], vf[8];
                frag_c dk[16], dv[16], p[2], dp[2];
                load_a(kf, K + ib, g->in.row, kw, T, D);
                load_a(vf, V + ib, g->in.row, kw, T, D);
                memset(dk, 0, sizeof dk);
                memset(dv, 0, sizeof dv);
                for (int qt = att_first_query_tile(k0); qt < att_tiles(T); qt++) {
                    int q0 = qt * BC;
                    load_tile(sQ, Q + ib, g->in.row, q0, T, D);
                    load_tile(sdO, dO + ob, g->ol.row, q0, T, D);
                    for (int j = 0; j < BC / VNK_ATT_CHUNK; j++) {
                        mma_qkt16(p, kf, sQ, D, j);
                        mma_qkt16(dp, vf, sdO, D, j);
                        for (int lane = 0; lane < 32; lane++)
                            for (int h = 0; h < 2; h++)
                                for (int i = 0; i < 4; i++) {
                                    int k = kw + att_c_row(lane, i),
                                        q = q0 + (2 * j + h) * 8 + att_c_col(lane, i);
                                    float pr = att_visible(q, k, T)
                                                   ? expf(p[h].v[lane][i] * g->scale - L[q])
                                                   : 0.0f;
                                    p[h].v[lane][i] = pr;
                                    dp[h].v[lane][i] = pr * (dp[h].v[lane][i] - (q < T ? Dv[q] : 0));
                                }
                        mma_pv16(dv, p, sdO, D, j);
                        mma_pv16(dk, dp, sQ, D, j);
                    }
                }
                for (int lane = 0; lane < 32; lane++)
                    for (int nd = 0; nd < D / 8; nd++)
                        for (int i = 0; i < 4; i++) {
                            int k = kw + att_c_row(lane, i);
                            int64_t at = ib + k * g->in.row + nd * 8 + att_c_col(lane, i);
                            if (k < T) dK[at] = dk[nd].v[lane][i] * g->scale, dV[at] = dv[nd].v[lane][i];
                        }
            }
}

static void emu_dq(float *dQ, const float *Q, const float *K, const float *V, const float *dO,
                   const float *lse, const float *dvec, const launch *g, float *sK, float *sV)
{
    int T = g->T, D = g->D;
    for (int bh = 0; bh < g->B * g->H; bh++)
        for (int cta = 0; cta < att_tiles(T); cta++)
            for (int w = 0; w < VNK_ATT_WARPS; w++) {
                int64_t ib = att_head_offset(g->in, bh, g->H), ob = att_head_offset(g->ol, bh, g->H);
                const float *L = lse + (int64_t)bh * T, *Dv = dvec + (int64_t)bh * T;
                int q0 = cta * BR, qw = q0 + w * VNK_ATT_ROWS;
                frag_a qf[8], of[8];
                frag_c dq[16], p[2], dp[2];
                load_a(qf, Q + ib, g->in.row, qw, T, D);
                load_a(of, dO + ob, g->ol.row, qw, T, D);
                memset(dq, 0, sizeof dq);
                for (int kt = 0; kt < att_key_tiles(q0, T); kt++) {
                    int k0 = kt * BC;
                    load_tile(sK, K + ib, g->in.row, k0, T, D);
                    load_tile(sV, V + ib, g->in.row, k0, T, D);
                    for (int j = 0; j < BC / VNK_ATT_CHUNK; j++) {
                        mma_qkt16(p, qf, sK, D, j);
                        mma_qkt16(dp, of, sV, D, j);
                        for (int lane = 0; lane < 32; lane++)
                            for (int h = 0; h < 2; h++)
                                for (int i = 0; i < 4; i++) {
                                    int q = qw + att_c_row(lane, i),
                                        k = k0 + (2 * j + h) * 8 + att_c_col(lane, i);
                                    float pr = att_visible(q, k, T)
                                                   ? expf(p[h].v[lane][i] * g->scale - L[q])
                                                   : 0.0f;
                                    dp[h].v[lane][i] = pr * (dp[h].v[lane][i] - (q < T ? Dv[q] : 0));
                                }
                        mma_pv16(dq, dp, sK, D, j);
                    }
                }
                for (int lane = 0; lane < 32; lane++)
                    for (int nd = 0; nd < D / 8; nd++)
                        for (int i = 0; i < 4; i++) {
                            int q = qw + att_c_row(lane, i);
                            if (q < T)
                                dQ[ib + q * g->in.row + nd * 8 + att_c_col(lane, i)] =
                                    dq[nd].v[lane][i] * g->scale;
                        }
            }
}

/* The forward and the whole backward (vnk_attention_forward, then the
 * three launches of vnk_attention_backward) for q, k, v at Q, Q + kv,
 * Q + 2kv and their gradients at the same offsets from dQ. */
static void emu_attention(float *O, float *dQ, const float *Q, int64_t kv, const float *G,
                          const launch *g)
{
    int64_t rows = (int64_t)g->B * g->H * g->T;
    float *lse = malloc(sizeof(float) * (size_t)rows), *dvec = malloc(sizeof(float) * (size_t)rows),
          *s1 = malloc(sizeof(float) * BC * (size_t)g->D), *s2 = malloc(sizeof(float) * BC * (size_t)g->D);
    const float *K = Q + kv, *V = Q + 2 * kv;
    emu_forward(O, lse, Q, K, V, g, s1, s2);
    emu_dot(dvec, G, O, g);
    emu_dkdv(dQ + kv, dQ + 2 * kv, Q, K, V, G, lse, dvec, g, s1, s2);
    emu_dq(dQ, Q, K, V, G, lse, dvec, g, s1, s2);
    free(lse), free(dvec), free(s1), free(s2);
}

/* ---- the checks --------------------------------------------------------------------- */

/* max|got − want| / max|want| over rows × cols elements (rows ld apart),
 * the denominator at least 0.1: at T = 1 dq and dk are exactly 0, where the
 * kernel leaves what bf16 rounding of dO in dO·Vᵀ against the f32
 * rowsum(dO ⊙ O) gives (~1e-3). */
static double rel_err(const float *got, const float *want, int64_t rows, int64_t cols, int64_t ld)
{
    double d = 0, m = 0.1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            double w = want[r * ld + c], e = fabs((double)got[r * ld + c] - w);
            d = e > d || e != e ? e : d;
            m = fabs(w) > m ? fabs(w) : m;
        }
    return d / m;
}

/* bf16-rounded random values: the CPU reference gets the inputs the kernel sees. */
static vn_tensor *rounded(int ndim, const int64_t *shape, double lo, double hi, unsigned seed)
{
    vn_tensor *t = trand(ndim, shape, lo, hi, seed);
    float *p = vn_tensor_data(t);
    for (int64_t i = 0; i < vn_tensor_numel(t); i++) p[i] = bf16(p[i]);
    return t;
}

/* bf16 probabilities and dS in the second products: about 2^-8 relative. */
static void expect_close(const float *got, const float *want, int64_t rows, int64_t cols,
                         int64_t ld, const char *what, int T, int D)
{
    double e = rel_err(got, want, rows, cols, ld);
    if (!(e < 1e-2)) fail_msg("T %d, D %d: %s relative error %g", T, D, what, e);
}

/* Separate contiguous q, k, v (B, H, T, D) against vn_causal_attention,
 * copied into one block so that k and v sit at fixed offsets from q, as
 * the emulator's launch wants. */
static void check_heads(int B, int H, int T, int D, unsigned seed)
{
    int64_t n = (int64_t)B * H * T * D, shape[4] = {B, H, T, D};
    vn_tensor *q = rounded(4, shape, -2, 2, seed), *k = rounded(4, shape, -2, 2, seed + 1),
              *v = rounded(4, shape, -1, 1, seed + 2), *g = trand(4, shape, -1, 1, seed + 3);
    CHECK_OK(vn_tensor_set_requires_grad(q, true));
    CHECK_OK(vn_tensor_set_requires_grad(k, true));
    CHECK_OK(vn_tensor_set_requires_grad(v, true));
    vn_tensor *out = vn_causal_attention(q, k, v);
    CHECK_PTR(out);
    CHECK_OK(vn_backward(out, g));
    float *X = malloc(sizeof(float) * 3 * (size_t)n), *dX = malloc(sizeof(float) * 3 * (size_t)n),
          *O = malloc(sizeof(float) * (size_t)n);
    memcpy(X, vn_tensor_data(q), sizeof(float) * (size_t)n);
    memcpy(X + n, vn_tensor_data(k), sizeof(float) * (size_t)n);
    memcpy(X + 2 * n, vn_tensor_data(v), sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < 3 * n; i++) dX[i] = NAN; /* poison: every element must be written */
    for (int64_t i = 0; i < n; i++) O[i] = NAN;
    launch l = {att_contiguous(H, T, D), att_contiguous(H, T, D), B, H, T, D,
                (float)(1.0 / sqrt((double)D))};
    emu_attention(O, dX, X, n, vn_tensor_data(g), &l);
    expect_close(O, vn_tensor_data(out), 1, n, n, "out", T, D);
    expect_close(dX, vn_tensor_data(vn_tensor_grad(q)), 1, n, n, "dq", T, D);
    expect_close(dX + n, vn_tensor_data(vn_tensor_grad(k)), 1, n, n, "dk", T, D);
    expect_close(dX + 2 * n, vn_tensor_data(vn_tensor_grad(v)), 1, n, n, "dv", T, D);
    free(X), free(dX), free(O);
    GC_RELEASE(q, k, v, g, out);
}

/* The fused projection qkv (B, T, 3C) read through strides and out written
 * as (B, T, C), against vn_causal_self_attention on the CPU (the heads split
 * out, vn_causal_attention, merged back). */
static void check_fused(int B, int H, int T, int D, unsigned seed)
{
    int64_t C = (int64_t)H * D, shape[3] = {B, T, 3 * C}, oshape[3] = {B, T, C},
            rows = (int64_t)B * T;
    vn_tensor *qkv = rounded(3, shape, -2, 2, seed), *g = trand(3, oshape, -1, 1, seed + 1);
    CHECK_OK(vn_tensor_set_requires_grad(qkv, true));
    vn_tensor *out = vn_causal_self_attention(qkv, H);
    CHECK_PTR(out);
    CHECK_OK(vn_backward(out, g));
    float *dX = malloc(sizeof(float) * (size_t)(rows * 3 * C)),
          *O = malloc(sizeof(float) * (size_t)(rows * C));
    for (int64_t i = 0; i < rows * 3 * C; i++) dX[i] = NAN;
    for (int64_t i = 0; i < rows * C; i++) O[i] = NAN;
    att_layout in = {T * 3 * C, D, 3 * C}, ol = {T * C, D, C};
    launch l = {in, ol, B, H, T, D, (float)(1.0 / sqrt((double)D))};
    emu_attention(O, dX, vn_tensor_data(qkv), C, vn_tensor_data(g), &l);
    const float *dW = vn_tensor_data(vn_tensor_grad(qkv));
    expect_close(O, vn_tensor_data(out), rows, C, C, "fused out", T, D);
    expect_close(dX, dW, rows, C, 3 * C, "fused dq", T, D);
    expect_close(dX + C, dW + C, rows, C, 3 * C, "fused dk", T, D);
    expect_close(dX + 2 * C, dW + 2 * C, rows, C, 3 * C, "fused dv", T, D);
    free(dX), free(O);
    GC_RELEASE(qkv, g, out);
}

static void test_fragment_maps(void **state)
{
    (void)state;
    int a[16][16] = {{0}}, b[16][8] = {{0}}, c[16][8] = {{0}};
    for (int lane = 0; lane < 32; lane++) {
        /* the header's arithmetic is the PTX ISA's layout */
        for (int i = 0; i < 8; i++) {
            assert_int_equal(att_a_row(lane, i), ptx_a_row(lane, i));
            assert_int_equal(att_a_col(lane, i), ptx_a_col(lane, i));
        }
        for (int i = 0; i < 4; i++) {
            assert_int_equal(att_b_row(lane, i), ptx_b_row(lane, i));
            assert_int_equal(att_b_col(lane), ptx_b_col(lane));
            assert_int_equal(att_c_row(lane, i), ptx_c_row(lane, i));
            assert_int_equal(att_c_col(lane, i), ptx_c_col(lane, i));
        }
        for (int i = 0; i < 8; i++) a[att_a_row(lane, i)][att_a_col(lane, i)]++;
        for (int i = 0; i < 4; i++) b[att_b_row(lane, i)][att_b_col(lane)]++;
        for (int i = 0; i < 4; i++) c[att_c_row(lane, i)][att_c_col(lane, i)]++;
        /* C of two 16 × 8 tiles read as A: the same (row, col) */
        for (int r = 0; r < 4; r++) {
            int e = att_c_to_a_elem(r), tile = att_c_to_a_tile(r);
            assert_int_equal(att_a_row(lane, 2 * r), att_c_row(lane, e));
            assert_int_equal(att_a_col(lane, 2 * r), 8 * tile + att_c_col(lane, e));
            assert_int_equal(att_a_col(lane, 2 * r + 1), 8 * tile + att_c_col(lane, e + 1));
        }
    }
    for (int r = 0; r < 16; r++)
        for (int j = 0; j < 16; j++) {
            assert_int_equal(a[r][j], 1);
            if (j < 8) assert_int_equal(b[r][j], 1), assert_int_equal(c[r][j], 1);
        }
}

/* The ldmatrix addresses of the header give, through the PTX ldmatrix,
 * exactly the mma's B fragments (PTX layout, gathered element by element)
 * of both operand orders, for every k-step and n-block of a 64 × D tile. */
static void test_ldmatrix_fragments(void **state)
{
    (void)state;
    for (int D = 32; D <= 128; D *= 2) {
        float *s = malloc(sizeof(float) * BC * (size_t)D);
        for (int i = 0; i < BC * D; i++) s[i] = (float)i;
        for (int ks = 0; ks < D / 16; ks++)
            for (int nb = 0; nb < BC / 8; nb++) {
                frag_b b;
                frag_bt(&b, s, D, ks, nb); /* element (k, n) at s[n][k], k < D, n < 64 */
                for (int l = 0; l < 32; l++)
                    for (int i = 0; i < 4; i++)
                        assert_true(b.v[l][i] == s[(nb * 8 + ptx_b_col(l)) * D + ks * 16 + ptx_b_row(l, i)]);
            }
        for (int ks = 0; ks < BC / 16; ks++)
            for (int nb = 0; nb < D / 8; nb++) {
                frag_b b;
                frag_bn(&b, s, D, ks, nb); /* element (k, n) at s[k][n], k < 64, n < D */
                for (int l = 0; l < 32; l++)
                    for (int i = 0; i < 4; i++)
                        assert_true(b.v[l][i] == s[(ks * 16 + ptx_b_row(l, i)) * D + nb * 8 + ptx_b_col(l)]);
            }
        free(s);
    }
}

static void test_schedule(void **state)
{
    (void)state;
    /* every visible (q, k) pair is in a visited tile, for ragged T */
    for (int T = 1; T <= 200; T += 7)
        for (int q = 0; q < T; q++) {
            int q0 = q / BR * BR;
            assert_true((q / BC) < att_key_tiles(q0, T));          /* forward and dQ */
            assert_true(att_first_query_tile(q / BR * BR) <= q / BC); /* dK/dV, key q */
        }
}

static void test_emulator_d32(void **state)
{
    (void)state;
    check_heads(1, 2, 1, 32, 11);
    check_heads(2, 1, 37, 32, 12);
    check_heads(1, 1, 131, 32, 13);
}

static void test_emulator_d64(void **state)
{
    (void)state;
    check_heads(1, 1, 63, 64, 21);
    check_heads(1, 2, 129, 64, 22);
}

static void test_emulator_d128(void **state)
{
    (void)state;
    check_heads(1, 1, 17, 128, 31);
    check_heads(1, 1, 101, 128, 32);
}

/* Strided heads: every head of every batch at its own offset, ragged T. */
static void test_emulator_fused(void **state)
{
    (void)state;
    check_fused(2, 3, 37, 32, 41);
    check_fused(2, 2, 70, 64, 42);
    check_fused(1, 2, 19, 128, 43);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fragment_maps), cmocka_unit_test(test_ldmatrix_fragments),
        cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_emulator_d32), cmocka_unit_test(test_emulator_d64),
        cmocka_unit_test(test_emulator_d128), cmocka_unit_test(test_emulator_fused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
