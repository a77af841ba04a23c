/* IDX reader: small files written here (plain and gzip) read back byte for
 * byte in every supported type; truncated, wrong-magic, unsupported-type,
 * oversized and missing files give errors naming the path and the counts;
 * and, when the Debian package is installed, the real Fashion-MNIST labels. */
#include "gradcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char dir[64];

static int make_dir(void **state)
{
    strcpy(dir, "/tmp/venom-idx-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    static const char *names[] = {"u8", "u8.gz", "i32", "f32.gz", "i8", "i16", "f64", "trunc",
                                  "trunc.gz", "magic", "huge", "extra", "hdr"};
    char path[128];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    return rmdir(dir);
}

/* Writes n bytes to dir/name, through gzip when the name ends in .gz. */
static const char *write_file(const char *name, const void *bytes, size_t n)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (strstr(name, ".gz")) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(gzwrite(f, bytes, (unsigned)n), (int)n);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(bytes, 1, n, f), n);
        fclose(f);
    }
    return path;
}

static void expect_error(vn_tensor *t, const char *const *needles)
{
    assert_null(t);
    const char *msg = vn_last_error();
    for (; *needles; needles++)
        if (!strstr(msg, *needles)) fail_msg("error message \"%s\" lacks \"%s\"", msg, *needles);
}

static void check_shape(const vn_tensor *t, vn_dtype dtype, int ndim, const int64_t *shape)
{
    CHECK_PTR(t);
    assert_int_equal(vn_tensor_dtype(t), dtype);
    assert_int_equal(vn_tensor_ndim(t), ndim);
    for (int d = 0; d < ndim; d++) assert_int_equal(vn_tensor_shape(t)[d], shape[d]);
}

static void test_u8(void **state)
{
    /* 2 × 3 × 4 bytes 0..23 (plus 200+ to catch sign errors) */
    uint8_t file[4 + 12 + 24] = {0, 0, 0x08, 3, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4};
    for (int i = 0; i < 24; i++) file[16 + i] = (uint8_t)(i < 12 ? i : 200 + i);
    const char *names[2] = {"u8", "u8.gz"};
    for (int k = 0; k < 2; k++) {
        const char *path = write_file(names[k], file, sizeof file);
        vn_tensor *t = vn_idx_load(path);
        check_shape(t, VN_U8, 3, (int64_t[]){2, 3, 4});
        assert_memory_equal(vn_tensor_data(t), file + 16, 24);
        vn_tensor_release(t);
    }
}

static void test_wide_types(void **state)
{
    /* i32 (2 × 2), big-endian: 1, -2, 0x01020304, INT32_MIN */
    const uint8_t i32[] = {0, 0, 0x0C, 2, 0, 0, 0, 2, 0, 0, 0, 2,
                           0, 0, 0, 1,  0xFF, 0xFF, 0xFF, 0xFE, 1, 2, 3, 4, 0x80, 0, 0, 0};
    vn_tensor *t = vn_idx_load(write_file("i32", i32, sizeof i32));
    check_shape(t, VN_I32, 2, (int64_t[]){2, 2});
    const int32_t want_i[4] = {1, -2, 0x01020304, INT32_MIN};
    assert_memory_equal(vn_tensor_data(t), want_i, sizeof want_i);
    vn_tensor_release(t);

    /* f32 (3), gzip: 1.5 = 3FC00000, -2 = C0000000, 0.1f = 3DCCCCCD */
    const uint8_t f32[] = {0, 0, 0x0D, 1, 0, 0, 0, 3, 0x3F, 0xC0, 0, 0,
                           0xC0, 0, 0, 0, 0x3D, 0xCC, 0xCC, 0xCD};
    t = vn_idx_load(write_file("f32.gz", f32, sizeof f32));
    check_shape(t, VN_F32, 1, (int64_t[]){3});
    const float want_f[3] = {1.5f, -2.0f, 0.1f};
    assert_memory_equal(vn_tensor_data(t), want_f, sizeof want_f);
    vn_tensor_release(t);

    /* i8 is widened to i32, keeping the sign */
    const uint8_t i8[] = {0, 0, 0x09, 1, 0, 0, 0, 4, 0x7F, 0x80, 0xFF, 0x05};
    t = vn_idx_load(write_file("i8", i8, sizeof i8));
    check_shape(t, VN_I32, 1, (int64_t[]){4});
    const int32_t want_8[4] = {127, -128, -1, 5};
    assert_memory_equal(vn_tensor_data(t), want_8, sizeof want_8);
    vn_tensor_release(t);
}

static void test_bad_files(void **state)
{
    const uint8_t i16[] = {0, 0, 0x0B, 1, 0, 0, 0, 1, 0, 7};
    const char *p = write_file("i16", i16, sizeof i16);
    expect_error(vn_idx_load(p), (const char *[]){p, "i16", "0x0b", NULL});
    const uint8_t f64[] = {0, 0, 0x0E, 1, 0, 0, 0, 0};
    p = write_file("f64", f64, sizeof f64);
    expect_error(vn_idx_load(p), (const char *[]){p, "f64", NULL});

    /* 2 × 3 u8 needs 6 data bytes; only 4 are there */
    const uint8_t trunc[] = {0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4};
    p = write_file("trunc", trunc, sizeof trunc);
    expect_error(vn_idx_load(p), (const char *[]){p, "truncated", "6 bytes", "found 4", NULL});
    p = write_file("trunc.gz", trunc, sizeof trunc);
    expect_error(vn_idx_load(p), (const char *[]){p, "truncated", "6 bytes", "found 4", NULL});
    /* a header cut inside the dims */
    p = write_file("hdr", trunc, 9);
    expect_error(vn_idx_load(p), (const char *[]){p, "truncated", "8 bytes", "found 5", NULL});
    /* data past what the header declares */
    const uint8_t extra[] = {0, 0, 0x08, 1, 0, 0, 0, 2, 1, 2, 3};
    p = write_file("extra", extra, sizeof extra);
    expect_error(vn_idx_load(p), (const char *[]){p, "more data", NULL});

    const uint8_t magic[] = {0x1f, 0x8c, 0x08, 0x01, 0, 0, 0, 0};
    p = write_file("magic", magic, sizeof magic);
    expect_error(vn_idx_load(p), (const char *[]){p, "magic", "1f 8c 08 01", NULL});

    /* three dims of 2^32 − 1: the product overflows any sane size */
    uint8_t huge[4 + 12] = {0, 0, 0x08, 3};
    memset(huge + 4, 0xFF, 12);
    p = write_file("huge", huge, sizeof huge);
    expect_error(vn_idx_load(p), (const char *[]){p, "4294967295", NULL});

    char missing[128];
    snprintf(missing, sizeof missing, "%s/no-such-file.gz", dir);
    expect_error(vn_idx_load(missing), (const char *[]){missing, "No such file", NULL});
}

/* The real data, when the dataset-fashion-mnist package is installed. */
static void test_fashion_mnist(void **state)
{
    const char *labels = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz";
    if (access(labels, R_OK) != 0) skip();
    vn_tensor *t = vn_idx_load(labels);
    check_shape(t, VN_U8, 1, (int64_t[]){60000});
    const uint8_t *y = vn_tensor_data(t);
    int count[10] = {0};
    for (int i = 0; i < 60000; i++) {
        if (y[i] > 9) fail_msg("label %d at %d is out of 0..9", y[i], i);
        count[y[i]]++;
    }
    for (int c = 0; c < 10; c++) assert_int_equal(count[c], 6000); /* balanced classes */
    vn_tensor_release(t);
    t = vn_idx_load("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz");
    check_shape(t, VN_U8, 3, (int64_t[]){10000, 28, 28});
    vn_tensor_release(t);
}

/* vn_read_file: a gzip file and a plain one give the same bytes, across
 * the reader's buffer doublings (200 KB); a missing file, a truncated and a
 * damaged gzip stream are errors naming the path. */
static void test_read_file(void **state)
{
    (void)state;
    size_t n = 200000;
    unsigned char *bytes = malloc(n);
    for (size_t i = 0; i < n; i++) bytes[i] = (unsigned char)(i * 7919u >> 3);
    const char *names[] = {"blob.bin", "blob.bin.gz"};
    for (int k = 0; k < 2; k++) {
        vn_tensor *t = vn_read_file(write_file(names[k], bytes, n));
        CHECK_PTR(t);
        assert_int_equal(vn_tensor_dtype(t), VN_U8);
        assert_int_equal(vn_tensor_numel(t), (int64_t)n);
        assert_memory_equal(vn_tensor_data(t), bytes, n);
        vn_tensor_release(t);
        remove(write_file(names[k], "", 0));
    }
    /* the first half of a gzip file: zlib stops early, read_file says so */
    {
        char gz[128]; /* write_file's buffer is reused by the next call */
        snprintf(gz, sizeof gz, "%s", write_file("cut.gz", bytes, n));
        FILE *f = fopen(gz, "rb");
        assert_non_null(f);
        unsigned char head[4096];
        size_t got = fread(head, 1, sizeof head, f);
        fclose(f);
        const char *cut = write_file("cut.bin", head, got / 2);
        expect_error(vn_read_file(cut), (const char *[]){"truncated", "cut.bin", NULL});
        remove(cut);
        remove(gz);
    }
    vn_tensor *empty = vn_read_file(write_file("empty.txt", "", 0));
    CHECK_PTR(empty);
    assert_int_equal(vn_tensor_numel(empty), 0);
    vn_tensor_release(empty);
    remove(write_file("empty.txt", "", 0));
    char missing[128];
    snprintf(missing, sizeof missing, "%s/missing.gz", dir);
    expect_error(vn_read_file(missing), (const char *[]){"read_file: cannot open", "missing.gz", NULL});
    const unsigned char damaged[] = {31, 139, 8, 0, 0, 0, 0, 0, 0, 3, 255, 255, 255, 255, 255, 255};
    const char *path = write_file("damaged.bin", damaged, sizeof damaged);
    expect_error(vn_read_file(path), (const char *[]){"damaged gzip", "damaged.bin", NULL});
    remove(path);
    free(bytes);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_u8),
        cmocka_unit_test(test_wide_types),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_fashion_mnist),
        cmocka_unit_test(test_read_file),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
