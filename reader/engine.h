/* reader/engine.h - the engine layer (reader.c, upload.c): the reader's
 * state, its slots and workers, the prefetch threads and the copy thread.
 * The plan layer builds a stk_reader and starts these threads; the api layer
 * reads its statistics. The engine calls only the layers below (device.h,
 * caches.h, order.h/mix.h, io.h, dataset.h, util.h/membuf.h). Internal. */
#ifndef STK_READER_ENGINE_H
#define STK_READER_ENGINE_H

#include "stoker/reader.h"
#include "caches.h"
#include "dataset.h"
#include "device.h"
#include "io.h"
#include "membuf.h"
#include "mix.h"
#include "order.h"
#include "timeline.h"
#include "util.h"

#include <pthread.h>
#include <sys/types.h>

/* FREE -> BUSY (a worker gathers) -> READY, or on the device path
 * BUSY -> GATHERED (staged) -> READY (upload queued by the copy thread). */
enum { SLOT_FREE = 0, SLOT_BUSY = 1, SLOT_GATHERED = 2, SLOT_READY = 3 };

/* The device side of slot i (upload.c). */
typedef struct {
    void *dev, *dev_out; /* device copy of the staged tensors; transform output */
    void *ev_start, *ev_copied, *ev_ready, *ev_released;
    int used; /* uploaded at least once (ev_copied recorded) */
} stk__dslot;

/* Bytes values of compressed fields, copied out of the blocks: one buffer per
 * part, so parts never share one while they grow it. */
typedef struct {
    uint8_t *p;
    uint64_t len, cap;
} stk__zheap;

typedef struct {
    uint64_t seq;                           /* the batch it holds or is being filled with */
    int state;                              /* SLOT_* (under the reader's mutex) */
    stk_error err;                          /* set when preparing failed */
    unsigned err_part;                      /* the part err came from */
    unsigned parts_left;                    /* parts still being prepared (under mu) */
    unsigned nparts;                        /* parts the batch was cut into (r->parts_now at its claim) */
    uint8_t *buf;                           /* gathered tensors, one region per field */
    uint64_t *records;                      /* batch_size global record indices */
    stk_value *values;                      /* batch_size per bytes or array field */
    uint64_t *shapes;                       /* batch_size x ndim per array field            */
    uint64_t *field_shapes[STK_MAX_FIELDS]; /* into shapes, per selected field
                                               (NULL but for array fields):
                                               stk_batch_shapes */
    stk_batch batch;
    stk_batch_field fields[STK_MAX_FIELDS];
    stk__zheap *zheap;        /* [parts] when a compressed bytes field is read */
    uint32_t *sources;        /* a mixture: batch_size source indices ... */
    uint64_t *source_records; /* ... and records inside the source */
    double busy;              /* worker seconds spent on this batch (under mu) */
    double *src_busy;         /* a timed mixture: of which gathering each source's records */
    double timed_busy;        /* ... their sum */
} stk__slot;

typedef struct stk_reader stk_reader;

/* Parts a worker may hold begun at once on the direct path (r->parts_ahead:
 * 2, the one it ends and the next; more for remote shards, io_plan.c); the
 * size of stk__worker's ioq. */
#define STK__PARTS_AHEAD_MAX 4

typedef struct {
    stk_reader *r;
    pthread_t thread;
    int started;
    stk__epoch_order ord; /* the epoch this worker computed last */
    uint64_t ord_epoch;
    uint64_t batch_no;     /* batches prepared, for stamp[] */
    uint64_t *stamp;       /* per shard: batch_no that last checked it */
    uint64_t verified;     /* records verified, not yet added to stats */
    unsigned advise_left;  /* batches to read ahead for (reader.c, prepare) */
    stk__ioq *ioq[4];      /* direct path: read queues, a part per queue (STK__PARTS_AHEAD_MAX) */
    stk__qentry **qblk[2]; /* quasi blocks: per record of each part, its block */
    stk__qentry **qown[2]; /* ... and the blocks the part reads itself */
    stk__qentry **qpre[2]; /* ... of which read ahead for the next window */
    double h2d;            /* upload seconds, not yet added to stats */
    double crop_s;         /* decode and crop seconds, not yet added to stats */
    double read_wait_s;    /* direct path: seconds waiting for reads, not yet added */
    /* compressed fields: the block in use per selected field, pinned in the
     * cache while this worker's records stay in it (reader.c) */
    stk__zentry *pin[STK_MAX_FIELDS];
    const uint8_t *pin_raw[STK_MAX_FIELDS];
    size_t pin_shard[STK_MAX_FIELDS];
    uint64_t pin_block[STK_MAX_FIELDS];
    stk__ioq *zq;          /* direct path: the ending part's queue, empty, for blocks */
    stk__cropper *cropper; /* the load-time crop (load_crop.c), or NULL */
    uint8_t *crop_buf;     /* a crop before the workers normalise it (load_norm) */
    uint8_t *rval;         /* a remote shard's value, copied out of the node cache */
    uint64_t rval_cap;
    stk__mix_cache *mixc; /* a mixture: the sources' orders (mix.c) */
    unsigned index;       /* among r->workers: it claims work while index < r->knob_threads */
} stk__worker;

typedef struct {
    dev_t dev;
    ino_t ino;
} stk__file_id;

struct stk_reader {
    const stk_dataset *ds;
    stk_dataset *owned;   /* when opened by path */
    stk_reader_options o; /* resolved: defaults and environment applied */
    char *fields_text;    /* o.fields points here */

    unsigned nsel; /* selected fields: schema index, stride, slot offset */
    unsigned sel[STK_MAX_FIELDS];
    uint64_t sel_stride[STK_MAX_FIELDS];
    uint64_t sel_off[STK_MAX_FIELDS];
    int has_bytes;
    unsigned shape_words; /* sum of the selected array fields' ndim */
    int has_compressed;   /* a selected field is compressed: no zero-copy */
    int zbytes;           /* a selected bytes field is compressed, or bytes values are
                             copied (rbytes): slots get zheaps */
    int rbytes;           /* remote shards: bytes values are copied into the part's heap
                             (the node cache may drop what it holds past its limit) */
    stk__zcache *zcache;  /* when a selected field is compressed */
    uint64_t zcache_bytes;

    /* the read path (io_plan.c) */
    int direct;                       /* STK_IO_DIRECT chosen */
    int fill;                         /* map path: cold data that fits, read ahead (fill.c) */
    struct stk__fill *filler;         /* its threads (fill.c), NULL: none */
    uint8_t *shard_huge;              /* the map path: per shard, its map advised huge pages (or NULL) */
    uint8_t io_field[STK_MAX_FIELDS]; /* direct: selected field k is read directly (an uncompressed tensor) */
    stk__io *io;                      /* its engine */
    char io_reason[STK_ERROR_MSG_MAX]; /* why, and any fallback */
    stk__qcache *qcache;               /* quasi order, one rank: blocks read whole */
    uint64_t qb_off[STK_MAX_FIELDS];   /* a direct field's offset in a block's buffer */
    uint64_t qb_bytes, qcache_bytes;   /* a block's buffer; the cache's bound */

    /* a mixture (mix.c): the sources read as one; NULL for one dataset.
     * N counts an epoch's positions, `records` the dataset's records (the
     * sources concatenated): equal for one dataset */
    stk__mix *mix;
    int mix_timed;   /* records cost more than a small copy: gathers timed per source */
    char **src_path; /* [nsrc] as given at open ("" for an open dataset) */
    uint32_t nsrc;
    uint64_t records;
    uint64_t N, G, nbatches, K;
    uint32_t Wq;
    int release;
    stk__file_id *shard_id;  /* per shard, to tell rewritten from replaced */
    uint64_t *verified_bits; /* STK_VERIFY_ONCE: one bit per record */

    unsigned nslots;
    /* batch s is in slots[slot_map[s % nslots]] from its claim to its
     * release (under mu); the slots no batch holds are a stack, the one freed
     * last on top, so that a prefetch smaller than nslots - 1 (the knob)
     * keeps reusing the same few buffers and the rest are never touched */
    unsigned *slot_map, *free_slot, nfree;
    uint64_t slot_bytes;
    int stream_copy; /* values gathered into slots with streaming stores (membuf.c; reader_open.c, plan_copy) */
    stk__slot *slots;
    stk__worker *workers;

    /* device path (upload.c); be == NULL for host batches */
    stk__backend *be;
    void *copy_stream;
    stk__dslot *dslots;
    pthread_t copier;
    int copier_started;
    uint64_t next_copy;    /* the next sequence the copy thread uploads */
    stk_transform xf;      /* the transform (o.transform points here) */
    stk_transform load_xf; /* load_crop: the crop the workers make (xf then
                              only normalises their out_h x out_w crops) */
    int load_crop;         /* the transformed field's images are cropped on
                              the workers (array fields; square ones without
                              a device) */
    int load_norm;         /* ... and normalised there too (no device) */
    int xf_sel;            /* index into sel[] of the transformed field, -1: none */
    stk__xform_job xf_job; /* its shape and constants */
    uint64_t xf_out_bytes; /* per sample */
    uint64_t boxes_off;    /* crop boxes' offset in a slot's buffer */
    char device_note[STK_ERROR_MSG_MAX];

    pthread_mutex_t mu;
    pthread_cond_t work_cv, ready_cv;
    uint64_t claim, consume, released, end_seq;
    unsigned claim_part, parts; /* batches are prepared in parts, one per thread: `parts` at open
                                   (what the direct path's buffers were planned for) */
    unsigned parts_now;         /* ... for the threads running now (stk__engine_parts) */
    unsigned parts_ahead;       /* parts a worker holds begun at once, 2..STK__PARTS_AHEAD_MAX (io_plan.c) */
    unsigned parts_first;       /* ... until the stream's first batch is consumed (plan_remote_window) */
    uint64_t first_seq;         /* the stream's first batch: 0, or where restart_at began it */
    int prefetch_auto;          /* the options left prefetch to the reader (0) */
    uint64_t slot_stride_bytes; /* bytes of selected tensor fields per record */
    uint64_t gen;               /* bumped by seek; read unlocked by workers (atomics) */
    unsigned active;
    unsigned idle; /* workers waiting for a free slot */
    int stop, pausing;
    stk_error sticky;

    /* statistics, under mu */
    double st_start, st_wait, st_busy, st_h2d;
    uint64_t st_h2d_bytes;
    uint64_t st_batches, st_samples, st_bytes, st_zero_copy, st_verified, st_ready_sum;
    uint64_t *st_src_samples, *st_src_bytes; /* [S] for a mixture */
    double *st_src_busy;
    double st_crop, st_read_wait; /* worker seconds decoding/cropping, waiting for direct reads */
    double st_last_return;        /* when next last returned a batch */
    uint64_t st_steps;            /* nexts that came STK__STEP_MIN_S or more after the last return */
    uint64_t st_faults0;          /* the process's major faults at open or the last reset */
    stk__timeline *tl;            /* trace=PATH: the timeline recorder (trace.h), NULL: off */

    /* knobs (stk__engine_set_knobs): fixed bounds from open, values under mu.
     * nworkers threads run, of which the first knob_threads claim work (the
     * rest wait on knob_cv); claims stay below released + knob_slots (<=
     * nslots); the direct queues keep at most knob_depth reads in flight
     * (<= io_depth_max, what they were made for). Batch s is in the slot it
     * took from the free stack at its claim (stk__slot_index), whatever the
     * knobs say, and its records do not depend on how many parts it is cut
     * into: the knobs change only speed. */
    unsigned nworkers, knob_threads, knob_slots, knob_depth, io_depth_max;
    pthread_cond_t knob_cv;
    /* the tuner above (tune.c), called by the consumer's next once
     * st_batches reaches tune_at (outside the lock): the engine knows
     * nothing of its policy */
    void (*tune_fn)(stk_reader *r);
    struct stk__tuner *tuner;
    uint64_t tune_at; /* under mu */
    uint64_t st_resets;
    /* load crops: worker seconds per stage (decode, resize, normalise; device.h), under mu */
    double st_stage[STK__CROP_STAGES];
};

/* Knob values: worker threads running, batches prepared ahead, direct reads
 * in flight per queue. */
typedef struct {
    unsigned threads, prefetch, io_depth;
} stk__knobs;

/* The engine's counters at one moment, for a tuner to difference: the
 * statistics' (since open or the last stk_reader_stats_reset: `resets`
 * counts those) and the CPU clocks (since the threads started). */
typedef struct {
    double t;             /* stk__now() */
    uint64_t batches;     /* returned by next */
    uint64_t bytes;       /* of the selected fields in them */
    double wait_s;        /* the consumer blocked in next */
    double busy_s;        /* worker seconds preparing parts */
    double read_wait_s;   /* worker seconds waiting for direct reads */
    double crop_s;        /* worker seconds decoding and cropping */
    double worker_cpu_s;  /* CPU time of the worker threads (pthread_getcpuclockid) */
    double process_cpu_s; /* CPU time of the whole process (CLOCK_PROCESS_CPUTIME_ID) */
    uint64_t ready_sum;   /* batches ready when next was called, summed */
    uint64_t resets;      /* stk_reader_stats_reset calls so far */
    int direct;           /* the direct path: io_depth matters */
    stk__knobs knobs;     /* in force */
    stk__knobs max;       /* their bounds, fixed at open */
} stk__engine_counters;

/* reader.c: set the knobs (each clamped to 1 .. its bound); wakes the
 * workers. Any thread; takes the reader's mutex. */
void stk__engine_set_knobs(stk_reader *r, unsigned threads, unsigned prefetch, unsigned io_depth);
/* The parts a batch is cut into for `threads` threads: one each, but tiny
 * batches stay whole. */
unsigned stk__engine_parts(const stk_reader *r, unsigned threads);
/* Every slot free (at open, and when a seek restarts the stream). */
void stk__engine_free_slots(stk_reader *r);
/* The counters now; takes the reader's mutex. */
void stk__engine_sample(stk_reader *r, stk__engine_counters *s);
/* Call r->tune_fn again once `batches` more batches were returned. */
void stk__engine_tune_after(stk_reader *r, uint64_t batches);

/* Under mu (or from the thread that claimed s, once claimed): batch s's slot. */
static inline unsigned stk__slot_index(const stk_reader *r, uint64_t s) { return r->slot_map[s % r->nslots]; }

/* A consumer that comes back for the next batch this long after the last
 * one (or later) took a step in between (stk_reader_diag.steps). */
#define STK__STEP_MIN_S 1e-3

/* fill.c: with r->fill, threads that bring the records' 2 MiB runs into the
 * page cache along the order, ahead of the workers (started at open,
 * stopped at close before the workers' maps go); bytes brought in; threads. */
int stk__fill_start(stk_reader *r, stk_error *err);
void stk__fill_stop(stk_reader *r);
void stk__fill_seek(stk_reader *r, uint64_t s);
uint64_t stk__fill_bytes(const stk_reader *r);
unsigned stk__fill_threads(const stk_reader *r);

/* reader.c: a prefetch worker's thread (arg: its stk__worker). */
void *stk__worker_main(void *arg);

/* upload.c: the device side of the slots and the copy thread. */
int stk__upload_backend(stk_reader *r, stk_error *err);
int stk__upload_open(stk_reader *r, stk_error *err);
void stk__upload_drain(stk_reader *r);
void stk__upload_close(stk_reader *r);
double stk__upload_reclaim(stk_reader *r, unsigned i, stk_error *err);
void *stk__copier_main(void *arg);
int stk__upload_acquire(stk_reader *r, unsigned i, stk_error *err);
int stk__upload_release(stk_reader *r, unsigned i, stk_error *err);

#endif
