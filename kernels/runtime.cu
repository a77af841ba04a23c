/* runtime.cu — device discovery, error messages, the caching device
 * allocator and host/device copies. */
#include "internal.cuh"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ---------------------------------------------------------------- */

static thread_local char last_error[1024];

const char *vnk_error(void) { return last_error; }

int vnk__fail(const char *fmt, ...)
{
    /* Formatted into a scratch buffer first: the message may quote the
     * previous one (vnk__fail("...: %s", vnk_error())). */
    char buf[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(last_error, buf, sizeof buf);
    return 1;
}

int vnk__cuda(cudaError_t e, const char *what, ...)
{
    if (e == cudaSuccess) return 0;
    char buf[512];
    va_list ap;
    va_start(ap, what);
    vsnprintf(buf, sizeof buf, what, ap);
    va_end(ap);
    return vnk__fail("%s: %s (%s)", buf, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* ---- libraries opened on first use (internal.cuh) ------------------------------ */

void *vnk__dlopen(const char *soname, const char *fallback)
{
    /* RTLD_LOCAL: the library's symbols stay out of the global scope, where
     * they could interpose on another copy a host program loaded itself. */
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!lib && fallback) lib = dlopen(fallback, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        vnk__fail("cannot load %s (the CUDA toolkit's library, opened on first use; also tried "
                  "%s): %s", soname, fallback ? fallback : "nothing else", dlerror());
    return lib;
}

void *vnk__dlsym(void *lib, const char *soname, const char *name)
{
    void *f = dlsym(lib, name);
    if (!f) vnk__fail("%s has no %s: a CUDA toolkit other than the one venom was built with?", soname, name);
    return f;
}

/* ---- devices ------------------------------------------------------------------ */

int vnk_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        /* no driver or no device: not an error for us, but CUDA keeps the
         * failure as the last error, which a later launch check would
         * otherwise report */
        cudaGetLastError();
        return 0;
    }
    return n;
}

int vnk_device_name(char *buf, size_t n)
{
    if (!buf || n == 0) return vnk__fail("vnk_device_name: empty buffer");
    cudaDeviceProp p;
    if (vnk__cuda(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties(device 0)")) return 1;
    snprintf(buf, n, "%s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
             (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return 0;
}

int vnk_synchronize(void)
{
    return vnk__cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (an earlier kernel failed)");
}

/* ---- caching allocator ---------------------------------------------------------- */

/* Bin b holds blocks of MIN_BLOCK << b bytes. The free lists live in host
 * memory (device memory cannot hold the links), as growable stacks. */
#define MIN_BLOCK ((size_t)512)
#define N_BINS 48

typedef struct {
    void **ptr;
    size_t count, cap;
} stack;

static stack free_list[N_BINS];
static size_t bytes_in_use, bytes_cached;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The bin of an allocation of nbytes and the rounded size; -1 when nbytes is
 * beyond the largest bin. */
static int bin_of(size_t nbytes, size_t *rounded)
{
    size_t size = MIN_BLOCK;
    int bin = 0;
    while (size < nbytes) {
        if (bin + 1 >= N_BINS) return -1;
        size <<= 1;
        bin++;
    }
    *rounded = size;
    return bin;
}

void *vnk_alloc(size_t nbytes)
{
    size_t size;
    int bin = bin_of(nbytes, &size);
    if (bin < 0) {
        vnk__fail("vnk_alloc(%zu bytes): larger than the allocator's largest bin", nbytes);
        return NULL;
    }
    void *p = NULL;
    pthread_mutex_lock(&lock);
    stack *s = &free_list[bin];
    if (s->count > 0) {
        p = s->ptr[--s->count];
        bytes_cached -= size;
    }
    bytes_in_use += size;
    pthread_mutex_unlock(&lock);
    if (p) return p;

    cudaError_t e = cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation) {
        /* Blocks cached in other bins may be what stands in the way: give
         * them back to CUDA and try once more. An allocation failure is not
         * sticky, but it is the last error until cleared. */
        cudaGetLastError();
        vnk_empty_cache();
        e = cudaMalloc(&p, size);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        pthread_mutex_lock(&lock);
        bytes_in_use -= size;
        pthread_mutex_unlock(&lock);
        vnk__cuda(e, "cudaMalloc(%zu bytes)", size);
        return NULL;
    }
    return p;
}

void vnk_free(void *dev, size_t nbytes)
{
    if (!dev) return;
    size_t size;
    int bin = bin_of(nbytes, &size);
    if (bin < 0) return; /* vnk_alloc never handed out such a block */
    pthread_mutex_lock(&lock);
    stack *s = &free_list[bin];
    bool kept = true;
    if (s->count == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        void **grown = (void **)realloc(s->ptr, cap * sizeof *grown);
        if (grown) {
            s->ptr = grown;
            s->cap = cap;
        } else {
            kept = false;
        }
    }
    if (kept) {
        s->ptr[s->count++] = dev;
        bytes_cached += size;
    }
    bytes_in_use -= size;
    pthread_mutex_unlock(&lock);
    /* No room in the host-side list: hand the block straight back. */
    if (!kept) vnk__cuda(cudaFree(dev), "cudaFree(%zu bytes)", size);
}

void vnk_memory_stats(size_t *in_use, size_t *cached)
{
    pthread_mutex_lock(&lock);
    if (in_use) *in_use = bytes_in_use;
    if (cached) *cached = bytes_cached;
    pthread_mutex_unlock(&lock);
}

void vnk_empty_cache(void)
{
    pthread_mutex_lock(&lock);
    for (int b = 0; b < N_BINS; b++) {
        stack *s = &free_list[b];
        for (size_t i = 0; i < s->count; i++)
            vnk__cuda(cudaFree(s->ptr[i]), "cudaFree(%zu bytes)", MIN_BLOCK << b);
        s->count = 0;
    }
    bytes_cached = 0;
    pthread_mutex_unlock(&lock);
}

/* ---- copies ------------------------------------------------------------------------ */

int vnk_copy(void *dst, bool dst_on_device, const void *src, bool src_on_device, size_t nbytes)
{
    if (nbytes == 0) return 0;
    if (!dst || !src) return vnk__fail("vnk_copy(%zu bytes): NULL pointer", nbytes);
    if (!dst_on_device && !src_on_device) {
        memcpy(dst, src, nbytes);
        return 0;
    }
    if (dst_on_device && src_on_device)
        return vnk__cuda(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, 0),
                         "cudaMemcpyAsync(device to device, %zu bytes)", nbytes);
    /* Anything touching host memory is a blocking cudaMemcpy: the host
     * buffer may be reused or freed as soon as we return, pinned or not. */
    if (dst_on_device)
        return vnk__cuda(cudaMemcpy(dst, src, nbytes, cudaMemcpyHostToDevice),
                         "cudaMemcpy(host to device, %zu bytes)", nbytes);
    return vnk__cuda(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToHost),
                     "cudaMemcpy(device to host, %zu bytes; may report an earlier kernel's failure)",
                     nbytes);
}
