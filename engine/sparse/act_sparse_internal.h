/* act_sparse_internal.h — what the dynamic activation sparsity files share
 * (activation_sparse.c: the layer op; activation_sparse_mlp.c: the fused
 * MLP; act_sparse_index.c: the index and the gathers). Private to the wing. */
#ifndef VENOM_ACT_SPARSE_INTERNAL_H
#define VENOM_ACT_SPARSE_INTERNAL_H

#include "internal.h"

/* The index of a call over a matrix X (rows × in), cut into tiles of `tile`
 * rows (the last may be shorter). It lives in one i64 tensor: count[t]
 * (ntiles), then off[t] (ntiles, see zc), then for each tile a slot of `in`
 * column numbers of which the first count[t] are its kept columns,
 * ascending. A tile run dense has count = in and the identity in its slot.
 * `out` is the width of the product's other operand (W: out × in). */
typedef struct {
    int64_t rows, in, out, tile, ntiles;
    vn_sparse_act act;
    const int64_t *count, *off, *cols; /* cols of tile t: cols + t·in */
    bool plain_w; /* no tile is condensed: W is used as it is, not transposed (see act__weight) */
    /* bias: added to every row of X before the activation (the MLP's b1,
     * which its first product leaves out; NULL for the layer op). zc: when
     * not NULL, the condensed values of X + bias, tile after tile: tile t's
     * m × count[t] block, row-major, at zc + off[t] (act__condense); the
     * tiles are then read from it, not from X. */
    const float *bias, *zc;
} act_index;

/* relu(x) (relu2: its square); a NaN stays NaN, as the dense relu keeps it
 * (ops_pointwise.c), so a NaN in the layer before is seen, not zeroed. */
static inline float act__f(vn_sparse_act act, float x)
{
    float r = x <= 0 ? 0 : x;
    return act == VN_ACT_RELU2 ? r * r : r;
}

static inline float act__df(vn_sparse_act act, float x)
{
    return x > 0 ? (act == VN_ACT_RELU2 ? 2 * x : 1) : 0;
}

static inline int64_t act__tile_rows(const act_index *ix, int64_t t)
{
    int64_t r0 = t * ix->tile;
    return r0 + ix->tile < ix->rows ? ix->tile : ix->rows - r0;
}

/* Builds the index of x (ix->rows × ix->in, contiguous; rows, in, out, act
 * and bias set in *ix, tile the wanted height, dense_above in [0, 1]) and
 * fills the rest of *ix (zc NULL). A column is kept in a tile when some
 * x + bias > 0 there. A sample of the tiles (every 8th, tile 0 first) is
 * read first; when its kept share of (tile, column) pairs is above
 * dense_above, or else the share over all tiles is, the index is the dense
 * path: one tile of all rows, all columns (the fallback then reads 1/8 of x
 * here). stats (may be NULL) gets the shares over the tiles read (the
 * sample, or all); act__forward_tiles makes the dense path's density
 * exact. NULL and the error set when out of memory. */
vn_tensor *act__index(act_index *ix, const float *x, int64_t tile, double dense_above,
                      vn_act_sparse_stats *stats);
/* The condensed values of z + ix->bias (z: ix->rows × ix->in, contiguous,
 * writable): each tile's kept columns as one dense block, which ix->zc is
 * then pointed at. On the dense path (one tile of all columns) that block
 * is z itself: the bias is added in place and z's reference returned;
 * otherwise a new tensor (z left as it is, the caller releases it). NULL
 * and the error set when out of memory. */
vn_tensor *act__condense(act_index *ix, vn_tensor *z);
/* ix's count, off and cols pointed into the index tensor t, and plain_w set. */
void act__index_views(act_index *ix, const vn_tensor *t);
/* The widest condensed tile (count < in), 0 when there is none. */
int64_t act__max_condensed(const act_index *ix);

/* The weight W (out × in) is used transposed, Wt (in × out), so that the
 * kept columns of W are rows of Wt: a gather is one copy per row, and a
 * scatter-add runs along rows, touching only the kept share of the bytes
 * (a column gather from row-major W touches nearly every cache line of W
 * as soon as more than 1/16 of the columns are kept). act__transposed makes
 * that copy of a 2-d tensor (not recorded). */
vn_tensor *act__transposed(const vn_tensor *w);
/* The weight operand of a call: Wt = act__transposed(w), or w itself
 * (contiguous) when ix->plain_w: the dense path then costs no transposes. */
vn_tensor *act__weight(const act_index *ix, const vn_tensor *w);
/* The kept columns of a condensed tile go through the products in chunks
 * of act__chunk(width): a chunk's gathered rows of a weight (width floats
 * each), or its rows of a weight gradient before their scatter-add, take
 * at most ACT_CHUNK_BYTES (a core's L2 on the benchmark's machine), so
 * they are mostly still cached when the product (or the scatter-add)
 * reads them, where one tile's whole gather (2–5 MB in the benchmark)
 * goes out to memory and back. Measured (bench/RESULTS.md): 4% faster at
 * 90% clustered, no change seen at 90% aligned; 512 KB and 1 MB chunks
 * within the noise of each other. */
enum { ACT_CHUNK_BYTES = 1024 * 1024 };
static inline int64_t act__chunk(int64_t width)
{
    int64_t c = ACT_CHUNK_BYTES / (4 * (width > 0 ? width : 1));
    return c < 16 ? 16 : c;
}

/* Hc (m × k) = act(X[tile rows, kept cols]) (from ix->zc's block when
 * condensed values are there; m, k: tile t's rows and kept columns). A
 * dense tile adds its positive elements to *nz (nz may be NULL). */
void act__tile_h(const act_index *ix, int64_t t, const float *x, float *hc, int64_t *nz);
/* Hc (m × k) = act(X[tile rows, kept cols]) (from ix->zc's block when
 * condensed values are there) and, unless the tile is dense, Wc (k × out)
 * = Wt[kept cols, :]. Returns the W operand to use: the weight operand
 * itself for a dense tile (Wt, or W when ix->plain_w), else Wc. A dense tile
 * adds its positive elements to *nz (nz may be NULL). */
const float *act__gather_tile(const act_index *ix, int64_t t, const float *x, const float *wt,
                              float *hc, float *wc, int64_t *nz);
/* The kept columns of tile t are rows of Wt, W1 and the weight gradients:
 * they are gathered and scatter-added by engine/rows.c's row loops with
 * act__cols(ix, t) as the index and ix->count[t] rows. */
static inline const int64_t *act__cols(const act_index *ix, int64_t t)
{
    return ix->cols + t * ix->in;
}
/* y rows of every tile = b (or 0) + Hc·Wc: the condensed forward product,
 * Wc gathered a chunk (act__chunk(out) rows) at a time into wc. hc: tile ×
 * in floats at least, wc: the chunk × out. On the dense path (stats->dense) stats->density becomes the exact share
 * of positive elements of x (stats may be NULL). */
void act__forward_tiles(const act_index *ix, const float *x, const float *wt, const float *b,
                        float *hc, float *wc, float *y, vn_act_sparse_stats *stats);

/* Argument checks shared by the ops (activation_sparse.c): x f32 on the
 * CPU, act and dense_above valid; a weight w (out, in) f32 with its bias b
 * (out) or NULL, names quoted in the messages. */
vn_status act__check_common(const char *op, const vn_tensor *x, vn_sparse_act act, double dense_above);
vn_status act__check_weight(const char *op, const char *wname, const vn_tensor *w, int64_t in,
                            const char *in_name, const char *bname, const vn_tensor *b);
/* *ix for x (..., in) against a product of width out (rows = x's leading
 * dims; at most INT_MAX, BLAS's limit), and ysh the output's shape
 * (x's with the last dim out). */
vn_status act__prepare(const char *op, const vn_tensor *x, int64_t in, int64_t out, vn_sparse_act act,
                       act_index *ix, int64_t *ysh);

#endif
