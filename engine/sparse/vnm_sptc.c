/* vnm_sptc.c — packing a V:N:M matrix into the operand order of mma.sp
 * (Sparse Tensor Cores) and the host decoder that checks it. The layout is
 * described in vnm_sptc.h; the kernels that read it are in
 * kernels/vnm_sptc.cu. */
#include "vnm_sptc.h"
#include "vnm_sptc_index.h"

#include <stdlib.h>

/* The nibble of a padding row or group: positions 0 and 1 (value 0 in
 * both), a pair the hardware accepts. */
#define PAD_NIBBLE 0x4u

/* Where value h (0/1) of group g of row r comes from in the values array,
 * or −1 for a padding row or group or a value whose column is padding. */
static int32_t value_source(const vnm_sptc *p, const vnm_pattern *pat, int64_t r, int64_t g, int h)
{
    if (r >= p->R || g >= p->G) return -1;
    int j = vnm__index(pat, r, g, h);
    int64_t col = g * p->M + pat->cols[((r / p->V) * p->G + g) * 4 + j];
    return col < p->K ? (int32_t)(r * 2 * p->G + 2 * g + h) : -1;
}

/* The metadata nibble of group g of row r: first position in bits 0–1,
 * second in bits 2–3. */
static uint32_t packed_nibble(const vnm_sptc *p, const vnm_pattern *pat, int64_t r, int64_t g)
{
    if (r >= p->R || g >= p->G) return PAD_NIBBLE;
    return (uint32_t)(vnm__index(pat, r, g, 0) | vnm__index(pat, r, g, 1) << 2);
}

/* Fills tile (rt, kt): the sources of its 32 lanes × 4 registers × 2
 * values, and its 16 metadata words (see vnm_sptc.h; the fragment indices
 * are those the kernels use, kernels/vnm_sptc_index.h). */
static void layout_tile(vnm_sptc *p, const vnm_pattern *pat, int64_t rt, int64_t kt)
{
    int64_t t = rt * p->k_tiles + kt;
    int32_t *ts = p->src + t * VNM_SPTC_TILE_VALUES;
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
            int64_t r = rt * VNM_SPTC_ROWS + vnm_a_row(lane, i);
            int64_t g = kt * VNM_SPTC_GROUPS + vnm_a_chunk(lane, i);
            for (int h = 0; h < 2; h++) ts[vnm_a_value(lane, i, h)] = value_source(p, pat, r, g, h);
        }
    uint32_t *tm = p->meta + t * VNM_SPTC_TILE_META;
    memset(tm, 0, VNM_SPTC_TILE_META * sizeof *tm);
    for (int rr = 0; rr < VNM_SPTC_ROWS; rr++)
        for (int ch = 0; ch < VNM_SPTC_GROUPS; ch++)
            tm[vnm_meta_word_of(rr, ch)] |=
                packed_nibble(p, pat, rt * VNM_SPTC_ROWS + rr, kt * VNM_SPTC_GROUPS + ch)
                << vnm_meta_shift(rr, ch);
}

static size_t packed_count(const vnm_sptc *p)
{
    return (size_t)(p->row_tiles * p->k_tiles) * VNM_SPTC_TILE_VALUES;
}

vnm_sptc *vnm_sptc_layout(const vn_vnm *s, vn_dtype dtype)
{
    if (!s) return vn__errp(VN_ERR_ARG, "vnm_sptc_layout: expected a V:N:M matrix, got NULL");
    if (dtype != VN_BF16 && dtype != VN_F16)
        return vn__errp(VN_ERR_DTYPE, "vnm_sptc_layout: expected dtype bf16 or f16 (the inputs "
                        "of mma.sp), got %s", vn_dtype_name(dtype));
    vnm_pattern pat = vnm__pattern_of(s);
    vnm_sptc *p = calloc(1, sizeof *p);
    if (!p) return vn__errp(VN_ERR_MEMORY, "vnm_sptc_layout: out of memory");
    p->R = s->R, p->K = s->K, p->V = s->V, p->M = s->M, p->G = pat.G, p->nblocks = pat.nblocks;
    p->row_tiles = (s->R + VNM_SPTC_ROWS - 1) / VNM_SPTC_ROWS;
    p->k_tiles = (pat.G + VNM_SPTC_GROUPS - 1) / VNM_SPTC_GROUPS;
    p->dtype = dtype;
    size_t tiles = (size_t)(p->row_tiles * p->k_tiles);
    size_t ngather = (size_t)(p->nblocks * p->k_tiles * VNM_SPTC_COLS);
    p->src = malloc(packed_count(p) * sizeof *p->src);
    p->meta = malloc(tiles * VNM_SPTC_TILE_META * sizeof *p->meta);
    p->gather = malloc(ngather * sizeof *p->gather);
    if (!p->src || !p->meta || !p->gather) {
        vnm_sptc_free(p);
        return vn__errp(VN_ERR_MEMORY, "vnm_sptc_layout: out of memory for %zu tiles of a %lld "
                        "× %lld matrix", tiles, (long long)s->R, (long long)s->K);
    }
    for (int64_t rt = 0; rt < p->row_tiles; rt++)
        for (int64_t kt = 0; kt < p->k_tiles; kt++) layout_tile(p, &pat, rt, kt);
    for (int64_t b = 0; b < p->nblocks; b++)
        for (int64_t c = 0; c < p->k_tiles * VNM_SPTC_COLS; c++) {
            int64_t g = c / 4, col = -1;
            if (g < p->G) col = g * p->M + pat.cols[(b * p->G + g) * 4 + c % 4];
            p->gather[b * p->k_tiles * VNM_SPTC_COLS + c] = (int32_t)(col < p->K ? col : -1);
        }
    return p;
}

vn_status vnm_sptc_pack_values(vnm_sptc *p, const float *values)
{
    size_t n = packed_count(p);
    if (!p->values && !(p->values = malloc(n * sizeof *p->values)))
        return vn__err(VN_ERR_MEMORY, "vnm_sptc_pack_values: out of memory for %zu values", n);
    for (size_t j = 0; j < n; j++) {
        float v = p->src[j] >= 0 ? values[p->src[j]] : 0.0f;
        p->values[j] = p->dtype == VN_BF16 ? vn__f32_to_bf16(v) : vn__f32_to_f16(v);
    }
    return VN_OK;
}

vnm_sptc *vnm_sptc_pack(const vn_vnm *s, vn_dtype dtype)
{
    if (s && vn__check(s->values, "vnm_sptc_pack: values")) return NULL;
    vnm_sptc *p = vnm_sptc_layout(s, dtype);
    if (p && vnm_sptc_pack_values(p, vn_tensor_data(s->values))) {
        vnm_sptc_free(p);
        p = NULL;
    }
    return p;
}

void vnm_sptc_free(vnm_sptc *p)
{
    if (!p) return;
    free(p->values);
    free(p->meta);
    free(p->gather);
    free(p->src);
    free(p);
}

vn_status vnm_sptc_decode(const vnm_sptc *p, float *dense)
{
    if (!p || !dense) return vn__err(VN_ERR_ARG, "vnm_sptc_decode: expected a packed matrix and "
                                     "an output, got NULL");
    memset(dense, 0, (size_t)(p->R * p->K) * sizeof *dense);
    int64_t ccols = p->k_tiles * VNM_SPTC_COLS; /* condensed columns per block */
    for (int64_t t = 0; t < p->row_tiles * p->k_tiles; t++) {
        int64_t rt = t / p->k_tiles, kt = t % p->k_tiles;
        for (int lane = 0; lane < 32; lane++) {
            for (int i = 0; i < 4; i++) {
                int rr = vnm_a_row(lane, i), chunk = vnm_a_chunk(lane, i);
                int64_t row = rt * VNM_SPTC_ROWS + rr;
                unsigned nib = vnm_meta_nibble(p->meta + t * VNM_SPTC_TILE_META, rr, chunk);
                unsigned pos[2] = {nib & 3, nib >> 2};
                if (pos[0] >= pos[1])
                    return vn__err(VN_ERR_FORMAT, "vnm_sptc_decode: tile %lld, lane %d, register "
                                   "%d: metadata nibble 0x%x does not hold two ascending "
                                   "positions", (long long)t, lane, i, nib);
                for (int h = 0; h < 2; h++) {
                    uint16_t bits = p->values[t * VNM_SPTC_TILE_VALUES + vnm_a_value(lane, i, h)];
                    float v = p->dtype == VN_BF16 ? vn__bf16_to_f32(bits) : vn__f16_to_f32(bits);
                    int64_t cc = kt * VNM_SPTC_COLS + 4 * chunk + pos[h];
                    int64_t col = row < p->R ? p->gather[(row / p->V) * ccols + cc] : -1;
                    if (col < 0) {
                        if (v != 0)
                            return vn__err(VN_ERR_FORMAT, "vnm_sptc_decode: tile %lld, lane %d, "
                                           "register %d: value %g at a padding position (row "
                                           "%lld, condensed column %lld)", (long long)t, lane, i,
                                           (double)v, (long long)row, (long long)cc);
                        continue;
                    }
                    if (col >= p->K)
                        return vn__err(VN_ERR_FORMAT, "vnm_sptc_decode: block %lld, condensed "
                                       "column %lld: gather says column %lld, the matrix has %lld",
                                       (long long)(row / p->V), (long long)cc, (long long)col,
                                       (long long)p->K);
                    /* Stored, not added, so that a value rounded to −0 stays −0 (each
                     * position is reached once: positions ascend within a chunk and
                     * gather is one-to-one within a block). */
                    dense[row * p->K + col] = v;
                }
            }
        }
    }
    return VN_OK;
}
