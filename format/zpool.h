/* format/zpool.h - parallel per-block compression for the shard writer
 * (zpool.c). Internal to the format library. */
#ifndef STOKER_FORMAT_ZPOOL_H
#define STOKER_FORMAT_ZPOOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct stk__zpool stk__zpool;

/* A compressed block, handed back in submission order. */
typedef struct {
    unsigned field;
    uint64_t next_first; /* the record after the block: its table entry */
    size_t raw_len;
    uint8_t *frame; /* malloc'd; the taker frees it */
    size_t len;
    int err; /* 0, or a stk_status (zerr: zstd's code) */
    size_t zerr;
} stk__zframe;

stk__zpool *stk__zpool_new(unsigned threads);
/* Stops the threads (queued blocks are dropped) and frees everything. */
void stk__zpool_free(stk__zpool *p);
/* Queue a block for compression; the pool takes ownership of raw (malloc'd). */
int stk__zpool_submit(stk__zpool *p, unsigned field, uint8_t *raw, size_t len, int level,
                      uint64_t next_first);
/* The oldest block if it is done (waiting for it when wait): 1, or 0 when
 * there is none ready (or none at all). */
int stk__zpool_take(stk__zpool *p, int wait, stk__zframe *out);
size_t stk__zpool_pending(stk__zpool *p);

#endif
