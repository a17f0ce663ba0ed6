/*
 * stoker/reader.h - libstoker, the library trainers link.
 *
 * stk_reader streams batches from a dataset in a reproducible order with
 * prefetch threads. The format API (stoker/format.h: shards, manifests, and
 * stk_dataset, which maps a whole dataset and finds any record in O(log
 * shards)) is part of libstoker too and is included here.
 *
 * The header reads top down in the order a trainer needs it:
 *   1. the training loop: options, open, next, release, positions, save and
 *      restore, statistics, close;
 *   2. the dataset a reader reads (datasets by record index are in
 *      stoker/format.h);
 *   3. the device path: upload, the image transform, host streams;
 *   4. an advanced section for bindings, tools and tests (struct sizes, the
 *      order as a pure function), fenced by STOKER_ADVANCED_API: define it
 *      before including this header to see it.
 *
 * ABI: stk_reader_options and stk_transform (caller-allocated, read by the
 * library) grow at the end only, and their init functions and the open calls
 * are inline wrappers that hand the library sizeof of the caller's structs;
 * a newer libstoker reads only what an older caller has and defaults the
 * rest (see "ABI" in stoker/format.h). stk_reader_state and stk_reader_stats
 * (caller-allocated, written by the library) are frozen: new statistics come
 * through new calls. stk_batch, stk_batch_field and the options returned by
 * stk_reader_get_options belong to the library and grow at the end only.
 *
 * Link with `pkg-config --cflags --libs stoker`, or in CMake:
 *     find_package(stoker REQUIRED)
 *     target_link_libraries(trainer PRIVATE stoker::stoker)
 */
#ifndef STOKER_READER_H
#define STOKER_READER_H

#include "stoker/format.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct stk_reader stk_reader;
struct stk_transform;

/* ==================================================================== reader
 *
 * A reader turns a dataset into a stream of batches for one rank of a
 * (possibly distributed) training job. The stream is a pure function of the
 * dataset, the order, the seed, the global batch size (batch_size x
 * world_size) and the tail policy: spec/ORDERS.md defines it exactly, so that
 * any process, any thread count and (for the global stream) any world size
 * that divides the global batch gets the same records in the same batches.
 *
 * Persistent worker threads prepare the batches ahead into a ring of
 * `prefetch + 1` slots (the +1 is the batch the caller holds). Workers gather
 * the records of each batch into its slot, field by field, as contiguous
 * [B, ...] tensors; a sequential batch that lies inside one shard is not
 * copied at all: its view points into the mapped file (zero-copy). The stream
 * runs across epoch boundaries, so the first batches of epoch e+1 are ready
 * before epoch e ends.
 *
 * Threading: one consumer thread calls next/release/save/seek/stats at a time
 * (the reader is not for several consumers); the workers are internal.
 *
 * Memory: anonymous memory is the slots ((prefetch + 1) x batch bytes of the
 * selected tensor fields, plus B pointers per bytes field and B record
 * indices), one bit per record when verify is STK_VERIFY_ONCE, the block
 * cache when a selected field is compressed, on the direct path (see
 * "Storage") the bounce area of strides off 4 KiB or the quasi block cache,
 * and a small constant. It does
 * not grow with the dataset otherwise: orders are computed per position,
 * never stored. `memory_budget` is checked at open. Host slots of 2 MiB or
 * more are advised as transparent huge pages (MADV_HUGEPAGE; ignored where
 * THP is off): their first touch takes 512x fewer page faults.
 *
 * Compressed fields (format 1.1, codec zstd) are read by whole blocks of
 * consecutive records, decompressed once into a cache shared by the workers:
 * sequential order decompresses each block once, quasi order too when the
 * cache holds its window (the default). A shuffled read of a dataset larger
 * than the cache decompresses a whole block for nearly every record (block
 * bytes / record bytes times the work): use quasi order, or small blocks
 * (pack --block-size), for shuffled reads of compressed data.
 *
 * Errors: a checksum mismatch, a shard rewritten shorter in place since open,
 * or a failed upload surfaces at the next call of stk_reader_next as an error
 * that names the shard and record (or the batch). Errors are sticky: later
 * calls repeat it until a seek or restore. A shard deleted or replaced by
 * rename keeps being read from the file that was opened.
 * Shards must be replaced by rename, never rewritten in place: a mapped file
 * truncated in place between the reader's size check and its copy raises
 * SIGBUS, which a library cannot catch without owning the process's signals.
 *
 * Storage: records reach the slots one of two ways (opts.io). The mmap path
 * copies from the mapped shards (or, for a sequential batch inside one shard,
 * does not copy at all): the fastest path for data in the page cache, but
 * cold data arrives one page fault at a time per thread, and a dataset larger
 * than RAM pushes other memory out through the page cache (consumed pages are
 * released in sequential and quasi order, see release_pages). The direct path
 * reads the records of each part straight into the slot with O_DIRECT (no
 * page cache, no second copy), io_depth reads in flight per worker, through
 * io_uring or, where the kernel refuses it (or $STOKER_IO_ENGINE=threads), a
 * pool of pread threads; records adjacent in the file are read together,
 * and a worker queues its next part's reads before it waits for the current
 * part's. Uncompressed tensor fields use it; compressed fields read each
 * block's frame through the same queues (then decompress it into the block
 * cache); uncompressed bytes fields are read through the mapping. In quasi order with one rank, blocks are read whole
 * (per field, at the device's best size) into a cache of two windows (at
 * most 1 GiB, counted in memory_budget) and records are copied out of it.
 * STK_IO_AUTO picks direct when the selected tensor and compressed fields
 * (stored bytes) are larger than half of physical memory, or when a sample of
 * the tensor fields' pages
 * (mincore) is mostly not resident and they are larger than half of the
 * available memory (a quarter where the maps are not advised huge pages):
 * cold data within that bound goes through the page cache, which serves the
 * epochs after the first, and is read into it ahead of the workers along the
 * order (threads that fault each 2 MiB run holding a value of the reader's
 * next records into the maps, opts.io_depth of them at once), so that the
 * first epoch runs at the storage's speed, not a page fault at a time
 * (io stats: filled_bytes). With opts.read_once (an evaluation pass) cold
 * data is read directly instead, leaving the page cache to others; resident
 * data stays on the map either way. Neither changes the batches.
 * stk_reader_io_stats_get says which path and why. A failed
 * read names the shard, the records and errno; short reads, EINTR and EAGAIN
 * are retried.
 *
 * Environment: the library reads these variables at open, each time a reader
 * opens (nothing is kept between opens), and no others. A value it does not
 * know fails the open with STK_E_ARG naming the variable, where the variable
 * matters; unset, empty or "auto" leaves the choice to the library.
 *   RANK, SLURM_PROCID        opts.rank when it is < 0 (the first one set)
 *   WORLD_SIZE, SLURM_NTASKS  opts.world_size when it is < 0 (the first set)
 *   STOKER_IO=mmap|direct     opts.io when it is STK_IO_AUTO
 *   STOKER_IO_ENGINE=io_uring|threads   the direct path's engine (threads:
 *                             the pread pool even where io_uring works)
 *   STOKER_QUASI_BLOCKS=0|1   the direct path in quasi order: 0 reads record
 *                             by record, 1 in whole blocks even records of
 *                             128 KiB and more (read one by one otherwise)
 *   STOKER_MAP_HUGE=0|1       the map path: never / always advise the shard
 *                             maps huge pages (auto: when the shard files are
 *                             at most half of the memory available)
 *   STOKER_COPY=stream|cached how values are gathered into slots: streaming
 *                             stores or memcpy (auto: streams large values
 *                             into slots of 16 MiB and more)
 *   STOKER_TRACE=PATH         opts.trace when it is NULL or "": write a
 *                             timeline of the reader to PATH at close
 *   STOKER_TUNING=on|off      opts.tuning when it is STK_TUNING_AUTO
 *   LOCAL_WORLD_SIZE, SLURM_NTASKS_PER_NODE   ranks on this node (the first
 *                             set; else 1), which share its cores in the
 *                             tuner's CPU budget and its memory in the
 *                             default memory budget (tuning on)
 *   STOKER_IO_FAULT=...       for tests only: the direct engine's fault seam
 *                             ("short:N,eintr:N,eagain:N" make every Nth
 *                             completion short, EINTR or EAGAIN; "eio:S/R"
 *                             fails any read covering record R of shard S)
 * A dataset in object storage (s3://, https://) also reads STOKER_CACHE_DIR,
 * STOKER_CACHE_LIMIT and the AWS_* configuration at its open (stoker/format.h,
 * stk_dataset_open and stk_remote_options).
 * The switches are for measuring and testing; the options are the interface.
 */

typedef enum {
    STK_ORDER_SEQUENTIAL = 0, /* records in dataset order                   */
    STK_ORDER_SHUFFLE = 1,    /* a full pseudo-random permutation per epoch */
    STK_ORDER_QUASI = 2       /* shuffled blocks, mixed inside a window     */
} stk_order;

/* clang-format off */
typedef enum {
    STK_TAIL_PAD = 0,     /* the last global batch is completed by wrapping
                             around to the start of the epoch's order (as
                             PyTorch's DistributedSampler pads)             */
    STK_TAIL_DROP = 1,    /* the incomplete last global batch is dropped    */
    STK_TAIL_PARTIAL = 2, /* the last global batch is short; each rank takes
                             its slice of it, which may be short or empty:
                             PyTorch's DataLoader default for one process   */
    STK_TAIL_AUTO = 3     /* an option only, resolved at open: PAD when the
                             world size is above 1, else PARTIAL (PyTorch's
                             DistributedSampler vs a plain sampler).
                             stk_reader_get_options and the state give the
                             resolved policy                                */
} stk_tail;
/* clang-format on */

/* clang-format off */
typedef enum {
    STK_VERIFY_OFF = 0,   /* trust the bytes (shardcheck verified them)  */
    STK_VERIFY_ONCE = 1,  /* hash each record the first time this process
                             reads it (one bit per record of memory)     */
    STK_VERIFY_ALWAYS = 2 /* hash every record every time it is read     */
} stk_verify;
/* clang-format on */

/* How records reach the slots (see "Storage" below). */
/* clang-format off */
typedef enum {
    STK_IO_AUTO = 0,  /* mmap, unless the selected fields are larger than half
                         of RAM, or cold and larger than half of the
                         memory available (a quarter without huge-page
                         advice on the maps), or cold with read_once; cold
                         data on the map is read ahead along the order     */
    STK_IO_MMAP = 1,  /* copy from the mapped shards (page faults, page cache;
                         zero-copy sequential batches)                        */
    STK_IO_DIRECT = 2 /* read into the slots with asynchronous O_DIRECT reads,
                         many in flight, bypassing the page cache             */
} stk_io;
/* clang-format on */

/* Caller-allocated; fill it with stk_reader_options_init, then set fields.
 * Grows at the end only (see "ABI" above). */
/* clang-format off */
typedef struct {
    uint32_t batch_size;                   /* records per batch on this rank (>= 1)            */
    int order;                             /* stk_order                                        */
    uint64_t seed;
    int rank;                              /* < 0: $RANK, else $SLURM_PROCID, else 0           */
    int world_size;                        /* < 0: $WORLD_SIZE, else $SLURM_NTASKS, else 1     */
    unsigned threads;                      /* worker threads; 0: online CPUs, at most 8        */
    unsigned prefetch;                     /* batches prepared ahead; 0: 2 x threads, or for
                                              s3:// outside quasi blocks the deeper window of
                                              GETs plus threads, within the memory budget (the
                                              I/O reason says it)                              */
    int tail;                              /* stk_tail (STK_TAIL_AUTO: by world size)          */
    int verify;                            /* stk_verify                                       */
    const char *fields;                    /* comma-separated field names; NULL: all           */
    uint64_t memory_budget;                /* host bytes the slots may take (staging, record
                                              indices, bytes-field values; with the host
                                              backend its buffers too); 0: no limit            */
    uint64_t quasi_block_bytes;            /* quasi: block size in bytes; 0: 4 MiB             */
    uint32_t quasi_window;                 /* quasi: blocks mixed together; 0: 64              */
    int release_pages;                     /* sequential/quasi: drop consumed pages from the
                                              process (MADV_COLD + MADV_DONTNEED); -1 auto:
                                              when the dataset exceeds half of RAM; 1 on;
                                              0 off                                            */
    /* Device upload (see "the device path" below). */
    int device;                            /* stk_device; STK_DEVICE_NONE: host batches        */
    int device_index;                      /* CUDA device ordinal                              */
    int device_fallback;                   /* CUDA unavailable: 1 fall back to host batches
                                              (stats.device says which), 0 fail at open        */
    void *stream;                          /* the consumer's stream: a cudaStream_t (CUDA) or
                                              an stk_host_stream * (host backend); NULL: the
                                              default stream (CUDA) / the calling thread. It
                                              must outlive the reader (close waits on it)      */
    const struct stk_transform *transform; /* device-side image transform; NULL:
                                              none (copied for the reader's lifetime)          */
    uint64_t block_cache_bytes;            /* compressed fields: decompressed blocks kept,
                                              shared by the workers; 0: auto (the quasi
                                              window, quasi_window x quasi_block_bytes up
                                              to 1 GiB; else 4 MiB per thread + 4 MiB)         */
    int io;                                /* stk_io; STK_IO_AUTO: $STOKER_IO (auto, mmap or
                                              direct), else auto                               */
    unsigned io_depth;                     /* direct: reads in flight per worker queue (at
                                              most 1024, and io_depth x 256 KiB; a worker
                                              reads one part ahead: up to 2 x io_depth); 0: 32 */
    uint64_t epoch_size;                   /* a mixture of weighted sources: records per
                                              epoch, shared by the weights; 0: the sum of
                                              the sources' records (see "Mixtures")            */
    /* A remote dataset (path "s3://bucket/prefix" or "https://...", and a
     * mixture's sources named by such a path; see "Remote datasets"):
     * passed to stk_dataset_open_remote_sized. NULL / 0: its defaults. */
    const char *cache_dir;                 /* the node cache of fetched bytes, shared by the
                                              processes of the node                            */
    uint64_t cache_limit;                  /* bytes the cache may hold                         */
    const char *endpoint;                  /* S3 endpoint URL (else $AWS_ENDPOINT_URL, ...)    */
    const char *region;                    /* else $AWS_REGION, $AWS_DEFAULT_REGION, profile   */
    const char *profile;                   /* ~/.aws profile (else $AWS_PROFILE, "default")    */
    const char *trace;                     /* a path: record a timeline of the reader and
                                              write it there at close, as Chrome trace-event
                                              JSON (ui.perfetto.dev, chrome://tracing): each
                                              thread's stages per batch (the consumer's next
                                              and wait; a worker's begin, read wait and
                                              gather, inside it one load-time crop's decode
                                              and resize a part; the copy thread's upload)
                                              and counters
                                              (batches ready, bytes in flight). At most
                                              65536 events per thread, later ones dropped
                                              (the file's otherData says how many). Created
                                              at open (an unwritable path fails it). NULL:
                                              $STOKER_TRACE, else off (one branch per
                                              stage)                                           */
    /* Online tuning (see "Tuning" below). threads, prefetch and io_depth
     * above are where the tuner starts, unless pinned. */
    int tuning;                            /* stk_tuning; STK_TUNING_AUTO: $STOKER_TUNING
                                              (on or off), else on (off for a caller built
                                              against headers without this field)              */
    unsigned tune_pin;                     /* STK_PIN_* bits: knobs the tuner leaves at
                                              their opening value                              */
    unsigned threads_max;                  /* most worker threads the tuner may run; 0: the
                                              CPU budget rounded up (at least threads)          */
    double cpu_budget;                     /* cores the workers may keep busy; 0: measured:
                                              the cores this process may run on, shared by
                                              the ranks of the node ($LOCAL_WORLD_SIZE,
                                              $SLURM_NTASKS_PER_NODE), minus what the
                                              trainer's own threads keep busy                  */
    int read_once;                         /* 1: each record is read once (an evaluation
                                              pass): cold data is read directly, not kept
                                              in the page cache for later epochs; 0: auto
                                              (cold data that fits is read into the page
                                              cache ahead of the workers)                   */
} stk_reader_options;
/* clang-format on */

/* Fill opts with the defaults above (batch_size 1, sequential, seed 0,
 * rank/world from the environment, pad tail, verify off). */
static inline void stk_reader_options_init(stk_reader_options *opts);

/* One field of a batch. */
/* clang-format off */
typedef struct {
    const char *name;
    int kind;                /* stk_kind                                        */
    int dtype;               /* stk_dtype (u8 for bytes fields)                 */
    unsigned ndim;           /* 1 + the field's ndim: shape[0] is the batch     */
    uint64_t shape[STK_MAX_DIMS + 1];
    const void *data;        /* tensors: shape[0] records, contiguous, C order;
                                NULL for bytes fields                           */
    const stk_value *values; /* bytes and array fields: shape[0] values pointing
                                into the mapping; NULL for tensors              */
    uint64_t nbytes;         /* bytes at data (tensors), sum of sizes (bytes)   */
    int zero_copy;           /* 1: data points into the mapped shard            */
} stk_batch_field;
/* clang-format on */

/* clang-format off */
typedef struct {
    uint64_t epoch;                 /* epoch this batch belongs to                    */
    uint64_t index;                 /* batch index within the epoch (0-based)         */
    uint32_t size;                  /* records in this batch (< batch_size only for a
                                       STK_TAIL_PARTIAL tail)                         */
    const uint64_t *records;        /* global record index of each of them            */
    unsigned nfields;
    const stk_batch_field *fields;  /* the selected fields, in schema order           */
    int on_device;                  /* tensors' data are device pointers (CUDA) or the
                                       host backend's buffers; bytes fields stay on
                                       the host                                       */
    void *event;                    /* device path: the event the batch is ready at
                                       (cudaEvent_t); next has already made the
                                       consumer's stream wait for it                  */
    const uint32_t *sources;        /* a mixture: the source of each record (its
                                       index in the sources given at open); NULL for
                                       one dataset                                    */
    const uint64_t *source_records; /* a mixture: each record's index inside its
                                       source (records[i] is that plus the records
                                       of the sources before it); NULL for one
                                       dataset                                        */
} stk_batch;
/* clang-format on */

/* Open `path` (a dataset directory or its manifest) and start the workers at
 * epoch 0, batch 0. Fails with STK_E_ARG on bad options (naming the option),
 * including slots that do not fit the memory budget. opts may be NULL
 * (defaults). */
static inline stk_reader *stk_reader_open(const char *path, const stk_reader_options *opts, stk_error *err);
/* The same over an open dataset, which must outlive the reader. On the map
 * path the reader may advise the dataset's shard maps huge pages
 * (stk_shard_advise_huge); the advice stays with the maps after it closes. */
static inline stk_reader *stk_reader_open_dataset(const stk_dataset *ds, const stk_reader_options *opts,
                                                  stk_error *err);

/* ------------------------------------------------------------------ mixtures
 *
 * Several datasets read as one stream (spec/ORDERS.md, "Mixtures"). Each
 * source gives a number of records every epoch, set by one of:
 *   weight: its share of the epoch's records (all sources weighted, or none;
 *           the epoch then has opts.epoch_size records, or the sum of the
 *           sources' records when 0);
 *   repeat: passes over the source per epoch (2: every record twice; 0.5:
 *           half of it, the other half next epoch in sequential order, a
 *           new random half each epoch in shuffled ones);
 *   choose: a fixed number of records per epoch.
 * The epoch is the sum. Each source reads in its own order (order, or
 * opts.order) with its own seed derived from opts.seed, and the sources are
 * interleaved so that every stretch of the stream, hence every global batch,
 * carries each source in proportion (within (S + 1) / 2 records). Batches,
 * ranks, tails, seek and save/restore then work as for one dataset of that
 * many records; records[] indexes the sources concatenated, and sources[] /
 * source_records[] say which source and which of its records.
 *
 * The selected fields must be the same in every source: name, kind, dtype,
 * shape and codec, at the same place in the schema (open names the source
 * and field that differ). A mixture never returns zero-copy batches, and
 * the quasi order's whole-block reads of the direct path are off. */
typedef enum { STK_MIX_WEIGHT = 1, STK_MIX_REPEAT = 2, STK_MIX_CHOOSE = 3 } stk_mix_kind;

/* One source. Caller-allocated; fill it with stk_source_init. Grows at the
 * end only. */
/* clang-format off */
typedef struct {
    const char *path;           /* a dataset directory or its manifest, or NULL    */
    const stk_dataset *dataset; /* ... an open dataset instead (path NULL); it must
                                   outlive the reader                              */
    int kind;                   /* stk_mix_kind                                    */
    double value;               /* the weight (> 0), repeat (>= 0) or number of
                                   records (a whole number)                        */
    int order;                  /* stk_order of this source; -1: opts.order        */
} stk_source;
/* clang-format on */

/* Defaults: no path, weight 1, the reader's order. */
static inline void stk_source_init(stk_source *s);
/* Open a mixture of n sources (1 to 64); opts as for stk_reader_open. */
static inline stk_reader *stk_reader_open_mix(const stk_source *sources, unsigned n,
                                              const stk_reader_options *opts, stk_error *err);

/* The next batch of this rank's stream, blocking until it is ready. Releases
 * the batch returned before. The view is valid until stk_reader_release, the
 * next call of next, seek/restore, or close. Returns NULL at the end of the
 * stream (err->code == STK_OK; only when epochs is limited by
 * stk_reader_set_epochs) or on error (err->code != STK_OK). */
STK_API const stk_batch *stk_reader_next(stk_reader *r, stk_error *err);
/* Array fields (kind STK_KIND_ARRAY, spec/FORMAT.md 4.13): the per-record
 * shapes of b->fields[field]. Record j's shape is the ndim - 1 u64 at
 * result + j x (ndim - 1) (the field's shape[1..] shows 0 for the per-record
 * dims); its value, elements in C order or a JPEG stream, is values[j].
 * NULL for other fields. Valid as long as the batch. */
STK_API const uint64_t *stk_batch_shapes(const stk_batch *b, unsigned field);
/* Hand the current batch's slot back early (optional). */
STK_API void stk_reader_release(stk_reader *r);

/* End the stream after `epochs` epochs (0: endless, the default). */
STK_API void stk_reader_set_epochs(stk_reader *r, uint64_t epochs);
/* Batches per epoch on every rank (the same on all ranks). */
STK_API uint64_t stk_reader_batches_per_epoch(const stk_reader *r);
/* Epoch and batch index of the batch the next call of next returns. */
STK_API void stk_reader_position(const stk_reader *r, uint64_t *epoch, uint64_t *batch);
/* Jump: the next batch will be `batch` of `epoch` (set_epoch in PyTorch terms
 * is seek(e, 0)). Releases the batch held, discards prepared batches and
 * clears a sticky error. Positions stay below 2^63 batches. */
STK_API int stk_reader_seek(stk_reader *r, uint64_t epoch, uint64_t batch, stk_error *err);

/* Saved position of a reader: a few integers (spec/ORDERS.md, "State"). The
 * next batch after a restore is `batch` of `epoch`. A state restores into a
 * reader of the same dataset (fingerprint), order, seed, global batch size,
 * tail and quasi parameters; rank and world size may differ. Frozen: the
 * library writes it whole into the caller's struct. */
typedef struct {
    uint64_t fingerprint;
    int order;
    uint64_t seed;
    uint64_t global_batch; /* batch_size x world_size */
    int tail;
    uint64_t quasi_block_records;
    uint32_t quasi_window;
    uint64_t epoch;
    uint64_t batch; /* next batch within the epoch */
} stk_reader_state;

/* Save the position (what next would return next) / restore it, checking that
 * the state belongs to this dataset and stream (STK_E_ARG otherwise, naming
 * the field that differs). */
STK_API void stk_reader_save(const stk_reader *r, stk_reader_state *st);
STK_API int stk_reader_restore(stk_reader *r, const stk_reader_state *st, stk_error *err);
/* State as one line of JSON (NUL-terminated, no newline) / parsed back.
 * format returns the length written, or what it needs when cap is too small. */
STK_API size_t stk_reader_state_format(const stk_reader_state *st, char *buf, size_t cap);
STK_API int stk_reader_state_parse(const char *text, size_t len, stk_reader_state *st, stk_error *err);

/* A reader's position as one line of JSON, like stk_reader_state_format
 * for one dataset; a mixture's (version 2) also names each source
 * (fingerprint, records, kind, value, order) and the epoch size. Returns the
 * length written, or what it needs when cap is too small. */
STK_API size_t stk_reader_save_text(const stk_reader *r, char *buf, size_t cap);
/* Restore a state of stk_reader_save_text (or stk_reader_state_format).
 * A mixture's state restores only into a mixture of the same sources, in
 * the same order, with the same kinds, values, orders and epoch size: the
 * error names the source and what differs. With STK_RESTORE_REWEIGHT the
 * sources must still be the same datasets but their kinds, values, orders
 * and the epoch size may differ: the reader goes on at the saved epoch and
 * batch of the new mixture (at the next epoch's start when the new epoch is
 * shorter); the rest of that epoch follows the new weights, so a record
 * given earlier in the epoch may come again (re-weight at an epoch's start
 * to avoid it). */
#define STK_RESTORE_REWEIGHT 1u
STK_API int stk_reader_restore_text(stk_reader *r, const char *text, size_t len, unsigned flags,
                                    stk_error *err);

/* Frozen: the library writes it whole into the caller's struct; new
 * statistics come through new calls. */
/* clang-format off */
typedef struct {
    uint64_t batches;   /* batches returned by next                       */
    uint64_t samples;   /* records in them                                */
    uint64_t bytes;     /* bytes of the selected fields in them           */
    uint64_t zero_copy_batches;
    uint64_t verified;  /* record values hashed and found good            */
    double wall_s;      /* since the first next (or the last stats reset) */
    double wait_s;      /* time the caller spent blocked in next          */
    double busy_s;      /* worker time spent preparing batches, summed    */
    double mean_ready;  /* batches ready when next was called, averaged   */
    unsigned threads;
    unsigned prefetch;
    int device;         /* the device path in use (after any fallback)    */
    double h2d_s;       /* device path: time the copy engine spent on
                           uploads (of batches whose slot was reused)     */
    uint64_t h2d_bytes; /* bytes uploaded                                 */
} stk_reader_stats;
/* clang-format on */

/* ------------------------------------------------------------------ tuning
 *
 * With tuning on (the default), a tuner above the engine turns three knobs
 * while the consumer runs: the worker threads running (1 .. threads_max),
 * the batches prepared ahead (1 .. what the memory budget allows, at most
 * 256; not on the device path, whose slots are pinned staging memory) and
 * the direct path's reads in flight per worker (1 .. 4 x io_depth, at most
 * 1024). It runs on the consumer's thread in stk_reader_next, reads the
 * reader's own counters every period (consumer wait against wall time,
 * worker busy time and CPU time, read waits, the rest of the process's CPU),
 * climbs one knob at a time,
 * keeps a change only when it paid, and doubles the period while nothing
 * changes; a change of the consumer's step time starts it over. It never
 * changes the batches (the same records in the same order: only who
 * prepares them and how far ahead). The worker CPU it uses stays within
 * opts.cpu_budget, the slots within opts.memory_budget (0 there, with tuning
 * on: STK_TUNE_MEMORY_DEFAULT, see reader_open.c: the lesser of 1/8 of
 * MemAvailable per rank of the node and 4 GiB, or what the opening prefetch
 * needs if more). The slots are allocated for the deepest prefetch the
 * budget allows but only as many as the prefetch in use are touched. Pinned
 * knobs and STK_TUNING_OFF keep the values given at open. */
typedef enum {
    STK_TUNING_AUTO = 0, /* $STOKER_TUNING=on|off, else on */
    STK_TUNING_ON = 1,
    STK_TUNING_OFF = 2
} stk_tuning;
enum {
    STK_PIN_THREADS = 1u << 0,
    STK_PIN_PREFETCH = 1u << 1,
    STK_PIN_IO_DEPTH = 1u << 2,
    STK_PIN_IO = 1u << 3 /* the io mode (cold-data switching, see "the read path") */
};
/* The tuner's state: where the knobs are, their bounds, and the change log.
 * Written by the library; grows at the end only. */
/* clang-format off */
typedef struct {
    int on;                         /* 1: tuning (0: off or every knob pinned)        */
    unsigned threads, prefetch, io_depth;             /* now                         */
    unsigned threads_max, prefetch_max, io_depth_max; /* their bounds                */
    double cpu_budget;              /* cores the workers may keep busy (as resolved)  */
    double trainer_cpu;             /* cores the rest of the process kept busy, last
                                       period                                         */
    uint64_t memory_budget;         /* bytes the slots may take (as resolved)         */
    uint64_t decisions;             /* periods evaluated                              */
    uint64_t changes;               /* knob changes made (the log's length, counting
                                       those that fell out of it)                     */
    uint64_t period;                /* batches between decisions now                  */
    int settled;                    /* 1: no change in the last two periods           */
} stk_reader_tune_stats;
/* One change of the log: at which batch (counted since open), the knobs
 * after it, and why ("wait 31% of wall, workers 97% busy: threads 2 -> 3"). */
typedef struct {
    uint64_t batch;
    double t_s;                     /* seconds since open                             */
    unsigned threads, prefetch, io_depth;
    char reason[120];
} stk_reader_tune_event;
/* clang-format on */
STK_API void stk_reader_tune_stats_get_sized(const stk_reader *r, stk_reader_tune_stats *s, size_t size);
/* Copies up to cap of the latest changes (oldest first) into ev; returns how
 * many it copied. The reader keeps the last 256. */
STK_API size_t stk_reader_tune_log_sized(const stk_reader *r, stk_reader_tune_event *ev, size_t cap,
                                         size_t size);
static inline void stk_reader_tune_stats_get(const stk_reader *r, stk_reader_tune_stats *s)
{
    stk_reader_tune_stats_get_sized(r, s, sizeof *s);
}
static inline size_t stk_reader_tune_log(const stk_reader *r, stk_reader_tune_event *ev, size_t cap)
{
    return stk_reader_tune_log_sized(r, ev, cap, sizeof *ev);
}

/* Statistics since open or the last reset. Cheap: a few clock reads per batch. */
STK_API void stk_reader_stats_get(const stk_reader *r, stk_reader_stats *s);
STK_API void stk_reader_stats_reset(stk_reader *r);

/* How the records are read: the path chosen, why, and the direct path's
 * counters (since open). Written by the library; grows at the end only. */
typedef enum {
    STK_IO_ENGINE_NONE = 0,
    STK_IO_ENGINE_URING = 1,
    STK_IO_ENGINE_THREADS = 2,
    STK_IO_ENGINE_REMOTE = 3 /* range GETs of a remote dataset (a mixture's local
                                sources still read through io_uring or threads) */
} stk_io_engine;
/* clang-format off */
typedef struct {
    int io;                         /* STK_IO_MMAP or STK_IO_DIRECT                 */
    int engine;                     /* stk_io_engine (NONE on the mmap path)        */
    unsigned depth;                 /* reads in flight per worker                   */
    uint64_t reads;                 /* direct reads completed                       */
    uint64_t bytes;                 /* bytes they delivered                         */
    uint64_t retries;               /* short reads, EINTR, EAGAIN resubmitted       */
    uint64_t bounced_bytes;         /* read through the alignment bounce area       */
    uint64_t map_reads;             /* runs copied from the mapping instead (a shard
                                       replaced or deleted since open)              */
    unsigned buffered_files;        /* shard files the file system opened without
                                       O_DIRECT (read through the page cache)       */
    uint64_t quasi_blocks;          /* quasi order: blocks read whole               */
    char reason[STK_ERROR_MSG_MAX]; /* why this path, and any fallback              */
    uint64_t filled_bytes;          /* the map path, cold data that fits: bytes read
                                       into the page cache ahead of the workers
                                       along the order (see STK_IO_AUTO)             */
    int read_once;                  /* opts.read_once as taken (1: no cache fill)    */
} stk_reader_io_stats;
/* clang-format on */
static inline void stk_reader_io_stats_get(const stk_reader *r, stk_reader_io_stats *s);
/* Remote datasets: a dataset (or a mixture's source) named "s3://bucket/
 * prefix" or "https://host/path" is read by range GETs (always the direct
 * path, never zero-copy), planned from the order: each worker fetches the
 * records of the part it prepares next while it finishes the current one,
 * adjacent records in one GET, many GETs in flight. What arrives is checked
 * against the shard's checksums (a mismatch is fetched once more, then fails
 * naming shard, field and record) and offered to the node cache
 * (opts.cache_dir, opts.cache_limit), which the processes of a node share;
 * records the cache holds are read from it, checked, and not fetched.
 * Counters since open. Written by the library; grows at the end only. */
/* clang-format off */
typedef struct {
    int remote;                     /* 1: the reader has remote shards (else all 0)  */
    uint64_t requests;              /* HTTP requests completed, retries included (the
                                       dataset's open and the format library's own
                                       fetches of bytes fields included)             */
    uint64_t bytes_fetched;         /* response body bytes received                  */
    uint64_t retries;               /* requests repeated, all causes                 */
    uint64_t retries_5xx;           /* of which 500, 502, 503 (SlowDown), 504        */
    uint64_t retries_network;       /* of which resets, timeouts, short bodies, stalls */
    uint64_t failures;              /* requests that failed for good                 */
    uint64_t gets;                  /* range GETs of record bytes the reader issued  */
    uint64_t get_bytes;             /* their bytes                                   */
    uint64_t cache_hits;            /* values (or compressed blocks) read from the
                                       node cache instead                            */
    uint64_t cache_hit_bytes;
    uint64_t cache_stored_bytes;    /* fetched bytes the cache kept                  */
    uint64_t cache_rejected_bytes;  /* fetched bytes it did not keep (its limit)     */
    uint64_t checksum_refetches;    /* GETs repeated after a checksum mismatch       */
    uint64_t inflight_max;          /* most requests in flight at once               */
} stk_reader_remote_stats;
/* clang-format on */
static inline void stk_reader_remote_stats_get(const stk_reader *r, stk_reader_remote_stats *s);

/* Per source of a mixture (one dataset: one source, weight 1), since open
 * or the last stats reset. Written by the library; grows at the end only. */
typedef struct {
    uint64_t records;   /* records of the source                          */
    uint64_t per_epoch; /* records it gives every epoch                   */
    uint64_t samples;   /* of its records in batches returned by next     */
    uint64_t bytes;     /* bytes of the selected fields in them           */
    double busy_s;      /* worker time preparing them: the gather of its
                           records timed (records of 4 KiB or more, bytes
                           fields, compressed fields, crops), the rest of
                           each batch's time shared by bytes              */
} stk_reader_source_stats;
/* The number of sources (1 for one dataset). */
STK_API unsigned stk_reader_sources(const stk_reader *r);
/* Source s's path as given at open ("" for an open dataset), or NULL. */
STK_API const char *stk_reader_source_path(const stk_reader *r, unsigned s);
/* STK_E_ARG when s is not a source. */
static inline int stk_reader_source_stats_get(const stk_reader *r, unsigned s, stk_reader_source_stats *st,
                                              stk_error *err);

/* A mixture's part of the verdict, one line: each source's share of the
 * samples and of the workers' time, and the costliest per sample, e.g.
 * "sources: curated 70% of samples, 52% of worker time; web 30%, 48%
 * (costliest per sample: web, 2.2x curated)"; "" for one dataset. Returns
 * the length like snprintf. */
STK_API int stk_reader_verdict_sources(const stk_reader *r, char *buf, size_t cap);
/* One line: "input-bound: 37% of wall time spent waiting for data (threads=2;
 * try 4)" or "not input-bound: ...". Returns the length like snprintf. */
STK_API int stk_reader_verdict(const stk_reader_stats *s, char *buf, size_t cap);

/* What the verdict of stk_reader_diagnose reads: the statistics and what
 * tells the loader's limits apart. Written by the library; grows at the end
 * only. */
/* clang-format off */
typedef struct {
    stk_reader_stats stats;  /* as stk_reader_stats_get                       */
    uint64_t steps;          /* batches the consumer asked for 1 ms or more
                                after the last one was returned: the steps of a
                                trainer (0: a bare read loop, a Python one too:
                                its per-batch work stays well under 1 ms)     */
    double crop_s;           /* worker seconds decoding and cropping images on
                                the workers (load-time crops), summed         */
    double read_wait_s;      /* direct path: worker seconds waiting for reads,
                                summed                                        */
    uint64_t major_faults;   /* the process's major page faults (data read from
                                storage through the maps)                     */
    int io;                  /* STK_IO_MMAP or STK_IO_DIRECT                  */
    unsigned cpus;           /* online CPUs                                   */
    /* the load-time crop's stages, worker seconds summed (crop_s is about
       decode_s + resize_s):                                                  */
    double decode_s;         /* JPEG decoding: entropy decoding, IDCT,
                                upsampling and colour conversion of the
                                region a crop needs                           */
    double resize_s;         /* the resize to the output, flip included (one
                                pass), of every load-time crop, raw or JPEG   */
    double normalise_s;      /* the workers' normalising to f32/f16/bf16 after
                                the crop (no device transform)                */
} stk_reader_diag;
/* clang-format on */
/* Since open or the last stats reset. */
STK_API void stk_reader_diag_get_sized(const stk_reader *r, stk_reader_diag *d, size_t size);
/* The verdict that says what the numbers show, one line each (separated by
 * '\n', no final newline):
 *   "loader: ..."    throughput, and the workers' time;
 *   "workers: ..."   their time split: decode/crop (and within it the JPEG
 *                    decode and the resize), normalise, waiting for reads,
 *                    copy;
 *   "trainer: ..."   with steps, whether it waited for data (input-bound at
 *                    10% of the wall time or more); without any, "no training
 *                    step recorded": no verdict about a trainer;
 *   "bound by: ..."  what limits the loader, when the trainer waited or
 *                    there was none: CPU on the workers (decode/crop or copy),
 *                    storage, memory bandwidth, or the consumer itself.
 * Deterministic: a function of *d alone (tests feed it made-up numbers).
 * Returns the length like snprintf. */
STK_API int stk_reader_diagnose_sized(const stk_reader_diag *d, size_t size, char *buf, size_t cap);
static inline void stk_reader_diag_get(const stk_reader *r, stk_reader_diag *d)
{
    stk_reader_diag_get_sized(r, d, sizeof *d);
}
static inline int stk_reader_diagnose(const stk_reader_diag *d, char *buf, size_t cap)
{
    return stk_reader_diagnose_sized(d, sizeof *d, buf, cap);
}

/* The statistics (stk_reader_diag_get, stk_reader_io_stats_get) as
 * Prometheus text exposition (format 0.0.4): # HELP and # TYPE lines, names
 * prefixed stoker_, counters ending _total (since open or the last stats
 * reset: a reset reads as a counter reset), gauges. Returns the length like
 * snprintf (what it needs when cap is too small). */
STK_API int stk_reader_metrics(const stk_reader *r, char *buf, size_t cap);

/* The options in force after defaults and the environment were applied
 * (rank, world size, threads, prefetch, device after a fallback). Owned by
 * the reader; valid until close. */
STK_API const stk_reader_options *stk_reader_get_options(const stk_reader *r);

/* Stop the workers (waiting for no more than the batch each is preparing)
 * and free everything. NULL is a no-op. */
STK_API void stk_reader_close(stk_reader *r);

/* ================================================================== datasets */

/* The dataset a reader reads (its own for stk_reader_open). Datasets by
 * record index (stk_dataset_open, stk_dataset_value, ...) are in
 * stoker/format.h, with the rest of the stk_dataset_ calls. */
STK_API const stk_dataset *stk_reader_dataset(const stk_reader *r);

/* ============================================================ the device path
 *
 * With opts.device set, workers gather each batch into a staging slot (pinned
 * memory for CUDA, allocated once), a copy thread issues the upload of each
 * slot on its own stream into a ring of device buffers (then the transform,
 * if any) and records an event per batch. next() makes the consumer's stream
 * (opts.stream) wait for that event: the CPU never blocks on a copy. When the
 * batch is released (the next call of next, or stk_reader_release), an event
 * is recorded on the consumer's stream, and the copy stream waits for it
 * before it overwrites that device buffer: a buffer is reused only after the
 * consumer's work queued before the release has finished with it (release
 * points: next, stk_reader_release, seek/restore, close). A staging
 * slot is refilled only after its upload completed. Every batch is staged on
 * this path (no zero-copy): the upload reads pinned memory.
 *
 * The host backend runs exactly this protocol with a host stream (a thread
 * that runs queued copies, event records/waits and functions in order). A
 * CPU consumer can pass its own stk_host_stream and queue work on it. */

typedef enum {
    STK_DEVICE_NONE = 0, /* batches in host memory (zero-copy where possible) */
    STK_DEVICE_HOST = 1, /* the host backend: the device protocol (staging
                             slots, a copy stream, events, the transform) run
                             against ordinary memory and threads: for tests,
                             and for CPU training that wants the transform   */
    STK_DEVICE_CUDA = 2  /* pinned staging slots, cudaMemcpyAsync on a copy
                             stream, device buffers, events                   */
} stk_device;

typedef enum { STK_IMAGE_NCHW = 0, STK_IMAGE_NHWC = 1 } stk_image_layout;
typedef enum {
    STK_CROP_NONE = 0,          /* the whole image, resized to out size      */
    STK_CROP_CENTER = 1,        /* the central out_height x out_width        */
    STK_CROP_RANDOM_RESIZED = 2 /* torchvision's RandomResizedCrop            */
} stk_crop;

/* A per-sample image transform on the device, in one kernel: u8 HWC in,
 * `dtype` out in `layout`, (x / 255 - mean[c]) / std[c] (u8 out: the
 * resampled pixel rounded, mean and std not applied), with a crop resized
 * bilinearly to out_height x out_width and an optional horizontal flip. Crop
 * boxes and flips are chosen on the CPU from (seed, epoch, record), so a run
 * reproduces whatever the threads, ranks or device. Caller-allocated; fill it
 * with stk_transform_init or stk_transform_imagenet. Grows at the end only. */
/* clang-format off */
typedef struct stk_transform {
    const char *field;              /* a u8 [H, W, C] field (C <= 4); NULL: "image"   */
    int dtype;                      /* STK_DT_F32, STK_DT_F16, STK_DT_BF16, STK_DT_U8 */
    int layout;                     /* stk_image_layout                               */
    float mean[4], std[4];          /* per channel, in [0, 1] units (torchvision)     */
    int crop;                       /* stk_crop                                       */
    uint32_t out_height, out_width; /* 0: the input's size                            */
    float scale_min, scale_max;     /* random-resized: area fraction of the image     */
    float ratio_min, ratio_max;     /* random-resized: aspect ratio range             */
    float flip_prob;                /* horizontal flip probability                    */
} stk_transform;
/* clang-format on */

/* Defaults: the whole image as f32 NCHW, mean 0 and std 1 (x / 255), no crop
 * or flip, torchvision's RandomResizedCrop ranges. */
static inline void stk_transform_init(stk_transform *t);
/* torchvision's ImageNet recipe: train = RandomResizedCrop(size, (0.08, 1),
 * (3/4, 4/3)) + RandomHorizontalFlip + Normalize; eval = CenterCrop(size) +
 * Normalize. f32, NCHW, ImageNet mean and std. */
static inline void stk_transform_imagenet(stk_transform *t, int train, uint32_t size);

/* Where a transform crops a record: the box of the image as stored (after
 * pack's resize, if any) that becomes the out_height x out_width output, and
 * whether the output is mirrored. Detection boxes and keypoints move with
 * the crop through it: a point (x, y) of the stored image, in pixel edges
 * ((0, 0) is the top-left corner of the top-left pixel, (W, H) the
 * bottom-right corner of the image), lands at
 *     u = (x - x0) * out_width / w,   v = (y - y0) * out_height / h
 * of the output, then u becomes out_width - u when flip is 1; what lies
 * outside [x0, x0 + w) x [y0, y0 + h) is cut off. The box is the one the
 * reader resamples: RandomResizedCrop's integer box (what torchvision's
 * resized_crop(img, y0, x0, h, w, size) then hflip makes of a full decode);
 * for the eval crop of images of their own size, Resize(round(S / 0.875))
 * + CenterCrop(S), the source region its window covers (fractional edges);
 * the central out_height x out_width of a fixed-shape field; the whole
 * image without a crop. Written by the library; grows at the end only. */
/* clang-format off */
typedef struct stk_crop_box {
    double x0, y0;                  /* the box's top-left corner, in stored pixels    */
    double w, h;                    /* its width and height                           */
    int flip;                       /* 1: the output is mirrored left to right        */
} stk_crop_box;
/* clang-format on */

/* The crop box and flip of global record `record` (batch->records[i]; a
 * mixture's index in its sources concatenated) in epoch `epoch`
 * (batch->epoch), from an image of height x width stored pixels: exactly
 * the box the reader crops it by, on the worker threads or the device, a
 * pure function of the reader's transform and seed (so it may be asked
 * before, during or after the batch). height and width 0: the record's stored shape, read from
 * the dataset (an array field's per-record shape, a fixed-shape field's
 * own). STK_E_ARG when the reader has no transform or one side is 0 and
 * the other is not, STK_E_RANGE for a record past the dataset's end. */
STK_API int stk_reader_crop_box_sized(const stk_reader *r, uint64_t epoch, uint64_t record, uint32_t height,
                                      uint32_t width, stk_crop_box *box, size_t box_size, stk_error *err);
/* The same without a reader: for transform t (as given to the reader) and
 * the reader's seed (opts.seed): own_size 1 for a field of images of their own size
 * (u8[*,*,3], raw or JPEG: the eval crop is Resize + CenterCrop, and the
 * output size must be given), 0 for a fixed-shape [H, W, C] field (the eval
 * crop is the central out_height x out_width; output sides of 0 are the
 * image's). STK_E_ARG for a transform the reader would refuse, or a side
 * outside 1 .. 65535. */
STK_API int stk_transform_crop_box_sized(const stk_transform *t, size_t transform_size, int own_size,
                                         uint64_t seed, uint64_t epoch, uint64_t record, uint32_t height,
                                         uint32_t width, stk_crop_box *box, size_t box_size, stk_error *err);
static inline int stk_reader_crop_box(const stk_reader *r, uint64_t epoch, uint64_t record, uint32_t height,
                                      uint32_t width, stk_crop_box *box, stk_error *err)
{
    return stk_reader_crop_box_sized(r, epoch, record, height, width, box, sizeof *box, err);
}
static inline int stk_transform_crop_box(const stk_transform *t, int own_size, uint64_t seed, uint64_t epoch,
                                         uint64_t record, uint32_t height, uint32_t width, stk_crop_box *box,
                                         stk_error *err)
{
    return stk_transform_crop_box_sized(t, sizeof *t, own_size, seed, epoch, record, height, width, box,
                                        sizeof *box, err);
}

/* Block the calling thread until the batch last returned by next is ready
 * on the device (its upload and transform finished). For benchmarks and
 * tools; a trainer lets its stream wait instead. A no-op for host batches. */
STK_API int stk_reader_synchronize(stk_reader *r, stk_error *err);

/* Why the device path is not what opts.device asked for (a CUDA fallback),
 * or "" when it is. */
STK_API const char *stk_reader_device_note(const stk_reader *r);

/* 1 when this build has the CUDA backend and a device is usable; otherwise 0
 * with the reason in err (e.g. "no CUDA device: ..."). */
STK_API int stk_cuda_available(stk_error *err);

/* Host streams (the host backend's stand-in for a CUDA stream). */
typedef struct stk_host_stream stk_host_stream;
STK_API stk_host_stream *stk_host_stream_create(stk_error *err);
/* Run everything queued, then free. NULL is a no-op. */
STK_API void stk_host_stream_destroy(stk_host_stream *s);
/* Queue fn(arg) to run on the stream's thread after what is queued before. */
STK_API int stk_host_stream_launch(stk_host_stream *s, void (*fn)(void *), void *arg, stk_error *err);
/* Block until everything queued so far has run. */
STK_API void stk_host_stream_synchronize(stk_host_stream *s);

/* ======================================================= the sized entry points
 *
 * What the inline calls above compile to: each takes sizeof of the caller's
 * stk_reader_options / stk_transform, so the library reads (or, for the init
 * calls, writes) only that many bytes and defaults fields the caller's header
 * did not have. A size below the first release's is refused (STK_E_ARG), as
 * is a larger one whose extra bytes are not all zero (a caller built against
 * a newer stoker that sets fields this library lacks). Bindings that mirror
 * the structs call these with their mirror's size. */
STK_API void stk_reader_options_init_sized(stk_reader_options *opts, size_t size);
STK_API stk_reader *stk_reader_open_sized(const char *path, const stk_reader_options *opts, size_t size,
                                          size_t transform_size, stk_error *err);
STK_API stk_reader *stk_reader_open_dataset_sized(const stk_dataset *ds, const stk_reader_options *opts,
                                                  size_t size, size_t transform_size, stk_error *err);
STK_API void stk_transform_init_sized(stk_transform *t, size_t size);
STK_API void stk_reader_io_stats_get_sized(const stk_reader *r, stk_reader_io_stats *s, size_t size);
STK_API void stk_transform_imagenet_sized(stk_transform *t, size_t size, int train, uint32_t out_size);
STK_API void stk_source_init_sized(stk_source *s, size_t size);
STK_API stk_reader *stk_reader_open_mix_sized(const stk_source *sources, unsigned n, size_t source_size,
                                              const stk_reader_options *opts, size_t size,
                                              size_t transform_size, stk_error *err);
STK_API int stk_reader_source_stats_get_sized(const stk_reader *r, unsigned s, stk_reader_source_stats *st,
                                              size_t size, stk_error *err);
STK_API void stk_reader_remote_stats_get_sized(const stk_reader *r, stk_reader_remote_stats *s, size_t size);

static inline void stk_reader_options_init(stk_reader_options *opts)
{
    stk_reader_options_init_sized(opts, sizeof *opts);
}
static inline stk_reader *stk_reader_open(const char *path, const stk_reader_options *opts, stk_error *err)
{
    return stk_reader_open_sized(path, opts, sizeof *opts, sizeof(stk_transform), err);
}
static inline stk_reader *stk_reader_open_dataset(const stk_dataset *ds, const stk_reader_options *opts,
                                                  stk_error *err)
{
    return stk_reader_open_dataset_sized(ds, opts, sizeof *opts, sizeof(stk_transform), err);
}
static inline void stk_transform_init(stk_transform *t) { stk_transform_init_sized(t, sizeof *t); }
static inline void stk_reader_io_stats_get(const stk_reader *r, stk_reader_io_stats *s)
{
    stk_reader_io_stats_get_sized(r, s, sizeof *s);
}
static inline void stk_reader_remote_stats_get(const stk_reader *r, stk_reader_remote_stats *s)
{
    stk_reader_remote_stats_get_sized(r, s, sizeof *s);
}
static inline void stk_transform_imagenet(stk_transform *t, int train, uint32_t size)
{
    stk_transform_imagenet_sized(t, sizeof *t, train, size);
}
static inline void stk_source_init(stk_source *s) { stk_source_init_sized(s, sizeof *s); }
static inline stk_reader *stk_reader_open_mix(const stk_source *sources, unsigned n,
                                              const stk_reader_options *opts, stk_error *err)
{
    return stk_reader_open_mix_sized(sources, n, sizeof *sources, opts, sizeof *opts, sizeof(stk_transform),
                                     err);
}
static inline int stk_reader_source_stats_get(const stk_reader *r, unsigned s, stk_reader_source_stats *st,
                                              stk_error *err)
{
    return stk_reader_source_stats_get_sized(r, s, st, sizeof *st, err);
}

#ifdef STOKER_ADVANCED_API
/* ==================================================================== advanced
 *
 * For bindings, tools and tests: struct sizes, the order as pure functions,
 * the reader's derived parameters. Define STOKER_ADVANCED_API to see it.
 * Exported like the rest, but tied to how the reader works inside. */

/* sizeof of a public struct by name ("stk_reader_options", "stk_batch",
 * "stk_batch_field", "stk_reader_state", "stk_reader_stats",
 * "stk_reader_io_stats", "stk_transform",
 * "stk_error", "stk_value", "stk_dataset_options", "stk_source",
 * "stk_reader_source_stats", "stk_reader_remote_stats", "stk_crop_box"), 0 for another name: lets
 * bindings that mirror these structs (python/stoker) check them against the
 * library they load. */
STK_API size_t stk_reader_sizeof(const char *type);

/* The order itself, as pure functions (spec/ORDERS.md), for tools and tests:
 * the global record at position p (0 <= p < records) of epoch e. */
STK_API uint64_t stk_order_record(int order, uint64_t records, uint64_t seed, uint64_t epoch,
                                  uint64_t block_records, uint32_t window, uint64_t p);

/* Records per quasi block (0 for other orders). */
STK_API uint64_t stk_reader_quasi_block_records(const stk_reader *r);

#endif /* STOKER_ADVANCED_API */

#ifdef __cplusplus
}
#endif
#endif
