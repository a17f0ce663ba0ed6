/* reader/blockcache.c - decompressed blocks of compressed fields, shared by
 * the workers of one reader and bounded in bytes.
 *
 * A worker that needs a record of a compressed field takes the block that
 * holds it: from the cache when another worker (or an earlier batch)
 * decompressed it, else it decompresses it itself while others wanting the
 * same block wait for it rather than decompress it again. So sequential
 * order decompresses each block once, and quasi order does too when the
 * cache holds its window (the default size, see reader_open.c). Entries in
 * use are pinned; the least recently used unpinned ones go when the cache
 * would exceed its size. A full cache of pinned blocks is allowed to grow
 * past the bound rather than stall (at most one block per worker).
 *
 * On the direct path the worker reads the block's frame from the file
 * through its I/O queue (O_DIRECT, not the page cache) and decompresses that
 * copy; otherwise it decompresses straight from the map. */
#include "caches.h"
#include "membuf.h"

#include "../format/rshard.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct stk__zentry {
    struct stk__zentry *next;
    size_t shard;
    unsigned field;
    uint64_t block, stamp;
    uint8_t *raw;
    uint64_t size;
    unsigned refs;
    int ready;     /* 0 while its decompression runs */
    stk_error err; /* when the decompression failed (ready, raw NULL) */
};

struct stk__zcache {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    stk__zentry *head;
    uint64_t bytes, cap, clock;
};

stk__zcache *stk__zcache_new(uint64_t cap)
{
    stk__zcache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->cap = cap;
    return c;
}

void stk__zcache_free(stk__zcache *c)
{
    if (!c) return;
    for (stk__zentry *e = c->head, *n; e; e = n) {
        n = e->next;
        free(e->raw);
        free(e);
    }
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Drop unpinned entries, oldest first, until `need` more bytes fit. */
static void make_room(stk__zcache *c, uint64_t need)
{
    while (c->bytes + need > c->cap) {
        stk__zentry **victim = NULL;
        for (stk__zentry **p = &c->head; *p; p = &(*p)->next)
            if (!(*p)->refs && (*p)->ready && (!victim || (*p)->stamp < (*victim)->stamp)) victim = p;
        if (!victim) return; /* everything pinned: grow past the bound */
        stk__zentry *e = *victim;
        *victim = e->next;
        c->bytes -= e->size;
        free(e->raw);
        free(e);
    }
}

/* Block b's frame read through q (its reads are over when this returns),
 * then decompressed into dst. A frame that the queue cannot read directly
 * (under 4 KiB, or a file it cannot open) is decompressed from the map; a
 * remote shard's frames always go through the queue (its remote backend:
 * a cached frame comes back STK__IO_USE_MAP, and stk_shard_block_read of a
 * remote shard takes it from the node cache, checked). */
static int load_direct(stk__ioq *q, const stk_shard *sh, size_t s, unsigned f, uint64_t b, uint8_t *dst,
                       uint64_t size, stk_error *err)
{
    uint64_t off, packed, first, count;
    int rc = stk_shard_block_span(sh, f, b, &off, &packed, err);
    if (!rc) rc = stk_shard_block_info(sh, f, b, &first, &count, NULL, NULL, err);
    if (rc) return rc;
    uint8_t *frame = packed >= STK__IO_MIN_READ || stk__shard_is_remote(sh) ? stk__buf_alloc(packed) : NULL;
    if (!frame) return stk_shard_block_read(sh, f, b, dst, size, err);
    rc = stk__ioq_add(q, s, off, packed, frame, first, (uint32_t)count, NULL, err);
    if (!rc) rc = stk__ioq_submit(q, err);
    int wrc = stk__ioq_wait(q, rc ? NULL : err); /* always: nothing may stay reading into frame */
    if (!rc) rc = wrc;
    if (rc == STK__IO_USE_MAP) rc = stk_shard_block_read(sh, f, b, dst, size, err);
    else if (!rc) rc = stk_shard_block_decode(sh, f, b, frame, dst, size, err);
    free(frame);
    return rc;
}

int stk__zcache_get(stk__zcache *c, const stk_dataset *ds, size_t s, unsigned f, uint64_t block, stk__ioq *q,
                    stk__zentry **out, const uint8_t **raw, stk_error *err)
{
    pthread_mutex_lock(&c->mu);
    for (stk__zentry *e = c->head; e; e = e->next) {
        if (e->shard != s || e->field != f || e->block != block) continue;
        e->refs++;
        while (!e->ready) pthread_cond_wait(&c->cv, &c->mu);
        e->stamp = ++c->clock;
        int rc = e->raw ? STK_OK : e->err.code;
        if (rc && err) *err = e->err;
        pthread_mutex_unlock(&c->mu);
        if (rc) {
            stk__zcache_put(c, e);
            return rc;
        }
        *out = e;
        *raw = e->raw;
        return STK_OK;
    }
    const stk_shard *sh = stk_dataset_shard(ds, s);
    uint64_t size = 0;
    int rc = stk_shard_block_info(sh, f, block, NULL, NULL, &size, NULL, err);
    stk__zentry *e = rc ? NULL : calloc(1, sizeof *e);
    if (!rc && !e) rc = stk_error_set(err, STK_E_NOMEM, "out of memory");
    if (rc) {
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    make_room(c, size);
    *e = (stk__zentry){c->head, s, f, block, ++c->clock, NULL, size, 1, 0, {STK_OK, ""}};
    c->head = e;
    c->bytes += size;
    pthread_mutex_unlock(&c->mu);

    stk_error local = {STK_OK, ""};
    uint8_t *buf = malloc(size ? size : 1);
    rc = !buf ? stk_error_set(&local, STK_E_NOMEM, "out of memory for a %llu-byte block",
                              (unsigned long long)size)
         : q  ? load_direct(q, sh, s, f, block, buf, size, &local)
              : stk_shard_block_read(sh, f, block, buf, size, &local);
    if (rc) {
        free(buf);
        buf = NULL;
    }
    pthread_mutex_lock(&c->mu);
    e->raw = buf;
    e->err = local;
    e->ready = 1;
    if (rc) { /* not kept: the next reader of this block tries again (and fails the same way) */
        c->bytes -= e->size;
        e->size = 0;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (rc) {
        if (err) *err = local;
        stk__zcache_put(c, e);
        return rc;
    }
    *out = e;
    *raw = buf;
    return STK_OK;
}

void stk__zcache_put(stk__zcache *c, stk__zentry *e)
{
    pthread_mutex_lock(&c->mu);
    e->refs--;
    if (!e->refs && !e->raw) { /* a failed entry: remove it */
        for (stk__zentry **p = &c->head; *p; p = &(*p)->next)
            if (*p == e) {
                *p = e->next;
                free(e);
                break;
            }
    }
    pthread_mutex_unlock(&c->mu);
}
