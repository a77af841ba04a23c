/* image.c — images in and out through the stb libraries (Debian libstb:
 * stb_image decodes, stb_image_write encodes, stb_image_resize resamples),
 * plus the crop and mirror the data augmentations need. An image is a u8
 * tensor (H, W, C); (H, W) is read as one channel. */
#include "internal.h"

#include <stb_image.h>
#include <stb_image_resize.h>
#include <stb_image_write.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* stb_image takes an int length: files above this are refused (no real
 * image the engine trains on comes near it). */
#define IMAGE_MAX_FILE_BYTES ((int64_t)1 << 30)
/* Sizes past this make stb_image_resize's int arithmetic overflow. */
#define IMAGE_MAX_SIDE ((int64_t)1 << 24)

/* ---- reading ------------------------------------------------------------- */

/* The whole file in a malloc'ed buffer; NULL after setting the message. */
static unsigned char *read_all(const char *path, int64_t *len)
{
    errno = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return vn__errp(VN_ERR_IO, "image_load: cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    unsigned char *buf = NULL;
    if (fstat(fileno(f), &st) != 0)
        vn__err(VN_ERR_IO, "image_load: cannot read '%s': %s", path, strerror(errno));
    else if (S_ISDIR(st.st_mode))
        vn__err(VN_ERR_IO, "image_load: '%s' is a directory, not an image file", path);
    else if (st.st_size > IMAGE_MAX_FILE_BYTES)
        vn__err(VN_ERR_FORMAT, "image_load: '%s' holds %lld bytes, more than the %lld an image may",
                path, (long long)st.st_size, (long long)IMAGE_MAX_FILE_BYTES);
    else if (!(buf = malloc((size_t)st.st_size + 1)))
        vn__err(VN_ERR_MEMORY, "image_load: out of memory reading '%s'", path);
    else if ((*len = (int64_t)fread(buf, 1, (size_t)st.st_size, f)) != st.st_size) {
        vn__err(VN_ERR_IO, "image_load: cannot read '%s': %s", path,
                ferror(f) ? strerror(errno) : "the file shrank while being read");
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* For a PNG (its 8-byte signature), walks the chunks up to IEND checking
 * each length against the file and each CRC-32 (over type and data, as the
 * PNG specification defines it); stb_image skips the CRCs, so without this a
 * flipped bit in the pixel data would decode as a silently wrong image.
 * Other formats pass. False after setting the message. */
static bool check_png(const unsigned char *buf, int64_t len, const char *path)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len < 8 || memcmp(buf, sig, 8) != 0) return true;
    int64_t pos = 8;
    for (;;) {
        if (len - pos < 12) {
            vn__err(VN_ERR_FORMAT, "image_load: '%s' is a truncated PNG: the chunk at byte %lld "
                    "needs at least 12 bytes, found %lld (no IEND chunk)", path, (long long)pos,
                    (long long)(len - pos));
            return false;
        }
        int64_t n = be32(buf + pos);
        char type[5] = {0};
        memcpy(type, buf + pos + 4, 4);
        for (int k = 0; k < 4; k++)
            if (type[k] < 32 || type[k] > 126) type[k] = '?'; /* printable in the message */
        if (n > len - pos - 12) {
            vn__err(VN_ERR_FORMAT, "image_load: '%s' is a truncated or corrupt PNG: chunk %s at "
                    "byte %lld declares %lld data bytes, only %lld follow", path, type,
                    (long long)pos, (long long)n, (long long)(len - pos - 12));
            return false;
        }
        uint32_t want = be32(buf + pos + 8 + n);
        uint32_t got = (uint32_t)crc32(crc32(0, Z_NULL, 0), buf + pos + 4, (uInt)(n + 4));
        if (got != want) {
            vn__err(VN_ERR_FORMAT, "image_load: '%s' is a corrupt PNG: chunk %s at byte %lld has "
                    "CRC %08x, its data gives %08x", path, type, (long long)pos, want, got);
            return false;
        }
        if (!memcmp(buf + pos + 4, "IEND", 4)) return true;
        pos += 12 + n;
    }
}

/* Decodes a file's bytes; NULL after setting the message. */
static vn_tensor *decode(const unsigned char *buf, int64_t len, const char *path, int channels)
{
    if (!check_png(buf, len, path)) return NULL;
    /* A PNG's size is read from its IHDR here: stb_image refuses a zero or
     * huge size with a reason that stbi_info turns into "unknown image type"
     * (it goes on to try the other formats). */
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len >= 24 && !memcmp(buf, sig, 8) && !memcmp(buf + 12, "IHDR", 4)) {
        uint32_t pw = be32(buf + 16), ph = be32(buf + 20);
        if (pw == 0 || ph == 0)
            return vn__errp(VN_ERR_FORMAT, "image_load: '%s' has zero width or height (its PNG "
                            "header says %lu x %lu pixels)", path, (unsigned long)pw,
                            (unsigned long)ph);
        if ((uint64_t)pw * ph > (uint64_t)VN_IMAGE_MAX_PIXELS)
            return vn__errp(VN_ERR_FORMAT, "image_load: '%s' is too large (%lu x %lu pixels, "
                            "limit %lld pixels; a corrupt header?)", path, (unsigned long)pw,
                            (unsigned long)ph, (long long)VN_IMAGE_MAX_PIXELS);
    }
    int w, h, c;
    /* The header first: its size is checked before stb_image allocates. */
    if (!stbi_info_from_memory(buf, (int)len, &w, &h, &c))
        return vn__errp(VN_ERR_FORMAT, "image_load: '%s' is not an image stb_image can decode "
                        "(PNG, JPEG, BMP, GIF, TGA, PSD, PNM): %s", path, stbi_failure_reason());
    if ((int64_t)w * h > VN_IMAGE_MAX_PIXELS)
        return vn__errp(VN_ERR_FORMAT, "image_load: '%s' is too large (%d x %d pixels, limit "
                        "%lld pixels; a corrupt header?)", path, w, h,
                        (long long)VN_IMAGE_MAX_PIXELS);
    unsigned char *px = stbi_load_from_memory(buf, (int)len, &w, &h, &c, channels);
    if (!px)
        return vn__errp(VN_ERR_FORMAT, "image_load: cannot decode '%s' (corrupt or truncated?): "
                        "%s", path, stbi_failure_reason());
    int64_t shape[3] = {h, w, channels ? channels : c};
    vn_tensor *t = vn__new(VN_U8, 3, shape);
    if (t) memcpy(vn_tensor_data(t), px, (size_t)(shape[0] * shape[1] * shape[2]));
    stbi_image_free(px);
    return t;
}

vn_tensor *vn_image_load(const char *path, int channels)
{
    if (!path) return vn__errp(VN_ERR_ARG, "image_load: path is NULL");
    if (channels < 0 || channels > 4)
        return vn__errp(VN_ERR_ARG, "image_load: channels must be 0 (as stored) or 1..4, got %d "
                        "(for '%s')", channels, path);
    int64_t len = 0;
    unsigned char *buf = read_all(path, &len);
    if (!buf) return NULL;
    vn_tensor *t = decode(buf, len, path, channels);
    free(buf);
    return t;
}

vn_status vn_image_load_batch(int n, const char *const *paths, int channels, int threads,
                              vn_tensor **out)
{
    if (n < 0 || (n > 0 && (!paths || !out)))
        return vn__err(VN_ERR_ARG, "image_load_batch: expected n >= 0 paths and an output array, "
                       "got n = %d, paths %s, out %s", n, paths ? "set" : "NULL",
                       out ? "set" : "NULL");
    /* A worker's message lives in its thread's error state: each failure
     * copies it here, and the first one in list order is reported. */
    char **msg = calloc((size_t)n + 1, sizeof *msg);
    vn_status *st = calloc((size_t)n + 1, sizeof *st);
    if (!msg || !st) {
        free(msg), free(st);
        return vn__err(VN_ERR_MEMORY, "image_load_batch: out of memory for %d files", n);
    }
    int team = threads < n ? threads : n; /* no more threads than files */
#pragma omp parallel for schedule(dynamic, 1) num_threads(team > 1 ? team : 1) if (team > 1)
    for (int i = 0; i < n; i++) {
        out[i] = vn_image_load(paths[i], channels);
        if (!out[i]) {
            st[i] = vn_last_status();
            msg[i] = strdup(vn_last_error());
        }
    }
    vn_status s = VN_OK;
    for (int i = 0; i < n && s == VN_OK; i++)
        if (!out[i]) s = vn__err(st[i], "%s", msg[i] ? msg[i] : "image_load: out of memory");
    for (int i = 0; i < n; i++) {
        free(msg[i]);
        if (s != VN_OK) {
            vn_tensor_release(out[i]);
            out[i] = NULL;
        }
    }
    free(msg), free(st);
    return s;
}

/* ---- checks shared by the ops on images ---------------------------------- */

/* img as (H, W, C) in *h, *w, *c after checking it is a u8 CPU image. */
static vn_status check_image(const vn_tensor *img, const char *op, int64_t *h, int64_t *w,
                             int64_t *c)
{
    vn_status s = vn__check_dtype_arg(img, VN_U8, op, "image", 0);
    if (s != VN_OK) return s;
    int nd = vn_tensor_ndim(img);
    const int64_t *shape = vn_tensor_shape(img);
    if (nd != 2 && nd != 3)
        return vn__err(VN_ERR_SHAPE, "%s: expected an image (H, W) or (H, W, C), found shape %s",
                       op, vn__shape(nd, shape));
    *h = shape[0], *w = shape[1], *c = nd == 3 ? shape[2] : 1;
    if (*c < 1 || *c > 4 || *h < 1 || *w < 1)
        return vn__err(VN_ERR_SHAPE, "%s: expected an image (H, W, C) with H, W >= 1 and C in "
                       "1..4, found shape %s", op, vn__shape(nd, shape));
    return VN_OK;
}

/* A new (height, width[, c]) u8 tensor with img's number of dims. */
static vn_tensor *new_image(const vn_tensor *img, int64_t height, int64_t width, int64_t c)
{
    int64_t shape[3] = {height, width, c};
    return vn__new(VN_U8, vn_tensor_ndim(img), shape);
}

/* ---- writing ------------------------------------------------------------- */

typedef struct {
    unsigned char *data;
    size_t len, cap;
    bool failed;
} byte_sink;

/* stb_image_write's output callback: appends to a growing buffer. */
static void sink_write(void *ctx, void *data, int size)
{
    byte_sink *b = ctx;
    if (b->failed || size <= 0) return;
    if (b->len + (size_t)size > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + (size_t)size) cap *= 2;
        unsigned char *grown = realloc(b->data, cap);
        if (!grown) {
            b->failed = true;
            return;
        }
        b->data = grown, b->cap = cap;
    }
    memcpy(b->data + b->len, data, (size_t)size);
    b->len += (size_t)size;
}

/* Writes len bytes to path through a temporary file renamed over it. */
static vn_status write_file(const char *path, const unsigned char *data, size_t len)
{
    static _Atomic unsigned counter;
    char tmp[4096];
    int k = snprintf(tmp, sizeof tmp, "%s.tmp-%d-%u", path, (int)getpid(), counter++);
    if (k < 0 || (size_t)k >= sizeof tmp)
        return vn__err(VN_ERR_ARG, "image_save: path '%s' is too long", path);
    errno = 0;
    FILE *f = fopen(tmp, "wb");
    if (!f) return vn__err(VN_ERR_IO, "image_save: cannot write '%s': %s", path, strerror(errno));
    bool ok = fwrite(data, 1, len, f) == len;
    int err = errno;
    if (fclose(f) != 0 && ok) ok = false, err = errno;
    if (ok && rename(tmp, path) != 0) ok = false, err = errno;
    if (!ok) {
        remove(tmp);
        return vn__err(VN_ERR_IO, "image_save: cannot write '%s': %s", path, strerror(err));
    }
    return VN_OK;
}

vn_status vn_image_save(const char *path, const vn_tensor *img, int quality)
{
    if (!path) return vn__err(VN_ERR_ARG, "image_save: path is NULL");
    const char *dot = strrchr(path, '.');
    const char *ext = dot && !strchr(dot, '/') ? dot + 1 : "";
    bool png = !strcasecmp(ext, "png"), bmp = !strcasecmp(ext, "bmp"), tga = !strcasecmp(ext, "tga");
    bool jpg = !strcasecmp(ext, "jpg") || !strcasecmp(ext, "jpeg");
    if (!png && !jpg && !bmp && !tga)
        return vn__err(VN_ERR_ARG, "image_save: '%s': expected the extension .png, .jpg, .jpeg, "
                       ".bmp or .tga to choose the format, found '%s'", path, ext);
    if (quality < 0 || quality > 100)
        return vn__err(VN_ERR_ARG, "image_save: JPEG quality must be 1..100 (0: 90), got %d",
                       quality);
    int64_t h = 0, w = 0, c = 0;
    vn_status s = check_image(img, "image_save", &h, &w, &c);
    if (s != VN_OK) return s;
    if (h > IMAGE_MAX_SIDE || w > IMAGE_MAX_SIDE)
        return vn__err(VN_ERR_SHAPE, "image_save: %lld x %lld pixels is larger than the format "
                       "writer takes", (long long)h, (long long)w);
    vn_tensor *plain = vn__plain_contiguous(img);
    if (!plain) return vn_last_status();
    byte_sink b = {0};
    const void *px = vn_tensor_data(plain);
    int W = (int)w, H = (int)h, C = (int)c, done;
    if (png) done = stbi_write_png_to_func(sink_write, &b, W, H, C, px, W * C);
    else if (jpg) done = stbi_write_jpg_to_func(sink_write, &b, W, H, C, px, quality ? quality : 90);
    else if (bmp) done = stbi_write_bmp_to_func(sink_write, &b, W, H, C, px);
    else done = stbi_write_tga_to_func(sink_write, &b, W, H, C, px);
    vn_tensor_release(plain);
    if (!done || b.failed) s = vn__err(VN_ERR_MEMORY, "image_save: cannot encode '%s' (out of "
                                       "memory)", path);
    else s = write_file(path, b.data, b.len);
    free(b.data);
    return s;
}

/* ---- resampling, cropping, mirroring ------------------------------------- */

vn_tensor *vn_image_resize(const vn_tensor *img, int64_t height, int64_t width)
{
    int64_t h = 0, w = 0, c = 0;
    if (check_image(img, "image_resize", &h, &w, &c) != VN_OK) return NULL;
    if (height < 1 || width < 1 || height > IMAGE_MAX_SIDE || width > IMAGE_MAX_SIDE ||
        h > IMAGE_MAX_SIDE || w > IMAGE_MAX_SIDE)
        return vn__errp(VN_ERR_ARG, "image_resize: expected a size of 1..%lld pixels each way, "
                        "got %lld x %lld (from an image %s)", (long long)IMAGE_MAX_SIDE,
                        (long long)height, (long long)width,
                        vn__shape(vn_tensor_ndim(img), vn_tensor_shape(img)));
    vn_tensor *plain = vn__plain_contiguous(img);
    vn_tensor *out = plain ? new_image(img, height, width, c) : NULL;
    /* stb filters even at scale 1 (with the smoothing Mitchell filter), so
     * the same size is a plain copy: resizing to the size it has keeps an
     * image as it is. */
    if (out && height == h && width == w)
        memcpy(vn_tensor_data(out), vn_tensor_data(plain), (size_t)(h * w * c));
    else if (out && !stbir_resize_uint8(vn_tensor_data(plain), (int)w, (int)h, 0, vn_tensor_data(out),
                                   (int)width, (int)height, 0, (int)c)) {
        vn_tensor_release(out);
        out = vn__errp(VN_ERR_MEMORY, "image_resize: out of memory resizing %s to %lld x %lld",
                       vn__shape(vn_tensor_ndim(img), vn_tensor_shape(img)), (long long)height,
                       (long long)width);
    }
    vn_tensor_release(plain);
    return out;
}

vn_tensor *vn_image_crop(const vn_tensor *img, int64_t top, int64_t left, int64_t height,
                         int64_t width, int fill)
{
    int64_t h = 0, w = 0, c = 0;
    if (check_image(img, "image_crop", &h, &w, &c) != VN_OK) return NULL;
    if (height < 1 || width < 1 || height > IMAGE_MAX_SIDE || width > IMAGE_MAX_SIDE ||
        top < -IMAGE_MAX_SIDE || top > IMAGE_MAX_SIDE || left < -IMAGE_MAX_SIDE ||
        left > IMAGE_MAX_SIDE || fill < 0 || fill > 255)
        return vn__errp(VN_ERR_ARG, "image_crop: expected a window of 1..%lld pixels each way "
                        "within %lld pixels of the image and fill 0..255, got %lld x %lld at "
                        "(%lld, %lld), fill %d", (long long)IMAGE_MAX_SIDE,
                        (long long)IMAGE_MAX_SIDE, (long long)height, (long long)width,
                        (long long)top, (long long)left, fill);
    vn_tensor *plain = vn__plain_contiguous(img);
    vn_tensor *out = plain ? new_image(img, height, width, c) : NULL;
    if (!out) {
        vn_tensor_release(plain);
        return NULL;
    }
    const uint8_t *src = vn_tensor_data(plain);
    uint8_t *dst = vn_tensor_data(out);
    memset(dst, fill, (size_t)(height * width * c));
    /* The columns of the window that fall inside the image, then one
     * memcpy per row inside it. */
    int64_t x0 = left < 0 ? -left : 0, x1 = w - left < width ? w - left : width;
    for (int64_t y = 0; y < height && x0 < x1; y++) {
        int64_t sy = top + y;
        if (sy < 0 || sy >= h) continue;
        memcpy(dst + (y * width + x0) * c, src + (sy * w + left + x0) * c, (size_t)((x1 - x0) * c));
    }
    vn_tensor_release(plain);
    return out;
}

vn_tensor *vn_image_hflip(const vn_tensor *img)
{
    int64_t h = 0, w = 0, c = 0;
    if (check_image(img, "image_hflip", &h, &w, &c) != VN_OK) return NULL;
    vn_tensor *plain = vn__plain_contiguous(img);
    vn_tensor *out = plain ? new_image(img, h, w, c) : NULL;
    if (out) {
        const uint8_t *src = vn_tensor_data(plain);
        uint8_t *dst = vn_tensor_data(out);
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++)
                memcpy(dst + (y * w + x) * c, src + (y * w + w - 1 - x) * c, (size_t)c);
    }
    vn_tensor_release(plain);
    return out;
}

vn_tensor *vn_image_to_float(const vn_tensor *img)
{
    vn_status s = vn__check_dtype_arg(img, VN_U8, "image_to_float", "image", 0);
    if (s != VN_OK) return NULL;
    int nd = vn_tensor_ndim(img);
    const int64_t *shape = vn_tensor_shape(img);
    if (nd < 2 || nd > 4)
        return vn__errp(VN_ERR_SHAPE, "image_to_float: expected an image (H, W) or (H, W, C) or a "
                        "batch (B, H, W, C), found shape %s", vn__shape(nd, shape));
    /* (B, H, W, C) with B = 1 and C = 1 where the dims are absent */
    int64_t b = nd == 4 ? shape[0] : 1, h = shape[nd == 4], w = shape[1 + (nd == 4)];
    int64_t c = nd >= 3 ? shape[nd - 1] : 1;
    int64_t out_shape[4] = {b, c, h, w};
    vn_tensor *plain = vn__plain_contiguous(img);
    vn_tensor *out = plain ? nd == 4 ? vn__new(VN_F32, 4, out_shape) : vn__new(VN_F32, 3, out_shape + 1)
                           : NULL;
    if (out) {
        const uint8_t *src = vn_tensor_data(plain);
        float *dst = vn_tensor_data(out);
        /* interleaved (h, w, c) to planes (c, h, w), one image at a time */
        for (int64_t i = 0; i < b; i++, src += h * w * c, dst += c * h * w)
            for (int64_t p = 0; p < h * w; p++)
                for (int64_t k = 0; k < c; k++) dst[k * h * w + p] = src[p * c + k] * (1.0f / 255);
    }
    vn_tensor_release(plain);
    return out;
}
