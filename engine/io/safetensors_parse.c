/* safetensors_parse.c — the safetensors header parser: the one place that
 * reads untrusted structure from a checkpoint file. It turns the JSON header
 * into a list of (name, dtype, shape, byte range) entries and refuses
 * anything the data copy could trip over, so the reader afterwards only
 * copies byte ranges already known to lie inside the file and to match their
 * tensor's size. A libFuzzer target (tests/fuzz) runs these functions on
 * random bytes. */
#include "safetensors.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

/* The dtypes venom has, under their safetensors names. */
static const struct {
    const char *name;
    vn_dtype dtype;
} st_dtypes[] = {{"F32", VN_F32}, {"I32", VN_I32}, {"I64", VN_I64}, {"U8", VN_U8},
                 {"BF16", VN_BF16}, {"F16", VN_F16}};
#define ST_NDTYPES (sizeof st_dtypes / sizeof st_dtypes[0])

/* Dtypes of the format that venom has no tensor type for: named as such in
 * errors, so a user is told what the file holds rather than "unknown". */
static const char *const st_foreign[] = {"BOOL", "I8",  "I16",     "U16",
                                         "U32",  "U64", "F8_E4M3", "F8_E5M2"};

const char *vn__st_dtype_name(vn_dtype d)
{
    for (size_t k = 0; k < ST_NDTYPES; k++)
        if (st_dtypes[k].dtype == d) return st_dtypes[k].name;
    return NULL;
}

/* Stores "safetensors load '<path>': <message>" as the error. */
static vn_status st_fail(vn_status s, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static vn_status st_fail(vn_status s, const char *path, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return vn__err(s, "safetensors load '%s': %s", path, msg);
}

vn_status vn__st_header_length(const uint8_t *prefix, uint64_t file_size, const char *path,
                               uint64_t *header_len)
{
    if (file_size < 8)
        return st_fail(VN_ERR_FORMAT, path, "the file is %llu bytes, shorter than the 8-byte "
                       "header length that starts a safetensors file",
                       (unsigned long long)file_size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | prefix[i];
    if (n > file_size - 8)
        return st_fail(VN_ERR_FORMAT, path, "header length %llu is larger than the %llu bytes "
                       "that follow it (a truncated file, or not safetensors)",
                       (unsigned long long)n, (unsigned long long)(file_size - 8));
    if (n > VN_ST_MAX_HEADER)
        return st_fail(VN_ERR_FORMAT, path, "header length %llu is above the limit of %u bytes",
                       (unsigned long long)n, VN_ST_MAX_HEADER);
    *header_len = n;
    return VN_OK;
}

/* What a JSON value is, for messages: integers show their value. */
static const char *describe(const json_t *v, char *buf, size_t n)
{
    if (!v) return "nothing";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: snprintf(buf, n, "%lld", (long long)json_integer_value(v)); return buf;
    case JSON_REAL: snprintf(buf, n, "%g", json_real_value(v)); return buf;
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "an unknown JSON value";
}

/* "[2, 3]": a shape as the header writes it. */
static void format_dims(int n, const uint64_t *dims, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < n && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, d ? ", %llu" : "%llu",
                                 (unsigned long long)dims[d]);
    if (used < size) snprintf(buf + used, size - used, "]");
}

/* The dtype of an entry; F64, which venom has no tensor type for, is read
 * as f32 (*f64 set), since checkpoints of other tools often hold it. */
static vn_status parse_dtype(const char *path, const char *name, const json_t *v, vn_dtype *out,
                             bool *f64)
{
    char b[32];
    if (!json_is_string(v))
        return st_fail(VN_ERR_FORMAT, path, "tensor '%s': dtype must be a string such as \"F32\", "
                       "found %s", name, describe(v, b, sizeof b));
    const char *s = json_string_value(v);
    *f64 = strcmp(s, "F64") == 0;
    if (*f64) {
        *out = VN_F32;
        return VN_OK;
    }
    for (size_t k = 0; k < ST_NDTYPES; k++) {
        if (strcmp(s, st_dtypes[k].name) == 0) {
            *out = st_dtypes[k].dtype;
            return VN_OK;
        }
    }
    bool foreign = false;
    for (size_t k = 0; k < sizeof st_foreign / sizeof st_foreign[0]; k++)
        foreign = foreign || strcmp(s, st_foreign[k]) == 0;
    return st_fail(VN_ERR_FORMAT, path, "tensor '%s': %s dtype '%s' (venom loads F32, I32, I64, "
                   "U8, BF16 and F16, and F64 as f32)", name, foreign ? "unsupported" : "unknown", s);
}

/* A JSON array of exactly `want` (or, with want < 0, at most VN_MAX_DIMS)
 * non-negative integers into out; returns the count or -1 (message set). */
static int parse_uints(const char *path, const char *name, const char *field, const json_t *v,
                       int want, uint64_t *out)
{
    char b[32];
    if (!json_is_array(v))
        return st_fail(VN_ERR_FORMAT, path, "tensor '%s': %s must be an array of non-negative "
                       "integers, found %s", name, field, describe(v, b, sizeof b)), -1;
    size_t n = json_array_size(v);
    if (want >= 0 && n != (size_t)want)
        return st_fail(VN_ERR_FORMAT, path, "tensor '%s': %s must hold %d integers [begin, end], "
                       "found %zu", name, field, want, n), -1;
    if (want < 0 && n > VN_MAX_DIMS)
        return st_fail(VN_ERR_FORMAT, path, "tensor '%s': %s has %zu dims; venom supports at "
                       "most %d", name, field, n, VN_MAX_DIMS), -1;
    for (size_t k = 0; k < n; k++) {
        const json_t *x = json_array_get(v, k);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return st_fail(VN_ERR_FORMAT, path, "tensor '%s': %s[%zu] must be a non-negative "
                           "integer, found %s", name, field, k, describe(x, b, sizeof b)), -1;
        out[k] = (uint64_t)json_integer_value(x);
    }
    return (int)n;
}

/* One tensor's entry {dtype, shape, data_offsets}; other keys are ignored,
 * as the reference reader does. */
static vn_status parse_entry(const char *path, const char *name, const json_t *v,
                             uint64_t data_size, vn_st_entry *e)
{
    char b[32];
    if (!json_is_object(v))
        return st_fail(VN_ERR_FORMAT, path, "tensor '%s': expected an object {\"dtype\", "
                       "\"shape\", \"data_offsets\"}, found %s", name, describe(v, b, sizeof b));
    vn_status s = parse_dtype(path, name, json_object_get(v, "dtype"), &e->dtype, &e->f64);
    if (s) return s;
    uint64_t shape[VN_MAX_DIMS], off[2];
    int nd = parse_uints(path, name, "shape", json_object_get(v, "shape"), -1, shape);
    if (nd < 0 || parse_uints(path, name, "data_offsets", json_object_get(v, "data_offsets"), 2,
                              off) < 0)
        return VN_ERR_FORMAT;
    if (off[0] > off[1])
        return st_fail(VN_ERR_FORMAT, path, "tensor '%s': data_offsets [%llu, %llu] end before "
                       "they begin", name, (unsigned long long)off[0], (unsigned long long)off[1]);
    if (off[1] > data_size)
        return st_fail(VN_ERR_FORMAT, path, "tensor '%s': data_offsets [%llu, %llu] go past the "
                       "end of the %llu-byte data section", name, (unsigned long long)off[0],
                       (unsigned long long)off[1], (unsigned long long)data_size);
    /* Byte size of the shape, without wrapping around. */
    uint64_t need = e->f64 ? sizeof(double) : vn_dtype_size(e->dtype);
    bool overflow = false, empty = false;
    for (int d = 0; d < nd; d++) {
        if (shape[d] == 0) empty = true;
        else if (need > UINT64_MAX / shape[d]) overflow = true;
        else need *= shape[d];
        e->shape[d] = (int64_t)shape[d];
    }
    if (empty) need = 0, overflow = false;
    e->ndim = nd;
    if (overflow || need != off[1] - off[0]) {
        char sb[256], nb[40];
        format_dims(nd, shape, sb, sizeof sb);
        if (overflow) snprintf(nb, sizeof nb, "more than 2^64");
        else snprintf(nb, sizeof nb, "%llu", (unsigned long long)need);
        return st_fail(VN_ERR_FORMAT, path, "tensor '%s': shape %s of %s needs %s bytes but "
                       "data_offsets [%llu, %llu] hold %llu", name, sb,
                       e->f64 ? "F64" : vn__st_dtype_name(e->dtype), nb, (unsigned long long)off[0], (unsigned long long)off[1],
                       (unsigned long long)(off[1] - off[0]));
    }
    e->begin = off[0];
    e->end = off[1];
    if (!(e->name = strdup(name)))
        return st_fail(VN_ERR_MEMORY, path, "out of memory reading the header");
    return VN_OK;
}

static vn_status parse_metadata(const char *path, const json_t *meta, vn_st_header *h)
{
    char b[32];
    if (!json_is_object(meta))
        return st_fail(VN_ERR_FORMAT, path, "__metadata__ must be an object of strings, found %s",
                       describe(meta, b, sizeof b));
    size_t n = json_object_size(meta);
    h->meta_keys = calloc(n + 1, sizeof *h->meta_keys);
    h->meta_values = calloc(n + 1, sizeof *h->meta_values);
    if (!h->meta_keys || !h->meta_values)
        return st_fail(VN_ERR_MEMORY, path, "out of memory reading the header");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)meta, key, v) {
        if (!json_is_string(v))
            return st_fail(VN_ERR_FORMAT, path, "__metadata__ entry '%s' must be a string, found "
                           "%s", key, describe(v, b, sizeof b));
        h->meta_keys[h->n_meta] = strdup(key);
        h->meta_values[h->n_meta] = strdup(json_string_value(v));
        h->n_meta++;
        if (!h->meta_keys[h->n_meta - 1] || !h->meta_values[h->n_meta - 1])
            return st_fail(VN_ERR_MEMORY, path, "out of memory reading the header");
    }
    return VN_OK;
}

/* Data order; names (unique) break ties between empty tensors. */
static int by_offset(const void *pa, const void *pb)
{
    const vn_st_entry *a = pa, *b = pb;
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end) return a->end < b->end ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* The sorted ranges must tile [0, data_size): each starts where the last
 * ended. */
static vn_status check_tiling(const char *path, const vn_st_header *h, uint64_t data_size)
{
    uint64_t pos = 0;
    const vn_st_entry *prev = NULL;
    for (int i = 0; i < h->n; i++) {
        const vn_st_entry *e = &h->entries[i];
        if (e->begin < pos)
            return st_fail(VN_ERR_FORMAT, path, "tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] "
                           "overlap in the data section", prev->name,
                           (unsigned long long)prev->begin, (unsigned long long)prev->end, e->name,
                           (unsigned long long)e->begin, (unsigned long long)e->end);
        if (e->begin > pos)
            return st_fail(VN_ERR_FORMAT, path, "bytes [%llu, %llu] of the data section belong to "
                           "no tensor (the next tensor, '%s', starts at %llu)",
                           (unsigned long long)pos, (unsigned long long)e->begin, e->name,
                           (unsigned long long)e->begin);
        pos = e->end;
        prev = e;
    }
    if (pos != data_size)
        return st_fail(VN_ERR_FORMAT, path, "the tensors end at byte %llu of the data section, "
                       "which holds %llu bytes: %llu trailing bytes belong to no tensor",
                       (unsigned long long)pos, (unsigned long long)data_size,
                       (unsigned long long)(data_size - pos));
    return VN_OK;
}

static vn_status parse_root(const char *path, const json_t *root, uint64_t data_size,
                            vn_st_header *h)
{
    const json_t *meta = json_object_get(root, "__metadata__");
    size_t n = json_object_size(root) - (meta != NULL);
    if (!(h->entries = calloc(n + 1, sizeof *h->entries)))
        return st_fail(VN_ERR_MEMORY, path, "out of memory reading the header");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)root, key, v) {
        if (v == meta) continue;
        vn_status s = parse_entry(path, key, v, data_size, &h->entries[h->n]);
        if (s) return s;
        h->n++;
    }
    if (meta) {
        vn_status s = parse_metadata(path, meta, h);
        if (s) return s;
    }
    qsort(h->entries, (size_t)h->n, sizeof *h->entries, by_offset);
    return check_tiling(path, h, data_size);
}

vn_status vn__st_parse_header(const char *json, size_t len, uint64_t data_size,
                              const char *path, vn_st_header *out)
{
    memset(out, 0, sizeof *out);
    if (len == 0 || json[0] != '{')
        return st_fail(VN_ERR_FORMAT, path, "the JSON header must begin with '{', found %s",
                       len == 0 ? "an empty header" : "another byte (not a safetensors file?)");
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (json_error_code(&jerr) == json_error_duplicate_key)
            return st_fail(VN_ERR_FORMAT, path, "a name appears twice in the JSON header (byte "
                           "%d): %s", jerr.position, jerr.text);
        return st_fail(VN_ERR_FORMAT, path, "malformed JSON header at byte %d (line %d, column "
                       "%d): %s", jerr.position, jerr.line, jerr.column, jerr.text);
    }
    vn_status s = parse_root(path, root, data_size, out);
    json_decref(root);
    if (s) vn__st_header_free(out);
    return s;
}

void vn__st_header_free(vn_st_header *h)
{
    for (int i = 0; h->entries && i < h->n; i++) free(h->entries[i].name);
    for (int i = 0; h->meta_keys && i < h->n_meta; i++) {
        free(h->meta_keys[i]);
        free(h->meta_values[i]);
    }
    free(h->entries);
    free(h->meta_keys);
    free(h->meta_values);
    memset(h, 0, sizeof *h);
}
