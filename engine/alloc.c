/* alloc.c — the caching CPU allocator. Sizes are rounded up to a power of
 * two and freed blocks wait in a free list per size, so the steady state of
 * a training step (the same shapes every iteration) never calls malloc. */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>

#define N_BINS 64
#define MIN_BLOCK 64

static void *free_list[N_BINS]; /* a freed block's first word links to the next */
static size_t bytes_in_use, bytes_cached;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int bin_of(size_t nbytes, size_t *rounded)
{
    size_t size = MIN_BLOCK;
    int bin = 6;
    while (size < nbytes) {
        size <<= 1;
        bin++;
    }
    *rounded = size;
    return bin;
}

void *vn__mem_alloc(size_t nbytes)
{
    size_t size;
    int bin = bin_of(nbytes ? nbytes : 1, &size);
    if (bin >= N_BINS) return NULL;
    pthread_mutex_lock(&lock);
    void *p = free_list[bin];
    if (p) {
        free_list[bin] = *(void **)p;
        bytes_cached -= size;
    }
    bytes_in_use += size;
    pthread_mutex_unlock(&lock);
    if (!p) {
        p = aligned_alloc(64, size);
        if (!p) {
            /* Give back what the cache holds and try once more. */
            vn_empty_cache();
            p = aligned_alloc(64, size);
        }
        if (!p) {
            pthread_mutex_lock(&lock);
            bytes_in_use -= size;
            pthread_mutex_unlock(&lock);
        }
    }
    return p;
}

void vn__mem_free(void *p, size_t nbytes)
{
    if (!p) return;
    size_t size;
    int bin = bin_of(nbytes ? nbytes : 1, &size);
    pthread_mutex_lock(&lock);
    *(void **)p = free_list[bin];
    free_list[bin] = p;
    bytes_in_use -= size;
    bytes_cached += size;
    pthread_mutex_unlock(&lock);
}

void vn_memory_stats(size_t *in_use, size_t *cached)
{
    pthread_mutex_lock(&lock);
    if (in_use) *in_use = bytes_in_use;
    if (cached) *cached = bytes_cached;
    pthread_mutex_unlock(&lock);
}

void vn_empty_cache(void)
{
    pthread_mutex_lock(&lock);
    for (int b = 0; b < N_BINS; b++) {
        while (free_list[b]) {
            void *p = free_list[b];
            free_list[b] = *(void **)p;
            free(p);
        }
    }
    bytes_cached = 0;
    pthread_mutex_unlock(&lock);
}
