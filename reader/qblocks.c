/* reader/qblocks.c - quasi blocks read whole, for the direct path.
 *
 * In quasi order a batch takes a few records from each block of a window of
 * blocks, so reading records one by one is a random read per record, while
 * the device is fastest at the block size (4 MiB). On the direct path with
 * one rank the workers therefore read every block of the window whole, once,
 * into this cache, and copy records out of it. The first part that needs a
 * block creates its entry and reads it through its own queue; parts of other
 * workers that need it meanwhile wait for it (after publishing their own
 * loads, so that no two workers wait on each other: reader.c, part_end). An
 * entry is freed when every record of it has been copied once (a block's
 * records appear once per epoch), else the least recently used unpinned
 * entry goes when the cache would exceed its bound. Entries being loaded or
 * pinned are never evicted: the cache may grow past the bound by what the
 * parts in flight hold.
 *
 * Parts also read the next window's blocks ahead (stk__qcache_claim: only
 * into room the cache has, never evicting), so that the device reads window
 * w + 1 while the workers copy records out of window w; without it the
 * device idled for half of every window. */
#include "caches.h"
#include "membuf.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NBUCKETS 1024u /* power of two */

enum { Q_LOADING = 0, Q_READY = 1, Q_FAILED = 2 };

struct stk__qentry {
    stk__qentry *next; /* bucket chain */
    uint64_t block, stamp;
    uint64_t left; /* records not yet copied */
    uint8_t *buf;
    uint32_t shift[STK_MAX_FIELDS]; /* where each field's data starts past its lead pad */
    unsigned refs;
    int state;
    stk_error err;
};

struct stk__qcache {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    stk__qentry *bucket[NBUCKETS];
    /* Buffers of dropped entries, kept for the next block: fresh memory
     * costs a page fault per page on its first touch (and O_DIRECT pins it
     * page by page), which cost more than the reads when buffers were freed. */
    uint8_t **spare;
    size_t nspare, spare_cap;
    uint64_t block_bytes, cap, bytes, clock;
    uint64_t K, N;
    uint64_t loads; /* blocks read */
};

stk__qcache *stk__qcache_new(uint64_t cap, uint64_t block_bytes, uint64_t K, uint64_t N)
{
    stk__qcache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->cap = cap;
    c->block_bytes = block_bytes;
    c->spare_cap = block_bytes ? (size_t)(cap / block_bytes) : 0;
    if (!(c->spare = calloc(c->spare_cap ? c->spare_cap : 1, sizeof *c->spare))) {
        free(c);
        return NULL;
    }
    c->K = K;
    c->N = N;
    return c;
}

static void drop(stk__qcache *c, stk__qentry **link)
{
    stk__qentry *e = *link;
    *link = e->next;
    c->bytes -= c->block_bytes;
    if (c->nspare < c->spare_cap && c->bytes + (c->nspare + 1) * c->block_bytes <= c->cap)
        c->spare[c->nspare++] = e->buf;
    else free(e->buf);
    free(e);
}

void stk__qcache_free(stk__qcache *c)
{
    if (!c) return;
    for (unsigned i = 0; i < NBUCKETS; i++)
        while (c->bucket[i]) drop(c, &c->bucket[i]);
    while (c->nspare) free(c->spare[--c->nspare]);
    free(c->spare);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static stk__qentry **find(stk__qcache *c, uint64_t block)
{
    stk__qentry **p = &c->bucket[block & (NBUCKETS - 1)];
    while (*p && (*p)->block != block) p = &(*p)->next;
    return p;
}

/* Drop ready unpinned entries, least recently used first, until one more
 * block fits (or nothing can go). */
static void make_room(stk__qcache *c)
{
    while (c->bytes + c->block_bytes > c->cap) {
        stk__qentry **victim = NULL;
        for (unsigned i = 0; i < NBUCKETS; i++)
            for (stk__qentry **p = &c->bucket[i]; *p; p = &(*p)->next)
                if (!(*p)->refs && (*p)->state != Q_LOADING && (!victim || (*p)->stamp < (*victim)->stamp))
                    victim = p;
        if (!victim) return;
        drop(c, victim);
    }
}

/* Under the lock: a new entry for block, LOADING (the caller reads it). */
static stk__qentry *new_entry(stk__qcache *c, uint64_t block)
{
    stk__qentry *e = calloc(1, sizeof *e);
    void *buf = c->nspare ? c->spare[--c->nspare] : NULL;
    if (!e || (!buf && !(buf = stk__buf_alloc(c->block_bytes)))) {
        if (buf && c->nspare < c->spare_cap) c->spare[c->nspare++] = buf;
        free(e);
        return NULL;
    }
    e->buf = buf;
    e->block = block;
    uint64_t first = block * c->K;
    e->left = first + c->K <= c->N ? c->K : c->N - first;
    e->next = c->bucket[block & (NBUCKETS - 1)];
    c->bucket[block & (NBUCKETS - 1)] = e;
    c->bytes += c->block_bytes;
    c->loads++;
    return e;
}

stk__qentry *stk__qcache_pin(stk__qcache *c, uint64_t block, int *load, stk_error *err)
{
    pthread_mutex_lock(&c->mu);
    stk__qentry **p = find(c, block), *e = *p;
    *load = 0;
    if (!e) {
        make_room(c);
        if (!(e = new_entry(c, block))) {
            pthread_mutex_unlock(&c->mu);
            stk_error_set(err, STK_E_NOMEM, "out of memory for a %llu-byte quasi block",
                          (unsigned long long)c->block_bytes);
            return NULL;
        }
        *load = 1;
    }
    e->refs++;
    e->stamp = ++c->clock;
    pthread_mutex_unlock(&c->mu);
    return e;
}

stk__qentry *stk__qcache_claim(stk__qcache *c, uint64_t block)
{
    pthread_mutex_lock(&c->mu);
    stk__qentry *e = NULL;
    if (!*find(c, block) && c->bytes + c->block_bytes <= c->cap && (e = new_entry(c, block))) {
        e->refs = 1;
        e->stamp = ++c->clock;
    }
    pthread_mutex_unlock(&c->mu);
    return e;
}

uint8_t *stk__qentry_buf(const stk__qentry *e) { return e->buf; }
uint32_t *stk__qentry_shift(stk__qentry *e) { return e->shift; }

void stk__qcache_loaded(stk__qcache *c, stk__qentry *e, const stk_error *err)
{
    pthread_mutex_lock(&c->mu);
    if (e->state == Q_LOADING) {
        e->state = err && err->code ? Q_FAILED : Q_READY;
        if (err && err->code) e->err = *err;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

int stk__qcache_ready(stk__qcache *c, stk__qentry *e)
{
    pthread_mutex_lock(&c->mu);
    int ready = e->state != Q_LOADING;
    pthread_mutex_unlock(&c->mu);
    return ready;
}

int stk__qcache_wait(stk__qcache *c, stk__qentry *e, stk_error *err)
{
    pthread_mutex_lock(&c->mu);
    while (e->state == Q_LOADING) pthread_cond_wait(&c->cv, &c->mu);
    int rc = e->state == Q_FAILED ? e->err.code : STK_OK;
    if (rc && err) *err = e->err;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void stk__qcache_unpin(stk__qcache *c, stk__qentry *e, int used)
{
    pthread_mutex_lock(&c->mu);
    e->refs--;
    if (used && e->left) e->left--;
    /* every record copied, or a failed load (the next part to want it reads it again) */
    if (!e->refs && e->state != Q_LOADING && (!e->left || e->state == Q_FAILED)) drop(c, find(c, e->block));
    pthread_mutex_unlock(&c->mu);
}

uint64_t stk__qcache_loads(stk__qcache *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t n = c->loads;
    pthread_mutex_unlock(&c->mu);
    return n;
}
