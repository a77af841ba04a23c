/* The Sparse Tensor Core packing of V:N:M matrices (engine/vnm_sptc.c):
 * decoding the packed arrays lane by lane, the way mma.sp reads them, gives
 * back vn_vnm_to_dense rounded to bf16/f16 bit for bit, for V 16..128, M 4
 * to 64 (non-powers of two and M > 16 included), rows and columns that do
 * not fill a block, a tile or a group; every metadata nibble is a pair the
 * hardware accepts; the gather table matches the column locations; and a
 * corrupted nibble or padding value is seen. */
#include "gradcheck.h"
#include "vnm_random.h"
#include "vnm_sptc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every nibble of every metadata word holds two ascending positions: the
 * hardware refuses 0b0000, 0b0101, 0b1010, 0b1111, and ordered metadata
 * wants the first below the second. */
static void check_meta_words(const vnm_sptc *p)
{
    int64_t n = p->row_tiles * p->k_tiles * VNM_SPTC_TILE_META;
    for (int64_t w = 0; w < n; w++)
        for (int k = 0; k < 8; k++) {
            unsigned nib = (p->meta[w] >> (4 * k)) & 0xf;
            if ((nib & 3) >= (nib >> 2))
                fail_msg("metadata word %lld = 0x%08x: nibble %d (0x%x) is not an ascending pair",
                         (long long)w, p->meta[w], k, nib);
        }
}

/* gather[b][c] is column g·M + cols[b][g][c % 4] of group g = c / 4, or −1
 * for a padding group or column. */
static void check_gather(const vn_vnm *s, const vnm_sptc *p)
{
    vn_tensor *cols = vn_vnm_columns(s);
    CHECK_PTR(cols);
    const int32_t *c = vn_tensor_data(cols);
    int64_t cc = p->k_tiles * VNM_SPTC_COLS;
    for (int64_t b = 0; b < p->nblocks; b++)
        for (int64_t k = 0; k < cc; k++) {
            int64_t g = k / 4, want = g < p->G ? g * p->M + c[(b * p->G + g) * 4 + k % 4] : -1;
            if (want >= p->K) want = -1;
            if (p->gather[b * cc + k] != want)
                fail_msg("gather[%lld][%lld] = %d, expected %lld", (long long)b, (long long)k,
                         p->gather[b * cc + k], (long long)want);
        }
    vn_tensor_release(cols);
}

/* decode(pack(s)) equals to_dense(s) rounded to dtype, bit for bit. */
static void check_roundtrip(const vn_vnm *s, vn_dtype dtype)
{
    vnm_sptc *p = vnm_sptc_pack(s, dtype);
    CHECK_PTR(p);
    vn_tensor *dense = vn_vnm_to_dense(s);
    CHECK_PTR(dense);
    int64_t R = p->R, K = p->K;
    float *want = malloc((size_t)(R * K) * sizeof *want), *got = malloc((size_t)(R * K) * sizeof *got);
    const float *d = vn_tensor_data(dense);
    for (int64_t e = 0; e < R * K; e++)
        want[e] = dtype == VN_BF16 ? vn__bf16_to_f32(vn__f32_to_bf16(d[e]))
                                   : vn__f16_to_f32(vn__f32_to_f16(d[e]));
    CHECK_OK(vnm_sptc_decode(p, got));
    for (int64_t e = 0; e < R * K; e++)
        if (memcmp(&want[e], &got[e], sizeof(float)) != 0)
            fail_msg("R=%lld K=%lld V=%lld M=%lld %s: element (%lld, %lld) decodes to %a, "
                     "expected %a", (long long)R, (long long)K, (long long)p->V, (long long)p->M,
                     vn_dtype_name(dtype), (long long)(e / K), (long long)(e % K),
                     (double)got[e], (double)want[e]);
    check_meta_words(p);
    check_gather(s, p);
    free(want);
    free(got);
    vn_tensor_release(dense);
    vnm_sptc_free(p);
}

static void test_roundtrip_random(void **state)
{
    static const int64_t Vs[] = {16, 32, 64, 128}, Ms[] = {4, 5, 8, 16, 32, 64};
    int cases = 0;
    for (size_t iv = 0; iv < sizeof Vs / sizeof Vs[0]; iv++)
        for (size_t im = 0; im < sizeof Ms / sizeof Ms[0]; im++) {
            int64_t V = Vs[iv], M = Ms[im];
            /* (R, K): a partial block and tile with padding groups and
             * columns; one block, one group; whole blocks and tiles. */
            const int64_t shapes[3][2] = {{2 * V + 7, 9 * M + 3}, {5, M}, {2 * V, 16 * M}};
            for (int sh = 0; sh < 3; sh++) {
                vn_vnm *s = random_vnm(shapes[sh][0], shapes[sh][1], V, M,
                                       (uint32_t)(1000 * iv + 10 * im + sh + 1));
                check_roundtrip(s, VN_BF16);
                check_roundtrip(s, VN_F16);
                vn_vnm_free(s);
                cases += 2;
            }
        }
    assert_int_equal(cases, 4 * 6 * 3 * 2);
}

/* A matrix compressed by magnitude (vn_vnm_from_dense), including a K that
 * leaves a group with fewer than 4 real columns. */
static void test_roundtrip_from_dense(void **state)
{
    const int64_t shapes[][4] = {{70, 37, 16, 8}, {130, 100, 64, 32}, {33, 70, 32, 5}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        vn_tensor *w = trand(2, shapes[i], -1, 1, (unsigned)(40 + i));
        vn_vnm *s = vn_vnm_from_dense(w, shapes[i][2], 2, shapes[i][3]);
        CHECK_PTR(s);
        check_roundtrip(s, VN_BF16);
        check_roundtrip(s, VN_F16);
        vn_vnm_free(s);
        vn_tensor_release(w);
    }
}

/* A changed nibble moves values (the decode differs); a repeated position
 * or a value in a padding row is refused. */
static void test_corruption(void **state)
{
    vn_vnm *s = random_vnm(40, 100, 32, 8, 77);
    vnm_sptc *p = vnm_sptc_pack(s, VN_BF16);
    CHECK_PTR(p);
    int64_t n = p->R * p->K;
    float *good = malloc((size_t)n * sizeof *good), *bad = malloc((size_t)n * sizeof *bad);
    CHECK_OK(vnm_sptc_decode(p, good));

    /* Word 0, bits 0–3: row 0, group 0 (columns all real, since K ≥ M). */
    uint32_t saved = p->meta[0], nib = saved & 0xf, other = nib == 0xe ? 0x4 : 0xe;
    p->meta[0] = (saved & ~0xfu) | other;
    CHECK_OK(vnm_sptc_decode(p, bad));
    assert_true(memcmp(good, bad, (size_t)n * sizeof *good) != 0);

    p->meta[0] = (saved & ~0xfu) | 0x5; /* position 1 twice */
    assert_int_equal(vnm_sptc_decode(p, bad), VN_ERR_FORMAT);
    assert_non_null(strstr(vn_last_error(), "ascending"));
    p->meta[0] = (saved & ~0xfu) | 0x6; /* (2, 1): not ascending */
    assert_int_equal(vnm_sptc_decode(p, bad), VN_ERR_FORMAT);
    p->meta[0] = saved;

    /* Row 40 (padding, R = 40) is register 1 of lane 0 in row tile 2. */
    uint16_t *pad = &p->values[2 * p->k_tiles * VNM_SPTC_TILE_VALUES + 2];
    assert_int_equal(*pad, 0);
    *pad = vn__f32_to_bf16(1.0f);
    assert_int_equal(vnm_sptc_decode(p, bad), VN_ERR_FORMAT);
    assert_non_null(strstr(vn_last_error(), "padding"));
    *pad = 0;
    CHECK_OK(vnm_sptc_decode(p, bad));
    assert_memory_equal(good, bad, (size_t)n * sizeof *good);

    free(good);
    free(bad);
    vnm_sptc_free(p);
    vn_vnm_free(s);
}

/* The exact layout on a hand-made case: one block (V = 16) of 16 rows,
 * K = M = 4 (one group): row r keeps positions (r % 3, 3) with values
 * 10r + 1 and 10r + 2. */
static void test_layout_by_hand(void **state)
{
    vn_tensor *cols = vn_from_data(VN_I32, 3, (int64_t[]){1, 1, 4}, (int32_t[]){0, 1, 2, 3});
    uint8_t ix[16];
    float v[32];
    for (int r = 0; r < 16; r++) {
        ix[r] = (uint8_t)((r % 3) | 3 << 2);
        v[2 * r] = (float)(10 * r + 1), v[2 * r + 1] = (float)(10 * r + 2);
    }
    vn_tensor *idx = vn_from_data(VN_U8, 2, (int64_t[]){16, 1}, ix);
    vn_tensor *vals = vn_from_data(VN_F32, 2, (int64_t[]){16, 2}, v);
    vn_vnm *s = vn_vnm_from_pattern(16, 4, 16, 2, 4, cols, idx, vals);
    CHECK_PTR(s);
    vnm_sptc *p = vnm_sptc_pack(s, VN_F16);
    CHECK_PTR(p);
    assert_int_equal(p->row_tiles, 1);
    assert_int_equal(p->k_tiles, 1);
    /* Lane 4·g (tig 0), register 0: row g, group 0; register 1: row g + 8. */
    for (int g = 0; g < 8; g++) {
        const uint16_t *lv = &p->values[4 * g * 8];
        assert_int_equal(lv[0], vn__f32_to_f16((float)(10 * g + 1)));
        assert_int_equal(lv[1], vn__f32_to_f16((float)(10 * g + 2)));
        assert_int_equal(lv[2], vn__f32_to_f16((float)(10 * (g + 8) + 1)));
        assert_int_equal(lv[3], vn__f32_to_f16((float)(10 * (g + 8) + 2)));
        for (int k = 4; k < 8; k++) assert_int_equal(lv[k], 0); /* groups 4..7: padding */
        /* Word of lane (g, 0): nibble 0 of each half is the real group,
         * nibbles 1..3 padding (0x4). */
        uint32_t want = 0x4440u | (uint32_t)((g % 3) | 3 << 2);
        want |= (0x4440u | (uint32_t)(((g + 8) % 3) | 3 << 2)) << 16;
        assert_int_equal(p->meta[2 * g], want);
        assert_int_equal(p->meta[2 * g + 1], 0x44444444u); /* groups 4..7 */
    }
    assert_int_equal(p->gather[0], 0);
    assert_int_equal(p->gather[3], 3);
    assert_int_equal(p->gather[4], -1);
    vnm_sptc_free(p);
    vn_vnm_free(s);
    vn_tensor_release(cols);
    vn_tensor_release(idx);
    vn_tensor_release(vals);
}

/* Refreshing the values of a packed matrix after they changed in place (an
 * optimizer step) gives what a fresh pack gives, and src names each real
 * value exactly once: what the GPU path relies on to repack per call. */
static void test_repack(void **state)
{
    vn_vnm *s = random_vnm(50, 77, 16, 6, 91);
    vnm_sptc *p = vnm_sptc_pack(s, VN_BF16);
    CHECK_PTR(p);
    vn_tensor *vals = vn_vnm_values(s);
    float *v = vn_tensor_data(vals);
    int64_t nv = vn_tensor_numel(vals), n = p->row_tiles * p->k_tiles * VNM_SPTC_TILE_VALUES;
    uint32_t seed = 3;
    for (int64_t i = 0; i < nv; i++) v[i] = random_value(&seed);
    CHECK_OK(vnm_sptc_pack_values(p, v));
    vnm_sptc *fresh = vnm_sptc_pack(s, VN_BF16);
    CHECK_PTR(fresh);
    assert_memory_equal(p->values, fresh->values, (size_t)n * sizeof *p->values);
    check_roundtrip(s, VN_BF16);

    /* Each value whose column is real (K = 77 leaves group 12 with columns
     * 72..77: one padding column) is a source once; the rest never. */
    vn_tensor *mask = vn_vnm_mask(s);
    CHECK_PTR(mask);
    int *uses = calloc((size_t)nv, sizeof *uses);
    int64_t used = 0;
    for (int64_t j = 0; j < n; j++) {
        if (p->src[j] < 0) continue;
        assert_in_range(p->src[j], 0, nv - 1);
        uses[p->src[j]]++, used++;
    }
    int64_t kept = 0;
    const uint8_t *m = vn_tensor_data(mask);
    for (int64_t e = 0; e < 50 * 77; e++) kept += m[e];
    assert_int_equal(used, kept);
    for (int64_t i = 0; i < nv; i++) assert_in_range(uses[i], 0, 1);
    free(uses);
    vn_tensor_release(mask);
    vn_tensor_release(vals);
    vnm_sptc_free(fresh);
    vnm_sptc_free(p);
    vn_vnm_free(s);
}

/* Round to nearest even at the edges the packing meets. */
static void test_conversions(void **state)
{
    assert_int_equal(vn__f32_to_bf16(1.0f), 0x3f80);
    float tie, above;
    uint32_t u = 0x3f808000u; /* halfway between 0x3f80 and 0x3f81: to even */
    memcpy(&tie, &u, 4);
    assert_int_equal(vn__f32_to_bf16(tie), 0x3f80);
    u = 0x3f818000u; /* halfway between 0x3f81 and 0x3f82: to even */
    memcpy(&above, &u, 4);
    assert_int_equal(vn__f32_to_bf16(above), 0x3f82);
    assert_int_equal(vn__f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(vn__f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(vn__f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(vn__f32_to_f16(65520.0f), 0x7c00); /* rounds up to inf */
    assert_int_equal(vn__f32_to_f16(ldexpf(1, -24)), 0x0001);
    assert_int_equal(vn__f32_to_f16(ldexpf(1, -25)), 0x0000); /* tie to even: 0 */
    assert_int_equal(vn__f32_to_f16(ldexpf(3, -25)), 0x0002); /* tie to even: 2 */
    assert_true(vn__f16_to_f32(0x0001) == ldexpf(1, -24));
    assert_true(vn__bf16_to_f32(0xbf80) == -1.0f);
}

static void test_errors(void **state)
{
    assert_null(vnm_sptc_pack(NULL, VN_BF16));
    assert_int_equal(vn_last_status(), VN_ERR_ARG);
    vn_vnm *s = random_vnm(16, 8, 16, 4, 5);
    assert_null(vnm_sptc_pack(s, VN_F32));
    assert_int_equal(vn_last_status(), VN_ERR_DTYPE);
    assert_non_null(strstr(vn_last_error(), "expected dtype bf16 or f16"));
    assert_int_equal(vnm_sptc_decode(NULL, NULL), VN_ERR_ARG);
    vnm_sptc_free(NULL);
    vn_vnm_free(s);
}

/* The dX path setting (vn_vnm_set_cuda_dx) and the rule of its AUTO
 * (vnm_sptc_dx_dense) at each documented boundary: M < 8, B ≥ 256 rows,
 * R·K ≥ 2^20. */
static void test_cuda_dx_rule(void **state)
{
    assert_int_equal(vn_vnm_get_cuda_dx(), VN_VNM_DX_AUTO);
    assert_int_equal(vn_vnm_set_cuda_dx((vn_vnm_cuda_dx)3), VN_ERR_ARG);
    assert_non_null(strstr(vn_last_error(), "VN_VNM_DX_DENSE (2), got 3"));
    assert_int_equal(vn_vnm_get_cuda_dx(), VN_VNM_DX_AUTO); /* unchanged */
    CHECK_OK(vn_vnm_set_cuda_dx(VN_VNM_DX_DENSE));
    assert_int_equal(vn_vnm_get_cuda_dx(), VN_VNM_DX_DENSE);
    CHECK_OK(vn_vnm_set_cuda_dx(VN_VNM_DX_AUTO));
    assert_true(vnm_sptc_dx_dense(4, 4096, 4096, 4096));
    assert_true(vnm_sptc_dx_dense(7, 256, 1024, 1024));
    assert_false(vnm_sptc_dx_dense(8, 4096, 4096, 4096));  /* M = 8: sparse */
    assert_false(vnm_sptc_dx_dense(4, 255, 4096, 4096));   /* too few rows */
    assert_false(vnm_sptc_dx_dense(4, 4096, 1024, 1023));  /* under 2^20 weights */
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_random), cmocka_unit_test(test_roundtrip_from_dense),
        cmocka_unit_test(test_corruption),       cmocka_unit_test(test_layout_by_hand),
        cmocka_unit_test(test_conversions),      cmocka_unit_test(test_errors),
        cmocka_unit_test(test_repack),           cmocka_unit_test(test_cuda_dx_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
