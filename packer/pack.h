/* packer/pack.h - what pack's own files share: the options, one run's state
 * and the calls between them. pack.c reads the command line and calls the
 * run (pack_run.c), which drives the workers (pack_workers.c) through the
 * pipeline and says what it did (pack_stats.c); pack_files.c (OUTDIR and its
 * listing slices) and pack_meta.c (the record layout, schema and parameters)
 * are below them all. Calls go that one way. */
#ifndef STOKER_PACKER_PACK_H
#define STOKER_PACKER_PACK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cli.h"
#include "ingest.h"
#include "listing.h"
#include "output.h"
#include "pipeline.h"
#include "parts.h"
#include "pool.h"
#include "stoker/format.h"

/* How the image field stores its values (--image-format). */
enum { PK_IMG_RAW = 0, PK_IMG_JPEG = 1, PK_IMG_ORIGINAL = 2 };

/* pack's options, as read from the command line (pack.c). */
typedef struct {
    pk_params img;
    int image_format;      /* PK_IMG_*: how the image field stores its values */
    int quality;           /* JPEG quality for PK_IMG_JPEG and re-encoded PK_IMG_ORIGINAL inputs */
    bool resize_set;       /* --resize was given */
    bool jpeg_baseline;    /* --jpeg-baseline: progressive inputs kept are stored as baseline */
    unsigned jpeg_restart; /* --jpeg-restart: MCUs per restart interval of the JPEG values written; 0 none */
    unsigned threads, part, parts;
    uint64_t shard_size, per_shard;
    int zstd[4]; /* per field (image, label, orig_size, source): 0 raw, else the level */
    uint64_t block_bytes;
    bool fail_fast, merge, force, force_in_place, json, quiet, stats;
    const char *input, *out;
    /* The part came from Slurm's array variables (no --part): what they were,
     * for the message and --json's "part_from"; empty otherwise. */
    char part_from[160];
    /* OUT an s3:// address (pack_remote.c): out is then the local staging
     * directory and url the address; up uploads. NULL for a local OUT. */
    const char *url;
    stk_upload *up;
} pk_opts;

/* An input left out, and why (skipped.tsv). */
typedef struct {
    uint64_t index;
    char *reason;
} pk_skip;

/* One worker's time inside produce and consume (pack --stats), seconds. */
typedef struct {
    double read;        /* produce: reading the input file (waiting for input) */
    double decode;      /* produce: decode, resize, encode */
    double hash;        /* produce: the record's checksum and block sums */
    double pool_wait;   /* consume: waiting for a free image buffer */
    double writer_wait; /* consume: waiting for the writer (its queue, or a shard's commit) */
    double append;      /* consume: the rest of handing the record to the writer */
    double consume;     /* consume: all of it (the ordered, serial part) */
} pk_stage;

/* One run: its listing and output, what it skipped, its figures. */
typedef struct {
    const pk_opts *o;
    pk_listing L;
    stk_schema schema;
    pk_out out;
    pk_skip *skips;
    size_t nskips, capskips;
    uint64_t packed, in_bytes, done;
    uint64_t kept, reencoded; /* --image-format original: inputs stored as they were, and not */
    uint64_t baseline;        /* ... of the kept, progressive ones stored as baseline */
    uint64_t restarted;       /* JPEG values written with restart markers (--jpeg-restart) */
    cli_progress bar;
    stk_error err;
    int fatal;         /* a write failed: stop */
    bool failed_input; /* --on-error fail hit a bad file */
    pk_pool *pool;     /* image buffers: the pipeline's slots and those lent to the writer */
    /* pack --stats: per worker (pipeline and pack's own split), the run */
    unsigned nthreads;
    pk_thread_stats *tstats;
    pk_stage *stages;
    double pipeline_s;
} pk_run;

/* pack_meta.c: the record layout, the schema and the pack's parameters. */
bool pk_variable_images(const pk_opts *o);
size_t pk_image_bytes(const pk_opts *o);
bool pk_lent_whole(const pk_opts *o, size_t img);
uint64_t *pk_block_sums(const pk_opts *o, uint8_t *slot, size_t img);
size_t pk_slot_bytes(const pk_opts *o);
char *pk_pack_json(const pk_run *r, uint64_t per_shard);
uint64_t pk_pack_hash(const pk_run *r, const char *pack_json);
uint64_t pk_records_per_shard(const pk_opts *o, const stk_schema *s);
int pk_make_schema(const pk_opts *o, stk_schema *s);

/* pack_files.c: OUTDIR, its lock, and this part's listing slices. */
int pk_ensure_dir(const char *dir);
bool pk_exists(const char *dir, const char *name);
void pk_remove_in(const char *dir, const char *name);
ino_t pk_manifest_ino(const char *dir);
bool pk_is_dir(const char *path);
stk_dir_lock *pk_lock_out(const pk_opts *o);
void pk_remove_part(const pk_run *r, const pk_opts *o);
int pk_write_slice(const pk_run *r, const char *suffix, uint64_t first, uint64_t end, bool skipped);

/* pack_workers.c: the pipeline's callbacks (user is the pk_run, state a
 * worker's own) and the skipped inputs. */
void *pk_worker_init(void *user, unsigned k);
void pk_worker_fini(void *state);
void pk_prefetch(void *user, uint64_t i);
void pk_produce(void *user, void *state, uint64_t i, uint8_t *slot, pk_result *res);
int pk_consume(void *user, void *state, uint64_t i, uint8_t **slot, const pk_result *res);
bool pk_add_skip(pk_run *r, uint64_t index, const char *reason);
void pk_report_bad(pk_run *r, uint64_t i, const char *msg);

/* pack_stats.c: pack --stats, in the JSON result or as a table on stderr. */
void pk_stats_json(const pk_run *r, double wall);
void pk_stats_text(const pk_run *r, double wall);

/* pack_remote.c: OUT in s3:// through a local staging directory. */
int pk_remote_begin(pk_opts *lo, const pk_opts *o, char *stage, size_t cap);
void pk_remote_end(pk_opts *lo);
int pk_remote_sync_kept(pk_run *r);
int pk_remote_sync_record(const pk_opts *o);
int pk_remote_finish_part(const pk_run *r);
int pk_remote_merge(const pk_opts *o, unsigned parts, pk_merge_result *mr, stk_error *err);
void pk_remote_remove_part(const pk_run *r, const pk_opts *o);
void pk_remote_json(const pk_opts *o);

/* pack_run.c: a pack (or part K of N) and a merge; the exit status. */
int pk_run_pack(const pk_opts *o);
int pk_run_merge(const pk_opts *o);

#endif
