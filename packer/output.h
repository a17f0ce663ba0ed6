/* packer/output.h - the shards of one pack part: naming, rotation, resume.
 *
 * Shards are PREFIX-00000.stk, PREFIX-00001.stk, ... each holding exactly
 * `per_shard` records but the last. Because a shard's content depends only
 * on the records before it, a re-run can keep every committed shard that
 * verifies and continue after the last record it holds. */
#ifndef STOKER_PACKER_OUTPUT_H
#define STOKER_PACKER_OUTPUT_H

#include <pthread.h>
#include <stdbool.h>

#include "stoker/format.h"

/* Full shards are committed (fsync, whole-file hash, rename) on a
 * background thread, so decoding never waits for the disk; at most
 * PK_OUT_PENDING shards wait for it, which bounds the dirty data. The same
 * thread keeps the disk busy meanwhile: every 100 ms it starts writeback of
 * the open shard (sync_file_range), so the fsync at its end finds little
 * left to write, and once PK_OUT_FLUSH_BYTES more of the shard are written
 * it makes them durable (fdatasync). The writer sends images with O_DIRECT,
 * which leaves no dirty pages, but a disk with a volatile cache (every
 * virtual disk) still holds them: a shard's fsync then waits for its whole
 * gigabyte to reach the medium (bench/README.md, pack), the open shard's
 * writes stall behind it, and the last shard's is serial at the end of the
 * run. Flushed as it goes, the fsync finds a small tail. (Doing either on
 * the appending thread would stall it.) */
#define PK_OUT_PENDING 2
#define PK_OUT_FLUSH_BYTES ((uint64_t)64 << 20)

/* Where the output's time went (pack --stats). The writers' own figures are
 * in io; the rest are pk_out's. Read after pk_out_flush or pk_out_abort. */
typedef struct {
    stk_writer_io_stats io;
    double submit_wait; /* appending thread: waited for the committer (PK_OUT_PENDING full) */
    double commit;      /* committer: finishing shards (io.fsync is part of it) */
    double flush;       /* committer: writeback and fdatasync of the open shard */
    uint64_t flushes;   /* its fdatasync calls */
} pk_out_stats;

typedef struct {
    char *dir;
    char prefix[STK_NAME_MAX];
    stk_schema schema;
    int source_field; /* index of the u64 `source` field */
    uint64_t per_shard;
    uint64_t end; /* the listing index this part ends at (pk_out_resume) */
    stk_writer *cur;
    stk_shard_entry *shards; /* committed, in order */
    size_t nshards, cap;
    size_t opened; /* shards started (committed + queued + open) */
    /* the committer */
    pthread_t thread;
    bool thread_on, quit;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    stk_writer *queue[PK_OUT_PENDING];
    size_t qhead, qlen;
    char *open_tmp;             /* the open shard's temporary file, for writeback */
    int zlevel[STK_MAX_FIELDS]; /* compressed fields: zstd level per field */
    uint64_t zblock;            /* compressed fields: block size (0: the writer's) */
    unsigned zthreads;          /* compressed fields: compression threads */
    stk_upload *up;             /* OUT in s3://: each committed shard is queued for upload */
    int error;                  /* sticky: a commit failed */
    stk_error err;
    pk_out_stats stats;
} pk_out;

int pk_out_init(pk_out *o, const char *dir, const char *prefix, const stk_schema *schema, uint64_t per_shard,
                stk_error *err);
/* Keep the committed shards of an interrupted run: each must open, verify
 * completely, have this schema, hold per_shard records whose sources rise
 * inside [first, end). The first that does not is removed with all after it.
 * On return *next is the listing index to continue from, and `gaps` (malloc'd,
 * *ngaps entries) lists the indices in [first, *next) that no kept shard
 * holds: the files skipped before the interruption. Stray temporary files
 * are removed. `note` (may be NULL) hears one line per dropped shard. */
int pk_out_resume(pk_out *o, uint64_t first, uint64_t end, uint64_t *next, uint64_t **gaps, size_t *ngaps,
                  void (*note)(void *, const char *), void *user, stk_error *err);
/* Append one record, lending values[0] to the shard writer
 * (stk_writer_append_lent, with pre its checksum and block sums, or NULL): done(ctx,
 * values[0].data) is called exactly once, on every path, when the bytes are
 * no longer needed. With dims (an array image field: its height and width)
 * the record goes through stk_writer_append_dims, which copies it. */
int pk_out_append(pk_out *o, const stk_value *values, const uint64_t *dims, const stk_prehash *pre,
                  stk_lent_done_fn done, void *ctx, stk_error *err);
/* Commit the open shard, if any, and wait for every pending commit. */
int pk_out_flush(pk_out *o, stk_error *err);
/* Drop the open shard; with remove_committed also delete every committed one. */
void pk_out_abort(pk_out *o, bool remove_committed);
void pk_out_free(pk_out *o);
/* Delete shard files k, k+1, ... up to the first that does not exist. */
void pk_out_remove_from(const pk_out *o, size_t k);
/* Records in committed shards. */
uint64_t pk_out_records(const pk_out *o);
/* malloc'd path of shard k. */
char *pk_out_shard_path(const pk_out *o, size_t k);

#endif
