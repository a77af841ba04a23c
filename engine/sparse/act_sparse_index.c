/* act_sparse_index.c — the index of dynamic activation sparsity (which
 * columns of each row tile of act(X) are nonzero), the gathers into
 * condensed operands, and the condensed forward product (SparDA / PIT,
 * Zheng et al., SOSP 2023). Shared by the layer op (activation_sparse.c)
 * and the fused MLP (activation_sparse_mlp.c). */
#include "act_sparse_internal.h"

#include "blas.h" /* vn__sgemm: OpenBLAS on OpenMP's threads */
#include <omp.h>

void act__index_views(act_index *ix, const vn_tensor *t)
{
    const int64_t *p = vn_tensor_data(t);
    ix->count = p;
    ix->off = p + ix->ntiles;
    ix->cols = p + 2 * ix->ntiles;
    ix->plain_w = act__max_condensed(ix) == 0;
}

int64_t act__max_condensed(const act_index *ix)
{
    int64_t kmax = 0;
    for (int64_t t = 0; t < ix->ntiles; t++)
        if (ix->count[t] < ix->in && ix->count[t] > kmax) kmax = ix->count[t];
    return kmax;
}

/* The tiles of the sample that decides the dense path first: every
 * ACT_SAMPLE_EVERY-th (tile 0 always). When the sample's kept share is
 * already above dense_above the other tiles are never read: the dense
 * fallback then pays 1/8 of the index pass. */
enum { ACT_SAMPLE_EVERY = 8 };

/* What a scan counted: positive elements, kept (tile, column) pairs, and
 * the tiles and rows it read. */
typedef struct { int64_t nz, kept, tiles, rows; } scan_count;

/* One row into the tile's running maxima: mx[j] = max(mx[j], row[j] +
 * b[j]) (b NULL: 0), and its count of positives returned. Float maxima
 * and an i32 count (a row has at most in ≤ INT_MAX positives) keep the
 * loop to a few vector operations per 8 values: the pass over 2048 × 4096
 * took 5.0 ms against 6.2 with flags of 64 bits (best of 20, one thread,
 * CPU time). A NaN enters the maxima as +inf, so its column is kept and
 * act(NaN) = NaN reaches the output as on the dense path; it is not counted
 * as a positive. */
static inline int64_t flag_row(const float *row, const float *b, int64_t in, float *mx)
{
    int32_t n = 0;
    if (b)
        for (int64_t j = 0; j < in; j++) {
            float v = row[j] + b[j], k = v != v ? INFINITY : v;
            mx[j] = k > mx[j] ? k : mx[j];
            n += v > 0;
        }
    else
        for (int64_t j = 0; j < in; j++) {
            float v = row[j], k = v != v ? INFINITY : v;
            mx[j] = k > mx[j] ? k : mx[j];
            n += v > 0;
        }
    return n;
}

/* One pass over the tiles of x in the sample (sample) or out of it (!sample):
 * each tile's kept columns (some x + bias > 0 in the tile) into cnt and
 * cols, added up in *c. A tile whose kept share is above dense_above is
 * made dense (identity columns): condensing it would cost more than it
 * saves. mx: in floats per thread (the running maxima of a tile). */
static void scan_tiles(const act_index *ix, const float *x, int64_t *cnt, int64_t *cols,
                       double dense_above, bool sample, float *mx, scan_count *c)
{
    int64_t in = ix->in, nz = 0, kept = 0, tiles = 0, rows = 0;
#pragma omp parallel for schedule(static) reduction(+ : nz, kept, tiles, rows) \
    if (ix->rows * in > VN_OMP_MIN_WORK)
    for (int64_t t = 0; t < ix->ntiles; t++) {
        if ((t % ACT_SAMPLE_EVERY == 0) != sample) continue;
        int64_t r0 = t * ix->tile, r1 = r0 + act__tile_rows(ix, t);
        int64_t *slot = cols + t * in, n = 0, z = 0;
        float *m = mx + (int64_t)omp_get_thread_num() * in;
        for (int64_t j = 0; j < in; j++) m[j] = 0;
        for (int64_t i = r0; i < r1; i++) z += flag_row(x + i * in, ix->bias, in, m);
        for (int64_t j = 0; j < in; j++)
            if (m[j] > 0) slot[n++] = j;
        nz += z;
        kept += n;
        tiles++;
        rows += r1 - r0;
        if ((double)n > dense_above * (double)in) {
            for (int64_t j = 0; j < in; j++) slot[j] = j;
            n = in;
        }
        cnt[t] = n;
    }
    c->nz += nz;
    c->kept += kept;
    c->tiles += tiles;
    c->rows += rows;
}

vn_tensor *act__index(act_index *ix, const float *x, int64_t tile, double dense_above,
                      vn_act_sparse_stats *stats)
{
    int64_t rows = ix->rows, in = ix->in;
    ix->tile = tile > rows && rows > 0 ? rows : tile;
    ix->ntiles = rows ? (rows + ix->tile - 1) / ix->tile : 0;
    int64_t n = ix->ntiles * (2 + in);
    vn_tensor *index = vn__new(VN_I64, 1, &n);
    if (!index) return NULL;
    int64_t *p = vn_tensor_data(index), nmx = omp_get_max_threads() * (in ? in : 1);
    vn_tensor *mx = vn__new(VN_F32, 1, &nmx);
    if (!mx) {
        vn_tensor_release(index);
        return NULL;
    }
    scan_count c = {0, 0, 0, 0};
    bool dense = false;
    for (int pass = 0; pass < 2 && !dense; pass++) { /* the sample, then (unless dense) the rest */
        scan_tiles(ix, x, p, p + 2 * ix->ntiles, dense_above, pass == 0, vn_tensor_data(mx), &c);
        dense = c.tiles && (double)c.kept > dense_above * (double)(c.tiles * in);
    }
    vn_tensor_release(mx);
    if (dense) { /* the dense path: one tile of all rows, all columns, one sgemm */
        vn_tensor_release(index);
        n = 2 + in;
        if (!(index = vn__new(VN_I64, 1, &n))) return NULL;
        p = vn_tensor_data(index);
        p[0] = in;
        for (int64_t j = 0; j < in; j++) p[2 + j] = j;
        ix->tile = rows;
        ix->ntiles = 1;
    }
    /* where each tile's block of condensed values starts (act__condense) */
    for (int64_t t = 0, at = 0; t < ix->ntiles; t++) {
        p[ix->ntiles + t] = at;
        at += act__tile_rows(ix, t) * p[t];
    }
    ix->zc = NULL;
    act__index_views(ix, index);
    if (stats) { /* over the tiles scanned: all, or the sample that chose the dense path */
        double all = (double)c.rows * (double)in, pairs = (double)c.tiles * (double)in;
        *stats = (vn_act_sparse_stats){all ? (double)c.nz / all : 0, pairs ? (double)c.kept / pairs : 0,
                                       dense};
    }
    return index;
}

vn_tensor *act__condense(act_index *ix, vn_tensor *z)
{
    int64_t in = ix->in, nt = ix->ntiles, last = nt ? nt - 1 : 0;
    float *Z = vn_tensor_data(z);
    const float *b = ix->bias;
    bool all_dense = true;
    for (int64_t t = 0; t < nt; t++) all_dense &= ix->count[t] == in;
    if (all_dense) { /* the blocks are z's rows as they are: the bias in place */
#pragma omp parallel for schedule(static) if (b && ix->rows * in > VN_OMP_MIN_STREAM)
        for (int64_t i = 0; i < (b ? ix->rows : 0); i++)
            for (int64_t j = 0; j < in; j++) Z[i * in + j] += b[j];
        ix->zc = Z;
        return vn_tensor_retain(z);
    }
    int64_t n = ix->off[last] + act__tile_rows(ix, last) * ix->count[last];
    if (n == 0) n = 1;
    vn_tensor *c = vn__new(VN_F32, 1, &n);
    if (!c) return NULL;
    float *C = vn_tensor_data(c);
    /* one read of z at the kept columns: the forward and the backward then
     * read the dense blocks (the share kept of z's bytes), not z again */
#pragma omp parallel for schedule(static) if (ix->rows * in > VN_OMP_MIN_WORK)
    for (int64_t t = 0; t < nt; t++) {
        int64_t k = ix->count[t], m = act__tile_rows(ix, t);
        const int64_t *cols = act__cols(ix, t);
        for (int64_t r = 0; r < m; r++) {
            const float *zr = Z + (t * ix->tile + r) * in;
            float *v = C + ix->off[t] + r * k;
            if (k == in && b) /* a dense tile: the same without the index, vectorized */
                for (int64_t j = 0; j < in; j++) v[j] = zr[j] + b[j];
            else if (k == in)
                memcpy(v, zr, sizeof(float) * (size_t)in);
            else if (b)
                for (int64_t l = 0; l < k; l++) v[l] = zr[cols[l]] + b[cols[l]];
            else
                for (int64_t l = 0; l < k; l++) v[l] = zr[cols[l]];
        }
    }
    ix->zc = C;
    return c;
}

vn_tensor *act__transposed(const vn_tensor *w)
{
    /* OpenBLAS's out-of-place transpose: 4× faster here (1024 × 4096, one
     * thread: 4 ms against 16 ms) than a loop blocked 32 × 32, whose
     * writes, 4 KB apart, keep evicting each other from the cache. */
    int64_t R = w->shape[0], C = w->shape[1], ts[2] = {C, R};
    vn_tensor *wc = vn__plain_contiguous(w), *t = wc ? vn__new(VN_F32, 2, ts) : NULL;
    if (t && R && C)
        cblas_somatcopy(CblasRowMajor, CblasTrans, (int)R, (int)C, 1.0f, vn_tensor_data(wc), (int)C,
                        vn_tensor_data(t), (int)R);
    vn_tensor_release(wc);
    return t;
}

vn_tensor *act__weight(const act_index *ix, const vn_tensor *w)
{
    return ix->plain_w ? vn__plain_contiguous(w) : act__transposed(w);
}

void act__tile_h(const act_index *ix, int64_t t, const float *x, float *hc, int64_t *nz)
{
    int64_t in = ix->in, k = ix->count[t], r0 = t * ix->tile, m = act__tile_rows(ix, t), pos = 0;
    const int64_t *cols = act__cols(ix, t);
    /* a row's values in a contiguous run (the tile's block of ix->zc, or a
     * dense tile's row of x: vectorized), or picked from x by the index */
    bool run = ix->zc || k == in;
#pragma omp parallel for schedule(static) reduction(+ : pos) if (m * k > VN_OMP_MIN_WORK)
    for (int64_t r = 0; r < m; r++) {
        const float *v = ix->zc ? ix->zc + ix->off[t] + r * k : x + (r0 + r) * in;
        if (run)
            for (int64_t l = 0; l < k; l++) {
                hc[r * k + l] = act__f(ix->act, v[l]);
                pos += v[l] > 0;
            }
        else
            for (int64_t l = 0; l < k; l++) hc[r * k + l] = act__f(ix->act, v[cols[l]]);
    }
    if (nz && k == in) *nz += pos;
}

const float *act__gather_tile(const act_index *ix, int64_t t, const float *x, const float *wt,
                              float *hc, float *wc, int64_t *nz)
{
    act__tile_h(ix, t, x, hc, nz);
    int64_t k = ix->count[t];
    if (k == ix->in) return wt;
    vn__gather_rows_f32(wc, wt, act__cols(ix, t), NULL, k, ix->out);
    return wc;
}

void act__forward_tiles(const act_index *ix, const float *x, const float *wt, const float *b,
                        float *hc, float *wc, float *y, vn_act_sparse_stats *stats)
{
    int64_t nz = 0;
    for (int64_t i = 0; i < ix->rows; i++)
        for (int64_t o = 0; o < ix->out; o++) y[i * ix->out + o] = b ? b[o] : 0;
    for (int64_t t = 0; t < ix->ntiles; t++) {
        int64_t k = ix->count[t], m = act__tile_rows(ix, t);
        if (k == 0) continue; /* H is all zero in this tile */
        act__tile_h(ix, t, x, hc, &nz);
        float *yt = y + t * ix->tile * ix->out;
        if (k == ix->in) { /* a dense tile: W (or Wt) as it is */
            vn__sgemm(CblasNoTrans, ix->plain_w ? CblasTrans : CblasNoTrans, (int)m, (int)ix->out, (int)k,
                      1.0f, hc, (int)k, wt, (int)(ix->plain_w ? ix->in : ix->out), 1.0f, yt, (int)ix->out);
            continue;
        }
        const int64_t *cols = act__cols(ix, t);
        for (int64_t c = 0, kc = act__chunk(ix->out); c < k; c += kc) { /* y_t += Hc[:, chunk]·Wc[chunk, :] */
            int64_t n = k - c < kc ? k - c : kc;
            vn__gather_rows_f32(wc, wt, cols + c, NULL, n, ix->out);
            vn__sgemm(CblasNoTrans, CblasNoTrans, (int)m, (int)ix->out, (int)n, 1.0f, hc + c, (int)k, wc,
                      (int)ix->out, 1.0f, yt, (int)ix->out);
        }
    }
    /* The dense path read every element of x here: its exact density (the
     * index may have read only a sample). */
    if (stats && stats->dense && ix->rows && ix->in)
        stats->density = (double)nz / ((double)ix->rows * (double)ix->in);
}
