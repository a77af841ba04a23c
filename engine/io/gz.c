/* gz.c — whole files and chunks read through zlib (gzip-compressed or
 * plain, detected by zlib): vn_read_file and the reader the IDX loader
 * uses. */
#include "gz.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

gzFile vn__gz_open(const char *path, const char *op)
{
    if (!path) return vn__errp(VN_ERR_ARG, "%s: path is NULL", op);
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f)
        return vn__errp(VN_ERR_IO, "%s: cannot open '%s': %s", op, path,
                        errno ? strerror(errno) : "out of memory");
    gzbuffer(f, 1 << 17);
    return f;
}

int64_t vn__gz_read(gzFile f, void *buf, int64_t n, const char *path, const char *op)
{
    int64_t got = 0;
    while (got < n) {
        unsigned chunk = n - got > (1 << 30) ? 1u << 30 : (unsigned)(n - got);
        int r = gzread(f, (char *)buf + got, chunk);
        if (r < 0) {
            int errnum;
            const char *msg = gzerror(f, &errnum);
            if (errnum == Z_ERRNO)
                vn__err(VN_ERR_IO, "%s: error reading '%s': %s", op, path, strerror(errno));
            else
                vn__err(VN_ERR_FORMAT, "%s: '%s' is a damaged gzip file: %s", op, path, msg);
            return -1;
        }
        if (r == 0) break;
        got += r;
    }
    return got;
}

/* Files larger than this are refused (text data sets are far smaller; a
 * gzip bomb stops here instead of exhausting memory). */
#define READ_FILE_MAX ((int64_t)1 << 32)

vn_tensor *vn_read_file(const char *path)
{
    gzFile f = vn__gz_open(path, "read_file");
    if (!f) return NULL;
    /* Grow a buffer by doubling until a read comes back short (the end of
     * the file); the tensor gets a copy of the exact size. */
    int64_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc((size_t)cap);
    vn_tensor *t = NULL;
    for (;;) {
        if (!buf) {
            vn__err(VN_ERR_MEMORY, "read_file: out of memory reading '%s'", path);
            break;
        }
        int64_t r = vn__gz_read(f, buf + len, cap - len, path, "read_file");
        if (r < 0) break; /* the message is set */
        len += r;
        if (len < cap) {
            /* zlib ends a gzip stream cut short as if it were complete and
             * leaves the reason in gzerror. */
            int errnum = Z_OK;
            gzerror(f, &errnum);
            if (errnum == Z_BUF_ERROR) {
                vn__err(VN_ERR_FORMAT, "read_file: '%s' is truncated (the gzip stream ends early)", path);
                break;
            }
            int64_t shape[1] = {len};
            t = vn_from_data(VN_U8, 1, shape, buf);
            break;
        }
        if (cap >= READ_FILE_MAX) {
            vn__err(VN_ERR_ARG, "read_file: '%s' holds more than %lld bytes", path,
                    (long long)READ_FILE_MAX);
            break;
        }
        unsigned char *grown = realloc(buf, (size_t)cap * 2);
        if (!grown) free(buf);
        buf = grown, cap *= 2;
    }
    free(buf);
    gzclose(f);
    return t;
}
