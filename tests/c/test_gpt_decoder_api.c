/* The C API of the fused decoder (engine/decode.c) on bad arguments, which
 * the Lua binding never passes: NULL spec, decoder, out pointers and
 * logits are errors with a message; vn_gpt_decoder_next refuses a bad
 * temperature, top_k or out pointer before its step, so the cache row and
 * the engine RNG are as they were; a good call draws the token that
 * vn_sample_logits draws from the step's logits with u = vn_rand's draw;
 * vn_gpt_decoder_current tells a written or freed weight from a written cache;
 * vn_sample_logits draws what the rule in double gives. */
#include "gradcheck.h"

#include <float.h>
#include <math.h>
#include <string.h>

enum { V = 5, C = 4, T = 3, H = 8 };

/* A one-block model of random weights; release with GC_RELEASE over t[]. */
typedef struct {
    vn_tensor *t[12];
    vn_decode_block block;
    vn_gpt_decoder_spec spec;
} tiny;

static void tiny_make(tiny *m)
{
    const int64_t shapes[12][3] = {{V, C}, {T, C}, {C}, {C}, {C}, {3 * C, C}, {C, C},
                                   {H, C}, {C, H}, {1, T, 3 * C}, {C}, {C}};
    const int nd[12] = {2, 2, 1, 1, 1, 2, 2, 2, 2, 3, 1, 1};
    for (int k = 0; k < 12; k++) m->t[k] = trand(nd[k], shapes[k], -1, 1, 70 + (unsigned)k);
    memset(vn_tensor_data(m->t[9]), 0, sizeof(float) * T * 3 * C); /* the cache starts empty */
    vn_tensor **t = m->t;
    m->block = (vn_decode_block){.ln1 = {t[2], t[3], 1e-5, false}, .ln2 = {t[4], NULL, 1e-5, false},
                                 .qkv = {.weight = t[5]}, .attn_proj = {.weight = t[6]},
                                 .fc = {.weight = t[7]}, .mlp_proj = {.weight = t[8]}, .cache = t[9]};
    m->spec = (vn_gpt_decoder_spec){.wte = t[0], .wpe = t[1], .ln_f = {t[10], t[11], 1e-5, false},
                                    .n_layer = 1, .n_head = 2, .blocks = &m->block};
}

/* Whether the cache rows from `row` on are still zero. */
static bool cache_empty_from(const tiny *m, int row)
{
    const float *c = vn_tensor_data(m->t[9]);
    for (int i = row * 3 * C; i < T * 3 * C; i++)
        if (c[i] != 0) return false;
    return true;
}

/* The first draw of vn_rand after seeding with s. */
static float first_draw(uint64_t s)
{
    vn_manual_seed(s);
    vn_tensor *u = vn_rand(1, (int64_t[]){1});
    float v = *(float *)vn_tensor_data(u);
    vn_tensor_release(u);
    return v;
}

static void expect_status(vn_status got, vn_status want, const char *needle)
{
    assert_int_equal(got, want);
    assert_non_null(strstr(vn_last_error(), needle));
}

static void test_null_arguments(void **state)
{
    (void)state;
    assert_null(vn_gpt_decoder_new(NULL));
    expect_status(vn_last_status(), VN_ERR_ARG, "spec is NULL");
    assert_null(vn_gpt_decoder_step(NULL, 0, 0));
    expect_status(vn_last_status(), VN_ERR_ARG, "decoder is NULL");
    assert_null(vn_gpt_decoder_logits(NULL));
    int64_t next = -1;
    expect_status(vn_gpt_decoder_next(NULL, 0, 0, 1.0, 0, &next), VN_ERR_ARG, "decoder is NULL");
    vn_gpt_decoder_free(NULL);
    const double l[2] = {0, 1};
    expect_status(vn_sample_logits(NULL, 2, 1.0, 0, 0.5, &next), VN_ERR_ARG, "NULL pointer");
    expect_status(vn_sample_logits(l, 2, 1.0, 0, 0.5, NULL), VN_ERR_ARG, "NULL pointer");
    expect_status(vn_sample_logits(l, 0, 1.0, 0, 0.5, &next), VN_ERR_ARG, "n = 0");
    expect_status(vn_sample_logits(l, 2, 1.0, 0, 1.0, &next), VN_ERR_ARG, "u = 1");
    assert_int_equal(next, -1);
}

static void test_next_refused_changes_nothing(void **state)
{
    (void)state;
    tiny m;
    tiny_make(&m);
    vn_gpt_decoder *d = vn_gpt_decoder_new(&m.spec);
    CHECK_PTR(d);
    float want_u = first_draw(9);
    vn_manual_seed(9);
    int64_t next = -1;
    expect_status(vn_gpt_decoder_next(d, 1, 0, 1.0, 0, NULL), VN_ERR_ARG, "next is NULL");
    expect_status(vn_gpt_decoder_next(d, 1, 0, 0.0, 0, &next), VN_ERR_ARG, "temperature 0");
    expect_status(vn_gpt_decoder_next(d, 1, 0, 1.0, -2, &next), VN_ERR_ARG, "top_k -2");
    assert_true(cache_empty_from(&m, 0));
    vn_tensor *u = vn_rand(1, (int64_t[]){1});
    assert_true(*(float *)vn_tensor_data(u) == want_u); /* no draw was spent */
    vn_tensor_release(u);
    assert_int_equal(next, -1);
    vn_gpt_decoder_free(d);
    GC_RELEASE(m.t[0], m.t[1], m.t[2], m.t[3], m.t[4], m.t[5], m.t[6], m.t[7], m.t[8], m.t[9], m.t[10],
               m.t[11]);
}

/* next = step + vn_sample_logits over its logits with u = vn_rand's draw. */
static void test_next_is_step_and_sample(void **state)
{
    (void)state;
    tiny m;
    tiny_make(&m);
    vn_gpt_decoder *d = vn_gpt_decoder_new(&m.spec);
    CHECK_PTR(d);
    for (int temp = 0; temp < 3; temp++) {
        double temperature = 0.3 + temp;
        int64_t got = -1, want = -1;
        vn_manual_seed(40 + (uint64_t)temp);
        CHECK_OK(vn_gpt_decoder_next(d, 2, 0, temperature, 3, &got));
        const float *l = vn_gpt_decoder_logits(d);
        CHECK_PTR(l);
        double dl[V];
        for (int i = 0; i < V; i++) dl[i] = l[i];
        CHECK_OK(vn_sample_logits(dl, V, temperature, 3, first_draw(40 + (uint64_t)temp), &want));
        assert_int_equal(got, want);
        assert_true(got >= 0 && got < V);
    }
    vn_gpt_decoder_free(d);
    GC_RELEASE(m.t[0], m.t[1], m.t[2], m.t[3], m.t[4], m.t[5], m.t[6], m.t[7], m.t[8], m.t[9], m.t[10],
               m.t[11]);
}

/* A packed layer's bad data and options name the layer: a code 3 (which
 * the kernels would read as 2), a bad norm eps. */
static void test_packed_errors_name_the_layer(void **state)
{
    (void)state;
    tiny m;
    tiny_make(&m);
    int64_t rb = vn_ternary_row_bytes(C);
    vn_tensor *p = vn_empty(VN_U8, 2, (int64_t[]){H, rb}), *nw = vn_ones(VN_F32, 1, (int64_t[]){C});
    memset(vn_tensor_data(p), 0x55, (size_t)(H * rb)); /* code 1 (0) everywhere */
    ((uint8_t *)vn_tensor_data(p))[5 * rb + 2] = 0xff;  /* row 5, column 2: code 3 */
    m.block.fc = (vn_decode_linear){.packed = p, .gamma = 0.5f, .norm = nw, .norm_eps = 1e-6};
    assert_null(vn_gpt_decoder_new(&m.spec));
    expect_status(vn_last_status(), VN_ERR_FORMAT,
                  "gpt_decoder: block 1 of 1: fc: packed weights row 5, column 2: code 3");
    ((uint8_t *)vn_tensor_data(p))[5 * rb + 2] = 0x55;
    m.block.fc.norm_eps = -1;
    assert_null(vn_gpt_decoder_new(&m.spec));
    expect_status(vn_last_status(), VN_ERR_ARG, "gpt_decoder: block 1 of 1: fc norm weight eps = -1");
    m.block.fc.norm_eps = 1e-6;
    vn_gpt_decoder *d = vn_gpt_decoder_new(&m.spec);
    CHECK_PTR(d);
    vn_gpt_decoder_free(d);
    GC_RELEASE(p, nw, m.t[0], m.t[1], m.t[2], m.t[3], m.t[4], m.t[5], m.t[6], m.t[7], m.t[8], m.t[9], m.t[10],
               m.t[11]);
}

/* vn_gpt_decoder_current: true until a tensor of the spec other than a
 * cache is written in place (copy_ into the packed weights, even of the
 * same bytes; fill_ of an f32 weight) or freed; the steps' and a caller's
 * writes into a cache leave it true; NULL is false. A step (or next) on a
 * decoder that is not current is refused with VN_ERR_STATE. */
static void test_current(void **state)
{
    (void)state;
    tiny m;
    tiny_make(&m);
    int64_t rb = vn_ternary_row_bytes(C);
    vn_tensor *p = vn_empty(VN_U8, 2, (int64_t[]){H, rb}), *same = vn_empty(VN_U8, 2, (int64_t[]){H, rb});
    memset(vn_tensor_data(p), 0x55, (size_t)(H * rb));
    memset(vn_tensor_data(same), 0x55, (size_t)(H * rb));
    m.block.fc = (vn_decode_linear){.packed = p, .gamma = 0.5f};
    assert_false(vn_gpt_decoder_current(NULL));
    vn_gpt_decoder *d = vn_gpt_decoder_new(&m.spec);
    CHECK_PTR(d);
    assert_true(vn_gpt_decoder_current(d));
    CHECK_PTR(vn_gpt_decoder_step(d, 1, 0));
    CHECK_OK(vn_tensor_fill_(m.t[9], 0));
    assert_true(vn_gpt_decoder_current(d));
    CHECK_OK(vn_tensor_copy_(p, same));
    assert_false(vn_gpt_decoder_current(d));
    /* and the step refuses it: the re-laid copy (VNNI) dates from the make */
    assert_null(vn_gpt_decoder_step(d, 1, 1));
    expect_status(vn_last_status(), VN_ERR_STATE, "written in place");
    vn_gpt_decoder_free(d);
    d = vn_gpt_decoder_new(&m.spec);
    CHECK_PTR(d);
    assert_true(vn_gpt_decoder_current(d));
    CHECK_OK(vn_tensor_fill_(m.t[6], 0.5));
    assert_false(vn_gpt_decoder_current(d));
    int64_t next = -1;
    expect_status(vn_gpt_decoder_next(d, 1, 0, 1.0, 0, &next), VN_ERR_STATE, "written in place");
    assert_int_equal(next, -1);
    vn_gpt_decoder_free(d);
    /* codes written after the make (code 3 is no ternary value) are never
     * read: the make checked the codes, the step does not */
    d = vn_gpt_decoder_new(&m.spec);
    CHECK_PTR(d);
    memset(vn_tensor_data(same), 0xff, (size_t)(H * rb));
    CHECK_OK(vn_tensor_copy_(p, same));
    assert_null(vn_gpt_decoder_step(d, 1, 0));
    expect_status(vn_last_status(), VN_ERR_STATE, "written in place");
    vn_gpt_decoder_free(d);
    CHECK_OK(vn_tensor_fill_(p, 0x55)); /* valid codes again, for the make below */
    d = vn_gpt_decoder_new(&m.spec);
    CHECK_PTR(d);
    vn_tensor_free(m.t[11]);
    assert_false(vn_gpt_decoder_current(d));
    vn_gpt_decoder_free(d);
    GC_RELEASE(p, same, m.t[0], m.t[1], m.t[2], m.t[3], m.t[4], m.t[5], m.t[6], m.t[7], m.t[8], m.t[9],
               m.t[10], m.t[11]);
}

/* vn_sample_logits against the rule in double with libm's exp: the same
 * index for every u of a grid except within 1e-5 of a boundary of the
 * running sums (the weights are f32, about 2 ulp); −inf logits, those
 * outside the top_k and one 200 below the max (an exponent under −87.3,
 * weight 0) are never drawn, even with u just below 1. */
static void test_sample_matches_reference(void **state)
{
    (void)state;
    enum { N = 37 };
    double l[N], w[N];
    vn_manual_seed(3);
    vn_tensor *r = vn_rand(1, (int64_t[]){N});
    CHECK_PTR(r);
    for (int i = 0; i < N; i++) l[i] = 12.0 * ((float *)vn_tensor_data(r))[i] - 6.0;
    vn_tensor_release(r);
    l[4] = l[N - 2] = -INFINITY; /* at the end, where the last resort looks */
    l[9] = 7.0;   /* the max */
    l[N - 1] = -193; /* 200 below it */
    const double temps[] = {0.5, 1.0, 1.7};
    const int64_t ks[] = {0, 10};
    for (int it = 0; it < 3; it++)
        for (int ik = 0; ik < 2; ik++) {
            double t = temps[it], floor = -INFINITY, total = 0;
            if (ks[ik]) { /* the k-th largest, by counting */
                for (int i = 0; i < N; i++) {
                    int above = 0;
                    for (int j = 0; j < N; j++) above += l[j] > l[i];
                    if (above == ks[ik] - 1) floor = l[i];
                }
            }
            for (int i = 0; i < N; i++) {
                w[i] = l[i] >= floor ? exp((l[i] - 7.0) / t) : 0;
                total += w[i];
            }
            for (int g = 0; g <= 400; g++) {
                double u = g < 400 ? g / 400.0 : nextafter(1.0, 0.0), acc = 0, near = INFINITY;
                int64_t want = -1, got = -1;
                for (int i = 0; i < N; i++) {
                    acc += w[i];
                    near = fmin(near, fabs(acc - u * total));
                    if (want < 0 && w[i] > 0 && acc > u * total) want = i;
                }
                CHECK_OK(vn_sample_logits(l, N, t, ks[ik], u, &got));
                assert_true(got >= 0 && got < N && l[got] >= floor && l[got] > -100);
                if (near > 1e-5 * total && want >= 0 && got != want)
                    fail_msg("temperature %g top_k %lld u %.4f: drew %lld, expected %lld", t,
                             (long long)ks[ik], u, (long long)got, (long long)want);
            }
        }
}

/* vn_sample_logits at the edges, where the rule's answer is plain: the
 * index every u of a grid draws (want(u)). A temperature so small that
 * 1/temperature overflows (1e-310) or merely huge (1e-300) is greedy; a
 * huge one (1e300) is uniform over the finite logits; logits near ±DBL_MAX
 * (whose difference overflows), subnormal ones, all equal, a single one;
 * top_k 1, n, past n, with ties at the k-th largest (kept) and with −inf
 * logits counted in; NaN and +inf past the vector lanes' first pass. */
typedef int64_t (*rule_fn)(double u);
static int64_t draw_1(double u) { (void)u; return 1; }
static int64_t draw_0(double u) { (void)u; return 0; }
static int64_t draw_0_or_2(double u) { return u < 0.5 ? 0 : 2; }
static int64_t draw_third(double u) { return (int64_t)(u * 3); }
static int64_t draw_half(double u) { return u < 0.5 ? 0 : 1; }

static void expect_draws(const double *l, int64_t n, double t, int64_t k, rule_fn want, const char *what)
{
    for (int g = 0; g < 64; g++) {
        double u = (g + 0.37) / 64; /* away from the boundaries at thirds and halves */
        int64_t got = -1;
        CHECK_OK(vn_sample_logits(l, n, t, k, u, &got));
        if (got != want(u))
            fail_msg("%s: u %.4f drew %lld, expected %lld", what, u, (long long)got, (long long)want(u));
    }
}

static void test_sample_edges(void **state)
{
    (void)state;
    const double greedy[3] = {0, 5, 1}, equal[3] = {2, 2, 2}, one[1] = {-3};
    expect_draws(greedy, 3, 1e-310, 0, draw_1, "temperature 1e-310 (1/t overflows)");
    expect_draws(greedy, 3, 1e-300, 0, draw_1, "temperature 1e-300");
    expect_draws(greedy, 3, 1e-310, 2, draw_1, "temperature 1e-310, top_k 2");
    const double tie[3] = {5, -1, 5}, huge[3] = {DBL_MAX, -DBL_MAX, DBL_MAX};
    expect_draws(tie, 3, 1e-310, 0, draw_0_or_2, "temperature 1e-310, two maxima");
    expect_draws(huge, 3, 1.0, 0, draw_0_or_2, "logits ±DBL_MAX");
    expect_draws(huge, 3, 1e300, 0, draw_0_or_2, "logits ±DBL_MAX, temperature 1e300");
    expect_draws(greedy, 3, 1e300, 0, draw_third, "temperature 1e300: uniform");
    const double sub[2] = {4.9e-324, 0}; /* subnormal: the same weight, 1 */
    expect_draws(sub, 2, 1.0, 0, draw_half, "subnormal logits");
    expect_draws(sub, 2, 1e-310, 0, draw_half, "a subnormal gap at temperature 1e-310: e^(-5e-14) each");
    expect_draws(equal, 3, 1.0, 0, draw_third, "equal logits");
    expect_draws(equal, 3, 1.0, 1, draw_third, "equal logits, top_k 1 (ties at the k-th kept)");
    expect_draws(one, 1, 1.0, 0, draw_0, "one logit");
    expect_draws(one, 1, 1e-310, 5, draw_0, "one logit, tiny temperature, top_k past n");
    expect_draws(greedy, 3, 1.0, 1, draw_1, "top_k 1 is greedy");
    const double inf2[3] = {-INFINITY, 0.5, -INFINITY};
    expect_draws(inf2, 3, 1.0, 2, draw_1, "top_k 2 with −inf logits");
    expect_draws(inf2, 3, 1e-310, 3, draw_1, "top_k n with −inf logits, tiny temperature");
    /* A bad logit past the first 16 (the vector loop's body, not a tail)
     * is named by its index. */
    double l[37];
    for (int i = 0; i < 37; i++) l[i] = i * 0.1;
    int64_t got = -1;
    l[33] = NAN;
    expect_status(vn_sample_logits(l, 37, 1.0, 0, 0.5, &got), VN_ERR_ARG, "logits[33] is nan");
    l[33] = 0, l[20] = INFINITY;
    expect_status(vn_sample_logits(l, 37, 1.0, 0, 0.5, &got), VN_ERR_ARG, "logits[20] is inf");
    l[20] = 0, l[36] = -NAN;
    expect_status(vn_sample_logits(l, 37, 1.0, 0, 0.5, &got), VN_ERR_ARG, "logits[36] is");
    const double all_ninf[2] = {-INFINITY, -INFINITY};
    expect_status(vn_sample_logits(all_ninf, 2, 1.0, 0, 0.5, &got), VN_ERR_ARG, "every logit is -inf");
    expect_status(vn_sample_logits(greedy, 3, 0.0, 0, 0.5, &got), VN_ERR_ARG, "temperature 0");
    expect_status(vn_sample_logits(greedy, 3, INFINITY, 0, 0.5, &got), VN_ERR_ARG, "temperature inf");
    expect_status(vn_sample_logits(greedy, 3, 1.0, -1, 0.5, &got), VN_ERR_ARG, "top_k -1");
    expect_status(vn_sample_logits(greedy, 3, 1.0, 0, -1e-300, &got), VN_ERR_ARG, "u = -1e-300");
    assert_int_equal(got, -1);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_next_refused_changes_nothing),
        cmocka_unit_test(test_next_is_step_and_sample),
        cmocka_unit_test(test_packed_errors_name_the_layer),
        cmocka_unit_test(test_current),
        cmocka_unit_test(test_sample_matches_reference),
        cmocka_unit_test(test_sample_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
