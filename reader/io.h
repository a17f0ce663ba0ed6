/* reader/io.h - the direct-read engine: reads of record runs from shard files
 * straight into the slot buffers, many in flight, bypassing the page cache.
 *
 * One stk__io per reader holds the shard files (opened lazily with O_DIRECT)
 * and, for the portable engine, a pool of pread threads; one stk__ioq per
 * worker queues the reads of a part and runs them: through its own io_uring
 * ring where the kernel allows it, else through the shared pool. A read that
 * O_DIRECT cannot do in place (an offset, length or buffer off the block
 * alignment) reads the aligned superset into the queue's bounce area and
 * copies the part asked for. Short reads, EINTR and EAGAIN are retried; any
 * other failure names the shard, the records and errno.
 *
 * Backends. io_plan.c chooses the read path once per open: the map
 * (STK_IO_MMAP, no engine: the workers copy from the dataset's mappings) or
 * this engine (STK_IO_DIRECT), whose queues run on io_uring or a pread pool
 * (STK__ENGINE_*). Another backend (object storage, say) goes here, beside
 * those two: an STK__ENGINE_* value whose stk__io_open opens the objects
 * instead of O_DIRECT files and whose queues deliver the same runs into the
 * same buffers through stk__ioq_add/submit/wait; io_plan.c chooses it. The
 * engine and the caches above call only this interface and stay as they are.
 * This layer calls only the dataset and util layers. */
#ifndef STK_READER_IO_H
#define STK_READER_IO_H

#include "stoker/reader.h"

#include <stddef.h>
#include <stdint.h>

typedef struct stk__io stk__io;
typedef struct stk__ioq stk__ioq;

/* REMOTE: the dataset's shards are remote (s3://, https://): their runs
 * are range GETs (io_remote.c); a mixture's local shards still go through
 * io_uring or the pool. */
enum { STK__ENGINE_AUTO = 0, STK__ENGINE_URING = 1, STK__ENGINE_THREADS = 2, STK__ENGINE_REMOTE = 3 };

/* Returned by stk__ioq_add when the shard's file cannot be read directly
 * (deleted, replaced by rename since the dataset was opened, a shard in
 * memory, out of descriptors): the caller copies from the mapping instead,
 * which still holds the file the dataset opened. For a remote shard only
 * for a compressed frame that the node cache holds: stk_shard_block_read
 * takes it from there, checked (never a tensor run: those the backend
 * copies from the cache itself, checked). */
#define STK__IO_USE_MAP 1

/* Runs shorter than this are copied from the mapping by the reader (not
 * a remote shard's: its mapping has holes where nothing was fetched). */
#define STK__IO_MIN_READ 4096u

typedef struct {
    int engine;         /* STK__ENGINE_* wanted; AUTO: io_uring, else threads */
    unsigned depth;     /* reads in flight per queue (>= 1), and at most depth x 256 KiB;
                          the pool has depth x queues threads, at most 64 */
    unsigned queues;    /* two per worker: the part being finished, the next */
    const char *fault;  /* test seam (STOKER_IO_FAULT, see io.c); NULL: none */
    unsigned depth_now; /* the limit in force at first (<= depth; 0: depth), see stk__io_set_depth */
} stk__io_config;

typedef struct {
    uint64_t reads;     /* reads completed */
    uint64_t bytes;     /* bytes delivered to the callers' buffers */
    uint64_t retries;   /* short reads, EINTR and EAGAIN resubmitted */
    uint64_t bounced;   /* bytes read through the bounce area */
    uint64_t map_reads; /* runs copied from the mapping (STK__IO_USE_MAP) */
    unsigned buffered;  /* shard files without O_DIRECT (the file system refused it) */
} stk__io_counts;

/* note gets a line when the engine differs from the one asked for (io_uring
 * unavailable: which error). */
int stk__io_open(stk__io **out, const stk_dataset *ds, const stk__io_config *c, char *note, size_t note_cap,
                 stk_error *err);
void stk__io_close(stk__io *io);
int stk__io_engine(const stk__io *io);
stk__ioq *stk__io_queue(stk__io *io, unsigned i);
void stk__io_counts_get(stk__io *io, stk__io_counts *c);
/* Keep at most `depth` (1 .. the depth it was opened with) reads in flight
 * per queue from now on (the pool: depth x queues reads at once); a
 * submitted batch of reads finishes under the limit it started with at
 * most. Any thread. */
void stk__io_set_depth(stk__io *io, unsigned depth);

/* The remote backend's counters (all zero, remote 0, without remote shards). */
typedef struct {
    int remote;          /* the dataset has remote shards */
    uint64_t runs;       /* runs asked for (stk__ioq_add) on remote shards */
    uint64_t gets;       /* range GETs the engine issued (pieces of runs) */
    uint64_t bytes;      /* their bytes delivered (refetches included) */
    uint64_t cache_hits; /* values (units) copied from the node cache */
    uint64_t cache_hit_bytes;
    uint64_t cache_stored;   /* fetched bytes the cache kept */
    uint64_t cache_rejected; /* fetched bytes it did not (its limit) */
    uint64_t refetches;      /* pieces fetched again after a checksum mismatch */
    uint64_t small_windows;  /* windows of small columns fetched whole */
    /* the clients' counters (remote.h), summed over the dataset's clients:
     * every request of the reader's dataset, open and the format library's
     * own fetches included */
    uint64_t requests, bytes_in, retries, retry_5xx, retry_net, failures, inflight_max;
} stk__rio_counts;
void stk__io_remote_counts(const stk__io *io, stk__rio_counts *c);

/* Queue a read of len bytes at file offset off of shard `shard` into dst.
 * rec and nrec (the shard's local records covered) only name the records in
 * an error message; tag is the caller's (stk__ioq_result gives it back).
 * STK__IO_USE_MAP: not queued, copy from the mapping. */
int stk__ioq_add(stk__ioq *q, size_t shard, uint64_t off, uint64_t len, void *dst, uint64_t rec,
                 uint32_t nrec, void *tag, stk_error *err);
/* The same for a dst with IO_ALIGN (4096) writable bytes before and after
 * it that may be overwritten: when dst and off agree modulo 4096, O_DIRECT
 * reads the aligned span in place instead of through the bounce area. */
int stk__ioq_add_padded(stk__ioq *q, size_t shard, uint64_t off, uint64_t len, void *dst, uint64_t rec,
                        uint32_t nrec, void *tag, stk_error *err);
/* Start the queued reads (io_uring: up to depth in flight; the pool: all
 * queued for its threads) and return: a worker
 * submits the next part's reads before it waits for the current part's, so
 * the device queue does not drain between parts. */
int stk__ioq_submit(stk__ioq *q, stk_error *err);
/* Wait for every submitted read to finish (on failure too: no read is left
 * writing into a buffer) and empty the queue. The first failure, in queue
 * order, is the error. */
int stk__ioq_wait(stk__ioq *q, stk_error *err);

/* The pieces of stk__ioq_wait, for callers that need each read's outcome
 * (quasi blocks, qblocks.c): wait for every submitted read; the reads
 * submitted (0 before submit); read i's status and tag; empty the queue. */
void stk__ioq_drain(stk__ioq *q);
size_t stk__ioq_count(const stk__ioq *q);
int stk__ioq_result(stk__ioq *q, size_t i, void **tag, stk_error *err);
void stk__ioq_clear(stk__ioq *q);

/* ---- The remote backend (io_remote.c), for io.c only ------------------- */

typedef struct stk__rio stk__rio;
typedef struct stk__rioq stk__rioq;
/* *out NULL when no shard of ds is remote. nq: the queues. */
int stk__rio_open(stk__rio **out, const stk_dataset *ds, unsigned nq, stk_error *err);
void stk__rio_close(stk__rio *io); /* every group waited for first */
int stk__rio_remote(const stk__rio *io, size_t shard);
stk__rioq *stk__rio_queue(stk__rio *io, unsigned i);
void stk__rio_counts_get(const stk__rio *io, stk__rio_counts *c);
/* As stk__ioq_add for a remote shard: STK_OK queued (or copied from the
 * cache, checked), STK__IO_USE_MAP a cached compressed frame. */
int stk__rioq_add(stk__rioq *q, size_t shard, uint64_t off, uint64_t len, void *dst, uint64_t rec,
                  uint32_t nrec, void *tag, stk_error *err);
int stk__rioq_submit(stk__rioq *q, stk_error *err);
void stk__rioq_drain(stk__rioq *q);
size_t stk__rioq_count(const stk__rioq *q);
int stk__rioq_result(const stk__rioq *q, size_t i, void **tag, stk_error *err);
void stk__rioq_clear(stk__rioq *q);

#endif
