/* safetensors.h — what the safetensors reader and writer (safetensors.c)
 * share with the header parser (safetensors_parse.c), the C tests and the
 * fuzz target. Not installed: the public API is vn_save/vn_load in venom.h.
 *
 * The format (https://github.com/huggingface/safetensors): an 8-byte
 * little-endian header length N, N bytes of JSON (an object mapping each
 * tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, plus an
 * optional "__metadata__" object of string → string), then the data section:
 * every tensor's raw little-endian bytes at data_offsets relative to the
 * start of that section. The tensors must cover the data section exactly:
 * no gaps, no overlaps, nothing after the last tensor. */
#ifndef VENOM_SAFETENSORS_H
#define VENOM_SAFETENSORS_H

#include "internal.h"

/* The reference implementation refuses headers above 100 MB; so do we, so a
 * corrupt length cannot make the reader allocate gigabytes. */
#define VN_ST_MAX_HEADER 100000000u

typedef struct {
    char *name;
    vn_dtype dtype;  /* the tensor's dtype once loaded */
    bool f64;        /* stored as F64 (8 bytes an element), loaded as f32 */
    int ndim;
    int64_t shape[VN_MAX_DIMS];
    uint64_t begin, end; /* byte range in the data section */
} vn_st_entry;

typedef struct {
    int n;               /* tensors, sorted by data offset */
    vn_st_entry *entries;
    int n_meta;          /* __metadata__ pairs, in header order */
    char **meta_keys;
    char **meta_values;
} vn_st_header;

/* The header length N from the first bytes of a file of `file_size` bytes
 * (`prefix` holds min(8, file_size) bytes). Errors (VN_ERR_FORMAT): a file
 * shorter than 8 bytes, N larger than the rest of the file, N above
 * VN_ST_MAX_HEADER. `path` names the file in messages. */
vn_status vn__st_header_length(const uint8_t *prefix, uint64_t file_size, const char *path,
                               uint64_t *header_len);

/* Parses `len` bytes of JSON header for a data section of `data_size` bytes
 * into *out (freed with vn__st_header_free; left empty on failure). Checks
 * everything the data copy relies on: each entry's dtype is one venom has
 * (or F64, marked `f64` and given dtype f32: the reader converts it),
 * its shape has at most VN_MAX_DIMS non-negative sizes whose byte size equals
 * its data_offsets range, the ranges lie in the data section and tile it
 * exactly; names are unique; metadata values are strings. Errors
 * (VN_ERR_FORMAT, VN_ERR_MEMORY) name the tensor and the numbers. */
vn_status vn__st_parse_header(const char *json, size_t len, uint64_t data_size,
                              const char *path, vn_st_header *out);
void vn__st_header_free(vn_st_header *h);

/* The safetensors name of a dtype ("F32", "I32", "I64", "U8"). */
const char *vn__st_dtype_name(vn_dtype d);

/* Test hook: every later vn_save stops once `nbytes` bytes of its temporary
 * file are written, and then either fails with VN_ERR_IO (kill false) or
 * kills the process with SIGKILL (kill true), as a crash mid-save would.
 * nbytes < 0 turns the hook off. Process-wide; not for use outside tests. */
void vn__save_fail_after(int64_t nbytes, bool kill);

#endif
