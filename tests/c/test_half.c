/* The 16-bit float dtypes on the CPU: f32 → bf16/f16 conversion against
 * independent references (GCC's _Float16 for f16; for bf16 the nearer of the
 * two neighbouring bf16 values, ties to even, found by comparing doubles),
 * both ways over every 16-bit pattern, tensor conversion and element access,
 * and the ops that refuse 16-bit tensors with a clear error. */
#include "gradcheck.h"
#include "internal.h"

#include <math.h>
#include <string.h>

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* bf16 of x the slow way: the two bf16 values around x (truncation and the
 * next one up in magnitude) and whichever is nearer, the even one on a tie. */
static uint16_t ref_bf16(float x)
{
    uint32_t u = bits_of(x);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double dl = fabs((double)x - (double)float_of((uint32_t)lo << 16));
    double dh = fabs((double)float_of((uint32_t)hi << 16) - (double)x);
    if (dl < dh) return lo;
    if (dh < dl) return hi;
    return (lo & 1) ? hi : lo;
}

static uint32_t next_random(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 32);
}

static void test_f16_against_gcc(void **state)
{
    /* every f16 pattern to f32 and back */
    for (uint32_t h = 0; h < 65536; h++) {
        _Float16 ref;
        uint16_t hb = (uint16_t)h;
        memcpy(&ref, &hb, 2);
        float want = (float)ref, got = vn__f16_to_f32(hb);
        if (bits_of(want) != bits_of(got) && !(isnan(want) && isnan(got)))
            fail_msg("f16 0x%04x: got %a, want %a", h, (double)got, (double)want);
        if (!isnan(want) && vn__f32_to_f16(got) != hb)
            fail_msg("f16 0x%04x does not survive f32 and back (got 0x%04x)", h,
                     vn__f32_to_f16(got));
    }
    /* random f32 bit patterns, plus the boundaries of the f16 range */
    uint64_t s = 42;
    float edge[] = {65504.0f, 65519.99f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-14f,
                    0x1.ff8p-15f, 0.0f, -0.0f, 1e-8f, -1e-8f, INFINITY, -INFINITY, 1.0f / 3};
    for (int i = 0; i < 3000000 + (int)(sizeof edge / sizeof edge[0]); i++) {
        float x = i < 3000000 ? float_of(next_random(&s)) : edge[i - 3000000];
        if (isnan(x)) continue;
        _Float16 ref = (_Float16)x;
        uint16_t want;
        memcpy(&want, &ref, 2);
        if (vn__f32_to_f16(x) != want)
            fail_msg("f32 %a → f16: got 0x%04x, want 0x%04x", (double)x, vn__f32_to_f16(x), want);
    }
    assert_true(isnan(vn__f16_to_f32(vn__f32_to_f16(NAN))));
}

static void test_bf16_against_reference(void **state)
{
    for (uint32_t h = 0; h < 65536; h++) { /* every bf16 value is exact in f32 */
        float x = vn__bf16_to_f32((uint16_t)h);
        assert_int_equal(bits_of(x), h << 16);
        if (!isnan(x)) assert_int_equal(vn__f32_to_bf16(x), h);
    }
    uint64_t s = 7;
    for (int i = 0; i < 3000000; i++) {
        float x = float_of(next_random(&s));
        /* (near FLT_MAX the upper neighbour is infinity, which this reference cannot weigh) */
        if (isnan(x) || fabsf(x) > 0x1.fep127f) continue;
        if (vn__f32_to_bf16(x) != ref_bf16(x))
            fail_msg("f32 %a → bf16: got 0x%04x, want 0x%04x", (double)x, vn__f32_to_bf16(x),
                     ref_bf16(x));
    }
    /* ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 and goes to the even 1 */
    assert_int_equal(vn__f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    assert_int_equal(vn__f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_int_equal(vn__f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* odd below: up */
    assert_true(isnan(vn__bf16_to_f32(vn__f32_to_bf16(NAN))));
}

/* Tensors: conversion both ways, element access, and what refuses them. */
static void test_tensors(void **state)
{
    float x[5] = {1.0f / 3, -2.5f, 65504.0f, 1e-3f, 100000.0f};
    vn_tensor *t = tf32(1, (int64_t[]){5}, x);
    vn_tensor *b = vn_to_dtype(t, VN_BF16), *h = vn_to_dtype(t, VN_F16);
    assert_non_null(b);
    assert_non_null(h);
    assert_int_equal(vn_tensor_dtype(b), VN_BF16);
    assert_int_equal(vn_dtype_size(VN_F16), 2);
    assert_string_equal(vn_dtype_name(VN_BF16), "bf16");
    uint16_t raw[5];
    assert_int_equal(vn_tensor_copy_out(b, raw, sizeof raw), VN_OK);
    for (int i = 0; i < 5; i++) assert_int_equal(raw[i], ref_bf16(x[i]));
    assert_int_equal(vn_tensor_copy_out(h, raw, sizeof raw), VN_OK);
    assert_int_equal(raw[4], 0x7c00); /* 1e5 is beyond f16's range: infinity */
    double v;
    assert_int_equal(vn_tensor_get(h, (int64_t[]){0}, &v), VN_OK);
    assert_true(v == (double)0.333251953125);
    assert_int_equal(vn_tensor_set(b, (int64_t[]){1}, 3.0), VN_OK);
    vn_tensor *back = vn_to_dtype(b, VN_F32);
    const float *pb = vn_tensor_data(back);
    assert_true(pb[0] == 0.333984375f && pb[1] == 3.0f);

    /* arithmetic refuses them, naming the dtype and the way out */
    vn_tensor *sum = vn_add(b, b);
    assert_null(sum);
    assert_int_equal(vn_last_status(), VN_ERR_DTYPE);
    assert_non_null(strstr(vn_last_error(), "bf16"));
    assert_non_null(strstr(vn_last_error(), "convert it to f32"));
    assert_null(vn_matmul(h, h));
    assert_int_equal(vn_last_status(), VN_ERR_DTYPE);
    vn_tensor_release(back);
    vn_tensor_release(t);
    vn_tensor_release(b);
    vn_tensor_release(h);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_against_gcc),
        cmocka_unit_test(test_bf16_against_reference),
        cmocka_unit_test(test_tensors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
