/* packer/pool.h - a fixed set of equal buffers, shared between threads.
 *
 * pack's images go from a decoding thread through the ordered pipeline to
 * the shard writer without a copy: the pipeline's slots are buffers from
 * this pool, the consumer lends a filled one to the writer
 * (stk_writer_append_lent) and gives the pipeline a fresh one, and the
 * writer's I/O thread puts the lent one back once it is on disk. Buffers are
 * page-aligned (the writer sends them with O_DIRECT) and lie in one mapping
 * that asks for transparent huge pages: every direct write pins its pages,
 * and 2 MiB pages are 512 times fewer to walk. */
#ifndef STOKER_PACKER_POOL_H
#define STOKER_PACKER_POOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct pk_pool pk_pool;

/* count buffers of at least `bytes` each (rounded up to whole pages), all
 * free. NULL when out of memory or count or bytes is 0. */
pk_pool *pk_pool_new(size_t count, size_t bytes);
/* Every buffer must be back. NULL is a no-op. */
void pk_pool_free(pk_pool *p);
/* A free buffer; waits while there is none. */
uint8_t *pk_pool_get(pk_pool *p);
/* Give a buffer back (any thread). */
void pk_pool_put(pk_pool *p, const void *buf);
/* pk_pool_put as an stk_lent_done_fn: ctx is the pool. */
void pk_pool_done(void *pool, const void *buf);
/* Buffers that are free now (for tests and checks). */
size_t pk_pool_free_count(pk_pool *p);

#endif
