/* packer/pool.c - see pool.h. A stack of free buffers under a mutex: gets
 * and puts are a few per image, far too few for the lock to matter. */
#define _GNU_SOURCE
#include "pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_PAGE ((size_t)2 << 20)

struct pk_pool {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    uint8_t *base; /* the mapping: count buffers of `stride` bytes */
    size_t map_len, stride, count;
    uint8_t **free; /* stack of free buffers */
    size_t nfree;
    unsigned waiters;
};

pk_pool *pk_pool_new(size_t count, size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (!count || !bytes || bytes > SIZE_MAX / 2) return NULL;
    size_t stride = (bytes + page - 1) / page * page;
    if (stride > (SIZE_MAX - HUGE_PAGE) / count) return NULL;
    pk_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    /* Over-map by a huge page so the buffers can start on a 2 MiB boundary:
     * only then can the kernel back them with huge pages. */
    p->map_len = stride * count + HUGE_PAGE;
    void *m = mmap(NULL, p->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    p->free = malloc(count * sizeof *p->free);
    if (m == MAP_FAILED || !p->free) {
        if (m != MAP_FAILED) munmap(m, p->map_len);
        free(p->free);
        free(p);
        return NULL;
    }
    p->base = m;
    uint8_t *first = (uint8_t *)(((uintptr_t)m + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
#ifdef MADV_HUGEPAGE
    madvise(first, stride * count, MADV_HUGEPAGE); /* a hint: without it the pool still works */
#endif
    p->stride = stride;
    p->count = count;
    for (size_t i = 0; i < count; i++) p->free[i] = first + (count - 1 - i) * stride; /* lowest first out */
    p->nfree = count;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cv, NULL);
    return p;
}

void pk_pool_free(pk_pool *p)
{
    if (!p) return;
    munmap(p->base, p->map_len);
    free(p->free);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

uint8_t *pk_pool_get(pk_pool *p)
{
    pthread_mutex_lock(&p->lock);
    while (!p->nfree) {
        p->waiters++;
        pthread_cond_wait(&p->cv, &p->lock);
        p->waiters--;
    }
    uint8_t *b = p->free[--p->nfree];
    pthread_mutex_unlock(&p->lock);
    return b;
}

void pk_pool_put(pk_pool *p, const void *buf)
{
    pthread_mutex_lock(&p->lock);
    p->free[p->nfree++] = (uint8_t *)(uintptr_t)buf;
    if (p->waiters) pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->lock);
}

void pk_pool_done(void *pool, const void *buf) { pk_pool_put(pool, buf); }

size_t pk_pool_free_count(pk_pool *p)
{
    pthread_mutex_lock(&p->lock);
    size_t n = p->nfree;
    pthread_mutex_unlock(&p->lock);
    return n;
}
