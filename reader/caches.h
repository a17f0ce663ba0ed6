/* reader/caches.h - the caches layer (blockcache.c, qblocks.c): blocks
 * shared by the workers and bounded. They read through the I/O layer (io.h)
 * and call nothing above. Internal. */
#ifndef STK_READER_CACHES_H
#define STK_READER_CACHES_H

#include "stoker/reader.h"
#include "io.h"

#include <stdint.h>

/* Decompressed blocks of compressed fields, shared and bounded (blockcache.c). */
typedef struct stk__zcache stk__zcache;
typedef struct stk__zentry stk__zentry;
stk__zcache *stk__zcache_new(uint64_t cap);
void stk__zcache_free(stk__zcache *c);
/* Block `block` of field f of shard s, decompressed, pinned until put. q:
 * the direct path's queue to read the frame through (empty; NULL: the map). */
int stk__zcache_get(stk__zcache *c, const stk_dataset *ds, size_t s, unsigned f, uint64_t block, stk__ioq *q,
                    stk__zentry **e, const uint8_t **raw, stk_error *err);
void stk__zcache_put(stk__zcache *c, stk__zentry *e);

/* Quasi blocks read whole on the direct path, shared and bounded (qblocks.c). */
typedef struct stk__qcache stk__qcache;
typedef struct stk__qentry stk__qentry;
stk__qcache *stk__qcache_new(uint64_t cap, uint64_t block_bytes, uint64_t K, uint64_t N);
void stk__qcache_free(stk__qcache *c);
/* Pin block `block`; *load = 1 when the caller created the entry and must
 * read it, then call stk__qcache_loaded. NULL: out of memory (err). */
stk__qentry *stk__qcache_pin(stk__qcache *c, uint64_t block, int *load, stk_error *err);
/* Read-ahead: a new LOADING entry for block, pinned, when the block is not
 * cached and fits without evicting anything; else NULL. */
stk__qentry *stk__qcache_claim(stk__qcache *c, uint64_t block);
uint8_t *stk__qentry_buf(const stk__qentry *e);
/* Per field: the data of field k starts at buf + qb_off[k] + shift[k]
 * (shift: the block's file offset modulo 4096), so that O_DIRECT reads the
 * aligned span in place; each field's region has room for the overrun. */
uint32_t *stk__qentry_shift(stk__qentry *e);
void stk__qcache_loaded(stk__qcache *c, stk__qentry *e, const stk_error *err);
int stk__qcache_ready(stk__qcache *c, stk__qentry *e);
int stk__qcache_wait(stk__qcache *c, stk__qentry *e, stk_error *err);
/* Unpin; used: one of its records was copied (a block whose records have
 * all been copied is freed). */
void stk__qcache_unpin(stk__qcache *c, stk__qentry *e, int used);
uint64_t stk__qcache_loads(stk__qcache *c);

#endif
