/* idx.c — reader for IDX files, the format of MNIST and Fashion-MNIST
 * (LeCun et al.): the bytes 00 00 <type code> <ndims>, then ndims sizes as
 * big-endian u32, then the elements in row-major order, big-endian. Files are
 * read through zlib's gz* calls, which pass plain files through unchanged, so
 * the same code reads .gz and uncompressed files. */
#include "gz.h"

#include <stdio.h>
#include <stdlib.h>

/* Bigger than any real dataset file; a larger header is corrupt. */
#define IDX_MAX_BYTES ((int64_t)1 << 34)

/* The element type of an IDX type code: the tensor dtype it loads as and its
 * size in the file; false (message set) for codes venom does not load. */
static bool idx_type(uint8_t code, const char *path, vn_dtype *dtype, int *size)
{
    switch (code) {
    case 0x08: *dtype = VN_U8, *size = 1; return true;
    case 0x09: *dtype = VN_I32, *size = 1; return true; /* i8, widened: no i8 dtype */
    case 0x0C: *dtype = VN_I32, *size = 4; return true;
    case 0x0D: *dtype = VN_F32, *size = 4; return true;
    }
    const char *name = code == 0x0B ? "i16" : code == 0x0E ? "f64" : "an unknown type";
    vn__err(VN_ERR_FORMAT, "idx: '%s' holds %s (type code 0x%02x); supported are u8 (0x08), "
            "i8 (0x09), i32 (0x0c) and f32 (0x0d)", path, name, code);
    return false;
}

/* Swaps each 4-byte element from big-endian to the host's order. */
static void from_big_endian32(void *data, int64_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t *w = data;
    for (int64_t i = 0; i < n; i++) w[i] = __builtin_bswap32(w[i]);
#else
    (void)data, (void)n;
#endif
}

/* Reads the header and data of an open file into a new tensor. */
static vn_tensor *idx_read(gzFile f, const char *path)
{
    uint8_t magic[4];
    int64_t got = vn__gz_read(f, magic, 4, path, "idx");
    if (got < 0) return NULL;
    if (got < 4)
        return vn__errp(VN_ERR_FORMAT, "idx: '%s' is truncated: expected a 4-byte header, found "
                        "%lld bytes", path, (long long)got);
    if (magic[0] != 0 || magic[1] != 0)
        return vn__errp(VN_ERR_FORMAT, "idx: '%s' is not an IDX file: expected the magic bytes "
                        "00 00 <type> <ndims>, found %02x %02x %02x %02x", path, magic[0],
                        magic[1], magic[2], magic[3]);
    vn_dtype dtype;
    int esize;
    if (!idx_type(magic[2], path, &dtype, &esize)) return NULL;
    int ndim = magic[3];
    if (ndim > VN_MAX_DIMS)
        return vn__errp(VN_ERR_FORMAT, "idx: '%s' declares %d dims; at most %d are supported",
                        path, ndim, VN_MAX_DIMS);

    uint8_t raw[4 * VN_MAX_DIMS];
    int64_t dims_bytes = 4 * (int64_t)ndim;
    if ((got = vn__gz_read(f, raw, dims_bytes, path, "idx")) < 0) return NULL;
    if (got < dims_bytes)
        return vn__errp(VN_ERR_FORMAT, "idx: '%s' is truncated: expected %lld bytes of dims after "
                        "the magic, found %lld", path, (long long)dims_bytes, (long long)got);
    int64_t shape[VN_MAX_DIMS], numel = 1;
    bool too_big = false;
    for (int d = 0; d < ndim; d++) {
        shape[d] = (int64_t)raw[4 * d] << 24 | raw[4 * d + 1] << 16 | raw[4 * d + 2] << 8 |
                   raw[4 * d + 3];
        if (shape[d] && numel > IDX_MAX_BYTES / esize / shape[d]) too_big = true;
        else numel *= shape[d];
    }
    char sbuf[160];
    if (too_big)
        return vn__errp(VN_ERR_FORMAT, "idx: '%s' declares shape %s, more than the %lld-byte "
                        "limit of data (a corrupt header?)", path,
                        vn_shape_str(ndim, shape, sbuf, sizeof sbuf), (long long)IDX_MAX_BYTES);

    vn_tensor *t = vn__new(dtype, ndim, shape);
    if (!t) return NULL;
    int64_t nbytes = numel * esize;
    /* i8 is read into a side buffer and widened; the rest land in place. */
    void *dst = esize == (int)vn_dtype_size(dtype) ? vn_tensor_data(t) : malloc((size_t)nbytes + 1);
    if (!dst) {
        vn_tensor_release(t);
        return vn__errp(VN_ERR_MEMORY, "idx: out of memory reading '%s'", path);
    }
    got = vn__gz_read(f, dst, nbytes, path, "idx");
    uint8_t extra;
    int64_t more = got == nbytes ? vn__gz_read(f, &extra, 1, path, "idx") : 0;
    if (got >= 0 && more >= 0) {
        if (got < nbytes)
            vn__err(VN_ERR_FORMAT, "idx: '%s' is truncated: shape %s of %s needs %lld bytes of "
                    "data after the %lld-byte header, found %lld", path,
                    vn_shape_str(ndim, shape, sbuf, sizeof sbuf), vn_dtype_name(dtype),
                    (long long)nbytes, (long long)(4 + dims_bytes), (long long)got);
        else if (more > 0)
            vn__err(VN_ERR_FORMAT, "idx: '%s' has more data than its header declares: shape %s "
                    "needs %lld bytes after the %lld-byte header", path,
                    vn_shape_str(ndim, shape, sbuf, sizeof sbuf), (long long)nbytes,
                    (long long)(4 + dims_bytes));
    }
    bool ok = got == nbytes && more == 0;
    if (ok && esize == 1 && dtype == VN_I32) {
        int32_t *w = vn_tensor_data(t);
        for (int64_t i = 0; i < numel; i++) w[i] = ((const int8_t *)dst)[i];
    } else if (ok && esize == 4) {
        from_big_endian32(dst, numel);
    }
    if (dst != vn_tensor_data(t)) free(dst);
    if (!ok) {
        vn_tensor_release(t);
        return NULL;
    }
    return t;
}

vn_tensor *vn_idx_load(const char *path)
{
    gzFile f = vn__gz_open(path, "idx");
    if (!f) return NULL;
    vn_tensor *t = idx_read(f, path);
    gzclose(f);
    return t;
}
