/* vn_causal_self_attention_last (engine/attention_decode.c): the last row
 * of vn_causal_self_attention against the op itself for odd sizes (one
 * position, a softmax whose max moves late, within the first chunk of 64
 * positions and in a later chunk of a longer window, several batches and
 * heads), scores of ±inf and a NaN value (a first chunk of −inf scores
 * before finite ones), a narrowed view of a longer cache against its contiguous copy (read in
 * place through the strides, the same bits), a contiguous cache against
 * one whose features are strided (copied first: the same bits), each head
 * of a multi-head call against that head alone (the same bits), and bad
 * arguments. */
#include "gradcheck.h"

#include <math.h>
#include <string.h>

static float *f32(const vn_tensor *t) { return vn_tensor_data(t); }

static void test_matches_full_attention(void **state)
{
    (void)state;
    const int64_t Ts[] = {1, 2, 7, 40, 150}, Hs[] = {1, 3}, Dh = 8;
    for (int it = 0; it < 5; it++)
        for (int ih = 0; ih < 2; ih++) {
            int64_t B = 2, T = Ts[it], H = Hs[ih], C = H * Dh;
            vn_tensor *qkv = trand(3, (int64_t[]){B, T, 3 * C}, -2, 2, 50 + (unsigned)(it * 2 + ih));
            if (T > 2) /* a key far above the others late (at 150: in the third chunk, whose
                        * max must rescale what the first two summed) */
                for (int64_t d = 0; d < Dh; d++) f32(qkv)[(T - 2) * 3 * C + C + d] = 4;
            vn_tensor *full = vn_causal_self_attention(qkv, H);
            vn_tensor *last = vn_causal_self_attention_last(qkv, H);
            CHECK_PTR(full);
            CHECK_PTR(last);
            assert_int_equal(vn_tensor_ndim(last), 3);
            assert_int_equal(vn_tensor_shape(last)[1], 1);
            for (int64_t b = 0; b < B; b++)
                for (int64_t c = 0; c < C; c++) {
                    double want = f32(full)[(b * T + T - 1) * C + c], got = f32(last)[b * C + c];
                    if (!(fabs(got - want) <= 1e-5 * (1 + fabs(want))))
                        fail_msg("T %lld H %lld out[%lld, %lld]: %.9g, expected %.9g", (long long)T,
                                 (long long)H, (long long)b, (long long)c, got, want);
                }
            vn_tensor_release(qkv);
            vn_tensor_release(full);
            vn_tensor_release(last);
        }
}

/* Scores at the ends of f32, against the full op (NaN where it gives NaN,
 * else close): a query of 1e20 against keys of −1e20 gives −inf scores,
 * for all of the first chunk of 64 positions (T = 70, 150: a later chunk
 * holds every finite score), for a few positions, and for every position
 * (nothing to attend to: NaN, as the full op's 0/0); keys of +1e20 give a
 * +inf score; a NaN in one value. */
static void test_extreme_scores(void **state)
{
    (void)state;
    const int64_t Ts[] = {5, 70, 150}, Dh = 12, C = Dh; /* one head */
    for (int it = 0; it < 3; it++)
        for (int pass = 0; pass < 4; pass++) {
            int64_t T = Ts[it];
            vn_tensor *qkv = trand(3, (int64_t[]){1, T, 3 * C}, -1, 1, 80 + (unsigned)(it * 4 + pass));
            float *x = f32(qkv);
            for (int64_t d = 0; d < Dh; d++) x[(T - 1) * 3 * C + d] = 1e20f; /* the query */
            for (int64_t t = 0; t < T; t++) {
                /* pass 0: −inf scores in the first 64 positions (all but the last when T = 5);
                 * 1: at every position; 2: one +inf score; 3: a NaN value at position 2 */
                bool ninf = pass == 1 || (pass == 0 && t < (T > 64 ? 64 : T - 1)) || (pass >= 2 && t % 3 == 0);
                for (int64_t d = 0; d < Dh; d++) {
                    float *k = x + t * 3 * C + C + d;
                    if (ninf) *k = -1e20f;
                    else if (pass != 1) *k = (float)d * 1e-21f; /* finite scores under 1 */
                }
                if (pass == 2 && t == 4) x[t * 3 * C + C] = 1e20f;
            }
            if (pass == 3) x[2 * 3 * C + 2 * C + 5] = NAN;
            vn_tensor *full = vn_causal_self_attention(qkv, 1), *last = vn_causal_self_attention_last(qkv, 1);
            CHECK_PTR(full);
            CHECK_PTR(last);
            for (int64_t c = 0; c < C; c++) {
                double want = f32(full)[(T - 1) * C + c], got = f32(last)[c];
                bool same = isnan(want) ? isnan(got) : fabs(got - want) <= 1e-5 * (1 + fabs(want));
                if (!same)
                    fail_msg("T %lld pass %d out[%lld]: %.9g, expected %.9g", (long long)T, pass, (long long)c,
                             got, want);
            }
            vn_tensor_release(qkv);
            vn_tensor_release(full);
            vn_tensor_release(last);
        }
}

static void test_narrowed_cache(void **state)
{
    (void)state;
    int64_t B = 2, Tmax = 16, T = 9, H = 2, C = 2 * 4;
    vn_tensor *cache = trand(3, (int64_t[]){B, Tmax, 3 * C}, -1, 1, 60);
    vn_tensor *view = vn_narrow(cache, 1, 0, T), *copy = view ? vn_contiguous(view) : NULL;
    CHECK_PTR(copy);
    vn_tensor *a = vn_causal_self_attention_last(view, H), *b = vn_causal_self_attention_last(copy, H);
    CHECK_PTR(a);
    CHECK_PTR(b);
    assert_memory_equal(vn_tensor_data(a), vn_tensor_data(b), sizeof(float) * (size_t)(B * C));
    vn_tensor *ts[] = {cache, view, copy, a, b};
    for (int k = 0; k < 5; k++) vn_tensor_release(ts[k]);
}

/* Head widths 8 and 12 (a vector block and a tail), T = 19 (two full
 * tiles of 8 positions and a partial one): the contiguous qkv against a
 * view whose feature stride is not 1. */
static void test_vector_path_same_bits(void **state)
{
    (void)state;
    for (int64_t Dh = 8; Dh <= 12; Dh += 4) {
        int64_t B = 1, T = 19, H = 2, C = H * Dh;
        vn_tensor *ft = trand(3, (int64_t[]){B, 3 * C, T}, -2, 2, 61); /* features × positions */
        vn_tensor *strided = vn_transpose(ft, 1, 2), *plain = strided ? vn_contiguous(strided) : NULL;
        CHECK_PTR(plain);
        assert_int_not_equal(vn_tensor_strides(strided)[2], 1);
        vn_tensor *a = vn_causal_self_attention_last(plain, H), *b = vn_causal_self_attention_last(strided, H);
        CHECK_PTR(a);
        CHECK_PTR(b);
        assert_memory_equal(vn_tensor_data(a), vn_tensor_data(b), sizeof(float) * (size_t)(B * C));
        vn_tensor *ts[] = {ft, strided, plain, a, b};
        for (int k = 0; k < 5; k++) vn_tensor_release(ts[k]);
    }
}

/* Heads are computed two at a time (their sums interleaved): each head of
 * a multi-head call equals that head alone (its q, k, v columns as a
 * one-head qkv), bit for bit, for an odd head count (a last head alone),
 * head widths with and without a tail past the 32-float blocks (32, 40),
 * and windows within and past one 64-position chunk. */
static void test_heads_alone_same_bits(void **state)
{
    (void)state;
    const int64_t Dhs[] = {32, 40}, Ts[] = {33, 150};
    for (int id = 0; id < 2; id++)
        for (int it = 0; it < 2; it++) {
            int64_t Dh = Dhs[id], T = Ts[it], H = 3, C = H * Dh;
            vn_tensor *qkv = trand(3, (int64_t[]){1, T, 3 * C}, -2, 2, 71 + (unsigned)(2 * id + it));
            vn_tensor *all = vn_causal_self_attention_last(qkv, H);
            CHECK_PTR(all);
            for (int64_t h = 0; h < H; h++) {
                vn_tensor *one = vn_empty(VN_F32, 3, (int64_t[]){1, T, 3 * Dh});
                for (int64_t t = 0; t < T; t++)
                    for (int part = 0; part < 3; part++) /* q, k, v of head h */
                        memcpy(f32(one) + t * 3 * Dh + part * Dh, f32(qkv) + t * 3 * C + part * C + h * Dh,
                               sizeof(float) * (size_t)Dh);
                vn_tensor *y = vn_causal_self_attention_last(one, 1);
                CHECK_PTR(y);
                assert_memory_equal(f32(y), f32(all) + h * Dh, sizeof(float) * (size_t)Dh);
                vn_tensor_release(one);
                vn_tensor_release(y);
            }
            vn_tensor_release(qkv);
            vn_tensor_release(all);
        }
}

static void expect_error(vn_tensor *t, vn_status want, const char *needle)
{
    assert_null(t);
    assert_int_equal(vn_last_status(), want);
    if (!strstr(vn_last_error(), needle))
        fail_msg("error \"%s\" does not mention \"%s\"", vn_last_error(), needle);
}

static void test_errors(void **state)
{
    (void)state;
    vn_tensor *x2 = trand(2, (int64_t[]){3, 12}, -1, 1, 70), *x = trand(3, (int64_t[]){1, 3, 12}, -1, 1, 71);
    vn_tensor *x0 = vn_zeros(VN_F32, 3, (int64_t[]){1, 0, 12}), *xi = vn_zeros(VN_I32, 3, (int64_t[]){1, 3, 12});
    expect_error(vn_causal_self_attention_last(NULL, 2), VN_ERR_ARG, "causal_self_attention_last");
    expect_error(vn_causal_self_attention_last(x2, 2), VN_ERR_SHAPE, "expected (B, T ≥ 1, 3·C)");
    expect_error(vn_causal_self_attention_last(x0, 2), VN_ERR_SHAPE, "(1, 0, 12)");
    expect_error(vn_causal_self_attention_last(x, 3), VN_ERR_SHAPE, "n_head 3");
    expect_error(vn_causal_self_attention_last(x, 0), VN_ERR_SHAPE, "n_head 0");
    expect_error(vn_causal_self_attention_last(xi, 2), VN_ERR_DTYPE, "causal_self_attention_last");
    vn_tensor *ts[] = {x2, x, x0, xi};
    for (int k = 0; k < 4; k++) vn_tensor_release(ts[k]);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_full_attention),
        cmocka_unit_test(test_extreme_scores),
        cmocka_unit_test(test_narrowed_cache),
        cmocka_unit_test(test_vector_path_same_bits),
        cmocka_unit_test(test_heads_alone_same_bits),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
