/* safetensors: round trips of every dtype, 0-d, empty and non-contiguous
 * tensors, byte for byte; the file layout; every malformed-file case with
 * the names and numbers its message must give; save-time argument errors;
 * and atomic saves: a save that fails (test hook) or whose process is
 * killed half-way leaves the previous file intact, and the next save removes
 * the temporaries of dead processes only. F64 files load as f32. */
#define _GNU_SOURCE /* memmem */
#include "gradcheck.h"
#include "safetensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

static int make_dir(void **state)
{
    strcpy(dir, "/tmp/venom-st-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

/* Names of the files in dir, sorted, joined by spaces. */
static const char *list_dir(void)
{
    static char out[1024];
    struct dirent **ents;
    int n = scandir(dir, &ents, NULL, alphasort);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (ents[i]->d_name[0] != '.' || strlen(ents[i]->d_name) > 2) {
            if (out[0]) strcat(out, " ");
            strncat(out, ents[i]->d_name, sizeof out - strlen(out) - 2);
        }
        free(ents[i]);
    }
    if (n >= 0) free(ents);
    return out;
}

static int remove_dir(void **state)
{
    char path[512];
    struct dirent **ents;
    int n = scandir(dir, &ents, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, ents[i]->d_name);
        if (strcmp(ents[i]->d_name, ".") && strcmp(ents[i]->d_name, "..")) unlink(path);
        free(ents[i]);
    }
    if (n >= 0) free(ents);
    return rmdir(dir);
}

static const char *in_dir(const char *name)
{
    static char path[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k];
}

/* The whole file at path, malloc'ed; its size in *n. */
static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(*n + 1);
    assert_int_equal(fread(buf, 1, *n, f), *n);
    fclose(f);
    return buf;
}

static void write_bytes(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    fclose(f);
}

/* A file of: the 8-byte length of `json`, `json`, then data_len bytes
 * 0, 1, 2, ... */
static const char *write_st(const char *name, const char *json, size_t data_len)
{
    size_t jl = strlen(json);
    uint8_t *buf = malloc(8 + jl + data_len);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)jl >> (8 * i));
    memcpy(buf + 8, json, jl);
    for (size_t i = 0; i < data_len; i++) buf[8 + jl + i] = (uint8_t)i;
    const char *path = in_dir(name);
    write_bytes(path, buf, 8 + jl + data_len);
    free(buf);
    return path;
}

/* Each tensor's bytes, row-major. */
static void assert_same_bytes(const vn_tensor *got, const vn_tensor *want)
{
    assert_int_equal(vn_tensor_dtype(got), vn_tensor_dtype(want));
    assert_int_equal(vn_tensor_ndim(got), vn_tensor_ndim(want));
    for (int d = 0; d < vn_tensor_ndim(want); d++)
        assert_int_equal(vn_tensor_shape(got)[d], vn_tensor_shape(want)[d]);
    size_t n = (size_t)vn_tensor_numel(want) * vn_dtype_size(vn_tensor_dtype(want));
    uint8_t *a = malloc(n + 1), *b = malloc(n + 1);
    CHECK_OK(vn_tensor_copy_out(got, a, n));
    CHECK_OK(vn_tensor_copy_out(want, b, n));
    assert_memory_equal(a, b, n);
    free(a);
    free(b);
}

/* ---- round trips ------------------------------------------------------------- */

#define NT 7
static vn_tensor *sample[NT];
static const char *sample_names[NT] = {"f32", "i32", "i64", "u8", "scalar", "empty", "layers.1.weight_t"};
static const char *meta_keys[] = {"epoch", "note"};
static const char *meta_values[] = {"3", "caf\xc3\xa9 \"quoted\" \\ ok"};

static void make_samples(void)
{
    float f[6] = {1.5f, -0.0f, INFINITY, NAN, 1e-45f, -3.25e38f};
    int32_t i32[4] = {INT32_MIN, -1, 0, INT32_MAX};
    int64_t i64[4] = {INT64_MIN, -2, 1, INT64_MAX};
    uint8_t u8[5] = {0, 1, 127, 128, 255};
    float one = 42.0f;
    sample[0] = vn_from_data(VN_F32, 2, (int64_t[]){2, 3}, f);
    sample[1] = vn_from_data(VN_I32, 1, (int64_t[]){4}, i32);
    sample[2] = vn_from_data(VN_I64, 2, (int64_t[]){2, 2}, i64);
    sample[3] = vn_from_data(VN_U8, 1, (int64_t[]){5}, u8);
    sample[4] = vn_from_data(VN_F32, 0, NULL, &one);
    sample[5] = vn_zeros(VN_I64, 2, (int64_t[]){0, 3});
    sample[6] = vn_transpose(sample[0], 0, 1); /* non-contiguous: written row-major */
    for (int i = 0; i < NT; i++) CHECK_PTR(sample[i]);
}

static void free_samples(void)
{
    for (int i = 0; i < NT; i++) vn_tensor_release(sample[i]);
}

static vn_tensor_map sample_map(void)
{
    return (vn_tensor_map){NT, sample_names, sample, 2, meta_keys, meta_values};
}

static void test_roundtrip(void **state)
{
    make_samples();
    vn_tensor_map m = sample_map();
    const char *path = in_dir("all.safetensors");
    CHECK_OK(vn_save(path, &m));
    vn_tensor_map *got = vn_load(path);
    CHECK_PTR(got);
    assert_int_equal(got->n, NT);
    for (int i = 0; i < NT; i++) {
        assert_string_equal(got->names[i], sample_names[i]); /* data order = given order */
        assert_true(vn_tensor_is_contiguous(got->tensors[i]));
        assert_same_bytes(got->tensors[i], sample[i]);
    }
    assert_int_equal(got->n_meta, 2);
    for (int i = 0; i < 2; i++) {
        assert_string_equal(got->meta_keys[i], meta_keys[i]);
        assert_string_equal(got->meta_values[i], meta_values[i]);
    }
    assert_ptr_equal(vn_tensor_map_get(got, "u8"), got->tensors[3]);
    assert_null(vn_tensor_map_get(got, "nope"));
    assert_non_null(strstr(vn_last_error(), "no tensor named 'nope'"));
    assert_string_equal(vn_tensor_map_meta(got, "epoch"), "3");
    assert_null(vn_tensor_map_meta(got, "nope"));

    /* Saving what was loaded gives the same bytes. */
    const char *again = in_dir("again.safetensors");
    CHECK_OK(vn_save(again, got));
    size_t na, nb;
    uint8_t *a = slurp(path, &na), *b = slurp(again, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    free(a);
    free(b);
    vn_tensor_map_free(got);
    free_samples();
}

/* The layout: header length a multiple of 8 and padded with spaces, then
 * each tensor's little-endian bytes, back to back, to the end of the file. */
static void test_layout(void **state)
{
    make_samples();
    vn_tensor_map m = sample_map();
    const char *path = in_dir("layout.safetensors");
    CHECK_OK(vn_save(path, &m));
    size_t n;
    uint8_t *buf = slurp(path, &n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i];
    assert_int_equal(hlen % 8, 0);
    assert_int_equal(buf[8], '{');
    size_t end = 8 + hlen;
    while (buf[end - 1] == ' ') end--;
    assert_int_equal(buf[end - 1], '}');
    const char *parts[] = {
        "{\"__metadata__\":{\"epoch\":\"3\",",
        "\"i32\":{\"dtype\":\"I32\",\"shape\":[4],\"data_offsets\":[24,40]}",
        "\"scalar\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[77,81]}",
        "\"empty\":{\"dtype\":\"I64\",\"shape\":[0,3],\"data_offsets\":[81,81]}",
        "\"layers.1.weight_t\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[81,105]}}",
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (!memmem(buf + 8, hlen, parts[i], strlen(parts[i])))
            fail_msg("header %.*s lacks %s", (int)hlen, (const char *)buf + 8, parts[i]);
    size_t pos = 8 + hlen;
    for (int i = 0; i < NT; i++) {
        size_t nb = (size_t)vn_tensor_numel(sample[i]) * vn_dtype_size(vn_tensor_dtype(sample[i]));
        uint8_t *want = malloc(nb + 1);
        CHECK_OK(vn_tensor_copy_out(sample[i], want, nb));
        assert_memory_equal(buf + pos, want, nb);
        free(want);
        pos += nb;
    }
    assert_int_equal(pos, n);
    /* A known little-endian pattern: i32 -1 is ff ff ff ff, INT32_MAX 0x7fffffff. */
    assert_memory_equal(buf + 8 + hlen + 24 + 12, "\xff\xff\xff\x7f", 4);
    free(buf);
    free_samples();
}

/* Files from other writers: no tensors; padding; unknown keys in an entry;
 * several empty tensors at one offset. */
static void test_accepts(void **state)
{
    vn_tensor_map *m = vn_load(write_st("empty.st", "{}", 0));
    CHECK_PTR(m);
    assert_int_equal(m->n, 0);
    assert_int_equal(m->n_meta, 0);
    vn_tensor_map_free(m);

    m = vn_load(write_st("mixed.st",
                         "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6],\"x\":1},"
                         "\"z\":{\"dtype\":\"I32\",\"shape\":[0],\"data_offsets\":[4,4]},"
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                         "\"e\":{\"dtype\":\"I64\",\"shape\":[3,0],\"data_offsets\":[4,4]}}   ",
                         6));
    CHECK_PTR(m);
    assert_int_equal(m->n, 4);
    const char *order[] = {"a", "e", "z", "b"};
    for (int i = 0; i < 4; i++) assert_string_equal(m->names[i], order[i]);
    uint8_t *b = vn_tensor_data(m->tensors[3]);
    assert_int_equal(b[0], 4);
    assert_int_equal(b[1], 5);
    vn_tensor_map_free(m);
}

/* ---- malformed files ---------------------------------------------------------- */

static void expect_load_error(const char *path, const char *const *needles)
{
    vn_tensor_map *m = vn_load(path);
    if (m) fail_msg("loading %s succeeded; expected an error with \"%s\"", path, needles[0]);
    const char *msg = vn_last_error();
    for (; *needles; needles++)
        if (!strstr(msg, *needles)) fail_msg("error message \"%s\" lacks \"%s\"", msg, *needles);
}

#define EXPECT(path, ...) expect_load_error(path, (const char *const[]){__VA_ARGS__, NULL})
#define F32_1 "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"

static void test_malformed_prefix(void **state)
{
    write_bytes(in_dir("short"), "\x02\0\0\0\0", 5);
    EXPECT(in_dir("short"), "short", "5 bytes", "shorter than the 8-byte header length");
    EXPECT(write_st("zero", "", 0), "zero", "must begin with '{'", "empty header");
    /* length 1000 with 10 bytes after it */
    write_bytes(in_dir("long"), "\xe8\x03\0\0\0\0\0\0{}        ", 18);
    EXPECT(in_dir("long"), "header length 1000 is larger than the 10 bytes");
    write_bytes(in_dir("huge"), "\0\0\0\0\0\0\0\x40{}", 10);
    EXPECT(in_dir("huge"), "header length 4611686018427387904 is larger than the 2 bytes");
    /* Above the 100 MB limit yet inside the (sparse) file. */
    int fd = open(in_dir("big"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "\x01\xe1\xf5\x05\0\0\0\0{", 9), 9);
    assert_int_equal(ftruncate(fd, 100000100), 0);
    close(fd);
    EXPECT(in_dir("big"), "header length 100000001 is above the limit of 100000000 bytes");
    unlink(in_dir("big"));
    EXPECT(write_st("list", "[1, 2]", 0), "must begin with '{'");
    EXPECT(in_dir("missing"), "missing", "cannot open", "No such file");
    EXPECT(dir, "is a directory");
}

static void test_malformed_json(void **state)
{
    EXPECT(write_st("cut", "{\"w\": {\"dtype\": \"F32\",", 0), "malformed JSON header at byte",
           "line 1");
    EXPECT(write_st("utf8", "{\"\xff\": 1}", 0), "malformed JSON header");
    EXPECT(write_st("dup", "{\"w\":" F32_1 ",\"w\":" F32_1 "}", 4), "appears twice", "\"w\"");
    EXPECT(write_st("notobj", "{\"w\": 3}", 0), "tensor 'w': expected an object", "found 3");
    EXPECT(write_st("nodtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
           "tensor 'w': dtype must be a string", "found nothing");
    EXPECT(write_st("q7", "{\"w\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
           "tensor 'w': unknown dtype 'Q7'", "F32, I32, I64, U8, BF16 and F16");
    /* (F64 loads, converted to f32: test_f64 below) */
    EXPECT(write_st("i16", "{\"w\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2),
           "tensor 'w': unsupported dtype 'I16'", "and F64 as f32");
    EXPECT(write_st("u16", "{\"w\":{\"dtype\":\"U16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2),
           "tensor 'w': unsupported dtype 'U16'");
    EXPECT(write_st("shape", "{\"w\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", 4),
           "tensor 'w': shape must be an array", "found a string");
    EXPECT(write_st("neg", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-3],\"data_offsets\":[0,4]}}", 4),
           "tensor 'w': shape[1] must be a non-negative integer, found -3");
    EXPECT(write_st("real", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,4]}}", 4),
           "tensor 'w': shape[0] must be a non-negative integer, found 2.5");
    EXPECT(write_st("dims", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                            "\"data_offsets\":[0,1]}}", 1),
           "tensor 'w': shape has 9 dims; venom supports at most 8");
    EXPECT(write_st("off3", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8),
           "tensor 'w': data_offsets must hold 2 integers", "found 3");
    EXPECT(write_st("bigint", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
                              "\"data_offsets\":[0,18446744073709551616]}}", 4),
           "malformed JSON", "too big integer");
    EXPECT(write_st("meta", "{\"__metadata__\":[1]}", 0), "__metadata__ must be an object",
           "found an array");
    EXPECT(write_st("metav", "{\"__metadata__\":{\"epoch\":3}}", 0),
           "__metadata__ entry 'epoch' must be a string, found 3");
}

static void test_malformed_offsets(void **state)
{
    EXPECT(write_st("rev", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8),
           "tensor 'w': data_offsets [8, 4] end before they begin");
    EXPECT(write_st("past", "{\"w\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]}}", 16),
           "tensor 'w': data_offsets [0, 32] go past the end of the 16-byte data section");
    EXPECT(write_st("size", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8),
           "tensor 'w': shape [3] of F32 needs 12 bytes but data_offsets [0, 8] hold 8");
    EXPECT(write_st("wrap", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                            "\"data_offsets\":[0,8]}}", 8),
           "tensor 'w': shape [4294967296, 4294967296] of F32 needs more than 2^64 bytes");
    EXPECT(write_st("overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12),
           "tensors 'a' [0, 8] and 'b' [4, 12] overlap");
    EXPECT(write_st("same", "{\"a\":" F32_1 ",\"b\":" F32_1 "}", 4),
           "tensors 'a' [0, 4] and 'b' [0, 4] overlap");
    EXPECT(write_st("gap", "{\"a\":" F32_1 ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
                           "\"data_offsets\":[8,12]}}", 12),
           "bytes [4, 8] of the data section belong to no tensor", "'b'");
    EXPECT(write_st("head", "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8),
           "bytes [0, 4] of the data section belong to no tensor", "'b'");
    EXPECT(write_st("tail", "{\"a\":" F32_1 "}", 12),
           "the tensors end at byte 4 of the data section, which holds 12 bytes: 8 trailing");
}

/* ---- F64, converted to f32 ----------------------------------------------------- */

/* An F64 file of these values (as a PyTorch or NumPy checkpoint holds them)
 * loads as an f32 tensor of the same shape, each value rounded to the nearest
 * f32: beyond f32's range ±inf, below its smallest subnormal ±0. */
static void test_f64(void **state)
{
    double v[8] = {1.5, -2.25, 0.1, 1e300, -1e300, 1e-50, NAN, 3.4028234663852886e38};
    float want[8] = {1.5f, -2.25f, 0.1f, INFINITY, -INFINITY, 0.0f, NAN, FLT_MAX};
    const char *json = "{\"w\":{\"dtype\":\"F64\",\"shape\":[2,4],\"data_offsets\":[0,64]},"
                       "\"n\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[64,68]}}";
    size_t jl = strlen(json);
    uint8_t buf[8 + 256 + 68];
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)jl >> (8 * i));
    memcpy(buf + 8, json, jl);
    memcpy(buf + 8 + jl, v, sizeof v); /* little-endian, as the format is */
    int32_t seven = 7;
    memcpy(buf + 8 + jl + 64, &seven, 4);
    write_bytes(in_dir("f64.st"), buf, 8 + jl + 68);
    vn_tensor_map *m = vn_load(in_dir("f64.st"));
    CHECK_PTR(m);
    vn_tensor *w = vn_tensor_map_get(m, "w");
    CHECK_PTR(w);
    assert_int_equal(vn_tensor_dtype(w), VN_F32);
    assert_int_equal(vn_tensor_ndim(w), 2);
    assert_int_equal(vn_tensor_shape(w)[0], 2);
    assert_int_equal(vn_tensor_shape(w)[1], 4);
    float got[8];
    CHECK_OK(vn_tensor_copy_out(w, got, sizeof got));
    for (int i = 0; i < 8; i++) {
        if (isnan(want[i])) assert_true(isnan(got[i]));
        else if (memcmp(&got[i], &want[i], sizeof got[i]) != 0)
            fail_msg("value %d: got %.9g, want %.9g", i, got[i], want[i]);
    }
    int32_t n = 0;
    CHECK_OK(vn_tensor_copy_out(vn_tensor_map_get(m, "n"), &n, sizeof n));
    assert_int_equal(n, 7); /* the next tensor's offsets count 8 bytes per F64 */
    vn_tensor_map_free(m);
    EXPECT(write_st("f64size", "{\"w\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8),
           "tensor 'w': shape [2] of F64 needs 16 bytes but data_offsets [0, 8] hold 8");
}

/* ---- save errors ------------------------------------------------------------- */

static void expect_save_error(const vn_tensor_map *m, const char *path, vn_status want,
                              const char *needle)
{
    vn_status s = vn_save(path, m);
    assert_int_equal(s, want);
    if (!strstr(vn_last_error(), needle))
        fail_msg("error message \"%s\" lacks \"%s\"", vn_last_error(), needle);
}

static void test_save_errors(void **state)
{
    vn_tensor *t = vn_zeros(VN_F32, 1, (int64_t[]){2});
    vn_tensor *two[2] = {t, t};
    const char *path = in_dir("bad.st");
    expect_save_error(&(vn_tensor_map){2, (const char *[]){"w", "w"}, two, 0, NULL, NULL}, path,
                      VN_ERR_ARG, "tensor name 'w' appears twice");
    expect_save_error(&(vn_tensor_map){1, (const char *[]){"__metadata__"}, two, 0, NULL, NULL},
                      path, VN_ERR_ARG, "\"__metadata__\" is reserved");
    expect_save_error(&(vn_tensor_map){1, (const char *[]){NULL}, two, 0, NULL, NULL}, path,
                      VN_ERR_ARG, "tensor 0 has a NULL name");
    expect_save_error(&(vn_tensor_map){1, (const char *[]){"\xff"}, two, 0, NULL, NULL}, path,
                      VN_ERR_ARG, "is not UTF-8");
    expect_save_error(&(vn_tensor_map){1, (const char *[]){"w"}, two, 2,
                                       (const char *[]){"k", "k"}, (const char *[]){"1", "2"}},
                      path, VN_ERR_ARG, "metadata key 'k' appears twice");
    expect_save_error(&(vn_tensor_map){2, NULL, two, 0, NULL, NULL}, path, VN_ERR_ARG,
                      "counts (2 tensors");
    vn_tensor *freed = vn_zeros(VN_F32, 1, (int64_t[]){2});
    vn_tensor_free(freed);
    expect_save_error(&(vn_tensor_map){1, (const char *[]){"gone"}, &freed, 0, NULL, NULL}, path,
                      VN_ERR_STATE, "tensor 'gone'");
    vn_tensor_release(freed);
    expect_save_error(&(vn_tensor_map){1, (const char *[]){"w"}, two, 0, NULL, NULL},
                      in_dir("no/such/dir.st"), VN_ERR_IO, "no/such/dir.st");
    assert_string_equal(list_dir(), ""); /* nothing written, no temporary left */
    vn_tensor_release(t);
}

/* ---- atomic saves -------------------------------------------------------------- */

static vn_tensor *ramp(int64_t n, float k)
{
    vn_tensor *t = vn_arange(0, (double)n, 1, VN_F32);
    vn_tensor *c = vn_full(VN_F32, 0, NULL, k);
    vn_tensor *r = vn_add(t, c);
    vn_tensor_release(t);
    vn_tensor_release(c);
    return r;
}

static void save_ramp(const char *path, float k, vn_status want)
{
    vn_tensor *t = ramp(1000, k);
    vn_status s = vn_save(path, &(vn_tensor_map){1, (const char *[]){"w"}, &t, 0, NULL, NULL});
    vn_tensor_release(t);
    if (s != want) fail_msg("save returned %d (%s), expected %d", s, vn_last_error(), want);
}

static void assert_ramp(const char *path, float k)
{
    vn_tensor_map *m = vn_load(path);
    CHECK_PTR(m);
    vn_tensor *want = ramp(1000, k);
    assert_same_bytes(vn_tensor_map_get(m, "w"), want);
    vn_tensor_release(want);
    vn_tensor_map_free(m);
}

static void test_save_fails_halfway(void **state)
{
    const char *path = in_dir("ckpt.st");
    save_ramp(path, 0, VN_OK);
    int64_t cuts[] = {0, 7, 100, 4000};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        vn__save_fail_after(cuts[i], false);
        save_ramp(path, 1, VN_ERR_IO);
        vn__save_fail_after(-1, false);
        assert_non_null(strstr(vn_last_error(), "test hook"));
        assert_ramp(path, 0); /* the old checkpoint, intact */
        assert_string_equal(list_dir(), "ckpt.st"); /* no temporary left */
    }
    save_ramp(path, 2, VN_OK);
    assert_ramp(path, 2);
}

/* A process killed mid-save leaves its temporary file but not a damaged
 * checkpoint. */
static void test_save_killed(void **state)
{
    const char *path = in_dir("ckpt.st");
    save_ramp(path, 0, VN_OK);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        vn__save_fail_after(2000, true);
        save_ramp(path, 1, VN_OK);
        _exit(0); /* not reached: the hook kills the process */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    assert_ramp(path, 0);
    /* ".ckpt.st.tmp-<pid>-<k> ckpt.st" */
    char prefix[64], tmp[128];
    snprintf(prefix, sizeof prefix, ".ckpt.st.tmp-%ld-", (long)pid);
    const char *files = list_dir();
    assert_true(strncmp(files, prefix, strlen(prefix)) == 0);
    assert_non_null(strstr(files, " ckpt.st"));
    snprintf(tmp, sizeof tmp, "%.*s", (int)(strstr(files, " ") - files), files);
    struct stat st;
    assert_int_equal(stat(in_dir(tmp), &st), 0);
    assert_int_equal(st.st_size, 2000);
}

/* A save removes the temporaries of its own path whose process is gone, and
 * nothing else: not those of a live process (this one), not another path's. */
static void test_stale_temps(void **state)
{
    fflush(NULL);
    pid_t dead = fork();
    assert_true(dead >= 0);
    if (dead == 0) _exit(0);
    assert_int_equal(waitpid(dead, NULL, 0), dead); /* reaped: no process has this pid now */
    char stale[64], live[64], other[64], odd[64];
    snprintf(stale, sizeof stale, ".ckpt.st.tmp-%ld-0", (long)dead);
    snprintf(live, sizeof live, ".ckpt.st.tmp-%ld-7", (long)getpid());
    snprintf(other, sizeof other, ".other.st.tmp-%ld-0", (long)dead);
    snprintf(odd, sizeof odd, ".ckpt.st.tmp-%ld-0x", (long)dead); /* not a name a save makes */
    const char *names[] = {stale, live, other, odd};
    for (int i = 0; i < 4; i++) write_bytes(in_dir(names[i]), "partial", 7);
    save_ramp(in_dir("ckpt.st"), 0, VN_OK);
    assert_ramp(in_dir("ckpt.st"), 0);
    struct stat st;
    assert_int_equal(stat(in_dir(stale), &st), -1); /* removed */
    assert_int_equal(stat(in_dir(live), &st), 0);   /* a live process's: kept */
    assert_int_equal(stat(in_dir(other), &st), 0);  /* another path's: kept */
    assert_int_equal(stat(in_dir(odd), &st), 0);
    /* A relative path (no directory part) cleans the current directory. */
    char cwd[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    write_bytes(stale, "partial", 7);
    save_ramp("ckpt.st", 1, VN_OK);
    int gone = stat(stale, &st);
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(gone, -1);
    assert_ramp(in_dir("ckpt.st"), 1);
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
#define TEST(f) cmocka_unit_test_setup_teardown(f, make_dir, remove_dir)
    const struct CMUnitTest tests[] = {
        TEST(test_roundtrip),         TEST(test_layout),
        TEST(test_accepts),           TEST(test_malformed_prefix),
        TEST(test_malformed_json),    TEST(test_malformed_offsets),
        TEST(test_save_errors),       TEST(test_save_fails_halfway),
        TEST(test_save_killed),       TEST(test_f64),
        TEST(test_stale_temps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
