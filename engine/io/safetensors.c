/* safetensors.c — vn_save and vn_load: tensors to and from safetensors files
 * (format notes in safetensors.h; the header parser is safetensors_parse.c).
 *
 * Saving writes a temporary file next to the target and renames it over the
 * target only once its bytes are on disk, so an interrupted save never
 * damages the previous checkpoint. Loading reads the header, lets the parser
 * check every offset against the file size, then preads each tensor's bytes
 * straight into its new storage. */
#include "safetensors.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tensor bytes are written and read as they lie in memory; the format is
 * little-endian, and so is every host venom builds for. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors.c copies tensor memory as little-endian file data");

/* Larger reads and writes are split; Linux moves at most ~2 GiB per call. */
#define IO_CHUNK ((size_t)1 << 30)

/* ---- the test hook --------------------------------------------------------- */

static int64_t hook_after = -1;
static bool hook_kill;

void vn__save_fail_after(int64_t nbytes, bool kill)
{
    hook_after = nbytes;
    hook_kill = kill;
}

/* ---- saving ------------------------------------------------------------------ */

typedef struct {
    const char *path; /* the target, for messages */
    int fd;
    uint64_t written;
} st_writer;

static vn_status put(st_writer *w, const void *buf, uint64_t n)
{
    const char *p = buf;
    while (n > 0) {
        size_t chunk = n > IO_CHUNK ? IO_CHUNK : (size_t)n;
        if (hook_after >= 0 && w->written + chunk > (uint64_t)hook_after) {
            chunk = (size_t)((uint64_t)hook_after - w->written);
            if (chunk == 0) {
                if (hook_kill) raise(SIGKILL);
                return vn__err(VN_ERR_IO, "safetensors save '%s': write failed after %llu bytes "
                               "(test hook)", w->path, (unsigned long long)w->written);
            }
        }
        ssize_t r = write(w->fd, p, chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return vn__err(VN_ERR_IO, "safetensors save '%s': write failed after %llu bytes: %s",
                           w->path, (unsigned long long)w->written, strerror(errno));
        p += r;
        n -= (uint64_t)r;
        w->written += (uint64_t)r;
    }
    return VN_OK;
}

/* Jansson refuses strings that are not UTF-8; say so before it does. */
static bool is_utf8(const char *s)
{
    json_t *j = json_string(s);
    json_decref(j);
    return j != NULL;
}

/* Adds one tensor's entry to the header; *pos is its first byte in the data
 * section and advances past it. */
static vn_status add_entry(json_t *root, const char *path, const char *name, const vn_tensor *t,
                           uint64_t *pos)
{
    /* An empty `what` leaves the message as ": <problem>", to follow this prefix. */
    vn_status s = vn__check_for(t, "", VN_ALLOW_CUDA | VN_ALLOW_HALF);
    if (s) return vn__err(s, "safetensors save '%s': tensor '%s'%s", path, name, vn_last_error());
    if (strcmp(name, "__metadata__") == 0)
        return vn__err(VN_ERR_ARG, "safetensors save '%s': \"__metadata__\" is reserved and "
                       "cannot name a tensor", path);
    if (!is_utf8(name))
        return vn__err(VN_ERR_ARG, "safetensors save '%s': tensor name '%s' is not UTF-8", path,
                       name);
    if (json_object_get(root, name))
        return vn__err(VN_ERR_ARG, "safetensors save '%s': tensor name '%s' appears twice", path,
                       name);
    const char *dt = vn__st_dtype_name(t->dtype);
    if (!dt)
        return vn__err(VN_ERR_DTYPE, "safetensors save '%s': tensor '%s': dtype %s has no "
                       "safetensors name", path, name, vn_dtype_name(t->dtype));
    uint64_t nbytes = (uint64_t)vn_tensor_numel(t) * vn_dtype_size(t->dtype);
    json_t *shape = json_array(), *entry = json_object(), *off = json_array();
    bool ok = shape && entry && off;
    for (int d = 0; ok && d < t->ndim; d++)
        ok = !json_array_append_new(shape, json_integer(t->shape[d]));
    ok = ok && !json_array_append_new(off, json_integer((json_int_t)*pos)) &&
         !json_array_append_new(off, json_integer((json_int_t)(*pos + nbytes))) &&
         !json_object_set_new(entry, "dtype", json_string(dt)) &&
         !json_object_set(entry, "shape", shape) && !json_object_set(entry, "data_offsets", off) &&
         !json_object_set(root, name, entry);
    json_decref(shape);
    json_decref(off);
    json_decref(entry);
    if (!ok) return vn__err(VN_ERR_MEMORY, "safetensors save '%s': out of memory", path);
    *pos += nbytes;
    return VN_OK;
}

static vn_status add_metadata(json_t *root, const char *path, const vn_tensor_map *m)
{
    json_t *meta = json_object();
    if (!meta || json_object_set_new(root, "__metadata__", meta))
        return vn__err(VN_ERR_MEMORY, "safetensors save '%s': out of memory", path);
    for (int i = 0; i < m->n_meta; i++) {
        const char *k = m->meta_keys[i], *v = m->meta_values[i];
        if (!k || !v)
            return vn__err(VN_ERR_ARG, "safetensors save '%s': metadata entry %d has a NULL %s",
                           path, i, k ? "value" : "key");
        if (!is_utf8(k) || !is_utf8(v))
            return vn__err(VN_ERR_ARG, "safetensors save '%s': metadata '%s' is not UTF-8", path,
                           is_utf8(k) ? k : "(key)");
        if (json_object_get(meta, k))
            return vn__err(VN_ERR_ARG, "safetensors save '%s': metadata key '%s' appears twice",
                           path, k);
        if (json_object_set_new(meta, k, json_string(v)))
            return vn__err(VN_ERR_MEMORY, "safetensors save '%s': out of memory", path);
    }
    return VN_OK;
}

/* The 8-byte length and the JSON header, padded with spaces so the data
 * starts 8-byte aligned (as the reference writer does), in a new buffer. */
static vn_status build_header(const char *path, const vn_tensor_map *m, char **buf, size_t *len)
{
    json_t *root = json_object();
    if (!root) return vn__err(VN_ERR_MEMORY, "safetensors save '%s': out of memory", path);
    vn_status s = m->n_meta > 0 ? add_metadata(root, path, m) : VN_OK;
    uint64_t pos = 0;
    for (int i = 0; !s && i < m->n; i++) {
        if (!m->names[i])
            s = vn__err(VN_ERR_ARG, "safetensors save '%s': tensor %d has a NULL name", path, i);
        else
            s = add_entry(root, path, m->names[i], m->tensors[i], &pos);
    }
    char *json = s ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (s) return s;
    size_t n = json ? strlen(json) : 0, padded = (n + 7) & ~(size_t)7;
    *buf = json ? malloc(8 + padded) : NULL;
    if (*buf) {
        for (int i = 0; i < 8; i++) (*buf)[i] = (char)(((uint64_t)padded >> (8 * i)) & 0xff);
        memcpy(*buf + 8, json, n);
        memset(*buf + 8 + n, ' ', padded - n);
        *len = 8 + padded;
    }
    free(json);
    return *buf ? VN_OK : vn__err(VN_ERR_MEMORY, "safetensors save '%s': out of memory", path);
}

static vn_status write_tensor(st_writer *w, const vn_tensor *t)
{
    bool grad = vn_set_grad_enabled(false);
    vn_tensor *c = vn__is_cuda(t) ? vn_to_device(t, VN_CPU) : vn_contiguous(t); /* row-major bytes */
    vn_set_grad_enabled(grad);
    if (!c) return vn_last_status();
    vn_status s = put(w, vn_tensor_data(c), (uint64_t)vn_tensor_numel(c) * vn_dtype_size(c->dtype));
    vn_tensor_release(c);
    return s;
}

/* Creates "dir/.name.tmp-<pid>-<k>" beside `path` exclusively (so two savers
 * never share one), with the usual 0666 & ~umask permissions; its name goes
 * to *tmp (freed by the caller) and its descriptor to *fd. */
static vn_status create_temp(const char *path, char **tmp, int *fd)
{
    static atomic_uint counter;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int dirlen = slash ? (int)(slash - path + 1) : 0;
    size_t n = strlen(path) + 64;
    if (!(*tmp = malloc(n)))
        return vn__err(VN_ERR_MEMORY, "safetensors save '%s': out of memory", path);
    for (int tries = 0; tries < 100; tries++) {
        snprintf(*tmp, n, "%.*s.%s.tmp-%ld-%u", dirlen, path, base, (long)getpid(),
                 atomic_fetch_add(&counter, 1));
        *fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (*fd >= 0) return VN_OK;
        if (errno != EEXIST)
            return vn__err(VN_ERR_IO, "safetensors save '%s': cannot create '%s': %s", path, *tmp,
                           strerror(errno));
    }
    return vn__err(VN_ERR_IO, "safetensors save '%s': cannot find a free temporary name", path);
}

/* True when `name` is "<prefix><pid>-<k>" (decimal digits only), the pid in *pid. */
static bool parse_temp_name(const char *name, const char *prefix, long *pid)
{
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0 || !isdigit((unsigned char)name[n])) return false;
    char *end;
    errno = 0;
    *pid = strtol(name + n, &end, 10);
    if (errno || *pid <= 0 || *end != '-' || !isdigit((unsigned char)end[1])) return false;
    for (end++; isdigit((unsigned char)*end); end++) {}
    return *end == '\0';
}

/* Removes the temporaries of `path` (".<name>.tmp-<pid>-<k>", as create_temp
 * makes them) left behind by saves whose process is gone, killed mid-write:
 * each can be as large as the checkpoint. A process is gone when kill(pid, 0)
 * fails with ESRCH; the temporaries of live processes (another save under
 * way, this process's own) are never touched. A pid reused by a new process
 * keeps its stale file until that process ends. Best effort: what cannot be
 * read or removed is left as it is, and the save goes on. */
static void remove_stale_temps(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int dirlen = slash ? (int)(slash - path + 1) : 0;
    char *dir = slash ? strndup(path, (size_t)dirlen) : strdup(".");
    size_t n = strlen(base) + 8, full_n = (size_t)dirlen + 256; /* d_name holds <= 255 */
    char *prefix = malloc(n), *full = malloc(full_n);
    DIR *d = dir && prefix && full ? opendir(dir) : NULL;
    if (d) snprintf(prefix, n, ".%s.tmp-", base);
    for (struct dirent *ent; d && (ent = readdir(d));) {
        long pid;
        if (!parse_temp_name(ent->d_name, prefix, &pid) || kill((pid_t)pid, 0) == 0 ||
            errno != ESRCH)
            continue;
        snprintf(full, full_n, "%.*s%s", dirlen, path, ent->d_name);
        unlink(full);
    }
    if (d) closedir(d);
    free(dir);
    free(prefix);
    free(full);
}

/* Makes the rename durable. File systems that cannot sync a directory say
 * EINVAL; the rename is then as durable as they make it. */
static vn_status sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path + 1)) : strdup(".");
    if (!dir) return vn__err(VN_ERR_MEMORY, "safetensors save '%s': out of memory", path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    vn_status s = VN_OK;
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL))
        s = vn__err(VN_ERR_IO, "safetensors save '%s': the file is in place but syncing its "
                    "directory '%s' failed: %s", path, dir, strerror(errno));
    if (fd >= 0) close(fd);
    free(dir);
    return s;
}

vn_status vn_save(const char *path, const vn_tensor_map *m)
{
    if (!path || !m)
        return vn__err(VN_ERR_ARG, "safetensors save: %s is NULL", path ? "the map" : "path");
    if (m->n < 0 || m->n_meta < 0 || (m->n > 0 && (!m->names || !m->tensors)) ||
        (m->n_meta > 0 && (!m->meta_keys || !m->meta_values)))
        return vn__err(VN_ERR_ARG, "safetensors save '%s': the map's counts (%d tensors, %d "
                       "metadata) do not match its arrays", path, m->n, m->n_meta);
    char *header, *tmp = NULL;
    size_t hlen = 0;
    vn_status s = build_header(path, m, &header, &hlen);
    if (s) return s;
    remove_stale_temps(path);
    st_writer w = {path, -1, 0};
    s = create_temp(path, &tmp, &w.fd);
    if (!s) s = put(&w, header, hlen);
    free(header);
    for (int i = 0; !s && i < m->n; i++) s = write_tensor(&w, m->tensors[i]);
    if (!s && fsync(w.fd) != 0)
        s = vn__err(VN_ERR_IO, "safetensors save '%s': fsync of '%s' failed: %s", path, tmp,
                    strerror(errno));
    if (w.fd >= 0 && close(w.fd) != 0 && !s)
        s = vn__err(VN_ERR_IO, "safetensors save '%s': closing '%s' failed: %s", path, tmp,
                    strerror(errno));
    if (!s && rename(tmp, path) != 0)
        s = vn__err(VN_ERR_IO, "safetensors save '%s': renaming '%s' over it failed: %s", path,
                    tmp, strerror(errno));
    if (s && w.fd >= 0) unlink(tmp);
    free(tmp);
    return s ? s : sync_dir(path);
}

/* ---- loading ----------------------------------------------------------------- */

/* What vn_load hands out: the public map over arrays it owns. */
typedef struct {
    vn_tensor_map pub; /* first, so a vn_tensor_map * converts back */
    char **names;
    vn_tensor **tensors;
    char **keys;
    char **values;
} st_map;

/* Reads exactly n bytes at offset `at`. */
static vn_status read_at(int fd, void *buf, uint64_t n, uint64_t at, const char *path)
{
    char *p = buf;
    while (n > 0) {
        size_t chunk = n > IO_CHUNK ? IO_CHUNK : (size_t)n;
        ssize_t r = pread(fd, p, chunk, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return vn__err(VN_ERR_IO, "safetensors load '%s': read of %zu bytes at offset %llu "
                           "failed: %s", path, chunk, (unsigned long long)at, strerror(errno));
        if (r == 0)
            return vn__err(VN_ERR_IO, "safetensors load '%s': the file ends at byte %llu, before "
                           "the %llu bytes the header promised (was it changed while loading?)",
                           path, (unsigned long long)at, (unsigned long long)n);
        p += r;
        at += (uint64_t)r;
        n -= (uint64_t)r;
    }
    return VN_OK;
}

/* Reads the F64 data of the n elements at byte `at` into the f32 tensor t,
 * a block at a time (no double-sized copy of the tensor). Each value is
 * rounded to the nearest f32 (IEEE 754, which C guarantees under Annex F):
 * magnitudes beyond f32's range (about 3.4e38) become ±inf, those below its
 * smallest subnormal ±0; NaN stays NaN. */
static vn_status read_f64(int fd, vn_tensor *t, uint64_t at, uint64_t n, const char *path)
{
    double block[4096];
    float *out = vn_tensor_data(t);
    for (uint64_t done = 0; done < n;) {
        uint64_t k = n - done < 4096 ? n - done : 4096;
        vn_status s = read_at(fd, block, k * sizeof *block, at + done * sizeof *block, path);
        if (s) return s;
        for (uint64_t i = 0; i < k; i++) out[done + i] = (float)block[i];
        done += k;
    }
    return VN_OK;
}

/* Reads and checks the header of an open file of `size` bytes. */
static vn_status read_header(int fd, uint64_t size, const char *path, vn_st_header *h,
                             uint64_t *data_start)
{
    uint8_t prefix[8];
    uint64_t hlen;
    vn_status s = read_at(fd, prefix, size < 8 ? size : 8, 0, path);
    if (s || (s = vn__st_header_length(prefix, size, path, &hlen))) return s;
    char *json = malloc(hlen + 1);
    if (!json) return vn__err(VN_ERR_MEMORY, "safetensors load '%s': out of memory", path);
    s = read_at(fd, json, hlen, 8, path);
    if (!s) s = vn__st_parse_header(json, hlen, size - 8 - hlen, path, h);
    free(json);
    *data_start = 8 + hlen;
    return s;
}

/* Moves the parsed names and metadata into a new map and reads each tensor. */
static st_map *build_map(int fd, vn_st_header *h, uint64_t data_start, const char *path)
{
    st_map *m = calloc(1, sizeof *m);
    if (!m) return vn__errp(VN_ERR_MEMORY, "safetensors load '%s': out of memory", path);
    m->names = calloc((size_t)h->n + 1, sizeof *m->names);
    m->tensors = calloc((size_t)h->n + 1, sizeof *m->tensors);
    m->keys = h->meta_keys, m->values = h->meta_values;
    m->pub.n_meta = h->n_meta;
    h->meta_keys = h->meta_values = NULL, h->n_meta = 0;
    if (!m->names || !m->tensors) {
        vn_tensor_map_free(&m->pub);
        return vn__errp(VN_ERR_MEMORY, "safetensors load '%s': out of memory", path);
    }
    m->pub.names = (const char *const *)m->names;
    m->pub.tensors = m->tensors;
    m->pub.meta_keys = (const char *const *)m->keys;
    m->pub.meta_values = (const char *const *)m->values;
    for (int i = 0; i < h->n; i++) {
        vn_st_entry *e = &h->entries[i];
        m->names[i] = e->name;
        e->name = NULL;
        m->pub.n = i + 1;
        if (!(m->tensors[i] = vn_empty(e->dtype, e->ndim, e->shape))) {
            char why[512];
            snprintf(why, sizeof why, "%s", vn_last_error());
            vn__err(VN_ERR_FORMAT, "%s: tensor '%s': %s", path, m->names[i], why);
            vn_tensor_map_free(&m->pub);
            return NULL;
        }
        uint64_t nbytes = e->end - e->begin, at = data_start + e->begin;
        if (nbytes > 0 && (e->f64 ? read_f64(fd, m->tensors[i], at, nbytes / sizeof(double), path)
                                  : read_at(fd, vn_tensor_data(m->tensors[i]), nbytes, at, path))) {
            vn_tensor_map_free(&m->pub);
            return NULL;
        }
    }
    return m;
}

vn_tensor_map *vn_load(const char *path)
{
    if (!path) return vn__errp(VN_ERR_ARG, "safetensors load: path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return vn__errp(VN_ERR_IO, "safetensors load '%s': cannot open: %s", path, strerror(errno));
    struct stat st;
    st_map *m = NULL;
    if (fstat(fd, &st) != 0) {
        vn__err(VN_ERR_IO, "safetensors load '%s': cannot stat: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        vn__err(VN_ERR_IO, "safetensors load '%s': %s", path,
                S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file");
    } else {
        posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        vn_st_header h;
        uint64_t data_start = 0;
        if (read_header(fd, (uint64_t)st.st_size, path, &h, &data_start) == VN_OK) {
            m = build_map(fd, &h, data_start, path);
            vn__st_header_free(&h);
        }
    }
    close(fd);
    return m ? &m->pub : NULL;
}

void vn_tensor_map_free(vn_tensor_map *pub)
{
    st_map *m = (st_map *)pub;
    if (!m) return;
    for (int i = 0; m->names && i < pub->n; i++) {
        free(m->names[i]);
        vn_tensor_release(m->tensors[i]);
    }
    for (int i = 0; m->keys && i < pub->n_meta; i++) {
        free(m->keys[i]);
        free(m->values[i]);
    }
    free(m->names);
    free(m->tensors);
    free(m->keys);
    free(m->values);
    free(m);
}

vn_tensor *vn_tensor_map_get(const vn_tensor_map *m, const char *name)
{
    for (int i = 0; m && name && i < m->n; i++)
        if (strcmp(m->names[i], name) == 0) return m->tensors[i];
    return vn__errp(VN_ERR_ARG, "tensor map: no tensor named '%s'", name ? name : "(NULL)");
}

const char *vn_tensor_map_meta(const vn_tensor_map *m, const char *key)
{
    for (int i = 0; m && key && i < m->n_meta; i++)
        if (strcmp(m->meta_keys[i], key) == 0) return m->meta_values[i];
    return vn__errp(VN_ERR_ARG, "tensor map: no metadata key '%s'", key ? key : "(NULL)");
}
