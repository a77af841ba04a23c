/* gz.h — reading files through zlib's gz* calls (which pass plain files
 * through unchanged), shared by the IDX reader and vn_read_file. */
#ifndef VENOM_IO_GZ_H
#define VENOM_IO_GZ_H

#include "internal.h"

#include <zlib.h>

/* Opens path for reading through zlib (gzip or plain), with a 128 KiB
 * buffer; NULL after setting the message ("op: cannot open '<path>': <the
 * system's reason>", or "op: path is NULL"). */
gzFile vn__gz_open(const char *path, const char *op);

/* Reads up to n bytes of f into buf; returns how many were read (fewer at
 * the end of the file), or -1 after setting the message ("op: ..." naming
 * path) on a read or decompression error. */
int64_t vn__gz_read(gzFile f, void *buf, int64_t n, const char *path, const char *op);

#endif
