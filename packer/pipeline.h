/* packer/pipeline.h - an ordered parallel map with bounded memory.
 *
 * Worker threads produce items [first, end) into a ring of `window` slots
 * (item i uses slot i % window) and consume them strictly in order, one at a
 * time: the worker that finishes the next item consumes it and whatever
 * follows it ready, then goes back to producing; the calling thread only
 * waits. A worker takes item i only once item i - window has been consumed,
 * so memory is window x slot_bytes whatever the input size, and a slow item
 * holds back at most `window` others. Output order never depends on the
 * thread count, which is what makes packing reproducible.
 *
 * Slot buffers come from a pool (pool.h): the pipeline holds `window` of
 * them, and the consumer may keep the one it is handed, replacing it with
 * another from the pool, so that a result goes on (to the disk) without a
 * copy. */
#ifndef STOKER_PACKER_PIPELINE_H
#define STOKER_PACKER_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "pool.h"

typedef struct {
    int status;            /* 0 ok, else the producer's error code */
    uint32_t w, h;         /* producer-defined extras (image size here) */
    uint64_t in_bytes;     /* input bytes read for this item */
    uint64_t hash;         /* producer-defined: the result's checksum here */
    uint32_t out_w, out_h; /* producer-defined: the stored image's size */
    uint64_t out_bytes;    /* producer-defined: the stored value's bytes */
    int kept;              /* producer-defined: the input's own bytes are stored */
    int restarted;         /* producer-defined: the value was written with restart markers */
    char msg[320];         /* one line when status != 0 */
} pk_result;

/* Where one worker's time went, in seconds (pk_pipeline.stats). Apart from
 * taking the pipeline's lock, every moment of its life (wall) is in one of
 * these; produce and consume are the callbacks' own time, which they may
 * split further (the waits inside them are theirs). */
typedef struct {
    double wall;     /* from the thread's start to its exit */
    double init;     /* thread_init and thread_fini */
    double produce;  /* in produce() */
    double consume;  /* in consume() */
    double window;   /* waiting for the window: the oldest unconsumed item was `window` behind */
    double prefetch; /* in prefetch() */
    uint64_t produced, consumed;
} pk_thread_stats;

typedef struct {
    unsigned threads;       /* worker threads (>= 1) */
    pk_thread_stats *stats; /* NULL, or `threads` entries, filled for worker k in stats[k] */
    size_t window;          /* slots in flight (>= threads) */
    pk_pool *pool;          /* at least `window` buffers: the slots */
    uint64_t first, end;
    void *user;
    /* Per-thread state (e.g. a decoder) of worker k (0 .. threads - 1, the
     * index of its stats); may return NULL only on failure. */
    void *(*thread_init)(void *user, unsigned k);
    void (*thread_fini)(void *state);
    /* Fill slot for item i and res. Runs on worker threads, concurrently. */
    void (*produce)(void *user, void *state, uint64_t i, uint8_t *slot, pk_result *res);
    /* Take item i: in order and never two at once, on one of the worker
     * threads (which one varies; each call happens after the previous one
     * returned, through the pipeline's lock, so the consumer's own state
     * needs no lock). Nonzero stops the run. It may keep *slot's buffer for
     * itself by storing another buffer of the pool in *slot. state is the
     * consuming worker's (thread_init), for per-thread counters. */
    int (*consume)(void *user, void *state, uint64_t i, uint8_t **slot, const pk_result *res);
    /* Optional: announce that item i will be produced soon (start reading
     * its input). When `ahead` > 0, called once per item in [first, end):
     * for the first `ahead` items on the calling thread before the workers
     * start, for the others on the worker that takes the item `ahead`
     * places earlier, concurrently. With `ahead` >= window every item is
     * announced before a worker takes it. Must not fail the run. */
    void (*prefetch)(void *user, uint64_t i);
    uint64_t ahead;
} pk_pipeline;

/* Returns 0 when every item was consumed, the consumer's nonzero value when
 * it stopped the run, or -1 when threads or memory could not be had: no
 * thread started, or a worker's thread_init failed before the consumer had
 * stopped the run (then -1 even if the other workers had finished every
 * item meanwhile: the result does not depend on how far they got). The slot
 * buffers go back to the pool at the end. */
int pk_pipeline_run(const pk_pipeline *p);

#endif
