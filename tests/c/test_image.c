/* Images through stb_image: PNG, BMP and TGA round trips byte for byte (1..4
 * channels, (H, W) images), JPEG within a tolerance, a hand-written GIF,
 * channel conversion; crop, hflip and to_float against plain reference
 * loops (crop windows past every edge); resize: a copy at the same size,
 * constant images stay constant, ramps stay ramps; load_batch equal for 0
 * and 4 threads, with the same error (the first bad file) for both; hostile
 * files (every truncation of a PNG, a flipped bit in every byte, headers
 * declaring 4·10^8 and 10^10 pixels, truncated JPEGs) give errors and never
 * a crash (run under the sanitizers by the ASan build); bad arguments give
 * messages naming the file; dir_list's order and make_dir. */
#include "gradcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char dir[64];

static int make_tmp(void **state)
{
    strcpy(dir, "/tmp/venom-image-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_tmp(void **state)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

static const char *path_of(const char *name)
{
    static char path[4][160];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k];
}

/* A u8 tensor of the shape with bytes from a private generator. */
static vn_tensor *random_image(int ndim, const int64_t *shape, unsigned seed)
{
    vn_tensor *t = vn_empty(VN_U8, ndim, shape);
    CHECK_PTR(t);
    uint8_t *p = vn_tensor_data(t);
    int64_t n = vn_tensor_numel(t);
    srand(seed);
    for (int64_t i = 0; i < n; i++) p[i] = (uint8_t)(rand() >> 7);
    return t;
}

static void expect_message(const char *const *needles)
{
    const char *msg = vn_last_error();
    for (; *needles; needles++)
        if (!strstr(msg, *needles)) fail_msg("error message \"%s\" lacks \"%s\"", msg, *needles);
}

static void assert_same_image(const vn_tensor *a, const vn_tensor *b)
{
    CHECK_PTR(a);
    CHECK_PTR(b);
    assert_int_equal(vn_tensor_numel(a), vn_tensor_numel(b));
    assert_memory_equal(vn_tensor_data(a), vn_tensor_data(b), (size_t)vn_tensor_numel(a));
}

static unsigned char *slurp(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)*len + 1);
    assert_int_equal(fread(buf, 1, (size_t)*len, f), (size_t)*len);
    fclose(f);
    return buf;
}

static void spit(const char *path, const unsigned char *buf, long len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
}

static void test_round_trips(void **state)
{
    for (int c = 1; c <= 4; c++) {
        vn_tensor *img = random_image(3, (int64_t[]){13, 17, c}, 10 + c);
        const char *p = path_of("rt.png");
        CHECK_OK(vn_image_save(p, img, 0));
        vn_tensor *back = vn_image_load(p, 0);
        CHECK_PTR(back);
        assert_int_equal(vn_tensor_ndim(back), 3);
        assert_int_equal(vn_tensor_shape(back)[0], 13);
        assert_int_equal(vn_tensor_shape(back)[1], 17);
        assert_int_equal(vn_tensor_shape(back)[2], c);
        assert_same_image(back, img);
        vn_tensor_release(back);
        vn_tensor_release(img);
    }
    /* (H, W) saves as gray; RGB through BMP and TGA is lossless too */
    vn_tensor *gray = random_image(2, (int64_t[]){9, 5}, 3);
    CHECK_OK(vn_image_save(path_of("g.PNG"), gray, 0));
    vn_tensor *back = vn_image_load(path_of("g.PNG"), 0);
    assert_same_image(back, gray);
    /* gray → RGB repeats the value in each channel */
    vn_tensor *rgb = vn_image_load(path_of("g.PNG"), 3);
    CHECK_PTR(rgb);
    assert_int_equal(vn_tensor_shape(rgb)[2], 3);
    const uint8_t *g = vn_tensor_data(gray), *q = vn_tensor_data(rgb);
    for (int i = 0; i < 45; i++)
        for (int k = 0; k < 3; k++) assert_int_equal(q[3 * i + k], g[i]);
    vn_tensor_release(back);
    vn_tensor_release(rgb);
    vn_tensor_release(gray);
    const char *names[] = {"rt.bmp", "rt.tga"};
    for (int k = 0; k < 2; k++) {
        vn_tensor *img = random_image(3, (int64_t[]){7, 11, 3}, 20 + k);
        CHECK_OK(vn_image_save(path_of(names[k]), img, 0));
        back = vn_image_load(path_of(names[k]), 3);
        assert_same_image(back, img);
        vn_tensor_release(back);
        vn_tensor_release(img);
    }
}

/* GIF (stb_image reads, does not write): a hand-written 1 × 1 GIF89a whose
 * palette entry 0 is red and whose one pixel (LZW: clear, 0, end) uses it;
 * stb_image gives GIFs as RGBA. */
static void test_gif(void **state)
{
    static const unsigned char gif[] = {
        'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0x80, 0, 0, /* 1 × 1, 2-colour table */
        0xff, 0, 0, 0, 0, 0,                                   /* red, black */
        0x2c, 0, 0, 0, 0, 1, 0, 1, 0, 0,                       /* image descriptor */
        2, 2, 0x44, 0x01, 0, 0x3b};                            /* LZW data, trailer */
    spit(path_of("red.gif"), gif, sizeof gif);
    vn_tensor *t = vn_image_load(path_of("red.gif"), 0);
    CHECK_PTR(t);
    assert_int_equal(vn_tensor_numel(t), 4);
    assert_memory_equal(vn_tensor_data(t), ((const uint8_t[]){255, 0, 0, 255}), 4);
    vn_tensor_release(t);
}

static void test_jpeg(void **state)
{
    /* a smooth image: JPEG keeps it within a few levels */
    vn_tensor *img = vn_empty(VN_U8, 3, (int64_t[]){32, 48, 3});
    uint8_t *p = vn_tensor_data(img);
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 48; x++)
            for (int c = 0; c < 3; c++) p[(y * 48 + x) * 3 + c] = (uint8_t)(4 * x + 2 * y + 30 * c);
    CHECK_OK(vn_image_save(path_of("s.jpg"), img, 95));
    long len;
    unsigned char *bytes = slurp(path_of("s.jpg"), &len);
    assert_true(len > 2 && bytes[0] == 0xFF && bytes[1] == 0xD8); /* SOI marker */
    free(bytes);
    vn_tensor *back = vn_image_load(path_of("s.jpg"), 0);
    CHECK_PTR(back);
    assert_int_equal(vn_tensor_shape(back)[2], 3);
    const uint8_t *b = vn_tensor_data(back);
    double err = 0;
    for (int i = 0; i < 32 * 48 * 3; i++) err += abs((int)b[i] - (int)p[i]);
    err /= 32 * 48 * 3;
    if (err > 3.0) fail_msg("JPEG at quality 95: mean |error| %.2f levels, expected <= 3", err);
    vn_tensor_release(back);
    vn_tensor_release(img);
}

/* The crop as a plain loop: pixel (y, x) of the window is img's (top + y,
 * left + x) when inside, else fill. */
static void test_crop_flip(void **state)
{
    const int64_t H = 6, W = 9, C = 2;
    vn_tensor *img = random_image(3, (int64_t[]){H, W, C}, 7);
    const uint8_t *src = vn_tensor_data(img);
    const int64_t windows[][4] = {{0, 0, 6, 9}, {2, 3, 3, 4}, {-2, -3, 10, 15}, {-4, 5, 3, 8},
                                  {5, 8, 4, 4}, {7, 0, 2, 2}, {0, -20, 3, 3}};
    for (size_t k = 0; k < sizeof windows / sizeof windows[0]; k++) {
        int64_t top = windows[k][0], left = windows[k][1], h = windows[k][2], w = windows[k][3];
        vn_tensor *out = vn_image_crop(img, top, left, h, w, 77);
        CHECK_PTR(out);
        assert_int_equal(vn_tensor_shape(out)[0], h);
        assert_int_equal(vn_tensor_shape(out)[1], w);
        const uint8_t *o = vn_tensor_data(out);
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++)
                for (int64_t c = 0; c < C; c++) {
                    int64_t sy = top + y, sx = left + x;
                    int want = sy >= 0 && sy < H && sx >= 0 && sx < W ? src[(sy * W + sx) * C + c] : 77;
                    if (o[(y * w + x) * C + c] != want)
                        fail_msg("crop window %zu at (%lld, %lld, %lld): got %d, want %d", k,
                                 (long long)y, (long long)x, (long long)c, o[(y * w + x) * C + c], want);
                }
        vn_tensor_release(out);
    }
    vn_tensor *f = vn_image_hflip(img);
    CHECK_PTR(f);
    const uint8_t *o = vn_tensor_data(f);
    for (int64_t y = 0; y < H; y++)
        for (int64_t x = 0; x < W; x++)
            for (int64_t c = 0; c < C; c++)
                assert_int_equal(o[(y * W + x) * C + c], src[(y * W + W - 1 - x) * C + c]);
    vn_tensor *ff = vn_image_hflip(f);
    assert_same_image(ff, img);
    vn_tensor_release(ff);
    vn_tensor_release(f);

    /* bad windows and inputs */
    assert_null(vn_image_crop(img, 0, 0, 0, 3, 0));
    expect_message((const char *[]){"image_crop", "0 x 3", NULL});
    assert_null(vn_image_crop(img, 0, 0, 2, 3, 256));
    expect_message((const char *[]){"fill 256", NULL});
    vn_tensor *x = vn_zeros(VN_F32, 3, (int64_t[]){2, 2, 1});
    assert_null(vn_image_hflip(x));
    assert_int_equal(vn_last_status(), VN_ERR_DTYPE);
    vn_tensor_release(x);
    x = vn_zeros(VN_U8, 3, (int64_t[]){2, 2, 5});
    assert_null(vn_image_crop(x, 0, 0, 1, 1, 0));
    assert_int_equal(vn_last_status(), VN_ERR_SHAPE);
    expect_message((const char *[]){"(2, 2, 5)", NULL});
    vn_tensor_release(x);
    vn_tensor_release(img);
}

/* ToTensor: out[b][k][y][x] = in[b][y][x][k] / 255, as a plain loop */
static void test_to_float(void **state)
{
    const int64_t B = 2, H = 3, W = 4, C = 3;
    vn_tensor *img = random_image(4, (int64_t[]){B, H, W, C}, 12);
    vn_tensor *f = vn_image_to_float(img);
    CHECK_PTR(f);
    assert_int_equal(vn_tensor_ndim(f), 4);
    assert_int_equal(vn_tensor_shape(f)[1], C);
    const uint8_t *src = vn_tensor_data(img);
    const float *o = vn_tensor_data(f);
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < C; k++)
            for (int64_t y = 0; y < H; y++)
                for (int64_t x = 0; x < W; x++)
                    assert_float_equal(o[((b * C + k) * H + y) * W + x],
                                       src[((b * H + y) * W + x) * C + k] / 255.0f, 1e-7);
    vn_tensor_release(f);
    vn_tensor *gray = random_image(2, (int64_t[]){H, W}, 13);
    f = vn_image_to_float(gray);
    CHECK_PTR(f);
    assert_int_equal(vn_tensor_ndim(f), 3);
    assert_int_equal(vn_tensor_shape(f)[0], 1);
    assert_float_equal(((float *)vn_tensor_data(f))[5], ((uint8_t *)vn_tensor_data(gray))[5] / 255.0f, 1e-7);
    vn_tensor_release(f);
    vn_tensor_release(gray);
    vn_tensor *one = vn_zeros(VN_U8, 1, (int64_t[]){4});
    assert_null(vn_image_to_float(one));
    expect_message((const char *[]){"image_to_float", "(4,)", NULL});
    vn_tensor_release(one);
    vn_tensor_release(img);
}

static void test_resize(void **state)
{
    vn_tensor *img = random_image(3, (int64_t[]){10, 12, 3}, 9);
    /* the same size: a copy, unchanged */
    vn_tensor *same = vn_image_resize(img, 10, 12);
    assert_same_image(same, img);
    vn_tensor_release(same);
    /* a constant image stays constant, growing and shrinking */
    vn_tensor *flat = vn_zeros(VN_U8, 2, (int64_t[]){8, 8});
    memset(vn_tensor_data(flat), 123, 64);
    const int64_t sizes[][2] = {{17, 5}, {3, 30}, {1, 1}};
    for (int k = 0; k < 3; k++) {
        vn_tensor *r = vn_image_resize(flat, sizes[k][0], sizes[k][1]);
        CHECK_PTR(r);
        assert_int_equal(vn_tensor_ndim(r), 2);
        assert_int_equal(vn_tensor_shape(r)[0], sizes[k][0]);
        assert_int_equal(vn_tensor_shape(r)[1], sizes[k][1]);
        const uint8_t *p = vn_tensor_data(r);
        for (int64_t i = 0; i < vn_tensor_numel(r); i++) assert_int_equal(p[i], 123);
        vn_tensor_release(r);
    }
    /* a horizontal ramp stays a ramp (non-decreasing along each row) */
    uint8_t *p = vn_tensor_data(flat);
    for (int i = 0; i < 64; i++) p[i] = (uint8_t)(30 * (i % 8));
    vn_tensor *r = vn_image_resize(flat, 4, 4);
    CHECK_PTR(r);
    const uint8_t *q = vn_tensor_data(r);
    for (int y = 0; y < 4; y++)
        for (int x = 1; x < 4; x++) assert_true(q[y * 4 + x] > q[y * 4 + x - 1]);
    vn_tensor_release(r);
    assert_null(vn_image_resize(flat, 0, 4));
    expect_message((const char *[]){"image_resize", "0 x 4", NULL});
    vn_tensor_release(flat);
    vn_tensor_release(img);
}

static void test_batch(void **state)
{
    enum { N = 20 };
    const char *paths[N];
    char names[N][160];
    vn_tensor *imgs[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "%s/b%02d.png", dir, i);
        paths[i] = names[i];
        imgs[i] = random_image(3, (int64_t[]){5 + i, 7, 1 + i % 4}, 100 + i);
        CHECK_OK(vn_image_save(paths[i], imgs[i], 0));
    }
    vn_tensor *a[N], *b[N];
    CHECK_OK(vn_image_load_batch(N, paths, 0, 0, a));
    CHECK_OK(vn_image_load_batch(N, paths, 0, 4, b));
    for (int i = 0; i < N; i++) {
        assert_same_image(a[i], imgs[i]);
        assert_same_image(b[i], imgs[i]);
        vn_tensor_release(a[i]);
        vn_tensor_release(b[i]);
    }
    /* two bad files: the first in list order is the one reported */
    char missing[160], text[160];
    snprintf(missing, sizeof missing, "%s/missing.png", dir);
    snprintf(text, sizeof text, "%s/text.png", dir);
    spit(text, (const unsigned char *)"hello, not an image", 19);
    paths[5] = text;
    paths[12] = missing;
    for (int threads = 0; threads <= 4; threads += 4) {
        for (int i = 0; i < N; i++) a[i] = (vn_tensor *)&a; /* must come back NULL */
        assert_int_equal(vn_image_load_batch(N, paths, 0, threads, a), VN_ERR_FORMAT);
        expect_message((const char *[]){text, "not an image", NULL});
        for (int i = 0; i < N; i++) assert_null(a[i]);
    }
    for (int i = 0; i < N; i++) vn_tensor_release(imgs[i]);
}

/* A PNG with a valid IHDR declaring w × h pixels and an empty IDAT. */
static long huge_png(unsigned char *buf, uint32_t w, uint32_t h)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    long n = 0;
    memcpy(buf, sig, 8), n = 8;
    const unsigned char ihdr[17] = {'I', 'H', 'D', 'R', w >> 24, w >> 16, w >> 8, w,
                                    h >> 24, h >> 16, h >> 8, h, 8, 0, 0, 0, 0};
    const unsigned char *chunks[2] = {ihdr, (const unsigned char *)"IEND"};
    const uint32_t lens[2] = {13, 0};
    for (int k = 0; k < 2; k++) {
        buf[n] = 0, buf[n + 1] = 0, buf[n + 2] = 0, buf[n + 3] = (unsigned char)lens[k];
        memcpy(buf + n + 4, chunks[k], 4 + lens[k]);
        uLong crc = crc32(crc32(0, Z_NULL, 0), chunks[k], 4 + lens[k]);
        n += 8 + lens[k];
        buf[n] = crc >> 24, buf[n + 1] = crc >> 16, buf[n + 2] = crc >> 8, buf[n + 3] = crc;
        n += 4;
    }
    return n;
}

static void test_hostile_files(void **state)
{
    vn_tensor *img = random_image(3, (int64_t[]){16, 16, 3}, 5);
    const char *good = path_of("good.png"), *bad = path_of("bad.png");
    CHECK_OK(vn_image_save(good, img, 0));
    long len;
    unsigned char *bytes = slurp(good, &len);
    unsigned char *copy = malloc((size_t)len);
    /* every truncation is an error naming the file */
    for (long cut = 0; cut < len; cut++) {
        spit(bad, bytes, cut);
        vn_tensor *t = vn_image_load(bad, 0);
        if (t) fail_msg("a PNG cut to %ld of its %ld bytes decoded", cut, len);
        expect_message((const char *[]){bad, NULL});
    }
    /* a flipped bit in each byte after the signature is an error (the CRC
     * or the chunk length catches it); in the signature, no crash */
    srand(1);
    for (long at = 0; at < len; at++) {
        memcpy(copy, bytes, (size_t)len);
        copy[at] ^= (unsigned char)(1u << (rand() % 8));
        spit(bad, copy, len);
        vn_tensor *t = vn_image_load(bad, 0);
        if (t && at >= 8) fail_msg("a PNG with a bit flipped in byte %ld decoded", at);
        vn_tensor_release(t);
    }
    spit(bad, bytes, len - 12); /* no IEND */
    assert_null(vn_image_load(bad, 0));
    expect_message((const char *[]){"truncated PNG", "no IEND", NULL});
    /* a header declaring 20000 × 20000 or 100000 × 100000 pixels is refused
     * before decoding as too large; 0 wide or high, as empty (stb_image's
     * own refusal read "unknown image type") */
    unsigned char head[64];
    spit(bad, head, huge_png(head, 20000, 20000));
    assert_null(vn_image_load(bad, 0));
    assert_int_equal(vn_last_status(), VN_ERR_FORMAT);
    expect_message((const char *[]){bad, "too large (20000 x 20000 pixels, limit", NULL});
    spit(bad, head, huge_png(head, 100000, 100000));
    assert_null(vn_image_load(bad, 0));
    assert_int_equal(vn_last_status(), VN_ERR_FORMAT);
    expect_message((const char *[]){bad, "too large (100000 x 100000 pixels, limit", NULL});
    spit(bad, head, huge_png(head, 0, 16));
    assert_null(vn_image_load(bad, 0));
    assert_int_equal(vn_last_status(), VN_ERR_FORMAT);
    expect_message((const char *[]){bad, "zero width or height", NULL});
    spit(bad, head, huge_png(head, 16, 0));
    assert_null(vn_image_load(bad, 0));
    expect_message((const char *[]){bad, "zero width or height", NULL});
    free(copy);
    free(bytes);
    /* truncated JPEGs: stb_image may fill in what is missing; never a crash */
    CHECK_OK(vn_image_save(path_of("t.jpg"), img, 80));
    bytes = slurp(path_of("t.jpg"), &len);
    for (long cut = 0; cut < len; cut += 7) {
        spit(path_of("cut.jpg"), bytes, cut);
        vn_tensor_release(vn_image_load(path_of("cut.jpg"), 0));
    }
    free(bytes);
    vn_tensor_release(img);
}

static void test_bad_arguments(void **state)
{
    const char *missing = path_of("nope.png");
    assert_null(vn_image_load(missing, 0));
    assert_int_equal(vn_last_status(), VN_ERR_IO);
    expect_message((const char *[]){missing, "No such file", NULL});
    assert_null(vn_image_load(dir, 0));
    expect_message((const char *[]){dir, "directory", NULL});
    assert_null(vn_image_load(NULL, 0));
    assert_int_equal(vn_last_status(), VN_ERR_ARG);
    assert_null(vn_image_load(missing, 5));
    expect_message((const char *[]){"channels", "5", NULL});
    const char *empty = path_of("empty.png");
    spit(empty, (const unsigned char *)"", 0);
    assert_null(vn_image_load(empty, 0));
    expect_message((const char *[]){empty, "not an image", NULL});

    vn_tensor *img = random_image(3, (int64_t[]){4, 4, 3}, 1);
    const char *out = path_of("out.gif");
    assert_int_equal(vn_image_save(out, img, 0), VN_ERR_ARG);
    expect_message((const char *[]){out, ".png", "'gif'", NULL});
    assert_int_equal(vn_image_save(path_of("q.jpg"), img, 101), VN_ERR_ARG);
    const char *nodir = path_of("no/such/dir/x.png");
    assert_int_equal(vn_image_save(nodir, img, 0), VN_ERR_IO);
    expect_message((const char *[]){nodir, NULL});
    vn_tensor *f = vn_zeros(VN_F32, 3, (int64_t[]){4, 4, 3});
    assert_int_equal(vn_image_save(path_of("f.png"), f, 0), VN_ERR_DTYPE);
    vn_tensor *four = vn_zeros(VN_U8, 4, (int64_t[]){1, 4, 4, 3});
    assert_int_equal(vn_image_save(path_of("f.png"), four, 0), VN_ERR_SHAPE);
    expect_message((const char *[]){"(1, 4, 4, 3)", NULL});
    struct stat st;
    assert_int_not_equal(stat(path_of("f.png"), &st), 0); /* nothing written */
    vn_tensor_release(four);
    vn_tensor_release(f);
    vn_tensor_release(img);
}

static void test_dirs(void **state)
{
    CHECK_OK(vn_make_dir(path_of("tree/b/deep")));
    CHECK_OK(vn_make_dir(path_of("tree/b/deep/"))); /* exists: fine */
    CHECK_OK(vn_make_dir(path_of("tree/a")));
    CHECK_OK(vn_make_dir(path_of("tree/B")));
    spit(path_of("tree/a0.txt"), (const unsigned char *)"x", 1);
    assert_int_equal(vn_make_dir(path_of("tree/a0.txt/sub")), VN_ERR_IO);
    expect_message((const char *[]){"a0.txt", "not a directory", NULL});
    int n;
    char **names;
    bool *is_dir;
    CHECK_OK(vn_dir_list(path_of("tree"), &n, &names, &is_dir));
    assert_int_equal(n, 4);
    const char *want[] = {"B", "a", "a0.txt", "b"}; /* bytewise order */
    const bool want_dir[] = {true, true, false, true};
    for (int i = 0; i < 4; i++) {
        assert_string_equal(names[i], want[i]);
        assert_int_equal(is_dir[i], want_dir[i]);
    }
    vn_dir_list_free(n, names, is_dir);
    assert_int_equal(vn_dir_list(path_of("none"), &n, &names, &is_dir), VN_ERR_IO);
    expect_message((const char *[]){"none", "No such file", NULL});
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips),   cmocka_unit_test(test_jpeg),
        cmocka_unit_test(test_crop_flip),     cmocka_unit_test(test_resize),
        cmocka_unit_test(test_to_float),      cmocka_unit_test(test_gif),
        cmocka_unit_test(test_batch),         cmocka_unit_test(test_hostile_files),
        cmocka_unit_test(test_bad_arguments), cmocka_unit_test(test_dirs),
    };
    cmocka_set_message_output(CM_OUTPUT_TAP);
    return cmocka_run_group_tests(tests, make_tmp, remove_tmp);
}
